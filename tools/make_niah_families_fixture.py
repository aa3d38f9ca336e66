#!/usr/bin/env python3
"""Write tests/fixtures/niah/families_render.json: what tools/train_tiny/grammar.py renders, for
test_niah_families to hold longhaul's C renderer (jobs/niah_families.c) to.

Standard library only (grammar.py's draw_value is given a stand-in for numpy's Generator: the
fixture checks what a value looks like, not which one a seed draws). Deterministic: rerunning it
rewrites the same file.

    python3 tools/make_niah_families_fixture.py            # writes the fixture
    python3 tools/make_niah_families_fixture.py --check    # exit 1 when the file is stale

Contents:
  render    every needle and question template of grammar.py (both sides of the split), each with
            three (key, attribute) pairs, through grammar.fill (the needle's id_style; for
            questions the style of a needle that has one, or null); keys include capitals and
            digits ({Key} and {id} change case)
  ids       grammar.render_id for every attribute in every style
  values    for every value kind's every pattern, 8 values grammar.draw_value drew
  words     the value words the values were drawn with
"""
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "train_tiny"))
import grammar  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "fixtures", "niah", "families_render.json")
KEYS = ["lighthouse", "libXrender", "x11proto", "gitdir", "a", "Chuzzlewit"]


class Rng:
    """numpy.random.Generator.integers as grammar.draw_value calls it: integers(n) in [0, n),
    integers(lo, hi) in [lo, hi)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def integers(self, a, b=None):
        lo, hi = (0, a) if b is None else (a, b)
        return self.r.randrange(lo, hi)


def build():
    render = []
    i = 0
    styles = list(grammar.ID_STYLES)
    for n_kind, text, style in grammar.NEEDLES:
        for j in range(3):
            key, attr = KEYS[(i + j) % len(KEYS)], grammar.ATTRIBUTES[(5 * i + 7 * j) % len(grammar.ATTRIBUTES)]
            value = ["4817", "amber-falcon", "src/a b/c.h", "{key}"][(i + j) % 4]
            render.append({"text": text, "key": key, "attr": attr, "value": value, "id_style": style,
                           "out": grammar.fill(text, key, attr, value, style)})
        i += 1
    for section in (grammar.QUESTIONS, grammar.MULTI_VALUE_QUESTIONS, grammar.FILE_QUESTIONS):
        for text, needs_id in section:
            for j in range(3):
                key, attr = KEYS[(i + j) % len(KEYS)], grammar.ATTRIBUTES[(3 * i + 11 * j) % len(grammar.ATTRIBUTES)]
                style = styles[(i + j) % len(styles)] if needs_id else None
                render.append({"text": text, "key": key, "attr": attr, "value": "", "id_style": style,
                               "out": grammar.fill(text, key, attr, "", style)})
            i += 1
    ids = []
    for a, attr in enumerate(grammar.ATTRIBUTES):
        for s in styles:
            key = KEYS[a % len(KEYS)]
            ids.append({"key": key, "attr": attr, "id_style": s, "out": grammar.render_id(key, attr, s)})
    values = []
    rng = Rng(20261205)
    for name, patterns in grammar.VALUE_KINDS:
        for p in patterns:
            values.append({"kind": name, "pattern": p,
                           "values": [grammar.draw_value(rng, [p], grammar.VALUE_WORDS) for _ in range(8)]})
    return {"what": "grammar.py's renderings, written by tools/make_niah_families_fixture.py; do not edit",
            "render": render, "ids": ids, "values": values, "words": list(grammar.VALUE_WORDS)}


def main():
    text = json.dumps(build(), indent=1, ensure_ascii=False) + "\n"
    if "--check" in sys.argv[1:]:
        ok = os.path.exists(OUT) and open(OUT, encoding="utf-8").read() == text
        print("up to date" if ok else f"{OUT} is stale: rerun {sys.argv[0]}")
        return 0 if ok else 1
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
