/* test_batch.c — OpenAI batch input parsing, per-line errors, output line shape, and the native
 * MiniMax-Text-01 chat rendering (the expected strings are MiniMax-Text-01's published format);
 * then, one function each: what a line's raw bytes may hold (UTF-8, no NUL, no \u0000, one object,
 * no key twice in one object,
 * nesting the parser reaches),
 * duplicate custom_ids through the hash table against a plain pairwise reference, the made-up
 * "line-N" of a line without an id that no later line's real "line-N" repeats, output lines
 * that stay UTF-8 whatever they quote, reading a batch from a stream and standard input (one
 * read, its SHA-256, the size bound), the documents root, and document keys that do not depend on
 * how the batch file was named, and the template files transformers 5 saves (chat_template.jinja). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "jobs/batch.h"
#include "jobs/chat.h"
#include "tests/test.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/utf8.h"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(data, 1, n, f);
  fclose(f);
}

#define CHAT_LINE(id, content)                                                                        \
  "{\"custom_id\":\"" id "\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\"," \
  "\"content\":\"" content "\"}]}}"

static int is_utf8(const char *s, size_t n) { return lh_utf8_valid((const uint8_t *)s, n); }

/* A line is refused when its bytes are not UTF-8, hold NUL or \u0000 (which cJSON would decode and
 * cut the string at), or go on after the object; the message names the line, the column and the
 * key, and an id that is not exactly the line's string is never echoed. */
/* tokenizer_config.json's chat_template in shapes other than one string: a key given twice (Python's
 * json, which transformers reads it with, keeps the last, cJSON the first), a value that is not a
 * template, a list of named templates, each said for what it is rather than as "no template". */
static void test_chat_template_shapes(const char *mdir, const char *cfg) {
#define MM "{{'<beginning_of_sentence>user name=user\\\\n'}}{{'<beginning_of_sentence>ai name=assistant\\\\n'}}" \
           "{{'<end_of_sentence>'}}"
  static const struct {
    const char *json;
    lh_status st;
    int kind;
    const char *msg;
  } cases[] = {
      {"{\"chat_template\": \"" MM "\", \"chat_template\": \"{{m}}\"}", LH_EFORMAT, 0,
       "key \"chat_template\" appears more than once"},
      {"{\"chat_template\": \"" MM "\", \"added_tokens_decoder\": {\"1\": {}, \"1\": {}}}", LH_EFORMAT, 0,
       "key \"1\" appears more than once"},
      {"{\"chat_template\": 7}", LH_EFORMAT, 0, "chat_template is a number; expected a string"},
      {"{\"chat_template\": {\"default\": \"" MM "\"}}", LH_EFORMAT, 0, "chat_template is an object"},
      {"{\"chat_template\": [\"" MM "\"]}", LH_EFORMAT, 0, "chat_template[0] is not {\"name\""},
      {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"" MM "\"}]}", LH_EFORMAT, 0,
       "none is called \"default\""},
      {"[]", LH_EFORMAT, 0, "expected a JSON object"},
      {"{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{x}}\"}, {\"name\": \"default\", "
       "\"template\": \"" MM "\"}]}", LH_OK, LH_CHAT_MINIMAX, NULL},
      {"{\"chat_template\": null}", LH_OK, 0, NULL},
      {"{\"bos_token\": \"<s>\"}", LH_OK, 0, NULL},
  };
#undef MM
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    write_file(cfg, cases[i].json);
    lh_chat_format f;
    lh_error err = {0};
    const lh_status st = lh_chat_format_detect(mdir, NULL, &f, &err);
    CHECK_MSG(st == cases[i].st, "%s: got %s (%s)", cases[i].json, lh_status_name(st), err.msg);
    if (st == LH_OK) CHECK_EQ(f.kind, cases[i].kind);
    if (cases[i].msg) {
      CHECK_STR_CONTAINS(err.msg, cases[i].msg);
      CHECK_STR_CONTAINS(err.msg, "tokenizer_config.json");
    }
  }
}

