#!/usr/bin/env python3
"""make_tokenizer_fixtures.py — reference data for longhaul's tokenizer, measured from HF tokenizers.

Everything here is produced by running HF `tokenizers` (0.23.2), never by longhaul's own code:

  unicode   writes tokenizer/tokenizer_unidata.c: the Unicode properties HF's stack actually uses,
            probed code point by code point (Oniguruma's general categories, \\s, \\w, \\d and
            scripts for the regexes; Rust's to_lowercase, is_numeric and regex \\w; which code
            points HF's normalization tables know). System PCRE2/utf8proc carry other Unicode
            versions; the C code uses these tables to correct for the difference.
  fixtures  writes tests/fixtures/tokenizer/: the tokenizers trained by tests/tokenizer/hf_diff.py,
            a sample of its generated strings and HF's ids for them, for machines without
            tokenizers installed (the test falls back to them, loudly).
  realworld writes tests/fixtures/tokenizer/realworld/: two tokenizers shaped like released ones,
            trained by HF's BPE trainer on text found on this machine (documentation, C headers,
            Python sources): MiniMax-Text-01 style (NFC, GPT-4o-style Split regex, ByteLevel,
            MiniMax's special tokens) and Llama-3 style (cl100k-style Split, ignore_merges,
            BOS TemplateProcessing, 256 reserved special tokens). Run it before `fixtures`,
            which records HF outputs for them too.

Usage: tools/make_tokenizer_fixtures.py unicode|fixtures|realworld
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GCS = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi",
       "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs", "Cn"]
SCRIPTS = ["Common", "Inherited", "Latin", "Greek", "Cyrillic", "Armenian", "Hebrew", "Arabic",
           "Devanagari", "Bengali", "Tamil", "Thai", "Georgian", "Hangul", "Hiragana", "Katakana", "Han"]


def all_cps():
    return [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def onig_set(pattern, cps, text):
    """Code points matched by a one-character Oniguruma pattern, via HF's Split pre-tokenizer."""
    from tokenizers import pre_tokenizers as P, Regex
    keep = bytearray(len(cps))
    for _, (a, b) in P.Split(Regex(pattern), "removed").pre_tokenize_str(text):
        keep[a:b] = b"\x01" * (b - a)
    return [cps[i] for i in range(len(cps)) if not keep[i]]


def c_ranges(name, rs, comment):
    lines = [f"/* {comment} */", f"const uint32_t {name}[][2] = {{"]
    row = []
    for a, b in rs:
        row.append(f"{{0x{a:X}, 0x{b:X}}}")
        if len(row) == 6:
            lines.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        lines.append("    " + ", ".join(row) + ",")
    if not rs:
        lines.append("    {0xFFFFFFFF, 0}")
    lines.append("};")
    lines.append(f"const size_t {name}_n = {len(rs)};")
    return "\n".join(lines) + "\n"


