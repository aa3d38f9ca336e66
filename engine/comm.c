/* comm.c — the world of ranks (see comm.h): over MPI when an MPI launcher started the process,
 * over TCP (engine/comm_tcp.c) when LH_WORLD_SIZE / LH_RANK / LH_RENDEZVOUS say so.
 *
 * MPI counts are ints, so every MPI call moves at most COMM_PIECE elements at a time. The ordered
 * sums gather each piece from every rank (R x piece of scratch) and add the rows in rank order:
 * MPI_Allreduce would be faster for big buffers but does not promise an order, and the point of
 * the CPU ranks is to check the partitioning bit for bit against the in-process simulation.
 *
 * Over TCP every rank is linked to rank 0 only (a star): rank 0 receives, combines and sends back
 * (sums added in the same rank order as over MPI, so both transports give the same bits), and a
 * broadcast from another root goes through rank 0. That is plenty for the CPU ranks and for
 * handing NCCL its unique id; the GPUs' own traffic goes through NCCL.
 */
#define _POSIX_C_SOURCE 200809L
#include "engine/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm_tcp.h"

#ifdef LH_HAVE_MPI
#include <mpi.h>
#endif

#define COMM_PIECE (1 << 20)

typedef enum { COMM_MPI, COMM_TCP } comm_kind;

struct lh_comm {
  comm_kind kind;
  int rank, size, local_size, local_rank;
  void *scratch; /* size x COMM_PIECE x 8 bytes, for the ordered sums */
#ifdef LH_HAVE_MPI
  MPI_Comm mc;
#endif
  lh_tcp *tcp;
};

static lh_comm *g_world;

lh_comm *lh_comm_world(void) { return g_world; }

/* Set by the launchers we know of in every process they start. */
static int launched_by_mpi(void) {
  static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

static int parse_int(const char *s, int *out) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || !*s || *end || v < 0 || v > 1 << 20) return -1;
  *out = (int)v;
  return 0;
}

/* LH_WORLD_SIZE, LH_RANK, LH_RENDEZVOUS (a file every rank can reach), LH_RENDEZVOUS_TIMEOUT */
static lh_status tcp_init(lh_comm **world, lh_error *err) {
  int size, rank;
  const char *path = getenv("LH_RENDEZVOUS");
  if (parse_int(getenv("LH_WORLD_SIZE"), &size) || size < 1)
    return lh_error_set(err, LH_EINVAL, "ranks: LH_WORLD_SIZE must be a number of ranks (1 or more), not '%s'",
                        getenv("LH_WORLD_SIZE"));
  if (parse_int(getenv("LH_RANK"), &rank) || rank >= size)
    return lh_error_set(err, LH_EINVAL, "ranks: LH_RANK must be 0..%d for LH_WORLD_SIZE=%d, not '%s'", size - 1, size,
                        getenv("LH_RANK") ? getenv("LH_RANK") : "(unset)");
  if (size > 1 && (!path || !*path))
    return lh_error_set(err, LH_EINVAL,
                        "ranks: LH_WORLD_SIZE=%d needs LH_RENDEZVOUS, a file path every rank can reach (rank 0 "
                        "writes its address there)",
                        size);
  double timeout = 300;
  const char *ts = getenv("LH_RENDEZVOUS_TIMEOUT");
  if (ts && !(timeout = atof(ts)))
    return lh_error_set(err, LH_EINVAL, "ranks: LH_RENDEZVOUS_TIMEOUT must be seconds, not '%s'", ts);
  lh_comm *c = calloc(1, sizeof *c);
  if (!c) return lh_error_set(err, LH_ENOMEM, "ranks: out of memory");
  c->kind = COMM_TCP, c->rank = rank, c->size = size, c->local_size = 1;
  if (size > 1) {
    lh_status st = lh_tcp_join(rank, size, path, timeout, &c->tcp, &c->local_rank, &c->local_size, err);
    if (st) {
      free(c);
      return st;
    }
  }
  *world = g_world = c;
  return LH_OK;
}

static lh_status tcp_bcast(lh_comm *c, void *buf, size_t bytes, int root, lh_error *err) {
  lh_status st = LH_OK;
  if (c->rank == 0) {
    if (root != 0) st = lh_tcp_recv(c->tcp, root, 1, buf, bytes, err);
    for (int r = 1; r < c->size && !st; r++)
      if (r != root) st = lh_tcp_send(c->tcp, r, 1, buf, bytes, err);
  } else if (c->rank == root) {
    st = lh_tcp_send(c->tcp, 0, 1, buf, bytes, err);
  } else {
    st = lh_tcp_recv(c->tcp, 0, 1, buf, bytes, err);
  }
  return st;
}

