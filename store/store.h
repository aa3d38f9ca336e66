/* store.h — longhaul's SQLite store: jobs, their documents and results, and checkpoints of model
 * state taken during chunked prefill, so a killed job resumes where it stopped and jobs over the
 * same documents prefill them once.
 *
 * One database file holds everything. Its tables (store/store.c has the schema):
 *
 *     models       one row per model identity (lh_model_id: SHA-256 of config + tensor index)
 *     batches      one row per batch the runner loaded (a name the runner chooses)
 *     jobs         one row per request, unique by (batch, custom_id); the job state machine
 *                  (queued -> running -> done | failed) is drawn in store/store_jobs.c; a job
 *                  carries its identity (the runner's digest of its inputs) and a failed job's
 *                  error text has a CRC-32C
 *     documents    the ingest manifest of each job (path, bytes, sha256, token span)
 *     results      a finished job's result (JSON text and an optional blob) with a CRC-32C
 *     file_digests a cache of file digests by file identity (model weights, documents):
 *                  lh_store_digest_cache
 *     checkpoints  one row per saved state: (model, prefix hash) -> position, parent, sizes
 *     ckpt_pages   the checkpoint payload, split into pages with a CRC-32C each
 *
 * Lifecycle
 *
 *     lh_store_params sp = lh_store_default_params();
 *     lh_store *s;  lh_store_open("run.db", &sp, &s, &err);            // creates or migrates
 *     ... jobs: lh_store_batch_put, lh_store_job_add, lh_store_job_claim_next, _done, _fail ...
 *     lh_store_writer *w;  lh_store_writer_open("run.db", &wp, &w, &err);   // async checkpoints
 *     lh_store_cursor cur;  lh_store_resume(s, model, tokens, n, job, &state, &cur, &err);
 *     for each chunk: lh_prefill(state, ...); lh_store_cursor_feed(&cur, ...);
 *                     lh_store_checkpoint_state(w, state, &cur, &err);
 *     lh_store_writer_close(w, &err);  lh_store_close(s);
 *
 * Checkpoints. A checkpoint at position p is keyed by (model id, prefix hash) where the prefix
 * hash is SHA-256 over tokens[0:p] written as little-endian uint32, so equal prefixes meet whatever
 * job produced them and whatever chunk plan led there. It holds every lightning state at p (fp32),
 * the softmax KV rows [parent's p, p) of every softmax layer (so a chain of checkpoints holds the
 * whole KV once) and the logits at p-1. Each checkpoint is written in one transaction: it is in the
 * store completely or not at all. Garbage collection may "thin" a checkpoint that has descendants:
 * its lightning states and logits go, its KV rows stay for the descendants; a thin checkpoint is
 * never a resume point.
 *
 * Exactness: restoring the chain ending at p and prefilling tokens[p:] with the same chunk plan
 * gives bitwise the logits of the uninterrupted run (the bytes round-trip exactly). A chain that
 * mixes checkpoints from runs with different chunk plans is exact within the engine's rounding
 * contract, not bitwise.
 *
 * Errors (util/err.h): LH_EBUSY the database is locked by another process past busy_timeout_ms,
 * or a job is claimed by someone else; LH_EFULL the disk or the configured size limit is full
 * (the database is intact, the failed transaction rolled back); LH_ECORRUPT a checksum or
 * structure check failed; LH_EUNSUPPORTED the file was made by a newer longhaul; LH_EINVAL a
 * write on a read-only store or a state-machine violation; LH_EIO anything else SQLite reports.
 *
 * Threads: an lh_store handle is used by one thread at a time; open one per thread (the writer
 * opens its own). Several processes may share one database file (see store/store_jobs.c for how
 * they cooperate on jobs).
 */
#ifndef LH_STORE_H
#define LH_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The schema version this build writes (PRAGMA user_version). Older files are migrated forward
 * on open (a read-only open of an older file is refused: open it writable once); newer ones are
 * refused with LH_EUNSUPPORTED. Version 2 added checksums on results and error texts, job
 * identities and the file digest cache (docs/store.md has the schema). */
