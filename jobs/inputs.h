/* inputs.h — what a request's documents contain, named without ingesting them: the part of a job's
 * identity that makes a nightly rerun over a changed archive a new job instead of the old answer.
 *
 * The digest covers, for each document of the request in order: the path as written, then the
 * bytes of every file it names — the file itself (an archive, a compressed file, a text), or every
 * regular file under a folder, walked in byte order of names, each with its path relative to the
 * folder. A symbolic link contributes its target text and, when it resolves to a regular file,
 * that file's bytes (and, for the document's own path, a folder's files, as ingest reads them
 * through it); any other kind of file (FIFO, socket, device) contributes its kind and is
 * never opened, so a hostile document cannot hang the digest. The walk is broader than what
 * ingest reads (it ignores include/exclude globs and ingest's skip rules): a change anywhere under
 * a document folder makes a new job, which costs a recomputation, never a stale answer. Paths given
 * to lh_inputs_digest_excluding (the runner's output folder and store, as ingest leaves them out
 * of its walks) are named where they are met but never read, so a rerun into an output folder
 * inside a document folder finds its jobs done.
 *
 * Each file's SHA-256 is remembered in a digest cache (engine/engine.h's lh_digest_cache; the
 * runner passes the store's, kind "doc") keyed by its identity (real path, size, mtime, ctime,
 * inode, device), so an unchanged archive costs one stat on a rerun, and only changed files are
 * read again. A file that changes while it is read is read again (up to 3 times), else an error.
 */
#ifndef LH_JOBS_INPUTS_H
#define LH_JOBS_INPUTS_H

#include "engine/engine.h"
#include "jobs/batch.h"
#include "util/err.h"

/* out: 64 lowercase hex chars and NUL. cache may be NULL (every file is read). A document that
 * does not exist digests as "missing" (the ingest then fails that job with its own message). */
lh_status lh_inputs_digest(const lh_request *r, const lh_digest_cache *cache, char out[65], lh_error *err);
/* The same, leaving out exclude[0..n_exclude) (at most 8; matched by device and inode, those that
 * do not exist ignored). */
lh_status lh_inputs_digest_excluding(const lh_request *r, const lh_digest_cache *cache, const char *const *exclude,
                                     size_t n_exclude, char out[65], lh_error *err);

#endif
