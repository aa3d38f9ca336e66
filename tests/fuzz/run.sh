#!/usr/bin/env bash
# Short libFuzzer runs of every fuzz target in BUILD_DIR (make fuzz-short). Each target starts
# from its committed seed corpus tests/fuzz/corpus/<target>/ when there is one.
set -euo pipefail
build=${1:-build-fuzz}
secs=${2:-20}
shopt -s nullglob
found=0
for f in "$build"/tests/*/fuzz_*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  found=1
  name=$(basename "$f")
  work=$(mktemp -d)
  seeds=tests/fuzz/corpus/$name
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  "$f" -max_total_time="$secs" -print_final_stats=0 -detect_leaks=1 "$work" > "$work.log" 2>&1 || {
    echo "fuzz: $name FAILED; log follows" >&2; tail -50 "$work.log" >&2; exit 1; }
  rm -rf "$work" "$work.log"
done
[ $found = 1 ] || echo "fuzz: no fuzz targets built"
