#!/usr/bin/env bash
# merge.sh — `longhaul merge OUT` after four `run --shard I/4` runs writes output.jsonl and
# errors.jsonl equal, byte for byte apart from `created`, to one run of the whole batch (malformed
# lines, a duplicate custom_id, a missing document and shared documents included); it finds the
# batch through OUT/shard-I-of-N.json records; and it refuses, exit 1 with nothing written and the
# culprit named, a missing shard, an unfinished shard, a request answered by two shards, shards of
# two splits, a shard of an edited batch, records of different batches, models or settings that
# change answers (a shard rerun with another chat template or tokenizer), a cut line and a
# shard file linked to OUT/output.jsonl or errors.jsonl; a shard that still holds its lock gives 75
# (its output file written or not yet), as does a symbolic link planted at a shard's lock (never
# followed); a missing batch 2.
. "$(dirname "$0")/../jobs/lib.sh"
make_repo
# Requests over the same documents form one group and stay in one shard: twelve small notes give
# twelve groups, spread over the four shards by a hash of their documents' paths. Every shard must
# answer something, or the cases below test less than they claim; as the paths are under a fresh
# temporary folder, a split that leaves a shard empty (about one in ten) is tried again with new names.
q() { printf '{"custom_id":"%s","url":"/v1/completions","body":{"prompt":"%s","max_tokens":3,"temperature":0,"documents":["%s"]}}\n' "$@"; }
make_batch() { # $1: a prefix for the notes' names
  for n in $(seq 12); do printf 'Note %d: the answer is %d.\n' "$n" $((n * 7)) > "$T/$1note$n.txt"; done
  printf '%s\n' '{"custom_id":"d1","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":4,"temperature":0,"documents":["repo.tar.gz"]}}'
  q p1 "Line 1:" "$1note1.txt"
  q p1 "the same custom_id again, right after it" "$1note3.txt"
  printf '%s\n' '{"custom_id":"broken", "url":'
  q p2 "Line 2:" "$1note2.txt"
  q gone "x" missing.tar
  printf '%s\n' '{"custom_id":"d2","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_crc32c?"}],"max_tokens":4,"temperature":0,"documents":["repo.tar.gz"]}}'
  for n in $(seq 3 12); do q "p$n" "Line $n:" "$1note$n.txt"; done
  printf '%s\n' '{"custom_id":"c1","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Line 9"}],"max_tokens":3,"temperature":0}}'
}
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 256 --progress none)
for try in a b c d e f; do
  make_batch $try > "$T/batch.jsonl"
  rm -rf "$T/sh"
  for s in 0 1 2 3; do
    "${RUN[@]}" --out "$T/sh" --shard $s/4 > "$T/sh$s.log" 2>&1 || [ $? = 1 ] || { cat "$T/sh$s.log"; fail "shard $s failed"; }
  done
  spread=1
  for s in 0 1 2 3; do grep -q '"error":null' "$T/sh/output-$s-of-4.jsonl" || spread=0; done
  [ $spread = 1 ] && break
  echo "note: try $try left a shard without an answered request; new names"
done
[ "$spread" = 1 ] || fail "six splits in a row left a shard without an answered request"
"${RUN[@]}" --out "$T/one" > "$T/one.log" 2>&1 && fail "the whole run exited 0 although lines are malformed"
nocreated() { sed 's/"created":[0-9]*/"created":0/' "$1"; }
same_as_one() {
  for f in output errors; do
    [ -s "$1/$f.jsonl" ] || fail "$1/$f.jsonl is missing or empty"
    diff <(nocreated "$T/one/$f.jsonl") <(nocreated "$1/$f.jsonl") || fail "merged $f.jsonl differs from one run's"
  done
}
# fresh copies of the shard runs' OUT for each case
case_dir() { rm -rf "${T:?}/$1"; cp -r "$T/sh" "$T/$1"; echo "$T/$1"; }
# merge must refuse with the status and a message matching the pattern, and write nothing
refuses() {
  local want=$1 pat=$2 dir=$3; shift 3
  set +e
  "$LH" merge "$dir" "$@" > "$T/m.out" 2> "$T/m.err"
  local rc=$?
  set -e
  [ $rc = "$want" ] || { cat "$T/m.out" "$T/m.err"; fail "merge $dir $*: exit $rc, expected $want"; }
  grep -q -- "$pat" "$T/m.err" || { cat "$T/m.err"; fail "merge $dir $*: the message lacks '$pat'"; }
  [ ! -e "$dir/output.jsonl" ] && [ ! -e "$dir/errors.jsonl" ] || fail "merge $dir wrote output.jsonl although it refused"
}

