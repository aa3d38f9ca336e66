/* store_writer.c — the asynchronous checkpoint writer: one thread, one connection, a bounded queue.
 *
 * The producer (prefill) asks for a buffer (begin), fills it with host copies of the state
 * (export), and hands it over (submit); the thread writes checkpoints in submission order, each in
 * its own transaction (store_ckpt.c). A checkpoint's parent is named by its prefix hash, so the
 * order is what makes a chain well-formed: a child is never written before its parent.
 *
 * Memory bound: `outstanding` counts buffers between begin and the end of their write (being filled,
 * queued, being written). begin waits while outstanding == max_pending; finished buffers go back
 * to a pool and are reused, so the steady state allocates nothing and at most max_pending
 * checkpoints' bytes are ever held.
 *
 * Errors: the first failed write is kept (with the position it was for) and every later begin,
 * submit and flush returns it; queued checkpoints after a failure are not written, because their
 * chain is broken at the failed one. The failure is never lost: close returns it too.
 *
 * Lock order: only w->mu; the SQLite work happens outside it.
 * It must never: write checkpoints out of order, or let the producer's memory grow without bound.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "util/testpoint.h"
#include "util/fs.h"
#include "util/log.h"

struct lh_store_writer {
  lh_store *s; /* the thread's connection (opened by _open, used only by the thread after that) */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t work; /* queue non-empty or stop */
  pthread_cond_t done; /* a buffer came back or the queue drained */
  lh_store_ckpt *head, *tail;
  lh_store_ckpt *pool;
  int outstanding, max_pending;
  int busy, stop;
  lh_status failed;
  lh_error fail_err;
  lh_store_writer_stats stats;
};

lh_store_writer_params lh_store_writer_default_params(void) {
  lh_store_writer_params p;
  memset(&p, 0, sizeof p);
  p.max_pending = 2;
  p.store = lh_store_default_params();
  return p;
}

static void *writer_main(void *arg) {
  lh_store_writer *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->stop) pthread_cond_wait(&w->work, &w->mu);
    if (!w->head) break;
    lh_store_ckpt *ck = w->head;
    w->head = ck->next;
    if (!w->head) w->tail = NULL;
    w->busy = 1;
    int skip = w->failed != LH_OK;
    pthread_mutex_unlock(&w->mu);

    lh_error e;
    lh_error_clear(&e);
    lh_status st = LH_OK;
    int skipped = 0;
    double t0 = lh_now();
    if (!skip) st = lh_store__ckpt_write_ex(w->s, ck, NULL, &skipped, &e);
    if (!skip && st == LH_OK) lh_testpoint("checkpoint"); /* committed, not yet acknowledged */
    double dt = lh_now() - t0;

    pthread_mutex_lock(&w->mu);
    if (!skip) {
      w->stats.write_s += dt;
      if (st) {
        w->failed = st;
        lh_error_set(&w->fail_err, st, "checkpoint at position %lld was not written: %s", (long long)ck->pos, e.msg);
      } else if (skipped) {
        w->stats.skipped++;
      } else {
        w->stats.written++;
        w->stats.bytes += (int64_t)ck->bytes;
      }
    }
    ck->next = w->pool;
    w->pool = ck;
    w->outstanding--;
    w->busy = 0;
    pthread_cond_broadcast(&w->done);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

lh_status lh_store_writer_open(const char *path, const lh_store_writer_params *p, lh_store_writer **out, lh_error *err) {
  *out = NULL;
  lh_store_writer_params wp = p ? *p : lh_store_writer_default_params();
  if (wp.max_pending < 1) return lh_error_set(err, LH_EINVAL, "%s: the writer needs max_pending >= 1", path);
  lh_store_writer *w = calloc(1, sizeof *w);
  if (!w) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", path);
  wp.store.heartbeat = 0; /* the writer never claims jobs */
  lh_status st = lh_store_open(path, &wp.store, &w->s, err);
  if (st) {
    free(w);
    return st;
  }
  if (wp.store.read_only) {
    lh_store_close(w->s);
    free(w);
    return lh_error_set(err, LH_EINVAL, "%s: a checkpoint writer needs a writable store", path);
  }
  w->max_pending = wp.max_pending;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->work, NULL);
  pthread_cond_init(&w->done, NULL);
  if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
    lh_store_close(w->s);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->work);
    pthread_cond_destroy(&w->done);
    free(w);
    return lh_error_set(err, LH_EIO, "%s: cannot start the checkpoint writer thread", path);
  }
  *out = w;
  return LH_OK;
}

