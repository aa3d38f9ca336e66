#!/usr/bin/env bash
# run_retention.sh — `--keep-checkpoints N`: at the end of a run each prefix keeps its final
# checkpoint and at most N before it with their states; the others are thinned to the KV rows
# their descendants need, so a new question over the same documents still restores the whole
# prefix and a kill mid-run still resumes. The run says what the store holds.
. "$(dirname "$0")/lib.sh"
make_repo
line() { printf '{"custom_id":"%s","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"%s"}],"max_tokens":4,"temperature":0,"documents":["repo.tar.gz"]}}\n' "$1" "$2"; }
line a1 "Which file defines lh_crc32c?" > "$T/batch.jsonl"
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 512 --keep-checkpoints 1 --progress none \
  > "$T/run1.log" 2>&1 || { cat "$T/run1.log"; fail "first run"; }
grep -q "the store holds .* checkpoints (2 with states, .* thinned to their KV rows" "$T/run1.log" \
  || { cat "$T/run1.log"; fail "the run does not say that the store keeps 2 states"; }
python3 - "$T/out/longhaul.db" <<'P' || fail "retention kept the wrong checkpoints"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("select pos, has_state from checkpoints order by pos").fetchall()
with_state = [p for p, s in rows if s]
assert len(rows) > 4, rows
assert with_state == [p for p, _ in rows][-2:], rows   # the final one and one before it
P
# a second question over the same documents restores the whole shared prefix from the thinned chain
line a2 "How long is the key rotation interval?" >> "$T/batch.jsonl"
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 512 --keep-checkpoints 1 --progress none \
  > "$T/run2.log" 2>&1 || { cat "$T/run2.log"; fail "second run"; }
prefix=$(json 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["shared_prefix"])' "$T/out/jobs/a1/result.json")
[ "$(restored "$T/run2.log")" = "$prefix" ] || { cat "$T/run2.log"; fail "the thinned chain did not restore all $prefix prefix tokens"; }
# -1 keeps everything
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/all" --chunk 512 --keep-checkpoints -1 --progress none \
  > "$T/run3.log" 2>&1 || { cat "$T/run3.log"; fail "third run"; }
grep -q "(.* 0 thinned" "$T/run3.log" || { cat "$T/run3.log"; fail "--keep-checkpoints -1 thinned checkpoints"; }
echo "run_retention: ok"
