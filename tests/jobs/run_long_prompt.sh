#!/usr/bin/env bash
# run_long_prompt.sh — a long prompt of the request's own (body.prompt or the messages, no documents)
# is prefilled like documents are: with progress, checkpoints per the plan, and a resume after a
# kill (before, a fork's own tokens were fed in one silent call with no checkpoint, so a kill after
# an hour of a 1M-token prompt lost the hour). The answers are bitwise those of an uninterrupted
# run (the same cuts: pipeline.h), and a short prompt beside it in the same group is unaffected.
. "$(dirname "$0")/lib.sh"
python3 - "$SRC/README.md" > "$T/batch.jsonl" <<'P'
import json, sys
text = open(sys.argv[1]).read()[:12000]
print(json.dumps({"custom_id": "long", "url": "/v1/completions",
                  "body": {"prompt": text, "max_tokens": 8, "temperature": 0.8, "seed": 3}}))
print(json.dumps({"custom_id": "chat", "url": "/v1/chat/completions",
                  "body": {"messages": [{"role": "user", "content": text[:6000]}], "max_tokens": 8, "temperature": 0}}))
print(json.dumps({"custom_id": "short", "url": "/v1/completions", "body": {"prompt": "int main(void) {", "max_tokens": 4}}))
P
RUN=("$LH" run "$T/batch.jsonl" --model "$MODEL" --chunk 128 --checkpoint-every 2 --keep-checkpoints -1)
"${RUN[@]}" --out "$T/ref" --progress plain > "$T/ref.log" 2>&1 || { cat "$T/ref.log"; fail "the reference run failed"; }
tokens() { json 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["prompt"])' "$1/jobs/$2/result.json"; }
long=$(tokens "$T/ref" long)
[ "$long" -gt 1000 ] || fail "the long prompt is only $long tokens"
# its own prefill shows progress under its custom_id, and the store holds checkpoints inside it
grep -q "long prefill done: " "$T/ref.log" || { cat "$T/ref.log"; fail "no progress line for the long prompt's prefill"; }
"$LH" store ls --db "$T/ref/longhaul.db" --json > "$T/ls.json"
json '
import json, sys
pos = sorted(c["pos"] for c in json.load(open(sys.argv[1]))["checkpoints"])
long = int(sys.argv[2])
assert sum(1 for p in pos if 0 < p < long) >= long // 256 - 1, (pos, long)   # every 2 chunks of 128
assert long in pos, (pos, long)
' "$T/ls.json" "$long" || fail "the long prompt was not checkpointed as it was prefilled"
norm "$T/ref" > "$T/ref.norm"
# killed at its 4th checkpoint commit: the rerun resumes the long prompt there, with the same answers
set +e
LH_TEST_KILL_AT=checkpoint:4 "${RUN[@]}" --out "$T/out" --progress none > "$T/kill.log" 2>&1
rc=$?
set -e
[ $rc = 137 ] || { cat "$T/kill.log"; fail "the run was not killed at its 4th checkpoint (exit $rc)"; }
"${RUN[@]}" --out "$T/out" --progress plain > "$T/rerun.log" 2>&1 || { cat "$T/rerun.log"; fail "the rerun failed"; }
grep -q "resumed its own prompt from a checkpoint at token" "$T/rerun.log" \
  || { cat "$T/rerun.log"; fail "the rerun did not resume the long prompt from its checkpoint"; }
diff "$T/ref.norm" <(norm "$T/out") || fail "the resumed run's answers differ from the uninterrupted run's"
echo "run_long_prompt: a $long-token prompt of its own prefilled with progress and checkpoints, resumed after a kill: ok"
