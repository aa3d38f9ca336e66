#!/usr/bin/env bash
# ncu_lightning.sh — one Nsight Compute profile of the lightning core (the lightning_wg launch of
# bench_cuda --only lightning --quick at 16K tokens, cut), with the metrics a per-block cost
# breakdown needs: issue slots, pipe use (MUFU/XU, FMA, ALU, tensor, shared memory), warp stall
# reasons per SASS line. Writes OUT/ncu_details.csv (every section's metrics), OUT/ncu_raw.csv
# (every metric) and OUT/ncu_source.csv (SASS with stall samples per instruction; split it by role
# at the branch after the first BAR.SYNC 0x0, as bench/NOTES.md session 11 did).
# Payload: bench/cuda/make_payload.sh. Usage: ncu_lightning.sh DIR OUT [BENCH_BINARY] [KERNEL_REGEX]
set -u
D=$1
OUT=$2
B=${3:-bin/bench_cuda}
K=${4:-lightning_wg}
export LD_LIBRARY_PATH=$D/libs:${LD_LIBRARY_PATH:-}
cd "$D" || exit 1
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
"$NCU" --version | tail -1
timeout 240 "$NCU" --clock-control none -k "regex:$K" -s 1 -c 1 --set full --import-source no \
  -o /tmp/lw -f "$B" --only lightning --quick > "$OUT/ncu_run.log" 2>&1
echo "ncu rc=$?"
"$NCU" -i /tmp/lw.ncu-rep --page details --csv > "$OUT/ncu_details.csv" 2>&1
"$NCU" -i /tmp/lw.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_source.csv" 2>&1
"$NCU" -i /tmp/lw.ncu-rep --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
wc -c "$OUT"/ncu_*.csv
