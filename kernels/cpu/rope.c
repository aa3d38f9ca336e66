/* rope.c — rotary position embedding, rotate-half convention (HF's apply_rotary_pos_emb).
 *
 * HF builds the angle as an fp32 product inv_freq * position and takes cos/sin of that fp32
 * value; the same rounding is kept here (the angle is formed in fp32, cos/sin are taken in double
 * and rounded), so positions far into a long context rotate exactly as the reference does.
 * Partial rotary (the original MiniMax-Text-01 `rotary_dim`, vLLM's neox style): only the first
 * rotary_dim dims of a head rotate, pairing i with i + rotary_dim/2, with frequencies over
 * rotary_dim; the remaining dims pass through.
 * YaRN (lh_rope_inv_freq_yarn) changes only the frequency table and multiplies cos and sin by its
 * attention factor, as transformers' rotary embedding does (cos = emb.cos() * attention_scaling).
 *
 * Length-aware query scaling (lh_length_scale) lives here too: like RoPE it is a function of the
 * absolute position alone, applied to q after the rotation, so chunked prefill and decode compute
 * it the same way wherever a call starts.
 */
#include <math.h>

#include "kernels/cpu/ops.h"

void lh_rope_inv_freq(double theta, int rotary_dim, float *inv_freq) {
  for (int i = 0; i < rotary_dim / 2; i++) {
    float e = (float)(2 * i) / (float)rotary_dim; /* torch.arange(0, R, 2).float() / R */
    float p = (float)pow(theta, (double)e);
    inv_freq[i] = 1.0f / p;
  }
}

/* The dimension index at which a frequency turns num_rotations times over orig positions
 * (transformers' find_correction_dim), in double as Python computes it. */
static double yarn_correction_dim(double num_rotations, int dim, double theta, int orig) {
  return (dim * log(orig / (num_rotations * 2 * 3.141592653589793))) / (2 * log(theta));
}

void lh_rope_inv_freq_yarn(double theta, int rotary_dim, double factor, int orig, double beta_fast, double beta_slow,
                           int truncate, float *inv_freq) {
  const int half = rotary_dim / 2;
  double lo = yarn_correction_dim(beta_fast, rotary_dim, theta, orig);
  double hi = yarn_correction_dim(beta_slow, rotary_dim, theta, orig);
  if (truncate) lo = floor(lo), hi = ceil(hi);
  if (lo < 0) lo = 0;
  if (hi > rotary_dim - 1) hi = rotary_dim - 1;
  if (lo == hi) hi += 0.001; /* transformers' guard against a zero-width ramp */
  const float f32 = (float)factor;
  for (int i = 0; i < half; i++) {
    /* pos_freqs = theta ** (arange(0, R, 2).float() / R), then the fp32 ops of
     * _compute_yarn_parameters, each rounded to fp32 in its order */
    float e = (float)(2 * i) / (float)rotary_dim;
    float p = (float)pow(theta, (double)e);
    float extra = 1.0f / p;
    float inter = 1.0f / (f32 * p);
    float ramp = ((float)i - (float)lo) / (float)(hi - lo);
    ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
    float ef = 1.0f - ramp; /* the extrapolation factor */
    inv_freq[i] = inter * (1.0f - ef) + extra * ef;
  }
}

typedef struct rope_job {
  float *x;
  int64_t ld, n;
  int n_heads, head_dim, rotary_dim;
  const float *inv_freq;
  const int64_t *pos;
  float attention_factor;
} rope_job;

static void rope_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const rope_job *j = ctx;
  int64_t r0 = t * 16, r1 = r0 + 16 < j->n ? r0 + 16 : j->n;
  int half = j->rotary_dim / 2;
  float c[512], s[512]; /* rotary_dim <= 1024: checked by the caller's config */
  for (int64_t r = r0; r < r1; r++) {
    float p = (float)j->pos[r];
    for (int i = 0; i < half; i++) {
      float a = j->inv_freq[i] * p;
      c[i] = (float)cos((double)a) * j->attention_factor; /* exact for 1 */
      s[i] = (float)sin((double)a) * j->attention_factor;
    }
    for (int h = 0; h < j->n_heads; h++) {
      float *x = j->x + r * j->ld + (int64_t)h * j->head_dim;
      for (int i = 0; i < half; i++) {
        float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c[i] - x2 * s[i];
        x[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

void lh_rope(lh_pool *pool, float *x, int64_t ld, int64_t n, int n_heads, int head_dim, int rotary_dim,
             const float *inv_freq, const int64_t *pos, float attention_factor) {
  rope_job j = {x, ld, n, n_heads, head_dim, rotary_dim, inv_freq, pos, attention_factor};
  lh_pool_run(pool, (n + 15) / 16, rope_task, &j);
}

/* g = fl32(ln((pos+1)/base)), 0 where that is not positive (and for base <= 0: off). */
static float length_scale_log(int64_t pos, int base) {
  if (base <= 0 || pos + 1 <= base) return 0.0f;
  return (float)log((double)(pos + 1) / (double)base);
}

/* f = fl32(1 + fl32(s g)); exactly 1 where g or s is 0. */
static float length_scale_apply(float g, float s) {
  float sg = s * g;
  return 1.0f + sg;
}

float lh_length_scale_factor(int64_t pos, int base, float s) {
  return length_scale_apply(length_scale_log(pos, base), s);
}

typedef struct lscale_job {
  float *x;
  int64_t ld, n;
  int n_heads, head_dim, base;
  const float *scale;
  const int64_t *pos;
} lscale_job;

static void lscale_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const lscale_job *j = ctx;
  int64_t r0 = t * 16, r1 = r0 + 16 < j->n ? r0 + 16 : j->n;
  for (int64_t r = r0; r < r1; r++) {
    float g = length_scale_log(j->pos[r], j->base);
    if (g == 0.0f) continue; /* every factor is 1 */
    for (int h = 0; h < j->n_heads; h++) {
      float f = length_scale_apply(g, j->scale[h]);
      float *x = j->x + r * j->ld + (int64_t)h * j->head_dim;
      for (int i = 0; i < j->head_dim; i++) x[i] *= f;
    }
  }
}

void lh_length_scale(lh_pool *pool, float *x, int64_t ld, int64_t n, int n_heads, int head_dim, const float *scale,
                     int base, const int64_t *pos) {
  if (base <= 0) return;
  lscale_job j = {x, ld, n, n_heads, head_dim, base, scale, pos};
  lh_pool_run(pool, (n + 15) / 16, lscale_task, &j);
}
