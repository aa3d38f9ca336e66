/* attention.c — causal softmax attention of a tile of queries over paged K/V, online softmax.
 *
 * A tile (nq queries of each query head of one GQA group, stacked as rows, so each K/V page is
 * read once for the group) walks the pages holding positions [0, last query], keeping per row a
 * running max m, a running sum l and an accumulator O rescaled by exp(m_old - m_new) whenever m
 * grows; at the end O / l. Memory is a few blocks of scratch whatever the context length: there
 * is never an n x N matrix. The first page always holds key 0, which every query sees, so m is
 * finite after the first block and a row whose keys in a later block are all masked contributes
 * exactly zero (its scores are -inf or set to 0, its correction factor is exactly 1).
 *
 * Two paths compute that function; lh_attn_tile picks one per CPU (lh_attn_fused):
 *
 * Fused (x86-64 with AVX2 and FMA; built for that target with function attributes, so the binary
 * still runs elsewhere). The tile's rows go in row blocks of 24 lanes (3 vectors; lane f is query
 * f / nh of head f % nh, so a block spans few positions and the causal diagonal wastes little),
 * the keys in softmax blocks of up to 256 cut from each page's start (an engine page is one
 * block); key blocks outside, row blocks inside, so a key block's K and V are fetched once per
 * tile (the next block's are prefetched into L2 meanwhile). Per (row block, key block):
 *   1. S^T = K Q^T in micro tiles of 4 keys x 24 lanes (12 accumulators; K broadcast; Q
 *      transposed and scaled by scale * log2(e) once per tile, so the scores are in base 2),
 *      the causal mask (-inf) and the block max, stored as S^T[keys][24] (24 KB, L1/L2);
 *   2. m_new = max(m, block max), corr = 2^(m - m_new), P = 2^(S - m_new) in place, l = l corr
 *      + sum P (exp2 by the fastmath.h polynomial, with FMA; the sum in two chains, even and odd
 *      keys);
 *   3. O^T = O^T corr + (V^T P^T over the block, from 0) in micro tiles of 4 columns x 24 lanes.
 * A block of one vector (decode, small tiles) uses 8 x 8 micro tiles instead, for 8 independent
 * FMA chains. Every score is one FMA chain over e in order, every block sum one chain over the
 * block's keys in order, masked keys add exact zeros, the blocks are fixed by position, and lanes
 * never mix. So a row's result depends on its query, its position and the K/V only: not on the
 * tile it is in, the other rows, the thread count or how the queries were cut into tiles or chunks
 * (tests/engine/test_engine_kernels.c checks this bit for bit). The BLAS path does not have that
 * property: its products change bits with their shapes.
 *
 * BLAS (every other CPU, and the peer in bench/engine/bench_attn_cpu.c). Per page, all the tile's
 * rows at once: S = scale Q K^T (one cblas_sgemm), a max/exp/sum pass (lh_fast_expf), O += P V
 * (one cblas_sgemm), in a rows x page_tokens score block.
 *
 * The two paths agree within fp32 rounding (the test bounds both against a double reference);
 * they do not give the same bits, and the fused path uses FMA, so bits are per path, not per
 * machine.
 *
 * Floor and expectation, written before the fused path (haul-tiny: d = 32, 8 query heads over 4
 * kv heads, 2-core AMD EPYC Zen 3, AVX2 + FMA). Per (query, key) pair: 4 d = 128 FLOPs (Q.K and
 * P V, 2 d each), one exp, a max, a sum. Measured FMA peak of the two cores: ~170 GFLOP/s (89 per
 * core: 2 FMA pipes x 8 lanes x 2 x ~2.8 GHz). Per 8 pairs the products are 64 FMA instructions
 * and the exp ~7 more on the same two pipes (polynomial and scaling; its adds and shifts go to the
 * other two), so the arithmetic floor is ~90% of peak; ~150 GFLOP/s. The BLAS path measured ~58
 * GFLOP/s on the 205K demo: sgemm with inner dimension 32 and a rows x 256 score matrix through
 * L2 twice per page. Expected for the fused path: 70-80% of peak, ~120 GFLOP/s, about 2x.
 * Outcome (bench/engine/NOTES.md): 110-125 GFLOP/s at d = 32 for 8K-64K keys, 64-74% of the
 * measured peak, 1.7-1.9x the BLAS path; 1.4-1.8x at d = 64 and 1.2-1.3x at d = 128, where the
 * exp's share is smaller and sgemm's inner dimension larger. Decode tiles (one query per head)
 * are memory-bound for both paths, 0.8-1.25x. The micro kernels run at ~80-85% of peak; the exp
 * pass is ~15% of the time, since its polynomial needs the same FMA pipes as the products.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/attention_bf16.h"
#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(LH_NO_FUSED_ATTN)
#define LH_ATTN_FUSED 1
#else
#define LH_ATTN_FUSED 0
#endif

/* The fused path's blocking (fixed: a row's bits must not depend on anything but its position). */
enum {
  RB = 24,  /* lanes of a row block: 3 vectors of 8 */
  KB = 256, /* keys of a softmax block, cut from each page's start (all of an engine page) */
  TMAX = 8, /* keys per Q K^T micro tile and columns per P V micro tile: 4 (with 3 or 2 lane
             * vectors) or 8 (with one), so that 8-12 independent FMA chains (2 pipes x 4 cycles of
             * latency) fit in the 16 ymm registers with the operands */
  MAX_BLOCKS = (LH_ATTN_ROWS + RB - 1) / RB,
};