static void test_raw_bytes_of_a_line(void) {
  lh_request r;
  const char bad_id[] = "{\"custom_id\":\"q\xfc\x80\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}";
  lh_request_parse(bad_id, sizeof bad_id - 1, 7, ".", &r);
  CHECK(r.error.code != LH_OK);
  CHECK_STR_CONTAINS(r.error.msg, "line 7: column 16 (after \"custom_id\")");
  CHECK_STR_CONTAINS(r.error.msg, "not UTF-8");
  CHECK(!strcmp(r.custom_id, "line-7"));
  CHECK(is_utf8(r.error.msg, strlen(r.error.msg)));
  lh_request_free(&r);

  const char *nul_id = "{\"custom_id\":\"a\\u0000b\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}";
  lh_request_parse(nul_id, strlen(nul_id), 2, ".", &r);
  CHECK(r.error.code != LH_OK);
  CHECK_STR_CONTAINS(r.error.msg, "line 2: column 16 (after \"custom_id\") holds \\u0000");
  CHECK(!strcmp(r.custom_id, "line-2"));
  lh_request_free(&r);

  /* \u0000 in a prompt would cut the prompt: refused, the valid id still echoed */
  const char *nul_text = CHAT_LINE("ok1", "before\\u0000after");
  lh_request_parse(nul_text, strlen(nul_text), 3, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "(after \"content\") holds \\u0000");
  CHECK(!strcmp(r.custom_id, "ok1"));
  lh_request_free(&r);

  /* an escaped backslash before u0000 is text, not NUL */
  const char *lit = CHAT_LINE("ok2", "a\\\\u0000b");
  lh_request_parse(lit, strlen(lit), 4, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  CHECK(r.n_messages == 1 && !strcmp(r.messages[0].content, "a\\u0000b"));
  lh_request_free(&r);

  /* invalid UTF-8 in a message (here a lone surrogate written raw) and a raw NUL byte */
  const char bad_text[] = CHAT_LINE("ok3", "x\xed\xa0\x80y");
  lh_request_parse(bad_text, sizeof bad_text - 1, 5, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "(after \"content\") holds bytes that are not UTF-8");
  CHECK(!strcmp(r.custom_id, "ok3"));
  lh_request_free(&r);
  const char raw_nul[] = CHAT_LINE("ok4", "x\0y");
  lh_request_parse(raw_nul, sizeof raw_nul - 1, 6, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "holds a NUL byte");
  lh_request_free(&r);

  /* valid non-ASCII, raw and escaped (a surrogate pair), comes through byte for byte */
  const char *uni = "{\"custom_id\":\"caf\xc3\xa9-\xf0\x9f\x98\x80\",\"url\":\"/v1/completions\","
                    "\"body\":{\"prompt\":\"\\ud83d\\ude00 \xe2\x82\xac\"}}";
  lh_request_parse(uni, strlen(uni), 8, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  CHECK(!strcmp(r.custom_id, "caf\xc3\xa9-\xf0\x9f\x98\x80"));
  CHECK(r.prompt && !strcmp(r.prompt, "\xf0\x9f\x98\x80 \xe2\x82\xac"));
  lh_request_free(&r);

  /* one object per line: a second object (or anything) after it is refused, spaces are not */
  const char *two = "{\"custom_id\":\"t1\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}} "
                    "{\"custom_id\":\"t2\"}";
  lh_request_parse(two, strlen(two), 9, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "line 9: text after the request's JSON object (column 66)");
  lh_request_free(&r);
  const char *spaces = "{\"custom_id\":\"t3\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}  \t";
  lh_request_parse(spaces, strlen(spaces), 10, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  lh_request_free(&r);

  /* valid JSON nested deeper than the parser goes is said so, not "not valid JSON"; 1000 levels
   * (the line's object, body, then metadata's arrays) still parse */
  for (int levels = 1000; levels <= 1001; levels++) {
    lh_buf deep = {0};
    lh_buf_printf(&deep, "{\"custom_id\":\"d\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"metadata\":");
    for (int i = 2; i < levels; i++) lh_buf_append(&deep, "[", 1);
    for (int i = 2; i < levels; i++) lh_buf_append(&deep, "]", 1);
    lh_buf_append_str(&deep, "}}");
    lh_request_parse(deep.data, deep.len, 11, ".", &r);
    if (levels == 1000) {
      CHECK_EQ(r.error.code, LH_OK);
    } else {
      CHECK_STR_CONTAINS(r.error.msg, "line 11: arrays and objects nest more than 1000 deep (column 1072)");
    }
    lh_request_free(&r);
    lh_buf_free(&deep);
  }
  /* brackets in a string, behind an escaped quote, do not count, and the column counts bytes (é is
   * two): the same line with 8 more bytes in its prompt is placed 8 columns on */
  lh_buf deep = {0};
  lh_buf_printf(&deep, "{\"custom_id\":\"d\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\\\"[[{{\xc3\xa9\","
                       "\"metadata\":");
  for (int i = 2; i < 1001; i++) lh_buf_append(&deep, "[", 1);
  for (int i = 2; i < 1001; i++) lh_buf_append(&deep, "]", 1);
  lh_buf_append_str(&deep, "}}");
  lh_request_parse(deep.data, deep.len, 12, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "line 12: arrays and objects nest more than 1000 deep (column 1080): longhaul reads "
                                  "no deeper");
  lh_request_free(&r);
  lh_buf_free(&deep);
}

/* A key given twice in one object refuses the line, naming the key: cJSON reads the first value
 * and Python's json the last, so a line with two "documents" ran over the first list while the
 * tool that wrote it meant the second. A line with two custom_ids echoes neither. */
/* A message without text is refused, naming the message (and the part): run as an empty turn it
 * would be answered as a question nobody asked. */
static void test_message_content(void) {
  static const struct {
    const char *messages, *says;
  } cases[] = {
      {"[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\"}]",
       "line 3: body.messages[1] has no content (no \"content\" key)"},
      {"[{\"role\":\"user\",\"content\":null}]", "body.messages[0] has no content (it is null)"},
      {"[{\"role\":\"user\",\"content\":[]}]", "body.messages[0].content is an empty array"},
      {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},\"b\"]}]",
       "body.messages[0].content[1]: only"},
      {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\"}]}]",
       "body.messages[0].content[1]: only"},
      {"[{\"role\":\"user\",\"content\":7}]", "body.messages[0].content must be a string"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char line[512];
    snprintf(line, sizeof line, "{\"custom_id\":\"m%zu\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":%s}}",
             i, cases[i].messages);
    lh_request r;
    lh_request_parse(line, strlen(line), 3, ".", &r);
    CHECK_MSG(r.error.code == LH_EFORMAT, "accepted: %s", line);
    CHECK_STR_CONTAINS(r.error.msg, cases[i].says);
    lh_request_free(&r);
  }
  /* what is text: an empty string, and text parts (empty ones too), joined as they come */
  const char *ok = "{\"custom_id\":\"m\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":["
                   "{\"role\":\"system\",\"content\":\"\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                   "\"text\":\"\"},{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}]}}";
  lh_request r;
  lh_request_parse(ok, strlen(ok), 1, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  CHECK(r.n_messages == 2 && !strcmp(r.messages[0].content, "") && !strcmp(r.messages[1].content, "ab"));
  lh_request_free(&r);
}

static void test_repeated_keys(void) {
  static const struct {
    const char *line, *key;
  } cases[] = {
      {"{\"custom_id\":\"r1\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"documents\":[\"a.txt\"],"
       "\"documents\":[\"b.txt\"]}}",
       "documents"},
      {"{\"custom_id\":\"r2\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\","
       "\"documents\":[{\"path\":\"a.txt\",\"path\":\"b.txt\"}]}}",
       "path"},
      {"{\"custom_id\":\"r3\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
       "\"content\":\"a\",\"content\":\"b\"}]}}",
       "content"},
      {"{\"custom_id\":\"r4\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"},\"body\":{\"prompt\":\"y\"}}",
       "body"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    lh_request r;
    lh_request_parse(cases[i].line, strlen(cases[i].line), 3, ".", &r);
    CHECK(r.error.code != LH_OK);
    char want[64];
    snprintf(want, sizeof want, "line 3: key \"%s\" appears more than once", cases[i].key);
    CHECK_STR_CONTAINS(r.error.msg, want);
    char id[8];
    snprintf(id, sizeof id, "r%zu", i + 1);
    CHECK(!strcmp(r.custom_id, id)); /* the line's one id is still echoed */
    lh_request_free(&r);
  }
  const char *two_ids = "{\"custom_id\":\"a\",\"custom_id\":\"b\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}";
  lh_request r;
  lh_request_parse(two_ids, strlen(two_ids), 4, ".", &r);
  CHECK_STR_CONTAINS(r.error.msg, "line 4: key \"custom_id\" appears more than once");
  CHECK(!strcmp(r.custom_id, "line-4"));
  lh_request_free(&r);
  /* the same key in different objects is no repeat */
  const char *fine = "{\"custom_id\":\"f\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\","
                     "\"metadata\":{\"prompt\":1,\"m\":{\"prompt\":2}}}}";
  lh_request_parse(fine, strlen(fine), 5, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  lh_request_free(&r);
}

/* A glob ingest would refuse (empty, or naming only the root) fails its line with a 400 naming the
 * field, as other field errors do: it ran, and failed as "documents that cannot be read", tried
 * again on every run. Patterns ingest takes pass. */
static void test_bad_globs_fail_their_line(void) {
  static const struct {
    const char *docs, *want;
  } cases[] = {
      {"[{\"path\":\"a\",\"exclude\":[\"\"]}]", "line 2: body.documents[0]: empty glob pattern"},
      {"[\"b\",{\"path\":\"a\",\"include\":\"./\"}]", "line 2: body.documents[1]: glob './' names only the root"},
      {"[{\"path\":\"a\",\"include\":[\"*.c\",\"./src/**\"],\"exclude\":\"/secrets\"}]", NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char line[512];
    snprintf(line, sizeof line, "{\"custom_id\":\"g\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\","
             "\"documents\":%s}}", cases[i].docs);
    lh_request r;
    lh_request_parse(line, strlen(line), 2, ".", &r);
    if (cases[i].want) CHECK_STR_CONTAINS(r.error.msg, cases[i].want);
    else CHECK_EQ(r.error.code, LH_OK);
    lh_request_free(&r);
  }
}

/* Duplicates: 6,000 lines over 1,500 ids (some lines malformed, some without an id); every line
 * whose id an earlier line used is refused naming both lines, exactly as a pairwise scan says. */
static void test_duplicate_custom_ids_against_pairwise_reference(void) {
  enum { N = 6000 };
  lh_buf b = {0};
  uint64_t x = 88172645463325252ull;
  static int idn[N], own[N]; /* the id number (-1: none read), and whether the line is bad anyway */
  for (int i = 0; i < N; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    idn[i] = (int)(x % 1500);
    own[i] = x % 29 == 0 || x % 31 == 0;
    if (x % 29 == 0) {
      lh_buf_printf(&b, "{\"custom_id\":\"id-%d\", broken\n", idn[i]); /* not JSON: no id read */
      idn[i] = -1;
    } else if (x % 31 == 0) { /* its own problem comes first; its id still counts as used */
      lh_buf_printf(&b, "{\"custom_id\":\"id-%d\",\"url\":\"/v1/embeddings\",\"body\":{}}\n", idn[i]);
    } else {
      lh_buf_printf(&b, "{\"custom_id\":\"id-%d\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\"}}\n",
                    idn[i]);
    }
  }
  lh_batch bt;
  lh_error err;
  CHECK_EQ(lh_batch_parse(b.data, b.len, "mem.jsonl", NULL, &bt, &err), LH_OK);
  CHECK_EQ(bt.n, N);
  int dups = 0, mismatches = 0;
  for (int i = 0; i < N && i < bt.n; i++) {
    int first = -1;
    for (int j = 0; j < i && idn[i] >= 0; j++)
      if (idn[j] == idn[i]) {
        first = j;
        break;
      }
    char want[128];
    snprintf(want, sizeof want, "line %d: custom_id \"id-%d\" was already used on line %d", i + 1, idn[i], first + 1);
    if (own[i]) {
      mismatches += bt.req[i].error.code == LH_OK || strstr(bt.req[i].error.msg, "already used") != NULL;
    } else if (first >= 0) {
      dups++;
      mismatches += strcmp(bt.req[i].error.msg, want) != 0;
    } else {
      mismatches += strstr(bt.req[i].error.msg, "already used") != NULL;
    }
  }
  CHECK(dups > 3000);
  CHECK_EQ(mismatches, 0);
  lh_batch_free(&bt);
  lh_buf_free(&b);
}

/* A line without a usable custom_id is called "line-N" in the output; that made-up name is no
 * line's id, so a later line really called "line-N" runs, and two such later lines are still
 * duplicates of each other. */
static void test_made_up_ids_are_no_duplicates(void) {
  const char *text = "not json\n"
                     "{\"custom_id\":\"line-1\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}\n"
                     "{\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}\n"
                     "{\"custom_id\":\"line-3\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\"}}\n"
                     "{\"custom_id\":\"line-3\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"y\"}}\n";
  lh_batch b;
  lh_error err;
  CHECK_EQ(lh_batch_parse(text, strlen(text), "mem.jsonl", NULL, &b, &err), LH_OK);
  CHECK_EQ(b.n, 5);
  if (b.n == 5) {
    CHECK(!strcmp(b.req[0].custom_id, "line-1") && b.req[0].custom_id_made && b.req[0].error.code != LH_OK);
    CHECK_EQ(b.req[1].error.code, LH_OK);
    CHECK(!b.req[1].custom_id_made);
    CHECK_STR_CONTAINS(b.req[2].error.msg, "custom_id must be a non-empty string");
    CHECK(!strcmp(b.req[2].custom_id, "line-3") && b.req[2].custom_id_made);
    CHECK_EQ(b.req[3].error.code, LH_OK);
    CHECK_STR_CONTAINS(b.req[4].error.msg, "line 5: custom_id \"line-3\" was already used on line 4");
  }
  lh_batch_free(&b);
}

/* Output lines are valid UTF-8 and valid JSON whatever they quote: a byte-level answer that is not
 * UTF-8 gets U+FFFD per invalid subpart (as Python's decode(errors="replace") gives), and so does
 * an error message quoting a file name. */
static void test_output_lines_are_utf8(void) {
  lh_request r;
  lh_request_parse(CHAT_LINE("u1", "q"), strlen(CHAT_LINE("u1", "q")), 1, ".", &r);
  lh_buf out = {0};
  lh_completion c = {.text = "ok \xfc\x80 \xe2\x82", .finish_reason = "length", .model = "m\xff"};
  CHECK_EQ(lh_output_success(&out, &r, "batch_req_1", &c), LH_OK);
  CHECK(is_utf8(out.data, out.len));
  cJSON *j = cJSON_Parse(out.data);
  const cJSON *body = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "response"), "body");
  const cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(body, "choices"), 0), "message");
  /* b"ok \xfc\x80 \xe2\x82".decode("utf-8", "replace") == "ok \ufffd\ufffd \ufffd" */
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(msg, "content")),
                "ok \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd"));
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(body, "model")), "m\xef\xbf\xbd"));
  cJSON_Delete(j);
  lh_buf_clear(&out);
  CHECK_EQ(lh_output_error(&out, "u1", "batch_req_2", 400, "document_error", "docs/\xc0\xaf.txt: unreadable"), LH_OK);
  CHECK(is_utf8(out.data, out.len));
  j = cJSON_Parse(out.data);
  CHECK(!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")),
                "docs/\xef\xbf\xbd\xef\xbf\xbd.txt: unreadable"));
  cJSON_Delete(j);
  lh_buf_free(&out);
  lh_request_free(&r);
}

