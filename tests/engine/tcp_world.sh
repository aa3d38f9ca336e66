#!/usr/bin/env bash
# tcp_world.sh R PROGRAM [ARGS...] — start PROGRAM as the R ranks of a world without MPI (issue 10):
# each process gets LH_WORLD_SIZE=R, LH_RANK=r and one rendezvous file in a fresh temp dir. Waits
# for every rank; exits with rank 0's status, or 1 when another rank failed (its status printed).
set -u
R=$1
shift
dir=$(mktemp -d "${TMPDIR:-/tmp}/lh-tcp-world-XXXXXX")
trap 'rm -rf "$dir"' EXIT
pids=()
for r in $(seq 0 $((R - 1))); do
  LH_WORLD_SIZE=$R LH_RANK=$r LH_RENDEZVOUS=$dir/rendezvous LH_RENDEZVOUS_TIMEOUT=${LH_RENDEZVOUS_TIMEOUT:-120} "$@" &
  pids+=($!)
done
rc0=0 bad=0
for r in "${!pids[@]}"; do
  wait "${pids[$r]}"
  s=$?
  if [ "$r" = 0 ]; then rc0=$s; elif [ "$s" != 0 ]; then echo "tcp_world: rank $r exited with $s" >&2; bad=1; fi
done
[ $bad = 0 ] || exit 1
exit $rc0
