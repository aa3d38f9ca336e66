/* model.c — open a model folder: config, weights, identity, backend binding (see engine.h).
 *
 * lh_model_open runs, in order: read and parse config.json (engine/config.c) and check the token
 * ids of generation_config.json when there is one; map and validate the safetensors files
 * (engine/safetensors.c); build and shape-check the weight views (engine/weights.c); read every
 * byte of every file once for its digest and the finiteness scan (lh_st_digest, unless the
 * params' digest cache holds the file); compute the model id; hand the mappings to the model;
 * bind the backend (ops->open) unless the backend is "none". The cheap checks come before the
 * read of every byte, so a misnamed tensor is reported at once. Any failure undoes everything done
 * so far, so a failed open leaks nothing and leaves no half-built model.
 *
 * The model id. SHA-256 over: a version tag; the normalised configuration (every lh_config field
 * that changes the computed numbers, floats in hex; not model_type, token ids or the context
 * limit); then, for every logical weight in a fixed order (embedding, final norm, lm_head or
 * "tied", each layer's norms, attention projections, router and experts w1, w3, w2 in expert
 * order), its role, dtype, shape and byte length, followed by each lightning layer's slopes and,
 * when the config sets attn_length_scale_base (a line of its own in the config part, absent
 * otherwise, so the ids of models without it are what they were), each softmax layer's scales; then
 * the number of weight files and their digests (engine/safetensors.h: a tree of SHA-256 over the
 * file's every byte), sorted bytewise. So any change to any byte of any file (data, header or
 * padding) changes the id, while the folder, the shard file names and the order of the index do
 * not count. Sharding and the naming scheme (per-expert or fused) change the file bytes and so
 * the id: the same weights saved another way are another model for the checkpoints.
 *
 * The cost. Without a digest cache every open reads every byte: SHA-256 with SHA-NI and the
 * finiteness scan in one pass over each 64 KiB, leaves of 64 MiB spread over params.threads
 * threads. Measured here (AMD EPYC, 2 cores shared with other work, SHA-NI; a 4.3 GB BF16 file in
 * the page cache; bench/engine/bench_model_digest --make-gib 4 --threads 2): 1 thread 1.24 GB/s,
 * 2 threads 2.40 GB/s, where one SHA-256 stream (sha256sum's work) runs at 1.26 GB/s, so the scan
 * costs nothing visible and the leaves scale with cores. A 91 GB slice then takes 73 s on one core
 * and 38 s on two; MiniMax-Text-01 (about 900 GB) 12 minutes on one core, under a minute on 16
 * cores if the disk keeps up (else the disk's read rate sets the time). haul-tiny (15 MB, one
 * leaf) opens in 12 ms instead of 1.8 ms. A digest cache entry per file makes all of this free.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/internal.h"
#include "engine/safetensors.h"
#include "engine/weights.h"
#include "kernels/cpu/ops.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"

#define CONFIG_MAX_BYTES (16u << 20)

size_t lh_dtype_size(lh_dtype t) {
  switch (t) {
  case LH_F32: return 4;
  case LH_BF16: return 2;
  case LH_F16: return 2;
  default: return 0;
  }
}

const char *lh_dtype_name(lh_dtype t) {
  switch (t) {
  case LH_F32: return "F32";
  case LH_BF16: return "BF16";
  case LH_F16: return "F16";
  default: return "?";
  }
}

lh_model_params lh_model_default_params(void) {
  lh_model_params p = {.backend = "cpu", .threads = 0, .device = 0, .max_rows = 8192, .verbose = 0, .tp_ranks = 1,
                       .comm = lh_comm_world()};
  return p;
}

/* ---- identity ------------------------------------------------------------------------------ */

/* A weight's place in the id: role, dtype, shape and byte length (its bytes are in the file
 * digests). */
