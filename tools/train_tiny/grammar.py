"""A grammar of planted facts with many independent parts, split into train and held-out families.

Issue 31: the model must learn retrieval (key -> value in whatever form the text states it), not
one sentence shape. A fact is (key, attribute, value): key an entity word ("lighthouse"),
attribute a phrase ("port number"), value drawn from a value kind ("4817", "amber-falcon",
"3f9a1c02-...", "src/amber/falcon.c"). It is written into the text by a *needle* template of
some kind of text (prose, a code comment, an assignment, a JSON/YAML/INI/XML field, a table row,
a log line, a docstring, a markdown item) and asked about by a *question* template (what /
which / tell me / find / give / ..., with the key's words, or with the exact identifier the
needle wrote).

Template placeholders (replaced as plain text; every other character is literal, braces too):
    {key}    the key word as is                  lighthouse
    {Key}    the key word, first letter upper    Lighthouse
    {attr}   the attribute's words               port number
    {id}     key + attribute words in the needle's id_style:
             snake lighthouse_port_number, upper LIGHTHOUSE_PORT_NUMBER, camel lighthousePortNumber,
             pascal LighthousePortNumber, dotted lighthouse.port_number, kebab lighthouse-port-number
    {value}  the value
A question with {id} ("needs_id") is asked only about a needle that has an id_style, and {id} is
rendered in that needle's style, exactly as the needle wrote it.

Value kinds are lists of patterns (one drawn uniformly), each pattern literal text with fields:
    {d} a digit 0-9, {D} a digit 1-9, {x} a hex digit 0-9a-f, {X} 0-9A-F, {a} a letter a-z,
    {A} A-Z, {w} a word from the value-word list; a count repeats the field: {d5} = 5 digits.

The split. Every item of every section (needles, questions, multi-value and file questions,
value kinds, attributes, value words) is held out when sha256("haul-tiny-grammar:" + section +
":" + its text) mod 1000 < 250, so about a quarter of each section is held out and the split does
not depend on list order. Training draws only train items; the held-out items are written to
heldout_families.json (`python grammar.py --write heldout_families.json`), which eval.py reads and
which longhaul's NIAH sweep can read (the format is described in that file's "format" field and
in tools/train_tiny/README.md). Keys come from the corpus (words.json: training words for
training, held-out words for evaluation), as for the other tasks.
"""

import argparse
import hashlib
import json
import os
import re
import sys

HELDOUT_PER_MILLE = 250
SALT = "haul-tiny-grammar:"

# (kind, text, id_style or None). None may equal a form that version 4's tasks train (the
# repository facts' `{name} = {v}`, `#define {name} {v}`, "The value of {name} is {v}." and their
# questions "What is the value of {name}?", "Which file defines {name}?"), or a held-out item would
# not be held out; check_data.py checks it.
NEEDLES = [
    # prose
    ("prose", "The {attr} of {key} is {value}.", None),
    ("prose", "{Key}'s {attr} is {value}.", None),
    ("prose", "For {key}, the {attr} is {value}.", None),
    ("prose", "Note: {key} has the {attr} {value}.", None),
    ("prose", "We set the {attr} of {key} to {value}.", None),
    ("prose", "Record the {attr} for {key} as {value}.", None),
    ("prose", "It was decided that {key} uses {value} as its {attr}.", None),
    ("prose", "As agreed, the {attr} for {key} will be {value} from now on.", None),
    ("prose", "{Key} is configured with {attr} {value}.", None),
    # code comments
    ("comment", "# {key} {attr}: {value}", None),
    ("comment", "// {attr} for {key} = {value}", None),
    ("comment", "/* {key}: the {attr} is {value} */", None),
    ("comment", "-- {key} {attr} = {value}", None),
    ("comment", "; {attr} of {key}: {value}", None),
    ("comment", "# NOTE({key}): {attr} is {value}", None),
    # assignments
    ("assign", "{id} ?= {value}", "upper"),
    ("assign", "{id} = \"{value}\"", "snake"),
    ("assign", "const {id} = \"{value}\";", "camel"),
    ("assign", "export {id}={value}", "upper"),
    ("assign", "#define {id} \"{value}\"", "upper"),
    ("assign", "{id} := \"{value}\"", "camel"),
    ("assign", "static final String {id} = \"{value}\";", "upper"),
    ("assign", "let {id} = '{value}'", "camel"),
    ("assign", "set {id} {value}", "dotted"),
    ("assign", "self.{id} = \"{value}\"", "snake"),
    # structured fields
    ("json", "\"{id}\": \"{value}\",", "snake"),
    ("json", "{\"{id}\": \"{value}\"}", "camel"),
    ("yaml", "{id}: {value}", "snake"),
    ("yaml", "  {id}: \"{value}\"", "kebab"),
    ("ini", "[{key}]\n{attr} = {value}", None),
    ("toml", "{id} = '{value}'", "kebab"),
    ("xml", "<entry key=\"{id}\" value=\"{value}\"/>", "dotted"),
    ("xml", "<{id}>{value}</{id}>", "pascal"),
    ("properties", "{id}={value}", "dotted"),
    # table rows
    ("table", "| {key} | {attr} | {value} |", None),
    ("table", "{key}\t{attr}\t{value}", None),
    ("table", "{key},{attr},{value}", None),
    ("table", "{Key} .......... {attr} .......... {value}", None),
    # log lines
    ("log", "2026-03-14 09:21:07 INFO {key}: {attr} set to {value}", None),
    ("log", "[{key}] {attr}={value}", None),
    ("log", "level=info component={key} msg=\"{attr} is {value}\"", None),
    ("log", "W1203 12:00:01.512  4411 {key}.go:88] {attr} changed to {value}", None),
    ("log", "Mar 14 09:21:07 host {key}[812]: using {attr} {value}", None),
    # docstrings
    ("docstring", "\"\"\"Return the {attr} of {key}, which is {value}.\"\"\"", None),
    ("docstring", "    :{key}: the {attr} is {value}", None),
    ("docstring", " * @{key} {attr} {value}", None),
    ("docstring", "    {Key} -- {attr}: {value}", None),
    # markdown
    ("markdown", "- **{Key}** {attr}: `{value}`", None),
    ("markdown", "* {attr} ({key}): {value}", None),
    ("markdown", "> The {attr} of {key} is `{value}`.", None),
]

# (text, needs_id)
QUESTIONS = [
    ("What is the {attr} of {key}?", False),
    ("Which {attr} does {key} have?", False),
    ("Tell me the {attr} for {key}.", False),
    ("Find the {attr} of {key} in the documents.", False),
    ("Give me the {attr} of {key}.", False),
    ("What {attr} is given for {key}?", False),
    ("I need {key}'s {attr}. What is it?", False),
    ("What does the text say the {attr} of {key} is?", False),
    ("Look up the {attr} for {key}.", False),
    ("{Key}: what is its {attr}?", False),
    ("Can you tell me what the {attr} of {key} is?", False),
    ("Which value is recorded as the {attr} of {key}?", False),
    ("What's {key}'s {attr}?", False),
    ("Report the {attr} of {key}.", False),
    ("What was the {attr} of {key} set to?", False),
    ("In these files, what is the {attr} for {key}?", False),
    ("Quick question: the {attr} for {key}?", False),
    ("Do you know the {attr} of {key}?", False),
    ("what {attr} does {key} use", False),
    ("Please find {key}'s {attr} and give it to me.", False),
    ("What is {id} set to?", True),
    ("What value is {id} given?", True),
    ("Find the value of {id}.", True),
    ("Which value does {id} have?", True),
    ("Tell me what {id} is.", True),
    ("Give the value assigned to {id}.", True),
    ("What does {id} equal?", True),
    ("{id} = ?", True),
]

