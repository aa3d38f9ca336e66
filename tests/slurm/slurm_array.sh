#!/usr/bin/env bash
# slurm_array.sh — examples/slurm/ on a real Slurm: starts a single-node cluster in a temporary
# folder (munged with a fresh key, slurmctld and slurmd with a generated slurm.conf on 127.0.0.1,
# random ports, as root), submits a batch as a 4-task job array with the merge step after it
# (examples/slurm/submit.sh), waits, and checks that every task ran its own shard and that the
# merged output.jsonl and errors.jsonl equal one run of the whole batch, byte for byte apart from
# `created`; then that a shard rerun outside the array (SHARD=I/N, examples/slurm/README.md)
# completes a merge that refused without it. Skips (77), saying why, where Debian's slurm-wlm and
# munge are not installed (`make deps-test` installs them), the test is not root, or the daemons
# do not come up.
. "$(dirname "$0")/../jobs/lib.sh"
skip() { echo "SKIPPED: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "starting slurmctld, slurmd and munged needs root (run as root, as CI does)"
for b in munged slurmctld slurmd sbatch squeue scontrol; do
  command -v "$b" > /dev/null || [ -x "/usr/sbin/$b" ] || skip "$b is not installed (Debian: apt-get install slurm-wlm munge, or make deps-test)"
done
PATH=$PATH:/usr/sbin
S=$T/slurm
mkdir -p "$S/state" "$S/spool" "$S/log"
pids=()
# ends what this test started, by pid: the jobs, then the daemons
stop_cluster() {
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --user=root > /dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$p" 2> /dev/null || true
  done
}
cleanup() { stop_cluster; [ -n "${LH_KEEP_TMP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
logs() { for f in "$S"/log/*; do echo "== $f"; tail -n 20 "$f"; done >&2; }

# -- munge, with its own key and socket
head -c 1024 /dev/urandom > "$S/munge.key"
chmod 400 "$S/munge.key"
munged -F -f --key-file="$S/munge.key" --socket="$S/munge.sock" --pid-file="$S/munged.pid" \
  --log-file="$S/log/munged.log" --seed-file="$S/munged.seed" > "$S/log/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$S/munge.sock" ] && break; sleep 0.1; done
munge -S "$S/munge.sock" -n 2> /dev/null | unmunge -S "$S/munge.sock" > /dev/null 2>&1 \
  || { logs; skip "munged did not start (see its log above)"; }

# -- slurm.conf: one node (this host, on 127.0.0.1), one partition, nothing that needs cgroups
H=$(hostname -s)
read -r P1 P2 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cat > "$S/slurm.conf" <<EOF
ClusterName=lhtest
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$P1
SlurmdPort=$P2
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$H NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=lh Nodes=$H Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$S/slurm.conf
slurmctld -D -c -f "$SLURM_CONF" > "$S/log/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$H" > "$S/log/slurmd.out" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 150); do
  sinfo -h -o '%t' 2> /dev/null | grep -q idle && { up=1; break; }
  sleep 0.2
done
[ $up = 1 ] || { logs; skip "slurmctld/slurmd did not bring the node up within 30 s (logs above)"; }

# -- a small batch: groups over several documents, a malformed line, a missing document
make_repo
q() { printf '{"custom_id":"%s","url":"/v1/completions","body":{"prompt":"%s","max_tokens":3,"temperature":0,"documents":["%s"]}}\n' "$@"; }
for n in $(seq 8); do printf 'Note %d: the answer is %d.\n' "$n" $((n * 7)) > "$T/note$n.txt"; done
{
  printf '%s\n' '{"custom_id":"d1","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"How long is the key rotation interval?"}],"max_tokens":4,"temperature":0,"documents":["repo.tar.gz"]}}'
  for n in $(seq 8); do q "n$n" "Line $n:" "note$n.txt"; done
  printf '%s\n' '{"custom_id":"broken", "url":'
  q gone x missing.tar
  printf '%s\n' '{"custom_id":"c1","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0}}'
} > "$T/batch.jsonl"
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/one" --threads 1 --progress none > "$T/one.log" 2>&1 \
  && fail "the one-process run exited 0 although a line is malformed"

# -- the array and the merge, as a user submits them
out=$(LONGHAUL=$LH "$SRC"/examples/slurm/submit.sh "$T/batch.jsonl" "$MODEL" "$T/out" 4) || fail "submit.sh failed"
echo "$out"
array=$(sed -n 's/^array job \([0-9]*\) .* merge job \([0-9]*\) .*/\1/p' <<< "$out")
merge=$(sed -n 's/^array job \([0-9]*\) .* merge job \([0-9]*\) .*/\2/p' <<< "$out")
[ -n "$array" ] && [ -n "$merge" ] || fail "submit.sh did not name its jobs"
for _ in $(seq 600); do
  [ -z "$(squeue -h -j "$array,$merge" 2> /dev/null)" ] && break
  sleep 0.5
done
[ -z "$(squeue -h -j "$array,$merge")" ] || { squeue; logs; fail "the jobs did not finish within 5 minutes"; }
for f in "$T"/out/slurm-*.log; do echo "== $f"; cat "$f"; done
# every task ran its own shard, and said so
for s in 0 1 2 3; do
  grep -l "longhaul shard $s/4 " "$T"/out/slurm-"${array}"_*.log > /dev/null || fail "no task ran shard $s/4"
  # run itself took the shard from SLURM_ARRAY_* (shard.sbatch passes no --shard in an array)
  grep -l "shard $s/4 from the Slurm array: SLURM_ARRAY_TASK_ID=$s of 0-3" "$T"/out/slurm-"${array}"_*.log > /dev/null \
    || fail "no task's run said it took shard $s/4 from the Slurm array"
  [ -f "$T/out/shard-$s-of-4.json" ] || fail "shard $s wrote no shard-$s-of-4.json record"
  [ -f "$T/out/output-$s-of-4.jsonl" ] || fail "shard $s wrote no output-$s-of-4.jsonl"
done
grep -q "longhaul merge: 4 shards" "$T"/out/slurm-merge-"$merge".log || fail "the merge step did not merge"
nocreated() { sed 's/"created":[0-9]*/"created":0/' "$1"; }
for f in output errors; do
  diff <(nocreated "$T/one/$f.jsonl") <(nocreated "$T/out/$f.jsonl") || fail "$f.jsonl from the array differs from one run's"
done
[ "$(wc -l < "$T/out/output.jsonl")" = 12 ] || fail "output.jsonl has $(wc -l < "$T/out/output.jsonl") lines, expected 12"

# -- a shard that did not finish, rerun outside the array as examples/slurm/README.md says
rm "$T/out/output-2-of-4.jsonl" "$T/out/errors-2-of-4.jsonl" "$T/out/output.jsonl" "$T/out/errors.jsonl"
set +e
"$LH" merge "$T/out" --batch "$T/batch.jsonl" > "$T/m.log" 2>&1
rc=$?
set -e
[ $rc = 1 ] && grep -q "shard 2 of 4 is missing" "$T/m.log" || { cat "$T/m.log"; fail "merge without shard 2: exit $rc"; }
BATCH=$T/batch.jsonl MODEL=$MODEL OUT=$T/out LONGHAUL=$LH SHARD=2/4 \
  timeout 300 sbatch --wait --output="$T/out/slurm-rerun-%j.log" "$SRC/examples/slurm/shard.sbatch" > /dev/null \
  || { cat "$T"/out/slurm-rerun-*.log; fail "the rerun of shard 2/4 failed"; }
grep -q "longhaul shard 2/4 " "$T"/out/slurm-rerun-*.log || fail "the rerun did not run shard 2/4"
"$LH" merge "$T/out" --batch "$T/batch.jsonl" > "$T/m.log" 2>&1 || { cat "$T/m.log"; fail "merge after the rerun"; }
for f in output errors; do
  diff <(nocreated "$T/one/$f.jsonl") <(nocreated "$T/out/$f.jsonl") || fail "$f.jsonl after the rerun differs from one run's"
done
echo "slurm_array: ok"
