/* cmd_model.c — `longhaul model info --model DIR [--json]`: describe a model folder.
 *
 * Opens the folder with backend "none" (config and weights are parsed and validated in full, no
 * compute backend is bound) and its tokenizer and chat format as run takes them
 * (lh_chat_tokenizer_open), and prints the parsed configuration, the tokenizer, the layer plan,
 * parameter counts, memory and FLOPs. A folder without tokenizer.json is described (the weights
 * alone serve logits and generate); a tokenizer that run would refuse fails it. Sizes of the state
 * and the KV cache are printed for both KV dtypes the backends use (fp32 on the CPU, bf16 on
 * CUDA). --json prints one JSON object for machines instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/engine.h"
#include "cli/commands.h"
#include "jobs/chat.h"
#include "util/fs.h"
#include "util/log.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul model info --model DIR [--chat-template minimax|raw] [--json]\n\n"
          "Describe a MiniMax model folder (config.json + safetensors): the parsed configuration, the\n"
          "tokenizer (its vocabulary and chat format), the layer plan, parameter counts, memory needed and\n"
          "FLOPs per token. Every tensor is validated, and tokenizer.json and the chat template are loaded\n"
          "and checked as run loads them (a folder without tokenizer.json is described without one).\n"
          "  --model DIR             the model folder\n"
          "  --chat-template FORMAT  check the tokenizer for this format, as run --chat-template does\n"
          "  --json                  print one JSON object instead of text\n\n"
          "exit status: 0 described, 1 the machine failed it (a read error, out of memory), 2 usage or a\n"
          "--model that is not a model folder (missing, not a folder, no or a bad config.json or weights,\n"
          "a bad tokenizer.json or chat template)\n");
}

static void human_bytes(double b, char *out, size_t n) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  while (b >= 1024 && u < 5) b /= 1024, u++;
  snprintf(out, n, u ? "%.2f %s" : "%.0f %s", b, unit[u]);
}

static void human_count(double x, char *out, size_t n) {
  static const char *const unit[] = {"", "K", "M", "G", "T", "P"};
  int u = 0;
  while (x >= 1000 && u < 5) x /= 1000, u++;
  snprintf(out, n, u ? "%.3g%s" : "%.0f%s", x, unit[u]);
}

/* "LLLLLLLS" and, when the plan repeats a shorter pattern, "(LLLLLLLS) x 10". */
static void layer_plan(const lh_config *c, char *plan, size_t n, char *pattern, size_t pn) {
  int L = c->n_layers;
  for (int i = 0; i < L && (size_t)i + 1 < n; i++) plan[i] = c->layer_kind[i] == LH_LAYER_LIGHTNING ? 'L' : 'S';
  plan[(size_t)L < n ? (size_t)L : n - 1] = 0;
  pattern[0] = 0;
  for (int p = 1; p < L; p++) {
    if (L % p) continue;
    int ok = 1;
    for (int i = p; i < L && ok; i++) ok = plan[i] == plan[i - p];
    if (ok) {
      snprintf(pattern, pn, "(%.*s) x %d", p, plan, L / p);
      return;
    }
  }
}

/* A failure to open the folder's model or tokenizer as an exit status: the machine's (a read the
 * system refused, memory, an interrupt) is 1, the folder's 2. */
static int open_failed(lh_status st, const lh_error *err) {
  fprintf(stderr, "longhaul model info: %s\n", err->msg);
  const int machine = st == LH_EIO || st == LH_ENOMEM || st == LH_EFULL || st == LH_EBUSY || st == LH_EBACKEND ||
                      st == LH_EINTR;
  return machine ? LH_EXIT_FAILED : LH_EXIT_USAGE;
}

