#!/usr/bin/env bash
# test_store_cli.sh — `longhaul store ls|verify|gc` on a real store made by the store driver:
# tables and JSON that agree with the store, verify finding planted damage (exit 1) in a checkpoint
# page and in a stored answer, and --repair removing it (dropping the checkpoints, requeueing the
# job), damage to SQLite's own structure (a b-tree page, the header) that --repair cannot remove
# and is not recommended for, gc policies shrinking the file, usage errors (exit 2) that say what
# was wrong, and gc on a store that filled its disk (a small tmpfs; skipped, saying so, where mount
# is not allowed).
set -euo pipefail
lh=${LH_LONGHAUL:?}
driver=${LH_BINARY_DIR:?}/tests/store/store_driver
for tool in sqlite3 python3; do
  command -v $tool >/dev/null || { echo "SKIPPED test_store_cli: needs $tool (scripts/deps.sh test installs it)"; exit 77; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/lh-store-cli-XXXXXX")
trap 'rm -rf "$dir"' EXIT
db=$dir/run.db
fail() { echo "FAIL: $*" >&2; exit 1; }
expect_rc() { # expect_rc RC CMD...  (stdout+stderr in $dir/out)
  local want=$1; shift
  set +e; "$@" >"$dir/out" 2>&1; local rc=$?; set -e
  [ $rc = "$want" ] || { cat "$dir/out" >&2; fail "exit $rc (wanted $want): $*"; }
}
has() { grep -q -- "$1" "$dir/out" || { cat "$dir/out" >&2; fail "expected '$1' in the output of the last command"; }; }
json() { python3 -c "import json,sys; d=json.load(open('$dir/out')); print($1)"; }

"$driver" synth --db "$db" --n 1024 --chunk 64 --seed 7 --out "$dir/d7" 2>/dev/null
"$driver" synth --db "$db" --n 1024 --chunk 128 --seed 8 --out "$dir/d8" 2>/dev/null

expect_rc 0 "$lh" store ls --db "$db"
has "jobs: 0 queued, 0 running, 2 done, 0 failed"
has "job-7"
has "24 checkpoint(s)"
expect_rc 0 "$lh" store ls --db "$db" --json
[ "$(json 'len(d["checkpoints"])')" = 24 ] || fail "ls --json: checkpoint count"
[ "$(json 'sorted(j["state"] for j in d["jobs"])')" = "['done', 'done']" ] || fail "ls --json: job states"
[ "$(json 'max(c["pos"] for c in d["checkpoints"])')" = 1024 ] || fail "ls --json: positions"
expect_rc 0 "$lh" store ls --db "$db" --jobs
grep -q checkpoints "$dir/out" && fail "ls --jobs listed checkpoints"

expect_rc 0 "$lh" store verify --db "$db"
has ": ok"

# Plant damage: zero the bytes of one KV page of seed 7's first checkpoint.
sqlite3 "$db" "UPDATE ckpt_pages SET data = zeroblob(length(data)) WHERE id = (SELECT min(id) FROM ckpt_pages WHERE part = 1)"
expect_rc 1 "$lh" store verify --db "$db"
has "checksum mismatch"
has "DAMAGED"
has "run with --repair"
expect_rc 1 "$lh" store verify --db "$db" --json
[ "$(json 'd["ok"], d["damaged"]')" = "False 1" ] || fail "verify --json"
expect_rc 1 "$lh" store verify --db "$db" --repair
has "dropped 16 checkpoint(s)"
expect_rc 0 "$lh" store verify --db "$db"

# gc: dry run changes nothing; keep-last 2 thins; a size cap of 0 removes the rest; the file shrinks.
expect_rc 0 "$lh" store gc --db "$db" --keep-last 2 --dry-run --json
[ "$(json 'd["thinned"]')" = 6 ] || fail "gc dry run: thinned"
expect_rc 0 "$lh" store ls --db "$db" --json
[ "$(json 'sum(1 for c in d["checkpoints"] if not c["has_state"])')" = 0 ] || fail "dry run changed something"
expect_rc 0 "$lh" store gc --db "$db" --keep-last 2
has "thinned 6"
before=$(stat -c %s "$db")
expect_rc 0 "$lh" store gc --db "$db" --max-size 0 --json
[ "$(json 'd["deleted"]')" = 8 ] || fail "gc --max-size 0: deleted"
after=$(stat -c %s "$db")
[ "$after" -lt "$before" ] || fail "the file did not shrink ($before -> $after)"
expect_rc 0 "$lh" store ls --db "$db" --checkpoints
has "(none)"
expect_rc 0 "$lh" store gc --db "$db" --older-than 7d
has "deleted 0 checkpoint(s)"

# One changed byte in a stored answer: verify names the job, --repair requeues it for the next run.
sqlite3 "$db" "UPDATE results SET json = replace(json, '\"digest\"', '\"digesT\"') WHERE job_id = (SELECT min(job_id) FROM results)"
expect_rc 1 "$lh" store verify --db "$db"
has "('job-7'): its result row fails its checksum"
has "DAMAGED"
has "run with --repair to requeue them"
expect_rc 1 "$lh" store verify --db "$db" --json
[ "$(json 'd["ok"], d["damaged_jobs"], d["results"], d["damaged"]')" = "False 1 2 0" ] || fail "verify --json: damaged job"
expect_rc 1 "$lh" store verify --db "$db" --repair
has "requeued 1 of 1 damaged job(s)"
expect_rc 0 "$lh" store verify --db "$db"
has "1 result(s), 0 error text(s) checked"
has ": ok"
expect_rc 0 "$lh" store ls --db "$db"
has "jobs: 1 queued, 0 running, 1 done, 0 failed"

# Damage to SQLite's own structure is not what --repair repairs: verify and the store's errors say
# to move the store aside or salvage it, never to run --repair, and --repair writes nothing.
"$driver" synth --db "$dir/sq.db" --n 1024 --chunk 64 --seed 7 --out "$dir/dsq" 2>/dev/null
cp "$dir/sq.db" "$dir/hd.db"
printf '\xff\xfe\xfd\xfc' | dd of="$dir/sq.db" bs=1 seek=131072 conv=notrunc 2>/dev/null # page 3: a b-tree page
printf '\xff\xfe\xfd\xfc' | dd of="$dir/hd.db" bs=1 seek=100 conv=notrunc 2>/dev/null    # the header's end
expect_rc 1 "$lh" store verify --db "$dir/sq.db"
has "DAMAGED (SQLite structure)"
has "which --repair cannot fix"
has "sqlite3 $dir/sq.db .recover"
grep -q "run with --repair" "$dir/out" && fail "verify recommends --repair for damage it cannot repair"
cp "$dir/sq.db" "$dir/sq.before"
expect_rc 1 "$lh" store verify --db "$dir/sq.db" --repair
has "DAMAGED (SQLite structure)"
has "move the store aside"
grep -q "^repair:" "$dir/out" && fail "--repair claims to have repaired a damaged SQLite structure"
cmp -s "$dir/sq.db" "$dir/sq.before" || fail "--repair wrote into a store whose SQLite structure is damaged"
for args in "" "--repair"; do
  # shellcheck disable=SC2086
  expect_rc 2 "$lh" store verify --db "$dir/hd.db" $args
  has "which \`longhaul store verify --repair\` cannot fix"
  has "move it aside"
  has "sqlite3 $dir/hd.db .recover"
done

# Usage errors.
expect_rc 2 "$lh" store
expect_rc 2 "$lh" store frob --db "$db"
has "unknown subcommand 'frob'"
expect_rc 2 "$lh" store ls
has "--db FILE is required"
expect_rc 2 "$lh" store gc --db "$db"
has "give at least one of"
expect_rc 2 "$lh" store gc --db "$db" --older-than 5x
has "expected a number with s, m, h, d or w"
expect_rc 2 "$lh" store gc --db "$db" --max-size lots
# Numbers past what the store can count in are refused, not wrapped: an age of 2^64/1000 s wrapped
# to 384 ms (deleting every checkpoint a second old), a size of 1e30T to a negative cap (no cap).
"$driver" synth --db "$dir/wrap.db" --n 1024 --chunk 64 --seed 7 --out "$dir/dw" 2>/dev/null
sleep 1
for age in 18446744073709552 1e300 inf nan; do
  expect_rc 2 "$lh" store gc --db "$dir/wrap.db" --older-than "$age"
  case $age in inf|nan) has "expected a number" ;; *) has "out of range: at most 9e15 s" ;; esac
