"""Check model.enable_fast_training against transformers' own MiniMax code (CPU, seconds).

Two copies of the training model (model.build, the same seed) run the same batch, one as
transformers writes it, one with enable_fast_training; the answer-and-LM loss of train.loss_fn and
every parameter's gradient must agree to fp32 rounding (rel. L2 below --tol). Lengths that are not
a multiple of the 256-token block and a batch of two are among the cases; --time also times
forward and backward of each form on a training step's shape (--time-batch x --time-len, bf16
autocast as train.py runs), the median of --time-reps after one warm-up.

    /tmp/v/bin/python tools/train_tiny/check_fast.py [--time]                 # CPU, about 15 s
    /tmp/v/bin/python tools/train_tiny/check_fast.py --init models/haul-tiny  # the shipped weights
    python3 tools/train_tiny/check_fast.py --device cuda --time --time-batch 2 --time-len 32768
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import train  # noqa: E402


def batch(B, T, vocab, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    ans = torch.zeros((B, T), dtype=torch.bool)
    ans[:, T - 8: T - 1] = True
    first = torch.zeros_like(ans)
    first[:, T - 8] = True
    lm = torch.rand((B, T), generator=g) < 0.2
    return {"ids": ids, "ans": ans, "first": first, "lm": lm}


def run(model, b, amp, device):
    model.zero_grad(set_to_none=True)
    loss, _ = train.loss_fn(model, b, device, amp, 0.1, 0.01, 3.0)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def rel(a, b):
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--time", action="store_true")
    ap.add_argument("--time-batch", type=int, default=1)
    ap.add_argument("--time-len", type=int, default=16384)
    ap.add_argument("--time-reps", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="with --time: after the timings, torch.profiler's N costliest kernels of one "
                         "transformers-form step (where a long step's time goes)")
    ap.add_argument("--init", help="a model folder (e.g. models/haul-tiny) to load into both copies instead of "
                                   "the random initialisation")
    args = ap.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    dev = torch.device(args.device)
    arch = dict(M.ARCH, length_scale_base=4096)
    ref = M.build(arch, 1, 2, 7).to(dev).train()
    fast = M.enable_fast_training(M.build(arch, 1, 2, 7).to(dev).train())
    if args.init:
        for m in (ref, fast):
            train.init_from_model(m, args.init)
    else:
        with torch.no_grad():  # scales off zero, so that the softmax layer's scaling is in the check
            for m in (ref, fast):
                for n, p in m.named_parameters():
                    if n.endswith("length_scale"):
                        p.copy_(torch.linspace(0.0, 0.3, p.numel()))
    worst = 0.0
    for B, T in ((2, 1300), (1, 256), (3, 77), (1, 5000)):
        b = batch(B, T, arch["vocab_size"], B * 1000 + T)
        l0, g0 = run(ref, b, False, dev)
        l1, g1 = run(fast, b, False, dev)
        if set(g0) != set(g1):
            raise SystemExit(f"B={B} T={T}: gradients for different parameters: {set(g0) ^ set(g1)}")
        dl = abs(float(l0 - l1)) / abs(float(l0))
        dg = max(rel(g1[n], g0[n]) for n in g0 if g0[n].norm() > 0)
        zero = [n for n in g0 if g0[n].norm() == 0 and g1[n].norm() != 0]
        print(f"B={B} T={T}: loss {float(l0):.6f} vs {float(l1):.6f} (rel {dl:.1e}); "
              f"worst gradient rel L2 {dg:.1e}")
        if zero:
            raise SystemExit(f"gradients where transformers' code has none: {zero}")
        worst = max(worst, dl, dg)
    if worst > args.tol:
        raise SystemExit(f"FAIL: worst relative difference {worst:.1e} > {args.tol:.0e}")
    print(f"ok: worst relative difference {worst:.1e}")
    if args.time:
        b = batch(args.time_batch, args.time_len, arch["vocab_size"], 5)
        took = {}
        for name, m in (("transformers", ref), ("fast", fast)):
            times = []
            for _ in range(args.time_reps + 1):
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.time()
                run(m, b, True, dev)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
                times.append(time.time() - t0)
            took[name] = sorted(times[1:])[len(times[1:]) // 2]
            print(f"{name}: forward+backward of {args.time_batch} x {args.time_len} tokens "
                  f"(bf16 autocast, {dev}): median {took[name]:.3f} s of {args.time_reps}")
        print(f"fast / transformers: {took['transformers'] / took['fast']:.2f}x")
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
            with profile(activities=acts) as prof:
                run(ref, b, True, dev)
                if dev.type == "cuda":
                    torch.cuda.synchronize()
            keys = ("self_device_time_total", "self_cuda_time_total") if dev.type == "cuda" else ("self_cpu_time_total",)
            for key in keys:  # the name of the device column changed across torch versions
                try:
                    print(prof.key_averages().table(sort_by=key, row_limit=args.profile, max_name_column_width=70))
                    break
                except (AttributeError, KeyError, ValueError):
                    continue


if __name__ == "__main__":
    main()
