"""Build the text corpus the tiny model is trained and evaluated on, from files on this machine.

Sources (all local, nothing downloaded): C headers under /usr/include, the Python 3.12 standard
library, and prose from /usr/share/doc (READMEs, NEWS, changelogs, markdown, reStructuredText,
HTML with its tags stripped) and /usr/share/man (troff with its markup stripped).

Every file is deduplicated by content, capped in size, and assigned to the training split or to
the held-out split by a hash of its *group* (its package folder, include subfolder or stdlib
top-level module), so held-out filler comes from packages and modules the model never saw.
Held-out text is used for evaluation only.

Output: DIR/train.jsonl.xz and DIR/heldout.jsonl.xz, one JSON object per line:
{"path": "include/linux/ethtool.h", "kind": "code"|"prose", "text": "..."}; and DIR/words.json,
lower-case words drawn from the training prose (train keys) and the held-out prose (eval keys).

Deterministic: the same machine files give the same corpus (files are walked in sorted order).
"""

import argparse
import collections
import glob
import gzip
import hashlib
import html
import json
import lzma
import os
import re
import sys

HELDOUT_PER_MILLE = 100  # about 10% of groups are held out
MAX_FILE_BYTES = 120_000
MIN_FILE_BYTES = 400


def group_heldout(group: str) -> bool:
    h = int(hashlib.sha256(group.encode()).hexdigest()[:8], 16)
    return (h % 1000) < HELDOUT_PER_MILLE


def read_text(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES * 4)
        else:
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES * 4)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\0" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text


TAG_RE = re.compile(r"<[^>]{0,400}>", re.S)
SCRIPT_RE = re.compile(r"<(script|style)\b.*?</\1>", re.S | re.I)


def strip_html(text: str) -> str:
    text = SCRIPT_RE.sub(" ", text)
    text = TAG_RE.sub("", text)
    text = html.unescape(text)
    lines = [ln.rstrip() for ln in text.splitlines()]
    out, blank = [], 0
    for ln in lines:
        if ln.strip():
            out.append(ln.strip())
            blank = 0
        else:
            blank += 1
            if blank == 1:
                out.append("")
    return "\n".join(out)


TROFF_ESC_RE = re.compile(r"\\f[BIRP0-9]|\\f\(..|\\\(..|\\[&|^e]|\\s[+-]?\d")


def strip_troff(text: str) -> str:
    out = []
    for ln in text.splitlines():
        if ln.startswith("'"):
            continue
        if ln.startswith("."):
            parts = ln.split(None, 1)
            if len(parts) == 2 and parts[0] in (".SH", ".SS", ".B", ".I", ".BR", ".IR", ".IP", ".TP"):
                ln = parts[1].replace('"', "")
            else:
                if parts and parts[0] in (".PP", ".P", ".LP", ".sp", ".br"):
                    out.append("")
                continue
        ln = TROFF_ESC_RE.sub("", ln.replace("\\-", "-")).replace("\\", "")
        out.append(ln)
    return "\n".join(out)


def iter_sources():
    """Yield (display_path, group, kind, filesystem_path, transform)."""
    for p in sorted(glob.glob("/usr/include/**/*.h", recursive=True)):
        rel = os.path.relpath(p, "/usr")
        parts = rel.split(os.sep)
        group = "/".join(parts[:2]) if len(parts) > 2 else "include"
        yield rel, "inc:" + group, "code", p, None
    stdlib = None
    for cand in sorted(glob.glob("/root/.pyenv/versions/3.12*/lib/python3.12")) + ["/usr/lib/python3.11"]:
        if os.path.isdir(cand):
            stdlib = cand
            break
    if stdlib:
        for p in sorted(glob.glob(os.path.join(stdlib, "**/*.py"), recursive=True)):
            rel = os.path.relpath(p, stdlib)
            if rel.startswith(("site-packages", "test" + os.sep, "idlelib", "lib2to3")) or "/tests/" in rel or "/test/" in rel:
                continue
            top = rel.split(os.sep)[0].removesuffix(".py")
            yield "Lib/" + rel, "py:" + top, "code", p, None
    for p in sorted(glob.glob("/usr/share/doc/**/*", recursive=True)):
        if not os.path.isfile(p) or os.path.islink(p):
            continue
        base = os.path.basename(p).lower()
        if base.startswith("copyright"):
            continue
        rel = os.path.relpath(p, "/usr/share")
        pkg = rel.split(os.sep)[1] if len(rel.split(os.sep)) > 1 else "doc"
        ext = base.rsplit(".", 1)[-1] if "." in base else ""
        if ext in ("html", "htm"):
            yield rel, "doc:" + pkg, "prose", p, strip_html
        elif ext in ("txt", "md", "rst", "gz", "") or base.startswith(("readme", "news", "changelog", "todo", "authors")):
            if ext in ("gz",) and not any(k in base for k in ("changelog", "news", "readme", "txt", "md", "rst", "faq")):
                continue
            yield rel.removesuffix(".gz"), "doc:" + pkg, "prose", p, None
        elif ext in ("c", "py", "pl", "pas", "pp", "sh"):
            yield rel, "doc:" + pkg, "code", p, None
    for p in sorted(glob.glob("/usr/share/man/man[1-8]/*.gz")):
        name = os.path.basename(p).removesuffix(".gz")
        rel = "man/" + os.path.basename(os.path.dirname(p)) + "/" + name
        yield rel, "man:" + name.split(".")[0][:3], "prose", p, strip_troff


