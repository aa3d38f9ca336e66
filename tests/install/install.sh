#!/usr/bin/env bash
# install.sh — `make install DESTDIR=$tmp PREFIX=/usr` (on this test's build folder, NO_BUILD=1)
# installs a binary that runs, finds its NIAH haystack under ../share/longhaul beside itself and
# runs the installed embedded model; a man page that `man -l` renders without warnings with every
# command's section and ASCII hyphens in flags; a bash completion script that loads and completes
# `longhaul ru<TAB>` to run, flags, flag values and folders; and the LICENSE.
set -euo pipefail
SRC=${LH_SOURCE_DIR:-$PWD}
BUILD=${LH_BINARY_DIR:-$SRC/build}
T=$(mktemp -d "${TMPDIR:-/tmp}/lh-install-XXXXXX")
[ -n "${LH_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
R=$T/root
make -s -C "$SRC" install NO_BUILD=1 BUILD_DIR="$BUILD" DESTDIR="$R" PREFIX=/usr > "$T/install.log" 2>&1 \
  || { cat "$T/install.log"; fail "make install failed"; }
for f in usr/bin/longhaul usr/share/bash-completion/completions/longhaul usr/share/longhaul/niah/haystack.tar.xz \
  usr/share/longhaul/models/haul-tiny/config.json usr/share/longhaul/models/haul-tiny/model.safetensors \
  usr/share/doc/longhaul/LICENSE usr/share/doc/longhaul/README.md usr/share/doc/longhaul/examples/slurm/submit.sh; do
  [ -e "$R/$f" ] || fail "make install did not install /$f"
done
[ -x "$R/usr/share/doc/longhaul/examples/slurm/submit.sh" ] || fail "examples/slurm/submit.sh lost its execute bit"
grep -q "MIT License" "$R/usr/share/doc/longhaul/LICENSE" || fail "the installed LICENSE is not the MIT text"
find "$R" -path "$R/usr" -prune -o -print | grep -q -v "^$R\$" && fail "files outside DESTDIR/usr: $(find "$R" -maxdepth 1)"

# -- the binary, and the data it finds relative to itself
LH=$R/usr/bin/longhaul
"$LH" --help | grep -q "^  merge " || fail "the installed longhaul --help lacks its commands"
"$LH" --version | grep -q "^longhaul [0-9]" || fail "longhaul --version"
"$LH" niah --model "$R/usr/share/longhaul/models/haul-tiny" --out "$T/niah" --lengths 1k --depths 50 --trials 1 \
  --progress none > "$T/niah.log" 2>&1 || { cat "$T/niah.log"; fail "niah with the installed model and haystack failed"; }
grep -q "\"corpus\":\"$R/usr/bin/../share/longhaul/niah/haystack.tar.xz\"" "$T/niah/sweep.json" \
  || fail "niah did not use the installed haystack: $(grep -o '"corpus":"[^"]*"' "$T/niah/sweep.json")"

# -- bash completion: loads, registers, completes
C=$R/usr/share/bash-completion/completions/longhaul
complete_words() { # the words COMPREPLY holds for the command line "$@" (the last word is completed)
  (cd "$T" && bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _longhaul
    printf "%s\n" "${COMPREPLY[@]}"' _ "$C" "$@")
}
bash -c '. "$1"; complete -p longhaul' _ "$C" | grep -q "_longhaul" || fail "the completion does not register for longhaul"
[ "$(complete_words longhaul ru)" = run ] || fail "longhaul ru<TAB> gives '$(complete_words longhaul ru)', not run"
[ "$(complete_words longhaul me)" = merge ] || fail "longhaul me<TAB> does not give merge"
[ "$(complete_words longhaul run --dev)" = --device ] || fail "longhaul run --dev<TAB> does not give --device"
[ "$(complete_words longhaul run --device cu)" = cuda ] || fail "longhaul run --device cu<TAB> does not give cuda"
[ "$(complete_words longhaul merge --b)" = --batch ] || fail "longhaul merge --b<TAB> does not give --batch"
[ "$(complete_words longhaul store v)" = verify ] || fail "longhaul store v<TAB> does not give verify"
mkdir -p "$T/somedir" && : > "$T/somefile"
[ "$(complete_words longhaul run --model some)" = somedir ] || fail "longhaul run --model some<TAB> is not the folder alone"
[ "$(complete_words longhaul run some | sort | tr '\n' ' ')" = "somedir somefile " ] || fail "a batch path does not complete files"
[ -z "$(complete_words longhaul run --chunk '')" ] || fail "longhaul run --chunk <TAB> offers words for a number"

# -- the man page
M=$R/usr/share/man/man1/longhaul.1
if [ ! -f "$M" ]; then
  echo "SKIPPED: the build made no man page (help2man was not installed when it was configured)" >&2
  exit 77
fi
command -v man > /dev/null || { echo "SKIPPED: man (man-db) is not installed to render the man page" >&2; exit 77; }
MANWIDTH=100 man --warnings -l "$M" > "$T/man.txt" 2> "$T/man.err" || { cat "$T/man.err"; fail "man -l failed"; }
[ ! -s "$T/man.err" ] || { cat "$T/man.err"; fail "the man page renders with warnings"; }
for c in $("$LH" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p'); do
  grep -q "^   longhaul $c\$" "$T/man.txt" || fail "the man page has no section for longhaul $c"
done
grep -q -- "--shard I/N" "$T/man.txt" || fail "the man page's flags are not plain ASCII hyphens (--shard I/N)"
grep -q "^EXIT STATUS" "$T/man.txt" && grep -q "^SYNOPSIS" "$T/man.txt" || fail "the man page lacks SYNOPSIS or EXIT STATUS"
echo "install: ok"
