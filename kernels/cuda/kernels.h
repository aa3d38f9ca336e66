/* kernels.h — host launchers of the CUDA kernels (C-callable), one group per <op>.cu file.
 *
 * Every launcher enqueues work on the given stream and returns at once with the launch status
 * (cudaGetLastError after the launch); it never synchronises, allocates or frees. Pointers are
 * device pointers unless a comment says host. "bf16" buffers are __nv_bfloat16 arrays, declared as
 * void here so that C code (the backend, the tests) can call these without CUDA's C++ headers.
 * Row-major everywhere; a stride is in elements. Every kernel is deterministic: no float atomics,
 * fixed reduction orders, no dependence on timing.
 *
 * The backend (backend_cuda.cu) is the only production caller; tests/gpu/gpu_parity.c calls them
 * directly at MiniMax-Text-01's real shapes.
 */
#ifndef LH_KERNELS_CUDA_KERNELS_H
#define LH_KERNELS_CUDA_KERNELS_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kernels/cpu/decode_plan.h"
#include "util/rand.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- norm.cu ---------------------------------------------------------------------------- */

/* x[i] = table[tokens[i]] for i < n; table bf16 [vocab x width]. Token ids were checked by the caller. */
cudaError_t lh_cuda_embed(cudaStream_t st, const void *table, const int32_t *tokens, int64_t n, int width, void *x);
/* y[i] = x[i] / rms(x[i]) * w, fp32 arithmetic, bf16 in and out; y may equal x. */
cudaError_t lh_cuda_rmsnorm(cudaStream_t st, const void *x, int64_t n, int width, const float *w, float eps,
                            void *y);
/* x = alpha*h + beta*a (rounded to bf16); if w: y = rmsnorm(x before rounding) * w. Any of h, a, x, y
 * may alias one another (each row is read whole before it is written). */
cudaError_t lh_cuda_residual_norm(cudaStream_t st, const void *h, const void *a, float alpha, float beta, int64_t n,
                                  int width, void *x, const float *w, float eps, void *y);
/* y = sigmoid(gate) * rmsnorm(o) * w over width (the lightning all-heads norm); strided rows; y may equal o. */
cudaError_t lh_cuda_norm_gate(cudaStream_t st, const void *o, int64_t o_stride, const void *gate, int64_t gate_stride,
                              int64_t n, int width, const float *w, float eps, void *y, int64_t y_stride);
/* Final norm of selected rows: y[i] = rmsnorm(x[rows[i]]) * w, i < m. */
cudaError_t lh_cuda_rmsnorm_rows(cudaStream_t st, const void *x, const int64_t *rows, int64_t m, int width,
                                 const float *w, float eps, void *y);

/* ---- engine/backends/cuda/tp.cu: a layer split over ranks ---------------------------------- */

/* ss[r] = sum of squares of row r's width values (fp32). */
cudaError_t lh_cuda_row_sumsq(cudaStream_t st, const void *o, int64_t stride, int64_t n, int width, float *ss);
/* lh_cuda_norm_gate with the row's sum of squares given (summed over every rank's columns):
 * y = sigmoid(gate) * o * rsqrt(ss / total_width + eps) * w over this rank's width columns. */
cudaError_t lh_cuda_norm_gate_ss(cudaStream_t st, const void *o, int64_t o_stride, const void *gate,
                                 int64_t gate_stride, int64_t n, int width, int total_width, const float *ss,
                                 const float *w, float eps, void *y, int64_t y_stride);
/* y[i] = bf16(x[i]). */
cudaError_t lh_cuda_f32_to_bf16(cudaStream_t st, const float *x, int64_t count, void *y);
/* out[t] (fp32) = sum over k in order of wts[t][k] * y[pos[t*K+k]] for the slots whose expert
 * ids[t*K+k] is in [e0, e1): one rank's share of the MoE output. y is bf16, or fp32 (y_f32). */
cudaError_t lh_cuda_moe_combine_share(cudaStream_t st, const void *y, int y_f32, const int32_t *pos,
                                      const int32_t *ids, const float *wts, int64_t n, int K, int width, int e0,
                                      int e1, float *out);

/* ---- lightning.cu ----------------------------------------------------------------------- */

/* One sequence's rows in a lightning call: batch rows [row0, row0+nrows), its state
 * [H][d][d] fp32 (S[h][i][j]: i indexes k dims, j indexes v dims), updated in place. */
typedef struct lh_cuda_lseg {
  int64_t row0, nrows;
  float *state;
} lh_cuda_lseg;