static void hash_tensor(lh_sha256 *h, const char *role, const lh_tensor *t) {
  size_t n = (size_t)lh_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  char line[256];
  int k = snprintf(line, sizeof line, "%s %s [%lld,%lld,%lld]/%d %zu\n", role, lh_dtype_name(t->dtype),
                   (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
                   (long long)(t->ndim > 2 ? t->shape[2] : 0), t->ndim, n);
  lh_sha256_update(h, line, (size_t)k);
}

static int digest_cmp(const void *a, const void *b) { return memcmp(a, b, 32); }

static lh_status model_id(lh_model *m, const lh_st_set *s, lh_error *err) {
  const lh_config *c = &m->cfg;
  lh_buf b = {0};
  lh_buf_printf(&b,
                "longhaul model id v2\nvocab=%d hidden=%d layers=%d heads=%d kv_heads=%d head_dim=%d inter=%d "
                "experts=%d top_k=%d block=%d rotary=%d theta=%a eps=%a tie=%d postnorm=%d attn_alpha=%a,%a "
                "attn_beta=%a,%a mlp=%a,%a kinds=",
                c->vocab_size, c->hidden_size, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
                c->intermediate_size, c->n_experts, c->top_k, c->block_size, c->rotary_dim, c->rope_theta,
                c->rms_norm_eps, c->tie_word_embeddings, c->postnorm, (double)c->attn_alpha[0],
                (double)c->attn_alpha[1], (double)c->attn_beta[0], (double)c->attn_beta[1], (double)c->mlp_alpha,
                (double)c->mlp_beta);
  for (int i = 0; i < c->n_layers; i++) lh_buf_append(&b, c->layer_kind[i] == LH_LAYER_LIGHTNING ? "L" : "S", 1);
  lh_buf_append(&b, "\n", 1);
  if (c->attn_length_scale_base) lh_buf_printf(&b, "length_scale_base=%d\n", c->attn_length_scale_base);
  if (c->rope_yarn_factor > 0) /* only when on: ids of plain-RoPE models are unchanged */
    lh_buf_printf(&b, "rope_yarn factor=%a original_max=%d beta=%a,%a truncate=%d attention_factor=%a\n",
                  c->rope_yarn_factor, c->rope_yarn_original_max, c->rope_yarn_beta_fast, c->rope_yarn_beta_slow,
                  c->rope_yarn_truncate, (double)c->rope_attention_factor);
  lh_sha256 h;
  lh_sha256_init(&h);
  lh_sha256_update(&h, b.data, b.len);
  lh_buf_free(&b);
  const lh_weights *w = &m->w;
  hash_tensor(&h, "embed", &w->embed);
  hash_tensor(&h, "final_norm", &w->final_norm);
  if (c->tie_word_embeddings)
    lh_sha256_update(&h, "lm_head tied\n", 13);
  else
    hash_tensor(&h, "lm_head", &w->lm_head);
  char role[64];
  for (int l = 0; l < c->n_layers; l++) {
    const lh_layer_weights *lw = &w->layers[l];
#define H(field)                                                  \
  do {                                                            \
    snprintf(role, sizeof role, "%d.%s", l, #field);              \
    hash_tensor(&h, role, &lw->field);                            \
  } while (0)
    H(in_norm);
    H(post_norm);
    if (lw->kind == LH_LAYER_LIGHTNING) {
      H(qkv);
      H(out_gate);
      H(out_proj);
      H(attn_norm);
      lh_sha256_update(&h, lw->slope, sizeof(float) * (size_t)c->n_heads);
    } else {
      H(q_proj);
      H(k_proj);
      H(v_proj);
      H(o_proj);
      if (c->attn_length_scale_base) lh_sha256_update(&h, lw->length_scale, sizeof(float) * (size_t)c->n_heads);
    }
    H(router);
#undef H
    for (int e = 0; e < c->n_experts; e++) {
      snprintf(role, sizeof role, "%d.w1.%d", l, e);
      hash_tensor(&h, role, &lw->w1[e]);
      snprintf(role, sizeof role, "%d.w3.%d", l, e);
      hash_tensor(&h, role, &lw->w3[e]);
      snprintf(role, sizeof role, "%d.w2.%d", l, e);
      hash_tensor(&h, role, &lw->w2[e]);
    }
  }
  uint8_t(*files)[32] = malloc((size_t)(s->n_maps ? s->n_maps : 1) * sizeof *files);
  if (!files) return lh_error_set(err, LH_ENOMEM, "out of memory computing the model id");
  for (int i = 0; i < s->n_maps; i++) memcpy(files[i], s->digest[i].sha256, 32);
  qsort(files, (size_t)s->n_maps, sizeof *files, digest_cmp);
  char line[64];
  int k = snprintf(line, sizeof line, "files %d\n", s->n_maps);
  lh_sha256_update(&h, line, (size_t)k);
  lh_sha256_update(&h, files, (size_t)s->n_maps * 32);
  free(files);
  uint8_t dig[32];
  lh_sha256_final(&h, dig);
  lh_hex(dig, 32, m->id);
  return LH_OK;
}

/* ---- open / close -------------------------------------------------------------------------- */

static int g_spread_open; /* rank 0: a model spread over the ranks is open (one at a time) */

void lh_model_close(lh_model *m) {
  if (!m) return;
  if (lh_rank_leads(m)) {
    lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_CLOSE}, NULL);
    g_spread_open = 0;
  }
  if (m->be && m->ops && m->ops->close) m->ops->close(m->be);
  for (int i = 0; i < m->n_maps; i++)
    if (m->maps[i].base) munmap(m->maps[i].base, m->maps[i].size);
  free(m->maps);
  for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
  free(m->owned);
  free(m);
}

