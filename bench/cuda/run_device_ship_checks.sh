#!/usr/bin/env bash
# run_device_ship_checks.sh — the checks a retrained models/haul-tiny must pass before it ships,
# on the GPU box right after training, through longhaul's CUDA backend:
#   - tools/train_tiny/demo_probe.sh (DEVICE=cuda): "What is the value of / What is
#     DEFAULT_WORKER_TIMEOUT set to?" over two short archives of the demo's files, all four 4817;
#   - examples/demo.jsonl (make demo's batch, 204K tokens): 7305614 and 4817.
# The CPU checks (demo_probe.sh with the CPU engine, `make demo` under 2 minutes on 2 cores) are
# still run on the development machine before shipping; these say in the same call whether it is
# worth bringing the weights back for that.
# Payload and layout as run_device_niah_families.sh (bin/longhaul, libs/ beside this script).
#   MODEL=/tmp/haul-tiny bash .dev/niah/run_device_ship_checks.sh > $OUT/ship.log 2>&1
# Session 16 (models/haul-tiny/TRAINING.md): about 20 s on one H200.
set -u
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
M=${MODEL:-/tmp/haul-tiny}
W=$(mktemp -d)
DEVICE=cuda bash tools/train_tiny/demo_probe.sh "$M" "$D/bin/longhaul"
echo "demo_probe rc=$?"
"$D/bin/longhaul" run examples/demo.jsonl --model "$M" --out "$W/demo" --chunk 16384 --force --device cuda \
  >"$W/demo.log" 2>&1
echo "demo rc=$?"
python3 - "$W/demo/output.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    got = o["error"] if o["error"] else repr(o["response"]["body"]["choices"][0]["message"]["content"])
    print(o["custom_id"], got)
PY
rm -rf "$W"
