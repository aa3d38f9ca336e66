/* bench_store.c — checkpoint throughput of the store against the disk it sits on.
 *
 *   bench_store [--dir DIR] [--quick] [--only ckpt|durability|stall|hash] [--cache MIB] [--repeat N]
 *
 * Sizes are the real ones: the MiniMax-Text-01 state (70 lightning layers x 64 heads x 128 x 128
 * fp32 = 280 MiB, 40 KiB of bf16 KV per token over 10 softmax layers, 200064 logits) and the 8-layer
 * real-width slice (7 lightning layers = 28 MiB, 4 KiB of KV per token), with chunks of 8192 tokens.
 * "Limit" is a raw sequential write (8 MiB write() calls, then fsync) of the same number of bytes to
 * a file in the same directory, measured in the same run, and a raw read of it with the page cache
 * dropped for that file (posix_fadvise DONTNEED). Store reads are cold the same way. The stall
 * section simulates GPU prefill of the slice at a given rate with a sleep per chunk (the host CPU is
 * idle while a GPU computes) and checkpoints every chunk through the async writer.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store.h"
#include "util/fs.h"
#include "util/hash.h"

#define MODEL "b000000000000000000000000000000000000000000000000000000000000e5c"
#define MIB (1024.0 * 1024.0)

static char DIR_[1200] = "/tmp";
static int QUICK = 0;
static int CACHE_MIB = 0; /* 0: the store's default */
static int REPEAT = 3;    /* measurements are medians of this many, store and raw interleaved */

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct shape {
  const char *name;
  lh_state_layout lay;
  int64_t chunk;
} shape;

static shape slice_shape(void) {
  shape s = {"slice (7 lightning + 1 softmax)", {0}, 8192};
  s.lay.n_lightning = 7;
  s.lay.lightning_bytes = (size_t)64 * 128 * 128 * 4;
  s.lay.n_softmax = 1;
  s.lay.kv_dtype = LH_BF16;
  s.lay.kv_row_bytes = 2 * 8 * 128 * 2;
  s.lay.vocab_size = 200064;
  return s;
}

static shape text01_shape(void) {
  shape s = slice_shape();
  s.name = "MiniMax-Text-01 (70 + 10)";
  s.lay.n_lightning = 70;
  s.lay.n_softmax = 10;
  return s;
}

static size_t ckpt_bytes(const shape *s) {
  return (size_t)s->lay.n_lightning * s->lay.lightning_bytes + (size_t)s->lay.n_softmax * (size_t)s->chunk * s->lay.kv_row_bytes +
         (size_t)s->lay.vocab_size * 4;
}

static void fill_random(void *p, size_t n, uint64_t seed) {
  uint64_t *q = p, x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (size_t i = 0; i < n / 8; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    q[i] = x;
  }
}

static void drop_cache(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
}

