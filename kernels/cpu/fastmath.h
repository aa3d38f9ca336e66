/* fastmath.h — a branch-free fp32 exp that the compiler can vectorise (private to kernels/cpu).
 *
 * glibc's expf is a scalar call; the softmax and gate loops evaluate it hundreds of millions of
 * times per 8K chunk, so they use this one instead: Cody-Waite reduction x = n ln2 + r with
 * |r| <= ln2/2, a degree-6 Taylor polynomial for e^r (truncation error below 2e-8 relative) and
 * 2^n built in the exponent bits. Within 2 ulp of expf over [-87.3, 88.7]; below that it returns
 * 0, above +inf. Same bits on every x86-64 machine: no FMA contraction (ISO C mode), no tables.
 */
#ifndef LH_KERNELS_CPU_FASTMATH_H
#define LH_KERNELS_CPU_FASTMATH_H

/* LH_SIMD_CLONES on a hot loop's function: GCC builds an AVX2 copy next to the baseline SSE2 one
 * and picks it at load time on CPUs that have AVX2 (2-3x on the SwiGLU/exp loops, measured).
 * Both copies compute the same bits: AVX2 without FMA runs the same IEEE operations in the same
 * order, only wider (no contraction in ISO C mode, and no reduction is vectorised except the
 * explicit fixed-lane ones); checked by building with -DLH_NO_SIMD_CLONES and comparing every
 * fixture's logits byte for byte. Off for other compilers and for sanitizer builds. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__) && !defined(LH_NO_SIMD_CLONES)
#define LH_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LH_SIMD_CLONES
#endif

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lh_fast_expf(float x) {
  const float lo = -87.3f, hi = 88.7f;
  float xc = x < lo ? lo : (x > hi ? hi : x);
  /* round(x / ln2) with the 1.5 * 2^23 trick: exact for |x / ln2| < 2^22 */
  float t = xc * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  float r = xc - n * 0.693145751953125f;  /* ln2 split: hi part exact in fp32 */
  r = r - n * 1.42860682030941723e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t ni = (int32_t)n;
  /* 2^n as two factors so that n = 128 (x near 88.7) does not overflow the exponent field */
  int32_t n1 = ni >> 1, n2 = ni - n1;
  uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
  float s1, s2;
  memcpy(&s1, &b1, 4);
  memcpy(&s2, &b2, 4);
  float y = p * s1 * s2;
  y = x < lo ? 0.0f : y;
  y = x > hi ? (float)INFINITY : y;
  return y;
}

#endif
