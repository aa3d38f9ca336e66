/* test_load_decay_tables.c — transformers-saved lightning decay tables are derived data: they are
 * checked against the slopes at their own block length and then ignored.
 *
 * - tests/fixtures/engine/orig_decay_tables_block64 (tools/make_decay_table_fixture.py): the
 *   original-form orig_partial_rotary_gqa1 plus query/key/diagonal tables of block length 64 where
 *   the form implies 256. It loads without a warning and its logits on the CPU backend equal the
 *   folder without the tables, bit for bit, and meet the HF reference bound.
 * - Tables of another block length than an HF-form config's load; a table element that is off by
 *   more than the dtype's rounding is a warning naming the tensor, its block length and the
 *   element, in each of the three tables; a shape of another form is an error naming the tensor. */
#include "tests/engine_load/tw.h"

#include <math.h>

#include "engine/internal.h"
#include "engine/weights.h"
#include "util/buf.h"
#include "util/fs.h"

static lh_error err;

static int read_ids(const char *path, int32_t **ids) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int n = 0, cap = 1024;
  *ids = malloc(sizeof **ids * (size_t)cap);
  long v;
  while (fscanf(f, "%ld", &v) == 1) {
    if (n == cap) *ids = realloc(*ids, sizeof **ids * (size_t)(cap *= 2));
    (*ids)[n++] = (int32_t)v;
  }
  fclose(f);
  return n;
}

/* Every position's logits of ids on the CPU backend; NULL on failure. */
static float *logits_of(const char *dir, const int32_t *ids, int n, int *vocab) {
  lh_model_params p = lh_model_default_params();
  p.threads = 2;
  lh_model *m = NULL;
  lh_state *s = NULL;
  float *out = NULL;
  if (lh_model_open(dir, &p, &m, &err) || lh_state_new(m, &s, &err)) goto done;
  *vocab = lh_model_config(m)->vocab_size;
  out = malloc(sizeof *out * (size_t)n * (size_t)*vocab);
  if (lh_prefill(s, ids, n, NULL, out, &err)) {
    free(out);
    out = NULL;
  }
done:
  if (!out) fprintf(stderr, "%s: %s\n", dir, err.msg);
  lh_state_free(s);
  lh_model_close(m);
  return out;
}

static void test_fixture(void) {
  const char *src = getenv("LH_SOURCE_DIR");
  char with[1024], without[1024];
  snprintf(with, sizeof with, "%s/tests/fixtures/engine/orig_decay_tables_block64", src ? src : ".");
  snprintf(without, sizeof without, "%s/tests/fixtures/engine/orig_partial_rotary_gqa1", src ? src : ".");
  int32_t *ids = NULL;
  int n = read_ids(tw_path(with, "ids.txt"), &ids);
  CHECK(n > 256); /* more than one block of the engine's own length, several of the tables' */
  tw_log_begin();
  int v1 = 0, v2 = 0;
  float *a = logits_of(with, ids, n, &v1);
  CHECK_MSG(a != NULL, "the folder with block-64 tables must load: %s", err.msg);
  CHECK_MSG(tw_log_len == 0, "unexpected warnings: %s", tw_log);
  lh_log_set_sink(NULL, NULL);
  float *b = logits_of(without, ids, n, &v2);
  CHECK(b != NULL);
  if (a && b) {
    CHECK_EQ(v1, v2);
    CHECK_MSG(!memcmp(a, b, sizeof *a * (size_t)n * (size_t)v1), "logits differ from the folder without tables");
    /* and the HF reference (the same function: the tables are derived) */
    lh_buf ref = {0};
    CHECK_EQ(lh_file_read(tw_path(with, "logits.f32"), 1u << 28, &ref, &err), LH_OK);
    CHECK_EQ(ref.len, sizeof(float) * (size_t)n * (size_t)v1);
    if (ref.len == sizeof(float) * (size_t)n * (size_t)v1) {
      double rel = lh_rel_l2(a, (const float *)ref.data, (size_t)n * (size_t)v1);
      CHECK_MSG(rel <= 1e-4, "rel L2 against HF %.3g", rel);
    }
    lh_buf_free(&ref);
  }
  free(a);
  free(b);
  free(ids);
}

