/* common.cuh — device helpers shared by the CUDA kernels: bf16 conversion, warp and block
 * reductions, and thin wrappers over the sm_80 tensor-core instructions (ldmatrix, mma.sync
 * m16n8k16 bf16 -> fp32, cp.async) that the attention kernels are built from.
 *
 * Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), which every kernel here relies on:
 *   A 16x16 (row-major): a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
 *   B 16x8  (k x n):     b0 = (k 2t..2t+1, n g)  b1 = (k 2t+8..2t+9, n g)
 *   C 16x8  (fp32):      c0,c1 = (g, 2t..2t+1)   c2,c3 = (g+8, 2t..2t+1)
 * Nothing in this file allocates, synchronises the device or uses atomics.
 */
#ifndef LH_KERNELS_CUDA_COMMON_CUH
#define LH_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float lh_bf(bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ bf16 lh_tobf(float x) { return __float2bfloat16_rn(x); }

/* Fast exp and division (2 ulp): IEEE division is a long instruction sequence, and these run on
 * every q/k/v element; the results are rounded to bf16 right after. */
static __device__ __forceinline__ float lh_silu(float x) { return __fdividef(x, 1.0f + __expf(-x)); }
static __device__ __forceinline__ float lh_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }

/* Two floats to a packed bf16x2 register (lo in the low half). */
static __device__ __forceinline__ uint32_t lh_pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

static __device__ __forceinline__ float lh_warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

static __device__ __forceinline__ float lh_warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* Sum over the block in a fixed tree order (deterministic); every thread gets the result.
 * scratch: at least 32 floats of shared memory; blockDim.x a multiple of 32. */
static __device__ __forceinline__ float lh_block_sum(float v, float *scratch) {
  int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = lh_warp_sum(v);
  __syncthreads(); /* scratch may still be read from a previous call */
  if (lane == 0) scratch[w] = v;
  __syncthreads();
  float r = lane < nw ? scratch[lane] : 0.0f;
  return lh_warp_sum(r);
}

static __device__ __forceinline__ uint32_t lh_smem_addr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

static __device__ __forceinline__ void lh_ldsm_x4(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                  const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(lh_smem_addr(p)));
}

static __device__ __forceinline__ void lh_ldsm_x4_t(uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3,
                                                    const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(lh_smem_addr(p)));
}

/* d += a * b on one m16n8k16 tile; d is 4 fp32 accumulators. */
static __device__ __forceinline__ void lh_mma(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Address for this lane of an ldmatrix.x4 that loads the A fragment of the 16x16 tile at (r0, c0) of
 * a row-major bf16 matrix with row stride ld (elements). */
static __device__ __forceinline__ const bf16 *lh_frag_a_addr(const bf16 *base, int ld, int r0, int c0) {
  int lane = threadIdx.x & 31;
  return base + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + c0 + (lane >> 4) * 8;
}

/* For B = M^T where M is row-major [n x k] (keys x dims): one x4 gives b0,b1 of n-tile n0 and b0,b1
 * of n-tile n0+8 for k-step k0. */
static __device__ __forceinline__ const bf16 *lh_frag_bt_addr(const bf16 *base, int ld, int n0, int k0) {
  int lane = threadIdx.x & 31, j = lane >> 3;
  return base + (n0 + (lane & 7) + (j >> 1) * 8) * ld + k0 + (j & 1) * 8;
}

/* For B stored row-major [k x n] (used with ldmatrix.trans): b0,b1 of n-tile n0 and of n0+8. */
static __device__ __forceinline__ const bf16 *lh_frag_b_addr(const bf16 *base, int ld, int k0, int n0) {
  int lane = threadIdx.x & 31, j = lane >> 3;
  return base + (k0 + (lane & 7) + (j & 1) * 8) * ld + n0 + (j >> 1) * 8;
}

/* For A = M^T where M is row-major [k x m] (used with ldmatrix.trans): a0..a3 of the tile at
 * (m0, k0). */
static __device__ __forceinline__ const bf16 *lh_frag_at_addr(const bf16 *base, int ld, int m0, int k0) {
  int lane = threadIdx.x & 31, j = lane >> 3;
  return base + (k0 + (lane & 7) + (j >> 1) * 8) * ld + m0 + (j & 1) * 8;
}

/* 16-byte asynchronous global -> shared copy; when !valid the destination is zero-filled. */
static __device__ __forceinline__ void lh_cp_async16(void *smem, const void *gmem, bool valid) {
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(lh_smem_addr(smem)), "l"(gmem), "r"(n) : "memory");
}
static __device__ __forceinline__ void lh_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
static __device__ __forceinline__ void lh_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif
