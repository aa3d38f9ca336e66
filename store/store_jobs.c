/* store_jobs.c — batches, jobs, their documents and results, and how processes share the work.
 *
 * A job's life (column jobs.state; the function that makes each transition):
 *
 *                 lh_store_job_add
 *                        |
 *                        v         lh_store_job_claim[_next]
 *     +------------> queued ----------------------------------> running --+-- lh_store_job_done --> done
 *     |                ^   ^                                    |   ^     |
 *     |                |   +------ lh_store_job_release --------+   |     +-- lh_store_job_fail --> failed
 *     |                |                                            |                              |
 *     |                |          claim of a stale owner's job -----+  (attempts + 1)              |
 *     |                +------------------ lh_store_job_requeue -------------------------------------+
 *     +------------------------------------ lh_store_job_requeue (from done) --------------------------+
 *
 * (a stale claim that has used up params.max_attempts goes to failed instead of running; and
 * lh_store_job_add of a job whose identity changed moves it from any state but running under a live
 * owner back to queued, as requeue does, also dropping its document manifest.)
 *
 * Invariants:
 *   1. A job is running iff it has an owner (owner_host, owner_pid, owner_start) and a heartbeat.
 *      Every transition happens inside one BEGIN IMMEDIATE transaction that re-reads the row, so two
 *      processes never both move a job to running: the second sees it running under a live owner.
 *   2. done and failed are left only by requeue; done always has a results row written in the same
 *      transaction.
 *   3. Only the owner moves a running job on (_done, _fail, _release check the owner in the UPDATE);
 *      anyone may take it over once the owner is dead.
 *   4. What a job's outcome is rebuilt from is checksummed where it is written: a results row's
 *      crc32c (lh_store__result_crc over job id, json, blob) in the INSERT that stores it, and
 *      jobs.error_crc32c (lh_store__error_crc) in every UPDATE that sets jobs.error; error_crc32c is
 *      NULL exactly when error is. Reads (lh_store_job_result, job_get's damaged, verify) check.
 *   5. request is fixed per (batch, custom_id); identity is what may change, and a changed identity
 *      never leaves a result, error or manifest of the old inputs behind. The store cannot see
 *      inputs: that an outcome was computed from the inputs its identity names is the runner's
 *      to keep (jobs/runner.c, invariant 5), through the transitions above: a job whose documents
 *      changed after its identity was taken goes running -> queued (_release) and takes the
 *      identity of what is there now (_add); one given up on takes an identity no run computes
 *      (_add), then queued -> running -> failed (_claim, _fail). While a live owner runs a job,
 *      _add refuses to change its identity, so what a runner checked after claiming holds until
 *      it records the outcome.
 *
 * Dead owners. owner_host is "hostname boot-id pid-namespace". When it equals ours, the owner's pid
 * is in our process table: it is alive iff /proc/<pid>/stat exists, is not a zombie and shows the
 * same start time (so a recycled pid does not count) — a killed runner's jobs are taken over at
 * once. Otherwise (another machine or container) the owner is alive while its heartbeat is younger
 * than lease_s; each claiming handle refreshes its heartbeats from a thread every lease_s/4, so a
 * claim is lost only when the process is gone or stopped for a whole lease. Clocks of machines that
 * share a store must agree to well within lease_s.
 *
 * It must never: run a job's work, or read checkpoints (store_ckpt.c does).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/store_internal.h"
#include "util/log.h"

int64_t lh_store__proc_start(int64_t pid);

static const char *const state_names[LH_JOB_STATE_COUNT] = {"queued", "running", "done", "failed"};

const char *lh_job_state_name(lh_job_state st) {
  return (unsigned)st < LH_JOB_STATE_COUNT ? state_names[st] : "unknown";
}

static lh_job_state state_from_text(const unsigned char *t) {
  for (int i = 0; i < LH_JOB_STATE_COUNT; i++)
    if (t && !strcmp((const char *)t, state_names[i])) return (lh_job_state)i;
  return LH_JOB_FAILED;
}

/* The rows this handle's process holds (?2..?4 are its identity; MINE_ARGS binds ?1 too). */
#define MINE "state = 'running' AND owner_host = ?2 AND owner_pid = ?3 AND owner_start = ?4"
#define MINE_ARGS(s, first) SQL_INT(first), SQL_TEXT((s)->me.host), SQL_INT((s)->me.pid), SQL_INT((s)->me.start)
#define OWNED "id = ?1 AND " MINE
#define HEARTBEAT_SQL "UPDATE jobs SET heartbeat_ms = ?1 WHERE " MINE
#define CLEAR_OWNER "owner_host = NULL, owner_name = NULL, owner_pid = NULL, owner_start = NULL, heartbeat_ms = NULL"

int lh_store__owner_alive(const lh_store *s, const char *host, int64_t pid, int64_t start, int64_t heartbeat_ms,
                          int64_t now_ms) {
  if (!host) return 0;
  if (!strcmp(host, s->me.host)) {
    if (pid == s->me.pid && start == s->me.start) return 1;
    int64_t st = lh_store__proc_start(pid);
    if (st < 0) {
      /* No /proc entry: fall back to signal 0 (EPERM still means it exists). */
      if (kill((pid_t)pid, 0) == 0 || errno == EPERM) return start == 0 ? 1 : 0;
      return 0;
    }
    return start == 0 || st == start;
  }
  return now_ms - heartbeat_ms < (int64_t)s->p.lease_s * 1000;
}

/* ---- heartbeat thread ---------------------------------------------------------------------- */

