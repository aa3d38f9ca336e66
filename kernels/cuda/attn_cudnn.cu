/* attn_cudnn.cu — see attn_cudnn.h: the SDPA graph for cuDNN's fused flash-attention engine,
 * built with the backend descriptor API, cached per shape bucket, run on the caller's stream.
 *
 * The graph mirrors what cudnn-frontend lowers its SDPA node into for cuDNN 9.19 (bf16 in and out,
 * fp32 scores; the row statistic max + log(sum) as an output only when the caller merges stretches
 * of keys). Every descriptor a plan needs stays alive with the plan.
 * Built only when CMake found cudnn.h and libcudnn (LH_HAVE_CUDNN); otherwise the functions say
 * so and the backend keeps its own kernel.
 */
#include "kernels/cuda/attn_cudnn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifndef LH_HAVE_CUDNN

struct lh_cudnn_attn {
  int unused;
};
int lh_cudnn_attn_available(void) { return 0; }
lh_cudnn_attn *lh_cudnn_attn_open(char *msg, size_t cap) {
  snprintf(msg, cap, "this build has no cuDNN (cudnn.h / libcudnn not found at configure time)");
  return NULL;
}
void lh_cudnn_attn_close(lh_cudnn_attn *a) { (void)a; }
int64_t lh_cudnn_attn_table_len(int64_t nrows, int64_t pos) { return (nrows + pos + 255) / 256; }
int64_t lh_cudnn_attn_key_bucket(int64_t nrows, int64_t pos) { return nrows + pos; }
int lh_cudnn_attn_prefill(lh_cudnn_attn *a, cudaStream_t st, const lh_cudnn_attn_args *x, char *msg, size_t cap) {
  (void)a, (void)st, (void)x;
  snprintf(msg, cap, "this build has no cuDNN");
  return -1;
}
void lh_cudnn_attn_set_form(lh_cudnn_attn *a, int exact, int autotune) { (void)a, (void)exact, (void)autotune; }
int lh_cudnn_attn_describe(const lh_cudnn_attn *a, char *buf, size_t cap) {
  (void)a;
  if (cap) buf[0] = 0;
  return 0;
}
void lh_cudnn_attn_stats(const lh_cudnn_attn *a, int *plans, double *build_s) {
  (void)a;
  *plans = 0, *build_s = 0;
}

#else

#include <cudnn.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace {

enum : int64_t {
  U_Q = 1, U_KC, U_VC, U_O, U_SEQ_Q, U_SEQ_KV, U_PT_K, U_PT_V, U_SCALE, U_NEGINF, U_LSE, U_DIAG,
  U_VIRT = 100
};

int64_t pow2_at_least(int64_t x, int64_t lo) {
  int64_t p = lo;
  while (p < x) p *= 2;
  return p;
}

