/* fuzz_config.c — libFuzzer target: lh_config_parse on arbitrary bytes (not NUL-terminated).
 * An accepted config must satisfy the invariants lh_config_parse promises. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine/internal.h"
#include "util/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  lh_log_set_level(LH_LOG_QUIET);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lh_config c;
  lh_error err;
  if (lh_config_parse((const char *)data, size, "fuzz/config.json", &c, &err) != LH_OK) return 0;
  int ok = c.n_layers >= 1 && c.n_layers <= LH_MAX_LAYERS && c.n_heads >= 1 && c.n_heads <= LH_MAX_HEADS &&
           c.top_k >= 1 && c.top_k <= c.n_experts && c.head_dim >= 1 && c.rotary_dim >= 1 &&
           c.rotary_dim <= c.head_dim && c.rotary_dim % 2 == 0 && c.n_lightning + c.n_softmax == c.n_layers &&
           c.rms_norm_eps > 0 && c.rope_theta > 0 && c.block_size >= 1 && c.attn_length_scale_base >= 0 &&
           (c.attn_length_scale_base == 0 || !strcmp(c.model_type, "minimax_text_01")) &&
           (c.n_softmax == 0 || (c.n_kv_heads >= 1 && c.n_heads % c.n_kv_heads == 0));
  if (!ok) __builtin_trap();
  return 0;
}
