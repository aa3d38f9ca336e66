/* store_engine.c — the glue between engine states and checkpoints: export a state into a writer
 * buffer, restore a chain into a fresh state, and resume a sequence from its longest good prefix.
 *
 * This is the only store file that calls the engine, so the rest of the store (and its tests with
 * synthetic states) links without it. It moves bytes only: the engine's export/import hooks
 * guarantee the numbers round-trip exactly (KV rows of another dtype are converted by the engine,
 * which is exact only F32 -> F32).
 *
 * It must never: change a state's numbers, or checkpoint a state whose position disagrees with
 * the cursor (the prefix hash would name the wrong tokens).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "util/log.h"

lh_status lh_store_model_register(lh_store *s, const lh_model *m, lh_error *err) {
  const lh_config *c = lh_model_config(m);
  char info[512];
  snprintf(info, sizeof info,
           "{\"model_type\":\"%s\",\"layers\":%d,\"lightning\":%d,\"softmax\":%d,\"hidden\":%d,\"heads\":%d,"
           "\"kv_heads\":%d,\"head_dim\":%d,\"experts\":%d,\"vocab\":%d}",
           c->model_type, c->n_layers, c->n_lightning, c->n_softmax, c->hidden_size, c->n_heads, c->n_kv_heads,
           c->head_dim, c->n_experts, c->vocab_size);
  return lh_store_model_put(s, lh_model_id(m), lh_model_dir(m), info, err);
}

typedef struct restore_ctx {
  lh_state *st;
  lh_dtype kv_dtype; /* as stored */
  float *logits;
  int vocab;
} restore_ctx;

static lh_status restore_cb(void *user, lh_store_part part, int layer, int64_t t0, int64_t t1, const void *data,
                            size_t nbytes, lh_error *err) {
  restore_ctx *r = user;
  switch (part) {
    case LH_PART_LIGHTNING: return lh_state_import_lightning(r->st, layer, data, err);
    case LH_PART_KV: return lh_state_import_kv(r->st, layer, t0, t1, data, r->kv_dtype, err);
    case LH_PART_LOGITS:
      if (nbytes != (size_t)r->vocab * 4) return lh_error_set(err, LH_ECORRUPT, "checkpoint logits have the wrong size");
      memcpy(r->logits, data, nbytes);
      return LH_OK;
  }
  return lh_error_set(err, LH_ECORRUPT, "checkpoint: unknown part %d", (int)part);
}

lh_status lh_store_restore(lh_store *s, lh_model *m, int64_t id, lh_state **out, lh_error *err) {
  *out = NULL;
  lh_store__ckrow row;
  lh_status st = lh_store__ckpt_row(s, id, &row, err);
  if (st) return st;
  if (strcmp(row.model_id, lh_model_id(m)) != 0)
    return lh_error_set(err, LH_EINVAL, "%s: checkpoint %lld belongs to model %.12s, not %.12s", s->path, (long long)id,
                        row.model_id, lh_model_id(m));
  lh_state_layout lay;
  lh_state_get_layout(m, &lay);
  size_t stored_elem = lh_dtype_size(row.lay.kv_dtype), elem = lh_dtype_size(lay.kv_dtype);
  if (row.lay.n_lightning != lay.n_lightning || row.lay.lightning_bytes != lay.lightning_bytes ||
      row.lay.n_softmax != lay.n_softmax || row.lay.vocab_size != lay.vocab_size || !stored_elem || !elem ||
      row.lay.kv_row_bytes / stored_elem != lay.kv_row_bytes / elem) {
    /* The model id covers the config, so one model has one layout: the row is damaged. Dropped as
     * damaged pages are (with its subtree, which needs its KV rows), so a resume tries the next best
     * prefix instead of failing on this one at every run. */
    lh_error why;
    lh_error_set(&why, LH_ECORRUPT, "%s: checkpoint %lld (pos %lld) has another state layout than model %.12s, "
                 "whose id it carries: the row is damaged", s->path, (long long)id, (long long)row.pos,
                 lh_model_id(m));
    if (err) *err = why;
    if (s->p.read_only) return LH_ECORRUPT;
    int64_t n = 0;
    lh_error e2;
    if (lh_store_ckpt_drop(s, id, &n, &e2) != LH_OK)
      lh_log_warn("%s; dropping it failed: %s", why.msg, e2.msg);
    else
      lh_log_warn("%s; dropped it and %lld descendant(s): that part will be recomputed from the last good "
                  "checkpoint", why.msg, (long long)(n - 1));
    return LH_ECORRUPT;
  }
  restore_ctx r = {NULL, row.lay.kv_dtype, malloc((size_t)lay.vocab_size * 4), lay.vocab_size};
  if (!r.logits) return lh_error_set(err, LH_ENOMEM, "restoring checkpoint %lld: out of memory", (long long)id);
  if ((st = lh_state_new(m, &r.st, err))) {
    free(r.logits);
    return st;
  }
  st = lh_store_ckpt_load(s, id, restore_cb, &r, err);
  if (!st) st = lh_state_import_finish(r.st, row.pos, r.logits, err);
  free(r.logits);
  if (st) {
    lh_state_free(r.st);
    return st;
  }
  *out = r.st;
  return LH_OK;
}

