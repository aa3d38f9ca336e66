"""Train the tiny MiniMax model on the retrieval tasks of data.py, resumably, on a wall-clock budget.

One call trains until --budget-s seconds of training have passed (or the planned steps are
done), checkpointing as it goes, then exports the bf16 model folder and evaluates it (eval.py).

Schedule. Phase 1 runs `total_steps` steps: LR warm-up then cosine to 10% of the peak, and the
length curriculum of data.curriculum_max_len over progress = step / total_steps (1K -> 16K
tokens). total_steps is fixed once, in the first call, from a measured step time (a few timed
forward/backward passes that do not touch the weights), so that phase 1 fits the first call's
budget; it is then stored in the state and every later call follows the same schedule. After
phase 1 training continues at the full-length mix with a constant LR (--cont-lr times the peak).

State, three forms:
- full state (--state-dir): fp32 weights and AdamW moments (bf16), in files under 16 MiB each
  (the device tool returns at most 8 files of 16 MiB), plus run.json (step, schedule, seeds,
  history). A call given --state-dir resumes exactly: same batches, same optimizer.
- cross-session state: the committed bf16 model (--init-from models/haul-tiny) plus
  tools/train_tiny/state.json; a fresh optimizer with a 30-step LR warm-up.
- nothing: a fresh model from --seed.

Batches are pure functions of (data_seed, step): see data.batch_for_step.
"""

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import model as M  # noqa: E402

SHARD_BYTES = 15 * 1024 * 1024
# AdamW moments are kept in bf16 so that weights + moments fit the device tool's 64 MiB return
MOMENT_DTYPE = getattr(torch, os.environ.get("TRAIN_TINY_MOMENT_DTYPE", "bfloat16"))


def log(msg):
    print(msg, flush=True)


# ---- batches ----------------------------------------------------------------------------

class StepBatches(torch.utils.data.Dataset):
    """Item i is the collated batch of step start + i (deterministic in the step)."""

    def __init__(self, args, start, total_steps, lm_every):
        self.args, self.start, self.total_steps, self.lm_every = args, start, total_steps, lm_every
        self.gen = None

    def __len__(self):
        return 10_000_000

    def _generator(self):
        if self.gen is None:
            from tokenizers import Tokenizer
            tok = Tokenizer.from_file(os.path.join(self.args.tokenizer_dir, "tokenizer.json"))
            self.gen = data.Generator(tok, data.Corpus(self.args.corpus, "train"))
        return self.gen

    def __getitem__(self, i):
        step = self.start + i
        progress = min(1.0, step / max(1, self.total_steps))
        samples, length = data.batch_for_step(self._generator(), self.args.data_seed, step, progress,
                                              self.args.tokens_per_step, self.args.max_len,
                                              self.args.data_version)
        return collate(samples, self._generator().eos_id, np.random.default_rng([self.args.data_seed, step, 7]),
                       self.lm_every) | {"step": step, "length": length}


def collate(samples, pad_id, rng, lm_every):
    n = max(len(s["ids"]) for s in samples)
    ids = torch.full((len(samples), n), pad_id, dtype=torch.long)
    ans = torch.zeros((len(samples), n), dtype=torch.bool)   # positions whose *next* token is answer
    first = torch.zeros((len(samples), n), dtype=torch.bool)  # ... and is the first token of an answer
    lm = torch.zeros((len(samples), n), dtype=torch.bool)    # sampled positions for the all-token loss
    for b, s in enumerate(samples):
        L = len(s["ids"])
        ids[b, :L] = torch.tensor(s["ids"])
        a = s["answer_start"]
        for st, en in s["spans"]:
            ans[b, st - 1: en - 1] = True
            first[b, st - 1] = True
        if lm_every > 0:
            pick = torch.from_numpy(rng.random(a - 1) < 1.0 / lm_every)
            lm[b, : a - 1] = pick
    return {"ids": ids, "ans": ans, "first": first, "lm": lm}


# ---- state ------------------------------------------------------------------------------

