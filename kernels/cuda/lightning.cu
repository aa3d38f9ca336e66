/* lightning.cu — lightning (decayed linear) attention: the blocked prefill kernel on tensor cores and
 * the token-recurrent kernel used for decode and for head sizes the blocked kernel does not cover.
 *
 * The math (shared/DESIGN.md, HF MiniMaxLightningAttention): per head with decay s,
 *     S_t = exp(-s) S_{t-1} + k_t^T v_t,   o_t = q_t S_t,   q, k, v = SiLU(projection).
 * Blocked over T = 64 tokens with S the state entering the block (i, j rows within the block):
 *     O = diag(exp(-s(i+1))) Q S  +  ((Q K^T) * D) V,   D_ij = exp(-s(i-j)) for j <= i, else 0,
 *     S' = exp(-s cb) S + K^T diag(exp(-s(cb-1-j))) V      (cb = rows in the block).
 * The function of the tokens is the same whatever the block boundaries, so a chunk can start at any
 * position: the kernel blocks each segment from its own first row.
 *
 * Blocked kernel: one CTA of 8 warps per (head, half of the v dims when d = 128 (a quarter with
 * lh_cuda_lightning_dv(..., 32), measured slower), segment) walks the segment's blocks in order, keeping its slice of S (d x dv fp32) in mma accumulator registers for the
 * whole segment; the next block's q/k/v are fetched into registers while the current one computes.
 * S enters the Q S product as two bf16 halves (hi + lo) so that product keeps about 16 bits of the
 * fp32 state rather than bf16's 8. P = (Q K^T) * D and kd * V are rounded to bf16 for the tensor
 * cores, as an all-bf16 model would. No atomics: every output element and state element is written
 * by exactly one thread, in a fixed order, so results are bitwise reproducible.
 */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

#define LT 64       /* tokens per block */
#define LTHREADS 256

template <int D, int DV>
struct lsmem {
  static constexpr int QLD = D + 8, VLD = DV + 8, PLD = LT + 8;
  static constexpr int q = 0;
  static constexpr int k = q + LT * QLD;
  static constexpr int v = k + LT * QLD;
  static constexpr int vd = v + LT * VLD;
  static constexpr int p = vd + LT * VLD;
  static constexpr int shi = p + LT * PLD;
  static constexpr int slo = shi + D * VLD;
  static constexpr int total = slo + D * VLD; /* bf16 elements */
};

