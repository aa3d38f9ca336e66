/* attention_avx512bf16.c — the bf16 attention's products with AVX512-BF16 (VDPBF16PS) on CPUs without AMX.
 *
 * One of the two units of the CPU's bf16 softmax attention (attention_bf16.c has the definition,
 * the tile loop, the packing of K and V to Kt and Vv, and the softmax of a row; attention_amx.c the
 * other unit). This file is the step of one row block (16 rows) over one packed key block (up to
 * 256 keys) on zmm registers. VDPBF16PS adds, to each of 16 fp32 lanes, the products of one pair
 * of bf16 from each source: with Kt[r][c] = (K[c][2r], K[c][2r+1]) in a register and the pair
 * (Q[u][2r], Q[u][2r+1]) broadcast, it adds the pair r of row u's scores over 16 keys; with Vv[r][c]
 * = (V[2r][c], V[2r+1][c]) and the pair (P[u][2r], P[u][2r+1]) broadcast, two keys of row u's
 * output over 16 dims. Per step, rows computed up to nr rounded up to 4 (rows past nr repeat the
 * last; a decode tile of 2 rows does a quarter of a full block's work):
 *   1. for 8 rows at a time (4 for the last 4): S[8][keys] = Q Kt, 32 keys per pass in 8 x 2
 *      accumulators (two Kt vectors loaded, one pair of each row broadcast, 16 VDPBF16PS per pair
 *      r), each a chain over the d / 2 pairs in order, stored to scratch; the running max of each
 *      row's visible keys folded in as they are stored;
 *   2. for those rows, softmax_row (attention_bf16.h): m, corr, P in bf16, l;
 *   3. for 8 rows x 32 dims (or 4 rows x 64 dims), O = O corr + P Vv: each accumulator a chain
 *      over the key pairs of the block in order from zero, then one FMA into O.
 * The step also issues its share of the prefetch of the next key block (bf16_work), a few lines
 * before each pass of step 1.
 *
 * A row's bits depend on its query, its position and the K/V only, as on the other paths: every
 * score and every output is one chain whose terms are fixed by the key block (cut by position from
 * the page's start), other rows never enter it, and the keys a row cannot see (the causal mask, the
 * padding to 32) have P = 0 exactly, so they add exact zeros to its chains; the running max is a
 * max, the same whatever the grouping. The AMX path computes the same function with other
 * summation orders (its tiles sum 32 pairs inside the instruction), so the two differ in low bits.
 *
 * Floor and expectation, written before the kernel (AMD EPYC Zen 4, 2 cores, shared VM; haul-tiny
 * d = 32, 8 query heads over 4 kv heads; measured here with loops of independent instructions):
 * a zmm FMA and a zmm VDPBF16PS each issue once a cycle per core (Zen 4 runs 512-bit operations
 * as two 256-bit halves on its two FMA pipes): 108-114 GFLOP/s per core for the FMA, 203-220 for
 * VDPBF16PS (64 FLOPs an instruction), latency ~6 cycles (so 16 independent accumulators are
 * plenty). A (query, key) pair at d = 32 is 64 multiply-adds: 2 VDPBF16PS, 2 cycles, against 4 for
 * FMAs. The softmax is per 16 scores a fused scale-and-subtract, the compare, roundscale, subtract,
 * 4 polynomial FMAs and a scalef of exp2_masked, the sum, half a pack: ~7 on the FMA pipes, ~0.45
 * cycle a score; the max costs one op per 16 scores in step 1. Packing K and V is ~11 operations a
 * key per tile, shared by the tile's 256 rows: ~0.05 cycle a score. So the floor is ~2.5 cycles a
 * score, 80% of the VDPBF16PS peak. The fp32 fused path runs at ~65% of the FMA peak (its exp
 * shares those pipes): ~6.2 cycles a score, so the floor is ~2.5x it. Expected: 60-70% of the
 * VDPBF16PS peak (steps 1 and 3 load a 64-byte vector per 4 products and broadcast a pair per 2-4,
 * S and P go through L1, the per-row reductions and the diagonal key blocks cost extra), i.e.
 * 2.9-3.3 cycles a score, 1.9-2.2x the fused path at 8K-64K keys.
 *
 * Outcome (bench/engine/NOTES.md has the tables): at d = 32, 8K-64K keys, 2 threads, 280-300
 * GFLOP/s, 1.83-2.01x the fused path and 62-65% of the measured VDPBF16PS peak (~455 GFLOP/s): the
 * low end of the expectation. One thread, timed by phase (rdtsc, 32K keys; cycles a score): step 1
 * 1.2 (the products alone 1.0: Kt comes back from L2 for each group of rows, since Kt, Vv, S and P
 * are 48 KB against a 32 KB L1, and the prefetch shares its loads), softmax 0.6 (its exp2 is ~10
 * zmm operations per 16 scores, 7 on the FMA pipes), step 3 1.0 (the products alone), packing and
 * the rest 0.12: ~2.9 cycles a score, 68%. Two changes that did help: the prefetch of the next key
 * block (pack_keys had been ~8% of the time, waiting for memory), and d a constant at 32 (5%: see
 * dp_step). What did not, measured in one process alternating the variants (medians of 5-7): 4
 * rows x 64 keys in step 1 (that step 4% slower), the passes over the keys outside the row groups
 * (Kt read from L2 once per step instead of twice: 4% slower overall), the prefetch in step 2
 * instead of 1 and branch-free lane masks (+1-2%, within the noise), an exp2 by a 16-entry table
 * and a degree-2 polynomial (the softmax alone 12% slower: more operations). A degree-3 (Taylor)
 * polynomial would make the softmax 11% faster (2% overall) at 8e-4 relative error in P before its
 * rounding to bf16: not taken, to keep the AMX path's softmax bit for bit. At d = 64 and 128 the softmax's
 * share halves with each doubling: 71-77% of the peak, 2.0-2.2x.
 */
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/attention_bf16.h"

