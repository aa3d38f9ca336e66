/* attention_bf16.c — the CPU's bf16 softmax attention: its definition, its tile loop, and the choice
 * of the unit that does its products.
 *
 * The same function as attention.c (causal softmax attention of a tile of queries over paged K/V,
 * online softmax over softmax blocks of up to 256 keys cut from each page's start), with the two
 * products in bf16 the way the CUDA backend does them on tensor cores: Q, K and V are rounded to
 * bf16 (round to nearest even) for the products, P = 2^(S scale log2(e) - m) is rounded to bf16
 * for P V, and the scores, the max, the sums l and the output accumulator stay fp32. That is about
 * 3 significant digits in the products, like a GPU run, against attention.c's ~7: it is a separate
 * mode (the CPU backend's "bf16" attention, engine.h's lh_model_params.cpu_attention), never a
 * silent substitute for the fp32 reference.
 *
 * Two units do the products (lh_attn_bf16_kind picks, once per process):
 *   - Intel AMX tiles, TDPBF16PS (attention_amx.c), where the CPU has AMX-BF16 and the kernel grants
 *     the tile state;
 *   - else AVX512-BF16's VDPBF16PS on zmm registers (attention_avx512bf16.c: AMD Zen 4 and later,
 *     Intel Cooper Lake);
 *   - else none: lh_attn_tile_bf16 is lh_attn_tile (fp32), and engine/model.c refuses the mode.
 * Both sum their pair products in different orders (a 32-pair tile row against a chain of pairs),
 * so their bits differ from each other (within bf16's precision); each is deterministic in itself.
 *
 * The tile loop (lh_attn_bf16_tile), per tile: the rows are the fused path's (row f is query f / nh
 * of head f % nh) in row blocks of AR = 16 (attention_bf16.h: bf16_rows), each keeping Q as bf16
 * [16][d], its output accumulator O [16][d], m and l. Key blocks outside, row blocks inside: per key
 * block, once per tile, K and V are packed to Kt and Vv (pack_keys; the layouts are in
 * attention_bf16.h), then every row block that sees the block takes one step of the path:
 *   1. S = Q K^T for its rows over the block's keys (the path's products);
 *   2. per row, softmax_row: the max over its visible keys, m, corr, P in bf16, l;
 *   3. O = O corr + P V (the path's products).
 * At the end O / l. A row's bits depend on its query, its position and the K/V only, on either
 * path: the products of a row do not involve the other rows, padded and masked keys add exact
 * zeros, the blocks are fixed by position; tests/engine/test_engine_kernels.c checks that bit for
 * bit and bounds the result against a double reference at bf16's precision.
 */
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/attention_bf16.h"

/* Floats of scratch: Kt and Vv of a key block, S, P and Ob of a step, Q and O of every row block,
 * and 64-byte alignment. */
size_t lh_attn_bf16_scratch(int d) {
  size_t kt = (size_t)d / 2 * AK, vv = (size_t)AK / 2 * d, s = (size_t)AR * AK, p = (size_t)AR * AK / 2,
         ob = (size_t)AR * d, q = (size_t)AMAX_BLOCKS * AR * d / 2, o = (size_t)AMAX_BLOCKS * AR * d;
  return kt + vv + s + p + ob + q + o + 16;
}

