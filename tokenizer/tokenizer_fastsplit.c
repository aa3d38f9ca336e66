/* tokenizer_fastsplit.c — hand-written matchers for the pre-tokenizer regexes most tokenizers use.
 *
 * GPT-2's ByteLevel regex, cl100k's (Llama 3, GPT-4), Qwen2's (cl100k with single digits; also
 * this project's models) and o200k's (GPT-4o, MiniMax) are recognized by their exact pattern
 * text, in the spellings tokenizer.json files use. For them the leftmost
 * match at a position is computed directly, following the order in which Oniguruma's
 * backtracking tries the alternatives, with Oniguruma's own Unicode 16 classes (the general
 * categories and \s of tokenizer_unidata.c). That removes PCRE2's per-call set-up and its class
 * tests, the two largest costs of pre-tokenizing. Every position of a subject starts a match of
 * these patterns, so the search never skips ahead, and no match is empty.
 *
 * Partial matching: when deciding a match needs a character past the end of the subject, the
 * matcher reports TK_FIND_PARTIAL instead (only asked for in partial mode), exactly where
 * PCRE2's hard-partial mode would have to; that keeps streaming and threads exact.
 *
 * Invariants: the class table is built once (pthread_once) and read-only afterwards; subjects
 * are valid UTF-8. The matchers must agree with tokenizer_regex.c's translation of the same
 * pattern on every input: test_tokenizer_fixtures checks both against HF, and
 * test_tokenizer_unit checks them against each other on random text.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

extern const uint32_t tk_ud_gc[][2];
extern const size_t tk_ud_gc_n;
extern const uint32_t tk_ud_onig_space[][2];
extern const size_t tk_ud_onig_space_n;

/* class bits (Oniguruma's sets) */
#define C_LU 0x01 /* Lu Lt */
#define C_LL 0x02 /* Ll */
#define C_LO 0x04 /* Lm Lo */
#define C_M 0x08  /* Mn Mc Me */
#define C_N 0x10  /* Nd Nl No */
#define C_S 0x20  /* \s */
#define C_NL 0x40 /* \r \n */
#define C_END 0x80 /* past the end of the subject */
#define C_L (C_LU | C_LL | C_LO)
#define C_U (C_LU | C_LO | C_M) /* [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define C_W (C_LL | C_LO | C_M) /* [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define OTHER_BAD (C_S | C_L | C_N)   /* [^\s\p{L}\p{N}] has none of these */

#define BLK 256
static uint16_t *g_s1;
static uint8_t *g_s2;
static uint8_t g_ascii[128];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_ok;

static void build(void) {
  uint8_t *all = calloc(0x110000, 1);
  if (!all) return;
  /* general category indices as in tk_ud_gc: Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No ... */
  static const uint8_t bits[30] = {C_LU, C_LL, C_LU, C_LO, C_LO, C_M, C_M, C_M, C_N, C_N, C_N};
  for (size_t i = 0; i < tk_ud_gc_n; i++) {
    uint32_t a = tk_ud_gc[i][0], b = i + 1 < tk_ud_gc_n ? tk_ud_gc[i + 1][0] : 0x110000;
    uint32_t g = tk_ud_gc[i][1];
    if (g < 30 && bits[g]) memset(all + a, bits[g], b - a);
  }
  for (size_t i = 0; i < tk_ud_onig_space_n; i++)
    for (uint32_t c = tk_ud_onig_space[i][0]; c <= tk_ud_onig_space[i][1]; c++) all[c] |= C_S;
  all['\r'] |= C_NL;
  all['\n'] |= C_NL;
  memcpy(g_ascii, all, 128);
  g_s1 = malloc((0x110000 / BLK) * sizeof *g_s1);
  g_s2 = malloc(BLK * 64);
  size_t rows = 0, cap = 64;
  if (!g_s1 || !g_s2) {
    free(all);
    return;
  }
  for (size_t b = 0; b < 0x110000 / BLK; b++) {
    size_t r = 0;
    for (; r < rows; r++)
      if (!memcmp(g_s2 + r * BLK, all + b * BLK, BLK)) break;
    if (r == rows) {
      if (rows == cap) {
        uint8_t *n = realloc(g_s2, BLK * cap * 2);
        if (!n) {
          free(all);
          return;
        }
        g_s2 = n;
        cap *= 2;
      }
      memcpy(g_s2 + rows * BLK, all + b * BLK, BLK);
      rows++;
    }
    g_s1[b] = (uint16_t)r;
  }
  free(all);
  g_ok = true;
}

#define HOT static inline __attribute__((always_inline))