# -- the merge equals one run
D=$(case_dir ok)
"$LH" merge "$D" --batch "$T/batch.jsonl" > "$T/ok.log" || { cat "$T/ok.log"; fail "merge failed"; }
same_as_one "$D"
grep -q "4 shards" "$T/ok.log" && grep -q "18 requests, 15 answered, 3 failed" "$T/ok.log" || { cat "$T/ok.log"; fail "summary"; }
# merging again gives the same bytes (and --out works as the positional)
cp "$D/output.jsonl" "$T/first.jsonl"
"$LH" merge --out "$D" --batch "$T/batch.jsonl" > /dev/null
cmp "$T/first.jsonl" "$D/output.jsonl" || fail "a second merge changed output.jsonl"

# -- the batch from the shards' records; without records and without --batch: usage
# (each `run --shard I/N` writes OUT/shard-I-of-N.json; they are removed here to see the refusal)
D=$(case_dir norec)
rm -f "$D"/shard-*-of-4.json
refuses 2 "--batch" "$D"
D=$(case_dir rec)
sha=$(sha256sum "$T/batch.jsonl" | cut -c1-64)
"$LH" model info --model "$MODEL" --json > "$T/info.json"
mid=$(json 'print(json.load(open(sys.argv[1]))["id"])' "$T/info.json")
tid=$(json 'print(json.load(open(sys.argv[1]))["tokenizer"]["id"])' "$T/info.json")
for s in 0 1 2 3; do
  want=$(printf '{"shard":%d,"of":4,"batch":"%s","batch_sha256":"%s","model_id":"%s",' $s "$(realpath "$T/batch.jsonl")" \
    "$sha" "$mid")
  [ "$(head -c ${#want} "$D/shard-$s-of-4.json")" = "$want" ] || { cat "$D/shard-$s-of-4.json"; fail "shard $s's record does not begin $want"; }
  json '
s = json.load(open(sys.argv[1]))["settings"]
want = {"tokenizer_id": sys.argv[2], "chat_template": "minimax", "chunk": 256, "device": "cpu", "ranks": 1,
        "max_tokens": 256, "require_documents": False}
assert all(s[k] == v for k, v in want.items()), s
assert s["end_ids"] and s["version"] and s["cpu_attention"], s' "$D/shard-$s-of-4.json" "$tid" \
    || { cat "$D/shard-$s-of-4.json"; fail "shard $s's record has other settings"; }
done
"$LH" merge "$D" > "$T/rec.log" || { cat "$T/rec.log"; fail "merge through the records failed"; }
same_as_one "$D"
# records of different batches
D=$(case_dir rec2)
for s in 0 1 2 3; do
  printf '{"shard":%d,"of":4,"batch":"%s","batch_sha256":"%s"}\n' $s "$T/batch.jsonl" "$sha" > "$D/shard-$s-of-4.json"
done
printf '{"shard":2,"of":4,"batch":"/elsewhere/b.jsonl","batch_sha256":"%s"}\n' "$(printf x | sha256sum | cut -c1-64)" \
  > "$D/shard-2-of-4.json"
refuses 1 "shards of different batches: shard 0 ran .* shard 2 ran /elsewhere/b.jsonl" "$D"
# records of different models: a shard rerun with another model may split the batch the same way
# (the split depends on the model), and its answers would be merged as if one model gave them
D=$(case_dir models)
other=$(printf other | sha256sum | cut -c1-64)
sed -i "s/\"model_id\":\"$mid\"/\"model_id\":\"$other\"/" "$D/shard-3-of-4.json"
grep -q "$other" "$D/shard-3-of-4.json" || fail "shard 3's record names no model_id to replace"
refuses 1 "shards of different models: shard 0 ran model ${mid:0:12}..., shard 3 ran model ${other:0:12}..." "$D"
# a shard rerun with settings that change its answers: the split is the same (it depends on the
# model and the documents), so only the records tell (each answer would be merged as one run's)
D=$(case_dir chat)
"${RUN[@]}" --out "$D" --shard 2/4 --chat-template raw > "$T/chat.log" 2>&1 || [ $? = 1 ] || { cat "$T/chat.log"; fail "shard 2 with --chat-template raw failed"; }
refuses 1 'shard 0 ran with chat_template "minimax", shard 2 with chat_template "raw"' "$D"
D=$(case_dir tokenizer)
other=$(printf other | sha256sum | cut -c1-64)
sed -i "s/\"tokenizer_id\":\"$tid\"/\"tokenizer_id\":\"$other\"/" "$D/shard-1-of-4.json"
grep -q "$other" "$D/shard-1-of-4.json" || fail "shard 1's record names no tokenizer_id to replace"
refuses 1 "shard 0 ran with tokenizer_id \"$tid\", shard 1 with tokenizer_id \"$other\"" "$D"
# records of an older longhaul, without settings, are read and merged
D=$(case_dir oldrec)
for s in 0 1 2 3; do
  json 'r = json.load(open(sys.argv[1])); del r["settings"]; json.dump(r, open(sys.argv[1], "w"))' "$D/shard-$s-of-4.json"
