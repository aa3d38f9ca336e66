/* test_engine_model.c — the engine (layer loop, backend, states) on random models built in memory.
 *
 * 1. One pass against an independent double-precision forward written here from the model's
 *    definition (HF MiniMax math), for several configurations: partial and full RoPE, GQA,
 *    tied/untied, top-1/top-2, bf16 weights, pre-norm residuals, block sizes that do and do not
 *    divide the length, sequences over one KV page.
 * 2. Chunk plans (size 1, primes, sizes around block_size, random) against the one pass; decode
 *    steps (lh_prefill n = 1 and lh_decode_batch) against the one pass; pieces cut by a small
 *    max_rows against the one pass.
 * 3. Bit-exactness: the same plan twice, 1 vs 2 threads, fork-then-continue vs continue,
 *    export/import and serialize/deserialize then continue vs continue.
 * 4. Errors: bad token ids and positions past the limit leave the state unchanged; corrupt or
 *    truncated serialised states are refused with a clear message.
 * Bound for "meets the bound": relative L2 <= 1e-4 and max abs <= 1e-3 x max |ref| (the issue's).
 */
#include "tests/test.h"

#include "engine/internal.h"
#include "tests/engine/random_model.h"
#include "util/hash.h"

static int meets_bound(const char *what, const float *got, const float *ref, size_t n) {
  double num = 0, den = 0, maxref = 0, maxerr = 0;
  for (size_t i = 0; i < n; i++) {
    double e = (double)got[i] - ref[i];
    num += e * e;
    den += (double)ref[i] * ref[i];
    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
    if (!(fabs(e) <= maxerr)) maxerr = e == e ? fabs(e) : INFINITY;
  }
  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  int ok = rel <= 1e-4 && maxerr <= 1e-3 * maxref;
  if (!ok || getenv("LH_TEST_VERBOSE"))
    fprintf(stderr, "  %s: rel L2 %.3g, max abs %.3g (max |ref| %.3g)%s\n", what, rel, maxerr, maxref, ok ? "" : "  FAIL");
  return ok;
}

/* ---- the double-precision reference --------------------------------------------------------- */

static void lin(const double *x, int T, int in, const float *W, int out, double *y) {
  for (int t = 0; t < T; t++)
    for (int o = 0; o < out; o++) {
      double s = 0;
      for (int i = 0; i < in; i++) s += x[(size_t)t * in + i] * W[(size_t)o * in + i];
      y[(size_t)t * out + o] = s;
    }
}

static void rms(const double *x, int T, int D, const float *w, double eps, double *y) {
  for (int t = 0; t < T; t++) {
    double ss = 0;
    for (int i = 0; i < D; i++) ss += x[(size_t)t * D + i] * x[(size_t)t * D + i];
    double inv = 1 / sqrt(ss / D + eps);
    for (int i = 0; i < D; i++) y[(size_t)t * D + i] = w[i] * x[(size_t)t * D + i] * inv;
  }
}

static double silu(double v) { return v / (1 + exp(-v)); }

