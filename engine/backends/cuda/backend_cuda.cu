/* backend_cuda.cu — lh_backend_cuda: the engine's operations on one NVIDIA GPU.
 *
 * Each operation is a short, fixed sequence of cuBLAS GEMMs and kernels from the kernels/cuda op files on the
 * backend's compute stream; it returns as soon as the work is enqueued, except where a result must
 * reach the host (logits, MoE expert counts, to_host). Per-call metadata (token ids, segment and
 * page tables, tile lists) goes up through the upload ring (transfer.cu).
 *
 * The layer math is the CPU reference's (kernels/cpu, docs/design.md) in bf16 storage with fp32
 * arithmetic:
 *   lightning: [qkv | gate] = h Wqkvg^T; o = lightning(SiLU(q), SiLU(k), SiLU(v)); y = sigmoid(gate) *
 *              RMSNorm_1e-6(o) * w; out = y Wout^T
 *   softmax:   [q | k | v] = h Wqkv^T; RoPE(q, k); K, V -> pages; o = causal GQA softmax; out = o Wo^T
 *   MoE:       route (fp32 softmax, top-k, renormalise); sort pairs by expert; per expert
 *              act = SiLU(x W1^T) * (x W3^T), y = act W2^T; out = sum_k w_k y_k in slot order
 * Determinism: every kernel is reproducible and cuBLAS is used from one stream with a fixed
 * workspace, so the same inputs and chunk plan give the same bits.
 */
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attn_cudnn.h"
#include "engine/backends/cuda/backend_internal.h"
extern "C" {
#include "util/log.h" /* a C header without C++ guards */
#include "util/rand.h"
}

#define PAGE LH_KV_PAGE_TOKENS

static lh_status check_rows(lh_cuda_backend *b, int64_t n, const char *op, lh_error *err) {
  if (n < 1 || n > b->max_rows)
    return lh_error_set(err, LH_EINVAL, "cuda %s: %lld rows, must be in [1, %lld] (max_rows)", op, (long long)n,
                        (long long)b->max_rows);
  return LH_OK;
}

static lh_status norm_weight(lh_cuda_backend *b, const lh_tensor *w, float **out, lh_error *err) {
  auto it = b->norm_of.find(w);
  if (it == b->norm_of.end())
    return lh_error_set(err, LH_EINVAL, "cuda backend: norm weight %s is not one of this model's norms",
                        w && w->name ? w->name : "(unnamed)");
  *out = it->second;
  return LH_OK;
}

static lh_status gemm(lh_cuda_backend *b, const void *x, int64_t ldx, int64_t n, int in, const void *w, int out,
                      void *y, int64_t ldy, int y_f32, lh_error *err) {
  CB(lh_cuda_gemm(b->blas, x, ldx, n, in, w, out, y, ldy, y_f32));
  return LH_OK;
}

/* ---- row-wise ------------------------------------------------------------------------------ */

static lh_status op_embed(lh_backend *be, const int32_t *tokens, int64_t n, void *x, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_rows(b, n, "embed", err));
  LH_TRY(lh_cu_begin_op(b, err));
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= b->cfg.vocab_size)
      return lh_error_set(err, LH_EINVAL, "cuda embed: token %lld is %d, outside the vocabulary [0, %d)", (long long)i,
                          tokens[i], b->cfg.vocab_size);
  void *dev;
  LH_TRY(lh_cu_upload(b, tokens, (size_t)n * sizeof(int32_t), &dev, err));
  CU(lh_cuda_embed(b->stream, b->embed, (const int32_t *)dev, n, b->cfg.hidden_size, x));
  return LH_OK;
}

static lh_status op_rmsnorm(lh_backend *be, const void *x, int64_t n, const lh_tensor *w, void *y, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_rows(b, n, "rmsnorm", err));
  float *wd;
  LH_TRY(norm_weight(b, w, &wd, err));
  CU(lh_cuda_rmsnorm(b->stream, x, n, b->cfg.hidden_size, wd, (float)b->cfg.rms_norm_eps, y));
  return LH_OK;
}

static lh_status op_residual(lh_backend *be, const void *h, const void *a, float alpha, float beta, int64_t n, void *x,
                             const lh_tensor *norm_w, void *y, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_rows(b, n, "residual", err));
  float *wd = NULL;
  if (norm_w) LH_TRY(norm_weight(b, norm_w, &wd, err));
  CU(lh_cuda_residual_norm(b->stream, h, a, alpha, beta, n, b->cfg.hidden_size, x, wd, (float)b->cfg.rms_norm_eps,
                           y));
  return LH_OK;
}

static lh_status check_batch(lh_cuda_backend *b, const lh_batch *bt, const char *op, lh_error *err) {
  LH_TRY(check_rows(b, bt->n, op, err));
  int64_t next = 0;
  for (int i = 0; i < bt->nseg; i++) {
    const lh_segment &s = bt->seg[i];
    if (s.row0 != next || s.nrows < 1 || s.pos < 0)
      return lh_error_set(err, LH_EINVAL, "cuda %s: segment %d covers rows [%lld, %lld) at pos %lld; segments must "
                          "tile the batch in order", op, i, (long long)s.row0, (long long)(s.row0 + s.nrows),
                          (long long)s.pos);
    next += s.nrows;
  }
  if (next != bt->n)
    return lh_error_set(err, LH_EINVAL, "cuda %s: segments cover %lld of %lld rows", op, (long long)next,
                        (long long)bt->n);
  return LH_OK;
}

