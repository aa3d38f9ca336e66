/* tokenizer_unicode.c — UTF-8 and the Unicode behaviour of HF tokenizers, on top of utf8proc.
 *
 * HF's pipeline mixes three Unicode versions: Rust's standard library and the regex crate
 * (lowercasing, is_numeric, \w, White_Space: Unicode 16), Oniguruma for pre-tokenizer regexes
 * (Unicode 16, handled in tokenizer_regex.c) and unicode-normalization-alignments for NFC/NFD/
 * NFKC/NFKD, whose tables predate Unicode 12.1. The system's utf8proc is newer than the latter.
 * Properties that HF takes from Rust come from tables probed from HF itself
 * (tokenizer_unidata.c). Normalization uses utf8proc, except that code points utf8proc knows
 * and HF's tables do not ("new" code points) are treated as HF treats them: as unassigned, i.e.
 * combining class 0, no decomposition, never composing. Such a character is a hard boundary for
 * every form, so a segment is cut around it and utf8proc never sees it next to others.
 *
 * Invariants: tk_norm_flags/tk_norm_segment are only used after tk_unicode_init succeeded; all
 * tables are immutable afterwards, so any thread may use them. Text handed to the normalizer is
 * valid UTF-8 (the tokenizer sanitizes input first). Never call utf8proc on a segment that
 * contains a "new" code point.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer_int.h"
#include "util/utf8.h"

extern const uint32_t tk_ud_rust_numeric[][2], tk_ud_rust_word[][2], tk_ud_hf_norm_active[][2];
extern const size_t tk_ud_rust_numeric_n, tk_ud_rust_word_n, tk_ud_hf_norm_active_n;
extern const uint32_t tk_ud_lower[][4];
extern const size_t tk_ud_lower_n;

/* ------------------------------------------------------------------------------------ UTF-8 */

