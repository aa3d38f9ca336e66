/* backend_cpu.c — the CPU backend: every operation of lh_backend_ops as a sequence of the
 * reference kernels in kernels/cpu, in fp32, with fp32 KV pages.
 *
 * Memory. Weights stored as F32 (and 4-byte aligned) are used in place, straight from the
 * mapping; BF16/F16 weights are converted to fp32 once, here at open, so a bf16 checkpoint costs
 * 4 bytes per parameter of RAM (twice its size on disk). The embedding table is the exception:
 * its rows are converted as tokens look them up, so only a tied lm_head makes a converted copy.
 * Everything else is sized by max_rows at open and never grows: four activation slots
 * [max_rows x hidden], one workspace whose per-row width is the largest any operation needs
 * (lightning: 5 H d; softmax: 2 H d + 2 Hkv d; MoE: E + (1 + top_k) hidden + 2 I; logits:
 * hidden), the MoE plan, and per-thread scratch for one lightning block and one attention tile (LH_ATTN_ROWS rows).
 * The only memory that grows with the sequence is the KV pages the engine allocates through
 * ops->alloc.
 *
 * Threads. One lh_pool of params->threads threads (0: all online cores) runs every kernel;
 * OpenBLAS runs single-threaded inside the tasks (see kernels/cpu/ops.h for why: its own
 * threading changes the bits). Lightning heads and attention tiles are independent tasks, and
 * GEMM tiles are fixed by shape, so the thread count never changes a result.
 *
 * Never: keep state between calls other than the workspace contents (which every operation
 * overwrites before reading), or read a segment's KV beyond pos + nrows.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "kernels/cpu/ops.h"
#include "util/half.h"
#include "util/log.h"

typedef struct cpu_layer {
  const float *qkv, *gate, *out, *attn_norm; /* lightning */
  const float *q, *k, *v, *o;                /* softmax */
  const float *router;
  const float **w1, **w3, **w2;              /* [E] each */
} cpu_layer;

typedef struct cpu_backend {
  lh_backend base;
  lh_config cfg;
  const lh_weights *w;
  int64_t max_rows;
  lh_pool *pool;
  int threads;
  int attn_bf16; /* softmax attention through lh_attn_tile_bf16 (lh_model_params.cpu_attention) */
  cpu_layer *layers;
  const float **experts;                     /* storage behind every layer's w1/w3/w2 */
  const float *lm_head;
  void **owned;                              /* converted weights */
  int n_owned, cap_owned;
  float *act[LH_ACT_SLOTS];
  float *ws;                                 /* [max_rows x ws_width] */
  float *normbuf;                            /* [max(hidden, H d)]: a converted norm weight */
  float *scratch;                            /* [threads x scratch_floats] */
  size_t scratch_floats;
  int lightning_block;                       /* kernel block length, see cpu_open */
  float *inv_freq;                           /* [rotary_dim / 2] */
  float rope_af;                             /* cos and sin times this (lh_rope_table) */
  int64_t *pos;                              /* [max_rows] row positions (RoPE) */
  int64_t *tile_seg, *tile_row;              /* [max_rows] attention tiles: segment, first row */
  int32_t *moe_idx;                          /* [max_rows x top_k] */
  float *moe_w;                              /* [max_rows x top_k] */
  int64_t *plan_off, *plan_tok, *plan_row;   /* lh_moe_plan storage */
  int tp;                                    /* ranks (params->tp_ranks, or the world's size); 1: the plain path */
  int rank0, rank1;                          /* the ranks this process computes: all [0, tp), or its own */
  lh_comm *comm;                             /* the world, when the ranks are processes (params->comm) */
  int st_h0, st_g0, st_g;                    /* the states' layout: they hold heads from st_h0 and kv heads
                                                [st_g0, st_g0 + st_g) (a world's rank: its share; else all) */
  float *tp_part;                            /* [max_rows x hidden] one rank's partial output */
  double *tp_ss;                             /* [max_rows] the all-heads norm's sum of squares */
} cpu_backend;

static cpu_backend *cpu(lh_backend *be) { return (cpu_backend *)be; }

static void *zalloc(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  void *p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n ? n : 64);
  return p;
}

static int64_t tensor_elems(const lh_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return t->ndim > 0 ? n : 0;
}

static void convert_to_f32(const void *src, lh_dtype dt, int64_t n, float *dst) {
  const unsigned char *b = src;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    switch (dt) {
    case LH_F32: memcpy(&dst[i], b + 4 * i, 4); break;
    case LH_BF16: memcpy(&h, b + 2 * i, 2); dst[i] = lh_bf16_to_f32(h); break;
    default: memcpy(&h, b + 2 * i, 2); dst[i] = lh_f16_to_f32(h); break;
    }
  }
}

static int f32_in_place(const lh_tensor *t) {
  return t->dtype == LH_F32 && ((uintptr_t)t->data & 3) == 0;
}

/* The fp32 array behind weight t, which must hold `elems` elements: in place when possible,
 * else converted into an owned buffer. */
