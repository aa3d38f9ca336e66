#!/usr/bin/env bash
# session 24 call 1, carry [".dev/train", ".dev/niah"], timeout_s 590:
# - first, alone on the GPU: tools/train_tiny/check_fast.py --device cuda (model.enable_fast_training
#   against transformers' loops: loss and gradients in fp32, then a 2 x 32768 training step timed in
#   both forms, and profiled); $OUT/check_fast.log. The training uses --impl hf (session 25: the
#   fast form is no faster on an H100; as written in session 24 it used fast when the check passed).
# - then in the background, on the same GPU: the shipped weights' (session 23's EMA, step 13769) trained
#   needle at 512K / 1M (22 trials each) and one 4M trial at depth 50% (session 23's call3.sh, never
#   run); $OUT/call3.tar.gz
# - the plain training call: 300 s of data version 16 from the shipped folder and state, EMA 0.997,
#   then the held-out sweeps and ship checks (tools/train_tiny/device_train_and_sweep.sh)
# TRAIN_S (default 300) and CALL_S (default 565: the seconds from the start after which the training
# and sweeps are cut) shorten the call when less device time is left; LONG=0 leaves out the
# background 512K / 1M / 4M sweep.
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
W=/tmp/c3
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$W/call3.log"
IMPL=hf # session 25 timed the fast form on an H100: 0.97x at 2 x 32768, 1.07x at 4 x 16384; what is left
# is where a long step's time goes: torch.profiler's costliest kernels of one 2 x 32768 step
timeout 90 python3 tools/train_tiny/check_fast.py --device cuda --time --time-batch 2 --time-len 32768 \
  --time-reps 2 --profile 20 > "$OUT/check_fast.log" 2>&1
echo "check_fast rc=$? -> --impl $IMPL" | tee -a "$W/call3.log"
sw() { # NAME LIMIT ARGS...
  local name=$1 lim=$2 t0=$(date +%s)
  shift 2
  timeout "$lim" "$N/bin/longhaul" niah --model models/haul-tiny --out "$W/$name" --db "$W/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s" >> "$W/call3.log"
  (cd "$W" && tar -czf "$OUT/call3.tar.gz" --ignore-failed-read */results.jsonl */summary.json *.log)
}
[ "${LONG:-1}" = 1 ] && ( sw trained-512k-1m 300 --lengths 512k,1m --depths 0:100:10 --trials 2
  sw trained-4m 150 --lengths 4m --depths 50 --trials 1 ) &
TRAIN_S=${TRAIN_S:-300} timeout $((${CALL_S:-565} - SECONDS)) bash tools/train_tiny/device_train_and_sweep.sh --data-version 16 --ema-decay 0.997 --impl "$IMPL"
wait
cat "$W/call3.log"
