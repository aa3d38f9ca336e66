/* test_engine_parity.c — the engine against HF transformers on the committed fixtures.
 *
 * tests/fixtures/engine/<name>/ holds a small random MiniMax model, ids.txt, logits.f32 (HF
 * transformers 5.17, fp32, one full-sequence forward) and greedy.txt (16 greedy steps), made by
 * tools/make_engine_fixtures.py. For every fixture:
 *   - one pass (lh_prefill over all ids) meets the bound against HF: relative L2 of all logits
 *     <= 1e-4 and max abs error <= 1e-3 x max |ref|;
 *   - chunk plans (size 1, primes, sizes around block_size, random) and a small max_rows meet
 *     the same bound against HF;
 *   - greedy continuation by decode steps equals greedy.txt, both one state at a time and as a
 *     batch of forks through lh_decode_batch;
 *   - 1 and 2 threads give bitwise identical logits.
 * (orig_length_scale_gqa2 puts the length-aware query scaling through all of these.)
 * Skips (77) when the fixtures are absent.
 */
#include "tests/test.h"

#include <dirent.h>

#include "engine/engine.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/log.h"
#include "tests/engine/hf_parity.h"

static lh_model *open_model_tp(const char *dir, int threads, int max_rows, int tp, lh_error *err) {
  lh_model_params p = lh_model_default_params();
  p.threads = threads;
  p.tp_ranks = tp;
  if (max_rows) p.max_rows = max_rows;
  lh_model *m;
  if (lh_model_open(dir, &p, &m, err)) return NULL;
  return m;
}

static lh_model *open_model(const char *dir, int threads, int max_rows) {
  lh_error err;
  lh_model *m = open_model_tp(dir, threads, max_rows, 1, &err);
  if (!m) fprintf(stderr, "%s: %s\n", dir, err.msg);
  return m;
}

