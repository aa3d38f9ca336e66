#!/usr/bin/env bash
# run_device_ranks.sh — issue 10 on a one-GPU machine, in one device call: the CUDA backend split
# over ranks (engine/backends/cuda/tp.cu), with 2 and 4 ranks sharing the one GPU (so their sums go
# through the host transport; NCCL needs a GPU per rank), against HF and the one-GPU backend; and a
# check that the one-GPU path is unchanged. About 3-4 minutes.
#   1. gpu_model_parity: the one-GPU backend against HF and the CPU (as before the split);
#   2. gpu_ranks as 2 and as 4 ranks over TCP (tests/gpu/gpu_ranks.c says what it checks), with the
#      MoE split by experts (expert parallel) and by width (LH_CUDA_MOE_SPLIT=width);
#   3. bench_cuda --only slice at 64K tokens on one GPU (the speed of the one-GPU path, against
#      bench/NOTES.md), then the real-width slice at 16K tokens on 1, 2 and 4 ranks: the one-GPU run
#      writes its last logits, the ranks' runs are held against them (--logits), and the time says
#      what the host transport costs (its sums cross a TCP socket: not the NCCL number);
#   4. bench_cuda --only moe: the MoE op on one GPU, and one rank's expert GEMMs over R = 2, 4, 8 for
#      both splits (the compute half of "expert parallel or tensor-parallel experts: measure both").
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
  for SPLIT in experts width; do
    for R in 2 4; do
      step "gpu_ranks over $R ranks, MoE split by $SPLIT (one GPU, host transport)"
      LH_CUDA_MOE_SPLIT=$SPLIT LH_CUDA_TP_TRANSPORT=host timeout 150 bash tests/engine/tcp_world.sh "$R" "$D/bin/gpu_ranks"
      echo "rc=$?"
    done
  done
  step "bench_cuda slice, one GPU, 64K tokens"
  timeout 120 "$D/bin/bench_cuda" --only slice --tokens 65536 --chunk 16384 --quick > /tmp/slice1.log 2>&1
  echo "rc=$?"
  grep -v "^    " /tmp/slice1.log
  for RS in 1:experts 2:experts 4:experts 2:width 4:width; do
    R=${RS%%:*} SPLIT=${RS#*:}
    step "bench_cuda slice over $R rank(s) on one GPU, MoE split by $SPLIT, 16K tokens, logits against one GPU's (host transport)"
    LH_CUDA_MOE_SPLIT=$SPLIT LH_CUDA_TP_TRANSPORT=host timeout 200 bash tests/engine/tcp_world.sh "$R" "$D/bin/bench_cuda" \
      --only slice --tokens 16384 --chunk 4096 --quick --logits /tmp/slice16k.logits > /tmp/slice_r$R.log 2>&1
    echo "rc=$?"
    grep -v "^    \|^| decode\|^## decode\|^| what\|^$" /tmp/slice_r$R.log
  done
  step "bench_cuda --only moe, 16K-token chunk: the MoE op, and one rank's expert GEMMs for R = 2, 4, 8 by both splits"
  timeout 120 "$D/bin/bench_cuda" --only moe --chunk 16384 > /tmp/moe.log 2>&1
  echo "rc=$?"
  cat /tmp/moe.log
  step end
} 2>&1 | tee "$OUT/ranks.log"
