"""The tiny model: transformers' MiniMaxForCausalLM, plus the one thing 5.17 cannot express.

Architecture (MiniMax-Text-01's pattern, scaled down): 6 layers, lightning attention in layers
0-4 and softmax attention (GQA) in layer 5, the last (until step 6570 layer 2 was softmax too); MoE with 4 experts, top-2, in every
layer; post-norm residuals with DeepNet-style alpha = (2 * layers) ** 0.25 as MiniMax-Text-01 has
(3.5566 = 160 ** 0.25 there); untied lm_head; RoPE on the first `rotary_dim` of each head's dims.

Partial RoPE. transformers 5.17's MiniMax rotates every head dim and ignores
partial_rotary_factor, while the original release (and vLLM's minimax_text_01, and longhaul)
rotate only the first rotary_dim dims: neox style (rotate-half within those dims), inverse
frequencies theta ** (-2i / rotary_dim) for i < rotary_dim / 2, the other dims untouched.
`enable_partial_rope` makes a built or loaded HF model do exactly that, by giving the rotary
embedding rotary_dim/2 frequencies and replacing the module's apply_rotary_pos_emb with one that
rotates the leading cos.shape[-1] dims. No other modeling code is replaced.

Length-aware query scaling (ARCH["length_scale_base"] = L0 > 0; off by default; docs/design.md).
Every softmax attention layer gets a learned parameter `self_attn.length_scale` [heads] (zeros at
init: the plain model), and a query at 0-based position p in head h is multiplied, after RoPE and
before q k^T, by 1 + s_h max(0, ln((p + 1) / L0)). `enable_length_scale` does it without touching
the modeling code: it wraps the attention functions transformers dispatches to (sdpa and eager),
and the wrapper scales the query of any module carrying a length_scale, at the position_ids the
decoder layer passes down. Exported as config key attn_length_scale_base and tensors
model.layers.N.self_attn.length_scale, which longhaul's engine reads.

YaRN (config key rope_scaling, rope_type "yarn"; docs/design.md): `enable_yarn` gives the
rotary embedding transformers' own YaRN frequencies over the rotary_dim dims and its cos/sin
factor (`yarn_tables`); `load_hf` applies it when hf_config.json carries rope_scaling.

Checkpoint forms written by `export`:
- config.json: the original `minimax_text_01` form (attn_type_list 0 = lightning, 1 = softmax,
  layernorm_*_alpha/beta, rotary_dim, rope_theta, postnorm, shared_intermediate_size 0), which
  longhaul loads natively;
- hf_config.json: the transformers `minimax` form of the same model, for rerunning the HF forward
  (load with `load_hf`, which also re-enables partial RoPE);
- model.safetensors in bf16 with the tensor names transformers 5.17's save_pretrained writes
  (per-expert block_sparse_moe.experts.E.w1/w2/w3), without the lightning decay buffers, which
  are functions of the config and are recomputed on load; with the length-aware scaling on, also
  each softmax layer's self_attn.length_scale.
"""

import json
import os

import torch
from transformers import MiniMaxConfig, MiniMaxForCausalLM
from transformers.models.minimax import modeling_minimax

ARCH = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 192,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 32,
    "rotary_dim": 8,
    "rope_theta": 10_000_000.0,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    # [2, 5] for steps 0-6570 (sessions 1-4); [5] from step 6571 (session 9), layer 2 converted to
    # lightning by train.init_from_model: one softmax layer of 8 x 32 halves the softmax attention
    # that bounds the CPU demo (issue 6: 200K tokens in under 2 minutes on 2 cores)
    "softmax_layers": [5],
    "block_size": 256,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 10_240_000,
    # L0 of the length-aware query scaling in softmax layers; 0: off (train.py --length-scale-base)
    "length_scale_base": 0,
    # YaRN over the partial RoPE: None (off) or the config's rope_scaling dict, rope_type "yarn"
    # (train.py --rope-scaling; exported to config.json and hf_config.json as rope_scaling)
    "rope_scaling": None,
}


def layer_types(arch):
    return ["full_attention" if i in arch["softmax_layers"] else "linear_attention"
            for i in range(arch["num_hidden_layers"])]


def deepnorm_alpha(arch):
    return (2 * arch["num_hidden_layers"]) ** 0.25


