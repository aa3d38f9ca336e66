"""Task generator for the tiny model: long haystacks of real text and code with planted facts.

Every sample is a chat in MiniMax-Text-01's own format (the template in tokenizer_config.json):

    [<beginning_of_sentence>system ai_setting=assistant\\n{system}<end_of_sentence>\\n]
    <beginning_of_sentence>user name=user\\n{haystack}\\n{question}<end_of_sentence>\\n
    <beginning_of_sentence>ai name=assistant\\n{answer}<end_of_sentence>

or, for a share of samples, with the haystack placed before the first turn (the way a batch
runner may put ingested documents ahead of the messages). The haystack is raw filler text, or
files framed as longhaul's ingest frames them by default:

    <document path="PATH">\\n{file content}\\n</document>\\n

Tasks: passkey; RULER-style "special magic number" needles (single, multi-key, multi-value,
multi-query); facts planted in source files of a framed repository archive ("What is the value
of X?", "Which file defines X?"). The loss is taken on the answer tokens and the closing
<end_of_sentence> only (see train.py), which is what made retrieval learnable in the probes.

Held out for evaluation only: the corpus's held-out split (other packages and modules), the
held-out key words, and the EVAL_* needle phrasings below, which never appear in training.

Determinism: a sample is a pure function of (seed, index) through numpy's Generator; a batch of
step s is a pure function of (seed, s), so training resumes exactly where it stopped.
"""

import json
import lzma
import math
import os
import re

import numpy as np

import grammar

HELDOUT_FAMILIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heldout_families.json")

BOS = "<beginning_of_sentence>"
EOS = "<end_of_sentence>"
ROLE_SYSTEM = BOS + "system ai_setting=assistant\n"
ROLE_USER = BOS + "user name=user\n"
ROLE_AI = BOS + "ai name=assistant\n"

# (needle, question) phrasings for the magic-number tasks. {k}: key word, {v}: value.
TRAIN_MAGIC = [
    ("The special magic {k} number is: {v}.", "What is the special magic {k} number?"),
    ("One of the special magic numbers for {k} is: {v}.", "What is the special magic number for {k}?"),
    ("Remember this: the special magic {k} number is {v}.", "What is the special magic {k} number mentioned in the provided text?"),
    ("The special magic number for {k} is {v}.", "Tell me the special magic number for {k}."),
]
# Version 4 adds these to the training phrasings ("Which ..." questions for numbers, which the
# step-5045 model reads as the repository-file question). None is a held-out phrasing.
TRAIN_MAGIC_V4 = TRAIN_MAGIC + [
    ("For {k}, the special magic number is: {v}.", "Which is the special magic number for {k}?"),
    ("The special magic {k} number, for the record, is {v}.", "Which number is the special magic {k} number?"),
]
EVAL_MAGIC = [
    ("Note that the special magic {k} number is: {v}.", "Which special magic {k} number appears in the text?"),
]
TRAIN_MULTI_VALUE_Q = [
    "What are all the special magic {k} numbers?",
    "List every special magic number for {k}.",
]
TRAIN_MULTI_VALUE_Q_V4 = TRAIN_MULTI_VALUE_Q + ["Which numbers are special magic {k} numbers? Give every one."]
EVAL_MULTI_VALUE_Q = ["Which special magic {k} numbers appear in the text? Give all of them."]
TRAIN_PASSKEY = [
    ("The pass key is {v}. Remember it. {v} is the pass key.", "What is the pass key?"),
    ("The passkey is {v}. Keep it in mind: {v}.", "What is the passkey?"),
]
EVAL_PASSKEY = [("Here is the pass key: {v}. Do not forget {v}.", "What is the pass key in the text?")]
SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a careful assistant. Answer with the exact value only.",
    "Answer the question about the documents.",
]
# How the fact is written into a source file, by the file's kind.
PLANT_C = "#define {name} {v}"
PLANT_PY = "{name} = {v}"
PLANT_PROSE = "The value of {name} is {v}."
REPO_VALUE_Q = "What is the value of {name}?"
# version 9: half the repository value questions in the grammar's train-side question templates
# that name the identifier ({id} -> the constant's name). Why: step 8488 finds DEFAULT_WORKER_TIMEOUT
# past a near miss when asked "What is the value of ...?", the only form repository questions had,
# and makes a value up for "What is ... set to?" (a held-out template, so it is not trained here).
REPO_VALUE_QS_V9 = ("Find the value of {name}.", "Which value does {name} have?", "Tell me what {name} is.",
                    "What does {name} equal?", "{name} = ?")
REPO_FILE_Q = "Which file defines {name}?"


def repo_value_qs_v16(fam) -> list:
    """Version 16's third of the repository value questions: every train-side grammar question that
    names the identifier ({id}, hand-written and version 11's generated ones), {id} -> {name}."""
    return [q["text"].replace("{id}", "{name}") for q in fam.questions if q["needs_id"]]
MULTI_QUERY_Q = "What are the special magic numbers for {k1} and {k2}?"

