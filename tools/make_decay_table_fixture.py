#!/usr/bin/env python3
"""Build tests/fixtures/engine/orig_decay_tables_block64: an original-form (minimax_text_01) model
folder that also holds the lightning decay tables transformers' save_pretrained writes, made with
block length 64 while the form implies 256 (block_size is absent: the original code's BLOCK).

Usage: python tools/make_decay_table_fixture.py [ENGINE_FIXTURES_DIR]   (default tests/fixtures/engine)
Needs numpy and safetensors only (pip install numpy safetensors). The output is bit-for-bit
reproducible.

It starts from orig_partial_rotary_gqa1 (made by tools/make_engine_fixtures.py) and adds, for each
lightning layer, the buffers transformers' MiniMaxLightningAttention registers, computed as its
decay_factors does, in float32, with block_size 64:

    slope_rate      [H, 1, 1]      the layer's slopes (the base fixture's meta.json: the values the
                                   reference computed with, the original code's slopes)
    query_decay     [H, 64, 1]     exp(-slope * (j + 1))
    key_decay       [H, 64, 1]     exp(-slope * (64 - (j + 1)))
    diagonal_decay  [1, H, 64, 64] exp(-slope * (i - j)) where i >= j, exp(-inf) = 0 above

The tables are derived data and the slopes are the base's, so the model computes the same function:
ids.txt, logits.f32 and greedy.txt are the base's reference files, copied.
"""

import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

BASE = "orig_partial_rotary_gqa1"
NAME = "orig_decay_tables_block64"
BLOCK = 64


def decay_tables(slope, block):
    """transformers' MiniMaxLightningAttention.decay_factors in float32 for slope [H, 1, 1]."""
    r = (np.arange(block, dtype=np.int64) + 1).astype(np.float32)
    query = np.exp(-slope * r[:, None])
    key = np.exp(-slope * (np.float32(block) - r[:, None]))
    d = (r[:, None] - r[None, :])[None, None, :, :]
    d = slope[None] * d  # [1, H, B, B]
    d = np.where(d >= 0, -d, np.float32(-np.inf)).astype(np.float32)
    with np.errstate(over="ignore"):
        diag = np.exp(d)
    return query.astype(np.float32), key.astype(np.float32), diag.astype(np.float32)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/engine"
    base, out = os.path.join(root, BASE), os.path.join(root, NAME)
    os.makedirs(out, exist_ok=True)
    meta = json.load(open(os.path.join(base, "meta.json")))
    cfg = json.load(open(os.path.join(base, "config.json")))
    assert cfg["model_type"] == "minimax_text_01" and "block_size" not in cfg
    tensors = load_file(os.path.join(base, "model.safetensors"))
    H = cfg["num_attention_heads"]
    for layer, slopes in sorted(meta["lightning_slopes"].items(), key=lambda kv: int(kv[0])):
        s = np.array(slopes, dtype=np.float32).reshape(H, 1, 1)
        q, k, d = decay_tables(s, BLOCK)
        p = f"model.layers.{layer}.self_attn."
        tensors[p + "slope_rate"] = s
        tensors[p + "query_decay"] = q
        tensors[p + "key_decay"] = k
        tensors[p + "diagonal_decay"] = d
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "ids.txt", "greedy.txt", "logits.f32"):
        shutil.copyfile(os.path.join(base, f), os.path.join(out, f))
    meta["name"] = NAME
    meta["covers"] = [
        f"the {BASE} model plus transformers-style lightning buffers (slope_rate, query_decay, key_decay, "
        f"diagonal_decay) made with block length {BLOCK} where the original form implies 256",
        "the tables are derived data: checked against the slopes at their own block length, then ignored",
    ] + meta["covers"]
    meta["derived_from"] = BASE
    meta["decay_tables_block"] = BLOCK
    meta["reference"] = f"{BASE}'s reference files (the same function): " + meta["reference"]
    meta["script"] = "tools/make_decay_table_fixture.py (from tools/make_engine_fixtures.py's " + BASE + ")"
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