def make_unicode():
    import tokenizers
    from tokenizers import Tokenizer, AddedToken, normalizers as N, pre_tokenizers as P
    from tokenizers.models import WordLevel
    assert tokenizers.__version__ == "0.23.2", tokenizers.__version__
    cps = all_cps()
    text = "".join(chr(c) for c in cps)
    out = ["/* tokenizer_unidata.c — Unicode data as HF tokenizers 0.23.2 sees it, probed code point by",
           " * code point by tools/make_tokenizer_fixtures.py unicode. Generated: do not edit.",
           " *",
           " * Oniguruma (HF's regex engine) and Rust's standard library follow a newer Unicode than the",
           " * system PCRE2 and utf8proc, and HF's normalization tables an older one; these tables let",
           " * tokenizer_regex.c and tokenizer_unicode.c reproduce HF exactly anyway. */",
           "#include <stddef.h>", "#include <stdint.h>", ""]
    # Oniguruma general category per code point, as (first, gc index) runs.
    gc = [29] * 0x110000
    for i, g in enumerate(GCS[:-1]):
        if g == "Cs":
            continue
        for c in onig_set("\\p{%s}" % g, cps, text):
            gc[c] = i
    for c in range(0xD800, 0xE000):
        gc[c] = GCS.index("Cs")
    runs = []
    for c in range(0x110000):
        if not runs or runs[-1][1] != gc[c]:
            runs.append([c, gc[c]])
    out.append("/* Oniguruma general categories: runs of (first code point, category index); the index")
    out.append(" * is into " + " ".join(GCS) + ". */")
    out.append("const uint32_t tk_ud_gc[][2] = {")
    row = []
    for a, g in runs:
        row.append(f"{{0x{a:X}, {g}}}")
        if len(row) == 8:
            out.append("    " + ", ".join(row) + ",")
            row = []
    if row:
        out.append("    " + ", ".join(row) + ",")
    out.append("};")
    out.append(f"const size_t tk_ud_gc_n = {len(runs)};\n")
    out.append(c_ranges("tk_ud_onig_space", ranges(onig_set("\\s", cps, text)), "Oniguruma \\s"))
    out.append(c_ranges("tk_ud_onig_word", ranges(onig_set("\\w", cps, text)), "Oniguruma \\w"))
    # Inside a bracket class Oniguruma's \w leaves out some Latin-1 code points (superscripts,
    # fractions) that \w outside one matches.
    out.append(c_ranges("tk_ud_onig_word_in_class", ranges(onig_set("[\\w]", cps, text)),
                        "Oniguruma \\w inside a bracket class"))
    out.append(c_ranges("tk_ud_onig_digit", ranges(onig_set("\\d", cps, text)), "Oniguruma \\d"))
    out.append("const char *const tk_ud_script_names[] = {" + ", ".join('"%s"' % s for s in SCRIPTS) + "};")
    out.append(f"const size_t tk_ud_nscripts = {len(SCRIPTS)};")
    for s in SCRIPTS:
        out.append(c_ranges("tk_ud_sc_" + s, ranges(onig_set("\\p{%s}" % s, cps, text)), "Oniguruma \\p{%s}" % s))
    out.append("const uint32_t (*const tk_ud_scripts[])[2] = {" + ", ".join("tk_ud_sc_" + s for s in SCRIPTS) + "};")
    out.append("const size_t *const tk_ud_scripts_n[] = {" + ", ".join("&tk_ud_sc_%s_n" % s for s in SCRIPTS) + "};\n")

    # Rust char::is_numeric, via the Digits pre-tokenizer (each numeric character isolated).
    sep = "\ue000"
    probe = "".join(chr(c) + sep for c in cps if c != 0xE000)
    num = set()
    for piece, _ in P.Digits(individual_digits=True).pre_tokenize_str(probe):
        if len(piece) == 1 and piece != sep:
            num.add(ord(piece))
    out.append(c_ranges("tk_ud_rust_numeric", ranges(num), "Rust char::is_numeric"))

    # Rust regex \w, via a single_word added token: it matches after c only when c is not \w.
    tok = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.add_tokens([AddedToken(sep, single_word=True)])
    tid = tok.token_to_id(sep)
    cand = [c for c in cps if c != 0xE000]
    encs = tok.encode_batch([chr(c) + sep for c in cand], add_special_tokens=False)
    word = [c for c, e in zip(cand, encs) if tid not in e.ids]
    out.append(c_ranges("tk_ud_rust_word", ranges(word), "Rust regex crate \\w (single_word)"))

    # Rust char::to_lowercase, via the Lowercase normalizer.
    low = N.Lowercase()
    rows = []
    for c in cps:
        o = low.normalize_str(chr(c))
        if o != chr(c):
            v = [ord(x) for x in o] + [0, 0]
            assert len(o) <= 3
            rows.append((c, v[0], v[1], v[2]))
    out.append("/* Rust char::to_lowercase where it is not the identity: (code point, up to 3 outputs). */")
    out.append("const uint32_t tk_ud_lower[][4] = {")
    for i in range(0, len(rows), 4):
        out.append("    " + ", ".join("{0x%X, 0x%X, 0x%X, 0x%X}" % r for r in rows[i:i + 4]) + ",")
    out.append("};")
    out.append(f"const size_t tk_ud_lower_n = {len(rows)};\n")

    # Code points HF's normalization tables know: alone they change under some form, or they
    # reorder after U+0345 (non-zero combining class), or they compose as a second character.
    forms = [N.NFC(), N.NFD(), N.NFKC(), N.NFKD()]
    nfd, nfc = N.NFD(), N.NFC()
    active = set()
    for c in cps:
        ch = chr(c)
        if any(f.normalize_str(ch) != ch for f in forms):
            active.add(c)
        elif nfd.normalize_str("\u0345" + ch) != "\u0345" + ch:
            active.add(c)
    import unicodedata
    for c in cps:
        d = unicodedata.decomposition(chr(c))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and nfc.normalize_str(chr(parts[0]) + chr(parts[1])) == chr(c):
            active.add(parts[1])
    # Hangul vowels and trailing consonants compose algorithmically.
    for c in list(range(0x1161, 0x1176)) + list(range(0x11A8, 0x11C3)):
        if nfc.normalize_str(chr(0x1100 if c < 0x11A8 else 0xAC00) + chr(c)) != chr(0x1100 if c < 0x11A8 else 0xAC00) + chr(c):
            active.add(c)
    out.append(c_ranges("tk_ud_hf_norm_active", ranges(active),
                        "code points HF's normalization (unicode-normalization-alignments) treats as other than unassigned"))
    path = os.path.join(ROOT, "ingest", "tokenizer_unidata.c")
    with open(path, "w") as f:
        f.write("\n".join(out))
    print("wrote", path)


