/* niah_report.c — scoring a NIAH answer, results.jsonl, and the reports made from it
 * (results.csv, summary.json, the heatmap through niah_plot.h).
 *
 * results.jsonl is the record: one whole line per finished trial, appended and fsync'd before
 * the next trial starts; a torn last line (a kill during the write) is ignored and that trial
 * rerun. The reports are always rebuilt from it, never edited.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/niah_internal.h"
#include "jobs/niah_plot.h"
#include "util/fs.h"
#include "util/log.h"

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

static int cmp_row(const void *a, const void *b) {
  const row *x = a, *y = b;
  if (x->length != y->length) return x->length < y->length ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  return x->trial - y->trial;
}

/* The cells of rows (sorted here by length, depth, trial), in that order: each cell's mean score,
 * its share of answers holding every expected value, and its trials. NULL when out of memory. */
static lh_niah_cell *rows_cells(row *rows, int n, int *nc) {
  qsort(rows, (size_t)n, sizeof *rows, cmp_row);
  lh_niah_cell *cells = calloc((size_t)(n ? n : 1), sizeof *cells);
  *nc = 0;
  if (!cells) return NULL;
  for (int i = 0; i < n; i++) {
    if (!*nc || cells[*nc - 1].length != rows[i].length || cells[*nc - 1].depth != rows[i].depth)
      cells[(*nc)++] = (lh_niah_cell){.length = rows[i].length, .depth = rows[i].depth};
    lh_niah_cell *c = &cells[*nc - 1];
    c->score += rows[i].score, c->all_values += rows[i].contains, c->trials++;
  }
  for (int i = 0; i < *nc; i++) cells[i].score /= cells[i].trials, cells[i].all_values /= cells[i].trials;
  return cells;
}

/* One prompt length of cells (sorted by length): its accuracy and all-values share over its trials. */
typedef struct length_acc {
  int64_t length;
  int trials;
  double accuracy, all_values;
} length_acc;

/* Per length of cells (sorted by length), at most max lengths; returns the count. */
static int cells_lengths(const lh_niah_cell *cells, int nc, length_acc *out, int max) {
  int nl = 0;
  for (int i = 0; i < nc; i++) {
    if (i == 0 || cells[i].length != cells[i - 1].length) {
      if (nl == max) break;
      out[nl++] = (length_acc){.length = cells[i].length};
    }
    length_acc *L = &out[nl - 1];
    L->trials += cells[i].trials;
    L->accuracy += cells[i].score * cells[i].trials, L->all_values += cells[i].all_values * cells[i].trials;
  }
  for (int j = 0; j < nl; j++) out[j].accuracy /= out[j].trials, out[j].all_values /= out[j].trials;
  return nl;
}

lh_status lh_niah__write_reports(const char *out_dir, const char *title, lh_niah_summary *sum, lh_error *err) {
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
  double acc = 0, ex = 0, all = 0, set = 0;
  int64_t computed = 0, naive = 0;
  for (int i = 0; i < n; i++) {
    acc += rows[i].score, ex += rows[i].exact, all += rows[i].contains, set += rows[i].same_set;
    computed += rows[i].computed, naive += rows[i].tokens;
  }
  int nc;
  lh_niah_cell *cells = rows_cells(rows, n, &nc);
  if (!cells) {
    free(rows);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  int tmin = cells[0].trials, tmax = cells[0].trials;
  for (int i = 1; i < nc; i++) {
    tmin = cells[i].trials < tmin ? cells[i].trials : tmin;
    tmax = cells[i].trials > tmax ? cells[i].trials : tmax;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "title", title);
  cJSON_AddStringToObject(o, "score_metric", LH_NIAH_SCORE_METRIC);
  cJSON_AddNumberToObject(o, "trials", n);
  cJSON_AddNumberToObject(o, "accuracy", acc / n);
  cJSON_AddNumberToObject(o, "exact", ex / n);
  cJSON_AddNumberToObject(o, "all_values", all / n);
  cJSON_AddNumberToObject(o, "same_set", set / n);
  cJSON_AddNumberToObject(o, "tokens_computed", (double)computed);
  cJSON_AddNumberToObject(o, "tokens_naive", (double)naive);
  cJSON_AddNumberToObject(o, "computed_share", naive ? (double)computed / (double)naive : 0);
  cJSON_AddNumberToObject(o, "trials_per_cell_min", tmin);
  cJSON_AddNumberToObject(o, "trials_per_cell_max", tmax);
  cJSON *ca = cJSON_AddArrayToObject(o, "cells");
  for (int i = 0; i < nc; i++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "length", (double)cells[i].length);
    cJSON_AddNumberToObject(c, "depth", cells[i].depth);
    cJSON_AddNumberToObject(c, "score", cells[i].score);
    cJSON_AddNumberToObject(c, "trials", cells[i].trials);
    cJSON_AddNumberToObject(c, "all_values", cells[i].all_values);
    cJSON_AddItemToArray(ca, c);
  }
  /* per length (cells are sorted by length, then depth); more lengths than a sweep can have
   * (LH_NIAH_MAX_CELLS) only come from a hand-edited results.jsonl and are left out */
  lh_niah_length by[LH_NIAH_MAX_CELLS];
  length_acc la_[LH_NIAH_MAX_CELLS];
  const int nl = cells_lengths(cells, nc, la_, LH_NIAH_MAX_CELLS);
  for (int j = 0; j < nl; j++) by[j] = (lh_niah_length){la_[j].length, la_[j].trials, la_[j].accuracy, 2, 0, 0};
  for (int i = 0, j = -1; i < nc; i++) {
    if (i == 0 || cells[i].length != cells[i - 1].length) j++;
    if (j == nl) break;
    lh_niah_length *L = &by[j];
    if (cells[i].score < L->worst_score)
      L->worst_score = cells[i].score, L->worst_depth = cells[i].depth, L->worst_trials = cells[i].trials;
  }
  cJSON *la = cJSON_AddArrayToObject(o, "lengths");
  for (int j = 0; j < nl; j++) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "length", (double)by[j].length);
    cJSON_AddNumberToObject(c, "trials", by[j].trials);
    cJSON_AddNumberToObject(c, "accuracy", by[j].accuracy);
    cJSON_AddNumberToObject(c, "worst_cell_score", by[j].worst_score);
    cJSON_AddNumberToObject(c, "worst_cell_depth", by[j].worst_depth);
    cJSON_AddNumberToObject(c, "worst_cell_trials", by[j].worst_trials);
    cJSON_AddNumberToObject(c, "all_values", la_[j].all_values);
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
  return lh_niah__write_reports(out_dir, title, NULL, err);
}


