#!/usr/bin/env bash
# run_batch_input.sh — how `longhaul run` takes its batch (issue 29): `run -` reads the batch from
# standard input and answers as the same file does; a relative and an absolute path to the same
# batch give the same prompt and answer (a plain-file document is named in its frame as the batch
# writes it, not through the batch file's folder); --documents-root refuses a document outside the
# tree on its line; a duplicate custom_id is refused on the later line with a response id of its
# own; names that are not UTF-8 reach the JSON it writes as valid UTF-8. A line answered, then
# refused, has no result files and `results --out` says so; so it does for a dropped line. A run
# over OUT with --db elsewhere: `results --out` refuses OUT/longhaul.db's answer, `status --out`
# warns, and with --db naming another store than that run's too, both say so as such.
. "$(dirname "$0")/lib.sh"
LH=$(realpath "$LH")
mkdir -p "$T/b/root"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/b/notes.txt"
printf 'secret\n' > "$T/b/outside.txt"
cat > "$T/b/batch.jsonl" <<'B'
{"custom_id":"a","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":4,"temperature":0,"documents":["notes.txt"]}}
{"custom_id":"a","url":"/v1/completions","body":{"prompt":"again","max_tokens":4,"temperature":0}}
B
answers_of() { json 'import sys
for l in open(sys.argv[1]):
    o = json.loads(l); b = o["response"]["body"]
    print(o["custom_id"], o["id"], b["usage"]["prompt_tokens"] if b else None, b["choices"][0]["text"] if b else o["error"]["message"])' "$1"; }
set +e
(cd "$T/b" && "$LH" run batch.jsonl --model "$MODEL" --out "$T/rel" --progress none) > "$T/rel.log" 2>&1
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/abs" --progress none > "$T/abs.log" 2>&1
(cd "$T/b" && "$LH" run - --model "$MODEL" --out "$T/stdin" --progress none < batch.jsonl) > "$T/stdin.log" 2>&1
set -e
for r in rel abs stdin; do [ -s "$T/$r/output.jsonl" ] || { cat "$T/$r.log"; fail "$r: no output.jsonl"; }; done
answers_of "$T/rel/output.jsonl" > "$T/rel.txt"
answers_of "$T/abs/output.jsonl" > "$T/abs.txt"
answers_of "$T/stdin/output.jsonl" > "$T/stdin.txt"
diff "$T/rel.txt" "$T/abs.txt" || fail "a relative and an absolute batch path gave different prompts or answers"
diff "$T/rel.txt" "$T/stdin.txt" || fail "the batch on standard input answered differently from the file"
json 'import sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["custom_id"] for l in lines] == ["a", "a"], lines
assert lines[0]["error"] is None and lines[1]["response"]["status_code"] == 400
assert "line 2" in lines[1]["error"]["message"] and "line 1" in lines[1]["error"]["message"]
assert lines[0]["id"] != lines[1]["id"], "the refused duplicate shares the response id of the line that ran"
' "$T/rel/output.jsonl"
# --documents-root: the same batch confined to root/ (notes.txt lies outside it)
set +e
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/root_out" --documents-root "$T/b/root" --progress none \
  > "$T/root.log" 2>&1
set -e
json 'import sys
l = json.loads(open(sys.argv[1]).readline())
m = l["error"]["message"]
assert l["response"]["status_code"] == 400 and "line 1" in m and "notes.txt" in m and sys.argv[2] in m, m
' "$T/root_out/output.jsonl" "$T/b/root"
# names that are not UTF-8 (the batch's folder, so every resolved document path; an archive entry;
# the model folder; OUT; a missing document the error quotes) reach every JSON file the run writes,
# and its --progress json lines and `status --json`, as text with U+FFFD; they were written raw
bad=$(printf 'x\377y')
mkdir -p "$T/u-$bad/docs"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/u-$bad/docs/notes-$bad.txt"
tar -C "$T/u-$bad/docs" -czf "$T/u-$bad/docs.tar.gz" "notes-$bad.txt"
ln -s "$MODEL" "$T/u-$bad/model-$bad"
cat > "$T/u-$bad/batch.jsonl" <<'B'
{"custom_id":"u1","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":4,"temperature":0,"documents":["docs", "docs.tar.gz"]}}
{"custom_id":"u2","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":4,"temperature":0,"documents":["missing.txt"]}}
B
set +e
"$LH" run "$T/u-$bad/batch.jsonl" --model "$T/u-$bad/model-$bad" --out "$T/u-$bad/out" --progress json \
  2> "$T/u-$bad/progress.jsonl" > "$T/u.log"
