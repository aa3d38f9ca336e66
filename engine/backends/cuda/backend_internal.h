/* backend_internal.h — the CUDA backend's private state, shared by backend_cuda.cu (the operations),
 * weights_cuda.cu (binding a model: upload or random weights, workspace) and transfer.cu (memory
 * the engine allocates, host copies, checkpoint copies). C++ (nvcc) only.
 *
 * Ownership: everything here is owned by the backend and released by close. Device weights live in
 * one allocation carved into named pointers; the workspace likewise. All work goes to one compute
 * stream (so cuBLAS stays reproducible and buffer reuse is ordered); checkpoint copies drain on a
 * second stream.
 */
#ifndef LH_KERNELS_CUDA_BACKEND_INTERNAL_H
#define LH_KERNELS_CUDA_BACKEND_INTERNAL_H

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <deque>
#include <unordered_map>
#include <vector>

extern "C" {
#include "util/err.h" /* a C header without C++ guards: give it C linkage before anyone else includes it */
}
#include "engine/backend.h"
#include "engine/backends/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#include "util/err.h"

typedef uint16_t bf16_t; /* bf16 bits on the host side */

struct cu_layer {
  lh_layer_kind kind;
  float *in_norm, *post_norm;  /* [hidden] */
  /* lightning */
  bf16_t *qkvg;                /* [4*H*d, hidden]: qkv rows (per head q, k, v) then output_gate rows */
  bf16_t *out_proj;            /* [hidden, H*d] */
  float *attn_norm;            /* [H*d] */
  float *slope;                /* [H] */
  /* softmax */
  bf16_t *qkv;                 /* [(H + 2*Hkv)*d, hidden]: q_proj, k_proj, v_proj rows */
  bf16_t *o_proj;              /* [hidden, H*d] */
  float *length_scale;         /* [H] s_h of the length-aware query scaling; NULL when the config has it off */
  /* MoE */
  bf16_t *router;              /* [E, hidden] */
  bf16_t *w13;                 /* [E][2*I, hidden]: w1 (gate) rows then w3 (up) rows */
  bf16_t *w2;                  /* [E][hidden, I] */
};

struct cu_async {              /* one checkpoint copy in flight: pinned staging -> caller's memory */
  void *dst;
  const void *pinned;
  size_t bytes;
};

struct lh_cuda_backend {
  lh_backend base;             /* first: the engine sees an lh_backend */
  lh_config cfg;
  int64_t max_rows;
  int device;
  cudaStream_t stream, copy_stream;
  cudaEvent_t snap_event;
  cublasHandle_t blas;
  void *blas_ws;
  lh_cuda_tuning tune;
  int grouped_status;          /* cublasStatus_t of a grouped GEMM cuBLAS refused (0: none) */

  /* weights */
  const lh_weights *hw;        /* the host views the model was opened with (or `own_w`) */
  lh_weights own_w;            /* random model: views with data NULL so norms can be named */
  std::vector<lh_layer_weights> own_layers;
  void *wmem;
  size_t wbytes;
  bf16_t *embed, *lm_head;     /* [vocab, hidden] (the same pointer when tied) */
  float *final_norm;
  std::vector<cu_layer> layers;
  std::unordered_map<const lh_tensor *, float *> norm_of; /* host norm tensor -> device fp32 copy */
  float *inv_freq;             /* [rotary_dim / 2] */
  float rope_af;               /* cos and sin times this (lh_rope_table: 1 unless YaRN) */

