/* test_tokenizer_fixtures.c — longhaul's tokenizer against HF tokenizers' recorded outputs.
 *
 * The fixtures (tests/fixtures/tokenizer/, made by tools/make_tokenizer_fixtures.py fixtures)
 * hold tokenizers trained with HF and HF's own results: pre_tokenize_str/normalize_str of many
 * texts under single normalizers and pre-tokenizers (regex translation, behaviors, Unicode
 * versions), and for each full tokenizer the ids of ~1200 generated strings with and without
 * special tokens and their decodes. Each string is also fed to the streaming encoder at random
 * split points (inside UTF-8 sequences and added tokens too), which must give the same ids, and
 * long documents go through the multi-threaded encoder with small chunks, which must too.
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>

#include "tokenizer/tokenizer_int.h"
#include "tests/test.h"
#include "tests/tokenizer/fixture_json.h"
#include "util/fs.h"

/* two id vectors hold the same ids (either may be empty, with a NULL buffer) */
static int same_ids(const lh_i32vec *a, const lh_i32vec *b) {
  return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len * sizeof *a->data));
}

static const char *fixdir(void) {
  static char d[4096];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(d, sizeof d, "%s/tests/fixtures/tokenizer", src ? src : ".");
  return d;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void print_ids(const char *what, const int32_t *p, size_t n) {
  fprintf(stderr, "  %s (%zu):", what, n);
  for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", p[i]);
  fprintf(stderr, "\n");
}

static char *read_line(FILE *f) {
  static char *line = NULL;
  static size_t cap = 0;
  ssize_t n = getline(&line, &cap, f);
  return n < 0 ? NULL : line;
}

/* --------------------------------------------------------------- single components */

static void test_components(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/components.jsonl", fixdir());
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "missing %s", path);
  if (!f) return;
  cJSON *head = cJSON_Parse(read_line(f));
  const cJSON *texts = cJSON_GetObjectItemCaseSensitive(head, "texts");
  char *line;
  int configs = 0, bad = 0, cases = 0;
  while ((line = read_line(f))) {
    cJSON *c = cJSON_Parse(line);
    cJSON *tj = cJSON_GetObjectItemCaseSensitive(c, "tokenizer");
    char *json = cJSON_PrintUnformatted(tj);
    lh_tokenizer *t = NULL;
    lh_error err = {0};
    configs++;
    lh_status st = tk_open_json(json, strlen(json), "component", &t, &err);
    CHECK_MSG(st == LH_OK, "config %d does not load: %s\n  %s", configs, err.msg, json);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(c, "pieces");
    int k = 0;
    for (const cJSON *r = res->child; r && t; r = r->next, k++) {
      const char *text = cJSON_GetArrayItem(texts, k)->valuestring;
      lh_buf out = {0};
      cases++;
      st = tk_pretokens(t, text, strlen(text), &out, &err);
      int ok = st == LH_OK;
      /* out holds NUL-terminated pieces */
      size_t pos = 0;
      const cJSON *e = r->child;
      for (; ok && e; e = e->next) {
        size_t l = strlen(e->valuestring);
        if (pos + l + 1 > out.len || memcmp(out.data + pos, e->valuestring, l) || out.data[pos + l]) ok = 0;
        pos += l + 1;
      }
      if (ok && pos != out.len) ok = 0;
      if (!ok && ++bad <= 12) {
        fprintf(stderr, "component mismatch: config %s\n  text: %s\n  ours:", json, text);
        for (size_t q = 0; q < out.len; q += strlen(out.data + q) + 1) fprintf(stderr, " [%s]", out.data + q);
        fprintf(stderr, "\n  hf:  ");
        for (const cJSON *x = r->child; x; x = x->next) fprintf(stderr, " [%s]", x->valuestring);
        fprintf(stderr, "\n");
      }
      lh_buf_free(&out);
    }
    lh_tokenizer_close(t);
    free(json);
    cJSON_Delete(c);
  }
  fclose(f);
  cJSON_Delete(head);
  fprintf(stderr, "components: %d configs, %d cases, %d mismatches\n", configs, cases, bad);
  CHECK_EQ(bad, 0);
  CHECK(configs > 100);
}

