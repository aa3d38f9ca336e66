/* outdir.c — see outdir.h.
 *
 * Invariants
 *  1. While an lh_outdir is open its process holds the fcntl lock on OUT/<lock name>; the lock
 *     file's text names that process. No second lh_outdir with the same name opens meanwhile.
 *  2. Every file this module writes is replaced whole (util/fs.h, lh_file_write_atomic): a reader
 *     or a kill sees the old bytes or the new ones.
 *  3. A temporary file is removed only when its writer's pid is not a live process here.
 *  4. Nothing is written or removed through a symbolic link below the folder: a link planted at
 *     OUT/jobs or OUT/jobs/<id> (to a folder elsewhere), or at the lock file (to a file elsewhere,
 *     which taking the lock would truncate), is refused, naming it, before any write.
 *  5. The lock is held on the file the lock's name names: lh_outdir_abandon unlinks it while
 *     holding it, so a run that was waiting for it checks, once it has the lock, that the name
 *     still leads to that file, and opens the folder again when not.
 *
 * It must never: truncate a file in place, remove a file that is neither a NAME.tmp.PID
 * temporary nor one its caller names (lh_outdir_remove: outputs the store no longer stands behind)
 * nor a lock file it created (lh_outdir_abandon), or remove a folder it did not create or one that
 * holds anything (lh_outdir_abandon).
 */
#define _GNU_SOURCE
#include "jobs/outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/fs.h"
#include "util/testpoint.h"

struct lh_outdir {
  char dir[4096];
  char lock_path[4200];
  int lock_fd;
  int lock_made; /* open created the lock file */
  size_t made; /* the length of dir's prefix naming the first folder open created, or 0 */
};

const char *lh_outdir_path(const lh_outdir *o) { return o->dir; }

/* Who holds the lock: the file's text, and the pid fcntl reports. */
static void describe_holder(int fd, const char *lock_path, char *out, size_t n) {
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  const int got = fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  char text[256] = "";
  FILE *f = fopen(lock_path, "r");
  if (f) {
    if (!fgets(text, sizeof text, f)) text[0] = 0;
    fclose(f);
  }
  text[strcspn(text, "\n")] = 0;
  if (text[0]) snprintf(out, n, "%s", text);
  else if (got) snprintf(out, n, "pid %ld", (long)fl.l_pid);
  else snprintf(out, n, "another process");
}

/* Create, write, sync and remove a file in dir: what every output needs, checked up front. */
static lh_status probe(const char *dir, lh_error *err) {
  char path[4200];
  snprintf(path, sizeof path, "%s/.longhaul-probe.%ld", dir, (long)getpid());
  lh_status st = lh_file_write_atomic(path, "probe\n", 6, err);
  if (st == LH_OK && unlink(path) != 0)
    st = lh_error_set(err, LH_EIO, "%s: cannot remove a file there: %s", dir, strerror(errno));
  if (st != LH_OK) lh_error_prefix(err, st, "the output folder %s is not writable: ", dir);
  return st;
}

