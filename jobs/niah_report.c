/* niah_report.c — scoring a NIAH answer, results.jsonl, the reports made from it (results.csv,
 * summary.json, the heatmap through niah_plot.h), which sweep an OUT folder belongs to
 * (sweep.json), and the comparison of two sweeps.
 *
 * results.jsonl is the record: one whole line per finished trial, appended and fsync'd before
 * the next trial starts; a torn last line (a kill during the write) is ignored and that trial
 * rerun. The reports and the comparison are always rebuilt from it, never edited. An OUT folder
 * holds one sweep: one key and one grid (see "claiming OUT" below), so its heatmap never mixes
 * sweeps by accident.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobs/niah_internal.h"
#include "jobs/outdir.h"
#include "jobs/niah_plot.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/log.h"
#include "util/utf8.h"

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
  int line; /* in results.jsonl, from 1 */
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


/* results.jsonl for reading: a plain file of OUT, never read through a link planted there. */
static lh_status open_results(const char *path, FILE **f, lh_error *err) {
  int fd;
  lh_status st = lh_file_open_plain(path, O_RDONLY, &fd, err);
  if (st) return st;
  if (!(*f = fdopen(fd, "rb"))) {
    close(fd);
    return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  }
  return LH_OK;
}

/* A number member of o that is finite and within [lo, hi] (and whole, when whole), into *v. */
static int num_in(const cJSON *o, const char *key, double lo, double hi, int whole, double *v) {
  const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
  if (!cJSON_IsNumber(x)) return 0;
  *v = x->valuedouble;
  return isfinite(*v) && *v >= lo && *v <= hi && (!whole || *v == floor(*v));
}

/* One line of results.jsonl as a row; 0 when it is not a trial row longhaul niah writes (a
 * length, depth, trial and scores in range: a double past int64 is never cast). */
static int parse_row(const char *line, size_t len, row *r) {
  cJSON *o = cJSON_ParseWithLength(line, len);
  double length, trial, tokens = 0, computed = 0;
  int ok = cJSON_IsObject(o) && num_in(o, "length", 1, (double)LH_NIAH_MAX_LENGTH, 1, &length) &&
           num_in(o, "depth", 0, 100, 0, &r->depth) && num_in(o, "trial", 0, LH_NIAH_MAX_TRIALS - 1, 1, &trial) &&
           num_in(o, "score", 0, 1, 0, &r->score) && num_in(o, "exact", 0, 1, 0, &r->exact) &&
           num_in(o, "contains", 0, 1, 0, &r->contains);
  if (ok) { /* counters of the work done: absent in some rows, never trusted past 2^53 */
    if (!num_in(o, "tokens", 0, 9007199254740992.0, 1, &tokens)) tokens = 0;
    if (!num_in(o, "tokens_computed", 0, 9007199254740992.0, 1, &computed)) computed = 0;
    r->length = (int64_t)length, r->trial = (int)trial, r->tokens = (int64_t)tokens, r->computed = (int64_t)computed;
    r->same_set = row_same_set(o);
  }
  cJSON_Delete(o);
  return ok;
}

static int cmp_row_line(const void *a, const void *b) { /* by trial, then by line */
  const row *x = a, *y = b;
  if (x->length != y->length) return x->length < y->length ? -1 : 1;
  if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
  if (x->trial != y->trial) return x->trial - y->trial;
  return x->line - y->line;
}

/* Read finished rows (a torn last line is dropped: invariant 4). A whole line that is not a trial
 * row, or a second row of one (length, depth, trial) (two sweeps appended to one results.jsonl
 * before OUT was locked), is left out: its trial counts once, or runs again. With warn, the lines
 * left out are named in the log. LH_ENOMEM when the rows do not fit in memory. */
static lh_status read_rows(const char *path, int warn, row **rows, int *n, lh_error *err) {
  *rows = NULL;
  *n = 0;
  FILE *f = NULL;
  lh_status st = open_results(path, &f, err);
  if (st) return st == LH_ENOTFOUND ? LH_OK : st;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int cap_rows = 0, lineno = 0, bad = 0, first_bad = 0;
  while ((len = getline(&line, &cap, f)) > 0) {
    lineno++;
    if (line[len - 1] != '\n') break;
    row r = {.line = lineno};
    if (len == 1) continue; /* an empty line */
    if (!parse_row(line, (size_t)len, &r)) {
      if (!bad++) first_bad = lineno;
      continue;
    }
    if (*n == cap_rows) {
      cap_rows = cap_rows ? 2 * cap_rows : 64;
      row *g = realloc(*rows, (size_t)cap_rows * sizeof *g);
      if (!g) {
        st = lh_error_set(err, LH_ENOMEM, "out of memory reading %s", path);
        break;
      }
      *rows = g;
    }
    (*rows)[(*n)++] = r;
  }
  free(line);
  fclose(f);
  if (st) {
    free(*rows), *rows = NULL, *n = 0;
    return st;
  }
  int k = 0, dups = 0, first_dup = 0;
  if (*n) qsort(*rows, (size_t)*n, sizeof **rows, cmp_row_line);
  for (int i = 0; i < *n; i++) {
    const row *p = k ? &(*rows)[k - 1] : NULL;
    if (p && p->length == (*rows)[i].length && p->depth == (*rows)[i].depth && p->trial == (*rows)[i].trial) {
      if (!dups++ || (*rows)[i].line < first_dup) first_dup = (*rows)[i].line;
      continue;
    }
    (*rows)[k++] = (*rows)[i];
  }
  *n = k;
  if (warn && bad)
    lh_log_warn("niah: %s: %d line%s (the first: line %d) %s not a trial row longhaul niah writes; left out "
                "(a trial no other row records runs again)", path, bad, bad == 1 ? "" : "s", first_bad, bad == 1 ? "is" : "are");
  if (warn && dups)
    lh_log_warn("niah: %s: %d row%s repeat%s an earlier row's trial (the first: line %d); each trial counts once",
                path, dups, dups == 1 ? "" : "s", dups == 1 ? "s" : "", first_dup);
  return LH_OK;
}

