/* inputs.h — what a request's documents contain, named without ingesting them: the part of a job's
 * identity that makes a nightly rerun over a changed archive a new job instead of the old answer.
 *
 * The digest covers, for each document of the request in order: the path as written, then the
 * bytes of every file it names — the file itself (an archive, a compressed file, a text), or every
 * regular file under a folder, walked in byte order of names, each with its path relative to the
 * folder. A symbolic link contributes its target text and, when it resolves to a regular file,
 * that file's bytes (and, for the document's own path, a folder's files, as ingest reads them
 * through it); any other kind of file (FIFO, socket, device) contributes its kind and is
 * never opened, so a hostile document cannot hang the digest. Inside a folder, the document's
 * include and exclude globs leave out what ingest leaves out by its name (lh_globs_decide: an
 * excluded folder is not walked, an excluded or not-included file not read or named), so a log
 * being appended to, or a .git or build folder, that the globs exclude neither renames the job nor
 * fails it for changing. Otherwise the walk is broader than what ingest reads (it ignores ingest's
 * skip rules that look at content or size): a change anywhere else under a document folder makes a
 * new job, which costs a recomputation, never a stale answer. (The globs themselves are part of the
 * request, which names the job too.) A file with several names (hard links) in one document
 * folder is read by ingest once, under its first name, the others framed as links to it: the
 * digest names each such set of names too (those the globs keep), so a link made or broken there
 * is a new job even with the same bytes; a second name outside the document, or in another
 * document of the request, changes nothing, as it changes nothing ingest reads. Paths given
 * to lh_inputs_digest_excluding (the runner's output folder and store, as ingest leaves them out
 * of its walks) are named where they are met but never read, so a rerun into an output folder
 * inside a document folder finds its jobs done.
 *
 * Each file's SHA-256 is remembered in a digest cache (engine/engine.h's lh_digest_cache; the
 * runner passes the store's, kind "doc") keyed by its identity (real path, size, mtime, ctime,
 * inode, device), so an unchanged archive costs one stat on a rerun, and only changed files are
 * read again. A file that changes while it is read is read again (up to 3 times), else an error.
 *
 * Paths inside a document folder may be of any length: the walk names each entry relative to its
 * folder's descriptor, as ingest's walk does, so a tree nested past PATH_MAX (4096 bytes) is
 * named like any other. A file there whose real path is longer than PATH_MAX is not in the cache
 * (its key is a real path) and is read on every run. An error names its path with the middle cut
 * out when it is long (the document's path first, the file's name last) and odd bytes escaped.
 *
 * A digest names the documents as they were while it was taken; ingest reads them later (the
 * runner takes every job's digest before it runs the first one). Each document's stamp says
 * whether they are still those: a SHA-256 over the same walk with every regular file named by
 * its real path (or, where that cannot be taken for its length, the path it was reached by),
 * device, inode, size, mtime and ctime instead of its bytes. Any write to a file
 * moves its ctime (which, unlike the mtime, no call sets back), and a replaced, added or removed file changes the
 * walk, so a stamp taken with the digest and one taken after ingest has read the documents
 * (lh_inputs_stamp_now, which reads no file) are equal only if ingest read the very bytes the
 * digest names, even when a file was changed and changed back in between. (Within one tick of
 * the file system's clock, a few milliseconds, two writes of the same size can leave the same
 * ctime: the limit of every stat-based check, this one and the digest cache's alike.)
 */
#ifndef LH_JOBS_INPUTS_H
#define LH_JOBS_INPUTS_H

#include "engine/engine.h"
#include "jobs/batch.h"
#include "util/err.h"

/* out: 64 lowercase hex chars and NUL. cache may be NULL (every file is read). A document that
 * does not exist digests as "missing" (the ingest then fails that job with its own message). */
lh_status lh_inputs_digest(const lh_request *r, const lh_digest_cache *cache, char out[65], lh_error *err);
/* One document's stamp (see above). */
typedef struct lh_inputs_stamp {
  uint8_t sha256[32];
} lh_inputs_stamp;

/* The same, leaving out exclude[0..n_exclude) (at most 8; matched by device and inode, those that
 * do not exist ignored), and, when stamps is not NULL, each document's stamp into
 * stamps[0..r->n_documents), taken with the digest: the identities the files had while they were
 * read (or found in the cache). A stream ("-") has a constant stamp: it is never named by content. */
lh_status lh_inputs_digest_excluding(const lh_request *r, const lh_digest_cache *cache, const char *const *exclude,
                                     size_t n_exclude, char out[65], lh_inputs_stamp *stamps, lh_error *err);
/* The stamps alone, as the documents are now, reading no file (one stat per file, one readdir per
 * folder); exclude as above. An error (a folder that cannot be listed, a file whose path no
 * longer resolves) says nothing about whether they changed. */
lh_status lh_inputs_stamp_now(const lh_request *r, const char *const *exclude, size_t n_exclude,
                              lh_inputs_stamp *stamps, lh_error *err);

#endif
