/* norm.cu — row-wise kernels: embedding gather, RMSNorm, the DeepNorm-style residual fused with the
 * next RMSNorm, the lightning all-heads norm fused with the sigmoid gate, and the final norm of
 * selected rows.
 *
 * One CTA per row; the row is read whole into shared memory (fp32) before anything is written, so
 * outputs may alias inputs. Sums of squares use lh_block_sum's fixed tree: same bits every run.
 * Arithmetic is fp32; only the stored results are rounded to bf16.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

#define NTHREADS 256

static __global__ void embed_kernel(const bf16 *__restrict__ table, const int32_t *__restrict__ tokens, int width,
                                    bf16 *__restrict__ x) {
  const int64_t r = blockIdx.x;
  const bf16 *src = table + (int64_t)tokens[r] * width;
  bf16 *dst = x + r * width;
  if (width % 8 == 0) {
    for (int i = threadIdx.x; i < width / 8; i += blockDim.x)
      reinterpret_cast<uint4 *>(dst)[i] = reinterpret_cast<const uint4 *>(src)[i];
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = src[i];
  }
}

extern "C" cudaError_t lh_cuda_embed(cudaStream_t st, const void *table, const int32_t *tokens, int64_t n, int width,
                                     void *x) {
  if (n <= 0) return cudaSuccess;
  embed_kernel<<<(unsigned)n, NTHREADS, 0, st>>>((const bf16 *)table, tokens, width, (bf16 *)x);
  return cudaGetLastError();
}

static __device__ __forceinline__ float norm_scale(const float *row, int width, float eps, float *scratch) {
  float ss = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) ss += row[i] * row[i];
  ss = lh_block_sum(ss, scratch);
  return rsqrtf(ss / (float)width + eps);
}

static __global__ void rmsnorm_kernel(const bf16 *__restrict__ x, const int64_t *__restrict__ rows, int width,
                                      const float *__restrict__ w, float eps, bf16 *y) {
  extern __shared__ float rowbuf[];
  __shared__ float scratch[32];
  const int64_t src = rows ? rows[blockIdx.x] : (int64_t)blockIdx.x;
  const bf16 *xr = x + src * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) rowbuf[i] = lh_bf(xr[i]);
  float sc = norm_scale(rowbuf, width, eps, scratch);
  bf16 *yr = y + (int64_t)blockIdx.x * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = lh_tobf(rowbuf[i] * sc * w[i]);
}

extern "C" cudaError_t lh_cuda_rmsnorm(cudaStream_t st, const void *x, int64_t n, int width, const float *w, float eps,
                                       void *y) {
  if (n <= 0) return cudaSuccess;
  rmsnorm_kernel<<<(unsigned)n, NTHREADS, width * sizeof(float), st>>>((const bf16 *)x, NULL, width, w, eps, (bf16 *)y);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_rmsnorm_rows(cudaStream_t st, const void *x, const int64_t *rows, int64_t m, int width,
                                            const float *w, float eps, void *y) {
  if (m <= 0) return cudaSuccess;
  rmsnorm_kernel<<<(unsigned)m, NTHREADS, width * sizeof(float), st>>>((const bf16 *)x, rows, width, w, eps, (bf16 *)y);
  return cudaGetLastError();
}

static __global__ void residual_kernel(const bf16 *h, const bf16 *a, float alpha, float beta, int width, bf16 *x,
                                       const float *__restrict__ w, float eps, bf16 *y) {
  extern __shared__ float rowbuf[];
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const bf16 *hr = h + r * width, *ar = a + r * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) rowbuf[i] = alpha * lh_bf(hr[i]) + beta * lh_bf(ar[i]);
  __syncthreads(); /* every read of h and a is done before x (which may alias them) is written */
  bf16 *xr = x + r * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) xr[i] = lh_tobf(rowbuf[i]);
  if (!w) return;
  float sc = norm_scale(rowbuf, width, eps, scratch);
  bf16 *yr = y + r * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) yr[i] = lh_tobf(rowbuf[i] * sc * w[i]);
}

extern "C" cudaError_t lh_cuda_residual_norm(cudaStream_t st, const void *h, const void *a, float alpha, float beta,
                                             int64_t n, int width, void *x, const float *w, float eps, void *y) {
  if (n <= 0) return cudaSuccess;
  residual_kernel<<<(unsigned)n, NTHREADS, width * sizeof(float), st>>>((const bf16 *)h, (const bf16 *)a, alpha, beta,
                                                                       width, (bf16 *)x, w, eps, (bf16 *)y);
  return cudaGetLastError();
}

static __global__ void norm_gate_kernel(const bf16 *o, int64_t o_stride, const bf16 *__restrict__ gate,
                                        int64_t gate_stride, int width, const float *__restrict__ w, float eps, bf16 *y,
                                        int64_t y_stride) {
  extern __shared__ float rowbuf[];
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const bf16 *orow = o + r * o_stride;
  for (int i = threadIdx.x; i < width; i += blockDim.x) rowbuf[i] = lh_bf(orow[i]);
  float sc = norm_scale(rowbuf, width, eps, scratch); /* its block sum ends with a barrier: o is read */
  const bf16 *grow = gate + r * gate_stride;
  bf16 *yr = y + r * y_stride;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float nv = lh_bf(lh_tobf(rowbuf[i] * sc * w[i]));
    yr[i] = lh_tobf(lh_sigmoid(lh_bf(grow[i])) * nv);
  }
}

extern "C" cudaError_t lh_cuda_norm_gate(cudaStream_t st, const void *o, int64_t o_stride, const void *gate,
                                         int64_t gate_stride, int64_t n, int width, const float *w, float eps, void *y,
                                         int64_t y_stride) {
  if (n <= 0) return cudaSuccess;
  norm_gate_kernel<<<(unsigned)n, NTHREADS, width * sizeof(float), st>>>(
      (const bf16 *)o, o_stride, (const bf16 *)gate, gate_stride, width, w, eps, (bf16 *)y, y_stride);
  return cudaGetLastError();
}