/* Means over n > 0 rows of each trial's score, exact, contains (all values) and same_set; and the
 * tokens computed and the tokens a naive run would have computed, summed. */
typedef struct rows_total {
  double score, exact, all_values, same_set;
  int64_t computed, naive;
} rows_total;

static rows_total rows_mean(const row *rows, int n) {
  rows_total t = {0};
  for (int i = 0; i < n; i++) {
    t.score += rows[i].score, t.exact += rows[i].exact, t.all_values += rows[i].contains;
    t.same_set += rows[i].same_set, t.computed += rows[i].computed, t.naive += rows[i].tokens;
  }
  t.score /= n, t.exact /= n, t.all_values /= n, t.same_set /= n;
  return t;
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

/* One CSV field from a JSON value: a string quoted (its quotes doubled), a number as is, anything
 * else empty. */
static void csv_field(lh_buf *csv, const cJSON *v) {
  if (cJSON_IsString(v)) {
    lh_buf_append(csv, "\"", 1);
    for (const char *c = v->valuestring; *c; c++) {
      if (*c == '"') lh_buf_append(csv, "\"", 1);
      lh_buf_append(csv, c, 1);
    }
    lh_buf_append(csv, "\"", 1);
  } else if (cJSON_IsNumber(v)) {
    lh_buf_printf(csv, "%.10g", v->valuedouble);
  }
}

lh_status lh_niah__write_reports(const char *out_dir, const char *title, lh_niah_summary *sum, lh_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/results.jsonl", out_dir);
  row *rows;
  int n;
  lh_status st = read_rows(path, 0, &rows, &n, err);
  if (st) return st;
  if (!n) {
    free(rows);
    return lh_error_set(err, LH_ENOTFOUND, "%s has no finished trials", path);
  }
  /* CSV in a stable order, from the JSONL (which is in run order); the last four columns are what
   * a --families trial drew for its asked fact (empty without a families file) */
  FILE *f = NULL;
  if ((st = open_results(path, &f, err))) {
    free(rows);
    return st;
  }
  lh_buf csv = {0};
  lh_buf_append_str(&csv, "length,depth,trial,variant,needle,expected,answer,exact,contains,score,tokens,tokens_computed,"
                          "seconds,same_set,needle_kind,needle_template,question_template,value_kind\n");
  static const char *const keys[] = {"length", "depth", "trial", "variant", "needle", "expected", "answer", "exact",
                                     "contains", "score", "tokens", "tokens_computed", "seconds"};
  static const char *const family_keys[] = {"needle_kind", "needle", "question", "value_kind"};
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break;
    cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
    if (!o) continue;
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
      if (k) lh_buf_append(&csv, ",", 1);
      csv_field(&csv, cJSON_GetObjectItemCaseSensitive(o, keys[k]));
    }
    lh_buf_printf(&csv, ",%d", row_same_set(o));
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    for (size_t k = 0; k < sizeof family_keys / sizeof *family_keys; k++) {
      lh_buf_append(&csv, ",", 1);
      csv_field(&csv, cJSON_GetObjectItemCaseSensitive(fam, family_keys[k]));
    }
    lh_buf_append(&csv, "\n", 1);
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  snprintf(path, sizeof path, "%s/results.csv", out_dir);
  st = lh_file_write_atomic(path, csv.data, csv.len, err);
  lh_buf_free(&csv);
  const rows_total t = rows_mean(rows, n);
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
  lh_json_add_text(o, "title", title);
  cJSON_AddStringToObject(o, "score_metric", LH_NIAH_SCORE_METRIC);
  cJSON_AddNumberToObject(o, "trials", n);
  { /* how many the sweep's grid plans (sweep.json): an interrupted sweep's summary says it is partial */
    char sp[4200];
    snprintf(sp, sizeof sp, "%s/sweep.json", out_dir);
    lh_buf sb = {0};
    cJSON *sj = lh_file_read_regular(sp, 1 << 20, &sb, NULL) == LH_OK ? cJSON_ParseWithLength(sb.data, sb.len) : NULL;
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(sj, "grid");
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(g, "trials");
    if (cJSON_IsNumber(tr)) {
      const double planned = (double)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "lengths")) *
                             cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "depths")) * tr->valuedouble;
      cJSON_AddNumberToObject(o, "trials_planned", planned);
      cJSON_AddBoolToObject(o, "complete", n >= planned);
    }
    cJSON_Delete(sj);
    lh_buf_free(&sb);
  }
  cJSON_AddNumberToObject(o, "accuracy", t.score);
  cJSON_AddNumberToObject(o, "exact", t.exact);
  cJSON_AddNumberToObject(o, "all_values", t.all_values);
  cJSON_AddNumberToObject(o, "same_set", t.same_set);
  cJSON_AddNumberToObject(o, "tokens_computed", (double)t.computed);
  cJSON_AddNumberToObject(o, "tokens_naive", (double)t.naive);
  cJSON_AddNumberToObject(o, "computed_share", t.naive ? (double)t.computed / (double)t.naive : 0);
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
  cJSON *fb = lh_niah__family_breakdown(out_dir, sum); /* NULL without a families file */
  if (fb) {
    cJSON_AddItemToObject(o, "by_needle_kind", cJSON_DetachItemFromObject(fb, "by_needle_kind"));
    cJSON_AddItemToObject(o, "by_value_kind", cJSON_DetachItemFromObject(fb, "by_value_kind"));
    cJSON_Delete(fb);
  }
  if (sum) {
    sum->trials = n;
    sum->accuracy = t.score;
    sum->exact = t.exact;
    sum->all_values = t.all_values;
    sum->same_set = t.same_set;
    sum->tokens_computed = t.computed;
    sum->tokens_naive = t.naive;
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
  lh_status st = lh_file_read_regular(path, 1 << 20, &b, err);
  if (st == LH_OK) {
    cJSON *o = cJSON_ParseWithLength(b.data, b.len);
    const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "title"));
    snprintf(title, n, "%s", t ? t : "NIAH");
    cJSON_Delete(o);
  }
  lh_buf_free(&b);
  return st;
}