MULTI_VALUE_QUESTIONS = [
    ("What are all the {attr} values of {key}?", False),
    ("List every {attr} given for {key}.", False),
    ("Which {attr} values does {key} have? Give all of them.", False),
    ("Give each {attr} of {key}, in order.", False),
    ("What {attr} entries are there for {key}?", False),
    ("Tell me every value of the {attr} of {key}.", False),
    ("Name all the values of {id}.", True),
    ("What values is {id} given? List them all.", True),
]

FILE_QUESTIONS = [
    ("Which file defines {id}?", True),
    ("In which file is {id} set?", True),
    ("What is the path of the file that defines {id}?", True),
    ("Which file sets the {attr} of {key}?", False),
    ("In which file is the {attr} of {key} given?", False),
    ("Which document states the {attr} for {key}?", False),
    ("Where is the {attr} of {key} defined? Give the file.", False),
    ("Name the file that holds {key}'s {attr}.", False),
]

ATTRIBUTES = [
    "port number", "access code", "build id", "timeout", "serial number", "checksum", "owner",
    "home directory", "config path", "api token", "version", "retry limit", "region", "color",
    "codename", "license key", "batch size", "cache dir", "account id", "room number", "zip code",
    "secret word", "password", "label", "hostname", "release tag", "device id", "seed",
    "session key", "queue name", "log file", "mirror url", "contact email", "build number",
    "shelf mark", "order number", "ticket id", "badge number", "flight code", "locker code",
    "backup path", "signing key", "default user", "record id", "channel", "max depth",
    "fingerprint", "tracking number",
]

VALUE_WORDS = [
    "amber", "falcon", "granite", "harbor", "juniper", "kestrel", "lantern", "meadow", "nickel",
    "orchid", "pepper", "quartz", "raven", "saffron", "thistle", "umber", "velvet", "willow",
    "yarrow", "zephyr", "anchor", "birch", "cobalt", "dune", "ember", "fjord", "glacier", "hazel",
    "indigo", "jasper", "kelp", "lilac", "maple", "nectar", "onyx", "pebble", "quill", "ripple",
    "sable", "tundra", "urchin", "violet", "walnut", "yonder", "zinnia", "acorn", "bramble",
    "cedar", "delta", "egret", "fennel", "garnet", "heron", "iris", "jade", "koala", "lotus",
    "mango", "nutmeg", "otter", "plume", "quince", "rowan", "sorrel", "topaz", "upland", "vapor",
    "wren", "yucca", "zircon", "aspen", "basil", "canyon", "dahlia", "elm", "flint", "gecko",
    "hollow", "ivory", "jetty", "kiwi", "larch", "marble", "nova", "opal", "prairie", "reed",
    "spruce", "tulip", "valley", "wasabi", "yew", "zest", "alder", "bison", "coral", "dusk",
]

# (name, patterns)
VALUE_KINDS = [
    ("digits3", ["{D}{d2}"]),
    ("digits4", ["{D}{d3}"]),
    ("digits5", ["{D}{d4}"]),
    ("digits6", ["{D}{d5}"]),
    ("digits7", ["{D}{d6}"]),
    ("digits8", ["{D}{d7}"]),
    ("digits9", ["{D}{d8}"]),
    ("digits10", ["{D}{d9}"]),
    ("hex8", ["{x8}"]),
    ("hex_0x", ["0x{X4}"]),
    ("uuid", ["{x8}-{x4}-{x4}-{x4}-{x12}"]),
    ("uuid_short", ["{x4}-{x4}-{x4}"]),
    ("code_letters_digits", ["{A2}-{d4}"]),
    ("code_compact", ["{A3}{d3}"]),
    ("code_mixed", ["{a}{d}{a}{d}{a}{d}"]),
    ("version", ["{D}.{d}.{d2}"]),
    ("word", ["{w}"]),
    ("word_pair", ["{w}-{w}"]),
    ("word_number", ["{w}{d2}"]),
    ("path_python", ["{w}/{w}.py", "lib/{w}/{w}.py"]),
    ("path_c", ["src/{w}/{w}.c", "{w}/{w}.h"]),
    ("path_etc", ["/etc/{w}/{w}.conf", "/var/lib/{w}/{w}.db"]),
    ("path_deep", ["{w}/{w}/{w}/{w}.txt"]),
    ("email", ["{w}@{w}.org", "{w}.{w}@example.com"]),
    ("url", ["https://{w}.example.com/{w}"]),
    ("date", ["20{d2}-0{D}-1{d}"]),
]

# Version 7 (session 11): more value kinds on the train side, all words, URLs and paths. Why: at
# step 8581 (version 6) the held-out word, URL, UUID and date values got 0 of 69, their answers
# starting with a train kind's prefix and then mixing characters from several lines. A separate
# list, so that version 6's train side (and so its batches) and the held-out side
# (heldout_families.json) stay as they were; families("train", version=7) adds it. Every name is on
# the train side of the hash split (checked below), none is an earlier kind's name and no pattern
# is an earlier kind's pattern.
VALUE_KINDS_V7 = [
    ("word_snake", ["{w}_{w}", "{w}_{w}_{w}"]),
    ("word_triple", ["{w}-{w}-{w}"]),
    ("slug", ["{w}.{w}", "{w}+{w}"]),
    ("letters", ["{a6}", "{a8}"]),
    ("letters_pair", ["{a4}-{a4}", "{a3}.{a5}"]),
    ("hostname", ["{w}.{w}.internal", "{w}{d2}.example.net", "{w}-{w}.local"]),
    ("url_io", ["https://{w}.io/{w}", "https://www.{w}.dev/{w}/{w}"]),
    ("url_query", ["https://{w}.example.org/{w}?id={d4}", "http://{w}.example.net/{w}?q={w}"]),
    ("url_git", ["git@{w}.example.org:{w}/{w}.git", "https://git.example.org/{w}/{w}.git"]),
    ("url_ftp", ["ftp://{w}.example.net/{w}.tar.gz", "s3://{w}-{w}/{w}/"]),
    ("url_api", ["http://localhost:{D}{d3}/{w}", "https://api.{w}.com/v{D}/{w}"]),
    ("path_home", ["/home/{w}/{w}", "~/{w}/{w}.txt"]),
    ("path_windows", ["C:\\{w}\\{w}.exe"]),
    ("path_tar", ["{w}-{D}.{d}.tar.gz", "dist/{w}-{D}.{d}.{d}.whl"]),
    ("path_json", ["config/{w}.json", "{w}/{w}.yaml"]),
    ("path_log", ["/var/log/{w}/{w}.log", "logs/{w}-{d4}.log"]),
    ("path_usr", ["/usr/local/{w}/{w}", "/opt/{w}/bin/{w}"]),
]

