#!/usr/bin/env bash
# Session 18's one device call (scratch, not committed): GPU parity of the YaRN fixtures, a short
# (no training: device starts were too scarce) sweeps: shipped vs shipped+YaRN (rope_scaling yarn, factor 32 on
# the lowest RoPE pair) at 256K/1M and 1K-64K, ship checks, then the trained weights.
set -u
N=.dev/niah
python3 tools/train_tiny/unxz.py $N/bin/longhaul.xz $N/bin/gpu_model_parity.xz $N/libs/*.xz >/dev/null
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpu.txt" 2>&1
LH_SOURCE_DIR=$PWD LH_TEST_VERBOSE=1 timeout 120 $N/bin/gpu_model_parity > "$OUT/gpu_model_parity.log" 2>&1
echo "gpu_model_parity rc=$?" >> "$OUT/gpu_model_parity.log"
yarnify() { # SRC DST: the folder with rope_scaling yarn on the lowest pair
  rm -rf "$2"; cp -r "$1" "$2"
  python3 - "$2/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32768,
                     "beta_fast": 1.5, "beta_slow": 1.0, "attention_factor": 1.0}
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
}
yarnify models/haul-tiny /tmp/haul-tiny-shipped-yarn
F=tools/train_tiny/heldout_families.json
W=/tmp/sweeps
sweep() { # MODEL TAG NAME ARGS...
  local m=$1 tag=$2 name=$3 t0
  shift 3
  t0=$(date +%s)
  mkdir -p "$W/$tag"
  timeout 100 "$N/bin/longhaul" niah --model "$m" --families "$F" --out "$W/$tag/$name" --db "$W/$tag/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" >"$W/$tag/$name.log" 2>&1
  echo "$tag $name rc=$? $(($(date +%s) - t0))s" >> "$W/times.txt"
  (cd "$W" && tar -czf "$OUT/sweeps.tar.gz" --ignore-failed-read times.txt */*/results.jsonl */*/summary.json */*.log)
}
S1K="--lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 --trials 10"
SMK="--variant multikey --needles 4 --lengths 32k --depths 0:100:25 --trials 8"
SLONG="--lengths 256k,1m --depths 0:100:10 --trials 2"
sweep /tmp/haul-tiny-shipped-yarn shipped-yarn single-256k-1m $SLONG
sweep models/haul-tiny shipped single-256k-1m $SLONG
sweep /tmp/haul-tiny-shipped-yarn shipped-yarn single-1k-64k $S1K
sweep models/haul-tiny shipped single-1k-64k $S1K
for m in /tmp/haul-tiny-ema /tmp/haul-tiny; do
  [ -d "$m" ] || continue
  t=$(basename $m); sweep $m $t single-1k-64k $S1K; sweep $m $t multikey-32k $SMK
done
for m in /tmp/haul-tiny-shipped-yarn /tmp/haul-tiny-ema /tmp/haul-tiny; do
  [ -d "$m" ] && { echo "== $m"; MODEL=$m timeout 40 bash "$N/run_device_ship_checks.sh"; }
done >>"$OUT/ship.log" 2>&1
sweep /tmp/haul-tiny-shipped-yarn shipped-yarn multikey-32k $SMK
sweep models/haul-tiny shipped multikey-32k $SMK
for m in /tmp/haul-tiny-ema /tmp/haul-tiny; do
  [ -d "$m" ] || continue
  yarnify $m $m-yarn; t=$(basename $m)
  sweep $m-yarn $t-yarn single-256k-1m $SLONG
done
sweep /tmp/haul-tiny-shipped-yarn shipped-yarn single-256k-t6 --lengths 256k --depths 0:100:10 --trials 6
sweep models/haul-tiny shipped single-256k-t6 --lengths 256k --depths 0:100:10 --trials 6
sweep /tmp/haul-tiny-shipped-yarn shipped-yarn multivalue-32k --variant multivalue --needles 4 --lengths 32k --depths 0:100:25 --trials 8
echo done >> "$W/times.txt"
(cd "$W" && tar -czf "$OUT/sweeps.tar.gz" --ignore-failed-read times.txt */*/results.jsonl */*/summary.json */*.log)
