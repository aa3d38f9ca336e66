/* test_ingest_unit.c — ingest/ in memory: globs, UTF-8 repair, escaping, templates, and whole
 * ingests of archives written at test time by libarchive's own writer (tar, pax, cpio, zip, raw
 * gzip): entry decisions, caps, bombs, truncation, on_error, --sort path windows, batching and
 * cancellation. The real archive tools and the folder walker are exercised by the e2e tests.
 *
 * References: UTF-8 repair against the example of Unicode 15 §3.9 (Table 3-11) and the maximal
 * subpart rule it states; glob results from the syntax documented in ingest.h; archive contents
 * are the bytes the test wrote, SHA-256 from util/hash.h (itself checked against FIPS 180-4).
 */
#include "tests/test.h"

#include <archive.h>
#include <archive_entry.h>
#include <cjson/cJSON.h>

#include "ingest/ingest.h"
#include "ingest/ingest_internal.h"
#include "util/fs.h"
#include "util/hash.h"
#include "tests/ingest/mem_archive.h"

/* ---- globs ---- */

static int glob1(const char *pat, const char *path, int any_prefix) {
  lh_globset gs;
  lh_error err;
  const char *pats[1] = {pat};
  if (lh_globset_init(&gs, pats, 1, &err)) {
    fprintf(stderr, "glob '%s': %s\n", pat, err.msg);
    lh_globset_free(&gs);
    return -1;
  }
  int r = lh_globset_match(&gs, path, strlen(path), any_prefix);
  lh_globset_free(&gs);
  return r;
}