lh_status lh_niah_plot_dir(const char *out_dir, int wait, lh_error *err) {
  char path[4200], title[512];
  snprintf(path, sizeof path, "%s/sweep.json", out_dir);
  lh_status st = lh_file_check_regular(path, err);
  if (st) return lh_error_prefix(err, st, "%s is not a niah sweep's folder: ", out_dir);
  /* The sweep's own lock, held exclusively: a plot writes the files a sweep writes (summary.json,
   * results.csv, the heatmap) from what it reads, so a plot meanwhile would put a summary of fewer
   * trials over the sweep's newer one, or the sweep's over the plot's. */
  lh_outdir *od = NULL;
  if ((st = lh_outdir_open(out_dir, "niah.lock", wait, &od, err))) return st;
  if ((st = read_title(out_dir, title, sizeof title, err)) == LH_OK)
    st = lh_niah__write_reports(out_dir, title, NULL, err);
  if (st) lh_outdir_abandon(od); /* a lock file it made goes */
  else lh_outdir_close(od);
  return st;
}


lh_status lh_niah__read_done(const char *results_path, lh_niah__done **out, int *n, lh_error *err) {
  row *rows;
  lh_status st = read_rows(results_path, 1, &rows, n, err);
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
  lh_json_add_text(o, "needle", nd.data);
  lh_buf_free(&nd);
  lh_json_add_text(o, "question", t->question);
  if (t->family.len) { /* what a families trial drew (niah_families.c made this JSON) */
    cJSON *fam = cJSON_ParseWithLength(t->family.data, t->family.len);
    if (fam) cJSON_AddItemToObject(o, "family", fam);
  }
  lh_json_add_text(o, "expected", t->expected);
  cJSON_AddStringToObject(o, "answer", a); /* the caller made it valid UTF-8 */
  cJSON_AddItemToObject(o, "answer_token_ids", cJSON_CreateIntArray(m->answer_ids, (int)m->n_answer_ids));
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

/* ---- claiming OUT: one sweep per folder ----
 *
 * sweep.json records the sweep's key (what each trial's result depends on) and its grid (lengths,
 * depths, trials per cell). A run goes on in a folder only when both match, so a heatmap never
 * mixes sweeps or leaves holes by accident; --force discards the folder's results and starts
 * fresh; --extend grows the grid when this run's grid holds every cell and trial of the recorded
 * one (the finished trials are kept, the new ones run). A sweep.json without a grid (written
 * before grids were recorded) is checked against results.jsonl instead: every finished trial must
 * be in this run's grid. */

typedef struct grid {
  int64_t len[LH_NIAH_MAX_CELLS];
  int nl;
  double dep[LH_NIAH_MAX_CELLS];
  int nd;
  int trials;
} grid;

static int cmp_len(const void *a, const void *b) {
  const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dep(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int grid_has_len(const grid *g, int64_t v) {
  for (int i = 0; i < g->nl; i++)
    if (g->len[i] == v) return 1;
  return 0;
}
static int grid_has_dep(const grid *g, double v) {
  for (int i = 0; i < g->nd; i++)
    if (fabs(g->dep[i] - v) < 1e-9) return 1;
  return 0;
}
static void grid_add_len(grid *g, int64_t v) {
  if (!grid_has_len(g, v) && g->nl < LH_NIAH_MAX_CELLS) g->len[g->nl++] = v;
}
static void grid_add_dep(grid *g, double v) {
  if (!grid_has_dep(g, v) && g->nd < LH_NIAH_MAX_CELLS) g->dep[g->nd++] = v;
}
static void grid_sort(grid *g) {
  qsort(g->len, (size_t)g->nl, sizeof *g->len, cmp_len);
  qsort(g->dep, (size_t)g->nd, sizeof *g->dep, cmp_dep);
}

static grid params_grid(const lh_niah_params *p) {
  grid g = {.trials = p->trials};
  for (int i = 0; i < p->n_lengths; i++) grid_add_len(&g, p->lengths[i]);
  for (int i = 0; i < p->n_depths; i++) grid_add_dep(&g, p->depths[i]);
  grid_sort(&g);
  return g;
}

/* sweep.json's "grid"; 0 when it has none or it is malformed */
static int json_grid(const cJSON *o, grid *g) {
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "lengths"), *d = cJSON_GetObjectItemCaseSensitive(o, "depths"),
              *t = cJSON_GetObjectItemCaseSensitive(o, "trials");
  if (!cJSON_IsArray(l) || !cJSON_IsArray(d) || !cJSON_IsNumber(t)) return 0;
  *g = (grid){.trials = (int)t->valuedouble};
  const cJSON *v;
  cJSON_ArrayForEach(v, l) grid_add_len(g, (int64_t)cJSON_GetNumberValue(v));
  cJSON_ArrayForEach(v, d) grid_add_dep(g, cJSON_GetNumberValue(v));
  grid_sort(g);
  return 1;
}

static cJSON *grid_json(const grid *g) {
  cJSON *o = cJSON_CreateObject(), *l = cJSON_AddArrayToObject(o, "lengths"), *d = cJSON_AddArrayToObject(o, "depths");
  for (int i = 0; i < g->nl; i++) cJSON_AddItemToArray(l, cJSON_CreateNumber((double)g->len[i]));
  for (int i = 0; i < g->nd; i++) cJSON_AddItemToArray(d, cJSON_CreateNumber(g->dep[i]));
  cJSON_AddNumberToObject(o, "trials", g->trials);
  return o;
}

/* Lengths as --lengths takes them back: 1k = 1024, 1m = 1048576, else the number. */
static void lengths_text(const int64_t *v, int n, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  for (int i = 0; i < n && k < cap; i++) {
    const char *sep = i ? "," : "";
    if (v[i] % 1048576 == 0) k += (size_t)snprintf(out + k, cap - k, "%s%lldm", sep, (long long)(v[i] / 1048576));
    else if (v[i] % 1024 == 0) k += (size_t)snprintf(out + k, cap - k, "%s%lldk", sep, (long long)(v[i] / 1024));
    else k += (size_t)snprintf(out + k, cap - k, "%s%lld", sep, (long long)v[i]);
  }
}
static void depths_text(const double *v, int n, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%g", i ? "," : "", v[i]);
}

/* What differs between the grid in OUT (was) and this run's (now), as "lengths 1k,2k there, 1k,4k
 * here; ..."; empty when they are the same. */
static void grid_diff(const grid *was, const grid *now, char *out, size_t cap) {
  char a[512], b[512];
  size_t k = 0;
  out[0] = 0;
  int same_l = was->nl == now->nl, same_d = was->nd == now->nd;
  for (int i = 0; same_l && i < was->nl; i++) same_l = was->len[i] == now->len[i];
  for (int i = 0; same_d && i < was->nd; i++) same_d = fabs(was->dep[i] - now->dep[i]) < 1e-9;
  if (!same_l) {
    lengths_text(was->len, was->nl, a, sizeof a), lengths_text(now->len, now->nl, b, sizeof b);
    k += (size_t)snprintf(out + k, cap - k, "lengths %s there, %s here", a, b);
  }
  if (!same_d && k < cap) {
    depths_text(was->dep, was->nd, a, sizeof a), depths_text(now->dep, now->nd, b, sizeof b);
    k += (size_t)snprintf(out + k, cap - k, "%sdepths %s there, %s here", k ? "; " : "", a, b);
  }
  if (was->trials != now->trials && k < cap)
    snprintf(out + k, cap - k, "%strials per cell %d there, %d here", k ? "; " : "", was->trials, now->trials);
}

/* The flags of the grid holding both: what --extend needs to keep every cell of `was`. */
static void union_flags(const grid *was, const grid *now, char *out, size_t cap) {
  grid u = *now;
  for (int i = 0; i < was->nl; i++) grid_add_len(&u, was->len[i]);
  for (int i = 0; i < was->nd; i++) grid_add_dep(&u, was->dep[i]);
  if (was->trials > u.trials) u.trials = was->trials;
  grid_sort(&u);
  char l[512], d[512];
  lengths_text(u.len, u.nl, l, sizeof l);
  depths_text(u.dep, u.nd, d, sizeof d);
  snprintf(out, cap, "--lengths %s --depths %s --trials %d", l, d, u.trials);
}

/* The key fields that differ between sweep.json in OUT and this run, by name, into out. */
static void key_diff(const cJSON *was, const cJSON *now, char *out, size_t cap) {
  size_t k = 0;
  out[0] = 0;
  const cJSON *f;
  cJSON_ArrayForEach(f, now) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(was, f->string);
    if (o && cJSON_Compare(o, f, 1)) continue;
    if (k >= cap) break;
    char *a = o ? cJSON_PrintUnformatted(o) : NULL, *b = cJSON_PrintUnformatted(f);
    if (a && b && strlen(a) <= 48 && strlen(b) <= 48)
      k += (size_t)snprintf(out + k, cap - k, "%s%s %s there, %s here", k ? "; " : "", f->string, a, b);
    else
      k += (size_t)snprintf(out + k, cap - k, "%s%s", k ? "; " : "", f->string);
    free(a), free(b);
  }
  cJSON_ArrayForEach(f, was) {
    if (cJSON_GetObjectItemCaseSensitive(now, f->string) || k >= cap) continue;
    k += (size_t)snprintf(out + k, cap - k, "%s%s (only there)", k ? "; " : "", f->string);
  }
}

/* Finished trials of rows that this run's grid does not hold, described into out (empty: none). */
static void rows_outside(const row *rows, int n, const grid *now, char *out, size_t cap) {
  grid extra = {0};
  int max_trial = -1;
  for (int i = 0; i < n; i++) {
    if (!grid_has_len(now, rows[i].length)) grid_add_len(&extra, rows[i].length);
    if (!grid_has_dep(now, rows[i].depth)) grid_add_dep(&extra, rows[i].depth);
    if (rows[i].trial > max_trial) max_trial = rows[i].trial;
  }
  grid_sort(&extra);
  char a[512];
  size_t k = 0;
  out[0] = 0;
  if (extra.nl) {
    lengths_text(extra.len, extra.nl, a, sizeof a);
    k += (size_t)snprintf(out + k, cap - k, "lengths %s", a);
  }
  if (extra.nd && k < cap) {
    depths_text(extra.dep, extra.nd, a, sizeof a);
    k += (size_t)snprintf(out + k, cap - k, "%sdepths %s", k ? ", " : "", a);
  }
  if (max_trial >= now->trials && k < cap)
    snprintf(out + k, cap - k, "%s%d trials per cell", k ? ", " : "", max_trial + 1);
}

/* Remove OUT/prompts/ files named as --save-prompts names them (L<length>-D<depth>-T<trial>.txt),
 * and the folder when that empties it; other files there are left alone. */
static lh_status discard_prompts(const char *out_dir, lh_error *err) {
  char dir[4200], path[4500];
  snprintf(dir, sizeof dir, "%s/prompts", out_dir);
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? LH_OK : lh_error_set(err, LH_EIO, "--force: cannot read %s: %s", dir, strerror(errno));
  lh_status st = LH_OK;
  struct dirent *e;
  while (st == LH_OK && (errno = 0, e = readdir(d))) {
    long long len;
    double depth;
    int trial, end = 0;
    if (sscanf(e->d_name, "L%lld-D%lg-T%d.txt%n", &len, &depth, &trial, &end) != 3 || !end || e->d_name[end]) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (unlink(path) != 0 && errno != ENOENT)
      st = lh_error_set(err, LH_EIO, "--force: cannot remove %s: %s", path, strerror(errno));
  }
  if (st == LH_OK && errno) st = lh_error_set(err, LH_EIO, "--force: cannot read %s: %s", dir, strerror(errno));
  closedir(d);
  if (st == LH_OK) rmdir(dir); /* fails, harmlessly, while other files are there */
  return st;
}

/* --force: remove what an earlier sweep left in OUT (its results, the reports made from them and
 * its saved prompts; the checkpoint store stays, since checkpoints are keyed by model and tokens). */
static lh_status discard_earlier(const char *out_dir, lh_error *err) {
  static const char *const files[] = {"results.jsonl", "results.csv", "summary.json", "heatmap.png", "heatmap.svg"};
  char path[4200];
  snprintf(path, sizeof path, "%s/results.jsonl", out_dir);
  row *rows;
  int n;
  lh_status st = read_rows(path, 0, &rows, &n, err);
  if (st) return st;
  free(rows);
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
    snprintf(path, sizeof path, "%s/%s", out_dir, files[i]);
    if (unlink(path) != 0 && errno != ENOENT)
      return lh_error_set(err, LH_EIO, "--force: cannot remove %s: %s", path, strerror(errno));
  }
  if ((st = discard_prompts(out_dir, err))) return st;
  if (n) lh_log_info("niah: --force: discarded the %d finished trials in %s; the sweep starts fresh", n, out_dir);
  return LH_OK;
}

