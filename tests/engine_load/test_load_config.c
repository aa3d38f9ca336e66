/* test_load_config.c — lh_config_parse on both config forms: defaults as transformers 5.17 and the
 * original code define them, the key mapping between the forms, warnings, and every error; token
 * ids of config.json and generation_config.json inside the vocabulary; longhaul's own key
 * attn_length_scale_base. */
#include "tests/engine_load/tw.h"

#include "engine/internal.h"
#include "util/buf.h"
#include "util/fs.h"

static lh_config cfg;
static lh_error err;

static lh_status parse(const char *json) {
  memset(&err, 0, sizeof err);
  return lh_config_parse(json, strlen(json), "dir/config.json", &cfg, &err);
}

#define HF_BASE                                                                                          \
  "\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"           \
  "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2"

#define HF_BASE8                                                                                          \
  "\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"           \
  "\"num_hidden_layers\":4,\"num_attention_heads\":8,\"num_local_experts\":4,\"num_experts_per_tok\":2"

#define HF_KV HF_BASE ",\"num_key_value_heads\":2"

#define ORIG_BASE                                                                                        \
  "\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"   \
  "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"  \
  "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,0,1],\"postnorm\":true,\"rope_theta\":10000000"

/* An error whose message names the file and the given key. */
#define CHECK_ERR(json, code, key)                                             \
  do {                                                                         \
    CHECK_EQ(parse(json), code);                                               \
    CHECK_STR_CONTAINS(err.msg, "dir/config.json");                            \
    CHECK_STR_CONTAINS(err.msg, key);                                          \
  } while (0)

static void test_hf_defaults(void) {
  tw_log_begin();
  CHECK_EQ(parse("{" HF_BASE8 "}"), LH_OK);
  CHECK(!strcmp(cfg.model_type, "minimax"));
  CHECK_EQ(cfg.vocab_size, 100);
  CHECK_EQ(cfg.head_dim, 8); /* hidden / heads */
  CHECK_EQ(cfg.n_kv_heads, 8); /* MiniMaxConfig's dataclass default */
  CHECK_STR_CONTAINS(tw_log, "num_key_value_heads is absent");
  /* HF's default plan: full when (i + 1) % 2 is true, i.e. even layers are softmax */
  CHECK_EQ(cfg.layer_kind[0], LH_LAYER_SOFTMAX);
  CHECK_EQ(cfg.layer_kind[1], LH_LAYER_LIGHTNING);
  CHECK_EQ(cfg.layer_kind[2], LH_LAYER_SOFTMAX);
  CHECK_EQ(cfg.layer_kind[3], LH_LAYER_LIGHTNING);
  CHECK_EQ(cfg.n_softmax, 2);
  CHECK_EQ(cfg.n_lightning, 2);
  CHECK(cfg.rope_theta == 1e6);
  CHECK_EQ(cfg.rotary_dim, 8);
  CHECK_EQ(cfg.block_size, 256);
  CHECK(cfg.rms_norm_eps == 1e-5);
  CHECK_EQ(cfg.tie_word_embeddings, 0);
  CHECK_EQ(cfg.postnorm, 1);
  CHECK_EQ(cfg.max_position_embeddings, 131072);
  CHECK_EQ(cfg.bos_token_id, 1);
  CHECK_EQ(cfg.eos_token_id, 2);
  CHECK(cfg.attn_alpha[0] == 1 && cfg.attn_alpha[1] == 1 && cfg.attn_beta[0] == 1 && cfg.attn_beta[1] == 1);
  CHECK(cfg.mlp_alpha == 1 && cfg.mlp_beta == 1);
  lh_log_set_sink(NULL, NULL);
}

