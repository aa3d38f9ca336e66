/* test_store_checksums.c — every row a job's outcome is rebuilt from reads back checked: one byte
 * changed behind the store's back (incremental BLOB I/O on a raw connection) in a result's JSON,
 * in its blob, or in a failed job's error text makes lh_store_job_result return LH_ECORRUPT naming
 * the job, lh_store_job_get report the job damaged, lh_store_verify count and describe it (also on
 * a read-only handle), and verify --repair requeue it so that its next run stores a good result.
 * A done job whose result row is gone and a failed job whose text is gone count as damaged too.
 * The stored checksums equal CRC-32C computed here from the documented layout. */
#include "tests/test.h"

#include "store/store.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"

static const char BLOB[6] = {9, 8, 0, 7, 6, 5};

static int64_t add(lh_store *s, int64_t b, const char *cid) {
  lh_store_job_spec sp = {cid, "{}", NULL, NULL, NULL};
  int64_t id = 0;
  lh_error e;
  CHECK_MSG(lh_store_job_add(s, b, &sp, &id, NULL, &e) == LH_OK, "add %s: %s", cid, e.msg);
  return id;
}

static void finish(lh_store *s, int64_t id, const char *json, const void *blob, size_t n) {
  lh_error e;
  CHECK(lh_store_job_claim(s, id, &e) == LH_OK);
  CHECK_MSG(lh_store_job_done(s, id, json, blob, n, &e) == LH_OK, "done: %s", e.msg);
}

static int damaged(lh_store *s, int64_t id) {
  lh_store_job_info in;
  lh_error e;
  if (lh_store_job_get(s, id, &in, &e) != LH_OK) return -2;
  int d = in.damaged;
  lh_store_job_info_clear(&in);
  return d;
}

static lh_job_state state(lh_store *s, int64_t id) {
  lh_store_job_info in;
  lh_error e;
  if (lh_store_job_get(s, id, &in, &e) != LH_OK) return LH_JOB_STATE_COUNT;
  lh_job_state st = in.state;
  lh_store_job_info_clear(&in);
  return st;
}

static lh_status result(lh_store *s, int64_t id, lh_buf *json, lh_buf *blob, lh_error *e) {
  json->len = 0;
  if (blob) blob->len = 0;
  return lh_store_job_result(s, id, json, blob, e);
}

static void verify(lh_store *s, int repair, lh_store_verify_report *r) {
  lh_error e;
  CHECK_MSG(lh_store_verify(s, repair, r, &e) == LH_OK, "verify: %s", e.msg);
  CHECK(r->db_ok);
}

