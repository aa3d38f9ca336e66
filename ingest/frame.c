/* frame.c — what happens to one entry: the decision to include it, and its framing.
 *
 * Sources hand every entry here. lh_reader_predecide rules on what the metadata alone can tell
 * (type, encryption, globs, declared size against the caps); a document then flows through
 * lh_doc_begin / lh_doc_data / lh_doc_end:
 *
 *   begin --data--> SNIFFING --window full or end--> TEXT (header emitted, content streams)
 *                        \                      \--> BINARY (nothing emitted; source skips the rest)
 *                         \--cap reached--> decided on what was seen, then cut (PARTIAL)
 *
 * Invariants: nothing of a document is emitted before the sniff decision, so a binary entry
 * leaves no trace in the text; once the header is emitted the footer always follows, whatever
 * goes wrong (the framed text stays well-formed when an archive breaks mid-entry); the content
 * emitted is exactly the accepted bytes after UTF-8 repair; the SHA-256 covers exactly the bytes
 * accepted and is only reported when they are the whole entry. This file never reads input
 * itself and never decides what an error means for the run (lh_reader_entry does, by on_error).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_internal.h"
#include "util/fs.h"

/* ---- templates ---- */

static lh_status add_part(lh_tmpl_part **parts, size_t *n, lh_tmpl_kind k, const char *lit, size_t len) {
  if (k == LH_T_LIT && len == 0) return LH_OK;
  if (k == LH_T_LIT && *n && (*parts)[*n - 1].kind == LH_T_LIT) {
    lh_tmpl_part *q = &(*parts)[*n - 1];
    char *m = realloc(q->lit, q->lit_len + len + 1);
    if (!m) return LH_ENOMEM;
    memcpy(m + q->lit_len, lit, len);
    q->lit = m;
    q->lit_len += len;
    m[q->lit_len] = 0;
    return LH_OK;
  }
  lh_tmpl_part *np = realloc(*parts, (*n + 1) * sizeof *np);
  if (!np) return LH_ENOMEM;
  *parts = np;
  lh_tmpl_part *q = &np[(*n)++];
  q->kind = k;
  q->lit = NULL;
  q->lit_len = 0;
  if (k == LH_T_LIT) {
    q->lit = malloc(len + 1);
    if (!q->lit) return LH_ENOMEM;
    memcpy(q->lit, lit, len);
    q->lit[len] = 0;
    q->lit_len = len;
  }
  return LH_OK;
}

