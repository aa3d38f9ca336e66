/* test_store_jobs.c — the job state machine and claims: idempotent adds, claiming in order and by
 * group, ownership checks on every transition, results and documents, requeue, takeover of a dead
 * process's claim (a real child process that claims and dies), a live owner's claim respected, and
 * the lease rule for owners on other machines. */
#include "tests/test.h"


#include "store/store.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"

static lh_store *open_at(const char *path, int lease_s) {
  lh_store_params sp = lh_store_default_params();
  sp.lease_s = lease_s;
  return setup_store_open(path, &sp);
}

typedef struct docs_seen {
  int n;
  int64_t bytes;
  char last[64];
} docs_seen;

static lh_status doc_cb(void *user, const lh_store_doc *d, lh_error *err) {
  docs_seen *ds = user;
  ds->n++;
  ds->bytes += d->bytes;
  snprintf(ds->last, sizeof ds->last, "%s", d->path);
  return LH_OK;
}

static void raw_exec(const char *path, const char *sql) { CHECK(raw_sql(path, sql) == SQLITE_OK); }

int main(int argc, char **argv) {
  lh_test_begin("test_store_jobs");
  if (argc < 2) LH_TEST_SKIP("needs the store_driver path as its argument");
  const char *driver = argv[1];
  char path[600];
  snprintf(path, sizeof path, "%s/jobs.db", lh_test_tmpdir());
  lh_store *s = open_at(path, 120);
  lh_error e;

  CHECK(!strcmp(lh_job_state_name(LH_JOB_QUEUED), "queued"));
  CHECK(!strcmp(lh_job_state_name(LH_JOB_FAILED), "failed"));

  int64_t b1, b1again, b2, missing;
  CHECK(lh_store_batch_put(s, "nightly", &b1, &e) == LH_OK);
  CHECK(lh_store_batch_put(s, "nightly", &b1again, &e) == LH_OK);
  CHECK_EQ(b1, b1again);
  CHECK(lh_store_batch_put(s, "other", &b2, &e) == LH_OK);
  CHECK(b1 != b2);
  CHECK(lh_store_batch_find(s, "nope", &missing, &e) == LH_ENOTFOUND);

  /* Adds are idempotent by (batch, custom_id); a changed request is refused. */
  int64_t j1, j2, j3, j4, j5, jx;
  int existed = -1;
  lh_store_job_spec s1 = {"q1", "{\"q\":1}", "docsA", NULL, NULL}, s2 = {"q2", "{\"q\":2}", "docsA", NULL, NULL},
                    s3 = {"q3", "{\"q\":3}", NULL, NULL, NULL}, s4 = {"q4", "{\"q\":4}", "docsA", NULL, NULL};
  CHECK(lh_store_job_add(s, b1, &s1, &j1, &existed, &e) == LH_OK);
  CHECK_EQ(existed, 0);
  CHECK(lh_store_job_add(s, b1, &s1, &jx, &existed, &e) == LH_OK);
  CHECK_EQ(existed, 1);
  CHECK_EQ(jx, j1);
  lh_store_job_spec changed = {"q1", "{\"q\":99}", NULL, NULL, NULL};
  CHECK(lh_store_job_add(s, b1, &changed, &jx, NULL, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "custom_id 'q1' is already in this batch with a different request");
  CHECK(lh_store_job_add(s, b1, &s2, &j2, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b1, &s3, &j3, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b1, &s4, &j4, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b2, &s1, &j5, NULL, &e) == LH_OK); /* same custom_id, other batch */
  CHECK(j5 != j1);
  CHECK(lh_store_job_add(s, 999, &s3, &jx, NULL, &e) == LH_ENOTFOUND);
  lh_store_job_spec nocid = {NULL, "{}", NULL, NULL, NULL};
  CHECK(lh_store_job_add(s, b1, &nocid, &jx, NULL, &e) == LH_EINVAL);
  CHECK(lh_store_job_find(s, b1, "q3", &jx, &e) == LH_OK);
  CHECK_EQ(jx, j3);
  CHECK(lh_store_job_find(s, b1, "q9", &jx, &e) == LH_ENOTFOUND);
  CHECK(lh_store_job_find(s, 0, "q3", &jx, &e) == LH_OK); /* any batch: unique */
  CHECK_EQ(jx, j3);
  CHECK(lh_store_job_find(s, 0, "q1", &jx, &e) == LH_EINVAL); /* in two batches */
  CHECK_STR_CONTAINS(e.msg, "in more than one batch");
  CHECK(lh_store_job_find(s, 0, "q9", &jx, &e) == LH_ENOTFOUND);

  /* Transitions on a queued job that need a claim are refused. */
  CHECK(lh_store_job_done(s, j1, "{}", NULL, 0, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "is queued, not running");
  CHECK(lh_store_job_fail(s, j1, "x", &e) == LH_EINVAL);

  /* claim_next takes the oldest queued job and the rest of its group, up to max. */
  int64_t ids[8];
  int n;
  CHECK(lh_store_job_claim_next(s, b1, 2, ids, &n, &e) == LH_OK);
  CHECK_EQ(n, 2);
  CHECK_EQ(ids[0], j1);
  CHECK_EQ(ids[1], j2);
  CHECK(lh_store_job_claim_next(s, b1, 8, ids, &n, &e) == LH_OK);
  CHECK_EQ(n, 1);
  CHECK_EQ(ids[0], j3); /* no group: alone */
  CHECK(lh_store_job_claim_next(s, b1, 8, ids, &n, &e) == LH_OK);
  CHECK_EQ(n, 1);
  CHECK_EQ(ids[0], j4);
  CHECK(lh_store_job_claim_next(s, b1, 8, ids, &n, &e) == LH_ENOTFOUND);
  CHECK_EQ(n, 0);
  CHECK(lh_store_job_claim(s, j1, &e) == LH_OK); /* already ours: fine, no new attempt */

  lh_store_job_info in;
  CHECK(lh_store_job_get(s, j1, &in, &e) == LH_OK);
  CHECK_EQ(in.state, LH_JOB_RUNNING);
  CHECK_EQ(in.attempts, 1);
  CHECK(in.owner != NULL);
  CHECK_EQ(in.owner_alive, 1);
  CHECK(in.started_ms > 0);
  CHECK(!strcmp(in.batch, "nightly"));
  CHECK(!strcmp(in.group_key, "docsA"));
  CHECK(!strcmp(in.request_json, "{\"q\":1}"));
  lh_store_job_info_clear(&in);

  /* Documents and progress. */
  lh_store_doc docs[3] = {{"repo/a.c", 100, "aa", 0, 40, NULL},
                          {"repo/b.c", 250, NULL, 40, 120, "{\"lang\":\"c\"}"},
                          {"repo/README", 50, "cc", 120, 130, NULL}};
  CHECK(lh_store_job_set_documents(s, j1, docs, 3, &e) == LH_OK);
  CHECK(lh_store_job_set_documents(s, j1, docs, 3, &e) == LH_OK); /* replaces */
  docs_seen ds = {0};
  CHECK(lh_store_job_documents(s, j1, doc_cb, &ds, &e) == LH_OK);
  CHECK_EQ(ds.n, 3);
  CHECK_EQ(ds.bytes, 400);
  CHECK(!strcmp(ds.last, "repo/README"));
  CHECK(lh_store_job_set_documents(s, 12345, docs, 1, &e) == LH_ENOTFOUND);
  CHECK(lh_store_job_set_tokens(s, j1, 130, &e) == LH_OK);

  /* done with a result blob; fail; release. */
  const char blob[5] = {1, 2, 0, 3, 4};
  CHECK(lh_store_job_done(s, j1, "{\"answer\":\"42\"}", blob, 5, &e) == LH_OK);
  CHECK(lh_store_job_fail(s, j2, "the archive is missing", &e) == LH_OK);
  CHECK(lh_store_job_release(s, j3, &e) == LH_OK);
  CHECK(lh_store_job_done(s, j1, "{}", NULL, 0, &e) == LH_EINVAL); /* done is final */
  lh_buf json = {0}, bl = {0};
  CHECK(lh_store_job_result(s, j1, &json, &bl, &e) == LH_OK);
  CHECK(json.data && !strcmp(json.data, "{\"answer\":\"42\"}"));
  CHECK_EQ(bl.len, 5);
  CHECK(bl.data && !memcmp(bl.data, blob, 5));
  lh_buf_free(&json);
  lh_buf_free(&bl);
  CHECK(lh_store_job_result(s, j2, &json, NULL, &e) == LH_ENOTFOUND);
  CHECK(lh_store_job_get(s, j2, &in, &e) == LH_OK);
  CHECK_EQ(in.state, LH_JOB_FAILED);
  CHECK(in.error && !strcmp(in.error, "the archive is missing"));
  CHECK(in.owner == NULL);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_get(s, j1, &in, &e) == LH_OK);
  CHECK_EQ(in.state, LH_JOB_DONE);
  CHECK_EQ(in.has_result, 1);
  CHECK_EQ(in.tokens_total, 130);
  CHECK(in.finished_ms >= in.started_ms);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_claim(s, j1, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "requeue");

  /* Released jobs are claimable again; requeue brings failed and done jobs back. */
  CHECK(lh_store_job_claim_next(s, b1, 1, ids, &n, &e) == LH_OK);
  CHECK_EQ(ids[0], j3);
  CHECK(lh_store_job_done(s, j3, "{}", NULL, 0, &e) == LH_OK);
  CHECK(lh_store_job_requeue(s, j2, &e) == LH_OK);
  CHECK(lh_store_job_requeue(s, j1, &e) == LH_OK);
  CHECK(lh_store_job_result(s, j1, &json, NULL, &e) == LH_ENOTFOUND);
  CHECK(lh_store_job_get(s, j2, &in, &e) == LH_OK);
  CHECK_EQ(in.state, LH_JOB_QUEUED);
  CHECK(in.error == NULL);
  CHECK_EQ(in.attempts, 0);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_requeue(s, j4, &e) == LH_EBUSY); /* running under us, alive */

  lh_store_job_info *list;
  size_t nl;
  CHECK(lh_store_job_list(s, b1, &list, &nl, &e) == LH_OK);
  CHECK_EQ(nl, 4);
  CHECK_EQ(list[0].id, j1);
  CHECK_EQ(list[3].state, LH_JOB_RUNNING);
  lh_store_job_list_free(list, nl);
  CHECK(lh_store_job_list(s, 0, &list, &nl, &e) == LH_OK);
  CHECK_EQ(nl, 5);
  lh_store_job_list_free(list, nl);

  /* A real child process claims the queued job of batch "other" and dies without releasing it:
   * its claim is taken over at once (same machine, its pid is gone). */
  char *cargv[] = {(char *)driver, "claim", "--db", path, "--batch", "other", NULL};
  char *hargv[] = {(char *)driver, "claim", "--db", path, "--batch", "other", "--hold", NULL};
  FILE *to, *from;
  char line[64] = "";
  int status;
  pid_t pid = spawn(cargv, &to, &from);
  CHECK(fgets(line, sizeof line, from) != NULL);
  CHECK_EQ(atoll(line), j5);
  waitpid(pid, &status, 0);
  fclose(to);
  fclose(from);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(lh_store_job_get(s, j5, &in, &e) == LH_OK);
  CHECK_EQ(in.state, LH_JOB_RUNNING);
  CHECK_EQ(in.owner_alive, 0);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_claim_next(s, b2, 1, ids, &n, &e) == LH_OK);
  CHECK_EQ(ids[0], j5);
  CHECK(lh_store_job_get(s, j5, &in, &e) == LH_OK);
  CHECK_EQ(in.attempts, 2);
  CHECK_EQ(in.owner_alive, 1);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_release(s, j5, &e) == LH_OK);

  /* A live child's claim is respected: claim fails with EBUSY, claim_next passes it by, requeue
   * refuses; the child then finishes it. */
  pid = spawn(hargv, &to, &from);
  CHECK(fgets(line, sizeof line, from) != NULL);
  CHECK_EQ(atoll(line), j5);
  CHECK(lh_store_job_claim(s, j5, &e) == LH_EBUSY);
  CHECK_STR_CONTAINS(e.msg, "which is alive");
  CHECK(lh_store_job_claim_next(s, b2, 1, ids, &n, &e) == LH_ENOTFOUND);
  CHECK(lh_store_job_requeue(s, j5, &e) == LH_EBUSY);
  fputs("go\n", to);
  fclose(to);
  waitpid(pid, &status, 0);
  fclose(from);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(lh_store_job_result(s, j5, &json, NULL, &e) == LH_OK);
  CHECK(json.data && strstr(json.data, "child"));
  lh_buf_free(&json);

  /* Owners on another machine: only the heartbeat counts. A fresh heartbeat holds the claim; one
   * older than the lease lets it go; and a claim lost that way makes the old owner's _done fail. */
  CHECK(lh_store_job_requeue(s, j5, &e) == LH_OK);
  CHECK(lh_store_job_claim(s, j5, &e) == LH_OK);
  char sql[512];
  snprintf(sql, sizeof sql,
           "UPDATE jobs SET owner_host = 'elsewhere boot ns', owner_name = 'elsewhere', owner_pid = 1, "
           "heartbeat_ms = %lld WHERE id = %lld",
           (long long)0x7fffffffffffLL, (long long)j5);
  raw_exec(path, sql);
  CHECK(lh_store_job_claim(s, j5, &e) == LH_EBUSY);
  CHECK(lh_store_job_check_claim(s, j5, &e) == LH_EBUSY);
  CHECK_STR_CONTAINS(e.msg, "took it over");
  CHECK(lh_store_job_done(s, j5, "{}", NULL, 0, &e) == LH_EBUSY);
  CHECK_STR_CONTAINS(e.msg, "no longer ours: elsewhere pid 1 took it over");
  snprintf(sql, sizeof sql, "UPDATE jobs SET heartbeat_ms = 1000 WHERE id = %lld", (long long)j5);
  raw_exec(path, sql);
  CHECK(lh_store_job_get(s, j5, &in, &e) == LH_OK);
  CHECK_EQ(in.owner_alive, 0);
  lh_store_job_info_clear(&in);
  CHECK(lh_store_job_claim(s, j5, &e) == LH_OK);
  CHECK(lh_store_job_check_claim(s, j5, &e) == LH_OK);
  CHECK(lh_store_job_check_claim(s, j1, &e) == LH_EINVAL);
  CHECK(lh_store_job_heartbeat(s, &e) == LH_OK);
  CHECK(lh_store_job_done(s, j5, "{}", NULL, 0, &e) == LH_OK);

  /* max_attempts: a job whose owners keep dying is failed instead of claimed forever. */
  {
    lh_store_params sp = lh_store_default_params();
    sp.max_attempts = 2;
    /* No heartbeat thread: this check does not need one. (A job once stayed RUNNING here instead of
     * FAILED: the raw UPDATE that "kills" its owner had failed with "database is locked" while a
     * heartbeat thread wrote, so the owner still looked alive. raw_sql now waits for locks.) */
    sp.heartbeat = 0;
    lh_store *m;
    CHECK(lh_store_open(path, &sp, &m, &e) == LH_OK);
    int64_t b3, jj;
    lh_store_job_spec sj = {"poison", "{}", NULL, NULL, NULL};
    CHECK(lh_store_batch_put(m, "poison", &b3, &e) == LH_OK);
    CHECK(lh_store_job_add(m, b3, &sj, &jj, NULL, &e) == LH_OK);
    for (int k = 0; k < 2; k++) {
      CHECK(lh_store_job_claim_next(m, b3, 1, ids, &n, &e) == LH_OK);
      snprintf(sql, sizeof sql, "UPDATE jobs SET owner_pid = 999999999 WHERE id = %lld", (long long)jj); /* "dies" */
      raw_exec(path, sql);
    }
    CHECK(lh_store_job_claim_next(m, b3, 1, ids, &n, &e) == LH_ENOTFOUND);
    CHECK(lh_store_job_get(m, jj, &in, &e) == LH_OK);
    CHECK_EQ(in.state, LH_JOB_FAILED);
    CHECK_STR_CONTAINS(in.error, "gave up after 2 attempts");
    CHECK_EQ(in.damaged, 0); /* the store's own error text carries its checksum too */
    lh_store_job_info_clear(&in);
    lh_store_close(m);
  }

  /* The heartbeat thread refreshes claims: with a 1 s lease it ticks every 250 ms. */
  {
    lh_store *h = open_at(path, 1);
    int64_t b4, jh;
    lh_store_job_spec sh = {"hb", "{}", NULL, NULL, NULL};
    CHECK(lh_store_batch_put(h, "hb", &b4, &e) == LH_OK);
    CHECK(lh_store_job_add(h, b4, &sh, &jh, NULL, &e) == LH_OK);
    CHECK(lh_store_job_claim(h, jh, &e) == LH_OK);
    lh_store_job_info a, b;
    CHECK(lh_store_job_get(h, jh, &a, &e) == LH_OK);
    /* 700 ms is nearly three ticks; on a loaded machine allow up to 5 s before calling it broken */
    memset(&b, 0, sizeof b);
    for (int tries = 0; tries < 50; tries++) {
      usleep(tries ? 100 * 1000 : 700 * 1000);
      lh_store_job_info_clear(&b);
      CHECK(lh_store_job_get(h, jh, &b, &e) == LH_OK);
      if (b.heartbeat_ms > a.heartbeat_ms) break;
    }
    CHECK_MSG(b.heartbeat_ms > a.heartbeat_ms, "heartbeat %lld -> %lld", (long long)a.heartbeat_ms,
              (long long)b.heartbeat_ms);
    lh_store_job_info_clear(&a);
    lh_store_job_info_clear(&b);
    CHECK(lh_store_job_release(h, jh, &e) == LH_OK);
    lh_store_close(h);
  }

  lh_store_close(s);
  return lh_test_end();
}