"$LH" status --out "$T/u-$bad/out" --json > "$T/u-$bad/status.json" 2>> "$T/u.log"
set -e
json 'import glob, os, sys
d = sys.argv[1]
files = glob.glob(os.path.join(d, "out", "**", "*.json*"), recursive=True)
files += [os.path.join(d, "progress.jsonl"), os.path.join(d, "status.json")]
assert any(f.endswith("output.jsonl") for f in files) and any(f.endswith("result.json") for f in files), files
seen = ""
for f in files:
    text = open(f, "rb").read().decode("utf-8")  # strict: raises on any byte that is not UTF-8
    assert text.strip(), f
    for line in (text.splitlines() if f.endswith(".jsonl") else [text]):
        if line.strip(): json.loads(line)
    seen += text
assert "\\ufffd" in seen or "\ufffd" in seen, "no U+FFFD anywhere: the test names were not used"
out = [json.loads(l) for l in open(os.path.join(d, "out", "output.jsonl"))]
assert out[0]["error"] is None, out[0]
assert "missing.txt" in out[1]["error"]["message"], out[1]
' "$T/u-$bad" || { cat "$T/u.log"; fail "a run over names that are not UTF-8 wrote a file that is not UTF-8 JSON"; }
# A named pipe given as the batch is refused at once (it blocked until a writer came; a stream comes
# through `run -`). Ctrl-C while a batch on stdin is still coming (a pipe that gives part of a line
# and stalls) is an interruption, exit 130 with nothing written, not 75 ("stopped by the
# environment": a timer would retry it) with "Interrupted system call".
mkfifo "$T/b/pipe.jsonl"
set +e
timeout 20 "$LH" run "$T/b/pipe.jsonl" --model "$MODEL" --out "$T/pipe" --progress none > "$T/pipe.log" 2>&1
rc=$?
{ printf '{"custom'; sleep 5; } | "$LH" run - --model "$MODEL" --out "$T/stall" --progress none > "$T/stall.log" 2>&1 &
pid2=$!
sleep 1
kill -INT "$pid2"
wait "$pid2"; rc2=$?
set -e
[ "$rc" = 2 ] || { cat "$T/pipe.log"; fail "a FIFO as the batch: exit $rc, expected 2"; }
grep -q "pipe.jsonl: is a FIFO (named pipe), not a regular file" "$T/pipe.log" || { cat "$T/pipe.log"; fail "the FIFO batch was not named"; }
[ "$rc2" = 130 ] || { cat "$T/stall.log"; fail "Ctrl-C while reading a stalled batch on stdin: exit $rc2, expected 130"; }
grep -q "interrupted while reading the batch (8 bytes read)" "$T/stall.log" || { cat "$T/stall.log"; fail "the stdin interruption was not said"; }
[ ! -e "$T/pipe" ] && [ ! -e "$T/stall" ] || fail "a refused or interrupted batch read left an output folder"

# A request not answered now has no result files, and `results` does not print an earlier answer
# as the current one: a line answered, then edited so that it is refused, loses its jobs/<id>
# files (a refused duplicate leaves the valid line's alone); a line dropped from the batch keeps
# its folder, but `results --out` says the last run has no answer for either (exit 1), naming the
# store that holds the old one; the batch as it was answers both again from the store
[ -s "$T/abs/jobs/a/result.json" ] || fail "a refused duplicate custom_id removed the valid line's result.json"
q='{"custom_id":"t","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":4,"temperature":0,"documents":["notes.txt"]}}'
printf '%s\n%s\n' "$q" "${q/\"t\"/\"u\"}" > "$T/b/edit.jsonl"
cp "$T/b/edit.jsonl" "$T/b/edit.orig"
"$LH" run "$T/b/edit.jsonl" --model "$MODEL" --out "$T/edit" --progress none > "$T/edit1.log" 2>&1 || { cat "$T/edit1.log"; fail "edit: first run"; }
"$LH" results t --out "$T/edit" > "$T/t1.json" || fail "results t after the first run"
printf '%s\n' "${q/\"temperature\":0/\"temperature\":0,\"n\":2}" > "$T/b/edit.jsonl"
set +e
"$LH" run "$T/b/edit.jsonl" --model "$MODEL" --out "$T/edit" --progress none > "$T/edit2.log" 2>&1; rc=$?
"$LH" results t --out "$T/edit" > "$T/t2.json" 2> "$T/t2.err"; rt=$?
"$LH" results u --out "$T/edit" > "$T/u2.json" 2> "$T/u2.err"; ru=$?
set -e
[ $rc = 1 ] || { cat "$T/edit2.log"; fail "edit: the refused line's run exit $rc, expected 1"; }
[ ! -e "$T/edit/jobs/t/result.json" ] && [ ! -e "$T/edit/jobs/t/manifest.jsonl" ] ||
  fail "a line refused now kept the result files of its earlier answer"
