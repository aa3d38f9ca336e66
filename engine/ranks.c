/* ranks.c — one model over several processes (issue 10): rank 0 tells, the others follow.
 *
 * Rank 0 runs the program. Every engine call that touches a model's backend (open, close, state
 * new/free/fork, prefill, decode, export and import) is, on rank 0, first told to the other ranks
 * (lh_rank_tell: a fixed-size lh_rank_cmd, then its payload: tokens, state bytes) and then made;
 * the other ranks sit in lh_rank_serve and make the same call on their own copy of the model and
 * states. So every rank issues the same backend operations in the same order and meets the same
 * collectives inside them (the CPU backend's sums over ranks). Every told call ends with
 * lh_rank_agree on all ranks: a call that failed on any rank fails on rank 0 with that rank's
 * message, and every rank undoes what it did (a new state is freed) so the ranks stay in step.
 *
 * States are named by ids that rank 0 gives (1, 2, ...); the serving ranks keep a table from id
 * to their own lh_state. What a rank holds of a state is its share (heads, kv heads: lh_tp_share in
 * backend.h; 1/R of the memory); an export gathers the shares on rank 0 into the one-rank layout,
 * an import sends every rank the whole state to take its share from (engine/state.c).
 *
 * A serving rank's life (lh_rank_serve):
 *
 *     [no model] --OPEN--> [model open] --NEW/FORK/PREFILL/DECODE/EXPORT/IMPORT/FREE--> (same)
 *         ^  |                  |
 *         |  +--EXIT--> return  +--CLOSE--> [no model]       (EXIT with a model open closes it)
 *
 * Rank 0 opens one spread model at a time (lh_model_open refuses a second with LH_EBUSY).
 *
 * A rank that finds itself out of step (an id it does not know, a command it cannot read, a
 * failed broadcast) ends the world with lh_comm_abort. This is the one place library code ends
 * the process, on purpose: a rank that returned an error instead would leave the others waiting
 * in a collective that never comes, and mpirun hanging.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "util/buf.h"

static void out_of_step(lh_comm *c, const char *what, long long v) {
  fprintf(stderr, "longhaul rank %d: out of step with rank 0 (%s %lld); ending every rank\n", lh_comm_rank(c), what,
          v);
  lh_comm_abort(c, 70);
}

void lh_rank_tell(lh_comm *c, lh_rank_cmd cmd, const void *payload) {
  if (!c || lh_comm_rank(c) != 0) return;
  lh_error err;
  if (lh_comm_bcast(c, &cmd, sizeof cmd, 0, &err) ||
      (cmd.bytes && lh_comm_bcast(c, (void *)payload, (size_t)cmd.bytes, 0, &err))) {
    fprintf(stderr, "longhaul rank 0: %s; ending every rank\n", err.msg);
    lh_comm_abort(c, 70);
  }
}

lh_status lh_rank_agree(lh_comm *c, lh_status st, lh_error *err) {
  if (!c) return st;
  lh_error local, *e = err ? err : &local;
  int first = -1;
  if (st != LH_OK && e == &local) lh_error_set(&local, st, "(no message)");
  lh_error tmp;
  if (lh_comm_first_failed(c, st != LH_OK, &first, &tmp)) {
    fprintf(stderr, "longhaul rank %d: %s; ending every rank\n", lh_comm_rank(c), tmp.msg);
    lh_comm_abort(c, 70);
  }
  if (first < 0) return LH_OK;
  lh_error theirs = *e;
  if (lh_comm_bcast(c, &theirs, sizeof theirs, first, &tmp)) {
    fprintf(stderr, "longhaul rank %d: %s; ending every rank\n", lh_comm_rank(c), tmp.msg);
    lh_comm_abort(c, 70);
  }
  if (st != LH_OK) return st;
  theirs.msg[sizeof theirs.msg - 1] = 0;
  return lh_error_set(err, theirs.code ? theirs.code : LH_EBACKEND, "rank %d of %d: %s", first, lh_comm_size(c),
                      theirs.msg);
}

void lh_rank_release(lh_comm *c) { lh_rank_tell(c, (lh_rank_cmd){.op = LH_RANK_EXIT}, NULL); }

/* ---- the serving side --------------------------------------------------------------------- */

typedef struct server {
  lh_comm *c;
  lh_model *m;
  lh_buf payload; /* the command's payload */
  lh_buf logits;  /* decode logits (rank 0's are the ones returned) */
} server;

/* b's memory, at least bytes of it (its contents are not kept) */
static void *room(lh_buf *b, size_t bytes) {
  lh_buf_clear(b);
  return lh_buf_reserve(b, bytes) ? NULL : b->data;
}

static void put_state(server *sv, int64_t sid, lh_state *s) {
  lh_model *m = sv->m;
  if (sid >= m->n_sids) {
    int64_t n = sid * 2 + 16;
    lh_state **t = realloc(m->sids, (size_t)n * sizeof *t);
    if (!t) out_of_step(sv->c, "no memory for state id", (long long)sid);
    memset(t + m->n_sids, 0, (size_t)(n - m->n_sids) * sizeof *t);
    m->sids = t;
    m->n_sids = n;
  }
  m->sids[sid] = s;
  if (s) lh_state_set_sid(s, sid);
}

static lh_state *get_state(server *sv, int64_t sid) {
  lh_model *m = sv->m;
  if (!m || sid <= 0 || sid >= m->n_sids || !m->sids[sid]) out_of_step(sv->c, "unknown state id", (long long)sid);
  return m->sids[sid];
}

