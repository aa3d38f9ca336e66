#!/usr/bin/env bash
# session 20 call C: the candidate mean(shipped, call B's EMA), swapped into models/haul-tiny for this call
set -u
N=.dev/niah
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz" >/dev/null
F=tools/train_tiny/heldout_families.json
W=/tmp/sweeps/mean; rm -rf /tmp/sweeps; mkdir -p $W
sw() { local name=$1 t0=$(date +%s); shift
  "$N/bin/longhaul" niah --model models/haul-tiny --families "$F" --out "$W/$name" --db "$W/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" >"$W/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s"; grep -E "accuracy" "$W/$name.log" | head -9
  (cd /tmp/sweeps && tar -czf "$OUT/sweeps.tar.gz" --ignore-failed-read */*/results.jsonl */*/summary.json */*.log); }
nvidia-smi --query-gpu=name --format=csv,noheader
sw single-1k-64k --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 --trials 10
sw multikey-32k --variant multikey --needles 4 --lengths 32k --depths 0:100:25 --trials 8
MODEL=models/haul-tiny timeout 60 bash "$N/run_device_ship_checks.sh" > "$OUT/ship.log" 2>&1; cat "$OUT/ship.log"
sw multivalue-32k --variant multivalue --needles 4 --lengths 32k --depths 0:100:25 --trials 8
sw whichfile-64k --variant whichfile --lengths 64k --depths 0:100:10 --trials 4
sw single-256k-1m --lengths 256k,1m --depths 0:100:10 --trials 2