# Version 8 (session 12): values of no fixed form. Sessions 10 and 11 trained 37 value kinds and
# the held-out kinds that are not digits stayed at 0 of 69: the model writes values of the forms it
# was trained on (or makes one from the 76 value words), it does not copy what the text holds. So
# version 8 adds 12 kinds of random shape, each 15 patterns of 1-4 segments (letters, digits, hex,
# capitals or a word, 2-8 long) joined by separators, so that the only way to answer is to copy.
# Every pattern has a segment that is not digits, so none can draw a held-out digits or date value;
# check_data.py checks every value against the held-out kinds' regexes. Drawn from a fixed seed
# (Python's random), so the list is the same on every machine; names that the hash puts on the
# held-out side are skipped. With version 8 the train side's {w} is drawn from the corpus's
# training words (Generator.use_grammar), not from VALUE_WORDS' 76 train words.
def _v8_kinds():
    import random
    rnd = random.Random(8)
    segs = ("a", "d", "x", "A", "w")
    seps = ("-", "_", ".", "/", ":", "@", "+", "#", "", "~", "=", ",")
    heads = ("", "", "", "v", "id-", "0x", "#", "/", "~", "$")
    known = {p for _, ps in VALUE_KINDS + VALUE_KINDS_V7 for p in ps}
    kinds, i = [], 0
    while len(kinds) < 12:
        name = f"shape_{i:02d}"
        i += 1
        if held_out("value_kinds", (name, [])):
            continue
        pats = []
        while len(pats) < 15:
            parts = [rnd.choice(segs) for _ in range(rnd.randint(1, 4))]
            if all(p == "d" for p in parts):
                parts[rnd.randrange(len(parts))] = rnd.choice(("a", "x", "A", "w"))
            body = ""
            for j, p in enumerate(parts):
                if j:
                    body += rnd.choice(seps)
                body += "{w}" if p == "w" else "{%s%d}" % (p, rnd.randint(2, 8))
            pat = rnd.choice(heads) + body
            if pat not in known and pat not in pats:
                pats.append(pat)
        kinds.append((name, pats))
    return kinds


ID_STYLES = ("snake", "upper", "camel", "pascal", "dotted", "kebab")
SECTIONS = ("needles", "questions", "multi_value_questions", "file_questions", "value_kinds",
            "attributes", "value_words")
FIELD_RE = re.compile(r"\{([dDxXaAwt])(\d*)\}")
# {tN} (version 9): N tokens of the tokenizer, each of these characters alone (Families.tokens)
TOKEN_CHARS = r"[A-Za-z0-9_.:@+#~=,%/-]"
PLACEHOLDERS = ("{key}", "{Key}", "{attr}", "{id}", "{value}")


def item_text(section: str, item) -> str:
    """The text an item's split is hashed on."""
    if section == "needles":
        return item[1]
    if section in ("questions", "multi_value_questions", "file_questions"):
        return item[0]
    if section == "value_kinds":
        return item[0]
    return item


def held_out(section: str, item) -> bool:
    h = int(hashlib.sha256((SALT + section + ":" + item_text(section, item)).encode()).hexdigest()[:8], 16)
    return h % 1000 < HELDOUT_PER_MILLE


def _all_items():
    return {"needles": NEEDLES, "questions": QUESTIONS, "multi_value_questions": MULTI_VALUE_QUESTIONS,
            "file_questions": FILE_QUESTIONS, "value_kinds": VALUE_KINDS, "attributes": ATTRIBUTES,
            "value_words": VALUE_WORDS}


def families(side: str, version: int = 6) -> dict:
    """The items of one side ("train" or "heldout") in heldout_families.json's form. Data version 7
    adds VALUE_KINDS_V7 to the train side, version 8 VALUE_KINDS_V8, version 9 VALUE_KINDS_V9 and
    version 10 VALUE_KINDS_V10 and version 11 VALUE_KINDS_V11, NEEDLES_V11 and QUESTIONS_V11 (version
    12 without NEEDLES_V11's call frames); the held-out side is the same for every version."""
    want = side == "heldout"
    out = {}
    for section, items in _all_items().items():
        out[section] = [it for it in items if held_out(section, it) == want]
    if side == "train" and version >= 7:
        out["value_kinds"] = out["value_kinds"] + list(VALUE_KINDS_V7)
    if side == "train" and version >= 8:
        out["value_kinds"] = out["value_kinds"] + list(VALUE_KINDS_V8)
    if side == "train" and version >= 9:
        out["value_kinds"] = out["value_kinds"] + list(VALUE_KINDS_V9)
    if side == "train" and version >= 10:
        out["value_kinds"] = out["value_kinds"] + list(VALUE_KINDS_V10)
    if side == "train" and version >= 11:
        out["value_kinds"] = out["value_kinds"] + list(VALUE_KINDS_V11)
        # version 12: without the generated call frames (`register("{id}", {value})`), after which
        # step 12700 took `threading._register_atexit(_python_exit)` for the demo's planted fact
        drop_calls = version >= 12
        out["needles"] = out["needles"] + [n for n in NEEDLES_V11 if not (drop_calls and n[0] == "gen_call")]
        out["questions"] = out["questions"] + list(QUESTIONS_V11)
    if side == "train" and version >= 14:
        out["needles"] = out["needles"] + list(NEEDLES_V14)
    return to_json_form(out)


def _check_v7():
    names = {n for n, _ in VALUE_KINDS}
    pats = {p for _, ps in VALUE_KINDS for p in ps}
    for n, ps in VALUE_KINDS_V7:
        assert not held_out("value_kinds", (n, ps)), f"version 7 value kind {n!r} is on the held-out side"
        assert n not in names and not set(ps) & pats, f"version 7 value kind {n!r} repeats an earlier kind"
        names.add(n)
        pats |= set(ps)


def to_json_form(sec: dict) -> dict:
    return {
        "needles": [{"kind": k, "text": t, "id_style": s} for k, t, s in sec["needles"]],
        "questions": [{"text": t, "needs_id": n} for t, n in sec["questions"]],
        "multi_value_questions": [{"text": t, "needs_id": n} for t, n in sec["multi_value_questions"]],
        "file_questions": [{"text": t, "needs_id": n} for t, n in sec["file_questions"]],
        "value_kinds": [{"name": n, "patterns": p} for n, p in sec["value_kinds"]],
        "attributes": list(sec["attributes"]),
        "value_words": list(sec["value_words"]),
    }


FORMAT = {
    "what": "haul-tiny fact grammar: the held-out families (never in training) for evaluating retrieval "
            "of a fact planted in a haystack (issue 31)",
    "fact": "a key word (keys: held-out key words; or the NIAH sweep's own keys), an attribute (attributes), "
            "a value drawn from a value kind (value_kinds)",
    "placeholders": "{key} key as is; {Key} first letter upper; {attr} attribute words; {value}; {id} key word "
                    "then attribute words in the needle's id_style: snake a_b_c, upper A_B_C, camel aBC "
                    "(each later word capitalised), pascal ABC, dotted a.b_c (key, '.', attribute words "
                    "joined by '_'), kebab a-b-c. Replace as plain text: other braces are literal",
    "needles": "the line(s) planted in the text; '\\n' inside a needle is a line break (insert at a line "
               "boundary as one block)",
    "questions": "single-fact questions; needs_id questions are asked only about needles with an id_style, "
                 "with {id} in that needle's style",
    "multi_value_questions": "asked about one key+attribute planted 2 or more times with different values, "
                             "all in one needle template; the answer is every value in document order, "
                             "joined by ', '",
    "file_questions": "asked about a fact planted in one document of a framed archive; the answer is that "
                      "document's path",
    "answer": "the value exactly as planted; the model ends it with <end_of_sentence>",
    "value_kinds": "patterns (one drawn uniformly) of literal text and fields: {d} digit 0-9, {D} digit 1-9, "
                   "{x} hex 0-9a-f, {X} hex 0-9A-F, {a} letter a-z, {A} letter A-Z, {w} a word from "
                   "value_words; a count repeats a field ({d5} = 5 digits)",
    "split": "an item is held out when sha256('haul-tiny-grammar:' + section + ':' + text) mod 1000 < 250, "
             "text being the needle or question text, the value kind's name, or the word",
}


def heldout_document(keys=()) -> dict:
    doc = {"format": FORMAT}
    doc.update(families("heldout"))
    doc["keys"] = list(keys)
    return doc


# ---- rendering -------------------------------------------------------------------------

def render_id(key: str, attr: str, style: str) -> str:
    words = [key.lower()] + attr.lower().split()
    if style == "snake":
        return "_".join(words)
    if style == "upper":
        return "_".join(words).upper()
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == "pascal":
        return "".join(w.capitalize() for w in words)
    if style == "dotted":
        return words[0] + "." + "_".join(words[1:])
    if style == "kebab":
        return "-".join(words)
    raise ValueError(f"unknown id_style {style!r}")