static void *heartbeat_main(void *arg) {
  lh_store *s = arg;
  sqlite3 *db = NULL;
  if (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
    lh_log_warn("%s: heartbeat thread cannot open the database: %s; claims will expire after %d s", s->path,
                db ? sqlite3_errmsg(db) : "?", s->p.lease_s);
    sqlite3_close(db);
    return NULL;
  }
  sqlite3_busy_timeout(db, s->p.busy_timeout_ms);
  /* The same journal discipline as the handle (a mismatch is harmless between rollback modes, so a
   * failure here is only logged). */
  char sql[96];
  snprintf(sql, sizeof sql, "PRAGMA journal_mode = %s; PRAGMA synchronous = %s",
           s->p.journal_mode ? s->p.journal_mode : "truncate", s->p.synchronous ? s->p.synchronous : "full");
  if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
    lh_log_debug("%s: heartbeat connection: %s", s->path, sqlite3_errmsg(db));
  int64_t period_ms = (int64_t)s->p.lease_s * 1000 / 4;
  if (period_ms < 100) period_ms = 100;
  pthread_mutex_lock(&s->hb_mu);
  while (!s->hb_stop) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (period_ms % 1000) * 1000000;
    until.tv_sec += period_ms / 1000 + ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    pthread_cond_timedwait(&s->hb_cv, &s->hb_mu, &until);
    if (s->hb_stop) break;
    pthread_mutex_unlock(&s->hb_mu);
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db, HEARTBEAT_SQL, -1, &q, NULL);
    if (rc == SQLITE_OK) {
      lh_store__bind(q, SQL_ARGS(MINE_ARGS(s, lh_store__now_ms())));
      rc = sqlite3_step(q);
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE && rc != SQLITE_OK)
      lh_log_debug("%s: heartbeat failed (%s); retrying in %lld ms", s->path, sqlite3_errmsg(db),
                   (long long)period_ms);
    pthread_mutex_lock(&s->hb_mu);
  }
  pthread_mutex_unlock(&s->hb_mu);
  sqlite3_close(db);
  return NULL;
}

static void heartbeat_start(lh_store *s) {
  if (!s->p.heartbeat || s->hb_started) return;
  s->hb_stop = 0;
  if (pthread_create(&s->hb_thread, NULL, heartbeat_main, s) == 0)
    s->hb_started = 1;
  else
    lh_log_warn("%s: cannot start the heartbeat thread; claims will expire after %d s", s->path, s->p.lease_s);
}

void lh_store__heartbeat_stop(lh_store *s) {
  if (!s->hb_started) return;
  pthread_mutex_lock(&s->hb_mu);
  s->hb_stop = 1;
  pthread_cond_signal(&s->hb_cv);
  pthread_mutex_unlock(&s->hb_mu);
  pthread_join(s->hb_thread, NULL);
  s->hb_started = 0;
}

lh_status lh_store_job_heartbeat(lh_store *s, lh_error *err) {
  lh_status st = lh_store__writable(s, "refreshing claims", err);
  if (st) return st;
  return lh_store__run(s, err, HEARTBEAT_SQL, SQL_ARGS(MINE_ARGS(s, lh_store__now_ms())), "refreshing claims");
}

/* ---- batches ------------------------------------------------------------------------------- */

lh_status lh_store_batch_find(lh_store *s, const char *name, int64_t *batch_id, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, "SELECT id FROM batches WHERE name = ?1", SQL_ARGS(SQL_TEXT(name)),
                               "finding batch '%s'", name);
  if (st == LH_ENOTFOUND) return lh_error_set(err, LH_ENOTFOUND, "%s: no batch named '%s'", s->path, name);
  if (st) return st;
  *batch_id = sqlite3_column_int64(q, 0);
  sqlite3_finalize(q);
  return LH_OK;
}

lh_status lh_store_batch_put(lh_store *s, const char *name, int64_t *batch_id, lh_error *err) {
  if (!name || !*name) return lh_error_set(err, LH_EINVAL, "%s: a batch needs a name", s->path);
  lh_status st = lh_store__writable(s, "adding a batch", err);
  if (st) return st;
  if ((st = lh_store__run(s, err, "INSERT INTO batches(name, created_ms) VALUES(?1, ?2) ON CONFLICT(name) DO NOTHING",
                          SQL_ARGS(SQL_TEXT(name), SQL_INT(lh_store__now_ms())), "adding batch '%s'", name)))
    return st;
  return lh_store_batch_find(s, name, batch_id, err);
}

/* ---- jobs ---------------------------------------------------------------------------------- */

lh_status lh_store_job_find(lh_store *s, int64_t batch_id, const char *custom_id, int64_t *job_id, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q,
                               "SELECT id FROM jobs WHERE (?1 = 0 OR batch_id = ?1) AND custom_id = ?2 LIMIT 2",
                               SQL_ARGS(SQL_INT(batch_id), SQL_TEXT(custom_id)), "finding job '%s'", custom_id);
  if (st == LH_ENOTFOUND) {
    if (batch_id)
      return lh_error_set(err, LH_ENOTFOUND, "%s: batch %lld has no job '%s'", s->path, (long long)batch_id, custom_id);
    return lh_error_set(err, LH_ENOTFOUND, "%s: no job '%s'", s->path, custom_id);
  }
  if (st) return st;
  *job_id = sqlite3_column_int64(q, 0);
  int rc = sqlite3_step(q);
  sqlite3_finalize(q);
  if (rc == SQLITE_ROW)
    return lh_error_set(err, LH_EINVAL, "%s: custom_id '%s' is in more than one batch; name the batch", s->path,
                        custom_id);
  if (rc != SQLITE_DONE) return lh_store__sql_error(s, rc, err, "finding job '%s'", custom_id);
  return LH_OK;
}

/* The job's inputs changed (lh_store_job_add, existed = 2): the new identity, and a fresh start in
 * queued with nothing of the old inputs kept but the checkpoints (content-addressed). Inside the
 * caller's transaction. */
