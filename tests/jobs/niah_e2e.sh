#!/usr/bin/env bash
# niah_e2e.sh — a small NIAH sweep with the embedded model on the CPU: its accuracy matches what
# models/haul-tiny/TRAINING.md reports at these lengths (1.00 at 1K-16K, so >= 0.9 is required of
# 6 trials), prefix reuse is real (tokens computed under the naive sum, checkpoints in the store),
# the figures and tables exist, a rerun takes the weights' digest from the sweep's store, and a
# sweep killed with -9 and rerun gives the same results.csv as an uninterrupted one, apart from the "seconds" and "tokens_computed" columns (named and dropped).
# A multi-value sweep's scores are RULER's share of the expected values, recomputed from the text.
# Names that are not UTF-8 reach every JSON file it writes as valid UTF-8; one sweep at a time in an OUT,
# and `niah plot` holds the same lock (refused, or with --wait waiting, while a sweep holds it).
set -euo pipefail
LH=${LH_LONGHAUL:-build/longhaul}
cd "${LH_SOURCE_DIR:-.}"
T=$(mktemp -d "${TMPDIR:-/tmp}/lh-niah-XXXXXX")
[ -n "${LH_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
args=(--model models/haul-tiny --lengths 1k,2k --depths 0:100:50 --trials 1 --chunk 256 --progress none)
"$LH" niah "${args[@]}" --out "$T/ref" > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "sweep failed"; }
cat "$T/ref.log"
# a longhaul built without cairo says so in its summary; then only `niah plot` is passed over
cairo=1
if grep -qF "(no heatmap: built without cairo)" "$T/ref.log"; then cairo=0; fi
python3 - "$T/ref" <<'PY'
import json, os, sys
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
assert s["trials"] == 6, s["trials"]
assert s["trials_planned"] == 6 and s["complete"] is True, s
assert s["accuracy"] >= 0.9, s["accuracy"]
assert s["tokens_computed"] < s["tokens_naive"], (s["tokens_computed"], s["tokens_naive"])
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
for r in rows:
    for k in ("length", "depth", "needle", "expected", "answer", "score", "tokens", "seconds"):
        assert k in r, k
    assert abs(r["tokens"] - r["length"]) <= 64, (r["tokens"], r["length"])
for f in ("results.csv", "sweep.json"):
    assert os.path.getsize(os.path.join(d, f)) > 0, f
PY
# summary.json's per-length lines against results.jsonl, on scores edited so that cells differ:
# `niah plot` rewrites summary.json from results.jsonl; without cairo (no plot) the same sweep run
# again there, which finds every trial done and writes the reports again, does
mkdir -p "$T/edited"
python3 - "$T/ref/results.jsonl" "$T/edited/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for i, r in enumerate(rows):
    r["score"] = [1.0, 0.0, 0.5][i % 3]
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
cp "$T/ref/sweep.json" "$T/edited/"
if [ "$cairo" = 1 ]; then
  "$LH" niah plot "$T/edited" > "$T/edited.log" 2>&1 || { cat "$T/edited.log"; fail "niah plot failed"; }
else
  "$LH" niah "${args[@]}" --out "$T/edited" > "$T/edited.log" 2>&1 || { cat "$T/edited.log"; fail "resummary failed"; }
  grep -q "0 run now, 6 from earlier runs" "$T/edited.log" || { cat "$T/edited.log"; fail "the rerun ran trials"; }
fi
python3 - "$T/edited" <<'PY'
import collections, json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
by = collections.defaultdict(lambda: collections.defaultdict(list))
for r in rows:
    by[r["length"]][r["depth"]].append(r["score"])
got = json.load(open(os.path.join(d, "summary.json")))["lengths"]
assert [g["length"] for g in got] == sorted(by), got
for g in got:
    cells = by[g["length"]]
    scores = [x for v in cells.values() for x in v]
    assert g["trials"] == len(scores), g
    assert abs(g["accuracy"] - sum(scores) / len(scores)) < 1e-9, g
    worst = min(sorted(cells), key=lambda k: sum(cells[k]) / len(cells[k]))
    assert g["worst_cell_depth"] == worst and g["worst_cell_trials"] == len(cells[worst]), (g, worst)
    assert abs(g["worst_cell_score"] - sum(cells[worst]) / len(cells[worst])) < 1e-9, g
