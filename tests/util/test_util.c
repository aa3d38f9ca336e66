/* test_util.c — util/: SHA-256 against FIPS 180-4 vectors, CRC-32C against RFC 3720's check
 * value (both the hardware and table paths agree by construction of lh_crc32c, so lengths that
 * exercise the 8-byte and tail loops are covered), splitmix64 against the outputs of Vigna's
 * reference splitmix64.c (computed by a separate Python transcription of it, not by our code),
 * UTF-8 repair against Python's bytes.decode("utf-8", errors="replace") whole and split at every
 * byte, half-precision conversions, buffers, JSON nesting past cJSON's limit. */
#include "tests/test.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/half.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/rand.h"
#include "util/utf8.h"

static void hex_of(const char *msg, size_t n, char out[65]) {
  uint8_t d[32];
  lh_sha256_buf(msg, n, d);
  lh_hex(d, 32, out);
}

int main(void) {
  lh_test_begin("test_util");
  char h[65];
  hex_of("", 0, h);
  CHECK(!strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  hex_of("abc", 3, h);
  CHECK(!strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  hex_of(m2, strlen(m2), h);
  CHECK(!strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
  /* one million 'a', fed in uneven pieces */
  lh_sha256 s;
  lh_sha256_init(&s);
  char a[1000];
  memset(a, 'a', sizeof a);
  for (int i = 0, left = 1000000; left > 0; i++) {
    int take = (i * 37) % 999 + 1;
    if (take > left) take = left;
    lh_sha256_update(&s, a, (size_t)take);
    left -= take;
  }
  uint8_t d[32];
  lh_sha256_final(&s, d);
  lh_hex(d, 32, h);
  CHECK(!strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));

  CHECK_EQ(lh_crc32c(0, "123456789", 9), 0xE3069283u);
  /* incremental == one shot */
  char buf[4099];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (char)(i * 131 + 7);
  uint32_t one = lh_crc32c(0, buf, sizeof buf);
  uint32_t inc = lh_crc32c(lh_crc32c(0, buf, 1001), buf + 1001, sizeof buf - 1001);
  CHECK_EQ(one, inc);

  /* splitmix64: the first three outputs from seeds 0 and 1234567 */
  uint64_t sm = 0;
  CHECK_EQ(lh_splitmix64(&sm), 0xe220a8397b1dcdafull);
  CHECK_EQ(lh_splitmix64(&sm), 0x6e789e6aa1b965f4ull);
  CHECK_EQ(lh_splitmix64(&sm), 0x06c45d188009454full);
  CHECK_EQ(sm, 3 * 0x9e3779b97f4a7c15ull);
  sm = 1234567;
  CHECK_EQ(lh_splitmix64(&sm), 0x599ed017fb08fc85ull); /* 6457827717110365317 */
  CHECK_EQ(lh_splitmix64(&sm), 0x2c73f08458540fa5ull);
  CHECK_EQ(lh_splitmix64(&sm), 0x883ebce5a3f27c77ull);
  CHECK_EQ(lh_mix64(0x9e3779b97f4a7c15ull), 0xe220a8397b1dcdafull);
  sm = 0;
  CHECK(lh_splitmix64_uniform(&sm) == (double)(0xe220a8397b1dcdafull >> 11) / 9007199254740992.0);
  CHECK(lh_splitmix64_uniform(&sm) < 1.0);

  /* UTF-8: an emoji, an overlong, a surrogate, a code point above U+10FFFF, a bad continuation
   * and a cut tail; the expected text is Python's decode(errors="replace") re-encoded. */
  static const char bad[] = "a\xF0\x9F\x98\x80" "b\xE0\x80\xAF\xED\xA0\x80" "c\xF4\x90\x80\x80\xC3(\xE2\x82";
  static const char fixed[] = "a\xF0\x9F\x98\x80" "b\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                              "\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD";
  const size_t nbad = sizeof bad - 1, nfixed = sizeof fixed - 1;
  CHECK_EQ(lh_utf8_valid_prefix((const uint8_t *)bad, nbad), 6);
  CHECK(!lh_utf8_valid((const uint8_t *)bad, nbad) && lh_utf8_valid((const uint8_t *)fixed, nfixed));
  size_t ulen;
  CHECK_EQ(lh_utf8_classify((const uint8_t *)"\xE2\x82", 2, &ulen), LH_UTF8_SHORT);
  CHECK_EQ(ulen, 2);
  CHECK_EQ(lh_utf8_classify((const uint8_t *)"\xE0\x80", 2, &ulen), LH_UTF8_INVALID);
  CHECK_EQ(ulen, 1);
  for (size_t cut = 0; cut <= nbad; cut++) {
    lh_utf8 u = {0};
    lh_buf o = {0};
    int64_t repl = 0;
    CHECK_EQ(lh_utf8_repair(&u, (const uint8_t *)bad, cut, 0, &o, &repl), LH_OK);
    CHECK_EQ(lh_utf8_repair(&u, (const uint8_t *)bad + cut, nbad - cut, 1, &o, &repl), LH_OK);
    CHECK(o.len == nfixed && !memcmp(o.data, fixed, nfixed));
    CHECK_EQ(repl, 12);
    lh_buf_free(&o);
  }

  CHECK(lh_bf16_to_f32(lh_f32_to_bf16(1.5f)) == 1.5f);
  CHECK(lh_bf16_to_f32(0x3f80) == 1.0f);
  CHECK_EQ(lh_f32_to_bf16(1.00390625f), 0x3f80); /* halfway rounds to even */
  CHECK(lh_f16_to_f32(0x3c00) == 1.0f);
  CHECK(lh_f16_to_f32(0x0001) == 5.9604644775390625e-8f); /* smallest subnormal */
  CHECK_EQ(lh_f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ(lh_f32_to_f16(1e6f), 0x7c00);
  for (uint32_t x = 0; x < 0x7c00; x += 7) CHECK_EQ(lh_f32_to_f16(lh_f16_to_f32((uint16_t)x)), x);
  CHECK(isnan(lh_bf16_to_f32(lh_f32_to_bf16(NAN))));

  lh_buf b = {0};
  for (int i = 0; i < 1000; i++) lh_buf_printf(&b, "%d,", i);
  CHECK(b.len > 3000 && !strncmp(b.data, "0,1,2,", 6));
  lh_buf_free(&b);
  lh_i32vec v = {0};
  for (int i = 0; i < 100000; i++) lh_i32vec_push(&v, i);
  CHECK_EQ(v.data[99999], 99999);
  lh_i32vec_free(&v);

  /* nesting: 1000 levels are read, the 1001st bracket is placed; brackets in strings (behind an
   * escaped quote too) do not count, and the message names the same offset */
  lh_buf j = {0};
  for (int i = 0; i < 1000; i++) lh_buf_append(&j, "[", 1);
  CHECK_EQ(lh_json_too_deep_at(j.data, j.len), -1);
  lh_buf_append(&j, "{", 1);
  CHECK_EQ(lh_json_too_deep_at(j.data, j.len), 1000);
  lh_buf_clear(&j);
  lh_buf_append_str(&j, "[\"\\\"\xc3\xa9");
  for (int i = 0; i < 2000; i++) lh_buf_append(&j, "{", 1);
  lh_buf_append_str(&j, "\",");
  CHECK_EQ(lh_json_too_deep_at(j.data, j.len), -1);
  for (int i = 0; i < 1000; i++) lh_buf_append(&j, "[", 1);
  CHECK_EQ(lh_json_too_deep_at(j.data, j.len), (long)j.len - 1);
  char deep[160];
  CHECK(lh_json_too_deep(j.data, j.len, deep, sizeof deep));
  CHECK_STR_CONTAINS(deep, "nest more than 1000 deep (at byte 3007)");
  CHECK(!lh_json_too_deep(j.data, j.len - 1, deep, sizeof deep));
  lh_buf_free(&j);

  char p[512], q[512];
  lh_path_join(p, sizeof p, lh_test_tmpdir(), "a/b/c");
  CHECK_EQ(lh_mkdir_p(p, NULL), LH_OK);
  CHECK(lh_is_dir(p));
  /* what it made: from the first folder that was not there, or nothing */
  size_t made = 99;
  CHECK_EQ(lh_mkdir_p_made(p, &made, NULL), LH_OK);
  CHECK_EQ(made, 0);
  lh_path_join(q, sizeof q, p, "d/e");
  CHECK_EQ(lh_mkdir_p_made(q, &made, NULL), LH_OK);
  CHECK(lh_is_dir(q) && made == strlen(p) + 2 && !strncmp(q + made - 2, "/d", 2));
  /* undone: the folders made up to where made points; what was there stays */
  lh_rmdir_made(q, made);
  CHECK(!lh_is_dir(q) && lh_is_dir(p));
  /* failing part way (a name longer than a file system takes) leaves none of the folders it made */
  char r[512];
  lh_path_join(q, sizeof q, p, "g/h/");
  memset(q + strlen(q), 'x', 300);
  q[strlen(p) + 5 + 300] = 0;
  made = 99;
  CHECK(lh_mkdir_p_made(q, &made, NULL) != LH_OK);
  lh_path_join(r, sizeof r, p, "g");
  CHECK(made == 0 && !lh_is_dir(r) && lh_is_dir(p));
  lh_path_join(q, sizeof q, p, "f.txt");
  CHECK_EQ(lh_file_write_atomic(q, "hello", 5, NULL), LH_OK);
  lh_buf rb = {0};
  CHECK_EQ(lh_file_read(q, 100, &rb, NULL), LH_OK);
  CHECK(rb.len == 5 && !memcmp(rb.data, "hello", 5));
  lh_buf_free(&rb);
  lh_error e;
  CHECK_EQ(lh_file_read(q, 3, &rb, &e), LH_ELIMIT);
  CHECK_STR_CONTAINS(e.msg, "f.txt");
  lh_buf_free(&rb);
  return lh_test_end();
}