def local_text(limit):
    """Text from this machine: documentation and sources, in a fixed order."""
    import glob
    import gzip
    files = sorted(glob.glob("/usr/share/doc/*/copyright") + glob.glob("/usr/share/doc/*/README*") +
                   glob.glob("/usr/share/doc/*/changelog*.gz") + glob.glob("/usr/share/common-licenses/*") +
                   glob.glob("/usr/include/*.h") + glob.glob("/usr/include/*/*.h") +
                   glob.glob("/usr/lib/python3*/*.py") + glob.glob("/usr/lib/python3*/*/*.py"))
    out, n = [], 0
    for f in files:
        try:
            data = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
        except (OSError, EOFError):
            continue
        if b"\0" in data:
            continue
        t = data.decode("utf-8", "replace")
        out.append(t)
        n += len(t)
        if n >= limit:
            break
    return out


def make_realworld():
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
    import hf_diff
    outdir = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "realworld")
    os.makedirs(outdir, exist_ok=True)
    text = local_text(40 << 20)
    alphabet = pre_tokenizers.ByteLevel.alphabet()

    # MiniMax-Text-01 style: GPT2Tokenizer class, add_prefix_space false, bos <beginning_of_sentence>,
    # eos <end_of_sentence>, unk <end_of_document>; its chat template also uses <begin_of_document>
    # and <function_call>. Pre-tokenization as GPT-4o's (MiniMax-M2's tokenizer.json) behind NFC.
    t = Tokenizer(models.BPE())
    t.normalizer = normalizers.NFC()
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(hf_diff.GPT4O_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    sp = ["<beginning_of_sentence>", "<end_of_sentence>", "<end_of_document>", "<begin_of_document>",
          "<function_call>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
          "<empty_output>", "<commit_before>", "<commit_msg>", "<commit_after>", "<reponame>"]
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=16384, special_tokens=sp, initial_alphabet=alphabet,
                                                    show_progress=False))
    t.save(os.path.join(outdir, "minimax-text-01-style.tokenizer.json"), pretty=False)

    # Llama-3 style.
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(hf_diff.CL100K_PAT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=16384, initial_alphabet=alphabet, show_progress=False))
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
             "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
             "<|eot_id|>", "<|python_tag|>"] + ["<|reserved_special_token_%d|>" % i for i in range(2, 247)]
    t.add_special_tokens([AddedToken(x, special=True, normalized=False) for x in names])
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    t.save(os.path.join(outdir, "llama3-style.tokenizer.json"), pretty=False)
    with open(os.path.join(outdir, "README"), "w") as f:
        f.write("Made by tools/make_tokenizer_fixtures.py realworld (HF tokenizers %s BpeTrainer, vocab 16384, on\n"
                "%d MB of documentation and source text found on the machine that ran it).\n"
                "minimax-text-01-style: NFC + Split(GPT-4o regex, Isolated) + ByteLevel(no regex), ByteLevel\n"
                "  decoder and post-processor, MiniMax-Text-01's special tokens.\n"
                "llama3-style: Split(cl100k regex, Isolated) + ByteLevel(no regex), ignore_merges, 256 special\n"
                "  tokens, TemplateProcessing adding <|begin_of_text|>.\n"
                % (__import__("tokenizers").__version__, sum(map(len, text)) >> 20))
    print("wrote", outdir)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("unicode", "fixtures", "realworld"):
        print(__doc__)
        sys.exit(2)
    if sys.argv[1] == "unicode":
        make_unicode()
    elif sys.argv[1] == "realworld":
        make_realworld()
    else:
        sys.path.insert(0, os.path.join(ROOT, "tests", "tokenizer"))
        import hf_diff
        hf_diff.write_fixtures(os.path.join(ROOT, "tests", "fixtures", "tokenizer"))


if __name__ == "__main__":
    main()
