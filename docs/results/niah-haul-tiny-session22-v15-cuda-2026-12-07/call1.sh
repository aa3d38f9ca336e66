#!/usr/bin/env bash
# session 22 call 1: train data v15 on from the shipped folder (session 21's mean of session 16's mean
# and ema2) with device_train_and_sweep.sh, whose "shipped" sweep is the first CUDA number for these
# weights; beside it on the same GPU, the shipped weights' trained needle at 512K / 1M and one 4M trial.
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
S=/tmp/side
rm -rf "$S"; mkdir -p "$S"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$S/side.log"
side() {
  local name=$1 lim=$2 t0=$(date +%s)
  shift 2
  timeout "$lim" "$N/bin/longhaul" niah --model models/haul-tiny --out "$S/$name" --db "$S/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" > "$S/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s" >> "$S/side.log"
  (cd /tmp && tar -czf "$OUT/side.tar.gz" --ignore-failed-read side/*/results.jsonl side/*/summary.json side/*.log)
}
(
  side trained-512k-1m 200 --lengths 512k,1m --depths 0:100:10 --trials 2
  side trained-4m 240 --lengths 4m --depths 50 --trials 1
) &
TRAIN_S=${TRAIN_S:-300} timeout 555 bash tools/train_tiny/device_train_and_sweep.sh --data-version 15 --ema-decay 0.997
echo "main rc=$?"
wait
rm -rf "$OUT/log"
cat "$S/side.log"
