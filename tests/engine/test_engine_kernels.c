/* test_engine_kernels.c — every kernel in kernels/cpu against a naive double-precision version of
 * its definition, on random inputs at several shapes; and the pool's promise that the thread
 * count never changes a bit.
 *
 * Bounds (fp32 kernels against double references): relative L2 error <= 1e-5 and max abs error
 * <= 1e-4 x max |ref| unless a case says otherwise; exp within 4 ulp of libm's expf.
 */
#include "tests/test.h"

#include <stdint.h>

#include "kernels/cpu/ops.h"
#include "util/rand.h"

static uint64_t rng = 12345;
static float urand(void) { return (float)(lh_splitmix64_uniform(&rng) * 2.0 - 1.0); }
static float *frand(size_t n, float scale) {
  float *p = malloc((n ? n : 1) * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = urand() * scale;
  return p;
}

/* rel L2 and max-abs checks of a float result against a double reference */
static int close_enough(const char *what, const float *got, const double *ref, size_t n, double rel_bound,
                        double abs_frac) {
  double num = 0, den = 0, maxref = 0, maxerr = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    if (fabs(e) > maxerr || e != e) maxerr = e != e ? INFINITY : fabs(e);
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int ok = rel <= rel_bound && maxerr <= abs_frac * (maxref > 0 ? maxref : 1);
  if (!ok) fprintf(stderr, "  %s: rel L2 %.3g (bound %.1g), max abs %.3g (bound %.3g)\n", what, rel, rel_bound, maxerr,
                   abs_frac * maxref);
  return ok;
}
#define CLOSE(what, got, ref, n) CHECK_MSG(close_enough(what, got, ref, n, 1e-5, 1e-4), "%s", what)

/* x rounded to bf16 (nearest, ties to even), as a float */
static float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, sizeof x);
  return x;
}

static void test_gemm(lh_pool *pool) {
  int shapes[][3] = {{1, 1, 1}, {1, 300, 64}, {7, 13, 5}, {64, 128, 64}, {130, 700, 33}, {1500, 520, 40}, {3, 2000, 16}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    int lda = K + 3, ldc = N + 5;
    float *A = frand((size_t)M * lda, 1), *B = frand((size_t)N * K, 1), *C = frand((size_t)M * ldc, 1);
    float *C0 = malloc((size_t)M * ldc * sizeof *C0);
    memcpy(C0, C, (size_t)M * ldc * sizeof *C);
    double *ref = malloc((size_t)M * N * sizeof *ref);
    float *got = malloc((size_t)M * N * sizeof *got);
    for (int acc = 0; acc < 2; acc++) {
      memcpy(C, C0, (size_t)M * ldc * sizeof *C);
      lh_gemm_nt(pool, M, N, K, A, lda, B, K, C, ldc, acc);
      for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
          double r = acc ? C0[(size_t)i * ldc + j] : 0;
          for (int k = 0; k < K; k++) r += (double)A[(size_t)i * lda + k] * B[(size_t)j * K + k];
          ref[(size_t)i * N + j] = r;
          got[(size_t)i * N + j] = C[(size_t)i * ldc + j];
        }
      char what[64];
      snprintf(what, sizeof what, "gemm %dx%dx%d acc=%d", M, N, K, acc);
      CLOSE(what, got, ref, (size_t)M * N);
      /* the padding columns of C are never written */
      int pad_ok = 1;
      for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) pad_ok &= C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j];
      CHECK_MSG(pad_ok, "%s wrote outside its columns", what);
      /* serial and pooled runs agree bit for bit */
      float *C2 = malloc((size_t)M * ldc * sizeof *C2);
      memcpy(C2, C0, (size_t)M * ldc * sizeof *C2);
      lh_gemm_nt(NULL, M, N, K, A, lda, B, K, C2, ldc, acc);
      CHECK_MSG(!memcmp(C, C2, (size_t)M * ldc * sizeof *C), "%s: pool and serial differ", what);
      free(C2);
    }
    free(A), free(B), free(C), free(C0), free(ref), free(got);
  }
}

