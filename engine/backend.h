/* backend.h — the table of operations a compute backend (CPU, CUDA) provides to the engine.
 *
 * The layer loop lives once, in engine/forward.c, and calls only these operations; a backend owns
 * its memory (weights in its preferred dtype, activation workspace, lightning states, KV pages) and
 * may fuse freely inside one operation. The granularity is the decoder sub-block (an attention
 * block, a norm with its residual, an MoE block) so that a GPU backend can fuse the SiLU, the
 * all-heads norm and the gate into its lightning kernel, and the CPU backend can stay a readable
 * sequence of reference kernels from kernels/cpu/.
 *
 * Rows and segments. An operation works on a batch of n rows (tokens) of activations,
 * row-major [n x width] in the backend's activation dtype. The rows are grouped into segments,
 * one per sequence: a prefill is one segment of n rows; a batched decode is k segments of one row
 * each. Row-wise operations (norms, projections, MoE) ignore segments; attention operations use
 * them to find each row's state and position.
 *
 * KV pages. Each softmax layer's K and V rows of one sequence live in fixed pages of
 * LH_KV_PAGE_TOKENS positions, allocated with ops->alloc. Inside a page, for kv head g and page
 * row r: K at ((0*n_kv + g) * LH_KV_PAGE_TOKENS + r) * head_dim, V at ((1*n_kv + g) * ... ) — i.e.
 * [2][n_kv_heads][LH_KV_PAGE_TOKENS][head_dim] in kv_dtype. Pages are reference-counted by the
 * engine (engine/state.c) so forks share them; before an attention call the engine guarantees that
 * every page covering [pos, pos+nrows) exists and is owned by this sequence alone, so the backend
 * may write the new rows there.
 *
 * Threading: the engine calls a backend from one thread at a time. Every operation is
 * deterministic: same inputs, same bits.
 */
#ifndef LH_ENGINE_BACKEND_H
#define LH_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LH_KV_PAGE_TOKENS 256

/* A host view of one weight tensor: mmap'd file bytes (or a slice of a fused tensor). Row-major,
 * shape[0] is the slowest dimension; a Linear weight is [out_features, in_features] as in torch. */
typedef struct lh_tensor {
  const void *data;
  lh_dtype dtype;
  int ndim;
  int64_t shape[3];
  const char *name; /* the safetensors name it came from (for messages and dumps) */
} lh_tensor;

typedef struct lh_layer_weights {
  lh_layer_kind kind;
  lh_tensor in_norm;          /* [hidden]  input_layernorm */
  lh_tensor post_norm;        /* [hidden]  post_attention_layernorm */
  /* lightning (kind == LH_LAYER_LIGHTNING) */
  lh_tensor qkv;              /* [3*H*d, hidden]; per head the rows are q, k, v (head-major) */
  lh_tensor out_gate;         /* [H*d, hidden]  output_gate */
  lh_tensor out_proj;         /* [hidden, H*d] */
  lh_tensor attn_norm;        /* [H*d]  the all-heads RMSNorm (eps 1e-6) */
  float slope[LH_MAX_HEADS];  /* per head decay rate s_h (only n_heads used) */
  /* softmax (kind == LH_LAYER_SOFTMAX) */
  lh_tensor q_proj;           /* [H*d, hidden] */
  lh_tensor k_proj;           /* [Hkv*d, hidden] */
  lh_tensor v_proj;           /* [Hkv*d, hidden] */
  lh_tensor o_proj;           /* [hidden, H*d] */
  float length_scale[LH_MAX_HEADS]; /* per query head s_h of the length-aware query scaling, fp32 (only
                                       n_heads used; all 0 unless cfg attn_length_scale_base > 0) */
  /* MoE */
  lh_tensor router;           /* [E, hidden] */
  lh_tensor *w1;              /* [E] of [I, hidden]  gate */
  lh_tensor *w3;              /* [E] of [I, hidden]  up */
  lh_tensor *w2;              /* [E] of [hidden, I]  down */
} lh_layer_weights;

typedef struct lh_weights {
  lh_tensor embed;            /* [vocab, hidden] */
  lh_tensor final_norm;       /* [hidden] */
  lh_tensor lm_head;          /* [vocab, hidden]; == embed when tied */
  lh_layer_weights *layers;   /* [n_layers] */
} lh_weights;

/* One sequence's state as the backend sees it. Memory is backend memory from ops->alloc. */
typedef struct lh_seq_mem {
  void **lightning;           /* [n_lightning] each [H x d x d] fp32 */
  void ***kv_pages;           /* [n_softmax] page tables, each [n_pages] page pointers */
  int64_t n_pages;            /* pages in each table (same for every softmax layer) */
} lh_seq_mem;

typedef struct lh_segment {
  lh_seq_mem *seq;
  int64_t row0, nrows;        /* rows [row0, row0+nrows) of the batch */
  int64_t pos;                /* position of row row0 in its sequence (tokens already in the state) */
} lh_segment;

typedef struct lh_batch {
  int64_t n;                  /* rows */
  int nseg;
  const lh_segment *seg;
} lh_batch;

