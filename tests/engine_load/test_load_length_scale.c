/* test_load_length_scale.c — the length-aware query scaling (config key attn_length_scale_base,
 * tensors model.layers.N.self_attn.length_scale; docs/design.md) through lh_model_open and the CPU
 * engine, on a tiny random model in the original config form:
 *   - the scales load in F32, BF16 and F16; a missing tensor, a wrong shape, a NaN or an infinity
 *     with the key on, and the tensor with the key off or 0, are load errors naming the tensor;
 *   - all scales 0 with the key on give bitwise the logits of the key off (the factor is exactly 1);
 *   - non-zero scales leave positions below the base bitwise alone and change the later ones;
 *   - with non-zero scales, chunk plans and prefill-then-decode agree with one pass.
 * (The agreement with transformers is test_engine_parity's, on tests/fixtures/engine/
 * orig_length_scale_gqa2.) */
#include "tests/engine_load/tw.h"

#include <math.h>

#include "engine/internal.h"

#define BASE 4
#define T 40

static lh_error err;
static const char *const SCALE = "model.layers.1.self_attn.length_scale"; /* the softmax layer */

/* The original-form config.json of m (layers: 0 lightning, 1 softmax); extra spliced in verbatim. */
static void write_orig_config(const tw_model *m, const char *dir, const char *extra) {
  char buf[2048];
  snprintf(buf, sizeof buf,
           "{\"model_type\":\"minimax_text_01\",\"vocab_size\":%d,\"hidden_size\":%d,\"num_hidden_layers\":%d,"
           "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"intermediate_size\":%d,"
           "\"num_local_experts\":%d,\"num_experts_per_tok\":%d,\"block_size\":%d,\"tie_word_embeddings\":false,"
           "\"attn_type_list\":[0,1],\"postnorm\":true,\"rope_theta\":10000.0%s}",
           m->vocab, m->hidden, m->layers, m->heads, m->kv, m->head_dim, m->inter, m->experts, m->top_k, m->block,
           extra ? extra : "");
  tw_write_text(tw_path(dir, "config.json"), buf);
}

/* A folder holding the tiny model in dtype, with config extra and, when scale is not NULL, the
 * softmax layer's length_scale of shape [d0] or [d0, d1] (d1 > 0) filled from scale. */
