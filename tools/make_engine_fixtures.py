#!/usr/bin/env python3
"""Build the HF-parity fixtures for the engine: small random MiniMax models with reference logits.

Usage: /work/pyenv/bin/python tools/make_engine_fixtures.py [OUT_DIR [NAME ...]]
       (default tests/fixtures/engine and every fixture; NAMEs make only those)

Needs torch (CPU is enough), transformers 5.17.0 and safetensors. Every fixture folder holds:
  config.json, model.safetensors or model.safetensors.index.json + shards   the model
  ids.txt       whitespace-separated input ids
  logits.f32    little-endian float32 [T x vocab]: ONE full-sequence forward in fp32,
                attn_implementation="eager", use_cache=False (never HF's cached continuation, which
                drifts for MiniMax in transformers 5.17)
  greedy.txt    the greedy continuation (16 tokens), each step a full forward of the whole sequence
  meta.json     what it covers, seed, versions, logit statistics

Where the reference comes from:
  * HF-form fixtures: the folder is written first, then loaded back with
    MiniMaxForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation="eager"), so the
    reference is exactly what transformers computes from the committed files (including its own
    defaults for keys the config leaves out, and the buffers it recomputes when they are absent).
  * Original-form (minimax_text_01) fixtures: transformers 5.17 cannot read that form, and it cannot
    express rotary_dim < head_dim. The reference is an in-memory MiniMaxForCausalLM holding the same
    weights, with two patches that give it the original code's semantics:
      1. RoPE on the first rotary_dim dims of each head only, rotate-half (neox) convention within
         those dims, inverse frequencies 1 / theta^(arange(0, R, 2) / R) computed over R = rotary_dim.
         This is vLLM's get_rope(head_size, rotary_dim, is_neox_style=True) as minimax_text_01.py
         calls it, and the remote modeling_minimax_text_01.py's apply_rotary_pos_emb (which splits
         q[..., :rot_dim] / q[..., rot_dim:] and rotates half within the first part, its rotary
         embedding built with dim = config.rotary_dim). Found with the code search over vLLM and
         the MiniMax remote code.
      2. The lightning slopes of the original code (_build_slope_tensor: ALiBi-style slopes in
         double, interleaved for head counts that are not powers of two, rounded to float32, times
         1 - l/(L-1) + 1e-5 in float32), with query/key/diagonal decay tables rebuilt from them.
         transformers' get_slope_rate agrees with it for power-of-two head counts up to rounding.
    The config is written from the HF config with the key mapping documented in engine/config.c.
  * The length-aware query scaling (attn_length_scale_base, docs/design.md) is longhaul's own
    extension, which no released code has: its fixture's reference is the original-form reference
    above plus tools/train_tiny/model.py's enable_length_scale, the same code the tiny model trains
    with (it wraps transformers' eager attention function: each softmax layer's query, after RoPE,
    times 1 + s_h max(0, ln((p+1)/L0)) at the position_ids transformers passes down). The script
    checks that the scaling is in effect (zeroing the scales moves the logits) and records how far.

Weights are random with scales chosen so that logits are far from flat (the script checks the
spread); every norm weight is random (never all ones). bf16/f16 fixtures round the weights first,
so the fp32 reference uses exactly the stored values; lightning buffers written by save_pretrained
are kept in fp32 (transformers would otherwise compute with rounded decay tables, which longhaul
does not reproduce; see engine/weights.c).
"""

import copy
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import safetensors
from safetensors.torch import load_file, save_file

import transformers
import transformers.models.minimax.modeling_minimax as mm
from transformers import MiniMaxConfig, MiniMaxForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_tiny"))
from model import enable_length_scale, yarn_tables  # noqa: E402  (the training code's length scaling, YaRN)

torch.set_num_threads(2)
GREEDY_STEPS = 16
MT01_ALPHA = 3.5565588200778455  # MiniMax-Text-01's layernorm_*_alpha


# ---- the fixture specs -------------------------------------------------------------------------