/* Grow a device buffer the backend keeps between calls (*p of *cap bytes) to at least `bytes`, once
 * the stream is done with the old one; zero: the new one is zeroed on the stream first. */
static cudaError_t grow_buffer(lh_cuda_backend *b, void **p, size_t *cap, size_t bytes, bool zero) {
  if (bytes <= *cap) return cudaSuccess;
  cudaError_t e = cudaStreamSynchronize(b->stream);
  if (e != cudaSuccess) return e;
  cudaFree(*p);
  *p = NULL;
  *cap = 0;
  if ((e = cudaMalloc(p, bytes)) != cudaSuccess) {
    (void)cudaGetLastError();
    return e;
  }
  if (zero && (e = cudaMemsetAsync(*p, 0, bytes, b->stream)) != cudaSuccess) return e;
  *cap = bytes;
  return cudaSuccess;
}

/* out [n x hid] = x W^T, the output projection of an attention layer. Split over ranks, x and W
 * are this rank's heads' columns: the fp32 partial products are summed over the ranks
 * (lh_cu_tp_sum, the all-reduce), then rounded to bf16 once, as one GPU rounds its GEMM. */
static lh_status out_proj(lh_cuda_backend *b, const void *x, int64_t ldx, int64_t n, int in, const void *w, void *out,
                          lh_error *err) {
  const int hid = b->cfg.hidden_size;
  if (b->tp == 1) return gemm(b, x, ldx, n, in, w, hid, out, hid, 0, err);
  LH_TRY(gemm(b, x, ldx, n, in, w, hid, b->tp_f32, hid, 1, err));
  LH_TRY(lh_cu_tp_sum(b, b->tp_f32, n * hid, err));
  CU(lh_cuda_f32_to_bf16(b->stream, b->tp_f32, n * hid, out));
  return LH_OK;
}

/* ---- lightning -------------------------------------------------------------------------------- */

static lh_status op_attn_lightning(lh_backend *be, int layer, int lidx, const void *h, const lh_batch *bt, void *out,
                                   lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_batch(b, bt, "attn_lightning", err));
  LH_TRY(lh_cu_begin_op(b, err));
  const lh_config &c = b->cfg;
  const cu_layer &L = b->layers[layer];
  const int H = b->Hl; /* this rank's heads (all of them with one rank) */
  const int64_t n = bt->n, hid = c.hidden_size, Hd = (int64_t)H * c.head_dim;
  if (L.kind != LH_LAYER_LIGHTNING || lidx < 0 || lidx >= c.n_lightning)
    return lh_error_set(err, LH_EINVAL, "cuda attn_lightning: layer %d (lightning %d) is not a lightning layer", layer,
                        lidx);
  LH_TRY(gemm(b, h, hid, n, (int)hid, L.qkvg, (int)(4 * Hd), b->proj, 4 * Hd, 0, err));
  std::vector<lh_cuda_lseg> segs(bt->nseg);
  bool all_single = true;
  for (int i = 0; i < bt->nseg; i++) {
    segs[i].row0 = bt->seg[i].row0;
    segs[i].nrows = bt->seg[i].nrows;
    segs[i].state = (float *)bt->seg[i].seq->lightning[lidx];
    all_single = all_single && segs[i].nrows == 1;
  }
  void *dsegs;
  LH_TRY(lh_cu_upload(b, segs.data(), segs.size() * sizeof(lh_cuda_lseg), &dsegs, err));
  if (all_single)
    CU(lh_cuda_lightning_recurrent(b->stream, b->proj, 4 * Hd, (const lh_cuda_lseg *)dsegs, bt->nseg, H,
                                   c.head_dim, L.slope, b->attn_o, Hd));
  else {
    if (!b->tune.lightning_whole)
      CU(grow_buffer(b, (void **)&b->light_sync, &b->light_sync_bytes, (size_t)bt->nseg * H * sizeof(int), true));
    CU(lh_cuda_lightning(b->stream, b->proj, 4 * Hd, n, (const lh_cuda_lseg *)dsegs, bt->nseg, H, c.head_dim, L.slope,
                         b->attn_o, Hd, b->tune.lightning_whole ? NULL : b->light_sync, 0));
  }
  if (b->tp == 1) {
    CU(lh_cuda_norm_gate(b->stream, b->attn_o, Hd, b->proj + 3 * Hd, 4 * Hd, n, (int)Hd, L.attn_norm, 1e-6f,
                         b->attn_o, Hd));
  } else { /* the all-heads norm: each rank's sums of squares, all-reduced, then its columns scaled */
    CU(lh_cuda_row_sumsq(b->stream, b->attn_o, Hd, n, (int)Hd, b->tp_ss));
    LH_TRY(lh_cu_tp_sum(b, b->tp_ss, n, err));
    CU(lh_cuda_norm_gate_ss(b->stream, b->attn_o, Hd, b->proj + 3 * Hd, 4 * Hd, n, (int)Hd,
                            c.n_heads * c.head_dim, b->tp_ss, L.attn_norm, 1e-6f, b->attn_o, Hd));
  }
  return out_proj(b, b->attn_o, Hd, n, (int)Hd, L.out_proj, out, err);
}

/* ---- softmax ---------------------------------------------------------------------------------- */

