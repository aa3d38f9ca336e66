/* test_tokenizer_unit.c — the tokenizer's contracts that need no HF run: refusing what it does
 * not reproduce (with the feature named), bad input, UTF-8 replacement as the Unicode standard's
 * "maximal subpart" example (Table 3-8) gives it, decode(encode(x)) == x, token offsets, thread
 * safety, O(n log n) merging of huge pre-tokens, and the stream API's edges. Token ids themselves
 * are checked against HF in test_tokenizer_fixtures and test_tokenizer_hf.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "tokenizer/tokenizer_int.h"
#include "tests/test.h"
#include "util/fs.h"

/* two id vectors hold the same ids (either may be empty, with a NULL buffer) */
static int same_ids(const lh_i32vec *a, const lh_i32vec *b) {
  return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len * sizeof *a->data));
}

static const char *fix(const char *name) {
  static char p[8][4200];
  static int k;
  const char *src = getenv("LH_SOURCE_DIR");
  char *o = p[k++ % 8];
  snprintf(o, 4200, "%s/tests/fixtures/tokenizer/%s", src ? src : ".", name);
  return o;
}

/* ------------------------------------------------------------------ refusing the unsupported */

static const char *base_json(const char *normalizer, const char *pre, const char *post, const char *decoder,
                             const char *model_extra, const char *top_extra, char *out, size_t n) {
  snprintf(out, n,
           "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],%s"
           "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":%s,"
           "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,"
           "\"byte_fallback\":false,%s\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]}}",
           top_extra, normalizer, pre, post, decoder, model_extra);
  return out;
}

static void expect_refused(const char *json, lh_status code, const char *needle) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  lh_status st = tk_open_json(json, strlen(json), "case", &t, &err);
  CHECK_MSG(st == code, "wanted status %s, got %s (%s) for %s", lh_status_name(code), lh_status_name(st), err.msg,
            json);
  CHECK_STR_CONTAINS(err.msg, needle);
  CHECK(t == NULL);
}

