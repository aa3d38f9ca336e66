/* store_admin.c — what `longhaul store ls|verify|gc` runs: sizes, integrity checks, retention.
 *
 * verify reads everything once: SQLite's structure, every job's result row and error text against
 * its CRC-32C (and a done job without a result, a failed one without an error), every checkpoint
 * page and chain. Repair requeues damaged jobs (their next run recomputes them) and drops damaged
 * checkpoints with their descendants. It repairs only what longhaul's checksums find: a store whose
 * SQLite structure is damaged (quick_check or foreign_key_check fails) is never written, since
 * writing through a broken b-tree can spread the damage; that store can only be moved aside,
 * salvaged (sqlite3 .recover) or restored.
 *
 * gc plans on a snapshot of the checkpoint forest taken inside its write transaction (so nothing
 * changes between planning and deleting) and applies three policies:
 *   keep_last N   per producing job, checkpoints older than its N newest lose their state (are
 *                 thinned) when they have descendants, or are deleted when they do not;
 *   older_than    a checkpoint unused that long is deleted when its whole subtree is too;
 *   max_bytes     while the payload is over the cap, the least recently used candidate goes: a
 *                 checkpoint with descendants is thinned, a leaf is deleted (its parent may then
 *                 become a leaf).
 * Protection: for every queued or running job with a resume point, that checkpoint keeps its state
 * and neither it nor any ancestor is deleted (ancestors may be thinned: the resume point needs only
 * their KV rows). Deletion is leaf-first, so a parent never goes before its children. Space returns
 * to the file system through incremental vacuum (auto_vacuum=INCREMENTAL is set at creation).
 * Before planning, gc drops the file_digests rows of files that are gone (store_digest.c; the
 * stat() calls happen outside the write lock).
 *
 * It must never: delete a checkpoint that a surviving checkpoint descends from, or touch the chain
 * of a queued or running job's resume point beyond thinning its ancestors.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store_internal.h"
#include "util/log.h"

static int64_t file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : 0;
}

lh_status lh_store_get_stats(lh_store *s, lh_store_stats *st, lh_error *err) {
  memset(st, 0, sizeof *st);
  st->file_bytes = file_size(s->path);
  lh_status rs;
  if ((rs = lh_store__int(s, "PRAGMA page_size", &st->page_size, err)) ||
      (rs = lh_store__int(s, "PRAGMA page_count", &st->page_count, err)) ||
      (rs = lh_store__int(s, "PRAGMA freelist_count", &st->freelist_pages, err)) ||
      (rs = lh_store__int(s, "SELECT count(*) FROM batches", &st->batches, err)) ||
      (rs = lh_store__int(s, "SELECT count(*) FROM checkpoints", &st->checkpoints, err)) ||
      (rs = lh_store__int(s, "SELECT count(*) FROM checkpoints WHERE has_state = 0", &st->thin_checkpoints, err)) ||
      (rs = lh_store__int(s, "SELECT coalesce(sum(state_bytes), 0) FROM checkpoints", &st->state_bytes, err)) ||
      (rs = lh_store__int(s, "SELECT coalesce(sum(kv_bytes), 0) FROM checkpoints", &st->kv_bytes, err)))
    return rs;
  static const char *const q[LH_JOB_STATE_COUNT] = {
      "SELECT count(*) FROM jobs WHERE state = 'queued'", "SELECT count(*) FROM jobs WHERE state = 'running'",
      "SELECT count(*) FROM jobs WHERE state = 'done'", "SELECT count(*) FROM jobs WHERE state = 'failed'"};
  for (int i = 0; i < LH_JOB_STATE_COUNT; i++)
    if ((rs = lh_store__int(s, q[i], &st->jobs[i], err))) return rs;
  return LH_OK;
}

/* ---- verify -------------------------------------------------------------------------------- */

static void problem(lh_store_verify_report *r, const char *fmt, const char *a) {
  lh_buf_printf(&r->problems, fmt, a);
}

typedef struct id_list {
  int64_t *v;
  size_t n, cap;
} id_list;

static int id_push(id_list *l, int64_t id) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? 2 * l->cap : 16;
    int64_t *nv = realloc(l->v, nc * sizeof *nv);
    if (!nv) return -1;
    l->v = nv, l->cap = nc;
  }
  l->v[l->n++] = id;
  return 0;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Run sql (rows: job id, custom_id) and record each row as a damaged job with the problem line
 * "job <id> ('<custom_id>'): <what>". */