struct Plan {
  std::vector<cudnnBackendDescriptor_t> keep; /* every descriptor the plan was built from */
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  /* Every engine config that finalized (one without autotuning), with cuDNN's global engine index of
   * each; autotuning times them on first use and keeps only the fastest, which is plan. */
  std::vector<cudnnBackendDescriptor_t> cand;
  std::vector<int64_t> engine;
  std::string tuned; /* after autotuning: each candidate's engine and time */
  ~Plan() {
    for (auto c : cand)
      if (c != plan) cudnnBackendDestroyDescriptor(c);
    if (plan) cudnnBackendDestroyDescriptor(plan);
    for (auto it = keep.rbegin(); it != keep.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
};

/* Graph builder: each call creates, fills and finalizes one descriptor; the first failure is kept
 * (with cuDNN's own message) and every later call becomes a no-op. */
struct Builder {
  Builder(Plan *plan, char *m, size_t c) : p(plan), msg(m), cap(c) {}
  Plan *p;
  char *msg;
  size_t cap;
  bool ok = true;
  int64_t next_virt = U_VIRT;

  void fail(const char *what, cudnnStatus_t s) {
    if (!ok) return;
    ok = false;
    char last[512] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(msg, cap, "cudnn: %s: %s%s%s", what, cudnnGetErrorString(s), last[0] ? ": " : "", last);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t, const char *what) {
    cudnnBackendDescriptor_t d = nullptr;
    if (!ok) return nullptr;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
    if (s != CUDNN_STATUS_SUCCESS) {
      fail(what, s);
      return nullptr;
    }
    p->keep.push_back(d);
    return d;
  }
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
           const void *v, const char *what) {
    if (!ok) return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (s != CUDNN_STATUS_SUCCESS) fail(what, s);
  }
  void done(cudnnBackendDescriptor_t d, const char *what) {
    if (!ok) return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s != CUDNN_STATUS_SUCCESS) fail(what, s);
  }

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t dt, const int64_t dims[4], const int64_t strides[4],
                                  bool is_virtual, bool by_value = false) {
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    done(t, "tensor finalize");
    return t;
  }
  /* A virtual tensor shaped like a score matrix [1, H, sq, skv] or a row statistic [1, H, sq, 1]. */
  cudnnBackendDescriptor_t virt(cudnnDataType_t dt, int64_t H, int64_t sq, int64_t skv) {
    const int64_t dims[4] = {1, H, sq, skv}, strides[4] = {H * sq * skv, sq * skv, skv, 1};
    return tensor(next_virt++, dt, dims, strides, true);
  }
  cudnnBackendDescriptor_t scalar(int64_t uid, cudnnDataType_t dt) {
    const int64_t one[4] = {1, 1, 1, 1};
    return tensor(uid, dt, one, one, false, true);
  }

  /* y = mode(x [, b [, t]]) with math precision prec. */
  cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                                     cudnnBackendDescriptor_t y, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "axis");
    done(pw, "pointwise finalize");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pw desc");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pw x");
    if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "pw b");
    if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pw t");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pw y");
    done(op, "pointwise op finalize");
    ops.push_back(op);
    return y;
  }
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c,
              cudnnBackendDescriptor_t m_over, cudnnBackendDescriptor_t n_over, cudnnBackendDescriptor_t k_over,
              bool padding) {
    cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul type");
    (void)padding; /* the padding value is 0.0, cuDNN's default: the frontend sets it only when non-zero */
    done(mm, "matmul finalize");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b, "matmul b");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    if (m_over) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m_over, "m");
    if (n_over) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n_over, "n");
    if (k_over) set(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k_over, "k");
    done(op, "matmul op finalize");
    ops.push_back(op);
  }
  cudnnBackendDescriptor_t reduce(cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    cudnnDataType_t f = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "reduction mode");
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction type");
    done(r, "reduction finalize");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction desc");
    done(op, "reduction op finalize");
    ops.push_back(op);
    return y;
  }
  void paged_load(cudnnBackendDescriptor_t container, cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t seq,
                  cudnnBackendDescriptor_t table) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, "paged load op");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &container, "container");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "paged y");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &seq, "paged seq");
    set(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &table, "table");
    done(op, "paged load finalize");
    ops.push_back(op);
  }

  std::vector<cudnnBackendDescriptor_t> ops;
};

/* mode, H, Hkv, d, sq, skv, blocks, causal, with the log-sum-exp output, exact (no padding: the real
 * key count is skv; see build_plan), layout (lh_cudnn_attn_args) */
typedef std::tuple<int, int, int, int, int64_t, int64_t, int64_t, int, int, int, int> Key;

}  // namespace

struct lh_cudnn_attn {
  cudnnHandle_t handle = nullptr;
  int exact = 1;    /* lh_cudnn_attn_set_form */
  int autotune = 0;
  std::map<Key, Plan *> plans;
  std::map<Key, std::string> refused; /* buckets cuDNN said no to: not retried */
  void *ws = nullptr;
  size_t ws_bytes = 0;
  double build_s = 0;
};

