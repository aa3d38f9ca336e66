#!/usr/bin/env bash
# run_claim_lost.sh — a runner that stalls for a whole lease and finds its jobs taken over
# (jobs/runner.c, on_prefix_chunk; store/store_jobs.c, dead owners). The run stops itself in the
# middle of a prefill (LH_TEST_STOP_AT=prefill:2, a SIGSTOP: util/testpoint.h); while it is stopped
# its job is given to another machine's runner, as that runner's claim would take it once the
# lease expired (sqlite3, behind the store's back); then the run goes on (SIGCONT). It must:
#   - notice at its next chunk, stop computing the prefix (at most 3 chunks of 64 tokens of the
#     documents' thousands computed), say the group was taken over, and leave the job alone:
#     still running under the other owner, no answer and no error stored;
#   - not print the job in output.jsonl or errors.jsonl as its own outcome;
# and once the other runner is gone too (its heartbeat older than the lease), a rerun takes the job
# over and answers it as a run that was never stalled does.
# Then two runs on one store (--db) with different --out: while the first holds the job (stopped
# mid-prefill), the second finds nothing it may claim; its output.jsonl lacks the request, so it
# must exit 75 naming the holder, not 0, and a rerun after the first finished prints the answer.
. "$(dirname "$0")/lib.sh"
make_repo
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"c","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":6,"temperature":0,"documents":["repo.tar.gz"]}}
B
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 64 --checkpoint-every 0 --progress none)
"${RUN[@]}" --out "$T/ref" > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "the reference run failed"; }
sql() { python3 - "$T/out/longhaul.db" "$@" <<'P'
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], timeout=30)
now = int(time.time() * 1000)
if sys.argv[2] == "give-away":   # another machine's runner, alive (a fresh heartbeat), holds it
    n = db.execute("UPDATE jobs SET owner_host = 'another-machine boot ns', owner_name = 'another-machine', "
                   "owner_pid = 4242, owner_start = 1, heartbeat_ms = ? WHERE state = 'running'", (now,)).rowcount
    db.commit()
    assert n == 1, n
elif sys.argv[2] == "other-gone":  # its heartbeat older than any lease
    n = db.execute("UPDATE jobs SET heartbeat_ms = 1 WHERE owner_pid = 4242").rowcount
    db.commit()
    assert n == 1, n
else:
    for r in db.execute("SELECT custom_id, state, owner_pid, error IS NOT NULL, "
                        "(SELECT count(*) FROM results WHERE job_id = jobs.id) FROM jobs"):
        print(*r)
P
}

# The state of process $1 once it has stopped at its test point or ended (T or gone), within 60 s.
stopped_state() {
  local st=gone
  for _ in $(seq 1 1200); do
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo gone)
    [ "$st" = T ] || [ "$st" = gone ] && break
    sleep 0.05
  done
  echo "$st"
}

LH_TEST_STOP_AT=prefill:2 "${RUN[@]}" --out "$T/out" --progress plain > "$T/stall.log" 2>&1 &
pid=$!
state=$(stopped_state "$pid")
[ "$state" = T ] || { kill -9 $pid 2>/dev/null; cat "$T/stall.log"; fail "the run did not stop at its second prefill chunk ($state)"; }
sql give-away
kill -CONT $pid
rc=0
wait $pid || rc=$?
grep -q "taken over by another process after a stall; left to it" "$T/stall.log" \
  || { cat "$T/stall.log"; fail "the stalled run did not say its group was taken over"; }
n=$(sed -n 's/.*tokens: \([0-9]*\) prefilled.*/\1/p' "$T/stall.log")
[ -n "$n" ] && [ "$n" -le 192 ] || { cat "$T/stall.log"; fail "the stalled run computed $n tokens of a prefix it had lost (chunks of 64)"; }
[ "$(sql show)" = "c running 4242 0 0" ] || { sql show; cat "$T/stall.log"; fail "the stalled run touched the job it lost"; }
grep -q '"custom_id":"c"' "$T/out/output.jsonl" "$T/out/errors.jsonl" 2>/dev/null \
  && { cat "$T/out/output.jsonl" "$T/out/errors.jsonl"; fail "the stalled run printed an outcome for the job it lost"; }
[ "$rc" = 75 ] || { cat "$T/stall.log"; fail "the stalled run exited $rc, not 75 (rerun me): its output lacks a request"; }
grep -q "1 request was taken over by another process after this run stalled" "$T/stall.log" \
  || { cat "$T/stall.log"; fail "the stalled run's summary did not say a request was taken over"; }
echo "run_claim_lost: the stalled run exited $rc and left the job to its new owner"

sql other-gone
"${RUN[@]}" --out "$T/out" > "$T/after.log" 2>&1 || { cat "$T/after.log"; fail "the rerun after the other owner died failed"; }
[ "$(sql show)" = "c done None 0 1" ] || { sql show; cat "$T/after.log"; fail "the rerun did not take the job over and answer it"; }
diff <(answers "$T/ref/output.jsonl") <(answers "$T/out/output.jsonl") || fail "the answer after the takeover differs from the reference"
echo "run_claim_lost: takeover: ok"

LH_TEST_STOP_AT=prefill:2 "${RUN[@]}" --out "$T/d1" --db "$T/shared.db" > "$T/d1.log" 2>&1 &
pid=$!
state=$(stopped_state "$pid")
[ "$state" = T ] || { kill -9 $pid 2>/dev/null; cat "$T/d1.log"; fail "the first run on the shared store did not stop ($state)"; }
rc=0
"${RUN[@]}" --out "$T/d2" --db "$T/shared.db" > "$T/d2.log" 2>&1 || rc=$?
kill -CONT $pid
wait $pid || { cat "$T/d1.log"; fail "the first run on the shared store failed"; }
[ "$rc" = 75 ] || { cat "$T/d2.log"; fail "a run whose request another run on its store holds exited $rc, not 75"; }
grep -q "1 request has no line in $T/d2/output.jsonl: another process is running it.*pid $pid on" "$T/d2.log" \
  || { cat "$T/d2.log"; fail "the summary does not say which request another process holds, and which process"; }
"${RUN[@]}" --out "$T/d2" --db "$T/shared.db" > "$T/d2b.log" 2>&1 || { cat "$T/d2b.log"; fail "the rerun on the shared store failed"; }
grep -q "1 already done" "$T/d2b.log" || { cat "$T/d2b.log"; fail "the rerun did not find the other run's answer"; }
diff <(answers "$T/ref/output.jsonl") <(answers "$T/d2/output.jsonl") || fail "the rerun's output differs from the reference"
echo "run_claim_lost: two runs on one store: ok"
