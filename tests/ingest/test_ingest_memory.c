/* test_ingest_memory.c — ingest memory is bounded by a constant, and the context limit is decided
 * while streaming.
 *
 * What it proves, each case in a child process whose address space is limited to 1 GiB
 * (setrlimit RLIMIT_AS; the numbers are printed, the limit is the check):
 *   - 64 MiB of one letter on one line (no pre-tokenizer boundary anywhere) is tokenized whole;
 *     before the pre-token cap the tokenizer held ~47 bytes per byte, about 3 GB here;
 *   - a gzip bomb of 256 MiB of one letter stops at the ratio cap (grace 32 MiB) with LH_ELIMIT,
 *     without the memory growing first (before: ~1.5 GB by the time the cap fired);
 *   - max_tokens refuses 50 MiB of one letter after reading a few MiB, with LH_ELIMIT naming the
 *     entry and the count, and across documents names the document in which the limit passed.
 * Skipped under AddressSanitizer, which reserves more address space than any such limit.
 */
#include "tests/test.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "tests/ingest/ingest_run.h"
#include "tests/ingest/mem_archive.h"

#if defined(__SANITIZE_ADDRESS__)
#define LH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LH_ASAN 1
#endif
#endif

#define LIMIT ((rlim_t)1 << 30)

static lh_tokenizer *tok;

static const char *fixture(void) {
  static char p[4096];
  const char *src = getenv("LH_SOURCE_DIR");
  snprintf(p, sizeof p, "%s/tests/fixtures/tokenizer/minimax.tokenizer.json", src ? src : ".");
  return p;
}

static void write_run(const char *path, size_t n, char ch) {
  FILE *f = fopen(path, "wb");
  static char block[1 << 16];
  memset(block, ch, sizeof block);
  for (size_t w = 0; w < n; w += sizeof block) fwrite(block, 1, n - w < sizeof block ? n - w : sizeof block, f);
  fclose(f);
}

/* Run the ingest of path in a child under the address-space limit; the child's exit status is
 * the lh_status it ended with (100 + signal when it died). Prints its peak RSS. */
static int limited(const char *label, const lh_ingest_params *p, const char *path) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    struct rlimit rl = {LIMIT, LIMIT};
    setrlimit(RLIMIT_AS, &rl);
    run_keep_output = 0; /* the test must not hold what the ingest streams */
    run_out o;
    run_ingest_paths(p, &path, 1, &o);
    fprintf(stderr, "  %s: status %d, %zu tokens, %lld content bytes read%s%s\n", label, (int)o.st, o.tokens.len,
            (long long)o.stats.content_bytes, o.st ? ": " : "", o.st ? o.msg : "");
    _exit((int)o.st);
  }
  int status = 0;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  fprintf(stderr, "  %s: peak RSS %.0f MB under a %.0f MB address-space limit\n", label, ru.ru_maxrss / 1024.0,
          (double)LIMIT / 1048576);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

static void test_bounded(void) {
  const char *line = tpath("one-line.txt");
  write_run(line, (size_t)64 << 20, 'a');
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = tok;
  p.tokenizer_threads = 2;
  CHECK_EQ(limited("64 MiB of one letter", &p, line), LH_OK);
  unlink(line);

  /* 256 MiB of one letter behind gzip (about 250 KB) */
  const char *bomb = tpath("bomb.txt.gz");
  struct archive *a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_gzip(a);
  CHECK(archive_write_open_filename(a, bomb) == ARCHIVE_OK);
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, "bomb.txt");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_write_header(a, e);
  static char block[1 << 16];
  memset(block, 'a', sizeof block);
  for (size_t w = 0; w < (size_t)256 << 20; w += sizeof block) archive_write_data(a, block, sizeof block);
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  p.ratio_grace_bytes = 32 << 20;
  CHECK_EQ(limited("gzip bomb of 256 MiB", &p, bomb), LH_ELIMIT);
  unlink(bomb);
}

static void test_max_tokens(void) {
  const char *big = tpath("fifty.txt");
  write_run(big, (size_t)50 << 20, 'x');
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = tok;
  p.max_tokens = 200000;
  run_out o;
  run_ingest_paths(&p, &big, 1, &o);
  CHECK_EQ(o.st, LH_ELIMIT);
  CHECK_STR_CONTAINS(o.msg, "entry '");
  CHECK_STR_CONTAINS(o.msg, "fifty.txt");
  CHECK_STR_CONTAINS(o.msg, "the limit of 200000 tokens");
  fprintf(stderr, "max_tokens on 50 MiB: %s (%lld content bytes read)\n", o.msg, (long long)o.stats.content_bytes);
  CHECK_MSG(o.stats.content_bytes < (16 << 20), "read %lld bytes before refusing", (long long)o.stats.content_bytes);
  run_free(&o);
#ifndef LH_ASAN /* AddressSanitizer cannot run under an address-space limit */
  CHECK_EQ(limited("max_tokens 200000 on 50 MiB", &p, big), LH_ELIMIT);
#endif
  unlink(big);

  /* Across documents: the limit passes inside the second one. */
  char doc[3][4000];
  fent f[3];
  for (int i = 0; i < 3; i++) {
    size_t n = 0;
    for (int k = 0; n + 40 < sizeof doc[i]; k++) n += (size_t)snprintf(doc[i] + n, sizeof doc[i] - n, "word%d %d ", i, k);
    static char names[3][16];
    snprintf(names[i], sizeof names[i], "doc%d.txt", i);
    f[i] = (fent){names[i], doc[i], (size_t)-1, 0, NULL, 0};
  }
  lh_buf tar = {0};
  make_archive(&tar, ARCHIVE_FORMAT_TAR_USTAR, ARCHIVE_FILTER_NONE, f, 3);
  run_input in = {"three.tar", tar.data, tar.len, NULL};
  p = lh_ingest_default_params();
  p.tokenizer = tok;
  run_ingest_inputs(&p, &in, 1, &o);
  const run_entry *d1 = run_find(&o, "doc1.txt");
  CHECK(o.st == LH_OK && d1);
  int64_t at = d1 ? d1->e.token_start + 10 : 0;
  run_free(&o);
  p.max_tokens = at;
  run_ingest_inputs(&p, &in, 1, &o);
  CHECK_EQ(o.st, LH_ELIMIT);
  CHECK_STR_CONTAINS(o.msg, "entry 'doc1.txt'");
  run_free(&o);
  p.max_tokens = at + 100000; /* over the whole: fine */
  run_ingest_inputs(&p, &in, 1, &o);
  CHECK_EQ(o.st, LH_OK);
  run_free(&o);
  p.tokenizer = NULL;
  lh_ingest *ing;
  lh_error err;
  CHECK(lh_ingest_open(&p, &ing, &err) == LH_EINVAL);
  lh_buf_free(&tar);
}

int main(void) {
  lh_test_begin("test_ingest_memory");
  run_watchdog(280);
  lh_error err = {0};
  if (lh_tokenizer_open(fixture(), &tok, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  test_max_tokens();
#ifdef LH_ASAN
  fprintf(stderr, "note: the address-space cases are skipped under AddressSanitizer\n");
  (void)test_bounded;
#else
  test_bounded();
#endif
  lh_tokenizer_close(tok);
  return lh_test_end();
}
