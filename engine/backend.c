/* backend.c — the table of backends compiled into this binary, and why one is missing. "gpu" is
 * another name for "cuda". */
#include <string.h>

#include "engine/backend.h"

#ifndef LH_NO_CUDA_CAUSE
#define LH_NO_CUDA_CAUSE "nvcc was not found at build time"
#define LH_NO_CUDA_FIX "rebuild with nvcc on PATH"
#endif

const lh_backend_ops *lh_backend_find(const char *name) {
  if (!name || !strcmp(name, "cpu")) return &lh_backend_cpu;
#ifdef LH_HAVE_CUDA
  if (!strcmp(name, "cuda") || !strcmp(name, "gpu")) return &lh_backend_cuda;
#endif
  return NULL;
}

lh_status lh_backend_check(const char *name, lh_error *err) {
  if (lh_backend_find(name)) return LH_OK;
  if (!strcmp(name, "cuda") || !strcmp(name, "gpu"))
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "this longhaul was built without CUDA (" LH_NO_CUDA_CAUSE "); use --device cpu or " LH_NO_CUDA_FIX);
  return lh_error_set(err, LH_EUNSUPPORTED, "unknown device '%s': use cpu, or cuda (also called gpu)", name);
}
