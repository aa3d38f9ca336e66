/* ingest_internal.h — what the ingest files share and nobody else may use.
 *
 * The pieces, each in its own file:
 *   ingest_glob.c     glob patterns compiled once, matched by a position-set simulation
 *   frame_utf8.c      the binary sniff (the UTF-8 decoder and repair are util/utf8.c's)
 *   frame.c           templates, and the per-entry decisions and document framing (lh_doc_*)
 *   manifest.c        names, JSON lines, terminal-safe display, XML attribute escaping
 *   archive.c         libarchive inputs (files, stdin, memory), caps, --sort path windows
 *   archive_walk.c    folder inputs
 *   member.c          compressed members of archives and folders, decompressed under the caps
 *   ingest.c          the handle, the reader thread, the parcel queue and the pull loop
 *
 * Data flow: a source (archive.c, archive_walk.c) calls lh_reader_predecide and then either
 * lh_reader_record (no content) or lh_doc_begin / lh_doc_data... / lh_doc_end; those append
 * framed text, span marks and entries to the reader's current parcel, which ingest.c hands to the
 * consumer when it is full. Every lh_reader_* / lh_doc_* call returns LH_OK to go on; anything
 * else (a failure under on_error=fail, or cancellation) must make the source stop and return it.
 */
#ifndef LH_INGEST_INTERNAL_H
#define LH_INGEST_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "ingest/ingest.h"
#include "util/hash.h"
#include "util/utf8.h"

/* ---- globs (ingest_glob.c) ---- */

typedef struct lh_glob lh_glob; /* one compiled pattern */
typedef struct lh_globset {
  lh_glob **g;
  size_t n;
} lh_globset;

lh_status lh_globset_init(lh_globset *gs, const char *const *pats, size_t n, lh_error *err);
void lh_globset_free(lh_globset *gs);
/* Path as stored; leading "./" and "/" and trailing "/" are ignored. any_prefix: also true when a
 * pattern matches a leading directory of the path (exclude semantics). */
int lh_globset_match(const lh_globset *gs, const char *path, size_t len, int any_prefix);

/* ---- UTF-8 (util/utf8.h; the sniff in frame_utf8.c) ---- */

/* The binary sniff. *nul_at receives the offset of the first NUL byte or -1 (and then nothing
 * else is counted). Otherwise returns the number of bytes of p[0..n) inside invalid subparts (an
 * unfinished tail counting as valid when !final), counting stops once past stop_above; *clean
 * is the length of the prefix that ends where a sequence ends (n, less an unfinished tail). When
 * the result is 0, p[0..*clean) needs no repair. */
size_t lh_utf8_invalid_bytes(const uint8_t *p, size_t n, int final, size_t stop_above, int64_t *nul_at,
                             size_t *clean);

/* ---- escaping (manifest.c) ---- */

/* JSON string body (no quotes); invalid UTF-8 bytes become U+FFFD; *lossy set when that happened. */
lh_status lh_json_escape(lh_buf *out, const char *p, size_t n, int *lossy);
/* XML attribute value body; invalid UTF-8 becomes U+FFFD. */
lh_status lh_xml_escape(lh_buf *out, const char *p, size_t n);
/* Path for humans and templates: leading "./" removed (the sort key too). */
void lh_path_normalize(const char **p, size_t *n);

/* ---- templates (frame.c) ---- */

typedef enum lh_tmpl_kind {
  LH_T_LIT, LH_T_PATH, LH_T_PATH_RAW, LH_T_INPUT, LH_T_INDEX, LH_T_NL, LH_T_BYTES, LH_T_SHA256
} lh_tmpl_kind;
typedef struct lh_tmpl_part {
  lh_tmpl_kind kind;
  char *lit; /* LH_T_LIT only */
  size_t lit_len;
} lh_tmpl_part;
typedef struct lh_tmpl {
  lh_tmpl_part *head, *tail; /* before and after {text} */
  size_t n_head, n_tail;
} lh_tmpl;

lh_status lh_tmpl_parse(const char *s, lh_tmpl *t, lh_error *err);
void lh_tmpl_free(lh_tmpl *t);

/* ---- entries and parcels (ingest.c) ---- */

/* An entry in flight: the public view plus the marks that will give its token span, and the one
 * allocation its strings live in. */
typedef struct lh_ientry {
  lh_ingest_entry e;
  int64_t mark_start, mark_end; /* ids of the span marks; -1 when not included */
  char *own;
} lh_ientry;

typedef struct lh_parcel {
  lh_buf text;
  uint64_t text_base;
  uint64_t *marks; /* text offsets; ids mark_base, mark_base + 1, ... */
  size_t n_marks, cap_marks;
  int64_t mark_base;
  int64_t live_mark; /* no entry in a later parcel refers to a mark below this id */
  lh_ientry *ents;
  size_t n_ents, cap_ents;
  lh_buf open_doc;      /* the path of the document the reader had open when it pushed this parcel */
  int last;             /* no parcel follows */
  lh_status status;     /* with last: LH_OK, or why the reader stopped */
  char msg[LH_ERROR_MSG_MAX];
  struct lh_parcel *next;
} lh_parcel;

