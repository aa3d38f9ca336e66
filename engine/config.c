/* config.c — parse a model folder's config.json into the normalised lh_config (both forms).
 *
 * Two dialects describe the same MiniMax-01 architecture. The HF form (`model_type: minimax`) is
 * read exactly as transformers 5.17's MiniMaxConfig reads it, defaults included; the original
 * release form (`model_type: minimax_text_01`, the remote code of MiniMaxAI/MiniMax-Text-01) is
 * read as that code and vLLM's minimax_text_01.py read it. The key mapping:
 *
 *   lh_config field        HF `minimax` key (default)                 original `minimax_text_01` key (default)
 *   --------------------   ----------------------------------------   ----------------------------------------
 *   layer_kind[i]          layer_types[i]: "linear_attention" |       attn_type_list[i]: 0 = lightning,
 *                          "full_attention" (absent: layer i is       1 = softmax (required; vLLM's alias
 *                          full when i is even, HF's default)         decoder_attention_types accepted)
 *   attn_alpha/beta[SOFT]  full_attn_alpha_factor/_beta_factor (1)    layernorm_full_attention_alpha/_beta (1)
 *   attn_alpha/beta[LIN]   linear_attn_alpha_factor/_beta_factor (1)  layernorm_linear_attention_alpha/_beta (1)
 *   mlp_alpha/beta         mlp_alpha_factor/_beta_factor (1)          layernorm_mlp_alpha/_beta (1)
 *   rope_theta             rope_parameters.rope_theta, else legacy    rope_theta (required when any layer is
 *                          top-level rope_theta (1e6)                 softmax)
 *   rotary_dim             always head_dim: transformers 5.17 ignores rotary_dim (head_dim); RoPE on the first
 *                          partial_rotary_factor for MiniMax (warned) rotary_dim dims of each head
 *   postnorm               always 1 (HF's only layout)                postnorm: must be true (the remote
 *                                                                     code's default false is not implemented)
 *   block_size             block_size (256)                           block_size (256: the remote code's BLOCK)
 *   attn_length_scale_base refused unless absent, null or 0         attn_length_scale_base (0: off): longhaul's
 *                          (transformers has no such scaling)         extension, L0 of the length-aware query
 *                                                                     scaling (docs/design.md); > 0 needs
 *                                                                     self_attn.length_scale in softmax layers
 *   head_dim               head_dim; null or absent: hidden_size / num_attention_heads (both forms)
 *   n_kv_heads             num_key_value_heads (8, HF's dataclass default; null: num_attention_heads) (both)
 *   n_experts / top_k      num_local_experts (alias num_experts) / num_experts_per_tok (both, required)
 *   rope_yarn_*            rope_parameters (or a truthy legacy        rope_scaling (null: none), same keys
 *                          rope_scaling) with rope_type "yarn":
 *                          factor, original_max_position_embeddings,
 *                          beta_fast/slow, truncate, attention_factor
 *                          (parse_rope_type); not with partial_rotary_factor
 *   (rejected)             sliding_window non-null; rope_type other   shared_intermediate_size non-zero (int or
 *                          than "default" or "yarn"; hidden_act not   per-layer list); postnorm false; plus the
 *                          silu; quantization_config                  HF-form rejections
 *
 * Keys of the other form are ignored by the code that defines each form, so they are ignored here
 * too, with a warning. Shared keys: vocab_size, hidden_size, intermediate_size, num_hidden_layers,
 * num_attention_heads (all required), rms_norm_eps (1e-5), tie_word_embeddings (false),
 * max_position_embeddings (131072), bos_token_id (1), eos_token_id (2; a list gives its first id;
 * every id given must be in [0, vocab_size), -1 or null meaning none).
 * Where the forms were confirmed: attn_type_list's codes and the residual/`postnorm` semantics in
 * vLLM's model_executor/models/minimax_text_01.py (MiniMaxText01Model maps "linear_attention" to 0
 * and "full_attention" to 1; the decoder layer builds lightning attention for type 0), the partial
 * rotary convention in the same file (get_rope(rotary_dim, is_neox_style=True)) and in the remote
 * modeling_minimax_text_01.py (rotate-half within q[..., :rotary_dim]).
 *
 * Invariants: on LH_OK every lh_config field is filled and consistent (head counts divide, top_k <=
 * experts <= LH_MAX_EXPERTS, layers <= LH_MAX_LAYERS, rotary_dim even and <= head_dim, attn_length_scale_base >= 0 and
 * 0 in the HF form); on failure *cfg is unspecified. Errors name the file and the key.
 * lh_generation_config_check holds a model folder's generation_config.json to the same rule for its
 * eos_token_id (the key longhaul's runner reads from it: more ids that end an answer). The parser
 * never trusts the input: any byte string is handled without reading past len (the fuzz target
 * fuzz_config checks this).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/backend.h"
#include "engine/internal.h"
#include "kernels/cpu/ops.h"
#include "util/json.h"
#include "util/log.h"

#define CFG_INT_MAX (1 << 30) /* bigger structural sizes are certainly a mistake, and keep products in int64 */

typedef struct pctx {
  const cJSON *root;
  const char *path;
  lh_error *err;
} pctx;

static const char *json_kind(const cJSON *v) {
  if (!v) return "nothing";
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  return "an invalid value";
}

static const cJSON *get(const pctx *c, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(c->root, key);
}

