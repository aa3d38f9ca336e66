/* bench_tokenizer.c — encode throughput of longhaul's tokenizer next to HF tokenizers.
 *
 * Two corpora of --mb MB (default 50) are built once from text on this machine (kept in
 * build/bench/tokenizer/): "code" from C headers and Python sources (/usr/include, the Python
 * standard library), "prose" from documentation (/usr/share/doc, gzip'd files included, and
 * /usr/share/common-licenses). Each is encoded as one document: by longhaul on one thread and on
 * --threads threads (best of three rounds each; each round also runs two controls, independent
 * parts with no stitching, split evenly and taken dynamically, and reports its own ratios, since
 * other load on the machine changes between rounds), and by HF tokenizers on one thread through
 * bench/tokenizer/hf_peer.py (one encode() call and 64 KB pieces through encode_batch; the faster
 * counts), when a Python with tokenizers is found (.venv, /work/pyenv, python3). The table shows
 * MB/s, the ratios and the goals (>= 2x HF single-threaded, threads >= 1.8x one thread on 2 cores)
 * and whether longhaul's ids equal HF's. Run it from build/ (the corpora go to
 * ./bench/tokenizer/corpus). Measured numbers: bench/ingest/NOTES.md.
 *
 * usage: bench_tokenizer [--tokenizer FILE] [--mb N] [--threads N] [--no-peer] [--corpus DIR]
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700
#include <archive.h>
#include <archive_entry.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tokenizer/tokenizer_int.h" /* tk_encode_parallel_stats: per-thread CPU time */
#include "util/fs.h"
#include "util/hash.h"

static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------------ corpora */

static char **g_paths;
static size_t g_npaths, g_cap;
static int g_kind; /* 0 code, 1 prose */

static int has_suffix(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcmp(s + a - b, suf);
}

static int collect(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)ftw;
  if (type != FTW_F || !S_ISREG(st->st_mode) || st->st_size == 0 || st->st_size > (16 << 20)) return 0;
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  int want;
  if (g_kind == 0) {
    want = has_suffix(path, ".h") || has_suffix(path, ".c") || has_suffix(path, ".py");
  } else {
    want = !strcmp(base, "copyright") || !strncmp(base, "README", 6) || !strncmp(base, "NEWS", 4) ||
           !strncmp(base, "changelog", 9) || has_suffix(path, ".txt") || has_suffix(path, ".md") ||
           strstr(path, "common-licenses") != NULL;
    want = want && !has_suffix(path, ".html") && !has_suffix(path, ".png");
  }
  if (!want) return 0;
  if (g_npaths == g_cap) {
    g_cap = g_cap ? g_cap * 2 : 1024;
    g_paths = realloc(g_paths, g_cap * sizeof *g_paths);
  }
  g_paths[g_npaths++] = strdup(path);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A file's text: gzip'd files decompressed; binary files (with NUL bytes) skipped. */
static int read_text(const char *path, lh_buf *out) {
  size_t before = out->len;
  if (has_suffix(path, ".gz")) {
    struct archive *a = archive_read_new();
    archive_read_support_filter_all(a);
    archive_read_support_format_raw(a);
    struct archive_entry *e;
    int ok = archive_read_open_filename(a, path, 1 << 16) == ARCHIVE_OK && archive_read_next_header(a, &e) == ARCHIVE_OK;
    char buf[1 << 16];
    la_ssize_t n;
    while (ok && (n = archive_read_data(a, buf, sizeof buf)) > 0) lh_buf_append(out, buf, (size_t)n);
    archive_read_free(a);
  } else {
    lh_error err = {0};
    lh_file_read(path, 16 << 20, out, &err);
  }
  if (out->len > before && memchr(out->data + before, 0, out->len - before)) {
    out->len = before;
    return 0;
  }
  return out->len > before;
}