/* --------------------------------------------------------------- full tokenizers */

static int stream_encode(const lh_tokenizer *t, const char *s, size_t n, int mode, lh_i32vec *out,
                         int64_t **offs, size_t *cap) {
  lh_tok_stream *st = NULL;
  lh_error err = {0};
  if (lh_tok_stream_open(t, &st, &err)) return -1;
  size_t i = 0;
  int rc = 0;
  while (i < n && !rc) {
    size_t take = mode == 0 ? 1 : mode == 1 ? 1 + rnd() % 7 : 1 + rnd() % (n / 3 + 1);
    if (take > n - i) take = n - i;
    rc = lh_tok_stream_feed(st, s + i, take, out, offs, cap, &err) != LH_OK;
    i += take;
  }
  if (!rc) rc = lh_tok_stream_finish(st, out, offs, cap, &err) != LH_OK;
  if (rc) fprintf(stderr, "stream error: %s\n", err.msg);
  lh_tok_stream_close(st);
  return rc;
}

/* ------------------------------------------------------ threaded stream vs one thread */

/* Feed s[0, n) in random pieces (1..maxp bytes) to a stream on `threads` threads; the piece sizes
 * come from the seed, so two calls with one seed feed the same pieces. */
static int stream_pieces(const lh_tokenizer *t, int threads, const char *s, size_t n, size_t maxp, uint64_t seed,
                         lh_i32vec *out, int64_t **offs, size_t *cap, int64_t *stitched, int64_t *fallbacks) {
  lh_tok_stream *st = NULL;
  lh_error err = {0};
  if (lh_tok_stream_open_threads(t, threads, &st, &err)) return -1;
  uint64_t r = seed | 1;
  size_t i = 0;
  int rc = 0;
  while (i < n && !rc) {
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    size_t take = 1 + (size_t)(r % maxp);
    if (take > n - i) take = n - i;
    rc = lh_tok_stream_feed(st, s + i, take, out, offs, cap, &err) != LH_OK;
    i += take;
  }
  if (!rc) rc = lh_tok_stream_finish(st, out, offs, cap, &err) != LH_OK;
  if (rc) fprintf(stderr, "stream error: %s\n", err.msg);
  if (stitched) tk_stream_counts(st, stitched, fallbacks);
  lh_tok_stream_close(st);
  return rc;
}

/* The threaded stream gives exactly the one-thread stream's ids and offsets (and one-shot ids),
 * for tiny and large batches, overlaps and min batches, small and large pieces. Returns the
 * number of stitches and fallbacks seen, so callers can check both paths ran. */
