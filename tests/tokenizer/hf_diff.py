#!/usr/bin/env python3
"""hf_diff.py — differential test of longhaul's tokenizer against HF tokenizers 0.23.2.

  hf_diff.py live LONGHAUL WORKDIR [N]
      Trains the test tokenizers with `tokenizers`, generates N strings per tokenizer (default
      10000), encodes them with HF and with `LONGHAUL tokenize --jsonl`, and compares ids (with
      and without special tokens) and decoded text (with and without skip_special_tokens),
      plus decodes of random id sequences. Exit 0 only with zero mismatches.

  write_fixtures(DIR) (called by tools/make_tokenizer_fixtures.py fixtures)
      Writes the trained tokenizers and a sample of strings with HF's outputs, which
      test_tokenizer_fixtures compares against when tokenizers cannot be installed.

Everything compared against comes from HF; longhaul's output is only ever the thing checked.
"""
import base64
import json
import os
import random
import subprocess
import sys
import time

# ------------------------------------------------------------------------------ regexes

GPT4O_PAT = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
             "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
             "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
             "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
CL100K_PAT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")

# ------------------------------------------------------------------------------ strings

WORDS = ("the of and to in is that for it as was with be by on not he this are or his from at which but have an "
         "they you were her she there been one all we their has would when if so no what up out can who more "
         "time about said them some could into than then other its only new two first like very over after also "
         "tokenizer archive document stream merge vocabulary normalization unicode character boundary thread "
         "don't won't it's I'm you're they've we'll she'd can't shouldn't O'Reilly rock'n'roll").split()
CODE = ["int main(int argc, char **argv) {", "    return 0;", "}", "for (size_t i = 0; i < n; i++) {",
        "\tif (x->next == NULL) break;", "def f(x, y=None):", "    return [a*b for a, b in zip(x, y)]",
        "#include <stdio.h>", "const char *s = \"a\\tb\\n\";", "x += 0x7fffffff; // overflow?",
        "if (a && b || !c) { y = a ? b : c; }", "    self.assertEqual(foo['bar'], 42)",
        "SELECT id, name FROM users WHERE age >= 21;", "<div class=\"x\">&nbsp;</div>", "$ ls -la | grep '^d'",
        "fn main() { println!(\"{}\", 1_000_000u64); }", "    }\n\n    return r;", "a=b;c=d;e=f;g=h;i=j;k=l;"]
SCRIPTS = [
    "Ærøskøbing façade naïve crème brûlée Ångström São Paulo Œuvre Łódź Ďábel",
    "Καλημέρα κόσμε, ἀρχὴ σοφίας", "Съешь же ещё этих мягких французских булок, да выпей чаю",
    "مرحبا بالعالم، هذا اختبار", "שלום עולם זה מבחן", "नमस्ते दुनिया यह एक परीक्षण है", "สวัสดีชาวโลก นี่คือการทดสอบ",
    "你好，世界！这是一个测试。", "こんにちは世界、これはテストです。カタカナ", "안녕하세요 세계 이것은 시험입니다",
    "Ողջույն աշխարհ", "გამარჯობა მსოფლიო", "ሰላም ልዑል", "ᐊᐃᐅ ᐱᐳ", "Xin chào thế giới, đây là bài kiểm tra",
    "İstanbul ıi İI ǅǆǄ ﬁﬂ ẞß ΐΰ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 ①②③ ㍿ ㎡ ½ ¼ ™ Ⅻ",
]
EMOJI = ["😀", "👍🏽", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪🇯🇵", "1️⃣", "❤️", "🧑🏿‍🚀", "👨🏻‍💻", "🫠", "🫶🏼",
         "☺︎", "✈️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2002", "\u2009", "\u202f", "\u205f", "\u180e",
          "\u200b", "\ufeff", "\u0085", "\u2028", "\u2029", "\x0b", "\x0c", "\x1c", " \n ", "\n\n\n", "   \t  "]