#if LH_ATTN_BF16_X86
#include <cpuid.h>

static int dp_ok;
static pthread_once_t dp_once = PTHREAD_ONCE_INIT;

/* AVX512_BF16 is CPUID leaf 7 subleaf 1, EAX bit 5; the zmm state's OS support is part of
 * __builtin_cpu_supports("avx512f"). */
static void dp_probe(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return;
  dp_ok = ((a >> 5) & 1) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

int lh_attn_avx512bf16(void) {
  pthread_once(&dp_once, dp_probe);
  return dp_ok;
}

/* The 32-bit pair at p (two bf16), broadcast to 16 lanes. */
BF16_INLINE __m512bh pair_bcast(const uint16_t *p) {
  int32_t x;
  memcpy(&x, p, sizeof x);
  return (__m512bh)_mm512_set1_epi32(x);
}

/* Step 1 for RQ rows from Q (row stride d) and the 32 keys from j: S[q][j ..] = sum over the pairs r
 * of Q's pair r times Kt row r, one chain per (row, 16 keys); RQ x 2 is 8 x 2 (16 chains) or 4 x 2
 * (8, still more than VDPBF16PS's latency of ~6 needs). Stores to S (row stride AK) and folds the
 * keys each row sees (nv[q] from the block's start) into mx[q]. */
BF16_INLINE void scores(const uint16_t *Q, const uint32_t *Kt, int d, int j, int RQ, const int *nv, float *S,
                        __m512 *mx) {
  __m512 acc[8][2];
  for (int q = 0; q < RQ; q++) acc[q][0] = acc[q][1] = _mm512_setzero_ps();
  for (int r = 0; r < d / 2; r++) {
    const __m512bh k0 = (__m512bh)_mm512_loadu_si512(Kt + (size_t)r * AK + j);
    const __m512bh k1 = (__m512bh)_mm512_loadu_si512(Kt + (size_t)r * AK + j + 16);
    for (int q = 0; q < RQ; q++) {
      const __m512bh b = pair_bcast(Q + (size_t)q * d + 2 * r);
      acc[q][0] = _mm512_dpbf16_ps(acc[q][0], k0, b);
      acc[q][1] = _mm512_dpbf16_ps(acc[q][1], k1, b);
    }
  }
  for (int q = 0; q < RQ; q++)
    for (int c = 0; c < 2; c++) {
      _mm512_storeu_ps(S + (size_t)q * AK + j + 16 * c, acc[q][c]);
      mx[q] = _mm512_mask_max_ps(mx[q], lanes_below(nv[q] - j - 16 * c), mx[q], acc[q][c]);
    }
}

/* Step 3 for RQ rows (P, O: their first rows, strides AK and d) and the 16 T dims from 16 t0:
 * O = O corr + sum over the key pairs r < kp / 2 of P's pair r times Vv row r. RQ x T is 8 x 2,
 * 4 x 4 or 4 x 2. */
BF16_INLINE void outputs(const uint16_t *P, const uint32_t *Vv, int d, int kp, int t0, int RQ, int T,
                         const float *corr, float *O) {
  __m512 acc[8][4];
  for (int q = 0; q < RQ; q++)
    for (int t = 0; t < T; t++) acc[q][t] = _mm512_setzero_ps();
  for (int r = 0; r < kp / 2; r++) {
    __m512bh v[4];
    for (int t = 0; t < T; t++) v[t] = (__m512bh)_mm512_loadu_si512(Vv + (size_t)r * d + 16 * (t0 + t));
    for (int q = 0; q < RQ; q++) {
      const __m512bh b = pair_bcast(P + (size_t)q * AK + 2 * r);
      for (int t = 0; t < T; t++) acc[q][t] = _mm512_dpbf16_ps(acc[q][t], v[t], b);
    }
  }
  for (int q = 0; q < RQ; q++)
    for (int t = 0; t < T; t++) {
      float *o = O + (size_t)q * d + 16 * (t0 + t);
      _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_loadu_ps(o), _mm512_set1_ps(corr[q]), acc[q][t]));
    }
}

