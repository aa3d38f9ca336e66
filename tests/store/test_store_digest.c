/* test_store_digest.c — the file digest cache over file_digests: a put is seen by the next get at
 * once and by another handle after flush (or close); a hit needs every identity field equal and
 * the kind to match; the row's CRC-32C is the documented layout, and a damaged row is a miss with
 * a warning; 128 puts are written without a flush; a read-only handle writes nothing; gc drops the
 * rows of files that are gone (not with --dry-run). Then the real thing: models/haul-tiny opened
 * twice through the store's "model" cache reads its weights once. */
#include "tests/test.h"

#include <sys/stat.h>

#include "engine/engine.h"
#include "store/store.h"
#include "tests/store/setup.h"
#include "tests/store/spawn.h"

static char PATH[600];

static lh_file_identity ident(const char *path, uint64_t size) {
  lh_file_identity id;
  memset(&id, 0, sizeof id);
  snprintf(id.path, sizeof id.path, "%s", path);
  id.size = size;
  id.mtime_ns = 1700000000123456789;
  id.ctime_ns = 1700000001987654321;
  id.inode = 4242;
  id.device = 0x803;
  return id;
}

static lh_file_digest digest(uint8_t fill, int64_t nonfinite_at) {
  lh_file_digest d;
  memset(d.sha256, fill, 32);
  d.nonfinite_at = nonfinite_at;
  return d;
}

static int64_t rows(const char *kind) {
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT count(*) FROM file_digests WHERE kind = '%s'", kind);
  return raw_int(PATH, sql);
}

/* The row checksum built here from docs/store.md: kind and path as length + bytes, size, mtime_ns,
 * ctime_ns, inode, device as little-endian int64, sha256 as length 32 + bytes, nonfinite_at. */
static uint32_t crc_expect_row(const char *kind, const lh_file_identity *id, const lh_file_digest *d) {
  unsigned char buf[1024];
  size_t n = 0;
#define LE(v)                                                              \
  do {                                                                     \
    uint64_t x_ = (uint64_t)(v);                                           \
    for (int i_ = 0; i_ < 8; i_++) buf[n++] = (unsigned char)(x_ >> (8 * i_)); \
  } while (0)
  LE(strlen(kind));
  memcpy(buf + n, kind, strlen(kind)), n += strlen(kind);
  LE(strlen(id->path));
  memcpy(buf + n, id->path, strlen(id->path)), n += strlen(id->path);
  LE(id->size);
  LE(id->mtime_ns);
  LE(id->ctime_ns);
  LE(id->inode);
  LE(id->device);
  LE(32);
  memcpy(buf + n, d->sha256, 32), n += 32;
  LE(d->nonfinite_at);
#undef LE
  return lh_crc32c(0, buf, n);
}

typedef struct counting {
  lh_digest_cache inner;
  int gets, hits, puts;
} counting;
static int count_get(void *user, const lh_file_identity *k, lh_file_digest *out) {
  counting *c = user;
  c->gets++;
  int h = c->inner.get(c->inner.user, k, out);
  c->hits += h;
  return h;
}
static void count_put(void *user, const lh_file_identity *k, const lh_file_digest *v) {
  counting *c = user;
  c->puts++;
  c->inner.put(c->inner.user, k, v);
}

