/* ingest.h — archives, folders and files streamed into one framed text and its tokens, with a
 * manifest line for every entry met on the way.
 *
 * A job's input is archives and folders of documents; the model's input is tokens. An lh_ingest
 * walks its inputs entry by entry, decides for each entry whether it is a document (a regular file
 * that passes the globs and caps and is not binary), frames every document through a template,
 * hands the framed text to a streaming tokenizer (when one is given) and reports every entry,
 * document or not, as a manifest entry carrying the token span its document occupies.
 *
 * Nothing is ever extracted to disk and no input is ever held whole: entries flow one block at a
 * time from libarchive (or the folder walker) into the framer and the tokenizer. Memory is
 * O(batch_bytes + sniff_bytes + the tokenizer's longest pre-token), and the tokenizer caps
 * pre-tokens at 1 MiB (tokenizer.h), so with the GPT-2, Llama 3 or MiniMax tokenizer families it
 * is bounded by a constant at any input size (a few hundred MB; bench/ingest/bench_ingest_mem
 * measures it); plus one 8-byte hash per regular file of the input being read (hard links),
 * and, with LH_INGEST_SORT_PATH only, the names of one archive's entries and about sort_memory
 * bytes of their contents.
 *
 * Lifecycle (after libarchive's new -> support -> open -> next -> free):
 *
 *     lh_ingest_params p = lh_ingest_default_params();   // then set fields
 *     lh_ingest *ing;
 *     lh_ingest_open(&p, &ing, &err);                     // ADDING
 *     lh_ingest_add_path(ing, "repo.tar.zst", &err);      // ADDING (any number, any kinds)
 *     lh_ingest_add_memory(ing, "mem.zip", data, n, &err);
 *     lh_ingest_batch b;
 *     while ((st = lh_ingest_next(ing, &b, &err)) == LH_OK && !b.done) { use b; }
 *                                                         // STREAMING -> DONE (b.done) or FAILED
 *     lh_ingest_close(ing);                               // any state; accepts NULL
 *
 * The first lh_ingest_next freezes the input list (adding after it is LH_EINVAL) and starts one
 * reader thread that reads, decompresses and frames; tokenization runs in the thread that calls
 * lh_ingest_next, helped by tokenizer_threads - 1 worker threads the ingest owns (the tokenizer
 * stream's, started at open and joined at close), so on two cores reading and tokenizing overlap
 * and the tokenizer uses both cores. The tokens never depend on the thread count. A failed lh_ingest_next (any
 * status but LH_OK) is final: the handle is FAILED, later calls return the same status and
 * message, and the batch returned with the failure is still valid and holds everything read up to
 * and including the entry that failed ("keep what was read"). Only lh_ingest_stats_get may be
 * called from another thread while a call is in flight.
 *
 * Inputs. lh_ingest_add_path takes a folder (walked in a deterministic order: entries of each
 * directory by byte order of their names with directories compared as "name/", which is the byte
 * order of the full paths, so the walk needs no global sort), a regular file (an archive in any
 * format below, a compressed single file, or a plain document), or "-" for stdin (the same, read
 * as a stream). Anything else (a FIFO, a character or block device such as /dev/zero, a socket,
 * or a symlink to one) is refused when added, before it is opened, naming the path and its kind:
 * a FIFO would block the open until a writer came, a device may never end.
 * Formats: tar (ustar, pax, GNU, v7), zip, 7z, cpio, ISO 9660 (Rock Ridge, Joliet), ar,
 * rar, rar5, cab, lha, xar, warc, each optionally wrapped in gzip, bzip2, xz, lzma, lzip, zstd, lz4
 * or compress; a compressed single file ("notes.txt.gz") is one document named by its input path
 * minus the compression suffix. mtree is refused on purpose (it names files on this machine to
 * read), and no external decompression program is ever started unless external_filters is set.
 * 7z and seekable zip read their directory from the end, so they need a file, not stdin. ISO 9660
 * is recognised by its volume descriptor ("CD001" at byte 32769, after decompression, found within
 * the first 1 MiB of the input). A file
 * whose size reads 0 but which holds data (procfs, sysfs) is read to its end as a stream. Files
 * found inside folders are documents, never opened as archives; a compressed file inside an
 * archive or folder is decompressed (decompress_members) and keeps its stored name. Entry paths
 * are the archive's own names; under a folder, paths relative to it; a plain file input is named
 * as given.
 *
 * Per entry, in this order: non-files (directories, symlinks, devices, fifos, sockets) are
 * recorded and never followed or opened; encrypted entries are skipped; exclude globs, then
 * include globs; the per-file cap and the total cap (on the declared size when the
 * format gives one); then content: the first sniff_bytes decide binary (any NUL byte, or more than
 * max_invalid_share of the bytes, and at least 4, in invalid UTF-8) versus text. Text is streamed through with each
 * maximal invalid UTF-8 subpart replaced by U+FFFD (Unicode 15 §3.9, what Python's
 * bytes.decode("utf-8", "replace") does), counted in invalid_utf8. NUL bytes after the sniff window
 * pass through unchanged. The holes of a sparse entry are zeros (up to its declared size) and
 * count as decompressed bytes toward the caps. A document whose size was not declared and that outgrows a cap is cut
 * there (status PARTIAL). The total cap keeps the prompt a prefix: once a document does not fit,
 * no later document is included either.
 *
 * Hard links. A hard link is decided as a file of its own name (globs, caps). When the content
 * it names is already a document of this input (its target, or an earlier link to the same
 * target, was included) it is recorded as a link (reason LINK, "link" naming it) and the content
 * is not framed twice; otherwise it is read under its own name (type hardlink, status ok): its own
 * data when the archive stored some, else its target's. A tar stores the data only with the
 * first name, so the target is re-read through a second reader over the same file or memory,
 * stepping over the entries before it under the usual caps (all re-reads of one input together
 * decompress at most max_decompressed_bytes); on stdin, where nothing can be re-read, such a link
 * is recorded as a link saying so. A link to a name no earlier regular file has, and a link to a
 * target whose re-read (for an earlier link) gave no document, are recorded as links saying so
 * without a re-read, so many links cost no more than one pass each. With LH_INGEST_SORT_PATH, a target that passes the globs
 * counts as a document wherever it sorts. In folders, the first name met that is a document is
 * read and later names are links to it. newc cpio stores the data with the last name of a group
 * instead, its earlier names first and empty: the group is decided as a tar's would be (the first
 * name that is a document gets the data, the other names are links to it), once its data comes.
 *
 * Globs, matched against the entry path with leading "./" and "/" removed; a pattern's own leading
 * "./" and "/" are removed the same way and anchor it at the root of the document, as a '/' inside
 * does ("./secrets" and "/secrets" match "secrets" and "./secrets/key.txt", not "docs/secrets"; a
 * pattern that is nothing but "./" or "/" is refused):
 *   *      any run of bytes except '/'          ?      one byte except '/'
 *   **     as a whole component ("a/ ** /b", "** /x", "src/ **", written here with spaces so this
 *          comment stays a comment): any number of components, zero included
 *   [abc] [a-z] [!a-z] [^a-z]   one byte from (or not from) the set   \c   the byte c literally
 * A pattern without '/' matches the last component at any depth ("*.c", "node_modules"); a
 * pattern with '/' matches the whole path ("src/ ** /x.h"). An exclude pattern also matches when it
 * matches any leading directory of the path, so "build" or ".git" removes whole trees (folders are
 * pruned without being read). With include patterns, a file must match one of them. A compressed
 * member (decompress_members) matches a pattern when its stored name or its name without the
 * suffix does.
 *
 * Order: LH_INGEST_SORT_ARCHIVE keeps each archive's own order (inputs in the order added).
 * LH_INGEST_SORT_PATH orders each input's entries by the byte order of their normalized paths
 * (leading "./" removed), so the same tree gives the same text whether it came as tar, zip, 7z,
 * cpio, ISO or a folder. Cost: the names and metadata of every entry of the archive being read
 * (about 100 bytes plus the path length each), plus the contents of documents buffered in memory,
 * at most sort_memory bytes at once (or one document, when a single one is larger). When an archive's documents fit in sort_memory it is read
 * once; otherwise it is reread from the start once per window of sort_memory bytes (files only:
 * on stdin, a stream whose documents do not fit is an error naming sort_memory).
 *
 * An input can yield no text at all (every entry skipped, only empty documents, or no entry: an
 * archive that starts with NUL blocks, such as a gzip of zeros, reads as an empty tar); the stats
 * count such inputs, lh_ingest_notes says why for each, and no_text is set when the whole ingest
 * gave none. Skipped and failed entries are counted per reason.
 *
 * Hostile inputs: per input, decompressed bytes over max_decompressed_bytes, or past the first
 * ratio_grace_bytes a ratio of decompressed to read bytes over max_ratio, stop the input with
 * LH_ELIMIT (a zip bomb); so do archives that end early or fail a check (LH_EFORMAT), reporting
 * the entry, the byte offset in the input and libarchive's own message (where libarchive has
 * none, what the input shows instead: for a truncated 7z, the length its start header promises).
 * Compressed members are held to the same caps, each against its own stored bytes as well
 * (decompress_members). What was read stays in the output. With
 * LH_INGEST_ON_ERROR_SKIP the failing entry (or the rest of a dead archive) is recorded as ERROR
 * and ingest goes on; with LH_INGEST_ON_ERROR_FAIL (the default) lh_ingest_next fails.
 *
 * Framing. Each document becomes template text with its content in place of {text}:
 *   {path}      the normalized path, escaped for an XML attribute (& < > " ' and control bytes as
 *               character references; invalid UTF-8 as U+FFFD)
 *   {path_raw}  the normalized path with invalid UTF-8 as U+FFFD and nothing else changed
 *   {input}     the input's name as added, escaped like {path}
 *   {index}     the document's number among included documents, from 0
 *   {text}      the content (exactly once)
 *   {nl}        "\n" when the content is not empty and does not end in "\n", else nothing
 *   {bytes} {sha256}   the content's size and SHA-256 (only after {text}, where they are known)
 *   {{ }}       literal braces
 * The default template is LH_INGEST_DEFAULT_TEMPLATE. Documents follow each other with nothing in
 * between; the framed text of the whole ingest is the concatenation, and the tokens are the
 * tokenization of that whole text (tokens may span document boundaries only if the template lets
 * them; each token belongs to the document in which its first byte lies). The framed text is data,
 * never markup: it is tokenized with lh_tok_stream_open_text, so a document (or a template, or an
 * entry name) holding the text of a special token such as "<end_of_sentence>" gives that text's
 * ordinary tokens, never the special id that would end a turn or open a new one.
 */
