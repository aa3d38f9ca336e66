/* cuda_backend.h — what the CUDA backend offers beyond the lh_backend_ops table: a real-width random
 * model built on the GPU without files (benchmarks), its stream (timing with events), GPU-side
 * token choice, device memory figures and tuning switches.
 *
 *     lh_config cfg = ...;                       // any shape, e.g. lh_config_minimax_text_01_slice(vocab)
 *     lh_backend *be;
 *     lh_cuda_open_random(&cfg, 1234, 16384, 0, &be, &err);   // weights drawn on the GPU
 *     const lh_weights *w = lh_cuda_weights(be);              // host views (data NULL) to pass norms by
 *     be->ops->embed(be, ...); ... be->ops->close(be);
 *
 * Everything here takes a backend made by lh_backend_cuda.open or lh_cuda_open_random; passing
 * another backend is undefined. Errors are LH_EBACKEND with the failing CUDA/cuBLAS call and its
 * message, LH_ENOMEM when device memory runs out, LH_EINVAL for bad arguments.
 */
#ifndef LH_KERNELS_CUDA_BACKEND_H
#define LH_KERNELS_CUDA_BACKEND_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/engine.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Is a usable CUDA device present? Fills why (if not NULL) when not. Never fails hard. */
int lh_cuda_available(char *why, size_t why_len);

/* A backend bound to a model with the shapes of cfg whose weights are drawn on the GPU from seed
 * (uniform, scaled by 1/sqrt(fan_in); norm weights near 1; the HF slopes). max_rows as in open. */
lh_status lh_cuda_open_random(const lh_config *cfg, uint64_t seed, int64_t max_rows, int device, lh_backend **out,
                              lh_error *err);
/* The same model's share for this rank of the world comm (engine/comm.h; NULL or one rank: the
 * whole model, as lh_cuda_open_random): heads, kv heads and experts split as lh_tp_share, on GPU
 * (device + this rank's index on its host) mod the GPUs present, sums through NCCL or the host
 * transport (tp.cu). Each rank fills its share of the one model lh_cuda_open_random draws from
 * seed (the fill is counter-based), so logits over ranks can be held against one GPU's
 * (bench_cuda --logits). Every rank must then issue the same operations in the same order. */
struct lh_comm;
lh_status lh_cuda_open_random_ranks(const lh_config *cfg, uint64_t seed, int64_t max_rows, int device,
                                    struct lh_comm *comm, lh_backend **out, lh_error *err);
/* This rank's share: heads, kv heads (1 rank: all); NULL pointers are skipped. */
void lh_cuda_share(lh_backend *be, int *heads, int *kv_heads, int *ranks);
/* This rank's experts and, of each, the width it holds (LH_CUDA_MOE_SPLIT; all with one rank). */
void lh_cuda_moe_share(lh_backend *be, int *experts, int *width);
/* The rows the last MoE op routed to each of the model's experts, into rows[n_experts]; 0 if no
 * MoE op has run yet, else n_experts. */
int lh_cuda_moe_counts(lh_backend *be, int32_t *rows);
/* Host views of the weights (random backends: data NULL); pass &w->layers[i].in_norm etc. to the
 * norm operations. Lives until close. */
const lh_weights *lh_cuda_weights(lh_backend *be);

cudaStream_t lh_cuda_stream(lh_backend *be);
/* Wait for all work on the backend's streams; reports any asynchronous CUDA error. */
lh_status lh_cuda_sync(lh_backend *be, lh_error *err);

typedef struct lh_cuda_mem {
  size_t weights;      /* bytes of weights on the device */
  size_t workspace;    /* activation and scratch buffers (fixed at open, grows only for decode splits) */
  size_t state_live;   /* bytes handed out by ops->alloc and not freed */
  size_t state_pooled; /* freed blocks kept for reuse */
  size_t device_used;  /* cudaMemGetInfo: total - free */
} lh_cuda_mem;
void lh_cuda_mem_info(lh_backend *be, lh_cuda_mem *m);

