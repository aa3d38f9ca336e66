/* tokenizer_stream.c — the streaming encoder (on one thread or several) and the multi-threaded
 * encoder of one document.
 *
 * All rest on restart points (tokenizer_pipeline.c): positions Q where the ids after Q do not
 * depend on the text before Q, given the few bytes before Q as context.
 *
 * Streaming. Fed text is sanitized (invalid UTF-8 becomes U+FFFD as Python's errors="replace"
 * does; a sequence cut by the end of a feed waits for the next one) and appended to a buffer.
 * When enough new text has arrived, the buffer is encoded as a segment that is not final: the
 * pipeline reports only restart points that no later text can move, because the splitting
 * regex runs in hard-partial mode (a match or failure that needed more text says so), added
 * tokens must start more than their longest length before the end, and, with a normalizer, the
 * segment ends right before a character that starts a normalization segment (so the text before
 * it normalizes the same whatever follows). The ids before the last such point are emitted, the
 * text before it is dropped except a little context, and encoding resumes from it. The buffer
 * therefore holds O(longest stretch without a restart point), which for regex pre-tokenizers is
 * about one pre-token; re-encoding happens only after the pending text has doubled, so the
 * total work stays linear. Without any restart point inside pieces (a Prepend normalizer, no
 * splitting pre-tokenizer), text is held until an added token or the end.
 *
 * Stitching. A text cut at some place (after a newline when one is near) can be encoded from the
 * cut as if continuing, by a run that also goes an overlap past the next cut. Two such runs agree
 * after any restart point both report at the same offset and level (each run's output after it
 * equals the continuation from it), so run k's ids up to the first common point after its own
 * range and run k+1's ids from that point make exactly the one-shot encoding.
 *
 * Threads (a stream, lh_tok_stream_open_threads). The stream is cut into jobs: job k owns the
 * text [cut_k, cut_k+1) (about tk_stream_par_batch bytes) and encodes it plus an overlap into
 * job k+1's range, as a segment that is not final, with its own copy of the text. The first job of a chain starts at the
 * stream's resume point (a true restart point, with its context and level); the others start at
 * their cut as continuations. Jobs are queued in text order to the stream's worker threads
 * (fixed, started at open); the calling thread runs jobs too (the oldest queued, while more than
 * two per worker are queued, so a worker never finds the queue empty while text is at hand; jobs
 * in flight are capped at 3 per thread + 2, and a full queue waits only until one has left), and
 * emits ids in order: job k's ids up to the first restart point that jobs k and k+1
 * both report in the overlap (after job k's own range), then job k+1's from there. That point
 * becomes the resume point. At finish the rest of the text becomes final jobs. If two jobs have
 * no common point, every job after job k is dropped, job k's ids up to its last restart
 * point in the overlap (if any) are emitted, and the stream goes on as the one-thread stream from
 * the resume point until that one emits again (so texts without restart points stay linear).
 * The emitted ids and offsets are therefore exactly the one-thread stream's. Ids come out later
 * (a batch or so) than on one thread; memory is O(jobs in flight x batch).
 *
 * Threads (one document, lh_tokenizer_encode_parallel). The same jobs and workers, without
 * offsets; valid UTF-8 is encoded in place (jobs point into the caller's text), text with invalid
 * bytes goes through the stream; job sizes taper near the end so the threads finish together, and
 * whichever thread is free takes the next job (an even split by bytes is slower: per-byte costs
 * differ by a third between the halves of a source tree).
 *
 * Invariants: a stream belongs to one calling thread (its workers are its own); offsets reported
 * are in the fed byte stream; a job's input is immutable once queued and its output is read only
 * after it is DONE (both under the stream's mutex); the text from the resume point's context on
 * stays in the buffer until it is emitted.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "tokenizer/tokenizer_int.h"
#include "util/fs.h"
#include "util/log.h"

#define CTX_KEEP 256          /* bytes of context kept before a restart point */
/* encode once at least this much new text is pending (tests lower it to exercise restarts) */
size_t tk_stream_min_batch = 4096;
#define MIN_BATCH tk_stream_min_batch
/* threaded stream: the text each job owns, and its overlap into the next (read at open; tests
 * make both tiny). The batch is at least 4 overlaps. */
size_t tk_stream_par_batch = 512 << 10;
size_t tk_stream_par_overlap = 8 << 10;
#define MAX_WORKERS 63

/* A position where the fed stream and the sanitized text stop differing by `delta`. */
typedef struct fixup {
  int64_t clean; /* offset in the sanitized stream */
  int64_t delta; /* fed offset - clean offset from here on */
} fixup;

enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };

/* One job of the threaded stream. Offsets are in the sanitized stream. */
typedef struct sjob {
  const uint8_t *tp; /* the text: [0, ctx) context, then [from, seg_end) (text, or borrowed) */
  uint8_t *text;     /* own copy (a stream's); the one-document encoder borrows the caller's */
  size_t len, ctx;
  int64_t base;    /* offset of text[0] */
  int64_t from;    /* the job's own range is [from, own_end); its segment ends at seg_end */
  int64_t own_end;
  int64_t seg_end;
  uint8_t level;
  bool final;
  bool chain_start; /* from is the stream's resume point: ids are right from the first */
  bool skip;        /* dropped before it ran */
  int state;
  /* results (written by the thread that runs it) */
  lh_i32vec ids;
  int64_t *offv; /* offset of each id */
  size_t offv_cap;
  tk_restart *rs;
  size_t nrs, rs_cap;
  size_t text_cap;
  struct sjob *next_free;
  lh_status st;
  lh_error err;
  double cpu;
  size_t start_id; /* first id to emit (set when stitched to the job before) */
} sjob;

