/* weights.h — build the host weight views of a model from its safetensors index (internal).
 *
 * lh_weights_build fills m->w from the tensors in s for both naming schemes and checks every shape
 * against m->cfg; lh_lightning_slopes gives the per-head decay rates a config implies. Both are
 * used by lh_model_open (engine/model.c) and by the load tests.
 */
#ifndef LH_ENGINE_WEIGHTS_H
#define LH_ENGINE_WEIGHTS_H

#include "engine/internal.h"
#include "engine/safetensors.h"

/* Views into s's mappings (slices of fused expert tensors are views too); allocations go to
 * m->owned. Missing tensors, wrong shapes and contradictory naming are errors naming the tensor and
 * file; unknown tensors are warnings. Also fills each lightning layer's slope[]. */
lh_status lh_weights_build(lh_model *m, lh_st_set *s, lh_error *err);

/* Per-head decay rates of lightning layer `layer` as the code defining cfg's form computes them:
 * for `minimax` configs transformers' MiniMaxLightningAttention.get_slope_rate (float32 pow of
 * 2^(-8/H) to the power h+1, times 1 - l/(L-1+1e-5) + 1e-5 in float32); for `minimax_text_01`
 * configs the original code's _build_slope_tensor (ALiBi-style slopes in double, interleaved when H
 * is not a power of two, rounded to float32) times 1 - l/(L-1) + 1e-5 in float32. */
void lh_lightning_slopes(const lh_config *cfg, int layer, float *slope);

#endif
