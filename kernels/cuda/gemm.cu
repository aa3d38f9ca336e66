/* gemm.cu — the projections and expert products through cuBLAS: bf16 operands, fp32 accumulation.
 *
 * Row-major y = x W^T is column-major y^T = W x^T, i.e. cuBLAS's C = op(A) B with A = W read
 * transposed (lda = in), B = x (ldb = ldx), C = y (ldc = ldy). cuBLAS is bitwise reproducible for a
 * given handle, stream and GPU as long as atomics mode stays off (the default) and one stream uses
 * the handle's workspace, which is how the backend uses it; reduced-precision split-K reductions are
 * disallowed at handle creation.
 */
#include "kernels/cuda/kernels.h"

extern "C" cublasStatus_t lh_cuda_gemm(cublasHandle_t h, const void *x, int64_t ldx, int64_t n, int in, const void *w,
                                       int out, void *y, int64_t ldy, int y_f32) {
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, (int)n, in, &alpha, w, CUDA_R_16BF, in, x, CUDA_R_16BF,
                      (int)ldx, &beta, y, y_f32 ? CUDA_R_32F : CUDA_R_16BF, (int)ldy, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

#define MAXG 256

extern "C" cublasStatus_t lh_cuda_gemm_grouped(cublasHandle_t h, int count, const int *rows, int in, int out,
                                               const void *const *xs, const void *const *ws, void *const *ys) {
  if (count <= 0) return CUBLAS_STATUS_SUCCESS;
  if (count > MAXG) return CUBLAS_STATUS_INVALID_VALUE;
  cublasOperation_t ta[MAXG], tb[MAXG];
  int m[MAXG], k[MAXG], lda[MAXG], ldb[MAXG], ldc[MAXG], gs[MAXG];
  float alpha[MAXG], beta[MAXG];
  for (int i = 0; i < count; i++) {
    ta[i] = CUBLAS_OP_T, tb[i] = CUBLAS_OP_N;
    m[i] = out, k[i] = in, lda[i] = in, ldb[i] = in, ldc[i] = out, gs[i] = 1;
    alpha[i] = 1.0f, beta[i] = 0.0f;
  }
  return cublasGemmGroupedBatchedEx(h, ta, tb, m, rows, k, alpha, ws, CUDA_R_16BF, lda, xs, CUDA_R_16BF, ldb, beta,
                                    ys, CUDA_R_16BF, ldc, count, gs, CUBLAS_COMPUTE_32F);
}
