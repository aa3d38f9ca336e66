/* tokenizer_stream.c — the streaming encoder and the multi-threaded encoder of one document.
 *
 * Both rest on restart points (tokenizer_pipeline.c): positions Q where the ids after Q do not
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
 * Threads. The document is cut at T-1 places (after a newline when one is near); thread t encodes
 * from its cut as if continuing, plus an overlap into the next thread's range. The runs of
 * threads t and t+1 agree after any restart point both report at the same offset and level
 * (each run's output after it equals the continuation from it), so thread t's ids up to the
 * first common point and thread t+1's ids from it make exactly the one-shot encoding. If no
 * common point is found in the overlap, the document is encoded on one thread instead.
 *
 * Invariants: a stream belongs to one thread; offsets reported are in the fed byte stream.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include <time.h>

#include "ingest/tokenizer_int.h"
#include "util/fs.h"
#include "util/log.h"

#define CTX_KEEP 256          /* bytes of context kept before a restart point */
/* encode once at least this much new text is pending (tests lower it to exercise restarts) */
size_t tk_stream_min_batch = 4096;
#define MIN_BATCH tk_stream_min_batch
#define PAR_OVERLAP (32 << 10)

/* A position where the fed stream and the sanitized text stop differing by `delta`. */
typedef struct fixup {
  int64_t clean; /* offset in the sanitized stream */
  int64_t delta; /* fed offset - clean offset from here on */
} fixup;

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
};

lh_status lh_tok_stream_open(const lh_tokenizer *t, lh_tok_stream **out, lh_error *err) {
  *out = NULL;
  lh_tok_stream *s = calloc(1, sizeof *s);
  if (!s) return lh_error_set(err, LH_ENOMEM, "tokenizer stream: out of memory");
  s->t = t;
  s->c = tk_ctx_get(t, err);
  if (!s->c) {
    free(s);
    return LH_ENOMEM;
  }
  s->level = TK_LEVEL_PIECE;
  s->next_try = MIN_BATCH;
  *out = s;
  return LH_OK;
}

size_t tk_stream_buffered(const lh_tok_stream *s) { return s->buf.len; }