static void test_rowwise(lh_pool *pool) {
  int shapes[][2] = {{1, 1}, {3, 64}, {100, 96}, {1000, 48}};
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int n = shapes[s][0], dim = shapes[s][1], ld = dim + 2;
    size_t sz = (size_t)n * ld;
    float *x = frand(sz, 4), *w = frand((size_t)dim, 1), *y = calloc(sz, sizeof *y);
    double *ref = malloc(sz * sizeof *ref);
    float *got = malloc(sz * sizeof *got);
    size_t k = 0;
    /* RMSNorm */
    lh_rmsnorm(pool, x, ld, n, dim, w, 1e-5, y, ld);
    k = 0;
    for (int r = 0; r < n; r++) {
      double ss = 0;
      for (int i = 0; i < dim; i++) ss += (double)x[(size_t)r * ld + i] * x[(size_t)r * ld + i];
      double inv = 1 / sqrt(ss / dim + 1e-5);
      for (int i = 0; i < dim; i++, k++) {
        ref[k] = w[i] * x[(size_t)r * ld + i] * inv;
        got[k] = y[(size_t)r * ld + i];
      }
    }
    CLOSE("rmsnorm", got, ref, k);
    /* SiLU, sigmoid (in place) */
    for (int which = 0; which < 2; which++) {
      memcpy(y, x, sz * sizeof *y);
      if (which) lh_sigmoid(pool, y, ld, n, dim);
      else lh_silu(pool, y, ld, n, dim);
      k = 0;
      for (int r = 0; r < n; r++)
        for (int i = 0; i < dim; i++, k++) {
          double v = x[(size_t)r * ld + i], sg = 1 / (1 + exp(-v));
          ref[k] = which ? sg : v * sg;
          got[k] = y[(size_t)r * ld + i];
        }
      CLOSE(which ? "sigmoid" : "silu", got, ref, k);
    }
    /* SwiGLU, mul, axpby on dense rows */
    float *g = frand((size_t)n * dim, 4), *u = frand((size_t)n * dim, 2), *o = malloc((size_t)n * dim * sizeof *o);
    lh_swiglu(pool, g, u, n, dim, o);
    for (size_t i = 0; i < (size_t)n * dim; i++) ref[i] = (double)g[i] / (1 + exp(-(double)g[i])) * u[i];
    CLOSE("swiglu", o, ref, (size_t)n * dim);
    lh_axpby(pool, g, u, 1.5f, -0.25f, n, dim, o);
    for (size_t i = 0; i < (size_t)n * dim; i++) ref[i] = 1.5 * g[i] - 0.25 * u[i];
    CLOSE("axpby", o, ref, (size_t)n * dim);
    memcpy(o, g, (size_t)n * dim * sizeof *o);
    lh_mul(pool, o, dim, u, dim, n, dim);
    for (size_t i = 0; i < (size_t)n * dim; i++) ref[i] = (double)g[i] * u[i];
    CLOSE("mul", o, ref, (size_t)n * dim);
    free(g), free(u), free(o), free(x), free(w), free(y), free(ref), free(got);
  }
}

static void test_exp(void) {
  int bad = 0;
  float worst = 0;
  for (int i = 0; i <= 2000000; i++) {
    float x = -100.0f + 190.0f * (float)i / 2000000.0f, y;
    lh_exp_fast(&x, &y, 1);
    float r = expf(x);
    if (x < -87.3f) {
      bad += y != 0.0f;
      continue;
    }
    if (x > 88.7f) {
      bad += !isinf(y);
      continue;
    }
    float ulp = nextafterf(r, INFINITY) - r;
    float e = fabsf(y - r) / ulp;
    if (e > worst) worst = e;
    bad += e > 4;
  }
  float special[3] = {-INFINITY, NAN, 0.0f}, out[3];
  lh_exp_fast(special, out, 3);
  CHECK(out[0] == 0.0f);
  CHECK(isnan(out[1]));
  CHECK(out[2] == 1.0f);
  CHECK_MSG(bad == 0, "fast exp: %d values beyond 4 ulp (worst %.2f ulp)", bad, worst);
}

static void test_rope(lh_pool *pool) {
  int cases[][4] = {{5, 4, 16, 16}, {70, 2, 32, 8}, {3, 3, 128, 64}}; /* n, heads, head_dim, rotary_dim */
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int n = cases[c][0], H = cases[c][1], d = cases[c][2], R = cases[c][3], ld = H * d + 1;
    float *x = frand((size_t)n * ld, 1), *x0 = malloc((size_t)n * ld * sizeof *x0);
    memcpy(x0, x, (size_t)n * ld * sizeof *x);
    int64_t *pos = malloc((size_t)n * sizeof *pos);
    for (int r = 0; r < n; r++) pos[r] = r * 977 + (c == 2 ? 1000000 : 3);
    float inv[512];
    lh_rope_inv_freq(10000.0, R, inv);
    lh_rope(pool, x, ld, n, H, d, R, inv, pos, 1.0f);
    double *ref = malloc((size_t)n * H * d * sizeof *ref);
    float *got = malloc((size_t)n * H * d * sizeof *got);
    size_t k = 0;
    for (int r = 0; r < n; r++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < d; i++, k++) {
          const float *v = x0 + (size_t)r * ld + (size_t)h * d;
          int half = R / 2;
          /* HF: the angle is the fp32 product inv_freq * position (inv_freq checked below) */
          double a = (double)(inv[i % (half ? half : 1)] * (float)pos[r]);
          if (i < half) ref[k] = v[i] * cos(a) - v[i + half] * sin(a);
          else if (i < R) ref[k] = v[i] * cos(a) + v[i - half] * sin(a);
          else ref[k] = v[i];
          got[k] = x[(size_t)r * ld + (size_t)h * d + i];
        }
    CLOSE("rope", got, ref, k);
    CHECK(x[(size_t)(n - 1) * ld + H * d] == x0[(size_t)(n - 1) * ld + H * d]); /* row padding untouched */
    for (int i = 0; i < R / 2; i++) {
      double f = 1.0 / pow(10000.0, 2.0 * i / R);
      CHECK_MSG(fabs(inv[i] - f) <= 2e-7 * f, "inv_freq[%d] = %.9g, want %.9g", i, inv[i], f);
    }
    free(x), free(x0), free(pos), free(ref), free(got);
  }
}

