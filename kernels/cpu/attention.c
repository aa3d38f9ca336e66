/* attention.c — causal softmax attention of a tile of queries over paged K/V, online softmax.
 *
 * A tile of nq <= 64 queries of one head walks the pages holding positions [0, last query]: for
 * each page, S = scale * Q K^T (one GEMM), the causal mask, a running row max m, running sum l
 * and accumulator O rescaled by exp(m_old - m_new), then O += P V (one GEMM); at the end O / l.
 * Memory is one nq x page_tokens score block and the nq x d accumulator whatever the context
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
  int64_t PT = kv->page_tokens;
  size_t row = (size_t)kv->d * sizeof(float);
  for (int64_t r = 0; r < n; r++) {
    int64_t p = pos + r;
    float *page = (float *)kv->pages[p / PT];
    int64_t pr = p % PT;
    for (int g = 0; g < kv->n_kv; g++) {
      memcpy(page + ((int64_t)g * PT + pr) * kv->d, k + r * ldk + (int64_t)g * kv->d, row);
      memcpy(page + ((int64_t)(kv->n_kv + g) * PT + pr) * kv->d, v + r * ldv + (int64_t)g * kv->d, row);
    }
  }
}

size_t lh_attn_scratch(int d, int page_tokens) {
  return (size_t)LH_ATTN_QTILE * page_tokens + (size_t)LH_ATTN_QTILE * d + 2 * LH_ATTN_QTILE;
}

void lh_attn_tile(const lh_kv_pages *kv, int g, int64_t qpos, int nq, const float *q, int64_t ldq, float scale,
                  float *o, int64_t ldo, float *scratch) {
  const int PT = kv->page_tokens, d = kv->d;
  float *Sc = scratch, *acc = Sc + (size_t)LH_ATTN_QTILE * PT, *m = acc + (size_t)LH_ATTN_QTILE * d,
        *l = m + LH_ATTN_QTILE;
  int64_t last = qpos + nq - 1;
  for (int i = 0; i < nq; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
  }
  memset(acc, 0, (size_t)nq * d * sizeof(float));
  for (int64_t pg = 0; pg <= last / PT; pg++) {
    int64_t k0 = pg * PT;
    int kn = (int)(last + 1 - k0 < PT ? last + 1 - k0 : PT);
    const float *K = (const float *)kv->pages[pg] + (int64_t)g * PT * d;
    const float *V = (const float *)kv->pages[pg] + (int64_t)(kv->n_kv + g) * PT * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, kn, d, scale, q, (int)ldq, K, d, 0.0f, Sc, kn);
    for (int i = 0; i < nq; i++) {
      float *s = Sc + (size_t)i * kn;
      int64_t valid = qpos + i - k0 + 1; /* keys k0 .. qpos+i */
      if (valid > kn) valid = kn;
      if (valid <= 0) {
        memset(s, 0, (size_t)kn * sizeof(float));
        continue;
      }
      float mx = s[0];
      for (int64_t j = 1; j < valid; j++) mx = s[j] > mx ? s[j] : mx;
      float mnew = m[i] > mx ? m[i] : mx;
      float corr = m[i] == -INFINITY ? 0.0f : lh_fast_expf(m[i] - mnew);
      for (int64_t j = 0; j < valid; j++) s[j] = lh_fast_expf(s[j] - mnew);
      for (int64_t j = valid; j < kn; j++) s[j] = 0.0f;
      float sum = 0.0f;
      for (int64_t j = 0; j < valid; j++) sum += s[j];
      l[i] = l[i] * corr + sum;
      m[i] = mnew;
      if (corr != 1.0f) {
        float *a = acc + (size_t)i * d;
        for (int c = 0; c < d; c++) a[c] *= corr;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, d, kn, 1.0f, Sc, kn, V, d, 1.0f, acc, d);
  }
  for (int i = 0; i < nq; i++) {
    for (int c = 0; c < d; c++) o[i * ldo + c] = acc[(size_t)i * d + c] / l[i];
  }
}