/* Copy the sticky failure into err (caller holds mu). */
static lh_status failure(lh_store_writer *w, lh_error *err) {
  if (err) *err = w->fail_err;
  return w->failed;
}

lh_status lh_store_writer_begin(lh_store_writer *w, const lh_state_layout *lay, const lh_store_cursor *c,
                                lh_store_ckpt **out, lh_error *err) {
  *out = NULL;
  double t0 = lh_now();
  pthread_mutex_lock(&w->mu);
  while (w->outstanding >= w->max_pending && !w->failed) pthread_cond_wait(&w->done, &w->mu);
  w->stats.begin_wait_s += lh_now() - t0;
  if (w->failed) {
    lh_status st = failure(w, err);
    pthread_mutex_unlock(&w->mu);
    return st;
  }
  lh_store_ckpt *ck = w->pool;
  if (ck) w->pool = ck->next;
  w->outstanding++;
  pthread_mutex_unlock(&w->mu);
  if (!ck && !(ck = calloc(1, sizeof *ck))) {
    lh_store_writer_cancel(w, NULL);
    return lh_error_set(err, LH_ENOMEM, "checkpoint writer: out of memory");
  }
  lh_status st = lh_store__ckpt_reset(ck, lay, c, err);
  if (st) {
    lh_store_writer_cancel(w, ck);
    return st;
  }
  ck->next = NULL;
  *out = ck;
  return LH_OK;
}

void lh_store_writer_cancel(lh_store_writer *w, lh_store_ckpt *ck) {
  pthread_mutex_lock(&w->mu);
  if (ck) {
    ck->next = w->pool;
    w->pool = ck;
  }
  w->outstanding--;
  pthread_cond_broadcast(&w->done);
  pthread_mutex_unlock(&w->mu);
}

lh_status lh_store_writer_submit(lh_store_writer *w, lh_store_ckpt *ck, lh_store_cursor *c, lh_error *err) {
  pthread_mutex_lock(&w->mu);
  if (w->failed) {
    ck->next = w->pool;
    w->pool = ck;
    w->outstanding--;
    pthread_cond_broadcast(&w->done);
    lh_status st = failure(w, err);
    pthread_mutex_unlock(&w->mu);
    return st;
  }
  ck->next = NULL;
  if (w->tail)
    w->tail->next = ck;
  else
    w->head = ck;
  w->tail = ck;
  pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  if (c) {
    c->has_parent = 1;
    c->parent_pos = ck->pos;
    memcpy(c->parent_hash, ck->hash, 32);
  }
  return LH_OK;
}

lh_status lh_store_writer_flush(lh_store_writer *w, lh_error *err) {
  pthread_mutex_lock(&w->mu);
  while (w->head || w->busy) pthread_cond_wait(&w->done, &w->mu);
  lh_status st = w->failed ? failure(w, err) : LH_OK;
  pthread_mutex_unlock(&w->mu);
  return st;
}

void lh_store_writer_get_stats(lh_store_writer *w, lh_store_writer_stats *st) {
  pthread_mutex_lock(&w->mu);
  *st = w->stats;
  pthread_mutex_unlock(&w->mu);
}

lh_status lh_store_writer_close(lh_store_writer *w, lh_error *err) {
  if (!w) return LH_OK;
  lh_status st = lh_store_writer_flush(w, err);
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_signal(&w->work);
  pthread_mutex_unlock(&w->mu);
  pthread_join(w->th, NULL);
  if (w->outstanding > 0)
    lh_log_warn("%s: checkpoint writer closed with %d buffer(s) still begun and not submitted", w->s->path,
                w->outstanding);
  for (lh_store_ckpt *ck = w->pool; ck;) {
    lh_store_ckpt *next = ck->next;
    lh_store_ckpt_free(ck);
    ck = next;
  }
  lh_store_close(w->s);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->work);
  pthread_cond_destroy(&w->done);
  free(w);
  return st;
}
