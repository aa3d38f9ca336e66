"""The HF reference for test_ingest_tokens: tokenizers' own encode of a framed text.

usage: python hf_encode.py TOKENIZER_JSON FRAMED_TXT OUT_JSON
Writes {"ids": [...], "starts": [...]}: HF's ids for the whole text (add_special_tokens=False,
and encode_special_tokens=True: ingest encodes a special token's text in a document as ordinary
text) and the byte offset where each token's text starts (HF's character offsets, mapped to bytes).
"""
import json
import sys

from tokenizers import Tokenizer

tok = Tokenizer.from_file(sys.argv[1])
tok.encode_special_tokens = True
text = open(sys.argv[2], "rb").read().decode("utf-8")
enc = tok.encode(text, add_special_tokens=False)
char_to_byte = []
b = 0
for ch in text:
    char_to_byte.append(b)
    b += len(ch.encode("utf-8"))
char_to_byte.append(b)
with open(sys.argv[3], "w") as f:
    json.dump({"ids": enc.ids, "starts": [char_to_byte[s] for s, _ in enc.offsets]}, f)
