/* args.h — what every longhaul command does the same way with its arguments.
 *
 * Wrong arguments get one line that names the problem and, for a misspelling, the nearest correct
 * spelling, then "see longhaul CMD --help"; never the whole help. The store of a command that
 * reads one is named by --db FILE or by --out DIR, the folder `longhaul run --out DIR` wrote.
 *
 * Everything here prints to stderr and returns; nothing exits.
 */
#ifndef LH_CLI_ARGS_H
#define LH_CLI_ARGS_H

#include <getopt.h>
#include <stddef.h>

/* The candidate nearest to `word`, or NULL when none is near enough to be a likely slip: within an
 * edit distance (insertions, deletions, substitutions, swaps of neighbours; case ignored) of a
 * third of the word's length, at least 1, or starting like it (the word is its prefix, or both
 * share their first two characters and differ by at most the word's length). Ties go to the
 * longer shared start, then to the earlier candidate. */
const char *lh_args_nearest(const char *word, const char *const *candidates, size_t n);

/* For a getopt_long loop run with opterr = 0: call when it returned '?' or ':'. Looks at the
 * argument it stopped on (argv[optind - 1]) and prints, for command `cmd` ("run", "store ls"):
 *   longhaul CMD: unknown option --foo; did you mean --force?      (or without the suggestion)
 *   longhaul CMD: option --c is ambiguous: --chunk, --chat-template
 *   longhaul CMD: option --chunk needs a value
 *   longhaul CMD: option --force takes no value
 * then "see longhaul CMD --help". Returns 2 (LH_EXIT_USAGE) for the command to return. */
int lh_args_bad_option(const char *cmd, char **argv, const struct option *opts);

/* The same for commands that parse by hand: `arg` is the argument they could not use, `names`
 * their options without the leading "--". Returns 2. */
int lh_args_unknown_option(const char *cmd, const char *arg, const char *const *names, size_t n);

/* The stores a command reads: --db FILE names one; --out DIR means DIR/longhaul.db and, for runs
 * with --shard I/N, every DIR/longhaul-shard-I-of-N.db (in shard order). With neither,
 * `fallback` (NULL: an error). On success *paths holds *n >= 1 malloc'd strings (free with
 * lh_args_stores_free) and 0 is returned; otherwise a message naming what is missing is printed
 * and -1 returned. A --db FILE need not exist here (opening it says so); the fallback must. */
int lh_args_stores(const char *cmd, const char *db, const char *out, const char *fallback, char ***paths, size_t *n);
void lh_args_stores_free(char **paths, size_t n);

#endif
