/* niah.c — needle-in-a-haystack sweeps (see niah.h for the prompt layout and the scoring).
 *
 * Invariants
 *  1. H (the haystack stream) and every trial's needles are pure functions of the corpus, the
 *     tokenizer and (seed, length, depth, trial): a rerun rebuilds exactly the same prompts, so
 *     finished trials in results.jsonl can be trusted and skipped.
 *  2. The main state only moves forward along [head][H], in chunks whose boundaries are multiples
 *     of `chunk` from position 0, and is checkpointed at each boundary: a killed sweep restores it
 *     from the store at the last boundary it reached.
 *  3. A trial forks from the main state at the last chunk boundary at or before its first needle,
 *     so the tokens before that boundary are computed once for the whole sweep.
 *  4. results.jsonl is appended one whole line per trial and flushed to disk before the next trial
 *     starts; a torn last line (kill -9 during the write) is ignored and the trial rerun.
 */
#define _POSIX_C_SOURCE 200809L
#include "jobs/niah.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ingest/ingest.h"
#include "tokenizer/tokenizer.h"
#include "jobs/chat.h"
#include "jobs/niah_plot.h"
#include "store/store.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"

#ifndef LH_DATA_DIR
#define LH_DATA_DIR "examples"
#endif

static volatile sig_atomic_t niah_stop;
void lh_niah_request_stop(void) { niah_stop = 1; }

/* Keys: words from the held-out split of the embedded model's training corpus (never keys in its
 * training), so the default sweep measures retrieval of unseen needles. */
static const char *const KEYS[] = {
#include "jobs/niah_keys.inc"
};
#define N_KEYS ((int)(sizeof KEYS / sizeof *KEYS))

static const char *const VARIANT_NAMES[] = {"single", "multikey", "multivalue", "multiquery"};

const char *lh_niah_variant_name(lh_niah_variant v) {
  return (int)v >= 0 && v < LH_NIAH_VARIANT_COUNT ? VARIANT_NAMES[v] : "unknown";
}

int lh_niah_variant_parse(const char *s) {
  for (int i = 0; i < LH_NIAH_VARIANT_COUNT; i++)
    if (!strcmp(s, VARIANT_NAMES[i])) return i;
  if (!strcmp(s, "multi-key")) return LH_NIAH_MULTIKEY;
  if (!strcmp(s, "multi-value")) return LH_NIAH_MULTIVALUE;
  if (!strcmp(s, "multi-query")) return LH_NIAH_MULTIQUERY;
  return -1;
}

lh_niah_params lh_niah_default_params(void) {
  lh_niah_params p = {0};
  p.device = "cpu";
  p.trials = 1;
  p.seed = 20261201;
  p.chunk = 4096;
  p.max_tokens = 128; /* RULER's tokens_to_generate for its NIAH tasks: 32 cut a 4-value answer short */
  p.n_needles = 0;
  p.progress = LH_PROGRESS_AUTO;
  return p;
}

int lh_niah_parse_lengths(const char *s, int64_t *out, int max, lh_error *err) {
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || v <= 0) {
      lh_error_set(err, LH_EINVAL, "--lengths %s: expected numbers like 1k,4k,128k,1m", s);
      return -1;
    }
    int64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'm' || *end == 'M') mul = 1048576, end++;
    if (*end && *end != ',') {
      lh_error_set(err, LH_EINVAL, "--lengths %s: unexpected '%c'", s, *end);
      return -1;
    }
    if (n == max) {
      lh_error_set(err, LH_EINVAL, "--lengths: at most %d lengths", max);
      return -1;
    }
    out[n++] = (int64_t)llround(v * (double)mul);
    p = *end ? end + 1 : end;
  }
  if (!n) lh_error_set(err, LH_EINVAL, "--lengths is empty");
  return n ? n : -1;
}

int lh_niah_parse_depths(const char *s, double *out, int max, lh_error *err) {
  double a, b, step;
  char tail;
  int n = 0;
  if (sscanf(s, "%lf:%lf:%lf%c", &a, &b, &step, &tail) == 3) {
    if (step <= 0 || a < 0 || b > 100 || a > b) {
      lh_error_set(err, LH_EINVAL, "--depths %s: expected FROM:TO:STEP within 0..100", s);
      return -1;
    }
    for (double d = a; d <= b + 1e-9 && n < max; d += step) out[n++] = d;
    return n;
  }
  const char *p = s;
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || v < 0 || v > 100 || (*end && *end != ',') || n == max) {
      lh_error_set(err, LH_EINVAL, "--depths %s: expected FROM:TO:STEP or a list of percentages", s);
      return -1;
    }
    out[n++] = v;
    p = *end ? end + 1 : end;
  }
  if (!n) lh_error_set(err, LH_EINVAL, "--depths is empty");
  return n ? n : -1;
}

/* ---- small helpers ---- */

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Replace {key}, {key2} and {value} in tpl. */
static void fill(lh_buf *out, const char *tpl, const char *key, const char *key2, const char *value) {
  for (const char *p = tpl; *p;) {
    if (!strncmp(p, "{key2}", 6)) lh_buf_append_str(out, key2 ? key2 : ""), p += 6;
    else if (!strncmp(p, "{key}", 5)) lh_buf_append_str(out, key), p += 5;
    else if (!strncmp(p, "{value}", 7)) lh_buf_append_str(out, value), p += 7;
    else lh_buf_append(out, p++, 1);
  }
}

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
} sweep;

