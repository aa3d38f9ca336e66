/* test_load_identity.c — the model id covers every byte of every weight file; the digest cache.
 *
 * - A committed fixture copied to two temporary folders has one id (the folder does not count);
 *   one byte flipped in the middle of a tensor of one copy (away from where a sampling digest
 *   would look) changes the id, as does a flip near the end of the file. Shards renamed (with
 *   their index) keep the id.
 * - The file digest is the tree engine/safetensors.h defines: recomputed here from its formula
 *   over a file of two leaves, and by Python's hashlib from the header's snippet; 1 and 2 threads
 *   and any leaf size split at odd places give the digests of their formula.
 * - The digest cache: a miss reads the file and puts the file's identity (realpath, size, mtime,
 *   ctime, inode, device as stat says) and digest; a hit reads nothing (a doctored cached digest
 *   changes the id, a cached non-finite offset fails the open naming the tensor); a file touched
 *   since misses; a file changed while it is read fails with LH_EIO and is not put. */
#include "tests/engine_load/tw.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "engine/internal.h"
#include "engine/safetensors.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/hash.h"

static const char *src_root(void) {
  const char *s = getenv("LH_SOURCE_DIR");
  return s ? s : ".";
}

/* Copy the regular files of from/ into a new folder tmp/name (not recursive). */
static const char *copy_folder(const char *from, const char *name) {
  const char *to = tw_mkdir(name);
  static char dst[8][4096];
  static int k;
  char *out = dst[k++ % 8];
  snprintf(out, 4096, "%s", to);
  DIR *d = opendir(from);
  if (!d) {
    perror(from);
    exit(1);
  }
  for (struct dirent *e; (e = readdir(d));) {
    char a[4096], b[4400];
    snprintf(a, sizeof a, "%s/%s", from, e->d_name);
    if (e->d_name[0] == '.' || !lh_is_file(a)) continue;
    snprintf(b, sizeof b, "%s/%s", out, e->d_name);
    lh_buf buf = {0};
    lh_error err;
    if (lh_file_read(a, 1u << 30, &buf, &err)) {
      fprintf(stderr, "%s\n", err.msg);
      exit(1);
    }
    tw_write_file(b, buf.data, buf.len);
    lh_buf_free(&buf);
  }
  closedir(d);
  return out;
}

/* XOR the byte at offset off of path with x. */
static void flip(const char *path, long off, unsigned x) {
  FILE *f = fopen(path, "r+b");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, off, SEEK_SET);
  int c = fgetc(f);
  fseek(f, off, SEEK_SET);
  fputc(c ^ (int)x, f);
  fclose(f);
}

/* The file offset of tensor `name` in the safetensors file at path, and its byte length. */
static long tensor_offset(const char *path, const char *name, uint64_t *nbytes) {
  lh_st_set *s = lh_st_new();
  lh_error err;
  long off = -1;
  if (!lh_st_add_file(s, path, &err) && !lh_st_finish(s, &err)) {
    const lh_st_tensor *t = lh_st_find(s, name);
    if (t) {
      off = (long)((const uint8_t *)t->data - (const uint8_t *)s->maps[0].base);
      *nbytes = t->nbytes;
    }
  } else {
    fprintf(stderr, "%s\n", err.msg);
  }
  lh_st_close(s);
  return off;
}

static lh_status open_id(const char *dir, char id[65], lh_error *err) {
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_model *m = NULL;
  lh_status st = lh_model_open(dir, &p, &m, err);
  if (!st) memcpy(id, lh_model_id(m), 65);
  else
    id[0] = 0;
  lh_model_close(m);
  return st;
}

