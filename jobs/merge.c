/* merge.c — `longhaul merge`: the shards' output files into one (see merge.h for what is refused).
 *
 * How a batch line finds its shard line. Shard files are in batch order, so each has a cursor
 * that only moves forward; batch line i (custom_id c) takes the line under a cursor whose
 * custom_id is c. One custom_id can name several batch lines: the batch parser (jobs/batch.c)
 * rejects every line after the first that uses it, and those rejections are in every shard. So
 * the line under shard s's cursor answers batch line i exactly when shard s still holds more lines
 * with custom_id c than the batch has lines with c after i; otherwise it is a later rejection.
 * Then for line i:
 *   - rejected by the batch parser: every shard has the same line; it is written once;
 *   - otherwise one shard has it (the one whose group it was), or every shard has the same 400
 *     line (a request the runner rejects before grouping, such as a chat it cannot render);
 *   - no shard: the owner has not finished; two or more (otherwise): shards of different runs.
 * An output line that is an error has its errors-I-of-N.jsonl line (same custom_id and error)
 * under that shard's errors cursor; it is written to errors.jsonl in the same order.
 *
 * Invariants
 *  1. Nothing is written unless every batch line got exactly one line, every shard line was used
 *     and every line's id is the one this batch gives its custom_id.
 *  2. Lines are copied byte for byte; nothing is re-rendered.
 *  3. OUT/output.jsonl and OUT/errors.jsonl are written atomically under OUT/longhaul.lock, after
 *     each shard's lock was found free (a shard that is running has not written its final file);
 *     taking a shard's lock for that moment rewrites the holder text in its lock file, as any run does,
 *     and a lock file made for that moment is removed after it.
 * It must never write or remove a shard's output, errors or record files, or its store.
 */
#define _GNU_SOURCE
#include "jobs/merge.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "jobs/batch.h"
#include "jobs/outdir.h"
#include "jobs/outnames.h"
#include "jobs/runner.h"
#include "jobs/shard.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/utf8.h"

#define MAX_SHARDS 100000
#define MAX_PROBLEMS 6

lh_merge_params lh_merge_default_params(void) {
  lh_merge_params p = {0};
  return p;
}

typedef struct line {
  const char *p;   /* the line's bytes, '\n' included, inside its file's buffer */
  size_t n;
  int lineno;      /* 1-based, for messages */
  char *custom_id;
  char *id;        /* the response id, checked against the batch line it answers */
  char *error;     /* the "error" member rendered compactly; NULL when it is null */
  int status;      /* response.status_code; 0 when absent */
  int after;       /* lines after this one in the same file with the same custom_id */
} line;

typedef struct sfile {
  char name[64];   /* output-2-of-4.jsonl */
  lh_buf data;
  line *lines;
  int n, next;
} sfile;

typedef struct merge {
  const lh_merge_params *p;
  int nshards;
  sfile *out, *errs; /* [nshards] */
  lh_batch batch;
  int *later;        /* [batch.n] batch lines after i with the same custom_id */
  char digest[65];
  lh_buf problems;   /* "; "-separated, the first MAX_PROBLEMS */
  int nproblems;
} merge;

