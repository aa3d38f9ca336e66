#!/usr/bin/env python3
"""Makes the token fixtures of tests/ingest (run with a Python that has HF tokenizers 0.23.2,
e.g. /work/pyenv/bin/python tools/ingest_tok_fixtures.py, from the repository root).

Writes tests/ingest/fixtures/:
  tok_gpt2.json       a GPT-2-style byte-level BPE (ByteLevel pre-tokenizer with its regex)
  tok_split_nfc.json  a GPT-4o/MiniMax-style one (NFC, Split with the GPT-4o pattern, ByteLevel)
  expected.json       for the fixture tree of test_ingest_formats framed in --sort path order:
                      the framed text's SHA-256 and, per tokenizer, HF's ids and the token index
                      of every document boundary (what token_start/token_end must be)
Both tokenizers are trained here, by tokenizers itself, on a fixed corpus, so the files are
reproducible; the expected ids are HF's encode(framed_text, add_special_tokens=False).
"""
import hashlib
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers, Regex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "ingest"))
import ingest_e2e as E  # noqa: E402
import test_ingest_formats as F  # noqa: E402

GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. " * 20,
    "int main(void) {\n    return 0;\n}\n" * 30,
    '<document path="src/main.c">\n#include <stdio.h>\n</document>\n' * 30,
    "def f(x):\n    return x * 2  # doubled\n" * 30,
    "Grüße aus München, 世界, naïve café, e\u0301, 🌍👨‍👩‍👧\n" * 20,
    "# Title\r\n\r\nSome markdown with **bold** and `code`.\r\n" * 20,
    "x = [1, 2, 3, 10, 100, 1000, 12345]\n" * 20,
]


def gpt2():
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(CORPUS, tr)
    return t


def split_nfc():
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4O), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(CORPUS, tr)
    return t


def boundaries(framed):
    """Byte offsets of every document boundary in the framed text, in order."""
    out, at = [], 0
    for p, c in F.expected_docs(F.FILES):
        at += len(E.frame(p, c))
        out.append(at)
    assert at == len(framed)
    return out


def token_counts(enc, text, byte_marks):
    """For each byte offset, the number of tokens whose text starts before it (HF char offsets
    mapped to bytes)."""
    char_to_byte = [0] * (len(text) + 1)
    b = 0
    for i, ch in enumerate(text):
        char_to_byte[i] = b
        b += len(ch.encode("utf-8"))
    char_to_byte[len(text)] = b
    starts = [char_to_byte[s] for s, _ in enc.offsets]
    import bisect
    return [bisect.bisect_left(starts, m) for m in byte_marks]


def main():
    out = os.path.join(ROOT, "tests", "ingest", "fixtures")
    os.makedirs(out, exist_ok=True)
    framed = b"".join(E.frame(p, c) for p, c in F.expected_docs(F.FILES))
    text = framed.decode("utf-8")
    marks = boundaries(framed)
    exp = {"framed_sha256": hashlib.sha256(framed).hexdigest(), "framed_bytes": len(framed), "tokenizers": {}}
    for name, make in (("tok_gpt2", gpt2), ("tok_split_nfc", split_nfc)):
        t = make()
        path = os.path.join(out, name + ".json")
        t.save(path)
        t = Tokenizer.from_file(path)  # exactly what the test loads
        enc = t.encode(text, add_special_tokens=False)
        exp["tokenizers"][name] = {"ids": enc.ids, "boundaries": token_counts(enc, text, [0] + marks)}
        print("%s: vocab %d, %d tokens" % (name, t.get_vocab_size(), len(enc.ids)))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(exp, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
