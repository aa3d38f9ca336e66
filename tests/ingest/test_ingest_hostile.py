"""e2e: hostile and awkward inputs, made with the real tools.

Bombs (tar.gz and zip of highly compressible data, stopped by the ratio cap with a clear error;
a gzip of zeros skipped as binary without being inflated), traversal and absolute names (kept
verbatim, nothing written outside --out), symlink loops in folders (recorded, never followed),
truncated gzip and a zip with a bad CRC (entry and offset reported, what was read kept,
--on-error fail|skip), encrypted zip and 7z, 0-byte files and inputs, 20,000 tiny files, a
200 MB file under the cap, names that would drive a terminal (shown escaped), --out inside a folder
input (left out, never read back), and the no-half-written-manifest rule.
"""
import hashlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ingest_e2e as E  # noqa: E402


def A(d, *n):
    return os.path.join(d, *n)


def bombs(d):
    # 64 MB of one repeated line: text, so it is read, and about 340:1 under gzip and deflate. The
    # ratio applies past --ratio-grace (default 256 MiB; 8M here to keep the test short).
    line = "all work and no play makes a dull bomb"
    E.sh("mkdir -p %s && cd %s && yes '%s' | head -c 64000000 > big.txt && tar -czf ../bomb.tar.gz big.txt && "
         "zip -q ../bomb.zip big.txt && gzip -c big.txt > ../big.txt.gz && rm big.txt" % (A(d, "b"), A(d, "b"), line))
    grace = ("--ratio-grace", "8M")
    for name in ("bomb.tar.gz", "bomb.zip", "big.txt.gz"):
        out = A(d, "out-" + name)
        rc, so, se = E.ingest(out, [A(d, name)], *grace)
        E.check(rc == 1, "%s: exit %d, want 1: %s" % (name, rc, se))
        E.check("decompression ratio" in se and "over the limit of 200:1" in se and "--max-ratio" in se,
                "%s: message: %s" % (name, se))
        E.check(not os.path.exists(A(out, "manifest.jsonl")), "%s: a complete-looking manifest after a bomb" % name)
        rows = E.manifest(out, partial=True)
        E.check(rows and rows[-1]["status"] == "error" and rows[-1]["reason"] == "bomb", "%s: rows %s" % (name, rows))
        # It stops within a block or two of the grace, not at the end.
        E.check(rows and rows[-1]["bytes"] is not None and rows[-1]["bytes"] < 64000000, "%s: read to the end: %s" % (name, rows))
    # A trusted input passes with a higher limit; the byte cap is its own limit.
    rc, so, se = E.ingest(A(d, "out-trusted"), [A(d, "big.txt.gz")], *grace, "--max-ratio", "100000")
    E.check(rc == 0 and E.manifest(A(d, "out-trusted"))[0]["status"] == "ok", "trusted: %d %s" % (rc, se))
    rc, so, se = E.ingest(A(d, "out-bytecap"), [A(d, "big.txt.gz")], "--max-decompressed", "10M")
    E.check(rc == 1 and "decompression cap" in se and "--max-decompressed" in se, "byte cap: %d %s" % (rc, se))
    # Default settings: a 300 MB member is over the per-file cap, so it is skipped; skipping it in a
    # tar.gz means inflating it, and the default ratio (200:1 past 256 MiB) stops that. The same
    # member in a zip is skipped by seeking, nothing inflated, no error.
    E.sh("mkdir -p %s && cd %s && truncate -s 300000000 sparse.bin && tar -czf ../sparse.tar.gz sparse.bin && "
         "zip -q ../sparse.zip sparse.bin && rm sparse.bin" % (A(d, "s"), A(d, "s")))
    rc, so, se = E.ingest(A(d, "out-tgz-default"), [A(d, "sparse.tar.gz")])
    rows = E.manifest(A(d, "out-tgz-default"), partial=True)
    E.check(rc == 1 and "decompression ratio" in se and rows[0]["reason"] == "too-large" and rows[-1]["reason"] == "bomb",
            "tar.gz default: %d %s %s" % (rc, se, rows))
    rc, so, se = E.ingest(A(d, "out-zip-default"), [A(d, "sparse.zip")])
    rows = E.manifest(A(d, "out-zip-default"))
    E.check(rc == 0 and rows[0]["reason"] == "too-large" and rows[0]["bytes"] == 300000000, "zip default: %s %s" % (rows, se))
    # Binary data is skipped after the sniff window (1 MiB), never inflated further. (Not all
    # zeros: libarchive rightly reads those as an empty tar archive.)
    E.sh("yes 'binary\x01' | tr '\\001' '\\000' | head -c 100000000 | gzip -1 > %s" % A(d, "bin.gz"))
    rc, so, se = E.ingest(A(d, "out-bin"), [A(d, "bin.gz")])
    rows = E.manifest(A(d, "out-bin"))
    summary = json.load(open(A(d, "out-bin", "summary.json")))
    E.check(rc == 0 and rows[0]["reason"] == "binary" and summary["content_bytes"] <= 2 << 20,
            "bin.gz: %s %s %s" % (rows, summary, se))
    # --on-error skip goes on to the next input.
    with open(A(d, "after.txt"), "wb") as f:
        f.write(b"after the bomb\n")
    rc, so, se = E.ingest(A(d, "out-skip"), [A(d, "bomb.tar.gz"), A(d, "after.txt")], *grace, "--on-error", "skip")
    rows = E.manifest(A(d, "out-skip"))
    E.check(rc == 0 and rows[-1]["path"] == A(d, "after.txt") and rows[-1]["status"] == "ok" and
            any(r["reason"] == "bomb" for r in rows), "skip after bomb: %s %s" % (rows, se))
    for n in ("bomb.tar.gz", "bomb.zip", "big.txt.gz", "bin.gz", "sparse.tar.gz", "sparse.zip"):
        os.unlink(A(d, n))