/* Softmax prefill of every segment through cuDNN's fused attention (attn_cudnn.h), when the tuning
 * switch and the shapes say so and cuDNN accepts the shape. Returns true when it enqueued them all,
 * false to leave the batch to our kernel (a refusal is found while building the plan, before
 * anything of that segment runs; segments before it that did run are redone by our kernel, which
 * overwrites attn_o). A refusal is logged once.
 *
 * The keys are first gathered from the pages into one contiguous head-major K and V (cuDNN's
 * non-paged kernel is more than twice as fast as its paged-cache form: attn_cudnn.h); the copy
 * costs one read and write of the KV, milliseconds at 1M keys against seconds of attention. The
 * gathered copy is capped at LH_CUDNN_GATHER_MB (default 1024 MiB: 256K keys at 8 kv heads x 128).
 * Past the cap, the keys are taken in stretches of the largest power of two of keys that fits it
 * (LH_CUDNN_SEGMENT_KEYS, a power of two >= 1024, sets it smaller, for tests): the stretches
 * entirely before the rows without a mask, the last one (from the rows' first page on) causal,
 * each with its rows' log-sum-exp, merged in fp32 (lh_cuda_attn_merge). So the workspace stays at
 * the cap plus [rows x H x d] fp32 whatever the context. Only with a cap too small for the rows
 * themselves (LH_CUDNN_GATHER_MB=0 in tests) does cuDNN read the pages through a page table.
 * Stretches under the 1 GiB cap are also faster at 1M keys than gathering them all at once
 * (bench/NOTES.md, "Kernel notes: backend_cuda.cu"). */
struct cudnn_stretch {
  int64_t k0, k1; /* keys [k0, k1); k0 a multiple of the page size */
  bool unmasked;
};

/* One cuDNN attention call; a refusal is kept (and logged once) and the caller falls back. */
static bool cudnn_run(lh_cuda_backend *b, const lh_cudnn_attn_args &x) {
  char msg[1024];
  if (lh_cudnn_attn_prefill(b->cudnn, b->stream, &x, msg, sizeof msg)) {
    snprintf(b->cudnn_why, sizeof b->cudnn_why, "%s", msg);
    if (!b->cudnn_warned) lh_log(LH_LOG_WARN, "cuda: softmax prefill falls back to its own kernel: %s", msg);
    b->cudnn_warned = 1;
    return false;
  }
  b->cudnn_calls++;
  return true;
}

/* One cuDNN call over keys [k0, k1) of segment s: gather them, then attention of its rows. */
static bool cudnn_gathered(lh_cuda_backend *b, const lh_segment &s, void *const *dpages, const cudnn_stretch &r,
                           float *lse, int H, int Hkv, int d, lh_error *err) {
  const int64_t nkv = r.k1 - r.k0, bucket = lh_cudnn_attn_key_bucket(nkv, 0);
  const size_t gbytes = (size_t)2 * Hkv * bucket * d * 2;
  /* zeroed: keys past a stretch's end are masked, but are multiplied by zero: keep them finite */
  if (grow_buffer(b, &b->kvc, &b->kvc_bytes, gbytes, true) != cudaSuccess) return false;
  const int32_t lens[8] = {(int32_t)s.nrows, 0, 0, 0, (int32_t)nkv, 0, 0, 0};
  void *dlens;
  if (lh_cu_upload(b, lens, sizeof lens, &dlens, err) != LH_OK) return false;
  bf16_t *k = (bf16_t *)b->kvc, *v = k + (size_t)Hkv * bucket * d;
  if (lh_cuda_kv_gather(b->stream, dpages + r.k0 / PAGE, (nkv + PAGE - 1) / PAGE, Hkv, d, bucket, k, v) != cudaSuccess)
    return false;
  const int64_t Hd = (int64_t)H * d;
  lh_cudnn_attn_args x = {};
  x.mode = 1;
  x.k = k, x.v = v;
  x.q = b->q_rope + s.row0 * Hd;
  x.o = b->attn_o + s.row0 * Hd;
  x.seq_q = (const int32_t *)dlens;
  x.seq_kv = (const int32_t *)dlens + 4;
  x.nrows = s.nrows;
  x.pos = s.pos;
  x.nkv = nkv;
  x.unmasked = r.unmasked;
  x.lse = lse;
  x.H = H, x.Hkv = Hkv, x.d = d;
  return cudnn_run(b, x);
}