/* An HF-form tiny model (block_size 4, heads 2) with tables of block length TB for layer 0. */
static lh_status open_with_tables(const char *name, int TB, int bad_table, const int64_t *shape_override, int nd) {
  tw_model tm = {0};
  tw_model_init(&tm, 21);
  lh_config cfg = {0};
  snprintf(cfg.model_type, sizeof cfg.model_type, "minimax");
  cfg.n_heads = tm.heads, cfg.n_layers = tm.layers;
  float slope[LH_MAX_HEADS];
  lh_lightning_slopes(&cfg, 0, slope);
  int H = tm.heads;
  tw_tensor *q = tw_add(&tm, "model.layers.0.self_attn.query_decay", 3, H, TB, 1, &(uint64_t){1});
  tw_tensor *k = tw_add(&tm, "model.layers.0.self_attn.key_decay", 3, H, TB, 1, &(uint64_t){1});
  tw_tensor *d = tw_add(&tm, "model.layers.0.self_attn.diagonal_decay", 3, 1, H, TB, &(uint64_t){1});
  d->ndim = 4, d->shape[3] = TB, d->n = (int64_t)H * TB * TB;
  d->values = realloc(d->values, sizeof(float) * (size_t)d->n);
  for (int h = 0; h < H; h++)
    for (int j = 0; j < TB; j++) {
      q->values[h * TB + j] = expf(-slope[h] * (float)(j + 1));
      k->values[h * TB + j] = expf(-slope[h] * (float)(TB - j - 1));
      for (int i = 0; i < TB; i++) d->values[(h * TB + i) * TB + j] = i >= j ? expf(-slope[h] * (float)(i - j)) : 0;
    }
  if (bad_table >= 0) {
    tw_tensor *t = bad_table == 0 ? q : bad_table == 1 ? k : d;
    t->values[t->n - 2] *= 1.01f; /* element n-2, 1% off: far beyond f32 rounding */
  }
  if (shape_override) {
    q->ndim = nd;
    q->n = 1;
    for (int i = 0; i < nd; i++) q->shape[i] = shape_override[i], q->n *= shape_override[i];
    q->values = realloc(q->values, sizeof(float) * (size_t)q->n);
    for (int64_t i = 0; i < q->n; i++) q->values[i] = 0.5f;
  }
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", tw_mkdir(name));
  tw_write_config(&tm, dir, "");
  tw_write_model(&tm, dir, 0, 1);
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  memset(&err, 0, sizeof err);
  tw_log_begin();
  lh_status st = lh_model_open(dir, &p, &m, &err);
  lh_log_set_sink(NULL, NULL);
  lh_model_close(m);
  tw_model_free(&tm);
  return st;
}

static void test_block_lengths(void) {
  /* the config's block_size is 4; tables of 4, 8 and 1 load without a warning */
  static const int lengths[] = {4, 8, 1, 13};
  for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
    char name[32];
    snprintf(name, sizeof name, "tables_%d", lengths[i]);
    CHECK_MSG(open_with_tables(name, lengths[i], -1, NULL, 0) == LH_OK, "block %d: %s", lengths[i], err.msg);
    CHECK_MSG(tw_log_len == 0, "block %d: unexpected warnings: %s", lengths[i], tw_log);
  }
  static const char *const names[] = {"query_decay", "key_decay", "diagonal_decay"};
  for (int t = 0; t < 3; t++) {
    char name[32];
    snprintf(name, sizeof name, "off_%d", t);
    CHECK_EQ(open_with_tables(name, 8, t, NULL, 0), LH_OK);
    char want[160];
    snprintf(want, sizeof want, "'model.layers.0.self_attn.%s' does not match the slopes at its block length 8",
             names[t]);
    CHECK_STR_CONTAINS(tw_log, want);
    snprintf(want, sizeof want, "(element %d is", t == 2 ? 2 * 64 - 2 : 2 * 8 - 2);
    CHECK_STR_CONTAINS(tw_log, want);
  }
  /* shapes of another form */
  const int64_t s1[3] = {2, 8, 2}, s2[3] = {3, 8, 1}, s3[2] = {2, 8};
  CHECK_EQ(open_with_tables("shape1", 8, -1, s1, 3), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'model.layers.0.self_attn.query_decay' has shape [2, 8, 2] but the config needs [2, 8, 1]");
  CHECK_EQ(open_with_tables("shape2", 8, -1, s2, 3), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'model.layers.0.self_attn.query_decay' has shape [3, 8, 1]");
  CHECK_EQ(open_with_tables("shape3", 8, -1, s3, 2), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "a decay table must be [H, B, 1]");
}

int main(void) {
  lh_test_begin("test_load_decay_tables");
  test_fixture();
  test_block_lengths();
  return lh_test_end();
}