#define LH_STORE_SCHEMA_VERSION 2

typedef struct lh_store lh_store;

typedef struct lh_store_params {
  int read_only;          /* open read-only (ls, verify without repair); every write fails LH_EINVAL */
  int create;             /* create the file if missing (default 1) */
  int busy_timeout_ms;    /* how long to wait for another process's lock (default 30000) */
  int lease_s;            /* a running job whose owner has not refreshed its claim for this long
                             is stale and may be taken over (default 120) */
  int heartbeat;          /* refresh this handle's claims from a background thread every
                             lease_s/4 (default 1; 0: the caller calls lh_store_job_heartbeat) */
  int max_attempts;       /* claims (incl. takeovers of a dead owner's job) before a job is failed
                             instead of claimed again; 0 = unlimited (default) */
  int64_t max_db_bytes;   /* 0 = none; else the database may not grow past this (PRAGMA
                             max_page_count); hitting it is LH_EFULL */
  size_t page_bytes;      /* largest checkpoint page (blob) written (default 8 MiB; 64 KiB..256 MiB) */
  int no_follow;          /* refuse a symbolic link at path or at path-wal, -shm or -journal with
                             LH_EIO, as a link planted in OUT is (default 0): for the store a command
                             keeps in its output folder, where a planted link would send its writes
                             into another file; a path the user names (--db) may be a link */
  /* Durability knobs; the defaults are the measured choice in docs/store.md. Only the benchmark
   * and tests should change them. NULL = default. Applied when the handle opens. */
  const char *journal_mode; /* default "truncate" */
  const char *synchronous;  /* default "full" */
  int cache_mib;            /* SQLite page cache per connection (default 64) */
  int db_page_size;         /* SQLite page size of a new file (default 65536) */
} lh_store_params;

lh_store_params lh_store_default_params(void);

/* Open (creating and migrating as needed) the store at path. On success *out is a new handle. */
lh_status lh_store_open(const char *path, const lh_store_params *params, lh_store **out, lh_error *err);
/* Close the handle (accepts NULL). Stops its heartbeat thread; claims it holds stay as they are
 * (running, owned by this process) — release or finish jobs before closing. */
void lh_store_close(lh_store *s);
/* Close the handle as lh_store_close does, and remove its file (with its journal) when this handle
 * created it (nothing was at path when it opened) and nothing has been stored in it since, by this
 * process or another: no model, batch or checkpoint (file digests, a cache, do not count). For a
 * command refused after it opened the store it keeps in its output folder, which then leaves no
 * store behind. A file no longer at its path (lh_store_file_moved) stays where it is. Accepts NULL. */
void lh_store_discard(lh_store *s);
const char *lh_store_path(const lh_store *s);
/* Schema version of the open file (== LH_STORE_SCHEMA_VERSION after open). */
int lh_store_schema_version(const lh_store *s);
/* 1 when the file this handle has open is no longer at its path (deleted, or renamed away: its
 * folder removed under a run, say), else 0. What is written through the handle then goes nowhere
 * anyone will find, and a rerun over the path starts an empty store. */
int lh_store_file_moved(lh_store *s);

/* ---- models ----------------------------------------------------------------------------- */

/* Record a model identity (64 hex chars) with a human name (its folder) and optional JSON info.
 * Idempotent; a later call updates name and info. */
lh_status lh_store_model_put(lh_store *s, const char *model_id, const char *name, const char *info_json,
                             lh_error *err);

/* ---- batches, jobs, documents, results ------------------------------------------------------ */

typedef enum lh_job_state { LH_JOB_QUEUED = 0, LH_JOB_RUNNING, LH_JOB_DONE, LH_JOB_FAILED, LH_JOB_STATE_COUNT } lh_job_state;
const char *lh_job_state_name(lh_job_state st); /* "queued", ... */

