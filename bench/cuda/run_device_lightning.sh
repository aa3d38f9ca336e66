#!/usr/bin/env bash
# run_device_lightning.sh — the lightning core's checks and timings in one device call: gpu_parity
# (and every variant build's bin/gpu_parity_*), gpu_model_parity, the lightning peers (peers.py
# --lightning, fla when its wheels are carried), then bench_cuda --only lightning for bin/bench_cuda
# and for every variant build bin/bench_cuda_* (for example gpu_parity and bench_cuda built with
# -DCMAKE_CUDA_FLAGS=-DLW_WG_TANH=0, copied in as bin/gpu_parity_exact and bin/bench_cuda_exact;
# bench/NOTES.md, sessions 11 and 12). The peers take about a minute more with fla at 256K and 1M
# tokens; pass an earlier peers file to bench_cuda by hand to skip them.
# Payload: bench/cuda/make_payload.sh BUILD [WHEELS], then copy variant binaries into .dev/cuda/bin.
# Usage: run_device_lightning.sh DIR OUT
set -u
D=$1
OUT=$2
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
cd "$D" || exit 1
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

step "gpu_parity"
timeout 150 bin/gpu_parity > "$OUT/parity1.log" 2>&1
echo "rc=$? passes: $(grep -c '^PASS' "$OUT/parity1.log")"
grep -E "^FAIL|kernel lightning|failures" "$OUT/parity1.log" | cut -c1-160

for p in bin/gpu_parity_*; do # variant builds (bench/NOTES.md, sessions 11 and 12)
  [ -x "$p" ] || continue
  step "$p"
  timeout 150 "$p" > "$OUT/$(basename "$p").log" 2>&1
  echo "rc=$? passes: $(grep -c '^PASS' "$OUT/$(basename "$p").log")"
  grep -E "^FAIL|failures" "$OUT/$(basename "$p").log" | cut -c1-160
done

step "gpu_model_parity"
LH_SOURCE_DIR=$(cd ../.. && pwd) timeout 60 bin/gpu_model_parity > "$OUT/model.log" 2>&1
echo "rc=$? $(tail -1 "$OUT/model.log")"

step "peers (lightning only)"
if ls whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
timeout 300 python3 peers.py "$OUT/peers.txt" --lightning > "$OUT/peers.log" 2>&1
echo "rc=$?"
cat "$OUT/peers.txt"

for b in bin/bench_cuda bin/bench_cuda_*; do
  [ -x "$b" ] || continue
  step "$b --only lightning"
  timeout 240 "$b" --only lightning --peers "$OUT/peers.txt" > "$OUT/$(basename "$b").log" 2>&1
  echo "rc=$?"
  grep -E "^\| (lightning core|  vs|  cut|  \+)" "$OUT/$(basename "$b").log" | cut -c1-170
done