static lh_status set_resume_point(lh_store *s, int64_t job_id, int64_t ckpt_id, lh_error *err) {
  if (!job_id || s->p.read_only) return LH_OK;
  return lh_store__run(s, err, "UPDATE jobs SET ckpt_id = ?1 WHERE id = ?2", SQL_ARGS(SQL_ID(ckpt_id), SQL_INT(job_id)),
                       "recording job %lld's resume point", (long long)job_id);
}

lh_status lh_store_resume(lh_store *s, lh_model *m, const int32_t *tokens, int64_t n, int64_t job_id, lh_state **out,
                          lh_store_cursor *cur, lh_error *err) {
  *out = NULL;
  const char *mid = lh_model_id(m);
  /* Each failed restore removes what was damaged (or found it deleted under us), so this ends. */
  for (int attempt = 0; attempt < 64; attempt++) {
    int64_t pos = 0, id = 0;
    lh_status st = lh_store_prefix_lookup(s, mid, tokens, n, &pos, &id, err);
    if (st) return st;
    lh_store_cursor_init(cur, mid, job_id);
    if (!id) return lh_state_new(m, out, err);
    /* Point the job at it first, so a concurrent gc protects the chain while we read it. */
    if ((st = set_resume_point(s, job_id, id, err))) return st;
    st = lh_store_restore(s, m, id, out, err);
    if (st == LH_OK) {
      lh_store_cursor_feed(cur, tokens, pos);
      lh_store_cursor_checkpointed(cur);
      return LH_OK;
    }
    if ((st != LH_ECORRUPT && st != LH_ENOTFOUND) || (st == LH_ECORRUPT && s->p.read_only)) return st;
    lh_log_info("%s: resuming: checkpoint at %lld unusable (%s); trying the next best", s->path, (long long)pos,
                err ? err->msg : lh_status_name(st));
  }
  return lh_error_set(err, LH_ECORRUPT, "%s: resuming: too many damaged checkpoints in a row; run `longhaul store "
                      "verify --repair`", s->path);
}

lh_status lh_store_checkpoint_state(lh_store_writer *w, const lh_state *st, lh_store_cursor *cur, lh_error *err) {
  if (lh_state_pos(st) != cur->pos)
    return lh_error_set(err, LH_EINVAL, "checkpoint: the state is at %lld but the cursor hashed %lld tokens",
                        (long long)lh_state_pos(st), (long long)cur->pos);
  const lh_model *m = lh_state_model(st);
  if (strcmp(cur->model_id, lh_model_id(m)) != 0)
    return lh_error_set(err, LH_EINVAL, "checkpoint: the cursor is for another model");
  const float *logits = lh_state_last_logits(st);
  if (!logits) return lh_error_set(err, LH_EINVAL, "checkpoint: the state has no last logits to save");
  lh_state_layout lay;
  lh_state_get_layout(m, &lay);
  lh_store_ckpt *ck;
  lh_status rs = lh_store_writer_begin(w, &lay, cur, &ck, err);
  if (rs) return rs;
  for (int i = 0; i < lay.n_lightning && !rs; i++) rs = lh_state_export_lightning(st, i, lh_store_ckpt_lightning(ck, i), err);
  for (int j = 0; j < lay.n_softmax && !rs; j++)
    rs = lh_state_export_kv(st, j, cur->parent_pos, cur->pos, lh_store_ckpt_kv(ck, j), err);
  if (rs) {
    lh_store_writer_cancel(w, ck);
    return rs;
  }
  memcpy(lh_store_ckpt_logits(ck), logits, (size_t)lay.vocab_size * 4);
  return lh_store_writer_submit(w, ck, cur, err);
}
