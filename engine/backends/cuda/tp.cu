/* tp.cu — the pieces of a tensor/expert-parallel layer that a one-GPU layer does not need (issue
 * 10): the lightning all-heads norm split around an all-reduce of its sums of squares, fp32
 * partial outputs (the all-reduce adds fp32, so the ranks' shares are not rounded to bf16 before
 * they are summed), and the all-reduce itself, through NCCL or through the ranks' host transport
 * (engine/comm.h).
 *
 * The split norm is the CPU reference's (kernels/cpu, backend_cpu.c tp_attn_lightning): each rank
 * sums the squares of its own heads' columns of a row, the sums are all-reduced, and each rank
 * scales its columns by rsqrt(total / (H * d) + eps). With one rank the backend keeps its fused
 * kernel (norm.cu), so one-GPU runs are unchanged to the bit.
 *
 * Transport. NCCL (when this build found it) all-reduces device buffers on the compute stream.
 * Without it, or when several ranks share one GPU (NCCL refuses that; it is how the partitioning is
 * checked on a one-GPU machine), the buffer goes to pinned host memory, through lh_comm_sum_f32
 * (rank-order sums over MPI or TCP), and back. LH_CUDA_TP_TRANSPORT=host forces the second.
 */
#include <string.h>

#include "engine/backends/cuda/backend_internal.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"
extern "C" {
#include "engine/comm.h"
}
#ifdef LH_HAVE_NCCL
#include <nccl.h>
#endif

#define NTHREADS 256

static __global__ void row_sumsq_kernel(const bf16 *__restrict__ o, int64_t stride, int width, float *__restrict__ ss) {
  __shared__ float scratch[32];
  const bf16 *row = o + (int64_t)blockIdx.x * stride;
  float s = 0.0f;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float v = lh_bf(row[i]);
    s += v * v;
  }
  s = lh_block_sum(s, scratch);
  if (threadIdx.x == 0) ss[blockIdx.x] = s;
}

extern "C" cudaError_t lh_cuda_row_sumsq(cudaStream_t st, const void *o, int64_t stride, int64_t n, int width,
                                         float *ss) {
  if (n <= 0) return cudaSuccess;
  row_sumsq_kernel<<<(unsigned)n, NTHREADS, 0, st>>>((const bf16 *)o, stride, width, ss);
  return cudaGetLastError();
}

static __global__ void norm_gate_ss_kernel(const bf16 *o, int64_t o_stride, const bf16 *__restrict__ gate,
                                           int64_t gate_stride, int width, float total_width,
                                           const float *__restrict__ ss, const float *__restrict__ w, float eps,
                                           bf16 *y, int64_t y_stride) {
  const int64_t r = blockIdx.x;
  const float sc = rsqrtf(ss[r] / total_width + eps);
  const bf16 *orow = o + r * o_stride, *grow = gate + r * gate_stride;
  bf16 *yr = y + r * y_stride;
  for (int i = threadIdx.x; i < width; i += blockDim.x) { /* each element is read before it is written */
    float nv = lh_bf(lh_tobf(lh_bf(orow[i]) * sc * w[i]));
    yr[i] = lh_tobf(lh_sigmoid(lh_bf(grow[i])) * nv);
  }
}

extern "C" cudaError_t lh_cuda_norm_gate_ss(cudaStream_t st, const void *o, int64_t o_stride, const void *gate,
                                            int64_t gate_stride, int64_t n, int width, int total_width,
                                            const float *ss, const float *w, float eps, void *y, int64_t y_stride) {
  if (n <= 0) return cudaSuccess;
  norm_gate_ss_kernel<<<(unsigned)n, NTHREADS, 0, st>>>((const bf16 *)o, o_stride, (const bf16 *)gate, gate_stride,
                                                         width, (float)total_width, ss, w, eps, (bf16 *)y, y_stride);
  return cudaGetLastError();
}

static __global__ void to_bf16_kernel(const float *__restrict__ x, int64_t count, bf16 *__restrict__ y) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = lh_tobf(x[i]);
}

extern "C" cudaError_t lh_cuda_f32_to_bf16(cudaStream_t st, const float *x, int64_t count, void *y) {
  if (count <= 0) return cudaSuccess;
  int64_t blocks = (count + NTHREADS - 1) / NTHREADS;
  if (blocks > 65535) blocks = 65535;
  to_bf16_kernel<<<(unsigned)blocks, NTHREADS, 0, st>>>(x, count, (bf16 *)y);
  return cudaGetLastError();
}

/* The combine of a rank's experts: slots whose expert is outside [e0, e1) add nothing. Y is bf16
 * (an expert's whole output) or float (a partial sum over part of its width). */
static __device__ __forceinline__ float value_of(float x) { return x; }
static __device__ __forceinline__ float value_of(bf16 x) { return lh_bf(x); }

template <typename Y>
static __global__ void combine_share_kernel(const Y *__restrict__ y, const int32_t *__restrict__ pos,
                                            const int32_t *__restrict__ ids, const float *__restrict__ wts, int K,
                                            int width, int e0, int e1, float *__restrict__ out) {
  const int64_t t = blockIdx.x;
  for (int c = threadIdx.x; c < width; c += blockDim.x) {
    float a = 0.0f;
    for (int k = 0; k < K; k++) {
      const int e = ids[t * K + k];
      if (e >= e0 && e < e1) a += wts[t * K + k] * value_of(y[(int64_t)pos[t * K + k] * width + c]);
    }
    out[t * width + c] = a;
  }
}

