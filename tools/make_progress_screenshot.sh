#!/usr/bin/env bash
# make_progress_screenshot.sh — docs/progress-80col.png (the demo's prefill, live) and
# docs/progress-80col-final.png (its last screen): `longhaul run` of examples/demo.jsonl on
# models/haul-tiny, on a pseudo-terminal of 80 x 24 (tests/cli/ptyterm.py), drawn by
# tools/term_screenshot.py. Takes the demo's time (1.5 to 4 minutes on 2 cores). Needs a built
# build/longhaul, and pyte and Pillow for PYTHON (default python3; pip install pyte pillow).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 tests/cli/ptyterm.py run --cols 80 --rows 24 "$T/demo.raw" -- \
  build/longhaul run examples/demo.jsonl --model models/haul-tiny --out "$T/out" --chunk 2048 --force \
  --cpu-attention auto || true
# the live display half way through the prefill: a redraw whose percentage reaches 50
"$PY" tools/term_screenshot.py "$T/demo.raw" docs/progress-80col.png --cols 80 --rows 24 \
  --cut-after 'prefill +5[0-9]% [^\r\n]*\r?\n[^\x1b]*elapsed [0-9ms.]+' \
  --title 'longhaul run examples/demo.jsonl, 80 columns, during the prefill' --trim
"$PY" tools/term_screenshot.py "$T/demo.raw" docs/progress-80col-final.png --cols 80 --rows 24 \
  --title 'longhaul run examples/demo.jsonl, 80 columns, at the end'
echo "wrote docs/progress-80col.png, docs/progress-80col-final.png"