static const float *weight_f32(cpu_backend *be, const lh_tensor *t, int64_t elems, const char *what,
                               lh_error *err) {
  if (!t->data) {
    lh_error_set(err, LH_EINVAL, "cpu backend: weight %s is missing", t->name ? t->name : what);
    return NULL;
  }
  if (tensor_elems(t) != elems || t->dtype >= LH_DTYPE_COUNT) {
    lh_error_set(err, LH_EINVAL, "cpu backend: weight %s has %lld elements, the config needs %lld (%s)",
                 t->name ? t->name : what, (long long)tensor_elems(t), (long long)elems, what);
    return NULL;
  }
  if (f32_in_place(t)) return t->data;
  if (be->n_owned == be->cap_owned) {
    int cap = be->cap_owned ? 2 * be->cap_owned : 64;
    void **o = realloc(be->owned, (size_t)cap * sizeof *o);
    if (!o) goto nomem;
    be->owned = o;
    be->cap_owned = cap;
  }
  float *f = zalloc((size_t)elems * sizeof(float));
  if (!f) goto nomem;
  convert_to_f32(t->data, t->dtype, elems, f);
  be->owned[be->n_owned++] = f;
  return f;
nomem:
  lh_error_set(err, LH_ENOMEM, "cpu backend: out of memory converting %s (%lld elements) to fp32",
               t->name ? t->name : what, (long long)elems);
  return NULL;
}

/* A norm weight as fp32: in place, or converted into normbuf (valid until the next call). */
static const float *norm_f32(cpu_backend *be, const lh_tensor *t) {
  if (f32_in_place(t)) return t->data;
  convert_to_f32(t->data, t->dtype, tensor_elems(t), be->normbuf);
  return be->normbuf;
}

static void cpu_close(lh_backend *b) {
  cpu_backend *be = cpu(b);
  if (!be) return;
  lh_pool_free(be->pool);
  for (int i = 0; i < be->n_owned; i++) free(be->owned[i]);
  free(be->owned);
  for (int i = 0; i < LH_ACT_SLOTS; i++) free(be->act[i]);
  free(be->layers);
  free(be->experts);
  free(be->ws);
  free(be->normbuf);
  free(be->scratch);
  free(be->inv_freq);
  free(be->pos);
  free(be->tile_seg);
  free(be->tile_row);
  free(be->moe_idx);
  free(be->moe_w);
  free(be->plan_off);
  free(be->plan_tok);
  free(be->plan_row);
  free(be->tp_part);
  free(be->tp_ss);
  free(be);
}

static lh_status check_config(const lh_config *c, int64_t max_rows, lh_error *err) {
  const char *bad = NULL;
  if (c->hidden_size < 1 || c->n_layers < 1 || c->n_layers > LH_MAX_LAYERS) bad = "hidden_size/n_layers";
  else if (c->n_heads < 1 || c->n_heads > LH_MAX_HEADS || c->head_dim < 1) bad = "n_heads/head_dim";
  else if (c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads) bad = "n_kv_heads (must divide n_heads)";
  else if (c->rotary_dim < 0 || c->rotary_dim > c->head_dim || c->rotary_dim % 2 || c->rotary_dim > 1024)
    bad = "rotary_dim (even, <= head_dim, <= 1024)";
  else if (c->n_experts < 1 || c->n_experts > 1024 || c->top_k < 1 || c->top_k > c->n_experts)
    bad = "n_experts/top_k (1 <= top_k <= n_experts <= 1024)";
  else if (c->block_size < 1 || c->block_size > 4096) bad = "block_size (1..4096)";
  else if (c->vocab_size < 1 || c->intermediate_size < 1) bad = "vocab_size/intermediate_size";
  else if (max_rows < 1) bad = "max_rows";
  if (bad) return lh_error_set(err, LH_EINVAL, "cpu backend: unsupported configuration: %s", bad);
  return LH_OK;
}

