/* test_shard.c — lh_shard_from_env maps a Slurm array task to its shard: arrays from 0, from 1,
 * with steps, without SLURM_ARRAY_TASK_COUNT; and refuses unevenly spaced index values, ids
 * outside the array and malformed values. A shard record (OUT/shard-I-of-N.json) reads back as
 * written, with the batch's absolute path and its settings (compared key by key, a record without
 * them agreeing with any), and a damaged one is refused naming the field. The variable sets are the ones Slurm 22.05 (Debian 12's
 * slurm-wlm) set in the tasks of `sbatch --array=...` for the forms named beside them. */
#include "jobs/shard.h"

#include <stdio.h>
#include <string.h>

#include "jobs/outnames.h"
#include "util/fs.h"

#include "tests/test.h"

static const char *const vars[] = {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                                   "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"};

/* Set the five variables (NULL: unset) and read the shard. */
static int shard(const char *id, const char *count, const char *min, const char *max, const char *step, int *i,
                 int *n, char *why) {
  const char *v[5] = {id, count, min, max, step};
  for (int k = 0; k < 5; k++) {
    if (v[k]) setenv(vars[k], v[k], 1);
    else unsetenv(vars[k]);
  }
  *i = -7;
  *n = -7;
  return lh_shard_from_env(i, n, why, 256);
}