static void test_globs(void) {
  static const struct {
    const char *pat, *path;
    int inc, exc;
  } cases[] = {
      {"*.c", "src/a.c", 1, 1},          {"*.c", "a.h", 0, 0},
      {"*.c", "./x.c", 1, 1},            {"src/*.c", "./src/a.c", 1, 1},
      {"src/*.c", "src/sub/a.c", 0, 0},  {"src/**", "src/a/b.c", 1, 1},
      {"src/**", "src", 0, 0},           {"src/**", "srcx/a", 0, 0},
      {"**/test_*.py", "test_a.py", 1, 1}, {"**/test_*.py", "a/b/test_x.py", 1, 1},
      {"**/test_*.py", "a/btest_x.py", 0, 0}, {"a/**/b", "a/b", 1, 1},
      {"a/**/b", "a/x/y/b", 1, 1},       {"a/**/b", "a/xb", 0, 0},
      {"node_modules", "x/node_modules/y.js", 0, 1}, {"build", "build/x", 0, 1},
      {"build", "rebuild/x", 0, 0},      {"src/gen", "src/gen/x.c", 0, 1},
      {"src/gen", "src/generated/x.c", 0, 0}, {"[a-c]?.txt", "b1.txt", 1, 1},
      {"[a-c]?.txt", "d1.txt", 0, 0},    {"[!a-c]*", "d", 1, 1},
      {"[^a-c]*", "a", 0, 0},            {"\\*.c", "*.c", 1, 1},
      {"\\*.c", "x.c", 0, 0},            {"**", "any/thing/at/all", 1, 1},
      {"a?c", "a/c", 0, 0},              {"dir/", "dir/", 1, 1},
      {"*.C", "x.c", 0, 0},              {"*", ".hidden", 1, 1},
      /* a leading "./" or "/" in a pattern is removed as in paths, and anchors it at the root */
      {"./secrets", "./secrets/key.txt", 0, 1}, {"./secrets", "secrets/key.txt", 0, 1},
      {"/secrets", "./secrets/key.txt", 0, 1},  {"./secrets", "x/secrets/key.txt", 0, 0},
      {"./secrets/key.txt", "./secrets/key.txt", 1, 1}, {"./secrets/", "secrets", 1, 1},
      {"/*.c", "./a.c", 1, 1},           {"/*.c", "src/a.c", 0, 0},
      {"./*.c", "a.c", 1, 1},            {"././/x", "./x", 1, 1},
      {"/src/**", "./src/a/b.c", 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    CHECK_MSG(glob1(cases[i].pat, cases[i].path, 0) == cases[i].inc, "include '%s' on '%s'", cases[i].pat,
              cases[i].path);
    CHECK_MSG(glob1(cases[i].pat, cases[i].path, 1) == cases[i].exc, "exclude '%s' on '%s'", cases[i].pat,
              cases[i].path);
  }
  const char *bad[] = {"[abc", "", "a\\", "[z-a]", "./", "/", "//", "././"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK_MSG(glob1(bad[i], "x", 0) == -1, "'%s' must be refused", bad[i]);
  /* A hostile name cannot make matching slow: 200,000 bytes against a backtracking-prone pattern. */
  size_t n = 200000;
  char *s = malloc(n + 1);
  memset(s, 'a', n);
  s[n] = 0;
  double t0 = lh_now();
  CHECK(glob1("*a*a*a*a*a*a*b", s, 0) == 0);
  CHECK(glob1("**/*a*a*a*b", s, 1) == 0);
  CHECK(lh_now() - t0 < 2.0);
  free(s);
}

/* ---- UTF-8 ---- */

static void repair_all_splits(const char *in, size_t n, const char *want, size_t wn, int64_t want_repl) {
  for (size_t cut = 0; cut <= n; cut++) {
    lh_utf8 u = {0};
    lh_buf out = {0};
    int64_t repl = 0;
    lh_utf8_repair(&u, (const uint8_t *)in, cut, 0, &out, &repl);
    lh_utf8_repair(&u, (const uint8_t *)in + cut, n - cut, 1, &out, &repl);
    CHECK_MSG(out.len == wn && !memcmp(out.data ? out.data : "", want, wn), "repair split at %zu", cut);
    CHECK_EQ(repl, want_repl);
    CHECK(lh_utf8_valid((const uint8_t *)(out.data ? out.data : ""), out.len));
    lh_buf_free(&out);
  }
  /* byte by byte */
  lh_utf8 u = {0};
  lh_buf out = {0};
  int64_t repl = 0;
  for (size_t i = 0; i < n; i++) lh_utf8_repair(&u, (const uint8_t *)in + i, 1, 0, &out, &repl);
  lh_utf8_repair(&u, NULL, 0, 1, &out, &repl);
  CHECK(out.len == wn && !memcmp(out.data ? out.data : "", want, wn));
  lh_buf_free(&out);
}

#define R "\xEF\xBF\xBD"
static void test_utf8(void) {
  /* Unicode 15 §3.9, Table 3-11: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 ->
   * 0061 FFFD FFFD FFFD 0062 FFFD 0063 FFFD FFFD 0064. */
  const char ex[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  const char exw[] = "a" R R R "b" R "c" R R "d";
  repair_all_splits(ex, sizeof ex - 1, exw, sizeof exw - 1, 6);
  static const struct {
    const char *in, *out;
    int repl;
  } c[] = {
      {"\xC0\x80", R R, 2},             /* overlong: C0 is never a lead */
      {"\xE0\x80\x80", R R R, 3},       /* E0 needs A0..BF next */
      {"\xED\xA0\x80", R R R, 3},       /* a surrogate */
      {"\xF4\x90\x80\x80", R R R R, 4}, /* past U+10FFFF */
      {"\xF0\x9F\x98", R, 1},           /* cut short at the end: one maximal subpart */
      {"\xF0\x9F\x98" "A", R "A", 1},
      {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80", 0},
      {"\xE2\x82\xAC\xE2\x82", "\xE2\x82\xAC" R, 1},
      {"\xFF\xFE", R R, 2},
      {"a\0b", "a\0b", 0},
      {"\xEF\xBB\xBFx\r\n", "\xEF\xBB\xBFx\r\n", 0},
  };
  for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
    size_t n = i == 9 ? 3 : strlen(c[i].in), wn = i == 9 ? 3 : strlen(c[i].out);
    repair_all_splits(c[i].in, n, c[i].out, wn, c[i].repl);
  }
  int64_t nul;
  size_t clean;
  CHECK_EQ(lh_utf8_invalid_bytes((const uint8_t *)"ab\xFF\xFE" "cd", 6, 1, 100, &nul, &clean), 2);
  CHECK_EQ(nul, -1);
  CHECK_EQ(lh_utf8_invalid_bytes((const uint8_t *)"ab\xE2\x82", 4, 0, 100, &nul, &clean), 0); /* unfinished, not final */
  CHECK_EQ(clean, 2);
  CHECK_EQ(lh_utf8_invalid_bytes((const uint8_t *)"ab\xE2\x82", 4, 1, 100, &nul, &clean), 2);
  CHECK_EQ(lh_utf8_invalid_bytes((const uint8_t *)"a\0", 2, 1, 100, &nul, &clean), 0);
  CHECK_EQ(nul, 1);
}

/* ---- escaping ---- */

static void test_escaping(void) {
  lh_ingest_entry e;
  memset(&e, 0, sizeof e);
  const char name[] = "dir/caf\xE9\n\"q\"\\\x01.txt";
  e.path = name;
  e.path_len = sizeof name - 1;
  e.detail = "";
  e.type = LH_ENTRY_FILE;
  e.status = LH_ENTRY_SKIPPED;
  e.reason = LH_REASON_BINARY;
  e.bytes = 5;
  e.token_start = e.token_end = -1;
  e.error_offset = -1;
  lh_buf line = {0};
  CHECK(lh_ingest_entry_json(&e, &line) == LH_OK);
  cJSON *j = cJSON_Parse(line.data);
  CHECK_MSG(j != NULL, "manifest line must parse: %s", line.data);
  if (j) {
    const cJSON *p = cJSON_GetObjectItem(j, "path"), *h = cJSON_GetObjectItem(j, "path_hex");
    CHECK(cJSON_IsString(p) && !strcmp(p->valuestring, "dir/caf" R "\n\"q\"\\\x01.txt"));
    char hex[2 * sizeof name];
    lh_hex((const uint8_t *)name, sizeof name - 1, hex);
    CHECK(cJSON_IsString(h) && !strcmp(h->valuestring, hex));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "token_start")));
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j, "sha256")));
    CHECK(!strcmp(cJSON_GetObjectItem(j, "reason")->valuestring, "binary"));
    cJSON_Delete(j);
  }
  lh_buf_free(&line);
  /* A valid UTF-8 name has no path_hex. */
  e.path = "ok/\xE2\x82\xAC.txt";
  e.path_len = strlen(e.path);
  CHECK(lh_ingest_entry_json(&e, &line) == LH_OK);
  CHECK(strstr(line.data, "path_hex") == NULL);
  CHECK_STR_CONTAINS(line.data, "\"ok/\xE2\x82\xAC.txt\"");
  lh_buf_free(&line);

  lh_buf d = {0};
  const char evil[] = "a\x1b[31mred\xE2\x80\xAEtxt.exe\\\xFF";
  lh_ingest_display_name(evil, sizeof evil - 1, 0, &d);
  CHECK(!strcmp(d.data, "a\\x1b[31mred\\u{202e}txt.exe\\\\\\xff"));
  lh_buf_free(&d);
  char longname[1000];
  memset(longname, 'x', sizeof longname);
  memcpy(longname + sizeof longname - 6, "/f.txt", 6);
  lh_ingest_display_name(longname, sizeof longname, 60, &d);
  CHECK(d.len == 60);
  CHECK_STR_CONTAINS(d.data, "...");
  CHECK(!strcmp(d.data + d.len - 6, "/f.txt"));
  lh_buf_free(&d);
  char shown[16];
  CHECK(!strcmp(lh_ingest_display_str("id\x1b]0;x\x07", 40, shown, sizeof shown), "id\\x1b]0;x\\x07"));
  CHECK(!strcmp(lh_ingest_display_str("0123456789abcdefghij", 40, shown, sizeof shown), "0123456789abcde"));
  CHECK(!strcmp(lh_ingest_display_str(NULL, 40, shown, sizeof shown), ""));

  lh_buf x = {0};
  lh_xml_escape(&x, "a&b<c>\"d'\n\xFF", 11);
  CHECK(!strcmp(x.data, "a&amp;b&lt;c&gt;&quot;d&apos;&#10;" R));
  lh_buf_free(&x);
}

