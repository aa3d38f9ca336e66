/* test_store_identity.c — a job's identity (the runner's digest of its inputs) decides whether a
 * rerun reuses its answer: the same identity leaves the job alone (existed 1), another one
 * (existed 2) sends a queued, done, failed or dead-owner job back to queued with its result, error,
 * manifest and token count dropped and its checkpoints kept, and is refused (LH_EBUSY) while a live
 * owner runs it. A different request under the same custom_id stays LH_EINVAL. */
#include "tests/test.h"

#include "store/store.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"

#define MODEL "7e57000000000000000000000000000000000000000000000000000000000002"

static lh_store *S;
static char PATH[600];

static int add(int64_t b, const char *cid, const char *request, const char *identity, int64_t *id, lh_error *e) {
  lh_store_job_spec sp = {cid, request, NULL, MODEL, identity};
  int existed = -1;
  lh_status st = lh_store_job_add(S, b, &sp, id, &existed, e);
  return st == LH_OK ? existed : -(int)st - 10;
}

static void info(int64_t id, lh_store_job_info *in) {
  lh_error e;
  CHECK_MSG(lh_store_job_get(S, id, in, &e) == LH_OK, "job_get: %s", e.msg);
}

static int64_t count(const char *fmt, int64_t id) {
  char sql[256];
  snprintf(sql, sizeof sql, fmt, (long long)id);
  return raw_int(PATH, sql);
}

/* A checkpoint at position 2 produced by job id: it becomes the job's resume point. */
static int64_t checkpoint(int64_t job) {
  lh_state_layout lay;
  memset(&lay, 0, sizeof lay);
  lay.n_lightning = 1;
  lay.lightning_bytes = 16;
  lay.n_softmax = 1;
  lay.kv_dtype = LH_F32;
  lay.kv_row_bytes = 8;
  lay.vocab_size = 4;
  lh_store_cursor cur;
  lh_store_cursor_init(&cur, MODEL, job);
  const int32_t tok[2] = {1, 2};
  lh_store_cursor_feed(&cur, tok, 2);
  lh_store_ckpt *ck;
  lh_error e;
  int64_t id = 0;
  CHECK(lh_store_ckpt_new(&lay, &cur, &ck, &e) == LH_OK);
  memset(lh_store_ckpt_lightning(ck, 0), 1, 16);
  memset(lh_store_ckpt_kv(ck, 0), 2, 16);
  memset(lh_store_ckpt_logits(ck), 0, 16);
  CHECK_MSG(lh_store_ckpt_write(S, ck, &id, &e) == LH_OK, "checkpoint: %s", e.msg);
  lh_store_ckpt_free(ck);
  return id;
}

