#!/usr/bin/env bash
# run_outfull.sh — the output folder fills while the store, elsewhere (--db), has room. A batch of
# two groups of two requests over small documents (each group decoded together), --out on a tiny
# tmpfs, --db on the normal disk:
#   - the second group's files do not fit: exit 75, nothing failed, and every answer computed is in
#     the store, the second group's both (its first job's files failing must not lose the answer
#     decoded with it); the message says so and that nothing is left queued; after the disk grows
#     the rerun decodes nothing, only writes files, and the outputs equal a fresh run's;
#   - the first group's files do not fit: the run stops there and says how many jobs are left
#     queued, the number the store holds (the group never claimed counts too); the rerun computes
#     only those, and the outputs equal a fresh run's.
# Skipped, saying so, where mount is not allowed.
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/docA" "$T/docB"
printf 'The key rotation interval is 90 days.\n' > "$T/docA/policy.txt"
printf 'DEFAULT_WORKER_TIMEOUT = 4817\n' > "$T/docB/config.py"
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"a1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":8,"temperature":0,"documents":["docA"]}}
{"custom_id":"a2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is this file?"}],"max_tokens":8,"temperature":0.7,"seed":3,"documents":["docA"]}}
{"custom_id":"b1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is DEFAULT_WORKER_TIMEOUT?"}],"max_tokens":8,"temperature":0,"documents":["docB"]}}
{"custom_id":"b2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is this file?"}],"max_tokens":8,"temperature":0,"documents":["docB"]}}
B
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 32 --progress none)
run_rc() { rc=0; "${RUN[@]}" "$@" || rc=$?; }
"${RUN[@]}" --out "$T/ref" > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "the reference run failed"; }
norm "$T/ref" > "$T/ref.norm"
# store counts as "done queued running failed"
counts() { "$LH" status --db "$1" --json | json 'import json,sys
c = json.load(sys.stdin)["counts"]
print(c["done"], c["queued"], c["running"], c["failed"])'; }

M="$T/mnt"
mkdir -p "$M"
if ! mount -t tmpfs -o size=1m tmpfs "$M" 2>/dev/null; then
  echo "SKIPPED: cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): the full output disk cases did not run" >&2
  exit 77
fi
umount "$M"
trap 'umount "$M" 2>/dev/null || true; rm -rf "$T"' EXIT
# A tmpfs counts whole pages: every file here (the lock, each job's manifest.jsonl and
# result.json) is under one page, and a file is written to a temporary beside it, then renamed.
pg=$(getconf PAGESIZE)
for f in "$T"/ref/jobs/*/*; do [ "$(stat -c %s "$f")" -lt "$pg" ] || fail "$f is a page or more: resize the cases"; done

# -- the second group's files do not fit: the lock and the first group's four files, one page spare
mount -t tmpfs -o size=$((6 * pg)) tmpfs "$M"
run_rc --out "$M/out" --db "$T/full.db" > "$T/full.log" 2>&1
[ $rc = 75 ] || { cat "$T/full.log"; fail "a full output disk exited $rc, expected 75"; }
grep -q "No space left on device" "$T/full.log" || { cat "$T/full.log"; fail "the message does not name the full disk"; }
[ -e "$M/out/jobs/a1/result.json" ] && [ -e "$M/out/jobs/a2/result.json" ] \
  || { ls -R "$M/out"; fail "the first group's files were not written: the tmpfs is sized wrong"; }
[ -e "$M/out/jobs/b2/result.json" ] && { ls -R "$M/out"; fail "the second group's files fit: the tmpfs is sized wrong"; }
[ "$(counts "$T/full.db")" = "4 0 0 0" ] \
  || { cat "$T/full.log"; fail "the store holds (done queued running failed) $(counts "$T/full.db"), expected 4 0 0 0: an answer computed was not recorded"; }
grep -q "Every answer and error is recorded in the store $T/full.db and nothing is lost" "$T/full.log" \
  || { cat "$T/full.log"; fail "the message does not say that every answer is in the store"; }
grep -q "left queued" "$T/full.log" && { cat "$T/full.log"; fail "the message says jobs are left queued; the store holds none"; }
mount -o remount,size=1m "$M"
"${RUN[@]}" --out "$M/out" --db "$T/full.db" > "$T/full2.log" 2>&1 || { cat "$T/full2.log"; fail "the rerun failed"; }
grep -q "4 requests: 0 done, 0 failed, 0 malformed lines, 4 already done" "$T/full2.log" \
  || { cat "$T/full2.log"; fail "the rerun did not find every request done"; }
grep -q " 0 decoded;" "$T/full2.log" || { cat "$T/full2.log"; fail "the rerun decoded again"; }
diff "$T/ref.norm" <(norm "$M/out") || { cat "$T/full2.log"; fail "the rerun's outputs differ from a fresh run's"; }
umount "$M"
echo "run_outfull: the second group's files do not fit: every answer recorded, the rerun decodes nothing: ok"

# -- the first group's files do not fit (the lock and one job's two files): the run stops with its
# second group never claimed, and says what the store holds
mount -t tmpfs -o size=$((3 * pg)) tmpfs "$M"
run_rc --out "$M/out" --db "$T/first.db" > "$T/first.log" 2>&1
[ $rc = 75 ] || { cat "$T/first.log"; fail "a full output disk exited $rc, expected 75"; }
[ "$(counts "$T/first.db")" = "2 2 0 0" ] \
  || { cat "$T/first.log"; fail "the store holds (done queued running failed) $(counts "$T/first.db"), expected 2 2 0 0"; }
grep -q "2 jobs are left queued and nothing already done is lost" "$T/first.log" \
  || { cat "$T/first.log"; fail "the message does not count the 2 jobs the store holds queued"; }
mount -o remount,size=1m "$M"
"${RUN[@]}" --out "$M/out" --db "$T/first.db" > "$T/first2.log" 2>&1 || { cat "$T/first2.log"; fail "the rerun failed"; }
grep -q "4 requests: 2 done, 0 failed, 0 malformed lines, 2 already done" "$T/first2.log" \
  || { cat "$T/first2.log"; fail "the rerun did not compute exactly the 2 jobs left"; }
diff "$T/ref.norm" <(norm "$M/out") || { cat "$T/first2.log"; fail "the rerun's outputs differ from a fresh run's"; }
umount "$M"
echo "run_outfull: the first group's files do not fit: the jobs left counted as the store holds them: ok"
