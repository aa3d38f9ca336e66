/* attention_bf16.h — what the two bf16 attention paths share (private to kernels/cpu).
 *
 * The CPU backend's "bf16" softmax attention (ops.h: lh_attn_tile_bf16) has one definition and two
 * implementations of its products: Intel AMX tiles (attention_amx.c) and AVX512-BF16's VDPBF16PS
 * (attention_avx512bf16.c). Everything else is common and lives in attention_bf16.c: the tile's
 * row blocks of AR rows (Q in bf16, the fp32 accumulator O, m and l), the key blocks of up to AK
 * keys cut from each page's start, packing a key block's K and V to the bf16 layouts both
 * products read (Kt, Vv below), the softmax of a row (softmax_row here: both paths run these
 * instructions, so their P, m and l agree bit for bit given the same scores) and the final O / l.
 * A path supplies one function, the step: one row block over one packed key block.
 *
 * Layouts of a key block of nk keys, zero past nk up to kp (nk rounded up to 32):
 *   Kt[r][c] = the bf16 pair (K[c][2r], K[c][2r+1]), row stride AK: K transposed in 32-bit pairs;
 *   Vv[r][c] = (V[2r][c], V[2r+1][c]), row stride d: two key rows interleaved;
 *   P[u][k]  = bf16, row stride AK: so (P[u][2r], P[u][2r+1]) is one 32-bit pair, as Q's are.
 * A pair times a pair is what both units multiply-add (TDPBF16PS, VDPBF16PS): S = Q Kt and
 * O = P Vv are sums of pair products over r.
 */
#ifndef LH_KERNELS_CPU_ATTENTION_BF16_H
#define LH_KERNELS_CPU_ATTENTION_BF16_H

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/ops.h"

/* x86-64 compilers with the AVX512-BF16 intrinsics (GCC 10, clang 9); the code is built for that
 * target with function attributes only, so the binary still runs on any x86-64. */
#if defined(__x86_64__) && !defined(LH_NO_BF16_ATTN) &&                                                        \
    ((defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 10))
#define LH_ATTN_BF16_X86 1
#else
#define LH_ATTN_BF16_X86 0
#endif

enum {
  AR = 16,  /* rows of a row block (one AMX tile's rows) */
  AK = 256, /* keys of a softmax block (the fused path's KB): cut from each page's start */
  AMAX_BLOCKS = LH_ATTN_ROWS / AR,
};

/* The key block from position first (at most kb keys, not past its page): K and V of kv head g at
 * its first key; returns the position after its last key. The fused path's (attention.c). */
int64_t lh_attn_key_block(const lh_kv_pages *kv, int g, int64_t first, int kb, const float **K, const float **V);

#if LH_ATTN_BF16_X86
#include <immintrin.h>

#define BF16_ISA "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"
#define BF16_FN __attribute__((target(BF16_ISA)))
#define BF16_INLINE static inline __attribute__((always_inline, target(BF16_ISA)))

/* A row block between key blocks. Row u is row 16 b + u of the tile (query f / nh of head f % nh);
 * rows past nr repeat the block's last row and are never written back. */
typedef struct bf16_rows {
  int nr;
  int64_t pmin, pmax; /* positions of the first and last row */
  int64_t pos[AR];
  uint16_t *Q; /* [AR][d] bf16 */
  float *O;    /* [AR][d] */
  float m[AR], l[AR];
} bf16_rows;

/* Scratch of a step, 64-byte aligned: S [AR][AK] fp32, P [AR][AK] bf16, Ob [AR][d] fp32; and the
 * step's share of the next key block's K and V to prefetch: pf_lines cache lines from each of pf_k
 * and pf_v. At long context K and V come from memory: without the prefetch pack_keys waited for
 * them ~8% of the AVX512-BF16 path's time (Zen 4), the prefetches issued in one burst per step
 * stalled it about as long, and spread over the step (a few lines before each 32 keys) they cost
 * ~2%. PREFETCHT0 measured 2% faster there than T1 (the pack then mostly hits L1). */