static void rm_db(const char *path) {
  char p[1400];
  unlink(path);
  snprintf(p, sizeof p, "%s-journal", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-wal", path);
  unlink(p);
  snprintf(p, sizeof p, "%s-shm", path);
  unlink(p);
}

static int64_t fsize(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

/* Raw sequential write (+ fsync) and cold read of n bytes: the limit. */
static void raw_limit(size_t n, double *w_gbs, double *r_gbs) {
  char path[1300];
  snprintf(path, sizeof path, "%.1100s/bench_store_raw.bin", DIR_);
  size_t blk = (size_t)8 << 20;
  char *buf = malloc(blk);
  fill_random(buf, blk, 1);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  double t0 = lh_now();
  for (size_t off = 0; off < n; off += blk) {
    size_t k = n - off < blk ? n - off : blk;
    if (write(fd, buf, k) != (ssize_t)k) {
      perror("raw write");
      exit(1);
    }
  }
  fsync(fd);
  double dt = lh_now() - t0;
  close(fd);
  *w_gbs = (double)n / dt / 1e9;
  drop_cache(path);
  fd = open(path, O_RDONLY);
  t0 = lh_now();
  while (read(fd, buf, blk) > 0) {
  }
  *r_gbs = (double)n / (lh_now() - t0) / 1e9;
  close(fd);
  unlink(path);
  free(buf);
}

static lh_store *open_store(const char *path, const char *jm, const char *sync, int page_size) {
  lh_store_params sp = lh_store_default_params();
  sp.journal_mode = jm;
  sp.synchronous = sync;
  sp.db_page_size = page_size;
  sp.heartbeat = 0;
  if (CACHE_MIB) sp.cache_mib = CACHE_MIB;
  lh_store *s;
  lh_error e;
  if (lh_store_open(path, &sp, &s, &e)) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    exit(1);
  }
  return s;
}

/* Write k checkpoints of shape sh in one chain, synchronously. Returns payload GB/s. */
static double write_chain(lh_store *s, const shape *sh, int k, uint64_t seed, lh_store_cursor *cur) {
  lh_store_ckpt *ck;
  lh_error e;
  int32_t *tok = malloc((size_t)sh->chunk * 4);
  size_t bytes = 0;
  double t = 0;
  for (int i = 0; i < k; i++) {
    for (int64_t j = 0; j < sh->chunk; j++) tok[j] = (int32_t)((seed * 7919 + (uint64_t)i * 131 + (uint64_t)j) % 200000);
    lh_store_cursor_feed(cur, tok, sh->chunk);
    if (lh_store_ckpt_new(&sh->lay, cur, &ck, &e)) {
      fprintf(stderr, "bench_store: %s\n", e.msg);
      exit(1);
    }
    fill_random(lh_store_ckpt_lightning(ck, 0), lh_store_ckpt_bytes(ck), seed + (uint64_t)i);
    double t0 = lh_now();
    if (lh_store_ckpt_write(s, ck, NULL, &e)) {
      fprintf(stderr, "bench_store: %s\n", e.msg);
      exit(1);
    }
    t += lh_now() - t0;
    bytes += lh_store_ckpt_bytes(ck);
    lh_store_cursor_checkpointed(cur);
    lh_store_ckpt_free(ck);
  }
  free(tok);
  return (double)bytes / t / 1e9;
}

static lh_status count_cb(void *user, lh_store_part part, int layer, int64_t t0, int64_t t1, const void *data,
                          size_t nbytes, lh_error *err) {
  (void)part, (void)layer, (void)t0, (void)t1, (void)err;
  size_t *n = user;
  *n += nbytes;
  /* touch the bytes as an import would */
  volatile const char *p = data;
  (void)p[nbytes - 1];
  return LH_OK;
}

/* Load the chain ending at the cursor's last checkpoint; returns GB/s, bytes in *n. */
static double read_chain(lh_store *s, const char *path, lh_store_cursor *cur, int cold, size_t *n) {
  int64_t id;
  lh_error e;
  if (lh_store_ckpt_find(s, MODEL, cur->parent_hash, &id, &e)) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    exit(1);
  }
  if (cold) drop_cache(path);
  *n = 0;
  double t0 = lh_now();
  if (lh_store_ckpt_load(s, id, count_cb, n, &e)) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    exit(1);
  }
  return (double)*n / (lh_now() - t0) / 1e9;
}

static void section_ckpt(void) {
  printf("\n## checkpoint throughput (journal truncate, synchronous full, 64 KiB pages, 8 MiB blob pages; medians of "
         "%d, each next to a raw run)\n\n", REPEAT);
  printf("| case | per checkpoint | chain | write GB/s | raw write+fsync GB/s (limit) | ratio | cold read GB/s | "
         "raw cold read GB/s (limit) | ratio | warm read GB/s |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|\n");
  shape shapes[2] = {slice_shape(), text01_shape()};
  int counts[2] = {QUICK ? 3 : 8, QUICK ? 1 : 3};
  for (int i = 0; i < 2; i++) {
    shape *sh = &shapes[i];
    double w[16], lw[16], rc[16], lr[16], rw[16], wr[16], rr[16];
    for (int r = 0; r < REPEAT; r++) {
      char path[1300];
      snprintf(path, sizeof path, "%.1100s/bench_store_ckpt.db", DIR_);
      rm_db(path);
      lh_store *s = open_store(path, NULL, NULL, 0);
      lh_store_cursor cur;
      lh_store_cursor_init(&cur, MODEL, 0);
      w[r] = write_chain(s, sh, counts[i], 100 + (uint64_t)i, &cur);
      size_t n;
      rc[r] = read_chain(s, path, &cur, 1, &n);
      rw[r] = read_chain(s, path, &cur, 0, &n);
      lh_store_close(s);
      rm_db(path);
      raw_limit(ckpt_bytes(sh) * (size_t)counts[i], &lw[r], &lr[r]);
      wr[r] = w[r] / lw[r];
      rr[r] = rc[r] / lr[r];
    }
    printf("| %s | %.0f MiB | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", sh->name,
           (double)ckpt_bytes(sh) / MIB, counts[i], median(w, REPEAT), median(lw, REPEAT), median(wr, REPEAT),
           median(rc, REPEAT), median(lr, REPEAT), median(rr, REPEAT), median(rw, REPEAT));
    fflush(stdout);
  }
}

