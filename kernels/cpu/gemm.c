/* gemm.c — y = x W^T through OpenBLAS, cut into fixed output tiles that run on the pool.
 *
 * OpenBLAS gives different bits for the same product when its thread count changes, and also
 * when the same rows are computed in a call of another shape (a 100-row call does not reproduce
 * rows of an 8192-row call bit for bit). So the tiling is a function of (M, N, K) alone: the same
 * product is always cut into the same single-threaded OpenBLAS calls, whatever the pool size.
 * Tile sizes were chosen by measurement on a 2-core Zen machine (bench_engine_cpu): large enough
 * that packing costs little, small enough that 2-8 threads get several tiles each. Tiles of fewer
 * than 4 rows (decode) go through sgemv row by row: sgemm would pack the weight tile first, which
 * made single-token decode 2.4x slower (16.6 ms against 6.9 ms for a 32000 x 512 lm_head).
 */
#include <cblas.h>

#include "kernels/cpu/ops.h"

typedef struct gemm_job {
  int64_t M, N, K, lda, ldb, ldc, mt, nt, tiles_n;
  const float *A, *B;
  float *C;
  float beta;
} gemm_job;

static void gemm_tile(void *ctx, int64_t t, int worker) {
  (void)worker;
  const gemm_job *j = ctx;
  int64_t m0 = (t / j->tiles_n) * j->mt, n0 = (t % j->tiles_n) * j->nt;
  int64_t m = j->M - m0 < j->mt ? j->M - m0 : j->mt;
  int64_t n = j->N - n0 < j->nt ? j->N - n0 : j->nt;
  if (m < 4) { /* decode: OpenBLAS 0.3.21's sgemm would pack the weight tile for a row or two */
    for (int64_t i = 0; i < m; i++)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)n, (int)j->K, 1.0f, j->B + n0 * j->ldb, (int)j->ldb,
                  j->A + (m0 + i) * j->lda, 1, j->beta, j->C + (m0 + i) * j->ldc + n0, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)j->K, 1.0f, j->A + m0 * j->lda,
              (int)j->lda, j->B + n0 * j->ldb, (int)j->ldb, j->beta, j->C + m0 * j->ldc + n0, (int)j->ldc);
}

void lh_gemm_nt(lh_pool *pool, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                int64_t ldb, float *C, int64_t ldc, int accumulate) {
  if (M <= 0 || N <= 0) return;
  gemm_job j = {.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .A = A, .B = B, .C = C,
                .beta = accumulate ? 1.0f : 0.0f};
  /* Few rows (decode): split the weight's rows finely so several threads share one product. */
  j.mt = 512;
  j.nt = M <= 64 ? 128 : 768;
  if ((double)M * (double)N * (double)K < 1 << 18) { /* too small to be worth a task each */
    j.mt = M;
    j.nt = N;
  }
  j.tiles_n = (N + j.nt - 1) / j.nt;
  int64_t tiles = ((M + j.mt - 1) / j.mt) * j.tiles_n;
  if (K <= 0) { /* OpenBLAS rejects K = 0; the product is then zero */
    for (int64_t i = 0; i < M; i++)
      for (int64_t c = 0; c < N; c++)
        if (!accumulate) C[i * ldc + c] = 0.0f;
    return;
  }
  lh_pool_run(pool, tiles, gemm_tile, &j);
}