/* Steps 1-2 for the RQ rows from u0 (RQ = 8 or 4): S through scratch, then P, m, l and corr. The
 * step's prefetch share goes out pf_per lines before each pass of 32 keys, from line *pf on, so
 * that a handful are in flight at a time. */
BF16_INLINE void softmax_rows(bf16_rows *rb, const uint32_t *Kt, int d, int nk, int kp, int64_t first, float qs,
                              const bf16_work *w, int u0, int RQ, int pf_per, int *pf, float *corr) {
  const uint16_t *Q = rb->Q + (size_t)u0 * d;
  int nv[8];
  __m512 mx[8];
  for (int q = 0; q < RQ; q++) {
    nv[q] = visible_keys(rb->pos[u0 + q], first, nk);
    mx[q] = _mm512_set1_ps(-INFINITY);
  }
  for (int j = 0; j < kp; j += 32) { /* kp is a multiple of 32 */
    bf16_prefetch(w, *pf, *pf + pf_per), *pf += pf_per;
    scores(Q, Kt, d, j, RQ, nv, w->S, mx);
  }
  for (int q = 0; q < RQ; q++)
    corr[u0 + q] = softmax_row(w->S + (size_t)q * AK, w->P + (size_t)(u0 + q) * AK, nv[q], kp,
                               _mm512_reduce_max_ps(mx[q]), qs, &rb->m[u0 + q], &rb->l[u0 + q]);
}

/* Steps 1-3 of the header for head dim d. */
BF16_INLINE void step_d(bf16_rows *rb, const uint32_t *Kt, const uint32_t *Vv, int d, int nk, int kp, int64_t first,
                        float qs, const bf16_work *w) {
  const int nr = (rb->nr + 3) & ~3; /* rows computed */
  const int passes = (nr + 7) / 8 * (kp / 32), pf_per = (w->pf_lines + passes - 1) / passes; /* of step 1 */
  int pf = 0, u0 = 0;
  float corr[AR];
  for (; u0 + 8 <= nr; u0 += 8) softmax_rows(rb, Kt, d, nk, kp, first, qs, w, u0, 8, pf_per, &pf, corr);
  if (u0 < nr) softmax_rows(rb, Kt, d, nk, kp, first, qs, w, u0, 4, pf_per, &pf, corr);
  for (int t0 = 0; t0 < d / 16;) { /* d / 16 is even */
    if (d / 16 - t0 >= 4) {
      for (u0 = 0; u0 < nr; u0 += 4)
        outputs(w->P + (size_t)u0 * AK, Vv, d, kp, t0, 4, 4, corr + u0, rb->O + (size_t)u0 * d);
      t0 += 4;
    } else {
      for (u0 = 0; u0 + 8 <= nr; u0 += 8)
        outputs(w->P + (size_t)u0 * AK, Vv, d, kp, t0, 8, 2, corr + u0, rb->O + (size_t)u0 * d);
      if (u0 < nr) outputs(w->P + (size_t)u0 * AK, Vv, d, kp, t0, 4, 2, corr + u0, rb->O + (size_t)u0 * d);
      t0 += 2;
    }
  }
}

/* attention_bf16.h's bf16_step. With d a constant (haul-tiny's 32) the addresses of a row's pairs
 * and of Kt's and Vv's rows are one base plus immediates: with d a variable the 8 row pointers of
 * step 1 took so many registers that GCC 12 spilled a Kt vector inside the loop (5% slower). */
BF16_FN static void dp_step(bf16_rows *rb, const uint32_t *Kt, const uint32_t *Vv, int d, int nk, int kp,
                            int64_t first, float qs, const bf16_work *w) {
  if (d == 32) step_d(rb, Kt, Vv, 32, nk, kp, first, qs, w);
  else step_d(rb, Kt, Vv, d, nk, kp, first, qs, w);
}
#else
int lh_attn_avx512bf16(void) { return 0; }
#endif

void lh_attn_tile_avx512bf16(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                             int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs,
                             float *scratch) {
#if LH_ATTN_BF16_X86
  if (kv->d % 32 == 0 && kv->d <= 256 && lh_attn_avx512bf16()) {
    lh_attn_bf16_tile(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch, dp_step);
    return;
  }
#endif
  lh_attn_tile(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
}