int main(void) {
  lh_test_begin("test_store_identity");
  snprintf(PATH, sizeof PATH, "%s/identity.db", lh_test_tmpdir());
  lh_store_params sp = lh_store_default_params();
  sp.heartbeat = 0;
  S = setup_store_open(PATH, &sp);
  lh_error e;
  int64_t b, j, jx;
  lh_store_job_info in;
  CHECK(lh_store_batch_put(S, "nightly", &b, &e) == LH_OK);
  CHECK(lh_store_model_put(S, MODEL, "toy", NULL, &e) == LH_OK);

  /* New, then the same identity, then none given: untouched. */
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-1", &j, &e), 0);
  info(j, &in);
  CHECK(in.identity && !strcmp(in.identity, "id-1"));
  lh_store_job_info_clear(&in);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-1", &jx, &e), 1);
  CHECK_EQ(jx, j);
  CHECK_EQ(add(b, "q", "{\"q\":1}", NULL, &jx, &e), 1);
  info(j, &in);
  CHECK(in.identity && !strcmp(in.identity, "id-1"));
  lh_store_job_info_clear(&in);

  /* Queued with a new identity: takes it, stays queued. */
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-2", &jx, &e), 2);
  CHECK_EQ(jx, j);
  info(j, &in);
  CHECK(!strcmp(in.identity, "id-2"));
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  lh_store_job_info_clear(&in);

  /* Done, with documents, tokens and a checkpoint: the same identity keeps the answer ... */
  CHECK(lh_store_job_claim(S, j, &e) == LH_OK);
  lh_store_doc docs[1] = {{"repo.tar.gz", 100, "aa", 0, 2, NULL}};
  CHECK(lh_store_job_set_documents(S, j, docs, 1, &e) == LH_OK);
  CHECK(lh_store_job_set_tokens(S, j, 2, &e) == LH_OK);
  int64_t ck = checkpoint(j);
  CHECK(ck > 0);
  CHECK(lh_store_job_done(S, j, "{\"answer\":\"old\"}", "m", 1, &e) == LH_OK);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-2", &jx, &e), 1);
  info(j, &in);
  CHECK_EQ(in.state, LH_JOB_DONE);
  lh_store_job_info_clear(&in);
  /* ... another identity (the archive changed) drops it and queues the job again. */
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-3", &jx, &e), 2);
  CHECK_EQ(jx, j);
  info(j, &in);
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  CHECK(!strcmp(in.identity, "id-3"));
  CHECK_EQ(in.has_result, 0);
  CHECK_EQ(in.attempts, 0);
  CHECK_EQ(in.tokens_total, -1);
  CHECK_EQ(in.finished_ms, 0);
  CHECK_EQ(in.ckpt_id, ck); /* the checkpoints stay: content-addressed, reused where the prefix matches */
  CHECK(in.owner == NULL);
  lh_store_job_info_clear(&in);
  CHECK_EQ(count("SELECT count(*) FROM documents WHERE job_id = %lld", j), 0);
  CHECK_EQ(count("SELECT count(*) FROM results WHERE job_id = %lld", j), 0);
  CHECK_EQ(count("SELECT count(*) FROM checkpoints WHERE id = %lld", ck), 1);
  lh_buf res = {0};
  CHECK(lh_store_job_result(S, j, &res, NULL, &e) == LH_ENOTFOUND);

  /* Failed: a new identity clears the error. */
  CHECK(lh_store_job_claim(S, j, &e) == LH_OK);
  CHECK(lh_store_job_fail(S, j, "no such archive", &e) == LH_OK);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-3", &jx, &e), 1);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-4", &jx, &e), 2);
  info(j, &in);
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  CHECK(in.error == NULL);
  CHECK_EQ(in.damaged, 0);
  lh_store_job_info_clear(&in);
  CHECK_EQ(count("SELECT count(*) FROM jobs WHERE id = %lld AND error_crc32c IS NOT NULL", j), 0);

  /* Running under a live owner (this process): refused, nothing changes. */
  CHECK(lh_store_job_claim(S, j, &e) == LH_OK);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-5", &jx, &e), -(int)LH_EBUSY - 10);
  CHECK_STR_CONTAINS(e.msg, "has new inputs but is running under");
  CHECK_STR_CONTAINS(e.msg, "('q')");
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-4", &jx, &e), 1); /* the same identity is fine meanwhile */
  info(j, &in);
  CHECK_EQ(in.state, LH_JOB_RUNNING);
  CHECK(!strcmp(in.identity, "id-4"));
  lh_store_job_info_clear(&in);

  /* Running under a dead owner (another machine, silent past the lease): queued with the new one. */
  char sql[256];
  snprintf(sql, sizeof sql,
           "UPDATE jobs SET owner_host = 'elsewhere boot ns', owner_pid = 1, owner_start = 1, heartbeat_ms = 0 "
           "WHERE id = %lld",
           (long long)j);
  CHECK(raw_sql(PATH, sql) == SQLITE_OK);
  CHECK_EQ(add(b, "q", "{\"q\":1}", "id-5", &jx, &e), 2);
  info(j, &in);
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  CHECK(in.owner == NULL);
  CHECK(!strcmp(in.identity, "id-5"));
  lh_store_job_info_clear(&in);
  CHECK_EQ(count("SELECT count(*) FROM jobs WHERE id = %lld AND owner_host IS NULL AND heartbeat_ms IS NULL", j), 1);

  /* The request itself is fixed per custom_id: a different one is refused, identity or not. */
  CHECK_EQ(add(b, "q", "{\"q\":2}", "id-6", &jx, &e), -(int)LH_EINVAL - 10);
  CHECK_STR_CONTAINS(e.msg, "custom_id 'q' is already in this batch with a different request");
  info(j, &in);
  CHECK(!strcmp(in.identity, "id-5"));
  lh_store_job_info_clear(&in);

  /* A job stored without an identity (as a schema-1 store did) takes the first one given as a
   * change: its answer may be stale. */
  int64_t k;
  CHECK_EQ(add(b, "old", "{\"q\":3}", NULL, &k, &e), 0);
  CHECK(lh_store_job_claim(S, k, &e) == LH_OK);
  CHECK(lh_store_job_done(S, k, "{}", NULL, 0, &e) == LH_OK);
  info(k, &in);
  CHECK(in.identity == NULL);
  lh_store_job_info_clear(&in);
  CHECK_EQ(add(b, "old", "{\"q\":3}", NULL, &jx, &e), 1);
  CHECK_EQ(add(b, "old", "{\"q\":3}", "id-x", &jx, &e), 2);
  info(k, &in);
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  lh_store_job_info_clear(&in);

  lh_buf_free(&res);
  lh_store_close(S);
  return lh_test_end();
}
