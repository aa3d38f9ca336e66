#!/usr/bin/env bash
# run_faults.sh — faults of the machine, not of the jobs, with real faults (issue 29):
#   - kill -9 between a job's commit to the store and its files: the rerun rebuilds the job's
#     folder, output.jsonl and errors.jsonl from the store, and sweeps the dead writer's temporary;
#   - a full disk (a small tmpfs) during a run: exit 75, nothing marked failed, the jobs queued;
#     after the disk grows, the rerun resumes and answers as an uninterrupted run;
#   - a read-only output folder is refused at once (exit 75), before the model is loaded;
#   - two runs on one --out: the second exits 75 naming the first's pid and writes nothing; with
#     --wait it queues behind the first and then finds every job done; Ctrl-C or SIGTERM while it
#     waits is an interrupt (130) that names the lock, not a fault (75);
#   - a symbolic link planted at OUT/jobs/<id>, OUT/jobs, OUT/longhaul.lock, OUT/longhaul.db or its
#     -journal/-wal: exit 75 naming it, nothing written through it (a --db link is followed, and
#     OUT itself may be a link: its store is made in the folder it names);
#   - a store cut short: exit 75 naming it and what to do, without an earlier run's table;
#   - the output folder, store included, removed under a running run: exit 75 saying so, and that
#     what the store held is lost; the folder is not made again;
#   - a file size limit (ulimit -f) that the store reaches: exit 75 naming the limit, not a death
#     by SIGXFSZ; the rerun without it answers as an uninterrupted run.
# The tmpfs cases skip, saying so, where mount is not allowed.
. "$(dirname "$0")/lib.sh"
make_repo
mkdir -p "$T/other" && cp "$SRC"/util/hash.c "$T/other/"
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"f1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_crc32c?"}],"max_tokens":8,"temperature":0,"documents":["repo.tar.gz"]}}
{"custom_id":"f2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":8,"temperature":0.7,"seed":5,"documents":["repo.tar.gz"]}}
{"custom_id":"f3","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What does this file do?"}],"max_tokens":6,"temperature":0,"documents":["other"]}}
{"custom_id":"bad","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"documents":["missing.tar"]}}
B
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 32 --progress none)
# a run expected to fail: its exit status into rc (set -e stays on)
run_rc() { rc=0; "${RUN[@]}" "$@" || rc=$?; }
"${RUN[@]}" --out "$T/ref" > "$T/ref.log" 2>&1 && fail "the reference run should exit 1 (one request fails)" || true
[ -s "$T/ref/output.jsonl" ] || { cat "$T/ref.log"; fail "no reference output"; }
norm "$T/ref" > "$T/ref.norm"
grep -q '"custom_id": "bad"' "$T/ref.norm" || fail "errors.jsonl lacks the failed request"

# -- kill -9 right after the first commit, and a stale temporary left by a dead writer
LH_TEST_KILL_AT=commit:1 run_rc --out "$T/k" > /dev/null 2>&1
[ $rc = 137 ] || fail "the run was not killed at its first commit (exit $rc)"
ls "$T/k/jobs" 2>/dev/null | grep -q . && fail "a job folder exists although the kill came before any file"
mkdir -p "$T/k/jobs/f1" && echo junk > "$T/k/jobs/f1/result.json.tmp.999999999"
echo junk > "$T/k/output.jsonl.tmp.999999999"
"${RUN[@]}" --out "$T/k" > "$T/k.log" 2>&1 || true
grep -q "1 already done" "$T/k.log" || { cat "$T/k.log"; fail "the committed job was not found done"; }
[ -e "$T/k/jobs/f1/result.json.tmp.999999999" ] && fail "the dead writer's temporary is still there"
[ -e "$T/k/output.jsonl.tmp.999999999" ] && fail "the dead writer's output temporary is still there"
diff "$T/ref.norm" <(norm "$T/k") || fail "outputs after a kill between commit and files differ from the reference"
# a deleted job folder comes back from the store on the next run
rm -rf "$T/k/jobs/f2"
"${RUN[@]}" --out "$T/k" > /dev/null 2>&1 || true
diff "$T/ref.norm" <(norm "$T/k") || fail "a deleted job folder was not rebuilt from the store"
echo "run_faults: kill between commit and files: ok"