/* Find or create the batch called name (the runner picks it, e.g. the batch file's path or a
 * digest of it). */
lh_status lh_store_batch_put(lh_store *s, const char *name, int64_t *batch_id, lh_error *err);
lh_status lh_store_batch_find(lh_store *s, const char *name, int64_t *batch_id, lh_error *err); /* ENOTFOUND */

typedef struct lh_store_job_spec {
  const char *custom_id;    /* unique within the batch; required */
  const char *request_json; /* the request as the runner wants it back (opaque to the store); required */
  const char *group_key;    /* jobs of one batch with the same key share one prefill and are claimed
                               together (e.g. a digest of the documents spec); NULL = alone */
  const char *model_id;     /* may be NULL */
  const char *identity;     /* the runner's digest of everything the answer depends on (model,
                               parameters, the request, the documents' contents); NULL = none given */
} lh_store_job_spec;

/* Add a job in state queued; *job_id is its id and *existed (existed may be NULL) says what was
 * there:
 *   0  nothing: the job was added, queued.
 *   1  the job, with the same request and identity (or spec->identity NULL): untouched, whatever
 *      its state.
 *   2  the job, with the same request but another identity (its inputs changed; a job stored
 *      without an identity, e.g. by a schema-1 store, counts as changed): in one transaction it
 *      takes the new identity and, whatever its state (queued, done, failed, or running under a
 *      dead owner), becomes queued with attempts 0, no owner, and its result, error, document
 *      manifest and token count dropped, as a new job would be. Its checkpoints and resume point
 *      stay (they are content-addressed: a prefix that still matches is reused). A job running
 *      under a live owner is left alone: LH_EBUSY naming the owner.
 * The request_json of a custom_id is fixed: the same custom_id in the same batch with a different
 * request_json is LH_EINVAL naming the custom_id (a runner keeps request_json stable and puts what
 * changes into the identity). */
lh_status lh_store_job_add(lh_store *s, int64_t batch_id, const lh_store_job_spec *spec, int64_t *job_id,
                           int *existed, lh_error *err);
/* The job with this custom_id in the batch; batch_id 0 searches every batch (LH_EINVAL when the
 * custom_id is in more than one: name the batch). LH_ENOTFOUND when none. */
lh_status lh_store_job_find(lh_store *s, int64_t batch_id, const char *custom_id, int64_t *job_id,
                            lh_error *err);

/* Claim work atomically: the oldest queued job of the batch (batch_id 0 = any batch), or a running
 * job whose owner is dead or whose lease expired, becomes running and owned by this handle's
 * process; up to max-1 more claimable jobs with the same group_key come with it. ids[] (room for
 * max) receives the claimed ids, *n their count (>= 1). LH_ENOTFOUND when nothing is claimable.
 * Two processes never get the same job. */
lh_status lh_store_job_claim_next(lh_store *s, int64_t batch_id, int max, int64_t *ids, int *n, lh_error *err);
/* Claim one named job (queued, or running with a stale owner). LH_EBUSY if a live owner holds it,
 * LH_EINVAL if it is done or failed (requeue it first). */
lh_status lh_store_job_claim(lh_store *s, int64_t job_id, lh_error *err);
/* Refresh the heartbeat of every job this process has claimed (the heartbeat thread does this
 * when params.heartbeat is set). */
lh_status lh_store_job_heartbeat(lh_store *s, lh_error *err);
/* LH_OK while this process still holds the job's claim; LH_EBUSY (naming the new owner) if it was
 * taken over, e.g. after this process stalled for a whole lease; LH_EINVAL if the job is not
 * running. Cheap (one indexed read): a runner calls it between chunks and stops a lost job. */
lh_status lh_store_job_check_claim(lh_store *s, int64_t job_id, lh_error *err);
/* Record progress for `status`: tokens total in the job's prompt (-1 = leave as is). */
lh_status lh_store_job_set_tokens(lh_store *s, int64_t job_id, int64_t tokens_total, lh_error *err);
/* running -> done, storing the result (JSON text, and an optional blob) in the same transaction.
 * LH_EBUSY if this process no longer owns the claim (it was taken over): the result is not stored. */