static void section_durability(void) {
  shape sh = slice_shape();
  printf("\n## durability settings (chains of slice checkpoints, %.0f MiB each; 'after gc' rewrites into freed "
         "pages; medians of %d)\n\n",
         (double)ckpt_bytes(&sh) / MIB, REPEAT);
  printf("| journal | synchronous | page size | write GB/s | ratio to raw | after gc GB/s | file / payload | "
         "raw GB/s (limit) |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  const char *jm[] = {"truncate", "wal"}, *sy[] = {"full", "normal"};
  int ps[] = {65536, 4096};
  int k = QUICK ? 2 : 3;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int c = 0; c < 2; c++) {
        double w[16], w2[16], lw[16], lr, ratio[16], over = 0;
        for (int r = 0; r < REPEAT; r++) {
          char path[1300], wal[1400];
          snprintf(path, sizeof path, "%.1100s/bench_store_dur.db", DIR_);
          snprintf(wal, sizeof wal, "%s-wal", path);
          rm_db(path);
          lh_store *s = open_store(path, jm[a], sy[b], ps[c]);
          lh_store_cursor cur;
          lh_store_cursor_init(&cur, MODEL, 0);
          w[r] = write_chain(s, &sh, k, 7, &cur);
          over = (double)(fsize(path) + fsize(wal)) / ((double)ckpt_bytes(&sh) * k);
          lh_store_gc_params gp = lh_store_gc_default_params();
          gp.max_bytes = 0;
          gp.vacuum = 0;
          lh_store_gc_report gr;
          lh_error e;
          if (lh_store_gc(s, &gp, &gr, &e)) {
            fprintf(stderr, "bench_store: %s\n", e.msg);
            exit(1);
          }
          lh_store_cursor_init(&cur, MODEL, 0);
          w2[r] = write_chain(s, &sh, k, 8, &cur);
          lh_store_close(s);
          rm_db(path);
          raw_limit(ckpt_bytes(&sh) * (size_t)k, &lw[r], &lr);
          ratio[r] = w[r] / lw[r];
        }
        printf("| %s | %s | %d | %.2f | %.2f | %.2f | %.3f | %.2f |\n", jm[a], sy[b], ps[c], median(w, REPEAT),
               median(ratio, REPEAT), median(w2, REPEAT), over, median(lw, REPEAT));
        fflush(stdout);
      }
}

/* Prefill-like producer: sleep chunk/rate seconds per chunk ("GPU busy"), then export the state
 * (a memcpy from a "device" copy) into a writer buffer and submit. */
static void stall_run(const shape *sh, double rate, int chunks, int async, int pending) {
  char path[1300];
  snprintf(path, sizeof path, "%.1100s/bench_store_stall.db", DIR_);
  rm_db(path);
  lh_error e;
  lh_store *s = open_store(path, NULL, NULL, 0);
  lh_store_writer *w = NULL;
  if (async) {
    lh_store_writer_params wp = lh_store_writer_default_params();
    wp.max_pending = pending;
    if (lh_store_writer_open(path, &wp, &w, &e)) {
      fprintf(stderr, "bench_store: %s\n", e.msg);
      exit(1);
    }
  }
  size_t n = ckpt_bytes(sh);
  char *device = malloc(n);
  fill_random(device, n, 3);
  int32_t *tok = malloc((size_t)sh->chunk * 4);
  lh_store_cursor cur;
  lh_store_cursor_init(&cur, MODEL, 0);
  double per = (double)sh->chunk / rate, stall = 0, worst = 0;
  double t0 = lh_now();
  for (int c = 0; c < chunks; c++) {
    struct timespec ts = {(time_t)per, (long)((per - (double)(time_t)per) * 1e9)};
    nanosleep(&ts, NULL);
    for (int64_t j = 0; j < sh->chunk; j++) tok[j] = (int32_t)(((uint64_t)c * 977 + (uint64_t)j) % 200000);
    lh_store_cursor_feed(&cur, tok, sh->chunk);
    double a = lh_now();
    lh_store_ckpt *ck;
    lh_status st;
    if (w) {
      st = lh_store_writer_begin(w, &sh->lay, &cur, &ck, &e);
      if (!st) {
        memcpy(lh_store_ckpt_lightning(ck, 0), device, n);
        st = lh_store_writer_submit(w, ck, &cur, &e);
      }
    } else {
      st = lh_store_ckpt_new(&sh->lay, &cur, &ck, &e);
      if (!st) {
        memcpy(lh_store_ckpt_lightning(ck, 0), device, n);
        st = lh_store_ckpt_write(s, ck, NULL, &e);
        lh_store_ckpt_free(ck);
        lh_store_cursor_checkpointed(&cur);
      }
    }
    if (st) {
      fprintf(stderr, "bench_store: %s\n", e.msg);
      exit(1);
    }
    double d = lh_now() - a;
    stall += d;
    if (d > worst) worst = d;
  }
  double loop = lh_now() - t0;
  double f0 = lh_now();
  if (w && lh_store_writer_close(w, &e)) {
    fprintf(stderr, "bench_store: %s\n", e.msg);
    exit(1);
  }
  double tail = lh_now() - f0, wall = loop + tail, compute = per * chunks;
  /* A 1M-token prompt pays the loop overhead on every chunk and the final flush once. */
  double at1m = 100 * ((loop - compute) / compute + tail / (1e6 / rate));
  printf("| %s | %s%s | %lld | %.0f | %.1f | %d | %.2f | %.2f | %.1f %% | %.2f | %.1f %% | %.1f %% | %.1f | %.1f | %.0f |\n",
         sh->name, async ? "async" : "sync", async ? (pending == 2 ? " (2)" : " (3)") : "", (long long)sh->chunk,
         rate / 1000, (double)n / MIB, chunks, compute, loop, 100 * (loop - compute) / compute, tail,
         100 * (wall - compute) / compute, at1m, 1000 * stall / chunks, 1000 * worst, (double)n * chunks / (wall * 1e6));
  fflush(stdout);
  free(device);
  free(tok);
  lh_store_close(s);
  rm_db(path);
}

