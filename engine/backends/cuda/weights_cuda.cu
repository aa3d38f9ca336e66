/* weights_cuda.cu — binding the CUDA backend to a model: device, streams and cuBLAS; the weights
 * (uploaded from the host views and converted to bf16, or drawn on the GPU for a random model); the
 * fixed workspace for max_rows rows.
 *
 * Layout on the device: one allocation for all weights, carved in layer order into the pointers of
 * cu_layer (see backend_internal.h for shapes); projections that read the same input are stored
 * fused (lightning qkv + output_gate, softmax q + k + v, each expert's w1 + w3) so each is one GEMM.
 * Norm weights, slopes and the length-aware query scales are fp32. The workspace is a second single allocation sized from the
 * config and max_rows; nothing in it grows with context length except the decode split partials.
 *
 * Never: keep a pointer into the caller's host weights past open (they are copied), or leave the
 * device half-initialised on failure (close releases whatever was made).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "kernels/cuda/attn_cudnn.h"
#include "engine/backends/cuda/backend_internal.h"
#include "util/half.h"
extern "C" {
#include "engine/comm.h"
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static size_t dtype_bytes(lh_dtype t) { return t == LH_F32 ? 4 : 2; }

static int64_t tensor_elems(const lh_tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return t->ndim ? n : 0;
}

int lh_cuda_available(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why && why_len)
      snprintf(why, why_len, "no CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

/* ---- sizes ---------------------------------------------------------------------------------- */

/* What this process holds: with tensor/expert-parallel ranks, H, Hkv and Hd are its share of the
 * heads and El its share of the experts; E (the router's width) is always every expert. */
struct shapes {
  int64_t hidden, H, Hkv, d, Hd, E, El, I, K, vocab; /* H, Hkv, El, I: this rank's share */
};

static shapes shapes_of(const lh_cuda_backend *b) {
  const lh_config *c = &b->cfg;
  shapes s;
  s.hidden = c->hidden_size, s.H = b->Hl, s.Hkv = b->Gl, s.d = c->head_dim;
  s.Hd = s.H * s.d, s.E = c->n_experts, s.El = b->e1 - b->e0, s.I = b->Il, s.K = c->top_k; /* I: this rank's */
  s.vocab = c->vocab_size;
  return s;
}

/* Walk the weight layout once to size it (base NULL) and once to carve it. */
static size_t carve_weights(lh_cuda_backend *b, unsigned char *base, int tied) {
  const shapes s = shapes_of(b);
  size_t off = 0;
  auto take = [&](size_t bytes) -> void * {
    void *p = base ? base + off : NULL;
    off += align256(bytes);
    return p;
  };
  b->embed = (bf16_t *)take((size_t)s.vocab * s.hidden * 2);
  b->lm_head = tied ? b->embed : (bf16_t *)take((size_t)s.vocab * s.hidden * 2);
  b->final_norm = (float *)take((size_t)s.hidden * 4);
  for (int l = 0; l < b->cfg.n_layers; l++) {
    cu_layer &L = b->layers[l];
    memset(&L, 0, sizeof L);
    L.kind = b->cfg.layer_kind[l];
    L.in_norm = (float *)take((size_t)s.hidden * 4);
    L.post_norm = (float *)take((size_t)s.hidden * 4);
    if (L.kind == LH_LAYER_LIGHTNING) {
      L.qkvg = (bf16_t *)take((size_t)4 * s.Hd * s.hidden * 2);
      L.out_proj = (bf16_t *)take((size_t)s.hidden * s.Hd * 2);
      L.attn_norm = (float *)take((size_t)s.Hd * 4);
      L.slope = (float *)take((size_t)s.H * 4);
    } else {
      L.qkv = (bf16_t *)take((size_t)(s.H + 2 * s.Hkv) * s.d * s.hidden * 2);
      L.o_proj = (bf16_t *)take((size_t)s.hidden * s.Hd * 2);
      if (b->cfg.attn_length_scale_base > 0) L.length_scale = (float *)take((size_t)s.H * 4);
    }
    L.router = (bf16_t *)take((size_t)s.E * s.hidden * 2);
    L.w13 = (bf16_t *)take((size_t)s.El * 2 * s.I * s.hidden * 2);
    L.w2 = (bf16_t *)take((size_t)s.El * s.hidden * s.I * 2);
  }
  b->inv_freq = (float *)take((size_t)(b->cfg.rotary_dim / 2 + 1) * 4);
  return off;
}