static void check_threaded_stream(const lh_tokenizer *t, const char *name, const char *what, const char *s, size_t n,
                                  int64_t *all_stitched, int64_t *all_fallbacks) {
  static const struct {
    size_t batch, overlap, min_batch;
  } cfg[] = {{64, 16, 1}, {256, 64, 4096}, {4096, 512, 1}, {64 << 10, 8 << 10, 4096}, {512 << 10, 8 << 10, 4096}};
  size_t sb = tk_stream_par_batch, so = tk_stream_par_overlap, sm = tk_stream_min_batch;
  lh_i32vec one = {0};
  lh_error err = {0};
  lh_tokenizer_encode(t, s, n, 0, &one, &err);
  for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++) {
    for (int pm = 0; pm < 2; pm++) {
      size_t maxp = pm == 0 ? 97 : n / 3 + 1; /* small pieces or a few large ones */
      if (pm == 0 && cfg[k].batch > 4096) maxp = 4096;
      uint64_t seed = rnd();
      tk_stream_par_batch = cfg[k].batch;
      tk_stream_par_overlap = cfg[k].overlap;
      tk_stream_min_batch = cfg[k].min_batch;
      lh_i32vec a = {0}, b = {0};
      int64_t *oa = NULL, *ob = NULL;
      size_t ca = 0, cb = 0;
      int64_t stitched = 0, fallbacks = 0;
      int ra = stream_pieces(t, 1, s, n, maxp, seed, &a, &oa, &ca, NULL, NULL);
      for (int th = 2; th <= 3; th++) {
        b.len = 0;
        int rb = stream_pieces(t, th, s, n, maxp, seed, &b, &ob, &cb, &stitched, &fallbacks);
        int same = !ra && !rb && same_ids(&a, &b) && same_ids(&a, &one) &&
                   (!a.len || !memcmp(oa, ob, a.len * sizeof *oa));
        CHECK_MSG(same, "%s, %s (%zu bytes): %d threads, batch %zu, overlap %zu, min batch %zu, pieces <= %zu: "
                  "%zu ids vs %zu on one thread (%zu one-shot)%s", name, what, n, th, cfg[k].batch,
                  cfg[k].overlap, cfg[k].min_batch, maxp, b.len, a.len, one.len,
                  same_ids(&a, &b) ? " (offsets differ)" : "");
        if (!same && same_ids(&a, &b))
          for (size_t q = 0; q < a.len; q++)
            if (oa[q] != ob[q]) {
              fprintf(stderr, "  first offset difference at id %zu: %lld vs %lld\n", q, (long long)oa[q],
                      (long long)ob[q]);
              break;
            }
        if (getenv("LH_TEST_VERBOSE")) fprintf(stderr, "  %s %s th %d batch %zu ov %zu maxp %zu: %lld stitched %lld fallbacks\n", name, what, th, cfg[k].batch, cfg[k].overlap, maxp, (long long)stitched, (long long)fallbacks);
        *all_stitched += stitched;
        *all_fallbacks += fallbacks;
      }
      free(oa);
      free(ob);
      lh_i32vec_free(&a);
      lh_i32vec_free(&b);
    }
  }
  tk_stream_par_batch = sb;
  tk_stream_par_overlap = so;
  tk_stream_min_batch = sm;
  /* the one-document encoder (jobs in the caller's text, tapering sizes) on the same text */
  static const size_t ovs[] = {16, 64, 512, 8192};
  for (size_t k = 0; k < sizeof ovs / sizeof *ovs; k++)
    for (int th = 2; th <= 3; th++) {
      lh_i32vec p = {0};
      int used = 0;
      lh_status st = tk_encode_parallel_sized(t, s, n, th, ovs[k], &p, &used, &err);
      CHECK_MSG(st == LH_OK && same_ids(&p, &one), "%s, %s: one-document encoder, %d threads, overlap %zu: %zu ids vs %zu",
                name, what, th, ovs[k], p.len, one.len);
      lh_i32vec_free(&p);
    }
  lh_i32vec_free(&one);
}

/* Texts for the threaded stream: the cases' document, and ones with few or no restart points. */
static void test_threaded_stream(const lh_tokenizer *t, const char *name, const lh_buf *doc) {
  int64_t stitched = 0, fallbacks = 0;
  check_threaded_stream(t, name, "cases document", doc->data, doc->len, &stitched, &fallbacks);
  if (t->pretok_restart) CHECK_MSG(stitched > 0, "%s: the threaded stream never stitched", name);
  lh_buf x = {0};
  /* one long word: no restart point at all until the end */
  for (int i = 0; i < 20000; i++) lh_buf_append(&x, "abcdefghij" + (i % 7), 3);
  check_threaded_stream(t, name, "one long word", x.data, x.len, &stitched, &fallbacks);
  /* long runs without restart points between ordinary text, invalid UTF-8, CJK, no newline */
  lh_buf_clear(&x);
  for (int i = 0; i < 60; i++) {
    lh_buf_append_str(&x, "int main(void) { return 0; } \xe4\xb8\xad\xe6\x96\x87\xe6\x96\x87 caf\xc3\xa9 \xff\xfe ");
    for (int k = 0; k < (i % 5) * 300; k++) lh_buf_append(&x, i % 2 ? " " : "z", 1);
    lh_buf_append_str(&x, i % 3 ? "\r\n" : "\xe2\x80\x8d\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd");
    if (doc->len > 4000) lh_buf_append(&x, doc->data + (size_t)i * 50, 700);
  }
  check_threaded_stream(t, name, "runs without restart points", x.data, x.len, &stitched, &fallbacks);
  if (t->pretok_restart) CHECK_MSG(fallbacks > 0, "%s: the threaded stream never fell back to one thread", name);
  fprintf(stderr, "%s: threaded stream: %lld stitches, %lld fallbacks, all equal to one thread\n", name,
          (long long)stitched, (long long)fallbacks);
  lh_buf_free(&x);
}

