/* tokenizer.c — loading a HF tokenizer.json and the encode/decode entry points of tokenizer.h.
 *
 * Loading mirrors HF's deserialization: the model is built first, then added_tokens are added in
 * file order with AddedVocabulary::add_tokens, which IGNORES the "id" field: a token takes the
 * model's id for its content if there is one, else the next free id after the model vocabulary
 * (model size, then +1 per new token). A normalized added token is matched by its normalized
 * form, which is also what decode prints for it. Everything a tokenizer.json can say that this
 * file does not reproduce is refused with LH_EUNSUPPORTED naming the feature (truncation, fixed
 * padding, other models, normalizers, pre-tokenizers, processors, decoders, BPE dropout).
 *
 * Invariants: an lh_tokenizer is immutable after lh_tokenizer_open returns, except its pool of
 * per-thread scratch contexts, which a mutex guards; so any number of threads can encode and
 * decode at once. Library code: no printing, no exit.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"

/* The largest tokenizer.json read. Parsing one takes 20-40 times its size in memory (cJSON's tree:
 * about 23x for a real file's shape, 40x for one made of nothing but small numbers), so the limit is
 * what bounds the memory a hostile file can make a load take: 128 MiB is about 3 GiB, 5 at worst.
 * Real files are 10-35 MB (MiniMax-Text-01 10, Gemma 3's 262K vocabulary 33), so it leaves room
 * for a vocabulary four times Gemma's, pretty-printed. */
#define TOKENIZER_MAX_BYTES ((size_t)128 << 20)

#define GPT2_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* ---------------------------------------------------------------------------- contexts */

tk_ctx *tk_ctx_get(const lh_tokenizer *t, lh_error *err) {
  lh_tokenizer *m = (lh_tokenizer *)t; /* the pool is the one mutable part */
  pthread_mutex_lock(&m->pool_mu);
  tk_ctx *c = m->pool;
  if (c) m->pool = c->next;
  pthread_mutex_unlock(&m->pool_mu);
  if (c) return c;
  c = calloc(1, sizeof *c);
  if (!c) goto oom;
  c->md = pcre2_match_data_create(1, NULL);
  c->mc = pcre2_match_context_create(NULL);
  c->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
  if (!c->md || !c->mc || !c->jit) goto oom;
  pcre2_jit_stack_assign(c->mc, NULL, c->jit);
  return c;
oom:
  tk_ctx_free(c);
  lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  return NULL;
}

void tk_ctx_put(const lh_tokenizer *t, tk_ctx *c) {
  if (!c) return;
  lh_tokenizer *m = (lh_tokenizer *)t;
  c->ids = NULL;
  c->seg = NULL;
  pthread_mutex_lock(&m->pool_mu);
  c->next = m->pool;
  m->pool = c;
  pthread_mutex_unlock(&m->pool_mu);
}

void tk_ctx_free(tk_ctx *c) {
  if (!c) return;
  pcre2_match_data_free(c->md);
  pcre2_match_context_free(c->mc);
  pcre2_jit_stack_free(c->jit);
  tk_bpe_scratch_free(&c->bpe);
  lh_buf_free(&c->norm);
  lh_buf_free(&c->work);
  lh_buf_free(&c->tmp);
  lh_buf_free(&c->tmp2);
  free(c->anc);
  free(c->spans);
  free(c->spans2);
  for (int k = 0; k < TK_MAX_STEPS; k++) free(c->lv[k]);
  free(c->offv);
  free(c->rs);
  free(c);
}

/* ------------------------------------------------------------------------------ parsing */

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *k, bool dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  if (cJSON_IsTrue(v)) return true;
  if (cJSON_IsFalse(v)) return false;
  return dflt;
}

/* A {"String": s} or {"Regex": r} pattern. */
static lh_status parse_pattern(const cJSON *o, tk_regex *re, const char *where, lh_error *err) {
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
  const char *s = jstr(p, "String"), *r = jstr(p, "Regex");
  if (!s && !r) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: %s needs a pattern {\"String\"|\"Regex\": ...}", where);
  return tk_regex_compile(re, s ? s : r, strlen(s ? s : r), s != NULL, where, err);
}