static bool cudnn_prefill(lh_cuda_backend *b, const lh_batch *bt, int sidx, int H, int Hkv, int d, lh_error *err) {
  if (b->tune.attn_cudnn == 1 || (d != 64 && d != 128)) return false;
  for (int i = 0; i < bt->nseg; i++) {
    const lh_segment &s = bt->seg[i];
    if (s.nrows < 2) return false;
    if (b->tune.attn_cudnn == 0 && (s.nrows < LH_CUDNN_MIN_ROWS || s.pos + s.nrows < LH_CUDNN_MIN_KEYS)) return false;
  }
  if (!b->cudnn) {
    if (b->cudnn_warned) return false;
    char msg[512];
    b->cudnn = lh_cudnn_attn_open(msg, sizeof msg);
    if (!b->cudnn) {
      b->cudnn_warned = 1;
      snprintf(b->cudnn_why, sizeof b->cudnn_why, "%s", msg);
      lh_log(LH_LOG_WARN, "cuda: softmax prefill keeps its own kernel: %s", msg);
      return false;
    }
  }
  if (b->tune.attn_exact) lh_cudnn_attn_set_form(b->cudnn, b->tune.attn_exact == 1, -1);
  const char *cap_env = getenv("LH_CUDNN_GATHER_MB"), *seg_env = getenv("LH_CUDNN_SEGMENT_KEYS");
  const size_t cap = (size_t)(cap_env ? atoll(cap_env) : 1024) << 20;
  const size_t key_bytes = (size_t)2 * Hkv * d * 2; /* K and V of one key */
  int64_t stretch = 0; /* keys per stretch: the largest power of two >= 1024 whose copy fits the cap */
  for (int64_t k = 1024; (size_t)k * key_bytes <= cap; k *= 2) stretch = k;
  if (seg_env && atoll(seg_env) >= 1024 && (stretch == 0 || atoll(seg_env) < stretch)) {
    int64_t want = atoll(seg_env), k = 1024;
    while (k * 2 <= want) k *= 2;
    stretch = k;
  }
  const int64_t Hd = (int64_t)H * d;
  for (int pass = 0; pass < 2; pass++) {
    /* pass 0 only checks (paged segments need every page in the arena), pass 1 enqueues */
    for (int i = 0; i < bt->nseg; i++) {
      const lh_segment &s = bt->seg[i];
      const int64_t total = s.pos + s.nrows, need = (total + PAGE - 1) / PAGE;
      const int64_t first_page_key = s.pos / PAGE * PAGE;
      const bool whole = stretch > 0 && lh_cudnn_attn_key_bucket(total, 0) <= stretch;
      const bool stretches = !whole && stretch > 0 && lh_cudnn_attn_key_bucket(total - first_page_key, 0) <= stretch;
      if (whole || stretches) {
        if (pass == 0) continue;
        void *dpages;
        if (lh_cu_upload(b, s.seq->kv_pages[sidx], (size_t)need * sizeof(void *), &dpages, err) != LH_OK) return false;
        if (whole) {
          if (!cudnn_gathered(b, s, (void *const *)dpages, cudnn_stretch{0, total, false}, NULL, H, Hkv, d, err))
            return false;
          continue;
        }
        std::vector<cudnn_stretch> rs;
        for (int64_t k0 = 0; k0 < first_page_key; k0 += stretch)
          rs.push_back(cudnn_stretch{k0, std::min(k0 + stretch, first_page_key), true});
        rs.push_back(cudnn_stretch{first_page_key, total, false});
        const size_t accb = (size_t)s.nrows * Hd * 4, lseb = (size_t)2 * H * s.nrows * 4;
        if (grow_buffer(b, &b->merge, &b->merge_bytes, accb + lseb, false) != cudaSuccess) return false;
        float *acc = (float *)b->merge, *lse_acc = acc + (size_t)s.nrows * Hd, *lse_part = lse_acc + (size_t)H * s.nrows;
        bf16_t *o = b->attn_o + s.row0 * Hd;
        for (size_t j = 0; j < rs.size(); j++) {
          if (!cudnn_gathered(b, s, (void *const *)dpages, rs[j], lse_part, H, Hkv, d, err)) return false;
          if (lh_cuda_attn_merge(b->stream, o, lse_part, acc, lse_acc, o, s.nrows, H, d, j == 0, j + 1 == rs.size()) !=
              cudaSuccess)
            return false;
        }
        continue;
      }
      /* the paged form: cuDNN reads the KV pages through a page table */
      const int64_t tl = lh_cudnn_attn_table_len(s.nrows, s.pos);
      /* upload: [page table (tl int32) | pad to 16 B][n_q][pad][n_kv][pad] */
      const int64_t tl4 = (tl + 3) / 4 * 4;
      std::vector<int32_t> up((size_t)tl4 + 8, 0);
      if (!b->kv_base) return false;
      for (int64_t j = 0; j < tl; j++) {
        int64_t blk = lh_cu_kv_block(b, s.seq->kv_pages[sidx][j < need ? j : 0]);
        if (blk < 0 || blk > INT32_MAX) return false;
        up[j] = (int32_t)blk;
      }
      if (pass == 0) continue;
      up[tl4] = (int32_t)s.nrows;
      up[tl4 + 4] = (int32_t)total;
      void *dev;
      if (lh_cu_upload(b, up.data(), up.size() * sizeof(int32_t), &dev, err) != LH_OK) return false;
      lh_cudnn_attn_args x = {};
      x.mode = 0;
      x.kv_base = (const void *)(uintptr_t)b->kv_base;
      x.n_blocks = (int64_t)(b->kv_reserved / b->kv_page_bytes);
      x.page_ids = (const int32_t *)dev;
      x.q = b->q_rope + s.row0 * Hd;
      x.o = b->attn_o + s.row0 * Hd;
      x.seq_q = (const int32_t *)dev + tl4;
      x.seq_kv = (const int32_t *)dev + tl4 + 4;
      x.nrows = s.nrows;
      x.pos = s.pos;
      x.H = H, x.Hkv = Hkv, x.d = d;
      if (!cudnn_run(b, x)) return false;
    }
  }
  return true;
}

