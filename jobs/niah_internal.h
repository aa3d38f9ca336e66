/* niah_internal.h — what the files of a NIAH sweep share: jobs/niah.c runs the sweep,
 * jobs/niah_trial.c builds each trial's needles and prompt, jobs/niah_families.c reads a families
 * file (the grammar a trial's fact is drawn from), jobs/niah_report.c scores answers, keeps
 * results.jsonl and writes the reports. Not a public interface (see niah.h).
 */
#ifndef LH_JOBS_NIAH_INTERNAL_H
#define LH_JOBS_NIAH_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "jobs/chat.h"
#include "jobs/niah.h"
#include "pipeline/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "util/buf.h"
#include "util/err.h"

struct cJSON;
typedef struct lh_niah__families lh_niah__families;

#define LH_NIAH__VALUE_MAX 128 /* bytes of a value, with its NUL */

typedef struct trial {
  int64_t length;
  double depth;
  int index;           /* trial number within the cell */
  int64_t hay_len;     /* haystack tokens in the prompt */
  int64_t pos[16];     /* needle positions in haystack coordinates, ascending; pos[0] the first */
  int n_needles;
  char keys[16][48];
  char values[16][LH_NIAH__VALUE_MAX];
  lh_buf needle_text[16];
  char question[512];
  char expected[2048];
  int n_expected;      /* values that must all appear */
  char expected_vals[16][256];
  int done;            /* already in results.jsonl */
  /* with a families file: the needle template of each needle (index in the file's needles), in
   * text order like the rest; -1 without one */
  int fam_needle[16];
  int fam_kind[16];    /* the value kind of each needle's value */
  lh_buf family;       /* the trial's draws as a JSON object (results.jsonl's "family"); empty without */
} trial;

typedef struct sweep {
  const lh_niah_params *p;
  lh_model *model;
  const lh_config *cfg;
  lh_tokenizer *tok;
  lh_chat_format chat;
  lh_i32vec H;         /* the haystack stream (repeated corpus) */
  int64_t corpus_tokens;
  lh_i32vec head, tail_base; /* chat head; tail is per trial */
  unsigned char *line_end; /* [H.len] 1 when token i's text ends with "\n"; 2 = unknown */
  int32_t stop_ids[4];
  int n_stop;
  char model_name[256];
  lh_plan plan;        /* chunk boundaries for the main prefix and every trial; a checkpoint a chunk */
  trial *T;            /* [nt] every trial of the sweep */
  trial **order;       /* [nt] the same, by first needle position */
  int nt;
  lh_i32vec main;      /* the main sequence: head + H up to the last unfinished trial's fork point */
  lh_niah__families *fam; /* p->families read, or NULL */
  int64_t *doc_start;  /* [n_docs] first token of each document of one copy of the corpus, ascending */
  int n_docs;
} sweep;


/* ---- trials (niah_trial.c) ---- */

/* The needle and question templates a sweep uses when none is given (RULER's). */
const char *lh_niah__default_needle(void);
const char *lh_niah__default_question(lh_niah_variant v);
/* How many built-in keys there are (a sweep's keys without a families file, or with one that has
 * none). */
int lh_niah__builtin_keys(void);
/* The needles of each trial of p's variant (1 for single and whichfile). */
int lh_niah__needles(const lh_niah_params *p);
/* Build trial t's needles, question and haystack geometry from (seed, length, depth, index): a
 * pure function of them, the corpus, the tokenizer and the families file (niah.c invariant 1). */
lh_status lh_niah__make_trial(sweep *S, trial *t, lh_error *err);
/* The whole prompt of trial t (head, haystack with needles, question, generation prompt). */
lh_status lh_niah__trial_tokens(sweep *S, const trial *t, lh_i32vec *out, int64_t *total, lh_error *err);

/* ---- families files (niah_families.c) ----
 *
 * A families file (tools/train_tiny/heldout_families.json and its README say the format) is a
 * grammar of facts: needle templates of many kinds of text, question templates, value kinds,
 * attributes and keys. A trial draws one of each and renders them as tools/train_tiny/grammar.py
 * does (tests/jobs/test_niah_families.c holds the two to the same outputs). */

typedef enum lh_niah__id_style {
  LH_NIAH__ID_NONE = -1,
  LH_NIAH__ID_SNAKE,  /* lighthouse_port_number */
  LH_NIAH__ID_UPPER,  /* LIGHTHOUSE_PORT_NUMBER */
  LH_NIAH__ID_CAMEL,  /* lighthousePortNumber */
  LH_NIAH__ID_PASCAL, /* LighthousePortNumber */
  LH_NIAH__ID_DOTTED, /* lighthouse.port_number */
  LH_NIAH__ID_KEBAB,  /* lighthouse-port-number */
  LH_NIAH__ID_COUNT
} lh_niah__id_style;

/* A needle or question template. Strings live as long as the families handle. */
typedef struct lh_niah__template {
  const char *text;
  const char *kind;    /* needles: the kind of text ("json"); questions: "" */
  int id_style;        /* needles: an lh_niah__id_style (LH_NIAH__ID_NONE without {id}) */
  int needs_id;        /* questions: asks with {id}, so only about needles with an id style */
} lh_niah__template;

typedef struct lh_niah__value_kind {
  const char *name;
  const char **patterns;
  int n_patterns;
} lh_niah__value_kind;

/* The question sets of a families file. */
enum { LH_NIAH__Q_SINGLE, LH_NIAH__Q_MULTI_VALUE, LH_NIAH__Q_FILE, LH_NIAH__Q_COUNT };

