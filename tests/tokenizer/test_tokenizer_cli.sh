#!/usr/bin/env bash
# test_tokenizer_cli: `longhaul tokenize` end to end — JSONL and plain modes, decode, special
# tokens, threads, --model DIR, malformed lines (error line + "line N" + exit 1), usage errors.
# Expected ids come from the HF fixtures (tests/fixtures/tokenizer/*.cases.jsonl).
set -uo pipefail
src=${LH_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
lh=${LH_LONGHAUL:-$src/build/longhaul}
fix=$src/tests/fixtures/tokenizer
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lh-tokcli-XXXXXX")
trap '[ -n "${LH_KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
fails=0
check() { # check NAME COND...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

# fixture case N of tokenizer T: the text (raw bytes) in $tmp/text, HF's ids as "a,b,c" in $tmp/ids
fixture_case() {
  local line
  line=$(sed -n "${2}p" "$fix/$1.cases.jsonl")
  printf '%s' "$line" | sed 's/.*"text_b64": "\([^"]*\)".*/\1/' | base64 -d > "$tmp/text"
  printf '%s' "$line" | sed 's/.*"ids": \[\([^]]*\)\].*/\1/' | tr -d ' ' > "$tmp/ids"
  printf '%s' "$line" | sed 's/.*"ids_special": \[\([^]]*\)\].*/\1/' | tr -d ' ' > "$tmp/ids_special"
}

"$lh" tokenize --help > "$tmp/help"
check "help exits 0" test $? -eq 0
check "help names --jsonl" grep -q -- '--jsonl' "$tmp/help"
"$lh" tokenize > /dev/null 2>&1
check "no tokenizer is a usage error" test $? -eq 2
"$lh" tokenize --tokenizer "$tmp/missing.json" < /dev/null 2> "$tmp/err"
check "missing tokenizer exits 2" test $? -eq 2
check "missing tokenizer names the file" grep -q "missing.json" "$tmp/err"

# plain mode against HF ids, for several fixture strings
for n in 3 10 27 111; do
  fixture_case gpt2 $n
  got=$("$lh" tokenize --tokenizer "$fix/gpt2.tokenizer.json" < "$tmp/text" | tr ' ' ',')
  check "plain encode of gpt2 case $n" test "$got" = "$(cat "$tmp/ids")"
done

# JSONL: good lines, a blank line, malformed lines, an id field
fixture_case minimax 5
cp "$tmp/ids" "$tmp/ids5"
{
  printf '{"text":"%s"}\n' "$(sed 's/\\/\\\\/g; s/"/\\"/g' "$tmp/text" | awk 'BEGIN{ORS="\\n"} {print}' | sed 's/\\n$//')"
  printf '\n'
  printf 'this is not json\n'
  printf '{"notext": 1}\n'
  printf '{"id": "doc-7", "text": "<end_of_sentence>"}\n'
} > "$tmp/in.jsonl"
"$lh" tokenize --tokenizer "$fix/minimax.tokenizer.json" --jsonl < "$tmp/in.jsonl" > "$tmp/out.jsonl" 2> "$tmp/err"
rc=$?
check "malformed lines make exit status 1" test $rc -eq 1
check "one output line per non-blank input line" test "$(wc -l < "$tmp/out.jsonl")" -eq 4
check "error names line 3" grep -q "line 3:" "$tmp/err"
check "error names line 4" grep -q "line 4:" "$tmp/err"
check "error lines in place" test "$(sed -n 2p "$tmp/out.jsonl" | cut -c1-9)" = '{"error":'
check "id copied" grep -q '^{"id":"doc-7","ids":\[1\]}$' "$tmp/out.jsonl"
if grep -q '\\' "$tmp/text" || grep -q '[[:cntrl:]]' "$tmp/text"; then :; else
  check "jsonl ids equal HF" test "$(sed -n 1p "$tmp/out.jsonl" | sed 's/.*\[\(.*\)\].*/\1/')" = "$(cat "$tmp/ids5")"
fi

# special tokens (TemplateProcessing) and decoding
fixture_case llama3 42
got=$("$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --add-special < "$tmp/text" | tr ' ' ',')
check "--add-special equals HF add_special_tokens=True" test "$got" = "$(cat "$tmp/ids_special")"
tr ',' ' ' < "$tmp/ids" | "$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --decode > "$tmp/dec"
# llama3 has no normalizer: decoding its ids gives the text back (invalid UTF-8 as U+FFFD)
if iconv -f UTF-8 -t UTF-8 "$tmp/text" > /dev/null 2>&1; then
  check "plain decode gives the text back" cmp -s "$tmp/dec" "$tmp/text"
fi
printf '{"ids":[5000,1022,1,5001]}\nnope\n' | "$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --jsonl --decode \
  --skip-special > "$tmp/dec.jsonl" 2> /dev/null
check "jsonl decode with a bad line exits 1" test $? -eq 1
check "jsonl decode output" test "$(wc -l < "$tmp/dec.jsonl")" -eq 2
# a negative id is refused, naming where it is and what it is (it was dropped, as HF drops an id it
# does not know, which stays so); JSONL refuses that line only
echo "5000 -5 5001" | "$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --decode > "$tmp/neg.out" 2> "$tmp/neg.err"
check "plain decode of a negative id exits 1" test $? -eq 1
check "plain decode names the negative id" grep -qF "input id 2 (byte 5) is -5: a token id is never negative" "$tmp/neg.err"
check "plain decode of a negative id prints nothing" test ! -s "$tmp/neg.out"
printf '{"id":"a","ids":[5000,-7]}\n{"ids":[5000,99999999]}\n' \
  | "$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --jsonl --decode > "$tmp/neg.jsonl" 2> "$tmp/neg.err"
check "jsonl decode of a negative id exits 1" test $? -eq 1
check "jsonl decode names the negative id" grep -qF '{"id":"a","error":"\"ids\"[1] is -7: a token id is never negative"}' "$tmp/neg.jsonl"
check "jsonl decode skips an unknown id as HF" test "$(sed -n 2p "$tmp/neg.jsonl" | head -c 8)" = '{"text":'
# a line nested past cJSON's 1000 levels says so (it said "invalid JSON")
python3 -c 'print("{\"ids\": " + "[" * 1001)' | "$lh" tokenize --tokenizer "$fix/llama3.tokenizer.json" --jsonl --decode \
  > "$tmp/deep.jsonl" 2> /dev/null
check "jsonl: too deep a line names the nesting" grep -qF '{"error":"arrays and objects nest more than 1000 deep (at byte 1007): longhaul reads no deeper"}' "$tmp/deep.jsonl"

# threads and --model DIR give the same ids as one thread
for i in $(seq 1 6000); do cat "$fix/README"; done > "$tmp/big.txt"
a=$("$lh" tokenize --tokenizer "$fix/gpt2.tokenizer.json" < "$tmp/big.txt" | md5sum)
b=$("$lh" tokenize --tokenizer "$fix/gpt2.tokenizer.json" --threads 2 < "$tmp/big.txt" | md5sum)
check "--threads 2 equals one thread (streamed)" test "$a" = "$b"
mkdir -p "$tmp/model" && cp "$fix/gpt2.tokenizer.json" "$tmp/model/tokenizer.json"
c=$("$lh" tokenize --model "$tmp/model" < "$tmp/big.txt" | md5sum)
check "--model DIR" test "$a" = "$c"
"$lh" tokenize --model "$tmp" < /dev/null 2> "$tmp/err"
check "--model without tokenizer.json exits 2" test $? -eq 2

# --jsonl input that cannot be read to its end (here a folder; also a line too long for memory)
# exits 1 saying where it stopped (getline's failure read as the end of the input: exit 0)
"$lh" tokenize --tokenizer "$fix/gpt2.tokenizer.json" --jsonl < "$tmp" > /dev/null 2> "$tmp/err"
check "--jsonl: an unreadable input exits 1" test $? -eq 1
check "--jsonl: it says where it stopped" grep -q "reading line 1 of the input: Is a directory" "$tmp/err"

echo "test_tokenizer_cli: $fails failures"
[ $fails -eq 0 ]
