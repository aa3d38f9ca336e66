#!/usr/bin/env bash
# `longhaul model info` on every committed engine fixture: it must succeed, describe the layer plan
# the fixture's meta.json records, and print valid JSON with --json; the fixtures have no
# tokenizer.json and say so, and the embedded model's tokenizer and chat format are described.
set -euo pipefail
bin=${LH_LONGHAUL:-build/longhaul}
root=${LH_SOURCE_DIR:-.}/tests/fixtures/engine
n=0
for d in "$root"/*/; do
  [ -f "$d/config.json" ] || continue
  n=$((n + 1))
  out=$("$bin" model info --model "$d" 2>/dev/null)
  plan=$(tr -d '\n ' <"$d/meta.json" | grep -o '"layer_types":\[[^]]*\]' | sed 's/.*\[//; s/\]//; s/"linear_attention"/L/g; s/"full_attention"/S/g; s/,//g')
  grep -q "^layer plan   $plan" <<<"$out" || { echo "FAIL: $d: layer plan '$plan' not in:"; echo "$out"; exit 1; }
  grep -q '^parameters ' <<<"$out" || { echo "FAIL: $d: no parameter line"; exit 1; }
  grep -q '^tokenizer    none' <<<"$out" || { echo "FAIL: $d: no 'tokenizer none' line"; exit 1; }
  json=$("$bin" model info --model "$d" --json 2>/dev/null)
  if command -v python3 >/dev/null; then
    python3 -c 'import json,sys; o=json.load(sys.stdin); assert o["layer_plan"]==sys.argv[1], o["layer_plan"]; assert o["params_total"]>0; assert o["tokenizer"] is None' "$plan" <<<"$json" \
      || { echo "FAIL: $d: --json"; exit 1; }
  else
    grep -q "\"layer_plan\":[[:space:]]*\"$plan\"" <<<"$json" || { echo "FAIL: $d: --json"; exit 1; }
  fi
  echo "ok: $d ($plan)"
done
[ "$n" -ge 5 ] || { echo "FAIL: expected five fixtures, found $n"; exit 1; }
tiny=${LH_SOURCE_DIR:-.}/models/haul-tiny
out=$("$bin" model info --model "$tiny")
grep -q '^tokenizer    4096 tokens, id [0-9a-f]\{64\}$' <<<"$out" || { echo "FAIL: haul-tiny: no tokenizer line:"; echo "$out"; exit 1; }
grep -q '^chat format  minimax' <<<"$out" || { echo "FAIL: haul-tiny: no chat format line:"; echo "$out"; exit 1; }
json=$("$bin" model info --model "$tiny" --json)
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys; t=json.load(sys.stdin)["tokenizer"]; assert t["vocab_size"]==4096 and t["chat_template"]=="minimax" and len(t["id"])==64, t' <<<"$json" \
    || { echo "FAIL: haul-tiny: --json tokenizer"; exit 1; }
fi
echo "ok: $tiny (tokenizer)"
# errors: a folder that is not a model, and usage
set +e
"$bin" model info --model "$root/README.md" >/dev/null 2>&1; rc=$?
[ $rc = 2 ] || { echo "FAIL: README.md as the model folder should be a usage error (2), got $rc"; exit 1; }
"$bin" model info >/dev/null 2>&1; rc=$?
set -e
[ $rc = 2 ] || { echo "FAIL: missing --model should be a usage error (2), got $rc"; exit 1; }
