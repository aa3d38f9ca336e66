#!/usr/bin/env python3
"""Average the weights of model folders of one lineage (checkpoint averaging), into a new folder.

    python tools/train_tiny/average.py [--weights W_A,W_B,...] OUT MODEL_A MODEL_B [MODEL_C ...]

Each MODEL is a folder written by train.py's export (config.json, hf_config.json,
generation_config.json, tokenizer files, model.safetensors in bf16), or a model.safetensors[.xz]
file beside which the first folder's other files are taken. Every tensor of OUT is the mean of the
models' tensors, computed in fp32 and rounded to bf16 (round to nearest even, as torch's .to()).
The configs must agree (same architecture); OUT's non-weight files are copied from MODEL_A.
--weights gives a weighted mean instead (one weight per model, normalised to sum to 1).

Why (models/haul-tiny/TRAINING.md, "Session 16"): step 12700 (data version 11) answers more
held-out facts and fails the demo's "set to" question; step 13379 (12700 + 679 steps of version 12)
answers the demo and fewer held-out facts. Their mean answers both. Averaging weights of one run's
checkpoints keeps what each learned where their losses share a basin (they share 12700 steps).
"""
import json
import lzma
import os
import shutil
import sys

import torch
from safetensors.torch import load, save_file

COPIED = ("config.json", "hf_config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")


def weights_of(src):
    path = src if os.path.isfile(src) else os.path.join(src, "model.safetensors")
    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        path += ".xz"
    with (lzma.open(path) if path.endswith(".xz") else open(path, "rb")) as f:
        return load(f.read())


def main():
    args = sys.argv[1:]
    weights = None
    if args[:1] == ["--weights"]:
        weights = [float(w) for w in args[1].split(",")]
        args = args[2:]
    if len(args) < 3:
        sys.exit(__doc__.strip().split("\n\n")[1])
    out, srcs = args[0], args[1:]
    weights = weights or [1.0] * len(srcs)
    if len(weights) != len(srcs) or min(weights) < 0 or sum(weights) <= 0:
        sys.exit(f"average.py: --weights needs {len(srcs)} non-negative weights, not all zero")
    weights = [w / sum(weights) for w in weights]
    base = srcs[0] if os.path.isdir(srcs[0]) else os.path.dirname(srcs[0])
    for s in srcs[1:]:
        d = s if os.path.isdir(s) else os.path.dirname(s)
        for fn in ("config.json", "hf_config.json"):
            a, b = os.path.join(base, fn), os.path.join(d, fn)
            if os.path.exists(a) and os.path.exists(b) and json.load(open(a)) != json.load(open(b)):
                sys.exit(f"average.py: {b} differs from {a}: not one architecture")
    models = [weights_of(s) for s in srcs]
    names = set(models[0])
    for s, m in zip(srcs[1:], models[1:]):
        if set(m) != names:
            sys.exit(f"average.py: {s} has other tensors than {srcs[0]}: {sorted(set(m) ^ names)[:5]}")
    mean = {}
    for n in sorted(names):
        shapes = {tuple(m[n].shape) for m in models}
        if len(shapes) != 1:
            sys.exit(f"average.py: tensor {n} has shapes {sorted(shapes)}")
        acc = sum(w * m[n].float() for w, m in zip(weights, models))
        mean[n] = acc.to(models[0][n].dtype).contiguous()
    os.makedirs(out, exist_ok=True)
    for fn in COPIED:
        if os.path.exists(os.path.join(base, fn)):
            shutil.copy(os.path.join(base, fn), os.path.join(out, fn))
    save_file(mean, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    print(f"average.py: {len(mean)} tensors, mean of {len(srcs)} models (weights "
          f"{', '.join(f'{w:.3f}' for w in weights)}) -> {out}/model.safetensors")


if __name__ == "__main__":
    main()