static void ref_forward(const rm_model *r, const int32_t *tok, int T, float *logits) {
  const lh_config *c = &r->m.cfg;
  int D = c->hidden_size, H = c->n_heads, d = c->head_dim, G = c->n_kv_heads, HD = H * d, KD = G * d;
  int E = c->n_experts, I = c->intermediate_size, V = c->vocab_size, R = c->rotary_dim;
  double *x = malloc(sizeof(double) * T * D), *h = malloc(sizeof(double) * T * D), *a = malloc(sizeof(double) * T * D);
  double *qkv = malloc(sizeof(double) * T * 3 * HD), *g = malloc(sizeof(double) * T * HD), *o = malloc(sizeof(double) * T * HD);
  double *on = malloc(sizeof(double) * T * HD), *k = malloc(sizeof(double) * T * KD), *v = malloc(sizeof(double) * T * KD);
  double *S = malloc(sizeof(double) * d * d), *p = malloc(sizeof(double) * T), *lg = malloc(sizeof(double) * T * V);
  double *h2 = malloc(sizeof(double) * T * D), *xr = malloc(sizeof(double) * T * D), *gg = malloc(sizeof(double) * I);
  for (int t = 0; t < T; t++)
    for (int i = 0; i < D; i++) x[(size_t)t * D + i] = r->embed.f32[(size_t)tok[t] * D + i];
  for (int l = 0; l < c->n_layers; l++) {
    const rm_layer *L = &r->layers[l];
    lh_layer_kind kind = c->layer_kind[l];
    rms(x, T, D, L->in_norm.f32, c->rms_norm_eps, h);
    if (kind == LH_LAYER_LIGHTNING) {
      lin(h, T, D, L->qkv.f32, 3 * HD, qkv);
      for (size_t i = 0; i < (size_t)T * 3 * HD; i++) qkv[i] = silu(qkv[i]);
      for (int hh = 0; hh < H; hh++) {
        double lam = exp(-(double)r->m.w.layers[l].slope[hh]);
        memset(S, 0, sizeof(double) * d * d);
        for (int t = 0; t < T; t++) {
          const double *q = qkv + (size_t)t * 3 * HD + hh * 3 * d, *kk = q + d, *vv = q + 2 * d;
          for (int i = 0; i < d; i++)
            for (int j = 0; j < d; j++) S[i * d + j] = lam * S[i * d + j] + kk[i] * vv[j];
          for (int j = 0; j < d; j++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += q[i] * S[i * d + j];
            o[(size_t)t * HD + hh * d + j] = s;
          }
        }
      }
      rms(o, T, HD, L->attn_norm.f32, 1e-6, on);
      lin(h, T, D, L->gate.f32, HD, g);
      for (size_t i = 0; i < (size_t)T * HD; i++) on[i] *= 1 / (1 + exp(-g[i]));
      lin(on, T, HD, L->out.f32, D, a);
    } else {
      lin(h, T, D, L->q.f32, HD, g); /* g holds q here */
      lin(h, T, D, L->k.f32, KD, k);
      lin(h, T, D, L->v.f32, KD, v);
      for (int t = 0; t < T; t++)
        for (int which = 0; which < 2; which++) {
          int nh = which ? G : H;
          double *base = which ? k + (size_t)t * KD : g + (size_t)t * HD;
          for (int hh = 0; hh < nh; hh++) {
            double *z = base + hh * d;
            for (int i = 0; i < R / 2; i++) {
              double ang = t / pow(c->rope_theta, 2.0 * i / R), z1 = z[i], z2 = z[i + R / 2];
              z[i] = z1 * cos(ang) - z2 * sin(ang);
              z[i + R / 2] = z2 * cos(ang) + z1 * sin(ang);
            }
          }
        }
      for (int t = 0; t < T; t++)
        for (int hh = 0; hh < H; hh++) {
          int kv = hh / (H / G);
          double mx = -INFINITY, sum = 0;
          for (int j = 0; j <= t; j++) {
            double s = 0;
            for (int i = 0; i < d; i++) s += g[(size_t)t * HD + hh * d + i] * k[(size_t)j * KD + kv * d + i];
            p[j] = s / sqrt((double)d);
            mx = p[j] > mx ? p[j] : mx;
          }
          for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
          for (int i = 0; i < d; i++) {
            double s = 0;
            for (int j = 0; j <= t; j++) s += p[j] / sum * v[(size_t)j * KD + kv * d + i];
            o[(size_t)t * HD + hh * d + i] = s;
          }
        }
      lin(o, T, HD, L->o.f32, D, a);
    }
    const double *res = c->postnorm ? h : x;
    for (size_t i = 0; i < (size_t)T * D; i++) xr[i] = c->attn_alpha[kind] * res[i] + c->attn_beta[kind] * a[i];
    rms(xr, T, D, L->post_norm.f32, c->rms_norm_eps, h2);
    /* MoE */
    memset(a, 0, sizeof(double) * T * D);
    for (int t = 0; t < T; t++) {
      double pr[64], mx = -INFINITY, sum = 0;
      for (int e = 0; e < E; e++) {
        double s = 0;
        for (int i = 0; i < D; i++) s += h2[(size_t)t * D + i] * L->router.f32[(size_t)e * D + i];
        pr[e] = s;
        mx = s > mx ? s : mx;
      }
      for (int e = 0; e < E; e++) sum += (pr[e] = exp(pr[e] - mx));
      for (int e = 0; e < E; e++) pr[e] /= sum;
      int chosen[64] = {0};
      double tot = 0;
      for (int cc = 0; cc < c->top_k; cc++) {
        int best = -1;
        for (int e = 0; e < E; e++)
          if (!chosen[e] && (best < 0 || pr[e] > pr[best])) best = e;
        chosen[best] = 1;
        tot += pr[best];
      }
      for (int e = 0; e < E; e++) {
        if (!chosen[e]) continue;
        for (int i = 0; i < I; i++) {
          double g1 = 0, u1 = 0;
          for (int j = 0; j < D; j++) {
            g1 += h2[(size_t)t * D + j] * L->w1[e].f32[(size_t)i * D + j];
            u1 += h2[(size_t)t * D + j] * L->w3[e].f32[(size_t)i * D + j];
          }
          gg[i] = silu(g1) * u1;
        }
        for (int j = 0; j < D; j++) {
          double s = 0;
          for (int i = 0; i < I; i++) s += gg[i] * L->w2[e].f32[(size_t)j * I + i];
          a[(size_t)t * D + j] += pr[e] / tot * s;
        }
      }
    }
    const double *res2 = c->postnorm ? h2 : xr;
    for (size_t i = 0; i < (size_t)T * D; i++) x[i] = c->mlp_alpha * res2[i] + c->mlp_beta * a[i];
  }
  rms(x, T, D, r->final_norm.f32, c->rms_norm_eps, h);
  lin(h, T, D, r->lm_head.f32, V, lg);
  for (size_t i = 0; i < (size_t)T * V; i++) logits[i] = (float)lg[i];
  free(x), free(h), free(a), free(qkv), free(g), free(o), free(on), free(k), free(v), free(S), free(p), free(lg);
  free(h2), free(xr), free(gg);
}