void lh_tok_stream_close(lh_tok_stream *s) {
  if (!s) return;
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

/* Emit ids (and offsets) [0, n) of the last encode to the caller. */
static lh_status give(lh_tok_stream *s, size_t n, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap) {
  size_t before = ids->len;
  if (n && lh_i32vec_append(ids, s->ids.data, n)) return LH_ENOMEM;
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
    for (size_t k = 0; k < n; k++) (*offsets)[before + k] = clean_to_fed(s, s->c->offv[k]);
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

static lh_status run(lh_tok_stream *s, bool final, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                     lh_error *err) {
  tk_ctx *c = s->c;
  size_t end = final ? s->buf.len : safe_end(s->t, (const uint8_t *)s->buf.data, s->ctx_len, s->buf.len);
  if (end <= s->ctx_len && !final) return LH_OK;
  tk_seg seg = {.text = (const uint8_t *)s->buf.data, .len = end, .ctx_len = s->ctx_len, .base = s->base,
                .level = s->level, .final = final, .want_offs = true, .want_restarts = !final,
                .restart_lo = s->base + (int64_t)s->ctx_len + 1, .restart_hi = s->base + (int64_t)end};
  s->ids.len = 0;
  c->ids = &s->ids;
  lh_status st = tk_encode_segment(s->t, c, &seg, err);
  if (st) {
    s->broken = true;
    return st;
  }
  if (final) {
    if (give(s, s->ids.len, ids, offsets, offsets_cap)) return lh_error_set(err, LH_ENOMEM, "out of memory");
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
  if (give(s, rp.n_ids, ids, offsets, offsets_cap)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  size_t q = (size_t)(rp.off - s->base);
  size_t keep = q > CTX_KEEP ? q - CTX_KEEP : 0;
  while (keep < q && (s->buf.data[keep] & 0xC0) == 0x80) keep++;
  memmove(s->buf.data, s->buf.data + keep, s->buf.len - keep);
  s->buf.len -= keep;
  s->buf.data[s->buf.len] = 0;
  s->ctx_len = q - keep;
  s->base += (int64_t)keep;
  s->level = rp.level;
  /* drop offset fixups no longer needed */
  size_t k = 0;
  while (k < s->nfx && s->fx[k].clean <= s->base) s->fx_delta0 = s->fx[k++].delta;
  if (k) memmove(s->fx, s->fx + k, (s->nfx - k) * sizeof *s->fx);
  s->nfx -= k;
  size_t left = s->buf.len - s->ctx_len;
  s->next_try = left * 2 > MIN_BATCH ? left * 2 : MIN_BATCH;
  return LH_OK;
}

lh_status lh_tok_stream_feed(lh_tok_stream *s, const char *text, size_t len, lh_i32vec *ids, int64_t **offsets,
                             size_t *offsets_cap, lh_error *err) {
  if (s->broken) return lh_error_set(err, LH_EINVAL, "tokenizer stream: an earlier call failed; open a new stream");
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
  if (s->buf.len - s->ctx_len >= s->next_try) return run(s, false, ids, offsets, offsets_cap, err);
  return LH_OK;
}

lh_status lh_tok_stream_finish(lh_tok_stream *s, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                               lh_error *err) {
  if (s->broken) return lh_error_set(err, LH_EINVAL, "tokenizer stream: an earlier call failed; open a new stream");
  if (s->nheld) {
    uint8_t tmp[4];
    size_t k = s->nheld;
    memcpy(tmp, s->held, k);
    s->nheld = 0;
    if (append_clean(s, tmp, k, true)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  lh_status st = run(s, true, ids, offsets, offsets_cap, err);
  s->level = TK_LEVEL_PIECE;
  s->base = 0;
  s->fed = 0;
  s->nfx = 0;
  s->fx_delta0 = 0;
  s->next_try = MIN_BATCH;
  return st;
}

/* ------------------------------------------------------------------------------ threads */

typedef struct par_job {
  const lh_tokenizer *t;
  const uint8_t *text;
  size_t len;
  size_t from, ctx0, end; /* encode [from, end) with context from ctx0 */
  size_t head_hi;         /* restart points wanted in [from, head_hi) and [tail_lo, end) */
  size_t tail_lo;
  lh_i32vec ids;
  tk_restart *rs;
  size_t nrs;
  lh_status st;
  lh_error err;
  double cpu;
} par_job;

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *par_main(void *arg) {
  par_job *j = arg;
  double c0 = thread_cpu();
  tk_ctx *c = tk_ctx_get(j->t, &j->err);
  if (!c) {
    j->st = LH_ENOMEM;
    return NULL;
  }
  c->ids = &j->ids;
  if (lh_i32vec_reserve(&j->ids, (j->end - j->from) / 4)) {
    tk_ctx_put(j->t, c);
    j->st = LH_ENOMEM;
    return NULL;
  }
  /* two windows of restart points: run the head and tail ranges as one [lo, hi) each by
   * recording everything in [from, end) but keeping only the two windows */
  tk_seg seg = {.text = j->text + j->ctx0, .len = j->end - j->ctx0, .ctx_len = j->from - j->ctx0,
                .base = (int64_t)j->ctx0, .level = j->from ? TK_LEVEL_PRETOK : TK_LEVEL_PIECE,
                .final = j->end == j->len, .want_restarts = true, .restart_lo = (int64_t)j->from + 1,
                .restart_hi = (int64_t)j->end};
  c->rs_filter_hi = (int64_t)j->head_hi;
  c->rs_filter_lo = (int64_t)j->tail_lo;
  j->st = tk_encode_segment(j->t, c, &seg, &j->err);
  c->rs_filter_hi = c->rs_filter_lo = 0;
  if (!j->st) {
    j->rs = malloc((c->nrs ? c->nrs : 1) * sizeof *j->rs);
    if (!j->rs)
      j->st = LH_ENOMEM;
    else
      j->nrs = c->nrs;
    if (j->rs && c->nrs) memcpy(j->rs, c->rs, c->nrs * sizeof *j->rs);
  }
  c->ids = NULL;
  tk_ctx_put(j->t, c);
  j->cpu = thread_cpu() - c0;
  return NULL;
}

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
  return tk_encode_parallel_sized(t, text, len, threads, PAR_OVERLAP, out, NULL, err);
}

lh_status tk_encode_parallel_sized(const lh_tokenizer *t, const char *text, size_t len, int threads,
                                   size_t overlap, lh_i32vec *out, int *used_threads, lh_error *err) {
  tk_par_stats ps;
  lh_status st = tk_encode_parallel_stats(t, text, len, threads, overlap, out, &ps, err);
  if (used_threads) *used_threads = ps.used;
  return st;
}

lh_status tk_encode_parallel_stats(const lh_tokenizer *t, const char *text, size_t len, int threads, size_t overlap,
                                   lh_i32vec *out, tk_par_stats *stats, lh_error *err) {
  const uint8_t *s = (const uint8_t *)text;
  memset(stats, 0, sizeof *stats);
  stats->used = 1;
  double w0 = lh_now();
  size_t out0 = out->len;
  lh_buf clean = {0};
  if (tk_utf8_valid_prefix(s, len) != len) {
    if (tk_utf8_sanitize(s, len, &clean)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    s = (const uint8_t *)clean.data;
    len = clean.len;
  }
  if (threads > 64) threads = 64;
  if (threads > 1 && len / (size_t)threads < 4 * overlap) threads = (int)(len / (4 * overlap));
  if (threads < 2 || !t->pretok_restart) {
    lh_status st = lh_tokenizer_encode(t, (const char *)s, len, 0, out, err);
    lh_buf_free(&clean);
    return st;
  }
  /* cuts at least two overlaps apart and from the end; those that do not fit are dropped */
  size_t cuts[65];
  int nc = 1;
  cuts[0] = 0;
  for (int k = 1; k < threads; k++) {
    size_t c = snap_cut(s, len, len / (size_t)threads * (size_t)k, overlap);
    if (c >= cuts[nc - 1] + 2 * overlap && c + 2 * overlap <= len) cuts[nc++] = c;
  }
  threads = nc;
  cuts[threads] = len;
  if (threads < 2) {
    lh_status st = lh_tokenizer_encode(t, (const char *)s, len, 0, out, err);
    lh_buf_free(&clean);
    return st;
  }
  par_job jobs[64];
  pthread_t tid[64];
  memset(jobs, 0, sizeof jobs);
  bool started[64] = {0};
  for (int k = 0; k < threads; k++) {
    par_job *j = &jobs[k];
    j->t = t;
    j->text = s;
    j->len = len;
    j->from = cuts[k];
    j->ctx0 = j->from > CTX_KEEP ? j->from - CTX_KEEP : 0;
    while (j->ctx0 < j->from && (s[j->ctx0] & 0xC0) == 0x80) j->ctx0++;
    size_t e = k + 1 < threads ? cuts[k + 1] + overlap : len;
    if (e > len) e = len;
    if (e < len) e = safe_end(t, s, cuts[k + 1], e);
    j->end = e;
    j->head_hi = k ? j->from + overlap : 0;
    j->tail_lo = k + 1 < threads ? cuts[k + 1] : len;
    if (k + 1 < threads && pthread_create(&tid[k], NULL, par_main, j) == 0) started[k] = true;
  }
  double wt = lh_now();
  par_main(&jobs[threads - 1]);
  for (int k = 0; k + 1 < threads; k++) {
    if (started[k])
      pthread_join(tid[k], NULL);
    else
      par_main(&jobs[k]);
  }
  wt = lh_now() - wt;
  for (int k = 0; k < threads; k++) stats->thread_cpu[k] = jobs[k].cpu;
  lh_status st = LH_OK;
  for (int k = 0; k < threads && !st; k++)
    if (jobs[k].st) st = lh_error_set(err, jobs[k].st, "%s", jobs[k].err.msg);
  /* stitch at the first restart point both neighbours report */
  size_t total = 0;
  for (int k = 0; k < threads; k++) total += jobs[k].ids.len;
  if (!st && lh_i32vec_reserve(out, total)) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  size_t start_id = 0;
  bool ok = true;
  for (int k = 0; k < threads && !st && ok; k++) {
    par_job *j = &jobs[k];
    size_t stop_id = j->ids.len, next_start = 0;
    if (k + 1 < threads) {
      par_job *n = &jobs[k + 1];
      size_t a = 0, b = 0;
      bool found = false;
      while (a < j->nrs && b < n->nrs) {
        if (j->rs[a].off < (int64_t)j->tail_lo) {
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
          found = true;
          break;
        }
      }
      if (!found || j->rs[a].n_ids < start_id) {
        ok = false;
        break;
      }
      stop_id = j->rs[a].n_ids;
      next_start = n->rs[b].n_ids;
    }
    if (stop_id > start_id && lh_i32vec_append(out, j->ids.data + start_id, stop_id - start_id))
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
    start_id = next_start;
  }
  for (int k = 0; k < threads; k++) {
    lh_i32vec_free(&jobs[k].ids);
    free(jobs[k].rs);
  }
  stats->used = ok ? threads : 1;
  stats->stitch_wall = lh_now() - w0 - wt;
  if (!st && !ok) {
    /* no common restart point in some overlap: one thread does it all */
    lh_log_debug("tokenizer: parallel encode found no common restart point; encoding on one thread");
    out->len = out0;
    st = lh_tokenizer_encode(t, (const char *)s, len, 0, out, err);
  }
  lh_buf_free(&clean);
  return st;
}
