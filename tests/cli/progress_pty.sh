#!/usr/bin/env bash
# progress_pty.sh — `longhaul run`'s progress as a user sees it: on a real pseudo-terminal of 80
# and of 200 columns (tests/cli/ptyterm.py runs it there and replays the bytes through a terminal
# model), and as plain and JSON lines for logs.
#   - no line reaches the last column, so nothing wraps and redraws never scroll: each finished
#     phase leaves exactly one line;
#   - a group of requests over the same documents is labelled "q1 +1" and explained; the ingest
#     line counts bytes (KB), the batch line ends "3 of 3 requests finished";
#   - a finished phase's line is LABEL PHASE COUNT RATE "in TIME"; an interrupted one says
#     "stopped", where, and why, never an ETA;
#   - plain and JSON lines carry the UTC time (checked under a time zone hours off UTC).
. "$(dirname "$0")/../jobs/lib.sh"
export TZ=America/New_York
PT="python3 $SRC/tests/cli/ptyterm.py"
make_repo
req() { # id, max_tokens, number of copies of the archive
  python3 -c 'import json,sys
print(json.dumps({"custom_id":sys.argv[1],"method":"POST","url":"/v1/chat/completions",
  "body":{"messages":[{"role":"user","content":"Which file defines lh_crc32c?"}],"max_tokens":int(sys.argv[2]),
  "temperature":0,"documents":["repo.tar.gz"]*int(sys.argv[3])}}))' "$@"; }
{ req q1 8 1; req q2 8 1
  echo '{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":6,"temperature":0}}'
} > "$T/batch.jsonl"
run_pty() { # cols, name, [--interrupt-at TEXT], batch: the run's stderr on a pty; stdout to a file
  local cols=$1 name=$2; shift 2
  local extra=(); [ "$1" = --interrupt-at ] && { extra=(--interrupt-at "$2"); shift 2; }
  set +e
  $PT run --cols "$cols" "${extra[@]}" "$T/$name.raw" -- sh -c 'exec "$0" run "$1" --model "$2" --out "$3" --chunk 256 > "$4"' \
    "$LH" "$1" "$MODEL" "$T/out-$name" "$T/$name.stdout"
  rc=$?
  set -e
  $PT screen --cols "$cols" "$T/$name.raw" > "$T/$name.screen"
}
has() { grep -Eq -- "$2" "$T/$1.screen" || { cat "$T/$1.screen"; fail "$1: no line matching '$2'"; }; }
count() { grep -Ec -- "$2" "$T/$1.screen" || true; }

for cols in 80 200; do
  n=c$cols
  run_pty "$cols" "$n" "$T/batch.jsonl"
  [ $rc = 0 ] || { cat "$T/$n.screen"; fail "$n: exit status $rc"; }
  has "$n" "^wraps=0 unknown=0$"
  long=$(grep -v '^wraps=' "$T/$n.screen" | awk -v w="$cols" 'length($0) > w - 1' | head -1)
  [ -z "$long" ] || fail "$n: a line of more than $((cols - 1)) columns: $long"
  for phase in ingest prefill decode; do
    k=$(count "$n" "^q1 \+1 $phase ")
    [ "$k" = 1 ] || { cat "$T/$n.screen"; fail "$n: $k '$phase' lines for q1 +1 (the redraws scrolled?)"; }
  done
  has "$n" "^q1 \+1: q1 and 1 more request over the same documents"
  has "$n" "^q1 \+1 ingest +[0-9.]+ KB [0-9.]+ [KM]?B/s in [0-9.]+s$"
  has "$n" "^q1 \+1 prefill [0-9.]+K tok [0-9.]+K? tok/s in [0-9.]+s$"
  has "$n" "^q1 \+1 decode +[0-9]+ tok [0-9.]+K? tok/s in [0-9.]+s$"
  has "$n" "^3 of 3 requests finished: 3 done, 0 failed  elapsed [0-9.]+s$"
  ! grep -q "ETA" "$T/$n.screen" || fail "$n: an ETA left on the screen after the run"
done

# Ctrl-C in the middle of a long prefill: its line says it stopped, where and why
# 30 copies (about 28K tokens each): a long prefill under the tiny model's 1M-token context, with room
# for util/ (the archive's source) to grow
req long 4 30 > "$T/long.jsonl"
run_pty 80 int --interrupt-at " prefill " "$T/long.jsonl"
[ $rc = 130 ] || { cat "$T/int.screen"; fail "interrupted run: exit status $rc, expected 130"; }
[ "$(count int "^long prefill")" = 1 ] || { cat "$T/int.screen"; fail "the prefill left more than its one line"; }
has int "^long prefill stopped +[0-9]+% "
line=$(grep "^long prefill stopped" "$T/int.screen")
case "$line" in *ETA*) fail "the stopped line has an ETA: $line" ;; esac
case "$line" in *" after "*"(interrupted)"*) ;; *) fail "the stopped line does not say after what and why: $line" ;; esac

# plain and JSON: every line stamped with the UTC time; the totals the runner gives
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out-plain" --chunk 256 --progress plain > /dev/null 2> "$T/plain.log" \
  || { cat "$T/plain.log"; fail "plain run failed"; }
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out-json" --chunk 256 --progress json > /dev/null 2> "$T/json.log" \
  || { cat "$T/json.log"; fail "json run failed"; }
python3 - "$T/plain.log" "$T/json.log" <<'PY' || fail "timestamps or totals"
import calendar, json, re, sys, time
def age(ts, fmt):
    return abs(time.time() - calendar.timegm(time.strptime(ts, fmt)))
plain = open(sys.argv[1]).read().splitlines()
assert len(plain) >= 8, plain
for l in plain:
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)Z longhaul: ", l)
    assert m and age(m.group(1), "%Y-%m-%dT%H:%M:%S") < 120, f"plain line without the UTC time: {l!r}"
assert any("q1 +1 prefill done:" in l for l in plain), plain
assert any("3 of 3 requests finished: 3 done, 0 failed" in l for l in plain), plain
events = [json.loads(l) for l in open(sys.argv[2])]
for o in events:
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.\d{3}Z", o.get("ts", ""))
    assert m and age(m.group(1), "%Y-%m-%dT%H:%M:%S") < 120, f"json line without the UTC time: {o}"
begin = {(o["job"], o["phase"]): o for o in events if o["event"] == "begin"}
assert begin[("q1", "ingest")]["total"] > 0, begin[("q1", "ingest")]   # the archive's size
assert begin[("q1", "decode")]["total"] == 16, begin[("q1", "decode")]  # 2 forks x max_tokens 8
assert begin[("q1", "ingest")]["requests"] == 2
b = [o for o in events if o["event"] == "batch"]
assert (b[0]["done"], b[0]["total"]) == (0, 3) and (b[-1]["done"], b[-1]["failed"]) == (3, 0), b
PY
echo "progress_pty: 80 and 200 columns without a wrap, stopped line, UTC stamps: ok"
