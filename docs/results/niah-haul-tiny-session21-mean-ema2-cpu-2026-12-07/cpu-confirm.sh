#!/usr/bin/env bash
# Session 21: the confirmatory CPU sweeps behind shipping mean(session 16's mean, session 20's ema2),
# on this repository's 2-core development machine, from the repository root.
#   SHIPPED: a folder with the weights shipped before (git show 4106f73:models/haul-tiny/model.safetensors)
#   CAND:    tools/train_tiny/average.py --weights 0.5,0.5 CAND models/haul-tiny(4106f73) EMA2
#            (EMA2: git show 2ce518a:tools/train_tiny/results/session20-ema2/model.safetensors.xz, unxz.py)
# Each single-fact sweep is about 14 minutes on 2 cores; the rest a few minutes.
set -eu
SHIPPED=${SHIPPED:?} CAND=${CAND:?} W=${W:-/tmp/sw}
F=tools/train_tiny/heldout_families.json
for m in shipped cand; do
  M=$SHIPPED; [ $m = cand ] && M=$CAND
  # the test set: a seed no earlier sweep used (the candidate was picked on seed 20261201, trials 0-5)
  build/longhaul niah --model "$M" --families $F --lengths 1k,2k,4k,8k,16k,32k,64k --depths 0:100:10 \
    --trials 10 --seed 20261207 --chunk 4096 --cpu-attention auto --out $W/$m --progress plain
  build/longhaul niah --model "$M" --lengths 4k,16k,64k --depths 0:100:25 --trials 2 --chunk 4096 \
    --cpu-attention auto --out $W/trained-$m --progress none
  build/longhaul niah --model "$M" --families $F --variant multikey --needles 4 --lengths 32k --depths 0:100:25 \
    --trials 8 --chunk 4096 --cpu-attention auto --out $W/multikey-$m --progress none
  build/longhaul niah --model "$M" --lengths 128k,256k --depths 0:100:25 --trials 1 --chunk 8192 \
    --cpu-attention auto --out $W/long-$m --progress none
  bash tools/train_tiny/demo_probe.sh "$M" build/longhaul
  build/longhaul run examples/demo.jsonl --model "$M" --out $W/demo-$m --chunk 2048 --cpu-attention auto --force
done