static int ends_line(sweep *S, int64_t i) {
  if (S->line_end[i] == 2) {
    lh_buf b = {0};
    lh_tokenizer_decode(S->tok, &S->H.data[i], 1, 0, &b, NULL);
    S->line_end[i] = b.len && b.data[b.len - 1] == '\n';
    lh_buf_free(&b);
  }
  return S->line_end[i];
}

/* Largest q <= p such that q == 0 or token q-1 ends a line (searching back at most 4096). */
static int64_t snap(sweep *S, int64_t p) {
  for (int64_t q = p; q > 0 && q > p - 4096; q--)
    if (ends_line(S, q - 1)) return q;
  return p;
}

static int64_t ntok(sweep *S, const char *text) {
  lh_i32vec v = {0};
  lh_tokenizer_encode(S->tok, text, strlen(text), 0, &v, NULL);
  int64_t n = (int64_t)v.len;
  lh_i32vec_free(&v);
  return n;
}

static const char *default_needle(void) { return "The special magic {key} number is: {value}."; }
static const char *default_question(lh_niah_variant v) {
  switch (v) {
  case LH_NIAH_MULTIVALUE: return "What are all the special magic {key} numbers?";
  case LH_NIAH_MULTIQUERY: return "What are the special magic numbers for {key} and {key2}?";
  default: return "What is the special magic {key} number?";
  }
}

static const char *chat_tail_fmt(const sweep *S) {
  return S->chat.kind == LH_CHAT_MINIMAX ? "%s<end_of_sentence>\n<beginning_of_sentence>ai name=assistant\n" : "%s\n";
}

/* Build trial t's needles, question and haystack geometry (invariant 1). */
static lh_status make_trial(sweep *S, trial *t, lh_error *err) {
  const lh_niah_params *p = S->p;
  uint64_t rng = p->seed ^ (uint64_t)t->length * 0x9E3779B97F4A7C15ull ^ (uint64_t)llround(t->depth * 1000) << 20 ^
                 (uint64_t)t->index << 44;
  for (int i = 0; i < 4; i++) splitmix(&rng);
  int n = 1;
  if (p->variant != LH_NIAH_SINGLE) n = p->n_needles > 0 ? p->n_needles : (p->variant == LH_NIAH_MULTIQUERY ? 2 : 4);
  if (n > 16) n = 16;
  if (p->variant == LH_NIAH_MULTIQUERY && n < 2) n = 2;
  t->n_needles = n;
  for (int i = 0; i < n; i++) {
    int k;
    do {
      k = (int)(splitmix(&rng) % (uint64_t)N_KEYS);
      int dup = 0;
      for (int j = 0; j < i; j++) dup |= !strcmp(t->keys[j], KEYS[k]);
      if (!dup || p->variant == LH_NIAH_MULTIVALUE) break;
    } while (1);
    snprintf(t->keys[i], sizeof t->keys[i], "%s", p->variant == LH_NIAH_MULTIVALUE && i ? t->keys[0] : KEYS[k]);
    snprintf(t->values[i], sizeof t->values[i], "%07llu", (unsigned long long)(1000000 + splitmix(&rng) % 9000000));
    lh_buf_clear(&t->needle_text[i]);
    fill(&t->needle_text[i], p->needle ? p->needle : default_needle(), t->keys[i], NULL, t->values[i]);
    lh_buf_append_str(&t->needle_text[i], "\n");
  }
  /* what is asked: the first needle (at the requested depth); multi-query also a random other one */
  int q2 = n > 1 ? 1 + (int)(splitmix(&rng) % (uint64_t)(n - 1)) : 0;
  lh_buf q = {0};
  fill(&q, p->question ? p->question : default_question(p->variant), t->keys[0], t->keys[q2], t->values[0]);
  snprintf(t->question, sizeof t->question, "%s", q.data ? q.data : "");
  lh_buf_free(&q);
  if (p->variant == LH_NIAH_MULTIVALUE) {
    t->n_expected = n; /* the list itself is written once the needles are in text order, below */
  } else if (p->variant == LH_NIAH_MULTIQUERY) {
    t->n_expected = 2;
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%s", t->values[0]);
    snprintf(t->expected_vals[1], sizeof t->expected_vals[0], "%s", t->values[q2]);
    snprintf(t->expected, sizeof t->expected, "%s, %s", t->values[0], t->values[q2]);
  } else {
    t->n_expected = 1;
    lh_buf a = {0};
    fill(&a, p->answer ? p->answer : "{value}", t->keys[0], NULL, t->values[0]);
    snprintf(t->expected, sizeof t->expected, "%s", a.data ? a.data : "");
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%s", p->answer ? t->expected : t->values[0]);
    lh_buf_free(&a);
  }
  /* geometry: length = head + haystack + needles + tail */
  char tail[1024];
  snprintf(tail, sizeof tail, chat_tail_fmt(S), t->question);
  int64_t fixed = (int64_t)S->head.len + ntok(S, tail);
  for (int i = 0; i < n; i++) fixed += ntok(S, t->needle_text[i].data);
  int64_t hay = t->length - fixed;
  if (hay < 16)
    return lh_error_set(err, LH_EINVAL, "length %lld is too short for the needles and question (%lld tokens)",
                        (long long)t->length, (long long)fixed);
  if (hay > (int64_t)S->H.len) return lh_error_set(err, LH_EINVAL, "haystack too short for length %lld", (long long)t->length);
  /* cut the haystack at a line start; the shortfall is made up by moving the last cut back less */
  t->hay_len = snap(S, hay);
  t->pos[0] = snap(S, (int64_t)llround(t->depth / 100.0 * (double)t->hay_len));
  for (int i = 1; i < n; i++) {
    int64_t span = t->hay_len - t->pos[0];
    t->pos[i] = snap(S, t->pos[0] + (span > 0 ? (int64_t)(splitmix(&rng) % (uint64_t)(span + 1)) : 0));
    if (t->pos[i] < t->pos[0]) t->pos[i] = t->pos[0];
  }
  /* keep positions ascending (needle order in the text follows them) */
  for (int i = 2; i < n; i++)
    for (int j = i; j > 1 && t->pos[j] < t->pos[j - 1]; j--) {
      int64_t tp = t->pos[j];
      t->pos[j] = t->pos[j - 1], t->pos[j - 1] = tp;
      char kb[48], vb[16];
      memcpy(kb, t->keys[j], 48), memcpy(t->keys[j], t->keys[j - 1], 48), memcpy(t->keys[j - 1], kb, 48);
      memcpy(vb, t->values[j], 16), memcpy(t->values[j], t->values[j - 1], 16), memcpy(t->values[j - 1], vb, 16);
      lh_buf tb = t->needle_text[j];
      t->needle_text[j] = t->needle_text[j - 1], t->needle_text[j - 1] = tb;
    }
  if (p->variant == LH_NIAH_MULTIVALUE) { /* the expected list in the order the values appear in the text */
    t->expected[0] = 0;
    for (int i = 0; i < n; i++) {
      snprintf(t->expected_vals[i], sizeof t->expected_vals[0], "%s", t->values[i]);
      size_t l = strlen(t->expected);
      snprintf(t->expected + l, sizeof t->expected - l, "%s%s", i ? ", " : "", t->values[i]);
    }
  }
  return LH_OK;
}