lh_status lh_tmpl_parse(const char *s, lh_tmpl *t, lh_error *err) {
  static const struct {
    const char *name;
    lh_tmpl_kind kind;
  } names[] = {{"path", LH_T_PATH}, {"path_raw", LH_T_PATH_RAW}, {"input", LH_T_INPUT}, {"index", LH_T_INDEX},
               {"nl", LH_T_NL},     {"bytes", LH_T_BYTES},       {"sha256", LH_T_SHA256}};
  memset(t, 0, sizeof *t);
  int seen_text = 0;
  for (size_t i = 0; s[i];) {
    lh_tmpl_part **parts = seen_text ? &t->tail : &t->head;
    size_t *np = seen_text ? &t->n_tail : &t->n_head;
    if (s[i] == '{' && s[i + 1] == '{') {
      if (add_part(parts, np, LH_T_LIT, "{", 1)) goto oom;
      i += 2;
    } else if (s[i] == '}' && s[i + 1] == '}') {
      if (add_part(parts, np, LH_T_LIT, "}", 1)) goto oom;
      i += 2;
    } else if (s[i] == '}') {
      lh_tmpl_free(t);
      return lh_error_set(err, LH_EINVAL, "template: '}' at offset %zu without '{' (write '}}' for a brace)", i);
    } else if (s[i] == '{') {
      const char *end = strchr(s + i, '}');
      if (!end) {
        lh_tmpl_free(t);
        return lh_error_set(err, LH_EINVAL, "template: '{' at offset %zu is not closed (write '{{' for a brace)", i);
      }
      size_t len = (size_t)(end - (s + i + 1));
      const char *name = s + i + 1;
      if (len == 4 && !memcmp(name, "text", 4)) {
        if (seen_text) {
          lh_tmpl_free(t);
          return lh_error_set(err, LH_EINVAL, "template: {text} appears more than once");
        }
        seen_text = 1;
      } else {
        size_t k = 0;
        for (; k < sizeof names / sizeof *names; k++)
          if (strlen(names[k].name) == len && !memcmp(names[k].name, name, len)) break;
        if (k == sizeof names / sizeof *names) {
          lh_tmpl_free(t);
          return lh_error_set(err, LH_EINVAL,
                              "template: unknown placeholder {%.*s} (known: path, path_raw, input, index, text, nl, "
                              "bytes, sha256)",
                              (int)(len > 40 ? 40 : len), name);
        }
        if (!seen_text && (names[k].kind == LH_T_BYTES || names[k].kind == LH_T_SHA256)) {
          lh_tmpl_free(t);
          return lh_error_set(err, LH_EINVAL,
                              "template: {%s} is only known after the content; use it after {text}", names[k].name);
        }
        if (add_part(parts, np, names[k].kind, NULL, 0)) goto oom;
      }
      i = (size_t)(end - s) + 1;
    } else {
      size_t j = i;
      while (s[j] && s[j] != '{' && s[j] != '}') j++;
      if (add_part(parts, np, LH_T_LIT, s + i, j - i)) goto oom;
      i = j;
    }
  }
  if (!seen_text) {
    lh_tmpl_free(t);
    return lh_error_set(err, LH_EINVAL, "template: no {text} placeholder (where the document's content goes)");
  }
  return LH_OK;
oom:
  lh_tmpl_free(t);
  return lh_error_set(err, LH_ENOMEM, "out of memory parsing the template");
}

void lh_tmpl_free(lh_tmpl *t) {
  for (size_t i = 0; i < t->n_head; i++) free(t->head[i].lit);
  for (size_t i = 0; i < t->n_tail; i++) free(t->tail[i].lit);
  free(t->head);
  free(t->tail);
  memset(t, 0, sizeof *t);
}

static lh_status render(lh_reader *r, const lh_tmpl_part *parts, size_t n, int at_end) {
  lh_buf *b = lh_reader_textbuf(r);
  size_t old = b->len;
  int st = 0;
  const char *path = r->doc.path;
  size_t plen = r->doc.path_len;
  lh_path_normalize(&path, &plen);
  for (size_t i = 0; i < n && !st; i++) {
    const lh_tmpl_part *q = &parts[i];
    switch (q->kind) {
      case LH_T_LIT: st = lh_buf_append(b, q->lit, q->lit_len); break;
      case LH_T_PATH: st = lh_xml_escape(b, path, plen); break;
      case LH_T_PATH_RAW: {
        /* Invalid UTF-8 as U+FFFD, nothing else changed. */
        int64_t dummy = 0;
        lh_utf8 u = {0};
        st = lh_utf8_repair(&u, (const uint8_t *)path, plen, 1, b, &dummy);
        break;
      }
      case LH_T_INPUT: st = lh_xml_escape(b, r->in->name, strlen(r->in->name)); break;
      case LH_T_INDEX: st = lh_buf_printf(b, "%" PRId64, r->doc_index); break;
      case LH_T_NL:
        if (at_end && r->doc.accepted > 0 && r->doc.last != '\n') st = lh_buf_append(b, "\n", 1);
        break;
      case LH_T_BYTES: st = lh_buf_printf(b, "%" PRId64, r->doc.accepted); break;
      case LH_T_SHA256: {
        uint8_t d[32];
        char hex[65];
        lh_sha256_final(&r->doc.sha, d);
        lh_hex(d, 32, hex);
        st = lh_buf_append(b, hex, 64);
        break;
      }
    }
  }
  if (st) return lh_error_set(&r->err, LH_ENOMEM, "out of memory framing a document");
  return lh_reader_text_done(r, old);
}

/* ---- entries ---- */

static char *dup_bytes(const char *p, size_t n) {
  char *s = malloc(n + 1);
  if (s) {
    if (n) memcpy(s, p, n);
    s[n] = 0;
  }
  return s;
}