#ifndef LH_INGEST_INGEST_H
#define LH_INGEST_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/buf.h"
#include "util/err.h"

#define LH_INGEST_DEFAULT_TEMPLATE "<document path=\"{path}\">\n{text}{nl}</document>\n"

typedef struct lh_ingest lh_ingest;

typedef enum lh_ingest_order { LH_INGEST_SORT_ARCHIVE, LH_INGEST_SORT_PATH } lh_ingest_order;
typedef enum lh_ingest_on_error { LH_INGEST_ON_ERROR_FAIL, LH_INGEST_ON_ERROR_SKIP } lh_ingest_on_error;

typedef struct lh_ingest_params {
  /* Tokenizer to stream the framed text through; NULL for text only (tokens are then never
   * produced and token spans are -1). Borrowed: it must outlive the lh_ingest. */
  const lh_tokenizer *tokenizer;
  const char *template_text;        /* NULL: LH_INGEST_DEFAULT_TEMPLATE; copied at open */
  const char *const *include;       /* globs (see above); copied at open */
  size_t n_include;
  const char *const *exclude;
  size_t n_exclude;
  int64_t max_file_bytes;           /* per document (default 256 MiB) */
  int64_t max_total_bytes;          /* sum of included documents' content (default 4 GiB) */
  int64_t max_decompressed_bytes;   /* per input (default 64 GiB) */
  double max_ratio;                 /* per input, decompressed / read (default 200) */
  int64_t ratio_grace_bytes;        /* ratio checked only past this many decompressed (256 MiB) */
  size_t sniff_bytes;               /* binary detection window (default 1 MiB) */
  double max_invalid_share;         /* binary above this share of invalid UTF-8 bytes (0.10) */
  lh_ingest_order order;            /* default LH_INGEST_SORT_ARCHIVE */
  int64_t sort_memory;              /* LH_INGEST_SORT_PATH content buffer (default 256 MiB) */
  lh_ingest_on_error on_error;      /* default LH_INGEST_ON_ERROR_FAIL */
  size_t batch_bytes;               /* framed text per batch, about (default 1 MiB) */
  int external_filters;             /* allow libarchive to run lzop/lrzip/grzip programs (0) */
  /* Threads that tokenize (the calling thread and tokenizer_threads - 1 workers); the tokens are
   * the same for every count. 0 (the default): lh_ingest_auto_tokenizer_threads(), the online
   * CPUs but at most 4 (one reader thread runs beside them; on 2 cores both are then busy, and on
   * a large machine the default does not take every core from the model that runs next; each
   * tokenizer thread does ~25 MB/s of framed text and the reader frames ~200 MB/s, so up to ~8
   * threads still pay off when asked for). 1: the calling thread only. At most 64. */
  int tokenizer_threads;
  /* Refuse the prompt once its tokens pass this many (0, the default: no limit): the first
   * lh_ingest_next whose tokens take the count past max_tokens fails with LH_ELIMIT, naming the
   * entry in which the count passed it. Decided as the tokens come out, so an input far over the
   * limit is refused within a few batches (batch_bytes) of text past it, never read whole first.
   * Needs a tokenizer. */
  int64_t max_tokens;
  /* Paths that folder walks leave out, matched by identity (device and inode, so any name for the
   * same folder or file matches): the runner's output folder when it lies inside a document
   * folder. Each is recorded once, as EXCLUDED, and a folder is not entered. A path that does not
   * exist when a walk starts is ignored. Copied at open. */
  const char *const *exclude_paths;
  size_t n_exclude_paths;
  /* A folder every input must lie under after symlinks are resolved (NULL, the default: no
   * confinement). lh_ingest_add_path refuses a path that resolves elsewhere (LH_EINVAL naming
   * both); a file or folder input is checked again as opened (the descriptor's path), so a name
   * swapped for a link out of the folder in between is an OUTSIDE_ROOT error, not read; a symlink
   * met in a walk that points outside the folder is recorded with reason OUTSIDE_ROOT instead of
   * LINK (links are never followed either way). Copied at open. */
  const char *confine_root;
  /* Members of archives and files in folders whose names end in a compression suffix (.gz, .xz,
   * .zst, .bz2, .lz4, .lzma, .lz, .Z; not compressed tarballs such as .tar.gz or .tgz) are
   * decompressed and read as documents under their stored names ("logs/app.log.gz", with
   * "decompressed" in the manifest saying how), under the caps: per member, max_decompressed_bytes
   * and max_ratio (past ratio_grace_bytes) against the member's compressed bytes; the decompressed
   * bytes also count toward the input's own caps. 1 by default; 0 treats them as any other file
   * (binary). */
  int decompress_members;
} lh_ingest_params;

