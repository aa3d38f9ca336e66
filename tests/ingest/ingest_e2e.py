"""Shared helpers for the ingest end-to-end tests (Python standard library only).

The reference for what ingest must produce is written here, independently of the C code, from
the spec in ingest/ingest.h: which entries are documents, how a document is framed, how invalid
UTF-8 is replaced (Python's own decoder, errors="replace"), SHA-256 by hashlib. Archives are made
by the real tools (tar, bsdtar, zip, 7z, cpio, xorriso, genisoimage, ar, gzip, ...).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAILURES = []
CHECKS = [0]


def check(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(msg)
        print("CHECK failed: " + msg, file=sys.stderr)
    return cond


def finish(name):
    print("%s: %d checks, %d failures" % (name, CHECKS[0], len(FAILURES)), file=sys.stderr)
    sys.exit(1 if FAILURES else 0)


def skip(msg):
    print("SKIPPED: " + msg, file=sys.stderr)
    sys.exit(77)


def longhaul():
    p = os.environ.get("LH_LONGHAUL")
    if not p or not os.access(p, os.X_OK):
        skip("LH_LONGHAUL is not set to the built longhaul binary")
    return p


def need_tools(*tools):
    missing = [t for t in tools if not shutil.which(t)]
    if missing:
        skip("archive tools missing: %s (scripts/deps.sh test installs them)" % " ".join(missing))


def tmpdir(name):
    """$TMPDIR when set; else /dev/shm when it is a roomy tmpfs (creating 20,000 files or a 200 MB
    file there costs seconds less than on a busy disk); else /tmp."""
    base = os.environ.get("TMPDIR")
    if not base:
        base = "/tmp"
        try:
            st = os.statvfs("/dev/shm")
            if st.f_bavail * st.f_frsize > 4 << 30 and os.access("/dev/shm", os.W_OK):
                base = "/dev/shm"
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="lh-%s-" % name, dir=base)


def cleanup(d):
    if not os.environ.get("LH_KEEP_TMP"):
        shutil.rmtree(d, ignore_errors=True)


def sh(cmd, cwd=None, check_rc=True, stdin=None):
    r = subprocess.run(cmd, cwd=cwd, shell=isinstance(cmd, str), stdin=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check_rc and r.returncode != 0:
        raise RuntimeError("command failed (%d): %s\n%s" % (r.returncode, cmd, r.stderr.decode(errors="replace")))
    return r


def ingest(out, inputs, *opts, stdin=None, tokens=False):
    """Run longhaul ingest; returns (returncode, stdout, stderr)."""
    cmd = [longhaul(), "ingest"]
    if not tokens:
        cmd.append("--no-tokens")
    cmd += ["--out", out] + list(opts) + list(inputs)
    r = subprocess.run(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def manifest(out, partial=False):
    name = "manifest.jsonl.partial" if partial else "manifest.jsonl"
    rows = []
    with open(os.path.join(out, name), "rb") as f:
        for line in f:
            rows.append(json.loads(line))
    return rows


def raw_path(row):
    """The exact bytes of an entry's name (path_hex when it is not UTF-8)."""
    if "path_hex" in row:
        return bytes.fromhex(row["path_hex"])
    return row["path"].encode("utf-8")


def normalize(p):
    while p.startswith(b"./"):
        p = p[2:].lstrip(b"/")
    return p


def xml_escape(s):
    out = []
    for ch in s:
        o = ord(ch)
        if ch == "&":
            out.append("&amp;")
        elif ch == "<":
            out.append("&lt;")
        elif ch == ">":
            out.append("&gt;")
        elif ch == '"':
            out.append("&quot;")
        elif ch == "'":
            out.append("&apos;")
        elif o < 0x20 or o == 0x7F:
            out.append("&#%d;" % o)
        else:
            out.append(ch)
    return "".join(out)


def is_binary(content, share=0.10):
    """The sniff rule from ingest.h for a document that fits in the sniff window: a NUL, or over
    `share` (and at least 4) of its bytes inside invalid UTF-8 (as Python's decoder finds them)."""
    assert len(content) <= 1 << 20, "the reference rule here is for documents inside the window"
    if b"\0" in content:
        return True
    bad = 0
    i = 0
    while i < len(content):
        try:
            content[i:].decode("utf-8")
            break
        except UnicodeDecodeError as e:
            bad += e.end - e.start
            i += e.end
    return bad > share * len(content) and bad >= 4


def frame(path, content, template=None):
    """Expected framed text of one document (the default template)."""
    p = normalize(path).decode("utf-8", "replace")
    text = content.decode("utf-8", "replace")
    nl = "\n" if text and not text.endswith("\n") else ""
    return ('<document path="%s">\n%s%s</document>\n' % (xml_escape(p), text, nl)).encode("utf-8")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def make_tree(root, files, symlinks=(), dirs=()):
    """files: {relpath bytes: content bytes}; symlinks: [(relpath, target)]."""
    for p, c in files.items():
        full = os.path.join(root.encode(), p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(c)
    for d in dirs:
        os.makedirs(os.path.join(root.encode(), d), exist_ok=True)
    for p, t in symlinks:
        full = os.path.join(root.encode(), p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(t, full)
