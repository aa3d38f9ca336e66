/* store_internal.h — the store's private structures and helpers, shared by the store's .c files only.
 *
 * store.c owns the connection (open, pragmas, schema, error mapping, statements); store_jobs.c the
 * job state machine and claims; store_ckpt.c checkpoint pages, chains and prefix lookup;
 * store_writer.c the asynchronous writer; store_admin.c stats, verify and gc; store_digest.c the
 * file digest cache; store_engine.c the engine glue.
 */
#ifndef LH_STORE_INTERNAL_H
#define LH_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>

#include "store/store.h"

/* Who holds a claim: the machine (host name, boot id, pid namespace: equal means "the same process
 * table", so a pid can be checked directly) and the process (pid plus its start time in clock ticks
 * since boot, so a recycled pid is not mistaken for the owner). */
typedef struct lh_store_owner {
  char host[512];     /* "name boot-id pidns" */
  char hostname[256]; /* for display */
  int64_t pid;
  int64_t start;      /* /proc/<pid>/stat field 22; 0 when unknown */
} lh_store_owner;

struct lh_store {
  sqlite3 *db;
  char path[4096];
  lh_store_params p;
  int version;
  int made; /* this handle created the file (nothing was at path) and its schema: lh_store_discard */
  lh_store_owner me;
  /* heartbeat thread: started by the first claim when p.heartbeat */
  int hb_started;
  int hb_stop;
  pthread_t hb_thread;
  pthread_mutex_t hb_mu;
  pthread_cond_t hb_cv;
  /* file digest caches, one per kind (store_digest.c) */
  struct lh_store__digests *digests;
};

struct lh_store_ckpt {
  lh_state_layout lay;
  char model_id[65];
  int64_t job_id;
  int64_t pos, parent_pos;
  int has_parent;
  uint8_t hash[32], parent_hash[32];
  unsigned char *mem; /* lightning [n_lightning][lightning_bytes] | kv [n_softmax][rows*row] | logits */
  size_t cap, kv_off, logits_off, bytes;
  struct lh_store_ckpt *next; /* writer queue / pool link */
};

/* Unix time in milliseconds. */
int64_t lh_store__now_ms(void);

/* Map a SQLite failure (rc, with the connection's message) to an lh_status and a message that
 * names the file and what was being done: "run.db: writing checkpoint at 4096: database is full...". */
