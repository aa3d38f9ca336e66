"""Train the tiny model's tokenizer: byte-level BPE in the MiniMax-Text-01 style, with HF tokenizers.

Shape of the result (tokenizer.json):
- no normalizer;
- pre-tokenizer Sequence[Split(regex, isolated), ByteLevel(add_prefix_space=false, use_regex=false)],
  the regex splitting contractions, letter runs (with one leading non-letter), single digits,
  punctuation runs, newlines and spaces; single digits make every number a digit sequence, which
  is what retrieval copies;
- model BPE over the 256 byte symbols, merges learned from the corpus training split only;
- decoder ByteLevel; no post-processor (the chat template supplies <beginning_of_sentence>);
- added special tokens with MiniMax-Text-01's names: <end_of_document> (its unk_token),
  <begin_of_document>, <beginning_of_sentence> (bos), <end_of_sentence> (eos), <function_call>.

tokenizer_config.json carries MiniMax-Text-01's chat template verbatim (see CHAT_TEMPLATE_JSON) so
that a runner implementing that template natively serves this model and the real one alike.
"""

import argparse
import json
import lzma
import os
import random
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402

SPECIAL_TOKENS = ["<end_of_document>", "<begin_of_document>", "<beginning_of_sentence>", "<end_of_sentence>",
                  "<function_call>"]
SPLIT_REGEX = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# MiniMax-Text-01's tokenizer_config.json "chat_template" value, exactly as that file spells it
# in JSON (MiniMaxAI/MiniMax-Text-01 on the Hugging Face hub, tokenizer_config.json at commit
# 7466de1, "Guide document for function calling (#32)"); json.loads gives the Jinja source.
CHAT_TEMPLATE_JSON = r'''"{% for message in messages %}{% if message['role'] == 'system' %}{{ '<beginning_of_sentence>system ai_setting=assistant\\n' + message['content'][0]['text'] + '<end_of_sentence>\\n'}}{% elif message['role'] == 'user' %}{{ '<beginning_of_sentence>user name=user\\n' + message['content'][0]['text'] + '<end_of_sentence>\\n'}}{% elif message['role'] == 'assistant' %}{{ '<beginning_of_sentence>ai name=assistant\\n' }}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{{ '<end_of_sentence>\\n' }}{% elif message['role'] == 'function' %}{{ '<beginning_of_sentence>system function_response=functions\\n' + '{\"name\": \"' + message['name'] + '\", \"response\": ' + message['content'][0]['text'] + '}' + '<end_of_sentence>\\n'}}{% endif %}{% endfor %}{% if tools %}{% for function in tools %}{{ '<beginning_of_sentence>system function_setting=functions\\n' + function | tojson + '<end_of_sentence>\\n'}}{% endfor %}{% endif %}{% if add_generation_prompt %}{{ '<beginning_of_sentence>ai name=assistant\\n' }}{% endif %}"'''
CHAT_TEMPLATE = json.loads(CHAT_TEMPLATE_JSON)

TOKENIZER_CONFIG = {
    "add_prefix_space": False,
    "bos_token": "<beginning_of_sentence>",
    "clean_up_tokenization_spaces": False,
    "eos_token": "<end_of_sentence>",
    "model_max_length": 40960000,
    "tokenizer_class": "GPT2Tokenizer",
    "unk_token": "<end_of_document>",
    "chat_template": CHAT_TEMPLATE,
}


def synthetic_lines(words, n=6000, seed=0):
    """Framing, role lines and task phrasings, so that their pieces get merges of their own."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.choice(words)
        v = str(rng.randrange(10**6, 10**7))
        needle, q = rng.choice(data.TRAIN_MAGIC)
        out.append(data.ROLE_USER + needle.format(k=k, v=v) + "\n" + q.format(k=k) + data.EOS + "\n"
                   + data.ROLE_AI + v + data.EOS + "\n")
        name = "_".join(rng.choice(words).upper() for _ in range(2))
        out.append(data.frame(f"src/{k}/{rng.choice(words)}.c", data.PLANT_C.format(name=name, v=v)))
        out.append(data.REPO_FILE_Q.format(name=name) + " " + data.REPO_VALUE_Q.format(name=name))
    return out


def train(corpus_dir: str, vocab_size: int):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    with lzma.open(os.path.join(corpus_dir, "train.jsonl.xz"), "rt", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    with open(os.path.join(corpus_dir, "words.json")) as f:
        words = json.load(f)["train"]
    texts += synthetic_lines(words)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def check(tok: Tokenizer, out_dir: str):
    """The saved files load in transformers and render MiniMax's role lines as data.py writes them."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(out_dir)
    msgs = [{"role": "system", "content": [{"type": "text", "text": "S"}]},
            {"role": "user", "content": [{"type": "text", "text": "U"}]}]
    text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    want = data.ROLE_SYSTEM + "S" + data.EOS + "\n" + data.ROLE_USER + "U" + data.EOS + "\n" + data.ROLE_AI
    assert text == want, (text, want)
    for s in SPECIAL_TOKENS:
        assert len(tok.encode(s).ids) == 1, s
    sample = 'int x = 1234567;\n<document path="a/b.c">\nThe special magic apple number is: 7654321.\n'
    assert tok.decode(tok.encode(sample).ids) == sample
    assert hf.eos_token_id == tok.token_to_id(data.EOS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True, help="model folder to write tokenizer files into")
    ap.add_argument("--vocab-size", type=int, default=4096)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tok = train(args.corpus, args.vocab_size)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(TOKENIZER_CONFIG, f, indent=2, ensure_ascii=False)
        f.write("\n")
    check(tok, args.out)
    print(f"vocab {tok.get_vocab_size()} written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
