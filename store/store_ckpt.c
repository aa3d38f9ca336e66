/* store_ckpt.c — checkpoints: prefix hashes, writing a checkpoint's pages in one transaction,
 * loading and checking a chain, prefix lookup, dropping damaged subtrees.
 *
 * A checkpoint's payload is three parts (lh_store_part), each cut into pages (rows of ckpt_pages):
 *   LIGHTNING  layer i = 0..n_lightning-1: lightning_bytes each, pages of at most page_bytes
 *   KV         layer j = 0..n_softmax-1:  (pos - parent_pos) * kv_row_bytes, pages of whole rows
 *   LOGITS     layer 0: vocab_size fp32
 * Each page row stores its length and the CRC-32C of its bytes.
 *
 * A checkpoint's life (checkpoints.has_state; the function for each transition):
 *
 *                lh_store_ckpt_write                  gc (keep-last, size cap), or damaged state
 *     (absent) ----------------------> full ------------------------------------------------> thin
 *        ^                              | ^            lh_store_ckpt_write of the same key         |
 *        |                              | +----------------------------------------------------------+
 *        +------------------------------+-------------------------------------------------------------+
 *           lh_store_ckpt_drop / gc delete / damaged KV (always with the whole subtree; a thin one
 *           only once it has no children left)
 *
 * "full" has lightning states, KV rows and logits and is a resume point; "thin" has only its KV
 * rows, kept because descendants need them.
 *
 * Invariants:
 *   1. A checkpoint row and all its pages are inserted in one BEGIN IMMEDIATE transaction, and the
 *      producing job's resume point moves to it in the same transaction; a crash leaves either all
 *      of it or none (SQLite's journal), never a checkpoint without its pages.
 *   2. The pages of (part, layer) are numbered 0..k-1 without gaps and their lengths add up to the
 *      part's size, which the checkpoint row's layout and positions determine; a KV page holds whole
 *      rows. So a missing or truncated page is a structure error, a flipped byte a CRC error, and
 *      neither can reach a caller: every page is checked before its bytes are delivered.
 *   3. Chains: parent.pos == child.parent_pos, the root has parent_pos 0, a chain has one model and
 *      one layout. A parent is deleted only together with its whole subtree (the foreign key has no
 *      cascade, so a mistake fails instead of orphaning children).
 *   4. Lookup reads only the checkpoints table and its indexes, never ckpt_pages.
 *
 * Why CRC-32C and not SHA-256 per page: the threat is accidental damage (a flipped bit, a torn or
 * truncated page, a lost page), not an adversary: anyone who can rewrite a page can rewrite its
 * checksum too. CRC-32C detects every burst of up to 32 bits and misses random damage with
 * probability 2^-32 per page, and the structure checks catch lost and truncated pages on their own.
 * It runs at memory speed with SSE4.2 (bench/store measures it) where this SHA-256 runs at a few
 * hundred MB/s, which would make checkpointing MiniMax-Text-01's 280 MiB state cost more than the
 * write itself. Identity (the prefix hash) is SHA-256, where a collision would silently mix prompts.
 *
 * It must never: deliver unchecked bytes, or hold a write transaction while calling back.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"
#include "util/log.h"

/* ---- prefix hashes ------------------------------------------------------------------------- */

static void hash_tokens(lh_sha256 *h, const int32_t *t, int64_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  lh_sha256_update(h, t, (size_t)n * 4);
#else
  uint8_t buf[4096];
  while (n > 0) {
    int64_t k = n < 1024 ? n : 1024;
    for (int64_t i = 0; i < k; i++) {
      uint32_t v = (uint32_t)t[i];
      buf[4 * i] = (uint8_t)v, buf[4 * i + 1] = (uint8_t)(v >> 8), buf[4 * i + 2] = (uint8_t)(v >> 16),
      buf[4 * i + 3] = (uint8_t)(v >> 24);
    }
    lh_sha256_update(h, buf, (size_t)k * 4);
    t += k, n -= k;
  }
#endif
}

void lh_store_cursor_init(lh_store_cursor *c, const char *model_id, int64_t job_id) {
  memset(c, 0, sizeof *c);
  /* Anything but a full 64-character id leaves it empty, which lh_store_ckpt_new refuses. */
  if (model_id && strlen(model_id) == 64) memcpy(c->model_id, model_id, 65);
  c->job_id = job_id;
  lh_sha256_init(&c->hash);
}

void lh_store_cursor_feed(lh_store_cursor *c, const int32_t *tokens, int64_t n) {
  if (n <= 0) return;
  hash_tokens(&c->hash, tokens, n);
  c->pos += n;
}

void lh_store_cursor_checkpointed(lh_store_cursor *c) {
  c->has_parent = 1;
  c->parent_pos = c->pos;
  lh_sha256_final(&c->hash, c->parent_hash);
}

void lh_store_prefix_hash(const int32_t *tokens, int64_t n, uint8_t out[32]) {
  lh_sha256 h;
  lh_sha256_init(&h);
  hash_tokens(&h, tokens, n);
  lh_sha256_final(&h, out);
}

/* ---- checkpoint buffers -------------------------------------------------------------------- */