SPECS = [
    dict(
        name="hf_bf16_sharded_gqa2",
        covers=[
            "HF minimax form written by save_pretrained (per-expert block_sparse_moe.experts.N.w1/w2/w3 names)",
            "sharded safetensors with model.safetensors.index.json",
            "bf16 weights (lightning buffers slope_rate/query_decay/key_decay/diagonal_decay stored, in F32)",
            "GQA ratio 2 (4 heads, 2 kv heads)",
            "top-2 of 6 experts",
            "alpha = 3.5565588200778455 (MiniMax-Text-01) for attention and MLP, beta != 1",
            "untied embeddings; block_size 40 does not divide T = 333",
        ],
        seed=101, T=333, vocab=256, hidden=64, heads=4, kv=2, head_dim=16, inter=16, experts=6, top_k=2,
        layers=["linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"],
        block=40, theta=10000.0, tie=False,
        alpha=dict(full=(MT01_ALPHA, 0.8), linear=(MT01_ALPHA, 1.1), mlp=(MT01_ALPHA, 0.9)),
        dtype="bf16", write="save_pretrained", shard="60KB",
    ),
    dict(
        name="hf_fused_softmax_first_tied_top1",
        covers=[
            "HF minimax form with fused expert tensors (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj, "
            "mlp.gate), written directly with safetensors, no lightning buffers (transformers recomputes them)",
            "layer_types absent: HF's default plan (softmax first: full, linear, full, linear)",
            "GQA ratio 4 (8 heads of head_dim 6, 2 kv heads)",
            "tied embeddings (no lm_head.weight)",
            "top-1 of 4 experts",
            "rope_parameters with partial_rotary_factor 0.5, which transformers 5.17 ignores (full RoPE)",
            "alpha/beta factors != 1; block_size 32 does not divide T = 310; fp32",
        ],
        seed=202, T=310, vocab=256, hidden=48, heads=8, kv=2, head_dim=6, inter=32, experts=4, top_k=1,
        layers=None, n_layers=4,
        block=32, theta=500000.0, tie=True,
        alpha=dict(full=(0.7, 1.3), linear=(1.6, 0.6), mlp=(1.2, 0.75)),
        dtype="f32", write="fused", partial_rotary=0.5,
    ),
    dict(
        name="orig_partial_rotary_gqa1",
        covers=[
            "original minimax_text_01 config form (attn_type_list, layernorm_*_alpha/beta, rotary_dim, postnorm)",
            "partial RoPE: rotary_dim 8 of head_dim 16 (reference: HF with patched rotary, see the script)",
            "6 heads (not a power of two: the original code's interleaved slopes)",
            "GQA ratio 1 (6 heads, 6 kv heads); head_dim * heads != hidden",
            "top-2 of 8 experts; per-expert names, no buffers (as the original release)",
            "layernorm alphas 3.5565588200778455, betas 1; block_size absent (256, the original BLOCK) with T = 360",
        ],
        seed=303, T=360, vocab=256, hidden=48, heads=6, kv=6, head_dim=16, inter=16, experts=8, top_k=2,
        layers=["linear_attention", "linear_attention", "full_attention"],
        block=256, theta=10000000.0, tie=False, rotary_dim=8,
        alpha=dict(full=(MT01_ALPHA, 1.0), linear=(MT01_ALPHA, 1.0), mlp=(MT01_ALPHA, 1.0)),
        dtype="f32", write="original", write_block=False,
    ),
    dict(
        name="hf_f16_legacy_rope_top2of3",
        covers=[
            "HF minimax form by save_pretrained, f16 weights (buffers in F32)",
            "legacy top-level rope_theta instead of rope_parameters",
            "GQA ratio 2 (2 heads, 1 kv head), head_dim 32",
            "top-2 of 3 experts; untied; two softmax layers; block_size 48 does not divide T = 356",
        ],
        seed=404, T=356, vocab=260, hidden=64, heads=2, kv=1, head_dim=32, inter=48, experts=3, top_k=2,
        layers=["full_attention", "linear_attention", "linear_attention", "full_attention"],
        block=48, theta=10000.0, tie=False, legacy_rope=True,
        alpha=dict(full=(1.0, 1.0), linear=(1.0, 1.0), mlp=(1.0, 1.0)),
        dtype="f16", write="save_pretrained",
    ),
    dict(
        name="orig_mt01_plan_bf16_sharded",
        covers=[
            "original minimax_text_01 form in MiniMax-Text-01's shape: 7 lightning + 1 softmax (layer (i+1) % 8 == 0), "
            "rotary_dim = head_dim / 2 (as 64 of 128)",
            "sharded by hand (3 shards + index), bf16 weights, per-expert names",
            "GQA ratio 4 (4 heads, 1 kv head)",
            "top-2 of 4 experts; alphas 3.5565588200778455, betas 1; block_size 40 (written) does not divide T = 305",
        ],
        seed=505, T=305, vocab=256, hidden=32, heads=4, kv=1, head_dim=8, inter=16, experts=4, top_k=2,
        layers=["linear_attention"] * 7 + ["full_attention"],
        block=40, theta=10000000.0, tie=False, rotary_dim=4,
        alpha=dict(full=(MT01_ALPHA, 1.0), linear=(MT01_ALPHA, 1.0), mlp=(MT01_ALPHA, 1.0)),
        dtype="bf16", write="original", write_block=True, hand_shards=3,
    ),
    dict(
        name="hf_tp8_gqa2_top2of8",
        covers=[
            "shares for 2, 4 and 8 tensor/expert-parallel ranks (issue 10): 16 heads, 8 kv heads, 8 experts",
            "HF minimax form by save_pretrained, f32, one file; GQA ratio 2 (16 heads, 8 kv heads), head_dim 8",
            "top-2 of 8 experts; LLSLS plan; block_size 24 does not divide T = 290",
        ],
        seed=606, T=290, vocab=256, hidden=64, heads=16, kv=8, head_dim=8, inter=16, experts=8, top_k=2,
        layers=["linear_attention", "linear_attention", "full_attention", "linear_attention", "full_attention"],
        block=24, theta=10000.0, tie=False,
        alpha=dict(full=(1.3, 0.9), linear=(1.3, 0.9), mlp=(1.3, 0.9)),
        dtype="f32", write="save_pretrained",
    ),
    dict(
        name="orig_length_scale_gqa2",
        covers=[
            "length-aware softmax query scaling: attn_length_scale_base 8, learned self_attn.length_scale [4] in "
            "both softmax layers, s_h random in [0.3, 1.0] (reference: tools/train_tiny/model.py "
            "enable_length_scale on transformers' attention, see the script)",
            "original minimax_text_01 form, rotary_dim 8 of 16, bf16 weights (the scales stored in bf16 too)",
            "GQA ratio 2 (4 heads, 2 kv heads); LSLS plan, two softmax layers",
            "top-2 of 4 experts; alphas 3.5565588200778455, betas 1; block_size 32 (written) vs T = 300",
        ],
        seed=707, T=300, vocab=256, hidden=48, heads=4, kv=2, head_dim=16, inter=16, experts=4, top_k=2,
        layers=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        block=32, theta=10000.0, tie=False, rotary_dim=8,
        alpha=dict(full=(MT01_ALPHA, 1.0), linear=(MT01_ALPHA, 1.0), mlp=(MT01_ALPHA, 1.0)),
        dtype="bf16", write="original", write_block=True, length_scale_base=8,
    ),
    dict(
        name="hf_yarn_gqa2",
        covers=[
            "YaRN RoPE in the HF form: rope_parameters rope_type yarn, factor 4, original_max_position_embeddings "
            "64, beta_fast / beta_slow / attention_factor left to transformers' defaults (32, 1, 0.1 ln 4 + 1); "
            "the reference is transformers' own YaRN (from_pretrained of this folder)",
            "HF minimax form by save_pretrained, f32, one file; GQA ratio 2 (4 heads, 2 kv heads), head_dim 16",
            "T = 300 past the original 64 positions: the ramp's dims 0-2 and the interpolated dims all in play",
            "top-2 of 4 experts; LSLS plan; block_size 32",
        ],
        seed=808, T=300, vocab=256, hidden=48, heads=4, kv=2, head_dim=16, inter=16, experts=4, top_k=2,
        layers=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        block=32, theta=10000.0, tie=False,
        alpha=dict(full=(MT01_ALPHA, 1.0), linear=(MT01_ALPHA, 1.0), mlp=(MT01_ALPHA, 1.0)),
        dtype="f32", write="save_pretrained",
        yarn=dict(factor=4.0, original_max_position_embeddings=64),
    ),
    dict(
        name="orig_yarn_partial_gqa2",
        covers=[
            "YaRN on partial RoPE in the original form: rope_scaling rope_type yarn over rotary_dim 8 of 16, factor "
            "8, original_max_position_embeddings 32, beta_fast 8, beta_slow 0.5, truncate false, attention_factor "
            "1.25 (reference: transformers' _compute_yarn_parameters over the 8 rotary dims, see the script)",
            "original minimax_text_01 form, bf16 weights; GQA ratio 2 (4 heads, 2 kv heads); SLLS plan",
            "top-2 of 4 experts; block_size 32 (written) vs T = 300",
        ],
        seed=909, T=300, vocab=256, hidden=48, heads=4, kv=2, head_dim=16, inter=16, experts=4, top_k=2,
        layers=["full_attention", "linear_attention", "linear_attention", "full_attention"],
        block=32, theta=10000.0, tie=False, rotary_dim=8,
        alpha=dict(full=(MT01_ALPHA, 1.0), linear=(MT01_ALPHA, 1.0), mlp=(MT01_ALPHA, 1.0)),
        dtype="bf16", write="original", write_block=True,
        yarn=dict(factor=8.0, original_max_position_embeddings=32, beta_fast=8.0, beta_slow=0.5, truncate=False,
                  attention_factor=1.25),
    ),
]


