#!/usr/bin/env python3
"""Write tests/fixtures/tokenizer/models/<name>.cases.jsonl: strings and HF tokenizers' ids for the
tokenizers longhaul ships with models (models/haul-tiny, the runner's test model), so
tests/tokenizer/model_tokenizers.sh checks them even without pip. Run with tokenizers 0.23.2.

Also importable: cases(seed, n) is the string generator the live test uses."""
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"haul-tiny": "models/haul-tiny/tokenizer.json",
          "runner-tiny-chat": "tests/fixtures/runner/tiny-chat/tokenizer.json"}
PIECES = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n\r'\".,;:!?-_()[]{}<>/\\#*=+")
          + ["\u017f", "\u212a", "\u00df", "\u00e9", "\u65e5\u672c\u8a9e", "\U0001f600", "\U0001f469\u200d\U0001f469\u200d\U0001f467",
             "\U0001f44d\U0001f3fd", "e\u0301", "\u00a0", "\u3000", "'s", "'S", "'ll", "'LL", "'ve", "'RE", "'d", "'M",
             "<end_of_sentence>", "<beginning_of_sentence>", "user name=user\n", "  ", "\r\n", "1234567",
             "#define X 42\n", "    return 0;\n", "The special magic ", " number is: "])


def cases(seed, n):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 80))) for _ in range(n)]


def main():
    from tokenizers import Tokenizer
    out = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "models")
    os.makedirs(out, exist_ok=True)
    for name, path in MODELS.items():
        tok = Tokenizer.from_file(os.path.join(ROOT, path))
        with open(os.path.join(out, name + ".cases.jsonl"), "w") as f:
            for s in cases(1, 1500):
                f.write(json.dumps({"text": s, "ids": tok.encode(s, add_special_tokens=False).ids}) + "\n")
    print("wrote", out, file=sys.stderr)


if __name__ == "__main__":
    main()
