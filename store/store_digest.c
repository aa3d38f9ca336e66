/* store_digest.c — the file digest cache (table file_digests): engine/engine.h's lh_digest_cache
 * over the store, so that a file read in full once (a model's weights, a request's documents) is
 * not read again while its identity (real path, size, mtime, ctime, inode, device) stays the same.
 *
 * One context per (handle, kind), made by lh_store_digest_cache and freed by lh_store_close. A get
 * looks at the context's unwritten puts first, then at the row of (kind, path): it hits only when
 * the row passes its CRC-32C (digest_crc) and every identity field equals. Puts are kept in memory
 * and written in one transaction when DIGEST_BATCH have gathered, on lh_store_digest_flush and on
 * lh_store_close: a folder of thousands of documents costs one commit, not one per file.
 *
 * Invariants:
 *   1. A row's crc32c is written in the statement that writes the row; a row failing it is never a
 *      hit (it is a miss with a warning, and the next put replaces it).
 *   2. The callbacks never fail their caller: a store error is a miss (get) or a logged warning
 *      (put, flush); losing a put costs one more read of the file, never a wrong digest.
 *   3. A read-only handle never writes: its puts are dropped.
 * It must never: run inside another store transaction (the callbacks run from lh_model_open and
 * lh_inputs_digest, outside any), or hand out a digest for an identity other than the one asked.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_internal.h"
#include "util/log.h"

#define DIGEST_BATCH 128

typedef struct pending {
  lh_file_identity id;
  lh_file_digest d;
} pending;

struct lh_store__digests {
  lh_store *s;
  char kind[32];
  pending *put;
  size_t n, cap;
  struct lh_store__digests *next;
};

uint32_t lh_store__digest_crc(const char *kind, const lh_file_identity *id, const lh_file_digest *d) {
  uint32_t crc = lh_store__crc_field(0, kind, strlen(kind));
  crc = lh_store__crc_field(crc, id->path, strlen(id->path));
  crc = lh_store__crc_i64(crc, (int64_t)id->size);
  crc = lh_store__crc_i64(crc, id->mtime_ns);
  crc = lh_store__crc_i64(crc, id->ctime_ns);
  crc = lh_store__crc_i64(crc, (int64_t)id->inode);
  crc = lh_store__crc_i64(crc, (int64_t)id->device);
  crc = lh_store__crc_field(crc, d->sha256, 32);
  return lh_store__crc_i64(crc, d->nonfinite_at);
}

static int same_identity(const lh_file_identity *a, const lh_file_identity *b) {
  return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->inode == b->inode &&
         a->device == b->device && !strcmp(a->path, b->path);
}

static lh_status flush_one(struct lh_store__digests *c, lh_error *err) {
  lh_store *s = c->s;
  if (!c->n) return LH_OK;
  lh_status st = lh_store__begin(s, "caching file digests", err);
  if (st) {
    c->n = 0; /* lost: a later read of the file puts it again */
    return st;
  }
  sqlite3_stmt *q = NULL;
  st = lh_store__prepare(s,
                           "INSERT OR REPLACE INTO file_digests(kind, path, size, mtime_ns, ctime_ns, inode, device, "
                           "sha256, nonfinite_at, crc32c, updated_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                           "?10, ?11)",
                           &q, err);
  int64_t now = lh_store__now_ms();
  for (size_t i = 0; i < c->n && !st; i++) {
    const pending *p = &c->put[i];
    sqlite3_reset(q);
    lh_store__bind(q, SQL_ARGS(SQL_TEXT(c->kind), SQL_TEXT(p->id.path), SQL_INT(p->id.size), SQL_INT(p->id.mtime_ns),
                               SQL_INT(p->id.ctime_ns), SQL_INT(p->id.inode), SQL_INT(p->id.device),
                               SQL_BLOB(p->d.sha256, 32), SQL_INT(p->d.nonfinite_at),
                               SQL_INT(lh_store__digest_crc(c->kind, &p->id, &p->d)), SQL_INT(now)));
    int rc = sqlite3_step(q);
    if (rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "caching the digest of %s", p->id.path);
  }
  sqlite3_finalize(q);
  c->n = 0; /* written or lost: either way a later read of the file puts it again */
  return lh_store__end(s, st, "caching file digests", err);
}

lh_status lh_store_digest_flush(lh_store *s, lh_error *err) {
  lh_status first = LH_OK;
  for (struct lh_store__digests *c = s->digests; c; c = c->next) {
    lh_error e;
    lh_status st = flush_one(c, &e);
    if (st && !first) {
      first = st;
      if (err) *err = e;
    }
  }
  return first;
}

