/* niah_families.c — a families file read and checked, its templates rendered and its value
 * patterns expanded, and the per-family accuracy of a finished sweep (see niah_internal.h).
 *
 * The rendering is tools/train_tiny/grammar.py's, byte for byte on ASCII (its fill, render_id and
 * draw_value): the trained model's facts were made by it, and a held-out family must read exactly
 * as the grammar writes it. test_niah_families checks this against outputs grammar.py wrote.
 * Case changes ({Key}, {id}) are ASCII only; other bytes pass through unchanged.
 *
 * Invariants
 *  1. A loaded handle has been checked whole: every template renders (an {id} only where an id
 *     style is known), no question contains {value}, every pattern's longest value fits
 *     LH_NIAH__VALUE_MAX, {w} only with value words. Drawing from it cannot fail on its content.
 *  2. Expanding a pattern takes a fixed number of draws from the generator for that pattern (one
 *     for the pattern, one per field repetition), so a trial's draws depend only on its seed.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/niah_internal.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/rand.h"
#include "util/utf8.h"

static const char *const ID_STYLES[LH_NIAH__ID_COUNT] = {"snake", "upper", "camel", "pascal", "dotted", "kebab"};

const char *lh_niah__id_style_name(int style) {
  return style >= 0 && style < LH_NIAH__ID_COUNT ? ID_STYLES[style] : NULL;
}

int lh_niah__id_style_parse(const char *s) {
  for (int i = 0; i < LH_NIAH__ID_COUNT; i++)
    if (s && !strcmp(s, ID_STYLES[i])) return i;
  return -1;
}

/* ---- rendering ---- */

lh_status lh_niah__render_id(lh_buf *out, const char *key, const char *attr, int style) {
  if (style < 0 || style >= LH_NIAH__ID_COUNT) return LH_EINVAL;
  /* words: the key, then the attribute split at runs of white space (Python's str.split()) */
  const char *w[64];
  size_t wl[64];
  int n = 0;
  w[n] = key, wl[n++] = strlen(key);
  for (const char *p = attr; *p && n < 64;) {
    while (*p && isspace((unsigned char)*p)) p++;
    const char *s = p;
    while (*p && !isspace((unsigned char)*p)) p++;
    if (p > s) w[n] = s, wl[n++] = (size_t)(p - s);
  }
  lh_status st = LH_OK;
  for (int i = 0; i < n && !st; i++) {
    const char *sep = "";
    if (i) sep = style == LH_NIAH__ID_KEBAB ? "-" : style == LH_NIAH__ID_DOTTED && i == 1 ? "."
               : style == LH_NIAH__ID_CAMEL || style == LH_NIAH__ID_PASCAL ? "" : "_";
    st = lh_buf_append_str(out, sep);
    for (size_t j = 0; j < wl[i] && !st; j++) {
      int c = tolower((unsigned char)w[i][j]);
      if (style == LH_NIAH__ID_UPPER) c = toupper(c);
      else if (j == 0 && (style == LH_NIAH__ID_PASCAL || (style == LH_NIAH__ID_CAMEL && i > 0))) c = toupper(c);
      const char ch = (char)c;
      st = lh_buf_append(out, &ch, 1);
    }
  }
  return st;
}

lh_status lh_niah__render(lh_buf *out, const char *tpl, const char *key, const char *attr, const char *value,
                          int id_style) {
  lh_status st = LH_OK;
  for (const char *p = tpl; *p && !st;) {
    if (!strncmp(p, "{key}", 5)) st = lh_buf_append_str(out, key), p += 5;
    else if (!strncmp(p, "{Key}", 5)) {
      const char c = (char)toupper((unsigned char)key[0]);
      st = *key ? lh_buf_append(out, &c, 1) : LH_OK;
      if (!st && *key) st = lh_buf_append_str(out, key + 1);
      p += 5;
    } else if (!strncmp(p, "{attr}", 6)) st = lh_buf_append_str(out, attr), p += 6;
    else if (!strncmp(p, "{value}", 7)) st = lh_buf_append_str(out, value), p += 7;
    else if (!strncmp(p, "{id}", 4)) st = lh_niah__render_id(out, key, attr, id_style), p += 4;
    else st = lh_buf_append(out, p++, 1);
  }
  return st;
}

/* The field at p ("{d}", "{x8}", ...): its letter and count, and its length in *len; 0 when p
 * does not start a field (then it is literal text). */