/* The tokens of trial t from absolute prompt position `from` on (absolute = head + haystack...). */
static lh_status trial_tokens(sweep *S, const trial *t, lh_i32vec *out, int64_t *total, lh_error *err) {
  lh_i32vec_append(out, S->head.data, S->head.len);
  int64_t at = 0;
  for (int i = 0; i < t->n_needles; i++) {
    lh_i32vec_append(out, S->H.data + at, (size_t)(t->pos[i] - at));
    at = t->pos[i];
    lh_status st = lh_tokenizer_encode(S->tok, t->needle_text[i].data, t->needle_text[i].len, 0, out, err);
    if (st) return st;
  }
  lh_i32vec_append(out, S->H.data + at, (size_t)(t->hay_len - at));
  char tail[1024];
  snprintf(tail, sizeof tail, chat_tail_fmt(S), t->question);
  lh_status st = lh_tokenizer_encode(S->tok, tail, strlen(tail), 0, out, err);
  *total = (int64_t)out->len;
  return st;
}

static void strip_answer(char *s) {
  size_t n = strlen(s), a = 0;
  while (a < n && isspace((unsigned char)s[a])) a++;
  while (n > a && (isspace((unsigned char)s[n - 1]) || s[n - 1] == '.')) n--;
  memmove(s, s + a, n - a);
  s[n - a] = 0;
}

/* ---- results.jsonl ---- */

typedef struct row {
  int64_t length;
  double depth;
  int trial;
  double score, exact, contains, same_set;
  int64_t computed, tokens;
} row;

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Split s at commas into trimmed, non-empty items, sorted; returns the count (at most max). */
static int list_items(char *s, char **item, int max) {
  int n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(s, ",", &save); tok && n < max; tok = strtok_r(NULL, ",", &save)) {
    while (isspace((unsigned char)*tok)) tok++;
    char *end = tok + strlen(tok);
    while (end > tok && isspace((unsigned char)end[-1])) *--end = 0;
    if (*tok) item[n++] = tok;
  }
  qsort(item, (size_t)n, sizeof *item, cmp_str);
  return n;
}

/* The answer lists exactly the expected values, in any order, each once and nothing more: what
 * RULER's string_match_all (the score) does not see, since extra or repeated values cost it
 * nothing. Computed from the row's text, so results.jsonl from earlier builds have it too. */
static int same_set(const char *expected, const char *answer) {
  enum { MAXV = 64 };
  char *e = strdup(expected ? expected : ""), *a = strdup(answer ? answer : "");
  char *ei[MAXV], *ai[MAXV];
  int ok = 0;
  if (e && a) {
    const int ne = list_items(e, ei, MAXV), na = list_items(a, ai, MAXV);
    ok = ne == na && ne > 0;
    for (int i = 0; ok && i < ne; i++) ok = !strcmp(ei[i], ai[i]);
  }
  free(e), free(a);
  return ok;
}

/* same_set of one results.jsonl object, from its expected and answer strings */
static int row_same_set(const cJSON *o) {
  return same_set(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "expected")),
                  cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "answer")));
}

static int row_key_eq(const row *r, const trial *t) {
  return r->length == t->length && fabs(r->depth - t->depth) < 1e-9 && r->trial == t->index;
}