static size_t carve_workspace(lh_cuda_backend *b, unsigned char *base) {
  const shapes s = shapes_of(b);
  const int64_t R = b->max_rows, M = R * s.K;
  size_t off = 0;
  auto take = [&](size_t bytes) -> void * {
    void *p = base ? base + off : NULL;
    off += align256(bytes);
    return p;
  };
  for (int i = 0; i < LH_ACT_SLOTS; i++) b->act[i] = take((size_t)R * s.hidden * 2);
  int64_t pw = 4 * s.Hd > (s.H + 2 * s.Hkv) * s.d ? 4 * s.Hd : (s.H + 2 * s.Hkv) * s.d;
  b->proj = (bf16_t *)take((size_t)R * pw * 2);
  b->attn_o = (bf16_t *)take((size_t)R * s.Hd * 2);
  b->q_rope = (bf16_t *)take((size_t)R * s.Hd * 2);
  b->rlogits = (float *)take((size_t)R * s.E * 4);
  b->ids = (int32_t *)take((size_t)M * 4);
  b->wts = (float *)take((size_t)M * 4);
  b->pos = (int32_t *)take((size_t)M * 4);
  b->src_row = (int32_t *)take((size_t)M * 4);
  b->hist = (int32_t *)take((size_t)LH_CUDA_MOE_PLAN_CHUNKS(M) * s.E * 4);
  b->offsets = (int32_t *)take((size_t)(s.E + 1) * 4);
  b->xs = (bf16_t *)take((size_t)M * s.hidden * 2);
  b->gu = (bf16_t *)take((size_t)M * 2 * s.I * 2);
  b->sact = (bf16_t *)take((size_t)M * s.I * 2);
  /* the experts' outputs: bf16, or fp32 partial sums when each rank holds part of every expert's width */
  b->ys = (bf16_t *)take((size_t)M * s.hidden * (b->Il < b->cfg.intermediate_size ? 4 : 2));
  b->ptrs = (void **)take((size_t)6 * s.E * sizeof(void *));
  b->lg_rows = s.vocab > 65536 ? 16 : 64;
  b->lg_x = (bf16_t *)take((size_t)b->lg_rows * s.hidden * 2);
  b->lg_out = (float *)take((size_t)b->lg_rows * s.vocab * 4);
  b->tok_out = (int32_t *)take((size_t)b->lg_rows * 4);
  if (b->tp > 1) {
    b->tp_f32 = (float *)take((size_t)R * s.hidden * 4);
    b->tp_ss = (float *)take((size_t)R * 4);
  }
  return off;
}

static lh_status check_config(const lh_config *c, int64_t max_rows, lh_error *err) {
  if (c->n_layers < 1 || c->n_layers > LH_MAX_LAYERS || c->hidden_size < 1 || c->n_heads < 1 || c->head_dim < 2 ||
      c->head_dim > 256 || c->head_dim % 2 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads || c->n_experts < 1 || c->n_experts > 256 ||
      c->top_k < 1 || c->top_k > 8 || c->top_k > c->n_experts || c->intermediate_size < 1 || c->vocab_size < 1 ||
      c->rotary_dim < 0 || c->rotary_dim > c->head_dim || c->rotary_dim % 2 || max_rows < 1)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend: unsupported shape (layers %d, hidden %d, heads %d/%d x %d, experts %d top %d, "
                        "rotary %d, max_rows %lld): needs an even head_dim <= 256, kv heads dividing heads, "
                        "an even rotary_dim, at most 256 experts and top-k 8",
                        c->n_layers, c->hidden_size, c->n_heads, c->n_kv_heads, c->head_dim, c->n_experts, c->top_k,
                        c->rotary_dim, (long long)max_rows);
  if (c->hidden_size * 4 > 48 * 1024 || c->n_heads * c->head_dim * 4 > 48 * 1024)
    return lh_error_set(err, LH_EUNSUPPORTED, "cuda backend: hidden %d or heads x head_dim %d over 12288",
                        c->hidden_size, c->n_heads * c->head_dim);
  return LH_OK;
}

/* This process's share of a model split over the ranks of comm (NULL: one rank, all of it). Each
 * rank needs whole kv-head groups and experts, so the ranks must divide the kv heads and experts. */