/* An earlier sweep.json (text) and results.jsonl (rows) against this run's (now, with its grid g):
 * LH_OK when this run may go on there; title gets the earlier title. */
static lh_status check_earlier(const lh_niah_params *p, const char *text, const cJSON *now, const grid *g,
                               const row *rows, int nr, char *title, size_t title_n, lh_error *err) {
  const char *out = p->out_dir;
  char why[768], flags[1100];
  cJSON *was = cJSON_Parse(text);
  if (!was)
    return lh_error_set(err, LH_EFORMAT, "%s/sweep.json is not JSON; use another --out, or --force to discard the "
                        "folder's results and start fresh", out);
  key_diff(cJSON_GetObjectItemCaseSensitive(was, "key"), cJSON_GetObjectItemCaseSensitive(now, "key"), why, sizeof why);
  lh_status st = LH_OK;
  grid old = {0};
  if (*why) {
    st = lh_error_set(err, LH_EINVAL, "%s holds results of a different sweep (%s); use another --out, or --force to "
                      "discard them and start fresh", out, why);
  } else if (json_grid(cJSON_GetObjectItemCaseSensitive(was, "grid"), &old)) {
    grid_diff(&old, g, why, sizeof why);
  }
  if (st == LH_OK && *why) {
    union_flags(&old, g, flags, sizeof flags);
    int superset = g->trials >= old.trials;
    for (int i = 0; i < old.nl; i++) superset &= grid_has_len(g, old.len[i]);
    for (int i = 0; i < old.nd; i++) superset &= grid_has_dep(g, old.dep[i]);
    if (!p->extend)
      st = lh_error_set(err, LH_EINVAL, "%s holds a sweep over other cells (%s): one heatmap of both would have grey "
                        "cells or mixed trial counts. Use another --out, --force to discard it and start fresh, or "
                        "--extend %s (every cell of both) to grow it", out, why, flags);
    else if (!superset)
      st = lh_error_set(err, LH_EINVAL, "--extend grows the sweep in %s and keeps every cell and trial it has (%s); "
                        "pass %s", out, why, flags);
    else
      lh_log_info("niah: --extend: the sweep in %s grows (%s); its %d finished trials are kept", out, why, nr);
  }
  if (st == LH_OK) {
    rows_outside(rows, nr, g, why, sizeof why);
    if (*why)
      st = lh_error_set(err, LH_EINVAL, "%s/results.jsonl has finished trials outside this run's grid (%s); use "
                        "another --out, or --force to discard them and start fresh", out, why);
  }
  const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(was, "title"));
  if (st == LH_OK && t) snprintf(title, title_n, "%s", t);
  cJSON_Delete(was);
  return st;
}

