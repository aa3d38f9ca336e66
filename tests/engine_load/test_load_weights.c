/* test_load_weights.c — weight views built by lh_model_open (backend "none"): both naming schemes
 * and sharding give identical weights; the model id is that of the files, so each layout has its
 * own (tests/engine_load/test_load_identity.c covers the id); every missing, misshapen or
 * contradictory tensor is an error naming it; unknown tensors are warnings. */
#include "tests/engine_load/tw.h"

#include <math.h>

#include "engine/internal.h"
#include "engine/weights.h"

static lh_error err;

static lh_status open_model(const char *dir, lh_model **m) {
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  memset(&err, 0, sizeof err);
  return lh_model_open(dir, &p, m, &err);
}

static float elem(const lh_tensor *t, int64_t i) {
  const uint8_t *b = t->data;
  if (t->dtype == LH_F32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return t->dtype == LH_BF16 ? lh_bf16_to_f32(h) : lh_f16_to_f32(h);
}

/* View v holds exactly the values of the model's tensor `name`. */
static int same(tw_model *tm, const lh_tensor *v, const char *name) {
  tw_tensor *t = tw_find(tm, name);
  if (!t || !v->data) {
    fprintf(stderr, "no tensor or view for %s\n", name);
    return 0;
  }
  int64_t n = 1;
  for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
  if (n != t->n || v->ndim != t->ndim) {
    fprintf(stderr, "%s: %lld elements in the view, %lld written\n", name, (long long)n, (long long)t->n);
    return 0;
  }
  for (int i = 0; i < v->ndim; i++)
    if (v->shape[i] != t->shape[i]) return 0;
  if ((uintptr_t)v->data % lh_dtype_size(v->dtype)) {
    fprintf(stderr, "%s: view not aligned\n", name);
    return 0;
  }
  for (int64_t i = 0; i < n; i++)
    if (elem(v, i) != t->values[i]) {
      fprintf(stderr, "%s[%lld]: %g vs %g\n", name, (long long)i, elem(v, i), t->values[i]);
      return 0;
    }
  return 1;
}

static int model_matches(tw_model *tm, lh_model *m) {
  const lh_weights *w = &m->w;
  int ok = same(tm, &w->embed, "model.embed_tokens.weight") && same(tm, &w->final_norm, "model.norm.weight");
  ok = ok && same(tm, &w->lm_head, tm->tie ? "model.embed_tokens.weight" : "lm_head.weight");
  char n[160];
  for (int l = 0; ok && l < tm->layers; l++) {
    const lh_layer_weights *lw = &w->layers[l];
#define S(view, fmt, ...) (snprintf(n, sizeof n, "model.layers.%d." fmt, l, ##__VA_ARGS__), same(tm, view, n))
    ok = ok && lw->kind == (tm->kind[l] ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING);
    ok = ok && S(&lw->in_norm, "input_layernorm.weight") && S(&lw->post_norm, "post_attention_layernorm.weight");
    if (tm->kind[l] == 0)
      ok = ok && S(&lw->qkv, "self_attn.qkv_proj.weight") && S(&lw->out_gate, "self_attn.output_gate.weight") &&
           S(&lw->out_proj, "self_attn.out_proj.weight") && S(&lw->attn_norm, "self_attn.norm.weight");
    else
      ok = ok && S(&lw->q_proj, "self_attn.q_proj.weight") && S(&lw->k_proj, "self_attn.k_proj.weight") &&
           S(&lw->v_proj, "self_attn.v_proj.weight") && S(&lw->o_proj, "self_attn.o_proj.weight");
    ok = ok && S(&lw->router, "block_sparse_moe.gate.weight");
    for (int e = 0; ok && e < tm->experts; e++)
      ok = S(&lw->w1[e], "block_sparse_moe.experts.%d.w1.weight", e) &&
           S(&lw->w3[e], "block_sparse_moe.experts.%d.w3.weight", e) &&
           S(&lw->w2[e], "block_sparse_moe.experts.%d.w2.weight", e);
#undef S
  }
  return ok;
}

static void test_schemes_equivalent(void) {
  tw_model tm = {0};
  tw_model_init(&tm, 7);
  static const struct {
    const char *dir;
    int scheme, shards;
  } cases[] = {{"per_expert", 0, 1}, {"fused", 1, 1}, {"mlp_prefix", 2, 1}, {"per_expert_sharded", 0, 3},
               {"fused_sharded", 1, 4}};
  char id0[65] = "", ids[8][65];
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const char *dir = tw_mkdir(cases[i].dir);
    tw_write_config(&tm, dir, "");
    tw_write_model(&tm, dir, cases[i].scheme, cases[i].shards);
    lh_model *m;
    tw_log_begin();
    CHECK_EQ(open_model(dir, &m), LH_OK);
    if (err.code) fprintf(stderr, "%s: %s\n", cases[i].dir, err.msg);
    CHECK_MSG(tw_log_len == 0, "%s: unexpected warnings: %s", cases[i].dir, tw_log);
    if (!m) continue;
    CHECK_MSG(model_matches(&tm, m), "%s", cases[i].dir);
    CHECK_EQ(strlen(lh_model_id(m)), 64);
    if (!id0[0]) memcpy(id0, lh_model_id(m), 65);
    /* the id digests the files: the same weights saved in another layout are other files */
    memcpy(ids[i], lh_model_id(m), 65);
    for (size_t k = 0; k < i; k++)
      CHECK_MSG(strcmp(ids[k], ids[i]), "%s and %s: the same id for other files", cases[k].dir, cases[i].dir);
    CHECK(!strcmp(lh_model_backend(m), "none"));
    CHECK(!strcmp(lh_model_dir(m), dir));
    if (cases[i].scheme == 1) CHECK_STR_CONTAINS(m->w.layers[0].w3[1].name, "gate_up_proj[1].w3");
    lh_model_close(m);
  }
  lh_log_set_sink(NULL, NULL);

  /* Different bytes, different id; a different dtype of the same values, different id. */
  tw_model t2 = {0};
  tw_model_init(&t2, 8);
  const char *dir = tw_mkdir("other_weights");
  tw_write_config(&t2, dir, "");
  tw_write_model(&t2, dir, 0, 1);
  lh_model *m;
  CHECK_EQ(open_model(dir, &m), LH_OK);
  if (m) CHECK(strcmp(id0, lh_model_id(m)));
  lh_model_close(m);
  tw_model t3 = {.dtype = "BF16"};
  tw_model_init(&t3, 7);
  dir = tw_mkdir("bf16");
  tw_write_config(&t3, dir, "");
  tw_write_model(&t3, dir, 1, 1);
  CHECK_EQ(open_model(dir, &m), LH_OK);
  if (m) {
    CHECK(model_matches(&t3, m));
    CHECK_EQ(m->w.layers[0].w1[0].dtype, LH_BF16);
    CHECK(strcmp(id0, lh_model_id(m)));
  }
  lh_model_close(m);
  tw_model_free(&t2);
  tw_model_free(&t3);

  /* Stats: every parameter counted once. */
  dir = tw_mkdir("per_expert");
  CHECK_EQ(open_model(dir, &m), LH_OK);
  if (m) {
    lh_model_stats st;
    lh_model_get_stats(m, &st);
    int64_t total = 0, experts = 0;
    for (int i = 0; i < tm.n; i++) {
      total += tm.t[i].n;
      if (strstr(tm.t[i].name, ".experts.")) experts += tm.t[i].n;
    }
    CHECK_EQ(st.params_total, total);
    CHECK_EQ(st.params_active, total - experts + experts * tm.top_k / tm.experts);
    CHECK_EQ(st.lightning_state_bytes, 1 * tm.heads * tm.head_dim * tm.head_dim * 4);
    CHECK_EQ(st.kv_bytes_per_token, 1 * 2 * tm.kv * tm.head_dim * 4);
    CHECK(st.weight_bytes > total * 4);
    CHECK(st.attn_flops_per_token_per_ctx == 4.0 * tm.heads * tm.head_dim);
  }
  lh_model_close(m);
  tw_model_free(&tm);
}