/* A present, non-null value. */
static int has(const pctx *c, const char *key) {
  const cJSON *v = get(c, key);
  return v && !cJSON_IsNull(v);
}

/* Whether d is a whole number; its size is the caller's range check, which names the value. */
static int is_integral(double d) { return isfinite(d) && d == floor(d); }

/* Integer key: absent or null gives def (or an error when required). */
static lh_status get_int(const pctx *c, const char *key, int required, int def, int lo, int hi, int *out) {
  const cJSON *v = get(c, key);
  if (!v || cJSON_IsNull(v)) {
    if (required) return lh_error_set(c->err, LH_EFORMAT, "%s: missing required key '%s'", c->path, key);
    *out = def;
    return LH_OK;
  }
  if (!cJSON_IsNumber(v) || !is_integral(v->valuedouble))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be an integer, found %s", c->path, key,
                        cJSON_IsNumber(v) ? "a non-integral number" : json_kind(v));
  double d = v->valuedouble;
  if (d < lo || d > hi)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' is %.0f, outside [%d, %d]", c->path, key, d, lo, hi);
  *out = (int)d;
  return LH_OK;
}

static lh_status num_value(const pctx *c, const char *key, const cJSON *v, double *out) {
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be a number, found %s", c->path, key, json_kind(v));
  *out = v->valuedouble;
  return LH_OK;
}

static lh_status get_num(const pctx *c, const char *key, int required, double def, double *out) {
  const cJSON *v = get(c, key);
  if (!v || cJSON_IsNull(v)) {
    if (required) return lh_error_set(c->err, LH_EFORMAT, "%s: missing required key '%s'", c->path, key);
    *out = def;
    return LH_OK;
  }
  return num_value(c, key, v, out);
}

static lh_status get_bool(const pctx *c, const char *key, int def, int *out) {
  const cJSON *v = get(c, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return LH_OK;
  }
  if (!cJSON_IsBool(v))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be true or false, found %s", c->path, key,
                        json_kind(v));
  *out = cJSON_IsTrue(v) ? 1 : 0;
  return LH_OK;
}

/* Token ids: an integer, null or -1 (none: -1), or a list whose first element is used. Every id
 * given must lie in [0, vocab): a model that names a token it does not have would never stop, or
 * start, where its config says. An absent key gives def, or -1 when def is not in the vocabulary. */
static lh_status token_in_vocab(const pctx *c, const char *key, int index, double v, int vocab) {
  if (v >= 0 && v < vocab) return LH_OK;
  char at[32] = "";
  if (index >= 0) snprintf(at, sizeof at, "[%d]", index);
  return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s'%s is %.0f, outside the vocabulary [0, %d)", c->path, key, at, v,
                      vocab);
}

static lh_status get_token_id(const pctx *c, const char *key, int def, int vocab, int *out) {
  const cJSON *v = get(c, key);
  if (!v) {
    *out = def >= 0 && def < vocab ? def : -1;
    return LH_OK;
  }
  if (cJSON_IsNull(v)) {
    *out = -1;
    return LH_OK;
  }
  if (cJSON_IsArray(v)) {
    const cJSON *e;
    int i = 0;
    lh_status st;
    cJSON_ArrayForEach(e, v) {
      if (!cJSON_IsNumber(e) || !is_integral(e->valuedouble))
        return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must list non-negative integers", c->path, key);
      if ((st = token_in_vocab(c, key, i, e->valuedouble, vocab))) return st;
      i++;
    }
    *out = v->child ? (int)v->child->valuedouble : -1;
    return LH_OK;
  }
  if (!cJSON_IsNumber(v) || !is_integral(v->valuedouble) || v->valuedouble < -1)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be a token id, found %s", c->path, key,
                        cJSON_IsNumber(v) ? "a negative or non-integral number" : json_kind(v));
  if (v->valuedouble == -1) {
    *out = -1;
    return LH_OK;
  }
  lh_status st = token_in_vocab(c, key, -1, v->valuedouble, vocab);
  if (st) return st;
  *out = (int)v->valuedouble;
  return LH_OK;
}

static lh_status get_str(const pctx *c, const char *key, const char *def, const char **out) {
  const cJSON *v = get(c, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return LH_OK;
  }
  if (!cJSON_IsString(v))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be a string, found %s", c->path, key, json_kind(v));
  *out = v->valuestring;
  return LH_OK;
}

static void warn_ignored(const pctx *c, const char *form, const char *const *keys) {
  for (; *keys; keys++)
    if (get(c, *keys))
      lh_log_warn("%s: key '%s' belongs to the other config form and is ignored in the %s form, as the code "
                  "that defines this form ignores it",
                  c->path, *keys, form);
}

