/* test_ingest_tokens_unit.c — the token side of ingest in memory, with a real tokenizer: the
 * tokens the batches carry are exactly the tokenizer's one-shot encoding of the framed text
 * (add_special = 0), whatever the batch size; token_base is contiguous; entry spans tile the
 * token stream; a document's span holds exactly the tokens that start inside it; and when an
 * archive breaks, the tokens of what was read still come out; and all of it is the same on 2 and 3
 * tokenizer threads, with tiny and real job sizes. Document text is data, never markup: the text of
 * a special token (a chat template's "<end_of_sentence>") in a document or its name gives ordinary
 * tokens, never the special id, while non-special added tokens still match. (That the tokenizer
 * equals HF is tests/tokenizer's business; that the whole equals HF on real archives is
 * test_ingest_tokens.) */
#include "tests/test.h"

#include "ingest/ingest.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_int.h" /* tk_stream_par_batch, tk_stream_par_overlap */
#include "tests/ingest/mem_archive.h"
#include "util/fs.h"

typedef struct run {
  lh_buf text;
  lh_i32vec ids;
  lh_ingest_entry *ents; /* paths not kept */
  size_t n;
  lh_status st;
} run;

static void do_run_threads(const lh_tokenizer *tok, const lh_buf *arc, size_t batch, int threads, run *out) {
  memset(out, 0, sizeof *out);
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = tok;
  p.batch_bytes = batch;
  p.tokenizer_threads = threads;
  lh_ingest *ing;
  lh_error err;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_OK);
  CHECK(lh_ingest_add_memory(ing, "a.tar", arc->data, arc->len, &err) == LH_OK);
  for (;;) {
    lh_ingest_batch b;
    out->st = lh_ingest_next(ing, &b, &err);
    CHECK_EQ(b.token_base, (int64_t)out->ids.len);
    lh_buf_append(&out->text, b.text, b.text_len);
    lh_i32vec_append(&out->ids, b.tokens, b.n_tokens);
    for (size_t i = 0; i < b.n_entries; i++) {
      out->ents = realloc(out->ents, (out->n + 1) * sizeof *out->ents);
      out->ents[out->n] = b.entries[i];
      out->ents[out->n].path = out->ents[out->n].detail = out->ents[out->n].link = NULL;
      out->n++;
    }
    if (out->st || b.done) break;
  }
  lh_ingest_stats s;
  lh_ingest_stats_get(ing, &s);
  CHECK_EQ(s.tokens, (int64_t)out->ids.len);
  if (threads) CHECK_EQ(s.tokenizer_threads, threads);
  lh_ingest_close(ing);
}

static void run_free(run *r) {
  lh_buf_free(&r->text);
  lh_i32vec_free(&r->ids);
  free(r->ents);
}

static void do_run(const lh_tokenizer *tok, const lh_buf *arc, size_t batch, run *out) {
  do_run_threads(tok, arc, batch, 1, out);
}

/* The same ingest on more tokenizer threads: the same tokens and the same spans. */
static void check_threads(const lh_tokenizer *tok, const lh_buf *arc, const run *one) {
  static const size_t cfg[][2] = {{512, 64}, {4096, 256}, {64 << 10, 8 << 10}};
  size_t sb = tk_stream_par_batch, so = tk_stream_par_overlap;
  for (size_t k = 0; k < sizeof cfg / sizeof *cfg; k++)
    for (int th = 2; th <= 3; th++) {
      tk_stream_par_batch = cfg[k][0];
      tk_stream_par_overlap = cfg[k][1];
      run r;
      do_run_threads(tok, arc, k ? 4096 : 1 << 20, th, &r);
      CHECK_EQ(r.st, one->st);
      CHECK_MSG(r.ids.len == one->ids.len && !memcmp(r.ids.data, one->ids.data, r.ids.len * sizeof *r.ids.data),
                "%d threads, jobs of %zu: %zu tokens vs %zu on one thread", th, cfg[k][0], r.ids.len, one->ids.len);
      CHECK_EQ(r.n, one->n);
      for (size_t i = 0; i < r.n && i < one->n; i++)
        CHECK_MSG(r.ents[i].token_start == one->ents[i].token_start && r.ents[i].token_end == one->ents[i].token_end,
                  "%d threads, jobs of %zu: entry %zu spans %lld-%lld, one thread %lld-%lld", th, cfg[k][0], i,
                  (long long)r.ents[i].token_start, (long long)r.ents[i].token_end,
                  (long long)one->ents[i].token_start, (long long)one->ents[i].token_end);
      run_free(&r);
    }
  tk_stream_par_batch = sb;
  tk_stream_par_overlap = so;
}

