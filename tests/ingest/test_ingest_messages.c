/* test_ingest_messages.c — what a damaged archive's error says, for archives made by the real
 * tools (7z, zip, tar with gzip and xz) and cut short.
 *
 * What it proves: the error names the input and the entry (or, when the headers themselves are
 * gone, where they were read) and carries libarchive's own message; where libarchive has none
 * (its 7-Zip reader fails on a truncated archive without one), the message says what was found
 * instead: for 7-Zip, the length its start header promises against the input's. Never "unknown
 * libarchive error", which a truncated 7z gave before, and never "input offset -1", which a gzip,
 * xz, zstd or bzip2 stream cut inside its first block gave. The same detail is in the manifest entry
 * with on_error skip, in archive order and with --sort path.
 */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

/* Ingest the damaged file cut (in the test's folder) in archive order, in path order and with
 * on_error skip; the error must name it and hold every needle. */
static void check_cut(const char *cut, const char *const *needles, size_t n_needles) {
  const char *path = tpath(cut);
  for (int mode = 0; mode < 3; mode++) {
    lh_ingest_params p = lh_ingest_default_params();
    if (mode == 1) p.order = LH_INGEST_SORT_PATH;
    if (mode == 2) p.on_error = LH_INGEST_ON_ERROR_SKIP;
    run_out o;
    run_ingest_paths(&p, &path, 1, &o);
    const char *msg = o.msg;
    if (mode == 2) {
      /* the damaged entry (or the input's line) carries the same words */
      CHECK_MSG(o.st == LH_OK, "%s skip: %s", cut, o.msg);
      msg = "";
      static char line[LH_ERROR_MSG_MAX + 300];
      for (size_t i = 0; i < o.n; i++)
        if (o.ents[i].e.status == LH_ENTRY_ERROR) {
          /* the entry's own line: its path, then its detail */
          snprintf(line, sizeof line, "%s '%s': %s", o.ents[i].e.type == LH_ENTRY_INPUT ? "input" : "entry",
                   o.ents[i].path, o.ents[i].detail);
          msg = line;
        }
    } else {
      CHECK_MSG(o.st == LH_EFORMAT, "%s mode %d: status %d: %s", cut, mode, (int)o.st, o.msg);
      CHECK_STR_CONTAINS(msg, cut);
    }
    for (size_t k = 0; k < n_needles; k++) CHECK_STR_CONTAINS(msg, needles[k]);
    CHECK_MSG(!strstr(msg, "unknown libarchive error"), "%s: %s", cut, msg);
    CHECK_MSG(!strstr(msg, "offset -1"), "%s: no offset: %s", cut, msg);
    if (mode == 0) fprintf(stderr, "%s: %s\n", cut, msg);
    run_free(&o);
  }
}

static void truncated(const char *name, long keep_num, long keep_den, const char *const *needles, size_t n_needles) {
  char cut[256];
  snprintf(cut, sizeof cut, "cut-%s", name);
  struct stat sb;
  CHECK(stat(tpath(name), &sb) == 0);
  long keep = (long)sb.st_size * keep_num / keep_den;
  if (run_sh("head -c %ld '%s' > '%s'", keep, name, cut)) return;
  check_cut(cut, needles, n_needles);
}

/* A tar under 48 KiB cut inside its second header is an error naming the input and the offset of
 * that header, as a file, gzip-compressed and in memory. Before, libarchive's ISO 9660 bid read
 * such a short input to its end, after which the tar reader took the cut header for a clean end:
 * exit 0 and b.txt lost without a word (larger tars said "Truncated tar archive"). */
static void small_tar_cut_in_header(void) {
  if (run_sh("mkdir small && cd small && printf 'alpha\\n' > a.txt && printf 'bravo\\n' > b.txt && "
             "tar --format=ustar -cf ../small.tar a.txt b.txt && cd .. && head -c 1324 small.tar > cut-small.tar && "
             "gzip -nc cut-small.tar > cut-small.tar.gz"))
    return;
  const char *nt[] = {"after entry 'a.txt'", "input offset 1024", "Truncated tar archive"};
  check_cut("cut-small.tar", nt, 3);
  const char *ngz[] = {"after entry 'a.txt'", "input offset ", "Truncated tar archive"};
  check_cut("cut-small.tar.gz", ngz, 3);
  lh_buf mem = {0};
  lh_error err;
  CHECK(lh_file_read(tpath("cut-small.tar"), 1 << 20, &mem, &err) == LH_OK);
  lh_ingest_params p = lh_ingest_default_params();
  run_input in = {"mem-cut.tar", mem.data, mem.len, NULL};
  run_out o;
  run_ingest_inputs(&p, &in, 1, &o);
  CHECK_MSG(o.st == LH_EFORMAT, "cut tar in memory: status %d: %s", (int)o.st, o.msg);
  CHECK_STR_CONTAINS(o.msg, "mem-cut.tar");
  CHECK_STR_CONTAINS(o.msg, "Truncated tar archive");
  run_free(&o);
  lh_buf_free(&mem);
}

int main(void) {
  lh_test_begin("test_ingest_messages");
  run_watchdog(120);
  if (run_sh("command -v 7z && command -v zip && command -v xz && command -v gzip") != 0)
    LH_TEST_SKIP("needs 7z, zip, xz and gzip (scripts/deps.sh test)");
  /* Three text files of about 250 KB that compress poorly enough to be cut in their data. */
  if (run_sh("mkdir src && for i in 1 2 3; do od -An -tx4 -w32 -N120000 /dev/urandom | sed \"s/^/line $i /\" "
             "> src/f$i.txt; done && 7z a -bd -y a.7z ./src/*.txt >/dev/null && (cd src && zip -q ../a.zip *.txt && "
             "tar -czf ../a.tar.gz *.txt && tar -cJf ../a.tar.xz *.txt)"))
    LH_TEST_SKIP("could not make the archives");
  small_tar_cut_in_header();
  const char *n7[] = {"reading the first header", "7-Zip", "truncated"};
  truncated("a.7z", 1, 100, n7, 3);
  truncated("a.7z", 1, 2, n7, 3);
  const char *nzip[] = {"entry 'f", "ZIP"};
  truncated("a.zip", 1, 2, nzip, 2);
  const char *ngz[] = {"entry 'f", "gzip"};
  truncated("a.tar.gz", 1, 2, ngz, 2);
  const char *nxz[] = {"entry 'f", "zma"}; /* libarchive: "Lzma library error: ..." / "truncated lzma input" */
  truncated("a.tar.xz", 1, 2, nxz, 2);
  /* a compressed stream cut before its first block ends: the header fails; where it stopped */
  if (run_sh("printf 'a short note\\n' | gzip -c > t.txt.gz && printf 'a short note\\n' | xz -c > t.txt.xz")) return lh_test_end();
  const char *ngzh[] = {"reading the first header, at input offset 1", "gzip"};
  truncated("t.txt.gz", 1, 2, ngzh, 2);
  const char *nxzh[] = {"reading the first header, at input offset ", "zma"};
  truncated("t.txt.xz", 1, 2, nxzh, 2);
  return lh_test_end();
}
