/* test_load_yarn.c — YaRN (rope_scaling rope_type "yarn") as a model, beyond its numbers (which
 * test_engine_parity checks against transformers on the two YaRN fixtures in tests/fixtures/engine):
 * - the model id carries the YaRN keys: the fixture with its rope_scaling removed, or with another
 *   factor, is another model (checkpoints and cached answers of one are never reused for the other);
 * - the same folder opened twice has the same id;
 * - the table differs from plain RoPE only where the ramp says: with betas that keep every pair
 *   but the slowest, the other frequencies are bit-equal to lh_rope_inv_freq's and the slowest is
 *   the plain one over factor (the haul-tiny setting, docs/design.md);
 * - lh_rope_table gives 1 and the plain table when YaRN is off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/engine.h"
#include "kernels/cpu/ops.h"
#include "tests/engine_load/tw.h"
#include "tests/test.h"

static const char *fixture(void) {
  static char p[4096];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(p, sizeof p, "%s/tests/fixtures/engine/orig_yarn_partial_gqa2", src ? src : ".");
  return p;
}

/* A folder with the fixture's weights (a symlink) and its config.json with rope_scaling replaced
 * by scaling (NULL: removed). */
static const char *variant(const char *name, const char *scaling) {
  const char *dir = tw_mkdir(name);
  char src[4200], buf[8192];
  snprintf(src, sizeof src, "%s/model.safetensors", fixture());
  CHECK(symlink(src, tw_path(dir, "model.safetensors")) == 0);
  snprintf(src, sizeof src, "%s/config.json", fixture());
  FILE *f = fopen(src, "rb");
  CHECK(f != NULL);
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  char *at = strstr(buf, "\"rope_scaling\"");
  CHECK(at != NULL);
  if (!at) return dir;
  char *end = strchr(at, '}');
  char out[8192];
  snprintf(out, sizeof out, "%.*s%s%s", (int)(at - buf), buf, scaling ? scaling : "\"rope_scaling\": null",
           end + 1);
  tw_write_text(tw_path(dir, "config.json"), out);
  return dir;
}

static char *id_of(const char *dir) {
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  lh_error err = {0};
  CHECK_MSG(lh_model_open(dir, &p, &m, &err) == LH_OK, "%s: %s", dir, err.msg);
  char *id = m ? strdup(lh_model_id(m)) : strdup("");
  lh_model_close(m);
  return id;
}

static void test_ids(void) {
  char *a = id_of(fixture()), *a2 = id_of(fixture());
  char *plain = id_of(variant("plain", NULL));
  char *other = id_of(variant("factor4", "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
                                         "\"original_max_position_embeddings\": 32}"));
  CHECK(*a && !strcmp(a, a2));
  CHECK_MSG(strcmp(a, plain), "YaRN and plain RoPE share the id %s", a);
  CHECK_MSG(strcmp(a, other), "two YaRN factors share the id %s", a);
  CHECK(strcmp(plain, other));
  free(a), free(a2), free(plain), free(other);
}

static void test_tables(void) {
  /* haul-tiny's RoPE (8 dims, theta 1e7) with the setting of docs/design.md: only the slowest pair
   * (fewer than 1.5 turns over 32768 positions) is divided */
  float plain[4], yarn[4];
  lh_rope_inv_freq(1e7, 8, plain);
  lh_rope_inv_freq_yarn(1e7, 8, 32.0, 32768, 1.5, 1.0, 1, yarn);
  for (int i = 0; i < 3; i++) CHECK_MSG(plain[i] == yarn[i], "pair %d: %.9g vs %.9g", i, plain[i], yarn[i]);
  CHECK_MSG(yarn[3] == 1.0f / (32.0f * (1.0f / plain[3])) || yarn[3] == plain[3] / 32.0f, "slowest: %.9g vs %.9g",
            yarn[3], plain[3] / 32);
  /* off: the plain table and a factor of 1 */
  lh_config c = {0};
  c.rope_theta = 1e7;
  c.rotary_dim = 8;
  c.rope_attention_factor = 5.0f; /* ignored while YaRN is off */
  float t[4];
  CHECK(lh_rope_table(&c, t) == 1.0f);
  CHECK(!memcmp(t, plain, sizeof t));
  c.rope_yarn_factor = 32, c.rope_yarn_original_max = 32768, c.rope_yarn_beta_fast = 1.5, c.rope_yarn_beta_slow = 1;
  c.rope_yarn_truncate = 1;
  CHECK(lh_rope_table(&c, t) == 5.0f);
  CHECK(!memcmp(t, yarn, sizeof t));
}

int main(void) {
  lh_test_begin("test_load_yarn");
  test_ids();
  test_tables();
  return lh_test_end();
}