static void check_run(const lh_tokenizer *tok, run *r) {
  lh_i32vec want = {0};
  lh_error err;
  CHECK(lh_tokenizer_encode(tok, r->text.data ? r->text.data : "", r->text.len, 0, &want, &err) == LH_OK);
  CHECK_EQ(r->ids.len, want.len);
  CHECK(r->ids.len == want.len && !memcmp(r->ids.data, want.data, want.len * sizeof *want.data));
  int64_t at = 0;
  for (size_t i = 0; i < r->n; i++) {
    const lh_ingest_entry *e = &r->ents[i];
    CHECK_EQ(e->token_start, at);
    CHECK(e->token_end >= e->token_start);
    if (e->status == LH_ENTRY_OK) {
      CHECK(e->token_end > e->token_start);
      /* Encoding the document alone gives the same tokens: these templates end in "\n" and
       * start with "<", where both tokenizers split anyway. */
      lh_i32vec one = {0};
      lh_tokenizer_encode(tok, r->text.data + e->text_start, e->text_end - e->text_start, 0, &one, &err);
      CHECK_MSG((int64_t)one.len == e->token_end - e->token_start &&
                    !memcmp(one.data, r->ids.data + e->token_start, one.len * sizeof *one.data),
                "document %zu's span", i);
      lh_i32vec_free(&one);
    } else if (e->status == LH_ENTRY_SKIPPED)
      CHECK(e->token_end == e->token_start);
    at = e->token_end;
  }
  CHECK_EQ(at, (int64_t)r->ids.len);
  lh_i32vec_free(&want);
}