/* The tokenizer thread count that tokenizer_threads = 0 means on this machine (1 to 4). */
int lh_ingest_auto_tokenizer_threads(void);

lh_ingest_params lh_ingest_default_params(void);

/* What an entry is, as its archive (or the file system) says. */
typedef enum lh_entry_type {
  LH_ENTRY_FILE,
  LH_ENTRY_DIR,
  LH_ENTRY_SYMLINK,
  LH_ENTRY_HARDLINK,
  LH_ENTRY_CHARDEV,
  LH_ENTRY_BLOCKDEV,
  LH_ENTRY_FIFO,
  LH_ENTRY_SOCKET,
  LH_ENTRY_OTHER,
  LH_ENTRY_INPUT, /* a line about a whole input: only for failures not tied to one entry */
  LH_ENTRY_TYPE_COUNT
} lh_entry_type;

typedef enum lh_entry_status {
  LH_ENTRY_OK,      /* a document, included whole */
  LH_ENTRY_PARTIAL, /* a document cut at a cap: its first `bytes` bytes are included */
  LH_ENTRY_SKIPPED, /* not included, see reason */
  LH_ENTRY_ERROR,   /* reading failed (see reason, detail); whatever was read is included */
  LH_ENTRY_STATUS_COUNT
} lh_entry_status;

typedef enum lh_entry_reason {
  LH_REASON_NONE,
  LH_REASON_DIRECTORY,    /* a directory */
  LH_REASON_LINK,         /* a symlink or hardlink: recorded, never followed */
  LH_REASON_SPECIAL,      /* device, fifo, socket or unknown type: never opened */
  LH_REASON_EXCLUDED,     /* matched an exclude glob */
  LH_REASON_NOT_INCLUDED, /* include globs given, none matched */
  LH_REASON_ENCRYPTED,    /* encrypted data or metadata */
  LH_REASON_TOO_LARGE,    /* over max_file_bytes */
  LH_REASON_TOTAL_CAP,    /* over max_total_bytes */
  LH_REASON_BINARY,       /* NUL bytes or too much invalid UTF-8 in the sniff window */
  LH_REASON_LOOP,         /* a folder that is its own ancestor (bind mounts) */
  LH_REASON_TOO_DEEP,     /* a folder nested deeper than 256 levels */
  LH_REASON_UNREADABLE,   /* the file system refused to open or read it */
  LH_REASON_CORRUPT,      /* the archive failed a check or ended early */
  LH_REASON_BOMB,         /* decompression cap or ratio exceeded */
  LH_REASON_UNSUPPORTED,  /* a compression or format feature libarchive cannot read */
  LH_REASON_OUTSIDE_ROOT, /* a symlink pointing outside confine_root */
  LH_REASON_COUNT
} lh_entry_reason;

