/* random.cu — counter-based fills for random weights and inputs made on the GPU (the benchmark's
 * real-width model, the parity test's large inputs) and constant fills (poison).
 *
 * Element i of a fill is a pure function of (seed, i) (lh_cuda_hash_uniform in kernels.h, shared
 * with host code), so a host reference can recompute any element without copying it back, and the
 * result does not depend on the launch shape.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

/* x is a rows x cols block of a larger counter-filled matrix: element (i, j) is element
 * base + i * ld + j of the whole fill. rows = 1 is a plain fill of base.. base + cols. */
static __global__ void fill_uniform_bf16_kernel(bf16 *x, int64_t rows, int64_t cols, int64_t ld, int64_t base,
                                                uint64_t seed, float scale) {
  const int64_t n = rows * cols;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t at = rows == 1 ? base + i : base + i / cols * ld + i % cols;
    x[i] = lh_tobf(scale * lh_cuda_hash_uniform(seed, (uint64_t)at));
  }
}

static __global__ void fill_uniform_f32_kernel(float *x, int64_t n, int64_t base, uint64_t seed, float scale,
                                               float offset) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = offset + scale * lh_cuda_hash_uniform(seed, (uint64_t)(base + i));
}

static __global__ void fill_bits_kernel(uint16_t *x, int64_t n, uint16_t bits) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    x[i] = bits;
}

static unsigned grid_for(int64_t n) {
  int64_t b = (n + 255) / 256;
  return (unsigned)(b > 132 * 32 ? 132 * 32 : (b < 1 ? 1 : b));
}

extern "C" cudaError_t lh_cuda_fill_uniform_bf16(cudaStream_t st, void *x, int64_t n, uint64_t seed, float scale) {
  return lh_cuda_fill_uniform_bf16_block(st, x, 1, n, n, 0, seed, scale);
}

extern "C" cudaError_t lh_cuda_fill_uniform_bf16_block(cudaStream_t st, void *x, int64_t rows, int64_t cols, int64_t ld,
                                                       int64_t base, uint64_t seed, float scale) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  fill_uniform_bf16_kernel<<<grid_for(rows * cols), 256, 0, st>>>((bf16 *)x, rows, cols, ld, base, seed, scale);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_fill_uniform_f32(cudaStream_t st, float *x, int64_t n, uint64_t seed, float scale,
                                                float offset) {
  return lh_cuda_fill_uniform_f32_at(st, x, n, 0, seed, scale, offset);
}

extern "C" cudaError_t lh_cuda_fill_uniform_f32_at(cudaStream_t st, float *x, int64_t n, int64_t base, uint64_t seed,
                                                   float scale, float offset) {
  if (n <= 0) return cudaSuccess;
  fill_uniform_f32_kernel<<<grid_for(n), 256, 0, st>>>(x, n, base, seed, scale, offset);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_fill_bf16(cudaStream_t st, void *x, int64_t n, uint16_t bits) {
  if (n <= 0) return cudaSuccess;
  fill_bits_kernel<<<grid_for(n), 256, 0, st>>>((uint16_t *)x, n, bits);
  return cudaGetLastError();
}
