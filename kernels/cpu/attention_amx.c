/* attention_amx.c — the bf16 attention's products on Intel AMX tiles (TDPBF16PS).
 *
 * One of the two units of the CPU's bf16 softmax attention (attention_bf16.c has the definition,
 * the tile loop, the packing of K and V and the softmax; this file the step of a row block over a
 * key block, with S = Q K^T and P V on the tile unit: bf16 inputs, fp32 accumulation).
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
 * Per (row block, key block), the row block's 16 rows being one tile's rows (Q as the A operand,
 * Kt and Vv as the "VNNI" B operands: AMX's B rows are pairs of the inner dimension):
 *   1. S[16][keys] fp32 = Q Kt, four 16-key tiles in flight, stored to scratch;
 *   2. per row, the max over its visible keys, then softmax_row (attention_bf16.h);
 *   3. Ob[16][d] = P Vv from zero (up to four 16-column tiles at a time), then O = O corr + Ob.
 * Each output of a tile sums its 32 pair products (d = 32: 16 pairs per 32 keys) inside the
 * instruction, in the unit's order: the bits differ from the VDPBF16PS path's chains.
 *
 * AMX needs the kernel's permission (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, Linux 5.16+),
 * asked once per process by lh_attn_amx(); each call loads the tile configuration and releases
 * the tiles at the end, so it is safe from any thread.
 */
#define _GNU_SOURCE /* syscall() */
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/attention_bf16.h"

#if LH_ATTN_BF16_X86 && defined(__linux__) && !defined(LH_NO_AMX) &&                                          \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define LH_ATTN_AMX 1
#else
#define LH_ATTN_AMX 0
#endif

#if LH_ATTN_AMX
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_FN __attribute__((target("amx-tile,amx-bf16," BF16_ISA)))
#define AMX_INLINE static inline __attribute__((always_inline, target("amx-tile,amx-bf16," BF16_ISA)))

static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return;
  int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
  if (!tile || !bf16 || !lh_attn_avx512bf16()) return;
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

/* Steps 1-3 of the header for one row block over the key block [first, first + nk) (padded kp):
 * attention_bf16.h's bf16_step. */
AMX_FN static void amx_step(bf16_rows *rb, const uint32_t *Kt, const uint32_t *Vv, int d, int nk, int kp,
                            int64_t first, float qs, const bf16_work *w) {
  const int nd = d / 32, nt = kp / 16;
  float *S = w->S, *Ob = w->Ob;
  uint16_t *P = w->P;
  bf16_prefetch(w, 0, w->pf_lines);
  /* 1. S = Q Kt */
  if (nd == 1) _tile_loadd(0, rb->Q, 2 * d);
  for (int j = 0; j < nt; j += 4) score_tiles(rb->Q, Kt, d, j, nt - j >= 4 ? 4 : 2, S); /* nt is even */
  /* 2. the softmax, row by row */
  float corr[AR];
  for (int u = 0; u < AR; u++) {
    const float *s = S + (size_t)u * AK;
    const int nv = visible_keys(rb->pos[u], first, nk);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int k = 0; k < nv; k += 16) mx = _mm512_mask_max_ps(mx, lanes_below(nv - k), mx, _mm512_loadu_ps(s + k));
    corr[u] = softmax_row(s, P + (size_t)u * AK, nv, kp, _mm512_reduce_max_ps(mx), qs, &rb->m[u], &rb->l[u]);
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

/* The tile loop with the tiles configured for this thread, then released. */
AMX_FN static void attn_tile_amx(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q,
                                 int64_t ldq, int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs,
                                 float *scratch) {
  tile_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  lh_attn_bf16_tile(kv, g, nh, qpos, nq, q, ldq, qhs, scale, o, ldo, ohs, scratch, amx_step);
  _tile_release();
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
