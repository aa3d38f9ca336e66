/* bench_attn_cpu — the CPU softmax attention tile (lh_attn_tile) next to its BLAS path and the
 * machine's limits.
 *
 * The shape is the embedded model's (models/haul-tiny: 8 query heads over 4 kv heads, pages of
 * LH_KV_PAGE_TOKENS keys) at head dims 32 (haul-tiny's), 64 and 128. For each context length N
 * (default 8K, 32K, 64K) it times one prefill chunk at the end of the context, --chunk queries
 * (default 2048, as `longhaul run --chunk 2048`) at positions [N - chunk, N) over the keys they
 * see, cut into the backend's tiles (LH_ATTN_ROWS / 2 queries x 2 heads) and run on a pool of
 * --threads threads (default 2), as engine/backend_cpu.c does; and one decode step (1 query of
 * each head at N - 1). Printed side by side, medians of --rounds rounds (default 3) that
 * alternate the two paths, since the machine may be shared:
 *   - ours: lh_attn_tile (the fused AVX2/FMA path where the CPU has it);
 *   - peer: lh_attn_tile_blas, the previous implementation (two cblas_sgemm per page and an exp
 *     pass), and the ratio;
 *   - limit: the FMA peak of --threads threads measured here (12 independent vfmadd chains per
 *     thread) and OpenBLAS sgemm 2048^3 with the same threads, and ours as a share of the peak;
 *   - where the CPU has AMX (attention_amx.c): lh_attn_tile_amx, the bf16 path, its speed-up over
 *     ours and its share of the AMX peak (6 independent TDPBF16PS per thread, measured here), and
 *     its largest difference from ours (bf16 products: ~1e-2 of max |out| expected).
 * GFLOP/s count 4 d FLOPs per (query, key, head) with key <= query: what the function needs.
 * Also printed: the largest difference between the two paths' outputs, relative to max |out|.
 */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "kernels/cpu/ops.h"
#include "util/fs.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* 12 independent chains (FMA latency 4 x 2 pipes needs 8), written out so that -O2 keeps them
 * in registers */
__attribute__((target("avx2,fma"))) static void fma_loop(int64_t n, float *out) {
  __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-3f);
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3);
  __m256 a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7);
  __m256 a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (int64_t k = 0; k < n; k++) {
    a0 = _mm256_fmadd_ps(a0, b, c), a1 = _mm256_fmadd_ps(a1, b, c), a2 = _mm256_fmadd_ps(a2, b, c);
    a3 = _mm256_fmadd_ps(a3, b, c), a4 = _mm256_fmadd_ps(a4, b, c), a5 = _mm256_fmadd_ps(a5, b, c);
    a6 = _mm256_fmadd_ps(a6, b, c), a7 = _mm256_fmadd_ps(a7, b, c), a8 = _mm256_fmadd_ps(a8, b, c);
    a9 = _mm256_fmadd_ps(a9, b, c), a10 = _mm256_fmadd_ps(a10, b, c), a11 = _mm256_fmadd_ps(a11, b, c);
  }
  a0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                     _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  a0 = _mm256_add_ps(a0, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  _mm256_storeu_ps(out, a0);
}
static int have_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#if (defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11)
#define HAVE_AMX_LOOP 1
/* n rounds of 6 independent TDPBF16PS (16 x 16 x 32 each, 16384 FLOPs): the AMX peak of a thread */
__attribute__((target("amx-tile,amx-bf16"))) static void amx_loop(int64_t n, float *out) {
  struct {
    uint8_t palette, start, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
  } cfg = {0};
  static uint16_t A[16 * 32] __attribute__((aligned(64)));
  float C[256] __attribute__((aligned(64)));
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  for (int i = 0; i < 16 * 32; i++) A[i] = 0x3f80; /* 1.0 */
  _tile_loadconfig(&cfg);
  _tile_loadd(0, A, 64);
  _tile_loadd(1, A, 64);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int64_t k = 0; k < n; k++) {
    _tile_dpbf16ps(2, 0, 1);
    _tile_dpbf16ps(3, 0, 1);
    _tile_dpbf16ps(4, 0, 1);
    _tile_dpbf16ps(5, 0, 1);
    _tile_dpbf16ps(6, 0, 1);
    _tile_dpbf16ps(7, 0, 1);
  }
  _tile_stored(7, C, 64);
  _tile_release();
  out[0] = C[0];
}
#endif
#else
static void fma_loop(int64_t n, float *out) { (void)n, (void)out; }
static int have_fma(void) { return 0; }
#endif