static void problem(merge *M, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(merge *M, const char *fmt, ...) {
  if (M->nproblems++ >= MAX_PROBLEMS) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (M->problems.len) lh_buf_append_str(&M->problems, "; ");
  lh_buf_append_str(&M->problems, msg);
}

/* ---- finding the shards ---- */

/* Whether shard s of n holds its lock in dir (a run of it is going), without creating the lock. */
static int shard_running(const char *dir, int s, int n) {
  char lock[64], path[4200];
  lh_outname_build(LH_OUTNAME_LOCK, s, n, lock, sizeof lock);
  snprintf(path, sizeof path, "%s/%s", dir, lock);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  const int held = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  close(fd);
  return held;
}

/* Whether the files at paths a and b are one file (a link to the other, or both links to one). */
static int same_file(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Pick N among the OUT/output-I-of-N.jsonl files and check that all N shards and their errors
 * files are there. A shard without its output file that is running is LH_EBUSY, not missing. */
static lh_status find_shards(merge *M, lh_error *err) {
  const char *dir = M->p->out_dir;
  DIR *d = opendir(dir);
  if (!d) return lh_error_set(err, LH_ENOTFOUND, "%s: cannot open the output folder", dir);
  int seen_n[8] = {0}, seen_count[8] = {0}, nseen = 0, others = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int i, n;
    if (!lh_outname_shard(LH_OUTNAME_OUTPUT, e->d_name, &i, &n)) continue;
    if (M->p->shards && n != M->p->shards) continue;
    if (n < 2 || n > MAX_SHARDS || i < 0 || i >= n) {
      problem(M, "%s/%s is not a shard of a split (need 0 <= I < N, N >= 2)", dir, e->d_name);
      continue;
    }
    int k = 0;
    while (k < nseen && seen_n[k] != n) k++;
    if (k == nseen && nseen < 8) seen_n[nseen++] = n;
    if (k < 8) seen_count[k]++;
    else others++;
  }
  closedir(d);
  if (M->nproblems) return LH_ECORRUPT;
  if (!nseen) {
    if (M->p->shards)
      return lh_error_set(err, LH_ENOTFOUND, "%s holds no output-I-of-%d.jsonl: no shard of %d ran there", dir,
                          M->p->shards, M->p->shards);
    return lh_error_set(err, LH_ENOTFOUND,
                        "%s holds no shard outputs (output-I-of-N.jsonl): run the batch with --shard I/N into it first",
                        dir);
  }
  if (nseen > 1 || others) {
    for (int x = 1; x < nseen; x++) /* smallest N first: the message does not depend on readdir's order */
      for (int y = x; y > 0 && seen_n[y] < seen_n[y - 1]; y--) {
        int t = seen_n[y]; seen_n[y] = seen_n[y - 1]; seen_n[y - 1] = t;
        t = seen_count[y]; seen_count[y] = seen_count[y - 1]; seen_count[y - 1] = t;
      }
    lh_buf b = {0};
    for (int k = 0; k < nseen; k++)
      lh_buf_printf(&b, "%s%d file%s of N=%d", k ? ", " : "", seen_count[k], seen_count[k] == 1 ? "" : "s", seen_n[k]);
    problem(M,
            "%s holds shards of several splits (%s%s): pass --shards N to merge one of them, or remove the other "
            "split's output-*-of-*.jsonl files",
            dir, b.data ? b.data : "", others ? ", and more" : "");
    lh_buf_free(&b);
    return LH_ECORRUPT;
  }
  M->nshards = seen_n[0];
  M->out = calloc((size_t)M->nshards, sizeof *M->out);
  M->errs = calloc((size_t)M->nshards, sizeof *M->errs);
  if (!M->out || !M->errs) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_buf missing = {0};
  int nmissing = 0;
  for (int s = 0; s < M->nshards; s++) {
    lh_outname_build(LH_OUTNAME_OUTPUT, s, M->nshards, M->out[s].name, sizeof M->out[s].name);
    lh_outname_build(LH_OUTNAME_ERRORS, s, M->nshards, M->errs[s].name, sizeof M->errs[s].name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, M->out[s].name);
    if (!lh_is_file(path)) {
      if (shard_running(dir, s, M->nshards)) {
        lh_buf_free(&missing);
        return lh_error_set(err, LH_EBUSY, "shard %d/%d is still running (it has not written %s yet): merge once "
                            "every shard has ended", s, M->nshards, M->out[s].name);
      }
      if (nmissing++ < 8) lh_buf_printf(&missing, "%s%d", nmissing > 1 ? ", " : "", s);
      continue;
    }
    snprintf(path, sizeof path, "%s/%s", dir, M->errs[s].name);
    if (!lh_is_file(path))
      problem(M, "%s/%s is missing although %s is there: rerun shard %d/%d", dir, M->errs[s].name, M->out[s].name, s,
              M->nshards);
    /* merge replaces output.jsonl and errors.jsonl: a shard file that is one of them would end as
     * the whole batch's lines (invariant: no shard file is ever written) */
    for (int a = 0; a < 4; a++) {
      char sp[4200], mp[4200], mname[64];
      lh_outname_build(a & 1 ? LH_OUTNAME_ERRORS : LH_OUTNAME_OUTPUT, 0, 1, mname, sizeof mname);
      snprintf(sp, sizeof sp, "%s/%s", dir, a & 2 ? M->errs[s].name : M->out[s].name);
      snprintf(mp, sizeof mp, "%s/%s", dir, mname);
      if (same_file(sp, mp))
        problem(M, "%s is %s (a link to it): merging would write over shard %d/%d's lines; put the shard's own file "
                "there", sp, mp, s, M->nshards);
    }
  }
  if (nmissing)
    problem(M, "shard%s %s%s of %d %s missing (no %s/output-I-of-%d.jsonl): run %s with --shard I/%d first",
            nmissing == 1 ? "" : "s", missing.data, nmissing > 8 ? ", ..." : "", M->nshards,
            nmissing == 1 ? "is" : "are", dir, M->nshards, nmissing == 1 ? "it" : "them", M->nshards);
  lh_buf_free(&missing);
  return M->nproblems ? LH_ECORRUPT : LH_OK;
}

/* A shard that holds its lock is still running: its files are not final. */
static lh_status check_idle(merge *M, lh_error *err) {
  for (int s = 0; s < M->nshards; s++) {
    char lock[64];
    lh_outname_build(LH_OUTNAME_LOCK, s, M->nshards, lock, sizeof lock);
    lh_outdir *o = NULL;
    lh_status st = lh_outdir_open(M->p->out_dir, lock, 0, &o, err);
    lh_outdir_abandon(o); /* a look, not a run: a lock file it made goes */
    if (st == LH_EBUSY)
      return lh_error_prefix(err, st, "shard %d/%d is still running (merge once every shard has ended): ", s,
                             M->nshards);
    if (st != LH_OK) return st;
  }
  return LH_OK;
}

/* ---- the batch ---- */

static lh_status file_digest(const char *path, char out[65], lh_error *err) {
  lh_buf b = {0};
  lh_status st = lh_file_read_regular(path, (size_t)1 << 34, &b, err);
  if (st == LH_OK) {
    uint8_t d[32];
    lh_sha256_buf(b.data, b.len, d);
    lh_hex(d, 32, out);
  }
  lh_buf_free(&b);
  return st;
}

/* The batch: --batch, or the one the shards' records name (they must agree); its digest must be
 * the one every record gives. The records that name a model must name the same one, and those
 * that hold settings the same settings. */
static lh_status find_batch(merge *M, lh_merge_report *rep, lh_error *err) {
  lh_shard_record first = {0}, with_settings = {0};
  int first_s = -1, model_s = -1, settings_s = -1;
  char model_id[65] = "";
  for (int s = 0; s < M->nshards; s++) {
    char name[64], path[4200];
    lh_outname_build(LH_OUTNAME_RECORD, s, M->nshards, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", M->p->out_dir, name);
    lh_shard_record r;
    lh_error e;
    lh_status st = lh_shard_record_read(path, &r, &e);
    if (st == LH_ENOTFOUND) continue;
    if (st != LH_OK) {
      problem(M, "%s", e.msg);
      continue;
    }
    if (r.index != s || r.count != M->nshards) {
      problem(M, "%s says it is shard %d/%d", path, r.index, r.count);
      continue;
    }
    if (first_s < 0) {
      first = r;
      first_s = s;
    } else if (strcmp(r.batch_sha256, first.batch_sha256)) {
      problem(M,
              "shards of different batches: shard %d ran %s (sha256 %.12s...), shard %d ran %s (sha256 %.12s...)",
              first_s, first.batch, first.batch_sha256, s, r.batch, r.batch_sha256);
    }
    if (r.model_id[0] && model_s < 0) {
      model_s = s;
      memcpy(model_id, r.model_id, sizeof model_id);
    } else if (r.model_id[0] && strcmp(r.model_id, model_id)) {
      /* their answers would be merged as one run's; the split itself depends on the model too */
      problem(M,
              "shards of different models: shard %d ran model %.12s..., shard %d ran model %.12s... (`longhaul model "
              "info` prints a folder's id): rerun the shards of the wrong model with the right one",
              model_s, model_id, s, r.model_id);
    }
    char key[64], va[160], vb[160], ks[700];
    if (r.settings[0] && settings_s < 0) {
      settings_s = s;
      with_settings = r;
    } else if (lh_shard_settings_differ(&with_settings, &r, key, va, vb, sizeof va)) {
      /* one run of the whole batch answers every request under one setting of each */
      problem(M,
              "shards run with settings that change answers: shard %d ran with %s %s, shard %d with %s %s (each "
              "shard-I-of-N.json records its settings): rerun the shards that differ with the options of the others",
              settings_s, lh_ingest_display_str(key, 60, ks, sizeof ks), va, s, ks, vb);
    }
  }
  if (M->nproblems) return LH_ECORRUPT;
  const char *batch = M->p->batch_path;
  if (!batch && first_s < 0)
    return lh_error_set(err, LH_EINVAL,
                        "name the batch the shards ran with --batch BATCH.jsonl (%s has no shard-I-of-%d.json naming it)",
                        M->p->out_dir, M->nshards);
  if (!batch) batch = first.batch;
  snprintf(rep->batch_path, sizeof rep->batch_path, "%s", batch);
  lh_status st = file_digest(batch, M->digest, err);
  if (st != LH_OK)
    return lh_error_prefix(err, st, M->p->batch_path ? "--batch: " : "the batch named by %s/shard-%d-of-%d.json: ",
                           M->p->out_dir, first_s, M->nshards);
  memcpy(rep->batch_sha256, M->digest, 65);
  if (first_s >= 0 && strcmp(first.batch_sha256, M->digest)) {
    problem(M,
            "the shards ran another batch than %s: its content has sha256 %.12s..., %s/shard-%d-of-%d.json records "
            "%.12s... (%s)%s",
            batch, M->digest, M->p->out_dir, first_s, M->nshards, first.batch_sha256, first.batch,
            M->p->batch_path ? "" : ": the file changed since the shards ran");
    return LH_ECORRUPT;
  }
  if ((st = lh_batch_load(batch, &M->batch, err)) != LH_OK) return st;
  return LH_OK;
}

/* ---- reading shard files ---- */

typedef struct key {
  const char *id;
  int k;
} key;

static int cmp_key(const void *a, const void *b) {
  const key *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  return c ? c : (x->k > y->k) - (x->k < y->k);
}

/* after[k] = how many of ids[k+1..n) equal ids[k]. */
static lh_status count_after(const char *const *ids, int n, int *after) {
  key *ks = malloc((size_t)(n ? n : 1) * sizeof *ks);
  if (!ks) return LH_ENOMEM;
  for (int k = 0; k < n; k++) ks[k] = (key){ids[k], k};
  qsort(ks, (size_t)n, sizeof *ks, cmp_key);
  for (int a = 0; a < n;) {
    int b = a;
    while (b < n && !strcmp(ks[b].id, ks[a].id)) b++;
    for (int j = a; j < b; j++) after[ks[j].k] = b - 1 - j;
    a = b;
  }
  free(ks);
  return LH_OK;
}

/* Read one shard file into lines, checking each line's form and id. */
static lh_status read_file(merge *M, sfile *f, int s, lh_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", M->p->out_dir, f->name);
  lh_status st = lh_file_read_regular(path, (size_t)1 << 40, &f->data, err);
  if (st != LH_OK) return st;
  int cap = 0;
  size_t pos = 0;
  int bad = 0;
  for (int lineno = 1; pos < f->data.len && !bad; lineno++) {
    const char *p = f->data.data + pos, *nl = memchr(p, '\n', f->data.len - pos);
    if (!nl) {
      problem(M, "%s line %d is cut short (no newline at the end of the file)", path, lineno);
      return LH_ECORRUPT;
    }
    const size_t n = (size_t)(nl - p) + 1;
    pos += n;
    const size_t valid = lh_utf8_valid_prefix((const uint8_t *)p, n);
    if (valid < n) { /* run writes valid UTF-8 only, and output.jsonl must stay so */
      problem(M, "%s line %d is not UTF-8 (at byte %zu of the line): the file was edited or damaged", path, lineno,
              valid + 1);
      return LH_ECORRUPT;
    }
    if (f->n == cap) {
      cap = cap ? cap * 2 : 256;
      line *nlines = realloc(f->lines, (size_t)cap * sizeof *nlines);
      if (!nlines) return lh_error_set(err, LH_ENOMEM, "out of memory reading %s", path);
      f->lines = nlines;
    }
    line *l = &f->lines[f->n];
    memset(l, 0, sizeof *l);
    l->p = p;
    l->n = n;
    l->lineno = lineno;
    cJSON *o = cJSON_ParseWithLength(p, n - 1);
    const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "custom_id"));
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "id"));
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "response"), "status_code");
    if (!cJSON_IsObject(o) || !cid || !id || !e || !(cJSON_IsNull(e) || cJSON_IsObject(e))) {
      problem(M, "%s line %d is not a batch output line (it needs custom_id, id and error): the file was edited", path,
              lineno);
      bad = 1;
    }
    if (!bad) {
      l->custom_id = strdup(cid);
      l->id = strdup(id);
      l->error = cJSON_IsObject(e) ? cJSON_PrintUnformatted(e) : NULL;
      l->status = cJSON_IsNumber(sc) ? (int)sc->valuedouble : 0;
      if (!l->custom_id || !l->id || (cJSON_IsObject(e) && !l->error)) bad = -1;
      f->n++;
    }
    cJSON_Delete(o);
  }
  if (bad < 0) return lh_error_set(err, LH_ENOMEM, "out of memory reading %s", path);
  if (bad) return LH_ECORRUPT;
  const char **ids = malloc((size_t)(f->n ? f->n : 1) * sizeof *ids);
  int *after = malloc((size_t)(f->n ? f->n : 1) * sizeof *after);
  st = ids && after ? LH_OK : LH_ENOMEM;
  for (int k = 0; st == LH_OK && k < f->n; k++) ids[k] = f->lines[k].custom_id;
  if (st == LH_OK) st = count_after(ids, f->n, after);
  for (int k = 0; st == LH_OK && k < f->n; k++) f->lines[k].after = after[k];
  free(ids);
  free(after);
  return st == LH_OK ? LH_OK : lh_error_set(err, st, "out of memory");
}

