/* utf8_replace.c — UTF-8 well-formedness and U+FFFD repair by maximal subparts.
 *
 * One classifier (subpart) reads the sequence at a position against Unicode's Table 3-7 and says
 * how many bytes form a well-formed sequence there, or how many bytes form the maximal subpart to
 * replace: the lead byte plus every following byte that still continues a well-formed prefix.
 * Invariants of lh_utf8_replace: the output is valid UTF-8; every input byte is either copied or
 * covered by exactly one U+FFFD; valid input comes out byte for byte. Runs of ASCII are skipped
 * eight bytes at a time, so checking already-valid text costs little.
 */
#include "util/utf8_replace.h"

#include <stdint.h>
#include <string.h>

/* The sequence at s[0..avail): returns its length when well-formed, else 0 with *bad set to the
 * length of the maximal subpart (at least 1) that one U+FFFD replaces. */
static size_t subpart(const uint8_t *s, size_t avail, size_t *bad) {
  uint8_t b = s[0];
  if (b < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b < 0xC2) {
    *bad = 1;
    return 0;
  }
  if (b < 0xE0) {
    need = 1;
  } else if (b < 0xF0) {
    need = 2;
    if (b == 0xE0) lo = 0xA0; /* overlong below U+0800 */
    if (b == 0xED) hi = 0x9F; /* surrogates U+D800..DFFF */
  } else if (b < 0xF5) {
    need = 3;
    if (b == 0xF0) lo = 0x90; /* overlong below U+10000 */
    if (b == 0xF4) hi = 0x8F; /* above U+10FFFF */
  } else {
    *bad = 1;
    return 0;
  }
  for (size_t k = 1; k <= need; k++) {
    if (k >= avail) {
      *bad = k;
      return 0;
    }
    uint8_t c = s[k];
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}

static size_t ascii_run(const uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    if (v & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) i++;
  return i;
}

size_t lh_utf8_sequence_len(const void *s, size_t avail) {
  if (!avail) return 0;
  size_t bad;
  return subpart(s, avail, &bad);
}

size_t lh_utf8_valid_len(const void *s, size_t n) {
  const uint8_t *p = s;
  size_t i = 0;
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t bad, len = subpart(p + i, n - i, &bad);
    if (!len) return i;
    i += len;
  }
  return n;
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

lh_status lh_utf8_replace(lh_buf *out, const void *s, size_t n, size_t *replaced) {
  const uint8_t *p = s;
  size_t count = 0, i = 0, run = 0, keep = out->len;
  if (replaced) *replaced = 0;
  if (lh_buf_reserve(out, n)) return LH_ENOMEM;
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t bad, len = subpart(p + i, n - i, &bad);
    if (len) {
      i += len;
      continue;
    }
    if ((i > run && lh_buf_append(out, p + run, i - run)) || lh_buf_append(out, FFFD, 3)) goto nomem;
    count++;
    i += bad;
    run = i;
  }
  if (lh_buf_append(out, n > run ? (const void *)(p + run) : "", n - run)) goto nomem; /* also ends it with NUL */
  if (replaced) *replaced = count;
  return LH_OK;
nomem:
  out->len = keep;
  if (out->data && out->len < out->cap) out->data[out->len] = 0;
  return LH_ENOMEM;
}