void lh_kv_write(const lh_kv_pages *kv, int64_t pos, int64_t n, const float *k, int64_t ldk, const float *v,
                 int64_t ldv) {
  lh_kv_write_heads(kv, 0, kv->n_kv, pos, n, k, ldk, v, ldv);
}

void lh_kv_write_heads(const lh_kv_pages *kv, int g0, int g1, int64_t pos, int64_t n, const float *k, int64_t ldk,
                       const float *v, int64_t ldv) {
  int64_t PT = kv->page_tokens;
  size_t row = (size_t)kv->d * sizeof(float);
  for (int64_t r = 0; r < n; r++) {
    int64_t p = pos + r;
    float *page = (float *)kv->pages[p / PT];
    int64_t pr = p % PT;
    for (int g = g0; g < g1; g++) {
      memcpy(page + ((int64_t)g * PT + pr) * kv->d, k + r * ldk + (int64_t)g * kv->d, row);
      memcpy(page + ((int64_t)(kv->n_kv + g) * PT + pr) * kv->d, v + r * ldv + (int64_t)g * kv->d, row);
    }
  }
}

/* Max and sum of s[0..n) in 8 interleaved lanes combined in a fixed order: vectorisable, and
 * the same bits for the same n wherever s sits in memory (a max does not depend on order). */
static inline float row_max(const float *s, int64_t n) {
  float lane[8];
  for (int u = 0; u < 8; u++) lane[u] = -INFINITY;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int u = 0; u < 8; u++) lane[u] = s[j + u] > lane[u] ? s[j + u] : lane[u];
  for (; j < n; j++) lane[0] = s[j] > lane[0] ? s[j] : lane[0];
  float mx = lane[0];
  for (int u = 1; u < 8; u++) mx = lane[u] > mx ? lane[u] : mx;
  return mx;
}