static void test_hf_full(void) {
  tw_log_begin();
  CHECK_EQ(parse("{" HF_BASE ",\"num_key_value_heads\":2,\"head_dim\":8,\"block_size\":64,\"rms_norm_eps\":1e-6,"
                 "\"tie_word_embeddings\":true,\"max_position_embeddings\":4096,\"bos_token_id\":null,"
                 "\"eos_token_id\":[7,8],\"layer_types\":[\"linear_attention\",\"linear_attention\","
                 "\"linear_attention\",\"full_attention\"],\"full_attn_alpha_factor\":3.5565588200778455,"
                 "\"full_attn_beta_factor\":0.5,\"linear_attn_alpha_factor\":2,\"linear_attn_beta_factor\":0.25,"
                 "\"mlp_alpha_factor\":1.5,\"mlp_beta_factor\":0.75,\"rope_theta\":5,"
                 "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},"
                 "\"architectures\":[\"MiniMaxForCausalLM\"],\"sliding_window\":null,\"hidden_act\":\"silu\"}"),
           LH_OK);
  CHECK_EQ(cfg.n_kv_heads, 2);
  CHECK_EQ(cfg.head_dim, 8);
  CHECK_EQ(cfg.rotary_dim, 8);
  CHECK_EQ(cfg.block_size, 64);
  CHECK(cfg.rms_norm_eps == 1e-6);
  CHECK_EQ(cfg.tie_word_embeddings, 1);
  CHECK_EQ(cfg.max_position_embeddings, 4096);
  CHECK_EQ(cfg.bos_token_id, -1);
  CHECK_EQ(cfg.eos_token_id, 7);
  CHECK_EQ(cfg.n_lightning, 3);
  CHECK_EQ(cfg.layer_kind[3], LH_LAYER_SOFTMAX);
  CHECK(cfg.attn_alpha[LH_LAYER_SOFTMAX] == (float)3.5565588200778455);
  CHECK(cfg.attn_beta[LH_LAYER_SOFTMAX] == 0.5f);
  CHECK(cfg.attn_alpha[LH_LAYER_LIGHTNING] == 2.0f);
  CHECK(cfg.attn_beta[LH_LAYER_LIGHTNING] == 0.25f);
  CHECK(cfg.mlp_alpha == 1.5f && cfg.mlp_beta == 0.75f);
  CHECK(cfg.rope_theta == 10000.0); /* the dict wins over the legacy key, as in transformers */
  CHECK_EQ((int)tw_log_len, 0);
  lh_log_set_sink(NULL, NULL);
}

static void test_hf_rope(void) {
  /* legacy top-level rope_theta */
  CHECK_EQ(parse("{" HF_KV ",\"rope_theta\":250000}"), LH_OK);
  CHECK(cfg.rope_theta == 250000);
  /* legacy rope_scaling dict takes precedence over rope_parameters when present */
  CHECK_EQ(parse("{" HF_KV ",\"rope_scaling\":{\"type\":\"default\",\"rope_theta\":777},"
                 "\"rope_parameters\":{\"rope_theta\":5}}"),
           LH_OK);
  CHECK(cfg.rope_theta == 777);
  /* per-layer-type rope dicts: the full-attention one applies */
  CHECK_EQ(parse("{" HF_KV ",\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\",\"rope_theta\":99},"
                 "\"linear_attention\":null}}"),
           LH_OK);
  CHECK(cfg.rope_theta == 99);
  /* partial_rotary_factor is ignored (transformers 5.17 ignores it for MiniMax), with a warning */
  tw_log_begin();
  CHECK_EQ(parse("{" HF_KV ",\"head_dim\":16,\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":1e4,"
                 "\"partial_rotary_factor\":0.5}}"),
           LH_OK);
  CHECK_EQ(cfg.rotary_dim, 16);
  CHECK_STR_CONTAINS(tw_log, "partial_rotary_factor is ignored");
  CHECK_STR_CONTAINS(tw_log, "dir/config.json");
  tw_log_begin();
  CHECK_EQ(parse("{" HF_KV ",\"partial_rotary_factor\":0.25}"), LH_OK);
  CHECK_EQ(cfg.rotary_dim, 16);
  CHECK_STR_CONTAINS(tw_log, "partial_rotary_factor is ignored");
  lh_log_set_sink(NULL, NULL);
  CHECK_ERR("{" HF_KV ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":4}}", LH_EFORMAT,
            "original_max_position_embeddings");
  CHECK_ERR("{" HF_KV ",\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":4}}", LH_EUNSUPPORTED, "rope_type");
  CHECK_ERR("{" HF_KV ",\"rope_parameters\":\"default\"}", LH_EFORMAT, "rope_parameters");
  CHECK_ERR("{" HF_KV ",\"rope_parameters\":{\"rope_theta\":\"big\"}}", LH_EFORMAT, "rope_theta");
  CHECK_ERR("{" HF_KV ",\"rope_theta\":-1}", LH_EFORMAT, "rope_theta");
}

static void test_hf_aliases_and_nulls(void) {
  CHECK_EQ(parse("{\"model_type\":\"minimax\",\"vocab_size\":10,\"hidden_size\":8,\"intermediate_size\":4,"
                 "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":null,\"head_dim\":null,"
                 "\"num_experts\":3,\"num_experts_per_tok\":1,\"layer_types\":null}"),
           LH_OK);
  CHECK_EQ(cfg.n_kv_heads, 2);
  CHECK_EQ(cfg.head_dim, 4);
  CHECK_EQ(cfg.n_experts, 3);
  CHECK_EQ(cfg.layer_kind[0], LH_LAYER_SOFTMAX);
}

