/* ref.c — the parity program's reference math (see ref.h). Straight from the definitions: the
 * lightning layer as its token recurrence (not the blocked form the GPU uses), attention with an
 * explicit two-pass softmax, MoE by looping over (row, slot) pairs. fp64 where the sums are long.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tests/gpu/ref.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/half.h"

typedef struct par_job {
  int64_t n, next;
  pthread_mutex_t mu;
  void (*fn)(int64_t, void *);
  void *ctx;
} par_job;

static void *par_worker(void *arg) {
  par_job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    int64_t i = j->next++;
    pthread_mutex_unlock(&j->mu);
    if (i >= j->n) return NULL;
    j->fn(i, j->ctx);
  }
}

void ref_par_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx) {
  long nt = sysconf(_SC_NPROCESSORS_ONLN);
  if (nt < 1) nt = 1;
  if (nt > 64) nt = 64;
  if (nt > n) nt = (long)n;
  par_job j = {.n = n, .next = 0, .fn = fn, .ctx = ctx};
  pthread_mutex_init(&j.mu, NULL);
  pthread_t th[64];
  for (long t = 1; t < nt; t++) pthread_create(&th[t], NULL, par_worker, &j);
  par_worker(&j);
  for (long t = 1; t < nt; t++) pthread_join(th[t], NULL);
  pthread_mutex_destroy(&j.mu);
}

typedef struct cvt_ctx {
  const uint16_t *src;
  float *dst;
  int64_t n, chunk;
} cvt_ctx;

static void cvt_part(int64_t i, void *p) {
  cvt_ctx *c = p;
  int64_t a = i * c->chunk, b = a + c->chunk < c->n ? a + c->chunk : c->n;
  for (int64_t k = a; k < b; k++) c->dst[k] = lh_bf16_to_f32(c->src[k]);
}

void ref_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
  cvt_ctx c = {src, dst, n, 1 << 20};
  ref_par_for((n + c.chunk - 1) / c.chunk, cvt_part, &c);
}

void ref_round_bf16(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) x[i] = lh_bf16_to_f32(lh_f32_to_bf16(x[i]));
}

void ref_linear(const float *x, int64_t n, int in, const uint16_t *W, int out, float *y) {
  float *wf = malloc((size_t)out * in * sizeof(float));
  ref_bf16_to_f32(W, wf, (int64_t)out * in);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, out, in, 1.0f, x, in, wf, in, 0.0f, y, out);
  free(wf);
}

void ref_rmsnorm(const float *x, int64_t n, int width, const float *w, float eps, float *y) {
  for (int64_t r = 0; r < n; r++) {
    double ss = 0;
    for (int i = 0; i < width; i++) ss += (double)x[r * width + i] * x[r * width + i];
    double sc = 1.0 / sqrt(ss / width + eps);
    for (int i = 0; i < width; i++) y[r * width + i] = (float)(x[r * width + i] * sc * w[i]);
  }
}

static double silu(double x) { return x / (1.0 + exp(-x)); }

typedef struct light_ctx {
  const float *qkv;
  int64_t stride, n;
  int H, d;
  const float *slope;
  float *state, *o;
} light_ctx;

static void light_head(int64_t h, void *p) {
  light_ctx *c = p;
  const int d = c->d;
  double *S = malloc((size_t)d * d * sizeof(double)), *q = malloc(3 * d * sizeof(double));
  float *st = c->state + h * d * d;
  for (int i = 0; i < d * d; i++) S[i] = st[i];
  const double dec = exp(-(double)c->slope[h]);
  for (int64_t t = 0; t < c->n; t++) {
    const float *row = c->qkv + t * c->stride + h * 3 * d;
    for (int i = 0; i < 3 * d; i++) q[i] = silu(row[i]);
    const double *k = q + d, *v = q + 2 * d;
    for (int i = 0; i < d; i++)
      for (int j = 0; j < d; j++) S[i * d + j] = dec * S[i * d + j] + k[i] * v[j];
    for (int j = 0; j < d; j++) {
      double a = 0;
      for (int i = 0; i < d; i++) a += q[i] * S[i * d + j];
      c->o[t * c->H * d + h * d + j] = (float)a;
    }
  }
  for (int i = 0; i < d * d; i++) st[i] = (float)S[i];
  free(S);
  free(q);
}

void ref_lightning_core(const float *qkv, int64_t stride, int64_t n, int H, int d, const float *slope, float *state,
                        float *o) {
  light_ctx c = {qkv, stride, n, H, d, slope, state, o};
  ref_par_for(H, light_head, &c);
}

void ref_rope(float *x, int heads, int d, int rd, double theta, int64_t pos) {
  const int rh = rd / 2;
  for (int h = 0; h < heads; h++) {
    float *v = x + (int64_t)h * d;
    for (int j = 0; j < rh; j++) {
      /* HF's rounding: inv_freq in fp32 from an fp32 exponent, the angle an fp32 product */
      float inv = 1.0f / (float)pow(theta, (double)((float)(2 * j) / (float)rd));
      double a = (double)((float)pos * inv);
      double c = cos(a), s = sin(a), x1 = v[j], x2 = v[j + rh];
      v[j] = (float)(x1 * c - x2 * s);
      v[j + rh] = (float)(x2 * c + x1 * s);
    }
  }
}

