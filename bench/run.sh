#!/usr/bin/env bash
# make bench: run every benchmark program built under build/bench/ and print their tables.
set -euo pipefail
shopt -s nullglob
ran=0
for b in build/bench/*/bench_*; do
  [ -x "$b" ] || continue
  echo "== $b"; "$b"; ran=1
done
[ $ran = 1 ] || echo "bench: no benchmarks built yet"