MARKS = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0327", "\u0345", "\u0334", "\u20dd", "\u0f71", "\u0f72",
         "\u093c", "\u3099", "\u309a", "\u1dc0", "\u0e31", "\u0670", "\u05b8", "\ufe0f", "\U000e0101"]
# code points added in Unicode 13-16, which system libraries and HF disagree on
NEW_CPS = [0x1C89, 0x1C8A, 0xA7CB, 0xA7CC, 0xA7DC, 0x10D40, 0x10D4A, 0x10D50, 0x10D70, 0x11F00, 0x11F41,
           0x1E4D0, 0x1E4F0, 0x31350, 0x323AF, 0x2EBF0, 0x1FA70, 0x1FAE8, 0x11938, 0x11935, 0x11930, 0x1171E,
           0x0897, 0x0CF3, 0x1B4E, 0x16D40, 0x16D68, 0x105C0, 0x10570, 0x10597, 0x1E030, 0x11B00, 0x2C2F,
           0xA7C0, 0xA7D0, 0x10780, 0x1DF00, 0x1E290, 0x16FF0, 0x18D00, 0x1AFF0, 0x1B132, 0x1F7F0, 0x116D0,
           0x11FB0, 0x16100, 0x13460, 0x10EC2, 0x1E5D0, 0x113B8, 0x113C2, 0x11F3E]
DIGITS = ["0123456789" * 5, "3.14159265358979", "1,000,000", "٠١٢٣٤٥٦٧٨٩", "０１２３４", "¹²³", "௧௨௩", "𝟘𝟙𝟚",
          "2024-12-01T09:24:48Z", "0x1F600", "12345678901234567890123456789012345678901234567890"]
CONTRACTIONS = ["don't", "DON'T", "I'M", "you'Re", "we'LL", "'s", "'ſ", "'S", "'ll", "it’s", "rock'n'roll",
                "'''", "x's'", "'tis", "ʼn", "'ﬆ", "'ß", "'ss", "'st"]
INVALID = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xed\xbf\xbf",
           b"\xf0\x82\x82\xac", b"\xf4\x90\x80\x80", b"\xf5", b"\xff", b"\xfe\xfe", b"\xe2\x82", b"\xf0\x9f\x98",
           b"\xc3", b"\xe2", b"\xf0\x9f", b"\x80\x80\x80", b"\xc3\xa9\xa9"]


def rand_cp(r):
    """A code point from anywhere: assigned, unassigned, private use, new in Unicode 15/16."""
    k = r.random()
    if k < 0.25:
        return r.choice(NEW_CPS)
    if k < 0.5:
        return r.randint(0x80, 0x2FFF)
    if k < 0.65:
        c = r.randint(0x3000, 0xFFFD)
        return c if not 0xD800 <= c <= 0xDFFF else 0xFFFD
    if k < 0.9:
        c = r.randint(0x10000, 0x3FFFF)
        return c
    c = r.choice([r.randint(0xE0000, 0xE01EF), r.randint(0xF0000, 0xF00FF), r.randint(0x40000, 0x4FFFF)])
    return c