# -- two runs on one --out
mkdir -p "$T/c"
"${RUN[@]}" --out "$T/c" > "$T/c1.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q "pid $pid" "$T/c/longhaul.lock" 2>/dev/null && break; sleep 0.05; done
run_rc --out "$T/c" > "$T/c2.log" 2>&1
if kill -0 $pid 2>/dev/null; then
  [ $rc = 75 ] || { cat "$T/c2.log"; fail "a second run on a busy --out exited $rc, expected 75"; }
  grep -q "pid $pid" "$T/c2.log" || { cat "$T/c2.log"; fail "the second run does not name the holder's pid $pid"; }
  "${RUN[@]}" --out "$T/c" --wait > "$T/c3.log" 2>&1 || true
  grep -q "4 already done" "$T/c3.log" || { cat "$T/c3.log"; fail "--wait did not queue behind the first run"; }
else
  echo "run_faults: the first run ended before the second started; the busy case is not exercised" >&2
fi
wait $pid || true
diff "$T/ref.norm" <(norm "$T/c") || fail "two runs on one --out changed the outputs"
echo "run_faults: two runs on one --out: ok"

# -- Ctrl-C (or SIGTERM) while --wait queues behind another run: interrupted (130), not a fault of
# the machine (75), and nothing ran
for sig in INT TERM; do
  rm -rf "$T/q" && mkdir -p "$T/q"
  hold_lock "$T/q/longhaul.lock"
  "${RUN[@]}" --out "$T/q" --wait > "$T/q.log" 2>&1 &
  pid=$!
  blocked_on_lock $pid
  kill -$sig $pid
  rc=0
  wait $pid || rc=$?
  kill $holder; wait $holder 2>/dev/null || true
  [ $rc = 130 ] || { cat "$T/q.log"; fail "SIG$sig while waiting for --out's lock: exit $rc, expected 130"; }
  grep -q "interrupted while waiting for $T/q/longhaul.lock" "$T/q.log" || { cat "$T/q.log"; fail "SIG$sig while waiting: message"; }
  [ ! -e "$T/q/longhaul.db" ] || fail "SIG$sig while waiting for the lock, yet a store was made"
done
echo "run_faults: interrupted while waiting for the lock: ok"

# -- a symbolic link planted under --out (at jobs/<id>, or jobs itself) to a folder elsewhere: the
# run stops (75) naming the link and writes nothing through it; once it is removed, the rerun
# answers as the reference
for planted in jobs/f1 jobs; do
  rm -rf "$T/s" "$T/victim" && mkdir -p "$T/s/$(dirname "$planted")" "$T/victim"
  echo precious > "$T/victim/result.json"
  ln -s "$T/victim" "$T/s/$planted"
  run_rc --out "$T/s" > "$T/s.log" 2>&1
  [ $rc = 75 ] || { cat "$T/s.log"; fail "a symbolic link at $planted: exit $rc, expected 75"; }
  grep -q "$T/s/$planted is a symbolic link" "$T/s.log" || { cat "$T/s.log"; fail "the message does not name the link $planted"; }
  [ "$(ls "$T/victim")" = result.json ] && [ "$(cat "$T/victim/result.json")" = precious ] \
    || { ls -R "$T/victim"; fail "the run wrote through the symbolic link at $planted"; }
  rm "$T/s/$planted"
  "${RUN[@]}" --out "$T/s" > "$T/s.log" 2>&1 || true
  diff "$T/ref.norm" <(norm "$T/s") || { cat "$T/s.log"; fail "the rerun after removing the link at $planted differs"; }
done
echo "run_faults: a symbolic link planted under --out: ok"

# -- a symbolic link planted at OUT/longhaul.lock (to a file elsewhere): taking the lock truncates
# the lock file and writes the holder into it, so the link is refused (75, named) and not followed
rm -rf "$T/l" && mkdir -p "$T/l"
echo precious > "$T/victim.txt"
ln -s "$T/victim.txt" "$T/l/longhaul.lock"
run_rc --out "$T/l" > "$T/l.log" 2>&1
[ $rc = 75 ] || { cat "$T/l.log"; fail "a symbolic link at longhaul.lock: exit $rc, expected 75"; }
grep -q "$T/l/longhaul.lock is a symbolic link" "$T/l.log" || { cat "$T/l.log"; fail "the message does not name the lock's link"; }
[ "$(cat "$T/victim.txt")" = precious ] || fail "the run wrote through the symbolic link at longhaul.lock: $(cat "$T/victim.txt")"
[ -e "$T/l/output.jsonl" ] && fail "a run refused at its lock wrote output.jsonl"
echo "run_faults: a symbolic link at the lock: ok"

