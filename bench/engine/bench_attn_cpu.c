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
 *     thread) and OpenBLAS sgemm 2048^3 with the same threads, and ours as a share of the peak.
 * GFLOP/s count 4 d FLOPs per (query, key, head) with key <= query: what the function needs.
 * Also printed: the largest difference between the two paths' outputs, relative to max |out|.
 */
#include <cblas.h>
#include <math.h>
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

/* FMA peak of the pool's threads: one FMA_ITERS loop per thread, 12 x 8 x 2 FLOPs an iteration */
static double fma_peak(lh_pool *pool, int threads) {
  if (!have_fma()) return 0;
  float sink[64];
  double best = 0;
  for (int r = 0; r < 3; r++) {
    double t = lh_now();
    lh_pool_run(pool, threads, fma_task, sink);
    t = lh_now() - t;
    double gf = threads * (double)FMA_ITERS * 12 * 16 / t / 1e9;
    if (gf > best) best = gf;
  }
  return best;
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
  int blas;
  float *scratch;
  size_t scratch_floats;
} job;

static void tile_task(void *ctx, int64_t t, int worker) {
  const job *j = ctx;
  int d = j->kv.d, g = (int)(t % NKV);
  int64_t r = t / NKV * j->tq, n = j->nq - r < j->tq ? j->nq - r : j->tq;
  const float *q = j->q + r * H * d + (int64_t)g * REP * d;
  float *o = j->o + r * H * d + (int64_t)g * REP * d, *s = j->scratch + (size_t)worker * j->scratch_floats;
  (j->blas ? lh_attn_tile_blas : lh_attn_tile)(&j->kv, g, REP, j->qpos + r, (int)n, q, H * d, d, j->scale, o, H * d,
                                               d, s);
}

static double run(lh_pool *pool, job *j, int blas, int reps) {
  j->blas = blas;
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
  double peak = fma_peak(pool, threads), sgemm = sgemm_peak(threads);
  printf("bench_attn_cpu: %d query heads over %d kv heads, pages of %d keys, chunk %d queries, %d threads, "
         "medians of %d rounds; fused path %s\n",
         H, NKV, PT, chunk, threads, rounds, lh_attn_fused() ? "on (AVX2+FMA)" : "off (this CPU: BLAS path only)");
  printf("limits: FMA peak %.1f GFLOP/s (%d threads), OpenBLAS sgemm 2048^3 %.1f GFLOP/s\n\n", peak, threads, sgemm);
  printf("| %-3s | %-6s | %-14s | %10s | %10s | %6s | %8s | %9s |\n", "d", "keys", "what", "ours", "BLAS path",
         "ratio", "% peak", "max diff");
  printf("|-----|--------|----------------|------------|------------|--------|----------|-----------|\n");
  for (int di = 0; di < nd; di++)
    for (int li = 0; li < nlen; li++) {
      int d = dims[di];
      int64_t N = lens[li], nq = chunk < N ? chunk : N, npages = (N + PT - 1) / PT;
      void **pages = malloc(sizeof(void *) * npages);
      for (int64_t p = 0; p < npages; p++) {
        float *pg = malloc(sizeof(float) * 2 * NKV * PT * d);
        for (int64_t i = 0; i < 2 * NKV * PT * d; i++) pg[i] = urand();
        pages[p] = pg;
      }
      float *q = malloc(sizeof(float) * nq * H * d), *o1 = malloc(sizeof(float) * nq * H * d),
            *o2 = malloc(sizeof(float) * nq * H * d);
      for (int64_t i = 0; i < nq * H * d; i++) q[i] = 2 * urand();
      size_t sf = (lh_attn_scratch(d, PT) + 15) / 16 * 16;
      float *scratch = malloc(sizeof(float) * sf * threads);
      job j = {{pages, NKV, d, PT}, q, NULL, N - nq, nq, LH_ATTN_ROWS / REP, 1.0f / sqrtf((float)d), 0, scratch, sf};
      double keys = (double)nq * (N - nq) + (double)nq * (nq + 1) / 2, flops = 4.0 * d * H * keys;
      /* prefill chunk */
      double tf[64], tb[64], rf[64];
      j.o = o1, run(pool, &j, 0, 1); /* warm-up (pages into cache, pool threads) */
      j.o = o2, run(pool, &j, 1, 1);
      for (int r = 0; r < rounds; r++) {
        j.o = o1, tf[r] = run(pool, &j, 0, 1);
        j.o = o2, tb[r] = run(pool, &j, 1, 1);
        rf[r] = tb[r] / tf[r];
      }
      double mx = 0, md = 0;
      for (int64_t i = 0; i < nq * H * d; i++) {
        if (fabsf(o2[i]) > mx) mx = fabsf(o2[i]);
        if (fabsf(o1[i] - o2[i]) > md) md = fabsf(o1[i] - o2[i]);
      }
      double gf = flops / median(tf, rounds) / 1e9, gb = flops / median(tb, rounds) / 1e9;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9.1e |\n", d, (long long)(N / 1024),
             "chunk GFLOP/s", gf, gb, median(rf, rounds), peak > 0 ? 100 * gf / peak : 0.0, mx > 0 ? md / mx : md);
      /* decode: one query of every head at N - 1; enough steps for ~0.1 s */
      job dj = j;
      dj.qpos = N - 1, dj.nq = 1, dj.q = q, dj.o = o1;
      int steps = (int)(2e7 / ((double)N * d) + 1);
      run(pool, &dj, 0, 1);
      for (int r = 0; r < rounds; r++) {
        tf[r] = run(pool, &dj, 0, steps);
        tb[r] = run(pool, &dj, 1, steps);
        rf[r] = tb[r] / tf[r];
      }
      double df = 4.0 * d * H * N;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9s |\n", d, (long long)(N / 1024),
             "decode us/step", median(tf, rounds) * 1e6, median(tb, rounds) * 1e6, median(rf, rounds),
             peak > 0 ? 100 * df / median(tf, rounds) / 1e9 / peak : 0.0, "-");
      fflush(stdout);
      for (int64_t p = 0; p < npages; p++) free(pages[p]);
      free(pages), free(q), free(o1), free(o2), free(scratch);
    }
  lh_pool_free(pool);
  return 0;
}
