/* store.c — the store's connection: open, durability settings, schema and forward migrations, the
 * mapping of SQLite failures to lh_status with messages a user can act on, and the statement
 * helpers (lh_store__run, __row, __query) every store file runs its SQL through.
 *
 * Invariants:
 *   1. A file is a longhaul store when its application_id is LH_STORE_APP_ID; an empty file becomes
 *      one. Anything else (another SQLite database, a non-database) is refused, never written.
 *   2. user_version is the schema version. Migrations run forward only, all in one BEGIN IMMEDIATE
 *      transaction that re-reads the version under the lock, so two processes opening an old file
 *      at once migrate it once. A version above LH_STORE_SCHEMA_VERSION is refused (LH_EUNSUPPORTED)
 *      before anything is written.
 *   3. page_size and auto_vacuum=INCREMENTAL are fixed when the file is created (they cannot change
 *      later without a full VACUUM); journal mode, synchronous, cache size, foreign keys and the
 *      busy timeout are set on every connection. docs/store.md has the measurements behind them.
 *      secure_delete is FAST on every writer, whatever SQLite was built with (Debian builds it ON):
 *      ON zeroes every freed page, so the journal of a DELETE holds all the data it deletes, and on
 *      a full disk nothing can be deleted; FAST leaves freed overflow pages as they are.
 *   4. Every write transaction is BEGIN IMMEDIATE: it takes the write lock first or fails with
 *      LH_EBUSY after busy_timeout_ms, so no transaction dies half way on a lock upgrade.
 *   5. Every connection has the row checksum functions (lh_result_crc, lh_error_crc) before any
 *      statement runs; migrations use them, the schema (views, triggers, constraints) never does.
 *   6. lh_store_discard removes a file only when its handle made it (nothing was at the path, and
 *      the schema was made under its write lock) and, looked at under the write lock, no model,
 *      batch or checkpoint is in it and it is still the file at the path.
 * It must never: print, exit, or leave a transaction open after returning an error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "util/hash.h"
#include "util/log.h"

#define LH_STORE_APP_ID 0x4c485354 /* "LHST" */
#define LH_STORE_PAGE_SIZE 65536

/* The store's file and those SQLite keeps beside it, by the suffix of their names. */
static const char *const file_tails[] = {"", "-wal", "-shm", "-journal"};