static lh_status damaged_rows(lh_store *s, const char *sql, const char *what, id_list *bad, lh_store_verify_report *r,
                              lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q, sql, SQL_NO_ARGS);
  if (st) return st;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *cid = (const char *)sqlite3_column_text(q, 1);
    lh_buf_printf(&r->problems, "job %lld ('%s'): %s\n", (long long)sqlite3_column_int64(q, 0), cid ? cid : "?",
                  what);
    if (id_push(bad, sqlite3_column_int64(q, 0))) {
      st = lh_error_set(err, LH_ENOMEM, "%s: out of memory verifying", s->path);
      break;
    }
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "verifying %s", what);
  return st;
}

/* Check every result row and error text; the damaged jobs' ids go to bad (sorted, distinct). */
static lh_status verify_jobs(lh_store *s, lh_store_verify_report *r, id_list *bad, lh_error *err) {
  lh_status st;
  if ((st = lh_store__int(s, "SELECT count(*) FROM results", &r->results, err)) ||
      (st = lh_store__int(s, "SELECT count(*) FROM jobs WHERE error IS NOT NULL OR state = 'failed'", &r->errors,
                          err)) ||
      (st = damaged_rows(s,
                         "SELECT r.job_id, j.custom_id FROM results r LEFT JOIN jobs j ON j.id = r.job_id "
                         "WHERE NOT (" LH_STORE__RESULT_OK("r") ") ORDER BY r.job_id",
                         "its result row fails its checksum (CRC-32C)", bad, r, err)) ||
      (st = damaged_rows(s,
                         "SELECT j.id, j.custom_id FROM jobs j WHERE j.state = 'done' AND NOT EXISTS("
                         "SELECT 1 FROM results r WHERE r.job_id = j.id) ORDER BY j.id",
                         "done, but its result row is missing", bad, r, err)) ||
      (st = damaged_rows(s,
                         "SELECT j.id, j.custom_id FROM jobs j WHERE j.error IS NOT NULL AND NOT coalesce("
                         LH_STORE__ERROR_OK("j") ", 0) ORDER BY j.id",
                         "its error text fails its checksum (CRC-32C)", bad, r, err)) ||
      (st = damaged_rows(s, "SELECT j.id, j.custom_id FROM jobs j WHERE j.state = 'failed' AND j.error IS NULL",
                         "failed, but its error text is missing", bad, r, err)))
    return st;
  if (bad->n) qsort(bad->v, bad->n, sizeof *bad->v, cmp_i64);
  size_t k = 0;
  for (size_t i = 0; i < bad->n; i++)
    if (k == 0 || bad->v[k - 1] != bad->v[i]) bad->v[k++] = bad->v[i];
  bad->n = k;
  r->damaged_jobs = (int64_t)k;
  return LH_OK;
}

/* Repair of damaged jobs, in one transaction: a done or failed one goes back to queued with its
 * result and error dropped (as lh_store_job_requeue, whatever its owner: done and failed jobs have
 * none); any other keeps its state and loses only the damaged rows (a result row of a job that is
 * not done is used by nothing). */
static lh_status requeue_damaged(lh_store *s, const id_list *bad, lh_store_verify_report *r, lh_error *err) {
  lh_status st = lh_store__begin(s, "requeueing damaged jobs", err);
  if (st) return st;
  int64_t now = lh_store__now_ms();
  for (size_t i = 0; i < bad->n && !st; i++) {
    int64_t id = bad->v[i];
    st = lh_store__run(s, err,
                       "UPDATE jobs SET state = 'queued', attempts = 0, error = NULL, error_crc32c = NULL, "
                       "finished_ms = NULL, updated_ms = ?2 WHERE id = ?1 AND state IN ('done', 'failed')",
                       SQL_ARGS(SQL_INT(id), SQL_INT(now)), "requeueing damaged job %lld", (long long)id);
    if (!st) r->requeued += sqlite3_changes(s->db);
    if (!st)
      st = lh_store__run(s, err,
                         "UPDATE jobs SET error = NULL, error_crc32c = NULL WHERE id = ?1 AND error IS NOT NULL "
                         "AND NOT coalesce(" LH_STORE__ERROR_OK("jobs") ", 0)",
                         SQL_ARGS(SQL_INT(id)), "dropping the damaged error of job %lld", (long long)id);
    if (!st)
      st = lh_store__run(s, err,
                         "DELETE FROM results WHERE job_id = ?1 AND (NOT (" LH_STORE__RESULT_OK("results") ") OR "
                         "(SELECT state FROM jobs WHERE id = ?1) = 'queued')",
                         SQL_ARGS(SQL_INT(id)), "dropping the damaged result of job %lld", (long long)id);
  }
  return lh_store__end(s, st, "requeueing damaged jobs", err);
}

