#!/usr/bin/env bash
# run_device_ranks.sh — issue 10 on a one-GPU machine, in one device call: the CUDA backend split
# over ranks (kernels/cuda/tp.cu), with 2 and 4 ranks sharing the one GPU (so their sums go
# through the host transport; NCCL needs a GPU per rank), against HF and the one-GPU backend; and a
# check that the one-GPU path is unchanged. About 3-4 minutes.
#   1. gpu_model_parity: the one-GPU backend against HF and the CPU (as before the split);
#   2. gpu_ranks as 2 and as 4 ranks over TCP (tests/gpu/gpu_ranks.c says what it checks);
#   3. bench_cuda --only slice at 64K tokens on one GPU (the speed of the one-GPU path, against
#      bench/NOTES.md), then the real-width slice at 16K tokens on 1, 2 and 4 ranks: the one-GPU run
#      writes its last logits, the ranks' runs are held against them (--logits), and the time says
#      what the host transport costs (its sums cross a TCP socket: not the NCCL number).
# Payload: bench/cuda/make_payload.sh BUILD (copies the binaries and this script). On the box, from
# the repo root (so models/ and tests/fixtures/ are there):
#   bash .dev/cuda/run_device_ranks.sh        (give the call timeout_s 600; logs under $OUT)
# On a machine with several GPUs, the NCCL runs are `mpirun -np R .dev/cuda/bin/gpu_ranks` and
# `mpirun -np R .dev/cuda/bin/bench_cuda --only slice --tokens N` for R = 1, 2, 4, 8.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
export LH_SOURCE_DIR=$PWD LH_TEST_VERBOSE=1
t0=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(($(date +%s) - t0))"; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
  step "gpu_model_parity (one GPU)"
  timeout 240 "$D/bin/gpu_model_parity" > /tmp/gpu_model_parity.log 2>&1
  echo "rc=$?"
  tail -n 25 /tmp/gpu_model_parity.log
  for R in 2 4; do
    step "gpu_ranks over $R ranks (one GPU, host transport)"
    LH_CUDA_TP_TRANSPORT=host timeout 150 bash tests/engine/tcp_world.sh "$R" "$D/bin/gpu_ranks"
    echo "rc=$?"
  done
  step "bench_cuda slice, one GPU, 64K tokens"
  timeout 120 "$D/bin/bench_cuda" --only slice --tokens 65536 --chunk 16384 --quick > /tmp/slice1.log 2>&1
  echo "rc=$?"
  grep -v "^    " /tmp/slice1.log
  for R in 1 2 4; do
    step "bench_cuda slice over $R rank(s) on one GPU, 16K tokens, logits against one GPU's (host transport)"
    LH_CUDA_TP_TRANSPORT=host timeout 200 bash tests/engine/tcp_world.sh "$R" "$D/bin/bench_cuda" --only slice \
      --tokens 16384 --chunk 4096 --quick --logits /tmp/slice16k.logits > /tmp/slice_r$R.log 2>&1
    echo "rc=$?"
    grep -v "^    " /tmp/slice_r$R.log
  done
  step end
} 2>&1 | tee "$OUT/ranks.log"