/* Class bits of the character at s[i] (C_END at or past n); *next gets the next offset. */
HOT uint8_t cls(const uint8_t *s, size_t n, size_t i, size_t *next) {
  if (i >= n) {
    *next = i;
    return C_END;
  }
  uint8_t b = s[i];
  if (b < 0x80) {
    *next = i + 1;
    return g_ascii[b];
  }
  size_t j = i;
  uint32_t c = tk_utf8_next(s, &j);
  *next = j;
  return g_s2[(size_t)g_s1[c / BLK] * BLK + c % BLK];
}

static const char PAT_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char PAT_CL100K[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_O200K[] =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* tiktoken's later spelling of the contractions, '(?i:[sdmt]|ll|ve|re): the same set, since the
 * alternatives start with different letters (and s still takes U+017F) */
static const char PAT_QWEN2_B[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_CL100K_B[] =
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
  const char *p;
  int kind;
} known[] = {{PAT_GPT2, TK_FAST_GPT2},     {PAT_CL100K, TK_FAST_CL100K},   {PAT_CL100K_B, TK_FAST_CL100K},
             {PAT_QWEN2, TK_FAST_QWEN2},   {PAT_QWEN2_B, TK_FAST_QWEN2},   {PAT_O200K, TK_FAST_O200K}};

const char *tk_fast_pattern(size_t i, int *kind) {
  if (i >= sizeof known / sizeof *known) return NULL;
  *kind = known[i].kind;
  return known[i].p;
}

int tk_fast_kind(const char *pat, size_t len) {
  for (size_t k = 0; k < sizeof known / sizeof *known; k++)
    if (len == strlen(known[k].p) && !memcmp(pat, known[k].p, len)) {
      pthread_once(&g_once, build);
      return g_ok ? known[k].kind : 0;
    }
  return 0;
}

/* The matchers: 1 match (end in *me), 0 partial (needed text past n). */
typedef struct m {
  const uint8_t *s;
  size_t n;
  bool hit_end; /* some test needed a character past the end */
} m_t;

HOT uint8_t at(m_t *m, size_t i, size_t *next) {
  uint8_t c = cls(m->s, m->n, i, next);
  if (c == C_END) m->hit_end = true;
  return c;
}

/* end of the run of characters with any of `want` bits from i */
HOT size_t run(m_t *m, size_t i, uint8_t want) {
  for (;;) {
    size_t nx;
    uint8_t c = at(m, i, &nx);
    if (c == C_END || !(c & want)) return i;
    i = nx;
  }
}

/* end of the run of characters with none of `bad` bits from i */
HOT size_t run_not(m_t *m, size_t i, uint8_t bad) {
  for (;;) {
    size_t nx;
    uint8_t c = at(m, i, &nx);
    if (c == C_END || (c & bad)) return i;
    i = nx;
  }
}

/* ASCII letter of s[i] in lower case (0 if none / past the end). */
HOT int lower_at(m_t *m, size_t i) {
  if (i >= m->n) {
    m->hit_end = true;
    return 0;
  }
  uint8_t b = m->s[i];
  return b >= 'A' && b <= 'Z' ? b + 32 : b;
}

/* a contraction 's 't 're 've 'm 'll 'd at i; returns its end or 0. Case-insensitive contractions
 * also take U+017F (long s) for s, which case-folds to s. */
HOT size_t contraction(m_t *m, size_t i, bool ci) {
  if (i >= m->n) {
    m->hit_end = true;
    return 0;
  }
  if (m->s[i] != '\'') return 0;
  int a = ci ? lower_at(m, i + 1) : (i + 1 < m->n ? m->s[i + 1] : (m->hit_end = true, 0));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (ci && i + 1 < m->n && m->s[i + 1] == 0xC5) {
    if (i + 2 >= m->n) {
      m->hit_end = true;
      return 0;
    }
    if (m->s[i + 2] == 0xBF) return i + 3; /* U+017F */
    return 0;
  }
  if (a == 'r' || a == 'v' || a == 'l') {
    int b = ci ? lower_at(m, i + 2) : (i + 2 < m->n ? m->s[i + 2] : (m->hit_end = true, 0));
    if ((a == 'r' || a == 'v') && b == 'e') return i + 3;
    if (a == 'l' && b == 'l') return i + 3;
  }
  return 0;
}

/* Whitespace alternatives from i (i starts whitespace): with_nl adds \s*[\r\n]+ first. */
static size_t spaces(m_t *m, size_t i, bool with_nl) {
  size_t j = i, last_nl = SIZE_MAX, nx;
  for (;;) {
    uint8_t c = at(m, j, &nx);
    if (c == C_END || !(c & C_S)) break;
    if (c & C_NL) last_nl = j;
    j = nx;
  }
  if (with_nl && last_nl != SIZE_MAX) return last_nl + 1; /* \s*[\r\n]+ */
  if (j >= m->n) return j;                                /* \s+(?!\S) at the end */
  /* \s+(?!\S) backs off one character; a single space falls to \s+ */
  size_t ps;
  tk_utf8_prev(m->s, j, &ps);
  return ps > i ? ps : j;
}

static size_t match_gpt2(m_t *m, size_t i) {
  size_t e, nx, n1;
  if ((e = contraction(m, i, false))) return e;
  uint8_t c0 = at(m, i, &nx);
  if (m->s[i] == ' ') {
    uint8_t c1 = at(m, nx, &n1);
    if (c1 & C_L) return run(m, nx, C_L);
    if (c1 & C_N) return run(m, nx, C_N);
    if (c1 != C_END && !(c1 & OTHER_BAD)) return run_not(m, nx, OTHER_BAD);
  }
  if (c0 & C_L) return run(m, i, C_L);
  if (c0 & C_N) return run(m, i, C_N);
  if (!(c0 & OTHER_BAD)) return run_not(m, i, OTHER_BAD);
  return spaces(m, i, false);
}

HOT size_t nl_run(m_t *m, size_t i, bool slash) {
  for (;;) {
    if (i >= m->n) {
      m->hit_end = true;
      return i;
    }
    uint8_t b = m->s[i];
    if (b == '\r' || b == '\n' || (slash && b == '/'))
      i++;
    else
      return i;
  }
}

static size_t match_cl100k(m_t *m, size_t i, int maxdig) {
  size_t e, nx, n1;
  if ((e = contraction(m, i, true))) return e;
  uint8_t c0 = at(m, i, &nx);
  /* [^\r\n\p{L}\p{N}]?\p{L}+ */
  if (!(c0 & (C_NL | C_L | C_N))) {
    uint8_t c1 = at(m, nx, &n1);
    if (c1 & C_L) return run(m, nx, C_L);
  }
  if (c0 & C_L) return run(m, i, C_L);
  /* \p{N}{1,maxdig} */
  if (c0 & C_N) {
    size_t j = nx;
    for (int k = 1; k < maxdig; k++) {
      uint8_t c = at(m, j, &n1);
      if (c == C_END || !(c & C_N)) break;
      j = n1;
    }
    return j;
  }
  /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
  if (m->s[i] == ' ') {
    uint8_t c1 = at(m, nx, &n1);
    if (c1 != C_END && !(c1 & OTHER_BAD)) return nl_run(m, run_not(m, nx, OTHER_BAD), false);
  }
  if (!(c0 & OTHER_BAD)) return nl_run(m, run_not(m, i, OTHER_BAD), false);
  return spaces(m, i, true);
}

/* o200k's first two alternatives from i; 0 if neither matches. */
static size_t o200k_letters(m_t *m, size_t i) {
  size_t nx;
  uint8_t c0 = at(m, i, &nx);
  bool can_prefix = c0 != C_END && !(c0 & (C_NL | C_L | C_N));
  /* both alternatives need a letter or mark at i, or after a prefix at i; the code below looks
   * at no other character then (so the same ones decide partial matches) */
  if (c0 == C_END || !(c0 & (C_L | C_M))) {
    if (!can_prefix) return 0;
    size_t n1;
    uint8_t c1 = at(m, nx, &n1);
    if (c1 == C_END || !(c1 & (C_L | C_M))) return 0;
  }
  /* alternative 1: P? U* W+ C? */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0 && !can_prefix) continue;
    size_t st = pass == 0 ? nx : i;
    size_t u = run(m, st, C_U);
    size_t k = SIZE_MAX, e = 0;
    size_t n1;
    uint8_t cu = at(m, u, &n1);
    if (cu != C_END && (cu & C_W)) {
      k = u; /* W+ continues past the U run */
      e = run(m, u, C_W);
    } else {
      /* back off inside the U run to its last W character */
      size_t p = u;
      while (p > st) {
        size_t ps;
        tk_utf8_prev(m->s, p, &ps);
        size_t q;
        uint8_t c = cls(m->s, m->n, ps, &q);
        if (c & C_W) {
          k = ps;
          e = q;
          break;
        }
        p = ps;
      }
    }
    if (k != SIZE_MAX) {
      size_t ce = contraction(m, e, true);
      return ce ? ce : e;
    }
  }
  /* alternative 2: P? U+ W* C? */
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0 && !can_prefix) continue;
    size_t st = pass == 0 ? nx : i, n1;
    uint8_t c = at(m, st, &n1);
    if (c == C_END || !(c & C_U)) continue;
    size_t e = run(m, run(m, st, C_U), C_W);
    size_t ce = contraction(m, e, true);
    return ce ? ce : e;
  }
  return 0;
}