static lh_status set_share(lh_cuda_backend *b, const lh_config *cfg, struct lh_comm *comm, lh_error *err) {
  b->comm = comm;
  b->tp = comm ? lh_comm_size(comm) : 1;
  b->tp_rank = comm ? lh_comm_rank(comm) : 0;
  const int R = b->tp, r = b->tp_rank;
  const char *split = getenv("LH_CUDA_MOE_SPLIT");
  if (split && strcmp(split, "experts") && strcmp(split, "width"))
    return lh_error_set(err, LH_EINVAL, "LH_CUDA_MOE_SPLIT is '%s'; use experts (expert parallel) or width "
                        "(tensor-parallel experts)", split);
  const bool width = R > 1 && split && !strcmp(split, "width");
  if (R > 1 && cfg->n_kv_heads % R)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend over %d ranks: the ranks must divide the %d kv heads (each GPU holds whole "
                        "kv-head groups); use a divisor of it as the number of ranks", R, cfg->n_kv_heads);
  if (R > 1 && !width && cfg->n_experts % R)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend over %d ranks: the ranks must divide the %d experts (each GPU holds whole "
                        "experts); use a divisor as the number of ranks, or LH_CUDA_MOE_SPLIT=width", R,
                        cfg->n_experts);
  if (width && cfg->intermediate_size % R)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend over %d ranks with LH_CUDA_MOE_SPLIT=width: the ranks must divide the "
                        "experts' intermediate size %d", R, cfg->intermediate_size);
  b->Gl = cfg->n_kv_heads / R, b->g0 = b->Gl * r;
  b->Hl = cfg->n_heads / R, b->h0 = b->Hl * r; /* = the query heads of kv heads [g0, g0 + Gl) */
  if (width) {
    b->e0 = 0, b->e1 = cfg->n_experts;
    b->Il = cfg->intermediate_size / R, b->i0 = b->Il * r;
  } else {
    b->e0 = cfg->n_experts / R * r, b->e1 = b->e0 + cfg->n_experts / R;
    b->Il = cfg->intermediate_size, b->i0 = 0;
  }
  return LH_OK;
}

/* A rank's communicator, made before anything that could fail on one rank alone (an allocation in
 * setup): every rank reaches the id broadcast and NCCL's collective init together, so a rank
 * that fails later fails its open through the engine's agreement instead of leaving the others
 * waiting in them. Nothing to do with one rank. */
static lh_status tp_first(lh_cuda_backend *b, const lh_config *cfg, int64_t max_rows, int device, lh_error *err) {
  if (b->tp < 2) return LH_OK;
  b->cfg = *cfg;
  b->max_rows = max_rows;
  b->device = device;
  CU(cudaSetDevice(device));
  return lh_cu_tp_open(b, err);
}

