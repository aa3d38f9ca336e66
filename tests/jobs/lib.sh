# lib.sh — shared set-up for the runner's end-to-end tests (sourced). Makes a temp dir, a small
# repository archive built with the real tar, and helpers to read JSON with the system python3
# (only its standard json module: no packages).
set -euo pipefail
LH=${LH_LONGHAUL:-build/longhaul}
SRC=${LH_SOURCE_DIR:-$PWD}
MODEL=$SRC/tests/fixtures/runner/tiny-chat
T=$(mktemp -d "${TMPDIR:-/tmp}/lh-runner-XXXXXX")
[ -n "${LH_KEEP_TMP:-}" ] || trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v python3 >/dev/null || { echo "SKIPPED: python3 is needed to read JSON" >&2; exit 77; }
# A repository archive: this project's util/ and ingest headers, plus a planted fact.
make_repo() {
  mkdir -p "$T/repo/src" "$T/repo/docs"
  cp "$SRC"/util/*.c "$SRC"/util/*.h "$T/repo/src/"
  printf 'The deploy key rotation interval is 417 days.\n' > "$T/repo/docs/ops.md"
  tar -C "$T/repo" -czf "$T/repo.tar.gz" .
}
json() { python3 -c "import json,sys; $1" "${@:2}"; }
