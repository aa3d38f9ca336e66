/* ingest.c — the lh_ingest handle: inputs, the reader thread, the parcel queue and the pull loop.
 *
 * Two threads and one queue. The reader thread (reader_main) walks the inputs through the
 * sources (archive.c, archive_walk.c), which frame documents (frame.c) into the reader's current
 * parcel: framed text, span marks (text offsets whose token index the consumer must find) and
 * finished entries. A full parcel goes onto the queue; the caller's thread pops it in
 * lh_ingest_next, tokenizes its text (when a tokenizer was given), turns marks into token
 * indices, and returns the entries whose spans are final.
 *
 * States (checked at every public entry):
 *
 *     ADDING --lh_ingest_next (starts the reader)--> STREAMING --last parcel, ok--> DONE
 *                                                        \--last parcel, failed--> FAILED
 *
 * Invariants: parcels reach the consumer in the order the reader filled them, so text offsets,
 * mark ids and entries are all increasing; at most MAX_PARCELS parcels exist, which bounds memory
 * and makes the reader wait for a slow consumer; the reader always pushes exactly one parcel
 * marked last (even when cancelled), and lh_ingest_close always joins the reader. The consumer
 * never touches the reader's state except through the queue and the published stats, both under
 * the mutex. Library code: nothing here prints or exits.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/ingest_internal.h"
#include "util/fs.h"

#define MAX_PARCELS 6
#define MAX_PARCEL_ENTRIES 4096

typedef enum { ST_ADDING, ST_STREAMING, ST_DONE, ST_FAILED } ing_state;

struct lh_ingest {
  lh_ingest_params p;
  char *template_copy;
  char **globs; /* include then exclude copies */
  char **ex_paths; /* exclude_paths copies */
  char *root;      /* realpath of confine_root, NULL when none */
  lh_tmpl tmpl;
  lh_globset include, exclude;
  lh_input *inputs;
  size_t n_inputs, cap_inputs;
  int has_stdin;
  int64_t source_total;
  ing_state state;
  lh_status fail_status;
  char fail_msg[LH_ERROR_MSG_MAX];

  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  lh_parcel *q_head, *q_tail, *free_parcels;
  int n_alloc;
  int cancel;
  lh_reader r;
  lh_reader_stats pub; /* the reader's counters as last published, under mu */
  lh_buf notes;        /* lines about inputs without text (the reader appends, under mu) */
  size_t n_notes;
  double t_start, t_end;

  lh_parcel *held; /* the parcel the last batch's text points into */
  lh_ientry *ready;
  size_t n_ready, cap_ready;
  lh_ingest_entry *bents;
  size_t cap_bents;
  lh_tokside *tok; /* NULL in text-only mode */
  lh_i32vec ids;
  int64_t tokens_total;
  double tokenize_seconds;
  double tokenize_cpu;
  int tok_threads;
};

int lh_ingest_auto_tokenizer_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 4 ? 4 : (int)n;
}

lh_ingest_params lh_ingest_default_params(void) {
  lh_ingest_params p;
  memset(&p, 0, sizeof p);
  p.max_file_bytes = 256ll << 20;
  p.max_total_bytes = 4ll << 30;
  p.max_decompressed_bytes = 64ll << 30;
  p.max_ratio = 200;
  p.ratio_grace_bytes = 256ll << 20;
  p.sniff_bytes = 1 << 20;
  p.max_invalid_share = 0.10;
  p.order = LH_INGEST_SORT_ARCHIVE;
  p.sort_memory = 256ll << 20;
  p.on_error = LH_INGEST_ON_ERROR_FAIL;
  p.batch_bytes = 1 << 20;
  p.decompress_members = 1;
  return p;
}

/* ---- key sets ---- */

uint64_t lh_key_of(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a final mix */
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  h ^= h >> 31;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return h ? h : 1;
}

static size_t key_slot(uint64_t k, size_t cap) { return (size_t)(k ^ (k >> 32)) & (cap - 1); }

int lh_keyset_has(const lh_keyset *s, uint64_t key) {
  if (!s->cap) return 0;
  for (size_t i = key_slot(key, s->cap);; i = (i + 1) & (s->cap - 1)) {
    if (!s->k[i]) return 0;
    if (s->k[i] == key) return 1;
  }
}

int lh_keyset_add(lh_keyset *s, uint64_t key) {
  if (lh_keyset_has(s, key)) return 0;
  if (2 * (s->n + 1) > s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    uint64_t *nk = calloc(cap, sizeof *nk);
    if (!nk) return -1;
    for (size_t i = 0; i < s->cap; i++) {
      if (!s->k[i]) continue;
      size_t j = key_slot(s->k[i], cap);
      while (nk[j]) j = (j + 1) & (cap - 1);
      nk[j] = s->k[i];
    }
    free(s->k);
    s->k = nk;
    s->cap = cap;
  }
  size_t j = key_slot(key, s->cap);
  while (s->k[j]) j = (j + 1) & (s->cap - 1);
  s->k[j] = key;
  s->n++;
  return 0;
}

void lh_keyset_clear(lh_keyset *s) {
  if (s->k) memset(s->k, 0, s->cap * sizeof *s->k);
  s->n = 0;
}

void lh_keyset_free(lh_keyset *s) {
  free(s->k);
  memset(s, 0, sizeof *s);
}

