/* forward.c — the decoder layer loop over the backend's operations, one batch of rows at a time.
 *
 * The model (HF transformers' MiniMaxForCausalLM, models/minimax; all in fp32):
 *
 *     x = embed[token]
 *     for each layer l (kind: lightning, or softmax every few layers):
 *         h  = RMSNorm_in(x)                               eps = rms_norm_eps
 *         a  = Attn_l(h)
 *         x' = alpha_attn[kind] * r + beta_attn[kind] * a  r = h (postnorm, HF) or x (pre-norm form)
 *         h2 = RMSNorm_post(x')
 *         x  = alpha_mlp * r2 + beta_mlp * MoE(h2)          r2 = h2 (postnorm) or x'
 *     logits = lm_head(RMSNorm_final(x))                    lm_head may be the tied embedding
 *
 * Lightning attention (no RoPE, no 1/sqrt(d)): q,k,v = split per head of SiLU(W_qkv h);
 *     S_t = exp(-s_h) S_{t-1} + k_t^T v_t,  o_t = q_t S_t   (d x d fp32 state per head)
 *     Attn(h) = W_out( sigmoid(W_gate h) * RMSNorm_all_heads(o) )   (that norm's eps is 1e-6)
 * with s_h = (2^(-8/H))^(h+1) * (1 - l/(L-1+1e-5) + 1e-5).
 * Softmax attention: q,k,v projections, RoPE (rotate-half) on the first rotary_dim dims,
 *     when attn_length_scale_base L0 > 0 each query head h at position p scaled by
 *     1 + s_h max(0, ln((p+1)/L0)) (the layer's learned length_scale),
 *     causal GQA softmax(q k^T / sqrt(d)) v, o_proj.
 * MoE: p = softmax(W_router h) in fp32, top_k experts (ties: lowest index), weights p / sum p,
 *     sum_e w_e * W2_e(SiLU(W1_e h) * W3_e h) added in ascending expert order.
 *
 * The loop runs on at most m->max_rows rows per piece (the backend's workspace), so one prefill
 * of any length costs O(max_rows) activation memory; a piece carries every row through all
 * layers before the next starts, which is what makes the pieces equivalent to a chunk plan.
 * Activation slots: 0 = x (residual stream), 1 = h (normed input), 2 = a (block output).
 * Never: allocate anything that grows with the sequence, or touch KV pages itself.
 */
#include <stdlib.h>

#include "engine/forward.h"

static lh_status run_piece(lh_model *m, const lh_batch *b, const int32_t *tokens, const int64_t *rows,
                           int64_t nrows, float *logits, lh_error *err) {
  const lh_backend_ops *ops = m->ops;
  lh_backend *be = m->be;
  const lh_config *c = &m->cfg;
  const lh_weights *w = &m->w;
  void *x = ops->act(be, 0), *h = ops->act(be, 1), *a = ops->act(be, 2);
  int64_t n = b->n;
  lh_status st = ops->embed(be, tokens, n, x, err);
  int li = 0, si = 0;
  for (int l = 0; l < c->n_layers && !st; l++) {
    const lh_layer_weights *lw = &w->layers[l];
    lh_layer_kind kind = c->layer_kind[l];
    st = ops->rmsnorm(be, x, n, &lw->in_norm, h, err);
    if (st) break;
    st = kind == LH_LAYER_LIGHTNING ? ops->attn_lightning(be, l, li++, h, b, a, err)
                                    : ops->attn_softmax(be, l, si++, h, b, a, err);
    if (st) break;
    /* residual taken after the norm (postnorm) or before it; h receives RMSNorm_post(x') */
    st = ops->residual(be, c->postnorm ? h : x, a, c->attn_alpha[kind], c->attn_beta[kind], n, x, &lw->post_norm,
                       h, err);
    if (st) break;
    st = ops->moe(be, l, h, n, a, err);
    if (st) break;
    st = ops->residual(be, c->postnorm ? h : x, a, c->mlp_alpha, c->mlp_beta, n, x, NULL, NULL, err);
  }
  if (!st && nrows > 0) st = ops->logits(be, x, rows, nrows, logits, err);
  return st;
}

lh_status lh_forward(lh_model *m, const lh_batch *b, const int32_t *tokens, int all_rows, const int64_t *rows,
                     int64_t nrows, float *logits, lh_error *err) {
  int64_t cap = m->max_rows, V = m->cfg.vocab_size;
  int64_t nseg_max = b->nseg < cap ? b->nseg : cap;
  lh_segment *seg = malloc((size_t)(nseg_max + 1) * sizeof *seg);
  int64_t *lrows = malloc((size_t)cap * sizeof *lrows);
  if (!seg || !lrows) {
    free(seg);
    free(lrows);
    return lh_error_set(err, LH_ENOMEM, "forward: out of memory");
  }
  lh_status st = LH_OK;
  int i = 0;             /* current segment */
  int64_t off = 0;       /* rows of segment i already done */
  int64_t row = 0;       /* first batch row of the piece */
  int64_t next_out = 0;  /* next entry of rows[] to produce */
  while (row < b->n && !st) {
    lh_batch piece = {0, 0, seg};
    while (piece.n < cap && i < b->nseg) {
      const lh_segment *s = &b->seg[i];
      int64_t take = s->nrows - off < cap - piece.n ? s->nrows - off : cap - piece.n;
      seg[piece.nseg++] = (lh_segment){s->seq, piece.n, take, s->pos + off};
      piece.n += take;
      off += take;
      if (off == s->nrows) {
        i++;
        off = 0;
      }
    }
    int64_t nl = 0;
    float *out = logits;
    if (all_rows) {
      for (int64_t r = 0; r < piece.n; r++) lrows[nl++] = r;
      out = logits + row * V;
    } else {
      out = logits + next_out * V;
      while (next_out + nl < nrows && rows[next_out + nl] < row + piece.n) {
        lrows[nl] = rows[next_out + nl] - row;
        nl++;
      }
      next_out += nl;
    }
    st = run_piece(m, &piece, tokens + row, lrows, nl, out, err);
    row += piece.n;
  }
  free(seg);
  free(lrows);
  return st;
}