/* Features neither form's reference implements for this architecture, or that longhaul does not. */
static lh_status reject_common(const pctx *c) {
  if (has(c, "quantization_config") || has(c, "quantization"))
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key '%s': quantized checkpoints are not supported (F32, BF16 and F16 weights only)",
                        c->path, has(c, "quantization_config") ? "quantization_config" : "quantization");
  if (has(c, "sliding_window"))
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key 'sliding_window' is set: sliding-window softmax attention is not implemented "
                        "(set it to null for full causal attention)",
                        c->path);
  const char *act = NULL;
  lh_status st = get_str(c, "hidden_act", "silu", &act);
  if (st) return st;
  if (strcmp(act, "silu") && strcmp(act, "swish"))
    return lh_error_set(c->err, LH_EUNSUPPORTED, "%s: key 'hidden_act' is \"%s\": only \"silu\" is implemented",
                        c->path, act);
  static const char *const bool_features[] = {"use_qk_norm", "attention_bias", "qkv_bias", "mlp_bias", NULL};
  for (const char *const *k = bool_features; *k; k++) {
    const cJSON *v = get(c, *k);
    if (v && cJSON_IsTrue(v))
      return lh_error_set(c->err, LH_EUNSUPPORTED, "%s: key '%s' is true: not implemented for this architecture",
                          c->path, *k);
  }
  static const char *const count_features[] = {"n_shared_experts", "num_shared_experts", NULL};
  for (const char *const *k = count_features; *k; k++) {
    const cJSON *v = get(c, *k);
    if (v && cJSON_IsNumber(v) && v->valuedouble != 0)
      return lh_error_set(c->err, LH_EUNSUPPORTED, "%s: key '%s' is non-zero: shared experts are not implemented",
                          c->path, *k);
  }
  const cJSON *nle = get(c, "num_local_experts");
  if (nle && cJSON_IsArray(nle))
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key 'num_local_experts' is a per-layer list: only one expert count for every layer "
                        "is implemented",
                        c->path);
  return LH_OK;
}

/* YaRN's cos/sin factor as transformers' get_mscale forms it: 1 for scale <= 1, else
 * 0.1 m ln(scale) + 1. */
static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

/* A number in a RoPE dict: absent or null leaves *out (has = 0), anything else must be a finite
 * number. */
static lh_status rope_num(const pctx *c, const cJSON *rp, const char *rp_key, const char *key, double *out, int *has) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, key);
  *has = 0;
  if (!v || cJSON_IsNull(v)) return LH_OK;
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.%s' must be a number, found %s", c->path, rp_key, key,
                        json_kind(v));
  *out = v->valuedouble;
  *has = 1;
  return LH_OK;
}

/* rope_type of a RoPE dict (rope_scaling or rope_parameters): absent, null or "default" is plain
 * RoPE; "yarn" reads YaRN's keys as transformers 5.17's _compute_yarn_parameters reads them:
 * factor (required; null: max_position_embeddings / original_max_position_embeddings),
 * original_max_position_embeddings (required), beta_fast (32) and beta_slow (1) where absent, null
 * or 0, truncate (true), attention_factor (absent or null: from mscale and mscale_all_dim when both
 * are non-zero, else from factor: yarn_mscale). Any other type is refused, naming it. */
static lh_status parse_rope_type(const pctx *c, const cJSON *rp, const char *rp_key, lh_config *cfg) {
  cfg->rope_yarn_factor = 0;
  cfg->rope_attention_factor = 1.0f;
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
  if (!t) t = cJSON_GetObjectItemCaseSensitive(rp, "type");
  if (!t || cJSON_IsNull(t)) return LH_OK;
  if (!cJSON_IsString(t))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.rope_type' must be a string, found %s", c->path, rp_key,
                        json_kind(t));
  if (!strcmp(t->valuestring, "default")) return LH_OK;
  if (strcmp(t->valuestring, "yarn"))
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key '%s.rope_type' is \"%s\": only the \"default\" and \"yarn\" RoPE are implemented",
                        c->path, rp_key, t->valuestring);
  lh_status st;
  int has;
  double omax = 0, factor = 0, v;
  if ((st = rope_num(c, rp, rp_key, "original_max_position_embeddings", &omax, &has))) return st;
  if (!has || !is_integral(omax) || omax < 1 || omax > CFG_INT_MAX)
    return lh_error_set(c->err, LH_EFORMAT,
                        "%s: key '%s.original_max_position_embeddings' must be a positive integer for rope_type "
                        "\"yarn\"",
                        c->path, rp_key);
  cfg->rope_yarn_original_max = (int)omax;
  if (!cJSON_GetObjectItemCaseSensitive(rp, "factor"))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.factor' is required for rope_type \"yarn\"", c->path, rp_key);
  if ((st = rope_num(c, rp, rp_key, "factor", &factor, &has))) return st;
  if (!has) factor = (double)cfg->max_position_embeddings / omax;
  if (!(factor >= 1))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.factor' is %g: YaRN's factor must be at least 1", c->path,
                        rp_key, factor);
  cfg->rope_yarn_factor = factor;
  cfg->rope_yarn_beta_fast = 32;
  cfg->rope_yarn_beta_slow = 1;
  if ((st = rope_num(c, rp, rp_key, "beta_fast", &v, &has))) return st;
  if (has && v != 0) cfg->rope_yarn_beta_fast = v;
  if ((st = rope_num(c, rp, rp_key, "beta_slow", &v, &has))) return st;
  if (has && v != 0) cfg->rope_yarn_beta_slow = v;
  if (!(cfg->rope_yarn_beta_fast > 0 && cfg->rope_yarn_beta_slow > 0))
    return lh_error_set(c->err, LH_EFORMAT, "%s: keys '%s.beta_fast' and 'beta_slow' must be positive (%g, %g)",
                        c->path, rp_key, cfg->rope_yarn_beta_fast, cfg->rope_yarn_beta_slow);
  cfg->rope_yarn_truncate = 1;
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(rp, "truncate");
  if (tr && !cJSON_IsNull(tr)) {
    if (!cJSON_IsBool(tr))
      return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.truncate' must be true or false, found %s", c->path,
                          rp_key, json_kind(tr));
    cfg->rope_yarn_truncate = cJSON_IsTrue(tr);
  }
  double af, ms = 0, msa = 0;
  if ((st = rope_num(c, rp, rp_key, "attention_factor", &af, &has))) return st;
  if (!has) {
    int h1, h2;
    if ((st = rope_num(c, rp, rp_key, "mscale", &ms, &h1)) ||
        (st = rope_num(c, rp, rp_key, "mscale_all_dim", &msa, &h2)))
      return st;
    af = ms != 0 && msa != 0 ? yarn_mscale(factor, ms) / yarn_mscale(factor, msa) : yarn_mscale(factor, 1);
  }
  if (!(af > 0))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s.attention_factor' is %g: it must be positive", c->path,
                        rp_key, af);
  cfg->rope_attention_factor = (float)af;
  static const char *const known[] = {"rope_type", "type", "factor", "original_max_position_embeddings", "beta_fast",
                                      "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim",
                                      "rope_theta", "partial_rotary_factor", NULL};
  const cJSON *e;
  cJSON_ArrayForEach(e, rp) {
    int k = 0;
    while (known[k] && strcmp(known[k], e->string)) k++;
    if (!known[k])
      return lh_error_set(c->err, LH_EUNSUPPORTED, "%s: key '%s.%s' is not a YaRN parameter longhaul knows", c->path,
                          rp_key, e->string);
  }
  return LH_OK;
}