/* cuDNN's global index of the engine an engine config uses (-1 when it does not say). */
static int64_t engine_index(cudnnBackendDescriptor_t cfg) {
  cudnnBackendDescriptor_t eng;
  int64_t n = 0, idx = -1;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &eng) != CUDNN_STATUS_SUCCESS) return -1;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) ==
      CUDNN_STATUS_SUCCESS)
    cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &idx);
  cudnnBackendDestroyDescriptor(eng);
  return idx;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* The whole graph for one bucket, then the first engine config cuDNN's heuristics offer that
 * finalizes into a plan (with autotuning: every one that finalizes, timed on first use).
 *
 * The exact form (key element 9) is for calls whose real key count is the bucket (skv) itself: no
 * sequence-length overrides and no padding mask, and the causal diagonal as a constant (row >= col
 * when square, else row + (skv - sq) >= col from a by-value scalar): the graph torch's cuDNN SDPA
 * builds for dense tensors. Otherwise the padded form: the real lengths in the seq-len tensors. */
static Plan *build_plan(lh_cudnn_attn *a, const Key &k, char *msg, size_t cap) {
  const int mode = std::get<0>(k);
  const int64_t H = std::get<1>(k), Hkv = std::get<2>(k), d = std::get<3>(k), sq = std::get<4>(k),
                skv = std::get<5>(k), nblocks = std::get<6>(k);
  const bool causal = std::get<7>(k), with_lse = std::get<8>(k), exact = std::get<9>(k);
  const int layout = std::get<10>(k);
  const int64_t P = 256, pages = skv / P;
  Plan *p = new Plan;
  Builder g(p, msg, cap);
  const cudnnDataType_t BF = CUDNN_DATA_BFLOAT16, F = CUDNN_DATA_FLOAT, I = CUDNN_DATA_INT32, B = CUDNN_DATA_BOOLEAN;

  /* [rows][H][d], or heads first [H][rows][d] (layout bits 0 and 1) */
  const int64_t qd[4] = {1, H, sq, d}, rows_first[4] = {sq * H * d, d, H * d, 1},
                heads_first[4] = {H * sq * d, sq * d, d, 1};
  auto q = g.tensor(U_Q, BF, qd, layout & 1 ? heads_first : rows_first, false);
  auto o = g.tensor(U_O, BF, qd, layout & 2 ? heads_first : rows_first, false);
  const int64_t one[4] = {1, 1, 1, 1};
  cudnnBackendDescriptor_t seq_q = nullptr, seq_kv = nullptr;
  if (!exact) {
    seq_q = g.tensor(U_SEQ_Q, I, one, one, false);
    seq_kv = g.tensor(U_SEQ_KV, I, one, one, false);
  }

  cudnnBackendDescriptor_t kt, v;
  if (mode == 0) {
    /* Containers: the pages as [blocks, Hkv, 256, d]; the loads give K^T [1, Hkv, d, skv] and V. */
    const int64_t page = 2 * Hkv * P * d;
    const int64_t cd[4] = {nblocks, Hkv, P, d}, cs[4] = {page, P * d, d, 1};
    auto kc = g.tensor(U_KC, BF, cd, cs, false);
    auto vc = g.tensor(U_VC, BF, cd, cs, false);
    const int64_t td[4] = {1, 1, pages, 1}, ts[4] = {pages, pages, 1, 1};
    auto ptk = g.tensor(U_PT_K, I, td, ts, false);
    auto ptv = g.tensor(U_PT_V, I, td, ts, false);
    const int64_t ktd[4] = {1, Hkv, d, skv}, kts[4] = {d * skv * Hkv, d * skv, 1, d};
    kt = g.tensor(g.next_virt++, BF, ktd, kts, true);
    const int64_t vd[4] = {1, Hkv, skv, d}, vs[4] = {d * skv * Hkv, d * skv, d, 1};
    v = g.tensor(g.next_virt++, BF, vd, vs, true);
    g.paged_load(kc, kt, seq_kv, ptk);
    g.paged_load(vc, v, seq_kv, ptv);
  } else {
    /* head-major [Hkv][skv][d] each (lh_cuda_kv_gather's layout with stride_keys = the bucket) */
    const int64_t ktd[4] = {1, Hkv, d, skv}, kts[4] = {skv * Hkv * d, skv * d, 1, d};
    kt = g.tensor(U_KC, BF, ktd, kts, false);
    const int64_t vd[4] = {1, Hkv, skv, d}, vs[4] = {skv * Hkv * d, skv * d, d, 1};
    v = g.tensor(U_VC, BF, vd, vs, false);
  }
  auto scale = g.scalar(U_SCALE, F);
  auto neginf = g.scalar(U_NEGINF, F);

  auto s = g.virt(F, H, sq, skv);
  g.matmul(q, kt, s, seq_q, seq_kv, nullptr, true);
  s = g.pointwise(CUDNN_POINTWISE_MUL, F, s, scale, nullptr, g.virt(F, H, sq, skv));
  if (!exact) {
    /* padding: row < n_q and col < n_kv */
    auto prow = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, I, s, nullptr, nullptr, g.virt(I, H, sq, skv), 2);
    auto pcol = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, I, s, nullptr, nullptr, g.virt(I, H, sq, skv), 3);
    auto rin = g.pointwise(CUDNN_POINTWISE_CMP_LT, B, prow, seq_q, nullptr, g.virt(B, H, sq, skv));
    auto cin = g.pointwise(CUDNN_POINTWISE_CMP_LT, B, pcol, seq_kv, nullptr, g.virt(B, H, sq, skv));
    auto inside = g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, B, rin, cin, nullptr, g.virt(B, H, sq, skv));
    s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, F, s, neginf, inside, g.virt(F, H, sq, skv));
  }
  if (causal) {
    /* bottom-right aligned: row + n_kv - n_q >= col */
    auto row = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, F, s, nullptr, nullptr, g.virt(I, H, sq, skv), 2);
    auto col = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, F, s, nullptr, nullptr, g.virt(I, H, sq, skv), 3);
    if (!exact) {
      row = g.pointwise(CUDNN_POINTWISE_ADD, I, row, seq_kv, nullptr, g.virt(I, H, sq, skv));
      row = g.pointwise(CUDNN_POINTWISE_SUB, I, row, seq_q, nullptr, g.virt(I, H, sq, skv));
    } else if (skv != sq) {
      row = g.pointwise(CUDNN_POINTWISE_ADD, I, row, g.scalar(U_DIAG, I), nullptr, g.virt(I, H, sq, skv));
    }
    auto keep = g.pointwise(CUDNN_POINTWISE_CMP_GE, B, row, col, nullptr, g.virt(B, H, sq, skv));
    s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, F, s, neginf, keep, g.virt(F, H, sq, skv));
  }
  /* softmax */
  auto mx = g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, g.virt(F, H, sq, 1));
  auto e = g.pointwise(CUDNN_POINTWISE_SUB, F, s, mx, nullptr, g.virt(F, H, sq, skv));
  e = g.pointwise(CUDNN_POINTWISE_EXP, F, e, nullptr, nullptr, g.virt(F, H, sq, skv));
  auto z = g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, g.virt(F, H, sq, 1));
  /* The row statistic max + log(sum): an output [1, H, sq, 1] when the caller merges stretches of
   * keys, virtual otherwise. The engine's pattern includes it either way, and without it the fused
   * kernel was seen writing its statistics through another tensor's pointer (compute-sanitizer:
   * out-of-bounds 4-byte writes on an H200, cuDNN 9.19). */
  auto lz = g.pointwise(CUDNN_POINTWISE_LOG, F, z, nullptr, nullptr, g.virt(F, H, sq, 1));
  if (with_lse) {
    const int64_t ld[4] = {1, H, sq, 1}, ls[4] = {H * sq, sq, 1, 1};
    g.pointwise(CUDNN_POINTWISE_ADD, F, mx, lz, nullptr, g.tensor(U_LSE, F, ld, ls, false));
  } else {
    g.pointwise(CUDNN_POINTWISE_ADD, F, mx, lz, nullptr, g.virt(F, H, sq, 1));
  }
  auto pr = g.pointwise(CUDNN_POINTWISE_DIV, F, e, z, nullptr, g.virt(BF, H, sq, skv));
  g.matmul(pr, v, o, seq_q, nullptr, seq_kv, true);

  cudnnBackendDescriptor_t graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)g.ops.size(), g.ops.data(), "ops");
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle, "graph handle");
  g.done(graph, "operation graph finalize");
  if (!g.ok) {
    delete p;
    return nullptr;
  }

  std::string why;
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  for (cudnnBackendHeurMode_t hm : modes) {
    cudnnBackendDescriptor_t heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heur graph");
    g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm, "heur mode");
    g.done(heur, "heuristics finalize");
    if (!g.ok) break;
    enum { NCFG = 8 };
    cudnnBackendDescriptor_t cfgs[NCFG];
    for (int i = 0; i < NCFG; i++) cfgs[i] = g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (!g.ok) break;
    int64_t n = 0;
    cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                NCFG, &n, cfgs);
    if (st != CUDNN_STATUS_SUCCESS) {
      g.fail("heuristics results", st);
      break;
    }
    for (int64_t i = 0; i < n; i++) {
      cudnnBackendDescriptor_t plan;
      if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) continue;
      cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &a->handle);
      cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
      cudnnStatus_t fs = cudnnBackendFinalize(plan);
      if (fs == CUDNN_STATUS_SUCCESS) {
        int64_t got = 0, ws = 0;
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
        p->cand.push_back(plan);
        p->engine.push_back(engine_index(cfgs[i]));
        p->workspace = std::max(p->workspace, ws); /* every candidate runs in the same workspace */
        if (!a->autotune) break;
        continue;
      }
      char last[256] = "";
      cudnnGetLastErrorString(last, sizeof last);
      why += std::string(" [cfg ") + std::to_string(i) + ": " + cudnnGetErrorString(fs) + " " + last + "]";
      cudnnBackendDestroyDescriptor(plan);
    }
    if (!p->cand.empty()) {
      p->plan = p->cand[0];
      return p;
    }
    why += std::string(hm == CUDNN_HEUR_MODE_A ? " heuristics A: " : " fallback: ") + std::to_string(n) + " configs;";
  }
  if (g.ok) snprintf(msg, cap, "cudnn: no engine config finalizes for this graph:%s", why.c_str());
  delete p;
  return nullptr;
}

