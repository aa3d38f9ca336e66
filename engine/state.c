/* state.c — sequences: lightning states and paged softmax KV, prefill, batched decode, forks,
 * the checkpoint hooks and the byte format of a whole state.
 *
 * A state holds, in backend memory: one [H x d x d] fp32 matrix per lightning layer, and for each
 * softmax layer a table of KV pages of LH_KV_PAGE_TOKENS positions (layout in backend.h). Pages
 * are reference-counted host handles around backend memory, so lh_state_fork copies only the
 * lightning matrices and the page tables.
 *
 * Invariants (checked at each public entry):
 *  1. Outside an import, every softmax layer holds exactly pos rows (kv_rows[j] == pos) in
 *     n_pages[j] >= ceil(pos / PT) pages; pages past that are empty spares (left by a failed
 *     allocation) and harmless.
 *  2. A page whose refs > 1 is never written. Before rows [pos, pos+n) are written, every page
 *     from pos / PT on that is shared is replaced by a private copy (copy on write). Only the
 *     partial last page can be shared and written in practice: full pages are never written again.
 *  3. has_logits says whether logits[] holds the logits after the last token fed.
 *
 * Lifecycle of a state:
 *
 *     lh_state_new ----> [fresh, pos 0] --lh_prefill / lh_decode_batch--> [pos > 0] --+
 *          |                  ^                                             ^         |
 *          |                  +-- lh_state_fork (copy of any settled state) |         +-- (repeat)
 *          +--import_lightning / import_kv--> [importing] --import_finish---+
 *
 * A state that is importing accepts only import calls and lh_state_free. Prefill and decode fail
 * with LH_EINVAL, leaving the state as it was, when a token id is outside the vocabulary or the
 * position would pass max_position_embeddings; any other failure (memory, backend) leaves it
 * unusable, and the caller frees it.
 *
 * Over several ranks (engine/ranks.c) each public call here is, on rank 0, first told to the other
 * ranks, which make it on their copies; calls end with lh_rank_agree on every rank, and prefill
 * and decode also agree before the forward, so no rank enters a collective alone. Each rank holds
 * only its share of every state (held(): its heads' lightning states, its kv heads' KV pages, so
 * 1/R of the memory); exports gather the shares on rank 0 into the one-rank layout, imports take
 * each rank's share of the whole state that rank 0 sends.
 *
 * Serialised form (lh_state_serialize), all little-endian:
 *     0   char[8]  "LHSTATE\0"
 *     8   u32      format version (1)
 *     12  u32      flags (bit 0: last logits present)
 *     16  u64      total length in bytes, trailer included
 *     24  u64      pos
 *     32  u32 x 8  n_lightning, n_softmax, n_heads, head_dim, n_kv_heads, vocab_size, kv dtype, 0
 *     64  char[64] model id (hex; all zero when the model has none)
 *     128 payload: every lightning layer's state (fp32 [H][d][d]), then for each softmax layer
 *         pos KV rows ([2][n_kv][d] in the kv dtype), then the logits (fp32 [vocab]) if present
 *     end u32      CRC-32C of every byte before it
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "engine/internal.h"
#include "util/half.h"
#include "util/hash.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the state byte format is written with memcpy: a little-endian host is assumed"
#endif

#define PT LH_KV_PAGE_TOKENS

typedef struct kv_page {
  void *mem;         /* backend memory, [2][n_kv][PT][d] in kv dtype */
  atomic_int refs;   /* states whose tables hold this page */
} kv_page;

struct lh_state {
  lh_model *m;
  int64_t pos;
  lh_seq_mem mem;    /* what the backend sees: mem.kv_pages[j][p] == pages[j][p]->mem */
  kv_page ***pages;  /* [n_softmax][cap] */
  int64_t *n_pages;  /* [n_softmax] */
  int64_t *kv_rows;  /* [n_softmax] */
  int64_t cap;       /* capacity of every page table */
  int importing;
  int has_logits;
  float *logits;     /* [vocab] */
  int64_t sid;       /* the id rank 0 gave it when the model spans ranks (engine/ranks.c); 0: none */
};

int64_t lh_state_sid(const lh_state *s) { return s->sid; }
void lh_state_set_sid(lh_state *s, int64_t sid) { s->sid = sid; }

/* What this process holds of every state: all heads and kv heads, or, when the model spans ranks,
 * its rank's share (lh_tp_share): heads [h0, h0 + nh) and kv heads [g0, g0 + ng). The backend
 * sees states in that layout: lightning [nh][d][d], KV pages [2][ng][PT][d]. */
typedef struct share {
  int64_t h0, nh, g0, ng;
} share;

static share held(const lh_model *m) {
  share sh = {0, m->cfg.n_heads, 0, m->cfg.n_kv_heads};
  if (m->comm) {
    int R = lh_comm_size(m->comm), r = lh_comm_rank(m->comm);
    int64_t hi;
    lh_tp_share(m->cfg.n_heads, R, r, &sh.h0, &hi);
    sh.nh = hi - sh.h0;
    lh_tp_share(m->cfg.n_kv_heads, R, r, &sh.g0, &hi);
    sh.ng = hi - sh.g0;
  }
  return sh;
}

static size_t page_bytes(const lh_model *m) {
  return 2 * (size_t)held(m).ng * PT * (size_t)m->cfg.head_dim * lh_dtype_size(m->ops->kv_dtype);
}