static void test_every_byte_counts(void) {
  char from[2048];
  snprintf(from, sizeof from, "%s/tests/fixtures/engine/hf_tp8_gqa2_top2of8", src_root());
  const char *a = copy_folder(from, "a"), *b = copy_folder(from, "b");
  char id0[65], ida[65], idb[65];
  lh_error err = {0};
  CHECK_EQ(open_id(from, id0, &err), LH_OK);
  CHECK_EQ(open_id(a, ida, &err), LH_OK);
  CHECK_EQ(open_id(b, idb, &err), LH_OK);
  CHECK_MSG(!strcmp(id0, ida) && !strcmp(ida, idb), "the same bytes in three folders: %s %s %s", id0, ida, idb);

  /* A 96 KiB tensor: its middle byte lies between the blocks a sampling digest would read. Flip
   * the lowest mantissa bit of the element there (still finite, a real edit of the weights). */
  const char *file = tw_path(b, "model.safetensors");
  uint64_t nb = 0;
  long off = tensor_offset(file, "model.layers.3.self_attn.qkv_proj.weight", &nb);
  CHECK(off > 0 && nb == 98304);
  long mid = off + (long)(nb / 2 / 4 * 4); /* the first (least significant) byte of an f32 element */
  flip(file, mid, 1);
  char id1[65];
  CHECK_EQ(open_id(b, id1, &err), LH_OK);
  CHECK_MSG(strcmp(id1, ida), "one byte changed in the middle of a tensor keeps the id %s", id1);
  flip(file, mid, 1);
  CHECK_EQ(open_id(b, id1, &err), LH_OK);
  CHECK_MSG(!strcmp(id1, ida), "the byte flipped back gives the first id again");

  /* The last tensor's last element (a mantissa bit of its third byte: still finite). */
  struct stat sb;
  CHECK(stat(file, &sb) == 0);
  flip(file, (long)sb.st_size - 2, 1);
  CHECK_EQ(open_id(b, id1, &err), LH_OK);
  CHECK_MSG(strcmp(id1, ida), "a change in the last element keeps the id");
  flip(file, (long)sb.st_size - 2, 1);
  CHECK_EQ(open_id(b, id1, &err), LH_OK);
  CHECK(!strcmp(id1, ida));
}

/* Shards under other names, with the index rewritten to match: the same id. */
static void test_shard_names(void) {
  char from[2048];
  snprintf(from, sizeof from, "%s/tests/fixtures/engine/hf_bf16_sharded_gqa2", src_root());
  const char *a = copy_folder(from, "renamed");
  DIR *d = opendir(a);
  for (struct dirent *e; d && (e = readdir(d));) {
    if (strncmp(e->d_name, "model-", 6)) continue;
    char o[4096], n[4096];
    snprintf(o, sizeof o, "%s/%s", a, e->d_name);
    snprintf(n, sizeof n, "%s/part%s", a, e->d_name + 5);
    CHECK(rename(o, n) == 0);
  }
  if (d) closedir(d);
  lh_buf b = {0};
  lh_error err = {0};
  CHECK_EQ(lh_file_read(tw_path(a, "model.safetensors.index.json"), 1 << 20, &b, &err), LH_OK);
  lh_buf out = {0};
  for (size_t i = 0; i < b.len; i++) {
    if (i + 6 <= b.len && !memcmp(b.data + i, "model-", 6)) {
      lh_buf_append(&out, "part-", 5);
      i += 5;
    } else {
      lh_buf_append(&out, b.data + i, 1);
    }
  }
  tw_write_file(tw_path(a, "model.safetensors.index.json"), out.data, out.len);
  lh_buf_free(&b);
  lh_buf_free(&out);
  char id0[65], id1[65];
  CHECK_EQ(open_id(from, id0, &err), LH_OK);
  CHECK_MSG(open_id(a, id1, &err) == LH_OK, "%s", err.msg);
  CHECK_MSG(!strcmp(id0, id1), "renamed shards: %s vs %s", id1, id0);
}

/* ---- the file digest's definition ---------------------------------------------------------- */

