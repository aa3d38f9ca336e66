/* random_model.h — a MiniMax model with random weights built in memory, bound to the CPU backend
 * without going through files (header-only; for the engine tests and bench_engine_cpu).
 *
 * rm_build fills an lh_config and lh_weights the way engine/model.c would after loading (HF slope
 * formula, tied or separate lm_head, weights stored in F32/BF16/F16) and calls ops->open. For
 * each tensor it also keeps the fp32 values it actually stored (after bf16/f16 rounding), so a
 * test can run an independent double-precision reference on exactly the same numbers.
 * Deterministic: the same seed gives the same weights.
 */
#ifndef LH_TESTS_ENGINE_RANDOM_MODEL_H
#define LH_TESTS_ENGINE_RANDOM_MODEL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/internal.h"
#include "util/half.h"
#include "util/rand.h"

typedef struct rm_tensor {
  lh_tensor t;   /* what the backend sees */
  float *f32;    /* the stored values as fp32 (for references) */
} rm_tensor;

typedef struct rm_layer {
  rm_tensor in_norm, post_norm, qkv, gate, out, attn_norm, q, k, v, o, router;
  rm_tensor *w1, *w3, *w2;
} rm_layer;

typedef struct rm_model {
  lh_model m;    /* first member: an rm_model * is an lh_model * */
  rm_tensor embed, final_norm, lm_head;
  rm_layer *layers;
  lh_tensor *expert_views; /* [n_layers * 3 * E] backing the lh_layer_weights w1/w3/w2 arrays */
  void **allocs;
  int n_allocs, cap_allocs;
} rm_model;

/* uniform in [-1, 1) */
static float rm_uniform(uint64_t *s) { return (float)(lh_splitmix64_uniform(s) * 2.0 - 1.0); }

static void *rm_alloc(rm_model *r, size_t bytes) {
  if (r->n_allocs == r->cap_allocs) {
    r->cap_allocs = r->cap_allocs ? 2 * r->cap_allocs : 64;
    r->allocs = realloc(r->allocs, (size_t)r->cap_allocs * sizeof *r->allocs);
  }
  void *p = calloc(1, bytes ? bytes : 1);
  r->allocs[r->n_allocs++] = p;
  return p;
}

/* A tensor of the given shape filled with center + scale * U(-1, 1), stored in dtype. */
static void rm_fill(rm_model *r, rm_tensor *t, const char *name, lh_dtype dt, int ndim, int64_t s0, int64_t s1,
                    float center, float scale, uint64_t *rng) {
  int64_t n = ndim == 1 ? s0 : s0 * s1;
  void *data = rm_alloc(r, (size_t)n * (dt == LH_F32 ? 4 : 2));
  t->f32 = dt == LH_F32 ? data : rm_alloc(r, (size_t)n * sizeof(float)); /* F32: the data itself */
  for (int64_t i = 0; i < n; i++) {
    float v = center + scale * rm_uniform(rng);
    if (dt == LH_BF16) {
      uint16_t h = lh_f32_to_bf16(v);
      ((uint16_t *)data)[i] = h;
      v = lh_bf16_to_f32(h);
    } else if (dt == LH_F16) {
      uint16_t h = lh_f32_to_f16(v);
      ((uint16_t *)data)[i] = h;
      v = lh_f16_to_f32(h);
    } else {
      ((float *)data)[i] = v;
    }
    t->f32[i] = v;
  }
  t->t = (lh_tensor){data, dt, ndim, {s0, ndim > 1 ? s1 : 0, 0}, name};
}

/* HF MiniMaxLightningAttention.get_slope_rate, in fp32 as torch computes it. */
static void rm_slopes(const lh_config *c, int layer, float *slope) {
  double base = 1.0 / pow(2.0, 8.0 / c->n_heads);
  double factor = 1.0 - layer / (c->n_layers - 1 + 1e-5) + 1e-5;
  for (int h = 0; h < c->n_heads; h++) slope[h] = (float)pow(base, h + 1) * (float)factor;
}