static void test_refusals(void) {
  char j[4096];
  const char *split = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false}";
  char pre[512];
  expect_refused(base_json("{\"type\":\"BertNormalizer\"}", "null", "null", "null", "", "", j, sizeof j),
                 LH_EUNSUPPORTED, "BertNormalizer");
  expect_refused(base_json("null", "{\"type\":\"Metaspace\",\"replacement\":\"_\"}", "null", "null", "", "", j, sizeof j),
                 LH_EUNSUPPORTED, "Metaspace");
  expect_refused(base_json("null", "null", "{\"type\":\"RobertaProcessing\"}", "null", "", "", j, sizeof j),
                 LH_EUNSUPPORTED, "RobertaProcessing");
  expect_refused(base_json("null", "null", "null", "{\"type\":\"WordPiece\"}", "", "", j, sizeof j), LH_EUNSUPPORTED,
                 "WordPiece");
  /* truncation, padding, dropout, another model */
  const char *trunc = "{\"version\":\"1.0\",\"truncation\":{\"max_length\":8},\"padding\":null,\"added_tokens\":[],"
                      "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}";
  expect_refused(trunc, LH_EUNSUPPORTED, "truncation");
  const char *pad = "{\"version\":\"1.0\",\"truncation\":null,\"padding\":{\"strategy\":{\"Fixed\":8}},\"added_tokens\":[],"
                    "\"model\":{\"type\":\"BPE\",\"vocab\":{},\"merges\":[]}}";
  expect_refused(pad, LH_EUNSUPPORTED, "padding");
  const char *drop = "{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{},\"merges\":[]}}";
  expect_refused(drop, LH_EUNSUPPORTED, "dropout");
  const char *wp = "{\"version\":\"1.0\",\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
  expect_refused(wp, LH_EUNSUPPORTED, "WordPiece");
  /* regex constructs that PCRE2 cannot reproduce exactly */
  const char *bad_re[][2] = {{"\\\\X", "\\X"},          {"\\\\G.", "\\G"},   {"[[:alpha:]]", "POSIX"},
                             {"(?i:ss)", "case fold"}, {"(?x)a b", "(?x)"}, {"(?i)\\\\p{L}", "case-insensitive"},
                             {"\\\\p{Foo}", "\\p{Foo}"}, {"(?i)é", "non-ASCII"}, {"\\\\K", "\\K"}};
  for (size_t i = 0; i < sizeof bad_re / sizeof *bad_re; i++) {
    snprintf(pre, sizeof pre, split, bad_re[i][0]);
    expect_refused(base_json("null", pre, "null", "null", "", "", j, sizeof j), LH_EUNSUPPORTED, bad_re[i][1]);
  }
  /* malformed files */
  expect_refused("{\"version\": \"1.0\",\n \"model\": {", LH_EFORMAT, "line 2");
  expect_refused("{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a c\"]}}", LH_EFORMAT,
                 "not in the vocab");
  expect_refused("{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}}", LH_EFORMAT,
                 "merge 1");
  expect_refused("{\"version\":\"2.0\",\"model\":{}}", LH_EUNSUPPORTED, "version");
  expect_refused("{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[[\"a\",\"b\"],"
                 "\"a b\"]}}", LH_EFORMAT, "merge 2 is \"a b\" but merge 1 is [\"a\", \"b\"]");
  /* a vocabulary id past 2^26 is refused by its entry, before any table is sized by it */
  expect_refused("{\"version\":\"1.0\",\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":2147483646},\"merges\":[]}}",
                 LH_EUNSUPPORTED, "vocab entry \"b\" has id 2147483646");
  /* added tokens as HF reads them, named by their index: content a string, id an unsigned integer */
  const char *added[][2] = {{"{\"id\":5,\"content\":7}", "added_tokens[1] has no \"content\" string"},
                            {"\"x\"", "added_tokens[1] has no \"content\" string"},
                            {"{\"content\":\"<x>\"}", "added_tokens[1] (\"<x>\") has no valid \"id\""},
                            {"{\"id\":-5,\"content\":\"<x>\"}", "added_tokens[1] (\"<x>\") has no valid \"id\""},
                            {"{\"id\":\"7\",\"content\":\"<x>\"}", "added_tokens[1] (\"<x>\") has no valid \"id\""}};
  for (size_t i = 0; i < sizeof added / sizeof *added; i++) {
    snprintf(j, sizeof j, "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":3,\"content\":\"<y>\"},%s],\"model\":"
             "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", added[i][0]);
    expect_refused(j, LH_EFORMAT, added[i][1]);
  }
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open("/nonexistent/tokenizer.json", &t, &err) == LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "/nonexistent/tokenizer.json");
  CHECK(lh_tokenizer_open(lh_test_tmpdir(), &t, &err) == LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "no tokenizer.json");
  /* one byte over the limit (a sparse file: nothing is written) is refused unread, by its size */
  char big[4200];
  snprintf(big, sizeof big, "%s/big-tokenizer.json", lh_test_tmpdir());
  FILE *f = fopen(big, "w");
  CHECK(f && ftruncate(fileno(f), ((off_t)128 << 20) + 1) == 0);
  if (f) fclose(f);
  CHECK(lh_tokenizer_open(big, &t, &err) == LH_ELIMIT);
  CHECK_STR_CONTAINS(err.msg, big);
  CHECK_STR_CONTAINS(err.msg, "134217729 bytes, over the limit of 134217728 bytes (128 MiB)");
  CHECK(t == NULL);
  unlink(big);
  lh_tokenizer_close(NULL);
  lh_tok_stream_close(NULL);
}

/* A key given twice in one object: HF tokenizers reads the last, cJSON's lookups the first, so
 * every object but the vocabulary refuses one (naming the key and where); in model.vocab a token
 * given twice is legal in HF and keeps its last id (outputs of tokenizers 0.23.3). */
static const char *dup_json(const char *vocab, const char *model_extra, const char *pre, const char *top_extra,
                            char *out, size_t n) {
  snprintf(out, n,
           "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[],\"normalizer\":null,"
           "\"pre_tokenizer\":%s,\"post_processor\":null,\"decoder\":null,%s\"model\":{\"type\":\"BPE\","
           "\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,\"byte_fallback\":false,%s\"vocab\":%s,"
           "\"merges\":[\"a b\"]}}",
           pre, top_extra, model_extra, vocab);
  return out;
}

