/* wgmma.cuh — Hopper's warpgroup MMA (wgmma.mma_async, sm_90a only) for the kernels that use it:
 * bf16 x bf16 -> fp32, both operands in shared memory, described by 64-bit matrix descriptors.
 *
 * Everything here is PTX ISA 8.0 "asynchronous warpgroup level matrix" (section 9.7.15); the rules
 * the callers rely on:
 *   - A warpgroup is 4 consecutive warps starting at a multiple of 4; every thread of it issues
 *     the same wgmma, fence, commit and wait.
 *   - The accumulator fragment of m64nNk16 (fp32): warp wi of the group holds rows 16 wi .. 16 wi + 15;
 *     with g = lane / 4, t = lane % 4, d[4 j + 0, 1] = (row 16 wi + g, cols 8 j + 2 t, + 1) and
 *     d[4 j + 2, 3] = the same columns of row 16 wi + g + 8 (j < N / 8): mma.sync's C layout, one
 *     8-column strip after another.
 *   - Shared memory written with ordinary stores must be followed by lh_fence_proxy_async() in the
 *     writing threads and a barrier before a wgmma reads it.
 *   - lh_wgmma_fence() before the first wgmma of a sequence and after the accumulators were touched
 *     by other instructions; lh_wgmma_commit() closes a group; lh_wgmma_wait<N>() waits until at
 *     most N groups are in flight (groups finish in order). The accumulators must not be read
 *     between a wgmma and the wait that covers it; lh_wgmma_hold keeps the compiler from moving
 *     such reads.
 *
 * Two shared-memory layouts, each usable with its columns as K (K-major) or with its rows as K
 * (MN-major, the transposed operand):
 *   - tiled, no swizzle (for matrices threads write from accumulators): "core matrices" of 8 rows
 *     x 16 bytes (8 bf16) stored as 128 contiguous bytes; a row-major R x C matrix has element
 *     (r, c) at bf16 offset ((r / 8) * (C / 8) + c / 8) * 64 + (r % 8) * 8 + c % 8
 *     (lh_wgmma_desc_k, lh_wgmma_desc_mn);
 *   - 128-byte swizzled (what a TMA box of 64 bf16 columns writes with CU_TENSOR_MAP_SWIZZLE_128B):
 *     lh_wgmma_desc_k_sw128, lh_wgmma_desc_mn_sw128.
 * The mbarrier and TMA wrappers at the end serve the loads into the swizzled layout.
 * One asm statement per shape (m64n32, m64n64, m64n128): the same pattern at 16, 32 and 64
 * accumulator registers.
 */
#ifndef LH_KERNELS_CUDA_WGMMA_CUH
#define LH_KERNELS_CUDA_WGMMA_CUH

#include <stdint.h>

/* Descriptor of a no-swizzle operand: start address, leading- and stride-dimension byte offsets. */
static __device__ __forceinline__ uint64_t lh_wgmma_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
/* Tiled storage with C columns used K-major (rows are M or N, columns K), from the core matrix at
 * (row r0, column k0), both multiples of 8: the next 8 columns (K) are 128 bytes on, the next 8 rows
 * 16 C bytes on. */
static __device__ __forceinline__ uint64_t lh_wgmma_desc_k(uint32_t base, int C, int r0, int k0) {
  return lh_wgmma_desc(base + (uint32_t)((r0 / 8) * 16 * C + (k0 / 8) * 128), 128, 16 * C);
}
/* Tiled storage with C columns used MN-major (rows are K, columns M or N), from (row k0, column
 * c0): leading (K) offset = the next 8 rows, 16 C bytes; stride (M/N) offset = the next 8 columns,
 * 128 bytes. PTX's canonical no-swizzle MN-major layout ((8,1,m),(8,k)):((1,8,SBO),(8,LBO)). */
static __device__ __forceinline__ uint64_t lh_wgmma_desc_mn(uint32_t base, int C, int k0, int c0) {
  return lh_wgmma_desc(base + (uint32_t)((k0 / 8) * 16 * C + (c0 / 8) * 128), 16 * C, 128);
}

/* 128-byte swizzled storage (the layout a TMA box of 64 bf16 columns x R rows writes with
 * CU_TENSOR_MAP_SWIZZLE_128B; every box 1024-byte aligned): rows of 128 bytes, the 16-byte chunks
 * of row r permuted by XOR with r % 8; a matrix wider than 64 columns is several boxes, box_bytes
 * apart. K-major (rows M or N, columns K): from row r0 (a multiple of 8), the k16 step at column k0:
 * the box, then 32 bytes per 16 columns within it; stride (8 rows) 1024 bytes. MN-major (rows K,
 * columns M or N): from row k0, box c0 / 64; leading offset (the next 64 columns) box_bytes,
 * stride (the next 8 rows) 1024 bytes. PTX's canonical 128B layouts ((8,m),(T,2k)):((8T,SBO),(1,T))
 * and ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)). */
