#!/usr/bin/env python3
"""Build examples/niah/haystack.tar.xz, `longhaul niah`'s built-in haystack, from the held-out split
of the embedded model's training corpus (tools/train_tiny/corpus.py writes heldout.jsonl.xz: real
C headers and prose documentation from a Debian system, never used in training). Each document
becomes one file in the tarball, in corpus order, so ingest frames it exactly as the runner would.

Usage: python3 tools/make_niah_haystack.py CORPUS_DIR/heldout.jsonl.xz examples/niah/haystack.tar.xz
"""
import io
import json
import lzma
import sys
import tarfile


def main(src, dst):
    with lzma.open(src, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    with tarfile.open(dst, "w:xz", format=tarfile.PAX_FORMAT) as tar:
        for i, d in enumerate(docs):
            data = d["text"].encode("utf-8")
            info = tarfile.TarInfo(f"{i:04d}-{d['kind']}/{d['path']}")
            info.size = len(data)
            info.mtime = 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    print(f"{dst}: {len(docs)} documents, {sum(len(d['text']) for d in docs)} characters", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
