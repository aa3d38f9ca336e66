/* test_ranks.c — one model over R processes (issue 10), run by ctest as `mpirun -np R test_ranks`
 * and as R processes of a world over TCP (`tests/engine/tcp_world.sh R test_ranks`).
 *
 * First, every engine fixture (tests/fixtures/engine) that R divides: logits equal tp_ranks = R's
 * bit for bit and meet the HF bound (hf_tp8_gqa2_top2of8 divides by 2, 4 and 8), and a state
 * from the ranks is tp_ranks = R's bytes and resumes in one process within the HF bound. Then, where R
 * divides it (2, 4), rank 0 opens the shipped model (models/haul-tiny) spread over the world, so each process
 * computes its share of the heads, kv heads and experts and the partial sums cross processes
 * through MPI or TCP (engine/ranks.c, engine/comm.c). It checks, against models in rank 0 alone:
 *  - every position's logits equal, bit for bit, the CPU backend's simulation of R ranks in one
 *    process (tp_ranks = R): the sums over processes are added in the same rank order;
 *  - those logits meet the engine-core bound against HF transformers (tests/fixtures/haul-tiny);
 *  - a state serialised from the ranks is the same bytes as the simulation's (the gather of the
 *    shares is exact), resumes on one process within the HF bound, and a one-process state
 *    resumes on the ranks;
 *  - forks and batched decode: the greedy continuation equals HF's, and a batch of forks gives
 *    the simulation's bits;
 *  - bad input (a token outside the vocabulary) fails on every rank alike and leaves the state
 *    usable.
 * Run as one process it skips (77).
 */
#include "tests/test.h"

#include <dirent.h>

#include "engine/comm.h"
#include "engine/engine.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/log.h"
#include "tests/engine/ranks_test.h"

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* Every engine fixture (tests/fixtures/engine, HF transformers' logits of small random models)
 * whose heads, kv heads and experts R divides: the ranks' logits over a chunk plan equal
 * tp_ranks = R's bit for bit and meet the HF bound. Returns how many fixtures ran. */
static int fixture_checks(lh_comm *world, const char *root) {
  const int R = lh_comm_size(world);
  DIR *d = opendir(root);
  if (!d) return 0;
  int ran = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char dir[1400], path[1500];
    snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!lh_is_file(path)) continue;
    lh_model_params p = lh_model_default_params();
    p.threads = 1;
    lh_model *ms = NULL, *mt = NULL;
    lh_error err;
    if (lh_model_open(dir, &p, &ms, &err)) {
      CHECK_MSG(strstr(err.msg, "must divide") != NULL, "%s over %d ranks: %s", e->d_name, R, err.msg);
      continue;
    }
    p.comm = NULL, p.tp_ranks = R;
    CHECK_MSG(!lh_model_open(dir, &p, &mt, &err), "%s, tp_ranks %d: %s", e->d_name, R, err.msg);
    lh_i32vec ids = {0};
    lh_buf rb = {0};
    snprintf(path, sizeof path, "%s/ids.txt", dir);
    CHECK(read_ints(path, &ids));
    snprintf(path, sizeof path, "%s/logits.f32", dir);
    CHECK(!lh_file_read(path, (size_t)1 << 28, &rb, &err));
    const int64_t T = (int64_t)ids.len, V = lh_model_config(ms)->vocab_size;
    float *got = malloc(sizeof(float) * (size_t)(T * V)), *sim = malloc(sizeof(float) * (size_t)(T * V));
    const int plan[] = {45, 1, 200};
    if (mt && ids.len && rb.len == (size_t)(T * V) * 4 && got && sim) {
      CHECK(run_plan(ms, &ids, plan, 3, got) && run_plan(mt, &ids, plan, 3, sim));
      CHECK_MSG(same_bits(got, sim, sizeof(float) * (size_t)(T * V)), "%s: %d processes and tp_ranks %d differ",
                e->d_name, R, R);
      char what[600];
      snprintf(what, sizeof what, "%s over %d ranks", e->d_name, R);
      CHECK_MSG(meets_bound_rows(what, got, (const float *)rb.data, NULL, 1, T * V), "%s vs HF", what);
      /* a state from the ranks, halfway: the simulation's bytes; resumed in one process it meets
       * the HF bound on every later position */
      const int64_t cut = T / 2;
      size_t la = 0, lb = 0;
      void *a = state_after(ms, &ids, cut, &la), *b = state_after(mt, &ids, cut, &lb);
      CHECK_MSG(a && b && la == lb && same_bits(a, b, la), "%s: a state from %d ranks differs from tp_ranks %d's",
                e->d_name, R, R);
      lh_model *m1 = NULL;
      lh_state *st = NULL;
      p.tp_ranks = 1;
      CHECK(!lh_model_open(dir, &p, &m1, &err));
      CHECK_MSG(a && m1 && !lh_state_deserialize(m1, a, la, &st, &err), "%s: resume in one process: %s", e->d_name,
                err.msg);
      CHECK(st && !lh_prefill(st, ids.data + cut, T - cut, NULL, got + cut * V, &err));
      snprintf(what, sizeof what, "%s: %d ranks -> one process at %lld", e->d_name, R, (long long)cut);
      if (st)
        CHECK_MSG(meets_bound_rows(what, got + cut * V, (const float *)rb.data + cut * V, NULL, 1, (T - cut) * V),
                  "%s vs HF", what);
      lh_state_free(st);
      lh_model_close(m1);
      free(a), free(b);
      ran++;
    }
    free(got), free(sim);
    lh_buf_free(&rb);
    lh_i32vec_free(&ids);
    lh_model_close(ms), lh_model_close(mt);
  }
  closedir(d);
  return ran;
}

