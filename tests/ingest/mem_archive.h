/* mem_archive.h — archives written in memory by libarchive's own writer, for the ingest tests. */
#ifndef LH_TESTS_INGEST_MEM_ARCHIVE_H
#define LH_TESTS_INGEST_MEM_ARCHIVE_H

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

typedef struct fent {
  const char *name;
  const char *data;
  size_t len;   /* (size_t)-1: strlen(data) */
  int type;     /* AE_IFREG (0 means regular), AE_IFDIR, AE_IFLNK */
  const char *link;
  size_t zeros; /* extra zero bytes after data (big files) */
} fent;

static la_ssize_t w_cb(struct archive *a, void *ud, const void *p, size_t n) {
  (void)a;
  lh_buf_append(ud, p, n);
  return (la_ssize_t)n;
}

/* Write the n entries f as one archive of format (ARCHIVE_FORMAT_*) through filter into out.
 * Exits the test on a writer failure. */
static void make_archive(lh_buf *out, int format, int filter, const fent *f, size_t n) {
  struct archive *a = archive_write_new();
  if (format == ARCHIVE_FORMAT_RAW) archive_write_set_format_raw(a);
  else archive_write_set_format(a, format);
  if (filter != ARCHIVE_FILTER_NONE) archive_write_add_filter(a, filter);
  archive_write_set_bytes_in_last_block(a, 1);
  lh_buf_clear(out);
  if (archive_write_open(a, out, NULL, w_cb, NULL) != ARCHIVE_OK) {
    fprintf(stderr, "archive_write_open: %s\n", archive_error_string(a));
    exit(1);
  }
  static char zeros[1 << 16];
  for (size_t i = 0; i < n; i++) {
    struct archive_entry *e = archive_entry_new();
    size_t len = f[i].data ? (f[i].len == (size_t)-1 ? strlen(f[i].data) : f[i].len) : 0;
    archive_entry_set_pathname(e, f[i].name);
    int type = f[i].type ? f[i].type : (int)AE_IFREG;
    archive_entry_set_filetype(e, (unsigned)type);
    archive_entry_set_perm(e, 0644);
    if (type == (int)AE_IFLNK) archive_entry_set_symlink(e, f[i].link);
    archive_entry_set_size(e, type == (int)AE_IFREG ? (la_int64_t)(len + f[i].zeros) : 0);
    if (archive_write_header(a, e) != ARCHIVE_OK) {
      fprintf(stderr, "archive_write_header %s: %s\n", f[i].name, archive_error_string(a));
      exit(1);
    }
    if (len) archive_write_data(a, f[i].data, len);
    for (size_t z = f[i].zeros; z;) {
      size_t k = z < sizeof zeros ? z : sizeof zeros;
      archive_write_data(a, zeros, k);
      z -= k;
    }
    archive_entry_free(e);
  }
  archive_write_close(a);
  archive_write_free(a);
}

#endif