lh_status lh_store__ckpt_reset(lh_store_ckpt *ck, const lh_state_layout *lay, const lh_store_cursor *c,
                               lh_error *err) {
  if (c->pos <= 0 || c->pos <= c->parent_pos || (!c->has_parent && c->parent_pos != 0))
    return lh_error_set(err, LH_EINVAL, "checkpoint: cursor at %lld cannot checkpoint after parent at %lld",
                        (long long)c->pos, (long long)c->parent_pos);
  if (strlen(c->model_id) != 64)
    return lh_error_set(err, LH_EINVAL, "checkpoint: the cursor has no model id (lh_store_cursor_init needs the 64 "
                        "hex characters of lh_model_id)");
  if (lay->n_lightning < 0 || lay->n_softmax < 0 || lay->vocab_size <= 0 || (lay->n_softmax && !lay->kv_row_bytes) ||
      (lay->n_lightning && !lay->lightning_bytes))
    return lh_error_set(err, LH_EINVAL, "checkpoint: bad state layout");
  ck->lay = *lay;
  memcpy(ck->model_id, c->model_id, sizeof ck->model_id);
  ck->job_id = c->job_id;
  ck->pos = c->pos;
  ck->parent_pos = c->parent_pos;
  ck->has_parent = c->has_parent;
  lh_sha256_final(&c->hash, ck->hash);
  memcpy(ck->parent_hash, c->parent_hash, 32);
  size_t rows = (size_t)(c->pos - c->parent_pos);
  ck->kv_off = (size_t)lay->n_lightning * lay->lightning_bytes;
  ck->logits_off = ck->kv_off + (size_t)lay->n_softmax * rows * lay->kv_row_bytes;
  ck->bytes = ck->logits_off + (size_t)lay->vocab_size * 4;
  if (ck->bytes > ck->cap) {
    unsigned char *m = malloc(ck->bytes);
    if (!m) return lh_error_set(err, LH_ENOMEM, "checkpoint: cannot allocate %zu bytes", ck->bytes);
    free(ck->mem);
    ck->mem = m;
    ck->cap = ck->bytes;
  }
  return LH_OK;
}

lh_status lh_store_ckpt_new(const lh_state_layout *lay, const lh_store_cursor *c, lh_store_ckpt **out, lh_error *err) {
  *out = NULL;
  lh_store_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck) return lh_error_set(err, LH_ENOMEM, "checkpoint: out of memory");
  lh_status st = lh_store__ckpt_reset(ck, lay, c, err);
  if (st) {
    free(ck);
    return st;
  }
  *out = ck;
  return LH_OK;
}

void lh_store_ckpt_free(lh_store_ckpt *ck) {
  if (!ck) return;
  free(ck->mem);
  free(ck);
}

void *lh_store_ckpt_lightning(lh_store_ckpt *ck, int i) { return ck->mem + (size_t)i * ck->lay.lightning_bytes; }
void *lh_store_ckpt_kv(lh_store_ckpt *ck, int j) {
  return ck->mem + ck->kv_off + (size_t)j * (size_t)(ck->pos - ck->parent_pos) * ck->lay.kv_row_bytes;
}
float *lh_store_ckpt_logits(lh_store_ckpt *ck) { return (float *)(void *)(ck->mem + ck->logits_off); }
int64_t lh_store_ckpt_pos(const lh_store_ckpt *ck) { return ck->pos; }
int64_t lh_store_ckpt_parent_pos(const lh_store_ckpt *ck) { return ck->parent_pos; }
size_t lh_store_ckpt_bytes(const lh_store_ckpt *ck) { return ck->bytes; }

/* ---- writing ------------------------------------------------------------------------------- */

static int layout_equal(const lh_state_layout *a, const lh_state_layout *b) {
  return a->n_lightning == b->n_lightning && a->lightning_bytes == b->lightning_bytes &&
         a->n_softmax == b->n_softmax && a->kv_dtype == b->kv_dtype && a->kv_row_bytes == b->kv_row_bytes &&
         a->vocab_size == b->vocab_size;
}

/* Insert the pages of one (part, layer): a zeroblob row each, then its bytes through incremental
 * BLOB I/O (the row is never built in memory a second time). */
static lh_status write_pages(lh_store *s, sqlite3_stmt *ins, int64_t ckid, lh_store_part part, int layer,
                             const unsigned char *data, size_t n, size_t unit, lh_error *err) {
  size_t page = s->p.page_bytes / unit * unit;
  if (page == 0) page = unit;
  for (size_t off = 0, seq = 0; off < n; off += page, seq++) {
    size_t len = n - off < page ? n - off : page;
    uint32_t crc = lh_crc32c(0, data + off, len);
    sqlite3_reset(ins);
    lh_store__bind(ins, SQL_ARGS(SQL_INT(ckid), SQL_INT(part), SQL_INT(layer), SQL_INT(seq), SQL_INT(len), SQL_INT(crc),
                                 SQL_ZEROBLOB(len)));
    int rc = sqlite3_step(ins);
    if (rc != SQLITE_DONE) return lh_store__sql_error(s, rc, err, "writing a checkpoint page");
    sqlite3_blob *b;
    rc = sqlite3_blob_open(s->db, "main", "ckpt_pages", "data", sqlite3_last_insert_rowid(s->db), 1, &b);
    if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "opening a checkpoint page");
    rc = sqlite3_blob_write(b, data + off, (int)len, 0);
    int rc2 = sqlite3_blob_close(b);
    if (rc == SQLITE_OK) rc = rc2;
    if (rc != SQLITE_OK) return lh_store__sql_error(s, rc, err, "writing a checkpoint page");
  }
  return LH_OK;
}

