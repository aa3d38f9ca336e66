#!/usr/bin/env bash
# sanitize_lightning.sh — compute-sanitizer over the lightning kernels (gpu_parity --lightning: the
# 64-head cut with lightning_wg's hand-over and TMA stores, d = 32 through lightning_blocked, three
# segments), one tool after another: memcheck (out-of-bounds and misaligned accesses, including
# the TMA loads and stores), synccheck (barriers), racecheck (shared-memory hazards). The checks'
# own PASS/FAIL lines must stay green under each tool too.
# Payload: bench/cuda/make_payload.sh. Usage: sanitize_lightning.sh DIR OUT
set -u
D=$1
OUT=$2
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
cd "$D" || exit 1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$CS" ] || { echo "compute-sanitizer not found"; exit 1; }
"$CS" --version | tail -1
for tl in memcheck:75 synccheck:45 racecheck:60; do # tool:seconds (gpu_parity --lightning alone: ~5 s)
  tool=${tl%%:*}
  timeout "${tl##*:}" "$CS" --tool $tool --error-exitcode 9 bin/gpu_parity --lightning > "$OUT/sanitize_$tool.log" 2>&1
  echo "$tool rc=$? passes $(grep -c '^PASS' "$OUT/sanitize_$tool.log") fails $(grep -c '^FAIL' "$OUT/sanitize_$tool.log")"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|========= (Invalid|Race|Barrier|Error)" "$OUT/sanitize_$tool.log" | head -5
done
