/* store_driver.c — a small program the store tests run as real child processes (to kill them, or
 * to race two of them on one database).
 *
 *   store_driver synth  --db F --n N --chunk C --seed S --out FILE [--sync] [--pending K] [--max-db B]
 *       Claim job "job-S" of batch "synth" (taking it over from a dead owner), resume the toy state
 *       (tests/store/toy.h) from the longest good checkpoint of its N tokens, prefill the rest in
 *       chunks of C with a checkpoint after every chunk (async writer unless --sync), then record
 *       the final digest as the job's result and write it to FILE. Exit 0 done, 1 failed, 4 disk full.
 *   store_driver claim  --db F --batch NAME [--hold]
 *       Claim the next job of the batch and print its id. Without --hold exit at once without
 *       releasing it (a crash, as far as the store can tell); with --hold wait for a line on stdin,
 *       then finish the job with result {"by":"child"}.
 *   store_driver lock   --db F
 *       Hold an exclusive lock on the database file (BEGIN EXCLUSIVE), print "locked", and keep it
 *       until a line arrives on stdin.
 *   store_driver worker --db F --batch NAME --log FILE [--work-ms X]
 *       Claim jobs of the batch one at a time until none is left; for each append "claim ID PID" and
 *       "done ID PID" lines to FILE (O_APPEND) around X ms of pretend work and a small checkpoint.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "tests/store/driver_job.h"
#include "tests/store/toy.h"

static const char *arg(int argc, char **argv, const char *name, const char *def) {
  for (int i = 2; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return def;
}

static int flag(int argc, char **argv, const char *name) {
  for (int i = 2; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

static int fail(const char *what, const lh_error *e) {
  fprintf(stderr, "store_driver: %s: %s\n", what, e->msg);
  return e->code == LH_EFULL ? 4 : 1;
}

static int synth(int argc, char **argv) {
  const char *db = arg(argc, argv, "--db", NULL), *out = arg(argc, argv, "--out", NULL);
  int64_t n = atoll(arg(argc, argv, "--n", "4096")), chunk = atoll(arg(argc, argv, "--chunk", "64"));
  uint64_t seed = (uint64_t)atoll(arg(argc, argv, "--seed", "1"));
  int sync = flag(argc, argv, "--sync");
  if (!db || !out || n <= 0 || chunk <= 0) {
    fprintf(stderr, "store_driver synth: bad arguments\n");
    return 2;
  }
  lh_state_layout lay = toy_layout(atoi(arg(argc, argv, "--nl", "4")), (size_t)atoll(arg(argc, argv, "--lb", "65536")),
                                   atoi(arg(argc, argv, "--ns", "2")), (size_t)atoll(arg(argc, argv, "--row", "512")),
                                   atoi(arg(argc, argv, "--vocab", "1024")));
  int32_t *tok = malloc((size_t)n * sizeof *tok);
  toy_tokens(tok, n, seed);
  lh_error e;
  lh_error_clear(&e);
  lh_store_params sp = lh_store_default_params();
  sp.max_db_bytes = atoll(arg(argc, argv, "--max-db", "0"));
  lh_store *s;
  if (lh_store_open(db, &sp, &s, &e)) return fail("open", &e);
  int64_t job;
  char cid[64];
  snprintf(cid, sizeof cid, "job-%llu", (unsigned long long)seed);
  lh_store_job_spec spec = {cid, "{\"synth\":true}", NULL, TOY_MODEL_ID, NULL};
  const char *what;
  int began = driver_job_begin(s, "synth", &spec, n, out, &job, &what, &e);
  if (began < 0) return fail(what, &e);
  if (began == 1) { /* finished by an earlier run: its result is reported, as the runner skips finished jobs */
    fprintf(stderr, "store_driver: already done\n");
    lh_store_close(s);
    return 0;
  }
  toy t;
  lh_store_cursor cur;
  if (toy_resume(s, &lay, tok, n, job, &t, &cur, &e)) return fail("resuming", &e);
  fprintf(stderr, "store_driver: resumed at %lld of %lld\n", (long long)t.pos, (long long)n);
  lh_store_writer *w = NULL;
  if (!sync) {
    lh_store_writer_params wp = lh_store_writer_default_params();
    wp.max_pending = atoi(arg(argc, argv, "--pending", "2"));
    wp.store.max_db_bytes = sp.max_db_bytes;
    if (lh_store_writer_open(db, &wp, &w, &e)) return fail("opening the writer", &e);
  }
  while (t.pos < n) {
    int64_t c = n - t.pos < chunk ? n - t.pos : chunk;
    toy_feed(&t, tok + t.pos, c);
    lh_store_cursor_feed(&cur, tok + cur.pos, c);
    if (toy_checkpoint(w, s, &t, &cur, &e)) return fail("checkpointing", &e);
  }
  if (w && lh_store_writer_close(w, &e)) return fail("flushing checkpoints", &e);
  char dig[65];
  toy_digest(&t, dig);
  if (driver_job_finish(s, job, dig, out, &what, &e)) return fail(what, &e);
  toy_free(&t);
  free(tok);
  lh_store_close(s);
  return 0;
}