static lh_status write_state_pages(lh_store *s, sqlite3_stmt *ins, int64_t id, const lh_store_ckpt *ck, lh_error *err) {
  lh_status st = LH_OK;
  for (int i = 0; i < ck->lay.n_lightning && !st; i++)
    st = write_pages(s, ins, id, LH_PART_LIGHTNING, i, ck->mem + (size_t)i * ck->lay.lightning_bytes,
                     ck->lay.lightning_bytes, 1, err);
  if (!st) st = write_pages(s, ins, id, LH_PART_LOGITS, 0, ck->mem + ck->logits_off, (size_t)ck->lay.vocab_size * 4, 4, err);
  return st;
}

/* Look up (model, hash) -> id, pos, has_state, layout. Returns 1 found, 0 not, -1 error. */
static int find_key(lh_store *s, const char *model_id, const uint8_t hash[32], lh_store__ckrow *row, lh_error *err);

lh_status lh_store__ckpt_write_ex(lh_store *s, const lh_store_ckpt *ck, int64_t *id_out, int *skipped, lh_error *err) {
  if (skipped) *skipped = 0;
  char what[96];
  snprintf(what, sizeof what, "writing the checkpoint at %lld", (long long)ck->pos);
  lh_status st = lh_store__begin(s, what, err);
  if (st) return st;
  sqlite3_stmt *q, *ins = NULL;
  const int64_t now = lh_store__now_ms(), state_bytes = (int64_t)(ck->kv_off + (size_t)ck->lay.vocab_size * 4);
  int64_t id = 0;
  lh_store__ckrow row;
  if ((st = lh_store__run(s, err, "INSERT INTO models(id, created_ms) VALUES(?1, ?2) ON CONFLICT(id) DO NOTHING",
                          SQL_ARGS(SQL_TEXT(ck->model_id), SQL_INT(now)), "%s", what)))
    goto out;
  if (ck->job_id) {
    st = lh_store__row(s, err, &q, "SELECT 1 FROM jobs WHERE id = ?1", SQL_ARGS(SQL_INT(ck->job_id)), "%s", what);
    if (st == LH_ENOTFOUND)
      st = lh_error_set(err, LH_ENOTFOUND, "%s: %s: no job %lld", s->path, what, (long long)ck->job_id);
    if (st) goto out;
    sqlite3_finalize(q);
  }
  if ((st = lh_store__prepare(s,
                              "INSERT INTO ckpt_pages(ckpt_id, part, layer, seq, nbytes, crc32c, data) "
                              "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                              &ins, err)))
    goto out;
  int f = find_key(s, ck->model_id, ck->hash, &row, err);
  if (f < 0) {
    st = err ? err->code : LH_EIO;
    goto out;
  }
  if (f == 1) {
    /* Content-addressed: someone already stored this prefix. Give a thinned one its state back. */
    id = row.id;
    if (skipped) *skipped = 1;
    if (!row.has_state && layout_equal(&row.lay, &ck->lay)) {
      if ((st = write_state_pages(s, ins, id, ck, err))) goto out;
      if ((st = lh_store__run(s, err,
                              "UPDATE checkpoints SET has_state = 1, state_bytes = ?2, last_used_ms = ?3 WHERE id = ?1",
                              SQL_ARGS(SQL_INT(id), SQL_INT(state_bytes), SQL_INT(now)), "%s", what)))
        goto out;
      if (skipped) *skipped = 0;
    }
  } else {
    int64_t parent_id = 0;
    if (ck->has_parent) {
      lh_store__ckrow pr;
      int pf = find_key(s, ck->model_id, ck->parent_hash, &pr, err);
      if (pf < 0) {
        st = err ? err->code : LH_EIO;
        goto out;
      }
      if (pf == 0) {
        st = lh_error_set(err, LH_ENOTFOUND,
                          "%s: %s: its parent checkpoint at %lld is not in the store (dropped as damaged, or by gc); "
                          "restart the sequence from a stored checkpoint",
                          s->path, what, (long long)ck->parent_pos);
        goto out;
      }
      if (pr.pos != ck->parent_pos || !layout_equal(&pr.lay, &ck->lay)) {
        st = lh_error_set(err, LH_EINVAL, "%s: %s: the parent checkpoint found is at %lld with %s layout, not at %lld",
                          s->path, what, (long long)pr.pos, layout_equal(&pr.lay, &ck->lay) ? "the same" : "another",
                          (long long)ck->parent_pos);
        goto out;
      }
      parent_id = pr.id;
    }
    if ((st = lh_store__run(s, err,
                            "INSERT INTO checkpoints(model_id, prefix_hash, pos, parent_id, parent_pos, job_id, "
                            "has_state, n_lightning, lightning_bytes, n_softmax, kv_dtype, kv_row_bytes, "
                            "vocab_size, state_bytes, kv_bytes, created_ms, last_used_ms) "
                            "VALUES(?1, ?2, ?3, ?4, ?5, ?6, 1, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?15)",
                            SQL_ARGS(SQL_TEXT(ck->model_id), SQL_BLOB(ck->hash, 32), SQL_INT(ck->pos),
                                     SQL_ID(parent_id), SQL_INT(ck->parent_pos), SQL_ID(ck->job_id),
                                     SQL_INT(ck->lay.n_lightning), SQL_INT(ck->lay.lightning_bytes),
                                     SQL_INT(ck->lay.n_softmax), SQL_INT(ck->lay.kv_dtype),
                                     SQL_INT(ck->lay.kv_row_bytes), SQL_INT(ck->lay.vocab_size), SQL_INT(state_bytes),
                                     SQL_INT(ck->logits_off - ck->kv_off), SQL_INT(now)),
                            "%s", what)))
      goto out;
    id = sqlite3_last_insert_rowid(s->db);
    size_t rows = (size_t)(ck->pos - ck->parent_pos);
    for (int j = 0; j < ck->lay.n_softmax && !st; j++)
      st = write_pages(s, ins, id, LH_PART_KV, j, ck->mem + ck->kv_off + (size_t)j * rows * ck->lay.kv_row_bytes,
                       rows * ck->lay.kv_row_bytes, ck->lay.kv_row_bytes, err);
    if (!st) st = write_state_pages(s, ins, id, ck, err);
    if (st) {
      lh_error_prefix(err, st, "%s: %s: ", s->path, what);
      goto out;
    }
  }
  if (ck->job_id)
    st = lh_store__run(s, err, "UPDATE jobs SET ckpt_id = ?1, updated_ms = ?2 WHERE id = ?3",
                       SQL_ARGS(SQL_INT(id), SQL_INT(now), SQL_INT(ck->job_id)), "%s", what);
out:
  sqlite3_finalize(ins);
  if ((st = lh_store__end(s, st, what, err))) return st;
  if (id_out) *id_out = id;
  return LH_OK;
}

lh_status lh_store_ckpt_write(lh_store *s, const lh_store_ckpt *ck, int64_t *id, lh_error *err) {
  return lh_store__ckpt_write_ex(s, ck, id, NULL, err);
}

/* ---- reading rows -------------------------------------------------------------------------- */

#define CKROW_COLS                                                                                        \
  "id, coalesce(parent_id, 0), pos, parent_pos, coalesce(job_id, 0), has_state, n_lightning, lightning_bytes, " \
  "n_softmax, kv_dtype, kv_row_bytes, vocab_size, state_bytes, kv_bytes, last_used_ms, created_ms, model_id, "  \
  "prefix_hash"

static void read_ckrow(sqlite3_stmt *q, lh_store__ckrow *r) {
  memset(r, 0, sizeof *r);
  r->id = sqlite3_column_int64(q, 0);
  r->parent_id = sqlite3_column_int64(q, 1);
  r->pos = sqlite3_column_int64(q, 2);
  r->parent_pos = sqlite3_column_int64(q, 3);
  r->job_id = sqlite3_column_int64(q, 4);
  r->has_state = sqlite3_column_int(q, 5);
  r->lay.n_lightning = sqlite3_column_int(q, 6);
  r->lay.lightning_bytes = (size_t)sqlite3_column_int64(q, 7);
  r->lay.n_softmax = sqlite3_column_int(q, 8);
  r->lay.kv_dtype = (lh_dtype)sqlite3_column_int(q, 9);
  r->lay.kv_row_bytes = (size_t)sqlite3_column_int64(q, 10);
  r->lay.vocab_size = sqlite3_column_int(q, 11);
  r->state_bytes = sqlite3_column_int64(q, 12);
  r->kv_bytes = sqlite3_column_int64(q, 13);
  r->last_used_ms = sqlite3_column_int64(q, 14);
  r->created_ms = sqlite3_column_int64(q, 15);
  const unsigned char *m = sqlite3_column_text(q, 16);
  snprintf(r->model_id, sizeof r->model_id, "%s", m ? (const char *)m : "");
  if (sqlite3_column_bytes(q, 17) == 32) memcpy(r->hash, sqlite3_column_blob(q, 17), 32);
}

static int find_key(lh_store *s, const char *model_id, const uint8_t hash[32], lh_store__ckrow *row, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q,
                               "SELECT " CKROW_COLS " FROM checkpoints WHERE model_id = ?1 AND prefix_hash = ?2",
                               SQL_ARGS(SQL_TEXT(model_id), SQL_BLOB(hash, 32)), "looking up a checkpoint");
  if (st == LH_ENOTFOUND) return 0;
  if (st) return -1;
  read_ckrow(q, row);
  sqlite3_finalize(q);
  return 1;
}

lh_status lh_store__ckpt_row(lh_store *s, int64_t id, lh_store__ckrow *row, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, "SELECT " CKROW_COLS " FROM checkpoints WHERE id = ?1",
                               SQL_ARGS(SQL_INT(id)), "reading checkpoint %lld", (long long)id);
  if (st == LH_ENOTFOUND) return lh_error_set(err, LH_ENOTFOUND, "%s: no checkpoint %lld", s->path, (long long)id);
  if (st) return st;
  read_ckrow(q, row);
  sqlite3_finalize(q);
  return LH_OK;
}

static lh_status info_from_row(lh_store *s, const lh_store__ckrow *r, lh_store_ckpt_info *in, lh_error *err) {
  memset(in, 0, sizeof *in);
  in->id = r->id;
  memcpy(in->model_id, r->model_id, sizeof in->model_id);
  memcpy(in->prefix_hash, r->hash, 32);
  in->pos = r->pos;
  in->parent_id = r->parent_id;
  in->parent_pos = r->parent_pos;
  in->job_id = r->job_id;
  in->has_state = r->has_state;
  in->state_bytes = r->state_bytes;
  in->kv_bytes = r->kv_bytes;
  in->created_ms = r->created_ms;
  in->last_used_ms = r->last_used_ms;
  in->layout = r->lay;
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q,
                               "SELECT (SELECT count(*) FROM ckpt_pages WHERE ckpt_id = ?1), "
                               "(SELECT count(*) FROM checkpoints WHERE parent_id = ?1)",
                               SQL_ARGS(SQL_INT(r->id)), "reading checkpoint %lld", (long long)r->id);
  if (st == LH_ENOTFOUND) return lh_store__sql_error(s, SQLITE_DONE, err, "reading checkpoint %lld", (long long)r->id);
  if (st) return st;
  in->n_pages = sqlite3_column_int64(q, 0);
  in->n_children = sqlite3_column_int(q, 1);
  sqlite3_finalize(q);
  return LH_OK;
}

