/* toy.h — a synthetic "model state" for store tests that must not need the engine (header-only).
 *
 * It has the engine state's shape (lightning matrices, KV rows growing with the position, last
 * logits) and the property that matters for checkpoint tests: the state after tokens[0:n] depends
 * on every token and on every earlier state and KV row, token by token, so the result is the same
 * for any chunk plan and any wrongly restored byte changes the final digest. Numbers are fp32 and
 * computed in a fixed order, so runs are bitwise reproducible.
 */
#ifndef LH_TESTS_STORE_TOY_H
#define LH_TESTS_STORE_TOY_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "util/hash.h"

#define TOY_MODEL_ID "7e57000000000000000000000000000000000000000000000000000000000001"

typedef struct toy {
  lh_state_layout lay;
  int64_t pos, cap;
  float **L;     /* [n_lightning][lightning_bytes/4] */
  float **kv;    /* [n_softmax][cap * row floats] */
  float *logits; /* [vocab] */
} toy;

static inline lh_state_layout toy_layout(int n_lightning, size_t lightning_bytes, int n_softmax, size_t kv_row_bytes,
                                         int vocab) {
  lh_state_layout l;
  memset(&l, 0, sizeof l);
  l.n_lightning = n_lightning;
  l.lightning_bytes = lightning_bytes;
  l.n_softmax = n_softmax;
  l.kv_dtype = LH_F32;
  l.kv_row_bytes = kv_row_bytes;
  l.vocab_size = vocab;
  return l;
}

static inline void toy_init(toy *t, const lh_state_layout *lay) {
  memset(t, 0, sizeof *t);
  t->lay = *lay;
  t->L = calloc((size_t)lay->n_lightning + 1, sizeof *t->L);
  for (int i = 0; i < lay->n_lightning; i++) t->L[i] = calloc(lay->lightning_bytes / 4, 4);
  t->kv = calloc((size_t)lay->n_softmax + 1, sizeof *t->kv);
  t->logits = calloc((size_t)lay->vocab_size, 4);
}

static inline void toy_free(toy *t) {
  for (int i = 0; i < t->lay.n_lightning; i++) free(t->L[i]);
  for (int j = 0; j < t->lay.n_softmax; j++) free(t->kv[j]);
  free(t->L);
  free(t->kv);
  free(t->logits);
  memset(t, 0, sizeof *t);
}

static inline void toy_reserve(toy *t, int64_t rows) {
  if (rows <= t->cap) return;
  int64_t nc = t->cap ? t->cap : 256;
  while (nc < rows) nc *= 2;
  size_t rf = t->lay.kv_row_bytes / 4;
  for (int j = 0; j < t->lay.n_softmax; j++) t->kv[j] = realloc(t->kv[j], (size_t)nc * rf * 4);
  t->cap = nc;
}

/* Feed tokens[0:n] one by one. */
static inline void toy_feed(toy *t, const int32_t *tok, int64_t n) {
  size_t m = t->lay.lightning_bytes / 4, rf = t->lay.kv_row_bytes / 4;
  toy_reserve(t, t->pos + n);
  for (int64_t a = 0; a < n; a++) {
    int64_t p = t->pos;
    uint32_t x = (uint32_t)tok[a];
    for (int i = 0; i < t->lay.n_lightning; i++) {
      float *S = t->L[i];
      for (uint32_t k = 0; k < 16; k++) {
        size_t idx = (size_t)((uint64_t)p * 16 + k * 7 + (uint64_t)i * 13) % m;
        S[idx] = S[idx] * 0.75f + (float)((x * 31 + k + (uint32_t)i * 5) % 101) * 0.01f + 0.001f * S[(idx + 1) % m];
      }
    }
    const float *S0 = t->lay.n_lightning ? t->L[0] : NULL;
    for (int j = 0; j < t->lay.n_softmax; j++) {
      float *row = t->kv[j] + (size_t)p * rf;
      const float *prev = p > 0 ? t->kv[j] + (size_t)(p - 1) * rf : NULL;
      for (size_t c = 0; c < rf; c++)
        row[c] = (S0 ? S0[((size_t)p + c) % m] * 0.5f : 0.f) + (float)((x + c + (uint32_t)j) % 17) +
                 (prev ? 0.125f * prev[(c + 1) % rf] : 0.f);
    }
    const float *SL = t->lay.n_lightning ? t->L[t->lay.n_lightning - 1] : NULL;
    const float *last = t->lay.n_softmax ? t->kv[t->lay.n_softmax - 1] + (size_t)p * rf : NULL;
    for (int v = 0; v < t->lay.vocab_size; v++)
      t->logits[v] = (SL ? SL[((size_t)v * 3 + (size_t)p) % m] : 0.f) + (last ? 0.25f * last[(size_t)v % rf] : 0.f);
    t->pos++;
  }
}