lh_status lh_store_job_done(lh_store *s, int64_t job_id, const char *result_json, const void *blob,
                            size_t blob_len, lh_error *err);
/* running -> failed with a message. Same ownership rule as _done. */
lh_status lh_store_job_fail(lh_store *s, int64_t job_id, const char *message, lh_error *err);
/* running -> queued, giving up the claim (SIGINT: the job resumes from its checkpoints later). */
lh_status lh_store_job_release(lh_store *s, int64_t job_id, lh_error *err);
/* done | failed | queued -> queued, dropping any result and error (--force, retry failed jobs).
 * LH_EBUSY if the job is running under a live owner. */
lh_status lh_store_job_requeue(lh_store *s, int64_t job_id, lh_error *err);

typedef struct lh_store_job_info {
  int64_t id, batch_id;
  char *batch;              /* batch name */
  char *custom_id;
  char *group_key;          /* NULL when none */
  char *model_id;           /* NULL when none */
  char *request_json;
  lh_job_state state;
  int attempts;             /* claims so far, takeovers included */
  int64_t created_ms, started_ms, finished_ms, heartbeat_ms; /* Unix ms; 0 = not yet */
  int64_t updated_ms;       /* Unix ms of the job's last change (added, renewed, claimed, done, ...) */
  char *error;              /* NULL unless failed */
  char *owner;              /* "host pid" of the claim holder while running, else NULL */
  int owner_alive;          /* running only: 1 live, 0 dead or lease expired (claimable), -1 unknown */
  int64_t ckpt_id;          /* the checkpoint the job resumes from (0 = none) */
  int64_t tokens_done;      /* position of that checkpoint */
  int64_t tokens_total;     /* -1 = unknown */
  int has_result;
  char *identity;           /* NULL when none */
  int damaged;              /* lh_store_job_get: 1 when the rows the job's outcome is rebuilt from
                               fail their check (done: the result row's CRC-32C, or the row is
                               missing; failed: the error text's CRC-32C, or the text is missing),
                               else 0; requeue such a job to recompute it. lh_store_job_list does
                               not read results: -1 (not checked; lh_store_verify checks them all) */
} lh_store_job_info;

lh_status lh_store_job_get(lh_store *s, int64_t job_id, lh_store_job_info *info, lh_error *err);
/* Every job of a batch (batch_id 0 = all), by id. *out is an array of *n entries. */
lh_status lh_store_job_list(lh_store *s, int64_t batch_id, lh_store_job_info **out, size_t *n, lh_error *err);
void lh_store_job_info_clear(lh_store_job_info *info);
void lh_store_job_list_free(lh_store_job_info *list, size_t n);

/* The result of a done job: its JSON text appended to json, its blob (if any and blob != NULL)
 * appended to blob. LH_ENOTFOUND if the job has no result; LH_ECORRUPT, naming the job's id and
 * custom_id, when the row fails its CRC-32C (nothing is appended then): requeue the job. */
lh_status lh_store_job_result(lh_store *s, int64_t job_id, lh_buf *json, lh_buf *blob, lh_error *err);

/* A job's document manifest, one row per ingested entry. */
typedef struct lh_store_doc {
  const char *path;
  int64_t bytes;
  const char *sha256_hex;   /* may be NULL */
  int64_t tok_start, tok_end; /* token span [start, end) in the job's prompt */
  const char *meta_json;    /* may be NULL */
} lh_store_doc;
/* Replace the job's documents with docs[0:n], in one transaction. */
lh_status lh_store_job_set_documents(lh_store *s, int64_t job_id, const lh_store_doc *docs, size_t n,
                                     lh_error *err);
