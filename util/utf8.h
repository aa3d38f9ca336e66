/* utf8.h — UTF-8 validation and repair, shared by ingest/ and tokenizer/.
 *
 * Well-formed means Unicode 15 Table 3-7: no overlongs, no surrogates, nothing above U+10FFFF.
 * Repair follows §3.9 "U+FFFD Substitution of Maximal Subparts", which is what Python's
 * bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do: each maximal
 * subpart of an ill-formed sequence (the longest prefix of a well-formed sequence, or else one
 * byte) becomes one U+FFFD. Nothing here allocates except through the lh_buf it is given.
 */
#ifndef LH_UTIL_UTF8_H
#define LH_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

typedef enum lh_utf8_class {
  LH_UTF8_VALID,   /* a whole well-formed sequence of *len bytes */
  LH_UTF8_INVALID, /* a maximal subpart of *len bytes that one U+FFFD replaces */
  LH_UTF8_SHORT,   /* all avail bytes (*len) are a proper prefix of a well-formed sequence */
} lh_utf8_class;

/* Classify the sequence that starts at s[0] (avail >= 1 bytes readable). */
lh_utf8_class lh_utf8_classify(const uint8_t *s, size_t avail, size_t *len);

/* Length of the leading run of ASCII bytes of p[0..n). */
size_t lh_utf8_ascii_run(const uint8_t *p, size_t n);

/* Length of the longest prefix of s[0..n) that is well-formed UTF-8 (a sequence cut by the end
 * is not part of it). */
size_t lh_utf8_valid_prefix(const uint8_t *s, size_t n);

/* 1 when p[0..n) is entirely well-formed UTF-8. */
int lh_utf8_valid(const uint8_t *p, size_t n);

/* The sequence at s[0..avail) (avail >= 1): 1 when valid, 0 when not; *len is its length or the
 * length of the maximal invalid subpart (an unfinished sequence at the end counts as invalid). */
int lh_utf8_next(const uint8_t *s, size_t avail, size_t *len);

/* Repair of a stream that arrives in pieces; zero-initialise before the first piece. */
typedef struct lh_utf8 {
  uint8_t pend[4]; /* a valid but unfinished sequence carried to the next piece */
  uint8_t npend;
} lh_utf8;

/* Append p[0..n) to out with every maximal invalid subpart replaced by U+FFFD. Pieces may split
 * a sequence anywhere: a valid unfinished tail is carried in *u, never replaced early. final: the
 * input ends here (a carried unfinished sequence becomes U+FFFD). Adds substitutions to *replaced.
 * Returns LH_ENOMEM when out cannot grow (out then holds a prefix of the result), else LH_OK. */
lh_status lh_utf8_repair(lh_utf8 *u, const uint8_t *p, size_t n, int final, lh_buf *out, int64_t *replaced);

/* All of s[0..n) at once, for text that longhaul writes out (output.jsonl, result.json, NIAH
 * results): every file it writes is valid UTF-8 even when a byte-level model emitted bytes that
 * are not, the way HF tokenizers' decode repairs them. NUL is valid UTF-8 and passes through;
 * callers that cannot carry NUL check for it themselves. *replaced (may be NULL) counts the
 * U+FFFD written. LH_OK or LH_ENOMEM (out then holds what it held before). */
lh_status lh_utf8_replace(lh_buf *out, const void *s, size_t n, size_t *replaced);

/* The C string s, in a buffer of cap bytes, made valid UTF-8 in place: U+FFFD for each invalid
 * subpart, then cut at a sequence boundary to fit (also repairing a sequence that snprintf cut),
 * for names and titles built from paths of other bytes. Left as it was when out of memory. */
void lh_utf8_fit(char *s, size_t cap);

#endif
