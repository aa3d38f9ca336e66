/* fs.c — see fs.h. */
#define _POSIX_C_SOURCE 200809L
#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Read all of an open file into b (at most max bytes), then close it. */
static lh_status read_fd(int fd, const char *path, size_t max, lh_buf *b, lh_error *err) {
  char chunk[65536];
  size_t total = 0;
  lh_status st = LH_OK;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      st = lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
      break;
    }
    if (n == 0) break;
    total += (size_t)n;
    if (total > max) {
      st = lh_error_set(err, LH_ELIMIT, "%s: larger than %zu bytes", path, max);
      break;
    }
    if (lh_buf_append(b, chunk, (size_t)n)) {
      st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading file", path);
      break;
    }
  }
  close(fd);
  if (!st && !b->data) lh_buf_append(b, "", 0);
  return st;
}

lh_status lh_file_read(const char *path, size_t max, lh_buf *b, lh_error *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return lh_error_set(err, errno == ENOENT ? LH_ENOTFOUND : LH_EIO, "%s: %s", path, strerror(errno));
  return read_fd(fd, path, max, b, err);
}

const char *lh_file_kind(unsigned mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symlink";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISREG(mode)) return "a regular file";
  return "of an unknown file type";
}

lh_status lh_file_check_regular(const char *path, lh_error *err) {
  struct stat st;
  if (stat(path, &st) != 0)
    return lh_error_set(err, errno == ENOENT || errno == ENOTDIR ? LH_ENOTFOUND : LH_EIO, "%s: %s", path,
                        strerror(errno));
  if (!S_ISREG(st.st_mode))
    return lh_error_set(err, LH_EINVAL, "%s: is %s, not a regular file", path, lh_file_kind(st.st_mode));
  return LH_OK;
}

int lh_file_open_regular(const char *path, struct stat *sb) {
  /* O_NONBLOCK so that opening a FIFO returns at once; the type is then judged on the open file. */
  const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  if (fstat(fd, sb) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  if (!S_ISREG(sb->st_mode)) {
    close(fd);
    errno = 0;
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

lh_status lh_file_read_regular(const char *path, size_t max, lh_buf *b, lh_error *err) {
  struct stat st;
  const int fd = lh_file_open_regular(path, &st);
  if (fd < 0 && errno)
    return lh_error_set(err, errno == ENOENT ? LH_ENOTFOUND : LH_EIO, "%s: %s", path, strerror(errno));
  if (fd < 0) return lh_error_set(err, LH_EINVAL, "%s: is %s, not a regular file", path, lh_file_kind(st.st_mode));
  if ((uint64_t)st.st_size > max) {
    close(fd);
    return lh_error_set(err, LH_ELIMIT, "%s: %lld bytes, over the limit of %zu bytes", path, (long long)st.st_size,
                        max);
  }
  return read_fd(fd, path, max, b, err);
}

/* What a failed write, create or sync means: a full disk, a quota or the file size limit (EFBIG,
 * ulimit -f) is LH_EFULL, the rest LH_EIO. */
static lh_status write_status(int e) { return e == ENOSPC || e == EDQUOT || e == EFBIG ? LH_EFULL : LH_EIO; }

lh_status lh_file_create_new(const char *path, int *fd, lh_error *err) {
  /* O_EXCL|O_NOFOLLOW: the file is made here, never opened through a symbolic link, a FIFO or a
   * hard link planted at the name. What a dead writer (or anyone) left there is unlinked, which
   * removes a link itself and never what it points to, and the create is tried once more. */
  for (int attempt = 0;; attempt++) {
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd >= 0) return LH_OK;
    const int e = errno;
    if (e == EEXIST && attempt == 0 && (unlink(path) == 0 || errno == ENOENT)) continue;
    if (e == EEXIST)
      return lh_error_set(err, LH_EIO, "%s: something is in the way there that cannot be replaced (%s): remove it",
                          path, strerror(errno));
    return lh_error_set(err, write_status(e), "%s: %s", path, strerror(e));
  }
}

lh_status lh_file_open_plain(const char *path, int flags, int *fd, lh_error *err) {
  *fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (*fd < 0) {
    const int e = errno;
    if (e == ENOENT) return lh_error_set(err, LH_ENOTFOUND, "%s: %s", path, strerror(e));
    if (e == ELOOP)
      return lh_error_set(err, LH_EIO, "%s: a symbolic link is in the way (never followed here): remove it", path);
    return lh_error_set(err, write_status(e), "%s: %s", path, strerror(e));
  }
  struct stat st;
  const int ok = fstat(*fd, &st) == 0, e = errno;
  if (!ok || !S_ISREG(st.st_mode)) {
    close(*fd);
    *fd = -1;
    return ok ? lh_error_set(err, LH_EIO, "%s: %s is in the way, not a plain file: remove it", path,
                             lh_file_kind(st.st_mode))
              : lh_error_set(err, LH_EIO, "%s: %s", path, strerror(e));
  }
  fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK);
  return LH_OK;
}

lh_status lh_fsync_parent(const char *path, lh_error *err) {
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else if ((size_t)(slash - path) >= sizeof dir) return lh_error_set(err, LH_ELIMIT, "%s: path too long", path);
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    /* a folder that can be written but not listed cannot be opened to sync: nothing more to do */
    if (errno == EACCES) return LH_OK;
    return lh_error_set(err, LH_EIO, "%s: opening its folder to sync it: %s", path, strerror(errno));
  }
  const int rc = fsync(fd), e = errno;
  close(fd);
  /* EINVAL: a file system that cannot sync folders (it keeps no separate folder metadata) */
  if (rc != 0 && e != EINVAL)
    return lh_error_set(err, write_status(e), "%s: syncing its folder: %s", path, strerror(e));
  return LH_OK;
}

