/* test_pipeline.c — the pipeline library (pipeline/pipeline.h) on the embedded model, CPU backend.
 *
 *   - a prefix killed (SIGKILL, in a child process) in the middle of its plan and resumed from the
 *     store in another process ends with bitwise the state, logits and next tokens of an
 *     uninterrupted prefix with the same plan;
 *   - the checkpoints fall at multiples of the plan's chunk and at the advance's end only;
 *   - a stop request returns LH_EINTR at a chunk boundary with that boundary checkpointed, and
 *     a later advance carries on to the same bits;
 *   - forks of one prefix decode the same tokens together as each alone, and stop ids, max_tokens,
 *     the context limit and on_token end forks as documented;
 *   - lh_pipeline_feed cuts at multiples of chunk from position 0: feeding a fork in one call
 *     equals feeding it token by token through the same plan bitwise;
 *   - a store that cannot be written is reported as a store fault, not an engine one.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/pipeline.h"
#include "tests/test.h"

#define N_TOK 700
#define CHUNK 128

static lh_model *open_model(void) {
  lh_model_params mp = lh_model_default_params();
  mp.threads = 2;
  mp.max_rows = 64; /* smaller than the plan's chunk: the engine cuts pieces inside a chunk */
  lh_model *m = NULL;
  lh_error err;
  if (lh_model_open("models/haul-tiny", &mp, &m, &err) != LH_OK) {
    fprintf(stderr, "open models/haul-tiny: %s\n", err.msg);
    exit(1);
  }
  return m;
}

static void make_tokens(int32_t *t, int n, int vocab) {
  uint64_t x = 42;
  for (int i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t[i] = 5 + (int32_t)((x >> 33) % (uint64_t)(vocab - 5)); /* no special tokens */
  }
}

/* The whole state as bytes (its serialised form), for bitwise comparisons. */
static lh_buf state_bytes(const lh_state *s) {
  lh_buf b = {0};
  void *p = NULL;
  size_t n = 0;
  lh_error err;
  if (lh_state_serialize(s, &p, &n, &err) == LH_OK) lh_buf_append(&b, p, n);
  free(p);
  return b;
}

static int same_bytes(const lh_buf *a, const lh_buf *b) {
  return a->len == b->len && a->len > 0 && !memcmp(a->data, b->data, a->len);
}

/* An uninterrupted prefix with no store: the reference. */
static lh_buf reference(lh_model *m, const int32_t *tok, int n) {
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan.chunk = CHUNK;
  lh_prefix *px;
  lh_error err;
  CHECK(lh_prefix_open(m, tok, n, &pp, &px, &err) == LH_OK);
  CHECK(lh_prefix_advance(px, n, &err) == LH_OK);
  CHECK_EQ(lh_prefix_computed(px), n);
  lh_buf b = state_bytes(lh_prefix_state(px));
  lh_prefix_close(px);
  return b;
}

static int kill_after; /* chunks */
static int chunks_seen;
static void die_after(void *user, int64_t pos) {
  (void)user;
  (void)pos;
  if (++chunks_seen == kill_after) raise(SIGKILL);
}

static void prefix_in_store(lh_model *m, const char *db, const int32_t *tok, int n, lh_pipeline_hooks hooks,
                            lh_prefix **out, lh_store **store, lh_store_writer **w) {
  lh_error err;
  lh_store_params sp = lh_store_default_params();
  lh_store_writer_params wp = lh_store_writer_default_params();
  CHECK(lh_store_open(db, &sp, store, &err) == LH_OK);
  CHECK(lh_store_model_register(*store, m, &err) == LH_OK);
  CHECK(lh_store_writer_open(db, &wp, w, &err) == LH_OK);
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan.chunk = CHUNK;
  pp.plan.checkpoint_every = 2;
  pp.store = *store;
  pp.writer = *w;
  pp.hooks = hooks;
  CHECK(lh_prefix_open(m, tok, n, &pp, out, &err) == LH_OK);
}

