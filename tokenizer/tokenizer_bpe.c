/* tokenizer_bpe.c — the BPE model of HF tokenizers: vocabulary, merge ranks, merging.
 *
 * Merging follows HF's Word::merge_all exactly: a min-heap of (rank, position) over adjacent
 * pairs, where a popped entry is skipped when its left symbol is gone, has no right neighbour,
 * or the current pair no longer produces the entry's token. That is O(n log n) per pre-token,
 * so a 100 KB pre-token (minified code, a run of punctuation) costs milliseconds, not minutes.
 * Symbols are built as HF's merge_word builds them, including its corner cases: unknown
 * characters become byte-fallback tokens "<0xXX>" when all exist, else the unk token (fused
 * when fuse_unk), else they vanish; a pending unk is flushed only when a known character
 * follows, so byte-fallback tokens can precede it.
 *
 * For byte-level tokenizers the pre-token arrives as raw bytes ("mapped"): each byte's symbol
 * is the vocabulary id of its GPT-2 alphabet character, so the mapped string is never built.
 *
 * A per-context cache maps pre-tokens (shorter than 256 bytes, as HF) to their ids; it is
 * cleared when full. Caching cannot change results: merging is a pure function of the text.
 * Invariants: a tk_bpe is immutable after tk_bpe_load; scratch belongs to one thread.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

/* --------------------------------------------------------------------------- hashing, maps */


static lh_status strmap_grow(tk_strmap *m) {
  size_t ns = m->nslots ? m->nslots * 2 : 64;
  uint32_t *slots = calloc(ns, sizeof *slots);
  if (!slots) return LH_ENOMEM;
  for (size_t i = 0; i < m->nents; i++) {
    size_t j = m->ents[i].hash & (ns - 1);
    while (slots[j]) j = (j + 1) & (ns - 1);
    slots[j] = (uint32_t)(i + 1);
  }
  free(m->slots);
  m->slots = slots;
  m->nslots = ns;
  return LH_OK;
}

static uint32_t *strmap_find(const tk_strmap *m, const char *s, size_t n, uint64_t h) {
  if (!m->nslots) return NULL;
  size_t j = h & (m->nslots - 1);
  for (;;) {
    uint32_t e = m->slots[j];
    if (!e) return &m->slots[j];
    const struct tk_strent *x = &m->ents[e - 1];
    if (x->hash == h && x->len == n && !memcmp(m->arena.data + x->off, s, n)) return &m->slots[j];
    j = (j + 1) & (m->nslots - 1);
  }
}

lh_status tk_strmap_put(tk_strmap *m, const char *s, size_t n, int32_t val) {
  if (n > UINT32_MAX || m->arena.len > UINT32_MAX - n) return LH_ENOMEM;
  uint64_t h = tk_hash(s, n);
  if ((m->nents + 1) * 2 > m->nslots && strmap_grow(m)) return LH_ENOMEM;
  uint32_t *slot = strmap_find(m, s, n, h);
  if (*slot) {
    m->ents[*slot - 1].val = val;
    return LH_OK;
  }
  if (m->nents == m->cap) {
    size_t nc = m->cap ? m->cap * 2 : 64;
    void *p = realloc(m->ents, nc * sizeof *m->ents);
    if (!p) return LH_ENOMEM;
    m->ents = p;
    m->cap = nc;
  }
  uint32_t off = (uint32_t)m->arena.len;
  if (lh_buf_append(&m->arena, s, n) || lh_buf_append(&m->arena, "", 1)) return LH_ENOMEM;
  m->ents[m->nents] = (struct tk_strent){h, off, (uint32_t)n, val};
  m->nents++;
  *slot = (uint32_t)m->nents;
  return LH_OK;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n) {
  uint32_t *slot = strmap_find(m, s, n, tk_hash(s, n));
  return slot && *slot ? m->ents[*slot - 1].val : -1;
}

void tk_strmap_free(tk_strmap *m) {
  free(m->slots);
  free(m->ents);
  lh_buf_free(&m->arena);
  memset(m, 0, sizeof *m);
}

/* --------------------------------------------------------------------- the GPT-2 alphabet */