static lh_status op_attn_softmax(lh_backend *be, int layer, int sidx, const void *h, const lh_batch *bt, void *out,
                                 lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_batch(b, bt, "attn_softmax", err));
  LH_TRY(lh_cu_begin_op(b, err));
  const lh_config &c = b->cfg;
  const cu_layer &L = b->layers[layer];
  const int H = b->Hl, Hkv = b->Gl, d = c.head_dim; /* this rank's heads and kv heads */
  const int64_t n = bt->n, hid = c.hidden_size, Hd = (int64_t)H * d, qw = (int64_t)(H + 2 * Hkv) * d;
  if (L.kind != LH_LAYER_SOFTMAX || sidx < 0 || sidx >= c.n_softmax)
    return lh_error_set(err, LH_EINVAL, "cuda attn_softmax: layer %d (softmax %d) is not a softmax layer", layer, sidx);
  LH_TRY(gemm(b, h, hid, n, (int)hid, L.qkv, (int)qw, b->proj, qw, 0, err));

  /* One upload: the segment table, then every segment's page pointers. */
  const bool blocked = d == 32 || d == 64 || d == 128;
  bool all_single = true;
  size_t npages = 0, nsplits = 0;
  for (int i = 0; i < bt->nseg; i++) {
    const lh_segment &s = bt->seg[i];
    int64_t need = (s.pos + s.nrows + PAGE - 1) / PAGE;
    if (need > s.seq->n_pages)
      return lh_error_set(err, LH_EINVAL, "cuda attn_softmax: segment %d needs %lld KV pages for positions [0, %lld), "
                          "its table has %lld", i, (long long)need, (long long)(s.pos + s.nrows),
                          (long long)s.seq->n_pages);
    npages += (size_t)need;
    for (int64_t r = 0; r < s.nrows && s.nrows <= LH_CUDA_ROWWISE_ROWS; r++) /* each row's splits (by units) */
      nsplits += (size_t)lh_decode_splits(s.pos + r + 1);
    all_single = all_single && s.nrows == 1;
  }
  /* Head sizes without a blocked kernel run each query row as its own one-row segment through the
   * decode kernel: its K/V rows are all written first, so that is exactly causal attention. So does a
   * short call of at most LH_CUDA_ROWWISE_ROWS rows (a job's question after its shared prefix, a
   * decode batch with a short chunk in it): its rows' keys are mostly the same pages, which the decode
   * by units reads once for up to 16 rows, where the prefill kernel has one CTA per 64-row tile and
   * query head walk all of them (several times faster at 1M keys: bench/NOTES.md, "Kernel notes:
   * backend_cuda.cu"). Batches of single rows with a blocked head size go through the decode by
   * units, whose table (split, first member, count, then the members: at most one per row and
   * split) follows the pages. */
  const bool short_call = blocked && n <= LH_CUDA_ROWWISE_ROWS && b->tune.attn_cudnn != 2;
  const bool per_row = !all_single && (!blocked || short_call);
  const bool by_units = (all_single || per_row) && blocked && H / Hkv <= LH_CUDA_DECODE_ROWS && b->tune.decode != 2;
  const int nseg = per_row ? (int)n : bt->nseg;
  const size_t seg_bytes = (size_t)nseg * sizeof(lh_cuda_aseg);
  const size_t unit_bytes = by_units ? nsplits * 4 * sizeof(int32_t) : 0;
  const size_t blob_bytes = seg_bytes + npages * sizeof(void *) + unit_bytes;
  void *hblob, *dblob;
  LH_TRY(lh_cu_reserve(b, blob_bytes, &hblob, &dblob, err));
  lh_cuda_aseg *segs = (lh_cuda_aseg *)hblob;
  void **pages = (void **)((unsigned char *)hblob + seg_bytes);
  unsigned char *dbase = (unsigned char *)dblob;
  size_t pg = 0;
  int64_t max_splits = 1;
  int k = 0;
  std::vector<void *const *> htables(by_units ? nseg : 0); /* each (one-row) segment's pages, host copy */
  for (int i = 0; i < bt->nseg; i++) {
    const lh_segment &s = bt->seg[i];
    int64_t need = (s.pos + s.nrows + PAGE - 1) / PAGE;
    void *const *table = (void *const *)(dbase + seg_bytes + pg * sizeof(void *));
    memcpy(pages + pg, s.seq->kv_pages[sidx], (size_t)need * sizeof(void *));
    const int64_t rows = per_row ? s.nrows : 1;
    for (int64_t r = 0; r < rows; r++, k++) {
      if (by_units) htables[k] = pages + pg;
      segs[k].row0 = per_row ? s.row0 + r : s.row0;
      segs[k].nrows = per_row ? 1 : s.nrows;
      segs[k].pos = per_row ? s.pos + r : s.pos;
      segs[k].pages = table;
      int64_t sp = (segs[k].pos + segs[k].nrows + LH_CUDA_DECODE_SPLIT - 1) / LH_CUDA_DECODE_SPLIT;
      max_splits = std::max(max_splits, sp);
    }
    pg += (size_t)need;
  }
  /* The decode by units runs in launches of `step` rows (a unit's most members: consecutive rows of a
   * chunk, and the forks of one prefix, share their pages), each in passes of LH_CUDA_DECODE_PASS
   * splits, so that its partials and running merge stay that size at any batch size and context.
   * Each launch's units and members (indices into its own rows) follow one another in the blob. */
  const size_t units_at = seg_bytes + npages * sizeof(void *);
  const int G = H / Hkv, step = LH_CUDA_DECODE_ROWS / G;
  const int64_t pass = std::min<int64_t>(max_splits, LH_CUDA_DECODE_PASS);
  struct launch { int g0, gn, nunits, max_count; size_t at, room; }; /* room: its rows' splits */
  std::vector<launch> launches;
  if (by_units) {
    std::vector<int64_t> keys(nseg);
    for (int i = 0; i < nseg; i++) keys[i] = segs[i].pos + 1;
    const int cap = b->tune.decode == 1 ? 1 : step;
    size_t at = 0; /* int32 words used so far */
    for (int g0 = 0; g0 < nseg; g0 += step) {
      launch L = {g0, std::min(step, nseg - g0), 0, 0, at, 0};
      for (int i = g0; i < g0 + L.gn; i++) L.room += (size_t)lh_decode_splits(keys[i]);
      int32_t *units = (int32_t *)((unsigned char *)hblob + units_at) + at, *members = units + 3 * L.room;
      L.nunits = lh_decode_units(keys.data() + g0, htables.data() + g0, L.gn, PAGE, cap, units, members, &L.max_count);
      if (L.nunits < 0) return lh_error_set(err, LH_ENOMEM, "cuda attn_softmax: planning the decode of %d rows", nseg);
      launches.push_back(L);
      at += 4 * L.room;
    }
  }
  LH_TRY(lh_cu_commit(b, hblob, dblob, blob_bytes, err));
  const lh_cuda_aseg *dsegs = (const lh_cuda_aseg *)dblob;

  CU(lh_cuda_rope_kv(b->stream, b->proj, qw, dsegs, nseg, n, H, Hkv, d, c.rotary_dim, b->inv_freq, b->rope_af,
                     L.length_scale, c.attn_length_scale_base, b->q_rope));
  if (all_single || per_row) {
    /* by units: one launch's pass of partials, then its running merge; else every row's splits */
    const size_t rows = by_units ? (size_t)std::min(nseg, step) : (size_t)nseg;
    const size_t part = rows * H * (by_units ? pass : max_splits) * (d + 2);
    const size_t need = (part + (by_units ? rows * H * (d + 2) : 0)) * sizeof(float);
    if (need > b->partial_bytes)
      CU(grow_buffer(b, (void **)&b->partial, &b->partial_bytes, std::max(need, (size_t)1 << 20), false));
    for (const launch &L : launches) { /* in stream order: each launch's merge is done before the next writes */
      const size_t at = units_at / sizeof(int32_t) + L.at;
      const int32_t *units = (const int32_t *)dbase + at, *hunits = (const int32_t *)hblob + at;
      CU(lh_cuda_attn_decode_units(b->stream, b->q_rope, dsegs + L.g0, L.gn, units, hunits, L.nunits, units + 3 * L.room,
                                   L.max_count, (int)pass, H, Hkv, d, b->partial, b->partial + part, b->attn_o));
    }
    if (!by_units)
      CU(lh_cuda_attn_decode(b->stream, b->q_rope, dsegs, nseg, (int)max_splits, H, Hkv, d, b->partial, b->attn_o));
  } else if (!cudnn_prefill(b, bt, sidx, H, Hkv, d, err)) {
    /* 64-row tiles, the ones with the most keys first so the long tiles start early. */
    std::vector<int32_t> tiles;
    std::vector<std::pair<int64_t, int>> order;
    for (int i = 0; i < bt->nseg; i++)
      for (int64_t r0 = 0; r0 < bt->seg[i].nrows; r0 += 64) {
        order.push_back({-(bt->seg[i].pos + r0), (int)tiles.size() / 2});
        tiles.push_back(i);
        tiles.push_back((int32_t)r0);
      }
    std::stable_sort(order.begin(), order.end());
    std::vector<int32_t> sorted(tiles.size());
    for (size_t j = 0; j < order.size(); j++) {
      sorted[2 * j] = tiles[2 * order[j].second];
      sorted[2 * j + 1] = tiles[2 * order[j].second + 1];
    }
    void *dtiles;
    LH_TRY(lh_cu_upload(b, sorted.data(), sorted.size() * sizeof(int32_t), &dtiles, err));
    CU(lh_cuda_attn_prefill(b->stream, b->q_rope, dsegs, (const int32_t *)dtiles, (int)order.size(), H, Hkv, d,
                            b->attn_o));
  }
  return out_proj(b, b->attn_o, Hd, n, (int)Hd, L.o_proj, out, err);
}