static lh_status job_renew(lh_store *s, int64_t job_id, const char *identity, lh_error *err) {
  lh_status st = lh_store__run(s, err,
                               "UPDATE jobs SET identity = ?2, state = 'queued', attempts = 0, error = NULL, "
                               "error_crc32c = NULL, started_ms = NULL, finished_ms = NULL, tokens_total = -1, "
                               "updated_ms = ?3, " CLEAR_OWNER " WHERE id = ?1",
                               SQL_ARGS(SQL_INT(job_id), SQL_TEXT(identity), SQL_INT(lh_store__now_ms())),
                               "renewing job %lld", (long long)job_id);
  if (!st)
    st = lh_store__run(s, err, "DELETE FROM results WHERE job_id = ?1", SQL_ARGS(SQL_INT(job_id)),
                       "dropping the old result of job %lld", (long long)job_id);
  if (!st)
    st = lh_store__run(s, err, "DELETE FROM documents WHERE job_id = ?1", SQL_ARGS(SQL_INT(job_id)),
                       "dropping the old documents of job %lld", (long long)job_id);
  return st;
}

lh_status lh_store_job_add(lh_store *s, int64_t batch_id, const lh_store_job_spec *spec, int64_t *job_id,
                           int *existed, lh_error *err) {
  if (existed) *existed = 0;
  if (!spec || !spec->custom_id || !*spec->custom_id || !spec->request_json)
    return lh_error_set(err, LH_EINVAL, "%s: a job needs a custom_id and a request", s->path);
  lh_status st = lh_store__begin(s, "adding a job", err);
  if (st) return st;
  sqlite3_stmt *q;
  st = lh_store__row(s, err, &q,
                     "SELECT id, request, identity, state, owner_host, owner_pid, owner_start, heartbeat_ms, "
                     "owner_name FROM jobs WHERE batch_id = ?1 AND custom_id = ?2",
                     SQL_ARGS(SQL_INT(batch_id), SQL_TEXT(spec->custom_id)), "adding job '%s'", spec->custom_id);
  if (st == LH_OK) { /* there already: the same request is the same job */
    int64_t id = sqlite3_column_int64(q, 0);
    const char *old = (const char *)sqlite3_column_text(q, 1);
    const char *old_identity = (const char *)sqlite3_column_text(q, 2);
    lh_job_state js = state_from_text(sqlite3_column_text(q, 3));
    int changed = spec->identity && (!old_identity || strcmp(old_identity, spec->identity) != 0);
    if (old && strcmp(old, spec->request_json) != 0) {
      st = lh_error_set(err, LH_EINVAL,
                        "%s: custom_id '%s' is already in this batch with a different request; custom_ids must be "
                        "unique (use a new batch to change a request)",
                        s->path, spec->custom_id);
    } else if (changed && js == LH_JOB_RUNNING &&
               lh_store__owner_alive(s, (const char *)sqlite3_column_text(q, 4), sqlite3_column_int64(q, 5),
                                     sqlite3_column_int64(q, 6), sqlite3_column_int64(q, 7), lh_store__now_ms())) {
      const char *name = (const char *)sqlite3_column_text(q, 8);
      st = lh_error_set(err, LH_EBUSY,
                        "%s: job %lld ('%s') has new inputs but is running under %s pid %lld, which is alive, on "
                        "the old ones; wait for that run to end (or stop it), then run again",
                        s->path, (long long)id, spec->custom_id, name ? name : "?",
                        (long long)sqlite3_column_int64(q, 5));
    } else {
      *job_id = id;
      if (existed) *existed = changed ? 2 : 1;
      if (changed && js != LH_JOB_QUEUED)
        lh_log_info("%s: job %lld ('%s') has new inputs: queued again (it was %s)", s->path, (long long)id,
                    spec->custom_id, lh_job_state_name(js));
    }
    sqlite3_finalize(q);
    if (!st && changed) st = job_renew(s, *job_id, spec->identity, err);
  } else if (st == LH_ENOTFOUND) {
    st = lh_store__run(s, err,
                       "INSERT INTO jobs(batch_id, custom_id, group_key, model_id, request, identity, state, "
                       "created_ms, updated_ms) VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?7)",
                       SQL_ARGS(SQL_INT(batch_id), SQL_TEXT(spec->custom_id), SQL_TEXT(spec->group_key),
                                SQL_TEXT(spec->model_id), SQL_TEXT(spec->request_json), SQL_TEXT(spec->identity),
                                SQL_INT(lh_store__now_ms())),
                       "adding job '%s'", spec->custom_id);
    if (st && (sqlite3_errcode(s->db) & 0xff) == SQLITE_CONSTRAINT) /* the batch's foreign key */
      st = lh_error_set(err, LH_ENOTFOUND, "%s: no batch %lld to add job '%s' to", s->path, (long long)batch_id,
                        spec->custom_id);
    if (!st) *job_id = sqlite3_last_insert_rowid(s->db);
  }
  return lh_store__end(s, st, "adding a job", err);
}

typedef struct claimable {
  int64_t id;
  int attempts;
  int stale; /* running under a dead owner */
  char *group;
  char *old_owner;
} claimable;

/* Read one job row for a claim decision: is it claimable by us now? */
static int row_claimable(lh_store *s, sqlite3_stmt *q, int64_t now, claimable *c) {
  const unsigned char *state = sqlite3_column_text(q, 1);
  c->id = sqlite3_column_int64(q, 0);
  c->attempts = sqlite3_column_int(q, 2);
  c->group = lh_store__col_strdup(q, 3);
  c->old_owner = NULL;
  c->stale = 0;
  if (state && !strcmp((const char *)state, "queued")) return 1;
  if (!state || strcmp((const char *)state, "running") != 0) return 0;
  const char *host = (const char *)sqlite3_column_text(q, 4);
  if (lh_store__owner_alive(s, host, sqlite3_column_int64(q, 5), sqlite3_column_int64(q, 6),
                            sqlite3_column_int64(q, 7), now))
    return 0;
  c->stale = 1;
  const char *name = (const char *)sqlite3_column_text(q, 8);
  size_t n = (name ? strlen(name) : 1) + 32;
  c->old_owner = malloc(n);
  if (c->old_owner) snprintf(c->old_owner, n, "%s pid %lld", name ? name : "?", (long long)sqlite3_column_int64(q, 5));
  return 1;
}