PY
if [ "$cairo" = 1 ]; then
  "$LH" niah plot "$T/ref" > "$T/plot.log" 2>&1 || { cat "$T/plot.log"; fail "niah plot failed"; }
  python3 -c 'import sys; h = open(sys.argv[1], "rb").read(8); assert h == b"\x89PNG\r\n\x1a\n", h' "$T/ref/heatmap.png"
  # plot holds the sweep's lock: while a sweep holds OUT/niah.lock a plot is refused, naming the
  # holder, and writes nothing (it wrote summary.json and the heatmap under a running sweep); with
  # --wait it waits for the lock. A lock holder stands in for the sweep.
  cp "$T/ref/summary.json" "$T/summary-before.json"
  python3 -c '
import fcntl, sys, time
f = open(sys.argv[1], "r+"); fcntl.lockf(f, fcntl.LOCK_EX); open(sys.argv[2], "w").close(); time.sleep(float(sys.argv[3]))
' "$T/ref/niah.lock" "$T/locked" 4 &
  holder=$!
  while [ ! -e "$T/locked" ]; do sleep 0.1; done
  set +e
  "$LH" niah plot "$T/ref" > "$T/plot-busy.log" 2>&1; rc=$?
  set -e
  [ "$rc" = 1 ] || { cat "$T/plot-busy.log"; fail "niah plot under a sweep's lock: exit $rc, expected 1"; }
  grep -qF "$T/ref is in use by another longhaul run" "$T/plot-busy.log" || { cat "$T/plot-busy.log"; fail "the busy plot did not say so"; }
  cmp -s "$T/summary-before.json" "$T/ref/summary.json" || fail "a refused plot rewrote summary.json"
  ls "$T/ref" | grep -q '\.tmp\.' && fail "a refused plot left a temporary file"
  "$LH" niah plot "$T/ref" --wait > "$T/plot-wait.log" 2>&1 || { cat "$T/plot-wait.log"; fail "niah plot --wait failed"; }
  kill -0 "$holder" 2>/dev/null && fail "niah plot --wait did not wait for the lock"
  wait "$holder"
else
  echo "NOTE: built without cairo; niah plot and the heatmap not checked (test_niah_plot covers drawing)"