/* ---- the walk ---- */

static const line *head(const sfile *f) { return f->next < f->n ? &f->lines[f->next] : NULL; }

/* The errors line of an error output line taken from shard s: under s's errors cursor when the
 * runner wrote one (same custom_id and error). Appended to errs (when take) and consumed. */
static lh_status take_error_line(merge *M, int s, const line *o, lh_buf *errs, int take) {
  if (!o->error) return LH_OK;
  const line *h = head(&M->errs[s]);
  if (!h || strcmp(h->custom_id, o->custom_id) || !h->error || strcmp(h->error, o->error)) return LH_OK;
  M->errs[s].next++;
  return take ? lh_buf_append(errs, h->p, h->n) : LH_OK;
}

static lh_status walk(merge *M, lh_buf *out, lh_buf *errs, lh_merge_report *rep, lh_error *err) {
  const int N = M->nshards;
  int *claim = malloc((size_t)N * sizeof *claim);
  if (!claim) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_status st = LH_OK;
  int nmissing = 0;
  lh_buf missing = {0};
  for (int i = 0; i < M->batch.n && st == LH_OK; i++) {
    const lh_request *r = &M->batch.req[i];
    const char *c = r->custom_id;
    int k = 0;
    for (int s = 0; s < N; s++) {
      const line *h = head(&M->out[s]);
      if (h && !strcmp(h->custom_id, c) && h->after >= M->later[i]) claim[k++] = s;
    }
    const line *first = k ? head(&M->out[claim[0]]) : NULL;
    int same = k == N;
    for (int j = 1; j < k && same; j++) {
      const line *h = head(&M->out[claim[j]]);
      same = h->n == first->n && !memcmp(h->p, first->p, h->n);
    }
    const int everyone = same && first->error && first->status == 400; /* rejected before grouping */
    char want[80], cs[700], is[700]; /* the custom_id and a shard's id as a terminal shows them */
    /* the id this batch gives line i (a line the parser refused has its own, jobs/runner.h) */
    lh_runner_request_id(M->digest, c, r->error.code != LH_OK ? r->line : 0, want, sizeof want);
    if (first && strcmp(first->id, want)) {
      problem(M,
              "%s line %d (custom_id %s) has id %s where this batch gives %s: shard %d/%d ran another batch (or "
              "this file before an edit)",
              M->out[claim[0]].name, first->lineno, lh_ingest_display_str(c, 60, cs, sizeof cs),
              lh_ingest_display_str(first->id, 40, is, sizeof is), want, claim[0], N);
    } else if (r->error.code != LH_OK && !everyone) {
      problem(M, "batch line %d (custom_id %s) is malformed and every shard reports it, but %s", r->line,
              lh_ingest_display_str(c, 60, cs, sizeof cs),
              k < N ? "some shards lack its line" : "the shards' lines differ");
    } else if (!k) {
      if (nmissing++ < 5)
        lh_buf_printf(&missing, "%sline %d (%s)", nmissing > 1 ? ", " : "", r->line,
                      lh_ingest_display_str(c, 40, cs, sizeof cs));
      continue;
    } else if (k > 1 && !everyone) {
      lh_buf who = {0};
      for (int j = 0; j < k; j++) lh_buf_printf(&who, "%s%d", j ? (j + 1 == k ? " and " : ", ") : "", claim[j]);
      problem(M,
              "batch line %d (custom_id %s) is answered by shards %s of %d: they come from different runs (a "
              "shard rerun with another N, or a file copied from elsewhere)",
              r->line, lh_ingest_display_str(c, 60, cs, sizeof cs), who.data, N);
      lh_buf_free(&who);
    } else {
      st = lh_buf_append(out, first->p, first->n);
      rep->lines++;
      rep->failed += first->error != NULL;
      rep->rejected += k > 1;
    }
    /* consume what was claimed, errors lines included (written from the first claimer only) */
    for (int j = 0; j < k && st == LH_OK; j++) {
      const line *h = head(&M->out[claim[j]]);
      M->out[claim[j]].next++;
      st = take_error_line(M, claim[j], h, errs, j == 0);
    }
  }
  free(claim);
  if (st != LH_OK) {
    lh_buf_free(&missing);
    return lh_error_set(err, st, "out of memory");
  }
  if (nmissing)
    problem(M,
            "%d request%s of the batch %s no line in any shard (%s%s): %s shard has not finished; rerun it (the same "
            "command resumes), then merge again",
            nmissing, nmissing == 1 ? "" : "s", nmissing == 1 ? "has" : "have", missing.data, nmissing > 5 ? ", ..." : "",
            nmissing == 1 ? "its" : "their");
  lh_buf_free(&missing);
  for (int s = 0; s < N; s++) {
    const sfile *fs[2] = {&M->out[s], &M->errs[s]};
    for (int t = 0; t < 2; t++) {
      const line *h = head(fs[t]);
      char cs[700];
      if (h)
        problem(M,
                "%s/%s line %d (custom_id %s) matches no request of the batch%s: the shard ran another version of "
                "it, or the file was edited",
                M->p->out_dir, fs[t]->name, h->lineno, lh_ingest_display_str(h->custom_id, 60, cs, sizeof cs),
                fs[t]->n - fs[t]->next > 1 ? " (nor do the lines after it)" : "");
    }
  }
  return LH_OK;
}

