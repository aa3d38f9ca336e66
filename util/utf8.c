/* utf8.c — UTF-8 classification, validation and streaming repair (utf8.h).
 *
 * One classifier, lh_utf8_classify, decides every sequence; validation and repair are loops over
 * it. Invariants of repair: the output is always valid UTF-8; every input byte is either copied
 * or covered by exactly one U+FFFD; nothing else is changed (NUL, CR, BOM pass through). Runs of
 * ASCII are skipped 8 bytes at a time: these loops are the hot path of text-only ingest and of
 * the tokenizer's input check.
 */
#include "util/utf8.h"

#include <string.h>

lh_utf8_class lh_utf8_classify(const uint8_t *s, size_t avail, size_t *len) {
  uint8_t b = s[0];
  if (b < 0x80) return *len = 1, LH_UTF8_VALID;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF; /* the range of the first continuation byte */
  if (b < 0xC2) return *len = 1, LH_UTF8_INVALID;
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
    return *len = 1, LH_UTF8_INVALID;
  for (size_t k = 1; k <= need; k++) {
    if (k >= avail) return *len = avail, LH_UTF8_SHORT;
    uint8_t c = s[k];
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return *len = k, LH_UTF8_INVALID;
  }
  return *len = need + 1, LH_UTF8_VALID;
}

size_t lh_utf8_ascii_run(const uint8_t *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    if (v & 0x8080808080808080ull) break;
  }
  while (i < n && p[i] < 0x80) i++;
  return i;
}

size_t lh_utf8_valid_prefix(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    i += lh_utf8_ascii_run(s + i, n - i);
    if (i >= n) break;
    size_t len;
    if (lh_utf8_classify(s + i, n - i, &len) != LH_UTF8_VALID) return i;
    i += len;
  }
  return n;
}

int lh_utf8_valid(const uint8_t *p, size_t n) { return lh_utf8_valid_prefix(p, n) == n; }

int lh_utf8_next(const uint8_t *s, size_t avail, size_t *len) {
  return lh_utf8_classify(s, avail, len) == LH_UTF8_VALID;
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

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
    lh_utf8_class r = lh_utf8_classify(u->pend, u->npend, &len);
    if (r == LH_UTF8_SHORT) continue;
    if (r == LH_UTF8_VALID) {
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
    i += lh_utf8_ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t len;
    lh_utf8_class r = lh_utf8_classify(p + i, n - i, &len);
    if (r == LH_UTF8_VALID) {
      i += len;
      continue;
    }
    if (lh_buf_append(out, p + run, i - run)) return LH_ENOMEM;
    if (r == LH_UTF8_SHORT && !final) {
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

lh_status lh_utf8_replace(lh_buf *out, const void *s, size_t n, size_t *replaced) {
  const size_t keep = out->len;
  if (lh_buf_reserve(out, n + 1) != LH_OK) return LH_ENOMEM; /* valid text needs no more; a result is terminated */
  out->data[out->len] = 0;
  lh_utf8 u = {0};
  int64_t r = 0;
  const lh_status st = lh_utf8_repair(&u, s, n, 1, out, &r);
  if (st != LH_OK) {
    out->len = keep;
    if (out->data && keep < out->cap) out->data[keep] = 0;
    return st;
  }
  if (replaced) *replaced = (size_t)r;
  return LH_OK;
}

void lh_utf8_fit(char *s, size_t cap) {
  const size_t n = strlen(s);
  if (!cap || lh_utf8_valid((const uint8_t *)s, n)) return;
  lh_buf b = {0};
  if (lh_utf8_replace(&b, s, n, NULL) == LH_OK && b.data) {
    const size_t k = lh_utf8_valid_prefix((const uint8_t *)b.data, b.len < cap ? b.len : cap - 1);
    memcpy(s, b.data, k);
    s[k] = 0;
  }
  lh_buf_free(&b);
}