static void test_tokenizer(const char *name) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.tokenizer.json", fixdir(), name);
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  lh_status st = lh_tokenizer_open(path, &t, &err);
  CHECK_MSG(st == LH_OK, "%s: %s", name, err.msg);
  if (st) return;
  snprintf(path, sizeof path, "%s/%s.cases.jsonl", fixdir(), name);
  FILE *f = fopen(path, "r");
  CHECK_MSG(f != NULL, "missing %s", path);
  if (!f) {
    lh_tokenizer_close(t);
    return;
  }
  int n = 0, bad = 0, bad_stream = 0, bad_dec = 0, bad_off = 0;
  char *line;
  lh_buf doc = {0};
  lh_i32vec doc_ids = {0};
  while ((line = read_line(f))) {
    cJSON *c = cJSON_Parse(line);
    lh_buf text = {0};
    b64dec(cJSON_GetObjectItemCaseSensitive(c, "text_b64")->valuestring, &text);
    const char *s = text.data ? text.data : "";
    lh_i32vec ids = {0}, ids_sp = {0};
    n++;
    st = lh_tokenizer_encode(t, s, text.len, 0, &ids, &err);
    CHECK_MSG(st == LH_OK, "%s #%d: %s", name, n, err.msg);
    lh_tokenizer_encode(t, s, text.len, 1, &ids_sp, &err);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "ids");
    const cJSON *want_sp = cJSON_GetObjectItemCaseSensitive(c, "ids_special");
    if (!ids_eq(&ids, want) || !ids_eq(&ids_sp, want_sp)) {
      if (++bad <= 5) {
        fprintf(stderr, "%s #%d encode mismatch, text %.*s\n", name, n, (int)(text.len < 200 ? text.len : 200), s);
        print_ids("ours", ids.data, ids.len);
        char *w = cJSON_PrintUnformatted(want);
        fprintf(stderr, "  hf: %.300s\n", w);
        free(w);
      }
    }
    /* the streaming encoder, at random split points, encoding after every feed */
    for (int mode = text.len < 400 ? 0 : 1; mode < 3; mode++) {
      tk_stream_min_batch = mode == 2 ? 4096 : 1;
      lh_i32vec sv = {0};
      int64_t *offs = NULL;
      size_t cap = 0;
      int rc = stream_encode(t, s, text.len, mode, &sv, &offs, &cap);
      int same = !rc && same_ids(&sv, &ids);
      if (!same && ++bad_stream <= 5) {
        fprintf(stderr, "%s #%d stream (mode %d) differs from one-shot\n", name, n, mode);
        print_ids("stream", sv.data, sv.len);
        print_ids("one-shot", ids.data, ids.len);
      }
      for (size_t k = 0; same && k < sv.len; k++) {
        int okk = offs[k] >= 0 && (size_t)offs[k] < text.len && (k == 0 || offs[k] >= offs[k - 1]);
        if (!okk && ++bad_off <= 5)
          fprintf(stderr, "%s #%d: offset %zu = %lld out of order or range\n", name, n, k, (long long)offs[k]);
        if (!okk) break;
      }
      free(offs);
      lh_i32vec_free(&sv);
    }
    /* decoding HF's ids */
    lh_buf dec = {0}, dec_skip = {0};
    lh_i32vec wsp = {0};
    for (const cJSON *e = want_sp->child; e; e = e->next) lh_i32vec_push(&wsp, (int32_t)e->valuedouble);
    lh_tokenizer_decode(t, wsp.data, wsp.len, 0, &dec, &err);
    lh_tokenizer_decode(t, wsp.data, wsp.len, 1, &dec_skip, &err);
    const char *wd = cJSON_GetObjectItemCaseSensitive(c, "decoded")->valuestring;
    const char *wds = cJSON_GetObjectItemCaseSensitive(c, "decoded_skip")->valuestring;
    if ((strlen(wd) != dec.len || memcmp(wd, dec.data ? dec.data : "", dec.len)) ||
        (strlen(wds) != dec_skip.len || memcmp(wds, dec_skip.data ? dec_skip.data : "", dec_skip.len))) {
      if (++bad_dec <= 5) fprintf(stderr, "%s #%d decode mismatch: ours [%s] hf [%s]\n", name, n, dec.data, wd);
    }
    /* collect a long document from the cases for the threaded encoder */
    if (doc.len < (600u << 10)) {
      lh_buf_append(&doc, s, text.len);
      lh_buf_append(&doc, "\n", 1);
    }
    lh_buf_free(&dec);
    lh_buf_free(&dec_skip);
    lh_i32vec_free(&wsp);
    lh_i32vec_free(&ids);
    lh_i32vec_free(&ids_sp);
    lh_buf_free(&text);
    cJSON_Delete(c);
  }
  fclose(f);
  fprintf(stderr, "%s: %d strings: %d encode, %d stream, %d offset, %d decode mismatches\n", name, n, bad,
          bad_stream, bad_off, bad_dec);
  CHECK_EQ(bad, 0);
  CHECK_EQ(bad_stream, 0);
  CHECK_EQ(bad_off, 0);
  CHECK_EQ(bad_dec, 0);
  CHECK(n >= 120);
  /* threads: the concatenation of all cases (repeated to at least 200 KB), cut into small chunks */
  while (doc.len && doc.len < (200u << 10)) { /* append a copy (appending from itself could move it) */
    size_t n0 = doc.len;
    if (lh_buf_reserve(&doc, n0)) break;
    memcpy(doc.data + n0, doc.data, n0);
    doc.len = 2 * n0;
  }
  lh_tokenizer_encode(t, doc.data, doc.len, 0, &doc_ids, &err);
  for (int th = 2; th <= 4; th++) {
    lh_i32vec pv = {0};
    int used = 0;
    st = tk_encode_parallel_sized(t, doc.data, doc.len, th, 2048, &pv, &used, &err);
    CHECK_MSG(st == LH_OK && same_ids(&pv, &doc_ids),
              "%s: %d threads differ from one thread (%zu vs %zu ids)", name, th, pv.len, doc_ids.len);
    if (t->pretok_restart) CHECK_MSG(used > 1, "%s: %d threads found no stitch point (used %d)", name, th, used);
    lh_i32vec_free(&pv);
  }
  lh_i32vec sv = {0};
  CHECK(stream_encode(t, doc.data, doc.len, 1, &sv, NULL, NULL) == 0);
  CHECK_MSG(same_ids(&sv, &doc_ids),
            "%s: long document streamed differs from one-shot", name);
  lh_i32vec_free(&sv);
  test_threaded_stream(t, name, &doc);
  lh_i32vec_free(&doc_ids);
  lh_buf_free(&doc);
  lh_tokenizer_close(t);
}

int main(int argc, char **argv) {
  lh_test_begin("test_tokenizer_fixtures");
  test_components();
  const char *names[] = {"gpt2",    "gpt2-legacy-merges", "minimax", "llama3", "kitchen", "llama2", "subword",
                         "realworld/minimax-text-01-style", "realworld/llama3-style"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (argc < 2 || !strcmp(argv[1], names[i])) test_tokenizer(names[i]);
  return lh_test_end();
}
