#!/usr/bin/env python3
"""Check a data version's batches from their decoded text alone, on the CPU:

    /work/pyenv/bin/python tools/train_tiny/check_data.py --corpus .dev/train/corpus \
        --tokenizer-dir models/haul-tiny --version 4 --steps 40

For every sample of the drawn steps, the answer spans are decoded and checked against facts parsed
back out of the prompt text, not against the generator's own variables:
- magic-number lines in any phrasing (training, version 4 or held-out) give key -> values in
  document order;
- `<document path=...>` frames with `#define NAME v`, `NAME = v` or `The value of NAME is v.` give
  NAME -> (value, path).
Each question (parsed from its user turn) must then have exactly the span's answer:
- a one-key number question: that key's only value;
- "What are the special magic numbers for A and B?": "vA, vB";
- a multi-value question: every value of the key in document order, joined by ", ";
- "What is the value of NAME?" / "Which file defines NAME?": the planted value or path.
Also checked: the question's key occurs in the prompt, each span ends with <end_of_sentence>,
no held-out phrasing or held-out key appears, and keys are distinct where a question needs them
to be. Prints answer spans per step and per task, and exits 1 on the first mismatch.
"""
import argparse
import collections
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import grammar  # noqa: E402


def template_regex(tmpl: str, **groups) -> re.Pattern:
    """A template such as "The special magic {k} number is: {v}." as a regex with named groups."""
    out, pos = "", 0
    for m in re.finditer(r"\{(\w+)\}", tmpl):
        out += re.escape(tmpl[pos:m.start()])
        name = m.group(1)
        seen = f"(?P={name})" if f"(?P<{name}>" in out else f"(?P<{name}>{groups[name]})"
        out += seen
        pos = m.end()
    return re.compile(out + re.escape(tmpl[pos:]))


KEY, NUM, NAME = r"[^\s.,:?]+", r"\d+", r"[A-Z0-9_]+"
NEEDLES = [template_regex(n, k=KEY, v=NUM) for n, _ in data.TRAIN_MAGIC_V4 + data.EVAL_MAGIC]
HELD_OUT = [x.split("{")[0] for pair in data.EVAL_MAGIC + data.EVAL_PASSKEY for x in pair] + \
           [q.split("{")[0] for q in data.EVAL_MULTI_VALUE_Q]
ONE_KEY_Q = [template_regex(q, k=KEY) for _, q in data.TRAIN_MAGIC_V4]
MULTI_VALUE_Q = [template_regex(q, k=KEY) for q in data.TRAIN_MULTI_VALUE_Q_V4]
MULTI_QUERY_Q = template_regex(data.MULTI_QUERY_Q, k1=KEY, k2=KEY)
REPO_VALUE_Q = template_regex(data.REPO_VALUE_Q, name=NAME)
REPO_VALUE_QS_V9 = [template_regex(q, name=NAME) for q in data.REPO_VALUE_QS_V9]
REPO_FILE_Q = template_regex(data.REPO_FILE_Q, name=NAME)
REPO_VALUE_QS_V16 = [template_regex(q, name=NAME) for q in data.repo_value_qs_v16(grammar.Families.side("train", 14))]
PASSKEY_Q = [q for _, q in data.TRAIN_PASSKEY]
PLANTS = [template_regex(t, name=NAME, v=NUM) for t in (data.PLANT_C, data.PLANT_PY, data.PLANT_PROSE)]
FRAME = re.compile(r'<document path="([^"]*)">\n(.*?)\n</document>\n', re.S)


def facts(prompt: str):
    """key -> values in document order, and NAME -> [(value, path)], parsed from the prompt."""
    magic = collections.defaultdict(list)
    for line in prompt.split("\n"):
        for rx in NEEDLES:
            m = rx.fullmatch(line.strip())
            if m:
                magic[m["k"]].append(m["v"])
                break
    repo = collections.defaultdict(list)
    for m in FRAME.finditer(prompt):
        for line in m.group(2).split("\n"):
            for rx in PLANTS:
                p = rx.fullmatch(line)
                if p:
                    repo[p["name"]].append((p["v"], m.group(1)))
    return magic, repo