def fill(text: str, key: str, attr: str, value: str = "", id_style: str | None = None) -> str:
    out = text.replace("{Key}", key[:1].upper() + key[1:]).replace("{key}", key).replace("{attr}", attr)
    if "{id}" in out:
        if id_style is None:
            raise ValueError(f"template {text!r} has {{id}} but no id_style")
        out = out.replace("{id}", render_id(key, attr, id_style))
    return out.replace("{value}", value)


def draw_value(rng, patterns, words, tokens=None) -> str:
    pat = patterns[int(rng.integers(len(patterns)))]
    out, pos = [], 0
    for m in FIELD_RE.finditer(pat):
        out.append(pat[pos:m.start()])
        f, n = m.group(1), int(m.group(2) or 1)
        for _ in range(n):
            if f == "d":
                out.append(str(int(rng.integers(10))))
            elif f == "D":
                out.append(str(int(rng.integers(1, 10))))
            elif f == "x":
                out.append("0123456789abcdef"[int(rng.integers(16))])
            elif f == "X":
                out.append("0123456789ABCDEF"[int(rng.integers(16))])
            elif f == "a":
                out.append(chr(97 + int(rng.integers(26))))
            elif f == "A":
                out.append(chr(65 + int(rng.integers(26))))
            elif f == "t":
                out.append(tokens[int(rng.integers(len(tokens)))])
            else:
                out.append(words[int(rng.integers(len(words)))])
        pos = m.end()
    out.append(pat[pos:])
    return "".join(out)


def kinds_regex(fam: dict) -> re.Pattern:
    """One regex matching every value the kinds of a side (its own value words for {w}) can draw."""
    return re.compile("|".join("(?:" + pattern_regex(p, fam["value_words"]) + ")"
                               for k in fam["value_kinds"] for p in k["patterns"]))


def pattern_regex(pat: str, words=None) -> str:
    """A regex source matching the values a pattern draws."""
    cls = {"d": "[0-9]", "D": "[1-9]", "x": "[0-9a-f]", "X": "[0-9A-F]", "a": "[a-z]", "A": "[A-Z]"}
    out, pos = "", 0
    for m in FIELD_RE.finditer(pat):
        out += re.escape(pat[pos:m.start()])
        f, n = m.group(1), int(m.group(2) or 1)
        if f == "w":
            one = "(?:" + "|".join(map(re.escape, words)) + ")" if words else "[a-z]+"
            out += one * n
        elif f == "t":
            out += TOKEN_CHARS + "+"
        else:
            out += cls[f] + (f"{{{n}}}" if n > 1 else "")
        pos = m.end()
    return out + re.escape(pat[pos:])


_check_v7()
VALUE_KINDS_V8 = _v8_kinds()
# Version 9 (written in session 12, not trained yet): values that are runs of 2-8 tokens of the
# tokenizer's own vocabulary ({tN}; the tokens whose text is TOKEN_CHARS alone, given by
# data.Generator.use_grammar). Why: at step 8488 (version 8) every held-out miss that is not digits
# has the needle found (the right start, the right length class) and the copy wrong: dates lose
# their dashes, UUIDs their middles, words become random shapes. A value that is any tokens can be
# answered only by copying each one. 12 kinds, so that about a fifth of the train side's values are
# token runs; names the hash puts on the held-out side are skipped.
VALUE_KINDS_V9 = [(f"tokens_{i:02d}", ["{t2}", "{t3}", "{t4}", "{t5}", "{t6}", "{t8}"])
                  for i in range(40) if not held_out("value_kinds", (f"tokens_{i:02d}", []))][:12]
assert not any(held_out("value_kinds", k) for k in VALUE_KINDS_V8), "a version 8 value kind is on the held-out side"

# Version 10 (written after session 13, not trained yet): structured values with no fixed part. At
# step 9106 (version 9) held-out URLs, UUIDs and words are found and their start copied, then the model
# goes on from trained shapes (`https://walnut.example.com/nutmeg` -> `https://waln.org/negative.com/vollow`):
# train-side kinds hold constant parts (`example.org`, `.git`, `?id=`, `/var/lib/`) cheaper to predict
# than to copy. So URLs, hosts, emails, paths, key=value pairs, ids and codes made only of token runs,
# corpus words and digit/hex/letter fields around separators (and at most a leading scheme).
V10_SCHEMES = ("https://", "http://", "ftp://", "s3://", "git@")
V10_SEPARATORS = "/.-_:@?=+~#&"
_V10_CANDIDATES = [
    # URLs
    ("open_url_words", ["https://{w}.{w}.{w}/{w}", "https://{w}.{w}/{w}/{w}", "http://{w}.{w}.{w}/{w}/{w}"]),
    ("open_url_deep", ["https://{w}.{t2}/{t2}/{t3}", "https://{w}.{w}.{t1}/{w}/{t2}", "http://{t2}.{t1}/{t3}/{w}"]),
    ("open_url_port", ["http://{t2}:{D}{d3}/{t2}", "https://{w}.{w}:{D}{d2}/{t3}", "http://{w}.{t1}.{t1}:{D}{d3}/{w}"]),
    ("open_url_query", ["https://{w}.{w}/{t2}?{w}={t2}", "http://{t2}.{w}/{w}?{t1}={d3}",
                        "https://{w}.{t2}/?{w}={w}+{t1}"]),
    ("open_url_fragment", ["https://{w}.{w}.{t1}/{t2}#{t2}", "http://{t2}.{t1}/{w}#{w}-{d2}"]),
    ("open_url_tilde", ["https://{w}.{t2}/~{w}/{t2}", "http://{t1}.{w}.{t1}/~{t3}"]),
    ("open_url_scp", ["git@{t2}.{w}:{t2}/{t3}", "git@{w}.{w}:{w}/{w}", "{w}@{w}.{t1}:{w}/{t2}"]),
    ("open_url_bucket", ["s3://{w}-{t2}/{t2}/{t2}", "ftp://{t2}.{w}/{t2}/{t3}", "s3://{t3}/{w}/{t1}"]),
    # hosts
    ("open_host_words", ["{w}.{w}.{w}", "{w}.{w}.{w}.{w}", "{w}{w}.{w}.{w}"]),
    ("open_host_tokens", ["{t2}.{t2}.{w}", "{w}.{t3}", "{t1}.{w}.{t2}"]),
    ("open_host_digits", ["{w}{d2}.{w}.{w}", "{w}-{d3}.{t2}", "{a2}{d}.{w}.{t1}"]),
    ("open_host_hyphen", ["{w}-{w}.{w}", "{w}-{t2}.{w}.{w}", "{t2}-{w}.{t1}"]),
    # emails
    ("open_email_words", ["{w}@{w}.{w}", "{w}.{w}@{w}.{w}", "{w}@{w}.{w}.{w}"]),
    ("open_email_plus", ["{w}+{t2}@{w}.{w}", "{w}+{d3}@{t1}.{w}.{w}", "{w}.{w}+{w}@{t2}.{t1}"]),
    ("open_email_digits", ["{w}{d2}@{w}-{w}.{w}", "{a}.{w}{d}@{t2}.{t1}", "{w}_{d4}@{w}.{w}"]),
    ("open_email_tokens", ["{t2}@{w}.{t1}", "{t2}_{w}@{w}.{t1}.{w}", "{w}-{t1}@{t2}.{w}"]),
    # paths
    ("open_path_root", ["/{w}/{t2}/{t2}", "/{w}/{w}/{w}.{t1}", "/{t2}/{w}/{t3}"]),
    ("open_path_relative", ["{w}/{t2}/{w}.{t1}", "{t2}/{t2}.{w}", "./{w}/{t3}"]),
    ("open_path_dot", ["{w}.{t1}/{w}/{t2}", "../{w}/{t2}.{w}", "./{t2}/{w}.{w}"]),
    ("open_path_home", ["~/{t2}/{w}", "~{w}/{t2}/{t2}", "~/{w}/{w}.{t1}"]),
    ("open_path_deep", ["/{w}/{w}/{t2}/{t2}/{w}", "{w}/{t1}/{t1}/{t1}/{w}.{t1}", "/{t1}/{t1}/{t1}/{t1}/{t1}"]),
    ("open_path_underscore", ["{w}_{w}/{t2}_{t1}/{w}", "/{t2}/{w}_{d2}.{w}", "{w}/{w}_{w}_{t1}.{w}"]),
    ("open_path_file", ["{w}/{w}.{w}", "/{w}/{t2}.{w}", "{t2}/{w}-{D}.{d}.{w}", "{w}/{w}/{w}.{a2}"]),
    # key=value, queries, flags, connection strings
    ("open_kv_pair", ["{w}={t2}", "{t2}={w}", "{w}={w}", "{w}_{w}={t3}"]),
    ("open_kv_multi", ["{w}={t2}&{w}={d3}", "{w}={t1}&{t2}={w}&{w}={t1}", "{w}={w}:{w}={t2}"]),
    ("open_kv_colon", ["{w}_{w}:{t2}", "{t2}:{w}:{d4}", "{w}:{D}{d2}:{t1}"]),
    ("open_query", ["?{w}={t2}", "?{t1}={w}+{t2}", "{w}?{w}={t1}#{t1}", "?{w}={d3}&{w}={w}"]),
    ("open_dsn", ["{w}:{t2}@{w}:{D}{d3}/{t2}", "{w}+{w}://{t2}@{w}/{t1}", "{w}://{w}:{t1}@{t2}.{w}/{w}"]),
    ("open_kv_flags", ["--{w}={t2}", "--{w}-{w}={w}", "+{w}:{t2}", "--{t2}={d3}"]),
    # identifiers
    ("open_dotted_id", ["{w}.{w}.{t2}", "{w}.{t1}.{w}.{t1}", "{t2}.{w}.{w}"]),
    ("open_kebab_id", ["{w}-{t2}-{w}", "{t2}-{w}-{d3}", "{w}-{w}-{t1}-{w}"]),
    ("open_mixed_id", ["{w}_{t2}.{w}", "{w}.{w}-{t2}_{d2}", "{t1}:{w}.{t2}"]),
    ("open_ref_id", ["{w}#{d3}", "{w}/{w}#{t2}", "{w}@{x7}", "{w}:{t2}@{x8}"]),
    # codes
    ("open_hex_code", ["{x4}-{a3}.{x4}", "{X2}{a2}_{x6}", "{a3}{x3}:{X4}"]),
    ("open_code_tokens", ["{t2}-{x6}", "{x4}.{t2}", "{t1}_{X4}{a2}", "{A2}{d2}-{a3}{x2}-{t1}"]),
    ("open_code_letters", ["{a3}-{t2}-{a3}", "{A3}.{a4}~{t1}", "{a2}{d2}{a2}/{t2}"]),
]
VALUE_KINDS_V10 = [k for k in _V10_CANDIDATES if not held_out("value_kinds", k)]