/* ---- helpers ------------------------------------------------------------------------------ */

static int32_t *random_tokens(int T, int V, uint64_t seed) {
  int32_t *t = malloc(sizeof *t * T);
  for (int i = 0; i < T; i++) t[i] = (int32_t)(lh_splitmix64(&seed) % (uint64_t)V);
  return t;
}

/* Feed tokens in the chunks of plan (sizes, repeated until T is reached); logits of every
 * position into out [T x V]. Returns the state (caller frees) or NULL. */
static lh_state *run_plan(lh_model *m, const int32_t *tok, int T, const int *plan, int nplan, float *out) {
  lh_state *s;
  lh_error err;
  if (lh_state_new(m, &s, &err)) {
    fprintf(stderr, "state_new: %s\n", err.msg);
    return NULL;
  }
  int V = m->cfg.vocab_size;
  for (int t = 0, i = 0; t < T; i++) {
    int n = plan[i % nplan];
    if (n > T - t) n = T - t;
    if (lh_prefill(s, tok + t, n, NULL, out + (size_t)t * V, &err)) {
      fprintf(stderr, "prefill: %s\n", err.msg);
      lh_state_free(s);
      return NULL;
    }
    t += n;
  }
  return s;
}

static lh_model *build(const lh_config *c, uint64_t seed, int64_t max_rows, int threads, lh_dtype dt) {
  lh_error err;
  lh_model *m = rm_build(c, seed, max_rows, threads, dt, &err);
  if (!m) fprintf(stderr, "rm_build: %s\n", err.msg);
  return m;
}

/* ---- 1 + 2: against the reference and across chunk plans --------------------------------- */

static void check_config(const char *name, const lh_config *c, int T, lh_dtype dt, int plans) {
  lh_model *m = build(c, 7, 8192, 2, dt);
  CHECK(m != NULL);
  if (!m) return;
  int V = c->vocab_size;
  int32_t *tok = random_tokens(T, V, 99);
  float *ref = malloc(sizeof(float) * T * V), *one = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
  ref_forward((const rm_model *)m, tok, T, ref);
  int whole[1] = {T};
  lh_state *s = run_plan(m, tok, T, whole, 1, one);
  CHECK(s != NULL);
  char what[128];
  snprintf(what, sizeof what, "%s: one pass vs double reference", name);
  CHECK_MSG(meets_bound(what, one, ref, (size_t)T * V), "%s", what);
  CHECK(s && lh_state_pos(s) == T);
  CHECK(s && !memcmp(lh_state_last_logits(s), one + (size_t)(T - 1) * V, sizeof(float) * V));
  lh_state_free(s);
  if (plans) {
    int B = c->block_size;
    int p1[] = {1}, p2[] = {7, 13, 31}, p3[] = {B - 1, B, B + 1}, p4[] = {2 * B + 1, 3}, p5[] = {255, 2, 257};
    const int *ps[] = {p1, p2, p3, p4, p5};
    int np[] = {1, 3, 3, 2, 3};
    for (int i = 0; i < 5; i++) {
      lh_state *st = run_plan(m, tok, T, ps[i], np[i], got);
      CHECK(st != NULL);
      snprintf(what, sizeof what, "%s: chunk plan %d (first chunk %d)", name, i, ps[i][0]);
      CHECK_MSG(meets_bound(what, got, one, (size_t)T * V), "%s", what);
      lh_state_free(st);
    }
    uint64_t seed = 5;
    for (int trial = 0; trial < 3; trial++) {
      int plan[64], n = 0;
      for (int sum = 0; sum < T && n < 64; n++) sum += plan[n] = 1 + (int)(lh_splitmix64(&seed) % (uint64_t)(2 * B + 3));
      lh_state *st = run_plan(m, tok, T, plan, n, got);
      snprintf(what, sizeof what, "%s: random chunk plan %d", name, trial);
      CHECK_MSG(st && meets_bound(what, got, one, (size_t)T * V), "%s", what);
      lh_state_free(st);
    }
  }
  free(tok), free(ref), free(one), free(got);
  rm_free(m);
}