done
for size in 1e30T 9e18 nan; do
  expect_rc 2 "$lh" store gc --db "$dir/wrap.db" --max-size "$size"
  case $size in nan) has "expected bytes" ;; *) has "out of range: at most 4194304T" ;; esac
done
expect_rc 0 "$lh" store gc --db "$dir/wrap.db" --older-than 9e15
has "deleted 0 checkpoint(s)"
expect_rc 0 "$lh" store ls --db "$dir/wrap.db"
has "16 checkpoint(s)"
expect_rc 2 "$lh" store ls --db "$dir/absent.db"
has "no store there"
[ ! -e "$dir/absent.db" ] || fail "ls created a file"
echo "not a database at all, just text, long enough to look like a header......" > "$dir/text.db"
expect_rc 2 "$lh" store verify --db "$dir/text.db"
has "not a longhaul store"
expect_rc 0 "$lh" store --help

# A store that filled its disk (a small tmpfs): gc frees space there in passes whose journal fits
# (about 1 MiB), with every policy; with nothing free at all it says so and what to do instead of
# recommending itself. Needs root (mount); skipped loudly otherwise.
M=$dir/mnt
mkdir -p "$M"
if ! mount -t tmpfs -o size=24m tmpfs "$M" 2>/dev/null; then
  echo "SKIPPED (part): cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN): gc on a full disk did not run" >&2
  echo "test_store_cli: ok"
  exit 0