def piece(r, specials):
    k = r.random()
    if k < 0.22:
        return " ".join(r.choice(WORDS) for _ in range(r.randint(1, 12)))
    if k < 0.32:
        return "\n".join(r.choice(CODE) for _ in range(r.randint(1, 4)))
    if k < 0.42:
        s = r.choice(SCRIPTS)
        a = r.randint(0, len(s))
        return s[a:a + r.randint(1, 40)]
    if k < 0.48:
        return "".join(r.choice(EMOJI) for _ in range(r.randint(1, 4)))
    if k < 0.56:
        return "".join(r.choice(SPACES) for _ in range(r.randint(1, 4)))
    if k < 0.62:
        base = r.choice("aeoAEOnsuıiIkl가カ" + "ⅰ")
        return base + "".join(r.choice(MARKS) for _ in range(r.randint(1, 4)))
    if k < 0.67:
        return r.choice(DIGITS)[: r.randint(1, 60)]
    if k < 0.73:
        return r.choice(CONTRACTIONS)
    if k < 0.83:
        return "".join(chr(rand_cp(r)) for _ in range(r.randint(1, 6)))
    if k < 0.93 and specials:
        sp = r.choice(specials)
        v = r.random()
        if v < 0.15:
            sp = sp[: r.randint(1, max(1, len(sp) - 1))]  # a prefix only
        elif v < 0.25:
            sp = sp.upper() if r.random() < 0.5 else sp.lower()
        elif v < 0.35:
            sp = r.choice(["", " ", "  ", "\n", "\t"]) + sp + r.choice(["", " ", "  ", "\n", "x"])
        return sp
    return r.choice(["", ".", ",", "!", "?", "...", "--", "—", "«»", "“”", "()", "[]", "{}", "/", "\\", "#", "@",
                     "&&", "||", "=>", "::", "''", '"', "``", "$$", "%", "^^"])


def gen_string(r, specials):
    """One test input as bytes (it may hold invalid UTF-8)."""
    k = r.random()
    parts = []
    n = 1 if k < 0.2 else r.randint(2, 8) if k < 0.9 else r.randint(20, 120)
    for _ in range(n):
        parts.append(piece(r, specials).encode("utf-8"))
        if r.random() < 0.03:
            parts.append(r.choice(INVALID))
    sep = b"" if r.random() < 0.5 else r.choice([b" ", b"\n", b"", b"\t"])
    out = sep.join(parts)
    if r.random() < 0.05:  # occasionally cut in the middle of a UTF-8 sequence
        out = out[: r.randint(0, len(out))]
    return out


def gen_strings(seed, n, specials):
    r = random.Random(seed)
    out = [b"", b" ", b"\n", b"a", b"  a", b"hello world", b"\xff"]
    big = " ".join(r.choice(WORDS) for _ in range(20000)).encode()
    out.append(big)  # a long document
    out.append(b"x" * 5000 + b"=" * 3000 + b"(" * 2000)  # long single pre-tokens
    out.append(("".join(r.choice(CODE) for _ in range(300))).replace("\n", "").encode())  # minified code line
    while len(out) < n:
        out.append(gen_string(r, specials))
    return out[:n]


def training_corpus(seed, specials):
    r = random.Random(seed)
    lines = []
    for _ in range(6000):
        lines.append(gen_string(r, specials).decode("utf-8", "replace"))
    for _ in range(3000):
        lines.append(" ".join(r.choice(WORDS) for _ in range(r.randint(5, 30))))
    for _ in range(800):
        lines.append("\n".join(r.choice(CODE) for _ in range(5)))
    return lines

# ------------------------------------------------------------------------------ tokenizers