/* Call cb for each document of the job, in order; a non-OK return from cb stops and is returned. */
typedef lh_status (*lh_store_doc_cb)(void *user, const lh_store_doc *doc, lh_error *err);
lh_status lh_store_job_documents(lh_store *s, int64_t job_id, lh_store_doc_cb cb, void *user, lh_error *err);

/* ---- checkpoints ------------------------------------------------------------------------- */

/* Where a sequence stands relative to the store: the running prefix hash over the tokens fed and
 * the last checkpoint of its chain. Plain data; the caller owns it. */
typedef struct lh_store_cursor {
  char model_id[65];
  int64_t job_id;           /* checkpoints record it as producer, and advance the job; 0 = none */
  int64_t pos;              /* tokens hashed so far */
  lh_sha256 hash;           /* running SHA-256 of tokens[0:pos] as little-endian uint32 */
  int has_parent;           /* 1 once the chain has a checkpoint */
  int64_t parent_pos;       /* its position (0 when none) */
  uint8_t parent_hash[32];  /* its prefix hash */
} lh_store_cursor;

/* model_id: the 64 hex characters of lh_model_id (anything else leaves the cursor unable to
 * checkpoint: lh_store_ckpt_new then fails with LH_EINVAL). */
void lh_store_cursor_init(lh_store_cursor *c, const char *model_id, int64_t job_id);
/* Advance the running hash over tokens[0:n] (the tokens just fed to the state). */
void lh_store_cursor_feed(lh_store_cursor *c, const int32_t *tokens, int64_t n);
/* Make the cursor's current position its chain's last checkpoint (after lh_store_ckpt_write;
 * lh_store_writer_submit does it itself). */
void lh_store_cursor_checkpointed(lh_store_cursor *c);
/* One-shot prefix hash of tokens[0:n]. */
void lh_store_prefix_hash(const int32_t *tokens, int64_t n, uint8_t out[32]);

/* A checkpoint's payload in host memory, before it is written. */
typedef struct lh_store_ckpt lh_store_ckpt;

/* A checkpoint for the cursor's position: lightning states, KV rows [parent_pos, pos) and logits,
 * sized by lay. The buffers are uninitialised; fill them, then write it (synchronously with
 * lh_store_ckpt_write, or hand it to a writer). */
lh_status lh_store_ckpt_new(const lh_state_layout *lay, const lh_store_cursor *c, lh_store_ckpt **out,
                            lh_error *err);
void lh_store_ckpt_free(lh_store_ckpt *ck); /* accepts NULL */
void *lh_store_ckpt_lightning(lh_store_ckpt *ck, int i); /* lay.lightning_bytes */
void *lh_store_ckpt_kv(lh_store_ckpt *ck, int j);        /* (pos - parent_pos) * lay.kv_row_bytes */
float *lh_store_ckpt_logits(lh_store_ckpt *ck);          /* lay.vocab_size floats */
int64_t lh_store_ckpt_pos(const lh_store_ckpt *ck);
int64_t lh_store_ckpt_parent_pos(const lh_store_ckpt *ck);
size_t lh_store_ckpt_bytes(const lh_store_ckpt *ck);     /* payload bytes */

/* Write ck in one transaction and set the job's resume point (cursor.job_id) to it. If a
 * checkpoint with the same key exists, nothing new is written (thin ones get their state back) and
 * *id is the existing one. The parent named by the cursor must be in the store (LH_ENOTFOUND
 * otherwise). id may be NULL. ck is not freed. */
lh_status lh_store_ckpt_write(lh_store *s, const lh_store_ckpt *ck, int64_t *id, lh_error *err);

typedef struct lh_store_ckpt_info {
  int64_t id;
  char model_id[65];
  uint8_t prefix_hash[32];
  int64_t pos, parent_id, parent_pos; /* parent_id 0 = root */
  int64_t job_id;                     /* producer (0 = none or deleted) */
  int has_state;                      /* 0: thinned by gc (KV only; not a resume point) */
  int64_t state_bytes, kv_bytes;      /* payload bytes: lightning + logits, KV rows */
  int64_t n_pages;
  int64_t created_ms, last_used_ms;
  int n_children;
  lh_state_layout layout;
} lh_store_ckpt_info;