struct lh_niah__families {
  char sha256[65];     /* of the file's bytes: part of a sweep's key */
  lh_niah__template *needles;
  int n_needles;
  lh_niah__template *questions[LH_NIAH__Q_COUNT];
  int n_questions[LH_NIAH__Q_COUNT];
  lh_niah__value_kind *kinds;
  int n_kinds;
  const char **attrs, **words, **keys; /* keys: empty when the file has none */
  int n_attrs, n_words, n_keys;
  struct cJSON *root;  /* the strings above point into it */
};

/* Read and check a families file: every field the format names, each template's placeholders
 * against its id_style or needs_id, each pattern's fields and longest value (under
 * LH_NIAH__VALUE_MAX). LH_EFORMAT names the file, and the line or field (needles[3].id_style). */
lh_status lh_niah__families_load(const char *path, lh_niah__families **out, lh_error *err);
void lh_niah__families_free(lh_niah__families *f); /* accepts NULL */
const char *lh_niah__id_style_name(int style);    /* "snake", ...; NULL for none */
int lh_niah__id_style_parse(const char *s);       /* -1 when unknown */
/* {id}: the key word, then the attribute's words, lower-cased (ASCII) and joined in style. */
lh_status lh_niah__render_id(lh_buf *out, const char *key, const char *attr, int style);
/* Replace {key}, {Key}, {attr}, {id} (in id_style) and {value} in tpl, appending to out; every
 * other character is literal. LH_EINVAL for {id} without an id style. */
lh_status lh_niah__render(lh_buf *out, const char *tpl, const char *key, const char *attr, const char *value,
                          int id_style);
/* One value of pattern (fields {d} {D} {x} {X} {a} {A} {w}, each with an optional count), drawn
 * from *rng, appended to out. */
lh_status lh_niah__expand_value(lh_buf *out, const char *pattern, const char *const *words, int n_words,
                                uint64_t *rng);
/* Whether question q may be asked about needle n (needs_id only with an id style). */
static inline int lh_niah__fits(const lh_niah__template *q, const lh_niah__template *n) {
  return !q->needs_id || n->id_style >= 0;
}
/* Whether F can make trials of variant v with n needles from n_keys keys (F's own when it has
 * them; otherwise the caller's count): the variant's question set is not empty and some needle
 * fits one of its questions, multikey has n different keys. LH_EINVAL names the file (path), what
 * is missing and what to do instead. */
lh_status lh_niah__families_check(const lh_niah__families *F, const char *path, lh_niah_variant v, int n,
                                  int n_keys, lh_error *err);
/* Draw trial t's facts from F with *rng (the draws depend on nothing else, so a trial is a
 * pure function of its seed): t->n_needles = n facts, each key, value, rendered needle
 * line (with its "\n"), fam_needle and fam_kind; the question; the expected answer
 * and values (single and multikey: the asked value; multivalue: n_expected only, the caller lists
 * the values once they are in text order; whichfile: n_expected only, the caller writes the
 * document's path) and the family JSON. The asked fact is t's first. keys: F's when it has them,
 * else keys[0:n_keys]. F must have passed lh_niah__families_check for v and n. */
lh_status lh_niah__families_draw(const lh_niah__families *F, lh_niah_variant v, int n, const char *const *keys,
                                 int n_keys, uint64_t *rng, trial *t, lh_error *err);
/* The accuracy of OUT/results.jsonl's trials by their family's needle kind and value kind, as
 * {"by_needle_kind": {kind: {"trials", "accuracy"}}, "by_value_kind": {...}} for summary.json;
 * NULL when no trial has a family. sum (may be NULL) gets the same groups, sorted by name. */
struct cJSON *lh_niah__family_breakdown(const char *out_dir, lh_niah_summary *sum);

/* ---- results and reports (niah_report.c) ---- */

/* The finished trials of results.jsonl (a torn last line is dropped). */
typedef struct lh_niah__done {
  int64_t length;
  double depth;
  int trial;
} lh_niah__done;
lh_status lh_niah__read_done(const char *results_path, lh_niah__done **out, int *n, lh_error *err);
int lh_niah__is_done(const lh_niah__done *d, int n, const trial *t);

/* What one trial measured, beside its answer. */
typedef struct lh_niah__measure {
  int64_t tokens;          /* the prompt */
  int64_t needle_token;    /* the first needle's position in the prompt */
  int64_t tokens_computed; /* prefilled or decoded for this trial by this sweep */
  double seconds;
  const int32_t *answer_ids; /* the answer's token ids (the exact bytes, where the text had to be repaired) */
  size_t n_answer_ids;
} lh_niah__measure;
/* Score answer against t (RULER's string_match_all, contains, exact) and append its line to
 * results.jsonl (rf, named path), flushed to disk before returning (niah.c invariant 4). *found
 * says whether every expected value was in the answer; the stripped answer goes to note (for the
 * progress line; size n). */
lh_status lh_niah__record(FILE *rf, const char *path, const trial *t, lh_niah_variant v, const char *answer,
                          const lh_niah__measure *m, int *found, char *note, size_t n, lh_error *err);
/* Claim p->out_dir for this sweep before it runs: sweep_json is this run's sweep.json (title, key,
 * device, chunk); the grid (lengths, depths, trials per cell) is added here. An earlier sweep there
 * must have the same key and grid, or, with p->extend, the same key and a grid this run's holds;
 * otherwise LH_EINVAL names what differs and the ways out (another --out, --force, --extend).
 * p->force discards the earlier results and reports first (and says so). Writes OUT/sweep.json;
 * title gets the earlier sweep's title when it goes on. */
lh_status lh_niah__claim_out(const lh_niah_params *p, const char *sweep_json, char *title, size_t title_n,
                             lh_error *err);

/* results.csv, summary.json and the heatmap from results.jsonl; sum (may be NULL) gets the totals. */
lh_status lh_niah__write_reports(const char *out_dir, const char *title, lh_niah_summary *sum, lh_error *err);

#endif
