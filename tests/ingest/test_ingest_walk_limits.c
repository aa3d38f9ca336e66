/* test_ingest_walk_limits.c — what a folder walk must leave alone: exclude_paths (the runner's
 * output folder inside a document folder).
 *
 * What it proves: a path in exclude_paths, named by any spelling (through a symlink, with "./"),
 * is recorded as excluded and never entered or read, also when it is the walked folder itself; a
 * path that does not exist is ignored. Without it the walk is as before. Before, the output
 * folder's files were read as documents.
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

int main(void) {
  lh_test_begin("test_ingest_walk_limits");
  run_watchdog(60);
  test_exclude_paths();
  return lh_test_end();
}