/* one lightning layer's state: the logical whole (checkpoints, payloads) and what is held here */
static size_t lightning_bytes(const lh_model *m) {
  return (size_t)m->cfg.n_heads * m->cfg.head_dim * m->cfg.head_dim * sizeof(float);
}
static size_t held_lightning_bytes(const lh_model *m) {
  return (size_t)held(m).nh * m->cfg.head_dim * m->cfg.head_dim * sizeof(float);
}

static void page_release(lh_model *m, kv_page *p) {
  if (p && atomic_fetch_sub(&p->refs, 1) == 1) {
    m->ops->free(m->be, p->mem);
    free(p);
  }
}

static kv_page *page_new(lh_model *m) {
  kv_page *p = malloc(sizeof *p);
  if (!p) return NULL;
  p->mem = m->ops->alloc(m->be, page_bytes(m));
  if (!p->mem) {
    free(p);
    return NULL;
  }
  atomic_init(&p->refs, 1);
  return p;
}

static void state_free(lh_state *s) {
  if (!s) return;
  lh_model *m = s->m;
  if (s->mem.lightning)
    for (int i = 0; i < m->cfg.n_lightning; i++)
      if (s->mem.lightning[i]) m->ops->free(m->be, s->mem.lightning[i]);
  for (int j = 0; j < m->cfg.n_softmax; j++) {
    if (s->pages && s->pages[j])
      for (int64_t p = 0; p < s->n_pages[j]; p++) page_release(m, s->pages[j][p]);
    if (s->pages) free(s->pages[j]);
    if (s->mem.kv_pages) free(s->mem.kv_pages[j]);
  }
  free(s->pages);
  free(s->mem.kv_pages);
  free(s->mem.lightning);
  free(s->n_pages);
  free(s->kv_rows);
  free(s->logits);
  free(s);
}

/* The struct and host arrays; lightning memory only if with_lightning (fork fills its own). */
static lh_status state_alloc(lh_model *m, int with_lightning, lh_state **out, lh_error *err) {
  *out = NULL;
  if (!m || !m->ops || !m->be)
    return lh_error_set(err, LH_EINVAL, "state: the model was opened without a compute backend");
  lh_state *s = calloc(1, sizeof *s);
  if (!s) return lh_error_set(err, LH_ENOMEM, "state: out of memory");
  s->m = m;
  int nl = m->cfg.n_lightning, ns = m->cfg.n_softmax;
  s->mem.lightning = calloc((size_t)nl + 1, sizeof(void *));
  s->mem.kv_pages = calloc((size_t)ns + 1, sizeof(void **));
  s->pages = calloc((size_t)ns + 1, sizeof(kv_page **));
  s->n_pages = calloc((size_t)ns + 1, sizeof(int64_t));
  s->kv_rows = calloc((size_t)ns + 1, sizeof(int64_t));
  s->logits = calloc((size_t)m->cfg.vocab_size, sizeof(float));
  if (!s->mem.lightning || !s->mem.kv_pages || !s->pages || !s->n_pages || !s->kv_rows || !s->logits) goto nomem;
  for (int i = 0; with_lightning && i < nl; i++)
    if (!(s->mem.lightning[i] = m->ops->alloc(m->be, held_lightning_bytes(m)))) goto nomem;
  *out = s;
  return LH_OK;
nomem:
  state_free(s);
  return lh_error_set(err, LH_ENOMEM, "state: out of memory for a new sequence state");
}

/* ---- over several ranks (engine/ranks.c): rank 0 tells each call, every rank agrees -------- */

void lh_state_free(lh_state *s) {
  if (s && s->sid && lh_rank_leads(s->m)) lh_rank_tell(s->m->comm, (lh_rank_cmd){.op = LH_RANK_FREE, .sid = s->sid}, NULL);
  state_free(s);
}

/* A state new on every rank, or on none: a rank whose copy was made frees it when another failed. */
static lh_status made_everywhere(lh_model *m, lh_status st, int64_t sid, lh_state **out, lh_error *err) {
  st = lh_rank_agree(m->comm, st, err);
  if (st) {
    state_free(*out);
    *out = NULL;
  } else if (lh_rank_leads(m)) {
    (*out)->sid = sid;
  }
  return st;
}

lh_status lh_state_new(lh_model *m, lh_state **out, lh_error *err) {
  if (!m || !lh_rank_many(m)) return state_alloc(m, 1, out, err);
  int64_t sid = lh_rank_leads(m) ? ++m->next_sid : 0;
  lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_NEW, .sid = sid}, NULL);
  return made_everywhere(m, state_alloc(m, 1, out, err), sid, out, err);
}

int64_t lh_state_pos(const lh_state *s) { return s ? s->pos : 0; }
lh_model *lh_state_model(const lh_state *s) { return s ? s->m : NULL; }
const float *lh_state_last_logits(const lh_state *s) { return s && s->has_logits ? s->logits : NULL; }

static lh_status grow_tables(lh_state *s, int64_t need, lh_error *err) {
  if (need <= s->cap) return LH_OK;
  int64_t cap = s->cap ? s->cap : 4;
  while (cap < need) cap *= 2;
  for (int j = 0; j < s->m->cfg.n_softmax; j++) {
    kv_page **p = realloc(s->pages[j], (size_t)cap * sizeof *p);
    if (p) s->pages[j] = p;
    void **q = realloc(s->mem.kv_pages[j], (size_t)cap * sizeof *q);
    if (q) s->mem.kv_pages[j] = q;
    if (!p || !q) return lh_error_set(err, LH_ENOMEM, "state: out of memory growing the KV page table");
  }
  s->cap = cap;
  return LH_OK;
}

