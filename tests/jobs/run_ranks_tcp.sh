#!/usr/bin/env bash
# run_ranks_tcp.sh — `longhaul run` as 2 ranks of a world without MPI (issue 10: LH_WORLD_SIZE,
# LH_RANK and a rendezvous file; engine/comm_tcp.c), with nothing else to start or end them:
#  1. the 2 ranks give the answers of one process, though a stale rendezvous file was there first;
#  2. rank 0 killed with -9 in mid-prefill: rank 1 ends by itself (it sees rank 0's links close),
#     and one process finishes the jobs from the checkpoints with the reference output;
#  3. rank 1 killed with -9 in mid-prefill: rank 0 fails the run with a message naming rank 1,
#     exits, and one process finishes the jobs;
#  4. bad worlds fail at once with a clear message: a rank number outside the world, a world with
#     no rendezvous file, a rank 0 whose other rank never comes (the timeout names the file).
. "$(dirname "$0")/lib.sh"
make_repo
make_ranks_batch
run1() { "$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --progress none "$@"; }
# rank R OUT: start rank R of a 2-rank world writing into OUT (in the background; $! is its pid)
rank() {
  LH_WORLD_SIZE=2 LH_RANK=$1 LH_RENDEZVOUS="$2.rdv" LH_RENDEZVOUS_TIMEOUT=60 timeout 300 \
    "$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --progress none --out "$2" > "$2.rank$1.log" 2>&1 &
}

run1 --out "$T/ref" > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "one-process run failed"; }
# a stale rendezvous file of an earlier run (closed port, other nonce): rank 1, started first,
# reads it, fails to join through it, and retries until rank 0 has written the run's own
echo "localhost 9 42" > "$T/ranks.rdv"
rank 1 "$T/ranks"; p1=$!
sleep 0.5
rank 0 "$T/ranks"; p0=$!
wait $p0 || { cat "$T/ranks.rank0.log"; fail "rank 0 of 2 failed"; }
wait $p1 || { cat "$T/ranks.rank1.log"; fail "rank 1 of 2 failed"; }
diff <(answers "$T/ref/output.jsonl") <(answers "$T/ranks/output.jsonl") || fail "2 ranks over TCP answer differently"
[ ! -e "$T/ranks.rdv" ] || fail "the rendezvous file was left behind"

# 2, 3: kill one rank with -9 once checkpoints exist; the other must end by itself
kill_rank() {
  local r=$1 dir=$2 attempt pk pother n rc
  for attempt in 1 2 3 4 5; do
    rm -rf "$dir" "$dir".*
    rank 1 "$dir"; local q1=$!
    rank 0 "$dir"; local q0=$!
    for _ in $(seq 1 300); do
      n=$(checkpoints "$dir")
      [ "$n" -ge $attempt ] && break
      kill -0 $q0 2>/dev/null || break
      sleep 0.1
    done
    if [ "$r" = 0 ]; then pk=$q0 pother=$q1; else pk=$q1 pother=$q0; fi
    kill -9 "$(pgrep -P "$pk" longhaul || echo "$pk")" 2>/dev/null || true
    set +e
    wait $pother
    rc=$?
    wait $pk
    set -e
    [ $rc != 124 ] || fail "rank $r killed: the other rank was left running until the timeout"
    [ ! -s "$dir/output.jsonl" ] && [ $rc != 0 ] && { echo "$attempt"; return; }
  done
  fail "could not kill rank $r of a 2-rank run in mid-run"
}
for r in 0 1; do
  attempt=$(kill_rank $r "$T/mix$r")
  if [ $r = 1 ]; then
    grep -q "rank 1" "$T/mix1.rank0.log" || { cat "$T/mix1.rank0.log"; fail "rank 0's error does not name the killed rank 1"; }
  fi
  run1 --out "$T/mix$r" > "$T/mix$r-2.log" 2>&1 || { cat "$T/mix$r-2.log"; fail "one process could not finish after rank $r died"; }
  [ "$(restored "$T/mix$r-2.log")" -gt 0 ] || { cat "$T/mix$r-2.log"; fail "nothing restored after rank $r died"; }
  diff <(answers "$T/ref/output.jsonl") <(answers "$T/mix$r/output.jsonl") || fail "resumed after rank $r died: answers differ"
done

# 4: bad worlds
set +e
LH_WORLD_SIZE=2 LH_RANK=2 LH_RENDEZVOUS="$T/x.rdv" "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/bad1" > "$T/bad1.log" 2>&1
rc1=$?
LH_WORLD_SIZE=2 LH_RANK=0 "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/bad2" > "$T/bad2.log" 2>&1
rc2=$?
LH_WORLD_SIZE=2 LH_RANK=0 LH_RENDEZVOUS="$T/alone.rdv" LH_RENDEZVOUS_TIMEOUT=1 timeout 60 "$LH" run "$T/batch.jsonl" \
  --model "$MODEL" --out "$T/bad3" > "$T/bad3.log" 2>&1
rc3=$?
set -e
[ $rc1 != 0 ] && grep -q "LH_RANK must be 0..1" "$T/bad1.log" || { cat "$T/bad1.log"; fail "a rank outside the world was not refused clearly"; }
[ $rc2 != 0 ] && grep -q "needs LH_RENDEZVOUS" "$T/bad2.log" || { cat "$T/bad2.log"; fail "a world without a rendezvous file was not refused clearly"; }
[ $rc3 != 0 ] && [ $rc3 != 124 ] && grep -q "1 of 2 ranks joined through .*alone.rdv" "$T/bad3.log" ||
  { cat "$T/bad3.log"; fail "rank 0 alone did not time out with a clear message"; }
[ ! -e "$T/alone.rdv" ] || fail "the timed-out rank 0 left its rendezvous file"
echo "run_ranks_tcp: ok (restored $(restored "$T/mix0-2.log") and $(restored "$T/mix1-2.log") tokens after the kills)"
