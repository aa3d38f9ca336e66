/* tokenizer_regex.c — HF's regexes (Oniguruma, Ruby syntax, Unicode 16) run on PCRE2.
 *
 * HF compiles every Split/Replace pattern with Oniguruma through the `onig` crate. PCRE2 agrees
 * with Oniguruma on the constructs tokenizers use (ordered alternation, greedy/lazy/possessive
 * repeats, lookaround, leftmost-first search) but not on what the classes contain: Oniguruma's
 * \s excludes U+180E, its \w and \h mean other things, and the system PCRE2 follows an older
 * Unicode, so \p{L} misses thousands of letters added since. The translator therefore computes
 * every character class as an exact set, in Oniguruma's terms (tables probed from HF, in
 * tokenizer_unidata.c), and emits a PCRE2 class built from PCRE2's own properties (fast: they
 * are table lookups) plus the code points to add, and a lookahead excluding the code points to
 * remove. What PCRE2 puts in each native property is measured once per process by matching it
 * against every assigned code point, so the result does not depend on the PCRE2 version.
 *
 * Other differences handled: '^'/'$' are line anchors in Ruby syntax (PCRE2_MULTILINE); '.'
 * excludes only \n (and (?m) is Ruby's dot-all); {,n} means {0,n}; {n,m}+ is a repeat of a
 * repeat, not possessive; \h is a hex digit; \v is VT; \b/\B use Oniguruma's \w. Oniguruma
 * folds case to several characters ((?i)ss matches "ß"), PCRE2 does not, so case-insensitive
 * regions may only hold ASCII literals that no multi-character fold produces. Constructs outside
 * what is reproduced exactly (\X, \K, \G, POSIX brackets, conditionals, subroutine calls, octal
 * escapes, extended mode) are LH_EUNSUPPORTED with the construct named.
 *
 * find_iter follows the onig crate: after an empty match at the end of the previous match, the
 * search moves on one character; matches never overlap.
 *
 * The four most common pre-tokenizer patterns (GPT-2, cl100k, Qwen2, o200k) are recognized by
 * their text and matched by hand-written code (tokenizer_fastsplit.c) instead; the PCRE2
 * program is still compiled, and the tests check that both agree.
 *
 * Invariant: a tk_regex is immutable after tk_regex_compile; matching uses caller-owned match
 * data, so any number of threads can match with one tk_regex.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_int.h"

extern const uint32_t tk_ud_gc[][2];
extern const size_t tk_ud_gc_n;
extern const uint32_t tk_ud_onig_space[][2], tk_ud_onig_word[][2], tk_ud_onig_word_in_class[][2],
    tk_ud_onig_digit[][2];
extern const size_t tk_ud_onig_space_n, tk_ud_onig_word_n, tk_ud_onig_word_in_class_n, tk_ud_onig_digit_n;
extern const char *const tk_ud_script_names[];
extern const size_t tk_ud_nscripts;
extern const uint32_t (*const tk_ud_scripts[])[2];
extern const size_t *const tk_ud_scripts_n[];

static const char *const gc_names[] = {"Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl",
                                       "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc",
                                       "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Co", "Cs", "Cn"};
#define GC_CO 27
#define GC_CS 28
#define GC_CN 29

/* ------------------------------------------------------------------------ range sets */

typedef struct rset {
  uint32_t (*r)[2];
  size_t n, cap;
  bool oom;
} rset;

static void rs_free(rset *s) {
  free(s->r);
  memset(s, 0, sizeof *s);
}

static void rs_add(rset *s, uint32_t a, uint32_t b) {
  if (a > b) return;
  if (s->n && s->r[s->n - 1][1] + 1 >= a && s->r[s->n - 1][0] <= a) { /* common: appending in order */
    if (b > s->r[s->n - 1][1]) s->r[s->n - 1][1] = b;
    return;
  }
  if (s->n == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    void *p = realloc(s->r, nc * sizeof *s->r);
    if (!p) {
      s->oom = true;
      return;
    }
    s->r = p;
    s->cap = nc;
  }
  s->r[s->n][0] = a;
  s->r[s->n][1] = b;
  s->n++;
}

static int rcmp(const void *x, const void *y) {
  const uint32_t *a = x, *b = y;
  return a[0] < b[0] ? -1 : a[0] > b[0];
}

static void rs_norm(rset *s) {
  if (s->n < 2) return;
  qsort(s->r, s->n, sizeof *s->r, rcmp);
  size_t k = 0;
  for (size_t i = 1; i < s->n; i++) {
    if (s->r[i][0] <= s->r[k][1] + 1) {
      if (s->r[i][1] > s->r[k][1]) s->r[k][1] = s->r[i][1];
    } else {
      s->r[++k][0] = s->r[i][0];
      s->r[k][1] = s->r[i][1];
    }
  }
  s->n = k + 1;
}

static void rs_add_set(rset *d, const rset *s) {
  for (size_t i = 0; i < s->n; i++) rs_add(d, s->r[i][0], s->r[i][1]);
}

static void rs_compl(const rset *s, rset *out) { /* s normalized */
  uint32_t next = 0;
  for (size_t i = 0; i < s->n; i++) {
    if (s->r[i][0] > next) rs_add(out, next, s->r[i][0] - 1);
    next = s->r[i][1] + 1;
  }
  if (next <= 0x10FFFF) rs_add(out, next, 0x10FFFF);
}

static void rs_inter(const rset *a, const rset *b, rset *out) { /* both normalized */
  size_t i = 0, j = 0;
  while (i < a->n && j < b->n) {
    uint32_t lo = a->r[i][0] > b->r[j][0] ? a->r[i][0] : b->r[j][0];
    uint32_t hi = a->r[i][1] < b->r[j][1] ? a->r[i][1] : b->r[j][1];
    if (lo <= hi) rs_add(out, lo, hi);
    if (a->r[i][1] < b->r[j][1])
      i++;
    else
      j++;
  }
}

static void rs_diff(const rset *a, const rset *b, rset *out) { /* a - b, both normalized */
  rset c = {0};
  rs_compl(b, &c);
  rs_inter(a, &c, out);
  if (c.oom) out->oom = true;
  rs_free(&c);
}

static void rs_from_table(rset *s, const uint32_t (*t)[2], size_t n) {
  for (size_t i = 0; i < n; i++) rs_add(s, t[i][0], t[i][1]);
}

static void rs_from_gc(rset *s, uint32_t mask) {
  for (size_t i = 0; i < tk_ud_gc_n; i++) {
    if (!(mask >> tk_ud_gc[i][1] & 1)) continue;
    uint32_t end = i + 1 < tk_ud_gc_n ? tk_ud_gc[i + 1][0] - 1 : 0x10FFFF;
    rs_add(s, tk_ud_gc[i][0], end);
  }
}