# ---- model construction -------------------------------------------------------------------------

def hf_config(spec):
    kw = dict(
        vocab_size=spec["vocab"], hidden_size=spec["hidden"], intermediate_size=spec["inter"],
        num_attention_heads=spec["heads"], num_key_value_heads=spec["kv"], head_dim=spec["head_dim"],
        num_local_experts=spec["experts"], num_experts_per_tok=spec["top_k"], block_size=spec["block"],
        tie_word_embeddings=spec["tie"], rms_norm_eps=1e-5, max_position_embeddings=4096,
        full_attn_alpha_factor=spec["alpha"]["full"][0], full_attn_beta_factor=spec["alpha"]["full"][1],
        linear_attn_alpha_factor=spec["alpha"]["linear"][0], linear_attn_beta_factor=spec["alpha"]["linear"][1],
        mlp_alpha_factor=spec["alpha"]["mlp"][0], mlp_beta_factor=spec["alpha"]["mlp"][1],
        rope_parameters=({"rope_type": "yarn", "rope_theta": spec["theta"], **spec["yarn"]}
                         if spec.get("yarn") and spec["write"] != "original"
                         else {"rope_type": "default", "rope_theta": spec["theta"]}),
        bos_token_id=1, eos_token_id=2,
    )
    if spec.get("layers"):
        kw["layer_types"] = spec["layers"]
        kw["num_hidden_layers"] = len(spec["layers"])
    else:
        kw["num_hidden_layers"] = spec["n_layers"]
    cfg = MiniMaxConfig(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def randomize(model, spec, gen):
    """Random weights with non-flat logits: unit-scale activations, random norm weights."""
    H = spec["hidden"]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) * 0.8 + 0.6)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.startswith("lm_head"):
                p.copy_(torch.randn(p.shape, generator=gen) * (4.0 / math.sqrt(H)))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn(p.shape, generator=gen) * (2.0 / math.sqrt(H)))
            elif name.endswith("gate_up_proj"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            elif name.endswith("down_proj"):
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            elif name.endswith("self_attn.length_scale"):
                p.copy_(torch.rand(p.shape, generator=gen) * 0.7 + 0.3)
            elif p.dim() == 2:
                gain = 1.5 if (".q_proj" in name or ".k_proj" in name) else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * (gain / math.sqrt(p.shape[1])))
            else:
                raise RuntimeError(f"no rule to randomize {name} {tuple(p.shape)}")
        if spec["dtype"] in ("bf16", "f16"):
            dt = torch.bfloat16 if spec["dtype"] == "bf16" else torch.float16
            for _, p in model.named_parameters():
                p.copy_(p.to(dt).to(torch.float32))
    if spec["tie"]:
        model.tie_weights()