lh_status lh_store_verify(lh_store *s, int repair, lh_store_verify_report *r, lh_error *err) {
  memset(r, 0, sizeof *r);
  if (repair && s->p.read_only)
    return lh_error_set(err, LH_EINVAL, "%s: repair needs the store opened writable", s->path);
  sqlite3_stmt *q;
  lh_status st = lh_store__prepare(s, "PRAGMA quick_check", &q, err);
  if (st) return st;
  int rc;
  r->db_ok = 1;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(q, 0);
    if (t && strcmp(t, "ok") != 0) {
      r->db_ok = 0;
      problem(r, "sqlite: %s\n", t);
    }
  }
  sqlite3_finalize(q);
  if (rc != SQLITE_DONE) {
    r->db_ok = 0;
    lh_buf_printf(&r->problems, "sqlite: quick_check failed: %s\n", sqlite3_errmsg(s->db));
  }
  if ((st = lh_store__prepare(s, "PRAGMA foreign_key_check", &q, err))) return st;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    r->db_ok = 0;
    lh_buf_printf(&r->problems, "sqlite: table %s row %lld refers to a missing %s row\n",
                  (const char *)sqlite3_column_text(q, 0), (long long)sqlite3_column_int64(q, 1),
                  (const char *)sqlite3_column_text(q, 2));
  }
  sqlite3_finalize(q);
  if (!r->db_ok) repair = 0; /* see the top of this file: no writes through a damaged structure */

  id_list bad_jobs = {0};
  if ((st = verify_jobs(s, r, &bad_jobs, err)) ||
      (repair && bad_jobs.n && (st = requeue_damaged(s, &bad_jobs, r, err)))) {
    free(bad_jobs.v);
    return st;
  }
  free(bad_jobs.v);

  lh_store_ckpt_info *list;
  size_t n;
  if ((st = lh_store_ckpt_list(s, &list, &n, err))) return st;
  int64_t *bad = calloc(n ? n : 1, sizeof *bad);
  size_t nbad = 0;
  if (!bad) {
    free(list);
    return lh_error_set(err, LH_ENOMEM, "%s: out of memory verifying", s->path);
  }
  for (size_t i = 0; i < n; i++) {
    lh_store__ckrow row;
    lh_error e;
    lh_error_clear(&e);
    if ((st = lh_store__ckpt_row(s, list[i].id, &row, err))) break;
    r->checkpoints++;
    lh_status cs = LH_OK;
    if (row.parent_id) {
      lh_store__ckrow pr;
      if (lh_store__ckpt_row(s, row.parent_id, &pr, NULL))
        cs = lh_error_set(&e, LH_ECORRUPT, "checkpoint %lld (pos %lld): parent %lld missing", (long long)row.id,
                          (long long)row.pos, (long long)row.parent_id);
      else if (pr.pos != row.parent_pos || strcmp(pr.model_id, row.model_id) ||
               pr.lay.n_lightning != row.lay.n_lightning || pr.lay.lightning_bytes != row.lay.lightning_bytes ||
               pr.lay.n_softmax != row.lay.n_softmax || pr.lay.kv_row_bytes != row.lay.kv_row_bytes ||
               pr.lay.kv_dtype != row.lay.kv_dtype || pr.lay.vocab_size != row.lay.vocab_size)
        cs = lh_error_set(&e, LH_ECORRUPT, "checkpoint %lld (pos %lld): parent %lld at %lld does not match", (long long)row.id,
                          (long long)row.pos, (long long)pr.id, (long long)pr.pos);
    } else if (row.parent_pos != 0) {
      cs = lh_error_set(&e, LH_ECORRUPT, "checkpoint %lld (pos %lld): root starting at %lld", (long long)row.id,
                        (long long)row.pos, (long long)row.parent_pos);
    }
    int64_t expect_kv = (row.pos - row.parent_pos) * (int64_t)row.lay.kv_row_bytes * row.lay.n_softmax;
    int64_t expect_state = (int64_t)row.lay.lightning_bytes * row.lay.n_lightning + (int64_t)row.lay.vocab_size * 4;
    if (!cs && (row.kv_bytes != expect_kv || row.state_bytes != (row.has_state ? expect_state : 0)))
      cs = lh_error_set(&e, LH_ECORRUPT, "checkpoint %lld (pos %lld): recorded sizes do not match its layout",
                        (long long)row.id, (long long)row.pos);
    if (!cs) cs = lh_store__ckpt_check_part(s, &row, LH_PART_KV, NULL, NULL, &r->pages, &r->bytes, &e);
    if (!cs && row.has_state) cs = lh_store__ckpt_check_part(s, &row, LH_PART_LIGHTNING, NULL, NULL, &r->pages, &r->bytes, &e);
    if (!cs && row.has_state) cs = lh_store__ckpt_check_part(s, &row, LH_PART_LOGITS, NULL, NULL, &r->pages, &r->bytes, &e);
    if (!cs && !row.has_state) {
      int64_t extra = 0;
      sqlite3_stmt *x;
      if (!lh_store__row(s, NULL, &x, "SELECT count(*) FROM ckpt_pages WHERE ckpt_id = ?1 AND part != 1",
                         SQL_ARGS(SQL_INT(row.id)), "counting state pages")) {
        extra = sqlite3_column_int64(x, 0);
        sqlite3_finalize(x);
      }
      if (extra)
        cs = lh_error_set(&e, LH_ECORRUPT, "checkpoint %lld (pos %lld): thin but holds %lld state pages",
                          (long long)row.id, (long long)row.pos, (long long)extra);
    }
    if (cs == LH_ECORRUPT) {
      r->damaged++;
      problem(r, "%s\n", e.msg);
      bad[nbad++] = row.id;
    } else if (cs) {
      st = cs;
      if (err) *err = e;
      break;
    }
  }
  free(list);
  if (!st && repair && nbad) {
    if (!(st = lh_store__begin(s, "repairing", err))) {
      for (size_t i = 0; i < nbad && !st; i++) {
        lh_store__ckrow row;
        if (lh_store__ckpt_row(s, bad[i], &row, NULL)) continue; /* already gone with an ancestor */
        int64_t k = 0;
        st = lh_store__drop_subtree(s, bad[i], &k, err);
        r->dropped += k;
      }
      if (!st) st = lh_store__commit(s, "repairing", err);
      else lh_store__rollback(s);
    }
  }
  free(bad);
  return st;
}