typedef struct spar {
  int nworkers;
  pthread_t tid[MAX_WORKERS];
  pthread_mutex_t mu;
  pthread_cond_t cv_work; /* workers: a job was queued, or quit */
  pthread_cond_t cv_done; /* owner: a job finished */
  bool quit;
  int busy;       /* workers running a job */
  size_t queued;  /* jobs QUEUED */
  sjob **q;       /* jobs not yet emitted, in text order */
  sjob *free_jobs; /* emitted jobs, kept with their buffers for reuse (owner's thread only) */
  size_t qlen, maxj;
  int64_t cut;    /* where the next job's own range starts */
  bool fallback;  /* stitching failed: one thread until the serial encoder emits */
  bool borrowed;  /* the buffer is the caller's text (one document): never moved, jobs do not copy */
  size_t total_hint; /* one document: its length (job sizes taper near the end); 0 for a stream */
  size_t batch, overlap;
  int64_t stitched, fallbacks;
  int nstarted;                   /* workers that have taken their index */
  int64_t owner_jobs;             /* jobs run on the calling thread */
  double worker_idle, owner_wait; /* seconds workers waited for a job; the owner for a worker */
  double tcpu[MAX_WORKERS + 1];   /* CPU seconds of jobs run by worker k (index k + 1) */
} spar;

struct lh_tok_stream {
  const lh_tokenizer *t;
  tk_ctx *c;
  lh_buf buf;     /* [0, ctx_len) context, [ctx_len, len) not yet emitted */
  size_t ctx_len;
  int64_t base;   /* sanitized-stream offset of buf[0] */
  uint8_t level;
  uint8_t held[4]; /* a UTF-8 sequence cut by the end of the last feed */
  size_t nheld;
  int64_t fed;    /* bytes fed so far */
  size_t next_try; /* pending bytes needed before the next encode attempt */
  lh_i32vec ids;
  fixup *fx;
  size_t nfx, fx_cap;
  int64_t fx_delta0; /* delta before the first kept fixup */
  bool broken;
  bool advanced;  /* the last run() emitted up to a restart point */
  bool want_offs; /* offsets are collected (the one-document encoder needs none) */
  bool specials_as_text; /* lh_tok_stream_open_text: special tokens' text is ordinary text */
  double cpu;     /* CPU seconds spent encoding, all threads */
  spar *par;      /* NULL: one thread */
};

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker_main(void *arg);
static void job_free(sjob *j);

static lh_status stream_open(const lh_tokenizer *t, int threads, size_t batch, size_t overlap, bool want_offs,
                             bool specials_as_text, lh_tok_stream **out, lh_error *err) {
  *out = NULL;
  lh_tok_stream *s = calloc(1, sizeof *s);
  if (!s) return lh_error_set(err, LH_ENOMEM, "tokenizer stream: out of memory");
  s->t = t;
  s->want_offs = want_offs;
  s->specials_as_text = specials_as_text;
  s->c = tk_ctx_get(t, err);
  if (!s->c) {
    free(s);
    return LH_ENOMEM;
  }
  s->level = TK_LEVEL_PIECE;
  s->next_try = MIN_BATCH;
  if (threads > MAX_WORKERS + 1) threads = MAX_WORKERS + 1;
  /* without restart points inside pieces there is nothing to cut at: one thread */
  if (threads > 1 && t->pretok_restart) {
    spar *p = calloc(1, sizeof *p);
    size_t maxj = 3 * (size_t)threads + 2;
    sjob **q = p ? calloc(maxj, sizeof *q) : NULL;
    if (!p || !q) {
      free(p);
      lh_tok_stream_close(s);
      return lh_error_set(err, LH_ENOMEM, "tokenizer stream: out of memory");
    }
    p->q = q;
    p->maxj = maxj;
    p->overlap = overlap ? overlap : 1;
    p->batch = batch > 4 * p->overlap ? batch : 4 * p->overlap;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    s->par = p;
    for (int k = 0; k + 1 < threads; k++) {
      if (pthread_create(&p->tid[p->nworkers], NULL, worker_main, s) != 0) break;
      p->nworkers++;
    }
    if (!p->nworkers) { /* no thread to be had: one thread */
      lh_log_debug("tokenizer stream: no worker thread could be started; encoding on one thread");
      pthread_mutex_destroy(&p->mu);
      pthread_cond_destroy(&p->cv_work);
      pthread_cond_destroy(&p->cv_done);
      free(p->q);
      free(p);
      s->par = NULL;
    }
  }
  *out = s;
  return LH_OK;
}

lh_status lh_tok_stream_open(const lh_tokenizer *t, lh_tok_stream **out, lh_error *err) {
  return stream_open(t, 1, 0, 0, true, false, out, err);
}

lh_status lh_tok_stream_open_threads(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err) {
  return stream_open(t, threads, tk_stream_par_batch, tk_stream_par_overlap, true, false, out, err);
}

lh_status lh_tok_stream_open_text(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err) {
  return stream_open(t, threads, tk_stream_par_batch, tk_stream_par_overlap, true, true, out, err);
}

lh_status lh_tok_stream_open_ids(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err) {
  return stream_open(t, threads, tk_stream_par_batch, tk_stream_par_overlap, false, false, out, err);
}

size_t tk_stream_buffered(const lh_tok_stream *s) { return s->buf.len; }

int tk_stream_threads(const lh_tok_stream *s) { return s->par ? s->par->nworkers + 1 : 1; }

void tk_stream_counts(const lh_tok_stream *s, int64_t *stitched, int64_t *fallbacks) {
  *stitched = s->par ? s->par->stitched : 0;
  *fallbacks = s->par ? s->par->fallbacks : 0;
}

double lh_tok_stream_cpu_seconds(const lh_tok_stream *s) { return s ? s->cpu : 0; }