lh_status lh_outdir_open(const char *dir, const char *lock_name, int wait, lh_outdir **out, lh_error *err) {
  *out = NULL;
  /* a file or a dangling link where the folder should be is the command's mistake (LH_EINVAL),
   * not the disk's */
  struct stat sb;
  const int found = stat(dir, &sb) == 0, why = errno;
  if (found && !S_ISDIR(sb.st_mode))
    return lh_error_set(err, LH_EINVAL, "the output folder %s is a file, not a folder: name another --out", dir);
  if (!found && why == ENOTDIR)
    return lh_error_set(err, LH_EINVAL, "the output folder %s lies under a file, not a folder: name another --out", dir);
  if (!found && why == ENOENT && lstat(dir, &sb) == 0 && S_ISLNK(sb.st_mode)) {
    char to[4096];
    const ssize_t n = readlink(dir, to, sizeof to - 1);
    to[n > 0 ? n : 0] = 0;
    return lh_error_set(err, LH_EINVAL, "the output folder %s is a symbolic link to %s, which does not exist: create "
                        "that folder, or name another --out", dir, to);
  }
again:;
  size_t made;
  lh_status st = lh_mkdir_p_made(dir, &made, err);
  if (st) return lh_error_prefix(err, st, "the output folder: ");
  lh_outdir *o = calloc(1, sizeof *o);
  if (!o) return lh_error_set(err, LH_ENOMEM, "out of memory");
  snprintf(o->dir, sizeof o->dir, "%s", dir);
  o->made = made;
  char lock_path[4200];
  snprintf(lock_path, sizeof lock_path, "%s/%s", dir, lock_name);
  snprintf(o->lock_path, sizeof o->lock_path, "%s", lock_path);
  /* never through a link (invariant 4): taking the lock truncates the file to write the holder.
   * O_EXCL first, to know whether this open made the file (lh_outdir_abandon removes only that) */
  o->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NONBLOCK, 0644);
  o->lock_made = o->lock_fd >= 0;
  if (o->lock_fd < 0 && errno == EEXIST)
    o->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  const int e = o->lock_fd < 0 ? errno : 0;
  struct stat lb;
  const char *kind = NULL; /* what is there instead of a lock file */
  if (e == ELOOP) kind = "a symbolic link";
  else if (e == EISDIR) kind = "a folder";
  else if (!e && (fstat(o->lock_fd, &lb) != 0 || !S_ISREG(lb.st_mode))) kind = "not a regular file";
  /* a failure before the lock is held takes back the folders lh_mkdir_p_made made (empty ones
   * only: not one where another process keeps its lock) */
  if (kind) {
    if (o->lock_fd >= 0) close(o->lock_fd);
    free(o);
    lh_rmdir_made(dir, made);
    return lh_error_set(err, LH_EIO, "%s is %s; longhaul keeps its lock there as a file of its own: remove it and "
                        "rerun", lock_path, kind);
  }
  if (o->lock_fd < 0) {
    free(o);
    lh_rmdir_made(dir, made);
    return lh_error_set(err, e == ENOSPC ? LH_EFULL : LH_EIO, "the output folder %s is not writable: %s: %s", dir,
                        lock_path, strerror(e));
  }
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(o->lock_fd, wait ? F_SETLKW : F_SETLK, &fl) != 0) {
    const int e = errno;
    char who[300];
    describe_holder(o->lock_fd, lock_path, who, sizeof who);
    close(o->lock_fd);
    free(o);
    lh_rmdir_made(dir, made);
    if (e == EACCES || e == EAGAIN)
      return lh_error_set(err, LH_EBUSY, "%s is in use by another longhaul run (%s); wait for it to finish, or pass "
                          "--wait to queue behind it", dir, who);
    if (e == EINTR) /* a signal (Ctrl-C) while waiting: the caller's stop, not a fault of the folder */
      return lh_error_set(err, LH_EINTR, "interrupted while waiting for %s (%s); nothing ran", lock_path, who);
    return lh_error_set(err, LH_EIO, "%s: cannot lock %s: %s", dir, lock_path, strerror(e));
  }
  /* invariant 5: the holder let go by unlinking the file (and maybe the folder) */
  struct stat now;
  if (lstat(lock_path, &now) != 0 || now.st_dev != lb.st_dev || now.st_ino != lb.st_ino) {
    close(o->lock_fd);
    free(o);
    goto again;
  }
  /* name the holder (invariant 1) */
  char host[256] = "?", when[64];
  gethostname(host, sizeof host - 1);
  lh_utc_now(when, sizeof when);
  char text[512];
  const int len = snprintf(text, sizeof text, "pid %ld on %s since %s\n", (long)getpid(), host, when);
  if (ftruncate(o->lock_fd, 0) != 0 || pwrite(o->lock_fd, text, (size_t)len, 0) != len) {
    const int e = errno;
    lh_outdir_abandon(o);
    return lh_error_set(err, e == ENOSPC ? LH_EFULL : LH_EIO, "the output folder %s is not writable: %s: %s", dir,
                        lock_path, strerror(e));
  }
  if ((st = probe(dir, err)) != LH_OK) {
    lh_outdir_abandon(o);
    return st;
  }
  *out = o;
  return LH_OK;
}

void lh_outdir_close(lh_outdir *o) {
  if (!o) return;
  if (o->lock_fd >= 0) close(o->lock_fd); /* closing drops the fcntl lock */
  free(o);
}

void lh_outdir_abandon(lh_outdir *o) {
  if (!o) return;
  if (o->lock_made) {
    lh_testpoint("abandon"); /* a run may be waiting for the lock (invariant 5) */
    unlink(o->lock_path);
  }
  lh_rmdir_made(o->dir, o->made); /* only while empty: what others put there keeps them */
  lh_outdir_close(o);
}