def expected(question: str, prompt: str, magic, repo):
    """The answer the prompt's facts give to the question, or raise ValueError."""
    for rx in ONE_KEY_Q:
        m = rx.fullmatch(question)
        if m:
            vals = magic.get(m["k"], [])
            if len(vals) != 1:
                raise ValueError(f"key {m['k']!r} has {len(vals)} values for a one-value question")
            return vals[0]
    for rx in MULTI_VALUE_Q:
        m = rx.fullmatch(question)
        if m:
            if not magic.get(m["k"]):
                raise ValueError(f"key {m['k']!r} of a multi-value question is not in the prompt")
            return ", ".join(magic[m["k"]])
    m = MULTI_QUERY_Q.fullmatch(question)
    if m:
        out = []
        for k in (m["k1"], m["k2"]):
            if len(magic.get(k, [])) != 1:
                raise ValueError(f"multi-query key {k!r} has {len(magic.get(k, []))} values")
            out.append(magic[k][0])
        return ", ".join(out)
    for rx, idx in [(REPO_VALUE_Q, 0), (REPO_FILE_Q, 1)] + [(q, 0) for q in REPO_VALUE_QS_V9 + REPO_VALUE_QS_V16]:
        m = rx.fullmatch(question)
        if m:
            found = repo.get(m["name"], [])
            if len(found) != 1:
                raise ValueError(f"name {m['name']!r} is planted {len(found)} times")
            return found[0][idx]
    if question in PASSKEY_Q:
        m = re.search(r"[Tt]he pass ?key is (\d+)\.", prompt)
        if not m:
            raise ValueError("no pass key in the prompt")
        return m.group(1)
    raise ValueError(f"question not recognised: {question!r}")


# ---- version 6: the grammar's facts (grammar.py), parsed back out of the text -------------

GROUPS = {"key": r"[a-z]+", "Key": r"[A-Z][a-z]+", "attr": r"[a-z]+(?: [a-z]+)*", "id": r"[A-Za-z0-9_.\-]+",
          "value": r"[^\n]+?"}


def grammar_regex(text: str, anchored: bool) -> re.Pattern:
    """A grammar template as a regex: placeholders become named groups (a repeated one a
    backreference), everything else literal."""
    out, pos, seen = "", 0, set()
    for m in re.finditer(r"\{(key|Key|attr|id|value)\}", text):
        out += re.escape(text[pos:m.start()])
        name = m.group(1)
        out += f"(?P={name})" if name in seen else f"(?P<{name}>{GROUPS[name]})"
        seen.add(name)
        pos = m.end()
    out += re.escape(text[pos:])
    return re.compile("(?m)^" + out + "$" if anchored else out)


def _sides():
    """Both sides' items. The train side is version 6's plus version 11's generated frames and
    questions and version 14's generated frames, so that a version-11 or version-14 line or question
    reads back (templates of no version are on the held-out side)."""
    sides = {side: grammar.families(side) for side in ("train", "heldout")}
    v11 = grammar.families("train", 11)
    v14 = [{"kind": k, "text": t, "id_style": st} for k, t, st in grammar.NEEDLES_V14]
    sides["train"]["needles"], sides["train"]["questions"] = v11["needles"] + v14, v11["questions"]
    return sides


SIDES = _sides()
G_NEEDLES = [(side, n, grammar_regex(n["text"], True)) for side in SIDES for n in SIDES[side]["needles"]]
G_QUESTIONS = [(side, sec, q, grammar_regex(q["text"], False)) for side in SIDES
               for sec in ("questions", "multi_value_questions", "file_questions") for q in SIDES[side][sec]]
ALL_ATTRS = {a: side for side in SIDES for a in SIDES[side]["attributes"]}
TRAIN7 = grammar.families("train", 7)   # version 7's train side: more value kinds (grammar.VALUE_KINDS_V7)


# every value a side's kinds can draw, one regex a side (grammar.kinds_regex, which data.py's
# version 8 uses to redraw held-out-looking values)
KIND_RX = {side: grammar.kinds_regex(SIDES[side]) for side in SIDES}
KIND_RX["train7"] = grammar.kinds_regex(TRAIN7)


