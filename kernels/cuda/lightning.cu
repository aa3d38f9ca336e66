/* lightning.cu — lightning (decayed linear) attention: the blocked prefill kernels on tensor cores and
 * the token-recurrent kernel used for decode and for head sizes the blocked kernels do not cover.
 *
 * The math (docs/design.md, HF MiniMaxLightningAttention): per head with decay s,
 *     S_t = exp(-s) S_{t-1} + k_t^T v_t,   o_t = q_t S_t,   q, k, v = SiLU(projection).
 * Blocked over T = 64 tokens with S the state entering the block (i, j rows within the block):
 *     O = diag(exp(-s(i+1))) Q S  +  ((Q K^T) * D) V,   D_ij = exp(-s(i-j)) for j <= i, else 0,
 *     S' = exp(-s cb) S + K^T diag(exp(-s(cb-1-j))) V      (cb = rows in the block).
 * The function of the tokens is the same whatever the block boundaries, so a chunk can start at any
 * position: the kernel blocks each segment from its own first row.
 *
 * Three blocked kernels, each described at its definition: for d = 128 (the real model's heads)
 * lightning_wg on sm_90 (warpgroup MMA and TMA) and lightning_ws elsewhere (mma.sync, the work split
 * between producer and state warps); lightning_blocked for d = 32 and 64 (and 128 with LW_WS 0),
 * described here. All three use the same blocks and the same cut. How each came to its form, the
 * variants measured and dropped and the timings are in bench/NOTES.md, "Kernel notes: lightning.cu".
 *
 * lightning_blocked: one CTA of d/8 warps (16 at d = 128) per (head, part, segment)
 * walks its rows block by block, keeping the whole d x d fp32 state in mma accumulator registers,
 * transposed (S^T: v dims as rows). That layout is the B-fragment layout of S itself, so Q S takes
 * S straight from the registers, as two bf16 halves (hi + lo, made there) so that the product keeps
 * about 16 bits of the fp32 state rather than bf16's 8; S never goes through shared memory. Each
 * warp holds half of the k dims for 16 v dims, so Q S is computed as two partial sums that a warp
 * pair adds through shared memory. The next block's raw q/k/v are copied into shared memory with
 * cp.async at the start of a block, a whole block ahead of their SiLU, which is placed among the
 * state update's MMAs. P = (Q K^T) * D and kd * V are rounded to bf16 for the tensor cores, as an
 * all-bf16 model would.
 *
 * With one CTA per head, 64 heads would leave half of an H200's 132 SMs idle, so where the grid
 * would be short of SMs a segment of at least LH_CUDA_LIGHTNING_SPLIT_MIN rows is cut in two
 * parts at row x (a multiple of 64, about 0.62 n; 0.72 n in lightning_ws): part 0 runs rows
 * [0, x) from the entering state; part 1 first advances the state over [0, x) with the state
 * update alone (SiLU of k and v and K^T (kd V)), then runs rows [x, n) and writes the final state.
 * Part 1's state at x comes from the same instructions in the same order as part 0's would, so
 * the output is the same bits whether or not a segment is cut (gpu_parity checks it). Part 0
 * reads the entering state that part 1 overwrites at the end: part 0 counts sync[seg * H + h] up
 * once it has read it, part 1 waits for that before writing and sets it back to 0. That wait
 * relies on part 0 (the lower block index) having been started, as CUB's decoupled look-back does.
 * Those flags are the only atomics: every output and state element is written by one thread in a
 * fixed order, so results are bitwise reproducible.
 * lightning_wg's hand-over (its default on sm_90, lh_cuda_lightning_handover): part 1's advance
 * over [0, x) would read k and v a second time while part 0 reads them, and the two parts together
 * would ask the DRAM for more than it gives. Instead part 0 publishes its state S_m at a row m (about
 * 0.31 x) in the state's place, and part 1 advances from a zero state over [m, x) only, then waits
 * for S_m and adds exp(-s (x - m)) S_m. The cut then sits earlier (about 0.59 n), and fewer bytes
 * cross the DRAM. The sum is reassociated: a cut segment then matches the uncut one to the rounding
 * of the fp32 state (gpu_parity bounds the difference: 2e-3 relative on the output, 1e-5 on the
 * state), not bit for bit; the same segments and the same GPU still give the same bits every run.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/wgmma.cuh"

#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include <cuda.h>
#include <cudaTypedefs.h>

#define LT 64 /* tokens per block */
/* Switches for comparisons (bench/NOTES.md, "Kernel notes: lightning.cu"), not for production: */
#ifndef LW_WS
#define LW_WS 1 /* d = 128 through lightning_ws (0: through lightning_blocked<128>) */
#endif
#ifndef LW_QS_LO
#define LW_QS_LO 0 /* lightning_ws: Q S with S as hi + lo bf16 halves, as lightning_blocked (0: S rounded) */
#endif
#ifndef LW_WG_TANH
#define LW_WG_TANH 1 /* lightning_wg's SiLU: 1, h + h tanh(h) with h = x / 2 (one MUFU op); 0, lw_silu (two) */
#endif

/* Shared memory of the blocked kernel, in bf16 elements: q, k, v, kd*v (LT x (D+8)), P (LT x
 * (LT+8)); then the fp32 exchange of the two column halves' partial Q S products (X, D/16 warp
 * pairs x 2 warps x 16 floats x 32 lanes); then exp(-s k) for k = 0..LT as floats. 111 KB at D = 128. */
template <int D>
struct lsmem {
  static constexpr int LD = D + 8, PLD = LT + 8;
  static constexpr int q = 0, k = q + LT * LD, v = k + LT * LD, vd = v + LT * LD, p = vd + LT * LD;
  static constexpr int x = p + LT * PLD;                  /* bf16 offset of X (a multiple of 8) */
  static constexpr int xfloats = (D / 16) * 2 * 16 * 32;  /* X's floats */
  static constexpr int raw = x + 2 * xfloats;             /* the raw q, k, v stage: 3 x LT x D */
  static constexpr int total = raw + 3 * LT * D;          /* in bf16 elements */
};

/* SiLU as x * rcp(1 + 2^(-x log2 e)) with the approximate, denormal-flushing ex2 and rcp: 5
 * instructions (2 of them MUFU); __expf and __fdividef add range checks that cost 6 more. Relative
 * error about 2^-22, far below the bf16 rounding that follows; large |x| give x and -0, and a NaN
 * stays a NaN. The MUFU rcp stays: Newton steps on the FMA pipe instead do not make the kernels
 * faster (bench/NOTES.md). */
static __device__ __forceinline__ float lw_silu(float x) {
  float e, r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return x * r;
}
/* 8 bf16 (one 16-byte chunk) through SiLU, rounded back to bf16. */
static __device__ __forceinline__ uint4 lw_silu8(uint4 u) {
  const uint32_t *w = &u.x;
  uint4 r;
  uint32_t *rp = &r.x;
#pragma unroll
  for (int i = 0; i < 4; i++)
    rp[i] = lh_pack_bf16(lw_silu(__uint_as_float(w[i] << 16)), lw_silu(__uint_as_float(w[i] & 0xffff0000u)));
  return r;
}
/* lightning_wg's SiLU (LW_WG_TANH): h + h tanh(h) with h = x / 2, one MUFU op where lw_silu takes
 * two (ex2 and rcp), which matters because lightning_wg's producers are bound by the MUFU pipe with
 * lw_silu (bench/NOTES.md, "Kernel notes: lightning.cu"). tanh.approx has a
 * relative error of about 2^-11, so the result is within about |x| 2^-12 of SiLU(x): under a bf16
 * ulp where x > -2, and for x < -3, where SiLU(x) is near 0, off by several of its own (small) ulps,
 * an absolute error below that of rounding an O(1) value to bf16. Large |x| give x and -0; a NaN
 * stays a NaN. */
[[maybe_unused]] static __device__ __forceinline__ float lw_silu_wg(float x) {
#if LW_WG_TANH
  float t;
  const float h = 0.5f * x;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return __fmaf_rn(h, t, h);
#else
  return lw_silu(x);
#endif
}
/* 8 bf16 through lw_silu_wg, times f where SCALE, rounded once to bf16. With the tanh form, h = x / 2
 * is taken of both bf16 halves of a word by one mul.bf16x2 (exact: a power of two), one instruction
 * where two FMULs would do; the results are the same bits. */
template <bool SCALE>
[[maybe_unused]] static __device__ __forceinline__ uint4 lw_silu8_wg(uint4 u, float f) {
  const uint32_t *w = &u.x;
  uint4 r;
  uint32_t *rp = &r.x;
#pragma unroll
  for (int i = 0; i < 4; i++) {
#if LW_WG_TANH && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    uint32_t hw;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(hw) : "r"(w[i]), "r"(0x3f003f00u)); /* (x1 / 2, x0 / 2) */
    const float h0 = __uint_as_float(hw << 16), h1 = __uint_as_float(hw & 0xffff0000u);
    float t0, t1;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t0) : "f"(h0));
    asm("tanh.approx.f32 %0, %1;" : "=f"(t1) : "f"(h1));
    float a = __fmaf_rn(h0, t0, h0), b = __fmaf_rn(h1, t1, h1);
