/* test_engine_cli.c — `longhaul logits` and `longhaul generate` against the HF fixtures, and
 * their errors.
 *
 * For every fixture: `logits` (in chunks of 37 and in one call) meets the parity bound against
 * logits.f32 (relative L2 <= 1e-4, max abs <= 1e-3 x max |ref|) and writes exactly T x vocab
 * floats; `generate --max-new 16` prints greedy.txt. Errors: a missing model folder, ids that are
 * not integers or outside the vocabulary, missing options, an unknown device: each exits 2 with a
 * message that names the problem, and never leaves an output file behind.
 * Skips (77) when the fixtures or the binary are absent.
 */
#include "tests/test.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/fs.h"

static const char *bin;
static char tmp[1024];

/* Run a shell command; returns its exit status, stderr in err_out (if not NULL). */
static int run(const char *cmd, lh_buf *err_out) {
  char full[20000], errf[1100];
  snprintf(errf, sizeof errf, "%s/stderr.txt", tmp);
  snprintf(full, sizeof full, "%s 2>'%s'", cmd, errf);
  int st = system(full);
  if (err_out) {
    lh_buf_clear(err_out);
    lh_file_read(errf, 1 << 20, err_out, NULL);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int bound(const float *got, const float *ref, size_t n, double *rel_out) {
  double num = 0, den = 0, maxref = 0, maxerr = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - ref[i];
    num += e * e;
    den += (double)ref[i] * ref[i];
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    if (!(fabs(e) <= maxerr)) maxerr = e == e ? fabs(e) : INFINITY;
  }
  *rel_out = sqrt(num / den);
  return *rel_out <= 1e-4 && maxerr <= 1e-3 * maxref;
}

static void check_fixture(const char *dir, const char *name) { /* dir: < 2100 bytes */
  char cmd[16384], out[2400], path[2400];
  lh_buf ref = {0}, got = {0}, greedy = {0}, err = {0};
  snprintf(path, sizeof path, "%s/logits.f32", dir);
  CHECK(!lh_file_read(path, (size_t)1 << 30, &ref, NULL));
  snprintf(path, sizeof path, "%s/greedy.txt", dir);
  CHECK(!lh_file_read(path, 1 << 20, &greedy, NULL));
  const char *chunks[2] = {"--chunk 37", ""};
  for (int i = 0; i < 2; i++) {
    snprintf(out, sizeof out, "%s/%s.f32", tmp, name);
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s/ids.txt' %s --threads 2 --out '%s'", bin, dir, dir,
             chunks[i], out);
    int rc = run(cmd, &err);
    CHECK_MSG(rc == 0, "%s: logits %s exited %d: %s", name, chunks[i], rc, err.data ? err.data : "");
    lh_buf_clear(&got);
    CHECK(!lh_file_read(out, (size_t)1 << 30, &got, NULL));
    CHECK_MSG(got.len == ref.len, "%s: logits wrote %zu bytes, the reference has %zu", name, got.len, ref.len);
    double rel = 0;
    if (got.len == ref.len && ref.len)
      CHECK_MSG(bound((const float *)got.data, (const float *)ref.data, ref.len / 4, &rel),
                "%s: logits %s: rel L2 %.3g over the bound", name, chunks[i], rel);
    unlink(out);
  }
  snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids '%s/ids.txt' --max-new 16 --chunk 50 > '%s/gen.txt'", bin,
           dir, dir, tmp);
  CHECK_MSG(run(cmd, &err) == 0, "%s: generate failed: %s", name, err.data ? err.data : "");
  snprintf(path, sizeof path, "%s/gen.txt", tmp);
  lh_buf_clear(&got);
  CHECK(!lh_file_read(path, 1 << 20, &got, NULL));
  CHECK_MSG(got.data && greedy.data && !strcmp(got.data, greedy.data), "%s: generate printed '%s', greedy.txt is '%s'",
            name, got.data ? got.data : "", greedy.data ? greedy.data : "");
  lh_buf_free(&ref), lh_buf_free(&got), lh_buf_free(&greedy), lh_buf_free(&err);
}

