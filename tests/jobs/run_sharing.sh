#!/usr/bin/env bash
# run_sharing.sh — requests over the same documents share one prefill whatever their system
# messages (the documents open every prompt, jobs/chat.h): three questions, two system messages
# and none, prefill the archive once; each one's answer is the one it gets alone.
. "$(dirname "$0")/lib.sh"
make_repo
req() { # id, system message or "", question
  python3 -c 'import json,sys
m = ([{"role":"system","content":sys.argv[2]}] if sys.argv[2] else []) + [{"role":"user","content":sys.argv[3]}]
print(json.dumps({"custom_id":sys.argv[1],"method":"POST","url":"/v1/chat/completions",
  "body":{"messages":m,"max_tokens":6,"temperature":0,"documents":["repo.tar.gz"]}}))' "$@"; }
{ req s1 "You are a careful code reviewer." "Which file defines lh_crc32c?"
  req s2 "Answer in one word." "How long is the key rotation interval?"
  req s3 "" "What does util/fs.c do?"; } > "$T/batch.jsonl"
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 256 --progress none > "$T/run.log" 2>&1 \
  || { cat "$T/run.log"; fail "run failed"; }
json '
import sys
r = [json.load(open(f"{sys.argv[1]}/jobs/{j}/result.json")) for j in ("s1", "s2", "s3")]
docs = r[0]["tokens"]["documents"]
assert docs > 1000, docs
for x in r:
    assert x["tokens"]["shared_prefix"] == docs and x["cache"]["requests_sharing_prefix"] == 3, x
' "$T/out"
computed=$(sed -n 's/.*tokens: \([0-9]*\) prefilled.*/\1/p' "$T/run.log")
docs=$(json 'import sys; print(json.load(open(sys.argv[1]))["tokens"]["documents"])' "$T/out/jobs/s1/result.json")
own=$(json 'import sys; print(sum(json.load(open(f"{sys.argv[1]}/jobs/{j}/result.json"))["tokens"]["own_suffix"] for j in ("s1","s2","s3")))' "$T/out")
[ "$computed" = $((docs + own)) ] || fail "$computed tokens prefilled for $docs of documents and $own of questions: not one prefill"
# usage.prompt_tokens_details.cached_tokens: the prefix is computed once; the first request pays
# for it, the other two reuse it
json '
import sys
docs = int(sys.argv[2])
c = {}
for l in open(sys.argv[1]):
    o = json.loads(l)
    c[o["custom_id"]] = o["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"]
assert sorted(c.values()) == [0, docs, docs], (c, docs)
' "$T/out/output.jsonl" "$docs"
# alone, each gets the same answer
for j in s1 s2 s3; do
  grep "\"custom_id\": \"$j\"" "$T/batch.jsonl" > "$T/$j.jsonl"
  "$LH" run "$T/$j.jsonl" --model "$MODEL" --out "$T/alone-$j" --chunk 256 --progress none > /dev/null 2>&1 || true
  a=$(json 'import sys; print(json.load(open(sys.argv[1]))["answer"])' "$T/out/jobs/$j/result.json")
  b=$(json 'import sys; print(json.load(open(sys.argv[1]))["answer"])' "$T/alone-$j/jobs/$j/result.json")
  [ "$a" = "$b" ] || fail "$j answers '$a' in the group and '$b' alone"
done
# a rerun restores the documents from the final checkpoint: all of them are cached
"$LH" run "$T/s1.jsonl" --model "$MODEL" --out "$T/alone-s1" --chunk 256 --progress none --force > /dev/null 2>&1 \
  || fail "the rerun with --force failed"
cached=$(json 'import sys; print(json.loads(open(sys.argv[1]).readline())["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"])' "$T/alone-s1/output.jsonl")
[ "$cached" = "$docs" ] || fail "the rerun reports $cached cached tokens, not the $docs document tokens it restored"
echo "run_sharing: 3 requests with different system messages, one prefill of $docs document tokens: ok"