static const char *const schema_v1 =
    "CREATE TABLE models(\n"
    "  id TEXT PRIMARY KEY,                 -- lh_model_id: SHA-256 hex of config + tensor index\n"
    "  name TEXT,\n"
    "  info TEXT,\n"
    "  created_ms INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE batches(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  name TEXT NOT NULL UNIQUE,\n"
    "  created_ms INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE jobs(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  batch_id INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,\n"
    "  custom_id TEXT NOT NULL,\n"
    "  group_key TEXT,\n"
    "  model_id TEXT,\n"
    "  request TEXT NOT NULL,\n"
    "  state TEXT NOT NULL CHECK(state IN ('queued','running','done','failed')),\n"
    "  attempts INTEGER NOT NULL DEFAULT 0,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  started_ms INTEGER,\n"
    "  finished_ms INTEGER,\n"
    "  updated_ms INTEGER NOT NULL,\n"
    "  error TEXT,\n"
    "  owner_host TEXT,                     -- claim holder (store_jobs.c): machine identity\n"
    "  owner_name TEXT,                     -- its host name, for display\n"
    "  owner_pid INTEGER,\n"
    "  owner_start INTEGER,                 -- the owner process's start time (clock ticks)\n"
    "  heartbeat_ms INTEGER,\n"
    "  ckpt_id INTEGER REFERENCES checkpoints(id) ON DELETE SET NULL, -- resume point\n"
    "  tokens_total INTEGER NOT NULL DEFAULT -1,\n"
    "  UNIQUE(batch_id, custom_id)\n"
    ");\n"
    "CREATE INDEX jobs_state ON jobs(state, batch_id, id);\n"
    "CREATE INDEX jobs_group ON jobs(batch_id, group_key);\n"
    "CREATE INDEX jobs_ckpt ON jobs(ckpt_id);\n"
    "CREATE TABLE documents(\n"
    "  job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,\n"
    "  seq INTEGER NOT NULL,\n"
    "  path TEXT NOT NULL,\n"
    "  bytes INTEGER NOT NULL,\n"
    "  sha256 TEXT,\n"
    "  tok_start INTEGER NOT NULL,\n"
    "  tok_end INTEGER NOT NULL,\n"
    "  meta TEXT,\n"
    "  PRIMARY KEY(job_id, seq)\n"
    ") WITHOUT ROWID;\n"
    "CREATE TABLE results(\n"
    "  job_id INTEGER PRIMARY KEY REFERENCES jobs(id) ON DELETE CASCADE,\n"
    "  json TEXT NOT NULL,\n"
    "  blob BLOB,\n"
    "  created_ms INTEGER NOT NULL\n"
    ");\n"
    "CREATE TABLE checkpoints(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  model_id TEXT NOT NULL REFERENCES models(id),\n"
    "  prefix_hash BLOB NOT NULL CHECK(length(prefix_hash) = 32), -- SHA-256 of tokens[0:pos], LE u32\n"
    "  pos INTEGER NOT NULL CHECK(pos > 0),\n"
    "  parent_id INTEGER REFERENCES checkpoints(id), -- no cascade: a parent goes only with its subtree\n"
    "  parent_pos INTEGER NOT NULL CHECK(parent_pos >= 0 AND parent_pos < pos),\n"
    "  job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL, -- producer\n"
    "  has_state INTEGER NOT NULL DEFAULT 1, -- 0: thinned by gc, KV rows only\n"
    "  n_lightning INTEGER NOT NULL,\n"
    "  lightning_bytes INTEGER NOT NULL,\n"
    "  n_softmax INTEGER NOT NULL,\n"
    "  kv_dtype INTEGER NOT NULL,\n"
    "  kv_row_bytes INTEGER NOT NULL,\n"
    "  vocab_size INTEGER NOT NULL,\n"
    "  state_bytes INTEGER NOT NULL,\n"
    "  kv_bytes INTEGER NOT NULL,\n"
    "  created_ms INTEGER NOT NULL,\n"
    "  last_used_ms INTEGER NOT NULL,\n"
    "  UNIQUE(model_id, prefix_hash)\n"
    ");\n"
    "CREATE INDEX checkpoints_resume ON checkpoints(model_id, pos) WHERE has_state = 1;\n"
    "CREATE INDEX checkpoints_parent ON checkpoints(parent_id);\n"
    "CREATE INDEX checkpoints_job ON checkpoints(job_id);\n"
    "CREATE TABLE ckpt_pages(\n"
    "  id INTEGER PRIMARY KEY,\n"
    "  ckpt_id INTEGER NOT NULL REFERENCES checkpoints(id) ON DELETE CASCADE,\n"
    "  part INTEGER NOT NULL,               -- 0 lightning, 1 kv, 2 logits (lh_store_part)\n"
    "  layer INTEGER NOT NULL,\n"
    "  seq INTEGER NOT NULL,                -- page number within (part, layer)\n"
    "  nbytes INTEGER NOT NULL,\n"
    "  crc32c INTEGER NOT NULL,\n"
    "  data BLOB NOT NULL,                  -- last, so reading the other columns skips it\n"
    "  UNIQUE(ckpt_id, part, layer, seq)\n"
    ");\n";

/* Version 2: every row a result is rebuilt from carries a CRC-32C that reads check (results: over
 * the job id, json and blob; a failed job's error text: over the job id and the text; see
 * lh_store__result_crc), jobs carry the runner's identity of their inputs, and file_digests caches
 * file digests by file identity (store_digest.c). Rows that exist get their checksums here, with
 * the SQL functions open registers; a results row always has one (NOT NULL), an error text has
 * one exactly while it is set. */
static const char *const schema_v2 =
    "ALTER TABLE jobs ADD COLUMN identity TEXT;\n"
    "ALTER TABLE jobs ADD COLUMN error_crc32c INTEGER;\n"
    "ALTER TABLE results ADD COLUMN crc32c INTEGER NOT NULL DEFAULT 0;\n"
    "CREATE TABLE file_digests(\n"
    "  kind TEXT NOT NULL,                  -- whose files: 'model' weights, 'doc' documents\n"
    "  path TEXT NOT NULL,                  -- realpath() of the file\n"
    "  size INTEGER NOT NULL,\n"
    "  mtime_ns INTEGER NOT NULL,\n"
    "  ctime_ns INTEGER NOT NULL,\n"
    "  inode INTEGER NOT NULL,              -- st_ino and st_dev as int64 bit patterns\n"
    "  device INTEGER NOT NULL,\n"
    "  sha256 BLOB NOT NULL,                -- 32 bytes: the file's digest\n"
    "  nonfinite_at INTEGER NOT NULL,       -- first non-finite element's offset, -1 none\n"
    "  crc32c INTEGER NOT NULL,             -- over every column above (store_digest.c)\n"
    "  updated_ms INTEGER NOT NULL,\n"
    "  PRIMARY KEY(kind, path)\n"
    ") WITHOUT ROWID;\n"
    "UPDATE results SET crc32c = lh_result_crc(job_id, json, blob);\n"
    "UPDATE jobs SET error_crc32c = lh_error_crc(id, error) WHERE error IS NOT NULL;\n";

