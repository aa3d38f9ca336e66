/* hf_parity.h — what the engine-vs-transformers tests share: reading the fixtures' id lists,
 * running a prefill in a chunk plan, and the engine-core bound (relative L2 <= 1e-4 and max abs
 * error <= 1e-3 x max |ref|). Static functions for the test programs that include it. */
#ifndef LH_TESTS_ENGINE_HF_PARITY_H
#define LH_TESTS_ENGINE_HF_PARITY_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/engine.h"
#include "util/buf.h"
#include "util/fs.h"

/* Whitespace-separated integers of a file into v; 0 when it cannot be read or holds none. */
static int read_ints(const char *path, lh_i32vec *v) {
  lh_buf b = {0};
  lh_error err;
  if (lh_file_read(path, 1 << 24, &b, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 0;
  }
  char *p = b.data, *e;
  for (;;) {
    long x = strtol(p, &e, 10);
    if (e == p) break;
    lh_i32vec_push(v, (int32_t)x);
    p = e;
  }
  lh_buf_free(&b);
  return v->len > 0;
}

/* A model fixture's id lists (tests/fixtures/haul-tiny): ids.txt, positions.txt and greedy.txt of
 * folder fx; 1 when all three were read and none is empty. */
static inline int read_fixture_lists(const char *fx, lh_i32vec *ids, lh_i32vec *pos, lh_i32vec *greedy) {
  char path[1200];
  snprintf(path, sizeof path, "%s/ids.txt", fx);
  int ok = read_ints(path, ids);
  snprintf(path, sizeof path, "%s/positions.txt", fx);
  ok &= read_ints(path, pos);
  snprintf(path, sizeof path, "%s/greedy.txt", fx);
  ok &= read_ints(path, greedy);
  return ok;
}

/* Logits of every position into out [T x V], feeding the ids in the chunks of plan (repeated). */
static int run_plan(lh_model *m, const lh_i32vec *ids, const int *plan, int nplan, float *out) {
  lh_state *s;
  lh_error err;
  if (lh_state_new(m, &s, &err)) return 0;
  const int64_t V = lh_model_config(m)->vocab_size, T = (int64_t)ids->len;
  int ok = 1;
  for (int64_t t = 0, i = 0; ok && t < T; i++) {
    int64_t n = plan[i % nplan] < T - t ? plan[i % nplan] : T - t;
    if (lh_prefill(s, ids->data + t, n, NULL, out + t * V, &err)) {
      fprintf(stderr, "prefill: %s\n", err.msg);
      ok = 0;
    }
    t += n;
  }
  lh_state_free(s);
  return ok;
}

/* A bound over nrows rows of V values: row r of ref against row pos[r] of got (row r when pos is
 * NULL): relative L2 <= rel_bound and max abs <= abs_frac x max |ref|. Prints the numbers when it
 * fails or LH_TEST_VERBOSE is set. */
static inline int meets_rows(const char *what, const float *got, const float *ref, const int32_t *pos, size_t nrows,
                             int64_t V, double rel_bound, double abs_frac) {
  double num = 0, den = 0, maxref = 0, maxerr = 0;
  for (size_t r = 0; r < nrows; r++)
    for (int64_t j = 0; j < V; j++) {
      double g = got[(pos ? (int64_t)pos[r] : (int64_t)r) * V + j], f = ref[(int64_t)r * V + j], e = g - f;
      num += e * e, den += f * f;
      if (fabs(f) > maxref) maxref = fabs(f);
      if (!(fabs(e) <= maxerr)) maxerr = e == e ? fabs(e) : INFINITY;
    }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int ok = rel <= rel_bound && maxerr <= abs_frac * maxref;
  if (!ok || getenv("LH_TEST_VERBOSE"))
    fprintf(stderr, "  %s: rel L2 %.3g (bound %.1g), max abs %.3g (bound %.3g)%s\n", what, rel, rel_bound, maxerr,
            abs_frac * maxref, ok ? "" : "  FAIL");
  return ok;
}

/* The engine-core bound: relative L2 <= 1e-4, max abs <= 1e-3 x max |ref|. */
static inline int meets_bound_rows(const char *what, const float *got, const float *ref, const int32_t *pos,
                                   size_t nrows, int64_t V) {
  return meets_rows(what, got, ref, pos, nrows, V, 1e-4, 1e-3);
}

#endif
