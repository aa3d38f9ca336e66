#!/usr/bin/env bash
# run_device.sh — everything the CUDA backend checks and times on the GPU box, in one call.
#
# Payload layout (made on the development machine by bench/cuda/make_payload.sh):
#   DIR/bin/{gpu_parity,bench_cuda}  DIR/libs/ (carry-libs.sh)  DIR/peers.py  DIR/whl/*.whl (optional)
# Usage: run_device.sh DIR OUT [--quick]
# Logs land in OUT (parity1.log, model.log, parity2.log, peers.log, peers.txt, bench.log); the summary
# goes to stdout. Every step has its own time limit so one hang cannot eat the lease.
set -u
D=$1
OUT=$2
Q=${3:-}
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
cd "$D" || exit 1
step() { printf '\n=== %s (%s)\n' "$1" "$(date +%T)"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total,temperature.gpu \
  --format=csv | tee "$OUT/smi.txt"
nproc

step "gpu_parity (full)"
timeout 150 bin/gpu_parity > "$OUT/parity1.log" 2>&1
echo "rc=$?"
grep -E "^(FAIL|INFO|DIGEST|----)|failures|FATAL|SKIPPED" "$OUT/parity1.log" | cut -c1-160
echo "passes: $(grep -c '^PASS' "$OUT/parity1.log")"

if [ -x bin/nccl_world ]; then
  step "nccl_world (NCCL as a world of one rank; on several GPUs: mpirun -np N bin/nccl_world)"
  timeout 60 bin/nccl_world 2>&1 | tee "$OUT/nccl.log"
  echo "rc=${PIPESTATUS[0]}"
fi

if [ -x bin/gpu_model_parity ]; then
  step "gpu_model_parity (fixtures: GPU vs HF logits and vs the CPU engine)"
  LH_SOURCE_DIR=$(cd ../.. && pwd) timeout 60 bin/gpu_model_parity > "$OUT/model.log" 2>&1
  echo "rc=$?"
  grep -vE '^\s*$' "$OUT/model.log" | cut -c1-170 | tail -n 60
fi

if [ "$Q" != --quick ]; then
  if [ -s peers.txt ]; then
    step "peers: reusing peers.txt carried from an earlier call of this session"
    cp peers.txt "$OUT/peers.txt"
    cat peers.txt
  else
    step "peers"
    if ls whl/*.whl >/dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site whl/*.whl \
        && export PYTHONPATH=/tmp/site
    fi
    timeout 120 python3 peers.py "$OUT/peers.txt" > "$OUT/peers.log" 2>&1
    echo "rc=$?"
    tail -n 12 "$OUT/peers.log"
  fi

  step "bench_cuda"
  timeout 120 bin/bench_cuda --peers "$OUT/peers.txt" > "$OUT/bench.log" 2>&1
  echo "rc=$?"
  cat "$OUT/bench.log"
fi

step "gpu_parity again (run-to-run bits)"
timeout 60 bin/gpu_parity $Q > "$OUT/parity2.log" 2>&1
echo "rc=$?"
n=$(grep -c '^DIGEST' "$OUT/parity2.log")
grep '^DIGEST' "$OUT/parity1.log" | head -"$n" > "$OUT/d1.txt"
grep '^DIGEST' "$OUT/parity2.log" > "$OUT/d2.txt"
if [ -s "$OUT/d1.txt" ] && cmp -s "$OUT/d1.txt" "$OUT/d2.txt"; then
  echo "run-to-run: all $n suites' digests are identical across two processes"
else
  echo "run-to-run: DIGESTS DIFFER or missing"
  paste "$OUT/d1.txt" "$OUT/d2.txt"
fi
grep -E "failures" "$OUT/parity2.log"