static lh_status parse_normalizer(lh_tokenizer *t, const cJSON *n, lh_error *err) {
  if (!n || cJSON_IsNull(n)) return LH_OK;
  const char *type = jstr(n, "type");
  if (!type) return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: a normalizer without \"type\" is not supported");
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
    if (!cJSON_IsArray(list)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: normalizer Sequence without a list");
    for (const cJSON *e = list->child; e; e = e->next) {
      lh_status st = parse_normalizer(t, e, err);
      if (st) return st;
    }
    return LH_OK;
  }
  tk_norm nm = {0};
  if (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) {
    nm.kind = TK_N_FORM;
    nm.form = !strcmp(type, "NFC") ? TK_NFC : !strcmp(type, "NFD") ? TK_NFD : !strcmp(type, "NFKC") ? TK_NFKC : TK_NFKD;
  } else if (!strcmp(type, "Lowercase")) {
    nm.kind = TK_N_LOWER;
  } else if (!strcmp(type, "Replace")) {
    nm.kind = TK_N_REPLACE;
    const char *content = jstr(n, "content");
    if (!content) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: normalizer Replace without \"content\"");
    lh_status st = parse_pattern(n, &nm.re, "tokenizer.json normalizer Replace", err);
    if (st) return st;
    nm.text = strdup(content);
    nm.text_len = strlen(content);
  } else if (!strcmp(type, "Prepend")) {
    nm.kind = TK_N_PREPEND;
    const char *pre = jstr(n, "prepend");
    if (!pre) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: normalizer Prepend without \"prepend\"");
    nm.text = strdup(pre);
    nm.text_len = strlen(pre);
  } else {
    return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: normalizer %s is not supported", type);
  }
  if ((nm.kind == TK_N_REPLACE || nm.kind == TK_N_PREPEND) && !nm.text) {
    tk_regex_free(&nm.re);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  void *p = realloc(t->norms, (t->nnorms + 1) * sizeof *t->norms);
  if (!p) {
    tk_regex_free(&nm.re);
    free(nm.text);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  t->norms = p;
  t->norms[t->nnorms++] = nm;
  return LH_OK;
}

static lh_status parse_pretok(lh_tokenizer *t, const cJSON *n, lh_error *err) {
  if (!n || cJSON_IsNull(n)) return LH_OK;
  const char *type = jstr(n, "type");
  if (!type) return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: a pre_tokenizer without \"type\" is not supported");
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers");
    if (!cJSON_IsArray(list)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: pre_tokenizer Sequence without a list");
    for (const cJSON *e = list->child; e; e = e->next) {
      lh_status st = parse_pretok(t, e, err);
      if (st) return st;
    }
    return LH_OK;
  }
  if (t->npres >= TK_MAX_STEPS)
    return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: more than %d pre-tokenizer steps", TK_MAX_STEPS);
  tk_pre p = {0};
  lh_status st = LH_OK;
  if (!strcmp(type, "ByteLevel")) {
    p.kind = TK_P_BYTELEVEL;
    p.add_prefix_space = jbool(n, "add_prefix_space", true);
    p.use_regex = jbool(n, "use_regex", true);
    if (p.use_regex) st = tk_regex_compile(&p.re, GPT2_PATTERN, strlen(GPT2_PATTERN), false, "ByteLevel regex", err);
  } else if (!strcmp(type, "Split")) {
    p.kind = TK_P_SPLIT;
    const char *b = jstr(n, "behavior");
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    int bi = -1;
    for (int k = 0; b && k < 5; k++)
      if (!strcmp(b, names[k])) bi = k;
    if (bi < 0)
      return lh_error_set(err, b ? LH_EUNSUPPORTED : LH_EFORMAT, "tokenizer.json: Split behavior %s is not supported",
                          b ? b : "(missing)");
    p.behavior = (tk_behavior)bi;
    p.invert = jbool(n, "invert", false);
    st = parse_pattern(n, &p.re, "tokenizer.json pre_tokenizer Split", err);
  } else if (!strcmp(type, "Digits")) {
    p.kind = TK_P_DIGITS;
    p.individual = jbool(n, "individual_digits", false);
  } else {
    return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: pre_tokenizer %s is not supported", type);
  }
  if (st) return st;
  t->pres[t->npres++] = p;
  return LH_OK;
}

static lh_status parse_template(lh_tokenizer *t, const cJSON *n, lh_error *err) {
  const cJSON *single = cJSON_GetObjectItemCaseSensitive(n, "single");
  const cJSON *specials = cJSON_GetObjectItemCaseSensitive(n, "special_tokens");
  if (!cJSON_IsArray(single) || !cJSON_IsObject(specials))
    return lh_error_set(err, LH_EFORMAT, "tokenizer.json: TemplateProcessing needs \"single\" and \"special_tokens\"");
  for (const cJSON *e = single->child; e; e = e->next) {
    tk_tpl pc = {0};
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
    const cJSON *sq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
    if (sq) {
      const char *id = jstr(sq, "id");
      if (!id || strcmp(id, "A"))
        return lh_error_set(err, LH_EUNSUPPORTED,
                            "tokenizer.json: TemplateProcessing single template uses sequence %s (only A exists)",
                            id ? id : "(missing)");
      pc.is_seq = true;
    } else if (sp) {
      const char *id = jstr(sp, "id");
      const cJSON *tok = id ? cJSON_GetObjectItemCaseSensitive(specials, id) : NULL;
      const cJSON *ids = cJSON_GetObjectItemCaseSensitive(tok, "ids");
      if (!cJSON_IsArray(ids))
        return lh_error_set(err, LH_EFORMAT, "tokenizer.json: TemplateProcessing uses special token %s, which is not defined",
                            id ? id : "(missing)");
      pc.nids = (size_t)cJSON_GetArraySize(ids);
      pc.ids = malloc((pc.nids ? pc.nids : 1) * sizeof *pc.ids);
      if (!pc.ids) return lh_error_set(err, LH_ENOMEM, "out of memory");
      size_t k = 0;
      for (const cJSON *x = ids->child; x; x = x->next) pc.ids[k++] = cJSON_IsNumber(x) ? (int32_t)x->valuedouble : -1;
    } else {
      return lh_error_set(err, LH_EFORMAT, "tokenizer.json: TemplateProcessing piece is neither SpecialToken nor Sequence");
    }
    void *p = realloc(t->tpl, (t->ntpl + 1) * sizeof *t->tpl);
    if (!p) {
      free(pc.ids);
      return lh_error_set(err, LH_ENOMEM, "out of memory");
    }
    t->tpl = p;
    t->tpl[t->ntpl++] = pc;
  }
  /* templates apply in turn; a marker piece separates successive templates */
  tk_tpl end = {.is_seq = false, .ids = NULL, .nids = SIZE_MAX};
  void *p = realloc(t->tpl, (t->ntpl + 1) * sizeof *t->tpl);
  if (!p) return lh_error_set(err, LH_ENOMEM, "out of memory");
  t->tpl = p;
  t->tpl[t->ntpl++] = end;
  t->has_template = true;
  return LH_OK;
}

static lh_status parse_post(lh_tokenizer *t, const cJSON *n, lh_error *err) {
  if (!n || cJSON_IsNull(n)) return LH_OK;
  const char *type = jstr(n, "type");
  if (!type) return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: a post_processor without \"type\" is not supported");
  if (!strcmp(type, "ByteLevel")) return LH_OK; /* only trims offsets; ids are unchanged */
  if (!strcmp(type, "TemplateProcessing")) return parse_template(t, n, err);
  if (!strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "processors");
    if (!cJSON_IsArray(list)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: post_processor Sequence without a list");
    for (const cJSON *e = list->child; e; e = e->next) {
      lh_status st = parse_post(t, e, err);
      if (st) return st;
    }
    return LH_OK;
  }
  return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: post_processor %s is not supported", type);
}

static lh_status parse_decoder(lh_tokenizer *t, const cJSON *n, lh_error *err) {
  if (!n || cJSON_IsNull(n)) return LH_OK;
  const char *type = jstr(n, "type");
  if (type && !strcmp(type, "Sequence")) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "decoders");
    if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) return parse_decoder(t, list->child, err);
    return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: decoder Sequence is supported only as [ByteLevel]");
  }
  if (type && !strcmp(type, "ByteLevel")) {
    t->has_decoder = true;
    t->decoder_bytelevel = true;
    return LH_OK;
  }
  return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: decoder %s is not supported", type ? type : "(untyped)");
}

/* ----------------------------------------------------------------------------- added tokens */

typedef struct pat {
  const char *s;
  size_t n;
  int32_t idx;
} pat;

static int pat_cmp(const void *x, const void *y) {
  const pat *a = x, *b = y;
  size_t m = a->n < b->n ? a->n : b->n;
  int c = memcmp(a->s, b->s, m);
  return c ? c : (a->n > b->n) - (a->n < b->n);
}