lh_status lh_niah__claim_out(const lh_niah_params *p, const char *sweep_json, char *title, size_t title_n,
                             lh_error *err) {
  char path[4200], results[4200];
  if (p->force && p->extend)
    return lh_error_set(err, LH_EINVAL, "--force starts the sweep in %s afresh and --extend adds to it: pass one",
                        p->out_dir);
  snprintf(path, sizeof path, "%s/sweep.json", p->out_dir);
  snprintf(results, sizeof results, "%s/results.jsonl", p->out_dir);
  cJSON *now = cJSON_Parse(sweep_json);
  if (!now) return lh_error_set(err, LH_ENOMEM, "out of memory");
  const grid g = params_grid(p);
  cJSON_AddItemToObject(now, "grid", grid_json(&g));
  lh_status st = LH_OK;
  if (p->force) {
    st = discard_earlier(p->out_dir, err);
  } else {
    row *rows = NULL;
    int nr = 0;
    st = read_rows(results, 0, &rows, &nr, err);
    if (st == LH_OK && lh_is_file(path)) {
      lh_buf old = {0};
      if ((st = lh_file_read_regular(path, 1 << 20, &old, err)) == LH_OK)
        st = check_earlier(p, old.data, now, &g, rows, nr, title, title_n, err);
      lh_buf_free(&old);
    } else if (st == LH_OK && nr) {
      st = lh_error_set(err, LH_EINVAL, "%s holds %d finished trials but no sweep.json to say which sweep made them; "
                        "use another --out, or --force to discard them and start fresh", results, nr);
    }
    free(rows);
  }
  if (st == LH_OK) {
    cJSON_ReplaceItemInObjectCaseSensitive(now, "title", lh_json_text(title));
    char *js = cJSON_PrintUnformatted(now);
    st = js ? lh_file_write_atomic(path, js, strlen(js), err) : lh_error_set(err, LH_ENOMEM, "out of memory");
    free(js);
  }
  cJSON_Delete(now);
  return st;
}