def _check_v10():
    earlier = VALUE_KINDS + VALUE_KINDS_V7 + VALUE_KINDS_V8 + VALUE_KINDS_V9
    names, pats = {n for n, _ in earlier}, {p for _, ps in earlier for p in ps}
    for n, ps in VALUE_KINDS_V10:
        assert not held_out("value_kinds", (n, ps)), f"version 10 value kind {n!r} is on the held-out side"
        assert n not in names and not set(ps) & pats, f"version 10 value kind {n!r} repeats an earlier kind"
        names.add(n)
        pats |= set(ps)
        for p in ps:
            lit = FIELD_RE.sub("", next((p[len(s):] for s in V10_SCHEMES if p.startswith(s)), p))
            assert FIELD_RE.search(p) and set(lit) <= set(V10_SEPARATORS), \
                f"version 10 pattern {p!r} holds literal text other than separators and a scheme"


_check_v10()

# Version 11 (session 15): frames that are generated, not listed, and digit/hex group values. At
# step 11181 (version 10) 306 of the 770 held-out misses at 1K-64K are another value than the
# planted one (`<{id}>{value}</{id}>` 0 of 42, `{Key} .......... {attr} .......... {value}` 1 of
# 47, every pascal id missed) and 119 are the planted value cut short: dates stop after the year
# (`2073-02-11` -> `2073`) and UUIDs after a group or two, because no train kind has values of
# digit groups, and none has more than three hex groups. The model learned 36 fixed frames, not
# "find the key, copy what follows it". So version 11 adds to the train side:
# - NEEDLES_V11: frames composed from independent parts (a comment or list prefix, the key as words,
#   as an id in any of the six id styles (pascal too) or as its own table field, an operator or a
#   verb, a wrapper around the value, an ending; prose frames with a lead and a verb, value-first
#   sentences, XML elements and attributes, function calls);
# - QUESTIONS_V11: questions composed from a lead, an object naming the key (words or id) and a tail;
# - VALUE_KINDS_V11: digit groups (phone-, ISBN-, IP-, clock-like), 2-5 hex groups and word/digit
#   groups (the long-hex and upper-case candidates fall on the held-out side of the hash and are
#   skipped, as version 10's were).
# The split stays honest: a generated frame or question is dropped when its skeleton (whitespace
# removed, runs of one punctuation character made one, case folded, {Key} read as {key}) is a
# held-out item's skeleton or a listed item's, so `-- {key} {attr} = {value}` or
# `{Key} ..... {attr} ..... {value}` can never be generated; no V11 value pattern can draw a value a
# held-out kind can (check_data.py proves it per pattern pair, as for version 10). Drawn from fixed
# seeds (Python's random), so the lists are the same on every machine.
V11_PREFIXES = ("", "", "", "# ", "// ", "; ", "* ", "- ", "  ", "    ", "> ", "| ", "% ", "rem ", "!! ",
                "[info] ", "DEBUG ", "@", "<!-- ", "/* ", "## ", "+ ", "1. ", "\t")
V11_SUFFIX_FOR = {"<!-- ": " -->", "/* ": " */"}
V11_SUFFIXES = ("", "", "", ".", ";", ",", " |", "  # ok", " (confirmed)", " !", " // keep", " ;;")
V11_OPS = (": ", " = ", "=", " := ", " -> ", " => ", " is ", " was ", " is set to ", " equals ", "\t", " | ",
           " : ", " -- ", " ~ ", " ==> ", ", ", " .... ", " >> ", " <- ", " == ", " set to ", " uses ",
           " holds ", " reads ")
V11_WRAPS = (("", ""), ("", ""), ("", ""), ('"', '"'), ("'", "'"), ("`", "`"), ("(", ")"), ("[", "]"),
             ("<", ">"), ("{", "}"), ("**", "**"), ("\u00ab", "\u00bb"))
V11_KEY_WORDS = ("{key} {attr}", "{Key} {attr}", "{attr} of {key}", "{key}'s {attr}", "{attr} for {key}",
                 "{Key} / {attr}", "{key}::{attr}", "{attr} ({key})", "{key} -> {attr}", "{Key}, {attr}")
V11_FIELD_SEPS = (" | ", "\t", ",", ";", " : ", "  ", " ... ", " :: ", " / ", " ; ", "\t|\t", " ,")
V11_PROSE_LEADS = ("", "", "Remember: ", "FYI, ", "Note that ", "In this setup, ", "Currently ", "After the change, ",
                   "Per the spec, ", "As of today, ", "Heads up: ", "For the record, ", "Since the last release, ",
                   "In production, ", "By default, ")