#define JOB_CLAIM_COLS "id, state, attempts, group_key, owner_host, owner_pid, owner_start, heartbeat_ms, owner_name"

/* Move one claimable job to running (or to failed when it used up its attempts). Returns 1 if we now
 * hold it, 0 if it was failed instead, -1 on error. */
static int take(lh_store *s, const claimable *c, int64_t now, lh_error *err) {
  if (c->stale && s->p.max_attempts > 0 && c->attempts >= s->p.max_attempts) {
    char msg[512];
    snprintf(msg, sizeof msg, "gave up after %d attempts: the process running it (last %s) died each time",
             c->attempts, c->old_owner ? c->old_owner : "?");
    if (lh_store__run(s, err,
                      "UPDATE jobs SET state = 'failed', error = ?2, error_crc32c = ?4, finished_ms = ?3, "
                      "updated_ms = ?3, owner_host = NULL, owner_name = NULL, owner_pid = NULL, owner_start = NULL "
                      "WHERE id = ?1",
                      SQL_ARGS(SQL_INT(c->id), SQL_TEXT(msg), SQL_INT(now),
                               SQL_INT(lh_store__error_crc(c->id, msg, strlen(msg)))),
                      "failing job %lld", (long long)c->id))
      return -1;
    lh_log_warn("%s: job %lld failed: %s", s->path, (long long)c->id, msg);
    return 0;
  }
  if (lh_store__run(s, err,
                    "UPDATE jobs SET state = 'running', attempts = attempts + 1, owner_host = ?2, "
                    "owner_name = ?3, owner_pid = ?4, owner_start = ?5, heartbeat_ms = ?6, "
                    "started_ms = coalesce(started_ms, ?6), updated_ms = ?6, error = NULL, error_crc32c = NULL "
                    "WHERE id = ?1",
                    SQL_ARGS(SQL_INT(c->id), SQL_TEXT(s->me.host), SQL_TEXT(s->me.hostname), SQL_INT(s->me.pid),
                             SQL_INT(s->me.start), SQL_INT(now)),
                    "claiming job %lld", (long long)c->id))
    return -1;
  if (c->stale)
    lh_log_info("%s: job %lld taken over from %s (dead or silent for %d s)", s->path, (long long)c->id,
                c->old_owner ? c->old_owner : "?", s->p.lease_s);
  return 1;
}

static void claimable_free(claimable *c) {
  free(c->group);
  free(c->old_owner);
  c->group = c->old_owner = NULL;
}

/* Read every claimable row of a query (bound by bind) before changing any of them: SQLite does not
 * promise a consistent scan of a table that the same connection updates mid-scan. */
static lh_status collect(lh_store *s, const char *sql, int64_t a, const char *b, int limit, int64_t now,
                         claimable **out, int *n, lh_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  const lh_store__arg args[2] = {SQL_INT(a), SQL_TEXT(b)};
  lh_status st = lh_store__query(s, err, &q, sql, args, b ? 2 : 1);
  if (st) return st;
  int cap = 0, rc;
  claimable *v = NULL;
  while ((limit <= 0 || *n < limit) && (rc = sqlite3_step(q)) == SQLITE_ROW) {
    claimable c;
    if (!row_claimable(s, q, now, &c)) {
      claimable_free(&c);
      continue;
    }
    if (*n == cap) {
      int nc = cap ? cap * 2 : 8;
      claimable *nv = realloc(v, (size_t)nc * sizeof *v);
      if (!nv) {
        claimable_free(&c);
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory claiming jobs", s->path);
        break;
      }
      v = nv, cap = nc;
    }
    v[(*n)++] = c;
  }
  if (!st && (limit <= 0 || *n < limit) && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "claiming a job");
  sqlite3_finalize(q);
  if (st) {
    for (int i = 0; i < *n; i++) claimable_free(&v[i]);
    free(v);
    *n = 0;
    return st;
  }
  *out = v;
  return LH_OK;
}

static void claimables_free(claimable *v, int n) {
  for (int i = 0; i < n; i++) claimable_free(&v[i]);
  free(v);
}