static void test_hf_ignores_original_keys(void) {
  tw_log_begin();
  CHECK_EQ(parse("{" HF_KV ",\"rotary_dim\":4,\"postnorm\":false,\"attn_type_list\":[0,0,0,0],"
                 "\"shared_intermediate_size\":8}"),
           LH_OK);
  CHECK_EQ(cfg.rotary_dim, 16);
  CHECK_EQ(cfg.postnorm, 1);
  CHECK_EQ(cfg.n_softmax, 2);
  CHECK_STR_CONTAINS(tw_log, "'rotary_dim'");
  CHECK_STR_CONTAINS(tw_log, "'attn_type_list'");
  CHECK_STR_CONTAINS(tw_log, "'shared_intermediate_size'");
  lh_log_set_sink(NULL, NULL);
}

static void test_format_errors(void) {
  CHECK_EQ(parse("{\"model_type\": \"minimax\", "), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "not valid JSON");
  CHECK_STR_CONTAINS(err.msg, "dir/config.json");
  CHECK_EQ(parse("{\"model_type\": \"minimax\"} {}"), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "unexpected text after the JSON object");
  CHECK_EQ(parse("[1,2]"), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "JSON object");
  CHECK_EQ(lh_config_parse("{}", 0, "dir/config.json", &cfg, &err), LH_EFORMAT);
  CHECK_ERR("{\"vocab_size\":1}", LH_EFORMAT, "model_type");
  CHECK_ERR("{\"model_type\":\"llama\"}", LH_EUNSUPPORTED, "model_type");
  CHECK_ERR("{\"model_type\":7}", LH_EFORMAT, "model_type");
  CHECK_ERR("{" HF_BASE ",\"vocab_size\":100}", LH_EFORMAT, "vocab_size"); /* duplicate key */
  CHECK_STR_CONTAINS(err.msg, "more than once");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"intermediate_size\":32,\"num_hidden_layers\":4,"
            "\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "hidden_size");
  CHECK_STR_CONTAINS(err.msg, "missing");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "num_local_experts");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":\"64\",\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "hidden_size");
  CHECK_STR_CONTAINS(err.msg, "integer");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100.5,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "vocab_size");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":0,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "vocab_size");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":300,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "num_hidden_layers");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":640,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":320,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "num_attention_heads");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":66,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "not divisible");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_experts_per_tok\":5}",
            LH_EFORMAT, "num_experts_per_tok");
  CHECK_ERR("{" HF_BASE ",\"num_key_value_heads\":3}", LH_EFORMAT, "num_key_value_heads");
  CHECK_ERR("{" HF_BASE ",\"num_key_value_heads\":8}", LH_EFORMAT, "num_key_value_heads");
  CHECK_ERR("{" HF_KV ",\"layer_types\":[\"linear_attention\"]}", LH_EFORMAT, "layer_types");
  CHECK_ERR("{" HF_KV ",\"layer_types\":[\"linear_attention\",\"mamba\",\"full_attention\",\"full_attention\"]}",
            LH_EFORMAT, "layer_types");
  CHECK_ERR("{" HF_KV ",\"layer_types\":\"linear_attention\"}", LH_EFORMAT, "layer_types");
  CHECK_ERR("{" HF_KV ",\"tie_word_embeddings\":\"yes\"}", LH_EFORMAT, "tie_word_embeddings");
  CHECK_ERR("{" HF_KV ",\"rms_norm_eps\":0}", LH_EFORMAT, "rms_norm_eps");
  CHECK_ERR("{" HF_KV ",\"rms_norm_eps\":\"tiny\"}", LH_EFORMAT, "rms_norm_eps");
  CHECK_ERR("{" HF_KV ",\"full_attn_alpha_factor\":[1]}", LH_EFORMAT, "full_attn_alpha_factor");
  CHECK_ERR("{" HF_KV ",\"block_size\":0}", LH_EFORMAT, "block_size");
  CHECK_ERR("{" HF_KV ",\"eos_token_id\":\"</s>\"}", LH_EFORMAT, "eos_token_id");
  CHECK_ERR("{" HF_BASE ",\"head_dim\":7,\"num_key_value_heads\":2}", LH_EFORMAT, "head_dim");
  /* absurd but well-formed sizes: refused naming the key and the value, before anything is allocated */
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":1099511627776,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "'vocab_size' is 1099511627776, outside [1, 1073741824]");
  CHECK_ERR("{" HF_KV ",\"max_position_embeddings\":1e300}", LH_EFORMAT, "'max_position_embeddings' is 1000000");
  CHECK_ERR("{" HF_KV ",\"bos_token_id\":1099511627776}", LH_EFORMAT, "'bos_token_id' is 1099511627776, outside the vocabulary");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":1073741824,"
            "\"num_experts_per_tok\":2}",
            LH_EFORMAT, "'num_local_experts' is 1073741824, more than longhaul's limit of 1024");
  CHECK_EQ(parse("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                 "\"num_local_experts\":1024,\"num_experts_per_tok\":2}"),
           LH_OK);
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":1000000000,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "num_attention_heads (4) x head_dim (250000000)");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":1073741824,\"hidden_size\":4096,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "vocab_size (1073741824) x hidden_size (4096)");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":4096,\"intermediate_size\":1073741824,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,\"num_experts_per_tok\":2}",
            LH_EFORMAT, "intermediate_size (1073741824) x hidden_size (4096)");
}

