/* archive.c — inputs read through libarchive: archive files, compressed files, plain files given
 * directly, stdin and memory, in archive order or (LH_INGEST_SORT_PATH) in path order.
 *
 * We feed libarchive through our own callbacks so that we know exactly how many bytes came from
 * the input: the decompression caps compare what came out (the top filter's output, or the entry
 * data a format decompressed itself) with what went in, after every block, so a bomb is stopped
 * within one block of crossing a cap. Skipping unwanted data costs decompression for compressed
 * streams and for formats that compress per block (7z solid blocks, streamed zip entries of
 * unknown length), so there we read and discard under the same checks instead of letting
 * archive_read_data_skip run unwatched; plain tar, cpio, ar, ISO and zip entries of known size
 * are skipped by seeking.
 *
 * Sorted order (see ingest.h for the cost): pass 1 reads every header, keeps each entry's
 * metadata and buffers the content of candidate documents while they fit in sort_memory; the
 * records are then emitted in key order, and a candidate whose content was not buffered starts a
 * further pass over the input that buffers the next window of sort_memory bytes of documents in
 * key order. Entries are matched across passes by their ordinal and checked by name.
 *
 * Compressed members (member.c) are decoded through a second reader that pulls the entry's data;
 * their content, not their stored bytes, counts toward the input's caps. Hard links whose content
 * must be read get it from their target through a re-read of the input (see "hard links" below).
 * When libarchive fails without a message, errstr_of says what the input shows instead. The ISO
 * 9660 reader is offered only to inputs that show an ISO volume descriptor (iso_probe says why).
 *
 * Invariants: libarchive never touches the disk for us (mtree, which opens the files it names,
 * is not enabled; no external filter program runs unless external_filters); every entry that
 * libarchive reports yields exactly one manifest entry; an input that dies yields an INPUT entry
 * naming where; nothing here decides what an error means for the run (lh_reader_entry does); a
 * re-read never moves the main reader (it has its own descriptor and archive handle).
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/ingest_internal.h"
#include "util/fs.h"

#define READ_BLOCK (1 << 20)
#define MEM_BLOCK (256 << 10)
#define FEED_BLOCK (1 << 20)

/* Filters libarchive can run in-process here (probed once: a support call that can only offer an
 * external program returns ARCHIVE_WARN). */
static struct {
  const char *name;
  int (*fn)(struct archive *);
  int native;
} filters[] = {
    {"gzip", archive_read_support_filter_gzip, 0},   {"bzip2", archive_read_support_filter_bzip2, 0},
    {"xz", archive_read_support_filter_xz, 0},       {"lzma", archive_read_support_filter_lzma, 0},
    {"lzip", archive_read_support_filter_lzip, 0},   {"zstd", archive_read_support_filter_zstd, 0},
    {"lz4", archive_read_support_filter_lz4, 0},     {"compress", archive_read_support_filter_compress, 0},
    {"lzop", archive_read_support_filter_lzop, 0},   {"lrzip", archive_read_support_filter_lrzip, 0},
    {"grzip", archive_read_support_filter_grzip, 0},
};
#define N_FILTERS (sizeof filters / sizeof *filters)

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;

static void probe_filters(void) {
  for (size_t i = 0; i < N_FILTERS; i++) {
    struct archive *a = archive_read_new();
    if (!a) continue;
    filters[i].native = filters[i].fn(a) == ARCHIVE_OK;
    archive_read_free(a);
  }
}

void lh_archive_global_init(void) { pthread_once(&probe_once, probe_filters); }

void lh_archive_add_filters(struct archive *a, int external) {
  for (size_t i = 0; i < N_FILTERS; i++)
    if (filters[i].native || external) filters[i].fn(a);
}

/* ---- the byte source under libarchive ---- */

typedef struct src {
  lh_reader *r;
  int fd, own_fd;
  const uint8_t *mem;
  int64_t size; /* -1 unknown */
  int64_t pos;
  int64_t bytes_read; /* handed to libarchive (seeks excluded) */
  int64_t data_bytes; /* entry data libarchive handed us */
  int64_t progress_base;
  int seekable;
  int iso;            /* the input shows an ISO 9660 volume descriptor (iso_probe) */
  size_t head_len;    /* a stream's first bytes, read ahead by iso_probe into buf, not yet handed on */
  uint8_t *buf;
  const lh_input *in;
  int64_t reread_out; /* content bytes decompressed by re-reads for hard links, all together */
  int64_t steps;      /* entry headers read (a re-read's src counts its own; see REREAD_STEPS) */
  int64_t reread_steps; /* entry headers all re-reads of this input stepped over together */
  lh_keyset files;    /* archive order: hashes of the names of the regular files met so far */
  lh_keyset dead;     /* hashes of link targets whose re-read gave no document */
  lh_keyset empty;    /* hashes of the first names of newc link groups that ended without data */
  char why[384];      /* a message made up when libarchive gives none */
} src;

static la_ssize_t src_read(struct archive *a, void *ud, const void **out) {
  src *s = ud;
  if (s->mem) {
    int64_t left = s->size - s->pos;
    int64_t n = left < MEM_BLOCK ? left : MEM_BLOCK;
    *out = s->mem + s->pos;
    s->pos += n;
    s->bytes_read += n;
    return (la_ssize_t)n;
  }
  if (s->head_len) {
    la_ssize_t n = (la_ssize_t)s->head_len;
    s->head_len = 0;
    s->pos += n;
    s->bytes_read += n;
    *out = s->buf;
    return n;
  }
  for (;;) {
    ssize_t n = read(s->fd, s->buf, READ_BLOCK);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      archive_set_error(a, errno, "read error: %s", strerror(errno));
      return -1;
    }
    s->pos += n;
    s->bytes_read += n;
    *out = s->buf; /* (the time is counted by the callers of libarchive, around this) */
    return n;
  }
}

static la_int64_t src_skip(struct archive *a, void *ud, la_int64_t req) {
  src *s = ud;
  (void)a;
  if (!s->seekable || req <= 0) return 0;
  if (s->size >= 0 && s->pos + req > s->size) req = s->size - s->pos;
  if (!s->mem && lseek(s->fd, req, SEEK_CUR) < 0) return 0;
  s->pos += req;
  return req;
}

static la_int64_t src_seek(struct archive *a, void *ud, la_int64_t off, int whence) {
  src *s = ud;
  int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? s->pos : s->size;
  int64_t np = base + off;
  if (np < 0 || (s->size >= 0 && np > s->size)) {
    archive_set_error(a, EINVAL, "seek outside the input");
    return ARCHIVE_FATAL;
  }
  if (!s->mem && lseek(s->fd, np, SEEK_SET) < 0) {
    archive_set_error(a, errno, "seek error: %s", strerror(errno));
    return ARCHIVE_FATAL;
  }
  s->pos = np;
  return np;
}

