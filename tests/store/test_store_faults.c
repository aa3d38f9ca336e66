/* test_store_faults.c — damage and hostile conditions, each followed by proof that nothing damaged
 * is used and the work completes to the uninterrupted run's bits:
 *   - a flipped byte in a KV page, a truncated page, a missing page, damaged logits of a checkpoint
 *     with descendants: detected on load, warned, removed, recomputed from the last good one;
 *     verify reports them and --repair removes them;
 *   - disk full through a database size limit (PRAGMA max_page_count): a clear error from the async
 *     writer, the database intact, and the job resumable once the limit is lifted;
 *   - a database from a newer schema version, a foreign SQLite database, a file that is not a
 *     database, a read-only store, and a database locked by another process: clear errors. */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/store/setup.h"
#include "tests/store/spawn.h"
#include "tests/store/toy.h"
#include "util/fs.h"

static lh_state_layout LAY;
static int32_t TOK[1200];
static const int64_t N = 800;
static char REF[65];

static lh_store *open_path(const char *path, int64_t max_bytes) {
  lh_store_params sp = lh_store_default_params();
  sp.page_bytes = 64 << 10;
  sp.max_db_bytes = max_bytes;
  return setup_store_open(path, &sp);
}

/* Resume from the store and run to N with checkpoints every 200 tokens; returns the resume point. */
static int64_t run(lh_store *s, lh_store_writer *w, char digest[65]) {
  toy t;
  lh_store_cursor cur;
  lh_error e;
  lh_status st = toy_resume(s, &LAY, TOK, N, 0, &t, &cur, &e);
  CHECK_MSG(st == LH_OK, "resume: %s", e.msg);
  if (st) return -1;
  int64_t from = t.pos;
  while (t.pos < N) {
    int64_t c = 200 - t.pos % 200;
    toy_feed(&t, TOK + t.pos, c);
    lh_store_cursor_feed(&cur, TOK + cur.pos, c);
    st = toy_checkpoint(w, s, &t, &cur, &e);
    CHECK_MSG(st == LH_OK, "checkpoint at %lld: %s", (long long)t.pos, e.msg);
  }
  if (w) CHECK(lh_store_writer_flush(w, &e) == LH_OK);
  toy_digest(&t, digest);
  toy_free(&t);
  return from;
}

static int64_t ckpt_at(lh_store *s, int64_t p) {
  int64_t pos, id;
  lh_error e;
  if (lh_store_prefix_lookup(s, TOY_MODEL_ID, TOK, p, &pos, &id, &e) || pos != p) return 0;
  return id;
}

/* Flip one byte of a page behind the store's back (incremental BLOB I/O on a raw connection). */
static void flip(const char *path, int64_t ckpt, int part, int layer, int seq, int offset) {
  sqlite3 *db;
  CHECK(sqlite3_open(path, &db) == SQLITE_OK);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT id FROM ckpt_pages WHERE ckpt_id=%lld AND part=%d AND layer=%d AND seq=%d",
           (long long)ckpt, part, layer, seq);
  sqlite3_stmt *q;
  CHECK(sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK);
  CHECK(sqlite3_step(q) == SQLITE_ROW);
  int64_t row = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  sqlite3_blob *b;
  CHECK(sqlite3_blob_open(db, "main", "ckpt_pages", "data", row, 1, &b) == SQLITE_OK);
  unsigned char c;
  CHECK(sqlite3_blob_read(b, &c, 1, offset) == SQLITE_OK);
  c ^= 0x10;
  CHECK(sqlite3_blob_write(b, &c, 1, offset) == SQLITE_OK);
  sqlite3_blob_close(b);
  sqlite3_close(db);
}

static void sql_on(const char *path, const char *fmt, long long a, int b, int c, int d) {
  char sql[512];
  snprintf(sql, sizeof sql, fmt, a, b, c, d);
  CHECK(raw_sql(path, sql) == SQLITE_OK);
}

static int64_t verify_damaged(lh_store *s, int repair, const char *expect) {
  lh_store_verify_report r;
  lh_error e;
  CHECK(lh_store_verify(s, repair, &r, &e) == LH_OK);
  if (expect) CHECK_STR_CONTAINS(r.problems.data ? r.problems.data : "", expect);
  int64_t d = r.damaged;
  CHECK(r.db_ok);
  lh_buf_free(&r.problems);
  return d;
}