/* migrations[v-1] takes a file from version v-1 to v. Append; never edit a shipped entry. */
static const char *const migrations[LH_STORE_SCHEMA_VERSION] = {schema_v1, schema_v2};

/* ---- row checksums ------------------------------------------------------------------------- */

uint32_t lh_store__crc_i64(uint32_t crc, int64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)v >> (8 * i));
  return lh_crc32c(crc, b, 8);
}

uint32_t lh_store__crc_field(uint32_t crc, const void *p, size_t n) {
  crc = lh_store__crc_i64(crc, (int64_t)n);
  return n ? lh_crc32c(crc, p, n) : crc;
}

uint32_t lh_store__result_crc(int64_t job_id, const void *json, size_t json_len, const void *blob, size_t blob_len) {
  uint32_t crc = lh_store__crc_field(lh_store__crc_i64(0, job_id), json, json_len);
  return lh_store__crc_field(crc, blob, blob ? blob_len : 0);
}

uint32_t lh_store__error_crc(int64_t job_id, const void *text, size_t len) {
  return lh_store__crc_field(lh_store__crc_i64(0, job_id), text, len);
}

/* lh_result_crc(job_id, json, blob) and lh_error_crc(job_id, text): the text and blob bytes as
 * stored (sqlite3_value_text/_blob, then _bytes, in that order as SQLite requires). */
static void sql_result_crc(sqlite3_context *c, int argc, sqlite3_value **v) {
  (void)argc;
  const void *json = sqlite3_value_text(v[1]);
  size_t jn = (size_t)sqlite3_value_bytes(v[1]);
  const void *blob = sqlite3_value_blob(v[2]);
  size_t bn = (size_t)sqlite3_value_bytes(v[2]);
  sqlite3_result_int64(c, lh_store__result_crc(sqlite3_value_int64(v[0]), json, jn, blob, bn));
}

static void sql_error_crc(sqlite3_context *c, int argc, sqlite3_value **v) {
  (void)argc;
  if (sqlite3_value_type(v[1]) == SQLITE_NULL) {
    sqlite3_result_null(c); /* no text, no checksum: error_crc32c is NULL exactly when error is */
    return;
  }
  const void *t = sqlite3_value_text(v[1]);
  size_t n = (size_t)sqlite3_value_bytes(v[1]);
  sqlite3_result_int64(c, lh_store__error_crc(sqlite3_value_int64(v[0]), t, n));
}

#ifndef SQLITE_DIRECTONLY
#define SQLITE_DIRECTONLY 0 /* SQLite before 3.30: the functions are usable from the schema too (it never uses them) */
#endif

static lh_status register_functions(lh_store *s, lh_error *err) {
  const int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function_v2(s->db, "lh_result_crc", 3, flags, NULL, sql_result_crc, NULL, NULL, NULL);
  if (rc == SQLITE_OK)
    rc = sqlite3_create_function_v2(s->db, "lh_error_crc", 2, flags, NULL, sql_error_crc, NULL, NULL, NULL);
  if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "registering the checksum functions");
  return LH_OK;
}

lh_store_params lh_store_default_params(void) {
  lh_store_params p;
  memset(&p, 0, sizeof p);
  p.create = 1;
  p.busy_timeout_ms = 30000;
  p.lease_s = 120;
  p.heartbeat = 1;
  p.page_bytes = (size_t)8 << 20;
  p.cache_mib = 64;
  return p;
}

