#!/bin/bash
# One training call on the GPU box, run from the payload folder that stage.sh filled.
#   bash device_run.sh TRAIN_SECONDS EVAL_SECONDS [extra train.py flags...]
# Resumes from ./st (the full state a previous call returned) when it holds run.json.
# Default (a call to be resumed): writes the new full state, run.json, loss.png and eval.json to
# $OUT/st and the log to $OUT/train.log (8 files: what the device tool returns at most).
# FINAL=1 (the session's last call): keeps the full state on the device and returns instead
# $OUT/model.tar (the exported bf16 model folder; with --ema-decay also $OUT/model-ema.tar), $OUT/small.tar (state.json, history.jsonl,
# calls.json for tools/train_tiny/, and run.json), $OUT/log/{loss.png,eval.json}, $OUT/train.log.
# BASE_EVAL=SET (with --init-from init): first evaluates the committed model (./init) on eval.py's
#   suite set SET (e.g. heldout) into $OUT/base_eval.json, the baseline for this call's training.
# KEEP=DIR (a call to be resumed on the same warm machine): also copies the full state to DIR on the
#   device and returns $OUT/st without the AdamW moments (weights, run.json, loss.png, eval.json).
# RESUME_FROM=DIR: resume from DIR (a KEEP folder of the previous call, moments included) when it
#   holds run.json, instead of ./st.
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
src=st
if [ -n "${RESUME_FROM:-}" ]; then
    if [ -f "$RESUME_FROM/run.json" ]; then src="$RESUME_FROM"; else echo "RESUME_FROM=$RESUME_FROM has no run.json: resuming from ./st"; fi
fi
if [ -f "$src/run.json" ]; then
    cp "$src"/weights-*.safetensors "$src/run.json" "$sd/"
    cp "$src"/moments-*.safetensors "$sd/" 2>/dev/null || echo "no AdamW moments in $src/: fresh optimizer, 30-step warm-up"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch, transformers, tokenizers; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__)'
if [ -n "${BASE_EVAL:-}" ]; then
    python3 tools/train_tiny/eval.py --model init --corpus corpus --suites "$BASE_EVAL" --budget-s "$evalb" \
        --out "$OUT/base_eval.json" 2>&1 | grep --line-buffered -v 'Loading weights' | tee "$OUT/base_eval.log"
fi
python3 tools/train_tiny/train.py --corpus corpus --tokenizer-dir tok --out-model /tmp/haul-tiny \
    --state-dir "$sd" --log-dir "$ld" --budget-s "$budget" --eval full --eval-budget-s "$evalb" \
    --workers 12 "${small[@]}" "$@" 2>&1 | grep --line-buffered -v 'Loading weights\|Writing model shards' | tee "$OUT/train.log"
rc=$?
if [ -n "${KEEP:-}" ] && [ "${FINAL:-0}" != 1 ]; then
    rm -rf "$KEEP" && cp -r "$sd" "$KEEP" && rm -f "$sd"/moments-*
fi
if [ "${FINAL:-0}" = 1 ]; then
    tar -C /tmp -cf "$OUT/model.tar" haul-tiny
    # a file of its own: the device tool returns files of at most 16 MiB, and each folder is 15 MB
    if [ -d /tmp/haul-tiny-ema ]; then tar -C /tmp -cf "$OUT/model-ema.tar" haul-tiny-ema; fi
    cp "$sd/run.json" /tmp/small/ 2>/dev/null
    tar -C /tmp -cf "$OUT/small.tar" small
fi
exit $rc