/* o = rows[0] + rows[1] + ... in rank order (rows: size x k elements of es bytes) */
static void add_rows(void *o, const void *rows, int size, int64_t k, size_t es) {
  memcpy(o, rows, (size_t)k * es);
  if (es == 4) {
    float *y = o;
    const float *g = rows;
    for (int r = 1; r < size; r++)
      for (int64_t i = 0; i < k; i++) y[i] += g[(int64_t)r * k + i];
  } else {
    double *y = o;
    const double *g = rows;
    for (int r = 1; r < size; r++)
      for (int64_t i = 0; i < k; i++) y[i] += g[(int64_t)r * k + i];
  }
}

static lh_status tcp_sum_piece(lh_comm *c, void *mine, int64_t k, size_t es, lh_error *err) {
  const size_t bytes = (size_t)k * es;
  lh_status st = LH_OK;
  if (c->rank == 0) {
    memcpy(c->scratch, mine, bytes);
    for (int r = 1; r < c->size && !st; r++) st = lh_tcp_recv(c->tcp, r, 2, (char *)c->scratch + r * bytes, bytes, err);
    if (!st) add_rows(mine, c->scratch, c->size, k, es);
    for (int r = 1; r < c->size && !st; r++) st = lh_tcp_send(c->tcp, r, 3, mine, bytes, err);
  } else {
    st = lh_tcp_send(c->tcp, 0, 2, mine, bytes, err);
    if (!st) st = lh_tcp_recv(c->tcp, 0, 3, mine, bytes, err);
  }
  return st;
}

#ifdef LH_HAVE_MPI
static lh_status mpi_fail(lh_error *err, int rc, const char *what) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error %d", rc);
  return lh_error_set(err, LH_EBACKEND, "ranks: %s failed: %s", what, msg);
}

static lh_status mpi_init(int *argc, char ***argv, lh_comm **world, lh_error *err) {
  int rc = MPI_Init(argc, argv);
  if (rc != MPI_SUCCESS) return lh_error_set(err, LH_EBACKEND, "ranks: MPI_Init failed (%d)", rc);
  lh_comm *c = calloc(1, sizeof *c);
  if (!c) return lh_error_set(err, LH_ENOMEM, "ranks: out of memory");
  c->kind = COMM_MPI;
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

static lh_status mpi_gather(lh_comm *c, const void *mine, size_t bytes, void *all, lh_error *err) {
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
#endif

lh_status lh_comm_init(int *argc, char ***argv, lh_comm **world, lh_error *err) {
  *world = NULL;
  if (launched_by_mpi()) {
#ifdef LH_HAVE_MPI
    return mpi_init(argc, argv, world, err);
#else
    (void)argc, (void)argv;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!n) n = getenv("PMI_SIZE");
    if (!n || atoi(n) != 1)
      return lh_error_set(err, LH_EUNSUPPORTED,
                          "started by an MPI launcher, but this build has no MPI: install libopenmpi-dev (Debian) "
                          "and rebuild, or start the ranks with LH_WORLD_SIZE, LH_RANK and LH_RENDEZVOUS "
                          "(docs/multi-gpu.md)");
    return LH_OK;
#endif
  }
  (void)argc, (void)argv;
  if (getenv("LH_WORLD_SIZE")) return tcp_init(world, err);
  return LH_OK;
}

void lh_comm_finish(lh_comm *c) {
  if (!c) return;
  const comm_kind kind = c->kind;
  free(c->scratch);
  lh_tcp_leave(c->tcp);
  if (g_world == c) g_world = NULL;
  free(c);
#ifdef LH_HAVE_MPI
  if (kind == COMM_MPI) MPI_Finalize();
#else
  (void)kind;
#endif
}

int lh_comm_rank(const lh_comm *c) { return c ? c->rank : 0; }
int lh_comm_size(const lh_comm *c) { return c ? c->size : 1; }
int lh_comm_local_size(const lh_comm *c) { return c ? c->local_size : 1; }
int lh_comm_local_rank(const lh_comm *c) { return c ? c->local_rank : 0; }

lh_status lh_comm_bcast(lh_comm *c, void *buf, size_t bytes, int root, lh_error *err) {
  if (c->size == 1) return LH_OK;
  if (c->kind == COMM_TCP) return tcp_bcast(c, buf, bytes, root, err);
#ifdef LH_HAVE_MPI
  for (size_t off = 0; off < bytes; off += (size_t)1 << 30) {
    size_t n = bytes - off < ((size_t)1 << 30) ? bytes - off : (size_t)1 << 30;
    int rc = MPI_Bcast((char *)buf + off, (int)n, MPI_BYTE, root, c->mc);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "broadcast");
  }
#endif
  return LH_OK;
}