fi
"$LH" store ls --db "$T/ref/niah.db" --json > "$T/ls.json"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert len(d["checkpoints"]) >= 2, d' "$T/ls.json"
# the weights' digest is kept in the sweep's store, and a rerun there takes it from the store
# instead of reading and hashing the weights again (the row, and when it was written, unchanged)
digests() { python3 -c 'import sqlite3, sys
for r in sqlite3.connect(sys.argv[1]).execute("select kind, path, updated_ms from file_digests order by kind, path"): print(*r)' "$1"; }
digests "$T/ref/niah.db" > "$T/digests-1.txt"
grep -q '^model .*model.safetensors ' "$T/digests-1.txt" || { cat "$T/digests-1.txt"; fail "the weights' digest is not in the store"; }
sleep 0.01
"$LH" niah "${args[@]}" --out "$T/ref" > "$T/ref2.log" 2>&1 || { cat "$T/ref2.log"; fail "the rerun failed"; }
grep -q "0 run now, 6 from earlier runs" "$T/ref2.log" || { cat "$T/ref2.log"; fail "the rerun ran trials"; }
digests "$T/ref/niah.db" | diff "$T/digests-1.txt" - || fail "the rerun read the weights again"
# --force there: every trial runs again over the store the first run filled, whose checkpoints
# reach past the first trials' fork points; the shared prefix is restored no further than the
# first of them, so the answers are the first run's (they were not, before: 1K trials forked from
# a state 1.8K tokens in)
cp "$T/ref/results.csv" "$T/ref-first.csv"
"$LH" niah "${args[@]}" --out "$T/ref" --force > "$T/ref3.log" 2>&1 || { cat "$T/ref3.log"; fail "the --force rerun failed"; }
grep -q "6 run now" "$T/ref3.log" || { cat "$T/ref3.log"; fail "the --force rerun did not run every trial"; }
# kill -9 during the sweep, rerun, compare
for i in 1 2 3; do
  "$LH" niah "${args[@]}" --out "$T/k" > /dev/null 2>&1 &
  pid=$!
  sleep "0.$(( (RANDOM % 9) + 1 ))"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
done
"$LH" niah "${args[@]}" --out "$T/k" > "$T/k.log" 2>&1 || { cat "$T/k.log"; fail "rerun failed"; }
# seconds (wall time) and tokens_computed (a trial rerun after the kill may restore a checkpoint the
# killed run left, and so compute fewer tokens) are how the work went, not what it found
strip() { python3 -c '
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
drop = {rows[0].index("seconds"), rows[0].index("tokens_computed")}
for r in sorted(rows[1:]): print([x for i, x in enumerate(r) if i not in drop])' "$1"; }
diff <(strip "$T/ref/results.csv") <(strip "$T/k/results.csv") || fail "results.csv differs after kill -9 and rerun"
diff <(strip "$T/ref-first.csv") <(strip "$T/ref/results.csv") || fail "results.csv differs after a --force rerun over the same store"
# multi-value: each trial's score is RULER's (the share of the expected values in the answer),
# recomputed here from the CSV's text; summary.json's all_values counts answers with every value;
# the expected list is in the order the values appear in the text
"$LH" niah --model models/haul-tiny --lengths 1k --depths 0:100:50 --trials 2 --chunk 256 --progress none \
  --variant multivalue --out "$T/mv" > "$T/mv.log" 2>&1 || { cat "$T/mv.log"; fail "multivalue sweep failed"; }
python3 - "$T/mv" <<'PY'
import csv, json, os, re, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "results.csv"))))
assert len(rows) == 6, len(rows)
for r in rows:
    vals = [v.strip() for v in r["expected"].split(",")]
    assert len(vals) == 4, vals
    # the needle column lists the needles in text order; the expected list follows it
    assert vals == re.findall(r"number is: (\d+)", r["needle"]), (vals, r["needle"])
    share = sum(v in r["answer"] for v in vals) / len(vals)
    assert abs(float(r["score"]) - share) < 1e-9, (r["score"], share, r["expected"], r["answer"])
    assert int(r["contains"]) == (share == 1.0), r
    # same_set: the answer's items are exactly the expected values, in any order, once each
    items = sorted(x.strip() for x in r["answer"].split(",") if x.strip())
    assert int(r["same_set"]) == (items == sorted(vals)), (r["same_set"], items, vals)
    # the family columns come last and are empty without --families
    assert list(r)[-5:] == ["same_set", "needle_kind", "needle_template", "question_template", "value_kind"], list(r)
    assert r["needle_kind"] == r["needle_template"] == r["question_template"] == r["value_kind"] == "", r
s = json.load(open(os.path.join(d, "summary.json")))
assert abs(s["accuracy"] - sum(float(r["score"]) for r in rows) / 6) < 1e-9, s["accuracy"]
assert abs(s["all_values"] - sum(int(r["contains"]) for r in rows) / 6) < 1e-9, s["all_values"]
assert abs(s["same_set"] - sum(int(r["same_set"]) for r in rows) / 6) < 1e-9, s["same_set"]
PY
# same_set is not the score: an answer that repeats a value holds every value (score 1) but is
# not exactly the set. Rewrite the sweep's results.jsonl that way and rerun the same command, which
# finds every trial done and summarises results.jsonl again.
python3 - "$T/mv/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    vals = [v.strip() for v in r["expected"].split(",")]
    r["answer"], r["score"], r["contains"] = r["expected"] + ", " + vals[0], 1, 1
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in rows))
PY
"$LH" niah --model models/haul-tiny --lengths 1k --depths 0:100:50 --trials 2 --chunk 256 --progress none \
  --variant multivalue --out "$T/mv" > "$T/mv2.log" 2>&1 || { cat "$T/mv2.log"; fail "multivalue resummary failed"; }
