/* nccl_world.c — NCCL across the world of ranks (issue 10): one process per GPU.
 *
 *     build/tests/gpu/nccl_world                 a world of one rank on GPU 0
 *     mpirun -np N build/tests/gpu/nccl_world    N ranks; on each host, local rank r on GPU r
 *     tests/engine/tcp_world.sh N build/tests/gpu/nccl_world    the same without MPI (a TCP world)
 *
 * Rank 0 makes an ncclUniqueId and the MPI world (engine/comm.h) carries it to the others, which
 * is how the CUDA backend's ranks will make their communicator. Then:
 *  - an fp32 all-reduce of rank + 1 in every element must give N (N + 1) / 2 on every rank,
 *    exactly (small integers add exactly in any order);
 *  - a bf16 all-reduce of [65536 x 6144] (805 MB: one out_proj or MoE partial output of a 64K-row
 *    chunk of the real-width slice) is timed: algorithm bandwidth (bytes / time) and bus bandwidth
 *    (algbw x 2 (N - 1) / N, what a ring moves per rank), printed by rank 0 with the compute the
 *    all-reduce would hide behind (one layer of a 64K chunk: about 400 ms on one H200, NOTES v4).
 * Exits 77 (skipped) without a CUDA device. With one rank there is nothing to move, so the bf16
 * all-reduce is not timed.
 * Run so far: on one H200 as a world of one rank, both without mpirun and under `mpirun -np 1`
 * (2026-12-01, NCCL 2.28.3 on the box): the sum exact. Several ranks: never run (no multi-GPU kind
 * lent).
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm.h"
#include "util/fs.h"

static int g_rank;

#define CK(call, what)                                                                             \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, cudaGetErrorString(e_));                  \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)
#define NK(call, what)                                                                             \
  do {                                                                                             \
    ncclResult_t r_ = (call);                                                                      \
    if (r_ != ncclSuccess) {                                                                       \
      fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, ncclGetErrorString(r_));                  \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static int run(lh_comm *world) {
  const int R = lh_comm_size(world), rank = lh_comm_rank(world);
  g_rank = rank;
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    if (rank == 0) fprintf(stderr, "SKIP: no CUDA device\n");
    return 77;
  }
  int dev = lh_comm_local_rank(world) % ndev;
  CK(cudaSetDevice(dev), "cudaSetDevice");
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (rank == 0) NK(ncclGetUniqueId(&id), "ncclGetUniqueId");
  lh_error err;
  if (world && lh_comm_bcast(world, &id, sizeof id, 0, &err)) {
    fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    return 1;
  }
  ncclComm_t nc;
  NK(ncclCommInitRank(&nc, R, id, rank), "ncclCommInitRank");
  int version = 0;
  ncclGetVersion(&version);
  cudaStream_t st;
  CK(cudaStreamCreate(&st), "cudaStreamCreate");

  /* exact small-integer sum */
  const size_t n = 1 << 20;
  float *d, *h = malloc(n * sizeof(float));
  CK(cudaMalloc((void **)&d, n * sizeof(float)), "cudaMalloc");
  for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1);
  CK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
  NK(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, nc, st), "ncclAllReduce fp32");
  CK(cudaStreamSynchronize(st), "sync");
  CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
  const float want = (float)R * (R + 1) / 2;
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != want;
  free(h);
  cudaFree(d);

  /* bf16 [65536 x 6144], timed after a warm-up (one rank: an in-place no-op, not timed) */
  const size_t m = (size_t)65536 * 6144;
  double ms = 0;
  if (R > 1) {
    void *b;
    CK(cudaMalloc(&b, m * 2), "cudaMalloc bf16");
    CK(cudaMemset(b, 0, m * 2), "memset");
    NK(ncclAllReduce(b, b, m, ncclBfloat16, ncclSum, nc, st), "ncclAllReduce bf16 (warm-up)");
    CK(cudaStreamSynchronize(st), "sync");
    const int reps = 5;
    double t0 = lh_now();
    for (int i = 0; i < reps; i++) NK(ncclAllReduce(b, b, m, ncclBfloat16, ncclSum, nc, st), "ncclAllReduce bf16");
    CK(cudaStreamSynchronize(st), "sync");
    ms = (lh_now() - t0) * 1e3 / reps;
    cudaFree(b);
  }

  int failed = bad != 0, first = -1;
  if (world && lh_comm_first_failed(world, failed, &first, &err)) first = rank;
  if (!world) first = failed ? 0 : -1;
  if (rank == 0) {
    double alg = m * 2 / (ms * 1e-3) / 1e9;
    printf("nccl %d.%d.%d, %d rank%s, %d device%s on rank 0's host\n", version / 10000, version / 100 % 100,
           version % 100, R, R > 1 ? "s" : "", ndev, ndev > 1 ? "s" : "");
    printf("  fp32 all-reduce of rank + 1 (1M values): %s\n", first < 0 ? "exact on every rank" : "WRONG");
    if (first >= 0) printf("  first rank with a wrong sum: %d (rank 0: %zu wrong values)\n", first, bad);
    if (R > 1) {
      printf("  bf16 all-reduce [65536 x 6144], 805 MB: %.2f ms; algbw %.0f GB/s, busbw %.0f GB/s\n", ms, alg,
             alg * 2.0 * (R - 1) / R);
      printf("  (one layer of a 64K-row chunk of the slice computes for about 400 ms on one H200: %.1f%% of it)\n",
             100.0 * ms / 400.0);
    } else {
      printf("  bf16 all-reduce [65536 x 6144]: not timed, one rank has nothing to move\n");
    }
  }
  ncclCommDestroy(nc);
  cudaStreamDestroy(st);
  return first >= 0;
}

int main(int argc, char **argv) {
  lh_comm *world = NULL;
  lh_error err;
  if (lh_comm_init(&argc, &argv, &world, &err)) {
    fprintf(stderr, "%s\n", err.msg);
    return 1;
  }
  int rc = run(world);
  lh_comm_finish(world);
  return rc;
}