def build_model(spec):
    gen = torch.Generator().manual_seed(spec["seed"])
    torch.manual_seed(spec["seed"])
    model = MiniMaxForCausalLM(hf_config(spec)).eval()
    if spec.get("length_scale_base"):
        enable_length_scale(model, spec["length_scale_base"])
    randomize(model, spec, gen)
    return model, gen


# ---- original-code semantics (patches for the reference) ----------------------------------------

def original_slopes(n):
    """The original code's _build_slope_tensor (ALiBi-style), in double."""
    def pow2(k):
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start ** i for i in range(k)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + original_slopes(2 * closest)[0::2][: n - closest]


def patch_original_semantics(model, spec):
    L = len(model.model.layers)
    base = torch.tensor(original_slopes(spec["heads"]), dtype=torch.float32).reshape(-1, 1, 1)
    for l, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        if not isinstance(attn, mm.MiniMaxLightningAttention):
            continue
        factor = (1 + 1e-5) if L <= 1 else (1 - l / (L - 1) + 1e-5)
        slope = base * factor
        q, k, d = attn.decay_factors(slope)
        attn.slope_rate.copy_(slope)
        attn.query_decay.copy_(q)
        attn.key_decay.copy_(k)
        attn.diagonal_decay.copy_(d)
    R = spec["rotary_dim"]
    theta = spec["theta"]
    rot = model.model.rotary_emb
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float) / R))
    if spec.get("yarn"):
        inv, rot.attention_scaling = yarn_tables_of(model.config, spec)
    rot.inv_freq = inv
    rot.original_inv_freq = inv.clone()