int64_t lh_store__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static lh_status sql_verror(lh_store *s, int rc, lh_error *err, const char *fmt, va_list ap) {
  char what[512];
  vsnprintf(what, sizeof what, fmt, ap);
  const char *path = s ? s->path : "store";
  const char *msg = s && s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc);
  int sys = s && s->db ? sqlite3_system_errno(s->db) : 0;
  /* SQLite reports a write stopped by the file size limit (ulimit -f) as a full disk or a bare I/O
   * error, its errno often lost: where the limit is set, it is named as the likely cause. */
  struct rlimit fsize;
  if (((rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR) && sys != ENOSPC &&
      getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY)
    return lh_error_set(err, LH_EFULL,
                        "%s: %s: %s: this process may write no file past %llu bytes (ulimit -f), which the "
                        "store likely reached; nothing was half written: raise the limit, then rerun to resume",
                        path, what, msg, (unsigned long long)fsize.rlim_cur);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return lh_error_set(err, LH_EBUSY,
                          "%s: %s: the database is locked by another process (waited %d ms); another longhaul "
                          "may be writing a checkpoint or holding a transaction: retry, or raise the busy timeout",
                          path, what, s ? s->p.busy_timeout_ms : 0);
    case SQLITE_FULL:
      if (s && s->p.max_db_bytes > 0 && sys != ENOSPC)
        return lh_error_set(err, LH_EFULL,
                            "%s: %s: the database reached its size limit of %lld bytes; nothing was half "
                            "written: free space (longhaul store gc) or raise the limit, then rerun to resume",
                            path, what, (long long)s->p.max_db_bytes);
      return lh_error_set(err, LH_EFULL,
                          "%s: %s: the disk is full; nothing was half written: free space (delete other files on "
                          "that disk, or `longhaul store gc --db %s` with --keep-last, --older-than or --max-size, "
                          "which itself needs about 1 MiB free), then rerun to resume",
                          path, what, path);
    case SQLITE_READONLY:
      if (rc == SQLITE_READONLY_DBMOVED) /* not a permission: the name no longer leads to this file */
        return lh_error_set(err, LH_EIO,
                            "%s: %s: the database file was removed or renamed while this process had it open "
                            "(its folder deleted or moved?), so nothing more can be written to it: put it back, "
                            "or rerun, which starts a new store there and computes what it lost again",
                            path, what);
      if (rc == SQLITE_READONLY_ROLLBACK)
        return lh_error_set(err, LH_EINVAL,
                            "%s: %s: a writer died in the middle of a transaction and its journal must be rolled "
                            "back, which a read-only handle cannot do: open the store writable once",
                            path, what);
      return lh_error_set(err, LH_EINVAL,
                          "%s: %s: the database is read-only (%s): check the file's and its directory's "
                          "permissions and the mount",
                          path, what, msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return lh_error_set(err, LH_ECORRUPT,
                          "%s: %s: %s (not a longhaul store, or its SQLite structure is damaged, which `longhaul "
                          "store verify --repair` cannot fix): move it aside with its -journal file (the next run "
                          "starts a new store and computes every job again), salvage what it holds with `sqlite3 "
                          "%s .recover`, or restore it from a backup",
                          path, what, msg, path);
    case SQLITE_NOMEM:
      return lh_error_set(err, LH_ENOMEM, "%s: %s: out of memory", path, what);
    case SQLITE_CONSTRAINT:
      return lh_error_set(err, LH_EINVAL, "%s: %s: %s", path, what, msg);
    case SQLITE_CANTOPEN:
      return lh_error_set(err, LH_EIO, "%s: %s: cannot open the file or its journal (%s%s%s); is the directory "
                          "writable?", path, what, msg, sys ? ": " : "", sys ? strerror(sys) : "");
    case SQLITE_IOERR:
      if (sys == ENOSPC)
        return lh_error_set(err, LH_EFULL,
                            "%s: %s: the disk is full; nothing was half written: free space (delete other files on "
                            "that disk, or `longhaul store gc --db %s` with --keep-last, --older-than or --max-size, "
                            "which itself needs about 1 MiB free), then rerun to resume",
                            path, what, path);
      return lh_error_set(err, LH_EIO, "%s: %s: I/O error (%s%s%s)", path, what, msg, sys ? ": " : "",
                          sys ? strerror(sys) : "");
    default:
      return lh_error_set(err, LH_EIO, "%s: %s: %s", path, what, msg);
  }
}

lh_status lh_store__sql_error(lh_store *s, int rc, lh_error *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lh_status st = sql_verror(s, rc, err, fmt, ap);
  va_end(ap);
  return st;
}

lh_status lh_store__exec(lh_store *s, const char *sql, lh_error *err) {
  int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
  if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "%.60s", sql);
  return LH_OK;
}

lh_status lh_store__prepare(lh_store *s, const char *sql, sqlite3_stmt **st, lh_error *err) {
  int rc = sqlite3_prepare_v2(s->db, sql, -1, st, NULL);
  if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "preparing '%.60s'", sql);
  return LH_OK;
}

lh_status lh_store__writable(lh_store *s, const char *what, lh_error *err) {
  if (s->p.read_only)
    return lh_error_set(err, LH_EINVAL, "%s: %s: the store was opened read-only", s->path, what);
  return LH_OK;
}

lh_status lh_store__begin(lh_store *s, const char *what, lh_error *err) {
  lh_status st = lh_store__writable(s, what, err);
  if (st) return st;
  int rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
  if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "%s", what);
  return LH_OK;
}

lh_status lh_store__commit(lh_store *s, const char *what, lh_error *err) {
  int rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
  if (rc != SQLITE_OK) {
    lh_status st = lh_store__sql_error(s, rc, err, "committing %s", what);
    lh_store__rollback(s);
    return st;
  }
  return LH_OK;
}

