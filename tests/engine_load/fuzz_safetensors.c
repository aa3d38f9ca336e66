/* fuzz_safetensors.c — libFuzzer target: lh_st_parse + lh_st_finish on an arbitrary file image.
 * Every accepted tensor's first and last byte are read, so a span that escapes the input is an
 * ASan report, not a silent pass. */
#include <stddef.h>
#include <stdint.h>

#include "engine/safetensors.h"
#include "util/log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  lh_log_set_level(LH_LOG_QUIET);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lh_st_set *s = lh_st_new();
  if (!s) return 0;
  lh_error err;
  volatile uint8_t sink = 0;
  if (lh_st_parse(s, data, size, 0, "fuzz.safetensors", &err) == LH_OK && lh_st_finish(s, &err) == LH_OK) {
    for (int i = 0; i < s->n; i++) {
      const lh_st_tensor *t = &s->t[i];
      if (t->nbytes) sink ^= ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->nbytes - 1];
      if (lh_st_find(s, t->name) != t) __builtin_trap();
    }
  }
  (void)sink;
  lh_st_close(s);
  return 0;
}