static void corruption(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/damage.db", dir);
  lh_store *s = open_path(path, 0);
  char got[65];
  CHECK_EQ(run(s, NULL, got), 0);
  CHECK(!strcmp(got, REF));
  CHECK_EQ(verify_damaged(s, 0, NULL), 0);

  /* The chain is 200 -> 400 -> 600 -> 800 (= N).
   * 1. A flipped byte in 400's KV rows: the resume at 800 needs them, so 400 and its descendants
   *    are dropped and the run resumes at 200. */
  int64_t c400 = ckpt_at(s, 400);
  flip(path, c400, LH_PART_KV, 1, 0, 100);
  CHECK_EQ(verify_damaged(s, 0, "checksum mismatch"), 1);
  warnings[0] = 0;
  CHECK_EQ(run(s, NULL, got), 200);
  CHECK(!strcmp(got, REF));
  CHECK_STR_CONTAINS(warnings, "checksum mismatch");
  CHECK_STR_CONTAINS(warnings, "dropped it and 2 descendant(s)");
  CHECK_EQ(verify_damaged(s, 0, NULL), 0);

  /* 2. A truncated page of the leaf's lightning state: the leaf goes, resume at 600. */
  int64_t c800 = ckpt_at(s, 800);
  CHECK(c800 != 0);
  sql_on(path, "UPDATE ckpt_pages SET data = substr(data, 1, length(data) - 7) WHERE ckpt_id=%lld AND part=%d AND "
               "layer=%d AND seq=%d", (long long)c800, LH_PART_LIGHTNING, 1, 1);
  warnings[0] = 0;
  CHECK_EQ(run(s, NULL, got), 600);
  CHECK(!strcmp(got, REF));
  CHECK_STR_CONTAINS(warnings, "truncated");

  /* 3. A missing KV page of the leaf: resume at 600 again. */
  c800 = ckpt_at(s, 800);
  sql_on(path, "DELETE FROM ckpt_pages WHERE ckpt_id=%lld AND part=%d AND layer=%d AND seq=%d", (long long)c800,
         LH_PART_KV, 0, 1);
  CHECK_EQ(verify_damaged(s, 0, "missing"), 1);
  warnings[0] = 0;
  CHECK_EQ(run(s, NULL, got), 600);
  CHECK(!strcmp(got, REF));
  CHECK_STR_CONTAINS(warnings, "missing");

  /* 4. Damaged logits of 400, which has descendants: restoring 800 never reads them (and is still
   *    exact); resuming a stream that ends at 500 would, so 400 loses its state but keeps its KV
   *    rows for 600 and 800, and that stream resumes at 200. */
  c400 = ckpt_at(s, 400);
  flip(path, c400, LH_PART_LOGITS, 0, 0, 8);
  CHECK_EQ(verify_damaged(s, 0, "logits"), 1);
  CHECK_EQ(run(s, NULL, got), 800);
  CHECK(!strcmp(got, REF));
  {
    toy t;
    lh_store_cursor cur;
    lh_error e;
    warnings[0] = 0;
    CHECK(toy_resume(s, &LAY, TOK, 500, 0, &t, &cur, &e) == LH_OK);
    CHECK_EQ(t.pos, 200);
    toy_free(&t);
    CHECK_STR_CONTAINS(warnings, "removed its state");
    lh_store_ckpt_info in;
    CHECK(lh_store_ckpt_get(s, c400, &in, &e) == LH_OK);
    CHECK_EQ(in.has_state, 0);
    CHECK(in.kv_bytes > 0);
  }
  CHECK_EQ(run(s, NULL, got), 800);
  CHECK(!strcmp(got, REF));
  CHECK_EQ(verify_damaged(s, 0, NULL), 0);

  /* 5. verify reports without touching; --repair drops the damaged root and everything under it. */
  flip(path, ckpt_at(s, 200), LH_PART_KV, 0, 0, 0);
  CHECK_EQ(verify_damaged(s, 0, "checkpoint"), 1);
  CHECK(ckpt_at(s, 800) != 0);
  CHECK_EQ(verify_damaged(s, 1, "checksum"), 1);
  CHECK_EQ(ckpt_at(s, 200), 0);
  CHECK_EQ(ckpt_at(s, 800), 0);
  CHECK_EQ(verify_damaged(s, 0, NULL), 0);
  CHECK_EQ(run(s, NULL, got), 0);
  CHECK(!strcmp(got, REF));
  lh_store_close(s);
}