/* Write tm with a mutation and expect open to fail with code and a message containing want. */
typedef void (*mutate_fn)(tw_model *tm);

static void expect_fail(const char *name, mutate_fn f, const char *extra_cfg, lh_status code, const char *want,
                        const char *want2) {
  tw_model tm = {0};
  tw_model_init(&tm, 11);
  if (f) f(&tm);
  const char *dir = tw_mkdir(name);
  tw_write_config(&tm, dir, extra_cfg);
  tw_write_model(&tm, dir, 0, 1);
  lh_model *m = NULL;
  CHECK_EQ(open_model(dir, &m), code);
  CHECK(m == NULL);
  CHECK_STR_CONTAINS(err.msg, want);
  if (want2) CHECK_STR_CONTAINS(err.msg, want2);
  tw_model_free(&tm);
}

static void drop(tw_model *tm, const char *name) {
  for (int i = 0; i < tm->n; i++)
    if (!strcmp(tm->t[i].name, name)) {
      free(tm->t[i].values);
      memmove(&tm->t[i], &tm->t[i + 1], sizeof *tm->t * (size_t)(tm->n - i - 1));
      tm->n--;
      return;
    }
  fprintf(stderr, "drop: no %s\n", name);
  exit(1);
}

static void m_drop_oproj(tw_model *tm) { drop(tm, "model.layers.1.self_attn.o_proj.weight"); }
static void m_drop_w3(tw_model *tm) { drop(tm, "model.layers.0.block_sparse_moe.experts.2.w3.weight"); }
static void m_drop_router(tw_model *tm) { drop(tm, "model.layers.1.block_sparse_moe.gate.weight"); }
static void m_drop_norm(tw_model *tm) { drop(tm, "model.norm.weight"); }
static void m_drop_lmhead(tw_model *tm) { drop(tm, "lm_head.weight"); }
static void m_reshape_qkv(tw_model *tm) {
  tw_tensor *t = tw_find(tm, "model.layers.0.self_attn.qkv_proj.weight");
  t->shape[0] /= 2; /* [12, 8] instead of [24, 8]: same bytes per row, fewer rows */
  t->n /= 2;
}
static void m_kind_swap(tw_model *tm) { tm->kind[0] = 1, tm->kind[1] = 1; } /* config says S S */
static void m_kind_written(tw_model *tm) { (void)tm; }
static void m_extra_expert(tw_model *tm) {
  tw_tensor *src = tw_find(tm, "model.layers.1.block_sparse_moe.experts.0.w1.weight");
  tw_tensor *t = &tm->t[tm->n++];
  *t = *src;
  t->values = malloc(sizeof(float) * (size_t)t->n);
  memcpy(t->values, src->values, sizeof(float) * (size_t)t->n);
  snprintf(t->name, sizeof t->name, "model.layers.1.block_sparse_moe.experts.3.w1.weight");
}
static void m_two_routers(tw_model *tm) {
  tw_tensor *src = tw_find(tm, "model.layers.0.block_sparse_moe.gate.weight");
  tw_tensor *t = &tm->t[tm->n++];
  *t = *src;
  t->values = malloc(sizeof(float) * (size_t)t->n);
  memcpy(t->values, src->values, sizeof(float) * (size_t)t->n);
  snprintf(t->name, sizeof t->name, "model.layers.0.mlp.gate.weight");
}
static void m_both_schemes(tw_model *tm) {
  tw_tensor *t = &tm->t[tm->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "model.layers.0.mlp.experts.down_proj");
  t->dtype = "F32", t->ndim = 3, t->shape[0] = tm->experts, t->shape[1] = tm->hidden, t->shape[2] = tm->inter;
  t->n = (int64_t)tm->experts * tm->hidden * tm->inter;
  t->values = calloc((size_t)t->n, sizeof(float));
}

