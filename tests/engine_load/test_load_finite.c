/* test_load_finite.c — weights that are NaN or infinite are a load-time error naming the file,
 * the tensor and the first bad element (flat index and index per dimension), in F32, BF16 and
 * F16; the largest finite values, subnormals and -0 load. The scan finds the first bad element
 * deep in a large tensor, and wherever the leaves of the read split the file. */
#include "tests/engine_load/tw.h"

#include <float.h>
#include <math.h>

#include "engine/internal.h"
#include "engine/safetensors.h"

static lh_error err;

static lh_status open_dir(const char *dir) {
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  memset(&err, 0, sizeof err);
  lh_status st = lh_model_open(dir, &p, &m, &err);
  lh_model_close(m);
  return st;
}

static const char *const W3 = "model.layers.1.block_sparse_moe.experts.2.w3.weight"; /* [inter 4, hidden 8] */

static void test_bad_values(void) {
  static const char *const dtypes[] = {"F32", "BF16", "F16"};
  static const char *const names[] = {"NaN", "+infinity", "-infinity"};
  const float bad[] = {NAN, INFINITY, -INFINITY};
  for (int d = 0; d < 3; d++)
    for (int b = 0; b < 3; b++) {
      tw_model tm = {.dtype = dtypes[d]};
      tw_model_init(&tm, 11);
      tw_find(&tm, W3)->values[13] = bad[b];
      tw_find(&tm, W3)->values[30] = bad[(b + 1) % 3]; /* a later one is not the one named */
      char name[64];
      snprintf(name, sizeof name, "bad_%s_%d", dtypes[d], b);
      char dir[1024];
      snprintf(dir, sizeof dir, "%s", tw_mkdir(name));
      tw_write_config(&tm, dir, "");
      tw_write_model(&tm, dir, 0, 1);
      CHECK_MSG(open_dir(dir) == LH_EFORMAT, "%s %s: opened", dtypes[d], names[b]);
      CHECK_STR_CONTAINS(err.msg, tw_path(dir, "model.safetensors"));
      CHECK_STR_CONTAINS(err.msg, W3);
      CHECK_STR_CONTAINS(err.msg, names[b]);
      CHECK_STR_CONTAINS(err.msg, "element 13, index [1, 5]");
      CHECK_STR_CONTAINS(err.msg, dtypes[d]);
      tw_model_free(&tm);
    }
}

/* Finite extremes of each dtype load. */
static void test_finite_extremes(void) {
  static const char *const dtypes[] = {"F32", "BF16", "F16"};
  for (int d = 0; d < 3; d++) {
    tw_model tm = {.dtype = dtypes[d]};
    tw_model_init(&tm, 12);
    float *v = tw_find(&tm, W3)->values;
    if (d == 0) v[0] = FLT_MAX, v[1] = -FLT_MAX, v[2] = 1e-45f;
    if (d == 1) v[0] = 3.3895314e38f, v[1] = -3.3895314e38f, v[2] = 9.2e-41f;
    if (d == 2) v[0] = 65504.0f, v[1] = -65504.0f, v[2] = 5.96e-8f;
    v[3] = -0.0f;
    char name[64];
    snprintf(name, sizeof name, "extreme_%s", dtypes[d]);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", tw_mkdir(name));
    tw_write_config(&tm, dir, "");
    tw_write_model(&tm, dir, 1, 2);
    CHECK_MSG(open_dir(dir) == LH_OK, "%s: %s", dtypes[d], err.msg);
    tw_model_free(&tm);
  }
}

/* A NaN deep in a 1.3 MB embedding: many read chunks before it. */
static void test_deep(void) {
  tw_model tm = {.vocab = 40000, .hidden = 8, .layers = 2, .heads = 2, .kv = 1, .head_dim = 4, .inter = 4,
                 .experts = 3, .top_k = 2, .block = 4, .kind = {0, 1}};
  tw_model_init(&tm, 13);
  tw_find(&tm, "model.embed_tokens.weight")->values[299999] = NAN;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", tw_mkdir("deep"));
  tw_write_config(&tm, dir, "");
  tw_write_model(&tm, dir, 0, 1);
  CHECK_EQ(open_dir(dir), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'model.embed_tokens.weight'");
  CHECK_STR_CONTAINS(err.msg, "element 299999, index [37499, 7]");
  tw_model_free(&tm);
}

/* Leaves of any size, splitting the header and the elements anywhere, find the same element. */
static void test_leaves(void) {
  /* two BF16 tensors after a header of odd length; the bad element is the second tensor's 700th */
  const char *path = tw_path(lh_test_tmpdir(), "leaves.safetensors");
  const char *hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[301],\"data_offsets\":[0,1204]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,500],\"data_offsets\":[1204,3204]}} ";
  uint8_t data[3204];
  for (int i = 0; i < 301; i++) {
    float f = (float)i - 150.5f;
    memcpy(data + 4 * i, &f, 4);
  }
  for (int i = 0; i < 1000; i++) {
    uint16_t h = lh_f32_to_bf16(i == 700 ? INFINITY : i == 900 ? NAN : (float)i * 0.5f);
    memcpy(data + 1204 + 2 * i, &h, 2);
  }
  tw_write_raw(path, hdr, data, sizeof data);
  int64_t want = 8 + (int64_t)strlen(hdr) + 1204 + 2 * 700;
  static const uint64_t leaves[] = {1, 3, 7, 64, 1000, 1403, 4096, LH_ST_DIGEST_LEAF};
  for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++)
    for (int th = 1; th <= 2; th++) {
      lh_st_set *s = lh_st_new();
      CHECK_EQ(lh_st_add_file(s, path, &err), LH_OK);
      CHECK_EQ(lh_st_finish(s, &err), LH_OK);
      CHECK_EQ(lh_st_digest(s, th, leaves[i], NULL, NULL, &err), LH_EFORMAT);
      CHECK_MSG(s->digest && s->digest[0].nonfinite_at == want, "leaf %llu, %d threads: %lld, want %lld",
                (unsigned long long)leaves[i], th, s->digest ? (long long)s->digest[0].nonfinite_at : -2LL,
                (long long)want);
      CHECK_STR_CONTAINS(err.msg, "tensor 'b' (BF16) holds +infinity at element 700, index [1, 200]");
      lh_st_close(s);
    }
}

int main(void) {
  lh_test_begin("test_load_finite");
  lh_log_set_level(LH_LOG_ERROR);
  test_bad_values();
  test_finite_extremes();
  test_deep();
  test_leaves();
  return lh_test_end();
}
