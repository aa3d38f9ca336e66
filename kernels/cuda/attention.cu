/* attention.cu — softmax attention over paged KV: RoPE (and the length-aware query scaling) with the
 * K/V append, the chunked-prefill kernel (flash-attention form on tensor cores) and the split-key
 * decode kernel with its ordered merge.
 *
 * Paged KV (engine/backend.h): position p of a sequence lives in page p / 256, row p % 256; a page
 * is [2][Hkv][256][d] bf16, so 64 consecutive keys of one kv head are one contiguous 64 x d block.
 *
 * Prefill: one CTA of 4 warps per (64-query tile, query head); each warp owns 16 query rows, keeps
 * its O accumulator and running max/sum in registers, and walks the key tiles [0, last query + 1)
 * in order through a two-stage cp.async pipeline. Scores are formed, masked and exponentiated in
 * registers and fed straight back to the tensor cores as the A operand of P V: no n x N matrix
 * ever exists. Keys past the end of the valid range are zero-filled on load (never read as
 * garbage) and masked.
 *
 * Decode: the keys of each sequence are split in pieces of LH_CUDA_DECODE_SPLIT; each piece gives,
 * for every query head, an unnormalised partial (max, sum, O), and a second kernel merges the
 * splits of each (sequence, head) in split order (by units: in passes of a fixed number of splits,
 * carrying a running state, so the partials do not grow with the context). The split length is a
 * constant, so the plan, and therefore the bits, depend only on each sequence's length and not on
 * the batch. Two kernels make the partials:
 *   - by units (d = 32, 64, 128; the backend's path): a unit is one split whose pages and key count
 *     are the same for all its members, so forks of one prefix (16 sequences decoding after a 1M-token
 *     prefill) read that K/V once between them; the rows go through the prefill's tile step on tensor
 *     cores. A row's arithmetic does not depend on the other rows, so grouping changes no bits.
 *     Its timings against the scalar kernel and the floor of reading the KV once are in
 *     bench/NOTES.md, "Kernel notes: attention.cu";
 *   - scalar (any d with G d <= 2048): one CTA per (split, kv head, sequence), fp32 dot products
 *     from shared memory; for other head sizes and for comparisons (lh_cuda_tuning.decode 2).
 */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

#define PAGE 256
#define BQ 64
#define BK 64

