#!/usr/bin/env bash
# session 23 call 2: no training. Call 1's EMA (data v16, step 13769; payload .dev/cand, its
# model.safetensors xz'd) against the shipped folder on the same GPU, before shipping it:
#   1. held-out single facts 1K-64K on a seed no session has swept (20261223, 20 trials a cell: 1540)
#   2. the EMA's trained needle at 512K / 1M (the shipped weights: 10 / 9 of 22 in session 22, H100)
#   3. the shipped weights' held-out 256K / 1M (the EMA's: 6 / 2 of 22 in call 1)
#   4. one trained-needle 4M trial of the EMA at depth 50%, while time lasts
# Every result lands in $OUT as it is made (call2.tar.gz). carry [".dev/niah", ".dev/cand"].
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
python3 tools/train_tiny/unxz.py .dev/cand/model.safetensors.xz
F=tools/train_tiny/heldout_families.json
W=/tmp/c2
rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$W/call2.log"
sw() { # MODEL NAME LIMIT ARGS...
  local m=$1 name=$2 lim=$3 t0=$(date +%s)
  shift 3
  timeout "$lim" "$N/bin/longhaul" niah --model "$m" --out "$W/$name" --db "$W/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" > "$W/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s" >> "$W/call2.log"
  (cd "$W" && tar -czf "$OUT/call2.tar.gz" --ignore-failed-read */results.jsonl */summary.json *.log)
}
H="--families $F --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 --trials 20 --seed 20261223"
sw models/haul-tiny shipped-single-1k-64k-s7 60 $H
sw .dev/cand ema-single-1k-64k-s7 60 $H
sw .dev/cand ema-trained-512k-1m 220 --lengths 512k,1m --depths 0:100:10 --trials 2
sw models/haul-tiny shipped-single-256k-1m 100 --families $F --lengths 256k,1m --depths 0:100:10 --trials 2
sw .dev/cand ema-trained-4m 200 --lengths 4m --depths 50 --trials 1
cat "$W/call2.log"