typedef struct lh_cuda_tuning {
  int moe_grouped;  /* 0 (default): a cublasGemmEx per expert; 1: one cublasGemmGroupedBatchedEx for all of
                       them (slower on an H200 with CUDA 13.0: bench/NOTES.md, "Kernel notes") */
  int lightning_whole; /* 0 (default): a long lightning segment is cut in two where the grid would leave
                          SMs idle (kernels.h, lh_cuda_lightning; the same bits either way); 1: never cut
                          (for measurements) */
  int attn_cudnn;   /* softmax prefill through cuDNN's fused attention (attn_cudnn.h): 0 (default) where
                       a segment has >= LH_CUDNN_MIN_KEYS keys and >= LH_CUDNN_MIN_ROWS rows; 1 never;
                       2 for every multi-row segment. Where cuDNN is missing or refuses a shape, our
                       kernel runs. The environment variable LH_CUDA_ATTN=own|cudnn sets 1|2 at open. */
  int attn_exact;   /* cuDNN's graph form (attn_cudnn.h, lh_cudnn_attn_set_form): 0 (default) leaves it as
                       it is (that module's default, or LH_CUDNN_EXACT); 1 the exact form where the key
                       count allows it; 2 always the padded form */
  int decode;       /* softmax attention of a batch of single rows (decode): 0 (default) on tensor cores, the
                       forks of one prefix grouped so that they read its K/V once (kernels.h,
                       lh_cuda_attn_decode_units); 1 the same kernel, each sequence on its own; 2 the scalar
                       kernel (lh_cuda_attn_decode), for comparisons */
} lh_cuda_tuning;
#define LH_CUDNN_MIN_KEYS 16384
#define LH_CUDNN_MIN_ROWS 512
void lh_cuda_set_tuning(lh_backend *be, const lh_cuda_tuning *t);
/* The switches in effect; *grouped_status (if not NULL) is the cuBLAS status with which a grouped
 * GEMM was refused, after which the backend uses a GEMM per expert (0: never refused). */
lh_cuda_tuning lh_cuda_get_tuning(lh_backend *be, int *grouped_status);
/* How many prefill segments cuDNN has run (*calls), the seconds spent building its plans
 * (*build_s; either may be NULL) and its last refusal ("" when none). */
const char *lh_cuda_cudnn_status(lh_backend *be, int64_t *calls, double *build_s);
/* The cuDNN plans built so far, one bracketed entry each (attn_cudnn.h, lh_cudnn_attn_describe);
 * returns their number. */
int lh_cuda_cudnn_plans(lh_backend *be, char *buf, size_t cap);

/* Next token for each listed row of x (the hidden states after the last layer) computed on the GPU:
 * final norm, lm_head and the choice all stay on the device; only the token ids come back.
 * temperature 0: greedy (equal to argmax of ops->logits). Otherwise each row draws
 * u = lh_cuda_uniform(rng_state) in row order (rng_state NULL: a fresh copy of p->seed per row,
 * as lh_sample does) and picks as lh_sample would from ops->logits' values with that draw,
 * for 1 <= top_k <= 256 (top_k 0 considers the 256 most likely tokens). */
lh_status lh_cuda_next_tokens(lh_backend *be, const void *x, const int64_t *rows, int64_t nrows,
                              const lh_sampler_params *p, uint64_t *rng_state, int32_t *tokens, lh_error *err);
/* lh_sample's uniform draw: the top 53 bits of splitmix64 as a double in [0, 1); advances *state. */
double lh_cuda_uniform(uint64_t *state);

/* The backend's cuBLAS handle (bound to its stream), for benchmarks that time cuBLAS next to us. */
void *lh_cuda_cublas(lh_backend *be);

#ifdef __cplusplus
}
#endif
#endif