/* The digest by the header's formula, from the file's bytes. */
static void formula(const uint8_t *d, uint64_t n, uint64_t leaf, uint8_t out[32]) {
  lh_sha256 h;
  lh_sha256_init(&h);
  const char tag[] = "longhaul file digest v1\n";
  lh_sha256_update(&h, tag, strlen(tag));
  uint8_t le[16];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(n >> (8 * i)), le[8 + i] = (uint8_t)(leaf >> (8 * i));
  lh_sha256_update(&h, le, 16);
  uint64_t leaves = n ? (n + leaf - 1) / leaf : 1;
  for (uint64_t i = 0; i < leaves; i++) {
    uint8_t l[32];
    uint64_t a = i * leaf, b = a + leaf < n ? a + leaf : n;
    lh_sha256_buf(d + a, (size_t)(b - a), l);
    lh_sha256_update(&h, l, 32);
  }
  lh_sha256_final(&h, out);
}

static lh_status digest_file(const char *path, int threads, uint64_t leaf, const lh_digest_cache *c,
                             lh_file_digest *out, lh_error *err) {
  lh_st_set *s = lh_st_new();
  lh_status st = lh_st_add_file(s, path, err);
  if (!st) st = lh_st_finish(s, err);
  if (!st) st = lh_st_digest(s, threads, leaf, c, NULL, err);
  if (s->digest) *out = s->digest[0];
  lh_st_close(s);
  return st;
}

static void test_file_digest(void) {
  /* One F32 tensor of 17 Mi elements after a header of odd length: 68 MiB, two leaves. */
  const int64_t n = 17 << 20;
  float *v = malloc((size_t)n * 4);
  for (int64_t i = 0; i < n; i++) v[i] = (float)(i % 1000) * 0.25f - 7.0f;
  char hdr[256];
  snprintf(hdr, sizeof hdr, "{\"w\":{\"dtype\":\"F32\",\"shape\":[%lld],\"data_offsets\":[0,%lld]}}",
           (long long)n, (long long)n * 4);
  const char *path = tw_path(lh_test_tmpdir(), "big.safetensors");
  tw_write_raw(path, hdr, v, (size_t)n * 4);
  free(v);
  lh_buf b = {0};
  lh_error err = {0};
  CHECK_EQ(lh_file_read(path, 1u << 30, &b, &err), LH_OK);
  CHECK(b.len > LH_ST_DIGEST_LEAF && b.len < 2 * LH_ST_DIGEST_LEAF);
  uint8_t want[32];
  formula((const uint8_t *)b.data, b.len, LH_ST_DIGEST_LEAF, want);
  for (int th = 1; th <= 2; th++) {
    lh_file_digest got = {.nonfinite_at = 0};
    CHECK_EQ(digest_file(path, th, LH_ST_DIGEST_LEAF, NULL, &got, &err), LH_OK);
    CHECK_MSG(!memcmp(got.sha256, want, 32), "%d threads: not the header's formula", th);
    CHECK_EQ(got.nonfinite_at, -1);
  }
  /* leaves that split the header and the elements at odd places, on a 200 KB file */
  const char *small = tw_path(lh_test_tmpdir(), "small.safetensors");
  enum { NS = 100000 };
  uint8_t *dat = malloc(2 * NS);
  for (int k = 0; k < 2 * NS; k++) dat[k] = (uint8_t)(k * 7 % 61);
  char h2[128];
  snprintf(h2, sizeof h2, "{\"w\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[0,%d]}}   ", NS, 2 * NS);
  tw_write_raw(small, h2, dat, 2 * NS);
  free(dat);
  lh_buf sb = {0};
  CHECK_EQ(lh_file_read(small, 1 << 20, &sb, &err), LH_OK);
  static const uint64_t leaves[] = {1, 7, 1000, 65537, 1 << 20};
  for (size_t i = 0; i < sizeof leaves / sizeof *leaves; i++) {
    uint8_t w[32];
    formula((const uint8_t *)sb.data, sb.len, leaves[i], w);
    lh_file_digest g1 = {.nonfinite_at = 0}, g2 = {.nonfinite_at = 0};
    CHECK_EQ(digest_file(small, 1, leaves[i], NULL, &g1, &err), LH_OK);
    CHECK_EQ(digest_file(small, 2, leaves[i], NULL, &g2, &err), LH_OK);
    CHECK_MSG(!memcmp(g1.sha256, w, 32) && !memcmp(g2.sha256, w, 32), "leaf %llu", (unsigned long long)leaves[i]);
  }
  lh_buf_free(&sb);
  /* an independent SHA-256: Python's hashlib, running the header's snippet */
  char cmd[8192], hex[65], line[128] = "";
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import hashlib,struct,sys\n"
           "L = 64 << 20; d = open(sys.argv[1], \"rb\").read(); n = max(1, -(-len(d) // L))\n"
           "leaves = b\"\".join(hashlib.sha256(d[i*L:(i+1)*L]).digest() for i in range(n))\n"
           "print(hashlib.sha256(b\"longhaul file digest v1\\n\" + struct.pack(\"<QQ\", len(d), L) + leaves).hexdigest())' "
           "'%s' 2>/dev/null",
           path);
  FILE *p = popen(cmd, "r");
  if (p && fgets(line, sizeof line, p)) {
    lh_hex(want, 32, hex);
    CHECK_MSG(!strncmp(line, hex, 64), "hashlib says %.64s, the formula %s", line, hex);
    fprintf(stderr, "hashlib's digest of the 68 MiB file: %.64s\n", line);
  } else {
    fprintf(stderr, "note: python3 not found; the hashlib cross-check did not run\n");
  }
  if (p) pclose(p);
  lh_buf_free(&b);
}