typedef struct attn_ctx {
  const float *q, *K, *V;
  int64_t pos, n;
  int H, Hkv, d;
  float *o;
} attn_ctx;

static void attn_item(int64_t it, void *p) {
  attn_ctx *c = p;
  const int64_t i = it / c->H;
  const int h = (int)(it % c->H), g = h / (c->H / c->Hkv), d = c->d;
  const int64_t nk = c->pos + i + 1;
  const float *qv = c->q + (i * c->H + h) * d;
  double *s = malloc((size_t)nk * sizeof(double)), mx = -INFINITY, sum = 0;
  const double scale = 1.0 / sqrt((double)d);
  for (int64_t k = 0; k < nk; k++) {
    const float *kv = c->K + (k * c->Hkv + g) * d;
    double a = 0;
    for (int j = 0; j < d; j++) a += (double)qv[j] * kv[j];
    s[k] = a * scale;
    if (s[k] > mx) mx = s[k];
  }
  for (int64_t k = 0; k < nk; k++) sum += (s[k] = exp(s[k] - mx));
  for (int j = 0; j < d; j++) {
    double a = 0;
    for (int64_t k = 0; k < nk; k++) a += s[k] * c->V[(k * c->Hkv + g) * d + j];
    c->o[(i * c->H + h) * d + j] = (float)(a / sum);
  }
  free(s);
}

void ref_attention(const float *q, const float *K, const float *V, int64_t pos, int64_t n, int H, int Hkv, int d,
                   float *o) {
  attn_ctx c = {q, K, V, pos, n, H, Hkv, d, o};
  ref_par_for(n * H, attn_item, &c);
}

void ref_moe(const float *x, int64_t n, int hidden, int E, int K, int inter, const uint16_t *router,
             const uint16_t *const *W1, const uint16_t *const *W3, const uint16_t *const *W2, float *out,
             int32_t *ids_out, float *margin) {
  float *lg = malloc((size_t)n * E * sizeof(float));
  ref_linear(x, n, hidden, router, E, lg);
  int32_t *ids = malloc((size_t)n * K * sizeof(int32_t));
  float *wt = malloc((size_t)n * K * sizeof(float));
  for (int64_t r = 0; r < n; r++) {
    float *p = lg + r * E, mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) sum += (p[e] = expf(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    float tot = 0;
    for (int k = 0; k < K; k++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int used = 0;
        for (int q = 0; q < k; q++) used |= ids[r * K + q] == e;
        if (!used && (best < 0 || p[e] > p[best])) best = e;
      }
      ids[r * K + k] = best;
      wt[r * K + k] = p[best];
      tot += p[best];
    }
    for (int k = 0; k < K; k++) wt[r * K + k] /= tot;
    if (margin) {
      float best_out = -INFINITY;
      for (int e = 0; e < E; e++) {
        int used = 0;
        for (int q = 0; q < K; q++) used |= ids[r * K + q] == e;
        if (!used && p[e] > best_out) best_out = p[e];
      }
      margin[r] = E > K ? p[ids[r * K + K - 1]] - best_out : INFINITY;
    }
  }
  memset(out, 0, (size_t)n * hidden * sizeof(float));
  float *xs = malloc((size_t)n * hidden * sizeof(float)), *g = malloc((size_t)n * inter * sizeof(float));
  float *u = malloc((size_t)n * inter * sizeof(float)), *y = malloc((size_t)n * hidden * sizeof(float));
  int64_t *who = malloc((size_t)n * K * sizeof(int64_t));
  for (int e = 0; e < E; e++) {
    int64_t m = 0;
    for (int64_t q = 0; q < n * K; q++)
      if (ids[q] == e) who[m++] = q;
    if (!m) continue;
    for (int64_t i = 0; i < m; i++) memcpy(xs + i * hidden, x + (who[i] / K) * hidden, hidden * sizeof(float));
    ref_linear(xs, m, hidden, W1[e], inter, g);
    ref_linear(xs, m, hidden, W3[e], inter, u);
    for (int64_t i = 0; i < m * inter; i++) g[i] = (float)(silu(g[i]) * u[i]);
    ref_linear(g, m, inter, W2[e], hidden, y);
    for (int64_t i = 0; i < m; i++) {
      int64_t q = who[i];
      float w = wt[q];
      for (int c = 0; c < hidden; c++) out[(q / K) * hidden + c] += w * y[i * hidden + c];
    }
  }
  if (ids_out) memcpy(ids_out, ids, (size_t)n * K * sizeof(int32_t));
  free(lg), free(ids), free(wt), free(xs), free(g), free(u), free(y), free(who);
}
