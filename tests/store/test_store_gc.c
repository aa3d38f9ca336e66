/* test_store_gc.c — retention. A forest of three jobs' chains:
 *     A (done):   100 200 300 400 500 600
 *     B (queued): shares A's first 300 tokens, then 400' 500' (its resume point is 500')
 *     C (done):   its own 100 200 300 400
 * with last-used times A 10 days ago, C 5 days ago, B 1 day ago. Each policy runs on a fresh copy:
 * keep-last-N thins old states and keeps chains loadable; the size cap thins before it deletes and
 * goes least recently used first; age deletes whole stale subtrees; B's chain (queued, then running)
 * is never deleted and its resume point keeps its state; vacuum gives the space back. */
#include "tests/test.h"

#include <time.h>

#include "tests/store/setup.h"
#include "tests/store/spawn.h"
#include "tests/store/toy.h"
#include "util/fs.h"

static lh_state_layout LAY;
static int32_t TA[600], TB[600], TC[400];
static int64_t JA, JB, JC;
static const int64_t DAY = 86400000;

static void chain(lh_store *s, const int32_t *tok, int64_t job, int64_t from, int64_t to) {
  toy t;
  lh_store_cursor cur;
  lh_error e;
  CHECK(toy_resume(s, &LAY, tok, from, job, &t, &cur, &e) == LH_OK);
  CHECK_EQ(t.pos, from);
  while (t.pos < to) {
    toy_feed(&t, tok + t.pos, 100);
    lh_store_cursor_feed(&cur, tok + cur.pos, 100);
    CHECK(toy_checkpoint(NULL, s, &t, &cur, &e) == LH_OK);
  }
  toy_free(&t);
}

static void build(const char *path) {
  lh_store *s = setup_store_open(path, NULL);
  lh_error e;
  int64_t b;
  lh_store_job_spec a = {"A", "{}", NULL, NULL, NULL}, bb = {"B", "{}", NULL, NULL, NULL}, c = {"C", "{}", NULL, NULL, NULL};
  CHECK(lh_store_batch_put(s, "gc", &b, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b, &a, &JA, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b, &bb, &JB, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, b, &c, &JC, NULL, &e) == LH_OK);
  chain(s, TA, JA, 0, 600);
  chain(s, TB, JB, 300, 500);
  chain(s, TC, JC, 0, 400);
  CHECK(lh_store_job_claim(s, JA, &e) == LH_OK);
  CHECK(lh_store_job_done(s, JA, "{}", NULL, 0, &e) == LH_OK);
  CHECK(lh_store_job_claim(s, JC, &e) == LH_OK);
  CHECK(lh_store_job_done(s, JC, "{}", NULL, 0, &e) == LH_OK);
  lh_store_close(s);
  char sql[256];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t t = (int64_t)ts.tv_sec * 1000;
  snprintf(sql, sizeof sql,
           "UPDATE checkpoints SET last_used_ms = CASE job_id WHEN %lld THEN %lld WHEN %lld THEN %lld ELSE %lld END",
           (long long)JA, (long long)(t - 10 * DAY), (long long)JC, (long long)(t - 5 * DAY), (long long)(t - DAY));
  CHECK(raw_sql(path, sql) == SQLITE_OK);
}

static int64_t at(lh_store *s, const int32_t *tok, int64_t p) {
  int64_t pos, id;
  if (lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, p, &pos, &id, NULL) || pos != p) return 0;
  return id;
}

/* The chain ending at p of tok loads and matches a fresh toy run to p. */
static int loads_exactly(lh_store *s, const int32_t *tok, int64_t p) {
  int64_t id = at(s, tok, p);
  if (!id) return 0;
  toy t, r;
  toy_init(&t, &LAY);
  if (lh_store_ckpt_load(s, id, toy_load_cb, &t, NULL)) {
    toy_free(&t);
    return 0;
  }
  t.pos = p;
  toy_init(&r, &LAY);
  toy_feed(&r, tok, p);
  char a[65], b[65];
  toy_digest(&t, a);
  toy_digest(&r, b);
  toy_free(&t);
  toy_free(&r);
  return !strcmp(a, b);
}

