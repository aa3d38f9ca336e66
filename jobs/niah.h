/* niah.h — needle-in-a-haystack sweeps: lengths x depths x trials, RULER's variants, prefix reuse
 * through the store, results as CSV/JSONL/summary and the heatmap (jobs/niah_plot.h).
 *
 * A trial's prompt, in the model's chat format (a user turn, then the generation prompt):
 *
 *     <user turn head> H[0:p] NEEDLE H[p:h] (more needles after p, for the multi variants)
 *     QUESTION <end of turn> <assistant head>
 *
 * H is one token stream for the whole sweep: the corpus ingested and framed as documents (the
 * built-in corpus is examples/niah/haystack.tar.xz), repeated when a length needs more. p is the
 * depth's share of the haystack part, moved back to the nearest line start; h makes the prompt
 * `length` tokens long. So every trial's prompt up to its first needle is a prefix of the same
 * stream: one "main" state walks along it, checkpointed into the store at every chunk boundary,
 * and each trial forks from the main state at the last chunk boundary before its needle and
 * computes only the rest. A killed sweep reloads its finished trials from results.jsonl and the
 * main state from the store.
 *
 * Families (p->families): each trial draws, from (seed, length, depth, trial) alone, a needle
 * template, a question template that fits it (one asking with {id} only about a needle that writes
 * an {id}), a value kind and a value, an attribute and a key (the file's keys, else the built-in
 * held-out ones), and renders them as tools/train_tiny/grammar.py does. By variant: single, one
 * fact; multikey, the asked fact first and n_needles-1 facts of other keys with the same attribute
 * (each its own template and value kind) after it; multivalue, one key and attribute planted
 * n_needles times in one template with different values of one kind, the expected answer being
 * the values in text order joined by ", "; whichfile, one fact planted inside one document of the
 * framed haystack, the expected answer being that document's path as its header writes it.
 * results.jsonl's "family" says what was drawn, and summary.json breaks accuracy down by needle
 * kind and value kind. The file's SHA-256 is part of the sweep's key.
 *
 * Scoring (per trial): exact = the answer, stripped of surrounding space and a final period,
 * equals the expected text; contains = every expected value occurs in the answer (RULER's
 * recall metric); score = contains, which is what the heatmap shows.
 */
#ifndef LH_JOBS_NIAH_H
#define LH_JOBS_NIAH_H

#include <stdint.h>

#include "jobs/progress.h"
#include "util/err.h"

typedef enum lh_niah_variant {
  LH_NIAH_SINGLE = 0,  /* one needle, one question */
  LH_NIAH_MULTIKEY,    /* one needle asked for, n_needles-1 needles with other keys as distractors */
  LH_NIAH_MULTIVALUE,  /* n_needles needles with the same key and different values; all are asked for */
  LH_NIAH_MULTIQUERY,  /* n_needles needles with different keys; all are asked for */
  LH_NIAH_WHICHFILE,   /* one needle inside one document of the haystack; its path is asked for
                          (with a families file only) */
  LH_NIAH_VARIANT_COUNT
} lh_niah_variant;

const char *lh_niah_variant_name(lh_niah_variant v);
int lh_niah_variant_parse(const char *s); /* -1 when unknown */

#define LH_NIAH_MAX_CELLS 64
#define LH_NIAH_MAX_TRIALS 65536 /* lengths x depths x trials of one sweep (10 KB each) */
#define LH_NIAH_MAX_LENGTH (INT64_C(1) << 40) /* tokens; a model's context is checked later */

typedef struct lh_niah_params {
  const char *model_dir;
  const char *out_dir;
  const char *corpus;     /* any ingest input; NULL: the built-in haystack */
  const char *db_path;    /* NULL: OUT/niah.db */
  const char *device;     /* "cpu" or "cuda" */
  int threads;
  int cpu_attention;      /* lh_cpu_attention (default fp32) */
  int64_t lengths[LH_NIAH_MAX_CELLS];
  int n_lengths;
  double depths[LH_NIAH_MAX_CELLS];
  int n_depths;
  const char *needle;     /* templates with {key} and {value}; NULL: RULER's */
  const char *question;   /* for multi-value / multi-query the question names {key} (the first) */
  const char *answer;     /* expected answer template ({value}, {key}); NULL: "{value}" (single, multikey) */
  const char *families;   /* a families file (tools/train_tiny/heldout_families.json's format): each
                             trial draws its needle, question, value kind, attribute and key from it
                             (see "Families" above); excludes needle, question and answer */
  lh_niah_variant variant;
  int n_needles;          /* multi variants (default 4; multi-query 2; at most 16) */
  int trials;             /* per cell (default 1) */
  uint64_t seed;
  int chunk;              /* tokens per chunk (default 4096) */
  int max_tokens;         /* answer length cap (default 128) */
  int force;              /* discard earlier results (and saved prompts) in OUT */
  int extend;             /* grow the sweep in OUT to this grid, which holds its cells (same key) */
  int save_prompts;       /* write each trial's prompt text to OUT/prompts/L<length>-D<depth>-T<trial>.txt */
  int wait;               /* another sweep holds OUT (its niah.lock): wait for it; else LH_EBUSY naming it */
  lh_progress_mode progress;
} lh_niah_params;