static void logline(int fd, const char *what, int64_t id) {
  char line[96];
  int k = snprintf(line, sizeof line, "%s %lld %lld\n", what, (long long)id, (long long)getpid());
  if (write(fd, line, (size_t)k) != k) perror("store_driver: log");
}

static int worker(int argc, char **argv) {
  const char *db = arg(argc, argv, "--db", NULL), *bname = arg(argc, argv, "--batch", NULL),
             *logf = arg(argc, argv, "--log", NULL);
  int work_ms = atoi(arg(argc, argv, "--work-ms", "5"));
  if (!db || !bname || !logf) {
    fprintf(stderr, "store_driver worker: bad arguments\n");
    return 2;
  }
  int fd = open(logf, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) {
    perror(logf);
    return 1;
  }
  lh_error e;
  lh_error_clear(&e);
  lh_store *s;
  if (lh_store_open(db, NULL, &s, &e)) return fail("open", &e);
  int64_t batch;
  if (lh_store_batch_find(s, bname, &batch, &e)) return fail("finding the batch", &e);
  lh_state_layout lay = toy_layout(2, 4096, 1, 256, 64);
  int32_t tok[8];
  for (;;) {
    int64_t id;
    int got;
    lh_status st = lh_store_job_claim_next(s, batch, 1, &id, &got, &e);
    if (st == LH_ENOTFOUND) break;
    if (st) return fail("claiming", &e);
    logline(fd, "claim", id);
    /* A checkpoint of a prefix of its own, so the two workers also write checkpoints concurrently. */
    toy t;
    toy_init(&t, &lay);
    toy_tokens(tok, 8, (uint64_t)id + 1000);
    toy_feed(&t, tok, 8);
    lh_store_cursor cur;
    lh_store_cursor_init(&cur, TOY_MODEL_ID, id);
    lh_store_cursor_feed(&cur, tok, 8);
    if (toy_checkpoint(NULL, s, &t, &cur, &e)) return fail("checkpointing", &e);
    toy_free(&t);
    struct timespec ts = {work_ms / 1000, (long)(work_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    char res[64];
    snprintf(res, sizeof res, "{\"worker\":%lld}", (long long)getpid());
    logline(fd, "done", id);
    if (lh_store_job_done(s, id, res, NULL, 0, &e)) return fail("finishing", &e);
  }
  close(fd);
  lh_store_close(s);
  return 0;
}

static int claim(int argc, char **argv) {
  const char *db = arg(argc, argv, "--db", NULL), *bname = arg(argc, argv, "--batch", NULL);
  if (!db || !bname) return 2;
  lh_error e;
  lh_store *s;
  int64_t batch, id;
  int n;
  if (lh_store_open(db, NULL, &s, &e)) return fail("open", &e);
  if (lh_store_batch_find(s, bname, &batch, &e) || lh_store_job_claim_next(s, batch, 1, &id, &n, &e))
    return fail("claiming", &e);
  printf("%lld\n", (long long)id);
  fflush(stdout);
  if (!flag(argc, argv, "--hold")) _exit(0);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) return 1;
  if (lh_store_job_done(s, id, "{\"by\":\"child\"}", NULL, 0, &e)) return fail("finishing", &e);
  lh_store_close(s);
  return 0;
}

static int lock(int argc, char **argv) {
  const char *db = arg(argc, argv, "--db", NULL);
  sqlite3 *h;
  if (!db || sqlite3_open(db, &h) != SQLITE_OK) return 2;
  if (sqlite3_exec(h, "BEGIN EXCLUSIVE", NULL, NULL, NULL) != SQLITE_OK) {
    fprintf(stderr, "store_driver lock: %s\n", sqlite3_errmsg(h));
    return 1;
  }
  printf("locked\n");
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) return 1;
  sqlite3_exec(h, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(h);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "lock")) return lock(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "claim")) return claim(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "synth")) return synth(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "worker")) return worker(argc, argv);
  fprintf(stderr, "usage: store_driver synth|worker ...\n");
  return 2;
}
