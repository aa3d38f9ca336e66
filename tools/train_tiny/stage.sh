#!/bin/bash
# Fill the device payload folder (git-ignored, sent with the run tool's carry) for a training call:
#   tools/train_tiny/stage.sh PAYLOAD                  fresh start (or: nothing to resume)
#   tools/train_tiny/stage.sh PAYLOAD --state DIR      resume the full state a call returned
#   tools/train_tiny/stage.sh PAYLOAD --init           resume from the committed model (next session)
# PAYLOAD always gets the code, the tokenizer files (models/haul-tiny) and the corpus (built by
# corpus.py into PAYLOAD/corpus when missing).
# --state DIR copies DIR's weights-*, moments-*, run.json to PAYLOAD/st, which device_run.sh
#   resumes from. The fp32 weights travel rounded to bf16 (one 14.7 MB file instead of 29.4 MB),
#   because weights + moments + corpus + the repository tree must fit the tool's 64 MiB; the AdamW
#   moments (kept in bf16 anyway) travel as they are, and the device trains on in fp32.
# --init copies models/haul-tiny and tools/train_tiny/{state,history,calls} to PAYLOAD/init: pass
#   `--init-from init --init-state init/state.json` to device_run.sh (fresh AdamW, 30-step warm-up).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-/work/pyenv/bin/python}"
payload="$1"
shift
mkdir -p "$payload/tools/train_tiny" "$payload/tok"
cp "$here"/*.py "$here"/device_run.sh "$payload/tools/train_tiny/"
cp "$repo/models/haul-tiny/tokenizer.json" "$repo/models/haul-tiny/tokenizer_config.json" "$payload/tok/"
if [ ! -f "$payload/corpus/train.jsonl.xz" ]; then
    "$py" "$here/corpus.py" --out "$payload/corpus"
fi
rm -rf "$payload/st" "$payload/init"
case "${1:-}" in
--state)
    mkdir -p "$payload/st"
    cp "$2"/moments-* "$2"/run.json "$payload/st/"
    "$py" - "$2" "$payload/st" <<'PYEOF'
import glob, os, sys, torch
from safetensors.torch import load_file, save_file
w = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "weights-*.safetensors"))):
    w.update(load_file(f))
save_file({k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}, os.path.join(sys.argv[2], "weights-0.safetensors"))
PYEOF
    ;;
--init)
    mkdir -p "$payload/init"
    cp "$repo"/models/haul-tiny/*.json "$repo/models/haul-tiny/model.safetensors" "$payload/init/"
    cp "$here/state.json" "$here/history.jsonl" "$here/calls.json" "$payload/init/"
    ;;
"") ;;
*) echo "stage.sh: unknown option $1" >&2; exit 2 ;;
esac
du -sh "$payload"