/* ---- the consumer's token side (ingest_tokens.c) ---- */

typedef struct lh_tokside lh_tokside;
lh_status lh_tokside_open(const lh_tokenizer *t, int threads, lh_tokside **out, lh_error *err);
void lh_tokside_close(lh_tokside *ts);
/* Take parcel c: its marks, its entries (moved out of c) and its text (fed to the tokenizer; with
 * c->last, the stream is finished). Appends the ids that became final to ids, adds the time spent
 * in the tokenizer to *seconds, and hands every entry whose span became final to ready(ctx, ie),
 * in order (ready takes ownership). */
lh_status lh_tokside_parcel(lh_tokside *ts, lh_parcel *c, lh_i32vec *ids, lh_status (*ready)(void *, lh_ientry *),
                            void *ctx, double *seconds, lh_error *err);
int64_t lh_tokside_total(const lh_tokside *ts);
double lh_tokside_cpu_seconds(const lh_tokside *ts); /* CPU seconds in the tokenizer, all threads */
int lh_tokside_threads(const lh_tokside *ts);       /* threads the stream encodes on */
/* The framed-text offset of the k-th id the last lh_tokside_parcel appended. */
int64_t lh_tokside_offset(const lh_tokside *ts, size_t k);
/* A waiting entry (span not final yet) whose framed text holds offset off, or NULL. */
const lh_ingest_entry *lh_tokside_entry_at(const lh_tokside *ts, uint64_t off);

/* ---- the reader (producer) ---- */

/* What a source knows about an entry before reading its content. Strings are borrowed for the
 * duration of the call they are passed to. */
typedef struct lh_meta {
  const char *path;
  size_t path_len;
  const char *link;
  size_t link_len;
  lh_entry_type type;
  int64_t size; /* declared content size, -1 unknown */
  int encrypted;
  /* a compressed member: the name without its suffix, which globs also match (NULL: none) */
  const char *alt_path;
  size_t alt_len;
  const char *decompressed; /* documents: the filter the content comes out of (static), or NULL */
} lh_meta;

/* The globs against an entry's name, or its other name (a compressed member's without suffix);
 * any_prefix as lh_globset_match. ingest and lh_globs_decide both decide through this. */
int lh_globset_match_meta(const lh_globset *gs, const lh_meta *m, int any_prefix);

typedef struct lh_input {
  enum { LH_IN_FILE, LH_IN_DIR, LH_IN_STDIN, LH_IN_MEMORY } kind;
  char *name;      /* what the input is called wherever a name shows */
  char *open_path; /* what is opened, when it differs from name (lh_ingest_add_path_as); else NULL */
  const void *mem;
  size_t mem_len;
  int64_t size; /* -1 unknown */
} lh_input;

typedef struct lh_reader_stats {
  int64_t entries, by_status[LH_ENTRY_STATUS_COUNT], by_reason[LH_REASON_COUNT];
  int64_t skipped_by_reason[LH_REASON_COUNT], errors_by_reason[LH_REASON_COUNT];
  int64_t source_bytes, content_bytes, document_bytes, text_bytes, invalid_utf8;
  int inputs_done, inputs_without_text, inputs_without_entries;
  double read_seconds, frame_seconds;
} lh_reader_stats;

/* A set of 64-bit keys (hashes of names, lh_key_of), open addressing. */
typedef struct lh_keyset {
  uint64_t *k; /* 0: empty slot (keys are never 0) */
  size_t cap, n;
} lh_keyset;
int lh_keyset_add(lh_keyset *s, uint64_t key); /* 0 ok, -1 out of memory */
int lh_keyset_has(const lh_keyset *s, uint64_t key);
void lh_keyset_clear(lh_keyset *s);
void lh_keyset_free(lh_keyset *s);
uint64_t lh_key_of(const void *p, size_t n); /* a hash of bytes, never 0 */

typedef struct lh_reader {
  struct lh_ingest *ing;
  const lh_ingest_params *p;
  const lh_tmpl *tmpl;
  const lh_globset *include, *exclude;
  lh_parcel *cur;
  uint64_t text_pos;
  int64_t mark_next;
  int input;
  const lh_input *in;
  lh_reader_stats st;
  int total_cap_hit;
  int64_t doc_index;
  int last_included;      /* the last lh_doc_end included its document (OK or PARTIAL) */
  lh_keyset included;     /* hashes of the raw paths of this input's included documents */
  char no_entries[512];   /* set by a source whose archive had no entry at all: why, for the note */
  /* exclude_paths as devices and inodes, resolved when the reader starts */
  dev_t *ex_dev;
  ino_t *ex_ino;
  size_t n_ex;
  char *root;             /* realpath of confine_root, NULL when none */
  size_t root_len;
  int64_t source_bytes_published;
  /* the document being read (lh_doc_*) */
  struct {
    int active, decided, binary, stopped;
    lh_entry_reason cut; /* TOO_LARGE or TOTAL_CAP when content was cut */
    char *path, *link;   /* copies (the source's strings may move during the document) */
    size_t path_len, link_len;
    lh_entry_type type;
    const char *decompressed;
    uint64_t key; /* lh_key_of the name as stored */
    int64_t declared, bytes, accepted, invalid;
    int64_t mark_start;
    uint64_t text_start;
    char last;           /* last content byte emitted */
    lh_sha256 sha;
    lh_utf8 u;
    lh_buf sniff;
    int64_t nul_at;
  } doc;
  lh_buf scratch;
  lh_error err;
} lh_reader;

