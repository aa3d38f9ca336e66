/* ingest_glob.c — include/exclude globs (syntax in ingest.h).
 *
 * A pattern is compiled once into a token list and matched by simulating all token positions at
 * once over the path (a set of reachable string positions per token), so matching is
 * O(tokens x path length) whatever the pattern: a hostile archive cannot make it backtrack
 * exponentially with a long name. The same pass answers "does it match a leading directory" by
 * looking at the reachable set at every '/'. Patterns are trusted input (from the user); paths are
 * not. A pattern's leading "./" and "/" are removed as a path's are, and anchor it at the root.
 */
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_internal.h"

typedef enum { G_LIT, G_ANY, G_CLASS, G_STAR, G_DIRS, G_REST1, G_REST0 } gkind;
/* G_DIRS: "** /" as a component: zero or more whole components. G_REST1: a trailing "/ **" after the
 * slash: one or more bytes. G_REST0: the pattern "**" alone: anything. */

typedef struct gtok {
  gkind k;
  uint8_t c;
  int neg;
  uint8_t set[32]; /* G_CLASS: bitmap */
} gtok;

struct lh_glob {
  gtok *t;
  size_t n;
  int has_slash; /* otherwise it matches single components */
};

static void set_bit(uint8_t *set, unsigned c) { set[c >> 3] |= (uint8_t)(1u << (c & 7)); }
static int get_bit(const uint8_t *set, unsigned c) { return set[c >> 3] >> (c & 7) & 1; }

static lh_status compile(const char *orig, lh_glob *g, lh_error *err) {
  /* Paths are matched with their leading "./" and "/" removed, so a pattern's are removed too; a
   * pattern that had one is anchored at the root of the document ("./secrets" is the top-level
   * secrets, not every component of that name), as a pattern with a '/' is. */
  const char *pat = orig;
  int anchored = 0;
  for (;;) {
    if (pat[0] == '.' && pat[1] == '/') pat += 2;
    else if (pat[0] == '/') pat++;
    else break;
    anchored = 1;
  }
  size_t n = strlen(pat);
  while (n > 1 && pat[n - 1] == '/') n--; /* "dir/" is "dir": paths are matched without a trailing '/' */
  g->t = calloc(n + 1, sizeof *g->t);
  if (!g->t) return lh_error_set(err, LH_ENOMEM, "out of memory compiling glob");
  g->n = 0;
  g->has_slash = anchored || memchr(pat, '/', n) != NULL;
  if (n == 0 && anchored)
    return lh_error_set(err, LH_EINVAL, "glob '%s' names only the root of the document, which is no entry; '**' "
                        "matches everything", orig);
  if (n == 0) return lh_error_set(err, LH_EINVAL, "empty glob pattern");
  for (size_t i = 0; i < n;) {
    gtok *t = &g->t[g->n++];
    unsigned char c = (unsigned char)pat[i];
    if (c == '*' && i + 1 < n && pat[i + 1] == '*' && (i == 0 || pat[i - 1] == '/') &&
        (i + 2 == n || pat[i + 2] == '/')) {
      if (i + 2 == n) t->k = i == 0 ? G_REST0 : G_REST1;
      else t->k = G_DIRS;
      i += i + 2 == n ? 2 : 3;
    } else if (c == '*') {
      t->k = G_STAR;
      while (i < n && pat[i] == '*') i++; /* "a**b" is "a*b" */
    } else if (c == '?') {
      t->k = G_ANY;
      i++;
    } else if (c == '[') {
      size_t j = i + 1;
      t->k = G_CLASS;
      if (j < n && (pat[j] == '!' || pat[j] == '^')) t->neg = 1, j++;
      int first = 1, closed = 0;
      while (j < n) {
        unsigned char a = (unsigned char)pat[j];
        if (a == ']' && !first) {
          closed = 1;
          j++;
          break;
        }
        if (a == '\\' && j + 1 < n) a = (unsigned char)pat[++j];
        first = 0;
        if (j + 2 < n && pat[j + 1] == '-' && pat[j + 2] != ']') {
          unsigned char b = (unsigned char)pat[j + 2];
          if (b == '\\' && j + 3 < n) b = (unsigned char)pat[j + 3], j++;
          if (b < a) return lh_error_set(err, LH_EINVAL, "glob '%s': bad range %c-%c", orig, a, b);
          for (unsigned x = a; x <= b; x++) set_bit(t->set, x);
          j += 3;
        } else {
          set_bit(t->set, a);
          j++;
        }
      }
      if (!closed) return lh_error_set(err, LH_EINVAL, "glob '%s': '[' without a closing ']'", orig);
      i = j;
    } else {
      if (c == '\\') {
        if (i + 1 == n) return lh_error_set(err, LH_EINVAL, "glob '%s': ends with a lone backslash", orig);
        c = (unsigned char)pat[++i];
      }
      t->k = G_LIT;
      t->c = c;
      i++;
    }
  }
  return LH_OK;
}