int lh_path_under(const char *path, const char *root, size_t root_len) {
  if (root_len == 1 && root[0] == '/') return path[0] == '/';
  return !strncmp(path, root, root_len) && (path[root_len] == 0 || path[root_len] == '/');
}

int lh_fd_path(int fd, char *out, size_t n) {
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t k = readlink(proc, out, n - 1);
  if (k <= 0) {
    snprintf(out, n, "(unknown)");
    return 0;
  }
  out[k] = 0;
  return 1;
}

/* ---- parcels ---- */

static void parcel_reset(lh_parcel *c) {
  for (size_t i = 0; i < c->n_ents; i++) free(c->ents[i].own);
  c->n_ents = 0;
  c->n_marks = 0;
  lh_buf_clear(&c->text);
  c->last = 0;
  c->status = LH_OK;
  c->msg[0] = 0;
  c->next = NULL;
}

static void parcel_free(lh_parcel *c) {
  if (!c) return;
  parcel_reset(c);
  lh_buf_free(&c->text);
  lh_buf_free(&c->open_doc);
  free(c->marks);
  free(c->ents);
  free(c);
}

/* Reader side: a fresh parcel, waiting while MAX_PARCELS are in use. NULL when cancelled or out of
 * memory. */
static lh_parcel *parcel_get(lh_ingest *ing) {
  pthread_mutex_lock(&ing->mu);
  while (!ing->cancel && !ing->free_parcels && ing->n_alloc >= MAX_PARCELS) pthread_cond_wait(&ing->cv, &ing->mu);
  lh_parcel *c = NULL;
  if (!ing->cancel) {
    if (ing->free_parcels) {
      c = ing->free_parcels;
      ing->free_parcels = c->next;
      c->next = NULL;
    } else if ((c = calloc(1, sizeof *c))) {
      ing->n_alloc++;
    }
  }
  pthread_mutex_unlock(&ing->mu);
  return c;
}

static void parcel_recycle(lh_ingest *ing, lh_parcel *c) {
  if (!c) return;
  parcel_reset(c);
  pthread_mutex_lock(&ing->mu);
  c->next = ing->free_parcels;
  ing->free_parcels = c;
  pthread_cond_broadcast(&ing->cv);
  pthread_mutex_unlock(&ing->mu);
}

static void parcel_push(lh_ingest *ing, lh_parcel *c) {
  /* Only the document being read can still send an entry that points back at an older mark. */
  lh_reader *r = &ing->r;
  c->live_mark = r->doc.active && r->doc.mark_start >= 0 ? r->doc.mark_start : r->mark_next;
  c->open_doc.len = 0;
  if (r->doc.active && r->doc.path) lh_buf_append(&c->open_doc, r->doc.path, r->doc.path_len);
  pthread_mutex_lock(&ing->mu);
  c->next = NULL;
  if (ing->q_tail) ing->q_tail->next = c;
  else ing->q_head = c;
  ing->q_tail = c;
  ing->pub = ing->r.st;
  pthread_cond_broadcast(&ing->cv);
  pthread_mutex_unlock(&ing->mu);
}

static lh_parcel *parcel_pop(lh_ingest *ing) {
  pthread_mutex_lock(&ing->mu);
  while (!ing->q_head) pthread_cond_wait(&ing->cv, &ing->mu);
  lh_parcel *c = ing->q_head;
  ing->q_head = c->next;
  if (!ing->q_head) ing->q_tail = NULL;
  c->next = NULL;
  pthread_mutex_unlock(&ing->mu);
  return c;
}

/* ---- reader-side emission (declared in ingest_internal.h) ---- */

static void parcel_start(lh_reader *r) {
  r->cur->text_base = r->text_pos;
  r->cur->mark_base = r->mark_next;
}

static lh_status flush(lh_reader *r) {
  lh_ingest *ing = r->ing;
  if (lh_reader_cancelled(r)) return lh_error_set(&r->err, LH_EINTR, "ingest cancelled");
  lh_parcel *next = parcel_get(ing);
  if (!next) {
    if (lh_reader_cancelled(r)) return lh_error_set(&r->err, LH_EINTR, "ingest cancelled");
    return lh_error_set(&r->err, LH_ENOMEM, "out of memory for an ingest parcel");
  }
  parcel_push(ing, r->cur);
  r->cur = next;
  parcel_start(r);
  return LH_OK;
}

int lh_reader_cancelled(lh_reader *r) { return __atomic_load_n(&r->ing->cancel, __ATOMIC_RELAXED); }

void lh_reader_add_read_time(lh_reader *r, double t0) { r->st.read_seconds += lh_now() - t0; }

lh_status lh_reader_source_progress(lh_reader *r, int64_t source_bytes) {
  r->st.source_bytes = source_bytes;
  if (source_bytes - r->source_bytes_published >= (4 << 20)) {
    r->source_bytes_published = source_bytes;
    pthread_mutex_lock(&r->ing->mu);
    r->ing->pub = r->st;
    pthread_mutex_unlock(&r->ing->mu);
  }
  if (lh_reader_cancelled(r)) return lh_error_set(&r->err, LH_EINTR, "ingest cancelled");
  return LH_OK;
}

lh_buf *lh_reader_textbuf(lh_reader *r) { return &r->cur->text; }