lh_status lh_store_job_claim_next(lh_store *s, int64_t batch_id, int max, int64_t *ids, int *n, lh_error *err) {
  *n = 0;
  if (max < 1) return lh_error_set(err, LH_EINVAL, "%s: claim_next needs room for at least one job", s->path);
  lh_status st = lh_store__begin(s, "claiming a job", err);
  if (st) return st;
  int64_t now = lh_store__now_ms();
  claimable *v = NULL;
  int nv = 0, t = 0;
  char *group = NULL;
  /* Stale running jobs first (they have checkpoints to resume from), then the oldest queued one
   * (queued jobs are always claimable, so the first row is enough). */
  if ((st = collect(s, "SELECT " JOB_CLAIM_COLS " FROM jobs WHERE state = 'running' AND (?1 = 0 OR batch_id = ?1) "
                       "ORDER BY id", batch_id, NULL, 0, now, &v, &nv, err)))
    goto out;
  for (int i = 0; i < nv && *n == 0; i++) {
    if ((t = take(s, &v[i], now, err)) < 0) goto fail;
    if (t == 1) {
      ids[(*n)++] = v[i].id;
      group = v[i].group, v[i].group = NULL;
    }
  }
  claimables_free(v, nv);
  v = NULL, nv = 0;
  if (*n == 0) {
    if ((st = collect(s, "SELECT " JOB_CLAIM_COLS " FROM jobs WHERE state = 'queued' AND (?1 = 0 OR batch_id = ?1) "
                         "ORDER BY id LIMIT 1", batch_id, NULL, 1, now, &v, &nv, err)))
      goto out;
    if (nv == 1) {
      if ((t = take(s, &v[0], now, err)) < 0) goto fail;
      ids[(*n)++] = v[0].id;
      group = v[0].group, v[0].group = NULL;
    }
    claimables_free(v, nv);
    v = NULL, nv = 0;
  }
  if (*n == 0) {
    /* Keep what take() decided (jobs failed for using up their attempts). */
    if ((st = lh_store__commit(s, "claiming a job", err))) return st;
    return lh_error_set(err, LH_ENOTFOUND, "%s: no job to claim", s->path);
  }
  if (group && max > 1) {
    if ((st = collect(s, "SELECT " JOB_CLAIM_COLS " FROM jobs WHERE batch_id = (SELECT batch_id FROM jobs WHERE "
                         "id = ?1) AND group_key = ?2 AND id != ?1 AND state IN ('queued', 'running') ORDER BY id",
                      ids[0], group, 0, now, &v, &nv, err)))
      goto out;
    for (int i = 0; i < nv && *n < max; i++) {
      if ((t = take(s, &v[i], now, err)) < 0) goto fail;
      if (t == 1) ids[(*n)++] = v[i].id;
    }
    claimables_free(v, nv);
    v = NULL, nv = 0;
  }
  free(group);
  if ((st = lh_store__commit(s, "claiming a job", err))) {
    *n = 0;
    return st;
  }
  heartbeat_start(s);
  return LH_OK;
fail:
  st = err ? err->code : LH_EIO;
out:
  claimables_free(v, nv);
  free(group);
  lh_store__rollback(s);
  *n = 0;
  return st;
}

lh_status lh_store_job_claim(lh_store *s, int64_t job_id, lh_error *err) {
  lh_status st = lh_store__begin(s, "claiming a job", err);
  if (st) return st;
  int64_t now = lh_store__now_ms();
  sqlite3_stmt *q;
  claimable c = {0};
  st = lh_store__row(s, err, &q, "SELECT " JOB_CLAIM_COLS " FROM jobs WHERE id = ?1", SQL_ARGS(SQL_INT(job_id)),
                     "claiming job %lld", (long long)job_id);
  if (st == LH_ENOTFOUND) st = lh_error_set(err, LH_ENOTFOUND, "%s: no job %lld", s->path, (long long)job_id);
  if (st) goto out;
  lh_job_state js = state_from_text(sqlite3_column_text(q, 1));
  if (js == LH_JOB_RUNNING && !strcmp((const char *)sqlite3_column_text(q, 4), s->me.host) &&
      sqlite3_column_int64(q, 5) == s->me.pid && sqlite3_column_int64(q, 6) == s->me.start) {
    sqlite3_finalize(q);
    lh_store__rollback(s);
    return LH_OK; /* already ours */
  }
  if (js == LH_JOB_DONE || js == LH_JOB_FAILED) {
    st = lh_error_set(err, LH_EINVAL, "%s: job %lld is %s; requeue it to run it again", s->path, (long long)job_id,
                      lh_job_state_name(js));
    goto out;
  }
  if (!row_claimable(s, q, now, &c)) {
    const char *name = (const char *)sqlite3_column_text(q, 8);
    st = lh_error_set(err, LH_EBUSY, "%s: job %lld is running under %s pid %lld, which is alive", s->path,
                      (long long)job_id, name ? name : "?", (long long)sqlite3_column_int64(q, 5));
    goto out;
  }
  sqlite3_finalize(q);
  q = NULL;
  int t = take(s, &c, now, err);
  if (t < 0) {
    st = err ? err->code : LH_EIO;
    goto out;
  }
  if (t == 0) {
    st = lh_error_set(err, LH_EINVAL, "%s: job %lld has used up its %d attempts and was failed", s->path,
                      (long long)job_id, s->p.max_attempts);
    if ((lh_store__commit(s, "failing a job", NULL))) lh_store__rollback(s);
    claimable_free(&c);
    return st;
  }
  claimable_free(&c);
  if ((st = lh_store__commit(s, "claiming a job", err))) return st;
  heartbeat_start(s);
  return LH_OK;
out:
  claimable_free(&c);
  sqlite3_finalize(q);
  lh_store__rollback(s);
  return st;
}

/* Explain why an owner-checked UPDATE of a running job changed nothing. */
static lh_status not_ours(lh_store *s, int64_t job_id, const char *what, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q, "SELECT state, owner_name, owner_pid FROM jobs WHERE id = ?1",
                                 SQL_ARGS(SQL_INT(job_id)));
  if (st) return st;
  if (sqlite3_step(q) != SQLITE_ROW) {
    sqlite3_finalize(q);
    return lh_error_set(err, LH_ENOTFOUND, "%s: %s: no job %lld", s->path, what, (long long)job_id);
  }
  lh_job_state js = state_from_text(sqlite3_column_text(q, 0));
  if (js != LH_JOB_RUNNING) {
    st = lh_error_set(err, LH_EINVAL, "%s: %s: job %lld is %s, not running", s->path, what, (long long)job_id,
                      lh_job_state_name(js));
  } else {
    const char *name = (const char *)sqlite3_column_text(q, 1);
    st = lh_error_set(err, LH_EBUSY,
                      "%s: %s: job %lld is no longer ours: %s pid %lld took it over (this process was presumed "
                      "dead)",
                      s->path, what, (long long)job_id, name ? name : "?", (long long)sqlite3_column_int64(q, 2));
  }
  sqlite3_finalize(q);
  return st;
}

