#!/usr/bin/env bash
# run_device_4m.sh — one device call for issue 8's "4M-token prefill of the slice" row: the
# 8-layer real-width slice prefilled to 2^22 tokens in 64K chunks (KV 16 GiB for its one softmax
# layer), once, then decode after it. Predicted (bench/NOTES.md v4 rates): about 480 s of softmax
# attention plus 48 s of linear layers, so close to the call's 600 s; bench_cuda prints the time
# at every 512K tokens, so a run cut short still says how far it got. Nothing else runs.
# Payload: bench/cuda/make_payload.sh BUILD WHEELS (this script is copied there). On the box:
#   bash .dev/cuda/run_device_4m.sh        (logs under $OUT; give the call timeout_s 600)
set -u
D=$(cd "$(dirname "$0")" && pwd)
cd "$D"
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
timeout 590 stdbuf -oL bin/bench_cuda --only slice --quick --tokens 4194304 --chunk 65536 > "$OUT/slice4m.log" 2>&1
echo "rc=$?"
cat "$OUT/slice4m.log"