#if LH_ATTN_BF16_X86
/* Transpose a 16 x 16 matrix of 32-bit elements held as 16 rows of one vector each. */
BF16_INLINE void transpose16(__m512i r[16]) {
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

/* Kt and Vv of a key block of nk keys (K, V: rows of d floats), zero up to kp keys. */
BF16_INLINE void pack_keys(const float *K, const float *V, int d, int nk, int kp, uint32_t *Kt, uint32_t *Vv) {
  const __m512i zero = _mm512_setzero_si512();
  for (int cg = 0; cg < kp; cg += 16)        /* 16 keys */
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

BF16_FN void lh_attn_bf16_tile(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                               int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs,
                               float *scratch, bf16_step step) {
  const int PT = kv->page_tokens, d = kv->d, rows = nh * nq, kb = PT < AK ? PT : AK, nb = (rows + AR - 1) / AR;
  const float qs = scale * 1.44269504088896341f; /* scores in base 2: e^s = 2^(s log2 e) */
  if (nb < 1 || nb > AMAX_BLOCKS) return;        /* nh * nq rows must be in [1, LH_ATTN_ROWS] */
  float *base = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
  uint32_t *Kt = (uint32_t *)base, *Vv = Kt + (size_t)d / 2 * AK;
  bf16_work w;
  w.S = (float *)(Vv + (size_t)AK / 2 * d);
  w.Ob = w.S + (size_t)AR * AK;
  w.P = (uint16_t *)(w.Ob + (size_t)AR * d);
  uint16_t *Qall = w.P + (size_t)AR * AK;
  float *Oall = (float *)(Qall + (size_t)AMAX_BLOCKS * AR * d);
  bf16_rows blk[AMAX_BLOCKS];
  for (int b = 0; b < nb; b++) {
    bf16_rows *rb = &blk[b];
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
  int b_lo = 0; /* blocks before b_lo have seen all their keys: pmax grows with b */
  for (int64_t first = 0; first < qpos + nq;) {
    const float *K, *V, *Kn, *Vn;
    int64_t end = lh_attn_key_block(kv, g, first, kb, &K, &V), next_end = 0; /* this key block: [first, end) */
    if (end > qpos + nq) end = qpos + nq;
    Kn = K, Vn = V;
    if (end < qpos + nq) next_end = lh_attn_key_block(kv, g, end, kb, &Kn, &Vn);
    if (next_end > qpos + nq) next_end = qpos + nq;
    while (blk[b_lo].pmax < first) b_lo++;
    const int nk_all = (int)(end - first);
    pack_keys(K, V, d, nk_all, (nk_all + 31) / 32 * 32, Kt, Vv);
    /* the next block's K and V into L2 meanwhile, each step taking a share (bf16_work) */
    const int pf_all = (int)(((next_end > end ? next_end - end : 0) * d * (int64_t)sizeof(float) + 63) / 64);
    int pf_at = 0;
    for (int b = b_lo; b < nb; b++) {
      bf16_rows *rb = &blk[b];
      const int nk = (int)((rb->pmax + 1 < end ? rb->pmax + 1 : end) - first);
      const int to = pf_all * (b - b_lo + 1) / (nb - b_lo);
      w.pf_k = (const char *)Kn + 64 * (size_t)pf_at, w.pf_v = (const char *)Vn + 64 * (size_t)pf_at;
      w.pf_lines = to - pf_at;
      step(rb, Kt, Vv, d, nk, (nk + 31) / 32 * 32, first, qs, &w);
      pf_at = to;
    }
    first = end;
  }
  for (int b = 0; b < nb; b++)
    for (int u = 0; u < blk[b].nr; u++) {
      const int f = b * AR + u;
      float *oi = o + (f / nh) * ldo + (f % nh) * ohs;
      const float *ob = blk[b].O + (size_t)u * d;
      for (int c = 0; c < d; c++) oi[c] = ob[c] / blk[b].l[u];
    }
}
#endif

static int bf16_kind;
static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;

static void bf16_probe(void) {
  bf16_kind = lh_attn_amx() ? LH_ATTN_BF16_AMX : lh_attn_avx512bf16() ? LH_ATTN_BF16_AVX512 : LH_ATTN_BF16_NONE;
}

int lh_attn_bf16_kind(int d) {
  pthread_once(&bf16_once, bf16_probe);
  return d > 0 && d % 32 == 0 && d <= 256 ? bf16_kind : LH_ATTN_BF16_NONE;
}

const char *lh_attn_bf16_unit(int kind) {
  return kind == LH_ATTN_BF16_AMX      ? "AMX tiles"
         : kind == LH_ATTN_BF16_AVX512 ? "AVX512-BF16"
                                       : "none (fp32)";
}

void lh_attn_tile_bf16(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                       int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch) {
  switch (lh_attn_bf16_kind(kv->d)) {
  case LH_ATTN_BF16_AMX: lh_attn_tile_amx(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch); break;
  case LH_ATTN_BF16_AVX512:
    lh_attn_tile_avx512bf16(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
    break;
  default: lh_attn_tile(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch);
  }
}