static void test_errors(void) {
  expect_fail("miss_oproj", m_drop_oproj, "", LH_EFORMAT, "'model.layers.1.self_attn.o_proj.weight'", "missing");
  expect_fail("miss_w3", m_drop_w3, "", LH_EFORMAT, "'model.layers.0.block_sparse_moe.experts.2.w3.weight'",
              "miss_w3/model.safetensors");
  expect_fail("miss_router", m_drop_router, "", LH_EFORMAT, "model.layers.1.block_sparse_moe.gate.weight", "router");
  expect_fail("miss_norm", m_drop_norm, "", LH_EFORMAT, "'model.norm.weight'", NULL);
  expect_fail("miss_lmhead", m_drop_lmhead, "", LH_EFORMAT, "'lm_head.weight'", "tie_word_embeddings");
  expect_fail("bad_shape", m_reshape_qkv, "", LH_EFORMAT, "'model.layers.0.self_attn.qkv_proj.weight'",
              "has shape [12, 8] but the config needs [24, 8]");
  expect_fail("extra_expert", m_extra_expert, "", LH_EFORMAT, "experts.3.w1.weight", "num_local_experts is 3");
  expect_fail("two_routers", m_two_routers, "", LH_EFORMAT, "two routers", "model.layers.0.mlp.gate.weight");
  expect_fail("both_schemes", m_both_schemes, "", LH_EFORMAT, "layer 0 holds its experts twice", NULL);
  /* the config disagrees with the checkpoint */
  {
    tw_model tm = {0};
    tw_model_init(&tm, 11);
    const char *dir = tw_mkdir("kind_mismatch");
    tw_write_model(&tm, dir, 0, 1);
    m_kind_swap(&tm);
    tw_write_config(&tm, dir, "");
    lh_model *m = NULL;
    CHECK_EQ(open_model(dir, &m), LH_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "'model.layers.0.self_attn.q_proj.weight'");
    CHECK_STR_CONTAINS(err.msg, "softmax layer in the config but the checkpoint has lightning attention weights");
    tw_model_free(&tm);
  }
  {
    tw_model tm = {0};
    tw_model_init(&tm, 11);
    m_kind_written(&tm);
    const char *dir = tw_mkdir("hidden_mismatch");
    tw_write_model(&tm, dir, 0, 1);
    tm.inter = 6;
    tw_write_config(&tm, dir, "");
    lh_model *m = NULL;
    CHECK_EQ(open_model(dir, &m), LH_EFORMAT);
    CHECK_STR_CONTAINS(err.msg, "block_sparse_moe.experts.0.w1.weight");
    CHECK_STR_CONTAINS(err.msg, "[4, 8] but the config needs [6, 8]");
    tw_model_free(&tm);
  }
}

