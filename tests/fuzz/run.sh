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
  # -malloc_limit_mb: one malloc may ask for up to 4 GiB and still pass; what the process really
  # holds stays bounded by -rss_limit_mb (libFuzzer's 2048 MB). libarchive's cpio reader asks for
  # a header's declared name size (up to 4 GiB) as read-ahead before it knows the bytes are there
  # (a 1 KB newc header did, once the ISO 9660 bid stopped hiding it: ingest/archive.c iso_probe);
  # the buffer is never filled past the input's end, and under a hard limit (prlimit --as) the
  # malloc fails and the entry is an error. Seed: tests/fuzz/corpus/fuzz_ingest/cpio-namesize-4g.
  "$f" -max_total_time="$secs" -print_final_stats=0 -detect_leaks=1 -malloc_limit_mb=4200 "$work" > "$work.log" 2>&1 || {
    echo "fuzz: $name FAILED; log follows" >&2; tail -50 "$work.log" >&2; exit 1; }
  rm -rf "$work" "$work.log"
done
[ $found = 1 ] || echo "fuzz: no fuzz targets built"
