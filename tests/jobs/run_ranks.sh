#!/usr/bin/env bash
# run_ranks.sh — `longhaul run` as one process and as 2 ranks under mpirun (issue 10) gives the
# same answers, and a store checkpointed by the ranks resumes in one process and the other way:
#  1. one process: the reference output;
#  2. mpirun -np 2 on a fresh store: the same answers (the ranks' logits differ from one process's
#     only in the last bits, which does not move this model's tokens);
#  3. mpirun -np 2, rank 0 (then, in another run, rank 1) killed with -9 in mid-prefill: mpirun
#     ends the other rank, and one process finishes the jobs from the ranks' checkpoints with the
#     reference output;
#  4. one process's finished store, rerun with --force under mpirun: the prefill is restored from
#     that store's checkpoints and the answers are the same;
#  5. a rank that cannot open the model (rank 1 started in another folder, so the relative model
#     path is wrong there) makes rank 0 fail with that rank's message, exit 2, and no hang.
# Registered only in builds with MPI (tests/jobs/CMakeLists.txt); skips (77) without mpirun.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIPPED: no mpirun (Debian: openmpi-bin)" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make_repo
make_ranks_batch
run1() { "$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --progress none "$@"; }
runR() { mpirun -np 2 "$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --progress none "$@"; }

run1 --out "$T/ref" > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "one-process run failed"; }
runR --out "$T/ranks" > "$T/ranks.log" 2>&1 || { cat "$T/ranks.log"; fail "2-rank run failed"; }
diff <(answers "$T/ref/output.jsonl") <(answers "$T/ranks/output.jsonl") || fail "2 ranks answer differently"

# 3: kill rank 0 of a 2-rank run in mid-prefill, then finish in one process
# kill_rank R DIR: start a 2-rank run into DIR, kill rank R with -9 once checkpoints exist (retried
# when the run finished first); the launcher must then end the other rank by itself
kill_rank() {
  local r=$1 dir=$2 attempt p n launcher
  for attempt in 1 2 3 4 5; do
    rm -rf "$dir"
    timeout 300 mpirun -np 2 "$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --progress none \
      --out "$dir" > "$dir.log" 2>&1 &
    launcher=$!
    # wait for the ranks' first checkpoints (a loaded machine takes a while to get there)
    for _ in $(seq 1 300); do
      n=$(checkpoints "$dir")
      [ "$n" -ge $attempt ] && break
      kill -0 $launcher 2>/dev/null || break
      sleep 0.1
    done
    killed=0
    for p in $(pgrep -x longhaul || true); do
      if tr '\0' '\n' < /proc/$p/cmdline 2>/dev/null | grep -qx "$dir" &&
         tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r"; then
        kill -9 "$p" 2>/dev/null && killed=1
      fi
    done
    set +e
    wait $launcher
    local rc=$?
    set -e
    [ $rc != 124 ] || fail "rank $r killed: the other rank was left running"
    [ "$killed" = 1 ] && [ ! -s "$dir/output.jsonl" ] && { echo "$attempt"; return; }
  done
  fail "could not kill rank $r of a 2-rank run in mid-run"
}
for r in 0 1; do
  attempt=$(kill_rank $r "$T/mix$r")
  run1 --out "$T/mix$r" > "$T/mix$r-2.log" 2>&1 || { cat "$T/mix$r-2.log"; fail "one process could not finish after rank $r died"; }
  [ "$(restored "$T/mix$r-2.log")" -gt 0 ] || { cat "$T/mix$r-2.log"; fail "nothing restored after rank $r died"; }
  diff <(answers "$T/ref/output.jsonl") <(answers "$T/mix$r/output.jsonl") || fail "resumed after rank $r died: answers differ"
done

# 4: one process's store, rerun by the ranks
runR --out "$T/ref" --force > "$T/again.log" 2>&1 || { cat "$T/again.log"; fail "2-rank rerun failed"; }
[ "$(restored "$T/again.log")" -gt 0 ] || { cat "$T/again.log"; fail "the ranks restored nothing from one process's store"; }
diff <(answers "$T/ranks/output.jsonl") <(answers "$T/ref/output.jsonl") || fail "the ranks resumed one process's store differently"
# 5: rank 1's error reaches rank 0
set +e
lh=$(realpath "$LH")
(cd "$SRC" && timeout 120 mpirun -np 1 "$lh" run "$T/batch.jsonl" --model tests/fixtures/runner/tiny-chat \
  --out "$T/bad" --progress none : -np 1 -wdir / "$lh" > "$T/bad.log" 2>&1)
rc=$?
set -e
[ $rc != 124 ] || fail "a rank that failed to open the model left the others hanging"
grep -q "rank 1 of 2: .*not a model folder" "$T/bad.log" || { cat "$T/bad.log"; fail "rank 1's error did not reach rank 0"; }
echo "run_ranks: ok (restored $(restored "$T/mix0-2.log"), $(restored "$T/mix1-2.log") and $(restored "$T/again.log") tokens)"
