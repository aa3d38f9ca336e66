/* test_ingest_walk_limits.c — what a folder walk must leave alone: exclude_paths (the runner's
 * output folder inside a document folder) and confine_root (a documents root for batch files
 * written by others).
 *
 * What it proves: a path in exclude_paths, named by any spelling (through a symlink, with "./"),
 * is recorded as excluded and never entered or read, also when it is the walked folder itself; a
 * path that does not exist is ignored. With confine_root, inputs that resolve outside the root
 * (by "..", by an absolute path, or through a symlink) are refused when added, naming both paths;
 * symlinks met in a walk that point outside the root are recorded with reason outside-root (and
 * those inside, or dangling inside, as links, as without a root); nothing outside is ever framed.
 * Without the parameters the walk is as before. Before, the output folder's files were read as
 * documents and an escaping path was read wherever it pointed.
 */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

static void test_exclude_paths(void) {
  CHECK(run_sh("mkdir -p docs/out/sub && printf 'doc\\n' > docs/a.txt && printf '{\"result\": 1}\\n' > "
               "docs/out/result.json && printf 'x\\n' > docs/out/sub/x.txt && printf 'b\\n' > docs/b.txt && "
               "ln -s docs/out outlink") == 0);
  const char *docs = tpath("docs");
  const char *ex[] = {tpath("outlink"), tpath("docs/./b.txt"), tpath("no/such/path")};
  lh_ingest_params p = lh_ingest_default_params();
  p.exclude_paths = ex;
  p.n_exclude_paths = 3;
  run_out o;
  run_ingest_paths(&p, &docs, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s", o.msg);
  const run_entry *x;
  CHECK((x = run_find(&o, "out/")) && x->e.status == LH_ENTRY_SKIPPED && x->e.reason == LH_REASON_EXCLUDED);
  CHECK((x = run_find(&o, "b.txt")) && x->e.reason == LH_REASON_EXCLUDED);
  CHECK(run_find(&o, "out/result.json") == NULL && run_find(&o, "out/sub/") == NULL);
  CHECK((x = run_find(&o, "a.txt")) && x->e.status == LH_ENTRY_OK);
  CHECK(!strstr(o.text.data ? o.text.data : "", "result"));
  CHECK_EQ(o.stats.documents, 1);
  run_free(&o);
  /* without it, the output folder is read (what happened before) */
  p.n_exclude_paths = 0;
  p.exclude_paths = NULL;
  run_ingest_paths(&p, &docs, 1, &o);
  CHECK((x = run_find(&o, "out/result.json")) && x->e.status == LH_ENTRY_OK);
  run_free(&o);
  /* the walked folder itself */
  const char *self[] = {docs};
  p.exclude_paths = self;
  p.n_exclude_paths = 1;
  run_ingest_paths(&p, &docs, 1, &o);
  CHECK(o.st == LH_OK && o.n == 1 && o.ents[0].e.type == LH_ENTRY_INPUT && o.ents[0].e.reason == LH_REASON_EXCLUDED);
  CHECK_EQ(o.stats.documents, 0);
  run_free(&o);
}

static void test_confine_root(void) {
  CHECK(run_sh("mkdir -p root/docs/sub && printf 'inside\\n' > root/docs/in.txt && printf 'secret\\n' > secret.txt && "
               "cd root/docs && ln -s ../../secret.txt esc && ln -s /etc/passwd abs && ln -s in.txt inside && "
               "ln -s ../nowhere dangle && ln -s ../../ updir && ln -s ../docs/sub/../in.txt roundabout && "
               "cd ../.. && ln -s root/docs alias && ln -s ../secret.txt root/to-secret") == 0);
  const char *root = tpath("root"), *docs = tpath("root/docs");
  lh_ingest_params p = lh_ingest_default_params();
  p.confine_root = root;
  run_out o;
  run_ingest_paths(&p, &docs, 1, &o);
  CHECK_MSG(o.st == LH_OK, "%s", o.msg);
  static const char *const outside[] = {"esc", "abs", "updir"}, *const inside[] = {"inside", "dangle", "roundabout"};
  const run_entry *x;
  for (size_t i = 0; i < 3; i++) {
    CHECK_MSG((x = run_find(&o, outside[i])) && x->e.status == LH_ENTRY_SKIPPED &&
                  x->e.reason == LH_REASON_OUTSIDE_ROOT,
              "%s: %s", outside[i], x ? lh_entry_reason_name(x->e.reason) : "missing");
    if (x) CHECK_STR_CONTAINS(x->detail, "outside the documents root");
    CHECK_MSG((x = run_find(&o, inside[i])) && x->e.reason == LH_REASON_LINK, "%s: %s", inside[i],
              x ? lh_entry_reason_name(x->e.reason) : "missing");
  }
  CHECK(!strstr(o.text.data ? o.text.data : "", "secret") && !strstr(o.text.data ? o.text.data : "", "root:"));
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_OUTSIDE_ROOT], 3);
  run_free(&o);
  /* without a root: links, as before */
  p.confine_root = NULL;
  run_ingest_paths(&p, &docs, 1, &o);
  CHECK((x = run_find(&o, "esc")) && x->e.reason == LH_REASON_LINK);
  run_free(&o);

  /* inputs that resolve outside are refused when added, naming both */
  p.confine_root = root;
  const char *bad[] = {tpath("root/docs/../../secret.txt"), tpath("root/to-secret"), tpath("root/docs/esc"), "/etc"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    run_ingest_paths(&p, &bad[i], 1, &o);
    CHECK_MSG(o.add_st == LH_EINVAL, "%s: %d %s", bad[i], (int)o.add_st, o.msg);
    CHECK_STR_CONTAINS(o.msg, "outside the documents root");
    CHECK_STR_CONTAINS(o.msg, bad[i]);
    run_free(&o);
  }
  /* a path that reaches the root's inside through a symlink elsewhere is inside */
  const char *alias = tpath("alias");
  run_ingest_paths(&p, &alias, 1, &o);
  CHECK_MSG(o.st == LH_OK && run_find(&o, "in.txt"), "alias: %s", o.msg);
  run_free(&o);
  /* a root that does not exist is an error at open */
  p.confine_root = tpath("no-such-root");
  lh_ingest *ing;
  lh_error err;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "no-such-root");
}

/* A file input checked when added and swapped for a symlink out of the root before it is read: the
 * check is made again on the file as opened, so the swap is refused, not read. A swap whose link
 * stays inside the root is read. */
static void test_confine_root_swap(void) {
  CHECK(run_sh("mkdir -p sw/root && printf 'first\\n' > sw/root/a.txt && printf 'second\\n' > sw/root/b.txt && "
               "printf 'third\\n' > sw/root/c.txt && printf 'secret-swap\\n' > sw/secret.txt") == 0);
  lh_ingest_params p = lh_ingest_default_params();
  p.confine_root = tpath("sw/root");
  p.on_error = LH_INGEST_ON_ERROR_SKIP; /* go on past the refused input to the next */
  lh_error err = {0};
  lh_ingest *ing = NULL;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_OK);
  if (!ing) return;
  const char *names[] = {"sw/root/a.txt", "sw/root/b.txt", "sw/root/c.txt"};
  for (int i = 0; i < 3; i++) CHECK_MSG(lh_ingest_add_path(ing, tpath(names[i]), &err) == LH_OK, "%s", err.msg);
  /* after the check, before the read */
  CHECK(run_sh("cd sw/root && rm b.txt c.txt && ln -s ../secret.txt b.txt && ln -s a.txt c.txt") == 0);
  lh_buf text = {0};
  int saw_b = 0, saw_c = 0;
  for (;;) {
    lh_ingest_batch b;
    lh_status st = lh_ingest_next(ing, &b, &err);
    lh_buf_append(&text, b.text, b.text_len);
    for (size_t i = 0; i < b.n_entries; i++) {
      const lh_ingest_entry *e = &b.entries[i];
      if (e->path_len >= 5 && !memcmp(e->path + e->path_len - 5, "b.txt", 5) && e->type == LH_ENTRY_INPUT) {
        saw_b = 1;
        CHECK_MSG(e->status == LH_ENTRY_ERROR && e->reason == LH_REASON_OUTSIDE_ROOT, "b.txt: %s",
                  lh_entry_reason_name(e->reason));
        CHECK_STR_CONTAINS(e->detail, "outside the documents root");
        CHECK_STR_CONTAINS(e->detail, "secret.txt");
      }
      if (e->path_len >= 5 && !memcmp(e->path + e->path_len - 5, "c.txt", 5) && e->status == LH_ENTRY_OK) saw_c = 1;
    }
    CHECK_MSG(st == LH_OK, "%s", err.msg);
    if (st || b.done) break;
  }
  CHECK(saw_b && saw_c);
  lh_buf_append(&text, "", 1);
  CHECK(!strstr(text.data, "secret-swap"));
  CHECK(strstr(text.data, "first") && !strstr(text.data, "second"));
  lh_buf_free(&text);
  lh_ingest_close(ing);
}

int main(void) {
  lh_test_begin("test_ingest_walk_limits");
  run_watchdog(60);
  test_exclude_paths();
  test_confine_root();
  test_confine_root_swap();
  return lh_test_end();
}