static const char *make(const char *name, const char *dtype, const char *extra, const float *scale, int64_t d0,
                        int64_t d1) {
  tw_model tm = {.dtype = dtype};
  tw_model_init(&tm, 31);
  if (scale) {
    tw_tensor *t = &tm.t[tm.n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", SCALE);
    t->dtype = dtype;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0, t->shape[1] = d1;
    t->n = d0 * (d1 ? d1 : 1);
    t->values = malloc(sizeof(float) * (size_t)t->n);
    for (int64_t i = 0; i < t->n; i++) t->values[i] = scale[i];
  }
  static char dirs[16][1024];
  static int k;
  char *dir = dirs[k++ % 16];
  snprintf(dir, sizeof dirs[0], "%s", tw_mkdir(name));
  write_orig_config(&tm, dir, extra);
  tw_write_model(&tm, dir, 0, 1);
  tw_model_free(&tm);
  return dir;
}

static lh_model *open_on(const char *dir, const char *backend) {
  lh_model_params p = lh_model_default_params();
  p.backend = backend;
  p.threads = 1;
  lh_model *m = NULL;
  memset(&err, 0, sizeof err);
  if (lh_model_open(dir, &p, &m, &err)) return NULL;
  return m;
}

static lh_status open_status(const char *dir) {
  lh_model *m = open_on(dir, "none");
  lh_model_close(m);
  return m ? LH_OK : err.code;
}

static void test_loads(void) {
  static const char *const dtypes[] = {"F32", "BF16", "F16"};
  const float s[2] = {0.5f, 0.75f}; /* exact in every dtype */
  for (int d = 0; d < 3; d++) {
    char name[32];
    snprintf(name, sizeof name, "loads_%s", dtypes[d]);
    lh_model *m = open_on(make(name, dtypes[d], ",\"attn_length_scale_base\":4", s, 2, 0), "none");
    CHECK_MSG(m != NULL, "%s: %s", dtypes[d], err.msg);
    if (!m) continue;
    CHECK_EQ(lh_model_config(m)->attn_length_scale_base, 4);
    CHECK(m->w.layers[1].length_scale[0] == 0.5f && m->w.layers[1].length_scale[1] == 0.75f);
    CHECK(m->w.layers[0].length_scale[0] == 0.0f); /* a lightning layer has none */
    lh_model_close(m);
  }
}

#define CHECK_REFUSED(dir, ...)                                                      \
  do {                                                                               \
    CHECK_EQ(open_status(dir), LH_EFORMAT);                                          \
    const char *want_[] = {__VA_ARGS__};                                             \
    for (size_t i_ = 0; i_ < sizeof want_ / sizeof want_[0]; i_++)                   \
      CHECK_STR_CONTAINS(err.msg, want_[i_]);                                        \
  } while (0)

static void test_errors(void) {
  const float ok[2] = {0.5f, 0.75f}, three[3] = {0.5f, 0.75f, 1.0f}, nan2[2] = {0.5f, NAN}, inf2[2] = {INFINITY, 1};
  tw_log_begin();
  CHECK_REFUSED(make("missing", "F32", ",\"attn_length_scale_base\":4", NULL, 0, 0), SCALE, "attn_length_scale_base",
                "[2]");
  CHECK_REFUSED(make("shape3", "F32", ",\"attn_length_scale_base\":4", three, 3, 0), SCALE, "[3]", "[2]");
  CHECK_REFUSED(make("shape2x1", "BF16", ",\"attn_length_scale_base\":4", ok, 2, 1), SCALE, "[2, 1]", "[2]");
  CHECK_REFUSED(make("nan", "F32", ",\"attn_length_scale_base\":4", nan2, 2, 0), SCALE, "non-finite", "head 1");
  CHECK_REFUSED(make("inf", "BF16", ",\"attn_length_scale_base\":4", inf2, 2, 0), SCALE, "non-finite", "head 0");
  CHECK_REFUSED(make("inf16", "F16", ",\"attn_length_scale_base\":4", inf2, 2, 0), SCALE, "non-finite");
  /* the tensor without the key: refused, not ignored (it was learned with the scaling on) */
  CHECK_REFUSED(make("key_off", "F32", "", ok, 2, 0), SCALE, "attn_length_scale_base");
  CHECK_REFUSED(make("key_0", "F32", ",\"attn_length_scale_base\":0", ok, 2, 0), SCALE, "attn_length_scale_base");
  /* and never a warning about an unknown tensor on the way */
  CHECK(strstr(tw_log, "unknown tensor") == NULL);
}

static const int32_t *ids(void) {
  static int32_t v[T];
  for (int i = 0; i < T; i++) v[i] = (int32_t)((i * 7 + 3) % 16);
  return v;
}

/* Logits of every position, feeding ids in calls of plan[] (repeated); 0 on failure. */
static int logits_plan(lh_model *m, const int *plan, int nplan, float *out) {
  lh_state *s;
  if (lh_state_new(m, &s, &err)) return 0;
  const int64_t V = lh_model_config(m)->vocab_size;
  int ok = 1;
  for (int64_t t = 0, i = 0; ok && t < T; i++) {
    int64_t n = plan[i % nplan] < T - t ? plan[i % nplan] : T - t;
    ok = lh_prefill(s, ids() + t, n, NULL, out + t * V, &err) == LH_OK;
    t += n;
  }
  lh_state_free(s);
  return ok;
}

static double rel_l2(const float *a, const float *b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
  return sqrt(num / (den > 0 ? den : 1));
}

static void test_numbers(void) {
  const float zero[2] = {0, 0}, s[2] = {0.5f, 1.0f};
  lh_model *off = open_on(make("n_off", "F32", "", NULL, 0, 0), "cpu");
  lh_model *zeros = open_on(make("n_zeros", "F32", ",\"attn_length_scale_base\":4", zero, 2, 0), "cpu");
  lh_model *on = open_on(make("n_on", "F32", ",\"attn_length_scale_base\":4", s, 2, 0), "cpu");
  CHECK_MSG(off && zeros && on, "%s", err.msg);
  if (!off || !zeros || !on) goto out;
  const int64_t V = lh_model_config(off)->vocab_size;
  float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V), *c = malloc(sizeof(float) * T * V);
  int whole[] = {T};
  CHECK(logits_plan(off, whole, 1, a));
  CHECK(logits_plan(zeros, whole, 1, b));
  CHECK_MSG(!memcmp(a, b, sizeof(float) * T * V), "all scales 0 must give the bits of the scaling off");
  CHECK(strcmp(lh_model_id(off), lh_model_id(zeros))); /* the files differ, and so does the config */

  CHECK(logits_plan(on, whole, 1, c));
  /* positions 0..BASE-1 have (p+1)/L0 <= 1: factor exactly 1, so rows causal up to them are equal */
  CHECK(!memcmp(a, c, sizeof(float) * BASE * V));
  double moved = rel_l2(c + BASE * V, a + BASE * V, (T - BASE) * V);
  CHECK_MSG(moved > 1e-3, "non-zero scales moved the later logits by only %.3g", moved);

  /* chunk plans and prefill-then-decode against one pass */
  int plans[][3] = {{1, 1, 1}, {3, 5, 7}, {BASE - 1, BASE, BASE + 1}, {17, 2, 40}};
  for (int i = 0; i < 4; i++) {
    CHECK(logits_plan(on, plans[i], 3, b));
    double r = rel_l2(b, c, T * V);
    CHECK_MSG(r <= 1e-5, "chunk plan %d: rel L2 %.3g against one pass", i, r);
  }
  lh_state *st;
  CHECK(!lh_state_new(on, &st, &err));
  CHECK(!lh_prefill(st, ids(), 10, NULL, b, &err));
  for (int t = 10; t < T; t++) {
    int32_t tok = ids()[t];
    CHECK(!lh_decode_batch(&st, 1, &tok, b + (int64_t)t * V, &err));
  }
  lh_state_free(st);
  /* decode row t holds the logits after token t, which one pass puts at row t */
  double r = rel_l2(b + 10 * V, c + 10 * V, (T - 10) * V);
  CHECK_MSG(r <= 1e-5, "prefill 10 then decode: rel L2 %.3g against one pass", r);
  free(a), free(b), free(c);
out:
  lh_model_close(off), lh_model_close(zeros), lh_model_close(on);
}

int main(void) {
  lh_test_begin("test_load_length_scale");
  test_loads();
  test_errors();
  test_numbers();
  return lh_test_end();
}