static __device__ __forceinline__ uint64_t lh_wgmma_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return lh_wgmma_desc(addr, lbo, sbo) | (1ull << 62);
}
static __device__ __forceinline__ uint64_t lh_wgmma_desc_k_sw128(uint32_t base, int box_bytes, int r0, int k0) {
  return lh_wgmma_sw128(base + (uint32_t)((k0 / 64) * box_bytes + (r0 / 8) * 1024 + (k0 % 64) * 2), 16, 1024);
}
static __device__ __forceinline__ uint64_t lh_wgmma_desc_mn_sw128(uint32_t base, int box_bytes, int k0, int c0) {
  return lh_wgmma_sw128(base + (uint32_t)((c0 / 64) * box_bytes + (k0 / 8) * 1024), box_bytes, 1024);
}

static __device__ __forceinline__ void lh_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ __forceinline__ void lh_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void lh_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Makes this thread's ordinary shared-memory stores visible to the async proxy (wgmma, TMA). */
static __device__ __forceinline__ void lh_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* d (m64n64, fp32) = A B + (scale_d ? d : 0) with A from registers: a[4] is this thread's bf16 pairs
 * of a 64 x 16 A in the accumulator layout (a wgmma accumulator's 16 columns packed: rows g and
 * g + 8 of the warp's 16, columns 2 t4 and 8 + 2 t4); B bf16 in shared memory by descriptor, tb as
 * in lh_wgmma_m64n64. a must not change until the wgmma has completed. */
template <int TB>
static __device__ __forceinline__ void lh_wgmma_m64n64_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db,
                                                          int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
}
/* stmatrix .trans: four 8 x 8 bf16 matrices to shared memory, transposed; register i holds, in lane
 * l, the pair at row l / 4, columns 2 (l % 4) and + 1 of matrix i (an accumulator's 8-column group,
 * packed), and lane l gives the address of stored row l % 8 of matrix l / 8, which is column l % 8
 * of the matrix as held (16 contiguous bytes). */
static __device__ __forceinline__ void lh_stsm_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                        uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
/* setmaxnreg: this warpgroup's registers a thread, raised (the state warps) or lowered (producers). */
template <int N>
static __device__ __forceinline__ void lh_setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
static __device__ __forceinline__ void lh_setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Keeps the compiler from moving reads or writes of d across a wgmma that is in flight. */
template <int NA>
static __device__ __forceinline__ void lh_wgmma_hold(float (&d)[NA]) {
#pragma unroll
  for (int i = 0; i < NA; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (m64n32, fp32) = A B + (scale_d ? d : 0); A and B bf16 in shared memory by descriptor, ta / tb: the
 * operand is MN-major (1) or K-major (0). */
template <int TA, int TB>
static __device__ __forceinline__ void lh_wgmma_m64n32(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15 "
      "}, %16, %17, p, 1, 1, %19, %20;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

/* d (m64n64, fp32) = A B + (scale_d ? d : 0); A and B bf16 in shared memory by descriptor, ta / tb: the
 * operand is MN-major (1) or K-major (0). */
template <int TA, int TB>
static __device__ __forceinline__ void lh_wgmma_m64n64(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

/* d (m64n128, fp32) = A B + (scale_d ? d : 0); A and B bf16 in shared memory by descriptor, ta / tb: the
 * operand is MN-major (1) or K-major (0). */
template <int TA, int TB>
static __device__ __forceinline__ void lh_wgmma_m64n128(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}

/* ---- mbarrier and TMA (cp.async.bulk.tensor), for the kernels that load through the tensor
 * memory accelerator. A barrier's phase completes when its arrivals and expected bytes are in. */
static __device__ __forceinline__ void lh_mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* One arrival that also expects bytes more to land (from TMA) before the phase completes. */
static __device__ __forceinline__ void lh_mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/* Waits until the phase with this parity (0 for the first completion, then 1, 0, ...) is complete. */
static __device__ __forceinline__ void lh_mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LAB_WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
/* A 2-D box of a tensor map (x: the inner coordinate, in elements) into shared memory at dst,
 * counted on barrier bar. */
static __device__ __forceinline__ void lh_tma_load2(uint32_t dst, const void *tmap, int x, int y, uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::
                   "r"(dst),
               "l"(tmap), "r"(x), "r"(y), "r"(bar)
               : "memory");
}
/* A 2-D box from shared memory at src to a tensor map's global tensor (coordinates as in
 * lh_tma_load2; the part of the box outside the tensor is not written), as one bulk async-group of
 * the issuing thread. The writing threads fence (lh_fence_proxy_async) and meet before it is issued. */
static __device__ __forceinline__ void lh_tma_store2(const void *tmap, int x, int y, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               "cp.async.bulk.commit_group;\n" ::"l"(tmap),
               "r"(x), "r"(y), "r"(src)
               : "memory");
}
/* Waits until the issuing thread's bulk stores have read their shared memory (it may be rewritten). */
static __device__ __forceinline__ void lh_tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* Waits until the issuing thread's bulk stores are complete (their writes made). */
static __device__ __forceinline__ void lh_tma_store_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

#endif