static lh_status trie_build(tk_trie *tr, pat *ps, size_t n, const tk_added *added, const char *what, lh_error *err) {
  memset(tr, 0, sizeof *tr);
  if (!n) return LH_OK;
  qsort(ps, n, sizeof *ps, pat_cmp);
  size_t total = 1;
  for (size_t i = 0; i < n; i++) {
    if (!ps[i].n)
      return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: added token %d has an empty %s pattern",
                          added[ps[i].idx].id, what);
    if (i && ps[i].n == ps[i - 1].n && !memcmp(ps[i].s, ps[i - 1].s, ps[i].n))
      return lh_error_set(err, LH_EUNSUPPORTED, "tokenizer.json: added tokens %d and %d have the same %s pattern \"%.*s\"",
                          added[ps[i - 1].idx].id, added[ps[i].idx].id, what, (int)ps[i].n, ps[i].s);
    total += ps[i].n;
    if (ps[i].n > tr->maxlen) tr->maxlen = ps[i].n;
    tr->first[(uint8_t)ps[i].s[0]] = 1;
    const tk_added *a = &added[ps[i].idx];
    tr->any_lstrip |= a->lstrip;
    tr->any_rstrip |= a->rstrip;
    tr->any_single_word |= a->single_word;
  }
  tr->first_only = -1;
  for (int b = 0, k = 0; b < 256; b++)
    if (tr->first[b]) tr->first_only = k++ ? -1 : b;
  tr->first_edge = malloc(total * sizeof *tr->first_edge);
  tr->nedges = malloc(total * sizeof *tr->nedges);
  tr->term = malloc(total * sizeof *tr->term);
  tr->ebyte = malloc(total);
  tr->echild = malloc(total * sizeof *tr->echild);
  struct job {
    uint32_t node;
    size_t lo, hi, depth;
  } *q = malloc(total * sizeof *q);
  if (!tr->first_edge || !tr->nedges || !tr->term || !tr->ebyte || !tr->echild || !q) {
    free(q);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  size_t nn = 1, ne = 0, qh = 0, qt = 0;
  q[qt++] = (struct job){0, 0, n, 0};
  while (qh < qt) {
    struct job j = q[qh++];
    tr->term[j.node] = -1;
    size_t lo = j.lo;
    if (lo < j.hi && ps[lo].n == j.depth) tr->term[j.node] = ps[lo++].idx;
    tr->first_edge[j.node] = (uint32_t)ne;
    size_t ng = 0;
    for (size_t i = lo; i < j.hi;) {
      uint8_t b = (uint8_t)ps[i].s[j.depth];
      size_t k = i;
      while (k < j.hi && (uint8_t)ps[k].s[j.depth] == b) k++;
      ng++;
      i = k;
    }
    tr->nedges[j.node] = (uint16_t)ng;
    size_t e = ne;
    ne += ng;
    for (size_t i = lo; i < j.hi;) {
      uint8_t b = (uint8_t)ps[i].s[j.depth];
      size_t k = i;
      while (k < j.hi && (uint8_t)ps[k].s[j.depth] == b) k++;
      uint32_t child = (uint32_t)nn++;
      tr->ebyte[e] = b;
      tr->echild[e] = child;
      e++;
      q[qt++] = (struct job){child, i, k, j.depth + 1};
      i = k;
    }
  }
  free(q);
  tr->nnodes = nn;
  return LH_OK;
}

static void trie_free(tk_trie *tr) {
  free(tr->first_edge);
  free(tr->nedges);
  free(tr->term);
  free(tr->ebyte);
  free(tr->echild);
  memset(tr, 0, sizeof *tr);
}

