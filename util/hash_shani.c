/* hash_shani.c — SHA-256 compression with the x86 SHA extensions (SHA-NI), for hash.c.
 *
 * Four rounds per pair of sha256rnds2; the message schedule four words at a time with sha256msg1
 * and sha256msg2. The state is kept as ABEF/CDGH, the order the instructions want. Compiled
 * with a target attribute, so the rest of the build keeps its flags; hash.c calls it only when
 * CPUID says the CPU has SHA and SSE4.1. Results are bit-identical to the portable code (the
 * FIPS 180-4 vectors in tests/util run on both paths).
 */
#include <stddef.h>
#include <stdint.h>

int lh_sha256_shani_available(void);
void lh_sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks);
extern const uint32_t lh_sha256_k[64]; /* the round constants, defined in hash.c */

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

int lh_sha256_shani_available(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return (b >> 29) & 1; /* CPUID.7.0:EBX.SHA */
}

__attribute__((target("sha,sse4.1,ssse3"))) void lh_sha256_blocks_shani(uint32_t h[8], const uint8_t *p,
                                                                        size_t nblocks) {
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
  __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
  __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
  __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
  __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
  __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
  for (; nblocks; nblocks--, p += 64) {
    __m128i abef0 = abef, cdgh0 = cdgh, w[4];
    for (int i = 0; i < 16; i++) {
      __m128i x;
      if (i < 4) {
        x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
      } else {
        /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time. */
        __m128i t = _mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
        x = _mm_sha256msg2_epu32(t, w[(i + 3) & 3]);
      }
      w[i & 3] = x;
      __m128i m = _mm_add_epi32(x, _mm_loadu_si128((const __m128i *)&lh_sha256_k[4 * i]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(m, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}
#else
int lh_sha256_shani_available(void) { return 0; }
void lh_sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks) {
  (void)h, (void)p, (void)nblocks;
}
#endif
