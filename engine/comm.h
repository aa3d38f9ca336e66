/* comm.h — the ranks of a distributed run (issue 10): one process per rank.
 *
 * A longhaul binary started by `mpirun -np R` (Open MPI, or any launcher that sets PMI_SIZE /
 * PMIX_RANK) is a world of R ranks. So are R processes started any other way (by hand, by a
 * scheduler, on several hosts) with LH_WORLD_SIZE=R, LH_RANK=r and LH_RENDEZVOUS=FILE, a path
 * every rank can reach: rank 0 writes its address there and the others connect to it over TCP
 * (engine/comm_tcp.h; LH_RENDEZVOUS_HOST, _PORT and _TIMEOUT adjust it). Rank 0 is the program: it parses the command line, ingests,
 * talks to the store and writes results. Ranks 1..R-1 only serve rank 0's engine calls
 * (lh_rank_serve): every model rank 0 opens is opened on every rank, each rank computing its
 * share of the heads and experts (engine/ranks.c says which), and the engine on rank 0 tells the
 * others each call before it makes it, so all ranks issue the same backend operations.
 *
 * The transport is MPI or TCP for host buffers (the CPU backend; the CUDA backend uses NCCL where
 * it can, and this where it cannot: engine/backends/cuda/tp.cu). Sums are deterministic: every
 * rank's buffer is gathered and added in rank order, so R processes give the same bits as the CPU
 * backend's tp_ranks = R simulation in one process, over either transport. A build without MPI
 * (CMake found none) refuses to start under mpirun with a message naming the package and the
 * variables; the TCP world needs nothing beyond the C library.
 */
#ifndef LH_ENGINE_COMM_H
#define LH_ENGINE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_comm lh_comm;

/* Join the world when this process was started by an MPI launcher or with LH_WORLD_SIZE; *world
 * is NULL otherwise (a plain run). Call once, first thing in main. */
lh_status lh_comm_init(int *argc, char ***argv, lh_comm **world, lh_error *err);
/* Leave the world (MPI_Finalize, or close the TCP links); accepts NULL. */
void lh_comm_finish(lh_comm *c);
/* The world lh_comm_init made, or NULL. lh_model_default_params puts it in its params. */
lh_comm *lh_comm_world(void);

int lh_comm_rank(const lh_comm *c);
int lh_comm_size(const lh_comm *c);
/* Ranks of the world on this host (for splitting the cores between them), and this rank's index
 * among them (for picking its GPU: local rank r takes device r). */
int lh_comm_local_size(const lh_comm *c);
int lh_comm_local_rank(const lh_comm *c);

/* buf on every rank = rank root's buf. */
lh_status lh_comm_bcast(lh_comm *c, void *buf, size_t bytes, int root, lh_error *err);
/* buf on every rank = the sum over ranks of buf, added in rank order (same bits on every rank and
 * in every run). */
lh_status lh_comm_sum_f32(lh_comm *c, float *buf, int64_t n, lh_error *err);
lh_status lh_comm_sum_f64(lh_comm *c, double *buf, int64_t n, lh_error *err);
/* all (rank 0 only; size x bytes) = every rank's `mine` (bytes each), in rank order. How a state's
 * shares reach rank 0 for a checkpoint. */
lh_status lh_comm_gather(lh_comm *c, const void *mine, size_t bytes, void *all, lh_error *err);
/* Every rank passes its status; every rank gets the lowest rank that failed, or -1. */
lh_status lh_comm_first_failed(lh_comm *c, int failed, int *first, lh_error *err);
/* End every rank at once (a rank found the ranks out of step). */
void lh_comm_abort(lh_comm *c, int code);

/* Ranks 1..R-1 of a world: serve rank 0's engine calls (engine/ranks.c) until it releases them.
 * Returns the process's exit status. */
int lh_rank_serve(lh_comm *c);
/* Rank 0, once its program is done: let the other ranks return from lh_rank_serve. */
void lh_rank_release(lh_comm *c);

#ifdef __cplusplus
}
#endif
#endif
