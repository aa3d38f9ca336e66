/* args.c — see args.h. The suggestion is the nearest of a command's own options (or of the
 * commands), never a guess from outside them; an argument with nothing near gets no suggestion
 * rather than a wrong one. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strverscmp */
#endif
#include "cli/args.h"

#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "util/fs.h"

/* Optimal string alignment distance, case ignored; words longer than 63 bytes count as far. */
static int distance(const char *a, const char *b) {
  const size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 1 << 20;
  int d[64][64];
  for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      const int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
          tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[n][m];
}

static size_t shared_start(const char *a, const char *b) {
  size_t k = 0;
  while (a[k] && b[k] && tolower((unsigned char)a[k]) == tolower((unsigned char)b[k])) k++;
  return k;
}

const char *lh_args_nearest(const char *word, const char *const *candidates, size_t n) {
  const size_t len = strlen(word);
  if (!len) return NULL;
  int near = (int)len / 3;
  if (near < 1) near = 1;
  const char *best = NULL;
  int best_d = 1 << 30;
  size_t best_k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *c = candidates[i];
    const int d = distance(word, c);
    const size_t k = shared_start(word, c);
    const int ok = d <= near || (k == len && len >= 2) || (k >= 2 && d <= (int)len);
    if (!ok) continue;
    if (d < best_d || (d == best_d && k > best_k)) best = c, best_d = d, best_k = k;
  }
  return best;
}

int lh_args_unknown_option(const char *cmd, const char *arg, const char *const *names, size_t n) {
  const char *word = arg;
  while (*word == '-') word++;
  char name[128];
  snprintf(name, sizeof name, "%.*s", (int)strcspn(word, "="), word);
  const char *near = *arg == '-' ? lh_args_nearest(name, names, n) : NULL;
  if (*arg != '-') fprintf(stderr, "longhaul %s: unexpected argument '%s'\n", cmd, arg);
  else if (near) fprintf(stderr, "longhaul %s: unknown option %s; did you mean --%s?\n", cmd, arg, near);
  else fprintf(stderr, "longhaul %s: unknown option %s\n", cmd, arg);
  fprintf(stderr, "see longhaul %s --help\n", cmd);
  return LH_EXIT_USAGE;
}

/* The short-option case: getopt stops inside "-xyz" without moving past it, so the argument
 * holding optopt may be argv[optind] rather than argv[optind - 1]. */
static int bad_short(const char *cmd, char **argv, const char **names, size_t n) {
  const char *a = argv[optind - 1], *b = argv[optind];
  const char *s = b && b[0] == '-' && b[1] && b[1] != '-' && optopt && strchr(b + 1, optopt) ? b : a;
  if (s[0] == '-' && s[1] && s[1] != '-' && s[2]) return lh_args_unknown_option(cmd, s, names, n); /* "-force" */
  if (optopt > ' ' && optopt < 127) fprintf(stderr, "longhaul %s: unknown option -%c\n", cmd, optopt);
  else fprintf(stderr, "longhaul %s: unknown option %s\n", cmd, s);
  fprintf(stderr, "see longhaul %s --help\n", cmd);
  return LH_EXIT_USAGE;
}