/* Read finished rows (a torn last line is dropped: invariant 4). */
static lh_status read_rows(const char *path, row **rows, int *n, lh_error *err) {
  *rows = NULL;
  *n = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return errno == ENOENT ? LH_OK : lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int cap_rows = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break;
    cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
    if (!o) continue;
    if (*n == cap_rows) {
      cap_rows = cap_rows ? 2 * cap_rows : 64;
      row *r = realloc(*rows, (size_t)cap_rows * sizeof *r);
      if (!r) {
        cJSON_Delete(o);
        break;
      }
      *rows = r;
    }
    row *r = &(*rows)[(*n)++];
    r->length = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "length"));
    r->depth = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "depth"));
    r->trial = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "trial"));
    r->score = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "score"));
    r->exact = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "exact"));
    r->contains = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "contains"));
    r->same_set = row_same_set(o);
    r->computed = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "tokens_computed"));
    r->tokens = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "tokens"));
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  return LH_OK;
}

/* ---- the built-in corpus ---- */

static const char *builtin_corpus(char *buf, size_t n) {
  char exe[4096];
  ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (l > 0) {
    exe[l] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      if ((size_t)snprintf(buf, n, "%.3900s/../examples/niah/haystack.tar.xz", exe) < n && lh_is_file(buf)) return buf;
      if ((size_t)snprintf(buf, n, "%.3900s/../share/longhaul/niah/haystack.tar.xz", exe) < n && lh_is_file(buf))
        return buf;
    }
  }
  snprintf(buf, n, "%s/niah/haystack.tar.xz", LH_DATA_DIR);
  return lh_is_file(buf) ? buf : NULL;
}

static lh_status load_haystack(sweep *S, const char *corpus, int64_t need, lh_progress *prog, lh_error *err) {
  lh_ingest_params ip = lh_ingest_default_params();
  ip.tokenizer = S->tok;
  lh_ingest *ing = NULL;
  lh_status st = lh_ingest_open(&ip, &ing, err);
  if (st == LH_OK) st = lh_ingest_add_path(ing, corpus, err);
  lh_ingest_batch b;
  lh_progress_begin(prog, "haystack", "ingest", 0, "B");
  while (st == LH_OK && (st = lh_ingest_next(ing, &b, err)) == LH_OK) {
    lh_i32vec_append(&S->H, b.tokens, b.n_tokens);
    lh_ingest_stats is;
    lh_ingest_stats_get(ing, &is);
    lh_progress_update(prog, is.source_bytes);
    if (b.done) break;
  }
  lh_progress_end(prog);
  lh_ingest_close(ing);
  if (st != LH_OK) return lh_error_prefix(err, st, "haystack %s: ", corpus);
  S->corpus_tokens = (int64_t)S->H.len;
  if (S->corpus_tokens < 64) return lh_error_set(err, LH_EINVAL, "haystack %s has only %lld tokens", corpus,
                                                 (long long)S->corpus_tokens);
  /* repeat whole copies of the corpus (document boundaries stay boundaries) */
  while ((int64_t)S->H.len < need)
    if (lh_i32vec_append(&S->H, S->H.data, (size_t)S->corpus_tokens)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  S->line_end = malloc(S->H.len);
  if (!S->line_end) return lh_error_set(err, LH_ENOMEM, "out of memory");
  memset(S->line_end, 2, S->H.len);
  return LH_OK;
}

/* ---- summary, CSV, plot ---- */

static int cmp_row(const void *a, const void *b) {
  const row *x = a, *y = b;
  if (x->length != y->length) return x->length < y->length ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->trial - y->trial;
}

static lh_status write_reports(const char *out_dir, const char *title, lh_niah_summary *sum, lh_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/results.jsonl", out_dir);
  row *rows;
  int n;
  lh_status st = read_rows(path, &rows, &n, err);
  if (st) return st;
  if (!n) {
    free(rows);
    return lh_error_set(err, LH_ENOTFOUND, "%s has no finished trials", path);
  }
  /* CSV in a stable order, from the JSONL (which is in run order) */
  FILE *f = fopen(path, "rb");
  lh_buf csv = {0};
  lh_buf_append_str(&csv, "length,depth,trial,variant,needle,expected,answer,exact,contains,score,tokens,tokens_computed,"
                          "seconds,same_set\n");
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while (f && (len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break;
    cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
    if (!o) continue;
    const char *keys[] = {"length", "depth", "trial", "variant", "needle", "expected", "answer", "exact",
                          "contains", "score", "tokens", "tokens_computed", "seconds"};
    for (int k = 0; k < 13; k++) {
      const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
      if (k) lh_buf_append(&csv, ",", 1);
      if (cJSON_IsString(v)) {
        lh_buf_append(&csv, "\"", 1);
        for (const char *c = v->valuestring; *c; c++) {
          if (*c == '"') lh_buf_append(&csv, "\"", 1);
          lh_buf_append(&csv, c, 1);
        }
        lh_buf_append(&csv, "\"", 1);
      } else if (cJSON_IsNumber(v)) {
        lh_buf_printf(&csv, "%.10g", v->valuedouble);
      }
    }
    lh_buf_printf(&csv, ",%d\n", row_same_set(o));
    cJSON_Delete(o);
  }
  free(line);
  if (f) fclose(f);
  snprintf(path, sizeof path, "%s/results.csv", out_dir);
  st = lh_file_write_atomic(path, csv.data, csv.len, err);
  lh_buf_free(&csv);
  /* cells */
  qsort(rows, (size_t)n, sizeof *rows, cmp_row);
  lh_niah_cell *cells = calloc((size_t)n, sizeof *cells);
  int nc = 0;
  double acc = 0, ex = 0, all = 0, set = 0;
  int64_t computed = 0, naive = 0;
  for (int i = 0; i < n; i++) {
    if (!nc || cells[nc - 1].length != rows[i].length || cells[nc - 1].depth != rows[i].depth)
      cells[nc++] = (lh_niah_cell){rows[i].length, rows[i].depth, 0, 0};
    cells[nc - 1].score += rows[i].score;
    cells[nc - 1].trials++;
    acc += rows[i].score, ex += rows[i].exact, all += rows[i].contains, set += rows[i].same_set;
    computed += rows[i].computed, naive += rows[i].tokens;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "title", title);
  cJSON_AddNumberToObject(o, "trials", n);
  cJSON_AddNumberToObject(o, "accuracy", acc / n);
  cJSON_AddNumberToObject(o, "exact", ex / n);
  cJSON_AddNumberToObject(o, "all_values", all / n);
  cJSON_AddNumberToObject(o, "same_set", set / n);
  cJSON_AddNumberToObject(o, "tokens_computed", (double)computed);
  cJSON_AddNumberToObject(o, "tokens_naive", (double)naive);
  cJSON_AddNumberToObject(o, "computed_share", naive ? (double)computed / (double)naive : 0);
  cJSON *ca = cJSON_AddArrayToObject(o, "cells");
  for (int i = 0; i < nc; i++) {
    cells[i].score /= cells[i].trials;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "length", (double)cells[i].length);
    cJSON_AddNumberToObject(c, "depth", cells[i].depth);
    cJSON_AddNumberToObject(c, "score", cells[i].score);
    cJSON_AddNumberToObject(c, "trials", cells[i].trials);
    cJSON_AddItemToArray(ca, c);
  }
  /* per length (cells are sorted by length, then depth); more lengths than a sweep can have
   * (LH_NIAH_MAX_CELLS) only come from a hand-edited results.jsonl and are left out */
  lh_niah_length by[LH_NIAH_MAX_CELLS];
  int nl = 0;
  for (int i = 0; i < nc; i++) {
    if (i == 0 || cells[i].length != cells[i - 1].length) {
      if (nl == LH_NIAH_MAX_CELLS) break;
      by[nl++] = (lh_niah_length){cells[i].length, 0, 0, 2, 0, 0};
    }
    lh_niah_length *L = &by[nl - 1];
    L->trials += cells[i].trials;
    L->accuracy += cells[i].score * cells[i].trials;
    if (cells[i].score < L->worst_score)
      L->worst_score = cells[i].score, L->worst_depth = cells[i].depth, L->worst_trials = cells[i].trials;
  }
  cJSON *la = cJSON_AddArrayToObject(o, "lengths");
  for (int j = 0; j < nl; j++) {
    by[j].accuracy /= by[j].trials;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "length", (double)by[j].length);
    cJSON_AddNumberToObject(c, "trials", by[j].trials);
    cJSON_AddNumberToObject(c, "accuracy", by[j].accuracy);
    cJSON_AddNumberToObject(c, "worst_cell_score", by[j].worst_score);
    cJSON_AddNumberToObject(c, "worst_cell_depth", by[j].worst_depth);
    cJSON_AddNumberToObject(c, "worst_cell_trials", by[j].worst_trials);
    cJSON_AddItemToArray(la, c);
  }
  if (sum) {
    sum->trials = n;
    sum->accuracy = acc / n;
    sum->exact = ex / n;
    sum->all_values = all / n;
    sum->same_set = set / n;
    sum->tokens_computed = computed;
    sum->tokens_naive = naive;
    sum->n_lengths = nl;
    memcpy(sum->by_length, by, (size_t)nl * sizeof *by);
  }
  char *js = cJSON_Print(o);
  cJSON_Delete(o);
  snprintf(path, sizeof path, "%s/summary.json", out_dir);
  if (st == LH_OK) st = lh_file_write_atomic(path, js, strlen(js), err);
  free(js);
  if (st == LH_OK) {
    char png[4200], svg[4200];
    snprintf(png, sizeof png, "%s/heatmap.png", out_dir);
    snprintf(svg, sizeof svg, "%s/heatmap.svg", out_dir);
    lh_error pe;
    if (lh_niah_plot(cells, nc, title, png, svg, &pe) != LH_OK) lh_log_warn("%s", pe.msg);
  }
  free(cells);
  free(rows);
  return st;
}

