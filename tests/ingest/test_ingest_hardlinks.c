/* test_ingest_hardlinks.c — hard links, in real tar archives (GNU tar, which stores a file once
 * and its later names as hard link entries without data) and in folders.
 *
 * What it proves: a hard link whose target is not a document (the target left out by --include
 * or --exclude) is read, with its target's content, under its own name; a link to a document
 * already included is recorded as a link to it (no content twice), including a second link once
 * the first one was read; the same holds for a gzip-compressed tar (the target is re-read through
 * the decompressor), for --sort path, and for a folder walk. Before, a hard link was always
 * dropped as "link", so `--include b.txt` lost b.txt's content.
 *
 * newc cpio (test_newc) stores a multiply-linked file's data with its LAST name, the earlier names
 * first with size 0: the content is framed once, under the first name that passes the checks (as
 * for tar), the other names are links, and an empty multiply-linked file is one empty document.
 * Before, the first name was an empty document and the name with the data a link to it: the
 * content was nowhere.
 *
 * Many links (test_many_links): links to a name no earlier entry has, and links to a target whose
 * content gave no document (binary), are decided without stepping over the archive again for each
 * one. Before, every such link re-read the input from its start up to the link, so a 4 MB tar of
 * 8,000 links took 18 s to ingest and a small .tar.gz of a hundred thousand, hours.
 */
#include "tests/test.h"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

static const char content[] = "shared content of a, b and sub/c\n";

