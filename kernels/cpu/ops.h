/* ops.h — the plain-C reference kernels of longhaul's model, on fp32 arrays.
 *
 * These are the numbers every other backend is checked against: the CPU backend
 * (engine/backends/cpu/backend_cpu.c) is a readable sequence of calls to them, and the CUDA backend's
 * parity program (tests/gpu/gpu_parity.c) compares every CUDA operation with the CPU backend's and
 * every kernel it drives directly with the functions here, each within a stated bound. They know
 * nothing about models, states or files: arrays in, arrays out, shapes in the comments, row-major
 * everywhere, strides ("ld*") in elements. A "Linear weight" is [out_features x in_features] as in
 * torch, so y = x W^T.
 *
 * Threads. Kernels that take an lh_pool split their work into tasks whose boundaries depend only
 * on the problem's shape, never on the number of threads, and every output element is written by
 * exactly one task with a fixed summation order. So results are bitwise identical for any pool
 * size (including none). OpenBLAS is used single-threaded inside the tasks: lh_pool_new sets
 * OpenBLAS to one thread for the whole process, because OpenBLAS's own threading changes the bits
 * of a product with the thread count (measured here with 0.3.21). A pool may be NULL: the same
 * tasks then run on the calling thread. Tasks must not start a pool run themselves.
 *
 * Determinism also means: no floating-point reduction whose order depends on timing or on pointer
 * alignment. Reductions here are scalar loops (the compiler does not reorder them without
 * -ffast-math, which this project never uses) or OpenBLAS calls of a fixed shape.
 */
#ifndef LH_KERNELS_CPU_OPS_H
#define LH_KERNELS_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- thread pool -------------------------------------------------------------------------- */

typedef struct lh_pool lh_pool;

/* A pool of nthreads threads (the caller counts as one; nthreads <= 1 starts none). NULL when
 * out of memory or threads cannot be started. */
lh_pool *lh_pool_new(int nthreads);
void lh_pool_free(lh_pool *p); /* accepts NULL */
int lh_pool_threads(const lh_pool *p); /* 1 for NULL */

/* fn(ctx, task, worker) for task in [0, ntasks); worker in [0, threads) identifies the thread so
 * that a task can use per-thread scratch memory (its contents on entry are undefined). Returns
 * when every task is done. Not reentrant: one run at a time per pool, and never from a task. */
typedef void (*lh_task_fn)(void *ctx, int64_t task, int worker);
void lh_pool_run(lh_pool *p, int64_t ntasks, lh_task_fn fn, void *ctx);

/* ---- dense algebra ------------------------------------------------------------------------ */

/* C[M x N] = A[M x K] . B[N x K]^T (+ C when accumulate): a Linear layer y = x W^T.
 * Tiled in fixed tiles of the output (see gemm.c), the tiles run on the pool. */
void lh_gemm_nt(lh_pool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                int64_t ldb, float *C, int64_t ldc, int accumulate);

/* y[n x dim] = x / sqrt(mean(x^2) + eps) * w, per row (HF MiniMaxRMSNorm: the mean is taken in
 * double here, then the row is scaled in fp32). y may equal x. Row strides ldx, ldy. */
void lh_rmsnorm(lh_pool *pool, const float *x, int64_t ldx, int64_t n, int64_t dim, const float *w, double eps,
                float *y, int64_t ldy);

/* In place over x[n x dim] (row stride ld): x = x * sigmoid(x) (SiLU) / x = sigmoid(x). */
void lh_silu(lh_pool *pool, float *x, int64_t ld, int64_t n, int64_t dim);
void lh_sigmoid(lh_pool *pool, float *x, int64_t ld, int64_t n, int64_t dim);
/* y[n x dim] = silu(g) * u (SwiGLU), all three with row stride dim. y may equal g or u. */
void lh_swiglu(lh_pool *pool, const float *g, const float *u, int64_t n, int64_t dim, float *y);
/* x[n x dim] *= g[n x dim] elementwise (row strides ldx, ldg). */
void lh_mul(lh_pool *pool, float *x, int64_t ldx, const float *g, int64_t ldg, int64_t n, int64_t dim);
/* x[n x dim] = alpha * h + beta * a (row strides all dim); x may equal h or a. */
void lh_axpby(lh_pool *pool, const float *h, const float *a, float alpha, float beta, int64_t n, int64_t dim,
              float *x);