grep -q "0 run now, 6 from earlier runs" "$T/mv2.log" || { cat "$T/mv2.log"; fail "the rerun ran trials again"; }
python3 - "$T/mv" <<'PY'
import csv, json, os, sys
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
assert s["accuracy"] == 1 and s["all_values"] == 1 and s["same_set"] == 0, s
assert all(r["same_set"] == "0" for r in csv.DictReader(open(os.path.join(d, "results.csv"))))
PY
# a corpus shorter than the sweep's lengths is repeated: H was appended to itself, which read the
# block its reallocation had just freed (garbage token ids: "token id -1319801466 ... is outside the
# vocabulary"; ASan: heap-use-after-free in load_haystack)
mkdir -p "$T/corpus"
for i in $(seq 8); do echo "Line $i of the notes: the river runs past the old stone mill."; done > "$T/corpus/notes.txt"
small_args=(--model models/haul-tiny --corpus "$T/corpus/notes.txt" --lengths 1k,2k --depths 50 --chunk 256 --progress none)
"$LH" niah "${small_args[@]}" --out "$T/small" > "$T/small.log" 2>&1 || { cat "$T/small.log"; fail "sweep of a short corpus failed"; }
# an OUT inside the corpus folder is never haystack: results.jsonl holds earlier trials' needles and
# grows, so a resumed or extended sweep read another haystack (with old facts in it) than the first
in_args=(--model models/haul-tiny --corpus "$T/corpus" --out "$T/corpus/out" --lengths 1k --chunk 256 --progress none)
"$LH" niah "${in_args[@]}" --depths 50 > "$T/in1.log" 2>&1 || { cat "$T/in1.log"; fail "sweep into the corpus failed"; }
"$LH" niah "${in_args[@]}" --depths 50,100 --extend --save-prompts > "$T/in2.log" 2>&1 ||
  { cat "$T/in2.log"; fail "extended sweep into the corpus failed"; }
[ -s "$T/corpus/out/prompts/L1024-D100-T0.txt" ] || fail "the extended sweep saved no prompt"
grep -q 'path="notes.txt"' "$T/corpus/out/prompts/L1024-D100-T0.txt" || fail "the prompt has no corpus document"
if grep -o 'path="out/[^"]*"' "$T/corpus/out/prompts/L1024-D100-T0.txt" | sort -u | grep .; then
  fail "the sweep's own OUT folder was read into its haystack"
fi
# a first ^C (or SIGTERM) while the sweep sets up stops it there: reading the corpus (a big one
# takes minutes) and drawing the trials (65536 of long prompts take a while) went on to their end
# whatever the signal said, and only the first trial's prefill looked at it. The sweep is held at
# a test point inside each loop (LH_TEST_STOP_AT, a SIGSTOP: util/testpoint.h), signalled, and let go.
stopped_state() { # T once process $1 has stopped at its test point, gone (or Z) once it ended; 60 s
  local st=gone
  for _ in $(seq 1 1200); do
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone)
    case $st in T | gone | Z) break ;; esac
    sleep 0.05
  done
  echo "$st"
}
for point in haystack:1 niah-trial:2; do
  for sig in INT TERM; do
    out="$T/int-${point%%:*}-$sig"
    LH_TEST_STOP_AT=$point "$LH" niah "${args[@]}" --trials 2 --progress plain --out "$out" > "$out.log" 2>&1 &
    pid=$!
    state=$(stopped_state $pid)
    [ "$state" = T ] || { kill -9 $pid 2>/dev/null; cat "$out.log"; fail "the sweep did not stop at $point ($state)"; }
    kill -$sig $pid
    kill -CONT $pid
    rc=0
    wait $pid || rc=$?
    [ "$rc" = 130 ] || { cat "$out.log"; fail "SIG$sig at $point: exit $rc, expected 130"; }
    grep -q "interrupted; rerun the same command to resume" "$out.log" || { cat "$out.log"; fail "SIG$sig at $point: no word of it"; }
    if grep -q "prefill" "$out.log"; then cat "$out.log"; fail "SIG$sig at $point: a trial ran after the signal"; fi
    if grep -qE "trials|results:" "$out.log"; then cat "$out.log"; fail "SIG$sig at $point: a summary of no trials"; fi
    if [ "$point" = haystack:1 ]; then
      grep -q "haystack ingest stopped: .*(interrupted)" "$out.log" || { cat "$out.log"; fail "SIG$sig did not stop the corpus's ingest"; }
    fi
  done
