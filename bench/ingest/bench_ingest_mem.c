/* bench_ingest_mem.c — ingest's peak memory per input size, with tokens, on the inputs that used to
 * make it grow: one character repeated (no pre-tokenizer boundary anywhere), random words (the
 * ordinary case), and a gzip bomb of one character.
 *
 * Each case runs in a child process that ingests standard input (the generator streams into a
 * pipe, so nothing of the input is on disk) or, for the bomb, a ~2 MB gzip file, as
 * `longhaul ingest` does (default params but the per-file and total caps, raised so the whole
 * input is one document read to its end; two tokenizer threads). Peak RSS is the child's
 * ru_maxrss from wait4, the number /usr/bin/time -v prints as "Maximum resident set size"; to see
 * it from /usr/bin/time itself:
 *
 *     bench_ingest_mem --gen one-char 256M | /usr/bin/time -v bench_ingest_mem --ingest -
 *
 * The limit is 1 GiB at any size (issue 29). Before the pre-token cap, one character took ~47
 * bytes per byte (16 MiB: 808 MB; the 2 MB bomb: 11.9 GB before its ratio cap fired).
 *
 * usage: bench_ingest_mem [--tokenizer FILE] [--threads N] [--max SIZE]
 *        bench_ingest_mem --gen one-char|words SIZE       (the input, to stdout)
 *        bench_ingest_mem --ingest PATH|-                 (one ingest, its numbers to stderr)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#include "ingest/ingest.h"
#include "util/fs.h"

#define LIMIT_MB 1024.0

static const char *tok_path = LH_BENCH_SOURCE_DIR "/tests/fixtures/tokenizer/minimax.tokenizer.json";
static int threads = 2;

static int64_t parse_size(const char *s) {
  char *e;
  double v = strtod(s, &e);
  int64_t m = *e == 'G' ? 1 << 30 : *e == 'M' ? 1 << 20 : *e == 'K' ? 1 << 10 : 1;
  return (int64_t)(v * (double)m);
}

/* Write n bytes of kind to fd: one character, or words of random letters, spaces and newlines. */
static int generate(int fd, const char *kind, int64_t n) {
  static char block[1 << 20];
  uint64_t x = 0x9E3779B97F4A7C15ull;
  int words = !strcmp(kind, "words");
  if (!words && strcmp(kind, "one-char")) return -1;
  if (!words) memset(block, 'a', sizeof block);
  for (int64_t done = 0; done < n;) {
    if (words) {
      for (size_t i = 0; i < sizeof block; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned r = (unsigned)(x >> 40) % 64;
        block[i] = r < 52 ? "etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ"[r] : r < 62 ? ' ' : '\n';
      }
    }
    size_t k = n - done < (int64_t)sizeof block ? (size_t)(n - done) : sizeof block;
    for (size_t at = 0; at < k;) {
      ssize_t w = write(fd, block + at, k - at);
      if (w <= 0) return -1;
      at += (size_t)w;
    }
    done += (int64_t)k;
  }
  return 0;
}