lh_status lh_store_ckpt_get(lh_store *s, int64_t id, lh_store_ckpt_info *info, lh_error *err);
/* Every checkpoint, ordered by model then position. */
lh_status lh_store_ckpt_list(lh_store *s, lh_store_ckpt_info **out, size_t *n, lh_error *err);
/* The checkpoint with this key (thin ones included). LH_ENOTFOUND when none. */
lh_status lh_store_ckpt_find(lh_store *s, const char *model_id, const uint8_t hash[32], int64_t *id,
                             lh_error *err);

/* The longest checkpoint with state for model_id whose tokens are a prefix of tokens[0:n] (p <= n).
 * Reads no blobs: O(log) index probes per stored position <= n, plus hashing the tokens once.
 * *pos = 0 and *id = 0 when there is none. */
lh_status lh_store_prefix_lookup(lh_store *s, const char *model_id, const int32_t *tokens, int64_t n,
                                 int64_t *pos, int64_t *id, lh_error *err);

/* For a runner that gets its tokens as a stream: the distinct positions <= max_pos at which model_id
 * has a checkpoint with state, ascending (*pos is malloc'd; free it). Compare the running hash at
 * each with lh_store_ckpt_find. Reads only an index. */
lh_status lh_store_prefix_positions(lh_store *s, const char *model_id, int64_t max_pos, int64_t **pos, size_t *n,
                                    lh_error *err);

typedef enum lh_store_part { LH_PART_LIGHTNING = 0, LH_PART_KV = 1, LH_PART_LOGITS = 2 } lh_store_part;
/* Receives a verified piece of a chain: LIGHTNING layer i's whole state; KV rows [t0, t1) of
 * softmax layer j (in order: every layer's rows arrive in increasing t); LOGITS the vocab floats.
 * data lives until the callback returns. */
typedef lh_status (*lh_store_load_cb)(void *user, lh_store_part part, int layer, int64_t t0, int64_t t1,
                                      const void *data, size_t nbytes, lh_error *err);
/* Load the chain ending at checkpoint id: the KV rows of every checkpoint from the root to id, then
 * id's lightning states, then its logits. Every page's CRC-32C and the chain's structure are
 * checked before its bytes reach cb. On damage it returns LH_ECORRUPT, logs a warning and (unless
 * the store is read-only) removes what is damaged so the next lookup finds the last good
 * checkpoint: damaged KV rows drop that checkpoint and every descendant (they all need those rows);
 * a damaged state (lightning or logits) of a checkpoint with descendants thins it instead (its good
 * KV rows stay for them). What cb received must then be discarded. Marks the chain used (gc's age
 * and LRU order). */
lh_status lh_store_ckpt_load(lh_store *s, int64_t id, lh_store_load_cb cb, void *user, lh_error *err);
/* Delete checkpoint id and all its descendants. *n_dropped (may be NULL) counts them. */
lh_status lh_store_ckpt_drop(lh_store *s, int64_t id, int64_t *n_dropped, lh_error *err);

/* ---- the asynchronous writer -------------------------------------------------------------
 *
 * Checkpoint writes on their own thread with its own connection, so prefill goes on while the
 * previous chunk's state is written. Memory is bounded: at most max_pending checkpoints exist at
 * once (queued, being written, or being filled); lh_store_writer_begin blocks until one is free.
 * Buffers are reused, so steady state allocates nothing. A failed write is sticky: it is returned
 * (with the position that failed) by the next begin, submit or flush, and later checkpoints are
 * discarded since their chain is broken.
 */
typedef struct lh_store_writer lh_store_writer;

typedef struct lh_store_writer_params {
  int max_pending;          /* checkpoints in memory at once (default 2: one written, one filled) */
  lh_store_params store;    /* how the writer's connection is opened */
} lh_store_writer_params;
lh_store_writer_params lh_store_writer_default_params(void);