TASKS = ("magic", "multikey", "multivalue", "multiquery", "passkey", "repo_value", "repo_file")
# Data versions. A step's batch is a function of (data seed, step, progress, data version): the
# version is kept in the training state (run["data_version"]; absent = 1) so that a resumed run
# draws the same batches.
#   1: the first 1970 steps (TRAIN_MIX, no hard negatives, curriculum up to 16K).
#   2: multi-key and multi-query weighted up; single-needle samples carry hard negatives (other
#      keys' magic-number lines) 60% of the time; a 32K curriculum stage when max_len allows.
#   3: steps 3348-5044 (session 3): version 2's steps, and in between "dense" steps of short
#      samples that each hold many keys and ask about several of them (multikey_dense). Why:
#      through longhaul, step 3348 answers multi-key at chance at every length from 256 tokens
#      to 32K, with another needle's whole value
#      (docs/results/niah-haul-tiny-v2-multikey-short-cpu-2026-12-01/), so the key-to-value
#      match itself is missing; short dense samples carry 10-50x more answers per step to learn
#      it from than 32K ones. Version 3 draws its tasks from TASKS_V3. It worked: multi-key at
#      32K through longhaul went from 0.45 to 0.90 (models/haul-tiny/TRAINING.md).
#   4: (not trained yet) version 3 with dense steps for every question form, not only multi-key:
#      multi-query (two keys per turn), multi-value (several keys, 1-4 values each) and
#      repository facts (small framed archives, 3-10 facts, value and file questions), plus the
#      TRAIN_MAGIC_V4 / TRAIN_MULTI_VALUE_Q_V4 phrasings in every step. Why: at step 5045 the
#      first-digit misses are left only in the forms the dense steps did not train (multi-query's
#      and multi-value's later values, repository values, held-out phrasings) and "which file"
#      was never learned (TRAINING.md, "What the failures look like"). Trained in session 4
#      (steps 5045-6570): multi-query through longhaul went from 23/40 to 40/40.
#   5: (not trained yet) version 4 with longer multi-value lists. Why: at step 6571 longhaul's
#      multi-value (4 values planted) gives 3 of the 4 values in 33 of 40 answers, every value
#      given right: the list ends early. Version 4 had 4-value lists in a quarter of its dense
#      multi-value turns and none in its long steps. Version 5 draws 2-5 values per key in dense
#      multi-value turns (MV_VALUES), gives multi-value a larger share of the dense steps
#      (DENSE_MIXES[5]) and 2-5 values in the long steps' multi-value samples.
#   6: (session 10, issue 31) facts from a grammar of independent parts (grammar.py): needle
#      templates of many kinds of text, question templates with and without the key's exact
#      words, value kinds from digits to UUID-like strings and paths, attributes; a quarter of
#      each part held out by hash (heldout_families.json, for evaluation only). Why: step 7847
#      answers the trained needle at 1K-64K every time and an unseen phrasing 1-12 times in 30
#      (issue 31): it learned one sentence shape, not retrieval. The long steps keep version 4's
#      tasks at 0.60 of the mix and add grammar facts (single with distractors, multi-key,
#      multi-value, "which file"); the dense steps (DENSE_MIXES[6]) give the grammar 0.60,
#      including short archives of small files for "which file" (file_dense).
#   7: (session 11) version 6 with the repository value question back at 0.11 of the long steps
#      (version 6 had halved it to 0.05; the 0.06 comes from the grammar's single fact, 0.22 ->
#      0.16) and at 0.10 of the dense steps (from 0.06; fact_dense 0.32 -> 0.28); the repository
#      facts get 1-3 grammar facts as distractors in the archive's files (60% of repo_value and
#      repo_file samples, 50% of repo_dense ones), and the grammar's train side gets 17 more value
#      kinds, words, URLs and paths (grammar.VALUE_KINDS_V7; the held-out side is unchanged). Why:
#      step 8581 (version 6, 734 steps) answered `make demo`'s "What is the value of
#      DEFAULT_WORKER_TIMEOUT?" over 204K tokens with "100" where step 7847 answered 4817, and
#      got 0 of 69 held-out values that are not digits (TRAINING.md, "Session 10").
#   8: (session 12) version 7's mixes with three changes in what the samples hold: repository
#      names with prefixes real constants have (DEFAULT_, MAX_, ...) and, in 60% of repository
#      samples, near-miss names (a word swapped, a prefix or suffix, a word dropped) planted with
#      other numbers, in dense ones asked too; the grammar's {w} drawn from the corpus's training
#      words instead of 76 value words; and 12 value kinds of random shape (grammar.VALUE_KINDS_V8).
#      Why: step 9336 (version 7) answered the demo's DEFAULT_WORKER_TIMEOUT with
#      `_MIN_SCHEDULED_TIMER_HANDLES = 100`'s value from 19K tokens earlier, or with a value made of
#      value words ("pepper@gecko.org"), and held-out non-digit values stayed at 0 of 69.
#   9: (written in session 12, not trained yet) version 8 with token runs as values (12 kinds of
#      grammar.VALUE_KINDS_V9: 2-8 tokens of the vocabulary) and half the repository value questions
#      in the grammar's train-side {id} question templates (REPO_VALUE_QS_V9). Why: step 8488
#      (version 8) finds held-out facts and copies only digits right, and it answers the demo's
#      "What is DEFAULT_WORKER_TIMEOUT set to?" with a made-up value (TRAINING.md, "Session 12").
#  10: (written after session 13, not trained yet) version 9 with 36 more value kinds of structured form
#      (grammar.VALUE_KINDS_V10: URLs, hosts, emails, paths, key=value pairs, identifiers, codes) made
#      of token runs, corpus words and digit/hex/letter fields around separators, with no fixed word
#      or domain; with version 9's token runs they are about half of the train side's values (a fifth
#      in version 9). Everything else is version 9's. Why: step 9106 (version 9) copies the start of a
#      held-out URL, UUID or word and then writes the fixed parts of trained kinds (`example.org`,
#      `.git`, `?id=`) instead of the value (TRAINING.md, "Session 13").
#  11: (session 15) version 10 with the grammar's train side grown by generated frames: 240 needle
#      templates composed from parts (prefix, key words or an id in any of the six id styles or a
#      table field, operator or verb, value wrapper, ending; prose, value-first, XML, calls;
#      grammar.NEEDLES_V11), 120 question templates (lead, object, tail; grammar.QUESTIONS_V11), and
#      8 value kinds of digit and hex groups (grammar.VALUE_KINDS_V11). Mixes as version 10, so the
#      generated items take most of the grammar's draws. Why: step 11181 (version 10) answers 327 of
#      770 held-out facts at 1K-64K; 306 misses read another value (0 of 42 on the held-out XML frame
#      with pascal ids, which no train frame had) and 119 stop early (dates after the year, UUIDs
#      after a group) where no train value had digit groups (TRAINING.md, "Session 14").
#  12: (written in session 15, trained in session 16 to step 13379) version 11 without the 25
#      generated call frames (`register("{id}", {value})`, `set(...)`, ...). Why: step 12700
#      (version 11) answers the demo's "What is DEFAULT_WORKER_TIMEOUT set to?" over thread.py
#      alone with `python_exit.register`, from `threading._register_atexit(_python_exit)`
#      (TRAINING.md, "Session 15"): real code is full of such calls.
#  13: version 12's data, with a last curriculum stage at max_len: once phase 1 is done, half the
#      long steps are max_len tokens (e.g. --replan-max-len 131072), the rest log-uniform below it.
#      Meant with train.py --train-only softmax (issue 31's "late stage at longer lengths made
#      affordable by freezing the lightning layers"): the 256K / 1M misses find the needle and lose
#      digits, which the one softmax layer's attention at lengths it never trained on explains.
#      (Session 16: 324 steps in 140 s, 84 of them at 131,072 tokens; no change outside the noise.)
#      (Session 17: 644 steps in 257 s, about 140 of them at 131,072 tokens: 256K + 1M 6 of 44
#      before, 4 and 5 after for the last weights and their EMA; judged, and no better.)
#  14: (session 17) version 12 with 1200 more generated needle frames (grammar.NEEDLES_V14:
#      separators as punctuation runs, more key shapes, sentences with subjects and relative clauses
#      in comment and doc wrappers, declarations, markup, log lines), and half the archives' paths
#      under a project folder (Generator._path_root). Mixes and curriculum as 12.
#      Why: the shipped mean's held-out misses are mostly frames far from every train frame, where
#      it reads text from elsewhere in the haystack; version 11's 240 generated frames were the
#      largest held-out gain so far (TRAINING.md, "Session 17").
#  15: (session 19) version 14 with distractors that look like answers in the long single-fact
#      samples: from 4096 tokens on, 0-12 more grammar facts of other (key, attribute) pairs (one
#      more per 2048 tokens at most), and in 60% of them a swarm, one other fact (its key or its
#      attribute shared in 60%, its frame in half) planted 4-24 times, with one value or many, in
#      the last quarter of the haystack (before the question) or anywhere. Why: the shipped
#      mean loses held-out facts with length even when the fact is the line before the question
#      (tools/train_tiny/diag_window.py: 7/12 at 1K, 4/12 at 32K, and 8/12 at 32K when its softmax
#      layer reads only the last 1024 tokens), so at long lengths far keys outbid the fact for the
#      softmax layer; its misses read one haystack string per length (32K/64K: 105 of 143 answer
#      gmock's `0-based`; removing that string gives other junk, not the fact). Training had at
#      most 4 other facts per sample, each once: few competitors that look like the answer.
#  16: (session 23) version 15 with more repository value facts, asked in more words: repo_value
#      0.11 -> 0.16 of the long steps and repo_dense 0.10 -> 0.16 of the dense steps, and a third of
#      the repository value questions drawn from every train-side grammar question that names the
#      identifier (repo_value_qs_v16; a third stay REPO_VALUE_Q, a third REPO_VALUE_QS_V9). Why:
#      every EMA of version 15 (sessions 19, 20, 22) answers the demo's "What is
#      DEFAULT_WORKER_TIMEOUT set to?" (a held-out question: it is not trained) with the value and
#      then more (`4817-1.013.`): `NAME = digits` at the end of a line, the demo's shape, was asked
#      in six phrasings only, while the grammar's digit-group kinds teach values that go on after
#      four digits. The held-out side is unchanged.
MIXES = {
    1: (0.28, 0.18, 0.10, 0.08, 0.10, 0.14, 0.12),
    2: (0.20, 0.32, 0.08, 0.14, 0.08, 0.11, 0.07),
    3: (0.20, 0.32, 0.08, 0.14, 0.08, 0.11, 0.07, 0.0),   # the long steps: version 2's mix
    4: (0.20, 0.32, 0.08, 0.14, 0.08, 0.11, 0.07, 0.0),   # the same, with version 4's phrasings
    5: (0.20, 0.30, 0.10, 0.14, 0.08, 0.11, 0.07, 0.0),   # multi-value 0.08 -> 0.10
    # version 6: TASKS_V6 (version 3's tasks, then the grammar's fact, fact_multikey, fact_mv, fact_file)
    6: (0.14, 0.14, 0.06, 0.06, 0.04, 0.05, 0.05, 0.0, 0.22, 0.10, 0.06, 0.08),
    7: (0.14, 0.14, 0.06, 0.06, 0.04, 0.11, 0.05, 0.0, 0.16, 0.10, 0.06, 0.08),   # repo_value 0.05 -> 0.11
}
MIXES[8] = MIXES[7]
MIXES[9] = MIXES[8]
MIXES[10] = MIXES[9]
MIXES[11] = MIXES[10]
MIXES[12] = MIXES[11]
MIXES[13] = MIXES[12]
MIXES[14] = MIXES[12]
MIXES[15] = MIXES[14]
# version 16: repo_value 0.11 -> 0.16 of the long steps (magic 0.14 -> 0.11, multikey 0.14 -> 0.12)
MIXES[16] = (0.11, 0.12, 0.06, 0.06, 0.04, 0.16, 0.05, 0.0, 0.16, 0.10, 0.06, 0.08)
TASKS_V3 = TASKS + ("multikey_dense",)
TASKS_V6 = TASKS_V3 + ("fact", "fact_multikey", "fact_mv", "fact_file")
GRAMMAR_TASKS = ("fact", "fact_multikey", "fact_mv", "fact_file", "fact_dense", "fact_mv_dense", "file_dense")
DENSE_STEP_P = 0.5        # version 3: share of steps that are dense steps
DENSE_LEN = (256, 2048)   # their lengths, log-uniform
DENSE_MIX = {"multikey_dense": 0.75, "multikey": 0.10, "magic": 0.15}  # their tasks (magic with hard negatives)
DENSE_MIX_V4 = {"multikey_dense": 0.35, "multiquery_dense": 0.15, "multivalue_dense": 0.15,
                "repo_dense": 0.20, "multikey": 0.05, "magic": 0.10}
