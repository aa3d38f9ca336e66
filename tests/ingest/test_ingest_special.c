/* test_ingest_special.c — inputs that are not regular files or folders: a FIFO (which blocks an
 * open until a writer comes), /dev/zero (which never ends), a unix socket, a symlink to a FIFO.
 *
 * What it proves: lh_ingest_add_path refuses each at once, before opening it, with an error that
 * names the path and its kind; the same kinds met inside a folder walk are recorded as skipped
 * ("special") without being opened, and the rest of the folder is read. A watchdog fails the test
 * if anything waits (before this check existed, the FIFO hung lh_ingest_next forever). A path that
 * resolves to nothing, through a symlink loop or a name too long, is the input's fault like a
 * missing one (LH_ENOTFOUND / LH_EINVAL: a 400 in a run), not an I/O error (a 500).
 *
 * A regular file whose size says 0 but which holds text (procfs and sysfs files: /proc/cpuinfo)
 * is read to its end; it became an empty document before, its text silently lost. A really empty
 * file is still one empty document.
 */
#include "tests/test.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "tests/ingest/ingest_run.h"

static int make_socket(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    perror("socket");
    return -1;
  }
  return fd;
}

static void refused(const char *path, const char *kind) {
  lh_ingest_params p = lh_ingest_default_params();
  run_out o;
  double t0 = lh_now();
  run_ingest_paths(&p, &path, 1, &o);
  CHECK_MSG(o.add_st == LH_EINVAL, "%s: add_path gave %d (%s)", path, (int)o.add_st, o.msg);
  CHECK_STR_CONTAINS(o.msg, path);
  CHECK_STR_CONTAINS(o.msg, kind);
  CHECK(lh_now() - t0 < 5);
  run_free(&o);
}

int main(void) {
  lh_test_begin("test_ingest_special");
  run_watchdog(60);
  const char *fifo = tpath("pipe");
  CHECK(mkfifo(fifo, 0644) == 0);
  refused(fifo, "FIFO");
  refused("/dev/zero", "character device");
  const char *sock = tpath("sock");
  int sfd = make_socket(sock);
  if (sfd >= 0) refused(sock, "socket");
  const char *ln = tpath("link-to-pipe");
  CHECK(symlink(fifo, ln) == 0);
  refused(ln, "FIFO");

  /* paths that resolve to nothing: a symlink loop, a component too long */
  {
    const char *loop = tpath("loop");
    CHECK(symlink("loop", loop) == 0);
    char longname[1400];
    CHECK(mkdir(tpath("x"), 0755) == 0);
    snprintf(longname, sizeof longname, "%s/", tpath("x"));
    for (size_t n = strlen(longname); n < 600; n++) longname[n] = 'y', longname[n + 1] = 0;
    const char *paths[] = {loop, longname};
    const lh_status want[] = {LH_ENOTFOUND, LH_EINVAL};
    for (int i = 0; i < 2; i++) {
      lh_ingest_params p = lh_ingest_default_params();
      run_out o;
      run_ingest_paths(&p, &paths[i], 1, &o);
      CHECK_MSG(o.add_st == want[i], "%s: add_path gave %d (%s)", paths[i], (int)o.add_st, o.msg);
      CHECK_STR_CONTAINS(o.msg, i ? "too long" : "symbolic links");
      run_free(&o);
    }
  }

  /* "-" (standard input) is still a stream the caller chose: accepted. */
  {
    lh_ingest_params p = lh_ingest_default_params();
    lh_ingest *ing;
    lh_error err;
    CHECK(lh_ingest_open(&p, &ing, &err) == LH_OK);
    CHECK(lh_ingest_add_path(ing, "-", &err) == LH_OK);
    lh_ingest_close(ing);
  }

  /* Inside a folder: recorded, never opened; the regular file beside them is read. */
  const char *dir = tpath("tree");
  CHECK(mkdir(dir, 0755) == 0);
  char p1[1200], p2[1200], p3[1200];
  snprintf(p1, sizeof p1, "%s/a-pipe", dir);
  snprintf(p2, sizeof p2, "%s/b-sock", dir);
  snprintf(p3, sizeof p3, "%s/c.txt", dir);
  CHECK(mkfifo(p1, 0644) == 0);
  int sfd2 = make_socket(p2);
  write_file(p3, "text\n", 5);
  lh_ingest_params p = lh_ingest_default_params();
  run_out o;
  run_ingest_paths(&p, &dir, 1, &o);
  CHECK_EQ(o.st, LH_OK);
  const run_entry *x;
  CHECK((x = run_find(&o, "a-pipe")) && x->e.type == LH_ENTRY_FIFO && x->e.status == LH_ENTRY_SKIPPED &&
        x->e.reason == LH_REASON_SPECIAL);
  if (sfd2 >= 0)
    CHECK((x = run_find(&o, "b-sock")) && x->e.type == LH_ENTRY_SOCKET && x->e.reason == LH_REASON_SPECIAL);
  CHECK((x = run_find(&o, "c.txt")) && x->e.status == LH_ENTRY_OK && run_sha_is(x, "text\n", 5));
  CHECK_EQ(o.stats.skipped_by_reason[LH_REASON_SPECIAL], sfd2 >= 0 ? 2 : 1);
  run_free(&o);
  if (sfd >= 0) close(sfd);
  if (sfd2 >= 0) close(sfd2);

  struct stat sb;
  if (stat("/proc/self/status", &sb) != 0 || sb.st_size != 0) {
    fprintf(stderr, "test_ingest_special: /proc/self/status is missing or has a size: its case not run\n");
  } else {
    const char *empty = tpath("empty.txt");
    write_file(empty, "", 0);
    const char *paths[] = {"/proc/self/status", empty};
    lh_ingest_params pp = lh_ingest_default_params();
    run_ingest_paths(&pp, paths, 2, &o);
    CHECK_EQ(o.st, LH_OK);
    CHECK((x = run_find(&o, "/proc/self/status")) && x->e.status == LH_ENTRY_OK && x->e.bytes > 0);
    CHECK(o.text.data && strstr(o.text.data, "\nPid:"));
    CHECK((x = run_find(&o, empty)) && x->e.status == LH_ENTRY_OK && x->e.bytes == 0);
    CHECK_EQ(o.stats.documents, 2);
    run_free(&o);
  }
  return lh_test_end();
}