static void test_warnings_and_tied(void) {
  /* unknown tensors (a bias transformers would also ignore) are warnings */
  tw_model tm = {0};
  tw_model_init(&tm, 13);
  tw_tensor *t = &tm.t[tm.n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "model.layers.0.self_attn.out_proj.bias");
  t->dtype = "F32", t->ndim = 1, t->shape[0] = tm.hidden, t->n = tm.hidden;
  t->values = calloc((size_t)t->n, sizeof(float));
  const char *dir = tw_mkdir("unknown");
  tw_write_config(&tm, dir, "");
  tw_write_model(&tm, dir, 0, 1);
  lh_model *m = NULL;
  tw_log_begin();
  CHECK_EQ(open_model(dir, &m), LH_OK);
  CHECK_STR_CONTAINS(tw_log, "unknown tensor 'model.layers.0.self_attn.out_proj.bias'");
  CHECK_STR_CONTAINS(tw_log, "unknown/model.safetensors");
  lh_model_close(m);
  lh_log_set_sink(NULL, NULL);
  tw_model_free(&tm);

  /* tied: no lm_head.weight; the head is the embedding */
  tw_model tt = {0};
  tt.vocab = 16, tt.hidden = 8, tt.layers = 2, tt.heads = 2, tt.kv = 2, tt.head_dim = 4, tt.inter = 4;
  tt.experts = 2, tt.top_k = 1, tt.block = 4, tt.tie = 1, tt.kind[0] = 1, tt.kind[1] = 0;
  tw_model_init(&tt, 17);
  dir = tw_mkdir("tied");
  tw_write_config(&tt, dir, "");
  tw_write_model(&tt, dir, 1, 1);
  CHECK_EQ(open_model(dir, &m), LH_OK);
  if (m) {
    CHECK(model_matches(&tt, m));
    CHECK(m->w.lm_head.data == m->w.embed.data);
  }
  lh_model_close(m);
  /* tied but an lm_head.weight that differs is stored: ignored, with a warning */
  tt.tie = 0;
  tw_add(&tt, "lm_head.weight", 2, tt.vocab, tt.hidden, 0, &(uint64_t){5});
  tt.tie = 1;
  dir = tw_mkdir("tied_extra");
  tw_write_config(&tt, dir, "");
  tw_write_model(&tt, dir, 0, 1);
  tw_log_begin();
  CHECK_EQ(open_model(dir, &m), LH_OK);
  CHECK_STR_CONTAINS(tw_log, "'lm_head.weight' is ignored because tie_word_embeddings is true");
  if (m) CHECK(m->w.lm_head.data == m->w.embed.data);
  lh_model_close(m);
  lh_log_set_sink(NULL, NULL);
  tw_model_free(&tt);
}