lh_status lh_niah__read_done(const char *results_path, lh_niah__done **out, int *n, lh_error *err) {
  row *rows;
  lh_status st = read_rows(results_path, &rows, n, err);
  if (st) return st;
  *out = calloc((size_t)(*n ? *n : 1), sizeof **out);
  if (!*out) {
    free(rows);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  for (int i = 0; i < *n; i++) (*out)[i] = (lh_niah__done){rows[i].length, rows[i].depth, rows[i].trial};
  free(rows);
  return LH_OK;
}

int lh_niah__is_done(const lh_niah__done *d, int n, const trial *t) {
  for (int i = 0; i < n; i++)
    if (d[i].length == t->length && fabs(d[i].depth - t->depth) < 1e-9 && d[i].trial == t->index) return 1;
  return 0;
}

lh_status lh_niah__record(FILE *rf, const char *path, const trial *t, lh_niah_variant v, const char *answer,
                          const lh_niah__measure *m, int *found_all, char *note, size_t n, lh_error *err) {
  char *a = strdup(answer ? answer : "");
  if (!a) return lh_error_set(err, LH_ENOMEM, "out of memory");
  strip_answer(a);
  /* RULER's string_match_all: the share of the expected values found in the answer (one value:
   * 0 or 1); contains: all of them; exact: the answer is the expected text */
  int found = 0;
  for (int e = 0; e < t->n_expected; e++) found += strstr(a, t->expected_vals[e]) != NULL;
  const int contains = found == t->n_expected;
  const double score = t->n_expected ? (double)found / t->n_expected : 0;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "length", (double)t->length);
  cJSON_AddNumberToObject(o, "depth", t->depth);
  cJSON_AddNumberToObject(o, "trial", t->index);
  cJSON_AddStringToObject(o, "variant", lh_niah_variant_name(v));
  lh_buf nd = {0};
  for (int e = 0; e < t->n_needles; e++) {
    lh_buf_append(&nd, t->needle_text[e].data, t->needle_text[e].len - 1);
    lh_buf_append_str(&nd, e + 1 < t->n_needles ? " | " : "");
  }
  cJSON_AddStringToObject(o, "needle", nd.data ? nd.data : "");
  lh_buf_free(&nd);
  cJSON_AddStringToObject(o, "question", t->question);
  cJSON_AddStringToObject(o, "expected", t->expected);
  cJSON_AddStringToObject(o, "answer", a);
  cJSON_AddNumberToObject(o, "exact", !strcmp(a, t->expected));
  cJSON_AddNumberToObject(o, "contains", contains);
  cJSON_AddNumberToObject(o, "score", score);
  cJSON_AddNumberToObject(o, "tokens", (double)m->tokens);
  cJSON_AddNumberToObject(o, "needle_token", (double)m->needle_token);
  cJSON_AddNumberToObject(o, "tokens_computed", (double)m->tokens_computed);
  cJSON_AddNumberToObject(o, "seconds", m->seconds);
  char *line = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  lh_status st = LH_OK;
  if (!line) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  else if (fprintf(rf, "%s\n", line) < 0 || fflush(rf) != 0 || fsync(fileno(rf)) != 0)
    st = lh_error_set(err, errno == ENOSPC ? LH_EFULL : LH_EIO, "%s: %s", path, strerror(errno));
  free(line);
  *found_all = contains;
  snprintf(note, n, "%s", a);
  free(a);
  return st;
}