/* ---- gc ------------------------------------------------------------------------------------ */

lh_store_gc_params lh_store_gc_default_params(void) {
  lh_store_gc_params p;
  memset(&p, 0, sizeof p);
  p.older_than_s = -1;
  p.max_bytes = -1;
  p.keep_last = -1;
  p.vacuum = 1;
  p.drop_gone_digests = 1;
  return p;
}

typedef struct gnode {
  int64_t id, parent_id, pos, job_id, last_used, state_bytes, kv_bytes;
  int parent;        /* index or -1 */
  int has_state;
  int children;      /* surviving children */
  int resume;        /* a queued/running job resumes here: keep its state */
  int pinned;        /* on a protected chain: never delete */
  int del, thin;     /* the plan */
} gnode;

static int by_pos_desc(const void *a, const void *b) {
  const gnode *x = a, *y = b;
  return x->pos < y->pos ? 1 : x->pos > y->pos ? -1 : (x->id < y->id ? 1 : -1);
}

static int by_job_pos_desc(const void *a, const void *b) {
  const gnode *const *x = a, *const *y = b;
  if ((*x)->job_id != (*y)->job_id) return (*x)->job_id < (*y)->job_id ? -1 : 1;
  return (*x)->pos < (*y)->pos ? 1 : (*x)->pos > (*y)->pos ? -1 : 0;
}

static int find_node(const gnode *v, int n, int64_t id) {
  /* v is sorted by pos descending, not by id: a linear scan is fine at gc's sizes */
  for (int i = 0; i < n; i++)
    if (v[i].id == id) return i;
  return -1;
}