static int build_corpus(int kind, size_t want, const char *file) {
  static const char *const code_dirs[] = {"/usr/include", "/usr/lib/python3", "/usr/lib/python3.11",
                                          "/usr/local/lib/python3.11", NULL};
  static const char *const prose_dirs[] = {"/usr/share/doc", "/usr/share/common-licenses", NULL};
  g_kind = kind;
  g_npaths = 0;
  for (const char *const *d = kind ? prose_dirs : code_dirs; *d; d++)
    if (lh_is_dir(*d)) nftw(*d, collect, 32, FTW_PHYS);
  if (!g_npaths) return -1;
  qsort(g_paths, g_npaths, sizeof *g_paths, cmp_str);
  lh_buf b = {0};
  for (int round = 0; b.len < want && round < 64; round++) /* repeat when the machine has too little */
    for (size_t i = 0; i < g_npaths && b.len < want; i++) read_text(g_paths[i], &b);
  for (size_t i = 0; i < g_npaths; i++) free(g_paths[i]);
  if (b.len > want) b.len = want;
  lh_error err = {0};
  int rc = lh_file_write_atomic(file, b.data, b.len, &err) ? -1 : 0;
  if (rc) fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
  lh_buf_free(&b);
  return rc;
}

/* ------------------------------------------------------------------------------ the peer */

static const char *find_python(void) {
  static char py[4200];
  const char *cands[] = {LH_SOURCE_DIR "/.venv/bin/python", "/work/pyenv/bin/python", "python3", NULL};
  for (int i = 0; cands[i]; i++) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "'%s' -c 'import tokenizers' >/dev/null 2>&1", cands[i]);
    if (system(cmd) == 0) {
      snprintf(py, sizeof py, "%s", cands[i]);
      return py;
    }
  }
  return NULL;
}

typedef struct peer {
  int ok;
  double single_s, batch_s;
  char sha[65];
  char version[32];
} peer;

static peer run_peer(const char *py, const char *tok, const char *file) {
  peer p = {0};
  char cmd[20000];
  snprintf(cmd, sizeof cmd, "'%s' '%s/bench/tokenizer/hf_peer.py' '%s' '%s'", py, LH_SOURCE_DIR, tok, file);
  FILE *f = popen(cmd, "r");
  if (!f) return p;
  char line[4096] = {0};
  if (fgets(line, sizeof line, f)) {
    const char *s;
    if ((s = strstr(line, "\"single_s\": "))) p.single_s = atof(s + 12);
    if ((s = strstr(line, "\"batch_s\": "))) p.batch_s = atof(s + 11);
    if ((s = strstr(line, "\"ids_sha256\": \""))) memcpy(p.sha, s + 15, 64);
    if ((s = strstr(line, "\"version\": \""))) sscanf(s + 12, "%31[^\"]", p.version);
    p.ok = p.single_s > 0 && p.batch_s > 0;
  }
  pclose(f);
  return p;
}

/* ------------------------------------------------------------------------------ control */

/* The machine's own parallel capacity right now: the same text cut into independent parts, each
 * encoded with no stitching. With parts == threads each thread gets one part (an even split by
 * bytes: per-byte costs differ, so this is also limited by the slowest part); with more parts,
 * the threads take the next part as they come free (what the machine allows). */
typedef struct ctl_pool {
  const lh_tokenizer *t;
  const lh_buf *doc;
  int parts, next;
  pthread_mutex_t mu;
} ctl_pool;

static void *ctl_main(void *arg) {
  ctl_pool *p = arg;
  lh_i32vec v = {0};
  lh_error err = {0};
  size_t part = p->doc->len / (size_t)p->parts;
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int k = p->next++;
    pthread_mutex_unlock(&p->mu);
    if (k >= p->parts) break;
    size_t a = part * (size_t)k, b = k + 1 < p->parts ? part * (size_t)(k + 1) : p->doc->len;
    while (a < p->doc->len && (p->doc->data[a] & 0xC0) == 0x80) a++;
    while (b < p->doc->len && (p->doc->data[b] & 0xC0) == 0x80) b++;
    v.len = 0;
    lh_tokenizer_encode(p->t, p->doc->data + a, b - a, 0, &v, &err);
  }
  lh_i32vec_free(&v);
  return NULL;
}

static double control_run(const lh_tokenizer *t, const lh_buf *doc, int threads, int parts) {
  pthread_t tid[64];
  if (threads > 64) threads = 64;
  ctl_pool p = {.t = t, .doc = doc, .parts = parts};
  pthread_mutex_init(&p.mu, NULL);
  double w0 = lh_now();
  for (int k = 0; k < threads; k++) pthread_create(&tid[k], NULL, ctl_main, &p);
  for (int k = 0; k < threads; k++) pthread_join(tid[k], NULL);
  pthread_mutex_destroy(&p.mu);
  return lh_now() - w0;
}