/* ---- MoE -------------------------------------------------------------------------------------- */

static lh_status op_moe(lh_backend *be, int layer, const void *h, int64_t n, void *out, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_rows(b, n, "moe", err));
  LH_TRY(lh_cu_begin_op(b, err));
  const lh_config &c = b->cfg;
  const cu_layer &L = b->layers[layer];
  const int E = c.n_experts, K = c.top_k, I = b->Il, hid = c.hidden_size; /* I: this rank's width */
  const int64_t m = n * K;
  LH_TRY(gemm(b, h, hid, n, hid, L.router, E, b->rlogits, E, 1, err));
  CU(lh_cuda_moe_route(b->stream, b->rlogits, n, E, K, b->ids, b->wts));
  CU(lh_cuda_moe_plan(b->stream, b->ids, n, K, E, b->hist, b->offsets, b->pos, b->src_row));
  std::vector<int32_t> off(E + 1);
  LH_TRY(lh_cu_download(b, off.data(), b->offsets, (E + 1) * sizeof(int32_t), err));
  if (off[E] != m)
    return lh_error_set(err, LH_EBACKEND, "cuda moe: routing placed %d of %lld pairs", off[E], (long long)m);
  b->moe_rows.resize(E);
  for (int e = 0; e < E; e++) b->moe_rows[e] = off[e + 1] - off[e];
  CU(lh_cuda_gather_rows(b->stream, h, b->src_row, 1, m, hid, b->xs));

  /* tensor-parallel experts: the w2 products are partial sums over this rank's width, kept in
   * fp32 until the ranks' all-reduce, so they are rounded once, like one GPU's */
  const bool part = I < c.intermediate_size;
  std::vector<int> rows;
  std::vector<const void *> ptr(6 * (size_t)E);
  const void **x1 = ptr.data(), **w1 = x1 + E, **y1 = w1 + E, **x2 = y1 + E, **w2 = x2 + E, **y2 = w2 + E;
  for (int e = b->e0; e < b->e1; e++) { /* this rank's experts (all of them with one rank) */
    int cnt = off[e + 1] - off[e];
    if (!cnt) continue;
    int g = (int)rows.size();
    rows.push_back(cnt);
    x1[g] = b->xs + (int64_t)off[e] * hid;
    w1[g] = L.w13 + (int64_t)(e - b->e0) * 2 * I * hid;
    y1[g] = b->gu + (int64_t)off[e] * 2 * I;
    x2[g] = b->sact + (int64_t)off[e] * I;
    w2[g] = L.w2 + (int64_t)(e - b->e0) * hid * I;
    y2[g] = part ? (const void *)((float *)b->ys + (int64_t)off[e] * hid) : b->ys + (int64_t)off[e] * hid;
  }
  const int G = (int)rows.size();
  bool done = false;
  if (b->tune.moe_grouped && !part) {
    void *dptr;
    LH_TRY(lh_cu_upload(b, ptr.data(), ptr.size() * sizeof(void *), &dptr, err));
    void **d = (void **)dptr;
    cublasStatus_t s1 = lh_cuda_gemm_grouped(b->blas, G, rows.data(), hid, 2 * I, d, d + E, d + 2 * E);
    if (s1 == CUBLAS_STATUS_NOT_SUPPORTED || s1 == CUBLAS_STATUS_INVALID_VALUE) {
      /* This cuBLAS cannot group these problems: use one GEMM per expert from now on (the check
       * fails before anything is enqueued). */
      b->tune.moe_grouped = 0;
      b->grouped_status = (int)s1;
    } else {
      CB(s1);
      CU(lh_cuda_swiglu(b->stream, b->gu, m, I, b->sact));
      CB(lh_cuda_gemm_grouped(b->blas, G, rows.data(), I, hid, d + 3 * E, d + 4 * E, d + 5 * E));
      done = true;
    }
  }
  if (!done) {
    for (int g = 0; g < G; g++)
      LH_TRY(gemm(b, x1[g], hid, rows[g], hid, w1[g], 2 * I, (void *)y1[g], 2 * I, 0, err));
    CU(lh_cuda_swiglu(b->stream, b->gu, m, I, b->sact));
    for (int g = 0; g < G; g++)
      LH_TRY(gemm(b, x2[g], I, rows[g], I, w2[g], hid, (void *)y2[g], hid, part, err));
  }
  if (b->tp == 1) {
    CU(lh_cuda_moe_combine(b->stream, b->ys, b->pos, b->wts, n, K, hid, out));
    return LH_OK;
  }
  /* over ranks every rank routed every row the same; it adds its slots in fp32 (expert parallel:
   * its experts' outputs; tensor-parallel experts: every expert's partial sum over its width), the
   * ranks' shares are all-reduced, and the sum is rounded to bf16 once */
  CU(lh_cuda_moe_combine_share(b->stream, b->ys, part, b->pos, b->ids, b->wts, n, K, hid, b->e0, b->e1, b->tp_f32));
  LH_TRY(lh_cu_tp_sum(b, b->tp_f32, n * hid, err));
  CU(lh_cuda_f32_to_bf16(b->stream, b->tp_f32, n * hid, out));
  return LH_OK;
}

