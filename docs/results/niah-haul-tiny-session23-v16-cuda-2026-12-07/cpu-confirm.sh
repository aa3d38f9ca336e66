#!/usr/bin/env bash
# Session 23: the CPU checks behind shipping call 1's EMA (data v16, step 13769), on the 2-core
# development machine from the repository root, after the device's second call never started:
#   CAND: call 1's model-ema.tar folder (haul-tiny-ema); SHIPPED: models/haul-tiny before this session
# 1. the 770 held-out single facts 1K-64K on a seed no sweep has used (20261223), both models
# 2. the trained needle at 128K / 256K (5 each) of the candidate (the shipped weights: 5 / 4 in session 21)
# 3. demo_probe.sh and make demo's batch with the candidate
set -eu
SHIPPED=${SHIPPED:-models/haul-tiny} CAND=${CAND:?} W=${W:-/tmp/sw23}
F=tools/train_tiny/heldout_families.json
for m in shipped cand; do
  M=$SHIPPED; [ $m = cand ] && M=$CAND
  build/longhaul niah --model "$M" --families $F --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 \
    --trials 10 --seed 20261223 --chunk 4096 --cpu-attention auto --out $W/single-$m --progress none
done
build/longhaul niah --model "$CAND" --lengths 128k,256k --depths 0:100:25 --trials 1 --chunk 8192 \
  --cpu-attention auto --out $W/long-cand --progress none
bash tools/train_tiny/demo_probe.sh "$CAND" build/longhaul
build/longhaul run examples/demo.jsonl --model "$CAND" --out $W/demo-cand --chunk 2048 --cpu-attention auto --force
