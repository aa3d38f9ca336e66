/* weights.c — turn a validated safetensors index into the engine's named weight views.
 *
 * Tensor names, per layer N (prefix model.layers.N.):
 *   input_layernorm.weight, post_attention_layernorm.weight                      [hidden]
 *   lightning: self_attn.qkv_proj.weight [3*H*d, hidden], self_attn.output_gate.weight [H*d, hidden],
 *              self_attn.out_proj.weight [hidden, H*d], self_attn.norm.weight [H*d]; optional buffers
 *              self_attn.slope_rate [H,1,1], query_decay [H,B,1], key_decay [H,B,1], diagonal_decay [1,H,B,B]
 *              (transformers' save_pretrained writes them) at any block length B, not only the config's
 *   softmax:   self_attn.{q,o}_proj.weight [H*d, hidden] / [hidden, H*d], self_attn.{k,v}_proj.weight
 *              [Hkv*d, hidden]; self_attn.length_scale [H] exactly when the config's
 *              attn_length_scale_base is set (required then, refused otherwise: see length_scale)
 *   MoE, under block_sparse_moe. or mlp. (transformers' conversion for "minimax" -> "mixtral" renames
 *   .block_sparse_moe. to .mlp., so it loads either):
 *              gate.weight [E, hidden]; experts either per expert, experts.E.w1/w3.weight [I, hidden] and
 *              experts.E.w2.weight [hidden, I] (what save_pretrained writes), or fused, experts.gate_up_proj
 *              [E, 2I, hidden] (rows [0, I) are w1, the gate; rows [I, 2I) are w3, the up projection, as
 *              transformers concatenates them) and experts.down_proj [E, hidden, I] (HF's in-memory names).
 * Global: model.embed_tokens.weight [vocab, hidden], model.norm.weight [hidden], lm_head.weight
 * [vocab, hidden] (absent, or ignored with a warning, when tie_word_embeddings is true).
 *
 * Invariants: every view points into a mapping (no copies) except when a tensor's bytes are not
 * aligned to its element size inside the file (possible in a valid safetensors file); such a tensor
 * is copied once into an aligned buffer owned by the model, so consumers may read any view as an
 * array of its dtype. Each tensor of the index is used at most once; any left over is reported as
 * unknown (a warning, never an error). A lightning layer's slopes come from its stored slope_rate
 * when there is one (transformers loads that buffer, so its values are the ones it computes with)
 * and from lh_lightning_slopes otherwise. The decay tables are derived data: each is checked
 * against the slopes at its own block length (decay_table) and never used, since the engine
 * computes every decay from the slopes at the config's block length.
 */
#include "engine/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "util/log.h"

typedef struct wctx {
  lh_model *m;
  lh_st_set *s;
  lh_error *err;
  char *slice_names; /* arena for the names of fused-tensor slices */
  size_t slice_len, slice_cap;
  int warned_lowprec_decay;
} wctx;

static const char *file_of(const wctx *c, const lh_st_tensor *t) {
  return c->s->n_maps ? c->s->maps[t->file].path : "(memory)";
}

static lh_status own(wctx *c, void *p) {
  lh_model *m = c->m;
  void **o = realloc(m->owned, (size_t)(m->n_owned + 1) * sizeof *o);
  if (!o) {
    free(p);
    return lh_error_set(c->err, LH_ENOMEM, "out of memory building weight views");
  }
  m->owned = o;
  m->owned[m->n_owned++] = p;
  return LH_OK;
}

static void fmt_dims(char *out, size_t n, const int64_t *d, int nd) {
  size_t k = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < nd && k < n; i++) k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)d[i]);
  if (k < n) snprintf(out + k, n - k, "]");
}

static lh_st_tensor *find(wctx *c, const char *name) { return lh_st_find(c->s, name); }