static int64_t count(lh_store *s, int thin) {
  lh_store_stats st;
  lh_store_get_stats(s, &st, NULL);
  return thin ? st.thin_checkpoints : st.checkpoints;
}

static int64_t payload(lh_store *s) {
  lh_store_stats st;
  lh_store_get_stats(s, &st, NULL);
  return st.state_bytes + st.kv_bytes;
}

static void copy(const char *from, const char *to) {
  lh_buf b = {0};
  CHECK(lh_file_read(from, (size_t)1 << 30, &b, NULL) == LH_OK);
  CHECK(lh_file_write_atomic(to, b.data, b.len, NULL) == LH_OK);
  lh_buf_free(&b);
}

int main(void) {
  lh_test_begin("test_store_gc");
  LAY = toy_layout(2, 64 << 10, 1, 1024, 256);
  toy_tokens(TA, 600, 1);
  memcpy(TB, TA, sizeof TB);
  toy_tokens(TB + 300, 300, 2);
  toy_tokens(TC, 400, 3);
  const char *dir = lh_test_tmpdir();
  char base[600], path[600];
  snprintf(base, sizeof base, "%s/base.db", dir);
  build(base);
  lh_error e;
  lh_store_gc_report r;
  lh_store_gc_params p;
  lh_store *s;

  /* Dry run: a report, no change. */
  snprintf(path, sizeof path, "%s/dry.db", dir);
  copy(base, path);
  s = setup_store_open(path, NULL);
  CHECK_EQ(count(s, 0), 12);
  p = lh_store_gc_default_params();
  p.keep_last = 1;
  p.dry_run = 1;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK(r.thinned > 0);
  CHECK_EQ(count(s, 1), 0);
  CHECK_EQ(count(s, 0), 12);
  lh_store_close(s);

  /* keep-last 2: A keeps 500 and 600, C keeps 300 and 400, B keeps both of its own; the rest are
   * thinned (all have descendants). Every leaf still loads exactly; old prefixes are no longer
   * resume points. */
  snprintf(path, sizeof path, "%s/keep.db", dir);
  copy(base, path);
  s = setup_store_open(path, NULL);
  int64_t before = payload(s);
  p = lh_store_gc_default_params();
  p.keep_last = 2;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(r.thinned, 6);
  CHECK_EQ(r.deleted, 0);
  CHECK_EQ(r.protected_ckpts, 1);
  CHECK_EQ(count(s, 1), 6);
  CHECK_EQ(payload(s), before - r.bytes_freed);
  CHECK(loads_exactly(s, TA, 600));
  CHECK(loads_exactly(s, TB, 500));
  CHECK(loads_exactly(s, TC, 400));
  CHECK(loads_exactly(s, TC, 300));
  CHECK_EQ(at(s, TA, 400), 0);
  int64_t pos, id;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, TA, 450, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 0);
  lh_store_verify_report vr;
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
  CHECK_EQ(vr.damaged, 0);
  lh_buf_free(&vr.problems);
  /* A thin checkpoint written again gets its state back. */
  {
    toy t;
    toy_init(&t, &LAY);
    toy_feed(&t, TA, 400);
    lh_store_cursor cur;
    lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
    lh_store_cursor_feed(&cur, TA, 300);
    lh_store_cursor_checkpointed(&cur);
    lh_store_cursor_feed(&cur, TA + 300, 100);
    CHECK(toy_checkpoint(NULL, s, &t, &cur, &e) == LH_OK);
    toy_free(&t);
    CHECK(loads_exactly(s, TA, 400));
  }
  lh_store_close(s);

  /* Size cap just under the payload: one step, the least recently used checkpoint with
   * descendants (A's 100) is thinned, nothing is deleted. */
  snprintf(path, sizeof path, "%s/cap1.db", dir);
  copy(base, path);
  s = setup_store_open(path, NULL);
  p = lh_store_gc_default_params();
  p.max_bytes = payload(s) - 1;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(r.thinned, 1);
  CHECK_EQ(r.deleted, 0);
  lh_store_ckpt_info *list;
  size_t nl;
  CHECK(lh_store_ckpt_list(s, &list, &nl, &e) == LH_OK);
  for (size_t i = 0; i < nl; i++)
    CHECK_EQ(list[i].has_state, !(list[i].job_id == JA && list[i].pos == 100));
  free(list);
  lh_store_close(s);

  /* Size cap 0 with B running: everything goes except B's chain, whose ancestors are thinned and
   * whose resume point keeps its state and loads exactly. */
  snprintf(path, sizeof path, "%s/cap0.db", dir);
  copy(base, path);
  s = setup_store_open(path, NULL);
  CHECK(lh_store_job_claim(s, JB, &e) == LH_OK);
  p = lh_store_gc_default_params();
  p.max_bytes = 0;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(count(s, 0), 5); /* A 100 200 300, B 400' 500' */
  CHECK_EQ(count(s, 1), 4);
  CHECK_EQ(r.deleted, 7);
  CHECK(loads_exactly(s, TB, 500));
  CHECK(r.file_after < r.file_before);
  CHECK(lh_store_job_release(s, JB, &e) == LH_OK);
  lh_store_close(s);

  /* Age: older than 7 days deletes A's own tail (400..600) but not what B stands on; older than
   * 3 days also takes C; once B is done nothing is protected and 12 hours clears the rest. */
  snprintf(path, sizeof path, "%s/age.db", dir);
  copy(base, path);
  s = setup_store_open(path, NULL);
  p = lh_store_gc_default_params();
  /* the largest age keeps everything; one more would wrap in milliseconds, and is refused (an age
   * of 2^64/1000 s wrapped to 384 ms and deleted every checkpoint) */
  p.older_than_s = LH_STORE_GC_MAX_AGE_S;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(r.deleted, 0);
  p.older_than_s = LH_STORE_GC_MAX_AGE_S + 1;
  CHECK_EQ(lh_store_gc(s, &p, &r, &e), LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "out of range");
  p.older_than_s = 18446744073709552;
  CHECK_EQ(lh_store_gc(s, &p, &r, &e), LH_EINVAL);
  CHECK_EQ(count(s, 0), 12);
  p.older_than_s = 7 * 86400;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(r.deleted, 3);
  CHECK_EQ(count(s, 0), 9);
  CHECK_EQ(at(s, TA, 400), 0);
  CHECK(at(s, TA, 300) != 0);
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK); /* (loading would refresh last-used times) */
  CHECK_EQ(vr.damaged, 0);
  CHECK_EQ(vr.checkpoints, 9);
  lh_buf_free(&vr.problems);
  p.older_than_s = 3 * 86400;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(r.deleted, 4);
  CHECK(lh_store_job_claim(s, JB, &e) == LH_OK);
  CHECK(lh_store_job_done(s, JB, "{}", NULL, 0, &e) == LH_OK);
  p.older_than_s = 12 * 3600;
  CHECK(lh_store_gc(s, &p, &r, &e) == LH_OK);
  CHECK_EQ(count(s, 0), 0);
  CHECK_EQ(r.protected_ckpts, 0);
  /* Vacuum returned the pages: the file is back near its empty size. */
  lh_store_stats st;
  CHECK(lh_store_get_stats(s, &st, &e) == LH_OK);
  CHECK_MSG(st.freelist_pages == 0, "%lld free pages left", (long long)st.freelist_pages);
  CHECK_MSG(st.file_bytes < 2 << 20, "file is %lld bytes", (long long)st.file_bytes);
  /* A job's resume point that gc removed is cleared, not dangling. */
  lh_store_job_info ji;
  CHECK(lh_store_job_get(s, JA, &ji, &e) == LH_OK);
  CHECK_EQ(ji.ckpt_id, 0);
  lh_store_job_info_clear(&ji);
  lh_store_close(s);
  return lh_test_end();
}