/* The shape keys both forms share. */
static lh_status parse_shape(const pctx *c, lh_config *cfg) {
  lh_status st;
  if ((st = get_int(c, "vocab_size", 1, 0, 1, CFG_INT_MAX, &cfg->vocab_size))) return st;
  if ((st = get_int(c, "hidden_size", 1, 0, 1, CFG_INT_MAX, &cfg->hidden_size))) return st;
  if ((st = get_int(c, "intermediate_size", 1, 0, 1, CFG_INT_MAX, &cfg->intermediate_size))) return st;
  if ((st = get_int(c, "num_hidden_layers", 1, 0, 1, CFG_INT_MAX, &cfg->n_layers))) return st;
  if (cfg->n_layers > LH_MAX_LAYERS)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'num_hidden_layers' is %d, more than longhaul's limit of %d",
                        c->path, cfg->n_layers, LH_MAX_LAYERS);
  if ((st = get_int(c, "num_attention_heads", 1, 0, 1, CFG_INT_MAX, &cfg->n_heads))) return st;
  if (cfg->n_heads > LH_MAX_HEADS)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'num_attention_heads' is %d, more than longhaul's limit of %d",
                        c->path, cfg->n_heads, LH_MAX_HEADS);
  /* HF: `num_key_value_heads: int = 8`, and None becomes num_attention_heads in __post_init__. */
  const cJSON *kv = get(c, "num_key_value_heads");
  if (kv && cJSON_IsNull(kv)) {
    cfg->n_kv_heads = cfg->n_heads;
  } else {
    if ((st = get_int(c, "num_key_value_heads", 0, 8, 1, CFG_INT_MAX, &cfg->n_kv_heads))) return st;
    if (!kv)
      lh_log_warn("%s: num_key_value_heads is absent; using 8, transformers' default for MiniMax", c->path);
  }
  /* Both forms: `getattr(config, "head_dim", None) or hidden_size // num_attention_heads`. */
  const cJSON *hd = get(c, "head_dim");
  int head_dim = 0;
  if (hd && !cJSON_IsNull(hd) && (st = get_int(c, "head_dim", 0, 0, 0, CFG_INT_MAX, &head_dim))) return st;
  if (head_dim == 0) {
    if (cfg->hidden_size % cfg->n_heads)
      return lh_error_set(c->err, LH_EFORMAT,
                          "%s: head_dim is absent and hidden_size (%d) is not divisible by num_attention_heads (%d)",
                          c->path, cfg->hidden_size, cfg->n_heads);
    head_dim = cfg->hidden_size / cfg->n_heads;
  }
  cfg->head_dim = head_dim;
  if (has(c, "num_local_experts")) {
    if ((st = get_int(c, "num_local_experts", 1, 0, 1, CFG_INT_MAX, &cfg->n_experts))) return st;
  } else if (has(c, "num_experts")) { /* HF's attribute_map alias */
    if ((st = get_int(c, "num_experts", 1, 0, 1, CFG_INT_MAX, &cfg->n_experts))) return st;
  } else {
    return lh_error_set(c->err, LH_EFORMAT, "%s: missing required key 'num_local_experts'", c->path);
  }
  if ((st = get_int(c, "num_experts_per_tok", 1, 0, 1, CFG_INT_MAX, &cfg->top_k))) return st;
  if (cfg->n_experts > LH_MAX_EXPERTS)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'num_local_experts' is %d, more than longhaul's limit of %d",
                        c->path, cfg->n_experts, LH_MAX_EXPERTS);
  if (cfg->top_k > cfg->n_experts)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'num_experts_per_tok' (%d) is more than num_local_experts (%d)",
                        c->path, cfg->top_k, cfg->n_experts);
  if ((st = get_num(c, "rms_norm_eps", 0, 1e-5, &cfg->rms_norm_eps))) return st;
  if (!(cfg->rms_norm_eps > 0))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'rms_norm_eps' must be positive", c->path);
  if ((st = get_bool(c, "tie_word_embeddings", 0, &cfg->tie_word_embeddings))) return st;
  if ((st = get_int(c, "max_position_embeddings", 0, 4096 * 32, 1, CFG_INT_MAX, &cfg->max_position_embeddings)))
    return st;
  if ((st = get_int(c, "block_size", 0, 256, 1, 1 << 16, &cfg->block_size))) return st;
  if ((st = get_token_id(c, "bos_token_id", 1, cfg->vocab_size, &cfg->bos_token_id))) return st;
  if ((st = get_token_id(c, "eos_token_id", 2, cfg->vocab_size, &cfg->eos_token_id))) return st;
  return LH_OK;
}