def save_state(model, opt, run, state_dir):
    os.makedirs(state_dir, exist_ok=True)
    tmp = state_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    from safetensors.torch import save_file
    weights = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()
               if not k.endswith(M.BUFFER_SUFFIXES) and "inv_freq" not in k}
    pid = {id(p): n for n, p in model.named_parameters()}
    moments = {}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p, {})
            if "exp_avg" in st:
                moments["m." + pid[id(p)]] = st["exp_avg"].to(MOMENT_DTYPE).cpu().contiguous()
                moments["v." + pid[id(p)]] = st["exp_avg_sq"].to(MOMENT_DTYPE).cpu().contiguous()
                run["adam_step"] = int(st["step"].item()) if torch.is_tensor(st["step"]) else int(st["step"])
    for prefix, tensors in (("weights", weights), ("moments", moments)):
        shard, size, k = {}, 0, 0
        for name in sorted(tensors):
            t = tensors[name]
            nbytes = t.numel() * t.element_size()
            if shard and size + nbytes > SHARD_BYTES:
                save_file(shard, os.path.join(tmp, f"{prefix}-{k}.safetensors"))
                shard, size, k = {}, 0, k + 1
            shard[name] = t
            size += nbytes
        if shard:
            save_file(shard, os.path.join(tmp, f"{prefix}-{k}.safetensors"))
    with open(os.path.join(tmp, "run.json"), "w") as f:
        json.dump(run, f)
    # replace the files in place (the device returns state_dir's files as they are)
    for fn in os.listdir(state_dir):
        if fn.startswith(("weights-", "moments-")) or fn == "run.json":
            os.remove(os.path.join(state_dir, fn))
    for fn in os.listdir(tmp):
        os.replace(os.path.join(tmp, fn), os.path.join(state_dir, fn))
    os.rmdir(tmp)


def load_state(model, opt, state_dir):
    from safetensors.torch import load_file
    weights, moments = {}, {}
    for fn in sorted(os.listdir(state_dir)):
        if not fn.endswith(".safetensors"):  # e.g. a weights-0.safetensors.xz left beside its copy
            continue
        if fn.startswith("weights-"):
            weights.update(load_file(os.path.join(state_dir, fn)))
        elif fn.startswith("moments-"):
            moments.update(load_file(os.path.join(state_dir, fn)))
    missing = [n for n, _ in model.named_parameters() if n not in weights]
    # a length-aware scale the state predates starts at zero: the trained model, unchanged
    fresh = [n for n in missing if n.endswith(".self_attn.length_scale")]
    if fresh:
        log(f"state in {state_dir} has no {fresh}: they start at zero")
    missing = [n for n in missing if n not in fresh]
    if missing:
        raise SystemExit(f"state in {state_dir} lacks weights {missing[:3]}")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in weights:
                p.copy_(weights[n].to(p.device))
    with open(os.path.join(state_dir, "run.json")) as f:
        run = json.load(f)
    if moments and opt is not None:
        # through load_state_dict, so that 'step' lands where this optimizer (fused or not) wants it
        sd = opt.state_dict()
        index = {}
        for g, group in zip(sd["param_groups"], opt.param_groups):
            for i, p in zip(g["params"], group["params"]):
                index[i] = p
        names = {id(p): n for n, p in model.named_parameters()}
        state = {}
        for i, p in index.items():
            n = names[id(p)]
            if "m." + n not in moments:  # a parameter the state predates: fresh moments
                continue
            state[i] = {"step": torch.tensor(float(run.get("adam_step", run["step"]))),
                        "exp_avg": moments["m." + n].to(p.device, torch.float32),
                        "exp_avg_sq": moments["v." + n].to(p.device, torch.float32)}
        opt.load_state_dict({"state": state, "param_groups": sd["param_groups"]})
    return run, bool(moments)