/* rel L2 of got against ref over n values */
static double rel_l2(const float *got, const float *ref, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = (double)got[i] - ref[i];
    num += e * e, den += (double)ref[i] * ref[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}


static void check_fixture(const char *dir, const char *name) {
  char path[2400];
  lh_i32vec ids = {0}, greedy = {0};
  snprintf(path, sizeof path, "%s/ids.txt", dir);
  CHECK(read_ints(path, &ids));
  snprintf(path, sizeof path, "%s/greedy.txt", dir);
  CHECK(read_ints(path, &greedy));
  lh_model *m = open_model(dir, 2, 0);
  CHECK_MSG(m != NULL, "%s: the model does not open", name);
  if (!m || !ids.len) goto out;
  const lh_config *c = lh_model_config(m);
  int64_t T = (int64_t)ids.len, V = c->vocab_size;
  lh_buf rb = {0};
  lh_error err;
  snprintf(path, sizeof path, "%s/logits.f32", dir);
  CHECK(!lh_file_read(path, (size_t)1 << 30, &rb, &err));
  CHECK_MSG(rb.len == (size_t)(T * V * 4), "%s: logits.f32 has %zu bytes, want %lld", name, rb.len,
            (long long)(T * V * 4));
  if (rb.len != (size_t)(T * V * 4)) {
    lh_buf_free(&rb);
    goto out;
  }
  const float *ref = (const float *)rb.data;
  float *got = malloc(sizeof(float) * T * V), *got1 = malloc(sizeof(float) * T * V);
  char what[256];

  int whole[1] = {(int)T};
  CHECK(run_plan(m, &ids, whole, 1, got));
  snprintf(what, sizeof what, "%s: one pass vs HF", name);
  CHECK_MSG(meets_bound_rows(what, got, ref, NULL, 1, T * V), "%s", what);

  int B = c->block_size;
  int p1[] = {1}, p2[] = {7, 13, 31}, p3[] = {B - 1, B, B + 1}, p4[] = {2 * B + 1, 3}, p5[] = {B / 2 + 1, 97};
  const int *plans[] = {p1, p2, p3, p4, p5};
  int nplans[] = {1, 3, 3, 2, 2};
  for (int i = 0; i < 5; i++) {
    CHECK(run_plan(m, &ids, plans[i], nplans[i], got1));
    snprintf(what, sizeof what, "%s: chunk plan %d (%d, ...) vs HF", name, i, plans[i][0]);
    CHECK_MSG(meets_bound_rows(what, got1, ref, NULL, 1, T * V), "%s", what);
  }
  uint64_t seed = (uint64_t)T * 2654435761u;
  for (int trial = 0; trial < 2; trial++) {
    int plan[400], n = 0;
    for (int64_t sum = 0; sum < T && n < 400; n++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      sum += plan[n] = 1 + (int)((seed >> 33) % (uint64_t)(2 * B + 2));
    }
    CHECK(run_plan(m, &ids, plan, n, got1));
    snprintf(what, sizeof what, "%s: random chunk plan %d vs HF", name, trial);
    CHECK_MSG(meets_bound_rows(what, got1, ref, NULL, 1, T * V), "%s", what);
  }

  /* greedy: decode steps from the prompt equal greedy.txt; and a batch of three forks */
  lh_state *s;
  CHECK(!lh_state_new(m, &s, &err));
  float *lg = malloc(sizeof(float) * V * 3);
  CHECK(!lh_prefill(s, ids.data, T, lg, NULL, &err));
  lh_state *f[3];
  for (int i = 0; i < 3; i++) CHECK(!lh_state_fork(s, &f[i], &err));
  int greedy_ok = 1, batch_ok = 1;
  lh_sampler_params gp = {0};
  for (size_t i = 0; i < greedy.len; i++) {
    int32_t next = lh_sample(lg, (int)V, &gp, NULL);
    greedy_ok &= next == greedy.data[i];
    CHECK(!lh_decode_batch(&s, 1, &next, lg, &err));
  }
  const float *fl = lh_state_last_logits(f[0]);
  int32_t nt[3];
  for (int i = 0; i < 3; i++) nt[i] = (int32_t)lh_sample(fl, (int)V, &gp, NULL);
  for (size_t i = 0; i < greedy.len; i++) {
    for (int k = 0; k < 3; k++) batch_ok &= nt[k] == greedy.data[i];
    CHECK(!lh_decode_batch(f, 3, nt, lg, &err));
    for (int k = 0; k < 3; k++) nt[k] = (int32_t)lh_sample(lg + k * V, (int)V, &gp, NULL);
  }
  CHECK_MSG(greedy_ok, "%s: greedy decode differs from greedy.txt", name);
  CHECK_MSG(batch_ok, "%s: greedy decode of a batch of forks differs from greedy.txt", name);
  lh_state_free(s);
  for (int i = 0; i < 3; i++) lh_state_free(f[i]);
  free(lg);
  lh_model_close(m);
  m = NULL;

  /* a small workspace cuts every call into pieces; 1 thread gives the same bits as 2 */
  lh_model *small = open_model(dir, 1, 29);
  CHECK(small != NULL);
  if (small) {
    int plan[] = {100, 1, 64};
    CHECK(run_plan(small, &ids, plan, 3, got1));
    snprintf(what, sizeof what, "%s: max_rows 29 vs HF", name);
    CHECK_MSG(meets_bound_rows(what, got1, ref, NULL, 1, T * V), "%s", what);
    lh_model_close(small);
  }
  lh_model *t1 = open_model(dir, 1, 0), *t2 = open_model(dir, 2, 0);
  if (t1 && t2) {
    int plan[] = {45, 200};
    CHECK(run_plan(t1, &ids, plan, 2, got));
    CHECK(run_plan(t2, &ids, plan, 2, got1));
    CHECK_MSG(!memcmp(got, got1, sizeof(float) * T * V), "%s: 1 and 2 threads differ in some bit", name);
  }
  /* Tensor/expert-parallel ranks (issue 10), simulated in one process by the CPU backend: R = 2,
   * 4 and 8 against R = 1 (the same function up to fp32 summation order) and against HF. */
  if (t1) {
    int plan[] = {45, 1, 200};
    CHECK(run_plan(t1, &ids, plan, 3, got));
    for (int tp = 2; tp <= 8; tp *= 2) {
      lh_error err;
      lh_model *mt = open_model_tp(dir, 2, 0, tp, &err);
      if (!mt) {
        /* only a config whose heads, kv heads or experts R does not divide may refuse */
        CHECK_MSG(strstr(err.msg, "must divide") != NULL, "%s: tp %d: %s", name, tp, err.msg);
        if (getenv("LH_TEST_VERBOSE")) fprintf(stderr, "  %s: tp %d not applicable: %s\n", name, tp, err.msg);
        continue;
      }
      CHECK(run_plan(mt, &ids, plan, 3, got1));
      double rel = rel_l2(got1, got, T * V);
      CHECK_MSG(rel <= 1e-5, "%s: tp %d vs one rank: rel L2 %.3g (bound 1e-5)", name, tp, rel);
      snprintf(what, sizeof what, "%s: tp %d vs HF", name, tp);
      CHECK_MSG(meets_bound_rows(what, got1, ref, NULL, 1, T * V), "%s", what);
      if (getenv("LH_TEST_VERBOSE")) fprintf(stderr, "  %s: tp %d vs one rank: rel L2 %.3g\n", name, tp, rel);
      lh_model_close(mt);
    }
  }
  lh_model_close(t1);
  lh_model_close(t2);
  free(got);
  free(got1);
  lh_buf_free(&rb);
out:
  lh_model_close(m);
  lh_i32vec_free(&ids);
  lh_i32vec_free(&greedy);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  lh_test_begin("test_engine_parity");
  lh_log_set_level(LH_LOG_ERROR); /* the loader's warnings (asserted by its own tests) */
  const char *src = getenv("LH_SOURCE_DIR");
  char root[1024];
  snprintf(root, sizeof root, "%s/tests/fixtures/engine", src ? src : ".");
  DIR *d = opendir(root);
  if (!d) LH_TEST_SKIP("no HF fixtures at %s (made by tools/make_engine_fixtures.py)", root);
  char *names[64];
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < 64) {
    char cfg[1400];
    snprintf(cfg, sizeof cfg, "%s/%s/logits.f32", root, e->d_name);
    if (e->d_name[0] != '.' && lh_is_file(cfg)) names[n++] = strdup(e->d_name);
  }
  closedir(d);
  if (!n) LH_TEST_SKIP("%s holds no fixture folders", root);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n; i++) {
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
    fprintf(stderr, "fixture %s\n", names[i]);
    check_fixture(dir, names[i]);
    free(names[i]);
  }
  CHECK_MSG(n >= 5, "expected at least five fixtures, found %d", n);
  return lh_test_end();
}
