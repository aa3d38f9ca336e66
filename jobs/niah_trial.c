/* niah_trial.c — a NIAH trial's needles, question and prompt (see niah.h for the layout).
 *
 * Everything here is a pure function of the sweep's parameters, the corpus stream H and the
 * tokenizer: the same (seed, length, depth, trial) gives the same keys, values, needle positions
 * and tokens in every run, which is what lets a rerun trust results.jsonl (niah.c invariant 1).
 * Needles sit at line starts (snap), so a needle never splits a line of the haystack.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/niah_internal.h"
#include "util/rand.h"

/* Keys: words from the held-out split of the embedded model's training corpus (never keys in its
 * training), so the default sweep measures retrieval of unseen needles. */
static const char *const KEYS[] = {
#include "jobs/niah_keys.inc"
};
#define N_KEYS ((int)(sizeof KEYS / sizeof *KEYS))


/* Replace {key}, {key2} and {value} in tpl. */
static void fill(lh_buf *out, const char *tpl, const char *key, const char *key2, const char *value) {
  for (const char *p = tpl; *p;) {
    if (!strncmp(p, "{key2}", 6)) lh_buf_append_str(out, key2 ? key2 : ""), p += 6;
    else if (!strncmp(p, "{key}", 5)) lh_buf_append_str(out, key), p += 5;
    else if (!strncmp(p, "{value}", 7)) lh_buf_append_str(out, value), p += 7;
    else lh_buf_append(out, p++, 1);
  }
}

static int ends_line(sweep *S, int64_t i) {
  if (S->line_end[i] == 2) {
    lh_buf b = {0};
    lh_tokenizer_decode(S->tok, &S->H.data[i], 1, 0, &b, NULL);
    S->line_end[i] = b.len && b.data[b.len - 1] == '\n';
    lh_buf_free(&b);
  }
  return S->line_end[i];
}

/* Largest q <= p such that q == 0 or token q-1 ends a line (searching back at most 4096). */
static int64_t snap(sweep *S, int64_t p) {
  for (int64_t q = p; q > 0 && q > p - 4096; q--)
    if (ends_line(S, q - 1)) return q;
  return p;
}

static int64_t ntok(sweep *S, const char *text) {
  lh_i32vec v = {0};
  lh_tokenizer_encode(S->tok, text, strlen(text), 0, &v, NULL);
  int64_t n = (int64_t)v.len;
  lh_i32vec_free(&v);
  return n;
}

const char *lh_niah__default_needle(void) { return "The special magic {key} number is: {value}."; }
const char *lh_niah__default_question(lh_niah_variant v) {
  switch (v) {
  case LH_NIAH_MULTIVALUE: return "What are all the special magic {key} numbers?";
  case LH_NIAH_MULTIQUERY: return "What are the special magic numbers for {key} and {key2}?";
  default: return "What is the special magic {key} number?";
  }
}

static const char *chat_tail_fmt(const sweep *S) {
  return S->chat.kind == LH_CHAT_MINIMAX ? "%s<end_of_sentence>\n<beginning_of_sentence>ai name=assistant\n" : "%s\n";
}

int lh_niah__builtin_keys(void) { return N_KEYS; }

int lh_niah__needles(const lh_niah_params *p) {
  if (p->variant == LH_NIAH_SINGLE || p->variant == LH_NIAH_WHICHFILE) return 1;
  int n = p->n_needles > 0 ? p->n_needles : (p->variant == LH_NIAH_MULTIQUERY ? 2 : 4);
  if (n > 16) n = 16;
  if (p->variant == LH_NIAH_MULTIQUERY && n < 2) n = 2;
  return n;
}

/* RULER's needles: built-in keys, 7-digit values, p's templates (or the defaults). LH_EINVAL when
 * the question or the expected answer renders longer than a trial holds (never cut: a question cut
 * short asks something else, an answer cut short is found in more answers). */