static __device__ __forceinline__ int find_seg(const lh_cuda_aseg *segs, int nseg, int64_t r) {
  int lo = 0, hi = nseg - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (segs[mid].row0 <= r) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

static __global__ void rope_kv_kernel(const bf16 *__restrict__ qkv, int64_t qkv_stride, const lh_cuda_aseg *segs,
                                      int nseg, int H, int Hkv, int D, int rd, const float *__restrict__ inv_freq,
                                      float rope_af, const float *__restrict__ qscale, int lbase,
                                      bf16 *__restrict__ q_out) {
  const int64_t r = blockIdx.x;
  const lh_cuda_aseg seg = segs[find_seg(segs, nseg, r)];
  if (r < seg.row0 || r >= seg.row0 + seg.nrows) return;
  const int64_t pos = seg.pos + (r - seg.row0);
  bf16 *page = (bf16 *)seg.pages[pos / PAGE];
  const int prow = (int)(pos % PAGE), half = D / 2, rh = rd / 2;
  const bf16 *row = qkv + r * qkv_stride;
  /* The length-aware query scaling: g = fl32(ln((pos+1)/L0)) in double, clamped at 0; the factor
   * of head h is 1 + s_h g in fp32 (lh_length_scale_factor); 0 where it is off or pos < L0. */
  const float lg = qscale && lbase > 0 && pos + 1 > lbase ? (float)log((double)(pos + 1) / (double)lbase) : 0.0f;
  for (int idx = threadIdx.x; idx < (H + Hkv) * half; idx += blockDim.x) {
    const int head = idx / half, j = idx % half;
    const bf16 *src;
    bf16 *dst;
    float f = 1.0f;
    if (head < H) {
      src = row + (int64_t)head * D;
      dst = q_out + r * (int64_t)H * D + (int64_t)head * D;
      if (lg > 0.0f) f = 1.0f + qscale[head] * lg;
    } else {
      int g = head - H;
      src = row + (int64_t)H * D + (int64_t)g * D;
      dst = page + ((int64_t)g * PAGE + prow) * D;
    }
    if (j < rh) {
      /* The angle is an fp32 product as in HF; its cos/sin are taken in double and rounded. */
      double sd, cd;
      sincos((double)((float)pos * inv_freq[j]), &sd, &cd);
      const float sn = (float)sd * rope_af, cs = (float)cd * rope_af; /* exact for 1 */
      float x1 = lh_bf(src[j]), x2 = lh_bf(src[j + rh]);
      dst[j] = lh_tobf(f * (x1 * cs - x2 * sn));
      dst[j + rh] = lh_tobf(f * (x2 * cs + x1 * sn));
    } else {
      int jj = rd + 2 * (j - rh);
      if (f != 1.0f) {
        dst[jj] = lh_tobf(f * lh_bf(src[jj]));
        dst[jj + 1] = lh_tobf(f * lh_bf(src[jj + 1]));
      } else {
        dst[jj] = src[jj];
        dst[jj + 1] = src[jj + 1];
      }
    }
  }
  for (int idx = threadIdx.x; idx < Hkv * D; idx += blockDim.x) {
    int g = idx / D, j = idx % D;
    page[((int64_t)(Hkv + g) * PAGE + prow) * D + j] = row[(int64_t)(H + Hkv) * D + idx];
  }
}

extern "C" cudaError_t lh_cuda_rope_kv(cudaStream_t st, const void *qkv, int64_t qkv_stride, const lh_cuda_aseg *segs,
                                       int nseg, int64_t n, int H, int Hkv, int d, int rotary_dim,
                                       const float *inv_freq, float rope_af, const float *qscale, int lscale_base,
                                       void *q_out) {
  if (n <= 0) return cudaSuccess;
  if (d % 2 || rotary_dim % 2 || rotary_dim > d || lscale_base < 0) return cudaErrorInvalidValue;
  rope_kv_kernel<<<(unsigned)n, 128, 0, st>>>((const bf16 *)qkv, qkv_stride, segs, nseg, H, Hkv, d, rotary_dim,
                                              inv_freq, rope_af, qscale, lscale_base, (bf16 *)q_out);
  return cudaGetLastError();
}

/* ---- prefill ----------------------------------------------------------------------------- */

/* One 64-key tile of the online softmax for a warp's 16 query rows (this lane's rows g and g + 8):
 * S = Q K^T from qf and the tile's K (ks_, [BK][D + 8]) in log2 units; where need_mask, keys past
 * a row's last (kp > qp0, qp1) are masked; the running max (m0, m1), this lane's part of the sum
 * (l0, l1; the quad's parts are added at the end) and O (acc) are rescaled, and P, rounded to bf16,
 * times the tile's V (vs_) is added. A row's arithmetic depends only on its own q and the keys, not
 * on the other rows: the prefill and decode kernels share it. */
template <int D>
static __device__ __forceinline__ void attn_tile(const uint32_t (&qf)[D / 16][4], const bf16 *ks_, const bf16 *vs_,
                                                 int64_t kp_base, bool need_mask, int64_t qp0, int64_t qp1,
                                                 float scale_log2, float &m0, float &m1, float &l0, float &l1,
                                                 float (&acc)[D / 8][4]) {
  constexpr int LD = D + 8;
  const int t4 = threadIdx.x & 3;
  float sc[BK / 8][4];
#pragma unroll
  for (int i = 0; i < BK / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < D / 16; ks++) {
#pragma unroll
    for (int np = 0; np < BK / 16; np++) {
      uint32_t b0, b1, b2, b3;
      lh_ldsm_x4(b0, b1, b2, b3, lh_frag_bt_addr(ks_, LD, 16 * np, 16 * ks));
      lh_mma(sc[2 * np], qf[ks], b0, b1);
      lh_mma(sc[2 * np + 1], qf[ks], b2, b3);
    }
  }
  float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++) {
#pragma unroll
    for (int e = 0; e < 4; e++) {
      float v = sc[nt][e] * scale_log2;
      if (need_mask) {
        int64_t kp = kp_base + 8 * nt + 2 * t4 + (e & 1);
        if (kp > (e < 2 ? qp0 : qp1)) v = -INFINITY;
      }
      sc[nt][e] = v;
    }
    mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
    mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
  const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
  const float c0 = exp2f(m0 - base0), c1 = exp2f(m1 - base1);
  m0 = mn0, m1 = mn1;
  float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
  for (int nt = 0; nt < BK / 8; nt++) {
    sc[nt][0] = exp2f(sc[nt][0] - base0);
    sc[nt][1] = exp2f(sc[nt][1] - base0);
    sc[nt][2] = exp2f(sc[nt][2] - base1);
    sc[nt][3] = exp2f(sc[nt][3] - base1);
    s0 += sc[nt][0] + sc[nt][1];
    s1 += sc[nt][2] + sc[nt][3];
  }
  l0 = l0 * c0 + s0;
  l1 = l1 * c1 + s1;
#pragma unroll
  for (int i = 0; i < D / 8; i++) acc[i][0] *= c0, acc[i][1] *= c0, acc[i][2] *= c1, acc[i][3] *= c1;
#pragma unroll
  for (int ks = 0; ks < BK / 16; ks++) {
    uint32_t a[4];
    a[0] = lh_pack_bf16(sc[2 * ks][0], sc[2 * ks][1]);
    a[1] = lh_pack_bf16(sc[2 * ks][2], sc[2 * ks][3]);
    a[2] = lh_pack_bf16(sc[2 * ks + 1][0], sc[2 * ks + 1][1]);
    a[3] = lh_pack_bf16(sc[2 * ks + 1][2], sc[2 * ks + 1][3]);
#pragma unroll
    for (int np = 0; np < D / 16; np++) {
      uint32_t b0, b1, b2, b3;
      lh_ldsm_x4_t(b0, b1, b2, b3, lh_frag_b_addr(vs_, LD, 16 * ks, 16 * np));
      lh_mma(acc[2 * np], a, b0, b1);
      lh_mma(acc[2 * np + 1], a, b2, b3);
    }
  }
}

template <int D>
static __global__ void __launch_bounds__(128)
    attn_prefill_kernel(const bf16 *__restrict__ q, const lh_cuda_aseg *__restrict__ segs,
                        const int32_t *__restrict__ tiles, int H, int Hkv, float scale_log2, bf16 *__restrict__ o) {
  constexpr int LD = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *Qs = reinterpret_cast<bf16 *>(smem_raw);
  bf16 *Ks = Qs + BQ * LD; /* [2][BK][LD] */
  bf16 *Vs = Ks + 2 * BK * LD;

  const int head = blockIdx.y, kvh = head / (H / Hkv);
  const lh_cuda_aseg seg = segs[tiles[2 * blockIdx.x]];
  const int64_t r0 = tiles[2 * blockIdx.x + 1];
  const int rows = (int)min((int64_t)BQ, seg.nrows - r0);
  const int64_t qpos0 = seg.pos + r0;
  const int64_t kend = qpos0 + rows; /* keys [0, kend) */
  const int nkt = (int)((kend + BK - 1) / BK);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;
  const int64_t qstride = (int64_t)H * D;

  constexpr int CH = D / 8; /* 16-byte chunks per row */
  for (int idx = tid; idx < BQ * CH; idx += 128) {
    int rr = idx / CH, c = (idx % CH) * 8;
    const bf16 *src = q + (seg.row0 + r0 + (rr < rows ? rr : 0)) * qstride + (int64_t)head * D + c;
    lh_cp_async16(Qs + rr * LD + c, src, rr < rows);
  }
  auto load_kv = [&](int kt, int stage) {
    const int64_t p0 = (int64_t)kt * BK;
    const bf16 *page = (const bf16 *)seg.pages[p0 / PAGE];
    const int prow = (int)(p0 % PAGE);
    const bf16 *kb = page + ((int64_t)kvh * PAGE + prow) * D;
    const bf16 *vb = page + ((int64_t)(Hkv + kvh) * PAGE + prow) * D;
    bf16 *ks = Ks + stage * BK * LD, *vs = Vs + stage * BK * LD;
    for (int idx = tid; idx < BK * CH; idx += 128) {
      int rr = idx / CH, c = (idx % CH) * 8;
      bool ok = p0 + rr < kend;
      lh_cp_async16(ks + rr * LD + c, kb + (ok ? rr : 0) * D + c, ok);
      lh_cp_async16(vs + rr * LD + c, vb + (ok ? rr : 0) * D + c, ok);
    }
  };
  load_kv(0, 0);
  lh_cp_async_commit();

  uint32_t qf[D / 16][4];
  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  const int64_t qp0 = qpos0 + 16 * w + g, qp1 = qp0 + 8;

  for (int kt = 0; kt < nkt; kt++) {
    const int stage = kt & 1;
    if (kt + 1 < nkt) {
      load_kv(kt + 1, stage ^ 1);
      lh_cp_async_commit();
      lh_cp_async_wait<1>();
    } else {
      lh_cp_async_wait<0>();
    }
    __syncthreads();
    if (kt == 0) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ks++)
        lh_ldsm_x4(qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3], lh_frag_a_addr(Qs, LD, 16 * w, 16 * ks));
    }
    const bf16 *ks_ = Ks + stage * BK * LD, *vs_ = Vs + stage * BK * LD;

    const int64_t kp_base = (int64_t)kt * BK;
    attn_tile<D>(qf, ks_, vs_, kp_base, kp_base + BK - 1 > qpos0 + 16 * w, qp0, qp1, scale_log2, m0, m1, l0, l1, acc);
    __syncthreads(); /* this stage is read; the next iteration may refill it */
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  const int i0 = 16 * w + g, i1 = i0 + 8;
#pragma unroll
  for (int nt = 0; nt < D / 8; nt++) {
    int col = head * D + 8 * nt + 2 * t4;
    if (i0 < rows)
      *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i0) * qstride + col) =
          lh_pack_bf16(acc[nt][0] * inv0, acc[nt][1] * inv0);
    if (i1 < rows)
      *reinterpret_cast<uint32_t *>(o + (seg.row0 + r0 + i1) * qstride + col) =
          lh_pack_bf16(acc[nt][2] * inv1, acc[nt][3] * inv1);
  }
}