/* ---- the digest cache ---------------------------------------------------------------------- */

typedef struct fake_cache {
  int gets, hits, puts;
  int have;
  lh_file_identity key;
  lh_file_digest val;
  const char *touch; /* on a get: change this file's mtime (a writer during the read) */
} fake_cache;

static int same_key(const lh_file_identity *a, const lh_file_identity *b) {
  return !strcmp(a->path, b->path) && a->size == b->size && a->mtime_ns == b->mtime_ns &&
         a->ctime_ns == b->ctime_ns && a->inode == b->inode && a->device == b->device;
}

static int fc_get(void *user, const lh_file_identity *key, lh_file_digest *out) {
  fake_cache *c = user;
  c->gets++;
  if (c->touch) {
    struct timespec ts[2] = {{0, UTIME_OMIT}, {12345, 678}};
    utimensat(AT_FDCWD, c->touch, ts, 0);
  }
  if (!c->have || !same_key(key, &c->key)) return 0;
  c->hits++;
  *out = c->val;
  return 1;
}

static void fc_put(void *user, const lh_file_identity *key, const lh_file_digest *value) {
  fake_cache *c = user;
  c->puts++;
  c->have = 1;
  c->key = *key;
  c->val = *value;
}

static lh_status open_cached(const char *dir, fake_cache *fc, char id[65], lh_error *err) {
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  lh_digest_cache c = {fc_get, fc_put, fc};
  p.digest_cache = &c;
  lh_model *m = NULL;
  lh_status st = lh_model_open(dir, &p, &m, err);
  if (!st) memcpy(id, lh_model_id(m), 65);
  else
    id[0] = 0;
  lh_model_close(m);
  return st;
}