  /* workspace (one allocation) */
  void *wsmem;
  size_t wsbytes;
  void *act[LH_ACT_SLOTS];     /* [max_rows, hidden] bf16 */
  bf16_t *proj;                /* [max_rows, max(4*H*d, (H+2Hkv)*d)] */
  bf16_t *attn_o;              /* [max_rows, H*d] */
  bf16_t *q_rope;              /* [max_rows, H*d] */
  float *rlogits;              /* [max_rows, E] */
  int32_t *ids, *pos, *src_row, *hist, *offsets;
  float *wts;
  bf16_t *xs, *gu, *sact, *ys; /* [max_rows*K, hidden | 2I | I | hidden] */
  void **ptrs;                 /* 6 * E device pointers for the grouped GEMMs */
  int64_t lg_rows;             /* rows per lm_head batch */
  bf16_t *lg_x;                /* [lg_rows, hidden] */
  float *lg_out;               /* [lg_rows, vocab] */
  int32_t *tok_out;            /* [lg_rows] */
  float *partial;              /* decode split partials (grown on demand) */
  size_t partial_bytes;
  int *light_sync;             /* lh_cuda_lightning's per (segment, head) flags, zero between calls */
  size_t light_sync_bytes;

  /* small host -> device uploads: a pinned ring mirrored by a device ring */
  unsigned char *up_host, *up_dev;
  size_t up_cap, up_off;
  std::vector<std::pair<unsigned char *, unsigned char *>> retired; /* outgrown rings (device, host) */
  /* small device -> host reads */
  void *rb_host;
  size_t rb_cap;

  /* memory handed to the engine */
  std::unordered_map<void *, size_t> live;
  std::unordered_map<size_t, std::vector<void *>> pool;
  size_t live_bytes, pooled_bytes;

  /* KV pages come out of one reserved virtual range (mapped a chunk at a time), so that a
   * sequence's pages are block indices from one base: what cuDNN's paged attention reads. */
  size_t kv_page_bytes;        /* 0: no softmax layers */
  CUdeviceptr kv_base;         /* 0: arena unavailable (pages from cudaMalloc, cuDNN path off) */
  size_t kv_reserved, kv_mapped, kv_chunk;
  int64_t kv_next;             /* pages carved so far */
  std::vector<CUmemGenericAllocationHandle> kv_handles;
  struct lh_cudnn_attn *cudnn; /* NULL: not available or turned off */
  int cudnn_warned;
  int64_t cudnn_calls;         /* segments cuDNN has run */
  void *kvc;                   /* K and V gathered contiguous for cuDNN (grows with context up to its cap) */
  size_t kvc_bytes;
  void *merge;                 /* cuDNN over stretches of keys: [rows x H x d] fp32 + 2 x [H x rows] fp32 */
  size_t merge_bytes;
  char cudnn_why[1024];        /* its last refusal ("" if none) */

  /* tensor/expert parallel ranks (issue 10; tp.cu): this process is rank tp_rank of tp and holds
   * heads [h0, h0 + Hl), kv heads [g0, g0 + Gl), experts [e0, e1) and, of each of those experts,
   * the intermediate rows [i0, i0 + Il). LH_CUDA_MOE_SPLIT picks the MoE's split: "experts"
   * (expert parallel, the default: E/R whole experts a rank) or "width" (tensor-parallel experts:
   * every expert, I/R of its width). tp 1: all. */
  struct lh_comm *comm;        /* the ranks' world (engine/comm.h); NULL with one rank */
  int tp, tp_rank;
  int Hl, Gl, h0, g0, e0, e1, i0, Il;
  std::vector<int32_t> moe_rows; /* rows routed to each expert by the last MoE op (lh_cuda_moe_counts) */
  float *tp_f32;               /* [max_rows, hidden] fp32: a rank's partial output, then the sum */
  float *tp_ss;                /* [max_rows]: the lightning norm's sums of squares */
  float *tp_host;              /* pinned [max_rows, hidden]: the host transport's buffer */
  void *tp_nccl;               /* ncclComm_t, or NULL: the host transport */

  /* checkpoint copies */
  unsigned char *snap_dev, *snap_host;
  size_t snap_cap, snap_off;
  std::deque<cu_async> pending;
};

static inline lh_cuda_backend *cu_be(lh_backend *be) { return reinterpret_cast<lh_cuda_backend *>(be); }