done
# a sweep interrupted once some trials are done leaves a summary.json that says it is partial (it
# read like a finished sweep of fewer trials)
out=$T/partial
"$LH" niah --model models/haul-tiny --lengths 4k,8k,16k --depths 0:100:25 --trials 2 --progress none --out "$out" \
  > "$out.log" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -s "$out/results.jsonl" ] && break; sleep 0.1; done
kill -INT $pid 2>/dev/null || true
wait $pid || true
[ -s "$out/results.jsonl" ] || { cat "$out.log"; fail "no trial of the sweep finished within a minute"; }
python3 -c 'import json,sys; s = json.load(open(sys.argv[1])); assert s["complete"] is False and s["trials"] < s["trials_planned"] == 30, s' \
  "$out/summary.json" || { cat "$out.log" "$out/summary.json"; fail "an interrupted sweep's summary.json does not say it is partial"; }
# one sweep at a time in an OUT: a second, run while the first is held mid-trial, appended every
# trial again to results.jsonl (4 rows for a sweep of 2, each cell counted twice). Now it exits 75
# naming the holder, and with --wait it queues behind it and finds the trials done.
o=$T/busy
LH_TEST_STOP_AT=decode:1 "$LH" niah "${small_args[@]}" --out "$o" > "$o.1.log" 2>&1 &
pid=$!
state=$(stopped_state $pid)
[ "$state" = T ] || { kill -9 $pid 2>/dev/null; cat "$o.1.log"; fail "the first sweep did not stop at decode ($state)"; }
rc=0
"$LH" niah "${small_args[@]}" --out "$o" > "$o.2.log" 2>&1 || rc=$?
[ $rc = 75 ] || { kill -9 $pid; cat "$o.2.log"; fail "a second sweep into a busy OUT: exit $rc, expected 75"; }
grep -q "in use by another longhaul run (pid $pid " "$o.2.log" || { kill -9 $pid; cat "$o.2.log"; fail "the holder is not named"; }
"$LH" niah "${small_args[@]}" --out "$o" --wait > "$o.3.log" 2>&1 &
waiter=$!
sleep 1
kill -CONT $pid
wait $pid || { cat "$o.1.log"; fail "the held sweep failed"; }
wait $waiter || { cat "$o.3.log"; fail "the waiting sweep failed"; }
grep -q "(0 run now, 2 from earlier runs)" "$o.3.log" || { cat "$o.3.log"; fail "the waiting sweep ran trials again"; }
[ "$(wc -l < "$o/results.jsonl")" = 2 ] || { cat "$o/results.jsonl"; fail "results.jsonl of a 2-trial sweep has other than 2 rows"; }
# results.jsonl as a kill or an older build can leave it. A torn last line (a kill while it was
# written) had the next row appended to it, so that row was lost too and its trial ran on every
# rerun; now it is cut off first. A line that is not a trial row (a length of 1e300 was cast to an
# int64), or a second row of one trial, is left out with a warning naming the line: each trial
# counts once.
o=$T/rows
"$LH" niah "${small_args[@]}" --out "$o" > "$o.log" 2>&1 || { cat "$o.log"; fail "the sweep for the rows test failed"; }
cp "$o/results.jsonl" "$T/rows.good"
python3 - "$o/results.jsonl" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
open(sys.argv[1], "wb").write(b[: b.rindex(b"\n", 0, len(b) - 1) + 1 + 40])  # the last row cut at 40 bytes
PY
"$LH" niah "${small_args[@]}" --out "$o" > "$o.2.log" 2>&1 || { cat "$o.2.log"; fail "the rerun after a torn row failed"; }
grep -q "cut its torn last line" "$o.2.log" || { cat "$o.2.log"; fail "the torn line was not cut (or not said)"; }
grep -q "(1 run now, 1 from earlier runs)" "$o.2.log" || { cat "$o.2.log"; fail "the torn trial did not run again"; }
"$LH" niah "${small_args[@]}" --out "$o" > "$o.3.log" 2>&1 || { cat "$o.3.log"; fail "the third run failed"; }
grep -q "(0 run now, 2 from earlier runs)" "$o.3.log" || { cat "$o.3.log"; fail "a trial ran a third time: its row was lost"; }
python3 - "$o/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, len(rows)
r = dict(rows[0]); r["length"] = 1e300
with open(sys.argv[1], "a") as f:
    f.write(json.dumps(rows[0]) + "\n" + "[1, 2, 3]\n" + json.dumps(r) + "\n")