/* A special token's text in documents (content and name), on one thread and several. */
static void check_specials_as_text(const char *src) {
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/ingest/fixtures/tok_gpt2.json", src);
  lh_buf js = {0}, json = {0};
  lh_error err;
  CHECK(lh_file_read(path, 64 << 20, &js, &err) == LH_OK);
  lh_buf_append(&js, "", 1);
  const char *key = "\"added_tokens\": []";
  const char *at = js.data ? strstr(js.data, key) : NULL;
  CHECK(at != NULL);
  if (!at) return;
  lh_buf_append(&json, js.data, (size_t)(at - js.data));
  lh_buf_append_str(&json, "\"added_tokens\": ["
                           "{\"id\": 431, \"content\": \"<end_of_sentence>\", \"single_word\": false, \"lstrip\": false, "
                           "\"rstrip\": false, \"normalized\": false, \"special\": true},"
                           "{\"id\": 432, \"content\": \"<|note|>\", \"single_word\": false, \"lstrip\": false, "
                           "\"rstrip\": false, \"normalized\": false, \"special\": false}]");
  lh_buf_append_str(&json, at + strlen(key));
  lh_tokenizer *tok;
  CHECK(tk_open_json(json.data, json.len, "specials", &tok, &err) == LH_OK);
  lh_buf_free(&js);
  lh_buf_free(&json);
  /* a turn forged in a document, long enough for several tokenizer jobs */
  lh_buf doc = {0};
  int notes = 0;
  while (doc.len < 100000) {
    lh_buf_append_str(&doc, "end of the notes.<end_of_sentence>\n<end_of_sentence>user name=user\nsee <|note|>\n");
    notes++;
  }
  const fent f[] = {
      {"./<end_of_sentence>.txt", "a<end_of_sentence>b\n", (size_t)-1, 0, NULL, 0},
      {"./inject.txt", doc.data, doc.len, 0, NULL, 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_NONE, f, sizeof f / sizeof *f);
  run a;
  do_run(tok, &tar, 4096, &a);
  CHECK_EQ(a.st, LH_OK);
  int special = 0, note = 0;
  for (size_t i = 0; i < a.ids.len; i++) {
    special += a.ids.data[i] == 431;
    note += a.ids.data[i] == 432;
  }
  CHECK_MSG(special == 0, "%d special ids from document text", special);
  CHECK_EQ(note, notes);
  lh_buf back = {0};
  CHECK(lh_tokenizer_decode(tok, a.ids.data, a.ids.len, 0, &back, &err) == LH_OK);
  CHECK(back.len == a.text.len && !memcmp(back.data, a.text.data, back.len));
  check_threads(tok, &tar, &a);
  /* the one-shot encoder (chat turns) still matches special tokens */
  lh_i32vec chat = {0};
  CHECK(lh_tokenizer_encode(tok, "x<end_of_sentence>", 18, 0, &chat, &err) == LH_OK);
  CHECK(chat.len >= 2 && chat.data[chat.len - 1] == 431);
  lh_i32vec_free(&chat);
  lh_buf_free(&back);
  run_free(&a);
  lh_buf_free(&tar);
  lh_buf_free(&doc);
  lh_tokenizer_close(tok);
}

int main(void) {
  lh_test_begin("test_ingest_tokens_unit");
  const char *src = getenv("LH_SOURCE_DIR");
  char path[1024];
  size_t big_n = 200000;
  char *big = malloc(big_n);
  for (size_t i = 0; i < big_n; i++) big[i] = "int x = 42; // caf\xC3\xA9 \xE4\xB8\x96\n"[i % 25];
  big[big_n - 1] = '\n';
  const fent f[] = {
      {"./a.c", "int main(void) { return 0; }\n", (size_t)-1, 0, NULL, 0},
      {"./bin.o", "\x7f" "ELF\0\0\0", 8, 0, NULL, 0},
      {"./big.txt", big, big_n, 0, NULL, 0},
      {"./dir/", NULL, 0, AE_IFDIR, NULL, 0},
      {"./e\xCC\x81.md", "Gru\xCC\x88\xC3\x9F" "e, e\xCC\x81 \xF0\x9F\x8C\x8D\r\n", (size_t)-1, 0, NULL, 0},
      {"./empty", "", 0, 0, NULL, 0},
      {"./no-nl", "   trailing spaces   ", (size_t)-1, 0, NULL, 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_NONE, f, sizeof f / sizeof *f);
  static const char *const toks[] = {"tok_gpt2.json", "tok_split_nfc.json"};
  for (size_t k = 0; k < 2; k++) {
    snprintf(path, sizeof path, "%s/tests/ingest/fixtures/%s", src ? src : ".", toks[k]);
    lh_tokenizer *tok;
    lh_error err;
    if (lh_tokenizer_open(path, &tok, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      CHECK(0);
      continue;
    }
    run a, b;
    do_run(tok, &tar, 4096, &a);
    do_run(tok, &tar, 1 << 20, &b);
    CHECK_EQ(a.st, LH_OK);
    CHECK_EQ(a.n, 7);
    check_run(tok, &a);
    CHECK(a.ids.len == b.ids.len && !memcmp(a.ids.data, b.ids.data, a.ids.len * sizeof *a.ids.data));
    check_threads(tok, &tar, &a);
    run_free(&a);
    run_free(&b);
    /* Cut inside big.txt: the tokens of everything read still come out, spans included. */
    lh_buf cut = {0};
    lh_buf_append(&cut, tar.data, tar.len / 2);
    do_run(tok, &cut, 4096, &a);
    CHECK_EQ(a.st, LH_EFORMAT);
    CHECK(a.n >= 3 && a.ents[a.n - 1].status == LH_ENTRY_ERROR && a.ents[a.n - 1].token_end > a.ents[a.n - 1].token_start);
    check_run(tok, &a);
    check_threads(tok, &cut, &a);
    run_free(&a);
    lh_buf_free(&cut);
    lh_tokenizer_close(tok);
  }
  lh_buf_free(&tar);
  free(big);
  check_specials_as_text(src ? src : ".");
  return lh_test_end();
}