/* The plan for key k: cached, or built now (a refusal is kept and not retried). */
static Plan *get_plan(lh_cudnn_attn *a, const Key &k, char *msg, size_t cap) {
  auto it = a->plans.find(k);
  if (it != a->plans.end()) return it->second;
  auto r = a->refused.find(k);
  if (r != a->refused.end()) {
    snprintf(msg, cap, "%s", r->second.c_str());
    return nullptr;
  }
  double t0 = now_s();
  Plan *p = build_plan(a, k, msg, cap);
  a->build_s += now_s() - t0;
  if (!p) {
    a->refused[k] = msg;
    return nullptr;
  }
  a->plans.emplace(k, p);
  return p;
}

static cudnnStatus_t execute(lh_cudnn_attn *a, cudaStream_t st, cudnnBackendDescriptor_t plan,
                             const std::vector<int64_t> &uids, const std::vector<void *> &ptrs, const char **what) {
  cudnnBackendDescriptor_t vp;
  cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
  *what = "variant pack";
  if (s != CUDNN_STATUS_SUCCESS) return s;
  void *ws = a->ws;
  cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data());
  cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(),
                           ptrs.data());
  cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  s = cudnnBackendFinalize(vp);
  if (s == CUDNN_STATUS_SUCCESS) {
    *what = "execute";
    cudnnSetStream(a->handle, st);
    s = cudnnBackendExecute(a->handle, plan, vp);
  }
  cudnnBackendDestroyDescriptor(vp);
  return s;
}