static lh_status src_open(lh_reader *r, const lh_input *in, src *s) {
  memset(s, 0, sizeof *s);
  s->r = r;
  s->in = in;
  s->fd = -1;
  s->size = -1;
  s->progress_base = r->st.source_bytes;
  if (in->kind == LH_IN_MEMORY) {
    s->mem = in->mem ? in->mem : (const uint8_t *)"";
    s->size = (int64_t)in->mem_len;
    s->seekable = 1;
    return LH_OK;
  }
  struct stat sb;
  if (in->kind == LH_IN_STDIN) s->fd = 0;
  else {
    /* O_NONBLOCK: should the name have become a FIFO since it was added, open returns at once,
     * and the check below refuses it */
    s->fd = open(lh_input_open_path(in), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (s->fd < 0) return lh_error_set(&r->err, LH_EIO, "%s", strerror(errno));
    s->own_fd = 1;
    if (fstat(s->fd, &sb) != 0) return lh_error_set(&r->err, LH_EIO, "%s", strerror(errno));
    if (!S_ISREG(sb.st_mode))
      return lh_error_set(&r->err, LH_EIO, "it is now %s, no longer a regular file; not read",
                          lh_file_kind(sb.st_mode));
    if (r->root) {
      /* the file as opened, not as named: a name swapped for a symlink out of the documents root
       * since lh_ingest_add_path checked it is refused here (LH_EINVAL: OUTSIDE_ROOT) */
      char real[PATH_MAX];
      if (!lh_fd_path(s->fd, real, sizeof real) || !lh_path_under(real, r->root, r->root_len))
        return lh_error_set(&r->err, LH_EINVAL, "the file resolves to '%s', outside the documents root '%s'; not read",
                            real, r->root);
    }
    int fl = fcntl(s->fd, F_GETFL);
    if (fl >= 0) fcntl(s->fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  if (fstat(s->fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
    s->seekable = 1;
    s->size = (int64_t)sb.st_size;
    s->pos = lseek(s->fd, 0, SEEK_CUR);
    if (s->pos < 0) s->pos = 0;
  }
  s->buf = malloc(READ_BLOCK);
  if (!s->buf) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  return LH_OK;
}

/* Back to the start for another pass (seekable inputs only). */
static int src_rewind(src *s) {
  if (!s->seekable) return -1;
  if (!s->mem && lseek(s->fd, 0, SEEK_SET) < 0) return -1;
  s->pos = 0;
  s->data_bytes = 0;
  s->progress_base += s->bytes_read;
  s->bytes_read = 0;
  return 0;
}

static void src_close(src *s) {
  if (s->own_fd && s->fd >= 0) close(s->fd);
  lh_keyset_free(&s->files);
  lh_keyset_free(&s->dead);
  lh_keyset_free(&s->empty);
  free(s->buf);
  s->fd = -1;
  s->buf = NULL;
}

/* ---- ISO 9660, offered only where it is ----
 *
 * libarchive's ISO 9660 reader bids by reading 48 KiB ahead. On a shorter input (after
 * decompression) that read meets the end of the input, and from then on libarchive 3.6's
 * read-ahead reports the bytes it still holds as none: a small tar cut inside a header then reads
 * as a tar that ended cleanly, and every entry after the cut is lost without a word. So the ISO
 * reader is offered only to inputs that show the volume descriptor every ISO 9660 image has at
 * sector 16 ("CD001" at byte 32769 of the decompressed bytes), found by a probe that decompresses
 * at most those 32774 bytes out of at most READ_BLOCK input bytes (an ISO image whose compressed
 * form needs more to give them is not recognised). A stream's probed bytes stay in src.buf and are
 * handed to libarchive first. */
#define ISO_MAGIC_AT 32769

typedef struct iso_src {
  const uint8_t *mem; /* memory, or a stream's bytes read ahead */
  int fd;             /* else a file, read with pread */
  int64_t len, pos;   /* len: bytes the probe may read */
  uint8_t *buf;
} iso_src;

static la_ssize_t iso_read(struct archive *a, void *ud, const void **out) {
  iso_src *p = ud;
  (void)a;
  int64_t n = p->len - p->pos < MEM_BLOCK ? p->len - p->pos : MEM_BLOCK;
  if (n <= 0) return 0;
  if (p->mem) {
    *out = p->mem + p->pos;
  } else {
    ssize_t got = pread(p->fd, p->buf, (size_t)n, p->pos);
    if (got < 0) return -1;
    n = got;
    *out = p->buf;
  }
  p->pos += n;
  return (la_ssize_t)n;
}

/* Whether the input's (decompressed) bytes hold an ISO 9660 volume descriptor. LH_OK, or
 * LH_ENOMEM / LH_EIO (a stream that cannot be read ahead: r->err says why). */
static lh_status iso_probe(lh_reader *r, src *s) {
  iso_src p = {.fd = -1, .len = READ_BLOCK};
  if (s->mem) {
    p.mem = s->mem;
    if (p.len > s->size) p.len = s->size;
  } else if (s->seekable) {
    p.fd = s->fd;
    if (!(p.buf = malloc(MEM_BLOCK))) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  } else {
    /* a stream: read ahead into buf (to its end or READ_BLOCK), to be handed on by src_read */
    size_t got = 0;
    while (got < READ_BLOCK) {
      ssize_t n = read(s->fd, s->buf + got, READ_BLOCK - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return lh_error_set(&r->err, LH_EIO, "read error: %s", strerror(errno));
      if (n == 0) break;
      got += (size_t)n;
    }
    s->head_len = got;
    p.mem = s->buf;
    p.len = (int64_t)got;
  }
  uint8_t *out = malloc(ISO_MAGIC_AT + 5);
  struct archive *a = archive_read_new();
  if (!out || !a) {
    free(out);
    free(p.buf);
    if (a) archive_read_free(a);
    return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  }
  archive_read_support_format_raw(a);
  lh_archive_add_filters(a, r->p->external_filters);
  archive_read_set_read_callback(a, iso_read);
  archive_read_set_callback_data(a, &p);
  size_t have = 0;
  struct archive_entry *e;
  if (archive_read_open1(a) == ARCHIVE_OK && archive_read_next_header(a, &e) == ARCHIVE_OK)
    while (have < ISO_MAGIC_AT + 5) {
      la_ssize_t n = archive_read_data(a, out + have, ISO_MAGIC_AT + 5 - have);
      if (n <= 0) break;
      have += (size_t)n;
    }
  s->iso = have == ISO_MAGIC_AT + 5 && !memcmp(out + ISO_MAGIC_AT, "CD001", 5);
  archive_read_free(a);
  free(out);
  free(p.buf);
  return LH_OK;
}

static struct archive *archive_new_for(lh_reader *r, src *s) {
  struct archive *a = archive_read_new();
  if (!a) return NULL;
  archive_read_support_format_7zip(a);
  archive_read_support_format_ar(a);
  archive_read_support_format_cab(a);
  archive_read_support_format_cpio(a);
  if (s->iso) archive_read_support_format_iso9660(a);
  archive_read_support_format_lha(a);
  archive_read_support_format_rar(a);
  archive_read_support_format_rar5(a);
  archive_read_support_format_tar(a);
  archive_read_support_format_warc(a);
  archive_read_support_format_xar(a);
  archive_read_support_format_zip(a);
  archive_read_support_format_empty(a);
  archive_read_support_format_raw(a);
  lh_archive_add_filters(a, r->p->external_filters);
  archive_read_set_read_callback(a, src_read);
  if (s->seekable) {
    archive_read_set_skip_callback(a, src_skip);
    archive_read_set_seek_callback(a, src_seek);
  }
  archive_read_set_callback_data(a, s);
  return a;
}

/* ---- helpers ---- */

static int fmt_base(struct archive *a) { return archive_format(a) & ARCHIVE_FORMAT_BASE_MASK; }

static lh_entry_reason reason_of(struct archive *a) {
  const char *m = archive_error_string(a);
  if (!m) return LH_REASON_CORRUPT;
  if (strstr(m, "ncrypt") || strstr(m, "assphrase")) return LH_REASON_ENCRYPTED;
  if (strstr(m, "nsupported") || strstr(m, "not supported")) return LH_REASON_UNSUPPORTED;
  return LH_REASON_CORRUPT;
}

static void fmt_size(char *out, size_t n, int64_t v) {
  if (v >= (1ll << 30)) snprintf(out, n, "%.1f GiB", (double)v / (1 << 30));
  else if (v >= (1 << 20)) snprintf(out, n, "%.1f MiB", (double)v / (1 << 20));
  else snprintf(out, n, "%" PRId64 " bytes", v);
}

/* The first n bytes of the input, when it can be read again (files and memory). */
static int src_head(const src *s, uint8_t *out, size_t n) {
  if (s->size >= 0 && (int64_t)n > s->size) return 0;
  if (s->mem) {
    memcpy(out, s->mem, n);
    return 1;
  }
  return s->seekable && pread(s->fd, out, n, 0) == (ssize_t)n;
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* libarchive's own message; when it has none (its 7-Zip reader fails on a truncated archive
 * without one), what we can tell from the input: its format, errno, how far it was read, and for
 * 7-Zip the length its start header promises. */
static const char *errstr_of(struct archive *a, src *s) {
  const char *m = archive_error_string(a);
  if (m && *m) return m;
  char sz[32], rd_[32], tail[160] = "";
  fmt_size(sz, sizeof sz, s->size);
  fmt_size(rd_, sizeof rd_, archive_filter_bytes(a, -1));
  uint8_t h[32];
  if (fmt_base(a) == ARCHIVE_FORMAT_7ZIP && src_head(s, h, 32) && !memcmp(h, "7z\xBC\xAF\x27\x1C", 6)) {
    uint64_t need = 32 + le64(h + 12) + le64(h + 20);
    if (s->size >= 0 && need > (uint64_t)s->size)
      snprintf(tail, sizeof tail,
               "; its start header says the archive is %" PRIu64 " bytes long, the input has %" PRId64
               ": it is truncated",
               need, s->size);
  }
  int e = archive_errno(a);
  snprintf(s->why, sizeof s->why, "libarchive's %s reader failed without a message%s%s%s after reading %s%s%s%s",
           archive_format_name(a) ? archive_format_name(a) : "archive", e > 0 ? " (" : "", e > 0 ? strerror(e) : "",
           e > 0 ? ")" : "", rd_, s->size >= 0 ? " of the input's " : "", s->size >= 0 ? sz : "",
           tail[0] ? tail : "; the input is probably truncated or damaged");
  return s->why;
}

/* The caps on decompression, checked after every block. LH_OK, or LH_ELIMIT with the message in
 * *detail (a buffer of 512). */
static lh_status check_caps(src *s, struct archive *a, char *detail) {
  lh_reader *r = s->r;
  int64_t out = s->data_bytes;
  if (archive_filter_count(a) > 1) {
    int64_t f = archive_filter_bytes(a, 0);
    if (f > out) out = f;
  }
  int64_t in = s->bytes_read;
  lh_status st = lh_reader_source_progress(r, s->progress_base + in);
  if (st) return st;
  /* Formats that seek (zip, 7z, ISO) may read parts of a file more than once; what a bomb can
   * expand is at most the file itself. */
  if (s->size >= 0 && in > s->size) in = s->size;
  char a1[32], a2[32], a3[32];
  if (out > r->p->max_decompressed_bytes) {
    fmt_size(a1, sizeof a1, out);
    fmt_size(a2, sizeof a2, in);
    fmt_size(a3, sizeof a3, r->p->max_decompressed_bytes);
    snprintf(detail, 512,
             "decompression cap: %s out of %s read is over the limit of %s per input "
             "(raise max_decompressed_bytes / --max-decompressed if the input is trusted)",
             a1, a2, a3);
    return LH_ELIMIT;
  }
  if (out > r->p->ratio_grace_bytes && (double)out > r->p->max_ratio * (double)(in > 0 ? in : 1)) {
    fmt_size(a1, sizeof a1, out);
    fmt_size(a2, sizeof a2, in);
    snprintf(detail, 512,
             "decompression ratio %.0f:1 (%s out of %s read) is over the limit of %.0f:1, a likely "
             "decompression bomb (raise max_ratio / --max-ratio if the input is trusted)",
             (double)out / (double)(in > 0 ? in : 1), a1, a2, r->p->max_ratio);
    return LH_ELIMIT;
  }
  return LH_OK;
}

/* Skipping by seeking is safe only where skipping cannot mean decompressing. */
static int cheap_skip(struct archive *a, struct archive_entry *e) {
  if (archive_filter_count(a) > 1) return 0;
  switch (fmt_base(a)) {
    case ARCHIVE_FORMAT_TAR:
    case ARCHIVE_FORMAT_CPIO:
    case ARCHIVE_FORMAT_AR:
    case ARCHIVE_FORMAT_ISO9660:
    case ARCHIVE_FORMAT_RAW:
    case ARCHIVE_FORMAT_EMPTY: return 1;
    case ARCHIVE_FORMAT_ZIP: return archive_entry_size_is_set(e);
    default: return 0;
  }
}

/* How reading an entry's data ended. */
typedef struct rd {
  lh_status code;      /* LH_OK: to the end (or stopped on purpose) */
  lh_entry_reason why;
  int fatal;           /* the archive handle is dead */
  int64_t off;
  char detail[512];
} rd;

static void rd_fail(rd *o, src *s, struct archive *a, int rc, int64_t entry_off) {
  o->code = LH_EFORMAT;
  o->why = reason_of(a);
  o->fatal = rc == ARCHIVE_FATAL;
  o->off = archive_filter_bytes(a, -1);
  snprintf(o->detail, sizeof o->detail, "%s (at byte %" PRId64 " of the entry, input offset %" PRId64 ")",
           errstr_of(a, s), entry_off, o->off);
}

/* Read and throw away the rest of an entry, under the caps. */
static void discard(src *s, struct archive *a, struct archive_entry *e, rd *o) {
  if (cheap_skip(a, e)) {
    double t0 = lh_now();
    int rc = archive_read_data_skip(a);
    lh_reader_add_read_time(s->r, t0);
    if (rc < ARCHIVE_WARN) rd_fail(o, s, a, rc, 0);
    return;
  }
  for (;;) {
    const void *buf;
    size_t n;
    la_int64_t off;
    double t0 = lh_now();
    int rc = archive_read_data_block(a, &buf, &n, &off);
    lh_reader_add_read_time(s->r, t0);
    if (rc == ARCHIVE_EOF) return;
    if (rc < ARCHIVE_WARN) {
      rd_fail(o, s, a, rc, 0);
      return;
    }
    s->data_bytes += (int64_t)n;
    lh_status st = check_caps(s, a, o->detail);
    if (st) {
      o->code = st;
      o->why = LH_REASON_BOMB;
      o->fatal = 1;
      o->off = archive_filter_bytes(a, -1);
      return;
    }
  }
}

/* Stream an entry's data into sink(ctx, p, n, &want_more). Holes in sparse entries are zeros, the
 * trailing one (up to the declared size, which libarchive's blocks do not reach) included, and
 * they count as decompressed bytes toward the caps: a small sparse tar can promise terabytes. */
typedef lh_status (*sink_fn)(void *ctx, const void *p, size_t n, int *want_more);

/* Caps exceeded (or cancelled) while reading: LH_OK with the failure in o, or LH_EINTR. */
static lh_status caps_or_fail(src *s, struct archive *a, rd *o) {
  lh_status st = check_caps(s, a, o->detail);
  if (!st || st == LH_EINTR) return st;
  o->code = st;
  o->why = LH_REASON_BOMB;
  o->fatal = 1;
  o->off = archive_filter_bytes(a, -1);
  return LH_OK;
}

/* The zeros of a hole from *at up to end, while *want. */
static lh_status hole(src *s, struct archive *a, sink_fn sink, void *ctx, int64_t *at, int64_t end, int *want,
                      rd *o) {
  static const uint8_t zeros[65536];
  while (*at < end && *want) {
    size_t z = end - *at < (int64_t)sizeof zeros ? (size_t)(end - *at) : sizeof zeros;
    lh_status st = sink(ctx, zeros, z, want);
    if (st) return st;
    *at += (int64_t)z;
    s->data_bytes += (int64_t)z;
    if ((st = caps_or_fail(s, a, o)) || o->code) return st;
  }
  return LH_OK;
}

static lh_status read_entry(src *s, struct archive *a, struct archive_entry *e, sink_fn sink, void *ctx, rd *o,
                            int *stopped) {
  int64_t at = 0;
  int sparse = archive_entry_sparse_count(e) > 0 && archive_entry_size_is_set(e);
  *stopped = 0;
  for (;;) {
    const void *buf;
    size_t n;
    la_int64_t off;
    double t0 = lh_now();
    int rc = archive_read_data_block(a, &buf, &n, &off);
    lh_reader_add_read_time(s->r, t0);
    int want = 1;
    lh_status st;
    if (rc == ARCHIVE_EOF) {
      if (sparse && (st = hole(s, a, sink, ctx, &at, archive_entry_size(e), &want, o))) return st;
      return LH_OK;
    }
    if (rc < ARCHIVE_WARN) {
      rd_fail(o, s, a, rc, at);
      return LH_OK;
    }
    if ((st = hole(s, a, sink, ctx, &at, off, &want, o))) return st;
    if (o->code) return LH_OK;
    if (want && n && (st = sink(ctx, buf, n, &want))) return st;
    at = off + (int64_t)n;
    s->data_bytes += (int64_t)n;
    if (rc == ARCHIVE_WARN) {
      /* Data came with a warning (a zip CRC mismatch, say): the content is suspect. */
      rd_fail(o, s, a, rc, at);
      o->fatal = 0;
    }
    if ((st = caps_or_fail(s, a, o))) return st;
    if (o->fatal) return LH_OK;
    if (!want) {
      *stopped = 1;
      return LH_OK;
    }
  }
}

static lh_status doc_sink(void *ctx, const void *p, size_t n, int *want_more) {
  return lh_doc_data(ctx, p, n, want_more);
}

/* The name a document gets when the input is not an archive: the input's own, minus a
 * compression suffix when it was compressed. */
static void raw_name(const lh_input *in, int compressed, lh_buf *out) {
  static const char *const suffixes[] = {".gz", ".gzip", ".bz2", ".xz", ".lzma", ".lz", ".zst", ".zstd", ".lz4", ".Z", ".z"};
  const char *n = in->name;
  size_t len = strlen(n);
  lh_buf_clear(out);
  if (compressed)
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++) {
      size_t sl = strlen(suffixes[i]);
      if (len > sl && !strcmp(n + len - sl, suffixes[i])) {
        len -= sl;
        break;
      }
    }
  lh_buf_append(out, n, len);
}

static lh_entry_type type_of(struct archive_entry *e) {
  if (archive_entry_hardlink(e) || archive_entry_hardlink_utf8(e)) return LH_ENTRY_HARDLINK;
  switch (archive_entry_filetype(e)) {
    case AE_IFREG: return LH_ENTRY_FILE;
    case AE_IFDIR: return LH_ENTRY_DIR;
    case AE_IFLNK: return LH_ENTRY_SYMLINK;
    case AE_IFCHR: return LH_ENTRY_CHARDEV;
    case AE_IFBLK: return LH_ENTRY_BLOCKDEV;
    case AE_IFIFO: return LH_ENTRY_FIFO;
    case AE_IFSOCK: return LH_ENTRY_SOCKET;
    case 0: return LH_ENTRY_FILE; /* formats without modes (raw, some zip) */
    default: return LH_ENTRY_OTHER;
  }
}

/* Fill m from e. name_buf holds a made-up name when the archive gives none. */
static void meta_of(src *s, struct archive *a, struct archive_entry *e, int64_t idx, lh_buf *name_buf, lh_meta *m) {
  memset(m, 0, sizeof *m);
  const char *p = archive_entry_pathname(e);
  if (!p) p = archive_entry_pathname_utf8(e);
  if (fmt_base(a) == ARCHIVE_FORMAT_RAW) {
    raw_name(s->in, archive_filter_count(a) > 1, name_buf);
    p = name_buf->data;
  } else if (!p || !*p) {
    lh_buf_clear(name_buf);
    lh_buf_printf(name_buf, "(entry %" PRId64 " has no name)", idx);
    p = name_buf->data;
  }
  m->path = p;
  m->path_len = strlen(p);
  m->type = type_of(e);
  const char *l = NULL;
  if (m->type == LH_ENTRY_HARDLINK) {
    l = archive_entry_hardlink(e);
    if (!l) l = archive_entry_hardlink_utf8(e);
  } else if (m->type == LH_ENTRY_SYMLINK) {
    l = archive_entry_symlink(e);
    if (!l) l = archive_entry_symlink_utf8(e);
  }
  if (l) m->link = l, m->link_len = strlen(l);
  m->size = archive_entry_size_is_set(e) ? (int64_t)archive_entry_size(e) : -1;
  if (m->size < -1) m->size = -1;
  if (fmt_base(a) == ARCHIVE_FORMAT_RAW && archive_filter_count(a) == 1 && s->size >= 0)
    m->size = s->size; /* a plain file: its size is the file's */
  m->encrypted = archive_entry_is_encrypted(e);
  if (fmt_base(a) == ARCHIVE_FORMAT_AR && (!strcmp(p, "/") || !strcmp(p, "//") || !strcmp(p, "/SYM64/")))
    m->type = LH_ENTRY_OTHER; /* the symbol or long-name table libarchive reports as an entry */
}

/* The suffix length when entry m is a compressed member to decode (0: read it as stored). */
static size_t member_suffix(const lh_reader *r, const lh_meta *m, int raw) {
  if (raw || !r->p->decompress_members || m->type != LH_ENTRY_FILE || m->encrypted) return 0;
  return lh_member_suffix(m->path, m->path_len);
}

/* Record that the input died (or could not be opened). */
static lh_status input_failed(lh_reader *r, lh_status code, lh_entry_reason why, int64_t off, const char *detail) {
  lh_meta m = {0};
  m.path = r->in->name;
  m.path_len = strlen(r->in->name);
  m.type = LH_ENTRY_INPUT;
  m.size = -1;
  return lh_reader_record(r, &m, LH_ENTRY_ERROR, why, -1, off, code, detail);
}

static void header_failure(struct archive *a, src *s, const lh_buf *prev, rd *o) {
  o->code = LH_EFORMAT;
  o->why = reason_of(a);
  o->fatal = 1;
  o->off = archive_filter_bytes(a, -1);
  /* a compression filter that fails before its first block is out has no position yet: the
   * bytes handed to libarchive say where the input stopped making sense */
  if (o->off < 0) o->off = s->bytes_read;
  const char *hint = "";
  if (!s->seekable && (fmt_base(a) == ARCHIVE_FORMAT_7ZIP)) {
    hint = " (7z archives need a seekable input: pass the file, not a pipe)";
    o->why = LH_REASON_UNSUPPORTED;
  }
  if (prev->len)
    snprintf(o->detail, sizeof o->detail, "reading the header after entry '%s', at input offset %" PRId64 ": %s%s",
             prev->data, o->off, errstr_of(a, s), hint);
  else
    snprintf(o->detail, sizeof o->detail, "reading the first header, at input offset %" PRId64 ": %s%s", o->off,
             errstr_of(a, s), hint);
}

/* Why an archive gave no entry at all, for the input's note. */
static void no_entries_note(lh_reader *r, src *s, struct archive *a) {
  char out[32], in[32], total[48] = "";
  int nf = archive_filter_count(a);
  fmt_size(out, sizeof out, nf > 1 ? archive_filter_bytes(a, 0) : archive_filter_bytes(a, -1));
  fmt_size(in, sizeof in, s->bytes_read);
  if (s->size >= 0) {
    char t[32];
    fmt_size(t, sizeof t, s->size);
    snprintf(total, sizeof total, " of %s", t);
  }
  const char *fmt = archive_format_name(a) ? archive_format_name(a) : "archive";
  char filt[64] = "";
  if (nf > 1) snprintf(filt, sizeof filt, " (%s)", archive_filter_name(a, 0));
  snprintf(r->no_entries, sizeof r->no_entries,
           "no entries: read as %s data%s that ends within its first %s (%s%s read)%s", fmt, filt, out, in, total,
           fmt_base(a) == ARCHIVE_FORMAT_TAR
               ? "; an archive that starts with NUL blocks, such as a compressed file of zeros, reads as an empty tar"
               : "; an empty archive");
}

/* ---- compressed members (member.c) ---- */

/* The puller of a member inside this archive: its entry's data blocks. */
typedef struct mpull {
  src *s;
  struct archive *a;
  rd *o; /* the outer failure, when the entry's data could not be read */
  int64_t at;
} mpull;

static long member_pull(void *ctx, const void **buf) {
  mpull *p = ctx;
  size_t n;
  la_int64_t off;
  double t0 = lh_now();
  int rc = archive_read_data_block(p->a, buf, &n, &off);
  lh_reader_add_read_time(p->s->r, t0);
  if (rc == ARCHIVE_EOF) return 0;
  if (rc < ARCHIVE_WARN) {
    rd_fail(p->o, p->s, p->a, rc, p->at);
    return -1;
  }
  p->at += (int64_t)n;
  return (long)n;
}

/* Start decoding e's data; a failure is left in o (the entry's, or the outer's from the pull). */
static lh_status member_begin(src *s, mpull *mp, lh_member **mb, const char **filter, rd *o) {
  char det[512];
  lh_entry_reason why = LH_REASON_CORRUPT;
  lh_status st = lh_member_open(s->r, member_pull, mp, mb, filter, det, &why);
  if (st == LH_ENOMEM) return st;
  if (st && !o->code) {
    o->code = st;
    o->why = why;
    o->off = archive_filter_bytes(mp->a, -1);
    snprintf(o->detail, sizeof o->detail, "%s", det);
  }
  return LH_OK;
}

/* Stream a member's content into sink: its own caps in lh_member_read, the input's here. */
static lh_status member_stream(src *s, mpull *mp, lh_member *mb, sink_fn sink, void *ctx, rd *o, int *stopped) {
  *stopped = 0;
  for (;;) {
    const void *buf;
    size_t n;
    char det[512];
    lh_entry_reason why = LH_REASON_CORRUPT;
    double t0 = lh_now();
    lh_status st = lh_member_read(mb, &buf, &n, det, &why);
    lh_reader_add_read_time(s->r, t0);
    if (st) {
      if (!o->code) { /* else the outer data failed under the pull: that is the reason */
        o->code = st;
        o->why = why;
        o->off = archive_filter_bytes(mp->a, -1);
        snprintf(o->detail, sizeof o->detail, "%s", det);
      }
      return LH_OK;
    }
    if (!n) return LH_OK;
    int want = 1;
    if ((st = sink(ctx, buf, n, &want))) return st;
    s->data_bytes += (int64_t)n;
    if ((st = check_caps(s, mp->a, o->detail))) {
      if (st == LH_EINTR) return st;
      o->code = st;
      o->why = LH_REASON_BOMB;
      o->fatal = 1;
      o->off = archive_filter_bytes(mp->a, -1);
      return LH_OK;
    }
    if (!want) {
      *stopped = 1;
      return LH_OK;
    }
  }
}

/* The meta of a member's document: its stored name, and how it was decompressed (NULL: it was
 * not compressed after all). The declared size is the stored size, not the content's. */
static lh_meta member_meta(const lh_meta *m, const char *filter) {
  lh_meta dm = *m;
  if (filter) {
    dm.decompressed = filter;
    dm.size = -1;
  }
  return dm;
}

/* A compressed member in archive order: decoded into a document, or recorded as failed. */
static lh_status member_entry(lh_reader *r, src *s, struct archive *a, struct archive_entry *e, const lh_meta *m,
                              const char *warn, rd *o) {
  mpull mp = {s, a, o, 0};
  lh_member *mb = NULL;
  const char *filter = NULL;
  lh_status st = member_begin(s, &mp, &mb, &filter, o);
  if (st) return st;
  if (o->code) {
    rd d = {0};
    if (!o->fatal) discard(s, a, e, &d);
    o->fatal |= d.fatal;
    return lh_reader_record(r, m, LH_ENTRY_ERROR, o->why, m->size, o->off, o->code, o->detail);
  }
  lh_meta dm = member_meta(m, filter);
  if (!(st = lh_doc_begin(r, &dm))) {
    int stopped = 0;
    st = member_stream(s, &mp, mb, doc_sink, r, o, &stopped);
    if (!st) {
      rd d = {0};
      if (!o->fatal && (stopped || o->code)) discard(s, a, e, &d);
      if (d.code && !o->code) *o = d;
      o->fatal |= d.fatal;
      st = lh_doc_end(r, o->code, o->why, o->off, o->code ? o->detail : warn);
    }
  }
  lh_member_close(mb);
  return st;
}

/* ---- hard links ---- */

/* A hard link's content is its target's: an earlier entry, whose data a tar does not repeat.
 * Streams cannot go back, so the target is re-read through a second reader over the same file
 * (or memory): entries [0, k) are stepped over under the usual caps and entry k's data read.
 * Nothing about earlier entries is kept but the hashes of the names included as documents.
 * Re-reads cost decompression again; together they may decompress at most
 * max_decompressed_bytes per input, after which further links are recorded unread. A link whose
 * target name no earlier regular file has (src.files), or whose target already gave no document
 * on a re-read (src.dead), is recorded without one: else each of many such links would step over
 * the whole archive before it again, quadratic in the number of entries. Links to distinct targets
 * that give no document (N binary files, then N links to them) still step over the entries before
 * each: every header a re-read steps over counts, and past REREAD_STEPS of them per input (about
 * 20 s of headers) further links are recorded unread, naming the limit. Before, 8,000 such pairs
 * (a 137 KB tar.gz) took 113 s and 40,000 would have taken most of an hour. */
#define REREAD_STEPS ((int64_t)16 << 20)

/* The index of the last regular-file entry named target before entry idx, or -1. */
static lh_status find_target(lh_reader *r, src *s2, const char *target, int64_t idx, int64_t *k, rd *o) {
  *k = -1;
  struct archive *a = archive_new_for(r, s2);
  if (!a) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  lh_buf none = {0};
  if (archive_read_open1(a) != ARCHIVE_OK) header_failure(a, s2, &none, o);
  for (int64_t j = 0; j < idx && !o->code; j++) {
    struct archive_entry *e;
    int rc = archive_read_next_header(a, &e);
    s2->steps++;
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN || rc == ARCHIVE_RETRY) {
      header_failure(a, s2, &none, o);
      break;
    }
    const char *p = archive_entry_pathname(e);
    if (!p) p = archive_entry_pathname_utf8(e);
    if (p && !strcmp(p, target) && type_of(e) == LH_ENTRY_FILE) *k = j;
    if (archive_entry_size(e) > 0 || type_of(e) == LH_ENTRY_FILE) discard(s2, a, e, o);
  }
  archive_read_free(a);
  return LH_OK;
}

/* Read entry k of s2 (named target) as the document m. *begun: the document was begun (so its
 * entry is recorded, failure or not). */
static lh_status read_target(lh_reader *r, src *s2, int64_t k, const char *target, const lh_meta *m, const char *warn,
                             rd *o, int *begun) {
  *begun = 0;
  struct archive *a = archive_new_for(r, s2);
  if (!a) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  lh_buf none = {0};
  lh_status st = LH_OK;
  if (archive_read_open1(a) != ARCHIVE_OK) header_failure(a, s2, &none, o);
  for (int64_t j = 0; j <= k && !o->code; j++) {
    struct archive_entry *e;
    int rc = archive_read_next_header(a, &e);
    s2->steps++;
    if (rc < ARCHIVE_WARN || rc == ARCHIVE_RETRY || rc == ARCHIVE_EOF) {
      header_failure(a, s2, &none, o);
      if (rc == ARCHIVE_EOF) snprintf(o->detail, sizeof o->detail, "the input ended early on a re-read: it changed");
      break;
    }
    if (j < k) {
      if (archive_entry_size(e) > 0 || type_of(e) == LH_ENTRY_FILE) discard(s2, a, e, o);
      continue;
    }
    const char *p = archive_entry_pathname(e);
    if (!p) p = archive_entry_pathname_utf8(e);
    if (!p || strcmp(p, target)) {
      o->code = LH_EFORMAT;
      o->why = LH_REASON_CORRUPT;
      snprintf(o->detail, sizeof o->detail, "entry %" PRId64 " is no longer '%s' on a re-read: the input changed", k,
               target);
      break;
    }
    if ((st = lh_doc_begin(r, m))) break;
    *begun = 1;
    int stopped = 0;
    if ((st = read_entry(s2, a, e, doc_sink, r, o, &stopped))) break;
    st = lh_doc_end(r, o->code, o->why, o->off, o->code ? o->detail : warn);
    /* the target's content is included now: later links to it are links to this document */
    if (!st && r->last_included && lh_keyset_add(&r->included, lh_key_of(target, strlen(target))))
      st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  }
  archive_read_free(a);
  return st;
}

/* The hard link m (entry idx of s): its target's content as a document named m, re-read from
 * entry k named kname (k -1: the last regular file named m's target before idx; -2: none). */
static lh_status read_link(lh_reader *r, src *s, const lh_meta *m, int64_t idx, int64_t k, const char *kname,
                           const char *warn) {
  char detail[LH_ERROR_MSG_MAX + 64];
  lh_buf target = {0};
  if (kname) lh_buf_append_str(&target, kname);
  else lh_buf_append(&target, m->link ? m->link : "", m->link ? m->link_len : 0);
  lh_status st;
  uint64_t tkey = lh_key_of(target.data ? target.data : "", target.len);
  if (!s->seekable) {
    snprintf(detail, sizeof detail,
             "a hard link whose target's content came earlier in a stream and was not kept: pass the archive as a "
             "file to read it");
    st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
  } else if (k == -1 && !lh_keyset_has(&s->files, tkey)) {
    /* no regular file of that name came before: known without stepping over the entries again */
    snprintf(detail, sizeof detail, "a hard link whose target is not among the entries before it");
    st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
  } else if (lh_keyset_has(&s->dead, tkey)) {
    /* the same content again would give the same answer, at the cost of another re-read */
    snprintf(detail, sizeof detail,
             "a hard link to '%.200s', whose content was read for an earlier hard link and gave no document (see "
             "that entry); not read again",
             target.data ? target.data : "");
    st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
  } else if (s->reread_steps > REREAD_STEPS) {
    snprintf(detail, sizeof detail,
             "not read: re-reading hard link targets has stepped over %" PRId64 " entries of this input, over the "
             "limit of %" PRId64 " (each link whose target gave no document steps over every entry before it)",
             s->reread_steps, REREAD_STEPS);
    st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
  } else if (s->reread_out > r->p->max_decompressed_bytes) {
    snprintf(detail, sizeof detail,
             "not read: re-reading hard link targets has decompressed %" PRId64 " bytes of this input, over "
             "max_decompressed_bytes",
             s->reread_out);
    st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
  } else {
    src s2;
    rd o = {0};
    int begun = 0;
    st = src_open(r, s->in, &s2);
    s2.iso = s->iso;
    if (st == LH_OK) {
      int64_t before = r->st.source_bytes; /* progress counts the bytes re-read too */
      s2.progress_base = before;
      int64_t out = 0;
      if (k == -1) {
        st = find_target(r, &s2, target.data, idx, &k, &o);
        out += s2.data_bytes;
        if (!st && !o.code && src_rewind(&s2)) {
          o.code = LH_EIO;
          o.why = LH_REASON_UNREADABLE;
          snprintf(o.detail, sizeof o.detail, "cannot rewind the input");
        }
      }
      if (!st && !o.code && k < 0) {
        snprintf(detail, sizeof detail, "a hard link whose target is not among the entries before it");
        st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, LH_REASON_LINK, -1, -1, LH_OK, detail);
      } else if (!st && !o.code) {
        st = read_target(r, &s2, k, target.data, m, warn, &o, &begun);
        if (!st && begun && !r->last_included && lh_keyset_add(&s->dead, tkey))
          st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
      }
      out += s2.data_bytes;
      s->reread_out += out;
      s->reread_steps += s2.steps;
      s->progress_base += s2.progress_base + s2.bytes_read - before;
      r->st.source_bytes = s->progress_base + s->bytes_read;
    } else if (st != LH_ENOMEM) {
      o.code = LH_EIO;
      o.why = LH_REASON_UNREADABLE;
      snprintf(o.detail, sizeof o.detail, "cannot open the input again: %.400s", r->err.msg);
      st = LH_OK;
    }
    if (!st && o.code && !begun) {
      snprintf(detail, sizeof detail, "re-reading its target '%s': %s", target.data, o.detail);
      st = lh_reader_record(r, m, LH_ENTRY_ERROR, o.why ? o.why : LH_REASON_CORRUPT, -1, o.off, o.code, detail);
    }
    src_close(&s2);
  }
  lh_buf_free(&target);
  return st;
}

/* A hard link in archive order. It is decided as a file of its own name (globs, caps); a link to
 * a document this input included already is recorded as a link, else its content is read: its
 * own data when the archive stored some, else its target's. */
static lh_status link_entry(lh_reader *r, src *s, struct archive *a, struct archive_entry *e, int64_t idx,
                            const lh_meta *m, const char *warn, rd *o) {
  lh_meta fm = *m;
  fm.type = LH_ENTRY_FILE;
  lh_entry_reason why = lh_reader_predecide_static(r, &fm);
  lh_status st;
  char detail[256];
  uint64_t tkey = m->link ? lh_key_of(m->link, m->link_len) : 0;
  /* (a name with data of a newc group that ended without it: its content is not the target's) */
  if (!why && m->link && lh_keyset_has(&r->included, tkey) && !(m->size > 0 && lh_keyset_has(&s->empty, tkey))) {
    why = LH_REASON_LINK;
    snprintf(detail, sizeof detail, "a hard link to a document included above");
    warn = detail;
  }
  if (!why && (why = lh_reader_predecide(r, &fm)) == LH_REASON_NONE) {
    if (m->size <= 0) return read_link(r, s, m, idx, -1, NULL, warn);
    if ((st = lh_doc_begin(r, m))) return st;
    int stopped = 0;
    if ((st = read_entry(s, a, e, doc_sink, r, o, &stopped))) return st;
    if (stopped && !o->code) discard(s, a, e, o);
    return lh_doc_end(r, o->code, o->why, o->off, o->code ? o->detail : warn);
  }
  if ((st = lh_reader_record(r, m, LH_ENTRY_SKIPPED, why, m->size, -1, LH_OK, warn))) return st;
  if (m->size > 0) {
    rd d = {0};
    discard(s, a, e, &d);
    /* a failure while skipping belongs to the input */
    if (d.code) {
      *o = d;
      o->fatal = 1;
      return input_failed(r, d.code, d.why, d.off, d.detail);
    }
  }
  return LH_OK;
}


/* ---- newc cpio hard links ----
 *
 * newc cpio (and its crc variant) stores a multiply-linked file's data once, with the LAST of its
 * names; the earlier names come first with size 0, and libarchive reports the first as a regular
 * file and the later ones as hard links to it. Read as they come, the first name would be an empty
 * document and the name with the data a link to it: the content lost. So in archive order such a
 * group is held (its names only) until the entry with the data, or any other entry, arrives, and
 * is then decided as a tar's links are: the first name that passes the checks is the document,
 * with the group's data; the names before it are recorded with their reasons, those after it as
 * links. cpio and bsdcpio write a group's names one after the other; a group that ends without
 * data is an empty document (an empty file), and should a later name of it carry data after all,
 * that name is read under its own name (src.empty) rather than taken for a link. */

typedef struct newc_group {
  lh_buf names; /* the names met so far, each followed by a NUL; the first is the file's */
  size_t n;
} newc_group;

/* 1 when e is the first name of a newc group whose data comes with a later name. */
static int newc_deferred(struct archive *a, struct archive_entry *e, const lh_meta *m) {
  int f = archive_format(a);
  return (f == ARCHIVE_FORMAT_CPIO_SVR4_NOCRC || f == ARCHIVE_FORMAT_CPIO_SVR4_CRC) && m->type == LH_ENTRY_FILE &&
         m->size == 0 && archive_entry_nlink(e) > 1;
}

static int newc_in_group(const newc_group *g, const lh_meta *m) {
  return g->n && m->type == LH_ENTRY_HARDLINK && m->link && m->link_len == strlen(g->names.data) &&
         !memcmp(m->link, g->names.data, m->link_len);
}

static lh_status newc_add(lh_reader *r, newc_group *g, const lh_meta *m) {
  if (lh_buf_append(&g->names, m->path, m->path_len) || lh_buf_append(&g->names, "", 1))
    return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  g->n++;
  return LH_OK;
}

/* Decide and record the group's names. e: the entry holding the group's data (size bytes; the
 * last name added), or NULL when the group ended without data; died: the input failed before the
 * group ended (its names are errors then). */
static lh_status newc_close(lh_reader *r, src *s, newc_group *g, struct archive *a, struct archive_entry *e,
                            int64_t size, const char *warn, const rd *died, rd *o) {
  const char *first = g->names.data;
  size_t first_len = strlen(first), at = 0;
  const char *doc = NULL;
  int included = 0;
  lh_status st = LH_OK;
  char detail[512];
  for (size_t i = 0; i < g->n && !st; i++) {
    const char *name = g->names.data + at;
    size_t len = strlen(name);
    at += len + 1;
    lh_meta m = {.path = name, .path_len = len, .type = i ? LH_ENTRY_HARDLINK : LH_ENTRY_FILE, .size = size};
    if (i) m.link = first, m.link_len = first_len;
    lh_meta fm = m;
    fm.type = LH_ENTRY_FILE;
    size_t sfx = e ? member_suffix(r, &fm, 0) : 0;
    if (sfx) fm.alt_path = m.alt_path = name, fm.alt_len = m.alt_len = len - sfx;
    if (died) {
      st = lh_reader_record(r, &m, LH_ENTRY_ERROR, died->why ? died->why : LH_REASON_CORRUPT, -1, died->off,
                            died->code ? died->code : LH_EFORMAT,
                            "not read: the input failed before the entry holding this hard-linked file's content "
                            "(newc cpio stores it with the last name) was reached");
      continue;
    }
    if (doc) {
      lh_entry_reason why = lh_reader_predecide_static(r, &fm);
      if (!why) {
        why = LH_REASON_LINK;
        snprintf(detail, sizeof detail,
                 included ? "a hard link to the document '%.200s' (its content, which newc cpio stores with the last "
                            "name, was read there)"
                          : "a hard link to '%.200s', whose content gave no document (see that entry)",
                 doc);
      } else
        detail[0] = 0;
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, size, -1, LH_OK, detail);
      continue;
    }
    lh_entry_reason why = lh_reader_predecide(r, &fm);
    if (why) {
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, size, -1, LH_OK, NULL);
      continue;
    }
    doc = name;
    if (e && sfx) {
      st = member_entry(r, s, a, e, &m, warn, o);
    } else if (!(st = lh_doc_begin(r, &m))) {
      int stopped = 0;
      if (e && (st = read_entry(s, a, e, doc_sink, r, o, &stopped))) break;
      if (stopped && !o->code) discard(s, a, e, o);
      st = lh_doc_end(r, o->code, o->why, o->off, o->code ? o->detail : warn);
    }
    included = r->last_included;
  }
  if (!st && !doc && e && size > 0) {
    discard(s, a, e, o);
    /* a failure while skipping belongs to the input */
    if (o->code) {
      o->fatal = 1;
      st = input_failed(r, o->code, o->why, o->off, o->detail);
    }
  }
  if (!st && !e && !died && lh_keyset_add(&s->empty, lh_key_of(first, first_len)))
    st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  lh_buf_clear(&g->names);
  g->n = 0;
  return st;
}