lh_status lh_cu_fail(lh_error *err, const char *call, cudaError_t e, const char *file, int line);
lh_status lh_cu_blas_fail(lh_error *err, const char *call, cublasStatus_t s, const char *file, int line);

/* Check a CUDA or cuBLAS call; on failure record which call and why, and return LH_EBACKEND. */
#define CU(call)                                                                            \
  do {                                                                                      \
    cudaError_t cu_e_ = (call);                                                             \
    if (cu_e_ != cudaSuccess) return lh_cu_fail(err, #call, cu_e_, __FILE__, __LINE__);     \
  } while (0)
#define CB(call)                                                                            \
  do {                                                                                      \
    cublasStatus_t cu_s_ = (call);                                                          \
    if (cu_s_ != CUBLAS_STATUS_SUCCESS) return lh_cu_blas_fail(err, #call, cu_s_, __FILE__, __LINE__); \
  } while (0)
#define LH_TRY(x)                                                                           \
  do {                                                                                      \
    lh_status lh_s_ = (x);                                                                  \
    if (lh_s_ != LH_OK) return lh_s_;                                                       \
  } while (0)

/* transfer.cu */
void *lh_cu_alloc(lh_backend *be, size_t bytes);
void lh_cu_free(lh_backend *be, void *p);
lh_status lh_cu_to_host(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
lh_status lh_cu_from_host(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
lh_status lh_cu_copy(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
lh_status lh_cu_to_host_async(lh_backend *be, void *dst, const void *src, size_t bytes, lh_error *err);
lh_status lh_cu_wait_host(lh_backend *be, lh_error *err);
/* Copy bytes of host memory to a fresh place in the device upload ring; *dev receives its address,
 * valid for the work enqueued next (the ring is only reused after a stream synchronisation). */
lh_status lh_cu_upload(lh_cuda_backend *b, const void *src, size_t bytes, void **dev, lh_error *err);
/* Called first by every operation that uploads: rewinds the ring when it is past half full. */
lh_status lh_cu_begin_op(lh_cuda_backend *b, lh_error *err);
/* The same in two steps, for tables that hold device addresses of their own parts: reserve gives
 * the pinned host place to fill and its device address; commit enqueues the copy. */
lh_status lh_cu_reserve(lh_cuda_backend *b, size_t bytes, void **host, void **dev, lh_error *err);
lh_status lh_cu_commit(lh_cuda_backend *b, const void *host, void *dev, size_t bytes, lh_error *err);
/* Read bytes of device memory into host memory dst (waits). */
lh_status lh_cu_download(lh_cuda_backend *b, void *dst, const void *src, size_t bytes, lh_error *err);
void lh_cu_release_memory(lh_cuda_backend *b);
/* Reserve the KV arena for pages of kv_page_bytes (leaves kv_base 0 and returns quietly when the
 * driver refuses: pages then come from cudaMalloc). */
void lh_cu_kv_arena_open(lh_cuda_backend *b);
/* Block index of a KV page in the arena, or -1 when it is not an arena page. */
int64_t lh_cu_kv_block(const lh_cuda_backend *b, const void *page);

/* weights_cuda.cu */
lh_status lh_cu_open(const lh_config *cfg, const lh_weights *w, const lh_model_params *p, int64_t max_rows,
                     lh_backend **out, lh_error *err);
void lh_cu_close(lh_backend *be);

/* tp.cu: the all-reduce of a tensor-parallel run (a no-op with one rank) */
lh_status lh_cu_tp_open(lh_cuda_backend *b, lh_error *err);
void lh_cu_tp_close(lh_cuda_backend *b);
/* dev[0..count) on every rank = the sum over ranks (device memory, enqueued on the compute stream
 * for NCCL; the host transport waits for it). */
lh_status lh_cu_tp_sum(lh_cuda_backend *b, float *dev, int64_t count, lh_error *err);
const char *lh_cu_tp_transport(const lh_cuda_backend *b);

/* backend_cuda.cu */
extern const lh_backend_ops lh_cu_ops;

#endif