static void test_repeated_keys(void) {
  char j[2048];
  const char *v = "{\"a\":0,\"b\":1,\"ab\":2,\" \":3}";
  const char *split = "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Isolated\",\"invert\":false}";
  expect_refused(dup_json(v, "", "null", "\"decoder\":null,", j, sizeof j), LH_EFORMAT,
                 "key \"decoder\" appears more than once in the top object");
  expect_refused(dup_json(v, "\"fuse_unk\":true,", "null", "", j, sizeof j), LH_EFORMAT,
                 "key \"fuse_unk\" appears more than once in model");
  expect_refused(dup_json(v, "", "{\"type\":\"Split\",\"pattern\":{\"String\":\" \",\"String\":\"a\"},"
                          "\"behavior\":\"Isolated\",\"invert\":false}", "", j, sizeof j),
                 LH_EFORMAT, "key \"String\" appears more than once in pre_tokenizer.pattern");
  char seq[512];
  snprintf(seq, sizeof seq, "{\"type\":\"Sequence\",\"pretokenizers\":[%s,{\"type\":\"Digits\",\"individual_digits\":true,"
           "\"individual_digits\":false}]}", split);
  expect_refused(dup_json(v, "", seq, "", j, sizeof j), LH_EFORMAT, "in pre_tokenizer.pretokenizers[1]");
  lh_tokenizer *once = NULL; /* the same file, each key once */
  lh_error e1 = {0};
  dup_json(v, "", seq, "", j, sizeof j);
  char *second = strstr(j, ",\"individual_digits\":false");
  if (second) memmove(second, second + 26, strlen(second + 26) + 1);
  CHECK_MSG(tk_open_json(j, strlen(j), "case", &once, &e1) == LH_OK, "%s: %s", e1.msg, j);
  lh_tokenizer_close(once);

  /* model.vocab: the last id of a token counts, and the one it replaced is no id */
  static const struct {
    const char *vocab;
    int32_t ids[5], a_id, max_ok;
  } cases[] = {{"{\"a\":0,\"b\":1,\"ab\":2,\" \":3,\"a\":4}", {2, 3, 4, 3, 1}, 4, 5},
               {"{\"a\":5,\"b\":1,\"ab\":2,\" \":3,\"a\":0}", {2, 3, 0, 3, 1}, 0, 4}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    dup_json(cases[i].vocab, "", "null", "", j, sizeof j);
    lh_tokenizer *t = NULL;
    lh_error err = {0};
    CHECK_MSG(tk_open_json(j, strlen(j), "case", &t, &err) == LH_OK, "%s", err.msg);
    if (!t) continue;
    lh_i32vec ids = {0};
    CHECK(lh_tokenizer_encode(t, "ab a b", 6, 0, &ids, &err) == LH_OK);
    CHECK_EQ(ids.len, 5);
    for (size_t k = 0; k < ids.len && k < 5; k++) CHECK_EQ(ids.data[k], cases[i].ids[k]);
    CHECK_EQ(lh_tokenizer_token_to_id(t, "a"), cases[i].a_id);
    CHECK_EQ(lh_tokenizer_vocab_size(t), 4);
    /* the smallest model vocabulary that holds every id: the replaced id 5 is not one */
    CHECK_MSG(lh_tokenizer_check_ids(t, cases[i].max_ok, "case", &err) == LH_OK, "%s", err.msg);
    CHECK(lh_tokenizer_check_ids(t, cases[i].max_ok - 1, "case", &err) == LH_EFORMAT);
    lh_i32vec_free(&ids);
    lh_tokenizer_close(t);
  }
}

/* A regex that PCRE2 gives up on (its match limit, on a pattern that backtracks exponentially):
 * the error names the tokenizer file and the pattern, and where in the file it is. */
static void test_regex_limit(void) {
  char j[4096];
  const char *v = "{\"a\":0,\"b\":1,\"ab\":2,\" \":3}";
  const char *split = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a+)+$\"},\"behavior\":\"Isolated\",\"invert\":false}";
  const char *replace = "{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(a+)+$\"},\"content\":\"b\"}";
  char text[64];
  memset(text, 'a', 40);
  text[40] = '!';
  text[41] = 0;
  for (int k = 0; k < 2; k++) {
    dup_json(v, "", k ? "null" : split, "", j, sizeof j);
    if (k) { /* the normalizer instead of the pre-tokenizer */
      char *at = strstr(j, "\"normalizer\":null");
      char rest[4096];
      snprintf(rest, sizeof rest, "%s", at + 17);
      snprintf(at, sizeof j - (size_t)(at - j), "\"normalizer\":%s%s", replace, rest);
    }
    lh_tokenizer *t = NULL;
    lh_error err = {0};
    CHECK_MSG(tk_open_json(j, strlen(j), "models/x/tokenizer.json", &t, &err) == LH_OK, "%s", err.msg);
    if (!t) continue;
    lh_i32vec ids = {0};
    CHECK_EQ(lh_tokenizer_encode(t, text, strlen(text), 0, &ids, &err), LH_ELIMIT);
    CHECK_STR_CONTAINS(err.msg, "models/x/tokenizer.json: the ");
    CHECK_STR_CONTAINS(err.msg, k ? "normalizer Replace pattern \"(a+)+$\"" : "pre_tokenizer Split pattern \"(a+)+$\"");
    CHECK_STR_CONTAINS(err.msg, "match limit on a piece of 41 bytes");
    lh_i32vec_free(&ids);
    lh_tokenizer_close(t);
  }
}