/* Make softmax layer j hold private pages for every position in [from, upto): shared pages there
 * are copied (invariant 2), missing ones allocated. On failure nothing the state relies on has
 * changed (new pages past the rows held are spares). */
static lh_status ensure_layer(lh_state *s, int j, int64_t from, int64_t upto, lh_error *err) {
  lh_model *m = s->m;
  int64_t need = (upto + PT - 1) / PT;
  lh_status st = grow_tables(s, need, err);
  if (st) return st;
  for (int64_t p = from / PT; p < s->n_pages[j] && p < need; p++) {
    kv_page *old = s->pages[j][p];
    if (atomic_load(&old->refs) == 1) continue;
    kv_page *cp = page_new(m);
    if (!cp) return lh_error_set(err, LH_ENOMEM, "state: out of memory copying a shared KV page");
    st = m->ops->copy(m->be, cp->mem, old->mem, page_bytes(m), err);
    if (st) {
      page_release(m, cp);
      return st;
    }
    s->pages[j][p] = cp;
    s->mem.kv_pages[j][p] = cp->mem;
    page_release(m, old);
  }
  while (s->n_pages[j] < need) {
    kv_page *np = page_new(m);
    if (!np) return lh_error_set(err, LH_ENOMEM, "state: out of memory for KV pages (position %lld)", (long long)upto);
    s->pages[j][s->n_pages[j]] = np;
    s->mem.kv_pages[j][s->n_pages[j]++] = np->mem;
  }
  return LH_OK;
}

static lh_status ensure_rows(lh_state *s, int64_t n, lh_error *err) {
  for (int j = 0; j < s->m->cfg.n_softmax; j++) {
    lh_status st = ensure_layer(s, j, s->pos, s->pos + n, err);
    if (st) return st;
  }
  s->mem.n_pages = s->m->cfg.n_softmax ? s->n_pages[0] : 0;
  for (int j = 1; j < s->m->cfg.n_softmax; j++)
    if (s->n_pages[j] < s->mem.n_pages) s->mem.n_pages = s->n_pages[j];
  return LH_OK;
}

static lh_status check_feed(const lh_state *s, const char *what, const int32_t *tokens, int64_t n, lh_error *err) {
  const lh_config *c = &s->m->cfg;
  if (s->importing)
    return lh_error_set(err, LH_EINVAL, "%s: the state is being imported; call lh_state_import_finish first", what);
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= c->vocab_size)
      return lh_error_set(err, LH_EINVAL, "%s: token id %d at index %lld is outside the vocabulary (0..%d)", what,
                          tokens[i], (long long)i, c->vocab_size - 1);
  if (c->max_position_embeddings > 0 && s->pos + n > c->max_position_embeddings)
    return lh_error_set(err, LH_EINVAL,
                        "%s: positions up to %lld would pass the model's max_position_embeddings (%d); the state "
                        "holds %lld tokens",
                        what, (long long)(s->pos + n), c->max_position_embeddings, (long long)s->pos);
  return LH_OK;
}

static void settle(lh_state *s, int64_t n) {
  s->pos += n;
  for (int j = 0; j < s->m->cfg.n_softmax; j++) s->kv_rows[j] = s->pos;
  s->has_logits = 1;
}

static lh_status prefill(lh_state *s, const int32_t *tokens, int64_t n, float *logits_last, float *logits_all,
                         lh_error *err) {
  if (!s || !tokens || n < 1) return lh_error_set(err, LH_EINVAL, "prefill: need a state and n >= 1 tokens");
  lh_status st = check_feed(s, "prefill", tokens, n, err);
  if (st) return st;
  st = ensure_rows(s, n, err);
  if (lh_rank_many(s->m)) st = lh_rank_agree(s->m->comm, st, err); /* no rank may start the forward alone */
  if (st) return st;
  lh_model *m = s->m;
  int64_t V = m->cfg.vocab_size;
  lh_segment seg = {&s->mem, 0, n, s->pos};
  lh_batch b = {n, 1, &seg};
  int64_t last = n - 1;
  if (logits_all) {
    st = lh_forward(m, &b, tokens, 1, NULL, 0, logits_all, err);
    if (!st) memcpy(s->logits, logits_all + last * V, (size_t)V * sizeof(float));
  } else {
    st = lh_forward(m, &b, tokens, 0, &last, 1, s->logits, err);
  }
  if (st) {
    s->has_logits = 0;
    return st;
  }
  settle(s, n);
  if (logits_last) memcpy(logits_last, s->logits, (size_t)V * sizeof(float));
  return LH_OK;
}

lh_status lh_prefill(lh_state *s, const int32_t *tokens, int64_t n, float *logits_last, float *logits_all,
                     lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return prefill(s, tokens, n, logits_last, logits_all, err);
  int64_t sent = tokens && n > 0 ? n : 0;
  lh_rank_tell(s->m->comm, (lh_rank_cmd){.op = LH_RANK_PREFILL, .sid = s->sid, .n = sent, .bytes = (uint64_t)sent * 4},
               tokens);
  return lh_rank_agree(s->m->comm, prefill(s, tokens, n, logits_last, logits_all, err), err);
}

