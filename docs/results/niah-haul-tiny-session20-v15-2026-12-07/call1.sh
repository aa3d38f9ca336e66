#!/usr/bin/env bash
# session 20 call A: train data v15 (device_train_and_sweep.sh) while the shipped folder's missing
# CUDA rows run beside it on the same GPU (trained needle 512K/1M/4M, multi-value 32K, which-file 64K)
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/side.txt"
F=tools/train_tiny/heldout_families.json
S=/tmp/side
rm -rf "$S"; mkdir -p "$S"
side() {
  local name=$1 lim=$2 t0=$(date +%s)
  shift 2
  timeout "$lim" "$N/bin/longhaul" niah --model models/haul-tiny --out "$S/$name" --db "$S/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" > "$S/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s" >> "$S/side.log"
  (cd /tmp && tar -czf "$OUT/side.tar.gz" --ignore-failed-read side/*/results.jsonl side/*/summary.json side/*.log)
}
(
  side trained-512k-1m 170 --lengths 512k,1m --depths 0:100:10 --trials 2
  side multivalue-32k 60 --families "$F" --variant multivalue --needles 4 --lengths 32k --depths 0:100:25 --trials 8
  side whichfile-64k 60 --families "$F" --variant whichfile --lengths 64k --depths 0:100:10 --trials 4
  side trained-4m 230 --lengths 4m --depths 0:100:50 --trials 1
) &
TRAIN_S=${TRAIN_S:-270} timeout 555 bash tools/train_tiny/device_train_and_sweep.sh --data-version 15 --ema-decay 0.997
echo "main rc=$?"
wait
rm -f "$OUT/log/loss.png"
cat "$S/side.log"