/* Make an ientry with its strings in one allocation. */
static lh_status make_entry(lh_reader *r, lh_ientry *ie, const char *path, size_t plen, const char *link,
                            size_t llen, const char *detail) {
  memset(ie, 0, sizeof *ie);
  size_t dlen = detail ? strlen(detail) : 0;
  ie->own = malloc(plen + llen + dlen + 3);
  if (!ie->own) return lh_error_set(&r->err, LH_ENOMEM, "out of memory recording an entry");
  char *q = ie->own;
  if (plen) memcpy(q, path, plen);
  q[plen] = 0;
  ie->e.path = q;
  ie->e.path_len = plen;
  q += plen + 1;
  if (link) {
    if (llen) memcpy(q, link, llen);
    q[llen] = 0;
    ie->e.link = q;
    ie->e.link_len = llen;
    q += llen + 1;
  }
  if (dlen) memcpy(q, detail, dlen);
  q[dlen] = 0;
  ie->e.detail = q;
  ie->e.bytes = -1;
  ie->e.error_offset = -1;
  ie->e.token_start = ie->e.token_end = -1;
  ie->mark_start = ie->mark_end = -1;
  return LH_OK;
}

lh_entry_reason lh_reader_predecide_static(lh_reader *r, const lh_meta *m) {
  if (lh_globset_match_meta(r->exclude, m, 1)) return LH_REASON_EXCLUDED;
  switch (m->type) {
    case LH_ENTRY_FILE: break;
    case LH_ENTRY_DIR: return LH_REASON_DIRECTORY;
    case LH_ENTRY_SYMLINK:
    case LH_ENTRY_HARDLINK: return LH_REASON_LINK;
    default: return LH_REASON_SPECIAL;
  }
  if (m->encrypted) return LH_REASON_ENCRYPTED;
  if (r->include->n && !lh_globset_match_meta(r->include, m, 0)) return LH_REASON_NOT_INCLUDED;
  if (m->size >= 0 && m->size > r->p->max_file_bytes) return LH_REASON_TOO_LARGE;
  return LH_REASON_NONE;
}

lh_entry_reason lh_reader_predecide(lh_reader *r, const lh_meta *m) {
  lh_entry_reason why = lh_reader_predecide_static(r, m);
  if (why) return why;
  if (r->total_cap_hit) return LH_REASON_TOTAL_CAP;
  if (m->size >= 0 && r->st.document_bytes + m->size > r->p->max_total_bytes) {
    r->total_cap_hit = 1;
    return LH_REASON_TOTAL_CAP;
  }
  return LH_REASON_NONE;
}

lh_status lh_reader_record(lh_reader *r, const lh_meta *m, lh_entry_status st, lh_entry_reason why, int64_t bytes,
                           int64_t err_off, lh_status code, const char *detail) {
  lh_ientry ie;
  lh_status s = make_entry(r, &ie, m->path, m->path_len, m->link, m->link_len, detail);
  if (s) return s;
  ie.e.type = m->type;
  ie.e.status = st;
  ie.e.reason = why;
  ie.e.bytes = m->type == LH_ENTRY_FILE ? bytes : -1; /* a link's or directory's "size" says nothing */
  ie.e.error_offset = err_off;
  ie.e.text_start = ie.e.text_end = r->text_pos;
  if ((s = lh_reader_mark(r, &ie.mark_start))) {
    free(ie.own);
    return s;
  }
  ie.mark_end = ie.mark_start;
  return lh_reader_entry(r, &ie, code);
}

/* ---- documents ---- */

lh_status lh_doc_begin(lh_reader *r, const lh_meta *m) {
  lh_reader_doc_free(r);
  r->doc.path = dup_bytes(m->path, m->path_len);
  r->doc.link = m->link ? dup_bytes(m->link, m->link_len) : NULL;
  if (!r->doc.path || (m->link && !r->doc.link)) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
  r->doc.active = 1;
  r->doc.decompressed = m->decompressed;
  r->doc.key = lh_key_of(m->path, m->path_len); /* hard links name their targets as stored */
  r->doc.path_len = m->path_len;
  r->doc.link_len = m->link_len;
  r->doc.type = m->type;
  r->doc.declared = m->size;
  r->doc.mark_start = -1;
  r->doc.nul_at = -1;
  lh_sha256_init(&r->doc.sha);
  lh_buf_clear(&r->doc.sniff);
  return LH_OK;
}