static lh_status cpu_open(const lh_config *cfg, const lh_weights *w, const lh_model_params *p, int64_t max_rows,
                          lh_backend **out, lh_error *err) {
  *out = NULL;
  lh_status st = check_config(cfg, max_rows, err);
  if (st) return st;
  cpu_backend *be = calloc(1, sizeof *be);
  if (!be) return lh_error_set(err, LH_ENOMEM, "cpu backend: out of memory");
  be->base.ops = &lh_backend_cpu;
  be->cfg = *cfg;
  be->w = w;
  be->max_rows = max_rows;
  const lh_config *c = &be->cfg;
  int64_t D = c->hidden_size, H = c->n_heads, d = c->head_dim, HD = H * d, KD = (int64_t)c->n_kv_heads * d;
  int64_t E = c->n_experts, I = c->intermediate_size, K = c->top_k;

  be->attn_bf16 = p && p->cpu_attention == LH_CPU_ATTN_BF16; /* model.c checked that it can run */
  be->tp = p && p->tp_ranks > 1 ? p->tp_ranks : 1;
  be->rank0 = 0, be->rank1 = be->tp;
  be->st_h0 = 0, be->st_g0 = 0, be->st_g = c->n_kv_heads;
  if (p && p->comm && lh_comm_size(p->comm) > 1) { /* one rank of a world (engine/ranks.c) */
    be->comm = p->comm;
    be->tp = lh_comm_size(p->comm);
    be->rank0 = lh_comm_rank(p->comm), be->rank1 = be->rank0 + 1;
    int64_t lo, hi;
    lh_tp_share(c->n_heads, be->tp, be->rank0, &lo, &hi);
    be->st_h0 = (int)lo;
    lh_tp_share(c->n_kv_heads, be->tp, be->rank0, &lo, &hi);
    be->st_g0 = (int)lo, be->st_g = (int)(hi - lo);
  }
  /* a world's rank converts only its own experts (the others are never read here) */
  int64_t own_e0 = 0, own_e1 = E;
  if (be->comm) lh_tp_share(E, be->tp, be->rank0, &own_e0, &own_e1);

  be->threads = p && p->threads > 0 ? p->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (be->threads < 1) be->threads = 1;
  be->pool = lh_pool_new(be->threads);
  be->layers = calloc((size_t)c->n_layers, sizeof *be->layers);
  be->experts = calloc((size_t)c->n_layers * 3 * (size_t)E, sizeof *be->experts);
  if (!be->pool || !be->layers || !be->experts) goto nomem;

  for (int l = 0; l < c->n_layers; l++) {
    const lh_layer_weights *lw = &w->layers[l];
    cpu_layer *L = &be->layers[l];
    char what[64];
    snprintf(what, sizeof what, "layer %d", l);
    if (lw->kind != c->layer_kind[l]) {
      st = lh_error_set(err, LH_EINVAL, "cpu backend: layer %d weights are for the other attention kind", l);
      goto fail;
    }
#define W(dst, t, n)                                                                 \
  do {                                                                               \
    if (!((dst) = weight_f32(be, &(t), (n), what, err))) {                           \
      st = err ? err->code : LH_EINVAL;                                              \
      goto fail;                                                                     \
    }                                                                                \
  } while (0)
    if (lw->kind == LH_LAYER_LIGHTNING) {
      W(L->qkv, lw->qkv, 3 * HD * D);
      W(L->gate, lw->out_gate, HD * D);
      W(L->out, lw->out_proj, D * HD);
      W(L->attn_norm, lw->attn_norm, HD);
    } else {
      W(L->q, lw->q_proj, HD * D);
      W(L->k, lw->k_proj, KD * D);
      W(L->v, lw->v_proj, KD * D);
      W(L->o, lw->o_proj, D * HD);
    }
    if (tensor_elems(&lw->in_norm) != D || tensor_elems(&lw->post_norm) != D || !lw->in_norm.data ||
        !lw->post_norm.data) {
      st = lh_error_set(err, LH_EINVAL, "cpu backend: layer %d norm weights must have %lld elements", l,
                        (long long)D);
      goto fail;
    }
    W(L->router, lw->router, E * D);
    L->w1 = be->experts + (size_t)l * 3 * E;
    L->w3 = L->w1 + E;
    L->w2 = L->w3 + E;
    if (!lw->w1 || !lw->w3 || !lw->w2) {
      st = lh_error_set(err, LH_EINVAL, "cpu backend: layer %d has no expert weights", l);
      goto fail;
    }
    for (int64_t e = own_e0; e < own_e1; e++) {
      W(L->w1[e], lw->w1[e], I * D);
      W(L->w3[e], lw->w3[e], I * D);
      W(L->w2[e], lw->w2[e], D * I);
    }
  }
  {
    const char *what = "lm_head";
    W(be->lm_head, w->lm_head, (int64_t)c->vocab_size * D);
  }
#undef W
  if (tensor_elems(&w->embed) != (int64_t)c->vocab_size * D || !w->embed.data ||
      tensor_elems(&w->final_norm) != D || !w->final_norm.data) {
    st = lh_error_set(err, LH_EINVAL, "cpu backend: embedding must be [vocab x hidden] and the final norm [hidden]");
    goto fail;
  }

  int64_t width = 5 * HD;                              /* lightning: qkv, gate, o */
  if (2 * HD + 2 * KD > width) width = 2 * HD + 2 * KD; /* softmax: q, k, v, o */
  if (E + (1 + K) * D + 2 * I > width) width = E + (1 + K) * D + 2 * I; /* MoE */
  if (D > width) width = D;                            /* logits */
  be->ws = zalloc((size_t)(max_rows * width) * sizeof(float));
  be->normbuf = zalloc((size_t)(D > HD ? D : HD) * sizeof(float));
  /* The lightning kernel's block length is free (any blocking computes the same function, see
   * kernels/cpu/lightning.c); per token it costs ~2 B d for the masked product and ~2 d^2 for the
   * state, so B near d is fastest: at d = 64, blocks of 64 took 7 ms per head per 8K tokens
   * against 14 ms for 256. Capped by the config's block_size, which HF uses. */
  be->lightning_block = c->block_size < (d > 32 ? (int)d : 32) ? c->block_size : (d > 32 ? (int)d : 32);
  be->scratch_floats = lh_lightning_scratch(be->lightning_block, (int)d);
  size_t as = lh_attn_scratch((int)d, LH_KV_PAGE_TOKENS);
  if (as > be->scratch_floats) be->scratch_floats = as;
  be->scratch_floats = (be->scratch_floats + 15) / 16 * 16;
  be->scratch = zalloc((size_t)be->threads * be->scratch_floats * sizeof(float));
  be->inv_freq = zalloc((size_t)(c->rotary_dim / 2 + 1) * sizeof(float));
  be->pos = zalloc((size_t)max_rows * sizeof(int64_t));
  be->tile_seg = zalloc((size_t)max_rows * sizeof(int64_t));
  be->tile_row = zalloc((size_t)max_rows * sizeof(int64_t));
  be->moe_idx = zalloc((size_t)(max_rows * K) * sizeof(int32_t));
  be->moe_w = zalloc((size_t)(max_rows * K) * sizeof(float));
  if (be->tp > 1) {
    if (c->n_heads % be->tp || c->n_kv_heads % be->tp || c->n_experts % be->tp) {
      st = lh_error_set(err, LH_EINVAL, "cpu backend: %d ranks must divide the heads (%d), kv heads (%d) and experts (%d)",
                        be->tp, c->n_heads, c->n_kv_heads, c->n_experts);
      goto fail;
    }
    be->tp_part = zalloc((size_t)(max_rows * D) * sizeof(float));
    be->tp_ss = zalloc((size_t)max_rows * sizeof(double));
    if (!be->tp_part || !be->tp_ss) goto nomem;
  }
  be->plan_off = zalloc((size_t)(E + 1) * sizeof(int64_t));
  be->plan_tok = zalloc((size_t)(max_rows * K) * sizeof(int64_t));
  be->plan_row = zalloc((size_t)(max_rows * K) * sizeof(int64_t));
  for (int i = 0; i < LH_ACT_SLOTS; i++)
    if (!(be->act[i] = zalloc((size_t)(max_rows * D) * sizeof(float)))) goto nomem;
  if (!be->ws || !be->normbuf || !be->scratch || !be->inv_freq || !be->pos || !be->tile_seg || !be->tile_row ||
      !be->moe_idx || !be->moe_w || !be->plan_off || !be->plan_tok || !be->plan_row)
    goto nomem;
  be->rope_af = lh_rope_table(c, be->inv_freq);
  if (p && p->verbose)
    lh_log_info("cpu backend: %d threads, %d weight tensors converted to fp32, workspace %lld rows", be->threads,
                be->n_owned, (long long)max_rows);
  *out = &be->base;
  return LH_OK;
nomem:
  st = lh_error_set(err, LH_ENOMEM, "cpu backend: out of memory for the workspace (max_rows %lld rows)",
                    (long long)max_rows);
fail:
  cpu_close(&be->base);
  return st;
}

