/* ingest_tokens.c — the consumer's token side: framed text into the streaming tokenizer, span
 * marks into token indices, entries held until their spans are final.
 *
 * A mark is a framed-text offset b whose token index the manifest needs: the number of tokens
 * whose text starts before b (so every token belongs to the document its first byte lies in, and
 * spans tile the token stream). Tokens come out of the stream in order with non-decreasing start
 * offsets, so a mark is resolved by the first token that starts at or after it, to that token's
 * index, or at the end to the total. An entry is final when both its marks are.
 *
 * Invariants: marks arrive with consecutive ids and non-decreasing offsets (the reader makes
 * them in text order) and are registered before the text they point into is fed; entries leave in
 * the order they came; a mark is dropped only once no waiting entry refers to it. This file never
 * looks at the text itself (the tokenizer does) and never blocks, except in the threaded stream,
 * which waits for its own workers.
 */
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_internal.h"
#include "tokenizer/tokenizer_int.h" /* tk_stream_threads */
#include "util/fs.h"

struct lh_tokside {
  lh_tok_stream *stream;
  int64_t total;     /* tokens emitted so far */
  int64_t last_off;  /* start offset of the last token */
  uint64_t *moff;    /* marks [mbase, mbase + mlen): offset and token index (-1 unresolved) */
  int64_t *mval;
  size_t mlen, mcap, unres;
  int64_t mbase;
  lh_ientry *pend;   /* entries waiting for a mark, from phead */
  size_t phead, plen, pcap;
  int64_t *offs;     /* per-id offsets from the stream */
  size_t offs_cap;
  int finished;
};

lh_status lh_tokside_open(const lh_tokenizer *t, int threads, lh_tokside **out, lh_error *err) {
  lh_tokside *ts = calloc(1, sizeof *ts);
  if (!ts) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_status st = lh_tok_stream_open_text(t, threads, &ts->stream, err);
  if (st) {
    free(ts);
    return st;
  }
  *out = ts;
  return LH_OK;
}

void lh_tokside_close(lh_tokside *ts) {
  if (!ts) return;
  lh_tok_stream_close(ts->stream);
  for (size_t i = ts->phead; i < ts->plen; i++) free(ts->pend[i].own);
  free(ts->pend);
  free(ts->moff);
  free(ts->mval);
  free(ts->offs);
  free(ts);
}

static int add_marks(lh_tokside *ts, const lh_parcel *c) {
  if (ts->mbase + (int64_t)ts->mlen != c->mark_base) return -1; /* the reader's marks are consecutive */
  if (ts->mlen + c->n_marks > ts->mcap) {
    size_t cap = ts->mcap ? ts->mcap : 1024;
    while (cap < ts->mlen + c->n_marks) cap *= 2;
    uint64_t *o = realloc(ts->moff, cap * sizeof *o);
    if (!o) return -1;
    ts->moff = o;
    int64_t *v = realloc(ts->mval, cap * sizeof *v);
    if (!v) return -1;
    ts->mval = v;
    ts->mcap = cap;
  }
  for (size_t i = 0; i < c->n_marks; i++) {
    ts->moff[ts->mlen] = c->marks[i];
    ts->mval[ts->mlen++] = -1;
  }
  return 0;
}

/* Tokens [from, ids->len) of this call just came out; their indices are total + k - from. Each
 * unresolved mark goes to the first token whose start (never below an earlier token's, so spans
 * never run backwards) is at or past it; between marks the tokens are only scanned. */
static void resolve(lh_tokside *ts, const lh_i32vec *ids, size_t from) {
  const int64_t *o = ts->offs;
  size_t k = from, end = ids->len;
  int64_t last = ts->last_off;
  while (ts->unres < ts->mlen && k < end) {
    int64_t m = (int64_t)ts->moff[ts->unres];
    for (; k < end; k++) {
      int64_t x = o[k] > last ? o[k] : last;
      if (x >= m) break;
      last = x;
    }
    if (k == end) break;
    last = o[k] > last ? o[k] : last;
    while (ts->unres < ts->mlen && (int64_t)ts->moff[ts->unres] <= last)
      ts->mval[ts->unres++] = ts->total + (int64_t)(k - from);
    k++;
  }
  for (; k < end; k++)
    if (o[k] > last) last = o[k];
  ts->last_off = last;
  ts->total += (int64_t)(end - from);
}