/* A tensor placed at an odd offset inside a valid file is copied to aligned memory. */
static void test_misaligned(void) {
  tw_model tm = {0};
  tw_model_init(&tm, 19);
  tw_tensor odd = {.dtype = "F16", .ndim = 1, .shape = {3}, .n = 3};
  snprintf(odd.name, sizeof odd.name, "aaa.odd");
  float v[3] = {1, 2, 3};
  odd.values = v;
  tw_tensor **list = calloc((size_t)tm.n + 1, sizeof *list);
  list[0] = &odd;
  for (int i = 0; i < tm.n; i++) list[i + 1] = &tm.t[i];
  const char *dir = tw_mkdir("misaligned");
  tw_write_config(&tm, dir, "");
  tw_write_st(tw_path(dir, "model.safetensors"), list, tm.n + 1);
  lh_model *m = NULL;
  tw_log_begin();
  CHECK_EQ(open_model(dir, &m), LH_OK);
  CHECK_STR_CONTAINS(tw_log, "unknown tensor 'aaa.odd'");
  if (m) CHECK(model_matches(&tm, m)); /* same() also checks alignment */
  lh_model_close(m);
  lh_log_set_sink(NULL, NULL);
  free(list);
  tw_model_free(&tm);
}

static void test_slopes(void) {
  /* transformers' get_slope_rate for H = 4, L = 3 (values printed by torch 2.11: float32 pow and
   * multiply); layer 0 -> factor 1 + 1e-5, layer 1 -> ~0.5, layer 2 -> ~1e-5 */
  lh_config c = {.n_heads = 4, .n_layers = 3};
  snprintf(c.model_type, sizeof c.model_type, "minimax");
  float s[4];
  lh_lightning_slopes(&c, 0, s);
  CHECK(fabsf(s[0] - 0.25f * 1.00001f) < 1e-7f && fabsf(s[3] - 0.00390625f * 1.00001f) < 1e-9f);
  lh_lightning_slopes(&c, 1, s);
  CHECK(fabsf(s[0] - 0.125f) < 1e-5f);
  /* the original code: interleaved for 6 heads: 2^-2, 2^-4, 2^-6, 2^-8, then 2^-1, 2^-3 */
  lh_config o = {.n_heads = 6, .n_layers = 3};
  snprintf(o.model_type, sizeof o.model_type, "minimax_text_01");
  float t[6];
  lh_lightning_slopes(&o, 0, t);
  float f = (float)(1 + 1e-5);
  CHECK(t[0] == 0.25f * f && t[1] == 0.0625f * f && t[3] == 0.00390625f * f && t[4] == 0.5f * f &&
        t[5] == 0.125f * f);

  /* a stored slope_rate is used (transformers loads it), with a warning when it disagrees */
  tw_model tm = {0};
  tw_model_init(&tm, 23);
  tw_tensor *sr = tw_add(&tm, "model.layers.0.self_attn.slope_rate", 3, tm.heads, 1, 1, &(uint64_t){1});
  sr->values[0] = 0.5f, sr->values[1] = 0.25f;
  const char *dir = tw_mkdir("slope");
  tw_write_config(&tm, dir, "");
  tw_write_model(&tm, dir, 0, 1);
  lh_model *m = NULL;
  tw_log_begin();
  CHECK_EQ(open_model(dir, &m), LH_OK);
  if (m) CHECK(m->w.layers[0].slope[0] == 0.5f && m->w.layers[0].slope[1] == 0.25f);
  CHECK_STR_CONTAINS(tw_log, "'model.layers.0.self_attn.slope_rate' differs from the slopes this config implies");
  lh_model_close(m);
  lh_log_set_sink(NULL, NULL);
  sr->shape[0] = 1, sr->shape[1] = tm.heads;
  dir = tw_mkdir("slope_shape");
  tw_write_config(&tm, dir, "");
  tw_write_model(&tm, dir, 0, 1);
  CHECK_EQ(open_model(dir, &m), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'model.layers.0.self_attn.slope_rate' has shape [1, 2, 1]");
  tw_model_free(&tm);
}

static void test_open_errors(void) {
  lh_model *m = NULL;
  CHECK_EQ(open_model(tw_path(lh_test_tmpdir(), "no_such_dir"), &m), LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "no_such_dir");
  const char *dir = tw_mkdir("no_config");
  CHECK_EQ(open_model(dir, &m), LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "no_config/config.json");
  tw_write_text(tw_path(dir, "config.json"), "{\"model_type\":\"minimax\"}");
  CHECK_EQ(open_model(dir, &m), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "no_config/config.json");
  CHECK_STR_CONTAINS(err.msg, "vocab_size");

  dir = tw_mkdir("per_expert");
  lh_model_params p = lh_model_default_params();
  CHECK(!strcmp(p.backend, "cpu"));
  CHECK_EQ(p.max_rows, 8192);
  p.backend = "abacus";
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "'abacus'");
  p.backend = "none";
  p.max_rows = 0;
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "max_rows");
  p.max_rows = 16;
  p.threads = -1;
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EINVAL);
  /* a typo's thread count is refused before a workspace per thread is made (100000 took 23 GB) */
  p.threads = LH_MAX_THREADS + 1;
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "at most 1024");
  lh_model_close(NULL);
}

