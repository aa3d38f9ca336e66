/* test_store_ckpt.c — checkpoints without the engine: prefix hashes against Python's hashlib,
 * chains written and loaded back bitwise (pages split across several rows), prefix lookup picking
 * the longest stored prefix for the right model, content addressing across jobs with different
 * chunk plans, and resuming a sequence from a checkpoint to the same bits as an uninterrupted run. */
#include "tests/test.h"
#include "tests/store/setup.h"
#include "tests/store/toy.h"
#include "util/log.h"

static lh_store *open_store(const char *name) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", lh_test_tmpdir(), name);
  lh_store_params sp = lh_store_default_params();
  sp.page_bytes = 64 << 10; /* small pages so every part spans several rows */
  return setup_store_open(path, &sp);
}

/* Feed toy and cursor up to position `to`, checkpoint there synchronously. */
static void advance_and_save(lh_store *s, toy *t, lh_store_cursor *cur, const int32_t *tok, int64_t to) {
  int64_t n = to - t->pos;
  toy_feed(t, tok + t->pos, n);
  lh_store_cursor_feed(cur, tok + cur->pos, n);
  lh_error e;
  lh_status st = toy_checkpoint(NULL, s, t, cur, &e);
  CHECK_MSG(st == LH_OK, "checkpoint at %lld: %s", (long long)to, e.msg);
}

static void digest_at(const lh_state_layout *lay, const int32_t *tok, int64_t p, char out[65]) {
  toy t;
  toy_init(&t, lay);
  toy_feed(&t, tok, p);
  toy_digest(&t, out);
  toy_free(&t);
}

static int load_digest(lh_store *s, const lh_state_layout *lay, int64_t id, int64_t pos, char out[65]) {
  toy t;
  toy_init(&t, lay);
  lh_error e;
  lh_status st = lh_store_ckpt_load(s, id, toy_load_cb, &t, &e);
  if (st) fprintf(stderr, "load %lld: %s\n", (long long)id, e.msg);
  t.pos = pos;
  toy_digest(&t, out);
  toy_free(&t);
  return st;
}

