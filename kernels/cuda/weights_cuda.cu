/* weights_cuda.cu — binding the CUDA backend to a model: device, streams and cuBLAS; the weights
 * (uploaded from the host views and converted to bf16, or drawn on the GPU for a random model); the
 * fixed workspace for max_rows rows.
 *
 * Layout on the device: one allocation for all weights, carved in layer order into the pointers of
 * cu_layer (see backend_internal.h for shapes); projections that read the same input are stored
 * fused (lightning qkv + output_gate, softmax q + k + v, each expert's w1 + w3) so each is one GEMM.
 * Norm weights and slopes are fp32. The workspace is a second single allocation sized from the
 * config and max_rows; nothing in it grows with context length except the decode split partials.
 *
 * Never: keep a pointer into the caller's host weights past open (they are copied), or leave the
 * device half-initialised on failure (close releases whatever was made).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/attn_cudnn.h"
#include "kernels/cuda/backend_internal.h"
#include "util/half.h"

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

lh_config lh_cuda_slice_config(int vocab) {
  lh_config c;
  memset(&c, 0, sizeof c);
  snprintf(c.model_type, sizeof c.model_type, "minimax");
  c.vocab_size = vocab;
  c.hidden_size = 6144;
  c.n_layers = 8;
  c.n_heads = 64;
  c.n_kv_heads = 8;
  c.head_dim = 128;
  c.intermediate_size = 9216;
  c.n_experts = 32;
  c.top_k = 2;
  c.block_size = 256;
  c.rotary_dim = 64;
  c.rope_theta = 10000000.0;
  c.rms_norm_eps = 1e-5;
  c.postnorm = 1;
  c.max_position_embeddings = 1 << 22;
  c.bos_token_id = c.eos_token_id = -1;
  for (int k = 0; k < 2; k++) c.attn_alpha[k] = 3.5565588f, c.attn_beta[k] = 1.0f;
  c.mlp_alpha = 3.5565588f, c.mlp_beta = 1.0f;
  for (int i = 0; i < 8; i++) c.layer_kind[i] = (i + 1) % 8 == 0 ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;
  c.n_lightning = 7;
  c.n_softmax = 1;
  return c;
}

/* ---- sizes ---------------------------------------------------------------------------------- */

struct shapes {
  int64_t hidden, H, Hkv, d, Hd, E, I, K, vocab;
};

static shapes shapes_of(const lh_config *c) {
  shapes s;
  s.hidden = c->hidden_size, s.H = c->n_heads, s.Hkv = c->n_kv_heads, s.d = c->head_dim;
  s.Hd = s.H * s.d, s.E = c->n_experts, s.I = c->intermediate_size, s.K = c->top_k, s.vocab = c->vocab_size;
  return s;
}

/* Walk the weight layout once to size it (base NULL) and once to carve it. */
static size_t carve_weights(lh_cuda_backend *b, unsigned char *base, int tied) {
  const shapes s = shapes_of(&b->cfg);
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
    }
    L.router = (bf16_t *)take((size_t)s.E * s.hidden * 2);
    L.w13 = (bf16_t *)take((size_t)s.E * 2 * s.I * s.hidden * 2);
    L.w2 = (bf16_t *)take((size_t)s.E * s.hidden * s.I * 2);
  }
  b->inv_freq = (float *)take((size_t)(b->cfg.rotary_dim / 2 + 1) * 4);
  return off;
}