/* Run the pattern over s[0..n). Fills hit[j] (j in 0..n) with whether the pattern matches s[0..j). */
static void run(const lh_glob *g, const uint8_t *s, size_t n, uint8_t *cur, uint8_t *nxt) {
  memset(cur, 0, n + 1);
  cur[0] = 1;
  for (size_t ti = 0; ti < g->n; ti++) {
    const gtok *t = &g->t[ti];
    memset(nxt, 0, n + 1);
    switch (t->k) {
      case G_LIT:
        for (size_t j = 0; j < n; j++) nxt[j + 1] = cur[j] && s[j] == t->c;
        break;
      case G_ANY:
        for (size_t j = 0; j < n; j++) nxt[j + 1] = cur[j] && s[j] != '/';
        break;
      case G_CLASS:
        for (size_t j = 0; j < n; j++)
          nxt[j + 1] = cur[j] && s[j] != '/' && (get_bit(t->set, s[j]) ^ t->neg);
        break;
      case G_STAR:
        nxt[0] = cur[0];
        for (size_t j = 1; j <= n; j++) nxt[j] = cur[j] || (nxt[j - 1] && s[j - 1] != '/');
        break;
      case G_DIRS: {
        int seen = 0;
        for (size_t j = 0; j <= n; j++) {
          nxt[j] = cur[j] || (j > 0 && seen && s[j - 1] == '/');
          if (cur[j]) seen = 1;
        }
        break;
      }
      case G_REST1:
      case G_REST0: {
        int any = 0;
        for (size_t j = 0; j < n; j++) any |= cur[j];
        nxt[n] = any || (t->k == G_REST0 && cur[n]);
        break;
      }
    }
    memcpy(cur, nxt, n + 1);
  }
}

static int match_one(const lh_glob *g, const uint8_t *s, size_t n, int any_prefix, uint8_t *cur, uint8_t *nxt) {
  if (!g->has_slash) {
    /* Component patterns: the last component, or (any_prefix) any component. */
    size_t start = 0;
    for (size_t j = 0; j <= n; j++) {
      if (j == n || s[j] == '/') {
        if (any_prefix || j == n) {
          run(g, s + start, j - start, cur, nxt);
          if (cur[j - start]) return 1;
        }
        start = j + 1;
      }
    }
    return 0;
  }
  run(g, s, n, cur, nxt);
  if (cur[n]) return 1;
  if (any_prefix)
    for (size_t j = 1; j < n; j++)
      if (s[j] == '/' && cur[j]) return 1;
  return 0;
}

