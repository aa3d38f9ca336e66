/* test_store_engine.c — checkpoints of real engine states (a tiny HF MiniMax fixture with three
 * lightning and two softmax layers, bf16 weights): prefilling with a checkpoint after every chunk,
 * then restoring at every checkpoint and prefilling the rest with the same chunk plan gives
 * bitwise the logits of the uninterrupted run, the restored last logits are the ones the run had
 * there, and greedy decoding from a restored state matches. A damaged checkpoint is dropped and the
 * resume falls back to the last good one, still ending bitwise equal. A checkpoint of one model is
 * refused by another. */
#include "tests/test.h"

#include "engine/engine.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"
#include "tests/store/toy.h"

#define N 1000
#define CHUNK 64

static lh_model *open_model(const char *name) {
  char dir[1024];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(dir, sizeof dir, "%s/tests/fixtures/engine/%s", src ? src : ".", name);
  lh_model_params mp = lh_model_default_params();
  mp.threads = 1;
  lh_model *m = NULL;
  lh_error e;
  if (lh_model_open(dir, &mp, &m, &e)) LH_TEST_SKIP("cannot open the fixture model %s: %s", dir, e.msg);
  return m;
}

/* Prefill tok[from:N) in chunks aligned to CHUNK; optionally checkpoint after each chunk. */
static void prefill_rest(lh_state *st, lh_store_writer *w, lh_store_cursor *cur, const int32_t *tok, float *logits) {
  lh_error e;
  int64_t vocab = lh_model_config(lh_state_model(st))->vocab_size;
  while (lh_state_pos(st) < N) {
    int64_t p = lh_state_pos(st), c = CHUNK - p % CHUNK;
    if (p + c > N) c = N - p;
    lh_status s = lh_prefill(st, tok + p, c, logits, NULL, &e);
    CHECK_MSG(s == LH_OK, "prefill: %s", e.msg);
    if (s) return;
    if (cur) lh_store_cursor_feed(cur, tok + p, c);
    if (w) CHECK_MSG(lh_store_checkpoint_state(w, st, cur, &e) == LH_OK, "checkpoint: %s", e.msg);
  }
  (void)vocab;
}

static void greedy(lh_state *st, int steps, int32_t *out) {
  int vocab = lh_model_config(lh_state_model(st))->vocab_size;
  float *logits = malloc((size_t)vocab * 4);
  memcpy(logits, lh_state_last_logits(st), (size_t)vocab * 4);
  for (int i = 0; i < steps; i++) {
    int32_t best = 0;
    for (int v = 1; v < vocab; v++)
      if (logits[v] > logits[best]) best = v;
    out[i] = best;
    lh_error e;
    CHECK(lh_decode_batch(&st, 1, &best, logits, &e) == LH_OK);
  }
  free(logits);
}