/* One document's include and exclude globs on their own, deciding an entry of a folder by its
 * path (relative to the folder) as ingest's folder walk does: LH_REASON_EXCLUDED (an exclude glob
 * matches it or a folder above it), LH_REASON_NOT_INCLUDED (is_file, include globs given, none
 * matches) or LH_REASON_NONE. Include globs and a compressed file's name without its suffix
 * ("app.log" for "app.log.gz") apply to regular files only, as with decompress_members on. The
 * job layer names a document by the files this keeps (jobs/inputs.c), so a file ingest leaves out
 * by its globs neither renames the job nor counts as a change. lh_globs_decide(NULL, ...) keeps
 * everything; lh_globs_free(NULL) does nothing. */
typedef struct lh_globs lh_globs;
lh_status lh_globs_open(lh_globs **out, const char *const *include, size_t n_include, const char *const *exclude,
                        size_t n_exclude, lh_error *err);
lh_entry_reason lh_globs_decide(const lh_globs *g, const char *path, size_t len, int is_file);
void lh_globs_free(lh_globs *g);

/* One manifest line. Strings are views that live until the next lh_ingest_next or close. */
typedef struct lh_ingest_entry {
  const char *path;     /* raw bytes as stored (maybe not UTF-8, never containing NUL) */
  size_t path_len;
  const char *link;     /* symlink or hardlink target, raw bytes; NULL when none */
  size_t link_len;
  const char *detail;   /* human-readable detail ("NUL byte at offset 12"); "" when none */
  int input;            /* index of the input, in the order added */
  lh_entry_type type;
  lh_entry_status status;
  lh_entry_reason reason;
  int64_t bytes;        /* content bytes read; the declared size when skipped unread; -1 unknown */
  int has_sha256;       /* sha256 is of the whole content, set when it was read to the end */
  uint8_t sha256[32];
  int64_t invalid_utf8; /* U+FFFD substitutions made in the content */
  int64_t error_offset; /* byte offset in the input (compressed) where reading failed; -1 */
  uint64_t text_start;  /* byte span of the framed document in the framed text (empty when */
  uint64_t text_end;    /* not included) */
  int64_t token_start;  /* token span [start, end) in the token stream; -1 in text-only mode */
  int64_t token_end;
  /* The compression the content was decompressed from ("gzip", "xz", ...) when the entry is a
   * compressed member read as text (path is its stored name); NULL when the content was read as
   * stored. Static. */
  const char *decompressed;
} lh_ingest_entry;

