"""Does single-needle retrieval degrade when every position is shifted far out (RoPE's angle is
formed in fp32, so its rounding grows with position), and does forming the angles in fp64 change
it? The HF model of models/haul-tiny on the CPU, held-out filler and keys, one-pass greedy exact
match (eval.py's score). Environment: LEN (tokens, 4096), TRIALS per depth (1), OFFS (offsets),
T (threads). Measured 2026-12-01 (TRAINING.md, "How to continue"): 22/22 at 4K for offsets 0,
1M and 4M, fp32 and fp64 angles alike.

    T=2 LEN=4096 TRIALS=2 OFFS=0,1048576,4194304 /work/pyenv/bin/python tools/train_tiny/rope_offset.py
"""
import os
import sys
import time
import numpy as np
import torch
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, here)
import data  # noqa: E402
import model as M  # noqa: E402
from tokenizers import Tokenizer
torch.set_num_threads(int(os.environ.get("T", "2")))
m = M.load_hf(os.path.join(root, "models/haul-tiny")).float().eval()
tok = Tokenizer.from_file(os.path.join(root, "models/haul-tiny/tokenizer.json"))
gen = data.Generator(tok, data.Corpus(os.environ.get("CORPUS", os.path.join(root, ".dev/train/corpus")), "heldout"), held_out=True)
L = int(os.environ.get("LEN", "4096")); trials = int(os.environ.get("TRIALS", "1"))
samples = []
for t in range(trials):
    for i, d in enumerate(np.linspace(0, 1, 11)):
        samples.append(gen.sample(np.random.default_rng([4242, t, i]), "magic", L, depth=float(d), layout="inturn"))
rot = m.model.rotary_emb
orig_forward = rot.forward
def exact_forward(x, position_ids):
    inv = rot.inv_freq.double()
    f = position_ids.double()[..., None] * inv[None, None, :]
    emb = torch.cat((f, f), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)
@torch.no_grad()
def run(offset, exact):
    rot.forward = exact_forward if exact else orig_forward
    ok = 0; bad = []
    for s in samples:
        ids = torch.tensor([s["ids"]])
        pos = torch.arange(ids.shape[1])[None] + offset
        h = m.model(input_ids=ids, position_ids=pos).last_hidden_state
        a, e = s["answer_start"], s["answer_end"]
        pred = m.lm_head(h[0, a - 1: e - 1]).argmax(-1).tolist()
        good = pred == s["ids"][a:e]
        ok += good
        if not good: bad.append(tok.decode(pred))
    return ok, bad
for offset in [int(x) for x in os.environ.get("OFFS", "0,262144,524288,1048576,2097152").split(",")]:
    for exact in (0, 1):
        t0 = time.time(); ok, bad = run(offset, exact)
        print(f"offset {offset:>8} angles {'fp64' if exact else 'fp32'}: {ok}/{len(samples)}  {time.time()-t0:.0f}s  misses {bad[:4]}", flush=True)
