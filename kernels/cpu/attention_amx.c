/* attention_amx.c — lh_attn_tile's bf16 path: Q K^T and P V on Intel AMX tiles, softmax in fp32.
 *
 * The same function as attention.c (causal softmax attention of a tile of queries over paged K/V,
 * online softmax over softmax blocks of up to 256 keys cut from each page's start), with the two
 * products in bf16 on the AMX tile unit (TDPBF16PS: bf16 inputs, fp32 accumulation) the way the
 * CUDA backend does them on tensor cores: Q, K and V are rounded to bf16 (round to nearest even)
 * for the products, P = 2^(S - m) is rounded to bf16 for P V, and the scores, the max, the sums l
 * and the output accumulator stay fp32. That is about 3 significant digits in the products, like
 * a GPU run, against attention.c's ~7: it is a separate mode (the CPU backend's "bf16" attention,
 * engine.h's lh_model_params.cpu_attention), never a silent substitute for the fp32 reference.
 *
 * Why (issue 6's CPU demo: 200K tokens on 2 cores in under 2 minutes). On haul-tiny (d = 32) the
 * softmax layers are 97% of a 200K prefill on the fp32 path: 4 d = 128 FLOPs per (query, key) pair
 * at 110-125 GFLOP/s on two cores, against one TDPBF16PS of 16 x 16 x 32 (16K FLOPs) every ~16
 * cycles, about 1.6-1.9 TFLOP/s per core measured on this machine's Sapphire Rapids (a loop of
 * independent TDPBF16PS). With the products 15x cheaper, the exp and the bookkeeping of the
 * softmax bound it: about 13 AVX-512 operations per 16 scores (a fused scale-and-subtract, a
 * degree-4 polynomial for 2^f, a scalef, the sum, the bf16 pack, loads and stores), about 0.4
 * cycles a score, so ~3-4x the fp32 path expected.
 *
 * Layout, per tile: the rows are the fused path's (row f is query f / nh of head f % nh) in row
 * blocks of 16, one tile's rows; each row block keeps Q as bf16 [16][d] (the A operand), its
 * output accumulator O [16][d], m and l. Key blocks outside, row blocks inside; per key block,
 * once per tile:
 *   Kt[r][c] = the bf16 pair (K[c][2r], K[c][2r+1]): K transposed in 32-bit pairs, the B operand
 *     of S = Q K^T (AMX's B is "VNNI": rows are pairs of the inner dimension);
 *   Vv[r][c] = (V[2r][c], V[2r+1][c]): two key rows interleaved, the B operand of P V;
 *   both zero past the block's keys (padded to 32).
 * Per (row block, key block):
 *   1. S[16][keys] fp32 = Q Kt, four 16-key tiles in flight, stored to scratch;
 *   2. per row: the max over its visible keys, m_new = max(m, max * c) with c = scale log2(e),
 *      corr = 2^(m - m_new), P = 2^(S c - m_new) (0 for keys it cannot see), l = l corr + sum P,
 *      P packed to bf16 [16][keys];
 *   3. Ob[16][d] = P Vv from zero (up to four 16-column tiles at a time), then O = O corr + Ob.
 * A row's bits depend on its query, its position and the K/V only (the products of a row do not
 * involve the other rows, padded keys add exact zeros, the blocks are fixed by position), as on
 * the fused path; tests/engine/test_engine_kernels.c checks that and bounds the result against a
 * double reference at bf16's precision.
 *
 * AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16+),
 * asked once per process by lh_attn_amx(); each call loads the tile configuration and releases
 * the tiles at the end, so it is safe from any thread.
 */
#define _GNU_SOURCE /* syscall() */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/ops.h"

#if defined(__x86_64__) && defined(__linux__) && !defined(LH_NO_AMX) &&                                        \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define LH_ATTN_AMX 1
#else
#define LH_ATTN_AMX 0
#endif

enum {
  AR = 16,  /* rows of a row block: one tile's rows */
  AK = 256, /* keys of a softmax block (the fused path's KB): cut from each page's start */
  AMAX_BLOCKS = LH_ATTN_ROWS / AR,
};

/* Floats of scratch the AMX path needs (lh_attn_scratch takes the largest path's need). */
size_t lh_attn_amx_scratch(int d) {
  size_t kt = (size_t)d / 2 * AK, vv = (size_t)AK / 2 * d, s = (size_t)AR * AK, p = (size_t)AR * AK / 2,
         ob = (size_t)AR * d, q = (size_t)AMAX_BLOCKS * AR * d / 2, o = (size_t)AMAX_BLOCKS * AR * d;
  return kt + vv + s + p + ob + q + o + 16;
}