static void *cpu_alloc(lh_backend *be, size_t bytes) {
  (void)be;
  return zalloc(bytes);
}

static void cpu_free(lh_backend *be, void *p) {
  (void)be;
  free(p);
}

static lh_status cpu_memcpy(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err) {
  (void)be;
  (void)err;
  if (bytes) memcpy(dst, src, bytes);
  return LH_OK;
}

static void *cpu_act(lh_backend *be, int slot) {
  return slot >= 0 && slot < LH_ACT_SLOTS ? cpu(be)->act[slot] : NULL;
}

static lh_status cpu_embed(lh_backend *b, const int32_t *tokens, int64_t n, void *x, lh_error *err) {
  cpu_backend *be = cpu(b);
  int64_t D = be->cfg.hidden_size;
  const lh_tensor *t = &be->w->embed;
  size_t es = t->dtype == LH_F32 ? 4 : 2;
  for (int64_t i = 0; i < n; i++) {
    if (tokens[i] < 0 || tokens[i] >= be->cfg.vocab_size)
      return lh_error_set(err, LH_EINVAL, "cpu backend: token id %d is outside the vocabulary (0..%d)", tokens[i],
                          be->cfg.vocab_size - 1);
    convert_to_f32((const unsigned char *)t->data + (size_t)tokens[i] * D * es, t->dtype, D, (float *)x + i * D);
  }
  return LH_OK;
}

static lh_status cpu_rmsnorm(lh_backend *b, const void *x, int64_t n, const lh_tensor *w, void *y, lh_error *err) {
  (void)err;
  cpu_backend *be = cpu(b);
  int64_t D = be->cfg.hidden_size;
  lh_rmsnorm(be->pool, x, D, n, D, norm_f32(be, w), be->cfg.rms_norm_eps, y, D);
  return LH_OK;
}

static lh_status cpu_residual(lh_backend *b, const void *h, const void *a, float alpha, float beta, int64_t n,
                              void *x, const lh_tensor *norm_w, void *y, lh_error *err) {
  cpu_backend *be = cpu(b);
  int64_t D = be->cfg.hidden_size;
  lh_axpby(be->pool, h, a, alpha, beta, n, D, x);
  if (norm_w) return cpu_rmsnorm(b, x, n, norm_w, y, err);
  return LH_OK;
}

typedef struct lightning_job {
  cpu_backend *be;
  const lh_batch *b;
  int li;
  const float *qkv;
  float *o;
  const float *slope;
  int h0, nh; /* heads [h0, h0 + nh): all of them, or one rank's */
} lightning_job;

/* tp_ranks: the ranks write their sums into out while later ranks still read h (see the TP section). */
static lh_status tp_check_alias(const cpu_backend *be, const void *h, const void *out, lh_error *err) {
  if (be->tp <= 1 || out != h) return LH_OK;
  return lh_error_set(err, LH_EINVAL, "cpu backend: tp_ranks needs out and h in different buffers");
}