# -- a symbolic link planted at OUT/longhaul.db or at its journal (to a file elsewhere): SQLite
# followed the first and wrote the run's store into the other file; both are refused (75, named)
# and nothing is written through them. A --db the user names may be a link, and is followed.
for planted in longhaul.db longhaul.db-journal longhaul.db-wal; do
  rm -rf "$T/y" && mkdir -p "$T/y" && rm -f "$T/victim.db"*
  : > "$T/victim.db"
  ln -s "$T/victim.db" "$T/y/$planted"
  run_rc --out "$T/y" > "$T/y.log" 2>&1
  [ $rc = 75 ] || { cat "$T/y.log"; fail "a symbolic link at $planted: exit $rc, expected 75"; }
  grep -q "$T/y/$planted is a symbolic link (to $T/victim.db)" "$T/y.log" || { cat "$T/y.log"; fail "the message does not name the link at $planted"; }
  [ ! -s "$T/victim.db" ] && [ "$(ls "$T"/victim.db*)" = "$T/victim.db" ] || fail "the run wrote through the symbolic link at $planted"
  [ -e "$T/y/output.jsonl" ] && fail "a run refused at its store's link wrote output.jsonl"
done
rm -rf "$T/y" && rm -f "$T/victim.db"*
cp "$T/ref/longhaul.db" "$T/victim.db"
ln -s "$T/victim.db" "$T/linked.db"
run_rc --out "$T/y" --db "$T/linked.db" > "$T/y.log" 2>&1
grep -q " [1-9][0-9]* already done" "$T/y.log" || { cat "$T/y.log"; fail "a --db that is a symbolic link was not followed to its store"; }
[ -L "$T/linked.db" ] || fail "a --db link was replaced"
# ... while OUT itself may be a link to a folder (outdir.h): its own store is made in the folder
# the link names, and a rerun through the link finds every job done (SQLite's NOFOLLOW refuses a
# link anywhere in a path, so this exited 75 "cannot open the file")
rm -rf "$T/lt" "$T/lo" && mkdir "$T/lt" && ln -s "$T/lt" "$T/lo"
"${RUN[@]}" --out "$T/lo" > "$T/lo.log" 2>&1 || true
[ -f "$T/lt/longhaul.db" ] && [ -L "$T/lo" ] || { cat "$T/lo.log"; fail "a run whose OUT is a link made no store in the folder it names"; }
diff "$T/ref.norm" <(norm "$T/lt") || { cat "$T/lo.log"; fail "a run whose OUT is a link answers differently"; }
"${RUN[@]}" --out "$T/lo" > "$T/lo2.log" 2>&1 || true
grep -q " [1-9][0-9]* already done" "$T/lo2.log" || { cat "$T/lo2.log"; fail "a rerun through the OUT link did not find its store"; }
echo "run_faults: a symbolic link at the store: ok"

# -- a store SQLite cannot read (cut short): exit 75 naming the store and saying what to do, and no
# summary table: output.jsonl is the earlier run's, and showing it would pass it off as this run's
rm -rf "$T/d" && cp -r "$T/ref" "$T/d"
truncate -s $(( $(stat -c %s "$T/d/longhaul.db") / 2 )) "$T/d/longhaul.db"
run_rc --out "$T/d" > "$T/d.out" 2> "$T/d.err"
[ $rc = 75 ] || { cat "$T/d.out" "$T/d.err"; fail "a damaged store: exit $rc, expected 75"; }
grep -q "$T/d/longhaul.db: .*damaged.*cannot fix.*move it aside" "$T/d.err" || { cat "$T/d.err"; fail "the message does not name the store and what to do"; }
[ -s "$T/d.out" ] && { cat "$T/d.out"; fail "a run stopped by its store printed a summary of an earlier run's output"; }
cmp -s "$T/ref/output.jsonl" "$T/d/output.jsonl" || fail "a run stopped by its store changed output.jsonl"
echo "run_faults: a damaged store: ok"

# -- the output folder (and the store in it) removed while the run is going: exit 75 saying the
# store's file was removed, not that it is read-only (its permissions are fine) with exit 2
rm -rf "$T/v"
LH_TEST_STOP_AT=prefill:2 "${RUN[@]}" --out "$T/v" > "$T/v.log" 2>&1 &
pid=$!
state=
for _ in $(seq 1 200); do
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [ "$state" = T ] && break
  sleep 0.05