/* ---------------------------------------------------- what PCRE2's native classes contain */

/* Every code point Oniguruma assigns, except private use and surrogates: where PCRE2 and
 * Oniguruma can disagree. Elsewhere both see unassigned (or private-use) code points. */
static struct {
  pthread_mutex_t mu;
  uint8_t *subj;
  size_t len;
  rset domain;
  struct probe {
    char *text;
    rset set;
  } *probes;
  size_t nprobes;
} g_probe = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, {0}, NULL, 0};

static lh_status probe_subject(void) {
  if (g_probe.subj) return LH_OK;
  rset d = {0};
  rs_from_gc(&d, ~((1u << GC_CO) | (1u << GC_CS) | (1u << GC_CN)));
  rs_norm(&d);
  size_t total = 0;
  for (size_t i = 0; i < d.n; i++) total += (d.r[i][1] - d.r[i][0] + 1) * 4;
  uint8_t *s = malloc(total + 1);
  if (!s || d.oom) {
    free(s);
    rs_free(&d);
    return LH_ENOMEM;
  }
  size_t k = 0;
  for (size_t i = 0; i < d.n; i++)
    for (uint32_t c = d.r[i][0]; c <= d.r[i][1]; c++) k += (size_t)tk_utf8_put(c, (char *)s + k);
  g_probe.subj = s;
  g_probe.len = k;
  g_probe.domain = d;
  return LH_OK;
}