def init_from_model(model, model_dir):
    """Copy a model folder's weights into `model`. Where a layer's attention type differs (the
    folder's layer was softmax, this model's is lightning: M.ARCH's history), the lightning
    attention is taken from the nearest lower layer that is lightning in both, with out_proj zeroed
    so the converted layer starts as its norm and MoE alone and grows its attention from there."""
    ref = M.load_hf(model_dir)
    sd = ref.state_dict()
    new_types = model.config.layer_types
    old_types = ref.config.layer_types
    if len(new_types) != len(old_types):
        raise SystemExit(f"--init-from {model_dir}: {len(old_types)} layers, this model has {len(new_types)}")
    donor = {}
    for i, (a, b) in enumerate(zip(old_types, new_types)):
        if a == b:
            continue
        if not (a == "full_attention" and b == "linear_attention"):
            raise SystemExit(f"--init-from {model_dir}: layer {i} is {a} there and {b} here; only "
                             "softmax -> lightning is converted")
        d = max((j for j in range(i) if old_types[j] == new_types[j] == "linear_attention"), default=None)
        if d is None:
            raise SystemExit(f"--init-from {model_dir}: no lightning layer below layer {i} to take its attention from")
        donor[i] = d
        log(f"init: layer {i} softmax -> lightning, attention from layer {d}, out_proj zeroed")
    own = {n for n, _ in model.named_parameters()}
    dropped = [n for n in sd if n.endswith(".self_attn.length_scale") and n not in own]
    if dropped:
        log(f"init: {model_dir} has length-aware scales {dropped}, which this model (length scaling off) drops")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in sd:
                p.copy_(sd[n].to(p.device, p.dtype))
                continue
            if n.endswith(".self_attn.length_scale"):  # the folder predates the scaling: start at zero
                log(f"init: {n} starts at zero")
                continue
            parts = n.split(".")  # model.layers.I.self_attn.X.weight
            i = int(parts[2])
            if parts[:2] != ["model", "layers"] or parts[3] != "self_attn" or i not in donor:
                raise SystemExit(f"--init-from {model_dir}: no tensor for {n}")
            if parts[4] == "out_proj":
                p.zero_()
            else:
                p.copy_(sd[".".join(parts[:2] + [str(donor[i])] + parts[3:])].to(p.device, p.dtype))


def stored_run_state(args):
    """The state the run resumes from (--state-dir's run.json, else --init-state), {} for a fresh
    run: what the model is built with must be read before it is built, so ahead of load_state."""
    path = None
    if args.state_dir and os.path.exists(os.path.join(args.state_dir, "run.json")):
        path = os.path.join(args.state_dir, "run.json")
    elif args.init_from and args.init_state:
        path = args.init_state
    if path is None:
        return {}
    with open(path) as f:
        return json.load(f)


def parse_rope_scaling(text):
    """--rope-scaling: "none", or a JSON object with rope_type "yarn" (model.enable_yarn)."""
    if text == "none":
        return None
    rs = json.loads(text)
    if not isinstance(rs, dict) or rs.get("rope_type") != "yarn":
        raise SystemExit(f"--rope-scaling must be none or a JSON object with rope_type yarn, not {text}")
    return rs


# ---- the step -----------------------------------------------------------------------------

def lr_at(run, step, fresh_steps):
    peak, total, warm = run["peak_lr"], run["total_steps"], run["warmup_steps"]
    if step < total:
        if step < warm:
            base = peak * (step + 1) / warm
        else:
            prog = (step - warm) / max(1, total - warm)
            base = peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
    else:
        base = peak * run["cont_lr"]
    if fresh_steps is not None and fresh_steps < 30:  # fresh optimizer on a trained model
        base *= (fresh_steps + 1) / 30
    return base