static lh_status model_open(const char *dir, lh_model_params p, lh_model **out, lh_error *err);

/* "owner/name" with nothing else: how the Hub names a repository, and no local path. */
static int looks_like_repo_id(const char *s) {
  const char *slash = strchr(s, '/');
  if (!slash || slash == s || !slash[1] || strchr(slash + 1, '/') || s[0] == '.' || s[0] == '~') return 0;
  for (const char *c = s; *c; c++)
    if (!isalnum((unsigned char)*c) && !strchr("-_./", *c)) return 0;
  return 1;
}

lh_status lh_model_check(const char *dir, const char *backend, lh_error *err) {
  if (!dir || !*dir) return lh_error_set(err, LH_EINVAL, "no model folder given");
  struct stat sb;
  const int found = stat(dir, &sb) == 0, e = errno;
  if (!found && e == ENOENT && looks_like_repo_id(dir))
    return lh_error_set(err, LH_ENOTFOUND,
                        "%s: not a model folder (no such directory). It looks like a Hugging Face repo id, and "
                        "longhaul downloads nothing: fetch the folder first (huggingface-cli download %s --local-dir "
                        "DIR) and pass that DIR",
                        dir, dir);
  if (!found)
    return lh_error_set(err, LH_ENOTFOUND, "%s: not a model folder (%s)", dir,
                        e == ENOENT ? "no such directory" : strerror(e));
  if (!S_ISDIR(sb.st_mode))
    return lh_error_set(err, LH_EINVAL, "%s: not a model folder: it is %s, not a directory", dir,
                        lh_file_kind(sb.st_mode));
  return backend && !strcmp(backend, "none") ? LH_OK : lh_backend_check(backend ? backend : "cpu", err);
}

/* A model over several ranks (engine/ranks.c): rank 0 tells the others to open it too, each rank
 * opens its own, and all agree; without a backend ("none") there is nothing to spread. */
lh_status lh_model_open(const char *dir, const lh_model_params *params, lh_model **out, lh_error *err) {
  *out = NULL;
  lh_model_params p = params ? *params : lh_model_default_params();
  const char *bname = p.backend ? p.backend : "cpu";
  if (!p.comm || lh_comm_size(p.comm) < 2 || !strcmp(bname, "none")) {
    p.comm = NULL;
    return model_open(dir, p, out, err);
  }
  if (lh_comm_rank(p.comm) == 0) {
    lh_rank_open o = {.threads = p.threads, .device = p.device, .max_rows = p.max_rows, .verbose = p.verbose,
                      .tp_ranks = p.tp_ranks, .cpu_attention = p.cpu_attention};
    if (!dir || snprintf(o.dir, sizeof o.dir, "%s", dir) >= (int)sizeof o.dir ||
        snprintf(o.backend, sizeof o.backend, "%s", bname) >= (int)sizeof o.backend)
      return lh_error_set(err, LH_EINVAL, "model folder or backend name missing or too long");
    if (g_spread_open)
      return lh_error_set(err, LH_EBUSY, "a run over %d ranks opens one model at a time; close the other first",
                          lh_comm_size(p.comm));
    lh_rank_tell(p.comm, (lh_rank_cmd){.op = LH_RANK_OPEN, .bytes = sizeof o}, &o);
  }
  if (p.threads == 0) { /* the ranks on one host share its cores */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int local = lh_comm_local_size(p.comm);
    p.threads = cores > local ? (int)(cores / local) : 1;
  }
  lh_status st = lh_rank_agree(p.comm, model_open(dir, p, out, err), err);
  if (st && *out) {
    lh_model *m = *out;
    m->comm = NULL; /* every rank closes its own; nothing to tell */
    lh_model_close(m);
    *out = NULL;
  }
  if (!st && lh_comm_rank(p.comm) == 0) g_spread_open = 1;
  return st;
}

