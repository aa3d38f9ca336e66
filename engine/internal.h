/* internal.h — the engine's private structures, shared by the .c files in engine/ (not for other subsystems).
 *
 * Who fills what: engine/model.c (lh_model_open) parses config.json (engine/config.c), maps and
 * validates the safetensors files (engine/safetensors.c) and builds the host weight views
 * (engine/weights.c); then, unless the backend is "none", binds the backend named in the params
 * (ops->open). engine/state.c and engine/forward.c use the bound backend.
 */
#ifndef LH_ENGINE_INTERNAL_H
#define LH_ENGINE_INTERNAL_H

#include "engine/backend.h"
#include "engine/comm.h"
#include "engine/engine.h"

typedef struct lh_mapping {
  char path[4096];
  void *base;     /* mmap'd file */
  size_t size;
} lh_mapping;

struct lh_model {
  lh_config cfg;
  lh_model_params params;
  char dir[4096];
  char id[65];
  char backend_name[16];
  lh_weights w;              /* host views: into the mappings, or into owned conversions */
  lh_mapping *maps;
  int n_maps;
  void **owned;              /* allocations the views point into (freed at close) */
  int n_owned;
  const lh_backend_ops *ops; /* NULL for backend "none" (config + weights only) */
  lh_backend *be;
  int64_t max_rows;          /* rows per backend call (params.max_rows) */
  /* ranks (engine/ranks.c): set when params.comm has several ranks and a backend is bound */
  lh_comm *comm;             /* NULL: this process alone */
  int64_t next_sid;          /* rank 0: the id the next state gets */
  lh_state **sids;           /* other ranks: states by id */
  int64_t n_sids;
};

/* ---- ranks (engine/ranks.c) ----------------------------------------------------------------
 *
 * Rank 0 tells the other ranks each engine call that touches a state, before making it; they make
 * the same call on their copy (lh_rank_serve), so every rank issues the same backend operations
 * and meets the same collectives. Each call ends with lh_rank_agree on every rank. */
typedef enum lh_rank_op {
  LH_RANK_EXIT = 1, LH_RANK_OPEN, LH_RANK_CLOSE, LH_RANK_NEW, LH_RANK_FREE, LH_RANK_FORK, LH_RANK_PREFILL,
  LH_RANK_DECODE, LH_RANK_EXPORT_LIGHTNING, LH_RANK_EXPORT_KV, LH_RANK_IMPORT_LIGHTNING, LH_RANK_IMPORT_KV,
  LH_RANK_IMPORT_FINISH
} lh_rank_op;

typedef struct lh_rank_cmd {
  int32_t op;                /* lh_rank_op */
  int32_t layer;             /* lightning or softmax layer index; decode: k */
  int64_t sid, sid2;         /* the state; fork: the new one */
  int64_t n, t0, t1;         /* prefill: tokens; KV rows [t0, t1); import finish: pos in n */
  int32_t flag;              /* import finish: logits follow; import KV: source dtype */
  int32_t pad;
  uint64_t bytes;            /* payload that follows the command */
} lh_rank_cmd;

/* The payload of LH_RANK_OPEN: the folder and the params the other ranks open it with. */
typedef struct lh_rank_open {
  char dir[4096];
  char backend[16];
  int32_t threads, device, max_rows, verbose, tp_ranks, cpu_attention;
} lh_rank_open;

/* 1 when m spans several ranks; rank 0 is the one that tells. */
static inline int lh_rank_many(const lh_model *m) { return m->comm != NULL; }
static inline int lh_rank_leads(const lh_model *m) { return m->comm && lh_comm_rank(m->comm) == 0; }
/* Rank 0: send cmd and then cmd.bytes of payload to the other ranks; a no-op on the others. A
 * transport failure here leaves the ranks out of step, so it ends the world. */
void lh_rank_tell(lh_comm *c, lh_rank_cmd cmd, const void *payload);
/* Every rank, at the end of a told call, with its own status: all ranks learn whether any failed.
 * Returns st when this rank failed, else the first failing rank's error (its message, prefixed
 * with its rank), else LH_OK. */
lh_status lh_rank_agree(lh_comm *c, lh_status st, lh_error *err);
/* The state ids rank 0 gives and the others look up (state.c). */
int64_t lh_state_sid(const lh_state *s);
void lh_state_set_sid(lh_state *s, int64_t sid);

/* Parse config.json text into cfg (both forms); path is used in messages. */
lh_status lh_config_parse(const char *json, size_t len, const char *path, lh_config *cfg, lh_error *err);
/* Check generation_config.json text against cfg: valid JSON, eos_token_id (an id or a list) in the
 * vocabulary. */
lh_status lh_generation_config_check(const char *json, size_t len, const char *path, const lh_config *cfg,
                                     lh_error *err);

#endif