/* y = exp(x) within 2 ulp of expf, vectorisable (the kernels' exp; see fastmath.h): 0 below
 * -87.3 (and for -inf), +inf above 88.7. y may equal x. */
void lh_exp_fast(const float *x, float *y, int64_t n);

/* ---- positions ---------------------------------------------------------------------------- */

/* inv_freq[i] = 1 / theta^(2i / rotary_dim), i < rotary_dim/2, in fp32 as HF computes it. */
void lh_rope_inv_freq(double theta, int rotary_dim, float *inv_freq);

/* YaRN's inv_freq over rotary_dim dims, as transformers 5.17's _compute_yarn_parameters forms it
 * (dim = rotary_dim, base = theta, original_max_position_embeddings = orig): with p_i the plain
 * theta^(2i/R), a ramp r_i = clamp((i - lo) / (hi - lo), 0, 1) between the dims lo and hi where the
 * frequencies turn beta_fast and beta_slow times over orig positions (floor / ceil when truncate,
 * then clipped to [0, R - 1]), and e_i = 1 - r_i:
 *   inv_freq[i] = 1 / (factor p_i) * (1 - e_i) + 1 / p_i * e_i
 * so the fast dims keep their frequency and the slow ones are divided by factor. fp32 as there. */
void lh_rope_inv_freq_yarn(double theta, int rotary_dim, double factor, int orig, double beta_fast, double beta_slow,
                           int truncate, float *inv_freq);

/* Rotate-half RoPE in place on the first rotary_dim dims of every head of x[n x n_heads x
 * head_dim] (row stride ld): for i < R/2, with a = fl32(pos * inv_freq[i]), c = fl32(cos a) m and
 * s = fl32(sin a) m for m = attention_factor (1: plain RoPE; YaRN's factor otherwise),
 *   x'[i]       = x[i] c - x[i + R/2] s
 *   x'[i + R/2] = x[i + R/2] c + x[i] s
 * Row r sits at position pos[r]. Dims at or past rotary_dim are left alone. */
void lh_rope(lh_pool *pool, float *x, int64_t ld, int64_t n, int n_heads, int head_dim, int rotary_dim,
             const float *inv_freq, const int64_t *pos, float attention_factor);

/* Length-aware query scaling (config key attn_length_scale_base = base > 0; docs/design.md): the
 * factor for a query at 0-based position pos in a head whose learned scale is s,
 *   g = fl32(ln((pos + 1) / base)) (the log in double), 0 where that is negative,
 *   f = fl32(1 + fl32(s * g)),
 * so f is exactly 1 for pos < base or s == 0. */
float lh_length_scale_factor(int64_t pos, int base, float s);
/* x[n x n_heads x head_dim] (row stride ld) *= that factor, every dim of head h with scale[h], row
 * r at position pos[r]. Applied to queries after RoPE: their logits q.k/sqrt(d) scale by f. */
void lh_length_scale(lh_pool *pool, float *x, int64_t ld, int64_t n, int n_heads, int head_dim, const float *scale,
                     int base, const int64_t *pos);

/* ---- lightning attention ------------------------------------------------------------------ */

/* Scratch floats lh_lightning_head needs for block size B and head dim d. */
size_t lh_lightning_scratch(int B, int d);