/* lh_length_scale against 1 + s max(0, ln((p+1)/L0)) in double: exactly 1 below the base and for
 * s = 0; within fp32 rounding at positions up to 2^22 (4M tokens); row padding untouched. */
static void test_length_scale(lh_pool *pool) {
  const int L0 = 4096;
  CHECK(lh_length_scale_factor(0, L0, 0.7f) == 1.0f);
  CHECK(lh_length_scale_factor(L0 - 1, L0, 0.7f) == 1.0f); /* (p+1)/L0 = 1 */
  CHECK(lh_length_scale_factor(L0, L0, 0.7f) > 1.0f);
  CHECK(lh_length_scale_factor(1 << 22, L0, 0.0f) == 1.0f);
  CHECK(lh_length_scale_factor(1 << 22, 0, 0.7f) == 1.0f); /* off */
  const float qwen = (float)(1.0 / log((double)L0));      /* s = 1/ln L0: log-n scaling, ln(p+1)/ln(L0) */
  CHECK(fabs(lh_length_scale_factor((1 << 20) - 1, L0, qwen) - 20.0 / 12.0) <= 1e-6);
  int n = 37, H = 3, d = 8, ld = H * d + 1;
  float *x = frand((size_t)n * ld, 1), *x0 = malloc((size_t)n * ld * sizeof *x0), s[3] = {0.0f, 0.35f, -0.2f};
  memcpy(x0, x, (size_t)n * ld * sizeof *x);
  int64_t *pos = malloc((size_t)n * sizeof *pos);
  for (int r = 0; r < n; r++) pos[r] = r < 5 ? L0 - 3 + r : (int64_t)r * 113381 + L0;
  lh_length_scale(pool, x, ld, n, H, d, s, L0, pos);
  double *ref = malloc((size_t)n * H * d * sizeof *ref);
  float *got = malloc((size_t)n * H * d * sizeof *got);
  size_t k = 0;
  int exact = 1;
  for (int r = 0; r < n; r++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < d; i++, k++) {
        double g = log((double)(pos[r] + 1) / L0);
        float v = x0[(size_t)r * ld + (size_t)h * d + i];
        ref[k] = v * (1 + s[h] * (g > 0 ? g : 0));
        got[k] = x[(size_t)r * ld + (size_t)h * d + i];
        if ((h == 0 || pos[r] + 1 <= L0) && got[k] != v) exact = 0;
      }
  CLOSE("length_scale", got, ref, k);
  CHECK_MSG(exact, "length_scale: a head with s = 0 or a position below the base changed");
  CHECK(x[(size_t)(n - 1) * ld + H * d] == x0[(size_t)(n - 1) * ld + H * d]);
  memcpy(x, x0, (size_t)n * ld * sizeof *x);
  lh_length_scale(pool, x, ld, n, H, d, s, 0, pos);
  CHECK(!memcmp(x, x0, (size_t)n * ld * sizeof *x)); /* base 0: off */
  free(x), free(x0), free(pos), free(ref), free(got);
}

/* double recurrence: S = lambda S + k^T v, o = q S */
static void lightning_ref(int n, int d, double slope, const float *q, const float *k, const float *v, int ld,
                          double *S, double *o) {
  double lam = exp(-slope);
  for (int t = 0; t < n; t++) {
    for (int a = 0; a < d; a++)
      for (int c = 0; c < d; c++) S[a * d + c] = lam * S[a * d + c] + (double)k[t * ld + a] * v[t * ld + c];
    for (int c = 0; c < d; c++) {
      double acc = 0;
      for (int a = 0; a < d; a++) acc += (double)q[t * ld + a] * S[a * d + c];
      o[t * d + c] = acc;
    }
  }
}