lh_status lh_store_ckpt_get(lh_store *s, int64_t id, lh_store_ckpt_info *info, lh_error *err) {
  lh_store__ckrow r;
  lh_status st = lh_store__ckpt_row(s, id, &r, err);
  if (st) return st;
  return info_from_row(s, &r, info, err);
}

lh_status lh_store_ckpt_list(lh_store *s, lh_store_ckpt_info **out, size_t *n, lh_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  lh_status st = lh_store__prepare(s, "SELECT " CKROW_COLS " FROM checkpoints ORDER BY model_id, pos, id", &q, err);
  if (st) return st;
  size_t cap = 0;
  lh_store__ckrow *rows = NULL;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t nc = cap ? 2 * cap : 64;
      lh_store__ckrow *nr = realloc(rows, nc * sizeof *rows);
      if (!nr) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory listing checkpoints", s->path);
        break;
      }
      rows = nr, cap = nc;
    }
    read_ckrow(q, &rows[(*n)++]);
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "listing checkpoints");
  lh_store_ckpt_info *v = NULL;
  if (!st && *n) {
    v = calloc(*n, sizeof *v);
    if (!v) st = lh_error_set(err, LH_ENOMEM, "%s: out of memory listing checkpoints", s->path);
  }
  for (size_t i = 0; !st && i < *n; i++) st = info_from_row(s, &rows[i], &v[i], err);
  free(rows);
  if (st) {
    free(v);
    *n = 0;
    return st;
  }
  *out = v;
  return LH_OK;
}