static int digest_get(void *user, const lh_file_identity *key, lh_file_digest *out) {
  struct lh_store__digests *c = user;
  for (size_t i = c->n; i-- > 0;)
    if (!strcmp(c->put[i].id.path, key->path)) {
      if (!same_identity(&c->put[i].id, key)) return 0;
      *out = c->put[i].d;
      return 1;
    }
  lh_store *s = c->s;
  sqlite3_stmt *q;
  lh_error e;
  lh_status st = lh_store__row(s, &e, &q,
                               "SELECT size, mtime_ns, ctime_ns, inode, device, sha256, nonfinite_at, crc32c "
                               "FROM file_digests WHERE kind = ?1 AND path = ?2",
                               SQL_ARGS(SQL_TEXT(c->kind), SQL_TEXT(key->path)), "reading the digest of %s",
                               key->path);
  if (st == LH_ENOTFOUND) return 0;
  if (st) {
    lh_log_warn("%s (reading it again)", e.msg);
    return 0;
  }
  lh_file_identity id;
  lh_file_digest d;
  memset(&d, 0, sizeof d);
  memcpy(id.path, key->path, sizeof id.path);
  id.size = (uint64_t)sqlite3_column_int64(q, 0);
  id.mtime_ns = sqlite3_column_int64(q, 1);
  id.ctime_ns = sqlite3_column_int64(q, 2);
  id.inode = (uint64_t)sqlite3_column_int64(q, 3);
  id.device = (uint64_t)sqlite3_column_int64(q, 4);
  const void *sha = sqlite3_column_blob(q, 5);
  int sha_n = sqlite3_column_bytes(q, 5);
  if (sha && sha_n == 32) memcpy(d.sha256, sha, 32);
  d.nonfinite_at = sqlite3_column_int64(q, 6);
  int64_t crc = sqlite3_column_int64(q, 7);
  sqlite3_finalize(q);
  if (sha_n != 32 || crc != (int64_t)lh_store__digest_crc(c->kind, &id, &d)) {
    lh_log_warn("%s: the cached digest of %s (%s) fails its checksum (CRC-32C): reading the file again", s->path,
                key->path, c->kind);
    return 0;
  }
  if (!same_identity(&id, key)) return 0;
  *out = d;
  return 1;
}

static void digest_put(void *user, const lh_file_identity *key, const lh_file_digest *value) {
  struct lh_store__digests *c = user;
  if (c->s->p.read_only) return;
  for (size_t i = 0; i < c->n; i++) /* a newer read of the same path replaces the unwritten one */
    if (!strcmp(c->put[i].id.path, key->path)) {
      c->put[i].id = *key;
      c->put[i].d = *value;
      return;
    }
  if (c->n == c->cap) {
    size_t nc = c->cap ? 2 * c->cap : 8;
    pending *np = realloc(c->put, nc * sizeof *np);
    if (!np) {
      lh_log_warn("%s: out of memory caching the digest of %s", c->s->path, key->path);
      return;
    }
    c->put = np, c->cap = nc;
  }
  c->put[c->n].id = *key;
  c->put[c->n].d = *value;
  c->n++;
  lh_error e;
  if (c->n >= DIGEST_BATCH && flush_one(c, &e)) lh_log_warn("%s (the files are read again next time)", e.msg);
}

lh_status lh_store_digest_cache(lh_store *s, const char *kind, lh_digest_cache *cache, lh_error *err) {
  memset(cache, 0, sizeof *cache);
  if (!kind || !*kind || strlen(kind) >= sizeof s->digests->kind)
    return lh_error_set(err, LH_EINVAL, "%s: a digest cache kind is 1 to %zu characters", s->path,
                        sizeof s->digests->kind - 1);
  struct lh_store__digests *c = s->digests;
  while (c && strcmp(c->kind, kind)) c = c->next;
  if (!c) {
    if (!(c = calloc(1, sizeof *c))) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", s->path);
    c->s = s;
    snprintf(c->kind, sizeof c->kind, "%s", kind);
    c->next = s->digests;
    s->digests = c;
  }
  cache->get = digest_get;
  cache->put = digest_put;
  cache->user = c;
  return LH_OK;
}

void lh_store__digests_close(lh_store *s) {
  lh_error e;
  if (!s->p.read_only && lh_store_digest_flush(s, &e)) lh_log_warn("%s (the files are read again next time)", e.msg);
  while (s->digests) {
    struct lh_store__digests *c = s->digests;
    s->digests = c->next;
    free(c->put);
    free(c);
  }
}

lh_status lh_store__drop_gone_digests(lh_store *s, int dry_run, int64_t *dropped, lh_error *err) {
  *dropped = 0;
  /* The paths are looked at before the write lock is taken: stat() of many files must not hold
   * other processes up. A file that appears again meanwhile only costs one read. */
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q, "SELECT kind, path FROM file_digests", SQL_NO_ARGS);
  if (st) return st;
  char **gone = NULL;
  size_t n = 0, cap = 0;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *kind = (const char *)sqlite3_column_text(q, 0), *path = (const char *)sqlite3_column_text(q, 1);
    struct stat sb;
    if (!kind || !path || stat(path, &sb) == 0) continue;
    if (n + 2 > cap) {
      size_t nc = cap ? 2 * cap : 32;
      char **ng = realloc(gone, nc * sizeof *ng);
      if (!ng) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory", s->path);
        break;
      }
      gone = ng, cap = nc;
    }
    if (!(gone[n] = strdup(kind)) || !(gone[n + 1] = strdup(path))) {
      st = lh_error_set(err, LH_ENOMEM, "%s: out of memory", s->path);
      n += gone[n] ? 1 : 0;
      break;
    }
    n += 2;
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "listing the cached file digests");
  if (!st && n && dry_run) *dropped = (int64_t)(n / 2);
  if (!st && n && !dry_run) {
    st = lh_store__begin(s, "dropping the digests of files that are gone", err);
    if (!st) {
      for (size_t i = 0; i + 1 < n && !st; i += 2) {
        st = lh_store__run(s, err, "DELETE FROM file_digests WHERE kind = ?1 AND path = ?2",
                           SQL_ARGS(SQL_TEXT(gone[i]), SQL_TEXT(gone[i + 1])), "dropping the digest of %s",
                           gone[i + 1]);
        if (!st) *dropped += sqlite3_changes(s->db);
      }
      st = lh_store__end(s, st, "dropping the digests of files that are gone", err);
      if (st) *dropped = 0;
    }
  }
  for (size_t i = 0; i < n; i++) free(gone[i]);
  free(gone);
  return st;
}