static lh_status parse_added(lh_tokenizer *t, const cJSON *list, lh_error *err) {
  if (!list || cJSON_IsNull(list)) return LH_OK;
  if (!cJSON_IsArray(list)) return lh_error_set(err, LH_EFORMAT, "tokenizer.json: added_tokens is not an array");
  int32_t next_id = (int32_t)t->bpe.vocab.nents;
  tk_strmap by_id = {0}; /* id -> index into t->added */
  tk_ctx *c = NULL;
  lh_status st = LH_OK;
  size_t cap = 0, i = 0;
  for (const cJSON *e = list->child; e && !st; e = e->next, i++) {
    const char *content = jstr(e, "content");
    if (!content) {
      st = lh_error_set(err, LH_EFORMAT, "tokenizer.json: added_tokens[%zu] has no \"content\" string", i);
      break;
    }
    /* the id is not used (see the top of this file), but HF refuses a file without a valid one */
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(e, "id");
    if (!cJSON_IsNumber(given) || given->valuedouble < 0 || given->valuedouble > UINT32_MAX ||
        given->valuedouble != (double)(uint32_t)given->valuedouble) {
      st = lh_error_set(err, LH_EFORMAT, "tokenizer.json: added_tokens[%zu] (\"%.80s\") has no valid \"id\" (an "
                        "integer from 0 to 2^32 - 1)", i, content);
      break;
    }
    size_t len = strlen(content);
    if (!len) continue;
    tk_added tok = {.single_word = jbool(e, "single_word", false), .lstrip = jbool(e, "lstrip", false),
                    .rstrip = jbool(e, "rstrip", false), .normalized = jbool(e, "normalized", true),
                    .special = jbool(e, "special", false)};
    int32_t id = tk_strmap_get(&t->added_map, content, len);
    if (id >= 0) {
      int32_t k = tk_strmap_get(&by_id, (const char *)&id, sizeof id);
      const tk_added *o = &t->added[k];
      if (o->single_word == tok.single_word && o->lstrip == tok.lstrip && o->rstrip == tok.rstrip &&
          o->normalized == tok.normalized && o->special == tok.special)
        continue;
    } else {
      id = tk_strmap_get(&t->bpe.vocab, content, len);
      if (id < 0) id = next_id++;
    }
    char *normed = NULL;
    size_t normed_len = 0;
    if (tok.normalized && t->nnorms) {
      if (!c && !(c = tk_ctx_get(t, err))) {
        st = LH_ENOMEM;
        break;
      }
      if ((st = tk_normalize(t, c, (const uint8_t *)content, len, true, false, &c->norm, err))) break;
      if (c->norm.len != len || memcmp(c->norm.data, content, len)) {
        normed = malloc(c->norm.len + 1);
        if (!normed) {
          st = lh_error_set(err, LH_ENOMEM, "out of memory");
          break;
        }
        memcpy(normed, c->norm.data, c->norm.len + 1);
        normed_len = c->norm.len;
      }
    }
    if (tk_strmap_put(&t->added_map, content, len, id)) {
      free(normed);
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
      break;
    }
    if (tok.special && tk_strmap_put(&t->special, content, len, 1)) {
      free(normed);
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
      break;
    }
    int32_t k = tk_strmap_get(&by_id, (const char *)&id, sizeof id);
    if (k < 0) {
      if (t->nadded == cap) {
        cap = cap ? cap * 2 : 16;
        void *p = realloc(t->added, cap * sizeof *t->added);
        if (!p) {
          free(normed);
          st = lh_error_set(err, LH_ENOMEM, "out of memory");
          break;
        }
        t->added = p;
      }
      k = (int32_t)t->nadded++;
      memset(&t->added[k], 0, sizeof t->added[k]);
      if (tk_strmap_put(&by_id, (const char *)&id, sizeof id, k)) {
        free(normed);
        st = lh_error_set(err, LH_ENOMEM, "out of memory");
        break;
      }
    }
    tk_added *a = &t->added[k];
    free(a->content);
    a->content = strdup(content);
    a->len = len;
    if (normed) { /* the normalized form persists even if the token is added again differently */
      free(a->norm);
      a->norm = normed;
      a->norm_len = normed_len;
    }
    a->id = id;
    a->single_word = tok.single_word;
    a->lstrip = tok.lstrip;
    a->rstrip = tok.rstrip;
    a->normalized = tok.normalized;
    a->special = tok.special;
    if (!a->content) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  tk_ctx_free(c);
  tk_strmap_free(&by_id);
  if (st) return st;
  /* the two matching sets */
  pat *raw = malloc((t->nadded + 1) * sizeof *raw), *nrm = malloc((t->nadded + 1) * sizeof *nrm);
  if (!raw || !nrm) {
    free(raw);
    free(nrm);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  /* pass 0: every added token; pass 1: all but the special ones (document text) */
  for (int pass = 0; pass < 2 && !st; pass++) {
    size_t nr = 0, nn = 0;
    for (size_t k = 0; k < t->nadded; k++) {
      const tk_added *a = &t->added[k];
      if (pass == 1 && a->special) continue;
      if (a->normalized)
        nrm[nn++] = (pat){a->norm ? a->norm : a->content, a->norm ? a->norm_len : a->len, (int32_t)k};
      else
        raw[nr++] = (pat){a->content, a->len, (int32_t)k};
    }
    st = trie_build(pass ? &t->raw_trie_text : &t->raw_trie, raw, nr, t->added, "raw", err);
    if (!st) st = trie_build(pass ? &t->norm_trie_text : &t->norm_trie, nrm, nn, t->added, "normalized", err);
  }
  free(raw);
  free(nrm);
  return st;
}

/* ------------------------------------------------------------------------------ open/close */

static lh_status analyse(lh_tokenizer *t, lh_error *err) {
  /* the segmentable normalizer chains: [L] [F] [L F] [F L] [L F L] (repeated forms collapse) */
  bool seg = t->nnorms > 0;
  int form = -1, stage = 0; /* 0: before form, 1: after form */
  bool l1 = false, l2 = false;
  for (size_t k = 0; k < t->nnorms && seg; k++) {
    const tk_norm *n = &t->norms[k];
    if (n->kind == TK_N_FORM) {
      if (form >= 0 && (int)n->form == form && stage == 1 && !l2) continue;
      if (form >= 0) seg = false;
      form = (int)n->form;
      stage = 1;
    } else if (n->kind == TK_N_LOWER) {
      bool *l = stage ? &l2 : &l1;
      if (*l) seg = false;
      *l = true;
    } else {
      seg = false;
    }
    if (n->kind == TK_N_PREPEND) t->has_prepend = true;
  }
  for (size_t k = 0; k < t->nnorms; k++) t->has_prepend |= t->norms[k].kind == TK_N_PREPEND;
  t->norm_segmentable = seg;
  t->norm_form = seg ? form : -1;
  t->lower_first = seg && form >= 0 && l1;
  t->lower_after = seg && (l2 || (form < 0 && l1));
  bool need_unicode = false;
  for (size_t k = 0; k < t->nnorms; k++) need_unicode |= t->norms[k].kind == TK_N_FORM;
  if (need_unicode) {
    lh_status st = tk_unicode_init(err);
    if (st) return st;
  }
  t->split_step = -1;
  bool mapped_before = false;
  for (size_t k = 0; k < t->npres; k++) {
    const tk_pre *p = &t->pres[k];
    bool splits = p->kind != TK_P_BYTELEVEL || p->use_regex;
    if (splits) {
      t->split_step = (int)k;
      break;
    }
    mapped_before = true;
  }
  t->cap_step = -1;
  for (size_t k = t->npres; k-- > 0;)
    if (t->pres[k].kind != TK_P_BYTELEVEL || t->pres[k].use_regex) {
      t->cap_step = (int)k;
      break;
    }
  if (t->split_step >= 0 && (size_t)t->split_step + 2 == t->npres) {
    const tk_pre *l = &t->pres[t->npres - 1];
    t->tail_map_only = l->kind == TK_P_BYTELEVEL && !l->use_regex && !l->add_prefix_space &&
                       t->pres[t->split_step].kind != TK_P_BYTELEVEL;
  }
  t->pretok_restart = t->split_step >= 0 && !mapped_before && (!t->nnorms || t->norm_segmentable) &&
                      !t->has_prepend &&
                      !(t->pres[t->split_step].kind != TK_P_DIGITS && t->pres[t->split_step].re.can_be_empty);
  return LH_OK;
}

/* A key given twice in one object of node (at path, `len` bytes of the n-byte buffer), at any
 * depth: refused, since HF tokenizers keeps the last (its maps and its own field readers alike)
 * and cJSON's lookups find the first, so the file would be read as another tokenizer. vocab, the
 * model's vocabulary object, is the exception: a token listed twice there is legal in HF, which
 * keeps its last id, and so does tk_bpe_load. */
static lh_status no_repeated_keys(const cJSON *node, const cJSON *vocab, char *path, size_t len, size_t n,
                                  lh_error *err) {
  const char *dup = NULL;
  if (node != vocab && lh_json_duplicate_key(node, 0, &dup)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  if (dup)
    return lh_error_set(err, LH_EFORMAT, "key \"%.64s\" appears more than once in %s; HF tokenizers reads the last "
                        "and longhaul would read the first, so write it once", dup, len ? path : "the top object");
  size_t i = 0;
  for (const cJSON *c = node->child; c; c = c->next, i++) {
    if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
    int w = c->string ? snprintf(path + len, n - len, "%s%s", len ? "." : "", c->string)
                      : snprintf(path + len, n - len, "[%zu]", i);
    size_t at = w < 0 || (size_t)w >= n - len ? n - 1 : len + (size_t)w; /* a path too long is cut */
    lh_status st = no_repeated_keys(c, vocab, path, at, n, err);
    path[len] = 0;
    if (st) return st;
  }
  return LH_OK;
}

static lh_status load_json(lh_tokenizer *t, const cJSON *root, lh_error *err) {
  if (!cJSON_IsObject(root)) return lh_error_set(err, LH_EFORMAT, "not a JSON object");
  char path[256] = "";
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "model"), "vocab");
  lh_status rs = no_repeated_keys(root, vocab, path, 0, sizeof path, err); /* depth: cJSON's nesting limit */
  if (rs) return rs;
  const char *ver = jstr(root, "version");
  if (ver && strcmp(ver, "1.0")) return lh_error_set(err, LH_EUNSUPPORTED, "unknown tokenizer.json version %s", ver);
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(root, "truncation");
  if (tr && !cJSON_IsNull(tr))
    return lh_error_set(err, LH_EUNSUPPORTED, "\"truncation\" is set; truncating encodings is not supported");
  const cJSON *pad = cJSON_GetObjectItemCaseSensitive(root, "padding");
  if (pad && !cJSON_IsNull(pad)) {
    const cJSON *strat = cJSON_GetObjectItemCaseSensitive(pad, "strategy");
    const cJSON *mult = cJSON_GetObjectItemCaseSensitive(pad, "pad_to_multiple_of");
    /* BatchLongest pads a single encoding to its own length: a no-op */
    if (!(cJSON_IsString(strat) && !strcmp(strat->valuestring, "BatchLongest") && (!mult || cJSON_IsNull(mult))))
      return lh_error_set(err, LH_EUNSUPPORTED, "\"padding\" pads single encodings; padding is not supported");
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) return lh_error_set(err, LH_EFORMAT, "no \"model\" object");
  lh_status st;
  if ((st = tk_bpe_load(&t->bpe, model, err))) return st;
  if ((st = parse_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err))) return st;
  if ((st = parse_pretok(t, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err))) return st;
  if ((st = parse_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err))) return st;
  if ((st = parse_decoder(t, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err))) return st;
  if ((st = analyse(t, err))) return st;
  if ((st = parse_added(t, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), err))) return st;
  /* id tables */
  t->max_id = t->bpe.max_id;
  for (size_t k = 0; k < t->nadded; k++)
    if (t->added[k].id > t->max_id) t->max_id = t->added[k].id;
  if (t->max_id > TK_MAX_ID)
    return lh_error_set(err, LH_EUNSUPPORTED, "token id %d is too large (ids up to 2^26 are supported)", t->max_id);
  size_t nids = (size_t)t->max_id + 1;
  t->added_index = malloc((nids ? nids : 1) * sizeof *t->added_index);
  if (!t->added_index) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (size_t i = 0; i < nids; i++) t->added_index[i] = -1;
  for (size_t k = 0; k < t->nadded; k++) t->added_index[t->added[k].id] = (int32_t)k;
  size_t overlap = 0;
  for (size_t i = 0; i < t->added_map.nents; i++) {
    const struct tk_strent *e = &t->added_map.ents[i];
    if (tk_strmap_get(&t->bpe.vocab, t->added_map.arena.data + e->off, e->len) >= 0) overlap++;
  }
  t->vocab_size = (int32_t)(t->bpe.vocab.nents + t->added_map.nents - overlap);
  return LH_OK;
}