int main(void) {
  lh_test_begin("test_store_engine");
  lh_log_set_sink(warnings_sink, NULL);
  lh_model *m = open_model("hf_bf16_sharded_gqa2");
  const lh_config *cfg = lh_model_config(m);
  CHECK_EQ(cfg->n_softmax, 2);
  int vocab = cfg->vocab_size;
  int32_t tok[N];
  uint64_t x = 12345;
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    tok[i] = (int32_t)(x % (uint64_t)vocab);
  }
  lh_error e;

  /* The uninterrupted run with this chunk plan, and its last logits after every chunk. */
  int nchunks = (N + CHUNK - 1) / CHUNK;
  float *ref = malloc((size_t)vocab * 4 * (size_t)nchunks);
  lh_state *st;
  CHECK(lh_state_new(m, &st, &e) == LH_OK);
  for (int k = 0; k < nchunks; k++) {
    int64_t p = (int64_t)k * CHUNK, c = p + CHUNK > N ? N - p : CHUNK;
    CHECK(lh_prefill(st, tok + p, c, ref + (size_t)k * vocab, NULL, &e) == LH_OK);
  }
  int32_t ref_greedy[8];
  greedy(st, 8, ref_greedy);
  lh_state_free(st);
  const float *ref_final = ref + (size_t)(nchunks - 1) * vocab;

  char path[600];
  snprintf(path, sizeof path, "%s/engine.db", lh_test_tmpdir());
  lh_store *s;
  CHECK(lh_store_open(path, NULL, &s, &e) == LH_OK);
  CHECK(lh_store_model_register(s, m, &e) == LH_OK);
  int64_t batch, job;
  lh_store_job_spec spec = {"e", "{}", NULL, lh_model_id(m), NULL};
  CHECK(lh_store_batch_put(s, "engine", &batch, &e) == LH_OK);
  CHECK(lh_store_job_add(s, batch, &spec, &job, NULL, &e) == LH_OK);

  /* Run with checkpoints, "killed" after 5 chunks (320 tokens). */
  lh_store_writer *w;
  CHECK(lh_store_writer_open(path, NULL, &w, &e) == LH_OK);
  lh_store_cursor cur;
  CHECK(lh_store_resume(s, m, tok, N, job, &st, &cur, &e) == LH_OK);
  CHECK_EQ(lh_state_pos(st), 0);
  float *logits = malloc((size_t)vocab * 4);
  for (int k = 0; k < 5; k++) {
    CHECK(lh_prefill(st, tok + (size_t)k * CHUNK, CHUNK, logits, NULL, &e) == LH_OK);
    lh_store_cursor_feed(&cur, tok + (size_t)k * CHUNK, CHUNK);
    CHECK(lh_store_checkpoint_state(w, st, &cur, &e) == LH_OK);
  }
  CHECK(lh_store_writer_close(w, &e) == LH_OK);
  lh_state_free(st);

  /* Resume: at 320, with the logits the run had there, and the rest is bitwise the reference. */
  CHECK(lh_store_writer_open(path, NULL, &w, &e) == LH_OK);
  CHECK(lh_store_resume(s, m, tok, N, job, &st, &cur, &e) == LH_OK);
  CHECK_EQ(lh_state_pos(st), 5 * CHUNK);
  CHECK_EQ(cur.pos, 5 * CHUNK);
  CHECK(lh_state_last_logits(st) && !memcmp(lh_state_last_logits(st), ref + 4 * (size_t)vocab, (size_t)vocab * 4));
  prefill_rest(st, w, &cur, tok, logits);
  CHECK_MSG(!memcmp(logits, ref_final, (size_t)vocab * 4), "resumed run differs from the uninterrupted one");
  CHECK(lh_store_writer_close(w, &e) == LH_OK);
  lh_state_free(st);
  lh_store_job_info ji;
  CHECK(lh_store_job_get(s, job, &ji, &e) == LH_OK);
  CHECK_EQ(ji.tokens_done, N);
  lh_store_job_info_clear(&ji);

  /* Every checkpoint is a valid restart point. */
  lh_store_ckpt_info *list;
  size_t n;
  CHECK(lh_store_ckpt_list(s, &list, &n, &e) == LH_OK);
  CHECK_EQ(n, (size_t)nchunks);
  for (size_t i = 0; i < n; i++) {
    CHECK(lh_store_restore(s, m, list[i].id, &st, &e) == LH_OK);
    CHECK_EQ(lh_state_pos(st), list[i].pos);
    CHECK(!memcmp(lh_state_last_logits(st), ref + i * (size_t)vocab, (size_t)vocab * 4));
    prefill_rest(st, NULL, NULL, tok, logits);
    CHECK_MSG(!memcmp(logits, ref_final, (size_t)vocab * 4), "restart at %lld differs", (long long)list[i].pos);
    lh_state_free(st);
  }
  /* Decoding from the restored final state matches decoding from the uninterrupted one. */
  CHECK(lh_store_restore(s, m, list[n - 1].id, &st, &e) == LH_OK);
  int32_t got_greedy[8];
  greedy(st, 8, got_greedy);
  CHECK(!memcmp(got_greedy, ref_greedy, sizeof got_greedy));
  lh_state_free(st);
  int64_t id192 = list[2].id, id128 = list[1].id;
  CHECK_EQ(list[2].pos, 192);
  free(list);

  /* Damage the KV rows of the checkpoint at 192: resuming a stream that needs them falls back to
   * 128 with a warning, and the recomputed run is still bitwise the reference. */
  {
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT id FROM ckpt_pages WHERE ckpt_id = %lld AND part = 1 AND layer = 1",
             (long long)id192);
    sqlite3_stmt *q;
    CHECK(sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW);
    int64_t row = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_blob *b;
    CHECK(sqlite3_blob_open(db, "main", "ckpt_pages", "data", row, 1, &b) == SQLITE_OK);
    unsigned char c = 0x5a;
    CHECK(sqlite3_blob_write(b, &c, 1, 17) == SQLITE_OK);
    sqlite3_blob_close(b);
    sqlite3_close(db);
  }
  warnings[0] = 0;
  CHECK(lh_store_writer_open(path, NULL, &w, &e) == LH_OK);
  CHECK(lh_store_resume(s, m, tok, N, job, &st, &cur, &e) == LH_OK);
  CHECK_EQ(lh_state_pos(st), 128);
  CHECK_STR_CONTAINS(warnings, "checksum mismatch");
  prefill_rest(st, w, &cur, tok, logits);
  CHECK(!memcmp(logits, ref_final, (size_t)vocab * 4));
  CHECK(lh_store_writer_close(w, &e) == LH_OK);
  lh_state_free(st);
  lh_store_ckpt_info in;
  CHECK(lh_store_ckpt_get(s, id128, &in, &e) == LH_OK);
  CHECK_EQ(in.n_children, 1);
  lh_store_verify_report vr;
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
  CHECK_EQ(vr.damaged, 0);
  CHECK_EQ(vr.checkpoints, nchunks);
  lh_buf_free(&vr.problems);

  /* A row of this model whose layout is not the model's (its n_lightning, say) is damaged, whatever
   * its pages say: resuming drops it with a warning and falls back to the checkpoint before it,
   * rather than failing on it at every run, and the recomputed run is still bitwise the reference. */
  {
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "UPDATE checkpoints SET n_lightning = n_lightning + 1 WHERE pos = (SELECT max(pos) FROM "
                       "checkpoints)", NULL, NULL, NULL) == SQLITE_OK);
    CHECK_EQ(sqlite3_changes(db), 1);
    sqlite3_close(db);
  }
  warnings[0] = 0;
  CHECK(lh_store_writer_open(path, NULL, &w, &e) == LH_OK);
  CHECK_MSG(lh_store_resume(s, m, tok, N, job, &st, &cur, &e) == LH_OK, "%s", e.msg);
  CHECK_EQ(lh_state_pos(st), (N - 1) / CHUNK * CHUNK);
  CHECK_STR_CONTAINS(warnings, "another state layout");
  prefill_rest(st, w, &cur, tok, logits);
  CHECK(!memcmp(logits, ref_final, (size_t)vocab * 4));
  CHECK(lh_store_writer_close(w, &e) == LH_OK);
  lh_state_free(st);
  CHECK(lh_store_verify(s, 0, &vr, &e) == LH_OK);
  CHECK_EQ(vr.damaged, 0);
  CHECK_EQ(vr.checkpoints, nchunks);
  lh_buf_free(&vr.problems);

  /* Another model refuses this one's checkpoints. */
  lh_model *other = open_model("hf_f16_legacy_rope_top2of3");
  CHECK(lh_store_restore(s, other, id128, &st, &e) == LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "belongs to model");
  int64_t pos, id;
  CHECK(lh_store_prefix_lookup(s, lh_model_id(other), tok, N, &pos, &id, &e) == LH_OK);
  CHECK_EQ(pos, 0);
  lh_model_close(other);

  lh_store_close(s);
  free(logits);
  free(ref);
  lh_model_close(m);
  lh_log_set_sink(NULL, NULL);
  return lh_test_end();
}
