#!/usr/bin/env bash
# cli_usage.sh — what a user meets at the command line, on the real binary:
#   - a misspelt command or option gets one line with the nearest spelling and "see ... --help",
#     not the whole help; store's subcommands and options likewise;
#   - status --json: documented fields; a finished request of a group (a fork of the shared
#     prefix, with no checkpoint of its own) shows all its prompt tokens done, and an interrupted
#     group shows the shared prefix's progress for each of its requests;
#   - status, results and store ls|verify|gc take --out DIR as well as --db FILE; a folder of
#     shard runs: status and results read every shard's store, store asks which one; results of a
#     custom_id in several stores is the job a run changed last (and status --out does not take an
#     older one for a run that kept its store elsewhere);
#   - --device gpu is cuda (or says how this build lacks CUDA); an HF repo id as --model is told
#     that nothing is downloaded and how to fetch the folder; model info exits 2 for a --model that
#     is missing, not a folder or has no config.json, as run does;
#   - a batch that is a folder or is missing exits 2 and creates no --out; so does an --out that is
#     a file, lies under one, or is a symbolic link to nothing, naming it;
#   - a FIFO, a folder or a device named as the batch, --defaults, --ids, --families or
#     --template-file is refused at once, naming the flag, the path and what it is.
#   - a --db that is one of the files the run writes in OUT exits 2 before anything runs; a run
#     refused for its --db leaves no output folder it made, and one waiting for its lock runs;
#   - results shows a custom_id (the one asked for, and in a stored error) with its control bytes
#     escaped, so a hostile batch cannot drive the terminal through it;
#   - started with standard error (or output) closed, a run writes its log into none of its files
#     (the lock took number 2 and held the progress lines); with standard input closed, `run -`
#     says it cannot read it.
. "$(dirname "$0")/../jobs/lib.sh"
make_repo
mkdir -p "$T/repo2" && printf 'The build cache lives in /var/cache/longhaul.\n' > "$T/repo2/notes.md"
tar -C "$T/repo2" -czf "$T/repo2.tar.gz" .
run() { # expected rc, name, command...: output (stdout and stderr) in $T/name.out
  local want=$1 name=$2; shift 2
  set +e
  "$@" > "$T/$name.out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = "$want" ] || { cat "$T/$name.out"; fail "$name: exit status $rc, expected $want"; }
}
says() { grep -qF -- "$2" "$T/$1.out" || { cat "$T/$1.out"; fail "$1: expected '$2'"; }; }
lines() { [ "$(wc -l < "$T/$1.out")" = "$2" ] || { cat "$T/$1.out"; fail "$1: $(wc -l < "$T/$1.out") lines, expected $2"; }; }

# ---- misspellings: one line and where to read more ----
run 2 cmd "$LH" stauts --out "$T"
says cmd "longhaul: unknown command 'stauts'; did you mean 'status'?"
says cmd "see longhaul --help"
lines cmd 2
run 2 cmd2 "$LH" frobnicate
says cmd2 "longhaul: unknown command 'frobnicate'"
grep -q "did you mean" "$T/cmd2.out" && fail "a suggestion for a word near no command"
lines cmd2 2
run 2 opt "$LH" status --jsno --out "$T"
says opt "longhaul status: unknown option --jsno; did you mean --json?"
says opt "see longhaul status --help"
lines opt 2
run 2 opt2 "$LH" results q1 --dbb x.db
says opt2 "unknown option --dbb; did you mean --db?"
lines opt2 2
run 2 opt3 "$LH" status --out
says opt3 "option --out needs a value"
run 2 st1 "$LH" store verfy --db x.db
says st1 "unknown subcommand 'verfy'; did you mean 'verify'?"
lines st1 2
run 2 st2 "$LH" store ls --jbos --db x.db
says st2 "longhaul store ls: unknown option --jbos; did you mean --jobs?"
lines st2 2
run 2 st3 "$LH" store ls --repair --db x.db
says st3 "option --repair belongs to \`longhaul store verify\`"