#else
    float a = lw_silu_wg(__uint_as_float(w[i] << 16)), b = lw_silu_wg(__uint_as_float(w[i] & 0xffff0000u));
#endif
    if (SCALE) a *= f, b *= f;
    rp[i] = lh_pack_bf16(a, b);
  }
  return r;
}
/* u where ok, else zeros, without a branch. */
[[maybe_unused]] static __device__ __forceinline__ uint4 lw_sel4(bool ok, uint4 u) {
  return make_uint4(ok ? u.x : 0u, ok ? u.y : 0u, ok ? u.z : 0u, ok ? u.w : 0u);
}
/* 8 bf16 times a scale, rounded to bf16. */
static __device__ __forceinline__ uint4 lw_scale8(uint4 u, float f) {
  const uint32_t *w = &u.x;
  uint4 r;
  uint32_t *rp = &r.x;
#pragma unroll
  for (int i = 0; i < 4; i++)
    rp[i] = lh_pack_bf16(__uint_as_float(w[i] << 16) * f, __uint_as_float(w[i] & 0xffff0000u) * f);
  return r;
}

/* acc[0 .. 2 NP) += a (one 16 x 16 A fragment) times the 16 x 16 NP strip of B at (k0, n0), where
 * B is row-major [k x n] bf16 with row stride ld (read with ldmatrix.trans). */
template <int NP>
static __device__ __forceinline__ void mma_strip(float (*acc)[4], const uint32_t *a, const bf16 *B, int ld, int k0,
                                                 int n0) {
#pragma unroll
  for (int np = 0; np < NP; np++) {
    uint32_t b0, b1, b2, b3;
    lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(B, ld, k0, n0 + 16 * np));
    lh_mma(acc[2 * np], a, b0, b1);
    lh_mma(acc[2 * np + 1], a, b2, b3);
  }
}

/* Two elements of the fp32 state as bf16 halves for Q S: hi is S truncated to bf16 (a byte
 * permute, no conversion op), lo = S - hi exactly, then rounded; hi + lo keeps about 16 bits. */
static __device__ __forceinline__ void lw_hi_lo(float x0, float x1, uint32_t &hi, uint32_t &lo) {
  const uint32_t u0 = __float_as_uint(x0), u1 = __float_as_uint(x1);
  hi = __byte_perm(u0, u1, 0x7632);
  lo = lh_pack_bf16(x0 - __uint_as_float(u0 & 0xffff0000u), x1 - __uint_as_float(u1 & 0xffff0000u));
}

/* One warp's tile of P = (Q K^T) * D: rows [ra, ra + 16), columns [ca, ca + 8 NA) of the block,
 * Q and K bf16 in shared memory with row stride ld, dec[k] = exp(-s k); written to Ps (row stride
 * pld) as bf16. 16-column tiles entirely above the diagonal are zero and cost no MMA. */
template <int D, int NA>
static __device__ __forceinline__ void lw_scores(const bf16 *Qs, const bf16 *Ks, int ld, const float *dec, int ra,
                                                 int ca, int g, int t4, bf16 *Ps, int pld) {
  float acc[NA][4] = {};
  if (ca <= ra) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      uint32_t a[4];
      lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Qs, ld, ra, 16 * ks));
#pragma unroll
      for (int np = 0; np < NA / 2; np++) {
        if (ca + 16 * np > ra) break;
        uint32_t b0, b1, b2, b3;
        lh_ldsm_x4(b0, b1, b2, b3, lh_frag_bt_addr(Ks, ld, ca + 16 * np, 16 * ks));
        lh_mma(acc[2 * np], a, b0, b1);
        lh_mma(acc[2 * np + 1], a, b2, b3);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NA; nt++) {
    float *f = acc[nt];
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int dij = ra + g + 8 * (e >> 1) - (ca + 8 * nt + 2 * t4 + (e & 1));
      f[e] = dij >= 0 ? f[e] * dec[dij] : 0.0f;
    }
    const int col = ca + 8 * nt + 2 * t4;
    *reinterpret_cast<uint32_t *>(Ps + (ra + g) * pld + col) = lh_pack_bf16(f[0], f[1]);
    *reinterpret_cast<uint32_t *>(Ps + (ra + g + 8) * pld + col) = lh_pack_bf16(f[2], f[3]);
  }
}

/* Where a CTA of the blocked kernels walks: its segment and, when the segment is cut (see the top
 * of the file), the cut row x: part 0 (blockIdx.x) runs [0, x); part 1 advances over [0, x) and
 * runs [x, n). With a hand-over row m (lightning_wg, split_m > 0; 0 < m < x), part 1 advances
 * from a zero state over [m, x) only, and adds exp(-s (x - m)) S_m, the state part 0 publishes
 * when it has run [0, m). run is false for a CTA with nothing to do. */
struct lw_cut {
  lh_cuda_lseg seg;
  bool run, split;
  int64_t x, m;
};
static __device__ __forceinline__ lw_cut lw_cut_of(const lh_cuda_lseg *segs, int64_t split_min, int split_q,
                                                   int split_m = 0) {
  lw_cut c;
  c.seg = segs[blockIdx.z];
  const int64_t n = c.seg.nrows;
  c.split = gridDim.x > 1 && n >= split_min && n >= 2 * LT;
  c.run = n > 0 && (blockIdx.x == 0 || c.split);
  c.x = c.split ? (n * split_q / 1024) / LT * LT : n;
  c.m = c.split && split_m > 0 ? (c.x * split_m / 1024) / LT * LT : 0;
  if (c.m >= c.x) c.m = 0;
  return c;
}

/* The blocks a CTA of lightning_ws or lightning_wg walks, [0, nb): the first nadv (part 1's rows
 * [m, x)) only advance the state, the rest run rows [r_begin, r_end) in full. */
struct lw_walk {
  int nadv, nb;
  int64_t adv0, r_begin, r_end;
  bool writes_state; /* not part 0 of a cut segment */
  __device__ __forceinline__ lw_walk(const lw_cut &c, int part) {
    adv0 = part == 1 ? c.m : 0;
    nadv = part == 1 ? (int)((c.x - c.m) / LT) : 0;
    r_begin = part == 1 ? c.x : 0;
    r_end = part == 1 ? c.seg.nrows : c.x;
    nb = nadv + (int)((r_end - r_begin + LT - 1) / LT);
    writes_state = !c.split || part == 1;
  }
  __device__ __forceinline__ int64_t row0(int i) const {
    return i < nadv ? adv0 + (int64_t)i * LT : r_begin + (int64_t)(i - nadv) * LT;
  }
  __device__ __forceinline__ int rows(int i) const {
    if (i < nadv) return LT;
    const int64_t left = r_end - row0(i);
    return left < LT ? (int)left : LT;
  }
};

/* Named barriers (bar.sync waits, bar.arrive does not) over n threads; 0 is __syncthreads'. */
static __device__ __forceinline__ void lw_bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
static __device__ __forceinline__ void lw_bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
/* A cut segment's two parts share the entering state in global memory: part 0 calls
 * lw_cut_read_done once all its state threads (bar: their named barrier, 256 threads) hold it;
 * part 1 calls lw_cut_wait_read before it overwrites it, which also sets the flag back to 0. */
static __device__ __forceinline__ void lw_cut_read_done(int *flag, int bar, int tid) {
  lw_bar_sync(bar, 256);
  if (tid == 0) {
    __threadfence();
    atomicAdd(flag, 1);
  }
}
static __device__ __forceinline__ void lw_cut_wait_read(int *flag, int bar, int tid) {
  if (tid == 0) {
    while (atomicAdd(flag, 0) == 0) __nanosleep(200);
    atomicExch(flag, 0);
  }
  lw_bar_sync(bar, 256);
}