def loss_fn(model, batch, device, amp, lm_weight, aux_coef, first_weight=1.0):
    """Answer cross-entropy (the first token of each answer weighted by first_weight, a weighted
    mean), plus lm_weight x the sampled all-token loss, plus aux_coef x MoE load balancing."""
    ids = batch["ids"].to(device, non_blocking=True)
    ans = batch["ans"].to(device, non_blocking=True)
    lm = batch["lm"].to(device, non_blocking=True)
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
        out = model.model(input_ids=ids, output_router_logits=aux_coef > 0)
        h = out.last_hidden_state
        targets = ids[:, 1:]
        hs = h[:, :-1]
        a_logits = model.lm_head(hs[ans[:, :-1]]).float()
        a_tgt = targets[ans[:, :-1]]
        ce = F.cross_entropy(a_logits, a_tgt, reduction="none")
        loss_a = ce.mean()
        hit = a_logits.argmax(-1) == a_tgt
        acc = hit.float().mean()
        is_first = batch["first"].to(device, non_blocking=True)[:, :-1][ans[:, :-1]]
        acc_first = hit[is_first].float().mean()
        if first_weight != 1.0:
            w = 1.0 + (first_weight - 1.0) * is_first.float()
            loss = (ce * w).sum() / w.sum()
        else:
            loss = loss_a
        loss_lm = torch.zeros((), device=device)
        if lm_weight > 0 and lm[:, :-1].any():
            l_logits = model.lm_head(hs[lm[:, :-1]]).float()
            loss_lm = F.cross_entropy(l_logits, targets[lm[:, :-1]])
            loss = loss + lm_weight * loss_lm
        aux = torch.zeros((), device=device)
        if aux_coef > 0 and getattr(out, "router_logits", None):
            from transformers.models.minimax.modeling_minimax import load_balancing_loss_func
            aux = load_balancing_loss_func(tuple(out.router_logits), model.config.num_local_experts,
                                           model.config.num_experts_per_tok)
            loss = loss + aux_coef * aux
    return loss, {"loss_ans": loss_a.detach(), "acc_ans": acc.detach(), "acc_first": acc_first.detach(),
                  "loss_lm": loss_lm.detach(),
                  "aux": torch.as_tensor(aux).detach()}


class WeightEMA:
    """An exponential moving average of the trainable parameters, in fp32 on their device:
    ema <- decay * ema + (1 - decay) * weights after each optimizer step, from the call's first
    weights. Not part of the resumable state: it lives for one call (its first weights are the
    committed model's when the call starts from one, which is then averaged in with the
    weight decay^steps)."""

    def __init__(self, model, decay):
        self.decay, self.updates = decay, 0
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.avg = [p.detach().float().clone() for p in self.params]

    @torch.no_grad()
    def update(self):
        torch._foreach_lerp_(self.avg, [p.detach().float() for p in self.params], 1.0 - self.decay)
        self.updates += 1

    @contextlib.contextmanager
    def swapped(self):
        """The model holds the average inside the block, its own weights again after it."""
        saved = [p.detach().clone() for p in self.params]
        with torch.no_grad():
            for p, a in zip(self.params, self.avg):
                p.copy_(a)
        try:
            yield
        finally:
            with torch.no_grad():
                for p, s in zip(self.params, saved):
                    p.copy_(s)


def freeze_below_softmax(model, arch):
    """Freeze every parameter but the softmax layers', the final norm's and lm_head's. The
    embedding and the lightning layers below the first softmax layer then build no autograd graph,
    so their activations are not kept: a long sample costs their forward only. Lightning layers
    after a softmax layer are frozen too (their weights stay), though gradients pass through them.
    AdamW skips parameters without gradients (no update, no weight decay). Returns the count frozen."""
    keep = tuple(f"model.layers.{i}." for i in arch["softmax_layers"]) + ("model.norm.", "lm_head.")
    frozen = 0
    for name, p in model.named_parameters():
        if not name.startswith(keep):
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


def calibrate(model, device, amp, tokens_per_step, max_len, vocab):
    """Seconds per step at a few lengths (forward + backward, weights untouched)."""
    times = {}
    lengths = sorted({min(max_len, n) for n in (512, 2048, 8192, 16384)})
    for L in lengths:
        bsz = max(1, tokens_per_step // L)
        ids = torch.randint(0, vocab, (bsz, L), device=device)
        ts = []
        for r in range(3):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.time()
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=amp):
                h = model.model(input_ids=ids).last_hidden_state
                loss = model.lm_head(h[:, -64:]).float().logsumexp(-1).mean()
            loss.backward()
            model.zero_grad(set_to_none=True)
            if device.type == "cuda":
                torch.cuda.synchronize()
            ts.append(time.time() - t0)
        times[L] = min(ts[1:]) if len(ts) > 1 else ts[0]
    return times