lh_status lh_store_writer_open(const char *path, const lh_store_writer_params *p, lh_store_writer **out,
                               lh_error *err);
/* A checkpoint buffer for the cursor's position (see lh_store_ckpt_new). Blocks while max_pending
 * checkpoints are in memory. */
lh_status lh_store_writer_begin(lh_store_writer *w, const lh_state_layout *lay, const lh_store_cursor *c,
                                lh_store_ckpt **out, lh_error *err);
/* Queue ck (from _begin, filled) for writing and move the cursor's parent to it. The writer owns ck
 * from here on, even on failure. Returns an earlier write's error, if any. */
lh_status lh_store_writer_submit(lh_store_writer *w, lh_store_ckpt *ck, lh_store_cursor *c, lh_error *err);
/* Give back a buffer from _begin without writing it. */
void lh_store_writer_cancel(lh_store_writer *w, lh_store_ckpt *ck);
/* Wait until everything submitted is committed; returns the first write error. */
lh_status lh_store_writer_flush(lh_store_writer *w, lh_error *err);
/* Flush, stop the thread, close (accepts NULL). Returns the flush's status. */
lh_status lh_store_writer_close(lh_store_writer *w, lh_error *err);

typedef struct lh_store_writer_stats {
  int64_t written, skipped;   /* checkpoints committed; already present (content-addressed) */
  int64_t bytes;              /* payload bytes committed */
  double write_s;             /* writer thread time inside write transactions */
  double begin_wait_s;        /* producer time blocked in _begin waiting for a free buffer */
} lh_store_writer_stats;
void lh_store_writer_get_stats(lh_store_writer *w, lh_store_writer_stats *st);

/* ---- file digest cache (store/store_digest.c) ------------------------------------------------
 *
 * file_digests remembers what reading a whole file taught (engine/engine.h's lh_file_digest: its
 * digest and, for weights, the first non-finite element) by the file's identity (lh_file_identity:
 * real path, size, mtime_ns, ctime_ns, inode, device), per kind: "model" for lh_model_open's weight
 * files (lh_model_params.digest_cache), "doc" for a request's documents (jobs/inputs.h). Each kind
 * has its own digest function, so a path may have one row per kind.
 */

/* Fill *cache with callbacks over this handle's file_digests rows of kind (1 to 31 characters).
 * The callbacks run on the thread using the handle, outside any store transaction, and stay valid
 * until lh_store_close. get hits only when the row of (kind, path) passes its CRC-32C and every
 * identity field equals; a damaged row is a miss with a warning (the file is read again). put keeps
 * the entry in memory (get sees it at once) and writes the kept entries in one transaction when
 * 128 have gathered, on lh_store_digest_flush and on lh_store_close; a read-only handle never
 * writes. Neither callback fails its caller: store errors are a miss or a logged warning. */
lh_status lh_store_digest_cache(lh_store *s, const char *kind, lh_digest_cache *cache, lh_error *err);
/* Write the entries every cache of this handle keeps. The entries are gone from memory either way
 * (a lost entry only costs one more read of its file). */
lh_status lh_store_digest_flush(lh_store *s, lh_error *err);

/* ---- engine glue (store/store_engine.c; needs the engine) --------------------------------- */

/* lh_store_model_put for an open model: its id, folder and a short description. */
lh_status lh_store_model_register(lh_store *s, const lh_model *m, lh_error *err);
/* A fresh state of m restored from the chain ending at checkpoint id. */
lh_status lh_store_restore(lh_store *s, lh_model *m, int64_t id, lh_state **out, lh_error *err);
/* Start or resume a sequence over tokens[0:n]: restore the longest good checkpointed prefix (damaged
 * checkpoints are dropped with a warning and the next best is tried) or make a fresh state at 0.
 * *out is the state, cur the matching cursor (job_id recorded; the job's resume point set). */