typedef struct lh_backend lh_backend; /* a backend instance bound to one model */

typedef struct lh_backend_ops {
  const char *name;
  lh_dtype act_dtype;         /* activations between operations */
  lh_dtype kv_dtype;          /* KV pages */

  /* Bind to a model: take the host weights (which live until close) and prepare the backend's
   * copies; size the workspace for max_rows rows per call. */
  lh_status (*open)(const lh_config *cfg, const lh_weights *w, const lh_model_params *p, int64_t max_rows,
                    lh_backend **out, lh_error *err);
  void (*close)(lh_backend *be);

  /* Backend memory. alloc returns zeroed memory or NULL. */
  void *(*alloc)(lh_backend *be, size_t bytes);
  void (*free)(lh_backend *be, void *p);
  lh_status (*to_host)(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
  lh_status (*from_host)(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
  lh_status (*copy)(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);

  /* Activation buffers for one call: the backend hands out its workspace, [max_rows x width]. */
  void *(*act)(lh_backend *be, int slot); /* slot 0..LH_ACT_SLOTS-1, each max_rows x hidden */

  /* x[n x hidden] = embedding rows of tokens (host array). */
  lh_status (*embed)(lh_backend *be, const int32_t *tokens, int64_t n, void *x, lh_error *err);
  /* y = RMSNorm(x) * w over hidden (eps from the config). y may equal x. */
  lh_status (*rmsnorm)(lh_backend *be, const void *x, int64_t n, const lh_tensor *w, void *y, lh_error *err);
  /* x = alpha * h + beta * a (the DeepNorm-style residual); then, if norm_w is not NULL,
   * y = RMSNorm(x) * norm_w. */
  lh_status (*residual)(lh_backend *be, const void *h, const void *a, float alpha, float beta, int64_t n,
                        void *x, const lh_tensor *norm_w, void *y, lh_error *err);
  /* out = lightning attention block of layer `layer` on h (projections, SiLU, decayed linear
   * attention continuing each segment's state, all-heads norm, gate, out_proj); updates states. */
  lh_status (*attn_lightning)(lh_backend *be, int layer, int lightning_idx, const void *h, const lh_batch *b,
                              void *out, lh_error *err);
  /* out = softmax attention block of layer `layer` (q/k/v projections, RoPE on the first
   * rotary_dim dims, the length-aware query scaling when the config has it, append K/V rows at
   * each segment's positions, causal GQA attention over [0, pos+nrows), o_proj). */
  lh_status (*attn_softmax)(lh_backend *be, int layer, int softmax_idx, const void *h, const lh_batch *b,
                            void *out, lh_error *err);
  /* out = MoE block of layer `layer` on h (router softmax in fp32, top-k, renormalise, SwiGLU
   * experts, weighted sum in a fixed order). */
  lh_status (*moe)(lh_backend *be, int layer, const void *h, int64_t n, void *out, lh_error *err);
  /* Final norm and lm_head for the rows listed in rows[0..nrows) of x; fp32 logits to host
   * memory, [nrows x vocab]. */
  lh_status (*logits)(lh_backend *be, const void *x, const int64_t *rows, int64_t nrows, float *out,
                      lh_error *err);

  /* Checkpoint copies that do not stall compute (optional: NULL where a backend has none; callers
   * then use to_host). to_host_async starts copying `bytes` of backend memory src, as it is after
   * every operation issued so far, into host memory dst and returns at once; later operations may
   * change or free src. dst must stay valid and untouched until wait_host returns, which waits for
   * every copy started so far. */
  lh_status (*to_host_async)(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
  lh_status (*wait_host)(lh_backend *be, lh_error *err);
} lh_backend_ops;

#define LH_ACT_SLOTS 4

/* Tensor/expert parallel shares (issue 10): of n heads, kv heads or experts, rank r of R owns
 * [n r / R, n (r + 1) / R). The CPU backend computes by it; the engine gathers states by it. */
static inline void lh_tp_share(int64_t n, int R, int r, int64_t *lo, int64_t *hi) {
  *lo = n * r / R;
  *hi = n * (r + 1) / R;
}

/* Every backend instance starts with a pointer to its table. */
struct lh_backend {
  const lh_backend_ops *ops;
};

/* Backends compiled into this binary: "cpu" (also NULL), "cuda" (also "gpu"). lh_backend_find
 * returns NULL for unknown or unavailable names (the CUDA backend is absent in a CPU-only build);
 * lh_backend_check says which with LH_EUNSUPPORTED and a message that says what to do. */
const lh_backend_ops *lh_backend_find(const char *name);
lh_status lh_backend_check(const char *name, lh_error *err);

/* The RoPE table every backend applies (engine/config.c): inv_freq[rotary_dim / 2], plain or
 * YaRN's (c->rope_yarn_factor > 0: lh_rope_inv_freq_yarn), and the returned factor that cos and
 * sin are multiplied by (1 unless YaRN). */
float lh_rope_table(const lh_config *c, float *inv_freq);
extern const lh_backend_ops lh_backend_cpu;
#ifdef LH_HAVE_CUDA
extern const lh_backend_ops lh_backend_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif
