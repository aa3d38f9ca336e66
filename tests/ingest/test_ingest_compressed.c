/* test_ingest_compressed.c — single-file compressed members (a Debian doc tarball's
 * changelog.gz, a log folder's rotated app.log.1.gz), in real tar and zip archives and folders.
 *
 * What it proves: members compressed with gzip, xz, zstd, bzip2 and lz4 are read as text under
 * their stored names ("docs/changelog.gz"), marked decompressed (in the entry and its manifest
 * line), with the SHA-256 of the text; globs match either name; a compressed tarball inside is not opened (it
 * stays binary, under its own name); a ".gz" that is not compressed is read as stored; a damaged
 * member is an error of that entry only; a nested bomb is stopped by the ratio and byte caps, in
 * an archive and in a folder; --sort path of the tar frames exactly what the folder walk frames;
 * decompress_members = 0 gives the old behavior (skipped as binary). Before, every one of these
 * members was skipped as binary.
 */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

static const char *names[] = {"changelog", "notes", "data", "more", "fast"};
static const char *sfx[] = {".gz", ".xz", ".zst", ".bz2", ".lz4"};
static const char *filt[] = {"gzip", "xz", "zstd", "bzip2", "lz4"};
static char texts[5][128];

static void check_members(const char *label, const run_out *o, const char *prefix) {
  char n[256];
  for (int i = 0; i < 5; i++) {
    snprintf(n, sizeof n, "%sdocs/%s%s", prefix, names[i], sfx[i]);
    const run_entry *x = run_find(o, n);
    CHECK_MSG(x && x->e.status == LH_ENTRY_OK && x->e.decompressed && !strcmp(x->e.decompressed, filt[i]) &&
                  run_sha_is(x, texts[i], strlen(texts[i])),
              "%s: %s should be read as %s text (%s)", label, n, filt[i],
              x ? lh_entry_status_name(x->e.status) : "missing");
    CHECK_MSG(o->text.data && strstr(o->text.data, texts[i]), "%s: the text of %s is not framed", label, n);
  }
}