/* A small config for tests: override fields after calling. layer_kind from softmax_every
 * (layer i is softmax when (i + 1) % every == 0), or set by hand; n_lightning/n_softmax are
 * recounted by rm_build. */
static lh_config rm_default_config(void) {
  lh_config c;
  memset(&c, 0, sizeof c);
  strcpy(c.model_type, "minimax");
  c.vocab_size = 97;
  c.hidden_size = 64;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 48;
  c.n_experts = 4;
  c.top_k = 2;
  c.block_size = 16;
  c.rotary_dim = 8;
  c.rope_theta = 10000.0;
  c.rope_attention_factor = 1.0f;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = 0;
  c.postnorm = 1;
  c.max_position_embeddings = 4096;
  c.bos_token_id = c.eos_token_id = -1;
  c.attn_alpha[0] = 1.5f;
  c.attn_beta[0] = 0.75f;
  c.attn_alpha[1] = 1.25f;
  c.attn_beta[1] = 1.1f;
  c.mlp_alpha = 3.5565588200778455f;
  c.mlp_beta = 0.9f;
  c.layer_kind[0] = LH_LAYER_SOFTMAX; /* a softmax layer first */
  c.layer_kind[1] = LH_LAYER_LIGHTNING;
  c.layer_kind[2] = LH_LAYER_LIGHTNING;
  c.layer_kind[3] = LH_LAYER_SOFTMAX;
  return c;
}

static void rm_free(lh_model *m) {
  if (!m) return;
  rm_model *r = (rm_model *)m;
  if (m->ops && m->be) m->ops->close(m->be);
  for (int i = 0; i < r->n_allocs; i++) free(r->allocs[i]);
  free(r->allocs);
  free(r);
}

/* Build and bind. wdt: storage dtype of the matrices (norms stay F32 unless norm_dt says
 * otherwise). Returns NULL with err set when the backend refuses. */
