/* test.h — the minimal test harness every longhaul test program uses (header-only).
 *
 * A test program is a main() that calls lh_test_begin, runs CHECK/CHECK_EQ/... and returns
 * lh_test_end(). A failed CHECK prints file:line and the expression and counts a failure, and the
 * test goes on (so one run shows every failure). lh_test_tmpdir() makes a fresh directory per test
 * program under $TMPDIR (removed at the end unless LH_KEEP_TMP is set). LH_TEST_SKIP(reason) ends
 * the program with ctest's skip code (77), loudly: a test that cannot run never passes silently.
 */
#ifndef LH_TESTS_TEST_H
#define LH_TESTS_TEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mkdtemp; test targets also get it on the command line */
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int lh_test_failures;
static int lh_test_checks;
static char lh_test_dir[512];
static const char *lh_test_name = "test";

#define CHECK(cond)                                                                   \
  do {                                                                                \
    lh_test_checks++;                                                                 \
    if (!(cond)) {                                                                    \
      lh_test_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
    }                                                                                 \
  } while (0)

#define CHECK_MSG(cond, ...)                                                          \
  do {                                                                                \
    lh_test_checks++;                                                                 \
    if (!(cond)) {                                                                    \
      lh_test_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);        \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fputc('\n', stderr);                                                            \
    }                                                                                 \
  } while (0)

#define CHECK_EQ(a, b)                                                                \
  do {                                                                                \
    long long lh_a_ = (long long)(a), lh_b_ = (long long)(b);                         \
    lh_test_checks++;                                                                 \
    if (lh_a_ != lh_b_) {                                                             \
      lh_test_failures++;                                                             \
      fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", __FILE__,  \
              __LINE__, #a, #b, lh_a_, lh_b_);                                        \
    }                                                                                 \
  } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                               \
  do {                                                                                \
    const char *lh_h_ = (hay), *lh_n_ = (needle);                                     \
    lh_test_checks++;                                                                 \
    if (!lh_h_ || !strstr(lh_h_, lh_n_)) {                                            \
      lh_test_failures++;                                                             \
      fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", __FILE__, __LINE__, lh_n_, \
              lh_h_ ? lh_h_ : "(null)");                                              \
    }                                                                                 \
  } while (0)

#define LH_TEST_SKIP(...)                                                             \
  do {                                                                                \
    fprintf(stderr, "SKIPPED %s: ", lh_test_name);                                    \
    fprintf(stderr, __VA_ARGS__);                                                     \
    fputc('\n', stderr);                                                              \
    exit(77);                                                                         \
  } while (0)

static inline void lh_test_begin(const char *name) { lh_test_name = name; }

/* A fresh directory for this test program; created on first use. */
static inline const char *lh_test_tmpdir(void) {
  if (!lh_test_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(lh_test_dir, sizeof lh_test_dir, "%s/lh-%s-XXXXXX", base ? base : "/tmp", lh_test_name);
    if (!mkdtemp(lh_test_dir)) {
      perror("mkdtemp");
      exit(1);
    }
  }
  return lh_test_dir;
}

static inline int lh_test_end(void) {
  if (lh_test_dir[0] && !getenv("LH_KEEP_TMP")) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", lh_test_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", lh_test_dir);
  }
  fprintf(stderr, "%s: %d checks, %d failures\n", lh_test_name, lh_test_checks, lh_test_failures);
  return lh_test_failures ? 1 : 0;
}

/* Relative L2 error ||a-b|| / ||b|| in double. */
static inline double lh_rel_l2(const float *a, const float *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)a[i] - (double)b[i];
    num += d * d;
    den += (double)b[i] * (double)b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

#endif