void lh_tok_stream_close(lh_tok_stream *s) {
  if (!s) return;
  spar *p = s->par;
  if (p) {
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < p->nworkers; k++) pthread_join(p->tid[k], NULL);
    lh_log_debug("tokenizer stream: %d threads, %lld jobs on the calling thread, %lld stitched, %lld fallbacks; "
                 "workers idle %.2f s, calling thread waited %.2f s",
                 p->nworkers + 1, (long long)p->owner_jobs, (long long)p->stitched, (long long)p->fallbacks,
                 p->worker_idle, p->owner_wait);
    for (size_t i = 0; i < p->qlen; i++) job_free(p->q[i]);
    while (p->free_jobs) {
      sjob *j = p->free_jobs;
      p->free_jobs = j->next_free;
      job_free(j);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->q);
    free(p);
  }
  tk_ctx_put(s->t, s->c);
  lh_buf_free(&s->buf);
  lh_i32vec_free(&s->ids);
  free(s->fx);
  free(s);
}

static int64_t clean_to_fed(const lh_tok_stream *s, int64_t clean) {
  size_t lo = 0, hi = s->nfx;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (s->fx[m].clean <= clean)
      lo = m + 1;
    else
      hi = m;
  }
  int64_t delta = lo ? s->fx[lo - 1].delta : s->fx_delta0;
  /* inside a U+FFFD that replaced invalid bytes: the offset of those bytes */
  if (lo < s->nfx && clean > s->fx[lo].clean - 3) clean = s->fx[lo].clean - 3;
  return clean + delta;
}

static lh_status add_fixup(lh_tok_stream *s, int64_t clean, int64_t delta) {
  if (s->nfx == s->fx_cap) {
    size_t nc = s->fx_cap ? s->fx_cap * 2 : 16;
    void *p = realloc(s->fx, nc * sizeof *s->fx);
    if (!p) return LH_ENOMEM;
    s->fx = p;
    s->fx_cap = nc;
  }
  s->fx[s->nfx++] = (fixup){clean, delta};
  return LH_OK;
}

/* Append fed bytes to the buffer, sanitized; with at_end, a cut sequence is invalid too. */
static lh_status append_clean(lh_tok_stream *s, const uint8_t *p, size_t n, bool at_end) {
  size_t i = 0;
  int64_t delta = s->nfx ? s->fx[s->nfx - 1].delta : s->fx_delta0;
  while (i < n) {
    size_t v = tk_utf8_valid_prefix(p + i, n - i);
    if (lh_buf_append(&s->buf, p + i, v)) return LH_ENOMEM;
    i += v;
    if (i >= n) break;
    int inc;
    size_t bad = tk_utf8_bad_len(p + i, n - i, &inc);
    if (inc && !at_end) { /* wait for the rest of the sequence */
      memcpy(s->held, p + i, n - i);
      s->nheld = n - i;
      return LH_OK;
    }
    if (lh_buf_append(&s->buf, "\xEF\xBF\xBD", 3)) return LH_ENOMEM;
    i += bad;
    delta += (int64_t)bad - 3;
    if (add_fixup(s, s->base + (int64_t)s->buf.len, delta)) return LH_ENOMEM;
  }
  return LH_OK;
}

/* Emit n ids (with their sanitized-stream offsets offv) to the caller. */
static lh_status give(lh_tok_stream *s, const int32_t *src, const int64_t *offv, size_t n, lh_i32vec *ids,
                      int64_t **offsets, size_t *offsets_cap) {
  size_t before = ids->len;
  if (n && lh_i32vec_append(ids, src, n)) return LH_ENOMEM;
  if (offsets) {
    size_t need = ids->len;
    if (need > *offsets_cap) {
      size_t nc = *offsets_cap ? *offsets_cap : 1024;
      while (nc < need) nc *= 2;
      void *p = realloc(*offsets, nc * sizeof **offsets);
      if (!p) return LH_ENOMEM;
      *offsets = p;
      *offsets_cap = nc;
    }
    int64_t *o = *offsets + before;
    if (!s->nfx) { /* no invalid bytes replaced since the kept text began (always so in ingest) */
      int64_t d = s->fx_delta0;
      for (size_t k = 0; k < n; k++) o[k] = offv[k] + d;
    } else {
      for (size_t k = 0; k < n; k++) o[k] = clean_to_fed(s, offv[k]);
    }
  }
  return LH_OK;
}

/* Where a non-final segment may end: before a character that starts a normalization segment. */
static size_t safe_end(const lh_tokenizer *t, const uint8_t *p, size_t from, size_t n) {
  if (!t->nnorms || !t->norm_segmentable || t->norm_form < 0) return n;
  size_t e = n;
  while (e > from) {
    size_t st;
    uint32_t c = tk_utf8_prev(p, e, &st);
    uint32_t f = c;
    if (t->lower_first) {
      uint32_t lw[3];
      tk_lowercase(c, lw);
      f = lw[0];
    }
    if (tk_norm_flags((tk_form)t->norm_form, f) & TK_NF_BB) return st;
    e = st;
  }
  return from;
}

/* Make the resume point the (sanitized) offset off, at level: the context before it is kept, the
 * text before that dropped (only once it is over half the buffer, unless forced, as the serial
 * encoder needs a short context), with the offset fixups no longer needed. */
