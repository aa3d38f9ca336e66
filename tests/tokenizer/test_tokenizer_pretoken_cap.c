/* test_tokenizer_pretoken_cap.c — the pre-token length cap (tokenizer.h, "Long pre-tokens").
 *
 * What it proves:
 *   - below the cap nothing changes: for every committed HF fixture tokenizer, with the cap lowered
 *     to just above the longest pre-token of its ~1200 fixture texts, every text still encodes to
 *     HF's recorded ids (so at the default 1 MiB, text whose pre-tokens are shorter is HF's);
 *   - beyond the cap the documented rule holds: a run of n letters encodes as its cap-long parts,
 *     each encoded as a text of its own (the parts' ids are HF's, by the fixtures);
 *   - the ids never depend on how the text arrives: one-shot, a stream fed in random pieces, the
 *     threaded stream and the one-document threaded encoder agree on texts full of long runs;
 *   - a stream's memory stays bounded on a run with no boundary: 16 MiB of one letter never makes
 *     the stream hold more than a few caps of text, and ids come out while it is fed (before the
 *     cap, the whole run was held and encoded at the end at about 47 bytes per byte).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>

#include "tokenizer/tokenizer_int.h"
#include "tests/test.h"
#include "tests/tokenizer/fixture_json.h"

static const char *fix(const char *name) {
  static char p[4096];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/%s", src ? src : ".", name);
  return p;
}

static int same_ids(const lh_i32vec *a, const lh_i32vec *b) {
  return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len * sizeof *a->data));
}

static lh_tokenizer *open_fixture(const char *name) {
  char file[256];
  snprintf(file, sizeof file, "%s.tokenizer.json", name);
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  CHECK_MSG(lh_tokenizer_open(fix(file), &t, &err) == LH_OK, "%s: %s", name, err.msg);
  return t;
}

/* ---- below the cap: HF's ids ---- */

typedef struct tcase {
  lh_buf text;
  cJSON *ids;
} tcase;

static size_t load_cases(const char *name, tcase **out) {
  char file[256];
  snprintf(file, sizeof file, "%s.cases.jsonl", name);
  FILE *f = fopen(fix(file), "r");
  CHECK_MSG(f != NULL, "missing %s", fix(file));
  if (!f) return 0;
  size_t n = 0, cap = 0;
  char *line = NULL;
  size_t lcap = 0;
  while (getline(&line, &lcap, f) > 0) {
    cJSON *c = cJSON_Parse(line);
    if (!c) continue;
    if (n == cap) *out = realloc(*out, (cap = cap ? 2 * cap : 256) * sizeof **out);
    tcase *x = &(*out)[n++];
    memset(x, 0, sizeof *x);
    b64dec(cJSON_GetObjectItemCaseSensitive(c, "text_b64")->valuestring, &x->text);
    x->ids = cJSON_DetachItemFromObjectCaseSensitive(c, "ids");
    cJSON_Delete(c);
  }
  free(line);
  fclose(f);
  return n;
}

static void test_hf_below_cap(const char *name) {
  lh_tokenizer *t = open_fixture(name);
  if (!t) return;
  tcase *cs = NULL;
  size_t n = load_cases(name, &cs);
  CHECK(n > 100);
  /* the longest pre-token of any case (as HF's pre_tokenize_str shows them, ByteLevel-mapped,
   * so at least as long as the bytes the window measures) */
  size_t longest = 0;
  lh_error err = {0};
  for (size_t i = 0; i < n; i++) {
    lh_buf d = {0};
    CHECK(tk_pretokens(t, cs[i].text.data, cs[i].text.len, &d, &err) == LH_OK);
    for (size_t q = 0; q < d.len; q += strlen(d.data + q) + 1)
      if (strlen(d.data + q) > longest) longest = strlen(d.data + q);
    lh_buf_free(&d);
  }
  size_t saved = tk_pretoken_max;
  tk_pretoken_max = longest + 16;
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    lh_i32vec ids = {0};
    CHECK(lh_tokenizer_encode(t, cs[i].text.data, cs[i].text.len, 0, &ids, &err) == LH_OK);
    if (!ids_eq(&ids, cs[i].ids) && ++bad <= 3)
      fprintf(stderr, "%s: case %zu differs from HF with the cap at %zu bytes\n", name, i, tk_pretoken_max);
    lh_i32vec_free(&ids);
  }
  fprintf(stderr, "%s: %zu fixture texts, longest pre-token %zu bytes: with the cap at %zu, %d differ from HF\n",
          name, n, longest, tk_pretoken_max, bad);
  CHECK_EQ(bad, 0);
  tk_pretoken_max = saved;
  for (size_t i = 0; i < n; i++) {
    lh_buf_free(&cs[i].text);
    cJSON_Delete(cs[i].ids);
  }
  free(cs);
  lh_tokenizer_close(t);
}