void lh_store__rollback(lh_store *s) {
  if (!sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

lh_status lh_store__end(lh_store *s, lh_status st, const char *what, lh_error *err) {
  if (st) {
    lh_store__rollback(s);
    return st;
  }
  return lh_store__commit(s, what, err);
}

char *lh_store__col_strdup(sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  return t ? strdup((const char *)t) : NULL;
}

/* ---- statements ---------------------------------------------------------------------------- */

void lh_store__bind(sqlite3_stmt *q, const lh_store__arg *a, int n) {
  for (int i = 0; i < n; i++) {
    const lh_store__arg *x = &a[i];
    switch (x->kind) {
      case 'o':
        if (!x->i) {
          sqlite3_bind_null(q, i + 1);
          break;
        }
        /* fall through */
      case 'i': sqlite3_bind_int64(q, i + 1, x->i); break;
      case 't': sqlite3_bind_text(q, i + 1, x->p, -1, SQLITE_STATIC); break;
      case 'b':
        if (x->p)
          sqlite3_bind_blob64(q, i + 1, x->p, x->n, SQLITE_STATIC);
        else
          sqlite3_bind_null(q, i + 1);
        break;
      case 'z': sqlite3_bind_zeroblob64(q, i + 1, x->n); break;
      default: sqlite3_bind_null(q, i + 1); break;
    }
  }
}

lh_status lh_store__query(lh_store *s, lh_error *err, sqlite3_stmt **q, const char *sql, const lh_store__arg *a,
                          int n) {
  lh_status st = lh_store__prepare(s, sql, q, err);
  if (st) return st;
  lh_store__bind(*q, a, n);
  return LH_OK;
}

lh_status lh_store__run(lh_store *s, lh_error *err, const char *sql, const lh_store__arg *a, int n, const char *what,
                        ...) {
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q, sql, a, n);
  if (st) return st;
  int rc = sqlite3_step(q);
  sqlite3_finalize(q);
  if (rc == SQLITE_DONE) return LH_OK;
  va_list ap;
  va_start(ap, what);
  st = sql_verror(s, rc, err, what, ap);
  va_end(ap);
  return st;
}

lh_status lh_store__row(lh_store *s, lh_error *err, sqlite3_stmt **q, const char *sql, const lh_store__arg *a, int n,
                        const char *what, ...) {
  lh_status st = lh_store__query(s, err, q, sql, a, n);
  if (st) {
    *q = NULL;
    return st;
  }
  int rc = sqlite3_step(*q);
  if (rc == SQLITE_ROW) return LH_OK;
  sqlite3_finalize(*q);
  *q = NULL;
  if (rc == SQLITE_DONE) return LH_ENOTFOUND;
  va_list ap;
  va_start(ap, what);
  st = sql_verror(s, rc, err, what, ap);
  va_end(ap);
  return st;
}

lh_status lh_store__int(lh_store *s, const char *sql, int64_t *out, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, sql, SQL_NO_ARGS, "reading %.40s", sql);
  if (st == LH_ENOTFOUND) return lh_store__sql_error(s, SQLITE_DONE, err, "reading %.40s", sql);
  if (st) return st;
  *out = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return LH_OK;
}

/* Identity of this process for claims (see store_internal.h). */
static void read_line(const char *path, char *out, size_t n) {
  out[0] = 0;
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fgets(out, (int)n, f)) out[strcspn(out, "\n")] = 0;
  fclose(f);
}

int64_t lh_store__proc_start(int64_t pid);
int64_t lh_store__proc_start(int64_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%lld/stat", (long long)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* Field 2 is "(comm)" and may hold spaces; fields after the last ')' are plain. */
  char *p = strrchr(buf, ')');
  if (!p) return -1;
  p++;
  char state = 0;
  long long v = 0;
  int field = 2;
  for (char *tok = strtok(p, " "); tok; tok = strtok(NULL, " ")) {
    field++;
    if (field == 3) state = tok[0];
    if (field == 22) {
      v = atoll(tok);
      break;
    }
  }
  if (field != 22) return -1;
  if (state == 'Z' || state == 'X') return -1; /* exited, not yet reaped: dead for our purpose */
  return v;
}

static void owner_init(lh_store_owner *o) {
  char boot[64], ns[64] = "";
  if (gethostname(o->hostname, sizeof o->hostname) != 0) snprintf(o->hostname, sizeof o->hostname, "unknown");
  o->hostname[sizeof o->hostname - 1] = 0;
  read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  ssize_t k = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[k > 0 ? k : 0] = 0;
  snprintf(o->host, sizeof o->host, "%s %s %s", o->hostname, boot[0] ? boot : "-", ns[0] ? ns : "-");
  o->pid = getpid();
  int64_t st = lh_store__proc_start(o->pid);
  o->start = st > 0 ? st : 0;
}

/* What the file is: schema version, application id, number of schema objects. */
static lh_status identify(lh_store *s, int64_t *v, int64_t *app, int64_t *tables, lh_error *err) {
  lh_status st;
  if ((st = lh_store__int(s, "PRAGMA user_version", v, err)) ||
      (st = lh_store__int(s, "PRAGMA application_id", app, err)) ||
      (st = lh_store__int(s, "SELECT count(*) FROM sqlite_schema", tables, err)))
    return st;
  return LH_OK;
}