lh_status lh_store_ckpt_find(lh_store *s, const char *model_id, const uint8_t hash[32], int64_t *id, lh_error *err) {
  lh_store__ckrow r;
  int f = find_key(s, model_id, hash, &r, err);
  if (f < 0) return err ? err->code : LH_EIO;
  if (f == 0) return lh_error_set(err, LH_ENOTFOUND, "%s: no checkpoint with that prefix", s->path);
  *id = r.id;
  return LH_OK;
}

/* ---- prefix lookup ------------------------------------------------------------------------- */

lh_status lh_store_prefix_lookup(lh_store *s, const char *model_id, const int32_t *tokens, int64_t n, int64_t *pos,
                                 int64_t *id, lh_error *err) {
  *pos = 0;
  *id = 0;
  if (n <= 0) return LH_OK;
  int64_t *cand = NULL;
  size_t nc = 0;
  lh_status st = lh_store_prefix_positions(s, model_id, n, &cand, &nc, err);
  if (st) return st;
  sqlite3_stmt *q;
  int rc;
  uint8_t(*hashes)[32] = NULL;
  if (!st && nc) {
    hashes = malloc(nc * sizeof *hashes);
    if (!hashes) st = lh_error_set(err, LH_ENOMEM, "%s: out of memory in prefix lookup", s->path);
  }
  if (!st && nc) {
    /* One pass over the tokens, reading the running hash at each stored position. */
    lh_sha256 h;
    lh_sha256_init(&h);
    int64_t at = 0;
    for (size_t i = 0; i < nc; i++) {
      hash_tokens(&h, tokens + at, cand[i] - at);
      at = cand[i];
      lh_sha256_final(&h, hashes[i]);
    }
    if (!(st = lh_store__prepare(s, "SELECT id FROM checkpoints WHERE model_id = ?1 AND prefix_hash = ?2 AND has_state = 1",
                                 &q, err))) {
      for (size_t i = nc; i-- > 0;) {
        sqlite3_reset(q);
        lh_store__bind(q, SQL_ARGS(SQL_TEXT(model_id), SQL_BLOB(hashes[i], 32)));
        rc = sqlite3_step(q);
        if (rc == SQLITE_ROW) {
          *id = sqlite3_column_int64(q, 0);
          *pos = cand[i];
          break;
        }
        if (rc != SQLITE_DONE) {
          st = lh_store__sql_error(s, rc, err, "looking up a prefix");
          break;
        }
      }
      sqlite3_finalize(q);
    }
  }
  free(cand);
  free(hashes);
  return st;
}