static int field_at(const char *p, int *count, size_t *len) {
  if (p[0] != '{' || !p[1] || !strchr("dDxXaAw", p[1])) return 0;
  size_t i = 2;
  long c = 0;
  while (isdigit((unsigned char)p[i])) {
    if (c < 100000) c = c * 10 + (p[i] - '0');
    i++;
  }
  if (p[i] != '}') return 0;
  *count = i > 2 ? (int)c : 1;
  *len = i + 1;
  return p[1];
}

lh_status lh_niah__expand_value(lh_buf *out, const char *pattern, const char *const *words, int n_words,
                                uint64_t *rng) {
  lh_status st = LH_OK;
  for (const char *p = pattern; *p && !st;) {
    int count;
    size_t len;
    const int f = field_at(p, &count, &len);
    if (!f) {
      st = lh_buf_append(out, p++, 1);
      continue;
    }
    for (int k = 0; k < count && !st; k++) {
      const uint64_t r = lh_splitmix64(rng);
      char c = 0;
      switch (f) {
      case 'd': c = (char)('0' + r % 10); break;
      case 'D': c = (char)('1' + r % 9); break;
      case 'x': c = "0123456789abcdef"[r % 16]; break;
      case 'X': c = "0123456789ABCDEF"[r % 16]; break;
      case 'a': c = (char)('a' + r % 26); break;
      case 'A': c = (char)('A' + r % 26); break;
      default:
        if (n_words < 1) return LH_EINVAL;
        st = lh_buf_append_str(out, words[r % (uint64_t)n_words]);
        continue;
      }
      st = lh_buf_append(out, &c, 1);
    }
    p += len;
  }
  return st;
}

/* ---- loading ---- */

typedef struct loader {
  const char *path;
  lh_error *err;
} loader;

static lh_status bad(loader *L, const char *field, const char *fmt, const char *what) {
  char m[512];
  snprintf(m, sizeof m, fmt, what ? what : "");
  return lh_error_set(L->err, LH_EFORMAT, "%s: %s: %s (the format is in tools/train_tiny/README.md)", L->path, field,
                      m);
}

/* A string member of o, or NULL with an error (NULL and no error when optional and absent). */
static const char *member_str(loader *L, const cJSON *o, const char *name, const char *where, int optional,
                              lh_status *st) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  char field[160];
  snprintf(field, sizeof field, "%s.%s", where, name);
  if (!v && optional) return NULL;
  if (!cJSON_IsString(v) || !v->valuestring[0]) {
    *st = bad(L, field, "%sexpected a non-empty string", v ? "" : "missing: ");
    return NULL;
  }
  return v->valuestring;
}

/* A list of non-empty strings of at most max bytes (section name, array); n may be 0 if empty_ok. */
static lh_status string_list(loader *L, const cJSON *root, const char *name, size_t max, int empty_ok,
                             const char ***out, int *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, name);
  *n = 0;
  if (!a && empty_ok) return LH_OK;
  if (!cJSON_IsArray(a)) return bad(L, name, "%sexpected an array of strings", a ? "" : "missing: ");
  const int m = cJSON_GetArraySize(a);
  if (!m && !empty_ok) return bad(L, name, "is empty%s", "");
  *out = calloc((size_t)(m ? m : 1), sizeof **out);
  if (!*out) return lh_error_set(L->err, LH_ENOMEM, "out of memory");
  const cJSON *v;
  cJSON_ArrayForEach(v, a) {
    char field[160];
    snprintf(field, sizeof field, "%s[%d]", name, *n);
    if (!cJSON_IsString(v) || !v->valuestring[0]) return bad(L, field, "expected a non-empty string%s", "");
    if (strlen(v->valuestring) > max) {
      char m2[32];
      snprintf(m2, sizeof m2, "%zu", max);
      return bad(L, field, "longer than %s bytes", m2);
    }
    (*out)[(*n)++] = v->valuestring;
  }
  return LH_OK;
}

/* Templates of section name (needles when needles, else questions). */
static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first entry of list (n strings, section name) that repeats an earlier one: refused, since a
 * multikey trial draws different keys until it has as many as it has needles, and a list of keys
 * counted with repeats would promise more than there are (and the drawing would never end). */
