#!/usr/bin/env bash
# run_batch_input.sh — how `longhaul run` takes its batch (issue 29): `run -` reads the batch from
# standard input and answers as the same file does; a relative and an absolute path to the same
# batch give the same prompt and answer (a plain-file document is named in its frame as the batch
# writes it, not through the batch file's folder); --documents-root refuses a document outside the
# tree on its line; a duplicate custom_id is refused on the later line with a response id of its
# own.
. "$(dirname "$0")/lib.sh"
LH=$(realpath "$LH")
mkdir -p "$T/b/root"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/b/notes.txt"
printf 'secret\n' > "$T/b/outside.txt"
cat > "$T/b/batch.jsonl" <<'B'
{"custom_id":"a","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":4,"temperature":0,"documents":["notes.txt"]}}
{"custom_id":"a","url":"/v1/completions","body":{"prompt":"again","max_tokens":4,"temperature":0}}
B
answers_of() { json 'import sys
for l in open(sys.argv[1]):
    o = json.loads(l); b = o["response"]["body"]
    print(o["custom_id"], o["id"], b["usage"]["prompt_tokens"] if b else None, b["choices"][0]["text"] if b else o["error"]["message"])' "$1"; }
set +e
(cd "$T/b" && "$LH" run batch.jsonl --model "$MODEL" --out "$T/rel" --progress none) > "$T/rel.log" 2>&1
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/abs" --progress none > "$T/abs.log" 2>&1
(cd "$T/b" && "$LH" run - --model "$MODEL" --out "$T/stdin" --progress none < batch.jsonl) > "$T/stdin.log" 2>&1
set -e
for r in rel abs stdin; do [ -s "$T/$r/output.jsonl" ] || { cat "$T/$r.log"; fail "$r: no output.jsonl"; }; done
answers_of "$T/rel/output.jsonl" > "$T/rel.txt"
answers_of "$T/abs/output.jsonl" > "$T/abs.txt"
answers_of "$T/stdin/output.jsonl" > "$T/stdin.txt"
diff "$T/rel.txt" "$T/abs.txt" || fail "a relative and an absolute batch path gave different prompts or answers"
diff "$T/rel.txt" "$T/stdin.txt" || fail "the batch on standard input answered differently from the file"
json 'import sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert [l["custom_id"] for l in lines] == ["a", "a"], lines
assert lines[0]["error"] is None and lines[1]["response"]["status_code"] == 400
assert "line 2" in lines[1]["error"]["message"] and "line 1" in lines[1]["error"]["message"]
assert lines[0]["id"] != lines[1]["id"], "the refused duplicate shares the response id of the line that ran"
' "$T/rel/output.jsonl"
# --documents-root: the same batch confined to root/ (notes.txt lies outside it)
set +e
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/root_out" --documents-root "$T/b/root" --progress none \
  > "$T/root.log" 2>&1
set -e
json 'import sys
l = json.loads(open(sys.argv[1]).readline())
m = l["error"]["message"]
assert l["response"]["status_code"] == 400 and "line 1" in m and "notes.txt" in m and sys.argv[2] in m, m
' "$T/root_out/output.jsonl" "$T/b/root"
echo "run_batch_input: ok"