static void test_cache(void) {
  char from[2048];
  snprintf(from, sizeof from, "%s/tests/fixtures/engine/hf_f16_legacy_rope_top2of3", src_root());
  const char *dir = copy_folder(from, "cached");
  const char *file = tw_path(dir, "model.safetensors");
  char id0[65], id[65];
  lh_error err = {0};
  CHECK_EQ(open_id(dir, id0, &err), LH_OK);

  fake_cache fc = {0};
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_OK);
  CHECK(fc.gets == 1 && fc.hits == 0 && fc.puts == 1);
  CHECK(!strcmp(id, id0));
  struct stat sb;
  char real[PATH_MAX];
  CHECK(stat(file, &sb) == 0 && realpath(file, real));
  CHECK(!strcmp(fc.key.path, real));
  CHECK_EQ(fc.key.size, sb.st_size);
  CHECK_EQ(fc.key.inode, sb.st_ino);
  CHECK_EQ(fc.key.device, sb.st_dev);
  CHECK_EQ(fc.key.mtime_ns, (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec);
  CHECK_EQ(fc.key.ctime_ns, (int64_t)sb.st_ctim.tv_sec * 1000000000 + sb.st_ctim.tv_nsec);
  CHECK_EQ(fc.val.nonfinite_at, -1);
  lh_file_digest direct = {.nonfinite_at = 0};
  CHECK_EQ(digest_file(file, 1, LH_ST_DIGEST_LEAF, NULL, &direct, &err), LH_OK);
  CHECK(!memcmp(direct.sha256, fc.val.sha256, 32));

  /* a hit: nothing is read, the cached digest is the one used */
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_OK);
  CHECK(fc.gets == 2 && fc.hits == 1 && fc.puts == 1);
  CHECK(!strcmp(id, id0));
  fc.val.sha256[0] ^= 1;
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_OK);
  CHECK_MSG(strcmp(id, id0), "a doctored cached digest must change the id (else the file was read again)");
  fc.val.sha256[0] ^= 1;
  /* the scan's result comes from the cache too */
  uint64_t nb = 0;
  long off = tensor_offset(file, "model.norm.weight", &nb);
  fc.val.nonfinite_at = off + 2 * 3;
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'model.norm.weight'");
  CHECK_STR_CONTAINS(err.msg, "element 3");
  fc.val.nonfinite_at = -1;

  /* the file touched (same bytes, new mtime and ctime): a miss, read again, the same id */
  flip(file, off, 1);
  flip(file, off, 1);
  int puts = fc.puts;
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_OK);
  CHECK_EQ(fc.puts, puts + 1);
  CHECK(!strcmp(id, id0));

  /* a writer during the read: LH_EIO, nothing put */
  fc.have = 0;
  fc.touch = file;
  puts = fc.puts;
  CHECK_EQ(open_cached(dir, &fc, id, &err), LH_EIO);
  CHECK_STR_CONTAINS(err.msg, "changed");
  CHECK_EQ(fc.puts, puts);
}

/* A stop flag set (Ctrl-C during the first open of a big model): the digest reads no leaf, the open
 * fails with LH_EINTR and nothing reaches the cache; a cached digest needs no read, so it opens. */
static void test_stop(void) {
  char from[2048];
  snprintf(from, sizeof from, "%s/tests/fixtures/engine/hf_f16_legacy_rope_top2of3", src_root());
  fake_cache fc = {0};
  lh_digest_cache c = {fc_get, fc_put, &fc};
  volatile sig_atomic_t stop = 1;
  lh_model_params p = lh_model_default_params();
  p.backend = "none";
  p.digest_cache = &c;
  p.stop = &stop;
  lh_model *m = NULL;
  lh_error err = {0};
  CHECK_EQ(lh_model_open(from, &p, &m, &err), LH_EINTR);
  CHECK_STR_CONTAINS(err.msg, "interrupted while reading the weights");
  CHECK(m == NULL && fc.puts == 0);
  stop = 0;
  CHECK_EQ(lh_model_open(from, &p, &m, &err), LH_OK);
  lh_model_close(m);
  CHECK_EQ(fc.puts, 1);
  stop = 1;
  m = NULL;
  CHECK_EQ(lh_model_open(from, &p, &m, &err), LH_OK);
  CHECK(fc.hits == 1);
  lh_model_close(m);
}

int main(void) {
  lh_test_begin("test_load_identity");
  lh_log_set_level(LH_LOG_ERROR);
  test_every_byte_counts();
  test_shard_names();
  test_file_digest();
  test_cache();
  test_stop();
  return lh_test_end();
}