static lh_status no_repeats(loader *L, const char *name, const char **list, int n) {
  if (n < 2) return LH_OK;
  const char **v = malloc((size_t)n * sizeof *v);
  if (!v) return lh_error_set(L->err, LH_ENOMEM, "out of memory");
  memcpy(v, list, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, cmp_str);
  const char *rep = NULL;
  for (int i = 1; i < n && !rep; i++)
    if (!strcmp(v[i - 1], v[i])) rep = v[i];
  free(v);
  if (!rep) return LH_OK;
  int first = -1, second = -1;
  for (int i = 0; i < n && second < 0; i++)
    if (!strcmp(list[i], rep)) *(first < 0 ? &first : &second) = i;
  char field[160], m[160];
  snprintf(field, sizeof field, "%s[%d]", name, second);
  snprintf(m, sizeof m, "\"%.60s\" is %s[%d] again", rep, name, first);
  return bad(L, field, "%s; list each once", m);
}

static lh_status templates(loader *L, const cJSON *root, const char *name, int needles, int empty_ok,
                           lh_niah__template **out, int *n) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, name);
  *n = 0;
  if (!a && empty_ok) return LH_OK;
  if (!cJSON_IsArray(a)) return bad(L, name, "%sexpected an array of objects", a ? "" : "missing: ");
  const int m = cJSON_GetArraySize(a);
  if (!m && !empty_ok) return bad(L, name, "is empty%s", "");
  *out = calloc((size_t)(m ? m : 1), sizeof **out);
  if (!*out) return lh_error_set(L->err, LH_ENOMEM, "out of memory");
  const cJSON *o;
  cJSON_ArrayForEach(o, a) {
    char where[96];
    snprintf(where, sizeof where, "%s[%d]", name, *n);
    if (!cJSON_IsObject(o)) return bad(L, where, "expected an object%s", "");
    lh_niah__template *t = &(*out)[*n];
    lh_status st = LH_OK;
    t->text = member_str(L, o, "text", where, 0, &st);
    if (st) return st;
    if (strlen(t->text) > 400) return bad(L, where, "text is longer than 400 bytes%s", "");
    const int has_id = strstr(t->text, "{id}") != NULL;
    char field[160];
    if (needles) {
      t->kind = member_str(L, o, "kind", where, 0, &st);
      if (st) return st;
      if (strlen(t->kind) > 40) return bad(L, where, "kind is longer than 40 bytes%s", "");
      const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "id_style");
      snprintf(field, sizeof field, "%s.id_style", where);
      if (!s || cJSON_IsNull(s)) {
        t->id_style = LH_NIAH__ID_NONE;
        if (has_id) return bad(L, field, "the text has {id}, so it needs an id style (snake, upper, camel, "
                                         "pascal, dotted or kebab)%s", "");
      } else if ((t->id_style = lh_niah__id_style_parse(cJSON_GetStringValue(s))) < 0) {
        return bad(L, field, "\"%s\" is not snake, upper, camel, pascal, dotted, kebab or null",
                   cJSON_IsString(s) ? s->valuestring : "(not a string)");
      } else if (!has_id) {
        return bad(L, field, "an id style without {id} in the text: questions asking with {id} would name an "
                             "identifier the needle never wrote%s", "");
      }
      snprintf(field, sizeof field, "%s.text", where);
      if (!strstr(t->text, "{value}")) return bad(L, field, "a needle must have {value}%s", "");
    } else {
      t->kind = "";
      const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "needs_id");
      snprintf(field, sizeof field, "%s.needs_id", where);
      if (!cJSON_IsBool(b)) return bad(L, field, "%sexpected true or false", b ? "" : "missing: ");
      t->needs_id = cJSON_IsTrue(b);
      snprintf(field, sizeof field, "%s.text", where);
      if (t->needs_id != has_id)
        return bad(L, field, "%s", t->needs_id ? "needs_id is true but the text has no {id}"
                                               : "the text has {id} but needs_id is false");
      if (strstr(t->text, "{value}")) return bad(L, field, "a question must not contain {value} (the answer)%s", "");
    }
    (*n)++;
  }
  return LH_OK;
}

/* The longest value pattern can give, in bytes (or the shortest, with min_word for max_word). */
static size_t pattern_max(const char *pattern, size_t max_word) {
  size_t n = 0;
  for (const char *p = pattern; *p;) {
    int count;
    size_t len;
    const int f = field_at(p, &count, &len);
    if (!f) n++, p++;
    else n += (size_t)count * (f == 'w' ? max_word : 1), p += len;
  }
  return n;
}