/* ---- two sweeps side by side ---- */

typedef struct side {
  const char *dir;
  char name[256], title[512];
  row *rows;
  int n;             /* finished trials */
  lh_niah_cell *cells;
  int nc;
  double score, all;
} side;

/* A sweep's finished trials, cells and title (its sweep.json's, else its folder's name). */
static lh_status side_load(side *s, const char *dir, const char *which, lh_error *err) {
  char path[4200], real[4096];
  s->dir = dir;
  if (!lh_is_dir(dir)) return lh_error_set(err, LH_ENOTFOUND, "%s: %s is not a folder", which, dir);
  const char *base = realpath(dir, real) ? strrchr(real, '/') : NULL;
  snprintf(s->name, sizeof s->name, "%s", base && base[1] ? base + 1 : dir);
  lh_utf8_fit(s->name, sizeof s->name); /* drawn and quoted as text */
  snprintf(path, sizeof path, "%s/results.jsonl", dir);
  lh_status st = read_rows(path, 1, &s->rows, &s->n, err);
  if (st) return lh_error_prefix(err, st, "%s: ", which);
  if (!s->n)
    return lh_error_set(err, LH_ENOTFOUND, "%s: %s has no finished trials; compare takes two folders written by "
                        "`longhaul niah`", which, path);
  if (!(s->cells = rows_cells(s->rows, s->n, &s->nc))) return lh_error_set(err, LH_ENOMEM, "out of memory");
  const rows_total t = rows_mean(s->rows, s->n);
  s->score = t.score, s->all = t.all_values;
  if (read_title(dir, s->title, sizeof s->title, NULL) != LH_OK) snprintf(s->title, sizeof s->title, "%s", s->name);
  lh_utf8_fit(s->title, sizeof s->title);
  return LH_OK;
}

static void side_free(side *s) {
  free(s->rows);
  free(s->cells);
}