[ $rt = 1 ] && [ ! -s "$T/t2.json" ] || { cat "$T/t2.json" "$T/t2.err"; fail "results printed the answer of a line refused now"; }
grep -q "no answer from the last run over $T/edit (its line in $T/edit/output.jsonl is an error: line 1: " "$T/t2.err" ||
  { cat "$T/t2.err"; fail "results did not say the line was refused"; }
[ $ru = 1 ] && [ ! -s "$T/u2.json" ] || { cat "$T/u2.json" "$T/u2.err"; fail "results printed the answer of a dropped line"; }
grep -q "has no line for it: the last run's batch does not have it" "$T/u2.err" || { cat "$T/u2.err"; fail "results: dropped line not said"; }
"$LH" results u --db "$T/edit/longhaul.db" > /dev/null || fail "results --db does not print the stored answer"
cp "$T/b/edit.orig" "$T/b/edit.jsonl"
"$LH" run "$T/b/edit.jsonl" --model "$MODEL" --out "$T/edit" --progress none > "$T/edit3.log" 2>&1 || { cat "$T/edit3.log"; fail "edit: the batch as it was"; }
grep -q "2 already done" "$T/edit3.log" || { cat "$T/edit3.log"; fail "the batch as it was did not find its answers"; }
"$LH" results t --out "$T/edit" > "$T/t3.json" && cmp -s "$T/t1.json" "$T/t3.json" || fail "results t once answered again"
[ -s "$T/edit/jobs/t/result.json" ] || fail "the batch as it was did not write jobs/t/result.json again"
# A run over OUT that kept its store elsewhere (--db) wrote OUT's files from that store: `results
# --out` must not print OUT/longhaul.db's older answer as the current one (exit 1, naming --db).
mkdir -p "$T/e2"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/e2/notes.txt"
printf '%s\n' "${q/notes.txt/$T/e2/notes.txt}" > "$T/b/e2.jsonl"
"$LH" run "$T/b/e2.jsonl" --model "$MODEL" --out "$T/e2o" --progress none > "$T/e2a.log" 2>&1 || { cat "$T/e2a.log"; fail "e2: first run"; }
printf 'The deploy key rotation interval is 90 days.\n' > "$T/e2/notes.txt"
"$LH" run "$T/b/e2.jsonl" --model "$MODEL" --out "$T/e2o" --db "$T/e2-elsewhere.db" --progress none > "$T/e2b.log" 2>&1 ||
  { cat "$T/e2b.log"; fail "e2: the run with --db elsewhere"; }
set +e
"$LH" results t --out "$T/e2o" > "$T/e2.json" 2> "$T/e2.err"; re=$?
set -e
[ $re = 1 ] && [ ! -s "$T/e2.json" ] || { cat "$T/e2.json" "$T/e2.err"; fail "results --out printed the answer of a store the last run did not use"; }
grep -qF "that run kept its store elsewhere (--db): pass its --db" "$T/e2.err" || { cat "$T/e2.err"; fail "results: --db elsewhere not said"; }
"$LH" results t --db "$T/e2-elsewhere.db" > /dev/null || fail "results --db of the store the last run used"
# status --out says so too, naming --db: a warning on stderr, exit 0 (its table is OUT/longhaul.db's)
set +e
"$LH" status --out "$T/e2o" > "$T/e2s.out" 2> "$T/e2s.err"; rs=$?
set -e
[ $rs = 0 ] && grep -q "1 jobs: 0 queued, 0 running, 1 done, 0 failed" "$T/e2s.out" || { cat "$T/e2s.out" "$T/e2s.err"; fail "e2: status --out"; }
grep -qF "longhaul status: warning: job 't' is done in $T/e2o/longhaul.db, and $T/e2o/jobs/t/result.json, written after it, holds another answer: the last run over $T/e2o kept its store elsewhere (--db)" "$T/e2s.err" ||
  { cat "$T/e2s.err"; fail "status --out: --db elsewhere not said"; }
