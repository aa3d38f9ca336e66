#!/usr/bin/env bash
# test_tokenizer_hf: the live differential test against HF tokenizers (tests/tokenizer/hf_diff.py)
# with .venv's Python (made by scripts/deps.sh test). Without a usable tokenizers 0.23.2 it falls
# back, loudly, to the committed fixtures (the same comparison test_tokenizer_fixtures makes).
set -uo pipefail
src=${LH_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${LH_BINARY_DIR:-$src/build}
longhaul=${LH_LONGHAUL:-$bin/longhaul}
n=${LH_TOKENIZER_DIFF_N:-10000}
py=$src/.venv/bin/python
if [ -x "$py" ] && "$py" -c 'import tokenizers, sys; sys.exit(tokenizers.__version__ != "0.23.2")' 2>/dev/null; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/lh-tokhf-XXXXXX")
  "$py" "$src/tests/tokenizer/hf_diff.py" live "$longhaul" "$work" "$n"
  rc=$?
  [ -n "${LH_KEEP_TMP:-}" ] || rm -rf "$work"
  exit $rc
fi
echo "##########################################################################################" >&2
echo "WARNING: test_tokenizer_hf: $py cannot import tokenizers 0.23.2 (run scripts/deps.sh test);" >&2
echo "WARNING: falling back to the committed HF fixtures in tests/fixtures/tokenizer/ instead of" >&2
echo "WARNING: a live differential test on $n fresh strings per tokenizer." >&2
echo "##########################################################################################" >&2
exec "$bin/tests/tokenizer/test_tokenizer_fixtures"