/* ------------------------------------------------------------------ UTF-8 */

static void test_utf8(void) {
  static const struct {
    const char *in, *out;
  } cases[] = {
      /* Unicode 15.0, Table 3-8: maximal subparts each become one U+FFFD */
      {"a\xF1\x80\x80\xE1\x80\xC2" "b\x80" "c\x80\xBF" "d",
       "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD" "d"},
      {"\xED\xA0\x80x", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDx"},
      {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xE2\x82", "\xEF\xBF\xBD"},
      {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},
      {"\xF0\x9F\x98\x80\xFF", "\xF0\x9F\x98\x80\xEF\xBF\xBD"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lh_buf b = {0};
    tk_utf8_sanitize((const uint8_t *)cases[i].in, strlen(cases[i].in), &b);
    CHECK_MSG(b.len == strlen(cases[i].out) && !memcmp(b.data, cases[i].out, b.len), "sanitize case %zu", i);
    lh_buf_free(&b);
  }
  CHECK_EQ(tk_utf8_valid_prefix((const uint8_t *)"ab\xC3\xA9\xE2\x82", 6), 4);
}

/* ------------------------------------------------------------------ round trips, offsets */

static void test_roundtrip_offsets(void) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open(fix("gpt2.tokenizer.json"), &t, &err) == LH_OK);
  if (!t) return;
  const char *texts[] = {"Hello world, this is a test.\n\tIndented\r\n", "数字 12345 ünïcödé 😀👍🏽 <|endoftext|> x",
                         "", " ", "   spaces   ", "a\u0301\u0323 ﬁ ẞ"};
  for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
    lh_i32vec ids = {0};
    lh_buf out = {0};
    CHECK(lh_tokenizer_encode(t, texts[i], strlen(texts[i]), 0, &ids, &err) == LH_OK);
    CHECK(lh_tokenizer_decode(t, ids.data, ids.len, 0, &out, &err) == LH_OK);
    CHECK_MSG(out.len == strlen(texts[i]) && !memcmp(out.data ? out.data : "", texts[i], out.len),
              "round trip of \"%s\" gave \"%s\"", texts[i], out.data ? out.data : "");
    /* offsets from the stream: each token's bytes sit at its offset in the text */
    lh_tok_stream *s = NULL;
    lh_i32vec sv = {0};
    int64_t *offs = NULL;
    size_t cap = 0;
    CHECK(lh_tok_stream_open(t, &s, &err) == LH_OK);
    size_t n = strlen(texts[i]);
    for (size_t k = 0; k < n; k++) lh_tok_stream_feed(s, texts[i] + k, 1, &sv, &offs, &cap, &err);
    CHECK(lh_tok_stream_finish(s, &sv, &offs, &cap, &err) == LH_OK);
    CHECK_EQ(sv.len, ids.len);
    for (size_t k = 0; k < sv.len && k < ids.len; k++) {
      lh_buf one = {0};
      CHECK(sv.data[k] == ids.data[k]);
      lh_tokenizer_decode(t, &sv.data[k], 1, 0, &one, &err);
      /* a token may hold part of a UTF-8 sequence: compare its raw bytes through the alphabet */
      const char *tok = lh_tokenizer_id_to_token(t, sv.data[k]);
      size_t tl = 0, p = 0;
      char raw[256];
      while (tok && tok[p] && tl < sizeof raw) {
        int b = tk_char_byte(tk_utf8_next((const uint8_t *)tok, &p));
        if (b < 0) break;
        raw[tl++] = (char)b;
      }
      if (!strcmp(tok, "<|endoftext|>")) tl = 0;
      CHECK_MSG(tl == 0 || ((size_t)offs[k] + tl <= n && !memcmp(texts[i] + offs[k], raw, tl)),
                "token %zu (%s) not at offset %lld of \"%s\"", k, tok, (long long)offs[k], texts[i]);
      lh_buf_free(&one);
    }
    free(offs);
    lh_i32vec_free(&sv);
    lh_tok_stream_close(s);
    lh_i32vec_free(&ids);
    lh_buf_free(&out);
  }
  /* vocabulary lookups agree with the file: 4000 entries plus added tokens not among them */
  CHECK(lh_tokenizer_vocab_size(t) >= 4000);
  CHECK_EQ(lh_tokenizer_token_to_id(t, "<|endoftext|>"), 0);
  CHECK(!strcmp(lh_tokenizer_id_to_token(t, 0), "<|endoftext|>"));
  CHECK(lh_tokenizer_id_to_token(t, -1) == NULL);
  CHECK(lh_tokenizer_id_to_token(t, 1 << 24) == NULL);
  CHECK_EQ(lh_tokenizer_token_to_id(t, "no such token at all"), -1);
  /* unknown ids are skipped by decode, as HF does */
  int32_t ids[] = {99999999, -5};
  lh_buf out = {0};
  CHECK(lh_tokenizer_decode(t, ids, 2, 0, &out, &err) == LH_OK);
  CHECK_EQ(out.len, 0);
  lh_buf_free(&out);
  lh_tokenizer_close(t);
}

