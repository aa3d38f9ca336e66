/* frame_utf8.c — streaming UTF-8 repair and the binary sniff.
 *
 * Repair follows Unicode 15 §3.9 "U+FFFD Substitution of Maximal Subparts", which is what Python's
 * bytes.decode("utf-8", errors="replace") does, so the framed text equals what a Python reference
 * builds from the same bytes. Pieces may split a sequence anywhere: a valid but unfinished
 * sequence (at most 3 bytes) is carried to the next piece, never replaced early. Invariants: the
 * output is always valid UTF-8; every input byte is either copied or covered by exactly one
 * U+FFFD; nothing else is changed (NUL, CR, BOM pass through). Runs of ASCII are copied 8 bytes
 * at a time; this is the hot loop of text-only ingest.
 */
#include <string.h>

#include "ingest/ingest_internal.h"

enum { U_VALID, U_INVALID, U_SHORT };

/* Classify the sequence at s[0..avail): U_VALID or U_INVALID with *len bytes, or U_SHORT when
 * all avail bytes are a valid prefix of a longer sequence. */
static int decode_one(const uint8_t *s, size_t avail, size_t *len) {
  uint8_t b = s[0];
  if (b < 0x80) return *len = 1, U_VALID;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b < 0xC2) return *len = 1, U_INVALID;
  if (b < 0xE0) need = 1;
  else if (b < 0xF0) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b < 0xF5) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else
    return *len = 1, U_INVALID;
  for (size_t k = 1; k <= need; k++) {
    if (k >= avail) return *len = avail, U_SHORT;
    uint8_t c = s[k];
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return *len = k, U_INVALID;
  }
  return *len = need + 1, U_VALID;
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

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

lh_status lh_utf8_repair(lh_utf8 *u, const uint8_t *p, size_t n, int final, lh_buf *out, int64_t *replaced) {
  if (lh_buf_reserve(out, n + 8)) return LH_ENOMEM;
  while (u->npend) {
    if (!n) {
      if (!final) return LH_OK;
      u->npend = 0;
      ++*replaced;
      return lh_buf_append(out, FFFD, 3);
    }
    u->pend[u->npend++] = *p++;
    n--;
    size_t len;
    int r = decode_one(u->pend, u->npend, &len);
    if (r == U_SHORT) continue;
    if (r == U_VALID) {
      if (lh_buf_append(out, u->pend, u->npend)) return LH_ENOMEM;
    } else {
      /* The carried bytes were a valid prefix, so only the byte just added can have broken it:
       * the carried bytes are the maximal subpart and that byte starts over. */
      ++*replaced;
      if (lh_buf_append(out, FFFD, 3)) return LH_ENOMEM;
      p--, n++;
    }
    u->npend = 0;
  }
  if (!n) return LH_OK;
  size_t i = 0, run = 0;
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t len;
    int r = decode_one(p + i, n - i, &len);
    if (r == U_VALID) {
      i += len;
      continue;
    }
    if (lh_buf_append(out, p + run, i - run)) return LH_ENOMEM;
    if (r == U_SHORT && !final) {
      memcpy(u->pend, p + i, len);
      u->npend = (uint8_t)len;
      return LH_OK;
    }
    ++*replaced;
    if (lh_buf_append(out, FFFD, 3)) return LH_ENOMEM;
    i += len;
    run = i;
  }
  return lh_buf_append(out, p + run, n - run);
}

size_t lh_utf8_invalid_bytes(const uint8_t *p, size_t n, int final, size_t stop_above, int64_t *nul_at,
                             size_t *clean) {
  const void *z = memchr(p, 0, n);
  *nul_at = z ? (const uint8_t *)z - p : -1;
  size_t bad = 0, i = 0;
  *clean = n;
  if (z) return 0; /* binary whatever the rest holds */
  while (i < n && bad <= stop_above) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t len;
    int r = decode_one(p + i, n - i, &len);
    if (r == U_SHORT && !final) *clean = i;
    if (r == U_INVALID || (r == U_SHORT && final)) bad += len;
    i += len;
  }
  return bad;
}

int lh_utf8_valid(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    i += ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t len;
    if (decode_one(p + i, n - i, &len) != U_VALID) return 0;
    i += len;
  }
  return 1;
}

int lh_utf8_next(const uint8_t *s, size_t avail, size_t *len) {
  int r = decode_one(s, avail, len);
  return r == U_VALID;
}