static void test_kill_and_resume(lh_model *m, const int32_t *tok, const lh_buf *ref) {
  char db[1024];
  snprintf(db, sizeof db, "%s/kill.db", lh_test_tmpdir());
  pid_t pid = fork();
  if (pid == 0) { /* the child prefills and dies in the middle of its fifth chunk's aftermath */
    lh_model *cm = open_model();
    lh_prefix *px;
    lh_store *s;
    lh_store_writer *w;
    kill_after = 5;
    prefix_in_store(cm, db, tok, N_TOK, (lh_pipeline_hooks){.progress = die_after}, &px, &s, &w);
    lh_error err;
    lh_prefix_advance(px, N_TOK, &err);
    _exit(3); /* not reached */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was killed mid-plan (status %d)", status);

  lh_prefix *px;
  lh_store *s;
  lh_store_writer *w;
  prefix_in_store(m, db, tok, N_TOK, (lh_pipeline_hooks){0}, &px, &s, &w);
  /* checkpoints every 2 chunks of 128, written by the writer thread: the kill after chunk 5 finds
   * 0, 1 or 2 of them (at 256, 512) committed, depending on how far the writer got */
  const int64_t r = lh_prefix_restored(px);
  CHECK_MSG(r == 0 || r == 256 || r == 512, "resumed at %lld, a checkpoint boundary before the kill", (long long)r);
  lh_error err;
  CHECK(lh_prefix_advance(px, N_TOK, &err) == LH_OK);
  CHECK_EQ(lh_prefix_computed(px), N_TOK - r);
  lh_buf got = state_bytes(lh_prefix_state(px));
  CHECK_MSG(same_bytes(&got, ref), "resumed prefix equals the uninterrupted one bit for bit");
  lh_buf_free(&got);
  lh_prefix_close(px);
  CHECK(lh_store_writer_close(w, &err) == LH_OK);

  /* where the checkpoints are: multiples of 2 chunks, and the end */
  lh_store_ckpt_info *ck = NULL;
  size_t nck = 0;
  CHECK(lh_store_ckpt_list(s, &ck, &nck, &err) == LH_OK);
  for (size_t i = 0; i < nck; i++)
    CHECK_MSG(ck[i].pos % (2 * CHUNK) == 0 || ck[i].pos == N_TOK, "checkpoint at %lld", (long long)ck[i].pos);
  CHECK_MSG(nck >= 2 && ck[nck - 1].pos == N_TOK, "the end of the advance is checkpointed");
  free(ck);
  lh_store_close(s);

  /* a third process finds the whole prefix in the store and computes nothing */
  prefix_in_store(m, db, tok, N_TOK, (lh_pipeline_hooks){0}, &px, &s, &w);
  CHECK_EQ(lh_prefix_restored(px), N_TOK);
  got = state_bytes(lh_prefix_state(px));
  CHECK_MSG(same_bytes(&got, ref), "a fully restored prefix equals the computed one");
  lh_buf_free(&got);
  lh_prefix_close(px);

  /* restore_upto: a caller that forks at 300 first is restored no further than the checkpoint at
   * 256 (checkpoints at 256, 512, 700 are there), one that forks at 0 starts fresh */
  const int64_t upto[] = {300, 0, 512, -1}, want[] = {256, 0, 512, N_TOK};
  for (int i = 0; i < 4; i++) {
    lh_prefix_params pp = lh_prefix_default_params();
    pp.plan.chunk = CHUNK;
    pp.store = s;
    pp.restore_upto = upto[i];
    CHECK(lh_prefix_open(m, tok, N_TOK, &pp, &px, &err) == LH_OK);
    CHECK_MSG(lh_prefix_restored(px) == want[i], "restore_upto %lld: restored %lld, not %lld", (long long)upto[i],
              (long long)lh_prefix_restored(px), (long long)want[i]);
    lh_prefix_close(px);
  }
  lh_store_writer_close(w, NULL);
  lh_store_close(s);
}

static volatile sig_atomic_t stop_flag;
static void stop_at_3(void *user, int64_t pos) {
  (void)user;
  if (pos == 3 * CHUNK) stop_flag = 1;
}

static void test_stop(lh_model *m, const int32_t *tok, const lh_buf *ref) {
  char db[1024];
  snprintf(db, sizeof db, "%s/stop.db", lh_test_tmpdir());
  lh_prefix *px;
  lh_store *s;
  lh_store_writer *w;
  stop_flag = 0;
  prefix_in_store(m, db, tok, N_TOK, (lh_pipeline_hooks){.progress = stop_at_3, .stop = &stop_flag}, &px, &s, &w);
  lh_error err;
  CHECK_EQ(lh_prefix_advance(px, N_TOK, &err), LH_EINTR);
  CHECK_EQ(lh_prefix_pos(px), 3 * CHUNK);
  CHECK_EQ(lh_prefix_fault(px), LH_FAULT_NONE);
  CHECK(lh_store_writer_flush(w, &err) == LH_OK);
  int64_t pos = 0, id = 0;
  CHECK(lh_store_prefix_lookup(s, lh_model_id(m), tok, N_TOK, &pos, &id, &err) == LH_OK);
  CHECK_MSG(pos == 3 * CHUNK, "the stop point is checkpointed though the plan says every 2 chunks (%lld)",
            (long long)pos);
  stop_flag = 0;
  CHECK(lh_prefix_advance(px, N_TOK, &err) == LH_OK);
  lh_buf got = state_bytes(lh_prefix_state(px));
  CHECK_MSG(same_bytes(&got, ref), "stopped and carried on equals uninterrupted");
  lh_buf_free(&got);
  lh_prefix_close(px);
  lh_store_writer_close(w, NULL);
  lh_store_close(s);
}

/* on_token: fork 2 (user maps a call's fork index to the test's) ends after its third token */
static int stop_on_third(void *user, int i, lh_fork *f) {
  const int *global = user;
  return global[i] == 2 && f->tokens.len == 3;
}

static void test_forks(lh_model *m, const int32_t *tok) {
  enum { K = 4, SUF = 150 };
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan.chunk = CHUNK;
  lh_prefix *px;
  lh_error err;
  CHECK(lh_prefix_open(m, tok, 300, &pp, &px, &err) == LH_OK);
  CHECK(lh_prefix_advance(px, 300, &err) == LH_OK);
  int32_t suffix[K][SUF];
  for (int i = 0; i < K; i++) make_tokens(suffix[i], SUF, 4096 - i * 7);
  const int lens[K] = {SUF, 1, 37, 0};
  lh_fork together[K], alone[K];
  for (int pass = 0; pass < 2; pass++) {
    lh_fork *F = pass ? alone : together;
    for (int i = 0; i < K; i++) {
      F[i] = (lh_fork){.max_tokens = 12, .sampler = {.temperature = i == 1 ? 0.8f : 0.f, .top_p = 1, .seed = 7 + i}};
      CHECK(lh_prefix_fork(px, &F[i].state, &err) == LH_OK);
      CHECK(lh_pipeline_feed(F[i].state, suffix[i], lens[i], &pp.plan, NULL, NULL, &err) == LH_OK);
    }
    if (!pass) {
      int all[K] = {0, 1, 2, 3};
      lh_decode_params dp = {.on_token = stop_on_third, .user = all};
      CHECK(lh_decode_forks(F, K, &dp, &err) == LH_OK);
    } else {
      for (int i = 0; i < K; i++) {
        int me[1] = {i};
        lh_decode_params dp = {.on_token = stop_on_third, .user = me};
        CHECK(lh_decode_forks(&F[i], 1, &dp, &err) == LH_OK);
      }
    }
  }
  for (int i = 0; i < K; i++) {
    CHECK_EQ(together[i].status, LH_OK);
    CHECK_MSG(together[i].tokens.len == alone[i].tokens.len &&
                  !memcmp(together[i].tokens.data, alone[i].tokens.data, together[i].tokens.len * 4),
              "fork %d decodes the same tokens together as alone", i);
    CHECK_MSG(together[i].finish == alone[i].finish, "fork %d ends the same way", i);
  }
  CHECK_EQ(together[2].tokens.len, 3);
  CHECK_EQ(together[2].finish, LH_FINISH_STOP);
  CHECK_EQ(together[0].finish, LH_FINISH_LENGTH);
  CHECK_EQ(together[0].tokens.len, 12);
  for (int i = 0; i < K; i++) {
    lh_fork_clear(&together[i]);
    lh_fork_clear(&alone[i]);
    lh_state_free(together[i].state);
    lh_state_free(alone[i].state);
  }

  /* stop ids end a fork and are not kept; the context limit ends it with length */
  lh_fork f = {.max_tokens = 50, .sampler = {.temperature = 0, .top_p = 1}};
  CHECK(lh_prefix_fork(px, &f.state, &err) == LH_OK);
  lh_fork probe = {.max_tokens = 1, .sampler = f.sampler};
  CHECK(lh_prefix_fork(px, &probe.state, &err) == LH_OK);
  lh_decode_params dp = {0};
  CHECK(lh_decode_forks(&probe, 1, &dp, &err) == LH_OK);
  const int32_t first = probe.tokens.data[0];
  dp = (lh_decode_params){.stop_ids = &first, .n_stop_ids = 1};
  CHECK(lh_decode_forks(&f, 1, &dp, &err) == LH_OK);
  CHECK_EQ(f.tokens.len, 0);
  CHECK_EQ(f.finish, LH_FINISH_STOP);
  lh_fork_clear(&f);
  lh_state_free(f.state);
  f = (lh_fork){.max_tokens = 50, .sampler = probe.sampler};
  CHECK(lh_prefix_fork(px, &f.state, &err) == LH_OK);
  dp = (lh_decode_params){.context_limit = 305};
  CHECK(lh_decode_forks(&f, 1, &dp, &err) == LH_OK);
  CHECK_EQ(f.finish, LH_FINISH_LENGTH);
  CHECK_MSG(lh_state_pos(f.state) + 1 == 305, "stopped where the next position would reach the limit (%lld)",
            (long long)lh_state_pos(f.state));
  lh_fork_clear(&f);
  lh_fork_clear(&probe);
  lh_state_free(f.state);
  lh_state_free(probe.state);
  lh_prefix_close(px);
}

/* lh_pipeline_feed cuts at multiples of the chunk from position 0 and at the end of the call,
 * wherever the state starts: the same bits as lh_prefill calls over exactly those spans. */
static void test_feed_plan(lh_model *m, const int32_t *tok) {
  lh_plan plan = {.chunk = CHUNK, .checkpoint_every = 0};
  lh_state *a, *b;
  lh_error err;
  CHECK(lh_state_new(m, &a, &err) == LH_OK);
  CHECK(lh_state_new(m, &b, &err) == LH_OK);
  CHECK(lh_pipeline_feed(a, tok, 100, &plan, NULL, NULL, &err) == LH_OK);
  CHECK(lh_pipeline_feed(a, tok + 100, 300, &plan, NULL, NULL, &err) == LH_OK);
  const int64_t cuts[] = {0, 100, 128, 256, 384, 400};
  for (int i = 0; i + 1 < 6; i++) CHECK(lh_prefill(b, tok + cuts[i], cuts[i + 1] - cuts[i], NULL, NULL, &err) == LH_OK);
  lh_buf x = state_bytes(a), y = state_bytes(b);
  CHECK_MSG(same_bytes(&x, &y), "feeding 100 then 300 through a 128-token plan cuts at 100, 128, 256, 384");
  lh_buf_free(&x);
  lh_buf_free(&y);
  float *l = malloc(4096 * sizeof *l);
  CHECK(lh_pipeline_feed(a, NULL, 0, &plan, NULL, l, &err) == LH_OK);
  CHECK(!memcmp(l, lh_state_last_logits(a), 4096 * sizeof *l));
  free(l);
  lh_state_free(a);
  lh_state_free(b);
}

/* A writer whose database cannot take the checkpoint: the failure is the store's. */
static void test_store_fault(lh_model *m, const int32_t *tok) {
  char db[1024];
  snprintf(db, sizeof db, "%s/full.db", lh_test_tmpdir());
  lh_error err;
  lh_store_params sp = lh_store_default_params();
  lh_store *s;
  CHECK(lh_store_open(db, &sp, &s, &err) == LH_OK);
  CHECK(lh_store_model_register(s, m, &err) == LH_OK);
  lh_store_writer_params wp = lh_store_writer_default_params();
  wp.store.max_db_bytes = 1 << 20; /* far less than one checkpoint of 128 tokens' KV and states */
  lh_store_writer *w;
  CHECK(lh_store_writer_open(db, &wp, &w, &err) == LH_OK);
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan.chunk = CHUNK;
  pp.store = s;
  pp.writer = w;
  lh_prefix *px;
  CHECK(lh_prefix_open(m, tok, N_TOK, &pp, &px, &err) == LH_OK);
  lh_status st = lh_prefix_advance(px, N_TOK, &err);
  if (st == LH_OK) st = lh_store_writer_flush(w, &err);
  if (st == LH_OK) { /* the first write's failure surfaces at the next checkpoint or the flush */
    CHECK_MSG(0, "a 1 MiB store took every checkpoint");
  } else {
    CHECK_EQ(st, LH_EFULL);
    CHECK_MSG(lh_prefix_fault(px) == LH_FAULT_STORE || lh_prefix_pos(px) == N_TOK,
              "a full store is the store's fault (%s)", lh_fault_name(lh_prefix_fault(px)));
  }
  lh_prefix_close(px);
  lh_store_writer_close(w, NULL);
  lh_store_close(s);
}

int main(void) {
  lh_test_begin("test_pipeline");
  lh_model *m = open_model();
  int32_t tok[N_TOK];
  make_tokens(tok, N_TOK, lh_model_config(m)->vocab_size);
  lh_buf ref = reference(m, tok, N_TOK);
  test_kill_and_resume(m, tok, &ref);
  test_stop(m, tok, &ref);
  test_forks(m, tok);
  test_feed_plan(m, tok);
  test_store_fault(m, tok);
  lh_buf_free(&ref);
  lh_model_close(m);
  return lh_test_end();
}
