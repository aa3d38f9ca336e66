/* tw.h — helpers for the loader tests: write safetensors files (well-formed or crafted), small
 * text files, a tiny random MiniMax model in either naming scheme, and capture lh_log warnings.
 * Header-only; each test program includes it once. */
#ifndef LH_TESTS_ENGINE_LOAD_TW_H
#define LH_TESTS_ENGINE_LOAD_TW_H

#include "tests/test.h"

#include <stdint.h>
#include <sys/stat.h>

#include "util/half.h"
#include "util/log.h"

/* ---- log capture --------------------------------------------------------------------------- */

static char tw_log[65536];
static size_t tw_log_len;

static void tw_sink(lh_log_level level, const char *msg, void *user) {
  (void)user;
  if (level < LH_LOG_WARN) return;
  size_t n = strlen(msg);
  if (tw_log_len + n + 2 < sizeof tw_log) {
    memcpy(tw_log + tw_log_len, msg, n);
    tw_log_len += n;
    tw_log[tw_log_len++] = '\n';
    tw_log[tw_log_len] = 0;
  }
}

static inline void tw_log_begin(void) {
  tw_log_len = 0;
  tw_log[0] = 0;
  lh_log_set_level(LH_LOG_WARN);
  lh_log_set_sink(tw_sink, NULL);
}

/* ---- files --------------------------------------------------------------------------------- */

static inline void tw_write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f)) {
    perror(path);
    exit(1);
  }
}

static inline void tw_write_text(const char *path, const char *s) { tw_write_file(path, s, strlen(s)); }

static inline char *tw_path(const char *dir, const char *name) {
  static char bufs[8][4096];
  static int k;
  char *b = bufs[k++ % 8], tmp[4096]; /* dir may be an earlier result: build apart, then copy */
  snprintf(tmp, sizeof tmp, "%s/%s", dir, name);
  memcpy(b, tmp, sizeof tmp);
  return b;
}

static inline const char *tw_mkdir(const char *name) {
  char *p = tw_path(lh_test_tmpdir(), name);
  mkdir(p, 0755);
  return p;
}

/* A safetensors file from a raw header string and data bytes (header written as given). */
static inline void tw_write_raw(const char *path, const char *header, const void *data, size_t n) {
  size_t hl = strlen(header);
  uint8_t *buf = malloc(8 + hl + n + 1);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  if (n) memcpy(buf + 8 + hl, data, n);
  tw_write_file(path, buf, 8 + hl + n);
  free(buf);
}

typedef struct tw_tensor {
  char name[160];
  const char *dtype; /* "F32", "BF16", "F16" */
  int ndim;
  int64_t shape[4];
  float *values;     /* element values in f32 (converted to dtype when written) */
  int64_t n;
} tw_tensor;

static inline size_t tw_esize(const char *dt) { return strcmp(dt, "F32") ? 2 : 4; }

/* Write tensors in the given order; the header is padded with spaces to a multiple of 8 bytes as
 * the reference writer does. */
static inline void tw_write_st(const char *path, tw_tensor *const *t, int n) {
  size_t cap = 4096 + (size_t)n * 256, hl = 0;
  char *h = malloc(cap);
  uint64_t off = 0;
  hl += (size_t)snprintf(h + hl, cap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
  for (int i = 0; i < n; i++) {
    uint64_t nb = (uint64_t)t[i]->n * tw_esize(t[i]->dtype);
    hl += (size_t)snprintf(h + hl, cap - hl, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i]->name, t[i]->dtype);
    for (int d = 0; d < t[i]->ndim; d++) hl += (size_t)snprintf(h + hl, cap - hl, "%s%lld", d ? "," : "", (long long)t[i]->shape[d]);
    hl += (size_t)snprintf(h + hl, cap - hl, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                           (unsigned long long)(off + nb));
    off += nb;
  }
  hl += (size_t)snprintf(h + hl, cap - hl, "}");
  while (hl % 8) h[hl++] = ' ';
  h[hl] = 0;
  uint8_t *data = malloc(off + 1);
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    for (int64_t j = 0; j < t[i]->n; j++) {
      float v = t[i]->values[j];
      if (!strcmp(t[i]->dtype, "F32")) {
        memcpy(data + at, &v, 4);
        at += 4;
      } else {
        uint16_t b = !strcmp(t[i]->dtype, "BF16") ? lh_f32_to_bf16(v) : lh_f32_to_f16(v);
        memcpy(data + at, &b, 2);
        at += 2;
      }
    }
  }
  tw_write_raw(path, h, data, off);
  free(h);
  free(data);
}

/* ---- a tiny random model ------------------------------------------------------------------- */

typedef struct tw_model {
  int vocab, hidden, layers, heads, kv, head_dim, inter, experts, top_k, block, tie;
  int kind[8];        /* 0 lightning, 1 softmax */
  const char *dtype;
  tw_tensor *t;       /* canonical (per-expert) tensors */
  int n;
} tw_model;

