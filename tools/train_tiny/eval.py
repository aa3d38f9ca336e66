"""Evaluate the tiny model through transformers on held-out needles and held-out filler.

These are transformers-side numbers (HF MiniMaxForCausalLM in fp32 from the exported bf16
weights, partial RoPE enabled as in model.py); longhaul's own engine measures the official ones.

Scoring is greedy exact match, computed in one forward pass per sample: the answer is right when
the argmax at every answer position, given the correct earlier answer tokens, is the answer's
next token, through the closing <end_of_sentence>. That is exactly the condition under which
greedy decoding emits the answer and stops, so it equals generate-and-compare, at a fraction of
the cost (and without transformers' cached continuation, which is not exact for MiniMax in 5.17).

Held out: filler from the corpus's held-out split (packages and modules never trained on), keys
from held-out words; suites marked "eval phrasing" also use needle and question phrasings that
never appear in training (data.EVAL_*).

    python tools/train_tiny/eval.py --model models/haul-tiny --corpus .dev/train/corpus [--quick]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as M  # noqa: E402

K = 1024
DEPTHS = [i / 10 for i in range(11)]


# Suites of the grammar's held-out families (heldout_families.json: needle, question, value kind,
# attribute and value words all held out; keys held out as everywhere here). phrasing "heldout"
# is what selects them: data.Generator(held_out=True) draws the grammar tasks from that file.
HELDOUT_SUITES = [
    dict(name="fact_heldout", task="fact", lengths=[1 * K, 4 * K, 16 * K, 64 * K], depths=DEPTHS[::2], trials=4),
    dict(name="fact_heldout_multikey", task="fact_multikey", lengths=[16 * K], trials=12, n_needles=4),
    dict(name="fact_heldout_mv", task="fact_mv", lengths=[16 * K], trials=12, n_needles=3),
    dict(name="fact_heldout_file", task="fact_file", lengths=[16 * K], trials=12),
]
# every suite's index in the sample seeds: the order of the first full set, new suites appended,
# so that a suite draws the same samples whatever set it runs in
SEED_INDEX = ["single", "multikey", "passkey", "single_eval_phrasing", "multivalue", "multiquery",
              "repo_value", "repo_file", "single_128k", "fact_heldout", "fact_heldout_multikey",
              "fact_heldout_mv", "fact_heldout_file", "repo_near"]
# session 12: repository values at 32K and 64K with near-miss constants planted (data version 8's
# repository samples; held-out files and name words): the case step 9336 failed through longhaul at
# 38K (TRAINING.md, session 11) that the 4K-16K repo_value suite did not see
REPO_NEAR = dict(name="repo_near", task="repo_value", lengths=[32 * K, 64 * K], trials=8, version=8)


def suites(quick):
    """quick: True / "quick" (a CPU smoke test), "mid" (a short GPU check), "heldout" (the grammar's
    held-out families and the trained needle 1K-64K: a baseline), "heldout-quick" (a CPU check of
    the held-out suites), else the full set (trained needle, then the held-out families, then the rest)."""
    if quick == "heldout-quick":
        return [dict(s, lengths=[1 * K], trials=2) if s["name"] == "fact_heldout" else dict(s, lengths=[2 * K], trials=3)
                for s in HELDOUT_SUITES]
    if quick == "heldout":
        return suites(False)[:1] + HELDOUT_SUITES + [REPO_NEAR]
    if quick == "mid":
        return [
            dict(name="multikey", task="multikey", lengths=[4 * K, 32 * K], trials=10, n_needles=4),
            dict(name="single", task="magic", lengths=[16 * K, 64 * K], depths=DEPTHS[::2], trials=1),
            dict(name="multiquery", task="multiquery", lengths=[4 * K], trials=8, n_needles=4),
            dict(name="passkey", task="passkey", lengths=[16 * K], trials=6),
        ]
    if quick is True or quick == "quick":
        return [
            dict(name="single", task="magic", lengths=[1 * K, 4 * K], depths=[0.0, 0.5, 1.0], trials=2),
            dict(name="multikey", task="multikey", lengths=[4 * K], trials=4, n_needles=4),
            dict(name="repo_value", task="repo_value", lengths=[2 * K], trials=3),
        ]
    return [
        dict(name="single", task="magic", lengths=[1 * K, 4 * K, 16 * K, 32 * K, 64 * K], depths=DEPTHS, trials=2),
        *HELDOUT_SUITES,
        dict(name="multikey", task="multikey", lengths=[4 * K, 16 * K, 32 * K], trials=10, n_needles=4),
        dict(name="passkey", task="passkey", lengths=[4 * K, 16 * K, 64 * K], trials=6),
        dict(name="single_eval_phrasing", task="magic", lengths=[4 * K, 16 * K, 64 * K], depths=DEPTHS[::2], trials=1,
             phrasing="eval"),
        dict(name="multivalue", task="multivalue", lengths=[4 * K, 16 * K], trials=8, n_needles=3),
        dict(name="multiquery", task="multiquery", lengths=[4 * K, 16 * K], trials=8, n_needles=4),
        dict(name="repo_value", task="repo_value", lengths=[4 * K, 16 * K], trials=8),
        dict(name="repo_file", task="repo_file", lengths=[4 * K, 16 * K], trials=8),
        dict(name="single_128k", task="magic", lengths=[128 * K], depths=[0.0, 0.25, 0.5, 0.75, 1.0], trials=1),
        REPO_NEAR,
    ]


@torch.no_grad()
def score(model, samples, device):
    """Exact-match flags (and the argmax tokens) for samples of similar length, in one batch."""
    n = max(len(s["ids"]) for s in samples)
    ids = torch.full((len(samples), n), samples[0]["ids"][-1], dtype=torch.long)
    for b, s in enumerate(samples):
        ids[b, : len(s["ids"])] = torch.tensor(s["ids"])
    ids = ids.to(device)
    h = model.model(input_ids=ids).last_hidden_state
    out = []
    for b, s in enumerate(samples):
        a, L = s["answer_start"], s["answer_end"]
        logits = model.lm_head(h[b, a - 1: L - 1].float())
        pred = logits.argmax(-1).tolist()
        out.append((pred == s["ids"][a:L], pred))
    return out


def _sdpa_without_gqa_flag():
    """fp32 SDPA has no GQA kernel and falls back to the math kernel (an N x N matrix: 64 GB at
    64K tokens); with transformers repeating the KV heads itself the memory-efficient kernel runs."""
    from transformers.integrations import sdpa_attention
    sdpa_attention.use_gqa_in_sdpa = lambda *a, **k: False


@torch.no_grad()
def greedy(model, prompt, eos_id, max_new, device):
    """Plain greedy decoding, recomputing the whole sequence per token (no cache)."""
    ids = list(prompt)
    for _ in range(max_new):
        h = model.model(input_ids=torch.tensor([ids], device=device)).last_hidden_state[0, -1]
        nxt = int(model.lm_head(h.float()).argmax())
        ids.append(nxt)
        if nxt == eos_id:
            break
    return ids[len(prompt):]


def greedy_check(model, gen, device, n=4, length=1024, seed=99):
    """The one-pass exact-match score agrees with real greedy decoding (on n short samples)."""
    agree = 0
    for t in range(n):
        s = gen.sample(np.random.default_rng([seed, t]), "magic", length, layout="inturn", style="raw")
        (ok, _), = score(model, [s], device)
        out = greedy(model, s["ids"][: s["answer_start"]], gen.eos_id, 16, device)
        want = s["ids"][s["answer_start"]: s["answer_end"]]
        agree += int(ok == (out == want))
    return {"samples": n, "agree": agree}


def run_eval(model_dir, corpus_dir, device, quick=False, budget_s=120.0, seed=777):
    from tokenizers import Tokenizer
    device = torch.device(device)
    _sdpa_without_gqa_flag()
    t0 = time.time()
    model = M.load_hf(model_dir, dtype=torch.float32, device=device)
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    gen = data.Generator(tok, data.Corpus(corpus_dir, "heldout"), held_out=True)
    results = {"note": "transformers-side (HF MiniMaxForCausalLM, fp32 compute, bf16 weights); "
                       "held-out filler and keys; greedy exact match", "suites": {}}
    results["greedy_check"] = greedy_check(model, gen, device)
    print(f"[eval] one-pass score vs real greedy decoding: {results['greedy_check']}", flush=True)
    for suite in suites(quick):
        si = SEED_INDEX.index(suite["name"])
        rows = []
        depths = suite.get("depths", [None])
        gen.version = suite.get("version", 1)   # what the samples hold (data.Generator.use_grammar)
        for L in suite["lengths"]:
            if time.time() - t0 > budget_s:
                results["suites"].setdefault(suite["name"], {"rows": rows})["skipped_from"] = L
                break
            samples = []
            for d in depths:
                for t in range(suite["trials"]):
                    rng = np.random.default_rng([seed, si, L, int((d or 0) * 1000), t])
                    s = gen.sample(rng, suite["task"], L, depth=d, layout="inturn",
                                   style="raw" if t % 2 == 0 else "framed",
                                   phrasing=suite.get("phrasing", "train"), n_needles=suite.get("n_needles"))
                    s["trial"] = t
                    s["family"] = s.get("family")
                    samples.append(s)
            per_batch = max(1, (64 * K) // L)
            for i in range(0, len(samples), per_batch):
                chunk = samples[i: i + per_batch]
                for s, (ok, pred) in zip(chunk, score(model, chunk, device)):
                    rows.append({"length": L, "tokens": len(s["ids"]), "depth": s["depth"], "trial": s["trial"],
                                 "ok": bool(ok), "expected": s["answer"],
                                 "got": tok.decode([p for p in pred if p != gen.eos_id]),
                                 **({"family": s["family"]} if s.get("family") else {})})
        results["suites"].setdefault(suite["name"], {})["rows"] = rows
        acc = {}
        for r in rows:
            acc.setdefault(r["length"], []).append(r["ok"])
        results["suites"][suite["name"]]["acc_by_length"] = {str(k): float(np.mean(v)) for k, v in acc.items()}
        print(f"[eval] {suite['name']}: " + ", ".join(f"{k // K}K {np.mean(v):.2f}" for k, v in acc.items())
              + f"  ({time.time() - t0:.0f}s)", flush=True)
    results["seconds"] = round(time.time() - t0, 1)
    return results


def print_report(res):
    print("\n== transformers-side evaluation (held-out needles and filler; greedy exact match) ==")
    for name, s in res["suites"].items():
        print(f"{name:22s} " + "  ".join(f"{int(k) // K}K:{v:.2f}" for k, v in s.get("acc_by_length", {}).items()))
    single = res["suites"].get("single")
    if single and single.get("rows"):
        lengths = sorted({r["length"] for r in single["rows"]})
        print("\nsingle needle, accuracy by depth (rows) and length (columns):")
        print("depth  " + " ".join(f"{L // K:>5d}K" for L in lengths))
        for d in DEPTHS:
            cells = []
            for L in lengths:
                v = [r["ok"] for r in single["rows"] if r["length"] == L and abs((r["depth"] or 0) - d) < 1e-9]
                cells.append(f"{np.mean(v):6.2f}" if v else "     -")
            print(f"{d:5.1f}  " + " ".join(cells))
    for name, s in res["suites"].items():
        rows = [r for r in s.get("rows", []) if "family" in r]
        if not rows:
            continue
        for part in ("needle_kind", "value_kind"):
            acc = {}
            for r in rows:
                acc.setdefault(r["family"][part], []).append(r["ok"])
            print(f"{name} by {part}: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(acc.items())))
    print(f"(eval took {res.get('seconds', 0)}s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--suites", choices=["heldout", "heldout-quick", "mid", "quick", "full"],
                    help="a named set of suites (overrides --quick)")
    ap.add_argument("--budget-s", type=float, default=600.0)
    ap.add_argument("--out", help="write the results JSON here")
    args = ap.parse_args()
    quick = args.suites if args.suites and args.suites != "full" else (False if args.suites else args.quick)
    res = run_eval(args.model, args.corpus, args.device, quick=quick, budget_s=args.budget_s)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=2)
    print_report(res)


if __name__ == "__main__":
    main()