template <int D>
static cudaError_t launch_prefill(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, const int32_t *tiles,
                                  int ntiles, int H, int Hkv, void *o) {
  size_t smem = (size_t)(BQ + 4 * BK) * (D + 8) * sizeof(bf16);
  cudaError_t e = cudaFuncSetAttribute(attn_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)D));
  attn_prefill_kernel<D><<<dim3(ntiles, H), 128, smem, st>>>((const bf16 *)q, segs, tiles, H, Hkv, scale_log2,
                                                             (bf16 *)o);
  return cudaGetLastError();
}

/* ---- decode ------------------------------------------------------------------------------ */

#define DEC_THREADS 128
#define DEC_MAXP 16 /* (group heads x d) / DEC_THREADS accumulators per thread */

static __global__ void __launch_bounds__(DEC_THREADS)
    attn_decode_kernel(const bf16 *__restrict__ q, const lh_cuda_aseg *__restrict__ segs, int max_splits, int H,
                       int Hkv, int D, float scale_log2, float *__restrict__ partial) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int LD = (D + 15) / 8 * 8, G = H / Hkv; /* rows padded to a multiple of 8 elements, plus 8 */
  bf16 *Ks = reinterpret_cast<bf16 *>(smem_raw);    /* [BK][LD] */
  bf16 *Vs = Ks + BK * LD;                            /* [BK][LD] */
  float *qs = reinterpret_cast<float *>(Vs + BK * LD); /* [G][D] */
  float *sc = qs + G * D;                             /* [G][BK] */
  float *mrow = sc + G * BK, *lrow = mrow + G, *corr = lrow + G;

  const int sp = blockIdx.x, kvh = blockIdx.y;
  const lh_cuda_aseg seg = segs[blockIdx.z];
  const int64_t total = seg.pos + 1;
  const int64_t k0 = (int64_t)sp * LH_CUDA_DECODE_SPLIT;
  if (k0 >= total) return;
  const int64_t k1 = min(total, k0 + LH_CUDA_DECODE_SPLIT);
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
  const bool vec = D % 8 == 0;

  const bf16 *qrow = q + seg.row0 * (int64_t)H * D + (int64_t)kvh * G * D;
  for (int i = tid; i < G * D; i += DEC_THREADS) qs[i] = lh_bf(qrow[i]) * scale_log2;
  for (int i = tid; i < G; i += DEC_THREADS) mrow[i] = -INFINITY, lrow[i] = 0.0f;
  float acc[DEC_MAXP];
