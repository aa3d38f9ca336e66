/* tokenizer_pipeline.c — one segment of text through HF's encode pipeline, with restart points.
 *
 * HF encodes in four stages, each working on the pieces the previous one made:
 *   A. added tokens that are not normalized are cut out of the raw text (leftmost-longest,
 *      then single_word/lstrip/rstrip as AddedVocabulary::find_matches);
 *   B. each remaining piece is normalized as a whole (so Prepend applies per piece);
 *   C. normalized added tokens are cut out of the normalized piece;
 *   D. the pre-tokenizer steps split each remaining piece in turn, and BPE encodes every
 *      resulting pre-token on its own.
 * Stage D never looks across pieces and BPE never across pre-tokens, which is what makes
 * streaming and splitting a document between threads possible.
 *
 * Restart points. A position Q of the raw text is a restart point when the ids of the text after
 * Q, encoded as a "continuation" from Q, are exactly the ids the whole text has after Q. Two
 * kinds are recognized:
 *   PIECE:  Q is the end of an added-token span from stage A. A new stage-A piece starts at Q
 *           whatever follows, and nothing after Q depends on the text before it, except the
 *           character before Q for single_word, which the continuation receives as context.
 *   PRETOK: Q is strictly inside a stage-A/stage-C piece, at a boundary of the first splitting
 *           pre-tokenizer step, where
 *           (1) the normalizer chain can be cut at Q (it is NFC/NFD/NFKC/NFKD/Lowercase only,
 *               and the character at Q starts a normalization segment: combining class 0 and
 *               not a composition's second character), so normalizing the two sides apart gives
 *               the normalized whole, and Q maps to an exact normalized offset;
 *           (2) no added-token span covers Q, and no lstrip token can later reach back over Q;
 *           (3) the splitting step's search can resume at Q: Q ends a non-empty match, or begins
 *               a match that follows unmatched text (onig's search has no other state);
 *           (4) the step's behavior keeps Q as a piece boundary: always for Isolated/Removed;
 *               MergedWithPrevious unless a match follows unmatched text; MergedWithNext unless
 *               unmatched text follows a match; Contiguous only between a match and unmatched
 *               text (roles swapped under invert);
 *           (5) nothing before the splitting step adds text at piece starts that the
 *               continuation would wrongly add at Q: the continuation skips Prepend and
 *               ByteLevel's prefix space for its first piece, and no ByteLevel mapping comes
 *               before the splitting step.
 *           Steps after the splitting one see the same pieces on both sides of Q, so they need
 *           no condition.
 * In a segment that is not final (more text may follow), a restart point must also not depend
 * on unseen text: the splitting regex runs in PCRE2 hard-partial mode (the hand-written
 * matchers of tokenizer_fastsplit.c do the same), so a match or failure that needed more text
 * is reported as such, and Q counts only if the match before it, and
 * the kind of the element after it, are settled; added-token matches must start more than
 * the longest token's length before the end. Normalization is final for any segment whose end
 * is followed by a segment-starting character, which callers arrange (tokenizer_stream.c).
 *
 * Length cap (tokenizer.h, "Long pre-tokens"). Each search of the last splitting step (whose
 * elements are the pre-tokens the BPE sees) looks at most tk_pretoken_max bytes past where it
 * starts; an element it cannot decide within that window is
 * marked cut, the search after it starts afresh (no memory of the previous match), and a piece
 * never grows past the cap by merging. A boundary after a cut element is therefore a restart point
 * like any other (a continuation starts its search afresh there too), which is what lets a stream
 * emit ids and drop text inside a run that HF would hold whole when that step is also the first
 * splitting one (the restart step), as in the GPT-2, Llama 3 and MiniMax families. Earlier
 * steps are never cut: their elements (a Digits step's text between digits) are split further
 * by later steps, and cutting them would move boundaries in ordinary text. Windows are measured from each
 * search's own start, so the elements depend on the text alone: whether it came at once, in
 * pieces, or in a thread's job.
 *
 * Invariants: text given here is valid UTF-8; the context bytes before a segment are only read.
 * Never call the BPE for a piece before its boundary is settled (pieces are closed in order).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

/* piece flags */
#define PF_MAPPED 1 /* bytes still to be mapped to the ByteLevel alphabet */
#define PF_LINEAR 2 /* byte i of the piece is raw offset raw + max(0, i - shift) */
#define PF_WORK 4   /* lives in c->work (else in c->s1) */

typedef struct piece {
  size_t off, len;
  int64_t raw;
  uint8_t flags;
  uint8_t shift;
} piece;

static const uint8_t *piece_ptr(const tk_ctx *c, const piece *p) {
  return (p->flags & PF_WORK ? (const uint8_t *)c->work.data : c->s1) + p->off;
}

/* ------------------------------------------------------------------------------- emission */

static lh_status push_off(tk_ctx *c, int64_t off) {
  if (!c->want_offs) return LH_OK;
  if (c->noffv == c->offv_cap) {
    size_t nc = c->offv_cap ? c->offv_cap * 2 : 1024;
    void *p = realloc(c->offv, nc * sizeof *c->offv);
    if (!p) return LH_ENOMEM;
    c->offv = p;
    c->offv_cap = nc;
  }
  c->offv[c->noffv++] = off;
  return LH_OK;
}

static lh_status emit_id(tk_ctx *c, int32_t id, int64_t off) {
  if (c->dump) return lh_buf_printf(c->dump, "<added %d>", id) || lh_buf_append(c->dump, "", 1) ? LH_ENOMEM : LH_OK;
  if (lh_i32vec_push(c->ids, id)) return LH_ENOMEM;
  return push_off(c, off);
}

static lh_status add_restart(tk_ctx *c, int64_t off, uint8_t level) {
  if (!c->seg->want_restarts || off < c->seg->restart_lo || off >= c->seg->restart_hi) return LH_OK;
  if ((c->rs_filter_hi || c->rs_filter_lo) && off >= c->rs_filter_hi && off < c->rs_filter_lo) return LH_OK;
  if (c->nrs && c->rs[c->nrs - 1].off >= off) return LH_OK;
  if (c->nrs == c->rs_cap) {
    size_t nc = c->rs_cap ? c->rs_cap * 2 : 256;
    void *p = realloc(c->rs, nc * sizeof *c->rs);
    if (!p) return LH_ENOMEM;
    c->rs = p;
    c->rs_cap = nc;
  }
  c->rs[c->nrs++] = (tk_restart){off, c->ids->len - c->ids_base, level};
  return LH_OK;
}

static lh_status materialize(tk_ctx *c, piece *p);

