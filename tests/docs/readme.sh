#!/usr/bin/env bash
# readme.sh — the README's "Your first batch" as a new user runs it: every ```sh block of that
# section, in order, as written, from a folder laid out like the checkout's top (build/longhaul,
# models/), and what the README says happens: the answer in the table, "1 already done" on the
# rerun, a new answer once the documents change, status listing the jobs.
# The other sections' commands are checked where they are the product's: examples/slurm by
# tests/slurm, the defaults file by tests/jobs, make install by tests/install.
. "$(dirname "$0")/../jobs/lib.sh"
README=$SRC/README.md
mkdir -p "$T/top/build"
ln -s "$(realpath "$LH")" "$T/top/build/longhaul"
ln -s "$SRC/models" "$T/top/models"
# the blocks: ```sh ... ``` between "## Your first batch" and the next "## "
python3 - "$README" "$T" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
sec = re.search(r"^## Your first batch\n(.*?)^## ", text, re.S | re.M)
assert sec, "README.md has no '## Your first batch' section"
blocks = re.findall(r"^```sh\n(.*?)^```", sec.group(1), re.S | re.M)
assert len(blocks) >= 2, f"expected at least two sh blocks, found {len(blocks)}"
for i, b in enumerate(blocks):
    open(f"{sys.argv[2]}/block{i}.sh", "w").write(b)
print(len(blocks))
PY
cd "$T/top"
bash -e "$T/block0.sh" > "$T/b0.log" 2>&1 || { cat "$T/b0.log"; fail "the first block failed"; }
grep -qE '^timeout +200 .* 4817$' "$T/b0.log" || { cat "$T/b0.log"; fail "the first run's table lacks the answer 4817"; }
[ -s try/out/output.jsonl ] && [ -f try/out/errors.jsonl ] && [ -s try/out/jobs/timeout/result.json ] \
  && [ -s try/out/jobs/timeout/manifest.jsonl ] && [ -s try/out/longhaul.db ] || fail "the files the README names are not all there"
bash -e "$T/block1.sh" > "$T/b1.log" 2>&1 || { cat "$T/b1.log"; fail "the second block failed"; }
grep -q "1 already done" "$T/b1.log" || { cat "$T/b1.log"; fail "the rerun did not say '1 already done'"; }
grep -qE '^timeout +200 .* 3600$' "$T/b1.log" || { cat "$T/b1.log"; fail "after the documents changed the answer is not 3600"; }
json 'import sys; o = json.loads(open(sys.argv[1]).readline()); assert o["response"]["body"]["choices"][0]["message"]["content"] == "3600", o' try/out/output.jsonl
echo "readme: the README's first batch runs as written"