/* The checks of a decode call that change nothing (so rank 0 can make them before telling). */
static lh_status decode_args(lh_state *const *states, int k, const int32_t *tokens, float *logits, lh_error *err) {
  if (!states || !tokens || !logits || k < 1)
    return lh_error_set(err, LH_EINVAL, "decode: need k >= 1 states, tokens and a logits buffer");
  lh_model *m = states[0] ? states[0]->m : NULL;
  for (int i = 0; i < k; i++) {
    if (!states[i] || states[i]->m != m)
      return lh_error_set(err, LH_EINVAL, "decode: state %d is missing or belongs to another model", i);
    for (int u = 0; u < i; u++)
      if (states[u] == states[i])
        return lh_error_set(err, LH_EINVAL, "decode: state %d appears twice in the batch (also at %d)", i, u);
    lh_status st = check_feed(states[i], "decode", &tokens[i], 1, err);
    if (st) return lh_error_prefix(err, st, "state %d: ", i);
  }
  return LH_OK;
}

static lh_status decode(lh_state *const *states, int k, const int32_t *tokens, float *logits, lh_error *err) {
  lh_model *m = states[0]->m;
  lh_status st = LH_OK;
  for (int i = 0; i < k && !st; i++) st = ensure_rows(states[i], 1, err);
  if (lh_rank_many(m)) st = lh_rank_agree(m->comm, st, err); /* no rank may start the forward alone */
  if (st) return st;
  lh_segment *seg = malloc((size_t)k * sizeof *seg);
  if (!seg) return lh_error_set(err, LH_ENOMEM, "decode: out of memory");
  for (int i = 0; i < k; i++) seg[i] = (lh_segment){&states[i]->mem, i, 1, states[i]->pos};
  lh_batch b = {k, k, seg};
  st = lh_forward(m, &b, tokens, 1, NULL, 0, logits, err);
  free(seg);
  int64_t V = m->cfg.vocab_size;
  for (int i = 0; i < k; i++) {
    if (st) {
      states[i]->has_logits = 0;
      continue;
    }
    memcpy(states[i]->logits, logits + (int64_t)i * V, (size_t)V * sizeof(float));
    settle(states[i], 1);
  }
  return st;
}

lh_status lh_decode_batch(lh_state *const *states, int k, const int32_t *tokens, float *logits, lh_error *err) {
  lh_status st = decode_args(states, k, tokens, logits, err);
  if (st) return st;
  lh_model *m = states[0]->m;
  if (!lh_rank_many(m)) return decode(states, k, tokens, logits, err);
  if (lh_rank_leads(m)) {
    unsigned char *pl = malloc((size_t)k * 12);
    if (!pl) return lh_error_set(err, LH_ENOMEM, "decode: out of memory");
    for (int i = 0; i < k; i++) memcpy(pl + 8 * (size_t)i, &states[i]->sid, 8);
    memcpy(pl + 8 * (size_t)k, tokens, (size_t)k * 4);
    lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_DECODE, .layer = k, .bytes = (uint64_t)k * 12}, pl);
    free(pl);
  }
  return lh_rank_agree(m->comm, decode(states, k, tokens, logits, err), err);
}

static lh_status fork_state(const lh_state *src, lh_state **out, lh_error *err) {
  *out = NULL;
  if (!src) return lh_error_set(err, LH_EINVAL, "fork: no state");
  if (src->importing) return lh_error_set(err, LH_EINVAL, "fork: the state is being imported");
  lh_model *m = src->m;
  lh_state *s;
  lh_status st = state_alloc(m, 0, &s, err);
  if (st) return st;
  for (int i = 0; i < m->cfg.n_lightning; i++) {
    if (!(s->mem.lightning[i] = m->ops->alloc(m->be, held_lightning_bytes(m)))) {
      lh_state_free(s);
      return lh_error_set(err, LH_ENOMEM, "fork: out of memory for the lightning states");
    }
    if ((st = m->ops->copy(m->be, s->mem.lightning[i], src->mem.lightning[i], held_lightning_bytes(m), err))) {
      lh_state_free(s);
      return st;
    }
  }
  if ((st = grow_tables(s, src->cap, err))) {
    lh_state_free(s);
    return st;
  }
  for (int j = 0; j < m->cfg.n_softmax; j++) {
    for (int64_t p = 0; p < src->n_pages[j]; p++) {
      atomic_fetch_add(&src->pages[j][p]->refs, 1);
      s->pages[j][p] = src->pages[j][p];
      s->mem.kv_pages[j][p] = src->pages[j][p]->mem;
    }
    s->n_pages[j] = src->n_pages[j];
    s->kv_rows[j] = src->kv_rows[j];
  }
  s->mem.n_pages = src->mem.n_pages;
  s->pos = src->pos;
  s->has_logits = src->has_logits;
  memcpy(s->logits, src->logits, (size_t)m->cfg.vocab_size * sizeof(float));
  *out = s;
  return LH_OK;
}

lh_status lh_state_fork(const lh_state *src, lh_state **out, lh_error *err) {
  if (!src || !lh_rank_many(src->m)) return fork_state(src, out, err);
  lh_model *m = src->m;
  int64_t sid = lh_rank_leads(m) ? ++m->next_sid : 0;
  lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_FORK, .sid = src->sid, .sid2 = sid}, NULL);
  return made_everywhere(m, fork_state(src, out, err), sid, out, err);
}

/* ---- checkpoint hooks --------------------------------------------------------------------- */

/* Bytes of one position's K and V over all kv heads of a softmax layer, in kv dtype t. */
static size_t kv_row_bytes(const lh_model *m, lh_dtype t) {
  return 2 * (size_t)m->cfg.n_kv_heads * m->cfg.head_dim * lh_dtype_size(t);
}