static void test_lightning(void) {
  int ns[] = {1, 5, 64, 100, 257}, Bs[] = {1, 7, 16, 64, 256}, ds[] = {4, 16, 32};
  float slopes[] = {0.9f, 0.05f, 1e-4f};
  for (size_t a = 0; a < 5; a++)
    for (size_t b = 0; b < 5; b++)
      for (size_t c = 0; c < 3; c++) {
        int n = ns[a], B = Bs[b], d = ds[c], ld = 3 * d + 2; /* q, k, v interleaved per row, as in qkv */
        float slope = slopes[(a + b + c) % 3];
        float *qkv = frand((size_t)n * ld, 1);
        for (size_t i = 0; i < (size_t)n * ld; i++) qkv[i] = qkv[i] > 0 ? qkv[i] : 0.1f * qkv[i]; /* SiLU-like */
        float *S = frand((size_t)d * d, 0.5f), *S2 = malloc((size_t)d * d * sizeof *S2);
        float *o = malloc((size_t)n * d * sizeof *o), *o2 = malloc((size_t)n * d * sizeof *o2);
        double *Sr = malloc((size_t)d * d * sizeof *Sr), *orf = malloc((size_t)n * d * sizeof *orf);
        for (int i = 0; i < d * d; i++) Sr[i] = S[i];
        memcpy(S2, S, (size_t)d * d * sizeof *S);
        float *scratch = malloc(lh_lightning_scratch(B, d) * sizeof *scratch);
        /* one call over n tokens, continuing the random state S */
        lh_lightning_head(n, d, B, slope, qkv, ld, qkv + d, ld, qkv + 2 * d, ld, S, o, d, scratch);
        lightning_ref(n, d, slope, qkv, qkv + d, qkv + 2 * d, ld, Sr, orf);
        char what[96];
        snprintf(what, sizeof what, "lightning n=%d B=%d d=%d s=%g output", n, B, d, slope);
        CLOSE(what, o, orf, (size_t)n * d);
        snprintf(what, sizeof what, "lightning n=%d B=%d d=%d s=%g state", n, B, d, slope);
        CLOSE(what, S, Sr, (size_t)d * d);
        /* the same tokens in uneven chunks continue the state exactly */
        for (int t0 = 0, step = 1; t0 < n; t0 += step, step = step * 2 + 1) {
          int m = n - t0 < step ? n - t0 : step;
          lh_lightning_head(m, d, B, slope, qkv + (size_t)t0 * ld, ld, qkv + (size_t)t0 * ld + d, ld,
                            qkv + (size_t)t0 * ld + 2 * d, ld, S2, o2 + (size_t)t0 * d, d, scratch);
        }
        snprintf(what, sizeof what, "lightning chunked n=%d B=%d d=%d", n, B, d);
        CLOSE(what, o2, orf, (size_t)n * d);
        CLOSE(what, S2, Sr, (size_t)d * d);
        /* and the fp32 recurrence kernel agrees too */
        for (int i = 0; i < d * d; i++) S2[i] = (float)0;
        for (int i = 0; i < d * d; i++) Sr[i] = 0;
        lh_lightning_head_recurrent(n, d, slope, qkv, ld, qkv + d, ld, qkv + 2 * d, ld, S2, o2, d);
        lightning_ref(n, d, slope, qkv, qkv + d, qkv + 2 * d, ld, Sr, orf);
        CLOSE("lightning recurrent kernel", o2, orf, (size_t)n * d);
        free(qkv), free(S), free(S2), free(o), free(o2), free(Sr), free(orf), free(scratch);
      }
}

/* Both paths of lh_attn_tile and both units of the bf16 mode (where this CPU has them) against a
 * double softmax, in the backend's tiles (all heads of a group) and in one head at a time; cases
 * cover head dims that are not multiples of 4 or 8, pages smaller and larger than the fused path's
 * 64-key blocks and not multiples of them, contexts of several pages, tiles whose rows are not a
 * multiple of 4, 8 or 24, and (q scale 12) scores far apart, where most probabilities underflow and
 * the running max moves; for the bf16 units, head dims 32 to 256 and pages of fewer than 256 keys
 * (key blocks not a multiple of 32 or 64). */
typedef void (*attn_fn)(const lh_kv_pages *, int, int, int64_t, int, const float *, int64_t, int64_t, float, float *,
                        int64_t, int64_t, float *);
static const char *const bf16_names[] = {"", "AMX bf16 path", "AVX512-BF16 path"};

/* Whether the bf16 unit kind runs here, and its entry. */
static int bf16_runs(int kind) { return kind == LH_ATTN_BF16_AMX ? lh_attn_amx() : lh_attn_avx512bf16(); }
static attn_fn bf16_entry(int kind) { return kind == LH_ATTN_BF16_AMX ? lh_attn_tile_amx : lh_attn_tile_avx512bf16; }