#if LH_ATTN_AMX
#include <cpuid.h>
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_FN __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#define AMX_INLINE static inline __attribute__((always_inline, target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return;
  int avx512bf16 = (a >> 5) & 1;
  if (!tile || !bf16 || !avx512bf16 || !__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
    return;
  /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): refused by kernels without AMX support */
  amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}

int lh_attn_amx(void) {
  pthread_once(&amx_once, amx_probe);
  return amx_ok;
}

/* The tile configuration: palette 1, tiles 0-7 all 16 rows of 64 bytes. */
typedef struct tile_config {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} tile_config;

/* Transpose a 16 x 16 matrix of 32-bit elements held as 16 rows of one vector each. */
AMX_INLINE void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) { /* r[4i + j], 128-bit lane L: rows 4i..4i+3 at column 4L + j */
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; j++) { /* a 4 x 4 transpose of 128-bit lanes among r[j], r[4+j], r[8+j], r[12+j] */
    __m512i x0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xEE);
    __m512i x2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x44), x3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xEE);
    t[j] = _mm512_shuffle_i32x4(x0, x2, 0x88);
    t[4 + j] = _mm512_shuffle_i32x4(x0, x2, 0xDD);
    t[8 + j] = _mm512_shuffle_i32x4(x1, x3, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(x1, x3, 0xDD);
  }
  for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* 32 fp32 at x as bf16 (round to nearest even), in order. */
AMX_INLINE __m512i bf16x32(const float *x) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}

/* Kt and Vv of a key block of nk keys (K, V: rows of d floats), zero up to kp keys. */
AMX_INLINE void pack_keys(const float *K, const float *V, int d, int nk, int kp, uint32_t *Kt, uint32_t *Vv) {
  const __m512i zero = _mm512_setzero_si512();
  for (int cg = 0; cg < kp; cg += 16)     /* 16 keys */
    for (int rg = 0; rg < d / 2; rg += 16) { /* 16 pairs of dims: dims 2 rg .. 2 rg + 32 */
      __m512i r[16];
      for (int c = 0; c < 16; c++) r[c] = cg + c < nk ? bf16x32(K + (size_t)(cg + c) * d + 2 * rg) : zero;
      transpose16(r);
      for (int i = 0; i < 16; i++) _mm512_storeu_si512(Kt + (size_t)(rg + i) * AK + cg, r[i]);
    }
  /* lane 2c of the pack is dim c of the even key, lane 2c + 1 of the odd one */
  const __m512i ilv = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int r = 0; r < kp / 2; r++)
    for (int c = 0; c < d; c += 16) {
      __m512 a = 2 * r < nk ? _mm512_loadu_ps(V + (size_t)(2 * r) * d + c) : _mm512_setzero_ps();
      __m512 b = 2 * r + 1 < nk ? _mm512_loadu_ps(V + (size_t)(2 * r + 1) * d + c) : _mm512_setzero_ps();
      __m512i ab = (__m512i)_mm512_cvtne2ps_pbh(b, a); /* a's 16 then b's 16 */
      _mm512_storeu_si512(Vv + (size_t)r * d + c, _mm512_permutexvar_epi16(ilv, ab));
    }
}

/* 2^x for x <= 0 in the lanes of k, 0 elsewhere and below -126: x = n + f, |f| <= 1/2, 2^f by a
 * degree-4 least-squares polynomial (relative error below 6e-6, far under bf16's 2^-9), 2^n by
 * scalef. f = 0 gives exactly 1, so corr is exactly 1 when the max has not moved. */
