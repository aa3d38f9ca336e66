#!/usr/bin/env bash
# load_model_folder.sh — a hostile or unlucky model folder (--model DIR) through the real binary:
# every case must end at once with exit 2 (a set-up error, README's table) and a message naming the
# file and what is wrong with it, never hang, never read a device, never start a multi-GB
# allocation; `model info`, which checks a folder before a run, refuses every one of them alike.
# Each case is a copy of models/haul-tiny (symbolic links to its files) with one file replaced.
set -euo pipefail
LH=${LH_LONGHAUL:-build/longhaul}
SRC=${LH_SOURCE_DIR:-$PWD}
MODEL=$SRC/models/haul-tiny
T=$(mktemp -d "${TMPDIR:-/tmp}/lh-modelfolder-XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$T/docs" && printf 'DEFAULT_WORKER_TIMEOUT = 4817\n' > "$T/docs/config.py"
cat > "$T/batch.jsonl" <<'B'
{"custom_id":"q","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"What is DEFAULT_WORKER_TIMEOUT set to?"}],"max_tokens":4,"temperature":0,"documents":["docs"]}}
B
# variant NAME FILE : a model folder like haul-tiny whose FILE is left for the caller to make.
variant() {
  local d=$T/$1
  mkdir -p "$d"
  for f in "$MODEL"/*; do ln -s "$f" "$d/"; done
  rm -f "$d/$2"
  echo "$d"
}
# refused NAME EXPECT... : `run` and `model info` with model NAME exit 2 within 20 s, their
# messages holding each EXPECT.
refused() {
  local name=$1 rc=0 how
  shift
  for how in run info; do
    rc=0
    if [ $how = run ]; then
      timeout 20 "$LH" run "$T/batch.jsonl" --model "$T/$name" --out "$T/out-$name" --chunk 2048 --progress none \
        > "$T/$name.log" 2>&1 || rc=$?
    else
      timeout 20 "$LH" model info --model "$T/$name" > "$T/$name.log" 2>&1 || rc=$?
    fi
    [ $rc = 124 ] && fail "$name: $how hung (killed after 20 s)"
    [ $rc = 2 ] || { cat "$T/$name.log"; fail "$name: $how exited $rc, expected 2"; }
    for e in "$@"; do
      grep -qF -- "$e" "$T/$name.log" || { cat "$T/$name.log"; fail "$name: no '$e' in the message of $how"; }
    done
  done
  echo "ok: $name"
}

# -- files of the folder that are not regular files: a FIFO must not hang the run, /dev/zero must
#    not be read, a directory is not an I/O error of the machine (75) but a set-up error
for f in config.json generation_config.json tokenizer.json tokenizer_config.json model.safetensors; do
  b=${f%%.*}
  d=$(variant "fifo-$b" "$f") && mkfifo "$d/$f"
  refused "fifo-$b" "$f: is a FIFO (named pipe), not a regular file"
  d=$(variant "zero-$b" "$f") && ln -s /dev/zero "$d/$f"
  refused "zero-$b" "$f: is a character device, not a regular file"
  d=$(variant "dir-$b" "$f") && mkdir "$d/$f"
  refused "dir-$b" "$f: is a folder, not a regular file"
done

# -- a tokenizer.json without the chat format's turn markers among its added tokens: every prompt
#    would be encoded as text the model never saw and answered wrongly without a word
command -v python3 >/dev/null || { echo "SKIPPED: the tokenizer cases need python3 to edit JSON" >&2; exit 77; }
for drop in vocab added; do
  d=$(variant "no-markers-$drop" tokenizer.json)
  python3 - "$MODEL/tokenizer.json" "$d/tokenizer.json" "$drop" <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
marks = ("<beginning_of_sentence>", "<end_of_sentence>")
t["added_tokens"] = [a for a in t["added_tokens"] if a["content"] not in marks]
if sys.argv[3] == "vocab":
    for m in marks: t["model"]["vocab"].pop(m, None)
json.dump(t, open(sys.argv[2], "w"))
P
  refused "no-markers-$drop" "no-markers-$drop/tokenizer.json" '"<beginning_of_sentence>" as one token'
done
# ...while --chat-template raw, which needs no markers, still runs, and model info takes it too
timeout 20 "$LH" run "$T/batch.jsonl" --model "$T/no-markers-vocab" --out "$T/out-raw" --chunk 2048 \
  --chat-template raw --progress none > "$T/raw.log" 2>&1 || { cat "$T/raw.log"; fail "--chat-template raw was refused"; }
timeout 20 "$LH" model info --model "$T/no-markers-vocab" --chat-template raw > "$T/raw.log" 2>&1 \
  || { cat "$T/raw.log"; fail "model info --chat-template raw was refused"; }
grep -q '^chat format  raw' "$T/raw.log" || { cat "$T/raw.log"; fail "model info does not name the raw format"; }
echo "ok: --chat-template raw"

# -- a tokenizer.json that is not JSON, or names an id past config.json's vocab_size
d=$(variant cut-tokenizer tokenizer.json) && head -c 1000 "$MODEL/tokenizer.json" > "$d/tokenizer.json"
refused cut-tokenizer "cut-tokenizer/tokenizer.json: invalid JSON"
d=$(variant wide-tokenizer tokenizer.json)
python3 - "$MODEL/tokenizer.json" "$d/tokenizer.json" <<'P'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"].append({"id": 99999, "content": "<extra_tok>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w"))
P
refused wide-tokenizer "wide-tokenizer/tokenizer.json: token \"<extra_tok>\" has id 4096, but the model's vocabulary"