/* A repeated key anywhere in config.json is refused, whatever the object's size: transformers'
 * json.load keeps the last value and cJSON the first, so picking one would load another model
 * than the reference does. A 3 MB config of 200,000 keys was checked pair by pair (minutes). */
static void test_duplicate_keys(void) {
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4,\"factor\":8,"
            "\"original_max_position_embeddings\":64}}",
            LH_EFORMAT, "'factor' appears more than once");
  lh_buf b = {0};
  lh_buf_append_str(&b, "{" HF_BASE);
  for (int i = 0; i < 200000; i++) lh_buf_printf(&b, ",\"k%07d\":0", i);
  lh_buf_append_str(&b, ",\"k0199999\":1}"); /* the last key again: every pair is compared before it */
  memset(&err, 0, sizeof err);
  double t0 = lh_now();
  CHECK_EQ(lh_config_parse(b.data, b.len, "dir/config.json", &cfg, &err), LH_EFORMAT);
  double secs = lh_now() - t0;
  CHECK_STR_CONTAINS(err.msg, "'k0199999' appears more than once");
  CHECK_MSG(secs < 10, "200,000 keys took %.1f s to check for duplicates", secs);
  lh_buf_free(&b);
}

static void test_unsupported(void) {
  CHECK_ERR("{" HF_KV ",\"sliding_window\":4096}", LH_EUNSUPPORTED, "sliding_window");
  CHECK_ERR("{" HF_KV ",\"hidden_act\":\"gelu\"}", LH_EUNSUPPORTED, "hidden_act");
  CHECK_ERR("{" HF_KV ",\"quantization_config\":{\"bits\":4}}", LH_EUNSUPPORTED, "quantization_config");
  CHECK_ERR("{" HF_KV ",\"use_qk_norm\":true}", LH_EUNSUPPORTED, "use_qk_norm");
  CHECK_ERR("{" HF_KV ",\"n_shared_experts\":1}", LH_EUNSUPPORTED, "n_shared_experts");
  CHECK_ERR("{\"model_type\":\"minimax\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_local_experts\":[4,4,4,4],"
            "\"num_experts_per_tok\":2}",
            LH_EUNSUPPORTED, "num_local_experts");
}

static void test_original(void) {
  tw_log_begin();
  CHECK_EQ(parse("{" ORIG_BASE ",\"head_dim\":16,\"rotary_dim\":8,\"layernorm_full_attention_alpha\":3.5565588200778455,"
                 "\"layernorm_full_attention_beta\":1.0,\"layernorm_linear_attention_alpha\":3.25,"
                 "\"layernorm_linear_attention_beta\":0.75,\"layernorm_mlp_alpha\":2.5,\"layernorm_mlp_beta\":0.5,"
                 "\"shared_intermediate_size\":0,\"shared_moe_mode\":\"softmax\",\"rms_norm_eps\":1e-5}"),
           LH_OK);
  CHECK(!strcmp(cfg.model_type, "minimax_text_01"));
  CHECK_EQ(cfg.layer_kind[0], LH_LAYER_LIGHTNING);
  CHECK_EQ(cfg.layer_kind[3], LH_LAYER_SOFTMAX);
  CHECK_EQ(cfg.n_lightning, 3);
  CHECK_EQ(cfg.rotary_dim, 8);
  CHECK_EQ(cfg.head_dim, 16);
  CHECK(cfg.rope_theta == 1e7);
  CHECK(cfg.attn_alpha[LH_LAYER_SOFTMAX] == (float)3.5565588200778455);
  CHECK(cfg.attn_beta[LH_LAYER_SOFTMAX] == 1.0f);
  CHECK(cfg.attn_alpha[LH_LAYER_LIGHTNING] == 3.25f);
  CHECK(cfg.attn_beta[LH_LAYER_LIGHTNING] == 0.75f);
  CHECK(cfg.mlp_alpha == 2.5f && cfg.mlp_beta == 0.5f);
  CHECK_EQ(cfg.postnorm, 1);
  CHECK_EQ(cfg.block_size, 256);
  CHECK_EQ((int)tw_log_len, 0);
  /* defaults: rotary_dim absent or null means the whole head; block_size is read when present */
  CHECK_EQ(parse("{" ORIG_BASE "}"), LH_OK);
  CHECK_EQ(cfg.rotary_dim, 16);
  CHECK(cfg.attn_alpha[0] == 1 && cfg.mlp_beta == 1);
  CHECK_EQ(parse("{" ORIG_BASE ",\"rotary_dim\":null,\"block_size\":64,\"shared_intermediate_size\":[0,0,0,0]}"),
           LH_OK);
  CHECK_EQ(cfg.rotary_dim, 16);
  CHECK_EQ(cfg.block_size, 64);
  /* vLLM's alias decoder_attention_types */
  CHECK_EQ(parse("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":4,\"num_local_experts\":4,"
                 "\"num_experts_per_tok\":2,\"decoder_attention_types\":[1,0],\"postnorm\":true,\"rope_theta\":1e4}"),
           LH_OK);
  CHECK_EQ(cfg.layer_kind[0], LH_LAYER_SOFTMAX);
  CHECK_EQ(cfg.layer_kind[1], LH_LAYER_LIGHTNING);
  /* all-lightning models need no rope_theta */
  CHECK_EQ(parse("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_key_value_heads\":4,"
                 "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0],\"postnorm\":true}"),
           LH_OK);
  /* HF-form keys are ignored in this form, loudly */
  tw_log_begin();
  CHECK_EQ(parse("{" ORIG_BASE ",\"layer_types\":[\"full_attention\",\"full_attention\",\"full_attention\","
                 "\"full_attention\"],\"mlp_alpha_factor\":9}"),
           LH_OK);
  CHECK_EQ(cfg.n_softmax, 1);
  CHECK(cfg.mlp_alpha == 1);
  CHECK_STR_CONTAINS(tw_log, "'layer_types'");
  CHECK_STR_CONTAINS(tw_log, "'mlp_alpha_factor'");
  lh_log_set_sink(NULL, NULL);
}