lh_status lh_store_prefix_positions(lh_store *s, const char *model_id, int64_t max_pos, int64_t **pos, size_t *n,
                                    lh_error *err) {
  *pos = NULL;
  *n = 0;
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q,
                                 "SELECT DISTINCT pos FROM checkpoints WHERE model_id = ?1 AND has_state = 1 AND "
                                 "pos <= ?2 ORDER BY pos",
                                 SQL_ARGS(SQL_TEXT(model_id), SQL_INT(max_pos)));
  if (st) return st;
  size_t cap = 0;
  int64_t *v = NULL;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t c2 = cap ? 2 * cap : 64;
      int64_t *nv = realloc(v, c2 * sizeof *nv);
      if (!nv) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory listing checkpoint positions", s->path);
        break;
      }
      v = nv, cap = c2;
    }
    v[(*n)++] = sqlite3_column_int64(q, 0);
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "listing checkpoint positions");
  if (st) {
    free(v);
    *n = 0;
    return st;
  }
  *pos = v;
  return LH_OK;
}

/* ---- checking and loading ------------------------------------------------------------------ */

static size_t part_size(const lh_store__ckrow *r, lh_store_part part) {
  switch (part) {
    case LH_PART_LIGHTNING: return r->lay.lightning_bytes;
    case LH_PART_KV: return (size_t)(r->pos - r->parent_pos) * r->lay.kv_row_bytes;
    default: return (size_t)r->lay.vocab_size * 4;
  }
}

static int part_layers(const lh_store__ckrow *r, lh_store_part part) {
  return part == LH_PART_LIGHTNING ? r->lay.n_lightning : part == LH_PART_KV ? r->lay.n_softmax : 1;
}

static const char *const part_names[3] = {"lightning", "KV", "logits"};

lh_status lh_store__ckpt_check_part(lh_store *s, const lh_store__ckrow *r, lh_store_part part, lh_store_load_cb cb,
                                    void *user, int64_t *pages, int64_t *bytes, lh_error *err) {
  size_t expect = part_size(r, part);
  int nlayers = part_layers(r, part);
  size_t unit = part == LH_PART_KV ? r->lay.kv_row_bytes : part == LH_PART_LOGITS ? 4 : 1;
  if (expect == 0 || nlayers == 0) return LH_OK;
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q,
                                 "SELECT id, layer, seq, nbytes, crc32c, length(data) FROM ckpt_pages WHERE "
                                 "ckpt_id = ?1 AND part = ?2 ORDER BY layer, seq",
                                 SQL_ARGS(SQL_INT(r->id), SQL_INT(part)));
  if (st) return st;
  /* Whole-layer parts are assembled in buf; KV pages are delivered one by one. */
  unsigned char *buf = NULL;
  size_t bufcap = 0;
  int layer = 0;
  int64_t seq = 0;
  size_t off = 0;
  int rc;
#define DAMAGE(...)                                                                   \
  do {                                                                                \
    char m_[400];                                                                     \
    snprintf(m_, sizeof m_, __VA_ARGS__);                                             \
    st = lh_error_set(err, LH_ECORRUPT, "checkpoint %lld (pos %lld): %s %s", (long long)r->id, \
                      (long long)r->pos, part_names[part], m_);                       \
    goto done;                                                                        \
  } while (0)
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    int64_t rowid = sqlite3_column_int64(q, 0);
    int l = sqlite3_column_int(q, 1);
    int64_t sq = sqlite3_column_int64(q, 2);
    int64_t nb = sqlite3_column_int64(q, 3);
    uint32_t crc = (uint32_t)sqlite3_column_int64(q, 4);
    int64_t len = sqlite3_column_int64(q, 5);
    if (l != layer) {
      if (off != expect) DAMAGE("layer %d: %zu of %zu bytes present (pages missing)", layer, off, expect);
      if (l != layer + 1) DAMAGE("layer %d: missing", layer + 1);
      layer = l, seq = 0, off = 0;
    }
    if (l >= nlayers) DAMAGE("layer %d: unexpected (the layout has %d)", l, nlayers);
    if (sq != seq) DAMAGE("layer %d: page %lld missing", l, (long long)seq);
    if (len != nb) DAMAGE("layer %d page %lld: truncated (%lld of %lld bytes)", l, (long long)sq, (long long)len, (long long)nb);
    if (nb <= 0 || (size_t)nb % unit || off + (size_t)nb > expect)
      DAMAGE("layer %d page %lld: bad length %lld", l, (long long)sq, (long long)nb);
    unsigned char *dst;
    if (part == LH_PART_KV) {
      if ((size_t)nb > bufcap) {
        free(buf);
        bufcap = (size_t)nb;
        if (!(buf = malloc(bufcap))) {
          st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading a checkpoint", s->path);
          goto done;
        }
      }
      dst = buf;
    } else {
      if (!buf) {
        bufcap = expect;
        if (!(buf = malloc(bufcap))) {
          st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading a checkpoint", s->path);
          goto done;
        }
      }
      dst = buf + off;
    }
    sqlite3_blob *b;
    int brc = sqlite3_blob_open(s->db, "main", "ckpt_pages", "data", rowid, 0, &b);
    if (brc == SQLITE_OK) {
      brc = sqlite3_blob_read(b, dst, (int)nb, 0);
      sqlite3_blob_close(b);
    }
    if (brc != SQLITE_OK) {
      st = lh_store__sql_error(s, brc, err, "reading checkpoint %lld", (long long)r->id);
      goto done;
    }
    uint32_t got = lh_crc32c(0, dst, (size_t)nb);
    if (got != crc)
      DAMAGE("layer %d page %lld: checksum mismatch (stored %08x, data %08x)", l, (long long)sq, crc, got);
    if (pages) (*pages)++;
    if (bytes) *bytes += nb;
    if (cb && part == LH_PART_KV) {
      int64_t t0 = r->parent_pos + (int64_t)(off / unit);
      if ((st = cb(user, part, l, t0, t0 + nb / (int64_t)unit, dst, (size_t)nb, err))) goto done;
    }
    off += (size_t)nb;
    seq++;
    if (cb && part != LH_PART_KV && off == expect)
      if ((st = cb(user, part, l, 0, 0, buf, expect, err))) goto done;
  }
  if (rc != SQLITE_DONE) {
    st = lh_store__sql_error(s, rc, err, "reading checkpoint %lld", (long long)r->id);
    goto done;
  }
  if (off != expect) DAMAGE("layer %d: %zu of %zu bytes present (pages missing)", layer, off, expect);
  if (layer != nlayers - 1) DAMAGE("layer %d: missing", layer + 1);