/* Autotuning, on a plan's first use: each candidate once to warm up, then three times timed with
 * events on the caller's stream (this blocks the host); the fastest stays, the others are freed.
 * The outputs are written by every run and rewritten by the caller's own run after. */
static cudnnStatus_t tune(lh_cudnn_attn *a, cudaStream_t st, Plan *p, const std::vector<int64_t> &uids,
                          const std::vector<void *> &ptrs, const char **what) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  float best = INFINITY;
  size_t chosen = 0;
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  for (size_t i = 0; i < p->cand.size() && s == CUDNN_STATUS_SUCCESS; i++) {
    s = execute(a, st, p->cand[i], uids, ptrs, what);
    cudaEventRecord(e0, st);
    for (int r = 0; r < 3 && s == CUDNN_STATUS_SUCCESS; r++) s = execute(a, st, p->cand[i], uids, ptrs, what);
    cudaEventRecord(e1, st);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    ms /= 3;
    if (s == CUDNN_STATUS_SUCCESS && ms < best) best = ms, chosen = i;
    char t[64];
    snprintf(t, sizeof t, "%sengine %lld %.3f ms", i ? ", " : "", (long long)p->engine[i], ms);
    p->tuned += t;
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  for (size_t i = 0; i < p->cand.size(); i++)
    if (i != chosen) cudnnBackendDestroyDescriptor(p->cand[i]);
  p->plan = p->cand[chosen];
  p->cand = {p->plan};
  p->engine = {p->engine[chosen]};
  return s;
}