static void test_attention(void) {
  /* n_kv, rep (heads per kv head), d, page_tokens, context before the queries, queries, q scale */
  int cases[][7] = {{1, 1, 8, 16, 0, 1, 2},      {2, 2, 16, 16, 0, 40, 2},   {2, 4, 16, 16, 37, 64, 2},
                    {1, 2, 32, 256, 300, 17, 2}, {4, 1, 8, 4, 9, 64, 2},     {1, 1, 64, 256, 0, 64, 2},
                    {2, 1, 16, 8, 500, 3, 2},    {1, 8, 16, 16, 20, 70, 2},  {2, 2, 8, 16, 0, 300, 2},
                    {1, 2, 36, 100, 333, 50, 2}, {2, 3, 12, 64, 130, 45, 2}, {1, 1, 128, 256, 600, 30, 2},
                    {4, 2, 32, 256, 1000, 130, 2}, {1, 2, 6, 256, 70, 200, 2}, {1, 2, 32, 256, 700, 90, 12},
                    {1, 1, 20, 48, 150, 25, 12}, {2, 2, 32, 48, 100, 70, 2}, {1, 4, 96, 64, 90, 40, 2},
                    {1, 1, 256, 256, 300, 20, 2}, {2, 3, 32, 100, 250, 61, 12}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++)
    for (int path = 0; path < 4; path++) { /* lh_attn_tile, the BLAS path, the bf16 units AMX and AVX512 */
      int bf16 = path >= 2 && bf16_runs(path - 1) && cases[c][2] % 32 == 0, blas = path == 1;
      if (path >= 2 && !bf16) continue; /* the unit would be lh_attn_tile: path 0 */
      int nkv = cases[c][0], rep = cases[c][1], d = cases[c][2], PT = cases[c][3], P = cases[c][4], nq = cases[c][5];
      int H = nkv * rep, T = P + nq, npages = (T + PT - 1) / PT;
      rng = 12345 + c;
      float *K = frand((size_t)T * nkv * d, 1), *V = frand((size_t)T * nkv * d, 1);
      void **pages = malloc((size_t)npages * sizeof *pages);
      for (int p = 0; p < npages; p++) pages[p] = frand((size_t)2 * nkv * PT * d, 100); /* garbage beyond T */
      lh_kv_pages kv = {pages, nkv, d, PT};
      /* write the rows in two calls, as two chunks would */
      lh_kv_write(&kv, 0, P, K, nkv * d, V, nkv * d);
      lh_kv_write(&kv, P, nq, K + (size_t)P * nkv * d, nkv * d, V + (size_t)P * nkv * d, nkv * d);
      float *q = frand((size_t)nq * H * d, (float)cases[c][6]), *o = malloc((size_t)nq * H * d * sizeof *o);
      float *scratch = malloc(lh_attn_scratch(d, PT) * sizeof *scratch);
      float scale = 1.0f / sqrtf((float)d);
      /* tiles of the whole group's heads (the backend's way), or of one head at a time */
      int per_head = c % 2, tq = per_head ? LH_ATTN_ROWS : LH_ATTN_ROWS / rep;
      for (int g = 0; g < nkv; g++)
        for (int h0 = 0; h0 < rep; h0 += per_head ? 1 : rep)
          for (int t0 = 0; t0 < nq; t0 += tq) {
            int m = nq - t0 < tq ? nq - t0 : tq;
            size_t at = (size_t)t0 * H * d + (size_t)(g * rep + h0) * d;
            (blas ? lh_attn_tile_blas : bf16 ? bf16_entry(path - 1) : lh_attn_tile)(
                &kv, g, per_head ? 1 : rep, P + t0, m, q + at, H * d, d, scale, o + at, H * d, d, scratch);
          }
      double *ref = malloc((size_t)nq * H * d * sizeof *ref), *p = malloc((size_t)T * sizeof *p);
      double *ref16 = malloc((size_t)nq * H * d * sizeof *ref16);
      /* ref: the exact function; ref16: the same of q, K and V rounded to bf16 as the bf16 units'
       * products take them, so that what remains is their own error (P in bf16, the fp32 sums) */
      for (int r16 = 0; r16 < 1 + bf16; r16++)
        for (int i = 0; i < nq; i++)
          for (int h = 0; h < H; h++) {
            int g = h / rep, last = P + i;
            double mx = -INFINITY, sum = 0, *out = r16 ? ref16 : ref;
            for (int j = 0; j <= last; j++) {
              double s = 0;
              for (int e = 0; e < d; e++) {
                float a = q[((size_t)i * H + h) * d + e], b = K[((size_t)j * nkv + g) * d + e];
                s += r16 ? (double)bf16_round(a) * bf16_round(b) : (double)a * b;
              }
              p[j] = s / sqrt((double)d);
              mx = p[j] > mx ? p[j] : mx;
            }
            for (int j = 0; j <= last; j++) sum += (p[j] = exp(p[j] - mx));
            for (int e = 0; e < d; e++) {
              double acc = 0;
              for (int j = 0; j <= last; j++) {
                float v = V[((size_t)j * nkv + g) * d + e];
                acc += p[j] / sum * (r16 ? bf16_round(v) : v);
              }
              out[((size_t)i * H + h) * d + e] = acc;
            }
          }
      char what[128];
      snprintf(what, sizeof what, "attention (%s) nkv=%d rep=%d d=%d pages of %d, %d + %d, q x %d",
               blas   ? "BLAS path"
               : bf16 ? bf16_names[path - 1]
               : lh_attn_fused() ? "fused path"
                                 : "BLAS path via lh_attn_tile",
               nkv, rep, d, PT, P, nq, cases[c][6]);
      if (bf16) {
        /* P rounded to bf16 (relative 2^-9 each) averages out over the keys: measured 0.6-1.5e-3
         * in rel L2 against ref16 on AMX, 0.5-1.6e-3 on AVX512-BF16. Against the exact function
         * the inputs' rounding adds more: 2-5e-3 measured (both units), the most at q x 12, where
         * scores are large. */
        CHECK_MSG(close_enough(what, o, ref16, (size_t)nq * H * d, 3e-3, 1e-2), "%s against bf16 inputs", what);
        CHECK_MSG(close_enough(what, o, ref, (size_t)nq * H * d, 1e-2, 3e-2), "%s against the exact function", what);
      } else {
        CLOSE(what, o, ref, (size_t)nq * H * d);
      }
      free(ref16);
      for (int pg = 0; pg < npages; pg++) free(pages[pg]);
      free(pages), free(K), free(V), free(q), free(o), free(scratch), free(ref), free(p);
    }
}