/* Lightning attention core for every segment: qkv rows hold, per head, q, k, v (d each) before
 * SiLU, row stride qkv_stride; o receives [rows x H*d] bf16 (before the all-heads norm). Blocked
 * (intra-block masked product with decay, inter-block from the state, state update) on tensor cores
 * for d in {32, 64, 128}, token-recurrent otherwise. segs: device array of nseg. When the grid
 * would leave SMs idle, a segment of at least LH_CUDA_LIGHTNING_SPLIT_MIN rows is cut in two at
 * about split_q/1024 of its rows (0: LH_CUDA_LIGHTNING_SPLIT_Q, or for d = 128, whose advance costs
 * less against a full block, LH_CUDA_LIGHTNING_WG_SPLIT_Q on sm_90 and LH_CUDA_LIGHTNING_WS_SPLIT_Q
 * elsewhere), the second part first advancing the state to the cut. sync: nseg * H ints, zero
 * before the call and zero after it (NULL: never cut). Outputs and states are the same bits whether
 * a segment is cut or not, except with lightning_wg's hand-over (the default on sm_90:
 * lh_cuda_lightning_handover), where they match to the rounding of the fp32 state. rows: the rows
 * of qkv (every segment lies within them; the TMA loads of lightning_wg are bounded by it); o's
 * rows are numbered as qkv's. The cut rows below come from sweeps on an H200 (bench/NOTES.md,
 * "Kernel notes: lightning.cu"). */
#define LH_CUDA_LIGHTNING_SPLIT_Q 640
#define LH_CUDA_LIGHTNING_WS_SPLIT_Q 736
#define LH_CUDA_LIGHTNING_WG_SPLIT_Q 608 /* lightning_wg (sm_90) with its hand-over */
#define LH_CUDA_LIGHTNING_WG_SPLIT_M 320 /* lightning_wg's hand-over row (lh_cuda_lightning_handover) */
#define LH_CUDA_LIGHTNING_SPLIT_MIN 1024
cudaError_t lh_cuda_lightning(cudaStream_t st, const void *qkv, int64_t qkv_stride, int64_t rows,
                              const lh_cuda_lseg *segs, int nseg, int H, int d, const float *slope, void *o,
                              int64_t o_stride, int *sync, int split_q);
/* Which kernel runs d = 128 (for measurements): 1 lightning_wg (wgmma; sm_90 only, the default
 * there), 0 lightning_ws (mma.sync; the default elsewhere, or with LH_CUDA_LIGHTNING=ws), -1 back
 * to the default. */
void lh_cuda_lightning_kernel(int which);
/* lightning_wg's hand-over row for a cut segment, in 1/1024 of the cut row x (for measurements):
 * part 0 publishes its state at m = about split_m/1024 x, and part 1 advances over [m, x) only
 * instead of [0, x), which saves a second read of k and v over [0, m); outputs and states then
 * match the uncut ones to the rounding of fp32 sums, not bit for bit. 0: no hand-over (bit for
 * bit); -1: back to LH_CUDA_LIGHTNING_WG_SPLIT_M. */
void lh_cuda_lightning_handover(int split_m);
/* The token-recurrent form (S = e^-s S + k^T v; o = q S) for any d <= 256: the decode path (one
 * row per segment) and the reference-shaped fallback. */
cudaError_t lh_cuda_lightning_recurrent(cudaStream_t st, const void *qkv, int64_t qkv_stride, const lh_cuda_lseg *segs,
                                        int nseg, int H, int d, const float *slope, void *o, int64_t o_stride);

/* ---- attention.cu ----------------------------------------------------------------------- */

/* One sequence's rows in a softmax-attention call: batch rows [row0, row0+nrows) at positions
 * [pos, pos+nrows); pages: device array of its KV page pointers covering [0, pos+nrows). Page
 * layout [2][n_kv][LH_KV_PAGE_TOKENS][d] bf16 (engine/backend.h). */
typedef struct lh_cuda_aseg {
  int64_t row0, nrows, pos;
  void *const *pages;
} lh_cuda_aseg;

/* From the fused projection rows [q (H*d) | k (Hkv*d) | v (Hkv*d)] (stride qkv_stride): RoPE on
 * the first rotary_dim dims of q and k (rotate-half within them; inv_freq[rotary_dim/2] fp32; cos
 * and sin each rounded to fp32 and then multiplied by rope_af, YaRN's attention factor, 1 for plain
 * RoPE, as lh_rope),
 * q to q_out [rows x H*d], k and v into the pages at each row's position. With qscale (device [H]
 * fp32) and lscale_base > 0, each query head h is also multiplied, in fp32 before its rounding to
 * bf16, by the length-aware factor 1 + qscale[h] max(0, ln((pos+1)/lscale_base)) as
 * lh_length_scale_factor (kernels/cpu/ops.h) forms it; qscale NULL or lscale_base 0: no scaling. */
