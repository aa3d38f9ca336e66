/* test_ingest_add_as.c — lh_ingest_add_path_as: open one path, name the input another.
 *
 * What it proves: a plain file opened by its absolute path and by a relative one, both named as a
 * batch wrote it ("notes.txt"), frames byte-identical text and tokens (with lh_ingest_add_path
 * the two spellings named the document differently, so the prompts differed); the name is the
 * document path of a plain or compressed single file and the template's {input}, while a
 * folder's entries stay relative to it; refusals (missing, FIFO) name the input by its name;
 * confine_root still judges the path that is opened; "-" must be both the path and the name.
 */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

/* One input added as (path, name); the whole run kept in o. */
static void run_as(const lh_ingest_params *p, const char *path, const char *name, run_out *o) {
  run_input in = {path, NULL, 0, name};
  run_ingest_inputs(p, &in, 1, o);
}

int main(void) {
  lh_test_begin("test_ingest_add_as");
  run_watchdog(60);
  lh_tokenizer *tok = NULL;
  lh_error err = {0};
  char fx[4096];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(fx, sizeof fx, "%s/tests/fixtures/tokenizer/minimax.tokenizer.json", src ? src : ".");
  CHECK(lh_tokenizer_open(fx, &tok, &err) == LH_OK);

  CHECK(run_sh("mkdir -p b/docs && printf 'The deploy key rotation interval is 417 days.\\n' > b/notes.txt && "
               "gzip -c b/notes.txt > b/notes.txt.gz && cp b/notes.txt b/docs/a.txt && mkfifo b/pipe") == 0);
  char rel[1100];
  snprintf(rel, sizeof rel, "%s/b/../b/./notes.txt", lh_test_tmpdir());
  const char *abs = tpath("b/notes.txt");
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = tok;
  p.template_text = "<document path=\"{path}\" input=\"{input}\">\n{text}{nl}</document>\n";

  /* Two spellings, one name: the same text and tokens, named as written. */
  run_out o1, o2;
  run_as(&p, abs, "notes.txt", &o1);
  run_as(&p, rel, "notes.txt", &o2);
  CHECK_MSG(o1.st == LH_OK && o2.st == LH_OK, "%s %s", o1.msg, o2.msg);
  CHECK_STR_CONTAINS(o1.text.data, "<document path=\"notes.txt\" input=\"notes.txt\">\nThe deploy key");
  CHECK(o1.text.len == o2.text.len && !memcmp(o1.text.data, o2.text.data, o1.text.len));
  CHECK(o1.tokens.len && o1.tokens.len == o2.tokens.len &&
        !memcmp(o1.tokens.data, o2.tokens.data, o1.tokens.len * sizeof *o1.tokens.data));
  CHECK(run_find(&o1, "notes.txt") && run_find(&o1, "notes.txt")->e.status == LH_ENTRY_OK);
  run_free(&o1);
  run_free(&o2);
  /* lh_ingest_add_path names it by the path it opens (as before) */
  run_ingest_paths(&p, &abs, 1, &o1);
  CHECK(o1.st == LH_OK && run_find(&o1, abs));
  run_free(&o1);

  /* A compressed single file: the name minus the suffix, as for a path. */
  run_as(&p, tpath("b/notes.txt.gz"), "notes.txt.gz", &o1);
  CHECK_MSG(o1.st == LH_OK && run_find(&o1, "notes.txt"), "%s", o1.msg);
  run_free(&o1);

  /* A folder: entries stay relative to it; {input} is the name. */
  run_as(&p, tpath("b/docs"), "docs/", &o1);
  CHECK_MSG(o1.st == LH_OK && run_find(&o1, "a.txt"), "%s", o1.msg);
  CHECK_STR_CONTAINS(o1.text.data, "<document path=\"a.txt\" input=\"docs/\">");
  run_free(&o1);

  /* Refusals name the input by its name. */
  run_as(&p, tpath("b/missing.txt"), "missing.txt", &o1);
  CHECK_EQ(o1.add_st, LH_ENOTFOUND);
  CHECK_MSG(!strncmp(o1.msg, "missing.txt: ", 13), "%s", o1.msg);
  run_free(&o1);
  run_as(&p, tpath("b/pipe"), "pipe", &o1);
  CHECK_EQ(o1.add_st, LH_EINVAL);
  CHECK_MSG(!strncmp(o1.msg, "pipe: is a FIFO", 15), "%s", o1.msg);
  run_free(&o1);

  /* confine_root judges what is opened, whatever it is called. */
  CHECK(mkdir(tpath("root"), 0755) == 0);
  p.confine_root = tpath("root");
  run_as(&p, abs, "root/notes.txt", &o1);
  CHECK_EQ(o1.add_st, LH_EINVAL);
  CHECK_STR_CONTAINS(o1.msg, "outside the documents root");
  run_free(&o1);
  p.confine_root = NULL;

  /* "-" is both or neither. */
  run_as(&p, "-", "notes.txt", &o1);
  CHECK_EQ(o1.add_st, LH_EINVAL);
  run_free(&o1);
  run_as(&p, abs, "-", &o1);
  CHECK_EQ(o1.add_st, LH_EINVAL);
  run_free(&o1);
  lh_tokenizer_close(tok);
  return lh_test_end();
}
