#!/usr/bin/env python3
"""transformers' MiniMax on bench_cuda's 8-layer real-width slice: the peer of the slice row.

Builds MiniMaxForCausalLM (transformers 5.17) with the slice's shape (hidden 6144, 64 heads x 128,
8 kv heads, 7 lightning layers then 1 softmax layer, 32 experts x 9216 top-2, vocab 4096, block
256), random bf16 weights made on the GPU (about 91 GB), and times one full-sequence prefill
(use_cache=False, torch.no_grad, sdpa attention) of N tokens for each N given. transformers' block
loop is linear in N for the lightning layers, and SDPA is quadratic. The 32K and 1M rows are
extrapolated (written as *_extrap keys, and labelled so): per-token cost of the rest from the
largest N measured, plus the softmax layer's FLOPs at torch SDPA's rate on the same shape, timed
in this process.

Writes "key milliseconds" lines (bench_cuda --peers input):
  slice_hf_N                 measured, N tokens
  slice_hf_32768_extrap      extrapolated, 32K tokens
  slice_hf_1048576_extrap    extrapolated, 2^20 tokens

Usage: slice_hf.py OUT_FILE [--tokens 4096,8192] [--tiny]   (--tiny: a small width, CPU, to check
the script itself)
"""
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
    # Built on the meta device in bf16, then materialised once on the GPU: 45B parameters in fp32
    # (180 GB) would not fit the H200 even for a moment.
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = MiniMaxForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model = model.to_empty(device=dev)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            else:
                p.fill_(1.0)
        for layer in model.model.layers:
            att = layer.self_attn
            if hasattr(att, "decay_factors"):
                # decay_factors makes its ranges with torch.arange on the default device
                with torch.device(dev):
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
    # Extrapolation. A free fit of a N + b N^2 to these points was tried on the H200 and gave a
    # negative quadratic term: the measured growth is mostly fixed per-call costs and noise, not
    # attention. So the model is explicit instead: per-token cost of everything but the softmax
    # attention, from the largest N measured, plus the softmax attention's FLOPs at the rate torch
    # SDPA reaches on the same shape in this process (timed below at 16K tokens; 1K with --tiny).
    if results:
        sn = 1024 if tiny else 16384
        q = torch.randn(1, H, sn, D, device=dev, dtype=torch.bfloat16)
        kv = torch.randn(1, KV, sn, D, device=dev, dtype=torch.bfloat16)
        f = torch.nn.functional.scaled_dot_product_attention
        f(q, kv, kv, is_causal=True, enable_gqa=True)
        sync()
        t0 = time.perf_counter()
        for _ in range(5):
            f(q, kv, kv, is_causal=True, enable_gqa=True)
        sync()
        sdpa_ms = (time.perf_counter() - t0) * 1e3 / 5
        def attn_flops(n):
            return 4.0 * D * H * n * (n + 1) / 2  # one softmax layer, causal
        rate = attn_flops(sn) / (sdpa_ms * 1e-3)
        n_big, t_big = results[-1]
        per_tok = (t_big - attn_flops(n_big) / rate * 1e3) / n_big
        print(f"SDPA in process {rate / 1e12:.0f} TFLOP/s; transformers' other work {per_tok * 1e3:.2f} us/token at {n_big}",
              flush=True)
        for n in (32768, 1 << 20):
            est = per_tok * n + attn_flops(n) / rate * 1e3
            lines.append(f"slice_hf_{n}_extrap {est:.6f}")
            print(f"slice_hf_{n}_extrap {est:.0f} ms (EXTRAPOLATED: {per_tok * n:.0f} ms linear + "
                  f"{attn_flops(n) / rate * 1e3:.0f} ms attention; transformers itself would not fit 1M tokens' activations)",
                  flush=True)
    with open(out_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