lh_status lh_reader_text_done(lh_reader *r, size_t old_len) {
  size_t d = r->cur->text.len - old_len;
  r->text_pos += d;
  r->st.text_bytes += (int64_t)d;
  if (r->cur->text.len >= r->p->batch_bytes) return flush(r);
  return LH_OK;
}

lh_status lh_reader_text(lh_reader *r, const char *p, size_t n) {
  do { /* in pieces that fill the current parcel, so batches stay about batch_bytes */
    size_t room = r->cur->text.len < r->p->batch_bytes ? r->p->batch_bytes - r->cur->text.len : 1;
    size_t k = n < room ? n : room, old = r->cur->text.len;
    if (lh_buf_append(&r->cur->text, p, k)) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    lh_status s = lh_reader_text_done(r, old);
    if (s) return s;
    p += k, n -= k;
  } while (n);
  return LH_OK;
}

lh_status lh_reader_mark(lh_reader *r, int64_t *id) {
  lh_parcel *c = r->cur;
  if (c->n_marks == c->cap_marks) {
    size_t cap = c->cap_marks ? 2 * c->cap_marks : 256;
    uint64_t *m = realloc(c->marks, cap * sizeof *m);
    if (!m) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    c->marks = m;
    c->cap_marks = cap;
  }
  c->marks[c->n_marks++] = r->text_pos;
  *id = r->mark_next++;
  return LH_OK;
}

lh_status lh_reader_entry(lh_reader *r, lh_ientry *ie, lh_status code) {
  lh_parcel *c = r->cur;
  ie->e.input = r->input;
  if (c->n_ents == c->cap_ents) {
    size_t cap = c->cap_ents ? 2 * c->cap_ents : 64;
    lh_ientry *m = realloc(c->ents, cap * sizeof *m);
    if (!m) {
      free(ie->own);
      return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    }
    c->ents = m;
    c->cap_ents = cap;
  }
  c->ents[c->n_ents++] = *ie;
  r->st.entries++;
  r->st.by_status[ie->e.status]++;
  r->st.by_reason[ie->e.reason]++;
  if (ie->e.status == LH_ENTRY_SKIPPED) r->st.skipped_by_reason[ie->e.reason]++;
  if (ie->e.status == LH_ENTRY_ERROR) r->st.errors_by_reason[ie->e.reason]++;
  if (code != LH_OK && r->p->on_error == LH_INGEST_ON_ERROR_FAIL) {
    /* The message reaches terminals: names (and details quoting names) are shown escaped. */
    lh_buf in = {0}, name = {0}, det = {0};
    lh_ingest_display_name(r->in->name, strlen(r->in->name), 200, &in);
    lh_ingest_display_name(ie->e.detail, strlen(ie->e.detail), 600, &det);
    if (ie->e.type == LH_ENTRY_INPUT)
      lh_error_set(&r->err, code, "%s: %s", in.data ? in.data : "", det.data ? det.data : "");
    else {
      lh_ingest_display_name(ie->e.path, ie->e.path_len, 200, &name);
      lh_error_set(&r->err, code, "%s: entry '%s': %s", in.data ? in.data : "", name.data ? name.data : "",
                   det.data ? det.data : "");
    }
    lh_buf_free(&in);
    lh_buf_free(&name);
    lh_buf_free(&det);
    return code;
  }
  if (c->n_ents >= MAX_PARCEL_ENTRIES) return flush(r);
  return LH_OK;
}

/* Counts per reason as "binary 3, excluded 2" (reasons in enum order). */
static void reason_counts(lh_buf *out, const int64_t *by) {
  int any = 0;
  for (int k = 0; k < LH_REASON_COUNT; k++)
    if (by[k]) {
      lh_buf_printf(out, "%s%s %lld", any ? ", " : "", lh_entry_reason_name((lh_entry_reason)k), (long long)by[k]);
      any = 1;
    }
}

/* After an input: when it gave no document content, say why in a note. b is the reader's
 * counters before the input. */
static void note_input(lh_ingest *ing, const lh_reader_stats *b) {
  lh_reader *r = &ing->r;
  const lh_reader_stats *a = &r->st;
  int64_t entries = a->entries - b->entries;
  int64_t docs = a->by_status[LH_ENTRY_OK] + a->by_status[LH_ENTRY_PARTIAL] - b->by_status[LH_ENTRY_OK] -
                 b->by_status[LH_ENTRY_PARTIAL];
  int64_t bytes = a->document_bytes - b->document_bytes;
  if (docs > 0 && bytes > 0) return;
  lh_buf line = {0};
  lh_ingest_display_name(r->in->name, strlen(r->in->name), 200, &line);
  lh_buf_append_str(&line, ": no text: ");
  r->st.inputs_without_text++;
  if (r->no_entries[0]) {
    r->st.inputs_without_entries++;
    lh_buf_append_str(&line, r->no_entries);
  } else if (entries == 0) {
    lh_buf_append_str(&line, r->in->kind == LH_IN_DIR ? "the folder is empty" : "no entries");
  } else if (docs == 0) {
    int64_t sk[LH_REASON_COUNT], er[LH_REASON_COUNT];
    for (int k = 0; k < LH_REASON_COUNT; k++) {
      sk[k] = a->skipped_by_reason[k] - b->skipped_by_reason[k];
      er[k] = a->errors_by_reason[k] - b->errors_by_reason[k];
    }
    lh_buf_printf(&line, "%lld entr%s, none a document (skipped: ", (long long)entries, entries == 1 ? "y" : "ies");
    reason_counts(&line, sk);
    int64_t ne = 0;
    for (int k = 0; k < LH_REASON_COUNT; k++) ne += er[k];
    if (ne) {
      lh_buf_append_str(&line, "; errors: ");
      reason_counts(&line, er);
    }
    lh_buf_append_str(&line, ")");
  } else {
    lh_buf_printf(&line, "%lld document%s, all empty", (long long)docs, docs == 1 ? "" : "s");
  }
  lh_buf_append(&line, "\n", 1);
  pthread_mutex_lock(&ing->mu);
  lh_buf_append(&ing->notes, line.data, line.len);
  ing->n_notes++;
  pthread_mutex_unlock(&ing->mu);
  lh_buf_free(&line);
}