V11_PROSE_OBJECTS = ("the {attr} of {key}", "{key}'s {attr}", "the {attr} for {key}", "the {key} {attr}",
                     "{Key}'s {attr}", "the {attr} that {key} uses", "the {attr} assigned to {key}")
V11_PROSE_VERBS = ("is", "was", "became", "is now", "has been set to", "should be", "reads", "stays",
                   "will be", "is recorded as", "equals", "was changed to", "remains")
V11_VALUE_FIRST = ("{value} is the {attr} of {key}", "{value} was chosen as {key}'s {attr}",
                   "{value} -- {attr} of {key}", "{value} ({key}, {attr})", "{value}: {attr} for {key}",
                   "use {value} as the {attr} for {key}", "{value} <- {id}", "{value} = {id}")
V11_XML_TAGS = ("entry", "field", "item", "param", "setting", "opt", "prop", "var", "row", "config")
V11_XML_NAMES = ("name", "key", "id", "for", "ref")
V11_XML_VALUES = ("value", "val", "v", "data", "content")
V11_CALLS = ("set", "setenv", "put", "define", "register", "config.set", "conf.put", "store", "env.set",
             "option", "Settings.put", "cfg.update", "vars.assign")


def skeleton(text: str) -> str:
    """A template's skeleton, for the split's near-duplicate rule: whitespace removed, each run of
    one punctuation character made one, case folded, {Key} read as {key}."""
    t = re.sub(r"\s+", "", text.replace("{Key}", "{key}")).lower()
    return re.sub(r"([^\w{}])\1+", r"\1", t)


def _draw_needles(seed: int, n: int, n_forms: int, banned: set, form_body):
    """n generated needle frames (kind, text, id_style), drawn from a fixed seed. Each draw picks a
    form (0..n_forms-1), a value wrapper, a line prefix and its suffix, then
    form_body(rnd, pick, form, val, pre, suf) -> (kind, body, style, pre, suf) builds the frame;
    a frame whose skeleton is in `banned` or was drawn before is drawn again."""
    import random
    rnd = random.Random(seed)
    out, seen = [], set()

    def pick(seq):
        return seq[rnd.randrange(len(seq))]

    while len(out) < n:
        form = rnd.randrange(n_forms)
        lo, hi = pick(V11_WRAPS)
        val = lo + "{value}" + hi
        pre = pick(V11_PREFIXES)
        suf = V11_SUFFIX_FOR.get(pre, pick(V11_SUFFIXES))
        kind, body, style, pre, suf = form_body(rnd, pick, form, val, pre, suf)
        text = pre + body + suf
        sk = skeleton(text)
        if sk in banned or sk in seen:
            continue
        seen.add(sk)
        out.append((kind, text, style))
    return out


def _v11_needles(n=240):
    return _draw_needles(11, n, 7, {skeleton(t) for _, t, _ in NEEDLES}, _v11_form)


def _v11_form(rnd, pick, form, val, pre, suf):
    """Version 11's frame of one form (_draw_needles' form_body)."""
    style = None
    if form == 0:      # key words, operator, value
        kind, body = "gen_words", pick(V11_KEY_WORDS) + pick(V11_OPS) + val
    elif form == 1:    # an id in some style, operator, value
        style = pick(ID_STYLES)
        kind, body = "gen_id", "{id}" + pick(V11_OPS) + val
    elif form == 2:    # table row: key, attribute, value as fields
        sep = pick(V11_FIELD_SEPS)
        kind, body = "gen_table", sep.join(("{Key}" if rnd.random() < 0.3 else "{key}", "{attr}", val))
        if rnd.random() < 0.3 and sep.strip():  # an outer border too: `| a | b | v |`
            body = sep.strip() + " " + body + " " + sep.strip()
    elif form == 3:    # prose: lead, object, verb, value
        obj = pick(V11_PROSE_OBJECTS)
        lead = pick(V11_PROSE_LEADS)
        if not lead:
            obj = obj[:1].upper() + obj[1:] if not obj.startswith("{") else obj
        kind, body = "gen_prose", lead + obj + " " + pick(V11_PROSE_VERBS) + " " + val + "."
        pre, suf = "", ""
    elif form == 4:    # value first
        body = pick(V11_VALUE_FIRST).replace("{value}", val)
        style = pick(ID_STYLES) if "{id}" in body else None
        kind = "gen_value_first"
    elif form == 5:    # XML element or attribute
        style = pick(ID_STYLES)
        tag, nm, vl = pick(V11_XML_TAGS), pick(V11_XML_NAMES), pick(V11_XML_VALUES)
        body = pick(('<%s %s="{id}" %s="{value}"/>' % (tag, nm, vl),
                     '<%s %s="{id}">{value}</%s>' % (tag, nm, tag),
                     '<{id} %s="{value}"/>' % vl,
                     '<%s><%s>{id}</%s><%s>{value}</%s></%s>' % (tag, nm, nm, vl, vl, tag)))
        kind, pre, suf = "gen_xml", "", ""
    else:              # a call
        style = pick(ID_STYLES)
        q = pick(('"', "'", ""))
        kind = "gen_call"
        body = pick(V11_CALLS) + "(" + q + "{id}" + q + ", " + val + ")" + pick(("", ";", ""))
        suf = ""
    return kind, body, style, pre, suf


def _v11_questions(n=120):
    import random
    rnd = random.Random(111)
    leads = ("What is", "What's", "Tell me", "Give me", "Show me", "Find", "Return", "Print", "Fetch",
             "I'd like to know", "Could you find", "I need", "Get", "Please state", "Retrieve", "Check",
             "Say", "Which is", "Quick: what is", "Do you have", "Read off", "Name", "Can you give me")
    objs = (("the {attr} of {key}", False), ("{key}'s {attr}", False), ("the {attr} for {key}", False),
            ("the {key} {attr}", False), ("{key} {attr}", False), ("the {attr} that {key} has", False),
            ("the {attr} set for {key}", False), ("the {attr} {key} uses", False),
            ("the current {attr} of {key}", False), ("the {attr} belonging to {key}", False),
            ("{Key}'s {attr}", False), ("the {attr} given for {key}", False),
            ("{id}", True), ("the value of {id}", True), ("what {id} holds", True), ("{id}'s value", True),
            ("the setting {id}", True), ("the value stored in {id}", True))
    tails = ("?", "?", ".", "", " please.", ", please?", " exactly?", " from the documents.",
             " (just the value)", " -- what does the text say?", " in these files?")
    banned = {skeleton(t) for t, _ in QUESTIONS + MULTI_VALUE_QUESTIONS + FILE_QUESTIONS}
    out, seen = [], set()
    while len(out) < n:
        obj, needs_id = objs[rnd.randrange(len(objs))]
        text = leads[rnd.randrange(len(leads))] + " " + obj + tails[rnd.randrange(len(tails))]
        sk = skeleton(text)
        if sk in banned or sk in seen:
            continue
        seen.add(sk)
        out.append((text, needs_id))
    return out


