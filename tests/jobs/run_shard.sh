#!/usr/bin/env bash
# run_shard.sh — --shard i/n splits a batch into disjoint, complete parts (each with its own store
# and output file), requests over the same documents stay in one shard, and SIGINT stops a run
# with exit status 130 after which the same command finishes the work.
. "$(dirname "$0")/lib.sh"
make_repo
: > "$T/batch.jsonl"
for i in $(seq 1 12); do
  doc=$([ $((i % 3)) = 0 ] && echo '"documents":["repo.tar.gz"],' || echo '')
  printf '{"custom_id":"r%d","url":"/v1/completions","body":{%s"prompt":"Line %d:","max_tokens":3,"temperature":0}}\n' "$i" "$doc" "$i" >> "$T/batch.jsonl"
done
for s in 0 1 2; do
  "$LH" run "$T/batch.jsonl" --model "$MODEL" --out "$T/out" --shard $s/3 --progress none > /dev/null
done
json '
import sys
parts = [[json.loads(l)["custom_id"] for l in open(p)] for p in sys.argv[1:]]
flat = [c for p in parts for c in p]
assert sorted(flat) == sorted("r%d" % i for i in range(1, 13)), flat   # complete
assert len(flat) == len(set(flat))                                      # disjoint
docs = {"r3", "r6", "r9", "r12"}
assert sum(1 for p in parts if docs & set(p)) == 1, parts                # same documents, same shard
' "$T"/out/output-0-of-3.jsonl "$T"/out/output-1-of-3.jsonl "$T"/out/output-2-of-3.jsonl
ls "$T"/out/longhaul-shard-*-of-3.db > /dev/null
# SIGINT: exit 130, then the same command completes
cat > "$T/long.jsonl" <<'B'
{"custom_id":"s1","url":"/v1/chat/completions","body":{"messages":[{"role":"user","content":"?"}],"max_tokens":4,"temperature":0,"documents":["repo.tar.gz","repo.tar.gz","repo.tar.gz","repo.tar.gz"]}}
B
"$LH" run "$T/long.jsonl" --model "$MODEL" --out "$T/int" --chunk 64 --progress none > "$T/int.log" 2>&1 &
pid=$!
sleep 0.5
kill -INT $pid
set +e
wait $pid
rc=$?
set -e
if [ $rc = 0 ]; then echo "note: the run finished before SIGINT arrived"; else
  [ $rc = 130 ] || { cat "$T/int.log"; fail "SIGINT exit status $rc, expected 130"; }
fi
"$LH" run "$T/long.jsonl" --model "$MODEL" --out "$T/int" --chunk 64 --progress none > "$T/int2.log" 2>&1 \
  || { cat "$T/int2.log"; fail "rerun after SIGINT failed"; }
json 'import sys; l = json.loads(open(sys.argv[1]).readline()); assert l["error"] is None, l' "$T/int/output.jsonl"
echo "run_shard: ok"
