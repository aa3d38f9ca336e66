/* store_engine_driver.c — the engine-backed child process of the kill test.
 *
 *   store_engine_driver --db F --model DIR --n N --chunk C --out FILE [--sync] [--threads T]
 *
 * Claims job "engine" of batch "kill" (taking it over from a dead owner), resumes the longest good
 * checkpointed prefix of a fixed pseudo-random stream of N token ids with lh_store_resume, prefills
 * the rest in chunks aligned to C with a checkpoint after every chunk (async writer unless --sync),
 * and writes the SHA-256 of the final logits' bytes to FILE. A job already done reports its stored
 * digest. Exit 0 done, 1 failed.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "store/store.h"
#include "tests/store/driver_job.h"
#include "util/hash.h"

static const char *arg(int argc, char **argv, const char *name, const char *def) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}

static int fail(const char *what, const lh_error *e) {
  fprintf(stderr, "store_engine_driver: %s: %s\n", what, e->msg);
  return 1;
}

int main(int argc, char **argv) {
  const char *db = arg(argc, argv, "--db", NULL), *dir = arg(argc, argv, "--model", NULL),
             *out = arg(argc, argv, "--out", NULL);
  int64_t n = atoll(arg(argc, argv, "--n", "1000")), chunk = atoll(arg(argc, argv, "--chunk", "64"));
  int sync = 0;
  for (int i = 1; i < argc; i++) sync |= !strcmp(argv[i], "--sync");
  if (!db || !dir || !out || n <= 0 || chunk <= 0) {
    fprintf(stderr, "usage: store_engine_driver --db F --model DIR --n N --chunk C --out FILE [--sync]\n");
    return 2;
  }
  lh_error e;
  lh_error_clear(&e);
  lh_model_params mp = lh_model_default_params();
  mp.threads = atoi(arg(argc, argv, "--threads", "1"));
  lh_model *m;
  if (lh_model_open(dir, &mp, &m, &e)) return fail("opening the model", &e);
  int vocab = lh_model_config(m)->vocab_size;
  int32_t *tok = malloc((size_t)n * sizeof *tok);
  uint64_t x = 777;
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tok[i] = (int32_t)(x % (uint64_t)vocab);
  }
  lh_store *s;
  if (lh_store_open(db, NULL, &s, &e)) return fail("opening the store", &e);
  if (lh_store_model_register(s, m, &e)) return fail("registering the model", &e);
  int64_t job;
  lh_store_job_spec spec = {"engine", "{}", NULL, lh_model_id(m), NULL};
  const char *what;
  int began = driver_job_begin(s, "kill", &spec, n, out, &job, &what, &e);
  if (began < 0) return fail(what, &e);
  if (began == 1) {
    lh_store_close(s);
    lh_model_close(m);
    return 0;
  }
  lh_state *st;
  lh_store_cursor cur;
  if (lh_store_resume(s, m, tok, n, job, &st, &cur, &e)) return fail("resuming", &e);
  fprintf(stderr, "store_engine_driver: resumed at %lld of %lld\n", (long long)lh_state_pos(st), (long long)n);
  /* --sync: a writer of depth one, flushed after every chunk, so each checkpoint is committed
   * before prefill goes on. */
  lh_store_writer_params wp = lh_store_writer_default_params();
  if (sync) wp.max_pending = 1;
  lh_store_writer *w;
  if (lh_store_writer_open(db, &wp, &w, &e)) return fail("opening the writer", &e);
  float *logits = malloc((size_t)vocab * 4);
  if (lh_state_pos(st) == n) memcpy(logits, lh_state_last_logits(st), (size_t)vocab * 4);
  while (lh_state_pos(st) < n) {
    int64_t p = lh_state_pos(st), c = chunk - p % chunk;
    if (p + c > n) c = n - p;
    if (lh_prefill(st, tok + p, c, logits, NULL, &e)) return fail("prefill", &e);
    lh_store_cursor_feed(&cur, tok + p, c);
    if (lh_store_checkpoint_state(w, st, &cur, &e)) return fail("checkpointing", &e);
    if (sync && lh_store_writer_flush(w, &e)) return fail("checkpointing", &e);
  }
  if (lh_store_writer_close(w, &e)) return fail("flushing checkpoints", &e);
  uint8_t d[32];
  char hex[65];
  lh_sha256_buf(logits, (size_t)vocab * 4, d);
  lh_hex(d, 32, hex);
  if (driver_job_finish(s, job, hex, out, &what, &e)) return fail(what, &e);
  lh_state_free(st);
  free(logits);
  free(tok);
  lh_store_close(s);
  lh_model_close(m);
  return 0;
}
