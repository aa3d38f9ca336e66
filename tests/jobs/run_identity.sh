#!/usr/bin/env bash
# run_identity.sh — a nightly rerun into the same --out (issue 29): a job is its inputs, not its
# custom_id. With models/haul-tiny and a fact planted in an archive:
#   - unchanged, the rerun says "already done", computes nothing and reads neither the weights nor
#     the archive again (their digests come from the store's cache, whose rows stay untouched);
#   - the archive replaced by one with another value, the answer follows the new value and the
#     manifest the new bytes; checkpoints are reused only up to where the tokens still match;
#   - another --chunk, one changed bit of the weights, a changed tokenizer.json or another end id
#     in generation_config.json computes the job again;
#   - one changed byte of the stored answer (sqlite3, behind the store's back): store verify
#     fails, and the rerun recomputes the answer instead of printing the damaged one;
#   - another --max-tokens (the default) computes again only the request that gives no
#     max_tokens of its own: the identity holds each request's effective max_tokens;
#   - a missing document fails its job clearly (400, named) and stays failed while it is missing;
#     once it appears the job runs; once it goes again the job fails and its folder keeps no old
#     answer (result.json, manifest.jsonl). A document that cannot be read (mode 000, run as an ordinary
#     user) fails its job and the job is tried again on the next run, not kept as "already done";
#     once it can be read the job runs, and then stays done.
#   - documents changed after the run named its jobs (the first group's prefill) and changed back
#     before the rerun (same size: only the ctime tells): the run answers over what it read, under
#     that content's identity, and the rerun computes the job again instead of calling it done
#     with an answer over content no longer there; documents changed each time they are read (at
#     the ingest test point, before the ingest ends) fail the job after 3 tries, naming the
#     document, and the next run tries it again.
#   - a folder whose paths pass PATH_MAX: its job is done on the rerun, new work once a file deep
#     down changes.
#   - a hard link in a document folder broken (the same bytes), then made again: each changes the
#     prompt, and the rerun computes the job again over the prompt a fresh run gives.
. "$(dirname "$0")/lib.sh"
HT=$SRC/models/haul-tiny
[ -f "$HT/model.safetensors" ] || { echo "SKIPPED: models/haul-tiny is not there" >&2; exit 77; }
tar --sort=name -cf /dev/null --files-from /dev/null 2>/dev/null || { echo "SKIPPED: tar --sort=name is needed" >&2; exit 77; }
mkdir -p "$T/repo/src" "$T/repo/zz"
cp "$SRC"/util/hash.h "$SRC"/util/buf.h "$T/repo/src/"
# The fact is the archive's last file (names sort), so a changed value changes only its last tokens.
archive() {
  printf 'Operations notes.\nThe special magic lighthouse number is: %s.\nEnd of notes.\n' "$1" > "$T/repo/zz/notes.md"
  rm -f "$T/repo.tar.gz"
  tar --sort=name -C "$T/repo" -czf "$T/repo.tar.gz" .
}
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"q","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is the special magic lighthouse number?"}],"max_tokens":16,"temperature":0,"documents":["repo.tar.gz"]}}
B
OUT=$T/out
run() { # log name, extra flags...
  "$LH" run "$T/batch.jsonl" --model "${MODEL_DIR:-$HT}" --out "$OUT" --chunk "${CHUNK:-256}" --keep-checkpoints -1 \
    --progress none "${@:2}" > "$T/$1.log" 2>&1 || { cat "$T/$1.log"; fail "$1: run failed"; }
}
answer() { json 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["response"]["body"]["choices"][0]["message"]["content"])' "$OUT/output.jsonl"; }
prefilled() { sed -n 's/.*tokens: \([0-9]*\) prefilled.*/\1/p' "$T/$1.log"; }
digests() { python3 -c 'import sqlite3, sys
for r in sqlite3.connect(sys.argv[1]).execute("select kind, path, updated_ms from file_digests order by kind, path"): print(*r)' "$OUT/longhaul.db"; }
sha_of_notes() { json 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get("path", "").endswith("zz/notes.md"): print(o["sha256"])' "$OUT/jobs/q/manifest.jsonl"; }

# 1. The first run answers from the archive.
archive 7305614
run first
a1=$(answer)
case "$a1" in *7305614*) ;; *) fail "the first answer '$a1' does not hold the planted 7305614";; esac
docs=$(json 'import sys,json; print(json.load(open(sys.argv[1]))["tokens"]["documents"])' "$OUT/jobs/q/result.json")
[ "$docs" -gt 600 ] || fail "only $docs document tokens: too short to see a partial reuse"
n1=$(sha_of_notes)
[ -n "$n1" ] || fail "the manifest does not name zz/notes.md"
digests > "$T/digests-1.txt"
grep -q '^model .*model.safetensors ' "$T/digests-1.txt" || { cat "$T/digests-1.txt"; fail "the weights' digest is not cached"; }
grep -q '^doc .*repo.tar.gz ' "$T/digests-1.txt" || { cat "$T/digests-1.txt"; fail "the archive's digest is not cached"; }
cp "$OUT/output.jsonl" "$T/output-1.jsonl"