void lh_state_get_layout(const lh_model *m, lh_state_layout *lay) {
  memset(lay, 0, sizeof *lay);
  lay->n_lightning = m->cfg.n_lightning;
  lay->lightning_bytes = (size_t)m->cfg.n_heads * m->cfg.head_dim * m->cfg.head_dim * sizeof(float);
  lay->n_softmax = m->cfg.n_softmax;
  lay->kv_dtype = m->ops ? m->ops->kv_dtype : LH_F32;
  lay->kv_row_bytes = kv_row_bytes(m, lay->kv_dtype);
  lay->vocab_size = m->cfg.vocab_size;
}

static lh_status export_lightning(const lh_state *s, int i, void *dst, lh_error *err) {
  if (!s || i < 0 || i >= s->m->cfg.n_lightning)
    return lh_error_set(err, LH_EINVAL, "export: lightning layer %d does not exist", i);
  return s->m->ops->to_host(s->m->be, dst, s->mem.lightning[i], held_lightning_bytes(s->m), err);
}

/* Rows [t0, t1) of the held kv heads move between the pages and row-major host rows of row_heads
 * kv heads ([2][row_heads][d] each), the page's kv head g being the rows' head0 + g; `out` says
 * which way. Runs of rows within a page move in one backend copy, through a host bounce buffer of
 * one page slice. */
static lh_status kv_move(lh_state *s, int j, int64_t t0, int64_t t1, unsigned char *rows, int out, int64_t row_heads,
                         int64_t head0, lh_error *err) {
  lh_model *m = s->m;
  int nkv = (int)held(m).ng;
  size_t es = lh_dtype_size(m->ops->kv_dtype), dbytes = (size_t)m->cfg.head_dim * es,
         row_bytes = 2 * (size_t)row_heads * dbytes;
  unsigned char *bounce = malloc((size_t)PT * dbytes);
  if (!bounce) return lh_error_set(err, LH_ENOMEM, "state: out of memory moving KV rows");
  lh_status st = LH_OK;
  for (int64_t t = t0; t < t1 && !st;) {
    int64_t p = t / PT, r0 = t % PT, r1 = (t1 - p * PT) < PT ? t1 - p * PT : PT;
    unsigned char *page = s->pages[j][p]->mem;
    for (int half = 0; half < 2 && !st; half++)
      for (int g = 0; g < nkv && !st; g++) {
        unsigned char *slice = page + (((size_t)half * nkv + g) * PT + (size_t)r0) * dbytes;
        size_t nbytes = (size_t)(r1 - r0) * dbytes;
        size_t col = ((size_t)half * row_heads + head0 + g) * dbytes;
        if (out) {
          st = m->ops->to_host(m->be, bounce, slice, nbytes, err);
          for (int64_t r = r0; r < r1 && !st; r++)
            memcpy(rows + (size_t)(p * PT + r - t0) * row_bytes + col, bounce + (size_t)(r - r0) * dbytes, dbytes);
        } else {
          for (int64_t r = r0; r < r1; r++)
            memcpy(bounce + (size_t)(r - r0) * dbytes, rows + (size_t)(p * PT + r - t0) * row_bytes + col, dbytes);
          st = m->ops->from_host(m->be, slice, bounce, nbytes, err);
        }
      }
    t = p * PT + r1;
  }
  free(bounce);
  return st;
}

static lh_status export_kv(const lh_state *s, int j, int64_t t0, int64_t t1, void *dst, lh_error *err) {
  if (!s || j < 0 || j >= s->m->cfg.n_softmax)
    return lh_error_set(err, LH_EINVAL, "export: softmax layer %d does not exist", j);
  if (t0 < 0 || t1 < t0 || t1 > s->kv_rows[j])
    return lh_error_set(err, LH_EINVAL, "export: KV rows [%lld, %lld) of softmax layer %d: the state holds %lld",
                        (long long)t0, (long long)t1, j, (long long)s->kv_rows[j]);
  return kv_move((lh_state *)s, j, t0, t1, dst, 1, held(s->m).ng, 0, err); /* rows of the held kv heads */
}

/* Over several ranks an export gathers the ranks' shares on rank 0 (dst is only written there): the
 * lightning shares are consecutive head ranges, so they land in place; KV rows come back as each
 * rank's [rows][2][ng][d] and are interleaved into [rows][2][n_kv][d]. */
lh_status lh_state_export_lightning(const lh_state *s, int i, void *dst, lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return export_lightning(s, i, dst, err);
  lh_model *m = s->m;
  lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_EXPORT_LIGHTNING, .sid = s->sid, .layer = i}, NULL);
  size_t mine_bytes = held_lightning_bytes(m);
  void *mine = malloc(mine_bytes);
  lh_status st = mine ? export_lightning(s, i, mine, err) : lh_error_set(err, LH_ENOMEM, "export: out of memory");
  st = lh_rank_agree(m->comm, st, err);
  if (!st) st = lh_rank_agree(m->comm, lh_comm_gather(m->comm, mine, mine_bytes, dst, err), err);
  free(mine);
  return st;
}