/* ---- archive order ---- */

static lh_status read_in_order(lh_reader *r, src *s) {
  struct archive *a = archive_new_for(r, s);
  if (!a) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  lh_status st = LH_OK;
  lh_buf name = {0}, prev = {0};
  newc_group g = {0};
  rd o = {0};
  double t0 = lh_now();
  int rc = archive_read_open1(a);
  lh_reader_add_read_time(r, t0);
  if (rc != ARCHIVE_OK) {
    header_failure(a, s, &prev, &o);
    st = input_failed(r, o.code, o.why, o.off, o.detail);
    goto out;
  }
  for (int64_t idx = 0;; idx++) {
    struct archive_entry *e;
    t0 = lh_now();
    rc = archive_read_next_header(a, &e);
    lh_reader_add_read_time(r, t0);
    if (rc == ARCHIVE_EOF && g.n && (st = newc_close(r, s, &g, a, NULL, 0, "", NULL, &o))) break;
    if (rc == ARCHIVE_EOF) {
      if (idx == 0 && fmt_base(a) == ARCHIVE_FORMAT_EMPTY) {
        /* An empty file (or an empty compressed file): one empty document. */
        raw_name(s->in, archive_filter_count(a) > 1, &name);
        lh_meta m = {.path = name.data, .path_len = name.len, .type = LH_ENTRY_FILE, .size = 0};
        lh_entry_reason why = lh_reader_predecide(r, &m);
        if (why) st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, 0, -1, LH_OK, NULL);
        else if (!(st = lh_doc_begin(r, &m))) st = lh_doc_end(r, LH_OK, LH_REASON_NONE, -1, NULL);
      } else if (idx == 0) {
        no_entries_note(r, s, a);
      }
      break;
    }
    if (rc < ARCHIVE_WARN || rc == ARCHIVE_RETRY) {
      header_failure(a, s, &prev, &o);
      if (g.n && (st = newc_close(r, s, &g, a, NULL, 0, "", &o, &o))) break;
      st = input_failed(r, o.code, o.why, o.off, o.detail);
      break;
    }
    char warn[512] = "";
    if (rc == ARCHIVE_WARN) snprintf(warn, sizeof warn, "%s", errstr_of(a, s));
    lh_meta m;
    meta_of(s, a, e, idx, &name, &m);
    lh_buf_clear(&prev);
    lh_buf_append(&prev, m.path, m.path_len);
    if (m.type == LH_ENTRY_FILE && lh_keyset_add(&s->files, lh_key_of(m.path, m.path_len))) {
      st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
      break;
    }
    int raw = fmt_base(a) == ARCHIVE_FORMAT_RAW;
    memset(&o, 0, sizeof o);
    if (newc_in_group(&g, &m)) {
      if ((st = newc_add(r, &g, &m))) break;
      if (m.size > 0 && ((st = newc_close(r, s, &g, a, e, m.size, warn, NULL, &o)) || o.fatal)) break;
      continue;
    }
    if (g.n && (st = newc_close(r, s, &g, a, NULL, 0, "", NULL, &o))) break;
    if (newc_deferred(a, e, &m)) {
      if ((st = newc_add(r, &g, &m))) break;
      continue;
    }
    if (m.type == LH_ENTRY_HARDLINK) {
      if ((st = link_entry(r, s, a, e, idx, &m, warn, &o))) break;
      if (o.fatal) break;
      continue;
    }
    size_t sfx = member_suffix(r, &m, raw);
    if (sfx) m.alt_path = m.path, m.alt_len = m.path_len - sfx;
    lh_entry_reason why = lh_reader_predecide(r, &m);
    if (!why && sfx) {
      if ((st = member_entry(r, s, a, e, &m, warn, &o))) break;
    } else if (why) {
      if ((st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, m.size, -1, LH_OK, warn))) break;
      if (raw) break; /* the only entry: nothing after it to reach */
      if (m.encrypted) {
        /* Its data cannot be read, so it cannot be watched either: let libarchive step over it. A
         * failure here is about the encryption, not the archive; the next header tells. */
        archive_read_data_skip(a);
      } else if (m.type == LH_ENTRY_FILE || m.size > 0)
        discard(s, a, e, &o);
      /* A failure while skipping belongs to the input, not to the skipped entry. */
      if (o.code && (st = input_failed(r, o.code, o.why, o.off, o.detail))) break;
    } else {
      if ((st = lh_doc_begin(r, &m))) break;
      int stopped = 0;
      if ((st = read_entry(s, a, e, doc_sink, r, &o, &stopped))) break;
      if (stopped && !raw && !o.code) discard(s, a, e, &o);
      if ((st = lh_doc_end(r, o.code, o.why, o.off, o.code ? o.detail : warn))) break;
    }
    if (o.fatal || raw) break;
  }