int main(void) {
  lh_test_begin("test_store_checksums");
  char path[600], sql[256];
  snprintf(path, sizeof path, "%s/sums.db", lh_test_tmpdir());
  lh_store_params sp = lh_store_default_params();
  sp.heartbeat = 0;
  lh_store *s = setup_store_open(path, &sp);
  lh_error e;
  int64_t b;
  CHECK(lh_store_batch_put(s, "b", &b, &e) == LH_OK);
  int64_t a = add(s, b, "ans-json"), d = add(s, b, "ans-blob"), plain = add(s, b, "plain"), f = add(s, b, "failer"),
          q = add(s, b, "waiting");
  const char *json_a = "{\"answer\":\"forty-two\"}", *json_d = "{\"answer\":\"blob\"}", *msg = "the archive is missing";
  finish(s, a, json_a, BLOB, sizeof BLOB);
  finish(s, d, json_d, BLOB, sizeof BLOB);
  finish(s, plain, "{\"answer\":\"plain\"}", NULL, 0);
  CHECK(lh_store_job_claim(s, f, &e) == LH_OK);
  CHECK(lh_store_job_fail(s, f, msg, &e) == LH_OK);

  /* The checksums are the documented CRC-32C of (job id, json, blob) and (job id, error text). */
  snprintf(sql, sizeof sql, "SELECT crc32c FROM results WHERE job_id = %lld", (long long)a);
  CHECK_EQ(raw_int(path, sql), (int64_t)result_crc_expect(a, json_a, BLOB, sizeof BLOB));
  snprintf(sql, sizeof sql, "SELECT crc32c FROM results WHERE job_id = %lld", (long long)plain);
  CHECK_EQ(raw_int(path, sql), (int64_t)result_crc_expect(plain, "{\"answer\":\"plain\"}", NULL, 0));
  snprintf(sql, sizeof sql, "SELECT error_crc32c FROM jobs WHERE id = %lld", (long long)f);
  CHECK_EQ(raw_int(path, sql), (int64_t)error_crc_expect(f, msg));
  snprintf(sql, sizeof sql, "SELECT error_crc32c IS NULL FROM jobs WHERE id = %lld", (long long)a);
  CHECK_EQ(raw_int(path, sql), 1);

  /* Intact: reads succeed, nothing is damaged. */
  lh_buf json = {0}, blob = {0};
  CHECK(result(s, a, &json, &blob, &e) == LH_OK);
  CHECK(!strcmp(json.data, json_a));
  CHECK(blob.len == sizeof BLOB && !memcmp(blob.data, BLOB, sizeof BLOB));
  int64_t ids[5] = {a, d, plain, f, q};
  for (int i = 0; i < 5; i++) CHECK_EQ(damaged(s, ids[i]), 0);
  lh_store_verify_report r;
  verify(s, 0, &r);
  CHECK_EQ(r.results, 3);
  CHECK_EQ(r.errors, 1);
  CHECK_EQ(r.damaged_jobs, 0);
  lh_buf_free(&r.problems);

  /* One byte of the answer's JSON, one of the other answer's blob, one of the error text. */
  CHECK(raw_flip(path, "results", "json", a, 12, 0x01) == SQLITE_OK);
  CHECK(raw_flip(path, "results", "blob", d, 2, 0x80) == SQLITE_OK);
  CHECK(raw_flip(path, "jobs", "error", f, 4, 0x20) == SQLITE_OK);

  CHECK(result(s, a, &json, &blob, &e) == LH_ECORRUPT);
  CHECK_EQ(json.len, 0); /* nothing damaged is handed out */
  CHECK_EQ(blob.len, 0);
  snprintf(sql, sizeof sql, "job %lld ('ans-json')", (long long)a);
  CHECK_STR_CONTAINS(e.msg, sql);
  CHECK_STR_CONTAINS(e.msg, "fails its checksum");
  CHECK(result(s, d, &json, NULL, &e) == LH_ECORRUPT); /* even when the caller does not want the blob */
  snprintf(sql, sizeof sql, "job %lld ('ans-blob')", (long long)d);
  CHECK_STR_CONTAINS(e.msg, sql);
  CHECK(result(s, plain, &json, &blob, &e) == LH_OK);
  CHECK_EQ(damaged(s, a), 1);
  CHECK_EQ(damaged(s, d), 1);
  CHECK_EQ(damaged(s, f), 1);
  CHECK_EQ(damaged(s, plain), 0);
  CHECK_EQ(damaged(s, q), 0);
  lh_store_job_info *list;
  size_t n;
  CHECK(lh_store_job_list(s, b, &list, &n, &e) == LH_OK);
  CHECK_EQ(n, 5);
  for (size_t i = 0; i < n; i++) CHECK_EQ(list[i].damaged, -1); /* lists do not read results */
  lh_store_job_list_free(list, n);

  /* verify finds all three, on a read-only handle too, and changes nothing without repair. */
  lh_store_params ro = sp;
  ro.read_only = 1;
  lh_store *rs = setup_store_open(path, &ro);
  verify(rs, 0, &r);
  CHECK_EQ(r.damaged_jobs, 3);
  lh_buf_free(&r.problems);
  CHECK(lh_store_verify(rs, 1, &r, &e) == LH_EINVAL); /* repair needs a writable store */
  lh_buf_free(&r.problems);
  lh_store_close(rs);
  verify(s, 0, &r);
  CHECK_EQ(r.results, 3);
  CHECK_EQ(r.errors, 1);
  CHECK_EQ(r.damaged_jobs, 3);
  CHECK_EQ(r.requeued, 0);
  snprintf(sql, sizeof sql, "job %lld ('ans-json'): its result row fails its checksum", (long long)a);
  CHECK_STR_CONTAINS(r.problems.data, sql);
  snprintf(sql, sizeof sql, "job %lld ('ans-blob'): its result row fails its checksum", (long long)d);
  CHECK_STR_CONTAINS(r.problems.data, sql);
  snprintf(sql, sizeof sql, "job %lld ('failer'): its error text fails its checksum", (long long)f);
  CHECK_STR_CONTAINS(r.problems.data, sql);
  lh_buf_free(&r.problems);
  CHECK_EQ(state(s, a), LH_JOB_DONE);
  CHECK_EQ(state(s, f), LH_JOB_FAILED);

  /* Repair requeues them, dropping result and error; the intact job stays done. */
  verify(s, 1, &r);
  CHECK_EQ(r.damaged_jobs, 3);
  CHECK_EQ(r.requeued, 3);
  lh_buf_free(&r.problems);
  CHECK_EQ(state(s, a), LH_JOB_QUEUED);
  CHECK_EQ(state(s, d), LH_JOB_QUEUED);
  CHECK_EQ(state(s, f), LH_JOB_QUEUED);
  CHECK_EQ(state(s, plain), LH_JOB_DONE);
  CHECK(result(s, a, &json, &blob, &e) == LH_ENOTFOUND);
  lh_store_job_info in;
  CHECK(lh_store_job_get(s, f, &in, &e) == LH_OK);
  CHECK(in.error == NULL);
  CHECK_EQ(in.damaged, 0);
  lh_store_job_info_clear(&in);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE error_crc32c IS NOT NULL AND error IS NULL");
  CHECK_EQ(raw_int(path, sql), 0);
  verify(s, 0, &r);
  CHECK_EQ(r.damaged_jobs, 0);
  CHECK_EQ(r.results, 1);
  lh_buf_free(&r.problems);

  /* The next run recomputes: a fresh result reads back. */
  finish(s, a, json_a, BLOB, sizeof BLOB);
  CHECK(result(s, a, &json, &blob, &e) == LH_OK);
  CHECK(!strcmp(json.data, json_a));
  CHECK_EQ(damaged(s, a), 0);

  /* A done job whose result row is gone, a failed job whose text is gone, a changed checksum. */
  CHECK(lh_store_job_claim(s, f, &e) == LH_OK);
  CHECK(lh_store_job_fail(s, f, msg, &e) == LH_OK);
  snprintf(sql, sizeof sql, "DELETE FROM results WHERE job_id = %lld", (long long)a);
  CHECK(raw_sql(path, sql) == SQLITE_OK);
  snprintf(sql, sizeof sql, "UPDATE jobs SET error = NULL WHERE id = %lld", (long long)f);
  CHECK(raw_sql(path, sql) == SQLITE_OK);
  snprintf(sql, sizeof sql, "UPDATE results SET crc32c = (crc32c | 1) - (crc32c & 1) WHERE job_id = %lld",
           (long long)plain); /* the low bit flipped */
  CHECK(raw_sql(path, sql) == SQLITE_OK);
  CHECK_EQ(damaged(s, a), 1);
  CHECK_EQ(damaged(s, f), 1);
  CHECK_EQ(damaged(s, plain), 1);
  CHECK(result(s, plain, &json, &blob, &e) == LH_ECORRUPT);
  verify(s, 0, &r);
  CHECK_EQ(r.damaged_jobs, 3);
  CHECK_STR_CONTAINS(r.problems.data, "done, but its result row is missing");
  CHECK_STR_CONTAINS(r.problems.data, "failed, but its error text is missing");
  lh_buf_free(&r.problems);
  verify(s, 1, &r);
  CHECK_EQ(r.requeued, 3);
  lh_buf_free(&r.problems);
  verify(s, 0, &r);
  CHECK_EQ(r.damaged_jobs, 0);
  CHECK_EQ(r.results, 0);
  lh_buf_free(&r.problems);

  /* A damaged result row of a job that is not done is dropped, the job keeps its state. */
  finish(s, q, "{\"answer\":\"q\"}", NULL, 0);
  CHECK(lh_store_job_requeue(s, q, &e) == LH_OK);
  snprintf(sql, sizeof sql,
           "INSERT INTO results(job_id, json, blob, created_ms, crc32c) VALUES(%lld, '{}', NULL, 0, 1)", (long long)q);
  CHECK(raw_sql(path, sql) == SQLITE_OK);
  CHECK_EQ(damaged(s, q), 0); /* queued: nothing is rebuilt from it */
  verify(s, 1, &r);
  CHECK_EQ(r.damaged_jobs, 1);
  CHECK_EQ(r.requeued, 0);
  lh_buf_free(&r.problems);
  CHECK_EQ(state(s, q), LH_JOB_QUEUED);
  snprintf(sql, sizeof sql, "SELECT count(*) FROM results WHERE job_id = %lld", (long long)q);
  CHECK_EQ(raw_int(path, sql), 0);

  lh_buf_free(&json);
  lh_buf_free(&blob);
  lh_store_close(s);
  return lh_test_end();
}