DENSE_MIXES = {3: DENSE_MIX, 4: DENSE_MIX_V4,
               5: {"multikey_dense": 0.25, "multiquery_dense": 0.15, "multivalue_dense": 0.25,
                   "repo_dense": 0.20, "multikey": 0.05, "magic": 0.10},
               6: {"multikey_dense": 0.12, "multiquery_dense": 0.06, "multivalue_dense": 0.08,
                   "repo_dense": 0.06, "multikey": 0.03, "magic": 0.05,
                   "fact_dense": 0.32, "fact_mv_dense": 0.12, "file_dense": 0.16},
               7: {"multikey_dense": 0.12, "multiquery_dense": 0.06, "multivalue_dense": 0.08,
                   "repo_dense": 0.10, "multikey": 0.03, "magic": 0.05,
                   "fact_dense": 0.28, "fact_mv_dense": 0.12, "file_dense": 0.16}}
DENSE_MIXES[8] = DENSE_MIXES[7]
DENSE_MIXES[9] = DENSE_MIXES[8]
DENSE_MIXES[10] = DENSE_MIXES[9]
DENSE_MIXES[11] = DENSE_MIXES[10]
DENSE_MIXES[12] = DENSE_MIXES[11]
DENSE_MIXES[13] = DENSE_MIXES[12]
DENSE_MIXES[14] = DENSE_MIXES[12]
DENSE_MIXES[15] = DENSE_MIXES[14]
DENSE_MIXES[16] = {"multikey_dense": 0.10, "multiquery_dense": 0.06, "multivalue_dense": 0.08,
                   "repo_dense": 0.16, "multikey": 0.03, "magic": 0.05,
                   "fact_dense": 0.24, "fact_mv_dense": 0.12, "file_dense": 0.16}
# values per key in a dense multi-value turn, as rng.integers(lo, hi): 1-4 up to version 4, 2-5 on
MV_VALUES = {4: (1, 5), 5: (2, 6)}
# values of the long steps' multi-value samples, as rng.integers(lo, hi) (version 5 on; before, 2-3)
MV_LONG_VALUES = (2, 6)
TRAIN_MIX = MIXES[1]
HARD_NEG_P = 0.6          # version 2: share of single-needle samples with distractor needles
REPO_GRAMMAR_P = 0.6      # version 7: share of repo_value / repo_file samples with grammar facts as distractors
REPO_DENSE_GRAMMAR_P = 0.5  # ... and of repo_dense samples
SWARM_MIN_LEN = 4096      # version 15: long single facts get more distractors and (SWARM_P) a swarm
SWARM_P = 0.6
SWARM_REPS = (4, 25)      # a swarm's plantings, as rng.integers(lo, hi)
NEAR_MISS_P = 0.6         # version 8: share of repo_value / repo_file / repo_dense samples with near-miss names
NAME_PREFIX_P = 0.3       # version 8: share of repository names with a prefix real constants have
NAME_PREFIXES = ("DEFAULT", "MAX", "MIN", "NUM", "INITIAL", "LOCAL", "GLOBAL", "_MIN", "_MAX")
NAME_SUFFIXES = ("MAX", "MIN", "MS", "LIMIT", "SIZE", "COUNT", "DEFAULT", "SECS")
WORD_V8 = re.compile(r"[a-z]{3,10}")   # version 8's value words: corpus training words of this form


def frame(path: str, text: str) -> str:
    """longhaul's default document framing (ingest subsystem)."""
    return f'<document path="{path}">\n{text}\n</document>\n'


class Corpus:
    """Documents of one split, loaded once; cheap random access for filler."""

    def __init__(self, corpus_dir: str, split: str):
        with lzma.open(os.path.join(corpus_dir, f"{split}.jsonl.xz"), "rt", encoding="utf-8") as f:
            self.docs = [json.loads(line) for line in f]
        with open(os.path.join(corpus_dir, "words.json")) as f:
            self.words = json.load(f)["heldout" if split == "heldout" else "train"]
        self.code = [i for i, d in enumerate(self.docs) if d["kind"] == "code"]
        self.ccode = [i for i in self.code if self.docs[i]["path"].endswith(".h")]
        self.pycode = [i for i in self.code if self.docs[i]["path"].endswith(".py")]