static lh_model *rm_build_ex(const lh_config *cfg_in, uint64_t seed, int64_t max_rows, int threads, lh_dtype wdt,
                             lh_dtype norm_dt, lh_error *err) {
  rm_model *r = calloc(1, sizeof *r);
  lh_model *m = &r->m;
  m->cfg = *cfg_in;
  lh_config *c = &m->cfg;
  c->n_lightning = c->n_softmax = 0;
  for (int l = 0; l < c->n_layers; l++) {
    if (c->layer_kind[l] == LH_LAYER_LIGHTNING) c->n_lightning++;
    else c->n_softmax++;
  }
  m->params.backend = "cpu";
  m->params.threads = threads;
  m->params.max_rows = (int)max_rows;
  m->max_rows = max_rows;
  strcpy(m->backend_name, "cpu");
  uint64_t rng = seed * 0x2545f4914f6cdd1dull + 1;
  int64_t D = c->hidden_size, HD = (int64_t)c->n_heads * c->head_dim, KD = (int64_t)c->n_kv_heads * c->head_dim;
  int64_t Ni = c->intermediate_size, E = c->n_experts;
  float sD = 1.0f / sqrtf((float)D) * 1.7f, sHD = 1.0f / sqrtf((float)HD) * 1.7f, sI = 1.0f / sqrtf((float)Ni) * 1.7f;
  rm_fill(r, &r->embed, "model.embed_tokens.weight", wdt, 2, c->vocab_size, D, 0.0f, 1.0f, &rng);
  rm_fill(r, &r->final_norm, "model.norm.weight", norm_dt, 1, D, 0, 1.0f, 0.3f, &rng);
  if (c->tie_word_embeddings) r->lm_head = r->embed;
  else rm_fill(r, &r->lm_head, "lm_head.weight", wdt, 2, c->vocab_size, D, 0.0f, sD, &rng);
  r->layers = rm_alloc(r, (size_t)c->n_layers * sizeof *r->layers);
  m->w.layers = rm_alloc(r, (size_t)c->n_layers * sizeof *m->w.layers);
  r->expert_views = rm_alloc(r, (size_t)c->n_layers * 3 * (size_t)E * sizeof(lh_tensor));
  for (int l = 0; l < c->n_layers; l++) {
    rm_layer *L = &r->layers[l];
    lh_layer_weights *lw = &m->w.layers[l];
    lw->kind = c->layer_kind[l];
    rm_fill(r, &L->in_norm, "input_layernorm", norm_dt, 1, D, 0, 1.0f, 0.3f, &rng);
    rm_fill(r, &L->post_norm, "post_attention_layernorm", norm_dt, 1, D, 0, 1.0f, 0.3f, &rng);
    lw->in_norm = L->in_norm.t;
    lw->post_norm = L->post_norm.t;
    if (lw->kind == LH_LAYER_LIGHTNING) {
      rm_fill(r, &L->qkv, "qkv_proj", wdt, 2, 3 * HD, D, 0.0f, sD, &rng);
      rm_fill(r, &L->gate, "output_gate", wdt, 2, HD, D, 0.0f, sD, &rng);
      rm_fill(r, &L->out, "out_proj", wdt, 2, D, HD, 0.0f, sHD, &rng);
      rm_fill(r, &L->attn_norm, "self_attn.norm", norm_dt, 1, HD, 0, 1.0f, 0.3f, &rng);
      lw->qkv = L->qkv.t;
      lw->out_gate = L->gate.t;
      lw->out_proj = L->out.t;
      lw->attn_norm = L->attn_norm.t;
      rm_slopes(c, l, lw->slope);
    } else {
      rm_fill(r, &L->q, "q_proj", wdt, 2, HD, D, 0.0f, sD, &rng);
      rm_fill(r, &L->k, "k_proj", wdt, 2, KD, D, 0.0f, sD, &rng);
      rm_fill(r, &L->v, "v_proj", wdt, 2, KD, D, 0.0f, sD, &rng);
      rm_fill(r, &L->o, "o_proj", wdt, 2, D, HD, 0.0f, sHD, &rng);
      lw->q_proj = L->q.t;
      lw->k_proj = L->k.t;
      lw->v_proj = L->v.t;
      lw->o_proj = L->o.t;
    }
    rm_fill(r, &L->router, "gate", wdt, 2, E, D, 0.0f, sD * 2.0f, &rng);
    lw->router = L->router.t;
    L->w1 = rm_alloc(r, (size_t)E * sizeof(rm_tensor));
    L->w3 = rm_alloc(r, (size_t)E * sizeof(rm_tensor));
    L->w2 = rm_alloc(r, (size_t)E * sizeof(rm_tensor));
    lw->w1 = r->expert_views + (size_t)l * 3 * E;
    lw->w3 = lw->w1 + E;
    lw->w2 = lw->w3 + E;
    for (int64_t e = 0; e < E; e++) {
      rm_fill(r, &L->w1[e], "w1", wdt, 2, Ni, D, 0.0f, sD, &rng);
      rm_fill(r, &L->w3[e], "w3", wdt, 2, Ni, D, 0.0f, sD, &rng);
      rm_fill(r, &L->w2[e], "w2", wdt, 2, D, Ni, 0.0f, sI, &rng);
      lw->w1[e] = L->w1[e].t;
      lw->w3[e] = L->w3[e].t;
      lw->w2[e] = L->w2[e].t;
    }
  }
  m->w.embed = r->embed.t;
  m->w.final_norm = r->final_norm.t;
  m->w.lm_head = r->lm_head.t;
  m->ops = &lh_backend_cpu;
  if (m->ops->open(&m->cfg, &m->w, &m->params, max_rows, &m->be, err)) {
    m->be = NULL;
    rm_free(m);
    return NULL;
  }
  return m;
}

static lh_model *rm_build(const lh_config *cfg, uint64_t seed, int64_t max_rows, int threads, lh_dtype wdt,
                          lh_error *err) {
  return rm_build_ex(cfg, seed, max_rows, threads, wdt, LH_F32, err);
}

#endif