/* Two CTAs per SM fit when each owns a quarter of the v dims (DV = D/4); with half, one. */
template <int D, int DV>
static __global__ void __launch_bounds__(LTHREADS, (DV * 4 <= D ? 2 : 1))
    lightning_blocked(const bf16 *__restrict__ qkv, int64_t qkv_stride, const lh_cuda_lseg *__restrict__ segs, int H,
                      const float *__restrict__ slope, bf16 *__restrict__ o, int64_t o_stride) {
  typedef lsmem<D, DV> L;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *sm = reinterpret_cast<bf16 *>(smem_raw);
  bf16 *Qs = sm + L::q, *Ks = sm + L::k, *Vs = sm + L::v, *Vds = sm + L::vd, *Ps = sm + L::p;
  bf16 *Shi = sm + L::shi, *Slo = sm + L::slo;

  const int vh = blockIdx.x, h = blockIdx.y;
  const lh_cuda_lseg seg = segs[blockIdx.z];
  if (seg.nrows <= 0) return;
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const float s = slope[h];
  float *state = seg.state + (int64_t)h * D * D + vh * DV;

  /* q/k/v fetch: 16-byte chunks, QC per thread for q and for k, VC for v. */
  constexpr int QC = LT * D / 8 / LTHREADS, VC = LT * DV / 8 / LTHREADS;
  static_assert(QC >= 1 && VC >= 1, "head too small for the blocked kernel");
  uint4 qr[QC], kr[QC], vr[VC];
  const bf16 *base = qkv + (int64_t)h * 3 * D;
  auto fetch = [&](int64_t r0, int cb) {
#pragma unroll
    for (int c = 0; c < QC; c++) {
      int idx = tid + c * LTHREADS, row = idx / (D / 8), col = (idx % (D / 8)) * 8;
      const bf16 *p = base + (seg.row0 + r0 + row) * qkv_stride + col;
      qr[c] = row < cb ? *reinterpret_cast<const uint4 *>(p) : make_uint4(0, 0, 0, 0);
      kr[c] = row < cb ? *reinterpret_cast<const uint4 *>(p + D) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int c = 0; c < VC; c++) {
      int idx = tid + c * LTHREADS, row = idx / (DV / 8), col = (idx % (DV / 8)) * 8;
      const bf16 *p = base + (seg.row0 + r0 + row) * qkv_stride + 2 * D + vh * DV + col;
      vr[c] = row < cb ? *reinterpret_cast<const uint4 *>(p) : make_uint4(0, 0, 0, 0);
    }
  };
  auto silu8 = [](uint4 u, float scale) {
    const bf16 *e = reinterpret_cast<const bf16 *>(&u);
    uint4 r;
    uint32_t *rp = reinterpret_cast<uint32_t *>(&r);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float a = lh_bf(lh_tobf(lh_silu(lh_bf(e[2 * i])))), b = lh_bf(lh_tobf(lh_silu(lh_bf(e[2 * i + 1]))));
      rp[i] = lh_pack_bf16(a * scale, b * scale);
    }
    return r;
  };
  auto stash = [&](int cb) {
#pragma unroll
    for (int c = 0; c < QC; c++) {
      int idx = tid + c * LTHREADS, row = idx / (D / 8), col = (idx % (D / 8)) * 8;
      *reinterpret_cast<uint4 *>(Qs + row * L::QLD + col) = silu8(qr[c], 1.0f);
      *reinterpret_cast<uint4 *>(Ks + row * L::QLD + col) = silu8(kr[c], 1.0f);
    }
#pragma unroll
    for (int c = 0; c < VC; c++) {
      int idx = tid + c * LTHREADS, row = idx / (DV / 8), col = (idx % (DV / 8)) * 8;
      float kd = row < cb ? __expf(-s * (float)(cb - 1 - row)) : 0.0f;
      *reinterpret_cast<uint4 *>(Vs + row * L::VLD + col) = silu8(vr[c], 1.0f);
      *reinterpret_cast<uint4 *>(Vds + row * L::VLD + col) = silu8(vr[c], kd);
    }
  };

  /* Warp tiles. Phase A (Q K^T, 64x64): rows ra, 32 cols from ca. Phase B (O, 64 x DV): rows ra,
   * DV/2 cols from cb0. Phase C (S, D x DV): rows rs, cols from cs. */
  const int ra = 16 * (w & 3), ca = 32 * (w >> 2);
  constexpr int NB = DV / 16; /* n-tiles of phase B per warp (DV/2 cols) */
  const int cb0 = (DV / 2) * (w >> 2);
  constexpr int RT = D / 16, CG = 8 / RT, NC = DV / CG / 8; /* phase C: n-tiles per warp */
  static_assert(RT * CG == 8 && NC >= 1 && NB >= 2 && NB % 2 == 0, "warp tiling");
  const int rs = 16 * (w % RT), cs = (DV / CG) * (w / RT);

  const float qd0 = expf(-s * (float)(ra + g + 1)), qd1 = expf(-s * (float)(ra + g + 9));

  float acc_s[NC][4];