/* One ingest of path ("-": stdin) with tokens; prints a line to stderr; returns its status. */
static int ingest_one(const char *path) {
  lh_error err = {0};
  lh_tokenizer *t = NULL;
  if (lh_tokenizer_open(tok_path, &t, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return LH_EINVAL;
  }
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = t;
  p.tokenizer_threads = threads;
  /* the whole input is one document: read all of it (the default per-file cap is 256 MiB) */
  p.max_file_bytes = p.max_total_bytes = (int64_t)64 << 30;
  lh_ingest *ing = NULL;
  lh_status st = lh_ingest_open(&p, &ing, &err);
  if (!st) st = lh_ingest_add_path(ing, path, &err);
  int64_t tokens = 0;
  lh_ingest_batch b;
  double t0 = lh_now();
  while (!st && !(st = lh_ingest_next(ing, &b, &err))) {
    tokens += (int64_t)b.n_tokens;
    if (b.done) break;
  }
  lh_ingest_stats s;
  if (ing) lh_ingest_stats_get(ing, &s);
  fprintf(stderr, "ingest %s: %s, %lld tokens, %.1f MB of text read, %.1f s%s%.300s\n", path, lh_status_name(st),
          (long long)tokens, ing ? (double)s.content_bytes / 1e6 : 0.0, lh_now() - t0, st ? ": " : "",
          st ? err.msg : "");
  lh_ingest_close(ing);
  lh_tokenizer_close(t);
  return (int)st;
}

/* A gzip of n bytes of one character, written to path. */
static int make_bomb(const char *path, int64_t n) {
  struct archive *a = archive_write_new();
  archive_write_set_format_raw(a);
  archive_write_add_filter_gzip(a);
  if (archive_write_open_filename(a, path) != ARCHIVE_OK) return -1;
  struct archive_entry *e = archive_entry_new();
  archive_entry_set_pathname(e, "bomb.txt");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_write_header(a, e);
  static char block[1 << 20];
  memset(block, 'a', sizeof block);
  for (int64_t w = 0; w < n; w += (int64_t)sizeof block) archive_write_data(a, block, sizeof block);
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  return 0;
}

typedef struct result {
  int status;
  double rss_mb, seconds;
} result;

/* Run one case in children: a generator into a pipe and the ingest of it (or of file). */
static result run_case(const char *kind, int64_t n, const char *file) {
  result res = {0};
  int pfd[2] = {-1, -1};
  pid_t gen = -1;
  if (!file) {
    if (pipe(pfd)) return res;
    gen = fork();
    if (gen == 0) {
      close(pfd[0]);
      signal(SIGPIPE, SIG_DFL);
      _exit(generate(pfd[1], kind, n) ? 1 : 0);
    }
    close(pfd[1]);
  }
  fflush(NULL);
  double t0 = lh_now();
  pid_t pid = fork();
  if (pid == 0) {
    if (!file) {
      dup2(pfd[0], 0);
      close(pfd[0]);
    }
    _exit(ingest_one(file ? file : "-"));
  }
  if (!file) close(pfd[0]);
  int status = 0;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  res.seconds = lh_now() - t0;
  if (gen > 0) {
    kill(gen, SIGTERM);
    waitpid(gen, NULL, 0);
  }
  res.status = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  res.rss_mb = (double)ru.ru_maxrss / 1024.0;
  return res;
}

static void row(const char *what, int64_t n, result r) {
  char sz[32];
  if (n >= 1 << 30) snprintf(sz, sizeof sz, "%.0f GiB", (double)n / (1 << 30));
  else snprintf(sz, sizeof sz, "%.0f MiB", (double)n / (1 << 20));
  printf("%-26s %8s  %-8s %8.1f  %8.0f  %6.0f  %s\n", what, sz,
         r.status >= 0 ? lh_status_name((lh_status)r.status) : "killed", r.seconds, r.rss_mb, LIMIT_MB,
         r.rss_mb <= LIMIT_MB ? "ok" : "OVER");
  fflush(stdout);
}

int main(int argc, char **argv) {
  int64_t max = (int64_t)2 << 30;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = parse_size(argv[++i]);
    else if (!strcmp(argv[i], "--gen") && i + 2 < argc) return generate(1, argv[i + 1], parse_size(argv[i + 2])) ? 2 : 0;
    else if (!strcmp(argv[i], "--ingest") && i + 1 < argc) return ingest_one(argv[i + 1]);
    else {
      fprintf(stderr, "usage: bench_ingest_mem [--tokenizer FILE] [--threads N] [--max SIZE]\n"
                      "       bench_ingest_mem --gen one-char|words SIZE | bench_ingest_mem --ingest -\n");
      return 2;
    }
  }
  printf("bench_ingest_mem: peak RSS of one ingest with tokens (%d tokenizer threads), per input size\n", threads);
  printf("%-26s %8s  %-8s %8s  %8s  %6s\n", "input", "size", "status", "seconds", "peak MB", "limit");
  static const int64_t sizes[] = {1 << 20, 16 << 20, 256 << 20, (int64_t)2 << 30};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    if (sizes[i] > max) break;
    row("one character, one line", sizes[i], run_case("one-char", sizes[i], NULL));
    row("random words", sizes[i], run_case("words", sizes[i], NULL));
  }
  char bomb[] = "/tmp/bench_ingest_mem_XXXXXX";
  int fd = mkstemp(bomb);
  if (fd >= 0) {
    close(fd);
    int64_t n = max < ((int64_t)2 << 30) ? max : (int64_t)2 << 30;
    if (!make_bomb(bomb, n)) row("gzip bomb of one character", n, run_case("bomb", n, bomb));
    unlink(bomb);
  }
  return 0;
}
