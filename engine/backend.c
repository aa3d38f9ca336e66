/* backend.c — the table of backends compiled into this binary. */
#include <string.h>

#include "engine/backend.h"

const lh_backend_ops *lh_backend_find(const char *name) {
  if (!name || !strcmp(name, "cpu")) return &lh_backend_cpu;
#ifdef LH_HAVE_CUDA
  if (!strcmp(name, "cuda")) return &lh_backend_cuda;
#endif
  return NULL;
}