static void count_kinds(lh_config *cfg) {
  cfg->n_lightning = cfg->n_softmax = 0;
  for (int i = 0; i < cfg->n_layers; i++) {
    if (cfg->layer_kind[i] == LH_LAYER_LIGHTNING)
      cfg->n_lightning++;
    else
      cfg->n_softmax++;
  }
}

static lh_status parse_hf(const pctx *c, lh_config *cfg) {
  lh_status st;
  const cJSON *lt = get(c, "layer_types");
  if (!lt || cJSON_IsNull(lt)) {
    /* MiniMaxConfig.__post_init__: "full_attention" if bool((i + 1) % 2) else "linear_attention". */
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_kind[i] = (i + 1) % 2 ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;
  } else {
    if (!cJSON_IsArray(lt))
      return lh_error_set(c->err, LH_EFORMAT, "%s: key 'layer_types' must be an array, found %s", c->path,
                          json_kind(lt));
    int n = cJSON_GetArraySize(lt);
    if (n != cfg->n_layers)
      return lh_error_set(c->err, LH_EFORMAT, "%s: key 'layer_types' has %d entries but num_hidden_layers is %d",
                          c->path, n, cfg->n_layers);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
      if (cJSON_IsString(e) && !strcmp(e->valuestring, "linear_attention"))
        cfg->layer_kind[i] = LH_LAYER_LIGHTNING;
      else if (cJSON_IsString(e) && !strcmp(e->valuestring, "full_attention"))
        cfg->layer_kind[i] = LH_LAYER_SOFTMAX;
      else
        return lh_error_set(c->err, LH_EFORMAT,
                            "%s: key 'layer_types'[%d] must be \"linear_attention\" or \"full_attention\"", c->path,
                            i);
      i++;
    }
  }

  double a = 0;
  if ((st = get_num(c, "full_attn_alpha_factor", 0, 1, &a))) return st;
  cfg->attn_alpha[LH_LAYER_SOFTMAX] = (float)a;
  if ((st = get_num(c, "full_attn_beta_factor", 0, 1, &a))) return st;
  cfg->attn_beta[LH_LAYER_SOFTMAX] = (float)a;
  if ((st = get_num(c, "linear_attn_alpha_factor", 0, 1, &a))) return st;
  cfg->attn_alpha[LH_LAYER_LIGHTNING] = (float)a;
  if ((st = get_num(c, "linear_attn_beta_factor", 0, 1, &a))) return st;
  cfg->attn_beta[LH_LAYER_LIGHTNING] = (float)a;
  if ((st = get_num(c, "mlp_alpha_factor", 0, 1, &a))) return st;
  cfg->mlp_alpha = (float)a;
  if ((st = get_num(c, "mlp_beta_factor", 0, 1, &a))) return st;
  cfg->mlp_beta = (float)a;

  /* RoPE, as RotaryEmbeddingConfigMixin standardises it: a truthy legacy rope_scaling wins over
   * rope_parameters; theta from the dict, else the top-level rope_theta, else MiniMax's default. */
  const cJSON *rp = get(c, "rope_scaling");
  const char *rp_key = "rope_scaling";
  if (!rp || !cJSON_IsObject(rp) || !rp->child) {
    if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
      return lh_error_set(c->err, LH_EFORMAT, "%s: key 'rope_scaling' must be an object, found %s", c->path,
                          json_kind(rp));
    rp = get(c, "rope_parameters");
    rp_key = "rope_parameters";
  }
  if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be an object, found %s", c->path, rp_key,
                        json_kind(rp));
  if (rp && cJSON_IsObject(rp)) {
    const cJSON *nested = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    if (nested || cJSON_GetObjectItemCaseSensitive(rp, "linear_attention")) {
      /* Per-layer-type dicts: only softmax layers use RoPE. */
      if (!nested || !cJSON_IsObject(nested))
        return lh_error_set(c->err, LH_EUNSUPPORTED,
                            "%s: key '%s' has per-layer-type entries but no object for \"full_attention\"", c->path,
                            rp_key);
      rp = nested;
    }
  }
  if ((st = get_num(c, "rope_theta", 0, 1e6, &cfg->rope_theta))) return st;
  int partial = has(c, "partial_rotary_factor");
  if (rp && cJSON_IsObject(rp)) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp, "rope_theta");
    if (v && !cJSON_IsNull(v) && (st = num_value(c, "rope_parameters.rope_theta", v, &cfg->rope_theta))) return st;
    if ((st = parse_rope_type(c, rp, rp_key, cfg))) return st;
    const cJSON *prf = cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf)) partial = 1;
    /* transformers' YaRN computes its frequencies over head_dim x partial_rotary_factor dims while
     * MiniMax's rotation covers the whole head: a pair with no one reference */
    if (partial && cfg->rope_yarn_factor > 0)
      return lh_error_set(c->err, LH_EUNSUPPORTED,
                          "%s: rope_type \"yarn\" with partial_rotary_factor in the HF form is not implemented "
                          "(transformers would size YaRN's frequencies and MiniMax's rotation differently); use the "
                          "original minimax_text_01 form with rotary_dim and rope_scaling",
                          c->path);
  }
  if (!(cfg->rope_theta > 0))
    return lh_error_set(c->err, LH_EFORMAT, "%s: rope_theta must be positive", c->path);
  if (partial)
    lh_log_warn("%s: partial_rotary_factor is ignored, as transformers 5.17 ignores it for MiniMax: RoPE covers "
                "the whole head_dim (%d). For partial RoPE use the original minimax_text_01 form with rotary_dim.",
                c->path, cfg->head_dim);
  cfg->rotary_dim = cfg->head_dim;
  cfg->postnorm = 1;
  int lsb = 0;
  if ((st = get_int(c, "attn_length_scale_base", 0, 0, 0, CFG_INT_MAX, &lsb))) return st;
  if (lsb)
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key 'attn_length_scale_base' is %d: the length-aware query scaling is longhaul's "
                        "extension of the original minimax_text_01 form, and transformers' minimax form cannot "
                        "express it (write the model's config.json in the minimax_text_01 form)",
                        c->path, lsb);

  static const char *const other[] = {"attn_type_list", "layernorm_full_attention_alpha",
                                      "layernorm_full_attention_beta", "layernorm_linear_attention_alpha",
                                      "layernorm_linear_attention_beta", "layernorm_mlp_alpha",
                                      "layernorm_mlp_beta", "rotary_dim", "postnorm", "shared_intermediate_size",
                                      NULL};
  warn_ignored(c, "HF minimax", other);
  return LH_OK;
}

