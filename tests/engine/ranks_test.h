/* ranks_test.h — what the tests of one model over R processes share (tests/engine/test_ranks.c on
 * the CPU backend, tests/gpu/gpu_ranks.c on the CUDA backend): the logits of a fixed chunk plan,
 * a state serialised after a prefix, and main: join the world, let ranks 1..R-1 serve rank 0's
 * engine calls, run the checks on rank 0, release the others. Static functions for the test
 * programs that include it (after tests/test.h). */
#ifndef LH_TESTS_ENGINE_RANKS_TEST_H
#define LH_TESTS_ENGINE_RANKS_TEST_H

#include "engine/comm.h"
#include "engine/engine.h"
#include "tests/engine/hf_parity.h"
#include "util/log.h"

/* Logits of every position of ids after prefilling them in chunks of 255/256/257 (run_plan). */
static inline float *plan_logits(lh_model *m, const lh_i32vec *ids) {
  const int64_t V = lh_model_config(m)->vocab_size;
  const int plan[] = {255, 256, 257};
  float *out = malloc(sizeof(float) * (size_t)ids->len * (size_t)V);
  if (out && !run_plan(m, ids, plan, 3, out)) {
    free(out);
    return NULL;
  }
  return out;
}

/* A state of m after the first n ids, serialised. */
static inline void *state_after(lh_model *m, const lh_i32vec *ids, int64_t n, size_t *len) {
  lh_state *s = NULL;
  lh_error err;
  void *blob = NULL;
  *len = 0;
  if (!lh_state_new(m, &s, &err) && !lh_prefill(s, ids->data, n, NULL, NULL, &err))
    if (lh_state_serialize(s, &blob, len, &err)) fprintf(stderr, "serialize: %s\n", err.msg);
  lh_state_free(s);
  return blob;
}

/* The whole main of a ranks test: skips (77) as one process. */
static inline int ranks_test_main(const char *name, int argc, char **argv, int (*checks)(lh_comm *)) {
  lh_test_begin(name);
  lh_log_set_level(LH_LOG_ERROR);
  lh_comm *world = NULL;
  lh_error err;
  if (lh_comm_init(&argc, &argv, &world, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 77;
  }
  if (!world || lh_comm_size(world) < 2) {
    fprintf(stderr, "SKIP: not started as 2 or more ranks (mpirun, or tests/engine/tcp_world.sh)\n");
    lh_comm_finish(world);
    return 77;
  }
  if (lh_comm_rank(world) > 0) {
    int rc = lh_rank_serve(world);
    lh_comm_finish(world);
    return rc;
  }
  int rc = checks(world);
  lh_rank_release(world);
  lh_comm_finish(world);
  return rc;
}

#endif
