/* bench_engine_cpu — CPU prefill speed of the engine next to OpenBLAS sgemm, and memory growth.
 *
 * A random MiniMax model built in memory (hidden 512, 8 heads x 64, 2 kv heads, 8 layers: 7
 * lightning + 1 softmax, 8 experts top-2 of intermediate 768, vocab 32000, fp32) is prefilled in
 * chunks of --chunk tokens (default 8192) with --threads threads (default 2). Printed:
 *   - prefill tokens/s and model GFLOP/s on one chunk from an empty state, next to OpenBLAS sgemm
 *     GFLOP/s measured in the same run with the same thread count (the better of a square 2048
 *     product and the model's largest projection shape), and their ratio (goal >= 50%);
 *   - decode latency after one chunk: one state, and a step of 8 forks in one lh_decode_batch;
 *   - where the time goes, per backend operation;
 *   - peak RSS after the first chunk and after --tokens tokens (default 65536), next to the KV
 *     bytes the state holds: the growth between the two should be the KV and nothing else.
 * Model FLOPs count what the model needs, not what the kernels do: 2 per multiply-add of every
 * projection and active expert, causal softmax attention (4 H d per key seen), the lightning
 * recurrence (4 H d^2 per token; the block-tiled kernels do more), the lm_head for one row.
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "engine/internal.h"
#include "tests/engine/random_model.h"
#include "util/fs.h"

static const lh_backend_ops *real;
static double op_time[8];
static const char *op_name[8] = {"embed", "rmsnorm", "residual+norm", "lightning attn", "softmax attn", "moe",
                                 "logits", "total"};

#define TIMED(i, call)                \
  do {                                \
    double t0_ = lh_now();            \
    lh_status st_ = (call);           \
    op_time[i] += lh_now() - t0_;     \
    return st_;                       \
  } while (0)

static lh_status t_embed(lh_backend *be, const int32_t *tok, int64_t n, void *x, lh_error *e) { TIMED(0, real->embed(be, tok, n, x, e)); }
static lh_status t_rms(lh_backend *be, const void *x, int64_t n, const lh_tensor *w, void *y, lh_error *e) {
  TIMED(1, real->rmsnorm(be, x, n, w, y, e));
}
static lh_status t_res(lh_backend *be, const void *h, const void *a, float al, float bt, int64_t n, void *x,
                       const lh_tensor *w, void *y, lh_error *e) {
  TIMED(2, real->residual(be, h, a, al, bt, n, x, w, y, e));
}
static lh_status t_lin(lh_backend *be, int l, int i, const void *h, const lh_batch *b, void *o, lh_error *e) {
  TIMED(3, real->attn_lightning(be, l, i, h, b, o, e));
}
static lh_status t_soft(lh_backend *be, int l, int i, const void *h, const lh_batch *b, void *o, lh_error *e) {
  TIMED(4, real->attn_softmax(be, l, i, h, b, o, e));
}
static lh_status t_moe(lh_backend *be, int l, const void *h, int64_t n, void *o, lh_error *e) { TIMED(5, real->moe(be, l, h, n, o, e)); }
static lh_status t_logits(lh_backend *be, const void *x, const int64_t *r, int64_t n, float *o, lh_error *e) {
  TIMED(6, real->logits(be, x, r, n, o, e));
}

static double peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

static double sgemm_gflops(int threads, int M, int N, int K, int transb) {
  openblas_set_num_threads(threads);
  float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * N * K), *C = malloc(sizeof(float) * M * N);
  uint64_t s = 1;
  for (long i = 0; i < (long)M * K; i++) A[i] = rm_uniform(&s);
  for (long i = 0; i < (long)N * K; i++) B[i] = rm_uniform(&s);
  double best = 0;
  for (int r = 0; r < 4; r++) {
    double t = lh_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transb ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, K, B,
                transb ? K : N, 0.0f, C, N);
    t = lh_now() - t;
    if (r && 2.0 * M * N * K / t / 1e9 > best) best = 2.0 * M * N * K / t / 1e9; /* first run warms up */
  }
  free(A), free(B), free(C);
  openblas_set_num_threads(1);
  return best;
}

/* model FLOPs for tokens at positions [p0, p0 + n) with logits for one row */
static double model_flops(const lh_config *c, int64_t p0, int64_t n) {
  double D = c->hidden_size, H = c->n_heads, d = c->head_dim, HD = H * d, KD = c->n_kv_heads * d;
  double E = c->n_experts, Ni = c->intermediate_size, k = c->top_k;
  double per_tok = 0, keys = (double)n * p0 + (double)n * (n + 1) / 2; /* keys seen, summed over the tokens */
  double attn = 0;
  for (int l = 0; l < c->n_layers; l++) {
    if (c->layer_kind[l] == LH_LAYER_LIGHTNING) per_tok += 2 * D * 4 * HD + 2 * HD * D + 4 * H * d * d;
    else {
      per_tok += 2 * D * (HD + 2 * KD) + 2 * HD * D;
      attn += 4 * H * d * keys;
    }
    per_tok += 2 * D * E + k * 3 * 2 * D * Ni;
  }
  return per_tok * n + attn + 2 * D * c->vocab_size;
}