/* A long name of a tensor no layer uses must not size the arena of fused-expert slice names, which
 * has one entry per expert per layer: with 64 layers of 1024 experts an 8 MiB name made it 1.6 TB
 * and the open failed with "out of memory" instead of naming the missing tensors. */
static void test_long_unknown_name(void) {
  const char *dir = tw_mkdir("long_name");
  tw_write_text(tw_path(dir, "config.json"),
                "{\"model_type\":\"minimax\",\"vocab_size\":16,\"hidden_size\":8,\"intermediate_size\":4,"
                "\"num_hidden_layers\":64,\"num_attention_heads\":2,\"num_key_value_heads\":2,"
                "\"num_local_experts\":1024,\"num_experts_per_tok\":2}");
  size_t n = (size_t)8 << 20;
  char *h = malloc(n + 128);
  CHECK(h != NULL);
  if (!h) return;
  memcpy(h, "{\"", 2);
  memset(h + 2, 'x', n);
  snprintf(h + 2 + n, 126, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}");
  float one = 1;
  tw_write_raw(tw_path(dir, "model.safetensors"), h, &one, sizeof one);
  free(h);
  lh_model *m = NULL;
  CHECK_EQ(open_model(dir, &m), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "model.embed_tokens.weight");
  lh_model_close(m);
}

int main(void) {
  lh_test_begin("test_load_weights");
  test_long_unknown_name();
  test_schemes_equivalent();
  test_errors();
  test_warnings_and_tied();
  test_misaligned();
  test_slopes();
  test_open_errors();
  return lh_test_end();
}