static void lightning_task(void *ctx, int64_t t, int worker) {
  const lightning_job *j = ctx;
  const lh_config *c = &j->be->cfg;
  int H = c->n_heads, d = c->head_dim;
  int64_t HD = (int64_t)H * d;
  const lh_segment *s = &j->b->seg[t / j->nh];
  int h = j->h0 + (int)(t % j->nh);
  const float *q = j->qkv + s->row0 * 3 * HD + (int64_t)h * 3 * d;
  float *S = (float *)s->seq->lightning[j->li] + (int64_t)(h - j->be->st_h0) * d * d;
  lh_lightning_head(s->nrows, d, j->be->lightning_block, j->slope[h], q, 3 * HD, q + d, 3 * HD, q + 2 * d, 3 * HD, S,
                    j->o + s->row0 * HD + (int64_t)h * d, HD, j->be->scratch + (size_t)worker * j->be->scratch_floats);
}

static lh_status tp_attn_lightning(cpu_backend *be, int layer, int li, const float *h, const lh_batch *b, float *out,
                                   lh_error *err);

static lh_status cpu_attn_lightning(lh_backend *bk, int layer, int li, const void *hv, const lh_batch *b, void *out,
                                    lh_error *err) {
  (void)err;
  cpu_backend *be = cpu(bk);
  const lh_config *c = &be->cfg;
  const cpu_layer *L = &be->layers[layer];
  int64_t n = b->n, D = c->hidden_size, HD = (int64_t)c->n_heads * c->head_dim;
  const float *h = hv;
  float *qkv = be->ws, *gate = qkv + n * 3 * HD, *o = gate + n * HD;
  if (tp_check_alias(be, hv, out, err)) return LH_EINVAL;
  if (be->tp > 1) return tp_attn_lightning(be, layer, li, h, b, out, err);
  lh_gemm_nt(be->pool, n, 3 * HD, D, h, D, L->qkv, D, qkv, 3 * HD, 0);
  lh_silu(be->pool, qkv, 3 * HD, n, 3 * HD);
  lh_gemm_nt(be->pool, n, HD, D, h, D, L->gate, D, gate, HD, 0);
  lh_sigmoid(be->pool, gate, HD, n, HD);
  lightning_job j = {be, b, li, qkv, o, be->w->layers[layer].slope, 0, c->n_heads};
  lh_pool_run(be->pool, (int64_t)b->nseg * c->n_heads, lightning_task, &j);
  /* HF: norm over all heads (eps 1e-6, MiniMaxRMSNorm's default), then the gate */
  lh_rmsnorm(be->pool, o, HD, n, HD, L->attn_norm, 1e-6, o, HD);
  lh_mul(be->pool, o, HD, gate, HD, n, HD);
  lh_gemm_nt(be->pool, n, D, HD, o, HD, L->out, HD, out, D, 0);
  return LH_OK;
}

typedef struct softmax_job {
  cpu_backend *be;
  const lh_batch *b;
  int si;
  const float *q;
  float *o;
  float scale;
  int g0, ng; /* kv heads [g0, g0 + ng): all of them, or one rank's */
} softmax_job;

/* Query tiles: LH_ATTN_ROWS / (heads per kv head) consecutive queries of one segment, for all the
 * query heads of one kv head at once. */
static int64_t attn_tile_queries(const lh_config *c) {
  int64_t q = LH_ATTN_ROWS / (c->n_heads / c->n_kv_heads);
  return q > 0 ? q : 1;
}

static void softmax_task(void *ctx, int64_t t, int worker) {
  const softmax_job *j = ctx;
  const lh_config *c = &j->be->cfg;
  int G = c->n_kv_heads, d = c->head_dim, rep = c->n_heads / G;
  int64_t HD = (int64_t)c->n_heads * d, tile = t / j->ng, tq = attn_tile_queries(c);
  int g = j->g0 + (int)(t % j->ng);
  const lh_segment *s = &j->b->seg[j->be->tile_seg[tile]];
  int64_t r = j->be->tile_row[tile]; /* batch row of the tile's first query */
  int64_t end = s->row0 + s->nrows;
  int nq = (int)(end - r < tq ? end - r : tq);
  lh_kv_pages kv = {s->seq->kv_pages[j->si], j->be->st_g, d, LH_KV_PAGE_TOKENS};
  const float *q = j->q + r * HD + (int64_t)g * rep * d;
  (j->be->attn_bf16 ? lh_attn_tile_bf16 : lh_attn_tile)(&kv, g - j->be->st_g0, rep, s->pos + (r - s->row0), nq, q, HD, d, j->scale, j->o + r * HD + (int64_t)g * rep * d, HD,
               d, j->be->scratch + (size_t)worker * j->be->scratch_floats);
}

/* Each row's position (for RoPE) and the attention tiles of the batch; returns the tile count. */
static int64_t softmax_tiles(cpu_backend *be, const lh_batch *b) {
  int64_t ntiles = 0;
  for (int i = 0; i < b->nseg; i++) {
    const lh_segment *s = &b->seg[i];
    for (int64_t r = 0; r < s->nrows; r++) be->pos[s->row0 + r] = s->pos + r;
    for (int64_t r = 0; r < s->nrows; r += attn_tile_queries(&be->cfg)) {
      be->tile_seg[ntiles] = i;
      be->tile_row[ntiles++] = s->row0 + r;
    }
  }
  return ntiles;
}

static lh_status tp_attn_softmax(cpu_backend *be, int layer, int si, const float *h, const lh_batch *b, float *out,
                                 lh_error *err);