static void mark_delete(gnode *v, int i, lh_store_gc_report *r) {
  if (v[i].del) return;
  v[i].del = 1;
  r->deleted++;
  r->bytes_freed += (v[i].thin ? 0 : v[i].state_bytes) + v[i].kv_bytes;
  if (v[i].thin) r->thinned--; /* counted as a deletion instead */
  if (v[i].parent >= 0) v[v[i].parent].children--;
}

static void mark_thin(gnode *v, int i, lh_store_gc_report *r) {
  if (v[i].thin || v[i].del || !v[i].has_state) return;
  v[i].thin = 1;
  r->thinned++;
  r->bytes_freed += v[i].state_bytes;
}

static lh_status plan(lh_store *s, const lh_store_gc_params *p, gnode **out, int *nout, lh_store_gc_report *r,
                      lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__prepare(s,
                                   "SELECT id, coalesce(parent_id, 0), pos, coalesce(job_id, 0), last_used_ms, "
                                   "has_state, state_bytes, kv_bytes FROM checkpoints",
                                   &q, err);
  if (st) return st;
  int n = 0, cap = 0, rc;
  gnode *v = NULL;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    if (n == cap) {
      int nc = cap ? 2 * cap : 256;
      gnode *nv = realloc(v, (size_t)nc * sizeof *v);
      if (!nv) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory planning gc", s->path);
        break;
      }
      v = nv, cap = nc;
    }
    gnode *g = &v[n++];
    memset(g, 0, sizeof *g);
    g->id = sqlite3_column_int64(q, 0);
    g->parent_id = sqlite3_column_int64(q, 1);
    g->pos = sqlite3_column_int64(q, 2);
    g->job_id = sqlite3_column_int64(q, 3);
    g->last_used = sqlite3_column_int64(q, 4);
    g->has_state = sqlite3_column_int(q, 5);
    g->state_bytes = sqlite3_column_int64(q, 6);
    g->kv_bytes = sqlite3_column_int64(q, 7);
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "planning gc");
  if (st) {
    free(v);
    return st;
  }
  if (n) qsort(v, (size_t)n, sizeof *v, by_pos_desc);
  for (int i = 0; i < n; i++) {
    v[i].parent = v[i].parent_id ? find_node(v, n, v[i].parent_id) : -1;
    if (v[i].parent >= 0) v[v[i].parent].children++;
  }
  /* Protection from queued and running jobs' resume points. */
  if ((st = lh_store__prepare(s, "SELECT ckpt_id FROM jobs WHERE state IN ('queued', 'running') AND ckpt_id IS NOT NULL",
                              &q, err))) {
    free(v);
    return st;
  }
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    int i = find_node(v, n, sqlite3_column_int64(q, 0));
    if (i < 0) continue;
    if (!v[i].resume) r->protected_ckpts++;
    v[i].resume = 1;
    for (; i >= 0 && !v[i].pinned; i = v[i].parent) v[i].pinned = 1;
  }
  sqlite3_finalize(q);
  int64_t now = p->now_ms ? p->now_ms : lh_store__now_ms();

  if (p->keep_last >= 0 && n) {
    gnode **byjob = malloc((size_t)n * sizeof *byjob);
    if (!byjob) {
      free(v);
      return lh_error_set(err, LH_ENOMEM, "%s: out of memory planning gc", s->path);
    }
    int m = 0;
    for (int i = 0; i < n; i++)
      if (v[i].job_id && v[i].has_state) byjob[m++] = &v[i];
    qsort(byjob, (size_t)m, sizeof *byjob, by_job_pos_desc);
    for (int i = 0, rank = 0; i < m; i++) {
      rank = (i > 0 && byjob[i]->job_id == byjob[i - 1]->job_id) ? rank + 1 : 0;
      if (rank < p->keep_last || byjob[i]->resume) continue;
      mark_thin(v, (int)(byjob[i] - v), r);
    }
    free(byjob);
    /* Thinned leaves hold only KV that nothing needs: delete them (children first: v is pos-descending). */
    for (int i = 0; i < n; i++)
      if (v[i].thin && v[i].children == 0 && !v[i].pinned) mark_delete(v, i, r);
  }
  if (p->older_than_s >= 0) {
    int64_t cutoff = now - p->older_than_s * 1000;
    /* Children come before parents in v, so a node's subtree is decided before it is. */
    for (int i = 0; i < n; i++)
      if (!v[i].del && !v[i].pinned && v[i].last_used < cutoff && v[i].children == 0) mark_delete(v, i, r);
  }
  if (p->max_bytes >= 0) {
    int64_t total = 0;
    for (int i = 0; i < n; i++)
      if (!v[i].del) total += v[i].kv_bytes + (v[i].thin ? 0 : v[i].state_bytes);
    while (total > p->max_bytes) {
      int best = -1;
      for (int i = 0; i < n; i++) {
        if (v[i].del || v[i].resume) continue;
        int can_delete = v[i].children == 0 && !v[i].pinned;
        int can_thin = v[i].children > 0 && v[i].has_state && !v[i].thin;
        if (!can_delete && !can_thin) continue;
        if (best < 0 || v[i].last_used < v[best].last_used ||
            (v[i].last_used == v[best].last_used && v[i].pos < v[best].pos))
          best = i;
      }
      if (best < 0) break; /* everything left is protected */
      int64_t before = r->bytes_freed;
      if (v[best].children == 0 && !v[best].pinned)
        mark_delete(v, best, r);
      else
        mark_thin(v, best, r);
      total -= r->bytes_freed - before;
    }
  }
  *out = v;
  *nout = n;
  return LH_OK;
}

