/* test_ingest_sparse.c — sparse files in tar archives (GNU tar -S, in GNU and POSIX formats).
 *
 * What it proves: a sparse entry's content is the file's, holes as zeros, the trailing hole up to
 * the declared size included: the size and SHA-256 equal the file's, in archive and path order;
 * and the zeros of holes count as decompressed bytes toward the caps, so a small tar promising a
 * large sparse file is stopped by max_ratio like any other bomb. Before, libarchive's blocks ended
 * at the last data region and the trailing hole was dropped (status ok, wrong size and SHA-256),
 * and holes were never counted toward the caps.
 */
#include "tests/test.h"

#include <sys/stat.h>

#include "tests/ingest/ingest_run.h"

#define SPARSE_SIZE (8 << 20)

int main(void) {
  lh_test_begin("test_ingest_sparse");
  run_watchdog(120);
  /* 8 KiB of text (the sniff window is set to 4 KiB), a line at 3 MiB, zeros to 8 MiB */
  if (run_sh("mkdir sp && cd sp && yes 'text line' | head -c 8192 > s.txt && printf 'middle\\n' | dd of=s.txt bs=1 "
             "seek=3145728 conv=notrunc 2>/dev/null && truncate -s 8M s.txt && tar -S --format=gnu -cf ../gnu.tar "
             "s.txt && tar -S --format=posix -cf ../pax.tar s.txt"))
    LH_TEST_SKIP("needs GNU tar with -S, dd and truncate");
  struct stat sb;
  CHECK(stat(tpath("gnu.tar"), &sb) == 0);
  if (sb.st_size > (1 << 20)) LH_TEST_SKIP("tar did not store s.txt sparse (%lld bytes)", (long long)sb.st_size);
  lh_buf file = {0};
  lh_error err;
  CHECK(lh_file_read(tpath("sp/s.txt"), SPARSE_SIZE + 1, &file, &err) == LH_OK);
  CHECK_EQ(file.len, SPARSE_SIZE);
  const char *tars[] = {tpath("gnu.tar"), tpath("pax.tar")};
  static const lh_ingest_order orders[] = {LH_INGEST_SORT_ARCHIVE, LH_INGEST_SORT_PATH};
  for (int k = 0; k < 2; k++)
    for (int q = 0; q < 2; q++) {
      const char *label = k ? "pax" : "gnu";
      lh_ingest_params p = lh_ingest_default_params();
      p.sniff_bytes = 4096;
      p.order = orders[q];
      run_out o;
      run_ingest_paths(&p, &tars[k], 1, &o);
      CHECK_MSG(o.st == LH_OK, "%s: %s", label, o.msg);
      const run_entry *x = run_find(&o, "s.txt");
      CHECK_MSG(x && x->e.status == LH_ENTRY_OK && x->e.bytes == SPARSE_SIZE, "%s order %d: s.txt %s, %lld bytes",
                label, q, x ? lh_entry_status_name(x->e.status) : "missing", x ? (long long)x->e.bytes : -1ll);
      CHECK_MSG(run_sha_is(x, file.data, file.len), "%s order %d: the SHA-256 must be the file's", label, q);
      run_free(&o);

      /* the holes are decompressed bytes: 8 MiB out of a few KiB read is over 20:1 past 1 MiB */
      p.max_ratio = 20;
      p.ratio_grace_bytes = 1 << 20;
      run_ingest_paths(&p, &tars[k], 1, &o);
      CHECK_MSG(o.st == LH_ELIMIT, "%s order %d: the holes must count toward max_ratio (status %d)", label, q,
                (int)o.st);
      CHECK_STR_CONTAINS(o.msg, "decompression ratio");
      run_free(&o);
    }
  lh_buf_free(&file);
  return lh_test_end();
}