lh_status tk_open_json(const char *json, size_t len, const char *name, lh_tokenizer **out, lh_error *err) {
  *out = NULL;
  cJSON *root = cJSON_ParseWithLength(json, len);
  char deep[128];
  if (!root && lh_json_too_deep(json, len, deep, sizeof deep)) return lh_error_set(err, LH_EFORMAT, "%s: %s", name, deep);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    size_t off = at && at >= json && at <= json + len ? (size_t)(at - json) : 0;
    size_t line = 1;
    for (size_t i = 0; i < off; i++) line += json[i] == '\n';
    return lh_error_set(err, LH_EFORMAT, "%s: invalid JSON near line %zu (byte %zu)", name, line, off);
  }
  lh_tokenizer *t = calloc(1, sizeof *t);
  if (!t) {
    cJSON_Delete(root);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  pthread_mutex_init(&t->pool_mu, NULL);
  t->split_step = t->cap_step = -1;
  uint8_t d[32];
  lh_sha256_buf(json, len, d);
  lh_hex(d, 32, t->id);
  lh_status st = (t->path = strdup(name)) ? load_json(t, root, err) : lh_error_set(err, LH_ENOMEM, "out of memory");
  cJSON_Delete(root);
  if (st) {
    lh_error_prefix(err, st, "%s: ", name);
    lh_tokenizer_close(t);
    return st;
  }
  *out = t;
  return LH_OK;
}