/* One head of lightning attention over a chunk of n tokens continuing a state (block-tiled
 * Lightning Attention-2; the derivation is at the top of lightning.c):
 *   S_t = exp(-slope) S_{t-1} + k_t^T v_t,   o_t = q_t S_t
 * q, k, v: [n x d] with row strides ldq, ldk, ldv; o: [n x d] (row stride ldo), overwritten;
 * S: [d x d] fp32, the state before the chunk on entry and after it on return. The chunk is cut
 * into blocks of B tokens from its first token, the last one possibly shorter. scratch holds
 * lh_lightning_scratch(B, d) floats. Single-threaded (run heads in parallel). */
void lh_lightning_head(int64_t n, int d, int B, float slope, const float *q, int64_t ldq, const float *k,
                       int64_t ldk, const float *v, int64_t ldv, float *S, float *o, int64_t ldo, float *scratch);

/* The same function computed token by token (the recurrence itself); for tests only. */
void lh_lightning_head_recurrent(int64_t n, int d, float slope, const float *q, int64_t ldq, const float *k,
                                 int64_t ldk, const float *v, int64_t ldv, float *S, float *o, int64_t ldo);

/* ---- softmax attention over KV pages ------------------------------------------------------ */

/* KV pages: each page holds page_tokens positions as [2][n_kv][page_tokens][d] fp32 (K then V);
 * position t lives in page t / page_tokens, row t % page_tokens. */
typedef struct lh_kv_pages {
  void *const *pages; /* each page: float[2][n_kv][page_tokens][d] */
  int n_kv;
  int d;
  int page_tokens;
} lh_kv_pages;

/* Write K and V rows for positions [pos, pos+n) of every kv head from k, v ([n x n_kv x d], row
 * strides ldk, ldv) into the pages, which must exist. */
void lh_kv_write(const lh_kv_pages *kv, int64_t pos, int64_t n, const float *k, int64_t ldk, const float *v,
                 int64_t ldv);
/* The same for kv heads [g0, g1) only (k and v still point at whole rows). */
void lh_kv_write_heads(const lh_kv_pages *kv, int g0, int g1, int64_t pos, int64_t n, const float *k, int64_t ldk,
                       const float *v, int64_t ldv);

/* A tile is up to LH_ATTN_ROWS rows: nq consecutive queries of each of the nh query heads that
 * share one kv head (GQA), stacked so that each K/V page is read once per group and the products
 * are large. lh_attn_scratch(d, page_tokens) floats of scratch serve any tile. */
#define LH_ATTN_ROWS 256
size_t lh_attn_scratch(int d, int page_tokens);

/* Causal softmax attention for queries at positions [qpos, qpos+nq) of the nh query heads of kv
 * head g (nh * nq <= LH_ATTN_ROWS) over the keys at positions [0, qpos+nq) in the pages:
 *   o_i = sum_j softmax_j(scale * q_i . k_j) v_j,  j <= qpos + i
 * Query i of head hh (0 <= hh < nh) is at q + i*ldq + hh*qhs; its output goes to
 * o + i*ldo + hh*ohs (d floats each). Online softmax page by page: memory O(LH_ATTN_ROWS x
 * page_tokens), never O(nq x context). Single-threaded. */
void lh_attn_tile(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                  int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch);

/* lh_attn_tile has two paths (see attention.c): a fused AVX2/FMA kernel, taken when this returns
 * 1 (x86-64 CPUs with AVX2 and FMA), whose result for a query does not depend on the tile it is
 * in (bit for bit), and the one below, taken otherwise. They agree within fp32 rounding. */
int lh_attn_fused(void);
/* The same function through two OpenBLAS products per page and a separate exp pass: the path on
 * other CPUs, and the fused one's peer in the test and the benchmark. Same scratch. */
void lh_attn_tile_blas(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                       int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch);