/* ------------------------------------------------------------------------------ main */

static double median3(const double *v) {
  double a = v[0], b = v[1], c = v[2];
  return a > b ? (b > c ? b : a > c ? c : a) : (a > c ? a : b > c ? c : b);
}

static void sha_ids(const lh_i32vec *v, char out[65]) {
  uint8_t d[32];
  lh_sha256_buf(v->data, v->len * sizeof *v->data, d); /* little-endian int32, as the peer */
  lh_hex(d, 32, out);
}

int main(int argc, char **argv) {
  const char *tokpath = NULL, *corpus_dir = NULL;
  int mb = 50, threads = 2, peer_on = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
      tokpath = argv[++i];
    else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
      mb = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--corpus") && i + 1 < argc)
      corpus_dir = argv[++i];
    else if (!strcmp(argv[i], "--no-peer"))
      peer_on = 0;
    else {
      fprintf(stderr, "usage: bench_tokenizer [--tokenizer FILE] [--mb N] [--threads N] [--no-peer] [--corpus DIR]\n");
      return 2;
    }
  }
  if (mb < 1) mb = 1;
  static char deftok[4200];
  if (!tokpath) {
    snprintf(deftok, sizeof deftok, "%s/tests/fixtures/tokenizer/realworld/minimax-text-01-style.tokenizer.json",
             LH_SOURCE_DIR);
    if (!lh_is_file(deftok)) snprintf(deftok, sizeof deftok, "%s/tests/fixtures/tokenizer/minimax.tokenizer.json", LH_SOURCE_DIR);
    tokpath = deftok;
  }
  char dir[4200];
  snprintf(dir, sizeof dir, "%s", corpus_dir ? corpus_dir : "bench/tokenizer/corpus");
  lh_error err = {0};
  if (lh_mkdir_p(dir, &err)) {
    fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
    return 1;
  }
  lh_tokenizer *t = NULL;
  double t0 = lh_now();
  if (lh_tokenizer_open(tokpath, &t, &err)) {
    fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
    return 1;
  }
  double open_s = lh_now() - t0;
  const char *py = peer_on ? find_python() : NULL;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  double load = 0;
  FILE *lf = fopen("/proc/loadavg", "r");
  if (lf) {
    if (fscanf(lf, "%lf", &load) != 1) load = 0;
    fclose(lf);
  }
  printf("bench_tokenizer: %s (opened in %.2f s), %d MB per corpus, %ld CPUs, load average %.2f\n", tokpath, open_s,
         mb, ncpu, load);
  printf("peer: %s\n", py ? py : "none found (no Python with tokenizers): peer columns empty");
  printf("\n%-6s %6s | %9s %9s %7s %5s | %9s %7s %5s | %s\n", "corpus", "MB", "ours 1T", "HF 1T", "ratio", "goal",
         "ours " "NT", "NT/1T", "goal", "ids");
  const char *names[] = {"code", "prose"};
  int fail = 0;
  for (int k = 0; k < 2; k++) {
    char file[4400];
    snprintf(file, sizeof file, "%s/%s-%dMB.txt", dir, names[k], mb);
    if (!lh_is_file(file) && build_corpus(k, (size_t)mb << 20, file)) {
      printf("%-6s: no text found to build the corpus\n", names[k]);
      continue;
    }
    lh_buf doc = {0};
    if (lh_file_read(file, (size_t)4 << 30, &doc, &err)) {
      fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
      return 1;
    }
    double best1 = 1e30, bestn = 1e30, cpu1 = 0, bestcpu1 = 1e30, crit = 1e30;
    int used = 1;
    lh_i32vec ids1 = {0}, idsn = {0};
    /* each round runs one thread, N threads and both controls back to back, so that a round's
     * ratios see the same machine (other load comes and goes between rounds) */
    double ctl = 1e30, ctl_dyn = 1e30, r_nt[3], r_ctl[3], r_dyn[3];
    for (int rep = 0; rep < 3; rep++) {
      ids1.len = 0;
      double c0 = cpu_now(), w0 = lh_now();
      lh_tokenizer_encode(t, doc.data, doc.len, 0, &ids1, &err);
      double w = lh_now() - w0, cw = cpu_now() - c0, w1 = w;
      if (w < best1) best1 = w, cpu1 = cw;
      if (cw < bestcpu1) bestcpu1 = cw;
      idsn.len = 0;
      w0 = lh_now();
      tk_par_stats ps;
      tk_encode_parallel_stats(t, doc.data, doc.len, threads, TK_PAR_OVERLAP, &idsn, &ps, &err);
      w = lh_now() - w0;
      if (w < bestn) bestn = w;
      double mx = 0;
      for (int q = 0; q < ps.used && q < 64; q++) mx = ps.thread_cpu[q] > mx ? ps.thread_cpu[q] : mx;
      if (ps.used > 1 && mx + ps.stitch_wall < crit) crit = mx + ps.stitch_wall;
      used = ps.used;
      double c = control_run(t, &doc, threads, threads), cd = control_run(t, &doc, threads, 16 * threads);
      if (c < ctl) ctl = c;
      if (cd < ctl_dyn) ctl_dyn = cd;
      r_nt[rep] = w1 / w;
      r_ctl[rep] = w1 / c;
      r_dyn[rep] = w1 / cd;
    }
    int same_threads = ids1.len == idsn.len && !memcmp(ids1.data, idsn.data, ids1.len * sizeof *ids1.data);
    double mbs = (double)doc.len / 1e6;
    peer p = {0};
    if (py) p = run_peer(py, tokpath, file);
    char sha[65];
    sha_ids(&ids1, sha);
    double hf_best = p.ok ? (p.single_s < p.batch_s ? p.single_s : p.batch_s) : 0;
    char hfcol[32] = "-", ratio[32] = "-", idscol[96];
    if (p.ok) {
      snprintf(hfcol, sizeof hfcol, "%.2f", mbs / hf_best);
      snprintf(ratio, sizeof ratio, "%.1fx", hf_best / best1);
    }
    snprintf(idscol, sizeof idscol, "%s%s", same_threads ? "threads=1T" : "THREADS DIFFER",
             p.ok ? (strcmp(sha, p.sha) ? ", HF DIFFERS" : ", =HF") : "");
    printf("%-6s %6.1f | %9.2f %9s %7s %5s | %9.2f %6.2fx %5s | %s\n", names[k], mbs, mbs / best1, hfcol, ratio,
           ">=2x", mbs / bestn, best1 / bestn, ">=1.8", idscol);
    printf("       longhaul 1T: %.2f s wall, %.2f CPU-s; %dT: %d threads used, longest thread + stitching %.2f CPU-s "
           "-> %.2fx on idle cores; %zu ids\n",
           best1, cpu1, threads, used, crit < 1e29 ? crit : 0, crit < 1e29 ? bestcpu1 / crit : 1.0, ids1.len);
    printf("       control, no stitching: %d independent parts on %d threads %.2fx (an even split); %d parts taken "
           "as threads come free %.2fx (what this machine allows now)\n",
           threads, threads, best1 / ctl, 16 * threads, best1 / ctl_dyn);
    printf("       per round (1T, %dT, controls back to back): %dT/1T %.2fx %.2fx %.2fx, median %.2fx; even-split control "
           "median %.2fx; dynamic control median %.2fx\n",
           threads, threads, r_nt[0], r_nt[1], r_nt[2], median3(r_nt), median3(r_ctl), median3(r_dyn));
    if (p.ok)
      printf("       HF %s: one encode() %.2f MB/s, 64 KB pieces via encode_batch %.2f MB/s\n", p.version,
             mbs / p.single_s, mbs / p.batch_s);
    fail |= !same_threads || (p.ok && strcmp(sha, p.sha));
    lh_i32vec_free(&ids1);
    lh_i32vec_free(&idsn);
    lh_buf_free(&doc);
  }
  printf("\nMB/s are 10^6 bytes of input per wall-clock second, best of 3 (HF: 1 run). 'NT' = %d threads.\n"
         "On a shared machine the wall-clock NT/1T varies with other load; \"on idle cores\" is the one-thread\n"
         "CPU time over the longest thread's CPU time plus the single-threaded stitching, which other load\n"
         "does not change.\n",
         threads);
  lh_tokenizer_close(t);
  return fail;
}
