#!/usr/bin/env python3
"""transformers' MiniMax on bench_cuda's 8-layer real-width slice: the peer of the slice row.

Builds MiniMaxForCausalLM (transformers 5.17) with the slice's shape (hidden 6144, 64 heads x 128,
8 kv heads, 7 lightning layers then 1 softmax layer, 32 experts x 9216 top-2, vocab 4096, block
256), random bf16 weights made on the GPU (about 91 GB), and times one full-sequence prefill
(use_cache=False, torch.no_grad, sdpa attention) of N tokens for each N given. transformers' block
loop is linear in N for the lightning layers; SDPA is quadratic; so the times are fitted as
t(N) = a N + b N^2 and extrapolated to 32K and 1M tokens, written as *_extrap keys and labelled so.

Writes "key milliseconds" lines (bench_cuda --peers input):
  slice_hf_N                 measured, N tokens
  slice_hf_32768_extrap      fitted, 32K tokens
  slice_hf_1048576_extrap    fitted, 2^20 tokens

Usage: slice_hf.py OUT_FILE [--tokens 4096,8192] [--tiny]   (--tiny: a small width, CPU, to check
the script itself)
"""
import math
import statistics
import sys
import time

import torch
from transformers import MiniMaxConfig, MiniMaxForCausalLM


def main():
    out_path = sys.argv[1]
    tiny = "--tiny" in sys.argv
    toks = [4096, 8192]
    if "--tokens" in sys.argv:
        toks = [int(x) for x in sys.argv[sys.argv.index("--tokens") + 1].split(",")]
    dev = torch.device("cpu" if tiny or not torch.cuda.is_available() else "cuda")
    if tiny:
        H, D, KV, HID, I, E = 4, 16, 2, 64, 96, 4
    else:
        H, D, KV, HID, I, E = 64, 128, 8, 6144, 9216, 32
    cfg = MiniMaxConfig(hidden_size=HID, num_attention_heads=H, num_key_value_heads=KV, head_dim=D,
                        num_hidden_layers=8, intermediate_size=I, num_local_experts=E, num_experts_per_tok=2,
                        vocab_size=4096, block_size=256, max_position_embeddings=1 << 22,
                        layer_types=["linear_attention"] * 7 + ["full_attention"], tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device("meta"):
        model = MiniMaxForCausalLM(cfg)
    model = model.to_empty(device=dev).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0)
        for layer in model.model.layers:
            att = layer.self_attn
            if hasattr(att, "decay_factors"):
                slope = att.get_slope_rate().to(dev)
                qd, kd, dd = att.decay_factors(slope)
                # in the model's dtype, as transformers holds them in a bf16 model
                bf = torch.bfloat16
                att.slope_rate, att.query_decay = slope.to(bf), qd.to(bf)
                att.key_decay, att.diagonal_decay = kd.to(bf), dd.to(bf)
    model.eval()
    nparams = sum(p.numel() for p in model.parameters())
    print(f"slice: {nparams / 1e9:.2f}B parameters on {dev}", flush=True)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    results = []
    for n in toks:
        ids = torch.randint(0, cfg.vocab_size, (1, n), device=dev)
        ts = []
        for rep in range(2):
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                model(ids, use_cache=False, logits_to_keep=1)
            sync()
            ts.append((time.perf_counter() - t0) * 1e3)
        ms = min(ts)
        results.append((n, ms))
        print(f"slice_hf_{n} {ms:.1f} ms ({n / ms * 1e3:.0f} tokens/s; runs {', '.join(f'{t:.0f}' for t in ts)})",
              flush=True)
    lines = [f"slice_hf_{n} {ms:.6f}" for n, ms in results]
    if len(results) >= 2:
        # least squares for t = a n + b n^2 over the measured points
        s11 = sum(n * n for n, _ in results)
        s12 = sum(n ** 3 for n, _ in results)
        s22 = sum(n ** 4 for n, _ in results)
        r1 = sum(n * t for n, t in results)
        r2 = sum(n * n * t for n, t in results)
        det = s11 * s22 - s12 * s12
        a = (r1 * s22 - r2 * s12) / det
        b = (s11 * r2 - s12 * r1) / det
        for n in (32768, 1 << 20):
            est = a * n + b * n * n
            if math.isfinite(est) and est > 0:
                lines.append(f"slice_hf_{n}_extrap {est:.6f}")
                print(f"slice_hf_{n}_extrap {est:.0f} ms (fitted a={a:.3g} ms/token, b={b:.3g} ms/token^2; extrapolated)")
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
