#!/usr/bin/env bash
# run_documents.sh — what `longhaul run` does with documents that are not what they seem (issue 29):
# a FIFO or a device named as a document fails its own line with a 400 naming it, at once, while
# the other lines run; with --documents-root a symlink in a document folder that points outside the
# root is left out (and said so in the manifest), never read. A document that gives no text (a
# gzip of zeros, which reads as an empty tar; a folder of binaries) is a warning in result.json and
# on the output line, with what each document came to in result.json's "ingest"; with
# --require-documents it fails its line with a 400. Documents that pass the model's context (1M tokens
# for the test model) are refused while they are read, naming the file, in bounded memory. An output
# folder (and a store) inside a document folder is left out of the walk: a rerun's prompt does not
# read the last run's results.
. "$(dirname "$0")/lib.sh"
LH=$(realpath "$LH")
mkdir -p "$T/b/docs"
printf 'The deploy key rotation interval is 417 days.\n' > "$T/b/docs/notes.txt"
printf 'secret-outside-the-root\n' > "$T/b/secret.txt"
ln -s ../secret.txt "$T/b/docs/esc"
mkfifo "$T/b/pipe"
head -c 1048576 /dev/zero | gzip -c > "$T/b/zeros.tar.gz"
mkdir -p "$T/b/bin" && head -c 100 /dev/zero > "$T/b/bin/a.o" && head -c 100 /dev/zero > "$T/b/bin/b.o"
cat > "$T/b/batch.jsonl" <<'B'
{"custom_id":"fifo","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["pipe"]}}
{"custom_id":"zero","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["/dev/zero"]}}
{"custom_id":"ok","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["docs"]}}
{"custom_id":"zeros","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["zeros.tar.gz"]}}
{"custom_id":"bin","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["docs","bin"]}}
B
set +e
timeout 300 "$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/o1" --progress plain > "$T/o1.log" 2>&1
rc=$?
set -e
[ $rc != 124 ] || fail "the run hung on a FIFO or a device"
[ $rc = 1 ] || { cat "$T/o1.log"; fail "exit status $rc, expected 1 (two lines fail)"; }
grep -q 'document zeros.tar.gz: no text' "$T/o1.log" || fail "the run did not say that zeros.tar.gz gave no text"

json 'import sys
lines = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
for cid, kind in (("fifo", "FIFO"), ("zero", "character device")):
    l = lines[cid]
    assert l["response"]["status_code"] == 400, l
    m = l["error"]["message"]
    assert kind in m and ("pipe" if cid == "fifo" else "/dev/zero") in m, m
assert lines["ok"]["error"] is None and "warnings" not in lines["ok"]["response"]["body"], lines["ok"]
z = lines["zeros"]["response"]
assert z["status_code"] == 200, z
w = z["body"]["warnings"]
assert len(w) == 1 and w[0].startswith("document zeros.tar.gz: no text: no entries") and "NUL blocks" in w[0], w
w = lines["bin"]["response"]["body"]["warnings"]
assert len(w) == 1 and w[0].startswith("document bin: no text: 2 entries, none a document (skipped: binary 2)"), w
' "$T/o1/output.jsonl"
json 'import sys
ok, z, b = (json.load(open(p)) for p in sys.argv[1:4])
assert ok["warnings"] == [] and [i["path"] for i in ok["ingest"]] == ["docs"], ok
i = ok["ingest"][0]
assert i["documents"] == 1 and i["skipped"] == {"link": 1} and i["no_text"] is False and i["notes"] == [], i
assert len(z["warnings"]) == 1 and z["ingest"][0]["no_text"] is True and z["ingest"][0]["entries"] == 0, z
assert z["warnings"][0].split(": no text: ")[1] == z["ingest"][0]["notes"][0].split(": no text: ")[1], z
assert [i["no_text"] for i in b["ingest"]] == [False, True] and b["ingest"][1]["skipped"] == {"binary": 2}, b
' "$T/o1/jobs/ok/result.json" "$T/o1/jobs/zeros/result.json" "$T/o1/jobs/bin/result.json"

# --require-documents: the lines whose documents gave no text fail with a 400 naming them
set +e
"$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/o3" --progress none --require-documents > "$T/o3.log" 2>&1
set -e
json 'import sys
lines = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
assert lines["ok"]["error"] is None, lines["ok"]
for cid, what in (("zeros", "document zeros.tar.gz: no text"), ("bin", "document bin: no text")):
    l = lines[cid]
    assert l["response"]["status_code"] == 400 and l["error"]["code"] == "no_document_text", l
    assert l["error"]["message"].startswith("--require-documents: " + what), l["error"]
' "$T/o3/output.jsonl"

# --require-documents is part of a job's identity (it decides between a 200 and a 400): a rerun
# that adds it over OUT answered without it gives the 400s a fresh OUT gives, not "already done",
# and a rerun without it over the 400s answers them; the lines with text answer alike both ways
status_of() { json 'import sys
for l in map(json.loads, open(sys.argv[1])):
    print(l["custom_id"], l["response"]["status_code"])' "$1"; }
status_of "$T/o1/output.jsonl" > "$T/plain.status"
status_of "$T/o3/output.jsonl" > "$T/required.status"
grep -q '^zeros 200$' "$T/plain.status" && grep -q '^zeros 400$' "$T/required.status" || fail "no 200/400 to flip"
for flip in "o1 required --require-documents" "o3 plain"; do
  set -- $flip
  out=$1 want=$2 && shift 2
  set +e
  "$LH" run "$T/b/batch.jsonl" --model "$MODEL" --out "$T/$out" --progress none "$@" > "$T/$out.flip.log" 2>&1
  rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/$out.flip.log"; fail "rerun of $out as $want: exit $rc, expected 1"; }
  status_of "$T/$out/output.jsonl" | cmp -s - "$T/$want.status" ||
    { status_of "$T/$out/output.jsonl"; fail "rerun of $out as $want: kept the outcomes of the run before"; }
done

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
# 48 MiB of one character: refused after about the context's worth of tokens, not read whole
head -c 50331648 /dev/zero | tr '\0' 'a' > "$T/b/big.txt"
echo '{"custom_id":"big","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"documents":["big.txt"]}}' \
  > "$T/b/big.jsonl"
TIMEV=()
[ -x /usr/bin/time ] && TIMEV=(/usr/bin/time -v -o "$T/big.time")
set +e
"${TIMEV[@]}" "$LH" run "$T/b/big.jsonl" --model "$MODEL" --out "$T/o4" --progress none > "$T/o4.log" 2>&1
set -e
json 'import sys
l = json.loads(open(sys.argv[1]).readline())
assert l["response"]["status_code"] == 400 and l["error"]["code"] == "context_length_exceeded", l
m = l["error"]["message"]
assert "refused while reading them" in m and "big.txt" in m and "1048576" in m, m
' "$T/o4/output.jsonl"
if [ -s "$T/big.time" ]; then
  kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$T/big.time")
  echo "run over 48 MiB of one character: peak RSS $((kb / 1024)) MB"
  [ "$kb" -lt 1048576 ] || fail "peak RSS $((kb / 1024)) MB refusing documents over the context (limit 1024 MB)"
fi
# --out and --db inside the document folder
mkdir -p "$T/w/src" "$T/w/state" && printf 'int main(void) { return 0; }\n' > "$T/w/src/main.c"
echo '{"custom_id":"self","url":"/v1/completions","body":{"prompt":"Q:","max_tokens":2,"temperature":0,"documents":["."]}}' \
  > "$T/w/batch.jsonl"
for i in 1 2; do
  "$LH" run "$T/w/batch.jsonl" --model "$MODEL" --out "$T/w/out" --db "$T/w/state/store.db" --force --progress none \
    > "$T/w$i.log" 2>&1 || { cat "$T/w$i.log"; fail "run $i over a folder holding its own output"; }
  cp "$T/w/out/jobs/self/manifest.jsonl" "$T/w$i.manifest"
  cp "$T/w/out/output.jsonl" "$T/w$i.output"
done
json 'import sys
for m in sys.argv[1:3]:
    ents = {e["path"]: e for e in map(json.loads, open(m))}
    assert ents["out/"]["reason"] == "excluded" and ents["state/store.db"]["reason"] == "excluded", sorted(ents)
    assert not [p for p in ents if p.startswith("out/") and p != "out/"], sorted(ents)
    assert ents["src/main.c"]["status"] == "ok", ents["src/main.c"]
    assert ents["batch.jsonl"]["status"] == "ok"
u = [json.loads(open(o).readline())["response"]["body"]["usage"]["prompt_tokens"] for o in sys.argv[3:5]]
assert u[0] == u[1], u
' "$T/w1.manifest" "$T/w2.manifest" "$T/w1.output" "$T/w2.output"
# and without --force the rerun finds its job done: the job's identity does not read out/ either
"$LH" run "$T/w/batch.jsonl" --model "$MODEL" --out "$T/w/out" --db "$T/w/state/store.db" --progress none \
  > "$T/w3.log" 2>&1 || { cat "$T/w3.log"; fail "run 3 over a folder holding its own output"; }
grep -q ' 1 already done' "$T/w3.log" || { cat "$T/w3.log"; fail "a rerun into an --out inside the document folder redid its job"; }
cmp -s "$T/w/out/output.jsonl" "$T/w2.output" || fail "the rerun changed output.jsonl"
echo "run_documents: ok"
