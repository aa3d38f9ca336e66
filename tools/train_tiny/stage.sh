#!/bin/bash
# Fill the device payload folder (git-ignored) with what a training call needs:
#   tools/train_tiny/stage.sh PAYLOAD [STATE_DIR]
# PAYLOAD gets the code, the tokenizer files (models/haul-tiny), the corpus (built by corpus.py
# into PAYLOAD/corpus if missing) and, when STATE_DIR is given, the full training state a previous
# call returned (weights-*, moments-*, run.json), which device_run.sh resumes from. With a third
# argument "bf16" the fp32 weights travel rounded to bf16 (one file of 14.7 MB instead of two of
# 29.4 MB together), which keeps the payload under the tool's 64 MiB when the tree has grown; the
# AdamW moments travel as they are and the device trains on in fp32 from the rounded weights.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-/work/pyenv/bin/python}"
payload="$1"
mkdir -p "$payload/tools/train_tiny" "$payload/tok"
cp "$here"/*.py "$here"/device_run.sh "$payload/tools/train_tiny/"
cp "$repo/models/haul-tiny/tokenizer.json" "$repo/models/haul-tiny/tokenizer_config.json" "$payload/tok/"
if [ ! -f "$payload/corpus/train.jsonl.xz" ]; then
    "$py" "$here/corpus.py" --out "$payload/corpus"
fi
rm -rf "$payload/st"
if [ $# -ge 2 ]; then
    mkdir -p "$payload/st"
    cp "$2"/moments-* "$2"/run.json "$payload/st/"
    if [ "${3:-}" = bf16 ]; then
        "$py" - "$2" "$payload/st" <<'PYEOF'
import glob, os, sys, torch
from safetensors.torch import load_file, save_file
w = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "weights-*.safetensors"))):
    w.update(load_file(f))
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, os.path.join(sys.argv[2], "weights-0.safetensors"))
PYEOF
    else
        cp "$2"/weights-* "$payload/st/"
    fi
fi
du -sh "$payload"