const uint16_t tk_byte_char[256] = {
    /* bytes 0..32 map to 256..288, 33..126 to themselves, 127..160 to 289..322, 161..172 to
     * themselves, 173 to 323, 174..255 to themselves */
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274, 275, 276, 277,
    278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44,
    45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69,
    70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94,
    95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116,
    117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299,
    300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320,
    321, 322, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 323, 174, 175, 176, 177, 178, 179,
    180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200,
    201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221,
    222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242,
    243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int tk_char_byte(uint32_t c) {
  if (c >= 324) return -1;
  if ((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255)) return (int)c;
  if (c < 256) return -1;
  /* 256 + n in the order bytes 0..32, 127..160, 173 */
  uint32_t n = c - 256;
  if (n <= 32) return (int)n;
  if (n <= 32 + 34) return (int)(127 + n - 33);
  return 173;
}

/* ------------------------------------------------------------------------------ loading */

static lh_status merges_put(tk_bpe *b, int32_t x, int32_t y, uint32_t rank, int32_t id) {
  uint64_t key = ((uint64_t)(uint32_t)x << 32) | (uint32_t)y;
  size_t j = (size_t)(tk_hash(&key, 8) & b->merge_mask);
  while (b->merges[j].key != UINT64_MAX && b->merges[j].key != key) j = (j + 1) & b->merge_mask;
  b->merges[j].key = key; /* a repeated pair takes the later rank, as HF's HashMap collect does */
  b->merges[j].rank = rank;
  b->merges[j].id = id;
  return LH_OK;
}

static inline const tk_merge *merges_get(const tk_bpe *b, int32_t x, int32_t y) {
  uint64_t key = ((uint64_t)(uint32_t)x << 32) | (uint32_t)y;
  size_t j = (size_t)(tk_hash(&key, 8) & b->merge_mask);
  for (;;) {
    const tk_merge *m = &b->merges[j];
    if (m->key == key) return m;
    if (m->key == UINT64_MAX) return NULL;
    j = (j + 1) & b->merge_mask;
  }
}

static bool json_bool(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsTrue(v);
}

static lh_status json_opt_str(const cJSON *o, const char *k, char **out, lh_error *err) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  *out = NULL;
  if (!v || cJSON_IsNull(v)) return LH_OK;
  if (!cJSON_IsString(v)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: model.%s is not a string", k);
  *out = strdup(v->valuestring);
  return *out ? LH_OK : lh_error_set(err, LH_ENOMEM, "out of memory");
}

lh_status tk_bpe_load(tk_bpe *b, const void *json_model, lh_error *err) {
  const cJSON *m = json_model;
  memset(b, 0, sizeof *b);
  b->unk_id = -1;
  const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
  if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE")))
    return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: model type %s is not supported (only BPE)",
                        cJSON_IsString(type) ? type->valuestring : "(not a string)");
  const cJSON *drop = cJSON_GetObjectItemCaseSensitive(m, "dropout");
  if (drop && !cJSON_IsNull(drop)) {
    if (!cJSON_IsNumber(drop)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: model.dropout is not a number");
    if (drop->valuedouble < 0 || drop->valuedouble > 1)
      return lh_error_set(err, LH_EFORMAT, "tokenizer.json: model.dropout %g is outside [0, 1]", drop->valuedouble);
    if (drop->valuedouble != 0)
      return lh_error_set(err, LH_EUNSUPPORTED,
                          "tokenizer.json: BPE dropout %g is not supported (it makes encoding random)",
                          drop->valuedouble);
  }
  lh_status st;
  if ((st = json_opt_str(m, "unk_token", &b->unk_token, err)) ||
      (st = json_opt_str(m, "continuing_subword_prefix", &b->prefix, err)) ||
      (st = json_opt_str(m, "end_of_word_suffix", &b->suffix, err)))
    return st;
  b->prefix_len = b->prefix ? strlen(b->prefix) : 0;
  b->suffix_len = b->suffix ? strlen(b->suffix) : 0;
  b->fuse_unk = json_bool(m, "fuse_unk");
  b->byte_fallback = json_bool(m, "byte_fallback");
  b->ignore_merges = json_bool(m, "ignore_merges");

  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
    return lh_error_set(err, LH_EFORMAT, "tokenizer.json: model needs a \"vocab\" object and a \"merges\" array");
  b->max_id = -1;
  for (const cJSON *e = vocab->child; e; e = e->next) {
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX - 1 ||
        e->valuedouble != (double)(int32_t)e->valuedouble)
      return lh_error_set(err, LH_EFORMAT, "tokenizer.json: vocab entry \"%s\" has no valid id", e->string);
    int32_t id = (int32_t)e->valuedouble;
    if (tk_strmap_put(&b->vocab, e->string, strlen(e->string), id)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  /* a token given twice keeps its last id, as in HF's vocabulary map: the id it had first is no
   * id of the model unless another token has it */
  for (size_t i = 0; i < b->vocab.nents; i++) {
    const struct tk_strent *x = &b->vocab.ents[i];
    if (x->val > TK_MAX_ID) /* before the id tables below are sized by it */
      return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: vocab entry \"%.80s\" has id %d (ids up to 2^26 are "
                          "supported)", b->vocab.arena.data + x->off, x->val);
    if (x->val > b->max_id) b->max_id = x->val;
  }
  size_t nids = (size_t)b->max_id + 1;
  b->id_off = malloc((nids ? nids : 1) * sizeof *b->id_off);
  b->id_len = malloc((nids ? nids : 1) * sizeof *b->id_len);
  if (!b->id_off || !b->id_len) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (size_t i = 0; i < nids; i++) b->id_len[i] = UINT32_MAX;
  size_t maxlen = 0;
  for (size_t i = 0; i < b->vocab.nents; i++) {
    const struct tk_strent *x = &b->vocab.ents[i];
    if (x->val < 0) continue; /* a duplicate key whose later value won */
    if (tk_strmap_get(&b->vocab, b->vocab.arena.data + x->off, x->len) != x->val) continue;
    if (b->id_len[x->val] != UINT32_MAX)
      return lh_error_set(err, LH_EUNSUPPORTED,
                          "tokenizer.json: vocab id %d is given to two tokens (\"%s\" and \"%s\")", x->val,
                          b->vocab.arena.data + b->id_off[x->val], b->vocab.arena.data + x->off);
    b->id_off[x->val] = x->off;
    b->id_len[x->val] = x->len;
    if (x->len > maxlen) maxlen = x->len;
  }
  if (b->unk_token) b->unk_id = tk_strmap_get(&b->vocab, b->unk_token, strlen(b->unk_token));

  size_t nm = (size_t)cJSON_GetArraySize(merges);
  size_t cap = 16;
  while (cap < nm * 2 + 16) cap *= 2;
  b->merges = malloc(cap * sizeof *b->merges);
  if (!b->merges) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (size_t i = 0; i < cap; i++) b->merges[i].key = UINT64_MAX;
  b->merge_mask = cap - 1;
  uint32_t rank = 0;
  int form = -1; /* 0: "a b" strings, 1: ["a", "b"] pairs; HF requires one form throughout */
  char *buf = malloc(maxlen + 1);
  if (!buf) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (const cJSON *e = merges->child; e; e = e->next) {
    const char *a, *bb;
    size_t al, bl;
    if (cJSON_IsString(e)) {
      if (form == 1) goto mixed;
      form = 0;
      if (!strncmp(e->valuestring, "#version", 8)) continue;
      const char *sp = strchr(e->valuestring, ' ');
      if (!sp || strchr(sp + 1, ' ')) {
        free(buf);
        return lh_error_set(err, LH_EFORMAT, "tokenizer.json: merge %u (\"%s\") is not two tokens separated by one space",
                            rank + 1, e->valuestring);
      }
      a = e->valuestring;
      al = (size_t)(sp - a);
      bb = sp + 1;
      bl = strlen(bb);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
               cJSON_IsString(e->child->next)) {
      if (form == 0) goto mixed;
      form = 1;
      a = e->child->valuestring;
      al = strlen(a);
      bb = e->child->next->valuestring;
      bl = strlen(bb);
    } else {
      free(buf);
      return lh_error_set(err, LH_EFORMAT, "tokenizer.json: merge %u is neither \"a b\" nor [\"a\", \"b\"]", rank + 1);
    }
    int32_t ia = tk_strmap_get(&b->vocab, a, al), ib = tk_strmap_get(&b->vocab, bb, bl);
    if (ia < 0 || ib < 0) {
      lh_status s = lh_error_set(err, LH_EFORMAT, "tokenizer.json: merge %u uses \"%.*s\", which is not in the vocab",
                                 rank + 1, (int)(ia < 0 ? al : bl), ia < 0 ? a : bb);
      free(buf);
      return s;
    }
    if (bl < b->prefix_len || al + bl - b->prefix_len > maxlen) goto notin;
    memcpy(buf, a, al);
    memcpy(buf + al, bb + b->prefix_len, bl - b->prefix_len);
    int32_t in = tk_strmap_get(&b->vocab, buf, al + bl - b->prefix_len);
    if (in < 0) goto notin;
    merges_put(b, ia, ib, rank, in);
    rank++;
    continue;
  notin: {
    lh_status s = lh_error_set(err, LH_EFORMAT, "tokenizer.json: merge %u (\"%.*s\" + \"%.*s\") makes a token not in the vocab",
                               rank + 1, (int)al, a, (int)bl, bb);
    free(buf);
    return s;
  }
  }
  free(buf);
  /* byte-level fast path */
  b->byte_fast = !b->prefix && !b->suffix;
  for (int x = 0; x < 256; x++) {
    char s[4];
    int l = tk_utf8_put(tk_byte_char[x], s);
    b->byte_id[x] = tk_strmap_get(&b->vocab, s, (size_t)l);
    if (b->byte_id[x] < 0) b->byte_fast = false;
    char fb[8];
    snprintf(fb, sizeof fb, "<0x%02X>", x);
    b->fallback_id[x] = tk_strmap_get(&b->vocab, fb, 6);
  }
  return LH_OK;
mixed:
  free(buf);
  return lh_error_set(err, LH_EFORMAT, "tokenizer.json: merge %u is %s but merge 1 is %s; the merges must all have one "
                      "form", rank + 1, form ? "\"a b\"" : "[\"a\", \"b\"]", form ? "[\"a\", \"b\"]" : "\"a b\"");
}

void tk_bpe_free(tk_bpe *b) {
  if (!b) return;
  tk_strmap_free(&b->vocab);
  free(b->id_off);
  free(b->id_len);
  free(b->merges);
  free(b->unk_token);
  free(b->prefix);
  free(b->suffix);
  memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------------------------ merging */

/* a == b for n <= TK_CKEY bytes, a being a zero-padded inline key */
static inline bool short_eq(const uint8_t *a, const uint8_t *b, size_t n) {
  if (n >= 8) return tk_load8_(a) == tk_load8_(b) && tk_load8_(a + n - 8) == tk_load8_(b + n - 8);
  if (n >= 4) return tk_load4_(a) == tk_load4_(b) && tk_load4_(a + n - 4) == tk_load4_(b + n - 4);
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return false;
  return true;
}

#define CACHE_SLOTS TK_CACHE_SLOTS
#define CACHE_MAX_ENTRIES (CACHE_SLOTS / 2)
#define CACHE_MAX_KEY TK_CACHE_MAX_KEY

void tk_bpe_scratch_free(tk_bpe_scratch *s) {
  free(s->syms);
  free(s->heap);
  free(s->cache);
  lh_buf_free(&s->cache_keys);
  lh_i32vec_free(&s->cache_ids);
  memset(s, 0, sizeof *s);
}

static inline bool heap_less(const struct tk_heapent *a, const struct tk_heapent *b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(struct tk_heapent *h, size_t *n, struct tk_heapent e) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!heap_less(&e, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = e;
}

static struct tk_heapent heap_pop(struct tk_heapent *h, size_t *n) {
  struct tk_heapent top = h[0], last = h[--(*n)];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1;
    if (l >= *n) break;
    size_t c = l + 1 < *n && heap_less(&h[l + 1], &h[l]) ? l + 1 : l;
    if (!heap_less(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

static lh_status ensure_syms(tk_bpe_scratch *sc, size_t n) {
  if (n <= sc->syms_cap) return LH_OK;
  size_t nc = sc->syms_cap ? sc->syms_cap : 64;
  while (nc < n) nc *= 2;
  void *p = realloc(sc->syms, nc * sizeof *sc->syms);
  if (!p) return LH_ENOMEM;
  sc->syms = p;
  sc->syms_cap = nc;
  /* a pair per symbol plus the pairs merging creates: at most 2n heap entries live */
  void *q = realloc(sc->heap, 3 * nc * sizeof *sc->heap);
  if (!q) return LH_ENOMEM;
  sc->heap = q;
  sc->heap_cap = 3 * nc;
  return LH_OK;
}

static inline void sym_add(tk_bpe_scratch *sc, size_t *n, int32_t id, uint32_t len) {
  struct tk_sym *s = &sc->syms[*n];
  s->id = id;
  s->len = len;
  s->prev = *n ? (int32_t)(*n - 1) : -1;
  s->next = -1;
  if (*n) sc->syms[*n - 1].next = (int32_t)*n;
  (*n)++;
}

static void merge_all(const tk_bpe *b, tk_bpe_scratch *sc, size_t n) {
  struct tk_sym *sy = sc->syms;
  struct tk_heapent *h = sc->heap;
  size_t hn = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    const tk_merge *m = merges_get(b, sy[i].id, sy[i + 1].id);
    if (m) heap_push(h, &hn, (struct tk_heapent){m->rank, (uint32_t)i, m->id});
  }
  while (hn) {
    struct tk_heapent top = heap_pop(h, &hn);
    struct tk_sym *cur = &sy[top.pos];
    if (cur->len == 0 || cur->next < 0) continue;
    int32_t np = cur->next;
    struct tk_sym right = sy[np];
    const tk_merge *m = merges_get(b, cur->id, right.id);
    if (!m || m->id != top.id) continue;
    cur->id = top.id;
    cur->len += right.len;
    cur->next = right.next;
    sy[np].len = 0;
    if (right.next >= 0 && (size_t)right.next < n) sy[right.next].prev = (int32_t)top.pos;
    if (cur->prev >= 0) {
      const tk_merge *pm = merges_get(b, sy[cur->prev].id, cur->id);
      if (pm) heap_push(h, &hn, (struct tk_heapent){pm->rank, (uint32_t)cur->prev, pm->id});
    }
    if (cur->next >= 0 && (size_t)cur->next < n) {
      const tk_merge *nm = merges_get(b, cur->id, sy[cur->next].id);
      if (nm) heap_push(h, &hn, (struct tk_heapent){nm->rank, top.pos, nm->id});
    }
  }
}

/* Build the symbols of a general (not byte-mapped) word as HF's merge_word does. */
static lh_status word_symbols(const tk_bpe *b, tk_bpe_scratch *sc, const uint8_t *s, size_t n, size_t *nsym) {
  char stackbuf[64];
  size_t need = b->prefix_len + b->suffix_len + 4;
  char *tmp = need <= sizeof stackbuf ? stackbuf : malloc(need);
  if (!tmp) return LH_ENOMEM;
  /* worst case: every byte of every character becomes a byte-fallback symbol */
  lh_status st = ensure_syms(sc, n * (need > 4 ? need : 4) + 1);
  if (st) goto out;
  size_t k = 0;
  bool have_unk = false;
  int32_t unk_id = 0;
  uint32_t unk_len = 0;
  for (size_t i = 0; i < n;) {
    size_t cl = tk_utf8_len(s[i]);
    if (i + cl > n) cl = n - i;
    size_t tl = 0;
    if (i > 0 && b->prefix) memcpy(tmp, b->prefix, b->prefix_len), tl = b->prefix_len;
    memcpy(tmp + tl, s + i, cl);
    tl += cl;
    if (i + cl == n && b->suffix) memcpy(tmp + tl, b->suffix, b->suffix_len), tl += b->suffix_len;
    int32_t id = tk_strmap_get(&b->vocab, tmp, tl);
    if (id >= 0) {
      if (have_unk) sym_add(sc, &k, unk_id, unk_len), have_unk = false;
      sym_add(sc, &k, id, (uint32_t)cl);
    } else {
      bool done = false;
      if (b->byte_fallback) {
        bool all = true;
        for (size_t q = 0; q < tl; q++) all &= b->fallback_id[(uint8_t)tmp[q]] >= 0;
        if (all) {
          for (size_t q = 0; q < tl; q++) sym_add(sc, &k, b->fallback_id[(uint8_t)tmp[q]], 1);
          done = true;
        }
      }
      if (!done && b->unk_token) {
        if (b->unk_id < 0) {
          st = LH_EFORMAT;
          goto out;
        }
        if (have_unk && b->fuse_unk) {
          unk_len += (uint32_t)cl;
        } else {
          if (have_unk) sym_add(sc, &k, unk_id, unk_len);
          have_unk = true;
          unk_id = b->unk_id;
          unk_len = (uint32_t)cl;
        }
      }
    }
    i += cl;
  }
  if (have_unk) sym_add(sc, &k, unk_id, unk_len);
  *nsym = k;
out:
  if (tmp != stackbuf) free(tmp);
  return st;
}

/* Room for k more ids in out (and om). */
static inline lh_status room(lh_i32vec *out, tk_offmap *om, size_t k) {
  if (out->cap - out->len < k && lh_i32vec_reserve(out, k)) return LH_ENOMEM;
  if (om && om->cap - om->n < k) {
    size_t nc = om->cap ? om->cap : 1024;
    while (nc - om->n < k) nc *= 2;
    void *p = realloc(om->v, nc * sizeof *om->v);
    if (!p) return LH_ENOMEM;
    om->v = p;
    om->cap = nc;
  }
  return LH_OK;
}

/* Stream offset of the id at byte pos of the pre-token. */
static inline int64_t om_at(const tk_offmap *om, uint32_t pos) {
  if (!om->linear) return om->raw;
  return om->raw + (pos > om->shift ? (int64_t)(pos - om->shift) : 0);
}

static lh_status emit_syms(tk_bpe_scratch *sc, size_t n, lh_i32vec *out, tk_offmap *om) {
  if (room(out, om, n)) return LH_ENOMEM;
  uint32_t pos = 0;
  for (size_t i = 0; i < n; i = sc->syms[i].next < 0 ? n : (size_t)sc->syms[i].next) {
    out->data[out->len++] = sc->syms[i].id;
    if (om) om->v[om->n++] = om_at(om, pos);
    pos += sc->syms[i].len;
  }
  return LH_OK;
}

lh_status tk_bpe_word(const tk_bpe *b, tk_bpe_scratch *sc, const uint8_t *s, size_t n, bool mapped, lh_i32vec *out,
                      tk_offmap *om) {
  if (!n) return LH_OK;
  char mbuf[CACHE_MAX_KEY * 2];
  char *ms = NULL;
  size_t mn = 0;
  if (mapped && (!b->byte_fast || b->ignore_merges)) {
    /* the model needs the ByteLevel string itself */
    ms = n * 2 <= sizeof mbuf ? mbuf : malloc(n * 2);
    if (!ms) return LH_ENOMEM;
    for (size_t i = 0; i < n; i++) mn += (size_t)tk_utf8_put(tk_byte_char[s[i]], ms + mn);
  }
  lh_status st = LH_OK;
  if (b->ignore_merges) {
    const char *w = ms ? ms : (const char *)s;
    size_t wl = ms ? mn : n;
    int32_t id = tk_strmap_get(&b->vocab, w, wl);
    if (id >= 0) {
      if ((st = room(out, om, 1))) goto done;
      out->data[out->len++] = id;
      if (om) om->v[om->n++] = om_at(om, 0);
      goto done;
    }
  }
  if (mapped && !b->byte_fast) { /* general path over the mapped string */
    s = (const uint8_t *)ms;
    n = mn;
    mapped = false;
  }
  /* cache */
  uint32_t h = 0;
  bool cacheable = n < CACHE_MAX_KEY;
  if (cacheable) {
    /* the prefetched pre-token's hash (a stale one could only cost a miss: keys are compared) */
    h = mapped && s == sc->pf_s && n == sc->pf_n ? sc->pf_h : tk_cache_hash(s, n, mapped);
    sc->pf_s = NULL;
    if (!sc->cache) {
      sc->cache = calloc(CACHE_SLOTS, sizeof *sc->cache);
      if (!sc->cache) cacheable = false;
    }
  }
  size_t slot = 0;
  if (cacheable) {
    slot = h & (CACHE_SLOTS - 1);
    for (;;) {
      struct tk_cent *e = &sc->cache[slot];
      if (!e->hash) break;
      if (e->hash == h && e->key_len == n &&
          (e->ext ? !memcmp(sc->cache_keys.data + e->u.far.key_off, s, n) : short_eq(e->u.key, s, n))) {
        if (room(out, om, e->nids)) {
          st = LH_ENOMEM;
          goto done;
        }
        if (!e->ext) {
          for (uint32_t i = 0; i < e->nids; i++) out->data[out->len + i] = e->ids[i];
          out->len += e->nids;
          if (om) {
            int64_t *o = om->v + om->n;
            if (om->linear && !om->shift) {
              int64_t r = om->raw;
              for (uint32_t i = 0; i < e->nids; i++) o[i] = r, r += e->lens[i];
            } else {
              uint32_t pos = 0;
              for (uint32_t i = 0; i < e->nids; i++) o[i] = om_at(om, pos), pos += e->lens[i];
            }
            om->n += e->nids;
          }
        } else {
          const int32_t *p = sc->cache_ids.data + e->u.far.ids_off;
          uint32_t pos = 0;
          for (uint32_t i = 0; i < e->nids; i++) {
            out->data[out->len++] = p[2 * i];
            if (om) om->v[om->n++] = om_at(om, pos);
            pos += (uint32_t)p[2 * i + 1];
          }
        }
        goto done;
      }
      slot = (slot + 1) & (CACHE_SLOTS - 1);
    }
  }
  size_t ns = 0;
  if (mapped) {
    if ((st = ensure_syms(sc, n))) goto done;
    for (size_t i = 0; i < n; i++) sym_add(sc, &ns, b->byte_id[s[i]], 1);
  } else if ((st = word_symbols(b, sc, s, n, &ns))) {
    goto done;
  }
  merge_all(b, sc, ns);
  if (!ns) goto done;
  size_t before = out->len;
  if ((st = emit_syms(sc, ns, out, om))) goto done;
  if (cacheable) {
    if (sc->cache_used >= CACHE_MAX_ENTRIES || sc->cache_keys.len > (4u << 20)) {
      memset(sc->cache, 0, CACHE_SLOTS * sizeof *sc->cache);
      sc->cache_used = 0;
      lh_buf_clear(&sc->cache_keys);
      sc->cache_ids.len = 0;
      slot = h & (CACHE_SLOTS - 1);
    }
    size_t nids = out->len - before;
    struct tk_cent *e = &sc->cache[slot];
    bool inl = n <= TK_CKEY && nids <= TK_CIDS;
    if (inl) {
      memcpy(e->u.key, s, n);
      memcpy(e->ids, out->data + before, nids * sizeof *e->ids);
      /* symbol lengths of a key of at most TK_CKEY bytes fit a byte */
      for (size_t i = 0, k = 0; i < ns && k < nids; i = sc->syms[i].next < 0 ? ns : (size_t)sc->syms[i].next, k++)
        e->lens[k] = (uint8_t)sc->syms[i].len;
      e->ext = 0;
    } else {
      size_t key_off = sc->cache_keys.len, ids_off = sc->cache_ids.len;
      if (lh_buf_append(&sc->cache_keys, s, n) || lh_i32vec_reserve(&sc->cache_ids, 2 * nids)) goto done;
      for (size_t i = 0; i < ns; i = sc->syms[i].next < 0 ? ns : (size_t)sc->syms[i].next) {
        sc->cache_ids.data[sc->cache_ids.len++] = sc->syms[i].id;
        sc->cache_ids.data[sc->cache_ids.len++] = (int32_t)sc->syms[i].len;
      }
      e->u.far.key_off = (uint32_t)key_off;
      e->u.far.ids_off = (uint32_t)ids_off;
      e->ext = 1;
    }
    e->key_len = (uint32_t)n;
    e->nids = (uint32_t)nids;
    e->hash = h;
    sc->cache_used++;
  }
done:
  if (ms && ms != mbuf) free(ms);
  return st;
}
