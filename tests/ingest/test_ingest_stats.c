/* test_ingest_stats.c — what an ingest says about what it did not read.
 *
 * What it proves: the stats count skipped entries per reason and failed entries per reason; an
 * input that yields no text is counted and explained in a note (no entries at all although bytes
 * were read, as a gzip of zeros that libarchive reads as an empty tar; entries none of which is a
 * document, with the reasons; only empty documents); no_text is set once such an ingest is done;
 * lh_ingest_summary_json gives the same as one JSON object. Before these counters existed, a
 * gzip of zeros gave 0 entries and success with nothing to tell it from a real archive.
 */
#include "tests/test.h"

#include <cjson/cJSON.h>

#include "tests/ingest/ingest_run.h"
#include "tests/ingest/mem_archive.h"

static void test_zeros(void) {
  /* 1 MiB of zeros behind gzip: libarchive reads an empty tar. */
  lh_buf gz = {0};
  const fent z[] = {{"data", "", 0, 0, NULL, 1 << 20}};
  make_archive(&gz, ARCHIVE_FORMAT_RAW, ARCHIVE_FILTER_GZIP, z, 1);
  lh_buf ok = {0};
  const fent f[] = {{"fine.txt", "fine\n", (size_t)-1, 0, NULL, 0}};
  make_archive(&ok, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, f, 1);
  lh_ingest_params p = lh_ingest_default_params();
  run_input in[2] = {{"zeros.tar.gz", gz.data, gz.len, NULL}, {"ok.tar", ok.data, ok.len, NULL}};
  run_out o;
  run_ingest_inputs(&p, in, 1, &o);
  CHECK_EQ(o.st, LH_OK);
  CHECK_EQ(o.n, 0);
  CHECK_EQ(o.stats.inputs_without_text, 1);
  CHECK_EQ(o.stats.inputs_without_entries, 1);
  CHECK_EQ(o.stats.no_text, 1);
  CHECK_STR_CONTAINS(o.notes.data, "zeros.tar.gz: no text: no entries: read as ");
  CHECK_STR_CONTAINS(o.notes.data, "NUL blocks");
  cJSON *j = cJSON_Parse(o.summary.data);
  CHECK_MSG(j != NULL, "summary: %s", o.summary.data);
  if (j) {
    CHECK(cJSON_IsTrue(cJSON_GetObjectItem(j, "no_text")));
    CHECK_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(j, "notes")), 1);
    cJSON_Delete(j);
  }
  run_free(&o);
  /* With a second input that has text: the note stays, no_text does not. */
  run_ingest_inputs(&p, in, 2, &o);
  CHECK_EQ(o.stats.inputs_without_text, 1);
  CHECK_EQ(o.stats.no_text, 0);
  CHECK_EQ(o.stats.documents, 1);
  run_free(&o);
  lh_buf_free(&gz);
  lh_buf_free(&ok);
}

static void test_reasons(void) {
  char bin[64] = {0};
  char big[300];
  memset(big, 'x', sizeof big);
  const fent files[] = {
      {"d/", NULL, 0, AE_IFDIR, NULL, 0},         {"d/bin.o", bin, sizeof bin, 0, NULL, 0},
      {"d/bin2.o", bin, sizeof bin, 0, NULL, 0},  {"d/big.txt", big, sizeof big, 0, NULL, 0},
      {"d/skip.log", "log\n", (size_t)-1, 0, NULL, 0}, {"d/ln", NULL, 0, AE_IFLNK, "bin.o", 0},
  };
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_PAX_RESTRICTED, ARCHIVE_FILTER_NONE, files, sizeof files / sizeof *files);
  lh_ingest_params p = lh_ingest_default_params();
  const char *exc[] = {"*.log"};
  p.exclude = exc;
  p.n_exclude = 1;
  p.max_file_bytes = 200;
  run_input in = {"mixed.tar", tar.data, tar.len, NULL};
  run_out o;
  run_ingest_inputs(&p, &in, 1, &o);
  CHECK_EQ(o.st, LH_OK);
  CHECK_EQ(o.stats.entries, 6);
  CHECK_EQ(o.stats.documents, 0);
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_BINARY], 2);
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_TOO_LARGE], 1);
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_EXCLUDED], 1);
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_LINK], 1);
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_DIRECTORY], 1);
  CHECK_EQ(o.stats.no_text, 1);
  CHECK_EQ(o.stats.inputs_without_entries, 0);
  CHECK_STR_CONTAINS(o.notes.data, "mixed.tar: no text: 6 entries, none a document (skipped: directory 1, link 1, "
                                   "excluded 1, too-large 1, binary 2)");
  cJSON *j = cJSON_Parse(o.summary.data);
  CHECK_MSG(j != NULL, "summary: %s", o.summary.data);
  if (j) {
    const cJSON *sk = cJSON_GetObjectItem(j, "skipped");
    CHECK(cJSON_GetObjectItem(sk, "binary") && cJSON_GetObjectItem(sk, "binary")->valueint == 2);
    CHECK(cJSON_GetObjectItem(sk, "directory") == NULL); /* directories are not worth a word */
    CHECK(cJSON_GetObjectItem(j, "entries")->valueint == 6);
    cJSON_Delete(j);
  }
  run_free(&o);

  /* Errors are counted apart: a truncated tar. */
  char body[5000];
  memset(body, 'y', sizeof body);
  const fent tf[] = {{"long.txt", body, sizeof body, 0, NULL, 0}};
  lh_buf t = {0};
  make_archive(&t, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, tf, 1);
  t.len = 512 + 1000;
  p = lh_ingest_default_params();
  p.on_error = LH_INGEST_ON_ERROR_SKIP;
  run_input tin = {"cut.tar", t.data, t.len, NULL};
  run_ingest_inputs(&p, &tin, 1, &o);
  CHECK_EQ(o.stats.errors_by_reason[LH_REASON_CORRUPT], 1);
  CHECK_EQ(o.stats.documents, 0); /* an entry that failed is not a document */
  run_free(&o);

  /* Only empty documents. */
  const fent ef[] = {{"empty.txt", "", 0, 0, NULL, 0}};
  lh_buf e = {0};
  make_archive(&e, ARCHIVE_FORMAT_ZIP, ARCHIVE_FILTER_NONE, ef, 1);
  p = lh_ingest_default_params();
  run_input ein = {"empty.zip", e.data, e.len, NULL};
  run_ingest_inputs(&p, &ein, 1, &o);
  CHECK_EQ(o.stats.documents, 1);
  CHECK_EQ(o.stats.no_text, 1);
  CHECK_STR_CONTAINS(o.notes.data, "empty.zip: no text: 1 document, all empty");
  run_free(&o);
  lh_buf_free(&tar);
  lh_buf_free(&t);
  lh_buf_free(&e);
}

int main(void) {
  lh_test_begin("test_ingest_stats");
  test_zeros();
  test_reasons();
  return lh_test_end();
}