/* One pass of gc in one write transaction: plan on a fresh snapshot, then carry out at most max_ops
 * of the plan's deletions and thinnings (all of them when max_ops is 0), deletions first in the
 * plan's order (children before parents, so any prefix of them is a valid step), then thinnings.
 * What it carried out is added to r (a dry run adds the whole plan); *left is what it left for the
 * next pass. Each pass plans anew, so nothing that changed between passes is acted on stale. */
static lh_status gc_pass(lh_store *s, const lh_store_gc_params *p, int max_ops, int first, lh_store_gc_report *r,
                         int *left, lh_error *err) {
  *left = 0;
  lh_status st = lh_store__begin(s, "collecting garbage", err);
  if (st) return st;
  lh_store_gc_report planned;
  memset(&planned, 0, sizeof planned);
  gnode *v = NULL;
  int n = 0;
  if ((st = plan(s, p, &v, &n, &planned, err))) goto fail;
  if (first) r->protected_ckpts = planned.protected_ckpts;
  if (p->dry_run) {
    r->deleted += planned.deleted, r->thinned += planned.thinned, r->bytes_freed += planned.bytes_freed;
    free(v);
    lh_store__rollback(s);
    return LH_OK;
  }
  int done = 0;
  sqlite3_stmt *q;
  if ((st = lh_store__prepare(s, "DELETE FROM checkpoints WHERE id = ?1", &q, err))) goto fail;
  for (int i = 0; i < n && !st; i++) { /* pos-descending: children before parents */
    if (!v[i].del) continue;
    if (max_ops && done == max_ops) {
      (*left)++;
      continue;
    }
    sqlite3_reset(q);
    lh_store__bind(q, SQL_ARGS(SQL_INT(v[i].id)));
    int rc = sqlite3_step(q);
    if (rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "deleting checkpoint %lld", (long long)v[i].id);
    done++;
    r->deleted++;
    r->bytes_freed += (v[i].has_state ? v[i].state_bytes : 0) + v[i].kv_bytes;
  }
  sqlite3_finalize(q);
  for (int i = 0; i < n && !st; i++) {
    if (!v[i].thin || v[i].del) continue;
    if (max_ops && done == max_ops) {
      (*left)++;
      continue;
    }
    st = lh_store__thin(s, v[i].id, err);
    done++;
    r->thinned++;
    r->bytes_freed += v[i].state_bytes;
  }
  if (st) goto fail;
  free(v);
  return lh_store__commit(s, "collecting garbage", err);
fail:
  free(v);
  lh_store__rollback(s);
  return st;
}

/* PRAGMA incremental_vacuum(pages), 0 for every free page: moves pages from the end of the file
 * into the freed ones and truncates, in its own transaction, with I/O proportional to what it
 * moves. */
