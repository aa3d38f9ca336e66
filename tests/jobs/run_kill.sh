#!/usr/bin/env bash
# run_kill.sh — kill -9 at random moments during prefill, rerun each time, and the final
# output.jsonl equals an uninterrupted run's byte for byte once the fields that name a moment are
# set aside: "created" (the completion's Unix time) is the only one; ids are derived from the
# batch and custom_id, so they must match.
. "$(dirname "$0")/lib.sh"
make_repo
# a longer prompt: the archive three times over, so prefill takes a while in small chunks
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"k1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_sha256_init?"}],"max_tokens":12,"temperature":0,"documents":["repo.tar.gz","repo.tar.gz","repo.tar.gz"]}}
{"custom_id":"k2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Summarise docs/ops.md."}],"max_tokens":12,"temperature":0.8,"seed":11,"documents":["repo.tar.gz","repo.tar.gz","repo.tar.gz"]}}
B
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/ref" --chunk 128 --progress none > /dev/null
kills=0
for i in $(seq 1 ${LH_KILLS:-8}); do
  "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 128 --progress none > /dev/null 2>&1 &
  pid=$!
  sleep "0.$(( (RANDOM % 9) + 1 ))"
  if kill -9 $pid 2>/dev/null; then kills=$((kills + 1)); fi
  wait $pid 2>/dev/null || true
done
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 128 --progress none > "$T/final.log" 2>&1 \
  || { cat "$T/final.log"; fail "final run failed"; }
strip() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o["response"]["body"]:
        o["response"]["body"].pop("created")
        # how many prompt tokens came from a checkpoint depends on where the kills fell
        o["response"]["body"]["usage"].pop("prompt_tokens_details")
    print(json.dumps(o, sort_keys=True))' "$1"; }
diff <(strip "$T/ref/output.jsonl") <(strip "$T/out/output.jsonl") || fail "output differs after $kills kills"
echo "run_kill: ok after $kills kills"
