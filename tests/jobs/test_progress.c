/* test_progress.c — the prefill ETA (jobs/progress.c): fitted to time = a * tokens + b * (sum of
 * positions), so a softmax layer's growing cost per token does not make it optimistic, and tokens
 * restored from a checkpoint do not count as work done in this run. The samples are synthetic
 * (known a and b), so the expected remaining time is exact arithmetic, not our own output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "jobs/progress.h"
#include "tests/test.h"

/* Elapsed seconds to go from token `from` to `done` at a s per token plus b s per token per
 * position (positions in tokens): the integral of a + b * p over [from, done). */
static double cost(double a, double b, double from, double done) {
  return a * (done - from) + b * (done * done - from * from) / 2;
}

/* Feed samples every `step` tokens from `from` to `upto`, with relative noise `noise`, and
 * return the fitted remaining time at `upto` over the true one. */
static double ratio(double a, double b, int64_t from, int64_t upto, int64_t total, int64_t step, double noise,
                    unsigned seed) {
  lh_eta e;
  lh_eta_start(&e, from, total);
  srand(seed);
  for (int64_t d = from + step; d <= upto; d += step) {
    double t = cost(a, b, (double)from, (double)d);
    t *= 1 + noise * (2.0 * rand() / RAND_MAX - 1);
    lh_eta_add(&e, d, t);
  }
  return lh_eta_remaining(&e, upto) / cost(a, b, (double)upto, (double)total);
}

int main(void) {
  lh_test_begin("test_progress");
  const int64_t N = 204800;
  lh_eta e;
  lh_eta_start(&e, 0, N);
  CHECK(lh_eta_remaining(&e, 0) < 0); /* nothing to fit yet */
  /* the 200K-token demo on 2 cores: mostly attention; half-way the constant-rate ETA says a
   * third of the true remaining time */
  const double a = 2e-4, b = 3e-8;
  double r = ratio(a, b, 0, N / 2, N, 4096, 0, 1);
  CHECK_MSG(fabs(r - 1) < 1e-6, "quadratic cost, no noise: fitted/true remaining %.6f", r);
  const double naive = (cost(a, b, 0, N / 2) / (N / 2) * (N / 2)) / cost(a, b, N / 2, N);
  CHECK_MSG(naive < 0.6, "the constant-rate ETA would be %.2f of the truth", naive);
  r = ratio(a, b, 0, N / 4, N, 2048, 0.03, 2);
  CHECK_MSG(fabs(r - 1) < 0.1, "3%% noise at a quarter: %.3f", r);
  /* linear cost (a lightning-only model): the fit finds b = 0 */
  r = ratio(1e-3, 0, 0, N / 3, N, 2048, 0, 3);
  CHECK_MSG(fabs(r - 1) < 1e-6, "linear cost: %.6f", r);
  r = ratio(1e-3, 0, 0, N / 3, N, 2048, 0.05, 4);
  CHECK_MSG(fabs(r - 1) < 0.1, "linear cost, 5%% noise: %.3f", r);
  /* resumed at 768K of 1M: the restored tokens are not this run's work */
  const int64_t M = 1048576;
  r = ratio(1e-6, 5e-11, 786432, 851968, M, 65536 / 8, 0, 5);
  CHECK_MSG(fabs(r - 1) < 1e-6, "resumed at 768K: %.6f", r);
  /* one sample: a one-term fit (here exact, the cost being linear) */
  lh_eta_start(&e, 1000, 3000);
  lh_eta_add(&e, 2000, 10.0);
  CHECK_MSG(fabs(lh_eta_remaining(&e, 2000) - 10.0) < 1e-9, "one sample: %.3f", lh_eta_remaining(&e, 2000));
  CHECK(lh_eta_remaining(&e, 3000) == 0);
  /* samples at or before the start add nothing */
  lh_eta_start(&e, 1000, 3000);
  lh_eta_add(&e, 1000, 5.0);
  CHECK(lh_eta_remaining(&e, 1000) < 0);
  return lh_test_end();
}
