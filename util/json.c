/* json.c — see json.h. The duplicate-key check allocates nothing beyond one array of key pointers
 * per object. */
#include "util/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/utf8.h"

typedef struct keyref {
  const char *key;
  size_t pos; /* the member's index in its object */
} keyref;

static int keyref_cmp(const void *pa, const void *pb) {
  const keyref *a = pa, *b = pb;
  int c = strcmp(a->key, b->key);
  if (c) return c;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

/* The repeated key of one object (not its children), or NULL. */
static lh_status object_duplicate(const cJSON *obj, const char **key) {
  size_t n = 0;
  for (const cJSON *c = obj->child; c; c = c->next) n++;
  if (n < 2) return LH_OK;
  keyref *v = malloc(n * sizeof *v);
  if (!v) return LH_ENOMEM;
  size_t k = 0;
  for (const cJSON *c = obj->child; c; c = c->next)
    if (c->string) v[k] = (keyref){c->string, k}, k++;
  qsort(v, k, sizeof *v, keyref_cmp);
  size_t best = (size_t)-1;
  for (size_t i = 1; i < k; i++)
    if (!strcmp(v[i - 1].key, v[i].key) && (best == (size_t)-1 || v[i].pos < v[best].pos)) best = i;
  if (best != (size_t)-1) *key = v[best].key;
  free(v);
  return LH_OK;
}

lh_status lh_json_duplicate_key(const cJSON *node, int nested, const char **key) {
  *key = NULL;
  if (!node || !(cJSON_IsObject(node) || cJSON_IsArray(node))) return LH_OK;
  lh_status st = cJSON_IsObject(node) ? object_duplicate(node, key) : LH_OK;
  if (st || *key || !nested) return st;
  /* depth is bounded by cJSON's nesting limit, so recursion is safe */
  for (const cJSON *c = node->child; c && !st && !*key; c = c->next) st = lh_json_duplicate_key(c, 1, key);
  return st;
}

cJSON *lh_json_text(const char *text) {
  if (!text) text = "";
  const size_t n = strlen(text);
  if (lh_utf8_valid((const uint8_t *)text, n)) return cJSON_CreateString(text);
  lh_buf b = {0};
  cJSON *s = lh_utf8_replace(&b, text, n, NULL) == LH_OK ? cJSON_CreateString(b.data ? b.data : "") : NULL;
  lh_buf_free(&b);
  return s;
}

void lh_json_add_text(cJSON *o, const char *key, const char *text) {
  cJSON *s = lh_json_text(text);
  if (s) cJSON_AddItemToObject(o, key, s);
}

long lh_json_too_deep_at(const char *text, size_t len) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; text && i < len; i++) {
    const char c = text[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = 0;
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > CJSON_NESTING_LIMIT) return (long)i;
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  return -1;
}

int lh_json_too_deep(const char *text, size_t len, char *msg, size_t n) {
  const long at = lh_json_too_deep_at(text, len);
  if (at < 0) return 0;
  if (n) snprintf(msg, n, "arrays and objects nest more than %d deep (at byte %ld): longhaul reads no deeper",
                  CJSON_NESTING_LIMIT, at);
  return 1;
}
