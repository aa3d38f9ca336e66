/* moe.cu — the parts of the mixture-of-experts block around the expert GEMMs: routing (softmax in
 * fp32, top-k, renormalisation), the token permutation into expert order, the row gather, SwiGLU and
 * the weighted combine.
 *
 * The permutation is a stable counting sort of the (row, slot) pairs by expert in three launches:
 * per-chunk histograms, one prefix pass, and a scatter in which each pair's rank among equal experts
 * in its chunk comes from warp vote (__match_any_sync) and per-warp counts. Integer atomics only
 * build histograms (their sums do not depend on order); nothing floating point is ever reduced
 * atomically, and the combine adds a row's k expert outputs in slot order. Same routing, same bits.
 */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

#define MAX_E 256
#define MAX_K 8

static __global__ void route_kernel(const float *__restrict__ logits, int64_t n, int E, int K, int32_t *__restrict__ ids,
                                    float *__restrict__ wts) {
  const int lane = threadIdx.x & 31;
  const int64_t r = (int64_t)blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (r >= n) return;
  float p[MAX_E / 32];
  const float *lr = logits + r * E;
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < MAX_E / 32; c++) {
    int e = lane + 32 * c;
    p[c] = e < E ? lr[e] : -INFINITY;
    mx = fmaxf(mx, p[c]);
  }
  mx = lh_warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < MAX_E / 32; c++) {
    int e = lane + 32 * c;
    p[c] = e < E ? expf(p[c] - mx) : 0.0f;
    sum += p[c];
  }
  sum = lh_warp_sum(sum);
  const float inv = 1.0f / sum;
#pragma unroll
  for (int c = 0; c < MAX_E / 32; c++) p[c] = lane + 32 * c < E ? p[c] * inv : -1.0f;
  float chosen[MAX_K];
  int chosen_id[MAX_K];
  float total = 0.0f;
  for (int k = 0; k < K; k++) {
    float bv = -2.0f;
    int be = 0x7fffffff;
#pragma unroll
    for (int c = 0; c < MAX_E / 32; c++) {
      int e = lane + 32 * c;
      if (p[c] > bv) bv = p[c], be = e; /* lanes scan ascending ids: first max wins */
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      int oe = __shfl_xor_sync(0xffffffffu, be, o);
      if (ov > bv || (ov == bv && oe < be)) bv = ov, be = oe;
    }
#pragma unroll
    for (int c = 0; c < MAX_E / 32; c++)
      if (lane + 32 * c == be) p[c] = -1.0f;
    chosen[k < MAX_K ? k : 0] = bv;
    chosen_id[k < MAX_K ? k : 0] = be;
    total += bv;
  }
  if (lane == 0) {
    for (int k = 0; k < K; k++) {
      ids[r * K + k] = chosen_id[k];
      wts[r * K + k] = chosen[k] / total;
    }
  }
}

extern "C" cudaError_t lh_cuda_moe_route(cudaStream_t st, const float *logits, int64_t n, int E, int K, int32_t *ids,
                                         float *wts) {
  if (n <= 0) return cudaSuccess;
  if (E < 1 || E > MAX_E || K < 1 || K > MAX_K || K > E) return cudaErrorInvalidValue;
  const int rows_per_block = 8;
  route_kernel<<<(unsigned)((n + rows_per_block - 1) / rows_per_block), 32 * rows_per_block, 0, st>>>(logits, n, E, K,
                                                                                                     ids, wts);
  return cudaGetLastError();
}

static __global__ void plan_hist_kernel(const int32_t *__restrict__ ids, int64_t m, int E, int32_t *__restrict__ hist) {
  __shared__ int cnt[MAX_E];
  for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
  __syncthreads();
  int64_t i = (int64_t)blockIdx.x * LH_CUDA_MOE_CHUNK + threadIdx.x;
  if (i < m) atomicAdd(&cnt[ids[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) hist[(int64_t)blockIdx.x * E + e] = cnt[e];
}

/* hist[c][e] becomes the first place of chunk c's pairs of expert e; offsets[e] the first place of e. */
static __global__ void plan_scan_kernel(int32_t *__restrict__ hist, int nchunk, int E, int32_t *__restrict__ offsets) {
  __shared__ int tot[MAX_E];
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int s = 0;
    for (int c = 0; c < nchunk; c++) s += hist[(int64_t)c * E + e];
    tot[e] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int e = 0; e < E; e++) {
      offsets[e] = s;
      int t = tot[e];
      tot[e] = s;
      s += t;
    }
    offsets[E] = s;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int s = tot[e];
    for (int c = 0; c < nchunk; c++) {
      int h = hist[(int64_t)c * E + e];
      hist[(int64_t)c * E + e] = s;
      s += h;
    }
  }
}