typedef struct bf16_work {
  float *S;
  uint16_t *P;
  float *Ob;
  const char *pf_k, *pf_v;
  int pf_lines;
} bf16_work;

/* Lines [from, to) of the step's share of the prefetch. */
BF16_INLINE void bf16_prefetch(const bf16_work *w, int from, int to) {
  for (int i = from; i < to && i < w->pf_lines; i++) {
    _mm_prefetch(w->pf_k + 64 * (size_t)i, _MM_HINT_T0);
    _mm_prefetch(w->pf_v + 64 * (size_t)i, _MM_HINT_T0);
  }
}

/* One row block over the key block [first, first + nk), packed and padded to kp keys: updates
 * rb's O, m and l (scores times qs = scale log2(e) are in base 2). */
typedef void (*bf16_step)(bf16_rows *rb, const uint32_t *Kt, const uint32_t *Vv, int d, int nk, int kp,
                          int64_t first, float qs, const bf16_work *w);

/* lh_attn_tile's function with the products of step (attention_bf16.c). d a multiple of 32 up to
 * 256; scratch of lh_attn_bf16_scratch(d) floats. Whatever per-thread state step needs (AMX's tile
 * configuration) is the caller's. */
void lh_attn_bf16_tile(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                       int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch, bf16_step step);

/* 32 fp32 at x as bf16 (round to nearest even), in order. */
BF16_INLINE __m512i bf16x32(const float *x) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}

/* 2^x for x <= 0 in the lanes of k, 0 elsewhere and below -126: x = n + f, |f| <= 1/2, 2^f by a
 * degree-4 least-squares polynomial (relative error below 6e-6, far under bf16's 2^-9), 2^n by
 * scalef. f = 0 gives exactly 1, so corr is exactly 1 when the max has not moved. */
BF16_INLINE __m512 exp2_masked(__m512 x, __mmask16 k) {
  k = _mm512_mask_cmp_ps_mask(k, x, _mm512_set1_ps(-126.0f), _CMP_GT_OQ);
  __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(0.00959024f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05587027f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24023678f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.69312805f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(k, p, n);
}

/* The first n lanes, n clamped to [0, 16]. */
BF16_INLINE __mmask16 lanes_below(int n) { return n >= 16 ? 0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* Keys of the block [first, first + nk) that a row at pos sees: [first, pos]. */
static inline int visible_keys(int64_t pos, int64_t first, int nk) {
  const int64_t t = pos - first + 1;
  return (int)(t < 0 ? 0 : t > nk ? nk : t);
}

/* Step 2 of a row, the softmax: s = its scores [kp] (fp32, not yet scaled), of which the first nv
 * are visible, smax their max (-inf when nv = 0). m_new = max(m, smax qs), corr = 2^(m - m_new),
 * P = 2^(s qs - m_new) (0 for keys it cannot see, and for padding) to p [kp] as bf16, l = l corr +
 * sum P (the fp32 P, before rounding). Returns corr, for O = O corr + P V. */
BF16_INLINE float softmax_row(const float *s, uint16_t *p, int nv, int kp, float smax, float qs, float *m, float *l) {
  const float bm = smax * qs, mold = *m, mnew = mold > bm ? mold : bm;
  /* mnew is finite: the first key block holds key 0, which every row sees */
  const float corr = mold == mnew ? 1.0f : _mm512_cvtss_f32(exp2_masked(_mm512_set1_ps(mold - mnew), 1));
  const __m512 qv = _mm512_set1_ps(qs), mv = _mm512_set1_ps(mnew);
  __m512 sum = _mm512_setzero_ps();
  for (int k = 0; k < kp; k += 32) {
    __m512 p0 = exp2_masked(_mm512_fmsub_ps(_mm512_loadu_ps(s + k), qv, mv), lanes_below(nv - k));
    __m512 p1 = exp2_masked(_mm512_fmsub_ps(_mm512_loadu_ps(s + k + 16), qv, mv), lanes_below(nv - k - 16));
    sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
    _mm512_storeu_si512(p + k, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
  }
  *l = *l * corr + _mm512_reduce_add_ps(sum);
  *m = mnew;
  return corr;
}
#endif

#endif
