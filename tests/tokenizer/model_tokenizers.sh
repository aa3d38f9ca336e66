#!/usr/bin/env bash
# model_tokenizers.sh — the tokenizers shipped with models (models/haul-tiny, the runner's test
# model) encode exactly as HF tokenizers does: live against HF on 5,000 fresh strings each when
# .venv has tokenizers, and always against the committed HF ids in tests/fixtures/tokenizer/models
# (made by tools/make_model_tokenizer_fixtures.py).
set -euo pipefail
LH=${LH_LONGHAUL:-build/longhaul}
cd "${LH_SOURCE_DIR:-.}"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
check() { # name tokenizer.json cases.jsonl
  "$LH" tokenize --tokenizer "$2" --jsonl < "$3" > "$T/$1.out"
  python3 - "$3" "$T/$1.out" "$1" <<'PY'
import json, sys
ref = [json.loads(l) for l in open(sys.argv[1])]
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(ref) == len(got), (len(ref), len(got))
bad = [(r["text"], r["ids"], g["ids"]) for r, g in zip(ref, got) if r["ids"] != g["ids"]]
for b in bad[:3]: print("MISMATCH", repr(b[0]), "hf", b[1], "ours", b[2])
print(f"{sys.argv[3]}: {len(ref)} strings, {len(bad)} mismatches")
sys.exit(1 if bad else 0)
PY
}
py=.venv/bin/python
for name in haul-tiny runner-tiny-chat; do
  case $name in haul-tiny) tj=models/haul-tiny/tokenizer.json ;; *) tj=tests/fixtures/runner/tiny-chat/tokenizer.json ;; esac
  check "$name-fixture" "$tj" "tests/fixtures/tokenizer/models/$name.cases.jsonl"
  if [ -x "$py" ] && "$py" -c 'import tokenizers' 2>/dev/null; then
    "$py" - "$tj" > "$T/$name.live.jsonl" <<'PY'
import json, sys
sys.path.insert(0, "tools")
from make_model_tokenizer_fixtures import cases
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
for s in cases(20261201, 5000):
    print(json.dumps({"text": s, "ids": tok.encode(s, add_special_tokens=False).ids}))
PY
    check "$name-live" "$tj" "$T/$name.live.jsonl"
  else
    echo "NOTE: .venv has no tokenizers; only the committed HF ids were compared (run make deps-test)"
  fi
done