/* The bf16 mode (attention_bf16.c): the same function with Q K^T and P V in bf16, Q, K, V and P
 * rounded to bf16 for the products (fp32 accumulation, softmax in fp32), as the GPU does them:
 * about 3 significant digits, against ~7 above. A query's bits do not depend on the tile it is in.
 * Two units can do its products; lh_attn_bf16_kind(d) says which one lh_attn_tile_bf16 uses for
 * head dim d on this CPU (LH_ATTN_BF16_NONE: there it is lh_attn_tile, fp32):
 *   LH_ATTN_BF16_AMX     Intel AMX tiles (attention_amx.c), where lh_attn_amx() is 1: a CPU with
 *                        AMX-BF16 and AVX512-BF16 and a kernel that grants the tile state;
 *   LH_ATTN_BF16_AVX512  else AVX512-BF16's VDPBF16PS (attention_avx512bf16.c), where
 *                        lh_attn_avx512bf16() is 1: AVX512 F/BW/VL/DQ and AVX512_BF16;
 * and only for d a multiple of 32 up to 256. The two units sum their products in different orders,
 * so their bits differ (each is deterministic). Each takes lh_attn_tile's arguments and scratch. */
enum { LH_ATTN_BF16_NONE = 0, LH_ATTN_BF16_AMX = 1, LH_ATTN_BF16_AVX512 = 2 };
int lh_attn_bf16_kind(int d);
const char *lh_attn_bf16_unit(int kind); /* "AMX tiles", "AVX512-BF16", "none (fp32)" */
void lh_attn_tile_bf16(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                       int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch);
/* Each unit by itself (tests and benchmarks run both where both run); lh_attn_tile where it cannot
 * run (head_dim not a multiple of 32 up to 256, or the CPU lacks it). */
int lh_attn_amx(void);
int lh_attn_avx512bf16(void);
void lh_attn_tile_amx(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                      int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch);
void lh_attn_tile_avx512bf16(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                             int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch);
size_t lh_attn_bf16_scratch(int d); /* included in lh_attn_scratch */

/* ---- mixture of experts ------------------------------------------------------------------- */

/* Router: for each row of logits[n x E], p = softmax(logits) (fp32 result), choose the top_k
 * largest p (ties: the lower expert index first), and renormalise them to sum 1.
 * idx[n x top_k] gets the experts in ascending index order, w[n x top_k] their weights. */
void lh_moe_route(const float *logits, int64_t n, int E, int top_k, int32_t *idx, float *w);

/* The plan that groups a batch's (token, choice) pairs by expert, so that each expert runs one
 * GEMM over its tokens. Built from idx by lh_moe_plan (deterministic: tokens ascending within an
 * expert, experts ascending). */
typedef struct lh_moe_plan {
  int64_t *offset; /* [E + 1]: expert e owns rows [offset[e], offset[e+1]) of the grouped buffers */
  int64_t *token;  /* [n * top_k]: the token of each grouped row */
  int64_t *row;    /* [n * top_k]: grouped row of (token t, choice c) at t * top_k + c */
} lh_moe_plan;
void lh_moe_plan_build(const int32_t *idx, int64_t n, int E, int top_k, lh_moe_plan *plan);

/* out[t] = sum over the token's choices c, in ascending expert order, of w[t,c] * y[row(t,c)]
 * (the order HF's index_add_ loop uses); y: [n * top_k x dim] grouped rows. */
void lh_moe_combine(lh_pool *pool, const lh_moe_plan *plan, const float *y, const float *w, int64_t n, int top_k,
                    int64_t dim, float *out);

/* dst[r] = src[token[r]] for r in [r0, r1) (gather the rows an expert processes). */
void lh_gather_rows(lh_pool *pool, const float *src, int64_t ld, const int64_t *token, int64_t r0, int64_t r1,
                    int64_t dim, float *dst);

/* ---- outputs ------------------------------------------------------------------------------ */

/* Index of the largest x[i], the lowest index on ties; NaNs are never chosen unless all are NaN
 * (then 0). */
int64_t lh_argmax(const float *x, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