static void set_resume(lh_tok_stream *s, int64_t off, uint8_t level, bool trim) {
  size_t q = (size_t)(off - s->base);
  s->ctx_len = q;
  s->level = level;
  if (s->par && s->par->borrowed) return;
  size_t keep = q > CTX_KEEP ? q - CTX_KEEP : 0;
  while (keep < q && (s->buf.data[keep] & 0xC0) == 0x80) keep++;
  if (!keep || (!trim && keep < s->buf.len / 2)) return;
  memmove(s->buf.data, s->buf.data + keep, s->buf.len - keep);
  s->buf.len -= keep;
  s->buf.data[s->buf.len] = 0;
  s->ctx_len = q - keep;
  s->base += (int64_t)keep;
  size_t k = 0;
  while (k < s->nfx && s->fx[k].clean <= s->base) s->fx_delta0 = s->fx[k++].delta;
  if (k) memmove(s->fx, s->fx + k, (s->nfx - k) * sizeof *s->fx);
  s->nfx -= k;
}

/* The one-thread encoder: the buffer from the resume point as one segment. */
static lh_status run(lh_tok_stream *s, bool final, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                     lh_error *err) {
  tk_ctx *c = s->c;
  s->advanced = false;
  size_t end = final ? s->buf.len : safe_end(s->t, (const uint8_t *)s->buf.data, s->ctx_len, s->buf.len);
  if (end <= s->ctx_len && !final) return LH_OK;
  /* the segment starts CTX_KEEP bytes before the resume point (the buffer may hold more) */
  size_t c0b = s->ctx_len > CTX_KEEP ? s->ctx_len - CTX_KEEP : 0;
  while (c0b < s->ctx_len && (s->buf.data[c0b] & 0xC0) == 0x80) c0b++;
  tk_seg seg = {.text = (const uint8_t *)s->buf.data + c0b, .len = end - c0b, .ctx_len = s->ctx_len - c0b,
                .base = s->base + (int64_t)c0b, .level = s->level, .final = final, .want_offs = s->want_offs,
                .specials_as_text = s->specials_as_text,
                .want_restarts = !final, .restart_lo = s->base + (int64_t)s->ctx_len + 1,
                .restart_hi = s->base + (int64_t)end};
  s->ids.len = 0;
  c->ids = &s->ids;
  double c0 = thread_cpu();
  lh_status st = tk_encode_segment(s->t, c, &seg, err);
  s->cpu += thread_cpu() - c0;
  if (st) {
    s->broken = true;
    return st;
  }
  if (final) {
    if (give(s, s->ids.data, c->offv, s->ids.len, ids, offsets, offsets_cap))
      return lh_error_set(err, LH_ENOMEM, "out of memory");
    s->buf.len = 0;
    s->ctx_len = 0;
    return LH_OK;
  }
  size_t pending = s->buf.len - s->ctx_len;
  if (!c->nrs) {
    s->next_try = pending * 2 > MIN_BATCH ? pending * 2 : MIN_BATCH;
    return LH_OK;
  }
  tk_restart rp = c->rs[c->nrs - 1];
  if (give(s, s->ids.data, c->offv, rp.n_ids, ids, offsets, offsets_cap))
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  set_resume(s, rp.off, rp.level, true);
  s->advanced = true;
  size_t left = s->buf.len - s->ctx_len;
  s->next_try = left * 2 > MIN_BATCH ? left * 2 : MIN_BATCH;
  return LH_OK;
}

/* ------------------------------------------------------------------------- threaded stream */

static void job_free(sjob *j) {
  if (!j) return;
  free(j->text);
  lh_i32vec_free(&j->ids);
  free(j->offv);
  free(j->rs);
  free(j);
}

/* Encode one job with scratch c (any thread). */
static void exec_job(const lh_tok_stream *s, tk_ctx *c, sjob *j) {
  const lh_tokenizer *t = s->t;
  size_t overlap = s->par->overlap;
  double c0 = thread_cpu();
  if (!c) {
    j->st = lh_error_set(&j->err, LH_ENOMEM, "tokenizer: out of memory");
    return;
  }
  if (lh_i32vec_reserve(&j->ids, j->len / 3 + 16)) {
    j->st = lh_error_set(&j->err, LH_ENOMEM, "tokenizer: out of memory");
    return;
  }
  bool head = !j->chain_start, tail = !j->final;
  tk_seg seg = {.text = j->tp, .len = j->len, .ctx_len = j->ctx, .base = j->base, .level = j->level,
                .final = j->final, .want_offs = s->want_offs, .specials_as_text = s->specials_as_text,
                .want_restarts = head || tail,
                .restart_lo = j->from + 1, .restart_hi = tail ? j->seg_end : j->from + (int64_t)overlap};
  /* restart points are needed in the head window (to stitch to the job before) and after the
   * own range (to stitch to the job after) */
  if (tail) {
    c->rs_filter_hi = head ? j->from + (int64_t)overlap : j->from + 1;
    c->rs_filter_lo = j->own_end;
  }
  c->ids = &j->ids;
  /* the offsets go straight into the job's own array (kept across reuses, so no page faults) */
  int64_t *offv0 = c->offv;
  size_t cap0 = c->offv_cap;
  c->offv = j->offv;
  c->offv_cap = j->offv_cap;
  j->st = tk_encode_segment(t, c, &seg, &j->err);
  j->offv = c->offv;
  j->offv_cap = c->offv_cap;
  c->offv = offv0;
  c->offv_cap = cap0;
  c->noffv = 0;
  c->rs_filter_hi = c->rs_filter_lo = 0;
  c->ids = NULL;
  if (!j->st && c->nrs) {
    if (c->nrs > j->rs_cap) {
      void *q = realloc(j->rs, c->nrs * sizeof *j->rs);
      if (q) {
        j->rs = q;
        j->rs_cap = c->nrs;
      }
    }
    if (c->nrs > j->rs_cap)
      j->st = lh_error_set(&j->err, LH_ENOMEM, "tokenizer: out of memory");
    else {
      memcpy(j->rs, c->rs, c->nrs * sizeof *j->rs);
      j->nrs = c->nrs;
    }
  }
  if (!j->st && s->want_offs && j->ids.len && !j->offv) j->st = lh_error_set(&j->err, LH_ENOMEM, "tokenizer: out of memory");
  j->cpu = thread_cpu() - c0;
}

