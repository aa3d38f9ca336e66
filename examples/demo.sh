#!/usr/bin/env bash
# make demo: run examples/demo.jsonl (two questions over a real source archive with two planted
# facts) on the embedded model, print the answers and where the results are. A second run finds
# the checkpoints in the store and skips the prefill.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_OUT:-demo-out}
model=models/haul-tiny
echo "== longhaul demo: 2 questions over examples/demo-repo.tar.gz (CPython's concurrent and asyncio"
echo "   packages and part of email, about 204K tokens, with two planted facts), answered by the"
echo "   embedded model $model (see $model/TRAINING.md); about 2 minutes on 2 cores"
rm -f "$out/output.jsonl"
# --cpu-attention auto: the softmax products in bf16 on AMX tiles or AVX512-BF16 where the CPU has
# them (93 s against 150 s in fp32 on a 2-core Zen 4), the fp32 reference path elsewhere; the first
# progress line says which.
set +e
build/longhaul run examples/demo.jsonl --model "$model" --out "$out" --chunk 2048 --force --cpu-attention auto
rc=$?
set -e
echo
echo "== answers (expected: lighthouse 7305614, worker-timeout 4817)"
python3 - "$out/output.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o["error"]:
        print(f'  {o["custom_id"]:16} ERROR {o["error"]["message"]}')
        continue
    body = o["response"]["body"]
    print(f'  {o["custom_id"]:16} {body["choices"][0]["message"]["content"]!r}   '
          f'({body["usage"]["prompt_tokens"]} prompt tokens)')
PY
echo
echo "results: $out/output.jsonl, $out/jobs/<custom_id>/result.json; store: $out/longhaul.db"
echo "run 'make demo' again: the prefill is restored from the store's checkpoints"
exit $rc