"$LH" status --db "$T/e2-elsewhere.db" > /dev/null 2> "$T/e2s2.err" && [ ! -s "$T/e2s2.err" ] || { cat "$T/e2s2.err"; fail "status --db warned"; }
# with --out and --db both, the store named is not the one the last run over OUT used: said so,
# not as if no --db was given, with both ways to the one it used; the store it used, named so,
# gives no warning
set +e
"$LH" results t --out "$T/e2o" --db "$T/e2o/longhaul.db" > "$T/e3.json" 2> "$T/e3.err"; re=$?
"$LH" status --out "$T/e2o" --db "$T/e2o/longhaul.db" > /dev/null 2> "$T/e3s.err"; rs=$?
set -e
[ $re = 1 ] && [ ! -s "$T/e3.json" ] || { cat "$T/e3.json" "$T/e3.err"; fail "results --out --db printed the answer of a store the last run did not use"; }
grep -qF "that run used another store than $T/e2o/longhaul.db: pass its --db instead, or leave --db out if it kept its store in $T/e2o" "$T/e3.err" ||
  { cat "$T/e3.err"; fail "results --out --db: the other store not said"; }
[ $rs = 0 ] && grep -qF "the last run over $T/e2o used another store than $T/e2o/longhaul.db, so these are not the jobs it wrote out there; to see them, pass its --db instead, or leave --db out if it kept its store in $T/e2o" "$T/e3s.err" ||
  { cat "$T/e3s.err"; fail "status --out --db: the other store not said"; }
"$LH" results t --out "$T/e2o" --db "$T/e2-elsewhere.db" > /dev/null 2> "$T/e3ok.err" && [ ! -s "$T/e3ok.err" ] ||
  { cat "$T/e3ok.err"; fail "results --out with the --db the last run used"; }
"$LH" status --out "$T/e2o" --db "$T/e2-elsewhere.db" > /dev/null 2> "$T/e3sok.err" && [ ! -s "$T/e3sok.err" ] ||
  { cat "$T/e3sok.err"; fail "status --out with the --db the last run used warned"; }
# ... and of a job that failed in OUT/longhaul.db (its document missing) and that a run with --db
# elsewhere answered: OUT has a result.json for a job that is not done in the store read
printf '%s\n' "${q/notes.txt/$T/e4/notes.txt}" > "$T/b/e4.jsonl"
set +e
"$LH" run "$T/b/e4.jsonl" --model "$MODEL" --out "$T/e4o" --progress none > "$T/e4a.log" 2>&1; ra=$?
set -e
[ $ra = 1 ] || { cat "$T/e4a.log"; fail "e4: the run without its document exited $ra"; }
mkdir -p "$T/e4" && printf 'The deploy key rotation interval is 417 days.\n' > "$T/e4/notes.txt"
"$LH" run "$T/b/e4.jsonl" --model "$MODEL" --out "$T/e4o" --db "$T/e4-elsewhere.db" --progress none > "$T/e4b.log" 2>&1 ||
  { cat "$T/e4b.log"; fail "e4: the run with --db elsewhere"; }
"$LH" status --out "$T/e4o" > /dev/null 2> "$T/e4s.err" || { cat "$T/e4s.err"; fail "e4: status --out"; }
grep -qF "longhaul status: warning: job 't' is failed in $T/e4o/longhaul.db, and $T/e4o/jobs/t/result.json was written after it last changed" "$T/e4s.err" ||
  { cat "$T/e4s.err"; fail "status --out: a failed job answered from another store not said"; }
# one custom_id in two batches run over one OUT (one store): the later batch's job is the one OUT
# shows, and the earlier one's other answer is not taken for another store's
printf '%s\n' "$q" > "$T/b/two1.jsonl"
printf '%s\n' "${q/\"Q:\"/\"A:\"}" > "$T/b/two2.jsonl"
for b in two1 two2; do
  "$LH" run "$T/b/$b.jsonl" --model "$MODEL" --out "$T/two" --progress none > "$T/$b.log" 2>&1 || { cat "$T/$b.log"; fail "two: $b"; }
done
"$LH" status --out "$T/two" > "$T/two.out" 2> "$T/two.err" || { cat "$T/two.err"; fail "two: status --out"; }
grep -q "2 jobs: 0 queued, 0 running, 2 done, 0 failed" "$T/two.out" || { cat "$T/two.out"; fail "two: not two jobs"; }
[ ! -s "$T/two.err" ] || { cat "$T/two.err"; fail "status --out warned of another store after two batches over one OUT"; }
echo "run_batch_input: ok"