/* One owner-checked transition: UPDATE jobs SET <set> WHERE OWNED, with ?5 = now, and when error is
 * given ?6 = error and ?7 = its CRC-32C (lh_store__error_crc). */
static lh_status owned_update(lh_store *s, int64_t job_id, const char *set, const char *error, const char *what,
                              lh_error *err) {
  char sql[512];
  snprintf(sql, sizeof sql, "UPDATE jobs SET %s WHERE " OWNED, set);
  const lh_store__arg args[7] = {MINE_ARGS(s, job_id), SQL_INT(lh_store__now_ms()), SQL_TEXT(error),
                                 SQL_INT(error ? lh_store__error_crc(job_id, error, strlen(error)) : 0)};
  lh_status st = lh_store__run(s, err, sql, args, error ? 7 : 5, "%s job %lld", what, (long long)job_id);
  if (st) return st;
  if (sqlite3_changes(s->db) == 0) return not_ours(s, job_id, what, err);
  return LH_OK;
}

lh_status lh_store_job_check_claim(lh_store *s, int64_t job_id, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, "SELECT 1 FROM jobs WHERE " OWNED, SQL_ARGS(MINE_ARGS(s, job_id)),
                               "checking the claim of job %lld", (long long)job_id);
  if (st == LH_ENOTFOUND) return not_ours(s, job_id, "checking the claim", err);
  if (st) return st;
  sqlite3_finalize(q);
  return LH_OK;
}

lh_status lh_store_job_done(lh_store *s, int64_t job_id, const char *result_json, const void *blob, size_t blob_len,
                            lh_error *err) {
  if (!result_json) return lh_error_set(err, LH_EINVAL, "%s: job %lld: a result needs JSON", s->path, (long long)job_id);
  lh_status st = lh_store__begin(s, "finishing a job", err);
  if (st) return st;
  st = owned_update(s, job_id,
                    "state = 'done', finished_ms = ?5, updated_ms = ?5, error = NULL, error_crc32c = NULL, "
                    CLEAR_OWNER, NULL, "finishing", err);
  uint32_t crc = lh_store__result_crc(job_id, result_json, strlen(result_json), blob, blob_len);
  if (!st)
    st = lh_store__run(s, err,
                       "INSERT OR REPLACE INTO results(job_id, json, blob, created_ms, crc32c) "
                       "VALUES(?1, ?2, ?3, ?4, ?5)",
                       SQL_ARGS(SQL_INT(job_id), SQL_TEXT(result_json), SQL_BLOB(blob, blob_len),
                                SQL_INT(lh_store__now_ms()), SQL_INT(crc)),
                       "storing the result of job %lld", (long long)job_id);
  return lh_store__end(s, st, "finishing a job", err);
}

lh_status lh_store_job_fail(lh_store *s, int64_t job_id, const char *message, lh_error *err) {
  lh_status st = lh_store__begin(s, "failing a job", err);
  if (st) return st;
  st = owned_update(s, job_id,
                    "state = 'failed', finished_ms = ?5, updated_ms = ?5, error = ?6, error_crc32c = ?7, " CLEAR_OWNER,
                    message ? message : "failed", "failing", err);
  return lh_store__end(s, st, "failing a job", err);
}

lh_status lh_store_job_release(lh_store *s, int64_t job_id, lh_error *err) {
  lh_status st = lh_store__begin(s, "releasing a job", err);
  if (st) return st;
  st = owned_update(s, job_id, "state = 'queued', updated_ms = ?5, " CLEAR_OWNER, NULL, "releasing", err);
  return lh_store__end(s, st, "releasing a job", err);
}

lh_status lh_store_job_requeue(lh_store *s, int64_t job_id, lh_error *err) {
  lh_status st = lh_store__begin(s, "requeueing a job", err);
  if (st) return st;
  sqlite3_stmt *q;
  st = lh_store__row(s, err, &q, "SELECT " JOB_CLAIM_COLS " FROM jobs WHERE id = ?1", SQL_ARGS(SQL_INT(job_id)),
                     "requeueing job %lld", (long long)job_id);
  if (st == LH_ENOTFOUND) st = lh_error_set(err, LH_ENOTFOUND, "%s: no job %lld", s->path, (long long)job_id);
  if (!st) {
    if (state_from_text(sqlite3_column_text(q, 1)) == LH_JOB_RUNNING &&
        lh_store__owner_alive(s, (const char *)sqlite3_column_text(q, 4), sqlite3_column_int64(q, 5),
                              sqlite3_column_int64(q, 6), sqlite3_column_int64(q, 7), lh_store__now_ms())) {
      const char *name = (const char *)sqlite3_column_text(q, 8);
      st = lh_error_set(err, LH_EBUSY, "%s: job %lld is running under %s pid %lld, which is alive", s->path,
                        (long long)job_id, name ? name : "?", (long long)sqlite3_column_int64(q, 5));
    }
    sqlite3_finalize(q);
  }
  if (!st)
    st = lh_store__run(s, err,
                       "UPDATE jobs SET state = 'queued', attempts = 0, error = NULL, error_crc32c = NULL, "
                       "finished_ms = NULL, updated_ms = ?2, " CLEAR_OWNER " WHERE id = ?1",
                       SQL_ARGS(SQL_INT(job_id), SQL_INT(lh_store__now_ms())), "requeueing job %lld",
                       (long long)job_id);
  if (!st)
    st = lh_store__run(s, err, "DELETE FROM results WHERE job_id = ?1", SQL_ARGS(SQL_INT(job_id)),
                       "requeueing job %lld", (long long)job_id);
  return lh_store__end(s, st, "requeueing a job", err);
}

