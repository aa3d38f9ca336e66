/* bench_model_digest.c — how fast lh_model_open reads every byte of a model's weight files.
 *
 *     bench_model_digest [--file F.safetensors | --make-gib N] [--threads T] [--model DIR] [--runs K]
 *
 * Hash rate: the file digest and finiteness scan of lh_st_digest (engine/safetensors.h) over one
 * safetensors file, with 1..T threads (T defaults to the online cores), against the peer: one
 * SHA-256 stream over the same bytes (what `sha256sum` computes), on one core. The limit is the
 * peer's rate times the thread count (SHA-256 does not parallelise within a stream; the leaves
 * do). --make-gib writes a BF16 file of N GiB of random finite values under $TMPDIR first (and
 * removes it at the end). Every pass runs on a file already in the page cache (one untimed pass
 * first), so the numbers are the CPU's, not the disk's.
 *
 * Open time: --model DIR times lh_model_open with backend "none" (config, index, weight views,
 * digest, id), the median of K runs (default 9).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/safetensors.h"
#include "util/fs.h"
#include "util/half.h"
#include "util/hash.h"

static int dcmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int make_file(const char *path, double gib) {
  uint64_t n = (uint64_t)(gib * (double)(1ull << 30)) / 2;
  char hdr[256];
  int hl = snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[%llu],\"data_offsets\":[0,%llu]}}",
                    (unsigned long long)n, (unsigned long long)(2 * n));
  while (hl % 8) hdr[hl++] = ' ';
  FILE *f = fopen(path, "wb");
  if (!f) return perror(path), 1;
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  fwrite(len, 1, 8, f);
  fwrite(hdr, 1, (size_t)hl, f);
  enum { CH = 1 << 20 };
  uint16_t *buf = malloc(sizeof *buf * CH);
  uint64_t s = 88172645463325252ull;
  for (uint64_t done = 0; done < n;) {
    size_t k = n - done < CH ? (size_t)(n - done) : CH;
    for (size_t i = 0; i < k; i++) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      buf[i] = lh_f32_to_bf16(((float)(s % 20001) - 10000.0f) / 10000.0f);
    }
    if (fwrite(buf, 2, k, f) != k) return perror(path), fclose(f), free(buf), 1;
    done += k;
  }
  free(buf);
  return fclose(f) ? (perror(path), 1) : 0;
}

static int hash_rate(const char *path, int max_threads) {
  lh_error err;
  lh_st_set *s = lh_st_new();
  if (lh_st_add_file(s, path, &err) || lh_st_finish(s, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    lh_st_close(s);
    return 1;
  }
  double gb = (double)s->maps[0].size / 1e9;
  uint8_t d[32];
  lh_sha256_buf(s->maps[0].base, s->maps[0].size, d); /* untimed: into the page cache */
  double t0 = lh_now();
  lh_sha256_buf(s->maps[0].base, s->maps[0].size, d);
  double peer = gb / (lh_now() - t0);
  printf("file %s: %.2f GB\n", path, gb);
  printf("%-8s %-26s %-26s %-8s %s\n", "threads", "ours (digest+scan) GB/s", "peer (one SHA-256) GB/s", "ratio",
         "limit GB/s");
  for (int t = 1; t <= max_threads; t++) {
    double best = 0;
    for (int r = 0; r < 3; r++) {
      t0 = lh_now();
      if (lh_st_digest(s, t, LH_ST_DIGEST_LEAF, NULL, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        lh_st_close(s);
        return 1;
      }
      double rate = gb / (lh_now() - t0);
      if (rate > best) best = rate;
    }
    printf("%-8d %-26.2f %-26.2f %-8.2f %.2f\n", t, best, peer, best / peer, peer * t);
  }
  lh_st_close(s);
  return 0;
}

static int open_time(const char *dir, int runs) {
  double *t = calloc((size_t)runs, sizeof *t);
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  for (int r = 0; r < runs; r++) {
    lh_model *m;
    lh_error err;
    double t0 = lh_now();
    if (lh_model_open(dir, &p, &m, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      free(t);
      return 1;
    }
    t[r] = lh_now() - t0;
    lh_model_close(m);
  }
  qsort(t, (size_t)runs, sizeof *t, dcmp);
  printf("open %s (backend none, %d runs): median %.1f ms, min %.1f ms\n", dir, runs, 1e3 * t[runs / 2], 1e3 * t[0]);
  free(t);
  return 0;
}

int main(int argc, char **argv) {
  const char *file = NULL, *model = NULL;
  double gib = 0;
  int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), runs = 9;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--file") && i + 1 < argc) file = argv[++i];
    else if (!strcmp(argv[i], "--make-gib") && i + 1 < argc) gib = atof(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
    else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--file F.safetensors | --make-gib N] [--threads T] [--model DIR] [--runs K]\n",
              argv[0]);
      return 2;
    }
  }
  if (threads < 1) threads = 1;
  if (runs < 1) runs = 1;
  int rc = 0;
  char made[4096] = "";
  if (!file && gib > 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(made, sizeof made, "%s/bench_model_digest.%d.safetensors", tmp ? tmp : "/tmp", (int)getpid());
    if (make_file(made, gib)) return 1;
    file = made;
  }
  if (file) rc |= hash_rate(file, threads);
  if (model) rc |= open_time(model, runs);
  if (made[0]) unlink(made);
  if (!file && !model) fprintf(stderr, "nothing to do: give --file, --make-gib or --model\n");
  return rc;
}