/* ------------------------------------------------------------------ threads share a tokenizer */

typedef struct job {
  const lh_tokenizer *t;
  const char *text;
  size_t len;
  lh_i32vec ids;
} job;

static void *enc(void *arg) {
  job *j = arg;
  lh_error err = {0};
  for (int r = 0; r < 3; r++) {
    j->ids.len = 0;
    lh_tokenizer_encode(j->t, j->text, j->len, 1, &j->ids, &err);
  }
  return NULL;
}

static void test_threads(void) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open(fix("llama3.tokenizer.json"), &t, &err) == LH_OK);
  if (!t) return;
  lh_buf doc = {0};
  for (int i = 0; i < 2000; i++) lh_buf_printf(&doc, "Line %d: the quick brown fox <|eot_id|> jumps; ", i);
  lh_i32vec want = {0};
  lh_tokenizer_encode(t, doc.data, doc.len, 1, &want, &err);
  job jobs[4];
  pthread_t tid[4];
  for (int k = 0; k < 4; k++) {
    jobs[k] = (job){t, doc.data, doc.len, {0}};
    pthread_create(&tid[k], NULL, enc, &jobs[k]);
  }
  for (int k = 0; k < 4; k++) {
    pthread_join(tid[k], NULL);
    CHECK(same_ids(&jobs[k].ids, &want));
    lh_i32vec_free(&jobs[k].ids);
  }
  lh_i32vec_free(&want);
  lh_buf_free(&doc);
  lh_tokenizer_close(t);
}

/* ------------------------------------------------------------------ huge pre-tokens */

static double encode_time(const lh_tokenizer *t, size_t n, char ch) {
  char *s = malloc(n);
  for (size_t i = 0; i < n; i++) s[i] = (char)(ch ? ch : "ab"[i % 2]);
  lh_i32vec ids = {0};
  lh_error err = {0};
  double t0 = lh_now();
  lh_tokenizer_encode(t, s, n, 0, &ids, &err);
  double dt = lh_now() - t0;
  CHECK(ids.len > 0);
  lh_i32vec_free(&ids);
  free(s);
  return dt;
}

static void test_big_pretoken(void) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open(fix("gpt2.tokenizer.json"), &t, &err) == LH_OK);
  if (!t) return;
  /* "abab..." is one \p{L}+ pre-token, "====" one punctuation pre-token: merging must stay
   * O(n log n): ten times the text may not take anywhere near a hundred times as long */
  for (int k = 0; k < 2; k++) {
    char ch = k ? '=' : 0;
    double small = encode_time(t, 50000, ch), big = encode_time(t, 500000, ch);
    fprintf(stderr, "pre-token of 50 KB: %.3f s, of 500 KB: %.3f s\n", small, big);
    CHECK_MSG(big < 40 * small + 0.05, "merging looks quadratic (%.3f s vs %.3f s)", big, small);
    CHECK(big < 20.0);
  }
  lh_tokenizer_close(t);
}

/* ------------------------------------------------------------------ stream edges */