lh_niah_params lh_niah_default_params(void);

/* "1k,4k,128k,1m" (k = 1024, m = 1048576; plain numbers as given, rounded; 1 to
 * LH_NIAH_MAX_LENGTH) into lengths; "0:100:10" (at most max depths) or "0,50,100" (each in
 * 0..100) into depths. Return the count, or -1 with a message in err. */
int lh_niah_parse_lengths(const char *s, int64_t *out, int max, lh_error *err);
int lh_niah_parse_depths(const char *s, double *out, int max, lh_error *err);

/* One prompt length of a sweep: its accuracy, and its worst depth cell (the lowest mean score; the
 * shallowest depth among equals), since a bar such as ">= 95% at every depth" is judged on that
 * cell and its number of trials. */
typedef struct lh_niah_length {
  int64_t length;
  int trials;
  double accuracy;
  double worst_score, worst_depth; /* depth in percent */
  int worst_trials;
} lh_niah_length;

/* The trials of one needle kind or value kind of a families sweep (lh_niah_params.families). */
typedef struct lh_niah_group {
  char name[48];
  int trials;
  double accuracy;
} lh_niah_group;

#define LH_NIAH_MAX_GROUPS 64

typedef struct lh_niah_summary {
  int trials, trials_run, trials_resumed;
  double accuracy, exact;        /* over all trials: the mean score (RULER's share of the expected
                                    values found in each answer) and exact matches */
  double all_values;             /* answers holding every expected value (= accuracy with one) */
  double same_set;               /* answers listing exactly the expected values, any order, no
                                    repeats or extras (the score does not count those against it) */
  int64_t tokens_computed;       /* prefilled by this sweep, all runs */
  int64_t tokens_naive;          /* sum of every trial's prompt length */
  int64_t tokens_restored;       /* main-state tokens restored from checkpoints in this run */
  double seconds;
  int n_lengths; /* per prompt length, ascending */
  lh_niah_length by_length[LH_NIAH_MAX_CELLS];
  int n_needle_kinds, n_value_kinds; /* with families: per needle kind and value kind, by name */
  lh_niah_group by_needle_kind[LH_NIAH_MAX_GROUPS], by_value_kind[LH_NIAH_MAX_GROUPS];
} lh_niah_summary;

/* Run (or resume) a sweep into p->out_dir: results.jsonl, results.csv, summary.json, sweep.json,
 * heatmap.png and heatmap.svg (when built with cairo; otherwise a note says how to draw them).
 * LH_EINTR when interrupted (resumable). A sweep refused or stopped before it writes sweep.json
 * (its model, backend, corpus or --db) leaves nothing it made: no OUT, lock or store. */
lh_status lh_niah_run(const lh_niah_params *p, lh_niah_summary *sum, lh_error *err);

/* Redraw OUT/heatmap.{png,svg} and rewrite results.csv and summary.json from OUT/results.jsonl,
 * holding OUT's sweep lock (OUT/niah.lock) as a sweep does: while a sweep runs there it is LH_EBUSY
 * naming the holder, or with wait it waits for the sweep to end. */
lh_status lh_niah_plot_dir(const char *out_dir, int wait, lh_error *err);

/* Two sweeps side by side: the cells of OUT folders a_dir and b_dir, the difference b - a per cell
 * both have, each sweep's overall score and accuracy per length. */
typedef struct lh_niah_compare_length {
  int64_t length;
  double a, b;      /* accuracy over the sweep's trials at this length; NAN when it has none */
  int common;       /* cells of this length both sweeps have */
  double diff;      /* mean of b - a over those cells; NAN when none */
} lh_niah_compare_length;

typedef struct lh_niah_comparison {
  char out_dir[4096];               /* where the files went */
  int cells_a, cells_b, common;     /* cells of each, and of both */
  int trials_a, trials_b;
  double score_a, score_b;          /* over every trial of each sweep */
  double all_values_a, all_values_b;
  double common_a, common_b;        /* mean score over the common cells, each counted once */
  int n_lengths;                    /* the union of both sweeps' lengths, ascending */
  lh_niah_compare_length by_length[2 * LH_NIAH_MAX_CELLS];
} lh_niah_comparison;

/* Compare the sweeps in a_dir and b_dir (folders written by lh_niah_run) into out_dir (NULL:
 * a_dir/compare-with-<b_dir's name>): compare.png and compare.svg (A, B and B - A heatmaps on the
 * union of their grids, cells of only one marked), compare.json and compare.csv (every cell of
 * either, with both scores and the difference). LH_ENOTFOUND when a folder has no finished trials,
 * LH_EINVAL when the two have no cell in common (nothing is written then), LH_EUNSUPPORTED when
 * built without cairo (the JSON and CSV are written). c gets the numbers and the folder. */
lh_status lh_niah_compare(const char *a_dir, const char *b_dir, const char *out_dir, lh_niah_comparison *c,
                          lh_error *err);

void lh_niah_request_stop(void);

#endif
