/* pool.c — a small fixed pool of threads that runs numbered tasks (see ops.h).
 *
 * The caller takes part as worker 0; the others sleep on a condition variable between runs.
 * Tasks are handed out through one atomic counter, so which thread runs a task depends on timing,
 * but what a task computes never does: every kernel defines its tasks from the problem's shape
 * and writes each output from exactly one task. That is the whole determinism argument, and the
 * reason nothing here reduces across tasks.
 *
 * Invariants: one run at a time (the engine calls a backend from one thread); a task never calls
 * lh_pool_run; lh_pool_free joins every thread it started.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <cblas.h>

#include "kernels/cpu/ops.h"

struct lh_pool {
  int n;                      /* threads, the caller included */
  pthread_t *th;
  int started;                /* worker threads actually running */
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  uint64_t gen;               /* run counter: a worker starts a run when it sees a new value */
  int stop;
  int busy;                   /* workers that have not finished the current run */
  lh_task_fn fn;
  void *ctx;
  int64_t ntasks;
  atomic_int_fast64_t next;
};

typedef struct worker_arg {
  lh_pool *p;
  int id;
} worker_arg;

static worker_arg *worker_args(lh_pool *p) { return (worker_arg *)(p->th + p->n); }

static void run_tasks(lh_pool *p, int id) {
  int64_t t;
  while ((t = atomic_fetch_add(&p->next, 1)) < p->ntasks) p->fn(p->ctx, t, id);
}

static void *worker_main(void *arg) {
  worker_arg *a = arg;
  lh_pool *p = a->p;
  uint64_t seen = 0;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    while (!p->stop && p->gen == seen) pthread_cond_wait(&p->wake, &p->mu);
    if (p->stop) break;
    seen = p->gen;
    pthread_mutex_unlock(&p->mu);
    run_tasks(p, a->id);
    pthread_mutex_lock(&p->mu);
    if (--p->busy == 0) pthread_cond_signal(&p->done);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

lh_pool *lh_pool_new(int nthreads) {
  if (nthreads < 1) nthreads = 1;
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  lh_pool *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = nthreads;
  /* one allocation: thread ids, then the workers' arguments */
  p->th = calloc((size_t)nthreads, sizeof(pthread_t) + sizeof(worker_arg));
  if (!p->th) {
    free(p);
    return NULL;
  }
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->wake, NULL);
  pthread_cond_init(&p->done, NULL);
  atomic_init(&p->next, 0);
  for (int i = 1; i < nthreads; i++) {
    worker_arg *a = &worker_args(p)[i];
    a->p = p;
    a->id = i;
    if (pthread_create(&p->th[i], NULL, worker_main, a) != 0) {
      lh_pool_free(p);
      return NULL;
    }
    p->started = i;
  }
  return p;
}

void lh_pool_free(lh_pool *p) {
  if (!p) return;
  pthread_mutex_lock(&p->mu);
  p->stop = 1;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  for (int i = 1; i <= p->started; i++) pthread_join(p->th[i], NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->wake);
  pthread_cond_destroy(&p->done);
  free(p->th);
  free(p);
}

int lh_pool_threads(const lh_pool *p) { return p ? p->n : 1; }

void lh_pool_run(lh_pool *p, int64_t ntasks, lh_task_fn fn, void *ctx) {
  if (ntasks <= 0) return;
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  if (!p || p->n == 1 || ntasks == 1) {
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
    return;
  }
  pthread_mutex_lock(&p->mu);
  p->fn = fn;
  p->ctx = ctx;
  p->ntasks = ntasks;
  atomic_store(&p->next, 0);
  p->busy = p->n - 1;
  p->gen++;
  pthread_cond_broadcast(&p->wake);
  pthread_mutex_unlock(&p->mu);
  run_tasks(p, 0);
  pthread_mutex_lock(&p->mu);
  while (p->busy > 0) pthread_cond_wait(&p->done, &p->mu);
  pthread_mutex_unlock(&p->mu);
}
