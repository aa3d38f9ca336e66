#!/usr/bin/env bash
# run_kill_points.sh — kill -9 at test points spread over one batch's ingest, prefill, checkpoint
# commits, decode, job commits and output writes (util/testpoint.h), at least 50 of them, then
# rerun; every rerun's output.jsonl, errors.jsonl and job folders equal an uninterrupted run's,
# once what names a moment or this run's own work is set aside (timestamps, timings, rates, the
# store's path, cache counters). Then one chain: kill, rerun killed again later, ..., finish.
# LH_KILL_POINTS (default 56) sets how many points; the seed is fixed (LH_KILL_SEED) so a failure
# names a point that reproduces. After each kill, every job folder that has its result.json has its
# manifest.jsonl too (result.json is written last).
. "$(dirname "$0")/lib.sh"
make_repo
mkdir -p "$T/notes" && printf 'The staging password rotates every 91 days.\n' > "$T/notes/a.txt"
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"p1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_crc32c?"}],"max_tokens":6,"temperature":0,"documents":["repo.tar.gz"]}}
{"custom_id":"p2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the rotation interval?"}],"max_tokens":6,"temperature":0.9,"seed":2,"documents":["repo.tar.gz"]}}
{"custom_id":"p3","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How often does the password rotate?"}],"max_tokens":5,"temperature":0,"documents":["notes"]}}
{"custom_id":"p4","method":"POST","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":4,"temperature":0}}
{"custom_id":"p5 broken","method":"POST"
B
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 256 --progress none)
LH_TEST_POINTS="$T/points" "${RUN[@]}" --out "$T/ref" > "$T/ref.log" 2>&1 || true
[ -s "$T/ref/output.jsonl" ] || { cat "$T/ref.log"; fail "no reference output"; }
norm "$T/ref" > "$T/ref.norm"
# The points: stratified over the kinds, evenly spaced within each kind, then topped up.
python3 - "$T/points" "${LH_KILL_POINTS:-56}" "${LH_KILL_SEED:-29}" > "$T/plan" <<'P'
import random, sys
names = [l.strip() for l in open(sys.argv[1])]
want, rng = int(sys.argv[2]), random.Random(int(sys.argv[3]))
kinds = sorted(set(names))
need = {"ingest", "prefill", "checkpoint", "decode", "commit", "output"}
assert need <= set(kinds), f"test points missing from a full run: {need - set(kinds)}"
picked = set()
per = max(1, want // len(kinds))
for k in kinds:
    idx = [i + 1 for i, n in enumerate(names) if n == k]
    step = max(1, len(idx) // per)
    picked.update(idx[::step][:per])
rest = [i for i in range(1, len(names) + 1) if i not in picked]
rng.shuffle(rest)
picked.update(rest[: max(0, want - len(picked))])
for i in sorted(picked):
    print(i, names[i - 1])
P
total=$(wc -l < "$T/points")
n=0
while read -r at kind; do
  rm -rf "$T/out"
  set +e
  LH_TEST_KILL_AT=any:$at "${RUN[@]}" --out "$T/out" > "$T/kill.log" 2>&1
  rc=$?
  set -e
  [ $rc = 137 ] || { cat "$T/kill.log"; fail "point $at ($kind) of $total: the run was not killed (exit $rc)"; }
  # a job folder is whole whenever its result.json is there (result.json is written last)
  for r in "$T"/out/jobs/*/result.json; do
    [ ! -e "$r" ] || [ -e "${r%result.json}manifest.jsonl" ] \
      || fail "killed at point $at ($kind) of $total: ${r#$T/} has no manifest.jsonl beside it"
  done
  "${RUN[@]}" --out "$T/out" > "$T/rerun.log" 2>&1 || true
  diff "$T/ref.norm" <(norm "$T/out") > "$T/diff" \
    || { cat "$T/diff" "$T/rerun.log"; fail "killed at point $at ($kind) of $total: the rerun's outputs differ"; }
  n=$((n + 1))
done < "$T/plan"
kinds=$(cut -d' ' -f2 "$T/plan" | sort | uniq -c | tr '\n' ' ')
echo "run_kill_points: $n kill points of $total ($kinds): every rerun equals the uninterrupted run"
# a chain: each run killed further on, then one to the end
rm -rf "$T/out"
for at in 3 9 20 40; do
  LH_TEST_KILL_AT=any:$at "${RUN[@]}" --out "$T/out" > /dev/null 2>&1 || true
done
"${RUN[@]}" --out "$T/out" > "$T/rerun.log" 2>&1 || true
diff "$T/ref.norm" <(norm "$T/out") || fail "after a chain of kills the outputs differ"
echo "run_kill_points: a chain of 4 kills, then a full run: ok"
