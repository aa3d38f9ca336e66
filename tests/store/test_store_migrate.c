/* test_store_migrate.c — a store written by the schema-1 code (tests/fixtures/store/v1.db, made by
 * make_v1.sh from the schema-1 sources) opens and migrates to schema 2: every job, result, error,
 * document and checkpoint is still there; the existing result rows and error texts got checksums
 * equal to CRC-32C computed here from the documented layout, so they read back checked (a byte
 * changed afterwards is caught); the new columns and table work; a second open migrates nothing;
 * a read-only open of the schema-1 file is refused with what to do. */
#include "tests/test.h"

#include "store/store.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"
#include "util/fs.h"

static const char *FIXTURE = "tests/fixtures/store/v1.db";

static int64_t job(lh_store *s, const char *cid) {
  int64_t id = 0;
  lh_error e;
  CHECK_MSG(lh_store_job_find(s, 0, cid, &id, &e) == LH_OK, "find %s: %s", cid, e.msg);
  return id;
}

static int n_docs;
static lh_status doc_cb(void *user, const lh_store_doc *d, lh_error *err) {
  (void)user, (void)err, (void)d;
  n_docs++;
  return LH_OK;
}

int main(void) {
  lh_test_begin("test_store_migrate");
  char path[600], sql[256];
  snprintf(path, sizeof path, "%s/v1.db", lh_test_tmpdir());
  lh_buf raw = {0};
  lh_error e;
  if (lh_file_read(FIXTURE, 1 << 20, &raw, &e) != LH_OK) LH_TEST_SKIP("cannot read %s: %s", FIXTURE, e.msg);
  CHECK(lh_file_write_atomic(path, raw.data, raw.len, &e) == LH_OK);
  lh_buf_free(&raw);
  CHECK_EQ(raw_int(path, "PRAGMA user_version"), 1);
  CHECK_EQ(raw_int(path, "SELECT count(*) FROM sqlite_schema WHERE name = 'file_digests'"), 0);

  /* Read-only: refused, nothing written. */
  lh_store_params sp = lh_store_default_params();
  sp.heartbeat = 0;
  lh_store_params ro = sp;
  ro.read_only = 1;
  lh_store *s = NULL;
  CHECK(lh_store_open(path, &ro, &s, &e) == LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(e.msg, "open it writable once");
  CHECK_EQ(raw_int(path, "PRAGMA user_version"), 1);

  /* Writable: migrated. */
  s = setup_store_open(path, &sp);
  CHECK_EQ(lh_store_schema_version(s), 2);
  CHECK_EQ(LH_STORE_SCHEMA_VERSION, 2);
  CHECK_EQ(raw_int(path, "PRAGMA user_version"), 2);
  CHECK_EQ(raw_int(path, "SELECT count(*) FROM jobs"), 5);

  int64_t blob_id = job(s, "done-blob"), plain = job(s, "done-plain"), failed = job(s, "failed"),
          queued = job(s, "queued"), running = job(s, "running");
  const char *cids[5] = {"done-blob", "done-plain", "failed", "queued", "running"};
  const lh_job_state want[5] = {LH_JOB_DONE, LH_JOB_DONE, LH_JOB_FAILED, LH_JOB_QUEUED, LH_JOB_RUNNING};
  for (int i = 0; i < 5; i++) {
    lh_store_job_info in;
    CHECK(lh_store_job_get(s, job(s, cids[i]), &in, &e) == LH_OK);
    CHECK_MSG(in.state == want[i], "%s is %s", cids[i], lh_job_state_name(in.state));
    CHECK_MSG(in.damaged == 0, "%s damaged after the migration", cids[i]);
    CHECK(in.identity == NULL);
    if (i == 2) CHECK(in.error && !strcmp(in.error, "the archive is missing"));
    if (i == 0) CHECK_EQ(in.tokens_total, 4);
    if (i == 0) CHECK_EQ(in.tokens_done, 4);
    lh_store_job_info_clear(&in);
  }

  /* The checksums the migration computed are the documented CRC-32C of the rows. */
  const char blob[5] = {1, 2, 0, 3, 4};
  snprintf(sql, sizeof sql, "SELECT crc32c FROM results WHERE job_id = %lld", (long long)blob_id);
  CHECK_EQ(raw_int(path, sql), (int64_t)result_crc_expect(blob_id, "{\"answer\":\"42\"}", blob, 5));
  snprintf(sql, sizeof sql, "SELECT crc32c FROM results WHERE job_id = %lld", (long long)plain);
  CHECK_EQ(raw_int(path, sql), (int64_t)result_crc_expect(plain, "{\"answer\":\"plain\"}", NULL, 0));
  snprintf(sql, sizeof sql, "SELECT error_crc32c FROM jobs WHERE id = %lld", (long long)failed);
  CHECK_EQ(raw_int(path, sql), (int64_t)error_crc_expect(failed, "the archive is missing"));
  CHECK_EQ(raw_int(path, "SELECT count(*) FROM jobs WHERE error IS NULL AND error_crc32c IS NOT NULL"), 0);

  lh_buf json = {0}, bl = {0};
  CHECK(lh_store_job_result(s, blob_id, &json, &bl, &e) == LH_OK);
  CHECK(json.data && !strcmp(json.data, "{\"answer\":\"42\"}"));
  CHECK(bl.len == 5 && !memcmp(bl.data, blob, 5));
  json.len = bl.len = 0;
  CHECK(lh_store_job_result(s, plain, &json, &bl, &e) == LH_OK);
  CHECK(!strcmp(json.data, "{\"answer\":\"plain\"}"));
  CHECK_EQ(bl.len, 0);
  CHECK(lh_store_job_documents(s, blob_id, doc_cb, NULL, &e) == LH_OK);
  CHECK_EQ(n_docs, 2);

  lh_store_verify_report r;
  CHECK(lh_store_verify(s, 0, &r, &e) == LH_OK);
  CHECK(r.db_ok);
  CHECK_EQ(r.checkpoints, 1);
  CHECK_EQ(r.damaged, 0);
  CHECK_EQ(r.results, 2);
  CHECK_EQ(r.errors, 1);
  CHECK_EQ(r.damaged_jobs, 0);
  CHECK_MSG(r.problems.len == 0, "problems: %s", r.problems.data);
  lh_buf_free(&r.problems);

  /* The migrated rows are checked on read: one changed byte is caught. */
  CHECK(raw_flip(path, "results", "json", plain, 3, 0x04) == SQLITE_OK);
  json.len = 0;
  CHECK(lh_store_job_result(s, plain, &json, NULL, &e) == LH_ECORRUPT);
  CHECK_STR_CONTAINS(e.msg, "('done-plain')");

  /* The new parts work on the migrated file: identities, the stale claim. */
  lh_store_job_spec spec = {"done-blob", "{\"q\":1}", "docs", NULL, "identity-1"};
  int64_t jx, batch = 0;
  int existed = 0;
  CHECK(lh_store_batch_find(s, "nightly", &batch, &e) == LH_OK);
  CHECK(lh_store_job_add(s, batch, &spec, &jx, &existed, &e) == LH_OK);
  CHECK_EQ(jx, blob_id);
  CHECK_EQ(existed, 2); /* a schema-1 job has no identity: its answer is recomputed once */
  CHECK(lh_store_job_claim(s, running, &e) == LH_OK); /* its schema-1 owner is gone */
  CHECK(lh_store_job_claim(s, queued, &e) == LH_OK);
  lh_store_close(s);

  /* A second open finds version 2 and changes nothing. */
  int64_t before = raw_int(path, "SELECT count(*) FROM results");
  s = setup_store_open(path, &sp);
  CHECK_EQ(lh_store_schema_version(s), 2);
  CHECK_EQ(raw_int(path, "SELECT count(*) FROM results"), before);
  lh_store_close(s);
  s = setup_store_open(path, &ro);
  CHECK_EQ(lh_store_schema_version(s), 2);
  lh_store_close(s);

  lh_buf_free(&json);
  lh_buf_free(&bl);
  return lh_test_end();
}