int tk_utf8_put(uint32_t c, char *o) {
  if (c < 0x80) {
    o[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    o[0] = (char)(0xC0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (c >> 18));
  o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  o[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

uint32_t tk_utf8_prev(const uint8_t *s, size_t end, size_t *start) {
  size_t i = end - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80) i--;
  *start = i;
  size_t j = i;
  return tk_utf8_next(s, &j);
}

/* Validation and repair are util/utf8.c's; these are the tokenizer's names for them. */

size_t tk_utf8_bad_len(const uint8_t *s, size_t n, int *incomplete) {
  size_t len;
  *incomplete = lh_utf8_classify(s, n, &len) == LH_UTF8_SHORT;
  return len;
}

size_t tk_utf8_valid_prefix(const uint8_t *s, size_t n) { return lh_utf8_valid_prefix(s, n); }

lh_status tk_utf8_sanitize(const uint8_t *s, size_t n, lh_buf *out) {
  /* room for the text and a few replacements at once: growing by doubling from empty copied a
   * 50 MB text twice over and faulted in twice its pages */
  if (lh_buf_reserve(out, n + n / 256 + 16)) return LH_ENOMEM;
  lh_utf8 u = {0};
  int64_t replaced = 0;
  return lh_utf8_repair(&u, s, n, 1, out, &replaced);
}

/* ------------------------------------------------------------------------- Rust properties */

static bool in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (c < r[m][0])
      hi = m;
    else if (c > r[m][1])
      lo = m + 1;
    else
      return true;
  }
  return false;
}

bool tk_is_white_space(uint32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool tk_is_rust_word(uint32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return in_ranges(tk_ud_rust_word, tk_ud_rust_word_n, c);
}

bool tk_is_rust_numeric(uint32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(tk_ud_rust_numeric, tk_ud_rust_numeric_n, c);
}

int tk_lowercase(uint32_t c, uint32_t out[3]) {
  if (c < 0x80) {
    out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
    return 1;
  }
  size_t lo = 0, hi = tk_ud_lower_n;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (tk_ud_lower[m][0] < c)
      lo = m + 1;
    else
      hi = m;
  }
  if (lo < tk_ud_lower_n && tk_ud_lower[lo][0] == c) {
    int k = 0;
    for (int j = 1; j < 4 && (j == 1 || tk_ud_lower[lo][j]); j++) out[k++] = tk_ud_lower[lo][j];
    return k;
  }
  out[0] = c;
  return 1;
}

/* ---------------------------------------------------------------------------- normalization */

/* Two-stage table of per-form flags: 2 bits (TK_NF_BB, TK_NF_INERT) for each of the four forms,
 * and NEW_BIT for code points utf8proc knows and HF's normalization does not. */
#define BLOCK 256
#define NBLOCKS (0x110000 / BLOCK)
#define NEW_BIT 0x100
static uint16_t *g_stage1; /* block -> index of its row in g_stage2 */
static uint16_t *g_stage2; /* rows of BLOCK entries */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static lh_status g_init_status = LH_OK;

static const utf8proc_option_t form_opts[4] = {
    UTF8PROC_STABLE | UTF8PROC_COMPOSE,
    UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
    UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
    UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
};

static int ccc_of(uint32_t c) { return utf8proc_get_property((utf8proc_int32_t)c)->combining_class; }

/* utf8proc marks code points without a decomposition mapping (Hangul syllables decompose
 * algorithmically and carry none). */
static bool has_decomposition(uint32_t c) {
  if (c >= 0xAC00 && c <= 0xD7A3) return true;
  return utf8proc_get_property((utf8proc_int32_t)c)->decomp_seqindex != UINT16_MAX;
}

static void unicode_init(void) {
  uint8_t *second = calloc(0x110000 / 8, 1);
  uint16_t *flags = malloc(0x110000 * sizeof *flags);
  if (!second || !flags) {
    free(second);
    free(flags);
    g_init_status = LH_ENOMEM;
    return;
  }
  /* Composition seconds: the last character of the decomposition of every primary composite. */
  for (uint32_t c = 0x80; c < 0x110000; c++) {
    if (c >= 0xD800 && c < 0xE000) continue;
    if (!has_decomposition(c)) continue;
    utf8proc_int32_t d[32];
    int last = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE, &last);
    if (n < 2 || n > 32) continue;
    utf8proc_int32_t e[32];
    memcpy(e, d, (size_t)n * sizeof *e);
    utf8proc_ssize_t m = utf8proc_normalize_utf32(e, n, UTF8PROC_COMPOSE | UTF8PROC_STABLE);
    if (m == 1 && e[0] == (utf8proc_int32_t)c) second[d[n - 1] >> 3] |= (uint8_t)(1u << (d[n - 1] & 7));
  }
#define IS_SECOND(x) ((second[(x) >> 3] >> ((x) & 7)) & 1)
  for (uint32_t c = 0; c < 0x110000; c++) {
    uint16_t f = 0;
    bool is_new = false;
    const utf8proc_property_t *p = (c >= 0xD800 && c < 0xE000) ? NULL : utf8proc_get_property((utf8proc_int32_t)c);
    bool trivial = c < 0x80 || !p || p->category == UTF8PROC_CATEGORY_CN || p->category == UTF8PROC_CATEGORY_CO;
    if (!trivial && !has_decomposition(c) && p->combining_class == 0 && !IS_SECOND(c)) trivial = true;
    if (!trivial) {
      utf8proc_int32_t d[32];
      int last = 0;
      utf8proc_ssize_t nc = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE, &last);
      bool dc = nc != 1 || d[0] != (utf8proc_int32_t)c; /* singleton decompositions count */
      utf8proc_ssize_t nk =
          utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, &last);
      bool dk = nk != 1 || d[0] != (utf8proc_int32_t)c;
      bool u_active = p->combining_class != 0 || dc || dk || IS_SECOND(c);
      bool hf_active = in_ranges(tk_ud_hf_norm_active, tk_ud_hf_norm_active_n, c);
      /* a code point HF's tables do not know behaves as unassigned there */
      is_new = u_active && !hf_active;
      trivial = is_new || !u_active;
      if (!trivial) {
        for (int form = 0; form < 4; form++) {
          bool compat = form >= 2, compose = (form == TK_NFC || form == TK_NFKC);
          utf8proc_ssize_t n = utf8proc_decompose_char((utf8proc_int32_t)c, d, 32,
                                                       UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0), &last);
          uint32_t d1 = (uint32_t)d[0];
          bool bb = ccc_of(d1) == 0 && !(compose && IS_SECOND(d1));
          bool inert = bb && n == 1 && d1 == c;
          f |= (uint16_t)(((bb ? TK_NF_BB : 0) | (inert ? TK_NF_INERT : 0)) << (2 * form));
        }
      }
    }
    if (trivial) f = (uint16_t)(0xFF | (is_new ? NEW_BIT : 0));
    flags[c] = f;
  }
