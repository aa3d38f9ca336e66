"""e2e: tokens.u32 equals HF tokenizers' encoding of the framed text, and the manifest's token
spans are HF's token indices of the document boundaries.

The reference is HF tokenizers 0.23.2 run on framed.txt itself (`.venv/bin/python`, which
scripts/deps.sh test makes; LH_HF_PYTHON overrides), for both fixture tokenizers, on the fixture
tree of test_ingest_formats (tar.gz, --sort path, and archive order) and, with HF at hand, on a
few MB of real headers (many batches, spans checked against HF's offsets). Without HF the test
falls back, loudly, to the ids committed in tests/ingest/fixtures/expected.json
(tools/ingest_tok_fixtures.py made them with HF), checking first that the framed text is the
one those ids are for.
"""
import bisect
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ingest_e2e as E  # noqa: E402
import test_ingest_formats as F  # noqa: E402

FIX = os.path.join(HERE, "fixtures")


def hf_python():
    cands = [os.environ.get("LH_HF_PYTHON"),
             os.path.join(os.environ.get("LH_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE))), ".venv", "bin", "python")]
    for c in cands:
        if c and os.access(c, os.X_OK) and subprocess.run([c, "-c", "import tokenizers"], capture_output=True).returncode == 0:
            return c
    return None


def read_tokens(out):
    b = open(os.path.join(out, "tokens.u32"), "rb").read()
    return list(struct.unpack("<%dI" % (len(b) // 4), b))


def hf_encode(py, tok, framed_path, d):
    o = os.path.join(d, "hf.json")
    subprocess.run([py, os.path.join(HERE, "hf_encode.py"), tok, framed_path, o], check=True)
    return json.load(open(o))


def check_spans(label, rows, starts, n_tokens):
    at = 0
    for r in rows:
        ws = bisect.bisect_left(starts, r["text_start"])
        we = bisect.bisect_left(starts, r["text_end"])
        if not E.check((r["token_start"], r["token_end"]) == (ws, we),
                       "%s: %r span %s-%s, HF says %d-%d" % (label, r["path"], r["token_start"], r["token_end"], ws, we)):
            return
        E.check(r["token_start"] == at, "%s: spans do not tile at %r" % (label, r["path"]))
        at = r["token_end"]
    E.check(at == n_tokens, "%s: spans end at %d of %d tokens" % (label, at, n_tokens))


def main():
    E.need_tools("tar", "gzip")
    py = hf_python()
    if py:
        print("HF reference: %s (tokenizers, live)" % py, file=sys.stderr)
    else:
        print("WARNING: no Python with HF tokenizers (run scripts/deps.sh test); using the committed expected ids "
              "in tests/ingest/fixtures/expected.json", file=sys.stderr)
    exp = json.load(open(os.path.join(FIX, "expected.json")))
    d = E.tmpdir("ingest-tokens")
    tree = os.path.join(d, "tree")
    E.make_tree(tree, F.FILES, F.SYMLINKS)
    tgz = os.path.join(d, "tree.tar.gz")
    E.sh("tar -czf %s -C %s ." % (tgz, tree))
    model = os.path.join(d, "model")
    os.makedirs(model)
    for name in ("tok_gpt2", "tok_split_nfc"):
        tok = os.path.join(FIX, name + ".json")
        for mode in ("path", "archive"):
            out = os.path.join(d, "out-%s-%s" % (name, mode))
            rc, so, se = E.ingest(out, [tgz], "--tokenizer", tok, "--text", "--sort", mode, tokens=True)
            if not E.check(rc == 0, "%s/%s: exit %d %s" % (name, mode, rc, se)):
                continue
            framed_path = os.path.join(out, "framed.txt")
            framed = open(framed_path, "rb").read()
            ids = read_tokens(out)
            rows = E.manifest(out)
            E.check("%d tokens" % len(ids) in so, "%s/%s: summary %s" % (name, mode, so))
            if py:
                ref = hf_encode(py, tok, framed_path, d)
                E.check(ids == ref["ids"], "%s/%s: %d tokens differ from HF's %d (first at %s)" % (
                    name, mode, len(ids), len(ref["ids"]),
                    next((i for i, (a, b) in enumerate(zip(ids, ref["ids"])) if a != b), "the end")))
                check_spans("%s/%s" % (name, mode), rows, ref["starts"], len(ids))
            if mode == "path":
                if not E.check(hashlib.sha256(framed).hexdigest() == exp["framed_sha256"],
                               "%s: the framed text is not the one expected.json is for" % name):
                    continue
                want = exp["tokenizers"][name]
                E.check(ids == want["ids"], "%s: tokens differ from the committed HF ids" % name)
                docs = [r for r in rows if r["status"] == "ok"]
                E.check([r["token_start"] for r in docs] + [docs[-1]["token_end"]] == want["boundaries"],
                        "%s: document spans differ from HF's boundaries" % name)
        # --model DIR finds tokenizer.json in the folder.
        shutil.copy(tok, os.path.join(model, "tokenizer.json"))
        out = os.path.join(d, "out-%s-model" % name)
        rc, so, se = E.ingest(out, [tgz], "--model", model, "--sort", "path", tokens=True)
        E.check(rc == 0 and read_tokens(out) == exp["tokenizers"][name]["ids"], "%s --model: %d %s" % (name, rc, se))
        E.check(not os.path.exists(os.path.join(out, "framed.txt")), "framed.txt without --text")
        # the same --out again: text, then tokens; each leaves only its own outputs (a framed.txt
        # from the first stayed beside the second's tokens, its offsets no longer the manifest's)
        rc, so, se = E.ingest(out, [tgz], "--sort", "path")
        E.check(rc == 0 and not os.path.exists(os.path.join(out, "tokens.u32")), "--no-tokens kept old tokens: %s" % se)
        rc, so, se = E.ingest(out, [tgz], "--model", model, "--sort", "path", tokens=True)
        E.check(rc == 0 and not os.path.exists(os.path.join(out, "framed.txt")), "tokens kept an old framed.txt: %s" % se)

    # With HF at hand: real headers, the first 2 MiB of documents (--max-total-size keeps the
    # prompt a prefix): several batches, hundreds of documents, the cap's partial/skipped tail.
    if py:
        src = "/usr/include"
        big = os.path.join(d, "headers.tar")
        E.sh("tar -cf %s -C %s linux 2>/dev/null || test -s %s" % (big, src, big))
        for name in ("tok_gpt2", "tok_split_nfc"):
            tok = os.path.join(FIX, name + ".json")
            out = os.path.join(d, "out-big-" + name)
            rc, so, se = E.ingest(out, [big], "--tokenizer", tok, "--text", "--max-total-size", "2M", tokens=True)
            if not E.check(rc == 0, "headers %s: %d %s" % (name, rc, se)):
                continue
            ids = read_tokens(out)
            ref = hf_encode(py, tok, os.path.join(out, "framed.txt"), d)
            E.check(ids == ref["ids"], "headers %s: %d tokens vs HF %d" % (name, len(ids), len(ref["ids"])))
            rows = E.manifest(out)
            check_spans("headers " + name, rows, ref["starts"], len(ids))
            E.check(sum(r["status"] == "ok" for r in rows) > 100 and rows[-1]["reason"] == "total-cap",
                    "headers %s: expected many documents, then the total cap" % name)
            print("headers %s: %.1f MB framed, %d tokens" % (name, os.path.getsize(os.path.join(out, "framed.txt")) / 1e6,
                                                           len(ids)), file=sys.stderr)

    # --threads: the tokens and the manifest are byte for byte the same for 1, 2 (the default on two
    # cores) and 3 tokenizer threads, on a few MB of real headers (several jobs of the threaded stream).
    big = os.path.join(d, "headers.tar")
    if not os.path.exists(big):
        E.sh("tar -cf %s -C /usr/include linux 2>/dev/null || test -s %s" % (big, big))
    tok = os.path.join(FIX, "tok_split_nfc.json")
    outs = {}
    for th in ("1", "2", "3"):
        out = os.path.join(d, "out-threads-" + th)
        rc, so, se = E.ingest(out, [big], "--tokenizer", tok, "--threads", th, "--max-total-size", "6M", tokens=True)
        if E.check(rc == 0, "--threads %s: %d %s" % (th, rc, se)):
            E.check("on %s thread" % th in so, "--threads %s: summary says %s" % (th, so))
            outs[th] = (open(os.path.join(out, "tokens.u32"), "rb").read(),
                        open(os.path.join(out, "manifest.jsonl"), "rb").read())
    for th in ("2", "3"):
        if "1" in outs and th in outs:
            E.check(outs[th][0] == outs["1"][0], "--threads %s: tokens.u32 differs from one thread's" % th)
            E.check(outs[th][1] == outs["1"][1], "--threads %s: manifest.jsonl differs from one thread's" % th)
    rc, so, se = E.ingest(os.path.join(d, "out-threads-bad"), [big], "--tokenizer", tok, "--threads", "0", tokens=True)
    E.check(rc != 0 and "--threads" in se, "--threads 0 is refused: %d %s" % (rc, se))
    E.cleanup(d)
    E.finish("test_ingest_tokens")


if __name__ == "__main__":
    main()