lh_status lh_store_resume(lh_store *s, lh_model *m, const int32_t *tokens, int64_t n, int64_t job_id,
                          lh_state **out, lh_store_cursor *cur, lh_error *err);
/* Export st (at cur->pos) into a writer buffer and submit it: lightning states, KV rows since the
 * cursor's parent, last logits. The state may be used again as soon as this returns. */
lh_status lh_store_checkpoint_state(lh_store_writer *w, const lh_state *st, lh_store_cursor *cur,
                                    lh_error *err);

/* ---- retention and integrity (what `longhaul store ls|verify|gc` runs) --------------------- */

typedef struct lh_store_stats {
  int64_t file_bytes, page_size, page_count, freelist_pages;
  int64_t jobs[LH_JOB_STATE_COUNT];
  int64_t batches, checkpoints, thin_checkpoints;
  int64_t state_bytes, kv_bytes; /* checkpoint payload */
} lh_store_stats;
lh_status lh_store_get_stats(lh_store *s, lh_store_stats *st, lh_error *err);

typedef struct lh_store_verify_report {
  int64_t checkpoints, pages, bytes; /* checked */
  int64_t damaged;                   /* checkpoints with a problem */
  int64_t dropped;                   /* removed by repair (damaged + descendants) */
  int64_t results, errors;           /* result rows and failed jobs' error texts checked */
  int64_t damaged_jobs;              /* jobs whose result or error fails its check (as job_get's damaged) */
  int64_t requeued;                  /* damaged jobs put back to queued by repair */
  int db_ok;                         /* PRAGMA quick_check passed */
  lh_buf problems;                   /* one line per problem; free with lh_buf_free */
} lh_store_verify_report;
/* Check every page's CRC-32C and size, every chain (parents present, positions consistent, layouts
 * equal, page sets complete), every result row's and error text's CRC-32C, and SQLite's own
 * structure. With repair (needs a writable store), damaged checkpoints and their descendants are
 * dropped, and damaged jobs go back to queued with their result and error dropped (the next run
 * recomputes them; a result row of a job that is not done is only dropped); when SQLite's own
 * structure is damaged (db_ok 0) nothing is repaired or written. Returns LH_OK when
 * the check ran (damage is in the report), an error when it could not run. */
lh_status lh_store_verify(lh_store *s, int repair, lh_store_verify_report *r, lh_error *err);

/* The largest older_than_s lh_store_gc takes (about 292 million years): ages are compared in
 * milliseconds. A larger one is LH_EINVAL. */
#define LH_STORE_GC_MAX_AGE_S (INT64_MAX / 1000)

typedef struct lh_store_gc_params {
  int64_t older_than_s;  /* delete checkpoints unused this long (whole stale subtrees); < 0 off;
                            at most LH_STORE_GC_MAX_AGE_S */
  int64_t max_bytes;     /* thin then delete least recently used until the payload fits; < 0 off */
  int keep_last;         /* per job keep the state of its last N checkpoints, thin older ones; < 0 off */
  int dry_run;           /* report only */
  int vacuum;            /* return freed pages to the file system (incremental vacuum; default 1) */
  int64_t now_ms;        /* 0 = now (tests pass a later time) */
  int drop_gone_digests; /* drop file_digests rows whose path stat() no longer finds (default 1) */
} lh_store_gc_params;
lh_store_gc_params lh_store_gc_default_params(void);

typedef struct lh_store_gc_report {
  int64_t deleted, thinned, protected_ckpts;
  int64_t bytes_freed;             /* checkpoint payload removed */
  int64_t file_before, file_after; /* database file size */
  int64_t digests_dropped;         /* file_digests rows of files that are gone */
} lh_store_gc_report;
/* Apply the policies. Never touches the chain of a queued or running job's resume point: its
 * ancestors may be thinned, never deleted, and the resume point keeps its state. */
lh_status lh_store_gc(lh_store *s, const lh_store_gc_params *p, lh_store_gc_report *r, lh_error *err);

#ifdef __cplusplus
}
#endif
#endif
