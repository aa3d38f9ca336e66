/* norm.cu — row-wise kernels: embedding gather, RMSNorm, the DeepNorm-style residual fused with the
 * next RMSNorm, the lightning all-heads norm fused with the sigmoid gate, and the final norm of
 * selected rows.
 *
 * One CTA per row; the row is read whole into shared memory (fp32) before anything is written, so
 * outputs may alias inputs. Sums of squares use lh_block_sum's fixed tree: same bits every run.
 * Arithmetic is fp32; only the stored results are rounded to bf16. Global rows are read and
 * written 8 bf16 (16 bytes) a thread at a time where width and addresses allow (vec8), else one
 * element at a time; the arithmetic per element and the order of the sums are the same either way,
 * so both give the same bits. The 16-byte form is what brings these memory-bound rows near the copy
 * rate (bench/NOTES.md, "Kernel notes: norm.cu").
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

/* True when rows of width bf16 at these addresses can go 16 bytes at a time. */
static __device__ __forceinline__ bool vec8(int width, const void *a, const void *b = NULL, const void *c = NULL,
                                            const void *d = NULL) {
  return width % 8 == 0 && (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) & 15) == 0;
}
static __device__ __forceinline__ void unpack8(uint4 u, float *f) {
  const uint32_t *p = &u.x;
#pragma unroll
  for (int k = 0; k < 4; k++) f[2 * k] = __uint_as_float(p[k] << 16), f[2 * k + 1] = __uint_as_float(p[k] & 0xffff0000u);
}
static __device__ __forceinline__ uint4 pack8(const float *f) {
  uint4 u;
  uint32_t *p = &u.x;
#pragma unroll
  for (int k = 0; k < 4; k++) p[k] = lh_pack_bf16(f[2 * k], f[2 * k + 1]);
  return u;
}
/* w[8 c .. 8 c + 8) (16-byte aligned: vec8 checked it). */
static __device__ __forceinline__ void load8(const float *w, int c, float *f) {
  const float4 a = reinterpret_cast<const float4 *>(w)[2 * c], b = reinterpret_cast<const float4 *>(w)[2 * c + 1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
/* rowbuf[0 .. width) = the bf16 row src, as fp32; ends with a barrier, since the 16-byte path
 * writes elements that other threads then read (norm_scale's sum). */
static __device__ __forceinline__ void load_row(const bf16 *src, int width, float *rowbuf) {
  if (vec8(width, src)) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x) unpack8(reinterpret_cast<const uint4 *>(src)[c], rowbuf + 8 * c);
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) rowbuf[i] = lh_bf(src[i]);
  }
  __syncthreads();
}
/* dst[i] = bf16(rowbuf[i] * sc * w[i]). */
static __device__ __forceinline__ void store_scaled(const float *rowbuf, float sc, const float *w, int width, bf16 *dst) {
  if (vec8(width, dst, w)) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x) {
      float f[8], wv[8];
      load8(w, c, wv);
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] = rowbuf[8 * c + k] * sc * wv[k];
      reinterpret_cast<uint4 *>(dst)[c] = pack8(f);
    }
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) dst[i] = lh_tobf(rowbuf[i] * sc * w[i]);
  }
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
  load_row(x + src * width, width, rowbuf);
  float sc = norm_scale(rowbuf, width, eps, scratch);
  store_scaled(rowbuf, sc, w, width, y + (int64_t)blockIdx.x * width);
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
  bf16 *xr = x + r * width;
  const bool v = vec8(width, hr, ar, xr);
  if (v) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x) {
      float fh[8], fa[8];
      unpack8(reinterpret_cast<const uint4 *>(hr)[c], fh);
      unpack8(reinterpret_cast<const uint4 *>(ar)[c], fa);
#pragma unroll
      for (int k = 0; k < 8; k++) rowbuf[8 * c + k] = alpha * fh[k] + beta * fa[k];
    }
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) rowbuf[i] = alpha * lh_bf(hr[i]) + beta * lh_bf(ar[i]);
  }
  __syncthreads(); /* every read of h and a is done before x (which may alias them) is written */
  if (v) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x) reinterpret_cast<uint4 *>(xr)[c] = pack8(rowbuf + 8 * c);
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) xr[i] = lh_tobf(rowbuf[i]);
  }
  if (!w) return;
  float sc = norm_scale(rowbuf, width, eps, scratch);
  store_scaled(rowbuf, sc, w, width, y + r * width);
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
  load_row(o + r * o_stride, width, rowbuf);
  float sc = norm_scale(rowbuf, width, eps, scratch); /* its block sum ends with a barrier: o is read */
  const bf16 *grow = gate + r * gate_stride;
  bf16 *yr = y + r * y_stride;
  if (vec8(width, grow, yr, w)) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x) {
      float gv[8], wv[8], f[8];
      unpack8(reinterpret_cast<const uint4 *>(grow)[c], gv);
      load8(w, c, wv);
#pragma unroll
      for (int k = 0; k < 8; k++) f[k] = lh_sigmoid(gv[k]) * lh_bf(lh_tobf(rowbuf[8 * c + k] * sc * wv[k]));
      reinterpret_cast<uint4 *>(yr)[c] = pack8(f);
    }
  } else {
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
      float nv = lh_bf(lh_tobf(rowbuf[i] * sc * w[i]));
      yr[i] = lh_tobf(lh_sigmoid(lh_bf(grow[i])) * nv);
    }
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