fi
umount "$M"
trap 'umount "$M" 2>/dev/null || true; rm -rf "$dir"' EXIT
full_store() { # full_store FREE_KIB: a done job, then a job that fills the disk; FREE_KIB left free
  umount "$M" 2>/dev/null || true
  mount -t tmpfs -o size=24m tmpfs "$M"
  "$driver" synth --db "$M/s.db" --n 1024 --chunk 64 --seed 8 --out "$M/d8" 2>/dev/null
  # (the driver stops at the full disk without freeing its toy state: no leak report for that)
  ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 \
    expect_rc 4 "$driver" synth --db "$M/s.db" --n 100000 --chunk 64 --seed 7 --out "$M/d7"
  has "the disk is full"
  has "delete other files on that disk, or \`longhaul store gc --db $M/s.db\`"
  cat /dev/zero > "$M/filler" 2>/dev/null || true
  [ "$1" = 0 ] || mount -o remount,size=$((24 * 1024 + $1))k "$M"
}
full_store 0
expect_rc 1 "$lh" store gc --db "$M/s.db" --keep-last 1
has "the disk is full, and gc itself needs a little free space"
has "delete other files on that disk"
has "move the store"
grep -q "free space (longhaul store gc)" "$dir/out" && fail "gc on a full disk recommends itself"
rm -f "$M/filler"
expect_rc 0 "$lh" store verify --db "$M/s.db"
for policy in "--keep-last 1" "--older-than 0" "--max-size 1M" "--keep-last 0 --no-vacuum"; do
  full_store 1024
  # shellcheck disable=SC2086
  expect_rc 0 "$lh" store gc --db "$M/s.db" $policy --json
  [ "$(json 'd["deleted"] + d["thinned"] > 0 and d["bytes_freed"] > 0')" = True ] || fail "gc $policy freed nothing"
  case $policy in
    *--no-vacuum) [ "$(json 'd["file_after"] == d["file_before"]')" = True ] || fail "gc $policy vacuumed" ;;
    *) [ "$(json 'd["file_after"] < d["file_before"]')" = True ] || fail "gc $policy did not shrink the file" ;;
  esac
  expect_rc 0 "$lh" store verify --db "$M/s.db"
  has ": ok"
done
umount "$M"
echo "test_store_cli: ok"