static void section_stall(void) {
  printf("\n## checkpoint every chunk during a simulated prefill (sleep = GPU compute; stall = producer time in "
         "begin + export (a host memcpy here) + submit)\n\n");
  printf("| state | writer | chunk | ktok/s | MiB/ckpt | chunks | compute s | prefill loop s | loop overhead | final "
         "flush s | total overhead | same at 1M tokens | mean stall ms | worst stall ms | written MB/s |\n");
  printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  shape sh = slice_shape();
  int chunks = QUICK ? 4 : 16;
  stall_run(&sh, 20000, chunks, 0, 0);
  stall_run(&sh, 20000, chunks, 1, 2);
  stall_run(&sh, 20000, chunks, 1, 3);
  sh.chunk = 4096;
  stall_run(&sh, 20000, chunks, 1, 2);
  sh.chunk = 16384;
  stall_run(&sh, 20000, chunks / 2, 1, 2);
}

static void section_hash(void) {
  size_t n = (size_t)256 << 20;
  char *buf = malloc(n);
  fill_random(buf, n, 9);
  double t0 = lh_now();
  volatile uint32_t c = lh_crc32c(0, buf, n);
  double crc = (double)n / (lh_now() - t0) / 1e9;
  uint8_t d[32];
  size_t m = (size_t)64 << 20;
  t0 = lh_now();
  lh_sha256_buf(buf, m, d);
  double sha = (double)m / (lh_now() - t0) / 1e9;
  t0 = lh_now();
  memcpy(buf + n / 2, buf, n / 2);
  double cp = (double)(n / 2) / (lh_now() - t0) / 1e9;
  (void)c;
  printf("\n## checksums (one core)\n\n| what | GB/s |\n|---|---|\n| CRC-32C (util/hash.h) | %.2f |\n"
         "| SHA-256 (util/hash.h) | %.2f |\n| memcpy | %.2f |\n",
         crc, sha, cp);
  free(buf);
}

int main(int argc, char **argv) {
  const char *only = NULL;
  const char *tmp = getenv("TMPDIR");
  if (tmp) snprintf(DIR_, sizeof DIR_, "%.1000s", tmp);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dir") && i + 1 < argc) snprintf(DIR_, sizeof DIR_, "%.1000s", argv[++i]);
    else if (!strcmp(argv[i], "--quick")) QUICK = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--cache") && i + 1 < argc) CACHE_MIB = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
      REPEAT = atoi(argv[++i]);
      if (REPEAT < 1 || REPEAT > 16) REPEAT = 3;
    }
    else {
      fprintf(stderr, "usage: bench_store [--dir DIR] [--quick] [--only ckpt|durability|stall|hash] [--cache MIB] [--repeat N]\n");
      return 2;
    }
  }
  double load[3] = {0};
  FILE *la = fopen("/proc/loadavg", "r");
  if (la) {
    if (fscanf(la, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) load[0] = -1;
    fclose(la);
  }
  char base[1200];
  snprintf(base, sizeof base, "%.1000s/bench_store-XXXXXX", DIR_);
  if (!mkdtemp(base)) {
    perror(base);
    return 1;
  }
  memcpy(DIR_, base, strlen(base) + 1);
  printf("# bench_store in %s%s; %ld cores, load average %.2f at start\n", DIR_, QUICK ? " (quick)" : "",
         sysconf(_SC_NPROCESSORS_ONLN), load[0]);
  if (!only || !strcmp(only, "hash")) section_hash();
  if (!only || !strcmp(only, "ckpt")) section_ckpt();
  if (!only || !strcmp(only, "stall")) section_stall();
  if (!only || !strcmp(only, "durability")) section_durability();
  rmdir(DIR_);
  return 0;
}