def yarn_tables_of(config, spec):
    """transformers' own YaRN tables over the spec's rotary_dim dims (tools/train_tiny/model.py
    yarn_tables: _compute_yarn_parameters with partial_rotary_factor rotary_dim / head_dim)."""
    return yarn_tables(config, spec["theta"], spec["rotary_dim"], spec["yarn"])


def partial_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """RoPE on the first cos.shape[-1] dims only; rotate-half within them (neox convention)."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    r = cos.shape[-1]
    q_rot, q_pass = q[..., :r], q[..., r:]
    k_rot, k_pass = k[..., :r], k[..., r:]
    q_rot = q_rot * cos + mm.rotate_half(q_rot) * sin
    k_rot = k_rot * cos + mm.rotate_half(k_rot) * sin
    return torch.cat((q_rot, q_pass), dim=-1), torch.cat((k_rot, k_pass), dim=-1)


# ---- writers ------------------------------------------------------------------------------------

BUFFERS = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")


def is_buffer(name):
    return name.rsplit(".", 1)[-1] in BUFFERS


def torch_dtype(spec):
    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[spec["dtype"]]


def write_save_pretrained(model, spec, out):
    """save_pretrained in the stored dtype; buffers kept in fp32 (see the module docstring)."""
    dt = torch_dtype(spec)
    m = copy.deepcopy(model).to(dt)  # a copy: .to() would round the in-memory model's inv_freq too
    if dt != torch.float32:
        for layer, orig in zip(m.model.layers, model.model.layers):
            if isinstance(layer.self_attn, mm.MiniMaxLightningAttention):
                for b in BUFFERS:
                    setattr(layer.self_attn, b, getattr(orig.self_attn, b).clone())
    kw = {"max_shard_size": spec["shard"]} if spec.get("shard") else {}
    m.save_pretrained(out, **kw)
    cfg = json.load(open(os.path.join(out, "config.json")))
    if spec.get("legacy_rope"):
        rp = cfg.pop("rope_parameters")
        cfg["rope_theta"] = rp["rope_theta"]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2, sort_keys=True)


def write_fused(model, spec, out):
    dt = torch_dtype(spec)
    sd = {k: v.to(dt).contiguous() for k, v in model.state_dict().items() if not is_buffer(k)}
    if spec["tie"]:
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    cfg = model.config.to_dict()
    if spec.get("layers") is None:
        cfg.pop("layer_types", None)
    if spec.get("partial_rotary"):
        cfg["rope_parameters"]["partial_rotary_factor"] = spec["partial_rotary"]
    cfg["dtype"] = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[spec["dtype"]]
    for k in ("_name_or_path", "transformers_version", "_attn_implementation_autoset"):
        cfg.pop(k, None)
    cfg["architectures"] = ["MiniMaxForCausalLM"]
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2, sort_keys=True)


def original_config(model, spec):
    c = model.config
    cfg = {
        "architectures": ["MiniMaxText01ForCausalLM"],
        "model_type": "minimax_text_01",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim,
        "max_position_embeddings": c.max_position_embeddings, "rms_norm_eps": c.rms_norm_eps,
        "tie_word_embeddings": c.tie_word_embeddings, "bos_token_id": c.bos_token_id,
        "eos_token_id": c.eos_token_id, "hidden_act": "silu",
        "num_local_experts": c.num_local_experts, "num_experts_per_tok": c.num_experts_per_tok,
        "attn_type_list": [0 if t == "linear_attention" else 1 for t in c.layer_types],
        "layernorm_full_attention_alpha": c.full_attn_alpha_factor,
        "layernorm_full_attention_beta": c.full_attn_beta_factor,
        "layernorm_linear_attention_alpha": c.linear_attn_alpha_factor,
        "layernorm_linear_attention_beta": c.linear_attn_beta_factor,
        "layernorm_mlp_alpha": c.mlp_alpha_factor, "layernorm_mlp_beta": c.mlp_beta_factor,
        "rope_theta": c.rope_parameters["rope_theta"], "rotary_dim": spec["rotary_dim"],
        "postnorm": True, "shared_intermediate_size": 0,
        "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[spec["dtype"]],
    }
    if spec.get("length_scale_base"):
        cfg["attn_length_scale_base"] = spec["length_scale_base"]
    if spec.get("yarn"):
        cfg["rope_scaling"] = {"rope_type": "yarn", **spec["yarn"]}
    if spec.get("write_block"):
        cfg["block_size"] = c.block_size
    else:
        assert c.block_size == 256
    return cfg


def write_original(model, spec, out):
    """Per-expert names as save_pretrained writes them, no buffers, the original config form."""
    with tempfile.TemporaryDirectory() as tmp:
        copy.deepcopy(model).to(torch_dtype(spec)).save_pretrained(tmp)
        sd = load_file(os.path.join(tmp, "model.safetensors"))
    sd = {k: v for k, v in sd.items() if not is_buffer(k)}
    n = spec.get("hand_shards", 1)
    if n == 1:
        save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    else:
        names = sorted(sd)
        weight_map, total = {}, 0
        for i in range(n):
            part = names[i * len(names) // n:(i + 1) * len(names) // n]
            fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            save_file({k: sd[k] for k in part}, os.path.join(out, fname), metadata={"format": "pt"})
            for k in part:
                weight_map[k] = fname
                total += sd[k].numel() * sd[k].element_size()
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
                  open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2, sort_keys=True)
    json.dump(original_config(model, spec), open(os.path.join(out, "config.json"), "w"), indent=2, sort_keys=True)


# ---- reference ----------------------------------------------------------------------------------

def forward_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].to(torch.float32)


def make_fixture(spec, root):
    out = os.path.join(root, spec["name"])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    model, gen = build_model(spec)
    ids_seed = spec["seed"] * 1000

    if spec["write"] == "original":
        write_original(model, spec, out)
        ref = model
        patch_original_semantics(ref, spec)
        # MiniMaxAttention.forward looks apply_rotary_pos_emb up in its module at call time, so the
        # patch is in effect; were it not, HF's full-width rotation would fail on the rotary_dim-wide
        # cos/sin and the script would stop.
        mm.apply_rotary_pos_emb = partial_apply_rotary_pos_emb
    else:
        (write_save_pretrained if spec["write"] == "save_pretrained" else write_fused)(model, spec, out)
        ref = MiniMaxForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
        mm.apply_rotary_pos_emb = ORIGINAL_APPLY_ROPE
        # The reloaded model must be the model we built (same weights, same function).
        probe = torch.randint(0, spec["vocab"], (64,), generator=gen).tolist()
        check = forward_logits(model, probe)
        again = forward_logits(ref, probe)
        assert torch.equal(check, again), f"{spec['name']}: reloaded model differs by {(check - again).abs().max()}"
    try:
        # Input ids are redrawn (seed recorded) until no greedy step is near a tie: a margin under
        # 2e-3 x max|logit| could flip under the parity bound's allowed error.
        for attempt in range(50):
            ids_seed = spec["seed"] * 1000 + attempt
            ids = torch.randint(0, spec["vocab"], (spec["T"],), generator=torch.Generator().manual_seed(ids_seed))
            ids = ids.tolist()
            logits = forward_logits(ref, ids)
            maxabs = float(logits.abs().max())
            seq, greedy, margins = list(ids), [], []
            for _ in range(GREEDY_STEPS):
                last = forward_logits(ref, seq)[-1]
                top2 = torch.topk(last, 2)
                nxt = int(torch.argmax(last))
                margins.append(float(top2.values[0] - top2.values[1]))
                greedy.append(nxt)
                seq.append(nxt)
            if min(margins) > 2e-3 * maxabs:
                break
        else:
            raise RuntimeError(f"{spec['name']}: every draw of ids had a greedy step near a tie")
    finally:
        mm.apply_rotary_pos_emb = ORIGINAL_APPLY_ROPE

    extra = {}
    if spec.get("length_scale_base"):
        extra = length_scale_meta(ref, spec, ids, logits)
    if spec.get("yarn"):
        extra = yarn_meta(ref, spec, ids, logits)
    lg = logits.numpy().astype("<f4")
    std = float(lg.std(axis=1).mean())
    assert std > 1.0, f"{spec['name']}: logits are too flat (mean per-position std {std:.3f})"
    lg.tofile(os.path.join(out, "logits.f32"))
    with open(os.path.join(out, "ids.txt"), "w") as f:
        f.write(" ".join(map(str, ids)) + "\n")
    with open(os.path.join(out, "greedy.txt"), "w") as f:
        f.write(" ".join(map(str, greedy)) + "\n")
    cfg = ref.config
    meta = {
        "name": spec["name"],
        "covers": spec["covers"],
        "seed": spec["seed"],
        "ids_seed": ids_seed,
        "tokens": len(ids),
        "vocab_size": spec["vocab"],
        "form": "minimax_text_01" if spec["write"] == "original" else "minimax",
        "tensor_naming": "fused" if spec["write"] == "fused" else "per-expert",
        "weights_dtype": spec["dtype"],
        "layer_types": list(cfg.layer_types),
        "reference": (
            "in-memory MiniMaxForCausalLM with the original code's partial RoPE and slopes patched in"
            + (" and tools/train_tiny/model.py's length-aware query scaling" if spec.get("length_scale_base") else "")
            if spec["write"] == "original"
            else "MiniMaxForCausalLM.from_pretrained(this folder, dtype=float32, attn_implementation='eager')"
        ),
        "logits": {"shape": [len(ids), spec["vocab"]], "dtype": "float32 little-endian",
                   "mean_row_std": round(std, 4), "max_abs": round(maxabs, 4)},
        # The decay rates the reference computed with (transformers' buffers, loaded or recomputed;
        # the original formula for minimax_text_01 fixtures), per lightning layer, exact float32.
        "lightning_slopes": {
            str(l): [float(x) for x in layer.self_attn.slope_rate.flatten().tolist()]
            for l, layer in enumerate(ref.model.layers)
            if isinstance(layer.self_attn, mm.MiniMaxLightningAttention)
        },
        **extra,
        "greedy_steps": GREEDY_STEPS,
        "greedy_min_margin": round(min(margins), 5),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__, "python": sys.version.split()[0]},
        "script": "tools/make_engine_fixtures.py",
    }
    json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=2)
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{spec['name']}: T={len(ids)} vocab={spec['vocab']} logit std {std:.2f} max {maxabs:.1f} "
          f"greedy margin {min(margins):.3f}  {size / 1024:.0f} KiB")
    return size


def rel_l2(a, b):
    return float(((a - b) ** 2).sum().sqrt() / (b ** 2).sum().sqrt())


def length_scale_meta(ref, spec, ids, logits):
    """The scales the reference used, how far the logits move without them (the scaling must
    matter), and how far transformers' own bf16 run of the same model is from its fp32 logits (the
    GPU test's envelope, tests/gpu/bf16_envelope.txt)."""
    scales = {str(l): [float(x) for x in layer.self_attn.length_scale.tolist()]
              for l, layer in enumerate(ref.model.layers) if hasattr(layer.self_attn, "length_scale")}
    mm.apply_rotary_pos_emb = partial_apply_rotary_pos_emb
    try:
        saved = {l: ref.model.layers[int(l)].self_attn.length_scale.detach().clone() for l in scales}
        with torch.no_grad():
            for l in scales:
                ref.model.layers[int(l)].self_attn.length_scale.zero_()
            plain = forward_logits(ref, ids)
            for l in scales:
                ref.model.layers[int(l)].self_attn.length_scale.copy_(saved[l])
            bf = copy.deepcopy(ref).to(torch.bfloat16)
            lb = forward_logits(bf, ids)
    finally:
        mm.apply_rotary_pos_emb = ORIGINAL_APPLY_ROPE
    effect = rel_l2(plain, logits)
    assert effect > 0.05, f"{spec['name']}: the length scaling moves the logits by only {effect:.3g} (rel L2)"
    assert torch.equal(plain[: spec["length_scale_base"]], logits[: spec["length_scale_base"]]), \
        "positions below the base must not be scaled"
    return {"length_scale": {"attn_length_scale_base": spec["length_scale_base"], "scales": scales,
                             "rel_l2_of_logits_with_scales_zeroed": round(effect, 4)},
            "hf_bf16_rel_l2": round(rel_l2(lb, logits), 5)}