int main(int argc, char **argv) {
  int threads = 2, chunk = 8192;
  int64_t total = 65536;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) total = atoll(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_engine_cpu [--threads N] [--chunk N] [--tokens N]\n");
      return 2;
    }
  }
  lh_config c = rm_default_config();
  c.vocab_size = 32000;
  c.hidden_size = 512;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.rotary_dim = 64;
  c.intermediate_size = 768;
  c.n_experts = 8;
  c.top_k = 2;
  c.block_size = 256;
  c.max_position_embeddings = 1 << 24;
  for (int l = 0; l < c.n_layers; l++) c.layer_kind[l] = (l + 1) % 8 == 0 ? LH_LAYER_SOFTMAX : LH_LAYER_LIGHTNING;


  lh_error err;
  lh_model *m = rm_build(&c, 1, chunk, threads, LH_F32, &err);
  if (!m) {
    fprintf(stderr, "bench_engine_cpu: %s\n", err.msg);
    return 1;
  }
  real = m->ops;
  lh_backend_ops timed = *real;
  timed.embed = t_embed, timed.rmsnorm = t_rms, timed.residual = t_res, timed.attn_lightning = t_lin;
  timed.attn_softmax = t_soft, timed.moe = t_moe, timed.logits = t_logits;
  m->ops = &timed;
  double rss_weights = peak_rss_mib();

  int32_t *tok = malloc(sizeof *tok * (size_t)(total > chunk ? total : chunk));
  uint64_t s = 9;
  for (int64_t i = 0; i < (total > chunk ? total : chunk); i++) tok[i] = (int32_t)(lh_splitmix64(&s) % 32000);
  float *logits = malloc(sizeof(float) * c.vocab_size);

  /* memory first, from a fresh heap: feed `total` tokens in chunks; peak RSS after the first
   * chunk and at the end */
  lh_state *st;
  if (lh_state_new(m, &st, &err)) return 1;
  double rss_first = 0, t0 = lh_now();
  for (int64_t p = 0; p < total; p += chunk) {
    int64_t n = total - p < chunk ? total - p : chunk;
    if (lh_prefill(st, tok + p, n, logits, NULL, &err)) {
      fprintf(stderr, "bench_engine_cpu: %s\n", err.msg);
      return 1;
    }
    if (p == 0) rss_first = peak_rss_mib();
  }
  double tall = lh_now() - t0, rss_end = peak_rss_mib();
  lh_state_free(st);
  memset(op_time, 0, sizeof op_time);

  /* speed: a warm-up chunk, then rounds of (peer sgemm, one chunk from an empty state); the
   * machine may be shared, so the peer is measured next to each of our runs and the table gives
   * the best of each and the median of the per-round ratios. The peer is OpenBLAS's own threaded
   * sgemm with the same thread count: the better of a square 2048 product and the model's qkv
   * projection shape. Measured after the memory run so its buffers do not count in the peaks. */
  enum { ROUNDS = 5 };
  double best = 1e30, best_ops[8] = {0}, peer = 0, ratios[ROUNDS];
  double flops = model_flops(&c, 0, chunk);
  for (int r = -1; r < ROUNDS; r++) {
    double pr = 0;
    if (r >= 0) {
      pr = sgemm_gflops(threads, 2048, 2048, 2048, 0);
      double p2 = sgemm_gflops(threads, chunk, 3 * c.n_heads * c.head_dim, c.hidden_size, 1);
      if (p2 > pr) pr = p2;
      if (pr > peer) peer = pr;
    }
    lh_state *st;
    if (lh_state_new(m, &st, &err)) return 1;
    memset(op_time, 0, sizeof op_time);
    double t = lh_now();
    if (lh_prefill(st, tok, chunk, logits, NULL, &err)) {
      fprintf(stderr, "bench_engine_cpu: %s\n", err.msg);
      return 1;
    }
    t = lh_now() - t;
    lh_state_free(st);
    if (r < 0) continue;
    ratios[r] = flops / t / 1e9 / pr;
    if (t < best) {
      best = t;
      memcpy(best_ops, op_time, sizeof best_ops);
    }
  }
  for (int i = 1; i < ROUNDS; i++) /* insertion sort for the median */
    for (int j = i; j > 0 && ratios[j - 1] > ratios[j]; j--) {
      double tmp = ratios[j];
      ratios[j] = ratios[j - 1];
      ratios[j - 1] = tmp;
    }
  double gf = flops / best / 1e9;

  /* decode after one chunk: one state, then a batch of 8 forks */
  double dec1 = 0, dec8 = 0;
  {
    lh_state *st, *f[8];
    if (lh_state_new(m, &st, &err) || lh_prefill(st, tok, chunk, logits, NULL, &err)) return 1;
    float *l8 = malloc(sizeof(float) * 8 * c.vocab_size);
    int32_t nt[8];
    double t = lh_now();
    for (int i = 0; i < 32; i++) {
      nt[0] = tok[i];
      if (lh_decode_batch(&st, 1, nt, logits, &err)) return 1;
    }
    dec1 = (lh_now() - t) / 32;
    for (int i = 0; i < 8; i++)
      if (lh_state_fork(st, &f[i], &err)) return 1;
    t = lh_now();
    for (int i = 0; i < 16; i++) {
      for (int k = 0; k < 8; k++) nt[k] = tok[100 * k + i];
      if (lh_decode_batch(f, 8, nt, l8, &err)) return 1;
    }
    dec8 = (lh_now() - t) / 16;
    for (int i = 0; i < 8; i++) lh_state_free(f[i]);
    lh_state_free(st);
    free(l8);
  }
  m->ops = real;

  printf("bench_engine_cpu: hidden %d, %d layers (%d lightning, %d softmax), %d heads x %d, %d kv heads, "
         "%d experts top-%d (I %d), vocab %d, fp32, %d threads, chunk %d\n\n",
         c.hidden_size, c.n_layers, m->cfg.n_lightning, m->cfg.n_softmax, c.n_heads, c.head_dim, c.n_kv_heads,
         c.n_experts, c.top_k, c.intermediate_size, c.vocab_size, threads, chunk);
  printf("| %-38s | %12s | %12s | %7s | %s |\n", "what", "ours", "peer", "ratio", "goal");
  printf("|%s|%s|%s|%s|%s|\n", "----------------------------------------", "--------------", "--------------",
         "---------", "------");
  printf("| %-38s | %12.0f | %12s | %7s | %s |\n", "prefill tokens/s (8K chunk, empty)", chunk / best, "-", "-", "-");
  printf("| %-38s | %12.1f | %12.1f | %6.0f%% | >= 50%% of sgemm |\n", "model GFLOP/s vs OpenBLAS sgemm (best)", gf,
         peer, 100 * gf / peer);
  printf("| %-38s | %12s | %12s | %6.0f%% | >= 50%% of sgemm |\n", "  median of per-round ratios", "-", "-",
         100 * ratios[ROUNDS / 2]);
  printf("| %-38s | %12.1f | %12s | %7s | %s |\n", "decode ms/token (1 state, ctx 8K)", dec1 * 1e3, "-", "-", "-");
  printf("| %-38s | %12.1f | %12s | %7s | %s |\n", "decode ms/step (8 forks batched)", dec8 * 1e3, "-", "-", "-");
  printf("\ntime per operation in the best %d-token chunk (%.3f s):\n", chunk, best);
  double sum = 0;
  for (int i = 0; i < 7; i++) sum += best_ops[i];
  for (int i = 0; i < 7; i++) printf("  %-16s %8.3f s  %5.1f%%\n", op_name[i], best_ops[i], 100 * best_ops[i] / sum);

  lh_state_layout lay;
  lh_state_get_layout(m, &lay);
  double kv_tok = (double)lay.n_softmax * lay.kv_row_bytes;
  printf("\nmemory (peak RSS; weights and workspace alone: %.0f MiB):\n", rss_weights);
  printf("| %-10s | %14s | %14s | %s |\n", "tokens", "peak RSS MiB", "KV held MiB", "prefill s");
  printf("|------------|----------------|----------------|-----------|\n");
  printf("| %-10d | %14.1f | %14.1f | %9s |\n", chunk, rss_first, chunk * kv_tok / 1048576.0, "-");
  printf("| %-10lld | %14.1f | %14.1f | %9.1f |\n", (long long)total, rss_end, total * kv_tok / 1048576.0, tall);
  printf("growth %.1f MiB for %.1f MiB more KV (KV pages of %d tokens are allocated whole)\n", rss_end - rss_first,
         (total - chunk) * kv_tok / 1048576.0, LH_KV_PAGE_TOKENS);
  printf("whole run: %.1f model GFLOP/s over %lld tokens\n", model_flops(&c, 0, total) / tall / 1e9, (long long)total);

  free(tok), free(logits);
  rm_free(m);
  return 0;
}