/* ---- logits and tokens ------------------------------------------------------------------------ */

/* Final norm + lm_head of rows [i0, i0+m) of the list into b->lg_out (device, fp32). */
static lh_status logits_batch(lh_cuda_backend *b, const void *x, const int64_t *rows, int64_t m, lh_error *err) {
  void *drows;
  LH_TRY(lh_cu_upload(b, rows, (size_t)m * sizeof(int64_t), &drows, err));
  CU(lh_cuda_rmsnorm_rows(b->stream, x, (const int64_t *)drows, m, b->cfg.hidden_size, b->final_norm,
                          (float)b->cfg.rms_norm_eps, b->lg_x));
  return gemm(b, b->lg_x, b->cfg.hidden_size, m, b->cfg.hidden_size, b->lm_head, b->cfg.vocab_size, b->lg_out,
              b->cfg.vocab_size, 1, err);
}

static lh_status check_row_list(lh_cuda_backend *b, const int64_t *rows, int64_t nrows, lh_error *err) {
  for (int64_t i = 0; i < nrows; i++)
    if (rows[i] < 0 || rows[i] >= b->max_rows)
      return lh_error_set(err, LH_EINVAL, "cuda logits: row %lld is %lld, outside [0, %lld)", (long long)i,
                          (long long)rows[i], (long long)b->max_rows);
  return LH_OK;
}