static void test_stream_edges(void) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open(fix("minimax.tokenizer.json"), &t, &err) == LH_OK);
  if (!t) return;
  lh_tok_stream *s = NULL;
  CHECK(lh_tok_stream_open(t, &s, &err) == LH_OK);
  lh_i32vec ids = {0};
  /* finish twice, empty feeds, a stream reused after finish */
  CHECK(lh_tok_stream_feed(s, "", 0, &ids, NULL, NULL, &err) == LH_OK);
  CHECK(lh_tok_stream_finish(s, &ids, NULL, NULL, &err) == LH_OK);
  CHECK_EQ(ids.len, 0);
  CHECK(lh_tok_stream_finish(s, &ids, NULL, NULL, &err) == LH_OK);
  const char *a = "caf\xC3", *b = "\xA9 <end_of_sentence>x";
  CHECK(lh_tok_stream_feed(s, a, strlen(a), &ids, NULL, NULL, &err) == LH_OK);
  CHECK(lh_tok_stream_feed(s, b, strlen(b), &ids, NULL, NULL, &err) == LH_OK);
  CHECK(lh_tok_stream_finish(s, &ids, NULL, NULL, &err) == LH_OK);
  lh_i32vec want = {0};
  const char *ab = "caf\xC3\xA9 <end_of_sentence>x";
  lh_tokenizer_encode(t, ab, strlen(ab), 0, &want, &err);
  CHECK(same_ids(&ids, &want));
  /* a sequence cut by the very end is invalid: one U+FFFD, as the one-shot encoder */
  ids.len = want.len = 0;
  CHECK(lh_tok_stream_feed(s, "x\xE2\x82", 3, &ids, NULL, NULL, &err) == LH_OK);
  CHECK(lh_tok_stream_finish(s, &ids, NULL, NULL, &err) == LH_OK);
  lh_tokenizer_encode(t, "x\xE2\x82", 3, 0, &want, &err);
  CHECK(same_ids(&ids, &want));
  /* memory stays bounded: a long document streamed in small feeds never holds much text */
  lh_i32vec_free(&ids);
  for (int i = 0; i < 20000; i++) {
    char line[128];
    int n = snprintf(line, sizeof line, "paragraph %d with some words and numbers 12345\n", i);
    lh_tok_stream_feed(s, line, (size_t)n, &ids, NULL, NULL, &err);
    ids.len = 0;
  }
  CHECK_MSG(tk_stream_buffered(s) < 64 * 1024, "the stream holds %zu bytes", tk_stream_buffered(s));
  lh_tok_stream_finish(s, &ids, NULL, NULL, &err);
  lh_tok_stream_close(s);
  lh_i32vec_free(&ids);
  lh_i32vec_free(&want);
  lh_tokenizer_close(t);
}

/* ------------------------------------------------- hand-written matchers against PCRE2's */

/* The hand-written matchers of tokenizer_fastsplit.c against the PCRE2 translation of the same
 * pattern on random text drawn from characters near every class boundary: the complete
 * find_iter walk must agree, and in partial mode (every prefix of the text, as the stream and
 * the threads see it) a match reported final must be the complete text's match. */