/* Refuse foreign and newer files before anything (even a journal mode) is changed. */
static lh_status check_identity(lh_store *s, int64_t v, int64_t app, int64_t tables, lh_error *err) {
  if (app != LH_STORE_APP_ID && (tables > 0 || s->p.read_only))
    return lh_error_set(err, LH_EINVAL, "%s: %s; refusing to touch it", s->path,
                        tables ? "is a SQLite database but not a longhaul store" : "is an empty file, not a longhaul store");
  if (v > LH_STORE_SCHEMA_VERSION)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "%s: made by a newer longhaul (schema %lld, this build knows up to %d): upgrade longhaul",
                        s->path, (long long)v, LH_STORE_SCHEMA_VERSION);
  return LH_OK;
}

static lh_status migrate(lh_store *s, lh_error *err) {
  lh_status st = lh_store__begin(s, "migrating the schema", err);
  if (st) return st;
  int64_t v = 0, app = 0, tables = 0;
  /* Again under the write lock: another process may have created or migrated it meanwhile. */
  if ((st = identify(s, &v, &app, &tables, err)) || (st = check_identity(s, v, app, tables, err))) goto fail;
  for (int64_t to = v + 1; to <= LH_STORE_SCHEMA_VERSION; to++) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, migrations[to - 1], NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
      st = lh_error_set(err, LH_EIO, "%s: migrating the schema to version %lld: %s", s->path, (long long)to,
                        msg ? msg : sqlite3_errstr(rc));
      sqlite3_free(msg);
      goto fail;
    }
  }
  if (v < LH_STORE_SCHEMA_VERSION) {
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d; PRAGMA application_id = %d", LH_STORE_SCHEMA_VERSION,
             LH_STORE_APP_ID);
    if ((st = lh_store__exec(s, sql, err))) goto fail;
    if (v > 0) lh_log_info("%s: schema migrated from version %lld to %d", s->path, (long long)v, LH_STORE_SCHEMA_VERSION);
  }
  if ((st = lh_store__commit(s, "the schema", err))) return st;
  s->version = LH_STORE_SCHEMA_VERSION;
  s->made = v == 0; /* read under the write lock: of two processes making one file, the one that made it */
  return LH_OK;
fail:
  lh_store__rollback(s);
  return st;
}

