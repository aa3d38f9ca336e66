/* hash.c — SHA-256 and CRC-32C (see hash.h). Plain C; CRC-32C picks the SSE4.2 path at run time. */
#include "util/hash.h"

#include <stdlib.h>
#include <string.h>

/* FIPS 180-4's round constants; hash_shani.c reads them too. */
extern const uint32_t lh_sha256_k[64];
const uint32_t lh_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = hh + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + lh_sha256_k[i] + w[i];
    uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
}

/* SHA-NI when the CPU has it (hash_shani.c), unless LH_SHA256_PORTABLE is set (tests run both). */
int lh_sha256_shani_available(void);
void lh_sha256_blocks_shani(uint32_t h[8], const uint8_t *p, size_t nblocks);
static int use_shani = -1;

static void sha256_blocks(uint32_t h[8], const uint8_t *p, size_t nblocks) {
  int u = __atomic_load_n(&use_shani, __ATOMIC_RELAXED);
  if (u < 0) {
    u = !getenv("LH_SHA256_PORTABLE") && lh_sha256_shani_available();
    __atomic_store_n(&use_shani, u, __ATOMIC_RELAXED);
  }
  if (u) lh_sha256_blocks_shani(h, p, nblocks);
  else
    for (; nblocks; nblocks--, p += 64) sha256_block(h, p);
}

void lh_sha256_init(lh_sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->nbytes = 0;
  s->fill = 0;
}

void lh_sha256_update(lh_sha256 *s, const void *data, size_t n) {
  const uint8_t *p = data;
  s->nbytes += n;
  if (s->fill) {
    size_t take = 64 - s->fill < n ? 64 - s->fill : n;
    memcpy(s->block + s->fill, p, take);
    s->fill += take, p += take, n -= take;
    if (s->fill < 64) return;
    sha256_blocks(s->h, s->block, 1);
    s->fill = 0;
  }
  sha256_blocks(s->h, p, n / 64);
  p += n / 64 * 64, n %= 64;
  memcpy(s->block, p, n);
  s->fill = n;
}

void lh_sha256_final(const lh_sha256 *s, uint8_t out[32]) {
  lh_sha256 c = *s;
  uint64_t bits = c.nbytes * 8;
  uint8_t pad[72] = {0x80};
  size_t padlen = (c.fill < 56 ? 56 : 120) - c.fill;
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
  lh_sha256_update(&c, pad, padlen);
  lh_sha256_update(&c, len, 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (uint8_t)(c.h[i] >> 24);
    out[4 * i + 1] = (uint8_t)(c.h[i] >> 16);
    out[4 * i + 2] = (uint8_t)(c.h[i] >> 8);
    out[4 * i + 3] = (uint8_t)c.h[i];
  }
}

void lh_sha256_buf(const void *data, size_t n, uint8_t out[32]) {
  lh_sha256 s;
  lh_sha256_init(&s);
  lh_sha256_update(&s, data, n);
  lh_sha256_final(&s, out);
}

void lh_hex(const uint8_t *bytes, size_t n, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * n] = 0;
}

/* CRC-32C, reflected polynomial 0x82F63B78. */
static uint32_t crc_table[8][256];
static int crc_table_ready;

static void crc_table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++) crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 255];
  __atomic_store_n(&crc_table_ready, 1, __ATOMIC_RELEASE);
}

static uint32_t crc32c_table(uint32_t crc, const uint8_t *p, size_t n) {
  if (!__atomic_load_n(&crc_table_ready, __ATOMIC_ACQUIRE)) crc_table_init();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    v ^= crc;
    crc = crc_table[7][v & 255] ^ crc_table[6][(v >> 8) & 255] ^ crc_table[5][(v >> 16) & 255] ^
          crc_table[4][(v >> 24) & 255] ^ crc_table[3][(v >> 32) & 255] ^ crc_table[2][(v >> 40) & 255] ^
          crc_table[1][(v >> 48) & 255] ^ crc_table[0][v >> 56];
  }
  while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 255];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
  uint64_t c = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

uint32_t lh_crc32c(uint32_t crc, const void *data, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("sse4.2")) return ~crc32c_hw(crc, data, n);
#endif
  return ~crc32c_table(crc, data, n);
}