lh_status lh_store_job_set_tokens(lh_store *s, int64_t job_id, int64_t tokens_total, lh_error *err) {
  lh_status st = lh_store__writable(s, "recording job progress", err);
  if (st) return st;
  if (tokens_total < 0) return LH_OK;
  if ((st = lh_store__run(s, err, "UPDATE jobs SET tokens_total = ?2, updated_ms = ?3 WHERE id = ?1",
                          SQL_ARGS(SQL_INT(job_id), SQL_INT(tokens_total), SQL_INT(lh_store__now_ms())),
                          "recording progress of job %lld", (long long)job_id)))
    return st;
  if (sqlite3_changes(s->db) == 0) return lh_error_set(err, LH_ENOTFOUND, "%s: no job %lld", s->path, (long long)job_id);
  return LH_OK;
}

/* ---- reading jobs -------------------------------------------------------------------------- */

/* The job info query; damaged is the SQL of its last column (JOB_DAMAGED, or -1 for not checked). */
#define JOB_INFO_SQL(damaged)                                                                                 \
  "SELECT j.id, j.batch_id, b.name, j.custom_id, j.group_key, j.model_id, j.request, j.state, j.attempts, "   \
  "j.created_ms, j.started_ms, j.finished_ms, j.heartbeat_ms, j.error, j.owner_name, j.owner_pid, "           \
  "j.owner_host, j.owner_start, j.ckpt_id, c.pos, j.tokens_total, "                                           \
  "EXISTS(SELECT 1 FROM results r WHERE r.job_id = j.id), j.identity, " damaged ", j.updated_ms "             \
  "FROM jobs j JOIN batches b ON b.id = j.batch_id LEFT JOIN checkpoints c ON c.id = j.ckpt_id "
/* 1 when the rows a job's outcome is rebuilt from fail their check (store.h: lh_store_job_info). */
#define JOB_DAMAGED                                                                                           \
  "CASE j.state WHEN 'done' THEN NOT EXISTS(SELECT 1 FROM results r WHERE r.job_id = j.id AND "              \
  LH_STORE__RESULT_OK("r") ") WHEN 'failed' THEN NOT coalesce(" LH_STORE__ERROR_OK("j") ", 0) ELSE 0 END"

static lh_status fill_info(lh_store *s, sqlite3_stmt *q, int64_t now, lh_store_job_info *in) {
  memset(in, 0, sizeof *in);
  in->id = sqlite3_column_int64(q, 0);
  in->batch_id = sqlite3_column_int64(q, 1);
  in->batch = lh_store__col_strdup(q, 2);
  in->custom_id = lh_store__col_strdup(q, 3);
  in->group_key = lh_store__col_strdup(q, 4);
  in->model_id = lh_store__col_strdup(q, 5);
  in->request_json = lh_store__col_strdup(q, 6);
  in->state = state_from_text(sqlite3_column_text(q, 7));
  in->attempts = sqlite3_column_int(q, 8);
  in->created_ms = sqlite3_column_int64(q, 9);
  in->started_ms = sqlite3_column_int64(q, 10);
  in->finished_ms = sqlite3_column_int64(q, 11);
  in->heartbeat_ms = sqlite3_column_int64(q, 12);
  in->error = lh_store__col_strdup(q, 13);
  if (in->state == LH_JOB_RUNNING) {
    const char *name = (const char *)sqlite3_column_text(q, 14);
    char buf[320];
    snprintf(buf, sizeof buf, "%s %lld", name ? name : "?", (long long)sqlite3_column_int64(q, 15));
    in->owner = strdup(buf);
    in->owner_alive = lh_store__owner_alive(s, (const char *)sqlite3_column_text(q, 16), sqlite3_column_int64(q, 15),
                                            sqlite3_column_int64(q, 17), in->heartbeat_ms, now);
  }
  in->ckpt_id = sqlite3_column_int64(q, 18);
  in->tokens_done = sqlite3_column_int64(q, 19);
  in->tokens_total = sqlite3_column_int64(q, 20);
  in->has_result = sqlite3_column_int(q, 21);
  in->identity = lh_store__col_strdup(q, 22);
  in->damaged = sqlite3_column_int(q, 23);
  in->updated_ms = sqlite3_column_int64(q, 24);
  if (!in->batch || !in->custom_id || !in->request_json) return LH_ENOMEM;
  return LH_OK;
}

void lh_store_job_info_clear(lh_store_job_info *in) {
  if (!in) return;
  free(in->batch);
  free(in->custom_id);
  free(in->group_key);
  free(in->model_id);
  free(in->request_json);
  free(in->error);
  free(in->owner);
  free(in->identity);
  memset(in, 0, sizeof *in);
}

void lh_store_job_list_free(lh_store_job_info *list, size_t n) {
  if (!list) return;
  for (size_t i = 0; i < n; i++) lh_store_job_info_clear(&list[i]);
  free(list);
}

lh_status lh_store_job_get(lh_store *s, int64_t job_id, lh_store_job_info *info, lh_error *err) {
  memset(info, 0, sizeof *info);
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q, JOB_INFO_SQL(JOB_DAMAGED) "WHERE j.id = ?1", SQL_ARGS(SQL_INT(job_id)),
                               "reading job %lld", (long long)job_id);
  if (st == LH_ENOTFOUND) return lh_error_set(err, LH_ENOTFOUND, "%s: no job %lld", s->path, (long long)job_id);
  if (st) return st;
  if (fill_info(s, q, lh_store__now_ms(), info)) {
    lh_store_job_info_clear(info);
    st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading job %lld", s->path, (long long)job_id);
  }
  sqlite3_finalize(q);
  return st;
}