static lh_status model_open(const char *dir, lh_model_params p, lh_model **out, lh_error *err) {
  *out = NULL;
  if (!dir || !*dir) return lh_error_set(err, LH_EINVAL, "no model folder given");
  if (p.threads < 0) return lh_error_set(err, LH_EINVAL, "threads must be >= 0 (0 = all cores), got %d", p.threads);
  if (p.threads > LH_MAX_THREADS)
    return lh_error_set(err, LH_EINVAL, "threads %d: at most %d (this machine has %ld online cores; 0 uses them all)",
                        p.threads, LH_MAX_THREADS, sysconf(_SC_NPROCESSORS_ONLN));
  if (p.max_rows < 1) return lh_error_set(err, LH_EINVAL, "max_rows must be >= 1, got %d", p.max_rows);
  if (p.cpu_attention < LH_CPU_ATTN_FP32 || p.cpu_attention > LH_CPU_ATTN_AUTO)
    return lh_error_set(err, LH_EINVAL, "cpu_attention must be fp32, bf16 or auto (got %d)", p.cpu_attention);
  if (p.comm && p.tp_ranks > 1)
    return lh_error_set(err, LH_EINVAL, "tp_ranks %d in one process and %d processes at once: choose one",
                        p.tp_ranks, lh_comm_size(p.comm));
  const char *bname = p.backend ? p.backend : "cpu";

  lh_model *m = calloc(1, sizeof *m);
  if (!m) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_st_set *s = NULL;
  lh_status st;
  if (snprintf(m->dir, sizeof m->dir, "%s", dir) >= (int)sizeof m->dir) {
    st = lh_error_set(err, LH_ELIMIT, "model folder path too long");
    goto fail;
  }
  if (snprintf(m->backend_name, sizeof m->backend_name, "%s", bname) >= (int)sizeof m->backend_name) {
    st = lh_error_set(err, LH_EINVAL, "unknown backend '%s'", bname);
    goto fail;
  }
  m->params = p;
  m->params.backend = m->backend_name;
  m->max_rows = p.max_rows;

  if ((st = lh_model_check(dir, bname, err))) goto fail;
  char cpath[4096];
  if ((st = lh_path_join(cpath, sizeof cpath, dir, "config.json"))) {
    st = lh_error_set(err, st, "%s: path too long", dir);
    goto fail;
  }
  lh_buf cb = {0};
  if ((st = lh_file_read_regular(cpath, CONFIG_MAX_BYTES, &cb, err))) {
    lh_buf_free(&cb);
    goto fail;
  }
  st = lh_config_parse(cb.data, cb.len, cpath, &m->cfg, err);
  lh_buf_free(&cb);
  if (st) goto fail;
  if ((st = lh_path_join(cpath, sizeof cpath, dir, "generation_config.json"))) {
    st = lh_error_set(err, st, "%s: path too long", dir);
    goto fail;
  }
  {
    lh_error gerr = {0};
    st = lh_file_read_regular(cpath, CONFIG_MAX_BYTES, &cb, &gerr);
    if (!st) st = lh_generation_config_check(cb.data, cb.len, cpath, &m->cfg, &gerr);
    lh_buf_free(&cb);
    if (st == LH_ENOTFOUND) st = LH_OK; /* generation_config.json is optional */
    if (st) {
      if (err) *err = gerr;
      goto fail;
    }
  }

  if ((st = lh_st_open_dir(dir, &s, err))) goto fail;
  if ((st = lh_weights_build(m, s, err))) goto fail;
  if ((st = lh_st_digest(s, p.threads, LH_ST_DIGEST_LEAF, p.digest_cache, p.stop, err))) goto fail;
  if ((st = model_id(m, s, err))) goto fail;
  if ((st = lh_st_move_to_model(s, m, err))) goto fail;
  s = NULL;
  if (p.verbose)
    lh_log_info("%s: %d layers (%d lightning, %d softmax), %d files, id %.16s", dir, m->cfg.n_layers,
                m->cfg.n_lightning, m->cfg.n_softmax, m->n_maps, m->id);

  if (strcmp(bname, "none")) {
    m->ops = lh_backend_find(bname);
    snprintf(m->backend_name, sizeof m->backend_name, "%s", m->ops->name); /* "gpu" is "cuda" */
    if (!m->ops->open) {
      m->ops = NULL;
      st = lh_error_set(err, LH_EUNSUPPORTED, "backend '%s' is not implemented in this build yet", bname);
      goto fail;
    }
    /* the CPU backend's attention products: AUTO resolved here, so lh_model_cpu_attention tells;
     * bf16 runs on AMX tiles or else AVX512-BF16 (kernels/cpu/attention_bf16.c picks) */
    int bf16_fits = lh_attn_bf16_kind(m->cfg.head_dim) != LH_ATTN_BF16_NONE;
    if (strcmp(bname, "cpu")) m->params.cpu_attention = LH_CPU_ATTN_FP32;
    else if (m->params.cpu_attention == LH_CPU_ATTN_AUTO)
      m->params.cpu_attention = bf16_fits ? LH_CPU_ATTN_BF16 : LH_CPU_ATTN_FP32;
    else if (m->params.cpu_attention == LH_CPU_ATTN_BF16 && !bf16_fits) {
      st = lh_error_set(err, LH_EUNSUPPORTED,
                        lh_attn_bf16_kind(32) == LH_ATTN_BF16_NONE
                            ? "cpu attention bf16 needs a CPU with AMX-BF16 (and a kernel that grants the tile state) "
                              "or AVX512-BF16; this one has neither: use fp32 or auto"
                            : "cpu attention bf16 needs head_dim a multiple of 32 up to 256 (this model's is %d): use "
                              "fp32 or auto",
                        m->cfg.head_dim);
      goto fail;
    }
    if ((st = m->ops->open(&m->cfg, &m->w, &m->params, m->max_rows, &m->be, err))) {
      m->be = NULL;
      goto fail;
    }
  }
  m->comm = p.comm; /* only now: closing a half-open model tells no one */
  *out = m;
  return LH_OK;
fail:
  lh_st_close(s);
  lh_model_close(m);
  return st;
}