template <int D>
static __global__ void __launch_bounds__(D * 4, 1)
    lightning_blocked(const bf16 *__restrict__ qkv, int64_t qkv_stride, const lh_cuda_lseg *__restrict__ segs, int H,
                      const float *__restrict__ slope, bf16 *__restrict__ o, int64_t o_stride, int *sync,
                      int64_t split_min, int split_q) {
  typedef lsmem<D> L;
  constexpr int NW = D / 8, NT = NW * 32; /* warps and threads */
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *sm = reinterpret_cast<bf16 *>(smem_raw);
  bf16 *Qs = sm + L::q, *Ks = sm + L::k, *Vs = sm + L::v, *Vds = sm + L::vd, *Ps = sm + L::p;
  float4 *X = reinterpret_cast<float4 *>(sm + L::x);
  float *dec = reinterpret_cast<float *>(sm + L::total); /* dec[k] = exp(-s k), k = 0..LT */

  const lw_cut cut = lw_cut_of(segs, split_min, split_q);
  if (!cut.run) return;
  const int part = blockIdx.x, h = blockIdx.y;
  const lh_cuda_lseg seg = cut.seg;
  const int64_t n = seg.nrows, x = cut.x; /* part 0: [0, x); part 1: [x, n) */
  const bool split = cut.split;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const float s = slope[h];
  float *state = seg.state + (int64_t)h * D * D;
  const bf16 *base = qkv + (int64_t)h * 3 * D;
  if (tid <= LT) dec[tid] = expf(-s * (float)tid);

  /* Raw q/k/v of the next block: each thread copies C chunks of 16 bytes each of q, k and v into
   * its own slots of the raw stage with cp.async at the start of a block (rows past the block's
   * end are zero-filled), and reads back only those slots, so no barrier guards the stage. */
  constexpr int C = LT * D / 8 / NT; /* = 2 */
  uint4 *raw = reinterpret_cast<uint4 *>(sm + L::raw);
  auto rslot = [&](int which, int c) { return raw + (which * C + c) * NT + tid; };
  uint4 qr[C], kr[C], vr[C];
  auto fetch = [&](int64_t r0, int cb, bool with_q) {
#pragma unroll
    for (int c = 0; c < C; c++) {
      int idx = tid + c * NT, row = idx / (D / 8), col = (idx % (D / 8)) * 8;
      const bool ok = row < cb;
      const bf16 *p = base + (seg.row0 + r0 + (ok ? row : 0)) * qkv_stride + col;
      if (with_q) lh_cp_async16(rslot(0, c), p, ok);
      lh_cp_async16(rslot(1, c), p + D, ok);
      lh_cp_async16(rslot(2, c), p + 2 * D, ok);
    }
    lh_cp_async_commit();
  };
  /* Wait for this thread's copies, then SiLU into the registers (SiLU(0) = 0 for the zero rows). */
  auto act_piece = [&](int i, bool with_q) { /* piece i of 3 C: tensor i / C (q, k, v), chunk i % C */
    const int which = i / C, c = i % C;
    if (which == 0 && with_q) qr[c] = lw_silu8(*rslot(0, c));
    if (which == 1) kr[c] = lw_silu8(*rslot(1, c));
    if (which == 2) vr[c] = lw_silu8(*rslot(2, c));
  };
  auto activate = [&](bool with_q) {
    lh_cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < 3 * C; i++) act_piece(i, with_q);
  };
  auto stash = [&](int cb, bool with_q) {
#pragma unroll
    for (int c = 0; c < C; c++) {
      int idx = tid + c * NT, row = idx / (D / 8), col = (idx % (D / 8)) * 8;
      float kd = row < cb ? dec[cb - 1 - row] : 0.0f;
      if (with_q) *reinterpret_cast<uint4 *>(Qs + row * L::LD + col) = qr[c];
      *reinterpret_cast<uint4 *>(Ks + row * L::LD + col) = kr[c];
      if (with_q) *reinterpret_cast<uint4 *>(Vs + row * L::LD + col) = vr[c];
      *reinterpret_cast<uint4 *>(Vds + row * L::LD + col) = lw_scale8(vr[c], kd);
    }
  };

  /* Warp tiles. A (Q K^T, 64 x 64): 16 rows from ra, WA cols from ca. The state is held transposed,
   * S^T (v dims j x k dims i), in mma accumulators: warp w has the 16 rows j from rs and the D/2
   * columns i from cs; its partner (w + RT or w - RT) has the other half of i for the same j. The
   * accumulator layout of S^T is the B-fragment layout of S (k = i, n = j), so Q S takes S straight
   * from the registers: each warp computes the 64 x 16 strip O[:, rs..rs+16) over its half of i,
   * the two halves are summed through X, and each warp of the pair finishes two of the four 16-row
   * tiles of O (tiles {0, 3} and {1, 2}: the same causal P V work for both). */
  constexpr int WA = 256 / NW, NA = WA / 8, RT = D / 16, NC = D / 2 / 8, KI = NC / 2;
  static_assert(C == 2 && 2 * RT == NW && NC >= 2 && NC % 2 == 0 && NA % 2 == 0, "warp tiling");
  const int ra = 16 * (w & 3), ca = WA * (w >> 2);
  const int rs = 16 * (w % RT), upper = w / RT, cs = (D / 2) * upper;
  const int mine0 = upper ? 1 : 0, mine1 = upper ? 2 : 3; /* the O row tiles this warp finishes */
  /* X slot of this warp pair written by the lower (0) or upper (1) warp: 4 float4 per lane */
  auto xslot = [&](int writer) { return X + ((w % RT) * 2 + writer) * 4 * 32 + lane; };
  __syncthreads(); /* dec */

  /* acc_s[nt][e] = S^T[j][i] = S[i][j], j = rs + g + 8 (e >> 1), i = cs + 8 nt + 2 t4 + (e & 1):
   * its place in the [i][j] state, for the load here and the store at the end. */
  auto state_at = [&](int nt, int e) -> int64_t {
    return (int64_t)(cs + 8 * nt + 2 * t4 + (e & 1)) * D + rs + g + 8 * (e >> 1);
  };
  float acc_s[NC][4];
#pragma unroll
  for (int nt = 0; nt < NC; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc_s[nt][e] = state[state_at(nt, e)];
  if (split && part == 0) {
    __syncthreads(); /* every thread holds its share of the entering state */
    if (tid == 0) {
      __threadfence();
      atomicAdd(sync + blockIdx.z * H + h, 1);
    }
  }
  /* S^T = exp(-s cb) S^T + (kd V)^T K, from Vds and Ks. act (1: k and v, 2: q, k and v) also
   * activates the next block's raw rows, its pieces placed among the MMAs. */
  auto update_state = [&](int cbk, int act) {
    const float bd = dec[cbk];
    if (act) lh_cp_async_wait<0>();
#pragma unroll
    for (int nt = 0; nt < NC; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) acc_s[nt][e] *= bd;
#pragma unroll
    for (int ks = 0; ks < LT / 16; ks++) {
      uint32_t a[4];
      lh_ldsm_x4_t(a[0], a[1], a[2], a[3], lh_frag_at_addr(Vds, L::LD, rs, 16 * ks));
      mma_strip<NC / 2>(acc_s, a, Ks, L::LD, 16 * ks, cs);
      if (act) {
#pragma unroll
        for (int i = 0; i < 3 * C; i++)
          if (i * (LT / 16) / (3 * C) == ks) act_piece(i, act == 2);
      }
    }
  };

  int64_t r_begin = 0, r_end = x;
  if (part == 1) {
    /* Advance the state over [0, x): full blocks only (x is a multiple of LT). */
    const int nadv = (int)(x / LT);
    fetch(0, LT, false);
    activate(false);
    for (int blk = 0; blk < nadv; blk++) {
      stash(LT, false);
      __syncthreads();
      const bool more = blk + 1 < nadv;
      if (more) fetch((int64_t)(blk + 1) * LT, LT, false);
      else fetch(x, (int)(n - x < LT ? n - x : LT), true); /* the first block part 1 runs in full */
      update_state(LT, more ? 1 : 2);
      __syncthreads(); /* Ks and Vds are read */
    }
    r_begin = x, r_end = n;
  } else {
    fetch(0, (int)(r_end < LT ? r_end : LT), true);
    activate(true);
  }
  const bool writes_state = !split || part == 1;

  const int nblocks = (int)((r_end - r_begin + LT - 1) / LT);
  for (int blk = 0; blk < nblocks; blk++) {
    const int64_t r0 = r_begin + (int64_t)blk * LT;
    const int cbk = (int)(r_end - r0 < LT ? r_end - r0 : LT);
    stash(cbk, true);
    __syncthreads();
    const bool more = blk + 1 < nblocks;
    if (more) { /* the next block's raw rows, a whole block ahead of their SiLU */
      int64_t r1 = r0 + LT;
      fetch(r1, (int)(r_end - r1 < LT ? r_end - r1 : LT), true);
    }

    /* A: P = (Q K^T) * D -> Ps. */
    lw_scores<D, NA>(Qs, Ks, L::LD, dec, ra, ca, g, t4, Ps, L::PLD);

    /* B: the partial O[:, rs..rs+16) = Q[:, cs..cs+D/2) S[cs..cs+D/2, rs..rs+16) on two 16-row
     * tiles ta and tb of O, with S as hi + lo bf16 halves made in the registers: hi is S truncated
     * to bf16 (a bit mask and a byte permute, no conversion op), lo = S - hi exactly, then rounded;
     * hi + lo keeps about 16 bits of S. acc[m][jt]: rows 16 t + g (+8) of tile t = m ? tb : ta,
     * columns rs + 8 jt + 2 t4 (+1). First the two tiles the partner finishes (the lower warp gives
     * tiles 1 and 2, the upper 0 and 3), handed over through X[pair][slot][k][lane] (slot 0 written
     * by the lower warp), then this warp's own two, so only 16 accumulators are live at a time. */
    auto inter = [&](float (*acc)[2][4], int ta, int tb) {
#pragma unroll
      for (int kk = 0; kk < KI; kk++) {
        uint32_t bh[2][2], bl[2][2]; /* [jt][b0/b1] */
#pragma unroll
        for (int jt = 0; jt < 2; jt++)
#pragma unroll
          for (int bb = 0; bb < 2; bb++) {
            lw_hi_lo(acc_s[2 * kk + bb][2 * jt], acc_s[2 * kk + bb][2 * jt + 1], bh[jt][bb], bl[jt][bb]);
          }
#pragma unroll
        for (int m = 0; m < 2; m++) {
          uint32_t a[4];
          lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Qs, L::LD, 16 * (m ? tb : ta), cs + 16 * kk));
#pragma unroll
          for (int jt = 0; jt < 2; jt++) {
            lh_mma(acc[m][jt], a, bh[jt][0], bh[jt][1]);
            lh_mma(acc[m][jt], a, bl[jt][0], bl[jt][1]);
          }
        }
      }
    };
    {
      float gv[2][2][4] = {};
      inter(gv, upper ? 0 : 1, upper ? 3 : 2);
      float4 *xo = xslot(upper);
#pragma unroll
      for (int m = 0; m < 2; m++)
#pragma unroll
        for (int jt = 0; jt < 2; jt++) xo[(2 * m + jt) * 32] = make_float4(gv[m][jt][0], gv[m][jt][1], gv[m][jt][2], gv[m][jt][3]);
    }
    float fo[2][2][4] = {}; /* this warp's tiles mine0, mine1 */
    inter(fo, mine0, mine1);
    __syncthreads(); /* Ps and X complete */
    {
      /* The lower half's partial first, then the upper's, then the query rows' decay. */
      const float4 *xi = xslot(1 - upper);
#pragma unroll
      for (int m = 0; m < 2; m++) {
        const int tt = m ? mine1 : mine0;
        const float qa = dec[16 * tt + g + 1], qb = dec[16 * tt + g + 9];
#pragma unroll
        for (int jt = 0; jt < 2; jt++) {
          const float4 p = xi[(2 * m + jt) * 32];
          float *f = fo[m][jt];
          f[0] = (upper ? p.x + f[0] : f[0] + p.x) * qa, f[1] = (upper ? p.y + f[1] : f[1] + p.y) * qa;
          f[2] = (upper ? p.z + f[2] : f[2] + p.z) * qb, f[3] = (upper ? p.w + f[3] : f[3] + p.w) * qb;
        }
      }
    }
    /* O += P V on the finished tiles: P's rows 16 tt .. 16 tt + 15 are zero past column 16 tt + 15. */