/* Under mu: the oldest (or newest) queued job, marked RUNNING; NULL if none. */
static sjob *take_queued(spar *p, bool newest) {
  if (!p->queued) return NULL;
  for (size_t i = 0; i < p->qlen; i++) {
    sjob *j = p->q[newest ? p->qlen - 1 - i : i];
    if (j->state == JOB_QUEUED) {
      j->state = JOB_RUNNING;
      p->queued--;
      return j;
    }
  }
  return NULL;
}

static void *worker_main(void *arg) {
  lh_tok_stream *s = arg;
  spar *p = s->par;
  lh_error err;
  tk_ctx *c = tk_ctx_get(s->t, &err); /* NULL: every job it takes fails with ENOMEM */
  pthread_mutex_lock(&p->mu);
  int me = ++p->nstarted;
  for (;;) {
    sjob *j = NULL;
    double w0 = lh_now();
    while (!p->quit && !(j = take_queued(p, false))) pthread_cond_wait(&p->cv_work, &p->mu);
    p->worker_idle += lh_now() - w0;
    if (!j) break;
    p->busy++;
    pthread_mutex_unlock(&p->mu);
    exec_job(s, c, j);
    pthread_mutex_lock(&p->mu);
    j->state = JOB_DONE;
    p->tcpu[me] += j->cpu;
    p->busy--;
    pthread_cond_broadcast(&p->cv_done);
  }
  pthread_mutex_unlock(&p->mu);
  if (c) tk_ctx_put(s->t, c);
  return NULL;
}

/* Under mu: run job j (already RUNNING) on the calling thread. */
static void run_here(lh_tok_stream *s, sjob *j) {
  spar *p = s->par;
  pthread_mutex_unlock(&p->mu);
  p->owner_jobs++;
  exec_job(s, s->c, j);
  pthread_mutex_lock(&p->mu);
  j->state = JOB_DONE;
  p->tcpu[0] += j->cpu;
}

/* Queue a job for the own range [from, own_end) of the buffer, its segment ending at seg_end. */
static lh_status queue_job(lh_tok_stream *s, size_t from, size_t own_end, size_t seg_end, bool final, lh_error *err) {
  spar *p = s->par;
  const uint8_t *b = (const uint8_t *)s->buf.data;
  sjob *j = p->free_jobs;
  if (j) { /* a used job: keep its buffers, clear the rest */
    p->free_jobs = j->next_free;
    sjob keep = *j;
    memset(j, 0, sizeof *j);
    j->text = keep.text;
    j->text_cap = keep.text_cap;
    j->ids = keep.ids;
    j->ids.len = 0;
    j->offv = keep.offv;
    j->offv_cap = keep.offv_cap;
    j->rs = keep.rs;
    j->rs_cap = keep.rs_cap;
  } else if (!(j = calloc(1, sizeof *j)))
    return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  /* the first job starts at the resume point, with the context and level the one-thread stream
   * would have there; the others at their cut, as continuations */
  j->chain_start = p->qlen == 0;
  j->level = j->chain_start ? s->level : TK_LEVEL_PRETOK;
  size_t ctx0 = from > CTX_KEEP ? from - CTX_KEEP : 0;
  while (ctx0 < from && (b[ctx0] & 0xC0) == 0x80) ctx0++;
  j->len = seg_end - ctx0;
  j->ctx = from - ctx0;
  if (p->borrowed) { /* the text stays where it is until the encoder returns */
    j->tp = b + ctx0;
  } else {
    if (j->len + 1 > j->text_cap) {
      free(j->text);
      j->text_cap = j->len + 1 + (j->len >> 3);
      j->text = malloc(j->text_cap);
    }
    if (!j->text) {
      j->text_cap = 0;
      j->next_free = p->free_jobs;
      p->free_jobs = j;
      return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    }
    if (j->len) memcpy(j->text, b + ctx0, j->len); /* an empty piece may have no buffer (b NULL) */
    j->text[j->len] = 0;
    j->tp = j->text;
  }
  j->base = s->base + (int64_t)ctx0;
  j->from = s->base + (int64_t)from;
  j->own_end = s->base + (int64_t)own_end;
  j->seg_end = s->base + (int64_t)seg_end;
  j->final = final;
  pthread_mutex_lock(&p->mu);
  p->q[p->qlen++] = j;
  p->queued++;
  pthread_cond_signal(&p->cv_work);
  pthread_mutex_unlock(&p->mu);
  p->cut = j->own_end;
  return LH_OK;
}

static size_t snap_cut(const uint8_t *s, size_t len, size_t at, size_t reach);

/* With the text's length known (one document): jobs shrink near the end, rest / (3 x threads)
 * within [4 overlaps, batch], so that the threads finish together. */
static size_t taper(const spar *p, size_t batch) {
  if (!p->total_hint) return batch;
  size_t rest = p->total_hint > (size_t)p->cut ? p->total_hint - (size_t)p->cut : 0;
  size_t b = rest / (3 * ((size_t)p->nworkers + 1));
  if (b > batch) b = batch;
  if (b < 4 * p->overlap) b = 4 * p->overlap;
  return b;
}

/* Queue one job of about `batch` bytes if the buffer holds its text and the overlap. */
static lh_status make_one_job(lh_tok_stream *s, size_t batch, lh_error *err) {
  spar *p = s->par;
  const uint8_t *b = (const uint8_t *)s->buf.data;
  size_t from = (size_t)(p->cut - s->base);
  size_t at = from + batch, reach = p->overlap;
  if (at + reach + p->overlap > s->buf.len) return LH_OK;
  size_t own_end = snap_cut(b, s->buf.len, at, reach);
  size_t seg_end = own_end + p->overlap;
  while (seg_end > own_end && (b[seg_end] & 0xC0) == 0x80) seg_end--; /* a character boundary */
  seg_end = safe_end(s->t, b, own_end, seg_end);
  return queue_job(s, from, own_end, seg_end, false, err);
}