static lh_status bpe_piece(const lh_tokenizer *t, tk_ctx *c, const piece *p, lh_error *err) {
  if (!p->len) return LH_OK;
  if (c->dump) {
    piece q = *p;
    if (materialize(c, &q) || lh_buf_append(c->dump, piece_ptr(c, &q), q.len) || lh_buf_append(c->dump, "", 1))
      return lh_error_set(err, LH_ENOMEM, "out of memory");
    return LH_OK;
  }
  tk_offmap om, *omp = NULL;
  if (c->want_offs) {
    om = (tk_offmap){c->offv, c->noffv, c->offv_cap, p->raw, p->shift, (p->flags & PF_LINEAR) != 0};
    omp = &om;
  }
  lh_status st = tk_bpe_word(&t->bpe, &c->bpe, piece_ptr(c, p), p->len, p->flags & PF_MAPPED, c->ids, omp);
  if (omp) {
    c->offv = om.v;
    c->noffv = om.n;
    c->offv_cap = om.cap;
  }
  if (st == LH_EFORMAT)
    return lh_error_set(err, LH_EFORMAT, "tokenizer: unk_token \"%s\" is not in the vocabulary", t->bpe.unk_token);
  if (st) return lh_error_set(err, st, "tokenizer: out of memory");
  return LH_OK;
}

/* ---------------------------------------------------------------------- added-token splits */

static lh_status span_push(struct tk_span **v, size_t *n, size_t *cap, size_t a, size_t b, size_t scan, int32_t id) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*v, nc * sizeof **v);
    if (!p) return LH_ENOMEM;
    *v = p;
    *cap = nc;
  }
  (*v)[(*n)++] = (struct tk_span){a, b, scan, id};
  return LH_OK;
}

/* Longest pattern of the trie starting at s[i]; returns its length (0 if none). */
static size_t trie_longest(const tk_trie *tr, const uint8_t *s, size_t i, size_t n, int32_t *idx) {
  uint32_t node = 0;
  size_t best = 0;
  for (size_t k = i; k < n; k++) {
    uint32_t lo = tr->first_edge[node], hi = lo + tr->nedges[node];
    uint8_t b = s[k];
    uint32_t child = UINT32_MAX;
    while (lo < hi) {
      uint32_t m = (lo + hi) / 2;
      if (tr->ebyte[m] < b)
        lo = m + 1;
      else if (tr->ebyte[m] > b)
        hi = m;
      else {
        child = tr->echild[m];
        break;
      }
    }
    if (child == UINT32_MAX) break;
    node = child;
    if (tr->term[node] >= 0) {
      best = k - i + 1;
      *idx = tr->term[node];
    }
  }
  return best;
}

lh_status tk_find_added(const lh_tokenizer *t, const tk_trie *tr, const uint8_t *s, size_t from, size_t n,
                        struct tk_span **out, size_t *nout, size_t *cap) {
  *nout = 0;
  if (from >= n) return LH_OK;
  if (!tr->nnodes) return span_push(out, nout, cap, from, n, n, -1);
  size_t start_offset = from, i = from;
  while (i < n) {
    if (tr->first_only >= 0) {
      const uint8_t *q = memchr(s + i, tr->first_only, n - i);
      i = q ? (size_t)(q - s) : n;
    } else {
      while (i < n && !tr->first[s[i]]) i++;
    }
    if (i >= n) break;
    int32_t idx = -1;
    size_t len = trie_longest(tr, s, i, n, &idx);
    if (!len) {
      i++;
      continue;
    }
    size_t start = i, stop = i + len, scan = i + len;
    i = stop; /* the automaton resumes after the match whether or not it is kept, and before rstrip */
    const tk_added *a = &t->added[idx];
    if (a->single_word) {
      size_t ps;
      bool start_space = start == 0 || !tk_is_rust_word(tk_utf8_prev(s, start, &ps));
      size_t q = stop;
      bool stop_space = stop == n || !tk_is_rust_word(tk_utf8_next(s, &q));
      if (!start_space || !stop_space) continue;
    }
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t ps;
        uint32_t ch = tk_utf8_prev(s, ns, &ps);
        if (!tk_is_white_space(ch)) break;
        ns = ps;
      }
      start = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip) {
      while (stop < n) {
        size_t q = stop;
        uint32_t ch = tk_utf8_next(s, &q);
        if (!tk_is_white_space(ch)) break;
        stop = q;
      }
    }
    if (start_offset < start && span_push(out, nout, cap, start_offset, start, start, -1)) return LH_ENOMEM;
    if (span_push(out, nout, cap, start, stop, scan, a->id)) return LH_ENOMEM;
    start_offset = stop;
  }
  if (start_offset < n && span_push(out, nout, cap, start_offset, n, n, -1)) return LH_ENOMEM;
  return LH_OK;
}

/* The matching sets a segment uses: document text (specials_as_text) never matches a special token. */
static const tk_trie *raw_trie_of(const lh_tokenizer *t, const tk_seg *seg) {
  return seg && seg->specials_as_text ? &t->raw_trie_text : &t->raw_trie;
}
static const tk_trie *norm_trie_of(const lh_tokenizer *t, const tk_seg *seg) {
  return seg && seg->specials_as_text ? &t->norm_trie_text : &t->norm_trie;
}

/* In text that more text may follow, the first position whose added-token decision can still
 * change: a token may start within its length of the end, and an lstrip token beyond that may
 * take the whitespace before it. Text before the limit ends no earlier than the limit. */
static size_t settled_limit(const tk_trie *tr, const uint8_t *s, size_t from, size_t n) {
  if (!tr->nnodes) return n;
  size_t lim = n >= tr->maxlen ? n - tr->maxlen + 1 : 0;
  if (lim < from) lim = from;
  while (lim > from && (s[lim] & 0xC0) == 0x80) lim--; /* a character boundary */
  if (tr->any_lstrip) {
    while (lim > from) {
      size_t ps;
      if (!tk_is_white_space(tk_utf8_prev(s, lim, &ps))) break;
      lim = ps;
    }
  }
  return lim;
}

/* ---------------------------------------------------------------------------- normalizing */

static lh_status anchor(tk_ctx *c, size_t raw, size_t norm, bool linear) {
  if (c->nanc) {
    struct tk_anchor *l = &c->anc[c->nanc - 1];
    if (l->linear && linear && l->norm - l->raw == norm - raw && raw >= l->raw) return LH_OK;
    if (l->raw == raw && l->norm == norm) {
      l->linear = linear;
      return LH_OK;
    }
  }
  if (c->nanc == c->anc_cap) {
    size_t nc = c->anc_cap ? c->anc_cap * 2 : 64;
    void *p = realloc(c->anc, nc * sizeof *c->anc);
    if (!p) return LH_ENOMEM;
    c->anc = p;
    c->anc_cap = nc;
  }
  c->anc[c->nanc++] = (struct tk_anchor){raw, norm, linear};
  return LH_OK;
}

/* Raw offset (relative to the piece) of normalized offset x; *exact when x is a cut point. */
/* Index of the last anchor with norm <= x, or -1. Queries arrive mostly in increasing order, so
 * the search starts from the previous answer. */