static void test_fast_split(void) {

  /* letters of every case class, marks, numbers, spaces of all kinds, contraction letters
   * (with U+017F, which folds to s), punctuation, emoji parts, and Unicode 16 additions */
  static const uint32_t alpha[] = {
      'a', 'b', 's', 't', 'r', 'e', 'v', 'm', 'l', 'd', 'S', 'T', 'R', 'E', 'V', 'M', 'L', 'D', 'Q', '\'',
      '\'', '\'', '0', '1', '9', ' ', ' ', ' ', '\t', '\r', '\n', '\n', '\v', '\f', '/', '/', '.', ',', '!',
      '-', '_', '(', '"', 0x17F, 0xC5, 0xE9, 0xC9, 0x1C5, 0x2B0, 0x5D0, 0x4E2D, 0x3042, 0x301, 0x308,
      0x903, 0x20DD, 0x663, 0x216B, 0xBD, 0xB2, 0xA0, 0x85, 0x1680, 0x2003, 0x2028, 0x2029, 0x202F, 0x205F,
      0x3000, 0x200B, 0x200D, 0x1F600, 0x1F3FB, 0x1F469, 0xFE0F, 0x2019, 0x1C89, 0x1C8A, 0x897, 0x10D4A,
      0x1E5D0, 0x16D40, 0xAA, 0xBA, 0x10FFFD, 0xE000, 0x378, 'k', 0x212A};
  const size_t na = sizeof alpha / sizeof *alpha;
  size_t nascii = 0; /* the leading ASCII entries: every other round draws from them only, for
                      * the matchers' ASCII paths (long words, runs, indentation) */
  while (nascii < na && alpha[nascii] < 0x80) nascii++;
  pcre2_match_data *md = pcre2_match_data_create(1, NULL);
  pcre2_match_context *mc = pcre2_match_context_create(NULL);
  pcre2_jit_stack *js = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, NULL);
  pcre2_jit_stack_assign(mc, NULL, js);
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  const char *pat;
  int kind;
  for (size_t p = 0; (pat = tk_fast_pattern(p, &kind)); p++) {
    tk_regex fast, slow;
    lh_error err = {0};
    CHECK(tk_regex_compile(&fast, pat, strlen(pat), false, "test", &err) == LH_OK);
    CHECK_MSG(fast.fast_kind == kind, "pattern %zu: kind %d", p, fast.fast_kind);
    slow = fast;
    slow.fast_kind = 0;
    size_t bad = 0, early_partial = 0, checked = 0;
    /* first some ASCII texts with long runs of each class */
    static const char *const fixed[] = {"12345", "x 1234567;", "  \n\n  x", "Hello WORLD's", "  foo", "\tfoo",
                                        "a/b//\n", " ((x))", "FOO_bar", "fooBAR", "'s", "don't", "\r\n\r\n",
                                        " \n ", "   1", "x\t\t\ty", "...!!!\n/", " ---- 99999 AAAA aaaa"};
    const int nfixed = (int)(sizeof fixed / sizeof *fixed);
    for (int round = 0; round < 3000 + nfixed && bad < 5; round++) {
      char text[256];
      size_t n = 0;
      if (round >= 3000) {
        n = strlen(fixed[round - 3000]);
        memcpy(text, fixed[round - 3000], n);
      }
      int len = round >= 3000 ? 0 : 1 + (int)((rng >> 33) % 24);
      for (int k = 0; k < len; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        /* ASCII rounds: mostly ASCII, with one other character in sixteen */
        size_t pick = round & 1 && (rng >> 60) != 0 ? (rng >> 33) % nascii : (rng >> 33) % na;
        n += (size_t)tk_utf8_put(alpha[pick], text + n);
      }
      const uint8_t *u = (const uint8_t *)text;
      /* the complete walks */
      size_t ends[64], ne = 0;
      tk_find fs = {0, SIZE_MAX, 0, false}, fg = fs;
      for (;;) {
        size_t s1 = 0, e1 = 0, s2 = 0, e2 = 0;
        int r1 = tk_regex_find(&fast, md, mc, u, n, &fs, false, &s1, &e1);
        int r2 = tk_regex_find(&slow, md, mc, u, n, &fg, false, &s2, &e2);
        checked++;
        if (r1 != r2 || (r1 == TK_FIND_MATCH && (s1 != s2 || e1 != e2))) {
          if (bad++ < 5)
            fprintf(stderr, "pattern %zu on %.*s: fast %d [%zu,%zu) pcre2 %d [%zu,%zu)\n", p, (int)n, text, r1, s1, e1,
                    r2, s2, e2);
          break;
        }
        if (r1 != TK_FIND_MATCH || ne == 64) break;
        ends[ne++] = e1;
      }
      /* partial walks over every prefix that ends on a character boundary */
      for (size_t cut = 1; cut < n; cut++) {
        if ((u[cut] & 0xC0) == 0x80) continue;
        tk_find f = {0, SIZE_MAX, 0, false};
        for (size_t k = 0;; k++) {
          size_t ms = 0, me = 0;
          int r = tk_regex_find(&fast, md, mc, u, cut, &f, true, &ms, &me);
          if (r != TK_FIND_MATCH) {
            tk_find g = f;
            size_t gs = 0, ge = 0;
            if (tk_regex_find(&slow, md, mc, u, cut, &g, true, &gs, &ge) == TK_FIND_MATCH) early_partial++;
            break;
          }
          if (k >= ne || me != ends[k]) {
            if (bad++ < 5)
              fprintf(stderr, "pattern %zu on %.*s cut at %zu: match %zu ends at %zu, complete text's at %zu\n", p,
                      (int)n, text, cut, k, me, k < ne ? ends[k] : 0);
            break;
          }
        }
      }
    }
    fprintf(stderr, "fast matcher %zu (kind %d): %zu matches agree with PCRE2's, %zu early partials\n", p, kind, checked,
            early_partial);
    CHECK_MSG(bad == 0, "pattern %zu: %zu disagreements in %zu matches", p, bad, checked);
    /* partial answers where PCRE2 already knew the match: allowed (the stream waits), but rare */
    CHECK_MSG(early_partial * 20 < checked, "pattern %zu: %zu early partials", p, early_partial);
    tk_regex_free(&fast);
  }
  pcre2_jit_stack_free(js);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
}

/* A stream opened for ids only gives the ids of one-shot encoding on one thread and on two (jobs
 * made tiny so that many are stitched), and refuses to report offsets. */