#pragma unroll
  for (int c = 0; c < DEC_MAXP; c++) acc[c] = 0.0f;
  const int CH = D / 8;

  for (int64_t t0 = k0; t0 < k1; t0 += BK) {
    const bf16 *page = (const bf16 *)seg.pages[t0 / PAGE];
    const int prow = (int)(t0 % PAGE);
    const bf16 *kb = page + ((int64_t)kvh * PAGE + prow) * D;
    const bf16 *vb = page + ((int64_t)(Hkv + kvh) * PAGE + prow) * D;
    __syncthreads(); /* the previous tile's K, V and scores are consumed */
    if (vec) {
      for (int idx = tid; idx < BK * CH; idx += DEC_THREADS) {
        int rr = idx / CH, c = (idx % CH) * 8;
        bool ok = t0 + rr < k1;
        lh_cp_async16(Ks + rr * LD + c, kb + (ok ? rr : 0) * D + c, ok);
        lh_cp_async16(Vs + rr * LD + c, vb + (ok ? rr : 0) * D + c, ok);
      }
      lh_cp_async_commit();
      lh_cp_async_wait<0>();
    } else { /* head sizes that are not a multiple of 8: element by element, zeros past the end */
      const bf16 zero = lh_tobf(0.0f);
      for (int idx = tid; idx < BK * D; idx += DEC_THREADS) {
        int rr = idx / D, c = idx % D;
        bool ok = t0 + rr < k1;
        Ks[rr * LD + c] = ok ? kb[rr * D + c] : zero;
        Vs[rr * LD + c] = ok ? vb[rr * D + c] : zero;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < G * BK; idx += DEC_THREADS) {
      int hh = idx / BK, key = idx % BK;
      float v = -INFINITY;
      if (t0 + key < k1) {
        const bf16 *kr = Ks + key * LD;
        const float *qq = qs + hh * D;
        float s = 0.0f;
        if (vec) {
          for (int j = 0; j < D; j += 8) {
            uint4 u = *reinterpret_cast<const uint4 *>(kr + j);
            const bf16 *e = reinterpret_cast<const bf16 *>(&u);
#pragma unroll
            for (int i = 0; i < 8; i++) s += lh_bf(e[i]) * qq[j + i];
          }
        } else {
          for (int j = 0; j < D; j++) s += lh_bf(kr[j]) * qq[j];
        }
        v = s;
      }
      sc[idx] = v;
    }
    __syncthreads();
    for (int hh = w; hh < G; hh += DEC_THREADS / 32) {
      float a = sc[hh * BK + lane], b = sc[hh * BK + lane + 32];
      float mx = lh_warp_max(fmaxf(a, b));
      float mo = mrow[hh], mn = fmaxf(mo, mx);
      float base = mn == -INFINITY ? 0.0f : mn;
      float pa = exp2f(a - base), pb = exp2f(b - base);
      sc[hh * BK + lane] = pa;
      sc[hh * BK + lane + 32] = pb;
      float sum = lh_warp_sum(pa + pb);
      if (lane == 0) {
        float c = exp2f(mo - base);
        corr[hh] = c;
        lrow[hh] = lrow[hh] * c + sum;
        mrow[hh] = mn;
      }
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < DEC_MAXP; c++) {
      int idx = tid + c * DEC_THREADS;
      if (idx < G * D) {
        int hh = idx / D, j = idx % D;
        float a = acc[c] * corr[hh];
        const float *p = sc + hh * BK;
        for (int key = 0; key < BK; key++) a += p[key] * lh_bf(Vs[key * LD + j]);
        acc[c] = a;
      }
    }
  }
  float *out = partial + (((int64_t)blockIdx.z * H + (int64_t)kvh * G) * max_splits + sp) * (D + 2);
#pragma unroll
  for (int c = 0; c < DEC_MAXP; c++) {
    int idx = tid + c * DEC_THREADS;
    if (idx < G * D) {
      int hh = idx / D, j = idx % D;
      out[(int64_t)hh * max_splits * (D + 2) + j] = acc[c];
    }
  }
  for (int hh = tid; hh < G; hh += DEC_THREADS) {
    out[(int64_t)hh * max_splits * (D + 2) + D] = mrow[hh];
    out[(int64_t)hh * max_splits * (D + 2) + D + 1] = lrow[hh];
  }
}

