"""Where a model loses held-out facts at long lengths: the softmax layer's far keys, or the
lightning layers' long state? (Session 19; models/haul-tiny/TRAINING.md, "Session 19".)

Held-out grammar facts (eval.py's generator: the heldout corpus split and families) are planted
right before the question (depth 1.0), at several haystack lengths, and scored teacher-forced (the
whole answer's argmax, eval.score) twice: with every key visible to the softmax layers, and with
them limited to the last W tokens (transformers' `sliding_window` on MiniMax's full-attention
layers; the lightning layers are untouched). In haul-tiny the softmax layer is the last, so the
window changes only what it reads. If the windowed score at a long length returns to the short
lengths' level, the far keys' competition for the softmax layer's attention is what loses facts
that sit next to the question; if not, the long lightning state is.

With --topk K1,K2,... the answer positions' queries of the softmax layers read only their K
highest-logit keys instead (the last TOPK_ROWS queries of each sample are recomputed so): if
windowing helps and top-K does not, the far keys that win are the best of many competitors,
whose logits beat the fact's outright, not a spread of attention over many keys.

    python tools/train_tiny/diag_window.py --model models/haul-tiny --corpus .dev/train/corpus \
        --lengths 1024,8192,32768 --window 1024 --n 12
    python tools/train_tiny/diag_window.py ... --lengths 1024,32768 --topk 16,64,256

On 2 CPU cores: about 15 minutes (a windowed 32K pass is slow: SDPA with an explicit mask).
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import eval as E  # noqa: E402
import model as M  # noqa: E402

TOPK_ROWS = 128   # queries recomputed with top-K keys: each sample's answer must lie within them


def topk_attention(inner, topk):
    """An sdpa-style attention function whose last TOPK_ROWS queries read only their topk[0] best
    keys (causal); topk[0] None: inner unchanged."""
    from transformers.integrations.sdpa_attention import repeat_kv

    def attention(module, query, key, value, attention_mask, scaling=None, **kw):
        out, w = inner(module, query, key, value, attention_mask, scaling=scaling, **kw)
        if topk[0] is None:
            return out, w
        k, v = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
        n, r = k.shape[2], min(TOPK_ROWS, query.shape[2])
        lg = (query[:, :, -r:, :].float() @ k.float().transpose(-1, -2)) * scaling   # [b, h, r, n]
        lg = lg.masked_fill(torch.arange(n)[None, :] > torch.arange(n - r, n)[:, None], float("-inf"))
        lg = lg.masked_fill(lg < lg.topk(min(topk[0], n), dim=-1).values[..., -1:], float("-inf"))
        out = out.clone()
        out[:, -r:] = (torch.softmax(lg, -1) @ v.float()).transpose(1, 2).to(out.dtype)
        return out, w
    return attention


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lengths", default="1024,8192,32768")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--n", type=int, default=12, help="facts per length")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--topk", default="", help="K1,K2,...: top-K keys at the answer instead of the window")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    torch.set_num_threads(args.threads)
    E._sdpa_without_gqa_flag()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    gen = data.Generator(tok, data.Corpus(args.corpus, "heldout"), held_out=True)
    gen.version = 6
    m = M.load_hf(args.model)
    topk = [None]
    if args.topk:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.models.minimax import modeling_minimax
        # inside the length scaling, as load_hf's own sdpa function is
        modeling_minimax.ALL_ATTENTION_FUNCTIONS["sdpa"] = M._length_scaled(topk_attention(sdpa_attention_forward, topk))
    variants = [("all keys", None, None)] + (
        [(f"top {k}", None, int(k)) for k in args.topk.split(",")] if args.topk
        else [(f"last {args.window}", args.window, None)])
    for length in (int(x) for x in args.lengths.split(",")):
        samples = [gen.sample(np.random.default_rng([args.seed, length, t]), "fact", length, depth=1.0,
                              layout="inturn") for t in range(args.n)]
        if args.topk:
            assert all(len(s["ids"]) - s["answer_start"] < TOPK_ROWS - 2 for s in samples)
        row = []
        for name, w, k in variants:
            m.config.sliding_window, topk[0] = w, k
            t0 = time.time()
            ok = sum(int(E.score(m, [s], "cpu")[0][0]) for s in samples)
            row.append(f"{name}: {ok}/{args.n} ({time.time() - t0:.0f} s)")
        print(f"{length:>7} tokens  " + "   ".join(row), flush=True)


if __name__ == "__main__":
    main()