static void disk_full(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/full.db", dir);
  lh_store *s = open_path(path, 0);
  lh_error e;
  /* The writer may grow the file to 2 MiB: room for a few of the 18 checkpoints below. */
  lh_store_writer_params wp = lh_store_writer_default_params();
  wp.store.page_bytes = 64 << 10;
  wp.store.max_db_bytes = 2 << 20;
  lh_store_writer *w;
  CHECK(lh_store_writer_open(path, &wp, &w, &e) == LH_OK);
  const int64_t n = 1200;
  int32_t tok[1200];
  toy_tokens(tok, n, 99);
  toy t;
  toy_init(&t, &LAY);
  lh_store_cursor cur;
  lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
  lh_status st = LH_OK;
  while (t.pos < n && st == LH_OK) {
    int64_t c = n - t.pos < 64 ? n - t.pos : 64;
    toy_feed(&t, tok + t.pos, c);
    lh_store_cursor_feed(&cur, tok + cur.pos, c);
    st = toy_checkpoint(w, NULL, &t, &cur, &e);
  }
  if (st == LH_OK) st = lh_store_writer_flush(w, &e);
  CHECK_EQ(st, LH_EFULL);
  CHECK_STR_CONTAINS(e.msg, "was not written");
  CHECK_STR_CONTAINS(e.msg, "size limit of 2097152 bytes");
  CHECK_STR_CONTAINS(e.msg, "nothing was half written");
  /* Sticky: flush and close report it too. */
  CHECK(lh_store_writer_flush(w, &e) == LH_EFULL);
  CHECK(lh_store_writer_close(w, &e) == LH_EFULL);
  char want[65];
  toy_free(&t);
  toy_init(&t, &LAY);
  toy_feed(&t, tok, n);
  toy_digest(&t, want);
  toy_free(&t);
  /* Intact, with some checkpoints committed. */
  CHECK_EQ(verify_damaged(s, 0, NULL), 0);
  int64_t pos, id;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, n, &pos, &id, &e) == LH_OK);
  CHECK(pos > 0 && pos < n);
  int64_t b;
  CHECK(lh_store_batch_put(s, "still-writable", &b, &e) == LH_OK);
  /* Lifting the limit resumes where the last committed checkpoint left off. */
  lh_store_cursor c2;
  CHECK(toy_resume(s, &LAY, tok, n, 0, &t, &c2, &e) == LH_OK);
  CHECK_EQ(t.pos, pos);
  CHECK(lh_store_writer_open(path, NULL, &w, &e) == LH_OK);
  while (t.pos < n) {
    int64_t c = n - t.pos < 64 ? n - t.pos : 64;
    toy_feed(&t, tok + t.pos, c);
    lh_store_cursor_feed(&c2, tok + c2.pos, c);
    CHECK(toy_checkpoint(w, NULL, &t, &c2, &e) == LH_OK);
  }
  CHECK(lh_store_writer_close(w, &e) == LH_OK);
  char got[65];
  toy_digest(&t, got);
  toy_free(&t);
  CHECK(!strcmp(got, want));
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, n, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, n);
  lh_store_close(s);
}

