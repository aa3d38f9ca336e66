/* moe.c — mixture-of-experts routing, grouping and combining (the expert GEMMs are lh_gemm_nt).
 *
 * HF's MiniMaxTopKRouter: p = softmax(router logits) in fp32, the top_k largest p, divided by
 * their sum. Ties (equal p) go to the lower expert index, a rule torch.topk does not promise but
 * which makes the choice a function of the numbers alone. The grouping puts every (token, choice)
 * pair of one expert in consecutive rows (tokens ascending), so an expert's work is one GEMM per
 * weight; the combine adds each token's weighted expert outputs in ascending expert order, the
 * order of HF's index_add_ loop, so that the sum's rounding is fixed too.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/fastmath.h"
#include "kernels/cpu/ops.h"

void lh_moe_route(const float *logits, int64_t n, int E, int top_k, int32_t *idx, float *w) {
  for (int64_t t = 0; t < n; t++) {
    const float *z = logits + t * E;
    float p[1024]; /* E <= 1024: checked by the backend */
    float mx = z[0];
    for (int e = 1; e < E; e++) mx = z[e] > mx ? z[e] : mx;
    double sum = 0;
    for (int e = 0; e < E; e++) sum += exp((double)z[e] - (double)mx);
    for (int e = 0; e < E; e++) p[e] = (float)(exp((double)z[e] - (double)mx) / sum);
    int32_t chosen[1024];
    float total = 0.0f;
    for (int c = 0; c < top_k; c++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int u = 0; u < c; u++) taken |= chosen[u] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      chosen[c] = best;
      total += p[best]; /* summed in descending order of p, as torch sums topk's values */
    }
    /* ascending expert order for the output (insertion sort: top_k is small) */
    for (int c = 1; c < top_k; c++)
      for (int u = c; u > 0 && chosen[u - 1] > chosen[u]; u--) {
        int32_t tmp = chosen[u];
        chosen[u] = chosen[u - 1];
        chosen[u - 1] = tmp;
      }
    for (int c = 0; c < top_k; c++) {
      idx[t * top_k + c] = chosen[c];
      w[t * top_k + c] = p[chosen[c]] / total;
    }
  }
}

void lh_moe_plan_build(const int32_t *idx, int64_t n, int E, int top_k, lh_moe_plan *plan) {
  int64_t *off = plan->offset;
  memset(off, 0, (size_t)(E + 1) * sizeof *off);
  for (int64_t i = 0; i < n * top_k; i++) off[idx[i] + 1]++;
  for (int e = 0; e < E; e++) off[e + 1] += off[e];
  /* off[e] serves as expert e's cursor, then the array is shifted back into place */
  for (int64_t t = 0; t < n; t++)
    for (int c = 0; c < top_k; c++) {
      int e = idx[t * top_k + c];
      int64_t r = off[e]++;
      plan->token[r] = t;
      plan->row[t * top_k + c] = r;
    }
  for (int e = E; e > 0; e--) off[e] = off[e - 1];
  off[0] = 0;
}

typedef struct combine_job {
  const lh_moe_plan *plan;
  const float *y, *w;
  int64_t n, dim;
  int top_k;
  float *out;
} combine_job;

LH_SIMD_CLONES static void combine_task(void *ctx, int64_t task, int worker) {
  (void)worker;
  const combine_job *j = ctx;
  int64_t t0 = task * 16, t1 = t0 + 16 < j->n ? t0 + 16 : j->n;
  for (int64_t t = t0; t < t1; t++) {
    float *o = j->out + t * j->dim;
    for (int64_t i = 0; i < j->dim; i++) o[i] = 0.0f;
    for (int c = 0; c < j->top_k; c++) {
      const float *y = j->y + j->plan->row[t * j->top_k + c] * j->dim;
      float wt = j->w[t * j->top_k + c];
      for (int64_t i = 0; i < j->dim; i++) o[i] = o[i] + y[i] * wt;
    }
  }
}

void lh_moe_combine(lh_pool *pool, const lh_moe_plan *plan, const float *y, const float *w, int64_t n, int top_k,
                    int64_t dim, float *out) {
  combine_job j = {plan, y, w, n, dim, top_k, out};
  lh_pool_run(pool, (n + 15) / 16, combine_task, &j);
}

typedef struct gather_job {
  const float *src;
  int64_t ld, r0, r1, dim;
  const int64_t *token;
  float *dst;
} gather_job;

static void gather_task(void *ctx, int64_t task, int worker) {
  (void)worker;
  const gather_job *j = ctx;
  int64_t a = j->r0 + task * 64, b = a + 64 < j->r1 ? a + 64 : j->r1;
  for (int64_t r = a; r < b; r++)
    memcpy(j->dst + (r - j->r0) * j->dim, j->src + j->token[r] * j->ld, (size_t)j->dim * sizeof(float));
}

void lh_gather_rows(lh_pool *pool, const float *src, int64_t ld, const int64_t *token, int64_t r0, int64_t r1,
                    int64_t dim, float *dst) {
  gather_job j = {src, ld, r0, r1, dim, token, dst};
  lh_pool_run(pool, (r1 - r0 + 63) / 64, gather_task, &j);
}
