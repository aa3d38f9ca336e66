#!/bin/bash
# One training call on the GPU box, run from the payload folder that stage.sh filled.
#   bash device_run.sh TRAIN_SECONDS EVAL_SECONDS [extra train.py flags...]
# Resumes from ./st (the full state a previous call returned) when it holds run.json.
# Default (a call to be resumed): writes the new full state, run.json, loss.png and eval.json to
# $OUT/st and the log to $OUT/train.log (8 files: what the device tool returns at most).
# FINAL=1 (the session's last call): keeps the full state on the device and returns instead
# $OUT/model.tar (the exported bf16 model folder), $OUT/small.tar (state.json, history.jsonl,
# calls.json for tools/train_tiny/, and run.json), $OUT/log/{loss.png,eval.json}, $OUT/train.log.
set -o pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
budget=$1 evalb=$2
shift 2
if [ "${FINAL:-0}" = 1 ]; then
    sd=/tmp/st ld="$OUT/log" small=(--state-json /tmp/small/state.json)
    mkdir -p /tmp/small
else
    sd="$OUT/st" ld="$OUT/st" small=()
fi
mkdir -p "$sd" "$ld"
if [ -f st/run.json ]; then
    cp st/weights-* st/run.json "$sd/"
    cp st/moments-* "$sd/" 2>/dev/null || echo "no AdamW moments in st/: fresh optimizer, 30-step warm-up"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
python3 tools/train_tiny/train.py --corpus corpus --tokenizer-dir tok --out-model /tmp/haul-tiny \
    --state-dir "$sd" --log-dir "$ld" --budget-s "$budget" --eval full --eval-budget-s "$evalb" \
    --workers 12 "${small[@]}" "$@" 2>&1 | grep --line-buffered -v 'Loading weights\|Writing model shards' | tee "$OUT/train.log"
rc=$?
if [ "${FINAL:-0}" = 1 ]; then
    tar -C /tmp -cf "$OUT/model.tar" haul-tiny
    cp "$sd/run.json" /tmp/small/ 2>/dev/null
    tar -C /tmp -cf "$OUT/small.tar" small
fi
exit $rc