static void test_original_errors(void) {
  CHECK_ERR("{" ORIG_BASE ",\"shared_intermediate_size\":8}", LH_EUNSUPPORTED, "shared_intermediate_size");
  CHECK_ERR("{" ORIG_BASE ",\"shared_intermediate_size\":[0,8,0,0]}", LH_EUNSUPPORTED, "shared_intermediate_size");
  CHECK_ERR("{" ORIG_BASE ",\"shared_intermediate_size\":\"x\"}", LH_EFORMAT, "shared_intermediate_size");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,0,1],\"rope_theta\":1e7}",
            LH_EUNSUPPORTED, "postnorm");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,0,1],\"rope_theta\":1e7,\"postnorm\":false}",
            LH_EUNSUPPORTED, "postnorm");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,0,1],\"rope_theta\":1e7,\"postnorm\":1}",
            LH_EFORMAT, "postnorm");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"postnorm\":true,\"rope_theta\":1e7}",
            LH_EFORMAT, "attn_type_list");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,2,1],\"postnorm\":true,\"rope_theta\":1e7}",
            LH_EFORMAT, "attn_type_list");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,1],\"postnorm\":true,\"rope_theta\":1e7}",
            LH_EFORMAT, "attn_type_list");
  CHECK_ERR("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
            "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"num_local_experts\":4,"
            "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0,0,1],\"postnorm\":true}",
            LH_EFORMAT, "rope_theta");
  CHECK_ERR("{" ORIG_BASE ",\"rotary_dim\":7}", LH_EFORMAT, "rotary_dim");
  CHECK_ERR("{" ORIG_BASE ",\"rotary_dim\":32}", LH_EFORMAT, "rotary_dim");
  CHECK_ERR("{" ORIG_BASE ",\"rotary_dim\":0}", LH_EFORMAT, "rotary_dim");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}", LH_EUNSUPPORTED, "rope_scaling");
  CHECK_ERR("{" ORIG_BASE ",\"layernorm_mlp_alpha\":\"3.5\"}", LH_EFORMAT, "layernorm_mlp_alpha");
}

/* YaRN (rope_type "yarn"): the keys transformers' _compute_yarn_parameters reads, its defaults, and
 * clear refusals; the frequencies themselves are checked against transformers by the hf_yarn_gqa2
 * and orig_yarn_partial_gqa2 fixtures (test_engine_parity). */