/* Copy the checkpoint payload for [parent_pos, pos) into ck. */
static inline void toy_fill(const toy *t, lh_store_ckpt *ck) {
  for (int i = 0; i < t->lay.n_lightning; i++) memcpy(lh_store_ckpt_lightning(ck, i), t->L[i], t->lay.lightning_bytes);
  int64_t p0 = lh_store_ckpt_parent_pos(ck), p1 = lh_store_ckpt_pos(ck);
  for (int j = 0; j < t->lay.n_softmax; j++)
    memcpy(lh_store_ckpt_kv(ck, j), (const char *)t->kv[j] + (size_t)p0 * t->lay.kv_row_bytes,
           (size_t)(p1 - p0) * t->lay.kv_row_bytes);
  memcpy(lh_store_ckpt_logits(ck), t->logits, (size_t)t->lay.vocab_size * 4);
}

/* Load callback: rebuild a toy from a chain (t must be fresh; the caller sets t->pos after). */
static inline lh_status toy_load_cb(void *user, lh_store_part part, int layer, int64_t t0, int64_t t1, const void *data,
                                    size_t nbytes, lh_error *err) {
  toy *t = user;
  switch (part) {
    case LH_PART_LIGHTNING:
      if (layer >= t->lay.n_lightning || nbytes != t->lay.lightning_bytes)
        return lh_error_set(err, LH_EINVAL, "toy: bad lightning piece");
      memcpy(t->L[layer], data, nbytes);
      return LH_OK;
    case LH_PART_KV:
      if (layer >= t->lay.n_softmax || nbytes != (size_t)(t1 - t0) * t->lay.kv_row_bytes)
        return lh_error_set(err, LH_EINVAL, "toy: bad KV piece");
      toy_reserve(t, t1);
      memcpy((char *)t->kv[layer] + (size_t)t0 * t->lay.kv_row_bytes, data, nbytes);
      return LH_OK;
    case LH_PART_LOGITS:
      if (nbytes != (size_t)t->lay.vocab_size * 4) return lh_error_set(err, LH_EINVAL, "toy: bad logits");
      memcpy(t->logits, data, nbytes);
      return LH_OK;
  }
  return lh_error_set(err, LH_EINVAL, "toy: unknown part");
}

/* SHA-256 hex of everything the toy holds at its position. */
static inline void toy_digest(const toy *t, char out[65]) {
  lh_sha256 h;
  lh_sha256_init(&h);
  lh_sha256_update(&h, &t->pos, sizeof t->pos);
  for (int i = 0; i < t->lay.n_lightning; i++) lh_sha256_update(&h, t->L[i], t->lay.lightning_bytes);
  for (int j = 0; j < t->lay.n_softmax; j++) lh_sha256_update(&h, t->kv[j], (size_t)t->pos * t->lay.kv_row_bytes);
  lh_sha256_update(&h, t->logits, (size_t)t->lay.vocab_size * 4);
  uint8_t d[32];
  lh_sha256_final(&h, d);
  lh_hex(d, 32, out);
}

/* Resume like lh_store_resume does for engine states: the longest good prefix of tok[0:n], dropping
 * damaged checkpoints (the store does that inside load) and trying again. t is initialised here. */
static inline lh_status toy_resume(lh_store *s, const lh_state_layout *lay, const int32_t *tok, int64_t n, int64_t job,
                                   toy *t, lh_store_cursor *cur, lh_error *err) {
  for (int attempt = 0; attempt < 64; attempt++) {
    int64_t p, id;
    lh_status st = lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, n, &p, &id, err);
    if (st) return st;
    toy_init(t, lay);
    lh_store_cursor_init(cur, TOY_MODEL_ID, job);
    if (!id) return LH_OK;
    st = lh_store_ckpt_load(s, id, toy_load_cb, t, err);
    if (st == LH_OK) {
      t->pos = p;
      lh_store_cursor_feed(cur, tok, p);
      lh_store_cursor_checkpointed(cur);
      return LH_OK;
    }
    toy_free(t);
    if (st != LH_ECORRUPT) return st;
  }
  return lh_error_set(err, LH_ECORRUPT, "toy: too many damaged checkpoints");
}

/* Checkpoint the toy at the cursor through the writer w, or synchronously into s when w is NULL. */
static inline lh_status toy_checkpoint(lh_store_writer *w, lh_store *s, const toy *t, lh_store_cursor *cur,
                                       lh_error *err) {
  lh_store_ckpt *ck;
  lh_status st;
  if (w) {
    if ((st = lh_store_writer_begin(w, &t->lay, cur, &ck, err))) return st;
    toy_fill(t, ck);
    return lh_store_writer_submit(w, ck, cur, err);
  }
  if ((st = lh_store_ckpt_new(&t->lay, cur, &ck, err))) return st;
  toy_fill(t, ck);
  st = lh_store_ckpt_write(s, ck, NULL, err);
  if (!st) lh_store_cursor_checkpointed(cur);
  lh_store_ckpt_free(ck);
  return st;
}

/* Deterministic token stream. */
static inline void toy_tokens(int32_t *tok, int64_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tok[i] = (int32_t)(x % 50000);
  }
}

#endif
