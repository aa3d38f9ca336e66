/* frame_utf8.c — the binary sniff: how much of a piece is NUL or ill-formed UTF-8.
 *
 * The decoder and the streaming repair it stands beside are util/utf8.c's (maximal subparts to
 * U+FFFD, as Python's bytes.decode("utf-8", errors="replace") does, so the framed text equals what
 * a Python reference builds from the same bytes). The sniff counts the bytes that repair would
 * replace, without writing anything, and stops counting once the verdict is settled.
 */
#include "ingest/ingest_internal.h"

#include <string.h>

size_t lh_utf8_invalid_bytes(const uint8_t *p, size_t n, int final, size_t stop_above, int64_t *nul_at,
                             size_t *clean) {
  const void *z = memchr(p, 0, n);
  *nul_at = z ? (const uint8_t *)z - p : -1;
  size_t bad = 0, i = 0;
  *clean = n;
  if (z) return 0; /* binary whatever the rest holds */
  while (i < n && bad <= stop_above) {
    i += lh_utf8_ascii_run(p + i, n - i);
    if (i >= n) break;
    size_t len;
    lh_utf8_class r = lh_utf8_classify(p + i, n - i, &len);
    if (r == LH_UTF8_SHORT && !final) *clean = i;
    if (r == LH_UTF8_INVALID || (r == LH_UTF8_SHORT && final)) bad += len;
    i += len;
  }
  return bad;
}
