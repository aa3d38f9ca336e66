/* bench_attn_cpu — the CPU softmax attention tile (lh_attn_tile) next to its BLAS path and the
 * machine's limits.
 *
 * The shape is the embedded model's (models/haul-tiny: 8 query heads over 4 kv heads, pages of
 * LH_KV_PAGE_TOKENS keys) at head dims 32 (haul-tiny's), 64 and 128. For each context length N
 * (default 8K, 32K, 64K) it times one prefill chunk at the end of the context, --chunk queries
 * (default 2048, as `longhaul run --chunk 2048`) at positions [N - chunk, N) over the keys they
 * see, cut into the backend's tiles (LH_ATTN_ROWS / 2 queries x 2 heads) and run on a pool of
 * --threads threads (default 2), as engine/backends/cpu/backend_cpu.c does; and one decode step (1 query of
 * each head at N - 1). Printed side by side, medians of --rounds rounds (default 3) that
 * alternate the two paths, since the machine may be shared:
 *   - ours: lh_attn_tile (the fused AVX2/FMA path where the CPU has it);
 *   - peer: lh_attn_tile_blas, the previous implementation (two cblas_sgemm per page and an exp
 *     pass), and the ratio;
 *   - limit: the FMA peak of --threads threads measured here (12 independent vfmadd chains per
 *     thread) and OpenBLAS sgemm 2048^3 with the same threads, and ours as a share of the peak;
 *   - for each unit of the bf16 mode the CPU has (attention_bf16.c): AMX tiles (lh_attn_tile_amx)
 *     and AVX512-BF16 (lh_attn_tile_avx512bf16), its GFLOP/s, its speed-up over ours, its share of
 *     its unit's peak measured here (6 independent TDPBF16PS per thread; 12 independent zmm
 *     VDPBF16PS per thread) and its largest difference from ours (bf16 products: ~1e-2 of max |out|
 *     expected).
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
/* A peak loop: n rounds of 12 independent chains a = OP(a) of one instruction (FMA: latency 4 x 2
 * pipes needs 8; VDPBF16PS on Zen 4: latency ~6 x 1 a cycle needs 6), written out so that -O2
 * keeps them in registers; their sum goes to out (STORE) so that none is optimised away. */
#define PEAK_LOOP(name, isa, V, SET1, OP, ADD, STORE)                                                            \
  __attribute__((target(isa))) static void name(int64_t n, float *out) {                                         \
    V a0 = SET1(0), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4), a5 = SET1(5), a6 = SET1(6);           \
    V a7 = SET1(7), a8 = SET1(8), a9 = SET1(9), a10 = SET1(10), a11 = SET1(11);                                   \
    for (int64_t k = 0; k < n; k++) {                                                                            \
      a0 = OP(a0), a1 = OP(a1), a2 = OP(a2), a3 = OP(a3), a4 = OP(a4), a5 = OP(a5), a6 = OP(a6);                  \
      a7 = OP(a7), a8 = OP(a8), a9 = OP(a9), a10 = OP(a10), a11 = OP(a11);                                        \
    }                                                                                                            \
    STORE(out, ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))),                            \
                   ADD(ADD(a8, a9), ADD(a10, a11))));                                                            \
  }
#define FMA_OP(a) _mm256_fmadd_ps(a, _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-3f))
PEAK_LOOP(fma_loop, "avx2,fma", __m256, _mm256_set1_ps, FMA_OP, _mm256_add_ps, _mm256_storeu_ps)
static int have_fma(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#if (defined(__clang__) && __clang_major__ >= 9) || (!defined(__clang__) && __GNUC__ >= 10)
#define HAVE_DPBF16_LOOP 1
/* 12 zmm VDPBF16PS a round (16 lanes x 2 pairs, 64 FLOPs each): the VDPBF16PS peak of a thread */
#define DPBF16_OP(a) \
  _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi32(0x3f803f80), (__m512bh)_mm512_set1_epi32(0x3a833a83))
#define STORE_SUM(out, v) ((out)[0] = _mm512_reduce_add_ps(v))
PEAK_LOOP(dpbf16_loop, "avx512f,avx512bf16", __m512, _mm512_set1_ps, DPBF16_OP, _mm512_add_ps, STORE_SUM)
#endif
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

enum { AMX_ITERS = 2000000, DPBF16_ITERS = 25000000 };

/* One peak loop on every thread of a pool: loop(iters, a slot of sink) on task t */
typedef struct peak_job {
  void (*loop)(int64_t, float *);
  int64_t iters;
  float sink[8 * 64];
} peak_job;

static void peak_task(void *ctx, int64_t t, int worker) {
  peak_job *p = ctx;
  p->loop(p->iters, p->sink + 8 * (t % 64));
  (void)worker;
}

/* The best of 3 runs of loop on every thread of the pool, each doing iters rounds of flops_per_iter:
 * GFLOP/s */