# ---- a run: a group of two over one archive, one alone, a plain completion ----
req() { # id, archives...
  python3 -c 'import json,sys
print(json.dumps({"custom_id":sys.argv[1],"method":"POST","url":"/v1/chat/completions",
  "body":{"messages":[{"role":"user","content":"Where is it?"}],"max_tokens":4,"temperature":0,
  "documents":sys.argv[2:]}}))' "$@"; }
{ req q1 repo.tar.gz; req q2 repo.tar.gz; req n1 repo2.tar.gz; req n2 repo2.tar.gz repo2.tar.gz
  echo '{"custom_id":"c1","method":"POST","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":3,"temperature":0}}'
} > "$T/batch.jsonl"
run 0 r1 "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --chunk 256 --progress none
run 0 s1 "$LH" status --out "$T/out" --json
json '
import sys, re
d = json.load(open(sys.argv[1]))
assert d["stores"] == [sys.argv[2] + "/longhaul.db"], d["stores"]
assert d["counts"] == {"queued": 0, "running": 0, "done": 5, "failed": 0}, d["counts"]
jobs = {j["custom_id"]: j for j in d["jobs"]}
assert set(jobs) == {"q1", "q2", "n1", "n2", "c1"}
for j in jobs.values():
    assert j["state"] == "done" and j["store"] == d["stores"][0]
    assert j["tokens_total"] > 0 and j["tokens_done"] == j["tokens_total"], j   # a fork included
    assert 1 <= j["completion_tokens"] <= 4, j
    for k in ("created", "started", "finished"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", j[k]), j
    assert "error" not in j and "owner" not in j
assert jobs["q2"]["tokens_total"] > 1000   # the archive: q2 is the fork of q1s prefix
' "$T/s1.out" "$T/out"
run 0 s2 "$LH" status --out "$T/out"
python3 - "$T/s2.out" <<'PY' || fail "status table: tokens_done of a finished job"
import sys
rows = [l.split() for l in open(sys.argv[1]) if l[:1].isdigit() and " jobs: " not in l]
assert len(rows) == 5 and all(r[2] == "done" and r[3] == r[4] != "0" for r in rows), rows
PY
run 0 s3 "$LH" status --db "$T/out/longhaul.db" --json
cmp "$T/s1.out" "$T/s3.out" > /dev/null || { diff "$T/s1.out" "$T/s3.out" | head; fail "status --db and --out differ"; }
run 0 res "$LH" results q2 --out "$T/out"
json 'import sys; assert json.load(open(sys.argv[1]))["custom_id"] == "q2"' "$T/res.out"
for sub in "ls --json" "verify --json" "gc --keep-last 1 --dry-run --json"; do
  run 0 a "$LH" store $sub --out "$T/out"
  run 0 b "$LH" store $sub --db "$T/out/longhaul.db"
  python3 - "$T/a.out" "$T/b.out" <<'PY' || fail "store $sub: --out and --db disagree"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for d in (a, b):
    d.pop("seconds", None)
assert a == b, (a, b)
PY
done

# ---- shards in one folder ----
for s in 0 1; do run 0 sh$s "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/sh" --chunk 256 --shard $s/2 --progress none; done
run 0 ss "$LH" status --out "$T/sh" --json
json '
import sys
d = json.load(open(sys.argv[1]))
assert [s.rsplit("/", 1)[1] for s in d["stores"]] == ["longhaul-shard-0-of-2.db", "longhaul-shard-1-of-2.db"], d["stores"]
assert sorted(j["custom_id"] for j in d["jobs"]) == ["c1", "n1", "n2", "q1", "q2"], d["jobs"]
assert d["counts"]["done"] == 5
# each job is reported from the store of the shard that ran it (its output-I-of-2.jsonl has it);
# which shard a group goes to hashes the paths of its documents, so the split differs by run
for j in d["jobs"]:
    i = j["store"].rsplit("-of-", 1)[0][-1]
    ids = [json.loads(l)["custom_id"] for l in open(f"{sys.argv[2]}/output-{i}-of-2.jsonl")]
    assert j["custom_id"] in ids, (j["custom_id"], j["store"], ids)
' "$T/ss.out" "$T/sh"
for id in q1 n1 n2 c1; do
  run 0 rs "$LH" results $id --out "$T/sh"
  json 'import sys; assert json.load(open(sys.argv[1]))["custom_id"] == sys.argv[2]' "$T/rs.out" $id
done
run 2 sls "$LH" store ls --out "$T/sh"
says sls "holds 2 stores (one per shard)"
says sls "name one with --db FILE"
# a whole run into the same folder after the shards: results gives its answers, the ones its
# output.jsonl holds, not the shards' older ones (the stores were taken in their order, shards last)
run 0 whole "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/sh" --chunk 256 --progress none
for id in q1 c1; do
  "$LH" results $id --out "$T/sh" > "$T/rw.json" 2> "$T/rw.err" || { cat "$T/rw.err"; fail "results $id after a whole run"; }
  grep -qF "2 jobs are called '$id'; this is the one a run changed last, in $T/sh/longhaul.db" "$T/rw.err" \
    || { cat "$T/rw.err"; fail "results $id: not the whole run's job"; }
  json 'import sys; assert json.load(open(sys.argv[1]))["custom_id"] == sys.argv[2]' "$T/rw.json" $id
done
# the whole run's jobs are the ones it wrote out: status does not take the shards' older ones
# for a run that kept its store elsewhere
run 0 sw "$LH" status --out "$T/sh"
grep -q "warning" "$T/sw.out" && { cat "$T/sw.out"; fail "status after a whole run over shards warned"; }

# ---- an interrupted group: each request shows the shared prefix's progress ----
python3 -c 'import json
for i in (1, 2):
    print(json.dumps({"custom_id": f"g{i}", "method": "POST", "url": "/v1/chat/completions",
      "body": {"messages": [{"role": "user", "content": f"Question {i}?"}], "max_tokens": 2, "temperature": 0,
               "documents": ["repo.tar.gz"] * 30}}))' > "$T/long.jsonl"
"$LH" run "$T/long.jsonl" --model "$MODEL" --out "$T/int" --chunk 256 --progress none > "$T/int.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do [ "$(checkpoints "$T/int")" -ge 2 ] && break; sleep 0.05; done
kill -INT $pid
set +e; wait $pid; rc=$?; set -e
[ $rc = 130 ] || { cat "$T/int.log"; fail "the interrupted run exited $rc"; }
run 0 si "$LH" status --out "$T/int" --json
json '
import sys
jobs = {j["custom_id"]: j for j in json.load(open(sys.argv[1]))["jobs"]}
g1, g2 = jobs["g1"], jobs["g2"]
assert g1["state"] == g2["state"] == "queued", (g1, g2)
assert 0 < g1["tokens_done"] < g1["tokens_total"], g1
assert g2["tokens_done"] == g1["tokens_done"], (g1, g2)   # the shared prefix is g2s too
' "$T/si.out"

# ---- devices and model folders ----
run 2 dev "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/dev" --device gpu --progress none
if grep -q "built without CUDA" "$T/dev.out"; then
  says dev "this longhaul was built without CUDA ("
  says dev "; use --device cpu or "
else
  grep -q "unknown device" "$T/dev.out" && fail "--device gpu is not taken for cuda"
fi
run 2 hf "$LH" model info --model MiniMaxAI/MiniMax-Text-01
says hf "huggingface-cli download MiniMaxAI/MiniMax-Text-01 --local-dir DIR"
says hf "downloads nothing"
run 2 hf2 "$LH" run "$T/batch.jsonl" --model MiniMaxAI/MiniMax-Text-01 --out "$T/hf" --progress none
says hf2 "huggingface-cli download MiniMaxAI/MiniMax-Text-01 --local-dir DIR"
# a model that is not there, or a backend this build lacks, leaves no --out behind
[ ! -e "$T/hf" ] || fail "run with a missing --model created --out"
[ -n "$(grep -l 'built without CUDA' "$T/dev.out")" ] && [ -e "$T/dev" ] && fail "run with an absent backend created --out"
run 2 nomodel "$LH" run "$T/batch.jsonl" --model "$T/no-such-model" --out "$T/nomodel" --progress none
says nomodel "--model: $T/no-such-model: not a model folder"
[ ! -e "$T/nomodel" ] || fail "run with a missing --model created --out"
# model info takes a bad --model as run does: the command's mistake (2; it was 1), named
run 2 nomodel-info "$LH" model info --model "$T/no-such-model"
says nomodel-info "longhaul model info: --model: $T/no-such-model: not a model folder (no such directory)"
mkdir -p "$T/empty-model"
run 2 emptymodel-info "$LH" model info --model "$T/empty-model" --json
says emptymodel-info "longhaul model info: $T/empty-model/config.json: No such file or directory"
# a --model that is there but is not a folder says what it is (it said "no such directory")
mkfifo "$T/model-fifo"
for m in /dev/null:"a character device" "$T/model-fifo":"a FIFO (named pipe)" "$T/batch.jsonl":"a regular file"; do
  run 2 modelkind timeout 20 "$LH" run "$T/batch.jsonl" --model "${m%%:*}" --out "$T/modelkind" --progress none
  says modelkind "--model: ${m%%:*}: not a model folder: it is ${m#*:}, not a directory"
  run 2 modelkind-tok timeout 20 "$LH" tokenize --model "${m%%:*}" < /dev/null
  says modelkind-tok "longhaul tokenize: --model: ${m%%:*}: not a model folder: it is ${m#*:}, not a directory"
  run 2 modelkind-ingest timeout 20 "$LH" ingest --model "${m%%:*}" --out "$T/modelkind" "$T/repo"
  says modelkind-ingest "longhaul ingest: --model: ${m%%:*}: not a model folder: it is ${m#*:}, not a directory"
  run 2 modelkind-info timeout 20 "$LH" model info --model "${m%%:*}"
  says modelkind-info "longhaul model info: --model: ${m%%:*}: not a model folder: it is ${m#*:}, not a directory"
done
[ ! -e "$T/modelkind" ] || fail "a --model that is not a folder left an output folder"
# a batch that is a folder is the command's mistake (2), not the machine's (75), and leaves no --out
run 2 batchdir "$LH" run "$T/repo" --model "$MODEL" --out "$T/batchdir" --progress none
says batchdir "$T/repo is a folder; a batch is a JSONL file"
[ ! -e "$T/batchdir" ] || fail "run with a folder for its batch created --out"
run 2 nobatch "$LH" run "$T/no-such.jsonl" --model "$MODEL" --out "$T/nobatch" --progress none
[ ! -e "$T/nobatch" ] || fail "run with a missing batch created --out"
# an --out that is a file, lies under a file or is a link to nothing: the command's mistake (2), named
echo not a folder > "$T/outfile"
ln -s "$T/no-such-target" "$T/outlink"
run 2 outfile "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/outfile" --progress none
says outfile "the output folder $T/outfile is a file, not a folder"
run 2 outunder "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/outfile/sub" --progress none
says outunder "the output folder $T/outfile/sub lies under a file"
run 2 outlink "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/outlink" --progress none
says outlink "the output folder $T/outlink is a symbolic link to $T/no-such-target, which does not exist"
# run's options are suggested too
run 2 runopt "$LH" run "$T/batch.jsonl" --modle "$MODEL" --out "$T/x"
says runopt "longhaul run: unknown option --modle; did you mean --model?"
lines runopt 2
# ---- a defaults file's numbers obey their flags' rules, and a bad one names the key and value ----
for kv in '"keep_checkpoints": 1e12' '"keep_checkpoints": -7' '"keep_checkpoints": 2.5' '"chunk": 1e12' \
          '"max_tokens": -1' '"threads": -3' '"checkpoint_every": -1'; do
  echo "{$kv}" > "$T/defaults.json"
  run 2 defaults "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/defaults-out" --defaults "$T/defaults.json"
  key=${kv%%\":*}
  says defaults "key '${key#\"}'"
  says defaults ": expected an integer"
  [ -e "$T/defaults-out" ] && fail "defaults $kv: --out was created although nothing may run"
done
run 2 keepflag "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/x" --keep-checkpoints 99999999999
says keepflag "expected an integer >= -1 and at most 1073741824"
# A defaults file is held to a batch line's rules: a key given twice (the last won), text after the
# object (ignored), a NUL in a string (cut there: "o\u0000/x" ran into o) are refused by name; a
# known key of the wrong type says the type it takes.
printf '{"out":"a","out":"b"}' > "$T/d-dup.json"
printf '{"chunk":256} trailing garbage {' > "$T/d-tail.json"
printf '{"out":"%s/d-nul\\u0000/x"}' "$T" > "$T/d-nul.json"
printf '{"chunk":"big"}' > "$T/d-type.json"
printf '{"chunks":256}' > "$T/d-unknown.json"
for d in dup:"key 'out' is given more than once" tail:"text after the JSON object, at byte 15" \
         nul:"holds a NUL (or \\u0000)" type:"key 'chunk' takes an integer" unknown:"unknown key 'chunks' (known: model,"; do
  run 2 "d-${d%%:*}" "$LH" run "$T/batch.jsonl" --model "$MODEL" --defaults "$T/d-${d%%:*}.json" --out "$T/d-out" --progress none
  says "d-${d%%:*}" "${d#*:}"
done
[ ! -e "$T/d-out" ] && [ ! -e "$T/d-nul" ] || fail "a refused defaults file left an output folder"
# JSON nested past cJSON's 1000 levels says so (it said "not a JSON object" or "not valid JSON"):
# in --defaults, a model folder's config.json, tokenizer.json and generation_config.json, and
# niah --families
python3 -c 'import sys; sys.stdout.write("{\"chunk\": " + "[" * 5000 + "]" * 5000 + "}\n")' > "$T/deep.json"
deep="arrays and objects nest more than 1000 deep (at byte 1009): longhaul reads no deeper"
run 2 deep-defaults "$LH" run "$T/batch.jsonl" --model "$MODEL" --defaults "$T/deep.json" --out "$T/deep-out" --progress none
says deep-defaults "--defaults $T/deep.json: $deep"
for f in config.json tokenizer.json generation_config.json; do
  rm -rf "$T/deepmodel" && mkdir -p "$T/deepmodel"
  for g in "$MODEL"/*; do ln -s "$(cd "$(dirname "$g")" && pwd)/$(basename "$g")" "$T/deepmodel/"; done
  rm "$T/deepmodel/$f" && cp "$T/deep.json" "$T/deepmodel/$f"
  run 2 "deep-$f" "$LH" run "$T/batch.jsonl" --model "$T/deepmodel" --out "$T/deep-out" --progress none
  says "deep-$f" "$T/deepmodel/$f: $deep"
done
run 2 deep-families "$LH" niah --model "$MODEL" --out "$T/deep-out" --families "$T/deep.json" --progress none
says deep-families "$T/deep.json: $deep"
# ---- a file named by path that is a FIFO, a folder or a device is refused by name, never read ----
# (a FIFO as --defaults or as the batch blocked for ever; /dev/zero as the batch read 4 GiB first)
mkfifo "$T/fifo"
for k in fifo:"is a FIFO (named pipe), not a regular file" dir:"is a folder, not a regular file" \
         dev:"is a character device, not a regular file"; do
  case ${k%%:*} in fifo) f="$T/fifo" ;; dir) f="$T/repo" ;; dev) f=/dev/zero ;; esac
  run 2 "nr-defaults-${k%%:*}" timeout 20 "$LH" run "$T/batch.jsonl" --model "$MODEL" --defaults "$f" \
    --out "$T/nr-out" --progress none
  says "nr-defaults-${k%%:*}" "longhaul run: --defaults: $f: ${k#*:}"
  run 2 "nr-ids-${k%%:*}" timeout 20 "$LH" logits --model "$MODEL" --ids "$f" --out "$T/nr-logits"
  says "nr-ids-${k%%:*}" "longhaul logits: --ids: $f: ${k#*:}"
  run 2 "nr-families-${k%%:*}" timeout 20 "$LH" niah --model "$MODEL" --out "$T/nr-out" --families "$f" \
    --lengths 1k --depths 50 --progress none
  says "nr-families-${k%%:*}" "--families: $f: ${k#*:}"
  run 2 "nr-template-${k%%:*}" timeout 20 "$LH" ingest --no-tokens --template-file "$f" --out "$T/nr-out" "$T/repo"
  says "nr-template-${k%%:*}" "--template-file: $f: ${k#*:}"
done
for f in "$T/fifo" /dev/zero /dev/null; do
  run 2 nr-batch timeout 20 "$LH" run "$f" --model "$MODEL" --out "$T/nr-out" --progress none
  says nr-batch "$f: is a"
  says nr-batch "not a regular file; a batch is a JSONL file (to stream one, pipe it to \`longhaul run -\`)"
done
[ ! -e "$T/nr-out" ] && [ ! -e "$T/nr-logits" ] || fail "a refused FIFO, folder or device left an output"
# --shard is two integers and nothing else (sscanf took 1/2x as 1/2 and wrapped 0/4294967298 to 0/2)
for s in 1/2x 0/4294967298 +1/2 " 1/2" 0/1048577; do
  run 2 shardparse "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/shard-out" --shard "$s" --progress none
  says shardparse "--shard $s: expected I/N, two integers with 0 <= I < N <= 1048576"
done
[ ! -e "$T/shard-out" ] || fail "a refused --shard left an output folder"
# a batch file that is one of the files the run writes (kept as OUT/output.jsonl) is refused, not
# replaced by the output; one beside them in OUT runs
mkdir -p "$T/selfout"
cp "$T/batch.jsonl" "$T/selfout/output.jsonl"
run 2 selfout "$LH" run "$T/selfout/output.jsonl" --model "$MODEL" --out "$T/selfout" --progress none
says selfout "the batch file $T/selfout/output.jsonl is $T/selfout/output.jsonl, which the run writes over"
cmp -s "$T/batch.jsonl" "$T/selfout/output.jsonl" || fail "the batch kept as OUT/output.jsonl was changed"
printf '%s\n' '{"custom_id":"c","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":2}}' \
  > "$T/selfout/nightly.jsonl"
run 0 selfin "$LH" run "$T/selfout/nightly.jsonl" --model "$MODEL" --out "$T/selfout" --chunk 256 --progress none
cp "$T/selfout/nightly.jsonl" "$T/selfout/longhaul-nightly.jsonl"   # a name like the run's, not one of them
run 0 selfin2 "$LH" run "$T/selfout/longhaul-nightly.jsonl" --model "$MODEL" --out "$T/selfout" --progress none
cp "$T/selfout/nightly.jsonl" "$T/selfout/errors-0-of-2.jsonl"      # a shard's errors file is one
run 2 selfshard "$LH" run "$T/selfout/errors-0-of-2.jsonl" --model "$MODEL" --out "$T/selfout" --progress none
says selfshard "which the run writes over"
# a --db in a folder that is not there is the command's mistake (2; it was 75, which a systemd unit
# retries for ever), named
run 2 dbdir "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/dbdir" --db "$T/no-such-dir/x.db" --progress none
says dbdir "$T/no-such-dir/x.db: the folder $T/no-such-dir does not exist; make it first"
# a run refused for its --db leaves no output folder it made (nor the folders above it that were
# not there, nor its lock); a folder that was there stays
[ ! -e "$T/dbdir" ] || fail "a run refused for its --db left the output folder it made"
run 2 dbnew "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/dbnew/a//b/" --db "$T/dbnew/a/b/output.jsonl" --progress none
says dbnew "which the run writes over"
[ ! -e "$T/dbnew" ] || fail "a run refused for a --db in OUT left the output folders it made"
mkdir "$T/dbhad"
run 2 dbhad "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/dbhad" --db "$T/no-such-dir/x.db" --progress none
[ -d "$T/dbhad" ] || fail "a run refused for its --db removed an output folder that was there"
# a run waiting (--wait) on the lock of one that is refused and removes the folder it made takes
# the folder afresh: it neither fails in the removed folder nor runs beside a third
printf '%s\n' '{"custom_id":"w","url":"/v1/completions","body":{"prompt":"int main(void) {","max_tokens":2}}' > "$T/one.jsonl"
LH_TEST_STOP_AT=abandon:1 "$LH" run "$T/one.jsonl" --model "$MODEL" --out "$T/dbrace" --db "$T/no-such-dir/x.db" \
  --progress none > "$T/dbrace1.out" 2>&1 &
p1=$!
for _ in $(seq 1 400); do [ "$(ps -o stat= -p $p1 | cut -c1)" = T ] && break; sleep 0.05; done
[ "$(ps -o stat= -p $p1 | cut -c1)" = T ] || { kill $p1; fail "the refused run did not stop at its test point"; }
"$LH" run "$T/one.jsonl" --model "$MODEL" --out "$T/dbrace" --wait --progress none > "$T/dbrace2.out" 2>&1 &
p2=$!
sleep 1
kill -CONT $p1
set +e; wait $p1; r1=$?; wait $p2; r2=$?; set -e
[ $r1 = 2 ] || { cat "$T/dbrace1.out"; fail "dbrace: the refused run exited $r1"; }
[ $r2 = 0 ] && [ -s "$T/dbrace/output.jsonl" ] || { cat "$T/dbrace2.out"; fail "dbrace: the waiting run exited $r2"; }
# a --db that is a file the run writes in OUT (output.jsonl, errors.jsonl, a shard's, the lock, a
# job's folder) would be renamed over at the end of the run, destroying the store: refused (2)
# before anything runs, however it is spelt or linked; OUT/longhaul.db itself and a --db
# elsewhere are fine
mkdir -p "$T/dbout" && ln -s "$T/selfout" "$T/dbout/linked" && ln -s "$T/selfout/output.jsonl" "$T/dbout/link.db"
ln -s "$T/selfout/errors-1-of-2.jsonl" "$T/dbout/dangling.db"
cp "$T/selfout/output.jsonl" "$T/dbout/output.before"
n=0
for db in "$T/selfout/errors.jsonl" "$T/selfout/output.jsonl" "$T/selfout/./errors.jsonl" "$T/dbout/linked/output.jsonl" \
    "$T/dbout/link.db" "$T/dbout/dangling.db" "$T/selfout/output-1-of-2.jsonl" "$T/selfout/longhaul.lock" \
    "$T/selfout/jobs" "$T/selfout/jobs/c/x.db" "$T/selfout/longhaul.db-journal"; do
  n=$((n + 1))
  run 2 dbout$n "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/selfout" --db "$db" --progress none
  says dbout$n "which the run writes over"
  grep -q "requests:" "$T/dbout$n.out" && fail "dbout$n: --db $db ran"
done
run 2 dboutl "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/dbout/linked" --db "$T/selfout/errors.jsonl" --progress none
says dboutl "which the run writes over"
cmp -s "$T/selfout/output.jsonl" "$T/dbout/output.before" || fail "a refused --db changed OUT/output.jsonl"
[ ! -e "$T/selfout/errors-1-of-2.jsonl" ] || fail "a refused --db made a store through a link"
run 0 dbok1 "$LH" run "$T/selfout/nightly.jsonl" --model "$MODEL" --out "$T/selfout" --db "$T/selfout/longhaul.db" --progress none
run 0 dbok2 "$LH" run "$T/selfout/nightly.jsonl" --model "$MODEL" --out "$T/selfout" --db "$T/dbout/elsewhere.db" --progress none
# a custom_id with terminal controls (ESC sequences, BEL, C1's NEL) shows in run's and status's
# tables as '?', never as bytes the terminal obeys (they could repaint or hide rows)
printf '%s\n' '{"custom_id":"esc\u001b[31mRED\u001b[0m\u0007b\u0085ell","url":"/v1/completions","body":{"prompt":"x","max_tokens":2}}' \
  > "$T/esc.jsonl"
run 0 escrun "$LH" run "$T/esc.jsonl" --model "$MODEL" --out "$T/esc" --progress none
run 0 escstatus "$LH" status --out "$T/esc"
for f in escrun escstatus; do
  says $f 'esc?[31mRED?[0m?b?ell'
  LC_ALL=C grep -q "$(printf '[\033\007]')" "$T/$f.out" && fail "$f: a control character reached the terminal"
done
# a chat line refused for want of a chat template counts as a malformed line and exits 1 (it
# was "0 failed", exit 0, with the 400 in output.jsonl)
mkdir -p "$T/notmpl"
for f in "$MODEL"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/notmpl/"; done
rm "$T/notmpl/tokenizer_config.json"
printf '%s\n' '{"custom_id":"a","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}}' \
  > "$T/notmpl.jsonl"
run 1 notmpl "$LH" run "$T/notmpl.jsonl" --model "$T/notmpl" --out "$T/notmpl-out" --progress none
says notmpl "0 failed, 1 malformed line"
# finite weights whose computation overflows (an MLP alpha of 1e308) give NaN logits: the request
# fails naming them (it was answered "" with status 200, and generate printed "0 0 0 0", exit 0)
mkdir -p "$T/overflow"
for f in "$MODEL"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/overflow/"; done
rm "$T/overflow/config.json"
sed 's/"mlp_alpha_factor": 1/"mlp_alpha_factor": 1e308/' "$MODEL/config.json" > "$T/overflow/config.json"
grep -q '"mlp_alpha_factor": 1e308' "$T/overflow/config.json" || fail "the overflowing config was not made"
printf '%s\n' '{"custom_id":"o","url":"/v1/completions","body":{"prompt":"hello","max_tokens":3}}' > "$T/overflow.jsonl"
run 1 overflow "$LH" run "$T/overflow.jsonl" --model "$T/overflow" --out "$T/overflow-out" --progress none
grep -q "are not finite" "$T/overflow-out/errors.jsonl" || { cat "$T/overflow.out"; fail "NaN logits were answered"; }
echo "1 2 3" > "$T/overflow-ids.txt"
run 1 overflow-gen "$LH" generate --model "$T/overflow" --ids "$T/overflow-ids.txt" --max-new 4
says overflow-gen "the logits are not finite"
# output that cannot be written is no success (model info exited 0 into /dev/full; generate exited
# 1 without a word)
if [ -w /dev/full ]; then
  set +e
  "$LH" model info --model "$MODEL" > /dev/full 2> "$T/full.err"
  rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/full.err"; fail "model info into /dev/full exited $rc"; }
  grep -q "longhaul: writing to standard output failed: No space left on device" "$T/full.err" \
    || { cat "$T/full.err"; fail "model info into /dev/full said nothing"; }
fi
# an unknown device is named as --device, not --model
run 2 devname "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/devname" --device tpu --progress none
says devname "longhaul run: --device: unknown device 'tpu'"
# ---- niah: numbers that do not fit are refused by name (exit 2, no --out), never cut or wrapped ----
niah_refuses() { # name, expected text, arguments...
  local name=$1 text=$2; shift 2
  run 2 "niah-$name" "$LH" niah --model "$MODEL" --out "$T/niah-out" --progress none "$@"
  says "niah-$name" "$text"
  [ ! -e "$T/niah-out" ] || fail "niah $name: --out was created although nothing may run"
}
# 64 x 64 x 2^20 trials wrapped an int to 0: the trial table was allocated empty and overrun
niah_refuses trials-product "64 lengths x 64 depths x 1048576 trials is 4294967296 trials; a sweep has at most 65536" \
  --lengths "$(seq -s, 1 64)" --depths 0:63:1 --trials 1048576
niah_refuses needles "--needles 17: a trial has at most 16 needles" --variant multikey --needles 17
# lengths past int64 (1e30, inf) and nan became INT64_MIN ("haystack too short for length
# -9223372036854775808"); a nan depth gave no depths or a fork point of -2^63; a STEP that makes
# more than 64 depths ran the first 64 only (0 to 0.063%)
niah_refuses length-huge "--lengths 1e30: 1e30 is not a length of 1 to 1099511627776 tokens" --lengths 1e30
niah_refuses length-inf "--lengths 1k,inf: expected numbers like" --lengths 1k,inf
niah_refuses length-nan "--lengths nan: expected numbers like" --lengths nan
niah_refuses depth-nan-range "--depths nan:100:10: expected FROM:TO:STEP within 0..100" --depths nan:100:10
niah_refuses depth-nan "--depths 50,nan: expected FROM:TO:STEP or a list of percentages" --depths 50,nan
# an int option past 2^31 was cut silently: --max-tokens 4294967295 ran with -1 (one token, scored 0,
# exit 0), --trials 4294967297 with 1, --chunk 4294967296 with 0
niah_refuses max-tokens "--max-tokens 4294967295: expected an integer >= 1 and at most 1073741824" --max-tokens 4294967295
niah_refuses trials-wrap "--trials 4294967297: expected an integer >= 1 and at most 1073741824" --trials 4294967297
niah_refuses seed-range "--seed 99999999999999999999: expected an integer >= 0 and at most" --seed 99999999999999999999
niah_refuses depth-step "--depths 0:100:0.001: 100001 depths; at most 64" --depths 0:100:0.001
# a length or depth listed twice ran every trial of its cells twice; --needles was ignored for one
# needle's variants and raised to 2 for multiquery without a word; a --needle that is not UTF-8
# went into results.jsonl and results.csv as it was
niah_refuses length-twice "--lengths 1k,1024: 1024 is 1024 tokens, listed already" --lengths 1k,1024
niah_refuses depth-twice "--depths 0,50,50.0: 50.0 is listed already" --depths 0,50,50.0
niah_refuses needles-single "--needles 3: --variant single plants one needle per trial" --needles 3
niah_refuses needles-whichfile "--needles 2: --variant whichfile plants one needle" --variant whichfile --needles 2
niah_refuses needles-multiquery "--needles 1: --variant multiquery asks for two needles' values" \
  --variant multiquery --needles 1
niah_refuses needle-utf8 "--needle is not UTF-8 text" --needle "$(printf 'The \xe9 {key} is {value}.')"
niah_refuses question-utf8 "--question is not UTF-8 text" --question "$(printf 'What is \xff{key}?')"
# templates that make every score the same: --answer "" scored 1.000 (the empty string is in every
# reply), a needle without {value} planted nothing, a question with {value} gave it away
niah_refuses answer-empty "--answer has no {value}: every trial would expect the same text" --answer ""
niah_refuses needle-novalue "--needle has no {value}: it would plant nothing to retrieve" --needle "no placeholders"
niah_refuses question-value "--question has {value}: it would give the answer away" --question "Is it {value}?"
# a haystack of one long line: trials snapped back to the document's first line end (a "1K" trial
# of 50 tokens, scored as 1K); refused, naming the shortfall
python3 -c "import random; random.seed(1); w = 'the of and to in a is that'.split(); print(' '.join(random.choice(w) for _ in range(9000)), end='')" \
  > "$T/oneline.txt"
run 2 niah-oneline "$LH" niah --model "$MODEL" --out "$T/niah-oneline" --progress none --corpus "$T/oneline.txt" \
  --lengths 1k --depths 50
says niah-oneline "the haystack has no line break within"
[ ! -e "$T/niah-oneline/results.jsonl" ] || fail "niah oneline: results were written for trials refused"
# a haystack with no text says why (it said only "has only 0 tokens"): a binary file, text that is
# not UTF-8, a folder with no files
head -c 4096 /dev/urandom | tr -d '\n' | { printf 'x\0'; cat; } > "$T/corpus.bin"
for i in $(seq 200); do printf 'caf\xe9 cr\xe8me br\xfbl\xe9e\n'; done > "$T/corpus-latin1.txt"
mkdir -p "$T/corpus-empty"
for c in bin:"corpus.bin was skipped as binary (NUL byte at offset 1)" \
         latin1:"corpus-latin1.txt was skipped as binary (over 10% of the first" empty:"corpus-empty: no text: the folder is empty"; do
  case ${c%%:*} in bin) f="$T/corpus.bin" ;; latin1) f="$T/corpus-latin1.txt" ;; empty) f="$T/corpus-empty" ;; esac
  run 2 "niah-corpus-${c%%:*}" "$LH" niah --model "$MODEL" --out "$T/niah-corpus" --progress none --corpus "$f" \
    --lengths 1k --depths 50
  says "niah-corpus-${c%%:*}" "haystack $f has only 0 tokens, too few for a haystack (64 at least): "
  says "niah-corpus-${c%%:*}" "${c#*:}"
  says "niah-corpus-${c%%:*}" "give a corpus of UTF-8 text"
done
# a question or an expected answer longer than a trial holds was cut (a cut answer matched more)
run 2 niah-question-long "$LH" niah --model "$MODEL" --out "$T/niah-long" --progress none --lengths 1k --depths 50 \
  --question "$(printf 'x%.0s' $(seq 600)) {key}?"
says niah-question-long "--question renders to"
says niah-question-long "a question has at most 511"
run 2 niah-answer-long "$LH" niah --model "$MODEL" --out "$T/niah-long2" --progress none --lengths 1k --depths 50 \
  --answer "{value}$(printf 'y%.0s' $(seq 300))"
says niah-answer-long "an expected answer has at most 255"
# ---- a tokenizer with ids past config.json's vocab_size: refused at set-up (2), naming both ----
# (it ran, and failed each request whose prompt held such a token with "outside the vocabulary");
# HF numbers an added token that the vocabulary lacks after the last id, 512 here, whatever its "id"
mkdir -p "$T/wrongtok"
for f in "$MODEL"/*; do ln -s "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$T/wrongtok/"; done
rm "$T/wrongtok/tokenizer.json"
python3 - "$MODEL/tokenizer.json" "$T/wrongtok/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"].append({"id": 99999, "content": "<extra_tok>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w"))
PY
printf '%s\n' '{"custom_id": "x", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "a <extra_tok> b"}], "max_tokens": 2}}' > "$T/wrongtok.jsonl"
run 2 wrongtok "$LH" run "$T/wrongtok.jsonl" --model "$T/wrongtok" --out "$T/wrongtok-out" --progress none
says wrongtok "tokenizer.json: token \"<extra_tok>\" has id 512, but the model's vocabulary (config.json's vocab_size) has 512 ids"
# ---- closed standard streams: no file of the run takes their numbers ----
set +e
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/closed" --chunk 256 --progress plain > "$T/closed.out" 2>&-
rc=$?
"$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/closed2" --chunk 256 --progress plain >&- 2>&-
rc2=$?
set -e
[ "$rc" = 0 ] && [ "$rc2" = 0 ] || fail "runs with stderr, or stdout and stderr, closed exited $rc and $rc2"
says closed "5 requests: 5 done"
grep -q '^pid [0-9]* on ' "$T/closed/longhaul.lock" || { cat "$T/closed/longhaul.lock"; fail "the lock holds no pid line"; }
grep -q "longhaul:" "$T/closed/longhaul.lock" && { cat "$T/closed/longhaul.lock"; fail "the progress log went into the lock"; }
[ "$(wc -l < "$T/closed2/output.jsonl")" = 5 ] || fail "output.jsonl of the run with closed streams is not 5 lines"
set +e
"$LH" run - --model "$MODEL" --out "$T/closed-in" --progress none <&- > "$T/closed-in.out" 2>&1
rc=$?
set -e
[ "$rc" = 75 ] || { cat "$T/closed-in.out"; fail "run - with stdin closed exited $rc"; }
says closed-in "-: read error after 0 bytes: Bad file descriptor"
# ---- a custom_id holding terminal escapes (ESC [2J clears the screen) is shown escaped ----
printf '%s\n' '{"custom_id": "\u001b[2Jevil", "url": "/v1/completions", "body": {"prompt": "x", "max_tokens": 2, "documents": ["gone.tar"]}}' > "$T/esc.jsonl"
run 1 esc-run "$LH" run "$T/esc.jsonl" --model "$MODEL" --out "$T/esc" --progress none
run 1 esc-results "$LH" results "$(printf '\033[2Jevil')" --out "$T/esc"
says esc-results "longhaul results: job '\x1b[2Jevil' is failed"
run 1 esc-none "$LH" results "$(printf '\033[2Jnone')" --out "$T/esc"
says esc-none "longhaul results: no job '\x1b[2Jnone' in"
if grep -q "$(printf '\033')" "$T/esc-results.out" "$T/esc-none.out"; then fail "results printed an ESC byte"; fi
echo "cli_usage: suggestions, status --json, --out everywhere, shards, devices, HF ids, defaults: ok"
