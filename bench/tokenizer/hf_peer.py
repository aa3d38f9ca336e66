#!/usr/bin/env python3
"""hf_peer.py TOKENIZER FILE — the peer for bench_tokenizer: HF tokenizers on one thread.

Prints one JSON line: HF's throughput encoding FILE (decoded with errors="replace", as longhaul
reads it) in one encode() call, and in 64 KB pieces cut at newlines through encode_batch (HF's
best single-thread case), plus the SHA-256 of the single-call ids as little-endian int32, which
bench_tokenizer compares with its own.
"""
import hashlib
import json
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import Tokenizer  # noqa: E402

tok = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], "rb").read().decode("utf-8", "replace")
nbytes = len(open(sys.argv[2], "rb").read())
t = time.perf_counter()
ids = tok.encode(text, add_special_tokens=False).ids
single = time.perf_counter() - t
import array  # noqa: E402
digest = hashlib.sha256(array.array("i", ids).tobytes()).hexdigest()
del ids
chunks, cur, n = [], [], 0
for line in text.splitlines(keepends=True):
    cur.append(line)
    n += len(line)
    if n >= 65536:
        chunks.append("".join(cur))
        cur, n = [], 0
chunks.append("".join(cur))
t = time.perf_counter()
tok.encode_batch(chunks, add_special_tokens=False)
batch = time.perf_counter() - t
print(json.dumps({"version": __import__("tokenizers").__version__, "bytes": nbytes, "single_s": single,
                  "batch_s": batch, "ids_sha256": digest}))
