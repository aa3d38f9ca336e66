/* driver_job.h — the job that the kill test's child processes (store_driver synth and
 * store_engine_driver) run, from adding it to finishing it; header-only.
 *
 * A child run may be the first, a rerun after a kill, or a rerun after the job finished: the job
 * is added idempotently, a finished one reports the digest it stored, and an unfinished one is
 * claimed (taken over from the dead owner) before the child resumes it. The result of a finished
 * job is {"digest":"<64 hex>"}, the digest the child also writes to its --out file.
 */
#ifndef LH_TESTS_STORE_DRIVER_JOB_H
#define LH_TESTS_STORE_DRIVER_JOB_H

#include <stdio.h>
#include <string.h>

#include "store/store.h"
#include "util/fs.h"

/* Add spec to batch `batch` and look at it. Returns 1 when it was done already (its stored digest
 * is then written to out), 0 when it is now claimed by this process with n tokens recorded, -1 on
 * failure (*what names the step, e says why). */
static int driver_job_begin(lh_store *s, const char *batch, const lh_store_job_spec *spec, int64_t n, const char *out,
                            int64_t *job, const char **what, lh_error *e) {
  int64_t b;
  *what = "adding the job";
  if (lh_store_batch_put(s, batch, &b, e) || lh_store_job_add(s, b, spec, job, NULL, e)) return -1;
  lh_store_job_info in;
  *what = "reading the job";
  if (lh_store_job_get(s, *job, &in, e)) return -1;
  lh_job_state was = in.state;
  lh_store_job_info_clear(&in);
  if (was == LH_JOB_DONE) {
    lh_buf res = {0};
    *what = "reading the result";
    if (lh_store_job_result(s, *job, &res, NULL, e)) return -1;
    const char *d = strstr(res.data, "\"digest\":\"");
    *what = "writing the digest";
    if (!d || strlen(d) < 10 + 64) {
      lh_error_set(e, LH_ECORRUPT, "job %lld's result holds no digest", (long long)*job);
      lh_buf_free(&res);
      return -1;
    }
    lh_status st = lh_file_write_atomic(out, d + 10, 64, e);
    lh_buf_free(&res);
    return st ? -1 : 1;
  }
  *what = "claiming the job";
  if (lh_store_job_claim(s, *job, e)) return -1;
  *what = "recording tokens";
  if (lh_store_job_set_tokens(s, *job, n, e)) return -1;
  return 0;
}

/* Record hex (64 characters) as the job's result and write it to out. -1 on failure, as above. */
static int driver_job_finish(lh_store *s, int64_t job, const char *hex, const char *out, const char **what,
                             lh_error *e) {
  char res[128];
  snprintf(res, sizeof res, "{\"digest\":\"%s\"}", hex);
  *what = "finishing the job";
  if (lh_store_job_done(s, job, res, NULL, 0, e)) return -1;
  *what = "writing the digest";
  if (lh_file_write_atomic(out, hex, 64, e)) return -1;
  return 0;
}

#endif
