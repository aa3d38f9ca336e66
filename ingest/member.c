/* member.c — compressed members: a gzip, xz, zstd, bzip2, lz4, lzma, lzip or compress stream
 * found inside an archive or a folder (a Debian doc tarball's changelog.gz, a log folder's
 * app.log.1.gz), decompressed as it is read.
 *
 * A member decoder is a second libarchive reader, with only the raw and empty formats and the
 * in-process filters, whose read callback pulls the member's stored bytes from whoever holds them
 * (the outer archive's entry data, or a file's descriptor). Nothing is buffered beyond the
 * blocks libarchive asks for, so a member streams like any entry. Only the raw format is offered,
 * so a compressed tarball inside an archive comes out as tar bytes (and is then skipped as
 * binary), never as entries: archives are not opened recursively.
 *
 * Caps, after every block: the content given so far against max_decompressed_bytes, and past
 * ratio_grace_bytes against max_ratio times the stored bytes pulled (a nested bomb stops within a
 * block of the limit). The caller adds the content to its input's own counters as well.
 *
 * Invariants: a decoder never reads more than its member's stored bytes (the puller ends there);
 * every failure leaves a message naming what failed and at which content byte.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_internal.h"

struct lh_member {
  lh_reader *r;
  struct archive *a;
  lh_pull_fn pull;
  void *ctx;
  int64_t in, out;
  int pull_failed;
  int at_end;
};

size_t lh_member_suffix(const char *name, size_t len) {
  static const char *const tarballs[] = {".tar.gz", ".tgz", ".tar.xz", ".txz", ".tar.zst", ".tzst", ".tar.bz2",
                                         ".tbz2",   ".tbz", ".tar.lz4", ".tar.lzma", ".tlz", ".tar.lz", ".tar.Z",
                                         ".taz"};
  static const char *const suffixes[] = {".gz", ".xz", ".zst", ".bz2", ".lz4", ".lzma", ".lz", ".Z"};
  for (size_t i = 0; i < sizeof tarballs / sizeof *tarballs; i++) {
    size_t n = strlen(tarballs[i]);
    if (len > n && !memcmp(name + len - n, tarballs[i], n)) return 0;
  }
  for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
    size_t n = strlen(suffixes[i]);
    /* a name that is only the suffix ("dir/.gz") keeps it */
    if (len > n && !memcmp(name + len - n, suffixes[i], n) && name[len - n - 1] != '/') return n;
  }
  return 0;
}

/* Our own static names for libarchive's filter names. */
static const char *filter_label(const char *la) {
  static const char *const known[] = {"gzip", "bzip2", "xz", "lzma", "lzip", "zstd", "lz4", "compress (.Z)"};
  if (!la) return "compressed";
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(la, known[i])) return known[i];
  return "compressed";
}

static la_ssize_t m_read(struct archive *a, void *ud, const void **buf) {
  lh_member *m = ud;
  long n = m->pull(m->ctx, buf);
  if (n < 0) {
    m->pull_failed = 1;
    archive_set_error(a, EIO, "the member's stored bytes could not be read");
    return -1;
  }
  m->in += n;
  return (la_ssize_t)n;
}

static const char *m_error(struct archive *a) {
  const char *e = archive_error_string(a);
  return e && *e ? e : "the compressed stream is damaged or ends early (libarchive gave no reason)";
}

lh_status lh_member_open(lh_reader *r, lh_pull_fn pull, void *ctx, lh_member **out, const char **filter,
                         char *detail, lh_entry_reason *why) {
  *out = NULL;
  *filter = NULL;
  lh_member *m = calloc(1, sizeof *m);
  struct archive *a = m ? archive_read_new() : NULL;
  if (!a) {
    free(m);
    return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  }
  m->r = r;
  m->a = a;
  m->pull = pull;
  m->ctx = ctx;
  archive_read_support_format_raw(a);
  archive_read_support_format_empty(a);
  lh_archive_add_filters(a, r->p->external_filters);
  struct archive_entry *e;
  int rc = archive_read_open(a, m, NULL, m_read, NULL);
  if (rc == ARCHIVE_OK) rc = archive_read_next_header(a, &e);
  if (rc == ARCHIVE_EOF) m->at_end = 1;
  else if (rc < ARCHIVE_WARN) {
    snprintf(detail, 512, "opening the compressed member: %s", m_error(a));
    *why = LH_REASON_CORRUPT;
    lh_member_close(m);
    return LH_EFORMAT;
  }
  int nf = archive_filter_count(a);
  if (nf > 1) *filter = filter_label(archive_filter_name(a, nf - 2));
  *out = m;
  return LH_OK;
}

lh_status lh_member_read(lh_member *m, const void **buf, size_t *n, char *detail, lh_entry_reason *why) {
  *n = 0;
  if (m->at_end) return LH_OK;
  la_int64_t off;
  int rc = archive_read_data_block(m->a, buf, n, &off);
  if (rc == ARCHIVE_EOF) {
    m->at_end = 1;
    *n = 0;
    return LH_OK;
  }
  if (rc < ARCHIVE_WARN) {
    *n = 0;
    snprintf(detail, 512, "decompressing the member at content byte %" PRId64 ": %s", m->out, m_error(m->a));
    *why = LH_REASON_CORRUPT;
    return LH_EFORMAT;
  }
  m->out += (int64_t)*n;
  const lh_ingest_params *p = m->r->p;
  if (m->out > p->max_decompressed_bytes) {
    snprintf(detail, 512,
             "decompression cap: the compressed member gave %" PRId64 " bytes out of %" PRId64 " stored, over the "
             "limit of %" PRId64 " (raise max_decompressed_bytes / --max-decompressed if the input is trusted)",
             m->out, m->in, p->max_decompressed_bytes);
    *why = LH_REASON_BOMB;
    return LH_ELIMIT;
  }
  int64_t in = m->in > 0 ? m->in : 1;
  if (m->out > p->ratio_grace_bytes && (double)m->out > p->max_ratio * (double)in) {
    snprintf(detail, 512,
             "decompression ratio %.0f:1 (%" PRId64 " bytes out of %" PRId64 " stored) of a compressed member is "
             "over the limit of %.0f:1, a likely decompression bomb (raise max_ratio / --max-ratio if the input is "
             "trusted)",
             (double)m->out / (double)in, m->out, m->in, p->max_ratio);
    *why = LH_REASON_BOMB;
    return LH_ELIMIT;
  }
  return LH_OK;
}

int64_t lh_member_in(const lh_member *m) { return m->in; }
int64_t lh_member_out(const lh_member *m) { return m->out; }

void lh_member_close(lh_member *m) {
  if (!m) return;
  archive_read_free(m->a);
  free(m);
}