static __global__ void plan_scatter_kernel(const int32_t *__restrict__ ids, int64_t m, int K, int E,
                                           const int32_t *__restrict__ hist, int32_t *__restrict__ pos,
                                           int32_t *__restrict__ src_row) {
  __shared__ int wcnt[LH_CUDA_MOE_CHUNK / 32][MAX_E];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int i = threadIdx.x; i < (LH_CUDA_MOE_CHUNK / 32) * MAX_E; i += blockDim.x) (&wcnt[0][0])[i] = 0;
  __syncthreads();
  const int64_t i = (int64_t)blockIdx.x * LH_CUDA_MOE_CHUNK + threadIdx.x;
  const int e = i < m ? ids[i] : -1;
  const unsigned peers = __match_any_sync(0xffffffffu, e);
  const int rank = __popc(peers & ((1u << lane) - 1u));
  if (e >= 0 && rank == 0) wcnt[w][e] = __popc(peers);
  __syncthreads();
  if (e < 0) return;
  int p = hist[(int64_t)blockIdx.x * E + e] + rank;
  for (int q = 0; q < w; q++) p += wcnt[q][e];
  pos[i] = p;
  src_row[p] = (int32_t)(i / K);
}

extern "C" cudaError_t lh_cuda_moe_plan(cudaStream_t st, const int32_t *ids, int64_t n, int K, int E, int32_t *hist,
                                        int32_t *offsets, int32_t *pos, int32_t *src_row) {
  if (E < 1 || E > MAX_E) return cudaErrorInvalidValue;
  const int64_t m = n * K;
  const int nchunk = (int)LH_CUDA_MOE_PLAN_CHUNKS(m);
  if (m <= 0) return cudaMemsetAsync(offsets, 0, (E + 1) * sizeof(int32_t), st);
  plan_hist_kernel<<<nchunk, LH_CUDA_MOE_CHUNK, 0, st>>>(ids, m, E, hist);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  plan_scan_kernel<<<1, 256, 0, st>>>(hist, nchunk, E, offsets);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  plan_scatter_kernel<<<nchunk, LH_CUDA_MOE_CHUNK, 0, st>>>(ids, m, K, E, hist, pos, src_row);
  return cudaGetLastError();
}

static __global__ void gather_kernel(const bf16 *__restrict__ x, const int32_t *__restrict__ rows, int div, int width,
                                     bf16 *__restrict__ out) {
  const int64_t i = blockIdx.x;
  const bf16 *src = x + (int64_t)(rows[i] / div) * width;
  bf16 *dst = out + i * width;
  if (width % 8 == 0) {
    for (int c = threadIdx.x; c < width / 8; c += blockDim.x)
      reinterpret_cast<uint4 *>(dst)[c] = reinterpret_cast<const uint4 *>(src)[c];
  } else {
    for (int c = threadIdx.x; c < width; c += blockDim.x) dst[c] = src[c];
  }
}

extern "C" cudaError_t lh_cuda_gather_rows(cudaStream_t st, const void *x, const int32_t *rows, int div, int64_t m,
                                           int width, void *out) {
  if (m <= 0) return cudaSuccess;
  gather_kernel<<<(unsigned)m, 256, 0, st>>>((const bf16 *)x, rows, div, width, (bf16 *)out);
  return cudaGetLastError();
}

static __global__ void swiglu_kernel(const bf16 *__restrict__ gu, int64_t total, int I, bf16 *__restrict__ act) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / I, c = i % I;
    float g = lh_bf(gu[r * 2 * I + c]), u = lh_bf(gu[r * 2 * I + I + c]);
    act[i] = lh_tobf(lh_silu(g) * u);
  }
}

extern "C" cudaError_t lh_cuda_swiglu(cudaStream_t st, const void *gu, int64_t m, int I, void *act) {
  int64_t total = m * I;
  if (total <= 0) return cudaSuccess;
  int64_t blocks = (total + 255) / 256;
  if (blocks > 132 * 16) blocks = 132 * 16;
  swiglu_kernel<<<(unsigned)blocks, 256, 0, st>>>((const bf16 *)gu, total, I, (bf16 *)act);
  return cudaGetLastError();
}

static __global__ void combine_kernel(const bf16 *__restrict__ y, const int32_t *__restrict__ pos,
                                      const float *__restrict__ wts, int K, int width, bf16 *__restrict__ out) {
  const int64_t t = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {
    float a = 0.0f;
    for (int k = 0; k < K; k++) a += wts[t * K + k] * lh_bf(y[(int64_t)pos[t * K + k] * width + c]);
    out[t * width + c] = lh_tobf(a);
  }
}

extern "C" cudaError_t lh_cuda_moe_combine(cudaStream_t st, const void *y, const int32_t *pos, const float *wts,
                                           int64_t n, int K, int width, void *out) {
  if (n <= 0) return cudaSuccess;
  combine_kernel<<<(unsigned)n, 256, 0, st>>>((const bf16 *)y, pos, wts, K, width, (bf16 *)out);
  return cudaGetLastError();
}