def traversal(d):
    src = A(d, "trav-src")
    E.make_tree(src, {b"f.txt": b"payload\n", b"g.txt": b"absolute\n", b"h.txt": b"dotdot\n"})
    E.sh("bsdtar -cf %s -P -s ',^f.txt$,../../../../tmp/lh-evil.txt,' -s ',^g.txt$,/etc/lh-evil.txt,' "
         "-s ',^h.txt$,a/../../up.txt,' f.txt g.txt h.txt" % A(d, "trav.tar"), cwd=src)
    before = set(os.listdir("/tmp")), set(os.listdir(d))
    out = A(d, "out-trav")
    rc, so, se = E.ingest(out, [A(d, "trav.tar")])
    E.check(rc == 0, "traversal: exit %d %s" % (rc, se))
    rows = E.manifest(out)
    paths = [r["path"] for r in rows]
    E.check(paths == ["../../../../tmp/lh-evil.txt", "/etc/lh-evil.txt", "a/../../up.txt"], "traversal paths %s" % paths)
    E.check(all(r["status"] == "ok" for r in rows), "traversal status")
    framed = open(A(out, "framed.txt"), "rb").read()
    E.check(b'<document path="../../../../tmp/lh-evil.txt">\npayload\n' in framed, "traversal framing")
    E.check(not os.path.exists("/tmp/lh-evil.txt") and not os.path.exists("/etc/lh-evil.txt"), "something was extracted")
    after = set(os.listdir("/tmp")), set(os.listdir(d))
    E.check(after[1] - before[1] == {"out-trav"}, "new files beside the archive: %s" % (after[1] - before[1]))
    E.check(not any(n.startswith("lh-evil") for n in after[0] - before[0]), "new files in /tmp")


def loops(d):
    t = A(d, "loops")
    E.make_tree(t, {b"real/file.txt": b"real\n"},
                [(b"self", b"self"), (b"dot", b"."), (b"real/up", b".."), (b"a", b"b"), (b"b", b"a"),
                 (b"real/root", b"/")])
    out = A(d, "out-loops")
    t0 = time.time()
    rc, so, se = E.ingest(out, [t])
    E.check(rc == 0 and time.time() - t0 < 5, "loops: exit %d %s" % (rc, se))
    rows = E.manifest(out)
    links = {r["path"]: r.get("link") for r in rows if r["type"] == "symlink"}
    E.check(links == {"a": "b", "b": "a", "dot": ".", "self": "self", "real/root": "/", "real/up": ".."},
            "loops: symlinks %s" % links)
    E.check([r["path"] for r in rows if r["status"] == "ok"] == ["real/file.txt"], "loops: documents")
    # The same tree as a tar: links recorded the same way.
    E.sh("tar -cf %s -C %s ." % (A(d, "loops.tar"), t))
    rc, so, se = E.ingest(A(d, "out-loops-tar"), [A(d, "loops.tar")], "--sort", "path")
    E.check(rc == 0 and open(A(d, "out-loops-tar", "framed.txt"), "rb").read() ==
            open(A(out, "framed.txt"), "rb").read(), "loops tar")
    # Hardlinks: the second name is recorded as a link to the first (folder and tar alike).
    h = A(d, "hard")
    E.make_tree(h, {b"a.txt": b"shared\n"})
    os.link(A(h, "a.txt"), A(h, "b.txt"))
    for label, inp in (("folder", h), ("tar", A(d, "hard.tar"))):
        if label == "tar":
            E.sh("tar -cf %s -C %s a.txt b.txt" % (inp, h))
        out = A(d, "out-hard-" + label)
        rc, so, se = E.ingest(out, [inp])
        rows = E.manifest(out)
        E.check(rc == 0 and [(r["type"], r["status"]) for r in rows] == [("file", "ok"), ("hardlink", "skipped")] and
                rows[1].get("link") == "a.txt", "hardlink %s: %s" % (label, rows))


