/* bench_ingest.c — end-to-end ingest throughput on a large source tarball, and where the time goes.
 *
 * Builds a tarball of /usr/include and /usr/share/doc (uncompressed, gzip and zstd) in a
 * temporary folder, then ingests each through the library exactly as `longhaul ingest` does (one
 * reader thread reading, decompressing and framing; the calling thread and the tokenizer stream's
 * worker tokenizing), pinned to two cores. Throughput is the uncompressed tarball's size over
 * wall time. The peer is libarchive's own extraction of the same file to /dev/null (bsdtar -xOf),
 * the floor of read + decompress. Measured numbers and their history: bench/ingest/NOTES.md.
 *
 * usage: bench_ingest [--tokenizer FILE | --no-tokens] [--threads N] [--keep DIR]
 *   --tokenizer FILE   the tokenizer (default: tests/fixtures/tokenizer/minimax.tokenizer.json, a
 *                      MiniMax-style NFC + GPT-4o-split + byte-level BPE, when it is there)
 *   --no-tokens        measure the text-only path (and say so)
 *   --threads N        tokenizer threads (default 2: the calling thread and one worker)
 *   --keep DIR         build (or reuse) the tarballs in DIR instead of a temporary folder
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "util/fs.h"

#define GOAL_MBS 50.0

static int run(const char *cmd) {
  int rc = system(cmd);
  return rc == 0 ? 0 : -1;
}

static int64_t file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

typedef struct result {
  double wall;
  double cores; /* this process's CPU seconds (all threads) per wall second */
  double idle;  /* share of the machine's CPU time that was idle meanwhile (others' load = 1 - idle - ours) */
  lh_ingest_stats st;
  int ok;
} result;

