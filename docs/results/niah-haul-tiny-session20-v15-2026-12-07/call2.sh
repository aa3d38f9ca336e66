#!/usr/bin/env bash
# session 20 call B: v15 on from call A's EMA (swapped into models/haul-tiny and tools/train_tiny for
# this call only), and the trained needle at 4M (one trial, depth 50) for call A's EMA beside it
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
S=/tmp/side
rm -rf "$S"; mkdir -p "$S"; cp -r models/haul-tiny /tmp/ema1
(
  t0=$(date +%s)
  timeout 480 "$N/bin/longhaul" niah --model /tmp/ema1 --out "$S/trained-4m" --db "$S/trained-4m.db" \
    --device cuda --chunk 16384 --progress plain --force --lengths 4m --depths 50 --trials 1 > "$S/trained-4m.log" 2>&1
  echo "trained-4m rc=$? $(($(date +%s) - t0))s" >> "$S/side.log"
  (cd /tmp && tar -czf "$OUT/side.tar.gz" --ignore-failed-read side/*/results.jsonl side/*/summary.json side/*.log)
) &
TRAIN_S=${TRAIN_S:-300} timeout 565 bash tools/train_tiny/device_train_and_sweep.sh --data-version 15 --ema-decay 0.997
echo "main rc=$?"
wait
rm -f "$OUT/log/loss.png"
cat "$S/side.log"