lh_status lh_globset_init(lh_globset *gs, const char *const *pats, size_t n, lh_error *err) {
  gs->g = NULL;
  gs->n = 0;
  if (!n) return LH_OK;
  gs->g = calloc(n, sizeof *gs->g);
  if (!gs->g) return lh_error_set(err, LH_ENOMEM, "out of memory compiling globs");
  for (size_t i = 0; i < n; i++) {
    lh_glob *g = calloc(1, sizeof *g);
    if (!g) return lh_error_set(err, LH_ENOMEM, "out of memory compiling globs");
    gs->g[gs->n++] = g;
    lh_status st = compile(pats[i] ? pats[i] : "", g, err);
    if (st) return st;
  }
  return LH_OK;
}

void lh_globset_free(lh_globset *gs) {
  for (size_t i = 0; i < gs->n; i++) {
    if (gs->g[i]) free(gs->g[i]->t);
    free(gs->g[i]);
  }
  free(gs->g);
  gs->g = NULL;
  gs->n = 0;
}

int lh_globset_match(const lh_globset *gs, const char *path, size_t len, int any_prefix) {
  if (!gs->n) return 0;
  const uint8_t *s = (const uint8_t *)path;
  for (;;) {
    if (len >= 2 && s[0] == '.' && s[1] == '/') s += 2, len -= 2;
    else if (len >= 1 && s[0] == '/') s++, len--;
    else break;
  }
  while (len > 0 && s[len - 1] == '/') len--;
  uint8_t small[2][512];
  uint8_t *cur = small[0], *nxt = small[1], *heap = NULL;
  if (len + 1 > sizeof small[0]) {
    heap = malloc(2 * (len + 1));
    if (!heap) return 0;
    cur = heap, nxt = heap + len + 1;
  }
  int hit = 0;
  for (size_t i = 0; i < gs->n && !hit; i++) hit = match_one(gs->g[i], s, len, any_prefix, cur, nxt);
  free(heap);
  return hit;
}

int lh_globset_match_meta(const lh_globset *gs, const lh_meta *m, int any_prefix) {
  return lh_globset_match(gs, m->path, m->path_len, any_prefix) ||
         (m->alt_path && lh_globset_match(gs, m->alt_path, m->alt_len, any_prefix));
}

/* ---- one document's globs, for callers outside ingest (ingest.h) ---- */

struct lh_globs {
  lh_globset include, exclude;
};

lh_status lh_globs_open(lh_globs **out, const char *const *include, size_t n_include, const char *const *exclude,
                        size_t n_exclude, lh_error *err) {
  *out = NULL;
  lh_globs *g = calloc(1, sizeof *g);
  if (!g) return lh_error_set(err, LH_ENOMEM, "out of memory compiling globs");
  lh_status st = lh_globset_init(&g->include, include, n_include, err);
  if (!st) st = lh_globset_init(&g->exclude, exclude, n_exclude, err);
  if (st) {
    lh_globs_free(g);
    return st;
  }
  *out = g;
  return LH_OK;
}

void lh_globs_free(lh_globs *g) {
  if (!g) return;
  lh_globset_free(&g->include);
  lh_globset_free(&g->exclude);
  free(g);
}

/* The decisions of lh_reader_predecide_static (frame.c) that depend on the name alone, in its
 * order: exclude globs for every entry, include globs for files; a file's name without a
 * compressed suffix counts as folder walks set it (decompress_members on, ingest's default). */
lh_entry_reason lh_globs_decide(const lh_globs *g, const char *path, size_t len, int is_file) {
  if (!g) return LH_REASON_NONE;
  lh_meta m = {.path = path, .path_len = len, .type = is_file ? LH_ENTRY_FILE : LH_ENTRY_OTHER, .size = -1};
  const size_t sfx = is_file ? lh_member_suffix(path, len) : 0;
  if (sfx) m.alt_path = path, m.alt_len = len - sfx;
  if (lh_globset_match_meta(&g->exclude, &m, 1)) return LH_REASON_EXCLUDED;
  if (is_file && g->include.n && !lh_globset_match_meta(&g->include, &m, 0)) return LH_REASON_NOT_INCLUDED;
  return LH_REASON_NONE;
}