/* The merge of splits [s0, s0 + P) of each (sequence, head) (partial: [nseg][H][P][D + 2], split s at
 * s - s0) into its running state run ([nseg][H][D + 2]: the sums of O and of the weights, relative
 * to 2^max, and that max), in split order; the pass that holds a sequence's last split writes its row
 * of o instead. The first pass starts from nothing, so one pass over every split (s0 0, P at least the
 * splits; run unused) is the plain ordered merge, and up to P splits the bits do not depend on P. */
static __global__ void attn_merge_kernel(const float *__restrict__ partial, const lh_cuda_aseg *__restrict__ segs,
                                         int s0, int P, int H, int D, float *__restrict__ run, bf16 *__restrict__ o) {
  const int head = blockIdx.x;
  const lh_cuda_aseg seg = segs[blockIdx.y];
  const int nsplit = (int)((seg.pos + 1 + LH_CUDA_DECODE_SPLIT - 1) / LH_CUDA_DECODE_SPLIT);
  if (nsplit <= s0) return;
  const int s1 = min(nsplit, s0 + P);
  const float *base = partial + ((int64_t)blockIdx.y * H + head) * P * (D + 2);
  float *r = s0 || s1 < nsplit ? run + ((int64_t)blockIdx.y * H + head) * (D + 2) : nullptr;
  const float m_run = s0 ? r[D] : -INFINITY, l_run = s0 ? r[D + 1] : 0.0f;
  __syncthreads(); /* every thread has read the running max and sum before they are rewritten */
  float M = m_run;
  for (int s = s0; s < s1; s++) M = fmaxf(M, base[(int64_t)(s - s0) * (D + 2) + D]);
  const float w_run = s0 ? exp2f(m_run - M) : 0.0f;
  for (int j = threadIdx.x; j < D; j += blockDim.x) {
    float num = s0 ? r[j] * w_run : 0.0f, den = s0 ? l_run * w_run : 0.0f;
    for (int s = s0; s < s1; s++) {
      const float *p = base + (int64_t)(s - s0) * (D + 2);
      float wgt = exp2f(p[D] - M);
      num += p[j] * wgt;
      den += p[D + 1] * wgt;
    }
    if (s1 == nsplit) {
      o[seg.row0 * (int64_t)H * D + (int64_t)head * D + j] = lh_tobf(num / den);
    } else {
      r[j] = num;
      if (j == 0) r[D] = M, r[D + 1] = den;
    }
  }
}

/* ---- decode by units (forks sharing a prefix read its K/V once) ---------------------------------- */