#pragma unroll
    for (int m = 0; m < 2; m++) {
      const int tt = m ? mine1 : mine0;
#pragma unroll
      for (int ks = 0; ks < LT / 16; ks++) {
        if (ks > tt) break;
        uint32_t a[4];
        lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Ps, L::PLD, 16 * tt, 16 * ks));
        mma_strip<1>(fo[m], a, Vs, L::LD, 16 * ks, rs);
      }
    }
#pragma unroll
    for (int m = 0; m < 2; m++) {
      const int tt = m ? mine1 : mine0;
      const int i0 = 16 * tt + g, i1 = i0 + 8;
#pragma unroll
      for (int jt = 0; jt < 2; jt++) {
        int col = h * D + rs + 8 * jt + 2 * t4;
        if (i0 < cbk)
          *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i0) * o_stride + col) =
              lh_pack_bf16(fo[m][jt][0], fo[m][jt][1]);
        if (i1 < cbk)
          *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i1) * o_stride + col) =
              lh_pack_bf16(fo[m][jt][2], fo[m][jt][3]);
      }
    }

    /* C: the state for the next block (not needed after part 0's last block). */
    const bool last = blk + 1 == nblocks;
    if (!last || writes_state) update_state(cbk, more ? 2 : 0); /* and the next block's q, k, v */
    __syncthreads(); /* every read of Q, K, V, Vd, P and X in this block is done */
  }

  if (!writes_state) return;
  if (split) {
    if (tid == 0) {
      while (atomicAdd(sync + blockIdx.z * H + h, 0) == 0) __nanosleep(200);
      atomicExch(sync + blockIdx.z * H + h, 0);
    }
    __syncthreads(); /* part 0 has read the entering state */
  }
#pragma unroll
  for (int nt = 0; nt < NC; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++)
      state[state_at(nt, e)] = acc_s[nt][e];
}

/* Warp-specialised blocked kernel for d = 128 (mma.sync; the d = 128 kernel below sm_90). The same math, blocks
 * and cut as lightning_blocked, with the work of a block split between two roles that run a block
 * apart, so that the one true recurrence (the state) does not wait for the work that does not
 * depend on it:
 *   - warps 8-15, the producers, take block b + 1: its raw q/k/v (loaded into registers a block
 *     ahead), SiLU, Q, K, V and kd V into stage (b + 1) % 2, and P = (Q K^T) * D;
 *   - warps 0-7 hold the state, S^T for 16 v dims each over all 128 k dims (64 registers), and
 *     for block b compute their 16 columns of O = qd * (Q S) + P V, store them, and update S from
 *     K and kd V.
 * Two stages; named barriers: FULL[s] (producers arrive, state warps wait) and EMPTY[s] (the
 * reverse), PROD among the producers, STATE among the state warps. The state update is the same
 * instructions on the same operands in the same order whether a segment is cut or not, so the
 * cut keeps its bit-for-bit equality. 154 KB of shared memory.
 * Q S takes S rounded to bf16 once (LW_QS_LO 1: hi + lo halves as lightning_blocked, slower, and it
 * spills), as fla's chunk kernels and an all-bf16 model do; the state itself stays fp32. Against the
 * CPU reference that changes gpu_parity's 64-head output error in its fourth digit (bench/NOTES.md). */
namespace lws {
constexpr int D = 128, LD = D + 8, PLD = LT + 8;
constexpr int MAT = LT * LD * 2; /* bytes of one of Q, K, V, kd V */
constexpr int Q = 0, K = Q + MAT, V = K + MAT, VD = V + MAT, P = VD + MAT;
constexpr int STAGE = P + LT * PLD * 2;
constexpr int DEC = 2 * STAGE;
constexpr int TOTAL = DEC + (LT + 1) * 4;
enum { FULL = 1, EMPTY = 3, PROD = 5, STATE = 6 }; /* FULL + s, EMPTY + s; 0 is __syncthreads */
}  // namespace lws

static __global__ void __launch_bounds__(512, 1)
    lightning_ws(const bf16 *__restrict__ qkv, int64_t qkv_stride, const lh_cuda_lseg *__restrict__ segs, int H,
                 const float *__restrict__ slope, bf16 *__restrict__ o, int64_t o_stride, int *sync, int64_t split_min,
                 int split_q) {
  using namespace lws;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float *dec = reinterpret_cast<float *>(smem_raw + DEC); /* dec[k] = exp(-s k), k = 0..LT */
  auto mat = [&](int s, int which) { return reinterpret_cast<bf16 *>(smem_raw + s * STAGE + which); };

  const lw_cut cut = lw_cut_of(segs, split_min, split_q);
  if (!cut.run) return;
  const int part = blockIdx.x, h = blockIdx.y;
  const lh_cuda_lseg seg = cut.seg;
  const bool split = cut.split;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const float sl = slope[h];
  float *state = seg.state + (int64_t)h * D * D;
  const bf16 *base = qkv + (int64_t)h * 3 * D;
  if (tid <= LT) dec[tid] = expf(-sl * (float)tid);
  __syncthreads(); /* dec */

  const lw_walk wk(cut, part);
  const int nadv = wk.nadv, nb = wk.nb;
  auto row0 = [&](int i) { return wk.row0(i); };
  auto rows = [&](int i) { return wk.rows(i); };
  const bool writes_state = wk.writes_state;

  if (w >= 8) { /* ---- producers ---- */
    const int pt = tid - 256, pw = w - 8;
    uint4 raw[3][4]; /* q, k, v: chunk c is row (pt + 256 c) / 16, cols 8 ((pt + 256 c) % 16) */
    auto fetch = [&](int i) {
      const int64_t r0 = row0(i);
      const int cb = rows(i);
      const bool wq = i >= nadv;
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int idx = pt + 256 * c, row = idx >> 4, col = (idx & 15) * 8;
        const bool ok = row < cb;
        const bf16 *p = base + (seg.row0 + r0 + (ok ? row : 0)) * qkv_stride + col;
        raw[0][c] = ok && wq ? *reinterpret_cast<const uint4 *>(p) : make_uint4(0, 0, 0, 0);
        raw[1][c] = ok ? *reinterpret_cast<const uint4 *>(p + D) : make_uint4(0, 0, 0, 0);
        raw[2][c] = ok ? *reinterpret_cast<const uint4 *>(p + 2 * D) : make_uint4(0, 0, 0, 0);
      }
    };
    fetch(0);
    for (int i = 0; i < nb; i++) {
      const int s = i & 1, cb = rows(i);
      const bool run = i >= nadv;
      bf16 *Qs = mat(s, Q), *Ks = mat(s, K), *Vs = mat(s, V), *Vds = mat(s, VD), *Ps = mat(s, P);
      if (i >= 2) lw_bar_sync(EMPTY + s, 512); /* the state warps are done with block i - 2 */
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int idx = pt + 256 * c, row = idx >> 4, col = (idx & 15) * 8;
        const float kd = row < cb ? dec[cb - 1 - row] : 0.0f;
        const uint4 vv = lw_silu8(raw[2][c]);
        *reinterpret_cast<uint4 *>(Ks + row * LD + col) = lw_silu8(raw[1][c]);
        *reinterpret_cast<uint4 *>(Vds + row * LD + col) = lw_scale8(vv, kd);
        if (run) {
          *reinterpret_cast<uint4 *>(Qs + row * LD + col) = lw_silu8(raw[0][c]);
          *reinterpret_cast<uint4 *>(Vs + row * LD + col) = vv;
        }
      }
      if (i + 1 < nb) fetch(i + 1); /* in flight during P below */
      if (run) {
        lw_bar_sync(PROD, 256); /* Q, K, V of block i */
        /* P = (Q K^T) * D: rows 16 (pw % 4) .. +16, columns 32 (pw / 4) .. +32 */
        lw_scores<D, 4>(Qs, Ks, LD, dec, 16 * (pw & 3), 32 * (pw >> 2), g, t4, Ps, PLD);
      }
      lw_bar_arrive(FULL + s, 512);
    }
    return;
  }

  /* ---- state warps: S^T[j][i] for j in [js, js + 16), all i ---- */
  const int js = 16 * w;
  /* acc_s[nt][e] = S^T[j][i] = S[i][j], j = js + g + 8 (e >> 1), i = 8 nt + 2 t4 + (e & 1) */
  auto state_at = [&](int nt, int e) -> int64_t {
    return (int64_t)(8 * nt + 2 * t4 + (e & 1)) * D + js + g + 8 * (e >> 1);
  };
  float acc_s[D / 8][4];
