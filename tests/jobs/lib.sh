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
# For the ranks tests (run_ranks.sh, run_ranks_tcp.sh): a two-question batch over the repository,
# each answer of an output.jsonl as one line, the tokens a run log says it restored, and how many
# checkpoints a run's store holds (0 while it has none yet).
make_ranks_batch() {
  cat > "$T/batch.jsonl" <<'B'
{"custom_id":"r1","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Which file defines lh_sha256_init?"}],"max_tokens":12,"temperature":0,"documents":["repo.tar.gz","repo.tar.gz","repo.tar.gz"]}}
{"custom_id":"r2","method":"POST","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"Summarise docs/ops.md."}],"max_tokens":12,"temperature":0,"documents":["repo.tar.gz","repo.tar.gz","repo.tar.gz"]}}
B
}
answers() { json 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    print(o["custom_id"], json.dumps(o["response"]["body"]["choices"][0]) if o["response"]["body"] else o["error"])' "$1"; }
restored() { sed -n 's/.* \([0-9][0-9]*\) restored from checkpoints.*/\1/p' "$1"; }
checkpoints() { python3 -c 'import sqlite3, sys
try: print(sqlite3.connect(sys.argv[1], timeout=5).execute("select count(*) from checkpoints").fetchone()[0])
except Exception: print(0)' "$1/longhaul.db" 2>/dev/null || echo 0; }
# An output folder as text to compare runs by (run_faults.sh, run_kill_points.sh): output.jsonl,
# errors.jsonl and every job folder, without what names a moment or this run's work: timestamps,
# timings, rates, the store's path, and the cache counters (how much a resumed run restored).
norm() { python3 - "$1" <<'P'
import json, os, sys
out = sys.argv[1]
def clean(o):
    if isinstance(o, dict):
        return {k: clean(v) for k, v in o.items()
                if k not in ("created", "timings_s", "rates", "cache", "cached", "path", "cached_tokens", "prompt_tokens_details")}
    if isinstance(o, list):
        return [clean(v) for v in o]
    return o
for name in ("output.jsonl", "errors.jsonl"):
    for l in open(os.path.join(out, name)):
        print(name, json.dumps(clean(json.loads(l)), sort_keys=True))
for j in sorted(os.listdir(os.path.join(out, "jobs"))):
    d = os.path.join(out, "jobs", j)
    print(j, sorted(os.listdir(d)))
    print(j, json.dumps(clean(json.load(open(os.path.join(d, "result.json")))), sort_keys=True))
    print(j, open(os.path.join(d, "manifest.jsonl")).read())
P
}
# hold_lock FILE: another process takes FILE's fcntl lock, as a running longhaul holds its OUT's, and
# keeps it 60 s; its pid in $holder (`kill $holder` lets go)
hold_lock() {
  local said
  said=$(mktemp "$T/held-XXXXXX")
  python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a"); fcntl.lockf(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)' \
    "$1" > "$said" &
  holder=$!
  for _ in $(seq 100); do grep -q locked "$said" && break; sleep 0.05; done
}
# blocked_on_lock PID: wait (10 s at most) until PID sleeps in the wait for an fcntl lock
blocked_on_lock() { for _ in $(seq 200); do grep -q fcntl_setlk "/proc/$1/wchan" 2>/dev/null && break; sleep 0.05; done; }