static const lh_niah_cell *side_cell(const side *s, int64_t length, double depth) {
  for (int i = 0; i < s->nc; i++)
    if (s->cells[i].length == length && fabs(s->cells[i].depth - depth) < 1e-9) return &s->cells[i];
  return NULL;
}

/* The sweep's cells as "lengths 1k,2k; depths 0,50,100" for a message. */
static void side_grid_text(const side *s, char *out, size_t cap) {
  grid g = {0};
  for (int i = 0; i < s->nc; i++) grid_add_len(&g, s->cells[i].length), grid_add_dep(&g, s->cells[i].depth);
  grid_sort(&g);
  char l[512], d[512];
  lengths_text(g.len, g.nl, l, sizeof l);
  depths_text(g.dep, g.nd, d, sizeof d);
  snprintf(out, cap, "lengths %s; depths %s", l, d);
}

static void csv_num(lh_buf *b, double v) {
  if (!isnan(v)) lh_buf_printf(b, "%.10g", v);
}
static void json_num(cJSON *o, const char *k, double v) {
  if (isnan(v)) cJSON_AddNullToObject(o, k);
  else cJSON_AddNumberToObject(o, k, v);
}

static cJSON *side_json(const side *s) {
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "dir", s->dir);
  cJSON_AddStringToObject(o, "name", s->name); /* both made UTF-8 by side_load */
  cJSON_AddStringToObject(o, "title", s->title);
  cJSON_AddNumberToObject(o, "trials", s->n);
  cJSON_AddNumberToObject(o, "cells", s->nc);
  cJSON_AddNumberToObject(o, "score", s->score);
  cJSON_AddNumberToObject(o, "all_values", s->all);
  cJSON *la = cJSON_AddArrayToObject(o, "lengths");
  length_acc L[LH_NIAH_MAX_CELLS];
  const int nl = cells_lengths(s->cells, s->nc, L, LH_NIAH_MAX_CELLS);
  for (int j = 0; j < nl; j++) {
    cJSON *x = cJSON_CreateObject();
    cJSON_AddNumberToObject(x, "length", (double)L[j].length);
    cJSON_AddNumberToObject(x, "trials", L[j].trials);
    cJSON_AddNumberToObject(x, "accuracy", L[j].accuracy);
    cJSON_AddNumberToObject(x, "all_values", L[j].all_values);
    cJSON_AddItemToArray(la, x);
  }
  return o;
}

