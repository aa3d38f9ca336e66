"""e2e: one fixture tree with tricky names and contents, archived by every real tool, ingested.

For each archive: every file comes back with its exact name (path, or path_hex for non-UTF-8
names), size and SHA-256 (hashlib); symlinks are recorded with their target and not followed;
binary files are skipped; with --sort path the framed text equals the framing built here from the
tree (ingest_e2e.frame), byte for byte, the same for every format; in archive order every
document's span holds its framing. Formats that cannot store some names (7z and Joliet mangle
non-UTF-8 bytes, ar is flat) get the subset they can.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest_e2e as E  # noqa: E402

FILES = {
    b"src/main.c": b"int main(void) { return 0; }\n",
    "src/ünïcödé-名前.txt".encode(): "Grüße, 世界 🌍 👨‍👩‍👧 e\u0301\n".encode(),
    b"docs/spaces in name.md": b"# Title\r\n\r\nCRLF text\r\n",
    b'docs/quote"amp&lt<gt>\'.txt': b'xml <chars> & "quotes"\n',
    b"weird/newline\nname.txt": b"newline in the name\n",
    b"weird/tab\tname.txt": b"\ttabbed\n",
    b"weird/ctrl\x01\x1b[31m.txt": b"an escape sequence in the name\n",
    "weird/bidi\u202eexe.txt".encode(): b"bidi override in the name\n",
    b"latin1/caf\xe9.txt": b"latin1 content caf\xe9 na\xefve\n",
    b"deep/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/file.txt": b"deep\n",
    b"long/" + b"x" * 200 + b".txt": b"a 204-byte name\n",
    b"long/" + b"/".join([b"d" * 60] * 5) + b"/f.txt": b"a path over 300 bytes\n",
    b"empty.txt": b"",
    b"only-newline.txt": b"\n",
    b"no-final-newline.txt": b"no newline at the end",
    b"bom.txt": b"\xef\xbb\xbfwith a BOM\n",
    b"repeat.txt": b"text" * 10,
    b"bin/image.png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)),
    b"bin/random.dat": bytes((i * 167 + 13) % 256 for i in range(4096)),
    b"a.c": b"sorts before a/ and after a-\n",
    b"a-z.txt": b"dash\n",
    b"a/inner.txt": b"inner\n",
}
SYMLINKS = [(b"link-to-main", b"src/main.c"), (b"abs-link", b"/etc/passwd"), (b"dangling", b"nowhere/at/all"),
            (b"docs/up", b"../../..")]


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def expected_docs(files):
    """(normalized path, content) of the documents, in --sort path order."""
    docs = [(p, c) for p, c in files.items() if not E.is_binary(c)]
    return sorted(docs, key=lambda pc: pc[0])


def check_archive(label, out, files, symlinks, sorted_run, check_links=True):
    try:
        rows = E.manifest(out)
    except Exception as ex:  # noqa: BLE001
        E.check(False, "%s: no manifest: %s" % (label, ex))
        return
    by_path = {}
    for r in rows:
        by_path.setdefault(E.normalize(E.raw_path(r)).rstrip(b"/"), []).append(r)
    framed = open(os.path.join(out, "framed.txt"), "rb").read()
    for p, c in files.items():
        rs = [r for r in by_path.get(p, []) if r["type"] == "file"]
        if not E.check(len(rs) == 1, "%s: %r: %d file entries" % (label, p, len(rs))):
            continue
        r = rs[0]
        if E.is_binary(c):
            E.check(r["status"] == "skipped" and r["reason"] == "binary", "%s: %r should be skipped as binary: %s" % (label, p, r))
            continue
        E.check(r["status"] == "ok" and r["reason"] is None, "%s: %r status %s" % (label, p, r["status"]))
        E.check(r["bytes"] == len(c), "%s: %r bytes %s != %d" % (label, p, r["bytes"], len(c)))
        E.check(r["sha256"] == E.sha(c), "%s: %r sha256" % (label, p))
        seg = framed[r["text_start"]:r["text_end"]]
        E.check(seg == E.frame(p, c), "%s: %r framing %r" % (label, p, seg[:200]))
        want_bad = c.decode("utf-8", "replace").count("\ufffd") - c.decode("utf-8", "ignore").count("\ufffd")
        E.check(r["invalid_utf8"] == want_bad, "%s: %r invalid_utf8 %s != %d" % (label, p, r["invalid_utf8"], want_bad))
        if not valid_utf8(p):
            E.check("path_hex" in r and "\ufffd" in r["path"], "%s: %r needs path_hex" % (label, p))
    if check_links:
        for p, t in symlinks:
            rs = by_path.get(p, [])
            E.check(len(rs) == 1 and rs[0]["type"] == "symlink" and rs[0]["status"] == "skipped" and
                    rs[0]["reason"] == "link" and rs[0].get("link", "").encode() == t,
                    "%s: symlink %r: %s" % (label, p, rs))
    E.check(b"root:" not in framed, "%s: a symlink was followed" % label)
    docs = [r for r in rows if r["status"] == "ok"]
    E.check(len(docs) == len(expected_docs(files)), "%s: %d documents, want %d" % (label, len(docs), len(expected_docs(files))))
    # Spans tile the framed text.
    at = 0
    for r in rows:
        E.check(r["text_start"] == at and r["text_end"] >= at, "%s: spans do not tile at %r" % (label, r["path"]))
        at = r["text_end"]
    E.check(at == len(framed), "%s: spans end at %d of %d" % (label, at, len(framed)))
    if sorted_run:
        want = b"".join(E.frame(p, c) for p, c in expected_docs(files))
        E.check(framed == want, "%s: --sort path framed text differs from the reference (%d vs %d bytes)" %
                (label, len(framed), len(want)))


def main():
    E.need_tools("tar", "bsdtar", "zip", "7z", "cpio", "xorriso", "genisoimage", "ar", "gzip", "bzip2", "xz",
                 "zstd", "lz4", "find")
    d = E.tmpdir("ingest-formats")
    tree = os.path.join(d, "tree")
    E.make_tree(tree, FILES, SYMLINKS)
    utf8_files = {p: c for p, c in FILES.items() if valid_utf8(p)}
    tree8 = os.path.join(d, "tree-utf8")
    E.make_tree(tree8, utf8_files, SYMLINKS)
    flat_files = {b"a.txt": b"one\n", b"a long file name over 16.txt": b"long ar name\n", b"b.md": b"# b\n",
                  b"bin.o": b"\x7fELF\x00\x01"}
    flat = os.path.join(d, "flat")
    E.make_tree(flat, flat_files)
    A = lambda n: os.path.join(d, n)  # noqa: E731
    # name, command (run in the tree), the tree, its files, symlinks kept
    makers = [
        ("gnu.tar", "tar -cf %s ." % A("gnu.tar"), tree, FILES, True),
        ("pax.tar", "bsdtar --format pax -cf %s ." % A("pax.tar"), tree, FILES, True),
        ("gnu.tar.gz", "tar -czf %s ." % A("gnu.tar.gz"), tree, FILES, True),
        ("gnu.tar.bz2", "tar -cjf %s ." % A("gnu.tar.bz2"), tree, FILES, True),
        ("gnu.tar.xz", "tar -cJf %s ." % A("gnu.tar.xz"), tree, FILES, True),
        ("gnu.tar.zst", "tar --zstd -cf %s ." % A("gnu.tar.zst"), tree, FILES, True),
        ("gnu.tar.lz4", "tar -cf - . | lz4 -q > %s" % A("gnu.tar.lz4"), tree, FILES, True),
        ("x.zip", "zip -qry %s ." % A("x.zip"), tree, FILES, True),
        ("x.7z", "7z a -bd -snl %s . >/dev/null" % A("x.7z"), tree8, utf8_files, True),
        ("newc.cpio", "find . -print0 | cpio -0 -o -H newc --quiet > %s" % A("newc.cpio"), tree, FILES, True),
        ("odc.cpio.gz", "find . -print0 | cpio -0 -o -H odc --quiet | gzip > %s" % A("odc.cpio.gz"), tree, FILES, True),
        ("xorriso.iso", "xorriso -as mkisofs -quiet -R -J -o %s . 2>/dev/null" % A("xorriso.iso"), tree8, utf8_files, True),
        ("rr.iso", "xorriso -as mkisofs -quiet -R -o %s . 2>/dev/null" % A("rr.iso"), tree, FILES, True),
        # the ISO reader is offered only where the decompressed bytes show "CD001" at 32769 (archive.c)
        ("rr.iso.gz", "xorriso -as mkisofs -quiet -R -o - . 2>/dev/null | gzip > %s" % A("rr.iso.gz"), tree, FILES,
         True),
        ("genisoimage.iso", "genisoimage -quiet -R -J -joliet-long -o %s . 2>/dev/null" % A("genisoimage.iso"), tree8,
         utf8_files, True),
        ("x.a", "ar rc %s *" % A("x.a"), flat, flat_files, False),
    ]
    for name, cmd, src, files, links in makers:
        try:
            E.sh(cmd, cwd=src)
        except RuntimeError as ex:
            E.check(False, "%s: making the archive failed: %s" % (name, ex))
            continue
        syms = SYMLINKS if links else []
        for mode in ("path", "archive"):
            out = A("out-%s-%s" % (name, mode))
            rc, so, se = E.ingest(out, [A(name)], "--sort", mode)
            if not E.check(rc == 0, "%s --sort %s: exit %d: %s" % (name, mode, rc, se)):
                continue
            check_archive("%s/%s" % (name, mode), out, files, syms, mode == "path", check_links=links)

    # The folder itself, and the gzip'd tar through stdin, with a tiny --sort-memory (one pass per
    # window of 300 bytes: about a pass per document).
    for label, inputs, opts, stdin in [
        ("folder", [tree], ["--sort", "path"], None),
        ("folder-archive-order", [tree], [], None),
        ("stdin.tar.gz", ["-"], ["--sort", "path"], A("gnu.tar.gz")),
        ("stdin.iso.gz", ["-"], [], A("rr.iso.gz")),
        ("multipass.tar.xz", [A("gnu.tar.xz")], ["--sort", "path", "--sort-memory", "300"], None),
        ("multipass.zip", [A("x.zip")], ["--sort", "path", "--sort-memory", "1"], None),
    ]:
        out = A("out-" + label)
        f = open(stdin, "rb") if stdin else None
        rc, so, se = E.ingest(out, inputs, *opts, stdin=f)
        if f:
            f.close()
        if E.check(rc == 0, "%s: exit %d: %s" % (label, rc, se)):
            check_archive(label, out, FILES, SYMLINKS, "path" in opts or label.startswith("folder"))
    # Every format, sorted, frames the common subset identically: compare the UTF-8 tree's archives.
    ref = open(A("out-x.7z-path/framed.txt"), "rb").read()
    for name in ("xorriso.iso", "genisoimage.iso"):
        E.check(open(A("out-%s-path/framed.txt" % name), "rb").read() == ref, "%s differs from x.7z" % name)
    ref = open(A("out-folder/framed.txt"), "rb").read()
    for name in ("gnu.tar", "pax.tar", "gnu.tar.zst", "x.zip", "newc.cpio", "rr.iso"):
        E.check(open(A("out-%s-path/framed.txt" % name), "rb").read() == ref, "%s differs from the folder" % name)

    # Compressed single files are one document named without the suffix.
    content = FILES["src/ünïcödé-名前.txt".encode()]
    with open(A("notes.txt"), "wb") as f:
        f.write(content)
    for tool, suffix in [("gzip", ".gz"), ("bzip2", ".bz2"), ("xz", ".xz"), ("zstd -q", ".zst"), ("lz4 -q", ".lz4")]:
        E.sh("%s -c %s > %s" % (tool, A("notes.txt"), A("notes.txt" + suffix)))
        out = A("out-single" + suffix)
        rc, so, se = E.ingest(out, [A("notes.txt" + suffix)])
        if E.check(rc == 0, "%s: exit %d: %s" % (suffix, rc, se)):
            rows = E.manifest(out)
            E.check(len(rows) == 1 and rows[0]["path"] == A("notes.txt") and rows[0]["sha256"] == E.sha(content),
                    "single %s: %s" % (suffix, rows))
    # Several inputs of different kinds in one run keep their order and their input index.
    out = A("out-multi")
    rc, so, se = E.ingest(out, [A("notes.txt.xz"), tree8, A("x.a")])
    if E.check(rc == 0, "multi: exit %d: %s" % (rc, se)):
        rows = E.manifest(out)
        E.check([r["input"] for r in rows] == sorted(r["input"] for r in rows), "multi: inputs out of order")
        E.check(rows[0]["input"] == 0 and rows[-1]["input"] == 2, "multi: input indices")
        E.check("entries from 3 inputs" in so, "multi summary: %s" % so)
    E.cleanup(d)
    E.finish("test_ingest_formats")


if __name__ == "__main__":
    main()