static lh_status ordered_sum(lh_comm *c, void *buf, int64_t n, size_t es, lh_error *err) {
  if (c->size == 1) return LH_OK;
  if (!c->scratch && !(c->scratch = malloc((size_t)c->size * COMM_PIECE * 8)))
    return lh_error_set(err, LH_ENOMEM, "ranks: out of memory for the sum buffer");
  for (int64_t off = 0; off < n; off += COMM_PIECE) {
    int64_t k = n - off < COMM_PIECE ? n - off : COMM_PIECE;
    char *mine = (char *)buf + (size_t)off * es;
    if (c->kind == COMM_TCP) {
      lh_status st = tcp_sum_piece(c, mine, k, es, err);
      if (st) return st;
      continue;
    }
#ifdef LH_HAVE_MPI
    MPI_Datatype t = es == 4 ? MPI_FLOAT : MPI_DOUBLE;
    int rc = MPI_Allgather(mine, (int)k, t, c->scratch, (int)k, t, c->mc);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "sum (allgather)");
    add_rows(mine, c->scratch, c->size, k, es);
#endif
  }
  return LH_OK;
}

lh_status lh_comm_sum_f32(lh_comm *c, float *buf, int64_t n, lh_error *err) { return ordered_sum(c, buf, n, 4, err); }
lh_status lh_comm_sum_f64(lh_comm *c, double *buf, int64_t n, lh_error *err) { return ordered_sum(c, buf, n, 8, err); }

lh_status lh_comm_gather(lh_comm *c, const void *mine, size_t bytes, void *all, lh_error *err) {
  if (c->kind == COMM_MPI && c->size > 1) {
#ifdef LH_HAVE_MPI
    return mpi_gather(c, mine, bytes, all, err);
#endif
  }
  if (c->rank != 0) return lh_tcp_send(c->tcp, 0, 4, mine, bytes, err);
  memcpy(all, mine, bytes);
  for (int r = 1; r < c->size; r++) {
    lh_status st = lh_tcp_recv(c->tcp, r, 4, (char *)all + (size_t)r * bytes, bytes, err);
    if (st) return st;
  }
  return LH_OK;
}

lh_status lh_comm_first_failed(lh_comm *c, int failed, int *first, lh_error *err) {
  int mine = failed ? c->rank : c->size, low = mine;
  if (c->size > 1 && c->kind == COMM_TCP) {
    lh_status st = LH_OK;
    if (c->rank == 0) {
      for (int r = 1; r < c->size && !st; r++) {
        int theirs;
        st = lh_tcp_recv(c->tcp, r, 5, &theirs, sizeof theirs, err);
        if (!st && theirs < low) low = theirs;
      }
      for (int r = 1; r < c->size && !st; r++) st = lh_tcp_send(c->tcp, r, 6, &low, sizeof low, err);
    } else {
      st = lh_tcp_send(c->tcp, 0, 5, &mine, sizeof mine, err);
      if (!st) st = lh_tcp_recv(c->tcp, 0, 6, &low, sizeof low, err);
    }
    if (st) return st;
  }
#ifdef LH_HAVE_MPI
  if (c->size > 1 && c->kind == COMM_MPI) {
    int rc = MPI_Allreduce(&mine, &low, 1, MPI_INT, MPI_MIN, c->mc);
    if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "status exchange");
  }
#endif
  *first = low < c->size ? low : -1;
  return LH_OK;
}

/* Over TCP the others see this rank's connections close, fail their next call and end too
 * (engine/ranks.c); rank 0's end closes every link, so a killed rank 0 ends the world as well. */
void lh_comm_abort(lh_comm *c, int code) {
#ifdef LH_HAVE_MPI
  if (!c || c->kind == COMM_MPI) MPI_Abort(c ? c->mc : MPI_COMM_WORLD, code);
#endif
  fflush(NULL);
  _exit(code);
}