static size_t match_o200k(m_t *m, size_t i) {
  size_t e, nx, n1;
  if ((e = o200k_letters(m, i))) return e;
  uint8_t c0 = at(m, i, &nx);
  if (c0 & C_N) { /* \p{N}{1,3} */
    size_t j = nx;
    for (int k = 1; k < 3; k++) {
      uint8_t c = at(m, j, &n1);
      if (c == C_END || !(c & C_N)) break;
      j = n1;
    }
    return j;
  }
  if (m->s[i] == ' ') { /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
    uint8_t c1 = at(m, nx, &n1);
    if (c1 != C_END && !(c1 & OTHER_BAD)) return nl_run(m, run_not(m, nx, OTHER_BAD), true);
  }
  if (!(c0 & OTHER_BAD)) return nl_run(m, run_not(m, i, OTHER_BAD), true);
  return spaces(m, i, true);
}

/* o200k where every character the general matcher would look at is ASCII and inside the
 * subject: the same end, decided with the byte table; 0 when that does not hold, or when a
 * contraction may follow a word, which the general matcher then decides. Each case below looks
 * at exactly the characters match_o200k looks at, so a match found here would not have been
 * partial there. */
HOT size_t o200k_ascii(const uint8_t *s, size_t n, size_t i) {
#define ASC(k) ((k) < n && s[k] < 0x80) /* position k may be decided here */
  if (s[i] >= 0x80) return 0;
  uint8_t c0 = g_ascii[s[i]];
  size_t j = i;
  if (!(c0 & C_L)) {
    if (c0 & (C_NL | C_N)) goto not_letters; /* no prefix of a word */
    if (!ASC(i + 1)) return 0;
    if (!(g_ascii[s[i + 1]] & C_L)) goto not_letters;
    j = i + 1; /* the prefix, then a word */
  }
  { /* upper-case run, then lower-case run (ASCII has no letter in both classes) */
    while (ASC(j) && (g_ascii[s[j]] & C_LU)) j++;
    if (!ASC(j)) return 0;
    while (ASC(j) && (g_ascii[s[j]] & C_LL)) j++;
    if (!ASC(j) || s[j] == '\'') return 0;
    return j;
  }
not_letters:
  if (c0 & C_N) { /* \p{N}{1,3} */
    j = i + 1;
    for (int k = 1; k < 3; k++, j++) {
      if (!ASC(j)) return 0;
      if (!(g_ascii[s[j]] & C_N)) break;
    }
    return j;
  }
  j = i;
  if (s[i] == ' ') { /*  ?[^\s\p{L}\p{N}]+[\r\n/]* */
    if (!ASC(i + 1)) return 0;
    if (!(g_ascii[s[i + 1]] & OTHER_BAD)) j = i + 1;
  }
  if (!(g_ascii[s[j]] & OTHER_BAD)) {
    while (ASC(j) && !(g_ascii[s[j]] & OTHER_BAD)) j++;
    if (!ASC(j)) return 0;
    while (j < n && (s[j] == '\r' || s[j] == '\n' || s[j] == '/')) j++;
    return j < n ? j : 0;
  }
  /* whitespace: \s*[\r\n]+, else \s+(?!\S) backing off one character, else \s+ */
  size_t last_nl = SIZE_MAX;
  for (j = i; ASC(j) && (g_ascii[s[j]] & C_S); j++)
    if (g_ascii[s[j]] & C_NL) last_nl = j;
  if (!ASC(j)) return 0;
  if (last_nl != SIZE_MAX) return last_nl + 1;
  return j - 1 > i ? j - 1 : j;
#undef ASC
}

int tk_fast_find(int kind, const uint8_t *s, size_t len, size_t pos, bool partial, size_t *ms, size_t *me) {
  if (pos >= len) return TK_FIND_NONE;
  m_t m = {s, len, false};
  size_t e;
  switch (kind) {
  case TK_FAST_GPT2: e = match_gpt2(&m, pos); break;
  case TK_FAST_CL100K: e = match_cl100k(&m, pos, 3); break;
  case TK_FAST_QWEN2: e = match_cl100k(&m, pos, 1); break;
  default:
    if (!(e = o200k_ascii(s, len, pos))) e = match_o200k(&m, pos);
    break;
  }
  *ms = pos;
  if (partial && m.hit_end) return TK_FIND_PARTIAL;
  *me = e;
  return TK_FIND_MATCH;
}
