#!/usr/bin/env bash
# Session 24, no device time (machines paused): the shipped weights' (session 23's EMA, step 13769)
# trained needle at 512K on the 2-core development machine, CPU engine, 5 depths x 1 trial (the CUDA
# number of the weights before: 10 of 22 at 512K). From the repository root; about 20-30 minutes.
set -eu
W=${W:-/tmp/sw24}
build/longhaul niah --model models/haul-tiny --lengths 512k --depths 0:100:25 --trials 1 --chunk 8192 \
  --cpu-attention auto --out $W/trained-512k --progress none
