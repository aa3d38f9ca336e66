#!/usr/bin/env bash
# run_device_long.sh — one device call for the issue-8 numbers at length: gpu_parity (which also
# checks the cuDNN prefill path), the peers (peers.py, then transformers on the slice: slice_hf.py),
# bench_cuda (32K slice, attention incl. cuDNN rows and a 16K-query chunk at 1M keys), then the
# 1M-token slice with 64K chunks, once without and once with a checkpoint after every chunk
# (SQLite on the box's disk), and decode after it. About 7 minutes in all.
# Payload: bench/cuda/make_payload.sh BUILD WHEELS (this script is copied there). Usage on the box:
#   [SECTIONS=attention,slice] bash .dev/cuda/run_device_long.sh      (logs under $OUT)
set -u
D=$(cd "$(dirname "$0")" && pwd)
cd "$D"
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
t0=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(($(date +%s) - t0))"; }
step device
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader
step gpu_parity
timeout 140 bin/gpu_parity > "$OUT/parity.log" 2>&1
echo "rc=$?"
grep -E "^(FAIL|INFO)|failures|FATAL|cuDNN" "$OUT/parity.log" | cut -c1-220 | head -40
echo "passes: $(grep -c '^PASS' "$OUT/parity.log")"
step peers
if ls whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site whl/*.whl &&
    export PYTHONPATH=/tmp/site
fi
timeout 100 python3 peers.py "$OUT/peers.txt" > "$OUT/peers.log" 2>&1
echo "rc=$?"
tail -n 12 "$OUT/peers.log"
step "transformers on the slice (peer; fitted and extrapolated past what is measured)"
timeout 240 python3 slice_hf.py "$OUT/slice_hf.txt" --tokens "${HF_TOKENS:-4096,8192}" > "$OUT/slice_hf.log" 2>&1
echo "rc=$?"
tail -n 5 "$OUT/slice_hf.log"
cat "$OUT/slice_hf.txt" >> "$OUT/peers.txt" 2> /dev/null
step bench_cuda
timeout 170 bin/bench_cuda --peers "$OUT/peers.txt" --only "${SECTIONS:-lightning,attention,moe,slice}" > "$OUT/bench.log" 2>&1
echo "rc=$?"
cat "$OUT/bench.log"
step "slice, 1M tokens"
timeout 200 bin/bench_cuda --peers "$OUT/peers.txt" --only slice --quick --tokens 1048576 --chunk 65536 --checkpoint /tmp/lh-slice-1m.db \
  > "$OUT/slice1m.log" 2>&1
echo "rc=$?"
cat "$OUT/slice1m.log"
step end