int main(void) {
  lh_test_begin("test_ingest_compressed");
  run_watchdog(240);
  if (run_sh("command -v gzip && command -v xz && command -v zstd && command -v bzip2 && command -v lz4 && "
             "command -v zip && command -v tar"))
    LH_TEST_SKIP("needs gzip, xz, zstd, bzip2, lz4, zip and tar (scripts/deps.sh test)");
  CHECK(mkdir(tpath("t"), 0755) == 0);
  CHECK(mkdir(tpath("t/docs"), 0755) == 0);
  static const char *tools[] = {"gzip -c", "xz -c", "zstd -q -c", "bzip2 -c", "lz4 -q -c"};
  for (int i = 0; i < 5; i++) {
    snprintf(texts[i], sizeof texts[i], "the %s of the package, version %d\nsecond line\n", names[i], i);
    write_file(tpath("plain"), texts[i], strlen(texts[i]));
    if (run_sh("%s plain > t/docs/%s%s", tools[i], names[i], sfx[i])) return lh_test_end();
  }
  write_file(tpath("t/fake.gz"), "not compressed at all\n", 22);
  write_file(tpath("t/readme.txt"), "plain\n", 6);
  CHECK(run_sh("cp t/readme.txt inner.txt && tar -czf t/nested.tar.gz inner.txt && "
               "head -c 4000 /dev/urandom > rnd && gzip -c rnd > t/random.gz && "
               "printf 'read me\\n' | gzip -c > t/readme2.txt.gz && "
               "tar -cf members.tar -C t . && (cd t && zip -qr ../members.zip .)") == 0);
  const char *tar = tpath("members.tar"), *zip = tpath("members.zip"), *dir = tpath("t");
  const run_entry *x;
  lh_ingest_params p = lh_ingest_default_params();
  run_out o;
  run_ingest_paths(&p, &tar, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s", o.msg);
  check_members("tar", &o, "./");
  CHECK((x = run_find(&o, "./nested.tar.gz")) && x->e.reason == LH_REASON_BINARY && !x->e.decompressed);
  CHECK((x = run_find(&o, "./fake.gz")) && x->e.status == LH_ENTRY_OK && !x->e.decompressed &&
        run_sha_is(x, "not compressed at all\n", 22));
  CHECK((x = run_find(&o, "./random.gz")) && x->e.reason == LH_REASON_BINARY && x->e.decompressed);
  /* the manifest line says so */
  x = run_find(&o, "./docs/changelog.gz");
  lh_buf line = {0};
  if (x) lh_ingest_entry_json(&x->e, &line);
  CHECK_STR_CONTAINS(line.data, "\"path\":\"./docs/changelog.gz\"");
  CHECK_STR_CONTAINS(line.data, "\"decompressed\":\"gzip\"");
  lh_buf_free(&line);
  run_free(&o);

  run_ingest_paths(&p, &zip, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s", o.msg);
  check_members("zip", &o, "");
  run_free(&o);

  /* --sort path of the tar and the folder walk frame the same text */
  p.order = LH_INGEST_SORT_PATH;
  run_out ot, of;
  run_ingest_paths(&p, &tar, 1, &ot);
  run_ingest_paths(&p, &dir, 1, &of);
  check_members("tar, sort path", &ot, "./");
  check_members("folder", &of, "");
  CHECK_MSG(ot.text.len == of.text.len && !memcmp(ot.text.data, of.text.data, ot.text.len),
            "tar --sort path and the folder differ:\n%s\n----\n%s", ot.text.data, of.text.data);
  run_free(&ot);
  run_free(&of);

  /* globs see both names */
  p = lh_ingest_default_params();
  const char *inc[] = {"*.txt"}, *exc[] = {"*.gz"};
  p.include = inc;
  p.n_include = 1;
  run_ingest_paths(&p, &tar, 1, &o);
  CHECK((x = run_find(&o, "./readme2.txt.gz")) && x->e.status == LH_ENTRY_OK);
  CHECK((x = run_find(&o, "./docs/changelog.gz")) && x->e.reason == LH_REASON_NOT_INCLUDED);
  run_free(&o);
  p = lh_ingest_default_params();
  p.exclude = exc;
  p.n_exclude = 1;
  run_ingest_paths(&p, &tar, 1, &o);
  CHECK((x = run_find(&o, "./docs/changelog.gz")) && x->e.reason == LH_REASON_EXCLUDED);
  CHECK((x = run_find(&o, "./docs/notes.xz")) && x->e.status == LH_ENTRY_OK);
  run_free(&o);

  /* a .gz inside a .tar.gz (a log folder's rotated file): the member is named as stored */
  CHECK(run_sh("mkdir -p lg/logs && printf 'GET /index 200\\nGET /health 200\\n' | gzip -c > lg/logs/app.log.gz && "
               "tar -czf logs.tar.gz -C lg logs") == 0);
  const char *logs = tpath("logs.tar.gz");
  p = lh_ingest_default_params();
  run_ingest_paths(&p, &logs, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s", o.msg);
  CHECK_MSG((x = run_find(&o, "logs/app.log.gz")) && x->e.status == LH_ENTRY_OK && x->e.decompressed &&
                !strcmp(x->e.decompressed, "gzip") && run_sha_is(x, "GET /index 200\nGET /health 200\n", 31),
            "logs/app.log.gz: %s", x ? lh_entry_status_name(x->e.status) : "missing");
  CHECK(o.text.data && strstr(o.text.data, "<document path=\"logs/app.log.gz\">\nGET /index 200\n"));
  run_free(&o);

  /* off: the old behavior */
  p = lh_ingest_default_params();
  p.decompress_members = 0;
  run_ingest_paths(&p, &tar, 1, &o);
  CHECK((x = run_find(&o, "./docs/changelog.gz")) && x->e.reason == LH_REASON_BINARY);
  run_free(&o);

  /* a damaged member is that entry's error */
  CHECK(run_sh("mkdir d2 && cp t/readme.txt d2/ok.txt && seq 1 2000000 | gzip -c | head -c 500000 > d2/cut.gz && "
               "tar -cf damaged.tar -C d2 cut.gz ok.txt") == 0);
  const char *dam = tpath("damaged.tar");
  p = lh_ingest_default_params();
  p.on_error = LH_INGEST_ON_ERROR_SKIP;
  run_ingest_paths(&p, &dam, 1, &o);
  CHECK_EQ(o.st, LH_OK);
  CHECK_MSG((x = run_find(&o, "cut.gz")) && x->e.status == LH_ENTRY_ERROR && x->e.reason == LH_REASON_CORRUPT &&
                x->e.bytes > 500000 && x->e.decompressed,
            "cut.gz: %s", x ? x->detail : "missing");
  if (x) CHECK_STR_CONTAINS(x->detail, "truncated gzip input");
  CHECK((x = run_find(&o, "ok.txt")) && x->e.status == LH_ENTRY_OK);
  run_free(&o);

  /* nested bombs: 64 MB of one line in a gzip member, in a tar and in a folder */
  CHECK(run_sh("mkdir b && yes 'all work and no play makes a dull bomb' | head -c 64000000 | gzip -c > b/bomb.txt.gz && "
               "tar -cf bomb.tar -C b bomb.txt.gz") == 0);
  const char *bombs[] = {tpath("bomb.tar"), tpath("b")};
  for (int k = 0; k < 2; k++) {
    p = lh_ingest_default_params();
    p.ratio_grace_bytes = 4 << 20;
    run_ingest_paths(&p, &bombs[k], 1, &o);
    CHECK_MSG(o.st == LH_ELIMIT, "bomb %d: %s", k, o.msg);
    CHECK_STR_CONTAINS(o.msg, "bomb.txt");
    CHECK_STR_CONTAINS(o.msg, "decompression ratio");
    CHECK(o.n && o.ents[o.n - 1].e.reason == LH_REASON_BOMB && o.ents[o.n - 1].e.bytes < 64000000);
    run_free(&o);
    p = lh_ingest_default_params();
    p.max_decompressed_bytes = 8 << 20;
    run_ingest_paths(&p, &bombs[k], 1, &o);
    CHECK_MSG(o.st == LH_ELIMIT && strstr(o.msg, "decompression cap"), "bomb %d cap: %s", k, o.msg);
    run_free(&o);
    /* trusted: read whole */
    p = lh_ingest_default_params();
    p.ratio_grace_bytes = 4 << 20;
    p.max_ratio = 100000;
    run_ingest_paths(&p, &bombs[k], 1, &o);
    CHECK_MSG(o.st == LH_OK && o.n && o.ents[o.n - 1].e.bytes == 64000000, "bomb %d trusted: %s", k, o.msg);
    run_free(&o);
  }
  return lh_test_end();
}