/* What one lh_ingest_next returns. All pointers live until the next lh_ingest_next or close. */
typedef struct lh_ingest_batch {
  const int32_t *tokens;   /* ids that became final during this call */
  size_t n_tokens;
  int64_t token_base;      /* index of tokens[0] in the whole stream */
  const char *text;        /* framed text produced during this call */
  size_t text_len;
  uint64_t text_base;      /* offset of text[0] in the whole framed text */
  const lh_ingest_entry *entries; /* entries whose spans became final, in input order */
  size_t n_entries;
  int done;                /* 1 on the last batch: every input read and every token final */
} lh_ingest_batch;

typedef struct lh_ingest_stats {
  int64_t entries;                       /* manifest entries so far */
  int64_t by_status[LH_ENTRY_STATUS_COUNT];
  int64_t by_reason[LH_REASON_COUNT];
  int64_t source_bytes;    /* bytes read from inputs (compressed) */
  int64_t source_total;    /* sum of the sizes of file inputs; -1 when some size is unknown */
  int64_t content_bytes;   /* entry bytes read (decompressed) */
  int64_t document_bytes;  /* content bytes of included documents */
  int64_t text_bytes;      /* framed text bytes */
  int64_t tokens;
  int64_t invalid_utf8;
  int inputs_done, inputs_total;
  double seconds;          /* since the first lh_ingest_next */
  double read_seconds;     /* reader thread: in libarchive and read(2) (read + decompress) */
  double frame_seconds;    /* reader thread: sniffing, UTF-8 repair, SHA-256, templates */
  double tokenize_seconds; /* calling thread: in the tokenizer (wall, waiting for workers included) */
  double tokenize_cpu_seconds; /* CPU seconds of tokenizing on all tokenizer threads together */
  int tokenizer_threads;   /* threads that tokenize (1: the calling thread only) */
  /* What the entries came to. by_status and by_reason count every manifest entry; these split
   * them the way a result reports them. */
  int64_t documents;                          /* included: by_status[OK] + by_status[PARTIAL] */
  int64_t skipped_by_reason[LH_REASON_COUNT]; /* SKIPPED entries per reason (directories under
                                               * DIRECTORY: never documents, rarely worth a word) */
  int64_t errors_by_reason[LH_REASON_COUNT];  /* ERROR entries per reason */
  /* Inputs read to their end (or their failure) that gave no document content at all: no entry,
   * no entry that was a document, or only empty documents. lh_ingest_notes says why, per input. */
  int inputs_without_text;
  /* Of those, inputs in which the archive reader found no entry although bytes were read: an
   * archive that starts with NUL blocks (a gzip of zeros reads as an empty tar), an empty zip. */
  int inputs_without_entries;
  /* Once the ingest is done (or failed): 1 when no document content came out of any input, the
   * condition a caller turns into a warning, or an error when documents are required. */
  int no_text;
} lh_ingest_stats;