static int checks(lh_comm *world) {
  const int R = lh_comm_size(world);
  const char *src = getenv("LH_SOURCE_DIR");
  char root[1100], fx[1024], mdir[1024], path[1200];
  snprintf(root, sizeof root, "%s/tests/fixtures/engine", src ? src : ".");
  int ran = fixture_checks(world, root);
  CHECK_MSG(ran >= 1, "no engine fixture in %s that %d ranks divide", root, R);
  if (getenv("LH_TEST_VERBOSE")) fprintf(stderr, "  %d engine fixtures over %d ranks\n", ran, R);
  snprintf(fx, sizeof fx, "%s/tests/fixtures/haul-tiny", src ? src : ".");
  snprintf(mdir, sizeof mdir, "%s/models/haul-tiny", src ? src : ".");
  snprintf(path, sizeof path, "%s/logits.f32", fx);
  if (!lh_is_file(path)) {
    fprintf(stderr, "SKIP: no fixture at %s\n", fx);
    return 77;
  }
  lh_i32vec ids = {0}, pos = {0}, greedy = {0};
  lh_error err;
  CHECK(read_fixture_lists(fx, &ids, &pos, &greedy));

  lh_model_params p = lh_model_default_params();
  p.threads = 1;
  CHECK(p.comm == world); /* a process in a world spreads its models by default */
  lh_model *ms = NULL, *m1 = NULL, *mt = NULL;
  lh_status so = lh_model_open(mdir, &p, &ms, &err);
  if (so && strstr(err.msg, "must divide")) { /* haul-tiny has 4 kv heads: not for 8 ranks */
    if (getenv("LH_TEST_VERBOSE")) fprintf(stderr, "  haul-tiny over %d ranks: %s\n", R, err.msg);
    lh_i32vec_free(&ids), lh_i32vec_free(&pos), lh_i32vec_free(&greedy);
    return lh_test_end();
  }
  CHECK_MSG(!so, "over %d ranks: %s", R, err.msg);
  lh_model *again = NULL;
  CHECK_MSG(lh_model_open(mdir, &p, &again, &err) == LH_EBUSY, "a second model over the ranks must be refused");
  lh_model_params pl = p;
  pl.comm = NULL;
  CHECK(!lh_model_open(mdir, &pl, &m1, &err));
  pl.tp_ranks = R;
  CHECK(!lh_model_open(mdir, &pl, &mt, &err));
  if (!ms || !m1 || !mt || !ids.len) goto done;
  const int64_t T = (int64_t)ids.len, V = lh_model_config(ms)->vocab_size;
  lh_buf rb = {0};
  snprintf(path, sizeof path, "%s/logits.f32", fx);
  CHECK(!lh_file_read(path, (size_t)1 << 28, &rb, &err) && rb.len == pos.len * (size_t)V * 4);
  const float *ref = (const float *)rb.data;

  /* logits: the ranks equal the one-process simulation bit for bit, and meet the HF bound */
  float *got = plan_logits(ms, &ids), *sim = plan_logits(mt, &ids);
  CHECK(got && sim);
  if (got && sim) {
    CHECK_MSG(same_bits(got, sim, sizeof(float) * (size_t)(T * V)),
              "%d processes and tp_ranks %d in one process differ", R, R);
    char what[64];
    snprintf(what, sizeof what, "%d ranks, chunks 255/256/257", R);
    CHECK_MSG(meets_bound_rows(what, got, ref, pos.data, pos.len, V), "%s vs HF", what);
  }

  /* states: the gathered shares are the simulation's bytes; they resume on one process and back */
  const int64_t cut = 500;
  size_t la = 0, lb = 0, lc = 0;
  void *a = state_after(ms, &ids, cut, &la), *b = state_after(mt, &ids, cut, &lb), *c = state_after(m1, &ids, cut, &lc);
  CHECK(a && b && c);
  CHECK_MSG(a && b && la == lb && same_bits(a, b, la), "a state serialised from %d ranks differs from tp_ranks %d's", R,
            R);
  lh_model *to[2] = {m1, ms};
  void *blob[2] = {a, c};
  size_t blen[2] = {la, lc};
  const char *names[2] = {"ranks -> one process", "one process -> ranks"};
  size_t r0 = 0;
  while (r0 < pos.len && pos.data[r0] < cut) r0++;
  for (int dir = 0; dir < 2 && got; dir++) {
    lh_state *s = NULL;
    CHECK_MSG(blob[dir] && !lh_state_deserialize(to[dir], blob[dir], blen[dir], &s, &err), "%s: %s", names[dir],
              err.msg);
    CHECK(s && !lh_prefill(s, ids.data + cut, T - cut, NULL, got + cut * V, &err));
    if (s) CHECK_MSG(meets_bound_rows(names[dir], got, ref + r0 * V, pos.data + r0, pos.len - r0, V), "%s", names[dir]);
    if (s && dir == 1) {
      /* every rank imported the whole state, then advanced only its share: the gather must take
       * each rank's share alone, as the simulation's state (same import, same prefill) shows. Both
       * are fed with every position's logits, since the last logits (in the state) can differ in
       * the last bit between a one-row and a many-row lm_head GEMM. */
      lh_state *t = NULL;
      void *x = NULL, *y = NULL;
      size_t lx = 0, ly = 0;
      float *lt_all = malloc(sizeof(float) * (size_t)((T - cut) * V)); /* as s was fed: the last logits */
      CHECK(!lh_state_deserialize(mt, c, lc, &t, &err) && !lh_prefill(t, ids.data + cut, T - cut, NULL, lt_all, &err));
      CHECK_MSG(same_bits(lt_all, got + cut * V, sizeof(float) * (size_t)((T - cut) * V)),
                "logits after resuming on %d ranks differ from tp_ranks %d's", R, R);
      free(lt_all);
      CHECK(!lh_state_serialize(s, &x, &lx, &err) && t && !lh_state_serialize(t, &y, &ly, &err));
      CHECK_MSG(x && y && lx == ly && same_bits(x, y, lx), "a resumed and advanced state over %d ranks differs from "
                "tp_ranks %d's", R, R);
      free(x), free(y);
      lh_state_free(t);
    }
    lh_state_free(s);
  }
  free(a), free(b), free(c);

  /* forks and decode: HF's greedy tokens, and a batch of forks with the simulation's bits */
  lh_state *s = NULL, *f[3] = {0}, *g[3] = {0}, *st = NULL;
  float *lg = malloc(sizeof(float) * (size_t)V * 3), *lt = malloc(sizeof(float) * (size_t)V * 3);
  CHECK(!lh_state_new(ms, &s, &err) && !lh_prefill(s, ids.data, T, lg, NULL, &err));
  CHECK(!lh_state_new(mt, &st, &err) && !lh_prefill(st, ids.data, T, lt, NULL, &err));
  for (int i = 0; i < 3; i++) {
    CHECK(!lh_state_fork(s, &f[i], &err));
    CHECK(!lh_state_fork(st, &g[i], &err));
  }
  lh_sampler_params gp = {0};
  int same = 1;
  for (size_t i = 0; i < greedy.len && s; i++) {
    int32_t next = lh_sample(lg, (int)V, &gp, NULL);
    same &= next == greedy.data[i];
    CHECK(!lh_decode_batch(&s, 1, &next, lg, &err));
  }
  CHECK_MSG(same, "greedy decode over %d ranks differs from HF's greedy.txt", R);
  int32_t toks[3] = {5, 77, 1234 % (int32_t)V};
  for (int step = 0; step < 4 && f[2] && g[2]; step++) {
    CHECK(!lh_decode_batch(f, 3, toks, lg, &err));
    CHECK(!lh_decode_batch(g, 3, toks, lt, &err));
    CHECK_MSG(same_bits(lg, lt, sizeof(float) * (size_t)V * 3), "decode step %d of 3 forks differs from tp_ranks", step);
    for (int i = 0; i < 3; i++) toks[i] = lh_sample(lg + (int64_t)i * V, (int)V, &gp, NULL);
  }

  /* bad input fails alike on every rank; the state stays usable */
  int32_t bad[2] = {3, (int32_t)V + 7};
  int64_t before = lh_state_pos(f[0]);
  CHECK(lh_prefill(f[0], bad, 2, NULL, NULL, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "vocab");
  CHECK(lh_state_pos(f[0]) == before);
  CHECK(lh_decode_batch((lh_state *[]){f[0], f[0]}, 2, toks, lg, &err) == LH_EINVAL);
  CHECK(!lh_prefill(f[0], bad, 1, lg, NULL, &err) && !lh_prefill(g[0], bad, 1, lt, NULL, &err));
  CHECK(same_bits(lg, lt, sizeof(float) * (size_t)V));

  for (int i = 0; i < 3; i++) lh_state_free(f[i]), lh_state_free(g[i]);
  lh_state_free(s), lh_state_free(st);
  free(lg), free(lt), free(got), free(sim);
  lh_buf_free(&rb);
done:
  lh_model_close(ms), lh_model_close(m1), lh_model_close(mt);
  /* after a close, another model can be spread */
  CHECK_MSG(!lh_model_open(mdir, &p, &again, &err), "reopen: %s", err.msg);
  lh_model_close(again);
  lh_i32vec_free(&ids), lh_i32vec_free(&pos), lh_i32vec_free(&greedy);
  return lh_test_end();
}

int main(int argc, char **argv) { return ranks_test_main("test_ranks", argc, argv, checks); }
