/* bench_cuda.c — first numbers of the CUDA backend on one GPU, each next to its peer and its limit.
 *
 * Sections (all in one process, one GPU):
 *   ceilings   bf16 GEMM 8192^3 through cuBLAS and a device-to-device copy, measured here: the
 *              rates every other line is judged against
 *   lightning  the lightning core (kernels/cuda/lightning.cu) at 64 heads x 128, 16K, 64K, 256K and 1M tokens,
 *              fp32 state in and out; limit = Q/K/V/O bytes over the copy rate
 *   attention  causal GQA prefill over paged KV (64 q / 8 kv heads, d 128) at 16K and 64K tokens, and
 *              decode over long KV; limit = FLOPs over the GEMM rate (prefill), bytes over copy (decode)
 *   moe        the MoE op (32 experts x 9216, top-2, hidden 6144) on 16K tokens, grouped and
 *              per-expert GEMMs, against cuBLAS dense GEMMs of the same FLOPs in this process
 *   slice      the 8-layer real-width slice (random weights made on the GPU), 32K tokens in chunks:
 *              tokens/s, model TFLOP/s, MFU against the GEMM rate, time per op kind, peak memory
 *   decode     after the slice's prefill: 1 and 16 forks decoding together
 * Peers run in the same session from the tools/bench_peers scripts and write "key milliseconds" lines; pass
 * that file with --peers to print them beside ours (transformers' lightning loop, torch SDPA, torch
 * cuBLAS GEMM). Times are medians of repeated runs timed with CUDA events after a warm-up.
 *
 * Usage: bench_cuda [--peers FILE] [--quick] [--only SECTIONS] [--tokens N] [--chunk N] [--checkpoint DB]
 *                   [--resumable DB] [--resume-check DB] [--lightning-cut Q] [--lightning-handover M]
 * (--checkpoint DB: one more slice run that checkpoints every chunk into the SQLite store DB)
 * (--resumable DB: instead of every section but the ceilings, one prefill that checkpoints every
 * chunk into DB and resumes from DB's last checkpoint: a prefill longer than one device call,
 * killed by the call's limit and run again, goes on where it stopped; see bench_resumable)
 * (--resume-check DB: instead of every section but the ceilings, a prefill straight through and
 * one resumed from its own checkpoint halfway must give the same logits, bit for bit)
 * (--only: a comma list of lightning,attention,moe,slice (the ceilings always run); --quick: one
 * slice run, fewer repetitions)
 * (--lightning-cut Q, --lightning-handover M: the lightning rows' cut and lightning_wg's hand-over
 * in 1/1024, instead of the defaults (kernels/cuda/kernels.h), for A/B runs of them)
 * (--lightning-tokens N: only the lightning row of N tokens (16K, 64K, 256K or 1M), also with --quick;
 * --print-reps: every timed repetition in order, to see a row slow down under the power cap)
 * (--attn-decode-only: of the attention section only the decode rows at 1M keys)
 * Over several GPUs (issue 10's scaling table): `mpirun -np R bench_cuda --only slice --tokens N`
 * runs the slice split over R ranks (tensor-parallel heads, expert-parallel MoE, NCCL sums; each
 * rank draws its own share of the random weights) and prints the same rows with MFU against R x
 * the GEMM rate; run the same command as one process for the 1-GPU row.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/comm.h"
#include "kernels/cuda/attn_cudnn.h"
#include "engine/backends/cuda/cuda_backend.h"
#include "kernels/cuda/kernels.h"
#include "store/store.h"
#include "util/fs.h"

#define H 64
#define D 128
#define HKV 8

static double g_gemm_tflops = 0, g_copy_gbs = 0;
static char g_peer_key[64][64];
static double g_peer_ms[64];
static int g_npeers;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_cuda: %s: %s\n", what, msg);
  exit(1);
}
static void ck(cudaError_t e, const char *what) {
  if (e != cudaSuccess) die(what, cudaGetErrorString(e));
}
static void cb(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) die(what, cublasGetStatusString(s));
}
static void lk(lh_status s, const lh_error *err, const char *what) {
  if (s != LH_OK) die(what, err->msg);
}

static void *dmalloc(size_t b) {
  void *p;
  cudaError_t e = cudaMalloc(&p, b);
  if (e != cudaSuccess) {
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    fprintf(stderr, "bench_cuda: cudaMalloc of %.2f GiB: %s (%.2f of %.2f GiB free)\n", b / 1073741824.0,
            cudaGetErrorString(e), fr / 1073741824.0, tot / 1073741824.0);
    exit(1);
  }
  return p;
}

static double peer(const char *key) {
  for (int i = 0; i < g_npeers; i++)
    if (!strcmp(g_peer_key[i], key)) return g_peer_ms[i];
  return NAN;
}

static void load_peers(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "bench_cuda: no peers file %s (peers left blank)\n", path);
    return;
  }
  char key[64];
  double ms;
  while (g_npeers < 64 && fscanf(f, "%63s %lf", key, &ms) == 2) {
    snprintf(g_peer_key[g_npeers], 64, "%s", key);
    g_peer_ms[g_npeers++] = ms;
  }
  fclose(f);
}

/* Median of reps timings (ms) of fn(ctx) on stream st, after one warm-up. */
typedef void (*bench_fn)(void *ctx);
static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}
/* --print-reps: time_ms prints every repetition in order (a row measured under the board's power cap
 * slows down rep by rep; bench/NOTES.md, session 12) */
static int g_print_reps = 0;
static double time_ms(cudaStream_t st, int reps, bench_fn fn, void *ctx) {
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a), "event");
  ck(cudaEventCreate(&b), "event");
  fn(ctx);
  ck(cudaStreamSynchronize(st), "warm-up");
  double t[64];
  if (reps > 64) reps = 64;
  for (int r = 0; r < reps; r++) {
    ck(cudaEventRecord(a, st), "record");
    fn(ctx);
    ck(cudaEventRecord(b, st), "record");
    ck(cudaEventSynchronize(b), "sync");
    float ms;
    ck(cudaEventElapsedTime(&ms, a, b), "elapsed");
    t[r] = ms;
  }
  cudaEventDestroy(a), cudaEventDestroy(b);
  if (g_print_reps) {
    printf("    reps (ms, in order):");
    for (int r = 0; r < reps; r++) printf(" %.3f", t[r]);
    printf("\n");
  }
  qsort(t, reps, sizeof(double), cmp_d);
  return t[reps / 2];
}

static void row(const char *what, double ours_ms, const char *peer_name, double peer_ms, const char *rate,
                double limit_ms) {
  char pbuf[32] = "-", rbuf[32] = "-", lbuf[32] = "-";
  if (!isnan(peer_ms)) snprintf(pbuf, sizeof pbuf, "%.3f", peer_ms), snprintf(rbuf, sizeof rbuf, "%.2fx", peer_ms / ours_ms);
  if (!isnan(limit_ms)) snprintf(lbuf, sizeof lbuf, "%.3f (%.0f%%)", limit_ms, 100.0 * limit_ms / ours_ms);
  printf("| %-44s | %10.3f | %-28s | %10s | %7s | %-16s | %s\n", what, ours_ms, peer_name, pbuf, rbuf, lbuf, rate);
  fflush(stdout);
}

static void header(const char *title) {
  printf("\n## %s\n| %-44s | %10s | %-28s | %10s | %7s | %-16s | rate\n", title, "what", "ours ms", "peer", "peer ms",
         "speedup", "limit ms (ours%)");
}

/* ---- ceilings ---------------------------------------------------------------------------------------- */

typedef struct gemm_ctx {
  cublasHandle_t h;
  void *a, *b, *c;
  int64_t m, n, k;
} gemm_ctx;
static void run_gemm(void *p) {
  gemm_ctx *g = p;
  cb(lh_cuda_gemm(g->h, g->a, g->k, g->m, (int)g->k, g->b, (int)g->n, g->c, g->n, 0), "gemm");
}
typedef struct copy_ctx {
  void *a, *b;
  size_t bytes;
  cudaStream_t st;
} copy_ctx;
static void run_copy(void *p) {
  copy_ctx *c = p;
  ck(cudaMemcpyAsync(c->b, c->a, c->bytes, cudaMemcpyDeviceToDevice, c->st), "copy");
}

static double copy_row(cudaStream_t st, int reps, const char *what);
static void bench_ceilings(cudaStream_t st, cublasHandle_t h) {
  header("ceilings (measured in this process)");
  const int64_t N = 8192;
  gemm_ctx g = {h, dmalloc(N * N * 2), dmalloc(N * N * 2), dmalloc(N * N * 2), N, N, N};
  ck(lh_cuda_fill_uniform_bf16(st, g.a, N * N, 1, 1.0f), "fill");
  ck(lh_cuda_fill_uniform_bf16(st, g.b, N * N, 2, 1.0f), "fill");
  double ms = time_ms(st, 10, run_gemm, &g);
  g_gemm_tflops = 2.0 * N * N * N / (ms * 1e-3) / 1e12;
  char rate[64];
  snprintf(rate, sizeof rate, "%.0f TFLOP/s", g_gemm_tflops);
  row("cuBLAS bf16 GEMM 8192^3 (random data)", ms, "torch.matmul 8192^3", peer("gemm_8192"), rate, NAN);
  cudaFree(g.a), cudaFree(g.b), cudaFree(g.c);
  g_copy_gbs = copy_row(st, 10, "device copy 4 GiB");
  /* with --print-reps, the copy alone for longer: does it slow down by itself as the board warms? */
  if (g_print_reps) copy_row(st, 64, "device copy 4 GiB, 64 times");
}

/* The copy rate over reps repetitions of a 4 GiB device copy (its row printed as what). */
static double copy_row(cudaStream_t st, int reps, const char *what) {
  copy_ctx c = {dmalloc((size_t)4 << 30), dmalloc((size_t)4 << 30), (size_t)4 << 30, st};
  const double ms = time_ms(st, reps, run_copy, &c), gbs = 2.0 * c.bytes / (ms * 1e-3) / 1e9;
  char rate[64];
  snprintf(rate, sizeof rate, "%.0f GB/s (read+write)", gbs);
  row(what, ms, "", NAN, rate, NAN);
  cudaFree(c.a), cudaFree(c.b);
  return gbs;
}

/* ---- lightning ---------------------------------------------------------------------------------------- */

typedef struct light_ctx {
  cudaStream_t st;
  void *qkv, *o;
  lh_cuda_lseg *seg;
  float *slope;
  int *sync;    /* the kernel's flags (zeroed), or NULL: segments are not cut */
  int split_q;  /* where it cuts, in 1/1024 of the rows (0: its default) */
  float *norm_w; /* when set, also the all-heads RMSNorm and the sigmoid gate (HF's forward does both) */
  int64_t n;
} light_ctx;
static void run_light(void *p) {
  light_ctx *l = p;
  ck(lh_cuda_lightning(l->st, l->qkv, 3 * H * D, l->n, l->seg, 1, H, D, l->slope, l->o, H * D, l->sync, l->split_q),
     "lightning");
  if (l->norm_w)
    ck(lh_cuda_norm_gate(l->st, l->o, H * D, l->qkv, 3 * H * D, l->n, H * D, l->norm_w, 1e-6f, l->o, H * D), "norm");
}