NEEDLES_V11 = _v11_needles()
QUESTIONS_V11 = _v11_questions()
_V11_KIND_CANDIDATES = [
    ("group_digits_dash", ["{D}{d2}-{d3}-{d4}", "{d3}-{d2}-{d4}", "{d2}-{d2}-{d2}-{d2}", "{D}{d3}-{d4}-{d4}-{d4}",
                           "{d2}-{d7}-{d}", "{d3}-{d3}", "{d5}-{d3}"]),
    ("group_digits_dot", ["{D}{d}.{d}.{d}.{D}{d}", "{d2}.{d2}.{d4}", "{D}.{d2}.{d3}.{d}", "{d3}.{d3}.{d3}"]),
    ("group_digits_colon", ["{d2}:{d2}:{d2}", "{D}{d}:{d2}:{d2}.{d3}", "{d3}:{d4}", "{d2}:{d2}:{d2}:{d2}"]),
    ("group_digits_slash", ["{d2}/{d2}/{d4}", "{d}/{d2}/{d2}", "{d4}/{d3}", "{D}{d2}/{d5}"]),
    ("group_digits_other", ["{d4}_{d4}", "{d3}~{d5}", "#{d6}-{d2}", "{d4}+{d3}", "{d2}#{d4}#{d2}"]),
    ("group_hex_dash", ["{x8}-{x8}-{x8}", "{x4}-{x4}-{x4}-{x4}-{x4}", "{x6}-{x6}-{x6}-{x6}", "{x12}-{x8}",
                        "{x4}-{x8}-{x4}-{x8}", "{x8}-{x4}-{x8}-{x4}-{x6}"]),
    ("group_hex_long", ["{x16}", "{x24}", "{x32}", "{x40}", "{x20}"]),
    ("group_hex_colon", ["{x2}:{x2}:{x2}:{x2}:{x2}:{x2}", "{X2}-{X2}-{X2}-{X2}", "{x4}:{x4}:{x4}:{x4}"]),
    ("group_upper", ["{X8}-{X4}-{X4}", "{A4}-{A4}-{A4}-{A4}", "{A5}-{d5}-{A5}", "{X4}-{X4}-{X4}-{X4}-{X4}"]),
    ("group_word_digits", ["{w}-{d4}-{d2}", "{w}.{d3}.{d2}", "{d3}-{w}-{d3}", "{w}:{d2}:{d2}"]),
]
VALUE_KINDS_V11 = [k for k in _V11_KIND_CANDIDATES if not held_out("value_kinds", k)]


def _check_generated_needles(needles):
    """No generated frame has a held-out frame's skeleton; each names its fact by an id (and has an
    id style) or by key and attribute words, and has a value."""
    held = {skeleton(t) for _, t, _ in NEEDLES if held_out("needles", (None, t, None))}
    for _, t, style in needles:
        assert skeleton(t) not in held and ("{id}" in t) == (style is not None), t
        assert "{value}" in t and ("{id}" in t or (("{key}" in t or "{Key}" in t) and "{attr}" in t)), t


def _check_v11():
    earlier = VALUE_KINDS + VALUE_KINDS_V7 + VALUE_KINDS_V8 + VALUE_KINDS_V9 + VALUE_KINDS_V10
    names, pats = {n for n, _ in earlier}, {p for _, ps in earlier for p in ps}
    for n, ps in VALUE_KINDS_V11:
        assert n not in names and not set(ps) & pats, f"version 11 value kind {n!r} repeats an earlier kind"
        names.add(n)
        pats |= set(ps)
        for p in ps:
            assert set(FIELD_RE.sub("", p)) <= set(V10_SEPARATORS), \
                f"version 11 pattern {p!r} holds literal text other than separators"
    _check_generated_needles(NEEDLES_V11)
    held = {skeleton(t) for _, t, _ in NEEDLES if held_out("needles", (None, t, None))}
    held |= {skeleton(t) for t, _ in QUESTIONS if held_out("questions", (t, None))}
    for t, needs_id in QUESTIONS_V11:
        assert skeleton(t) not in held and ("{id}" in t) == needs_id, t


_check_v11()


# ---- version 14 (session 17): many more generated frames, from a larger space of parts -------------
# Why: through longhaul the shipped mean of steps 12700 and 13379 answers held-out facts by how far a
# held-out frame is from some train frame: a yaml or `self.{id} = "{value}"` line 25/26 and 17/20 at
# 1K-16K, a dotted table row, a docstring, an XML element named by the id or "We set ... to ..."
# 1/21, 4/18, 5/15 and 8/27, answered mostly with text from elsewhere in the haystack (the needle is
# not found at all). Version 11's 240 generated frames (+84 of 770 held-out facts over version 10)
# were the largest gain so far, so version 14 grows the same idea: 1200 frames (NEEDLES_V14) drawn
# from parts none of which is chosen to imitate a held-out frame (parts first written here that
# made a held-out frame with one character changed, an XML element named by the id with a quoted
# value, a sectioned `[{key}]` line with `:`, and the subjects "Returns", "We keep", "We changed",
# were taken out again before any training, with the similarity table in TRAINING.md, "Session 17"):
#   - separators as runs of one punctuation character (1-12 long, spaced or not) besides V11_OPS,
#     between any two of key, attribute and value, each gap its own;
#   - the key named by words in more shapes (`{key}.{attr}`, `{key}[{attr}]`, `{attr}@{key}`...);
#   - sentences with a subject and a verb (`Stores the {attr} of {key}: {value}`), relative clauses
#     (`..., which is ...`), inside comment, doc-comment and quotation wrappers;
#   - declarations of an id (`export`, `let`, `local`, `%define`...), markup (HTML rows, dt/dd,
#     elements and attributes), nested yaml and sectioned ini-like lines, logfmt and log prefixes.
# No calls (version 12 dropped version 11's call frames after the demo's "set to" failure).
# The split rule is version 11's: a frame whose skeleton equals a held-out or listed item's, or an
# earlier generated one's, is drawn again; check_data.py reads version 14's lines back.
V14_RUN_CHARS = ".-=_~*:#>+/|"
V14_KEY_WORDS = V11_KEY_WORDS + ("{key}.{attr}", "{key}/{attr}", "{attr}@{key}", "{key}[{attr}]",
                                 "{key} ({attr})", "{attr} of {Key}", "{Key}: {attr}", "{key} :: {attr}",
                                 "{attr} in {key}", "{key}, {attr}", "{attr} - {key}", "{key} > {attr}")
V14_SUBJECTS = ("Stores", "Holds", "Keeps", "Sets", "Defines", "Gives", "Tracks", "Reports",
                "Configures", "This sets", "This line sets", "They moved", "Ops put",
                "The installer writes", "The patch updates", "I bumped", "Someone set",
                "The team agreed on", "Here is", "Below is", "Logged:", "The config lists", "It records")
V14_LINKS = (" to ", " as ", ": ", ", which is ", ", namely ", " -- it is ", ", currently ", " = ", " at ",
             " -> ", ", now ", " with the value ", ", i.e. ", ", value ")
V14_WRAPPERS = (("", ""), ("", ""), ("", "."), ('"""', '"""'), ("'''", "'''"), ("/** ", " */"),
                ("(* ", " *)"), ("{- ", " -}"), ("# ", ""), ("// ", ""), ("-- ", ""), ("%% ", ""),
                ('"', '"'), ("* ", ""), ("   ", ""), ("<!-- ", " -->"), ("/// ", ""), ("#' ", ""),
                ("REM ", ""), ("(", ")"), ("[", "]"), ("> ", ""))
V14_DECLS = ("", "", "export ", "set ", "let ", "const ", "var ", "%define ", "$", "@", "static ",
             "readonly ", "declare ", "local ", "our ", "val ", "ENV ", "ARG ", "global ", "param ",
             "option ", "default ", "Public ", "private ", "config ", "setting ")
V14_LOG_LEADS = ("[INFO] ", "INFO  ", "level=info ", "I1206 10:11:12.345 ", "<6>", "app[123]: ",
                 "[debug] ", "WARN ", "notice: ", "10:11:12 ", "[main] ", "[worker-3] ", "| ", "+ ")