static void sha256_hex(const void *p, size_t n, char out[65]) {
  uint8_t d[32];
  lh_sha256_buf(p, n, d);
  lh_hex(d, 32, out);
}

/* A batch from a stream (a pipe, standard input) is read once: the same requests as the file, its
 * SHA-256 over the bytes read, relative documents under the current directory, a document "-"
 * refused when the batch is standard input, and a batch over max_bytes refused by name. */
static void test_batch_from_a_stream(void) {
  const char *text = CHAT_LINE("s1", "hi") "\n\n"
                     "{\"custom_id\":\"s2\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                     "\"documents\":[\"docs/a.txt\"]}}\n"
                     "{\"custom_id\":\"s3\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                     "\"documents\":[\"-\"]}}"; /* no final newline */
  char want[65];
  sha256_hex(text, strlen(text), want);
  char dir[512], path[600];
  lh_path_join(dir, sizeof dir, lh_test_tmpdir(), "stream");
  lh_mkdir_p(dir, NULL);
  lh_path_join(path, sizeof path, dir, "b.jsonl");
  write_file(path, text);

  lh_batch fb, pb;
  lh_error err;
  CHECK_EQ(lh_batch_load(path, &fb, &err), LH_OK);
  CHECK(!strcmp(fb.sha256, want));
  CHECK_EQ(fb.n, 3);
  CHECK_EQ(fb.req[2].line, 4);
  CHECK_EQ(fb.req[2].error.code, LH_OK); /* "-" is a document from standard input here */

  int fds[2];
  CHECK_EQ(pipe(fds), 0);
  CHECK_EQ(write(fds[1], text, strlen(text)), (long)strlen(text));
  close(fds[1]);
  FILE *f = fdopen(fds[0], "rb");
  CHECK_EQ(lh_batch_load_stream(f, "pipe", NULL, &pb, &err), LH_OK);
  fclose(f);
  CHECK(!strcmp(pb.sha256, want));
  CHECK(!strcmp(pb.path, "pipe"));
  CHECK_EQ(pb.n, 3);
  for (int i = 0; i < 3 && pb.n == 3; i++) CHECK(!strcmp(pb.req[i].custom_id, fb.req[i].custom_id));
  CHECK(pb.n >= 2 && !strcmp(pb.req[1].documents[0].resolved, "./docs/a.txt"));
  lh_batch_free(&pb);

  /* `run -`: the batch on standard input */
  FILE *saved = fdopen(dup(0), "rb");
  CHECK(freopen(path, "rb", stdin) != NULL);
  lh_batch sb;
  CHECK_EQ(lh_batch_load("-", &sb, &err), LH_OK);
  CHECK(!strcmp(sb.sha256, want) && !strcmp(sb.path, "-"));
  CHECK(sb.n == 3 && !strcmp(sb.req[1].documents[0].resolved, "./docs/a.txt"));
  CHECK(sb.n == 3 && sb.req[2].error.code != LH_OK);
  if (sb.n == 3) CHECK_STR_CONTAINS(sb.req[2].error.msg, "line 4: body.documents[0] is \"-\" (standard input), but the batch");
  lh_batch_free(&sb);
  dup2(fileno(saved), 0);
  fclose(saved);
  clearerr(stdin);

  /* the size bound, from a file (its size is known first) and from a stream */
  lh_batch_params p = lh_batch_default_params();
  p.max_bytes = 100;
  CHECK_EQ(lh_batch_load_params(path, &p, &pb, &err), LH_ELIMIT);
  CHECK_STR_CONTAINS(err.msg, "b.jsonl: the batch is");
  CHECK_STR_CONTAINS(err.msg, "over the 100");
  CHECK_EQ(pipe(fds), 0);
  CHECK_EQ(write(fds[1], text, strlen(text)), (long)strlen(text));
  close(fds[1]);
  f = fdopen(fds[0], "rb");
  CHECK_EQ(lh_batch_load_stream(f, "pipe", &p, &pb, &err), LH_ELIMIT);
  fclose(f);
  CHECK_STR_CONTAINS(err.msg, "pipe: the batch is over 100 bytes");
  CHECK_EQ(pb.n, 0);
  p.max_bytes = strlen(text); /* exactly at the bound is fine */
  CHECK_EQ(lh_batch_load_params(path, &p, &pb, &err), LH_OK);
  lh_batch_free(&pb);
  lh_batch_free(&fb);
}