static int64_t g_light_tokens = 0; /* --lightning-tokens N: only that row of the lightning section */
static int g_light_cut = 0;  /* --lightning-cut Q: the lightning rows' cut, 1/1024 of the rows (0: default) */
static int g_light_hand = -1;  /* --lightning-handover M: lightning_wg's hand-over (-1: default, 0: none) */
static void bench_lightning(cudaStream_t st, int quick) {
  header("lightning attention core, 64 heads x 128, fp32 state in/out");
  /* 256K and 1M (issue 8's range reaches 1M tokens): the main rows only, not in --quick */
  int64_t sizes[4] = {16384, 65536, 1 << 18, 1 << 20};
  for (int si = 0; si < (quick && !g_light_tokens ? 2 : 4); si++) {
    int64_t n = sizes[si];
    if (g_light_tokens && n != g_light_tokens) continue;
    const int long_n = n > 65536;
    light_ctx l = {st, dmalloc((size_t)n * 3 * H * D * 2), dmalloc((size_t)n * H * D * 2), NULL, NULL, NULL, 0, NULL, n};
    l.split_q = g_light_cut;
    lh_cuda_lightning_handover(g_light_hand);
    int *sync = dmalloc(H * sizeof(int));
    ck(cudaMemset(sync, 0, H * sizeof(int)), "memset");
    float *state = dmalloc((size_t)H * D * D * 4);
    l.slope = dmalloc(H * 4);
    float sl[H];
    for (int h = 0; h < H; h++) sl[h] = (float)pow(1.0 / pow(2.0, 8.0 / H), h + 1);
    ck(cudaMemcpy(l.slope, sl, sizeof sl, cudaMemcpyHostToDevice), "copy");
    ck(lh_cuda_fill_uniform_bf16(st, l.qkv, n * 3 * H * D, 11, 2.0f), "fill");
    ck(lh_cuda_fill_uniform_f32(st, state, (int64_t)H * D * D, 12, 0.01f, 0.0f), "fill");
    lh_cuda_lseg seg = {0, n, state};
    l.seg = dmalloc(sizeof seg);
    ck(cudaMemcpy(l.seg, &seg, sizeof seg, cudaMemcpyHostToDevice), "copy");
    const double bytes = 4.0 * n * H * D * 2 + 2.0 * H * D * D * 4; /* q, k, v in, o out; state in and out */
    char what[96], key[64], fkey[64], skey[64], s3key[64], rate[64];
    snprintf(key, sizeof key, "lightning_hf_%lld", (long long)n);
    snprintf(fkey, sizeof fkey, "lightning_fla_%lld", (long long)n);
    snprintf(skey, sizeof skey, "lightning_fla_silu_%lld", (long long)n); /* fla given q, k, v before SiLU */
    snprintf(s3key, sizeof s3key, "lightning_fla_silu3_%lld", (long long)n);
    for (int cut = 1; cut >= 0; cut--) {
      l.sync = cut ? sync : NULL;
      double ms = time_ms(st, quick ? 3 : 10, run_light, &l);
      snprintf(what, sizeof what, "lightning core %lldK tokens%s", (long long)n / 1024, cut ? "" : " (not cut)");
      snprintf(rate, sizeof rate, "%.0f GB/s of Q/K/V/O", bytes / (ms * 1e-3) / 1e9);
      row(what, ms, "transformers (SiLU+loop+norm+gate)", peer(key), rate, bytes / (g_copy_gbs * 1e9) * 1e3);
      if (!isnan(peer(fkey))) row("  vs flash-linear-attention chunk_simple_gla", ms, "fla chunk_simple_gla", peer(fkey), "", NAN);
      if (!isnan(peer(skey))) row("  vs torch SiLU of fused q/k/v rows, then fla", ms, "SiLU + fla", peer(skey), "", NAN);
      if (!isnan(peer(s3key))) row("  vs torch SiLU of 3 contiguous q, k, v, fla", ms, "SiLU x3 + fla", peer(s3key), "", NAN);
      if (!long_n) { /* the mma.sync kernel it replaced on sm_90 (lightning_ws), same inputs, as the peer */
        lh_cuda_lightning_kernel(0);
        double mws = time_ms(st, quick ? 3 : 10, run_light, &l);
        lh_cuda_lightning_kernel(-1);
        row("  vs lightning_ws (mma.sync, before wgmma)", ms, "lightning_ws", mws, "", NAN);
      }
      if (cut && !quick && !long_n) {
        /* where to cut: part 1's advance costs less than a full block, so the best cut is past n/2 */
        for (int q = 512; q <= 736; q += 32) {
          l.split_q = q;
          double mq = time_ms(st, 10, run_light, &l);
          snprintf(what, sizeof what, "  cut at %d/1024 of the rows", q);
          snprintf(rate, sizeof rate, "%.0f GB/s of Q/K/V/O", bytes / (mq * 1e-3) / 1e9);
          row(what, mq, "fla chunk_simple_gla", peer(fkey), rate, bytes / (g_copy_gbs * 1e9) * 1e3);
        }
        /* the hand-over (lh_cuda_lightning_handover): part 1 advances over [m, x) only */
        for (int q = 576; q <= 672; q += 32)
          for (int m = 256; m <= 384; m += 64) {
            l.split_q = q;
            lh_cuda_lightning_handover(m);
            double mq = time_ms(st, 10, run_light, &l);
            snprintf(what, sizeof what, "  cut at %d/1024, hand-over at %d/1024 of it", q, m);
            snprintf(rate, sizeof rate, "%.0f GB/s of Q/K/V/O", bytes / (mq * 1e-3) / 1e9);
            row(what, mq, "fla chunk_simple_gla", peer(fkey), rate, bytes / (g_copy_gbs * 1e9) * 1e3);
          }
        lh_cuda_lightning_handover(g_light_hand);
        l.split_q = g_light_cut;
      }
    }
    l.sync = sync;
    l.norm_w = dmalloc(H * D * 4);
    ck(lh_cuda_fill_uniform_f32(st, l.norm_w, H * D, 13, 0.1f, 1.0f), "fill");
    double ms = time_ms(st, quick ? 3 : 10, run_light, &l);
    const double nb = bytes + 2.0 * n * H * D * 2; /* the norm reads o and the gate, writes y */
    snprintf(rate, sizeof rate, "%.0f GB/s", nb / (ms * 1e-3) / 1e9);
    row("  + all-heads norm + gate", ms, "transformers (SiLU+loop+norm+gate)", peer(key), rate,
        nb / (g_copy_gbs * 1e9) * 1e3);
    cudaFree(l.norm_w);
    cudaFree(l.qkv), cudaFree(l.o), cudaFree(state), cudaFree(l.slope), cudaFree(l.seg), cudaFree(sync);
    /* The 1M row is measured with the board at its power cap (bench/NOTES.md, sessions 12 and 14); the
     * copy again, at once and for as long, shows whether the cap also lowers the copy rate (the row
     * keeps the ceiling measured at the start as its limit). */
    if (n == (1 << 20)) copy_row(st, 64, "  device copy 4 GiB, 64 times, right after");
  }
}

/* ---- softmax attention ------------------------------------------------------------------------------- */

typedef struct attn_ctx {
  cudaStream_t st;
  void *q, *o;
  lh_cuda_aseg *seg;
  int32_t *tiles;
  int ntiles, nseg, max_splits;
  float *partial;
  int decode; /* 0: prefill; 1: decode, the scalar kernel; 2: decode by units (tensor cores) */
  int32_t *units, *members, *hunits; /* decode by units: the table on the device and on the host */
  int nunits, max_count;
} attn_ctx;
/* The 64-row tiles of one segment of n rows, the ones with the most keys first, into a->tiles
 * (allocated on first use for n rows; later calls must not have more). */
static void put_tiles(attn_ctx *a, int64_t n) {
  a->ntiles = (int)(n / 64);
  int32_t *t = malloc((size_t)a->ntiles * 8);
  for (int i = 0; i < a->ntiles; i++) t[2 * i] = 0, t[2 * i + 1] = (a->ntiles - 1 - i) * 64;
  if (!a->tiles) a->tiles = dmalloc((size_t)a->ntiles * 8);
  ck(cudaMemcpy(a->tiles, t, (size_t)a->ntiles * 8, cudaMemcpyHostToDevice), "copy");
  free(t);
}
static void run_attn(void *p) {
  attn_ctx *a = p;
  if (a->decode == 2)
    ck(lh_cuda_attn_decode_units(a->st, a->q, a->seg, a->nseg, a->units, a->hunits, a->nunits, a->members, a->max_count,
                                 a->max_splits, H, HKV, D, a->partial, NULL, a->o),
       "decode units");
  else if (a->decode)
    ck(lh_cuda_attn_decode(a->st, a->q, a->seg, a->nseg, a->max_splits, H, HKV, D, a->partial, a->o), "decode");
  else
    ck(lh_cuda_attn_prefill(a->st, a->q, a->seg, a->tiles, a->ntiles, H, HKV, D, a->o), "prefill");
}

/* The decode by units' table for c's n <= 16 one-row segments (row i: keys[i] keys in the pages
 * tabs[i]; at most cap members a unit), planned on the host into c->hunits (the members after room
 * for 16 rows' units) and uploaded to c->units and c->members; the buffers are made on first use. */
static void put_units(attn_ctx *c, const int64_t *keys, void *const *const *tabs, int n, int cap) {
  const size_t room = (size_t)16 * c->max_splits; /* (row, split) pairs of 16 rows */
  if (n > 16) die("put_units", "more than 16 rows");
  if (!c->hunits)
    c->hunits = malloc(room * 4 * 4), c->units = dmalloc(room * 3 * 4), c->members = dmalloc(room * 4);
  c->nunits = lh_decode_units(keys, tabs, n, LH_KV_PAGE_TOKENS, cap, c->hunits, c->hunits + 3 * room, &c->max_count);
  ck(cudaMemcpy(c->units, c->hunits, (size_t)c->nunits * 3 * 4, cudaMemcpyHostToDevice), "copy");
  ck(cudaMemcpy(c->members, c->hunits + 3 * room, room * 4, cudaMemcpyHostToDevice), "copy");
}
static void free_units(attn_ctx *c) {
  free(c->hunits), cudaFree(c->units), cudaFree(c->members);
  c->hunits = NULL, c->units = c->members = NULL;
}

/* Several decode-by-units launches one after the other (a short chunk, 16 rows a launch). */
typedef struct rows_ctx {
  int n;
  attn_ctx c[4];
} rows_ctx;
static void run_rows(void *p) {
  rows_ctx *r = p;
  for (int i = 0; i < r->n; i++) run_attn(&r->c[i]);
}

/* ---- cuDNN's fused attention on the same pages (kernels/cuda/attn_cudnn.h) ----------------------------- */

static lh_cudnn_attn *g_cudnn;
typedef struct cudnn_ctx {
  cudaStream_t st;
  lh_cudnn_attn_args x;
  int failed;
  char msg[1024];
} cudnn_ctx;
static void *const *g_gather_pages; /* set: run_cudnn gathers the pages into x.k / x.v first */
static int64_t g_gather_n, g_gather_stride;
static void run_cudnn(void *p) {
  cudnn_ctx *c = p;
  if (c->failed) return;
  if (g_gather_pages)
    ck(lh_cuda_kv_gather(c->st, g_gather_pages, g_gather_n, HKV, D, g_gather_stride, (void *)c->x.k, (void *)c->x.v),
       "gather");
  if (lh_cudnn_attn_prefill(g_cudnn, c->st, &c->x, c->msg, sizeof c->msg)) c->failed = 1;
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
/* rel L2 and max |diff| of two [n] bf16 device arrays */
static void compare_bf16(const void *a, const void *b, int64_t n, double *rel, double *maxd) {
  uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2);
  ck(cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost), "copy");
  ck(cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost), "copy");
  double num = 0, den = 0, mx = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = bf2f(ha[i]), y = bf2f(hb[i]), dd = x - y;
    num += dd * dd, den += y * y;
    if (fabs(dd) > mx || isnan(dd)) mx = isnan(dd) ? INFINITY : fabs(dd);
  }
  *rel = sqrt(num / (den > 0 ? den : 1)), *maxd = mx;
  free(ha), free(hb);
}
/* cuDNN over rows [pos, pos + nq) of the slab's pages; ours_o holds our kernel's output for them. */
static void cudnn_row(cudaStream_t st, void *kv, int64_t npages, void *q, const void *ours_o, int64_t nq, int64_t pos,
                      double ours_ms, const char *what, void *const *dpages);
/* cuDNN after gathering the pages contiguous (the backend's path while the copy fits its cap),
 * the gather included in the time. */
