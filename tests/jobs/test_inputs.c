/* test_inputs.c — jobs/inputs.h: the digest of a request's documents changes with any byte of any
 * file they reach and with names in a folder, not with a touch; the cache spares the read of an
 * unchanged file and is not trusted for a changed one; FIFOs and sockets are named, never opened; an
 * excluded folder inside a document folder (the runner's --out) is named, its contents ignored; folders
 * nested deeper than ingest walks are named, not read, and give the same digest on every run; a
 * document given as a symlink to a folder is digested by the folder's files, as ingest reads them.
 * Stamps: the one taken with a digest equals one taken later while nothing changed, cache hit or
 * not; a file changed and changed back (same bytes, same size, its mtime set back) keeps its digest
 * but moves the stamp, so the runner can tell that ingest may have read other bytes; so does a
 * new file; what an excluded folder holds does not.
 * Globs: what a document's include/exclude globs leave out (an appended log, a build folder, a
 * compressed member by its name without the suffix) moves neither the digest nor the stamp, while
 * what they keep does; and over a varied tree and several glob sets, ingest's own manifest gives
 * every entry the glob reason lh_globs_decide gives it, so the digest never misses a byte ingest
 * reads.
 * Hard links: a link made or broken in a document folder (the same bytes) changes both ingest's
 * prompt and the digest; a second name outside the document, in another document, or left out by
 * the globs before the name ingest reads changes neither.
 * An ordinary tree (odd names, links of every kind, a FIFO, globs, an excluded folder) keeps the
 * identity it has always had, pinned by value: a user's stored results must stay valid.
 * Folders nested past PATH_MAX are walked like any other (digest, stamps, globs against ingest, a
 * link out of them), and a warning about a path deep down shows its start and its end, escaped;
 * a folder changed while it is walked neither hangs the walk nor unsettles the next one. With
 * --permissions (skipped as root): folders that cannot be listed or searched, deep down. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "jobs/inputs.h"
#include "tests/test.h"
#include "util/fs.h"

/* dir/name written ("w") or appended to ("a") with text */
static void write_mode(const char *dir, const char *name, const char *text, const char *mode) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, mode);
  fputs(text, f);
  fclose(f);
}
static void put(const char *dir, const char *name, const char *text) { write_mode(dir, name, text, "w"); }
static void append(const char *dir, const char *name, const char *text) { write_mode(dir, name, text, "a"); }

static lh_request req_of(const char *path) {
  char line[2048];
  snprintf(line, sizeof line,
           "{\"custom_id\":\"q\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"documents\":[\"%s\"]}}", path);
  lh_request r;
  lh_request_parse(line, strlen(line), 1, "/", &r);
  return r;
}

static void digest(const char *path, const lh_digest_cache *c, char out[65]) {
  lh_request r = req_of(path);
  lh_error err;
  CHECK_MSG(lh_inputs_digest(&r, c, out, &err) == LH_OK, "%s", err.msg);
  lh_request_free(&r);
}

/* a one-entry cache that counts */
typedef struct mem { lh_file_identity k; lh_file_digest v; int have, gets, hits, puts; } mem;
static int mget(void *u, const lh_file_identity *k, lh_file_digest *out) {
  mem *m = u;
  m->gets++;
  if (!m->have || memcmp(&m->k, k, sizeof *k)) return 0;
  *out = m->v;
  m->hits++;
  return 1;
}
static void mput(void *u, const lh_file_identity *k, const lh_file_digest *v) {
  mem *m = u;
  m->k = *k, m->v = *v, m->have = 1, m->puts++;
}

/* A request of one document {"path": dir, GLOBS}, GLOBS as JSON members ("\"exclude\": [...]"). */
static lh_request req_globs(const char *dir, const char *globs) {
  char line[4096];
  snprintf(line, sizeof line,
           "{\"custom_id\":\"q\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"documents\":"
           "[{\"path\":\"%s\",%s}]}}",
           dir, globs);
  lh_request r;
  lh_request_parse(line, strlen(line), 1, "/", &r);
  CHECK_MSG(r.error.code == LH_OK, "the request parses: %s: %s", line, r.error.msg);
  return r;
}

/* digest and stamp of req_globs(dir, globs) */
static void digest_globs(const char *dir, const char *globs, char out[65], lh_inputs_stamp *stamp) {
  lh_request r = req_globs(dir, globs);
  lh_error err;
  CHECK_MSG(lh_inputs_digest_excluding(&r, NULL, NULL, 0, out, stamp, &err) == LH_OK, "%s", err.msg);
  lh_request_free(&r);
}