def grammar_facts(prompt: str, keys: set):
    """Planted-looking grammar facts in the prompt: a line that a needle template matches with a
    known attribute and a key of the corpus's word lists (for {id}: an id that is key + attribute in
    the template's style). Each: dict(key, attr, value, pos, sides of the templates that match)."""
    found = {}
    for side, n, rx in G_NEEDLES:
        for m in rx.finditer(prompt):
            g = m.groupdict()
            if "id" in g:
                hit = None
                for a in ALL_ATTRS:
                    tail = grammar.render_id("x", a, n["id_style"])[1:]
                    if g["id"].endswith(tail):
                        key = g["id"][: -len(tail)].lower()
                        if key in keys and grammar.render_id(key, a, n["id_style"]) == g["id"]:
                            hit = (key, a)
                if hit is None:
                    continue
                key, attr = hit
            else:
                key = (g.get("key") or g.get("Key") or "").lower()
                attr = g.get("attr")
                if key not in keys or attr not in ALL_ATTRS:
                    continue
            k = (m.start(), key, attr, g["value"])
            f = found.setdefault(k, {"key": key, "attr": attr, "value": g["value"], "pos": m.start(),
                                     "sides": set(), "styles": set()})
            f["sides"].add(side)
            f["styles"].add(n["id_style"])
    # One line may read several ways when one template is another plus a wrapper or an ending
    # (version 11: `{value} is the {attr} of {key}` and `'{value}' is the ... (confirmed)` both
    # match `'v' is the ... (confirmed)`): the most specific reading, the shortest value, is the fact.
    best = {}
    for f in found.values():
        k = (f["pos"], f["key"], f["attr"])
        if k not in best or len(f["value"]) < len(best[k]["value"]):
            best[k] = f
    return sorted(best.values(), key=lambda f: f["pos"])


def grammar_question(question: str, keys: set):
    """(section, key, attr, sides) for a question some grammar template matches, else None."""
    hits = []
    for side, sec, q, rx in G_QUESTIONS:
        m = rx.fullmatch(question)
        if not m:
            continue
        g = m.groupdict()
        if "id" in g:
            for a in ALL_ATTRS:
                for st in grammar.ID_STYLES:
                    tail = grammar.render_id("x", a, st)[1:]
                    key = g["id"][: -len(tail)].lower() if g["id"].endswith(tail) else None
                    if key in keys and grammar.render_id(key, a, st) == g["id"]:
                        hits.append((side, sec, key, a, st))
        else:
            key = (g.get("key") or g.get("Key") or "").lower()
            if key in keys and g.get("attr") in ALL_ATTRS:
                hits.append((side, sec, key, g["attr"], None))
    if not hits:
        return None
    secs = {h[1] for h in hits}
    if len(secs) != 1 or len({(h[2], h[3]) for h in hits}) != 1:
        raise ValueError(f"question {question!r} reads as several: {hits}")
    return hits[0][1], hits[0][2], hits[0][3], {h[0] for h in hits}, {h[4] for h in hits}


def grammar_expected(question: str, prompt: str, gfacts, keys: set):
    """The answer the prompt's grammar facts give to the question; None when no grammar template
    matches the question; ValueError when they give none or several."""
    q = grammar_question(question, keys)
    if q is None:
        return None, None
    sec, key, attr, qsides, qstyles = q
    hits = [f for f in gfacts if f["key"] == key and f["attr"] == attr
            and (None in qstyles or f["styles"] & qstyles)]
    if not hits:  # not a grammar question after all (a version-4 repository question reads as one)
        return None, None
    if sec == "multi_value_questions":
        if len(hits) < 2:
            raise ValueError(f"multi-value question {question!r}: {len(hits)} value(s)")
        return ", ".join(f["value"] for f in hits), (qsides, hits)
    if len(hits) != 1:
        raise ValueError(f"grammar question {question!r}: ({key}, {attr}) planted {len(hits)} times")
    if sec == "file_questions":
        frames = [m for m in FRAME.finditer(prompt) if m.start() <= hits[0]["pos"] < m.end()]
        if len(frames) != 1:
            raise ValueError(f"file question {question!r}: the fact is in {len(frames)} documents")
        path = frames[0].group(1)
        if len([m for m in FRAME.finditer(prompt) if m.group(1) == path]) != 1:
            raise ValueError(f"file question {question!r}: path {path} occurs twice")
        return path, (qsides, hits)
    return hits[0]["value"], (qsides, hits)


def check_grammar_split(qsides, hits, question, held_keys, version=6):
    """Training must use no held-out family: the question and every answer-bearing line must be
    matched by a train template, with a train attribute, a train key and a value of a train kind
    (version 7: of its train kinds) that no held-out kind could have drawn."""
    train_rx = KIND_RX["train" if version < 7 else f"train{min(version, 12)}"]
    if "train" not in qsides:
        raise ValueError(f"question {question!r} matches held-out question templates only")
    for f in hits:
        if "train" not in f["sides"]:
            raise ValueError(f"fact line for ({f['key']}, {f['attr']}) matches held-out needle templates only")
        if ALL_ATTRS[f["attr"]] != "train":
            raise ValueError(f"held-out attribute {f['attr']!r}")
        if f["key"] in held_keys:
            raise ValueError(f"held-out key {f['key']!r}")
        if not train_rx.fullmatch(f["value"]):
            raise ValueError(f"value {f['value']!r} of ({f['key']}, {f['attr']}) is of no train value kind")
        if KIND_RX["heldout"].fullmatch(f["value"]):
            raise ValueError(f"value {f['value']!r} of ({f['key']}, {f['attr']}) is of a held-out value kind's form")