lh_status lh_niah_compare(const char *a_dir, const char *b_dir, const char *out_dir, lh_niah_comparison *c,
                          lh_error *err) {
  memset(c, 0, sizeof *c);
  side A = {0}, B = {0};
  lh_status st = side_load(&A, a_dir, "A", err);
  if (st == LH_OK) st = side_load(&B, b_dir, "B", err);
  /* the union of the cells, by length then depth (both lists are in that order) */
  lh_niah_cell *u = NULL;
  int nu = 0;
  if (st == LH_OK && !(u = calloc((size_t)(A.nc + B.nc), sizeof *u))) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  for (int i = 0, j = 0; st == LH_OK && (i < A.nc || j < B.nc);) {
    const lh_niah_cell *x = i < A.nc ? &A.cells[i] : NULL, *y = j < B.nc ? &B.cells[j] : NULL;
    int order = !x ? 1 : !y ? -1 : x->length != y->length ? (x->length < y->length ? -1 : 1)
              : fabs(x->depth - y->depth) < 1e-9 ? 0 : x->depth < y->depth ? -1 : 1;
    u[nu++] = order <= 0 ? *x : *y;
    i += order <= 0, j += order >= 0;
  }
  if (st == LH_OK) {
    c->cells_a = A.nc, c->cells_b = B.nc, c->trials_a = A.n, c->trials_b = B.n;
    c->score_a = A.score, c->score_b = B.score, c->all_values_a = A.all, c->all_values_b = B.all;
    length_acc la[LH_NIAH_MAX_CELLS], lb[LH_NIAH_MAX_CELLS];
    const int nla = cells_lengths(A.cells, A.nc, la, LH_NIAH_MAX_CELLS),
              nlb = cells_lengths(B.cells, B.nc, lb, LH_NIAH_MAX_CELLS);
    for (int i = 0; i < nu; i++) {
      const lh_niah_cell *x = side_cell(&A, u[i].length, u[i].depth), *y = side_cell(&B, u[i].length, u[i].depth);
      if (!c->n_lengths || c->by_length[c->n_lengths - 1].length != u[i].length) {
        lh_niah_compare_length L = {u[i].length, NAN, NAN, 0, 0};
        for (int k = 0; k < nla; k++)
          if (la[k].length == L.length) L.a = la[k].accuracy;
        for (int k = 0; k < nlb; k++)
          if (lb[k].length == L.length) L.b = lb[k].accuracy;
        c->by_length[c->n_lengths++] = L;
      }
      if (x && y) {
        lh_niah_compare_length *L = &c->by_length[c->n_lengths - 1];
        c->common++, c->common_a += x->score, c->common_b += y->score;
        L->common++, L->diff += y->score - x->score;
      }
    }
    for (int j = 0; j < c->n_lengths; j++)
      c->by_length[j].diff = c->by_length[j].common ? c->by_length[j].diff / c->by_length[j].common : NAN;
    if (!c->common) {
      char ga[1100], gb[1100];
      side_grid_text(&A, ga, sizeof ga);
      side_grid_text(&B, gb, sizeof gb);
      st = lh_error_set(err, LH_EINVAL, "%s (%s) and %s (%s) have no cell (length and depth) in common, so there is "
                        "nothing to compare; compare sweeps that share at least one cell", a_dir, ga, b_dir, gb);
    } else {
      c->common_a /= c->common, c->common_b /= c->common;
    }
  }
  if (st == LH_OK) {
    if (out_dir) snprintf(c->out_dir, sizeof c->out_dir, "%s", out_dir);
    else snprintf(c->out_dir, sizeof c->out_dir, "%s/compare-with-%s", a_dir, B.name);
    st = lh_mkdir_p(c->out_dir, err);
  }
  if (st == LH_OK) {
    lh_buf csv = {0};
    lh_buf_append_str(&csv, "length,depth,a_score,a_trials,a_all_values,b_score,b_trials,b_all_values,diff,in\n");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "score_metric", LH_NIAH_SCORE_METRIC);
    cJSON_AddItemToObject(o, "a", side_json(&A));
    cJSON_AddItemToObject(o, "b", side_json(&B));
    cJSON *co = cJSON_AddObjectToObject(o, "common");
    cJSON_AddNumberToObject(co, "cells", c->common);
    cJSON_AddNumberToObject(co, "a_score", c->common_a);
    cJSON_AddNumberToObject(co, "b_score", c->common_b);
    cJSON_AddNumberToObject(co, "diff", c->common_b - c->common_a);
    cJSON_AddStringToObject(co, "weighting", "each common cell counts once");
    cJSON_AddNumberToObject(o, "cells_only_a", A.nc - c->common);
    cJSON_AddNumberToObject(o, "cells_only_b", B.nc - c->common);
    cJSON *la = cJSON_AddArrayToObject(o, "lengths");
    for (int j = 0; j < c->n_lengths; j++) {
      const lh_niah_compare_length *L = &c->by_length[j];
      cJSON *x = cJSON_CreateObject();
      cJSON_AddNumberToObject(x, "length", (double)L->length);
      json_num(x, "a_accuracy", L->a);
      json_num(x, "b_accuracy", L->b);
      cJSON_AddNumberToObject(x, "common_cells", L->common);
      json_num(x, "diff", L->diff);
      cJSON_AddItemToArray(la, x);
    }
    cJSON *ca = cJSON_AddArrayToObject(o, "cells");
    for (int i = 0; i < nu; i++) {
      const lh_niah_cell *x = side_cell(&A, u[i].length, u[i].depth), *y = side_cell(&B, u[i].length, u[i].depth);
      const char *in = x && y ? "both" : x ? "a" : "b";
      const double d = x && y ? y->score - x->score : NAN;
      cJSON *e = cJSON_CreateObject();
      cJSON_AddNumberToObject(e, "length", (double)u[i].length);
      cJSON_AddNumberToObject(e, "depth", u[i].depth);
      json_num(e, "a_score", x ? x->score : NAN);
      cJSON_AddNumberToObject(e, "a_trials", x ? x->trials : 0);
      json_num(e, "a_all_values", x ? x->all_values : NAN);
      json_num(e, "b_score", y ? y->score : NAN);
      cJSON_AddNumberToObject(e, "b_trials", y ? y->trials : 0);
      json_num(e, "b_all_values", y ? y->all_values : NAN);
      json_num(e, "diff", d);
      cJSON_AddStringToObject(e, "in", in);
      cJSON_AddItemToArray(ca, e);
      lh_buf_printf(&csv, "%lld,%.10g,", (long long)u[i].length, u[i].depth);
      csv_num(&csv, x ? x->score : NAN);
      lh_buf_printf(&csv, ",%d,", x ? x->trials : 0);
      csv_num(&csv, x ? x->all_values : NAN);
      lh_buf_append_str(&csv, ",");
      csv_num(&csv, y ? y->score : NAN);
      lh_buf_printf(&csv, ",%d,", y ? y->trials : 0);
      csv_num(&csv, y ? y->all_values : NAN);
      lh_buf_append_str(&csv, ",");
      csv_num(&csv, d);
      lh_buf_printf(&csv, ",%s\n", in);
    }
    char *js = cJSON_Print(o);
    cJSON_Delete(o);
    char path[4200];
    snprintf(path, sizeof path, "%s/compare.json", c->out_dir);
    st = js ? lh_file_write_atomic(path, js, strlen(js), err) : lh_error_set(err, LH_ENOMEM, "out of memory");
    free(js);
    snprintf(path, sizeof path, "%s/compare.csv", c->out_dir);
    if (st == LH_OK) st = lh_file_write_atomic(path, csv.data, csv.len, err);
    lh_buf_free(&csv);
  }
  if (st == LH_OK) {
    char png[4200], svg[4200];
    snprintf(png, sizeof png, "%s/compare.png", c->out_dir);
    snprintf(svg, sizeof svg, "%s/compare.svg", c->out_dir);
    const lh_niah_sweep_view va = {A.cells, A.nc, A.name, A.title}, vb = {B.cells, B.nc, B.name, B.title};
    st = lh_niah_plot_compare(&va, &vb, png, svg, err);
  }
  free(u);
  side_free(&A);
  side_free(&B);
  return st;
}
