/* internal.h — the engine's private structures, shared by the .c files in engine/ (not for other subsystems).
 *
 * Who fills what: engine/model.c (lh_model_open) parses config.json (engine/config.c), maps and
 * validates the safetensors files (engine/safetensors.c) and builds the host weight views
 * (engine/weights.c); then, unless the backend is "none", binds the backend named in the params
 * (ops->open). engine/state.c and engine/forward.c use the bound backend.
 */
#ifndef LH_ENGINE_INTERNAL_H
#define LH_ENGINE_INTERNAL_H

#include "engine/backend.h"
#include "engine/engine.h"

typedef struct lh_mapping {
  char path[4096];
  void *base;     /* mmap'd file */
  size_t size;
} lh_mapping;

struct lh_model {
  lh_config cfg;
  lh_model_params params;
  char dir[4096];
  char id[65];
  char backend_name[16];
  lh_weights w;              /* host views: into the mappings, or into owned conversions */
  lh_mapping *maps;
  int n_maps;
  void **owned;              /* allocations the views point into (freed at close) */
  int n_owned;
  const lh_backend_ops *ops; /* NULL for backend "none" (config + weights only) */
  lh_backend *be;
  int64_t max_rows;          /* rows per backend call (params.max_chunk) */
};

/* Parse config.json text into cfg (both forms); path is used in messages. */
lh_status lh_config_parse(const char *json, size_t len, const char *path, lh_config *cfg, lh_error *err);

#endif
