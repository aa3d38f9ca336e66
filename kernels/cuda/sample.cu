/* sample.cu — token choice on the GPU from fp32 logits that never leave the device: greedy argmax
 * and seeded sampling (temperature, top-k, top-p).
 *
 * The engine's host sampler (lh_sample) stays the reference; these exist so that batched decode on
 * the GPU need not copy vocab-sized logits to the host per step. Both are one CTA per row with
 * fixed-order reductions; a tie between equal logits always goes to the lower token id, so the
 * choice is a pure function of (logits, parameters, u).
 *
 * Sampling follows engine/sample.c's lh_sample step for step: candidates in (logit desc, id asc)
 * order (found by repeated block-wide argmax, at most 256 of them), cut to top_k, probabilities
 * exp((l - l_0) / T) in double, top_p keeps the shortest prefix whose mass reaches top_p, and the
 * token is the first whose cumulative mass exceeds u times the kept mass. So with the same u the
 * GPU picks lh_sample's token whenever 1 <= top_k <= 256; with top_k = 0 (all tokens on the host)
 * the GPU considers the 256 most likely only.
 */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

#define ST 1024
#define MAXC 256

/* (v, id) beats (bv, bid) in (value desc, id asc) order. NaN never beats anything. */
static __device__ __forceinline__ bool better(float v, int id, float bv, int bid) {
  return v > bv || (v == bv && id < bid);
}

static __device__ void block_argmax(float &v, int &id, float *sv, int *si) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
  __syncthreads();
  if (lane == 0) sv[w] = v, si[w] = id;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? sv[lane] : -INFINITY;
  id = lane < (int)(blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(0xffffffffu, v, o);
    int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (better(ov, oi, v, id)) v = ov, id = oi;
  }
}

static __global__ void argmax_kernel(const float *__restrict__ logits, int vocab, int32_t *__restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float *row = logits + (int64_t)blockIdx.x * vocab;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    float v = row[i];
    if (better(v, i, bv, bi)) bv = v, bi = i;
  }
  block_argmax(bv, bi, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
}

extern "C" cudaError_t lh_cuda_argmax(cudaStream_t st, const float *logits, int rows, int vocab, int32_t *out) {
  if (rows <= 0) return cudaSuccess;
  argmax_kernel<<<rows, ST, 0, st>>>(logits, vocab, out);
  return cudaGetLastError();
}

static __global__ void sample_kernel(const float *__restrict__ logits, int vocab, float temperature, int top_k,
                                     float top_p, const double *__restrict__ u, int32_t *__restrict__ out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float cv[MAXC];
  __shared__ int ci[MAXC];
  __shared__ int nc;
  const float *row = logits + (int64_t)blockIdx.x * vocab;
  const int k = top_k <= 0 || top_k > MAXC ? MAXC : (top_k < vocab ? top_k : vocab);
  float pv = INFINITY;
  int pi = -1;
  if (threadIdx.x == 0) nc = 0;
  for (int c = 0; c < k; c++) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      float v = row[i];
      if (v > -INFINITY && better(pv, pi, v, i) && better(v, i, bv, bi)) bv = v, bi = i; /* after the last pick */
    }
    block_argmax(bv, bi, sv, si);
    if (bi == 0x7fffffff) break; /* fewer finite logits than k */
    if (threadIdx.x == 0) cv[c] = bv, ci[c] = bi, nc = c + 1;
    pv = bv, pi = bi;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  /* At most 256 candidates: one thread, in order, in double, as lh_sample does on the host. */
  int n = nc;
  if (n == 0) {
    out[blockIdx.x] = 0;
    return;
  }
  const double t = (double)temperature, mx = cv[0];
  double sum = 0;
  for (int c = 0; c < n; c++) sum += exp(((double)cv[c] - mx) / t);
  if (top_p > 0.0f && top_p < 1.0f) {
    double acc = 0;
    int keep = n;
    for (int c = 0; c < n; c++) {
      acc += exp(((double)cv[c] - mx) / t) / sum;
      if (acc >= top_p) {
        keep = c + 1;
        break;
      }
    }
    n = keep;
    sum = 0;
    for (int c = 0; c < n; c++) sum += exp(((double)cv[c] - mx) / t);
  }
  const double target = u[blockIdx.x] * sum;
  double acc = 0;
  int pick = ci[n - 1];
  for (int c = 0; c < n; c++) {
    acc += exp(((double)cv[c] - mx) / t);
    if (target < acc) {
      pick = ci[c];
      break;
    }
  }
  out[blockIdx.x] = pick;
}

extern "C" cudaError_t lh_cuda_sample(cudaStream_t st, const float *logits, int rows, int vocab, float temperature,
                                      int top_k, float top_p, const double *u, int32_t *out) {
  if (rows <= 0) return cudaSuccess;
  if (!(temperature > 0.0f)) return lh_cuda_argmax(st, logits, rows, vocab, out);
  sample_kernel<<<rows, ST, 0, st>>>(logits, vocab, temperature, top_k, top_p, u, out);
  return cudaGetLastError();
}
