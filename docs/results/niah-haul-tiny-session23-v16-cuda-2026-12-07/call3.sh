#!/usr/bin/env bash
# session 23 call 3, never run (no machine started before the session's device time was spent):
# the next call's measurement of the shipped folder's (call 1's EMA) trained needle at 512K / 1M (the shipped mean: 10 / 9 of 22 in
# session 22 on an H100) and one 4M trial at depth 50%, results into $OUT as they are made.
# carry [".dev/niah"].
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
W=/tmp/c3
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$W/call3.log"
sw() { # NAME LIMIT ARGS...
  local name=$1 lim=$2 t0=$(date +%s)
  shift 2
  timeout "$lim" "$N/bin/longhaul" niah --model models/haul-tiny --out "$W/$name" --db "$W/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s" >> "$W/call3.log"
  (cd "$W" && tar -czf "$OUT/call3.tar.gz" --ignore-failed-read */results.jsonl */summary.json *.log)
}
sw trained-512k-1m 170 --lengths 512k,1m --depths 0:100:10 --trials 2
sw trained-4m 150 --lengths 4m --depths 50 --trials 1
cat "$W/call3.log"