/* One CTA per (unit, kv head): a unit is one split of keys [k0, k1) whose pages and k1 are the same
 * for each of its members (kernels/cpu/decode_plan.h), so that forks of one prefix read that split's K/V
 * once between them. The unit's rows are its members' query heads of this kv head, member-major
 * (row r: member r / G, head r % G), 16 to a warp; each warp walks the split's 64-key tiles through
 * attn_tile (tensor cores, as the prefill) and writes its rows' unnormalised partials in the layout
 * of attn_decode_kernel's, which attn_merge_kernel merges in split order. The K/V tiles go through
 * DEC_NS cp.async stages filled by all the CTA's warps; the launch gives every CTA the warps of the
 * largest unit, and a warp past its unit's rows only loads. */
/* Two stages: a one-warp CTA (a sequence alone: 8 rows) is bound by its own instruction issue, so
 * what counts is how many CTAs fit an SM: 70 KB of stages let three, which beats three stages (two
 * CTAs an SM), four (one) and more warps a CTA sharing the loads (bench/NOTES.md, "Kernel notes:
 * attention.cu"). */
#define DEC_NS 2

template <int D>
static __global__ void __launch_bounds__(32 * LH_CUDA_DECODE_ROWS / 16)
    attn_decode_units_kernel(const bf16 *__restrict__ q, const lh_cuda_aseg *__restrict__ segs,
                             const int32_t *__restrict__ units, const int32_t *__restrict__ members, int s0, int P,
                             int H, int Hkv, float scale_log2, float *__restrict__ partial) {
  constexpr int LD = D + 8, CH = D / 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16 *Ks = reinterpret_cast<bf16 *>(smem_raw); /* [DEC_NS][BK][LD] */
  bf16 *Vs = Ks + DEC_NS * BK * LD;

  const int G = H / Hkv, kvh = blockIdx.y;
  const int32_t *u = units + 3 * (int64_t)blockIdx.x;
  const int sp = u[0], rows = u[2] * G;
  const int32_t *mem = members + u[1];
  const lh_cuda_aseg seg0 = segs[mem[0]]; /* every member has these pages and this k1 */
  const int64_t k0 = (int64_t)sp * LH_CUDA_DECODE_SPLIT, k1 = min(seg0.pos + 1, k0 + LH_CUDA_DECODE_SPLIT);
  const int nkt = (int)((k1 - k0 + BK - 1) / BK);
  const int tid = threadIdx.x, nthr = blockDim.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t4 = lane & 3;

  auto load_kv = [&](int kt, int stage) { /* a 64-key tile never crosses a page: k0 is a multiple of 64 */
    const int64_t p0 = k0 + (int64_t)kt * BK;
    const bf16 *page = (const bf16 *)seg0.pages[p0 / PAGE];
    const int prow = (int)(p0 % PAGE);
    const bf16 *kb = page + ((int64_t)kvh * PAGE + prow) * D;
    const bf16 *vb = page + ((int64_t)(Hkv + kvh) * PAGE + prow) * D;
    bf16 *ks = Ks + stage * BK * LD, *vs = Vs + stage * BK * LD;
    for (int idx = tid; idx < BK * CH; idx += nthr) {
      int rr = idx / CH, c = (idx % CH) * 8;
      bool ok = p0 + rr < k1;
      lh_cp_async16(ks + rr * LD + c, kb + (ok ? rr : 0) * D + c, ok);
      lh_cp_async16(vs + rr * LD + c, vb + (ok ? rr : 0) * D + c, ok);
    }
  };
#pragma unroll
  for (int st = 0; st < DEC_NS - 1; st++) {
    if (st < nkt) load_kv(st, st);
    lh_cp_async_commit();
  }

  /* this warp's rows' q as mma A fragments, straight from global (rows past the unit's are zero) */
  const bool active = 16 * w < rows;
  auto qrow = [&](int r) -> const uint32_t * {
    if (r >= rows) return nullptr;
    const int64_t row = segs[mem[r / G]].row0;
    return reinterpret_cast<const uint32_t *>(q + row * (int64_t)H * D + (int64_t)(kvh * G + r % G) * D);
  };
  uint32_t qf[D / 16][4];
  const int r0 = 16 * w + g, r1 = r0 + 8;
  if (active) {
    const uint32_t *q0 = qrow(r0), *q1 = qrow(r1);
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
      const int c = 8 * ks + t4; /* in bf16 pairs: columns 16 ks + 2 t4 (+ 8) */
      qf[ks][0] = q0 ? q0[c] : 0u;
      qf[ks][1] = q1 ? q1[c] : 0u;
      qf[ks][2] = q0 ? q0[c + 4] : 0u;
      qf[ks][3] = q1 ? q1[c + 4] : 0u;
    }
  }
  float acc[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int kt = 0; kt < nkt; kt++) {
    const int ahead = kt + DEC_NS - 1; /* refills the stage that tile kt - 1 used */
    if (ahead < nkt) load_kv(ahead, ahead % DEC_NS);
    lh_cp_async_commit();
    lh_cp_async_wait<DEC_NS - 1>();
    __syncthreads();
    const int stage = kt % DEC_NS;
    const int64_t kp_base = k0 + (int64_t)kt * BK;
    if (active)
      attn_tile<D>(qf, Ks + stage * BK * LD, Vs + stage * BK * LD, kp_base, kp_base + BK > k1, k1 - 1, k1 - 1,
                   scale_log2, m0, m1, l0, l1, acc);
    __syncthreads(); /* this stage is read; the next iteration may refill it */
  }
  if (!active) return;

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
  for (int hf = 0; hf < 2; hf++) {
    const int r = hf ? r1 : r0;
    if (r >= rows) continue;
    const int head = kvh * G + r % G;
    float *out = partial + (((int64_t)mem[r / G] * H + head) * P + (sp - s0)) * (D + 2);
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++) {
      out[8 * nt + 2 * t4] = acc[nt][2 * hf];
      out[8 * nt + 2 * t4 + 1] = acc[nt][2 * hf + 1];
    }
    if (t4 == 0) out[D] = hf ? m1 : m0, out[D + 1] = hf ? l1 : l0;
  }
}