out:
  lh_buf_free(&name);
  lh_buf_free(&prev);
  lh_buf_free(&g.names);
  archive_read_free(a);
  return st;
}

/* ---- path order ---- */

typedef struct srec {
  int64_t idx;
  char *own; /* path, link */
  const char *path, *link;
  size_t path_len, link_len;
  const char *key;
  size_t key_len;
  lh_entry_type type;
  int64_t size;
  int encrypted;
  int candidate; /* passes the order-independent checks: its content is wanted */
  int buffered, want;
  size_t sfx;               /* a compressed member: its suffix length */
  const char *decompressed; /* how its buffered content was decompressed (NULL: as stored) */
  int64_t target;           /* a hard link: the index of the last regular file of its target's
                             * name before it, -2 when none */
  int deferred;             /* the first name of a newc link group (newc_deferred): its data, if
                             * any, is that of entry data_at - 1 (0: none came) */
  int64_t data_at;
  int64_t data_for;         /* a name of such a group that holds its data: the group's first
                             * name's index + 1 (0: none), whose record the data is buffered into */
  lh_buf data;
  rd res; /* how reading it ended */
  char warn[256];
} srec;

typedef struct sorter {
  lh_reader *r;
  src *s;
  uint64_t *fk; /* pass 0: name hash -> index of the last regular file of that name so far */
  int64_t *fv;
  size_t fcap, fn;
  srec *recs; /* in archive order: recs[i].idx == i */
  size_t n, cap;
  int64_t used; /* bytes buffered */
  int spilled;  /* pass 0 could not buffer every document */
  rd dead;      /* why the input died, when died */
  int died;
} sorter;