#pragma unroll
  for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc_s[nt][e] = state[state_at(nt, e)];
  if (split && part == 0) lw_cut_read_done(sync + blockIdx.z * H + h, STATE, tid);
  for (int i = 0; i < nb; i++) {
    const int s = i & 1, cb = rows(i);
    const bf16 *Qs = mat(s, Q), *Ks = mat(s, K), *Vds = mat(s, VD);
    lw_bar_sync(FULL + s, 512);
    if (i >= nadv) {
      /* O[:, js..js+16) = qd * (Q S) + P V. Q S over all four 16-row tiles at once, S's B fragments
       * made from the registers once per 16 k dims (rounded to bf16; with LW_QS_LO as hi + lo). */
      const bf16 *Ps = mat(s, P), *Vs = mat(s, V);
      const int64_t r0 = row0(i);
      {
        float acc[LT / 16][2][4] = {}; /* [row tile][jt] */
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
          uint32_t bh[2][2], bl[2][2]; /* [jt][b0/b1] */
#pragma unroll
          for (int jt = 0; jt < 2; jt++)
#pragma unroll
            for (int bb = 0; bb < 2; bb++) {
              const float x0 = acc_s[2 * kk + bb][2 * jt], x1 = acc_s[2 * kk + bb][2 * jt + 1];
              if (LW_QS_LO) lw_hi_lo(x0, x1, bh[jt][bb], bl[jt][bb]);
              else bh[jt][bb] = lh_pack_bf16(x0, x1);
            }
#pragma unroll
          for (int m2 = 0; m2 < LT / 16; m2++) {
            uint32_t a[4];
            lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Qs, LD, 16 * m2, 16 * kk));
#pragma unroll
            for (int jt = 0; jt < 2; jt++) {
              lh_mma(acc[m2][jt], a, bh[jt][0], bh[jt][1]);
              if (LW_QS_LO) lh_mma(acc[m2][jt], a, bl[jt][0], bl[jt][1]);
            }
          }
        }
#pragma unroll
        for (int m = 0; m < LT / 16; m++) { /* O = qd * (Q S) + P V, as lightning_blocked adds them */
          const int i0 = 16 * m + g, i1 = i0 + 8;
          const float qa = dec[i0 + 1], qb = dec[i1 + 1];
#pragma unroll
          for (int jt = 0; jt < 2; jt++) {
            float *f = acc[m][jt];
            f[0] *= qa, f[1] *= qa, f[2] *= qb, f[3] *= qb;
          }
#pragma unroll
          for (int ks = 0; ks < LT / 16; ks++) { /* P's rows 16 m .. 16 m + 15 are zero past column 16 m + 15 */
            if (ks > m) break;
            uint32_t a[4];
            lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Ps, PLD, 16 * m, 16 * ks));
            mma_strip<1>(acc[m], a, Vs, LD, 16 * ks, js);
          }
#pragma unroll
          for (int jt = 0; jt < 2; jt++) {
            const float *f = acc[m][jt];
            const int col = h * D + js + 8 * jt + 2 * t4;
            if (i0 < cb)
              *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i0) * o_stride + col) = lh_pack_bf16(f[0], f[1]);
            if (i1 < cb)
              *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i1) * o_stride + col) = lh_pack_bf16(f[2], f[3]);
          }
        }
      }
    }
    if (i + 1 < nb || writes_state) { /* S^T = exp(-s cb) S^T + (kd V)^T K */
      const float bd = dec[cb];
#pragma unroll
      for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_s[nt][e] *= bd;
#pragma unroll
      for (int ks = 0; ks < LT / 16; ks++) {
        uint32_t a[4];
        lh_ldsm_x4_t(a[0], a[1], a[2], a[3], lh_frag_at_addr(Vds, LD, js, 16 * ks));
        mma_strip<D / 16>(acc_s, a, Ks, LD, 16 * ks, 0);
      }
    }
    if (i + 2 < nb) lw_bar_arrive(EMPTY + s, 512);
  }

  if (!writes_state) return;
  if (split) lw_cut_wait_read(sync + blockIdx.z * H + h, STATE, tid); /* part 0 has read the entering state */
#pragma unroll
  for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
    for (int e = 0; e < 4; e++) state[state_at(nt, e)] = acc_s[nt][e];
}

/* Warpgroup-MMA kernel for d = 128 on sm_90a: lightning_ws's blocks
 * and cut, with every product on wgmma (one instruction per 64 x N x 16 step, operands read from
 * shared memory by the tensor cores) instead of mma.sync fed by ldmatrix, and the raw q/k/v brought
 * in by TMA two blocks ahead. Block b lives in stage b % 3; four warpgroups:
 *   - producers (warpgroups 2, 3), a block ahead of the state: wait for the stage's raw q, k, v,
 *     turn them in place into Q = SiLU(q), KD = kd * SiLU(k) (kd_j = exp(-s (cb - 1 - j)); rounded
 *     to bf16 once) and V = SiLU(v), SiLU being lw_silu_wg, then P' = exp(s cb) (Q KD^T) masked to
 *     j <= i, each group 32 of its 64 columns (m64n32, 8 steps). P'_ij = q_i . k_j exp(-s (i - j)) /
 *     qd_i with qd_i = exp(-s (i + 1)): the query rows' decay is taken out of the intra-block term
 *     and applied at the end;
 *   - state warpgroups 0 and 1 hold S^T for v dims [64 w, 64 w + 64) over all 128 k dims (m64n128
 *     accumulators, 64 fp32 registers a thread) and for block b compute
 *         O^T[v half, :] = qd * (S^T Q^T + V^T P'^T)  (m64n64: 8 steps on S^T and Q, 4 on V and P')
 *         S^T = exp(-s cb) S^T + V^T KD                (m64n128: 4 steps)
 *     with a single wait, so that no register of a wgmma in flight is touched (ptxas serialises
 *     those); then thread 0 sends the stage's TMA for block b + 3. S^T Q^T takes S^T from
 *     registers as wgmma's A operand, rounded to bf16 (sa, packed after each update; the state
 *     itself stays fp32, as in lightning_ws), and O leaves through a per-warp staging and a TMA
 *     store (put_o). setmaxnreg gives the state warps 160 registers and the producers 96.
 * The factors exp(s cb) and exp(-s (cb - 1 - j)) need exp(64 s) well inside fp32 and bf16: s <= 1.2
 * (every slope formula gives <= 1).
 * Shared memory: per stage Q, KD, V [64 x 128], each two TMA boxes of 64 columns x 64 rows in the
 * 128-byte swizzled layout (wgmma.cuh), and P' [64 x 64] tiled by rows (no swizzle); the state
 * warps' O staging, 2 KB a warp; 185 KB in all. Each producer thread owns the 16-byte chunks idx = pt + 256 c
 * at byte 16 idx of each matrix (row (idx / 8) % 64: the swizzle only permutes chunks within a
 * row): linear, free of bank conflicts. The transposed uses (V as K-by-N and M-by-K, KD as
 * K-by-N) read the same storage MN-major. The state update is the
 * same instructions in the same order whether a segment is cut or not, so the cut keeps its
 * bit-for-bit equality.
 * Why the loads are TMA boxes straight into the stages: register loads a block ahead need more L1
 * than a kernel with this much shared memory leaves, copies through a staging buffer cost about as
 * much, and TMA is slow with 16-byte box rows, so the boxes are 64 columns wide in the 128-byte
 * swizzled layout wgmma reads. Why the roles split the work as they do: the state warps' chain (FULL, wgmma, wait, the
 * update) is the one recurrence, so everything else runs in the producers a block ahead, and SiLU
 * (the producers' largest piece) takes one MUFU op (lw_silu_wg). With that the producers are the
 * bound again. The variants measured and dropped, with their timings and ncu's samples, are in
 * bench/NOTES.md, "Kernel notes: lightning.cu". */