static lh_status op_logits(lh_backend *be, const void *x, const int64_t *rows, int64_t nrows, float *out,
                           lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_row_list(b, rows, nrows, err));
  LH_TRY(lh_cu_begin_op(b, err));
  const int64_t V = b->cfg.vocab_size;
  for (int64_t i0 = 0; i0 < nrows; i0 += b->lg_rows) {
    int64_t m = std::min(b->lg_rows, nrows - i0);
    LH_TRY(logits_batch(b, x, rows + i0, m, err));
    CU(cudaMemcpyAsync(out + i0 * V, b->lg_out, (size_t)(m * V) * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
    CU(cudaStreamSynchronize(b->stream));
  }
  return LH_OK;
}

double lh_cuda_uniform(uint64_t *state) { return lh_splitmix64_uniform(state); }

lh_status lh_cuda_next_tokens(lh_backend *be, const void *x, const int64_t *rows, int64_t nrows,
                              const lh_sampler_params *p, uint64_t *rng_state, int32_t *tokens, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  LH_TRY(check_row_list(b, rows, nrows, err));
  LH_TRY(lh_cu_begin_op(b, err));
  const int V = b->cfg.vocab_size;
  for (int64_t i0 = 0; i0 < nrows; i0 += b->lg_rows) {
    int m = (int)std::min(b->lg_rows, nrows - i0);
    LH_TRY(logits_batch(b, x, rows + i0, m, err));
    if (!p || !(p->temperature > 0.0f)) {
      CU(lh_cuda_argmax(b->stream, b->lg_out, m, V, b->tok_out));
    } else {
      std::vector<double> u(m);
      for (int i = 0; i < m; i++) {
        uint64_t fresh = p->seed;
        u[i] = lh_cuda_uniform(rng_state ? rng_state : &fresh);
      }
      void *du;
      LH_TRY(lh_cu_upload(b, u.data(), m * sizeof(double), &du, err));
      CU(lh_cuda_sample(b->stream, b->lg_out, m, V, p->temperature, p->top_k, p->top_p, (const double *)du,
                        b->tok_out));
    }
    LH_TRY(lh_cu_download(b, tokens + i0, b->tok_out, m * sizeof(int32_t), err));
  }
  return LH_OK;
}

/* ---- the rest of the public surface ------------------------------------------------------------ */

static void *op_act(lh_backend *be, int slot) {
  lh_cuda_backend *b = cu_be(be);
  return slot >= 0 && slot < LH_ACT_SLOTS ? b->act[slot] : NULL;
}

cudaStream_t lh_cuda_stream(lh_backend *be) { return cu_be(be)->stream; }
void *lh_cuda_cublas(lh_backend *be) { return cu_be(be)->blas; }

lh_status lh_cuda_sync(lh_backend *be, lh_error *err) {
  lh_cuda_backend *b = cu_be(be);
  CU(cudaStreamSynchronize(b->stream));
  CU(cudaStreamSynchronize(b->copy_stream));
  CU(cudaGetLastError());
  return LH_OK;
}

void lh_cuda_mem_info(lh_backend *be, lh_cuda_mem *m) {
  lh_cuda_backend *b = cu_be(be);
  m->weights = b->wbytes;
  m->workspace =
      b->wsbytes + b->partial_bytes + b->up_cap + b->snap_cap + ((size_t)64 << 20) + b->kvc_bytes + b->merge_bytes;
  m->state_live = b->live_bytes;
  m->state_pooled = b->pooled_bytes;
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) m->device_used = tot - fr;
  else m->device_used = 0, (void)cudaGetLastError();
}

void lh_cuda_set_tuning(lh_backend *be, const lh_cuda_tuning *t) { cu_be(be)->tune = *t; }

const char *lh_cuda_cudnn_status(lh_backend *be, int64_t *calls, double *build_s) {
  if (calls) *calls = cu_be(be)->cudnn_calls;
  if (build_s) {
    int plans = 0;
    *build_s = 0;
    lh_cudnn_attn_stats(cu_be(be)->cudnn, &plans, build_s);
  }
  return cu_be(be)->cudnn_why;
}

int lh_cuda_cudnn_plans(lh_backend *be, char *buf, size_t cap) {
  return lh_cudnn_attn_describe(cu_be(be)->cudnn, buf, cap);
}

lh_cuda_tuning lh_cuda_get_tuning(lh_backend *be, int *grouped_status) {
  if (grouped_status) *grouped_status = cu_be(be)->grouped_status;
  return cu_be(be)->tune;
}

extern "C" const lh_backend_ops lh_backend_cuda = {
    "cuda",               /* name */
    LH_BF16,              /* act_dtype */
    LH_BF16,              /* kv_dtype */
    lh_cu_open,           /* open */
    lh_cu_close,          /* close */
    lh_cu_alloc,          /* alloc */
    lh_cu_free,           /* free */
    lh_cu_to_host,        /* to_host */
    lh_cu_from_host,      /* from_host */
    lh_cu_copy,           /* copy */
    op_act,               /* act */
    op_embed,             /* embed */
    op_rmsnorm,           /* rmsnorm */
    op_residual,          /* residual */
    op_attn_lightning,    /* attn_lightning */
    op_attn_softmax,      /* attn_softmax */
    op_moe,               /* moe */
    op_logits,            /* logits */
    lh_cu_to_host_async,  /* to_host_async */
    lh_cu_wait_host,      /* wait_host */
};