void lh_reader_doc_free(lh_reader *r) {
  free(r->doc.path);
  free(r->doc.link);
  lh_buf sniff = r->doc.sniff;
  memset(&r->doc, 0, sizeof r->doc);
  r->doc.sniff = sniff;
}

static lh_status emit_content(lh_reader *r, const uint8_t *p, size_t n, int final) {
  /* In slices of at most batch_bytes, so a big block still makes batches of about that size. */
  size_t slice = r->p->batch_bytes;
  do {
    size_t k = n < slice ? n : slice;
    lh_buf *b = lh_reader_textbuf(r);
    size_t old = b->len;
    if (lh_utf8_repair(&r->doc.u, p, k, final && k == n, b, &r->doc.invalid))
      return lh_error_set(&r->err, LH_ENOMEM, "out of memory framing a document");
    if (b->len > old) r->doc.last = b->data[b->len - 1];
    lh_status s = lh_reader_text_done(r, old);
    if (s) return s;
    if (k) p += k, n -= k;
  } while (n);
  return LH_OK;
}

static lh_status decide(lh_reader *r, int final) {
  const uint8_t *p = (const uint8_t *)r->doc.sniff.data;
  size_t n = r->doc.sniff.len;
  int64_t nul = -1;
  size_t clean = 0;
  size_t limit = (size_t)(r->p->max_invalid_share * (double)n);
  size_t bad = n ? lh_utf8_invalid_bytes(p, n, final, limit < 4 ? 4 : limit, &nul, &clean) : 0;
  r->doc.decided = 1;
  r->doc.nul_at = nul;
  /* At least a few bad bytes, so one Latin-1 letter in a short note does not make it binary. */
  if (nul >= 0 || ((double)bad > r->p->max_invalid_share * (double)n && bad >= 4)) {
    r->doc.binary = 1;
    r->doc.stopped = 1;
    return LH_OK;
  }
  lh_status s = lh_reader_mark(r, &r->doc.mark_start);
  if (s) return s;
  r->doc.text_start = r->text_pos;
  if ((s = render(r, r->tmpl->head, r->tmpl->n_head, 0))) return s;
  if (bad == 0 && clean > 0) {
    /* Already valid (the usual case): copy it, and repair only an unfinished tail. */
    if ((s = lh_reader_text(r, (const char *)p, clean))) return s;
    r->doc.last = (char)p[clean - 1];
    p += clean, n -= clean;
  }
  if (n && (s = emit_content(r, p, n, 0))) return s;
  lh_buf_clear(&r->doc.sniff);
  return LH_OK;
}

lh_status lh_doc_data(lh_reader *r, const void *data, size_t n, int *want_more) {
  *want_more = !r->doc.stopped;
  if (r->doc.stopped || !n) return LH_OK;
  double t0 = lh_now();
  const uint8_t *p = data;
  r->st.content_bytes += (int64_t)n;
  int64_t left_total = r->p->max_total_bytes - r->st.document_bytes;
  int64_t budget = r->p->max_file_bytes < left_total ? r->p->max_file_bytes : left_total;
  lh_entry_reason cut_reason = r->p->max_file_bytes < left_total ? LH_REASON_TOO_LARGE : LH_REASON_TOTAL_CAP;
  size_t take = n;
  if ((int64_t)take > budget - r->doc.accepted) take = (size_t)(budget - r->doc.accepted);
  lh_sha256_update(&r->doc.sha, p, take);
  r->doc.accepted += (int64_t)take;
  r->doc.bytes = r->doc.accepted;
  lh_status s = LH_OK;
  if (!r->doc.decided) {
    size_t room = r->p->sniff_bytes > r->doc.sniff.len ? r->p->sniff_bytes - r->doc.sniff.len : 0;
    size_t into = take < room ? take : room;
    if (lh_buf_append(&r->doc.sniff, p, into)) return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    if (r->doc.sniff.len >= r->p->sniff_bytes || take < n) s = decide(r, take < n);
    if (!s && !r->doc.binary && into < take) s = emit_content(r, p + into, take - into, 0);
  } else if (!r->doc.binary) {
    s = emit_content(r, p, take, 0);
  }
  if (!s && take < n) {
    r->doc.cut = cut_reason;
    r->doc.stopped = 1;
  }
  *want_more = !r->doc.stopped;
  r->st.frame_seconds += lh_now() - t0;
  return s;
}

