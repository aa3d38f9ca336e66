/* outnames.c — the names of the files in an output folder (see outnames.h): one table, read both
 * to build a name and to recognise one. A name is recognised by building it again from the numbers
 * it holds and comparing, so that what is recognised is exactly what is built.
 */
#define _POSIX_C_SOURCE 200809L
#include "jobs/outnames.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const lh_outname_store_sides[LH_OUTNAME_STORE_SIDES] = {"-wal", "-shm", "-journal"};

static const struct {
  const char *whole; /* the whole batch's name before ext; NULL: it has none */
  const char *shard; /* a shard's name before "-I-of-N" ext */
  const char *ext;
} names[LH_OUTNAME_COUNT] = {
    [LH_OUTNAME_OUTPUT] = {"output", "output", ".jsonl"},
    [LH_OUTNAME_ERRORS] = {"errors", "errors", ".jsonl"},
    [LH_OUTNAME_STORE] = {"longhaul", "longhaul-shard", ".db"},
    [LH_OUTNAME_LOCK] = {"longhaul", "longhaul", ".lock"},
    [LH_OUTNAME_RECORD] = {NULL, "shard", ".json"},
};

static void shard_form(lh_outname f, int index, int count, char *buf, size_t n) {
  snprintf(buf, n, "%s-%d-of-%d%s", names[f].shard, index, count, names[f].ext);
}

void lh_outname_build(lh_outname f, int index, int count, char *buf, size_t n) {
  if (count > 1 || !names[f].whole) shard_form(f, index, count, buf, n);
  else snprintf(buf, n, "%s%s", names[f].whole, names[f].ext);
}

/* The int strtol reads at s, with *end after it; 0 when there is none or it is out of range. */
static int read_int(const char *s, char **end, int *v) {
  errno = 0;
  const long x = strtol(s, end, 10);
  if (*end == s || errno || x < INT_MIN || x > INT_MAX) return 0;
  *v = (int)x;
  return 1;
}

int lh_outname_shard(lh_outname f, const char *name, int *index, int *count) {
  const size_t b = strlen(names[f].shard);
  char *end, again[64];
  int i, k;
  if (strncmp(name, names[f].shard, b) || name[b] != '-') return 0;
  if (!read_int(name + b + 1, &end, &i) || strncmp(end, "-of-", 4) || !read_int(end + 4, &end, &k)) return 0;
  shard_form(f, i, k, again, sizeof again);
  if (strcmp(again, name)) return 0;
  *index = i;
  *count = k;
  return 1;
}

/* Whether name is f's for the whole batch or for a shard of a split. */
static int is_name(lh_outname f, const char *name) {
  char whole[64];
  int i, k;
  if (names[f].whole) {
    lh_outname_build(f, 0, 1, whole, sizeof whole);
    if (!strcmp(name, whole)) return 1;
  }
  return lh_outname_shard(f, name, &i, &k) && k >= 2 && i >= 0 && i < k;
}

int lh_outname_owned(const char *rel) {
  if (!strncmp(rel, "jobs/", 5)) return 1;
  if (strchr(rel, '/')) return 0;
  const size_t n = strlen(rel);
  for (int t = 0; t < LH_OUTNAME_STORE_SIDES; t++) { /* a store's side file goes with its store */
    const size_t k = strlen(lh_outname_store_sides[t]);
    if (n <= k || strcmp(rel + n - k, lh_outname_store_sides[t])) continue;
    char store[64];
    if (n - k >= sizeof store) return 0;
    memcpy(store, rel, n - k);
    store[n - k] = 0;
    return is_name(LH_OUTNAME_STORE, store);
  }
  for (int f = 0; f < LH_OUTNAME_COUNT; f++)
    if (is_name((lh_outname)f, rel)) return 1;
  return 0;
}