static lh_status cpu_attn_softmax(lh_backend *bk, int layer, int si, const void *hv, const lh_batch *b, void *out,
                                  lh_error *err) {
  (void)err;
  cpu_backend *be = cpu(bk);
  const lh_config *c = &be->cfg;
  const cpu_layer *L = &be->layers[layer];
  int64_t n = b->n, D = c->hidden_size, d = c->head_dim, HD = (int64_t)c->n_heads * d, KD = (int64_t)c->n_kv_heads * d;
  const float *h = hv;
  float *q = be->ws, *k = q + n * HD, *v = k + n * KD, *o = v + n * KD;
  if (tp_check_alias(be, hv, out, err)) return LH_EINVAL;
  if (be->tp > 1) return tp_attn_softmax(be, layer, si, h, b, out, err);
  lh_gemm_nt(be->pool, n, HD, D, h, D, L->q, D, q, HD, 0);
  lh_gemm_nt(be->pool, n, KD, D, h, D, L->k, D, k, KD, 0);
  lh_gemm_nt(be->pool, n, KD, D, h, D, L->v, D, v, KD, 0);
  int64_t ntiles = softmax_tiles(be, b);
  if (c->rotary_dim > 0) {
    lh_rope(be->pool, q, HD, n, c->n_heads, (int)d, c->rotary_dim, be->inv_freq, be->pos, be->rope_af);
    lh_rope(be->pool, k, KD, n, c->n_kv_heads, (int)d, c->rotary_dim, be->inv_freq, be->pos, be->rope_af);
  }
  lh_length_scale(be->pool, q, HD, n, c->n_heads, (int)d, be->w->layers[layer].length_scale,
                  c->attn_length_scale_base, be->pos); /* a no-op when the config has it off */
  for (int i = 0; i < b->nseg; i++) {
    const lh_segment *s = &b->seg[i];
    lh_kv_pages kv = {s->seq->kv_pages[si], c->n_kv_heads, (int)d, LH_KV_PAGE_TOKENS};
    lh_kv_write(&kv, s->pos, s->nrows, k + s->row0 * KD, KD, v + s->row0 * KD, KD);
  }
  softmax_job j = {be, b, si, q, o, (float)(1.0 / sqrt((double)d)), 0, c->n_kv_heads};
  lh_pool_run(be->pool, ntiles * c->n_kv_heads, softmax_task, &j);
  lh_gemm_nt(be->pool, n, D, HD, o, HD, L->o, HD, out, D, 0);
  return LH_OK;
}

/* The router, top-k and the plan of which rows each expert takes; workspace pointers for the
 * experts' rows (y: [n x top_k x hidden], in plan order). */
typedef struct moe_ws {
  lh_moe_plan plan;
  float *xg, *g, *u, *y;
} moe_ws;
static moe_ws moe_route_plan(cpu_backend *be, const cpu_layer *L, const float *h, int64_t n) {
  const lh_config *c = &be->cfg;
  int64_t D = c->hidden_size, E = c->n_experts, I = c->intermediate_size, K = c->top_k;
  moe_ws m = {{be->plan_off, be->plan_tok, be->plan_row}, NULL, NULL, NULL, NULL};
  float *logits = be->ws;
  m.xg = logits + n * E, m.g = m.xg + n * D, m.u = m.g + n * I, m.y = m.u + n * I;
  lh_gemm_nt(be->pool, n, E, D, h, D, L->router, D, logits, E, 0);
  lh_moe_route(logits, n, (int)E, (int)K, be->moe_idx, be->moe_w);
  lh_moe_plan_build(be->moe_idx, n, (int)E, (int)K, &m.plan);
  return m;
}
/* Expert e's SwiGLU on the rows routed to it, into its rows of m->y. */
static void moe_expert(cpu_backend *be, const cpu_layer *L, const float *h, const moe_ws *m, int64_t e) {
  int64_t D = be->cfg.hidden_size, I = be->cfg.intermediate_size;
  int64_t r0 = m->plan.offset[e], rows = m->plan.offset[e + 1] - r0;
  if (!rows) return;
  lh_gather_rows(be->pool, h, D, m->plan.token, r0, r0 + rows, D, m->xg);
  lh_gemm_nt(be->pool, rows, I, D, m->xg, D, L->w1[e], D, m->g, I, 0);
  lh_gemm_nt(be->pool, rows, I, D, m->xg, D, L->w3[e], D, m->u, I, 0);
  lh_swiglu(be->pool, m->g, m->u, rows, I, m->g);
  lh_gemm_nt(be->pool, rows, D, I, m->g, I, L->w2[e], I, m->y + r0 * D, D, 0);
}

static lh_status tp_moe(cpu_backend *be, int layer, const float *h, int64_t n, float *out, lh_error *err);

static lh_status cpu_moe(lh_backend *bk, int layer, const void *hv, int64_t n, void *out, lh_error *err) {
  (void)err;
  cpu_backend *be = cpu(bk);
  if (tp_check_alias(be, hv, out, err)) return LH_EINVAL;
  if (be->tp > 1) return tp_moe(be, layer, hv, n, out, err);
  const cpu_layer *L = &be->layers[layer];
  moe_ws m = moe_route_plan(be, L, hv, n);
  for (int64_t e = 0; e < be->cfg.n_experts; e++) moe_expert(be, L, hv, &m, e);
  lh_moe_combine(be->pool, &m.plan, m.y, be->moe_w, n, be->cfg.top_k, be->cfg.hidden_size, out);
  return LH_OK;
}