/* A view of t, checked against the expected shape. */
static lh_status view(wctx *c, lh_st_tensor *t, int nd, const int64_t *want, lh_tensor *out) {
  int ok = t->ndim == nd;
  for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
  if (!ok) {
    char a[128], b[128];
    fmt_dims(a, sizeof a, want, nd);
    fmt_dims(b, sizeof b, t->shape, t->ndim);
    return lh_error_set(c->err, LH_EFORMAT, "%s: tensor '%s' has shape %s but the config needs %s", file_of(c, t),
                        t->name, b, a);
  }
  t->used = 1;
  const void *data = t->data;
  size_t es = lh_dtype_size(t->dtype);
  if (data && ((uintptr_t)data % es)) {
    void *copy = aligned_alloc(64, (t->nbytes + 63) / 64 * 64);
    if (!copy) return lh_error_set(c->err, LH_ENOMEM, "out of memory copying misaligned tensor '%s'", t->name);
    memcpy(copy, data, t->nbytes);
    lh_status st = own(c, copy);
    if (st) return st;
    lh_log_debug("%s: tensor '%s' is not %zu-byte aligned in the file; copied", file_of(c, t), t->name, es);
    data = copy;
  }
  memset(out, 0, sizeof *out);
  out->data = data;
  out->dtype = t->dtype;
  out->ndim = nd > 3 ? 3 : nd;
  for (int i = 0; i < out->ndim; i++) out->shape[i] = t->shape[i];
  out->name = t->name;
  return LH_OK;
}

static lh_status missing(wctx *c, const char *name, const char *hint) {
  const char *where = c->s->sharded ? "any shard" : (c->s->n_maps ? c->s->maps[0].path : "the checkpoint");
  return lh_error_set(c->err, LH_EFORMAT, "tensor '%s' is missing from %s%s%s", name, where, hint ? ": " : "",
                      hint ? hint : "");
}

static lh_status need(wctx *c, const char *name, int nd, int64_t d0, int64_t d1, int64_t d2, lh_tensor *out,
                      const char *hint) {
  lh_st_tensor *t = find(c, name);
  if (!t) return missing(c, name, hint);
  int64_t want[3] = {d0, d1, d2};
  return view(c, t, nd, want, out);
}

/* ---- lightning slopes ---------------------------------------------------------------------- */

static void alibi_slopes(int n, double *out) {
  double l2 = log2((double)n);
  if (l2 == floor(l2)) {
    double start = pow(2.0, -pow(2.0, -(l2 - 3)));
    for (int i = 0; i < n; i++) out[i] = start * pow(start, (double)i);
    return;
  }
  int closest = 1 << (int)floor(l2);
  alibi_slopes(closest, out);
  double *big = malloc(sizeof(double) * (size_t)(2 * closest));
  if (!big) { /* n <= LH_MAX_HEADS, so this is a few KiB; keep going with the closest slopes */
    for (int i = closest; i < n; i++) out[i] = out[i - closest];
    return;
  }
  alibi_slopes(2 * closest, big);
  for (int i = 0; i < n - closest; i++) out[closest + i] = big[2 * i];
  free(big);
}

void lh_lightning_slopes(const lh_config *cfg, int layer, float *slope) {
  int H = cfg->n_heads, L = cfg->n_layers;
  if (!strcmp(cfg->model_type, "minimax_text_01")) {
    double s[LH_MAX_HEADS];
    alibi_slopes(H, s);
    double f = L <= 1 ? 1 + 1e-5 : 1 - (double)layer / (L - 1) + 1e-5;
    float ff = (float)f;
    for (int h = 0; h < H; h++) slope[h] = (float)s[h] * ff;
  } else {
    /* torch: (python float) ** int64 tensor is a float32 pow; * python float is a float32 multiply. */
    double base = 1 / pow(2.0, 8.0 / H);
    double f = 1 - layer / (L - 1 + 1e-5) + 1e-5;
    float fb = (float)base, ff = (float)f;
    for (int h = 0; h < H; h++) slope[h] = powf(fb, (float)(h + 1)) * ff;
  }
}