def hf_config(arch, bos_id, eos_id):
    a = deepnorm_alpha(arch)
    return MiniMaxConfig(
        vocab_size=arch["vocab_size"], hidden_size=arch["hidden_size"],
        intermediate_size=arch["intermediate_size"], num_hidden_layers=arch["num_hidden_layers"],
        num_attention_heads=arch["num_attention_heads"], num_key_value_heads=arch["num_key_value_heads"],
        head_dim=arch["head_dim"], hidden_act="silu", max_position_embeddings=arch["max_position_embeddings"],
        rms_norm_eps=arch["rms_norm_eps"], tie_word_embeddings=False,
        num_local_experts=arch["num_local_experts"], num_experts_per_tok=arch["num_experts_per_tok"],
        router_aux_loss_coef=0.001, layer_types=layer_types(arch), block_size=arch["block_size"],
        rope_parameters={"rope_type": "default", "rope_theta": arch["rope_theta"],
                         "partial_rotary_factor": arch["rotary_dim"] / arch["head_dim"]},
        full_attn_alpha_factor=a, full_attn_beta_factor=1.0, linear_attn_alpha_factor=a,
        linear_attn_beta_factor=1.0, mlp_alpha_factor=a, mlp_beta_factor=1.0,
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=None,
    )


def original_config(arch, bos_id, eos_id):
    """The minimax_text_01 form, with the keys of MiniMax-Text-01's own config.json."""
    a = deepnorm_alpha(arch)
    return {
        "architectures": ["MiniMaxText01ForCausalLM"],
        "model_type": "minimax_text_01",
        "attention_dropout": 0.0,
        "attn_type_list": [1 if t == "full_attention" else 0 for t in layer_types(arch)],
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "head_dim": arch["head_dim"],
        "hidden_act": "silu",
        "hidden_size": arch["hidden_size"],
        "initializer_range": 0.02,
        "intermediate_size": arch["intermediate_size"],
        "layernorm_full_attention_alpha": a,
        "layernorm_full_attention_beta": 1.0,
        "layernorm_linear_attention_alpha": a,
        "layernorm_linear_attention_beta": 1.0,
        "layernorm_mlp_alpha": a,
        "layernorm_mlp_beta": 1.0,
        "max_position_embeddings": arch["max_position_embeddings"],
        "num_attention_heads": arch["num_attention_heads"],
        "num_experts_per_tok": arch["num_experts_per_tok"],
        "num_hidden_layers": arch["num_hidden_layers"],
        "num_key_value_heads": arch["num_key_value_heads"],
        "num_local_experts": arch["num_local_experts"],
        "output_router_logits": False,
        "postnorm": True,
        "rms_norm_eps": arch["rms_norm_eps"],
        "rope_theta": arch["rope_theta"],
        "rotary_dim": arch["rotary_dim"],
        "router_aux_loss_coef": 0.001,
        "router_jitter_noise": 0.0,
        "shared_intermediate_size": 0,
        "shared_moe_mode": "sigmoid",
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": arch["vocab_size"],
    } | ({"attn_length_scale_base": arch["length_scale_base"]} if arch.get("length_scale_base") else {}) \
      | ({"rope_scaling": dict(arch["rope_scaling"])} if arch.get("rope_scaling") else {})


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_partial_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    """RoPE on the leading cos.shape[-1] dims of each head (neox style), the rest passed through."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    r = cos.shape[-1]
    q_rot, q_pass = q[..., :r], q[..., r:]
    k_rot, k_pass = k[..., :r], k[..., r:]
    q_rot = q_rot * cos + _rotate_half(q_rot) * sin
    k_rot = k_rot * cos + _rotate_half(k_rot) * sin
    return torch.cat((q_rot, q_pass), dim=-1), torch.cat((k_rot, k_pass), dim=-1)


def enable_partial_rope(model, rotary_dim: int, theta: float):
    modeling_minimax.apply_rotary_pos_emb = apply_partial_rotary_pos_emb
    rot = model.model.rotary_emb
    dev = rot.inv_freq.device
    inv = 1.0 / (theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=dev) / rotary_dim))
    rot.inv_freq = inv
    rot.original_inv_freq = inv.clone()
    return model


def yarn_tables(config, theta: float, rotary_dim: int, params: dict):
    """transformers' own YaRN frequencies and cos/sin factor over the first rotary_dim dims: its
    _compute_yarn_parameters on a copy of the config whose rope_parameters hold params (factor,
    original_max_position_embeddings, beta_fast, ...) and partial_rotary_factor rotary_dim /
    head_dim (the function sizes its table by that factor). longhaul's lh_rope_inv_freq_yarn is
    checked against these tables (tests/fixtures/engine/*yarn*)."""
    import copy

    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    cfg = copy.deepcopy(config)
    keys = {k: v for k, v in params.items() if k not in ("rope_type", "type")}
    cfg.rope_parameters = {"rope_type": "yarn", "rope_theta": theta, **keys,
                           "partial_rotary_factor": rotary_dim / cfg.head_dim}
    inv, factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, None)
    assert inv.shape == (rotary_dim // 2,), inv.shape
    return inv.to(torch.float32), float(factor)


def enable_yarn(model, rotary_dim: int, theta: float, params: dict):
    """YaRN on the partial RoPE (config key rope_scaling with rope_type "yarn", which longhaul's
    engine reads): the rotary embedding gets yarn_tables' frequencies and cos/sin factor. Call after
    enable_partial_rope."""
    inv, factor = yarn_tables(model.config, theta, rotary_dim, params)
    rot = model.model.rotary_emb
    rot.inv_freq = inv.to(rot.inv_freq.device)
    rot.original_inv_freq = rot.inv_freq.clone()
    rot.attention_scaling = factor
    return model


def length_scale_factor(scale, position_ids, base: int):
    """[B, H, T, 1] fp32 factors 1 + s_h max(0, ln((p + 1) / base)) for scale [H] and position_ids
    [B, T]: the log in float64, rounded to float32, then s_h g and 1 + (s_h g) each in float32, as
    kernels/cpu's lh_length_scale_factor forms them."""
    g = torch.log((position_ids.to(torch.float64) + 1) / base).clamp(min=0).to(torch.float32)
    return 1 + scale.to(torch.float32)[None, :, None, None] * g[:, None, :, None]


def _length_scaled(inner):
    """An attention function that first scales the query of a module carrying length_scale."""
    def attention(module, query, key, value, attention_mask, **kwargs):
        scale = getattr(module, "length_scale", None)
        if scale is not None:
            pos = kwargs.get("position_ids")
            if pos is None:
                raise RuntimeError("length-aware query scaling needs position_ids in the attention call")
            f = length_scale_factor(scale, pos.to(query.device), module.length_scale_base)
            query = query * f.to(query.dtype)
        return inner(module, query, key, value, attention_mask, **kwargs)
    attention.lh_length_scaled = True
    return attention


def enable_length_scale(model, base: int):
    """Give each softmax attention layer a learned length_scale [heads] (zeros, unless it has one)
    and scale its queries by position (the module docstring). base <= 0: the model is unchanged."""
    if base <= 0:
        return model
    impl = model.config._attn_implementation
    if impl not in ("sdpa", "eager"):
        raise ValueError(f"length-aware query scaling is wired into the sdpa and eager attention only, not {impl}")
    fns = modeling_minimax.ALL_ATTENTION_FUNCTIONS
    if not getattr(fns["sdpa"], "lh_length_scaled", False):
        fns["sdpa"] = _length_scaled(fns["sdpa"])
    if not getattr(modeling_minimax.eager_attention_forward, "lh_length_scaled", False):
        modeling_minimax.eager_attention_forward = _length_scaled(modeling_minimax.eager_attention_forward)
    heads = model.config.num_attention_heads
    for layer in model.model.layers:
        att = layer.self_attn
        if not isinstance(att, modeling_minimax.MiniMaxAttention):
            continue
        if getattr(att, "length_scale", None) is None:
            att.length_scale = torch.nn.Parameter(torch.zeros(heads, device=att.q_proj.weight.device))
        att.length_scale_base = int(base)
    return model


def _lightning_forward_blocks(self, hidden_states, position_embeddings=None, attention_mask=None,
                              past_key_values=None, **kwargs):
    """MiniMaxLightningAttention.forward without a cache, every block at once (see
    enable_fast_training). Positions are cut into blocks of block_size (the last padded with zeros,
    whose outputs are dropped and whose k, v add nothing); per block n, with the module's own decay
    buffers (query_decay, key_decay, diagonal_decay, slope_rate s):
        out_n = ((Q_n K_n^T) * diagonal_decay) V_n + (Q_n * query_decay) S_n
        S_n   = sum_{m < n} exp(-s block_size (n - 1 - m)) (K_m * key_decay)^T V_m
    which is the recurrence S_{n+1} = S_n exp(-s block_size) + (K_n * key_decay)^T V_n that
    transformers' loop runs one block at a time, summed in closed form (a [blocks, blocks] matrix
    of decays times the blocks' K^T V, in fp32 as the loop's fp32 state is). The second return
    value, the loop's final state, is None: only a cache reads it, and with a cache the module's
    own forward runs."""
    if past_key_values is not None:
        return type(self).forward(self, hidden_states, position_embeddings, attention_mask,
                                  past_key_values=past_key_values, **kwargs)
    B, T, _ = hidden_states.shape
    H, d, bs = self.num_attention_heads, self.head_dim, self.block_size
    nb = (T + bs - 1) // bs
    qkv = self.act_fn(self.qkv_proj(hidden_states))
    qkv = modeling_minimax.apply_mask_to_padding_states(qkv, attention_mask)
    if nb * bs != T:
        qkv = torch.nn.functional.pad(qkv, (0, 0, 0, nb * bs - T))
    qkv = qkv.reshape(B, nb, bs, H, 3 * d).permute(0, 3, 1, 2, 4)  # [B, H, blocks, bs, 3d]
    q, k, v = torch.split(qkv, d, dim=-1)
    diag = self.diagonal_decay[0][:, None]  # [H, 1, bs, bs]
    intra = torch.matmul(torch.matmul(q, k.transpose(-1, -2)) * diag, v)
    kv = torch.matmul((k * self.key_decay[:, None]).transpose(-1, -2), v)  # [B, H, blocks, d, d]
    n = torch.arange(nb, device=qkv.device)
    gap = (n[:, None] - 1 - n[None, :]).to(torch.float32)  # [blocks, blocks]
    slope = self.slope_rate.reshape(H, 1, 1).to(torch.float32)
    decay = torch.where(gap >= 0, torch.exp(-slope * bs * gap.clamp(min=0)), torch.zeros((), device=qkv.device))
    with torch.autocast(device_type=qkv.device.type, enabled=False):
        state = torch.matmul(decay, kv.float().reshape(B, H, nb, d * d)).reshape(B, H, nb, d, d)
    inter = torch.matmul(q * self.query_decay[:, None], state)
    out = (intra + inter).permute(0, 2, 3, 1, 4).reshape(B, nb * bs, H * d)[:, :T]
    out = self.norm(out)
    out = torch.sigmoid(self.output_gate(hidden_states)) * out
    return self.out_proj(out), None


def _experts_forward_dense(self, hidden_states, top_k_index, top_k_weights):
    """MiniMaxExperts.forward with every expert applied to every token and weighted by the routing
    weights scattered into [tokens, experts] (zero where a token did not pick the expert): the same
    sum and the same gradients as transformers' per-expert loop (an unpicked expert's weight 0
    passes no gradient), with none of its data-dependent shapes, which stall the GPU for the host
    once per expert and layer. The extra FLOPs (all 4 experts, not the top 2) cost little at this
    width."""
    w = torch.zeros(hidden_states.shape[0], self.num_experts, device=hidden_states.device,
                    dtype=top_k_weights.dtype).scatter(1, top_k_index, top_k_weights)
    gate, up = torch.matmul(hidden_states[None], self.gate_up_proj.transpose(1, 2)).chunk(2, dim=-1)
    out = torch.matmul(self.act_fn(gate) * up, self.down_proj.transpose(1, 2))  # [E, tokens, hidden]
    return (out * w.t()[:, :, None]).sum(0).to(hidden_states.dtype)


def enable_fast_training(model):
    """Replace, on this model's modules only, transformers' lightning attention loop (one Python
    iteration per 256-token block: about 30 kernel launches per block and layer with the backward,
    which bound a 32K-token training step) and its per-expert MoE loop by the forms above: the same
    functions of the same parameters, up to the order of fp32 sums (check_fast.py compares the loss
    and every gradient). Training only: eval.py, the fixtures and every measurement load the model
    with load_hf, which leaves transformers' code as it is."""
    import types
    for layer in model.model.layers:
        att = layer.self_attn
        if isinstance(att, modeling_minimax.MiniMaxLightningAttention):
            att.forward = types.MethodType(_lightning_forward_blocks, att)
        layer.mlp.experts.forward = types.MethodType(_experts_forward_dense, layer.mlp.experts)
    return model


def build(arch, bos_id, eos_id, seed: int):
    torch.manual_seed(seed)
    cfg = hf_config(arch, bos_id, eos_id)
    cfg._attn_implementation = "sdpa"
    model = MiniMaxForCausalLM(cfg)
    enable_length_scale(model, arch.get("length_scale_base", 0))
    enable_partial_rope(model, arch["rotary_dim"], arch["rope_theta"])
    if arch.get("rope_scaling"):
        enable_yarn(model, arch["rotary_dim"], arch["rope_theta"], arch["rope_scaling"])
    return model


BUFFER_SUFFIXES = ("slope_rate", "query_decay", "key_decay", "diagonal_decay")


def export(model, arch, out_dir: str, bos_id: int, eos_id: int):
    """Write config.json (original form), hf_config.json and bf16 model.safetensors."""
    import tempfile

    from safetensors.torch import load_file, save_file
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # save_pretrained applies transformers' own renaming to the per-expert w1/w2/w3 form
        model.save_pretrained(tmp, safe_serialization=True)
        tensors = load_file(os.path.join(tmp, "model.safetensors"))
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in tensors.items() if not k.endswith(BUFFER_SUFFIXES)}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(original_config(arch, bos_id, eos_id), f, indent=2)
        f.write("\n")
    hf = hf_config(arch, bos_id, eos_id).to_dict()
    hf["rotary_dim"] = arch["rotary_dim"]
    if arch.get("length_scale_base"):
        hf["attn_length_scale_base"] = arch["length_scale_base"]
    if arch.get("rope_scaling"):
        hf["rope_scaling"] = dict(arch["rope_scaling"])
    hf["_comment"] = ("transformers form of this model; transformers 5.17 ignores partial_rotary_factor "
                      "for MiniMax: load with tools/train_tiny/model.py load_hf to get RoPE on the first "
                      "rotary_dim dims only")
    hf["torch_dtype"] = "bfloat16"
    hf.pop("dtype", None)
    with open(os.path.join(out_dir, "hf_config.json"), "w") as f:
        json.dump(hf, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos_id, "eos_token_id": eos_id, "do_sample": False,
                   "max_new_tokens": 64}, f, indent=2)
        f.write("\n")
    return sum(v.numel() for v in tensors.values())


def load_hf(model_dir: str, dtype=torch.float32, device="cpu"):
    """The HF MiniMaxForCausalLM of a model folder written by `export`, partial RoPE enabled."""
    import tempfile

    with open(os.path.join(model_dir, "hf_config.json")) as f:
        raw = json.load(f)
    rotary_dim = raw.pop("rotary_dim")
    length_scale_base = raw.pop("attn_length_scale_base", 0)
    # YaRN over the partial RoPE: longhaul's key, never transformers' own (its legacy rope_scaling
    # would win over rope_parameters and size the table by the whole head)
    rope_scaling = raw.pop("rope_scaling", None)
    raw.pop("_comment", None)
    with tempfile.TemporaryDirectory() as tmp:
        # from_pretrained does the per-expert -> fused renaming that save_pretrained undid
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(raw, f)
        os.symlink(os.path.abspath(os.path.join(model_dir, "model.safetensors")), os.path.join(tmp, "model.safetensors"))
        model = MiniMaxForCausalLM.from_pretrained(tmp, dtype=dtype, attn_implementation="sdpa")
    # the decay buffers are not in the file: recompute them exactly, in fp32, from the config
    for layer in model.model.layers:
        att = layer.self_attn
        if isinstance(att, modeling_minimax.MiniMaxLightningAttention):
            slope = att.get_slope_rate()
            qd, kd, dd = att.decay_factors(slope)
            att.slope_rate = slope
            att.query_decay, att.key_decay, att.diagonal_decay = qd, kd, dd
    if length_scale_base:
        # from_pretrained drops the tensors it has no parameter for; give them their parameters back
        from safetensors import safe_open
        enable_length_scale(model, length_scale_base)
        with safe_open(os.path.join(model_dir, "model.safetensors"), framework="pt") as f:
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if name.endswith(".self_attn.length_scale"):
                        p.copy_(f.get_tensor(name).to(p.dtype))
    model = model.to(device)
    enable_partial_rope(model, rotary_dim, model.config.rope_parameters["rope_theta"])
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) == "yarn":
        enable_yarn(model, rotary_dim, model.config.rope_parameters["rope_theta"], rope_scaling)
    elif rope_scaling:
        raise ValueError(f"{model_dir}/hf_config.json: rope_scaling {rope_scaling} is not YaRN")
    model.eval()
    return model