static void refusals(const char *dir, const char *driver) {
  char path[600];
  lh_error e;
  lh_store *s;
  lh_store_params sp = lh_store_default_params();

  /* A newer schema: refused, writable or not, and left alone. */
  snprintf(path, sizeof path, "%s/newer.db", dir);
  s = open_path(path, 0);
  lh_store_close(s);
  CHECK(raw_sql(path, "PRAGMA user_version = 99") == SQLITE_OK);
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(e.msg, "made by a newer longhaul (schema 99");
  sp.read_only = 1;
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_EUNSUPPORTED);
  sp.read_only = 0;

  /* Another application's SQLite database: refused, untouched. */
  snprintf(path, sizeof path, "%s/foreign.db", dir);
  CHECK(raw_sql(path, "CREATE TABLE t(x); INSERT INTO t VALUES(1)") == SQLITE_OK);
  struct stat before, after;
  stat(path, &before);
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "not a longhaul store");
  stat(path, &after);
  CHECK_EQ(before.st_size, after.st_size);
  CHECK(before.st_mtime == after.st_mtime);

  /* Not a database at all. */
  snprintf(path, sizeof path, "%s/text.db", dir);
  FILE *f = fopen(path, "w");
  for (int i = 0; i < 200; i++) fputs("this is not a database\n", f);
  fclose(f);
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_ECORRUPT);
  CHECK_STR_CONTAINS(e.msg, "not a longhaul store, or its SQLite structure is damaged");

  /* Missing files: created only when asked to. */
  snprintf(path, sizeof path, "%s/absent.db", dir);
  sp.create = 0;
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_ENOTFOUND);
  sp.create = 1;
  sp.read_only = 1;
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_ENOTFOUND);
  CHECK(!lh_is_file(path));

  /* Read-only: reading works, every write says why it cannot. */
  snprintf(path, sizeof path, "%s/damage.db", dir);
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_OK);
  int64_t pos, id, b;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, TOK, N, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 800);
  CHECK(lh_store_batch_put(s, "x", &b, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "opened read-only");
  lh_store_cursor cur;
  lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
  lh_store_cursor_feed(&cur, TOK, 10);
  lh_store_ckpt *ck;
  CHECK(lh_store_ckpt_new(&LAY, &cur, &ck, &e) == LH_OK);
  memset(lh_store_ckpt_lightning(ck, 0), 0, lh_store_ckpt_bytes(ck));
  CHECK(lh_store_ckpt_write(s, ck, NULL, &e) == LH_EINVAL);
  lh_store_ckpt_free(ck);
  lh_store_gc_params gp = lh_store_gc_default_params();
  lh_store_gc_report gr;
  CHECK(lh_store_gc(s, &gp, &gr, &e) == LH_EINVAL);
  lh_store_close(s);
  sp.read_only = 0;
  /* A file that cannot be written: by permissions, or as root (whom permissions do not bind) by
   * the immutable attribute where the file system and the capabilities allow it. */
  char cmd[700];
  int readonly_file = 0;
  if (geteuid() != 0) {
    readonly_file = chmod(path, 0444) == 0;
  } else {
    snprintf(cmd, sizeof cmd, "chattr +i '%s' 2>/dev/null", path);
    readonly_file = system(cmd) == 0;
  }
  if (readonly_file) {
    CHECK(lh_store_open(path, &sp, &s, &e) == LH_EINVAL);
    CHECK_STR_CONTAINS(e.msg, "not writable");
    sp.read_only = 1;
    CHECK(lh_store_open(path, &sp, &s, &e) == LH_OK); /* reading still works */
    lh_store_close(s);
    sp.read_only = 0;
    if (geteuid() != 0) {
      chmod(path, 0644);
    } else {
      snprintf(cmd, sizeof cmd, "chattr -i '%s'", path);
      CHECK(system(cmd) == 0);
    }
  } else {
    fprintf(stderr, "note: cannot make a file unwritable here (root without chattr +i): that case is not run\n");
  }

  /* Locked by another process: the open waits busy_timeout_ms, then says who to blame. */
  char *largv[] = {(char *)driver, "lock", "--db", path, NULL};
  FILE *to = NULL, *from = NULL;
  pid_t pid = spawn(largv, &to, &from);
  char line[32] = "";
  CHECK(fgets(line, sizeof line, from) && !strncmp(line, "locked", 6));
  sp.busy_timeout_ms = 300;
  double t0 = lh_now();
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_EBUSY);
  double waited = lh_now() - t0;
  CHECK_STR_CONTAINS(e.msg, "locked by another process (waited 300 ms)");
  CHECK_MSG(waited >= 0.25 && waited < 10, "waited %.3f s", waited);
  fputs("release\n", to);
  fclose(to);
  CHECK_EQ(wait_status(pid), 0);
  fclose(from);
  CHECK(lh_store_open(path, &sp, &s, &e) == LH_OK);
  lh_store_close(s);
}

int main(int argc, char **argv) {
  lh_test_begin("test_store_faults");
  if (argc < 2) LH_TEST_SKIP("needs the store_driver path as its argument");
  lh_log_set_sink(warnings_sink, NULL);
  LAY = toy_layout(2, 96 << 10, 2, 640, 300);
  toy_tokens(TOK, 1200, 5);
  toy t;
  toy_init(&t, &LAY);
  toy_feed(&t, TOK, N);
  toy_digest(&t, REF);
  toy_free(&t);
  const char *dir = lh_test_tmpdir();
  corruption(dir);
  disk_full(dir);
  refusals(dir, argv[1]);
  lh_log_set_sink(NULL, NULL);
  return lh_test_end();
}