/* Device, streams, cuBLAS, workspace, upload ring: everything but the weights. */
static lh_status setup(lh_cuda_backend *b, const lh_config *cfg, int64_t max_rows, int device, int tied,
                       lh_error *err) {
  b->base.ops = &lh_backend_cuda;
  b->cfg = *cfg;
  b->max_rows = max_rows;
  b->device = device;
  if (!b->tp) LH_TRY(set_share(b, cfg, NULL, err));
  b->tune.moe_grouped = 0;
  b->tune.lightning_whole = 0;
  const char *attn = getenv("LH_CUDA_ATTN");
  b->tune.attn_cudnn = attn && !strcmp(attn, "own") ? 1 : attn && !strcmp(attn, "cudnn") ? 2 : 0;
  b->layers.resize(cfg->n_layers);
  CU(cudaSetDevice(device));
  CU(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&b->copy_stream, cudaStreamNonBlocking));
  CU(cudaEventCreateWithFlags(&b->snap_event, cudaEventDisableTiming));
  CB(cublasCreate(&b->blas));
  CB(cublasSetStream(b->blas, b->stream));
  CB(cublasSetMathMode(b->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  const size_t blas_ws = (size_t)64 << 20;
  CU(cudaMalloc(&b->blas_ws, blas_ws));
  CB(cublasSetWorkspace(b->blas, b->blas_ws, blas_ws));

  b->wbytes = carve_weights(b, NULL, tied);
  CU(cudaMalloc(&b->wmem, b->wbytes));
  carve_weights(b, (unsigned char *)b->wmem, tied);
  b->wsbytes = carve_workspace(b, NULL);
  CU(cudaMalloc(&b->wsmem, b->wsbytes));
  carve_workspace(b, (unsigned char *)b->wsmem);

  b->kv_page_bytes = cfg->n_softmax > 0 ? (size_t)2 * b->Gl * LH_KV_PAGE_TOKENS * cfg->head_dim * 2 : 0;
  lh_cu_kv_arena_open(b);

  b->up_cap = (size_t)8 << 20;
  CU(cudaMalloc(&b->up_dev, b->up_cap));
  CU(cudaHostAlloc(&b->up_host, b->up_cap, cudaHostAllocDefault));

  /* the CPU backend's table (lh_rope_table: plain or YaRN), rounded the way HF forms it: at a
   * million positions one ulp of inv_freq moves the angle by a visible amount */
  const int rh = cfg->rotary_dim / 2;
  std::vector<float> inv(rh + 1, 0.0f);
  b->rope_af = lh_rope_table(cfg, inv.data());
  CU(cudaMemcpy(b->inv_freq, inv.data(), (rh + 1) * sizeof(float), cudaMemcpyHostToDevice));
  return LH_OK;
}

void lh_cu_close(lh_backend *be) {
  if (!be) return;
  lh_cuda_backend *b = cu_be(be);
  if (b->stream) cudaStreamSynchronize(b->stream);
  if (b->copy_stream) cudaStreamSynchronize(b->copy_stream);
  lh_cu_tp_close(b);
  lh_cudnn_attn_close(b->cudnn);
  cudaFree(b->kvc);
  cudaFree(b->merge);
  lh_cu_release_memory(b);
  if (b->blas) cublasDestroy(b->blas);
  cudaFree(b->blas_ws);
  cudaFree(b->wmem);
  cudaFree(b->wsmem);
  cudaFree(b->partial);
  cudaFree(b->light_sync);
  cudaFree(b->up_dev);
  cudaFreeHost(b->up_host);
  cudaFreeHost(b->rb_host);
  cudaFree(b->snap_dev);
  cudaFreeHost(b->snap_host);
  if (b->snap_event) cudaEventDestroy(b->snap_event);
  if (b->stream) cudaStreamDestroy(b->stream);
  if (b->copy_stream) cudaStreamDestroy(b->copy_stream);
  (void)cudaGetLastError();
  delete b;
}

/* ---- upload from host views ------------------------------------------------------------------ */

struct stager {
  lh_cuda_backend *b;
  unsigned char *host[2];
  cudaEvent_t done[2];
  size_t cap;
  int cur;
};

static lh_status stager_open(stager *s, lh_cuda_backend *b, lh_error *err) {
  memset(s, 0, sizeof *s);
  s->b = b;
  s->cap = (size_t)32 << 20;
  for (int i = 0; i < 2; i++) {
    CU(cudaHostAlloc(&s->host[i], s->cap, cudaHostAllocDefault));
    CU(cudaEventCreateWithFlags(&s->done[i], cudaEventDisableTiming));
  }
  return LH_OK;
}

static void stager_close(stager *s) {
  for (int i = 0; i < 2; i++) {
    if (s->done[i]) cudaEventSynchronize(s->done[i]), cudaEventDestroy(s->done[i]);
    cudaFreeHost(s->host[i]);
  }
}

/* Copy the block rows [r0, r0 + nr) x columns [c0, c0 + nc) of tensor t, seen as a row-major
 * [total / ncols, ncols] matrix of total elements, converted to bf16 (to_f32: to fp32), to dst on
 * the device as a contiguous [nr, nc] matrix. A tensor-parallel rank takes its rows (qkv, gate,
 * q/k/v) or columns (out_proj, o_proj) this way; a whole tensor is one block. */
static lh_status stage_block(stager *s, const lh_tensor *t, int64_t total, int64_t ncols, int64_t r0, int64_t nr,
                             int64_t c0, int64_t nc, void *dst, int to_f32, lh_error *err) {
  if (!t->data || tensor_elems(t) != total)
    return lh_error_set(err, LH_EINVAL, "cuda backend: tensor %s has %lld elements, expected %lld",
                        t->name ? t->name : "(unnamed)", (long long)tensor_elems(t), (long long)total);
  if (t->dtype != LH_F32 && t->dtype != LH_BF16 && t->dtype != LH_F16)
    return lh_error_set(err, LH_EUNSUPPORTED, "cuda backend: tensor %s: dtype %d", t->name ? t->name : "?",
                        (int)t->dtype);
  if (ncols < 1 || total % ncols || r0 < 0 || c0 < 0 || nr < 0 || nc < 0 || (r0 + nr) * ncols > total ||
      c0 + nc > ncols)
    return lh_error_set(err, LH_EINVAL, "cuda backend: tensor %s: block rows [%lld, +%lld) x columns [%lld, +%lld) "
                        "is outside its [%lld x %lld]", t->name ? t->name : "?", (long long)r0, (long long)nr,
                        (long long)c0, (long long)nc, (long long)(ncols ? total / ncols : 0), (long long)ncols);
  const int64_t n = nr * nc;
  const size_t ob = to_f32 ? 4 : 2, per = s->cap / ob;
  const unsigned char *src = (const unsigned char *)t->data;
  const size_t ib = dtype_bytes(t->dtype);
  /* element i of the block is element at(i) of the tensor */
  auto at = [&](int64_t i) -> int64_t { return (r0 + i / nc) * ncols + c0 + i % nc; };
  for (int64_t i0 = 0; i0 < n; i0 += (int64_t)per) {
    const int64_t m = n - i0 < (int64_t)per ? n - i0 : (int64_t)per;
    unsigned char *h = s->host[s->cur];
    CU(cudaEventSynchronize(s->done[s->cur]));
    if (t->dtype == LH_BF16 && !to_f32 && nc == ncols) {
      memcpy(h, src + (size_t)at(i0) * 2, (size_t)m * 2);
    } else if (t->dtype == LH_BF16 && !to_f32) {
      for (int64_t i = 0; i < m;) { /* a run of the block's row at a time */
        const int64_t run = std::min(m - i, nc - (i0 + i) % nc);
        memcpy(h + (size_t)i * 2, src + (size_t)at(i0 + i) * 2, (size_t)run * 2);
        i += run;
      }
    } else {
      for (int64_t i = 0; i < m; i++) {
        const unsigned char *e = src + (size_t)at(i0 + i) * ib;
        float f;
        uint16_t u16;
        if (t->dtype == LH_F32) {
          memcpy(&f, e, 4);
        } else {
          memcpy(&u16, e, 2);
          f = t->dtype == LH_BF16 ? lh_bf16_to_f32(u16) : lh_f16_to_f32(u16);
        }
        if (to_f32) {
          memcpy(h + i * 4, &f, 4);
        } else {
          uint16_t v = lh_f32_to_bf16(f);
          memcpy(h + i * 2, &v, 2);
        }
      }
    }
    CU(cudaMemcpyAsync((unsigned char *)dst + (size_t)i0 * ob, h, (size_t)m * ob, cudaMemcpyHostToDevice,
                       s->b->stream));
    CU(cudaEventRecord(s->done[s->cur], s->b->stream));
    s->cur ^= 1;
  }
  return LH_OK;
}

/* All n elements of t. */
static lh_status stage_tensor(stager *s, const lh_tensor *t, int64_t n, void *dst, int to_f32, lh_error *err) {
  return stage_block(s, t, n, n > 0 ? n : 1, 0, n > 0 ? 1 : 0, 0, n, dst, to_f32, err);
}

/* This rank's share of every tensor (all of it with one rank): the heads' rows of the fused input
 * projections and columns of the output projections, the experts [e0, e1); norms, router,
 * embeddings and lm_head whole. */
static lh_status upload_all(lh_cuda_backend *b, const lh_weights *w, stager *s, lh_error *err) {
  const shapes sh = shapes_of(b);
  const int64_t D = sh.hidden, d = sh.d, HdAll = (int64_t)b->cfg.n_heads * d, KdAll = (int64_t)b->cfg.n_kv_heads * d;
  const int64_t c0 = (int64_t)b->h0 * d, k0 = (int64_t)b->g0 * d, Kd = sh.Hkv * d;
  LH_TRY(stage_tensor(s, &w->embed, sh.vocab * D, b->embed, 0, err));
  if (b->lm_head != b->embed) LH_TRY(stage_tensor(s, &w->lm_head, sh.vocab * D, b->lm_head, 0, err));
  LH_TRY(stage_tensor(s, &w->final_norm, D, b->final_norm, 1, err));
  b->norm_of[&w->final_norm] = b->final_norm;
  for (int l = 0; l < b->cfg.n_layers; l++) {
    const lh_layer_weights &W = w->layers[l];
    cu_layer &L = b->layers[l];
    if (W.kind != L.kind)
      return lh_error_set(err, LH_EINVAL, "cuda backend: layer %d kind differs between config and weights", l);
    LH_TRY(stage_tensor(s, &W.in_norm, D, L.in_norm, 1, err));
    LH_TRY(stage_tensor(s, &W.post_norm, D, L.post_norm, 1, err));
    b->norm_of[&W.in_norm] = L.in_norm;
    b->norm_of[&W.post_norm] = L.post_norm;
    if (L.kind == LH_LAYER_LIGHTNING) { /* qkv rows are per head (q, k, v), so a head range is contiguous */
      LH_TRY(stage_block(s, &W.qkv, 3 * HdAll * D, D, 3 * c0, 3 * sh.Hd, 0, D, L.qkvg, 0, err));
      LH_TRY(stage_block(s, &W.out_gate, HdAll * D, D, c0, sh.Hd, 0, D, L.qkvg + 3 * sh.Hd * D, 0, err));
      LH_TRY(stage_block(s, &W.out_proj, D * HdAll, HdAll, 0, D, c0, sh.Hd, L.out_proj, 0, err));
      LH_TRY(stage_block(s, &W.attn_norm, HdAll, HdAll, 0, 1, c0, sh.Hd, L.attn_norm, 1, err));
      CU(cudaMemcpyAsync(L.slope, W.slope + b->h0, sh.H * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    } else { /* the query heads of kv heads [g0, g0 + Gl) are heads [h0, h0 + Hl) */
      LH_TRY(stage_block(s, &W.q_proj, HdAll * D, D, c0, sh.Hd, 0, D, L.qkv, 0, err));
      LH_TRY(stage_block(s, &W.k_proj, KdAll * D, D, k0, Kd, 0, D, L.qkv + sh.Hd * D, 0, err));
      LH_TRY(stage_block(s, &W.v_proj, KdAll * D, D, k0, Kd, 0, D, L.qkv + (sh.Hd + Kd) * D, 0, err));
      LH_TRY(stage_block(s, &W.o_proj, D * HdAll, HdAll, 0, D, c0, sh.Hd, L.o_proj, 0, err));
      if (L.length_scale)
        CU(cudaMemcpyAsync(L.length_scale, W.length_scale + b->h0, sh.H * sizeof(float), cudaMemcpyHostToDevice,
                           b->stream));
    }
    LH_TRY(stage_tensor(s, &W.router, sh.E * D, L.router, 0, err));
    const int64_t Iall = b->cfg.intermediate_size, i0 = b->i0;
    for (int64_t e = 0; e < sh.El; e++) { /* rows [i0, i0 + I) of w1 and w3, those columns of w2 */
      const int64_t ge = b->e0 + e;       /* the model's expert index */
      bf16_t *w13 = L.w13 + e * 2 * sh.I * D;
      LH_TRY(stage_block(s, &W.w1[ge], Iall * D, D, i0, sh.I, 0, D, w13, 0, err));
      LH_TRY(stage_block(s, &W.w3[ge], Iall * D, D, i0, sh.I, 0, D, w13 + sh.I * D, 0, err));
      LH_TRY(stage_block(s, &W.w2[ge], D * Iall, Iall, 0, D, i0, sh.I, L.w2 + e * D * sh.I, 0, err));
    }
  }
  return LH_OK;
}

/* The GPU of a rank: the params' device plus the rank's index among this host's ranks. */
static int rank_device(int device, struct lh_comm *comm) {
  int n = 0;
  if (!comm || lh_comm_size(comm) < 2) return device;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    (void)cudaGetLastError();
    return device;
  }
  return (device + lh_comm_local_rank(comm)) % n;
}

lh_status lh_cu_open(const lh_config *cfg, const lh_weights *w, const lh_model_params *p, int64_t max_rows,
                     lh_backend **out, lh_error *err) {
  *out = NULL;
  LH_TRY(check_config(cfg, max_rows, err));
  if (p && p->tp_ranks > 1)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend: tp_ranks %d simulates ranks in one process, which only the CPU backend does; "
                        "run one process per GPU instead (mpirun -np R, or LH_WORLD_SIZE / LH_RANK / "
                        "LH_RENDEZVOUS)", p->tp_ranks);
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) return lh_error_set(err, LH_EBACKEND, "cuda backend: %s", why);
  lh_cuda_backend *b = new lh_cuda_backend();
  int tied = w->lm_head.data == w->embed.data || cfg->tie_word_embeddings;
  /* a backend sees comm only when the model spans several ranks */
  lh_status st = set_share(b, cfg, p && p->comm && lh_comm_size(p->comm) > 1 ? p->comm : NULL, err);
  int device = 0;
  if (st == LH_OK) device = rank_device(p ? p->device : 0, b->comm);
  if (st == LH_OK) st = tp_first(b, cfg, max_rows, device, err);
  if (st == LH_OK) st = setup(b, cfg, max_rows, device, tied, err);
  if (st == LH_OK) {
    b->hw = w;
    stager s;
    st = stager_open(&s, b, err);
    if (st == LH_OK) st = upload_all(b, w, &s, err);
    stager_close(&s);
  }
  if (st == LH_OK) {
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) st = lh_cu_fail(err, "cudaStreamSynchronize(upload)", e, __FILE__, __LINE__);
  }
  if (st != LH_OK) {
    lh_error_prefix(err, st, "opening the cuda backend: ");
    lh_cu_close(&b->base);
    return st;
  }
  *out = &b->base;
  return LH_OK;
}