WORD_RE = re.compile(r"\b[a-z]{4,10}\b")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--max-code-mb", type=float, default=18.0, help="cap on training code text")
    ap.add_argument("--max-prose-mb", type=float, default=12.0, help="cap on training prose text")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    seen = set()
    splits = {"train": [], "heldout": []}
    sizes = collections.Counter()
    group_sizes = collections.Counter()
    # Training-text caps per source (MB); held-out caps are 15% of these.
    caps = {"inc": args.max_code_mb * 0.45e6, "py": args.max_code_mb * 0.45e6, "doc": args.max_prose_mb * 0.55e6,
            "man": args.max_prose_mb * 0.45e6}
    words = {"train": collections.Counter(), "heldout": collections.Counter()}
    by_source = collections.defaultdict(list)
    for item in iter_sources():
        by_source[item[1].split(":")[0]].append(item)
    for source, items in by_source.items():
        # a fixed pseudo-random order (hash of path) so that a cap samples across all groups
        items.sort(key=lambda it: hashlib.sha256(it[0].encode()).hexdigest())
        for rel, group, kind_, p, transform in items:
            split = "heldout" if group_heldout(group) else "train"
            cap = caps[source] * (0.15 if split == "heldout" else 1.0)
            if sizes[(split, source)] > cap or group_sizes[group] > max(cap * 0.04, MAX_FILE_BYTES):
                continue
            text = read_text(p)
            if text is None:
                continue
            if transform:
                text = transform(text)
            text = text.replace("\r\n", "\n").strip("\n")
            if len(text) > MAX_FILE_BYTES:
                cut = text.rfind("\n", 0, MAX_FILE_BYTES)
                text = text[: cut if cut > 0 else MAX_FILE_BYTES]
            if len(text.encode()) < MIN_FILE_BYTES:
                continue
            digest = hashlib.sha256(text.encode()).digest()
            if digest in seen:
                continue
            seen.add(digest)
            sizes[(split, source)] += len(text)
            group_sizes[group] += len(text)
            splits[split].append({"path": rel, "kind": kind_, "text": text})
            if kind_ == "prose":
                words[split].update(WORD_RE.findall(text))

    for split, docs in splits.items():
        path = os.path.join(args.out, f"{split}.jsonl.xz")
        with lzma.open(path, "wt", encoding="utf-8", preset=6) as f:
            for d in docs:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    # Key words: common in their own split, absent from the other split's top words.
    train_top = [w for w, c in words["train"].most_common(6000)[150:] if c >= 3]
    train_set = set(train_top)
    held_top = [w for w, c in words["heldout"].most_common(4000) if w not in set(words["train"])][:600]
    if len(held_top) < 200:  # fall back: held-out-split words not used as training keys
        held_top = [w for w, _ in words["heldout"].most_common(3000) if w not in train_set][:600]
    with open(os.path.join(args.out, "words.json"), "w") as f:
        json.dump({"train": train_top[:4000], "heldout": held_top}, f)
    for (split, source), n in sorted(sizes.items()):
        print(f"{split:8s} {source:6s} {n / 1e6:7.2f} MB")
    for split, docs in splits.items():
        print(f"{split:8s} docs={len(docs)}")
    print(f"words: train={min(4000, len(train_top))} heldout={len(held_top)}")


if __name__ == "__main__":
    sys.exit(main())