static lh_status parse_original(const pctx *c, lh_config *cfg) {
  lh_status st;
  const char *key = "attn_type_list";
  const cJSON *al = get(c, key);
  if ((!al || cJSON_IsNull(al)) && has(c, "decoder_attention_types")) {
    key = "decoder_attention_types";
    al = get(c, key);
  }
  if (!al || cJSON_IsNull(al))
    return lh_error_set(c->err, LH_EFORMAT, "%s: missing required key 'attn_type_list' (0 = lightning, 1 = softmax "
                        "per layer)", c->path);
  if (!cJSON_IsArray(al))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' must be an array, found %s", c->path, key, json_kind(al));
  int n = cJSON_GetArraySize(al);
  if (n != cfg->n_layers)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' has %d entries but num_hidden_layers is %d", c->path, key,
                        n, cfg->n_layers);
  int i = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, al) {
    if (!cJSON_IsNumber(e) || (e->valuedouble != 0 && e->valuedouble != 1))
      return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s'[%d] must be 0 (lightning) or 1 (softmax)", c->path, key,
                          i);
    cfg->layer_kind[i++] = e->valuedouble == 1 ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;
  }
  count_kinds(cfg);

  double a;
  if ((st = get_num(c, "layernorm_full_attention_alpha", 0, 1, &a))) return st;
  cfg->attn_alpha[LH_LAYER_SOFTMAX] = (float)a;
  if ((st = get_num(c, "layernorm_full_attention_beta", 0, 1, &a))) return st;
  cfg->attn_beta[LH_LAYER_SOFTMAX] = (float)a;
  if ((st = get_num(c, "layernorm_linear_attention_alpha", 0, 1, &a))) return st;
  cfg->attn_alpha[LH_LAYER_LIGHTNING] = (float)a;
  if ((st = get_num(c, "layernorm_linear_attention_beta", 0, 1, &a))) return st;
  cfg->attn_beta[LH_LAYER_LIGHTNING] = (float)a;
  if ((st = get_num(c, "layernorm_mlp_alpha", 0, 1, &a))) return st;
  cfg->mlp_alpha = (float)a;
  if ((st = get_num(c, "layernorm_mlp_beta", 0, 1, &a))) return st;
  cfg->mlp_beta = (float)a;

  /* The remote code takes the residual before the norm unless postnorm is true; every release sets
   * it true, and only that layout has a reference (transformers), so false is refused. */
  const cJSON *pn = get(c, "postnorm");
  if (!pn || cJSON_IsNull(pn))
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key 'postnorm' is absent: the original code then takes the residual before the norm, "
                        "which longhaul does not implement (MiniMax-Text-01 sets \"postnorm\": true)",
                        c->path);
  if ((st = get_bool(c, "postnorm", 0, &cfg->postnorm))) return st;
  if (!cfg->postnorm)
    return lh_error_set(c->err, LH_EUNSUPPORTED,
                        "%s: key 'postnorm' is false (residual taken before the norm): not implemented", c->path);

  const cJSON *sh = get(c, "shared_intermediate_size");
  if (sh && !cJSON_IsNull(sh)) {
    if (cJSON_IsNumber(sh)) {
      if (sh->valuedouble != 0)
        return lh_error_set(c->err, LH_EUNSUPPORTED,
                            "%s: key 'shared_intermediate_size' is %g: shared experts are not implemented", c->path,
                            sh->valuedouble);
    } else if (cJSON_IsArray(sh)) {
      int j = 0;
      cJSON_ArrayForEach(e, sh) {
        if (!cJSON_IsNumber(e))
          return lh_error_set(c->err, LH_EFORMAT, "%s: key 'shared_intermediate_size'[%d] must be a number", c->path,
                              j);
        if (e->valuedouble != 0)
          return lh_error_set(c->err, LH_EUNSUPPORTED,
                              "%s: key 'shared_intermediate_size'[%d] is %g: shared experts are not implemented",
                              c->path, j, e->valuedouble);
        j++;
      }
    } else {
      return lh_error_set(c->err, LH_EFORMAT, "%s: key 'shared_intermediate_size' must be a number or a list, found %s",
                          c->path, json_kind(sh));
    }
  }
  /* rope_scaling: plain ("default") or YaRN over the rotary_dim dims (parse_rope_type); the remote
   * code has no RoPE scaling, so the reference is transformers' YaRN frequencies (docs/design.md) */
  const cJSON *rs = get(c, "rope_scaling");
  if (rs && !cJSON_IsNull(rs)) {
    if (!cJSON_IsObject(rs))
      return lh_error_set(c->err, LH_EFORMAT, "%s: key 'rope_scaling' must be an object, found %s", c->path,
                          json_kind(rs));
    if ((st = parse_rope_type(c, rs, "rope_scaling", cfg))) return st;
    const cJSON *prf = cJSON_GetObjectItemCaseSensitive(rs, "partial_rotary_factor");
    if (prf && !cJSON_IsNull(prf))
      return lh_error_set(c->err, LH_EUNSUPPORTED,
                          "%s: key 'rope_scaling.partial_rotary_factor' is set: the original form's rotated width "
                          "is rotary_dim",
                          c->path);
  }

  if ((st = get_num(c, "rope_theta", cfg->n_softmax > 0, 1e6, &cfg->rope_theta))) return st;
  if (!(cfg->rope_theta > 0))
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'rope_theta' must be positive", c->path);
  if ((st = get_int(c, "rotary_dim", 0, cfg->head_dim, 1, CFG_INT_MAX, &cfg->rotary_dim))) return st;
  if (cfg->rotary_dim > cfg->head_dim || cfg->rotary_dim % 2)
    return lh_error_set(c->err, LH_EFORMAT, "%s: key 'rotary_dim' is %d: it must be even and at most head_dim (%d)",
                        c->path, cfg->rotary_dim, cfg->head_dim);

  /* The length-aware query scaling (docs/design.md): absent, null or 0 is the plain model. */
  if ((st = get_int(c, "attn_length_scale_base", 0, 0, 0, CFG_INT_MAX, &cfg->attn_length_scale_base))) return st;
  if (cfg->attn_length_scale_base && !cfg->n_softmax)
    lh_log_warn("%s: key 'attn_length_scale_base' is %d but no layer is softmax attention: it changes nothing",
                c->path, cfg->attn_length_scale_base);

  static const char *const other[] = {"layer_types",           "full_attn_alpha_factor",   "full_attn_beta_factor",
                                      "linear_attn_alpha_factor", "linear_attn_beta_factor", "mlp_alpha_factor",
                                      "mlp_beta_factor",       "rope_parameters",          "partial_rotary_factor",
                                      NULL};
  warn_ignored(c, "minimax_text_01", other);
  return LH_OK;
}