static inline float row_sum(const float *s, int64_t n) {
  float lane[8] = {0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int u = 0; u < 8; u++) lane[u] += s[j + u];
  for (; j < n; j++) lane[j % 8] += s[j];
  return ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

/* The largest of the paths' needs: the BLAS path's score block, accumulator and packed Q; the
 * fused path's Q^T and O^T of every row block, one S^T block and 32-byte alignment; the bf16
 * mode's (attention_bf16.c). */
size_t lh_attn_scratch(int d, int page_tokens) {
  size_t blas = (size_t)LH_ATTN_ROWS * page_tokens + 2 * (size_t)LH_ATTN_ROWS * d + 2 * LH_ATTN_ROWS;
  size_t fused = 2 * (size_t)MAX_BLOCKS * RB * d + (size_t)KB * RB + 8, bf16 = lh_attn_bf16_scratch(d);
  size_t most = blas > fused ? blas : fused;
  return most > bf16 ? most : bf16;
}

LH_SIMD_CLONES void lh_attn_tile_blas(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                                      int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs,
                                      float *scratch) {
  const int PT = kv->page_tokens, d = kv->d, rows = nh * nq;
  float *Sc = scratch, *acc = Sc + (size_t)LH_ATTN_ROWS * PT, *Qs = acc + (size_t)LH_ATTN_ROWS * d,
        *m = Qs + (size_t)LH_ATTN_ROWS * d, *l = m + LH_ATTN_ROWS;
  int64_t last = qpos + nq - 1;
  for (int hh = 0; hh < nh; hh++) /* row r = hh * nq + i */
    for (int i = 0; i < nq; i++) memcpy(Qs + ((size_t)hh * nq + i) * d, q + i * ldq + hh * qhs, (size_t)d * sizeof(float));
  for (int r = 0; r < rows; r++) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  memset(acc, 0, (size_t)rows * d * sizeof(float));
  for (int64_t pg = 0; pg <= last / PT; pg++) {
    int64_t k0 = pg * PT;
    int kn = (int)(last + 1 - k0 < PT ? last + 1 - k0 : PT);
    const float *K = (const float *)kv->pages[pg] + (int64_t)g * PT * d;
    const float *V = (const float *)kv->pages[pg] + (int64_t)(kv->n_kv + g) * PT * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn, d, scale, Qs, d, K, d, 0.0f, Sc, kn);
    for (int r = 0; r < rows; r++) {
      float *s = Sc + (size_t)r * kn;
      int64_t valid = qpos + r % nq - k0 + 1; /* keys k0 .. the row's own position */
      if (valid > kn) valid = kn;
      if (valid <= 0) {
        memset(s, 0, (size_t)kn * sizeof(float));
        continue;
      }
      float mx = row_max(s, valid), mnew = m[r] > mx ? m[r] : mx;
      float corr = m[r] == -INFINITY ? 0.0f : lh_fast_expf(m[r] - mnew);
      for (int64_t j = 0; j < valid; j++) s[j] = lh_fast_expf(s[j] - mnew);
      for (int64_t j = valid; j < kn; j++) s[j] = 0.0f;
      l[r] = l[r] * corr + row_sum(s, valid);
      m[r] = mnew;
      if (corr != 1.0f) {
        float *a = acc + (size_t)r * d;
        for (int c = 0; c < d; c++) a[c] *= corr;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, kn, 1.0f, Sc, kn, V, d, 1.0f, acc, d);
  }
  for (int hh = 0; hh < nh; hh++)
    for (int i = 0; i < nq; i++) {
      const float *a = acc + ((size_t)hh * nq + i) * d;
      float li = l[hh * nq + i], *oi = o + i * ldo + hh * ohs;
      for (int c = 0; c < d; c++) oi[c] = a[c] / li;
    }
}

/* The key block from position first (at most kb keys, not past its page): K and V of kv head g
 * at its first key; returns the position after its last key. The fused path and the bf16 mode's
 * tile loop (attention_bf16.c) cut their key blocks with it. */
int64_t lh_attn_key_block(const lh_kv_pages *kv, int g, int64_t first, int kb, const float **K, const float **V) {
  const int PT = kv->page_tokens, d = kv->d;
  int64_t k0 = first / PT * PT;
  const float *page = kv->pages[first / PT];
  *K = page + ((int64_t)g * PT + (first - k0)) * d;
  *V = page + ((int64_t)(kv->n_kv + g) * PT + (first - k0)) * d;
  return k0 + PT < first + kb ? k0 + PT : first + kb;
}

/* ---- the fused AVX2/FMA path -------------------------------------------------------------- */

#if LH_ATTN_FUSED
#include <immintrin.h>

#define AVX2_FMA __attribute__((target("avx2,fma")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,fma")))

/* 2^x for x <= 0, -inf or NaN (NaN stays NaN): Cody-Waite with x = n + f, |f| <= 1/2, and
 * 2^f = e^(f ln 2) by the same degree-6 Taylor polynomial as lh_fast_expf (coefficients
 * (ln 2)^k / k!), within 2 ulp. x <= -126.5 (and -inf) gives exactly 0: n + 127 = 0 is the
 * exponent field of +0. The max keeps NaN because vmaxps returns its second operand then. */
AVX2_INLINE __m256 exp2_nonpos(__m256 x) {
  const __m256 bias = _mm256_set1_ps(12583039.0f); /* 1.5 * 2^23 + 127: round(x) + 127 lands in the low bits */
  x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x);
  __m256 t = _mm256_add_ps(x, bias);
  __m256 f = _mm256_sub_ps(x, _mm256_sub_ps(t, bias)); /* exact */
  __m256 p = _mm256_set1_ps(1.5403530393381606e-4f);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(t), 23)); /* 2^n, or +0 at n = -127 */
  return _mm256_mul_ps(p, s);
}

/* S^T[j][lane] = sum_e K[j][e] QT[e][lane] for nk keys (rows of K, stride d) and rv vectors of
 * lanes, one FMA chain per score in e order. Masked scores (key kk + j past the lane's rel) become
 * -inf; bmax keeps the running max per lane. rv and nk are constants at every call. */
