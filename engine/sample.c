/* sample.c — choosing the next token from logits: greedy, or temperature / top-k / top-p with a
 * portable seeded generator.
 *
 * Portability: the generator is splitmix64 (integer arithmetic only), uniform doubles are its top
 * 53 bits, candidates are ordered by (logit descending, id ascending) — a total order, so the
 * sort is the same everywhere — and probabilities are computed in double. The same seed and
 * logits therefore pick the same token on any platform (up to libm's exp, which is correctly
 * rounded in practice for these arguments). Greedy is argmax with the lowest id winning ties.
 * Never allocates more than one [vocab] index array per call.
 */
#include <math.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "kernels/cpu/ops.h"
#include "util/rand.h"

typedef struct cand {
  float logit;
  int32_t id;
} cand;

static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
  return x->id < y->id ? -1 : (x->id > y->id);
}

int lh_logits_nonfinite(const float *logits, int vocab) {
  for (int i = 0; i < vocab; i++)
    if (!isfinite(logits[i])) return i;
  return -1;
}

int32_t lh_sample(const float *logits, int vocab, const lh_sampler_params *p, uint64_t *rng_state) {
  if (vocab <= 0) return 0;
  if (!p || !(p->temperature > 0.0f)) return (int32_t)lh_argmax(logits, vocab);
  cand *c = malloc((size_t)vocab * sizeof *c);
  if (!c) return (int32_t)lh_argmax(logits, vocab); /* out of memory: the greedy choice, never a crash */
  int n = 0;
  for (int i = 0; i < vocab; i++)
    if (logits[i] == logits[i] && logits[i] > -INFINITY) c[n++] = (cand){logits[i], i};
  if (n == 0) {
    free(c);
    return 0;
  }
  qsort(c, (size_t)n, sizeof *c, cand_cmp);
  if (p->top_k > 0 && p->top_k < n) n = p->top_k;
  double t = p->temperature, mx = c[0].logit, sum = 0;
  for (int i = 0; i < n; i++) sum += exp(((double)c[i].logit - mx) / t);
  if (p->top_p > 0.0f && p->top_p < 1.0f) { /* smallest prefix whose mass reaches top_p */
    double acc = 0;
    int keep = n;
    for (int i = 0; i < n; i++) {
      acc += exp(((double)c[i].logit - mx) / t) / sum;
      if (acc >= p->top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (int i = 0; i < n; i++) sum += exp(((double)c[i].logit - mx) / t);
  }
  uint64_t dummy = p->seed;
  uint64_t *rs = rng_state ? rng_state : &dummy;
  double u = lh_splitmix64_uniform(rs) * sum, acc = 0;
  int32_t pick = c[n - 1].id;
  for (int i = 0; i < n; i++) {
    acc += exp(((double)c[i].logit - mx) / t);
    if (u < acc) {
      pick = c[i].id;
      break;
    }
  }
  free(c);
  return pick;
}
