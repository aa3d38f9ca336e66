/* json.h — checks on parsed JSON (cJSON trees) that more than one reader of untrusted JSON needs.
 *
 * JSON leaves a repeated key in one object undefined: cJSON keeps both and its lookups return the
 * first, while Python's json (which wrote most configs and batches) keeps the last. A reader that
 * gives a value meaning must therefore refuse such an object rather than pick one silently.
 */
#ifndef LH_UTIL_JSON_H
#define LH_UTIL_JSON_H

#include <cjson/cJSON.h>

#include "util/err.h"

/* The key that appears more than once in the object node (in objects nested in it too, at any
 * depth, when nested is set), or NULL when none does (or node is not an object or array). When
 * several keys repeat, the one whose second occurrence comes first in its object is named. The
 * result points into the tree. O(k log k) per object of k keys, so a hostile object of a million
 * keys is checked in well under a second. LH_ENOMEM when the sort array cannot be allocated. */
lh_status lh_json_duplicate_key(const cJSON *node, int nested, const char **key);

/* Whether text nests arrays and objects deeper than cJSON reads (CJSON_NESTING_LIMIT, where its
 * parse fails): then 1, with "arrays and objects nest more than 1000 deep (at byte N): longhaul
 * reads no deeper" in msg (N the 0-based offset of the bracket past the limit); else 0. Brackets
 * in strings do not count. One pass, no allocation: for a reader to say why cJSON refused a text. */
int lh_json_too_deep(const char *text, size_t len, char *msg, size_t n);
/* The same check for a reader that words its own message: the 0-based offset in text of the first
 * bracket that nests past CJSON_NESTING_LIMIT, or -1 when none does. */
long lh_json_too_deep_at(const char *text, size_t len);

/* A JSON string node of text (NULL: ""), with U+FFFD for each invalid UTF-8 subpart (as
 * lh_utf8_replace), so that files quoting paths, names, templates from the command line or model
 * output stay valid UTF-8 whatever the bytes were; NULL when out of memory. */
cJSON *lh_json_text(const char *text);
/* Add lh_json_text(text) to the object o under key (nothing when out of memory). */
void lh_json_add_text(cJSON *o, const char *key, const char *text);

#endif