/* The fused path's promise: a query's output does not depend on the tile it is in. The same
 * queries in the backend's tiles, in tiles of uneven lengths, one head at a time and one query at
 * a time (decode) give the same bits. The BLAS path does not promise it (its products change
 * bits with their shapes), so on CPUs without AVX2+FMA this is skipped, loudly. The bf16 units
 * promise it too, each for itself; lh_attn_tile_bf16 must take the unit lh_attn_bf16_kind names. */
static void attention_tiling(attn_fn tile, const char *what);
static void test_attention_tiling(void) {
  if (!lh_attn_fused())
    fprintf(stderr, "  SKIP attention tiling invariance: lh_attn_tile takes the BLAS path here (a CPU without "
                    "AVX2+FMA, or a build without the fused path)\n");
  else
    attention_tiling(lh_attn_tile, "fused path");
  for (int kind = LH_ATTN_BF16_AMX; kind <= LH_ATTN_BF16_AVX512; kind++)
    if (!bf16_runs(kind))
      fprintf(stderr, "  SKIP %s tiling invariance: %s\n", bf16_names[kind],
              kind == LH_ATTN_BF16_AMX ? "no AMX-BF16 here (or the kernel refused the tile state)"
                                       : "no AVX512-BF16 here");
    else
      attention_tiling(bf16_entry(kind), bf16_names[kind]);
  const int want = lh_attn_amx() ? LH_ATTN_BF16_AMX : lh_attn_avx512bf16() ? LH_ATTN_BF16_AVX512 : LH_ATTN_BF16_NONE;
  CHECK_MSG(lh_attn_bf16_kind(32) == want && lh_attn_bf16_kind(256) == want, "lh_attn_bf16_kind: %d, want %d",
            lh_attn_bf16_kind(32), want);
  CHECK(lh_attn_bf16_kind(48) == LH_ATTN_BF16_NONE && lh_attn_bf16_kind(288) == LH_ATTN_BF16_NONE);
  if (want != LH_ATTN_BF16_NONE) /* the mode's entry is that unit, bit for bit */
    attention_tiling(lh_attn_tile_bf16, want == LH_ATTN_BF16_AMX ? "lh_attn_tile_bf16 (AMX)"
                                                                 : "lh_attn_tile_bf16 (AVX512-BF16)");
}

/* The tiling check for one path; with tile = lh_attn_tile_bf16 each way is also compared with the
 * unit lh_attn_bf16_kind names. */