const lh_config *lh_model_config(const lh_model *m) { return &m->cfg; }
const char *lh_model_dir(const lh_model *m) { return m->dir; }
const char *lh_model_backend(const lh_model *m) { return m->backend_name; }
int lh_model_cpu_attention(const lh_model *m) { return m->params.cpu_attention; }

const char *lh_model_cpu_attention_unit(const lh_model *m) {
  return lh_attn_bf16_unit(m->params.cpu_attention == LH_CPU_ATTN_BF16 ? lh_attn_bf16_kind(m->cfg.head_dim)
                                                                        : LH_ATTN_BF16_NONE);
}

int lh_cpu_attention_parse(const char *s) {
  if (!s) return -1;
  if (!strcmp(s, "fp32")) return LH_CPU_ATTN_FP32;
  if (!strcmp(s, "bf16")) return LH_CPU_ATTN_BF16;
  if (!strcmp(s, "auto")) return LH_CPU_ATTN_AUTO;
  return -1;
}

const char *lh_cpu_attention_name(int mode) {
  return mode == LH_CPU_ATTN_BF16 ? "bf16" : mode == LH_CPU_ATTN_AUTO ? "auto" : mode == LH_CPU_ATTN_FP32 ? "fp32" : "?";
}
const char *lh_model_id(const lh_model *m) { return m->id; }

void lh_model_get_stats(const lh_model *m, lh_model_stats *st) {
  const lh_config *c = &m->cfg;
  int64_t V = c->vocab_size, Hd = c->hidden_size, HD = (int64_t)c->n_heads * c->head_dim,
          KD = (int64_t)c->n_kv_heads * c->head_dim, I = c->intermediate_size, E = c->n_experts, K = c->top_k;
  int64_t lin_attn = 5 * HD * Hd, soft_attn = 2 * HD * Hd + 2 * KD * Hd, router = E * Hd, expert = 3 * I * Hd;
  int64_t head = c->tie_word_embeddings ? 0 : V * Hd;
  int64_t total = V * Hd + head + Hd, active = total, matmul = V * Hd; /* lm_head (or the tied embedding) */
  for (int l = 0; l < c->n_layers; l++) {
    int lin = c->layer_kind[l] == LH_LAYER_LIGHTNING;
    int64_t attn = lin ? lin_attn : soft_attn;
    int64_t norms = 2 * Hd + (lin ? HD : 0);
    total += norms + attn + router + E * expert;
    active += norms + attn + router + K * expert;
    matmul += attn + router + K * expert;
  }
  memset(st, 0, sizeof *st);
  st->params_total = total;
  st->params_active = active;
  for (int i = 0; i < m->n_maps; i++) st->weight_bytes += (int64_t)m->maps[i].size;
  st->lightning_state_bytes = (int64_t)c->n_lightning * c->n_heads * c->head_dim * c->head_dim * 4;
  lh_dtype kv = m->ops ? m->ops->kv_dtype : LH_F32;
  st->kv_bytes_per_token = (int64_t)c->n_softmax * 2 * KD * (int64_t)lh_dtype_size(kv);
  st->flops_per_token = 2.0 * (double)matmul;
  st->attn_flops_per_token_per_ctx = 4.0 * (double)c->n_softmax * (double)HD;
}
