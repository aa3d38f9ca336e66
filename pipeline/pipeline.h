/* pipeline.h — one prompt's path through the model, written once: prefill a shared prefix in plan
 * chunks with checkpoints (resuming from the store), fork it, continue each fork over its own
 * tokens, and decode a set of forks together.
 *
 *     lh_prefix_params pp = lh_prefix_default_params();
 *     pp.store = store; pp.writer = writer; pp.job_id = job;          // both may be NULL
 *     lh_prefix *px;  lh_prefix_open(model, tokens, n, &pp, &px, &err);   // restores the longest
 *                                                                         // checkpointed prefix
 *     lh_prefix_advance(px, n, &err);                 // prefill up to n, checkpointing per plan
 *     lh_state *f;    lh_prefix_fork(px, &f, &err);   // cheap copy at the prefix's position
 *     lh_pipeline_feed(f, suffix, ns, &pp.plan, &pp.hooks, NULL, &err);   // the fork's own tokens
 *     lh_fork forks[k] = {{.state = f, .max_tokens = 64, ...}, ...};
 *     lh_decode_forks(forks, k, &dp, &err);           // all forks, one batched step at a time
 *     ... lh_fork_clear(&forks[i]); lh_state_free(f); lh_prefix_close(px);
 *
 * The plan. A plan's `chunk` says where the prefill may stop: every lh_prefill call this library
 * makes ends at a multiple of chunk from position 0 (or at the end of what it was asked to feed),
 * so the same prompt is cut the same way whether it runs in one go, is resumed from a checkpoint
 * or is forked, and a resumed run gives bitwise the logits of an uninterrupted one (engine.h's
 * exactness contract). Checkpoints are taken only at such boundaries: after every
 * `checkpoint_every` chunks of a prefix, at the end of every advance, and when a stop is asked.
 * The engine's own workspace, lh_model_params.max_rows, is a different idea (how many rows one
 * backend call carries); lh_plan_max_rows() is the one place the two meet: a model opened for a
 * plan gets max_rows >= chunk, so one chunk is one pass through the layers.
 *
 * Faults. Every call that fails says on which side (lh_prefix_fault): the engine (a bad token,
 * a backend error: the job's own problem) or the store (a full disk, an I/O error, a damaged
 * file: not the job's fault; what was committed stays good and a rerun resumes from it).
 *
 * Stop. hooks.stop, when set and non-zero, is polled after every chunk and every decode step:
 * an advance then checkpoints where it stands (a chunk boundary) and returns LH_EINTR; a decode
 * returns LH_EINTR with the forks as far as they got (resumable only by starting the decode
 * again: decodes are not checkpointed).
 *
 * Ownership. A prefix borrows the model, the store, the writer and the token array (all must
 * outlive it) and owns its state; forks are the caller's. One thread uses a prefix at a time.
 * This library links the engine, the store and util only: text (tokenizing, stop strings) stays
 * with the caller, through lh_decode_params.on_token.
 */
#ifndef LH_PIPELINE_PIPELINE_H
#define LH_PIPELINE_PIPELINE_H

#include <signal.h>
#include <stdint.h>

#include "engine/engine.h"
#include "store/store.h"
#include "util/buf.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_plan {
  int64_t chunk;        /* prefill boundaries: multiples of chunk from position 0 (default 4096) */
  int checkpoint_every; /* checkpoint a prefix after every N chunks and at each advance's end (default
                           1; 0: never) */
} lh_plan;

/* The engine workspace a model needs for this plan: max(chunk, dflt) rows, capped to what an int
 * holds. Pass lh_model_default_params().max_rows as dflt. */
int lh_plan_max_rows(const lh_plan *plan, int dflt);

typedef struct lh_pipeline_hooks {
  /* After each chunk (prefix or fork), with the absolute position reached. May be NULL. */
  void (*progress)(void *user, int64_t pos);
  void *user;
  /* Polled after each chunk and each decode step; non-zero asks to stop (SIGINT handlers set it).
   * May be NULL. */
  const volatile sig_atomic_t *stop;
} lh_pipeline_hooks;

/* Which side a failed call failed on. */
typedef enum lh_fault {
  LH_FAULT_NONE = 0,
  LH_FAULT_ENGINE, /* computing: a bad token, a backend error, out of memory */
  LH_FAULT_STORE,  /* reading or writing checkpoints: full disk, I/O error, damage */
} lh_fault;
const char *lh_fault_name(lh_fault f); /* "none", "engine", "store" */

/* ---- a prefix: prefill with resume and checkpoints ---------------------------------------- */

typedef struct lh_prefix lh_prefix;

typedef struct lh_prefix_params {
  lh_plan plan;
  lh_pipeline_hooks hooks;
  lh_store *store;          /* resume from its checkpoints (NULL: start at position 0) */
  lh_store_writer *writer;  /* checkpoint into it (NULL, or plan.checkpoint_every 0: no checkpoints) */
  int64_t job_id;           /* the store job the checkpoints advance (0: none) */
  /* Restore no checkpoint past this position (-1, the default: any up to n). A caller that forks
   * the prefix at several positions must not be handed a state already past the first of them:
   * lh_prefix_advance never moves back. */
  int64_t restore_upto;
} lh_prefix_params;