lh_status lh_doc_end(lh_reader *r, lh_status code, lh_entry_reason why, int64_t err_off, const char *detail) {
  lh_status s = LH_OK;
  int read_all = !r->doc.decided && !r->doc.cut && !code; /* all of it sat in the sniff window */
  if (!r->doc.decided && (s = decide(r, 1))) return s;
  char msg[256];
  lh_ientry ie;
  r->last_included = 0;
  if (r->doc.binary) {
    if (!detail || !detail[0]) {
      if (r->doc.nul_at >= 0) snprintf(msg, sizeof msg, "NUL byte at offset %" PRId64, r->doc.nul_at);
      else
        snprintf(msg, sizeof msg, "over %.0f%% of the first %zu bytes are not UTF-8", 100 * r->p->max_invalid_share,
                 r->doc.sniff.len);
      detail = msg;
    }
    if ((s = make_entry(r, &ie, r->doc.path, r->doc.path_len, r->doc.link, r->doc.link_len, detail))) return s;
    ie.e.status = code ? LH_ENTRY_ERROR : LH_ENTRY_SKIPPED;
    ie.e.reason = code ? why : LH_REASON_BINARY;
    ie.e.bytes = read_all ? r->doc.bytes : r->doc.declared;
    ie.e.has_sha256 = read_all;
    if (read_all) lh_sha256_final(&r->doc.sha, ie.e.sha256);
    ie.e.text_start = ie.e.text_end = r->text_pos;
    if ((s = lh_reader_mark(r, &ie.mark_start))) {
      free(ie.own);
      return s;
    }
    ie.mark_end = ie.mark_start;
  } else {
    double t0 = lh_now();
    if ((s = emit_content(r, NULL, 0, 1))) return s;
    if ((s = render(r, r->tmpl->tail, r->tmpl->n_tail, 1))) return s;
    r->st.frame_seconds += lh_now() - t0;
    if ((s = make_entry(r, &ie, r->doc.path, r->doc.path_len, r->doc.link, r->doc.link_len, detail))) return s;
    if (code) ie.e.status = LH_ENTRY_ERROR, ie.e.reason = why;
    else if (r->doc.cut) ie.e.status = LH_ENTRY_PARTIAL, ie.e.reason = r->doc.cut;
    else ie.e.status = LH_ENTRY_OK;
    if (r->doc.cut == LH_REASON_TOTAL_CAP) r->total_cap_hit = 1;
    ie.e.bytes = r->doc.accepted;
    ie.e.has_sha256 = !code && !r->doc.cut;
    if (ie.e.has_sha256) lh_sha256_final(&r->doc.sha, ie.e.sha256);
    ie.e.invalid_utf8 = r->doc.invalid;
    ie.e.text_start = r->doc.text_start;
    ie.e.text_end = r->text_pos;
    ie.mark_start = r->doc.mark_start;
    if ((s = lh_reader_mark(r, &ie.mark_end))) {
      free(ie.own);
      return s;
    }
    r->st.document_bytes += r->doc.accepted;
    r->st.invalid_utf8 += r->doc.invalid;
    r->doc_index++;
    r->last_included = ie.e.status != LH_ENTRY_ERROR;
    if (r->last_included && lh_keyset_add(&r->included, r->doc.key)) {
      free(ie.own);
      return lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    }
  }
  ie.e.type = r->doc.type;
  ie.e.decompressed = r->doc.decompressed;
  ie.e.error_offset = code ? err_off : -1;
  lh_reader_doc_free(r);
  return lh_reader_entry(r, &ie, code);
}
