#!/bin/bash
# submit.sh BATCH.jsonl MODEL_DIR OUT [SHARDS]: a longhaul batch as a Slurm job array of SHARDS
# tasks (default 4), one shard each (shard.sbatch), and the merge step after them (merge.sbatch).
# Environment: LONGHAUL (the binary; default: longhaul on PATH), RUN_ARGS (more `longhaul run`
# options), SBATCH_ARGS (more sbatch options for both jobs, e.g. "--partition=gpu --time=12:00:00").
# Prints the two job ids; logs go to OUT/slurm-*.log.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,6p' "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
batch=$(realpath "$1")
model=$(realpath "$2")
out=$(realpath -m "$3")
n=${4:-4}
[ "$n" -ge 2 ] 2>/dev/null || { echo "submit.sh: SHARDS must be 2 or more (got $n)" >&2; exit 2; }
lh=${LONGHAUL:-longhaul}
case $lh in */*) lh=$(realpath "$lh") ;; *) lh=$(command -v "$lh") || { echo "submit.sh: $lh is not on PATH" >&2; exit 2; } ;; esac
mkdir -p "$out"
export BATCH=$batch MODEL=$model OUT=$out LONGHAUL=$lh RUN_ARGS=${RUN_ARGS:-}
# shellcheck disable=SC2086
array=$(sbatch --parsable --export=ALL --array=0-$((n - 1)) --output="$out/slurm-%A_%a.log" ${SBATCH_ARGS:-} \
  "$here/shard.sbatch")
array=${array%%;*}
# afterany, not afterok: merge checks that every shard finished and names the one that did not;
# with afterok one failed task would leave the merge pending forever (DependencyNeverSatisfied).
# shellcheck disable=SC2086
merge=$(sbatch --parsable --export=ALL --dependency=afterany:"$array" --output="$out/slurm-merge-%j.log" \
  ${SBATCH_ARGS:-} "$here/merge.sbatch")
merge=${merge%%;*}
echo "array job $array ($n shards) and merge job $merge submitted; output in $out"