static lh_status read_title(const char *out_dir, char *title, size_t n, lh_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/sweep.json", out_dir);
  lh_buf b = {0};
  lh_status st = lh_file_read(path, 1 << 20, &b, err);
  if (st == LH_OK) {
    cJSON *o = cJSON_ParseWithLength(b.data, b.len);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "title"));
    snprintf(title, n, "%s", t ? t : "NIAH");
    cJSON_Delete(o);
  }
  lh_buf_free(&b);
  return st;
}

lh_status lh_niah_plot_dir(const char *out_dir, lh_error *err) {
  char title[512];
  lh_status st = read_title(out_dir, title, sizeof title, err);
  if (st) return st;
  return write_reports(out_dir, title, NULL, err);
}

/* ---- the sweep ---- */

static lh_status sweep_json(const lh_niah_params *p, const char *model_id, const char *corpus, const char *title,
                            char **out) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "title", title);
  cJSON *k = cJSON_AddObjectToObject(o, "key"); /* what the results depend on */
  cJSON_AddStringToObject(k, "model_id", model_id);
  cJSON_AddStringToObject(k, "corpus", corpus);
  cJSON_AddStringToObject(k, "variant", lh_niah_variant_name(p->variant));
  cJSON_AddNumberToObject(k, "n_needles", p->n_needles);
  cJSON_AddStringToObject(k, "needle", p->needle ? p->needle : default_needle());
  cJSON_AddStringToObject(k, "question", p->question ? p->question : default_question(p->variant));
  cJSON_AddStringToObject(k, "answer", p->answer ? p->answer : "{value}");
  cJSON_AddNumberToObject(k, "seed", (double)p->seed);
  cJSON_AddNumberToObject(k, "max_tokens", p->max_tokens);
  cJSON_AddStringToObject(o, "device", p->device ? p->device : "cpu");
  cJSON_AddNumberToObject(o, "chunk", p->chunk);
  *out = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return *out ? LH_OK : LH_ENOMEM;
}