static lh_status value_kinds(loader *L, const cJSON *root, lh_niah__families *F) {
  const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "value_kinds");
  if (!cJSON_IsArray(a) || !cJSON_GetArraySize(a))
    return bad(L, "value_kinds", "%sexpected a non-empty array of objects", a ? "" : "missing: ");
  F->kinds = calloc((size_t)cJSON_GetArraySize(a), sizeof *F->kinds);
  if (!F->kinds) return lh_error_set(L->err, LH_ENOMEM, "out of memory");
  size_t max_word = 0;
  for (int i = 0; i < F->n_words; i++) max_word = strlen(F->words[i]) > max_word ? strlen(F->words[i]) : max_word;
  const cJSON *o;
  cJSON_ArrayForEach(o, a) {
    char where[64], field[96];
    snprintf(where, sizeof where, "value_kinds[%d]", F->n_kinds);
    if (!cJSON_IsObject(o)) return bad(L, where, "expected an object%s", "");
    lh_niah__value_kind *k = &F->kinds[F->n_kinds++]; /* counted now: freed if a later check fails */
    lh_status st = LH_OK;
    k->name = member_str(L, o, "name", where, 0, &st);
    if (st) return st;
    if (strlen(k->name) > 40) return bad(L, where, "name is longer than 40 bytes%s", "");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(o, "patterns");
    snprintf(field, sizeof field, "%s.patterns", where);
    if (!cJSON_IsArray(ps) || !cJSON_GetArraySize(ps))
      return bad(L, field, "%sexpected a non-empty array of strings", ps ? "" : "missing: ");
    k->patterns = calloc((size_t)cJSON_GetArraySize(ps), sizeof *k->patterns);
    if (!k->patterns) return lh_error_set(L->err, LH_ENOMEM, "out of memory");
    const cJSON *p;
    cJSON_ArrayForEach(p, ps) {
      snprintf(field, sizeof field, "%s.patterns[%d]", where, k->n_patterns);
      if (!cJSON_IsString(p) || !p->valuestring[0]) return bad(L, field, "expected a non-empty string%s", "");
      if (strstr(p->valuestring, "{w") && !F->n_words) {
        for (const char *q = p->valuestring; (q = strstr(q, "{w")); q++) {
          int c;
          size_t len;
          if (field_at(q, &c, &len) == 'w') return bad(L, field, "{w} needs value_words, and there are none%s", "");
        }
      }
      if (!pattern_max(p->valuestring, 1)) /* only fields of count 0: "{d0}" */
        return bad(L, field, "its values are empty (every field has a count of 0); a needle's value must have "
                             "text to ask for%s", "");
      const size_t m = pattern_max(p->valuestring, max_word);
      if (m >= LH_NIAH__VALUE_MAX) {
        char num[64];
        snprintf(num, sizeof num, "%zu bytes; at most %d", m, LH_NIAH__VALUE_MAX - 1);
        return bad(L, field, "its values can be up to %s", num);
      }
      k->patterns[k->n_patterns++] = p->valuestring;
    }
  }
  return LH_OK;
}

/* The strings of text (n bytes of JSON that cJSON has parsed, so well-formed) checked before any is
 * used: cJSON copies bytes that are not UTF-8 into its strings as they are, and ends a string at
 * a raw NUL or a \u0000, so either would reach results.jsonl, results.csv and the heatmap as
 * invalid text or a silently shortened needle. The first bad string is refused with its JSON path
 * (needles[2].text), or the path of the object whose key it is, and its line. */
