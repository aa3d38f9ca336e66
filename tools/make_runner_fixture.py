#!/usr/bin/env python3
"""Make tests/fixtures/runner/tiny-chat: a tiny *random* MiniMax model with a real BPE tokenizer and
MiniMax-Text-01's chat template, for the batch runner's end-to-end tests.

Its answers are noise: the runner tests check mechanics (one prefill per shared prefix, resume
after kill -9 gives identical output, per-line errors, shards), not knowledge. The tokenizer is
trained with HF `tokenizers` in the MiniMax-Text-01 style (Split regex + ByteLevel, its special
tokens); the model is transformers' MiniMaxForCausalLM with random weights, saved with
save_pretrained. The chat template is the one MiniMax-Text-01 ships in tokenizer_config.json.

Run with transformers 5.17 / tokenizers 0.23 (e.g. /work/pyenv/bin/python tools/make_runner_fixture.py).
Deterministic: fixed seeds and a fixed training text (this repository's own C sources).
"""
import glob
import json
import os
import sys

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import MiniMaxConfig, MiniMaxForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "runner", "tiny-chat")
SPECIAL = ["<end_of_document>", "<begin_of_document>", "<beginning_of_sentence>", "<end_of_sentence>"]
PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<beginning_of_sentence>system "
    "ai_setting=assistant\\n' + message['content'][0]['text'] + '<end_of_sentence>\\n'}}{% elif message['role'] "
    "== 'user' %}{{ '<beginning_of_sentence>user name=user\\n' + message['content'][0]['text'] + "
    "'<end_of_sentence>\\n'}}{% elif message['role'] == 'assistant' %}{{ '<beginning_of_sentence>ai "
    "name=assistant\\n' }}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] }}{% endfor %}{{ '<end_of_sentence>\\n' }}{% endif %}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<beginning_of_sentence>ai name=assistant\\n' }}{% endif %}")


def main():
    os.makedirs(OUT, exist_ok=True)
    texts = []
    for p in sorted(glob.glob(os.path.join(ROOT, "util", "*.[ch]"))):
        with open(p, encoding="utf-8") as f:
            texts.append(f.read())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.save(os.path.join(OUT, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<beginning_of_sentence>", "eos_token": "<end_of_sentence>",
                   "unk_token": "<end_of_document>", "tokenizer_class": "GPT2Tokenizer",
                   "add_prefix_space": False, "chat_template": TEMPLATE}, f, indent=2)

    torch.manual_seed(1234)
    cfg = MiniMaxConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4,
                        num_experts_per_tok=2, block_size=64, max_position_embeddings=1 << 20,
                        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                        bos_token_id=SPECIAL.index("<beginning_of_sentence>"),
                        eos_token_id=SPECIAL.index("<end_of_sentence>"), tie_word_embeddings=True,
                        initializer_range=0.2)
    model = MiniMaxForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model.save_pretrained(OUT, safe_serialization=True)
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("A tiny random MiniMax model (answers are noise) with a real BPE tokenizer and "
                "MiniMax-Text-01's chat template, for the runner's end-to-end tests.\n"
                "Made by tools/make_runner_fixture.py.\n")
    print("wrote", OUT, "vocab", vocab, file=sys.stderr)


if __name__ == "__main__":
    main()