def yarn_meta(ref, spec, ids, logits):
    """The frequencies and cos/sin factor the reference used, and how far the logits move with the
    plain RoPE table in their place (YaRN must matter)."""
    rot = ref.model.rotary_emb
    inv, af = rot.inv_freq.detach().clone(), rot.attention_scaling
    R = spec.get("rotary_dim", spec["head_dim"])
    plain = 1.0 / (spec["theta"] ** (torch.arange(0, R, 2, dtype=torch.float) / R))
    if spec["write"] == "original":
        mm.apply_rotary_pos_emb = partial_apply_rotary_pos_emb
    try:
        rot.inv_freq, rot.attention_scaling = plain, 1.0
        without = forward_logits(ref, ids)
        rot.inv_freq, rot.attention_scaling = inv, af
        # transformers' own bf16 run of the same model (the GPU test's envelope, as length_scale_meta)
        lb = forward_logits(copy.deepcopy(ref).to(torch.bfloat16), ids) if spec["write"] == "original" else None
    finally:
        rot.inv_freq, rot.attention_scaling = inv, af
        mm.apply_rotary_pos_emb = ORIGINAL_APPLY_ROPE
    effect = rel_l2(without, logits)
    assert effect > 0.05, f"{spec['name']}: YaRN moves the logits by only {effect:.3g} (rel L2)"
    extra = {"hf_bf16_rel_l2": round(rel_l2(lb, logits), 5)} if lb is not None else {}
    return {"yarn": {"rope_parameters": spec["yarn"], "inv_freq": [float(x) for x in inv.tolist()],
                     "attention_factor": float(af), "rel_l2_of_logits_with_plain_rope": round(effect, 4)},
            **extra}


ORIGINAL_APPLY_ROPE = mm.apply_rotary_pos_emb


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                                "engine")
    only = set(sys.argv[2:])
    unknown = only - {s["name"] for s in SPECS}
    assert not unknown, f"no fixture named {sorted(unknown)}"
    os.makedirs(root, exist_ok=True)
    assert transformers.__version__ == "5.17.0", f"made with transformers 5.17.0, found {transformers.__version__}"
    specs = [s for s in SPECS if not only or s["name"] in only]
    total = sum(make_fixture(s, root) for s in specs)
    print(f"total {total / 1024 / 1024:.2f} MiB in {len(specs)} fixtures")


if __name__ == "__main__":
    main()