def predicted_step_time(times, max_len, version=1):
    """Mean step time under the curriculum, from measured times (interpolated in log length)."""
    xs = sorted(times)
    lx = np.log(xs)
    ty = np.array([times[x] for x in xs])

    def t(L):
        return float(np.interp(math.log(L), lx, ty))

    edges = [0.0, 0.08, 0.22, 0.42, 0.65, 1.0]
    total = 0.0
    for a, b in zip(edges[:-1], edges[1:]):
        top = data.curriculum_max_len((a + b) / 2, max_len, version)
        grid = np.exp(np.linspace(math.log(256), math.log(top), 16))
        total += (b - a) * (0.5 * t(top) + 0.5 * float(np.mean([t(g) for g in grid])))
    return total


def export_folder(model, arch, args, out_dir, bos_id, eos_id):
    """The bf16 model folder, with the tokenizer files beside it."""
    n = M.export(model, arch, out_dir, bos_id, eos_id)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.tokenizer_dir, fn)
        if os.path.abspath(src) != os.path.abspath(os.path.join(out_dir, fn)):
            shutil.copy(src, os.path.join(out_dir, fn))
    return n


def export_all(model, run, arch, args, bos_id, eos_id):
    """bf16 model folder (+ tokenizer files); with --state-json also the small cross-session state."""
    n = export_folder(model, arch, args, args.out_model, bos_id, eos_id)
    if args.state_json:
        small = {k: v for k, v in run.items() if k not in ("history", "calls", "arch", "adam_step")}
        small.setdefault("data_version", 1)
        with open(args.state_json, "w") as f:
            json.dump(small, f, indent=2)
            f.write("\n")
        base = os.path.dirname(os.path.abspath(args.state_json))
        with open(os.path.join(base, "history.jsonl"), "w") as f:
            for h in run["history"]:
                f.write(json.dumps(h) + "\n")
        with open(os.path.join(base, "calls.json"), "w") as f:
            json.dump(run["calls"], f, indent=2)
            f.write("\n")
    return n