/* ---- random model ---------------------------------------------------------------------------- */

/* Over ranks, every rank fills its share of the same model a single GPU fills from the seed: the
 * fill is counter-based (random.cu), so a rank's rows, columns and experts are filled with the
 * values those elements have in the whole tensor. The logits over R ranks can then be held
 * against one GPU's on the real-width slice (bench_cuda --logits). */
static lh_status fill_random(lh_cuda_backend *b, uint64_t seed, lh_error *err) {
  const shapes s = shapes_of(b);
  const int64_t D = s.hidden, d = s.d, HdAll = (int64_t)b->cfg.n_heads * d, KdAll = (int64_t)b->cfg.n_kv_heads * d;
  const int64_t c0 = (int64_t)b->h0 * d, k0 = (int64_t)b->g0 * d, Kd = s.Hkv * d;
  uint64_t k = seed * 1000003ull;
  auto scale = [](int64_t fan_in) { return (float)sqrt(3.0 / (double)fan_in); };
  /* rows [r0, r0 + n) of a whole tensor with rows of D values (contiguous in it) */
  auto rows = [&](bf16_t *p, int64_t r0, int64_t n, int64_t fan_in, uint64_t key) -> cudaError_t {
    return lh_cuda_fill_uniform_bf16_block(b->stream, p, 1, n * D, n * D, r0 * D, key, scale(fan_in));
  };
  /* columns [c, c + n) of a whole [D x ld] tensor */
  auto cols = [&](bf16_t *p, int64_t c, int64_t n, int64_t ld, uint64_t key) -> cudaError_t {
    return lh_cuda_fill_uniform_bf16_block(b->stream, p, D, n, ld, c, key, scale(ld));
  };
  auto nrm = [&](float *p, int64_t n, int64_t at, uint64_t key) -> cudaError_t {
    return lh_cuda_fill_uniform_f32_at(b->stream, p, n, at, key, 0.1f, 1.0f);
  };
  CU(lh_cuda_fill_uniform_bf16(b->stream, b->embed, s.vocab * D, ++k, 1.7320508f));
  if (b->lm_head != b->embed) CU(lh_cuda_fill_uniform_bf16(b->stream, b->lm_head, s.vocab * D, ++k, scale(D)));
  CU(nrm(b->final_norm, D, 0, ++k));
  /* HF's slopes over every head of the model; a rank takes its own heads' */
  const double base = 1.0 / pow(2.0, 8.0 / (double)b->cfg.n_heads);
  for (int l = 0; l < b->cfg.n_layers; l++) {
    cu_layer &L = b->layers[l];
    CU(nrm(L.in_norm, D, 0, ++k));
    CU(nrm(L.post_norm, D, 0, ++k));
    if (L.kind == LH_LAYER_LIGHTNING) { /* whole qkvg: [3 HdAll rows of q, k, v per head][HdAll rows of gate] */
      const uint64_t key = ++k;
      CU(rows(L.qkvg, 3 * c0, 3 * s.Hd, D, key));
      CU(rows(L.qkvg + 3 * s.Hd * D, 3 * HdAll + c0, s.Hd, D, key));
      CU(cols(L.out_proj, c0, s.Hd, HdAll, ++k));
      CU(nrm(L.attn_norm, s.Hd, c0, ++k));
      std::vector<float> slope(s.H);
      double factor = 1.0 - (double)l / ((double)b->cfg.n_layers - 1.0 + 1e-5) + 1e-5;
      for (int h = 0; h < s.H; h++) slope[h] = (float)(pow(base, b->h0 + h + 1) * factor);
      CU(cudaMemcpy(L.slope, slope.data(), s.H * sizeof(float), cudaMemcpyHostToDevice));
      memcpy(b->own_layers[l].slope, slope.data(), s.H * sizeof(float));
    } else { /* whole qkv: [HdAll rows of q][KdAll of k][KdAll of v] */
      const uint64_t key = ++k;
      CU(rows(L.qkv, c0, s.Hd, D, key));
      CU(rows(L.qkv + s.Hd * D, HdAll + k0, Kd, D, key));
      CU(rows(L.qkv + (s.Hd + Kd) * D, HdAll + KdAll + k0, Kd, D, key));
      CU(cols(L.o_proj, c0, s.Hd, HdAll, ++k));
      if (L.length_scale) CU(cudaMemsetAsync(L.length_scale, 0, s.H * sizeof(float), b->stream)); /* the plain model */
    }
    CU(rows(L.router, 0, s.E, D, ++k));
    const int64_t Iall = b->cfg.intermediate_size, i0 = b->i0;
    const uint64_t k13 = ++k, k2 = ++k; /* whole w13: [E][2 Iall][D] (w1 rows, then w3); w2: [E][D][Iall] */
    if (s.I == Iall) {
      CU(rows(L.w13, b->e0 * 2 * Iall, s.El * 2 * Iall, D, k13));
      CU(lh_cuda_fill_uniform_bf16_block(b->stream, L.w2, 1, s.El * D * Iall, 0, b->e0 * D * Iall, k2, scale(Iall)));
    } else {
      for (int64_t e = 0; e < s.El; e++) { /* rows [i0, i0 + I) of each expert's w1 and w3, those columns of w2 */
        const int64_t ge = b->e0 + e;
        bf16_t *w13 = L.w13 + e * 2 * s.I * D;
        CU(rows(w13, ge * 2 * Iall + i0, s.I, D, k13));
        CU(rows(w13 + s.I * D, ge * 2 * Iall + Iall + i0, s.I, D, k13));
        CU(lh_cuda_fill_uniform_bf16_block(b->stream, L.w2 + e * D * s.I, D, s.I, Iall, ge * D * Iall + i0, k2,
                                           scale(Iall)));
      }
    }
  }
  return LH_OK;
}