lh_status lh_state_export_kv(const lh_state *s, int j, int64_t t0, int64_t t1, void *dst, lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return export_kv(s, j, t0, t1, dst, err);
  lh_model *m = s->m;
  lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_EXPORT_KV, .sid = s->sid, .layer = j, .t0 = t0, .t1 = t1}, NULL);
  const int R = lh_comm_size(m->comm), lead = lh_comm_rank(m->comm) == 0;
  const share sh = held(m);
  const size_t hb = (size_t)m->cfg.head_dim * lh_dtype_size(m->ops->kv_dtype), mine_row = 2 * (size_t)sh.ng * hb;
  const int64_t rows = t1 > t0 ? t1 - t0 : 0;
  unsigned char *mine = malloc(rows * mine_row + 1), *all = lead ? malloc((size_t)R * rows * mine_row + 1) : NULL;
  lh_status st = mine && (all || !lead) ? export_kv(s, j, t0, t1, mine, err)
                                        : lh_error_set(err, LH_ENOMEM, "export: out of memory for %lld KV rows",
                                                       (long long)rows);
  st = lh_rank_agree(m->comm, st, err);
  if (!st) st = lh_rank_agree(m->comm, lh_comm_gather(m->comm, mine, rows * mine_row, all, err), err);
  if (!st && lead) {
    const size_t full_row = 2 * (size_t)m->cfg.n_kv_heads * hb, part = (size_t)sh.ng * hb;
    for (int r = 0; r < R; r++) /* every rank holds the same number of kv heads: rank r's start at r ng */
      for (int64_t t = 0; t < rows; t++)
        for (int half = 0; half < 2; half++)
          memcpy((unsigned char *)dst + (size_t)t * full_row + ((size_t)half * m->cfg.n_kv_heads + (size_t)r * sh.ng) * hb,
                 all + ((size_t)r * rows + (size_t)t) * mine_row + (size_t)half * part, part);
  }
  free(mine);
  free(all);
  return st;
}

static lh_status check_import(lh_state *s, const char *what, lh_error *err) {
  if (!s) return lh_error_set(err, LH_EINVAL, "%s: no state", what);
  if (!s->importing && (s->pos != 0 || s->has_logits))
    return lh_error_set(err, LH_EINVAL, "%s: import works on a fresh state (this one holds %lld tokens)", what,
                        (long long)s->pos);
  s->importing = 1;
  return LH_OK;
}

static lh_status import_lightning(lh_state *s, int i, const void *src, lh_error *err) {
  lh_status st = check_import(s, "import", err);
  if (st) return st;
  if (i < 0 || i >= s->m->cfg.n_lightning)
    return lh_error_set(err, LH_EINVAL, "import: lightning layer %d does not exist", i);
  /* the held heads of the whole state */
  const unsigned char *from = (const unsigned char *)src + (size_t)held(s->m).h0 * s->m->cfg.head_dim *
                                                               s->m->cfg.head_dim * sizeof(float);
  return s->m->ops->from_host(s->m->be, s->mem.lightning[i], from, held_lightning_bytes(s->m), err);
}

static void convert_row(const void *src, lh_dtype sd, void *dst, lh_dtype dd, size_t n) {
  const unsigned char *a = src;
  unsigned char *b = dst;
  for (size_t i = 0; i < n; i++) {
    float f;
    uint16_t h;
    if (sd == LH_F32) memcpy(&f, a + 4 * i, 4);
    else {
      memcpy(&h, a + 2 * i, 2);
      f = sd == LH_BF16 ? lh_bf16_to_f32(h) : lh_f16_to_f32(h);
    }
    if (dd == LH_F32) memcpy(b + 4 * i, &f, 4);
    else {
      h = dd == LH_BF16 ? lh_f32_to_bf16(f) : lh_f32_to_f16(f);
      memcpy(b + 2 * i, &h, 2);
    }
  }
}

static lh_status import_kv(lh_state *s, int j, int64_t t0, int64_t t1, const void *src, lh_dtype src_dtype,
                           lh_error *err) {
  lh_status st = check_import(s, "import", err);
  if (st) return st;
  lh_model *m = s->m;
  if (j < 0 || j >= m->cfg.n_softmax) return lh_error_set(err, LH_EINVAL, "import: softmax layer %d does not exist", j);
  if (src_dtype != LH_F32 && src_dtype != LH_BF16 && src_dtype != LH_F16)
    return lh_error_set(err, LH_EINVAL, "import: unknown KV dtype %d", (int)src_dtype);
  if (t0 != s->kv_rows[j] || t1 < t0)
    return lh_error_set(err, LH_EINVAL, "import: KV rows of softmax layer %d must continue at %lld (got [%lld, %lld))",
                        j, (long long)s->kv_rows[j], (long long)t0, (long long)t1);
  if (m->cfg.max_position_embeddings > 0 && t1 > m->cfg.max_position_embeddings)
    return lh_error_set(err, LH_EINVAL, "import: %lld KV rows pass max_position_embeddings (%d)", (long long)t1,
                        m->cfg.max_position_embeddings);
  if (t1 == t0) return LH_OK;
  if ((st = ensure_layer(s, j, t0, t1, err))) return st;
  lh_dtype kd = m->ops->kv_dtype;
  size_t vals = 2 * (size_t)m->cfg.n_kv_heads * m->cfg.head_dim;
  const unsigned char *rows = src;
  unsigned char *conv = NULL;
  if (src_dtype != kd) {
    if (!(conv = malloc((size_t)(t1 - t0) * vals * lh_dtype_size(kd))))
      return lh_error_set(err, LH_ENOMEM, "import: out of memory converting %lld KV rows", (long long)(t1 - t0));
    for (int64_t r = 0; r < t1 - t0; r++)
      convert_row((const unsigned char *)src + (size_t)r * vals * lh_dtype_size(src_dtype), src_dtype,
                  conv + (size_t)r * vals * lh_dtype_size(kd), kd, vals);
    rows = conv;
  }
  st = kv_move(s, j, t0, t1, (unsigned char *)rows, 0, m->cfg.n_kv_heads, held(m).g0, err); /* whole rows in */
  free(conv);
  if (!st) s->kv_rows[j] = t1;
  return st;
}