AVX2_INLINE void qk_tile(const float *K, int d, const float *QT, float *ST, int kk, int masked, const __m256i *rel,
                         __m256 *bmax, int rv, int nk) {
  __m256 acc[TMAX][3];
  for (int j = 0; j < nk; j++)
    for (int v = 0; v < rv; v++) acc[j][v] = _mm256_setzero_ps();
  for (int e = 0; e < d; e++) {
    __m256 qv[3];
    for (int v = 0; v < rv; v++) qv[v] = _mm256_loadu_ps(QT + (size_t)e * RB + 8 * v);
    for (int j = 0; j < nk; j++) {
      __m256 kb = _mm256_broadcast_ss(K + (size_t)j * d + e);
      for (int v = 0; v < rv; v++) acc[j][v] = _mm256_fmadd_ps(kb, qv[v], acc[j][v]);
    }
  }
  for (int j = 0; j < nk; j++)
    for (int v = 0; v < rv; v++) {
      __m256 s = acc[j][v];
      if (masked) {
        __m256i out = _mm256_cmpgt_epi32(_mm256_set1_epi32(kk + j), rel[v]);
        s = _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(out));
      }
      bmax[v] = _mm256_max_ps(bmax[v], s);
      _mm256_storeu_ps(ST + (size_t)(kk + j) * RB + 8 * v, s);
    }
}

/* OT[c][lane] = OT[c][lane] * corr[lane] + sum_k V[k][c] PT[k][lane] for cb columns of V (row
 * stride d) from c, over the nk keys of a block: the block's sum is one FMA chain per output in key
 * order from 0, then added to the rescaled accumulator (so the rounding error grows with the number
 * of blocks, not of keys; fma(o, 1, s) = o + s when the max has not moved). */
AVX2_INLINE void pv_tile(const float *V, int d, const float *PT, int nk, float *OT, const __m256 *corr, int rv,
                         int cb) {
  __m256 acc[TMAX][3];
  for (int c = 0; c < cb; c++)
    for (int v = 0; v < rv; v++) acc[c][v] = _mm256_setzero_ps();
  for (int k = 0; k < nk; k++) {
    __m256 p[3];
    for (int v = 0; v < rv; v++) p[v] = _mm256_loadu_ps(PT + (size_t)k * RB + 8 * v);
    for (int c = 0; c < cb; c++) {
      __m256 vb = _mm256_broadcast_ss(V + (size_t)k * d + c);
      for (int v = 0; v < rv; v++) acc[c][v] = _mm256_fmadd_ps(vb, p[v], acc[c][v]);
    }
  }
  for (int c = 0; c < cb; c++)
    for (int v = 0; v < rv; v++) {
      float *ot = OT + (size_t)c * RB + 8 * v;
      _mm256_storeu_ps(ot, _mm256_fmadd_ps(_mm256_loadu_ps(ot), corr[v], acc[c][v]));
    }
}

/* One softmax block of nk keys (K, V at its first key; first key at rel 0 of the lanes' rel) for
 * a row block of rv vectors: S, max, exp, sum, rescale, P V. m, l: per lane; OT: [d][RB]. */