/* max_rows smaller than a call: the forward cuts pieces, split segments included */
static void check_pieces(void) {
  lh_config c = rm_default_config();
  int T = 300, V = c.vocab_size;
  lh_model *big = build(&c, 3, 8192, 2, LH_F32), *small = build(&c, 3, 37, 2, LH_F32);
  CHECK(big && small);
  if (!big || !small) return;
  int32_t *tok = random_tokens(T, V, 4);
  float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
  int whole[1] = {T}, odd[2] = {100, 61};
  lh_state *s1 = run_plan(big, tok, T, whole, 1, a), *s2 = run_plan(small, tok, T, odd, 2, b);
  CHECK_MSG(meets_bound("max_rows 37 pieces vs one pass", b, a, (size_t)T * V), "pieces");
  /* logits_last only: the piece holding the last row must produce it */
  lh_state *s3;
  lh_error err;
  float *last = malloc(sizeof(float) * V);
  CHECK(!lh_state_new(small, &s3, &err));
  CHECK(!lh_prefill(s3, tok, T, last, NULL, &err));
  CHECK_MSG(meets_bound("max_rows 37 last logits", last, a + (size_t)(T - 1) * V, V), "last");
  /* decode batches wider than max_rows: 50 forks in one lh_decode_batch on the small model */
  enum { K = 50 };
  lh_state *f[K];
  int32_t nt[K];
  float *lk = malloc(sizeof(float) * K * V), *one = malloc(sizeof(float) * V);
  for (int i = 0; i < K; i++) {
    CHECK(!lh_state_fork(s2, &f[i], &err));
    nt[i] = (int32_t)((i * 7) % V);
  }
  CHECK(!lh_decode_batch(f, K, nt, lk, &err));
  for (int i = 0; i < K; i += 7) {
    lh_state *g;
    CHECK(!lh_state_fork(s2, &g, &err));
    CHECK(!lh_prefill(g, &nt[i], 1, one, NULL, &err));
    char what[64];
    snprintf(what, sizeof what, "decode batch of %d, fork %d vs prefill n=1", K, i);
    CHECK_MSG(meets_bound(what, lk + (size_t)i * V, one, V), "%s", what);
    lh_state_free(g);
  }
  for (int i = 0; i < K; i++) lh_state_free(f[i]);
  lh_state_free(s1), lh_state_free(s2), lh_state_free(s3);
  free(tok), free(a), free(b), free(last), free(lk), free(one);
  rm_free(big), rm_free(small);
}

/* ---- decode ------------------------------------------------------------------------------- */

static void check_decode(void) {
  lh_config c = rm_default_config();
  int T = 280, P = 250, V = c.vocab_size;
  lh_model *m = build(&c, 11, 8192, 2, LH_F32);
  CHECK(m != NULL);
  if (!m) return;
  int32_t *tok = random_tokens(T, V, 12);
  float *one = malloc(sizeof(float) * T * V), *step = malloc(sizeof(float) * V);
  int whole[1] = {T};
  lh_state_free(run_plan(m, tok, T, whole, 1, one));
  lh_state *a, *b;
  lh_error err;
  CHECK(!lh_state_new(m, &a, &err));
  CHECK(!lh_prefill(a, tok, P, NULL, NULL, &err));
  CHECK(!lh_state_fork(a, &b, &err));
  int ok_a = 1, ok_b = 1;
  for (int t = P; t < T; t++) {
    CHECK(!lh_prefill(a, &tok[t], 1, step, NULL, &err));
    ok_a &= meets_bound("decode via prefill n=1", step, one + (size_t)t * V, V);
    CHECK(!lh_decode_batch(&b, 1, &tok[t], step, &err));
    ok_b &= meets_bound("decode via lh_decode_batch", step, one + (size_t)t * V, V);
  }
  CHECK_MSG(ok_a, "prefill n=1 steps differ from the one pass");
  CHECK_MSG(ok_b, "lh_decode_batch steps differ from the one pass");
  lh_state_free(a), lh_state_free(b);
  free(tok), free(one), free(step);
  rm_free(m);
}