static lh_status check_consistency(const pctx *c, lh_config *cfg) {
  count_kinds(cfg);
  if (cfg->n_softmax > 0) {
    if (cfg->n_kv_heads > cfg->n_heads || cfg->n_heads % cfg->n_kv_heads)
      return lh_error_set(c->err, LH_EFORMAT,
                          "%s: num_key_value_heads (%d) must divide num_attention_heads (%d) for grouped-query "
                          "attention",
                          c->path, cfg->n_kv_heads, cfg->n_heads);
    if (cfg->head_dim % 2)
      return lh_error_set(c->err, LH_EFORMAT, "%s: head_dim (%d) must be even for RoPE in the softmax layers",
                          c->path, cfg->head_dim);
  }
  /* Every projection size must stay addressable: [3*H*d, hidden] and [vocab, hidden] in elements. */
  int64_t hd = (int64_t)cfg->n_heads * cfg->head_dim;
  if (hd * 3 > CFG_INT_MAX)
    return lh_error_set(c->err, LH_EFORMAT,
                        "%s: num_attention_heads (%d) x head_dim (%d) is %lld, more than longhaul's limit of %d",
                        c->path, cfg->n_heads, cfg->head_dim, (long long)hd, CFG_INT_MAX / 3);
  static const char *const wide[2] = {"vocab_size", "intermediate_size"};
  const int n[2] = {cfg->vocab_size, cfg->intermediate_size};
  for (int k = 0; k < 2; k++)
    if ((int64_t)n[k] * cfg->hidden_size > ((int64_t)1 << 40))
      return lh_error_set(c->err, LH_EFORMAT,
                          "%s: %s (%d) x hidden_size (%d) is %lld weights in one matrix, more than longhaul's limit "
                          "of 2^40",
                          c->path, wide[k], n[k], cfg->hidden_size, (long long)n[k] * cfg->hidden_size);
  return LH_OK;
}

