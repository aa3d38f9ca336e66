/* test_utf8_replace.c — util/utf8.h: lh_utf8_replace gives exactly what Python's
 * bytes.decode("utf-8", "replace") gives (and HF tokenizers' decode: see the fixture's script) on
 * 3,011 byte strings built around every boundary of Unicode's Table 3-7; lh_utf8_valid_prefix and
 * lh_utf8_next agree with the replacement (valid input is exactly the input that comes out
 * unchanged). The expected strings come from Python: tests/fixtures/util/make_utf8_replace.py.
 * Also lh_utf8_fit on a few hand-made cases. */
#include "tests/test.h"
#include "util/buf.h"
#include "util/utf8.h"

static size_t unhex(const char *h, unsigned char *out) {
  if (!strcmp(h, "-")) return 0;
  size_t n = strlen(h) / 2;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    sscanf(h + 2 * i, "%2x", &v);
    out[i] = (unsigned char)v;
  }
  return n;
}

int main(void) {
  lh_test_begin("test_utf8_replace");
  const char *src = getenv("LH_SOURCE_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fixtures/util/utf8_replace.txt", src ? src : ".");
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "cannot open %s", path);
  if (!f) return lh_test_end();
  char a[4096], b[4096];
  unsigned char in[2048], want[2048];
  int cases = 0, changed = 0;
  lh_buf out = {0};
  while (fscanf(f, "%4095s %4095s", a, b) == 2) {
    size_t n = unhex(a, in), m = unhex(b, want);
    lh_buf_clear(&out);
    size_t reps = 0;
    CHECK_EQ(lh_utf8_replace(&out, in, n, &reps), LH_OK);
    CHECK_MSG(out.len == m && !memcmp(out.data, want, m), "case %d: %s -> want %s", cases + 1, a, b);
    CHECK_EQ(out.data[out.len], 0);
    int same = n == m && !memcmp(in, want, n);
    changed += !same;
    /* valid exactly when nothing was replaced, and then every sequence is whole */
    CHECK_MSG((lh_utf8_valid_prefix(in, n) == n) == same, "case %d: %s valid_len %zu", cases + 1, a,
              lh_utf8_valid_prefix(in, n));
    CHECK_EQ(reps == 0, same);
    if (same) {
      size_t i = 0;
      while (i < n) {
        size_t k = 0;
        CHECK(lh_utf8_next(in + i, n - i, &k) && k >= 1 && k <= 4);
        if (!k) break;
        i += k;
      }
      CHECK_EQ(i, n);
    } else {
      /* the longest valid prefix, replaced, is the same prefix of the expected string */
      size_t v = lh_utf8_valid_prefix(in, n);
      CHECK(v < n && v <= m && !memcmp(in, want, v));
      size_t k = 0;
      CHECK_EQ(lh_utf8_next(in + v, n - v, &k), 0);
    }
    cases++;
  }
  fclose(f);
  CHECK_MSG(cases > 3000 && changed > 2000, "read %d cases, %d with replacements", cases, changed);
  /* appending keeps what the buffer held; an empty input leaves a terminated buffer */
  lh_buf_clear(&out);
  lh_buf_append_str(&out, "ok:");
  CHECK_EQ(lh_utf8_replace(&out, "\xff" "a", 2, NULL), LH_OK);
  CHECK(!strcmp(out.data, "ok:\xef\xbf\xbd" "a"));
  lh_buf e = {0};
  CHECK_EQ(lh_utf8_replace(&e, NULL, 0, NULL), LH_OK);
  CHECK(e.data && e.len == 0 && e.data[0] == 0);
  lh_buf_free(&e);
  lh_buf_free(&out);
  /* lh_utf8_fit: valid text untouched; bad bytes become U+FFFD within the buffer, cut at a sequence
   * boundary; a sequence snprintf cut at the end goes */
  char fa[16] = "caf\xc3\xa9";
  lh_utf8_fit(fa, sizeof fa);
  CHECK(!strcmp(fa, "caf\xc3\xa9"));
  char fb[8] = "ab\xff" "cd";
  lh_utf8_fit(fb, sizeof fb);
  CHECK(!strcmp(fb, "ab\xef\xbf\xbd" "cd"));
  char fc[6] = "ab\xff" "cd"; /* U+FFFD needs 3 bytes: "ab" U+FFFD fits in 5, "c" does not */
  lh_utf8_fit(fc, sizeof fc);
  CHECK(!strcmp(fc, "ab\xef\xbf\xbd"));
  char fd[8] = "abcd\xc3\xa9\xc3"; /* what snprintf leaves of "abcd\xc3\xa9\xc3\xa9" in 8 bytes */
  lh_utf8_fit(fd, sizeof fd);
  CHECK(!strcmp(fd, "abcd\xc3\xa9")); /* the cut sequence is U+FFFD, which no longer fits */
  return lh_test_end();
}