lh_status lh_file_write_atomic(const char *path, const void *data, size_t n, lh_error *err) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
    return lh_error_set(err, LH_ELIMIT, "%s: path too long", path);
  int fd;
  lh_status st = lh_file_create_new(tmp, &fd, err);
  if (st) return st;
  const char *p = data;
  while (n) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      close(fd);
      unlink(tmp);
      return lh_error_set(err, write_status(e), "%s: %s", path, strerror(e));
    }
    p += w, n -= (size_t)w;
  }
  const int synced = fsync(fd) == 0, e_sync = errno;
  const int closed = close(fd) == 0, e_close = errno;
  if (!synced || !closed) {
    const int e = !synced ? e_sync : e_close;
    unlink(tmp);
    return lh_error_set(err, write_status(e), "%s: %s", path, strerror(e));
  }
  if (rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    return lh_error_set(err, write_status(e), "%s: rename: %s", path, strerror(e));
  }
  /* the rename lives in the folder: until the folder is synced a crash can bring the old file back */
  return lh_fsync_parent(path, err);
}

lh_status lh_mkdir_p_made(const char *path, size_t *made, lh_error *err) {
  char buf[4096];
  size_t n = strlen(path), first = 0, last = 0; /* where the first and the last folder made end */
  if (made) *made = 0;
  if (n == 0 || n >= sizeof buf) return lh_error_set(err, LH_EINVAL, "bad directory path '%s'", path);
  memcpy(buf, path, n + 1);
  lh_status st = LH_OK;
  for (size_t i = 1; i <= n && st == LH_OK; i++) {
    if (buf[i] != '/' && buf[i] != 0) continue;
    const char c = buf[i];
    buf[i] = 0;
    if (mkdir(buf, 0755) == 0) {
      if (!first) first = i;
      last = i;
    } else if (errno != EEXIST) {
      st = lh_error_set(err, LH_EIO, "mkdir %s: %s", buf, strerror(errno));
    }
    buf[i] = c;
  }
  if (st == LH_OK && !lh_is_dir(path)) st = lh_error_set(err, LH_EIO, "%s exists and is not a directory", path);
  if (st != LH_OK && first) { /* failed part way: the folders made on the way go */
    buf[last] = 0;
    lh_rmdir_made(buf, first);
  } else if (made) {
    *made = first;
  }
  return st;
}

void lh_rmdir_made(const char *path, size_t made) {
  char buf[4096];
  size_t n = strlen(path);
  if (!made || made > n || n >= sizeof buf) return;
  memcpy(buf, path, n + 1);
  /* rmdir takes only an empty folder and refuses a name ending in "." or "..", so no folder that
   * was there before, or that holds anything, is removed */
  while (n >= made) {
    buf[n] = 0;
    if (rmdir(buf) != 0) return;
    while (n > 0 && buf[n - 1] == '/') n--;
    while (n > 0 && buf[n - 1] != '/') n--;
    while (n > 0 && buf[n - 1] == '/') n--;
  }
}

lh_status lh_mkdir_p(const char *path, lh_error *err) { return lh_mkdir_p_made(path, NULL, err); }

int lh_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int lh_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

lh_status lh_path_join(char *out, size_t outsz, const char *dir, const char *name) {
  size_t dl = strlen(dir);
  int slash = dl > 0 && dir[dl - 1] != '/';
  int n = snprintf(out, outsz, "%s%s%s", dir, slash ? "/" : "", name);
  return n < 0 || (size_t)n >= outsz ? LH_ELIMIT : LH_OK;
}

double lh_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void lh_utc_now(char *out, size_t outsz) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, outsz, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
