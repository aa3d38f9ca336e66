/* lightning.c — lightning attention for one head: block-tiled (Lightning Attention-2) and the
 * token-by-token recurrence it must equal.
 *
 * The function. With lambda = exp(-s) (s: the head's slope) and S the d x d state,
 *     S_t = lambda S_{t-1} + k_t^T v_t,        o_t = q_t S_t.
 *
 * Blocks. Take a block of b >= 1 tokens t0 .. t0+b-1 (local index i = t - t0) and the state
 * S0 = S_{t0-1} before it. Unrolling the recurrence,
 *     S_{t0+i} = lambda^(i+1) S0 + sum_{j<=i} lambda^(i-j) k_j^T v_j
 * so
 *     o_i = (q_i lambda^(i+1)) S0  +  sum_{j<=i} lambda^(i-j) (q_i . k_j) v_j
 *         = [(Q * qdecay) S0]_i    +  [((Q K^T) * D) V]_i        ("inter" + "intra")
 * with qdecay_i = lambda^(i+1) and D_ij = lambda^(i-j) for j <= i, 0 above the diagonal; and the
 * state after the block is
 *     S_{t0+b-1} = lambda^b S0 + sum_j lambda^(b-1-j) k_j^T v_j = lambda^b S0 + (K * kdecay)^T V
 * with kdecay_j = lambda^(b-1-j). Nothing here assumed b = B, t0 = 0 or S0 = 0: the identities
 * hold for any block length and any incoming state. Hence any way of cutting the token sequence
 * into chunks, and chunks into blocks (B tokens from the chunk's start, the last block shorter),
 * computes the same o_t and S_t; only fp32 rounding differs. HF's MiniMaxLightningAttention is
 * the case "one chunk from S0 = 0, blocks of block_size". All powers of lambda used are
 * lambda^m with 0 <= m <= B, read from one table: never a positive power, so nothing overflows
 * however small s is or however long the sequence.
 *
 * Cost per block: four small GEMMs (b x b x d twice, b x d x d twice) through OpenBLAS; the
 * masked b x b product wastes its upper half, which at b = 256, d <= 128 is cheaper than
 * splitting it into triangles.
 */
#include <cblas.h>
#include <math.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/ops.h"

size_t lh_lightning_scratch(int B, int d) { return (size_t)B * B + 2 * (size_t)B * d + (size_t)B + 1; }

LH_SIMD_CLONES void lh_lightning_head(int64_t n, int d, int B, float slope, const float *q, int64_t ldq, const float *k,
                       int64_t ldk, const float *v, int64_t ldv, float *S, float *o, int64_t ldo, float *scratch) {
  float *P = scratch, *Qd = P + (size_t)B * B, *Kd = Qd + (size_t)B * d, *dec = Kd + (size_t)B * d;
  for (int m = 0; m <= B; m++) dec[m] = (float)exp(-(double)slope * m);
  for (int64_t t0 = 0; t0 < n; t0 += B) {
    int b = (int)(n - t0 < B ? n - t0 : B);
    const float *qb = q + t0 * ldq, *kb = k + t0 * ldk, *vb = v + t0 * ldv;
    float *ob = o + t0 * ldo;
    /* intra: ((Q K^T) * D) V */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b, b, d, 1.0f, qb, (int)ldq, kb, (int)ldk, 0.0f, P, b);
    for (int i = 0; i < b; i++) {
      float *p = P + (size_t)i * b;
      for (int j = 0; j <= i; j++) p[j] *= dec[i - j];
      for (int j = i + 1; j < b; j++) p[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, d, b, 1.0f, P, b, vb, (int)ldv, 0.0f, ob, (int)ldo);
    /* inter: + (Q * qdecay) S0 */
    for (int i = 0; i < b; i++)
      for (int c = 0; c < d; c++) Qd[(size_t)i * d + c] = qb[i * ldq + c] * dec[i + 1];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b, d, d, 1.0f, Qd, d, S, d, 1.0f, ob, (int)ldo);
    /* state: S = lambda^b S0 + (K * kdecay)^T V */
    for (int j = 0; j < b; j++)
      for (int c = 0; c < d; c++) Kd[(size_t)j * d + c] = kb[j * ldk + c] * dec[b - 1 - j];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, b, 1.0f, Kd, d, vb, (int)ldv, dec[b], S, d);
  }
}

void lh_lightning_head_recurrent(int64_t n, int d, float slope, const float *q, int64_t ldq, const float *k,
                                 int64_t ldk, const float *v, int64_t ldv, float *S, float *o, int64_t ldo) {
  float lambda = (float)exp(-(double)slope);
  for (int64_t t = 0; t < n; t++) {
    const float *qt = q + t * ldq, *kt = k + t * ldk, *vt = v + t * ldv;
    for (int a = 0; a < d; a++)
      for (int c = 0; c < d; c++) S[a * d + c] = lambda * S[a * d + c] + kt[a] * vt[c];
    float *ot = o + t * ldo;
    for (int c = 0; c < d; c++) {
      float acc = 0;
      for (int a = 0; a < d; a++) acc += qt[a] * S[a * d + c];
      ot[c] = acc;
    }
  }
}