lh_prefix_params lh_prefix_default_params(void);

/* A prefix over tokens[0:n] (borrowed until lh_prefix_close): restores the longest good
 * checkpoint of m whose tokens are a prefix of tokens[0:min(n, restore_upto)] (damaged ones are dropped and the next
 * best tried: store.h, lh_store_resume), or starts a fresh state at 0. Prefills nothing. */
lh_status lh_prefix_open(lh_model *m, const int32_t *tokens, int64_t n, const lh_prefix_params *p, lh_prefix **out,
                         lh_error *err);
void lh_prefix_close(lh_prefix *px); /* accepts NULL; does not flush the writer */

/* Prefill the prefix's state up to position `to` (pos <= to <= n; a `to` at or behind the state
 * is a no-op), in plan chunks, checkpointing as the plan says. LH_EINTR when hooks.stop was set:
 * the state stands at a chunk boundary with its checkpoint submitted. On any other failure
 * lh_prefix_fault says which side failed; after an engine fault the prefix is unusable. */
lh_status lh_prefix_advance(lh_prefix *px, int64_t to, lh_error *err);

/* A new state equal to the prefix's at its current position (engine.h, lh_state_fork). */
lh_status lh_prefix_fork(const lh_prefix *px, lh_state **out, lh_error *err);

int64_t lh_prefix_pos(const lh_prefix *px);      /* where the state stands */
int64_t lh_prefix_len(const lh_prefix *px);      /* n */
int64_t lh_prefix_restored(const lh_prefix *px); /* tokens restored from a checkpoint at open */
int64_t lh_prefix_computed(const lh_prefix *px); /* tokens prefilled by advances so far */
lh_fault lh_prefix_fault(const lh_prefix *px);   /* the side of the last failure */
const lh_state *lh_prefix_state(const lh_prefix *px);

/* ---- forks ---------------------------------------------------------------------------------- */

/* Continue st over tokens[0:n] in plan chunks (boundaries at multiples of plan->chunk from position
 * 0; no checkpoints: a fork's own tokens are not shared). logits_last (may be NULL) receives the
 * logits after the last token; with n == 0 it receives the state's last logits (LH_EINVAL when the
 * state has none). LH_EINTR when hooks->stop was set between chunks (st is then mid-way). */
lh_status lh_pipeline_feed(lh_state *st, const int32_t *tokens, int64_t n, const lh_plan *plan,
                           const lh_pipeline_hooks *hooks, float *logits_last, lh_error *err);

typedef enum lh_finish {
  LH_FINISH_NONE = 0, /* not finished (interrupted, or failed) */
  LH_FINISH_STOP,     /* a stop id, or the caller's on_token said stop */
  LH_FINISH_LENGTH,   /* max_tokens, or the model's context is full */
} lh_finish;
const char *lh_finish_name(lh_finish f); /* "", "stop", "length" (OpenAI's finish_reason) */

typedef struct lh_fork {
  /* in */
  lh_state *state;          /* the caller's; decoding advances it. Its last logits start the decode */
  lh_sampler_params sampler;
  int max_tokens;           /* >= 1 */
  /* out */
  lh_i32vec tokens;         /* what was generated (a stop id is not included); free with lh_fork_clear */
  lh_finish finish;
  lh_status status;         /* LH_OK, or this fork's own failure (err says why); the others go on */
  lh_error err;
  double seconds;           /* from the decode's start to this fork's end */
} lh_fork;
void lh_fork_clear(lh_fork *f); /* frees tokens; leaves state alone */

typedef struct lh_decode_params {
  const int32_t *stop_ids;  /* a sampled id in this list ends a fork (finish stop) and is not kept */
  int n_stop_ids;
  int64_t context_limit;    /* a fork whose next position would reach this ends (finish length); 0: none */
  /* After each token appended to forks[i].tokens: return non-zero to end that fork (finish stop),
   * e.g. when its text now holds a stop string. May be NULL. */
  int (*on_token)(void *user, int i, lh_fork *f);
  /* After each step, with the tokens generated so far by all forks. May be NULL. */
  void (*progress)(void *user, int64_t generated);
  void *user;
  const volatile sig_atomic_t *stop;
} lh_decode_params;

/* Decode forks[0:n] together: each step samples every live fork's next token from its logits,
 * ends the forks that stop, and feeds the rest through one lh_decode_batch. A fork the engine
 * fails on ends with its own status; the call returns LH_OK once every fork ended (finished or
 * failed), LH_EINTR when p->stop was set (unfinished forks keep finish NONE), LH_ENOMEM when it
 * could not start. The same forks give the same tokens whether decoded together or one by one. */
lh_status lh_decode_forks(lh_fork *forks, int n, const lh_decode_params *p, lh_error *err);

#ifdef __cplusplus
}
#endif
#endif
