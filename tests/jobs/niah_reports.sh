#!/usr/bin/env bash
# niah_reports.sh — one sweep per OUT folder, with the embedded model on the CPU (256-1k tokens, a
# second or two per sweep).
#  - A sweep into an OUT that holds another grid (lengths, depths, trials per cell) or another key
#    (seed) is refused with exit 2, a message naming what differs and the ways out, and the folder
#    untouched; results.jsonl without sweep.json is refused too.
#  - --extend grows a sweep when this run's grid holds the recorded one (finished trials kept, the
#    missing ones run), and refuses (naming the flags to pass) when it does not.
#  - --force discards the earlier results and starts fresh, and says so.
#  - A sweep.json without a grid (older builds) goes on when its trials fit this run's grid.
#  - heatmap.svg carries the overall score (recomputed here from results.jsonl, floored) and the
#    metric as text; summary.json has the per-cell all-values share.
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
python3 - "$T/a" <<'PY'
import json, math, os, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
score = sum(r["score"] for r in rows) / len(rows)
allv = sum(r["contains"] for r in rows) / len(rows)
floor1 = lambda x: "%.1f" % (math.floor(x * 1000 + 1e-9) / 10)
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

echo "niah_reports: ok"