lh_status lh_tokenizer_open(const char *path, lh_tokenizer **out, lh_error *err) {
  *out = NULL;
  char file[4096];
  if (lh_is_dir(path)) {
    if (lh_path_join(file, sizeof file, path, "tokenizer.json"))
      return lh_error_set(err, LH_ELIMIT, "%s: path too long", path);
  } else {
    snprintf(file, sizeof file, "%s", path);
  }
  lh_buf b = {0};
  lh_error e;
  lh_status st = lh_file_read_regular(file, TOKENIZER_MAX_BYTES, &b, &e);
  if (st == LH_ENOTFOUND)
    return lh_error_set(err, LH_ENOTFOUND, "%s: no such tokenizer file%s", file,
                        lh_is_dir(path) ? " (the model folder has no tokenizer.json)" : "");
  if (st == LH_ELIMIT)
    lh_error_set(err, st, "%s (%zu MiB): real tokenizer files are 10-35 MB, and reading one takes 20-40 times its "
                 "size in memory; is this the model's tokenizer?", e.msg, TOKENIZER_MAX_BYTES >> 20);
  else if (st)
    lh_error_set(err, st, "%s", e.msg);
  if (st) {
    lh_buf_free(&b);
    return st;
  }
  st = tk_open_json(b.data ? b.data : "", b.len, file, out, err);
  lh_buf_free(&b);
  return st;
}

const char *lh_tokenizer_id(const lh_tokenizer *t) { return t->id; }

void lh_tokenizer_close(lh_tokenizer *t) {
  if (!t) return;
  tk_bpe_free(&t->bpe);
  for (size_t k = 0; k < t->nadded; k++) {
    free(t->added[k].content);
    free(t->added[k].norm);
  }
  free(t->added);
  trie_free(&t->raw_trie);
  trie_free(&t->norm_trie);
  trie_free(&t->raw_trie_text);
  trie_free(&t->norm_trie_text);
  tk_strmap_free(&t->special);
  tk_strmap_free(&t->added_map);
  free(t->added_index);
  for (size_t k = 0; k < t->nnorms; k++) {
    tk_regex_free(&t->norms[k].re);
    free(t->norms[k].text);
  }
  free(t->norms);
  for (size_t k = 0; k < t->npres; k++) tk_regex_free(&t->pres[k].re);
  for (size_t k = 0; k < t->ntpl; k++) free(t->tpl[k].ids);
  free(t->tpl);
  while (t->pool) {
    tk_ctx *c = t->pool;
    t->pool = c->next;
    tk_ctx_free(c);
  }
  pthread_mutex_destroy(&t->pool_mu);
  free(t->path);
  free(t);
}

/* ------------------------------------------------------------------------------ encode */