static ptrdiff_t anchor_at(const tk_ctx *c, size_t x) {
  tk_ctx *m = (tk_ctx *)c;
  size_t i = m->anc_cursor < c->nanc ? m->anc_cursor : 0;
  if (c->nanc && c->anc[i].norm <= x) {
    size_t lim = i + 8 < c->nanc ? i + 8 : c->nanc;
    while (i + 1 < lim && c->anc[i + 1].norm <= x) i++;
    if (i + 1 >= c->nanc || c->anc[i + 1].norm > x) {
      m->anc_cursor = i;
      return (ptrdiff_t)i;
    }
  }
  size_t lo = 0, hi = c->nanc;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c->anc[mid].norm <= x)
      lo = mid + 1;
    else
      hi = mid;
  }
  m->anc_cursor = lo ? lo - 1 : 0;
  return (ptrdiff_t)lo - 1;
}

static size_t norm_to_raw(const tk_ctx *c, size_t x, bool *exact) {
  if (!c->have_norm) {
    *exact = true;
    return x;
  }
  ptrdiff_t k = anchor_at(c, x);
  if (k < 0) {
    *exact = false;
    return 0;
  }
  const struct tk_anchor *a = &c->anc[k];
  if (a->linear) {
    *exact = true;
    return a->raw + (x - a->norm);
  }
  *exact = x == a->norm;
  return a->raw;
}