# 2. Unchanged: already done, nothing computed, nothing read again, the same output.
run same
grep -q "1 already done" "$T/same.log" || { cat "$T/same.log"; fail "the unchanged rerun did not say 1 already done"; }
[ "$(prefilled same)" = 0 ] || fail "the unchanged rerun prefilled $(prefilled same) tokens"
grep -q "computed again" "$T/same.log" && fail "the unchanged rerun computed something again"
cmp -s "$OUT/output.jsonl" "$T/output-1.jsonl" || fail "the unchanged rerun changed output.jsonl"
digests > "$T/digests-2.txt"
diff "$T/digests-1.txt" "$T/digests-2.txt" || fail "the unchanged rerun read the weights or the archive again"

# 3. The archive replaced: a new answer, a new manifest; only the unchanged token prefix reused.
archive 2938416
run changed
grep -q "1 already done" "$T/changed.log" && { cat "$T/changed.log"; fail "the archive changed and the rerun called the job already done"; }
grep -q "1 request computed again: its inputs changed" "$T/changed.log" || { cat "$T/changed.log"; fail "the rerun did not say the inputs changed"; }
a2=$(answer)
case "$a2" in *2938416*) ;; *) fail "after the archive changed the answer is '$a2', not the new 2938416 (was '$a1')";; esac
case "$a2" in *7305614*) fail "the old value survived the change: '$a2'";; esac
n2=$(sha_of_notes)
[ "$n2" != "$n1" ] || fail "the manifest still has the old digest of zz/notes.md"
r=$(restored "$T/changed.log")
[ -n "$r" ] && [ "$r" -gt 0 ] || { cat "$T/changed.log"; fail "nothing of the unchanged prefix was reused"; }
[ "$r" -lt "$docs" ] || fail "$r tokens restored: at or past the changed file (the documents are $docs tokens)"

