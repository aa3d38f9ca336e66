/* fuzz_tokenizer.c — libFuzzer target: any bytes through the three encoders must agree.
 *
 * The first input byte picks a fixture tokenizer (GPT-2 style, MiniMax style with NFC and
 * special tokens, Llama-3 style with lstrip/rstrip/single_word tokens) and a feeding pattern;
 * the rest is the text. The one-shot encoder, the streaming encoder (fed in pieces whose sizes
 * come from the input, encoding after every feed), the threaded stream (the same pieces, tiny
 * jobs; the same offsets too) and the threaded encoder (tiny chunks) must produce the same ids, decode must not fail, and nothing may leak or read out of bounds.
 * The text (made valid UTF-8) also goes through each hand-written pre-tokenizer matcher of
 * tokenizer_fastsplit.c and the PCRE2 program of the same pattern, which must agree.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

/* two id vectors hold the same ids (either may be empty, with a NULL buffer) */
static int same_ids(const lh_i32vec *a, const lh_i32vec *b) {
  return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len * sizeof *a->data));
}

static lh_tokenizer *toks[3];
static tk_regex fast_re[16];
static size_t nfast;
static pcre2_match_data *md;
static pcre2_match_context *mc;

/* the fast matcher of `kind` and PCRE2 find the same matches in u[0, n) */
static void check_fast(size_t kind, const uint8_t *u, size_t n) {
  tk_regex slow = fast_re[kind];
  slow.fast_kind = 0;
  tk_find f1 = {0, SIZE_MAX, 0, false}, f2 = f1;
  for (;;) {
    size_t s1 = 0, e1 = 0, s2 = 0, e2 = 0;
    int r1 = tk_regex_find(&fast_re[kind], md, mc, u, n, &f1, false, &s1, &e1);
    int r2 = tk_regex_find(&slow, md, mc, u, n, &f2, false, &s2, &e2);
    if (r1 != r2 || (r1 == TK_FIND_MATCH && (s1 != s2 || e1 != e2))) {
      fprintf(stderr, "fast matcher %zu: [%zu,%zu) where PCRE2 has [%zu,%zu)\n", kind, s1, e1, s2, e2);
      abort();
    }
    if (r1 != TK_FIND_MATCH) return;
  }
}

static void load(void) {
  static const char *names[3] = {"gpt2", "minimax", "llama3"};
  const char *src = getenv("LH_SOURCE_DIR");
  for (int i = 0; i < 3; i++) {
    char p[4096];
    snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/%s.tokenizer.json", src ? src : ".", names[i]);
    lh_error err = {0};
    if (lh_tokenizer_open(p, &toks[i], &err)) {
      fprintf(stderr, "fuzz_tokenizer: %s (run from the repository root or set LH_SOURCE_DIR)\n", err.msg);
      abort();
    }
  }
  lh_error err = {0};
  const char *p;
  int kind;
  for (; nfast < 16 && (p = tk_fast_pattern(nfast, &kind)); nfast++)
    if (tk_regex_compile(&fast_re[nfast], p, strlen(p), false, "fuzz", &err) || fast_re[nfast].fast_kind != kind)
      abort();
  md = pcre2_match_data_create(1, NULL);
  mc = pcre2_match_context_create(NULL);
  pcre2_jit_stack_assign(mc, NULL, pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!toks[0]) load();
  if (size < 1) return 0;
  const lh_tokenizer *t = toks[data[0] % 3];
  unsigned pattern = data[0] / 3;
  const char *text = (const char *)data + 1;
  size_t n = size - 1;
  lh_error err = {0};
  lh_i32vec one = {0}, st = {0}, par = {0};
  if (lh_tokenizer_encode(t, text, n, 0, &one, &err)) abort();
  tk_stream_min_batch = pattern & 1 ? 1 : 4096;
  /* the stream on one thread, then on 2 or 3 with tiny jobs: the same ids and offsets */
  tk_stream_par_batch = 64;
  tk_stream_par_overlap = 16;
  lh_i32vec thr = {0};
  int64_t *offs[2] = {NULL, NULL};
  size_t cap[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++) {
    lh_tok_stream *s = NULL;
    if (lh_tok_stream_open_threads(t, pass ? 2 + (int)(pattern & 1) : 1, &s, &err)) abort();
    lh_i32vec *out = pass ? &thr : &st;
    size_t i = 0, k = 0;
    while (i < n) {
      size_t take = 1 + (size_t)(data[(k++ % size)] % (pattern % 7 + 1) * 3);
      if (take > n - i) take = n - i;
      if (lh_tok_stream_feed(s, text + i, take, out, &offs[pass], &cap[pass], &err)) abort();
      i += take;
    }
    if (lh_tok_stream_finish(s, out, &offs[pass], &cap[pass], &err)) abort();
    lh_tok_stream_close(s);
  }
  if (!same_ids(&st, &one) || !same_ids(&thr, &st)) abort();
  if (st.len && memcmp(offs[0], offs[1], st.len * sizeof *offs[0])) abort();
  free(offs[0]);
  free(offs[1]);
  lh_i32vec_free(&thr);
  int used = 0;
  if (tk_encode_parallel_sized(t, text, n, 2 + (int)(pattern % 3), 16, &par, &used, &err)) abort();
  if (!same_ids(&par, &one)) abort();
  lh_buf dec = {0};
  if (lh_tokenizer_decode(t, one.data, one.len, (int)(pattern & 2), &dec, &err)) abort();
  lh_buf_free(&dec);
  lh_i32vec_free(&one);
  lh_i32vec_free(&st);
  lh_i32vec_free(&par);
  lh_buf clean = {0};
  if (tk_utf8_sanitize((const uint8_t *)text, n, &clean)) abort();
  check_fast(pattern % nfast, (const uint8_t *)clean.data, clean.len);
  lh_buf_free(&clean);
  return 0;
}