int main(void) {
  lh_test_begin("test_store_digest");
  snprintf(PATH, sizeof PATH, "%s/digest.db", lh_test_tmpdir());
  lh_store_params sp = lh_store_default_params();
  sp.heartbeat = 0;
  lh_store *s = setup_store_open(PATH, &sp), *t;
  lh_error e;
  lh_digest_cache mc, dc;
  lh_file_digest got;
  CHECK(lh_store_digest_cache(s, "model", &mc, &e) == LH_OK);
  CHECK(lh_store_digest_cache(s, "doc", &dc, &e) == LH_OK);
  CHECK(lh_store_digest_cache(s, "", &dc, &e) == LH_EINVAL);
  CHECK(lh_store_digest_cache(s, "doc", &dc, &e) == LH_OK);

  /* A miss, a put seen at once, written on flush, seen by another handle. */
  lh_file_identity a = ident("/data/a.safetensors", 1000);
  lh_file_digest da = digest(0xab, -1);
  CHECK_EQ(mc.get(mc.user, &a, &got), 0);
  mc.put(mc.user, &a, &da);
  CHECK_EQ(mc.get(mc.user, &a, &got), 1);
  CHECK(!memcmp(&got, &da, sizeof got));
  CHECK_EQ(rows("model"), 0); /* kept in memory until a flush */
  CHECK(lh_store_digest_flush(s, &e) == LH_OK);
  CHECK_EQ(rows("model"), 1);
  t = setup_store_open(PATH, &sp);
  lh_digest_cache tc;
  CHECK(lh_store_digest_cache(t, "model", &tc, &e) == LH_OK);
  memset(&got, 0, sizeof got);
  CHECK_EQ(tc.get(tc.user, &a, &got), 1);
  CHECK(!memcmp(&got, &da, sizeof got));

  /* Every identity field counts, and the kind. */
  lh_file_identity b = a;
  b.size++;
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  b = a, b.mtime_ns++;
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  b = a, b.ctime_ns++;
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  b = a, b.inode++;
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  b = a, b.device++;
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  b = a, b.path[1] = 'D';
  CHECK_EQ(tc.get(tc.user, &b, &got), 0);
  CHECK_EQ(dc.get(dc.user, &a, &got), 0);

  /* The row's checksum is the documented one; a changed file replaces its row. */
  const char *sql = "SELECT crc32c FROM file_digests WHERE kind = 'model' AND path = '/data/a.safetensors'";
  CHECK_EQ(raw_int(PATH, sql), (int64_t)crc_expect_row("model", &a, &da));
  lh_file_identity a2 = a;
  a2.size = 2000, a2.ctime_ns += 5;
  lh_file_digest da2 = digest(0xcd, 77);
  tc.put(tc.user, &a2, &da2);
  lh_store_close(t); /* close flushes */
  CHECK_EQ(rows("model"), 1);
  CHECK_EQ(mc.get(mc.user, &a, &got), 0);
  CHECK_EQ(mc.get(mc.user, &a2, &got), 1);
  CHECK_EQ(got.nonfinite_at, 77);
  CHECK_EQ(raw_int(PATH, sql), (int64_t)crc_expect_row("model", &a2, &da2));

  /* Damage: one byte of the digest, or the checksum itself: a miss with a warning. */
  lh_log_set_sink(warnings_sink, NULL);
  warnings[0] = 0;
  CHECK(raw_sql(PATH, "UPDATE file_digests SET sha256 = X'cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdce'") ==
        SQLITE_OK);
  CHECK_EQ(mc.get(mc.user, &a2, &got), 0);
  CHECK_STR_CONTAINS(warnings, "fails its checksum");
  CHECK_STR_CONTAINS(warnings, a.path);
  mc.put(mc.user, &a2, &da2); /* the next read puts it again */
  CHECK(lh_store_digest_flush(s, &e) == LH_OK);
  CHECK_EQ(mc.get(mc.user, &a2, &got), 1);
  warnings[0] = 0;
  CHECK(raw_sql(PATH, "UPDATE file_digests SET crc32c = crc32c + 1") == SQLITE_OK);
  CHECK_EQ(mc.get(mc.user, &a2, &got), 0);
  CHECK_STR_CONTAINS(warnings, "fails its checksum");
  lh_log_set_sink(NULL, NULL);

  /* Many puts are written in batches of 128 without a flush. */
  for (int i = 0; i < 130; i++) {
    char p[64];
    snprintf(p, sizeof p, "/docs/f%03d.txt", i);
    lh_file_identity id = ident(p, (uint64_t)i);
    lh_file_digest d = digest((uint8_t)i, -1);
    dc.put(dc.user, &id, &d);
  }
  CHECK_EQ(rows("doc"), 128);
  {
    lh_file_identity id = ident("/docs/f129.txt", 129);
    CHECK_EQ(dc.get(dc.user, &id, &got), 1); /* still in memory */
    CHECK_EQ(got.sha256[0], 129);
  }
  CHECK(lh_store_digest_flush(s, &e) == LH_OK);
  CHECK_EQ(rows("doc"), 130);

  /* A read-only handle reads but never writes. */
  lh_store_params ro = sp;
  ro.read_only = 1;
  t = setup_store_open(PATH, &ro);
  CHECK(lh_store_digest_cache(t, "doc", &tc, &e) == LH_OK);
  {
    lh_file_identity id = ident("/docs/f007.txt", 7), nid = ident("/docs/new.txt", 1);
    lh_file_digest d = digest(1, -1);
    CHECK_EQ(tc.get(tc.user, &id, &got), 1);
    tc.put(tc.user, &nid, &d);
    CHECK(lh_store_digest_flush(t, &e) == LH_OK);
  }
  lh_store_close(t);
  CHECK_EQ(rows("doc"), 130);

  /* gc drops the rows of files that are gone: a real file stays, the made-up paths go. */
  char real[700];
  snprintf(real, sizeof real, "%s/here.txt", lh_test_tmpdir());
  FILE *f = fopen(real, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  {
    lh_file_identity id = ident(real, 0);
    lh_file_digest d = digest(2, -1);
    dc.put(dc.user, &id, &d);
    CHECK(lh_store_digest_flush(s, &e) == LH_OK);
  }
  lh_store_gc_params gp = lh_store_gc_default_params();
  lh_store_gc_report gr;
  gp.dry_run = 1;
  CHECK(lh_store_gc(s, &gp, &gr, &e) == LH_OK);
  CHECK_EQ(gr.digests_dropped, 131);
  CHECK_EQ(rows("doc"), 131);
  gp.dry_run = 0;
  gp.drop_gone_digests = 0;
  CHECK(lh_store_gc(s, &gp, &gr, &e) == LH_OK);
  CHECK_EQ(gr.digests_dropped, 0);
  CHECK_EQ(rows("doc"), 131);
  gp.drop_gone_digests = 1;
  CHECK(lh_store_gc(s, &gp, &gr, &e) == LH_OK);
  CHECK_EQ(gr.digests_dropped, 131);
  CHECK_EQ(rows("doc"), 1);
  CHECK_EQ(rows("model"), 0);

  /* The model's weights: read in full on the first open, taken from the cache on the second. */
  lh_model_params mp = lh_model_default_params();
  mp.threads = 2;
  counting cnt = {mc, 0, 0, 0};
  lh_digest_cache wrapped = {count_get, count_put, &cnt};
  mp.digest_cache = &wrapped;
  lh_model *m = NULL;
  lh_status st = lh_model_open("models/haul-tiny", &mp, &m, &e);
  if (st) LH_TEST_SKIP("models/haul-tiny: %s", e.msg);
  char id1[65];
  snprintf(id1, sizeof id1, "%s", lh_model_id(m));
  lh_model_close(m);
  CHECK_EQ(cnt.gets, 1);
  CHECK_EQ(cnt.hits, 0);
  CHECK_EQ(cnt.puts, 1);
  lh_store_close(s);
  CHECK_EQ(rows("model"), 1);
  s = setup_store_open(PATH, &sp);
  CHECK(lh_store_digest_cache(s, "model", &mc, &e) == LH_OK);
  cnt = (counting){mc, 0, 0, 0};
  CHECK(lh_model_open("models/haul-tiny", &mp, &m, &e) == LH_OK);
  CHECK_EQ(cnt.hits, 1);
  CHECK_EQ(cnt.puts, 0);
  CHECK(!strcmp(lh_model_id(m), id1));
  lh_model_close(m);
  lh_store_close(s);
  return lh_test_end();
}