int lh_args_bad_option(const char *cmd, char **argv, const struct option *opts) {
  size_t n = 0;
  while (opts[n].name) n++;
  const char **names = calloc(n + 1, sizeof *names);
  if (!names) return LH_EXIT_USAGE;
  for (size_t i = 0; i < n; i++) names[i] = opts[i].name;
  const char *arg = optind > 0 ? argv[optind - 1] : "";
  int rc = -1;
  if (!strncmp(arg, "--", 2) && arg[2]) {
    const char *name = arg + 2, *eq = strchr(name, '=');
    const size_t len = eq ? (size_t)(eq - name) : strlen(name);
    size_t exact = n, prefixed = 0;
    char list[512] = "";
    for (size_t i = 0; i < n; i++) {
      if (strncmp(opts[i].name, name, len)) continue;
      if (strlen(opts[i].name) == len) exact = i;
      const size_t at = strlen(list);
      snprintf(list + at, sizeof list - at, "%s--%s", prefixed++ ? ", " : "", opts[i].name);
    }
    if (exact == n && prefixed == 1) /* a unique abbreviation: getopt_long takes those */
      for (size_t i = 0; i < n; i++)
        if (!strncmp(opts[i].name, name, len)) exact = i;
    if (exact < n && opts[exact].has_arg == no_argument && eq) {
      fprintf(stderr, "longhaul %s: option --%s takes no value\n", cmd, opts[exact].name);
      rc = LH_EXIT_USAGE;
    } else if (exact < n && opts[exact].has_arg == required_argument && !eq && !argv[optind]) {
      fprintf(stderr, "longhaul %s: option --%s needs a value\n", cmd, opts[exact].name);
      rc = LH_EXIT_USAGE;
    } else if (exact == n && prefixed > 1) {
      fprintf(stderr, "longhaul %s: option --%.*s is ambiguous: %s\n", cmd, (int)len, name, list);
      rc = LH_EXIT_USAGE;
    } else if (exact == n) {
      rc = lh_args_unknown_option(cmd, arg, names, n);
      free(names);
      return rc;
    }
    if (rc >= 0) fprintf(stderr, "see longhaul %s --help\n", cmd);
  }
  if (rc < 0) rc = bad_short(cmd, argv, names, n); /* a well-formed long option was not the fault */
  free(names);
  return rc;
}

static int shard_order(const void *a, const void *b) {
  return strverscmp(*(const char *const *)a, *(const char *const *)b);
}

int lh_args_stores(const char *cmd, const char *db, const char *out, const char *fallback, char ***paths, size_t *n) {
  *paths = NULL;
  *n = 0;
  if (!db && !out && fallback && !lh_is_file(fallback)) {
    fprintf(stderr, "longhaul %s: no %s here; name the store with --out DIR (the folder of `longhaul run --out DIR`) "
                    "or --db FILE\n", cmd, fallback);
    return -1;
  }
  if (db || (!out && fallback)) {
    char **v = malloc(sizeof *v);
    if (!v || !(v[0] = strdup(db ? db : fallback))) {
      free(v);
      fprintf(stderr, "longhaul %s: out of memory\n", cmd);
      return -1;
    }
    *paths = v;
    *n = 1;
    return 0;
  }
  if (!out) {
    fprintf(stderr, "longhaul %s: name the store with --out DIR (the folder of `longhaul run --out DIR`) or --db FILE\n",
            cmd);
    return -1;
  }
  if (!lh_is_dir(out)) {
    fprintf(stderr, "longhaul %s: --out %s: no such folder\n", cmd, out);
    return -1;
  }
  char pattern[4200];
  snprintf(pattern, sizeof pattern, "%s/longhaul.db", out);
  const int plain = lh_is_file(pattern);
  snprintf(pattern, sizeof pattern, "%s/longhaul-shard-*-of-*.db", out);
  glob_t g;
  memset(&g, 0, sizeof g);
  const int gr = glob(pattern, 0, NULL, &g);
  const size_t shards = gr == 0 ? g.gl_pathc : 0;
  if (!plain && !shards) {
    globfree(&g);
    fprintf(stderr, "longhaul %s: --out %s holds no store (longhaul.db, or longhaul-shard-I-of-N.db from --shard runs)\n",
            cmd, out);
    return -1;
  }
  char **v = calloc((size_t)plain + shards, sizeof *v);
  size_t k = 0;
  if (v && plain) {
    snprintf(pattern, sizeof pattern, "%s/longhaul.db", out);
    v[k++] = strdup(pattern);
  }
  for (size_t i = 0; v && i < shards; i++) v[k++] = strdup(g.gl_pathv[i]);
  globfree(&g);
  for (size_t i = 0; v && i < k; i++)
    if (!v[i]) k = 0;
  if (!v || !k) {
    lh_args_stores_free(v, (size_t)plain + shards);
    fprintf(stderr, "longhaul %s: out of memory\n", cmd);
    return -1;
  }
  qsort(v + plain, k - (size_t)plain, sizeof *v, shard_order);
  *paths = v;
  *n = k;
  return 0;
}

void lh_args_stores_free(char **paths, size_t n) {
  for (size_t i = 0; paths && i < n; i++) free(paths[i]);
  free(paths);
}