AVX2_INLINE void attn_block(const float *K, const float *V, int d, int nk, const float *QT, float *ST, float *OT,
                            float *m, float *l, int masked, const __m256i *rel, int rv) {
  __m256 bmax[3], corr[3], mv[3], lsum[3];
  for (int v = 0; v < rv; v++) bmax[v] = _mm256_set1_ps(-INFINITY);
  const int nt = rv == 1 ? 8 : 4;
  int kk = 0;
  for (; kk + nt <= nk; kk += nt) qk_tile(K + (size_t)kk * d, d, QT, ST, kk, masked, rel, bmax, rv, nt);
  if (nt == 8 && kk + 4 <= nk) {
    qk_tile(K + (size_t)kk * d, d, QT, ST, kk, masked, rel, bmax, rv, 4);
    kk += 4;
  }
  switch (nk - kk) {
  case 3: qk_tile(K + (size_t)kk * d, d, QT, ST, kk, masked, rel, bmax, rv, 3); break;
  case 2: qk_tile(K + (size_t)kk * d, d, QT, ST, kk, masked, rel, bmax, rv, 2); break;
  case 1: qk_tile(K + (size_t)kk * d, d, QT, ST, kk, masked, rel, bmax, rv, 1); break;
  default: break;
  }
  for (int v = 0; v < rv; v++) {
    __m256 mold = _mm256_loadu_ps(m + 8 * v);
    mv[v] = _mm256_max_ps(mold, bmax[v]); /* finite after the first block: key 0 is in every lane */
    corr[v] = exp2_nonpos(_mm256_sub_ps(mold, mv[v])); /* 1 exactly when the max stays, 0 from -inf */
    _mm256_storeu_ps(m + 8 * v, mv[v]);
  }
  for (int v = 0; v < rv; v++) { /* two partial sums, keys of even and odd index in the block */
    float *col = ST + 8 * v;
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int k = 0;
    for (; k + 2 <= nk; k += 2) {
      __m256 p0 = exp2_nonpos(_mm256_sub_ps(_mm256_loadu_ps(col + (size_t)k * RB), mv[v]));
      __m256 p1 = exp2_nonpos(_mm256_sub_ps(_mm256_loadu_ps(col + (size_t)(k + 1) * RB), mv[v]));
      s0 = _mm256_add_ps(s0, p0);
      s1 = _mm256_add_ps(s1, p1);
      _mm256_storeu_ps(col + (size_t)k * RB, p0);
      _mm256_storeu_ps(col + (size_t)(k + 1) * RB, p1);
    }
    if (k < nk) {
      __m256 p0 = exp2_nonpos(_mm256_sub_ps(_mm256_loadu_ps(col + (size_t)k * RB), mv[v]));
      s0 = _mm256_add_ps(s0, p0);
      _mm256_storeu_ps(col + (size_t)k * RB, p0);
    }
    lsum[v] = _mm256_add_ps(s0, s1);
  }
  for (int v = 0; v < rv; v++)
    _mm256_storeu_ps(l + 8 * v, _mm256_fmadd_ps(_mm256_loadu_ps(l + 8 * v), corr[v], lsum[v]));
  int c = 0;
  for (; c + nt <= d; c += nt) pv_tile(V + c, d, ST, nk, OT + (size_t)c * RB, corr, rv, nt);
  if (nt == 8 && c + 4 <= d) {
    pv_tile(V + c, d, ST, nk, OT + (size_t)c * RB, corr, rv, 4);
    c += 4;
  }
  switch (d - c) {
  case 3: pv_tile(V + c, d, ST, nk, OT + (size_t)c * RB, corr, rv, 3); break;
  case 2: pv_tile(V + c, d, ST, nk, OT + (size_t)c * RB, corr, rv, 2); break;
  case 1: pv_tile(V + c, d, ST, nk, OT + (size_t)c * RB, corr, rv, 1); break;
  default: break;
  }
}

/* The row blocks' state between key blocks. Lane u of block b is row f = 24 b + u of the tile
 * (query f / nh of head f % nh); lanes past nr repeat the block's last row and are never written
 * back, so every lane's scores stay finite. */
typedef struct row_block {
  int nr, rv;
  int64_t pmin, pmax;      /* positions of the first and last row */
  int64_t pos[RB];
  float *QT, *OT;          /* [d][RB] each, in scratch */
  float m[RB], l[RB];
} row_block;

/* One softmax block of a row block: keys [first, first + nk) at K, V, all in one page. */
AVX2_INLINE void block_step(row_block *rb, const float *K, const float *V, int d, int nk, int64_t first, int kb,
                            float *ST, int rv) {
  int masked = first + nk - 1 > rb->pmin;
  __m256i rel[3] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  if (masked) { /* the last key index each lane sees, clamped to [-1, kb] */
    int32_t r[RB];
    for (int u = 0; u < 8 * rv; u++) {
      int64_t t = rb->pos[u] - first;
      r[u] = (int32_t)(t < -1 ? -1 : (t > kb ? kb : t));
    }
    for (int v = 0; v < rv; v++) rel[v] = _mm256_loadu_si256((const __m256i *)(r + 8 * v));
  }
  attn_block(K, V, d, nk, rb->QT, ST, rb->OT, rb->m, rb->l, masked, rel, rv);
}

AVX2_FMA static void block_step1(row_block *rb, const float *K, const float *V, int d, int nk, int64_t first, int kb,
                                 float *ST) {
  block_step(rb, K, V, d, nk, first, kb, ST, 1);
}
AVX2_FMA static void block_step2(row_block *rb, const float *K, const float *V, int d, int nk, int64_t first, int kb,
                                 float *ST) {
  block_step(rb, K, V, d, nk, first, kb, ST, 2);
}
AVX2_FMA static void block_step3(row_block *rb, const float *K, const float *V, int d, int nk, int64_t first, int kb,
                                 float *ST) {
  block_step(rb, K, V, d, nk, first, kb, ST, 3);
}