#undef DAMAGE
done:
  sqlite3_finalize(q);
  free(buf);
  return st;
}

lh_status lh_store__drop_subtree(lh_store *s, int64_t id, int64_t *n, lh_error *err) {
#define SUBTREE \
  "WITH RECURSIVE sub(id) AS (SELECT ?1 UNION ALL SELECT c.id FROM checkpoints c JOIN sub ON c.parent_id = sub.id) "
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, SUBTREE "SELECT count(*) FROM sub", SQL_ARGS(SQL_INT(id)),
                               "dropping checkpoint %lld", (long long)id);
  if (st == LH_ENOTFOUND) return lh_store__sql_error(s, SQLITE_DONE, err, "dropping checkpoint %lld", (long long)id);
  if (st) return st;
  int64_t count = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  if ((st = lh_store__run(s, err, SUBTREE "DELETE FROM checkpoints WHERE id IN sub", SQL_ARGS(SQL_INT(id)),
                          "dropping checkpoint %lld", (long long)id)))
    return st;
#undef SUBTREE
  if (n) *n = count;
  return LH_OK;
}

lh_status lh_store_ckpt_drop(lh_store *s, int64_t id, int64_t *n_dropped, lh_error *err) {
  lh_status st = lh_store__begin(s, "dropping checkpoints", err);
  if (st) return st;
  if ((st = lh_store__drop_subtree(s, id, n_dropped, err))) {
    lh_store__rollback(s);
    return st;
  }
  return lh_store__commit(s, "dropping checkpoints", err);
}

/* The chain ending at id, root first, with its structure checked. *bad is the checkpoint to drop
 * when the structure is wrong (0 when the chain is fine). */
static lh_status read_chain(lh_store *s, int64_t id, lh_store__ckrow **out, int *n, int64_t *bad, lh_error *err) {
  *out = NULL;
  *n = 0;
  *bad = 0;
  int cap = 0;
  lh_store__ckrow *v = NULL;
  lh_status st = LH_OK;
  for (int64_t at = id; at;) {
    if (*n == cap) {
      int nc = cap ? 2 * cap : 16;
      lh_store__ckrow *nv = realloc(v, (size_t)nc * sizeof *v);
      if (!nv) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading a chain", s->path);
        break;
      }
      v = nv, cap = nc;
    }
    if ((st = lh_store__ckpt_row(s, at, &v[*n], err))) {
      if (st == LH_ENOTFOUND && *n > 0) {
        *bad = v[*n - 1].id;
        st = lh_error_set(err, LH_ECORRUPT, "checkpoint %lld (pos %lld): its parent %lld is missing",
                          (long long)v[*n - 1].id, (long long)v[*n - 1].pos, (long long)at);
      }
      break;
    }
    lh_store__ckrow *c = &v[*n];
    if (*n > 0) {
      lh_store__ckrow *child = &v[*n - 1];
      if (c->pos != child->parent_pos || !layout_equal(&c->lay, &child->lay) || strcmp(c->model_id, child->model_id)) {
        *bad = child->id;
        st = lh_error_set(err, LH_ECORRUPT, "checkpoint %lld (pos %lld): parent %lld does not match (pos %lld, %s)",
                          (long long)child->id, (long long)child->pos, (long long)c->id, (long long)c->pos,
                          c->pos != child->parent_pos ? "position" : "model or layout");
        (*n)++;
        break;
      }
    }
    (*n)++;
    if (!c->parent_id && c->parent_pos != 0) {
      *bad = c->id;
      st = lh_error_set(err, LH_ECORRUPT, "checkpoint %lld (pos %lld): has no parent but starts at %lld",
                        (long long)c->id, (long long)c->pos, (long long)c->parent_pos);
      break;
    }
    at = c->parent_id;
    if (*n > 1000000) {
      st = lh_error_set(err, LH_ECORRUPT, "%s: checkpoint %lld: chain does not end", s->path, (long long)id);
      break;
    }
  }
  if (st) {
    free(v);
    *n = 0;
    return st;
  }
  for (int i = 0; i < *n / 2; i++) {
    lh_store__ckrow t = v[i];
    v[i] = v[*n - 1 - i];
    v[*n - 1 - i] = t;
  }
  *out = v;
  return LH_OK;
}