def plot(history, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no loss plot")
        return
    steps = [h["step"] for h in history]
    fig, ax = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    ax[0].plot(steps, [h["loss_ans"] for h in history], label="answer loss", lw=1)
    ax[0].plot(steps, [h["loss_lm"] for h in history], label="all-token loss (sampled)", lw=1)
    ax[0].set_yscale("log")
    ax[0].set_ylabel("cross-entropy (nats)")
    ax[0].legend()
    ax[0].grid(alpha=0.3)
    ax[1].plot(steps, [h["acc_ans"] for h in history], label="answer token accuracy", lw=1, color="C2")
    ax2 = ax[1].twinx()
    ax2.plot(steps, [h["length"] for h in history], label="sample length (tokens)", lw=1, color="C3", alpha=0.6)
    ax2.set_yscale("log")
    ax2.set_ylabel("sample length")
    ax[1].set_ylabel("accuracy")
    ax[1].set_xlabel("step")
    ax[1].grid(alpha=0.3)
    fig.suptitle("haul-tiny training (transformers MiniMaxForCausalLM)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer-dir", required=True, help="folder with tokenizer.json/tokenizer_config.json")
    ap.add_argument("--out-model", required=True, help="model folder to export to")
    ap.add_argument("--state-dir", help="full training state to resume from and checkpoint into")
    ap.add_argument("--init-from", help="cross-session resume: a model folder written by export")
    ap.add_argument("--init-state", help="cross-session resume: tools/train_tiny/state.json")
    ap.add_argument("--log-dir", help="where run.json, history and loss.png go (default: state dir)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="training seconds for this call")
    ap.add_argument("--plan-s", type=float, default=None, help="phase-1 length in seconds (default: budget)")
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--max-len", type=int, default=16384)
    ap.add_argument("--total-steps", type=int, default=None, help="fix phase 1 instead of calibrating")
    ap.add_argument("--max-steps", type=int, default=None, help="stop when the global step reaches this")
    ap.add_argument("--replan-total-steps", type=int, default=None,
                    help="change phase 1's planned length from this call on (recorded in the state's calls)")
    ap.add_argument("--replan-max-len", type=int, default=None,
                    help="change the longest sample length from this call on (recorded in the state)")
    ap.add_argument("--data-version", type=int, default=None, choices=sorted(data.MIXES),
                    help="switch the task mix / curriculum version (data.MIXES) from this call on; kept in the state")
    ap.add_argument("--first-weight", type=float, default=None,
                    help="loss weight of each answer's first token (default: the state's, else 1); kept in the state")
    ap.add_argument("--length-scale-base", type=int, default=None,
                    help="L0 of the length-aware query scaling in softmax layers (0: off; default: the "
                         "state's, else 0); kept in the state")
    ap.add_argument("--rope-scaling", default=None,
                    help='YaRN over the partial RoPE: a JSON object with "rope_type": "yarn" (the config '
                         "key rope_scaling), or none (default: the state's, else none); kept in the state")
    ap.add_argument("--train-only", default="all", choices=["all", "softmax"],
                    help="softmax: train only the softmax attention layers, the final norm and lm_head; "
                         "the embedding and the lightning layers before them are frozen and run without "
                         "autograd (a long stage at 128K+ tokens; data version 13). For this call only")
    ap.add_argument("--impl", default="hf", choices=["fast", "hf"],
                    help="hf: transformers' own loops; fast: model.enable_fast_training's lightning and MoE "
                         "forms (the same functions, checked by check_fast.py; no faster on an H100, session 25)")
    ap.add_argument("--ema-decay", type=float, default=0.0,
                    help="also keep an exponential moving average of the trained weights (e.g. 0.998), "
                         "starting from this call's first weights, and export it to OUT_MODEL-ema "
                         "beside the last weights (session 16: nearby checkpoints differ by tens of "
                         "held-out points; their mean kept the better of both). For this call only")
    ap.add_argument("--peak-lr", type=float, default=2e-3)
    ap.add_argument("--cont-lr", type=float, default=0.1, help="LR after phase 1, as a fraction of the peak")
    ap.add_argument("--lm-weight", type=float, default=0.1)
    ap.add_argument("--lm-every", type=int, default=16, help="all-token loss on 1 in N prompt positions")
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--data-seed", type=int, default=20261201)
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--eval", default="full", choices=["full", "mid", "quick", "none"])
    ap.add_argument("--eval-budget-s", type=float, default=90.0)
    ap.add_argument("--state-json", help="write the small cross-session state (and history) here")
    ap.add_argument("--export-only", action="store_true", help="load --state-dir, export, evaluate; no training")
    args = ap.parse_args()

    t_start = time.time()
    device = torch.device(args.device)
    amp = device.type == "cuda"
    torch.manual_seed(args.seed)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    bos_id, eos_id = tok.token_to_id(data.BOS), tok.token_to_id(data.EOS)
    stored = stored_run_state(args)
    prior_lsb = int(stored.get("length_scale_base", 0))  # 0 for a fresh run or an older state
    lsb = prior_lsb if args.length_scale_base is None else args.length_scale_base
    if lsb < 0:
        raise SystemExit(f"--length-scale-base must be 0 (off) or positive, not {lsb}")
    prior_rs = stored.get("rope_scaling")  # the YaRN dict, None when off
    rs = prior_rs if args.rope_scaling is None else parse_rope_scaling(args.rope_scaling)
    arch = dict(M.ARCH, vocab_size=tok.get_vocab_size(), length_scale_base=lsb, rope_scaling=rs)
    model = M.build(arch, bos_id, eos_id, args.seed).to(device)
    if args.impl == "fast":
        M.enable_fast_training(model)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.peak_lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    log_dir = args.log_dir or args.state_dir or args.out_model
    os.makedirs(log_dir, exist_ok=True)

    fresh_start = None
    if args.state_dir and os.path.exists(os.path.join(args.state_dir, "run.json")):
        run, had_moments = load_state(model, opt, args.state_dir)
        fresh_start = None if had_moments else run["step"]
        log(f"resumed full state at step {run['step']} (moments: {had_moments})")
    elif args.init_from:
        init_from_model(model, args.init_from)
        with open(args.init_state) as f:
            run = json.load(f)
        base = os.path.dirname(os.path.abspath(args.init_state))
        run["history"], run["calls"] = [], []
        if os.path.exists(os.path.join(base, "history.jsonl")):
            with open(os.path.join(base, "history.jsonl")) as f:
                run["history"] = [json.loads(line) for line in f if line.strip()]
        if os.path.exists(os.path.join(base, "calls.json")):
            with open(os.path.join(base, "calls.json")) as f:
                run["calls"] = json.load(f)
        fresh_start = run["step"]
        log(f"cross-session resume from {args.init_from} at step {run['step']} (fresh optimizer, warm-up)")
    else:
        run = {"step": 0, "total_steps": args.total_steps, "peak_lr": args.peak_lr, "cont_lr": args.cont_lr,
               "warmup_steps": 60, "seed": args.seed, "data_seed": args.data_seed,
               "tokens_per_step": args.tokens_per_step, "max_len": args.max_len, "train_seconds": 0.0,
               "length_scale_base": lsb, "calls": [], "history": [], "arch": arch}
    changes = {}
    if args.replan_max_len and args.replan_max_len != run["max_len"]:
        changes["max_len"] = [run["max_len"], args.replan_max_len]
        run["max_len"] = args.replan_max_len
    if args.data_version and args.data_version != run.get("data_version", 1):
        changes["data_version"] = [run.get("data_version", 1), args.data_version]
        run["data_version"] = args.data_version
    if lsb != run.get("length_scale_base", 0):
        changes["length_scale_base"] = [run.get("length_scale_base", 0), lsb]
        run["length_scale_base"] = lsb
    if rs != run.get("rope_scaling"):
        changes["rope_scaling"] = [run.get("rope_scaling"), rs]
        run["rope_scaling"] = rs
    if args.first_weight is not None and args.first_weight != run.get("first_weight", 1.0):
        changes["first_weight"] = [run.get("first_weight", 1.0), args.first_weight]
        run["first_weight"] = args.first_weight
    if changes:
        log(f"state changes from step {run['step']}: {changes}")
    args.data_seed = run["data_seed"]
    args.tokens_per_step = run["tokens_per_step"]
    args.max_len = run["max_len"]
    args.data_version = run.get("data_version", 1)
    first_weight = run.get("first_weight", 1.0)
    if run["total_steps"] is None:
        times = calibrate(model, device, amp, args.tokens_per_step, args.max_len, arch["vocab_size"])
        per_step = predicted_step_time(times, args.max_len, args.data_version)
        plan = args.plan_s or args.budget_s
        run["total_steps"] = max(100, int(0.93 * plan / per_step))
        run["calibration"] = {str(k): v for k, v in times.items()}
        log(f"calibration {times} -> {per_step * 1000:.0f} ms/step -> total_steps {run['total_steps']}")

    replanned = None
    if args.replan_total_steps:
        replanned = {"at_step": run["step"], "from": run["total_steps"], "to": args.replan_total_steps}
        run["total_steps"] = args.replan_total_steps
        log(f"phase 1 replanned: {replanned}")
    if args.train_only == "softmax":
        frozen = freeze_below_softmax(model, arch)
        log(f"--train-only softmax: {frozen} parameters frozen (the embedding and the lightning layers)")
    if not 0.0 <= args.ema_decay < 1.0:
        raise SystemExit(f"--ema-decay must be in [0, 1), not {args.ema_decay}")
    ema = WeightEMA(model, args.ema_decay) if args.ema_decay else None
    n_params = sum(p.numel() for p in model.parameters())
    log(f"params {n_params} ({n_params * 2 / 1e6:.1f} MB bf16); device {device}; "
        f"{torch.cuda.get_device_name(0) if device.type == 'cuda' else 'cpu'}")

    if args.export_only:
        args.budget_s = 0.0
    ds = StepBatches(args, run["step"], run["total_steps"], args.lm_every)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, shuffle=False, num_workers=args.workers,
                                     prefetch_factor=4 if args.workers else None,
                                     persistent_workers=False, pin_memory=device.type == "cuda")
    call = {"start_step": run["step"], "budget_s": args.budget_s, "device": str(device),
            "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
            "argv": sys.argv[1:], "replanned": replanned, "changes": changes or None,
            "train_only": args.train_only, "ema_decay": args.ema_decay or None, "impl": args.impl}
    model.train()
    t_loop = time.time()   # this call's training clock (the budget)
    t_train = t_loop       # start of the segment not yet added to run["train_seconds"]
    acc_hist = {}
    last_log = time.time()
    tokens_done = 0
    it = None if args.export_only else iter(dl)
    while it is not None:
        if time.time() - t_loop > args.budget_s or (args.max_steps and run["step"] >= args.max_steps):
            break
        batch = next(it)
        step = batch["step"]
        assert step == run["step"], (step, run["step"])
        lr = lr_at(run, step, None if fresh_start is None else step - fresh_start)
        for g in opt.param_groups:
            g["lr"] = lr
        loss, stats = loss_fn(model, batch, device, amp, args.lm_weight, args.aux_coef, first_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if ema:
            ema.update()
        run["step"] = step + 1
        tokens_done += int(batch["ids"].numel())
        for k, v in stats.items():
            acc_hist.setdefault(k, []).append(v)
        if step % 10 == 0 or time.time() - last_log > 30:
            rec = {k: float(torch.stack(v).mean()) for k, v in acc_hist.items()}
            acc_hist = {}
            rec.update(step=step, length=batch["length"], bsz=int(batch["ids"].shape[0]), lr=lr,
                       gnorm=float(gnorm), t=round(run["train_seconds"] + time.time() - t_train, 1))
            run["history"].append(rec)
            log(f"step {step:5d} len {rec['length']:6d} x{rec['bsz']:3d} ans {rec['loss_ans']:.4f} "
                f"acc {rec['acc_ans']:.3f} first {rec['acc_first']:.3f} lm {rec['loss_lm']:.3f} aux {rec['aux']:.3f} lr {lr:.2e} "
                f"gn {rec['gnorm']:.2f} {tokens_done / (time.time() - t_loop) / 1e3:.0f}k tok/s "
                f"t {rec['t']:.0f}s")
            last_log = time.time()
        if args.state_dir and run["step"] % args.ckpt_every == 0:
            run["train_seconds"] += time.time() - t_train
            t_train = time.time()
            save_state(model, opt, run, args.state_dir)
    del it, dl
    run["train_seconds"] += time.time() - t_train
    call.update(end_step=run["step"], train_s=round(time.time() - t_start, 1))
    if not args.export_only:
        run["calls"].append(call)
        if args.state_dir:
            save_state(model, opt, run, args.state_dir)
    n = export_all(model, run, arch, args, bos_id, eos_id)
    if ema and not args.export_only:
        with ema.swapped():
            export_folder(model, arch, args, args.out_model + "-ema", bos_id, eos_id)
        log(f"exported the weights' EMA (decay {args.ema_decay}, {ema.updates} updates) to {args.out_model}-ema")
    plot(run["history"], os.path.join(log_dir, "loss.png"))
    log(f"exported {n} params to {args.out_model}; step {run['step']}; "
        f"train seconds (all calls) {run['train_seconds']:.0f}; this call {time.time() - t_start:.0f}s")

    if args.eval != "none":
        import eval as E
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
        res = E.run_eval(args.out_model, args.corpus, device, quick=args.eval,
                         budget_s=args.eval_budget_s)
        res["step"] = run["step"]
        with open(os.path.join(log_dir, "eval.json"), "w") as f:
            json.dump(res, f, indent=2)
        E.print_report(res)


if __name__ == "__main__":
    main()