/* Queue jobs of about `batch` bytes while the buffer holds their text and the overlap. */
static lh_status make_jobs(lh_tok_stream *s, size_t batch, lh_error *err) {
  spar *p = s->par;
  while (p->qlen < p->maxj) {
    size_t q0 = p->qlen;
    lh_status st = make_one_job(s, taper(p, batch), err);
    if (st || p->qlen == q0) return st;
  }
  return LH_OK;
}

/* The first restart point at or after j's own end that j and n both report (same offset and
 * level), with j's id count there at least j->start_id: true and the indices, or false. */
static bool stitch_point(const sjob *j, const sjob *n, size_t *ia, size_t *ib) {
  size_t a = 0, b = 0;
  while (a < j->nrs && b < n->nrs) {
    if (j->rs[a].off < j->own_end) {
      a++;
      continue;
    }
    if (j->rs[a].off < n->rs[b].off)
      a++;
    else if (j->rs[a].off > n->rs[b].off)
      b++;
    else if (j->rs[a].level != n->rs[b].level)
      a++, b++;
    else {
      if (j->rs[a].n_ids < j->start_id) return false;
      *ia = a;
      *ib = b;
      return true;
    }
  }
  return false;
}

/* Under mu: drop every queued job and wait for the running ones. */
static void drain(spar *p) {
  for (size_t i = 0; i < p->qlen; i++)
    if (p->q[i]->state == JOB_QUEUED) {
      p->q[i]->state = JOB_DONE;
      p->q[i]->skip = true;
      p->queued--;
    }
  for (;;) {
    bool running = false;
    for (size_t i = 0; i < p->qlen; i++) running |= p->q[i]->state == JOB_RUNNING;
    if (!running) break;
    pthread_cond_wait(&p->cv_done, &p->mu);
  }
}

/* Drop the front job (DONE) from the queue, which workers scan under mu. */
static void pop_front(lh_tok_stream *s) {
  spar *p = s->par;
  pthread_mutex_lock(&p->mu);
  sjob *j = p->q[0];
  memmove(p->q, p->q + 1, (p->qlen - 1) * sizeof *p->q);
  p->qlen--;
  pthread_mutex_unlock(&p->mu);
  s->cpu += j->cpu;
  j->next_free = p->free_jobs; /* kept for reuse: at most maxj jobs exist */
  p->free_jobs = j;
}

/* Emit what the finished jobs at the front make final. wait: HV_READY takes only what is ready;
 * HV_ROOM waits (running queued jobs here, else sleeping) until at least one job has left the
 * queue; HV_ALL until the front job is one that cannot be emitted yet: the last one and not final. */
enum { HV_READY, HV_ROOM, HV_ALL };
static lh_status harvest(lh_tok_stream *s, int wait, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                         lh_error *err) {
  spar *p = s->par;
  bool popped = false;
  for (;;) {
    if (wait == HV_ROOM && popped) wait = HV_READY;
    pthread_mutex_lock(&p->mu);
    sjob *J = NULL, *K = NULL;
    for (;;) {
      if (!p->qlen) break;
      J = p->q[0];
      K = p->qlen > 1 ? p->q[1] : NULL;
      if (J->state == JOB_DONE && (J->final || (K && K->state == JOB_DONE))) break;
      J = NULL;
      if (wait == HV_READY || (!p->q[0]->final && p->qlen < 2)) break;
      sjob *x = take_queued(p, false);
      if (x)
        run_here(s, x);
      else {
        double w0 = lh_now();
        pthread_cond_wait(&p->cv_done, &p->mu);
        p->owner_wait += lh_now() - w0;
      }
    }
    pthread_mutex_unlock(&p->mu);
    if (!J) return LH_OK;
    lh_status st = J->st ? J->st : !J->final && K->st ? K->st : LH_OK;
    if (st) {
      s->broken = true;
      lh_error_set(err, st, "%s", J->st ? J->err.msg : K->err.msg);
      pthread_mutex_lock(&p->mu);
      drain(p);
      pthread_mutex_unlock(&p->mu);
      return st;
    }
    if (J->final) {
      if (give(s, J->ids.data + J->start_id, J->offv ? J->offv + J->start_id : NULL, J->ids.len - J->start_id, ids, offsets,
               offsets_cap))
        return lh_error_set(err, LH_ENOMEM, "out of memory");
      s->ctx_len = s->buf.len;
      pop_front(s);
      popped = true;
      continue;
    }
    size_t a, b;
    if (stitch_point(J, K, &a, &b)) {
      size_t n = J->rs[a].n_ids - J->start_id;
      if (give(s, J->ids.data + J->start_id, J->offv ? J->offv + J->start_id : NULL, n, ids, offsets, offsets_cap))
        return lh_error_set(err, LH_ENOMEM, "out of memory");
      K->start_id = K->rs[b].n_ids;
      set_resume(s, J->rs[a].off, J->rs[a].level, false);
      p->stitched++;
      pop_front(s);
      popped = true;
      continue;
    }
    /* No common restart point: J is right up to its last restart point after its own range (if
     * any); everything after is dropped and the one-thread encoder takes over from there. */
    p->fallbacks++;
    lh_log_debug("tokenizer stream: jobs at %lld and %lld share no restart point; one thread from %lld",
                 (long long)J->from, (long long)K->from, (long long)(s->base + (int64_t)s->ctx_len));
    pthread_mutex_lock(&p->mu);
    drain(p);
    pthread_mutex_unlock(&p->mu);
    size_t last = SIZE_MAX;
    for (size_t i = 0; i < J->nrs; i++)
      if (J->rs[i].off >= J->own_end && J->rs[i].n_ids >= J->start_id) last = i;
    if (last != SIZE_MAX) {
      size_t n = J->rs[last].n_ids - J->start_id;
      if (give(s, J->ids.data + J->start_id, J->offv ? J->offv + J->start_id : NULL, n, ids, offsets, offsets_cap))
        return lh_error_set(err, LH_ENOMEM, "out of memory");
      set_resume(s, J->rs[last].off, J->rs[last].level, false);
    }
    while (p->qlen) pop_front(s);
    p->fallback = true;
    p->cut = s->base + (int64_t)s->ctx_len;
    s->next_try = MIN_BATCH;
    return LH_OK;
  }
}

