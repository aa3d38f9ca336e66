#!/usr/bin/env bash
# niah_reports.sh — one sweep per OUT folder, and `niah compare`, with the embedded model and the
# tiny chat fixture on the CPU (256-1k tokens, a second or two per sweep).
#  - A sweep into an OUT that holds another grid (lengths, depths, trials per cell) or another key
#    (seed) is refused with exit 2, a message naming what differs and the ways out, and the folder
#    untouched; results.jsonl without sweep.json is refused too.
#  - --extend grows a sweep when this run's grid holds the recorded one (finished trials kept, the
#    missing ones run), and refuses (naming the flags to pass) when it does not.
#  - --force discards the earlier results (and saved prompts) and starts fresh, and says so.
#  - A sweep.json without a grid (older builds) goes on when its trials fit this run's grid.
#  - heatmap.svg carries the overall score (recomputed here from results.jsonl, floored) and the
#    metric as text; summary.json has the per-cell all-values share.
#  - A sweep interrupted before it ran a trial (here while --wait waits for OUT's lock) exits 130
#    saying so, with no summary of 0 trials pointing at results that are not there.
#  - `niah compare A B` writes PNG, SVG, JSON and CSV into A/compare-with-<B> (or --out), whose
#    numbers match the two results.jsonl (recomputed here); two sweeps without a common cell are
#    refused with exit 2 and nothing written.
# A longhaul built without cairo (it says so in a sweep's summary) draws nothing: the heatmap's
# text is not checked, and compare must exit 1 having written its JSON and CSV.
set -euo pipefail
LH=${LH_LONGHAUL:-build/longhaul}
cd "${LH_SOURCE_DIR:-.}"
command -v python3 >/dev/null || { echo "SKIPPED: python3 is needed to read JSON" >&2; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/lh-niah-reports-XXXXXX")
[ -n "${LH_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
base=(--model models/haul-tiny --chunk 256 --progress none)
# niah_expect RC LOG ARGS...: run a sweep, require exit status RC
niah_expect() {
  local want=$1 log=$2
  shift 2
  local rc=0
  "$LH" niah "$@" > "$log" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { cat "$log"; fail "niah $* exited $rc, expected $want"; }
}
has() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks: $2"; }; }
sum() { sha256sum "$@" | cut -d' ' -f1 | tr '\n' ' '; }

# ---- one sweep per folder ----
niah_expect 0 "$T/a.log" "${base[@]}" --lengths 256,512 --depths 0,100 --out "$T/a"
cairo=1
if grep -qF "(no heatmap: built without cairo)" "$T/a.log"; then cairo=0; fi
python3 - "$T/a/sweep.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))["grid"]
assert g == {"lengths": [256, 512], "depths": [0, 100], "trials": 1}, g
PY
before=$(sum "$T/a/results.jsonl" "$T/a/sweep.json" "$T/a/summary.json")
# other lengths and depths
niah_expect 2 "$T/r1.log" "${base[@]}" --lengths 256,1k --depths 0,50,100 --out "$T/a"
has "$T/r1.log" "lengths 256,512 there, 256,1k here"
has "$T/r1.log" "depths 0,100 there, 0,50,100 here"
has "$T/r1.log" "Use another --out, --force to discard it and start fresh, or --extend --lengths 256,512,1k --depths 0,50,100 --trials 1"
# other trials per cell
niah_expect 2 "$T/r2.log" "${base[@]}" --lengths 256,512 --depths 0,100 --trials 2 --out "$T/a"
has "$T/r2.log" "trials per cell 1 there, 2 here"
# another key
niah_expect 2 "$T/r3.log" "${base[@]}" --lengths 256,512 --depths 0,100 --seed 7 --out "$T/a"
has "$T/r3.log" "different sweep (seed 20261201 there, 7 here)"
has "$T/r3.log" "--force to discard them and start fresh"
[ "$(sum "$T/a/results.jsonl" "$T/a/sweep.json" "$T/a/summary.json")" = "$before" ] || fail "a refused run changed OUT"
# the same grid goes on (nothing to run)
niah_expect 0 "$T/same.log" "${base[@]}" --depths 100,0 --lengths 512,256 --out "$T/a"
has "$T/same.log" "4 trials (0 run now, 4 from earlier runs)"

# ---- --extend ----
niah_expect 2 "$T/e1.log" "${base[@]}" --lengths 256,1k --depths 0,100 --extend --out "$T/a"
has "$T/e1.log" "--extend grows the sweep in $T/a and keeps every cell and trial it has"
has "$T/e1.log" "pass --lengths 256,512,1k --depths 0,100 --trials 1"
niah_expect 2 "$T/e2.log" "${base[@]}" --lengths 256,512 --depths 0,100 --force --extend --out "$T/a"
has "$T/e2.log" "pass one of them"
head -4 "$T/a/results.jsonl" > "$T/a-first4.jsonl"
niah_expect 0 "$T/e3.log" "${base[@]}" --lengths 256,512,1k --depths 0,100 --trials 2 --extend --out "$T/a"
has "$T/e3.log" "--extend: the sweep in $T/a grows (lengths 256,512 there, 256,512,1k here; trials per cell 1 there, 2 here); its 4 finished trials are kept"
has "$T/e3.log" "12 trials (8 run now, 4 from earlier runs)"
cmp <(head -4 "$T/a/results.jsonl") "$T/a-first4.jsonl" || fail "--extend rewrote the finished trials"
python3 - "$T/a" <<'PY'
import json, os, sys
d = sys.argv[1]
g = json.load(open(os.path.join(d, "sweep.json")))["grid"]
assert g == {"lengths": [256, 512, 1024], "depths": [0, 100], "trials": 2}, g
s = json.load(open(os.path.join(d, "summary.json")))
assert s["trials"] == 12 and len(s["cells"]) == 6, s
assert all(c["trials"] == 2 for c in s["cells"]), s["cells"]
assert s["trials_per_cell_min"] == s["trials_per_cell_max"] == 2, s
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
assert sorted((r["length"], r["depth"], r["trial"]) for r in rows) == \
    sorted((l, d, t) for l in (256, 512, 1024) for d in (0, 100) for t in (0, 1)), rows
PY

# ---- --force ----
niah_expect 0 "$T/f.log" "${base[@]}" --lengths 256 --depths 50 --force --out "$T/a"
has "$T/f.log" "--force: discarded the 12 finished trials in $T/a; the sweep starts fresh"
has "$T/f.log" "1 trials (1 run now, 0 from earlier runs)"
python3 - "$T/a" <<'PY'
import json, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
assert [(r["length"], r["depth"], r["trial"]) for r in rows] == [(256, 50, 0)], rows
assert json.load(open(os.path.join(d, "sweep.json")))["grid"] == {"lengths": [256], "depths": [50], "trials": 1}
assert json.load(open(os.path.join(d, "summary.json")))["trials"] == 1
PY
# --force discards the earlier sweep's saved prompts too: only this run's are left (a file of
# another name there is not the sweep's and stays)
niah_expect 0 "$T/p1.log" "${base[@]}" --lengths 256,512 --depths 0,100 --save-prompts --out "$T/p"
[ "$(ls "$T/p/prompts" | wc -l)" = 4 ] || { ls "$T/p/prompts"; fail "--save-prompts wrote no 4 prompts"; }
echo mine > "$T/p/prompts/notes.txt"
niah_expect 0 "$T/p2.log" "${base[@]}" --lengths 256 --depths 50 --save-prompts --force --out "$T/p"
[ "$(LC_ALL=C ls "$T/p/prompts" | tr '\n' ' ')" = "L256-D50-T0.txt notes.txt " ] || { ls "$T/p/prompts"; fail "--force left stale prompts"; }
rm "$T/p/prompts/notes.txt"
niah_expect 0 "$T/p3.log" "${base[@]}" --lengths 512 --depths 0 --force --out "$T/p"
[ ! -e "$T/p/prompts" ] || { ls "$T/p/prompts"; fail "--force without --save-prompts left the prompts"; }

# ---- folders from elsewhere ----
# results.jsonl without sweep.json: nobody can tell which sweep made them
mkdir -p "$T/orphan" && cp "$T/a/results.jsonl" "$T/orphan/"
niah_expect 2 "$T/o.log" "${base[@]}" --lengths 256 --depths 50 --out "$T/orphan"
has "$T/o.log" "holds 1 finished trials but no sweep.json"
# a sweep.json written before grids were recorded: its trials must fit this run's grid
python3 - "$T/a/sweep.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
del o["grid"]
json.dump(o, open(sys.argv[1], "w"))
PY
niah_expect 2 "$T/l1.log" "${base[@]}" --lengths 512 --depths 50 --out "$T/a"
has "$T/l1.log" "results.jsonl has finished trials outside this run's grid (lengths 256)"
niah_expect 0 "$T/l2.log" "${base[@]}" --lengths 256,512 --depths 50 --out "$T/a"
has "$T/l2.log" "2 trials (1 run now, 1 from earlier runs)"

# ---- the heatmap's text ----
python3 - "$T/a" "$cairo" <<'PY'
import json, math, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
score = sum(r["score"] for r in rows) / len(rows)
allv = sum(r["contains"] for r in rows) / len(rows)
floor1 = lambda x: "%.1f" % (math.floor(x * 1000 + 1e-9) / 10)
if sys.argv[2] == "1":
    svg = open(os.path.join(d, "heatmap.svg")).read()
    want = ">overall score %s%% \u00b7 all values %s%% \u00b7 1 trial per cell</text>" % (floor1(score), floor1(allv))
    assert want in svg, (want, svg[:3000])
    assert ">score = RULER string_match_all (share of expected values found)</text>" in svg, svg[:3000]
s = json.load(open(os.path.join(d, "summary.json")))
assert s["score_metric"] == "RULER string_match_all (share of expected values found)", s
for c in s["cells"]:
    rs = [r for r in rows if r["length"] == c["length"] and r["depth"] == c["depth"]]
    assert c["all_values"] == sum(r["contains"] for r in rs) / len(rs), (c, rs)
PY

# ---- niah compare ----
niah_expect 0 "$T/b.log" "${base[@]}" --lengths 256,512 --depths 0,100 --trials 2 --out "$T/A"
niah_expect 0 "$T/c.log" --model tests/fixtures/runner/tiny-chat --chunk 256 --progress none \
  --lengths 512,1k --depths 0,100 --out "$T/B"
rc=0
"$LH" niah compare "$T/A" "$T/B" > "$T/cmp.log" 2>&1 || rc=$?
[ "$rc" = $((1 - cairo)) ] || { cat "$T/cmp.log"; fail "compare exited $rc"; }
cat "$T/cmp.log"
drawn=(compare.png compare.svg)
[ "$cairo" = 1 ] || drawn=()
for f in "${drawn[@]}" compare.json compare.csv; do
  [ -s "$T/A/compare-with-B/$f" ] || fail "compare wrote no $f"
done
python3 - "$T/A" "$T/B" "$T/A/compare-with-B" "$cairo" <<'PY'
import collections, csv, json, math, os, sys
A, B, out = sys.argv[1:4]
def cells(d):
    by = collections.defaultdict(list)
    for l in open(os.path.join(d, "results.jsonl")):
        r = json.loads(l)
        by[(r["length"], r["depth"])].append(r["score"])
    return {k: (sum(v) / len(v), len(v)) for k, v in by.items()}
ca, cb = cells(A), cells(B)
keys = sorted(set(ca) | set(cb))
rows = list(csv.DictReader(open(os.path.join(out, "compare.csv"))))
assert [(int(r["length"]), float(r["depth"])) for r in rows] == keys, (rows, keys)
for r in rows:
    k = (int(r["length"]), float(r["depth"]))
    want_in = "both" if k in ca and k in cb else "a" if k in ca else "b"
    assert r["in"] == want_in, (r, want_in)
    if k in ca: assert abs(float(r["a_score"]) - ca[k][0]) < 1e-9 and int(r["a_trials"]) == ca[k][1], r
    if k in cb: assert abs(float(r["b_score"]) - cb[k][0]) < 1e-9 and int(r["b_trials"]) == cb[k][1], r
    if want_in == "both": assert abs(float(r["diff"]) - (cb[k][0] - ca[k][0])) < 1e-9, r
    else: assert r["diff"] == "", r
common = [k for k in keys if k in ca and k in cb]
assert len(common) == 2, common
j = json.load(open(os.path.join(out, "compare.json")))
assert j["common"]["cells"] == 2 and j["cells_only_a"] == 2 and j["cells_only_b"] == 2, j
assert abs(j["common"]["diff"] - sum(cb[k][0] - ca[k][0] for k in common) / 2) < 1e-9, j["common"]
for side, c, d in (("a", ca, A), ("b", cb, B)):
    rs = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
    assert abs(j[side]["score"] - sum(r["score"] for r in rs) / len(rs)) < 1e-9, j[side]
    for L in j[side]["lengths"]:
        xs = [r["score"] for r in rs if r["length"] == L["length"]]
        assert L["trials"] == len(xs) and abs(L["accuracy"] - sum(xs) / len(xs)) < 1e-9, L
for L in j["lengths"]:
    ks = [k for k in common if k[0] == L["length"]]
    assert L["common_cells"] == len(ks), L
    if ks: assert abs(L["diff"] - sum(cb[k][0] - ca[k][0] for k in ks) / len(ks)) < 1e-9, L
    else: assert L["diff"] is None, L
if sys.argv[4] == "1":
    svg = open(os.path.join(out, "compare.svg")).read()
    for s in (">A only</text>", ">B only</text>", ">NIAH compare: A vs B</text>",
              ">score = RULER string_match_all (share of expected values found)</text>"):
        assert s in svg, s
PY
grep -qF "2 cells in common (A only 2, B only 2)" "$T/cmp.log" || fail "compare's summary line"
# --out, and the exit status of a compare with nothing in common, a missing folder, bad usage
rc=0
"$LH" niah compare "$T/B" "$T/A" --out "$T/ba" > /dev/null 2>&1 || rc=$?
[ "$rc" = $((1 - cairo)) ] || fail "compare --out exited $rc"
[ -s "$T/ba/compare.json" ] || fail "compare --out wrote nothing"
niah_expect 0 "$T/far.log" "${base[@]}" --lengths 1k --depths 50 --out "$T/far"
rc=0
"$LH" niah compare "$T/A" "$T/far" > "$T/none.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/none.log"; fail "compare without a common cell exited $rc, expected 2"; }
has "$T/none.log" "have no cell (length and depth) in common"
[ ! -e "$T/A/compare-with-far" ] || fail "a refused compare wrote its folder"
rc=0
"$LH" niah compare "$T/A" "$T/missing" > "$T/miss.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/miss.log"; fail "compare with a missing folder exited $rc, expected 2"; }
has "$T/miss.log" "B: $T/missing is not a folder"
rc=0
"$LH" niah compare "$T/A" > /dev/null 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "compare with one folder exited $rc, expected 2"
# ---- Ctrl-C or SIGTERM before any trial ran: interrupted, and no summary ----
for sig in INT TERM; do
  o=$T/int-$sig && mkdir -p "$o"
  python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' \
    "$o/niah.lock" > "$o.lock" &
  holder=$!
  for _ in $(seq 100); do grep -q locked "$o.lock" && break; sleep 0.05; done
  "$LH" niah "${base[@]}" --lengths 256 --depths 50 --out "$o" --wait > "$o.log" 2>&1 &
  pid=$!
  for _ in $(seq 200); do grep -q fcntl_setlk "/proc/$pid/wchan" 2>/dev/null && break; sleep 0.05; done
  kill -$sig $pid
  rc=0
  wait $pid || rc=$?
  kill $holder; wait $holder 2>/dev/null || true
  [ $rc = 130 ] || { cat "$o.log"; fail "SIG$sig while waiting for OUT's lock: exit $rc, expected 130"; }
  has "$o.log" "interrupted while waiting for $o/niah.lock"
  if grep -qE "trials|results:" "$o.log"; then cat "$o.log"; fail "SIG$sig before any trial: a summary was printed"; fi
  [ ! -e "$o/results.jsonl" ] || fail "SIG$sig while waiting for the lock, yet results.jsonl was made"
done
echo "niah_reports: ok"