/* ---- in-memory archives (libarchive's writer) ---- */

/* Everything one ingest produced. */
typedef struct got_entry {
  char *path, *detail, *link;
  lh_ingest_entry e;
} got_entry;
typedef struct got {
  lh_buf text;
  got_entry *ents;
  size_t n;
  int batches;
  lh_status st;
  char msg[LH_ERROR_MSG_MAX];
} got;

static void got_free(got *g) {
  for (size_t i = 0; i < g->n; i++) free(g->ents[i].path), free(g->ents[i].detail), free(g->ents[i].link);
  free(g->ents);
  lh_buf_free(&g->text);
  memset(g, 0, sizeof *g);
}

static char *dupn(const char *s, size_t n) {
  char *d = malloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

typedef struct mem_in {
  const char *name;
  const lh_buf *data;
} mem_in;

static void run_ingest(const lh_ingest_params *p, const mem_in *ins, size_t n_in, got *g) {
  memset(g, 0, sizeof *g);
  lh_error err = {0};
  lh_ingest *ing;
  g->st = lh_ingest_open(p, &ing, &err);
  if (g->st) {
    snprintf(g->msg, sizeof g->msg, "%s", err.msg);
    return;
  }
  for (size_t i = 0; i < n_in; i++) CHECK(lh_ingest_add_memory(ing, ins[i].name, ins[i].data->data, ins[i].data->len, &err) == LH_OK);
  uint64_t expect_base = 0;
  for (;;) {
    lh_ingest_batch b;
    lh_status st = lh_ingest_next(ing, &b, &err);
    g->batches++;
    CHECK_EQ(b.text_base, expect_base);
    expect_base += b.text_len;
    lh_buf_append(&g->text, b.text, b.text_len);
    for (size_t i = 0; i < b.n_entries; i++) {
      g->ents = realloc(g->ents, (g->n + 1) * sizeof *g->ents);
      got_entry *x = &g->ents[g->n++];
      x->e = b.entries[i];
      x->path = dupn(b.entries[i].path, b.entries[i].path_len);
      x->detail = dupn(b.entries[i].detail, strlen(b.entries[i].detail));
      x->link = b.entries[i].link ? dupn(b.entries[i].link, b.entries[i].link_len) : NULL;
      x->e.path = x->path;
      x->e.detail = x->detail;
      x->e.link = x->link;
    }
    if (st) {
      g->st = st;
      snprintf(g->msg, sizeof g->msg, "%s", err.msg);
      /* A failed handle keeps failing the same way. */
      lh_error err2 = {0};
      CHECK(lh_ingest_next(ing, &b, &err2) == st);
      CHECK(!strcmp(err2.msg, g->msg));
      break;
    }
    if (b.done) break;
  }
  lh_ingest_stats s;
  lh_ingest_stats_get(ing, &s);
  CHECK_EQ(s.entries, (int64_t)g->n);
  CHECK_EQ(s.text_bytes, (int64_t)g->text.len);
  lh_ingest_close(ing);
}

static const got_entry *find(const got *g, const char *path) {
  for (size_t i = 0; i < g->n; i++)
    if (!strcmp(g->ents[i].path, path)) return &g->ents[i];
  return NULL;
}

static void sha_hex_of(const char *p, size_t n, char out[65]) {
  uint8_t d[32];
  lh_sha256_buf(p, n, d);
  lh_hex(d, 32, out);
}

static int entry_sha_is(const got_entry *x, const char *p, size_t n) {
  char a[65], b[65];
  if (!x->e.has_sha256) return 0;
  sha_hex_of(p, n, a);
  lh_hex(x->e.sha256, 32, b);
  return !strcmp(a, b);
}

static void test_basic_tar(void) {
  char bin[300];
  for (size_t i = 0; i < sizeof bin; i++) bin[i] = (char)(i * 7);
  const fent files[] = {
      {"./src/", NULL, 0, AE_IFDIR, NULL, 0},
      {"./src/a.c", "int x;\n", (size_t)-1, 0, NULL, 0},
      {"./src/bin.o", bin, sizeof bin, 0, NULL, 0},
      {"./latin1.txt", "caf\xE9\n", (size_t)-1, 0, NULL, 0},
      {"./ln", NULL, 0, AE_IFLNK, "../../etc/passwd", 0},
      {"./empty", "", 0, 0, NULL, 0},
      {"./no-newline.md", "x <y> & \"z\"", (size_t)-1, 0, NULL, 0},
      {"/abs/../evil.txt", "evil\n", (size_t)-1, 0, NULL, 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP, files, sizeof files / sizeof *files);
  lh_ingest_params p = lh_ingest_default_params();
  mem_in in = {"t.tar.gz", &tar};
  got g;
  run_ingest(&p, &in, 1, &g);
  CHECK_EQ(g.st, LH_OK);
  CHECK_EQ(g.n, 8);
  const got_entry *x;
  CHECK((x = find(&g, "./src/")) && x->e.type == LH_ENTRY_DIR && x->e.reason == LH_REASON_DIRECTORY && x->e.bytes == -1);
  CHECK((x = find(&g, "./src/a.c")) && x->e.status == LH_ENTRY_OK && x->e.bytes == 7 && entry_sha_is(x, "int x;\n", 7));
  CHECK((x = find(&g, "./src/bin.o")) && x->e.status == LH_ENTRY_SKIPPED && x->e.reason == LH_REASON_BINARY);
  if (x) CHECK_STR_CONTAINS(x->detail, "NUL byte at offset 0");
  CHECK((x = find(&g, "./latin1.txt")) && x->e.status == LH_ENTRY_OK && x->e.invalid_utf8 == 1 &&
        entry_sha_is(x, "caf\xE9\n", 5));
  CHECK((x = find(&g, "./ln")) && x->e.type == LH_ENTRY_SYMLINK && x->e.reason == LH_REASON_LINK && x->e.link &&
        !strcmp(x->e.link, "../../etc/passwd"));
  CHECK((x = find(&g, "./empty")) && x->e.status == LH_ENTRY_OK && x->e.bytes == 0);
  CHECK((x = find(&g, "/abs/../evil.txt")) && x->e.status == LH_ENTRY_OK);
  const char *want =
      "<document path=\"src/a.c\">\nint x;\n</document>\n"
      "<document path=\"latin1.txt\">\ncaf" R "\n</document>\n"
      "<document path=\"empty\">\n</document>\n"
      "<document path=\"no-newline.md\">\nx <y> & \"z\"\n</document>\n"
      "<document path=\"/abs/../evil.txt\">\nevil\n</document>\n";
  CHECK_MSG(g.text.len == strlen(want) && !memcmp(g.text.data, want, g.text.len), "framed text:\n%s", g.text.data);
  /* Spans tile the framed text in order. */
  uint64_t at = 0;
  for (size_t i = 0; i < g.n; i++) {
    CHECK_EQ(g.ents[i].e.text_start, at);
    CHECK(g.ents[i].e.text_end >= g.ents[i].e.text_start);
    CHECK_EQ(g.ents[i].e.token_start, -1);
    at = g.ents[i].e.text_end;
  }
  CHECK_EQ(at, g.text.len);
  got_free(&g);

  /* Templates: every placeholder. */
  p.template_text = "[{index}|{path}|{path_raw}|{input}]{{{text}}}{nl}({bytes} {sha256})\n";
  run_ingest(&p, &in, 1, &g);
  CHECK_EQ(g.st, LH_OK);
  char sha[65];
  sha_hex_of("int x;\n", 7, sha);
  char w2[256];
  snprintf(w2, sizeof w2, "[0|src/a.c|src/a.c|t.tar.gz]{int x;\n}(7 %s)\n", sha);
  CHECK_MSG(g.text.len > strlen(w2) && !memcmp(g.text.data, w2, strlen(w2)), "templated:\n%s", g.text.data);
  CHECK(strstr(g.text.data, "[3|no-newline.md|no-newline.md|t.tar.gz]{x <y> & \"z\"}\n(11 ") != NULL);
  got_free(&g);

  static const char *const bad[] = {"no text here", "{text}{text}", "{bytes}{text}", "{nope}{text}", "{text",
                                    "}{text}"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    p.template_text = bad[i];
    run_ingest(&p, &in, 1, &g);
    CHECK_MSG(g.st == LH_EINVAL, "template '%s' must be refused", bad[i]);
    CHECK_STR_CONTAINS(g.msg, "template");
    got_free(&g);
  }
  p.template_text = NULL;

  /* Globs through the whole path. */
  const char *inc[] = {"*.c", "*.md"}, *exc[] = {"src"};
  p.include = inc;
  p.n_include = 2;
  run_ingest(&p, &in, 1, &g);
  CHECK((x = find(&g, "./latin1.txt")) && x->e.reason == LH_REASON_NOT_INCLUDED);
  CHECK((x = find(&g, "./src/a.c")) && x->e.status == LH_ENTRY_OK);
  got_free(&g);
  p.exclude = exc;
  p.n_exclude = 1;
  run_ingest(&p, &in, 1, &g);
  CHECK((x = find(&g, "./src/a.c")) && x->e.reason == LH_REASON_EXCLUDED);
  CHECK((x = find(&g, "./src/")) && x->e.reason == LH_REASON_EXCLUDED);
  CHECK((x = find(&g, "./no-newline.md")) && x->e.status == LH_ENTRY_OK);
  got_free(&g);
  lh_buf_free(&tar);
}

/* Globs written as the archive's own names ("./secrets", as tar -tv shows them) exclude what they
 * name. Before, a pattern's leading "./" was kept while the paths' was removed, so --exclude
 * ./secrets excluded nothing and the key was framed. */
static void test_dot_slash_globs(void) {
  const fent files[] = {
      {"./secrets/", NULL, 0, AE_IFDIR, NULL, 0},
      {"./secrets/key.txt", "hunter2\n", (size_t)-1, 0, NULL, 0},
      {"./docs/secrets/ok.txt", "not the root's\n", (size_t)-1, 0, NULL, 0},
      {"./a.txt", "alpha\n", (size_t)-1, 0, NULL, 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_GNUTAR, ARCHIVE_FILTER_NONE, files, sizeof files / sizeof *files);
  const char *pats[] = {"./secrets", "/secrets", "./secrets/"};
  for (size_t i = 0; i < sizeof pats / sizeof *pats; i++) {
    lh_ingest_params p = lh_ingest_default_params();
    p.exclude = &pats[i];
    p.n_exclude = 1;
    mem_in in = {"dot.tar", &tar};
    got g;
    run_ingest(&p, &in, 1, &g);
    CHECK_EQ(g.st, LH_OK);
    const got_entry *x = find(&g, "./secrets/key.txt");
    CHECK_MSG(x && x->e.reason == LH_REASON_EXCLUDED, "--exclude %s must exclude ./secrets/key.txt", pats[i]);
    CHECK_MSG(!strstr(g.text.data ? g.text.data : "", "hunter2"), "--exclude %s: the key was framed", pats[i]);
    x = find(&g, "./docs/secrets/ok.txt");
    CHECK_MSG(x && x->e.status == LH_ENTRY_OK, "--exclude %s is anchored at the root", pats[i]);
    got_free(&g);
  }
  const char *inc[] = {"./a.txt"};
  lh_ingest_params p = lh_ingest_default_params();
  p.include = inc;
  p.n_include = 1;
  mem_in in = {"dot.tar", &tar};
  got g;
  run_ingest(&p, &in, 1, &g);
  const got_entry *x = find(&g, "./a.txt");
  CHECK(x && x->e.status == LH_ENTRY_OK);
  CHECK((x = find(&g, "./secrets/key.txt")) && x->e.reason == LH_REASON_NOT_INCLUDED);
  got_free(&g);
  lh_buf_free(&tar);
}

static void test_caps_and_binary(void) {
  char hundred[100];
  memset(hundred, 'x', sizeof hundred);
  hundred[99] = '\n';
  const fent files[] = {
      {"a", hundred, 100, 0, NULL, 0}, {"b", hundred, 100, 0, NULL, 0}, {"c", hundred, 100, 0, NULL, 0},
      {"d", hundred, 10, 0, NULL, 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, files, 4);
  mem_in in = {"caps.tar", &tar};
  lh_ingest_params p = lh_ingest_default_params();
  p.max_total_bytes = 250;
  got g;
  run_ingest(&p, &in, 1, &g);
  CHECK_EQ(g.st, LH_OK);
  CHECK(g.n == 4 && g.ents[0].e.status == LH_ENTRY_OK && g.ents[1].e.status == LH_ENTRY_OK);
  /* The prompt stays a prefix: once "c" does not fit, neither does the small "d". */
  CHECK(g.n == 4 && g.ents[2].e.reason == LH_REASON_TOTAL_CAP && g.ents[3].e.reason == LH_REASON_TOTAL_CAP);
  got_free(&g);
  p = lh_ingest_default_params();
  p.max_file_bytes = 99;
  run_ingest(&p, &in, 1, &g);
  CHECK(g.n == 4 && g.ents[0].e.reason == LH_REASON_TOO_LARGE && g.ents[0].e.bytes == 100 &&
        g.ents[3].e.status == LH_ENTRY_OK);
  got_free(&g);

  /* A raw gzip file has no declared size: over the cap it is cut, and marked partial. */
  lh_buf gz = {0};
  const fent one[] = {{"data", hundred, 100, 0, NULL, 0}};
  make_archive(&gz, ARCHIVE_FORMAT_RAW, ARCHIVE_FILTER_GZIP, one, 1);
  mem_in gin = {"notes.txt.gz", &gz};
  p.max_file_bytes = 40;
  run_ingest(&p, &gin, 1, &g);
  CHECK_EQ(g.st, LH_OK);
  CHECK(g.n == 1 && !strcmp(g.ents[0].path, "notes.txt") && g.ents[0].e.status == LH_ENTRY_PARTIAL &&
        g.ents[0].e.reason == LH_REASON_TOO_LARGE && g.ents[0].e.bytes == 40 && !g.ents[0].e.has_sha256);
  got_free(&g);
  p = lh_ingest_default_params();
  run_ingest(&p, &gin, 1, &g);
  CHECK(g.n == 1 && g.ents[0].e.status == LH_ENTRY_OK && entry_sha_is(&g.ents[0], hundred, 100));
  got_free(&g);

  /* Sniff window and invalid share. */
  char late_nul[64];
  memset(late_nul, 'a', sizeof late_nul);
  late_nul[40] = 0;
  char latin[100];
  for (size_t i = 0; i < sizeof latin; i++) latin[i] = i % 8 == 0 ? (char)0xE9 : 'e'; /* 13% invalid */
  const fent sf[] = {{"late_nul", late_nul, sizeof late_nul, 0, NULL, 0}, {"latin", latin, sizeof latin, 0, NULL, 0}};
  lh_buf t2 = {0};
  make_archive(&t2, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, sf, 2);
  mem_in in2 = {"s.tar", &t2};
  p.sniff_bytes = 16;
  run_ingest(&p, &in2, 1, &g);
  CHECK(g.n == 2 && g.ents[0].e.status == LH_ENTRY_OK); /* the NUL is past the window: kept */
  CHECK(memchr(g.text.data, 0, g.text.len) != NULL);
  got_free(&g);
  p.sniff_bytes = 1 << 20;
  run_ingest(&p, &in2, 1, &g);
  CHECK(g.n == 2 && g.ents[0].e.reason == LH_REASON_BINARY && g.ents[1].e.reason == LH_REASON_BINARY);
  if (g.n == 2) CHECK_STR_CONTAINS(g.ents[1].detail, "over 10% of the first 100 bytes are not UTF-8");
  got_free(&g);
  p.max_invalid_share = 0.2;
  run_ingest(&p, &in2, 1, &g);
  CHECK(g.n == 2 && g.ents[0].e.reason == LH_REASON_BINARY && g.ents[1].e.status == LH_ENTRY_OK &&
        g.ents[1].e.invalid_utf8 == 13);
  got_free(&g);
  lh_buf_free(&t2);
  lh_buf_free(&tar);
  lh_buf_free(&gz);
}

static void test_bomb_and_truncation(void) {
  /* 64 MiB of zeros behind gzip: about 64 KiB read. */
  const fent bomb[] = {{"zeros", "", 0, 0, NULL, 64u << 20}};
  lh_buf gz = {0}, ok = {0};
  make_archive(&gz, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_GZIP, bomb, 1);
  const fent fine[] = {{"fine.txt", "fine\n", (size_t)-1, 0, NULL, 0}};
  make_archive(&ok, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, fine, 1);
  mem_in ins[2] = {{"bomb.tar.gz", &gz}, {"ok.tar", &ok}};
  lh_ingest_params p = lh_ingest_default_params();
  p.ratio_grace_bytes = 4 << 20;
  got g;
  run_ingest(&p, ins, 2, &g);
  CHECK_EQ(g.st, LH_ELIMIT);
  CHECK_STR_CONTAINS(g.msg, "bomb.tar.gz");
  CHECK_STR_CONTAINS(g.msg, "ratio");
  /* The bomb is the entry being skipped when the ratio gave out. */
  CHECK(g.n >= 1 && !strcmp(g.ents[g.n - 1].path, "zeros") && g.ents[g.n - 1].e.status == LH_ENTRY_ERROR &&
        g.ents[g.n - 1].e.reason == LH_REASON_BOMB);
  CHECK(find(&g, "fine.txt") == NULL);
  got_free(&g);
  p.on_error = LH_INGEST_ON_ERROR_SKIP;
  run_ingest(&p, ins, 2, &g);
  CHECK_EQ(g.st, LH_OK);
  CHECK(find(&g, "fine.txt") && find(&g, "fine.txt")->e.status == LH_ENTRY_OK);
  got_free(&g);
  p = lh_ingest_default_params();
  p.max_decompressed_bytes = 8 << 20;
  run_ingest(&p, ins, 2, &g);
  CHECK_EQ(g.st, LH_ELIMIT);
  CHECK_STR_CONTAINS(g.msg, "decompression cap");
  got_free(&g);

  /* Truncated in the middle of a document: what was read is kept and framed. */
  char body[20000];
  for (size_t i = 0; i < sizeof body; i++) body[i] = (char)('a' + i % 26);
  const fent tf[] = {{"first.txt", "first\n", (size_t)-1, 0, NULL, 0}, {"long.txt", body, sizeof body, 0, NULL, 0}};
  lh_buf t = {0};
  make_archive(&t, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, tf, 2);
  t.len = 512 * 3 + 8000; /* header, first.txt, header, 8000 bytes of long.txt */
  mem_in tin = {"cut.tar", &t};
  p = lh_ingest_default_params();
  run_ingest(&p, &tin, 1, &g);
  CHECK_EQ(g.st, LH_EFORMAT);
  CHECK_STR_CONTAINS(g.msg, "long.txt");
  const got_entry *x = find(&g, "long.txt");
  CHECK(x && x->e.status == LH_ENTRY_ERROR && x->e.reason == LH_REASON_CORRUPT && x->e.error_offset > 0 &&
        x->e.bytes > 0 && x->e.bytes <= 8000);
  CHECK(find(&g, "first.txt") && find(&g, "first.txt")->e.status == LH_ENTRY_OK);
  CHECK(g.text.len > 6 && !memcmp(g.text.data + g.text.len - 12, "</document>\n", 12)); /* well-formed */
  got_free(&g);
  lh_buf_free(&gz);
  lh_buf_free(&ok);
  lh_buf_free(&t);
}

static void test_sorted(void) {
  /* Ten documents in reverse order, plus a directory and a link; sort_memory below one document
   * forces a pass per document. */
  fent f[12];
  char names[10][16], bodies[10][64];
  for (int i = 0; i < 10; i++) {
    snprintf(names[i], sizeof names[i], "./d/f%02d.txt", 9 - i);
    snprintf(bodies[i], sizeof bodies[i], "body of %d, long enough to need its own window\n", 9 - i);
    f[i] = (fent){names[i], bodies[i], (size_t)-1, 0, NULL, 0};
  }
  f[10] = (fent){"./d/", NULL, 0, AE_IFDIR, NULL, 0};
  f[11] = (fent){"./a-link", NULL, 0, AE_IFLNK, "d/f00.txt", 0};
  static const int formats[] = {ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FORMAT_ZIP, ARCHIVE_FORMAT_CPIO_SVR4_NOCRC};
  lh_buf ref = {0};
  for (size_t k = 0; k < 3; k++) {
    lh_buf a = {0};
    make_archive(&a, formats[k], k == 0 ? ARCHIVE_FILTER_XZ : ARCHIVE_FILTER_NONE, f, 12);
    mem_in in = {"s", &a};
    lh_ingest_params p = lh_ingest_default_params();
    p.order = LH_INGEST_SORT_PATH;
    got g1, g2;
    run_ingest(&p, &in, 1, &g1);
    p.sort_memory = 40;
    run_ingest(&p, &in, 1, &g2);
    CHECK_EQ(g1.st, LH_OK);
    CHECK_EQ(g2.st, LH_OK);
    CHECK(g1.text.len == g2.text.len && !memcmp(g1.text.data, g2.text.data, g1.text.len));
    CHECK_EQ(g1.n, 12);
    CHECK(g1.n == 12 && !strcmp(g1.ents[0].path, "./a-link"));
    for (size_t i = 2; i < g1.n; i++) CHECK(strcmp(g1.ents[i - 1].path, g1.ents[i].path) < 0);
    const char *p0 = strstr(g1.text.data, "f00.txt"), *p9 = strstr(g1.text.data, "f09.txt");
    CHECK(p0 && p9 && p0 < p9);
    if (k == 0) lh_buf_append(&ref, g1.text.data, g1.text.len);
    else CHECK_MSG(ref.len == g1.text.len && !memcmp(ref.data, g1.text.data, ref.len), "format %zu differs", k);
    got_free(&g1);
    got_free(&g2);
    lh_buf_free(&a);
  }
  lh_buf_free(&ref);
}

static void test_batches_and_close(void) {
  size_t n = 300000;
  char *big = malloc(n);
  for (size_t i = 0; i < n; i++) big[i] = i % 61 == 60 ? '\n' : (char)('A' + i % 26);
  big[1000] = (char)0xC3; /* a two-byte character across no particular boundary */
  big[1001] = (char)0xA9;
  const fent f[] = {{"big.txt", big, n, 0, NULL, 0}, {"small.txt", "s\n", (size_t)-1, 0, NULL, 0}};
  lh_buf z = {0};
  make_archive(&z, ARCHIVE_FORMAT_ZIP, ARCHIVE_FILTER_NONE, f, 2);
  mem_in in = {"b.zip", &z};
  lh_ingest_params p = lh_ingest_default_params();
  got g1, g2;
  run_ingest(&p, &in, 1, &g1);
  p.batch_bytes = 4096;
  run_ingest(&p, &in, 1, &g2);
  CHECK_EQ(g1.st, LH_OK);
  CHECK(g2.batches > 50);
  CHECK(g1.text.len == g2.text.len && !memcmp(g1.text.data, g2.text.data, g1.text.len));
  CHECK(g2.n == 2 && entry_sha_is(&g2.ents[0], big, n));
  got_free(&g1);
  got_free(&g2);

  /* Closing mid-stream stops the reader (no hang, no leak). */
  lh_error err;
  lh_ingest *ing;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_OK);
  for (int i = 0; i < 4; i++) lh_ingest_add_memory(ing, "b.zip", z.data, z.len, &err);
  lh_ingest_batch b;
  CHECK(lh_ingest_next(ing, &b, &err) == LH_OK);
  CHECK(lh_ingest_add_memory(ing, "late", z.data, z.len, &err) == LH_EINVAL);
  lh_ingest_close(ing);
  lh_ingest_close(NULL);

  /* An empty input is one empty document; garbage is one binary document. */
  lh_buf empty = {0};
  lh_buf_append(&empty, "", 0);
  lh_buf junk = {0};
  for (int i = 0; i < 5000; i++) {
    char c = (char)(i * 131 % 251);
    lh_buf_append(&junk, &c, 1);
  }
  mem_in ins[2] = {{"empty.txt", &empty}, {"junk.bin", &junk}};
  p = lh_ingest_default_params();
  run_ingest(&p, ins, 2, &g1);
  CHECK_EQ(g1.st, LH_OK);
  CHECK(g1.n == 2 && !strcmp(g1.ents[0].path, "empty.txt") && g1.ents[0].e.status == LH_ENTRY_OK);
  CHECK(g1.n == 2 && !strcmp(g1.ents[1].path, "junk.bin") && g1.ents[1].e.reason == LH_REASON_BINARY);
  got_free(&g1);

  /* Params are checked. */
  p = lh_ingest_default_params();
  p.max_ratio = 0.5;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_EINVAL);
  p = lh_ingest_default_params();
  p.sniff_bytes = 0;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_EINVAL);
  free(big);
  lh_buf_free(&z);
  lh_buf_free(&empty);
  lh_buf_free(&junk);
}

static void test_encrypted(void) {
  struct archive *a = archive_write_new();
  archive_write_set_format_zip(a);
  int can = archive_write_set_options(a, "zip:encryption=zipcrypt") == ARCHIVE_OK &&
            archive_write_set_passphrase(a, "secret") == ARCHIVE_OK;
  archive_write_free(a);
  if (!can) {
    fprintf(stderr, "note: this libarchive cannot write encrypted zip; encryption is covered by the e2e test\n");
    return;
  }
  lh_buf z = {0};
  a = archive_write_new();
  archive_write_set_format_zip(a);
  archive_write_set_options(a, "zip:encryption=zipcrypt");
  archive_write_set_passphrase(a, "secret");
  archive_write_open(a, &z, NULL, w_cb, NULL);
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, "secret.txt");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_entry_set_size(e, 7);
  archive_write_header(a, e);
  archive_write_data(a, "hidden\n", 7);
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  mem_in in = {"enc.zip", &z};
  lh_ingest_params p = lh_ingest_default_params();
  got g;
  run_ingest(&p, &in, 1, &g);
  CHECK_EQ(g.st, LH_OK);
  CHECK(g.n == 1 && g.ents[0].e.reason == LH_REASON_ENCRYPTED);
  CHECK(g.text.len == 0);
  got_free(&g);
  lh_buf_free(&z);
}

int main(void) {
  lh_test_begin("test_ingest_unit");
  test_globs();
  test_dot_slash_globs();
  test_utf8();
  test_escaping();
  test_basic_tar();
  test_caps_and_binary();
  test_bomb_and_truncation();
  test_sorted();
  test_batches_and_close();
  test_encrypted();
  return lh_test_end();
}
