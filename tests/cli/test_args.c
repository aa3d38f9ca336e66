/* test_args.c — what the command line answers to wrong arguments (cli/args.c) and the engine's
 * checks it relies on: the suggestion for a misspelt option or command is the intended one and
 * nothing is suggested for a word near none; --out DIR finds a run's store and its shards' stores
 * in shard order; "gpu" is the CUDA backend's other name, refused with the same advice where
 * CUDA is not built; an HF repo id given as a model folder gets the download hint, a path does not. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "tests/test.h"

static const char *const run_opts[] = {"model", "out", "db", "chunk", "device", "threads", "cpu-attention",
                                       "max-tokens", "chat-template", "force", "shard", "progress",
                                       "checkpoint-every", "defaults", "help", "wait", "keep-checkpoints"};
static const char *const commands[] = {"run", "status", "results", "niah", "ingest", "tokenize",
                                       "store", "model", "logits", "generate"};
#define N(a) (sizeof a / sizeof *a)

/* A CHECK that also returns whether it held. */
static int check_ret(int ok, int line) {
  lh_test_checks++;
  if (!ok) lh_test_failures++, fprintf(stderr, "%s:%d: CHECK failed\n", __FILE__, line);
  return ok;
}
#define CHECK_RET(c) check_ret((c), __LINE__)

static void expect(const char *word, const char *const *c, size_t n, const char *want) {
  const char *got = lh_args_nearest(word, c, n);
  CHECK_MSG(want ? got && !strcmp(got, want) : !got, "nearest to '%s': got %s, want %s", word, got ? got : "none",
            want ? want : "none");
}

static void touch(const char *dir, const char *name) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  if (f) fclose(f);
}

int main(void) {
  lh_test_begin("test_args");
  /* options */
  expect("foo", run_opts, N(run_opts), "force");
  expect("forse", run_opts, N(run_opts), "force");
  expect("chunck", run_opts, N(run_opts), "chunk");
  expect("modle", run_opts, N(run_opts), "model");
  expect("MODEL", run_opts, N(run_opts), "model");
  expect("max-token", run_opts, N(run_opts), "max-tokens");
  expect("checkpoints-every", run_opts, N(run_opts), "checkpoint-every");
  expect("dev", run_opts, N(run_opts), "device");
  expect("ot", run_opts, N(run_opts), "out");
  expect("xyz", run_opts, N(run_opts), NULL);
  expect("temperature", run_opts, N(run_opts), NULL);
  expect("", run_opts, N(run_opts), NULL);
  /* commands */
  expect("stauts", commands, N(commands), "status");
  expect("rnu", commands, N(commands), "run");
  expect("nia", commands, N(commands), "niah");
  expect("result", commands, N(commands), "results");
  expect("tokenise", commands, N(commands), "tokenize");
  expect("serve", commands, N(commands), NULL);

  /* --out DIR: the run's store, then the shards' in shard order (10 after 2) */
  const char *dir = lh_test_tmpdir();
  char **v;
  size_t n;
  CHECK(lh_args_stores("test", NULL, dir, NULL, &v, &n) == -1); /* an empty folder holds no store */
  touch(dir, "longhaul-shard-10-of-12.db");
  touch(dir, "longhaul-shard-2-of-12.db");
  touch(dir, "longhaul.db");
  touch(dir, "other.db");
  if (CHECK_RET(lh_args_stores("test", NULL, dir, NULL, &v, &n) == 0)) {
    CHECK_EQ(n, 3);
    if (n == 3) {
      CHECK(strstr(v[0], "/longhaul.db") != NULL);
      CHECK(strstr(v[1], "-2-of-12.db") != NULL);
      CHECK(strstr(v[2], "-10-of-12.db") != NULL);
    }
    lh_args_stores_free(v, n);
  }
  if (CHECK_RET(lh_args_stores("test", "x.db", dir, NULL, &v, &n) == 0)) { /* --db wins */
    CHECK(n == 1 && !strcmp(v[0], "x.db"));
    lh_args_stores_free(v, n);
  }
  CHECK(lh_args_stores("test", NULL, NULL, NULL, &v, &n) == -1);
  char missing[700];
  snprintf(missing, sizeof missing, "%s/absent", dir);
  CHECK(lh_args_stores("test", NULL, missing, NULL, &v, &n) == -1);
  CHECK(lh_args_stores("test", NULL, NULL, missing, &v, &n) == -1); /* a default store that is not there */

  /* devices */
  lh_error e, e2;
  CHECK((lh_backend_find("gpu") != NULL) == (lh_backend_find("cuda") != NULL));
  CHECK(lh_backend_find("gpu") == lh_backend_find("cuda"));
  CHECK_EQ(lh_backend_check("gpu", &e), lh_backend_check("cuda", &e2));
  if (!lh_backend_find("cuda")) {
    lh_backend_check("gpu", &e);
    CHECK_STR_CONTAINS(e.msg, "this longhaul was built without CUDA (");
    CHECK_STR_CONTAINS(e.msg, "use --device cpu or ");
  }
  CHECK(lh_backend_check("tpu", &e) == LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(e.msg, "unknown device 'tpu'");
  CHECK(lh_backend_check("cpu", &e) == LH_OK);

  /* model folders */
  CHECK(lh_model_check("MiniMaxAI/MiniMax-Text-01", "cpu", &e) == LH_ENOTFOUND);
  CHECK_STR_CONTAINS(e.msg, "huggingface-cli download MiniMaxAI/MiniMax-Text-01 --local-dir DIR");
  CHECK_STR_CONTAINS(e.msg, "downloads nothing");
  static const char *const paths[] = {"./MiniMaxAI/MiniMax-Text-01", "/models/minimax", "models/a/b", "nothing-here",
                                      "a b/c"};
  for (size_t i = 0; i < N(paths); i++) {
    CHECK(lh_model_check(paths[i], "cpu", &e) == LH_ENOTFOUND);
    CHECK_MSG(!strstr(e.msg, "huggingface-cli"), "'%s' is a path, not a repo id: %s", paths[i], e.msg);
  }
  CHECK(lh_model_check(dir, "cpu", &e) == LH_OK);
  CHECK(lh_model_check(dir, "tpu", &e) == LH_EUNSUPPORTED);
  return lh_test_end();
}