lh_status lh_cuda_open_random(const lh_config *cfg, uint64_t seed, int64_t max_rows, int device, lh_backend **out,
                              lh_error *err) {
  return lh_cuda_open_random_ranks(cfg, seed, max_rows, device, NULL, out, err);
}

int lh_cuda_moe_counts(lh_backend *be, int32_t *rows) {
  const lh_cuda_backend *b = cu_be(be);
  for (size_t e = 0; e < b->moe_rows.size(); e++) rows[e] = b->moe_rows[e];
  return (int)b->moe_rows.size();
}

void lh_cuda_moe_share(lh_backend *be, int *experts, int *width) {
  const lh_cuda_backend *b = cu_be(be);
  if (experts) *experts = b->e1 - b->e0;
  if (width) *width = b->Il;
}

void lh_cuda_share(lh_backend *be, int *heads, int *kv_heads, int *ranks) {
  const lh_cuda_backend *b = cu_be(be);
  if (heads) *heads = b->Hl;
  if (kv_heads) *kv_heads = b->Gl;
  if (ranks) *ranks = b->tp;
}

lh_status lh_cuda_open_random_ranks(const lh_config *cfg, uint64_t seed, int64_t max_rows, int device,
                                    struct lh_comm *comm, lh_backend **out, lh_error *err) {
  *out = NULL;
  LH_TRY(check_config(cfg, max_rows, err));
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) return lh_error_set(err, LH_EBACKEND, "cuda backend: %s", why);
  if (comm && lh_comm_size(comm) < 2) comm = NULL;
  device = rank_device(device, comm);
  lh_cuda_backend *b = new lh_cuda_backend();
  lh_status sst = set_share(b, cfg, comm, err);
  if (sst != LH_OK) {
    delete b;
    return sst;
  }
  b->own_layers.resize(cfg->n_layers);
  memset(b->own_layers.data(), 0, cfg->n_layers * sizeof(lh_layer_weights));
  memset(&b->own_w, 0, sizeof b->own_w);
  b->own_w.layers = b->own_layers.data();
  for (int l = 0; l < cfg->n_layers; l++) b->own_layers[l].kind = cfg->layer_kind[l];
  b->hw = &b->own_w;
  lh_status st = tp_first(b, cfg, max_rows, device, err);
  if (st == LH_OK) st = setup(b, cfg, max_rows, device, cfg->tie_word_embeddings, err);
  if (st == LH_OK) {
    b->norm_of[&b->own_w.final_norm] = b->final_norm;
    for (int l = 0; l < cfg->n_layers; l++) {
      b->norm_of[&b->own_layers[l].in_norm] = b->layers[l].in_norm;
      b->norm_of[&b->own_layers[l].post_norm] = b->layers[l].post_norm;
    }
    st = fill_random(b, seed, err);
  }
  if (st == LH_OK) {
    cudaError_t e = cudaStreamSynchronize(b->stream);
    if (e != cudaSuccess) st = lh_cu_fail(err, "cudaStreamSynchronize(fill)", e, __FILE__, __LINE__);
  }
  if (st != LH_OK) {
    lh_error_prefix(err, st, "opening a random cuda model: ");
    lh_cu_close(&b->base);
    return st;
  }
  *out = &b->base;
  return LH_OK;
}

const lh_weights *lh_cuda_weights(lh_backend *be) { return cu_be(be)->hw; }