cudaError_t lh_cuda_rope_kv(cudaStream_t st, const void *qkv, int64_t qkv_stride, const lh_cuda_aseg *segs, int nseg,
                            int64_t n, int H, int Hkv, int d, int rotary_dim, const float *inv_freq, float rope_af,
                            const float *qscale, int lscale_base, void *q_out);
/* Causal GQA attention of each segment's rows over keys [0, pos+row+1) from its pages, online
 * softmax (flash-attention form; scores never leave the chip). tiles: device array of ntiles
 * (segment, first row within the segment) pairs, 64 rows each. o: [rows x H*d] bf16. */
cudaError_t lh_cuda_attn_prefill(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, const int32_t *tiles,
                                 int ntiles, int H, int Hkv, int d, void *o);
/* Decode form for segments of one row each over long KV: the keys are split in pieces of
 * LH_CUDA_DECODE_SPLIT, each piece reduced on its own (partial: [nseg][H][max_splits][d+2] fp32),
 * then the pieces are merged in order. max_splits >= ceil((pos+1) / LH_CUDA_DECODE_SPLIT) for
 * every segment. */
#define LH_CUDA_DECODE_SPLIT LH_DECODE_SPLIT
cudaError_t lh_cuda_attn_decode(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, int nseg, int max_splits,
                                int H, int Hkv, int d, float *partial, void *o);

/* The same decode for d = 32, 64, 128 on tensor cores, with the (segment, split) pairs grouped into
 * units (lh_decode_units, kernels/cpu/decode_plan.h): a unit is one split whose pages and key count
 * are the same for every member, so that forks of one prefix read its K/V once between them (units:
 * [nunits][3] int32: split, first index into members, member count, in split order; host_units: the
 * same table on the host; members: segment indices; max_count: the largest count, count * (H / Hkv)
 * <= LH_CUDA_DECODE_ROWS). The splits go in passes of pass_splits: partial holds one pass
 * ([nseg][H][pass_splits][d+2] fp32), run ([nseg][H][d+2] fp32; unused when no sequence has more
 * splits than a pass) carries each row's merged state from pass to pass, so neither grows with the
 * context. Each query row's arithmetic depends only on its own q and keys (and pass_splits, where it
 * has more splits than that), so its bits are the same in any grouping (gpu_parity checks it). */
#define LH_CUDA_DECODE_ROWS 128
#define LH_CUDA_DECODE_PASS 1024 /* splits a pass in the backend: 1M keys */
cudaError_t lh_cuda_attn_decode_units(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, int nseg,
                                      const int32_t *units, const int32_t *host_units, int nunits,
                                      const int32_t *members, int max_count, int pass_splits, int H, int Hkv, int d,
                                      float *partial, float *run, void *o);
/* The backend (op_attn_softmax) runs calls of at most LH_CUDA_ROWWISE_ROWS rows row by row through it,
 * and every batch of single rows, LH_CUDA_DECODE_ROWS / (H / Hkv) rows a launch. */
#define LH_CUDA_ROWWISE_ROWS 64

/* Copy a sequence's first npages KV pages into contiguous head-major K and V: row r of kv head g
 * at (g * stride_keys + r) * d in k and in v (stride_keys >= npages * page rows). pages: device array. */
cudaError_t lh_cuda_kv_gather(cudaStream_t st, void *const *pages, int64_t npages, int Hkv, int d, int64_t stride_keys,
                              void *k, void *v);
/* One step of merging attention over stretches of keys (cuDNN calls on key segments that together
 * cover a row's keys): part [n][H][d] bf16 and lse_part [H][n] (each row's log-sum-exp of its
 * scaled scores over that stretch) into the running acc [n][H][d] fp32 and lse_acc [H][n]. first:
 * acc starts from part. last: the merged rows go to out [n][H][d] bf16 instead of acc (out may be
 * part). d divides 256. */
cudaError_t lh_cuda_attn_merge(cudaStream_t st, const void *part, const float *lse_part, float *acc, float *lse_acc,
                               void *out, int64_t n, int H, int d, int first, int last);

/* ---- moe.cu ----------------------------------------------------------------------------- */

/* Per row: p = softmax(logits[E]) in fp32, the top K (ties: lower expert id first), weights
 * renormalised to sum 1. ids/wts [n x K]. */
cudaError_t lh_cuda_moe_route(cudaStream_t st, const float *logits, int64_t n, int E, int K, int32_t *ids, float *wts);
/* Stable counting sort of the n*K (row, slot) pairs by expert: offsets[E+1] (exclusive prefix of the
 * counts), pos[n*K] (the pair's place in expert order), src_row[n*K] (row of the pair at each
 * place). hist: scratch of LH_CUDA_MOE_PLAN_CHUNKS(n*K) * E ints. */