/* ---- tensor/expert-parallel ranks (params->tp_ranks or params->comm; issue 10) ---------------
 *
 * Rank r of R owns heads [H r/R, H (r+1)/R) (lightning: their qkv and output_gate rows, out_proj
 * columns and states), kv heads [G r/R, G (r+1)/R) with their query heads (softmax: q/k/v rows,
 * o_proj columns, those heads' rows of every KV page) and experts [E r/R, E (r+1)/R); the router
 * runs on every rank. Where a multi-GPU run all-reduces, the ranks' partial results are summed
 * here in rank order (tp_sum): the out_proj, o_proj and MoE outputs, and the all-heads norm's
 * per-row sum of squares. States and KV pages are shared memory laid out as for one rank, so a
 * checkpoint is the same logical state whatever R. This checks the partitioning arithmetic on the
 * CPU (tests/engine/test_engine_parity.c compares R = 2, 4, 8 with R = 1 and with HF); it is not a
 * way to run faster. The ranks run one after another and write their sums into out as they go,
 * so out must not be the input h (the engine never passes the same slot).
 *
 * When the ranks are processes (params->comm, engine/ranks.c), this process computes only its own
 * rank (rank0 == rank1 - 1) and the sums go through lh_comm_sum_*, which adds the ranks' buffers
 * in rank order: the same operations in the same order as the loop over all ranks here, so the
 * same bits. Each process's states hold only its share (st_h0, st_g0, st_g: the engine allocates
 * them so, engine/state.c), indexed from its first head and kv head. */