static void check_errors(const char *dir) {
  char cmd[16384], path[1100], out[1100];
  lh_buf err = {0};
  snprintf(out, sizeof out, "%s/never.f32", tmp);
  snprintf(cmd, sizeof cmd, "'%s' logits --model '%s/nope' --ids '%s/ids.txt' --out '%s'", bin, tmp, dir, out);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "nope");
  snprintf(path, sizeof path, "%s/bad_ids.txt", tmp);
  FILE *f = fopen(path, "w");
  fputs("1 2 3x 4\n", f);
  fclose(f);
  snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s' --out '%s'", bin, dir, path, out);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "'3x' is not a token id");
  CHECK_STR_CONTAINS(err.data, "byte 4");
  f = fopen(path, "w");
  fputs("1 2 99999\n", f);
  fclose(f);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "outside the model's vocabulary");
  f = fopen(path, "w"); /* a NUL inside an id ended it there: "3\0abc" was read as 3 */
  fwrite("1 2 3\0abc\n", 1, 10, f);
  fclose(f);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "byte 4");
  f = fopen(path, "w");
  fputs(" \n", f);
  fclose(f);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "no token ids");
  CHECK(!lh_is_file(out));
  snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s/ids.txt'", bin, dir, dir);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "--out is required");
  /* --out that is no plain file is refused, left as it is: the rename over it replaced a FIFO, a
   * symbolic link (not its target) or, as root, /dev/null with a file of logits */
  char fifo[1100], link[1100];
  snprintf(fifo, sizeof fifo, "%s/out.fifo", tmp);
  snprintf(link, sizeof link, "%s/out.link", tmp);
  CHECK_EQ(mkfifo(fifo, 0600), 0);
  CHECK_EQ(symlink(out, link), 0);
  const char *const odd[][2] = {{fifo, "is a FIFO, not a file"}, {link, "is a symbolic link, not a file"},
                                {"/dev/null", "is a device, not a file"}, {tmp, "is a folder, not a file"}};
  for (int i = 0; i < 4; i++) {
    snprintf(cmd, sizeof cmd, "'%s' logits --model '%s' --ids '%s/ids.txt' --out '%s'", bin, dir, dir, odd[i][0]);
    CHECK_EQ(run(cmd, &err), 2);
    CHECK_STR_CONTAINS(err.data, odd[i][1]);
  }
  struct stat sb;
  CHECK(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
  CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  CHECK(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
  snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids '%s/ids.txt'", bin, dir, dir);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "--max-new is required");
  snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids '%s/ids.txt' --max-new 2 --device tpu", bin, dir, dir);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "--device must be cpu or cuda");
  snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids '%s/ids.txt' --max-new 2 --chunk 0", bin, dir, dir);
  CHECK_EQ(run(cmd, &err), 2);
  CHECK_STR_CONTAINS(err.data, "--chunk needs an integer >= 1");
  /* cuda: either it runs, or it says clearly that this build has none */
  snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids '%s/ids.txt' --max-new 1 --device cuda >/dev/null", bin,
           dir, dir);
  int rc = run(cmd, &err);
  CHECK(rc == 0 || (rc == 2 && err.data && (strstr(err.data, "no CUDA backend") || strstr(err.data, "cuda"))));
  snprintf(cmd, sizeof cmd, "'%s' logits --help >/dev/null", bin);
  CHECK_EQ(run(cmd, NULL), 0);
  lh_buf_free(&err);
}

int main(void) {
  lh_test_begin("test_engine_cli");
  const char *src = getenv("LH_SOURCE_DIR");
  bin = getenv("LH_LONGHAUL");
  if (!bin || !lh_is_file(bin)) LH_TEST_SKIP("the longhaul binary is not built (LH_LONGHAUL unset or missing)");
  char root[1024];
  snprintf(root, sizeof root, "%s/tests/fixtures/engine", src ? src : ".");
  DIR *d = opendir(root);
  if (!d) LH_TEST_SKIP("no HF fixtures at %s (made by tools/make_engine_fixtures.py)", root);
  snprintf(tmp, sizeof tmp, "%s", lh_test_tmpdir());
  struct dirent *e;
  char first[2100] = "";
  int n = 0;
  while ((e = readdir(d))) {
    char dir[2100], lg[2200];
    snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
    snprintf(lg, sizeof lg, "%s/logits.f32", dir);
    if (e->d_name[0] == '.' || !lh_is_file(lg)) continue;
    if (!first[0]) snprintf(first, sizeof first, "%s", dir);
    check_fixture(dir, e->d_name);
    n++;
  }
  closedir(d);
  if (!n) LH_TEST_SKIP("%s holds no fixture folders", root);
  check_errors(first);
  return lh_test_end();
}