static size_t carve_workspace(lh_cuda_backend *b, unsigned char *base) {
  const shapes s = shapes_of(&b->cfg);
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
  b->ys = (bf16_t *)take((size_t)M * s.hidden * 2);
  b->ptrs = (void **)take((size_t)6 * s.E * sizeof(void *));
  b->lg_rows = s.vocab > 65536 ? 16 : 64;
  b->lg_x = (bf16_t *)take((size_t)b->lg_rows * s.hidden * 2);
  b->lg_out = (float *)take((size_t)b->lg_rows * s.vocab * 4);
  b->tok_out = (int32_t *)take((size_t)b->lg_rows * 4);
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

/* Device, streams, cuBLAS, workspace, upload ring: everything but the weights. */
static lh_status setup(lh_cuda_backend *b, const lh_config *cfg, int64_t max_rows, int device, int tied,
                       lh_error *err) {
  b->base.ops = &lh_backend_cuda;
  b->cfg = *cfg;
  b->max_rows = max_rows;
  b->device = device;
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

  b->kv_page_bytes = cfg->n_softmax > 0 ? (size_t)2 * cfg->n_kv_heads * LH_KV_PAGE_TOKENS * cfg->head_dim * 2 : 0;
  lh_cu_kv_arena_open(b);

  b->up_cap = (size_t)8 << 20;
  CU(cudaMalloc(&b->up_dev, b->up_cap));
  CU(cudaHostAlloc(&b->up_host, b->up_cap, cudaHostAllocDefault));

  /* inv_freq[j] = 1 / theta^(2j / rotary_dim) rounded the way HF (and kernels/cpu) form it: the
   * exponent in fp32, the power rounded to fp32, then the fp32 reciprocal. At a million positions
   * one ulp of inv_freq moves the angle by a visible amount, so the rounding has to match. */
  const int rh = cfg->rotary_dim / 2;
  std::vector<float> inv(rh + 1, 0.0f);
  for (int j = 0; j < rh; j++) {
    float e = (float)(2 * j) / (float)cfg->rotary_dim;
    inv[j] = 1.0f / (float)pow(cfg->rope_theta, (double)e);
  }
  CU(cudaMemcpy(b->inv_freq, inv.data(), (rh + 1) * sizeof(float), cudaMemcpyHostToDevice));
  return LH_OK;
}

void lh_cu_close(lh_backend *be) {
  if (!be) return;
  lh_cuda_backend *b = cu_be(be);
  if (b->stream) cudaStreamSynchronize(b->stream);
  if (b->copy_stream) cudaStreamSynchronize(b->copy_stream);
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

/* Copy elements [0, n) of tensor t, converted to bf16 (to_f32: to fp32), to dst on the device. */
static lh_status stage_tensor(stager *s, const lh_tensor *t, int64_t n, void *dst, int to_f32, lh_error *err) {
  if (!t->data || tensor_elems(t) != n)
    return lh_error_set(err, LH_EINVAL, "cuda backend: tensor %s has %lld elements, expected %lld",
                        t->name ? t->name : "(unnamed)", (long long)tensor_elems(t), (long long)n);
  if (t->dtype != LH_F32 && t->dtype != LH_BF16 && t->dtype != LH_F16)
    return lh_error_set(err, LH_EUNSUPPORTED, "cuda backend: tensor %s: dtype %d", t->name ? t->name : "?",
                        (int)t->dtype);
  const size_t ob = to_f32 ? 4 : 2, per = s->cap / ob;
  const unsigned char *src = (const unsigned char *)t->data;
  const size_t ib = dtype_bytes(t->dtype);
  for (int64_t i0 = 0; i0 < n; i0 += (int64_t)per) {
    const int64_t m = n - i0 < (int64_t)per ? n - i0 : (int64_t)per;
    unsigned char *h = s->host[s->cur];
    CU(cudaEventSynchronize(s->done[s->cur]));
    if (t->dtype == LH_BF16 && !to_f32) {
      memcpy(h, src + (size_t)i0 * 2, (size_t)m * 2);
    } else {
      for (int64_t i = 0; i < m; i++) {
        const unsigned char *e = src + (size_t)(i0 + i) * ib;
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

static lh_status upload_all(lh_cuda_backend *b, const lh_weights *w, stager *s, lh_error *err) {
  const shapes sh = shapes_of(&b->cfg);
  LH_TRY(stage_tensor(s, &w->embed, sh.vocab * sh.hidden, b->embed, 0, err));
  if (b->lm_head != b->embed) LH_TRY(stage_tensor(s, &w->lm_head, sh.vocab * sh.hidden, b->lm_head, 0, err));
  LH_TRY(stage_tensor(s, &w->final_norm, sh.hidden, b->final_norm, 1, err));
  b->norm_of[&w->final_norm] = b->final_norm;
  for (int l = 0; l < b->cfg.n_layers; l++) {
    const lh_layer_weights &W = w->layers[l];
    cu_layer &L = b->layers[l];
    if (W.kind != L.kind)
      return lh_error_set(err, LH_EINVAL, "cuda backend: layer %d kind differs between config and weights", l);
    LH_TRY(stage_tensor(s, &W.in_norm, sh.hidden, L.in_norm, 1, err));
    LH_TRY(stage_tensor(s, &W.post_norm, sh.hidden, L.post_norm, 1, err));
    b->norm_of[&W.in_norm] = L.in_norm;
    b->norm_of[&W.post_norm] = L.post_norm;
    if (L.kind == LH_LAYER_LIGHTNING) {
      LH_TRY(stage_tensor(s, &W.qkv, 3 * sh.Hd * sh.hidden, L.qkvg, 0, err));
      LH_TRY(stage_tensor(s, &W.out_gate, sh.Hd * sh.hidden, L.qkvg + 3 * sh.Hd * sh.hidden, 0, err));
      LH_TRY(stage_tensor(s, &W.out_proj, sh.hidden * sh.Hd, L.out_proj, 0, err));
      LH_TRY(stage_tensor(s, &W.attn_norm, sh.Hd, L.attn_norm, 1, err));
      CU(cudaMemcpyAsync(L.slope, W.slope, sh.H * sizeof(float), cudaMemcpyHostToDevice, b->stream));
    } else {
      LH_TRY(stage_tensor(s, &W.q_proj, sh.Hd * sh.hidden, L.qkv, 0, err));
      LH_TRY(stage_tensor(s, &W.k_proj, sh.Hkv * sh.d * sh.hidden, L.qkv + sh.Hd * sh.hidden, 0, err));
      LH_TRY(stage_tensor(s, &W.v_proj, sh.Hkv * sh.d * sh.hidden, L.qkv + (sh.Hd + sh.Hkv * sh.d) * sh.hidden, 0,
                          err));
      LH_TRY(stage_tensor(s, &W.o_proj, sh.hidden * sh.Hd, L.o_proj, 0, err));
    }
    LH_TRY(stage_tensor(s, &W.router, sh.E * sh.hidden, L.router, 0, err));
    for (int64_t e = 0; e < sh.E; e++) {
      bf16_t *w13 = L.w13 + e * 2 * sh.I * sh.hidden;
      LH_TRY(stage_tensor(s, &W.w1[e], sh.I * sh.hidden, w13, 0, err));
      LH_TRY(stage_tensor(s, &W.w3[e], sh.I * sh.hidden, w13 + sh.I * sh.hidden, 0, err));
      LH_TRY(stage_tensor(s, &W.w2[e], sh.hidden * sh.I, L.w2 + e * sh.hidden * sh.I, 0, err));
    }
  }
  return LH_OK;
}

lh_status lh_cu_open(const lh_config *cfg, const lh_weights *w, const lh_model_params *p, int64_t max_rows,
                     lh_backend **out, lh_error *err) {
  *out = NULL;
  LH_TRY(check_config(cfg, max_rows, err));
  if (p && (p->tp_ranks > 1 || p->comm)) /* a backend sees comm only when the model spans several ranks */
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "cuda backend: tensor/expert parallelism over several GPUs is not implemented yet (issue "
                        "10); the CPU backend runs several ranks (in one process with tp_ranks, or one process per "
                        "rank under mpirun)");
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) return lh_error_set(err, LH_EBACKEND, "cuda backend: %s", why);
  lh_cuda_backend *b = new lh_cuda_backend();
  int tied = w->lm_head.data == w->embed.data || cfg->tie_word_embeddings;
  lh_status st = setup(b, cfg, max_rows, p ? p->device : 0, tied, err);
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

static lh_status fill_random(lh_cuda_backend *b, uint64_t seed, lh_error *err) {
  const shapes s = shapes_of(&b->cfg);
  uint64_t k = seed * 1000003ull;
  auto lin = [&](bf16_t *p, int64_t n, int64_t fan_in) -> cudaError_t {
    return lh_cuda_fill_uniform_bf16(b->stream, p, n, ++k, (float)sqrt(3.0 / (double)fan_in));
  };
  auto nrm = [&](float *p, int64_t n) -> cudaError_t { return lh_cuda_fill_uniform_f32(b->stream, p, n, ++k, 0.1f, 1.0f); };
  CU(lh_cuda_fill_uniform_bf16(b->stream, b->embed, s.vocab * s.hidden, ++k, 1.7320508f));
  if (b->lm_head != b->embed) CU(lin(b->lm_head, s.vocab * s.hidden, s.hidden));
  CU(nrm(b->final_norm, s.hidden));
  const double base = 1.0 / pow(2.0, 8.0 / (double)s.H);
  for (int l = 0; l < b->cfg.n_layers; l++) {
    cu_layer &L = b->layers[l];
    CU(nrm(L.in_norm, s.hidden));
    CU(nrm(L.post_norm, s.hidden));
    if (L.kind == LH_LAYER_LIGHTNING) {
      CU(lin(L.qkvg, 4 * s.Hd * s.hidden, s.hidden));
      CU(lin(L.out_proj, s.hidden * s.Hd, s.Hd));
      CU(nrm(L.attn_norm, s.Hd));
      std::vector<float> slope(s.H);
      double factor = 1.0 - (double)l / ((double)b->cfg.n_layers - 1.0 + 1e-5) + 1e-5;
      for (int h = 0; h < s.H; h++) slope[h] = (float)(pow(base, h + 1) * factor);
      CU(cudaMemcpy(L.slope, slope.data(), s.H * sizeof(float), cudaMemcpyHostToDevice));
      memcpy(b->own_layers[l].slope, slope.data(), s.H * sizeof(float));
    } else {
      CU(lin(L.qkv, (s.H + 2 * s.Hkv) * s.d * s.hidden, s.hidden));
      CU(lin(L.o_proj, s.hidden * s.Hd, s.Hd));
    }
    CU(lin(L.router, s.E * s.hidden, s.hidden));
    CU(lin(L.w13, s.E * 2 * s.I * s.hidden, s.hidden));
    CU(lin(L.w2, s.E * s.hidden * s.I, s.I));
  }
  return LH_OK;
}

lh_status lh_cuda_open_random(const lh_config *cfg, uint64_t seed, int64_t max_rows, int device, lh_backend **out,
                              lh_error *err) {
  *out = NULL;
  LH_TRY(check_config(cfg, max_rows, err));
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) return lh_error_set(err, LH_EBACKEND, "cuda backend: %s", why);
  lh_cuda_backend *b = new lh_cuda_backend();
  b->own_layers.resize(cfg->n_layers);
  memset(b->own_layers.data(), 0, cfg->n_layers * sizeof(lh_layer_weights));
  memset(&b->own_w, 0, sizeof b->own_w);
  b->own_w.layers = b->own_layers.data();
  for (int l = 0; l < cfg->n_layers; l++) b->own_layers[l].kind = cfg->layer_kind[l];
  b->hw = &b->own_w;
  lh_status st = setup(b, cfg, max_rows, device, cfg->tie_word_embeddings, err);
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