enum { NKV = 4, REP = 2, H = NKV * REP, PT = LH_KV_PAGE_TOKENS, FMA_ITERS = 50000000 };

static void fma_task(void *ctx, int64_t t, int worker) {
  float out[8];
  fma_loop(FMA_ITERS, out);
  ((float *)ctx)[t] = out[0];
}

enum { AMX_ITERS = 2000000 };
static void amx_task(void *ctx, int64_t t, int worker) {
#ifdef HAVE_AMX_LOOP
  float out[1];
  amx_loop(AMX_ITERS, out);
  ((float *)ctx)[t] = out[0];
#else
  (void)ctx, (void)t;
#endif
  (void)worker;
}

/* The best of 3 runs of task on every thread of the pool, each doing flops_per_thread: GFLOP/s */
static double peak_of(lh_pool *pool, int threads, void (*task)(void *, int64_t, int), double flops_per_thread) {
  float sink[64];
  double best = 0;
  for (int r = 0; r < 3; r++) {
    double t = lh_now();
    lh_pool_run(pool, threads, task, sink);
    t = lh_now() - t;
    if (threads * flops_per_thread / t / 1e9 > best) best = threads * flops_per_thread / t / 1e9;
  }
  return best;
}

/* AMX bf16 peak of the pool's threads (0 where the AMX path cannot run): 6 x 16384 FLOPs a round */
static double amx_peak(lh_pool *pool, int threads) {
  return lh_attn_amx() ? peak_of(pool, threads, amx_task, (double)AMX_ITERS * 6 * 16384) : 0;
}

/* FMA peak of the pool's threads: one FMA_ITERS loop per thread, 12 x 8 x 2 FLOPs an iteration */
static double fma_peak(lh_pool *pool, int threads) {
  return have_fma() ? peak_of(pool, threads, fma_task, (double)FMA_ITERS * 12 * 16) : 0;
}

static double sgemm_peak(int threads) {
  int n = 2048;
  float *A = malloc(sizeof(float) * n * n), *B = malloc(sizeof(float) * n * n), *C = malloc(sizeof(float) * n * n);
  for (long i = 0; i < (long)n * n; i++) A[i] = B[i] = (float)(i % 17) / 17.0f;
  openblas_set_num_threads(threads);
  double best = 0;
  for (int r = 0; r < 4; r++) {
    double t = lh_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    t = lh_now() - t;
    if (r && 2.0 * n * n * n / t / 1e9 > best) best = 2.0 * n * n * n / t / 1e9;
  }
  openblas_set_num_threads(1); /* as lh_pool_new left it: the tiles call OpenBLAS single-threaded */
  free(A), free(B), free(C);
  return best;
}

typedef struct job {
  lh_kv_pages kv;
  const float *q;
  float *o;
  int64_t qpos, nq, tq; /* queries [qpos, qpos + nq), tq per tile */
  float scale;
  int path; /* 0 lh_attn_tile, 1 the BLAS path, 2 the AMX bf16 path */
  float *scratch;
  size_t scratch_floats;
} job;

