/* niah_internal.h — what the three files of a NIAH sweep share: jobs/niah.c runs the sweep,
 * jobs/niah_trial.c builds each trial's needles and prompt, jobs/niah_report.c scores answers,
 * keeps results.jsonl and writes the reports. Not a public interface (see niah.h).
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

typedef struct trial {
  int64_t length;
  double depth;
  int index;           /* trial number within the cell */
  int64_t hay_len;     /* haystack tokens in the prompt */
  int64_t pos[16];     /* needle positions in haystack coordinates, ascending; pos[0] the first */
  int n_needles;
  char keys[16][48];
  char values[16][16];
  lh_buf needle_text[16];
  char question[512];
  char expected[256];
  int n_expected;      /* values that must all appear */
  char expected_vals[16][256];
  int done;            /* already in results.jsonl */
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
} sweep;


/* ---- trials (niah_trial.c) ---- */

/* The needle and question templates a sweep uses when none is given (RULER's). */
const char *lh_niah__default_needle(void);
const char *lh_niah__default_question(lh_niah_variant v);
/* Build trial t's needles, question and haystack geometry from (seed, length, depth, index): a
 * pure function of them, the corpus and the tokenizer (niah.c invariant 1). */
lh_status lh_niah__make_trial(sweep *S, trial *t, lh_error *err);
/* The whole prompt of trial t (head, haystack with needles, question, generation prompt). */
lh_status lh_niah__trial_tokens(sweep *S, const trial *t, lh_i32vec *out, int64_t *total, lh_error *err);

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