static int64_t mark_value(const lh_tokside *ts, int64_t id) {
  if (id < ts->mbase || id >= ts->mbase + (int64_t)ts->mlen) return -2;
  return ts->mval[id - ts->mbase];
}

lh_status lh_tokside_parcel(lh_tokside *ts, lh_parcel *c, lh_i32vec *ids, lh_status (*ready)(void *, lh_ientry *),
                            void *ctx, double *seconds, lh_error *err) {
  if (add_marks(ts, c)) return lh_error_set(err, LH_ENOMEM, "ingest: out of memory (or marks out of order)");
  if (ts->plen + c->n_ents > ts->pcap) {
    if (ts->phead) { /* reuse the front */
      memmove(ts->pend, ts->pend + ts->phead, (ts->plen - ts->phead) * sizeof *ts->pend);
      ts->plen -= ts->phead;
      ts->phead = 0;
    }
    if (ts->plen + c->n_ents > ts->pcap) {
      size_t cap = ts->pcap ? ts->pcap : 256;
      while (cap < ts->plen + c->n_ents) cap *= 2;
      lh_ientry *p = realloc(ts->pend, cap * sizeof *p);
      if (!p) return lh_error_set(err, LH_ENOMEM, "out of memory");
      ts->pend = p;
      ts->pcap = cap;
    }
  }
  if (c->n_ents) memcpy(ts->pend + ts->plen, c->ents, c->n_ents * sizeof *c->ents);
  ts->plen += c->n_ents;
  c->n_ents = 0; /* ownership moved here */

  double t0 = lh_now();
  size_t from = ids->len;
  lh_status st = LH_OK;
  if (c->text.len) st = lh_tok_stream_feed(ts->stream, c->text.data, c->text.len, ids, &ts->offs, &ts->offs_cap, err);
  if (!st && c->last && !ts->finished) {
    st = lh_tok_stream_finish(ts->stream, ids, &ts->offs, &ts->offs_cap, err);
    ts->finished = 1;
  }
  *seconds += lh_now() - t0;
  if (st) return lh_error_prefix(err, st, "tokenizing the framed text at offset %llu: ", (unsigned long long)c->text_base);
  resolve(ts, ids, from);
  if (c->last)
    while (ts->unres < ts->mlen) ts->mval[ts->unres++] = ts->total;

  while (ts->phead < ts->plen) {
    lh_ientry *ie = &ts->pend[ts->phead];
    int64_t a = mark_value(ts, ie->mark_start), b = mark_value(ts, ie->mark_end);
    if (a == -2 || b == -2) return lh_error_set(err, LH_ECORRUPT, "ingest: an entry refers to an unknown mark");
    if (a < 0 || b < 0) break;
    ie->e.token_start = a;
    ie->e.token_end = b;
    ts->phead++;
    if ((st = ready(ctx, ie))) return lh_error_set(err, st, "out of memory");
  }
  /* Drop the marks no waiting entry needs any more. */
  int64_t keep = ts->phead < ts->plen ? ts->pend[ts->phead].mark_start : c->live_mark;
  if (keep > c->live_mark) keep = c->live_mark;
  size_t drop = keep > ts->mbase ? (size_t)(keep - ts->mbase) : 0;
  if (drop > ts->unres) drop = ts->unres;
  if (drop && (drop >= 4096 || drop == ts->mlen)) {
    memmove(ts->moff, ts->moff + drop, (ts->mlen - drop) * sizeof *ts->moff);
    memmove(ts->mval, ts->mval + drop, (ts->mlen - drop) * sizeof *ts->mval);
    ts->mlen -= drop;
    ts->unres -= drop;
    ts->mbase += (int64_t)drop;
  }
  return LH_OK;
}

int64_t lh_tokside_total(const lh_tokside *ts) { return ts->total; }

double lh_tokside_cpu_seconds(const lh_tokside *ts) { return lh_tok_stream_cpu_seconds(ts->stream); }

int lh_tokside_threads(const lh_tokside *ts) { return tk_stream_threads(ts->stream); }

int64_t lh_tokside_offset(const lh_tokside *ts, size_t k) { return ts->offs ? ts->offs[k] : -1; }

const lh_ingest_entry *lh_tokside_entry_at(const lh_tokside *ts, uint64_t off) {
  if (!ts) return NULL;
  for (size_t i = ts->phead; i < ts->plen; i++) {
    const lh_ingest_entry *e = &ts->pend[i].e;
    if (e->text_start <= off && off < e->text_end) return e;
  }
  return NULL;
}
