/* ref.h — plain-C fp32/fp64 references for the GPU parity program, written from the model's math
 * (shared/DESIGN.md, HF transformers' modeling_minimax.py), independent of the CUDA code.
 *
 * These stand in for kernels/cpu until the CPU reference kernels land on main; the parity program
 * then also compares every op against lh_backend_cpu through the backend table. Heavy loops run on
 * all cores (ref_par_for); GEMMs go through OpenBLAS in fp32 on bf16-valued operands.
 */
#ifndef LH_TESTS_GPU_REF_H
#define LH_TESTS_GPU_REF_H

#include <stddef.h>
#include <stdint.h>

/* Run fn(i, ctx) for i in [0, n) on all cores. */
void ref_par_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx);

/* dst[i] = bf16 -> f32 of src[i] (threaded). */
void ref_bf16_to_f32(const uint16_t *src, float *dst, int64_t n);
/* Round every element to bf16 precision in place (round to nearest even). */
void ref_round_bf16(float *x, int64_t n);

/* y[n x out] = x[n x in] W^T, W bf16 [out x in] (converted to fp32 first). */
void ref_linear(const float *x, int64_t n, int in, const uint16_t *W, int out, float *y);

void ref_rmsnorm(const float *x, int64_t n, int width, const float *w, float eps, float *y);

/* Lightning core, token-recurrent in fp64: for each row t, per head h with decay slope[h]:
 * q, k, v = SiLU of qkv[t][h*3d + {0, d, 2d} ...]; S = e^{-s} S + k^T v; o[t][h*d..] = q S.
 * state: [H][d][d] fp32 in and out. */
void ref_lightning_core(const float *qkv, int64_t stride, int64_t n, int H, int d, const float *slope, float *state,
                        float *o);

/* RoPE (rotate-half within the first rd dims) of one position for `heads` heads of d dims, fp64. */
void ref_rope(float *x, int heads, int d, int rd, double theta, int64_t pos);

/* Causal GQA attention for rows [0, n) at positions [pos, pos+n): row i sees keys [0, pos+i].
 * q [n][H][d]; K, V [P][Hkv][d]; o [n][H][d]; fp64 accumulation. */
void ref_attention(const float *q, const float *K, const float *V, int64_t pos, int64_t n, int H, int Hkv, int d,
                   float *o);

/* MoE block: router logits = x Wr^T, softmax fp32, top-k (ties: lower id), renormalised; expert e:
 * SiLU(x W1_e^T) * (x W3_e^T) then W2_e^T; out = sum_k w_k y_k. W1/W3/W2: arrays of E bf16 matrices. */
/* margin (may be NULL): per row, the K-th chosen probability minus the largest unchosen one
 * (INFINITY when E == K): how far the routing is from a tie. */
void ref_moe(const float *x, int64_t n, int hidden, int E, int K, int inter, const uint16_t *router,
             const uint16_t *const *W1, const uint16_t *const *W3, const uint16_t *const *W2, float *out,
             int32_t *ids_out, float *margin);

#endif