static void close_model(server *sv) {
  lh_model *m = sv->m;
  if (!m) return;
  for (int64_t i = 0; i < m->n_sids; i++) lh_state_free(m->sids[i]);
  free(m->sids);
  m->sids = NULL;
  m->n_sids = 0;
  lh_model_close(m);
  sv->m = NULL;
}

/* One told call. Errors are rank 0's to report (lh_rank_agree carries ours there); a serving rank
 * logs nothing itself, so the message appears once. */
static int serve_one(server *sv, const lh_rank_cmd *cmd) {
  lh_error err;
  const void *pl = sv->payload.data;
  lh_model *m = sv->m;
  lh_state *s = NULL;
  if (cmd->op != LH_RANK_OPEN && cmd->op != LH_RANK_EXIT && !m) out_of_step(sv->c, "no model open for command", cmd->op);
  switch (cmd->op) {
    case LH_RANK_EXIT:
      close_model(sv);
      return 1;
    case LH_RANK_OPEN: {
      if (m || cmd->bytes != sizeof(lh_rank_open)) out_of_step(sv->c, "open while a model is open, or bad open", cmd->op);
      lh_rank_open o;
      memcpy(&o, pl, sizeof o);
      o.dir[sizeof o.dir - 1] = o.backend[sizeof o.backend - 1] = 0;
      lh_model_params p = lh_model_default_params();
      p.backend = o.backend;
      p.threads = o.threads, p.device = o.device, p.max_rows = o.max_rows, p.verbose = o.verbose;
      p.tp_ranks = o.tp_ranks;
      p.cpu_attention = o.cpu_attention;
      p.comm = sv->c;
      if (lh_model_open(o.dir, &p, &sv->m, &err)) sv->m = NULL;
      break;
    }
    case LH_RANK_CLOSE:
      close_model(sv);
      break;
    case LH_RANK_NEW:
      if (!lh_state_new(m, &s, &err)) put_state(sv, cmd->sid, s);
      break;
    case LH_RANK_FREE:
      lh_state_free(get_state(sv, cmd->sid));
      m->sids[cmd->sid] = NULL;
      break;
    case LH_RANK_FORK:
      if (!lh_state_fork(get_state(sv, cmd->sid), &s, &err)) put_state(sv, cmd->sid2, s);
      break;
    case LH_RANK_PREFILL:
      (void)lh_prefill(get_state(sv, cmd->sid), cmd->n ? pl : NULL, cmd->n, NULL, NULL, &err);
      break;
    case LH_RANK_DECODE: {
      int k = cmd->layer;
      size_t V = (size_t)m->cfg.vocab_size;
      if (k < 1 || cmd->bytes != (size_t)k * 12) out_of_step(sv->c, "bad decode batch", k);
      lh_state **st = malloc((size_t)k * sizeof *st);
      float *logits = room(&sv->logits, (size_t)k * V * sizeof(float));
      if (!st || !logits) out_of_step(sv->c, "no memory for a decode batch of", k);
      for (int i = 0; i < k; i++) {
        int64_t sid;
        memcpy(&sid, (const unsigned char *)pl + 8 * (size_t)i, 8);
        st[i] = get_state(sv, sid);
      }
      (void)lh_decode_batch(st, k, (const int32_t *)((const unsigned char *)pl + 8 * (size_t)k), logits, &err);
      free(st);
      break;
    }
    case LH_RANK_EXPORT_LIGHTNING: /* the destination is rank 0's: only our share leaves here */
      (void)lh_state_export_lightning(get_state(sv, cmd->sid), cmd->layer, NULL, &err);
      break;
    case LH_RANK_EXPORT_KV:
      (void)lh_state_export_kv(get_state(sv, cmd->sid), cmd->layer, cmd->t0, cmd->t1, NULL, &err);
      break;
    case LH_RANK_IMPORT_LIGHTNING:
      (void)lh_state_import_lightning(get_state(sv, cmd->sid), cmd->layer, cmd->bytes ? pl : NULL, &err);
      break;
    case LH_RANK_IMPORT_KV:
      (void)lh_state_import_kv(get_state(sv, cmd->sid), cmd->layer, cmd->t0, cmd->t1, cmd->bytes ? pl : NULL,
                               (lh_dtype)cmd->flag, &err);
      break;
    case LH_RANK_IMPORT_FINISH:
      (void)lh_state_import_finish(get_state(sv, cmd->sid), cmd->n, cmd->flag ? pl : NULL, &err);
      break;
    default:
      out_of_step(sv->c, "unknown command", cmd->op);
  }
  return 0;
}

int lh_rank_serve(lh_comm *c) {
  /* Ctrl-C and SIGTERM are rank 0's to handle (it stops at a chunk's end, checkpoints and exits,
   * which needs the other ranks alive): the serving ranks end when rank 0 releases them, or when
   * the launcher kills them after rank 0 ends. */
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  server sv = {.c = c};
  lh_error err;
  for (;;) {
    lh_rank_cmd cmd;
    if (lh_comm_bcast(c, &cmd, sizeof cmd, 0, &err)) out_of_step(c, "command broadcast failed", 0);
    if (cmd.bytes) {
      if (!room(&sv.payload, (size_t)cmd.bytes)) out_of_step(c, "no memory for a payload of", (long long)cmd.bytes);
      if (lh_comm_bcast(c, sv.payload.data, (size_t)cmd.bytes, 0, &err)) out_of_step(c, "payload broadcast failed", 0);
    }
    if (serve_one(&sv, &cmd)) break;
  }
  lh_buf_free(&sv.payload);
  lh_buf_free(&sv.logits);
  return 0;
}