#pragma unroll
  for (int nt = 0; nt < NC; nt++) {
    int col = cs + 8 * nt + 2 * t4;
    float2 a = *reinterpret_cast<const float2 *>(state + (int64_t)(rs + g) * D + col);
    float2 b = *reinterpret_cast<const float2 *>(state + (int64_t)(rs + g + 8) * D + col);
    acc_s[nt][0] = a.x, acc_s[nt][1] = a.y, acc_s[nt][2] = b.x, acc_s[nt][3] = b.y;
  }
  auto put_state = [&]() {
#pragma unroll
    for (int nt = 0; nt < NC; nt++)
#pragma unroll
      for (int hlf = 0; hlf < 2; hlf++) {
        int row = rs + g + 8 * hlf, col = cs + 8 * nt + 2 * t4;
        float x0 = acc_s[nt][2 * hlf], x1 = acc_s[nt][2 * hlf + 1];
        bf16 h0 = lh_tobf(x0), h1 = lh_tobf(x1);
        *reinterpret_cast<uint32_t *>(Shi + row * L::VLD + col) = lh_pack_bf16(lh_bf(h0), lh_bf(h1));
        *reinterpret_cast<uint32_t *>(Slo + row * L::VLD + col) = lh_pack_bf16(x0 - lh_bf(h0), x1 - lh_bf(h1));
      }
  };
  put_state();

  const int64_t n = seg.nrows;
  const int nblocks = (int)((n + LT - 1) / LT);
  fetch(0, (int)(n < LT ? n : LT));
  for (int blk = 0; blk < nblocks; blk++) {
    const int64_t r0 = (int64_t)blk * LT;
    const int cbk = (int)(n - r0 < LT ? n - r0 : LT);
    stash(cbk);
    __syncthreads();
    if (blk + 1 < nblocks) {
      int64_t r1 = r0 + LT;
      fetch(r1, (int)(n - r1 < LT ? n - r1 : LT));
    }

    /* Phase A: P = (Q K^T) * D -> Ps (bf16). */
    {
      float acc[4][4] = {};
#pragma unroll
      for (int ks = 0; ks < D / 16; ks++) {
        uint32_t a[4];
        lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Qs, L::QLD, ra, 16 * ks));
#pragma unroll
        for (int np = 0; np < 2; np++) {
          uint32_t b0, b1, b2, b3;
          lh_ldsm_x4(b0, b1, b2, b3, lh_frag_bt_addr(Ks, L::QLD, ca + 16 * np, 16 * ks));
          lh_mma(acc[2 * np], a, b0, b1);
          lh_mma(acc[2 * np + 1], a, b2, b3);
        }
      }
      /* decay mask D_ij = exp(-s (i - j)) for j <= i (recomputed: registers are scarcer than MUFU) */
#pragma unroll
      for (int nt = 0; nt < 4; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int dij = ra + g + 8 * (e >> 1) - (ca + 8 * nt + 2 * t4 + (e & 1));
          acc[nt][e] = dij >= 0 ? acc[nt][e] * __expf(-s * (float)dij) : 0.0f;
        }
#pragma unroll
      for (int nt = 0; nt < 4; nt++) {
        int col = ca + 8 * nt + 2 * t4;
        *reinterpret_cast<uint32_t *>(Ps + (ra + g) * L::PLD + col) = lh_pack_bf16(acc[nt][0], acc[nt][1]);
        *reinterpret_cast<uint32_t *>(Ps + (ra + g + 8) * L::PLD + col) = lh_pack_bf16(acc[nt][2], acc[nt][3]);
      }
    }

    /* Phase B: O = qd * (Q S_hi + Q S_lo) + P V. */
    float acc_o[NB][4] = {};
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      uint32_t a[4];
      lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Qs, L::QLD, ra, 16 * ks));
#pragma unroll
      for (int np = 0; np < NB / 2; np++) {
        uint32_t b0, b1, b2, b3;
        lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(Shi, L::VLD, 16 * ks, cb0 + 16 * np));
        lh_mma(acc_o[2 * np], a, b0, b1);
        lh_mma(acc_o[2 * np + 1], a, b2, b3);
        lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(Slo, L::VLD, 16 * ks, cb0 + 16 * np));
        lh_mma(acc_o[2 * np], a, b0, b1);
        lh_mma(acc_o[2 * np + 1], a, b2, b3);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NB; nt++) {
      acc_o[nt][0] *= qd0, acc_o[nt][1] *= qd0, acc_o[nt][2] *= qd1, acc_o[nt][3] *= qd1;
    }
    __syncthreads(); /* Ps complete */
#pragma unroll
    for (int ks = 0; ks < LT / 16; ks++) {
      uint32_t a[4];
      lh_ldsm_x4(a[0], a[1], a[2], a[3], lh_frag_a_addr(Ps, L::PLD, ra, 16 * ks));
#pragma unroll
      for (int np = 0; np < NB / 2; np++) {
        uint32_t b0, b1, b2, b3;
        lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(Vs, L::VLD, 16 * ks, cb0 + 16 * np));
        lh_mma(acc_o[2 * np], a, b0, b1);
        lh_mma(acc_o[2 * np + 1], a, b2, b3);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NB; nt++) {
      int col = h * D + vh * DV + cb0 + 8 * nt + 2 * t4;
      int i0 = ra + g, i1 = ra + g + 8;
      if (i0 < cbk)
        *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i0) * o_stride + col) =
            lh_pack_bf16(acc_o[nt][0], acc_o[nt][1]);
      if (i1 < cbk)
        *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i1) * o_stride + col) =
            lh_pack_bf16(acc_o[nt][2], acc_o[nt][3]);
    }

    /* Phase C: S = exp(-s cb) S + K^T (kd * V). */
    {
      const float bd = expf(-s * (float)cbk);
#pragma unroll
      for (int nt = 0; nt < NC; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc_s[nt][e] *= bd;
#pragma unroll
      for (int ks = 0; ks < LT / 16; ks++) {
        uint32_t a[4];
        lh_ldsm_x4_t(a[0], a[1], a[2], a[3], lh_frag_at_addr(Ks, L::QLD, rs, 16 * ks));
#pragma unroll
        for (int np = 0; np < (NC + 1) / 2; np++) {
          uint32_t b0, b1, b2, b3;
          lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(Vds, L::VLD, 16 * ks, cs + 16 * np));
          lh_mma(acc_s[2 * np], a, b0, b1);
          if (2 * np + 1 < NC) lh_mma(acc_s[2 * np + 1], a, b2, b3);
        }
      }
    }
    __syncthreads(); /* every read of Q, K, V, Vd, P, S_hi, S_lo in this block is done */
    put_state();
  }

#pragma unroll
  for (int nt = 0; nt < NC; nt++) {
    int col = cs + 8 * nt + 2 * t4;
    *reinterpret_cast<float2 *>(state + (int64_t)(rs + g) * D + col) = make_float2(acc_s[nt][0], acc_s[nt][1]);
    *reinterpret_cast<float2 *>(state + (int64_t)(rs + g + 8) * D + col) = make_float2(acc_s[nt][2], acc_s[nt][3]);
  }
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

template <int D, int DV>
static cudaError_t launch_blocked(cudaStream_t st, const void *qkv, int64_t qkv_stride, const lh_cuda_lseg *segs,
                                  int nseg, int H, const float *slope, void *o, int64_t o_stride) {
  size_t smem = (size_t)lsmem<D, DV>::total * sizeof(bf16);
  cudaError_t e = cudaFuncSetAttribute(lightning_blocked<D, DV>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  dim3 grid(D / DV, H, nseg);
  lightning_blocked<D, DV><<<grid, LTHREADS, smem, st>>>((const bf16 *)qkv, qkv_stride, segs, H, slope, (bf16 *)o,
                                                         o_stride);
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

extern "C" cudaError_t lh_cuda_lightning_dv(cudaStream_t st, const void *qkv, int64_t qkv_stride,
                                            const lh_cuda_lseg *segs, int nseg, int H, int d, const float *slope,
                                            void *o, int64_t o_stride, int dv) {
  if (nseg <= 0) return cudaSuccess;
  switch (d) {
    case 128:
      if (dv == 32) return launch_blocked<128, 32>(st, qkv, qkv_stride, segs, nseg, H, slope, o, o_stride);
      return launch_blocked<128, 64>(st, qkv, qkv_stride, segs, nseg, H, slope, o, o_stride);
    case 64: return launch_blocked<64, 64>(st, qkv, qkv_stride, segs, nseg, H, slope, o, o_stride);
    case 32: return launch_blocked<32, 32>(st, qkv, qkv_stride, segs, nseg, H, slope, o, o_stride);
    default: return lh_cuda_lightning_recurrent(st, qkv, qkv_stride, segs, nseg, H, d, slope, o, o_stride);
  }
}

extern "C" cudaError_t lh_cuda_lightning(cudaStream_t st, const void *qkv, int64_t qkv_stride, const lh_cuda_lseg *segs,
                                         int nseg, int H, int d, const float *slope, void *o, int64_t o_stride) {
  return lh_cuda_lightning_dv(st, qkv, qkv_stride, segs, nseg, H, d, slope, o, o_stride, 0);
}
