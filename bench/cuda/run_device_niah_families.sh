#!/usr/bin/env bash
# run_device_niah_families.sh — issue 31's NIAH table of models/haul-tiny on the grammar's held-out
# families (tools/train_tiny/heldout_families.json: needle templates, questions, value kinds,
# attributes and keys never trained), through longhaul's CUDA backend, in one device call:
#   single-1k-64k    single fact, 1K-64K, 11 depths x 10 trials (770 trials)
#   single-256k-1m   single fact, 256K and 1M, 11 depths x 2 trials (44)
#   multikey-32k     4 facts planted, one asked, 32K, 5 depths x 8 (40) (session 12)
#   multivalue-32k   one key and attribute planted 4 times, 32K, 5 depths x 8 (40)
#   whichfile-64k    "which file sets ...", 64K, 11 depths x 4 (44)
# About 2-3 minutes on one H200 or H100 for a model of haul-tiny's size (the step-7847 sweeps'
# rates: 1K-32K at about 590K tokens/s, 128K-1M at about 230K); the timeouts bound each sweep.
# Rerun it unchanged for the "after" table: the sweeps' keys (seed, families file, lengths) match.
# Payload: bench/cuda/make_payload.sh BUILD (a CUDA build with -DLH_CAIRO=OFF; copies longhaul and
# this script). On the box, from the repo root (models/, examples/ and tools/ are there):
#   bash .dev/cuda/run_device_niah_families.sh        (carry [".dev/cuda"], timeout_s 600)
# MODEL=DIR sweeps another model folder (default models/haul-tiny), e.g. a copy carried in .dev/cuda.
# $OUT gets niah.log, the two single sweeps' summary.json and families.tar.gz (every sweep's
# results.jsonl, results.csv, summary.json and sweep.json, in a folder per sweep).
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
L=$D/bin/longhaul
M=${MODEL:-models/haul-tiny}
F=tools/train_tiny/heldout_families.json
W=/tmp/niah-families
t0=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(($(date +%s) - t0))"; }
sweep() { # NAME TIMEOUT ARGS...: one sweep into $W/NAME
  local name=$1 limit=$2
  shift 2
  step "$name: $*"
  timeout "$limit" "$L" niah --model "$M" --families "$F" --out "$W/$name" --db "$W/$name.db" \
    --device cuda --chunk 16384 --progress none --force "$@"
  echo "rc=$?"
}
# a fresh folder and stores: a machine kept warm between calls still has the last call's
rm -rf "$W"
mkdir -p "$W"
{
  nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
  sha256sum "$F" "$M/model.safetensors"
  sweep single-1k-64k 150 --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 --trials 10
  sweep single-256k-1m 240 --lengths 256k,1m --depths 0:100:10 --trials 2
  sweep multikey-32k 60 --variant multikey --needles 4 --lengths 32k --depths 0:100:25 --trials 8
  sweep multivalue-32k 60 --variant multivalue --needles 4 --lengths 32k --depths 0:100:25 --trials 8
  sweep whichfile-64k 60 --variant whichfile --lengths 64k --depths 0:100:10 --trials 4
  step end
} 2>&1 | tee "$OUT/niah.log"
cp "$W/single-1k-64k/summary.json" "$OUT/single-1k-64k.json" 2>/dev/null
cp "$W/single-256k-1m/summary.json" "$OUT/single-256k-1m.json" 2>/dev/null
(cd "$W" && tar -czf "$OUT/families.tar.gz" --ignore-failed-read */results.jsonl */results.csv */summary.json \
  */sweep.json)
