/* test_outnames.c — jobs/outnames.h: every name a run or merge writes in OUT is built as the table
 * says, and recognised as one of the run's own exactly as built (a batch under such a name is
 * refused: runner.c, check_batch_not_output); names that only look like them (another prefix, a
 * leading zero, a sign, a shard outside its split, a shard form of a file that has none) are the
 * user's. */
#include "jobs/outnames.h"

#include <stdio.h>
#include <string.h>

#include "tests/test.h"

static void check_name(lh_outname f, int index, int count, const char *want) {
  char got[64];
  lh_outname_build(f, index, count, got, sizeof got);
  CHECK_MSG(!strcmp(got, want), "built %s, want %s", got, want);
  CHECK_MSG(lh_outname_owned(got), "%s is not recognised as the run's", got);
}

int main(void) {
  lh_test_begin("test_outnames");
  check_name(LH_OUTNAME_OUTPUT, 0, 1, "output.jsonl");
  check_name(LH_OUTNAME_OUTPUT, 2, 4, "output-2-of-4.jsonl");
  check_name(LH_OUTNAME_ERRORS, 0, 1, "errors.jsonl");
  check_name(LH_OUTNAME_ERRORS, 0, 2, "errors-0-of-2.jsonl");
  check_name(LH_OUTNAME_STORE, 0, 1, "longhaul.db");
  check_name(LH_OUTNAME_STORE, 1, 3, "longhaul-shard-1-of-3.db");
  check_name(LH_OUTNAME_LOCK, 0, 1, "longhaul.lock");
  check_name(LH_OUTNAME_LOCK, 1, 2, "longhaul-1-of-2.lock");
  check_name(LH_OUTNAME_RECORD, 2, 4, "shard-2-of-4.json");

  /* the store's side files go with it */
  static const char *const owned[] = {"longhaul.db-wal", "longhaul.db-shm", "longhaul.db-journal",
                                      "longhaul-shard-0-of-2.db-wal", "jobs/q1/result.json", "jobs/x"};
  for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) CHECK_MSG(lh_outname_owned(owned[i]), "%s", owned[i]);
  static const char *const users[] = {
      "nightly.jsonl", "longhaul-nightly.jsonl", "outputs.jsonl", "output.json", "output-0-of-1.jsonl",
      "output-2-of-2.jsonl", "output--1-of-2.jsonl", "output-01-of-2.jsonl", "output-+1-of-2.jsonl",
      "output- 1-of-2.jsonl", "output-1-of-2.jsonl.bak", "output-99999999999-of-2.jsonl", "shard.json",
      "longhaul-shard.db", "longhaul-0-of-2.db", "longhaul.lock-wal", "output.jsonl-wal", "sub/output.jsonl",
      "jobs", ""};
  for (size_t i = 0; i < sizeof users / sizeof *users; i++) CHECK_MSG(!lh_outname_owned(users[i]), "%s", users[i]);

  /* a shard's name read back: whatever its numbers, as merge needs to name a bad one */
  int i = -9, n = -9;
  CHECK(lh_outname_shard(LH_OUTNAME_OUTPUT, "output-3-of-8.jsonl", &i, &n));
  CHECK_EQ(i, 3);
  CHECK_EQ(n, 8);
  CHECK(lh_outname_shard(LH_OUTNAME_OUTPUT, "output-5-of-2.jsonl", &i, &n));
  CHECK_EQ(i, 5);
  CHECK_EQ(n, 2);
  CHECK(lh_outname_shard(LH_OUTNAME_OUTPUT, "output-0-of-1.jsonl", &i, &n));
  CHECK(!lh_outname_shard(LH_OUTNAME_OUTPUT, "output.jsonl", &i, &n));
  CHECK(!lh_outname_shard(LH_OUTNAME_OUTPUT, "errors-0-of-2.jsonl", &i, &n));
  CHECK(!lh_outname_shard(LH_OUTNAME_OUTPUT, "output-0-of-02.jsonl", &i, &n));
  CHECK(!lh_outname_shard(LH_OUTNAME_STORE, "longhaul-0-of-2.db", &i, &n));
  return lh_test_end();
}