/* --documents-root: every document must be in the tree once symbolic links are resolved. */
static void test_documents_root(void) {
  char top[512], root[600], p[700], outside[700], batch[700];
  CHECK(realpath(lh_test_tmpdir(), top) != NULL);
  lh_path_join(root, sizeof root, top, "root");
  lh_path_join(p, sizeof p, root, "sub");
  lh_mkdir_p(p, NULL);
  lh_path_join(p, sizeof p, root, "a.txt");
  write_file(p, "a");
  lh_path_join(p, sizeof p, root, "sub/b.txt");
  write_file(p, "b");
  lh_path_join(outside, sizeof outside, top, "outside.txt");
  write_file(outside, "secret");
  lh_path_join(p, sizeof p, root, "out");
  CHECK_EQ(symlink("../outside.txt", p), 0);
  lh_path_join(p, sizeof p, root, "in");
  CHECK_EQ(symlink("sub/b.txt", p), 0);
  lh_path_join(p, sizeof p, root, "up");
  CHECK_EQ(symlink("..", p), 0);
  lh_buf b = {0};
  const char *docs[] = {"a.txt", "sub/../a.txt", "in", "sub", "../outside.txt", outside, "out", "up/outside.txt",
                        "missing.txt", "-", NULL};
  for (int i = 0; docs[i]; i++)
    lh_buf_printf(&b, "{\"custom_id\":\"d%d\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                      "\"documents\":[\"%s\"]}}\n", i, docs[i]);
  char abs_in[700];
  lh_path_join(abs_in, sizeof abs_in, root, "a.txt");
  lh_buf_printf(&b, "{\"custom_id\":\"d10\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                    "\"documents\":[\"sub/b.txt\",\"%s\"]}}\n", abs_in);
  lh_path_join(batch, sizeof batch, root, "batch.jsonl");
  write_bytes(batch, b.data, b.len);

  /* without a root: behaviour as before, every path accepted as written */
  lh_batch bt;
  lh_error err;
  CHECK_EQ(lh_batch_load(batch, &bt, &err), LH_OK);
  CHECK_EQ(bt.n_bad, 0);
  lh_batch_free(&bt);

  lh_batch_params prm = lh_batch_default_params();
  prm.documents_root = root;
  CHECK_EQ(lh_batch_load_params(batch, &prm, &bt, &err), LH_OK);
  CHECK_EQ(bt.n, 11);
  if (bt.n == 11) {
    char want[800];
    lh_path_join(want, sizeof want, root, "a.txt");
    CHECK(bt.req[0].error.code == LH_OK && !strcmp(bt.req[0].documents[0].resolved, want));
    CHECK(bt.req[1].error.code == LH_OK && !strcmp(bt.req[1].documents[0].resolved, want));
    CHECK(!strcmp(bt.req[1].documents[0].path, "sub/../a.txt"));
    lh_path_join(want, sizeof want, root, "sub/b.txt");
    CHECK(bt.req[2].error.code == LH_OK && !strcmp(bt.req[2].documents[0].resolved, want)); /* a link inside */
    CHECK_EQ(bt.req[3].error.code, LH_OK);
    char m[2048];
    snprintf(m, sizeof m, "line 5: body.documents[0] \"../outside.txt\" is %s, outside the documents root %s", outside,
             root);
    CHECK_STR_CONTAINS(bt.req[4].error.msg, m);
    CHECK_STR_CONTAINS(bt.req[5].error.msg, "line 6: body.documents[0]");
    CHECK_STR_CONTAINS(bt.req[5].error.msg, "outside the documents root");
    snprintf(m, sizeof m, "line 7: body.documents[0] \"out\" is %s, outside the documents root %s", outside, root);
    CHECK_STR_CONTAINS(bt.req[6].error.msg, m);
    CHECK_STR_CONTAINS(bt.req[7].error.msg, "line 8: body.documents[0] \"up/outside.txt\" is");
    CHECK_STR_CONTAINS(bt.req[8].error.msg, "line 9: body.documents[0] \"missing.txt\": No such file or directory");
    CHECK_STR_CONTAINS(bt.req[9].error.msg, "line 10: body.documents[0] is \"-\" (standard input), which is outside");
    CHECK_EQ(bt.req[10].error.code, LH_OK);
    CHECK_EQ(bt.n_bad, 6);
  }
  lh_batch_free(&bt);

  /* a root given relative to the current directory, and a root that is no folder */
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  CHECK_EQ(chdir(top), 0);
  prm.documents_root = "root/sub/..";
  CHECK_EQ(lh_batch_load_params(batch, &prm, &bt, &err), LH_OK);
  CHECK_EQ(bt.n_bad, 6);
  lh_batch_free(&bt);
  prm.documents_root = "nowhere";
  CHECK_EQ(lh_batch_load_params(batch, &prm, &bt, &err), LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "documents root nowhere: No such file");
  prm.documents_root = "outside.txt";
  CHECK_EQ(lh_batch_load_params(batch, &prm, &bt, &err), LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "documents root outside.txt is not a folder");
  CHECK_EQ(chdir(cwd), 0);
  lh_buf_free(&b);
}

