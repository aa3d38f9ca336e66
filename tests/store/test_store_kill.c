/* test_store_kill.c — SIGKILL at random moments. A child process prefills a token stream with a
 * checkpoint after every chunk: store_driver synth (a synthetic state, 8192 tokens in chunks of 64)
 * or store_engine_driver (the real engine on a tiny fixture model, 3072 tokens in chunks of 32). It
 * is killed at 30 random moments (alternating the async writer and synchronous writes); after each
 * kill the database must verify clean and the committed prefix must never shrink. A last run
 * without a kill resumes from the last committed checkpoint and must end with exactly the digest
 * (of the synthetic state, or of the final logits) of an uninterrupted run in a fresh database.
 * LH_KILL_SEED picks the kill moments (printed); they are scaled to this machine's speed. */
#include "tests/test.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/store/spawn.h"
#include "tests/store/toy.h"
#include "util/fs.h"

#define KILLS 30

static const char *MODEL_DIR; /* engine mode: the fixture model; NULL: synthetic states */
static int64_t NTOK = 8192;

static pid_t start(const char *driver, const char *db, const char *out, int sync) {
  if (MODEL_DIR) {
    char *argv[] = {(char *)driver, "--db", (char *)db, "--model", (char *)MODEL_DIR, "--n", "3072", "--chunk", "32",
                    "--out", (char *)out, sync ? "--sync" : NULL, NULL};
    return spawn(argv, NULL, NULL);
  }
  char *argv[] = {(char *)driver, "synth", "--db", (char *)db, "--n", "8192", "--chunk", "64", "--seed", "11",
                  "--out", (char *)out, sync ? "--sync" : NULL, NULL};
  return spawn(argv, NULL, NULL);
}

/* The committed prefix: the resume point of the one job in the store. */
static int64_t committed(lh_store *s) {
  lh_store_job_info *v;
  size_t n;
  int64_t pos = -1;
  if (lh_store_job_list(s, 0, &v, &n, NULL) == LH_OK) {
    pos = n == 1 ? v[0].tokens_done : n == 0 ? 0 : -1;
    lh_store_job_list_free(v, n);
  }
  return pos;
}

static void read_digest(const char *path, char out[65]) {
  lh_buf b = {0};
  out[0] = 0;
  if (lh_file_read(path, 1024, &b, NULL) == LH_OK && b.len == 64) memcpy(out, b.data, 65);
  lh_buf_free(&b);
}

