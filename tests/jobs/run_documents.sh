#!/usr/bin/env bash
# run_documents.sh — what `longhaul run` does with documents that are not what they seem (issue 29):
# a FIFO or a device named as a document fails its own line with a 400 naming it, at once, while
# the other lines run; with --documents-root a symlink in a document folder that points outside the
# root is left out (and said so in the manifest), never read.
. "$(dirname "$0")/lib.sh"
LH=$(realpath "$LH")
mkdir -p "$T/b/docs"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/b/docs/notes.txt"
printf 'secret-outside-the-root\n' > "$T/b/secret.txt"
ln -s ../secret.txt "$T/b/docs/esc"
mkfifo "$T/b/pipe"
cat > "$T/b/batch.jsonl" <<'B'
{"custom_id":"fifo","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["pipe"]}}
{"custom_id":"zero","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["/dev/zero"]}}
{"custom_id":"ok","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["docs"]}}
B
set +e
timeout 300 "$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/o1" --progress none > "$T/o1.log" 2>&1
rc=$?
set -e
[ $rc != 124 ] || fail "the run hung on a FIFO or a device"
[ $rc = 1 ] || { cat "$T/o1.log"; fail "exit status $rc, expected 1 (two lines fail)"; }
json 'import sys
lines = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
for cid, kind in (("fifo", "FIFO"), ("zero", "character device")):
    l = lines[cid]
    assert l["response"]["status_code"] == 400, l
    m = l["error"]["message"]
    assert kind in m and ("pipe" if cid == "fifo" else "/dev/zero") in m, m
assert lines["ok"]["error"] is None, lines["ok"]
' "$T/o1/output.jsonl"

# --documents-root: the folder is inside the root, its symlink to secret.txt is not
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/o2" --progress none --documents-root "$T/b/docs" \
  > "$T/o2.log" 2>&1 || true
json 'import sys
lines = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
assert lines["ok"]["error"] is None, lines["ok"]
assert lines["zero"]["response"]["status_code"] == 400 and sys.argv[3] in lines["zero"]["error"]["message"]
esc = [json.loads(l) for l in open(sys.argv[2]) if json.loads(l)["path"] == "esc"]
assert esc and esc[0]["status"] == "skipped" and esc[0]["reason"] == "outside-root", esc
assert "outside the documents root" in esc[0]["detail"], esc
' "$T/o2/output.jsonl" "$T/o2/jobs/ok/manifest.jsonl" "$T/b/docs"
! grep -rq 'secret-outside-the-root' "$T/o2/jobs" || fail "a file outside the documents root was read"
echo "run_documents: ok"
