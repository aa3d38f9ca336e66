/* outdir.h — a run's output folder: one run at a time, writable before any work starts, files
 * replaced whole or not at all, and stale temporary files swept.
 *
 *     lh_outdir *o;
 *     lh_outdir_open("out", "longhaul.lock", 0, &o, &err);     // creates out/, locks, probes
 *     lh_outdir_put(o, "jobs/q1/result.json", json, n, &err);   // atomic; untouched when equal
 *     lh_outdir_sweep(o, "jobs/q1", &err);                      // stale *.tmp.* files go
 *     lh_outdir_remove(o, "jobs/q1/result.json", &err);         // an output no longer true
 *     lh_outdir_close(o);                                       // releases the lock
 *     (or lh_outdir_abandon(o): releases it, and removes the lock file and folders open made)
 *
 * The lock is an fcntl write lock on OUT/<lock name> (held by the process until close or exit;
 * the kernel drops it when the process dies, kill -9 included, so a lock is never stale). The
 * file holds "pid host started-at" of the holder so that a second run can name it. Shards of one
 * batch write into one OUT side by side: each locks its own name and writes its own files.
 *
 * Temporary files: lh_file_write_atomic (util/fs.h) writes NAME.tmp.PID and renames it over
 * NAME. A kill between the two leaves NAME.tmp.PID behind; lh_outdir_sweep removes such files
 * for names the caller owns once their writer is gone (no such process on this host).
 */
#ifndef LH_JOBS_OUTDIR_H
#define LH_JOBS_OUTDIR_H

#include <stddef.h>

#include "util/err.h"

typedef struct lh_outdir lh_outdir;

/* Create dir (and parents) if needed, take the exclusive lock lock_name in it and check that files
 * can be created, written, synced and removed there. With wait, block until another holder lets
 * go (LH_EINTR when a signal handler runs meanwhile: the wait is given up); without, LH_EBUSY
 * naming the holder (pid, host, since when). LH_EIO (or LH_EFULL) with the path when the folder
 * is not writable, or when the lock's name is taken by something that is not a plain file (a
 * symbolic link, a folder, a FIFO: never opened through): found before any work is done.
 * LH_EINVAL when dir is a file, or a symbolic link to nothing. A failure leaves none of the
 * folders it made. */
lh_status lh_outdir_open(const char *dir, const char *lock_name, int wait, lh_outdir **out, lh_error *err);
void lh_outdir_close(lh_outdir *o); /* accepts NULL */
/* Close o for a caller that wrote nothing there (a command refused after open: a --db it cannot
 * use, a model that does not load): the lock file goes when open created it, and so do the folders
 * open created (dir, and those above it that were not there) once empty, so the refused command
 * leaves nothing it made. What was there before open stays: a folder, a lock file, what they hold.
 * A caller that made other files there removes them first (its store: lh_store_discard). Accepts
 * NULL. */
void lh_outdir_abandon(lh_outdir *o);
const char *lh_outdir_path(const lh_outdir *o);

/* Write dir/rel (folders created as needed) atomically, unless it already holds exactly these
 * bytes (then nothing is written: rebuilding every output of a big batch costs reads only). A
 * folder of rel that is a symbolic link (planted at OUT/jobs/<id>, say) is refused before anything
 * is written: LH_EIO naming it. */
lh_status lh_outdir_put(lh_outdir *o, const char *rel, const void *data, size_t n, lh_error *err);

/* Remove dir/rel, a file the caller wrote with lh_outdir_put and no longer stands behind (a job's
 * result.json once its job is not done), or a folder of them, which goes only when empty (one that
 * still holds anything is left, and that is not an error). Nothing there is not an error either.
 * Its folders are checked as by lh_outdir_put: a symbolic link among them is refused (LH_EIO naming
 * it) before anything is removed; a link at rel itself is removed, never followed. */
lh_status lh_outdir_remove(lh_outdir *o, const char *rel, lh_error *err);

/* Remove temporaries left in dir/rel_folder ("" for dir itself) by lh_file_write_atomic writers
 * that no longer run: files named NAME.tmp.PID where no process PID exists, and NAME is `name`
 * (NULL: any name; a shard passes its own files' names). *n (may be NULL) counts the removed.
 * A missing folder is not an error; one that is a symbolic link is refused as by lh_outdir_put. */
lh_status lh_outdir_sweep(lh_outdir *o, const char *rel_folder, const char *name, int *n, lh_error *err);

#endif