class Generator:
    """Builds token sequences for the tasks; `tokenizer` is an HF `tokenizers.Tokenizer`."""

    def __init__(self, tokenizer, corpus: Corpus, held_out: bool = False, families_path: str | None = None):
        self.tok = tokenizer
        self.corpus = corpus
        self.held_out = held_out
        # the grammar's items: the train side for training; held out (heldout_families.json) for evaluation
        if held_out:
            self.fam = grammar.Families.load(families_path or HELDOUT_FAMILIES)
        else:
            self.fam = grammar.Families.side("train")
        # the grammar's train side by data version (7 adds value kinds); batch_for_step picks it.
        # fam_fixed keeps self.fam whatever the version (evaluation; check_data's --leak-heldout).
        self.fam_fixed = held_out
        self._fams = {6: self.fam} if not held_out else {}
        self.eos_id = tokenizer.token_to_id(EOS)
        self.version = 1
        self.chars_per_token = 3.0

    def use_grammar(self, version: int):
        """Draw the grammar's facts from its train side as data version `version` has it (versions
        7-10 add value kinds, 11 generated frames, questions and group kinds, 12 drops 11's call
        frames; 13 is 12's; 14 adds 1200 more generated frames), and (version 8) the repository facts
        with near-miss names."""
        self.version = version
        if self.fam_fixed:
            return
        v = 12 if version == 13 else min(14, max(6, version))   # version 13 draws version 12's facts
        if v not in self._fams:
            fam = grammar.Families.side("train", v)
            if v >= 9:
                # the tokens a {tN} field draws from: every token whose text is grammar.TOKEN_CHARS alone
                rx = re.compile(grammar.TOKEN_CHARS + "+")
                text = (self.tok.decode([i]) for i in range(self.tok.get_vocab_size()))
                fam.tokens = [t for t in text if rx.fullmatch(t)]
            if v >= 8:
                # {w} from the corpus's training words (thousands), not 76 fixed value words, so that
                # writing a value word from memory stops paying; never a held-out value word, and no
                # value any held-out kind could draw (grammar.Families.value draws again)
                held = grammar.families("heldout")
                fam.words = [w for w in self.corpus.words if WORD_V8.fullmatch(w) and w not in held["value_words"]]
                fam.reject = grammar.kinds_regex(held)
            self._fams[v] = fam
        self.fam = self._fams[v]

    # ---- text pieces -------------------------------------------------------------------

    def _ntok(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids)

    def _key(self, rng) -> str:
        return self.corpus.words[rng.integers(len(self.corpus.words))]

    def _keys(self, rng, n: int, keys=()) -> list:
        """keys, then further distinct random keys up to n in all."""
        keys = list(keys)
        while len(keys) < n:
            k = self._key(rng)
            if k not in keys:
                keys.append(k)
        return keys

    def _name(self, rng) -> str:
        n = int(rng.integers(2, 4))
        name = "_".join(self._key(rng).upper() for _ in range(n))
        if self.version >= 8 and rng.random() < NAME_PREFIX_P:
            name = NAME_PREFIXES[int(rng.integers(len(NAME_PREFIXES)))] + "_" + name
        return name

    def _near_names(self, rng, name: str, n: int, taken=()) -> list:
        """Version 8: n names that look like `name` but are not it, as real code has them
        (DEFAULT_WORKER_TIMEOUT beside _MIN_SCHEDULED_TIMER_HANDLES or WORKER_TIMEOUT_MAX): one word
        swapped for another, a prefix or suffix added or changed, or a word dropped."""
        out, words = [], name.split("_")
        while len(out) < n:
            w = list(words)
            how = int(rng.integers(4))
            if how == 0:
                w[int(rng.integers(len(w)))] = self._key(rng).upper()
            elif how == 1:
                pre = NAME_PREFIXES[int(rng.integers(len(NAME_PREFIXES)))]
                w = [pre] + (w[1:] if w[0] in NAME_PREFIXES else w)
            elif how == 2:
                w = w + [NAME_SUFFIXES[int(rng.integers(len(NAME_SUFFIXES)))]]
            elif len(w) > 2:
                del w[int(rng.integers(len(w)))]
            else:
                w = ["_" + w[0]] + w[1:]
            nm = "_".join(w)
            if nm != name and nm not in out and nm not in taken:
                out.append(nm)
        return out

    def _repo_value_q(self, rng) -> str:
        """A repository value question's template: version 9 draws half from REPO_VALUE_QS_V9."""
        if self.version >= 16:
            r = rng.random()
            if r < 1 / 3:
                return REPO_VALUE_Q
            if r < 2 / 3:
                return REPO_VALUE_QS_V9[int(rng.integers(len(REPO_VALUE_QS_V9)))]
            qs = repo_value_qs_v16(self.fam)
            return qs[int(rng.integers(len(qs)))]
        if self.version >= 9 and rng.random() < 0.5:
            return REPO_VALUE_QS_V9[int(rng.integers(len(REPO_VALUE_QS_V9)))]
        return REPO_VALUE_Q

    def _near_number(self, rng, v: str) -> str:
        """A near-miss constant's value: often a round number, as in real code, never v."""
        while True:
            x = str(int(rng.choice([10, 30, 60, 100, 128, 256, 1000, 1024, 3600, 4096]))) if rng.random() < 0.4 \
                else self._number(rng, int(rng.integers(2, 8)))
            if x != v:
                return x

    @staticmethod
    def _number(rng, digits: int) -> str:
        return str(int(rng.integers(10 ** (digits - 1), 10**digits)))

    def _doc_slice(self, rng, idx: int, max_chars: int) -> str:
        """A piece of document idx starting at a line boundary, at most max_chars long."""
        text = self.corpus.docs[idx]["text"]
        if len(text) <= max_chars:
            return text
        start = int(rng.integers(0, len(text) - max_chars))
        nl = text.find("\n", start)
        start = nl + 1 if 0 <= nl < start + 2000 else start
        piece = text[start : start + max_chars]
        cut = piece.rfind("\n")
        return piece[:cut] if cut > max_chars // 2 else piece

    def _path_root(self, rng) -> str:
        """Version 14: the folder an archive's paths sit under, one per sample (half have none).
        Up to version 13 every path was the corpus's own (`include/...`, `Lib/...`, `man/...`,
        `doc/...`), and "which file" over longhaul niah's haystack (`0000-code/include/...`)
        answered `include0x010, ...`: 0 of 44 at 64K. Real archives unpack under a project folder,
        so paths must be copied whole from the document header, whatever folder they start with.
        The shapes are a project's (name, name-version, name-branch, src/...); none is the NIAH
        haystack's number-first `NNNN-code/`, so which-file stays a held-out measure."""
        if self.version < 14 or rng.random() < 0.5:
            return ""
        w = [self._key(rng), self._key(rng)]
        n = [str(int(rng.integers(0, 20))) for _ in range(3)]
        shape = int(rng.integers(8))
        return (w[0] + "/", w[0] + "-" + ".".join(n) + "/", w[0] + "-" + w[1] + "/", "src/", w[0] + "/src/",
                w[0] + "-" + ("main", "master", "trunk", "dev")[int(rng.integers(4))] + "/", "./" + w[0] + "/",
                w[0] + "_" + w[1] + "/" + w[1] + "/")[shape]

    def _pieces(self, rng, budget_tokens: int, pool=None):
        """Random document pieces totalling about budget_tokens tokens: list of (path, text)."""
        pool = pool if pool is not None else range(len(self.corpus.docs))
        pool = list(pool) if not isinstance(pool, range) else pool
        root = self._path_root(rng)
        out, total = [], 0
        while total < budget_tokens:
            idx = pool[int(rng.integers(len(pool)))]
            want = min(budget_tokens - total + 64, int(rng.choice([600, 2000, 6000, 20000])))
            text = self._doc_slice(rng, idx, max(200, int(want * self.chars_per_token)))
            n = self._ntok(text)
            if total + n > budget_tokens:
                enc = self.tok.encode(text, add_special_tokens=False)
                keep = max(0, budget_tokens - total)
                if keep < 16:
                    break
                end = enc.offsets[keep - 1][1]
                cut = text.rfind("\n", 0, end)
                text = text[: cut if cut > end // 2 else end]
                n = self._ntok(text)
            out.append((root + self.corpus.docs[idx]["path"], text))
            total += n + 12
        return out

    @staticmethod
    def _insert_lines(rng, text: str, lines, depths):
        """Insert each line at the line boundary nearest its depth (fraction of text)."""
        pos = []
        for d in depths:
            p = int(d * len(text))
            if p <= 0:
                pos.append(0)
                continue
            if p >= len(text):
                pos.append(len(text))
                continue
            nl = text.rfind("\n", 0, p)
            pos.append(nl + 1 if nl >= 0 else 0)
        order = sorted(range(len(lines)), key=lambda i: pos[i])
        out, last = [], 0
        for i in order:
            out.append(text[last : pos[i]])
            if pos[i] == len(text) and text and not text.endswith("\n"):
                out.append("\n")
            out.append(lines[i] + "\n")
            last = pos[i]
        out.append(text[last:])
        return "".join(out), order

    def _haystack(self, rng, budget: int, style: str):
        pieces = self._pieces(rng, budget)
        if style == "raw":
            return "\n\n".join(t for _, t in pieces) + "\n"
        return "".join(frame(p, t) for p, t in pieces)

    # ---- chat assembly -----------------------------------------------------------------

    def _chat(self, rng, haystack: str, question: str, answer: str, layout: str, more=()):
        """Token ids of the chat and the [start, end) spans of its answers (answer + <end_of_sentence>).

        `more` holds further (question, answer) turns about the same haystack; each answer is a span."""
        system = ""
        if rng.random() < 0.25:
            system = ROLE_SYSTEM + SYSTEM_PROMPTS[int(rng.integers(len(SYSTEM_PROMPTS)))] + EOS + "\n"
        if layout == "prefix":
            prompt = haystack + system + ROLE_USER + question + EOS + "\n" + ROLE_AI
        else:
            sep = "" if haystack.endswith("\n") else "\n"
            prompt = system + ROLE_USER + haystack + sep + question + EOS + "\n" + ROLE_AI
        ids = self.tok.encode(prompt, add_special_tokens=False).ids
        spans = []
        turns = [(None, answer)] + list(more)
        for i, (q, a) in enumerate(turns):
            if q is not None:
                ids += self.tok.encode("\n" + ROLE_USER + q + EOS + "\n" + ROLE_AI, add_special_tokens=False).ids
            a_ids = self.tok.encode(a, add_special_tokens=False).ids + [self.eos_id]
            spans.append((len(ids), len(ids) + len(a_ids)))
            ids += a_ids
        return ids, spans

    def _pack(self, ids, spans, answer, task, depth):
        return {"ids": ids, "spans": spans, "answer_start": spans[0][0], "answer_end": spans[0][1],
                "answer": answer, "task": task, "depth": depth}

    # ---- tasks -------------------------------------------------------------------------

    def sample(self, rng, task: str, length: int, depth: float | None = None, layout: str | None = None,
               style: str | None = None, phrasing: str = "train", n_needles: int | None = None,
               extra_turns: int = 0, distractors: int = 0, mv_values: tuple = (1, 5)):
        """One sample of about `length` tokens: dict(ids, spans, answer_start, answer_end, answer, task, depth).

        extra_turns > 0 (multikey and repo tasks) asks about further planted facts in later turns.
        distractors > 0 (magic task) adds hard negatives: magic-number lines for other keys, in
        the target's phrasing or another training phrasing, at random depths; only the target's
        key is asked about; for repo_value, repo_file and repo_dense (version 7) it plants that
        many grammar facts in the archive's files. mv_values: (lo, hi) of each key's value count in multivalue_dense, as
        rng.integers(lo, hi)."""
        layout = layout or ("prefix" if rng.random() < 0.2 else "inturn")
        style = style or ("raw" if rng.random() < 0.4 else "framed")
        magic = EVAL_MAGIC if phrasing == "eval" else TRAIN_MAGIC_V4 if phrasing == "train4" else TRAIN_MAGIC
        overhead = 60
        if task in ("repo_value", "repo_file"):
            return self._repo(rng, task, length, depth, layout, extra_turns, distractors)
        if task == "repo_dense":
            return self._repo_dense(rng, length, layout, distractors)
        if task in GRAMMAR_TASKS:
            return self._grammar_task(rng, task, length, depth, layout, style, n_needles, extra_turns,
                                      distractors)
        budget = max(32, length - overhead)
        if task == "passkey":
            tmpl = (EVAL_PASSKEY if phrasing == "eval" else TRAIN_PASSKEY)
            needle, q = tmpl[int(rng.integers(len(tmpl)))]
            v = self._number(rng, 5)
            lines, question, answer = [needle.format(v=v)], q, v
        elif task == "magic":
            needle, q = magic[int(rng.integers(len(magic)))]
            k, v = self._key(rng), self._number(rng, 7)
            lines, question, answer = [needle.format(k=k, v=v)], q.format(k=k), v
            if distractors:
                d = float(rng.random()) if depth is None else depth
                keys = self._keys(rng, distractors + 1, [k])
                for kk in keys[1:]:
                    nd = needle if rng.random() < 0.5 else magic[int(rng.integers(len(magic)))][0]
                    lines.append(nd.format(k=kk, v=self._number(rng, 7)))
                depths = [d] + [float(rng.random()) for _ in keys[1:]]
                return self._finish(rng, budget, style, lines, depths, question, answer, layout, task, d)
        elif task in ("multikey", "multikey_dense"):
            if task == "multikey_dense":
                # many keys in a short haystack (one needle per ~40 tokens of budget at most, 4-16),
                # then 2-6 of them asked, one per turn, each answer a loss span
                n = n_needles or int(rng.integers(4, self._dense_cap(budget) + 1))
                extra_turns = min(n, int(rng.integers(2, 7))) - 1
            else:
                n = n_needles or int(rng.integers(2, 5))
            needle, q = magic[int(rng.integers(len(magic)))]
            keys = self._keys(rng, n)
            vals = [self._number(rng, 7) for _ in keys]
            lines = [needle.format(k=k, v=v) for k, v in zip(keys, vals)]
            target = int(rng.integers(n))
            question, answer = q.format(k=keys[target]), vals[target]
            # the target's depth is the requested one; the distractors go anywhere
            depths = [float(rng.random()) for _ in keys]
            if depth is not None:
                depths[target] = depth
            more = []
            if extra_turns:
                rest = [i for i in rng.permutation(n).tolist() if i != target][:extra_turns]
                more = [(q.format(k=keys[i]), vals[i]) for i in rest]
            return self._finish(rng, budget, style, lines, depths, question, answer, layout, task, depth, more)
        elif task == "multivalue":
            n = n_needles or int(rng.integers(2, 4))
            needle, _ = magic[int(rng.integers(len(magic)))]
            qs = self._multivalue_qs(phrasing)
            k = self._key(rng)
            vals = [self._number(rng, 7) for _ in range(n)]
            depths = sorted(float(rng.random()) for _ in range(n))
            lines = [needle.format(k=k, v=v) for v in vals]
            question = qs[int(rng.integers(len(qs)))].format(k=k)
            return self._finish(rng, budget, style, lines, depths, question, ", ".join(vals), layout, task, depth)
        elif task == "multiquery":
            n = n_needles or int(rng.integers(3, 5))
            needle, _ = magic[int(rng.integers(len(magic)))]
            keys = self._keys(rng, n)
            vals = [self._number(rng, 7) for _ in keys]
            lines = [needle.format(k=k, v=v) for k, v in zip(keys, vals)]
            qi = sorted(rng.choice(n, size=2, replace=False).tolist())
            question = MULTI_QUERY_Q.format(k1=keys[qi[0]], k2=keys[qi[1]])
            depths = [float(rng.random()) for _ in keys]
            answer = f"{vals[qi[0]]}, {vals[qi[1]]}"
            return self._finish(rng, budget, style, lines, depths, question, answer, layout, task, depth)
        elif task == "multiquery_dense":
            # 4-16 keys, then 2-4 turns, each asking for two keys not asked before (answer in the
            # question's order)
            n = n_needles or int(rng.integers(4, self._dense_cap(budget) + 1))
            needle, _ = magic[int(rng.integers(len(magic)))]
            keys = self._keys(rng, n)
            vals = [self._number(rng, 7) for _ in keys]
            lines = [needle.format(k=k, v=v) for k, v in zip(keys, vals)]
            depths = [float(rng.random()) for _ in keys]
            order = rng.permutation(n).tolist()
            turns = [(MULTI_QUERY_Q.format(k1=keys[a], k2=keys[b]), f"{vals[a]}, {vals[b]}")
                     for a, b in zip(order[0::2], order[1::2])][: int(rng.integers(2, 5))]
            (question, answer), more = turns[0], turns[1:]
            return self._finish(rng, budget, style, lines, depths, question, answer, layout, task, depth, more)
        elif task == "multivalue_dense":
            # 2-5 keys with mv_values values each (longhaul niah's multivalue plants 4), then 2-4 turns,
            # each asking all the values of one key in document order (the lines are sorted by
            # depth, so their insertion order is their document order)
            needle, _ = magic[int(rng.integers(len(magic)))]
            qs = self._multivalue_qs(phrasing)
            keys = self._keys(rng, int(rng.integers(2, 6)))
            planted = sorted((float(rng.random()), i, self._number(rng, 7))
                             for i in range(len(keys)) for _ in range(int(rng.integers(*mv_values))))
            lines = [needle.format(k=keys[i], v=v) for _, i, v in planted]
            depths = [d for d, _, _ in planted]
            asked = rng.permutation(len(keys)).tolist()[: int(rng.integers(2, 5))]
            turns = [(qs[int(rng.integers(len(qs)))].format(k=keys[i]), ", ".join(v for _, j, v in planted if j == i))
                     for i in asked]
            (question, answer), more = turns[0], turns[1:]
            return self._finish(rng, budget, style, lines, depths, question, answer, layout, task, depth, more)
        else:
            raise ValueError(f"unknown task {task!r}")
        d = float(rng.random()) if depth is None else depth
        return self._finish(rng, budget, style, lines, [d], question, answer, layout, task, d)

    @staticmethod
    def _dense_cap(budget: int) -> int:
        """Most needles a dense sample's haystack holds: one per ~40 tokens of budget, 4 to 16."""
        return max(4, min(16, budget // 40))

    @staticmethod
    def _multivalue_qs(phrasing: str):
        if phrasing == "eval":
            return EVAL_MULTI_VALUE_Q
        return TRAIN_MULTI_VALUE_Q_V4 if phrasing == "train4" else TRAIN_MULTI_VALUE_Q

    def _finish(self, rng, budget, style, lines, depths, question, answer, layout, task, depth, more=()):
        budget -= sum(self._ntok(x) + 1 for x in lines) + sum(self._ntok(q + a) + 12 for q, a in more)
        hay = self._haystack(rng, max(16, budget), style)
        hay, _ = self._insert_lines(rng, hay, lines, depths)
        ids, spans = self._chat(rng, hay, question, answer, layout, more)
        return self._pack(ids, spans, answer, task, depth)

    def _repo(self, rng, task, length, depth, layout, extra_turns=0, distractors=0):
        """A framed repository archive with facts planted in some of its files, and (version 7)
        `distractors` grammar facts in random files."""
        pool = self.corpus.code
        pieces = self._pieces(rng, max(64, length - 80 - 24 * distractors), pool=pool)
        n_plants = min(len(pieces), int(rng.integers(2, 5) if extra_turns else rng.integers(1, 4)))
        # The target file sits at the requested depth (by token position of its piece).
        if depth is None:
            target = int(rng.integers(len(pieces)))
        else:
            target = min(len(pieces) - 1, int(depth * len(pieces)))
        others = [i for i in range(len(pieces)) if i != target]
        rng.shuffle(others)
        planted = [target] + others[: n_plants - 1]
        names, vals = [], []
        for _ in planted:
            nm = self._name(rng)
            while nm in names:
                nm = self._name(rng)
            names.append(nm)
            vals.append(self._number(rng, int(rng.integers(4, 8))))
        new = list(pieces)
        for j, i in enumerate(planted):
            path, text = pieces[i]
            line = plant_line(path, names[j], vals[j])
            d = float(rng.random()) if depth is None else float(rng.random())
            text, _ = self._insert_lines(rng, text, [line], [d])
            new[i] = (path, text)
        if self.version >= 8 and rng.random() < NEAR_MISS_P:
            # near-miss names of the asked one, with other numbers, anywhere in the archive
            for nm in self._near_names(rng, names[0], int(rng.integers(1, 4)), names):
                i = int(rng.integers(len(new)))
                path, text = new[i]
                text, _ = self._insert_lines(rng, text, [plant_line(path, nm, self._near_number(rng, vals[0]))],
                                             [float(rng.random())])
                new[i] = (path, text)
        if distractors:
            new = self._plant_gfacts(rng, new, distractors)
        hay = "".join(frame(p, t) for p, t in new)
        if task == "repo_value":
            question, answer = self._repo_value_q(rng).format(name=names[0]), vals[0]
        else:
            question, answer = REPO_FILE_Q.format(name=names[0]), pieces[target][0]
        more = []
        for j in range(1, len(planted)) if extra_turns else ():
            if rng.random() < 0.5:
                more.append((self._repo_value_q(rng).format(name=names[j]), vals[j]))
            else:
                more.append((REPO_FILE_Q.format(name=names[j]), pieces[planted[j]][0]))
        ids, spans = self._chat(rng, hay, question, answer, layout, more)
        return self._pack(ids, spans, answer, task, depth)

    def _repo_dense(self, rng, length, layout, distractors=0):
        """Version 4's dense repository samples: a small framed archive with 3-10 facts planted in
        its files (a file may hold several), then 2-6 of them asked, value (65%) or file, one per
        turn; version 7 adds `distractors` grammar facts in random files."""
        n, n_turns = int(rng.integers(3, 11)), int(rng.integers(2, 7))
        pieces = self._pieces(rng, max(64, length - 80 - 20 * n_turns - 24 * distractors), pool=self.corpus.code)
        names = []
        if self.version >= 8 and rng.random() < NEAR_MISS_P:
            # version 8: the names are near misses of one another, and each asked one must be told apart
            names = [self._name(rng)]
            names += self._near_names(rng, names[0], int(rng.integers(1, n)), names)
        while len(names) < n:
            nm = self._name(rng)
            if nm not in names:
                names.append(nm)
        vals = [self._number(rng, int(rng.integers(4, 8))) for _ in names]
        where = [int(rng.integers(len(pieces))) for _ in names]
        new = list(pieces)
        for j, i in enumerate(where):
            path, text = new[i]
            text, _ = self._insert_lines(rng, text, [plant_line(path, names[j], vals[j])], [float(rng.random())])
            new[i] = (path, text)
        if distractors:
            new = self._plant_gfacts(rng, new, distractors)
        hay = "".join(frame(p, t) for p, t in new)
        turns = []
        for j in rng.permutation(n).tolist()[:n_turns]:
            if rng.random() < 0.65:
                turns.append((self._repo_value_q(rng).format(name=names[j]), vals[j]))
            else:
                turns.append((REPO_FILE_Q.format(name=names[j]), pieces[where[j]][0]))
        (question, answer), more = turns[0], turns[1:]
        ids, spans = self._chat(rng, hay, question, answer, layout, more)
        return self._pack(ids, spans, answer, "repo_dense", None)


    # ---- version 6: facts from the grammar (grammar.py) ----------------------------------

    def _gfacts(self, rng, n: int, one_needle: bool | None = None, one_kind: bool | None = None):
        """n facts with distinct (key, attribute) pairs: list of dict(key, attr, value, needle).
        After the first, a fact shares the first's key (30%: the attribute decides), its attribute
        (30%: the key decides) or neither. All in one needle template (one_needle) or each its own;
        values of one kind (one_kind) or each its own."""
        fam = self.fam
        one_needle = rng.random() < 0.5 if one_needle is None else one_needle
        one_kind = rng.random() < 0.5 if one_kind is None else one_kind
        needle, kind = fam.needle(rng), fam.pick(rng, fam.kinds)
        out, pairs, values = [], set(), set()
        while len(out) < n:
            r = rng.random()
            if out and r < 0.3:
                key, attr = out[0]["key"], fam.pick(rng, fam.attrs)
            elif out and r < 0.6:
                key, attr = self._key(rng), out[0]["attr"]
            else:
                key, attr = self._key(rng), fam.pick(rng, fam.attrs)
            if (key, attr) in pairs:
                continue
            k = kind if one_kind else fam.pick(rng, fam.kinds)
            v = fam.value(rng, k)
            if v in values:
                continue
            pairs.add((key, attr))
            values.add(v)
            out.append({"key": key, "attr": attr, "value": v, "kind": k,
                        "needle": needle if one_needle else fam.needle(rng)})
        return out

    def _plant_gfacts(self, rng, pieces, n: int):
        """Version 7: n grammar facts, each at a random line of a random piece of an archive
        [(path, text)], as distractors for the repository facts (never asked about)."""
        new = list(pieces)
        for f in self._gfacts(rng, n):
            i = int(rng.integers(len(new)))
            path, text = new[i]
            text, _ = self._insert_lines(rng, text, [self._gline(f)], [float(rng.random())])
            new[i] = (path, text)
        return new

    def _swarm(self, rng, facts):
        """Version 15: one fact of a (key, attribute) pair no fact in `facts` has, sharing the
        asked fact's key (30%) or attribute (30%), in its frame (50%) and value kind (50%),
        written SWARM_REPS times with one value (50%) or a new value each time, never the asked
        value; in the last quarter of the haystack (50%) or anywhere. Returns (lines, depths)."""
        fam, f0 = self.fam, facts[0]
        taken = {(f["key"], f["attr"]) for f in facts}
        while True:
            r = rng.random()
            key = f0["key"] if r < 0.3 else self._key(rng)
            attr = f0["attr"] if 0.3 <= r < 0.6 else fam.pick(rng, fam.attrs)
            if (key, attr) not in taken:
                break
        needle = f0["needle"] if rng.random() < 0.5 else fam.needle(rng)
        kind = f0["kind"] if rng.random() < 0.5 else fam.pick(rng, fam.kinds)
        reps, one_value, recent = int(rng.integers(*SWARM_REPS)), rng.random() < 0.5, rng.random() < 0.5
        values = []
        for i in range(reps):
            v = values[0] if one_value and values else fam.value(rng, kind)
            while v == f0["value"]:
                v = fam.value(rng, kind)
            values.append(v)
        depths = [float(rng.uniform(0.75, 1.0)) if recent else float(rng.random()) for _ in values]
        return [fam.line(needle, key, attr, v) for v in values], depths

    def _gline(self, f) -> str:
        return self.fam.line(f["needle"], f["key"], f["attr"], f["value"])

    def _gask(self, rng, f, pool=None) -> str:
        q = self.fam.question(rng, f["needle"], pool)
        f["question"] = q["text"]
        return self.fam.ask(q, f["needle"], f["key"], f["attr"])

    @staticmethod
    def _family(sample, f):
        """Which families a sample's first question is from (eval.py reports by them)."""
        sample["family"] = {"needle": f["needle"]["text"], "needle_kind": f["needle"]["kind"],
                            "question": f.get("question"), "value_kind": f["kind"]["name"], "attr": f["attr"]}
        return sample

    def _grammar_task(self, rng, task, length, depth, layout, style, n_needles, extra_turns, distractors):
        """Version 6's grammar tasks: fact (one fact, `distractors` others: grammar facts that share
        its key or attribute, and trained magic-number lines), fact_multikey, fact_mv (one key and
        attribute planted 2-5 times), fact_file ("which file", framed code archive), and the dense
        forms fact_dense, fact_mv_dense, file_dense (short samples, several questions each)."""
        budget = max(32, length - 60)
        magic = TRAIN_MAGIC_V4
        if task == "fact":
            facts = self._gfacts(rng, 1 + distractors)
            lines = [self._gline(f) for f in facts]
            d = float(rng.random()) if depth is None else depth
            depths = [d] + [float(rng.random()) for _ in facts[1:]]
            if distractors and not self.held_out and rng.random() < 0.3:
                needle, _ = magic[int(rng.integers(len(magic)))]
                lines.append(needle.format(k=self._key(rng), v=self._number(rng, 7)))
                depths.append(float(rng.random()))
            q = self._gask(rng, facts[0])
            if self.version >= 15 and not self.held_out and length >= SWARM_MIN_LEN and rng.random() < SWARM_P:
                swarm, where = self._swarm(rng, facts)
                lines, depths = lines + swarm, depths + where
            return self._family(self._finish(rng, budget, style, lines, depths, q, facts[0]["value"], layout, task, d),
                                facts[0])
        if task in ("fact_multikey", "fact_dense"):
            if task == "fact_dense":
                n = n_needles or int(rng.integers(4, max(4, min(16, budget // 60)) + 1))
                extra_turns = min(n, int(rng.integers(2, 7))) - 1
            else:
                n = n_needles or int(rng.integers(max(2, extra_turns + 1), max(2, extra_turns + 1) + 4))
            facts = self._gfacts(rng, n)
            lines = [self._gline(f) for f in facts]
            target = int(rng.integers(n))
            depths = [float(rng.random()) for _ in facts]
            if depth is not None:
                depths[target] = depth
            rest = [i for i in rng.permutation(n).tolist() if i != target][:extra_turns]
            more = [(self._gask(rng, facts[i]), facts[i]["value"]) for i in rest]
            q = self._gask(rng, facts[target])
            return self._family(self._finish(rng, budget, style, lines, depths, q, facts[target]["value"], layout,
                                             task, depth, more), facts[target])
        if task in ("fact_mv", "fact_mv_dense"):
            # keys (with attributes) planted 2-5 times each, in one template per key; fact_mv asks
            # one of 1-3 such keys, fact_mv_dense 2-4 keys in turn; answers in document order
            n_keys = int(rng.integers(2, 5)) if task == "fact_mv_dense" else int(rng.integers(1, 4))
            base = self._gfacts(rng, n_keys)
            nv = n_needles
            planted = []  # (depth, key index, value)
            used = {f["value"] for f in base}
            for i, f in enumerate(base):
                for j in range(nv or int(rng.integers(2, 6))):
                    v = f["value"] if j == 0 else self.fam.value(rng, f["kind"])
                    while j and v in used:
                        v = self.fam.value(rng, f["kind"])
                    used.add(v)
                    planted.append((float(rng.random()), i, v))
            planted.sort()
            lines = [self.fam.line(base[i]["needle"], base[i]["key"], base[i]["attr"], v) for _, i, v in planted]
            depths = [d for d, _, _ in planted]
            asked = rng.permutation(n_keys).tolist()[: (int(rng.integers(2, 5)) if task == "fact_mv_dense" else 1)]
            turns = [(self._gask(rng, base[i], self.fam.mv_questions), ", ".join(v for _, j, v in planted if j == i))
                     for i in asked]
            (question, answer), more = turns[0], turns[1:]
            return self._family(self._finish(rng, budget, style, lines, depths, question, answer, layout, task, depth,
                                             more), base[asked[0]])
        if task in ("fact_file", "file_dense"):
            return self._gfile(rng, task, length, depth, layout, extra_turns)
        raise ValueError(f"unknown task {task!r}")

    def _gfile(self, rng, task, length, depth, layout, extra_turns):
        """A framed archive with grammar facts planted in some of its files, asked "which file"
        (file questions) or the value. fact_file: code pieces as in _repo; file_dense: 4-12 small
        files of 30-250 tokens, 3-10 facts, 2-6 questions (file 70%)."""
        if task == "file_dense":
            n_files = int(rng.integers(4, 13))
            per = max(30, min(250, (length - 80) // n_files - 40))
            pieces, root = [], self._path_root(rng)
            for _ in range(n_files):
                idx = self.corpus.code[int(rng.integers(len(self.corpus.code)))]
                pieces.append((root + self.corpus.docs[idx]["path"],
                               self._doc_slice(rng, idx, int(per * self.chars_per_token))))
            n_facts = int(rng.integers(3, 11))
            n_turns = int(rng.integers(2, 7))
        else:
            pieces = self._pieces(rng, max(64, length - 80), pool=self.corpus.code)
            n_facts = min(len(pieces), int(rng.integers(2, 5) if extra_turns else rng.integers(1, 4)))
            n_turns = 1 + extra_turns
        # one path may occur twice in an archive: ask "which file" only about unique paths
        paths = [p for p, _ in pieces]
        facts = self._gfacts(rng, n_facts)
        if task == "file_dense":
            where = [int(rng.integers(len(pieces))) for _ in facts]
        else:
            target = int(rng.integers(len(pieces))) if depth is None else min(len(pieces) - 1, int(depth * len(pieces)))
            others = [i for i in range(len(pieces)) if i != target]
            rng.shuffle(others)
            where = [target] + others[: n_facts - 1]
        new = list(pieces)
        for f, i in zip(facts, where):
            path, text = new[i]
            text, _ = self._insert_lines(rng, text, [self._gline(f)], [float(rng.random())])
            new[i] = (path, text)
        hay = "".join(frame(p, t) for p, t in new)
        turns = []
        order = list(range(n_facts)) if task == "fact_file" else rng.permutation(n_facts).tolist()
        first = facts[order[0]]
        for j in order[:n_turns]:
            f = facts[j]
            file_q = paths.count(paths[where[j]]) == 1 and rng.random() < (0.7 if task == "file_dense" else 0.5)
            if (task == "fact_file" and j == 0 and paths.count(paths[where[0]]) == 1) or file_q:
                turns.append((self._gask(rng, f, self.fam.file_questions), paths[where[j]]))
            else:
                turns.append((self._gask(rng, f), f["value"]))
        (question, answer), more = turns[0], turns[1:]
        ids, spans = self._chat(rng, hay, question, answer, layout, more)
        return self._family(self._pack(ids, spans, answer, task, depth), first)

def plant_line(path: str, name: str, v: str) -> str:
    """How a repository fact is written into a file, by the file's kind."""
    if path.endswith((".h", ".c")):
        return PLANT_C.format(name=name, v=v)
    if path.endswith(".py"):
        return PLANT_PY.format(name=name, v=v)
    return PLANT_PROSE.format(name=name, v=v)


# ---- curriculum and batches -------------------------------------------------------------

CURRICULA = {
    1: [(0.08, 1024), (0.22, 2048), (0.42, 4096), (0.65, 8192), (1.01, 16384)],
    2: [(0.08, 1024), (0.22, 2048), (0.42, 4096), (0.60, 8192), (0.80, 16384), (1.01, 32768)],
    3: [(0.08, 1024), (0.22, 2048), (0.42, 4096), (0.60, 8192), (0.80, 16384), (1.01, 32768)],  # long steps
    # version 4 adds a 64K stage at the end, used only with max_len 65536 (--replan-max-len 65536);
    # with max_len 32768 it is version 3's schedule
    4: [(0.08, 1024), (0.22, 2048), (0.42, 4096), (0.60, 8192), (0.80, 16384), (0.90, 32768), (1.01, 65536)],
}
CURRICULA[5] = CURRICULA[4]
CURRICULA[6] = CURRICULA[4]
CURRICULA[7] = CURRICULA[4]
CURRICULA[8] = CURRICULA[4]
CURRICULA[9] = CURRICULA[4]
CURRICULA[10] = CURRICULA[4]
CURRICULA[11] = CURRICULA[4]
CURRICULA[12] = CURRICULA[4]
# version 13: after phase 1 (progress 1.0) the longest sample is max_len itself
CURRICULA[13] = CURRICULA[4][:-1] + [(1.0, 65536), (1.01, 1 << 30)]
CURRICULA[14] = CURRICULA[12]
CURRICULA[15] = CURRICULA[14]
CURRICULA[16] = CURRICULA[15]


def curriculum_max_len(progress: float, max_len: int, version: int = 1) -> int:
    """Longest sample length at a point of training (progress in [0, 1]), capped at max_len."""
    stages = CURRICULA[version]
    for edge, n in stages:
        if progress < edge:
            return min(n, max_len)
    return max_len


def batch_for_step(gen: Generator, seed: int, step: int, progress: float, tokens_per_step: int, max_len: int,
                   version: int = 1):
    """The batch of one training step: a pure function of (seed, step, progress, version)."""
    rng = np.random.default_rng([seed, step])
    gen.use_grammar(version)
    if version >= 3 and rng.random() < DENSE_STEP_P:
        return dense_batch(gen, rng, tokens_per_step, max_len, version)
    top = curriculum_max_len(progress, max_len, version)
    mix = np.array(MIXES[version])
    # the task probabilities exactly as each version ran (python sum for 1, numpy sum for 2)
    p_task = mix / (sum(MIXES[version]) if version == 1 else mix.sum())
    tasks = TASKS_V6 if version >= 6 else TASKS_V3 if version >= 3 else TASKS
    phrasing = "train4" if version >= 4 else "train"
    if rng.random() < 0.5:
        length = top
    else:
        length = int(math.exp(rng.uniform(math.log(256), math.log(top))))
    bsz = max(1, tokens_per_step // length)
    samples = []
    for _ in range(bsz):
        task = tasks[int(rng.choice(len(tasks), p=p_task))]
        extra = 0
        # Long haystacks are expensive: ask several questions about them (more answer tokens per token).
        if length >= 2048 and task in ("multikey", "repo_value", "repo_file", "fact_multikey", "fact_file") \
                and rng.random() < 0.7:
            extra = int(rng.integers(1, 4))
        n = int(rng.integers(extra + 1, extra + 4)) if task == "multikey" and extra else None
        if version == 5 and task == "multivalue":
            n = int(rng.integers(*MV_LONG_VALUES))
        dis = 0
        if version >= 2 and task in ("magic", "fact") and rng.random() < HARD_NEG_P:
            dis = int(rng.integers(1, 5))
            if version >= 15 and task == "fact" and length >= SWARM_MIN_LEN:
                dis += int(rng.integers(0, min(12, length // 2048) + 1))
        elif version >= 7 and task in ("repo_value", "repo_file") and rng.random() < REPO_GRAMMAR_P:
            dis = int(rng.integers(1, 4))
        samples.append(gen.sample(rng, task, length, n_needles=n, extra_turns=extra, distractors=dis,
                                  phrasing=phrasing))
    return samples, length


def dense_batch(gen: Generator, rng, tokens_per_step: int, max_len: int, version: int = 3):
    """Dense steps (version 3 on): short samples (DENSE_LEN), mostly many facts with several
    questions, drawn from DENSE_MIXES[version]."""
    lo, hi = DENSE_LEN[0], min(DENSE_LEN[1], max_len)
    length = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    mix = DENSE_MIXES[version]
    mv = MV_VALUES.get(version, MV_VALUES[4])
    phrasing = "train4" if version >= 4 else "train"
    names = list(mix)
    p = np.array([mix[k] for k in names])
    p = p / p.sum()
    samples = []
    for _ in range(max(1, tokens_per_step // length)):
        task = names[int(rng.choice(len(names), p=p))]
        dis = int(rng.integers(1, 5)) if task == "magic" else 0
        if version >= 7 and task == "repo_dense" and rng.random() < REPO_DENSE_GRAMMAR_P:
            dis = int(rng.integers(1, 4))
        n = int(rng.integers(2, 5)) if task == "multikey" else None
        samples.append(gen.sample(rng, task, length, n_needles=n, distractors=dis, phrasing=phrasing,
                                  mv_values=mv))
    return samples, length
