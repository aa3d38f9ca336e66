#!/bin/bash
# Fill the device payload folder (git-ignored) with what a training call needs:
#   tools/train_tiny/stage.sh PAYLOAD [STATE_DIR]
# PAYLOAD gets the code, the tokenizer files (models/haul-tiny), the corpus (built by corpus.py
# into PAYLOAD/corpus if missing) and, when STATE_DIR is given, the full training state a previous
# call returned (weights-*, moments-*, run.json), which device_run.sh resumes from.
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
    cp "$2"/weights-* "$2"/moments-* "$2"/run.json "$payload/st/"
fi
du -sh "$payload"
