/* pipeline.c — prefixes, forks and the batched decode (see pipeline.h).
 *
 * Invariants
 *  1. Every lh_prefill made here ends at a multiple of plan.chunk or at the end of the tokens it
 *     was asked to feed (feed_chunks is the only loop that calls lh_prefill), so a prompt is cut
 *     the same way however it is reached, and resume is bitwise (engine.h).
 *  2. A prefix's cursor has hashed exactly the tokens its state has consumed (cursor.pos ==
 *     lh_state_pos) whenever control returns to the caller, so a checkpoint names its tokens.
 *  3. A checkpoint is only submitted at a chunk boundary or at the end of an advance.
 *  4. lh_decode_forks never feeds a fork after it ended: a fork's tokens are exactly what it
 *     would produce alone (the engine's decode is row-independent).
 *
 * It must never: hold more than the caller's tokens and one logits row per fork; decide what a
 * failure means for a job (it reports the side, lh_fault; the caller decides).
 */
#define _POSIX_C_SOURCE 200809L
#include "pipeline/pipeline.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/testpoint.h"

struct lh_prefix {
  lh_model *m;
  const int32_t *tokens;
  int64_t n;
  lh_prefix_params p;
  lh_state *st;
  lh_store_cursor cur;
  int64_t restored, computed;
  lh_fault fault;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int stop_asked(const volatile sig_atomic_t *stop) { return stop && *stop; }

int lh_plan_max_rows(const lh_plan *plan, int dflt) {
  int64_t c = plan ? plan->chunk : 0;
  if (c > INT_MAX) c = INT_MAX;
  return c > dflt ? (int)c : dflt;
}

const char *lh_fault_name(lh_fault f) {
  switch (f) {
  case LH_FAULT_ENGINE: return "engine";
  case LH_FAULT_STORE: return "store";
  default: return "none";
  }
}

const char *lh_finish_name(lh_finish f) {
  switch (f) {
  case LH_FINISH_STOP: return "stop";
  case LH_FINISH_LENGTH: return "length";
  default: return "";
  }
}

lh_prefix_params lh_prefix_default_params(void) {
  lh_prefix_params p = {0};
  p.plan.chunk = 4096;
  p.plan.checkpoint_every = 1;
  p.restore_upto = -1;
  return p;
}

/* ---- the one prefill loop ---- */

/* Called after each chunk with the position reached; returns non-OK to stop the loop there. */
typedef lh_status (*chunk_cb)(void *user, const int32_t *fed, int64_t n_fed, int last, lh_error *err);

/* Feed tokens[0:n] to st in pieces ending at multiples of chunk from position 0 (invariant 1).
 * logits_last receives the logits after the last token. cb (may be NULL) runs after each piece;
 * a stop asked between pieces returns LH_EINTR after cb ran. */
static lh_status feed_chunks(lh_state *st, const int32_t *tokens, int64_t n, int64_t chunk,
                             const lh_pipeline_hooks *h, float *logits_last, chunk_cb cb, void *user,
                             lh_fault *fault, lh_error *err) {
  int64_t done = 0;
  while (done < n) {
    int64_t pos = lh_state_pos(st), next = (pos / chunk + 1) * chunk, take = next - pos;
    if (take > n - done) take = n - done;
    const int last = done + take == n;
    lh_status s = lh_prefill(st, tokens + done, take, last ? logits_last : NULL, NULL, err);
    if (s != LH_OK) {
      *fault = LH_FAULT_ENGINE;
      return s;
    }
    done += take;
    lh_testpoint("prefill");
    if (h && h->progress) h->progress(h->user, lh_state_pos(st));
    const int stop = !last && h && stop_asked(h->stop);
    if (cb && (s = cb(user, tokens + done - take, take, last || stop, err)) != LH_OK) {
      *fault = LH_FAULT_STORE;
      return s;
    }
    if (stop)
      return lh_error_set(err, LH_EINTR, "interrupted at token %lld", (long long)lh_state_pos(st));
  }
  return LH_OK;
}

/* ---- prefixes ---- */

lh_status lh_prefix_open(lh_model *m, const int32_t *tokens, int64_t n, const lh_prefix_params *p, lh_prefix **out,
                         lh_error *err) {
  *out = NULL;
  if (!m || (n > 0 && !tokens) || n < 0) return lh_error_set(err, LH_EINVAL, "prefix: no model or tokens");
  if (!p || p->plan.chunk < 1)
    return lh_error_set(err, LH_EINVAL, "prefix: the plan's chunk must be at least 1 (got %lld)",
                        p ? (long long)p->plan.chunk : 0LL);
  lh_prefix *px = calloc(1, sizeof *px);
  if (!px) return lh_error_set(err, LH_ENOMEM, "prefix: out of memory");
  px->m = m;
  px->tokens = tokens;
  px->n = n;
  px->p = *p;
  lh_status st;
  if (p->store) {
    const int64_t rn = p->restore_upto >= 0 && p->restore_upto < n ? p->restore_upto : n;
    st = lh_store_resume(p->store, m, tokens, rn, p->job_id, &px->st, &px->cur, err);
    if (st != LH_OK) px->fault = LH_FAULT_STORE;
  } else {
    lh_store_cursor_init(&px->cur, lh_model_id(m), p->job_id);
    st = lh_state_new(m, &px->st, err);
    if (st != LH_OK) px->fault = LH_FAULT_ENGINE;
  }
  if (st != LH_OK) {
    lh_prefix_close(px);
    return st;
  }
  px->restored = lh_state_pos(px->st);
  *out = px;
  return LH_OK;
}

void lh_prefix_close(lh_prefix *px) {
  if (!px) return;
  lh_state_free(px->st);
  free(px);
}

typedef struct advance_ctx {
  lh_prefix *px;
  int since; /* chunks since the last checkpoint */
} advance_ctx;

static lh_status after_prefix_chunk(void *user, const int32_t *fed, int64_t n_fed, int last, lh_error *err) {
  advance_ctx *a = user;
  lh_prefix *px = a->px;
  lh_store_cursor_feed(&px->cur, fed, n_fed); /* invariant 2 */
  px->computed += n_fed;
  a->since++;
  if (!px->p.writer || px->p.plan.checkpoint_every <= 0) return LH_OK;
  if (a->since < px->p.plan.checkpoint_every && !last) return LH_OK;
  a->since = 0;
  return lh_store_checkpoint_state(px->p.writer, px->st, &px->cur, err);
}

lh_status lh_prefix_advance(lh_prefix *px, int64_t to, lh_error *err) {
  if (to > px->n)
    return lh_error_set(err, LH_EINVAL, "prefix: cannot advance to %lld, past its %lld tokens", (long long)to,
                        (long long)px->n);
  int64_t pos = lh_state_pos(px->st);
  if (to <= pos) return LH_OK;
  px->fault = LH_FAULT_NONE;
  advance_ctx a = {px, 0};
  return feed_chunks(px->st, px->tokens + pos, to - pos, px->p.plan.chunk, &px->p.hooks, NULL, after_prefix_chunk, &a,
                     &px->fault, err);
}

lh_status lh_prefix_fork(const lh_prefix *px, lh_state **out, lh_error *err) {
  return lh_state_fork(px->st, out, err);
}

int64_t lh_prefix_pos(const lh_prefix *px) { return lh_state_pos(px->st); }
int64_t lh_prefix_len(const lh_prefix *px) { return px->n; }
int64_t lh_prefix_restored(const lh_prefix *px) { return px->restored; }
int64_t lh_prefix_computed(const lh_prefix *px) { return px->computed; }
lh_fault lh_prefix_fault(const lh_prefix *px) { return px->fault; }
const lh_state *lh_prefix_state(const lh_prefix *px) { return px->st; }

/* ---- forks ---- */

lh_status lh_pipeline_feed(lh_state *st, const int32_t *tokens, int64_t n, const lh_plan *plan,
                           const lh_pipeline_hooks *hooks, float *logits_last, lh_error *err) {
  if (!plan || plan->chunk < 1) return lh_error_set(err, LH_EINVAL, "feed: the plan's chunk must be at least 1");
  if (n == 0) {
    const float *ll = lh_state_last_logits(st);
    if (!ll) return lh_error_set(err, LH_EINVAL, "nothing to continue from: the state has no logits yet");
    if (logits_last)
      memcpy(logits_last, ll, (size_t)lh_model_config(lh_state_model(st))->vocab_size * sizeof *logits_last);
    return LH_OK;
  }
  lh_fault fault = LH_FAULT_NONE;
  return feed_chunks(st, tokens, n, plan->chunk, hooks, logits_last, NULL, NULL, &fault, err);
}

void lh_fork_clear(lh_fork *f) {
  if (f) lh_i32vec_free(&f->tokens);
}

static int is_stop_id(const lh_decode_params *p, int32_t id) {
  for (int i = 0; i < p->n_stop_ids; i++)
    if (p->stop_ids[i] == id) return 1;
  return 0;
}

lh_status lh_decode_forks(lh_fork *forks, int n, const lh_decode_params *p, lh_error *err) {
  if (n <= 0) return LH_OK;
  const int vocab = lh_model_config(lh_state_model(forks[0].state))->vocab_size;
  float *step = malloc((size_t)n * (size_t)vocab * sizeof *step);
  lh_state **states = malloc((size_t)n * sizeof *states);
  int32_t *next = malloc((size_t)n * sizeof *next);
  int *who = malloc((size_t)n * sizeof *who);
  uint64_t *rng = malloc((size_t)n * sizeof *rng);
  char *live = calloc((size_t)n, 1);
  lh_status st = LH_OK;
  if (!step || !states || !next || !who || !rng || !live) {
    st = lh_error_set(err, LH_ENOMEM, "out of memory for decoding %d forks", n);
    goto out;
  }
  const double t0 = now_s();
  for (int i = 0; i < n; i++) {
    lh_fork *f = &forks[i];
    f->finish = LH_FINISH_NONE;
    f->status = LH_OK;
    lh_error_clear(&f->err);
    rng[i] = f->sampler.seed;
    if (!lh_state_last_logits(f->state)) {
      f->status = lh_error_set(&f->err, LH_EINVAL, "nothing to continue from: the state has no logits yet");
      continue;
    }
    live[i] = 1;
  }
  int64_t generated = 0;
  for (;;) {
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (!live[i]) continue;
      lh_fork *f = &forks[i];
      /* the state keeps the logits after its last token (engine.h): they pick the next one */
      const float *logits = lh_state_last_logits(f->state);
      const int bad = lh_logits_nonfinite(logits, vocab);
      const int32_t t = bad < 0 ? lh_sample(logits, vocab, &f->sampler, &rng[i]) : -1;
      if (bad >= 0) {
        f->status = lh_error_set(&f->err, LH_EBACKEND,
                                 "the model's logits after position %lld are not finite (logit %d is %g): its "
                                 "weights or config overflow in the computation, so no answer is made from them",
                                 (long long)lh_state_pos(f->state) - 1, bad, (double)logits[bad]);
      } else if (is_stop_id(p, t)) {
        f->finish = LH_FINISH_STOP;
      } else if (lh_i32vec_push(&f->tokens, t) != LH_OK) {
        f->status = lh_error_set(&f->err, LH_ENOMEM, "out of memory holding the answer");
      } else {
        generated++;
        if (p->on_token && p->on_token(p->user, i, f)) f->finish = LH_FINISH_STOP;
        else if ((int64_t)f->tokens.len >= f->max_tokens ||
                 (p->context_limit > 0 && lh_state_pos(f->state) + 1 >= p->context_limit))
          f->finish = LH_FINISH_LENGTH;
      }
      if (f->finish != LH_FINISH_NONE || f->status != LH_OK) {
        live[i] = 0;
        f->seconds = now_s() - t0;
        continue;
      }
      states[k] = f->state;
      next[k] = t;
      who[k] = i;
      k++;
    }
    if (!k) break;
    if (p->progress) p->progress(p->user, generated);
    lh_error e;
    const lh_status ds = lh_decode_batch(states, k, next, step, &e);
    lh_testpoint("decode");
    for (int q = 0; q < k && ds != LH_OK; q++) { /* the engine failed the step: each fork in it fails */
      lh_fork *f = &forks[who[q]];
      f->status = ds;
      f->err = e;
      f->seconds = now_s() - t0;
      live[who[q]] = 0;
    }
    if (stop_asked(p->stop)) {
      st = lh_error_set(err, LH_EINTR, "interrupted while decoding");
      break;
    }
  }
out:
  free(step);
  free(states);
  free(next);
  free(who);
  free(rng);
  free(live);
  return st;
}