#define LH_CUDA_MOE_CHUNK 1024
#define LH_CUDA_MOE_PLAN_CHUNKS(m) (((m) + LH_CUDA_MOE_CHUNK - 1) / LH_CUDA_MOE_CHUNK)
cudaError_t lh_cuda_moe_plan(cudaStream_t st, const int32_t *ids, int64_t n, int K, int E, int32_t *hist,
                             int32_t *offsets, int32_t *pos, int32_t *src_row);
/* out[i] = x[rows[i] / div] for i < m (rows of width bf16). */
cudaError_t lh_cuda_gather_rows(cudaStream_t st, const void *x, const int32_t *rows, int div, int64_t m, int width,
                                void *out);
/* act[r][i] = silu(gu[r][i]) * gu[r][I + i]; gu [m x 2I], act [m x I], bf16. */
cudaError_t lh_cuda_swiglu(cudaStream_t st, const void *gu, int64_t m, int I, void *act);
/* out[t] = sum over k in order of wts[t][k] * y[pos[t*K+k]] (fp32 accumulation), bf16 out. */
cudaError_t lh_cuda_moe_combine(cudaStream_t st, const void *y, const int32_t *pos, const float *wts, int64_t n, int K,
                                int width, void *out);

/* ---- gemm.cu ---------------------------------------------------------------------------- */

/* y[n x out] = x[n x in] * W^T with W [out x in] (a torch Linear weight), bf16 operands, fp32
 * accumulation (CUBLAS_COMPUTE_32F), y bf16 or fp32 (y_f32). Row strides ldx, ldy. */
cublasStatus_t lh_cuda_gemm(cublasHandle_t h, const void *x, int64_t ldx, int64_t n, int in, const void *w, int out,
                            void *y, int64_t ldy, int y_f32);
/* The same for count independent problems at once (one per expert): problem i multiplies rows[i]
 * rows of x_i by W_i^T. xs, ws, ys: device arrays of count pointers; rows: host array. */
cublasStatus_t lh_cuda_gemm_grouped(cublasHandle_t h, int count, const int *rows, int in, int out, const void *const *xs,
                                    const void *const *ws, void *const *ys);

/* ---- sample.cu -------------------------------------------------------------------------- */

/* out[r] = argmax of logits row r (lowest id wins ties; NaN never wins). */
cudaError_t lh_cuda_argmax(cudaStream_t st, const float *logits, int rows, int vocab, int32_t *out);
/* Seeded sampling of one token per row, lh_sample's rule (engine/sample.c; see sample.cu for the
 * one difference): temperature > 0, top_k (<= 256; 0 = the 256 most likely), top_p (1 = off),
 * u[r] in [0,1) the uniform draw for row r. */
cudaError_t lh_cuda_sample(cudaStream_t st, const float *logits, int rows, int vocab, float temperature, int top_k,
                           float top_p, const double *u, int32_t *out);

/* ---- random.cu -------------------------------------------------------------------------- */

/* Counter-based random fill (no state; same seed, same values on any GPU and on the host through
 * lh_cuda_hash_uniform): x[i] = bf16(scale * u(seed, i)), u uniform in [-1, 1). */
cudaError_t lh_cuda_fill_uniform_bf16(cudaStream_t st, void *x, int64_t n, uint64_t seed, float scale);
cudaError_t lh_cuda_fill_uniform_f32(cudaStream_t st, float *x, int64_t n, uint64_t seed, float scale, float offset);
/* Part of a larger fill, element for element the same values: a rows x cols block at element base of
 * a fill whose rows are ld long (a rank's block of a weight matrix); n values from element base. */
cudaError_t lh_cuda_fill_uniform_bf16_block(cudaStream_t st, void *x, int64_t rows, int64_t cols, int64_t ld,
                                            int64_t base, uint64_t seed, float scale);
cudaError_t lh_cuda_fill_uniform_f32_at(cudaStream_t st, float *x, int64_t n, int64_t base, uint64_t seed, float scale,
                                        float offset);
cudaError_t lh_cuda_fill_bf16(cudaStream_t st, void *x, int64_t n, uint16_t bits);

/* The generator behind the fills, for host references: uniform in [-1, 1). */
#ifdef __CUDACC__
#define LH_CUDA_HD __host__ __device__
#else
#define LH_CUDA_HD
#endif
LH_CUDA_HD static inline float lh_cuda_hash_uniform(uint64_t seed, uint64_t i) {
  uint64_t z = lh_mix64(seed * 0x9E3779B97F4A7C15ull + i * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull);
  return (float)(int64_t)(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

#ifdef __cplusplus
}
#endif
#endif