/* After new text: queue jobs, run some here (the oldest queued, while more than two per worker
 * are queued), emit what is final, and wait only when the queue is full. */
static lh_status par_feed(lh_tok_stream *s, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap, lh_error *err) {
  spar *p = s->par;
  for (;;) {
    lh_status st = make_jobs(s, p->batch, err);
    if (st) return st;
    pthread_mutex_lock(&p->mu);
    sjob *x;
    for (;;) {
      size_t leave = 2 * (size_t)p->nworkers; /* so a worker never finds the queue empty */
      if (p->queued <= leave || !(x = take_queued(p, false))) break;
      run_here(s, x);
    }
    bool full = p->qlen >= p->maxj;
    pthread_mutex_unlock(&p->mu);
    /* a full queue: wait for the front (this makes room); else only take what is ready */
    if ((st = harvest(s, full ? HV_ROOM : HV_READY, ids, offsets, offsets_cap, err))) return st;
    if (p->fallback) return LH_OK;
    size_t from = (size_t)(p->cut - s->base);
    if (!full || from + p->batch + 2 * p->overlap > s->buf.len) return LH_OK;
  }
}

/* At the end: the rest of the text as jobs (the tail split across the threads), the last one
 * final; wait for all and emit. Returns with p->fallback set when stitching failed. */
static lh_status par_finish(lh_tok_stream *s, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                            lh_error *err) {
  spar *p = s->par;
  lh_status st;
  size_t piece = p->batch;
  for (int round = 0; round < 2; round++) {
    for (;;) {
      if ((st = make_jobs(s, piece, err))) return st;
      if (p->qlen < p->maxj) break;
      if ((st = harvest(s, HV_ROOM, ids, offsets, offsets_cap, err)) || p->fallback) return st;
    }
    size_t rest = s->buf.len - (size_t)(p->cut - s->base);
    piece = rest / (size_t)(p->nworkers + 1);
    if (piece < 4 * p->overlap) piece = 4 * p->overlap;
  }
  size_t from = (size_t)(p->cut - s->base);
  if ((st = queue_job(s, from, s->buf.len, s->buf.len, true, err))) return st;
  return harvest(s, HV_ALL, ids, offsets, offsets_cap, err);
}

lh_status lh_tok_stream_feed(lh_tok_stream *s, const char *text, size_t len, lh_i32vec *ids, int64_t **offsets,
                             size_t *offsets_cap, lh_error *err) {
  if (s->broken) return lh_error_set(err, LH_EINVAL, "tokenizer stream: an earlier call failed; open a new stream");
  if (offsets && !s->want_offs)
    return lh_error_set(err, LH_EINVAL, "tokenizer stream: opened for ids only, asked for offsets");
  s->fed += (int64_t)len;
  lh_status st = LH_OK;
  if (s->nheld) { /* the held bytes come first: feed them with the new text */
    uint8_t *tmp = malloc(s->nheld + len);
    if (!tmp) return lh_error_set(err, LH_ENOMEM, "out of memory");
    memcpy(tmp, s->held, s->nheld);
    if (len) memcpy(tmp + s->nheld, text, len);
    size_t n = s->nheld + len;
    s->nheld = 0;
    st = append_clean(s, tmp, n, false);
    free(tmp);
  } else if (len) {
    st = append_clean(s, (const uint8_t *)text, len, false);
  }
  if (st) return lh_error_set(err, LH_ENOMEM, "out of memory");
  if (s->par && !s->par->fallback) {
    st = par_feed(s, ids, offsets, offsets_cap, err);
    if (st) s->broken = true;
    return st;
  }
  if (s->buf.len - s->ctx_len >= s->next_try) {
    st = run(s, false, ids, offsets, offsets_cap, err);
    if (!st && s->par && s->advanced) { /* the one-thread encoder moved on: threads again */
      s->par->fallback = false;
      s->par->cut = s->base + (int64_t)s->ctx_len;
      st = par_feed(s, ids, offsets, offsets_cap, err);
      if (st) s->broken = true;
    }
    return st;
  }
  return LH_OK;
}

