/* comm.c — the world of ranks over MPI (see comm.h), or its absence in a build without MPI.
 *
 * MPI counts are ints, so every call moves at most COMM_PIECE elements at a time. The ordered sums
 * gather each piece from every rank (R x piece of scratch) and add the rows in rank order:
 * MPI_Allreduce would be faster for big buffers but does not promise an order, and the point of
 * the CPU ranks is to check the partitioning bit for bit against the in-process simulation.
 */
#define _POSIX_C_SOURCE 200809L
#include "engine/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LH_HAVE_MPI
#include <mpi.h>
#endif

static lh_comm *g_world;

lh_comm *lh_comm_world(void) { return g_world; }

/* Set by the launchers we know of in every process they start. */
static int launched_by_mpi(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

#ifdef LH_HAVE_MPI

#define COMM_PIECE (1 << 20)

struct lh_comm {
  MPI_Comm mc;
  int rank, size, local_size, local_rank;
  void *scratch; /* size x COMM_PIECE x 8 bytes, for the ordered sums */
};

static lh_status mpi_fail(lh_error *err, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
  return lh_error_set(err, LH_EBACKEND, "ranks: %s failed: %s", what, msg);
}

lh_status lh_comm_init(int *argc, char ***argv, lh_comm **world, lh_error *err) {
  *world = NULL;
  if (!launched_by_mpi()) return LH_OK;
  int rc = MPI_Init(argc, argv);
  if (rc != MPI_SUCCESS) return lh_error_set(err, LH_EBACKEND, "ranks: MPI_Init failed (%d)", rc);
  lh_comm *c = calloc(1, sizeof *c);
  if (!c) return lh_error_set(err, LH_ENOMEM, "ranks: out of memory");
  c->mc = MPI_COMM_WORLD;
  MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN);
  MPI_Comm_rank(c->mc, &c->rank);
  MPI_Comm_size(c->mc, &c->size);
  MPI_Comm local;
  c->local_size = 1;
  if (MPI_Comm_split_type(c->mc, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_free(&local);
  }
  *world = g_world = c;
  return LH_OK;
}

void lh_comm_finish(lh_comm *c) {
  if (!c) return;
  free(c->scratch);
  if (g_world == c) g_world = NULL;
  free(c);
  MPI_Finalize();
}

int lh_comm_rank(const lh_comm *c) { return c ? c->rank : 0; }
int lh_comm_size(const lh_comm *c) { return c ? c->size : 1; }
int lh_comm_local_size(const lh_comm *c) { return c ? c->local_size : 1; }
int lh_comm_local_rank(const lh_comm *c) { return c ? c->local_rank : 0; }

lh_status lh_comm_bcast(lh_comm *c, void *buf, size_t bytes, int root, lh_error *err) {
  for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, c->mc);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "broadcast");
  }
  return LH_OK;
}

static lh_status ordered_sum(lh_comm *c, void *buf, int64_t n, size_t es, lh_error *err) {
  if (!c->scratch && !(c->scratch = malloc((size_t)c->size * COMM_PIECE * 8)))
    return lh_error_set(err, LH_ENOMEM, "ranks: out of memory for the sum buffer");
  MPI_Datatype t = es == 4 ? MPI_FLOAT : MPI_DOUBLE;
  for (int64_t off = 0; off < n; off += COMM_PIECE) {
    int64_t k = n - off < COMM_PIECE ? n - off : COMM_PIECE;
    char *mine = (char *)buf + (size_t)off * es;
    int rc = MPI_Allgather(mine, (int)k, t, c->scratch, (int)k, t, c->mc);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "sum (allgather)");
    if (es == 4) {
      float *o = (float *)mine;
      const float *g = c->scratch;
      memcpy(o, g, (size_t)k * es);
      for (int r = 1; r < c->size; r++)
        for (int64_t i = 0; i < k; i++) o[i] += g[(int64_t)r * k + i];
    } else {
      double *o = (double *)mine;
      const double *g = c->scratch;
      memcpy(o, g, (size_t)k * es);
      for (int r = 1; r < c->size; r++)
        for (int64_t i = 0; i < k; i++) o[i] += g[(int64_t)r * k + i];
    }
  }
  return LH_OK;
}