static int same_content(const char *path, const void *data, size_t n) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size != n) return 0;
  lh_buf b = {0};
  const int same = lh_file_read_regular(path, n + 1, &b, NULL) == LH_OK && b.len == n && (!n || !memcmp(b.data, data, n));
  lh_buf_free(&b);
  return same;
}

/* Invariant 4: the folders of dir/rel below dir (every component but the last when last_is_file)
 * that exist are real folders, not symbolic links. The output folder itself may be a link: the
 * user named it. */
static lh_status real_folders(const lh_outdir *o, const char *rel, int last_is_file, lh_error *err) {
  char path[8400];
  const size_t base = (size_t)snprintf(path, sizeof path, "%s/", o->dir);
  for (const char *p = rel; *p;) {
    const char *slash = strchr(p, '/');
    if (!slash && last_is_file) break;
    const size_t end = slash ? (size_t)(slash - rel) : strlen(rel);
    if (base + end >= sizeof path) return lh_error_set(err, LH_ELIMIT, "%s/%s: path too long", o->dir, rel);
    memcpy(path + base, rel, end);
    path[base + end] = 0;
    struct stat sb;
    if (lstat(path, &sb) != 0) return LH_OK; /* not there yet: made as a real folder */
    if (S_ISLNK(sb.st_mode))
      return lh_error_set(err, LH_EIO, "%s is a symbolic link; longhaul writes only into real folders under its "
                          "output folder: remove the link and rerun", path);
    if (!slash) break;
    p = slash + 1;
  }
  return LH_OK;
}

lh_status lh_outdir_put(lh_outdir *o, const char *rel, const void *data, size_t n, lh_error *err) {
  char path[8400];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", o->dir, rel) >= sizeof path)
    return lh_error_set(err, LH_ELIMIT, "%s/%s: path too long", o->dir, rel);
  lh_status st = real_folders(o, rel, 1, err);
  if (st) return st;
  if (same_content(path, data, n)) return LH_OK;
  char *slash = strrchr(path, '/');
  *slash = 0;
  st = lh_mkdir_p(path, err);
  *slash = '/';
  if (st) return st;
  lh_testpoint("output");
  return lh_file_write_atomic(path, data, n, err);
}

lh_status lh_outdir_remove(lh_outdir *o, const char *rel, lh_error *err) {
  char path[8400];
  if ((size_t)snprintf(path, sizeof path, "%s/%s", o->dir, rel) >= sizeof path)
    return lh_error_set(err, LH_ELIMIT, "%s/%s: path too long", o->dir, rel);
  lh_status st = real_folders(o, rel, 1, err);
  if (st) return st;
  struct stat sb;
  if (lstat(path, &sb) != 0) return errno == ENOENT ? LH_OK : lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  const int folder = S_ISDIR(sb.st_mode);
  if ((folder ? rmdir(path) : unlink(path)) == 0 || errno == ENOENT || (folder && (errno == ENOTEMPTY || errno == EEXIST)))
    return LH_OK;
  return lh_error_set(err, LH_EIO, "%s: cannot remove it: %s", path, strerror(errno));
}

/* NAME.tmp.PID with NAME == name (or any, when name is NULL): the pid, else 0. */
static long temp_pid(const char *file, const char *name) {
  const char *t = strstr(file, ".tmp.");
  if (!t) return 0;
  while (strstr(t + 1, ".tmp.")) t = strstr(t + 1, ".tmp.");
  if (name && (strlen(name) != (size_t)(t - file) || strncmp(file, name, (size_t)(t - file)))) return 0;
  char *end;
  const long pid = strtol(t + 5, &end, 10);
  return *end || pid <= 0 ? 0 : pid;
}

lh_status lh_outdir_sweep(lh_outdir *o, const char *rel_folder, const char *name, int *n, lh_error *err) {
  if (n) *n = 0;
  char dir[8400];
  snprintf(dir, sizeof dir, "%s%s%s", o->dir, rel_folder && *rel_folder ? "/" : "", rel_folder ? rel_folder : "");
  if (rel_folder && *rel_folder) {
    lh_status st = real_folders(o, rel_folder, 0, err);
    if (st) return st;
  }
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? LH_OK : lh_error_set(err, LH_EIO, "%s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    const long pid = temp_pid(e->d_name, name);
    if (!pid || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* invariant 3 */
    char path[8700];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && unlink(path) == 0 && n) (*n)++;
  }
  closedir(d);
  return LH_OK;
}