static void check(const char *label, const char *input, lh_ingest_order order, const char *const *inc, size_t ninc,
                  const char *const *exc, size_t nexc, const char *want_doc, const char *want_link_doc,
                  const char *link_of_second) {
  lh_ingest_params p = lh_ingest_default_params();
  p.include = inc;
  p.n_include = ninc;
  p.exclude = exc;
  p.n_exclude = nexc;
  p.order = order;
  run_out o;
  run_ingest_paths(&p, &input, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s: %s", label, o.msg);
  const run_entry *d = run_find(&o, want_doc);
  CHECK_MSG(d && d->e.status == LH_ENTRY_OK && run_sha_is(d, content, sizeof content - 1) &&
                d->e.type == LH_ENTRY_HARDLINK && d->link,
            "%s: %s should be read with its target's content (%s)", label, want_doc,
            d ? lh_entry_status_name(d->e.status) : "missing");
  const char *framed = strstr(o.text.data ? o.text.data : "", content);
  CHECK_MSG(framed && !strstr(framed + 1, content), "%s: the content must be framed exactly once", label);
  if (want_link_doc) {
    const run_entry *l = run_find(&o, want_link_doc);
    CHECK_MSG(l && l->e.status == LH_ENTRY_SKIPPED && l->e.reason == LH_REASON_LINK && l->link &&
                  !strcmp(l->link, link_of_second),
              "%s: %s should be a link to %s (%s)", label, want_link_doc, link_of_second,
              l ? l->link ? l->link : "no link" : "missing");
  }
  CHECK_EQ(o.stats.documents, 1);
  run_free(&o);
}

static la_ssize_t mem_write(struct archive *a, void *ud, const void *p, size_t n) {
  (void)a;
  lh_buf_append(ud, p, n);
  return (la_ssize_t)n;
}

/* A GNU tar in memory: n_files files fNNNNNN.txt ("x\n"), then (when target_data) the file target
 * holding target_data, then n_links hard links lNNNNNN to target. */
static void links_tar(lh_buf *out, int n_files, const char *target, const char *target_data, size_t target_len,
                      int n_links) {
  struct archive *a = archive_write_new();
  archive_write_set_format_gnutar(a);
  archive_write_set_bytes_in_last_block(a, 1);
  CHECK(archive_write_open(a, out, NULL, mem_write, NULL) == ARCHIVE_OK);
  char name[32];
  for (int i = 0; i < n_files + (target_data ? 1 : 0) + n_links; i++) {
    struct archive_entry *e = archive_entry_new();
    int is_file = i < n_files, is_target = !is_file && target_data && i == n_files;
    if (is_file) snprintf(name, sizeof name, "f%06d.txt", i);
    else if (!is_target) snprintf(name, sizeof name, "l%06d", i);
    archive_entry_set_pathname(e, is_target ? target : name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    if (!is_file && !is_target) archive_entry_set_hardlink(e, target);
    size_t len = is_file ? 2 : is_target ? target_len : 0;
    archive_entry_set_size(e, (la_int64_t)len);
    CHECK(archive_write_header(a, e) == ARCHIVE_OK);
    if (len) archive_write_data(a, is_file ? "x\n" : target_data, len);
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

/* Ingest the tar in memory; the number of entries with the given reason, and the seconds taken. */
static double ingest_links(const lh_buf *tar, const char *label, lh_entry_reason reason, int64_t *n_reason,
                           run_out *o) {
  lh_ingest_params p = lh_ingest_default_params();
  run_input in = {"links.tar", tar->data, tar->len, NULL};
  double t0 = lh_now();
  run_ingest_inputs(&p, &in, 1, o);
  double secs = lh_now() - t0;
  CHECK_MSG(o->st == LH_OK, "%s: %s", label, o->msg);
  *n_reason = o->stats.skipped_by_reason[reason];
  return secs;
}

static void test_many_links(void) {
  enum { N = 6000 };
  lh_buf tar = {0};
  run_out o;
  int64_t n;
  /* N links to a name no entry before them has */
  links_tar(&tar, 1, "missing", NULL, 0, N);
  double secs = ingest_links(&tar, "links to a missing target", LH_REASON_LINK, &n, &o);
  CHECK_EQ(n, N);
  const run_entry *x = run_find(&o, "l005000");
  CHECK(x && x->e.reason == LH_REASON_LINK);
  CHECK_STR_CONTAINS(x ? x->detail : "", "target is not among the entries before it");
  CHECK_MSG(secs < 4, "%d links to a missing target took %.1f s", N, secs);
  run_free(&o);
  /* N files, a binary target, N links to it: the first link is read (binary), the rest name it */
  lh_buf_clear(&tar);
  links_tar(&tar, N, "blob.bin", "\0\0bin", 5, N);
  secs = ingest_links(&tar, "links to a binary target", LH_REASON_BINARY, &n, &o);
  CHECK_EQ(n, 2); /* the target and the first link */
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_LINK], N - 1);
  x = run_find(&o, "l012000");
  CHECK(x && x->e.reason == LH_REASON_LINK);
  CHECK_STR_CONTAINS(x ? x->detail : "", "a hard link to 'blob.bin', whose content was read for an earlier hard link");
  CHECK_MSG(secs < 4, "%d links to a binary target after %d files took %.1f s", N, N, secs);
  CHECK_EQ(o.stats.documents, N);
  run_free(&o);
  lh_buf_free(&tar);
}

/* One newc cpio ingest: the name (of a.txt, b.txt, c.txt) that holds the content, checked to be
 * there exactly once, with the other two names links to the group's first name; NULL if none. */
static const char *newc_run(const char *label, const char *input, lh_ingest_order order, const char *exclude,
                            const char *first) {
  lh_ingest_params p = lh_ingest_default_params();
  p.order = order;
  p.exclude = &exclude;
  p.n_exclude = exclude ? 1 : 0;
  run_out o;
  run_ingest_paths(&p, &input, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s: %s", label, o.msg);
  static const char *names[] = {"a.txt", "b.txt", "c.txt"};
  const char *doc = NULL;
  int links = 0;
  for (int i = 0; i < 3; i++) {
    const run_entry *x = run_find(&o, names[i]);
    CHECK_MSG(x, "%s: %s missing", label, names[i]);
    if (!x || (exclude && !strcmp(exclude, names[i]))) continue;
    if (x->e.status == LH_ENTRY_OK && run_sha_is(x, content, sizeof content - 1)) doc = names[i];
    else if (x->e.status == LH_ENTRY_SKIPPED && x->e.reason == LH_REASON_LINK && x->link && first &&
             !strcmp(x->link, first))
      links++;
  }
  CHECK_MSG(doc && links == 1 + !exclude, "%s: one name must hold the content and the others link to %s (%s, %d)",
            label, first ? first : "the first", doc ? doc : "none", links);
  const char *framed = strstr(o.text.data ? o.text.data : "", content);
  CHECK_MSG(framed && !strstr(framed + 1, content), "%s: the content must be framed exactly once", label);
  const run_entry *e1 = run_find(&o, "e1.txt"), *e2 = run_find(&o, "e2.txt");
  CHECK_MSG(e1 && e1->e.status == LH_ENTRY_OK && e1->e.bytes == 0, "%s: e1.txt is an empty document", label);
  CHECK_MSG(e2 && e2->e.reason == LH_REASON_LINK, "%s: e2.txt links to e1.txt", label);
  CHECK_MSG(run_find(&o, "o.txt") && run_find(&o, "o.txt")->e.status == LH_ENTRY_OK, "%s: o.txt", label);
  CHECK_EQ(o.stats.documents, 3);
  run_free(&o);
  return doc;
}

/* newc cpio of a.txt and two more names of it (cpio picks the order it writes a group in), an
 * empty file with two names and another file: the group's first name is the document holding
 * the content, in archive and path order, as a file and gzip-compressed; with that name excluded,
 * another name is, and the third links to the first. */
static void test_newc(void) {
  if (run_sh("mkdir n && cd n && printf '%%s' '%s' > a.txt && ln a.txt b.txt && ln a.txt c.txt && : > e1.txt && "
             "ln e1.txt e2.txt && printf 'other\\n' > o.txt && printf 'a.txt\\nb.txt\\nc.txt\\ne1.txt\\ne2.txt\\n"
             "o.txt\\n' | cpio -o -H newc --quiet > ../n.cpio && gzip -nc ../n.cpio > ../n.cpio.gz",
             content))
    LH_TEST_SKIP("could not make a newc cpio with hard links (cpio)");
  const char *inputs[] = {tpath("n.cpio"), tpath("n.cpio.gz")};
  static const lh_ingest_order orders[] = {LH_INGEST_SORT_ARCHIVE, LH_INGEST_SORT_PATH};
  /* the group's first name in the archive: the one the others name as their target */
  static char first[16];
  lh_ingest_params p = lh_ingest_default_params();
  run_out o;
  run_ingest_paths(&p, &inputs[0], 1, &o);
  const run_entry *b = run_find(&o, "b.txt");
  snprintf(first, sizeof first, "%s", b && b->link ? b->link : "b.txt");
  run_free(&o);
  for (int k = 0; k < 2; k++)
    for (int q = 0; q < 2; q++) {
      char label[80];
      snprintf(label, sizeof label, "newc %s, %s", k ? "cpio.gz" : "cpio", q ? "sort path" : "archive order");
      const char *doc = newc_run(label, inputs[k], orders[q], NULL, first);
      CHECK_MSG(doc && !strcmp(doc, first), "%s: the document is %s, not the first name %s", label,
                doc ? doc : "none", first);
      strcat(label, ", first excluded");
      newc_run(label, inputs[k], orders[q], first, first);
    }
}

int main(void) {
  lh_test_begin("test_ingest_hardlinks");
  run_watchdog(120);
  const char *h = tpath("h");
  CHECK(mkdir(h, 0755) == 0);
  char a[1200], b[1200], c[1200], sub[1200];
  snprintf(a, sizeof a, "%s/a.txt", h);
  snprintf(b, sizeof b, "%s/b.txt", h);
  snprintf(sub, sizeof sub, "%s/sub", h);
  snprintf(c, sizeof c, "%s/sub/c.txt", h);
  write_file(a, content, sizeof content - 1);
  CHECK(mkdir(sub, 0755) == 0);
  CHECK(link(a, b) == 0);
  CHECK(link(a, c) == 0);
  if (run_sh("tar -cf hard.tar -C h a.txt b.txt sub/c.txt && gzip -k hard.tar && tar -tvf hard.tar | grep -c 'link to' "
             "| grep -qx 2"))
    LH_TEST_SKIP("GNU tar did not store hard links");
  const char *tar = tpath("hard.tar"), *tgz = tpath("hard.tar.gz");

  /* Without globs: a.txt is the document, the others link to it (as before). */
  {
    lh_ingest_params p = lh_ingest_default_params();
    run_out o;
    run_ingest_paths(&p, &tar, 1, &o);
    const run_entry *x = run_find(&o, "b.txt");
    CHECK(run_find(&o, "a.txt") && run_find(&o, "a.txt")->e.status == LH_ENTRY_OK);
    CHECK(x && x->e.type == LH_ENTRY_HARDLINK && x->e.status == LH_ENTRY_SKIPPED && x->e.reason == LH_REASON_LINK);
    run_free(&o);
  }
  const char *inc_b[] = {"b.txt"}, *inc_b_sub[] = {"b.txt", "sub/*"}, *exc_a[] = {"a.txt"};
  static const lh_ingest_order orders[] = {LH_INGEST_SORT_ARCHIVE, LH_INGEST_SORT_PATH};
  const char *inputs[] = {tar, tgz};
  for (int k = 0; k < 2; k++)
    for (int q = 0; q < 2; q++) {
      char label[64];
      snprintf(label, sizeof label, "%s, %s", k ? "tar.gz" : "tar", q ? "sort path" : "archive order");
      check(label, inputs[k], orders[q], inc_b, 1, NULL, 0, "b.txt", NULL, NULL);
      check(label, inputs[k], orders[q], inc_b_sub, 2, NULL, 0, "b.txt", "sub/c.txt", "a.txt");
      check(label, inputs[k], orders[q], NULL, 0, exc_a, 1, "b.txt", "sub/c.txt", "a.txt");
    }
  /* The archive in memory (seekable too). */
  {
    lh_buf mem = {0};
    lh_error err;
    CHECK(lh_file_read(tar, 1 << 20, &mem, &err) == LH_OK);
    lh_ingest_params p = lh_ingest_default_params();
    p.include = inc_b;
    p.n_include = 1;
    run_input in = {"mem.tar", mem.data, mem.len, NULL};
    run_out o;
    run_ingest_inputs(&p, &in, 1, &o);
    CHECK(run_sha_is(run_find(&o, "b.txt"), content, sizeof content - 1));
    run_free(&o);
    lh_buf_free(&mem);
  }
  /* The folder: the first name met that is a document is read; later names link to it. */
  check("folder", h, LH_INGEST_SORT_ARCHIVE, inc_b, 1, NULL, 0, "b.txt", NULL, NULL);
  check("folder", h, LH_INGEST_SORT_ARCHIVE, inc_b_sub, 2, NULL, 0, "b.txt", "sub/c.txt", "b.txt");
  test_many_links();
  test_newc();
  return lh_test_end();
}