static int valid_word(const char *w) {
  if (!w || !*w) return 0;
  for (const char *c = w; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z'))) return 0;
  return 1;
}

static lh_status configure(lh_store *s, int creating, lh_error *err) {
  char sql[256];
  lh_status st;
  if ((st = lh_store__exec(s, "PRAGMA foreign_keys = ON", err))) return st;
  snprintf(sql, sizeof sql, "PRAGMA cache_size = %d", -(s->p.cache_mib > 0 ? s->p.cache_mib : 64) * 1024);
  if ((st = lh_store__exec(s, sql, err))) return st;
  if (s->p.read_only) return LH_OK;
  if (creating) {
    /* Only effective before the first table exists; harmless on an existing file. */
    int ps = s->p.db_page_size ? s->p.db_page_size : LH_STORE_PAGE_SIZE;
    if (ps < 512 || ps > 65536 || (ps & (ps - 1)))
      return lh_error_set(err, LH_EINVAL, "%s: page size %d is not a power of two in 512..65536", s->path, ps);
    snprintf(sql, sizeof sql, "PRAGMA page_size = %d; PRAGMA auto_vacuum = INCREMENTAL", ps);
    if ((st = lh_store__exec(s, sql, err))) return st;
  }
  const char *jm = s->p.journal_mode ? s->p.journal_mode : "truncate";
  const char *sy = s->p.synchronous ? s->p.synchronous : "full";
  if (!valid_word(jm) || !valid_word(sy))
    return lh_error_set(err, LH_EINVAL, "%s: bad journal_mode '%s' or synchronous '%s'", s->path, jm, sy);
  snprintf(sql, sizeof sql, "PRAGMA journal_mode = %s", jm);
  sqlite3_stmt *q;
  st = lh_store__row(s, err, &q, sql, SQL_NO_ARGS, "setting journal_mode %s", jm);
  if (st == LH_ENOTFOUND) return lh_store__sql_error(s, SQLITE_DONE, err, "setting journal_mode %s", jm);
  if (st) return st;
  char got[32] = "";
  if (sqlite3_column_text(q, 0)) snprintf(got, sizeof got, "%s", (const char *)sqlite3_column_text(q, 0));
  sqlite3_finalize(q);
  if (strcasecmp(got, jm) != 0)
    return lh_error_set(err, LH_EBUSY,
                        "%s: could not switch the journal mode to %s (it stays %s): another process has the "
                        "database open in another mode; close it and retry",
                        s->path, jm, got);
  snprintf(sql, sizeof sql, "PRAGMA synchronous = %s; PRAGMA secure_delete = FAST", sy);
  if ((st = lh_store__exec(s, sql, err))) return st;
  if (s->p.max_db_bytes > 0) {
    int64_t page = 0;
    if ((st = lh_store__int(s, "PRAGMA page_size", &page, err))) return st;
    int64_t pages = s->p.max_db_bytes / (page > 0 ? page : LH_STORE_PAGE_SIZE);
    if (pages < 1) pages = 1;
    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %lld", (long long)pages);
    if ((st = lh_store__exec(s, sql, err))) return st;
  }
  return LH_OK;
}

/* The folder of path into dir (n bytes: "." for a bare name, "/" for a file at the root); returns
 * the file's name within path. */
static const char *split_path(const char *path, char *dir, size_t n) {
  const char *slash = strrchr(path, '/');
  if (!slash) {
    snprintf(dir, n, ".");
    return path;
  }
  snprintf(dir, n, "%.*s", (int)(slash == path ? 1 : slash - path), path);
  return slash + 1;
}

lh_status lh_store_open(const char *path, const lh_store_params *params, lh_store **out, lh_error *err) {
  *out = NULL;
  if (!path || !*path) return lh_error_set(err, LH_EINVAL, "store: no database path given");
  lh_store *s = calloc(1, sizeof *s);
  if (!s) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", path);
  s->p = params ? *params : lh_store_default_params();
  if (s->p.busy_timeout_ms < 0) s->p.busy_timeout_ms = 0;
  if (s->p.lease_s <= 0) s->p.lease_s = 120;
  if (s->p.page_bytes == 0) s->p.page_bytes = (size_t)8 << 20;
  if (strlen(path) >= sizeof s->path) {
    free(s);
    return lh_error_set(err, LH_EINVAL, "store: path too long");
  }
  if (s->p.page_bytes < ((size_t)64 << 10) || s->p.page_bytes > ((size_t)256 << 20)) {
    size_t pb = s->p.page_bytes;
    free(s);
    return lh_error_set(err, LH_EINVAL, "%s: page_bytes %zu is outside 64 KiB .. 256 MiB", path, pb);
  }
  snprintf(s->path, sizeof s->path, "%s", path);
  pthread_mutex_init(&s->hb_mu, NULL);
  pthread_cond_init(&s->hb_cv, NULL);
  owner_init(&s->me);

  struct stat sb;
  for (size_t t = 0; s->p.no_follow && t < sizeof file_tails / sizeof *file_tails; t++) {
    char at[sizeof s->path + 16], to[4096];
    snprintf(at, sizeof at, "%s%s", path, file_tails[t]);
    if (lstat(at, &sb) != 0 || !S_ISLNK(sb.st_mode)) continue;
    const ssize_t n = readlink(at, to, sizeof to - 1);
    to[n > 0 ? n : 0] = 0;
    lh_store_close(s);
    return lh_error_set(err, LH_EIO, "%s is a symbolic link (to %s); the store in an output folder is a file of "
                        "its own, never written through a link: remove the link and rerun (or name the store you "
                        "mean with --db)", at, to);
  }
  int exists = stat(path, &sb) == 0;
  if (!exists && (s->p.read_only || !s->p.create)) {
    lh_store_close(s);
    return lh_error_set(err, LH_ENOTFOUND, "%s: no store there", path);
  }
  if (exists && !S_ISREG(sb.st_mode)) {
    lh_store_close(s);
    return lh_error_set(err, LH_EINVAL, "%s: not a regular file", path);
  }
  char dir[sizeof s->path];
  const char *name = split_path(path, dir, sizeof dir);
  if (!exists) { /* a folder that is not there is the caller's set-up (2), not the machine's (75) */
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      const int e = errno;
      lh_store_close(s);
      if (stat(dir, &sb) == 0)
        return lh_error_set(err, LH_ENOTFOUND, "%s: %s is not a folder, so no store can be made in it", path, dir);
      return lh_error_set(err, LH_ENOTFOUND, "%s: the folder %s %s; make it first (a store is made in a folder that "
                          "exists)", path, dir, e == ENOENT ? "does not exist" : strerror(e));
    }
  }
  int flags = s->p.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  /* SQLite's NOFOLLOW refuses a link anywhere in the path, and the output folder itself may be one
   * (jobs/outdir.h): open the file by its folder's real path, so that only a link at the file's own
   * name (made since the check above) is refused */
  char real[sizeof s->path + 4096];
  snprintf(real, sizeof real, "%s", path);
  if (s->p.no_follow) {
    flags |= SQLITE_OPEN_NOFOLLOW;
    char rdir[4096];
    if (realpath(dir, rdir)) snprintf(real, sizeof real, "%s%s%s", rdir, strcmp(rdir, "/") ? "/" : "", name);
  }
  int rc = sqlite3_open_v2(real, &s->db, flags | SQLITE_OPEN_FULLMUTEX, NULL);
  if (rc != SQLITE_OK) {
    lh_status st = lh_store__sql_error(s, rc, err, "opening");
    lh_store_close(s);
    return st;
  }
  if (!s->p.read_only && sqlite3_db_readonly(s->db, "main") == 1) {
    lh_store_close(s);
    return lh_error_set(err, LH_EINVAL,
                        "%s: the file is not writable (permissions or a read-only file system); fix that, or open "
                        "it read-only (longhaul store ls / verify)",
                        path);
  }
  sqlite3_busy_timeout(s->db, s->p.busy_timeout_ms);
  sqlite3_extended_result_codes(s->db, 1);
  int64_t v = 0, app = 0, tables = 0;
  lh_status st = register_functions(s, err);
  if (!st) st = identify(s, &v, &app, &tables, err);
  if (!st) st = check_identity(s, v, app, tables, err);
  if (!st && s->p.read_only && v < LH_STORE_SCHEMA_VERSION)
    st = lh_error_set(err, LH_EUNSUPPORTED,
                      "%s: schema version %lld is older than this build's %d; open it writable once (any "
                      "`longhaul run` or `longhaul store gc`) to migrate it",
                      path, (long long)v, LH_STORE_SCHEMA_VERSION);
  if (!st) st = configure(s, tables == 0, err);
  if (!st && s->p.read_only) s->version = (int)v;
  if (!st && !s->p.read_only) st = migrate(s, err);
  if (st) {
    lh_store_close(s);
    return st;
  }
  s->made = s->made && !exists;
  *out = s;
  return LH_OK;
}