static lh_status draw_ruler(sweep *S, trial *t, int n, uint64_t *rng, lh_error *err) {
  const lh_niah_params *p = S->p;
  for (int i = 0; i < n; i++) {
    int k;
    do {
      k = (int)(lh_splitmix64(rng) % (uint64_t)N_KEYS);
      int dup = 0;
      for (int j = 0; j < i; j++) dup |= !strcmp(t->keys[j], KEYS[k]);
      if (!dup || p->variant == LH_NIAH_MULTIVALUE) break;
    } while (1);
    snprintf(t->keys[i], sizeof t->keys[i], "%s", p->variant == LH_NIAH_MULTIVALUE && i ? t->keys[0] : KEYS[k]);
    snprintf(t->values[i], sizeof t->values[i], "%07llu", (unsigned long long)(1000000 + lh_splitmix64(rng) % 9000000));
    lh_buf_clear(&t->needle_text[i]);
    fill(&t->needle_text[i], p->needle ? p->needle : lh_niah__default_needle(), t->keys[i], NULL, t->values[i]);
    lh_buf_append_str(&t->needle_text[i], "\n");
  }
  /* what is asked: the first needle (at the requested depth); multi-query also a random other one */
  int q2 = n > 1 ? 1 + (int)(lh_splitmix64(rng) % (uint64_t)(n - 1)) : 0;
  lh_buf q = {0};
  fill(&q, p->question ? p->question : lh_niah__default_question(p->variant), t->keys[0], t->keys[q2], t->values[0]);
  const size_t qlen = q.len;
  snprintf(t->question, sizeof t->question, "%s", q.data ? q.data : "");
  lh_buf_free(&q);
  if (qlen >= sizeof t->question)
    return lh_error_set(err, LH_EINVAL, "--question renders to %zu bytes with key %s; a question has at most %zu",
                        qlen, t->keys[0], sizeof t->question - 1);
  if (p->variant == LH_NIAH_MULTIVALUE) {
    t->n_expected = n; /* the list itself is written once the needles are in text order */
  } else if (p->variant == LH_NIAH_MULTIQUERY) {
    t->n_expected = 2;
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%s", t->values[0]);
    snprintf(t->expected_vals[1], sizeof t->expected_vals[0], "%s", t->values[q2]);
    snprintf(t->expected, sizeof t->expected, "%s, %s", t->values[0], t->values[q2]);
  } else {
    t->n_expected = 1;
    lh_buf a = {0};
    fill(&a, p->answer ? p->answer : "{value}", t->keys[0], NULL, t->values[0]);
    const size_t alen = a.len;
    snprintf(t->expected, sizeof t->expected, "%s", a.data ? a.data : "");
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%.255s", p->answer ? t->expected : t->values[0]);
    lh_buf_free(&a);
    if (alen >= sizeof t->expected_vals[0])
      return lh_error_set(err, LH_EINVAL, "--answer renders to %zu bytes with key %s; an expected answer has at most "
                          "%zu", alen, t->keys[0], sizeof t->expected_vals[0] - 1);
  }
  for (int i = 0; i < 16; i++) t->fam_needle[i] = t->fam_kind[i] = -1;
  return LH_OK;
}

/* Swap needles a and b of t (everything kept per needle). */
static void swap_needles(trial *t, int a, int b) {
  char kb[sizeof t->keys[0]], vb[sizeof t->values[0]];
  const int64_t tp = t->pos[a];
  t->pos[a] = t->pos[b], t->pos[b] = tp;
  memcpy(kb, t->keys[a], sizeof kb), memcpy(t->keys[a], t->keys[b], sizeof kb), memcpy(t->keys[b], kb, sizeof kb);
  memcpy(vb, t->values[a], sizeof vb), memcpy(t->values[a], t->values[b], sizeof vb), memcpy(t->values[b], vb, sizeof vb);
  const lh_buf tb = t->needle_text[a];
  t->needle_text[a] = t->needle_text[b], t->needle_text[b] = tb;
  int x = t->fam_needle[a];
  t->fam_needle[a] = t->fam_needle[b], t->fam_needle[b] = x;
  x = t->fam_kind[a];
  t->fam_kind[a] = t->fam_kind[b], t->fam_kind[b] = x;
}