done
"$LH" merge "$D" > "$T/oldrec.log" || { cat "$T/oldrec.log"; fail "merge of records without settings failed"; }
same_as_one "$D"
# the batch changed since the records were written
D=$(case_dir rec3)
cp "$T/batch.jsonl" "$T/edited.jsonl"
echo '{"custom_id":"p9","url":"/v1/completions","body":{"prompt":"new","max_tokens":3}}' >> "$T/edited.jsonl"
for s in 0 1 2 3; do
  printf '{"shard":%d,"of":4,"batch":"%s","batch_sha256":"%s"}\n' $s "$T/edited.jsonl" "$sha" > "$D/shard-$s-of-4.json"
done
refuses 1 "the file changed since the shards ran" "$D"

# -- a shard of another (edited) batch: every line's id tells
# (the records say so first; without them, the ids)
D=$(case_dir edited)
refuses 1 "the shards ran another batch than $T/edited.jsonl" "$D" --batch "$T/edited.jsonl"
rm -f "$D"/shard-*-of-4.json
refuses 1 "shard 0/4 ran another batch" "$D" --batch "$T/edited.jsonl"

# -- a missing shard
D=$(case_dir missing)
rm "$D/output-2-of-4.jsonl"
refuses 1 "shard 2 of 4 is missing" "$D" --batch "$T/batch.jsonl"
D=$(case_dir missing_errors)
rm "$D/errors-1-of-4.jsonl"
refuses 1 "errors-1-of-4.jsonl is missing" "$D" --batch "$T/batch.jsonl"

# -- an unfinished shard: its file lacks a request it owns (the runner writes only finished jobs)
D=$(case_dir unfinished)
victim=$(grep '"error":null' "$D/output-1-of-4.jsonl" | head -1)
vid=$(json 'import sys; print(json.loads(sys.argv[1])["custom_id"])' "$victim")
grep -v -F -- "$victim" "$T/sh/output-1-of-4.jsonl" > "$D/output-1-of-4.jsonl"
refuses 1 "1 request of the batch has no line in any shard (line [0-9]* ($vid))" "$D" --batch "$T/batch.jsonl"

# -- a request answered by two shards: shard 3's file also holds shard 1's answers, in batch order
# (the order of the merged output.jsonl, whose lines are the shards' lines)
D=$(case_dir twice)
json '
import sys
keep = set(open(sys.argv[2]).readlines()) | {l for l in open(sys.argv[3]) if json.loads(l)["error"] is None}
open(sys.argv[4], "w").writelines(l for l in open(sys.argv[1]) if l in keep)
' "$T/ok/output.jsonl" "$T/sh/output-3-of-4.jsonl" "$T/sh/output-1-of-4.jsonl" "$D/output-3-of-4.jsonl"
[ "$(wc -l < "$D/output-3-of-4.jsonl")" -gt "$(wc -l < "$T/sh/output-3-of-4.jsonl")" ] || fail "no line was added to shard 3"
refuses 1 "is answered by shards 1 and 3 of 4" "$D" --batch "$T/batch.jsonl"

# -- shards of two splits in one OUT; --shards picks one
D=$(case_dir splits)
cp "$D/output-0-of-4.jsonl" "$D/output-0-of-2.jsonl"
cp "$D/errors-0-of-4.jsonl" "$D/errors-0-of-2.jsonl"
refuses 1 "several splits (1 file of N=2, 4 files of N=4)" "$D" --batch "$T/batch.jsonl"
"$LH" merge "$D" --batch "$T/batch.jsonl" --shards 4 > /dev/null || fail "--shards 4 did not merge the split of 4"
same_as_one "$D"

# -- a cut line
D=$(case_dir cut)
head -c -1 "$T/sh/output-0-of-4.jsonl" > "$D/output-0-of-4.jsonl"
refuses 1 "output-0-of-4.jsonl line [0-9]* is cut short" "$D" --batch "$T/batch.jsonl"

