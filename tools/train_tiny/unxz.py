#!/usr/bin/env python3
"""Decompress FILE.xz to FILE beside it, for each argument, with the standard library alone (the GPU
box may lack the xz tool). Payloads travel xz-compressed when init weights, the training payload,
the NIAH sweep payload and the repository tree would pass the device tool's 64 MiB together
(tools/train_tiny/README.md, session 13). A FILE.xz that is missing is an error naming it; the
decompressed FILE keeps FILE.xz's permission bits, so an executable stays one.

Usage: python3 unxz.py A.xz [B.xz ...]
"""
import lzma
import os
import shutil
import sys

for src in sys.argv[1:]:
    if not src.endswith(".xz"):
        sys.exit(f"unxz.py: {src}: not a .xz file")
    dst = src[:-3]
    if not os.path.isfile(src):
        sys.exit(f"unxz.py: {src}: no such file")
    with lzma.open(src) as fi, open(dst + ".part", "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 20)
    os.chmod(dst + ".part", os.stat(src).st_mode & 0o777)
    os.replace(dst + ".part", dst)
    print(f"unxz.py: {dst} ({os.path.getsize(dst)} bytes)")