static void attention_tiling(attn_fn tile, const char *what) {
  int shapes[][4] = {{2, 32, 256, 700}, {2, 64, 256, 300}, {4, 20, 48, 260}, {1, 8, 16, 90}, /* rep, d, PT, T */
                     {3, 32, 96, 400},  {2, 96, 64, 150}};
  for (size_t c = 0; c < sizeof shapes / sizeof *shapes; c++) {
    int rep = shapes[c][0], d = shapes[c][1], PT = shapes[c][2], T = shapes[c][3], nkv = 2, H = nkv * rep;
    int npages = (T + PT - 1) / PT;
    void **pages = malloc((size_t)npages * sizeof *pages);
    for (int p = 0; p < npages; p++) pages[p] = frand((size_t)2 * nkv * PT * d, 1);
    lh_kv_pages kv = {pages, nkv, d, PT};
    float *q = frand((size_t)T * H * d, 3), *scratch = malloc(lh_attn_scratch(d, PT) * sizeof *scratch);
    float *o[5];
    float scale = 1.0f / sqrtf((float)d);
    const int kind = lh_attn_bf16_kind(d), ways = tile == lh_attn_tile_bf16 && kind ? 5 : 4;
    for (int way = 0; way < ways; way++) {
      o[way] = malloc((size_t)T * H * d * sizeof(float));
      for (int g = 0; g < nkv; g++) {
        int nh = way == 2 ? 1 : rep;
        for (int h0 = 0; h0 < rep; h0 += nh)
          for (int t0 = 0, step = 1; t0 < T; t0 += step) {
            /* the backend's tiles; uneven ones; one head at a time; one query at a time; the
             * backend's tiles through the unit itself */
            if (way == 0 || way == 4) step = LH_ATTN_ROWS / rep;
            else if (way == 1) step = (step * 7 + 3) % (LH_ATTN_ROWS / nh) + 1;
            else step = way == 2 ? LH_ATTN_ROWS : 1;
            int m = T - t0 < step ? T - t0 : step;
            size_t at = (size_t)t0 * H * d + (size_t)(g * rep + h0) * d;
            (way == 4 ? bf16_entry(kind) : tile)(&kv, g, nh, t0, m, q + at, H * d, d, scale, o[way] + at, H * d, d,
                                                 scratch);
          }
      }
    }
    for (int way = 1; way < ways; way++)
      CHECK_MSG(!memcmp(o[0], o[way], (size_t)T * H * d * sizeof(float)),
                "attention (%s) rep=%d d=%d pages of %d, %d queries: tiling %d differs in some bit from the backend's",
                what, rep, d, PT, T, way);
    for (int p = 0; p < npages; p++) free(pages[p]);
    for (int way = 0; way < ways; way++) free(o[way]);
    free(pages), free(q), free(scratch);
  }
}

static void test_moe(lh_pool *pool) {
  /* routing: ties go to the lower expert index; weights renormalised */
  float z[2][5] = {{1, 3, 3, 0, 3}, {0.5f, -1, 2, 2, 0.25f}};
  int32_t idx[4];
  float w[4];
  lh_moe_route(&z[0][0], 2, 5, 2, idx, w);
  CHECK_EQ(idx[0], 1);
  CHECK_EQ(idx[1], 2);
  CHECK(fabsf(w[0] - 0.5f) < 1e-7f && fabsf(w[1] - 0.5f) < 1e-7f);
  CHECK_EQ(idx[2], 2);
  CHECK_EQ(idx[3], 3);
  lh_moe_route(&z[0][0], 2, 5, 1, idx, w);
  CHECK_EQ(idx[0], 1);
  CHECK(w[0] == 1.0f);
  /* a whole MoE block against a per-token loop in double */
  int shapes[][5] = {{1, 16, 24, 4, 2}, {37, 32, 40, 8, 2}, {200, 16, 8, 3, 1}, {64, 8, 8, 8, 8}}; /* n, D, I, E, k */
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    int n = shapes[s][0], D = shapes[s][1], I = shapes[s][2], E = shapes[s][3], k = shapes[s][4];
    float *h = frand((size_t)n * D, 1), *Wr = frand((size_t)E * D, 1);
    float **W1 = malloc((size_t)E * sizeof *W1), **W3 = malloc((size_t)E * sizeof *W3), **W2 = malloc((size_t)E * sizeof *W2);
    for (int e = 0; e < E; e++) W1[e] = frand((size_t)I * D, 0.3f), W3[e] = frand((size_t)I * D, 0.3f), W2[e] = frand((size_t)D * I, 0.3f);
    float *logits = malloc((size_t)n * E * sizeof *logits);
    lh_gemm_nt(pool, n, E, D, h, D, Wr, D, logits, E, 0);
    int32_t *sel = malloc((size_t)n * k * sizeof *sel);
    float *sw = malloc((size_t)n * k * sizeof *sw);
    lh_moe_route(logits, n, E, k, sel, sw);
    int64_t *off = malloc((size_t)(E + 1) * sizeof *off), *tok = malloc((size_t)n * k * sizeof *tok),
            *row = malloc((size_t)n * k * sizeof *row);
    lh_moe_plan plan = {off, tok, row};
    lh_moe_plan_build(sel, n, E, k, &plan);
    CHECK_EQ(off[E], (int64_t)n * k);
    float *xg = malloc((size_t)n * D * sizeof *xg), *g = malloc((size_t)n * I * sizeof *g), *u = malloc((size_t)n * I * sizeof *u);
    float *y = malloc((size_t)n * k * D * sizeof *y), *out = malloc((size_t)n * D * sizeof *out);
    for (int e = 0; e < E; e++) {
      int64_t r0 = off[e], m = off[e + 1] - r0;
      if (!m) continue;
      lh_gather_rows(pool, h, D, tok, r0, r0 + m, D, xg);
      lh_gemm_nt(pool, m, I, D, xg, D, W1[e], D, g, I, 0);
      lh_gemm_nt(pool, m, I, D, xg, D, W3[e], D, u, I, 0);
      lh_swiglu(pool, g, u, m, I, g);
      lh_gemm_nt(pool, m, D, I, g, I, W2[e], I, y + r0 * D, D, 0);
    }
    lh_moe_combine(pool, &plan, y, sw, n, k, D, out);
    double *ref = calloc((size_t)n * D, sizeof *ref), *a = malloc((size_t)I * sizeof *a);
    int route_ok = 1;
    for (int t = 0; t < n; t++) {
      double p[16], mx = -INFINITY, sum = 0;
      for (int e = 0; e < E; e++) {
        double v = 0;
        for (int i = 0; i < D; i++) v += (double)h[(size_t)t * D + i] * Wr[(size_t)e * D + i];
        p[e] = v;
        mx = v > mx ? v : mx;
      }
      for (int e = 0; e < E; e++) sum += (p[e] = exp(p[e] - mx));
      for (int e = 0; e < E; e++) p[e] /= sum; /* the softmax; renormalising the top k cancels sum */
      int chosen[16] = {0};
      double tot = 0;
      for (int c = 0; c < k; c++) {
        int best = -1;
        for (int e = 0; e < E; e++)
          if (!chosen[e] && (best < 0 || p[e] > p[best])) best = e;
        chosen[best] = 1;
        tot += p[best];
      }
      for (int c = 0; c < k; c++) route_ok &= chosen[sel[(size_t)t * k + c]] == 1;
      for (int e = 0; e < E; e++) {
        if (!chosen[e]) continue;
        for (int i = 0; i < I; i++) {
          double gg = 0, uu = 0;
          for (int j = 0; j < D; j++) {
            gg += (double)h[(size_t)t * D + j] * W1[e][(size_t)i * D + j];
            uu += (double)h[(size_t)t * D + j] * W3[e][(size_t)i * D + j];
          }
          a[i] = gg / (1 + exp(-gg)) * uu;
        }
        for (int j = 0; j < D; j++) {
          double v = 0;
          for (int i = 0; i < I; i++) v += a[i] * W2[e][(size_t)j * I + i];
          ref[(size_t)t * D + j] += p[e] / tot * v;
        }
      }
    }
    CHECK_MSG(route_ok, "moe shape %zu: routing differs from the double reference", s);
    char what[64];
    snprintf(what, sizeof what, "moe n=%d D=%d I=%d E=%d k=%d", n, D, I, E, k);
    CLOSE(what, out, ref, (size_t)n * D);
    for (int e = 0; e < E; e++) free(W1[e]), free(W3[e]), free(W2[e]);
    free(W1), free(W3), free(W2), free(h), free(Wr), free(logits), free(sel), free(sw), free(off), free(tok), free(row);
    free(xg), free(g), free(u), free(y), free(out), free(ref), free(a);
  }
}