static lh_status lower_append(lh_buf *out, const uint8_t *s, size_t n) {
  if (lh_buf_reserve(out, n * 3)) return LH_ENOMEM;
  char *o = out->data + out->len;
  for (size_t i = 0; i < n;) {
    if (s[i] < 0x80) {
      uint8_t ch = s[i++];
      *o++ = (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
      continue;
    }
    uint32_t cp = tk_utf8_next(s, &i), lw[3];
    int k = tk_lowercase(cp, lw);
    for (int j = 0; j < k; j++) o += tk_utf8_put(lw[j], o);
  }
  out->len = (size_t)(o - out->data);
  out->data[out->len] = 0;
  return LH_OK;
}

/* The segmentable chain: an optional Lowercase, one normalization form, an optional Lowercase. */
static lh_status normalize_segmentable(const lh_tokenizer *t, tk_ctx *c, const uint8_t *s, size_t n, lh_buf *out,
                                       bool want_anchors) {
  int form = t->norm_form;
  bool lo1 = t->lower_first, lo2 = t->lower_after;
  lh_buf *tmp = &c->tmp;
  for (size_t i = 0; i < n;) {
    /* ASCII run: every character is its own inert segment */
    size_t j = i;
    for (uint64_t w; j + 8 <= n; j += 8) { /* eight bytes at a time */
      memcpy(&w, s + j, 8);
      if (w & 0x8080808080808080ull) break;
    }
    while (j < n && s[j] < 0x80) j++;
    size_t end_ascii = j;
    if (j < n && j > i && form >= 0) {
      /* the last ASCII character joins the next segment when that one cannot start one */
      size_t q = j;
      uint32_t cp = tk_utf8_next(s, &q), lw[3];
      uint32_t f = lo1 ? (tk_lowercase(cp, lw), lw[0]) : cp;
      if (!(tk_norm_flags((tk_form)form, f) & TK_NF_BB)) end_ascii = j - 1;
    }
    if (end_ascii > i) {
      if (want_anchors && anchor(c, i, out->len, true)) return LH_ENOMEM;
      if (lo1 || lo2) {
        if (lower_append(out, s + i, end_ascii - i)) return LH_ENOMEM;
      } else if (lh_buf_append(out, s + i, end_ascii - i)) {
        return LH_ENOMEM;
      }
      i = end_ascii;
      continue;
    }
    if (i >= n) break;
    /* one segment: [i, k) = a starting character and the characters that cannot start one */
    size_t k = i;
    uint32_t first = tk_utf8_next(s, &k);
    size_t first_end = k;
    while (k < n && form >= 0) {
      size_t q = k;
      uint32_t cp = tk_utf8_next(s, &q), lw[3];
      uint32_t f = lo1 ? (tk_lowercase(cp, lw), lw[0]) : cp;
      if (tk_norm_flags((tk_form)form, f) & TK_NF_BB) break;
      k = q;
    }
    size_t out0 = out->len;
    bool linear;
    if (k == first_end) {
      uint32_t lw[3];
      int nl = 1;
      uint32_t f = first;
      if (lo1) nl = tk_lowercase(first, lw), f = lw[0];
      if (form < 0 || (nl == 1 && (tk_norm_flags((tk_form)form, f) & TK_NF_INERT))) {
        /* unchanged by the form: only lowercasing applies */
        if (lo1 || lo2) {
          if (lower_append(out, s + i, k - i)) return LH_ENOMEM;
          if (lo1 && lo2) { /* lowercase twice: apply the second on what the first produced */
            lh_buf_clear(tmp);
            if (lh_buf_append(tmp, out->data + out0, out->len - out0)) return LH_ENOMEM;
            out->len = out0;
            if (lower_append(out, (const uint8_t *)tmp->data, tmp->len)) return LH_ENOMEM;
          }
        } else if (lh_buf_append(out, s + i, k - i)) {
          return LH_ENOMEM;
        }
        linear = out->len - out0 == k - i;
        goto seg_done;
      }
    }
    lh_buf_clear(tmp);
    if (lo1) {
      if (lower_append(tmp, s + i, k - i)) return LH_ENOMEM;
    } else if (lh_buf_append(tmp, s + i, k - i)) {
      return LH_ENOMEM;
    }
    if (lo2) {
      lh_buf *t2 = &c->tmp2;
      lh_buf_clear(t2);
      if (tk_norm_segment((tk_form)form, (const uint8_t *)tmp->data, tmp->len, t2)) return LH_ENOMEM;
      if (lower_append(out, (const uint8_t *)t2->data, t2->len)) return LH_ENOMEM;
    } else if (tk_norm_segment((tk_form)form, (const uint8_t *)tmp->data, tmp->len, out)) {
      return LH_ENOMEM;
    }
    linear = false;
  seg_done:
    if (want_anchors && anchor(c, i, out0, linear)) return LH_ENOMEM;
    if (want_anchors && anchor(c, k, out->len, true)) return LH_ENOMEM;
    i = k;
  }
  return LH_OK;
}

/* PCRE2 stopped matching re on an n-byte piece of text at its match limit (a pattern that
 * backtracks exponentially on such text): the error names the tokenizer file and the pattern. */
static lh_status regex_gave_up(const lh_tokenizer *t, const tk_regex *re, size_t n, lh_error *err) {
  return lh_error_set(err, LH_ELIMIT, "%s: the %s reached PCRE2's match limit on a piece of %zu bytes of text (it "
                      "backtracks too much on such text), so this text cannot be tokenized with this tokenizer",
                      t->path ? t->path : "tokenizer", re->label ? re->label : "regex", n);
}

lh_status tk_normalize(const lh_tokenizer *t, tk_ctx *c, const uint8_t *s, size_t n, bool piece_start,
                       bool want_anchors, lh_buf *out, lh_error *err) {
  lh_buf_clear(out);
  c->nanc = 0;
  c->anc_cursor = 0;
  if (t->norm_segmentable) {
    lh_status st = normalize_segmentable(t, c, s, n, out, want_anchors);
    if (!st && want_anchors) st = anchor(c, n, out->len, true);
    return st ? lh_error_set(err, st, "tokenizer: normalization failed (out of memory)") : LH_OK;
  }
  /* general chain, applied to the whole piece in order */
  lh_buf *cur = &c->tmp, *nxt = &c->tmp2;
  lh_buf_clear(cur);
  if (lh_buf_append(cur, s, n)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  for (size_t k = 0; k < t->nnorms; k++) {
    const tk_norm *nm = &t->norms[k];
    lh_buf_clear(nxt);
    lh_status st = LH_OK;
    switch (nm->kind) {
    case TK_N_FORM: {
      const uint8_t *p = (const uint8_t *)cur->data;
      size_t i = 0;
      while (i < cur->len && !st) {
        size_t q = i;
        tk_utf8_next(p, &q);
        while (q < cur->len) {
          size_t r = q;
          uint32_t cp = tk_utf8_next(p, &r);
          if (tk_norm_flags(nm->form, cp) & TK_NF_BB) break;
          q = r;
        }
        size_t one = i;
        uint32_t c0 = tk_utf8_next(p, &one);
        if (one == q && (tk_norm_flags(nm->form, c0) & TK_NF_INERT))
          st = lh_buf_append(nxt, p + i, q - i);
        else
          st = tk_norm_segment(nm->form, p + i, q - i, nxt);
        i = q;
      }
      break;
    }
    case TK_N_LOWER:
      st = lower_append(nxt, (const uint8_t *)cur->data, cur->len);
      break;
    case TK_N_PREPEND:
      if (cur->len && piece_start) st = lh_buf_append(nxt, nm->text, nm->text_len);
      if (!st) st = lh_buf_append(nxt, cur->data, cur->len);
      break;
    case TK_N_REPLACE: {
      tk_find f = {.pos = 0, .last_end = SIZE_MAX};
      size_t last = 0, ms, me;
      for (;;) {
        int r = tk_regex_find(&nm->re, c->md, c->mc, (const uint8_t *)cur->data, cur->len, &f, false, &ms, &me);
        if (r == TK_FIND_ERROR) return regex_gave_up(t, &nm->re, cur->len, err);
        if (r != TK_FIND_MATCH) break;
        if ((st = lh_buf_append(nxt, cur->data + last, ms - last))) break;
        if ((st = lh_buf_append(nxt, nm->text, nm->text_len))) break;
        last = me;
      }
      if (!st) st = lh_buf_append(nxt, cur->data + last, cur->len - last);
      break;
    }
    }
    if (st) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    lh_buf *sw = cur;
    cur = nxt;
    nxt = sw;
  }
  if (lh_buf_append(out, cur->data, cur->len)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  if (want_anchors) {
    if (anchor(c, 0, 0, false) || anchor(c, n, out->len, false))
      return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  }
  return LH_OK;
}

/* -------------------------------------------------------------------- pre-tokenizer steps */

static lh_status pieces_push(struct piece **v, size_t *n, size_t *cap, piece p) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    void *q = realloc(*v, nc * sizeof **v);
    if (!q) return LH_ENOMEM;
    *v = q;
    *cap = nc;
  }
  (*v)[(*n)++] = p;
  return LH_OK;
}

/* Turn a PF_MAPPED piece into its ByteLevel string in c->work. */
static lh_status materialize(tk_ctx *c, piece *p) {
  if (!(p->flags & PF_MAPPED)) return LH_OK;
  if (lh_buf_reserve(&c->work, p->len * 2)) return LH_ENOMEM;
  const uint8_t *s = piece_ptr(c, p); /* valid: reserve happened before */
  size_t off = c->work.len;
  for (size_t i = 0; i < p->len; i++) c->work.len += (size_t)tk_utf8_put(tk_byte_char[s[i]], c->work.data + c->work.len);
  c->work.data[c->work.len] = 0;
  p->off = off;
  p->len = c->work.len - off;
  p->flags = (uint8_t)((p->flags & ~(PF_MAPPED | PF_LINEAR)) | PF_WORK);
  return LH_OK;
}

/* Copy a piece with a space in front into c->work. */
static lh_status prefix_space(tk_ctx *c, piece *p) {
  if (lh_buf_reserve(&c->work, p->len + 1)) return LH_ENOMEM;
  const uint8_t *s = piece_ptr(c, p);
  size_t off = c->work.len;
  c->work.data[c->work.len++] = ' ';
  memcpy(c->work.data + c->work.len, s, p->len);
  c->work.len += p->len;
  c->work.data[c->work.len] = 0;
  p->off = off;
  p->len += 1;
  p->shift = (uint8_t)(p->shift + 1);
  p->flags |= PF_WORK;
  return LH_OK;
}

static piece sub_piece(const piece *p, size_t a, size_t b) {
  piece q = *p;
  q.off = p->off + a;
  q.len = b - a;
  if (p->flags & PF_LINEAR) {
    q.raw = p->raw + (a > p->shift ? (int64_t)(a - p->shift) : 0);
    q.shift = (uint8_t)(a >= p->shift ? 0 : p->shift - a);
  } else {
    q.shift = 0;
  }
  return q;
}

/* Elements of one splitting step: matches and the text between them, in order. */
typedef struct elem {
  size_t a, b;
  bool m;        /* a match (before invert) */
  bool settled;  /* its end and the next element's kind cannot change with more text */
  bool tentative; /* after a partial match: contents unknown */
  bool cut;      /* ended by the length cap: a piece boundary follows, and the search after it is fresh */
} elem;

size_t tk_pretoken_max = 1 << 20;

static size_t pretoken_cap(void) { return tk_pretoken_max < 8 ? 8 : tk_pretoken_max; }

/* The end of the window a search from pos may look at: pos + the cap, moved back to a character
 * boundary; len when the subject ends sooner. */
static size_t window_end(bool cap, const uint8_t *s, size_t len, size_t pos) {
  size_t w = pretoken_cap();
  if (!cap || pos >= len || len - pos <= w) return len;
  size_t lim = pos + w;
  while (lim > pos + 4 && (s[lim] & 0xC0) == 0x80) lim--;
  return lim;
}

typedef struct elem_iter {
  const tk_pre *p;
  const uint8_t *s;
  size_t len, pos;
  bool partial, done;
  bool cap; /* the step is the last that splits: searches look at most the cap ahead */
  tk_find f;
  bool have_m;
  size_t ms, me;
  bool stop_at; /* a partial match was reported at ms */
} elem_iter;

static int next_elem(tk_ctx *c, elem_iter *it, elem *e) {
  if (it->done) return 0;
  if (it->p->kind == TK_P_DIGITS) {
    if (it->pos >= it->len) return 0;
    size_t i = it->pos;
    uint32_t cp = tk_utf8_next(it->s, &i);
    if (tk_is_rust_numeric(cp)) {
      *e = (elem){it->pos, i, true, true, false, false};
      it->pos = i;
      e->settled = i < it->len || !it->partial;
      return 1;
    }
    size_t j = i, lim = window_end(it->cap, it->s, it->len, it->pos);
    while (j < lim) {
      size_t q = j;
      if (tk_is_rust_numeric(tk_utf8_next(it->s, &q))) break;
      j = q;
    }
    *e = (elem){it->pos, j, false, j < it->len || !it->partial, false, j == lim && lim < it->len};
    it->pos = j;
    return 1;
  }
  for (;;) {
    if (it->have_m) {
      if (it->pos < it->ms) {
        *e = (elem){it->pos, it->ms, false, true, false, false};
        it->pos = it->ms;
        return 1;
      }
      *e = (elem){it->ms, it->me, true, true, false, false};
      it->pos = it->me;
      it->have_m = false;
      return 1;
    }
    if (it->stop_at) {
      it->done = true;
      if (it->pos < it->len) {
        *e = (elem){it->pos, it->len, false, false, true, false};
        return 1;
      }
      return 0;
    }
    size_t ms, me;
    size_t lim = window_end(it->cap, it->s, it->len, it->f.pos);
    bool win = lim < it->len;
    int r = tk_regex_find(&it->p->re, c->md, c->mc, it->s, lim, &it->f, win || it->partial, &ms, &me);
    if (win && (r == TK_FIND_PARTIAL || r == TK_FIND_NONE)) {
      /* Undecided within the window: the text up to where the search stopped is one element (a
       * gap before a partial match, else the window treated as a match when one may start at its
       * start, else a gap), and the next search starts afresh at its end. */
      size_t b = r == TK_FIND_PARTIAL && ms > it->pos ? ms : lim;
      *e = (elem){it->pos, b, r == TK_FIND_PARTIAL && b == lim, true, false, true};
      it->pos = b;
      it->f = (tk_find){.pos = b, .last_end = SIZE_MAX};
      return 1;
    }
    if (r == TK_FIND_MATCH) { /* as the have_m branch above would (not through it: a stall) */
      if (it->pos < ms) {
        it->have_m = true;
        it->ms = ms;
        it->me = me;
        *e = (elem){it->pos, ms, false, true, false, false};
        it->pos = ms;
        return 1;
      }
      *e = (elem){ms, me, true, true, false, false};
      it->pos = me;
      return 1;
    }
    if (r == TK_FIND_ERROR) return -1;
    if (r == TK_FIND_PARTIAL) {
      it->stop_at = true;
      if (it->pos < ms) {
        *e = (elem){it->pos, ms, false, false, false, false};
        it->pos = ms;
        return 1;
      }
      continue;
    }
    it->done = true;
    if (it->pos < it->len) {
      *e = (elem){it->pos, it->len, false, !it->partial, false, false};
      it->pos = it->len;
      return 1;
    }
    return 0;
  }
}

static bool keeps_boundary(tk_behavior b, bool prev_m, bool m) {
  switch (b) {
  case TK_ISOLATED:
  case TK_REMOVED: return true;
  case TK_MERGED_PREV: return !(m && !prev_m);
  case TK_MERGED_NEXT: return !(prev_m && !m);
  case TK_CONTIGUOUS: return prev_m != m;
  }
  return true;
}

/* Context for the splitting step of one stage-C piece. */
typedef struct split_ctx {
  const lh_tokenizer *t;
  lh_error *err;
  size_t p0, p1;     /* the stage-C piece in normalized coordinates */
  size_t subj_norm0; /* normalized offset of subject byte 0 (after any prefix space) */
  uint8_t subj_shift; /* bytes of prefix space at the subject start */
  int64_t raw_base;  /* stream offset of raw offset 0 of the stage-A piece */
  size_t a_lim_raw;  /* stage-A finality bound, relative to raw piece start (SIZE_MAX: final) */
  size_t c_lim;      /* stage-C finality bound (normalized offset) */
  const uint8_t *raw; /* the stage-A piece raw text */
  size_t raw_len;
  bool restarts;
  bool open; /* the piece runs into the end of a non-final segment: more text may extend it */
  size_t win[4]; /* restart points are wanted in normalized [win0, win1) and [win2, win3) */
} split_ctx;

static lh_status run_steps(const lh_tokenizer *t, tk_ctx *c, size_t k, piece p, lh_error *err);

/* Split one piece with pre-tokenizer step k (not the restart step) into lv[k]. */
static lh_status split_piece(const lh_tokenizer *t, tk_ctx *c, size_t k, piece *p, lh_error *err) {
  const tk_pre *st = &t->pres[k];
  c->lvn[k] = 0;
  if (materialize(c, p)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
  if (st->kind == TK_P_BYTELEVEL) {
    if (st->add_prefix_space && p->len && piece_ptr(c, p)[0] != ' ' && prefix_space(c, p))
      return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    if (!st->use_regex) {
      p->flags |= PF_MAPPED;
      if (pieces_push(&c->lv[k], &c->lvn[k], &c->lvcap[k], *p)) return lh_error_set(err, LH_ENOMEM, "out of memory");
      return LH_OK;
    }
  }
  elem_iter it = {.p = st, .s = piece_ptr(c, p), .len = p->len, .cap = (int)k == t->cap_step,
                  .f = {.pos = 0, .last_end = SIZE_MAX}};
  tk_behavior beh = st->kind == TK_P_SPLIT ? st->behavior : TK_ISOLATED;
  if (st->kind == TK_P_DIGITS) beh = st->individual ? TK_ISOLATED : TK_CONTIGUOUS;
  bool inv = st->kind == TK_P_SPLIT && st->invert;
  elem e;
  int r;
  bool have_prev = false, prev_m = false, have_cur = false;
  size_t ca = 0, cb = 0;
  bool prev_cut = false;
  while ((r = next_elem(c, &it, &e)) > 0) {
    bool m = e.m != inv;
    bool drop = beh == TK_REMOVED && m;
    if (have_prev && !prev_cut && !keeps_boundary(beh, prev_m, m) && have_cur && (!it.cap || e.b - ca <= pretoken_cap())) {
      cb = e.b;
    } else {
      if (have_cur && cb > ca) {
        piece q = sub_piece(p, ca, cb);
        if (pieces_push(&c->lv[k], &c->lvn[k], &c->lvcap[k], q)) return lh_error_set(err, LH_ENOMEM, "out of memory");
      }
      have_cur = !drop;
      ca = e.a;
      cb = e.b;
    }
    have_prev = true;
    prev_m = m;
    prev_cut = e.cut;
  }
  if (r < 0) return regex_gave_up(t, &st->re, p->len, err);
  if (have_cur && cb > ca) {
    piece q = sub_piece(p, ca, cb);
    if (pieces_push(&c->lv[k], &c->lvn[k], &c->lvcap[k], q)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  if (st->kind == TK_P_BYTELEVEL)
    for (size_t i = 0; i < c->lvn[k]; i++) c->lv[k][i].flags |= PF_MAPPED;
  return LH_OK;
}

static lh_status run_steps(const lh_tokenizer *t, tk_ctx *c, size_t k, piece p, lh_error *err) {
  if (k >= t->npres) return bpe_piece(t, c, &p, err);
  lh_status st = split_piece(t, c, k, &p, err);
  if (st) return st;
  /* the list of this level is stable while deeper levels run (they use their own) */
  for (size_t i = 0; i < c->lvn[k]; i++) {
    piece q = c->lv[k][i];
    if ((st = run_steps(t, c, k + 1, q, err))) return st;
  }
  return LH_OK;
}

/* Is normalized offset q (inside the stage-C piece) a valid, settled restart point apart from
 * the splitting step's own conditions? Sets *raw_off. */
static bool restart_ok(const tk_ctx *c, const split_ctx *x, size_t q, int64_t *raw_off) {
  if (!x->restarts || q <= x->p0 || q >= x->p1 || q >= x->c_lim) return false;
  bool exact;
  size_t r = norm_to_raw(c, q, &exact);
  if (!exact || r == 0 || r >= x->raw_len || r >= x->a_lim_raw) return false;
  const lh_tokenizer *t = x->t;
  if (raw_trie_of(t, c->seg)->any_lstrip && x->a_lim_raw != SIZE_MAX) {
    size_t ps;
    if (tk_is_white_space(tk_utf8_prev(x->raw, r, &ps))) {
      bool nonws = false;
      for (size_t i = r; i < x->raw_len && !nonws;) nonws = !tk_is_white_space(tk_utf8_next(x->raw, &i));
      if (!nonws) return false;
    }
  }
  if (norm_trie_of(t, c->seg)->any_lstrip && x->c_lim != SIZE_MAX) {
    size_t ps;
    const uint8_t *ns = (const uint8_t *)c->normp;
    if (tk_is_white_space(tk_utf8_prev(ns, q, &ps))) {
      bool nonws = false;
      for (size_t i = q; i < x->p1 && !nonws;) nonws = !tk_is_white_space(tk_utf8_next(ns, &i));
      if (!nonws) return false;
    }
  }
  *raw_off = x->raw_base + (int64_t)r;
  return true;
}

/* Where a piece [a, b) of the splitting step's subject sits in the raw text. */
static void place_piece(const tk_ctx *c, const split_ctx *x, piece *q, size_t a, size_t b) {
  if (!c->have_norm) return; /* sub_piece's linear arithmetic is exact */
  size_t na = a >= x->subj_shift ? x->subj_norm0 + a - x->subj_shift : x->p0;
  size_t nb = b >= x->subj_shift ? x->subj_norm0 + b - x->subj_shift : x->p0;
  q->shift = (uint8_t)(a < x->subj_shift ? x->subj_shift - a : 0);
  /* the raw offset as norm_to_raw gives it; linear only inside one linear run of the normalizer */
  ptrdiff_t k = anchor_at(c, na);
  const struct tk_anchor *an = k >= 0 ? &c->anc[k] : NULL;
  q->raw = x->raw_base + (int64_t)(!an ? 0 : an->linear ? an->raw + (na - an->norm) : an->raw);
  bool lin = an && an->linear && ((size_t)k + 1 >= c->nanc || c->anc[k + 1].norm >= nb);
  if (lin)
    q->flags |= PF_LINEAR;
  else
    q->flags &= (uint8_t)~PF_LINEAR;
}

/* One closed piece of the splitting step: through the later steps and the BPE. */
static lh_status flush_split(const lh_tokenizer *t, tk_ctx *c, const split_ctx *x, size_t k, const piece *whole,
                             size_t a, size_t b, lh_error *err) {
  piece q = sub_piece(whole, a, b);
  if (c->want_offs) place_piece(c, x, &q, a, b); /* raw offsets serve only the id offsets */
  if (t->pres[k].kind == TK_P_BYTELEVEL) q.flags |= PF_MAPPED;
  if (t->tail_map_only) { /* the only later step maps to ByteLevel: straight to the BPE */
    q.flags |= PF_MAPPED;
    return bpe_piece(t, c, &q, err);
  }
  c->work.len = 0;
  return run_steps(t, c, k + 1, q, err);
}

/* The splitting step over one whole stage-C piece, streaming its pieces into the later steps
 * and recording restart points. */
static lh_status split_step(const lh_tokenizer *t, tk_ctx *c, split_ctx *x, piece *whole, size_t pos0,
                            bool partial, lh_error *err) {
  const tk_pre *st = &t->pres[t->split_step];
  size_t k = (size_t)t->split_step;
  elem_iter it = {.p = st, .s = piece_ptr(c, whole), .len = whole->len, .pos = pos0, .partial = partial,
                  .cap = t->split_step == t->cap_step, .f = {.pos = pos0, .last_end = SIZE_MAX}};
  tk_behavior beh = st->kind == TK_P_SPLIT ? st->behavior : TK_ISOLATED;
  if (st->kind == TK_P_DIGITS) beh = st->individual ? TK_ISOLATED : TK_CONTIGUOUS;
  bool inv = st->kind == TK_P_SPLIT && st->invert;
  bool regex = st->kind != TK_P_DIGITS;
  elem e, pe = {0};
  int r;
  bool have_prev = false, have_cur = false;
  size_t ca = 0, cb = 0;
  lh_status s;
  bool pf = t->tail_map_only && t->bpe.byte_fast && !t->bpe.ignore_merges && !c->dump;
  while ((r = next_elem(c, &it, &e)) > 0) {
    /* the BPE sees this element one round later, usually as it is (Isolated) */
    if (pf) tk_bpe_prefetch(&c->bpe, it.s + e.a, e.b - e.a);
    bool m = e.m != inv, pm = pe.m != inv;
    bool drop = beh == TK_REMOVED && m;
    /* merged unless a cut ends the element before, or the piece would pass the length cap */
    if (have_prev && !pe.cut && !keeps_boundary(beh, pm, m) && have_cur && (!it.cap || e.b - ca <= pretoken_cap())) {
      cb = e.b;
    } else {
      if (have_cur && cb > ca && (s = flush_split(t, c, x, k, whole, ca, cb, err))) return s;
      /* the boundary at e.a is kept; is it a restart point? */
      size_t qn = x->subj_norm0 + e.a - x->subj_shift;
      if (have_prev && pe.settled && !pe.tentative && !e.tentative && x->restarts && e.a > x->subj_shift &&
          ((qn >= x->win[0] && qn < x->win[1]) || (qn >= x->win[2] && qn < x->win[3]))) {
        bool state_ok = !regex || pe.cut || (pe.m && pe.b > pe.a) || (!pe.m && e.m);
        int64_t ro;
        if (state_ok && restart_ok(c, x, qn, &ro) &&
            (s = add_restart(c, ro, TK_LEVEL_PRETOK)))
          return lh_error_set(err, s, "tokenizer: out of memory");
      }
      have_cur = !drop;
      ca = e.a;
      cb = e.b;
    }
    have_prev = true;
    pe = e;
  }
  if (r < 0) return regex_gave_up(t, &st->re, whole->len, err);
  if (have_cur && cb > ca && (s = flush_split(t, c, x, k, whole, ca, cb, err))) return s;
  return LH_OK;
}

/* Stage D for one stage-C text piece [p0, p1) of the normalized text c->normp. ctx0 < p0 when
 * the piece continues one that began before the segment (its text before p0 is context). */
static lh_status pretokenize(const lh_tokenizer *t, tk_ctx *c, split_ctx *x, size_t ctx0, bool cont, lh_error *err) {
  size_t p0 = x->p0, p1 = x->p1;
  bool exact;
  piece whole = {.off = ctx0, .len = p1 - ctx0, .flags = PF_LINEAR, .shift = 0};
  size_t r0 = norm_to_raw(c, ctx0, &exact);
  whole.raw = x->raw_base + (int64_t)r0;
  if (c->have_norm) {
    /* a piece maps linearly only inside one linear run of the normalizer */
    ptrdiff_t k = anchor_at(c, ctx0);
    bool lin = k >= 0 && c->anc[k].linear && ((size_t)k + 1 >= c->nanc || c->anc[k + 1].norm >= p1);
    if (!lin) whole.flags &= (uint8_t)~PF_LINEAR;
  }
  c->s1 = (const uint8_t *)c->normp;
  x->subj_norm0 = ctx0;
  x->subj_shift = 0;
  size_t pos0 = p0 - ctx0;
  /* steps before the splitting one: ByteLevel without regex (prefix space, mapping) */
  size_t first = t->split_step < 0 ? t->npres : (size_t)t->split_step;
  for (size_t k = 0; k < first; k++) {
    const tk_pre *st = &t->pres[k];
    if (whole.flags & PF_MAPPED) {
      c->work.len = 0;
      if (materialize(c, &whole)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
      /* the subject now lives in tmp2, stable while the split step appends to work */
      lh_buf_clear(&c->tmp2);
      if (lh_buf_append(&c->tmp2, c->work.data + whole.off, whole.len)) return lh_error_set(err, LH_ENOMEM, "oom");
      whole.off = 0;
      whole.flags &= (uint8_t)~PF_WORK;
      c->s1 = (const uint8_t *)c->tmp2.data;
      pos0 = 0;
    }
    if (st->add_prefix_space && !cont && whole.len && c->s1[whole.off] != ' ') {
      lh_buf *b = (c->s1 == (const uint8_t *)c->tmp2.data) ? &c->tmp : &c->tmp2;
      lh_buf_clear(b);
      if (lh_buf_append(b, " ", 1) || lh_buf_append(b, c->s1 + whole.off, whole.len))
        return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
      whole.off = 0;
      whole.len += 1;
      whole.shift = (uint8_t)(whole.shift + 1);
      c->s1 = (const uint8_t *)b->data;
      x->subj_shift = whole.shift;
    }
    whole.flags |= PF_MAPPED;
  }
  if (t->split_step < 0) {
    c->work.len = 0;
    return bpe_piece(t, c, &whole, err);
  }
  const tk_pre *sp = &t->pres[t->split_step];
  if (whole.flags & PF_MAPPED) { /* ByteLevel mapping before the split: the split sees the mapped text */
    c->work.len = 0;
    if (materialize(c, &whole)) return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    lh_buf_clear(&c->tmp2);
    if (lh_buf_append(&c->tmp2, c->work.data + whole.off, whole.len)) return lh_error_set(err, LH_ENOMEM, "oom");
    whole.off = 0;
    whole.flags &= (uint8_t)~PF_WORK;
    c->s1 = (const uint8_t *)c->tmp2.data;
    pos0 = 0;
    x->restarts = false;
  }
  if (sp->kind == TK_P_BYTELEVEL && sp->add_prefix_space && !cont && whole.len - pos0 &&
      c->s1[whole.off + pos0] != ' ') {
    lh_buf *b = (c->s1 == (const uint8_t *)c->tmp2.data) ? &c->tmp : &c->tmp2;
    lh_buf_clear(b);
    if (lh_buf_append(b, " ", 1) || lh_buf_append(b, c->s1 + whole.off + pos0, whole.len - pos0))
      return lh_error_set(err, LH_ENOMEM, "tokenizer: out of memory");
    whole.off = 0;
    whole.len = whole.len - pos0 + 1;
    whole.shift = (uint8_t)(whole.shift + 1);
    x->subj_norm0 = p0;
    x->subj_shift = whole.shift;
    pos0 = 0;
    c->s1 = (const uint8_t *)b->data;
  }
  /* pieces of the split step are slices of the subject, which stays put while later steps
   * write into c->work; piece offsets are relative to c->s1 */
  whole.flags &= (uint8_t)~PF_WORK;
  return split_step(t, c, x, &whole, pos0, x->open, err);
}

/* ------------------------------------------------------------------------------ one segment */

/* Normalized offset of raw offset r (relative to the piece): the first (up) or last cut point
 * of the normalized text at or around it, so a window mapped this way never loses a point. */
static size_t raw_to_norm(const tk_ctx *c, int64_t r, bool up) {
  if (r <= 0) return 0;
  if (!c->have_norm) return (size_t)r;
  size_t lo = 0, hi = c->nanc;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if ((int64_t)c->anc[m].raw <= r)
      lo = m + 1;
    else
      hi = m;
  }
  if (!lo) return 0;
  const struct tk_anchor *a = &c->anc[lo - 1];
  if (a->linear) return a->norm + (size_t)(r - (int64_t)a->raw);
  if ((int64_t)a->raw == r || !up) return a->norm;
  return lo < c->nanc ? c->anc[lo].norm : c->norm_len;
}

static void restart_windows(const tk_ctx *c, split_ctx *x) {
  const tk_seg *seg = c->seg;
  int64_t lo = seg->restart_lo, hi = seg->restart_hi;
  int64_t a0 = lo, a1 = hi, b0 = 0, b1 = 0;
  if (c->rs_filter_hi || c->rs_filter_lo) {
    a1 = hi < c->rs_filter_hi ? hi : c->rs_filter_hi;
    b0 = lo > c->rs_filter_lo ? lo : c->rs_filter_lo;
    b1 = hi;
  }
  x->win[0] = raw_to_norm(c, a0 - x->raw_base, false);
  x->win[1] = a1 > a0 ? raw_to_norm(c, a1 - x->raw_base, true) + 1 : 0;
  x->win[2] = raw_to_norm(c, b0 - x->raw_base, false);
  x->win[3] = b1 > b0 ? raw_to_norm(c, b1 - x->raw_base, true) + 1 : 0;
}

/* Stage B-D for one stage-A text piece [a, b) of the segment text. */
static lh_status text_piece(const lh_tokenizer *t, tk_ctx *c, size_t a, size_t b, bool cont, size_t a_lim,
                            bool open, lh_error *err) {
  const tk_seg *seg = c->seg;
  const uint8_t *s = seg->text;
  /* with context: normalize from the context start so the normalizer and lookbehinds see it */
  size_t na = cont ? 0 : a;
  size_t ctx_norm = 0;
  split_ctx x = {.t = t, .err = err, .raw_base = seg->base + (int64_t)na, .raw = s + na, .raw_len = b - na};
  x.a_lim_raw = a_lim == SIZE_MAX ? SIZE_MAX : a_lim > na ? a_lim - na : 0;
  x.restarts = seg->want_restarts && t->pretok_restart;
  if (t->nnorms) {
    lh_status st = tk_normalize(t, c, s + na, b - na, !cont, true, &c->norm, err);
    if (st) return st;
    c->have_norm = true;
    c->normp = c->norm.data;
    c->norm_len = c->norm.len;
    if (cont) {
      /* normalized offset of `a` */
      size_t lo = 0, hi = c->nanc;
      while (lo < hi) {
        size_t m = (lo + hi) / 2;
        if (c->anc[m].raw <= a)
          lo = m + 1;
        else
          hi = m;
      }
      if (lo && c->anc[lo - 1].linear)
        ctx_norm = c->anc[lo - 1].norm + (a - c->anc[lo - 1].raw);
      else if (lo)
        ctx_norm = c->anc[lo - 1].norm;
    }
  } else {
    c->have_norm = false;
    c->normp = (const char *)s + na;
    c->norm_len = b - na;
    c->nanc = 0;
    ctx_norm = a - na;
  }
  const uint8_t *ns = (const uint8_t *)c->normp;
  size_t nlen = c->norm_len;
  if (x.restarts) restart_windows(c, &x);
  /* stage C */
  size_t nsp = 0;
  lh_status st = tk_find_added(t, norm_trie_of(t, c->seg), ns, ctx_norm, nlen, &c->spans2, &nsp, &c->spans2_cap);
  if (st) return lh_error_set(err, st, "tokenizer: out of memory");
  x.c_lim = open ? settled_limit(norm_trie_of(t, c->seg), ns, ctx_norm, nlen) : SIZE_MAX;
  for (size_t i = 0; i < nsp; i++) {
    struct tk_span sp = c->spans2[i];
    if (sp.a >= x.c_lim) break;
    if (sp.id < 0 && sp.b > x.c_lim) sp.b = x.c_lim;
    if (sp.id >= 0) {
      bool exact;
      int64_t off = x.raw_base + (int64_t)norm_to_raw(c, sp.a, &exact);
      if ((st = emit_id(c, sp.id, off))) return lh_error_set(err, st, "tokenizer: out of memory");
      continue;
    }
    bool first_cont = cont && sp.a == ctx_norm;
    x.p0 = sp.a;
    x.p1 = sp.b;
    x.open = open && sp.b == (x.c_lim == SIZE_MAX ? nlen : x.c_lim);
    /* context for lookbehinds: the continued piece's text before the segment */
    size_t ctx0 = sp.a;
    if (first_cont) {
      size_t keep = 256;
      ctx0 = sp.a > keep ? sp.a - keep : 0;
      while (ctx0 < sp.a && (ns[ctx0] & 0xC0) == 0x80) ctx0++;
    }
    if ((st = pretokenize(t, c, &x, ctx0, first_cont, err))) return st;
  }
  return LH_OK;
}

lh_status tk_encode_segment(const lh_tokenizer *t, tk_ctx *c, const tk_seg *seg, lh_error *err) {
  c->seg = seg;
  c->nrs = 0;
  c->noffv = 0;
  c->want_offs = seg->want_offs;
  c->ids_base = c->ids->len;
  const uint8_t *s = seg->text;
  size_t n = seg->len, from = seg->ctx_len;
  size_t nsp = 0;
  lh_status st = tk_find_added(t, raw_trie_of(t, seg), s, from, n, &c->spans, &nsp, &c->spans_cap);
  if (st) return lh_error_set(err, st, "tokenizer: out of memory");
  size_t a_lim = SIZE_MAX;
  if (!seg->final) a_lim = settled_limit(raw_trie_of(t, seg), s, from, n);
  for (size_t i = 0; i < nsp; i++) {
    struct tk_span sp = c->spans[i];
    if (sp.a >= a_lim) break; /* not settled yet: a later run decides */
    if (sp.id < 0 && sp.b > a_lim) sp.b = a_lim;
    if (sp.id >= 0) {
      if ((st = emit_id(c, sp.id, seg->base + (int64_t)sp.a))) return lh_error_set(err, st, "tokenizer: out of memory");
      /* a fresh piece starts at the span's end only if the automaton resumes there too (after
       * rstrip it resumes inside the stripped whitespace, where another token may begin) */
      if (sp.b < n && sp.b < a_lim && sp.scan == sp.b && seg->want_restarts &&
          (st = add_restart(c, seg->base + (int64_t)sp.b, TK_LEVEL_PIECE)))
        return lh_error_set(err, st, "tokenizer: out of memory");
      continue;
    }
    bool cont = sp.a == from && seg->level == TK_LEVEL_PRETOK;
    if ((st = text_piece(t, c, sp.a, sp.b, cont, a_lim, !seg->final && sp.b == a_lim, err))) return st;
  }
  return LH_OK;
}

lh_status tk_pretokens(const lh_tokenizer *t, const char *text, size_t len, lh_buf *out, lh_error *err) {
  tk_ctx *c = tk_ctx_get(t, err);
  if (!c) return LH_ENOMEM;
  lh_i32vec ids = {0};
  c->ids = &ids;
  c->dump = out;
  lh_buf clean = {0};
  const uint8_t *s = (const uint8_t *)text;
  if (tk_utf8_valid_prefix(s, len) != len) {
    tk_utf8_sanitize(s, len, &clean);
    s = (const uint8_t *)clean.data;
    len = clean.len;
  }
  tk_seg seg = {.text = s, .len = len, .level = TK_LEVEL_PIECE, .final = true};
  lh_status st = tk_encode_segment(t, c, &seg, err);
  c->dump = NULL;
  tk_ctx_put(t, c);
  lh_i32vec_free(&ids);
  lh_buf_free(&clean);
  return st;
}
