/* attn_cudnn.h — chunked-prefill softmax attention through cuDNN's fused flash-attention engine
 * (the backend graph API, no cudnn-frontend), over longhaul's paged KV.
 *
 * cuDNN's SDPA serves the long prefill chunks, where our own kernel (attention.cu, mma.sync) runs at
 * about a third of torch SDPA's rate on an H200 (bench/NOTES.md, "Kernel notes: attn_cudnn"). This
 * module builds, for one sequence's rows, the operation graph that cuDNN's runtime-fusion SDPA
 * engine recognises:
 *
 *   S = Q K^T (fp32)  ->  S * 1/sqrt(d)  ->  padding mask (row < n_q, col < n_kv)
 *     ->  bottom-right causal mask (row + n_kv - n_q >= col)  ->  softmax (max, sub, exp, sum, div)
 *     ->  P (bf16) V  ->  O (bf16)
 *
 * in its padded form, or, where the key count is the plan's bucket itself, in its exact form: no
 * padding mask and no sequence lengths, the diagonal a constant (lh_cudnn_attn_set_form); the exact
 * form is the faster of the two (bench/NOTES.md, "Kernel notes: attn_cudnn").
 *
 * with K and V read through paged-cache-load ops from the KV pages themselves: a page is
 * [2][Hkv][256][d] bf16 (engine/backend.h), so the K "container" is the page array viewed as
 * [blocks, Hkv, 256, d] with a block stride of one page, and V the same view shifted by Hkv*256*d.
 * That needs every page of a sequence inside one address range (kv_base + block * page_bytes): the
 * CUDA backend hands KV pages out of one reserved virtual range for that (transfer.cu).
 *
 * Plans are cached per shape: the exact query count (chunks mostly share it) and the keys rounded
 * up to a power of two (>= 1024), the real key count travelling in the seq-len tensor, so one plan
 * serves every chunk of a bucket; building one costs a fraction of a second, once.
 *
 * Mode 1 reads contiguous head-major K and V instead (gathered from the pages by
 * lh_cuda_kv_gather). cuDNN's non-paged kernel is more than twice as fast as its paged-cache form
 * (bench/NOTES.md, "Kernel notes: attn_cudnn"), so the backend gathers while the gathered copy fits
 * its cap.
 */
#ifndef LH_KERNELS_CUDA_ATTN_CUDNN_H
#define LH_KERNELS_CUDA_ATTN_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_cudnn_attn lh_cudnn_attn;

typedef struct lh_cudnn_attn_args {
  int mode;                /* 0: paged K/V (kv_base, n_blocks, page_ids); 1: contiguous k, v */
  const void *q;           /* [nrows][H][d] bf16 (RoPE applied) */
  void *o;                 /* [nrows][H][d] bf16 */
  const void *kv_base;     /* mode 0: block i at kv_base + i * 2*Hkv*256*d*2 bytes */
  int64_t n_blocks;        /* mode 0: blocks addressable from kv_base */
  const int32_t *page_ids; /* mode 0, device: lh_cudnn_attn_table_len() entries, this sequence's pages
                              in position order (entries past the last needed page: any valid id) */
  const void *k, *v;       /* mode 1: head-major [Hkv][key bucket][d] bf16 each (lh_cuda_kv_gather) */
  const int32_t *seq_q;    /* device int32, 16-byte aligned: nrows */
  const int32_t *seq_kv;   /* device int32, 16-byte aligned: the keys (nkv, or pos + nrows) */
  int64_t nrows, pos;
  int64_t nkv;             /* keys when not pos + nrows (0): a stretch of keys of a longer context */
  int unmasked;            /* 0: causal, bottom-right (row + nkv - nrows >= key); 1: every row sees every key
                              (a stretch of keys entirely before the rows) */
  float *lse;              /* NULL, or device [H][nrows] fp32: each row's log-sum-exp of its scaled scores,
                              for merging the outputs of several stretches of keys */
  int H, Hkv, d;
  int layout;              /* 0: q and o as above; bit 0: q is [H][nrows][d]; bit 1: o is [H][nrows][d] */
} lh_cudnn_attn_args;

/* 1 when this build has cuDNN. */
int lh_cudnn_attn_available(void);
/* NULL (msg says why) when cuDNN is absent or cannot start. */
lh_cudnn_attn *lh_cudnn_attn_open(char *msg, size_t cap);
void lh_cudnn_attn_close(lh_cudnn_attn *a);
/* Entries the page table must hold for a call with these lengths (its key bucket / 256). */
int64_t lh_cudnn_attn_table_len(int64_t nrows, int64_t pos);
/* Keys the plan of such a call is built for (mode 1's K/V row stride). */
int64_t lh_cudnn_attn_key_bucket(int64_t nrows, int64_t pos);
/* Attention of rows at positions [pos, pos + nrows) over keys [0, pos + nrows) (causal, bottom-right),
 * or over a stretch of nkv keys (causal or not, see the args), enqueued on st. 0 on success;
 * otherwise -1 and msg holds cuDNN's reason (nothing was enqueued). */
int lh_cudnn_attn_prefill(lh_cudnn_attn *a, cudaStream_t st, const lh_cudnn_attn_args *x, char *msg, size_t cap);
/* The graph's form for plans built from now on. exact (default 1, or LH_CUDNN_EXACT): a gathered
 * call whose real key count is a power of two >= 1024 (the bucket itself) gets a graph without
 * sequence lengths or padding mask, the causal diagonal a constant: the graph torch's cuDNN SDPA
 * builds for dense tensors (if cuDNN refuses it, the padded form). autotune (default 0, or
 * LH_CUDNN_AUTOTUNE): every engine config the heuristics offer that finalizes (up to 8 per mode) is
 * timed on the plan's first use (three runs each, the host waits) and the fastest kept. A negative
 * value leaves that setting as it is. */
void lh_cudnn_attn_set_form(lh_cudnn_attn *a, int exact, int autotune);
/* One bracketed line per plan built (form, shape, cuDNN's engine index, "tuned") into buf; returns
 * the number of plans. */
int lh_cudnn_attn_describe(const lh_cudnn_attn *a, char *buf, size_t cap);
/* Plans built so far and the seconds spent building them (first use of each bucket). */
void lh_cudnn_attn_stats(const lh_cudnn_attn *a, int *plans, double *build_s);

#ifdef __cplusplus
}
#endif
#endif