/* The same batch named by a relative and by an absolute path gives the same document keys (the
 * requests group, and shard, the same way), while the same spelling under another folder names
 * another file and another key. */
static void test_document_keys_do_not_depend_on_the_batch_name(void) {
  char top[512], dir[600], batch[700], other[700];
  CHECK(realpath(lh_test_tmpdir(), top) != NULL);
  lh_path_join(dir, sizeof dir, top, "named");
  lh_mkdir_p(dir, NULL);
  lh_path_join(batch, sizeof batch, dir, "batch.jsonl");
  lh_path_join(other, sizeof other, dir, "notes.txt");
  write_file(other, "notes");
  write_file(batch, "{\"custom_id\":\"k1\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                    "\"documents\":[\"notes.txt\",\"./gone/x.tar\"]}}\n");
  char cwd[4096];
  CHECK(getcwd(cwd, sizeof cwd) != NULL);
  lh_batch rel, abs_, up;
  lh_error err;
  CHECK_EQ(chdir(dir), 0);
  CHECK_EQ(lh_batch_load("batch.jsonl", &rel, &err), LH_OK);
  CHECK_EQ(lh_batch_load("../named/./batch.jsonl", &up, &err), LH_OK);
  CHECK_EQ(lh_batch_load(batch, &abs_, &err), LH_OK);
  char k1[65], k2[65], k3[65];
  lh_request_documents_key(&rel.req[0], k1);
  lh_request_documents_key(&abs_.req[0], k2);
  lh_request_documents_key(&up.req[0], k3);
  CHECK(strcmp(rel.req[0].documents[0].resolved, abs_.req[0].documents[0].resolved) != 0);
  CHECK(!strcmp(k1, k2));
  CHECK(!strcmp(k1, k3));
  CHECK(!strcmp(rel.sha256, abs_.sha256));
  /* the same line parsed against another folder: other files, another key */
  lh_request r;
  const char *line = "{\"custom_id\":\"k1\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\","
                     "\"documents\":[\"notes.txt\",\"./gone/x.tar\"]}}";
  lh_request_parse(line, strlen(line), 1, top, &r);
  lh_request_documents_key(&r, k3);
  CHECK(strcmp(k1, k3) != 0);
  lh_request_free(&r);
  CHECK_EQ(chdir(cwd), 0);
  lh_batch_free(&rel);
  lh_batch_free(&abs_);
  lh_batch_free(&up);
}