int main(void) {
  lh_test_begin("test_shard");
  int i, n;
  char why[256];

  /* not an array task: nothing set, nothing changed */
  CHECK_EQ(shard(NULL, NULL, NULL, NULL, NULL, &i, &n, why), 0);
  CHECK_EQ(i, -7);
  CHECK_EQ(n, -7);
  CHECK(why[0] == 0);
  CHECK_EQ(shard("", "4", "0", "3", "1", &i, &n, why), 0);

  /* --array=0-3 */
  CHECK_EQ(shard("2", "4", "0", "3", "1", &i, &n, why), 1);
  CHECK_EQ(i, 2);
  CHECK_EQ(n, 4);
  CHECK_STR_CONTAINS(why, "shard 2/4");
  CHECK_STR_CONTAINS(why, "SLURM_ARRAY_TASK_ID=2");
  /* --array=1-4: ids 1..4 are shards 0..3 */
  CHECK_EQ(shard("1", "4", "1", "4", "1", &i, &n, why), 1);
  CHECK_EQ(i, 0);
  CHECK_EQ(n, 4);
  CHECK_EQ(shard("4", "4", "1", "4", "1", &i, &n, why), 1);
  CHECK_EQ(i, 3);
  /* --array=10-16:2: ids 10 12 14 16 */
  CHECK_EQ(shard("14", "4", "10", "16", "2", &i, &n, why), 1);
  CHECK_EQ(i, 2);
  CHECK_EQ(n, 4);
  CHECK_STR_CONTAINS(why, "10-16:2");
  /* --array=0-15%4 (a throttle changes nothing) */
  CHECK_EQ(shard("15", "16", "0", "15", "1", &i, &n, why), 1);
  CHECK_EQ(i, 15);
  CHECK_EQ(n, 16);
  /* without COUNT (MIN/MAX/STEP give it) */
  CHECK_EQ(shard("3", NULL, "1", "4", NULL, &i, &n, why), 1);
  CHECK_EQ(i, 2);
  CHECK_EQ(n, 4);
  /* only ID and COUNT: ids from 0 */
  CHECK_EQ(shard("2", "4", NULL, NULL, NULL, &i, &n, why), 1);
  CHECK_EQ(i, 2);
  CHECK_EQ(n, 4);
  /* --array=5: one task, the whole batch */
  CHECK_EQ(shard("5", "1", "5", "5", "1", &i, &n, why), 1);
  CHECK_EQ(i, 0);
  CHECK_EQ(n, 1);

  /* --array=1,2,9: three values, not evenly spaced */
  CHECK_EQ(shard("9", "3", "1", "9", "1", &i, &n, why), -1);
  CHECK_STR_CONTAINS(why, "not evenly spaced");
  CHECK_STR_CONTAINS(why, "--shard I/N");
  CHECK_EQ(i, -7);
  /* --array=1-7:2,20 */
  CHECK_EQ(shard("20", "5", "1", "20", "1", &i, &n, why), -1);
  CHECK_EQ(shard("20", "5", "1", "20", "2", &i, &n, why), -1);
  /* an id that is not one of the array's values */
  CHECK_EQ(shard("13", "4", "10", "16", "2", &i, &n, why), -1);
  CHECK_STR_CONTAINS(why, "SLURM_ARRAY_TASK_ID=13");
  CHECK_EQ(shard("0", "4", "1", "4", "1", &i, &n, why), -1);
  CHECK_EQ(shard("4", "4", NULL, NULL, NULL, &i, &n, why), -1);
  /* malformed values */
  CHECK_EQ(shard("x", "4", "0", "3", "1", &i, &n, why), -1);
  CHECK_STR_CONTAINS(why, "SLURM_ARRAY_TASK_ID=x");
  CHECK_EQ(shard("1", "4", "0", "3", "0", &i, &n, why), -1);
  CHECK_EQ(shard("1", "-4", "0", "3", "1", &i, &n, why), -1);
  CHECK_EQ(shard("1", "4 ", "0", "3", "1", &i, &n, why), -1);
  CHECK_EQ(shard("1", "0", NULL, NULL, NULL, &i, &n, why), -1);
  /* the number of shards cannot be known */
  CHECK_EQ(shard("1", NULL, "0", NULL, "1", &i, &n, why), -1);
  CHECK_STR_CONTAINS(why, "number of shards");
  /* max below min */
  CHECK_EQ(shard("1", NULL, "3", "1", "1", &i, &n, why), -1);
  /* why may be NULL */
  for (int k = 0; k < 5; k++) unsetenv(vars[k]);
  setenv("SLURM_ARRAY_TASK_ID", "1", 1);
  setenv("SLURM_ARRAY_TASK_COUNT", "2", 1);
  CHECK_EQ(lh_shard_from_env(&i, &n, NULL, 0), 1);
  CHECK_EQ(i, 1);

  /* the record */
  const char *dir = lh_test_tmpdir();
  char batch[600], rec_path[600], name[64];
  snprintf(batch, sizeof batch, "%s/b.jsonl", dir);
  CHECK(lh_file_write_atomic(batch, "{}\n", 3, NULL) == LH_OK);
  lh_outname_build(LH_OUTNAME_RECORD, 2, 4, name, sizeof name);
  CHECK(!strcmp(name, "shard-2-of-4.json"));
  snprintf(rec_path, sizeof rec_path, "%s/%s", dir, name);
  const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
  cJSON *settings = cJSON_Parse("{\"chat_template\":\"minimax\",\"chunk\":4096,\"end_ids\":[2,3]}");
  if (chdir(dir) == 0) {
    lh_buf b = {0};
    const char *model = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    CHECK(lh_shard_record_render("b.jsonl", sha, model, settings, 2, 4, &b, NULL) == LH_OK); /* relative: made absolute */
    CHECK(lh_file_write_atomic(rec_path, b.data, b.len, NULL) == LH_OK);
    lh_buf_free(&b);
    lh_shard_record r;
    CHECK(lh_shard_record_read(rec_path, &r, NULL) == LH_OK);
    CHECK_EQ(r.index, 2);
    CHECK_EQ(r.count, 4);
    CHECK(r.batch[0] == '/' && strstr(r.batch, "/b.jsonl"));
    CHECK(!strcmp(r.batch_sha256, sha));
    CHECK(!strcmp(r.model_id, model));
    CHECK(!strcmp(r.settings, "{\"chat_template\":\"minimax\",\"chunk\":4096,\"end_ids\":[2,3]}"));
    /* settings compared key by key, the first that differs named with both values; a record
     * without settings (an older run's) differs from none */
    char key[64], va[64], vb[64];
    lh_shard_record o = r;
    CHECK_EQ(lh_shard_settings_differ(&r, &o, key, va, vb, sizeof va), 0);
    snprintf(o.settings, sizeof o.settings, "{\"end_ids\":[2,3],\"chunk\":2048,\"chat_template\":\"minimax\"}");
    CHECK_EQ(lh_shard_settings_differ(&r, &o, key, va, vb, sizeof va), 1);
    CHECK(!strcmp(key, "chunk") && !strcmp(va, "4096") && !strcmp(vb, "2048"));
    snprintf(o.settings, sizeof o.settings, "{\"chat_template\":\"minimax\",\"chunk\":4096,\"end_ids\":[2,3],"
             "\"max_tokens\":9}");
    CHECK_EQ(lh_shard_settings_differ(&r, &o, key, va, vb, sizeof va), 1);
    CHECK(!strcmp(key, "max_tokens") && !strcmp(va, "none") && !strcmp(vb, "9"));
    o.settings[0] = 0;
    CHECK_EQ(lh_shard_settings_differ(&r, &o, key, va, vb, sizeof va), 0);
    lh_error e;
    CHECK(lh_shard_record_render("nope.jsonl", sha, model, settings, 0, 2, &b, &e) == LH_ENOTFOUND);
    CHECK_STR_CONTAINS(e.msg, "nope.jsonl");
    const char *bad = "{\"shard\":2,\"of\":4,\"batch\":\"/x\",\"batch_sha256\":\"XYZ\"}\n";
    CHECK(lh_file_write_atomic(rec_path, bad, strlen(bad), NULL) == LH_OK);
    CHECK(lh_shard_record_read(rec_path, &r, &e) == LH_EFORMAT);
    CHECK_STR_CONTAINS(e.msg, "batch_sha256");
    /* a record without model_id reads with an empty one; numbers that are no index or count are refused */
    char rec[256];
    snprintf(rec, sizeof rec, "{\"shard\":1,\"of\":2,\"batch\":\"/x\",\"batch_sha256\":\"%s\"}\n", sha);
    CHECK(lh_file_write_atomic(rec_path, rec, strlen(rec), NULL) == LH_OK);
    CHECK(lh_shard_record_read(rec_path, &r, &e) == LH_OK);
    CHECK(r.index == 1 && r.count == 2 && !r.model_id[0]);
    CHECK(!r.settings[0]);
    static const char *const cases[][4] = {{"1", "2", ",\"model_id\":\"XYZ\"", "model_id"},
                                           {"1", "2", ",\"model_id\":7", "model_id"},
                                           {"1", "2", ",\"settings\":[1]", "\"settings\" is not an object"},
                                           {"1e300", "2", "", "\"shard\""}, {"0.5", "2", "", "\"shard\""},
                                           {"1", "-2", "", "\"of\""}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
      snprintf(rec, sizeof rec, "{\"shard\":%s,\"of\":%s,\"batch\":\"/x\",\"batch_sha256\":\"%s\"%s}\n", cases[k][0],
               cases[k][1], sha, cases[k][2]);
      CHECK(lh_file_write_atomic(rec_path, rec, strlen(rec), NULL) == LH_OK);
      CHECK_MSG(lh_shard_record_read(rec_path, &r, &e) == LH_EFORMAT, "%s", rec);
      CHECK_STR_CONTAINS(e.msg, cases[k][3]);
    }
    CHECK(lh_file_write_atomic(rec_path, "[1]", 3, NULL) == LH_OK);
    CHECK(lh_shard_record_read(rec_path, &r, &e) == LH_EFORMAT);
    CHECK_STR_CONTAINS(e.msg, rec_path);
    snprintf(rec_path, sizeof rec_path, "%s/none.json", dir);
    CHECK(lh_shard_record_read(rec_path, &r, &e) == LH_ENOTFOUND);
  } else {
    CHECK_MSG(0, "cannot enter %s", dir);
  }
  cJSON_Delete(settings);
  return lh_test_end();
}
