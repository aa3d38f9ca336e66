#!/bin/bash
# One training call on the GPU box, run from the payload folder that stage.sh filled.
#   bash device_run.sh TRAIN_SECONDS EVAL_SECONDS [extra train.py flags...]
# Resumes from ./st (the full state a previous call returned) when it holds run.json; writes the
# new state, run.json, loss.png and eval.json to $OUT/st and the log to $OUT/train.log (8 files:
# what the device tool returns at most).
set -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
budget=$1 evalb=$2
shift 2
mkdir -p "$OUT/st"
if [ -f st/run.json ]; then cp st/weights-* st/moments-* st/run.json "$OUT/st/"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
python3 tools/train_tiny/train.py --corpus corpus --tokenizer-dir tok --out-model /tmp/haul-tiny \
    --state-dir "$OUT/st" --log-dir "$OUT/st" --budget-s "$budget" --eval full --eval-budget-s "$evalb" \
    --workers 12 "$@" 2>&1 | grep --line-buffered -v 'Loading weights\|Writing model shards' | tee "$OUT/train.log"
