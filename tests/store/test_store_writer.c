/* test_store_writer.c — the asynchronous writer: checkpoints commit in submission order as one
 * chain, memory is bounded (with max_pending = 1 the next buffer is not handed out before the
 * previous checkpoint is committed), already stored prefixes are skipped, and a failed write
 * surfaces at the next begin/submit/flush/close with the position it was for. */
#include "tests/test.h"
#include "tests/store/toy.h"

static lh_state_layout LAY;

static lh_store_writer *open_writer(const char *path, int max_pending, int64_t max_db) {
  lh_store_writer_params wp = lh_store_writer_default_params();
  wp.max_pending = max_pending;
  wp.store.max_db_bytes = max_db;
  lh_store_writer *w = NULL;
  lh_error e;
  if (lh_store_writer_open(path, &wp, &w, &e)) {
    fprintf(stderr, "writer: %s\n", e.msg);
    exit(1);
  }
  return w;
}

int main(void) {
  lh_test_begin("test_store_writer");
  LAY = toy_layout(2, 32 << 10, 1, 256, 128);
  char path[600];
  snprintf(path, sizeof path, "%s/w.db", lh_test_tmpdir());
  lh_store *s;
  lh_error e;
  CHECK(lh_store_open(path, NULL, &s, &e) == LH_OK);
  const int64_t N = 30 * 16;
  int32_t tok[30 * 16];
  toy_tokens(tok, N, 3);

  /* max_pending = 1: the second begin returns only once the first checkpoint is committed. */
  {
    lh_store_writer *w = open_writer(path, 1, 0);
    toy t;
    toy_init(&t, &LAY);
    lh_store_cursor cur;
    lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
    for (int k = 0; k < 5; k++) {
      toy_feed(&t, tok + t.pos, 16);
      lh_store_cursor_feed(&cur, tok + cur.pos, 16);
      lh_store_ckpt *ck;
      CHECK(lh_store_writer_begin(w, &LAY, &cur, &ck, &e) == LH_OK);
      if (k > 0) {
        int64_t pos, id;
        CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, N, &pos, &id, &e) == LH_OK);
        CHECK_EQ(pos, 16 * k); /* the previous one is already in */
      }
      toy_fill(&t, ck);
      CHECK(lh_store_writer_submit(w, ck, &cur, &e) == LH_OK);
      CHECK_EQ(cur.parent_pos, 16 * (k + 1));
    }
    /* A begun buffer that is cancelled is returned: the next begin does not block forever. */
    lh_store_ckpt *ck;
    toy_feed(&t, tok + t.pos, 16);
    lh_store_cursor_feed(&cur, tok + cur.pos, 16);
    CHECK(lh_store_writer_begin(w, &LAY, &cur, &ck, &e) == LH_OK);
    lh_store_writer_cancel(w, ck);
    CHECK(lh_store_writer_begin(w, &LAY, &cur, &ck, &e) == LH_OK);
    toy_fill(&t, ck);
    CHECK(lh_store_writer_submit(w, ck, &cur, &e) == LH_OK);
    CHECK(lh_store_writer_flush(w, &e) == LH_OK);
    lh_store_writer_stats st;
    lh_store_writer_get_stats(w, &st);
    CHECK_EQ(st.written, 6);
    CHECK(st.bytes > 0);
    CHECK(lh_store_writer_close(w, &e) == LH_OK);
    toy_free(&t);
  }

  /* max_pending = 3, the rest of the stream: one chain, in order, loading back bitwise. */
  {
    lh_store_writer *w = open_writer(path, 3, 0);
    toy t;
    lh_store_cursor cur;
    CHECK(toy_resume(s, &LAY, tok, N, 0, &t, &cur, &e) == LH_OK);
    CHECK_EQ(t.pos, 96);
    while (t.pos < N) {
      toy_feed(&t, tok + t.pos, 16);
      lh_store_cursor_feed(&cur, tok + cur.pos, 16);
      CHECK(toy_checkpoint(w, NULL, &t, &cur, &e) == LH_OK);
    }
    CHECK(lh_store_writer_close(w, &e) == LH_OK);
    char want[65], got[65];
    toy_digest(&t, want);
    toy_free(&t);
    lh_store_ckpt_info *list;
    size_t n;
    CHECK(lh_store_ckpt_list(s, &list, &n, &e) == LH_OK);
    CHECK_EQ(n, 30);
    for (size_t i = 0; i < n; i++) {
      CHECK_EQ(list[i].pos, 16 * (int64_t)(i + 1));
      CHECK_EQ(list[i].parent_pos, 16 * (int64_t)i);
      if (i > 0) CHECK_EQ(list[i].parent_id, list[i - 1].id);
    }
    free(list);
    CHECK(toy_resume(s, &LAY, tok, N, 0, &t, &cur, &e) == LH_OK);
    CHECK_EQ(t.pos, N);
    toy_digest(&t, got);
    CHECK(!strcmp(want, got));
    toy_free(&t);
  }

  /* The same stream again from scratch: every write is skipped, nothing is duplicated. */
  {
    lh_store_writer *w = open_writer(path, 2, 0);
    toy t;
    toy_init(&t, &LAY);
    lh_store_cursor cur;
    lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
    while (t.pos < N) {
      toy_feed(&t, tok + t.pos, 16);
      lh_store_cursor_feed(&cur, tok + cur.pos, 16);
      CHECK(toy_checkpoint(w, NULL, &t, &cur, &e) == LH_OK);
    }
    CHECK(lh_store_writer_flush(w, &e) == LH_OK);
    lh_store_writer_stats st;
    lh_store_writer_get_stats(w, &st);
    CHECK_EQ(st.written, 0);
    CHECK_EQ(st.skipped, 30);
    CHECK(lh_store_writer_close(w, &e) == LH_OK);
    toy_free(&t);
  }

  /* A write that fails (its parent is not stored) is reported by the next calls, with its position;
   * what was queued behind it is not written. */
  {
    lh_store_writer *w = open_writer(path, 2, 0);
    int32_t other[64];
    toy_tokens(other, 64, 77);
    toy t;
    toy_init(&t, &LAY);
    lh_store_cursor cur;
    lh_store_cursor_init(&cur, TOY_MODEL_ID, 0);
    toy_feed(&t, other, 16);
    lh_store_cursor_feed(&cur, other, 16);
    lh_store_cursor_checkpointed(&cur); /* claims a parent at 16 that was never written */
    toy_feed(&t, other + 16, 16);
    lh_store_cursor_feed(&cur, other + 16, 16);
    CHECK(toy_checkpoint(w, NULL, &t, &cur, &e) == LH_OK);
    lh_status st = lh_store_writer_flush(w, &e);
    CHECK_EQ(st, LH_ENOTFOUND);
    CHECK_STR_CONTAINS(e.msg, "checkpoint at position 32 was not written");
    CHECK_STR_CONTAINS(e.msg, "parent checkpoint at 16 is not in the store");
    lh_store_ckpt *ck;
    toy_feed(&t, other + 32, 16);
    lh_store_cursor_feed(&cur, other + 32, 16);
    CHECK(lh_store_writer_begin(w, &LAY, &cur, &ck, &e) == LH_ENOTFOUND);
    CHECK_STR_CONTAINS(e.msg, "position 32");
    CHECK(lh_store_writer_close(w, &e) == LH_ENOTFOUND);
    int64_t pos, id;
    CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, other, 64, &pos, &id, &e) == LH_OK);
    CHECK_EQ(pos, 0);
    toy_free(&t);
  }

  /* Bad parameters. */
  {
    lh_store_writer_params wp = lh_store_writer_default_params();
    lh_store_writer *w;
    wp.max_pending = 0;
    CHECK(lh_store_writer_open(path, &wp, &w, &e) == LH_EINVAL);
    wp = lh_store_writer_default_params();
    wp.store.read_only = 1;
    CHECK(lh_store_writer_open(path, &wp, &w, &e) == LH_EINVAL);
    CHECK(lh_store_writer_close(NULL, &e) == LH_OK);
  }

  lh_store_close(s);
  return lh_test_end();
}