/* Key blocks outside, row blocks inside: a block's K and V (32 KB each at d = 32) are read from
 * memory once per tile and stay in L2 while every row block that sees them goes over them. */
static void attn_tile_fused(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                            int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch) {
  const int PT = kv->page_tokens, d = kv->d, rows = nh * nq, kb = PT < KB ? PT : KB, nb = (rows + RB - 1) / RB;
  const float qs = scale * 1.44269504088896341f; /* scores in base 2: e^s = 2^(s log2 e) */
  float *base = (float *)(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
  float *ST = base + 2 * (size_t)nb * d * RB;
  row_block blk[MAX_BLOCKS];
  if (nb < 1 || nb > MAX_BLOCKS) return; /* nh * nq rows must be in [1, LH_ATTN_ROWS] */
  for (int b = 0; b < nb; b++) {
    row_block *rb = &blk[b];
    int f0 = b * RB;
    rb->nr = rows - f0 < RB ? rows - f0 : RB;
    rb->rv = (rb->nr + 7) / 8;
    rb->QT = base + (size_t)b * d * RB;
    rb->OT = base + (size_t)(nb + b) * d * RB;
    for (int u = 0; u < 8 * rb->rv; u++) {
      int f = f0 + (u < rb->nr ? u : rb->nr - 1), i = f / nh;
      const float *qi = q + i * ldq + (f % nh) * qhs;
      for (int e = 0; e < d; e++) rb->QT[(size_t)e * RB + u] = qi[e] * qs;
      for (int e = 0; e < d; e++) rb->OT[(size_t)e * RB + u] = 0.0f;
      rb->pos[u] = qpos + i;
      rb->m[u] = -INFINITY;
      rb->l[u] = 0.0f;
    }
    rb->pmin = qpos + f0 / nh;
    rb->pmax = qpos + (f0 + rb->nr - 1) / nh;
  }
  int b_lo = 0; /* blocks before b_lo have seen all their keys: pmax grows with b */
  for (int64_t first = 0; first < qpos + nq;) {
    const float *K, *V, *Kn = NULL, *Vn = NULL;
    int64_t end = lh_attn_key_block(kv, g, first, kb, &K, &V), next_end = 0; /* this key block: [first, end) */
    if (end < qpos + nq) next_end = lh_attn_key_block(kv, g, end, kb, &Kn, &Vn);
    if (next_end > qpos + nq) next_end = qpos + nq;
    /* the next block's K and V into L2 meanwhile, a slice before each row block (not in one
     * burst): at long context they come from memory, not from L3 */
    size_t pf_bytes = (size_t)(next_end > end ? next_end - end : 0) * d * sizeof(float), pf_at = 0;
    while (blk[b_lo].pmax < first) b_lo++;
    for (int b = b_lo; b < nb; b++) {
      row_block *rb = &blk[b];
      int nk = (int)((rb->pmax + 1 < end ? rb->pmax + 1 : end) - first);
      for (size_t to = pf_bytes * (b - b_lo + 1) / (nb - b_lo); pf_at < to; pf_at += 64) {
        _mm_prefetch((const char *)Kn + pf_at, _MM_HINT_T1);
        _mm_prefetch((const char *)Vn + pf_at, _MM_HINT_T1);
      }
      if (rb->rv == 3) block_step3(rb, K, V, d, nk, first, kb, ST);
      else if (rb->rv == 2) block_step2(rb, K, V, d, nk, first, kb, ST);
      else block_step1(rb, K, V, d, nk, first, kb, ST);
    }
    first = end;
  }
  for (int b = 0; b < nb; b++)
    for (int u = 0; u < blk[b].nr; u++) {
      int f = b * RB + u;
      float *oi = o + (f / nh) * ldo + (f % nh) * ohs;
      for (int c = 0; c < d; c++) oi[c] = blk[b].OT[(size_t)c * RB + u] / blk[b].l[u];
    }
}
#endif

int lh_attn_fused(void) {
#if LH_ATTN_FUSED
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return 0;
#endif
}

void lh_attn_tile(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                  int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch) {
#if LH_ATTN_FUSED
  if (lh_attn_fused()) {
    attn_tile_fused(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
    return;
  }
#endif
  lh_attn_tile_blas(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
}