int main(int argc, char **argv) {
  lh_test_begin("test_store_kill");
  if (argc < 2) LH_TEST_SKIP("needs a driver path as its argument (and a model folder for the engine driver)");
  if (argc >= 3) {
    MODEL_DIR = argv[2];
    NTOK = 3072;
  }
  const char *driver = argv[1], *dir = lh_test_tmpdir();
  char ref_db[600], ref_out[600], db[600], out[600];
  snprintf(ref_db, sizeof ref_db, "%s/ref.db", dir);
  snprintf(ref_out, sizeof ref_out, "%s/ref.txt", dir);
  snprintf(db, sizeof db, "%s/kill.db", dir);
  snprintf(out, sizeof out, "%s/kill.txt", dir);

  double t0 = lh_now();
  CHECK_EQ(wait_status(start(driver, ref_db, ref_out, 0)), 0);
  double full = lh_now() - t0;
  char ref[65];
  read_digest(ref_out, ref);
  CHECK(strlen(ref) == 64);

  /* A rerun on the finished store only starts up (opens the model and the store, sees the job done):
   * that is how long a run takes before it can make progress. */
  t0 = lh_now();
  CHECK_EQ(wait_status(start(driver, ref_db, ref_out, 0)), 0);
  double startup = lh_now() - t0, work = full - startup > 0.05 ? full - startup : 0.05;
  unsigned seed = getenv("LH_KILL_SEED") ? (unsigned)atoi(getenv("LH_KILL_SEED")) : 20261201u;
  srand(seed);
  fprintf(stderr, "uninterrupted run: %.2f s (start-up %.2f s); kill seed %u\n", full, startup, seed);
  int kills = 0, runs = 0, progressed = 0, in_txn = 0, rounds = 0;
  /* Rounds of kills on one database, each ended by a run that finishes the job (and must match the
   * reference). Normally one round holds all the kills; a run that finishes before its kill (the
   * machine sped up) ends the round early and the next one starts on a fresh database. Up to 8
   * rounds: on a loaded machine (a CI run beside other work) the reference timing was taken at
   * another speed, and rounds of 7-8 kills each were seen, so 4 rounds fell short of KILLS. */
  while (kills < KILLS && rounds < 8) {
    rounds++;
    snprintf(db, sizeof db, "%s/kill%d.db", dir, rounds);
    int64_t last = 0;
    while (kills < KILLS) {
      int sync = runs % 2;
      pid_t pid = start(driver, db, out, sync);
      runs++;
      /* Random moments, most after start-up and spread so the job is still unfinished after the
       * last kill: past 80% of the start-up time each run gets on average a quarter of the time the
       * remaining work took in the reference run, divided by the kills left. */
      double left = work * (double)(NTOK - last) / (double)NTOK / (double)(KILLS - kills);
      double delay = 0.8 * startup + left * 0.5 * (double)rand() / RAND_MAX;
      struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
      nanosleep(&ts, NULL);
      kill(pid, SIGKILL);
      int st = wait_status(pid);
      if (st == 0) {
        fprintf(stderr, "round %d: run %d finished within %.3f s, before its kill\n", rounds, runs, delay);
        break;
      }
      CHECK_EQ(st, 128 + SIGKILL);
      kills++;
      /* A non-empty rollback journal means the kill landed inside a write transaction. */
      char jpath[620];
      snprintf(jpath, sizeof jpath, "%s-journal", db);
      struct stat jst;
      if (stat(jpath, &jst) == 0 && jst.st_size > 0) in_txn++;
      lh_store *s;
      lh_error e;
      CHECK(lh_store_open(db, NULL, &s, &e) == LH_OK);
      lh_store_verify_report vr;
      CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
      CHECK_MSG(vr.damaged == 0 && vr.db_ok, "after kill %d: %s", kills, vr.problems.data ? vr.problems.data : "");
      lh_buf_free(&vr.problems);
      int64_t pos = committed(s);
      CHECK_MSG(pos >= last, "stored prefix shrank from %lld to %lld", (long long)last, (long long)pos);
      CHECK(pos % 32 == 0);
      progressed += pos > last;
      last = pos;
      lh_store_close(s);
    }
    fprintf(stderr, "round %d: last committed prefix %lld of %lld\n", rounds, (long long)last, (long long)NTOK);
    /* Resume to the end: the digest of the uninterrupted run. */
    unlink(out);
    CHECK_EQ(wait_status(start(driver, db, out, 0)), 0);
    char got[65];
    read_digest(out, got);
    CHECK_MSG(!strcmp(got, ref), "round %d: resumed digest %s, uninterrupted %s", rounds, got, ref);
    lh_store *s;
    lh_error e;
    CHECK(lh_store_open(db, NULL, &s, &e) == LH_OK);
    lh_store_job_info *v;
    size_t n;
    CHECK(lh_store_job_list(s, 0, &v, &n, &e) == LH_OK);
    CHECK_EQ(n, 1);
    if (n == 1) {
      CHECK_EQ(v[0].state, LH_JOB_DONE);
      CHECK(v[0].attempts >= 1 && v[0].attempts <= runs + 1);
      CHECK_EQ(v[0].tokens_done, NTOK);
    }
    lh_store_job_list_free(v, n);
    lh_store_close(s);
  }
  fprintf(stderr, "%d kills in %d runs over %d round(s); %d inside a write transaction; %d after new progress\n",
          kills, runs, rounds, in_txn, progressed);
  CHECK_MSG(kills >= KILLS, "only %d kills landed before the job finished", kills);
  CHECK_MSG(in_txn >= 3, "only %d kills landed inside a transaction", in_txn);
  /* At least one kill must land after the job made new progress, or resumption went untested;
   * how many do depends on the machine's load (5+ when idle, as few as 2 under ctest -j2). */
  CHECK(progressed >= 1);
  return lh_test_end();
}