def corrupt(d):
    src = A(d, "corrupt-src")
    files = {("f%02d.txt" % i).encode(): (("file %d " % i) * 4000 + "\n").encode() for i in range(10)}
    files[b"esc\x1b[2Jname.txt"] = b"x" * 60000
    E.make_tree(src, files)
    names = sorted(files)
    E.sh(["tar", "-czf", A(d, "full.tar.gz"), "-C", src] + [n.decode("latin-1") for n in names])
    data = open(A(d, "full.tar.gz"), "rb").read()
    with open(A(d, "cut.tar.gz"), "wb") as f:
        f.write(data[:len(data) * 6 // 10])
    out = A(d, "out-cut")
    rc, so, se = E.ingest(out, [A(d, "cut.tar.gz")])
    E.check(rc == 1, "truncated: exit %d" % rc)
    E.check("entry '" in se and "input offset" in se and "cut.tar.gz" in se, "truncated message: %s" % se)
    E.check(not os.path.exists(A(out, "manifest.jsonl")) and os.path.exists(A(out, "manifest.jsonl.partial")),
            "truncated: outputs")
    rows = E.manifest(out, partial=True)
    bad = rows[-1]
    E.check(bad["status"] == "error" and bad["reason"] == "corrupt" and bad["error_offset"] > 0, "truncated row %s" % bad)
    ok = [r for r in rows if r["status"] == "ok"]
    E.check(len(ok) >= 3 and all(r["sha256"] == E.sha(files[r["path"].encode()]) for r in ok), "kept what was read")
    framed = open(A(out, "framed.txt.partial"), "rb").read()
    E.check(framed.endswith(b"</document>\n") and framed[bad["text_start"]:bad["text_end"]].startswith(b"<document"),
            "the broken document is framed up to where it broke")
    # The terminal never sees a raw escape from a name.
    cut2 = data[:len(data) - 40]
    with open(A(d, "cut2.tar.gz"), "wb") as f:
        f.write(cut2)
    rc, so, se = E.ingest(A(d, "out-cut2"), [A(d, "cut2.tar.gz")])
    E.check(rc == 1 and "\x1b" not in se, "escape reached the terminal: %r" % se)
    E.check("esc\\x1b[2Jname.txt" in se or "input offset" in se, "cut2 message %r" % se)
    # --on-error skip: the damaged input is recorded, the next input is read, exit 0.
    rc, so, se = E.ingest(A(d, "out-cut-skip"), [A(d, "cut.tar.gz"), A(d, "full.tar.gz")], "--on-error", "skip")
    rows = E.manifest(A(d, "out-cut-skip"))
    E.check(rc == 0 and sum(r["status"] == "ok" for r in rows if r["input"] == 1) == len(files) and
            any(r["status"] == "error" for r in rows if r["input"] == 0), "skip: %s" % se)
    E.check("--on-error skip goes on, and what was read of the entry before it stays in the output" in se and "errors" in so, "skip reports the error: %s / %s" % (se, so))

    # A stored zip member with one flipped byte fails its CRC.
    E.make_tree(A(d, "crc"), {b"good.txt": b"good\n", b"bad.txt": b"bad data here\n" * 10})
    E.sh("zip -q -0 %s good.txt bad.txt" % A(d, "crc.zip"), cwd=A(d, "crc"))
    z = bytearray(open(A(d, "crc.zip"), "rb").read())
    i = z.find(b"bad data here")
    z[i] ^= 0x20
    with open(A(d, "crc.zip"), "wb") as f:
        f.write(z)
    for mode, want_rc in (("fail", 1), ("skip", 0)):
        out = A(d, "out-crc-" + mode)
        rc, so, se = E.ingest(out, [A(d, "crc.zip")], "--on-error", mode)
        rows = E.manifest(out, partial=(mode == "fail"))
        E.check(rc == want_rc, "crc %s: exit %d" % (mode, rc))
        E.check([(r["path"], r["status"]) for r in rows] == [("good.txt", "ok"), ("bad.txt", "error")],
                "crc %s rows %s" % (mode, rows))
        E.check("CRC" in rows[-1].get("detail", ""), "crc detail %s" % rows[-1])

    # Encryption: zip -P (data), 7z -p (data), 7z -p -mhe=on (headers too).
    E.make_tree(A(d, "enc"), {b"secret.txt": b"the secret\n", b"plain.txt": b"plain\n"})
    E.sh("zip -q -P pw %s secret.txt && zip -q %s plain.txt" % (A(d, "enc.zip"), A(d, "enc.zip")), cwd=A(d, "enc"))
    E.sh("7z a -bd -ppw %s secret.txt >/dev/null && 7z a -bd -ppw -mhe=on %s secret.txt >/dev/null" %
         (A(d, "enc.7z"), A(d, "enc-hdr.7z")), cwd=A(d, "enc"))
    rc, so, se = E.ingest(A(d, "out-enc"), [A(d, "enc.zip"), A(d, "enc.7z")])
    rows = E.manifest(A(d, "out-enc"))
    E.check(rc == 0 and [(r["path"], r["reason"]) for r in rows] ==
            [("secret.txt", "encrypted"), ("plain.txt", None), ("secret.txt", "encrypted")], "encrypted: %s %s" % (rows, se))
    E.check(b"the secret" not in open(A(d, "out-enc", "framed.txt"), "rb").read(), "encrypted content leaked")
    rc, so, se = E.ingest(A(d, "out-enc-hdr"), [A(d, "enc-hdr.7z")])
    rows = E.manifest(A(d, "out-enc-hdr"), partial=True)
    E.check(rc == 1 and rows[-1]["type"] == "input" and rows[-1]["reason"] == "encrypted", "7z -mhe: %s %s" % (rows, se))


def empties(d):
    e = A(d, "empties")
    E.make_tree(e, {b"zero.txt": b"", b"sub/zero2": b""}, dirs=[b"emptydir"])
    open(A(d, "zero-input.txt"), "wb").close()
    E.sh("tar -cf %s -C %s . && gzip -c %s > %s" % (A(d, "empties.tar"), e, A(d, "zero-input.txt"), A(d, "zero-input.txt.gz")))
    rc, so, se = E.ingest(A(d, "out-empty"), [e, A(d, "empties.tar"), A(d, "zero-input.txt"), A(d, "zero-input.txt.gz")],
                          "--sort", "path")
    rows = E.manifest(A(d, "out-empty"))
    docs = [(r["input"], E.normalize(E.raw_path(r)).decode()) for r in rows if r["status"] == "ok"]
    E.check(rc == 0 and docs == [(0, "sub/zero2"), (0, "zero.txt"), (1, "sub/zero2"), (1, "zero.txt"),
                                 (2, A(d, "zero-input.txt")),
                                 (3, A(d, "zero-input.txt"))], "empties: %s %s" % (docs, se))
    E.check(all(r["bytes"] == 0 and r["sha256"] == E.sha(b"") for r in rows if r["status"] == "ok"), "empty sha")
    rc, so, se = E.ingest(A(d, "out-empty-stdin"), ["-"], stdin=open(os.devnull, "rb"))
    rows = E.manifest(A(d, "out-empty-stdin"))
    E.check(rc == 0 and [(r["path"], r["bytes"]) for r in rows] == [("-", 0)], "empty stdin: %s" % rows)
    # an input that gave no text is said on stderr (the notes were made and never printed)
    E.check("longhaul ingest: warning: -: no text: 1 document, all empty" in se, "empty stdin, no warning: %s" % se)


def out_inside(d):
    # --out inside a folder input: the walk leaves the output folder out (once, as excluded) and
    # never reads its own .partial files back (it framed them, and grew to 256 MiB with 20 files)
    f = A(d, "self")
    E.make_tree(f, {b"notes.txt": b"the notes\n" * 20000})
    out = A(f, "out")
    rc, so, se = E.ingest(out, [f])
    rows = E.manifest(out)
    inside = [r for r in rows if r["path"].startswith("out")]
    E.check(rc == 0 and [(r["path"], r["reason"]) for r in inside] == [("out/", "excluded")], "out inside: %s %s" % (inside, se))
    E.check([r["path"] for r in rows if r["status"] == "ok"] == ["notes.txt"], "out inside: %s" % rows)


def link_steps(d):
    # N binary files, then N hard links to them: each link's target gives no document, so each link
    # re-reads the archive up to its target (quadratic: 8,000 pairs, a 137 KB tar.gz, took 113 s).
    # Past 16M entries stepped over by re-reads, further links are recorded unread, naming the limit.
    import io
    import tarfile
    n = 6000
    path = A(d, "link-steps.tar.gz")
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            data = b"\0bin %d\n" % i
            ti = tarfile.TarInfo("t/%06d.dat" % i)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        for i in range(n):
            ti = tarfile.TarInfo("l/%06d.txt" % i)
            ti.type = tarfile.LNKTYPE
            ti.linkname = "t/%06d.dat" % i
            t.addfile(ti)
    t0 = time.time()
    rc, so, se = E.ingest(A(d, "out-link-steps"), [path])
    took = time.time() - t0
    rows = E.manifest(A(d, "out-link-steps"))
    capped = [r for r in rows if "re-reading hard link targets has stepped over" in (r.get("detail") or "")]
    E.check(rc == 0 and len(rows) == 2 * n, "links: exit %d, %d rows: %s" % (rc, len(rows), se))
    E.check(0 < len(capped) < n and capped[-1]["path"] == "l/%06d.txt" % (n - 1), "links: %d capped" % len(capped))
    print("link_steps: %.1f s, %d of %d links past the limit" % (took, len(capped), n), file=sys.stderr)


def many_files(d):
    t = A(d, "many")
    os.makedirs(t)
    for i in range(200):
        sub = A(t, "d%03d" % i)
        os.makedirs(sub)
        for j in range(100):
            with open(A(sub, "f%03d.txt" % j), "wb") as f:
                f.write(b"%d/%d\n" % (i, j))
    E.sh("tar -czf %s -C %s ." % (A(d, "many.tar.gz"), t))
    for label, inp, opts in (("folder", t, []), ("tar.gz", A(d, "many.tar.gz"), ["--sort", "path"])):
        out = A(d, "out-many-" + label)
        t0 = time.time()
        rc, so, se = E.ingest(out, [inp], *opts)
        dt = time.time() - t0
        rows = E.manifest(out)
        files = [r for r in rows if r["type"] == "file"]
        E.check(rc == 0 and len(files) == 20000 and all(r["status"] == "ok" for r in files), "many %s" % label)
        E.check(dt < 20, "many %s took %.1f s" % (label, dt))
        E.check("20200" in so or "20201" in so, "many %s summary: %s" % (label, so))
    E.check(open(A(d, "out-many-folder", "framed.txt"), "rb").read() ==
            open(A(d, "out-many-tar.gz", "framed.txt"), "rb").read(), "many: folder and tar.gz differ")


def big_file(d):
    # 200 MB of varied text, written and hashed in a stream; under a 256 MiB cap.
    path = A(d, "big.log")
    h = hashlib.sha256()
    n = 0
    with open(path, "wb") as f:
        block = b"".join(b"%08d the quick brown fox jumps over the lazy dog \xc3\xa9\n" % i for i in range(16384))
        while n < 200_000_000:
            f.write(block)
            h.update(block)
            n += len(block)
    out = A(d, "out-big")
    t0 = time.time()
    rc, so, se = E.ingest(out, [path])
    dt = time.time() - t0
    rows = E.manifest(out)
    E.check(rc == 0 and rows[0]["bytes"] == n and rows[0]["sha256"] == h.hexdigest(), "big: %s %s" % (rows, se))
    framed = A(out, "framed.txt")
    head = ('<document path="%s">\n' % path).encode()
    want = hashlib.sha256()
    want.update(head)
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            want.update(piece)
    want.update(b"</document>\n")
    got = hashlib.sha256()
    with open(framed, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            got.update(piece)
    E.check(got.hexdigest() == want.hexdigest(), "big: framed text differs")
    print("%d MB file: %.1f s (%.0f MB/s)" % (n // 1000000, dt, n / 1e6 / dt), file=sys.stderr)
    # Over the cap: skipped by its size, unread.
    rc, so, se = E.ingest(A(d, "out-big-cap"), [path], "--max-file-size", "100M")
    rows = E.manifest(A(d, "out-big-cap"))
    E.check(rc == 0 and rows[0]["reason"] == "too-large" and os.path.getsize(A(d, "out-big-cap", "framed.txt")) == 0,
            "big over cap: %s" % rows)
    # Streamed through a pipe the size is unknown: cut at the cap, marked partial.
    cat = subprocess.Popen(["cat", path], stdout=subprocess.PIPE)
    rc, so, se = E.ingest(A(d, "out-big-stdin"), ["-"], "--max-file-size", "1M", stdin=cat.stdout)
    cat.stdout.close()
    cat.wait()
    rows = E.manifest(A(d, "out-big-stdin"))
    E.check(rc == 0 and rows[0]["status"] == "partial" and rows[0]["bytes"] == 1 << 20, "big stdin: %s" % rows)
    os.unlink(path)
    os.unlink(framed)


def manifest_rules(d):
    # A stale complete manifest is removed before a new run writes anything.
    out = A(d, "out-rules")
    os.makedirs(out)
    with open(A(out, "manifest.jsonl"), "w") as f:
        f.write('{"stale": true}\n')
    rc, so, se = E.ingest(out, [A(d, "does-not-exist.tar")])
    E.check(rc == 2 and "does-not-exist.tar" in se, "missing input: %d %s" % (rc, se))
    E.check(os.path.exists(A(out, "manifest.jsonl")), "a usage error must not touch outputs")
    with open(A(d, "bad.zip"), "wb") as f:
        f.write(b"PK\x03\x04" + b"\xff" * 100)
    rc, so, se = E.ingest(out, [A(d, "bad.zip")])
    E.check(rc == 1 and not os.path.exists(A(out, "manifest.jsonl")), "stale manifest survived a failed run")
    rc, so, se = E.ingest(A(d, "out-bad-template"), [A(d, "bad.zip")], "--template", "{nope}")
    E.check(rc == 2 and "unknown placeholder {nope}" in se, "template error: %s" % se)
    with open(A(d, "note.txt"), "wb") as f:
        f.write(b"a note\n")
    rc, so, se = E.ingest(A(d, "out-tmpl"), [A(d, "note.txt")], "--template", "== {path_raw} ==\\n{text}--\\n")
    E.check(rc == 0 and open(A(d, "out-tmpl", "framed.txt"), "rb").read() ==
            ("== %s ==\na note\n--\n" % A(d, "note.txt")).encode(), "template")
    # Links planted at the names of the partial outputs (to a file elsewhere) are replaced, never
    # written through.
    out = A(d, "out-links")
    os.makedirs(out)
    with open(A(d, "victim.txt"), "w") as f:
        f.write("precious\n")
    for n in ("manifest.jsonl.partial", "framed.txt.partial"):
        os.symlink(A(d, "victim.txt"), A(out, n))
    rc, so, se = E.ingest(out, [A(d, "note.txt")])
    E.check(rc == 0 and open(A(d, "victim.txt")).read() == "precious\n",
            "a link at a partial output was written through: %d %s %r" % (rc, se, open(A(d, "victim.txt")).read()))
    E.check(rc == 0 and [r["path"] for r in E.manifest(out)] == [A(d, "note.txt")] and
            not os.path.islink(A(out, "manifest.jsonl")), "outputs after links at the partials: %s" % se)


def main():
    E.need_tools("tar", "bsdtar", "zip", "7z", "gzip", "yes", "head")
    d = E.tmpdir("ingest-hostile")
    for f in (bombs, traversal, loops, corrupt, empties, out_inside, link_steps, many_files, big_file, manifest_rules):
        t0 = time.time()
        try:
            f(d)
        except Exception as ex:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            E.check(False, "%s raised %s" % (f.__name__, ex))
        print("%s: %.1f s" % (f.__name__, time.time() - t0), file=sys.stderr)
    E.cleanup(d)
    E.finish("test_ingest_hostile")


if __name__ == "__main__":
    main()