/* Parcel emission (ingest.c). */
lh_status lh_reader_text(lh_reader *r, const char *p, size_t n);
lh_buf *lh_reader_textbuf(lh_reader *r); /* append directly, then call lh_reader_text_done */
lh_status lh_reader_text_done(lh_reader *r, size_t old_len);
lh_status lh_reader_mark(lh_reader *r, int64_t *id);
lh_status lh_reader_entry(lh_reader *r, lh_ientry *ie, lh_status code);
int lh_reader_cancelled(lh_reader *r);
void lh_reader_add_read_time(lh_reader *r, double t0);
lh_status lh_reader_source_progress(lh_reader *r, int64_t source_bytes);

/* Entry decisions and documents (frame.c). predecide: LH_REASON_NONE when the content must be
 * read; it counts the total cap, so call it once per entry, in output order. predecide_static:
 * only what does not depend on order (no total cap). */
lh_entry_reason lh_reader_predecide(lh_reader *r, const lh_meta *m);
lh_entry_reason lh_reader_predecide_static(lh_reader *r, const lh_meta *m);
/* Record an entry without content. code is LH_OK for a skip, else the failure (st ERROR). */
lh_status lh_reader_record(lh_reader *r, const lh_meta *m, lh_entry_status st, lh_entry_reason why,
                           int64_t bytes, int64_t err_off, lh_status code, const char *detail);
lh_status lh_doc_begin(lh_reader *r, const lh_meta *m);
/* Feed content; *want_more becomes 0 once the rest of the entry is not needed (binary, cut). */
lh_status lh_doc_data(lh_reader *r, const void *p, size_t n, int *want_more);
/* End the document. code LH_OK: read to the end (or stopped on purpose); otherwise reading
 * failed with code (reason and detail say how, err_off where). */
lh_status lh_doc_end(lh_reader *r, lh_status code, lh_entry_reason why, int64_t err_off, const char *detail);
void lh_reader_doc_free(lh_reader *r);

/* Sources. */
lh_status lh_source_archive(lh_reader *r, const lh_input *in);
lh_status lh_source_folder(lh_reader *r, const lh_input *in);
void lh_archive_global_init(void);
/* The path to open for a file or folder input. */
static inline const char *lh_input_open_path(const lh_input *in) { return in->open_path ? in->open_path : in->name; }
struct archive;
/* Offer a reader the filters libarchive runs in-process (and the external ones when external). */
void lh_archive_add_filters(struct archive *a, int external);
/* 1 when path (resolved, absolute) is root or lies under it. */
int lh_path_under(const char *path, const char *root, size_t root_len);
/* The path an open descriptor refers to now (/proc/self/fd), into out[n]: 1, or 0 with out set to
 * "(unknown)". Judging the descriptor, not the name, is what keeps a confine_root check free of
 * a name swapped for a symlink between the check and the open. */
int lh_fd_path(int fd, char *out, size_t n);

/* ---- compressed members (member.c) ---- */

/* The length of the compression suffix that makes name a member to decompress (".gz", ...), 0
 * when none (or when it names a compressed tarball, ".tar.gz", ".tgz", ...). */
size_t lh_member_suffix(const char *name, size_t len);

/* Pull the member's next stored (compressed) block: its length, 0 at its end, or -1 on a failure
 * (the puller keeps what went wrong). */
typedef long (*lh_pull_fn)(void *ctx, const void **buf);

typedef struct lh_member lh_member;
/* Open a decoder over the member's stored bytes. *filter is the outermost compression found
 * ("gzip", ...), or NULL when the bytes are not compressed after all (they then come out as
 * stored). A failure leaves the reason in detail (512 bytes) and *why. */
lh_status lh_member_open(lh_reader *r, lh_pull_fn pull, void *ctx, lh_member **out, const char **filter,
                         char *detail, lh_entry_reason *why);
/* The next block of content (*n == 0 at the end). The member's caps are checked after every
 * block: LH_ELIMIT with why BOMB past them; LH_EFORMAT with why CORRUPT when the stream is
 * damaged (or the puller failed). detail (512 bytes) says what and where. */
lh_status lh_member_read(lh_member *m, const void **buf, size_t *n, char *detail, lh_entry_reason *why);
int64_t lh_member_in(const lh_member *m);  /* stored bytes pulled so far */
int64_t lh_member_out(const lh_member *m); /* content bytes given so far */
void lh_member_close(lh_member *m);        /* accepts NULL */

#endif