static lh_status vacuum_step(lh_store *s, int64_t pages, lh_error *err) {
  char sql[64];
  snprintf(sql, sizeof sql, "PRAGMA incremental_vacuum(%lld)", (long long)pages);
  sqlite3_stmt *q;
  lh_status st = lh_store__prepare(s, sql, &q, err);
  if (st) return st;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
  }
  sqlite3_finalize(q);
  if (rc != SQLITE_DONE) return lh_store__sql_error(s, rc, err, "returning free space (incremental vacuum)");
  return LH_OK;
}

/* The message for a disk too full for even gc's smallest step: gc's own advice would be circular. */
static lh_status gc_disk_full(lh_store *s, const lh_store_gc_report *r, lh_error *err) {
  int64_t page = 0;
  if (lh_store__int(s, "PRAGMA page_size", &page, NULL)) page = 65536;
  char done[160] = "";
  if (r->deleted || r->thinned)
    snprintf(done, sizeof done, " (it deleted %lld and thinned %lld checkpoint(s) before that; what it did is kept)",
             (long long)r->deleted, (long long)r->thinned);
  return lh_error_set(err, LH_EFULL,
                      "%s: the disk is full, and gc itself needs a little free space for its rollback journal (about "
                      "%lld KiB: a few of the store's %lld KiB pages) to delete anything safely%s: delete other files "
                      "on that disk and rerun gc, or move the store (with its -journal file, if any) to a disk with "
                      "room and run gc and then `longhaul run` there with --db FILE",
                      s->path, (long long)(16 * page / 1024), (long long)(page / 1024), done);
}

lh_status lh_store_gc(lh_store *s, const lh_store_gc_params *pp, lh_store_gc_report *r, lh_error *err) {
  memset(r, 0, sizeof *r);
  lh_store_gc_params p = pp ? *pp : lh_store_gc_default_params();
  /* the age is compared in milliseconds: a larger one would wrap to a small age and delete all */
  if (p.older_than_s > LH_STORE_GC_MAX_AGE_S)
    return lh_error_set(err, LH_EINVAL, "gc: older_than_s %lld is out of range (at most %lld s)",
                        (long long)p.older_than_s, (long long)LH_STORE_GC_MAX_AGE_S);
  r->file_before = file_size(s->path);
  lh_status st;
  /* Statement journals (a DELETE's cascade inside the transaction) in memory: they guard only the
   * statement, not the file, and a temporary file needs the space a full disk lacks. */
  if ((st = lh_store__exec(s, "PRAGMA temp_store = MEMORY", err))) return st;
  if (p.drop_gone_digests && (st = lh_store__drop_gone_digests(s, p.dry_run, &r->digests_dropped, err))) {
    if (st != LH_EFULL) return st;
    r->digests_dropped = 0; /* a full disk: the checkpoints free more, in smaller steps */
  }
  /* The whole plan in one transaction; if its journal does not fit on the disk, the plan again in
   * passes of fewer operations each (each pass's journal is a few pages per checkpoint; the
   * journal's space is reused by the next pass), down to one checkpoint per pass. */
  int max_ops = 0, left = 0, first = 1;
  for (;;) {
    lh_store_gc_report before = *r;
    st = gc_pass(s, &p, max_ops, first, r, &left, err);
    if (st == LH_EFULL && max_ops != 1) {
      *r = before;
      max_ops = max_ops ? max_ops / 2 : 16;
      continue;
    }
    if (st) {
      if (st != LH_EFULL) return st;
      *r = before;
      return gc_disk_full(s, r, err);
    }
    first = 0;
    if (!left) break;
  }
  if (p.dry_run) {
    r->file_after = r->file_before;
    return LH_OK;
  }
  if (p.vacuum) { /* all at once; on a full disk in steps of fewer pages, down to one */
    int64_t step = 0, free_pages = 0;
    for (;;) {
      st = vacuum_step(s, step, err);
      if (st == LH_EFULL && step != 1) {
        step = step ? step / 2 : 16;
        continue;
      }
      if (st == LH_EFULL) return gc_disk_full(s, r, err);
      if (st) return st;
      if (!step || (st = lh_store__int(s, "PRAGMA freelist_count", &free_pages, err))) break;
      if (!free_pages) break;
    }
    if (st) return st;
  }
  r->file_after = file_size(s->path);
  return LH_OK;
}