static double peak_of(lh_pool *pool, int threads, void (*loop)(int64_t, float *), int64_t iters,
                      double flops_per_iter) {
  peak_job job = {loop, iters, {0}};
  double best = 0, flops = (double)threads * iters * flops_per_iter;
  for (int r = 0; r < 3; r++) {
    double t = lh_now();
    lh_pool_run(pool, threads, peak_task, &job);
    t = lh_now() - t;
    if (flops / t / 1e9 > best) best = flops / t / 1e9;
  }
  return best;
}

/* The peak of a bf16 unit over the pool's threads (0 where it cannot run): AMX, 6 x 16384 FLOPs a
 * round; VDPBF16PS, 12 x 64 */
static double bf16_peak(lh_pool *pool, int threads, int kind) {
#ifdef HAVE_AMX_LOOP
  if (kind == LH_ATTN_BF16_AMX && lh_attn_amx()) return peak_of(pool, threads, amx_loop, AMX_ITERS, 6 * 16384);
#endif
#ifdef HAVE_DPBF16_LOOP
  if (kind == LH_ATTN_BF16_AVX512 && lh_attn_avx512bf16())
    return peak_of(pool, threads, dpbf16_loop, DPBF16_ITERS, 12 * 64);
#endif
  return 0;
}

/* FMA peak of the pool's threads: one FMA_ITERS loop per thread, 12 x 8 x 2 FLOPs an iteration */
static double fma_peak(lh_pool *pool, int threads) {
  return have_fma() ? peak_of(pool, threads, fma_loop, FMA_ITERS, 12 * 16) : 0;
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
  int path; /* 0 lh_attn_tile, 1 the BLAS path, 2 the AMX bf16 unit, 3 the AVX512-BF16 one */
  float *scratch;
  size_t scratch_floats;
} job;