PY
"$LH" niah "${small_args[@]}" --out "$o" > "$o.4.log" 2>&1 || { cat "$o.4.log"; fail "the run over odd rows failed"; }
grep -q "(0 run now, 2 from earlier runs)" "$o.4.log" || { cat "$o.4.log"; fail "odd rows changed what ran"; }
grep -q "results.jsonl: 2 lines (the first: line 4) are not a trial row" "$o.4.log" || { cat "$o.4.log"; fail "the odd lines are not named"; }
grep -q "results.jsonl: 1 row repeats an earlier row's trial (the first: line 3)" "$o.4.log" || { cat "$o.4.log"; fail "the repeated row is not named"; }
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); assert s["trials"] == 2, s["trials"]' "$o/summary.json" ||
  fail "summary.json counts other than the sweep's 2 trials"
# OUT/results.jsonl is reopened by every rerun: a symbolic link planted there is never written or read
# through, and a FIFO there cannot hang the sweep
printf 'precious\n' > "$T/victim"
for kind in link fifo; do
  o=$T/planted-$kind
  mkdir -p "$o"
  if [ $kind = link ]; then ln -s "$T/victim" "$o/results.jsonl"; else mkfifo "$o/results.jsonl"; fi
  rc=0
  timeout 60 "$LH" niah "${args[@]}" --out "$o" > "$o.log" 2>&1 || rc=$?
  [ $rc != 0 ] && [ $rc != 124 ] || { cat "$o.log"; fail "a $kind at results.jsonl: exit $rc"; }
  grep -q "results.jsonl: .*remove it" "$o.log" || { cat "$o.log"; fail "a $kind at results.jsonl: no word of what is in the way"; }
done
[ "$(cat "$T/victim")" = precious ] || fail "the sweep wrote through a link at results.jsonl"
# names that are not UTF-8 (a model folder, a corpus, a compared sweep's folder; templates that are
# not are refused) reach the results as text with U+FFFD: sweep.json, summary.json, results.jsonl and
# compare.json were written with the raw bytes, which no strict JSON reader takes
bad=$(printf 'x\377y')
mkdir -p "$T/u-$bad"
ln -s "$PWD/models/haul-tiny" "$T/u-$bad/haul-tiny-$bad"
cp "$T/corpus/notes.txt" "$T/corpus-$bad.txt"
u_args=(--model "$T/u-$bad/haul-tiny-$bad" --corpus "$T/corpus-$bad.txt" --lengths 1k --depths 50 --chunk 256
  --progress none)
"$LH" niah "${u_args[@]}" --out "$T/u-$bad/sweep" > "$T/u.log" 2>&1 || { cat "$T/u.log"; fail "a sweep over names that are not UTF-8 failed"; }
"$LH" niah compare "$T/small" "$T/u-$bad/sweep" --out "$T/u-compare" > "$T/uc.log" 2>&1 ||
  { cat "$T/uc.log"; fail "comparing a sweep in a folder whose name is not UTF-8 failed"; }
python3 - "$T/u-$bad/sweep" "$T/u-compare" <<'PY'
import glob, json, os, sys
files = [os.path.join(sys.argv[1], f) for f in ("sweep.json", "summary.json", "results.jsonl")]
files += glob.glob(os.path.join(sys.argv[2], "*.json"))
assert len(files) > 3, files
for f in files:
    text = open(f, "rb").read().decode("utf-8")  # strict: raises on any byte that is not UTF-8
    for line in (text.splitlines() if f.endswith(".jsonl") else [text]):
        json.loads(line)
s = json.load(open(os.path.join(sys.argv[1], "sweep.json")))
assert "\ufffd" in s["title"] and "\ufffd" in s["key"]["corpus"], s
PY
# the same command again resumes the same sweep (the repaired key matches itself)
"$LH" niah "${u_args[@]}" --out "$T/u-$bad/sweep" > "$T/u2.log" 2>&1 || { cat "$T/u2.log"; fail "rerun over names that are not UTF-8 failed"; }
grep -q "0 run now" "$T/u2.log" || { cat "$T/u2.log"; fail "the rerun did not find its trials done"; }
echo "niah_e2e: ok"