/* Template files beside tokenizer_config.json, as transformers 5 saves them: a folder re-saved by
 * transformers (tests/fixtures/runner/hf5-saved, tools/make_chat_template_fixture.py) is detected
 * and renders a conversation byte for byte as transformers' apply_chat_template did; the .jinja
 * file wins over tokenizer_config.json's key either way round; named templates without a default,
 * a FIFO, a NUL byte and an empty file are each said for what they are. */
static void test_template_files(void) {
  const char *fx = "tests/fixtures/runner/hf5-saved";
  lh_chat_format f;
  lh_error err = {0};
  CHECK_EQ(lh_chat_format_detect(fx, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  lh_buf msgs = {0}, want = {0}, line = {0}, got = {0};
  char p[600];
  lh_path_join(p, sizeof p, fx, "messages.json");
  CHECK_EQ(lh_file_read_regular(p, 1 << 20, &msgs, &err), LH_OK);
  lh_path_join(p, sizeof p, fx, "rendered.txt");
  CHECK_EQ(lh_file_read_regular(p, 1 << 20, &want, &err), LH_OK);
  lh_buf_append_str(&line, "{\"custom_id\":\"t\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":");
  for (size_t i = 0; i < msgs.len; i++) /* one line: messages.json is indented */
    if (msgs.data[i] != '\n') lh_buf_append(&line, msgs.data + i, 1);
  lh_buf_append_str(&line, "}}");
  lh_request r;
  lh_request_parse(line.data, line.len, 1, ".", &r);
  CHECK_EQ(r.error.code, LH_OK);
  CHECK_EQ(lh_chat_render(&f, &r, &got, &err), LH_OK);
  CHECK_MSG(got.len == want.len && !memcmp(got.data, want.data, want.len), "rendered:\n%s\ntransformers:\n%s",
            got.data, want.data);
  lh_request_free(&r);
  lh_buf_free(&msgs);
  lh_buf_free(&want);
  lh_buf_free(&line);
  lh_buf_free(&got);

  char mdir[512], cfg[600], jinja[600], named[600], file[700];
  lh_path_join(mdir, sizeof mdir, lh_test_tmpdir(), "model-jinja");
  lh_mkdir_p(mdir, NULL);
  lh_path_join(cfg, sizeof cfg, mdir, "tokenizer_config.json");
  lh_path_join(jinja, sizeof jinja, mdir, "chat_template.jinja");
  lh_path_join(named, sizeof named, mdir, "chat_templates");
  const char *mm = "{% for m in messages %}{{'<beginning_of_sentence>user name=user\\n'}}"
                   "{{'<beginning_of_sentence>ai name=assistant\\n'}}{{'<end_of_sentence>'}}{% endfor %}";
  const char *chatml = "{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}";
  char cfg_mm[512], cfg_chatml[256];
  snprintf(cfg_mm, sizeof cfg_mm, "{\"chat_template\": \"{%% for m in messages %%}{{'<beginning_of_sentence>user "
           "name=user\\\\n'}}{{'<beginning_of_sentence>ai name=assistant\\\\n'}}{{'<end_of_sentence>'}}{%% endfor %%}\"}");
  snprintf(cfg_chatml, sizeof cfg_chatml, "{\"chat_template\": \"%s\"}", chatml);
  write_file(cfg, cfg_mm); /* the key alone: MiniMax */
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  write_file(jinja, chatml); /* the file wins over the key */
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "chat_template.jinja: its chat template is not one");
  write_file(cfg, cfg_chatml);
  write_file(jinja, mm);
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  write_bytes(jinja, "{{'<beginning_of_sentence>'}}\0user name=user", 45);
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "NUL byte");
  write_file(jinja, ""); /* an empty template: none, as if absent (chat requests then say so) */
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, 0);
  unlink(jinja);
  CHECK_EQ(mkfifo(jinja, 0644), 0); /* never opened for reading: no hang */
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "chat_template.jinja");
  unlink(jinja);
  /* chat_templates/: a default.jinja is the default; named ones alone leave it unsaid */
  lh_mkdir_p(named, NULL);
  lh_path_join(file, sizeof file, named, "tool_use.jinja");
  write_file(file, mm);
  write_file(cfg, cfg_mm);
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "holds named chat templates");
  lh_path_join(file, sizeof file, named, "default.jinja");
  write_file(file, mm);
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  /* no template anywhere: a chat request is refused naming both places */
  unlink(file);
  lh_path_join(file, sizeof file, named, "tool_use.jinja");
  unlink(file);
  rmdir(named);
  write_file(cfg, "{}");
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, 0);
  lh_request_parse(CHAT_LINE("n", "hi"), strlen(CHAT_LINE("n", "hi")), 1, ".", &r);
  CHECK_EQ(lh_chat_render(&f, &r, &got, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "no chat_template.jinja or an empty one, and no chat_template in tokenizer_config.json");
  lh_request_free(&r);
  lh_buf_free(&got);
}