# -- a line that is not UTF-8 (every line run writes is): output.jsonl would not be either
D=$(case_dir utf8)
json '
import sys
b = open(sys.argv[1], "rb").read().split(b"\n")
k = next(i for i, l in enumerate(b) if b"\"error\":null" in l)
b[k] = b[k].replace(b"\"model\":\"", b"\"model\":\"\xc3(", 1)
open(sys.argv[1], "wb").write(b"\n".join(b))
print(k + 1)' "$D/output-2-of-4.jsonl" > "$T/utf8.line"
refuses 1 "output-2-of-4.jsonl line $(cat "$T/utf8.line") is not UTF-8" "$D" --batch "$T/batch.jsonl"

# -- a custom_id that drives a terminal (ESC [2J clears it), in a line edited into a shard's file:
# merge names it escaped, never with the ESC byte itself
D=$(case_dir esc)
json '
import sys
b = open(sys.argv[1]).read().split("\n")
k = next(i for i, l in enumerate(b) if "\"error\":null" in l)
o = json.loads(b[k]); o["custom_id"] = "\x1b[2Jevil"; b[k] = json.dumps(o)
open(sys.argv[1], "w").write("\n".join(b))' "$D/output-1-of-4.jsonl"
refuses 1 'output-1-of-4.jsonl line [0-9]* (custom_id \\x1b\[2Jevil) matches no request' "$D" --batch "$T/batch.jsonl"
if grep -q "$(printf '\033')" "$T/m.err"; then fail "merge printed an ESC byte"; fi

# -- a shard file that is a link to what merge writes: merging would replace the shard's lines
# with the whole batch's (so the next merge finds every request answered twice)
for f in output errors; do
  D=$(case_dir "link_$f")
  mv "$D/$f-1-of-4.jsonl" "$D/$f.jsonl"
  ln -s "$f.jsonl" "$D/$f-1-of-4.jsonl"
  set +e
  "$LH" merge "$D" --batch "$T/batch.jsonl" > "$T/m.out" 2> "$T/m.err"
  rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/m.out" "$T/m.err"; fail "merge over a shard linked to $f.jsonl: exit $rc, expected 1"; }
  grep -q "$f-1-of-4.jsonl is $D/$f.jsonl" "$T/m.err" || { cat "$T/m.err"; fail "the link to $f.jsonl is not named"; }
  cmp "$T/sh/$f-1-of-4.jsonl" "$D/$f.jsonl" || fail "merge wrote $f.jsonl although a shard's lines are in it"
done

# -- no shards at all, a missing folder, a missing batch
mkdir -p "$T/empty"
refuses 2 "holds no shard outputs" "$T/empty" --batch "$T/batch.jsonl"
refuses 2 "no such folder" "$T/nope" --batch "$T/batch.jsonl"
D=$(case_dir nobatch)
refuses 2 "no-such.jsonl" "$D" --batch "$T/no-such.jsonl"

# -- a shard still running (holding its fcntl lock, as `run` does)
D=$(case_dir busy)
hold_lock "$D/longhaul-2-of-4.lock"
refuses 75 "shard 2/4 is still running" "$D" --batch "$T/batch.jsonl"
kill $holder; wait $holder 2>/dev/null || true
"$LH" merge "$D" --batch "$T/batch.jsonl" > /dev/null || fail "merge after the shard ended failed"
# the same while the shard's first run is going: no output file yet, so not "missing" (1) but running
D=$(case_dir busy_first)
rm "$D/output-2-of-4.jsonl" "$D/errors-2-of-4.jsonl"
hold_lock "$D/longhaul-2-of-4.lock"
refuses 75 "shard 2/4 is still running (it has not written output-2-of-4.jsonl yet)" "$D" --batch "$T/batch.jsonl"
kill $holder; wait $holder 2>/dev/null || true
refuses 1 "shard 2 of 4 is missing" "$D" --batch "$T/batch.jsonl"

# -- a symbolic link planted at a shard's lock (to a file elsewhere): checking that the shard is
# idle takes its lock, which truncates the lock file, so the link is refused (75, named), not followed
D=$(case_dir lock_link)
echo precious > "$T/victim.txt"
rm -f "$D/longhaul-1-of-4.lock" && ln -s "$T/victim.txt" "$D/longhaul-1-of-4.lock"
refuses 75 "$D/longhaul-1-of-4.lock is a symbolic link" "$D" --batch "$T/batch.jsonl"
[ "$(cat "$T/victim.txt")" = precious ] || fail "merge wrote through the symbolic link at a shard's lock"
echo "merge: ok"