template <int D>
static cudaError_t launch_decode_units(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, const int32_t *units,
                                       int nunits, const int32_t *members, int max_count, int s0, int P, int H,
                                       int Hkv, float *partial) {
  const int G = H / Hkv, warps = (max_count * G + 15) / 16;
  if (warps < 1 || warps * 16 > LH_CUDA_DECODE_ROWS) return cudaErrorInvalidValue;
  const size_t smem = (size_t)2 * DEC_NS * BK * (D + 8) * sizeof(bf16);
  cudaError_t e =
      cudaFuncSetAttribute(attn_decode_units_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)D));
  attn_decode_units_kernel<D><<<dim3(nunits, Hkv), 32 * warps, smem, st>>>(
      (const bf16 *)q, segs, units, members, s0, P, H, Hkv, scale_log2, partial);
  return cudaGetLastError();
}

extern "C" cudaError_t lh_cuda_attn_decode_units(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, int nseg,
                                                 const int32_t *units, const int32_t *host_units, int nunits,
                                                 const int32_t *members, int max_count, int pass_splits, int H,
                                                 int Hkv, int d, float *partial, float *run, void *o) {
  if (nseg <= 0 || nunits <= 0) return cudaSuccess;
  if (Hkv <= 0 || H % Hkv || pass_splits < 1) return cudaErrorInvalidValue;
  if (d != 128 && d != 64 && d != 32) return cudaErrorNotSupported;
  auto launch = d == 128 ? launch_decode_units<128> : d == 64 ? launch_decode_units<64> : launch_decode_units<32>;
  /* units come in split order: pass by pass, the units of splits [s0, s0 + pass_splits), then their merge */
  for (int u0 = 0; u0 < nunits;) {
    const int s0 = host_units[3 * u0] / pass_splits * pass_splits;
    int u1 = u0;
    while (u1 < nunits && host_units[3 * u1] < s0 + pass_splits) u1++;
    cudaError_t e = launch(st, q, segs, units + 3 * u0, u1 - u0, members, max_count, s0, pass_splits, H, Hkv, partial);
    if (e != cudaSuccess) return e;
    attn_merge_kernel<<<dim3(H, nseg), 128, 0, st>>>(partial, segs, s0, pass_splits, H, d, run, (bf16 *)o);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    u0 = u1;
  }
  return cudaSuccess;
}

extern "C" cudaError_t lh_cuda_attn_prefill(cudaStream_t st, const void *q, const lh_cuda_aseg *segs,
                                            const int32_t *tiles, int ntiles, int H, int Hkv, int d, void *o) {
  if (ntiles <= 0) return cudaSuccess;
  if (Hkv <= 0 || H % Hkv) return cudaErrorInvalidValue;
  switch (d) {
    case 128: return launch_prefill<128>(st, q, segs, tiles, ntiles, H, Hkv, o);
    case 64: return launch_prefill<64>(st, q, segs, tiles, ntiles, H, Hkv, o);
    case 32: return launch_prefill<32>(st, q, segs, tiles, ntiles, H, Hkv, o);
    default: return cudaErrorNotSupported;
  }
}

