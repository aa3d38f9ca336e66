#!/usr/bin/env bash
# run_device_sdpa.sh — the softmax attention's cuDNN graph forms against torch SDPA in one device
# call: gpu_parity (its cuDNN checks include the exact form), torch's SDPA peers with their backends
# forced one by one (peers.py --sdpa), bench_cuda --only sdpa (the padded, exact and autotuned graphs
# in alternating rounds), the torch peers once more (the peer's spread between the two runs is its
# noise), then, if SLICE=1, the 1M-token slice with 64K chunks (bench_cuda --only slice), and, if
# SANITIZE=1, compute-sanitizer over the lightning kernels (sanitize_lightning.sh).
# Payload: bench/cuda/make_payload.sh BUILD. Usage: run_device_sdpa.sh DIR OUT
set -u
D=$1
OUT=$2
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
cd "$D" || exit 1
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv,noheader

step "gpu_parity"
timeout 170 bin/gpu_parity > "$OUT/parity.log" 2>&1
echo "rc=$? passes: $(grep -c '^PASS' "$OUT/parity.log")"
grep -E "^FAIL|cuDNN|failures" "$OUT/parity.log" | cut -c1-400

step "peers --sdpa (1)"
timeout 120 python3 peers.py "$OUT/peers1.txt" --sdpa > "$OUT/peers1.log" 2>&1
echo "rc=$?"
cat "$OUT/peers1.log"

step "bench_cuda --only sdpa"
timeout 150 bin/bench_cuda --only sdpa --peers "$OUT/peers1.txt" > "$OUT/bench_sdpa.log" 2>&1
echo "rc=$?"
cat "$OUT/bench_sdpa.log"

step "peers --sdpa (2)"
timeout 120 python3 peers.py "$OUT/peers2.txt" --sdpa > "$OUT/peers2.log" 2>&1
echo "rc=$?"
cat "$OUT/peers2.log"

if [ "${SLICE:-0}" = 1 ]; then
  step "slice, 1M tokens, chunks of 64K"
  timeout 200 bin/bench_cuda --only slice --quick --tokens 1048576 --chunk 65536 > "$OUT/slice1m.log" 2>&1
  echo "rc=$?"
  cat "$OUT/slice1m.log"
fi

if [ "${SANITIZE:-0}" = 1 ]; then
  step "compute-sanitizer over the lightning kernels"
  bash ./sanitize_lightning.sh "$D" "$OUT"
fi
step "end"