/* ---- the whole merge ---- */

lh_status lh_merge_shards(const lh_merge_params *p, lh_merge_report *rep, lh_error *err) {
  merge M = {.p = p};
  memset(rep, 0, sizeof *rep);
  lh_outdir *o = NULL;
  lh_buf out = {0}, errs = {0};
  lh_status st;
  int written = 0; /* OUT/output.jsonl is this merge's */
  if (!p->out_dir) return lh_error_set(err, LH_EINVAL, "no output folder given");
  if (!lh_is_dir(p->out_dir)) return lh_error_set(err, LH_ENOTFOUND, "%s: no such folder", p->out_dir);
  char outname[64], errname[64], lock[64]; /* the whole batch's, as a run without --shard names them */
  lh_outname_build(LH_OUTNAME_OUTPUT, 0, 1, outname, sizeof outname);
  lh_outname_build(LH_OUTNAME_ERRORS, 0, 1, errname, sizeof errname);
  lh_outname_build(LH_OUTNAME_LOCK, 0, 1, lock, sizeof lock);
  snprintf(rep->output_path, sizeof rep->output_path, "%s/%s", p->out_dir, outname);
  snprintf(rep->errors_path, sizeof rep->errors_path, "%s/%s", p->out_dir, errname);
  if ((st = find_shards(&M, err)) != LH_OK) goto done;
  rep->shards = M.nshards;
  if ((st = lh_outdir_open(p->out_dir, lock, p->wait, &o, err)) != LH_OK) goto done;
  if ((st = check_idle(&M, err)) != LH_OK) goto done;
  if ((st = find_batch(&M, rep, err)) != LH_OK) goto done;
  M.later = malloc((size_t)(M.batch.n ? M.batch.n : 1) * sizeof *M.later);
  const char **ids = malloc((size_t)(M.batch.n ? M.batch.n : 1) * sizeof *ids);
  if (M.later && ids) {
    for (int i = 0; i < M.batch.n; i++) ids[i] = M.batch.req[i].custom_id;
    st = count_after(ids, M.batch.n, M.later);
  } else {
    st = LH_ENOMEM;
  }
  free(ids);
  if (st != LH_OK) {
    lh_error_set(err, st, "out of memory");
    goto done;
  }
  for (int s = 0; s < M.nshards; s++) {
    if ((st = read_file(&M, &M.out[s], s, err)) == LH_ECORRUPT) continue;
    if (st != LH_OK) goto done;
    if ((st = read_file(&M, &M.errs[s], s, err)) != LH_OK && st != LH_ECORRUPT) goto done;
  }
  if (M.nproblems) {
    st = LH_ECORRUPT;
    goto done;
  }
  if ((st = walk(&M, &out, &errs, rep, err)) != LH_OK) goto done;
  if (M.nproblems) {
    st = LH_ECORRUPT;
    goto done;
  }
  st = lh_outdir_put(o, outname, out.data ? out.data : "", out.len, err);
  written = st == LH_OK;
  if (st == LH_OK) st = lh_outdir_put(o, errname, errs.data ? errs.data : "", errs.len, err);
  if (st == LH_OK) st = lh_outdir_sweep(o, "", outname, NULL, err);
  if (st == LH_OK) st = lh_outdir_sweep(o, "", errname, NULL, err);

done:
  if (M.nproblems) {
    lh_error_set(err, LH_ECORRUPT, "%s: nothing merged: %s%s", p->out_dir, M.problems.data ? M.problems.data : "",
                 M.nproblems > MAX_PROBLEMS ? "; and more" : "");
    st = LH_ECORRUPT;
  }
  if (st != LH_OK && !written) lh_outdir_abandon(o); /* refused: no lock file it made stays */
  else lh_outdir_close(o);
  for (int s = 0; s < M.nshards && M.out; s++) {
    sfile *fs[2] = {&M.out[s], &M.errs[s]};
    for (int t = 0; t < 2; t++) {
      for (int k = 0; k < fs[t]->n; k++) {
        free(fs[t]->lines[k].custom_id);
        free(fs[t]->lines[k].id);
        free(fs[t]->lines[k].error);
      }
      free(fs[t]->lines);
      lh_buf_free(&fs[t]->data);
    }
  }
  free(M.out);
  free(M.errs);
  free(M.later);
  lh_batch_free(&M.batch);
  lh_buf_free(&M.problems);
  lh_buf_free(&out);
  lh_buf_free(&errs);
  return st;
}