/* Remove a damaged checkpoint so it is never used: damaged KV rows break every descendant, so the
 * subtree goes; damaged state (lightning or logits) of a checkpoint with descendants only costs it
 * its resume point, so it is thinned and its good KV rows stay for the descendants. */
static void drop_damaged(lh_store *s, int64_t bad, int state_only, const lh_error *why) {
  if (s->p.read_only) {
    lh_log_warn("%s: %s; not removing it (the store is open read-only)", s->path, why->msg);
    return;
  }
  lh_error e2;
  lh_error_clear(&e2);
  int64_t children = 0;
  sqlite3_stmt *q;
  if (state_only && !lh_store__row(s, NULL, &q, "SELECT count(*) FROM checkpoints WHERE parent_id = ?1",
                                   SQL_ARGS(SQL_INT(bad)), "counting children")) {
    children = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  }
  if (state_only && children > 0) {
    lh_status st = lh_store__begin(s, "thinning a damaged checkpoint", &e2);
    if (!st) st = lh_store__thin(s, bad, &e2);
    if (!st) st = lh_store__commit(s, "thinning a damaged checkpoint", &e2);
    else lh_store__rollback(s);
    if (st)
      lh_log_warn("%s: %s; removing its state failed: %s", s->path, why->msg, e2.msg);
    else
      lh_log_warn("%s: %s; removed its state (its KV rows stay for %lld descendant(s)): resumes fall back to the "
                  "last good checkpoint",
                  s->path, why->msg, (long long)children);
    return;
  }
  int64_t n = 0;
  if (lh_store_ckpt_drop(s, bad, &n, &e2))
    lh_log_warn("%s: %s; dropping it failed: %s", s->path, why->msg, e2.msg);
  else
    lh_log_warn("%s: %s; dropped it and %lld descendant(s): that part will be recomputed from the last good "
                "checkpoint",
                s->path, why->msg, (long long)(n - 1));
}

lh_status lh_store__thin(lh_store *s, int64_t id, lh_error *err) {
  lh_status st = lh_store__run(s, err, "DELETE FROM ckpt_pages WHERE ckpt_id = ?1 AND part != 1", SQL_ARGS(SQL_INT(id)),
                               "thinning checkpoint %lld", (long long)id);
  if (!st)
    st = lh_store__run(s, err, "UPDATE checkpoints SET has_state = 0, state_bytes = 0 WHERE id = ?1",
                       SQL_ARGS(SQL_INT(id)), "thinning checkpoint %lld", (long long)id);
  return st;
}

lh_status lh_store_ckpt_load(lh_store *s, int64_t id, lh_store_load_cb cb, void *user, lh_error *err) {
  lh_error local;
  if (!err) err = &local;
  lh_error_clear(err);
  lh_store__ckrow *chain;
  int n;
  int64_t bad;
  lh_status st = read_chain(s, id, &chain, &n, &bad, err);
  if (st) {
    if (st == LH_ECORRUPT && bad) drop_damaged(s, bad, 0, err);
    return st;
  }
  lh_store__ckrow *leaf = &chain[n - 1];
  if (!leaf->has_state) {
    free(chain);
    return lh_error_set(err, LH_EINVAL, "%s: checkpoint %lld (pos %lld) was thinned by gc: it has no state to resume from",
                        s->path, (long long)id, (long long)leaf->pos);
  }
  for (int i = 0; i < n && !st; i++) {
    bad = chain[i].id;
    st = lh_store__ckpt_check_part(s, &chain[i], LH_PART_KV, cb, user, NULL, NULL, err);
  }
  int state_part = 0;
  if (!st) {
    state_part = 1;
    st = lh_store__ckpt_check_part(s, leaf, LH_PART_LIGHTNING, cb, user, NULL, NULL, err);
  }
  if (!st) st = lh_store__ckpt_check_part(s, leaf, LH_PART_LOGITS, cb, user, NULL, NULL, err);
  if (st == LH_ECORRUPT) {
    drop_damaged(s, bad, state_part, err);
  } else if (!st && !s->p.read_only) {
    lh_error e2;
    if (lh_store__run(s, &e2,
                      "WITH RECURSIVE up(id) AS (SELECT ?1 UNION ALL SELECT c.parent_id FROM checkpoints c "
                      "JOIN up ON c.id = up.id WHERE c.parent_id IS NOT NULL) "
                      "UPDATE checkpoints SET last_used_ms = ?2 WHERE id IN up",
                      SQL_ARGS(SQL_INT(id), SQL_INT(lh_store__now_ms())), "marking checkpoint %lld used",
                      (long long)id))
      lh_log_debug("%s", e2.msg);
  }
  free(chain);
  return st;
}