namespace lwg {
constexpr int D = 128, NS = 3;
constexpr int MAT = LT * D * 2; /* bytes of one of Q, KD, V */
constexpr int Q = 0, KD = Q + MAT, V = KD + MAT, P = V + MAT;
constexpr int STAGE = P + LT * LT * 2;
constexpr int BOX = LT * 64 * 2; /* one TMA box: 64 rows x 64 columns, 8 KB */
static_assert(2 * BOX == MAT && STAGE % 1024 == 0, "the swizzled boxes stay 1024-byte aligned");
constexpr int STG = NS * STAGE;   /* per state warp, its O of a block: [64 tokens][16 v], 2 KB */
constexpr int DEC = STG + 8 * 2048; /* dec[k] = exp(-s k), k = 0..LT */
constexpr int BAR = DEC + (LT + 1) * 4 + 4; /* NS barriers (8-byte aligned): stage s's TMA */
constexpr int TOTAL = BAR + 8 * NS + 1024; /* + the alignment of the base to 1024 bytes */
enum { FULL = 1, PROD = 1 + NS, STATE = 2 + NS, HAND = 3 + NS }; /* FULL + s */
}  // namespace lwg

static __global__ void __launch_bounds__(512, 1)
    lightning_wg(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap tmap_o,
                 const lh_cuda_lseg *__restrict__ segs, int H,
                 const float *__restrict__ slope, bf16 *__restrict__ o, int64_t o_stride, int *sync, int64_t split_min,
                 int split_q, int split_m) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace lwg;
  extern __shared__ __align__(16) unsigned char smem_dyn[];
  /* the swizzled boxes need 1024-byte alignment */
  unsigned char *smem_raw = smem_dyn + ((1024 - (lh_smem_addr(smem_dyn) & 1023)) & 1023);
  float *dec = reinterpret_cast<float *>(smem_raw + DEC);
  const uint32_t sbase = lh_smem_addr(smem_raw);
  auto mat = [&](int s, int which) { return smem_raw + s * STAGE + which; };
  auto mat_a = [&](int s, int which) { return sbase + (uint32_t)(s * STAGE + which); };
  auto bar = [&](int s) { return sbase + (uint32_t)(BAR + 8 * s); };

  const lw_cut cut = lw_cut_of(segs, split_min, split_q, split_m);
  if (!cut.run) return;
  const int part = blockIdx.x, h = blockIdx.y;
  const lh_cuda_lseg seg = cut.seg;
  const bool split = cut.split;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  /* warpgroup and warp within it; the shuffle tells the compiler that wg is the same across a
   * warp, so that it does not serialise the wgmma in code that depends on it (ptxas C7518) */
  const int wg = __shfl_sync(0xffffffffu, w >> 2, 0), wi = w & 3;
  const float sl = slope[h];
  float *state = seg.state + (int64_t)h * D * D;

  const lw_walk wk(cut, part);
  const int nadv = wk.nadv, nb = wk.nb;
  auto row0 = [&](int i) { return wk.row0(i); };
  auto rows = [&](int i) { return wk.rows(i); };
  const bool writes_state = wk.writes_state;
  /* Block i's raw q (only when it runs), k, v into its stage, one TMA box per 64 columns: the box's
   * rows past the block are the batch's next rows (or zeros past its end); the producers zero them. */
  auto fetch = [&](int i) {
    const int s = i % NS, y = (int)(seg.row0 + row0(i)), x0 = h * 3 * D;
    const bool wq = i >= nadv;
    lh_mbar_expect(bar(s), (wq ? 3 : 2) * MAT);
    for (int m = wq ? 0 : 1; m < 3; m++) /* q -> Q, k -> KD, v -> V */
      for (int b = 0; b < D / 64; b++) lh_tma_load2(mat_a(s, m * MAT) + b * BOX, &tmap, x0 + m * D + 64 * b, y, bar(s));
  };
  if (tid <= LT) dec[tid] = expf(-sl * (float)tid);
  if (tid == 0) {
    for (int s = 0; s < NS; s++) lh_mbar_init(bar(s), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int i = 0; i < NS && i < nb; i++) fetch(i);
  }
  __syncthreads(); /* dec, the barriers */

  if (wg >= 2) { /* ---- producers ---- */
    lh_setmaxnreg_dec<96>();
    const int pt = tid - 256, pg = wg - 2;
    /* Block i; RUN: it runs in full (else part 1 only advances the state over it). Two loops, so
     * that no wgmma sits under a branch (ptxas serialises those). */
    auto block = [&](int i, auto RUN) {
      constexpr bool run = decltype(RUN)::value;
      const int s = i % NS, cb = rows(i);
      unsigned char *Qs = mat(s, Q), *Ks = mat(s, KD), *Vs = mat(s, V);
      lh_mbar_wait(bar(s), (i / NS) & 1); /* block i's raw q, k, v */
      /* Every chunk read first and computed without a branch (a branch per chunk would leave only 8
       * SiLU chains in flight); the rows past a short block are zeroed by selects, in a second copy
       * of the loop so that whole blocks do not pay for them. */
      auto silu = [&](auto WHOLE) {
        constexpr bool whole = decltype(WHOLE)::value;
        uint4 rk[4], rv[4], rq[4];
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const int idx = pt + 256 * c;
          rk[c] = reinterpret_cast<const uint4 *>(Ks)[idx];
          rv[c] = reinterpret_cast<const uint4 *>(Vs)[idx];
          if (run) rq[c] = reinterpret_cast<const uint4 *>(Qs)[idx];
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const int idx = pt + 256 * c, row = (idx >> 3) & (LT - 1);
          const bool ok = whole || row < cb;
          uint4 k8 = lw_silu8_wg<true>(rk[c], dec[ok ? cb - 1 - row : 0]), v8 = lw_silu8_wg<false>(rv[c], 1.0f);
          if (!whole) k8 = lw_sel4(ok, k8), v8 = lw_sel4(ok, v8);
          reinterpret_cast<uint4 *>(Ks)[idx] = k8;
          reinterpret_cast<uint4 *>(Vs)[idx] = v8;
          if (run) {
            uint4 q8 = lw_silu8_wg<false>(rq[c], 1.0f);
            if (!whole) q8 = lw_sel4(ok, q8);
            reinterpret_cast<uint4 *>(Qs)[idx] = q8;
          }
        }
      };
      if (cb == LT)
        silu(std::true_type{});
      else
        silu(std::false_type{});
      lh_fence_proxy_async();
      if constexpr (run) {
        lw_bar_sync(PROD, 256); /* Q and KD of block i */
        /* P'[:, 32 pg .. 32 pg + 32) = exp(s cb) (Q KD^T), j <= i */
        float acc[16];
        lh_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++)
          lh_wgmma_m64n32<0, 0>(acc, lh_wgmma_desc_k_sw128(mat_a(s, Q), BOX, 0, 16 * kk),
                                lh_wgmma_desc_k_sw128(mat_a(s, KD), BOX, 32 * pg, 16 * kk), kk);
        lh_wgmma_commit();
        lh_wgmma_wait<0>();
        lh_wgmma_hold(acc);
        const float eb = expf(sl * (float)cb);
        unsigned char *Ps = mat(s, P);
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
          for (int hf = 0; hf < 2; hf++) {
            const int ii = 16 * wi + g + 8 * hf, jj = 32 * pg + 8 * j + 2 * t4;
            const float p0 = jj <= ii ? acc[4 * j + 2 * hf] * eb : 0.0f;
            const float p1 = jj + 1 <= ii ? acc[4 * j + 2 * hf + 1] * eb : 0.0f;
            const int off = (((ii >> 3) * (LT / 8) + (jj >> 3)) * 64 + (ii & 7) * 8 + (jj & 7)) * 2;
            *reinterpret_cast<uint32_t *>(Ps + off) = lh_pack_bf16(p0, p1);
          }
        lh_fence_proxy_async();
      }
      lw_bar_arrive(FULL + s, 512);
    };
    for (int i = 0; i < nadv; i++) block(i, std::false_type{});
    for (int i = nadv; i < nb; i++) block(i, std::true_type{});
    return;
  }

  /* ---- state warpgroups: S^T[v][k] for v in [64 wg, 64 wg + 64), all k ---- */
  lh_setmaxnreg_inc<160>();
  const int v0 = 64 * wg;
  /* acc_s[4 j + e] = S^T[v][k] = S[k][v]: v = v0 + 16 wi + g + 8 (e >> 1), k = 8 j + 2 t4 + (e & 1) */
  auto state_at = [&](int j, int e) -> int64_t {
    return (int64_t)(8 * j + 2 * t4 + (e & 1)) * D + v0 + 16 * wi + g + 8 * (e >> 1);
  };
  /* The cut's hand-over (lw_cut): part 0 publishes S_m in the state's place (only it reads the
   * entering state, at its start), after its block hand_i; part 1 starts from zero and, after its
   * last advance block, waits for S_m and adds it decayed over [m, x). The sum then differs from
   * the unbroken recurrence in rounding: a cut segment's outputs match the uncut ones to fp32
   * rounding of the state, not bit for bit (without a hand-over, split_m = 0, they do). */
  const bool hand = split && cut.m > 0;
  const int hand_i = hand && part == 0 ? (int)(cut.m / LT) - 1 : -1; /* part 0's block before m */
  const int last_i = hand && part == 1 ? nadv - 1 : -1;                /* part 1's last advance */
  float acc_s[64];
