/* hash.h — SHA-256 (FIPS 180-4) for content identity and CRC-32C for blob checksums.
 *
 * SHA-256 names things that must never collide by accident: model identities, token-prefix
 * chains, manifest digests. CRC-32C (Castagnoli) guards stored blobs against flipped or lost
 * bytes; it uses the SSE4.2 instruction when the CPU has it (several GB/s) and a table otherwise,
 * with identical results.
 */
#ifndef LH_UTIL_HASH_H
#define LH_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct lh_sha256 {
  uint32_t h[8];
  uint64_t nbytes;
  uint8_t block[64];
  size_t fill;
} lh_sha256;

void lh_sha256_init(lh_sha256 *s);
void lh_sha256_update(lh_sha256 *s, const void *data, size_t n);
/* Writes the 32-byte digest; s is left unchanged, so a running hash can be read at any point. */
void lh_sha256_final(const lh_sha256 *s, uint8_t out[32]);
/* One-shot helper. */
void lh_sha256_buf(const void *data, size_t n, uint8_t out[32]);
/* Lower-case hex of a digest into out (65 bytes with the NUL). */
void lh_hex(const uint8_t *bytes, size_t n, char *out);

/* CRC-32C of data, continuing from crc (pass 0 to start). */
uint32_t lh_crc32c(uint32_t crc, const void *data, size_t n);

#endif