AMX_INLINE __m512 exp2_masked(__m512 x, __mmask16 k) {
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

typedef struct amx_block {
  int nr;
  int64_t pmin, pmax; /* positions of the first and last row */
  int64_t pos[AR];
  uint16_t *Q; /* [AR][d] bf16 */
  float *O;    /* [AR][d] */
  float m[AR], l[AR];
} amx_block;

/* S[:, 16 j .. 16 (j + n)) = Q Kt for n = 2 or 4 16-key tiles (accumulators tiles 4 .. 3 + n),
 * with Q in tile 0 already when d = 32. */
AMX_INLINE void score_tiles(const uint16_t *Q, const uint32_t *Kt, int d, int j, int n, float *S) {
  const int nd = d / 32;
  _tile_zero(4);
  _tile_zero(5);
  if (n > 2) {
    _tile_zero(6);
    _tile_zero(7);
  }
  for (int c = 0; c < nd; c++) {
    const uint32_t *B = Kt + (size_t)16 * c * AK + 16 * j;
    if (nd > 1) _tile_loadd(0, Q + 32 * c, 2 * d);
    _tile_loadd(1, B, 4 * AK);
    _tile_dpbf16ps(4, 0, 1);
    _tile_loadd(2, B + 16, 4 * AK);
    _tile_dpbf16ps(5, 0, 2);
    if (n > 2) {
      _tile_loadd(3, B + 32, 4 * AK);
      _tile_dpbf16ps(6, 0, 3);
      _tile_loadd(1, B + 48, 4 * AK);
      _tile_dpbf16ps(7, 0, 1);
    }
  }
  _tile_stored(4, S + 16 * j, 4 * AK);
  _tile_stored(5, S + 16 * (j + 1), 4 * AK);
  if (n > 2) {
    _tile_stored(6, S + 16 * (j + 2), 4 * AK);
    _tile_stored(7, S + 16 * (j + 3), 4 * AK);
  }
}

/* Steps 1-3 of the header for one row block over the key block [first, first + nk) (padded kp). */
AMX_INLINE void amx_block_step(amx_block *rb, const uint32_t *Kt, const uint32_t *Vv, int d, int nk, int kp,
                               int64_t first, float qs, float *S, uint16_t *P, float *Ob) {
  const int nd = d / 32, nt = kp / 16;
  /* 1. S = Q Kt */
  if (nd == 1) _tile_loadd(0, rb->Q, 2 * d);
  for (int j = 0; j < nt; j += 4) score_tiles(rb->Q, Kt, d, j, nt - j >= 4 ? 4 : 2, S); /* nt is even */
  /* 2. the softmax, row by row */
  float corr[AR];
  const __m512 qv = _mm512_set1_ps(qs);
  for (int u = 0; u < AR; u++) {
    const float *s = S + (size_t)u * AK;
    uint16_t *p = P + (size_t)u * AK;
    int64_t t = rb->pos[u] - first + 1; /* keys [first, pos] are visible */
    const int nv = (int)(t < 0 ? 0 : t > nk ? nk : t);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int k = 0; k < nv; k += 16) {
      __mmask16 km = nv - k >= 16 ? 0xFFFF : (__mmask16)((1u << (nv - k)) - 1);
      mx = _mm512_mask_max_ps(mx, km, mx, _mm512_loadu_ps(s + k));
    }
    const float bm = _mm512_reduce_max_ps(mx) * qs, mold = rb->m[u], mnew = mold > bm ? mold : bm;
    /* mnew is finite: the first key block holds key 0, which every row sees */
    corr[u] = mold == mnew ? 1.0f : _mm512_cvtss_f32(exp2_masked(_mm512_set1_ps(mold - mnew), 1));
    const __m512 mv = _mm512_set1_ps(mnew);
    __m512 sum = _mm512_setzero_ps();
    for (int k = 0; k < kp; k += 32) {
      __mmask16 k0 = nv - k >= 16 ? 0xFFFF : nv - k <= 0 ? 0 : (__mmask16)((1u << (nv - k)) - 1);
      __mmask16 k1 = nv - k >= 32 ? 0xFFFF : nv - k <= 16 ? 0 : (__mmask16)((1u << (nv - k - 16)) - 1);
      __m512 p0 = exp2_masked(_mm512_fmsub_ps(_mm512_loadu_ps(s + k), qv, mv), k0);
      __m512 p1 = exp2_masked(_mm512_fmsub_ps(_mm512_loadu_ps(s + k + 16), qv, mv), k1);
      sum = _mm512_add_ps(sum, _mm512_add_ps(p0, p1));
      _mm512_storeu_si512(p + k, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
    }
    rb->l[u] = rb->l[u] * corr[u] + _mm512_reduce_add_ps(sum);
    rb->m[u] = mnew;
  }
  /* 3. Ob = P Vv, then O = O corr + Ob */
  for (int t0 = 0; t0 < d / 16; t0 += 4) {
    const int g = d / 16 - t0 < 4 ? d / 16 - t0 : 4;
    _tile_zero(4);
    _tile_zero(5);
    if (g > 2) _tile_zero(6);
    if (g > 3) _tile_zero(7);
    for (int kc = 0; kc < kp / 32; kc++) {
      const uint32_t *B = Vv + (size_t)16 * kc * d + 16 * t0;
      _tile_loadd(0, P + 32 * kc, 2 * AK);
      _tile_loadd(1, B, 4 * d);
      _tile_dpbf16ps(4, 0, 1);
      if (g > 1) {
        _tile_loadd(2, B + 16, 4 * d);
        _tile_dpbf16ps(5, 0, 2);
      }
      if (g > 2) {
        _tile_loadd(3, B + 32, 4 * d);
        _tile_dpbf16ps(6, 0, 3);
      }
      if (g > 3) {
        _tile_loadd(1, B + 48, 4 * d);
        _tile_dpbf16ps(7, 0, 1);
      }
    }
    _tile_stored(4, Ob + 16 * t0, 4 * d);
    if (g > 1) _tile_stored(5, Ob + 16 * (t0 + 1), 4 * d);
    if (g > 2) _tile_stored(6, Ob + 16 * (t0 + 2), 4 * d);
    if (g > 3) _tile_stored(7, Ob + 16 * (t0 + 3), 4 * d);
  }
  for (int u = 0; u < AR; u++) {
    const __m512 cv = _mm512_set1_ps(corr[u]);
    float *o = rb->O + (size_t)u * d;
    const float *ob = Ob + (size_t)u * d;
    for (int c = 0; c < d; c += 16)
      _mm512_storeu_ps(o + c, _mm512_fmadd_ps(_mm512_loadu_ps(o + c), cv, _mm512_loadu_ps(ob + c)));
  }
}

AMX_FN static void attn_tile_amx(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                                 int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs,
                                 float *scratch) {
  const int PT = kv->page_tokens, d = kv->d, rows = nh * nq, kb = PT < AK ? PT : AK, nb = (rows + AR - 1) / AR;
  const float qs = scale * 1.44269504088896341f; /* scores in base 2: e^s = 2^(s log2 e) */
  if (nb < 1 || nb > AMAX_BLOCKS) return;        /* nh * nq rows must be in [1, LH_ATTN_ROWS] */
  float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  uint32_t *Kt = (uint32_t *)base, *Vv = Kt + (size_t)d / 2 * AK;
  float *S = (float *)(Vv + (size_t)AK / 2 * d), *Ob = S + (size_t)AR * AK;
  uint16_t *P = (uint16_t *)(Ob + (size_t)AR * d), *Qall = P + (size_t)AR * AK;
  float *Oall = (float *)(Qall + (size_t)AMAX_BLOCKS * AR * d);
  amx_block blk[AMAX_BLOCKS];
  for (int b = 0; b < nb; b++) {
    amx_block *rb = &blk[b];
    const int f0 = b * AR;
    rb->nr = rows - f0 < AR ? rows - f0 : AR;
    rb->Q = Qall + (size_t)b * AR * d;
    rb->O = Oall + (size_t)b * AR * d;
    for (int u = 0; u < AR; u++) { /* rows past nr repeat the block's last row; never written back */
      const int f = f0 + (u < rb->nr ? u : rb->nr - 1), i = f / nh;
      const float *qi = q + i * ldq + (f % nh) * qhs;
      for (int e = 0; e < d; e += 32) _mm512_storeu_si512(rb->Q + (size_t)u * d + e, bf16x32(qi + e));
      memset(rb->O + (size_t)u * d, 0, (size_t)d * sizeof(float));
      rb->pos[u] = qpos + i;
      rb->m[u] = -INFINITY;
      rb->l[u] = 0.0f;
    }
    rb->pmin = qpos + f0 / nh;
    rb->pmax = qpos + (f0 + rb->nr - 1) / nh;
  }
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  int b_lo = 0; /* blocks before b_lo have seen all their keys: pmax grows with b */
  for (int64_t first = 0; first < qpos + nq;) {
    const int64_t k0 = first / PT * PT, page_end = k0 + PT;
    int64_t end = page_end < first + kb ? page_end : first + kb;
    if (end > qpos + nq) end = qpos + nq;
    const float *page = kv->pages[first / PT];
    const float *K = page + ((int64_t)g * PT + (first - k0)) * d, *V = page + ((int64_t)(kv->n_kv + g) * PT + (first - k0)) * d;
    while (blk[b_lo].pmax < first) b_lo++;
    const int nk_all = (int)(end - first);
    pack_keys(K, V, d, nk_all, (nk_all + 31) / 32 * 32, Kt, Vv);
    for (int b = b_lo; b < nb; b++) {
      amx_block *rb = &blk[b];
      const int nk = (int)((rb->pmax + 1 < end ? rb->pmax + 1 : end) - first);
      amx_block_step(rb, Kt, Vv, d, nk, (nk + 31) / 32 * 32, first, qs, S, P, Ob);
    }
    first = end;
  }
  _tile_release();
  for (int b = 0; b < nb; b++)
    for (int u = 0; u < blk[b].nr; u++) {
      const int f = b * AR + u;
      float *oi = o + (f / nh) * ldo + (f % nh) * ohs;
      const float *ob = blk[b].O + (size_t)u * d;
      for (int c = 0; c < d; c++) oi[c] = ob[c] / blk[b].l[u];
    }
}
#else
int lh_attn_amx(void) { return 0; }
#endif

void lh_attn_tile_amx(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                      int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch) {
#if LH_ATTN_AMX
  if (kv->d % 32 == 0 && kv->d <= 256 && lh_attn_amx()) {
    attn_tile_amx(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
    return;
  }
#endif
  lh_attn_tile(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
}
