#!/usr/bin/env bash
# make_manpage.sh BINARY OUTPUT — longhaul(1) from the binary's own help: help2man renders
# `longhaul --help` and `--version`, and a COMMANDS section holds every command's `--help` as
# printed (the commands are the ones `longhaul --help` lists). Run by the build (CMake target
# longhaul_man) when help2man is installed; nothing here is written by hand but the few lines of
# SYNOPSIS, EXIT STATUS, FILES and SEE ALSO below.
set -euo pipefail
[ $# = 2 ] || { echo "usage: $0 BINARY OUTPUT" >&2; exit 2; }
bin=$1
out=$2
command -v help2man > /dev/null || { echo "$0: help2man is not installed (Debian: apt-get install help2man)" >&2; exit 1; }
inc=$(mktemp)
trap 'rm -f "$inc"' EXIT
# roff-safe preformatted text: backslashes, hyphens (so flags copy as ASCII) and leading dots.
roff() { sed -e 's/\\/\\e/g' -e 's/-/\\-/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
commands=$("$bin" --help | sed -n '/^commands:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p')
[ -n "$commands" ] || { echo "$0: $bin --help lists no commands" >&2; exit 1; }
{
  printf '[SYNOPSIS]\n.B longhaul\n\\fICOMMAND\\fR [\\fIARGS\\fR...]\n.br\n.B longhaul\n\\fICOMMAND\\fR \\fB\\-\\-help\\fR\n'
  printf '[COMMANDS]\nEach command'"'"'s \\fB\\-\\-help\\fR, as the binary prints it.\n'
  for c in $commands; do
    printf '.SS "longhaul %s"\n.nf\n' "$c"
    "$bin" "$c" --help | roff
    printf '.fi\n'
  done
  cat <<'EOF'
[EXIT STATUS]
0: success. 1: the work failed (some requests failed, a check found damage, shards that do not
add up). 2: usage or set-up error. 75: stopped by the machine, not the jobs (a full disk, an I/O
error, another run holding the output folder): fix it and rerun; nothing done is lost.
130: interrupted; rerun the same command to resume.
[FILES]
.TP
.I PREFIX/share/longhaul/niah/haystack.tar.xz
the haystack \fBlonghaul niah\fR uses when no \fB\-\-corpus\fR is given
.TP
.I PREFIX/share/longhaul/models/haul-tiny/
the small embedded model, a MiniMax-architecture model for trying longhaul out
.TP
.I PREFIX/share/doc/longhaul/examples/slurm/
a batch as a Slurm job array, one shard per task, and the merge step
[SEE ALSO]
.BR sbatch (1)
EOF
} > "$inc"
help2man --no-info --section=1 --name="batch question answering over archives of very long documents" \
  --include="$inc" --output="$out" "$bin"