void lh_store_close(lh_store *s) {
  if (!s) return;
  lh_store__heartbeat_stop(s);
  if (s->db) lh_store__digests_close(s);
  if (s->db) {
    lh_store__rollback(s);
    sqlite3_close_v2(s->db);
  }
  pthread_mutex_destroy(&s->hb_mu);
  pthread_cond_destroy(&s->hb_cv);
  free(s);
}

void lh_store_discard(lh_store *s) {
  if (!s) return;
  int64_t kept = 1;
  /* under the write lock, so that no other process stores anything between the look and the unlink;
   * one that has the file open meanwhile finds it moved at its next write (SQLITE_READONLY_DBMOVED) */
  if (s->made && !s->p.read_only && lh_store__begin(s, "discarding the store", NULL) == LH_OK) {
    if (lh_store__int(s, "SELECT (SELECT count(*) FROM models) + (SELECT count(*) FROM batches) + "
                      "(SELECT count(*) FROM checkpoints)", &kept, NULL) != LH_OK || lh_store_file_moved(s))
      kept = 1;
    for (size_t t = 0; !kept && t < sizeof file_tails / sizeof *file_tails; t++) {
      char at[sizeof s->path + 16];
      snprintf(at, sizeof at, "%s%s", s->path, file_tails[t]);
      unlink(at);
    }
    lh_store__rollback(s);
    if (!kept) s->p.read_only = 1; /* nothing more goes to the removed file: the digests are not flushed */
  }
  lh_store_close(s);
}

const char *lh_store_path(const lh_store *s) { return s->path; }
int lh_store_schema_version(const lh_store *s) { return s->version; }

int lh_store_file_moved(lh_store *s) {
  int moved = 0;
  if (s && s->db && sqlite3_file_control(s->db, "main", SQLITE_FCNTL_HAS_MOVED, &moved) != SQLITE_OK) moved = 0;
  return moved != 0;
}

lh_status lh_store_model_put(lh_store *s, const char *model_id, const char *name, const char *info_json,
                             lh_error *err) {
  if (!model_id || strlen(model_id) != 64)
    return lh_error_set(err, LH_EINVAL, "%s: model id must be 64 hex characters", s->path);
  lh_status st = lh_store__writable(s, "recording a model", err);
  if (st) return st;
  return lh_store__run(s, err,
                       "INSERT INTO models(id, name, info, created_ms) VALUES(?1, ?2, ?3, ?4) "
                       "ON CONFLICT(id) DO UPDATE SET name = coalesce(?2, name), info = coalesce(?3, info)",
                       SQL_ARGS(SQL_TEXT(model_id), SQL_TEXT(name), SQL_TEXT(info_json), SQL_INT(lh_store__now_ms())),
                       "recording model %.12s", model_id);
}