static inline uint32_t tw_rand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

static inline tw_tensor *tw_add(tw_model *m, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                                uint64_t *rng) {
  tw_tensor *t = &m->t[m->n++];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->dtype = m->dtype;
  t->ndim = ndim;
  t->shape[0] = d0, t->shape[1] = d1, t->shape[2] = d2;
  t->n = d0 * (ndim > 1 ? d1 : 1) * (ndim > 2 ? d2 : 1);
  t->values = malloc(sizeof(float) * (size_t)t->n);
  for (int64_t i = 0; i < t->n; i++) {
    float v = ((float)(tw_rand(rng) % 2001) - 1000.0f) / 1000.0f;
    /* exactly representable in bf16/f16 so every dtype stores the same value */
    t->values[i] = lh_bf16_to_f32(lh_f32_to_bf16(v));
  }
  return t;
}

/* Standard small config: layers L S (lightning, softmax) unless kinds are set. */
static inline void tw_model_init(tw_model *m, uint64_t seed) {
  uint64_t rng = seed;
  if (!m->vocab) {
    m->vocab = 16, m->hidden = 8, m->layers = 2, m->heads = 2, m->kv = 1, m->head_dim = 4, m->inter = 4;
    m->experts = 3, m->top_k = 2, m->block = 4;
    m->kind[0] = 0, m->kind[1] = 1;
  }
  if (!m->dtype) m->dtype = "F32";
  m->t = calloc(1024, sizeof *m->t);
  char nm[160];
  int HD = m->heads * m->head_dim, KD = m->kv * m->head_dim;
  tw_add(m, "model.embed_tokens.weight", 2, m->vocab, m->hidden, 0, &rng);
  tw_add(m, "model.norm.weight", 1, m->hidden, 0, 0, &rng);
  if (!m->tie) tw_add(m, "lm_head.weight", 2, m->vocab, m->hidden, 0, &rng);
  for (int l = 0; l < m->layers; l++) {
#define NM(fmt, ...) (snprintf(nm, sizeof nm, "model.layers.%d." fmt, l, ##__VA_ARGS__), nm)
    tw_add(m, NM("input_layernorm.weight"), 1, m->hidden, 0, 0, &rng);
    tw_add(m, NM("post_attention_layernorm.weight"), 1, m->hidden, 0, 0, &rng);
    if (m->kind[l] == 0) {
      tw_add(m, NM("self_attn.qkv_proj.weight"), 2, 3 * HD, m->hidden, 0, &rng);
      tw_add(m, NM("self_attn.output_gate.weight"), 2, HD, m->hidden, 0, &rng);
      tw_add(m, NM("self_attn.out_proj.weight"), 2, m->hidden, HD, 0, &rng);
      tw_add(m, NM("self_attn.norm.weight"), 1, HD, 0, 0, &rng);
    } else {
      tw_add(m, NM("self_attn.q_proj.weight"), 2, HD, m->hidden, 0, &rng);
      tw_add(m, NM("self_attn.k_proj.weight"), 2, KD, m->hidden, 0, &rng);
      tw_add(m, NM("self_attn.v_proj.weight"), 2, KD, m->hidden, 0, &rng);
      tw_add(m, NM("self_attn.o_proj.weight"), 2, m->hidden, HD, 0, &rng);
    }
    tw_add(m, NM("block_sparse_moe.gate.weight"), 2, m->experts, m->hidden, 0, &rng);
    for (int e = 0; e < m->experts; e++) {
      tw_add(m, NM("block_sparse_moe.experts.%d.w1.weight", e), 2, m->inter, m->hidden, 0, &rng);
      tw_add(m, NM("block_sparse_moe.experts.%d.w2.weight", e), 2, m->hidden, m->inter, 0, &rng);
      tw_add(m, NM("block_sparse_moe.experts.%d.w3.weight", e), 2, m->inter, m->hidden, 0, &rng);
    }
#undef NM
  }
}

static inline void tw_model_free(tw_model *m) {
  for (int i = 0; i < m->n; i++) free(m->t[i].values);
  free(m->t);
}

static inline tw_tensor *tw_find(tw_model *m, const char *name) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->t[i].name, name)) return &m->t[i];
  return NULL;
}