V14_LOG_BODIES = ("{key}: {attr} changed to {value}", "updated {attr} for {key} -> {value}",
                  "key={key} attr=\"{attr}\" value={value}", "{key} {attr}={value}",
                  "{attr} of {key} now {value}", "applied {attr}={value} to {key}",
                  "{key}/{attr} => {value}", "config {key}.{attr} := {value}",
                  "{Key} reports {attr} {value}", "setting {attr} on {key}: {value}")
V14_MARKUP = ('<tr><td>{key}</td><td>{attr}</td><td>{value}</td></tr>',
              '<dt>{key} {attr}</dt><dd>{value}</dd>', '<li>{Key} {attr}: {value}</li>',
              '<td>{attr} of {key}</td><td>{value}</td>', '<{id} value="{value}"/>',
              '<field id="{id}">{value}</field>', '<opt name="{id}" v="{value}">',
              '{"key": "{key}", "attr": "{attr}", "value": "{value}"}', '{"{key}": {"{attr}": "{value}"}}',
              '{key}:\n  {attr}: {value}', '{key}:\n    {attr}: "{value}"', '[{key}.{attr}]\nvalue = {value}',
              '{key}.{attr}={value}',
              '"{id}" => "{value}",', "'{id}': '{value}',", '{id} <- "{value}"', '({id} . "{value}")',
              '{id}: !!str {value}', '| {attr} | {key} | {value} |', '{attr},{key},{value}',
              '{key};{attr};{value}', '{key}\t{value}\t# {attr}')


def _v14_sep(rnd):
    """A separator: a run of one punctuation character, spaced or not, or one of V11_OPS."""
    if rnd.random() < 0.5:
        run = V14_RUN_CHARS[rnd.randrange(len(V14_RUN_CHARS))] * rnd.choice((1, 2, 3, 4, 5, 6, 8, 10, 12))
        return rnd.choice((" %s ", "%s", " %s", "%s ")) % run
    return V11_OPS[rnd.randrange(len(V11_OPS))]


def _v14_needles(n=1200):
    banned = {skeleton(t) for _, t, _ in NEEDLES} | {skeleton(t) for _, t, _ in NEEDLES_V11}
    return _draw_needles(14, n, 8, banned, _v14_form)


def _v14_form(rnd, pick, form, val, pre, suf):
    """Version 14's frame of one form (_draw_needles' form_body)."""
    style = None
    if form == 0:      # key words, separator, value
        kind, body = "gen14_words", pick(V14_KEY_WORDS) + _v14_sep(rnd) + val
    elif form == 1:    # table row: three fields, each gap its own separator, maybe a border
        k = "{Key}" if rnd.random() < 0.3 else "{key}"
        a, b = ("{attr}", k) if rnd.random() < 0.25 else (k, "{attr}")
        kind, body = "gen14_table", a + _v14_sep(rnd) + b + _v14_sep(rnd) + val
        if rnd.random() < 0.25:
            edge = pick(V14_RUN_CHARS) * rnd.choice((1, 2))
            body = edge + " " + body + " " + edge
    elif form == 2:    # a sentence with a subject and a verb, in a wrapper
        lo2, hi2 = pick(V14_WRAPPERS)
        body = lo2 + pick(V14_SUBJECTS) + " " + pick(V11_PROSE_OBJECTS) + pick(V14_LINKS) + val + hi2
        kind, pre, suf = "gen14_sentence", "", ""
    elif form == 3:    # prose (version 11's parts) in a wrapper
        obj = pick(V11_PROSE_OBJECTS)
        lead = pick(V11_PROSE_LEADS)
        if not lead and not obj.startswith("{"):
            obj = obj[:1].upper() + obj[1:]
        lo2, hi2 = pick(V14_WRAPPERS)
        body = lo2 + lead + obj + " " + pick(V11_PROSE_VERBS) + " " + val + pick((".", "", ";", "!")) + hi2
        kind, pre, suf = "gen14_prose", "", ""
    elif form == 4:    # a declared id
        style = pick(ID_STYLES)
        kind, body = "gen14_decl", pick(V14_DECLS) + "{id}" + _v14_sep(rnd) + val
    elif form == 5:    # value first
        body = pick(V11_VALUE_FIRST + ("{value} :: {key} {attr}", "{value}\t{key}\t{attr}",
                                       "{value} ({attr} of {key})", "[{value}] {key}.{attr}",
                                       "{value}  # {id}", "{value} is what {key} uses for {attr}"))
        body = body.replace("{value}", val)
        style = pick(ID_STYLES) if "{id}" in body else None
        kind = "gen14_value_first"
    elif form == 6:    # markup and structured fields
        body = pick(V14_MARKUP)
        style = pick(ID_STYLES) if "{id}" in body else None
        kind, pre, suf = "gen14_markup", "", ""
    else:              # a log line
        kind, body = "gen14_log", pick(V14_LOG_LEADS) + pick(V14_LOG_BODIES).replace("{value}", val)
        pre, suf = "", ""
    return kind, body, style, pre, suf


NEEDLES_V14 = _v14_needles()


_check_generated_needles(NEEDLES_V14)


class Families:
    """One side's items (a heldout_families.json-form dict), ready to draw facts from."""

    def __init__(self, fam: dict):
        self.f = fam
        self.needles = fam["needles"]
        self.questions = fam["questions"]
        self.mv_questions = fam["multi_value_questions"]
        self.file_questions = fam["file_questions"]
        self.kinds = fam["value_kinds"]
        self.attrs = fam["attributes"]
        self.words = fam["value_words"]
        self.reject = None
        self.tokens = None   # version 9's {t} tokens (data.Generator.use_grammar)

    @classmethod
    def side(cls, side: str, version: int = 6):
        return cls(families(side, version))

    @classmethod
    def load(cls, path: str):
        with open(path) as f:
            return cls(json.load(f))

    def pick(self, rng, seq):
        return seq[int(rng.integers(len(seq)))]

    def value(self, rng, kind=None) -> str:
        kind = kind or self.pick(rng, self.kinds)
        v = draw_value(rng, kind["patterns"], self.words, self.tokens)
        # version 8's shapes and version 9's token runs can draw a held-out kind's form (7 hex
        # digits that are all digits): draw again (self.reject is set by Generator.use_grammar)
        while self.reject is not None and self.reject.fullmatch(v):
            v = draw_value(rng, kind["patterns"], self.words, self.tokens)
        return v

    def needle(self, rng, kinds_of_text=None):
        pool = self.needles if kinds_of_text is None else [n for n in self.needles if n["kind"] in kinds_of_text]
        return self.pick(rng, pool)

    def question(self, rng, needle, pool=None):
        pool = self.questions if pool is None else pool
        ok = [q for q in pool if not q["needs_id"] or needle["id_style"]]
        return self.pick(rng, ok)

    @staticmethod
    def line(needle, key, attr, value) -> str:
        return fill(needle["text"], key, attr, value, needle["id_style"])

    @staticmethod
    def ask(question, needle, key, attr) -> str:
        return fill(question["text"], key, attr, "", needle["id_style"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", help="write the held-out families JSON here")
    ap.add_argument("--corpus", help="corpus folder (words.json): its first 200 held-out words become 'keys'")
    ap.add_argument("--summary", action="store_true", help="print the split")
    args = ap.parse_args()
    if args.summary or not args.write:
        for side in ("train", "heldout"):
            f = families(side)
            print(side, {k: len(v) for k, v in f.items()})
        h = families("heldout")
        print("held-out needle kinds:", sorted({n["kind"] for n in h["needles"]}))
        print("held-out value kinds:", [k["name"] for k in h["value_kinds"]])
    if args.write:
        keys = []
        if args.corpus:
            with open(os.path.join(args.corpus, "words.json")) as f:
                keys = json.load(f)["heldout"][:200]
        with open(args.write, "w") as f:
            json.dump(heldout_document(keys), f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
