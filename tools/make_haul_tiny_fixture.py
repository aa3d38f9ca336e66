#!/usr/bin/env python3
"""HF transformers' forward of the shipped embedded model (models/haul-tiny), as a fixture for
longhaul's CPU engine: tests/fixtures/haul-tiny/.

The reference is transformers 5.17 MiniMaxForCausalLM built from models/haul-tiny/hf_config.json
and model.safetensors by tools/train_tiny/model.load_hf (partial RoPE on the first rotary_dim dims,
the lightning decay buffers recomputed in fp32), fp32 on the CPU, one full-sequence forward with
use_cache=False. The prompt is MiniMax-Text-01's chat format around real text (this repository's
README.md) with a planted needle: long enough (> 2 lightning blocks of 256) to cross block and
chunk boundaries. Written:

  ids.txt          the prompt ids
  positions.txt    the positions whose logits are kept (every 24th and the last 8)
  logits.f32       little-endian float32 [len(positions) x vocab], those rows of the forward
  greedy.txt       16 greedy tokens after the prompt, each from a full forward (no cache)
  meta.json        versions, sizes, the model file's SHA-256

Usage (where torch is installed; the GPU box has it): python3 tools/make_haul_tiny_fixture.py [OUT]
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch
from tokenizers import Tokenizer

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, os.path.join(here, "train_tiny"))
import model as tiny  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "fixtures", "haul-tiny")
os.makedirs(out, exist_ok=True)
mdir = os.path.join(root, "models", "haul-tiny")
torch.set_num_threads(max(1, os.cpu_count() or 1))
torch.manual_seed(0)

tok = Tokenizer.from_file(os.path.join(mdir, "tokenizer.json"))
with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
    readme = f.read()
body = readme[:1500] + "\nThe special magic lighthouse number is: 7305614.\n" + readme[1500:2600]
prompt = ("<beginning_of_sentence>user name=user\n" + body +
          "\nWhat is the special magic lighthouse number?<end_of_sentence>\n<beginning_of_sentence>ai name=assistant\n")
ids = tok.encode(prompt, add_special_tokens=False).ids

m = tiny.load_hf(mdir, dtype=torch.float32, device="cpu")
with torch.no_grad():
    logits = m(torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
T, V = logits.shape
positions = sorted(set(list(range(0, T, 24)) + list(range(T - 8, T))))
greedy, seq = [], list(ids)
with torch.no_grad():
    for _ in range(16):
        nxt = int(m(torch.tensor([seq]), use_cache=False).logits[0, -1].argmax())
        greedy.append(nxt)
        seq.append(nxt)

with open(os.path.join(out, "ids.txt"), "w") as f:
    f.write(" ".join(map(str, ids)) + "\n")
with open(os.path.join(out, "positions.txt"), "w") as f:
    f.write(" ".join(map(str, positions)) + "\n")
logits[positions].astype("<f4").tofile(os.path.join(out, "logits.f32"))
with open(os.path.join(out, "greedy.txt"), "w") as f:
    f.write(" ".join(map(str, greedy)) + "\n")
import transformers  # noqa: E402
import tokenizers  # noqa: E402

with open(os.path.join(mdir, "model.safetensors"), "rb") as f:
    sha = hashlib.sha256(f.read()).hexdigest()
meta = {"tokens": T, "vocab": V, "positions": len(positions), "model_sha256": sha,
        "torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
        "greedy_text": tok.decode(greedy), "logit_std_last": float(np.std(logits[-1]))}
with open(os.path.join(out, "meta.json"), "w") as f:
    json.dump(meta, f, indent=1)
print(json.dumps(meta))
