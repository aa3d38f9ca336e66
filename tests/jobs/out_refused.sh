#!/usr/bin/env bash
# out_refused.sh — a command refused before it wrote its output leaves nothing it made, and
# nothing else goes.
#   - An output folder whose making fails part way (a name too long) leaves none of the folders
#     above it that it made.
. "$(dirname "$0")/lib.sh"
printf '%s\n' '{"custom_id":"w","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":2}}' > "$T/one.jsonl"
gone() { [ ! -e "$1" ] && [ ! -L "$1" ] || { find "$1" | sort; fail "$2 left $1 behind"; }; }
holds() { # DIR NAME...: DIR holds exactly these names
  local want got
  want=$(printf '%s\n' "${@:2}" | sort)
  got=$(ls -A "$1" | sort)
  [ "$got" = "$want" ] || { printf 'has:\n%s\nwant:\n%s\n' "$got" "$want"; fail "$1 holds other files than it should"; }
}

# an output folder that cannot be made (a name too long for the file system) leaves none of the
# folders above it that were made on the way; one that was there stays
long=$(printf 'x%.0s' $(seq 1 300))
set +e
"$LH" run "$T/one.jsonl" --model "$MODEL" --out "$T/mk/a/$long/b" --progress none > "$T/mk.log" 2>&1; rc=$?
set -e
[ $rc != 0 ] || fail "mk: a run into an output folder that cannot be made succeeded"
gone "$T/mk" "a run whose output folder could not be made"
mkdir "$T/mkhad"
set +e
"$LH" run "$T/one.jsonl" --model "$MODEL" --out "$T/mkhad/a/$long" --progress none > "$T/mkhad.log" 2>&1
set -e
[ -d "$T/mkhad" ] || fail "a run whose output folder could not be made removed a folder that was there"
holds "$T/mkhad"

echo "out_refused: ok"
