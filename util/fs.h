/* fs.h — small file-system helpers shared by every subsystem.
 *
 * All functions report failures through lh_error with the path and the OS reason in the message.
 * lh_file_write_atomic writes to a temporary name, fsyncs and renames, so readers see either the
 * old file or the whole new one, never a torn write (used for results and manifests).
 */
#ifndef LH_UTIL_FS_H
#define LH_UTIL_FS_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

/* Read a whole (small) file into b (appending). Fails with LH_ELIMIT if it is over max bytes. It
 * opens whatever is at path (a FIFO blocks it): for tests' own files; a path a user names, or one
 * in an output folder, goes through lh_file_read_regular. */
lh_status lh_file_read(const char *path, size_t max, lh_buf *b, lh_error *err);
/* The same for a file that must be a regular file (a model folder's files, --defaults, --ids, ...): a
 * FIFO, device or directory is refused with LH_EINVAL naming what it is, and is never read, so a
 * FIFO cannot hang the caller and /dev/zero cannot be read to max. A missing file is LH_ENOTFOUND;
 * one over max bytes is LH_ELIMIT with its size and max in the message, and is not read. */
lh_status lh_file_read_regular(const char *path, size_t max, lh_buf *b, lh_error *err);
/* Open path for reading if it is a regular file, never blocking on a FIFO: its descriptor
 * (O_CLOEXEC, blocking reads; the caller closes it) with *sb filled. -1 otherwise: errno says why
 * the open or fstat failed, or is 0 when something else is there, *sb then saying what
 * (lh_file_kind). For readers that stream the file rather than take it whole. */
struct stat;
int lh_file_open_regular(const char *path, struct stat *sb);
/* LH_OK for a regular file (symbolic links followed), LH_ENOTFOUND when nothing is there, LH_EINVAL
 * naming what it is otherwise. */
lh_status lh_file_check_regular(const char *path, lh_error *err);
/* "a FIFO (named pipe)", "a character device", "a folder", ... for a st_mode: how messages name a
 * file that is not what was wanted (ingest's skipped entries, a model folder's files). */
const char *lh_file_kind(unsigned mode);
/* Write path whole: NAME.tmp.PID is created (lh_file_create_new), written, fsynced, renamed over
 * path, and path's folder fsynced, so that after a crash path holds the old bytes or the new ones.
 * A full disk (or quota) is LH_EFULL, other failures LH_EIO; the temporary never outlives a failure. */
lh_status lh_file_write_atomic(const char *path, const void *data, size_t n, lh_error *err);
/* Create path for writing as a new file (mode 0644) and return its descriptor in *fd (O_CLOEXEC;
 * the caller closes it). Never opens through a symbolic link or anything else planted at the name
 * (a FIFO, a hard link to a file elsewhere): whatever is there is unlinked first, which removes a
 * link and never touches its target. LH_EFULL when the disk (or quota) is full, else LH_EIO. */
lh_status lh_file_create_new(const char *path, int *fd, lh_error *err);
/* Open path with flags (O_RDONLY, or O_WRONLY|O_APPEND|O_CREAT, ...; mode 0644 when created) as a
 * plain file of this folder, into *fd (O_CLOEXEC; the caller closes it): a symbolic link at the
 * name is refused, never followed, and so is anything not a regular file (a FIFO cannot hang the
 * open). LH_ENOTFOUND when nothing is there (without O_CREAT), LH_EFULL when the disk is full,
 * LH_EIO naming what is in the way otherwise. For files a run keeps in its own folder and reopens
 * across runs (niah's results.jsonl), where an attacker's link would be written or read through. */
lh_status lh_file_open_plain(const char *path, int flags, int *fd, lh_error *err);
/* fsync the folder that holds path, so that a rename or create in it survives a crash. A file
 * system that cannot sync folders, or a folder this process may not open, is not an error. */
lh_status lh_fsync_parent(const char *path, lh_error *err);
/* mkdir -p; succeeds if the directory exists. A failure leaves none of the folders it made. */
lh_status lh_mkdir_p(const char *path, lh_error *err);
/* lh_mkdir_p, and in *made the length of the prefix of path that names the first folder this call
 * created (the folders it names below it were created after it), or 0 when it created none: for a
 * caller that undoes what it made (lh_rmdir_made). A call that fails part way (a name too long, a
 * full disk, a folder it may not write in) removes the folders it created before it returns. */
lh_status lh_mkdir_p_made(const char *path, size_t *made, lh_error *err);
/* Undo lh_mkdir_p_made(path, &made): remove path and each folder above it up to the one made
 * names, deepest first, each only while empty, stopping at the first that cannot go (it holds
 * something, another process took it). made == 0: nothing. */
void lh_rmdir_made(const char *path, size_t made);
int lh_is_dir(const char *path);
int lh_is_file(const char *path);
/* Join dir and name with one '/', into out (size outsz). Returns LH_ELIMIT if it does not fit. */
lh_status lh_path_join(char *out, size_t outsz, const char *dir, const char *name);

/* Seconds on a monotonic clock (for durations and rates). */
double lh_now(void);
/* Wall-clock time as an RFC 3339 UTC string ("2026-12-01T09:24:48Z") into out (>= 21 bytes). */
void lh_utc_now(char *out, size_t outsz);

#endif