/* The index just past the end of the line H[p] is on (searching at most 4096 tokens); -1 if none. */
static int64_t line_after(sweep *S, int64_t p) {
  for (int64_t q = p; q < (int64_t)S->H.len && q < p + 4096; q++)
    if (ends_line(S, q)) return q + 1;
  return -1;
}

/* The document of the corpus copy holding H[p]: the index d of its start in S->doc_start, and
 * that start in H (*start). The corpus's first document starts at its first token. */
static int doc_at(const sweep *S, int64_t p, int64_t *start) {
  const int64_t base = p / S->corpus_tokens * S->corpus_tokens, c = p - base;
  int lo = 0, hi = S->n_docs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (S->doc_start[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  *start = base + S->doc_start[lo];
  return lo;
}

/* whichfile: move t's needle inside a document (past its header line; a needle at a document's
 * first token would sit between two documents, so it goes back to the start of the previous
 * document's last line, before its closing tag) and make that document's path, as its header
 * `<document path="...">` writes it, the expected answer. */
static lh_status place_in_document(sweep *S, trial *t, lh_error *err) {
  if (!S->n_docs)
    return lh_error_set(err, LH_EINVAL, "--variant whichfile plants the fact in a document of the haystack, and the "
                        "haystack has no documents");
  int64_t p = t->pos[0], start;
  for (int tries = 0; tries < 4; tries++) {
    doc_at(S, p, &start);
    if (p != start) break;
    const int64_t q = p > 0 ? snap(S, p - 1) : line_after(S, p);
    if (q < 0 || q == p) break;
    p = q;
  }
  const int64_t body = line_after(S, start);
  if (body < 0 || p < body || p > t->hay_len)
    return lh_error_set(err, LH_EINVAL, "length %lld at depth %g%%: no line inside a document near the needle's place "
                        "for --variant whichfile; try another length or depth", (long long)t->length, t->depth);
  t->pos[0] = p;
  lh_buf h = {0};
  lh_status st = lh_tokenizer_decode(S->tok, &S->H.data[start], (size_t)(body - start), 0, &h, err);
  const char *a = st ? NULL : h.data ? strstr(h.data, "path=\"") : NULL;
  const char *b = a ? strchr(a + 6, '"') : NULL;
  if (!st && (!b || b - (a + 6) < 1 || b - (a + 6) >= (ptrdiff_t)sizeof t->expected_vals[0]))
    st = lh_error_set(err, LH_EINVAL, "--variant whichfile: the document header at token %lld (\"%.80s\") does not "
                      "name a path of 1 to %zu bytes as <document path=\"...\">", (long long)start,
                      h.data ? h.data : "", sizeof t->expected_vals[0] - 1);
  if (!st) {
    snprintf(t->expected, sizeof t->expected, "%.*s", (int)(b - (a + 6)), a + 6);
    snprintf(t->expected_vals[0], sizeof t->expected_vals[0], "%.255s", t->expected);
    t->n_expected = 1;
  }
  lh_buf_free(&h);
  return st;
}

lh_status lh_niah__make_trial(sweep *S, trial *t, lh_error *err) {
  const lh_niah_params *p = S->p;
  uint64_t rng = p->seed ^ (uint64_t)t->length * 0x9E3779B97F4A7C15ull ^ (uint64_t)llround(t->depth * 1000) << 20 ^
                 (uint64_t)t->index << 44;
  for (int i = 0; i < 4; i++) lh_splitmix64(&rng);
  const int n = lh_niah__needles(p);
  t->n_needles = n;
  if (S->fam) {
    lh_status st = lh_niah__families_draw(S->fam, p->variant, n, KEYS, N_KEYS, &rng, t, err);
    if (st) return st;
  } else {
    lh_status st = draw_ruler(S, t, n, &rng, err);
    if (st) return st;
  }
  /* geometry: length = head + haystack + needles + tail */
  char tail[1024];
  snprintf(tail, sizeof tail, chat_tail_fmt(S), t->question);
  int64_t fixed = (int64_t)S->head.len + ntok(S, tail);
  for (int i = 0; i < n; i++) fixed += ntok(S, t->needle_text[i].data);
  int64_t hay = t->length - fixed;
  if (hay < 16)
    return lh_error_set(err, LH_EINVAL, "length %lld is too short for the needles and question (%lld tokens)",
                        (long long)t->length, (long long)fixed);
  if (hay > (int64_t)S->H.len) return lh_error_set(err, LH_EINVAL, "haystack too short for length %lld", (long long)t->length);
  /* cut the haystack at a line start; the shortfall is made up by moving the last cut back less */
  t->hay_len = snap(S, hay);
  /* a haystack with no line break near the cut (one long line: a minified file, a text without
   * newlines) snaps back to a line end thousands of tokens away: a "1K" trial of 50 tokens, scored
   * as if it were 1K. More than a tenth short (and 64 tokens) is refused. */
  if (hay - t->hay_len > hay / 10 && hay - t->hay_len > 64)
    return lh_error_set(err, LH_EINVAL,
                        "length %lld: the haystack has no line break within %lld tokens before its cut at token %lld, "
                        "so the trial would be %lld tokens short of its length (needles go at line starts): use a "
                        "corpus of text with lines",
                        (long long)t->length, (long long)(hay - t->hay_len), (long long)hay,
                        (long long)(hay - t->hay_len));
  t->pos[0] = snap(S, (int64_t)llround(t->depth / 100.0 * (double)t->hay_len));
  for (int i = 1; i < n; i++) {
    int64_t span = t->hay_len - t->pos[0];
    t->pos[i] = snap(S, t->pos[0] + (span > 0 ? (int64_t)(lh_splitmix64(&rng) % (uint64_t)(span + 1)) : 0));
    if (t->pos[i] < t->pos[0]) t->pos[i] = t->pos[0];
  }
  /* keep positions ascending (needle order in the text follows them) */
  for (int i = 2; i < n; i++)
    for (int j = i; j > 1 && t->pos[j] < t->pos[j - 1]; j--) swap_needles(t, j, j - 1);
  if (p->variant == LH_NIAH_WHICHFILE) return place_in_document(S, t, err);
  if (p->variant == LH_NIAH_MULTIVALUE) { /* the expected list in the order the values appear in the text */
    t->expected[0] = 0;
    for (int i = 0; i < n; i++) {
      snprintf(t->expected_vals[i], sizeof t->expected_vals[0], "%s", t->values[i]);
      size_t l = strlen(t->expected);
      snprintf(t->expected + l, sizeof t->expected - l, "%s%s", i ? ", " : "", t->values[i]);
    }
  }
  return LH_OK;
}

/* The tokens of trial t from absolute prompt position `from` on (absolute = head + haystack...). */
lh_status lh_niah__trial_tokens(sweep *S, const trial *t, lh_i32vec *out, int64_t *total, lh_error *err) {
  lh_i32vec_append(out, S->head.data, S->head.len);
  int64_t at = 0;
  for (int i = 0; i < t->n_needles; i++) {
    lh_i32vec_append(out, S->H.data + at, (size_t)(t->pos[i] - at));
    at = t->pos[i];
    lh_status st = lh_tokenizer_encode(S->tok, t->needle_text[i].data, t->needle_text[i].len, 0, out, err);
    if (st) return st;
  }
  lh_i32vec_append(out, S->H.data + at, (size_t)(t->hay_len - at));
  char tail[1024];
  snprintf(tail, sizeof tail, chat_tail_fmt(S), t->question);
  lh_status st = lh_tokenizer_encode(S->tok, tail, strlen(tail), 0, out, err);
  *total = (int64_t)out->len;
  return st;
}