static void test_stream_ids_only(void) {
  const char *names[] = {"gpt2.tokenizer.json", "minimax.tokenizer.json"};
  lh_buf text = {0};
  for (int r = 0; r < 300; r++)
    lh_buf_printf(&text, "line %d: Hello world, don't stop \u00e9t\u00e9 \u00c5ngstr\u00f6m \xe6\x95\xb0\xe5\xad\x97 %d\n\t  x=%d;\n", r,
                  r * 7919, r % 13);
  size_t pb = tk_stream_par_batch, po = tk_stream_par_overlap;
  tk_stream_par_batch = 2048;
  tk_stream_par_overlap = 256;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    lh_tokenizer *t = NULL;
    lh_error err = {0};
    CHECK(lh_tokenizer_open(fix(names[i]), &t, &err) == LH_OK);
    if (!t) continue;
    lh_i32vec want = {0};
    CHECK(lh_tokenizer_encode(t, text.data, text.len, 0, &want, &err) == LH_OK);
    for (int threads = 1; threads <= 2; threads++) {
      lh_tok_stream *s = NULL;
      CHECK(lh_tok_stream_open_ids(t, threads, &s, &err) == LH_OK);
      lh_i32vec got = {0};
      for (size_t k = 0; k < text.len; k += 1000)
        CHECK(lh_tok_stream_feed(s, text.data + k, text.len - k < 1000 ? text.len - k : 1000, &got, NULL, NULL, &err) ==
              LH_OK);
      CHECK(lh_tok_stream_finish(s, &got, NULL, NULL, &err) == LH_OK);
      CHECK_MSG(got.len == want.len && !memcmp(got.data, want.data, want.len * sizeof *want.data),
                "%s, %d threads: ids-only stream differs from encode (%zu vs %zu ids)", names[i], threads, got.len,
                want.len);
      int64_t *offs = NULL;
      size_t cap = 0;
      CHECK(lh_tok_stream_feed(s, "x", 1, &got, &offs, &cap, &err) == LH_EINVAL);
      free(offs);
      lh_i32vec_free(&got);
      lh_tok_stream_close(s);
    }
    lh_i32vec_free(&want);
    lh_tokenizer_close(t);
  }
  tk_stream_par_batch = pb;
  tk_stream_par_overlap = po;
  lh_buf_free(&text);
}

/* The BPE cache with the split step's prefetch: a prefetched hash that no longer matches the
 * bytes at that address (the buffer was reused) must not change ids, and neither may the cache
 * being cleared when full. Each word's ids are checked against a fresh scratch. */
static void test_bpe_cache_prefetch(void) {
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK(lh_tokenizer_open(fix("minimax.tokenizer.json"), &t, &err) == LH_OK);
  if (!t) return;
  tk_bpe_scratch sc = {0};
  uint64_t rng = 12345;
  size_t bad = 0;
  for (int k = 0; k < 40000 && bad < 5; k++) { /* more distinct words than the cache holds */
    uint8_t w[24];
    size_t n = 1 + k % 12;
    for (size_t i = 0; i < n; i++) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      w[i] = (uint8_t)(k % 3 ? 'a' + (rng >> 33) % 26 : (rng >> 33) % 256); /* bytes of any value */
    }
    lh_i32vec got = {0}, want = {0};
    if (k % 5 == 0) { /* a stale prefetch: same address and length, other bytes */
      w[0] ^= 0x20;
      tk_bpe_prefetch(&sc, w, n);
      w[0] ^= 0x20;
    } else if (k % 5 == 1) {
      tk_bpe_prefetch(&sc, w, n); /* the normal case */
    }
    CHECK(tk_bpe_word(&t->bpe, &sc, w, n, true, &got, NULL) == LH_OK);
    tk_bpe_scratch fresh = {0};
    CHECK(tk_bpe_word(&t->bpe, &fresh, w, n, true, &want, NULL) == LH_OK);
    tk_bpe_scratch_free(&fresh);
    if (got.len != want.len || memcmp(got.data, want.data, got.len * sizeof *got.data)) bad++;
    if (k % 7 == 0) { /* and again from the cache */
      got.len = 0;
      CHECK(tk_bpe_word(&t->bpe, &sc, w, n, true, &got, NULL) == LH_OK);
      if (got.len != want.len || memcmp(got.data, want.data, got.len * sizeof *got.data)) bad++;
    }
    lh_i32vec_free(&got);
    lh_i32vec_free(&want);
  }
  CHECK_MSG(bad == 0, "%zu words got other ids through the cache", bad);
  tk_bpe_scratch_free(&sc);
  lh_tokenizer_close(t);
}

int main(void) {
  lh_test_begin("test_tokenizer_unit");
  test_refusals();
  test_repeated_keys();
  test_regex_limit();
  test_utf8();
  test_roundtrip_offsets();
  test_threads();
  test_big_pretoken();
  test_stream_edges();
  test_fast_split();
  test_stream_ids_only();
  test_bpe_cache_prefetch();
  return lh_test_end();
}