def build_tokenizers():
    """The tokenizers under test, trained here with HF's trainer (name -> Tokenizer)."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    toks = {}

    # 1. GPT-2 style: ByteLevel(use_regex) does the splitting, no normalizer.
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    sp = ["<|endoftext|>"]
    t.train_from_iterator(training_corpus(1, sp), trainers.BpeTrainer(
        vocab_size=4000, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    toks["gpt2"] = t

    # 2. MiniMax-Text-01 / GPT-4o style: NFC, Split(o200k regex) + ByteLevel without regex.
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4O_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    sp = ["<beginning_of_sentence>", "<end_of_sentence>", "<end_of_document>", "<begin_of_document>",
          "<function_call>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
          "<empty_output>", "<commit_before>", "<commit_msg>", "<commit_after>", "<reponame>"]
    t.train_from_iterator(training_corpus(2, sp), trainers.BpeTrainer(
        vocab_size=6000, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    toks["minimax"] = t

    # 3. Llama-3 style with special tokens and a TemplateProcessing post-processor: Split(cl100k,
    #    Removed, invert) + ByteLevel, BOS/EOS template, added tokens with every flag.
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_PAT), behavior="removed", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    sp = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    t.train_from_iterator(training_corpus(3, sp), trainers.BpeTrainer(
        vocab_size=5000, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                          AddedToken("<sep>", rstrip=True, special=True),
                          AddedToken("<pad>", lstrip=True, rstrip=True, special=True)])
    t.add_tokens([AddedToken("[WORD]", single_word=True, normalized=False),
                  AddedToken("hello world", normalized=True), AddedToken(" tokenizer", normalized=False),
                  AddedToken("don't", single_word=True, normalized=True)])
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A <|end_of_text|>",
                                      pair="<|begin_of_text|> $A <|end_of_text|> $B:1 <|end_of_text|>:1",
                                      special_tokens=[("<|begin_of_text|>", t.token_to_id("<|begin_of_text|>")),
                                                      ("<|end_of_text|>", t.token_to_id("<|end_of_text|>"))])])
    toks["llama3"] = t

    # 4. Everything else at once: NFKC + Lowercase + Replace, Digits + Split(merged) + ByteLevel with
    #    its regex and prefix space, normalized added tokens.
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                         normalizers.Replace(Regex("[\\x{2018}\\x{2019}]"), "'"),
                                         normalizers.Replace("\t", "    ")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex("[.!?]+"), behavior="merged_with_previous"),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)])
    t.decoder = decoders.ByteLevel()
    sp = ["<s>", "</s>", "<unk>"]
    t.train_from_iterator(training_corpus(4, sp), trainers.BpeTrainer(
        vocab_size=3000, special_tokens=sp, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    t.add_tokens([AddedToken("Hello", normalized=True), AddedToken("ⅰⅱ", normalized=True, lstrip=True),
                  AddedToken("<|Tab|>", normalized=False, rstrip=True, single_word=True)])
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[
        ("<s>", t.token_to_id("<s>")), ("</s>", t.token_to_id("</s>"))])
    toks["kitchen"] = t

    # 5. Llama-2 style BPE without a pre-tokenizer: Prepend + Replace normalizer, byte fallback,
    #    fused unk, Split(Contiguous) on digits and Merged-with-next punctuation.
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\\d"), behavior="contiguous"),
        pre_tokenizers.Split("▁", behavior="merged_with_next")])
    sp = ["<unk>", "<s>", "</s>"]
    t.train_from_iterator(training_corpus(5, sp), trainers.BpeTrainer(
        vocab_size=2500, special_tokens=sp, limit_alphabet=300, show_progress=False))
    toks["llama2"] = t

    # 6. Subword BPE: continuing_subword_prefix and end_of_word_suffix, unk without fusing, no
    #    decoder (ids decode joined by spaces), accents stripped by NFD + Replace(\p{Mn}).
    t = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Replace(Regex("\\p{Mn}"), ""),
                                         normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Split(Regex("\\w+|[^\\w\\s]+"), behavior="isolated")
    sp = ["[UNK]", "[CLS]", "[SEP]"]
    t.train_from_iterator(training_corpus(6, sp), trainers.BpeTrainer(
        vocab_size=3000, special_tokens=sp, limit_alphabet=150, continuing_subword_prefix="##",
        end_of_word_suffix="</w>", show_progress=False))
    t.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", t.token_to_id("[CLS]")), ("[SEP]", t.token_to_id("[SEP]"))])
    toks["subword"] = t
    return toks


REALWORLD = ["minimax-text-01-style", "llama3-style"]


def realworld_tokenizers():
    """The committed real-world-style tokenizers (tools/make_tokenizer_fixtures.py realworld)."""
    from tokenizers import Tokenizer
    d = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "tests", "fixtures", "tokenizer", "realworld")
    out = {}
    for name in REALWORLD:
        p = os.path.join(d, name + ".tokenizer.json")
        if os.path.exists(p):
            out["realworld/" + name] = (p, Tokenizer.from_file(p))
    return out


def finish_llama2(path):
    """Add the <0xXX> byte tokens to the llama2-style vocab (its trainer does not), so byte
    fallback covers every character outside the learned alphabet."""
    j = json.load(open(path, encoding="utf-8"))
    v = j["model"]["vocab"]
    nid = max(v.values()) + 1
    for b in range(256):
        k = "<0x%02X>" % b
        if k not in v:
            v[k] = nid
            nid += 1
    for at in j["added_tokens"]:
        at["id"] = v.get(at["content"], at["id"])
    json.dump(j, open(path, "w", encoding="utf-8"), ensure_ascii=False)


def specials_of(tok):
    return [a.content for a in tok.get_added_tokens_decoder().values()]


def write_tokenizers(outdir):
    from tokenizers import Tokenizer
    os.makedirs(outdir, exist_ok=True)
    paths = {}
    for name, t in build_tokenizers().items():
        p = os.path.join(outdir, name + ".tokenizer.json")
        t.save(p, pretty=False)
        if name == "llama2":
            finish_llama2(p)
        paths[name] = p
    # the legacy merges form: "a b" strings (with the #version line merges.txt files carry)
    j = json.load(open(paths["gpt2"], encoding="utf-8"))
    j["model"]["merges"] = ["#version: 0.2"] + ["%s %s" % (a, b) for a, b in j["model"]["merges"]]
    p = os.path.join(outdir, "gpt2-legacy-merges.tokenizer.json")
    json.dump(j, open(p, "w", encoding="utf-8"), ensure_ascii=False)
    paths["gpt2-legacy-merges"] = p
    return {n: (p, Tokenizer.from_file(p)) for n, p in paths.items()}

# ------------------------------------------------------------------------------ component cases

QWEN2_PAT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+"
             "|\\s+(?!\\S)|\\s+")
DEEPSEEK_PATS = ["\\p{N}{1,3}", "[一-龥\\u3040-ゟ゠-ヿ]+",
                 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
                 "| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]
KIMI_PAT = ("[\\p{Han}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
            "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}"
            "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
FEATURE_PATS = ["^\\s*\\w+", "\\w+$", "$", "^", ".", "(?m).+", ".+", "\\b\\w+\\b", "\\B.", "\\h+", "\\H+", "\\d+",
                "\\D+", "\\S+", "\\W+", "\\s+", "a{,2}", "a{2}+", "(?<=\\s)\\w", "(?<!\\w)\\d", "x*", "",
                "(a|ab)(c|bcd)(d*)", "\\p{^L}+", "\\P{N}+", "[\\s\\S]", "[^\\S\\n]+", "\\x{41}\\u0042|\\x43",
                "\\R", "[a-c&&b-d]+", "(?i)hello", "(?i:'s|'t)", "[\\p{Lu}\\p{Ll}]+", "\\p{Greek}+", "\\p{Han}+",
                "\\p{Hiragana}|\\p{Katakana}", "\\p{Any}", "\\p{Mn}+", "\\p{Lo}\\p{M}*", "[\\p{P}\\p{S}]",
                "\\p{Zs}", "[^\\p{L}\\p{N}\\s]+", "\\s*[\\r\\n]+", "\\s+(?!\\S)", "(?i)[0-9]+", "\\A.", ".\\z",
                ".\\Z", "[\\t-\\r ]", "\\p{Nd}\\p{No}", "[[a-z]&&[^aeiou]]+", "(?>a+)b", "a++b|a", "(\\w)\\1",
                "(?<x>\\d)\\k<x>", "\\\\", "\\.\\*\\?", "[\\]\\[]", "[-a]", "[a-]", "\\p{L}{2,}?", "\\u00e9+", "[\\w]+", "[\\W]+",
                "[^\\w\\s]+", "\\w+|[^\\w\\s]+", "[\\w\\d]", "[^\\W]+"]
STRING_PATS = ["▁", " ", ".", "a|b", "\\n", "ab", "\U0001F600", "..."]
TEXTS = ["Hello world", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\nend", "don't I'M you'Re 'ſ 'ﬆ 'ß",
         "数字123 4567 ٠١٢٣ ０１２ ¹²³ 𝟘𝟙", "İstanbul ıi ǅǆ ẞß ΐΰ ﬁﬂ", "café cafe\u0301 e\u0323\u0301 e\u0301\u0323",
         "\u1100\u1161\u11a8 가각 \u1100\u1161", "क़ क\u093c ড়", "Ángström Å \u212b \u2126 Ω", "ｶﾀｶﾅ ﾊﾟ ㌀ ㍿",
         "\u00a0\u3000\u2002\u2009\u202f\u205f\u180e\u200b\ufeff\u0085\u2028\u2029\x0b\x0c\x1c",
         "😀👍🏽👩‍👩‍👧‍👦🏳️‍🌈🇩🇪 1️⃣", "".join(chr(c) for c in NEW_CPS), "aaaa aaa aa a abcd bcd cd",
         "x=1;y=22;z=333;w=4444", "hello hello HELLO Hello", "a\u0345\u0300 \u0f71\u0f72\u0f74 \u0f73",
         "\U00011935\U00011930 \U00011938 \U000105c0\U000105c9", "مرحبا بالعالم، ١٢٣", "你好，世界！こんにちは、カタカナ",
         "中文English混合mixed123", "ʼn ǰ ẖ ẘ", "a\r\nb\rc\n\nd", "$$ ## @@ ... --- ///", "\\ \\\\ \\n",
         "", " ", "x", "\U0010ffff\U000e0100\uffff\ufdd0", "\u0130\u0049\u0069\u0131 \u03a3\u03c3\u03c2",
         "Ⅻ ⅻ ① ⓐ Ⓐ ㊀", "\u2160\u2170 \u24b6\u24d0", "\U0001e900\U0001e922 \U00010400\U00010428",
         "\u1e9e\u00df \u0149 \u01f0", "ab12cd34 56ef", "Ǆemal ǅ ǆ", "\ufb01\ufb02\ufb00"]
NORMALIZERS = [{"type": "NFC"}, {"type": "NFD"}, {"type": "NFKC"}, {"type": "NFKD"}, {"type": "Lowercase"},
               {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
               {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "NFC"}]},
               {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]},
               {"type": "Sequence", "normalizers": [{"type": "Lowercase"}, {"type": "NFKD"}, {"type": "Lowercase"}]},
               {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
               {"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "},
               {"type": "Replace", "pattern": {"Regex": "x*"}, "content": "-"},
               {"type": "Replace", "pattern": {"String": ""}, "content": "X"},
               {"type": "Prepend", "prepend": "▁"},
               {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
               {"type": "Sequence", "normalizers": [{"type": "NFD"},
                                                    {"type": "Replace", "pattern": {"Regex": "\\p{Mn}"}, "content": ""},
                                                    {"type": "NFC"}]}]


def component_configs():
    """(kind, json config) pairs whose HF output the fixture records."""
    cfgs = []
    pats = [GPT4O_PAT, CL100K_PAT, QWEN2_PAT, KIMI_PAT] + DEEPSEEK_PATS + FEATURE_PATS
    behaviors = ["Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"]
    for i, p in enumerate(pats):
        bs = behaviors if i < 8 or i % 3 == 0 else ["Isolated"]
        for b in bs:
            for inv in ([False, True] if b != "Isolated" or i < 4 else [False]):
                cfgs.append(("pre", {"type": "Split", "pattern": {"Regex": p}, "behavior": b, "invert": inv}))
    for p in STRING_PATS:
        for b in behaviors:
            cfgs.append(("pre", {"type": "Split", "pattern": {"String": p}, "behavior": b, "invert": False}))
    for ind in (False, True):
        cfgs.append(("pre", {"type": "Digits", "individual_digits": ind}))
    for aps in (False, True):
        for ur in (False, True):
            cfgs.append(("pre", {"type": "ByteLevel", "add_prefix_space": aps, "trim_offsets": True, "use_regex": ur}))
    cfgs.append(("pre", {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}))
    cfgs.append(("pre", {"type": "Sequence", "pretokenizers": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        {"type": "Split", "pattern": {"Regex": "Ġ"}, "behavior": "MergedWithNext", "invert": False}]}))
    for n in NORMALIZERS:
        cfgs.append(("norm", n))
    return cfgs


def component_cases():
    """HF's pre_tokenize_str / normalize_str of every text under every config: a list of
    {"tokenizer": tokenizer.json with just that component, "pieces": [pieces per text]}."""
    from tokenizers import Tokenizer
    cases = []
    for kind, cfg in component_configs():
        tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
              "normalizer": cfg if kind == "norm" else None, "pre_tokenizer": cfg if kind == "pre" else None,
              "post_processor": None, "decoder": None,
              "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                        "ignore_merges": False, "vocab": {}, "merges": []}}
        tok = Tokenizer.from_str(json.dumps(tj))
        res = []
        for t in TEXTS:
            if kind == "pre":
                res.append([p for p, _ in tok.pre_tokenizer.pre_tokenize_str(t)])
            else:
                o = tok.normalizer.normalize_str(t)
                res.append([o] if o else [])
        cases.append({"tokenizer": tj, "pieces": res})
    return cases


# ------------------------------------------------------------------------------ comparing


def json_bytes_line(obj_prefix, text):
    """A JSONL line whose "text" carries raw bytes (invalid UTF-8 included, as longhaul reads it)."""
    esc = bytearray()
    for b in text:
        if b == 0x22 or b == 0x5C:
            esc += b"\\" + bytes([b])
        elif b < 0x20 or b == 0x7F:
            esc += b"\\u%04x" % b
        else:
            esc.append(b)
    return b'{"text":"' + bytes(esc) + b'"}'


def run_longhaul(longhaul, tj, lines, extra):
    r = subprocess.run([longhaul, "tokenize", "--tokenizer", tj, "--jsonl"] + extra, input=b"\n".join(lines) + b"\n",
                       capture_output=True)
    if r.returncode not in (0, 1):
        raise RuntimeError("longhaul tokenize failed: %s" % r.stderr.decode(errors="replace")[:2000])
    return [json.loads(x.decode("utf-8")) for x in r.stdout.split(b"\n") if x]


def hf_outputs(tok, texts):
    strs = [t.decode("utf-8", "replace") for t in texts]
    plain = [e.ids for e in tok.encode_batch(strs, add_special_tokens=False)]
    special = [e.ids for e in tok.encode_batch(strs, add_special_tokens=True)]
    return strs, plain, special


def compare(name, tj, tok, texts, longhaul, log, seed):
    mism = 0
    strs, plain, special = hf_outputs(tok, texts)
    lines = [json_bytes_line(None, t) for t in texts]
    t0 = time.time()
    ours = run_longhaul(longhaul, tj, lines, [])
    ours_sp = run_longhaul(longhaul, tj, lines, ["--add-special"])
    t_ours = time.time() - t0
    for i, (o, os_, ref, refs) in enumerate(zip(ours, ours_sp, plain, special)):
        if o.get("ids") != ref or os_.get("ids") != refs:
            mism += 1
            if mism <= 10:
                log("MISMATCH %s #%d text=%r\n  ours=%s\n  hf  =%s\n  ours+special=%s\n  hf+special  =%s" % (
                    name, i, texts[i][:300], str(o)[:400], ref[:60], str(os_)[:200], refs[:60]))
    # decoding: HF's own ids, with and without special tokens, and random id sequences
    r = random.Random(seed)
    nvocab = tok.get_vocab_size(with_added_tokens=True)
    seqs = [ids for ids in special] + [[r.randint(-3, nvocab + 5) for _ in range(r.randint(0, 40))] for _ in range(2000)]
    seqs = [[x for x in s if x >= 0] for s in seqs]  # HF's Python API takes unsigned ids
    dec_in = [json.dumps({"ids": s}).encode() for s in seqs]
    for skip in (False, True):
        ref = tok.decode_batch(seqs, skip_special_tokens=skip)
        got = run_longhaul(longhaul, tj, dec_in, ["--decode"] + (["--skip-special"] if skip else []))
        for i, (g, want) in enumerate(zip(got, ref)):
            if g.get("text") != want:
                mism += 1
                if mism <= 20:
                    log("DECODE MISMATCH %s skip=%s ids=%s\n  ours=%r\n  hf  =%r" % (name, skip, seqs[i][:40], g, want))
    return mism, t_ours


def live(longhaul, workdir, n):
    import tokenizers
    log = lambda m: print(m, flush=True)
    log("hf_diff: HF tokenizers %s, %d strings per tokenizer" % (tokenizers.__version__, n))
    toks = write_tokenizers(workdir)
    rw = realworld_tokenizers()
    toks.update(rw)
    total = 0
    for k, (name, (tj, tok)) in enumerate(sorted(toks.items())):
        texts = gen_strings(1000 + k, n if name not in rw and "legacy" not in name else max(n // 3, 100),
                            specials_of(tok))
        m, t = compare(name, tj, tok, texts, longhaul, log, 77 + k)
        log("hf_diff: %-8s %6d strings + decodes: %d mismatches (longhaul %.1fs)" % (name, len(texts), m, t))
        total += m
    log("hf_diff: %s" % ("PASS: zero mismatches" if not total else "FAIL: %d mismatches" % total))
    return 0 if not total else 1


def write_fixtures(outdir, n=450):
    """Tokenizers + strings + HF outputs for test_tokenizer_fixtures (no Python needed there)."""
    import tokenizers
    toks = write_tokenizers(outdir)
    rw = realworld_tokenizers()
    toks.update(rw)
    for k, (name, (tj, tok)) in enumerate(sorted(toks.items())):
        m = n if name not in rw and "legacy" not in name else n // 3
        texts = gen_strings(5000 + k, 3 * m, specials_of(tok))
        # keep the fixture small (a few MB in all): the long strings are left to the live test
        texts = [t for t in texts if len(t) < 1000][:m]
        strs, plain, special = hf_outputs(tok, texts)
        with open(os.path.join(outdir, name + ".cases.jsonl"), "w", encoding="utf-8") as f:
            for t, a, b in zip(texts, plain, special):
                f.write(json.dumps({"text_b64": base64.b64encode(t).decode(), "ids": a, "ids_special": b,
                                    "decoded": tok.decode(b, skip_special_tokens=False),
                                    "decoded_skip": tok.decode(b, skip_special_tokens=True)},
                                   ensure_ascii=False) + "\n")
    with open(os.path.join(outdir, "components.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"texts": TEXTS}, ensure_ascii=True) + "\n")
        for c in component_cases():
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    with open(os.path.join(outdir, "README"), "w") as f:
        f.write("Made by tools/make_tokenizer_fixtures.py fixtures with HF tokenizers %s.\n"
                "NAME.tokenizer.json: tokenizers trained by tests/tokenizer/hf_diff.py build_tokenizers().\n"
                "NAME.cases.jsonl: per line text_b64 (input bytes, may be invalid UTF-8), HF ids without and\n"
                "with special tokens, and HF decode of ids_special with skip_special_tokens False/True.\n"
                "components.jsonl: first line the texts; then per line a tokenizer.json with one normalizer\n"
                "or pre-tokenizer and HF's normalize_str / pre_tokenize_str pieces for each text.\n"
                % tokenizers.__version__)
    print("wrote fixtures to", outdir)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "live":
        sys.exit(live(sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 10000))
    print(__doc__)
    sys.exit(2)