static void test_yarn(void) {
  CHECK_EQ(parse("{" ORIG_BASE ",\"head_dim\":16,\"rotary_dim\":8,\"rope_scaling\":{\"rope_type\":\"yarn\","
                 "\"factor\":8,\"original_max_position_embeddings\":32,\"beta_fast\":8,\"beta_slow\":0.5,"
                 "\"truncate\":false,\"attention_factor\":1.25}}"),
           LH_OK);
  CHECK(cfg.rope_yarn_factor == 8 && cfg.rope_yarn_original_max == 32);
  CHECK(cfg.rope_yarn_beta_fast == 8 && cfg.rope_yarn_beta_slow == 0.5 && cfg.rope_yarn_truncate == 0);
  CHECK(cfg.rope_attention_factor == 1.25f);
  CHECK_EQ(cfg.rotary_dim, 8);
  /* defaults: beta 32 / 1 (also for 0 or null, as `or` does there), truncate, 0.1 ln(factor) + 1 */
  CHECK_EQ(parse("{" ORIG_BASE ",\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4,"
                 "\"original_max_position_embeddings\":64,\"beta_fast\":0,\"beta_slow\":null}}"),
           LH_OK);
  CHECK(cfg.rope_yarn_beta_fast == 32 && cfg.rope_yarn_beta_slow == 1 && cfg.rope_yarn_truncate == 1);
  CHECK(cfg.rope_attention_factor == (float)(0.1 * log(4.0) + 1));
  /* mscale / mscale_all_dim, both non-zero: their ratio */
  CHECK_EQ(parse("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,"
                 "\"original_max_position_embeddings\":4096,\"mscale\":1,\"mscale_all_dim\":0.5}}"),
           LH_OK);
  CHECK(cfg.rope_attention_factor == (float)((0.1 * log(40.0) + 1) / (0.05 * log(40.0) + 1)));
  /* factor null: max_position_embeddings / original */
  CHECK_EQ(parse("{" ORIG_BASE ",\"max_position_embeddings\":8192,\"rope_scaling\":{\"rope_type\":\"yarn\","
                 "\"factor\":null,\"original_max_position_embeddings\":1024}}"),
           LH_OK);
  CHECK(cfg.rope_yarn_factor == 8);
  /* the HF form reads the same keys from rope_parameters */
  CHECK_EQ(parse("{" HF_KV ",\"rope_parameters\":{\"rope_type\":\"yarn\",\"rope_theta\":1e4,\"factor\":2,"
                 "\"original_max_position_embeddings\":128}}"),
           LH_OK);
  CHECK(cfg.rope_yarn_factor == 2 && cfg.rope_theta == 1e4 && cfg.rotary_dim == cfg.head_dim);
  /* plain RoPE: off, factor 1 */
  CHECK_EQ(parse("{" ORIG_BASE ",\"rope_scaling\":null}"), LH_OK);
  CHECK(cfg.rope_yarn_factor == 0 && cfg.rope_attention_factor == 1.0f);
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"original_max_position_embeddings\":64}}",
            LH_EFORMAT, "rope_scaling.factor");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":0.5,"
            "\"original_max_position_embeddings\":64}}",
            LH_EFORMAT, "factor");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64.5}}",
            LH_EFORMAT, "original_max_position_embeddings");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64,\"truncate\":1}}",
            LH_EFORMAT, "truncate");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64,\"attention_factor\":-1}}",
            LH_EFORMAT, "attention_factor");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64,\"low_freq_factor\":1}}",
            LH_EUNSUPPORTED, "low_freq_factor");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":[1]}", LH_EFORMAT, "rope_scaling");
  CHECK_ERR("{" ORIG_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64,\"partial_rotary_factor\":0.5}}",
            LH_EUNSUPPORTED, "rotary_dim");
  CHECK_ERR("{" HF_KV ",\"head_dim\":16,\"rope_parameters\":{\"rope_type\":\"yarn\",\"factor\":2,"
            "\"original_max_position_embeddings\":64,\"partial_rotary_factor\":0.5}}",
            LH_EUNSUPPORTED, "partial_rotary_factor");
}

/* The documented mapping: an HF config and its original-form translation give the same lh_config
 * (apart from model_type and, with rotary_dim, the rotary width the HF form cannot express). */
static void test_form_equivalence(void) {
  lh_config a, b;
  CHECK_EQ(parse("{" HF_BASE ",\"num_key_value_heads\":2,\"head_dim\":8,\"block_size\":32,"
                 "\"layer_types\":[\"linear_attention\",\"full_attention\",\"linear_attention\",\"full_attention\"],"
                 "\"full_attn_alpha_factor\":1.25,\"full_attn_beta_factor\":0.5,\"linear_attn_alpha_factor\":2,"
                 "\"linear_attn_beta_factor\":0.25,\"mlp_alpha_factor\":1.5,\"mlp_beta_factor\":0.75,"
                 "\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":10000.0},\"rms_norm_eps\":1e-6}"),
           LH_OK);
  a = cfg;
  CHECK_EQ(parse("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,"
                 "\"num_local_experts\":4,\"num_experts_per_tok\":2,\"block_size\":32,\"attn_type_list\":[0,1,0,1],"
                 "\"layernorm_full_attention_alpha\":1.25,\"layernorm_full_attention_beta\":0.5,"
                 "\"layernorm_linear_attention_alpha\":2,\"layernorm_linear_attention_beta\":0.25,"
                 "\"layernorm_mlp_alpha\":1.5,\"layernorm_mlp_beta\":0.75,\"rope_theta\":10000.0,"
                 "\"rms_norm_eps\":1e-6,\"postnorm\":true}"),
           LH_OK);
  b = cfg;
  memset(a.model_type, 0, sizeof a.model_type);
  memset(b.model_type, 0, sizeof b.model_type);
  CHECK(!memcmp(&a, &b, sizeof a));
}