static lh_status reject_duplicates(const pctx *c) {
  const char *dup = NULL;
  if (lh_json_duplicate_key(c->root, 1, &dup)) return lh_error_set(c->err, LH_ENOMEM, "%s: out of memory", c->path);
  if (dup) return lh_error_set(c->err, LH_EFORMAT, "%s: key '%s' appears more than once", c->path, dup);
  return LH_OK;
}

lh_status lh_config_parse(const char *json, size_t len, const char *path, lh_config *cfg, lh_error *err) {
  if (!path) path = "config.json";
  memset(cfg, 0, sizeof *cfg);
  cfg->rope_attention_factor = 1.0f;
  const char *at = NULL; /* the parse end, not cJSON_GetErrorPtr(): that one is a global */
  cJSON *root = json ? cJSON_ParseWithLengthOpts(json, len, &at, 0) : NULL;
  char deep[128];
  if (!root && lh_json_too_deep(json, len, deep, sizeof deep)) return lh_error_set(err, LH_EFORMAT, "%s: %s", path, deep);
  if (!root) {
    long off = at && json && at >= json && at <= json + len ? (long)(at - json) : -1;
    return lh_error_set(err, LH_EFORMAT, "%s: not valid JSON (error near byte %ld)", path, off);
  }
  /* Anything but whitespace after the object is malformed (json.load refuses it too). */
  for (const char *q = at ? at : json + len; q < json + len; q++)
    if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
      cJSON_Delete(root);
      return lh_error_set(err, LH_EFORMAT, "%s: unexpected text after the JSON object (byte %ld)", path,
                          (long)(q - json));
    }
  pctx c = {root, path, err};
  lh_status st = LH_OK;
  if (!cJSON_IsObject(root)) {
    st = lh_error_set(err, LH_EFORMAT, "%s: must be a JSON object, found %s", path, json_kind(root));
    goto out;
  }
  if ((st = reject_duplicates(&c))) goto out;
  const char *mt = NULL;
  if ((st = get_str(&c, "model_type", NULL, &mt))) goto out;
  if (!mt) {
    st = lh_error_set(err, LH_EFORMAT, "%s: missing required key 'model_type' (\"minimax\" or \"minimax_text_01\")",
                      path);
    goto out;
  }
  int original;
  if (!strcmp(mt, "minimax")) {
    original = 0;
  } else if (!strcmp(mt, "minimax_text_01")) {
    original = 1;
  } else {
    st = lh_error_set(err, LH_EUNSUPPORTED,
                      "%s: key 'model_type' is \"%s\": longhaul runs \"minimax\" (transformers) and "
                      "\"minimax_text_01\" (the original release) models",
                      path, mt);
    goto out;
  }
  snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt);
  if ((st = reject_common(&c))) goto out;
  if ((st = parse_shape(&c, cfg))) goto out;
  if ((st = original ? parse_original(&c, cfg) : parse_hf(&c, cfg))) goto out;
  st = check_consistency(&c, cfg);
out:
  cJSON_Delete(root);
  return st;
}

lh_status lh_generation_config_check(const char *json, size_t len, const char *path, const lh_config *cfg,
                                     lh_error *err) {
  if (!path) path = "generation_config.json";
  cJSON *root = json ? cJSON_ParseWithLength(json, len) : NULL;
  char deep[128];
  if (!root && lh_json_too_deep(json, len, deep, sizeof deep)) return lh_error_set(err, LH_EFORMAT, "%s: %s", path, deep);
  if (!root) return lh_error_set(err, LH_EFORMAT, "%s: not valid JSON", path);
  pctx c = {root, path, err};
  lh_status st = LH_OK;
  int id;
  if (!cJSON_IsObject(root))
    st = lh_error_set(err, LH_EFORMAT, "%s: must be a JSON object, found %s", path, json_kind(root));
  else
    st = get_token_id(&c, "eos_token_id", -1, cfg->vocab_size, &id);
  cJSON_Delete(root);
  return st;
}

lh_config lh_config_minimax_text_01_slice(int vocab) {
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
  c.rope_attention_factor = 1.0f;
  c.rms_norm_eps = 1e-5;
  c.postnorm = 1;
  c.max_position_embeddings = 1 << 22;
  c.bos_token_id = c.eos_token_id = -1;
  for (int k = 0; k < 2; k++) c.attn_alpha[k] = 3.5565588200778455f, c.attn_beta[k] = 1.0f;
  c.mlp_alpha = 3.5565588200778455f, c.mlp_beta = 1.0f;
  for (int i = 0; i < c.n_layers; i++) c.layer_kind[i] = (i + 1) % 8 == 0 ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;
  count_kinds(&c);
  return c;
}

float lh_rope_table(const lh_config *c, float *inv_freq) {
  if (!(c->rope_yarn_factor > 0)) {
    lh_rope_inv_freq(c->rope_theta, c->rotary_dim, inv_freq);
    return 1.0f;
  }
  lh_rope_inv_freq_yarn(c->rope_theta, c->rotary_dim, c->rope_yarn_factor, c->rope_yarn_original_max,
                        c->rope_yarn_beta_fast, c->rope_yarn_beta_slow, c->rope_yarn_truncate, inv_freq);
  return c->rope_attention_factor;
}