int main(void) {
  lh_test_begin("test_store_ckpt");
  lh_error e;

  /* Prefix hashes: SHA-256 of little-endian uint32 token bytes (values from Python's hashlib:
   * hashlib.sha256(struct.pack('<3I', 1, 2, 3)) and struct.pack('<3i', -1, 0, 200063)). */
  {
    uint8_t d[32];
    char hx[65];
    int32_t a[3] = {1, 2, 3}, b[3] = {-1, 0, 200063};
    lh_store_prefix_hash(a, 3, d);
    lh_hex(d, 32, hx);
    CHECK(!strcmp(hx, "4636993d3e1da4e9d6b8f87b79e8f7c6d018580d52661950eabc3845c5897a4d"));
    lh_store_prefix_hash(b, 3, d);
    lh_hex(d, 32, hx);
    CHECK(!strcmp(hx, "bc97c35de2c50f009a1ecb9b89bc7077d5c815131f8474eee8ca6424ac42fc58"));
    lh_store_prefix_hash(a, 0, d);
    lh_hex(d, 32, hx);
    CHECK(!strcmp(hx, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    /* The running hash read in pieces equals the one-shot hash. */
    int32_t tok[100];
    toy_tokens(tok, 100, 7);
    lh_store_cursor c;
    lh_store_cursor_init(&c, TOY_MODEL_ID, 0);
    lh_store_cursor_feed(&c, tok, 13);
    lh_store_cursor_feed(&c, tok + 13, 0);
    lh_store_cursor_feed(&c, tok + 13, 87);
    uint8_t d1[32], d2[32];
    lh_sha256_final(&c.hash, d1);
    lh_store_prefix_hash(tok, 100, d2);
    CHECK(!memcmp(d1, d2, 32));
    CHECK_EQ(c.pos, 100);
  }

  /* Three lightning layers of 96 KiB (two pages each at 64 KiB pages), two softmax layers of
   * 640-byte rows (102 rows per page), 300 logits. */
  lh_state_layout lay = toy_layout(3, 96 << 10, 2, 640, 300);
  const int64_t N = 1000;
  int32_t *tok = malloc(N * sizeof *tok);
  toy_tokens(tok, N, 42);
  lh_store *s = open_store("ckpt.db");
  CHECK_EQ(lh_store_schema_version(s), LH_STORE_SCHEMA_VERSION);

  /* Job A: checkpoints at 100, 250, 600 (an uneven chunk plan). */
  int64_t batch, jobA, jobB;
  lh_store_job_spec sa = {"a", "{}", NULL, NULL, NULL}, sb = {"b", "{}", NULL, NULL, NULL};
  CHECK(lh_store_batch_put(s, "t", &batch, &e) == LH_OK);
  CHECK(lh_store_job_add(s, batch, &sa, &jobA, NULL, &e) == LH_OK);
  CHECK(lh_store_job_add(s, batch, &sb, &jobB, NULL, &e) == LH_OK);
  toy t;
  toy_init(&t, &lay);
  lh_store_cursor cur;
  lh_store_cursor_init(&cur, TOY_MODEL_ID, jobA);
  advance_and_save(s, &t, &cur, tok, 100);
  advance_and_save(s, &t, &cur, tok, 250);
  advance_and_save(s, &t, &cur, tok, 600);
  toy_free(&t);

  char want[65], got[65];
  int64_t pos, id, id600, id250, id100;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, N, &pos, &id600, &e) == LH_OK);
  CHECK_EQ(pos, 600);
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, 599, &pos, &id250, &e) == LH_OK);
  CHECK_EQ(pos, 250);
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, 250, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 250);
  CHECK_EQ(id, id250);
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, 249, &pos, &id100, &e) == LH_OK);
  CHECK_EQ(pos, 100);
  /* A token changed after 250 keeps 250; one changed before 100 leaves nothing. */
  int32_t *alt = malloc(N * sizeof *alt);
  memcpy(alt, tok, N * sizeof *alt);
  alt[300] ^= 1;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, alt, N, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 250);
  alt[300] ^= 1;
  alt[50] ^= 1;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, alt, N, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 0);
  CHECK_EQ(id, 0);
  CHECK(lh_store_prefix_lookup(s, "7e57000000000000000000000000000000000000000000000000000000000002", tok, N, &pos, &id,
                               &e) == LH_OK);
  CHECK_EQ(pos, 0);

  /* The streaming form: stored positions, then a running hash compared at each. */
  {
    int64_t *ps;
    size_t np;
    CHECK(lh_store_prefix_positions(s, TOY_MODEL_ID, N, &ps, &np, &e) == LH_OK);
    CHECK_EQ(np, 3);
    if (np == 3) CHECK(ps[0] == 100 && ps[1] == 250 && ps[2] == 600);
    free(ps);
    CHECK(lh_store_prefix_positions(s, TOY_MODEL_ID, 249, &ps, &np, &e) == LH_OK);
    CHECK_EQ(np, 1);
    free(ps);
    lh_store_cursor c;
    lh_store_cursor_init(&c, TOY_MODEL_ID, 0);
    lh_store_cursor_feed(&c, tok, 250);
    uint8_t h[32];
    lh_sha256_final(&c.hash, h);
    CHECK(lh_store_ckpt_find(s, TOY_MODEL_ID, h, &id, &e) == LH_OK);
    CHECK_EQ(id, id250);
    lh_store_cursor_feed(&c, tok + 250, 1);
    lh_sha256_final(&c.hash, h);
    CHECK(lh_store_ckpt_find(s, TOY_MODEL_ID, h, &id, &e) == LH_ENOTFOUND);
    /* A cursor made with a malformed model id cannot checkpoint. */
    lh_store_cursor_init(&c, "abc", 0);
    lh_store_cursor_feed(&c, tok, 10);
    lh_store_ckpt *ck;
    CHECK(lh_store_ckpt_new(&lay, &c, &ck, &e) == LH_EINVAL);
    CHECK_STR_CONTAINS(e.msg, "64 hex characters");
  }

  /* Chains load back bitwise, at every checkpoint. */
  digest_at(&lay, tok, 600, want);
  CHECK(load_digest(s, &lay, id600, 600, got) == LH_OK);
  CHECK(!strcmp(want, got));
  digest_at(&lay, tok, 250, want);
  CHECK(load_digest(s, &lay, id250, 250, got) == LH_OK);
  CHECK(!strcmp(want, got));

  lh_store_ckpt_info info;
  CHECK(lh_store_ckpt_get(s, id600, &info, &e) == LH_OK);
  CHECK_EQ(info.pos, 600);
  CHECK_EQ(info.parent_id, id250);
  CHECK_EQ(info.parent_pos, 250);
  CHECK_EQ(info.job_id, jobA);
  CHECK_EQ(info.has_state, 1);
  CHECK_EQ(info.kv_bytes, 2 * 350 * 640);
  CHECK_EQ(info.state_bytes, 3 * (96 << 10) + 300 * 4);
  /* pages: lightning 3 x 2, KV 2 x ceil(350 / 102) = 2 x 4, logits 1 */
  CHECK_EQ(info.n_pages, 6 + 8 + 1);
  CHECK_EQ(info.n_children, 0);
  CHECK(lh_store_ckpt_get(s, id250, &info, &e) == LH_OK);
  CHECK_EQ(info.n_children, 1);
  lh_store_job_info ji;
  CHECK(lh_store_job_get(s, jobA, &ji, &e) == LH_OK);
  CHECK_EQ(ji.ckpt_id, id600);
  CHECK_EQ(ji.tokens_done, 600);
  lh_store_job_info_clear(&ji);

  /* Resume at 600 and continue: the same bits as the uninterrupted run to N. */
  {
    toy r;
    lh_store_cursor rc;
    CHECK(toy_resume(s, &lay, tok, N, jobA, &r, &rc, &e) == LH_OK);
    CHECK_EQ(r.pos, 600);
    CHECK_EQ(rc.parent_pos, 600);
    toy_feed(&r, tok + 600, N - 600);
    toy_digest(&r, got);
    digest_at(&lay, tok, N, want);
    CHECK(!strcmp(want, got));
    toy_free(&r);
  }

  /* Job B shares the first 700 tokens and uses another chunk plan: 250 already exists (its write
   * is skipped and the chain continues from it), 400 and 700 are new. */
  memcpy(alt, tok, N * sizeof *alt);
  for (int64_t i = 700; i < N; i++) alt[i] = (alt[i] + 1) % 50000;
  toy_init(&t, &lay);
  lh_store_cursor_init(&cur, TOY_MODEL_ID, jobB);
  advance_and_save(s, &t, &cur, alt, 250);
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, alt, 250, &pos, &id, &e) == LH_OK);
  CHECK_EQ(id, id250);
  advance_and_save(s, &t, &cur, alt, 400);
  advance_and_save(s, &t, &cur, alt, 700);
  toy_free(&t);
  int64_t id700;
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, alt, N, &pos, &id700, &e) == LH_OK);
  CHECK_EQ(pos, 700);
  CHECK(lh_store_ckpt_get(s, id700, &info, &e) == LH_OK);
  CHECK_EQ(info.parent_pos, 400);
  CHECK(lh_store_ckpt_get(s, info.parent_id, &info, &e) == LH_OK);
  CHECK_EQ(info.parent_id, id250);
  digest_at(&lay, alt, 700, want);
  CHECK(load_digest(s, &lay, id700, 700, got) == LH_OK);
  CHECK(!strcmp(want, got));
  /* B's 700 is a prefix of A's stream too (they agree on 700 tokens): A would now resume there,
   * and restoring it continues to A's uninterrupted bits. */
  CHECK(lh_store_prefix_lookup(s, TOY_MODEL_ID, tok, N, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 700);
  CHECK_EQ(id, id700);
  {
    toy r;
    lh_store_cursor rc;
    CHECK(toy_resume(s, &lay, tok, N, 0, &r, &rc, &e) == LH_OK);
    toy_feed(&r, tok + r.pos, N - r.pos);
    toy_digest(&r, got);
    digest_at(&lay, tok, N, want);
    CHECK(!strcmp(want, got));
    toy_free(&r);
  }
  CHECK(lh_store_job_get(s, jobB, &ji, &e) == LH_OK);
  CHECK_EQ(ji.ckpt_id, id700);
  lh_store_job_info_clear(&ji);

  /* A cursor naming a parent that is not stored is refused; so is a bad cursor. */
  {
    lh_store_cursor bad;
    lh_store_cursor_init(&bad, TOY_MODEL_ID, 0);
    lh_store_cursor_feed(&bad, alt, 10);
    lh_store_cursor_checkpointed(&bad); /* pretends a checkpoint at 10 exists */
    lh_store_cursor_feed(&bad, alt + 10, 10);
    lh_store_ckpt *ck;
    CHECK(lh_store_ckpt_new(&lay, &bad, &ck, &e) == LH_OK);
    memset(lh_store_ckpt_lightning(ck, 0), 0, lh_store_ckpt_bytes(ck));
    CHECK(lh_store_ckpt_write(s, ck, NULL, &e) == LH_ENOTFOUND);
    CHECK_STR_CONTAINS(e.msg, "parent checkpoint at 10 is not in the store");
    lh_store_ckpt_free(ck);
    lh_store_cursor_init(&bad, TOY_MODEL_ID, 0);
    CHECK(lh_store_ckpt_new(&lay, &bad, &ck, &e) == LH_EINVAL); /* position 0 */
    lh_store_cursor_init(&bad, "short", 0);
    lh_store_cursor_feed(&bad, alt, 10);
    CHECK(lh_store_ckpt_new(&lay, &bad, &ck, &e) == LH_EINVAL);
  }

  /* Listing, and a verify that finds nothing wrong. */
  lh_store_ckpt_info *list;
  size_t n;
  CHECK(lh_store_ckpt_list(s, &list, &n, &e) == LH_OK);
  CHECK_EQ(n, 5);
  for (size_t i = 1; i < n; i++) CHECK(list[i - 1].pos <= list[i].pos);
  free(list);
  lh_store_verify_report vr;
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
  CHECK_EQ(vr.damaged, 0);
  CHECK_EQ(vr.checkpoints, 5);
  CHECK(vr.db_ok);
  lh_buf_free(&vr.problems);
  lh_store_stats stt;
  CHECK(lh_store_get_stats(s, &stt, &e) == LH_OK);
  CHECK_EQ(stt.checkpoints, 5);
  CHECK_EQ(stt.page_size, 65536);
  CHECK_EQ(stt.kv_bytes, 2 * 640 * (100 + 150 + 350 + 150 + 300));

  /* Page size limits are checked. */
  {
    lh_store_params sp = lh_store_default_params();
    sp.page_bytes = 1000;
    lh_store *x;
    char path[600];
    snprintf(path, sizeof path, "%s/bad.db", lh_test_tmpdir());
    CHECK(lh_store_open(path, &sp, &x, &e) == LH_EINVAL);
    CHECK_STR_CONTAINS(e.msg, "page_bytes");
  }

  lh_store_close(s);
  free(tok);
  free(alt);
  return lh_test_end();
}
