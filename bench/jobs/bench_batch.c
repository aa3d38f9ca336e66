/* bench_batch.c — how fast a batch file is read and parsed, in lines per second.
 *
 *   bench_batch [--max LINES] [--dir DIR]
 *
 * For 10K, 100K and 1M lines (up to --max) of three kinds — tiny valid requests with distinct
 * custom_ids, malformed lines (not JSON), and valid requests that all share one custom_id (every
 * line after the first is a duplicate) — it writes the batch to a file in DIR (default $TMPDIR or
 * /tmp) and times lh_batch_load on it: one read, the SHA-256 of the bytes, the per-line parse,
 * the duplicate check. "Peer" is cJSON alone parsing and freeing the same lines from memory,
 * the floor under any parser built on it; "ratio" is ours over the peer's time. Peak RSS is the
 * process's high-water mark after the row (rows run from small to large), and the request array
 * dominates it (sizeof(lh_request) bytes a line). Timings are the best of 3 runs. This is a
 * benchmark, not a test: it checks only that every line became a request.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "jobs/batch.h"
#include "util/buf.h"
#include "util/fs.h"

typedef enum { TINY, MALFORMED, DUPLICATE, KINDS } kind;
static const char *const kind_name[KINDS] = {"tiny valid", "malformed", "same custom_id"};

static lh_status make_batch(kind k, long n, lh_buf *b) {
  lh_buf_clear(b);
  for (long i = 0; i < n; i++) {
    lh_status st;
    if (k == TINY)
      st = lh_buf_printf(b, "{\"custom_id\":\"req-%ld\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
                            "\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi %ld\"}],\"max_tokens\":1}}\n",
                         i, i);
    else if (k == MALFORMED)
      st = lh_buf_printf(b, "{\"custom_id\":\"req-%ld\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[\n", i);
    else
      st = lh_buf_printf(b, "{\"custom_id\":\"same\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
                            "\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"hi %ld\"}],\"max_tokens\":1}}\n",
                         i);
    if (st != LH_OK) return st;
  }
  return LH_OK;
}

static double peer_seconds(const lh_buf *b) {
  double t0 = lh_now();
  for (size_t at = 0; at < b->len;) {
    const char *line = b->data + at;
    const char *nl = memchr(line, '\n', b->len - at);
    size_t n = nl ? (size_t)(nl - line) : b->len - at;
    cJSON_Delete(cJSON_ParseWithLength(line, n));
    at += n + 1;
  }
  return lh_now() - t0;
}

static double peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;
}

int main(int argc, char **argv) {
  long max = 1000000;
  const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atol(argv[++i]);
    else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--max LINES] [--dir DIR]\n", argv[0]);
      return 2;
    }
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_batch-%d.jsonl", dir, (int)getpid());
  printf("bench_batch: lh_batch_load (read + SHA-256 + parse + duplicate check) vs cJSON alone; best of 3\n");
  printf("sizeof(lh_request) = %zu bytes\n\n", sizeof(lh_request));
  printf("%-15s %9s %8s %9s %12s %8s %12s %6s %10s\n", "kind", "lines", "MB", "ours s", "ours lines/s", "MB/s",
         "peer lines/s", "ratio", "peak RSS");
  lh_buf b = {0};
  int rc = 0;
  for (long n = 10000; n <= max; n *= 10) {
    for (int k = 0; k < KINDS; k++) {
      if (make_batch((kind)k, n, &b) != LH_OK) {
        fprintf(stderr, "out of memory making %ld lines\n", n);
        return 1;
      }
      lh_error err;
      if (lh_file_write_atomic(path, b.data, b.len, &err) != LH_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
      }
      double best = 1e30, peer = 1e30;
      for (int rep = 0; rep < 3; rep++) {
        lh_batch bt;
        double t0 = lh_now();
        lh_status st = lh_batch_load(path, &bt, &err);
        double t = lh_now() - t0;
        if (st != LH_OK || bt.n != n) {
          fprintf(stderr, "%s: %s (%d of %ld requests)\n", kind_name[k], st != LH_OK ? err.msg : "wrong count",
                  bt.n, n);
          rc = 1;
        }
        lh_batch_free(&bt);
        if (t < best) best = t;
        double p = peer_seconds(&b);
        if (p < peer) peer = p;
      }
      printf("%-15s %9ld %8.1f %9.3f %12.0f %8.1f %12.0f %6.2f %7.0f MiB\n", kind_name[k], n, (double)b.len / 1e6, best,
             (double)n / best, (double)b.len / 1e6 / best, (double)n / peer, best / peer, peak_rss_mib());
      fflush(stdout);
    }
  }
  unlink(path);
  lh_buf_free(&b);
  return rc;
}
