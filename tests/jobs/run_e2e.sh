#!/usr/bin/env bash
# run_e2e.sh — `longhaul run` on a real archive: output.jsonl has the OpenAI batch output shape
# with one line per input line; malformed lines and missing archives give per-line errors while
# the other jobs run; two questions over one archive prefill it once (asserted from the store);
# a rerun skips finished jobs and rewrites the same output.jsonl; status and results read the store.
. "$(dirname "$0")/lib.sh"
make_repo
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"q1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_crc32c?"}],"max_tokens":8,"temperature":0,"documents":["repo.tar.gz"]}}
{"custom_id":"q2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":8,"temperature":0,"documents":["repo.tar.gz"]}}
{"custom_id":"broken", "url":
{"custom_id":"q3","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"x"}],"max_tokens":4,"documents":["missing.tar"]}}
{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":6,"temperature":0.7,"seed":3}}
{"custom_id":"toolong","method":"POST","url":"/v1/completions","body":{"prompt":"x","max_tokens":2000000}}
B
set +e
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 256 --progress plain > "$T/run1.log" 2>&1
rc=$?
set -e
cat "$T/run1.log"
[ $rc = 1 ] || fail "exit status $rc, expected 1 (some requests failed)"
# a group of two is explained once (a second explanation came before every decode)
[ "$(grep -c 'q1 +1: q1 and 1 more request over the same documents' "$T/run1.log")" = 1 ] \
  || fail "the group of q1 and q2 was explained $(grep -c 'q1 +1: q1 and 1 more request' "$T/run1.log") times"
json '
import sys
lines = [json.loads(l) for l in open(sys.argv[1])]
ids = [l["custom_id"] for l in lines]
assert ids == ["q1", "q2", "line-3", "q3", "c1", "toolong"], ids
for l in lines:
    assert set(l) == {"id", "custom_id", "response", "error"}, l.keys()
    assert l["id"].startswith("batch_req_"), l["id"]
    r = l["response"]
    assert set(r) == {"status_code", "request_id", "body"}, r.keys()
ok = {l["custom_id"]: l for l in lines if l["error"] is None}
assert set(ok) == {"q1", "q2", "c1"}, set(ok)
for cid in ("q1", "q2"):
    b = ok[cid]["response"]["body"]
    assert b["object"] == "chat.completion" and b["choices"][0]["message"]["role"] == "assistant"
    assert b["choices"][0]["finish_reason"] in ("stop", "length")
    u = b["usage"]; assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["prompt_tokens"] > 1000
b = ok["c1"]["response"]["body"]
assert b["object"] == "text_completion" and "text" in b["choices"][0]
err = {l["custom_id"]: l for l in lines if l["error"] is not None}
assert err["line-3"]["response"]["status_code"] == 400 and "line 3" in err["line-3"]["error"]["message"]
assert err["q3"]["response"]["status_code"] == 400 and "missing.tar" in err["q3"]["error"]["message"]
assert err["toolong"]["error"]["code"] == "context_length_exceeded"
' "$T/out/output.jsonl"
# per-job folders and their manifest
for j in q1 q2 c1; do [ -s "$T/out/jobs/$j/result.json" ] || fail "no result.json for $j"; done
grep -q '"path":"./docs/ops.md"' "$T/out/jobs/q1/manifest.jsonl" || grep -q 'docs/ops.md' "$T/out/jobs/q1/manifest.jsonl" \
  || fail "manifest lacks docs/ops.md"
# one prefill for two questions: the checkpoint chain holds the shared prefix's KV once
json '
import sys
r1, r2 = (json.load(open(p)) for p in sys.argv[1:3])
assert r1["tokens"]["shared_prefix"] == r2["tokens"]["shared_prefix"] > 1000
assert r1["cache"]["requests_sharing_prefix"] == 2 and r2["cache"]["requests_sharing_prefix"] == 2
' "$T/out/jobs/q1/result.json" "$T/out/jobs/q2/result.json"
prefix=$(json 'import sys; print(json.load(open(sys.argv[1]))["tokens"]["shared_prefix"])' "$T/out/jobs/q1/result.json")
"$LH" store ls --db "$T/out/longhaul.db" --json > "$T/ls.json"
json '
import sys
d = json.load(open(sys.argv[1])); prefix = int(sys.argv[2])
cks = d["checkpoints"]
rows = sum(c["pos"] - c["parent_pos"] for c in cks)
assert rows == prefix, (rows, prefix)   # every KV row of the prefix stored exactly once
assert max(c["pos"] for c in cks) == prefix
' "$T/ls.json" "$prefix"
# rerun: nothing to do, same bytes
cp "$T/out/output.jsonl" "$T/output.first"
set +e
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 256 --progress none > "$T/run2.log" 2>&1
rc=$?
set -e
[ $rc = 1 ] || { cat "$T/run2.log"; fail "rerun exit status $rc"; }
grep -q "5 already done" "$T/run2.log" || { cat "$T/run2.log"; fail "rerun did not skip finished jobs"; }
cmp "$T/out/output.jsonl" "$T/output.first" || fail "rerun changed output.jsonl"
"$LH" status --out "$T/out" | tee "$T/status.txt"
grep -q "done" "$T/status.txt" || fail "status shows no done jobs"
"$LH" results q2 --out "$T/out" | json 'import sys; r = json.load(sys.stdin); assert r["custom_id"] == "q2"'
# JOB is a custom_id before it is a job number: with custom_ids "2" and "1" (job numbers 1 and 2),
# `results 2` is the request called "2" (before, the job numbered 2, called "1", was printed).
printf '%s\n' '{"custom_id":"2","url":"/v1/completions","body":{"prompt":"first","max_tokens":2,"temperature":0}}' \
  '{"custom_id":"1","url":"/v1/completions","body":{"prompt":"second","max_tokens":2,"temperature":0}}' > "$T/num.jsonl"
"$LH" run "$T/num.jsonl" --model "$MODEL" --out "$T/num" --progress none > "$T/num.log" 2>&1 || { cat "$T/num.log"; fail "the numbered batch failed"; }
for id in 1 2; do
  "$LH" results "$id" --out "$T/num" 2> "$T/num-$id.err" | json 'import sys; r = json.load(sys.stdin); assert r["custom_id"] == sys.argv[1], r["custom_id"]' "$id" \
    || fail "results $id did not print the job called '$id'"
  [ -s "$T/num-$id.err" ] && { cat "$T/num-$id.err"; fail "results $id warned of several jobs"; }
done
"$LH" results 3 --out "$T/num" > /dev/null 2>&1 && fail "results 3 found a job in a store of two"
echo "run_e2e: ok"