static lh_status strings_clean(loader *L, const char *text, size_t n) {
  struct frame {
    int array, index;
    const char *key; /* the object's current key, raw JSON text */
    size_t key_len;
  } fr[CJSON_NESTING_LIMIT + 1]; /* cJSON refused anything deeper */
  const unsigned char *s = (const unsigned char *)text;
  int depth = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '{' || s[i] == '[') {
      fr[depth] = (struct frame){.array = s[i] == '['};
      depth++;
      continue;
    }
    if (s[i] == '}' || s[i] == ']') {
      depth--;
      continue;
    }
    if (s[i] == ',' && depth > 0 && fr[depth - 1].array) fr[depth - 1].index++;
    if (s[i] != '"') continue;
    const char *what = NULL;
    size_t j = i + 1;
    while (j < n && s[j] != '"') {
      size_t step = 1;
      if (s[j] == 0) {
        if (!what) what = "a NUL byte";
      } else if (s[j] >= 0x80) {
        if (!lh_utf8_next(s + j, n - j, &step) && !what) what = "bytes that are not UTF-8";
      } else if (s[j] == '\\') {
        if (j + 5 < n && s[j + 1] == 'u' && !memcmp(s + j + 2, "0000", 4) && !what) what = "\\u0000 (NUL)";
        step = 2;
      }
      j += step;
    }
    size_t k = j + 1;
    while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r' || s[k] == '\n')) k++;
    const int is_key = k < n && s[k] == ':';
    if (what) {
      char field[512];
      size_t at = 0;
      for (int d = 0; d < depth && at < sizeof field; d++) {
        const int own = is_key && d == depth - 1; /* the key being named is not yet the frame's */
        int w = fr[d].array ? snprintf(field + at, sizeof field - at, "[%d]", fr[d].index)
                : own       ? 0
                            : snprintf(field + at, sizeof field - at, "%s%.*s", at ? "." : "",
                                       (int)(fr[d].key_len > 64 ? 64 : fr[d].key_len), fr[d].key ? fr[d].key : "");
        at += w > 0 ? (size_t)w : 0;
      }
      if (at >= sizeof field) at = sizeof field - 1;
      if (!at) snprintf(field, sizeof field, "the top object");
      int line = 1;
      for (size_t q = 0; q < i; q++) line += s[q] == '\n';
      const int utf8 = !strcmp(what, "bytes that are not UTF-8");
      char m[200];
      snprintf(m, sizeof m, "%s (line %d) holds %s%s", is_key ? "a key" : "the string", line, what,
               utf8 ? "; a families file is UTF-8 text: re-encode it"
                    : ", which a needle, question or value cannot carry: remove it");
      return bad(L, field, "%s", m);
    }
    if (is_key && depth > 0) fr[depth - 1].key = text + i + 1, fr[depth - 1].key_len = j - i - 1;
    i = j;
  }
  return LH_OK;
}

static const char *const Q_SECTIONS[LH_NIAH__Q_COUNT] = {"questions", "multi_value_questions", "file_questions"};

