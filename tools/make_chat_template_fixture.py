#!/usr/bin/env python3
"""Make tests/fixtures/runner/hf5-saved: what transformers 5.x's `save_pretrained` writes for
models/haul-tiny's tokenizer, and transformers' own rendering of one conversation through it.

transformers 5 saves a single chat template as chat_template.jinja beside tokenizer_config.json and
drops the `chat_template` key from tokenizer_config.json; when loading, the .jinja file wins over
any key. A model folder re-saved with transformers 5 therefore has its template only in the .jinja
file, which jobs/chat.c must read (tests/jobs/test_batch.c checks detection and that longhaul's
rendering equals rendered.txt, byte for byte).

Files kept: tokenizer_config.json and chat_template.jinja as saved (tokenizer.json is not needed by
the test and is dropped), rendered.txt (apply_chat_template(..., tokenize=False,
add_generation_prompt=True) of MESSAGES), messages.json (MESSAGES).

Run with transformers 5.17 and jinja2 (no torch needed): python tools/make_chat_template_fixture.py
"""
import json
import os
import shutil
import tempfile

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "runner", "hf5-saved")
# MiniMax-Text-01's template reads content[0]['text'], so contents are lists of text parts
MESSAGES = [
    {"role": "system", "content": [{"type": "text", "text": "Answer from the documents."}]},
    {"role": "user", "content": [{"type": "text", "text": "Which file defines WORKER_TIMEOUT?\nGive the path."}]},
    {"role": "assistant", "content": [{"type": "text", "text": "src/config.py"}]},
    {"role": "user", "content": [{"type": "text", "text": "And its value?"}]},
]


def main():
    tok = AutoTokenizer.from_pretrained(os.path.join(ROOT, "models", "haul-tiny"))
    with tempfile.TemporaryDirectory() as tmp:
        tok.save_pretrained(tmp)
        saved = AutoTokenizer.from_pretrained(tmp)  # rendered through what was saved, as a user would
        rendered = saved.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
        cfg = json.load(open(os.path.join(tmp, "tokenizer_config.json")))
        assert "chat_template" not in cfg, "this transformers kept chat_template in tokenizer_config.json"
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        for f in ("tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(tmp, f), OUT)
    with open(os.path.join(OUT, "rendered.txt"), "w", encoding="utf-8") as f:
        f.write(rendered)
    with open(os.path.join(OUT, "messages.json"), "w", encoding="utf-8") as f:
        json.dump(MESSAGES, f, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("models/haul-tiny's tokenizer as transformers 5.17's save_pretrained writes it (the template in "
                "chat_template.jinja only; tokenizer.json dropped), and its apply_chat_template rendering of "
                "messages.json (rendered.txt).\nMade by tools/make_chat_template_fixture.py.\n")


if __name__ == "__main__":
    main()
