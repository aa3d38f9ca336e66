#!/bin/bash
# Fill the device payload folder (git-ignored, sent with the run tool's carry) for a training call:
#   tools/train_tiny/stage.sh PAYLOAD                  fresh start (or: nothing to resume)
#   tools/train_tiny/stage.sh PAYLOAD --state DIR      resume the full state a call returned
#   tools/train_tiny/stage.sh PAYLOAD --state DIR --no-moments   ... without the AdamW moments
#   tools/train_tiny/stage.sh PAYLOAD --init           resume from the committed model (next session)
# PAYLOAD always gets the code, the tokenizer files (models/haul-tiny) and the corpus (built by
# corpus.py into PAYLOAD/corpus when missing).
# --state DIR copies DIR's weights-*, moments-*, run.json to PAYLOAD/st, which device_run.sh
#   resumes from. The fp32 weights travel rounded to bf16 (one 14.7 MB file instead of 29.4 MB),
#   because weights + moments + corpus + the repository tree must fit the tool's 64 MiB; the AdamW
#   moments (kept in bf16 anyway) travel as they are, and the device trains on in fp32.
#   With --no-moments only the weights travel (fresh AdamW, 30-step LR warm-up on the device):
#   needed once the repository tree (30 MB in 2026-12) + corpus + weights + moments pass 64 MiB.
#   The rounding uses numpy alone (this machine may have no torch).
# --init copies models/haul-tiny and tools/train_tiny/{state,history,calls} to PAYLOAD/init: pass
#   `--init-from init --init-state init/state.json` to device_run.sh (fresh AdamW, 30-step warm-up).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="${PYTHON:-/work/pyenv/bin/python}"
payload="$1"
shift
mkdir -p "$payload/tools/train_tiny" "$payload/tok"
cp "$here"/*.py "$here"/device_run.sh "$here"/heldout_families.json "$payload/tools/train_tiny/"
cp "$repo/models/haul-tiny/tokenizer.json" "$repo/models/haul-tiny/tokenizer_config.json" "$payload/tok/"
if [ ! -f "$payload/corpus/train.jsonl.xz" ]; then
    "$py" "$here/corpus.py" --out "$payload/corpus"
fi
rm -rf "$payload/st" "$payload/init"
case "${1:-}" in
--state)
    mkdir -p "$payload/st"
    cp "$2"/run.json "$payload/st/"
    if [ "${3:-}" != --no-moments ]; then cp "$2"/moments-* "$payload/st/"; fi
    "$py" - "$2" "$payload/st" <<'PYEOF'
# fp32 -> bf16 (round to nearest even) with numpy alone: torch is not needed on this machine
import glob, json, os, struct, sys
import numpy as np
from safetensors.numpy import load_file
w = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "weights-*.safetensors"))):
    w.update(load_file(f))
header, blobs, off = {}, [], 0
for k in sorted(w):
    a = np.ascontiguousarray(w[k], dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    raw = b.tobytes()
    header[k] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
h = json.dumps(header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(os.path.join(sys.argv[2], "weights-0.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for raw in blobs:
        f.write(raw)
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