/* out = part (the first rank here) or out += part: the [n x dim] partial sums, in rank order */
static void tp_sum(const cpu_backend *be, float *out, const float *part, int64_t n, int64_t dim, int r) {
  if (r == be->rank0) {
    memcpy(out, part, (size_t)(n * dim) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n * dim; i++) out[i] += part[i];
}
/* The all-reduce across processes, after this process's ranks have summed theirs. */
static lh_status tp_reduce(const cpu_backend *be, float *out, int64_t n, int64_t dim, lh_error *err) {
  return be->comm ? lh_comm_sum_f32(be->comm, out, n * dim, err) : LH_OK;
}

static lh_status tp_attn_lightning(cpu_backend *be, int layer, int li, const float *h, const lh_batch *b, float *out,
                                   lh_error *err) {
  const lh_config *c = &be->cfg;
  const cpu_layer *L = &be->layers[layer];
  const int R = be->tp, d = c->head_dim;
  int64_t n = b->n, D = c->hidden_size, HD = (int64_t)c->n_heads * d;
  float *qkv = be->ws, *gate = qkv + n * 3 * HD, *o = gate + n * HD;
  for (int64_t i = 0; i < n; i++) be->tp_ss[i] = 0;
  for (int r = be->rank0; r < be->rank1; r++) {
    int64_t h0, h1;
    lh_tp_share(c->n_heads, R, r, &h0, &h1);
    const int64_t c0 = h0 * d, w = (h1 - h0) * d;
    lh_gemm_nt(be->pool, n, 3 * w, D, h, D, L->qkv + 3 * c0 * D, D, qkv + 3 * c0, 3 * HD, 0);
    lh_silu(be->pool, qkv + 3 * c0, 3 * HD, n, 3 * w);
    lh_gemm_nt(be->pool, n, w, D, h, D, L->gate + c0 * D, D, gate + c0, HD, 0);
    lh_sigmoid(be->pool, gate + c0, HD, n, w);
    lightning_job j = {be, b, li, qkv, o, be->w->layers[layer].slope, (int)h0, (int)(h1 - h0)};
    lh_pool_run(be->pool, (int64_t)b->nseg * (h1 - h0), lightning_task, &j);
    for (int64_t row = 0; row < n; row++) { /* this rank's share of the all-heads sum of squares */
      double ss = 0;
      for (int64_t i = 0; i < w; i++) ss += (double)o[row * HD + c0 + i] * o[row * HD + c0 + i];
      be->tp_ss[row] += ss;
    }
  }
  lh_status st = be->comm ? lh_comm_sum_f64(be->comm, be->tp_ss, n, err) : LH_OK; /* the norm's all-reduce */
  if (st) return st;
  for (int r = be->rank0; r < be->rank1; r++) {
    int64_t h0, h1;
    lh_tp_share(c->n_heads, R, r, &h0, &h1);
    const int64_t c0 = h0 * d, w = (h1 - h0) * d;
    for (int64_t row = 0; row < n; row++) { /* HF's all-heads RMSNorm (eps 1e-6) on this rank's columns */
      float inv = (float)(1.0 / sqrt(be->tp_ss[row] / (double)HD + 1e-6));
      float *x = o + row * HD + c0;
      for (int64_t i = 0; i < w; i++) x[i] = L->attn_norm[c0 + i] * (x[i] * inv);
    }
    lh_mul(be->pool, o + c0, HD, gate + c0, HD, n, w);
    lh_gemm_nt(be->pool, n, D, w, o + c0, HD, L->out + c0, HD, be->tp_part, D, 0);
    tp_sum(be, out, be->tp_part, n, D, r);
  }
  return tp_reduce(be, out, n, D, err);
}

static lh_status tp_attn_softmax(cpu_backend *be, int layer, int si, const float *h, const lh_batch *b, float *out,
                                 lh_error *err) {
  const lh_config *c = &be->cfg;
  const cpu_layer *L = &be->layers[layer];
  const int R = be->tp, G = c->n_kv_heads, rep = c->n_heads / G;
  int64_t n = b->n, D = c->hidden_size, d = c->head_dim, HD = (int64_t)c->n_heads * d, KD = (int64_t)G * d;
  float *q = be->ws, *k = q + n * HD, *v = k + n * KD, *o = v + n * KD;
  int64_t ntiles = softmax_tiles(be, b);
  for (int r = be->rank0; r < be->rank1; r++) {
    int64_t g0, g1;
    lh_tp_share(G, R, r, &g0, &g1);
    const int64_t qc = g0 * rep * d, qw = (g1 - g0) * rep * d, kc = g0 * d, kw = (g1 - g0) * d;
    lh_gemm_nt(be->pool, n, qw, D, h, D, L->q + qc * D, D, q + qc, HD, 0);
    lh_gemm_nt(be->pool, n, kw, D, h, D, L->k + kc * D, D, k + kc, KD, 0);
    lh_gemm_nt(be->pool, n, kw, D, h, D, L->v + kc * D, D, v + kc, KD, 0);
    if (c->rotary_dim > 0) {
      lh_rope(be->pool, q + qc, HD, n, (int)((g1 - g0) * rep), (int)d, c->rotary_dim, be->inv_freq, be->pos,
              be->rope_af);
      lh_rope(be->pool, k + kc, KD, n, (int)(g1 - g0), (int)d, c->rotary_dim, be->inv_freq, be->pos, be->rope_af);
    }
    lh_length_scale(be->pool, q + qc, HD, n, (int)((g1 - g0) * rep), (int)d,
                    be->w->layers[layer].length_scale + g0 * rep, c->attn_length_scale_base, be->pos);
    for (int i = 0; i < b->nseg; i++) {
      const lh_segment *s = &b->seg[i];
      /* the pages hold kv heads from st_g0 (k and v rows are shifted to match) */
      lh_kv_pages kv = {s->seq->kv_pages[si], be->st_g, (int)d, LH_KV_PAGE_TOKENS};
      lh_kv_write_heads(&kv, (int)g0 - be->st_g0, (int)g1 - be->st_g0, s->pos, s->nrows, k + s->row0 * KD + be->st_g0 * d,
                        KD, v + s->row0 * KD + be->st_g0 * d, KD);
    }
    softmax_job j = {be, b, si, q, o, (float)(1.0 / sqrt((double)d)), (int)g0, (int)(g1 - g0)};
    lh_pool_run(be->pool, ntiles * (g1 - g0), softmax_task, &j);
    lh_gemm_nt(be->pool, n, D, qw, o + qc, HD, L->o + qc, HD, be->tp_part, D, 0);
    tp_sum(be, out, be->tp_part, n, D, r);
  }
  return tp_reduce(be, out, n, D, err);
}

static lh_status tp_moe(cpu_backend *be, int layer, const float *h, int64_t n, float *out, lh_error *err) {
  const cpu_layer *L = &be->layers[layer];
  const int64_t D = be->cfg.hidden_size, K = be->cfg.top_k;
  moe_ws m = moe_route_plan(be, L, h, n); /* every rank routes the same */
  for (int r = be->rank0; r < be->rank1; r++) {
    int64_t e0, e1;
    lh_tp_share(be->cfg.n_experts, be->tp, r, &e0, &e1);
    memset(m.y, 0, (size_t)(n * K * D) * sizeof(float)); /* rows of other ranks' experts add nothing */
    for (int64_t e = e0; e < e1; e++) moe_expert(be, L, h, &m, e);
    lh_moe_combine(be->pool, &m.plan, m.y, be->moe_w, n, (int)K, D, be->tp_part);
    tp_sum(be, out, be->tp_part, n, D, r);
  }
  return tp_reduce(be, out, n, D, err);
}

static lh_status cpu_logits(lh_backend *bk, const void *xv, const int64_t *rows, int64_t nrows, float *out,
                            lh_error *err) {
  (void)err;
  cpu_backend *be = cpu(bk);
  int64_t D = be->cfg.hidden_size, V = be->cfg.vocab_size;
  const float *x = xv;
  float *t = be->ws;
  for (int64_t i = 0; i < nrows; i++) memcpy(t + i * D, x + rows[i] * D, (size_t)D * sizeof(float));
  lh_rmsnorm(be->pool, t, D, nrows, D, norm_f32(be, &be->w->final_norm), be->cfg.rms_norm_eps, t, D);
  lh_gemm_nt(be->pool, nrows, V, D, t, D, be->lm_head, D, out, V, 0);
  return LH_OK;
}

const lh_backend_ops lh_backend_cpu = {
    .name = "cpu",
    .act_dtype = LH_F32,
    .kv_dtype = LH_F32,
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_host = cpu_memcpy,
    .from_host = cpu_memcpy,
    .copy = cpu_memcpy,
    .act = cpu_act,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .residual = cpu_residual,
    .attn_lightning = cpu_attn_lightning,
    .attn_softmax = cpu_attn_softmax,
    .moe = cpu_moe,
    .logits = cpu_logits,
};
