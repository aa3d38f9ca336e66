/* test_load_fixtures.c — every committed HF fixture (tests/fixtures/engine/<name>/) loads with
 * backend "none", and the parsed configuration matches the fixture's own config.json and the
 * layer plan, lightning slopes and length-aware scales transformers used (meta.json, written by the
 * fixture script from the reference model). The reference files are consistent with the config
 * (sizes, id ranges). */
#include "tests/engine_load/tw.h"

#include <dirent.h>
#include <math.h>

#include <cjson/cJSON.h>

#include "engine/internal.h"
#include "util/buf.h"
#include "util/fs.h"

static cJSON *load_json(const char *path) {
  lh_buf b = {0};
  lh_error err;
  if (lh_file_read(path, 1 << 24, &b, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return NULL;
  }
  cJSON *j = cJSON_ParseWithLength(b.data, b.len);
  lh_buf_free(&b);
  return j;
}

static double num(const cJSON *o, const char *k, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static int count_ids(const char *path, int vocab, int *bad) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0;
  long v;
  *bad = 0;
  while (fscanf(f, "%ld", &v) == 1) {
    if (v < 0 || v >= vocab) (*bad)++;
    n++;
  }
  fclose(f);
  return n;
}

static void check_fixture(const char *dir, const char *name) {
  cJSON *cj = load_json(tw_path(dir, "config.json")), *meta = load_json(tw_path(dir, "meta.json"));
  CHECK_MSG(cj && meta, "%s: config.json and meta.json must parse", name);
  if (!cj || !meta) return;
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  lh_error err = {0};
  tw_log_begin();
  lh_status st = lh_model_open(dir, &p, &m, &err);
  CHECK_MSG(st == LH_OK, "%s: %s", name, err.msg);
  if (st) goto out;
  const lh_config *c = lh_model_config(m);
  const char *mt = cJSON_GetObjectItemCaseSensitive(cj, "model_type")->valuestring;
  int original = !strcmp(mt, "minimax_text_01");
  CHECK(!strcmp(c->model_type, mt));
  CHECK_EQ(c->vocab_size, (int)num(cj, "vocab_size", -1));
  CHECK_EQ(c->hidden_size, (int)num(cj, "hidden_size", -1));
  CHECK_EQ(c->n_layers, (int)num(cj, "num_hidden_layers", -1));
  CHECK_EQ(c->n_heads, (int)num(cj, "num_attention_heads", -1));
  CHECK_EQ(c->n_kv_heads, (int)num(cj, "num_key_value_heads", -1));
  CHECK_EQ(c->head_dim, (int)num(cj, "head_dim", -1));
  CHECK_EQ(c->intermediate_size, (int)num(cj, "intermediate_size", -1));
  CHECK_EQ(c->n_experts, (int)num(cj, "num_local_experts", -1));
  CHECK_EQ(c->top_k, (int)num(cj, "num_experts_per_tok", -1));
  CHECK_EQ(c->block_size, (int)num(cj, "block_size", 256));
  CHECK(c->rms_norm_eps == num(cj, "rms_norm_eps", -1));
  CHECK_EQ(c->tie_word_embeddings, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cj, "tie_word_embeddings")));
  CHECK_EQ(c->postnorm, 1);
  const cJSON *rp = cJSON_GetObjectItemCaseSensitive(cj, "rope_parameters");
  double theta = rp ? num(rp, "rope_theta", -1) : num(cj, "rope_theta", -1);
  CHECK_MSG(c->rope_theta == theta, "%s: rope_theta %g vs %g", name, c->rope_theta, theta);
  if (original) {
    CHECK(c->attn_alpha[LH_LAYER_SOFTMAX] == (float)num(cj, "layernorm_full_attention_alpha", -1));
    CHECK(c->attn_beta[LH_LAYER_SOFTMAX] == (float)num(cj, "layernorm_full_attention_beta", -1));
    CHECK(c->attn_alpha[LH_LAYER_LIGHTNING] == (float)num(cj, "layernorm_linear_attention_alpha", -1));
    CHECK(c->attn_beta[LH_LAYER_LIGHTNING] == (float)num(cj, "layernorm_linear_attention_beta", -1));
    CHECK(c->mlp_alpha == (float)num(cj, "layernorm_mlp_alpha", -1));
    CHECK(c->mlp_beta == (float)num(cj, "layernorm_mlp_beta", -1));
    CHECK_EQ(c->rotary_dim, (int)num(cj, "rotary_dim", -1));
    CHECK(c->rotary_dim < c->head_dim);
    CHECK_EQ(c->attn_length_scale_base, (int)num(cj, "attn_length_scale_base", 0));
  } else {
    CHECK(c->attn_alpha[LH_LAYER_SOFTMAX] == (float)num(cj, "full_attn_alpha_factor", -1));
    CHECK(c->attn_beta[LH_LAYER_SOFTMAX] == (float)num(cj, "full_attn_beta_factor", -1));
    CHECK(c->attn_alpha[LH_LAYER_LIGHTNING] == (float)num(cj, "linear_attn_alpha_factor", -1));
    CHECK(c->attn_beta[LH_LAYER_LIGHTNING] == (float)num(cj, "linear_attn_beta_factor", -1));
    CHECK(c->mlp_alpha == (float)num(cj, "mlp_alpha_factor", -1));
    CHECK(c->mlp_beta == (float)num(cj, "mlp_beta_factor", -1));
    CHECK_EQ(c->rotary_dim, c->head_dim);
    if (rp && cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor"))
      CHECK_STR_CONTAINS(tw_log, "partial_rotary_factor is ignored");
  }
  /* the plan transformers built (meta.json), whether config.json spells it out or not */
  const cJSON *lt = cJSON_GetObjectItemCaseSensitive(meta, "layer_types");
  CHECK_EQ(cJSON_GetArraySize(lt), c->n_layers);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, lt) {
    lh_layer_kind k = strcmp(e->valuestring, "linear_attention") ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;
    CHECK_MSG(c->layer_kind[i] == k, "%s: layer %d kind", name, i);
    i++;
  }
  /* slopes: the reference's own values (exact when stored or for the original formula; transformers
   * recomputes missing buffers with a float32 pow that may differ from powf by an ulp) */
  const cJSON *sl = cJSON_GetObjectItemCaseSensitive(meta, "lightning_slopes");
  int n_layers_with_slopes = 0, inexact = 0;
  cJSON_ArrayForEach(e, sl) {
    int l = atoi(e->string);
    CHECK(l >= 0 && l < c->n_layers && c->layer_kind[l] == LH_LAYER_LIGHTNING);
    if (l < 0 || l >= c->n_layers) continue;
    n_layers_with_slopes++;
    CHECK_EQ(cJSON_GetArraySize(e), c->n_heads);
    int h = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, e) {
      float want = (float)v->valuedouble, got = m->w.layers[l].slope[h];
      if (got != want) inexact++;
      CHECK_MSG(fabsf(got - want) <= 4e-7f * want, "%s: layer %d head %d slope %.9g vs %.9g", name, l, h, got, want);
      h++;
    }
  }
  CHECK_EQ(n_layers_with_slopes, c->n_lightning);
  if (original) CHECK_MSG(inexact == 0, "%s: %d slopes differ from the original formula", name, inexact);
  /* the length-aware scales the reference used (meta.json), exactly */
  const cJSON *ls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meta, "length_scale"), "scales");
  int n_scaled = 0;
  cJSON_ArrayForEach(e, ls) {
    int l = atoi(e->string);
    CHECK(l >= 0 && l < c->n_layers && c->layer_kind[l] == LH_LAYER_SOFTMAX);
    if (l < 0 || l >= c->n_layers) continue;
    n_scaled++;
    CHECK_EQ(cJSON_GetArraySize(e), c->n_heads);
    int h = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, e) {
      CHECK_MSG(m->w.layers[l].length_scale[h] == (float)v->valuedouble, "%s: layer %d head %d length scale", name,
                l, h);
      h++;
    }
  }
  CHECK_EQ(n_scaled, c->attn_length_scale_base ? c->n_softmax : 0);
  /* the reference files agree with the config */
  int bad = 0, T = count_ids(tw_path(dir, "ids.txt"), c->vocab_size, &bad);
  CHECK_MSG(T > 0 && bad == 0, "%s: ids.txt", name);
  CHECK_EQ(T, (int)num(meta, "tokens", -1));
  int G = count_ids(tw_path(dir, "greedy.txt"), c->vocab_size, &bad);
  CHECK_EQ(G, 16);
  CHECK_EQ(bad, 0);
  FILE *f = fopen(tw_path(dir, "logits.f32"), "rb");
  CHECK(f != NULL);
  if (f) {
    fseek(f, 0, SEEK_END);
    CHECK_EQ(ftell(f), (long)T * c->vocab_size * 4);
    fclose(f);
  }
  CHECK_EQ(strlen(lh_model_id(m)), 64);
  fprintf(stderr, "%s: ok (%s, T=%d, %d slopes recomputed not bit-identical)\n", name, mt, T, inexact);
out:
  lh_log_set_sink(NULL, NULL);
  lh_model_close(m);
  cJSON_Delete(cj);
  cJSON_Delete(meta);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(void) {
  lh_test_begin("test_load_fixtures");
  const char *src = getenv("LH_SOURCE_DIR");
  char root[1024];
  snprintf(root, sizeof root, "%s/tests/fixtures/engine", src ? src : ".");
  DIR *d = opendir(root);
  if (!d) LH_TEST_SKIP("no fixture folder %s", root);
  char *names[64];
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < 64) {
    char cfgp[1400];
    snprintf(cfgp, sizeof cfgp, "%s/%s/config.json", root, de->d_name);
    if (de->d_name[0] != '.' && lh_is_file(cfgp)) names[n++] = strdup(de->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, cmp_str);
  CHECK_MSG(n >= 5, "expected at least five fixtures in %s, found %d", root, n);
  for (int i = 0; i < n; i++) {
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
    check_fixture(dir, names[i]);
    free(names[i]);
  }
  return lh_test_end();
}