#pragma unroll
  for (int j = 0; j < 16; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) acc_s[4 * j + e] = hand && part == 1 ? 0.0f : state[state_at(j, e)];
  if (split && !hand && part == 0) lw_cut_read_done(sync + blockIdx.z * H + h, STATE, tid);
  auto publish = [&]() { /* part 0: S_m out, then the flag */
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) state[state_at(j, e)] = acc_s[4 * j + e];
    __threadfence();
    lw_bar_sync(HAND, 256);
    if (tid == 0) atomicExch(sync + blockIdx.z * H + h, 1);
  };
  /* part 1, after its advance (its last block leaves S undecayed and sa alone for this): wait for
   * S_m (the flag back to 0 for the next call), add it decayed from m to x */
  auto combine = [&]() {
    if (tid == 0) {
      int *flag = sync + blockIdx.z * H + h;
      while (atomicAdd(flag, 0) == 0) __nanosleep(100);
      __threadfence();
      atomicExch(flag, 0);
    }
    lw_bar_sync(HAND, 256);
    const float dm = expf(-sl * (float)(cut.x - cut.m));
#pragma unroll
    for (int j = 0; j < 16; j += 4) {
      float t[16];
#pragma unroll
      for (int q = 0; q < 16; q++) t[q] = __ldcg(state + state_at(j + q / 4, q % 4));
#pragma unroll
      for (int q = 0; q < 16; q++) acc_s[4 * j + q] += dm * t[q];
      asm volatile("" ::: "memory"); /* 16 loads in flight at a time: the registers are all but spent */
    }
  };
  auto decay = [&](int i) { /* S^T *= exp(-s cb) for block i */
    const float bd = dec[rows(i)];
#pragma unroll
    for (int e = 0; e < 64; e++) acc_s[e] *= bd;
  };
  /* S^T as bf16 A fragments of O^T = S^T Q^T, k slice kk: the accumulator's columns 16 kk .. + 16 */
  uint32_t sa[8][4];
  auto to_sa = [&]() {
#pragma unroll
    for (int kk = 0; kk < 8; kk++)
#pragma unroll
      for (int r = 0; r < 4; r++) sa[kk][r] = lh_pack_bf16(acc_s[8 * kk + 2 * r], acc_s[8 * kk + 2 * r + 1]);
  };
  /* O of a block: acc_o holds O^T / qd (v rows 16 wi + g (+ 8), tokens 8 j + 2 t4 (+ 1)); stmatrix
   * .trans puts O in this warp's staging as [64 tokens][16 v], 32 bytes a token, in the layout of
   * TMA's 32-byte swizzle (the two 16-byte halves swapped on tokens 4..7 of each 8, which also keeps
   * stmatrix free of bank conflicts). A whole block leaves by one TMA store of the warp's 16 x 64
   * box, issued by lane 0 and waited for (its reads of the staging) before the next block's
   * stmatrix; a short block (a segment's last) by 16-byte stores of its rows. */
  const uint32_t stg = sbase + STG + w * 2048;           /* for stmatrix and TMA */
  const unsigned char *stg_p = smem_raw + STG + w * 2048; /* the same bytes, for the loads */
  auto put_o = [&](const float(&ao)[32], int64_t r0, int cb) {
    if (lane == 0) lh_tma_store_wait_read();
    __syncwarp();
    const int m = lane >> 3;
#pragma unroll
    for (int j = 0; j < 8; j += 2) {
      const int t = 8 * (j + (m >> 1)) + (lane & 7), c = (m & 1) ^ ((t >> 2) & 1);
      uint32_t r[4];
#pragma unroll
      for (int q = 0; q < 4; q++) { /* matrix q: tokens 8 (j + q / 2) .., v half q % 2 */
        const int jj = j + (q >> 1), e = 2 * (q & 1);
        r[q] = lh_pack_bf16(ao[4 * jj + e] * dec[8 * jj + 2 * t4 + 1], ao[4 * jj + e + 1] * dec[8 * jj + 2 * t4 + 2]);
      }
      lh_stsm_x4_trans(stg + t * 32 + c * 16, r[0], r[1], r[2], r[3]);
    }
    const int col = h * D + v0 + 16 * wi;
    if (cb == LT) {
      lh_fence_proxy_async();
      __syncwarp();
      if (lane == 0) lh_tma_store2(&tmap_o, col, (int)(seg.row0 + r0), stg);
      return;
    }
    __syncwarp();
#pragma unroll
    for (int q = 0; q < 4; q++) {
      const int ci = lane + 32 * q, t = ci >> 1, c = ci & 1;
      const uint4 v = *reinterpret_cast<const uint4 *>(stg_p + t * 32 + ((c ^ ((t >> 2) & 1)) * 16));
      if (t < cb) *reinterpret_cast<uint4 *>(o + (seg.row0 + r0 + t) * o_stride + col + 8 * c) = v;
    }
    __syncwarp(); /* the loads are done before the next block's stmatrix */
  };
  /* Block i, as the producers': RUN runs it in full, else it only advances the state. */
  auto block = [&](int i, auto RUN) {
    constexpr bool run = decltype(RUN)::value;
    const int s = i % NS, cb = rows(i);
    lw_bar_sync(FULL + s, 512);
    lh_wgmma_fence();
    float acc_o[32];
    if constexpr (run) { /* O^T / qd = S^T Q^T + V^T P'^T */
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        lh_wgmma_m64n64_rs<0>(acc_o, sa[kk], lh_wgmma_desc_k_sw128(mat_a(s, Q), BOX, 0, 16 * kk), kk);
#pragma unroll
      for (int ks = 0; ks < LT / 16; ks++)
        lh_wgmma_m64n64<1, 0>(acc_o, lh_wgmma_desc_mn_sw128(mat_a(s, V), BOX, 16 * ks, v0),
                              lh_wgmma_desc_k(mat_a(s, P), LT, 0, 16 * ks), 1);
    }
#pragma unroll
    for (int ks = 0; ks < LT / 16; ks++) /* S^T = exp(-s cb) S^T + V^T KD */
      lh_wgmma_m64n128<1, 1>(acc_s, lh_wgmma_desc_mn_sw128(mat_a(s, V), BOX, 16 * ks, v0),
                             lh_wgmma_desc_mn_sw128(mat_a(s, KD), BOX, 16 * ks, 0), 1);
    lh_wgmma_commit();
    lh_wgmma_wait<0>();
    lh_wgmma_hold(acc_s);
    if constexpr (run)
      if (i == hand_i) publish();
    if (i + NS < nb) { /* the stage is free: block i + NS's raw q, k, v into it */
      lw_bar_sync(STATE, 256);
      if (tid == 0) fetch(i + NS);
    }
    const bool last_adv = !run && i == last_i; /* combine comes first */
    if (i + 1 < nb && i + 1 >= nadv && !last_adv) to_sa(); /* the next block's Q S, from S before its decay */
    if constexpr (run) {
      lh_wgmma_hold(acc_o);
      put_o(acc_o, row0(i), cb);
    }
    if (i + 1 < nb && !last_adv) decay(i + 1);
  };
  if (nadv == 0) to_sa();
  if (nb > 0) decay(0);
  for (int i = 0; i < nadv; i++) block(i, std::false_type{});
  if (hand && part == 1) { /* nadv < nb: part 1 runs rows past the cut */
    combine();
    to_sa();
    decay(nadv);
  }
  for (int i = nadv; i < nb; i++) block(i, std::true_type{});
  if (lane == 0) lh_tma_store_wait(); /* the O stores are made before the CTA ends */

  if (!writes_state) return;
  /* without the hand-over, part 0 has read the entering state that this overwrites */
  if (split && !hand) lw_cut_wait_read(sync + blockIdx.z * H + h, STATE, tid);
#pragma unroll
  for (int j = 0; j < 16; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) state[state_at(j, e)] = acc_s[4 * j + e];
#else
  __trap(); /* launched only on sm_90 (lh_cuda_lightning) */
#endif
}

