/* fixture_json.h — what the tokenizer tests share to read fixtures made by HF tokenizers
 * (tools/make_tokenizer_fixtures.py): base64 text and id arrays. Header-only, for tests. */
#ifndef LH_TESTS_TOKENIZER_FIXTURE_JSON_H
#define LH_TESTS_TOKENIZER_FIXTURE_JSON_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "util/buf.h"

static inline int b64val(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* Append the bytes of base64 text s to out (out->data is never NULL afterwards). */
static inline void b64dec(const char *s, lh_buf *out) {
  uint32_t acc = 0;
  int bits = 0;
  lh_buf_append(out, "", 0);
  for (; *s; s++) {
    int v = b64val((unsigned char)*s);
    if (v < 0) continue;
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      char ch = (char)((acc >> bits) & 0xFF);
      lh_buf_append(out, &ch, 1);
    }
  }
}

/* v holds exactly the ids of the JSON array arr. */
static inline int ids_eq(const lh_i32vec *v, const cJSON *arr) {
  if ((int)v->len != cJSON_GetArraySize(arr)) return 0;
  size_t i = 0;
  for (const cJSON *e = arr->child; e; e = e->next, i++)
    if ((int32_t)e->valuedouble != v->data[i]) return 0;
  return 1;
}

#endif