lh_status lh_store__sql_error(lh_store *s, int rc, lh_error *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
lh_status lh_store__exec(lh_store *s, const char *sql, lh_error *err);
lh_status lh_store__prepare(lh_store *s, const char *sql, sqlite3_stmt **st, lh_error *err);
/* BEGIN IMMEDIATE (the write lock up front, so a transaction never fails half way on a lock). */
lh_status lh_store__begin(lh_store *s, const char *what, lh_error *err);
lh_status lh_store__commit(lh_store *s, const char *what, lh_error *err);
void lh_store__rollback(lh_store *s);
/* End the transaction lh_store__begin opened: commit when st is LH_OK (returning the commit's
 * status), else roll back and return st. */
lh_status lh_store__end(lh_store *s, lh_status st, const char *what, lh_error *err);

/* ---- statements ----------------------------------------------------------------------------
 *
 * A statement is one call that reads as its SQL; its arguments bind ?1, ?2, ... in order:
 *
 *     st = lh_store__run(s, err, "UPDATE jobs SET ckpt_id = ?1 WHERE id = ?2",
 *                        SQL_ARGS(SQL_ID(ckpt_id), SQL_INT(job_id)),
 *                        "recording job %lld's resume point", (long long)job_id);
 *
 * The trailing printf format says what was being done, for the message of a failed step (as
 * lh_store__sql_error words it); a failed prepare reads "preparing '<sql>'" (lh_store__prepare).
 * Text and blobs are bound without a copy: they must stay valid until the statement is finalized
 * or reset (for lh_store__run, the call). A NULL text or blob binds SQL NULL.
 */
typedef struct lh_store__arg {
  char kind;     /* 'i' integer; 'o' integer, NULL when 0 (an optional row id); 't' text; 'b' blob;
                    'z' a zeroblob of n bytes */
  int64_t i;
  const void *p;
  size_t n;
} lh_store__arg;
#define SQL_INT(x) ((lh_store__arg){'i', (int64_t)(x), NULL, 0})
#define SQL_ID(x) ((lh_store__arg){'o', (int64_t)(x), NULL, 0})
#define SQL_TEXT(x) ((lh_store__arg){'t', 0, (const char *)(x), 0})
#define SQL_BLOB(p, n) ((lh_store__arg){'b', 0, (p), (size_t)(n)})
#define SQL_ZEROBLOB(n) ((lh_store__arg){'z', 0, NULL, (size_t)(n)})
/* The (array, count) pair every statement helper takes. */
#define SQL_ARGS(...) \
  (const lh_store__arg[]){__VA_ARGS__}, (int)(sizeof((const lh_store__arg[]){__VA_ARGS__}) / sizeof(lh_store__arg))
#define SQL_NO_ARGS NULL, 0

/* Bind a[0..n) to ?1..?n of q (after prepare, or after sqlite3_reset to run q again). */
void lh_store__bind(sqlite3_stmt *q, const lh_store__arg *a, int n);
/* Prepare sql and bind a: the caller steps *q and finalizes it. */
lh_status lh_store__query(lh_store *s, lh_error *err, sqlite3_stmt **q, const char *sql, const lh_store__arg *a,
                          int n);
/* Run a statement that returns no rows, to completion. */
lh_status lh_store__run(lh_store *s, lh_error *err, const char *sql, const lh_store__arg *a, int n, const char *what,
                        ...) __attribute__((format(printf, 6, 7)));
/* Step a query to its first row. LH_OK: *q is on that row (read its columns, then finalize it).
 * LH_ENOTFOUND: there is none, *q is NULL and err is left alone (the caller says what was missing).
 * Anything else: *q is NULL and err says what failed. */
lh_status lh_store__row(lh_store *s, lh_error *err, sqlite3_stmt **q, const char *sql, const lh_store__arg *a, int n,
                        const char *what, ...) __attribute__((format(printf, 7, 8)));
/* The first column of the one row sql returns (a pragma or an aggregate). */
lh_status lh_store__int(lh_store *s, const char *sql, int64_t *out, lh_error *err);
/* LH_EINVAL with a message if the handle is read-only. */
lh_status lh_store__writable(lh_store *s, const char *what, lh_error *err);

/* Duplicate a column's text (NULL stays NULL). */
char *lh_store__col_strdup(sqlite3_stmt *st, int col);

/* Row checksums (store.c). CRC-32C over the little-endian int64 job id, then for each field its
 * length as a little-endian int64 and its bytes: (json, blob) for a result, the text for an error.
 * A NULL blob and an empty one are the same. The SQL functions lh_result_crc(job_id, json, blob)
 * and lh_error_crc(job_id, text) compute the same on every connection the store opens (the schema
 * never refers to them, so other SQLite clients can still read and write the file). */
uint32_t lh_store__crc_i64(uint32_t crc, int64_t v);                  /* the 8 bytes, little-endian */
uint32_t lh_store__crc_field(uint32_t crc, const void *p, size_t n); /* n as crc_i64, then the bytes */
uint32_t lh_store__result_crc(int64_t job_id, const void *json, size_t json_len, const void *blob, size_t blob_len);
uint32_t lh_store__error_crc(int64_t job_id, const void *text, size_t len);
/* SQL conditions, for a results row aliased r and a jobs row aliased j: the row passes its check.
 * ERROR_OK is NULL (not true) when the error text is NULL. */
#define LH_STORE__RESULT_OK(r) r ".crc32c = lh_result_crc(" r ".job_id, " r ".json, " r ".blob)"
#define LH_STORE__ERROR_OK(j) j ".error_crc32c = lh_error_crc(" j ".id, " j ".error)"

/* File digests (store_digest.c). The row checksum of file_digests (docs/store.md); flush the
 * unwritten puts and free the caches (lh_store_close); drop the rows of files stat() reports gone,
 * outside the write lock for the stat() calls (lh_store_gc). */
uint32_t lh_store__digest_crc(const char *kind, const lh_file_identity *id, const lh_file_digest *d);
void lh_store__digests_close(lh_store *s);
lh_status lh_store__drop_gone_digests(lh_store *s, int dry_run, int64_t *dropped, lh_error *err);

/* Claims (store_jobs.c): 1 if the owner described is alive (its claim holds), 0 if not. */
int lh_store__owner_alive(const lh_store *s, const char *host, int64_t pid, int64_t start, int64_t heartbeat_ms,
                          int64_t now_ms);
void lh_store__heartbeat_stop(lh_store *s);

/* Checkpoints (store_ckpt.c). Fill a checkpoint's layout and key from lay and c, and make room. */
lh_status lh_store__ckpt_reset(lh_store_ckpt *ck, const lh_state_layout *lay, const lh_store_cursor *c,
                               lh_error *err);
/* Structure and checksums of one checkpoint's pages of one part: see store_ckpt.c. With cb NULL the
 * pages are read and checked but not delivered. Problems are described in err (LH_ECORRUPT). */
typedef struct lh_store__ckrow {
  int64_t id, parent_id, pos, parent_pos, job_id;
  int has_state;
  lh_state_layout lay;
  int64_t state_bytes, kv_bytes, last_used_ms, created_ms;
  char model_id[65];
  uint8_t hash[32];
} lh_store__ckrow;
lh_status lh_store__ckpt_row(lh_store *s, int64_t id, lh_store__ckrow *row, lh_error *err);
lh_status lh_store__ckpt_check_part(lh_store *s, const lh_store__ckrow *row, lh_store_part part, lh_store_load_cb cb,
                                    void *user, int64_t *pages, int64_t *bytes, lh_error *err);
/* Remove a checkpoint's state pages (lightning, logits), keeping its KV rows; inside a transaction. */
lh_status lh_store__thin(lh_store *s, int64_t id, lh_error *err);
lh_status lh_store__ckpt_write_ex(lh_store *s, const lh_store_ckpt *ck, int64_t *id, int *skipped, lh_error *err);
lh_status lh_store__drop_subtree(lh_store *s, int64_t id, int64_t *n, lh_error *err);

#endif