lh_status lh_tok_stream_finish(lh_tok_stream *s, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                               lh_error *err) {
  if (s->broken) return lh_error_set(err, LH_EINVAL, "tokenizer stream: an earlier call failed; open a new stream");
  if (offsets && !s->want_offs)
    return lh_error_set(err, LH_EINVAL, "tokenizer stream: opened for ids only, asked for offsets");
  if (s->nheld) {
    uint8_t tmp[4];
    size_t k = s->nheld;
    memcpy(tmp, s->held, k);
    s->nheld = 0;
    if (append_clean(s, tmp, k, true)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  lh_status st = LH_OK;
  if (s->par && !s->par->fallback) {
    st = par_finish(s, ids, offsets, offsets_cap, err);
    if (st) s->broken = true;
  }
  /* one thread (also after a failed stitch): whatever is left */
  if (!st && (!s->par || s->par->fallback || s->ctx_len < s->buf.len)) st = run(s, true, ids, offsets, offsets_cap, err);
  s->level = TK_LEVEL_PIECE;
  s->base = 0;
  s->fed = 0;
  s->nfx = 0;
  s->fx_delta0 = 0;
  s->next_try = MIN_BATCH;
  s->buf.len = 0;
  s->ctx_len = 0;
  if (s->par) {
    s->par->fallback = false;
    s->par->cut = 0;
  }
  return st;
}

/* ------------------------------------------------------------------------- one document */

static size_t snap_cut(const uint8_t *s, size_t len, size_t at, size_t reach) {
  /* just after a newline within reach, else the next character boundary */
  size_t lim = at + reach < len ? at + reach : len;
  for (size_t i = at; i < lim; i++)
    if (s[i] == '\n' && i + 1 < len) return i + 1;
  while (at < len && (s[at] & 0xC0) == 0x80) at++;
  return at;
}

lh_status lh_tokenizer_encode_parallel(const lh_tokenizer *t, const char *text, size_t len, int threads,
                                       lh_i32vec *out, lh_error *err) {
  return tk_encode_parallel_sized(t, text, len, threads, TK_PAR_OVERLAP, out, NULL, err);
}

lh_status tk_encode_parallel_sized(const lh_tokenizer *t, const char *text, size_t len, int threads,
                                   size_t overlap, lh_i32vec *out, int *used_threads, lh_error *err) {
  tk_par_stats ps;
  lh_status st = tk_encode_parallel_stats(t, text, len, threads, overlap, out, &ps, err);
  if (used_threads) *used_threads = ps.used;
  return st;
}

/* One document on a threaded stream's workers, without offsets. Valid UTF-8 (the usual case) is
 * encoded in place: the text is the stream's buffer as it is and jobs point into it (no copy at
 * all). Text with invalid bytes goes through the stream in 4 MB slices, which replaces them as it
 * appends to a buffer that stays a few MB (sanitizing a 50 MB text into a fresh copy first was a
 * serial 50 ms, mostly page faults). Either way job sizes taper near the end and threads that
 * finish a job early take the next (per-byte costs differ too much for an even split). */
lh_status tk_encode_parallel_stats(const lh_tokenizer *t, const char *text, size_t len, int threads, size_t overlap,
                                   lh_i32vec *out, tk_par_stats *stats, lh_error *err) {
  memset(stats, 0, sizeof *stats);
  stats->used = 1;
  double c0 = thread_cpu();
  if (overlap < 1) overlap = 1;
  if (threads > 64) threads = 64;
  if (threads > 1 && len / (size_t)threads < 4 * overlap) threads = (int)(len / (4 * overlap));
  if (threads < 2 || !t->pretok_restart) {
    lh_status st = lh_tokenizer_encode(t, text, len, 0, out, err);
    stats->thread_cpu[0] = thread_cpu() - c0;
    return st;
  }
  const size_t batch = 1u << 20;
  lh_tok_stream *s = NULL;
  lh_status st = stream_open(t, threads, batch, overlap, false, false, &s, err);
  if (st) return st;
  spar *p = s->par;
  if (!p) {
    st = lh_tokenizer_encode(t, text, len, 0, out, err);
  } else if (tk_utf8_valid_prefix((const uint8_t *)text, len) != len) {
    p->total_hint = len;
    const size_t slice = 4u << 20;
    for (size_t i = 0; i < len && !st; i += slice)
      st = lh_tok_stream_feed(s, text + i, len - i < slice ? len - i : slice, out, NULL, NULL, err);
    if (!st) st = lh_tok_stream_finish(s, out, NULL, NULL, err);
  } else {
    p->borrowed = true;
    p->total_hint = len;
    s->buf = (lh_buf){.data = (char *)text, .len = len, .cap = 0};
    s->fed = (int64_t)len;
    for (;;) {
      if (p->qlen >= p->maxj) { /* wait for the front (running queued jobs meanwhile) */
        if ((st = harvest(s, HV_ROOM, out, NULL, NULL, err)) || p->fallback) break;
        continue;
      }
      size_t q0 = p->qlen;
      if ((st = make_one_job(s, taper(p, batch), err)) || p->qlen == q0) break; /* the rest is final */
      pthread_mutex_lock(&p->mu);
      sjob *x;
      while (p->queued > 2 * (size_t)p->nworkers && (x = take_queued(p, false))) run_here(s, x);
      pthread_mutex_unlock(&p->mu);
      if ((st = harvest(s, HV_READY, out, NULL, NULL, err)) || p->fallback) break;
    }
    if (!st && !p->fallback) { /* the rest, final */
      if ((st = queue_job(s, (size_t)p->cut, len, len, true, err)) == LH_OK)
        st = harvest(s, HV_ALL, out, NULL, NULL, err);
    }
    if (!st && p->fallback) st = run(s, true, out, NULL, NULL, err); /* no stitch point: one thread */
    if (st) { /* the workers must be done with the text before it goes */
      pthread_mutex_lock(&p->mu);
      drain(p);
      pthread_mutex_unlock(&p->mu);
    }
    s->buf = (lh_buf){0};
  }
  if (p) {
    int nt = p->nworkers + 1;
    pthread_mutex_lock(&p->mu);
    for (int k = 1; k < nt; k++) stats->thread_cpu[k] = p->tcpu[k];
    stats->used = p->stitched ? nt : 1;
    pthread_mutex_unlock(&p->mu);
  }
  lh_tok_stream_close(s);
  stats->thread_cpu[0] = thread_cpu() - c0; /* the calling thread: its jobs, stitching, copying */
  return st;
}