int main(void) {
  lh_test_begin("test_batch");
  test_bad_globs_fail_their_line();
  char path[512];
  lh_path_join(path, sizeof path, lh_test_tmpdir(), "batch.jsonl");
  write_file(path,
             "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\","
             "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":"
             "\"text\",\"text\":\"Which file?\"}]}],\"max_completion_tokens\":12,\"temperature\":0,\"seed\":7,"
             "\"stop\":[\"\\n\\n\",\"END\"],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":[\"*.md\"],"
             "\"frame\":\"<<{path}>>\"}]}}\n"
             "\n"
             "{\"custom_id\":\"b\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"Once\",\"max_tokens\":5}}\n"
             "{not json\n"
             "{\"custom_id\":\"a\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"dup\"}}\n"
             "{\"custom_id\":\"c\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}}\n"
             "{\"custom_id\":\"d\",\"url\":\"/v1/embeddings\",\"body\":{}}\n"
             "{\"custom_id\":\"e\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}}\n"
             "{\"custom_id\":\"f\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}}\n"
             "{\"custom_id\":\"g\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[],\"stop\":\"x\"}}\n");
  lh_batch b;
  lh_error err;
  CHECK_EQ(lh_batch_load(path, &b, &err), LH_OK);
  CHECK_EQ(b.n, 9);
  CHECK_EQ(b.n_bad, 7);
  lh_request *a = &b.req[0];
  CHECK_EQ(a->error.code, LH_OK);
  CHECK(!strcmp(a->custom_id, "a"));
  CHECK_EQ(a->endpoint, LH_EP_CHAT);
  CHECK_EQ(a->n_messages, 2);
  CHECK(!strcmp(a->messages[1].content, "Which file?"));
  CHECK_EQ(a->max_tokens, 12);
  CHECK(a->temperature == 0);
  CHECK(a->has_seed && a->seed == 7);
  CHECK_EQ(a->n_stop, 2);
  CHECK(!strcmp(a->stop[0], "\n\n"));
  CHECK_EQ(a->n_documents, 2);
  CHECK(strstr(a->documents[0].resolved, "/repo.tar.gz") != NULL);
  CHECK(!strcmp(a->documents[1].resolved, "/abs/docs"));
  CHECK(!strcmp(a->documents[1].include[0], "*.md") && !a->documents[1].include[1]);
  CHECK(!strcmp(a->documents[1].frame, "<<{path}>>"));
  lh_request *bb = &b.req[1];
  CHECK_EQ(bb->error.code, LH_OK);
  CHECK_EQ(bb->line, 3);
  CHECK_EQ(bb->endpoint, LH_EP_COMPLETIONS);
  CHECK(!strcmp(bb->prompt, "Once"));
  CHECK(bb->temperature == 1.0);
  CHECK_STR_CONTAINS(b.req[2].error.msg, "line 4: not valid JSON");
  CHECK(!strcmp(b.req[2].custom_id, "line-4"));
  CHECK_STR_CONTAINS(b.req[3].error.msg, "already used on line 1");
  CHECK_STR_CONTAINS(b.req[4].error.msg, "only one choice");
  CHECK_STR_CONTAINS(b.req[5].error.msg, "/v1/embeddings");
  CHECK_STR_CONTAINS(b.req[6].error.msg, "body.tools is not supported");
  CHECK_STR_CONTAINS(b.req[7].error.msg, "temperature");
  CHECK_STR_CONTAINS(b.req[8].error.msg, "non-empty");

  /* same documents -> same key; different -> different */
  char k1[65], k2[65], k3[65];
  lh_request_documents_key(&b.req[0], k1);
  lh_request r2;
  lh_request_parse("{\"custom_id\":\"z\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                   "\"content\":\"other\"}],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":\"*.md\","
                   "\"frame\":\"<<{path}>>\"}]}}",
                   190, 1, b.req[0].documents[0].resolved[0] == '/' ? "" : ".", &r2);
  lh_request_documents_key(&r2, k2);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  lh_request r3;
  const char *l3 = "{\"custom_id\":\"z\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                   "\"content\":\"other\"}],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":\"*.md\","
                   "\"frame\":\"<<{path}>>\"}]}}";
  lh_request_parse(l3, strlen(l3), 1, dir, &r3);
  lh_request_documents_key(&r3, k3);
  CHECK(strcmp(k1, k3) == 0);
  CHECK(strcmp(k1, k2) != 0 || !strcmp(dir, "."));
  lh_request_free(&r2);
  lh_request_free(&r3);

  /* chat rendering */
  lh_chat_format f;
  CHECK_EQ(lh_chat_format_detect(NULL, "minimax", &f, &err), LH_OK);
  lh_buf post = {0};
  CHECK_EQ(lh_chat_render(&f, a, &post, &err), LH_OK); /* the documents open the prompt, then every turn */
  CHECK(!strcmp(post.data, "<beginning_of_sentence>system ai_setting=assistant\nBe brief.<end_of_sentence>\n"
                           "<beginning_of_sentence>user name=user\nWhich file?<end_of_sentence>\n"
                           "<beginning_of_sentence>ai name=assistant\n"));
  lh_buf_free(&post);
  CHECK_EQ(lh_chat_render(&f, bb, &post, &err), LH_OK);
  CHECK(!strcmp(post.data, "Once"));
  lh_buf_free(&post);
  CHECK_EQ(lh_chat_format_detect(NULL, "jinja", &f, &err), LH_EINVAL);

  /* template detection from tokenizer_config.json */
  char mdir[512], cfg[600];
  lh_path_join(mdir, sizeof mdir, lh_test_tmpdir(), "model");
  lh_mkdir_p(mdir, NULL);
  lh_path_join(cfg, sizeof cfg, mdir, "tokenizer_config.json");
  write_file(cfg, "{\"chat_template\": \"{% for m in messages %}{{'<beginning_of_sentence>user name=user\\\\n'}}"
                  "{{'<beginning_of_sentence>ai name=assistant\\\\n'}}{{'<end_of_sentence>'}}{% endfor %}\"}");
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  write_file(cfg, "{\"chat_template\": \"{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}\"}");
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "--chat-template");
  test_chat_template_shapes(mdir, cfg);
  test_template_files();

  /* output lines parse back with the fields the OpenAI batch format has */
  lh_buf out = {0};
  lh_completion c = {.text = "src/x.c", .finish_reason = "stop", .prompt_tokens = 10, .completion_tokens = 3,
                     .created = 1700000000, .model = "haul-tiny"};
  CHECK_EQ(lh_output_success(&out, a, "batch_req_1", &c), LH_OK);
  CHECK_EQ(lh_output_error(&out, "line-4", "batch_req_2", 400, "invalid_request", b.req[2].error.msg), LH_OK);
  char *nl = strchr(out.data, '\n');
  CHECK(nl != NULL);
  cJSON *j1 = cJSON_ParseWithLength(out.data, (size_t)(nl - out.data));
  cJSON *j2 = cJSON_Parse(nl + 1);
  CHECK(j1 && j2);
  if (j1 && j2) {
    cJSON *resp = cJSON_GetObjectItem(j1, "response");
    CHECK_EQ(cJSON_GetObjectItem(resp, "status_code")->valuedouble, 200);
    cJSON *body = cJSON_GetObjectItem(resp, "body");
    CHECK(!strcmp(cJSON_GetObjectItem(body, "object")->valuestring, "chat.completion"));
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "choices"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content")->valuestring, "src/x.c"));
    CHECK_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(body, "usage"), "total_tokens")->valuedouble, 13);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j1, "error")));
    CHECK(!strcmp(cJSON_GetObjectItem(j2, "custom_id")->valuestring, "line-4"));
    CHECK_STR_CONTAINS(cJSON_GetObjectItem(cJSON_GetObjectItem(j2, "error"), "message")->valuestring, "line 4");
  }
  cJSON_Delete(j1);
  cJSON_Delete(j2);
  lh_buf_free(&out);
  lh_batch_free(&b);

  test_raw_bytes_of_a_line();
  test_message_content();
  test_repeated_keys();
  test_duplicate_custom_ids_against_pairwise_reference();
  test_made_up_ids_are_no_duplicates();
  test_output_lines_are_utf8();
  test_batch_from_a_stream();
  test_documents_root();
  test_document_keys_do_not_depend_on_the_batch_name();
  return lh_test_end();
}