static int info(const char *dir, const char *chat_template, int json) {
  lh_model_params mp = lh_model_default_params();
  mp.backend = "none";
  lh_model *m;
  lh_error err = {0};
  if (lh_model_check(dir, "none", &err)) { /* missing, or a file or a device: named as such */
    fprintf(stderr, "longhaul model info: --model: %s\n", err.msg);
    return LH_EXIT_USAGE;
  }
  lh_status st_open = lh_model_open(dir, &mp, &m, &err);
  if (st_open) return open_failed(st_open, &err);
  const lh_config *c = lh_model_config(m);
  char tpath[4096];
  lh_path_join(tpath, sizeof tpath, dir, "tokenizer.json");
  lh_tokenizer *tok = NULL;
  lh_chat_format chat = {0};
  if (lh_file_check_regular(tpath, NULL) != LH_ENOTFOUND &&
      (st_open = lh_chat_tokenizer_open(dir, chat_template, c->vocab_size, &tok, &chat, &err))) {
    lh_model_close(m);
    return open_failed(st_open, &err);
  }
  lh_model_stats st;
  lh_model_get_stats(m, &st);
  char plan[LH_MAX_LAYERS + 1], pattern[LH_MAX_LAYERS + 32];
  layer_plan(c, plan, sizeof plan, pattern, sizeof pattern);
  int64_t kvd = (int64_t)c->n_kv_heads * c->head_dim;
  double kv32 = (double)c->n_softmax * 2 * (double)kvd * 4, kv16 = kv32 / 2;
  double fp32_bytes = (double)st.params_total * 4;
  /* Lightning per token (recurrent form): S = decay * S + k^T v and o = q S, about 4 d^2 per head. */
  double lin_flops = 4.0 * c->n_lightning * c->n_heads * (double)c->head_dim * c->head_dim;
  int original = !strcmp(c->model_type, "minimax_text_01");

  if (json) {
    cJSON *o = cJSON_CreateObject(), *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", dir);
    cJSON_AddStringToObject(o, "id", lh_model_id(m));
    cJSON_AddStringToObject(o, "form", original ? "minimax_text_01" : "minimax");
    if (tok) {
      cJSON *t = cJSON_AddObjectToObject(o, "tokenizer");
      cJSON_AddStringToObject(t, "id", lh_tokenizer_id(tok));
      cJSON_AddNumberToObject(t, "vocab_size", lh_tokenizer_vocab_size(tok));
      if (lh_chat_format_name(&chat)) cJSON_AddStringToObject(t, "chat_template", lh_chat_format_name(&chat));
      else cJSON_AddNullToObject(t, "chat_template");
    } else {
      cJSON_AddNullToObject(o, "tokenizer");
    }
    cJSON_AddItemToObject(o, "config", cfg);
    cJSON_AddStringToObject(cfg, "model_type", c->model_type);
    cJSON_AddNumberToObject(cfg, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(cfg, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(cfg, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(cfg, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(cfg, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(cfg, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(cfg, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(cfg, "num_local_experts", c->n_experts);
    cJSON_AddNumberToObject(cfg, "num_experts_per_tok", c->top_k);
    cJSON_AddNumberToObject(cfg, "block_size", c->block_size);
    cJSON_AddNumberToObject(cfg, "rotary_dim", c->rotary_dim);
    cJSON_AddNumberToObject(cfg, "rope_theta", c->rope_theta);
    if (c->attn_length_scale_base) cJSON_AddNumberToObject(cfg, "attn_length_scale_base", c->attn_length_scale_base);
    cJSON_AddNumberToObject(cfg, "rms_norm_eps", c->rms_norm_eps);
    cJSON_AddBoolToObject(cfg, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddBoolToObject(cfg, "postnorm", c->postnorm);
    cJSON_AddNumberToObject(cfg, "max_position_embeddings", c->max_position_embeddings);
    cJSON_AddNumberToObject(cfg, "bos_token_id", c->bos_token_id);
    cJSON_AddNumberToObject(cfg, "eos_token_id", c->eos_token_id);
    cJSON_AddNumberToObject(cfg, "linear_attn_alpha", c->attn_alpha[LH_LAYER_LIGHTNING]);
    cJSON_AddNumberToObject(cfg, "linear_attn_beta", c->attn_beta[LH_LAYER_LIGHTNING]);
    cJSON_AddNumberToObject(cfg, "full_attn_alpha", c->attn_alpha[LH_LAYER_SOFTMAX]);
    cJSON_AddNumberToObject(cfg, "full_attn_beta", c->attn_beta[LH_LAYER_SOFTMAX]);
    cJSON_AddNumberToObject(cfg, "mlp_alpha", c->mlp_alpha);
    cJSON_AddNumberToObject(cfg, "mlp_beta", c->mlp_beta);
    cJSON_AddStringToObject(o, "layer_plan", plan);
    cJSON_AddNumberToObject(o, "n_lightning", c->n_lightning);
    cJSON_AddNumberToObject(o, "n_softmax", c->n_softmax);
    cJSON_AddNumberToObject(o, "params_total", (double)st.params_total);
    cJSON_AddNumberToObject(o, "params_active", (double)st.params_active);
    cJSON_AddNumberToObject(o, "bytes_on_disk", (double)st.weight_bytes);
    cJSON_AddNumberToObject(o, "weights_fp32_bytes", fp32_bytes);
    cJSON_AddNumberToObject(o, "lightning_state_bytes", (double)st.lightning_state_bytes);
    cJSON_AddNumberToObject(o, "kv_bytes_per_token_fp32", kv32);
    cJSON_AddNumberToObject(o, "kv_bytes_per_token_bf16", kv16);
    cJSON_AddNumberToObject(o, "kv_bytes_128k_fp32", kv32 * 131072);
    cJSON_AddNumberToObject(o, "kv_bytes_1m_fp32", kv32 * 1048576);
    cJSON_AddNumberToObject(o, "kv_bytes_128k_bf16", kv16 * 131072);
    cJSON_AddNumberToObject(o, "kv_bytes_1m_bf16", kv16 * 1048576);
    cJSON_AddNumberToObject(o, "flops_per_token_linear", st.flops_per_token);
    cJSON_AddNumberToObject(o, "flops_per_token_lightning", lin_flops);
    cJSON_AddNumberToObject(o, "attn_flops_per_token_per_ctx", st.attn_flops_per_token_per_ctx);
    char *s = cJSON_Print(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
    lh_tokenizer_close(tok);
    lh_model_close(m);
    return s ? LH_EXIT_OK : LH_EXIT_FAILED;
  }

  char a[64], b[64], d[64], e[64];
  printf("model        %s\n", dir);
  printf("id           %s\n", lh_model_id(m));
  printf("form         %s\n", original ? "minimax_text_01 (original MiniMax release)" : "minimax (HF transformers)");
  if (tok) {
    printf("tokenizer    %d tokens, id %s\n", lh_tokenizer_vocab_size(tok), lh_tokenizer_id(tok));
    printf("chat format  %s\n", chat.kind == LH_CHAT_MINIMAX ? "minimax (MiniMax-Text-01's turns)"
                                : chat.kind == LH_CHAT_RAW   ? "raw (the message texts unformatted)"
                                                             : "none: no chat template (completions only; chat "
                                                               "requests need --chat-template)");
  } else {
    printf("tokenizer    none (no tokenizer.json: run, niah and tokenize need one)\n");
  }
  printf("\nconfiguration\n");
  printf("  vocab %d, hidden %d, %d layers, %d heads x head_dim %d, %d kv heads (%d query heads per kv head)\n",
         c->vocab_size, c->hidden_size, c->n_layers, c->n_heads, c->head_dim, c->n_kv_heads,
         c->n_kv_heads ? c->n_heads / c->n_kv_heads : 0);
  printf("  MoE: %d experts, top-%d, intermediate %d (SwiGLU)\n", c->n_experts, c->top_k, c->intermediate_size);
  printf("  lightning: block %d;  softmax: RoPE theta %g on %d of %d dims per head%s\n", c->block_size,
         c->rope_theta, c->rotary_dim, c->head_dim, c->rotary_dim < c->head_dim ? " (partial)" : "");
  if (c->attn_length_scale_base)
    printf("  softmax queries scaled by 1 + s_h max(0, ln((pos+1)/%d)), s_h learned per head\n",
           c->attn_length_scale_base);
  printf("  residual factors: lightning alpha %.9g beta %.9g, softmax alpha %.9g beta %.9g, MoE alpha %.9g "
         "beta %.9g\n",
         c->attn_alpha[LH_LAYER_LIGHTNING], c->attn_beta[LH_LAYER_LIGHTNING], c->attn_alpha[LH_LAYER_SOFTMAX],
         c->attn_beta[LH_LAYER_SOFTMAX], c->mlp_alpha, c->mlp_beta);
  printf("  rms_norm_eps %g, embeddings %s, context limit %d, bos %d, eos %d\n", c->rms_norm_eps,
         c->tie_word_embeddings ? "tied" : "untied", c->max_position_embeddings, c->bos_token_id, c->eos_token_id);
  printf("\nlayer plan   %s%s%s\n", plan, pattern[0] ? "  = " : "", pattern);
  printf("             %d lightning + %d softmax\n", c->n_lightning, c->n_softmax);
  human_count((double)st.params_total, a, sizeof a);
  human_count((double)st.params_active, b, sizeof b);
  printf("\nparameters   %s total (%lld), %s active per token (%lld)\n", a, (long long)st.params_total, b,
         (long long)st.params_active);
  human_bytes((double)st.weight_bytes, a, sizeof a);
  human_bytes(fp32_bytes, b, sizeof b);
  printf("\nmemory\n  weights    %s on disk (mmap'd as stored); %s if held in fp32\n", a, b);
  human_bytes((double)st.lightning_state_bytes, a, sizeof a);
  printf("  lightning  %s per sequence (%d layers x %d heads x %d x %d fp32), constant in length\n", a,
         c->n_lightning, c->n_heads, c->head_dim, c->head_dim);
  human_bytes(kv32, a, sizeof a);
  human_bytes(kv16, b, sizeof b);
  printf("  KV         %s per token in fp32 (CPU), %s in bf16 (CUDA)\n", a, b);
  human_bytes(kv32 * 131072, a, sizeof a);
  human_bytes(kv16 * 131072, b, sizeof b);
  human_bytes(kv32 * 1048576, d, sizeof d);
  human_bytes(kv16 * 1048576, e, sizeof e);
  printf("             at 128K tokens: %s fp32, %s bf16;  at 1M tokens: %s fp32, %s bf16\n", a, b, d, e);
  human_count(st.flops_per_token, a, sizeof a);
  human_count(lin_flops, b, sizeof b);
  human_count(st.attn_flops_per_token_per_ctx, d, sizeof d);
  human_count(st.flops_per_token + lin_flops + st.attn_flops_per_token_per_ctx * 131072, e, sizeof e);
  printf("\nFLOPs/token  %s linear (projections, router, %d active experts, lm_head) + %s lightning\n", a, c->top_k,
         b);
  printf("             + %s softmax attention per context token (%s per token at 128K context)\n", d, e);
  lh_tokenizer_close(tok);
  lh_model_close(m);
  return LH_EXIT_OK;
}

int lh_cmd_model(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? LH_EXIT_USAGE : LH_EXIT_OK;
  }
  if (strcmp(argv[1], "info")) {
    fprintf(stderr, "longhaul model: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  const char *dir = NULL, *chat_template = NULL;
  int json = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--model") && i + 1 < argc) {
      dir = argv[++i];
    } else if (!strcmp(argv[i], "--chat-template") && i + 1 < argc) {
      chat_template = argv[++i];
    } else if (!strcmp(argv[i], "--json")) {
      json = 1;
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return LH_EXIT_OK;
    } else {
      fprintf(stderr, "longhaul model info: unknown or incomplete option '%s'\n", argv[i]);
      usage(stderr);
      return LH_EXIT_USAGE;
    }
  }
  if (!dir) {
    fprintf(stderr, "longhaul model info: --model DIR is required\n");
    return LH_EXIT_USAGE;
  }
  return info(dir, chat_template, json);
}