static void cudnn_gather_row(cudaStream_t st, void *const *dpages, void *q, const void *ours_o, int64_t nq, int64_t pos,
                             double ours_ms, const char *what) {
  const int64_t bucket = lh_cudnn_attn_key_bucket(nq, pos), need = (pos + nq + LH_KV_PAGE_TOKENS - 1) / LH_KV_PAGE_TOKENS;
  void *k = dmalloc((size_t)HKV * bucket * D * 2), *v = dmalloc((size_t)HKV * bucket * D * 2);
  void *o = dmalloc((size_t)nq * H * D * 2);
  int32_t *dlens = dmalloc(32);
  int32_t lens[8] = {(int32_t)nq, 0, 0, 0, (int32_t)(pos + nq), 0, 0, 0};
  ck(cudaMemcpy(dlens, lens, 32, cudaMemcpyHostToDevice), "copy");
  ck(cudaMemset(k, 0, (size_t)HKV * bucket * D * 2), "memset");
  ck(cudaMemset(v, 0, (size_t)HKV * bucket * D * 2), "memset");
  /* positional (the macros H and D would replace designated field names): the fields in order are
   * mode, q, o, kv_base, n_blocks, page_ids, k, v, seq_q, seq_kv, nrows, pos, nkv, unmasked, lse, H, Hkv, d */
  cudnn_ctx c = {st, {1, q, o, NULL, 0, NULL, k, v, dlens, dlens + 4, nq, pos, 0, 0, NULL, H, HKV, D, 0}, 0, ""};
  g_gather_pages = dpages, g_gather_n = need, g_gather_stride = bucket;
  double ms = time_ms(st, 3, run_cudnn, &c);
  g_gather_pages = NULL;
  char name[96], rate[160];
  snprintf(name, sizeof name, "cuDNN SDPA (gathered), %s", what);
  if (c.failed) printf("| %-44s | refused: %s\n", name, c.msg);
  else {
    double rel, maxd;
    compare_bf16(o, ours_o, nq * H * D, &rel, &maxd);
    double flops = 4.0 * D * H * ((double)nq * pos + (double)nq * (nq + 1) / 2);
    snprintf(rate, sizeof rate, "%.0f TFLOP/s; vs ours rel L2 %.2e max %.2e", flops / (ms * 1e-3) / 1e12, rel, maxd);
    row(name, ms, "ours (attention.cu)", ours_ms, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  }
  cudaFree(k), cudaFree(v), cudaFree(o), cudaFree(dlens);
}
static void cudnn_row(cudaStream_t st, void *kv, int64_t npages, void *q, const void *ours_o, int64_t nq, int64_t pos,
                      double ours_ms, const char *what, void *const *dpages) {
  if (!g_cudnn) return;
  cudnn_gather_row(st, dpages, q, ours_o, nq, pos, ours_ms, what);
  cudnn_ctx c = {st, {0}, 0, ""};
  int64_t tl = lh_cudnn_attn_table_len(nq, pos);
  int32_t *ids = calloc(tl, 4);
  for (int64_t i = 0; i < tl && i < npages; i++) ids[i] = (int32_t)i;
  int32_t lens[8] = {(int32_t)nq, 0, 0, 0, (int32_t)(pos + nq), 0, 0, 0};
  int32_t *dids = dmalloc(tl * 4), *dlens = dmalloc(32);
  void *o = dmalloc((size_t)nq * H * D * 2);
  ck(cudaMemcpy(dids, ids, tl * 4, cudaMemcpyHostToDevice), "copy");
  ck(cudaMemcpy(dlens, lens, 32, cudaMemcpyHostToDevice), "copy");
  c.x = (lh_cudnn_attn_args){0,   q,  o,   kv, npages, dids, NULL, NULL, dlens, dlens + 4,
                              nq,  pos, 0,  0,  NULL,   H,    HKV,  D,    0};
  double ms = time_ms(st, 3, run_cudnn, &c);
  char name[160], rate[160];
  snprintf(name, sizeof name, "cuDNN SDPA (paged), %s", what);
  if (c.failed) {
    printf("| %-44s | refused: %s\n", name, c.msg);
  } else {
    double rel, maxd;
    compare_bf16(o, ours_o, nq * H * D, &rel, &maxd);
    double flops = 4.0 * D * H * ((double)nq * pos + (double)nq * (nq + 1) / 2);
    snprintf(rate, sizeof rate, "%.0f TFLOP/s; vs ours rel L2 %.2e max %.2e", flops / (ms * 1e-3) / 1e12, rel, maxd);
    row(name, ms, "ours (attention.cu)", ours_ms, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  }
  int plans;
  double bs;
  lh_cudnn_attn_stats(g_cudnn, &plans, &bs);
  printf("|   (cuDNN plans built so far %d, %.2f s building)\n", plans, bs);
  free(ids);
  cudaFree(dids), cudaFree(dlens), cudaFree(o);
}
/* The same pattern with contiguous K and V (no paged loads): tells a refusal of paging apart. */
static void cudnn_contig(cudaStream_t st, int64_t N) {
  if (!g_cudnn) return;
  void *q = dmalloc((size_t)N * H * D * 2), *o = dmalloc((size_t)N * H * D * 2);
  void *k = dmalloc((size_t)N * HKV * D * 2), *v = dmalloc((size_t)N * HKV * D * 2);
  int32_t *dlens = dmalloc(32);
  ck(lh_cuda_fill_uniform_bf16(st, q, N * H * D, 31, 2.0f), "fill");
  ck(lh_cuda_fill_uniform_bf16(st, k, N * HKV * D, 32, 2.0f), "fill");
  ck(lh_cuda_fill_uniform_bf16(st, v, N * HKV * D, 33, 2.0f), "fill");
  int32_t lens[8] = {(int32_t)N, 0, 0, 0, (int32_t)N, 0, 0, 0};
  ck(cudaMemcpy(dlens, lens, 32, cudaMemcpyHostToDevice), "copy");
  cudnn_ctx c = {st, {1, q, o, NULL, 0, NULL, k, v, dlens, dlens + 4, N, 0, 0, 0, NULL, H, HKV, D, 0}, 0, ""};
  double ms = time_ms(st, 3, run_cudnn, &c);
  char name[96], rate[64];
  snprintf(name, sizeof name, "cuDNN SDPA (contiguous K/V), %lldK", (long long)N / 1024);
  if (c.failed) printf("| %-44s | refused: %s\n", name, c.msg);
  else {
    double flops = 4.0 * D * H * ((double)N * (N + 1) / 2);
    snprintf(rate, sizeof rate, "%.0f TFLOP/s", flops / (ms * 1e-3) / 1e12);
    row(name, ms, "", NAN, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  }
  cudaFree(q), cudaFree(o), cudaFree(k), cudaFree(v), cudaFree(dlens);
}

/* The cuDNN graph's forms side by side (attn_cudnn.h, lh_cudnn_attn_set_form): padded (sequence
 * lengths and a padding mask, the form for any key count), exact (no padding, the causal diagonal a
 * constant: torch's graph for dense tensors), and exact with q, then q and o, heads first
 * ([H][rows][d], torch's usual layout, against the backend's [rows][H][d]). Autotuning over the
 * heuristics' engine configs was measured once (2026-12-04: the first config was the fastest, the
 * other 2x slower) and is not repeated here. Contiguous K/V (no gather), rounds alternating the forms
 * so that the board's power state falls on each alike; each form's output is compared with the
 * padded one's (the layouts' outputs after reordering them back). */
static void bench_sdpa_forms(cudaStream_t st) {
  header("softmax attention through cuDNN: the graph's forms, alternating (contiguous K/V, 64 q / 8 kv heads, d 128)");
  enum { NF = 4 };
  static const char *name[NF] = {"padded", "exact", "exact, q heads first", "exact, q and o heads first"};
  static const int layout[NF] = {0, 0, 1, 3};
  lh_cudnn_attn *f[NF];
  for (int i = 0; i < NF; i++) {
    char msg[256];
    f[i] = lh_cudnn_attn_open(msg, sizeof msg);
    if (!f[i]) {
      printf("|   cuDNN: not used: %s\n", msg);
      for (int j = 0; j < i; j++) lh_cudnn_attn_close(f[j]);
      return;
    }
    lh_cudnn_attn_set_form(f[i], i > 0, 0);
  }
  const int64_t shapes[3][2] = {{16384, 0}, {65536, 0}, {16384, 49152}}; /* queries, first position */
  for (int si = 0; si < 3; si++) {
    const int64_t nq = shapes[si][0], pos = shapes[si][1], nkv = nq + pos;
    void *q = dmalloc((size_t)nq * H * D * 2), *qh = dmalloc((size_t)nq * H * D * 2), *o[NF];
    void *k = dmalloc((size_t)nkv * HKV * D * 2), *v = dmalloc((size_t)nkv * HKV * D * 2);
    for (int i = 0; i < NF; i++) o[i] = dmalloc((size_t)nq * H * D * 2);
    int32_t *dlens = dmalloc(32);
    ck(lh_cuda_fill_uniform_bf16(st, q, nq * H * D, 41, 2.0f), "fill");
    /* qh: q heads first, the same values: [nq][H][D] -> [H][nq][D] by a 2-D copy per head */
    for (int h = 0; h < H; h++)
      ck(cudaMemcpy2DAsync((char *)qh + (size_t)h * nq * D * 2, D * 2, (char *)q + (size_t)h * D * 2, (size_t)H * D * 2,
                           D * 2, nq, cudaMemcpyDeviceToDevice, st),
         "copy");
    ck(lh_cuda_fill_uniform_bf16(st, k, nkv * HKV * D, 42, 2.0f), "fill");
    ck(lh_cuda_fill_uniform_bf16(st, v, nkv * HKV * D, 43, 2.0f), "fill");
    int32_t lens[8] = {(int32_t)nq, 0, 0, 0, (int32_t)nkv, 0, 0, 0};
    ck(cudaMemcpy(dlens, lens, 32, cudaMemcpyHostToDevice), "copy");
    const double flops = 4.0 * D * H * ((double)nq * pos + (double)nq * (nq + 1) / 2);
    double t[NF][3]; /* [form][round], each a median of its repetitions */
    int failed = 0;
    for (int round = 0; round < 3 && !failed; round++)
      for (int i = 0; i < NF && !failed; i++) {
        lh_cudnn_attn *keep = g_cudnn;
        g_cudnn = f[i];
        const void *qi = layout[i] & 1 ? qh : q;
        cudnn_ctx c = {
            st, {1, qi, o[i], NULL, 0, NULL, k, v, dlens, dlens + 4, nq, pos, 0, 0, NULL, H, HKV, D, layout[i]}, 0, ""};
        double ms = time_ms(st, nq == nkv && nq <= 16384 ? 10 : 3, run_cudnn, &c);
        g_cudnn = keep;
        if (c.failed) {
          printf("| %-44s | refused: %s\n", name[i], c.msg);
          failed = 1;
        }
        t[i][round] = ms;
      }
    if (!failed) {
      char what[96], rate[200], key[64];
      if (pos) snprintf(key, sizeof key, "sdpa_chunk_%lld", (long long)nkv);
      else snprintf(key, sizeof key, "sdpa_%lld", (long long)nq);
      for (int i = 0; i < NF; i++) {
        double rel = 0, maxd = 0;
        if (layout[i] & 2) { /* back to [nq][H][D] into qh (free once the rounds are done) */
          for (int h = 0; h < H; h++)
            ck(cudaMemcpy2DAsync((char *)qh + (size_t)h * D * 2, (size_t)H * D * 2,
                                 (char *)o[i] + (size_t)h * nq * D * 2, D * 2, D * 2, nq, cudaMemcpyDeviceToDevice, st),
               "copy");
          ck(cudaStreamSynchronize(st), "sync");
          compare_bf16(qh, o[0], nq * H * D, &rel, &maxd);
        } else if (i) {
          compare_bf16(o[i], o[0], nq * H * D, &rel, &maxd);
        }
        qsort(t[i], 3, sizeof(double), cmp_d);
        const double med = t[i][1];
        snprintf(what, sizeof what, "%s, %lldK q over %lldK keys", name[i], (long long)nq / 1024,
                 (long long)nkv / 1024);
        snprintf(rate, sizeof rate, "%.0f TFLOP/s (median of 3 rounds; rounds %.3f-%.3f ms)",
                 flops / (med * 1e-3) / 1e12, t[i][0], t[i][2]);
        if (i) {
          size_t n = strlen(rate);
          snprintf(rate + n, sizeof rate - n, "; vs padded rel L2 %.1e", rel);
        }
        row(what, med, pos ? "torch SDPA lower-right" : "torch SDPA causal enable_gqa", peer(key), rate,
            flops / (g_gemm_tflops * 1e12) * 1e3);
      }
    }
    for (int i = 0; i < NF; i++) cudaFree(o[i]);
    cudaFree(q), cudaFree(qh), cudaFree(k), cudaFree(v), cudaFree(dlens);
  }
  for (int i = 0; i < NF; i++) {
    char buf[2048];
    lh_cudnn_attn_describe(f[i], buf, sizeof buf);
    printf("|   %s plans: %s\n", name[i], buf);
    lh_cudnn_attn_close(f[i]);
  }
}

static int64_t g_attn_n = 16384; /* --attn-n: the first prefill size */
static int g_attn_decode_only = 0; /* --attn-decode-only: only the decode rows (1M keys) */
static void bench_attention(cudaStream_t st, int quick) {
  header("softmax attention, causal, 64 q / 8 kv heads, d 128, paged KV (bf16)");
  char cmsg[256] = "";
  g_cudnn = lh_cudnn_attn_open(cmsg, sizeof cmsg);
  if (!g_cudnn) printf("|   cuDNN: not used: %s\n", cmsg);
  else if (!g_attn_decode_only) cudnn_contig(st, g_attn_n);
  int64_t sizes[3] = {g_attn_n, 65536, 1 << 20};
  const size_t page_bytes = (size_t)2 * HKV * LH_KV_PAGE_TOKENS * D * 2;
  for (int si = g_attn_decode_only ? 2 : 0; si < (quick && !g_attn_decode_only ? 1 : 3); si++) {
    int64_t N = sizes[si], npages = N / LH_KV_PAGE_TOKENS;
    void *kv = dmalloc(npages * page_bytes);
    ck(lh_cuda_fill_uniform_bf16(st, kv, (int64_t)(npages * page_bytes / 2), 21, 2.0f), "fill");
    void **hp = malloc(npages * sizeof(void *));
    for (int64_t i = 0; i < npages; i++) hp[i] = (char *)kv + i * page_bytes;
    void **dp = dmalloc(npages * sizeof(void *));
    ck(cudaMemcpy(dp, hp, npages * sizeof(void *), cudaMemcpyHostToDevice), "copy");
    const int prefill = N <= 65536;
    int64_t nq = prefill ? N : 16;
    attn_ctx a = {st, dmalloc((size_t)nq * H * D * 2), dmalloc((size_t)nq * H * D * 2), NULL, NULL, 0, 1, 1, NULL, 0, NULL, NULL, NULL, 0, 0};
    ck(lh_cuda_fill_uniform_bf16(st, a.q, nq * H * D, 22, 2.0f), "fill");
    char what[96], key[64], rate[64];
    if (prefill) {
      lh_cuda_aseg seg = {0, N, 0, dp};
      a.seg = dmalloc(sizeof seg);
      ck(cudaMemcpy(a.seg, &seg, sizeof seg, cudaMemcpyHostToDevice), "copy");
      put_tiles(&a, N);
      double ms = time_ms(st, quick || N > 16384 ? 3 : 10, run_attn, &a);
      double flops = 4.0 * D * H * ((double)N * (N + 1) / 2);
      snprintf(what, sizeof what, "prefill %lldK tokens (one chunk)", (long long)N / 1024);
      snprintf(key, sizeof key, "sdpa_%lld", (long long)N);
      snprintf(rate, sizeof rate, "%.0f TFLOP/s", flops / (ms * 1e-3) / 1e12);
      row(what, ms, "torch SDPA causal enable_gqa", peer(key), rate, flops / (g_gemm_tflops * 1e12) * 1e3);
      snprintf(what, sizeof what, "prefill %lldK tokens", (long long)N / 1024);
      cudnn_row(st, kv, npages, a.q, a.o, N, 0, ms, what, dp);
      if (N == 65536) {
        /* The chunked-prefill case: the last 16K queries [48K, 64K) over keys [0, 64K). */
        const int64_t p0 = N - 16384;
        lh_cuda_aseg cs = {0, 16384, p0, dp};
        ck(cudaMemcpy(a.seg, &cs, sizeof cs, cudaMemcpyHostToDevice), "copy");
        put_tiles(&a, 16384);
        ms = time_ms(st, 3, run_attn, &a);
        flops = 4.0 * D * H * (16384.0 * p0 + 16384.0 * 16385 / 2);
        snprintf(rate, sizeof rate, "%.0f TFLOP/s", flops / (ms * 1e-3) / 1e12);
        row("chunk: queries [48K,64K) over keys [0,64K)", ms, "", NAN, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
        cudnn_row(st, kv, npages, a.q, a.o, 16384, p0, ms, "chunk [48K,64K)", dp);
      }
      cudaFree(a.tiles);
    } else {
      /* 1 sequence, then 16 (forks of one prefix) decoding one token each over the same N keys: the
       * scalar kernel, then the one by units (tensor cores) with each sequence alone and with the
       * forks' shared pages read once. The limit: the KV bytes that must be read, over the copy rate. */
      a.max_splits = (int)((N + LH_CUDA_DECODE_SPLIT - 1) / LH_CUDA_DECODE_SPLIT);
      lh_cuda_aseg segs[16];
      void *const *tabs[16];
      int64_t keys[16];
      for (int i = 0; i < 16; i++) segs[i] = (lh_cuda_aseg){i, 1, N - 1, dp}, tabs[i] = hp, keys[i] = N;
      a.seg = dmalloc(sizeof segs);
      ck(cudaMemcpy(a.seg, segs, sizeof segs, cudaMemcpyHostToDevice), "copy");
      a.partial = dmalloc((size_t)16 * H * a.max_splits * (D + 2) * 4);
      const struct { int nseg, kernel, alone; const char *how; } var[5] = {
          {1, 1, 0, "1 sequence, scalar kernel"},
          {1, 2, 0, "1 sequence, tensor cores"},
          {16, 1, 0, "16 forks, scalar kernel"},
          {16, 2, 1, "16 forks, tensor cores, each alone"},
          {16, 2, 0, "16 forks, tensor cores, prefix once"}};
      for (int vi = 0; vi < 5; vi++) {
        a.decode = var[vi].kernel, a.nseg = var[vi].nseg;
        if (a.decode == 2) put_units(&a, keys, tabs, a.nseg, var[vi].alone ? 1 : LH_CUDA_DECODE_ROWS / (H / HKV));
        double ms = time_ms(st, 5, run_attn, &a);
        const int reads = a.decode == 2 && !var[vi].alone ? 1 : a.nseg; /* KV passes the variant needs */
        double bytes = (double)reads * N * 2 * HKV * D * 2;
        snprintf(what, sizeof what, "decode, %s x %lldK keys", var[vi].how, (long long)N / 1024);
        snprintf(rate, sizeof rate, "%.0f GB/s of KV reads", bytes / (ms * 1e-3) / 1e9);
        row(what, ms, "", NAN, rate, bytes / (g_copy_gbs * 1e9) * 1e3);
      }
      /* A short chunk at the end of the keys (a job's question after a long shared prefix): nr rows at
       * [N-nr, N) through the prefill kernel (one 64-row tile a head), then as one-row segments through
       * the decode by units, 16 rows a launch as the backend runs them (a launch's first splits are the
       * same pages: read once). */
      for (int nr = 16; nr <= 64; nr *= 4) {
        lh_cuda_aseg cs[64];
        int64_t ck_[64];
        void *const *ct[64];
        for (int i = 0; i < nr; i++) cs[i] = (lh_cuda_aseg){i, 1, N - nr + i, dp}, ck_[i] = N - nr + i + 1, ct[i] = hp;
        lh_cuda_aseg one = {0, nr, N - nr, dp};
        int32_t tile[2] = {0, 0};
        attn_ctx t = a;
        t.q = dmalloc((size_t)nr * H * D * 2), t.o = dmalloc((size_t)nr * H * D * 2);
        ck(lh_cuda_fill_uniform_bf16(st, t.q, nr * H * D, 24, 2.0f), "fill");
        t.tiles = dmalloc(sizeof tile), t.ntiles = 1, t.decode = 0, t.seg = dmalloc(sizeof cs);
        ck(cudaMemcpy(t.tiles, tile, sizeof tile, cudaMemcpyHostToDevice), "copy");
        ck(cudaMemcpy(t.seg, &one, sizeof one, cudaMemcpyHostToDevice), "copy");
        const double bytes = (double)N * 2 * HKV * D * 2;
        double ms = time_ms(st, 3, run_attn, &t);
        snprintf(what, sizeof what, "chunk of %d rows at %lldK keys, prefill kernel", nr, (long long)N / 1024);
        snprintf(rate, sizeof rate, "%.0f GB/s of KV reads", bytes / (ms * 1e-3) / 1e9);
        row(what, ms, "", NAN, rate, bytes / (g_copy_gbs * 1e9) * 1e3);
        ck(cudaMemcpy(t.seg, cs, sizeof cs, cudaMemcpyHostToDevice), "copy");
        rows_ctx rc;
        rc.n = nr / 16;
        for (int g = 0; g < rc.n; g++) {
          rc.c[g] = t;
          rc.c[g].decode = 2, rc.c[g].nseg = 16, rc.c[g].seg = t.seg + 16 * g, rc.c[g].hunits = NULL;
          put_units(&rc.c[g], ck_ + 16 * g, ct + 16 * g, 16, LH_CUDA_DECODE_ROWS / (H / HKV));
        }
        ms = time_ms(st, 5, run_rows, &rc);
        snprintf(what, sizeof what, "chunk of %d rows at %lldK keys, as rows by units", nr, (long long)N / 1024);
        snprintf(rate, sizeof rate, "%.0f GB/s of KV reads", rc.n * bytes / (ms * 1e-3) / 1e9);
        row(what, ms, "", NAN, rate, rc.n * bytes / (g_copy_gbs * 1e9) * 1e3);
        for (int g = 0; g < rc.n; g++) free_units(&rc.c[g]);
        cudaFree(t.tiles), cudaFree(t.seg), cudaFree(t.q), cudaFree(t.o);
      }
      a.decode = 0;
      free_units(&a);
      cudaFree(a.partial);
      if (!quick && !g_attn_decode_only) {
        /* The last 16K-query chunk of a 1M-token prefill: queries [1M-16K, 1M) over keys [0, 1M). */
        const int64_t nq2 = 16384, p0 = N - nq2;
        attn_ctx c2 = {st, dmalloc((size_t)nq2 * H * D * 2), dmalloc((size_t)nq2 * H * D * 2), NULL, NULL, 0, 1, 1, NULL, 0, NULL, NULL, NULL, 0, 0};
        ck(lh_cuda_fill_uniform_bf16(st, c2.q, nq2 * H * D, 23, 2.0f), "fill");
        lh_cuda_aseg cs = {0, nq2, p0, dp};
        c2.seg = dmalloc(sizeof cs);
        ck(cudaMemcpy(c2.seg, &cs, sizeof cs, cudaMemcpyHostToDevice), "copy");
        put_tiles(&c2, nq2);
        double ms2 = time_ms(st, 1, run_attn, &c2);
        double fl2 = 4.0 * D * H * ((double)nq2 * p0 + (double)nq2 * (nq2 + 1) / 2);
        snprintf(rate, sizeof rate, "%.0f TFLOP/s", fl2 / (ms2 * 1e-3) / 1e12);
        row("chunk: queries [1M-16K,1M) over keys [0,1M)", ms2, "torch SDPA, lower-right causal", peer("sdpa_chunk_1048576"),
            rate, fl2 / (g_gemm_tflops * 1e12) * 1e3);
        cudnn_row(st, kv, npages, c2.q, c2.o, nq2, p0, ms2, "chunk [1M-16K,1M)", dp);
        cudaFree(c2.q), cudaFree(c2.o), cudaFree(c2.seg), cudaFree(c2.tiles);
      }
    }
    cudaFree(a.q), cudaFree(a.o), cudaFree(a.seg), cudaFree(kv), cudaFree(dp);
    free(hp);
  }
}

/* ---- the slice ------------------------------------------------------------------------------------------ */

typedef struct slice {
  lh_backend *be;
  const lh_backend_ops *ops;
  const lh_weights *w;
  lh_config cfg;
  lh_error err;
  cudaStream_t st;
  int hl, gl, ranks; /* this rank's heads and kv heads, of ranks (--ranks; 1: all of H and HKV) */
} slice;

typedef struct seqm {
  lh_seq_mem mem;
  void *light[8];
  void **tables[1];
  int64_t pos;
} seqm;

static void seq_make(slice *s, seqm *q, int64_t max_tokens) {
  memset(q, 0, sizeof *q);
  const size_t sb = (size_t)s->hl * D * D * 4, pb = (size_t)2 * s->gl * LH_KV_PAGE_TOKENS * D * 2;
  for (int i = 0; i < s->cfg.n_lightning; i++) q->light[i] = s->ops->alloc(s->be, sb);
  int64_t np = (max_tokens + LH_KV_PAGE_TOKENS - 1) / LH_KV_PAGE_TOKENS;
  q->tables[0] = calloc(np, sizeof(void *));
  for (int64_t i = 0; i < np; i++)
    if (!(q->tables[0][i] = s->ops->alloc(s->be, pb))) die("alloc", "KV page");
  q->mem.lightning = q->light;
  q->mem.kv_pages = q->tables;
  q->mem.n_pages = np;
}

/* A fork: its own copies of the lightning states and of the last, partly written page; the full
 * pages are shared. */
static void seq_fork(slice *s, const seqm *src, seqm *q, int64_t max_tokens) {
  memset(q, 0, sizeof *q);
  const size_t sb = (size_t)s->hl * D * D * 4, pb = (size_t)2 * s->gl * LH_KV_PAGE_TOKENS * D * 2;
  for (int i = 0; i < s->cfg.n_lightning; i++) {
    q->light[i] = s->ops->alloc(s->be, sb);
    lk(s->ops->copy(s->be, q->light[i], src->light[i], sb, &s->err), &s->err, "copy");
  }
  int64_t np = (max_tokens + LH_KV_PAGE_TOKENS - 1) / LH_KV_PAGE_TOKENS, shared = src->pos / LH_KV_PAGE_TOKENS;
  q->tables[0] = calloc(np, sizeof(void *));
  for (int64_t i = 0; i < np; i++) {
    if (i < shared) q->tables[0][i] = src->tables[0][i];
    else {
      q->tables[0][i] = s->ops->alloc(s->be, pb);
      if (i == shared) lk(s->ops->copy(s->be, q->tables[0][i], src->tables[0][i], pb, &s->err), &s->err, "copy");
    }
  }
  q->mem.lightning = q->light;
  q->mem.kv_pages = q->tables;
  q->mem.n_pages = np;
  q->pos = src->pos;
}

enum { T_LIGHT, T_SOFT, T_MOE, T_NORM, T_NK };
static const char *t_names[T_NK] = {"lightning blocks", "softmax blocks", "MoE blocks", "embed/norms/residuals"};

/* One forward of the layer loop over a batch (as engine/forward.c runs it); per-kind times added to
 * acc (ms) when ev != NULL. x, h, a: activation slots. */
static void forward(slice *s, const int32_t *tok, const lh_batch *b, cudaEvent_t *ev, double *acc) {
  const lh_config *c = &s->cfg;
  const int64_t n = b->n;
  void *x = s->ops->act(s->be, 0), *h = s->ops->act(s->be, 1), *a = s->ops->act(s->be, 2);
  int e = 0, kinds[64];
  if (ev) ck(cudaEventRecord(ev[e++], s->st), "ev");
  lk(s->ops->embed(s->be, tok, n, x, &s->err), &s->err, "embed");
  lk(s->ops->rmsnorm(s->be, x, n, &s->w->layers[0].in_norm, h, &s->err), &s->err, "norm");
  if (ev) kinds[e] = T_NORM, ck(cudaEventRecord(ev[e++], s->st), "ev");
  int li = 0, si = 0;
  for (int l = 0; l < c->n_layers; l++) {
    lh_layer_kind k = c->layer_kind[l];
    if (k == LH_LAYER_LIGHTNING) lk(s->ops->attn_lightning(s->be, l, li++, h, b, a, &s->err), &s->err, "lightning");
    else lk(s->ops->attn_softmax(s->be, l, si++, h, b, a, &s->err), &s->err, "softmax");
    if (ev) kinds[e] = k == LH_LAYER_LIGHTNING ? T_LIGHT : T_SOFT, ck(cudaEventRecord(ev[e++], s->st), "ev");
    lk(s->ops->residual(s->be, h, a, c->attn_alpha[k], c->attn_beta[k], n, x, &s->w->layers[l].post_norm, h, &s->err),
       &s->err, "residual");
    if (ev) kinds[e] = T_NORM, ck(cudaEventRecord(ev[e++], s->st), "ev");
    lk(s->ops->moe(s->be, l, h, n, a, &s->err), &s->err, "moe");
    if (ev) kinds[e] = T_MOE, ck(cudaEventRecord(ev[e++], s->st), "ev");
    const lh_tensor *next = l + 1 < c->n_layers ? &s->w->layers[l + 1].in_norm : NULL; /* logits norm x */
    lk(s->ops->residual(s->be, h, a, c->mlp_alpha, c->mlp_beta, n, x, next, h, &s->err), &s->err, "residual");
    if (ev) kinds[e] = T_NORM, ck(cudaEventRecord(ev[e++], s->st), "ev");
  }
  if (ev) {
    ck(cudaEventSynchronize(ev[e - 1]), "sync");
    for (int i = 1; i < e; i++) {
      float ms;
      ck(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]), "elapsed");
      acc[kinds[i]] += ms;
    }
  }
}

typedef struct moe_ctx {
  slice *s;
  void *in, *out;
  int64_t n;
} moe_ctx;
static void run_moe(void *p) {
  moe_ctx *m = p;
  lk(m->s->ops->moe(m->s->be, 0, m->in, m->n, m->out, &m->s->err), &m->s->err, "moe");
}

static void bench_moe(slice *s, int64_t n) {
  header("MoE layer: 32 experts x 9216, top-2, hidden 6144");
  moe_ctx m = {s, s->ops->act(s->be, 1), s->ops->act(s->be, 2), n};
  ck(lh_cuda_fill_uniform_bf16(s->st, m.in, n * 6144, 31, 1.7f), "fill");
  const double flops = (double)n * 2 * 3 * 2.0 * 6144 * 9216 + 2.0 * n * 6144 * 32;
  /* The same FLOPs as dense GEMMs: n*K rows through [6144 -> 18432] and [9216 -> 6144]. */
  cublasHandle_t hb = lh_cuda_cublas(s->be);
  const int64_t rows = 2 * n;
  gemm_ctx g1 = {hb, dmalloc(rows * 6144 * 2), dmalloc((size_t)18432 * 6144 * 2), dmalloc(rows * 18432 * 2), rows,
                 18432, 6144};
  gemm_ctx g2 = {hb, g1.c, dmalloc((size_t)6144 * 9216 * 2), g1.a, rows, 6144, 9216};
  ck(lh_cuda_fill_uniform_bf16(s->st, g1.a, rows * 6144, 32, 1.0f), "fill");
  ck(lh_cuda_fill_uniform_bf16(s->st, g1.b, (int64_t)18432 * 6144, 33, 0.02f), "fill");
  ck(lh_cuda_fill_uniform_bf16(s->st, g2.b, (int64_t)6144 * 9216, 34, 0.02f), "fill");
  double d1 = time_ms(s->st, 10, run_gemm, &g1), d2 = time_ms(s->st, 10, run_gemm, &g2);
  double dense = d1 + d2, dense_flops = 2.0 * rows * 6144 * 18432 + 2.0 * rows * 9216 * 6144;
  char what[96], rate[64];
  snprintf(rate, sizeof rate, "%.0f TFLOP/s", dense_flops / (dense * 1e-3) / 1e12);
  snprintf(what, sizeof what, "cuBLAS dense GEMMs, same FLOPs (%lldK rows)", (long long)rows / 1024);
  row(what, dense, "torch.matmul same shapes", peer("moe_dense_torch"), rate, dense_flops / (g_gemm_tflops * 1e12) * 1e3);
  for (int grouped = 0; grouped <= 1; grouped++) {
    lh_cuda_tuning t = {grouped, 0, 0, 0, 0};
    lh_cuda_set_tuning(s->be, &t);
    double ms = time_ms(s->st, 10, run_moe, &m);
    int gst = 0;
    int eff = lh_cuda_get_tuning(s->be, &gst).moe_grouped;
    if (grouped && !eff) printf("  (cuBLAS refused the grouped GEMM, status %d)\n", gst);
    snprintf(what, sizeof what, "MoE op %lldK tokens, %s", (long long)n / 1024,
             eff ? "grouped GEMM" : "GEMM per expert");
    snprintf(rate, sizeof rate, "%.0f TFLOP/s (%.0f%% of dense)", flops / (ms * 1e-3) / 1e12, 100.0 * dense / ms);
    row(what, ms, "cuBLAS dense, same FLOPs", dense, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  }
  lh_cuda_tuning t = {0, 0, 0, 0, 0};
  lh_cuda_set_tuning(s->be, &t);
  printf("  (the slice below runs with per-expert GEMMs)\n");
  cudaFree(g1.a), cudaFree(g1.b), cudaFree(g1.c), cudaFree(g2.b);
}

/* Issue 10's "expert parallel or tensor-parallel experts: measure both", the compute half, on one
 * GPU: the expert GEMMs one rank of R runs for a chunk, with the rows the slice's router sent to
 * each expert (random weights, so near-uniform; a trained router is more skewed, which costs the
 * expert split and not the width split). Expert parallel: rank r runs experts [rE/R, (r+1)E/R) at
 * full width, and the layer waits for the busiest rank; tensor-parallel experts: every rank runs
 * every expert at width I/R. Both then all-reduce the same [n x hidden] fp32 sum, so the
 * communication is the same and not timed here. */
typedef struct split_ctx {
  cublasHandle_t h;
  int ng, width, hid;
  const int32_t *rows;
  void *x, *w1, *y1, *w2, *y2;
} split_ctx;
static void run_split(void *p) {
  split_ctx *c = p;
  for (int g = 0; g < c->ng; g++)
    if (c->rows[g]) cb(lh_cuda_gemm(c->h, c->x, c->hid, c->rows[g], c->hid, c->w1, 2 * c->width, c->y1, 2 * c->width, 0), "gemm");
  for (int g = 0; g < c->ng; g++)
    if (c->rows[g]) cb(lh_cuda_gemm(c->h, c->y1, c->width, c->rows[g], c->width, c->w2, c->hid, c->y2, c->hid, 0), "gemm");
}

static void bench_moe_split(slice *s, int64_t n) {
  header("MoE over R ranks, one rank's expert GEMMs (expert parallel vs tensor-parallel experts)");
  const lh_config *c = &s->cfg;
  const int E = c->n_experts, I = c->intermediate_size, hid = c->hidden_size;
  void *in = s->ops->act(s->be, 1), *out = s->ops->act(s->be, 2);
  ck(lh_cuda_fill_uniform_bf16(s->st, in, n * hid, 31, 1.7f), "fill");
  lk(s->ops->moe(s->be, 0, in, n, out, &s->err), &s->err, "moe");
  int32_t cnt[256];
  if (lh_cuda_moe_counts(s->be, cnt) != E) die("moe-split", "no routing counts");
  int32_t most = 0;
  for (int e = 0; e < E; e++) most = cnt[e] > most ? cnt[e] : most;
  printf("  rows per expert for %lldK tokens, top-%d: mean %.0f, max %d\n", (long long)n / 1024, c->top_k,
         (double)n * c->top_k / E, most);
  split_ctx x = {lh_cuda_cublas(s->be), 0, 0, hid, NULL, dmalloc((size_t)most * hid * 2),
                 dmalloc((size_t)2 * I * hid * 2), dmalloc((size_t)most * 2 * I * 2), dmalloc((size_t)hid * I * 2),
                 dmalloc((size_t)most * hid * 2)};
  ck(lh_cuda_fill_uniform_bf16(s->st, x.x, (int64_t)most * hid, 41, 1.0f), "fill");
  ck(lh_cuda_fill_uniform_bf16(s->st, x.w1, (int64_t)2 * I * hid, 42, 0.02f), "fill");
  ck(lh_cuda_fill_uniform_bf16(s->st, x.w2, (int64_t)hid * I, 43, 0.02f), "fill");
  x.ng = E, x.width = I, x.rows = cnt;
  const double one = time_ms(s->st, 5, run_split, &x), flops = 3.0 * 2 * 2.0 * n * hid * I;
  char what[96], rate[96];
  snprintf(rate, sizeof rate, "%.0f TFLOP/s", flops / (one * 1e-3) / 1e12);
  row("one GPU, all 32 experts", one, "", NAN, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  for (int R = 2; R <= 8; R *= 2) {
    double ep = 0, sum = 0;
    for (int r = 0; r < R; r++) { /* expert parallel: the busiest rank sets the time */
      x.ng = E / R, x.width = I, x.rows = cnt + r * (E / R);
      const double t = time_ms(s->st, 5, run_split, &x);
      ep = t > ep ? t : ep, sum += t;
    }
    x.ng = E, x.width = I / R, x.rows = cnt;
    const double tp = time_ms(s->st, 5, run_split, &x);
    snprintf(what, sizeof what, "R=%d expert parallel (busiest of %d ranks)", R, R);
    snprintf(rate, sizeof rate, "mean rank %.3f ms; ideal one/R %.3f ms", sum / R, one / R);
    row(what, ep, "tensor-parallel experts", tp, rate, one / R);
  }
  cudaFree(x.x), cudaFree(x.w1), cudaFree(x.y1), cudaFree(x.w2), cudaFree(x.y2);
}

static double slice_linear_flops(const lh_config *c) {
  const double hid = c->hidden_size, Hd = (double)c->n_heads * c->head_dim, kv = (double)c->n_kv_heads * c->head_dim;
  double f = 0;
  for (int l = 0; l < c->n_layers; l++) {
    if (c->layer_kind[l] == LH_LAYER_LIGHTNING) f += 2 * hid * 4 * Hd + 2 * Hd * hid;
    else f += 2 * hid * (Hd + 2 * kv) + 2 * Hd * hid;
    f += 2 * hid * c->n_experts + c->top_k * (2 * hid * 2 * c->intermediate_size + 2.0 * c->intermediate_size * hid);
  }
  return f;
}

/* --checkpoint DB: one more prefill run that checkpoints after every chunk into the SQLite store at
 * DB through the asynchronous writer, as the runner does: the states and the chunk's KV pages go
 * to pinned memory on the copy stream (to_host_async) while the next chunk computes; the previous
 * chunk's checkpoint is handed to the writer thread once its copies are done. The KV pages are
 * copied as they are (the same bytes as the runner's row export, not its row order), and the
 * logits are left zero. */
static const char *g_ckpt_db;
static const char g_bench_model_id[] = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";
typedef struct ckpt_run {
  lh_store_writer *w;
  lh_store_cursor cur;
  lh_state_layout lay;
  lh_store_ckpt *pending;
  double bytes;
} ckpt_run;
static void ckpt_open(slice *s, ckpt_run *r, const char *db) {
  memset(r, 0, sizeof *r);
  lh_error err;
  lh_store_params sp = lh_store_default_params();
  lh_store *st;
  lk(lh_store_open(db, &sp, &st, &err), &err, "store open");
  lk(lh_store_model_put(st, g_bench_model_id, "bench_cuda slice (random weights)", NULL, &err), &err, "model put");
  lh_store_close(st);
  lh_store_writer_params wp = lh_store_writer_default_params();
  lk(lh_store_writer_open(db, &wp, &r->w, &err), &err, "writer open");
  lh_store_cursor_init(&r->cur, g_bench_model_id, 0);
  r->lay.n_lightning = s->cfg.n_lightning;
  r->lay.lightning_bytes = (size_t)H * D * D * 4;
  r->lay.n_softmax = s->cfg.n_softmax;
  r->lay.kv_dtype = LH_BF16;
  r->lay.kv_row_bytes = (size_t)2 * HKV * D * 2;
  r->lay.vocab_size = s->cfg.vocab_size;
}
/* after the forward of tokens [p, p + n) */
static void ckpt_chunk(slice *s, ckpt_run *r, seqm *q, const int32_t *tok, int64_t p, int64_t n) {
  lh_error err;
  if (r->pending) { /* the previous chunk's copies ran while this chunk computed */
    lk(s->ops->wait_host(s->be, &err), &err, "wait_host");
    lk(lh_store_writer_submit(r->w, r->pending, &r->cur, &err), &err, "submit");
    r->pending = NULL;
  }
  lh_store_cursor_feed(&r->cur, tok + p, n);
  lh_store_ckpt *ck;
  lk(lh_store_writer_begin(r->w, &r->lay, &r->cur, &ck, &err), &err, "writer begin");
  for (int i = 0; i < r->lay.n_lightning; i++)
    lk(s->ops->to_host_async(s->be, lh_store_ckpt_lightning(ck, i), q->light[i], r->lay.lightning_bytes, &err), &err,
       "state copy");
  const size_t pb = (size_t)2 * HKV * LH_KV_PAGE_TOKENS * D * 2;
  unsigned char *kv = lh_store_ckpt_kv(ck, 0);
  const int64_t p0 = r->cur.parent_pos;
  if (p0 % LH_KV_PAGE_TOKENS || n % LH_KV_PAGE_TOKENS) die("checkpoint", "chunks must be multiples of 256 tokens");
  for (int64_t pg = p0 / LH_KV_PAGE_TOKENS; pg < (p + n) / LH_KV_PAGE_TOKENS; pg++)
    lk(s->ops->to_host_async(s->be, kv + (size_t)(pg - p0 / LH_KV_PAGE_TOKENS) * pb, q->tables[0][pg], pb, &err), &err,
       "kv copy");
  memset(lh_store_ckpt_logits(ck), 0, (size_t)r->lay.vocab_size * 4);
  r->bytes += (double)lh_store_ckpt_bytes(ck);
  r->pending = ck;
}
static void ckpt_close(slice *s, ckpt_run *r) {
  lh_error err;
  if (r->pending) {
    lk(s->ops->wait_host(s->be, &err), &err, "wait_host");
    lk(lh_store_writer_submit(r->w, r->pending, &r->cur, &err), &err, "submit");
  }
  lk(lh_store_writer_close(r->w, &err), &err, "writer close");
}

/* ---- a prefill that outlives one process: --resumable DB, --resume-check DB ----------------------
 *
 * Issue 8's 4M-token row takes about 584 s of prefill (bench/NOTES.md), and one device call has
 * 600 s for everything, so it is run the way a long job runs in the product: checkpointed after
 * every chunk, killed (here by the call's time limit), and resumed from the last committed
 * checkpoint by the next process. The store is on the device's disk, in an ignored folder of the
 * repo that the run tool keeps between calls while the machine is warm.
 *
 * The times: DB.times gets "tokens seconds" after every chunk, where seconds are prefill time
 * since token 0 summed over the runs (each run adds its own compute time to the time the file
 * gives for the checkpoint it resumed from). A resumed run therefore reports the whole prefill:
 * the earlier runs' time up to the checkpoint it loaded, plus its own. Chunks computed after that
 * checkpoint by a killed run are computed again and not counted. Loading the checkpoint is not
 * prefill; it is printed on its own line.
 *
 * The resumed KV pages are the bytes the checkpoints hold (ckpt_chunk copies whole device pages,
 * so row t of the chain is row t % 256 of page t / 256), and the lightning states are the
 * checkpoint's; --resume-check runs the same load on a small prefill and compares the logits. */
typedef struct load_ctx {
  seqm *q;
  size_t row_bytes, state_bytes;
} load_ctx;
static lh_status load_part(void *user, lh_store_part part, int layer, int64_t t0, int64_t t1, const void *data,
                           size_t nbytes, lh_error *err) {
  load_ctx *L = user;
  if (part == LH_PART_LIGHTNING) {
    if (layer < 0 || layer >= 8 || nbytes != L->state_bytes)
      return lh_error_set(err, LH_ECORRUPT, "lightning state %d: %zu bytes, not %zu", layer, nbytes, L->state_bytes);
    ck(cudaMemcpy(L->q->light[layer], data, nbytes, cudaMemcpyHostToDevice), "state upload");
  } else if (part == LH_PART_KV) {
    if (layer != 0 || nbytes != (size_t)(t1 - t0) * L->row_bytes)
      return lh_error_set(err, LH_ECORRUPT, "KV rows [%lld, %lld) of layer %d: %zu bytes", (long long)t0,
                          (long long)t1, layer, nbytes);
    const unsigned char *src = data;
    for (int64_t t = t0; t < t1;) {
      const int64_t pg = t / LH_KV_PAGE_TOKENS, off = t % LH_KV_PAGE_TOKENS;
      const int64_t n = t1 - t < LH_KV_PAGE_TOKENS - off ? t1 - t : LH_KV_PAGE_TOKENS - off;
      ck(cudaMemcpy((unsigned char *)L->q->tables[0][pg] + off * L->row_bytes, src, n * L->row_bytes,
                    cudaMemcpyHostToDevice),
         "KV upload");
      src += n * L->row_bytes;
      t += n;
    }
  }
  return LH_OK; /* the logits are not needed: the next chunk's forward makes its own */
}

/* Load DB's longest checkpoint of tok[0:upto] into q and put r's cursor there; returns its position
 * (0: nothing to resume). */
static int64_t resume_from(slice *s, seqm *q, ckpt_run *r, const char *db, const int32_t *tok, int64_t upto) {
  lh_error err;
  lh_store_params sp = lh_store_default_params();
  lh_store *st;
  lk(lh_store_open(db, &sp, &st, &err), &err, "store open");
  int64_t pos = 0, id = 0;
  lk(lh_store_prefix_lookup(st, g_bench_model_id, tok, upto, &pos, &id, &err), &err, "prefix lookup");
  if (pos > 0) {
    load_ctx L = {q, r->lay.kv_row_bytes, r->lay.lightning_bytes};
    lk(lh_store_ckpt_load(st, id, load_part, &L, &err), &err, "checkpoint load");
    lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
    lh_store_cursor_feed(&r->cur, tok, pos);
    lh_store_cursor_checkpointed(&r->cur);
  }
  lh_store_close(st);
  return pos;
}

/* Prefill q over tokens [from, to) in chunks with a checkpoint after each. With times, every
 * chunk is synchronised, printed and appended there as "tokens seconds" (base_s + this span's
 * time). Returns the span's seconds. */
static double prefill_span(slice *s, seqm *q, ckpt_run *r, const int32_t *tok, int64_t from, int64_t to,
                           int64_t chunk, FILE *times, double base_s) {
  double acc[T_NK] = {0};
  const double t0 = lh_now();
  for (int64_t p = from; p < to; p += chunk) {
    const int64_t n = to - p < chunk ? to - p : chunk;
    lh_segment sg = {&q->mem, 0, n, p};
    lh_batch b = {n, 1, &sg};
    forward(s, tok + p, &b, NULL, acc);
    ckpt_chunk(s, r, q, tok, p, n);
    if (times) {
      lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
      const double at = base_s + (lh_now() - t0);
      printf("    %lldK tokens at %.1f s\n", (long long)(p + n) / 1024, at);
      fprintf(times, "%lld %.3f\n", (long long)(p + n), at);
      fflush(times);
    }
  }
  lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
  return lh_now() - t0;
}

static void slice_tokens(const lh_config *c, int32_t *tok, int64_t n) {
  for (int64_t i = 0; i < n; i++) tok[i] = (int32_t)((i * 2654435761u) % (uint32_t)c->vocab_size);
}

/* The seconds DB.times gives for tokens pos (NAN when it has no line for them). */
static double times_at(const char *path, int64_t pos) {
  FILE *f = fopen(path, "r");
  if (!f) return NAN;
  long long p;
  double sec, at = NAN;
  while (fscanf(f, "%lld %lf", &p, &sec) == 2)
    if (p == pos) at = sec; /* the last line wins: a later run recomputed these chunks */
  fclose(f);
  return at;
}

static void bench_resumable(slice *s, int64_t tokens, int64_t chunk, const char *db) {
  header("8-layer real-width slice, resumable prefill (a checkpoint after every chunk)");
  const lh_config *c = &s->cfg;
  if (chunk % LH_KV_PAGE_TOKENS) die("resumable", "the chunk must be a multiple of 256 tokens");
  int32_t *tok = malloc((size_t)tokens * 4);
  slice_tokens(c, tok, tokens);
  seqm q;
  seq_make(s, &q, tokens + 64);
  for (int i = 0; i < c->n_lightning; i++) ck(cudaMemsetAsync(q.light[i], 0, (size_t)H * D * D * 4, s->st), "memset");
  ckpt_run cr;
  ckpt_open(s, &cr, db);
  const double l0 = lh_now();
  const int64_t from = resume_from(s, &q, &cr, db, tok, tokens);
  char tpath[4096];
  snprintf(tpath, sizeof tpath, "%s.times", db);
  double base = 0;
  if (from > 0) {
    base = times_at(tpath, from);
    printf("  resumed at %lldK tokens from %s: checkpoint loaded in %.1f s (not counted); ", (long long)from / 1024,
           db, lh_now() - l0);
    if (isnan(base)) printf("%s has no time for them, so times below start at 0 there\n", tpath);
    else printf("the earlier runs took %.1f s to there\n", base);
  } else {
    printf("  no checkpoint of these tokens in %s: starting at token 0\n", db);
  }
  FILE *times = fopen(tpath, "a");
  if (!times) die("resumable", "cannot append to the .times file beside the store");
  const double span = prefill_span(s, &q, &cr, tok, from, tokens, chunk, times, isnan(base) ? 0 : base);
  fclose(times);
  ckpt_close(s, &cr);
  const double total = base + span;
  const double lin = slice_linear_flops(c), att = 4.0 * D * H * ((double)tokens * (tokens + 1) / 2) * c->n_softmax;
  const double flops = lin * tokens + att + 4.0 * D * D * H * (double)tokens * c->n_lightning;
  char what[96], rate[160];
  snprintf(what, sizeof what, "prefill %lldK tokens, chunks of %lldK, checkpointed", (long long)tokens / 1024,
           (long long)chunk / 1024);
  if (isnan(base))
    snprintf(rate, sizeof rate, "this run %.1f s from %lldK; the earlier runs' time is not in DB.times", span,
             (long long)from / 1024);
  else
    snprintf(rate, sizeof rate, "%.1f s in all (this run %.1f s from %lldK): %.0f model TFLOP/s, MFU %.0f%%", total,
             span, (long long)from / 1024, flops / total / 1e12, 100.0 * flops / total / 1e12 / g_gemm_tflops);
  row(what, isnan(base) ? NAN : total * 1e3, "", NAN, rate, flops / (g_gemm_tflops * 1e12) * 1e3);
  printf("  model FLOPs %.3e (linear %.3e, softmax attention %.3e); %.2f GB of checkpoints written by this run\n",
         flops, lin * tokens, att, cr.bytes / 1e9);
  lh_cuda_mem mi;
  lh_cuda_mem_info(s->be, &mi);
  printf("  device memory: weights %.1f GB, workspace %.2f GB, states+KV %.2f GB, device in use %.1f GB\n",
         mi.weights / 1e9, mi.workspace / 1e9, mi.state_live / 1e9, mi.device_used / 1e9);
  free(tok);
}

/* --resume-check DB: prefill tokens straight through (checkpointing into DB, which should be new),
 * then a second sequence resumed from the checkpoint at tokens / 2 and prefilled to the end; the
 * last token's logits must be equal bit for bit (the same ops on the same bytes). */
static int resume_check(slice *s, int64_t tokens, int64_t chunk, const char *db) {
  header("resumable prefill: a resumed run against a straight one");
  const lh_config *c = &s->cfg;
  const int64_t half = tokens / 2 / chunk * chunk;
  if (half <= 0 || chunk % LH_KV_PAGE_TOKENS) die("resume-check", "needs tokens >= 2 chunks of a multiple of 256");
  int32_t *tok = malloc((size_t)tokens * 4);
  slice_tokens(c, tok, tokens);
  float *lg[2];
  for (int k = 0; k < 2; k++) {
    seqm q;
    seq_make(s, &q, tokens + 64);
    for (int i = 0; i < c->n_lightning; i++)
      ck(cudaMemsetAsync(q.light[i], 0, (size_t)H * D * D * 4, s->st), "memset");
    ckpt_run cr;
    ckpt_open(s, &cr, db);
    const int64_t from = k ? resume_from(s, &q, &cr, db, tok, half) : 0;
    if (k && from != half) die("resume-check", "the halfway checkpoint is not in the store (was it new?)");
    prefill_span(s, &q, &cr, tok, from, tokens, chunk, NULL, 0);
    ckpt_close(s, &cr);
    int64_t last = (tokens - 1) % chunk;
    lg[k] = malloc((size_t)c->vocab_size * 4);
    lk(s->ops->logits(s->be, s->ops->act(s->be, 0), &last, 1, lg[k], &s->err), &s->err, "logits");
    for (int i = 0; i < c->n_lightning; i++) s->ops->free(s->be, q.light[i]);
    for (int64_t p = 0; p < q.mem.n_pages; p++) s->ops->free(s->be, q.tables[0][p]);
    free(q.tables[0]);
  }
  int64_t diff = 0;
  double maxd = 0;
  for (int64_t i = 0; i < c->vocab_size; i++) {
    diff += memcmp(&lg[0][i], &lg[1][i], 4) != 0;
    if (fabs(lg[0][i] - lg[1][i]) > maxd) maxd = fabs(lg[0][i] - lg[1][i]);
  }
  printf("  %lldK tokens straight vs resumed at %lldK: %lld of %d logits differ (max |diff| %.3g): %s\n",
         (long long)tokens / 1024, (long long)half / 1024, (long long)diff, c->vocab_size, maxd,
         diff ? "FAIL" : "PASS, bit for bit");
  free(lg[0]);
  free(lg[1]);
  free(tok);
  return diff != 0;
}

/* --logits FILE: the slice's logits at the last LOGIT_ROWS positions, written to FILE when it does
 * not exist and held against it when it does. A run on one GPU writes it; the same slice over R
 * ranks (which fill their shares of the same random model) compares: issue 10's "logits of a TP
 * run equal the single-GPU run within bf16 bounds on a random real-width slice". */
enum { LOGIT_ROWS = 16 };
static const char *g_logits;
static int g_rank, g_logits_rc;
static void logits_file(slice *s, int64_t tokens, int64_t chunk) {
  const int64_t V = s->cfg.vocab_size, n = tokens - (tokens - 1) / chunk * chunk; /* rows in the last chunk */
  const int64_t k = n < LOGIT_ROWS ? n : LOGIT_ROWS;
  int64_t rows[LOGIT_ROWS];
  for (int64_t i = 0; i < k; i++) rows[i] = n - k + i;
  float *got = malloc(sizeof(float) * (size_t)(k * V)), *want = malloc(sizeof(float) * (size_t)(k * V));
  if (!got || !want) die("logits", "out of memory");
  lk(s->ops->logits(s->be, s->ops->act(s->be, 0), rows, k, got, &s->err), &s->err, "logits");
  lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
  if (g_rank == 0) {
    FILE *f = fopen(g_logits, "rb");
    if (!f) {
      f = fopen(g_logits, "wb");
      if (!f || fwrite(got, sizeof(float), (size_t)(k * V), f) != (size_t)(k * V) || fclose(f))
        die("logits", "cannot write the --logits file");
      printf("  logits of the last %lld positions written to %s (%d ranks)\n", (long long)k, g_logits, s->ranks);
    } else {
      size_t r = fread(want, sizeof(float), (size_t)(k * V), f);
      fclose(f);
      if (r != (size_t)(k * V)) die("logits", "the --logits file is from another run (size differs)");
      double num = 0, den = 0, maxd = 0;
      int64_t agree = 0;
      for (int64_t i = 0; i < k; i++) {
        int64_t a = 0, b = 0;
        for (int64_t j = 0; j < V; j++) {
          const double g = got[i * V + j], w = want[i * V + j];
          num += (g - w) * (g - w), den += w * w;
          if (fabs(g - w) > maxd) maxd = fabs(g - w);
          if (got[i * V + j] > got[i * V + a]) a = j;
          if (want[i * V + j] > want[i * V + b]) b = j;
        }
        agree += a == b;
      }
      const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
      g_logits_rc = !(rel <= 2e-2);
      printf("  logits over %d ranks vs %s: rel L2 %.3g over the last %lld positions (bound 2e-2), max |diff| %.3g, "
             "argmax agrees at %lld of %lld: %s\n", s->ranks, g_logits, rel, (long long)k, maxd, (long long)agree,
             (long long)k, g_logits_rc ? "FAIL" : "PASS");
    }
  }
  free(got), free(want);
}

static void bench_slice(slice *s, int64_t tokens, int64_t chunk, int quick) {
  header("8-layer real-width slice (7 lightning + 1 softmax), random weights on the GPU");
  const lh_config *c = &s->cfg;
  int32_t *tok = malloc((size_t)tokens * 4);
  slice_tokens(c, tok, tokens);
  cudaEvent_t ev[64];
  for (int i = 0; i < 64; i++) ck(cudaEventCreate(&ev[i]), "event");
  double acc[T_NK] = {0}, best = INFINITY;
  seqm q;
  seq_make(s, &q, tokens + 64);
  const double lin = slice_linear_flops(c);
  /* softmax FLOPs: 4 d H per (query, key) pair, causal; lightning core 4 d^2 H per token */
  const double att = 4.0 * D * H * ((double)tokens * (tokens + 1) / 2) * c->n_softmax;
  const double lc = 4.0 * D * D * H * (double)tokens * c->n_lightning;
  const double flops = lin * tokens + att + lc;
  /* With --checkpoint, the checkpointed run comes between two plain ones and is compared with their
   * mean: a run measured later is slower by itself (the board's power cap and temperature; bench/NOTES.md,
   * session 13), which a plain-then-checkpointed order had counted as the checkpoints' cost. */
  const int nrep = (quick ? 1 : 2) + (g_ckpt_db ? 2 : 0), ev_rep = quick ? -1 : 1;
  double ckpt_ms = NAN, ckpt_wall_ms = NAN, plain_ms[8] = {0};
  ckpt_run cr;
  for (int rep = 0; rep < nrep; rep++) {
    const int with_ckpt = g_ckpt_db && rep == nrep - 2;
    if (with_ckpt) ckpt_open(s, &cr, g_ckpt_db);
    double a2[T_NK] = {0};
    for (int i = 0; i < s->cfg.n_lightning; i++)
      ck(cudaMemsetAsync(q.light[i], 0, (size_t)s->hl * D * D * 4, s->st), "memset");
    ck(cudaStreamSynchronize(s->st), "sync");
    double build0 = 0, build1 = 0; /* cuDNN plan building in this run: once per process, not per prefill */
    lh_cuda_cudnn_status(s->be, NULL, &build0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t p = 0; p < tokens; p += chunk) {
      int64_t n = tokens - p < chunk ? tokens - p : chunk;
      lh_segment sg = {&q.mem, 0, n, p};
      lh_batch b = {n, 1, &sg};
      forward(s, tok + p, &b, rep == ev_rep ? ev : NULL, a2);
      if (with_ckpt) ckpt_chunk(s, &cr, &q, tok, p, n);
      /* past 1M tokens a run takes minutes: say how far it got, so a run cut short by the device
       * call's time limit still reports the time to each point */
      if (tokens > (1 << 20) && (p + n) % (1 << 19) == 0) {
        lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
        struct timespec tp;
        clock_gettime(CLOCK_MONOTONIC, &tp);
        printf("    run %d: %lldK tokens at %.1f s\n", rep, (long long)(p + n) / 1024,
               (tp.tv_sec - t0.tv_sec) + (tp.tv_nsec - t0.tv_nsec) * 1e-9);
        fflush(stdout);
      }
    }
    int64_t last = (tokens - 1) % chunk;
    float *logits = malloc((size_t)c->vocab_size * 4);
    lk(s->ops->logits(s->be, s->ops->act(s->be, 0), &last, 1, logits, &s->err), &s->err, "logits");
    free(logits);
    lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rep == 0 && g_logits) logits_file(s, tokens, chunk);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    lh_cuda_cudnn_status(s->be, NULL, &build1);
    const double build_ms = (build1 - build0) * 1e3;
    if (build_ms > 0) {
      printf("  run %d: %.1f ms including %.1f ms of cuDNN plan building (cached for later runs); counted as %.1f ms\n",
             rep, ms, build_ms, ms - build_ms);
      ms -= build_ms;
    }
    if (with_ckpt) {
      /* prefill time with checkpoints: up to the last chunk's compute; then the writer drains */
      ckpt_ms = ms;
      ckpt_close(s, &cr);
      struct timespec t2;
      clock_gettime(CLOCK_MONOTONIC, &t2);
      ckpt_wall_ms = (t2.tv_sec - t0.tv_sec) * 1e3 + (t2.tv_nsec - t0.tv_nsec) * 1e-6;
      printf("  run %d: %.1f ms with a checkpoint after every chunk (%.2f GB to %s; all committed at %.1f ms)\n", rep,
             ms, cr.bytes / 1e9, g_ckpt_db, ckpt_wall_ms);
      continue;
    }
    if (rep == ev_rep) memcpy(acc, a2, sizeof acc);
    plain_ms[rep] = ms;
    if (ms < best) best = ms;
    if (build_ms <= 0) printf("  run %d: %.1f ms%s\n", rep, ms, rep == ev_rep ? " (with per-op events)" : "");
  }
  q.pos = tokens;
  char what[96], rate[192];
  snprintf(what, sizeof what, "prefill %lldK tokens, chunks of %lldK", (long long)tokens / 1024, (long long)chunk / 1024);
  /* over R ranks: the whole model's FLOPs against R GPUs' GEMM rate (this rank's, measured here) */
  const double peak = g_gemm_tflops * s->ranks;
  if (s->ranks > 1)
    snprintf(rate, sizeof rate, "%.0f tokens/s on %d GPUs, %.0f model TFLOP/s, MFU %.0f%% of %d x measured GEMM",
             tokens / (best * 1e-3), s->ranks, flops / (best * 1e-3) / 1e12,
             100.0 * flops / (best * 1e-3) / 1e12 / peak, s->ranks);
  else
    snprintf(rate, sizeof rate, "%.0f tokens/s, %.0f model TFLOP/s, MFU %.0f%% of measured GEMM",
             tokens / (best * 1e-3), flops / (best * 1e-3) / 1e12, 100.0 * flops / (best * 1e-3) / 1e12 / peak);
  /* the peer: tools/bench_peers/slice_hf.py, measured at these tokens or fitted and extrapolated */
  char hk[64];
  snprintf(hk, sizeof hk, "slice_hf_%lld", (long long)tokens);
  double hf = peer(hk);
  const char *hname = "transformers, same slice";
  if (isnan(hf)) {
    snprintf(hk, sizeof hk, "slice_hf_%lld_extrap", (long long)tokens);
    hf = peer(hk);
    hname = isnan(hf) ? "transformers (not in peers file)" : "transformers, EXTRAPOLATED";
  }
  row(what, best, hname, hf, rate, flops / (peak * 1e12) * 1e3);
  printf("  model FLOPs %.3e (linear %.3e, softmax attention %.3e, lightning core %.3e)\n", flops, lin * tokens, att, lc);
  if (g_ckpt_db) {
    const double before = plain_ms[nrep - 3], after = plain_ms[nrep - 1], base = 0.5 * (before + after);
    snprintf(rate, sizeof rate,
             "%.1f%% slower than without (goal < 5%%; plain runs before / after it %.1f / %.1f ms); "
             "%.1f%% to the last commit",
             100.0 * (ckpt_ms / base - 1), before, after, 100.0 * (ckpt_wall_ms / base - 1));
    row("  same prefill, checkpoint after every chunk", ckpt_ms, "mean of the plain runs around it", base, rate, NAN);
  }
  {
    int64_t calls = 0;
    double build_s = 0;
    const char *why = lh_cuda_cudnn_status(s->be, &calls, &build_s);
    printf("  softmax prefill through cuDNN: %lld segment calls, %.2f s of plan building (in the first run)%s%s\n",
           (long long)calls, build_s, why[0] ? "; last refusal: " : "", why);
  }
  if (!quick) {
    double tot = 0;
    for (int k = 0; k < T_NK; k++) tot += acc[k];
    for (int k = 0; k < T_NK; k++) printf("  %-24s %9.1f ms  %5.1f%%\n", t_names[k], acc[k], 100 * acc[k] / tot);
  }
  lh_cuda_mem mi;
  lh_cuda_mem_info(s->be, &mi);
  printf("  device memory: weights %.1f GB, workspace %.2f GB, states+KV %.2f GB, device in use %.1f GB\n",
         mi.weights / 1e9, mi.workspace / 1e9, mi.state_live / 1e9, mi.device_used / 1e9);

  /* Decode after the prefill: 1 sequence, then 16 forks of it together; each with the softmax decode
   * by units (the default: the forks read their shared prefix once) and with the scalar kernel it
   * replaced (lh_cuda_tuning.decode 2). */
  header("decode after the prefill (one token per sequence per step)");
  const lh_cuda_tuning tune0 = lh_cuda_get_tuning(s->be, NULL);
  for (int v = 0; v < 4; v++) {
    const int nf = v < 2 ? 1 : 16, scalar = v & 1;
    lh_cuda_tuning tv = tune0;
    tv.decode = scalar ? 2 : 0;
    lh_cuda_set_tuning(s->be, &tv);
    seqm f[16];
    for (int i = 0; i < nf; i++) seq_fork(s, &q, &f[i], tokens + 64);
    lh_segment sg[16];
    int32_t dt[16];
    for (int i = 0; i < nf; i++) dt[i] = (int32_t)(i + 1);
    /* 8 timed steps after a warm-up; then 4 more with per-kind events (issue 8: the lightning layers'
     * share of a step should not grow with the context, the softmax layer's should) */
    const int steps = 8, ev_steps = 4;
    double ms = 0, per[T_NK] = {0};
    for (int step = 0; step < steps + 1 + ev_steps; step++) {
      for (int i = 0; i < nf; i++) sg[i] = (lh_segment){&f[i].mem, i, 1, f[i].pos};
      lh_batch b = {nf, nf, sg};
      lk(lh_cuda_sync(s->be, &s->err), &s->err, "sync");
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      forward(s, dt, &b, step > steps ? ev : NULL, per);
      int64_t rows[16];
      for (int i = 0; i < nf; i++) rows[i] = i;
      int32_t next[16];
      lh_sampler_params sp = {0};
      lk(lh_cuda_next_tokens(s->be, s->ops->act(s->be, 0), rows, nf, &sp, NULL, next, &s->err), &s->err, "tokens");
      clock_gettime(CLOCK_MONOTONIC, &t1);
      if (step && step <= steps) ms += (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
      for (int i = 0; i < nf; i++) f[i].pos++, dt[i] = next[i];
    }
    ms /= steps;
    snprintf(what, sizeof what, "decode step, %d sequence%s at %lldK context%s", nf, nf > 1 ? "s" : "",
             (long long)tokens / 1024, scalar ? " (scalar softmax decode)" : "");
    snprintf(rate, sizeof rate, "%.1f tokens/s per sequence, %.1f total", 1e3 / ms, nf * 1e3 / ms);
    /* the floor of a decode step is reading the active weights once: attention + 2 experts per layer */
    row(what, ms, "", NAN, rate, NAN);
    printf("    per step, from events (%d more steps): lightning blocks %.3f ms (%d layers), softmax blocks %.3f ms, MoE "
           "blocks %.3f ms, embed/norms/residuals %.3f ms\n",
           ev_steps, per[T_LIGHT] / ev_steps, s->cfg.n_lightning, per[T_SOFT] / ev_steps, per[T_MOE] / ev_steps,
           per[T_NORM] / ev_steps);
    for (int i = 0; i < nf; i++) {
      for (int l = 0; l < s->cfg.n_lightning; l++) s->ops->free(s->be, f[i].light[l]);
      int64_t shared = q.pos / LH_KV_PAGE_TOKENS;
      for (int64_t p = shared; p < f[i].mem.n_pages; p++) s->ops->free(s->be, f[i].tables[0][p]);
      free(f[i].tables[0]);
    }
  }
  lh_cuda_set_tuning(s->be, &tune0);
  for (int i = 0; i < 64; i++) cudaEventDestroy(ev[i]);
  free(tok);
}

int main(int argc, char **argv) {
  /* Started as R ranks (mpirun -np R, or LH_WORLD_SIZE / LH_RANK / LH_RENDEZVOUS: engine/comm.h),
   * every rank runs this same program on its share of the slice (issue 10's scaling table):
   * rank 0 prints; the sums cross GPUs through NCCL inside the backend's operations. */
  lh_comm *world = NULL;
  lh_error werr;
  if (lh_comm_init(&argc, &argv, &world, &werr)) die("world", werr.msg);
  const int ranks = world ? lh_comm_size(world) : 1;
  g_rank = world ? lh_comm_rank(world) : 0;
  if (world && lh_comm_rank(world) > 0 && !freopen("/dev/null", "w", stdout)) die("world", "cannot silence a rank");
  const char *peers = NULL;
  int quick = 0;
  const char *only = "lightning,attention,moe,slice";
  const char *resumable = NULL, *check = NULL;
  int64_t tokens = 32768, chunk = 16384;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--peers") && i + 1 < argc) peers = argv[++i];
    else if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--attn-n") && i + 1 < argc) g_attn_n = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--lightning-cut") && i + 1 < argc) g_light_cut = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--lightning-tokens") && i + 1 < argc) g_light_tokens = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--print-reps")) g_print_reps = 1;
    else if (!strcmp(argv[i], "--attn-decode-only")) g_attn_decode_only = 1;
    else if (!strcmp(argv[i], "--lightning-handover") && i + 1 < argc) g_light_hand = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--checkpoint") && i + 1 < argc) g_ckpt_db = argv[++i];
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--resumable") && i + 1 < argc) resumable = argv[++i];
    else if (!strcmp(argv[i], "--resume-check") && i + 1 < argc) check = argv[++i];
    else if (!strcmp(argv[i], "--logits") && i + 1 < argc) g_logits = argv[++i];
    else {
      fprintf(stderr, "usage: bench_cuda [--peers FILE] [--quick] [--only SECTIONS] [--tokens N] [--chunk N] "
                      "[--checkpoint DB] [--resumable DB] [--resume-check DB] [--logits FILE] [--lightning-cut Q] "
                      "[--lightning-handover M] [--lightning-tokens N] [--print-reps] [--attn-decode-only]\n");
      return 2;
    }
  }
  if (check || resumable) only = ""; /* those are the whole run: no other section */
  if (ranks > 1) {
    if (check || resumable || g_ckpt_db)
      die("ranks", "--checkpoint, --resumable and --resume-check run on one GPU only; start one process");
    only = "slice"; /* the other sections time one GPU's kernels */
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  char why[256];
  if (!lh_cuda_available(why, sizeof why)) {
    printf("bench_cuda: %s; nothing to measure\n", why);
    return 0;
  }
  if (peers) load_peers(peers);
  struct cudaDeviceProp prop;
  ck(cudaGetDeviceProperties(&prop, 0), "properties");
  printf("# bench_cuda on %s (%d SMs, %.0f GB)\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1e9);

  slice s = {0};
  const int with_slice = ranks > 1 || check || resumable || strstr(only, "moe") || strstr(only, "slice");
  if (ranks == 1) {
    /* The sections that need no slice run first, on a stream of their own: with the slice's random
     * weights (91 GB) made, the lightning section would not have the memory for 1M tokens (64 GB of
     * q/k/v and o). Over ranks the slice comes first, since opening it picks the rank's GPU. */
    cudaStream_t st;
    cublasHandle_t blas = NULL;
    ck(cudaStreamCreate(&st), "stream");
    cb(cublasCreate(&blas), "cublasCreate");
    cb(cublasSetStream(blas, st), "cublasSetStream");
    bench_ceilings(st, blas);
    if (strstr(only, "lightning")) bench_lightning(st, quick);
    if (strstr(only, "sdpa")) bench_sdpa_forms(st);
    if (strstr(only, "attention")) bench_attention(st, quick);
    cublasDestroy(blas);
    cudaStreamDestroy(st);
  }
  if (!with_slice) {
    lh_comm_finish(world);
    return g_logits_rc;
  }
  s.ops = &lh_backend_cuda;
  s.cfg = lh_config_minimax_text_01_slice(4096);
  lk(lh_cuda_open_random_ranks(&s.cfg, 42, chunk, 0, world, &s.be, &s.err), &s.err, "open the slice");
  lh_cuda_share(s.be, &s.hl, &s.gl, &s.ranks);
  if (ranks > 1) {
    int ne = 0, wi = 0;
    lh_cuda_moe_share(s.be, &ne, &wi);
    printf("# over %d ranks (each GPU: %d heads, %d kv heads, %d experts of width %d of %d)\n", ranks, s.hl, s.gl, ne,
           wi, s.cfg.intermediate_size);
  }
  s.w = lh_cuda_weights(s.be);
  s.st = lh_cuda_stream(s.be);
  if (ranks > 1) bench_ceilings(s.st, lh_cuda_cublas(s.be));
  if (strstr(only, "moe")) bench_moe(&s, chunk);
  if (strstr(only, "moe") && ranks == 1) bench_moe_split(&s, chunk);
  int rc = 0;
  if (check) rc = resume_check(&s, tokens, chunk, check);
  else if (resumable) bench_resumable(&s, tokens, chunk, resumable);
  else if (strstr(only, "slice")) bench_slice(&s, tokens, chunk, quick);
  s.ops->close(s.be);
  lh_comm_finish(world);
  return rc ? rc : g_logits_rc;
}
