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

    python tools/train_tiny/diag_window.py --model models/haul-tiny --corpus .dev/train/corpus \
        --lengths 1024,8192,32768 --window 1024 --n 12

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--lengths", default="1024,8192,32768")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--n", type=int, default=12, help="facts per length")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from tokenizers import Tokenizer
    torch.set_num_threads(args.threads)
    E._sdpa_without_gqa_flag()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    gen = data.Generator(tok, data.Corpus(args.corpus, "heldout"), held_out=True)
    gen.version = 6
    m = M.load_hf(args.model)
    for length in (int(x) for x in args.lengths.split(",")):
        samples = [gen.sample(np.random.default_rng([args.seed, length, t]), "fact", length, depth=1.0,
                              layout="inturn") for t in range(args.n)]
        row = []
        for w in (None, args.window):
            m.config.sliding_window = w
            t0 = time.time()
            ok = sum(int(E.score(m, [s], "cpu")[0][0]) for s in samples)
            row.append(f"{'all keys' if w is None else f'last {w}'}: {ok}/{args.n} ({time.time() - t0:.0f} s)")
        print(f"{length:>7} tokens  " + "   ".join(row), flush=True)


if __name__ == "__main__":
    main()
