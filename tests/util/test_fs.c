/* test_fs.c — lh_file_write_atomic under faults and hostile output folders (util/fs.h):
 *   - a symbolic link or a hard link planted at its temporary name (NAME.tmp.PID) is not written
 *     through: the file it leads to keeps its bytes;
 *   - lh_file_create_new, which ingest and logits make their temporaries with, does not either;
 *   - fsync failing: LH_EIO, no descriptor leaked, no temporary left, the old file kept;
 *   - the folder is synced after the rename (else a crash can undo the rename);
 *   - a disk with no room for the temporary (a tmpfs out of inodes) is LH_EFULL, not LH_EIO: the
 *     run stops as on a full disk. Needs root to mount the tmpfs; skipped, saying so, without.
 *
 * fsync is interposed below (lh_util is a static library, so its calls bind to this definition):
 * it can be made to fail, and it counts the folders it syncs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests/test.h"
#include "util/buf.h"
#include "util/fs.h"

static int fsync_fails;   /* fsync returns -1 with this errno when nonzero */
static int folder_syncs;  /* fsyncs of folders */

int fsync(int fd) {
  struct stat sb;
  if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) folder_syncs++;
  if (fsync_fails) {
    errno = fsync_fails;
    return -1;
  }
  return (int)syscall(SYS_fsync, fd);
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  while (readdir(d)) n++;
  closedir(d);
  return n;
}

static int holds(const char *path, const char *text) {
  lh_buf b = {0};
  const int same = lh_file_read(path, 1 << 20, &b, NULL) == LH_OK && b.len == strlen(text) &&
                   !memcmp(b.data, text, b.len);
  lh_buf_free(&b);
  return same;
}

int main(void) {
  lh_test_begin("test_fs");
  const char *dir = lh_test_tmpdir();
  char out[600], victim[600], path[700], tmp[800];
  snprintf(out, sizeof out, "%s/out", dir);
  snprintf(victim, sizeof victim, "%s/victim.txt", dir);
  snprintf(path, sizeof path, "%s/result.json", out);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  CHECK_EQ(lh_mkdir_p(out, NULL), LH_OK);
  lh_error e;

  /* a symbolic link, then a hard link, at the temporary's name, to a file outside the folder */
  for (int hard = 0; hard < 2; hard++) {
    CHECK_EQ(lh_file_write_atomic(victim, "precious\n", 9, NULL), LH_OK);
    unlink(path);
    CHECK_EQ(hard ? link(victim, tmp) : symlink(victim, tmp), 0);
    CHECK_EQ(lh_file_write_atomic(path, "{\"answer\": 1}\n", 14, &e), LH_OK);
    CHECK_MSG(holds(victim, "precious\n"), "a %s link at %s was written through", hard ? "hard" : "symbolic", tmp);
    CHECK(holds(path, "{\"answer\": 1}\n"));
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_nlink == 1);
    CHECK(lstat(tmp, &sb) != 0 && errno == ENOENT);
  }

  /* lh_file_create_new (the temporaries of `longhaul ingest` and `logits`): a link at the name is
   * replaced, not followed */
  char partial[700];
  snprintf(partial, sizeof partial, "%s/tokens.u32.partial", out);
  CHECK_EQ(symlink(victim, partial), 0);
  int fd = -1;
  CHECK_EQ(lh_file_create_new(partial, &fd, &e), LH_OK);
  CHECK(fd >= 0 && write(fd, "new\n", 4) == 4);
  if (fd >= 0) close(fd);
  CHECK(holds(victim, "precious\n") && holds(partial, "new\n"));

  /* the folder is synced once the file is renamed into it */
  folder_syncs = 0;
  CHECK_EQ(lh_file_write_atomic(path, "{\"answer\": 2}\n", 14, &e), LH_OK);
  CHECK_MSG(folder_syncs > 0, "the folder of %s was not synced after the rename", path);

  /* fsync fails: the error, the old file, no temporary, no descriptor left open */
  const int before = open_fds();
  fsync_fails = EIO;
  for (int i = 0; i < 8; i++) {
    CHECK_EQ(lh_file_write_atomic(path, "{\"answer\": 3}\n", 14, &e), LH_EIO);
    CHECK_STR_CONTAINS(e.msg, "result.json");
  }
  fsync_fails = ENOSPC;
  CHECK_EQ(lh_file_write_atomic(path, "{\"answer\": 3}\n", 14, &e), LH_EFULL);
  fsync_fails = 0;
  CHECK_MSG(open_fds() == before, "descriptors open: %d before, %d after failed fsyncs", before, open_fds());
  CHECK(holds(path, "{\"answer\": 2}\n"));
  CHECK(access(tmp, F_OK) != 0);

  /* no room to create the temporary: a tmpfs with every inode taken */
  char mnt[600];
  snprintf(mnt, sizeof mnt, "%s/mnt", dir);
  CHECK_EQ(lh_mkdir_p(mnt, NULL), LH_OK);
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m,nr_inodes=8") != 0) {
    fprintf(stderr, "SKIPPED (part) test_fs: cannot mount a tmpfs here (%s: not root, or no CAP_SYS_ADMIN): the "
            "full-disk case did not run\n", strerror(errno));
    return lh_test_end();
  }
  char f[700];
  int made = 0;
  for (; made < 64; made++) {
    snprintf(f, sizeof f, "%s/fill%d", mnt, made);
    const int fd = open(f, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) break;
    close(fd);
  }
  CHECK_MSG(made < 64 && errno == ENOSPC, "the tmpfs did not run out of inodes (%d files, %s)", made, strerror(errno));
  snprintf(f, sizeof f, "%s/output.jsonl", mnt);
  CHECK_EQ(lh_file_write_atomic(f, "x\n", 2, &e), LH_EFULL);
  CHECK_STR_CONTAINS(e.msg, "No space left on device");
  if (umount(mnt) != 0) fprintf(stderr, "warning: could not unmount %s: %s\n", mnt, strerror(errno));
  return lh_test_end();
}