static void tile_task(void *ctx, int64_t t, int worker) {
  const job *j = ctx;
  int d = j->kv.d, g = (int)(t % NKV);
  int64_t r = t / NKV * j->tq, n = j->nq - r < j->tq ? j->nq - r : j->tq;
  const float *q = j->q + r * H * d + (int64_t)g * REP * d;
  float *o = j->o + r * H * d + (int64_t)g * REP * d, *s = j->scratch + (size_t)worker * j->scratch_floats;
  (j->path == 1   ? lh_attn_tile_blas
   : j->path == 2 ? lh_attn_tile_amx
   : j->path == 3 ? lh_attn_tile_avx512bf16
                  : lh_attn_tile)(
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
  /* the paths this CPU runs: 0 ours, 1 BLAS, then the bf16 units it has (2 AMX, 3 AVX512-BF16) */
  int paths[4] = {0, 1}, np = 2;
  if (lh_attn_amx()) paths[np++] = 2;
  if (lh_attn_avx512bf16()) paths[np++] = 3;
  static const char *const unit[4] = {"", "", "AMX", "VDPBF16PS"};
  double peak = fma_peak(pool, threads), sgemm = sgemm_peak(threads), upeak[4] = {0};
  for (int k = 2; k < np; k++)
    upeak[paths[k]] = bf16_peak(pool, threads, paths[k] == 2 ? LH_ATTN_BF16_AMX : LH_ATTN_BF16_AVX512);
  printf("bench_attn_cpu: %d query heads over %d kv heads, pages of %d keys, chunk %d queries, %d threads, "
         "medians of %d rounds; fused path %s; bf16 units: AMX %s, AVX512-BF16 %s (the mode uses %s)\n",
         H, NKV, PT, chunk, threads, rounds, lh_attn_fused() ? "on (AVX2+FMA)" : "off (this CPU: BLAS path only)",
         lh_attn_amx() ? "on" : "off", lh_attn_avx512bf16() ? "on" : "off", lh_attn_bf16_unit(lh_attn_bf16_kind(32)));
  printf("limits: FMA peak %.1f GFLOP/s (%d threads), OpenBLAS sgemm 2048^3 %.1f GFLOP/s", peak, threads, sgemm);
  for (int k = 2; k < np; k++) printf(", %s peak %.0f GFLOP/s", unit[paths[k]], upeak[paths[k]]);
  printf("\n\n| %-3s | %-6s | %-14s | %10s | %10s | %6s | %8s | %9s |", "d", "keys", "what", "ours fp32", "BLAS path",
         "ratio", "% FMA", "max diff");
  for (int k = 2; k < np; k++) printf(" %9s bf16 | %8s | %8s | %9s |", unit[paths[k]], "/fp32", "% peak", "diff");
  printf("\n|-----|--------|----------------|------------|------------|--------|----------|-----------|");
  for (int k = 2; k < np; k++) printf("----------------|----------|----------|-----------|");
  printf("\n");
  for (int di = 0; di < nd; di++)
    for (int li = 0; li < nlen; li++) {
      int d = dims[di], npd = d % 32 == 0 ? np : 2; /* the bf16 units need d a multiple of 32 */
      int64_t N = lens[li], nq = chunk < N ? chunk : N, npages = (N + PT - 1) / PT;
      void **pages = malloc(sizeof(void *) * npages);
      for (int64_t p = 0; p < npages; p++) {
        float *pg = malloc(sizeof(float) * 2 * NKV * PT * d);
        for (int64_t i = 0; i < 2 * NKV * PT * d; i++) pg[i] = urand();
        pages[p] = pg;
      }
      float *q = malloc(sizeof(float) * nq * H * d), *o[4];
      for (int k = 0; k < 4; k++) o[k] = malloc(sizeof(float) * nq * H * d);
      for (int64_t i = 0; i < nq * H * d; i++) q[i] = 2 * urand();
      size_t sf = (lh_attn_scratch(d, PT) + 15) / 16 * 16;
      float *scratch = malloc(sizeof(float) * sf * threads);
      job j = {{pages, NKV, d, PT}, q, NULL, N - nq, nq, LH_ATTN_ROWS / REP, 1.0f / sqrtf((float)d), 0, scratch, sf};
      double keys = (double)nq * (N - nq) + (double)nq * (nq + 1) / 2, flops = 4.0 * d * H * keys;
      /* prefill chunk: the paths alternate within each round; ratio[k][r] = t(path k) / t(ours) */
      double t[4][64], ratio[4][64];
      for (int k = 0; k < npd; k++) j.o = o[k], run(pool, &j, paths[k], 1); /* warm-up (pages into cache, threads) */
      for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < npd; k++) j.o = o[k], t[k][r] = run(pool, &j, paths[k], 1);
        for (int k = 1; k < npd; k++) ratio[k][r] = k == 1 ? t[1][r] / t[0][r] : t[0][r] / t[k][r];
      }
      double mx = 0, md[4] = {0};
      for (int64_t i = 0; i < nq * H * d; i++) {
        if (fabsf(o[1][i]) > mx) mx = fabsf(o[1][i]);
        for (int k = 1; k < npd; k++)
          if (fabsf(o[0][i] - o[k][i]) > md[k]) md[k] = fabsf(o[0][i] - o[k][i]);
      }
      if (mx == 0) mx = 1;
      double gf = flops / median(t[0], rounds) / 1e9, gb = flops / median(t[1], rounds) / 1e9;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9.1e |", d, (long long)(N / 1024),
             "chunk GFLOP/s", gf, gb, median(ratio[1], rounds), peak > 0 ? 100 * gf / peak : 0.0, md[1] / mx);
      for (int k = 2; k < np; k++) {
        double gu = k < npd ? flops / median(t[k], rounds) / 1e9 : 0, up = upeak[paths[k]];
        if (k < npd)
          printf(" %14.1f | %7.2fx | %7.0f%% | %9.1e |", gu, median(ratio[k], rounds), up > 0 ? 100 * gu / up : 0.0,
                 md[k] / mx);
        else
          printf(" %14s | %8s | %8s | %9s |", "-", "-", "-", "-");
      }
      printf("\n");
      /* decode: one query of every head at N - 1; enough steps for ~0.1 s */
      job dj = j;
      dj.qpos = N - 1, dj.nq = 1, dj.q = q, dj.o = o[0];
      int steps = (int)(2e7 / ((double)N * d) + 1);
      for (int k = 0; k < npd; k++) run(pool, &dj, paths[k], 1);
      for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < npd; k++) t[k][r] = run(pool, &dj, paths[k], steps);
        for (int k = 1; k < npd; k++) ratio[k][r] = k == 1 ? t[1][r] / t[0][r] : t[0][r] / t[k][r];
      }
      double df = 4.0 * d * H * N;
      printf("| %-3d | %5lldK | %-14s | %10.1f | %10.1f | %5.2fx | %7.0f%% | %9s |", d, (long long)(N / 1024),
             "decode us/step", median(t[0], rounds) * 1e6, median(t[1], rounds) * 1e6, median(ratio[1], rounds),
             peak > 0 ? 100 * df / median(t[0], rounds) / 1e9 / peak : 0.0, "-");
      for (int k = 2; k < np; k++) {
        if (k < npd)
          printf(" %14.1f | %7.2fx | %8s | %9s |", median(t[k], rounds) * 1e6, median(ratio[k], rounds), "-", "-");
        else printf(" %14s | %8s | %8s | %9s |", "-", "-", "-", "-");
      }
      printf("\n");
      fflush(stdout);
      for (int64_t p = 0; p < npages; p++) free(pages[p]);
      for (int k = 0; k < 4; k++) free(o[k]);
      free(pages), free(q), free(scratch);
    }
  lh_pool_free(pool);
  return 0;
}
