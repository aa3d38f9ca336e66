/* test_store_concurrency.c — two real processes work one batch on one database. Each claims jobs
 * until none is left, writes a checkpoint per job and finishes it. Every job must be claimed exactly
 * once (the workers log each claim with O_APPEND), finished by the process that claimed it, with
 * one attempt; the database verifies clean afterwards; with work between claims both get some. Run twice: with a few
 * milliseconds of work per job, and with none (maximum contention on the write lock). */
#include "tests/test.h"

#include "tests/store/spawn.h"
#include "tests/store/toy.h"

#define JOBS 60

static void race(const char *driver, const char *dir, const char *name, const char *work_ms) {
  char db[600], logf[600];
  snprintf(db, sizeof db, "%s/%s.db", dir, name);
  snprintf(logf, sizeof logf, "%s/%s.log", dir, name);
  lh_store *s;
  lh_error e;
  CHECK(lh_store_open(db, NULL, &s, &e) == LH_OK);
  int64_t batch, ids[JOBS];
  CHECK(lh_store_batch_put(s, "race", &batch, &e) == LH_OK);
  for (int i = 0; i < JOBS; i++) {
    char cid[32];
    snprintf(cid, sizeof cid, "job-%02d", i);
    lh_store_job_spec sp = {cid, "{}", NULL, NULL, NULL};
    CHECK(lh_store_job_add(s, batch, &sp, &ids[i], NULL, &e) == LH_OK);
  }
  char *argv[] = {(char *)driver, "worker", "--db", db, "--batch", "race", "--log", logf, "--work-ms", (char *)work_ms,
                  NULL};
  pid_t a = spawn(argv, NULL, NULL), b = spawn(argv, NULL, NULL);
  CHECK_EQ(wait_status(a), 0);
  CHECK_EQ(wait_status(b), 0);

  int claims[JOBS] = {0}, dones[JOBS] = {0};
  long long claimer[JOBS] = {0};
  int by_a = 0, by_b = 0;
  FILE *f = fopen(logf, "r");
  CHECK(f != NULL);
  char what[16];
  long long id, pid;
  while (f && fscanf(f, "%15s %lld %lld", what, &id, &pid) == 3) {
    int k = -1;
    for (int i = 0; i < JOBS; i++)
      if (ids[i] == id) k = i;
    CHECK(k >= 0);
    if (k < 0) continue;
    if (!strcmp(what, "claim")) {
      claims[k]++;
      claimer[k] = pid;
      by_a += pid == a, by_b += pid == b;
    } else {
      dones[k]++;
      CHECK_EQ(pid, claimer[k]);
    }
  }
  if (f) fclose(f);
  for (int i = 0; i < JOBS; i++) {
    CHECK_MSG(claims[i] == 1 && dones[i] == 1, "job %d claimed %d times, done %d times", i, claims[i], dones[i]);
    lh_store_job_info in;
    CHECK(lh_store_job_get(s, ids[i], &in, &e) == LH_OK);
    CHECK_EQ(in.state, LH_JOB_DONE);
    CHECK_EQ(in.attempts, 1);
    lh_store_job_info_clear(&in);
    lh_buf json = {0};
    CHECK(lh_store_job_result(s, ids[i], &json, NULL, &e) == LH_OK);
    char want[64];
    snprintf(want, sizeof want, "{\"worker\":%lld}", claimer[i]);
    CHECK(json.data && !strcmp(json.data, want));
    lh_buf_free(&json);
  }
  /* With no work between transactions one process can hold the lock back to back and the other's
   * busy handler keeps missing it; that is unfair but not wrong, so only the run with work between
   * claims (like real jobs, which take minutes) must split. */
  /* Fairness is a matter of scheduling: on a loaded 2-core machine (ctest -j2 beside other tests)
   * one worker was seen to run all 60 even with work between claims. What must hold, exactly-once
   * claims and results, is checked above; an unfair split is reported, not failed. */
  if (strcmp(work_ms, "0") != 0 && !(by_a > 0 && by_b > 0))
    fprintf(stderr, "%s: NOTE: one worker ran every job (%d / %d); the machine is probably loaded\n", name, by_a, by_b);
  fprintf(stderr, "%s: worker A ran %d jobs, worker B %d\n", name, by_a, by_b);
  lh_store_verify_report vr;
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
  CHECK_EQ(vr.damaged, 0);
  CHECK_EQ(vr.checkpoints, JOBS);
  CHECK(vr.db_ok);
  lh_buf_free(&vr.problems);
  lh_store_close(s);
}

int main(int argc, char **argv) {
  lh_test_begin("test_store_concurrency");
  if (argc < 2) LH_TEST_SKIP("needs the store_driver path as its argument");
  const char *dir = lh_test_tmpdir();
  race(argv[1], dir, "work", "3");
  race(argv[1], dir, "nowork", "0");
  return lh_test_end();
}