static int64_t *file_slot(sorter *so, uint64_t key, int add) {
  if (add && 2 * (so->fn + 1) > so->fcap) {
    size_t cap = so->fcap ? 2 * so->fcap : 256;
    uint64_t *nk = calloc(cap, sizeof *nk);
    int64_t *nv = calloc(cap, sizeof *nv);
    if (!nk || !nv) {
      free(nk);
      free(nv);
      return NULL;
    }
    for (size_t i = 0; i < so->fcap; i++) {
      if (!so->fk[i]) continue;
      size_t j = (size_t)so->fk[i] & (cap - 1);
      while (nk[j]) j = (j + 1) & (cap - 1);
      nk[j] = so->fk[i];
      nv[j] = so->fv[i];
    }
    free(so->fk);
    free(so->fv);
    so->fk = nk;
    so->fv = nv;
    so->fcap = cap;
  }
  if (!so->fcap) return NULL;
  size_t j = (size_t)key & (so->fcap - 1);
  while (so->fk[j] && so->fk[j] != key) j = (j + 1) & (so->fcap - 1);
  if (!so->fk[j]) {
    if (!add) return NULL;
    so->fk[j] = key;
    so->fn++;
  }
  return &so->fv[j];
}

static int rec_cmp(const void *pa, const void *pb) {
  const srec *a = *(const srec *const *)pa, *b = *(const srec *const *)pb;
  size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
  int c = memcmp(a->key, b->key, n);
  if (c) return c;
  if (a->key_len != b->key_len) return a->key_len < b->key_len ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static void rec_meta(const srec *x, lh_meta *m) {
  memset(m, 0, sizeof *m);
  m->path = x->path;
  m->path_len = x->path_len;
  m->link = x->link;
  m->link_len = x->link_len;
  m->type = x->type;
  m->size = x->size;
  m->encrypted = x->encrypted;
  if (x->sfx) m->alt_path = x->path, m->alt_len = x->path_len - x->sfx;
}

static int64_t rec_estimate(const lh_reader *r, const srec *x) {
  int64_t est = x->size >= 0 ? x->size : r->p->max_file_bytes;
  return est < r->p->sort_memory ? est : r->p->sort_memory;
}

static void rec_unbuffer(sorter *so, srec *x) {
  so->used -= (int64_t)x->data.len;
  lh_buf_free(&x->data);
  x->data = (lh_buf){0};
  x->buffered = 0;
  memset(&x->res, 0, sizeof x->res);
}

typedef struct bufsink {
  srec *x;
  int64_t limit;
  int over;
} bufsink;

static lh_status buf_sink(void *ctx, const void *p, size_t n, int *want_more) {
  bufsink *b = ctx;
  int64_t room = b->limit - (int64_t)b->x->data.len;
  size_t take = (int64_t)n < room ? n : (size_t)(room > 0 ? room : 0);
  if (take && lh_buf_append(&b->x->data, p, take)) return LH_ENOMEM;
  if (take < n) b->over = 1;
  *want_more = !b->over;
  return LH_OK;
}

/* Read x's content into memory. One byte over the per-file cap is kept, so the document is
 * known to be cut. Unless force, the sort_memory budget applies and *fits tells whether the
 * content fitted (when not, nothing is kept). Any failure is left in x->res. */
static lh_status buffer_entry(sorter *so, struct archive *a, struct archive_entry *e, srec *x, int force, int *fits) {
  int64_t limit = so->r->p->max_file_bytes + 1;
  int64_t budget = so->r->p->sort_memory - so->used;
  bufsink b = {x, force || limit < budget ? limit : budget, 0};
  int stopped = 0;
  memset(&x->res, 0, sizeof x->res);
  lh_status st;
  if (x->sfx) {
    mpull mp = {so->s, a, &x->res, 0};
    lh_member *mb = NULL;
    const char *filter = NULL;
    st = member_begin(so->s, &mp, &mb, &filter, &x->res);
    if (!st && !x->res.code) {
      x->decompressed = filter;
      st = member_stream(so->s, &mp, mb, buf_sink, &b, &x->res, &stopped);
    }
    lh_member_close(mb);
    if (!st && !x->res.fatal && (stopped || x->res.code)) {
      rd d = {0};
      discard(so->s, a, e, &d);
      if (d.code && !x->res.code) x->res = d;
      x->res.fatal |= d.fatal;
    }
  } else {
    st = read_entry(so->s, a, e, buf_sink, &b, &x->res, &stopped);
    if (!st && stopped && !x->res.code) discard(so->s, a, e, &x->res);
  }
  if (st == LH_ENOMEM) return lh_error_set(&so->r->err, LH_ENOMEM, "out of memory buffering an entry for --sort path");
  if (st) return st;
  *fits = !(b.over && b.limit < limit);
  if (*fits) {
    x->buffered = 1;
    so->used += (int64_t)x->data.len;
  } else {
    lh_buf_free(&x->data);
    x->data = (lh_buf){0};
  }
  return LH_OK;
}

static lh_status add_rec(sorter *so, const lh_meta *m, int64_t idx, srec **out) {
  if (so->n == so->cap) {
    size_t cap = so->cap ? 2 * so->cap : 256;
    srec *nr = realloc(so->recs, cap * sizeof *nr);
    if (!nr) return lh_error_set(&so->r->err, LH_ENOMEM, "out of memory");
    so->recs = nr;
    so->cap = cap;
  }
  srec *x = &so->recs[so->n];
  memset(x, 0, sizeof *x);
  x->own = malloc(m->path_len + m->link_len + 2);
  if (!x->own) return lh_error_set(&so->r->err, LH_ENOMEM, "out of memory");
  memcpy(x->own, m->path, m->path_len);
  x->own[m->path_len] = 0;
  x->path = x->own;
  x->path_len = m->path_len;
  if (m->link) {
    memcpy(x->own + m->path_len + 1, m->link, m->link_len);
    x->own[m->path_len + 1 + m->link_len] = 0;
    x->link = x->own + m->path_len + 1;
    x->link_len = m->link_len;
  }
  x->idx = idx;
  x->type = m->type;
  x->size = m->size;
  x->encrypted = m->encrypted;
  so->n++;
  *out = x;
  return LH_OK;
}

/* One pass over the input. Pass 0 records every entry and buffers documents while they fit;
 * later passes buffer the entries marked want (the records are fixed by then). */
static lh_status sort_pass(sorter *so, int pass) {
  lh_reader *r = so->r;
  src *s = so->s;
  if (pass > 0 && src_rewind(s)) return lh_error_set(&r->err, LH_EIO, "cannot rewind the input for another pass");
  struct archive *a = archive_new_for(r, s);
  if (!a) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  lh_status st = LH_OK;
  lh_buf name = {0}, prev = {0};
  int64_t last_want = -1;
  for (size_t i = 0; i < so->n; i++)
    if (so->recs[i].want) {
      int64_t at = so->recs[i].data_at ? so->recs[i].data_at - 1 : so->recs[i].idx;
      if (at > last_want) last_want = at;
    }
  double t0 = lh_now();
  int rc = archive_read_open1(a);
  lh_reader_add_read_time(r, t0);
  if (rc != ARCHIVE_OK) {
    header_failure(a, s, &prev, &so->dead);
    so->died = 1;
    goto out;
  }
  for (int64_t idx = 0; pass == 0 || idx <= last_want; idx++) {
    struct archive_entry *e;
    t0 = lh_now();
    rc = archive_read_next_header(a, &e);
    lh_reader_add_read_time(r, t0);
    if (rc == ARCHIVE_EOF) {
      if (pass == 0 && idx == 0 && fmt_base(a) != ARCHIVE_FORMAT_EMPTY) no_entries_note(r, s, a);
      if (pass == 0 && idx == 0 && fmt_base(a) == ARCHIVE_FORMAT_EMPTY) {
        raw_name(s->in, archive_filter_count(a) > 1, &name);
        lh_meta m = {.path = name.data, .path_len = name.len, .type = LH_ENTRY_FILE, .size = 0};
        srec *x;
        if ((st = add_rec(so, &m, 0, &x))) break;
        x->key = x->path;
        x->key_len = x->path_len;
        x->candidate = x->buffered = 1;
      } else if (pass > 0) {
        so->died = 1;
        so->dead.code = LH_EFORMAT;
        so->dead.why = LH_REASON_CORRUPT;
        snprintf(so->dead.detail, sizeof so->dead.detail,
                 "the input ended early on a later pass: it changed while it was read");
      }
      break;
    }
    if (rc < ARCHIVE_WARN || rc == ARCHIVE_RETRY) {
      header_failure(a, s, &prev, &so->dead);
      so->died = 1;
      break;
    }
    lh_meta m;
    meta_of(s, a, e, idx, &name, &m);
    lh_buf_clear(&prev);
    lh_buf_append(&prev, m.path, m.path_len);
    srec *x = NULL;
    if (pass == 0) {
      if ((st = add_rec(so, &m, idx, &x))) break;
      if (rc == ARCHIVE_WARN) snprintf(x->warn, sizeof x->warn, "%s", errstr_of(a, s));
      x->key = x->path;
      x->key_len = x->path_len;
      lh_path_normalize(&x->key, &x->key_len);
      x->sfx = member_suffix(r, &m, fmt_base(a) == ARCHIVE_FORMAT_RAW);
      if (x->sfx) m.alt_path = m.path, m.alt_len = m.path_len - x->sfx;
      x->candidate = lh_reader_predecide_static(r, &m) == LH_REASON_NONE;
      if (m.type == LH_ENTRY_FILE) {
        int64_t *v = file_slot(so, lh_key_of(m.path, m.path_len), 1);
        if (!v) {
          st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
          break;
        }
        *v = idx;
      } else if (m.type == LH_ENTRY_HARDLINK) {
        int64_t *v = m.link ? file_slot(so, lh_key_of(m.link, m.link_len), 0) : NULL;
        x->target = v ? *v : -2;
        srec *t = x->target >= 0 ? &so->recs[x->target] : NULL;
        if (t && t->deferred && !t->data_at && m.size > 0) { /* the newc group's data: t's content */
          t->data_at = idx + 1;
          t->size = m.size;
          x->data_for = x->target + 1;
        }
      }
      x->deferred = newc_deferred(a, e, &m);
    } else {
      x = (size_t)idx < so->n ? &so->recs[idx] : NULL;
      if (!x || x->path_len != m.path_len || memcmp(x->path, m.path, m.path_len)) {
        so->died = 1;
        so->dead.code = LH_EFORMAT;
        so->dead.why = LH_REASON_CORRUPT;
        so->dead.off = archive_filter_bytes(a, -1);
        snprintf(so->dead.detail, sizeof so->dead.detail,
                 "entry %" PRId64 " differs between passes: the input changed while it was read", idx);
        break;
      }
    }
    rd o = {0};
    int raw = fmt_base(a) == ARCHIVE_FORMAT_RAW;
    srec *bx = x->data_for ? &so->recs[x->data_for - 1] : x; /* whose content this entry's data is */
    if (!x->deferred && bx->candidate && !bx->buffered && (pass > 0 ? bx->want : !so->spilled)) {
      int fits = 1;
      if ((st = buffer_entry(so, a, e, bx, pass > 0, &fits))) break;
      if (!fits) so->spilled = 1;
      bx->want = 0;
      o = bx->res;
    } else if (m.encrypted) {
      archive_read_data_skip(a);
    } else if (!raw && (m.type == LH_ENTRY_FILE || m.size > 0)) {
      discard(s, a, e, &o);
    }
    if (o.fatal || (o.code && !bx->buffered)) {
      so->died = 1;
      so->dead = o;
      break;
    }
    if (raw) break;
  }
  /* newc groups that ended without data: empty files, complete as they are */
  for (size_t i = 0; pass == 0 && !so->died && !st && i < so->n; i++)
    if (so->recs[i].deferred && !so->recs[i].data_at) so->recs[i].buffered = so->recs[i].candidate;
out:
  lh_buf_free(&name);
  lh_buf_free(&prev);
  archive_read_free(a);
  return st;
}

/* A hard link in path order: as in archive order, except that "its target is a document" is also
 * judged by the target passing the checks that do not depend on order (it may come later in
 * path order); the content is re-read (no link is a sort candidate). */
static lh_status emit_link(sorter *so, srec *x, const lh_meta *m) {
  lh_reader *r = so->r;
  lh_meta fm = *m;
  fm.type = LH_ENTRY_FILE;
  const char *warn = x->warn;
  char detail[256];
  lh_entry_reason why = lh_reader_predecide_static(r, &fm);
  const srec *t = x->target >= 0 ? &so->recs[x->target] : NULL;
  if (!why && ((t && t->candidate) || (m->link && lh_keyset_has(&r->included, lh_key_of(m->link, m->link_len))) ||
               (x->data_for && lh_keyset_has(&r->included, lh_key_of(x->path, x->path_len))))) {
    why = LH_REASON_LINK;
    snprintf(detail, sizeof detail, "a hard link to a document of this input");
    warn = detail;
  }
  if (!why) why = lh_reader_predecide(r, &fm);
  if (why) return lh_reader_record(r, m, LH_ENTRY_SKIPPED, why, m->size, -1, LH_OK, warn);
  if (so->died)
    return lh_reader_record(r, m, LH_ENTRY_ERROR, so->dead.why ? so->dead.why : LH_REASON_CORRUPT, -1, so->dead.off,
                            so->dead.code ? so->dead.code : LH_EFORMAT,
                            "not read: the input failed before this entry's content was reached");
  if (x->size > 0) return read_link(r, so->s, m, x->idx, x->idx, x->path, warn);
  if (t && t->data_at) /* a newc group's content is with the name that holds it */
    return read_link(r, so->s, m, x->idx, t->data_at - 1, so->recs[t->data_at - 1].path, warn);
  return read_link(r, so->s, m, x->idx, x->target >= 0 ? x->target : -2, t ? t->path : NULL, warn);
}

static lh_status emit_rec(sorter *so, srec *x) {
  lh_reader *r = so->r;
  lh_meta m;
  rec_meta(x, &m);
  if (x->type == LH_ENTRY_HARDLINK) return emit_link(so, x, &m);
  lh_entry_reason why = lh_reader_predecide(r, &m);
  lh_status st;
  if (why) {
    st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, m.size, -1, LH_OK, x->warn);
  } else if (!x->buffered) {
    /* Its content could not be read: the input died first, or it is a stream too big to sort. */
    if (so->died)
      st = lh_reader_record(r, &m, LH_ENTRY_ERROR, so->dead.why ? so->dead.why : LH_REASON_CORRUPT, m.size,
                            so->dead.off, so->dead.code ? so->dead.code : LH_EFORMAT,
                            "not read: the input failed before this entry's content was reached");
    else
      st = lh_reader_record(r, &m, LH_ENTRY_ERROR, LH_REASON_UNSUPPORTED, m.size, -1, LH_EFORMAT,
                            "not read: with --sort path the documents of a stream must fit in sort_memory; "
                            "raise it or pass the archive as a file");
  } else {
    lh_meta dm = x->decompressed ? member_meta(&m, x->decompressed) : m;
    if ((st = lh_doc_begin(r, &dm))) return st;
    int want = 1;
    for (size_t at = 0; at < x->data.len && want;) {
      size_t n = x->data.len - at < FEED_BLOCK ? x->data.len - at : FEED_BLOCK;
      if ((st = lh_doc_data(r, x->data.data + at, n, &want))) return st;
      at += n;
    }
    st = lh_doc_end(r, x->res.code, x->res.why, x->res.off, x->res.code ? x->res.detail : x->warn);
  }
  if (x->buffered) rec_unbuffer(so, x);
  return st;
}