extern "C" cudaError_t lh_cuda_moe_combine_share(cudaStream_t st, const void *y, int y_f32, const int32_t *pos,
                                                 const int32_t *ids, const float *wts, int64_t n, int K, int width,
                                                 int e0, int e1, float *out) {
  if (n <= 0) return cudaSuccess;
  if (y_f32)
    combine_share_kernel<<<(unsigned)n, 256, 0, st>>>((const float *)y, pos, ids, wts, K, width, e0, e1, out);
  else
    combine_share_kernel<<<(unsigned)n, 256, 0, st>>>((const bf16 *)y, pos, ids, wts, K, width, e0, e1, out);
  return cudaGetLastError();
}

/* ---- the all-reduce ------------------------------------------------------------------------- */

lh_status lh_cu_tp_open(lh_cuda_backend *b, lh_error *err) {
  const char *tr = getenv("LH_CUDA_TP_TRANSPORT");
  if (tr && strcmp(tr, "host") && strcmp(tr, "nccl") && strcmp(tr, "auto"))
    return lh_error_set(err, LH_EINVAL, "LH_CUDA_TP_TRANSPORT is '%s'; use nccl, host or auto", tr);
  const size_t bytes = (size_t)b->max_rows * b->cfg.hidden_size * sizeof(float);
  CU(cudaHostAlloc((void **)&b->tp_host, bytes, cudaHostAllocDefault));
  b->tp_nccl = NULL;
  bool want_nccl = !tr || strcmp(tr, "host");
#ifdef LH_HAVE_NCCL
  int ndev = 0;
  CU(cudaGetDeviceCount(&ndev));
  /* NCCL needs one GPU per rank: ranks that share a GPU use the host transport */
  if (want_nccl && lh_comm_local_size(b->comm) > ndev) {
    if (tr && !strcmp(tr, "nccl"))
      return lh_error_set(err, LH_EUNSUPPORTED, "LH_CUDA_TP_TRANSPORT=nccl, but %d ranks on this host share %d GPU%s; "
                          "NCCL needs one GPU per rank", lh_comm_local_size(b->comm), ndev, ndev == 1 ? "" : "s");
    want_nccl = false;
  }
  if (want_nccl) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (b->tp_rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) return lh_error_set(err, LH_EBACKEND, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    }
    LH_TRY(lh_comm_bcast(b->comm, &id, sizeof id, 0, err));
    ncclComm_t nc;
    ncclResult_t r = ncclCommInitRank(&nc, b->tp, id, b->tp_rank);
    if (r != ncclSuccess)
      return lh_error_set(err, LH_EBACKEND, "ncclCommInitRank (rank %d of %d, GPU %d): %s", b->tp_rank, b->tp,
                          b->device, ncclGetErrorString(r));
    b->tp_nccl = nc;
  }
#else
  if (tr && !strcmp(tr, "nccl"))
    return lh_error_set(err, LH_EUNSUPPORTED, "LH_CUDA_TP_TRANSPORT=nccl, but this build found no NCCL (set NCCL_ROOT "
                        "when configuring)");
  (void)want_nccl;
#endif
  return LH_OK;
}

void lh_cu_tp_close(lh_cuda_backend *b) {
#ifdef LH_HAVE_NCCL
  if (b->tp_nccl) ncclCommDestroy((ncclComm_t)b->tp_nccl);
#endif
  b->tp_nccl = NULL;
  cudaFreeHost(b->tp_host);
  b->tp_host = NULL;
}

const char *lh_cu_tp_transport(const lh_cuda_backend *b) { return b->tp_nccl ? "nccl" : "host"; }

lh_status lh_cu_tp_sum(lh_cuda_backend *b, float *dev, int64_t count, lh_error *err) {
  if (b->tp < 2 || count <= 0) return LH_OK;
#ifdef LH_HAVE_NCCL
  if (b->tp_nccl) {
    ncclResult_t r = ncclAllReduce(dev, dev, (size_t)count, ncclFloat32, ncclSum, (ncclComm_t)b->tp_nccl, b->stream);
    if (r != ncclSuccess) return lh_error_set(err, LH_EBACKEND, "ncclAllReduce: %s", ncclGetErrorString(r));
    return LH_OK;
  }
#endif
  if ((size_t)count > (size_t)b->max_rows * b->cfg.hidden_size)
    return lh_error_set(err, LH_EINVAL, "cuda tp sum: %lld values, the host buffer holds %lld", (long long)count,
                        (long long)b->max_rows * b->cfg.hidden_size);
  CU(cudaMemcpyAsync(b->tp_host, dev, (size_t)count * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
  CU(cudaStreamSynchronize(b->stream));
  LH_TRY(lh_comm_sum_f32(b->comm, b->tp_host, count, err));
  CU(cudaMemcpyAsync(dev, b->tp_host, (size_t)count * sizeof(float), cudaMemcpyHostToDevice, b->stream));
  /* the next sum overwrites tp_host: its copy up must be done first */
  CU(cudaStreamSynchronize(b->stream));
  return LH_OK;
}