#undef IS_SECOND
  free(second);
  /* compress: identical blocks share a row */
  g_stage1 = malloc(NBLOCKS * sizeof *g_stage1);
  g_stage2 = malloc(BLOCK * 64 * sizeof *g_stage2);
  size_t rows = 0, rows_cap = 64;
  if (!g_stage1 || !g_stage2) {
    g_init_status = LH_ENOMEM;
    free(flags);
    return;
  }
  for (size_t b = 0; b < NBLOCKS; b++) {
    const uint16_t *blk = flags + b * BLOCK;
    size_t r = 0;
    for (; r < rows; r++)
      if (!memcmp(g_stage2 + r * BLOCK, blk, BLOCK * sizeof *blk)) break;
    if (r == rows) {
      if (rows == rows_cap) {
        uint16_t *n2 = realloc(g_stage2, BLOCK * rows_cap * 2 * sizeof *n2);
        if (!n2) {
          g_init_status = LH_ENOMEM;
          free(flags);
          return;
        }
        g_stage2 = n2;
        rows_cap *= 2;
      }
      memcpy(g_stage2 + rows * BLOCK, blk, BLOCK * sizeof *blk);
      rows++;
    }
    g_stage1[b] = (uint16_t)r;
  }
  free(flags);
}

lh_status tk_unicode_init(lh_error *err) {
  pthread_once(&g_once, unicode_init);
  if (g_init_status) return lh_error_set(err, g_init_status, "tokenizer: out of memory building Unicode tables");
  return LH_OK;
}

static uint16_t flags_of(uint32_t c) { return g_stage2[(size_t)g_stage1[c / BLOCK] * BLOCK + c % BLOCK]; }

uint8_t tk_norm_flags(tk_form f, uint32_t c) {
  if (c < 0x80) return TK_NF_BB | TK_NF_INERT;
  return (uint8_t)((flags_of(c) >> (2 * (int)f)) & 3);
}

lh_status tk_norm_segment(tk_form f, const uint8_t *s, size_t n, lh_buf *out) {
  /* A segment that starts with a character HF does not know: emit it as is, then normalize
   * the combining characters after it without it (HF cannot compose or reorder across it). */
  size_t i = 0;
  uint32_t c0 = tk_utf8_next(s, &i);
  if (c0 >= 0x80 && (flags_of(c0) & NEW_BIT) && i < n) {
    if (lh_buf_append(out, s, i)) return LH_ENOMEM;
    s += i;
    n -= i;
  }
  utf8proc_uint8_t *res = NULL;
  utf8proc_ssize_t m = utf8proc_map(s, (utf8proc_ssize_t)n, &res, form_opts[f]);
  if (m < 0) {
    free(res);
    return m == UTF8PROC_ERROR_NOMEM ? LH_ENOMEM : LH_EINVAL;
  }
  lh_status st = lh_buf_append(out, res, (size_t)m);
  free(res);
  return st;
}