static void tile_task(void *ctx, int64_t t, int worker) {
  const job *j = ctx;
  int d = j->kv.d, g = (int)(t % NKV);
  int64_t r = t / NKV * j->tq, n = j->nq - r < j->tq ? j->nq - r : j->tq;
  const float *q = j->q + r * H * d + (int64_t)g * REP * d;
  float *o = j->o + r * H * d + (int64_t)g * REP * d, *s = j->scratch + (size_t)worker * j->scratch_floats;
  (j->path == 1 ? lh_attn_tile_blas : j->path == 2 ? lh_attn_tile_amx : lh_attn_tile)(
      &j->kv, g, REP, j->qpos + r, (int)n, q, H * d, d, j->scale, o, H * d, d, s);
}

static double run(lh_pool *pool, job *j, int path, int reps) {
  j->path = path;
  int64_t tasks = (j->nq + j->tq - 1) / j->tq * NKV;
  double t = lh_now();
  for (int i = 0; i < reps; i++) lh_pool_run(pool, tasks, tile_task, j);
  return (lh_now() - t) / reps;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
static double median(double *x, int n) {
  qsort(x, (size_t)n, sizeof *x, cmp_double);
  return n % 2 ? x[n / 2] : (x[n / 2 - 1] + x[n / 2]) / 2;
}

static uint64_t rng = 88172645463325252ull;
static float urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

int main(int argc, char **argv) {
  int threads = 2, chunk = 2048, rounds = 3, nlen = 3, nd = 3, len_set = 0, d_set = 0;
  int64_t lens[8] = {8192, 32768, 65536};
  int dims[8] = {32, 64, 128};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--len") && i + 1 < argc) { /* the first --len replaces the defaults */
      if (len_set++ == 0) nlen = 0;
      if (nlen < 8) lens[nlen++] = atoll(argv[i + 1]);
      i++;
    } else if (!strcmp(argv[i], "--d") && i + 1 < argc) {
      if (d_set++ == 0) nd = 0;
      if (nd < 8) dims[nd++] = atoi(argv[i + 1]);
      i++;
    } else {
      fprintf(stderr, "usage: bench_attn_cpu [--threads N] [--chunk N] [--rounds N] [--len N]... [--d N]...\n");
      return 2;
    }
  }
  if (rounds < 1 || rounds > 64 || chunk < 1 || threads < 1) return 2;
  lh_pool *pool = lh_pool_new(threads);
  if (!pool) return 1;
  double peak = fma_peak(pool, threads), sgemm = sgemm_peak(threads), apeak = amx_peak(pool, threads);
  printf("bench_attn_cpu: %d query heads over %d kv heads, pages of %d keys, chunk %d queries, %d threads, "
         "medians of %d rounds; fused path %s; AMX bf16 path %s\n",
         H, NKV, PT, chunk, threads, rounds, lh_attn_fused() ? "on (AVX2+FMA)" : "off (this CPU: BLAS path only)",
         lh_attn_amx() ? "on" : "off (no AMX-BF16 here)");
  printf("limits: FMA peak %.1f GFLOP/s (%d threads), OpenBLAS sgemm 2048^3 %.1f GFLOP/s, AMX TDPBF16PS peak %.0f "
         "GFLOP/s\n\n",
         peak, threads, sgemm, apeak);
  printf("| %-3s | %-6s | %-14s | %10s | %10s | %6s | %8s | %9s | %10s | %8s | %8s | %9s |\n", "d", "keys", "what",
         "ours fp32", "BLAS path", "ratio", "% FMA", "max diff", "AMX bf16", "AMX/fp32", "% AMX", "AMX diff");
  printf("|-----|--------|----------------|------------|------------|--------|----------|-----------|------------|------"
         "----|----------|-----------|\n");
  for (int di = 0; di < nd; di++)
    for (int li = 0; li < nlen; li++) {
      int d = dims[di], amx = lh_attn_amx() && d % 32 == 0;
      int64_t N = lens[li], nq = chunk < N ? chunk : N, npages = (N + PT - 1) / PT;
      void **pages = malloc(sizeof(void *) * npages);
      for (int64_t p = 0; p < npages; p++) {
        float *pg = malloc(sizeof(float) * 2 * NKV * PT * d);
        for (int64_t i = 0; i < 2 * NKV * PT * d; i++) pg[i] = urand();
        pages[p] = pg;
      }
      float *q = malloc(sizeof(float) * nq * H * d), *o[3];
      for (int k = 0; k < 3; k++) o[k] = malloc(sizeof(float) * nq * H * d);
      for (int64_t i = 0; i < nq * H * d; i++) q[i] = 2 * urand();
      size_t sf = (lh_attn_scratch(d, PT) + 15) / 16 * 16;
      float *scratch = malloc(sizeof(float) * sf * threads);
      job j = {{pages, NKV, d, PT}, q, NULL, N - nq, nq, LH_ATTN_ROWS / REP, 1.0f / sqrtf((float)d), 0, scratch, sf};
      double keys = (double)nq * (N - nq) + (double)nq * (nq + 1) / 2, flops = 4.0 * d * H * keys;
      /* prefill chunk: the paths alternate within each round */
      double t[3][64], rb[64], ra[64];
      for (int k = 0; k < 2 + amx; k++) j.o = o[k], run(pool, &j, k, 1); /* warm-up (pages into cache, threads) */
      for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2 + amx; k++) j.o = o[k], t[k][r] = run(pool, &j, k, 1);
        rb[r] = t[1][r] / t[0][r];
        ra[r] = amx ? t[0][r] / t[2][r] : 0;
      }
      double mx = 0, md = 0, ma = 0;
      for (int64_t i = 0; i < nq * H * d; i++) {
        if (fabsf(o[1][i]) > mx) mx = fabsf(o[1][i]);
        if (fabsf(o[0][i] - o[1][i]) > md) md = fabsf(o[0][i] - o[1][i]);
        if (amx && fabsf(o[0][i] - o[2][i]) > ma) ma = fabsf(o[0][i] - o[2][i]);
      }
      if (mx == 0) mx = 1;
      double gf = flops / median(t[0], rounds) / 1e9, gb = flops / median(t[1], rounds) / 1e9;
      double ga = amx ? flops / median(t[2], rounds) / 1e9 : 0;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9.1e |", d, (long long)(N / 1024),
             "chunk GFLOP/s", gf, gb, median(rb, rounds), peak > 0 ? 100 * gf / peak : 0.0, md / mx);
      if (amx)
        printf(" %10.1f | %7.2fx | %7.0f%% | %9.1e |\n", ga, median(ra, rounds), apeak > 0 ? 100 * ga / apeak : 0.0,
               ma / mx);
      else
        printf(" %10s | %8s | %8s | %9s |\n", "-", "-", "-", "-");
      /* decode: one query of every head at N - 1; enough steps for ~0.1 s */
      job dj = j;
      dj.qpos = N - 1, dj.nq = 1, dj.q = q, dj.o = o[0];
      int steps = (int)(2e7 / ((double)N * d) + 1);
      run(pool, &dj, 0, 1);
      if (amx) run(pool, &dj, 2, 1);
      for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 2 + amx; k++) t[k][r] = run(pool, &dj, k, steps);
        rb[r] = t[1][r] / t[0][r];
        ra[r] = amx ? t[0][r] / t[2][r] : 0;
      }
      double df = 4.0 * d * H * N;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9s |", d, (long long)(N / 1024),
             "decode us/step", median(t[0], rounds) * 1e6, median(t[1], rounds) * 1e6, median(rb, rounds),
             peak > 0 ? 100 * df / median(t[0], rounds) / 1e9 / peak : 0.0, "-");
      if (amx) printf(" %10.1f | %7.2fx | %8s | %9s |\n", median(t[2], rounds) * 1e6, median(ra, rounds), "-", "-");
      else printf(" %10s | %8s | %8s | %9s |\n", "-", "-", "-", "-");
      fflush(stdout);
      for (int64_t p = 0; p < npages; p++) free(pages[p]);
      for (int k = 0; k < 3; k++) free(o[k]);
      free(pages), free(q), free(scratch);
    }
  lh_pool_free(pool);
  return 0;
}