static lh_status encode_plain(const lh_tokenizer *t, const uint8_t *s, size_t n, lh_i32vec *out, lh_error *err) {
  tk_ctx *c = tk_ctx_get(t, err);
  if (!c) return LH_ENOMEM;
  /* about one id per three or four bytes: reserving avoids growing a big vector many times */
  if (n > (1u << 16) && lh_i32vec_reserve(out, n / 4)) {
    tk_ctx_put(t, c);
    return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  }
  c->ids = out;
  tk_seg seg = {.text = s, .len = n, .level = TK_LEVEL_PIECE, .final = true};
  lh_status st = tk_encode_segment(t, c, &seg, err);
  tk_ctx_put(t, c);
  return st;
}

lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len, int add_special, lh_i32vec *out,
                              lh_error *err) {
  const uint8_t *s = (const uint8_t *)text;
  lh_buf clean = {0};
  if (tk_utf8_valid_prefix(s, len) != len) {
    if (tk_utf8_sanitize(s, len, &clean)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    s = (const uint8_t *)clean.data;
    len = clean.len;
  }
  lh_status st;
  if (!add_special || !t->has_template) {
    st = encode_plain(t, s, len, out, err);
  } else {
    /* each template wraps what the previous one produced */
    lh_i32vec cur = {0}, nxt = {0};
    st = encode_plain(t, s, len, &cur, err);
    size_t k = 0;
    while (!st && k < t->ntpl) {
      nxt.len = 0;
      for (; k < t->ntpl && t->tpl[k].nids != SIZE_MAX; k++) {
        const tk_tpl *p = &t->tpl[k];
        if (p->is_seq ? lh_i32vec_append(&nxt, cur.data, cur.len) : lh_i32vec_append(&nxt, p->ids, p->nids))
          st = lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
      }
      k++;
      lh_i32vec sw = cur;
      cur = nxt;
      nxt = sw;
    }
    if (!st && lh_i32vec_append(out, cur.data, cur.len)) st = lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    lh_i32vec_free(&cur);
    lh_i32vec_free(&nxt);
  }
  lh_buf_free(&clean);
  return st;
}

/* ------------------------------------------------------------------------------ decode, vocab */

static const char *id_text(const lh_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id > t->max_id) return NULL;
  int32_t k = t->added_index[id];
  if (k >= 0) {
    const tk_added *a = &t->added[k];
    *len = a->norm ? a->norm_len : a->len;
    return a->norm ? a->norm : a->content;
  }
  if (id > t->bpe.max_id || t->bpe.id_len[id] == UINT32_MAX) return NULL;
  *len = t->bpe.id_len[id];
  return t->bpe.vocab.arena.data + t->bpe.id_off[id];
}

lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *ids, size_t n, int skip_special, lh_buf *out,
                              lh_error *err) {
  lh_buf raw = {0};
  bool first = true;
  for (size_t i = 0; i < n; i++) {
    size_t len;
    const char *s = id_text(t, ids[i], &len);
    if (!s) continue; /* HF skips ids it does not know */
    if (skip_special && tk_strmap_get(&t->special, s, len) >= 0) continue;
    if (!t->decoder_bytelevel) {
      if ((!first && lh_buf_append(out, " ", 1)) || lh_buf_append(out, s, len)) goto oom;
      first = false;
      continue;
    }
    /* ByteLevel: a token whose characters are all in the byte alphabet becomes those bytes */
    size_t mark = raw.len;
    bool all = true;
    for (size_t j = 0; j < len && all;) {
      int b = tk_char_byte(tk_utf8_next((const uint8_t *)s, &j));
      if (b < 0)
        all = false;
      else if (lh_buf_append(&raw, &(char){(char)b}, 1))
        goto oom;
    }
    if (!all) {
      raw.len = mark;
      if (lh_buf_append(&raw, s, len)) goto oom;
    }
  }
  if (t->decoder_bytelevel && tk_utf8_sanitize((const uint8_t *)raw.data, raw.len, out)) goto oom;
  lh_buf_free(&raw);
  return LH_OK;
oom:
  lh_buf_free(&raw);
  return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory decoding");
}

int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t) { return t->vocab_size; }

lh_status lh_tokenizer_check_ids(const lh_tokenizer *t, int32_t n_ids, const char *tokenizer_path, lh_error *err) {
  if (t->max_id < n_ids) return LH_OK;
  const char *tok = lh_tokenizer_id_to_token(t, t->max_id);
  return lh_error_set(err, LH_EFORMAT, "%s: token \"%.80s\" has id %d, but the model's vocabulary (config.json's "
                      "vocab_size) has %d ids, 0..%d: the tokenizer and the model do not belong together",
                      tokenizer_path, tok ? tok : "", t->max_id, n_ids, n_ids - 1);
}

int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token) {
  size_t n = strlen(token);
  int32_t id = tk_strmap_get(&t->added_map, token, n);
  return id >= 0 ? id : tk_strmap_get(&t->bpe.vocab, token, n);
}

const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id) {
  size_t len;
  return id_text(t, id, &len);
}
