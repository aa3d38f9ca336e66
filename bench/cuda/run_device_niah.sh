#!/usr/bin/env bash
# run_device_niah.sh — issue 6's measurement of models/haul-tiny through longhaul's own engine
# (CUDA backend, held-out haystack and keys, greedy), in one device call. The sweeps take about
# 214 s on the step-5045 weights (docs/results/niah-haul-tiny-step5045-cuda-2026-12-01) plus about
# 2 minutes for 64K's 20 trials per depth cell, enough to tell 95% per cell from 90%.
# Payload: bench/cuda/make_payload.sh BUILD (copies longhaul and this script). On the box:
#   bash .dev/cuda/run_device_niah.sh      (from the repo root, so models/ and examples/ are there;
#                                           give the call timeout_s 600)
# $OUT gets 8 files (the most the run tool returns): each sweep's results.csv and summary.json
# (the 64K sweep's and the multi-key sweep's CSV only) and the log of the call.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
L=$D/bin/longhaul
t0=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(($(date +%s) - t0))"; }
sweep() { # NAME TIMEOUT ARGS...: one sweep into /tmp/niah-NAME, its files copied to $OUT
  local name=$1 limit=$2
  shift 2
  step "$name: $*"
  timeout "$limit" "$L" niah --model models/haul-tiny --out "/tmp/niah-$name" --device cuda --chunk 16384 \
    --progress none --force "$@"
  echo "rc=$?"
  cp "/tmp/niah-$name/results.csv" "$OUT/$name.csv" 2>/dev/null
}
{
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
  sweep single-1k-32k 120 --lengths 1k,2k,4k,8k,16k,32k --depths 0:100:10 --trials 10
  cp /tmp/niah-single-1k-32k/summary.json "$OUT/single-1k-32k.json" 2>/dev/null
  sweep single-64k 200 --lengths 64k --depths 0:100:10 --trials 20
  sweep multikey-32k 60 --variant multikey --lengths 32k --depths 0:100:25 --trials 8
  sweep single-128k-1m 280 --lengths 128k,256k,512k,1m --depths 0:100:10 --trials 2
  cp /tmp/niah-single-128k-1m/summary.json "$OUT/single-128k-1m.json" 2>/dev/null
  step end
} 2>&1 | tee "$OUT/niah.log"