/* ---- beyond the cap ---- */

static void encode(const lh_tokenizer *t, const char *s, size_t n, lh_i32vec *out) {
  lh_error err = {0};
  CHECK_MSG(lh_tokenizer_encode(t, s, n, 0, out, &err) == LH_OK, "%s", err.msg);
}

/* A run of one character (1 to 4 bytes) encodes as its cap-long parts, each on its own. */
static void check_parts(const lh_tokenizer *t, const char *name, const char *ch, size_t reps) {
  size_t cl = strlen(ch);
  lh_buf run = {0};
  for (size_t i = 0; i < reps; i++) lh_buf_append(&run, ch, cl);
  lh_i32vec whole = {0}, parts = {0};
  encode(t, run.data, run.len, &whole);
  size_t part = tk_pretoken_max / cl * cl; /* the window ends on a character boundary */
  for (size_t at = 0; at < run.len; at += part)
    encode(t, run.data + at, run.len - at < part ? run.len - at : part, &parts);
  CHECK_MSG(same_ids(&whole, &parts), "%s: a run of %zu x '%s' (%zu bytes, cap %zu): %zu ids, its parts %zu", name,
            reps, ch, run.len, tk_pretoken_max, whole.len, parts.len);
  lh_i32vec_free(&whole);
  lh_i32vec_free(&parts);
  lh_buf_free(&run);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static int stream_in_pieces(const lh_tokenizer *t, int threads, const char *s, size_t n, size_t maxp, lh_i32vec *out,
                            int64_t **offs, size_t *cap) {
  lh_tok_stream *st = NULL;
  lh_error err = {0};
  if (lh_tok_stream_open_threads(t, threads, &st, &err)) return -1;
  int rc = 0;
  for (size_t i = 0; i < n && !rc;) {
    size_t take = 1 + (size_t)(rnd() % maxp);
    if (take > n - i) take = n - i;
    rc = lh_tok_stream_feed(st, s + i, take, out, offs, cap, &err) != LH_OK;
    i += take;
  }
  if (!rc) rc = lh_tok_stream_finish(st, out, offs, cap, &err) != LH_OK;
  if (rc) fprintf(stderr, "stream: %s\n", err.msg);
  lh_tok_stream_close(st);
  return rc;
}

/* Long runs of every kind between ordinary text: one-shot, streams and threads agree. */
static void check_paths_agree(const lh_tokenizer *t, const char *name) {
  static const char *const runs[] = {"a", "Z", " ", "=", "7", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\n",
                                     "ab", "\xcc\x81"};
  lh_buf x = {0};
  for (int i = 0; i < 40; i++) {
    lh_buf_append_str(&x, "Ordinary text, with words and 123 numbers; caf\xc3\xa9. ");
    const char *r = runs[rnd() % (sizeof runs / sizeof *runs)];
    size_t reps = (size_t)(rnd() % (4 * tk_pretoken_max));
    for (size_t k = 0; k < reps; k++) lh_buf_append_str(&x, r);
  }
  lh_i32vec one = {0};
  encode(t, x.data, x.len, &one);
  size_t saved_min = tk_stream_min_batch, sb = tk_stream_par_batch, so = tk_stream_par_overlap;
  for (int k = 0; k < 4; k++) {
    tk_stream_min_batch = k & 1 ? 4096 : 1;
    tk_stream_par_batch = k & 2 ? 4096 : 256;
    tk_stream_par_overlap = k & 2 ? 512 : 64;
    for (int th = 1; th <= 3; th += 2) {
      lh_i32vec s = {0};
      int64_t *offs = NULL;
      size_t cap = 0;
      int rc = stream_in_pieces(t, th, x.data, x.len, k & 1 ? 5000 : 97, &s, &offs, &cap);
      CHECK_MSG(!rc && same_ids(&s, &one), "%s: stream on %d thread(s), min batch %zu, batch %zu: %zu ids vs %zu "
                "one-shot", name, th, tk_stream_min_batch, tk_stream_par_batch, s.len, one.len);
      free(offs);
      lh_i32vec_free(&s);
    }
  }
  tk_stream_min_batch = saved_min;
  tk_stream_par_batch = sb;
  tk_stream_par_overlap = so;
  for (int th = 2; th <= 3; th++) {
    lh_i32vec p = {0};
    lh_error err = {0};
    int used = 0;
    CHECK(tk_encode_parallel_sized(t, x.data, x.len, th, 64, &p, &used, &err) == LH_OK);
    CHECK_MSG(same_ids(&p, &one), "%s: one-document encoder on %d threads: %zu ids vs %zu", name, th, p.len, one.len);
    lh_i32vec_free(&p);
  }
  lh_i32vec_free(&one);
  lh_buf_free(&x);
}

static void test_beyond_cap(const char *name, int parts_rule) {
  lh_tokenizer *t = open_fixture(name);
  if (!t) return;
  size_t saved = tk_pretoken_max;
  tk_pretoken_max = 64;
  if (parts_rule) {
    check_parts(t, name, "x", 64 * 5 + 17);
    check_parts(t, name, "x", 64 * 3);
    check_parts(t, name, "\xe4\xb8\xad", 100); /* 3-byte characters: parts of 63 bytes */
    check_parts(t, name, "=", 1000);
  }
  check_paths_agree(t, name);
  tk_pretoken_max = saved;
  lh_tokenizer_close(t);
}

/* ---- a stream's memory on a run with no boundary ---- */

static void test_stream_bounded(const char *name) {
  lh_tokenizer *t = open_fixture(name);
  if (!t) return;
  for (int threads = 1; threads <= 2; threads++) {
    lh_tok_stream *s = NULL;
    lh_error err = {0};
    CHECK(lh_tok_stream_open_threads(t, threads, &s, &err) == LH_OK);
    size_t block = 1 << 16, total = (size_t)16 << 20, most = 0, ids_midway = 0;
    char *b = malloc(block);
    memset(b, 'a', block);
    lh_i32vec ids = {0};
    int64_t *offs = NULL;
    size_t cap = 0;
    for (size_t fed = 0; fed < total; fed += block) {
      CHECK(lh_tok_stream_feed(s, b, block, &ids, &offs, &cap, &err) == LH_OK);
      if (tk_stream_buffered(s) > most) most = tk_stream_buffered(s);
      if (fed + block == total / 2) ids_midway = ids.len;
    }
    CHECK(lh_tok_stream_finish(s, &ids, &offs, &cap, &err) == LH_OK);
    fprintf(stderr, "%s, %d thread(s): 16 MiB of one letter held at most %zu bytes of text; %zu of %zu ids out "
            "midway\n", name, threads, most, ids_midway, ids.len);
    CHECK_MSG(most <= 8 * tk_pretoken_max, "the stream held %zu bytes (cap %zu)", most, tk_pretoken_max);
    CHECK(ids_midway > 0);
    /* the same ids as one-shot */
    lh_i32vec one = {0};
    char *all = malloc(total);
    memset(all, 'a', total);
    encode(t, all, total, &one);
    CHECK(same_ids(&one, &ids));
    free(all);
    free(b);
    free(offs);
    lh_i32vec_free(&ids);
    lh_i32vec_free(&one);
    lh_tok_stream_close(s);
  }
  lh_tokenizer_close(t);
}

int main(void) {
  lh_test_begin("test_tokenizer_pretoken_cap");
  static const char *const all[] = {"minimax", "gpt2", "gpt2-legacy-merges", "llama3", "llama2", "kitchen", "subword"};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) test_hf_below_cap(all[i]);
  /* the parts rule where the capped step is the only splitting one and adds nothing at starts */
  test_beyond_cap("minimax", 1);
  test_beyond_cap("gpt2", 1);
  test_beyond_cap("llama3", 1);
  test_beyond_cap("kitchen", 0);
  test_beyond_cap("subword", 0);
  test_beyond_cap("llama2", 0);
  test_stream_bounded("minimax");
  return lh_test_end();
}