static lh_status import_finish(lh_state *s, int64_t pos, const float *last_logits, lh_error *err) {
  lh_status st = check_import(s, "import finish", err);
  if (st) return st;
  lh_model *m = s->m;
  if (pos < 0 || (m->cfg.max_position_embeddings > 0 && pos > m->cfg.max_position_embeddings))
    return lh_error_set(err, LH_EINVAL, "import finish: position %lld is out of range", (long long)pos);
  for (int j = 0; j < m->cfg.n_softmax; j++)
    if (s->kv_rows[j] != pos)
      return lh_error_set(err, LH_EINVAL, "import finish: softmax layer %d holds %lld KV rows, position is %lld", j,
                          (long long)s->kv_rows[j], (long long)pos);
  s->pos = pos;
  s->mem.n_pages = m->cfg.n_softmax ? s->n_pages[0] : 0;
  for (int j = 1; j < m->cfg.n_softmax; j++)
    if (s->n_pages[j] < s->mem.n_pages) s->mem.n_pages = s->n_pages[j];
  s->has_logits = last_logits != NULL;
  if (last_logits) memcpy(s->logits, last_logits, (size_t)m->cfg.vocab_size * sizeof(float));
  s->importing = 0;
  return LH_OK;
}

/* Over several ranks every rank imports the whole state (rank 0 sends it), so each holds its share. */
lh_status lh_state_import_lightning(lh_state *s, int i, const void *src, lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return import_lightning(s, i, src, err);
  lh_model *m = s->m;
  size_t bytes = src && i >= 0 && i < m->cfg.n_lightning ? lightning_bytes(m) : 0;
  lh_rank_tell(m->comm, (lh_rank_cmd){.op = LH_RANK_IMPORT_LIGHTNING, .sid = s->sid, .layer = i, .bytes = bytes}, src);
  return lh_rank_agree(m->comm, import_lightning(s, i, src, err), err);
}

lh_status lh_state_import_kv(lh_state *s, int j, int64_t t0, int64_t t1, const void *src, lh_dtype src_dtype,
                             lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return import_kv(s, j, t0, t1, src, src_dtype, err);
  lh_model *m = s->m;
  size_t bytes = src && t1 > t0 ? (size_t)(t1 - t0) * 2 * (size_t)m->cfg.n_kv_heads * m->cfg.head_dim *
                                      lh_dtype_size(src_dtype)
                                : 0;
  lh_rank_tell(m->comm,
               (lh_rank_cmd){.op = LH_RANK_IMPORT_KV, .sid = s->sid, .layer = j, .t0 = t0, .t1 = t1,
                             .flag = (int32_t)src_dtype, .bytes = bytes},
               src);
  return lh_rank_agree(m->comm, import_kv(s, j, t0, t1, bytes ? src : NULL, src_dtype, err), err);
}

lh_status lh_state_import_finish(lh_state *s, int64_t pos, const float *last_logits, lh_error *err) {
  if (!s || !lh_rank_many(s->m)) return import_finish(s, pos, last_logits, err);
  lh_model *m = s->m;
  size_t bytes = last_logits ? (size_t)m->cfg.vocab_size * sizeof(float) : 0;
  lh_rank_tell(m->comm,
               (lh_rank_cmd){.op = LH_RANK_IMPORT_FINISH, .sid = s->sid, .n = pos, .flag = last_logits != NULL,
                             .bytes = bytes},
               last_logits);
  return lh_rank_agree(m->comm, import_finish(s, pos, last_logits, err), err);
}

/* ---- one byte string ---------------------------------------------------------------------- */

#define SER_MAGIC "LHSTATE"
#define SER_VERSION 1u
#define SER_HEADER 128

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void ser_dims(const lh_model *m, uint32_t dims[8]) {
  const lh_config *c = &m->cfg;
  uint32_t d[8] = {(uint32_t)c->n_lightning, (uint32_t)c->n_softmax, (uint32_t)c->n_heads, (uint32_t)c->head_dim,
                   (uint32_t)c->n_kv_heads, (uint32_t)c->vocab_size, (uint32_t)m->ops->kv_dtype, 0};
  memcpy(dims, d, sizeof d);
}

lh_status lh_state_serialize(const lh_state *s, void **out, size_t *len, lh_error *err) {
  *out = NULL;
  *len = 0;
  if (!s) return lh_error_set(err, LH_EINVAL, "serialize: no state");
  if (s->importing) return lh_error_set(err, LH_EINVAL, "serialize: the state is being imported");
  lh_model *m = s->m;
  lh_state_layout lay;
  lh_state_get_layout(m, &lay);
  size_t total = SER_HEADER + (size_t)lay.n_lightning * lay.lightning_bytes +
                 (size_t)lay.n_softmax * (size_t)s->pos * lay.kv_row_bytes +
                 (s->has_logits ? (size_t)lay.vocab_size * 4 : 0) + 4;
  unsigned char *b = calloc(1, total);
  if (!b) return lh_error_set(err, LH_ENOMEM, "serialize: out of memory for %zu bytes", total);
  memcpy(b, SER_MAGIC, 8);
  put32(b + 8, SER_VERSION);
  put32(b + 12, s->has_logits ? 1u : 0u);
  put64(b + 16, total);
  put64(b + 24, (uint64_t)s->pos);
  uint32_t dims[8];
  ser_dims(m, dims);
  for (int i = 0; i < 8; i++) put32(b + 32 + 4 * i, dims[i]);
  memcpy(b + 64, m->id, strnlen(m->id, 64));
  unsigned char *p = b + SER_HEADER;
  lh_status st = LH_OK;
  for (int i = 0; i < lay.n_lightning && !st; i++, p += lay.lightning_bytes) st = lh_state_export_lightning(s, i, p, err);
  for (int j = 0; j < lay.n_softmax && !st; j++, p += (size_t)s->pos * lay.kv_row_bytes)
    st = lh_state_export_kv(s, j, 0, s->pos, p, err);
  if (st) {
    free(b);
    return st;
  }
  if (s->has_logits) {
    memcpy(p, s->logits, (size_t)lay.vocab_size * 4);
    p += (size_t)lay.vocab_size * 4;
  }
  put32(p, lh_crc32c(0, b, (size_t)(p - b)));
  *out = b;
  *len = total;
  return LH_OK;
}