/* exclude_paths as device and inode, and confine_root as the reader sees them when it starts. */
static void resolve_walk_limits(lh_ingest *ing) {
  lh_reader *r = &ing->r;
  size_t n = ing->p.n_exclude_paths;
  r->n_ex = 0;
  if (n) {
    r->ex_dev = calloc(n, sizeof *r->ex_dev);
    r->ex_ino = calloc(n, sizeof *r->ex_ino);
    if (r->ex_dev && r->ex_ino)
      for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (stat(ing->ex_paths[i], &sb) != 0) continue;
        r->ex_dev[r->n_ex] = sb.st_dev;
        r->ex_ino[r->n_ex++] = sb.st_ino;
      }
  }
  r->root = ing->root;
  r->root_len = ing->root ? strlen(ing->root) : 0;
}

static void *reader_main(void *arg) {
  lh_ingest *ing = arg;
  lh_reader *r = &ing->r;
  resolve_walk_limits(ing);
  /* Formats that store names as UTF-16 (7z, Joliet, some zip) are converted by libarchive through
   * the thread's locale; make that UTF-8 for this thread only, whatever the program set. */
  locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
  if (!loc) loc = newlocale(LC_CTYPE_MASK, "en_US.UTF-8", (locale_t)0);
  if (loc) uselocale(loc);
  lh_status st = LH_OK;
  for (size_t i = 0; i < ing->n_inputs && st == LH_OK; i++) {
    r->input = (int)i;
    r->in = &ing->inputs[i];
    r->no_entries[0] = 0;
    lh_keyset_clear(&r->included);
    lh_reader_stats before = r->st;
    st = r->in->kind == LH_IN_DIR ? lh_source_folder(r, r->in) : lh_source_archive(r, r->in);
    lh_reader_doc_free(r);
    if (st != LH_EINTR) note_input(ing, &before);
    r->st.inputs_done++;
  }
  lh_parcel *c = r->cur;
  r->cur = NULL;
  c->last = 1;
  c->status = st;
  if (st) snprintf(c->msg, sizeof c->msg, "%s", r->err.msg);
  parcel_push(ing, c);
  if (loc) {
    uselocale(LC_GLOBAL_LOCALE);
    freelocale(loc);
  }
  return NULL;
}

/* ---- handle ---- */

static char *xstrdup(const char *s) {
  size_t n = strlen(s);
  char *d = malloc(n + 1);
  if (d) memcpy(d, s, n + 1);
  return d;
}