extern "C" {

int lh_cudnn_attn_available(void) { return 1; }

lh_cudnn_attn *lh_cudnn_attn_open(char *msg, size_t cap) {
  lh_cudnn_attn *a = new lh_cudnn_attn;
  cudnnStatus_t s = cudnnCreate(&a->handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    snprintf(msg, cap, "cudnnCreate: %s (cuDNN %zu)", cudnnGetErrorString(s), cudnnGetVersion());
    delete a;
    return NULL;
  }
  const char *ex = getenv("LH_CUDNN_EXACT"), *at = getenv("LH_CUDNN_AUTOTUNE");
  if (ex && *ex) a->exact = atoi(ex) != 0;
  if (at && *at) a->autotune = atoi(at) != 0;
  return a;
}

void lh_cudnn_attn_set_form(lh_cudnn_attn *a, int exact, int autotune) {
  if (exact >= 0) a->exact = exact != 0;
  if (autotune >= 0) a->autotune = autotune != 0;
}

void lh_cudnn_attn_close(lh_cudnn_attn *a) {
  if (!a) return;
  for (auto &kv : a->plans) delete kv.second;
  if (a->ws) cudaFree(a->ws);
  if (a->handle) cudnnDestroy(a->handle);
  delete a;
}

int64_t lh_cudnn_attn_table_len(int64_t nrows, int64_t pos) { return pow2_at_least(nrows + pos, 1024) / 256; }
int64_t lh_cudnn_attn_key_bucket(int64_t nrows, int64_t pos) { return pow2_at_least(nrows + pos, 1024); }

int lh_cudnn_attn_prefill(lh_cudnn_attn *a, cudaStream_t st, const lh_cudnn_attn_args *x, char *msg, size_t cap) {
  /* Queries exactly (a padded query bucket would let Q/O tiles reach past the caller's rows);
   * keys bucketed (K/V are buffers we size: the gathered copy, or the page table). */
  const int64_t nkv = x->nkv > 0 ? x->nkv : x->nrows + x->pos;
  const int64_t sq = x->nrows, skv = pow2_at_least(nkv, 1024);
  const int exact = a->exact && x->mode == 1 && nkv == skv;
  Key k{x->mode, x->H, x->Hkv, x->d, sq, skv, x->mode == 0 ? x->n_blocks : 0, x->unmasked ? 0 : 1, x->lse ? 1 : 0,
        exact, x->layout & 3};
  Plan *p = get_plan(a, k, msg, cap);
  if (!p && exact) { /* the exact form refused: the padded one serves every shape the engine takes */
    std::get<9>(k) = 0;
    p = get_plan(a, k, msg, cap);
  }
  if (!p) return -1;
  const bool is_exact = std::get<9>(k);
  if ((size_t)p->workspace > a->ws_bytes) {
    cudaStreamSynchronize(st);
    if (a->ws) cudaFree(a->ws);
    a->ws = NULL;
    a->ws_bytes = 0;
    if (cudaMalloc(&a->ws, (size_t)p->workspace) != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(msg, cap, "cudnn attention: no memory for a %lld-byte workspace", (long long)p->workspace);
      return -1;
    }
    a->ws_bytes = (size_t)p->workspace;
  }
  float scale = 1.0f / sqrtf((float)x->d), neginf = -INFINITY;
  int32_t diag = (int32_t)(skv - sq);
  const size_t vshift = (size_t)x->Hkv * 256 * x->d * 2;
  std::vector<int64_t> uids = {U_Q, U_O, U_KC, U_VC, U_SCALE};
  std::vector<void *> ptrs = {(void *)x->q, x->o, x->mode == 0 ? (void *)x->kv_base : (void *)x->k,
                              x->mode == 0 ? (void *)((const char *)x->kv_base + vshift) : (void *)x->v, &scale};
  /* every uid of the pack must be in the graph (cuDNN 9.19 answers BAD_PARAM_NULL_POINTER to one that
   * is not): the exact, unmasked graph selects nothing, so it has no -inf */
  if (!is_exact || !x->unmasked) uids.push_back(U_NEGINF), ptrs.push_back(&neginf);
  if (!is_exact) {
    uids.push_back(U_SEQ_Q), ptrs.push_back((void *)x->seq_q);
    uids.push_back(U_SEQ_KV), ptrs.push_back((void *)x->seq_kv);
  } else if (!x->unmasked && skv != sq) {
    uids.push_back(U_DIAG), ptrs.push_back(&diag);
  }
  if (x->mode == 0) {
    uids.push_back(U_PT_K), ptrs.push_back((void *)x->page_ids);
    uids.push_back(U_PT_V), ptrs.push_back((void *)x->page_ids);
  }
  if (x->lse) uids.push_back(U_LSE), ptrs.push_back(x->lse);
  const char *what = "execute";
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  if (p->cand.size() > 1) s = tune(a, st, p, uids, ptrs, &what);
  if (s == CUDNN_STATUS_SUCCESS) s = execute(a, st, p->plan, uids, ptrs, &what);
  if (s != CUDNN_STATUS_SUCCESS) {
    char last[256] = "";
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(msg, cap, "cudnn: %s: %s %s", what, cudnnGetErrorString(s), last);
    return -1;
  }
  return 0;
}

int lh_cudnn_attn_describe(const lh_cudnn_attn *a, char *buf, size_t cap) {
  size_t n = 0;
  if (cap) buf[0] = 0;
  if (!a) return 0;
  for (const auto &kv : a->plans) {
    const Key &k = kv.first;
    const Plan *p = kv.second;
    int w = snprintf(buf + n, n < cap ? cap - n : 0, "%s[%s sq %lld skv %lld%s%s%s%s%s: engine %lld%s%s]",
                     n ? " " : "", std::get<0>(k) ? "gathered" : "paged", (long long)std::get<4>(k),
                     (long long)std::get<5>(k), std::get<7>(k) ? " causal" : "", std::get<8>(k) ? " lse" : "",
                     std::get<9>(k) ? " exact" : " padded", std::get<10>(k) & 1 ? " q[H][rows]" : "",
                     std::get<10>(k) & 2 ? " o[H][rows]" : "", (long long)(p->engine.empty() ? -1 : p->engine[0]),
                     p->tuned.empty() ? "" : "; tuned: ", p->tuned.c_str());
    if (w > 0) n = std::min(cap ? cap - 1 : 0, n + (size_t)w);
  }
  return (int)a->plans.size();
}

void lh_cudnn_attn_stats(const lh_cudnn_attn *a, int *plans, double *build_s) {
  *plans = a ? (int)a->plans.size() : 0;
  *build_s = a ? a->build_s : 0;
}

}  // extern "C"

#endif
