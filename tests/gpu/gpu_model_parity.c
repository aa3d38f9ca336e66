/* gpu_model_parity.c — whole models through the public engine API on both backends: the same
 * prompt in the same chunk plan with --device cpu and cuda must give logits within 2e-2 relative
 * L2, greedy continuations should agree, and forks decoded together (lh_decode_batch) must match
 * the CPU's too.
 *
 * Models: every folder with a config.json under tests/fixtures/engine/ and models/, plus any named
 * in LH_GPU_MODELS (colon-separated). Exit 77 without a GPU or without any model.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/test.h"

static int g_models;

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static lh_model *open_on(const char *dir, const char *backend, int max_chunk) {
  lh_model_params mp = lh_model_default_params();
  mp.backend = backend;
  mp.max_chunk = max_chunk;
  lh_model *m = NULL;
  lh_error err;
  lh_status s = lh_model_open(dir, &mp, &m, &err);
  if (s != LH_OK) {
    fprintf(stderr, "%s: cannot open on %s: %s\n", dir, backend, err.msg);
    return NULL;
  }
  return m;
}

static void run_model(const char *dir) {
  lh_model *mc = open_on(dir, "cpu", 64), *mg = open_on(dir, "cuda", 64);
  CHECK(mc && mg);
  if (!mc || !mg) {
    lh_model_close(mc), lh_model_close(mg);
    return;
  }
  g_models++;
  const lh_config *cf = lh_model_config(mc);
  const int V = cf->vocab_size;
  const int64_t n1 = 50, n2 = 45; /* chunked internally at 64 rows too */
  int32_t *tok = malloc((n1 + n2) * sizeof(int32_t));
  for (int64_t i = 0; i < n1 + n2; i++) tok[i] = (int32_t)((i * 2654435761u + 11) % (uint32_t)V);
  lh_state *sc, *sg;
  lh_error err;
  CHECK(lh_state_new(mc, &sc, &err) == LH_OK);
  CHECK(lh_state_new(mg, &sg, &err) == LH_OK);
  float *lc = malloc((size_t)n2 * V * 4), *lg = malloc((size_t)n2 * V * 4), *last = malloc((size_t)V * 4);
  CHECK(lh_prefill(sc, tok, n1, last, NULL, &err) == LH_OK);
  CHECK(lh_prefill(sg, tok, n1, last, NULL, &err) == LH_OK);
  CHECK(lh_prefill(sc, tok + n1, n2, NULL, lc, &err) == LH_OK);
  lh_status s = lh_prefill(sg, tok + n1, n2, NULL, lg, &err);
  CHECK_MSG(s == LH_OK, "%s", err.msg);
  double rel = lh_rel_l2(lg, lc, (size_t)n2 * V);
  int same = 0;
  for (int64_t i = 0; i < n2; i++) same += argmax(lg + i * V, V) == argmax(lc + i * V, V);
  printf("%-5s %-40s prefill %lld+%lld logits rel_l2=%.3e, argmax agree %d/%lld\n", rel <= 2e-2 ? "PASS" : "FAIL",
         dir, (long long)n1, (long long)n2, rel, same, (long long)n2);
  CHECK(rel <= 2e-2);

  /* Greedy continuation, 16 tokens each. */
  int32_t gc[16], gg[16];
  int32_t tc = argmax(lc + (n2 - 1) * V, V), tg = argmax(lg + (n2 - 1) * V, V);
  for (int i = 0; i < 16; i++) {
    gc[i] = tc, gg[i] = tg;
    CHECK(lh_prefill(sc, &tc, 1, last, NULL, &err) == LH_OK);
    tc = argmax(last, V);
    CHECK(lh_prefill(sg, &tg, 1, last, NULL, &err) == LH_OK);
    tg = argmax(last, V);
  }
  int agree = 0;
  while (agree < 16 && gc[agree] == gg[agree]) agree++;
  printf("INFO  %-40s greedy continuation: first %d of 16 tokens agree\n", dir, agree);

  /* Forks decoded together. */
  enum { K = 4 };
  lh_state *fc[K], *fg[K];
  int32_t ft[K];
  for (int i = 0; i < K; i++) {
    CHECK(lh_state_fork(sc, &fc[i], &err) == LH_OK);
    CHECK(lh_state_fork(sg, &fg[i], &err) == LH_OK);
    ft[i] = (int32_t)((i * 7 + 3) % V);
  }
  float *bc = malloc((size_t)K * V * 4), *bg = malloc((size_t)K * V * 4);
  CHECK(lh_decode_batch(fc, K, ft, bc, &err) == LH_OK);
  s = lh_decode_batch(fg, K, ft, bg, &err);
  CHECK_MSG(s == LH_OK, "%s", err.msg);
  rel = lh_rel_l2(bg, bc, (size_t)K * V);
  printf("%-5s %-40s decode batch of %d forks rel_l2=%.3e\n", rel <= 2e-2 ? "PASS" : "FAIL", dir, K, rel);
  CHECK(rel <= 2e-2);
  for (int i = 0; i < K; i++) lh_state_free(fc[i]), lh_state_free(fg[i]);
  lh_state_free(sc), lh_state_free(sg);
  lh_model_close(mc), lh_model_close(mg);
  free(tok), free(lc), free(lg), free(last), free(bc), free(bg);
}

static void scan(const char *root) {
  DIR *d = opendir(root);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char dir[1024], cfg[1100];
    snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat st;
    if (stat(cfg, &st) == 0) run_model(dir);
  }
  closedir(d);
}

int main(void) {
  lh_test_begin("gpu_model_parity");
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) LH_TEST_SKIP("%s", why);
  const char *src = getenv("LH_SOURCE_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/engine", src ? src : ".");
  scan(path);
  snprintf(path, sizeof path, "%s/models", src ? src : ".");
  scan(path);
  const char *extra = getenv("LH_GPU_MODELS");
  if (extra) {
    char *copy = strdup(extra), *save = NULL;
    for (char *t = strtok_r(copy, ":", &save); t; t = strtok_r(NULL, ":", &save)) run_model(t);
    free(copy);
  }
  if (!g_models) LH_TEST_SKIP("no model folders under tests/fixtures/engine or models (or LH_GPU_MODELS)");
  return lh_test_end();
}