/* Validate params (template, globs, caps) and make a handle in state ADDING. */
lh_status lh_ingest_open(const lh_ingest_params *p, lh_ingest **out, lh_error *err);
/* Stops the reader thread if running and frees everything; accepts NULL. */
void lh_ingest_close(lh_ingest *ing);

/* Add an input (see "Inputs"). The path is checked now (LH_ENOTFOUND, LH_EIO) but read later.
 * "-" (stdin) may be added once. */
lh_status lh_ingest_add_path(lh_ingest *ing, const char *path, lh_error *err);
/* The same, opening path but naming the input name wherever a name shows: a plain or compressed
 * single file's document path, the template's {input}, notes and messages (path itself is named
 * only where it says more, as the resolved path of a confine_root refusal). So a batch line that
 * names "notes.txt" frames the same prompt whether the runner resolved it against a relative or
 * an absolute folder. name NULL or "": path. "-" must be both or neither. */
lh_status lh_ingest_add_path_as(lh_ingest *ing, const char *path, const char *name, lh_error *err);
/* Add an in-memory input (an archive, a compressed file or a document). name is used as the
 * document name when it is not an archive. data is borrowed until lh_ingest_close. */
lh_status lh_ingest_add_memory(lh_ingest *ing, const char *name, const void *data, size_t len, lh_error *err);

/* Produce the next batch (see the lifecycle above). */
lh_status lh_ingest_next(lh_ingest *ing, lh_ingest_batch *batch, lh_error *err);

/* A consistent snapshot of the counters; callable from any thread at any time. */
void lh_ingest_stats_get(lh_ingest *ing, lh_ingest_stats *out);

/* One line per input that gave no text, saying why ("zeros.tar.gz: no text: no entries: read as
 * GNU tar format data (gzip) that ends within its first 1.0 MiB (...); an archive that starts with
 * NUL blocks, such as a compressed file of zeros, reads as an empty tar"), appended to out (""
 * when there is nothing to say). Returns the number of lines.
 * Callable from any thread; complete once lh_ingest_next has returned done or failed. */
size_t lh_ingest_notes(lh_ingest *ing, lh_buf *out);

/* The stats a result reports, as one JSON object appended to out: {"entries", "documents",
 * "skipped": {reason: count}, "errors": {reason: count}, "no_text", "notes": [lines]}. Skipped
 * directories are left out of "skipped". Call once the ingest is done or failed. */
lh_status lh_ingest_summary_json(lh_ingest *ing, lh_buf *out);

/* Stable short names used in the manifest ("file", "ok", "binary", ...). Never NULL. */
const char *lh_entry_type_name(lh_entry_type t);
const char *lh_entry_status_name(lh_entry_status s);
const char *lh_entry_reason_name(lh_entry_reason r);

/* Append e as one manifest line (JSON object and "\n") to out. Fields: path, [path_hex], type,
 * bytes, sha256, status, reason, token_start, token_end, text_start, text_end, invalid_utf8,
 * input, [link, link_hex], [detail], [error_offset], [decompressed]; missing values are null.
 * "path" is the name with JSON escapes; a name that is not valid UTF-8 has each invalid byte
 * written as U+FFFD there (so every JSON parser reads the line) and its exact bytes in "path_hex"
 * (likewise link_hex). */
lh_status lh_ingest_entry_json(const lh_ingest_entry *e, lh_buf *out);

/* A name made safe for a terminal, appended to out: control bytes, DEL, C1 controls, bidi
 * overrides and invalid UTF-8 as \xNN or \u{NNNN} escapes, backslash as "\\", and names over
 * max_chars characters shortened in the middle with "...". */
lh_status lh_ingest_display_name(const char *name, size_t len, size_t max_chars, lh_buf *out);
/* The same for a NUL-terminated s (NULL: ""), written into out (n bytes; 10 * max_chars + 4 always
 * hold it whole) and returned: for a message that shows user-given strings (a custom_id, an id read
 * from a file) in a terminal. */
const char *lh_ingest_display_str(const char *s, size_t max_chars, char *out, size_t n);

#endif