static lh_status read_sorted(lh_reader *r, src *s) {
  sorter so = {0};
  so.r = r;
  so.s = s;
  lh_status st = sort_pass(&so, 0);
  srec **order = NULL;
  if (!st && so.n && !(order = malloc(so.n * sizeof *order))) st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  if (!st && so.n) {
    for (size_t i = 0; i < so.n; i++) order[i] = &so.recs[i];
    qsort(order, so.n, sizeof *order, rec_cmp);
    if (so.spilled && s->seekable && !so.died) {
      /* Keep pass 0's buffers only for the first window in key order; the rest would crowd out
       * every later window. */
      int64_t acc = 0;
      for (size_t i = 0; i < so.n; i++) {
        srec *x = order[i];
        if (!x->candidate) continue;
        acc += rec_estimate(r, x);
        /* (an empty one stays: a newc group's empty file has no entry of its own to reread) */
        if (acc > r->p->sort_memory && x->buffered && x->data.len) rec_unbuffer(&so, x);
      }
    }
  }
  for (size_t i = 0; i < so.n && !st; i++) {
    srec *x = order[i];
    if (x->candidate && !x->buffered && !so.died && s->seekable && !r->total_cap_hit) {
      /* The next window, in key order, of documents not yet buffered. */
      int64_t w = 0;
      for (size_t j = i; j < so.n; j++) {
        srec *y = order[j];
        if (!y->candidate || y->buffered) continue;
        int64_t est = rec_estimate(r, y);
        if (j > i && so.used + w + est > r->p->sort_memory) break;
        y->want = 1;
        w += est;
      }
      st = sort_pass(&so, 1);
      for (size_t j = i; j < so.n; j++) order[j]->want = 0;
      if (st) break;
    }
    st = emit_rec(&so, x);
  }
  if (!st && so.died) st = input_failed(r, so.dead.code, so.dead.why, so.dead.off, so.dead.detail);
  for (size_t i = 0; i < so.n; i++) {
    free(so.recs[i].own);
    lh_buf_free(&so.recs[i].data);
  }
  free(so.recs);
  free(so.fk);
  free(so.fv);
  free(order);
  return st;
}