/* Token ids outside [0, vocab_size) are errors naming the key and the value, in config.json (both
 * forms, an id or a list) and in a model folder's generation_config.json. */
static void test_token_ids(void) {
  CHECK_ERR("{" HF_KV ",\"eos_token_id\":100}", LH_EFORMAT, "key 'eos_token_id' is 100, outside the vocabulary [0, 100)");
  CHECK_ERR("{" HF_KV ",\"bos_token_id\":4096}", LH_EFORMAT, "key 'bos_token_id' is 4096");
  CHECK_ERR("{" HF_KV ",\"eos_token_id\":[2,150]}", LH_EFORMAT, "key 'eos_token_id'[1] is 150");
  CHECK_ERR("{" HF_KV ",\"eos_token_id\":-2}", LH_EFORMAT, "eos_token_id");
  CHECK_ERR("{" ORIG_BASE ",\"eos_token_id\":200}", LH_EFORMAT, "key 'eos_token_id' is 200");
  CHECK_EQ(parse("{" HF_KV ",\"eos_token_id\":99,\"bos_token_id\":0}"), LH_OK);
  CHECK_EQ(cfg.eos_token_id, 99);
  CHECK_EQ(cfg.bos_token_id, 0);
  CHECK_EQ(parse("{" HF_KV ",\"eos_token_id\":-1,\"bos_token_id\":null}"), LH_OK);
  CHECK_EQ(cfg.eos_token_id, -1);
  CHECK_EQ(cfg.bos_token_id, -1);
  /* a default the vocabulary cannot hold means none, not an error */
  CHECK_EQ(parse("{\"model_type\":\"minimax\",\"vocab_size\":2,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
                 "\"num_local_experts\":4,\"num_experts_per_tok\":2}"),
           LH_OK);
  CHECK_EQ(cfg.bos_token_id, 1);
  CHECK_EQ(cfg.eos_token_id, -1);

  /* generation_config.json */
  CHECK_EQ(parse("{" HF_KV "}"), LH_OK);
  const char *g = "{\"bos_token_id\":1,\"eos_token_id\":[2,100]}";
  CHECK_EQ(lh_generation_config_check(g, strlen(g), "dir/generation_config.json", &cfg, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "dir/generation_config.json: key 'eos_token_id'[1] is 100, outside the vocabulary");
  g = "{\"eos_token_id\":[2,99],\"do_sample\":true}";
  CHECK_EQ(lh_generation_config_check(g, strlen(g), "dir/generation_config.json", &cfg, &err), LH_OK);
  g = "{\"eos_token_id\":";
  CHECK_EQ(lh_generation_config_check(g, strlen(g), "dir/generation_config.json", &cfg, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "not valid JSON");

  /* and lh_model_open reads it */
  tw_model tm = {0};
  tw_model_init(&tm, 5);
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", tw_mkdir("gen_eos"));
  tw_write_config(&tm, dir, ",\"eos_token_id\":15");
  tw_write_model(&tm, dir, 0, 1);
  tw_write_text(tw_path(dir, "generation_config.json"), "{\"eos_token_id\": 16}");
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "generation_config.json: key 'eos_token_id' is 16, outside the vocabulary [0, 16)");
  lh_model_close(m);
  tw_write_text(tw_path(dir, "generation_config.json"), "{\"eos_token_id\": 15}");
  CHECK_MSG(lh_model_open(dir, &p, &m, &err) == LH_OK, "%s", err.msg);
  lh_model_close(m);
  tw_write_config(&tm, dir, ",\"eos_token_id\":16");
  CHECK_EQ(lh_model_open(dir, &p, &m, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "config.json: key 'eos_token_id' is 16");
  tw_model_free(&tm);
}

/* lh_config_minimax_text_01_slice is MiniMax-Text-01's config.json cut to 8 layers: the model
 * card's shapes (hidden 6144, 64 heads x 128, 8 kv heads, RoPE on half the head at base 1e7,
 * 32 experts x 9216 top-2, a softmax layer after every 7 lightning layers) and DeepNorm's alphas
 * (2 * 80 layers)^(1/4) = 3.5565588200778455, in the original form, with the slice's own vocab,
 * context and no bos/eos. */
static void test_minimax_text_01_slice(void) {
  CHECK_EQ(parse("{\"model_type\":\"minimax_text_01\",\"vocab_size\":4096,\"hidden_size\":6144,"
                 "\"intermediate_size\":9216,\"num_hidden_layers\":8,\"num_attention_heads\":64,"
                 "\"num_key_value_heads\":8,\"head_dim\":128,\"num_local_experts\":32,\"num_experts_per_tok\":2,"
                 "\"attn_type_list\":[0,0,0,0,0,0,0,1],\"layernorm_full_attention_alpha\":3.5565588200778455,"
                 "\"layernorm_full_attention_beta\":1.0,\"layernorm_linear_attention_alpha\":3.5565588200778455,"
                 "\"layernorm_linear_attention_beta\":1.0,\"layernorm_mlp_alpha\":3.5565588200778455,"
                 "\"layernorm_mlp_beta\":1.0,\"rope_theta\":10000000,\"rotary_dim\":64,\"rms_norm_eps\":1e-05,"
                 "\"postnorm\":true,\"shared_intermediate_size\":0,\"tie_word_embeddings\":false,"
                 "\"max_position_embeddings\":4194304,\"bos_token_id\":null,\"eos_token_id\":null}"),
           LH_OK);
  lh_config a = cfg, b = lh_config_minimax_text_01_slice(4096);
  CHECK(!strcmp(b.model_type, "minimax"));
  CHECK(b.n_lightning == 7 && b.n_softmax == 1 && b.layer_kind[7] == LH_LAYER_SOFTMAX);
  memset(a.model_type, 0, sizeof a.model_type);
  memset(b.model_type, 0, sizeof b.model_type);
  CHECK(!memcmp(&a, &b, sizeof a));
}

/* attn_length_scale_base: longhaul's extension of the original form (absent, null, 0: off); the HF
 * form, which transformers reads without it, refuses it unless it says off. */
static void test_length_scale_base(void) {
  tw_log_begin();
  CHECK_EQ(parse("{" ORIG_BASE "}"), LH_OK);
  CHECK_EQ(cfg.attn_length_scale_base, 0);
  CHECK_EQ(parse("{" ORIG_BASE ",\"attn_length_scale_base\":4096}"), LH_OK);
  CHECK_EQ(cfg.attn_length_scale_base, 4096);
  CHECK_EQ((int)tw_log_len, 0);
  CHECK_EQ(parse("{" ORIG_BASE ",\"attn_length_scale_base\":0}"), LH_OK);
  CHECK_EQ(cfg.attn_length_scale_base, 0);
  CHECK_EQ(parse("{" ORIG_BASE ",\"attn_length_scale_base\":null}"), LH_OK);
  CHECK_EQ(cfg.attn_length_scale_base, 0);
  CHECK_ERR("{" ORIG_BASE ",\"attn_length_scale_base\":-8}", LH_EFORMAT, "attn_length_scale_base");
  CHECK_ERR("{" ORIG_BASE ",\"attn_length_scale_base\":8.5}", LH_EFORMAT, "attn_length_scale_base");
  CHECK_ERR("{" ORIG_BASE ",\"attn_length_scale_base\":\"8\"}", LH_EFORMAT, "attn_length_scale_base");
  CHECK_ERR("{" ORIG_BASE ",\"attn_length_scale_base\":true}", LH_EFORMAT, "attn_length_scale_base");
  /* no softmax layer: accepted, said to change nothing */
  CHECK_EQ(parse("{\"model_type\":\"minimax_text_01\",\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":32,"
                 "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_local_experts\":4,\"num_key_value_heads\":4,"
                 "\"num_experts_per_tok\":2,\"attn_type_list\":[0,0],\"postnorm\":true,\"attn_length_scale_base\":8}"),
           LH_OK);
  CHECK_STR_CONTAINS(tw_log, "no layer is softmax attention");
  CHECK_ERR("{" HF_KV ",\"attn_length_scale_base\":4096}", LH_EUNSUPPORTED, "attn_length_scale_base");
  CHECK_STR_CONTAINS(err.msg, "minimax_text_01");
  CHECK_EQ(parse("{" HF_KV ",\"attn_length_scale_base\":0}"), LH_OK);
  CHECK_EQ(cfg.attn_length_scale_base, 0);
  CHECK_ERR("{" HF_KV ",\"attn_length_scale_base\":-1}", LH_EFORMAT, "attn_length_scale_base");
}

int main(void) {
  lh_test_begin("test_load_config");
  test_token_ids();
  test_hf_defaults();
  test_hf_full();
  test_hf_rope();
  test_hf_aliases_and_nulls();
  test_hf_ignores_original_keys();
  test_format_errors();
  test_duplicate_keys();
  test_unsupported();
  test_original();
  test_original_errors();
  test_yarn();
  test_form_equivalence();
  test_minimax_text_01_slice();
  test_length_scale_base();
  return lh_test_end();
}
