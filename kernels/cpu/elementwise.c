/* elementwise.c — row-wise kernels: RMSNorm, SiLU, sigmoid, SwiGLU, products, the residual,
 * the vectorisable exp, argmax.
 *
 * Each works on rows independently, so the row grouping into tasks (fixed, 16-row groups or
 * one group for small inputs) cannot change any bit. Reductions (RMSNorm's mean of squares) are
 * sequential double loops: more accurate than HF's fp32 mean and independent of alignment.
 */
#include <math.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/ops.h"

/* Row groups: 16 rows, or everything at once when the whole job is small. */
static int64_t row_tasks(int64_t n, int64_t dim, int64_t *grain) {
  *grain = (n * dim < 32768) ? n : 16;
  if (*grain < 1) *grain = 1;
  return (n + *grain - 1) / *grain;
}

typedef struct rows_job {
  const float *x, *a, *w;
  float *y;
  int64_t ldx, lda, ldy, n, dim, grain;
  double eps;
  float alpha, beta;
} rows_job;

#define ROWS_BEGIN(j, t)                                        \
  int64_t r0 = (t) * (j)->grain, r1 = r0 + (j)->grain;          \
  if (r1 > (j)->n) r1 = (j)->n;

LH_SIMD_CLONES static void rmsnorm_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    const float *x = j->x + r * j->ldx;
    float *y = j->y + r * j->ldy;
    double ss = 0;
    for (int64_t i = 0; i < j->dim; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / (double)j->dim + j->eps));
    for (int64_t i = 0; i < j->dim; i++) y[i] = j->w[i] * (x[i] * inv);
  }
}

void lh_rmsnorm(lh_pool *pool, const float *x, int64_t ldx, int64_t n, int64_t dim, const float *w, double eps,
                float *y, int64_t ldy) {
  rows_job j = {.x = x, .w = w, .y = y, .ldx = ldx, .ldy = ldy, .n = n, .dim = dim, .eps = eps};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), rmsnorm_task, &j);
}

LH_SIMD_CLONES static void silu_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    float *x = j->y + r * j->ldy;
    for (int64_t i = 0; i < j->dim; i++) x[i] = x[i] / (1.0f + lh_fast_expf(-x[i]));
  }
}

LH_SIMD_CLONES static void sigmoid_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    float *x = j->y + r * j->ldy;
    for (int64_t i = 0; i < j->dim; i++) x[i] = 1.0f / (1.0f + lh_fast_expf(-x[i]));
  }
}

void lh_silu(lh_pool *pool, float *x, int64_t ld, int64_t n, int64_t dim) {
  rows_job j = {.y = x, .ldy = ld, .n = n, .dim = dim};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), silu_task, &j);
}

void lh_sigmoid(lh_pool *pool, float *x, int64_t ld, int64_t n, int64_t dim) {
  rows_job j = {.y = x, .ldy = ld, .n = n, .dim = dim};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), sigmoid_task, &j);
}

LH_SIMD_CLONES static void swiglu_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    const float *g = j->x + r * j->dim, *u = j->a + r * j->dim;
    float *y = j->y + r * j->dim;
    for (int64_t i = 0; i < j->dim; i++) y[i] = g[i] / (1.0f + lh_fast_expf(-g[i])) * u[i];
  }
}

void lh_swiglu(lh_pool *pool, const float *g, const float *u, int64_t n, int64_t dim, float *y) {
  rows_job j = {.x = g, .a = u, .y = y, .n = n, .dim = dim};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), swiglu_task, &j);
}

LH_SIMD_CLONES static void mul_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    float *x = j->y + r * j->ldy;
    const float *g = j->x + r * j->ldx;
    for (int64_t i = 0; i < j->dim; i++) x[i] *= g[i];
  }
}

void lh_mul(lh_pool *pool, float *x, int64_t ldx, const float *g, int64_t ldg, int64_t n, int64_t dim) {
  rows_job j = {.y = x, .ldy = ldx, .x = g, .ldx = ldg, .n = n, .dim = dim};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), mul_task, &j);
}

LH_SIMD_CLONES static void axpby_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rows_job *j = ctx;
  ROWS_BEGIN(j, t)
  for (int64_t r = r0; r < r1; r++) {
    const float *h = j->x + r * j->dim, *a = j->a + r * j->dim;
    float *x = j->y + r * j->dim;
    for (int64_t i = 0; i < j->dim; i++) x[i] = h[i] * j->alpha + a[i] * j->beta;
  }
}

void lh_axpby(lh_pool *pool, const float *h, const float *a, float alpha, float beta, int64_t n, int64_t dim,
              float *x) {
  rows_job j = {.x = h, .a = a, .y = x, .n = n, .dim = dim, .alpha = alpha, .beta = beta};
  lh_pool_run(pool, row_tasks(n, dim, &j.grain), axpby_task, &j);
}

LH_SIMD_CLONES void lh_exp_fast(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = lh_fast_expf(x[i]);
}

int64_t lh_argmax(const float *x, int64_t n) {
  int64_t best = -1;
  for (int64_t i = 0; i < n; i++)
    if (x[i] == x[i] && (best < 0 || x[i] > x[best])) best = i;
  return best < 0 ? 0 : best;
}