static int cmp_trial_pos(const void *a, const void *b) {
  const trial *x = *(trial *const *)a, *y = *(trial *const *)b;
  return (x->pos[0] > y->pos[0]) - (x->pos[0] < y->pos[0]);
}

lh_status lh_niah_run(const lh_niah_params *p, lh_niah_summary *sum, lh_error *err) {
  memset(sum, 0, sizeof *sum);
  niah_stop = 0;
  double t_start = lh_now();
  sweep S = {0};
  S.p = p;
  trial *T = NULL;
  trial **order = NULL;
  int nt = 0;
  lh_store *store = NULL;
  lh_store_writer *writer = NULL;
  lh_state *main_st = NULL;
  lh_progress *prog = NULL;
  FILE *rf = NULL;
  row *rows = NULL;
  int nrows = 0;
  char cbuf[4096], path[4200], db[4200];
  lh_status st;
  if (!p->model_dir || !p->out_dir) return lh_error_set(err, LH_EINVAL, "--model and --out are required");
  if (p->n_lengths < 1 || p->n_depths < 1 || p->trials < 1 || p->chunk < 1)
    return lh_error_set(err, LH_EINVAL, "need at least one length, one depth and one trial");
  const char *corpus = p->corpus ? p->corpus : builtin_corpus(cbuf, sizeof cbuf);
  if (!corpus)
    return lh_error_set(err, LH_ENOTFOUND, "the built-in haystack (examples/niah/haystack.tar.xz) was not found; "
                                            "pass --corpus with an archive, folder or file");
  if ((st = lh_mkdir_p(p->out_dir, err))) return st;
  prog = lh_progress_open(p->progress, stderr, 10);

  lh_model_params mp = lh_model_default_params();
  mp.backend = p->device ? p->device : "cpu";
  mp.threads = p->threads;
  mp.cpu_attention = p->cpu_attention;
  if (p->chunk > mp.max_chunk) mp.max_chunk = p->chunk;
  if ((st = lh_model_open(p->model_dir, &mp, &S.model, err))) goto done;
  S.cfg = lh_model_config(S.model);
  if ((st = lh_tokenizer_open(p->model_dir, &S.tok, err))) goto done;
  if ((st = lh_chat_format_detect(p->model_dir, NULL, &S.chat, err))) goto done;
  if (S.chat.kind == LH_CHAT_MINIMAX) {
    const char *h = "<beginning_of_sentence>user name=user\n";
    lh_tokenizer_encode(S.tok, h, strlen(h), 0, &S.head, NULL);
    S.stop_ids[S.n_stop++] = lh_tokenizer_token_to_id(S.tok, "<end_of_sentence>");
  }
  if (S.cfg->eos_token_id >= 0) S.stop_ids[S.n_stop++] = S.cfg->eos_token_id;
  {
    const char *slash = strrchr(p->model_dir, '/');
    snprintf(S.model_name, sizeof S.model_name, "%s", slash && slash[1] ? slash + 1 : p->model_dir);
  }
  int64_t maxlen = 0;
  for (int i = 0; i < p->n_lengths; i++) maxlen = p->lengths[i] > maxlen ? p->lengths[i] : maxlen;
  if (S.cfg->max_position_embeddings > 0 && maxlen + p->max_tokens > S.cfg->max_position_embeddings) {
    st = lh_error_set(err, LH_ELIMIT, "length %lld + %d answer tokens is over the model's context of %d tokens",
                      (long long)maxlen, p->max_tokens, S.cfg->max_position_embeddings);
    goto done;
  }
  if ((st = load_haystack(&S, corpus, maxlen, prog, err))) goto done;

  /* sweep.json: a rerun into the same folder must be the same sweep */
  char date[32], title[512];
  lh_utc_now(date, sizeof date);
  date[10] = 0;
  snprintf(title, sizeof title, "NIAH %s: %s, %s, %s", lh_niah_variant_name(p->variant), S.model_name,
           p->device ? p->device : "cpu", date);
  char *sj = NULL;
  sweep_json(p, lh_model_id(S.model), corpus, title, &sj);
  snprintf(path, sizeof path, "%s/sweep.json", p->out_dir);
  snprintf(db, sizeof db, "%s/results.jsonl", p->out_dir);
  {
    lh_buf old = {0};
    if (!p->force && lh_file_read(path, 1 << 20, &old, NULL) == LH_OK) {
      cJSON *a = cJSON_Parse(old.data), *b = cJSON_Parse(sj);
      int same = a && b && cJSON_Compare(cJSON_GetObjectItem(a, "key"), cJSON_GetObjectItem(b, "key"), 1);
      const char *ot = cJSON_GetStringValue(cJSON_GetObjectItem(a, "title"));
      if (same && ot) snprintf(title, sizeof title, "%s", ot); /* keep the first run's date */
      cJSON_Delete(a);
      cJSON_Delete(b);
      if (!same) {
        lh_buf_free(&old);
        free(sj);
        st = lh_error_set(err, LH_EINVAL, "%s holds results of a different sweep (model, corpus, variant, needle or "
                          "seed differ); use another --out or --force to discard them", p->out_dir);
        goto done;
      }
      free(sj);
      sweep_json(p, lh_model_id(S.model), corpus, title, &sj);
    } else if (p->force) {
      unlink(db);
    }
    lh_buf_free(&old);
  }
  st = lh_file_write_atomic(path, sj, strlen(sj), err);
  free(sj);
  if (st) goto done;
  if ((st = read_rows(db, &rows, &nrows, err))) goto done;

  /* trials */
  nt = p->n_lengths * p->n_depths * p->trials;
  T = calloc((size_t)nt, sizeof *T);
  order = calloc((size_t)nt, sizeof *order);
  if (!T || !order) {
    st = lh_error_set(err, LH_ENOMEM, "out of memory");
    goto done;
  }
  int k = 0;
  for (int li = 0; li < p->n_lengths; li++)
    for (int di = 0; di < p->n_depths; di++)
      for (int ti = 0; ti < p->trials; ti++, k++) {
        T[k].length = p->lengths[li];
        T[k].depth = p->depths[di];
        T[k].index = ti;
        if ((st = make_trial(&S, &T[k], err))) goto done;
        for (int r = 0; r < nrows; r++)
          if (row_key_eq(&rows[r], &T[k])) T[k].done = 1;
        sum->trials_resumed += T[k].done;
        order[k] = &T[k];
      }
  qsort(order, (size_t)nt, sizeof *order, cmp_trial_pos);
  int64_t main_end = 0; /* the main state needs to reach the last unfinished trial's fork point */
  for (int i = 0; i < nt; i++)
    if (!order[i]->done) main_end = (int64_t)S.head.len + order[i]->pos[0];
  main_end = main_end / p->chunk * p->chunk;

  /* the store: main-state checkpoints */
  char dbp[4200];
  snprintf(dbp, sizeof dbp, "%s/niah.db", p->out_dir);
  lh_store_params sp = lh_store_default_params();
  if ((st = lh_store_open(p->db_path ? p->db_path : dbp, &sp, &store, err))) goto done;
  if ((st = lh_store_model_register(store, S.model, err))) goto done;
  lh_store_writer_params wp = lh_store_writer_default_params();
  if ((st = lh_store_writer_open(p->db_path ? p->db_path : dbp, &wp, &writer, err))) goto done;
  lh_i32vec mainseq = {0};
  lh_i32vec_append(&mainseq, S.head.data, S.head.len);
  lh_i32vec_append(&mainseq, S.H.data, (size_t)(main_end > (int64_t)S.head.len ? main_end - (int64_t)S.head.len : 0));
  lh_store_cursor cur;
  if ((st = lh_store_resume(store, S.model, mainseq.data, (int64_t)mainseq.len, 0, &main_st, &cur, err))) {
    lh_i32vec_free(&mainseq);
    goto done;
  }
  sum->tokens_restored = lh_state_pos(main_st);
  if (sum->tokens_restored)
    lh_progress_note(prog, "niah: resumed the shared haystack prefix from a checkpoint at token %lld",
                     (long long)sum->tokens_restored);

  rf = fopen(db, "ab");
  if (!rf) {
    st = lh_error_set(err, LH_EIO, "%s: %s", db, strerror(errno));
    lh_i32vec_free(&mainseq);
    goto done;
  }
  int vocab = S.cfg->vocab_size;
  float *logits = malloc((size_t)vocab * sizeof *logits);
  for (int i = 0; i < nt && st == LH_OK; i++) {
    trial *t = order[i];
    if (t->done) continue;
    double t0 = lh_now();
    /* advance the main state to the chunk boundary at or before this trial's first needle */
    int64_t fork_at = ((int64_t)S.head.len + t->pos[0]) / p->chunk * p->chunk;
    int64_t main_computed = 0;
    while (lh_state_pos(main_st) < fork_at && st == LH_OK) {
      int64_t pos = lh_state_pos(main_st), next = (pos / p->chunk + 1) * p->chunk;
      if (next > fork_at) next = fork_at;
      st = lh_prefill(main_st, mainseq.data + pos, next - pos, NULL, NULL, err);
      if (st == LH_OK) {
        lh_store_cursor_feed(&cur, mainseq.data + pos, next - pos);
        st = lh_store_checkpoint_state(writer, main_st, &cur, err);
      }
      main_computed += next - pos;
      if (niah_stop) break;
    }
    if (st != LH_OK) break;
    if (niah_stop) {
      st = lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
      break;
    }
    lh_i32vec toks = {0};
    int64_t total = 0;
    if ((st = trial_tokens(&S, t, &toks, &total, err))) {
      lh_i32vec_free(&toks);
      break;
    }
    lh_state *fs = NULL;
    if ((st = lh_state_fork(main_st, &fs, err))) {
      lh_i32vec_free(&toks);
      break;
    }
    char label[96], lab[16];
    lh_niah_length_label(t->length, lab, sizeof lab);
    snprintf(label, sizeof label, "%s @%g%% #%d", lab, t->depth, t->index);
    lh_progress_begin(prog, label, "prefill", total, "tok");
    lh_progress_prefill(prog, fork_at); /* the shared prefix is restored, not prefilled here */
    int64_t pos = fork_at;
    while (pos < total && st == LH_OK) {
      int64_t next = (pos / p->chunk + 1) * p->chunk;
      if (next > total) next = total;
      st = lh_prefill(fs, toks.data + pos, next - pos, next == total ? logits : NULL, NULL, err);
      pos = next;
      lh_progress_update(prog, pos);
      if (niah_stop) break;
    }
    lh_progress_end(prog);
    lh_i32vec gen = {0};
    lh_buf ans = {0};
    lh_sampler_params greedy = {.temperature = 0, .top_p = 1, .top_k = 0, .seed = 0};
    uint64_t rng = 0;
    for (int g = 0; st == LH_OK && !niah_stop && g < p->max_tokens; g++) {
      int32_t id = lh_sample(logits, vocab, &greedy, &rng);
      int stop = 0;
      for (int s = 0; s < S.n_stop; s++) stop |= S.stop_ids[s] == id;
      if (stop) break;
      lh_i32vec_push(&gen, id);
      if (g + 1 < p->max_tokens) st = lh_prefill(fs, &id, 1, logits, NULL, err);
    }
    lh_state_free(fs);
    if (st != LH_OK) {
      lh_i32vec_free(&toks);
      lh_i32vec_free(&gen);
      lh_buf_free(&ans);
      break;
    }
    if (niah_stop) {
      lh_i32vec_free(&toks);
      lh_i32vec_free(&gen);
      lh_buf_free(&ans);
      st = lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
      break;
    }
    lh_tokenizer_decode(S.tok, gen.data, gen.len, 1, &ans, NULL);
    char *a = strdup(ans.data ? ans.data : "");
    strip_answer(a);
    /* RULER's string_match_all: the share of the expected values found in the answer (one value:
     * 0 or 1); contains: all of them; exact: the answer is the expected text */
    int found = 0;
    for (int e = 0; e < t->n_expected; e++) found += strstr(a, t->expected_vals[e]) != NULL;
    const int contains = found == t->n_expected;
    const double score = t->n_expected ? (double)found / t->n_expected : 0;
    int exact = !strcmp(a, t->expected);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "length", (double)t->length);
    cJSON_AddNumberToObject(o, "depth", t->depth);
    cJSON_AddNumberToObject(o, "trial", t->index);
    cJSON_AddStringToObject(o, "variant", lh_niah_variant_name(p->variant));
    lh_buf nd = {0};
    for (int e = 0; e < t->n_needles; e++) lh_buf_append(&nd, t->needle_text[e].data, t->needle_text[e].len - 1),
                                           lh_buf_append_str(&nd, e + 1 < t->n_needles ? " | " : "");
    cJSON_AddStringToObject(o, "needle", nd.data);
    lh_buf_free(&nd);
    cJSON_AddStringToObject(o, "question", t->question);
    cJSON_AddStringToObject(o, "expected", t->expected);
    cJSON_AddStringToObject(o, "answer", a);
    cJSON_AddNumberToObject(o, "exact", exact);
    cJSON_AddNumberToObject(o, "contains", contains);
    cJSON_AddNumberToObject(o, "score", score);
    cJSON_AddNumberToObject(o, "tokens", (double)total);
    cJSON_AddNumberToObject(o, "needle_token", (double)((int64_t)S.head.len + t->pos[0]));
    cJSON_AddNumberToObject(o, "tokens_computed", (double)(total - fork_at + main_computed + (int64_t)gen.len));
    cJSON_AddNumberToObject(o, "seconds", lh_now() - t0);
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    fprintf(rf, "%s\n", line);
    if (fflush(rf) != 0 || fsync(fileno(rf)) != 0)
      st = lh_error_set(err, errno == ENOSPC ? LH_EFULL : LH_EIO, "%s: %s", db, strerror(errno));
    free(line);
    lh_progress_note(prog, "  %-8s depth %5.1f%%  trial %d: %s  (expected %s, got \"%s\")", lab, t->depth, t->index,
                     contains ? "ok  " : "MISS", t->expected, a);
    free(a);
    sum->trials_run++;
    lh_i32vec_free(&toks);
    lh_i32vec_free(&gen);
    lh_buf_free(&ans);
  }
  free(logits);
  lh_i32vec_free(&mainseq);
  {
    lh_error we;
    lh_status ws = lh_store_writer_close(writer, &we);
    writer = NULL;
    if (ws != LH_OK && st == LH_OK) {
      st = ws;
      if (err) *err = we;
    }
  }
  if (rf) fclose(rf), rf = NULL;
  if (st == LH_OK || st == LH_EINTR) {
    lh_error re;
    lh_status rs = write_reports(p->out_dir, title, sum, &re);
    if (rs != LH_OK && rs != LH_ENOTFOUND && st == LH_OK) {
      st = rs;
      if (err) *err = re;
    }
  }

done:
  sum->seconds = lh_now() - t_start;
  if (rf) fclose(rf);
  if (writer) lh_store_writer_close(writer, NULL);
  lh_state_free(main_st);
  lh_store_close(store);
  for (int i = 0; T && i < nt; i++)
    for (int j = 0; j < 16; j++) lh_buf_free(&T[i].needle_text[j]);
  free(T);
  free(order);
  free(rows);
  lh_i32vec_free(&S.H);
  lh_i32vec_free(&S.head);
  free(S.line_end);
  lh_tokenizer_close(S.tok);
  lh_model_close(S.model);
  lh_progress_close(prog);
  return st;
}