lh_status lh_source_archive(lh_reader *r, const lh_input *in) {
  src s;
  lh_status st = src_open(r, in, &s);
  if (st) {
    if (st == LH_ENOMEM) {
      src_close(&s);
      return st;
    }
    char detail[LH_ERROR_MSG_MAX + 16];
    snprintf(detail, sizeof detail, "%s%s", st == LH_EINVAL ? "" : "cannot open: ", r->err.msg);
    src_close(&s);
    return st == LH_EINVAL ? input_failed(r, LH_EINVAL, LH_REASON_OUTSIDE_ROOT, -1, detail)
                           : input_failed(r, LH_EIO, LH_REASON_UNREADABLE, -1, detail);
  }
  char first;
  if (in->kind == LH_IN_FILE && s.size == 0 && pread(s.fd, &first, 1, 0) != 0) {
    /* A size of 0 that is not the truth (procfs and sysfs files report 0 and hold text): read it
     * as the stream it is, to its end, as from stdin. */
    s.size = -1;
    s.seekable = 0;
  }
  if (!(in->kind == LH_IN_FILE && s.size == 0) && (st = iso_probe(r, &s))) {
    if (st == LH_ENOMEM) {
      src_close(&s);
      return st;
    }
    char detail[LH_ERROR_MSG_MAX];
    snprintf(detail, sizeof detail, "%s", r->err.msg);
    st = input_failed(r, LH_EIO, LH_REASON_UNREADABLE, 0, detail);
  } else if (in->kind == LH_IN_FILE && s.size == 0) {
    /* An empty plain file: one empty document (libarchive would see no entries at all). */
    lh_meta m = {.path = in->name, .path_len = strlen(in->name), .type = LH_ENTRY_FILE, .size = 0};
    lh_entry_reason why = lh_reader_predecide(r, &m);
    if (why) st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, 0, -1, LH_OK, NULL);
    else if (!(st = lh_doc_begin(r, &m))) st = lh_doc_end(r, LH_OK, LH_REASON_NONE, -1, NULL);
  } else if (r->p->order == LH_INGEST_SORT_PATH) {
    st = read_sorted(r, &s);
  } else {
    st = read_in_order(r, &s);
  }
  r->st.source_bytes = s.progress_base + s.bytes_read;
  src_close(&s);
  return st;
}