static double proc_cpu(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The machine's CPU time so far, in ticks: total and idle (idle + iowait), from /proc/stat. */
static void machine_ticks(double *total, double *idle) {
  *total = *idle = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return;
  double v[10] = {0};
  if (fscanf(f, "cpu %lf %lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
    for (int i = 0; i < 8; i++) *total += v[i];
    *idle = v[3] + v[4];
  }
  fclose(f);
}

static result ingest_one(const char *path, const lh_tokenizer *tok, int threads) {
  result r = {0};
  lh_ingest_params p = lh_ingest_default_params();
  p.tokenizer = tok;
  p.tokenizer_threads = threads;
  lh_ingest *ing;
  lh_error err;
  if (lh_ingest_open(&p, &ing, &err) || lh_ingest_add_path(ing, path, &err)) {
    fprintf(stderr, "bench_ingest: %s\n", err.msg);
    return r;
  }
  double t0 = lh_now(), c0 = proc_cpu(), mt0, mi0;
  machine_ticks(&mt0, &mi0);
  uint64_t sink = 0;
  for (;;) {
    lh_ingest_batch b;
    lh_status s = lh_ingest_next(ing, &b, &err);
    if (s) {
      fprintf(stderr, "bench_ingest: %s\n", err.msg);
      lh_ingest_close(ing);
      return r;
    }
    sink += b.text_len + b.n_tokens + b.n_entries; /* a consumer touches each batch */
    if (b.done) break;
  }
  r.wall = lh_now() - t0;
  r.cores = (proc_cpu() - c0) / r.wall;
  double mt1, mi1;
  machine_ticks(&mt1, &mi1);
  r.idle = mt1 > mt0 ? (mi1 - mi0) / (mt1 - mt0) : 0;
  lh_ingest_stats_get(ing, &r.st);
  lh_ingest_close(ing);
  r.ok = sink > 0;
  return r;
}

int main(int argc, char **argv) {
  const char *tok_path = NULL, *keep = NULL;
  int no_tokens = 0, threads = 2;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--no-tokens")) no_tokens = 1;
    else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
    else {
      fprintf(stderr, "usage: bench_ingest [--tokenizer FILE | --no-tokens] [--threads N] [--keep DIR]\n");
      return 2;
    }
  }
  char def_tok[1024];
  if (!tok_path && !no_tokens) {
    snprintf(def_tok, sizeof def_tok, "%s/tests/fixtures/tokenizer/minimax.tokenizer.json", LH_BENCH_SOURCE_DIR);
    if (lh_is_file(def_tok)) tok_path = def_tok;
    else fprintf(stderr, "bench_ingest: no %s; measuring text only\n", def_tok);
  }
  cpu_set_t cs;
  CPU_ZERO(&cs);
  CPU_SET(0, &cs);
  CPU_SET(1, &cs);
  sched_setaffinity(0, sizeof cs, &cs); /* two cores, as the CI machine has (best effort) */

  char dir[512];
  if (keep) snprintf(dir, sizeof dir, "%s", keep);
  else {
    const char *base = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/lh-bench-ingest-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      return 1;
    }
  }
  lh_error err;
  if (lh_mkdir_p(dir, &err)) {
    fprintf(stderr, "bench_ingest: %s\n", err.msg);
    return 1;
  }
  char tar[600], tgz[600], tzst[600], cmd[4096];
  snprintf(tar, sizeof tar, "%s/src.tar", dir);
  snprintf(tgz, sizeof tgz, "%s/src.tar.gz", dir);
  snprintf(tzst, sizeof tzst, "%s/src.tar.zst", dir);
  if (file_size(tar) <= 0) {
    fprintf(stderr, "bench_ingest: making %s from /usr/include and /usr/share/doc\n", tar);
    snprintf(cmd, sizeof cmd, "tar -cf '%s' -C /usr include share/doc 2>/dev/null || test -s '%s'", tar, tar);
    if (run(cmd)) return fprintf(stderr, "bench_ingest: tar failed\n"), 1;
    snprintf(cmd, sizeof cmd, "gzip -6 -c '%s' > '%s' && zstd -q -3 -c '%s' > '%s'", tar, tgz, tar, tzst);
    if (run(cmd)) return fprintf(stderr, "bench_ingest: compressing failed\n"), 1;
  }
  int64_t raw = file_size(tar);

  lh_tokenizer *tok = NULL;
  if (tok_path && !no_tokens && lh_tokenizer_open(tok_path, &tok, &err)) {
    fprintf(stderr, "bench_ingest: %s\n", err.msg);
    return 1;
  }
  printf("bench_ingest: %.1f MB tar of /usr/include + /usr/share/doc, 2 cores, %s%s, %d tokenizer thread%s\n",
         (double)raw / 1e6, tok ? "ingest + tokenize with " : "TEXT ONLY (framing, no tokens)", tok ? tok_path : "",
         threads, threads == 1 ? "" : "s");
  printf("%-12s %9s %9s %8s %9s | %8s %8s %8s %8s %9s | %9s | %5s %6s\n", "input", "ours MB/s", "peer MB/s",
         "ratio", "goal MB/s", "wall s", "read s", "frame s", "token s", "tok cpu s", "documents", "cores", "idle");
  const char *ins[3] = {tar, tgz, tzst}, *labels[3] = {"tar", "tar.gz", "tar.zst"};
  for (int i = 0; i < 3; i++) {
    result r = ingest_one(ins[i], tok, threads);
    if (!r.ok) return 1;
    snprintf(cmd, sizeof cmd, "bsdtar -xOf '%s' > /dev/null", ins[i]);
    double t0 = lh_now();
    int peer_ok = run(cmd) == 0;
    double peer = lh_now() - t0;
    double ours = (double)raw / 1e6 / r.wall, theirs = peer_ok ? (double)raw / 1e6 / peer : 0;
    printf("%-12s %9.1f %9.1f %8.2f %9.1f | %8.2f %8.2f %8.2f %8.2f %9.2f | %9lld | %5.2f %5.0f%%\n", labels[i], ours,
           theirs, theirs > 0 ? ours / theirs : 0, GOAL_MBS, r.wall, r.st.read_seconds, r.st.frame_seconds,
           r.st.tokenize_seconds, r.st.tokenize_cpu_seconds, (long long)r.st.by_status[LH_ENTRY_OK], r.cores,
           100 * r.idle);
  }
  lh_ingest_stats s;
  result r = ingest_one(tgz, tok, threads);
  s = r.st;
  printf("tar.gz detail: %.1f MB uncompressed, %.1f MB compressed, %.1f MB in %lld documents, %.1f MB framed, "
         "%lld tokens, %lld binary skipped\n",
         (double)raw / 1e6, (double)file_size(tgz) / 1e6, (double)s.document_bytes / 1e6,
         (long long)s.by_status[LH_ENTRY_OK], (double)s.text_bytes / 1e6, (long long)s.tokens,
         (long long)s.by_reason[LH_REASON_BINARY]);
  printf("read s: reader thread in libarchive/read(2) (read + decompress); frame s: reader thread sniffing, UTF-8 "
         "repair, SHA-256, templates; token s: calling thread in the tokenizer (wall, waits for the worker "
         "included); tok cpu s: CPU seconds of tokenizing on all tokenizer threads. The threads overlap. cores: "
         "this process's CPU seconds per wall second; idle: the machine's idle share meanwhile (when both are "
         "low, other load had the cores).\n");
  if (!keep) {
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    run(cmd);
  }
  lh_tokenizer_close(tok);
  return 0;
}