lh_status lh_store_job_list(lh_store *s, int64_t batch_id, lh_store_job_info **out, size_t *n, lh_error *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *q;
  lh_status st = lh_store__query(s, err, &q, JOB_INFO_SQL("-1") "WHERE ?1 = 0 OR j.batch_id = ?1 ORDER BY j.id",
                                 SQL_ARGS(SQL_INT(batch_id)));
  if (st) return st;
  int64_t now = lh_store__now_ms();
  size_t cap = 0;
  lh_store_job_info *v = NULL;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    if (*n == cap) {
      size_t nc = cap ? cap * 2 : 16;
      lh_store_job_info *nv = realloc(v, nc * sizeof *v);
      if (!nv) {
        st = LH_ENOMEM;
        break;
      }
      v = nv, cap = nc;
    }
    if (fill_info(s, q, now, &v[*n])) {
      lh_store_job_info_clear(&v[*n]);
      st = LH_ENOMEM;
      break;
    }
    (*n)++;
  }
  sqlite3_finalize(q);
  if (st == LH_ENOMEM) st = lh_error_set(err, LH_ENOMEM, "%s: out of memory listing jobs", s->path);
  else if (rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "listing jobs");
  if (st) {
    lh_store_job_list_free(v, *n);
    *n = 0;
    return st;
  }
  *out = v;
  return LH_OK;
}

lh_status lh_store_job_result(lh_store *s, int64_t job_id, lh_buf *json, lh_buf *blob, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__row(s, err, &q,
                               "SELECT r.json, r.blob, r.crc32c, j.custom_id FROM results r "
                               "LEFT JOIN jobs j ON j.id = r.job_id WHERE r.job_id = ?1",
                               SQL_ARGS(SQL_INT(job_id)), "reading the result of job %lld", (long long)job_id);
  if (st == LH_ENOTFOUND)
    return lh_error_set(err, LH_ENOTFOUND, "%s: job %lld has no result", s->path, (long long)job_id);
  if (st) return st;
  const void *t = sqlite3_column_text(q, 0);
  size_t tn = (size_t)sqlite3_column_bytes(q, 0);
  const void *b = sqlite3_column_blob(q, 1);
  size_t bn = (size_t)sqlite3_column_bytes(q, 1);
  if ((uint32_t)sqlite3_column_int64(q, 2) != lh_store__result_crc(job_id, t, tn, b, bn) ||
      sqlite3_column_int64(q, 2) >> 32) {
    const char *cid = (const char *)sqlite3_column_text(q, 3);
    st = lh_error_set(err, LH_ECORRUPT,
                      "%s: the stored result of job %lld ('%s') fails its checksum (CRC-32C): the row was damaged "
                      "after it was written; requeue the job (longhaul store verify --repair) and run again to "
                      "recompute it",
                      s->path, (long long)job_id, cid ? cid : "?");
  }
  if (!st && json && (lh_buf_append(json, t, tn) || lh_buf_append(json, "", 0)))
    st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading a result", s->path);
  if (!st && blob && b && lh_buf_append(blob, b, bn))
    st = lh_error_set(err, LH_ENOMEM, "%s: out of memory reading a result", s->path);
  sqlite3_finalize(q);
  return st;
}

/* ---- documents ----------------------------------------------------------------------------- */

lh_status lh_store_job_set_documents(lh_store *s, int64_t job_id, const lh_store_doc *docs, size_t n, lh_error *err) {
  lh_status st = lh_store__begin(s, "recording documents", err);
  if (st) return st;
  sqlite3_stmt *q = NULL;
  st = lh_store__run(s, err, "DELETE FROM documents WHERE job_id = ?1", SQL_ARGS(SQL_INT(job_id)),
                     "recording documents of job %lld", (long long)job_id);
  if (!st)
    st = lh_store__prepare(s,
                           "INSERT INTO documents(job_id, seq, path, bytes, sha256, tok_start, tok_end, meta) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                           &q, err);
  for (size_t i = 0; i < n && !st; i++) {
    const lh_store_doc *d = &docs[i];
    if (!d->path) {
      st = lh_error_set(err, LH_EINVAL, "%s: job %lld: document %zu has no path", s->path, (long long)job_id, i);
      break;
    }
    sqlite3_reset(q);
    lh_store__bind(q, SQL_ARGS(SQL_INT(job_id), SQL_INT(i), SQL_TEXT(d->path), SQL_INT(d->bytes),
                               SQL_TEXT(d->sha256_hex), SQL_INT(d->tok_start), SQL_INT(d->tok_end),
                               SQL_TEXT(d->meta_json)));
    int rc = sqlite3_step(q);
    if (rc != SQLITE_DONE)
      st = (rc & 0xff) == SQLITE_CONSTRAINT
               ? lh_error_set(err, LH_ENOTFOUND, "%s: no job %lld to record documents for", s->path, (long long)job_id)
               : lh_store__sql_error(s, rc, err, "recording documents of job %lld", (long long)job_id);
  }
  sqlite3_finalize(q);
  return lh_store__end(s, st, "recording documents", err);
}

lh_status lh_store_job_documents(lh_store *s, int64_t job_id, lh_store_doc_cb cb, void *user, lh_error *err) {
  sqlite3_stmt *q;
  lh_status st = lh_store__query(
      s, err, &q, "SELECT path, bytes, sha256, tok_start, tok_end, meta FROM documents WHERE job_id = ?1 ORDER BY seq",
      SQL_ARGS(SQL_INT(job_id)));
  if (st) return st;
  int rc;
  while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
    lh_store_doc d = {(const char *)sqlite3_column_text(q, 0), sqlite3_column_int64(q, 1),
                      (const char *)sqlite3_column_text(q, 2), sqlite3_column_int64(q, 3),
                      sqlite3_column_int64(q, 4), (const char *)sqlite3_column_text(q, 5)};
    if ((st = cb(user, &d, err))) break;
  }
  sqlite3_finalize(q);
  if (!st && rc != SQLITE_DONE) st = lh_store__sql_error(s, rc, err, "reading documents of job %lld", (long long)job_id);
  return st;
}