lh_status lh_comm_sum_f32(lh_comm *c, float *buf, int64_t n, lh_error *err) { return ordered_sum(c, buf, n, 4, err); }
lh_status lh_comm_sum_f64(lh_comm *c, double *buf, int64_t n, lh_error *err) { return ordered_sum(c, buf, n, 8, err); }

lh_status lh_comm_gather(lh_comm *c, const void *mine, size_t bytes, void *all, lh_error *err) {
  /* in pieces of at most 1 GiB per rank: piece k of every rank lands at rank * bytes + offset */
  const size_t piece = (size_t)1 << 30;
  for (size_t off = 0; off < bytes; off += piece) {
    size_t n = bytes - off < piece ? bytes - off : piece;
    MPI_Datatype row; /* n bytes at a stride of `bytes`: one rank's piece within `all` */
    MPI_Datatype slot;
    if (MPI_Type_contiguous((int)n, MPI_BYTE, &row) != MPI_SUCCESS ||
        MPI_Type_create_resized(row, 0, (MPI_Aint)bytes, &slot) != MPI_SUCCESS || MPI_Type_commit(&slot) != MPI_SUCCESS)
      return lh_error_set(err, LH_EBACKEND, "ranks: could not describe a gather of %zu bytes", bytes);
    int rc = MPI_Gather((const char *)mine + off, (int)n, MPI_BYTE, c->rank == 0 ? (char *)all + off : NULL, 1, slot, 0,
                        c->mc);
    MPI_Type_free(&slot);
    MPI_Type_free(&row);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "gather of a state");
  }
  return LH_OK;
}

lh_status lh_comm_first_failed(lh_comm *c, int failed, int *first, lh_error *err) {
  int mine = failed ? c->rank : c->size, low = c->size;
  int rc = MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, c->mc);
  if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "status exchange");
  *first = low < c->size ? low : -1;
  return LH_OK;
}

void lh_comm_abort(lh_comm *c, int code) { MPI_Abort(c ? c->mc : MPI_COMM_WORLD, code); }

#else /* no MPI in this build */

struct lh_comm {
  int unused;
};

lh_status lh_comm_init(int *argc, char ***argv, lh_comm **world, lh_error *err) {
  (void)argc, (void)argv;
  *world = NULL;
  const char *n = getenv("OMPI_COMM_WORLD_SIZE");
  if (!n) n = getenv("PMI_SIZE");
  if (launched_by_mpi() && (!n || atoi(n) != 1))
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "started by an MPI launcher, but this build has no MPI: install libopenmpi-dev "
                        "(Debian) and rebuild to run as several ranks");
  return LH_OK;
}
void lh_comm_finish(lh_comm *c) { (void)c; }
int lh_comm_rank(const lh_comm *c) { return 0; }
int lh_comm_size(const lh_comm *c) { return 1; }
int lh_comm_local_size(const lh_comm *c) { return 1; }
int lh_comm_local_rank(const lh_comm *c) { return 0; }
static lh_status no_mpi(lh_error *err) { return lh_error_set(err, LH_EUNSUPPORTED, "ranks: this build has no MPI"); }
lh_status lh_comm_bcast(lh_comm *c, void *buf, size_t bytes, int root, lh_error *err) { return no_mpi(err); }
lh_status lh_comm_sum_f32(lh_comm *c, float *buf, int64_t n, lh_error *err) { return no_mpi(err); }
lh_status lh_comm_sum_f64(lh_comm *c, double *buf, int64_t n, lh_error *err) { return no_mpi(err); }
lh_status lh_comm_gather(lh_comm *c, const void *mine, size_t bytes, void *all, lh_error *err) { return no_mpi(err); }
lh_status lh_comm_first_failed(lh_comm *c, int failed, int *first, lh_error *err) { return no_mpi(err); }
void lh_comm_abort(lh_comm *c, int code) { abort(); }

#endif