lh_status lh_ingest_open(const lh_ingest_params *p, lh_ingest **out, lh_error *err) {
  *out = NULL;
  if (!p) return lh_error_set(err, LH_EINVAL, "lh_ingest_open: params is NULL");
  if (p->max_file_bytes <= 0 || p->max_total_bytes <= 0 || p->max_decompressed_bytes <= 0)
    return lh_error_set(err, LH_EINVAL, "ingest: size caps must be positive");
  if (!(p->max_ratio >= 1)) return lh_error_set(err, LH_EINVAL, "ingest: max_ratio must be at least 1");
  if (p->ratio_grace_bytes < 0) return lh_error_set(err, LH_EINVAL, "ingest: ratio_grace_bytes must not be negative");
  if (p->sniff_bytes == 0) return lh_error_set(err, LH_EINVAL, "ingest: sniff_bytes must be at least 1");
  if (!(p->max_invalid_share >= 0 && p->max_invalid_share <= 1))
    return lh_error_set(err, LH_EINVAL, "ingest: max_invalid_share must be within [0, 1]");
  if (p->order != LH_INGEST_SORT_ARCHIVE && p->order != LH_INGEST_SORT_PATH)
    return lh_error_set(err, LH_EINVAL, "ingest: unknown order %d", (int)p->order);
  if (p->on_error != LH_INGEST_ON_ERROR_FAIL && p->on_error != LH_INGEST_ON_ERROR_SKIP)
    return lh_error_set(err, LH_EINVAL, "ingest: unknown on_error %d", (int)p->on_error);
  if (p->order == LH_INGEST_SORT_PATH && p->sort_memory <= 0)
    return lh_error_set(err, LH_EINVAL, "ingest: sort_memory must be positive");
  if (p->tokenizer_threads < 0 || p->tokenizer_threads > 64)
    return lh_error_set(err, LH_EINVAL, "ingest: tokenizer_threads must be within [0, 64] (0: automatic)");
  if (p->max_tokens < 0) return lh_error_set(err, LH_EINVAL, "ingest: max_tokens must not be negative (0: no limit)");
  if (p->max_tokens > 0 && !p->tokenizer)
    return lh_error_set(err, LH_EINVAL, "ingest: max_tokens needs a tokenizer to count tokens with");
  if (p->n_exclude_paths && !p->exclude_paths)
    return lh_error_set(err, LH_EINVAL, "ingest: n_exclude_paths is %zu but exclude_paths is NULL", p->n_exclude_paths);

  lh_ingest *ing = calloc(1, sizeof *ing);
  if (!ing) return lh_error_set(err, LH_ENOMEM, "out of memory");
  ing->p = *p;
  if (ing->p.batch_bytes < 4096) ing->p.batch_bytes = 4096;
  pthread_mutex_init(&ing->mu, NULL);
  pthread_cond_init(&ing->cv, NULL);
  lh_status st = LH_OK;
  ing->template_copy = xstrdup(p->template_text ? p->template_text : LH_INGEST_DEFAULT_TEMPLATE);
  size_t ng = p->n_include + p->n_exclude;
  ing->globs = calloc(ng ? ng : 1, sizeof *ing->globs);
  if (!ing->template_copy || !ing->globs) {
    st = lh_error_set(err, LH_ENOMEM, "out of memory");
    goto fail;
  }
  ing->p.template_text = ing->template_copy;
  for (size_t i = 0; i < ng; i++) {
    const char *g = i < p->n_include ? p->include[i] : p->exclude[i - p->n_include];
    if (!g || !(ing->globs[i] = xstrdup(g))) {
      st = lh_error_set(err, g ? LH_ENOMEM : LH_EINVAL, g ? "out of memory" : "ingest: NULL glob");
      goto fail;
    }
  }
  ing->p.include = (const char *const *)ing->globs;
  ing->p.exclude = (const char *const *)ing->globs + p->n_include;
  if (p->n_exclude_paths) {
    ing->ex_paths = calloc(p->n_exclude_paths, sizeof *ing->ex_paths);
    if (!ing->ex_paths) {
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
      goto fail;
    }
    for (size_t i = 0; i < p->n_exclude_paths; i++) {
      const char *x = p->exclude_paths[i];
      if (!x || !*x) {
        st = lh_error_set(err, LH_EINVAL, "ingest: exclude_paths[%zu] is empty", i);
        goto fail;
      }
      if (!(ing->ex_paths[i] = xstrdup(x))) {
        st = lh_error_set(err, LH_ENOMEM, "out of memory");
        goto fail;
      }
    }
    ing->p.exclude_paths = (const char *const *)ing->ex_paths;
  }
  if (p->confine_root) {
    struct stat sb;
    if (!*p->confine_root || !(ing->root = realpath(p->confine_root, NULL))) {
      st = lh_error_set(err, LH_ENOTFOUND, "ingest: the documents root '%s' (confine_root): %s", p->confine_root,
                        *p->confine_root ? strerror(errno) : "empty path");
      goto fail;
    }
    if (stat(ing->root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      st = lh_error_set(err, LH_EINVAL, "ingest: the documents root '%s' (confine_root) is not a folder",
                        p->confine_root);
      goto fail;
    }
    ing->p.confine_root = ing->root;
  }
  if ((st = lh_tmpl_parse(ing->template_copy, &ing->tmpl, err))) goto fail;
  if ((st = lh_globset_init(&ing->include, ing->p.include, p->n_include, err))) goto fail;
  if ((st = lh_globset_init(&ing->exclude, ing->p.exclude, p->n_exclude, err))) goto fail;
  ing->r.ing = ing;
  ing->r.p = &ing->p;
  ing->r.tmpl = &ing->tmpl;
  ing->r.include = &ing->include;
  ing->r.exclude = &ing->exclude;
  if (p->tokenizer) {
    int th = p->tokenizer_threads > 0 ? p->tokenizer_threads : lh_ingest_auto_tokenizer_threads();
    if ((st = lh_tokside_open(p->tokenizer, th, &ing->tok, err))) goto fail;
    ing->tok_threads = lh_tokside_threads(ing->tok);
  }
  lh_archive_global_init();
  *out = ing;
  return LH_OK;
fail:
  lh_ingest_close(ing);
  return st;
}

void lh_ingest_close(lh_ingest *ing) {
  if (!ing) return;
  if (ing->thread_started) {
    pthread_mutex_lock(&ing->mu);
    ing->cancel = 1;
    pthread_cond_broadcast(&ing->cv);
    pthread_mutex_unlock(&ing->mu);
    pthread_join(ing->thread, NULL);
  }
  parcel_free(ing->held);
  while (ing->q_head) {
    lh_parcel *c = ing->q_head;
    ing->q_head = c->next;
    parcel_free(c);
  }
  while (ing->free_parcels) {
    lh_parcel *c = ing->free_parcels;
    ing->free_parcels = c->next;
    parcel_free(c);
  }
  parcel_free(ing->r.cur);
  lh_reader_doc_free(&ing->r);
  lh_buf_free(&ing->r.doc.sniff);
  lh_buf_free(&ing->r.scratch);
  for (size_t i = 0; i < ing->n_ready; i++) free(ing->ready[i].own);
  free(ing->ready);
  free(ing->bents);
  lh_tokside_close(ing->tok);
  lh_i32vec_free(&ing->ids);
  for (size_t i = 0; i < ing->n_inputs; i++) {
    free(ing->inputs[i].name);
    free(ing->inputs[i].open_path);
  }
  free(ing->inputs);
  if (ing->ex_paths)
    for (size_t i = 0; i < ing->p.n_exclude_paths; i++) free(ing->ex_paths[i]);
  free(ing->ex_paths);
  free(ing->root);
  free(ing->r.ex_dev);
  free(ing->r.ex_ino);
  lh_keyset_free(&ing->r.included);
  lh_buf_free(&ing->notes);
  if (ing->globs)
    for (size_t i = 0; i < ing->p.n_include + ing->p.n_exclude; i++) free(ing->globs[i]);
  free(ing->globs);
  free(ing->template_copy);
  lh_tmpl_free(&ing->tmpl);
  lh_globset_free(&ing->include);
  lh_globset_free(&ing->exclude);
  pthread_mutex_destroy(&ing->mu);
  pthread_cond_destroy(&ing->cv);
  free(ing);
}

static lh_status add_input(lh_ingest *ing, lh_input in, lh_error *err) {
  if (ing->state != ST_ADDING) {
    free(in.name);
    free(in.open_path);
    return lh_error_set(err, LH_EINVAL, "ingest: inputs must be added before the first lh_ingest_next");
  }
  if (ing->n_inputs == ing->cap_inputs) {
    size_t cap = ing->cap_inputs ? 2 * ing->cap_inputs : 8;
    lh_input *m = realloc(ing->inputs, cap * sizeof *m);
    if (!m) {
      free(in.name);
      free(in.open_path);
      return lh_error_set(err, LH_ENOMEM, "out of memory");
    }
    ing->inputs = m;
    ing->cap_inputs = cap;
  }
  if (in.size < 0 || ing->source_total < 0) ing->source_total = -1;
  else ing->source_total += in.size;
  ing->inputs[ing->n_inputs++] = in;
  return LH_OK;
}

lh_status lh_ingest_add_path(lh_ingest *ing, const char *path, lh_error *err) {
  return lh_ingest_add_path_as(ing, path, path, err);
}

lh_status lh_ingest_add_path_as(lh_ingest *ing, const char *path, const char *name, lh_error *err) {
  if (!path || !*path) return lh_error_set(err, LH_EINVAL, "ingest: empty input path");
  if (!name || !*name) name = path;
  if (!strcmp(path, "-") != !strcmp(name, "-"))
    return lh_error_set(err, LH_EINVAL, "ingest: '-' (stdin) must be both the path and the name, or neither");
  lh_input in = {0};
  in.size = -1;
  if (!strcmp(path, "-")) {
    if (ing->has_stdin) return lh_error_set(err, LH_EINVAL, "ingest: '-' (stdin) given more than once");
    ing->has_stdin = 1;
    in.kind = LH_IN_STDIN;
  } else {
    /* stat, never open: opening a FIFO waits for a writer, a device may never end */
    struct stat sb;
    if (stat(path, &sb) != 0) /* resolving to nothing (a loop of links, a name too long) is the path's fault */
      return lh_error_set(err, errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? LH_ENOTFOUND
                               : errno == ENAMETOOLONG                              ? LH_EINVAL
                                                                                    : LH_EIO,
                          "%s: %s", name, strerror(errno));
    if (S_ISDIR(sb.st_mode)) in.kind = LH_IN_DIR;
    else if (S_ISREG(sb.st_mode)) in.kind = LH_IN_FILE, in.size = (int64_t)sb.st_size;
    else
      return lh_error_set(err, LH_EINVAL,
                          "%s: is %s, not a regular file or folder: it is not read (it could wait forever or never "
                          "end); to stream data, pipe it to standard input and name the input '-'",
                          name, lh_file_kind(sb.st_mode));
    if (ing->root) {
      char *real = realpath(path, NULL);
      int under = real && lh_path_under(real, ing->root, strlen(ing->root));
      lh_status st = LH_OK;
      if (!under)
        st = lh_error_set(err, LH_EINVAL, "%s: resolves to '%s', outside the documents root '%s' (confine_root)", name,
                          real ? real : strerror(errno), ing->root);
      free(real);
      if (st) return st;
    }
  }
  if (!(in.name = xstrdup(name)) || (strcmp(name, path) && !(in.open_path = xstrdup(path)))) {
    free(in.name);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  return add_input(ing, in, err);
}

lh_status lh_ingest_add_memory(lh_ingest *ing, const char *name, const void *data, size_t len, lh_error *err) {
  if (!data && len) return lh_error_set(err, LH_EINVAL, "ingest: memory input without data");
  lh_input in = {0};
  in.kind = LH_IN_MEMORY;
  in.mem = data;
  in.mem_len = len;
  in.size = (int64_t)len;
  if (!(in.name = xstrdup(name && *name ? name : "memory"))) return lh_error_set(err, LH_ENOMEM, "out of memory");
  return add_input(ing, in, err);
}

/* ---- the pull loop ---- */

static lh_status keep_ready(lh_ingest *ing, lh_ientry *ie) {
  if (ing->n_ready == ing->cap_ready) {
    size_t cap = ing->cap_ready ? 2 * ing->cap_ready : 256;
    lh_ientry *m = realloc(ing->ready, cap * sizeof *m);
    if (!m) return LH_ENOMEM;
    ing->ready = m;
    ing->cap_ready = cap;
  }
  ing->ready[ing->n_ready++] = *ie;
  return LH_OK;
}

static lh_status ready_cb(void *ctx, lh_ientry *ie) {
  lh_status st = keep_ready(ctx, ie);
  if (st) free(ie->own);
  return st;
}

/* The name of the entry in which the framed text's byte `off` lies: a finished entry of this
 * batch or of the tokenizer's waiting list, else the document the reader had open. */
static void entry_at(lh_ingest *ing, const lh_parcel *c, uint64_t off, lh_buf *name) {
  for (size_t i = 0; i < ing->n_ready; i++) {
    const lh_ingest_entry *e = &ing->ready[i].e;
    if (e->text_start <= off && off < e->text_end) {
      lh_ingest_display_name(e->path, e->path_len, 200, name);
      return;
    }
  }
  const lh_ingest_entry *e = lh_tokside_entry_at(ing->tok, off);
  if (e) lh_ingest_display_name(e->path, e->path_len, 200, name);
  else if (c->open_doc.len) lh_ingest_display_name(c->open_doc.data, c->open_doc.len, 200, name);
  else lh_buf_append_str(name, "(between documents)");
}

/* With max_tokens: fail once the tokens pass it, naming where. */
static lh_status check_max_tokens(lh_ingest *ing, const lh_parcel *c, int64_t before, lh_error *err) {
  int64_t max = ing->p.max_tokens;
  if (max <= 0 || ing->tokens_total <= max) return LH_OK;
  int64_t over = max - before; /* index, in this call's ids, of token max + 1 */
  if (over < 0) over = 0;
  uint64_t off = (uint64_t)lh_tokside_offset(ing->tok, (size_t)over);
  lh_buf name = {0};
  entry_at(ing, c, off, &name);
  lh_status st = lh_error_set(err, LH_ELIMIT,
                              "entry '%s': the documents pass the limit of %lld tokens at byte %llu of the framed "
                              "text (%lld tokens so far)",
                              name.data ? name.data : "", (long long)max, (unsigned long long)off,
                              (long long)ing->tokens_total);
  lh_buf_free(&name);
  return st;
}

lh_status lh_ingest_next(lh_ingest *ing, lh_ingest_batch *b, lh_error *err) {
  memset(b, 0, sizeof *b);
  b->text = "";
  if (ing->held) {
    parcel_recycle(ing, ing->held);
    ing->held = NULL;
  }
  for (size_t i = 0; i < ing->n_ready; i++) free(ing->ready[i].own);
  ing->n_ready = 0;
  b->token_base = ing->tokens_total;
  if (ing->state == ST_FAILED) return lh_error_set(err, ing->fail_status, "%s", ing->fail_msg);
  if (ing->state == ST_DONE) {
    b->done = 1;
    return LH_OK;
  }
  if (ing->state == ST_ADDING) {
    ing->t_start = lh_now();
    ing->r.cur = calloc(1, sizeof *ing->r.cur);
    if (!ing->r.cur) return lh_error_set(err, LH_ENOMEM, "out of memory");
    ing->n_alloc = 1;
    parcel_start(&ing->r);
    if (pthread_create(&ing->thread, NULL, reader_main, ing) != 0) {
      ing->state = ST_FAILED;
      ing->fail_status = LH_EIO;
      snprintf(ing->fail_msg, sizeof ing->fail_msg, "ingest: cannot start the reader thread");
      return lh_error_set(err, ing->fail_status, "%s", ing->fail_msg);
    }
    ing->thread_started = 1;
    ing->state = ST_STREAMING;
  }
  lh_parcel *c = parcel_pop(ing);
  ing->held = c;
  b->text = c->text.data ? c->text.data : "";
  b->text_len = c->text.len;
  b->text_base = c->text_base;
  if (ing->tok) {
    ing->ids.len = 0;
    double secs = 0;
    lh_error terr = {0};
    int64_t before = ing->tokens_total;
    lh_status st = lh_tokside_parcel(ing->tok, c, &ing->ids, ready_cb, ing, &secs, &terr);
    pthread_mutex_lock(&ing->mu);
    ing->tokenize_seconds += secs;
    ing->tokenize_cpu = lh_tokside_cpu_seconds(ing->tok);
    ing->tokens_total = lh_tokside_total(ing->tok);
    pthread_mutex_unlock(&ing->mu);
    if (!st) st = check_max_tokens(ing, c, before, &terr);
    if (st) {
      ing->state = ST_FAILED;
      ing->fail_status = st;
      snprintf(ing->fail_msg, sizeof ing->fail_msg, "%s", terr.msg);
      return lh_error_set(err, st, "%s", terr.msg);
    }
    b->tokens = ing->ids.data;
    b->n_tokens = ing->ids.len;
  } else {
    for (size_t i = 0; i < c->n_ents; i++) {
      if (keep_ready(ing, &c->ents[i])) {
        for (size_t j = i; j < c->n_ents; j++) free(c->ents[j].own);
        c->n_ents = 0;
        return lh_error_set(err, LH_ENOMEM, "out of memory");
      }
    }
    c->n_ents = 0; /* ownership moved to ready */
  }
  if (ing->cap_bents < ing->n_ready) {
    lh_ingest_entry *m = realloc(ing->bents, ing->n_ready * sizeof *m);
    if (!m) return lh_error_set(err, LH_ENOMEM, "out of memory");
    ing->bents = m;
    ing->cap_bents = ing->n_ready;
  }
  for (size_t i = 0; i < ing->n_ready; i++) ing->bents[i] = ing->ready[i].e;
  b->entries = ing->bents;
  b->n_entries = ing->n_ready;
  if (c->last) {
    pthread_join(ing->thread, NULL);
    ing->thread_started = 0;
    ing->t_end = lh_now();
    pthread_mutex_lock(&ing->mu);
    ing->pub = ing->r.st;
    pthread_mutex_unlock(&ing->mu);
    if (c->status != LH_OK) {
      ing->state = ST_FAILED;
      ing->fail_status = c->status;
      snprintf(ing->fail_msg, sizeof ing->fail_msg, "%s", c->msg);
      return lh_error_set(err, c->status, "%s", c->msg);
    }
    ing->state = ST_DONE;
    b->done = 1;
  }
  return LH_OK;
}

void lh_ingest_stats_get(lh_ingest *ing, lh_ingest_stats *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&ing->mu);
  lh_reader_stats s = ing->pub;
  out->tokens = ing->tokens_total;
  out->tokenize_seconds = ing->tokenize_seconds;
  out->tokenize_cpu_seconds = ing->tokenize_cpu;
  out->tokenizer_threads = ing->tok_threads;
  double t0 = ing->t_start, t1 = ing->t_end;
  int finished = ing->state == ST_DONE || ing->state == ST_FAILED;
  pthread_mutex_unlock(&ing->mu);
  out->entries = s.entries;
  memcpy(out->by_status, s.by_status, sizeof out->by_status);
  memcpy(out->by_reason, s.by_reason, sizeof out->by_reason);
  out->source_bytes = s.source_bytes;
  out->source_total = ing->source_total;
  out->content_bytes = s.content_bytes;
  out->document_bytes = s.document_bytes;
  out->text_bytes = s.text_bytes;
  out->invalid_utf8 = s.invalid_utf8;
  out->inputs_done = s.inputs_done;
  out->inputs_total = (int)ing->n_inputs;
  out->read_seconds = s.read_seconds;
  out->frame_seconds = s.frame_seconds;
  out->seconds = t0 > 0 ? (t1 > 0 ? t1 : lh_now()) - t0 : 0;
  out->documents = s.by_status[LH_ENTRY_OK] + s.by_status[LH_ENTRY_PARTIAL];
  memcpy(out->skipped_by_reason, s.skipped_by_reason, sizeof out->skipped_by_reason);
  memcpy(out->errors_by_reason, s.errors_by_reason, sizeof out->errors_by_reason);
  out->inputs_without_text = s.inputs_without_text;
  out->inputs_without_entries = s.inputs_without_entries;
  out->no_text = finished && s.document_bytes == 0;
}

size_t lh_ingest_notes(lh_ingest *ing, lh_buf *out) {
  pthread_mutex_lock(&ing->mu);
  size_t n = ing->n_notes;
  lh_buf_append(out, ing->notes.data ? ing->notes.data : "", ing->notes.len);
  pthread_mutex_unlock(&ing->mu);
  return n;
}

static lh_status counts_json(lh_buf *out, const char *key, const int64_t *by, int skip_dirs) {
  int st = lh_buf_printf(out, ",\"%s\":{", key), any = 0;
  for (int k = 0; k < LH_REASON_COUNT; k++) {
    if (!by[k] || (skip_dirs && k == LH_REASON_DIRECTORY)) continue;
    st |= lh_buf_printf(out, "%s\"%s\":%lld", any ? "," : "", lh_entry_reason_name((lh_entry_reason)k),
                        (long long)by[k]);
    any = 1;
  }
  st |= lh_buf_append(out, "}", 1);
  return st ? LH_ENOMEM : LH_OK;
}

lh_status lh_ingest_summary_json(lh_ingest *ing, lh_buf *out) {
  lh_ingest_stats s;
  lh_ingest_stats_get(ing, &s);
  lh_buf notes = {0};
  lh_ingest_notes(ing, &notes);
  int st = lh_buf_printf(out, "{\"entries\":%lld,\"documents\":%lld", (long long)s.entries, (long long)s.documents);
  st |= counts_json(out, "skipped", s.skipped_by_reason, 1);
  st |= counts_json(out, "errors", s.errors_by_reason, 0);
  st |= lh_buf_printf(out, ",\"no_text\":%s,\"notes\":[", s.no_text ? "true" : "false");
  size_t at = 0;
  for (int first = 1; at < notes.len; first = 0) {
    const char *nl = memchr(notes.data + at, '\n', notes.len - at);
    size_t len = nl ? (size_t)(nl - (notes.data + at)) : notes.len - at;
    st |= lh_buf_append_str(out, first ? "\"" : ",\"");
    st |= lh_json_escape(out, notes.data + at, len, NULL);
    st |= lh_buf_append(out, "\"", 1);
    at += len + 1;
  }
  st |= lh_buf_append_str(out, "]}");
  lh_buf_free(&notes);
  return st ? LH_ENOMEM : LH_OK;
}