/* The exact set PCRE2 matches with class body `item` (e.g. "\\p{L}"), within the domain. */
static lh_status pcre_set(const char *item, rset *out) {
  pthread_mutex_lock(&g_probe.mu);
  lh_status st = probe_subject();
  for (size_t i = 0; !st && i < g_probe.nprobes; i++) {
    if (!strcmp(g_probe.probes[i].text, item)) {
      rs_add_set(out, &g_probe.probes[i].set);
      pthread_mutex_unlock(&g_probe.mu);
      return out->oom ? LH_ENOMEM : LH_OK;
    }
  }
  rset s = {0};
  if (!st) {
    char pat[256];
    snprintf(pat, sizeof pat, "[%s]+", item);
    int e;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e, &eo, NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create(1, NULL) : NULL;
    if (!re || !md) {
      st = re ? LH_ENOMEM : LH_EINVAL;
    } else {
      pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
      size_t pos = 0;
      while (pos < g_probe.len) {
        int rc = pcre2_match(re, g_probe.subj, g_probe.len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t i = ov[0];
        while (i < ov[1]) {
          uint32_t c = tk_utf8_next(g_probe.subj, &i);
          rs_add(&s, c, c);
        }
        pos = ov[1] > ov[0] ? ov[1] : ov[1] + 1;
      }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
  }
  if (!st && s.oom) st = LH_ENOMEM;
  if (!st) {
    void *p = realloc(g_probe.probes, (g_probe.nprobes + 1) * sizeof *g_probe.probes);
    char *t = strdup(item);
    if (!p || !t) {
      free(t);
      if (p) g_probe.probes = p;
      st = LH_ENOMEM;
    } else {
      g_probe.probes = p;
      g_probe.probes[g_probe.nprobes].text = t;
      g_probe.probes[g_probe.nprobes].set = s;
      g_probe.nprobes++;
      rs_add_set(out, &s);
      s = (rset){0};
    }
  }
  rs_free(&s);
  pthread_mutex_unlock(&g_probe.mu);
  return st;
}

/* ------------------------------------------------------------------------- the translator */

typedef struct item {
  char text[48]; /* PCRE2 class body text (native); empty for exact-only items */
  rset onig;     /* what Oniguruma matches */
  bool exact;    /* text matches exactly `onig` in PCRE2 (literals, ranges) */
} item;

typedef struct tr {
  const uint8_t *p;
  size_t n, i;
  lh_buf out;
  const char *where;
  lh_error *err;
  lh_status st;
  bool ci, dotall;
  struct {
    bool ci, dotall;
    size_t out_pos; /* where the group's '(' was emitted */
  } stack[128];
  int depth;
  size_t atom_start;  /* output offset where the last atom began */
  bool have_atom;
  uint32_t prev_lit;  /* previous literal in a case-insensitive run, 0 if none */
  bool after_ci_group;
  uint32_t lookbehind;
  bool native;  /* emit PCRE2's own classes without corrections (exact away from `delta`) */
  rset delta;   /* code points where some class's PCRE2 and Oniguruma sets differ */
} tr;

static lh_status unsup(tr *t, const char *what) {
  if (!t->st)
    t->st = lh_error_set(t->err, LH_EUNSUPPORTED, "%s: regex construct %s is not supported (pattern offset %zu)",
                         t->where, what, t->i);
  return t->st;
}

static lh_status bad(tr *t, const char *what) {
  if (!t->st) t->st = lh_error_set(t->err, LH_EFORMAT, "%s: invalid regex: %s at offset %zu", t->where, what, t->i);
  return t->st;
}

static void emit(tr *t, const char *s) {
  if (lh_buf_append_str(&t->out, s)) t->st = LH_ENOMEM;
}

static void emitf(tr *t, const char *fmt, unsigned v) {
  char b[32];
  snprintf(b, sizeof b, fmt, v);
  emit(t, b);
}

static uint32_t next_char(tr *t) {
  if (t->i >= t->n) return 0;
  size_t l = tk_utf8_len(t->p[t->i]);
  if (t->i + l > t->n) {
    bad(t, "truncated UTF-8");
    t->i = t->n;
    return 0;
  }
  return tk_utf8_next(t->p, &t->i);
}

static int hexv(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* \x.. \u.... (after the letter); returns the code point or -1. */
static long parse_hex_escape(tr *t, uint8_t kind) {
  long v = 0;
  if (kind == 'x' && t->i < t->n && t->p[t->i] == '{') {
    t->i++;
    int k = 0;
    while (t->i < t->n && hexv(t->p[t->i]) >= 0 && k < 8) v = v * 16 + hexv(t->p[t->i++]), k++;
    if (t->i >= t->n || t->p[t->i] != '}' || !k) return -1;
    t->i++;
  } else {
    int maxd = kind == 'x' ? 2 : 4, k = 0;
    while (k < maxd && t->i < t->n && hexv(t->p[t->i]) >= 0) v = v * 16 + hexv(t->p[t->i++]), k++;
    if (!k || (kind == 'u' && k != 4)) return -1;
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return -1;
  return v;
}

static bool name_eq(const char *a, const char *b) { /* Oniguruma ignores case, spaces, '_' and '-' */
  for (;;) {
    while (*a == ' ' || *a == '_' || *a == '-') a++;
    while (*b == ' ' || *b == '_' || *b == '-') b++;
    char x = *a >= 'A' && *a <= 'Z' ? (char)(*a + 32) : *a;
    char y = *b >= 'A' && *b <= 'Z' ? (char)(*b + 32) : *b;
    if (x != y) return false;
    if (!x) return true;
    a++, b++;
  }
}

/* A property name inside \p{...}: fills the item (Oniguruma set + native PCRE2 text). */
static lh_status property_item(tr *t, const char *name, item *it) {
  static const struct {
    const char *name;
    const char *gcs; /* space-separated */
  } majors[] = {{"L", "Lu Ll Lt Lm Lo"}, {"Letter", "Lu Ll Lt Lm Lo"}, {"M", "Mn Mc Me"}, {"Mark", "Mn Mc Me"},
                {"N", "Nd Nl No"}, {"Number", "Nd Nl No"}, {"P", "Pc Pd Ps Pe Pi Pf Po"},
                {"Punctuation", "Pc Pd Ps Pe Pi Pf Po"}, {"S", "Sm Sc Sk So"}, {"Symbol", "Sm Sc Sk So"},
                {"Z", "Zs Zl Zp"}, {"Separator", "Zs Zl Zp"}, {"C", "Cc Cf Co Cs Cn"}, {"Other", "Cc Cf Co Cs Cn"},
                {"LC", "Lu Ll Lt"}, {"Cased_Letter", "Lu Ll Lt"}, {"Uppercase_Letter", "Lu"},
                {"Lowercase_Letter", "Ll"}, {"Titlecase_Letter", "Lt"}, {"Modifier_Letter", "Lm"},
                {"Other_Letter", "Lo"}, {"Nonspacing_Mark", "Mn"}, {"Spacing_Mark", "Mc"},
                {"Enclosing_Mark", "Me"}, {"Decimal_Number", "Nd"}, {"Letter_Number", "Nl"},
                {"Other_Number", "No"}, {"Connector_Punctuation", "Pc"}, {"Dash_Punctuation", "Pd"},
                {"Open_Punctuation", "Ps"}, {"Close_Punctuation", "Pe"}, {"Initial_Punctuation", "Pi"},
                {"Final_Punctuation", "Pf"}, {"Other_Punctuation", "Po"}, {"Math_Symbol", "Sm"},
                {"Currency_Symbol", "Sc"}, {"Modifier_Symbol", "Sk"}, {"Other_Symbol", "So"},
                {"Space_Separator", "Zs"}, {"Line_Separator", "Zl"}, {"Paragraph_Separator", "Zp"},
                {"Control", "Cc"}, {"Format", "Cf"}, {"Private_Use", "Co"}, {"Surrogate", "Cs"},
                {"Unassigned", "Cn"}};
  for (size_t k = 0; k < sizeof majors / sizeof *majors; k++) {
    if (!name_eq(name, majors[k].name)) continue;
    uint32_t mask = 0;
    char gcs[64];
    snprintf(gcs, sizeof gcs, "%s", majors[k].gcs);
    for (char *tok = strtok(gcs, " "); tok; tok = strtok(NULL, " "))
      for (int g = 0; g < 30; g++)
        if (!strcmp(tok, gc_names[g])) mask |= 1u << g;
    rs_from_gc(&it->onig, mask);
    /* the native text: the single short name PCRE2 knows */
    const char *gc_short = majors[k].gcs;
    if (strchr(gc_short, ' ')) {
      static const char *const majshort[][2] = {{"Lu Ll Lt Lm Lo", "L"}, {"Mn Mc Me", "M"}, {"Nd Nl No", "N"},
                                                {"Pc Pd Ps Pe Pi Pf Po", "P"}, {"Sm Sc Sk So", "S"},
                                                {"Zs Zl Zp", "Z"}, {"Cc Cf Co Cs Cn", "C"}, {"Lu Ll Lt", "L&"}};
      for (size_t q = 0; q < sizeof majshort / sizeof *majshort; q++)
        if (!strcmp(majshort[q][0], gc_short)) snprintf(it->text, sizeof it->text, "\\p{%s}", majshort[q][1]);
    } else {
      snprintf(it->text, sizeof it->text, "\\p{%s}", gc_short);
    }
    return LH_OK;
  }
  for (int g = 0; g < 30; g++) {
    if (!name_eq(name, gc_names[g])) continue;
    rs_from_gc(&it->onig, 1u << g);
    snprintf(it->text, sizeof it->text, "\\p{%s}", gc_names[g]);
    return LH_OK;
  }
  if (name_eq(name, "Any")) {
    rs_add(&it->onig, 0, 0x10FFFF);
    it->exact = true;
    return LH_OK;
  }
  for (size_t k = 0; k < tk_ud_nscripts; k++) {
    if (!name_eq(name, tk_ud_script_names[k])) continue;
    rs_from_table(&it->onig, tk_ud_scripts[k], *tk_ud_scripts_n[k]);
    snprintf(it->text, sizeof it->text, "\\p{sc:%s}", tk_ud_script_names[k]);
    return LH_OK;
  }
  char what[96];
  snprintf(what, sizeof what, "\\p{%s}", name);
  return unsup(t, what);
}

static void item_lit(item *it, uint32_t a, uint32_t b) {
  rs_add(&it->onig, a, b);
  it->exact = true;
}

/* Class-like escapes: \s \S \d \D \w \W \h \H \p{..} \P{..}. After the backslash; returns
 * true when it consumed one (negated set in *neg). */
static bool class_escape(tr *t, item *it, bool *neg, bool in_class) {
  uint8_t c = t->p[t->i];
  *neg = false;
  switch (c) {
  case 's':
  case 'S':
    rs_from_table(&it->onig, tk_ud_onig_space, tk_ud_onig_space_n);
    it->exact = true;
    *neg = c == 'S';
    t->i++;
    return true;
  case 'd':
  case 'D':
    rs_from_table(&it->onig, tk_ud_onig_digit, tk_ud_onig_digit_n);
    snprintf(it->text, sizeof it->text, "\\p{Nd}");
    *neg = c == 'D';
    t->i++;
    return true;
  case 'w':
  case 'W':
    /* Oniguruma's \w differs inside brackets (Latin-1 superscripts and fractions) */
    if (in_class)
      rs_from_table(&it->onig, tk_ud_onig_word_in_class, tk_ud_onig_word_in_class_n);
    else
      rs_from_table(&it->onig, tk_ud_onig_word, tk_ud_onig_word_n);
    snprintf(it->text, sizeof it->text, "\\p{L}\\p{M}\\p{N}\\p{Pc}");
    *neg = c == 'W';
    t->i++;
    return true;
  case 'h':
  case 'H':
    rs_add(&it->onig, '0', '9');
    rs_add(&it->onig, 'A', 'F');
    rs_add(&it->onig, 'a', 'f');
    it->exact = true;
    *neg = c == 'H';
    t->i++;
    return true;
  case 'p':
  case 'P': {
    t->i++;
    if (t->i >= t->n || t->p[t->i] != '{') {
      unsup(t, "\\p without braces");
      return true;
    }
    t->i++;
    bool caret = t->i < t->n && t->p[t->i] == '^';
    if (caret) t->i++;
    size_t s = t->i;
    while (t->i < t->n && t->p[t->i] != '}') t->i++;
    if (t->i >= t->n || t->i - s >= 64) {
      bad(t, "unterminated \\p{");
      return true;
    }
    char name[64];
    memcpy(name, t->p + s, t->i - s);
    name[t->i - s] = 0;
    t->i++;
    property_item(t, name, it);
    *neg = (c == 'P') != caret;
    return true;
  }
  default:
    return false;
  }
}

/* A single-character escape (after the backslash) that stands for one literal code point;
 * -1 if the escape is not one. */
static long literal_escape(tr *t, bool in_class) {
  uint8_t c = t->p[t->i];
  switch (c) {
  case 't': t->i++; return '\t';
  case 'n': t->i++; return '\n';
  case 'r': t->i++; return '\r';
  case 'f': t->i++; return '\f';
  case 'v': t->i++; return 0x0B;
  case 'a': t->i++; return 0x07;
  case 'e': t->i++; return 0x1B;
  case 'b':
    if (!in_class) return -1;
    t->i++;
    return 0x08;
  case 'x':
  case 'u': {
    t->i++;
    long v = parse_hex_escape(t, c);
    if (v < 0) bad(t, "bad hex escape");
    return v < 0 ? 0 : v;
  }
  default:
    if (c >= 0x80) return next_char(t);
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) {
      t->i++;
      return c;
    }
    return -1;
  }
}

static void emit_range(tr *t, uint32_t a, uint32_t b) {
  emitf(t, "\\x{%X}", a);
  if (b > a) {
    emit(t, "-");
    emitf(t, "\\x{%X}", b);
  }
}

static void emit_set_body(tr *t, const rset *s) {
  for (size_t i = 0; i < s->n; i++) emit_range(t, s->r[i][0], s->r[i][1]);
}

/* Emit one character-matching atom whose Oniguruma set is the union of items (negated when
 * neg), using the items' native PCRE2 text plus exact corrections. */
static void emit_class(tr *t, item *items, size_t nitems, bool neg) {
  rset onig = {0}, pcre = {0}, add = {0}, rem = {0}, tmp = {0};
  for (size_t k = 0; k < nitems; k++) {
    rs_add_set(&onig, &items[k].onig);
    rs_norm(&items[k].onig);
    if (items[k].exact || !items[k].text[0]) {
      rs_add_set(&pcre, &items[k].onig);
    } else {
      /* within the probed domain PCRE2's own set; outside it both sides agree */
      rset in = {0}, out = {0};
      if (pcre_set(items[k].text, &in)) t->st = LH_ENOMEM;
      rs_norm(&in);
      rset dom = g_probe.domain;
      rs_diff(&items[k].onig, &dom, &out);
      rs_inter(&in, &dom, &tmp);
      rs_add_set(&pcre, &tmp);
      rs_add_set(&pcre, &out);
      tmp.n = 0;
      rs_free(&in);
      rs_free(&out);
    }
  }
  rs_norm(&onig);
  rs_norm(&pcre);
  rs_diff(&onig, &pcre, &add);
  rs_diff(&pcre, &onig, &rem);
  if (onig.oom || pcre.oom || add.oom || rem.oom) t->st = LH_ENOMEM;
  rs_add_set(&t->delta, &add);
  rs_add_set(&t->delta, &rem);
  if (t->native) { /* the native program: PCRE2's sets as they are */
    add.n = rem.n = 0;
  }
  /* the union U' = natives + add - rem; neg: complement(U') = [^natives add] | [rem] */
  if (!neg && rem.n) {
    emit(t, "(?:(?![");
    emit_set_body(t, &rem);
    emit(t, "])");
  } else if (neg && rem.n) {
    emit(t, "(?:[");
    emit_set_body(t, &rem);
    emit(t, "]|");
  }
  bool union_empty = !add.n;
  for (size_t k = 0; k < nitems; k++) union_empty &= !(items[k].onig.n || (!items[k].exact && items[k].text[0]));
  if (union_empty) {
    emit(t, neg ? "[\\x{0}-\\x{10FFFF}]" : "(?!)");
  } else {
    emit(t, neg ? "[^" : "[");
    /* the members below U+0100 first, explicitly: PCRE2 keeps them in a bitmap that is tested
     * before any property, so ASCII text never reaches the property lookups */
    rset low = {0}, lowr = {0};
    rs_add(&low, 0, 0xFF);
    rs_inter(&onig, &low, &lowr);
    if (!neg || !rem.n) emit_set_body(t, &lowr);
    rs_free(&low);
    rs_free(&lowr);
    for (size_t k = 0; k < nitems; k++) {
      if (!items[k].exact && items[k].text[0])
        emit(t, items[k].text);
      else
        emit_set_body(t, &items[k].onig);
    }
    emit_set_body(t, &add);
    emit(t, "]");
  }
  if (rem.n) emit(t, ")");
  rs_free(&onig);
  rs_free(&pcre);
  rs_free(&add);
  rs_free(&rem);
  rs_free(&tmp);
}

/* An atom for an exact set (intersections, nested negations): plain explicit ranges. */
static void emit_exact(tr *t, rset *s) {
  rs_norm(s);
  if (!s->n) {
    emit(t, "(?!)");
    return;
  }
  rset c = {0};
  rs_compl(s, &c);
  if (c.n < s->n) {
    emit(t, "[^");
    emit_set_body(t, &c);
  } else {
    emit(t, "[");
    emit_set_body(t, s);
  }
  emit(t, "]");
  rs_free(&c);
}

static void items_free(item *items, size_t n) {
  for (size_t k = 0; k < n; k++) rs_free(&items[k].onig);
}

/* Parse a bracket class body after '['; computes the exact Oniguruma set into *exact and, when
 * the class is a plain union (no intersection, no nested negation), the items for emit_class. */
static void parse_class(tr *t, rset *exact, item **items_out, size_t *nitems_out, bool *simple, bool *neg_out) {
  bool neg = false;
  if (t->i < t->n && t->p[t->i] == '^') {
    neg = true;
    t->i++;
  }
  item *items = NULL;
  size_t nitems = 0, cap = 0;
  rset acc = {0};        /* exact union of the current operand */
  rset inter = {0};      /* running intersection of operands (for &&) */
  bool have_inter = false;
  bool first = true;
  *simple = true;
#define NEW_ITEM()                                                                  \
  do {                                                                              \
    if (nitems == cap) {                                                            \
      cap = cap ? cap * 2 : 8;                                                      \
      void *np = realloc(items, cap * sizeof *items);                               \
      if (!np) {                                                                    \
        t->st = LH_ENOMEM;                                                          \
        goto done;                                                                  \
      }                                                                             \
      items = np;                                                                   \
    }                                                                               \
    memset(&items[nitems], 0, sizeof items[nitems]);                                \
    nitems++;                                                                       \
  } while (0)
  while (!t->st) {
    if (t->i >= t->n) {
      bad(t, "unterminated character class");
      break;
    }
    uint8_t c = t->p[t->i];
    if (c == ']' && !first) {
      t->i++;
      break;
    }
    first = false;
    if (c == '&' && t->i + 1 < t->n && t->p[t->i + 1] == '&') {
      t->i += 2;
      rs_norm(&acc);
      if (!have_inter) {
        inter = acc;
        have_inter = true;
      } else {
        rset x = {0};
        rs_inter(&inter, &acc, &x);
        rs_free(&inter);
        rs_free(&acc);
        inter = x;
      }
      acc = (rset){0};
      *simple = false;
      continue;
    }
    if (c == '[') {
      if (t->i + 1 < t->n && t->p[t->i + 1] == ':') {
        unsup(t, "POSIX bracket [:name:]");
        break;
      }
      t->i++;
      rset sub = {0};
      item *si = NULL;
      size_t sn = 0;
      bool ss, sneg;
      parse_class(t, &sub, &si, &sn, &ss, &sneg);
      if (ss && !sneg) { /* a plain nested union: its items join ours */
        for (size_t k = 0; k < sn; k++) {
          NEW_ITEM();
          items[nitems - 1] = si[k];
        }
        free(si);
      } else {
        items_free(si, sn);
        free(si);
        *simple = false;
      }
      rs_add_set(&acc, &sub);
      rs_free(&sub);
      continue;
    }
    long lo;
    if (c == '\\') {
      t->i++;
      if (t->i >= t->n) {
        bad(t, "trailing backslash");
        break;
      }
      item tmp = {0};
      bool eneg;
      if (class_escape(t, &tmp, &eneg, true)) {
        rs_norm(&tmp.onig);
        if (eneg) {
          rset cpl = {0};
          rs_compl(&tmp.onig, &cpl);
          rs_add_set(&acc, &cpl);
          /* a negated item inside a union: natively \S \D \W \P{..}; exact when it has no native */
          NEW_ITEM();
          items[nitems - 1].onig = cpl;
          if (tmp.exact || !tmp.text[0]) {
            items[nitems - 1].exact = true;
          } else if (!strncmp(tmp.text, "\\p{", 3) && !strchr(tmp.text + 1, '\\')) {
            items[nitems - 1].text[0] = '\\';
            items[nitems - 1].text[1] = 'P';
            memcpy(items[nitems - 1].text + 2, tmp.text + 2, strlen(tmp.text + 2) + 1);
          } else {
            items[nitems - 1].exact = true; /* e.g. \W: no single native, use ranges */
          }
          rs_free(&tmp.onig);
        } else {
          rs_add_set(&acc, &tmp.onig);
          NEW_ITEM();
          items[nitems - 1] = tmp;
        }
        continue;
      }
      lo = literal_escape(t, true);
      if (lo < 0) {
        char what[8] = {'\\', (char)t->p[t->i], 0};
        unsup(t, what);
        break;
      }
    } else {
      lo = next_char(t);
    }
    /* a range? */
    long hi = lo;
    if (t->i + 1 < t->n && t->p[t->i] == '-' && t->p[t->i + 1] != ']') {
      size_t save = t->i;
      t->i++;
      if (t->p[t->i] == '\\') {
        t->i++;
        hi = t->i < t->n ? literal_escape(t, true) : -1;
        if (hi < 0) {
          t->i = save;
          hi = lo;
        }
      } else if (t->p[t->i] == '[') {
        t->i = save;
      } else {
        hi = next_char(t);
      }
      if (hi < lo) {
        bad(t, "empty range in character class");
        break;
      }
    }
    if (t->ci) {
      /* ASCII letters: the class is emitted inside (?i:...), where PCRE2 folds them as Oniguruma
       * does: both cases, plus U+017F (long s) for s and U+212A (Kelvin sign) for k — checked
       * against HF ("it'\u017f" splits after "'\u017f" with (?i:[sdmt])). The exact set gets the
       * same members so boundaries and complements agree. */
      if (hi >= 0x80) unsup(t, "non-ASCII characters in a case-insensitive character class");
      for (long x = lo; x <= hi && x < 0x80; x++) {
        long l = x | 32;
        if (l < 'a' || l > 'z') continue;
        rs_add(&acc, (uint32_t)(x ^ 32), (uint32_t)(x ^ 32));
        if (l == 's') rs_add(&acc, 0x17F, 0x17F);
        if (l == 'k') rs_add(&acc, 0x212A, 0x212A);
      }
    }
    rs_add(&acc, (uint32_t)lo, (uint32_t)hi);
    NEW_ITEM();
    item_lit(&items[nitems - 1], (uint32_t)lo, (uint32_t)hi);
  }
done:
  rs_norm(&acc);
  if (have_inter) {
    rset x = {0};
    rs_inter(&inter, &acc, &x);
    rs_free(&inter);
    rs_free(&acc);
    acc = x;
  }
  if (neg) {
    rset c = {0};
    rs_compl(&acc, &c);
    rs_free(&acc);
    acc = c;
  }
  *exact = acc;
  *items_out = items;
  *nitems_out = nitems;
  *neg_out = neg;
#undef NEW_ITEM
}

static void emit_literal(tr *t, uint32_t c) {
  if (t->ci) {
    bool letter = (c | 32) >= 'a' && (c | 32) <= 'z';
    if (c >= 0x80) {
      rset l = {0};
      rs_from_gc(&l, 0x1F); /* L */
      rs_norm(&l);
      for (size_t k = 0; k < l.n; k++)
        if (c >= l.r[k][0] && c <= l.r[k][1]) unsup(t, "non-ASCII letters in a case-insensitive region");
      rs_free(&l);
    }
    uint32_t a = t->prev_lit | 32, b = c | 32;
    if (letter && t->prev_lit &&
        ((a == 's' && (b == 's' || b == 't')) || (a == 'f' && (b == 'f' || b == 'i' || b == 'l'))))
      unsup(t, "a case-insensitive sequence that a multi-character case fold matches (ss, st, ff, fi, fl)");
    t->prev_lit = letter ? c : 0;
  } else if (t->after_ci_group) {
    uint32_t b = c | 32;
    if (b == 's' || b == 't' || b == 'f' || b == 'i' || b == 'l')
      unsup(t, "a letter right after a case-insensitive group (multi-character case folds)");
  }
  t->after_ci_group = false;
  t->atom_start = t->out.len;
  t->have_atom = true;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    char b[2] = {(char)c, 0};
    emit(t, b);
  } else {
    emitf(t, "\\x{%X}", c);
  }
}

static void begin_atom(tr *t) {
  t->atom_start = t->out.len;
  t->have_atom = true;
  t->prev_lit = 0;
  t->after_ci_group = false;
}

static void emit_word_class(tr *t, bool neg) {
  item it = {0};
  rs_from_table(&it.onig, tk_ud_onig_word, tk_ud_onig_word_n);
  snprintf(it.text, sizeof it.text, "\\p{L}\\p{M}\\p{N}\\p{Pc}");
  emit_class(t, &it, 1, neg);
  rs_free(&it.onig);
}

static void translate(tr *t) {
  while (t->i < t->n && !t->st) {
    uint8_t c = t->p[t->i];
    switch (c) {
    case '\\': {
      t->i++;
      if (t->i >= t->n) {
        bad(t, "trailing backslash");
        return;
      }
      uint8_t e = t->p[t->i];
      item it = {0};
      bool neg;
      if (class_escape(t, &it, &neg, false)) {
        if (t->ci && e != 's' && e != 'S' && e != 'd' && e != 'D' && e != 'h' && e != 'H')
          unsup(t, "character classes in a case-insensitive region");
        begin_atom(t);
        emit_class(t, &it, 1, neg);
        rs_free(&it.onig);
        break;
      }
      switch (e) {
      case 'A':
      case 'z':
      case 'Z':
        t->i++;
        emit(t, e == 'A' ? "\\A" : e == 'z' ? "\\z" : "\\Z");
        t->have_atom = false;
        continue;
      case 'b':
      case 'B': {
        t->i++;
        /* Oniguruma's word boundary, with its \w */
        emit(t, e == 'b' ? "(?:(?<=" : "(?:(?<=");
        emit_word_class(t, false);
        emit(t, e == 'b' ? ")(?!" : ")(?=");
        emit_word_class(t, false);
        emit(t, e == 'b' ? ")|(?<!" : ")|(?<!");
        emit_word_class(t, false);
        emit(t, e == 'b' ? ")(?=" : ")(?!");
        emit_word_class(t, false);
        emit(t, "))");
        if (t->lookbehind < 1) t->lookbehind = 1;
        t->have_atom = false;
        continue;
      }
      case 'R':
        t->i++;
        begin_atom(t);
        emit(t, "(?>\\x{D}\\x{A}|[\\x{A}-\\x{D}\\x{85}\\x{2028}\\x{2029}])");
        continue;
      case 'N':
        t->i++;
        begin_atom(t);
        emit(t, "[^\\x{A}]");
        continue;
      case 'k':
        /* named backreference \k<name>: same in PCRE2 */
        begin_atom(t);
        emit(t, "\\k");
        t->i++;
        while (t->i < t->n && t->p[t->i] != '>' && t->p[t->i] != '\'') {
          char b[2] = {(char)t->p[t->i++], 0};
          emit(t, b);
        }
        if (t->i < t->n) {
          char b[2] = {(char)t->p[t->i++], 0};
          emit(t, b);
        }
        continue;
      default:
        break;
      }
      if (e >= '1' && e <= '9') {
        begin_atom(t);
        emit(t, "\\");
        while (t->i < t->n && t->p[t->i] >= '0' && t->p[t->i] <= '9') {
          char b[2] = {(char)t->p[t->i++], 0};
          emit(t, b);
        }
        emit(t, "(?:)");
        break;
      }
      long v = literal_escape(t, false);
      if (v < 0) {
        char what[16];
        snprintf(what, sizeof what, "\\%c", e);
        unsup(t, what);
        return;
      }
      emit_literal(t, (uint32_t)v);
      break;
    }
    case '[': {
      t->i++;
      if (t->ci) {
        /* checked inside parse_class for letters */
      }
      rset ex = {0};
      item *items = NULL;
      size_t nitems = 0;
      bool simple, neg;
      parse_class(t, &ex, &items, &nitems, &simple, &neg);
      begin_atom(t);
      if (simple)
        emit_class(t, items, nitems, neg);
      else
        emit_exact(t, &ex);
      items_free(items, nitems);
      free(items);
      rs_free(&ex);
      break;
    }
    case '.':
      t->i++;
      begin_atom(t);
      emit(t, t->dotall ? "[\\x{0}-\\x{10FFFF}]" : "[^\\x{A}]");
      break;
    case '(': {
      t->i++;
      if (t->depth >= 127) {
        unsup(t, "groups nested deeper than 127");
        return;
      }
      t->stack[t->depth].ci = t->ci;
      t->stack[t->depth].dotall = t->dotall;
      t->stack[t->depth].out_pos = t->out.len;
      t->prev_lit = 0;
      t->after_ci_group = false;
      if (t->i < t->n && t->p[t->i] == '?') {
        t->i++;
        uint8_t k = t->i < t->n ? t->p[t->i] : 0;
        if (k == ':' || k == '=' || k == '!' || k == '>') {
          t->i++;
          emit(t, k == ':' ? "(?:" : k == '=' ? "(?=" : k == '!' ? "(?!" : "(?>");
          t->depth++;
        } else if (k == '<' && t->i + 1 < t->n && (t->p[t->i + 1] == '=' || t->p[t->i + 1] == '!')) {
          emit(t, t->p[t->i + 1] == '=' ? "(?<=" : "(?<!");
          t->i += 2;
          t->depth++;
        } else if (k == '<' || k == '\'') {
          uint8_t close = k == '<' ? '>' : '\'';
          t->i++;
          emit(t, "(?<");
          while (t->i < t->n && t->p[t->i] != close) {
            char b[2] = {(char)t->p[t->i++], 0};
            emit(t, b);
          }
          if (t->i >= t->n) {
            bad(t, "unterminated group name");
            return;
          }
          t->i++;
          emit(t, ">");
          t->depth++;
        } else if (k == '#') {
          while (t->i < t->n && t->p[t->i] != ')') t->i++;
          if (t->i >= t->n) {
            bad(t, "unterminated comment");
            return;
          }
          t->i++;
          continue;
        } else {
          /* option letters: (?imx-imx) or (?imx-imx:...) */
          bool on = true, ci = t->ci, dotall = t->dotall;
          while (t->i < t->n && t->p[t->i] != ')' && t->p[t->i] != ':') {
            uint8_t o = t->p[t->i++];
            if (o == '-')
              on = false;
            else if (o == 'i')
              ci = on;
            else if (o == 'm')
              dotall = on;
            else if (o == 'x' && !on)
              ;
            else {
              char what[32];
              snprintf(what, sizeof what, "option (?%c)", o);
              unsup(t, what);
              return;
            }
          }
          if (t->i >= t->n) {
            bad(t, "unterminated group");
            return;
          }
          if (t->p[t->i] == ')') { /* applies to the rest of the enclosing group */
            t->i++;
            t->ci = ci;
            t->dotall = dotall;
            emit(t, ci ? "(?i)" : "(?-i)");
            t->have_atom = false;
            continue;
          }
          t->i++;
          emit(t, ci ? "(?i:" : "(?-i:");
          t->depth++;
          t->ci = ci;
          t->dotall = dotall;
        }
      } else {
        emit(t, "(");
        t->depth++;
      }
      break;
    }
    case ')': {
      t->i++;
      if (!t->depth) {
        bad(t, "unmatched )");
        return;
      }
      t->depth--;
      bool was_ci = t->ci;
      t->ci = t->stack[t->depth].ci;
      t->dotall = t->stack[t->depth].dotall;
      emit(t, ")");
      t->atom_start = t->stack[t->depth].out_pos; /* a quantifier after ')' repeats the group */
      t->have_atom = true;
      t->prev_lit = 0;
      t->after_ci_group = was_ci && !t->ci;
      break;
    }
    case '|':
      t->i++;
      emit(t, "|");
      t->have_atom = false;
      t->prev_lit = 0;
      t->after_ci_group = false;
      break;
    case '^':
    case '$':
      t->i++;
      emit(t, c == '^' ? "^" : "$");
      t->have_atom = false;
      t->prev_lit = 0;
      t->after_ci_group = false;
      break;
    case '*':
    case '+':
    case '?': {
      t->i++;
      if (!t->have_atom) {
        bad(t, "quantifier without an atom");
        return;
      }
      char q[3] = {(char)c, 0, 0};
      if (t->i < t->n && (t->p[t->i] == '?' || t->p[t->i] == '+')) q[1] = (char)t->p[t->i++];
      emit(t, q);
      t->have_atom = false;
      t->prev_lit = 0;
      break;
    }
    case '{': {
      /* {n} {n,} {n,m} {,m}; anything else is a literal '{' */
      size_t j = t->i + 1;
      long a = -1, b = -1;
      bool comma = false;
      while (j < t->n && t->p[j] >= '0' && t->p[j] <= '9') a = (a < 0 ? 0 : a) * 10 + (t->p[j++] - '0');
      if (j < t->n && t->p[j] == ',') {
        comma = true;
        j++;
        while (j < t->n && t->p[j] >= '0' && t->p[j] <= '9') b = (b < 0 ? 0 : b) * 10 + (t->p[j++] - '0');
      }
      bool valid = j < t->n && t->p[j] == '}' && (a >= 0 || (comma && b >= 0)) && t->have_atom;
      if (!valid) {
        t->i++;
        emit_literal(t, '{');
        break;
      }
      if (a > 100000 || b > 100000 || (b >= 0 && a > b)) {
        bad(t, "bad repeat bounds");
        return;
      }
      t->i = j + 1;
      bool ruby_nested = t->i < t->n && t->p[t->i] == '+';
      char q[64];
      if (!comma)
        snprintf(q, sizeof q, "{%ld}", a);
      else if (b < 0)
        snprintf(q, sizeof q, "{%ld,}", a);
      else
        snprintf(q, sizeof q, "{%ld,%ld}", a < 0 ? 0 : a, b);
      if (ruby_nested) { /* Ruby: X{n,m}+ is (?:X{n,m})+ */
        t->i++;
        if (lh_buf_reserve(&t->out, 3)) {
          t->st = LH_ENOMEM;
          return;
        }
        memmove(t->out.data + t->atom_start + 3, t->out.data + t->atom_start, t->out.len - t->atom_start + 1);
        memcpy(t->out.data + t->atom_start, "(?:", 3);
        t->out.len += 3;
        emit(t, q);
        emit(t, ")+");
      } else {
        emit(t, q);
        if (t->i < t->n && t->p[t->i] == '?') {
          emit(t, "?");
          t->i++;
        }
      }
      t->have_atom = false;
      t->prev_lit = 0;
      break;
    }
    default: {
      uint32_t ch = next_char(t);
      emit_literal(t, ch);
      break;
    }
    }
  }
  if (!t->st && t->depth) bad(t, "missing )");
}

/* Translate pat (native: without class corrections) into *out; fills *delta. */
static lh_status translate_pattern(const char *pat, size_t len, bool literal, bool native, const char *where,
                                   lh_buf *out, rset *delta, uint32_t *lookbehind, lh_error *err) {
  tr t = {0};
  t.p = (const uint8_t *)pat;
  t.n = len;
  t.where = where;
  t.err = err;
  t.native = native;
  if (literal) {
    while (t.i < t.n && !t.st) emit_literal(&t, next_char(&t));
  } else {
    translate(&t);
  }
  if (!t.st && !t.out.data) emit(&t, "");
  *lookbehind = t.lookbehind;
  rs_norm(&t.delta);
  if (delta) {
    *delta = t.delta;
    t.delta = (rset){0};
  }
  rs_free(&t.delta);
  if (t.st) {
    lh_buf_free(&t.out);
    if (t.st == LH_ENOMEM) return lh_error_set(err, LH_ENOMEM, "%s: out of memory translating regex", where);
    return t.st;
  }
  *out = t.out;
  return LH_OK;
}

static lh_status compile_pcre2(const lh_buf *src, const char *where, pcre2_code **code, bool *jit, lh_error *err) {
  pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
  if (!cc) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", where);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int e;
  PCRE2_SIZE eo;
  *code = pcre2_compile((PCRE2_SPTR)src->data, src->len, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &e, &eo, cc);
  pcre2_compile_context_free(cc);
  if (!*code) {
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(e, msg, sizeof msg);
    return lh_error_set(err, LH_EUNSUPPORTED, "%s: regex does not compile in PCRE2 (%s) after translation", where,
                        (char *)msg);
  }
  *jit = pcre2_jit_compile(*code, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
  return LH_OK;
}

lh_status tk_regex_compile(tk_regex *re, const char *pat, size_t len, bool literal, const char *where,
                           lh_error *err) {
  memset(re, 0, sizeof *re);
  if (tk_utf8_valid_prefix((const uint8_t *)pat, len) != len)
    return lh_error_set(err, LH_EFORMAT, "%s: pattern is not valid UTF-8", where);
  lh_buf exact = {0}, native = {0};
  rset delta = {0};
  uint32_t lb = 0, lb2 = 0;
  lh_status st = translate_pattern(pat, len, literal, false, where, &exact, &delta, &lb, err);
  if (!st) st = compile_pcre2(&exact, where, &re->code, &re->jit, err);
  if (!st && delta.n) {
    /* the native program, used on text without any of the delta code points */
    st = translate_pattern(pat, len, literal, true, where, &native, NULL, &lb2, err);
    if (!st) st = compile_pcre2(&native, where, &re->fast, &re->fast_jit, err);
    if (!st) {
      re->delta = malloc(delta.n * sizeof *re->delta);
      if (!re->delta) st = lh_error_set(err, LH_ENOMEM, "%s: out of memory", where);
      else {
        memcpy(re->delta, delta.r, delta.n * sizeof *re->delta);
        re->ndelta = delta.n;
        re->delta_min = delta.r[0][0];
      }
    }
  }
  lh_buf_free(&exact);
  lh_buf_free(&native);
  rs_free(&delta);
  if (st) {
    tk_regex_free(re);
    return st;
  }
  uint32_t minlen = 0, plb = 0;
  pcre2_pattern_info(re->code, PCRE2_INFO_MINLENGTH, &minlen);
  pcre2_pattern_info(re->code, PCRE2_INFO_MAXLOOKBEHIND, &plb);
  re->can_be_empty = minlen == 0;
  re->lookbehind = plb + 1 > lb ? plb + 1 : lb;
  if (!literal) re->fast_kind = tk_fast_kind(pat, len);
  /* the pattern, cut at a character boundary past 100 bytes */
  int shown = len > 100 ? 100 : (int)len;
  while (shown < (int)len && shown > 0 && ((uint8_t)pat[shown] & 0xC0) == 0x80) shown--;
  if (!strncmp(where, "tokenizer.json ", 15)) where += 15;
  const size_t n = strlen(where) + (size_t)shown + 32;
  if (!(re->label = malloc(n))) {
    tk_regex_free(re);
    return lh_error_set(err, LH_ENOMEM, "%s: out of memory", where);
  }
  snprintf(re->label, n, "%s pattern \"%.*s\"%s", where, shown, pat, shown < (int)len ? "..." : "");
  return LH_OK;
}

void tk_regex_free(tk_regex *re) {
  if (!re) return;
  pcre2_code_free(re->code);
  pcre2_code_free(re->fast);
  free(re->delta);
  free(re->label);
  memset(re, 0, sizeof *re);
}

static bool in_delta(const tk_regex *re, uint32_t c) {
  size_t lo = 0, hi = re->ndelta;
  while (lo < hi) {
    size_t m = (lo + hi) / 2;
    if (c < re->delta[m][0])
      hi = m;
    else if (c > re->delta[m][1])
      lo = m + 1;
    else
      return true;
  }
  return false;
}

/* Offset of the first delta code point at or after `from` (len if none). */
static size_t next_delta(const tk_regex *re, const uint8_t *s, size_t from, size_t len) {
  size_t i = from;
  uint8_t lead = re->delta_min < 0x80 ? 0 : re->delta_min < 0x800 ? 0xC0 : re->delta_min < 0x10000 ? 0xE0 : 0xF0;
  while (i < len) {
    while (i + 8 <= len) { /* skip eight bytes that cannot start a delta character */
      uint64_t w;
      memcpy(&w, s + i, 8);
      if (lead && !(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
      break;
    }
    if (i >= len) break;
    if (s[i] < lead) {
      i++;
      continue;
    }
    size_t j = i;
    uint32_t c = tk_utf8_next(s, &j);
    if (c >= re->delta_min && in_delta(re, c)) return i;
    i = j;
  }
  return len;
}

static int run_match(const pcre2_code *code, bool jit, pcre2_match_data *md, pcre2_match_context *mc,
                     const uint8_t *subj, size_t len, size_t pos, uint32_t opts) {
  return jit ? pcre2_jit_match(code, subj, len, pos, opts, md, mc) : pcre2_match(code, subj, len, pos, opts, md, mc);
}

int tk_regex_find(const tk_regex *re, pcre2_match_data *md, pcre2_match_context *mc, const uint8_t *subj,
                  size_t len, tk_find *f, bool partial, size_t *ms, size_t *me) {
  if (re->fast_kind) { /* tokenizer_fastsplit.c: no lookbehind, no empty match */
    int r = tk_fast_find(re->fast_kind, subj, len, f->pos, partial, ms, me);
    if (r == TK_FIND_MATCH) f->pos = f->last_end = *me;
    return r;
  }
  for (;;) {
    if (f->pos > len) return TK_FIND_NONE;
    uint32_t opts = PCRE2_NO_UTF_CHECK | (partial ? PCRE2_PARTIAL_HARD : 0);
    int rc = 0;
    bool fast_done = false;
    if (re->fast) {
      /* the native program agrees with the exact one on text without delta code points; cut the
       * subject before the next one and let hard-partial matching say when it would matter */
      size_t back = f->pos; /* lookbehinds see this far back */
      for (uint32_t k = 0; k < re->lookbehind && back > 0; k++) {
        back--;
        while (back > 0 && (subj[back] & 0xC0) == 0x80) back--;
      }
      if (!f->delta_known || f->delta_at < back) {
        f->delta_at = next_delta(re, subj, back, len);
        f->delta_known = true;
      }
      size_t cut = f->delta_at;
      if (cut < f->pos) {
        fast_done = false; /* a lookbehind may see the delta character: the exact program */
      } else if (cut >= len) {
        rc = run_match(re->fast, re->fast_jit, md, mc, subj, len, f->pos, opts);
        fast_done = true;
      } else {
        rc = run_match(re->fast, re->fast_jit, md, mc, subj, cut, f->pos, PCRE2_NO_UTF_CHECK | PCRE2_PARTIAL_HARD);
        fast_done = rc >= 0; /* a complete match that never looked at the delta character */
      }
    }
    if (!fast_done) rc = run_match(re->code, re->jit, md, mc, subj, len, f->pos, opts);
    if (rc == PCRE2_ERROR_NOMATCH) return TK_FIND_NONE;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    if (rc == PCRE2_ERROR_PARTIAL) {
      *ms = ov[0];
      return TK_FIND_PARTIAL;
    }
    if (rc < 0) return TK_FIND_ERROR;
    size_t s = ov[0], e = ov[1];
    if (s == e && f->last_end == e) { /* onig: no empty match right after the previous one */
      f->pos += f->pos < len ? tk_utf8_len(subj[f->pos]) : 1;
      continue;
    }
    f->pos = e;
    f->last_end = e;
    *ms = s;
    *me = e;
    return TK_FIND_MATCH;
  }
}