/* ---- 3: bit-exactness --------------------------------------------------------------------- */

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static void check_bitwise(void) {
  lh_config c = rm_default_config();
  int T = 300, P = 270, V = c.vocab_size; /* P leaves a partial KV page to share */
  lh_model *m1 = build(&c, 21, 8192, 1, LH_F32), *m2 = build(&c, 21, 8192, 2, LH_F32);
  CHECK(m1 && m2);
  if (!m1 || !m2) return;
  int32_t *tok = random_tokens(T, V, 22), *alt = random_tokens(T, V, 23);
  float *a = malloc(sizeof(float) * T * V), *b = malloc(sizeof(float) * T * V);
  int plan[] = {41, 16, 100, 3};
  lh_state *sa = run_plan(m2, tok, T, plan, 4, a), *sb = run_plan(m2, tok, T, plan, 4, b);
  CHECK_MSG(same_bits(a, b, (size_t)T * V), "same chunk plan twice: logits differ in some bit");
  lh_state_free(sb);
  sb = run_plan(m1, tok, T, plan, 4, b);
  CHECK_MSG(same_bits(a, b, (size_t)T * V), "1 thread vs 2 threads: logits differ in some bit");
  lh_state_free(sa), lh_state_free(sb);

  /* fork then continue == continue, and the original is untouched by the fork's writes */
  lh_error err;
  lh_state *orig, *fork;
  float *x = malloc(sizeof(float) * (T - P) * V), *y = malloc(sizeof(float) * (T - P) * V);
  CHECK(!lh_state_new(m2, &orig, &err));
  CHECK(!lh_prefill(orig, tok, P, NULL, NULL, &err));
  CHECK(!lh_state_fork(orig, &fork, &err));
  CHECK(lh_state_pos(fork) == P && lh_state_model(fork) == m2);
  CHECK(same_bits(lh_state_last_logits(fork), lh_state_last_logits(orig), V));
  CHECK(!lh_prefill(fork, alt + P, T - P, NULL, y, &err));        /* the fork diverges ... */
  CHECK(!lh_prefill(orig, tok + P, T - P, NULL, x, &err));        /* ... the original goes on */
  lh_state *fresh;
  float *z = malloc(sizeof(float) * (T - P) * V);
  CHECK(!lh_state_new(m2, &fresh, &err));
  CHECK(!lh_prefill(fresh, tok, P, NULL, NULL, &err));
  CHECK(!lh_prefill(fresh, tok + P, T - P, NULL, z, &err));
  CHECK_MSG(same_bits(x, z, (size_t)(T - P) * V), "a fork's writes changed the original's continuation");
  lh_state_free(fresh);
  CHECK(!lh_state_new(m2, &fresh, &err));
  CHECK(!lh_prefill(fresh, tok, P, NULL, NULL, &err));
  CHECK(!lh_prefill(fresh, alt + P, T - P, NULL, z, &err));
  CHECK_MSG(same_bits(y, z, (size_t)(T - P) * V), "fork then continue differs from continuing the original");
  lh_state_free(orig), lh_state_free(fork), lh_state_free(fresh);

  /* export/import and serialize/deserialize, then continue */
  lh_state *base;
  CHECK(!lh_state_new(m2, &base, &err));
  CHECK(!lh_prefill(base, tok, P, NULL, NULL, &err));
  lh_state_layout lay;
  lh_state_get_layout(m2, &lay);
  CHECK_EQ(lay.n_lightning, 2);
  CHECK_EQ(lay.n_softmax, 2);
  CHECK(lay.kv_dtype == LH_F32);
  CHECK_EQ(lay.kv_row_bytes, 2 * c.n_kv_heads * c.head_dim * 4);
  CHECK_EQ(lay.lightning_bytes, (size_t)c.n_heads * c.head_dim * c.head_dim * 4);
  lh_state *imp;
  CHECK(!lh_state_new(m2, &imp, &err));
  unsigned char *buf = malloc(lay.lightning_bytes + (size_t)P * lay.kv_row_bytes);
  for (int i = 0; i < lay.n_lightning; i++) {
    CHECK(!lh_state_export_lightning(base, i, buf, &err));
    CHECK(!lh_state_import_lightning(imp, i, buf, &err));
  }
  for (int j = 0; j < lay.n_softmax; j++) { /* in two slices, as the store appends per checkpoint */
    CHECK(!lh_state_export_kv(base, j, 0, 100, buf, &err));
    CHECK(!lh_state_import_kv(imp, j, 0, 100, buf, LH_F32, &err));
    CHECK(!lh_state_export_kv(base, j, 100, P, buf, &err));
    CHECK(lh_state_import_kv(imp, j, 0, 10, buf, LH_F32, &err) == LH_EINVAL); /* must continue at 100 */
    CHECK(!lh_state_import_kv(imp, j, 100, P, buf, LH_F32, &err));
  }
  CHECK(lh_prefill(imp, tok, 1, NULL, NULL, &err) == LH_EINVAL); /* not finished */
  CHECK_STR_CONTAINS(err.msg, "import");
  CHECK(!lh_state_import_finish(imp, P, lh_state_last_logits(base), &err));
  CHECK(lh_state_import_lightning(imp, 0, buf, &err) == LH_EINVAL); /* no longer fresh */
  void *ser;
  size_t len;
  CHECK(!lh_state_serialize(base, &ser, &len, &err));
  lh_state *des = NULL;
  CHECK(!lh_state_deserialize(m2, ser, len, &des, &err));
  CHECK(des && lh_state_pos(des) == P);
  CHECK(des && same_bits(lh_state_last_logits(des), lh_state_last_logits(base), V));
  CHECK(!lh_prefill(base, tok + P, T - P, NULL, x, &err));
  CHECK(!lh_prefill(imp, tok + P, T - P, NULL, y, &err));
  CHECK_MSG(same_bits(x, y, (size_t)(T - P) * V), "export/import then continue differs in some bit");
  if (des) {
    CHECK(!lh_prefill(des, tok + P, T - P, NULL, z, &err));
    CHECK_MSG(same_bits(x, z, (size_t)(T - P) * V), "serialize/deserialize then continue differs in some bit");
  }
  /* a BF16 checkpoint imported into fp32 pages: converted, close but not exact */
  lh_state *bf;
  CHECK(!lh_state_new(m2, &bf, &err));
  for (int i = 0; i < lay.n_lightning; i++) {
    CHECK(!lh_state_export_lightning(imp, i, buf, &err)); /* any lightning state will do for the check */
    CHECK(!lh_state_import_lightning(bf, i, buf, &err));
  }
  float *kvf = malloc((size_t)T * lay.kv_row_bytes);
  uint16_t *kvb = malloc((size_t)T * lay.kv_row_bytes / 2);
  size_t vals = lay.kv_row_bytes / 4;
  for (int j = 0; j < lay.n_softmax; j++) {
    CHECK(!lh_state_export_kv(imp, j, 0, T, kvf, &err));
    for (size_t i = 0; i < (size_t)T * vals; i++) kvb[i] = lh_f32_to_bf16(kvf[i]);
    CHECK(!lh_state_import_kv(bf, j, 0, T, kvb, LH_BF16, &err));
    CHECK(!lh_state_export_kv(bf, j, 0, T, kvf, &err));
    int conv_ok = 1;
    for (size_t i = 0; i < (size_t)T * vals; i++) conv_ok &= kvf[i] == lh_bf16_to_f32(kvb[i]);
    CHECK_MSG(conv_ok, "bf16 KV rows were not converted exactly to fp32");
  }
  CHECK(!lh_state_import_finish(bf, T, NULL, &err));
  CHECK(lh_state_last_logits(bf) == NULL);
  CHECK(lh_state_export_kv(bf, 0, 0, T + 1, kvf, &err) == LH_EINVAL);

  /* a serialised state with bf16 KV rows (as the CUDA backend makes them) resumes on the CPU: the
   * rows are converted, and the result is the same as importing the same rows one by one */
  {
    const size_t lb = (size_t)lay.n_lightning * lay.lightning_bytes, kvf_bytes = (size_t)P * lay.kv_row_bytes;
    const size_t tail = len - 128 - lb - (size_t)lay.n_softmax * kvf_bytes; /* logits and CRC */
    const size_t blen = len - (size_t)lay.n_softmax * kvf_bytes / 2;
    unsigned char *bs = malloc(blen), *src = ser;
    memcpy(bs, src, 128 + lb);
    uint32_t one = LH_BF16;
    uint64_t total = blen;
    memcpy(bs + 32 + 4 * 6, &one, 4); /* little-endian host, as the format is */
    memcpy(bs + 16, &total, 8);
    unsigned char *o = bs + 128 + lb;
    const float *kv_in = (const float *)(src + 128 + lb);
    for (size_t i = 0; i < (size_t)lay.n_softmax * kvf_bytes / 4; i++, o += 2) {
      uint16_t h = lh_f32_to_bf16(kv_in[i]);
      memcpy(o, &h, 2);
    }
    memcpy(o, src + len - tail, tail - 4);
    uint32_t crc = lh_crc32c(0, bs, blen - 4);
    memcpy(bs + blen - 4, &crc, 4);
    lh_state *sb = NULL, *sm = NULL;
    CHECK_MSG(!lh_state_deserialize(m2, bs, blen, &sb, &err), "bf16 state: %s", err.msg);
    CHECK(!lh_state_new(m2, &sm, &err));
    for (int i = 0; i < lay.n_lightning; i++) CHECK(!lh_state_import_lightning(sm, i, src + 128 + i * lay.lightning_bytes, &err));
    for (int j = 0; j < lay.n_softmax; j++)
      CHECK(!lh_state_import_kv(sm, j, 0, P, bs + 128 + lb + (size_t)j * kvf_bytes / 2, LH_BF16, &err));
    CHECK(!lh_state_import_finish(sm, P, NULL, &err));
    float *u = malloc(sizeof(float) * (size_t)(T - P) * V), *w = malloc(sizeof(float) * (size_t)(T - P) * V);
    CHECK(sb && !lh_prefill(sb, tok + P, T - P, NULL, u, &err));
    CHECK(!lh_prefill(sm, tok + P, T - P, NULL, w, &err));
    CHECK_MSG(same_bits(u, w, (size_t)(T - P) * V), "bf16 state: deserialize differs from importing its rows");
    double r = lh_rel_l2(u, x, (size_t)(T - P) * V);
    CHECK_MSG(r > 0 && r < 1e-2, "bf16 state: rel L2 %.3g from the fp32 continuation (want (0, 1e-2))", r);
    lh_state_free(sb), lh_state_free(sm);
    free(bs), free(u), free(w);
  }

  /* damaged byte strings are refused, clearly */
  lh_state *bad = (lh_state *)1;
  CHECK(lh_state_deserialize(m2, ser, len - 1, &bad, &err) != LH_OK && bad == NULL);
  CHECK_STR_CONTAINS(err.msg, "truncated");
  CHECK(lh_state_deserialize(m2, ser, 50, &bad, &err) == LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "too short");
  ((unsigned char *)ser)[len / 2] ^= 0x10;
  CHECK(lh_state_deserialize(m2, ser, len, &bad, &err) == LH_ECORRUPT);
  CHECK_STR_CONTAINS(err.msg, "checksum");
  ((unsigned char *)ser)[len / 2] ^= 0x10;
  ((unsigned char *)ser)[0] = 'X';
  CHECK(lh_state_deserialize(m2, ser, len, &bad, &err) == LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "magic");
  ((unsigned char *)ser)[0] = 'L';
  lh_config c2 = c;
  c2.n_kv_heads = 4;
  lh_model *other = build(&c2, 21, 64, 1, LH_F32);
  CHECK(other && lh_state_deserialize(other, ser, len, &bad, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "n_kv_heads");
  rm_free(other);
  free(ser);
  lh_state_free(base), lh_state_free(imp), lh_state_free(des), lh_state_free(bf);
  free(tok), free(alt), free(a), free(b), free(x), free(y), free(z), free(buf), free(kvf), free(kvb);
  rm_free(m1), rm_free(m2);
}

/* ---- 4: bad input ------------------------------------------------------------------------- */

static void check_errors(void) {
  lh_config c = rm_default_config();
  c.max_position_embeddings = 64;
  int V = c.vocab_size;
  lh_model *m = build(&c, 31, 8192, 2, LH_F32);
  CHECK(m != NULL);
  if (!m) return;
  int32_t *tok = random_tokens(64, V, 32);
  lh_error err;
  lh_state *s, *t;
  float *x = malloc(sizeof(float) * 64 * V), *y = malloc(sizeof(float) * 64 * V);
  CHECK(!lh_state_new(m, &s, &err));
  CHECK(!lh_state_new(m, &t, &err));
  CHECK(lh_state_last_logits(s) == NULL);
  CHECK(!lh_prefill(s, tok, 30, NULL, NULL, &err));
  CHECK(!lh_prefill(t, tok, 30, NULL, NULL, &err));
  int32_t bad[3] = {1, V, 2};
  CHECK(lh_prefill(s, bad, 3, NULL, NULL, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "outside the vocabulary");
  CHECK_STR_CONTAINS(err.msg, "index 1");
  bad[1] = -5;
  CHECK(lh_prefill(s, bad, 3, NULL, NULL, &err) == LH_EINVAL);
  CHECK(lh_prefill(s, tok, 35, NULL, NULL, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "max_position_embeddings");
  CHECK(lh_decode_batch(&s, 1, &bad[1], x, &err) == LH_EINVAL);
  lh_state *twice[2] = {s, s};
  CHECK(lh_decode_batch(twice, 2, tok, x, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "twice");
  CHECK(lh_prefill(s, tok, 0, NULL, NULL, &err) == LH_EINVAL);
  CHECK(lh_state_pos(s) == 30);
  /* the failed calls changed nothing: both states continue identically */
  CHECK(!lh_prefill(s, tok + 30, 34, NULL, x, &err));
  CHECK(!lh_prefill(t, tok + 30, 34, NULL, y, &err));
  CHECK_MSG(same_bits(x, y, (size_t)34 * V), "a refused call changed the state");
  CHECK(lh_prefill(s, tok, 1, NULL, NULL, &err) == LH_EINVAL); /* exactly at the limit now */
  lh_state_free(s), lh_state_free(t);
  lh_model nob = {0};
  CHECK(lh_state_new(&nob, &s, &err) == LH_EINVAL);
  CHECK_STR_CONTAINS(err.msg, "backend");
  /* the backend refuses weights that do not fit the config */
  lh_config bc = rm_default_config();
  bc.rotary_dim = 7;
  CHECK(rm_build(&bc, 1, 16, 1, LH_F32, &err) == NULL);
  CHECK_STR_CONTAINS(err.msg, "rotary_dim");
  free(tok), free(x), free(y);
  rm_free(m);
}

/* ---- sampling ----------------------------------------------------------------------------- */

static void check_sampling(void) {
  float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, NAN};
  lh_sampler_params g = {0};
  uint64_t rs = 1;
  CHECK_EQ(lh_sample(l, 6, &g, &rs), 1); /* greedy: lowest id of the tie */
  CHECK_EQ(lh_sample(l, 6, NULL, &rs), 1);
  lh_sampler_params p = {1.0f, 1.0f, 1, 42};
  CHECK_EQ(lh_sample(l, 6, &p, &rs), 1); /* top_k 1 is greedy */
  p.top_k = 0;
  p.top_p = 0.01f;
  CHECK_EQ(lh_sample(l, 6, &p, &rs), 1); /* a tiny nucleus is greedy too */
  p.top_p = 1.0f;
  int counts[6] = {0};
  uint64_t r1 = p.seed, r2 = p.seed;
  int same = 1;
  for (int i = 0; i < 4000; i++) {
    int a = lh_sample(l, 6, &p, &r1), b = lh_sample(l, 6, &p, &r2);
    same &= a == b;
    CHECK(a >= 0 && a < 5);
    counts[a]++;
  }
  CHECK_MSG(same, "the same seed gave different tokens");
  /* frequencies follow softmax(l): ids 1 and 3 most, 2 least; 5 (NaN) never */
  double z = exp(0.5) + 2 * exp(2.0) + exp(-1.0) + exp(1.9);
  CHECK_MSG(fabs(counts[1] / 4000.0 - exp(2.0) / z) < 0.04, "id 1 drawn %d / 4000 times", counts[1]);
  CHECK_MSG(fabs(counts[2] / 4000.0 - exp(-1.0) / z) < 0.02, "id 2 drawn %d / 4000 times", counts[2]);
  CHECK_EQ(counts[5], 0);
  p.top_k = 2;
  int only = 1;
  for (int i = 0; i < 200; i++) {
    int a = lh_sample(l, 6, &p, &r1);
    only &= a == 1 || a == 3;
  }
  CHECK_MSG(only, "top_k 2 drew outside the two best");
}

int main(void) {
  lh_test_begin("test_engine_model");
  lh_config c = rm_default_config(); /* partial RoPE, GQA 2, softmax first, alpha/beta != 1, B = 16 */
  check_config("default", &c, 300, LH_F32, 1);
  lh_config c2 = rm_default_config();
  c2.rotary_dim = c2.head_dim;
  c2.n_kv_heads = c2.n_heads; /* GQA ratio 1 */
  c2.tie_word_embeddings = 1;
  c2.top_k = 1;
  c2.block_size = 7;
  c2.n_layers = 5;
  c2.layer_kind[0] = LH_LAYER_LIGHTNING;
  c2.layer_kind[4] = LH_LAYER_LIGHTNING;
  check_config("full rope, MHA, tied, top-1, B=7", &c2, 290, LH_F32, 1);
  lh_config c3 = rm_default_config();
  c3.n_kv_heads = 1; /* GQA ratio 4 */
  c3.postnorm = 0;
  c3.n_experts = 8;
  c3.block_size = 256;
  check_config("GQA 4, pre-norm residual, 8 experts, B=256", &c3, 270, LH_BF16, 0);
  lh_config c4 = rm_default_config();
  c4.n_experts = 3;
  check_config("f16 weights, 3 experts", &c4, 40, LH_F16, 0);
  check_pieces();
  check_decode();
  check_bitwise();
  check_errors();
  check_sampling();
  return lh_test_end();
}