/* Token-recurrent kernel: one CTA per (head, segment); thread (rg, j) owns column j of S for the
 * rows of group rg; S lives in shared memory for the segment. Partial q.S sums of the row groups are
 * added in group order. */
static __global__ void lightning_recurrent(const bf16 *__restrict__ qkv, int64_t qkv_stride,
                                           const lh_cuda_lseg *__restrict__ segs, int H, int D,
                                           const float *__restrict__ slope, bf16 *__restrict__ o, int64_t o_stride) {
  extern __shared__ __align__(16) float fsm[];
  const int ng = blockDim.x / D;
  float *S = fsm;              /* D x D */
  float *qv = S + D * D;       /* q, k, v after SiLU: 3D */
  float *red = qv + 3 * D;     /* ng x D partial sums */
  const int h = blockIdx.x;
  const lh_cuda_lseg seg = segs[blockIdx.y];
  if (seg.nrows <= 0) return;
  const int tid = threadIdx.x, j = tid % D, rg = tid / D;
  const bool active = rg < ng;
  const int rows_per = (D + ng - 1) / ng, i0 = rg * rows_per, i1 = min(D, i0 + rows_per);
  const float dec = expf(-slope[h]);
  float *state = seg.state + (int64_t)h * D * D;
  for (int i = tid; i < D * D; i += blockDim.x) S[i] = state[i];
  for (int64_t r = 0; r < seg.nrows; r++) {
    const bf16 *row = qkv + (seg.row0 + r) * qkv_stride + (int64_t)h * 3 * D;
    __syncthreads(); /* previous token's reads of qv and red are done */
    for (int i = tid; i < 3 * D; i += blockDim.x) qv[i] = lh_bf(lh_tobf(lh_silu(lh_bf(row[i]))));
    __syncthreads();
    if (active) {
      const float vj = qv[2 * D + j];
      float acc = 0.0f;
      for (int i = i0; i < i1; i++) {
        float x = dec * S[i * D + j] + qv[D + i] * vj;
        S[i * D + j] = x;
        acc += qv[i] * x;
      }
      red[rg * D + j] = acc;
    }
    __syncthreads();
    if (rg == 0) {
      float acc = 0.0f;
      for (int q = 0; q < ng; q++) acc += red[q * D + j];
      o[(seg.row0 + r) * o_stride + (int64_t)h * D + j] = lh_tobf(acc);
    }
  }
  __syncthreads();
  for (int i = tid; i < D * D; i += blockDim.x) state[i] = S[i];
}

/* Which d = 128 kernel runs: lightning_wg where the device is sm_90 (it is compiled for sm_90a
 * only), else lightning_ws; lh_cuda_lightning_kernel or LH_CUDA_LIGHTNING=ws|wg choose (for
 * measurements). */
static int lw_kernel = -1; /* -1: the default (LH_CUDA_LIGHTNING, else wg); 0: ws; 1: wg */
extern "C" void lh_cuda_lightning_kernel(int which) { lw_kernel = which; }
static int lw_split_m = -1; /* lightning_wg's hand-over row: -1, LH_CUDA_LIGHTNING_WG_SPLIT_M */
extern "C" void lh_cuda_lightning_handover(int split_m) { lw_split_m = split_m; }
static bool lw_use_wg() {
  static int sm90 = -1;
  if (sm90 < 0) {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    }
    sm90 = major == 9 && minor == 0;
  }
  int k = lw_kernel;
  if (k < 0) {
    const char *e = getenv("LH_CUDA_LIGHTNING");
    k = e && !strcmp(e, "ws") ? 0 : 1;
  }
  return sm90 && k == 1;
}

/* A TMA map for lightning_wg: a 2-D tensor of rows x stride bf16 at p, boxes of `cols` columns x 64
 * rows. The q/k/v rows: 64 columns, 128-byte swizzled (rows past the last read as zeros); O: 16
 * columns, 32-byte swizzled (rows past the last not written). The encoder is the driver's, reached
 * through the runtime so that nothing links libcuda. */
static cudaError_t lw_tensor_map(CUtensorMap *m, const void *p, int64_t stride, int64_t rows, int cols) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
  if (!encode) {
    cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) return e;
    if (q != cudaDriverEntryPointSuccess || !fn) return cudaErrorSymbolNotFound;
    encode = (PFN_cuTensorMapEncodeTiled_v12000)fn;
  }
  const cuuint64_t dim[2] = {(cuuint64_t)stride, (cuuint64_t)rows}, bstride[1] = {(cuuint64_t)stride * 2};
  const cuuint32_t box[2] = {(cuuint32_t)cols, LT}, estride[2] = {1, 1};
  CUresult r = encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void *>(p), dim, bstride, box, estride,
                      CU_TENSOR_MAP_INTERLEAVE_NONE,
                      cols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_32B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <int D>
static cudaError_t launch_blocked(cudaStream_t st, const void *qkv, int64_t qkv_stride, int64_t rows,
                                  const lh_cuda_lseg *segs, int nseg, int H, const float *slope, void *o,
                                  int64_t o_stride, int *sync, int split_q) {
  const bool ws = D == 128 && LW_WS;
  const bool given = split_q > 0 && split_q < 1024;
  if (!given) split_q = ws ? LH_CUDA_LIGHTNING_WS_SPLIT_Q : LH_CUDA_LIGHTNING_SPLIT_Q;
  const int wg_split_q = given ? split_q : LH_CUDA_LIGHTNING_WG_SPLIT_Q;
  static int sms = 0;
  if (!sms) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      sms = 1;
  }
  /* Cut segments in two only where the CTAs of whole segments would leave SMs idle. */
  const int parts = sync && (int64_t)nseg * H < sms ? 2 : 1;
  CUtensorMap tmap, tmap_o; /* where a map cannot be made (a stride or address TMA refuses), lightning_ws runs */
  if (ws && rows > 0 && lw_use_wg() && lw_tensor_map(&tmap, qkv, qkv_stride, rows, 64) == cudaSuccess &&
      lw_tensor_map(&tmap_o, o, o_stride, rows, 16) == cudaSuccess) {
    cudaError_t e = cudaFuncSetAttribute(lightning_wg, cudaFuncAttributeMaxDynamicSharedMemorySize, lwg::TOTAL);
    if (e != cudaSuccess) return e;
    lightning_wg<<<dim3(parts, H, nseg), 512, lwg::TOTAL, st>>>(
        tmap, tmap_o, segs, H, slope, (bf16 *)o, o_stride, sync, LH_CUDA_LIGHTNING_SPLIT_MIN, wg_split_q,
        lw_split_m >= 0 ? lw_split_m : LH_CUDA_LIGHTNING_WG_SPLIT_M);
    return cudaGetLastError();
  }
  auto kern = ws ? lightning_ws : lightning_blocked<D>;
  size_t smem = ws ? (size_t)lws::TOTAL : (size_t)lsmem<D>::total * sizeof(bf16) + (LT + 1) * sizeof(float);
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  kern<<<dim3(parts, H, nseg), ws ? 512 : D * 4, smem, st>>>((const bf16 *)qkv, qkv_stride, segs, H, slope, (bf16 *)o,
                                                             o_stride, sync, LH_CUDA_LIGHTNING_SPLIT_MIN, split_q);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_lightning_recurrent(cudaStream_t st, const void *qkv, int64_t qkv_stride,
                                                   const lh_cuda_lseg *segs, int nseg, int H, int d,
                                                   const float *slope, void *o, int64_t o_stride) {
  if (d <= 0 || d > 256 || nseg <= 0) return cudaErrorInvalidValue;
  int ng = d >= 256 ? 1 : 256 / d;
  if (ng > d) ng = d;
  int threads = ng * d;
  threads = (threads + 31) / 32 * 32;
  ng = threads / d;
  size_t smem = ((size_t)d * d + 3 * d + (size_t)ng * d) * sizeof(float);
  cudaError_t e = cudaFuncSetAttribute(lightning_recurrent, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  lightning_recurrent<<<dim3(H, nseg), threads, smem, st>>>((const bf16 *)qkv, qkv_stride, segs, H, d, slope,
                                                            (bf16 *)o, o_stride);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_lightning(cudaStream_t st, const void *qkv, int64_t qkv_stride, int64_t rows,
                                         const lh_cuda_lseg *segs, int nseg, int H, int d, const float *slope, void *o,
                                         int64_t o_stride, int *sync, int split_q) {
  if (nseg <= 0) return cudaSuccess;
  switch (d) {
    case 128: return launch_blocked<128>(st, qkv, qkv_stride, rows, segs, nseg, H, slope, o, o_stride, sync, split_q);
    case 64: return launch_blocked<64>(st, qkv, qkv_stride, rows, segs, nseg, H, slope, o, o_stride, sync, split_q);
    case 32: return launch_blocked<32>(st, qkv, qkv_stride, rows, segs, nseg, H, slope, o, o_stride, sync, split_q);
    default: return lh_cuda_lightning_recurrent(st, qkv, qkv_stride, segs, nseg, H, d, slope, o, o_stride);
  }
}