extern "C" cudaError_t lh_cuda_attn_decode(cudaStream_t st, const void *q, const lh_cuda_aseg *segs, int nseg,
                                           int max_splits, int H, int Hkv, int d, float *partial, void *o) {
  if (nseg <= 0) return cudaSuccess;
  if (Hkv <= 0 || H % Hkv || d < 1 || (H / Hkv) * d > DEC_MAXP * DEC_THREADS) return cudaErrorInvalidValue;
  const int G = H / Hkv;
  const int ld = (d + 15) / 8 * 8;
  size_t smem = (size_t)2 * BK * ld * sizeof(bf16) + ((size_t)G * d + (size_t)G * BK + 3 * G) * sizeof(float);
  cudaError_t e = cudaFuncSetAttribute(attn_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return e;
  const float scale_log2 = (float)(1.4426950408889634 / sqrt((double)d));
  attn_decode_kernel<<<dim3(max_splits, Hkv, nseg), DEC_THREADS, smem, st>>>((const bf16 *)q, segs, max_splits, H, Hkv,
                                                                             d, scale_log2, partial);
  e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  attn_merge_kernel<<<dim3(H, nseg), 128, 0, st>>>(partial, segs, 0, max_splits, H, d, nullptr, (bf16 *)o);
  return cudaGetLastError();
}

/* ---- pages -> contiguous K and V (for cuDNN's non-paged fused attention) ---------------------- */

/* One CTA per (page, K or V, kv head): a 256 x d block that is contiguous in the page and lands
 * contiguous at rows [page * 256, page * 256 + 256) of that head's [stride_keys][d] slab. */
static __global__ void kv_gather_kernel(void *const *pages, int Hkv, int d, int64_t stride_keys, bf16 *k, bf16 *v) {
  const int64_t pg = blockIdx.x;
  const int kind = blockIdx.y / Hkv, g = blockIdx.y % Hkv;
  const int4 *src = (const int4 *)((const bf16 *)pages[pg] + ((int64_t)kind * Hkv + g) * PAGE * d);
  int4 *dst = (int4 *)((kind ? v : k) + ((int64_t)g * stride_keys + pg * PAGE) * d);
  const int n = PAGE * d / 8; /* int4 = 8 bf16 */
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

extern "C" cudaError_t lh_cuda_kv_gather(cudaStream_t st, void *const *pages, int64_t npages, int Hkv, int d,
                                         int64_t stride_keys, void *k, void *v) {
  if (npages <= 0) return cudaSuccess;
  if (d % 8 || npages * PAGE > stride_keys) return cudaErrorInvalidValue;
  kv_gather_kernel<<<dim3((unsigned)npages, 2 * Hkv), 256, 0, st>>>(pages, Hkv, d, stride_keys, (bf16 *)k, (bf16 *)v);
  return cudaGetLastError();
}

/* Merging softmax attention computed over stretches of keys: per (row, head) the running result
 * acc (fp32) with its log-sum-exp lse_acc takes in the stretch's part (bf16) and lse_part:
 *   m = max(la, lb), wa = e^(la - m), wb = e^(lb - m), acc = (wa acc + wb part) / (wa + wb),
 *   lse = m + log(wa + wb).
 * A block of 256 threads covers 256 / d (row, head) pairs, d threads each. */
static __global__ void attn_merge_kernel(const bf16 *part, const float *lse_part, float *acc, float *lse_acc, bf16 *out,
                                         int64_t n, int H, int d, int first, int last) {
  const int per = blockDim.x / d, sub = threadIdx.x / d, e = threadIdx.x % d;
  const int64_t pair = (int64_t)blockIdx.x * per + sub; /* row * H + head */
  const bool live = sub < per && pair < n * H;
  const int64_t row = pair / H, head = pair % H, i = pair * d + e;
  float lb = 0, la = 0;
  if (live) {
    lb = lse_part[head * n + row];
    la = first ? -INFINITY : lse_acc[head * n + row];
  }
  __syncthreads(); /* every thread of the pair has read lse_acc before it is rewritten */
  if (!live) return;
  const float m = fmaxf(la, lb), wa = first ? 0.0f : __expf(la - m), wb = __expf(lb - m), z = wa + wb;
  const float v = ((first ? 0.0f : wa * acc[i]) + wb * __bfloat162float(part[i])) / z;
  if (last) out[i] = __float2bfloat16_rn(v);
  else acc[i] = v;
  if (e == 0) lse_acc[head * n + row] = m + logf(z);
}

extern "C" cudaError_t lh_cuda_attn_merge(cudaStream_t st, const void *part, const float *lse_part, float *acc,
                                          float *lse_acc, void *out, int64_t n, int H, int d, int first, int last) {
  if (n <= 0) return cudaSuccess;
  if (d <= 0 || d > 256 || 256 % d) return cudaErrorInvalidValue;
  const int per = 256 / d;
  const int64_t blocks = (n * H + per - 1) / per;
  attn_merge_kernel<<<(unsigned)blocks, 256, 0, st>>>((const bf16 *)part, lse_part, acc, lse_acc, (bf16 *)out, n, H, d,
                                                      first, last);
  return cudaGetLastError();
}