/* HF-form config.json for m; extra is spliced in verbatim (",\"key\": value" or ""). */
static inline void tw_write_config(const tw_model *m, const char *dir, const char *extra) {
  char buf[4096], lt[512] = "";
  size_t k = 0;
  for (int l = 0; l < m->layers; l++)
    k += (size_t)snprintf(lt + k, sizeof lt - k, "%s\"%s\"", l ? "," : "",
                          m->kind[l] ? "full_attention" : "linear_attention");
  snprintf(buf, sizeof buf,
           "{\"model_type\":\"minimax\",\"vocab_size\":%d,\"hidden_size\":%d,\"num_hidden_layers\":%d,"
           "\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"head_dim\":%d,\"intermediate_size\":%d,"
           "\"num_local_experts\":%d,\"num_experts_per_tok\":%d,\"block_size\":%d,\"tie_word_embeddings\":%s,"
           "\"layer_types\":[%s],\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}%s}",
           m->vocab, m->hidden, m->layers, m->heads, m->kv, m->head_dim, m->inter, m->experts, m->top_k, m->block,
           m->tie ? "true" : "false", lt, extra ? extra : "");
  tw_write_text(tw_path(dir, "config.json"), buf);
}

/* Write m's tensors into dir: scheme 0 = per-expert block_sparse_moe names, 1 = fused mlp.experts
 * gate_up_proj/down_proj + mlp.gate, 2 = per-expert under mlp.; shards > 1 writes an index. */
static inline void tw_write_model(tw_model *m, const char *dir, int scheme, int shards) {
  tw_tensor **list = calloc((size_t)m->n + 64, sizeof *list);
  tw_tensor *fused = calloc((size_t)m->layers * 2, sizeof *fused);
  int n = 0;
  for (int i = 0; i < m->n; i++) {
    tw_tensor *t = &m->t[i];
    if (scheme == 1 && strstr(t->name, ".experts.")) continue;
    list[n++] = t;
  }
  /* renames and fused tensors */
  tw_tensor *renamed = calloc((size_t)m->n, sizeof *renamed);
  for (int i = 0; i < n; i++) {
    char *p = strstr(list[i]->name, "block_sparse_moe.");
    if (scheme != 0 && p) {
      renamed[i] = *list[i];
      snprintf(renamed[i].name, sizeof renamed[i].name, "%.*smlp.%s", (int)(p - list[i]->name), list[i]->name,
               p + strlen("block_sparse_moe."));
      list[i] = &renamed[i];
    }
  }
  if (scheme == 1) {
    for (int l = 0; l < m->layers; l++) {
      tw_tensor *gu = &fused[2 * l], *dp = &fused[2 * l + 1];
      snprintf(gu->name, sizeof gu->name, "model.layers.%d.mlp.experts.gate_up_proj", l);
      snprintf(dp->name, sizeof dp->name, "model.layers.%d.mlp.experts.down_proj", l);
      gu->dtype = dp->dtype = m->dtype;
      gu->ndim = dp->ndim = 3;
      gu->shape[0] = dp->shape[0] = m->experts;
      gu->shape[1] = 2 * m->inter, gu->shape[2] = m->hidden;
      dp->shape[1] = m->hidden, dp->shape[2] = m->inter;
      gu->n = (int64_t)m->experts * 2 * m->inter * m->hidden;
      dp->n = (int64_t)m->experts * m->hidden * m->inter;
      gu->values = malloc(sizeof(float) * (size_t)gu->n);
      dp->values = malloc(sizeof(float) * (size_t)dp->n);
      int64_t IH = (int64_t)m->inter * m->hidden;
      for (int e = 0; e < m->experts; e++) {
        char nm[160];
        snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, e);
        memcpy(gu->values + (2 * e) * IH, tw_find(m, nm)->values, sizeof(float) * (size_t)IH);
        snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", l, e);
        memcpy(gu->values + (2 * e + 1) * IH, tw_find(m, nm)->values, sizeof(float) * (size_t)IH);
        snprintf(nm, sizeof nm, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, e);
        memcpy(dp->values + e * IH, tw_find(m, nm)->values, sizeof(float) * (size_t)IH);
      }
      list[n++] = gu;
      list[n++] = dp;
    }
  }
  if (shards <= 1) {
    tw_write_st(tw_path(dir, "model.safetensors"), list, n);
  } else {
    char *idx = malloc(65536);
    size_t k = (size_t)snprintf(idx, 65536, "{\"metadata\":{},\"weight_map\":{");
    for (int s = 0; s < shards; s++) {
      int a = n * s / shards, b = n * (s + 1) / shards;
      char fname[64];
      snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, shards);
      tw_write_st(tw_path(dir, fname), list + a, b - a);
      for (int i = a; i < b; i++)
        k += (size_t)snprintf(idx + k, 65536 - k, "%s\"%s\":\"%s\"", i ? "," : "", list[i]->name, fname);
    }
    snprintf(idx + k, 65536 - k, "}}");
    tw_write_text(tw_path(dir, "model.safetensors.index.json"), idx);
    free(idx);
  }
  if (scheme == 1)
    for (int l = 0; l < 2 * m->layers; l++) free(fused[l].values);
  free(fused);
  free(renamed);
  free(list);
}

#endif