static void globs_tests(void) {
  char dir[600], build[700], a[65], b[65];
  lh_inputs_stamp sa, sb;
  snprintf(dir, sizeof dir, "%s/globbed", lh_test_tmpdir());
  snprintf(build, sizeof build, "%s/build", dir);
  lh_mkdir_p(build, NULL);
  put(dir, "keep.txt", "kept\n");
  put(dir, "notes.md", "# notes\n");
  put(dir, "app.log", "started\n");
  put(dir, "old.log.gz", "not really gzip\n");
  put(build, "x.o", "object\n");
  const char *ex = "\"exclude\": [\"*.log\", \"build\"]";
  digest_globs(dir, ex, a, &sa);
  append(dir, "app.log", "a line\n"); /* the log written all the time */
  put(build, "y.o", "another object\n");
  put(dir, "old.log.gz", "rotated\n");
  put(dir, "new.log", "");
  char fifo[800];
  snprintf(fifo, sizeof fifo, "%s/fifo", build);
  CHECK(mkfifo(fifo, 0600) == 0);
  digest_globs(dir, ex, b, &sb);
  CHECK_MSG(!strcmp(a, b), "what the exclude globs leave out does not change the digest");
  CHECK_MSG(!memcmp(&sa, &sb, sizeof sa), "nor the stamp (a log appended to does not fail the job)");
  lh_inputs_stamp now;
  lh_request r = req_globs(dir, ex);
  lh_error err;
  CHECK_MSG(lh_inputs_stamp_now(&r, NULL, 0, &now, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(!memcmp(&sa, &now, sizeof sa), "lh_inputs_stamp_now agrees");
  lh_request_free(&r);
  put(dir, "keep.txt", "changed\n");
  digest_globs(dir, ex, b, &sb);
  CHECK_MSG(strcmp(a, b) && memcmp(&sa, &sb, sizeof sa), "what they keep still changes both");
  put(dir, "keep.txt", "kept\n");
  put(dir, "added.txt", "");
  digest_globs(dir, ex, b, NULL);
  CHECK_MSG(strcmp(a, b), "a new file they keep changes the digest");
  /* without globs, the same folder's log is a change */
  digest_globs(dir, "\"frame\": \"{text}\"", a, NULL);
  append(dir, "app.log", "another line\n");
  digest_globs(dir, "\"frame\": \"{text}\"", b, NULL);
  CHECK_MSG(strcmp(a, b), "with no globs, every file counts");
  /* include globs: only the files they name count; a compressed file by its name without the suffix */
  const char *in = "\"include\": [\"*.md\", \"*.log\"], \"exclude\": [\"app.log\"]";
  digest_globs(dir, in, a, NULL);
  put(dir, "keep.txt", "not included\n");
  append(dir, "app.log", "excluded\n");
  digest_globs(dir, in, b, NULL);
  CHECK_MSG(!strcmp(a, b), "files the include globs leave out do not count");
  put(dir, "old.log.gz", "included as old.log\n");
  digest_globs(dir, in, b, NULL);
  CHECK_MSG(strcmp(a, b), "old.log.gz is included by its name without the suffix");
  digest_globs(dir, in, a, NULL);
  put(dir, "notes.md", "# changed\n");
  digest_globs(dir, in, b, NULL);
  CHECK_MSG(strcmp(a, b), "notes.md counts");
}

/* Every entry of ingest's manifest over dir with these globs gets the glob reason
 * lh_globs_decide gives it. Returns how many entries the globs left out. */
static int agree(const char *dir, const char *const *inc, size_t ni, const char *const *exc, size_t ne) {
  lh_ingest_params p = lh_ingest_default_params();
  p.include = inc, p.n_include = ni, p.exclude = exc, p.n_exclude = ne;
  p.on_error = LH_INGEST_ON_ERROR_SKIP;
  lh_ingest *ing = NULL;
  lh_globs *g = NULL;
  lh_error err;
  CHECK_MSG(lh_ingest_open(&p, &ing, &err) == LH_OK && lh_ingest_add_path(ing, dir, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(lh_globs_open(&g, inc, ni, exc, ne, &err) == LH_OK, "%s", err.msg);
  int entries = 0, by_glob = 0;
  for (lh_ingest_batch bt = {0}; ing && !bt.done;) {
    if (lh_ingest_next(ing, &bt, &err) != LH_OK) {
      CHECK_MSG(0, "ingest: %s", err.msg);
      break;
    }
    for (size_t i = 0; i < bt.n_entries; i++) {
      const lh_ingest_entry *e = &bt.entries[i];
      const lh_entry_reason want = lh_globs_decide(g, e->path, e->path_len, e->type == LH_ENTRY_FILE);
      const int glob_reason = e->reason == LH_REASON_EXCLUDED || e->reason == LH_REASON_NOT_INCLUDED;
      CHECK_MSG(glob_reason ? want == e->reason : want == LH_REASON_NONE, "%.*s: ingest says %s, lh_globs_decide %s",
                (int)e->path_len, e->path, lh_entry_reason_name(e->reason), lh_entry_reason_name(want));
      entries++, by_glob += glob_reason;
    }
  }
  CHECK_MSG(entries > 0, "ingest listed the tree");
  lh_globs_free(g);
  lh_ingest_close(ing);
  return by_glob;
}

static void globs_agree_with_ingest(void) {
  char dir[600], d[800];
  snprintf(dir, sizeof dir, "%s/tree", lh_test_tmpdir());
  const char *dirs[] = {"build/sub", "src/deep", "docs", ".git/refs", "a.c.d"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    snprintf(d, sizeof d, "%s/%s", dir, dirs[i]);
    lh_mkdir_p(d, NULL);
  }
  const char *files[] = {"a.c",        "a.h",          "a.log",      "b.log.gz",        "notes.md.xz", "build/x.o",
                         "build/sub/y.c", "src/m.c",   "src/deep/n.md", "src/deep/z.c.zst", "docs/r.md", ".git/HEAD",
                         ".git/refs/main", "a.c.d/inner.c", "README"};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) put(dir, files[i], "some text\n");
  snprintf(d, sizeof d, "%s/link.c", dir);
  CHECK(symlink("a.c", d) == 0);
  const char *e1[] = {"*.log", "build"}, *i2[] = {"*.md"}, *i3[] = {"src/**/*.c", "*.h"}, *e3[] = {"deep"},
             *i4[] = {"*.c", "*.md"}, *e4[] = {".git", "src/*"}, *i5[] = {"*.log", "**/*.c"}, *e5[] = {"*.gz", "a.c*"},
             *e6[] = {"**"}, *i7[] = {"[a-c].?"}, *e7[] = {"*/sub"},
             /* a leading "./" or "/" anchors a pattern at the document's root (ingest.h) */
             *i8[] = {"./*.c", "/src/**"}, *e8[] = {"./build", "/.git", "./src/deep/"}, *e9[] = {"/deep", "./a.c*"};
  agree(dir, NULL, 0, e1, 2);
  agree(dir, i2, 1, NULL, 0);
  agree(dir, i3, 2, e3, 1);
  agree(dir, i4, 2, e4, 2);
  agree(dir, i5, 2, e5, 2);
  agree(dir, NULL, 0, e6, 1);
  agree(dir, i7, 1, e7, 1);
  /* ./build, /.git, the non-C files at the top and everything under src but not deep/ */
  CHECK_MSG(agree(dir, i8, 2, e8, 3) >= 8, "'./' and '/' patterns leave their entries out");
  /* /deep names no top-level entry (src/deep stays); a.c and a.c.d with its file go */
  CHECK_EQ(agree(dir, NULL, 0, e9, 2), 2);
}

/* A request over documents (a JSON array's members) written relative to base: the digest then
 * names nothing of the test's own folder and is the same on every machine. */
static lh_request req_in(const char *base, const char *documents) {
  char line[4096];
  snprintf(line, sizeof line,
           "{\"custom_id\":\"q\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"documents\":[%s]}}",
           documents);
  lh_request r;
  lh_request_parse(line, strlen(line), 1, base, &r);
  CHECK_MSG(r.error.code == LH_OK, "the request parses: %s: %s", line, r.error.msg);
  return r;
}

/* The identity of an ordinary tree is the one every earlier longhaul gave it (the values below were
 * taken with the walk that joined whole paths), so a user's stored results stay valid: names in
 * byte order, odd bytes in names, links to a file, a folder, nowhere and themselves, a FIFO, an
 * empty folder, a copy of a file, the document given through a link, a missing document, globs
 * and an excluded folder. The copy made a hard link is the one change: its identity moved once,
 * when the names of one file came to count (the second set of values), and is pinned from then
 * on; where the globs keep only one of the two names it did not move. */
static void identity_is_stable(void) {
  char base[600], d[800];
  snprintf(base, sizeof base, "%s/stable", lh_test_tmpdir());
  const char *dirs[] = {"tree/sub/deeper", "tree/empty", "tree/build", "tree/a.c.d"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    snprintf(d, sizeof d, "%s/%s", base, dirs[i]);
    CHECK(lh_mkdir_p(d, NULL) == LH_OK);
  }
  const char *files[][2] = {{"tree/README", "hello\n"},      {"tree/a.c", "int a;\n"},
                            {"tree/app.log", "log\n"},       {"tree/b.log.gz", "not gzip\n"},
                            {"tree/sub/x.c", "int x;\n"},    {"tree/sub/deeper/y.md", "# y\n"},
                            {"tree/build/x.o", "obj\n"},     {"tree/a.c.d/inner.c", "int i;\n"},
                            {"tree/new\nline.txt", "nl\n"},  {"tree/bad\xff\xfe.txt", "bad\n"},
                            {"tree/Zed", "upper\n"},         {"tree/sub/-dash", "dash\n"},
                            {"outside.txt", "outside\n"}};
  for (size_t i = 0; i < sizeof files / sizeof *files; i++) put(base, files[i][0], files[i][1]);
  const char *links[][2] = {{"a.c", "tree/link-file"},         {"sub", "tree/link-dir"},
                            {"nowhere", "tree/dangling"},      {"loop", "tree/loop"},
                            {"../outside.txt", "tree/up"},     {"tree", "link-tree"}};
  for (size_t i = 0; i < sizeof links / sizeof *links; i++) {
    snprintf(d, sizeof d, "%s/%s", base, links[i][1]);
    CHECK(symlink(links[i][0], d) == 0);
  }
  put(base, "tree/hard", "int a;\n"); /* the walk by whole paths named a copy and a hard link alike */
  snprintf(d, sizeof d, "%s/tree/fifo", base);
  CHECK(mkfifo(d, 0600) == 0);
  const char *cases[][3] = {
      {"\"tree\", \"tree/a.c\", \"link-tree\", \"tree/link-file\", \"no-such\", \"tree/fifo\", \"tree/loop\"",
       "2ea42d5cf46478b4e8ce86d4822c005eabd5d1ca33651bbf550b787fabd1530b",
       "44a9ab45e39d85059c164f43f959b1edbbf16f713986a3d35195815578e18ead"},
      {"{\"path\": \"tree\", \"exclude\": [\"*.log\", \"build\"]}",
       "f4afcec21c29bebbf73fa4b1b486a6fad8d47be16c4657fa9af37eeaee965dc0",
       "9872a1471251d01f31b0b7714502be053f11d859800dcd215e0503267a205ebd"},
      {"{\"path\": \"link-tree\", \"include\": [\"*.c\", \"*.md\"], \"exclude\": [\"deeper\"]}",
       "89c8dacd8cf426bd916c38d9f5ab13515031d15e03f4ff75cd7b9a05836fe2df",
       "89c8dacd8cf426bd916c38d9f5ab13515031d15e03f4ff75cd7b9a05836fe2df"}};
  /* the runner's output folder inside the document, as --out puts it */
  const char *out_was[] = {"b06823372787f4672a87333042abaece043553dd9851358bf0738ffddc4762ef",
                           "2a8b5909d5c3669e96c5c747ef40f334796c9db3adf33ba8befba6253d4e5e3d"};
  for (int hard = 0; hard < 2; hard++) {
    if (hard) { /* tree/hard becomes a second name of tree/a.c: the same bytes */
      char from[800];
      snprintf(from, sizeof from, "%s/tree/a.c", base);
      snprintf(d, sizeof d, "%s/tree/hard", base);
      CHECK(unlink(d) == 0 && link(from, d) == 0);
    }
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      lh_request r = req_in(base, cases[i][0]);
      char got[65];
      lh_error err;
      CHECK_MSG(lh_inputs_digest(&r, NULL, got, &err) == LH_OK, "%s", err.msg);
      CHECK_MSG(!strcmp(got, cases[i][1 + hard]), "documents [%s]%s: identity %s, was %s", cases[i][0],
                hard ? " with a hard link" : "", got, cases[i][1 + hard]);
      lh_request_free(&r);
    }
    lh_request r = req_in(base, "\"tree\"");
    snprintf(d, sizeof d, "%s/tree/build", base);
    const char *ex[] = {d};
    char got[65];
    lh_error err;
    CHECK_MSG(lh_inputs_digest_excluding(&r, NULL, ex, 1, got, NULL, &err) == LH_OK, "%s", err.msg);
    CHECK_MSG(!strcmp(got, out_was[hard]), "an excluded folder%s: identity %s, was %s", hard ? " with a hard link" : "",
              got, out_was[hard]);
    lh_request_free(&r);
  }
}

/* What ingest makes of r's documents as the runner reads them (one ingest per document, with its
 * globs and frame): the framed text and each entry's path, status and reason, into out. */
static void ingest_view(const lh_request *r, char *out, size_t cap) {
  size_t at = 0;
  out[0] = 0;
  for (int d = 0; d < r->n_documents; d++) {
    const lh_document_input *di = &r->documents[d];
    lh_ingest_params p = lh_ingest_default_params();
    p.on_error = LH_INGEST_ON_ERROR_SKIP;
    p.template_text = di->frame;
    for (char **g = di->include; g && *g; g++) p.n_include++;
    for (char **g = di->exclude; g && *g; g++) p.n_exclude++;
    p.include = (const char *const *)di->include;
    p.exclude = (const char *const *)di->exclude;
    lh_ingest *ing = NULL;
    lh_error err;
    CHECK_MSG(lh_ingest_open(&p, &ing, &err) == LH_OK &&
                  lh_ingest_add_path_as(ing, di->resolved, di->path, &err) == LH_OK,
              "%s", err.msg);
    for (lh_ingest_batch bt = {0}; ing && !bt.done;) {
      if (lh_ingest_next(ing, &bt, &err) != LH_OK) {
        CHECK_MSG(0, "ingest: %s", err.msg);
        break;
      }
      at += (size_t)snprintf(out + at, cap - at, "%.*s", (int)bt.text_len, bt.text);
      for (size_t i = 0; i < bt.n_entries && at < cap; i++) {
        const lh_ingest_entry *e = &bt.entries[i];
        at += (size_t)snprintf(out + at, cap - at, "\n[%.*s %s %s]", (int)e->path_len, e->path,
                               lh_entry_status_name(e->status), lh_entry_reason_name(e->reason));
      }
    }
    CHECK_MSG(at < cap, "the view fits");
    lh_ingest_close(ing);
  }
}

/* The digest of r and what ingest makes of it (ingest_view). */
typedef struct seen {
  char digest[65];
  char view[8192];
} seen;

static void see(const char *base, const char *documents, seen *out) {
  lh_request r = req_in(base, documents);
  lh_error err;
  lh_inputs_stamp with[4], now[4];
  CHECK(r.n_documents <= 4);
  CHECK_MSG(lh_inputs_digest_excluding(&r, NULL, NULL, 0, out->digest, with, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(lh_inputs_stamp_now(&r, NULL, 0, now, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(!memcmp(with, now, (size_t)r.n_documents * sizeof *with),
            "[%s]: the stamp now is the one taken with the digest", documents);
  ingest_view(&r, out->view, sizeof out->view);
  lh_request_free(&r);
}

/* A change of base/name: a copy of its own (the same bytes) or, link_to set, a second name of
 * base/link_to. */
static void relink(const char *base, const char *name, const char *link_to) {
  char p[900], q[900];
  snprintf(p, sizeof p, "%s/%s", base, name);
  if (link_to) {
    snprintf(q, sizeof q, "%s/%s", base, link_to);
    CHECK((unlink(p) == 0 || errno == ENOENT) && link(q, p) == 0);
    return;
  }
  snprintf(q, sizeof q, "%s/%s.copy", base, name);
  FILE *in = fopen(p, "rb"), *o = fopen(q, "wb");
  CHECK(in && o);
  char buf[4096];
  size_t n;
  while (in && o && (n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, o);
  if (in) fclose(in);
  if (o) fclose(o);
  CHECK(rename(q, p) == 0);
}

/* Whether a change moved ingest's view and the digest alike: both (moved) or neither. */
static void both_or_neither(const seen *a, const seen *b, int moved, const char *what) {
  const int view = strcmp(a->view, b->view) != 0, dg = strcmp(a->digest, b->digest) != 0;
  CHECK_MSG(view == moved, "%s: ingest's prompt %s (it should%s)\n--- before\n%s\n--- after\n%s", what,
            view ? "changed" : "did not change", moved ? "" : " not", a->view, b->view);
  CHECK_MSG(dg == moved, "%s: the digest %s (it should%s)", what, dg ? "changed" : "did not change",
            moved ? "" : " not");
}

/* Hard links against ingest: ingest reads a file of several names in one document folder once and
 * frames its other names as links to it, so a link made or broken there (the same bytes) changes
 * both the prompt and the digest, whichever name comes first and whichever folder the names are
 * in; and a change the prompt does not see changes neither: a second name outside the document or
 * in another document of the request, or one the globs leave out. */
static void links_agree_with_ingest(void) {
  char base[600], d[800];
  snprintf(base, sizeof base, "%s/links", lh_test_tmpdir());
  const char *dirs[] = {"d/a", "e", "g"};
  for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
    snprintf(d, sizeof d, "%s/%s", base, dirs[i]);
    CHECK(lh_mkdir_p(d, NULL) == LH_OK);
  }
  put(base, "d/a.c", "int shared = 4817;\n");
  put(base, "d/a/x.c", "int shared = 4817;\n"); /* after d/a.c in ingest's order, before it by name */
  put(base, "d/b.c", "int shared = 4817;\n");
  put(base, "d/own.c", "int own;\n");
  seen copies, s;
  see(base, "\"d\"", &copies);
  relink(base, "d/b.c", "d/a.c");
  see(base, "\"d\"", &s);
  both_or_neither(&copies, &s, 1, "two copies made one file");
  seen linked = s;
  relink(base, "d/b.c", NULL);
  see(base, "\"d\"", &s);
  both_or_neither(&linked, &s, 1, "a hard link broken");
  both_or_neither(&copies, &s, 0, "back to two copies");
  relink(base, "d/a/x.c", "d/a.c"); /* in a subfolder, and first by the walk's own listing */
  see(base, "\"d\"", &s);
  both_or_neither(&copies, &s, 1, "a name in a subfolder made a link");
  relink(base, "d/b.c", "d/a.c");
  seen three;
  see(base, "\"d\"", &three);
  both_or_neither(&s, &three, 1, "a third name");
  relink(base, "d/a/x.c", NULL);
  see(base, "\"d\"", &s);
  both_or_neither(&linked, &s, 0, "the third name a copy again: the pair as before");
  /* the other name of d/own.c outside the document: ingest meets one name, and so does the digest */
  see(base, "\"d\"", &linked);
  relink(base, "outside.c", "d/own.c");
  see(base, "\"d\"", &s);
  both_or_neither(&linked, &s, 0, "a second name outside the document");
  /* in another document of the request: each document is its own walk */
  put(base, "e/own.c", "int own;\n");
  see(base, "\"d\", \"e\"", &linked);
  relink(base, "e/own.c", "d/own.c");
  see(base, "\"d\", \"e\"", &s);
  both_or_neither(&linked, &s, 0, "a second name in another document");
  /* globs: a name they leave out, first in ingest's order, is not met: the kept name is read
   * whether it is a link to it or not; two kept names are a pair whichever is left out */
  put(base, "g/a.log", "4817 seen\n");
  put(base, "g/b.txt", "4817 seen\n");
  put(base, "g/c.txt", "4817 seen\n");
  const char *globs = "{\"path\": \"g\", \"exclude\": [\"*.log\"]}";
  see(base, globs, &copies);
  relink(base, "g/b.txt", "g/a.log");
  see(base, globs, &s);
  both_or_neither(&copies, &s, 0, "a kept name made a link to an excluded one");
  relink(base, "g/c.txt", "g/a.log");
  see(base, globs, &linked);
  both_or_neither(&s, &linked, 1, "two kept names of one file, the first name excluded");
  relink(base, "g/a.log", NULL);
  see(base, globs, &s);
  both_or_neither(&linked, &s, 0, "the excluded name made a copy");
}

/* A chain of levels folders under dir, level i named by len copies of 'a' + i % 26, made relative to
 * descriptors (the paths pass PATH_MAX); returns the deepest one's descriptor, and in *at the
 * one of level at_level. */
static int mkdir_chain(const char *dir, int levels, size_t len, int at_level, int *at) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  char name[256];
  for (int i = 1; i <= levels && fd >= 0; i++) {
    memset(name, 'a' + i % 26, len);
    name[len] = 0;
    CHECK(mkdirat(fd, name, 0755) == 0);
    const int next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (i == at_level) *at = fd;
    else close(fd);
    fd = next;
  }
  CHECK(fd >= 0);
  return fd;
}

/* name in the folder open at dfd, written with text */
static void put_at(int dfd, const char *name, const char *text) {
  const int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
}

/* Whether ingest, walking dir, reads a file called name (whatever folder it is in). */
static int ingest_reads(const char *dir, const char *name) {
  lh_ingest_params p = lh_ingest_default_params();
  p.on_error = LH_INGEST_ON_ERROR_SKIP;
  lh_ingest *ing = NULL;
  lh_error err;
  CHECK_MSG(lh_ingest_open(&p, &ing, &err) == LH_OK && lh_ingest_add_path(ing, dir, &err) == LH_OK, "%s", err.msg);
  const size_t n = strlen(name);
  int found = 0;
  for (lh_ingest_batch bt = {0}; ing && !bt.done;) {
    if (lh_ingest_next(ing, &bt, &err) != LH_OK) {
      CHECK_MSG(0, "ingest: %s", err.msg);
      break;
    }
    for (size_t i = 0; i < bt.n_entries; i++) {
      const lh_ingest_entry *e = &bt.entries[i];
      found |= e->status == LH_ENTRY_OK && e->path_len > n && e->path[e->path_len - n - 1] == '/' &&
               !memcmp(e->path + e->path_len - n, name, n);
    }
  }
  lh_ingest_close(ing);
  return found;
}

/* A digest cache that keeps nothing and checks that every key names its file by a real path. */
static int nget(void *u, const lh_file_identity *k, lh_file_digest *out) {
  (void)u, (void)k, (void)out;
  return 0;
}
static void nput(void *u, const lh_file_identity *k, const lh_file_digest *v) {
  (void)v;
  struct stat sb;
  char real[PATH_MAX];
  CHECK_MSG(stat(k->path, &sb) == 0 && sb.st_ino == k->inode && realpath(k->path, real) && !strcmp(real, k->path),
            "a cache key names its file by its real path: %.200s", k->path);
  ++*(int *)u;
}

/* The digest of dir taken with so few descriptors left that a folder some 10 levels down cannot
 * be opened (an error root meets too); its message into *err. */
static void out_of_descriptors(const char *dir, lh_error *err) {
  struct rlimit was;
  CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0);
  const int next = open("/dev/null", O_RDONLY | O_CLOEXEC);
  close(next);
  struct rlimit few = {.rlim_cur = (rlim_t)next + 10, .rlim_max = was.rlim_max};
  CHECK(setrlimit(RLIMIT_NOFILE, &few) == 0);
  lh_request r = req_of(dir);
  char out[65];
  const lh_status st = lh_inputs_digest(&r, NULL, out, err);
  CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
  lh_request_free(&r);
  CHECK_MSG(st != LH_OK, "the walk of %s runs out of descriptors", dir);
}

/* Folders whose paths pass PATH_MAX (40 levels of 200-character names, about 8,000 characters):
 * ingest reads every file in them, so the digest names them all, the same on every run, moved
 * by any byte of them; the stamps agree; globs and ingest decide alike on long names; and a
 * warning about a folder deep down names the start and the end of its path in full sentences
 * instead of a path cut at the message's size. */
static void deep_paths(void) {
  char dir[600], a[65], b[65], c[65];
  snprintf(dir, sizeof dir, "%s/long", lh_test_tmpdir());
  CHECK(lh_mkdir_p(dir, NULL) == LH_OK);
  put(dir, "top.txt", "near the top\n");
  int mid = -1;
  const int bottom = mkdir_chain(dir, 40, 200, 25, &mid);
  put_at(bottom, "far.txt", "at the bottom\n");
  put_at(bottom, "app.log", "started\n");
  put_at(mid, "past.txt", "past PATH_MAX\n");
  CHECK(mkfifoat(bottom, "pipe", 0600) == 0);
  CHECK(symlinkat("far.txt", bottom, "to-far") == 0);
  char up[200] = "";
  for (int i = 0; i < 40; i++) strcat(up, "../");
  strcat(up, "top.txt"); /* back to the top: a short real path through a long one */
  CHECK(symlinkat(up, bottom, "to-top") == 0);
  lh_request r = req_of(dir);
  lh_error err;
  CHECK_MSG(lh_inputs_digest(&r, NULL, a, &err) == LH_OK, "a folder of paths past PATH_MAX has a digest: %s", err.msg);
  CHECK_MSG(lh_inputs_digest(&r, NULL, b, &err) == LH_OK && !strcmp(a, b), "the same on every run");
  CHECK_MSG(ingest_reads(dir, "far.txt") && ingest_reads(dir, "past.txt"), "ingest reads the files deep down");
  put_at(bottom, "far.txt", "changed at the bottom\n");
  CHECK(lh_inputs_digest(&r, NULL, b, &err) == LH_OK);
  CHECK_MSG(strcmp(a, b), "a changed byte at the bottom changes the digest");
  put_at(bottom, "far.txt", "at the bottom\n");
  CHECK(lh_inputs_digest(&r, NULL, b, &err) == LH_OK);
  CHECK_MSG(!strcmp(a, b), "and the same bytes again give the same digest");
  put_at(mid, "past.txt", "past PATH_MAX, changed\n");
  CHECK(lh_inputs_digest(&r, NULL, b, &err) == LH_OK);
  CHECK_MSG(strcmp(a, b), "a changed byte past PATH_MAX changes the digest");
  put(dir, "top.txt", "near the top, changed\n");
  CHECK(lh_inputs_digest(&r, NULL, c, &err) == LH_OK);
  CHECK_MSG(strcmp(b, c), "a file reached through a link deep down is read");
  /* stamps: taken with the digest and now agree; a file written back moves them */
  int puts = 0;
  lh_digest_cache nc = {.get = nget, .put = nput, .user = &puts};
  lh_inputs_stamp s1, s2;
  CHECK_MSG(lh_inputs_digest_excluding(&r, &nc, NULL, 0, b, &s1, &err) == LH_OK && !strcmp(b, c), "%s", err.msg);
  CHECK_MSG(puts > 0, "files with real paths that fit are cached");
  CHECK_MSG(lh_inputs_stamp_now(&r, NULL, 0, &s2, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(!memcmp(&s1, &s2, sizeof s1), "nothing changed: the stamp now is the stamp taken with the digest");
  usleep(20000); /* past the file system clock's tick */
  put_at(bottom, "far.txt", "at the bottom\n");
  CHECK(lh_inputs_stamp_now(&r, NULL, 0, &s2, &err) == LH_OK);
  CHECK_MSG(memcmp(&s1, &s2, sizeof s1), "a file deep down written again moves the stamp");
  lh_request_free(&r);
  /* globs over long relative paths: ingest and lh_globs_decide agree, and an excluded log deep
   * down is no change */
  const char *e1[] = {"*.log"}, *i2[] = {"*.txt"}, *e2[] = {"pipe"}, *e3[] = {"zzz*"};
  CHECK_EQ(agree(dir, NULL, 0, e1, 1), 1);
  CHECK_EQ(agree(dir, i2, 1, e2, 1), 2);  /* app.log not included, the FIFO excluded */
  CHECK_EQ(agree(dir, NULL, 0, e3, 1), 1); /* the folder of level 25, 5,000 characters down */
  digest_globs(dir, "\"exclude\": [\"*.log\"]", a, &s1);
  put_at(bottom, "app.log", "started\nanother line\n");
  digest_globs(dir, "\"exclude\": [\"*.log\"]", b, &s2);
  CHECK_MSG(!strcmp(a, b) && !memcmp(&s1, &s2, sizeof s1), "an excluded log deep down is no change");
  /* a folder deep down that cannot be opened: the warning names the start and the end of its
   * path, and is whole */
  out_of_descriptors(dir, &err);
  char head[64];
  snprintf(head, sizeof head, "document %.40s", dir);
  CHECK_STR_CONTAINS(err.msg, head);
  CHECK_STR_CONTAINS(err.msg, "...");
  CHECK_STR_CONTAINS(err.msg, strerror(EMFILE));
  CHECK_MSG(strlen(err.msg) < 600, "the warning is shortened, not cut: %zu characters", strlen(err.msg));
  close(mid);
  close(bottom);
  /* a newline or invalid UTF-8 in a name: escaped in the warning, which stays one line */
  char odd[700];
  snprintf(odd, sizeof odd, "%s/odd", lh_test_tmpdir());
  CHECK(lh_mkdir_p(odd, NULL) == LH_OK);
  int fd = open(odd, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK(mkdirat(fd, "new\nline\xff", 0755) == 0);
  close(fd);
  snprintf(odd, sizeof odd, "%s/odd/new\nline\xff", lh_test_tmpdir());
  close(mkdir_chain(odd, 20, 5, 0, NULL));
  snprintf(odd, sizeof odd, "%s/odd", lh_test_tmpdir());
  out_of_descriptors(odd, &err);
  CHECK_STR_CONTAINS(err.msg, "/new\\x0aline\\xff/");
  CHECK_MSG(!strchr(err.msg, '\n'), "one line: %s", err.msg);
}

/* A digest cache whose first get changes the folder the walk is in the middle of (its names are
 * listed, its first file open): the next file becomes a FIFO, a folder goes, a file becomes a
 * folder. */
static int change_get(void *u, const lh_file_identity *k, lh_file_digest *out) {
  (void)k, (void)out;
  const char *dir = u;
  char p[800], q[800];
  static int done;
  if (done++) return 0;
  snprintf(p, sizeof p, "%s/c.txt", dir);
  CHECK(unlink(p) == 0 && mkfifo(p, 0600) == 0);
  snprintf(p, sizeof p, "%s/d", dir);
  snprintf(q, sizeof q, "%s/../d-gone", dir);
  CHECK(rename(p, q) == 0);
  snprintf(p, sizeof p, "%s/e.txt", dir);
  CHECK(unlink(p) == 0 && mkdir(p, 0755) == 0);
  return 0;
}

/* A folder that changes while it is walked: the walk ends (a FIFO met is named, never opened or
 * waited on), and the next walk gives the same digest twice. */
static void changed_during_the_walk(void) {
  char dir[600], sub[700], a[65], b[65];
  snprintf(dir, sizeof dir, "%s/changing/tree", lh_test_tmpdir());
  snprintf(sub, sizeof sub, "%s/d", dir);
  CHECK(lh_mkdir_p(sub, NULL) == LH_OK);
  put(dir, "a.txt", "first\n");
  put(dir, "c.txt", "becomes a FIFO\n");
  put(dir, "e.txt", "becomes a folder\n");
  put(sub, "y.txt", "goes\n");
  lh_digest_cache changer = {.get = change_get, .user = dir};
  lh_request r = req_of(dir);
  lh_error err;
  CHECK_MSG(lh_inputs_digest(&r, &changer, a, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(lh_inputs_digest(&r, NULL, a, &err) == LH_OK && lh_inputs_digest(&r, NULL, b, &err) == LH_OK &&
                !strcmp(a, b),
            "a tree that changed gives one digest again");
  lh_request_free(&r);
}

/* test_inputs --permissions: folders the walk may not read, deep down. Not as root, who reads
 * every folder: skipped, loudly. */
static int permissions(void) {
  if (geteuid() == 0) LH_TEST_SKIP("running as root, who may read every folder: the permission cases are not checked");
  char dir[600], a[65], b[65];
  lh_error err;
  snprintf(dir, sizeof dir, "%s/perm", lh_test_tmpdir());
  CHECK(lh_mkdir_p(dir, NULL) == LH_OK);
  const int bottom = mkdir_chain(dir, 30, 200, 0, NULL);
  CHECK(mkdirat(bottom, "locked", 0700) == 0 && mkdirat(bottom, "unsearchable", 0700) == 0);
  const int locked = openat(bottom, "locked", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int unsearchable = openat(bottom, "unsearchable", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  put_at(locked, "secret.txt", "locked away\n");
  put_at(unsearchable, "listed.txt", "named, not read\n");
  CHECK(fchmod(locked, 0) == 0 && fchmod(unsearchable, 0600) == 0);
  /* a folder that cannot be listed: the digest fails, naming it by the start and the end of its path */
  lh_request r = req_of(dir);
  CHECK_MSG(lh_inputs_digest(&r, NULL, a, &err) != LH_OK, "a folder nobody may list has no digest");
  CHECK_STR_CONTAINS(err.msg, "/locked: ");
  CHECK_STR_CONTAINS(err.msg, strerror(EACCES));
  CHECK_STR_CONTAINS(err.msg, "...");
  CHECK_MSG(strlen(err.msg) < 600, "the warning is shortened, not cut: %zu characters", strlen(err.msg));
  lh_inputs_stamp s;
  CHECK_MSG(lh_inputs_stamp_now(&r, NULL, 0, &s, &err) != LH_OK, "nor a stamp");
  /* a folder that can be listed but not searched: its files are named as missing, as they
   * always were, the same on every run */
  CHECK(fchmod(locked, 0700) == 0);
  CHECK_MSG(lh_inputs_digest(&r, NULL, a, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(lh_inputs_digest(&r, NULL, b, &err) == LH_OK && !strcmp(a, b), "the same on every run");
  CHECK(fchmod(unsearchable, 0700) == 0);
  CHECK_MSG(lh_inputs_digest(&r, NULL, b, &err) == LH_OK && strcmp(a, b), "and another once it can be read");
  lh_request_free(&r);
  close(locked);
  close(unsearchable);
  close(bottom);
  return lh_test_end();
}

int main(int argc, char **argv) {
  lh_test_begin("test_inputs");
  if (argc > 1 && !strcmp(argv[1], "--permissions")) return permissions();
  identity_is_stable();
  deep_paths();
  changed_during_the_walk();
  char dir[600], sub[700], a[65], b[65], c[65];
  snprintf(dir, sizeof dir, "%s/docs", lh_test_tmpdir());
  snprintf(sub, sizeof sub, "%s/src", dir);
  lh_mkdir_p(sub, NULL);
  put(dir, "README", "hello\n");
  put(sub, "x.c", "int x = 1;\n");
  digest(dir, NULL, a);
  digest(dir, NULL, b);
  CHECK(!strcmp(a, b));
  put(sub, "x.c", "int x = 2;\n"); /* one byte deep in the tree */
  digest(dir, NULL, b);
  CHECK_MSG(strcmp(a, b), "a changed byte under the folder changes the digest");
  put(sub, "x.c", "int x = 1;\n");
  digest(dir, NULL, b);
  CHECK_MSG(!strcmp(a, b), "the same bytes again give the same digest (a touch is not a change)");
  char from[800], to[800];
  snprintf(from, sizeof from, "%s/README", dir);
  snprintf(to, sizeof to, "%s/README.md", dir);
  rename(from, to);
  digest(dir, NULL, b);
  CHECK_MSG(strcmp(a, b), "a renamed file changes the digest");
  rename(to, from);

  /* a FIFO and a socket in the folder are named, not opened (this would hang otherwise) */
  char fifo[800];
  snprintf(fifo, sizeof fifo, "%s/pipe", dir);
  CHECK(mkfifo(fifo, 0644) == 0);
  int sk = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  char sockpath[800];
  snprintf(sockpath, sizeof sockpath, "%s/sock", dir);
  CHECK(strlen(sockpath) < sizeof sa.sun_path);
  memcpy(sa.sun_path, sockpath, strlen(sockpath) + 1);
  CHECK(bind(sk, (struct sockaddr *)&sa, sizeof sa) == 0);
  digest(dir, NULL, c);
  CHECK(strcmp(a, c));
  digest(fifo, NULL, c); /* a FIFO named as the document itself */
  close(sk);

  /* the cache: a miss reads and puts, a hit reads nothing, a changed file misses */
  char file[800];
  snprintf(file, sizeof file, "%s/README", dir);
  mem m = {0};
  lh_digest_cache cache = {.get = mget, .put = mput, .user = &m};
  char d1[65], d2[65], d3[65];
  digest(file, &cache, d1);
  CHECK_EQ(m.puts, 1);
  digest(file, &cache, d2);
  CHECK_EQ(m.hits, 1);
  CHECK(!strcmp(d1, d2));
  digest(file, NULL, d3);
  CHECK_MSG(!strcmp(d1, d3), "a cache hit gives what a read gives");
  m.v.sha256[0] ^= 1; /* the cache is only asked about an unchanged identity */
  put(dir, "README", "hellO\n");
  digest(file, &cache, d2);
  CHECK_MSG(strcmp(d1, d2) && m.puts == 2, "a rewritten file misses the cache and is read again");

  /* an output folder inside the document folder: left out by identity, whatever it holds */
  char outdir[800], e1[65], e2[65], n1[65], n2[65];
  snprintf(outdir, sizeof outdir, "%s/out", dir);
  lh_mkdir_p(outdir, NULL);
  lh_request r = req_of(dir);
  const char *ex[] = {outdir, "/no/such/path"};
  lh_error err;
  CHECK(lh_inputs_digest_excluding(&r, NULL, ex, 2, e1, NULL, &err) == LH_OK);
  CHECK(lh_inputs_digest(&r, NULL, n1, &err) == LH_OK);
  put(outdir, "output.jsonl", "{\"a\": 1}\n");
  CHECK(lh_inputs_digest_excluding(&r, NULL, ex, 2, e2, NULL, &err) == LH_OK);
  CHECK(lh_inputs_digest(&r, NULL, n2, &err) == LH_OK);
  CHECK_MSG(!strcmp(e1, e2), "what the excluded folder holds does not change the digest");
  CHECK_MSG(strcmp(n1, n2), "without the exclusion it does");
  lh_request_free(&r);

  /* folders nested deeper than ingest walks (256): a digest all the same, the same on every run,
   * and still moved by a file ingest reads */
  char deep[1400], shallow[1400] = "";
  int n = snprintf(deep, sizeof deep, "%s/deep", dir);
  for (int i = 0; i < 300; i++) {
    n += snprintf(deep + n, sizeof deep - (size_t)n, "/d");
    if (i == 5) snprintf(shallow, sizeof shallow, "%s", deep);
  }
  CHECK(lh_mkdir_p(deep, NULL) == LH_OK);
  put(deep, "far.txt", "past the walk\n");
  put(shallow, "near.txt", "read by ingest\n");
  char deep_root[900], t1[65], t2[65], t3[65];
  snprintf(deep_root, sizeof deep_root, "%s/deep", dir);
  lh_request rd = req_of(deep_root);
  CHECK_MSG(lh_inputs_digest(&rd, NULL, t1, &err) == LH_OK, "%s", err.msg);
  CHECK(lh_inputs_digest(&rd, NULL, t2, &err) == LH_OK);
  CHECK_MSG(!strcmp(t1, t2), "folders past the walk's depth give the same digest on every run");
  put(shallow, "near.txt", "changed\n");
  CHECK(lh_inputs_digest(&rd, NULL, t3, &err) == LH_OK);
  CHECK_MSG(strcmp(t1, t3), "a file ingest reads still moves the digest");
  lh_request_free(&rd);

  /* the document is a symlink to a folder: ingest reads the folder through it, so a changed byte
   * in the folder must change the digest (else a rerun calls the job done on stale content) */
  char lnk[800], l1[65], l2[65];
  snprintf(lnk, sizeof lnk, "%s/../docs-link", dir);
  CHECK(symlink(dir, lnk) == 0);
  digest(lnk, NULL, l1);
  put(sub, "x.c", "int x = 3;\n");
  digest(lnk, NULL, l2);
  CHECK_MSG(strcmp(l1, l2), "a changed byte in a folder given through a symlink changes the digest");

  /* stamps: two documents, the folder (through its link) and one file in it */
  char two[2048], sfile[800];
  snprintf(sfile, sizeof sfile, "%s/README", dir);
  snprintf(two, sizeof two,
           "{\"custom_id\":\"q\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"x\",\"documents\":[\"%s\",\"%s\"]}}",
           lnk, sfile);
  lh_request rs;
  lh_request_parse(two, strlen(two), 1, "/", &rs);
  CHECK_EQ(rs.n_documents, 2);
  const char *exs[] = {outdir};
  lh_inputs_stamp s1[2], s2[2], s3[2];
  char g1[65], g2[65];
  mem ms = {0};
  lh_digest_cache sc = {.get = mget, .put = mput, .user = &ms};
  CHECK_MSG(lh_inputs_digest_excluding(&rs, &sc, exs, 1, g1, s1, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(lh_inputs_stamp_now(&rs, exs, 1, s2, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(!memcmp(s1, s2, sizeof s1), "nothing changed: the stamp now is the stamp taken with the digest");
  CHECK(lh_inputs_digest_excluding(&rs, &sc, exs, 1, g2, s3, &err) == LH_OK);
  CHECK_MSG(ms.hits > 0 && !strcmp(g1, g2) && !memcmp(s1, s3, sizeof s1), "a cache hit gives the same stamp");
  CHECK_MSG(memcmp(&s1[0], &s1[1], sizeof s1[0]), "each document has its own stamp");
  put(outdir, "output.jsonl", "{\"b\": 2}\n");
  CHECK(lh_inputs_stamp_now(&rs, exs, 1, s2, &err) == LH_OK);
  CHECK_MSG(!memcmp(s1, s2, sizeof s1), "what the excluded folder holds does not move the stamp");
  /* changed and changed back, the same size, the mtime set back: the digest is the same, the
   * stamp is not (ctime) */
  struct stat before;
  CHECK(stat(sfile, &before) == 0);
  usleep(20000); /* past the file system clock's tick */
  put(dir, "README", "hellX\n");
  put(dir, "README", "hellO\n");
  const struct timespec ts[2] = {before.st_atim, before.st_mtim};
  CHECK(utimensat(AT_FDCWD, sfile, ts, 0) == 0);
  CHECK(lh_inputs_digest_excluding(&rs, NULL, exs, 1, g2, NULL, &err) == LH_OK);
  CHECK_MSG(!strcmp(g1, g2), "the same bytes again: the same digest");
  CHECK(lh_inputs_stamp_now(&rs, exs, 1, s2, &err) == LH_OK);
  CHECK_MSG(memcmp(&s1[1], &s2[1], sizeof s1[1]), "a file written and written back moves its document's stamp");
  CHECK_MSG(memcmp(&s1[0], &s2[0], sizeof s1[0]), "and the stamp of the folder that holds it");
  CHECK(lh_inputs_digest_excluding(&rs, &sc, exs, 1, g1, s1, &err) == LH_OK);
  put(sub, "new.h", "");
  CHECK(lh_inputs_stamp_now(&rs, exs, 1, s2, &err) == LH_OK);
  CHECK_MSG(memcmp(&s1[0], &s2[0], sizeof s1[0]) && !memcmp(&s1[1], &s2[1], sizeof s1[1]),
            "a new file in the folder moves the folder's stamp alone");
  lh_request_free(&rs);
  globs_tests();
  globs_agree_with_ingest();
  links_agree_with_ingest();
  return lh_test_end();
}
