#!/bin/bash
# The demo's repository question over short archives of the demo's own files, on longhaul's CPU
# engine (about a minute on 2 cores): a check before the 204K-token `make demo`.
#   tools/train_tiny/demo_probe.sh MODEL_DIR [LONGHAUL_BINARY]
# DEVICE=cuda runs it on longhaul's CUDA backend (on the GPU box, in the training call).
# Archive A: concurrent/ from examples/demo-repo.tar.gz, 18.9K tokens, with
#   `DEFAULT_WORKER_TIMEOUT = 4817` in concurrent/futures/thread.py.
# Archive B: asyncio/base_events.py, then concurrent/, 38.2K tokens. base_events.py adds
#   `_MIN_SCHEDULED_TIMER_HANDLES = 100` about 19K tokens earlier (the "100" of the failed demos).
# Each archive is asked "What is the value of DEFAULT_WORKER_TIMEOUT?" and "What is
# DEFAULT_WORKER_TIMEOUT set to?". Prints the four answers; exits 1 unless all are 4817.
# Session 11 (models/haul-tiny/TRAINING.md): step 7847 passes; steps 8581 and 9336 fail on B.
# Session 14: steps 10469 and 11181 (data version 10) pass.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
model="$1"
lh="${2:-$repo/build-dev/longhaul}"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
tar -C "$w" -xzf "$repo/examples/demo-repo.tar.gz"
(cd "$w" && tar -czf a.tar.gz concurrent && tar -czf b.tar.gz asyncio/base_events.py concurrent)
fail=0
for a in a b; do
    python3 - "$w/$a.jsonl" "$a.tar.gz" <<'PYEOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for cid, q in (("value", "What is the value of DEFAULT_WORKER_TIMEOUT?"),
                   ("set-to", "What is DEFAULT_WORKER_TIMEOUT set to?")):
        f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                            "body": {"messages": [{"role": "user", "content": q}], "max_tokens": 16,
                                     "temperature": 0, "documents": [sys.argv[2]]}}) + "\n")
PYEOF
    "$lh" run "$w/$a.jsonl" --model "$model" --out "$w/out-$a" --chunk 2048 --force \
        --cpu-attention auto --device "${DEVICE:-cpu}" >"$w/$a.log" 2>&1 || { cat "$w/$a.log"; exit 2; }
    python3 - "$w/out-$a/output.jsonl" "$a" <<'PYEOF' || fail=1
import json, sys
ok = True
for line in open(sys.argv[1]):
    d = json.loads(line)
    got = d["response"]["body"]["choices"][0]["message"]["content"]
    ok &= got == "4817"
    print(f"archive {sys.argv[2].upper()} {d['custom_id']:7s} {got!r}")
sys.exit(0 if ok else 1)
PYEOF
done
exit $fail
