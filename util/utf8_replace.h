/* utf8_replace.h — UTF-8 checks and lossy repair for text that longhaul writes out.
 *
 * Every file longhaul writes (output.jsonl, result.json, ...) must be valid UTF-8 even when the
 * text came from somewhere that is not: a byte-level model can emit any bytes, an error message
 * can quote a file name. lh_utf8_replace repairs such text the way HF tokenizers' decode does
 * (Rust's String::from_utf8_lossy): each maximal subpart of an ill-formed sequence becomes one
 * U+FFFD (Unicode 15 §3.9, "U+FFFD Substitution of Maximal Subparts"), which is also what Python's
 * bytes.decode("utf-8", "replace") does. Valid UTF-8 is the well-formed table of Unicode §3.9
 * (Table 3-7): no overlong forms, no surrogates (ED A0..BF), nothing above U+10FFFF. NUL is valid
 * UTF-8 and passes through unchanged; callers that cannot carry NUL check for it themselves.
 */
#ifndef LH_UTIL_UTF8_REPLACE_H
#define LH_UTIL_UTF8_REPLACE_H

#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

/* Bytes of the well-formed sequence that starts at s[0..avail), or 0 when the bytes there do not
 * start one (including a sequence cut short by avail). */
size_t lh_utf8_sequence_len(const void *s, size_t avail);

/* Bytes in the longest prefix of s[0..n) that is valid UTF-8: n exactly when all of it is. */
size_t lh_utf8_valid_len(const void *s, size_t n);

/* Append s[0..n) to out with each maximal invalid subpart replaced by U+FFFD (EF BF BD); valid
 * UTF-8 is copied unchanged. When replaced is not NULL it receives the number of U+FFFD written.
 * Returns LH_OK or LH_ENOMEM (out then holds what it held before the call). */
lh_status lh_utf8_replace(lh_buf *out, const void *s, size_t n, size_t *replaced);

#endif