lh_status lh_state_deserialize(lh_model *m, const void *buf, size_t len, lh_state **out, lh_error *err) {
  *out = NULL;
  const unsigned char *b = buf;
  if (!m || !m->ops) return lh_error_set(err, LH_EINVAL, "deserialize: the model has no compute backend");
  if (!b || len < SER_HEADER + 4)
    return lh_error_set(err, LH_EFORMAT, "deserialize: %zu bytes is too short for a state (header alone is %d)", len,
                        SER_HEADER + 4);
  if (memcmp(b, SER_MAGIC, 8))
    return lh_error_set(err, LH_EFORMAT, "deserialize: not a longhaul state (bad magic at byte 0)");
  if (get32(b + 8) != SER_VERSION)
    return lh_error_set(err, LH_EUNSUPPORTED, "deserialize: state format version %u; this build reads version %u",
                        get32(b + 8), SER_VERSION);
  uint64_t total = get64(b + 16);
  if (total != len)
    return lh_error_set(err, total > len ? LH_EFORMAT : LH_ECORRUPT,
                        "deserialize: the state says it is %llu bytes long but %zu bytes were given (%s)",
                        (unsigned long long)total, len, total > len ? "truncated" : "trailing bytes");
  uint32_t crc = get32(b + len - 4), have = lh_crc32c(0, b, len - 4);
  if (crc != have)
    return lh_error_set(err, LH_ECORRUPT, "deserialize: checksum mismatch (stored %08x, computed %08x): corrupt state",
                        crc, have);
  uint32_t flags = get32(b + 12), dims[8];
  ser_dims(m, dims);
  static const char *names[8] = {"n_lightning", "n_softmax", "n_heads", "head_dim", "n_kv_heads", "vocab_size",
                                 "kv dtype", "reserved"};
  for (int i = 0; i < 8; i++)
    if (i != 6 && get32(b + 32 + 4 * i) != dims[i]) /* the kv dtype may differ: the rows are converted */
      return lh_error_set(err, LH_EINVAL, "deserialize: the state has %s = %u, this model has %u", names[i],
                          get32(b + 32 + 4 * i), dims[i]);
  char id[65] = {0};
  memcpy(id, b + 64, 64);
  if (id[0] && m->id[0] && strncmp(id, m->id, 64))
    return lh_error_set(err, LH_EINVAL, "deserialize: the state was made by model %.16s..., this is model %.16s...", id,
                        m->id);
  uint64_t pos = get64(b + 24);
  lh_state_layout lay;
  lh_state_get_layout(m, &lay);
  const uint32_t kd = get32(b + 32 + 4 * 6);
  if (kd >= LH_DTYPE_COUNT)
    return lh_error_set(err, LH_EFORMAT, "deserialize: the state's kv dtype %u is not one this build knows", kd);
  lay.kv_dtype = (lh_dtype)kd; /* a state made on CUDA (bf16 KV) resumes on the CPU (fp32) and back */
  lay.kv_row_bytes = kv_row_bytes(m, lay.kv_dtype);
  size_t fixed = SER_HEADER + (size_t)lay.n_lightning * lay.lightning_bytes + ((flags & 1) ? (size_t)lay.vocab_size * 4 : 0) + 4;
  size_t per_pos = (size_t)lay.n_softmax * lay.kv_row_bytes;
  if (fixed > len || (per_pos ? pos != (len - fixed) / per_pos || (len - fixed) % per_pos : len != fixed) ||
      (flags & ~1u))
    return lh_error_set(err, LH_EFORMAT, "deserialize: the sizes in the header (pos %llu, flags %u) do not add up to %zu bytes",
                        (unsigned long long)pos, flags, len);
  lh_state *s;
  lh_status st = lh_state_new(m, &s, err);
  if (st) return st;
  const unsigned char *p = b + SER_HEADER;
  for (int i = 0; i < lay.n_lightning && !st; i++, p += lay.lightning_bytes) st = lh_state_import_lightning(s, i, p, err);
  for (int j = 0; j < lay.n_softmax && !st; j++, p += (size_t)pos * lay.kv_row_bytes)
    st = lh_state_import_kv(s, j, 0, (int64_t)pos, p, lay.kv_dtype, err);
  if (!st) st = lh_state_import_finish(s, (int64_t)pos, (flags & 1) ? (const float *)p : NULL, err);
  if (st) {
    lh_state_free(s);
    return lh_error_prefix(err, st, "deserialize: ");
  }
  *out = s;
  return LH_OK;
}
