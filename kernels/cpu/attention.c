/* attention.c — causal softmax attention of a tile of queries over paged K/V, online softmax.
 *
 * A tile (nq queries of each query head of one GQA group, stacked as rows, so each K/V page is
 * read and packed once for the group) walks the pages holding positions [0, last query]: for each
 * page, S = scale * Q K^T (one GEMM), the causal mask, a running row max m, running sum l and
 * accumulator O rescaled by exp(m_old - m_new), then O += P V (one GEMM); at the end O / l.
 * Memory is one rows x page_tokens score block and the rows x d accumulator whatever the context
 * length: there is never an n x N matrix. The first page always holds key 0, which every query
 * sees, so m is finite after it and rows of later pages that are fully masked contribute exactly
 * zero (their scores are set to 0 after the exp, and their correction factor is 1).
 */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/ops.h"

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

size_t lh_attn_scratch(int d, int page_tokens) {
  return (size_t)LH_ATTN_ROWS * page_tokens + 2 * (size_t)LH_ATTN_ROWS * d + 2 * LH_ATTN_ROWS;
}

LH_SIMD_CLONES void lh_attn_tile(const lh_kv_pages *kv, int g, int nh, int64_t qpos, int nq, const float *q, int64_t ldq,
                  int64_t qhs, float scale, float *o, int64_t ldo, int64_t ohs, float *scratch) {
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