lh_status lh_niah__families_load(const char *path, lh_niah__families **out, lh_error *err) {
  *out = NULL;
  lh_buf b = {0};
  lh_status st = lh_file_read_regular(path, 16u << 20, &b, err);
  if (st) {
    lh_buf_free(&b);
    return lh_error_prefix(err, st, "--families: ");
  }
  lh_niah__families *F = calloc(1, sizeof *F);
  if (!F) {
    lh_buf_free(&b);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  uint8_t d[32];
  lh_sha256_buf(b.data, b.len, d);
  lh_hex(d, 32, F->sha256);
  const char *end = NULL;
  F->root = cJSON_ParseWithLengthOpts(b.data ? b.data : "", b.len, &end, 0);
  loader L = {.path = path, .err = err};
  char deep[128];
  if (!F->root && lh_json_too_deep(b.data, b.len, deep, sizeof deep)) {
    st = lh_error_set(err, LH_EFORMAT, "%s: %s", path, deep);
  } else if (!F->root) {
    int line = 1;
    for (const char *c = b.data; c && end && c < end; c++) line += *c == '\n';
    st = lh_error_set(err, LH_EFORMAT, "%s:%d: not JSON (a families file is one JSON object; see "
                      "tools/train_tiny/README.md)", path, line);
  } else if (!cJSON_IsObject(F->root)) {
    st = lh_error_set(err, LH_EFORMAT, "%s: expected one JSON object (see tools/train_tiny/README.md)", path);
  } else {
    const char *dup = NULL;
    if (lh_json_duplicate_key(F->root, 1, &dup)) st = lh_error_set(err, LH_ENOMEM, "out of memory");
    else if (dup)
      st = lh_error_set(err, LH_EFORMAT, "%s: key \"%.64s\" appears more than once in one object; JSON readers "
                        "disagree on which one counts (grammar.py's takes the last), so write it once", path, dup);
    else
      st = strings_clean(&L, b.data, b.len);
  }
  lh_buf_free(&b);
  if (!st) st = string_list(&L, F->root, "value_words", 60, 1, &F->words, &F->n_words);
  if (!st) st = string_list(&L, F->root, "attributes", 60, 0, &F->attrs, &F->n_attrs);
  if (!st) st = string_list(&L, F->root, "keys", 47, 1, &F->keys, &F->n_keys);
  if (!st) st = no_repeats(&L, "keys", F->keys, F->n_keys);
  if (!st) st = templates(&L, F->root, "needles", 1, 0, &F->needles, &F->n_needles);
  for (int q = 0; q < LH_NIAH__Q_COUNT && !st; q++)
    st = templates(&L, F->root, Q_SECTIONS[q], 0, q != LH_NIAH__Q_SINGLE, &F->questions[q], &F->n_questions[q]);
  if (!st) st = value_kinds(&L, F->root, F);
  if (st) {
    lh_niah__families_free(F);
    return st;
  }
  *out = F;
  return LH_OK;
}

void lh_niah__families_free(lh_niah__families *F) {
  if (!F) return;
  for (int i = 0; F->kinds && i < F->n_kinds; i++) free(F->kinds[i].patterns);
  free(F->kinds);
  free(F->needles);
  for (int q = 0; q < LH_NIAH__Q_COUNT; q++) free(F->questions[q]);
  free(F->attrs), free(F->words), free(F->keys);
  cJSON_Delete(F->root);
  free(F);
}

/* ---- a trial's facts ---- */

static const int Q_OF_VARIANT[LH_NIAH_VARIANT_COUNT] = {
    [LH_NIAH_SINGLE] = LH_NIAH__Q_SINGLE, [LH_NIAH_MULTIKEY] = LH_NIAH__Q_SINGLE,
    [LH_NIAH_MULTIVALUE] = LH_NIAH__Q_MULTI_VALUE, [LH_NIAH_MULTIQUERY] = -1, [LH_NIAH_WHICHFILE] = LH_NIAH__Q_FILE};

/* Whether some question of set q fits needle n. */
static int askable(const lh_niah__families *F, int q, const lh_niah__template *n) {
  for (int i = 0; i < F->n_questions[q]; i++)
    if (lh_niah__fits(&F->questions[q][i], n)) return 1;
  return 0;
}

lh_status lh_niah__families_check(const lh_niah__families *F, const char *path, lh_niah_variant v, int n,
                                  int n_keys, lh_error *err) {
  const int q = (int)v >= 0 && v < LH_NIAH_VARIANT_COUNT ? Q_OF_VARIANT[v] : -1;
  if (q < 0)
    return lh_error_set(err, LH_EINVAL, "--families: the %s variant has no questions in a families file; use "
                        "single, multikey, multivalue or whichfile", lh_niah_variant_name(v));
  if (!F->n_questions[q])
    return lh_error_set(err, LH_EINVAL, "--families %s has no %s, which the %s variant asks; add some or use "
                        "another variant", path, Q_SECTIONS[q], lh_niah_variant_name(v));
  int ok = 0;
  for (int i = 0; i < F->n_needles && !ok; i++) ok = askable(F, q, &F->needles[i]);
  if (!ok)
    return lh_error_set(err, LH_EINVAL, "--families %s: every one of its %s asks with {id}, and no needle has an "
                        "id_style", path, Q_SECTIONS[q]);
  const int keys = F->n_keys ? F->n_keys : n_keys;
  if (v == LH_NIAH_MULTIKEY && keys < n)
    return lh_error_set(err, LH_EINVAL, "--families %s: multikey with %d needles needs %d different keys, and there "
                        "are %d; pass fewer --needles", path, n, n, keys);
  if (n < 1 || n > 16) return lh_error_set(err, LH_EINVAL, "--needles: 1 to 16 (got %d)", n);
  return LH_OK;
}

static int pick(uint64_t *rng, int n) { return (int)(lh_splitmix64(rng) % (uint64_t)n); }

/* A value of kind k not among t's first n values (at most 1000 draws; LH_EINVAL after). */
static lh_status draw_value(const lh_niah__families *F, int k, trial *t, int n, uint64_t *rng, lh_error *err) {
  const lh_niah__value_kind *K = &F->kinds[k];
  for (int tries = 0; tries < 1000; tries++) {
    lh_buf b = {0};
    lh_status st = lh_niah__expand_value(&b, K->patterns[pick(rng, K->n_patterns)], F->words, F->n_words, rng);
    if (!st && !b.data) st = lh_buf_append(&b, "", 1); /* never, by invariant 1; "" rather than "(null)" */
    if (st) {
      lh_buf_free(&b);
      return lh_error_set(err, st, "out of memory");
    }
    int dup = 0;
    for (int i = 0; i < n && !dup; i++) dup = !strcmp(t->values[i], b.data);
    if (!dup) snprintf(t->values[n], sizeof t->values[n], "%s", b.data); /* fits: invariant 1 */
    lh_buf_free(&b);
    if (!dup) return LH_OK;
  }
  return lh_error_set(err, LH_EINVAL, "--families: value kind %s gave no value different from the trial's other %d "
                      "in 1000 draws; pass fewer --needles", K->name, n);
}

/* Fact i of t: key, needle template ni, value of kind k, rendered line. */
static lh_status fact(const lh_niah__families *F, trial *t, int i, const char *key, const char *attr, int ni, int k,
                      uint64_t *rng, lh_error *err) {
  snprintf(t->keys[i], sizeof t->keys[i], "%s", key);
  t->fam_needle[i] = ni, t->fam_kind[i] = k;
  lh_status st = draw_value(F, k, t, i, rng, err);
  if (st) return st;
  lh_buf_clear(&t->needle_text[i]);
  st = lh_niah__render(&t->needle_text[i], F->needles[ni].text, key, attr, t->values[i], F->needles[ni].id_style);
  if (!st) st = lh_buf_append_str(&t->needle_text[i], "\n");
  return st ? lh_error_set(err, st, "out of memory") : LH_OK;
}

lh_status lh_niah__families_draw(const lh_niah__families *F, lh_niah_variant v, int n, const char *const *keys,
                                 int n_keys, uint64_t *rng, trial *t, lh_error *err) {
  if (F->n_keys) keys = F->keys, n_keys = F->n_keys;
  const int qs = Q_OF_VARIANT[v];
  /* the asked fact: a needle that some question of the variant's set fits, then such a question */
  int n_ok = 0;
  for (int i = 0; i < F->n_needles; i++) n_ok += askable(F, qs, &F->needles[i]);
  int ni = 0;
  for (int r = pick(rng, n_ok); ni < F->n_needles; ni++)
    if (askable(F, qs, &F->needles[ni]) && r-- == 0) break;
  const lh_niah__template *N = &F->needles[ni];
  int n_fit = 0;
  for (int i = 0; i < F->n_questions[qs]; i++) n_fit += lh_niah__fits(&F->questions[qs][i], N);
  int qi = 0;
  for (int r = pick(rng, n_fit); qi < F->n_questions[qs]; qi++)
    if (lh_niah__fits(&F->questions[qs][qi], N) && r-- == 0) break;
  const lh_niah__template *Q = &F->questions[qs][qi];
  const char *attr = F->attrs[pick(rng, F->n_attrs)];
  const int k = pick(rng, F->n_kinds);
  t->n_needles = n;
  lh_status st = fact(F, t, 0, keys[pick(rng, n_keys)], attr, ni, k, rng, err);
  /* the others: multikey, other keys with the same attribute, each its own template and value
   * kind; multivalue, the same key, attribute, template and kind with other values */
  for (int i = 1; i < n && !st; i++) {
    if (v == LH_NIAH_MULTIVALUE) {
      st = fact(F, t, i, t->keys[0], attr, ni, k, rng, err);
      continue;
    }
    int key;
    for (int dup = 1; dup;) {
      key = pick(rng, n_keys), dup = 0;
      for (int j = 0; j < i && !dup; j++) dup = !strcmp(t->keys[j], keys[key]);
    }
    const int nj = pick(rng, F->n_needles);
    st = fact(F, t, i, keys[key], attr, nj, pick(rng, F->n_kinds), rng, err);
  }
  for (int i = n; i < 16; i++) t->fam_needle[i] = t->fam_kind[i] = -1;
  if (st) return st;
  lh_buf q = {0};
  st = lh_niah__render(&q, Q->text, t->keys[0], attr, "", N->id_style);
  if (!st && q.len >= sizeof t->question)
    st = lh_error_set(err, LH_EINVAL, "--families: question \"%s\" renders to %zu bytes; at most %zu", Q->text, q.len,
                      sizeof t->question - 1);
  else if (st)
    st = lh_error_set(err, st, "out of memory");
  if (!st) snprintf(t->question, sizeof t->question, "%s", q.data);
  lh_buf_free(&q);
  if (st) return st;
  t->n_expected = v == LH_NIAH_MULTIVALUE ? n : 1;
  t->expected[0] = 0;
  if (v == LH_NIAH_SINGLE || v == LH_NIAH_MULTIKEY) {
    snprintf(t->expected, sizeof t->expected, "%s", t->values[0]);
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%s", t->values[0]);
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "needle_kind", N->kind);
  cJSON_AddStringToObject(o, "needle", N->text);
  if (N->id_style >= 0) cJSON_AddStringToObject(o, "id_style", lh_niah__id_style_name(N->id_style));
  else cJSON_AddNullToObject(o, "id_style");
  cJSON_AddStringToObject(o, "question", Q->text);
  cJSON_AddStringToObject(o, "value_kind", F->kinds[k].name);
  cJSON_AddStringToObject(o, "attr", attr);
  cJSON_AddStringToObject(o, "key", t->keys[0]);
  char *js = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  lh_buf_clear(&t->family);
  st = js ? lh_buf_append_str(&t->family, js) : LH_ENOMEM;
  free(js);
  return st ? lh_error_set(err, st, "out of memory") : LH_OK;
}

/* ---- the breakdown for summary.json ---- */

typedef struct group {
  char name[48];
  int trials;
  double score;
} group;

/* Add score to the group called name in g (at most max groups; more are left out). */
static void group_add(group *g, int *n, int max, const char *name, double score) {
  if (!name) return;
  int i = 0;
  while (i < *n && strcmp(g[i].name, name)) i++;
  if (i == *n) {
    if (*n == max) return;
    snprintf(g[(*n)++].name, sizeof g->name, "%s", name);
  }
  g[i].trials++, g[i].score += score;
}

static int cmp_group(const void *a, const void *b) { return strcmp(((const group *)a)->name, ((const group *)b)->name); }

/* g (n groups) sorted by name, as JSON, and into out (at most LH_NIAH_MAX_GROUPS, count in *nout)
 * when out is not NULL */
static cJSON *groups_json(group *g, int n, lh_niah_group *out, int *nout) {
  qsort(g, (size_t)n, sizeof *g, cmp_group);
  cJSON *o = cJSON_CreateObject();
  for (int i = 0; o && i < n; i++) {
    cJSON *x = cJSON_AddObjectToObject(o, g[i].name);
    cJSON_AddNumberToObject(x, "trials", g[i].trials);
    cJSON_AddNumberToObject(x, "accuracy", g[i].score / g[i].trials);
  }
  for (int i = 0; out && i < n && i < LH_NIAH_MAX_GROUPS; i++, (*nout)++) {
    snprintf(out[i].name, sizeof out[i].name, "%s", g[i].name);
    out[i].trials = g[i].trials, out[i].accuracy = g[i].score / g[i].trials;
  }
  return o;
}

cJSON *lh_niah__family_breakdown(const char *out_dir, lh_niah_summary *sum) {
  enum { MAXG = 256 };
  char path[4200];
  snprintf(path, sizeof path, "%s/results.jsonl", out_dir);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  group *needle = calloc(MAXG, sizeof *needle), *kind = calloc(MAXG, sizeof *kind);
  int nn = 0, nk = 0;
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while (needle && kind && (len = getline(&line, &cap, f)) > 0) {
    if (line[len - 1] != '\n') break; /* a torn last line, as the reports read it */
    cJSON *o = cJSON_ParseWithLength(line, (size_t)len);
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(o, "family");
    const double score = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "score"));
    if (cJSON_IsObject(fam) && score == score) {
      group_add(needle, &nn, MAXG, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fam, "needle_kind")), score);
      group_add(kind, &nk, MAXG, cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(fam, "value_kind")), score);
    }
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  cJSON *out = NULL;
  if (sum) sum->n_needle_kinds = sum->n_value_kinds = 0;
  if (needle && kind && (nn || nk)) {
    out = cJSON_CreateObject();
    cJSON_AddItemToObject(out, "by_needle_kind", groups_json(needle, nn, sum ? sum->by_needle_kind : NULL,
                                                             sum ? &sum->n_needle_kinds : NULL));
    cJSON_AddItemToObject(out, "by_value_kind", groups_json(kind, nk, sum ? sum->by_value_kind : NULL,
                                                            sum ? &sum->n_value_kinds : NULL));
  }
  free(needle), free(kind);
  return out;
}