static void test_argmax(void) {
  float a[6] = {1, 5, 2, 5, NAN, -1};
  CHECK_EQ(lh_argmax(a, 6), 1);
  float b[3] = {NAN, NAN, NAN};
  CHECK_EQ(lh_argmax(b, 3), 0);
  float c[3] = {NAN, -INFINITY, -3};
  CHECK_EQ(lh_argmax(c, 3), 2);
}

/* A chain of pooled kernels gives the same bits with 1, 2 and 3 threads. */
static void test_pool_determinism(void) {
  int n = 300, D = 96, N = 700;
  float *x = frand((size_t)n * D, 1), *W = frand((size_t)N * D, 1), *w = frand((size_t)N, 1);
  float *out[3];
  for (int t = 1; t <= 3; t++) {
    lh_pool *p = lh_pool_new(t);
    CHECK(p != NULL);
    CHECK_EQ(lh_pool_threads(p), t);
    float *y = malloc((size_t)n * N * sizeof *y);
    lh_gemm_nt(p, n, N, D, x, D, W, D, y, N, 0);
    lh_silu(p, y, N, n, N);
    lh_rmsnorm(p, y, N, n, N, w, 1e-6, y, N);
    out[t - 1] = y;
    lh_pool_free(p);
  }
  CHECK(!memcmp(out[0], out[1], (size_t)n * N * sizeof(float)));
  CHECK(!memcmp(out[0], out[2], (size_t)n * N * sizeof(float)));
  for (int t = 0; t < 3; t++) free(out[t]);
  free(x), free(W), free(w);
  lh_pool_free(NULL);
}

int main(void) {
  lh_test_begin("test_engine_kernels");
  lh_pool *pool = lh_pool_new(2);
  test_gemm(pool);
  test_rowwise(pool);
  test_exp();
  test_rope(pool);
  test_length_scale(pool);
  test_lightning();
  test_attention();
  test_attention_tiling();
  test_moe(pool);
  test_argmax();
  test_pool_determinism();
  lh_pool_free(pool);
  return lh_test_end();
}