done
[ "$state" = T ] || { kill -9 $pid 2>/dev/null; cat "$T/v.log"; fail "the run did not stop at its second prefill chunk"; }
rm -rf "$T/v"
kill -CONT $pid
rc=0
wait $pid || rc=$?
[ $rc = 75 ] || { cat "$T/v.log"; fail "the output folder removed under a run: exit $rc, expected 75"; }
grep -q "longhaul.db: .*was removed or renamed while this process had it open" "$T/v.log" \
  || { cat "$T/v.log"; fail "the message does not say the store's file was removed"; }
# ... and, the store being gone, neither says that nothing done is lost nor brings the folder back
# holding an output.jsonl and errors.jsonl that no store stands behind
grep -q "nothing already done is lost" "$T/v.log" && { cat "$T/v.log"; fail "the run says nothing is lost, its store deleted"; }
grep -q "longhaul.db is gone .*wrote no output.*computes every request again" "$T/v.log" \
  || { cat "$T/v.log"; fail "the message does not say the store and what it held are gone"; }
[ -e "$T/v" ] && { ls -lR "$T/v"; fail "the run made the removed output folder again"; }
echo "run_faults: the output folder removed under a run: ok"

# -- the file size limit reached while the store grows: a full disk, not SIGXFSZ (exit 153)
(ulimit -f 1600 && exec "${RUN[@]}" --out "$T/fsize") > "$T/fsize.log" 2>&1 && rc=0 || rc=$?
[ $rc = 75 ] || { cat "$T/fsize.log"; fail "a run past the file size limit exited $rc, not 75"; }
grep -q "no file past 1638400 bytes (ulimit -f)" "$T/fsize.log" || { cat "$T/fsize.log"; fail "the limit is not named"; }
"${RUN[@]}" --out "$T/fsize" > "$T/fsize2.log" 2>&1 || true
diff "$T/ref.norm" <(norm "$T/fsize") || { cat "$T/fsize2.log"; fail "the rerun after the file size limit differs"; }
echo "run_faults: the file size limit reached: ok"

# -- the tmpfs cases
M="$T/mnt"
mkdir -p "$M"
if ! mount -t tmpfs -o size=64m tmpfs "$M" 2>/dev/null; then
  echo "SKIPPED (part): cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): the full-disk and" \
       "read-only cases did not run" >&2
  exit 0
fi
trap 'umount "$M" 2>/dev/null; rm -rf "$T"' EXIT
# read-only: refused before any work
mkdir -p "$M/ro" && mount -o remount,ro "$M"
start=$(date +%s%N)
set +e
# (a model folder that exists but holds nothing: loading it would fail, so a message naming it
# would show the model was read before the output folder was checked)
mkdir -p "$T/empty-model"
"$LH" run "$T/batch.jsonl" --model "$T/empty-model" --out "$M/ro" > "$T/ro.log" 2>&1
rc=$?
set -e
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ $rc = 75 ] || { cat "$T/ro.log"; fail "a read-only --out exited $rc, expected 75"; }
grep -q "not writable" "$T/ro.log" || { cat "$T/ro.log"; fail "the message does not say the folder is not writable"; }
grep -q "empty-model" "$T/ro.log" && fail "the model was read before the output folder was checked"
echo "run_faults: read-only --out refused in $ms ms: ok"
mount -o remount,rw "$M"
# full disk: size the tmpfs at half of what the reference run wrote
need=$(du -sk "$T/ref" | cut -f1)
umount "$M"
mount -t tmpfs -o size=$((need / 2))k tmpfs "$M"
run_rc --out "$M/out" > "$T/full.log" 2>&1
[ $rc = 75 ] || { cat "$T/full.log"; fail "a full disk exited $rc, expected 75"; }
grep -q "rerun the same command" "$T/full.log" || { cat "$T/full.log"; fail "no advice to rerun"; }
python3 - "$M/out/longhaul.db" <<'P' || fail "a full disk marked jobs failed"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
bad = db.execute("select custom_id, error from jobs where state = 3 and custom_id != 'bad'").fetchall()
assert not bad, bad
P
mount -o remount,size=$((need * 4))k "$M"
"${RUN[@]}" --out "$M/out" > "$T/full2.log" 2>&1 || true
grep -q "failed" "$T/full2.log" || true
diff "$T/ref.norm" <(norm "$M/out") || { cat "$T/full2.log"; fail "the rerun after freeing space differs"; }
echo "run_faults: full disk, then rerun: ok"
