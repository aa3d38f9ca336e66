#!/usr/bin/env bash
# One device call that trains, then measures what it trained against what ships, in the order that
# keeps the most when the call is cut short (the device tool returns what $OUT holds at the limit):
#   1. device_run.sh (FINAL=1): TRAIN_S seconds of train.py from the shipped folder with the flags
#      given, e.g. `--data-version 14 --ema-decay 0.997`; $OUT gets model.tar, model-ema.tar, small.tar
#   2. the cheap held-out sweeps (single facts 1K-64K, 770 trials; multi-key 32K, 40) of the shipped
#      model (the same card's baseline), the EMA and the last weights: about 15 s each model
#   3. bench/cuda/run_device_ship_checks.sh for the EMA and the last weights ($OUT/ship.log)
#   4. the slow sweeps (256K + 1M, 80 s a model; multi-value; which-file), EMA first
# After each sweep $OUT/sweeps.tar.gz is rewritten with every results.jsonl so far.
# Payload: .dev/train from stage.sh, .dev/niah from bench/cuda/make_payload.sh (bin/longhaul.xz, libs/,
# run_device_ship_checks.sh). From the repository root on the device:
#   TRAIN_S=280 bash tools/train_tiny/device_train_and_sweep.sh --data-version 14 --ema-decay 0.997
#   (carry [".dev/train", ".dev/niah"], timeout 600; about 25 + TRAIN_S + 45 + 70 + 270 s)
# INIT / INIT_STATE (paths from .dev/train): the weights and state to start from; default the shipped
# folder and tools/train_tiny/state.json; `stage.sh .dev/train --init` fills .dev/train/init, into
# which a later call's returned model.tar folder and small.tar files can be put (INIT=init
# INIT_STATE=init/state.json).
set -u
N=${NIAH:-.dev/niah}
INIT=${INIT:-../../models/haul-tiny}
INIT_STATE=${INIT_STATE:-../../tools/train_tiny/state.json}
export LD_LIBRARY_PATH=$N/libs:${LD_LIBRARY_PATH:-}
[ -x "$N/bin/longhaul" ] || python3 tools/train_tiny/unxz.py "$N/bin/longhaul.xz"
for f in .dev/train/init/*.xz; do [ -f "$f" ] && python3 tools/train_tiny/unxz.py "$f" && rm -f "$f"; done
FINAL=1 bash .dev/train/tools/train_tiny/device_run.sh "${TRAIN_S:-280}" 0 --init-from "$INIT" \
  --init-state "$INIT_STATE" --eval none "$@" >/dev/null 2>&1
echo "train rc=$?"
tail -2 "$OUT/train.log"
F=tools/train_tiny/heldout_families.json
W=/tmp/sweeps
rm -rf "$W" # a machine kept warm between calls still holds the last call's sweeps and stores
sweep() { # MODEL TAG NAME ARGS...
  local m=$1 tag=$2 name=$3 t0
  shift 3
  t0=$(date +%s)
  mkdir -p "$W/$tag"
  timeout 100 "$N/bin/longhaul" niah --model "$m" --families "$F" --out "$W/$tag/$name" --db "$W/$tag/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@" >"$W/$tag/$name.log" 2>&1
  echo "$tag $name rc=$? $(($(date +%s) - t0))s"
  (cd "$W" && tar -czf "$OUT/sweeps.tar.gz" --ignore-failed-read */*/results.jsonl */*/summary.json */*.log)
}
models=("models/haul-tiny shipped" "/tmp/haul-tiny-ema ema" "/tmp/haul-tiny last")
for p in "${models[@]}"; do
  set -- $p
  [ -d "$1" ] || continue
  sweep "$1" "$2" single-1k-64k --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 --trials 10
  sweep "$1" "$2" multikey-32k --variant multikey --needles 4 --lengths 32k --depths 0:100:25 --trials 8
done
for m in /tmp/haul-tiny-ema /tmp/haul-tiny; do
  [ -d "$m" ] && { echo "== $m"; MODEL=$m timeout 40 bash "$N/run_device_ship_checks.sh"; }
done >>"$OUT/ship.log" 2>&1
for p in "${models[1]}" "${models[2]}" "${models[0]}"; do
  set -- $p
  [ -d "$1" ] || continue
  sweep "$1" "$2" single-256k-1m --lengths 256k,1m --depths 0:100:10 --trials 2
  sweep "$1" "$2" multivalue-32k --variant multivalue --needles 4 --lengths 32k --depths 0:100:25 --trials 8
  sweep "$1" "$2" whichfile-64k --variant whichfile --lengths 64k --depths 0:100:10 --trials 4
done
echo done