static float to_f32(const void *p, lh_dtype dt, int64_t i) {
  const uint8_t *b = p;
  if (dt == LH_F32) {
    float f;
    memcpy(&f, b + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, b + 2 * i, 2);
  return dt == LH_BF16 ? lh_bf16_to_f32(h) : lh_f16_to_f32(h);
}

static double dtype_tol(lh_dtype dt) { return dt == LH_F32 ? 1e-5 : dt == LH_BF16 ? 1.0 / 128 : 1.0 / 1024; }

/* A decay table transformers saved (k: 0 query_decay [H, B, 1], 1 key_decay [H, B, 1], 2
 * diagonal_decay [1, H, B, B]), made at its own block length B, which need not be the config's:
 * the tables are derived data, and longhaul computes every decay from the slopes at its own block
 * length, so the table is only checked against the slopes at B, element by element:
 *     query_decay[h, j] = exp(-s_h (j + 1)),  key_decay[h, j] = exp(-s_h (B - j - 1)),
 *     diagonal_decay[h, i, j] = exp(-s_h (i - j)) for i >= j, 0 above the diagonal.
 * A mismatch is a warning (transformers would compute with the table inside each block), not an
 * error; a shape of another form is an error. */
static lh_status decay_table(wctx *c, lh_st_tensor *t, int k, int H, const float *slope) {
  int diag = k == 2;
  int64_t B = diag ? (t->ndim == 4 ? t->shape[2] : 0) : (t->ndim == 3 ? t->shape[1] : 0);
  int64_t want[4] = {diag ? 1 : H, diag ? H : B, diag ? B : 1, B};
  if (B < 1 || B > (1 << 16)) {
    char got[128];
    fmt_dims(got, sizeof got, t->shape, t->ndim);
    return lh_error_set(c->err, LH_EFORMAT,
                        "%s: tensor '%s' has shape %s but a decay table must be %s with this config's %d heads and "
                        "any block length B (1 to 65536)",
                        file_of(c, t), t->name, got, diag ? "[1, H, B, B]" : "[H, B, 1]", H);
  }
  lh_tensor v = {0};
  lh_status st = view(c, t, diag ? 4 : 3, want, &v);
  if (st) return st;
  double *e = malloc(sizeof *e * (size_t)(B + 1)), tol = 2 * dtype_tol(v.dtype);
  if (!e) return lh_error_set(c->err, LH_ENOMEM, "out of memory checking tensor '%s'", t->name);
  int64_t bad = -1, n = diag ? B * B : B;
  double bad_got = 0, bad_want = 0;
  for (int h = 0; h < H && bad < 0; h++) {
    for (int64_t d = 0; d <= B; d++) e[d] = exp(-(double)slope[h] * (double)d);
    for (int64_t x = 0; x < n && bad < 0; x++) {
      int64_t i = diag ? x / B : x, j = diag ? x % B : 0;
      double w = !diag ? e[k == 0 ? i + 1 : B - i - 1] : i >= j ? e[i - j] : 0;
      double g = to_f32(v.data, v.dtype, (int64_t)h * n + x);
      if (!(fabs(g - w) <= tol * (w > 1e-30 ? w : 1e-30) + 1e-30)) bad = (int64_t)h * n + x, bad_got = g, bad_want = w;
    }
  }
  free(e);
  if (bad >= 0)
    lh_log_warn("%s: tensor '%s' does not match the slopes at its block length %lld (element %lld is %.9g, the "
                "slopes give %.9g); transformers uses the stored table inside each lightning block, longhaul "
                "computes the decays from the slopes, so results will differ from transformers on this checkpoint",
                file_of(c, t), t->name, (long long)B, (long long)bad, bad_got, bad_want);
  else if (v.dtype != LH_F32 && !c->warned_lowprec_decay) {
    c->warned_lowprec_decay = 1;
    lh_log_warn("%s: the lightning decay tables (e.g. '%s') are stored in %s; transformers uses these rounded "
                "tables inside each block while longhaul computes exact fp32 decays, so expect differences of "
                "the order of %s rounding against transformers on this checkpoint",
                file_of(c, t), t->name, lh_dtype_name(v.dtype), lh_dtype_name(v.dtype));
  }
  if (B != c->m->cfg.block_size)
    lh_log_debug("%s: tensor '%s' was made with block length %lld; longhaul computes the decays from the slopes "
                 "at block_size %d", file_of(c, t), t->name, (long long)B, c->m->cfg.block_size);
  return LH_OK;
}

static lh_status lightning_buffers(wctx *c, int layer, const char *p, lh_layer_weights *lw) {
  const lh_config *cfg = &c->m->cfg;
  int H = cfg->n_heads;
  char name[512];
  lh_lightning_slopes(cfg, layer, lw->slope);
  snprintf(name, sizeof name, "%sself_attn.slope_rate", p);
  lh_st_tensor *t = find(c, name);
  lh_tensor v = {0};
  lh_status st;
  if (t) {
    int64_t want[3] = {H, 1, 1};
    if ((st = view(c, t, 3, want, &v))) return st;
    double worst = 0;
    for (int h = 0; h < H; h++) {
      float s = to_f32(v.data, v.dtype, h);
      if (!isfinite(s) || s < 0)
        return lh_error_set(c->err, LH_EFORMAT, "%s: tensor '%s' holds a negative or non-finite decay rate",
                            file_of(c, t), name);
      double rel = fabs((double)s - lw->slope[h]) / (lw->slope[h] > 0 ? lw->slope[h] : 1);
      if (rel > worst) worst = rel;
      lw->slope[h] = s;
    }
    if (worst > dtype_tol(v.dtype))
      lh_log_warn("%s: tensor '%s' differs from the slopes this config implies (largest relative difference %.3g); "
                  "using the stored values, as transformers does",
                  file_of(c, t), name, worst);
  }
  static const char *const tables[3] = {"query_decay", "key_decay", "diagonal_decay"};
  for (int k = 0; k < 3; k++) {
    snprintf(name, sizeof name, "%sself_attn.%s", p, tables[k]);
    t = find(c, name);
    if (!t) continue;
    if ((st = decay_table(c, t, k, H, lw->slope))) return st;
  }
  return LH_OK;
}

/* A softmax layer's learned per-head scales of the length-aware query scaling (docs/design.md).
 * With attn_length_scale_base set the tensor must be there, [H], finite. Without it the tensor is
 * refused rather than ignored: it was learned with the scaling on, and the model without it is
 * another function, which no one should get by accident. */
static lh_status length_scale(wctx *c, int layer, const char *p, lh_layer_weights *lw) {
  const lh_config *cfg = &c->m->cfg;
  char name[512];
  snprintf(name, sizeof name, "%sself_attn.length_scale", p);
  lh_st_tensor *t = find(c, name);
  if (!cfg->attn_length_scale_base) {
    if (!t) return LH_OK;
    return lh_error_set(c->err, LH_EFORMAT,
                        "%s: tensor '%s' is a learned scale of the length-aware query scaling, but config.json "
                        "does not set attn_length_scale_base: set it to the base the model was trained with, or "
                        "remove the tensor if the model was trained without the scaling",
                        file_of(c, t), name);
  }
  if (!t) {
    char hint[256];
    snprintf(hint, sizeof hint, "config.json sets attn_length_scale_base (%d), so softmax layer %d needs its "
             "per-head scales [%d]", cfg->attn_length_scale_base, layer, cfg->n_heads);
    return missing(c, name, hint);
  }
  int64_t want[3] = {cfg->n_heads, 0, 0};
  lh_tensor v = {0};
  lh_status st = view(c, t, 1, want, &v);
  if (st) return st;
  for (int h = 0; h < cfg->n_heads; h++) {
    float s = to_f32(v.data, v.dtype, h);
    if (!isfinite(s))
      return lh_error_set(c->err, LH_EFORMAT, "%s: tensor '%s' holds a non-finite value at head %d", file_of(c, t),
                          name, h);
    lw->length_scale[h] = s;
  }
  return LH_OK;
}

/* ---- MoE ----------------------------------------------------------------------------------- */

#define SLICE_NAME_MAX 600

static const char *slice_name(wctx *c, const char *fused, int e, const char *what) {
  char buf[SLICE_NAME_MAX];
  int n = snprintf(buf, sizeof buf, "%s[%d].%s", fused, e, what);
  if (n < 0 || (size_t)n >= sizeof buf) return fused;
  if (c->slice_len + (size_t)n + 1 > c->slice_cap) return fused; /* arena sized up front; never expected */
  char *dst = c->slice_names + c->slice_len;
  memcpy(dst, buf, (size_t)n + 1);
  c->slice_len += (size_t)n + 1;
  return dst;
}

static int lower_bound(const lh_st_set *s, const char *prefix) {
  int lo = 0, hi = s->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (strcmp(s->t[mid].name, prefix) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Does any tensor start with prefix followed by a digit (per-expert names)? */
static int has_per_expert(const lh_st_set *s, const char *prefix) {
  size_t pl = strlen(prefix);
  for (int i = lower_bound(s, prefix); i < s->n && !strncmp(s->t[i].name, prefix, pl); i++)
    if (s->t[i].name[pl] >= '0' && s->t[i].name[pl] <= '9') return 1;
  return 0;
}

static lh_status moe(wctx *c, int layer, const char *p, lh_layer_weights *lw) {
  const lh_config *cfg = &c->m->cfg;
  int64_t E = cfg->n_experts, I = cfg->intermediate_size, Hd = cfg->hidden_size;
  static const char *const pre[2] = {"block_sparse_moe.", "mlp."};
  char name[512], other[512];
  lh_status st;

  /* router */
  lh_st_tensor *gate[2];
  for (int k = 0; k < 2; k++) {
    snprintf(name, sizeof name, "%s%sgate.weight", p, pre[k]);
    gate[k] = find(c, name);
  }
  if (gate[0] && gate[1])
    return lh_error_set(c->err, LH_EFORMAT, "layer %d has two routers, '%s' and '%s'", layer, gate[0]->name,
                        gate[1]->name);
  if (!gate[0] && !gate[1]) {
    snprintf(name, sizeof name, "%sblock_sparse_moe.gate.weight", p);
    snprintf(other, sizeof other, "nor %smlp.gate.weight (the MoE router)", p);
    return missing(c, name, other);
  }
  int64_t wg[3] = {E, Hd, 0};
  if ((st = view(c, gate[0] ? gate[0] : gate[1], 2, wg, &lw->router))) return st;

  /* experts: which scheme, under which prefix */
  lh_st_tensor *gu[2], *dp[2];
  int per[2];
  for (int k = 0; k < 2; k++) {
    snprintf(name, sizeof name, "%s%sexperts.gate_up_proj", p, pre[k]);
    gu[k] = find(c, name);
    snprintf(name, sizeof name, "%s%sexperts.down_proj", p, pre[k]);
    dp[k] = find(c, name);
    snprintf(name, sizeof name, "%s%sexperts.", p, pre[k]);
    per[k] = has_per_expert(c->s, name);
  }
  int fused = gu[0] || gu[1] || dp[0] || dp[1];
  int split = per[0] || per[1];
  if (fused && split)
    return lh_error_set(c->err, LH_EFORMAT,
                        "layer %d holds its experts twice: fused (experts.gate_up_proj / down_proj) and per expert "
                        "(experts.N.w1/w2/w3)",
                        layer);
  if ((gu[0] || dp[0]) && (gu[1] || dp[1]))
    return lh_error_set(c->err, LH_EFORMAT, "layer %d has fused experts under both block_sparse_moe. and mlp.", layer);
  if (per[0] && per[1])
    return lh_error_set(c->err, LH_EFORMAT, "layer %d has per-expert tensors under both block_sparse_moe. and mlp.",
                        layer);

  if (fused) {
    int k = (gu[0] || dp[0]) ? 0 : 1;
    lh_tensor vgu = {0}, vdp = {0};
    snprintf(name, sizeof name, "%s%sexperts.gate_up_proj", p, pre[k]);
    if ((st = need(c, name, 3, E, 2 * I, Hd, &vgu, NULL))) return st;
    snprintf(name, sizeof name, "%s%sexperts.down_proj", p, pre[k]);
    if ((st = need(c, name, 3, E, Hd, I, &vdp, NULL))) return st;
    size_t es = lh_dtype_size(vgu.dtype), es2 = lh_dtype_size(vdp.dtype);
    for (int64_t e = 0; e < E; e++) {
      const char *gbase = (const char *)vgu.data + (size_t)(e * 2 * I * Hd) * es;
      lh_tensor *w1 = &lw->w1[e], *w3 = &lw->w3[e], *w2 = &lw->w2[e];
      *w1 = (lh_tensor){.data = gbase, .dtype = vgu.dtype, .ndim = 2, .shape = {I, Hd}};
      *w3 = (lh_tensor){.data = gbase + (size_t)(I * Hd) * es, .dtype = vgu.dtype, .ndim = 2, .shape = {I, Hd}};
      *w2 = (lh_tensor){.data = (const char *)vdp.data + (size_t)(e * Hd * I) * es2, .dtype = vdp.dtype, .ndim = 2,
                        .shape = {Hd, I}};
      w1->name = slice_name(c, vgu.name, (int)e, "w1");
      w3->name = slice_name(c, vgu.name, (int)e, "w3");
      w2->name = slice_name(c, vdp.name, (int)e, "w2");
    }
    return LH_OK;
  }
  if (!split) {
    snprintf(name, sizeof name, "%sblock_sparse_moe.experts.0.w1.weight", p);
    snprintf(other, sizeof other, "layer %d has neither per-expert (experts.N.w1/w2/w3) nor fused "
             "(experts.gate_up_proj, experts.down_proj) expert weights", layer);
    return missing(c, name, other);
  }
  int k = per[0] ? 0 : 1;
  /* An expert beyond num_local_experts means the config and the checkpoint disagree. */
  snprintf(name, sizeof name, "%s%sexperts.", p, pre[k]);
  size_t pl = strlen(name);
  for (int i = lower_bound(c->s, name); i < c->s->n && !strncmp(c->s->t[i].name, name, pl); i++) {
    const char *q = c->s->t[i].name + pl;
    if (*q < '0' || *q > '9') continue;
    long e = strtol(q, NULL, 10);
    if (e >= E)
      return lh_error_set(c->err, LH_EFORMAT, "%s: tensor '%s' is expert %ld but num_local_experts is %lld",
                          file_of(c, &c->s->t[i]), c->s->t[i].name, e, (long long)E);
  }
  for (int64_t e = 0; e < E; e++) {
    snprintf(name, sizeof name, "%s%sexperts.%lld.w1.weight", p, pre[k], (long long)e);
    if ((st = need(c, name, 2, I, Hd, 0, &lw->w1[e], NULL))) return st;
    snprintf(name, sizeof name, "%s%sexperts.%lld.w3.weight", p, pre[k], (long long)e);
    if ((st = need(c, name, 2, I, Hd, 0, &lw->w3[e], NULL))) return st;
    snprintf(name, sizeof name, "%s%sexperts.%lld.w2.weight", p, pre[k], (long long)e);
    if ((st = need(c, name, 2, Hd, I, 0, &lw->w2[e], NULL))) return st;
  }
  return LH_OK;
}

/* ---- layers -------------------------------------------------------------------------------- */

static lh_status layer_weights(wctx *c, int l, lh_layer_weights *lw) {
  const lh_config *cfg = &c->m->cfg;
  int64_t Hd = cfg->hidden_size, HD = (int64_t)cfg->n_heads * cfg->head_dim,
          KD = (int64_t)cfg->n_kv_heads * cfg->head_dim;
  char p[64], name[512], hint[1024];
  snprintf(p, sizeof p, "model.layers.%d.", l);
  lh_status st;
  lw->kind = cfg->layer_kind[l];
  snprintf(name, sizeof name, "%sinput_layernorm.weight", p);
  if ((st = need(c, name, 1, Hd, 0, 0, &lw->in_norm, NULL))) return st;
  snprintf(name, sizeof name, "%spost_attention_layernorm.weight", p);
  if ((st = need(c, name, 1, Hd, 0, 0, &lw->post_norm, NULL))) return st;

  if (lw->kind == LH_LAYER_LIGHTNING) {
    snprintf(name, sizeof name, "%sself_attn.q_proj.weight", p);
    const char *h = NULL;
    if (find(c, name)) {
      snprintf(hint, sizeof hint, "layer %d is a lightning layer in the config but the checkpoint has softmax "
               "attention weights for it (%s)", l, name);
      h = hint;
    }
    snprintf(name, sizeof name, "%sself_attn.qkv_proj.weight", p);
    if ((st = need(c, name, 2, 3 * HD, Hd, 0, &lw->qkv, h))) return st;
    snprintf(name, sizeof name, "%sself_attn.output_gate.weight", p);
    if ((st = need(c, name, 2, HD, Hd, 0, &lw->out_gate, NULL))) return st;
    snprintf(name, sizeof name, "%sself_attn.out_proj.weight", p);
    if ((st = need(c, name, 2, Hd, HD, 0, &lw->out_proj, NULL))) return st;
    snprintf(name, sizeof name, "%sself_attn.norm.weight", p);
    if ((st = need(c, name, 1, HD, 0, 0, &lw->attn_norm, NULL))) return st;
    if ((st = lightning_buffers(c, l, p, lw))) return st;
  } else {
    snprintf(name, sizeof name, "%sself_attn.qkv_proj.weight", p);
    const char *h = NULL;
    if (find(c, name)) {
      snprintf(hint, sizeof hint, "layer %d is a softmax layer in the config but the checkpoint has lightning "
               "attention weights for it (%s)", l, name);
      h = hint;
    }
    snprintf(name, sizeof name, "%sself_attn.q_proj.weight", p);
    if ((st = need(c, name, 2, HD, Hd, 0, &lw->q_proj, h))) return st;
    snprintf(name, sizeof name, "%sself_attn.k_proj.weight", p);
    if ((st = need(c, name, 2, KD, Hd, 0, &lw->k_proj, NULL))) return st;
    snprintf(name, sizeof name, "%sself_attn.v_proj.weight", p);
    if ((st = need(c, name, 2, KD, Hd, 0, &lw->v_proj, NULL))) return st;
    snprintf(name, sizeof name, "%sself_attn.o_proj.weight", p);
    if ((st = need(c, name, 2, Hd, HD, 0, &lw->o_proj, NULL))) return st;
    if ((st = length_scale(c, l, p, lw))) return st;
  }
  return moe(c, l, p, lw);
}

lh_status lh_weights_build(lh_model *m, lh_st_set *s, lh_error *err) {
  const lh_config *cfg = &m->cfg;
  wctx c = {.m = m, .s = s, .err = err};
  lh_weights *w = &m->w;
  lh_status st;
  memset(w, 0, sizeof *w);
  for (int i = 0; i < s->n; i++) s->t[i].used = 0;
  int64_t L = cfg->n_layers, E = cfg->n_experts, V = cfg->vocab_size, Hd = cfg->hidden_size;

  w->layers = calloc((size_t)L, sizeof *w->layers);
  if (!w->layers || (st = own(&c, w->layers))) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_tensor *experts = calloc((size_t)(3 * L * E), sizeof *experts);
  if (!experts || (st = own(&c, experts))) return lh_error_set(err, LH_ENOMEM, "out of memory");
  /* Slice names: "<fused name>[e].wK" for at most 3 per expert per layer, each at most
   * SLICE_NAME_MAX bytes (slice_name keeps the fused name for longer ones), so a long name of an
   * unrelated tensor in the header cannot size this arena. */
  size_t longest = 0;
  for (int i = 0; i < s->n; i++) {
    size_t n = strlen(s->t[i].name);
    if (n > longest) longest = n;
  }
  if (longest + 32 > SLICE_NAME_MAX) longest = SLICE_NAME_MAX - 32;
  c.slice_cap = (size_t)(3 * L * E) * (longest + 32);
  c.slice_names = malloc(c.slice_cap ? c.slice_cap : 1);
  if (!c.slice_names || (st = own(&c, c.slice_names))) return lh_error_set(err, LH_ENOMEM, "out of memory");

  if ((st = need(&c, "model.embed_tokens.weight", 2, V, Hd, 0, &w->embed, NULL))) return st;
  if ((st = need(&c, "model.norm.weight", 1, Hd, 0, 0, &w->final_norm, NULL))) return st;
  lh_st_tensor *lm = find(&c, "lm_head.weight");
  if (cfg->tie_word_embeddings) {
    w->lm_head = w->embed;
    if (lm) {
      lm->used = 1;
      const lh_st_tensor *et = find(&c, "model.embed_tokens.weight");
      if (lm->nbytes != et->nbytes || lm->dtype != et->dtype || (lm->nbytes && memcmp(lm->data, et->data, lm->nbytes)))
        lh_log_warn("%s: tensor 'lm_head.weight' is ignored because tie_word_embeddings is true (transformers "
                    "ties it to model.embed_tokens.weight), and it differs from the embedding",
                    file_of(&c, lm));
    }
  } else if ((st = need(&c, "lm_head.weight", 2, V, Hd, 0, &w->lm_head,
                        "tie_word_embeddings is false, so the output projection must be stored"))) {
    return st;
  }

  for (int64_t l = 0; l < L; l++) {
    lh_layer_weights *lw = &w->layers[l];
    lw->w1 = experts + (3 * l + 0) * E;
    lw->w3 = experts + (3 * l + 1) * E;
    lw->w2 = experts + (3 * l + 2) * E;
    if ((st = layer_weights(&c, (int)l, lw))) return st;
  }

  int unknown = 0;
  for (int i = 0; i < s->n; i++) {
    if (s->t[i].used) continue;
    if (unknown++ < 8)
      lh_log_warn("%s: unknown tensor '%s' is ignored", file_of(&c, &s->t[i]), s->t[i].name);
  }
  if (unknown > 8) lh_log_warn("%d unknown tensors in all were ignored", unknown);
  return LH_OK;
}