# 4. A parameter that changes answers (the chunk plan), then the weights: computed again.
CHUNK=128 run chunk
grep -q "1 request computed again" "$T/chunk.log" || { cat "$T/chunk.log"; fail "another --chunk did not compute the job again"; }
CHUNK=128 run chunk-same
grep -q "1 already done" "$T/chunk-same.log" || { cat "$T/chunk-same.log"; fail "the same --chunk twice computed again"; }
mkdir "$T/model"
cp "$HT"/*.json "$HT/model.safetensors" "$T/model/"
python3 - "$T/model/model.safetensors" <<'P'
import json, struct, sys
f = open(sys.argv[1], "r+b")
n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n))
name, t = next((k, v) for k, v in sorted(h.items()) if k != "__metadata__" and v["dtype"] in ("BF16", "F16"))
off = 8 + n + t["data_offsets"][0]  # the low byte of the first element: its last mantissa bit
f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 1]))
P
MODEL_DIR=$T/model CHUNK=128 run weights
grep -q "1 request computed again" "$T/weights.log" || { cat "$T/weights.log"; fail "one changed bit of the weights did not compute the job again"; }

# 5. One changed byte of the stored answer: verify fails, the rerun recomputes it.
good=$(answer)
python3 - "$OUT/longhaul.db" <<'P'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
(j,) = db.execute("select json from results").fetchone()
i = j.index('"answer":"') + len('"answer":"')
c = j[i]
j2 = j[:i] + ("Y" if c != "Y" else "Z") + j[i + 1:]
db.execute("update results set json = ?", (j2,))
db.commit()
P
set +e
"$LH" store verify --db "$OUT/longhaul.db" > "$T/verify.log" 2>&1
rc=$?
set -e
[ "$rc" = 1 ] || { cat "$T/verify.log"; fail "store verify exited $rc over a damaged answer"; }
grep -q "('q'): its result row fails its checksum" "$T/verify.log" || { cat "$T/verify.log"; fail "verify did not name the job"; }
MODEL_DIR=$T/model CHUNK=128 run damaged
grep -q "1 request computed again: its stored answer or error was damaged" "$T/damaged.log" \
  || { cat "$T/damaged.log"; fail "the rerun did not recompute the damaged answer"; }
[ "$(answer)" = "$good" ] || fail "after the damage the answer is '$(answer)', not '$good'"
"$LH" store verify --db "$OUT/longhaul.db" > "$T/verify2.log" 2>&1 || { cat "$T/verify2.log"; fail "verify after the rerun"; }

# 5b. The tokenizer and the ids that end an answer decide it too: two vocabulary entries swapped in
# tokenizer.json, or one more end id in generation_config.json, compute the job again (before, the
# identity named the weights and config.json alone, and the rerun printed the old tokenizer's answer).
python3 - "$T/model/tokenizer.json" <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]
v["the"], v["The"] = v["The"], v["the"]
json.dump(t, open(sys.argv[1], "w"))
P
MODEL_DIR=$T/model CHUNK=128 run tokenizer
grep -q "1 request computed again" "$T/tokenizer.log" || { cat "$T/tokenizer.log"; fail "a changed tokenizer.json did not compute the job again"; }
sed -i 's/"eos_token_id": 3/"eos_token_id": [3, 4]/' "$T/model/generation_config.json"
grep -q '\[3, 4\]' "$T/model/generation_config.json" || fail "generation_config.json was not changed"
MODEL_DIR=$T/model CHUNK=128 run stops
grep -q "1 request computed again" "$T/stops.log" || { cat "$T/stops.log"; fail "another end id in generation_config.json did not compute the job again"; }
MODEL_DIR=$T/model CHUNK=128 run stops-same
grep -q "1 already done" "$T/stops-same.log" || { cat "$T/stops-same.log"; fail "the same model folder twice computed again"; }

# 6. The default max_tokens: new work only for the request that decodes to it.
printf 'The special magic lighthouse number is: 4411.\n' > "$T/fact.md"
cat > "$T/mt.jsonl" <<'B'
{"custom_id":"own","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is the special magic lighthouse number?"}],"max_tokens":6,"temperature":0,"documents":["fact.md"]}}
{"custom_id":"dflt","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is the special magic lighthouse number?"}],"temperature":0,"documents":["fact.md"]}}
B
mt_run() { # log name, --max-tokens
  "$LH" run "$T/mt.jsonl" --model "$HT" --out "$T/mt" --chunk 256 --max-tokens "$2" --progress none > "$T/$1.log" 2>&1 \
    || { cat "$T/$1.log"; fail "$1: run failed"; }
}
mt_run mt-first 8
mt_run mt-same 8
grep -q "2 already done" "$T/mt-same.log" || { cat "$T/mt-same.log"; fail "the same --max-tokens computed again"; }
mt_run mt-other 9
grep -q "1 already done" "$T/mt-other.log" || { cat "$T/mt-other.log"; fail "another --max-tokens made the request with its own max_tokens new work"; }
grep -q "1 request computed again: its inputs changed" "$T/mt-other.log" \
  || { cat "$T/mt-other.log"; fail "another --max-tokens did not compute again the request without max_tokens"; }
# 7. Missing, then there; unreadable, then readable (tiny-chat: only the outcome matters here).
mkdir -p "$T/u" && chmod 777 "$T/u"
cat > "$T/u/b.jsonl" <<'B'
{"custom_id":"m","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"documents":["doc.md"]}}
B
as_user=()
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv > /dev/null; then as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else as_user=(skip); fi
fi
u_run() { # log name, expected exit status, [as an ordinary user]
  local rc=0 pre=()
  [ -n "${3:-}" ] && pre=("${as_user[@]}")
  "${pre[@]}" "$LH" run "$T/u/b.jsonl" --model "$MODEL" --out "$T/u/out" --progress none > "$T/$1.log" 2>&1 || rc=$?
  [ "$rc" = "$2" ] || { cat "$T/$1.log"; fail "$1: exit $rc, expected $2"; }
}
status_of() { json 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    print(o["response"]["status_code"] if o["response"] else 0, o["error"]["message"] if o["error"] else "")' "$T/u/out/$1"; }
u_run miss1 1
status_of output.jsonl | grep -q '^400 .*doc.md' || { status_of output.jsonl; fail "a missing document did not fail its job with a 400 naming it"; }
u_run miss2 1   # the kept failure is still an unanswered request: exit 1, as the first run
grep -q "1 already done" "$T/miss2.log" || { cat "$T/miss2.log"; fail "a job whose document is still missing ran again"; }
grep -q "1 of the already done failed in an earlier run" "$T/miss2.log" || { cat "$T/miss2.log"; fail "the rerun did not say the kept job had failed"; }
status_of output.jsonl | grep -q '^400 .*doc.md' || { status_of output.jsonl; fail "the rerun's output lost the kept failure"; }
echo "The special magic lighthouse number is: 4411." > "$T/u/doc.md"
u_run appeared 0
grep -q "1 request computed again: its inputs changed" "$T/appeared.log" || { cat "$T/appeared.log"; fail "the document appeared and its job did not run"; }
# answered, then failed (its document gone again): the folder keeps no answer, since jobs/m's
# result.json and manifest.jsonl would answer documents that are no longer there
[ -f "$T/u/out/jobs/m/result.json" ] || fail "the answered job has no result.json"
mv "$T/u/doc.md" "$T/u/doc.away"
u_run gone 1
status_of output.jsonl | grep -q '^400 .*doc.md' || { status_of output.jsonl; fail "the document went and its job did not fail"; }
[ -e "$T/u/out/jobs/m/result.json" ] && fail "the job failed and jobs/m/result.json still holds its old answer"
[ -e "$T/u/out/jobs/m/manifest.jsonl" ] && fail "the job failed and jobs/m/manifest.jsonl still names its old documents"
mv "$T/u/doc.away" "$T/u/doc.md"
u_run back 0
[ -f "$T/u/out/jobs/m/result.json" ] || fail "the document came back and the answered job has no result.json"
if [ "${as_user[0]:-}" = skip ]; then
  echo "run_identity: NOTE: root without setpriv: the unreadable-document case is not checked" >&2
else
  chmod 000 "$T/u/doc.md"
  if [ -n "${as_user[*]}" ]; then chmod o+x "$T" && chown -R 65534:65534 "$T/u/out"; fi
  u_run unread1 1 user
  grep -q "can be read" "$T/unread1.log" || { cat "$T/unread1.log"; fail "no warning names the unreadable document"; }
  status_of output.jsonl | grep -q 'doc.md.*Permission denied' || { status_of output.jsonl; fail "the unreadable document's job did not fail naming it"; }
  u_run unread2 1 user
  grep -q "1 already done" "$T/unread2.log" && { cat "$T/unread2.log"; fail "a job whose document could not be read was kept as already done"; }
  grep -q "0 done, 1 failed" "$T/unread2.log" || { cat "$T/unread2.log"; fail "the unreadable document's job was not tried again"; }
  chmod 644 "$T/u/doc.md"
  u_run readable1 0 user
  grep -q "1 done, 0 failed" "$T/readable1.log" || { cat "$T/readable1.log"; fail "the readable document's job did not run"; }
  u_run readable2 0 user
  grep -q "1 already done" "$T/readable2.log" || { cat "$T/readable2.log"; fail "the readable document's job ran again"; }
fi
# 8. Documents changed while the run goes (tiny-chat: only what the answer was computed over counts).
mkdir -p "$T/c/notes"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/c/first.md"
printf 'DEFAULT_WORKER_TIMEOUT = 4817\n' > "$T/c/notes/config.py"
cat > "$T/c/b.jsonl" <<'B'
{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How often is the deploy key rotated?"}],"max_tokens":4,"temperature":0,"documents":["first.md"]}}
{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is DEFAULT_WORKER_TIMEOUT set to?"}],"max_tokens":4,"temperature":0,"documents":["notes"]}}
B
grep '"b"' "$T/c/b.jsonl" > "$T/c/one.jsonl"
# c_run LOG BATCH RC [STOP ACTION]: a run over BATCH into its own OUT; with STOP (LH_TEST_STOP_AT),
# ACTION runs at each stop, then the run goes on. Expects exit status RC.
c_run() {
  local rc=0 out=$T/c/out-$(basename "$2" .jsonl) n=0 st
  LH_TEST_STOP_AT=${4:-} "$LH" run "$2" --model "$MODEL" --chunk 32 --progress plain --out "$out" > "$T/$1.log" 2>&1 &
  local pid=$!
  while [ -n "${4:-}" ]; do
    st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    case "$st" in
      T) "$5"; kill -CONT "$pid" ;;
      Z|"") break ;;
    esac
    n=$((n + 1))
    [ "$n" -lt 6000 ] || { kill -KILL "$pid"; fail "$1: the run did not end"; }
    sleep 0.02
  done
  wait "$pid" || rc=$?
  [ "$rc" = "$3" ] || { cat "$T/$1.log"; fail "$1: exit $rc, expected $3"; }
}
sha_read() { json 'import json,sys; print([json.loads(l)["sha256"] for l in open(sys.argv[1])][0])' "$T/c/out-$1/jobs/b/manifest.jsonl"; }
sha_now() { sha256sum < "$T/c/notes/config.py" | cut -d' ' -f1; }
to_3600() { printf 'DEFAULT_WORKER_TIMEOUT = 3600\n' > "$T/c/notes/config.py"; }
c_run changed1 "$T/c/b.jsonl" 0 prefill:1 to_3600   # a's prefill: both identities taken, b's notes not read
[ "$(sha_read b)" = "$(sha_now)" ] || fail "b was answered over config.py $(sha_read b), not over what it read"
printf 'DEFAULT_WORKER_TIMEOUT = 4817\n' > "$T/c/notes/config.py"    # and back, the same bytes
c_run changed2 "$T/c/b.jsonl" 0
grep -q "2 already done" "$T/changed2.log" \
  && { cat "$T/changed2.log"; fail "documents changed and changed back: the rerun kept an answer over content no longer there"; }
grep -q "1 already done" "$T/changed2.log" || { cat "$T/changed2.log"; fail "the rerun did not keep a's answer"; }
[ "$(sha_read b)" = "$(sha_now)" ] || fail "after the rerun b's answer is over config.py $(sha_read b), not $(sha_now)"
grep -q "b: document notes changed since the job was named by its content: reading it again" "$T/changed1.log" \
  || { cat "$T/changed1.log"; fail "the run did not say b's documents changed after it named the job"; }
grow() { echo "# touched while read" >> "$T/c/notes/config.py"; }
c_run keeps1 "$T/c/one.jsonl" 1 ingest:1+ grow
status_of() { json 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    print(o["response"]["status_code"] if o["response"] else 0, o["error"]["message"] if o["error"] else "")' "$T/c/out-one/$1"; }
status_of output.jsonl | grep -q '^500 document notes kept changing while it was read (3 tries)' \
  || { status_of output.jsonl; cat "$T/keeps1.log"; fail "documents that kept changing did not fail the job after 3 tries, naming them"; }
c_run keeps2 "$T/c/one.jsonl" 0
grep -q "1 done, 0 failed" "$T/keeps2.log" || { cat "$T/keeps2.log"; fail "the job that failed on changing documents was not tried again"; }
[ "$(sha_read one)" = "$(sha_now)" ] || fail "b's answer is not over config.py as it is now"
c_run keeps3 "$T/c/one.jsonl" 0
grep -q "1 already done" "$T/keeps3.log" || { cat "$T/keeps3.log"; fail "the answered job ran again"; }
# A log being appended to in the folder, left out by the document's exclude glob: it is no part of
# what the job reads, so it neither fails the job (before, 3 tries and "kept changing") nor makes
# the rerun a new job; a file the globs keep still does.
sed 's/"documents":\["notes"\]/"documents":[{"path":"notes","exclude":["*.log"]}]/; s/"custom_id":"b"/"custom_id":"glob"/' \
  "$T/c/one.jsonl" > "$T/c/glob.jsonl"
grep -q '"exclude"' "$T/c/glob.jsonl" || fail "the glob batch was not made"
log_grows() { echo "worker started" >> "$T/c/notes/app.log"; }
c_run glob1 "$T/c/glob.jsonl" 0 ingest:1+ log_grows
grep -q "1 done, 0 failed" "$T/glob1.log" || { cat "$T/glob1.log"; fail "an excluded log appended to during the run failed the job"; }
grep -q "changed since the job was named" "$T/glob1.log" && { cat "$T/glob1.log"; fail "an excluded log counted as a change"; }
log_grows
c_run glob2 "$T/c/glob.jsonl" 0
grep -q "1 already done" "$T/glob2.log" || { cat "$T/glob2.log"; fail "an excluded log that grew made the rerun a new job"; }
printf 'DEFAULT_WORKER_TIMEOUT = 4817\n# kept\n' > "$T/c/notes/config.py"
c_run glob3 "$T/c/glob.jsonl" 0
grep -q "1 done, 0 failed" "$T/glob3.log" || { cat "$T/glob3.log"; fail "a changed file the globs keep did not make a new job"; }
# 9. A folder whose paths pass PATH_MAX (40 levels of 200-character names, about 8,000 characters,
# made a level at a time as no whole path could be): ingest reads its files, and its identity
# names them like any other folder's, so the rerun finds the job done (before, the identity walk
# failed on the long paths and the job ran again on every run) and a changed file deep down
# makes it new work again.
mkdir -p "$T/deep/docs"
deep_write() { # text: into far.md at the bottom of the chain
  ( cd "$T/deep/docs" && for i in $(seq 1 40); do d=$(printf '%0200d' "$i"); mkdir -p "$d" && cd "$d"; done
    printf '%s\n' "$1" > far.md )
}
deep_write 'The vault code is 2718.'
cat > "$T/deep/b.jsonl" <<'B'
{"custom_id":"deep","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"documents":["docs"]}}
B
d_run() { # log name
  "$LH" run "$T/deep/b.jsonl" --model "$MODEL" --out "$T/deep/out" --progress none > "$T/$1.log" 2>&1 \
    || { cat "$T/$1.log"; fail "$1: run failed"; }
}
d_run deep1
grep -q "1 done, 0 failed" "$T/deep1.log" || { cat "$T/deep1.log"; fail "the job over the deep folder did not run"; }
grep -q '/far.md"' "$T/deep/out/jobs/deep/manifest.jsonl" || fail "ingest did not read the file at the bottom of the deep folder"
d_run deep2
grep -q "1 already done" "$T/deep2.log" || { cat "$T/deep2.log"; fail "the job over an unchanged deep folder ran again"; }
grep -q "runs on every run" "$T/deep2.log" && { cat "$T/deep2.log"; fail "the deep folder was called unreadable"; }
deep_write 'The vault code is 3141.'
d_run deep3
grep -q "1 done, 0 failed" "$T/deep3.log" || { cat "$T/deep3.log"; fail "a changed file deep down did not make the job new work"; }
# 10. Hard links in a document folder: ingest reads a file of several names once and frames its
# other names as links to it, so a link broken (the same bytes, now a file of its own) or made
# changes the prompt: the rerun computes the job again, over the prompt a fresh run gives (before,
# it said "already done" and kept the answer over the old prompt).
mkdir -p "$T/h/d"
printf 'DEFAULT_WORKER_TIMEOUT = 4817\n' > "$T/h/d/a.py"
ln "$T/h/d/a.py" "$T/h/d/b.py"
cat > "$T/h/b.jsonl" <<'B'
{"custom_id":"h","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is DEFAULT_WORKER_TIMEOUT set to?"}],"max_tokens":4,"temperature":0,"documents":["d"]}}
B
h_run() { # log name, out folder
  "$LH" run "$T/h/b.jsonl" --model "$MODEL" --out "$T/h/$2" --progress none > "$T/$1.log" 2>&1 \
    || { cat "$T/$1.log"; fail "$1: run failed"; }
}
prompt_of() { json 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["prompt"])' "$T/h/$1/jobs/h/result.json"; }
h_run hard1 out
linked=$(prompt_of out)
grep -q '"link":"a.py"' "$T/h/out/jobs/h/manifest.jsonl" || fail "ingest did not frame b.py as a link to a.py"
cp "$T/h/d/b.py" "$T/h/t" && mv "$T/h/t" "$T/h/d/b.py"
h_run hard2 out
grep -q "1 done, 0 failed" "$T/hard2.log" || { cat "$T/hard2.log"; fail "a hard link broken: the rerun kept the answer over the old prompt"; }
h_run hard3 fresh
[ "$(prompt_of out)" = "$(prompt_of fresh)" ] && [ "$(prompt_of out)" != "$linked" ] \
  || fail "a hard link broken: the rerun's prompt has $(prompt_of out) tokens, a fresh run's $(prompt_of fresh), the linked one's $linked"
ln -f "$T/h/d/a.py" "$T/h/d/b.py"
h_run hard4 out
grep -q "1 done, 0 failed" "$T/hard4.log" || { cat "$T/hard4.log"; fail "two copies made one file: the rerun kept the answer over the old prompt"; }
[ "$(prompt_of out)" = "$linked" ] || fail "two copies made one file: the prompt has $(prompt_of out) tokens, not $linked"
h_run hard5 out
grep -q "1 already done" "$T/hard5.log" || { cat "$T/hard5.log"; fail "the job over an unchanged hard link ran again"; }
echo "run_identity: '$a1' -> '$a2' after the archive changed ($r of $docs document tokens reused); chunk, weights, a damaged answer and the default max_tokens recomputed: ok"