TOKEN_SET = frozenset(c for c in map(chr, range(32, 127)) if re.fullmatch(grammar.TOKEN_CHARS, c))
FIELD_SETS = {"d": "0123456789", "D": "123456789", "x": "0123456789abcdef", "X": "0123456789ABCDEF",
              "a": "abcdefghijklmnopqrstuvwxyz", "A": "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}


def pattern_nfa(pat: str, words):
    """An automaton for the values a pattern can draw, {tN} taken as any run of grammar.TOKEN_CHARS
    (more than it draws) and {w} as exactly the given words: (edges, final state); edges[state] is a
    list of (characters, next state), the start state is 0."""
    edges, cur = [[]], 0

    def new():
        edges.append([])
        return len(edges) - 1

    def step(chars):
        nonlocal cur
        n = new()
        edges[cur].append((frozenset(chars), n))
        cur = n

    pos = 0
    for m in grammar.FIELD_RE.finditer(pat):
        for c in pat[pos:m.start()]:
            step(c)
        f, n = m.group(1), int(m.group(2) or 1)
        if f == "t":
            step(TOKEN_SET)
            edges[cur].append((TOKEN_SET, cur))
        elif f == "w":
            for _ in range(n):
                end, trie = new(), {}
                for w in words:
                    s = cur
                    for i, c in enumerate(w):
                        if i == len(w) - 1:
                            edges[s].append((frozenset(c), end))
                        if w[: i + 1] not in trie:
                            trie[w[: i + 1]] = new()
                            edges[s].append((frozenset(c), trie[w[: i + 1]]))
                        s = trie[w[: i + 1]]
                cur = end
        else:
            for _ in range(n):
                step(FIELD_SETS[f])
        pos = m.end()
    for c in pat[pos:]:
        step(c)
    return edges, cur


def can_draw_same(pat_a: str, words_a, pat_b: str, words_b) -> bool:
    """Whether some value can be drawn both by pattern a (its {w} from words_a) and by pattern b."""
    (ea, fa), (eb, fb) = pattern_nfa(pat_a, words_a), pattern_nfa(pat_b, words_b)
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) == (fa, fb):
            return True
        for ca, na in ea[i]:
            for cb, nb in eb[j]:
                if (na, nb) not in seen and ca & cb:
                    seen.add((na, nb))
                    todo.append((na, nb))
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--version", type=int, default=max(data.MIXES))
    ap.add_argument("--steps", type=int, default=40, help="how many steps to draw (from --first)")
    ap.add_argument("--first", type=int, default=5045)
    ap.add_argument("--progress", type=float, default=0.85)
    ap.add_argument("--tokens-per-step", type=int, default=65536)
    ap.add_argument("--max-len", type=int, default=32768)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--leak-heldout", action="store_true",
                    help="draw the grammar tasks from the held-out families (a deliberate leak: the check must fail)")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    corpus = data.Corpus(args.corpus, "train")
    gen = data.Generator(tok, corpus)
    with open(os.path.join(args.corpus, "words.json")) as f:
        words = json.load(f)
    held_keys = set(words["heldout"])
    if args.version >= 8:
        # version 8's train side draws {w} from the corpus's training words (data.Generator.use_grammar)
        v = min(args.version, 12)
        gen.use_grammar(v)
        KIND_RX[f"train{v}"] = grammar.kinds_regex(dict(grammar.families("train", v), value_words=gen.fam.words))
    for ver, kinds in ((10, grammar.VALUE_KINDS_V10), (11, grammar.VALUE_KINDS_V11)):
        if args.version < ver:
            continue
        # version 10's structured kinds and version 11's groups: no pattern may draw a held-out
        # kind's form at all (not only the values these steps drew; Families.value would draw such
        # a value again)
        for name, pats in kinds:
            for p in pats:
                for hk in SIDES["heldout"]["value_kinds"]:
                    for hp in hk["patterns"]:
                        if can_draw_same(p, gen.fam.words, hp, SIDES["heldout"]["value_words"]):
                            sys.exit(f"version {ver} kind {name}: pattern {p!r} can draw a value of held-out "
                                     f"kind {hk['name']}'s form {hp!r}")
        n_pats = sum(len(ps) for _, ps in kinds)
        print(f"version {ver}: none of the {n_pats} patterns of {len(kinds)} kinds in "
              f"grammar.VALUE_KINDS_V{ver} can draw a value a held-out kind's pattern can draw")
    all_keys = set(words["train"]) | held_keys
    committed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout_families.json")
    with open(committed) as f:
        doc = json.load(f)
    want = grammar.heldout_document(doc.get("keys", []))
    if doc != json.loads(json.dumps(want)):
        sys.exit(f"{committed} differs from grammar.py's held-out split: rewrite it with "
                 "`grammar.py --write heldout_families.json --corpus DIR`")
    n_grammar = 0
    if args.leak_heldout:
        gen.fam = grammar.Families.load(committed)
        gen.fam_fixed = True
    eos = gen.eos_id
    per_task, per_step, dense_spans, long_spans = collections.Counter(), [], [], []
    repo_g = collections.Counter()   # repository samples with grammar facts in their archive (version 7)
    for step in range(args.first, args.first + args.steps):
        samples, length = data.batch_for_step(gen, args.seed, step, args.progress, args.tokens_per_step,
                                              args.max_len, args.version)
        n_spans = 0
        for si, s in enumerate(samples):
            ids, spans = s["ids"], s["spans"]
            prompt = tok.decode(ids[: spans[0][0]], skip_special_tokens=False)
            magic, repo = facts(prompt)
            gfacts = grammar_facts(prompt, all_keys) if args.version >= 6 else []
            for ph in HELD_OUT:
                if ph.strip() and ph in prompt:
                    sys.exit(f"step {step} sample {si}: held-out phrasing {ph!r} in a training sample")
            used = set(magic)
            if used & held_keys:
                sys.exit(f"step {step} sample {si}: held-out key(s) {sorted(used & held_keys)[:3]}")
            prev_end = None
            for st, en in spans:
                if ids[en - 1] != eos:
                    sys.exit(f"step {step} sample {si}: the span [{st}, {en}) does not end with <end_of_sentence>")
                # the question is the last user turn before the span
                before = tok.decode(ids[: st], skip_special_tokens=False)
                turn = before.rsplit(data.ROLE_USER, 1)[1]
                question = turn.split(data.EOS)[0].rstrip().rsplit("\n", 1)[-1]
                answer = tok.decode(ids[st: en - 1], skip_special_tokens=False)
                try:
                    gwant, gwhy = grammar_expected(question, prompt, gfacts, all_keys) if args.version >= 6 \
                        else (None, None)
                    if gwant is not None:
                        check_grammar_split(*gwhy, question, held_keys, args.version)
                        n_grammar += 1
                    try:
                        want = expected(question, prompt, magic, repo)
                    except ValueError:
                        if gwant is None:
                            raise
                        want = gwant
                    if gwant is not None and want != gwant:
                        raise ValueError(f"{question!r} reads as {want!r} and, by the grammar, {gwant!r}")
                except ValueError as e:
                    sys.exit(f"step {step} sample {si} ({s['task']}): {e}")
                if answer != want:
                    sys.exit(f"step {step} sample {si} ({s['task']}): {question!r} answered {answer!r}, "
                             f"the prompt gives {want!r}")
                if prev_end is not None and st <= prev_end:
                    sys.exit(f"step {step} sample {si}: spans overlap")
                prev_end = en
                per_task[s["task"]] += 1
                n_spans += 1
            if s["task"].startswith("repo") and gfacts:
                repo_g[s["task"]] += 1
        dense = any(s["task"].endswith("_dense") for s in samples)  # the long steps' mix has none
        (dense_spans if dense else long_spans).append(n_spans)
        per_step.append(n_spans)
    print(f"version {args.version}: {sum(per_step)} answer spans in {args.steps} steps, all equal to the "
          f"facts parsed from their prompts")
    if dense_spans:
        print(f"  dense steps: {len(dense_spans)}, {np.mean(dense_spans):.0f} answer spans each on average")
    if long_spans:
        print(f"  other steps: {len(long_spans)}, {np.mean(long_spans):.0f} answer spans each on average")
    print("  spans by task: " + ", ".join(f"{k} {v}" for k, v in sorted(per_task.items())))
    if args.version >= 6:
        print(f"  {n_grammar} answers read through the grammar; every question template, needle template, "
              "attribute, value kind and key they used is on the train side of the hash split")
    if repo_g:
        print("  repository samples with grammar facts in their archive: "
              + ", ".join(f"{k} {v}" for k, v in sorted(repo_g.items())))


if __name__ == "__main__":
    main()
