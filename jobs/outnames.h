/* outnames.h — the names of the files `longhaul run` and `longhaul merge` write in an output
 * folder (OUT), from one table that both builds them and recognises them, so that a file added to
 * OUT is named in one place:
 *
 *   file          the whole batch   shard I of N (0 <= I < N, N >= 2)
 *   output        output.jsonl      output-I-of-N.jsonl
 *   errors        errors.jsonl      errors-I-of-N.jsonl
 *   store         longhaul.db       longhaul-shard-I-of-N.db   with SQLite's -wal, -shm, -journal
 *   lock          longhaul.lock     longhaul-I-of-N.lock
 *   record        (none)            shard-I-of-N.json          (jobs/shard.h)
 *
 * and every job's folder under jobs/. I and N are written in decimal without sign or leading
 * zeros; a name is recognised only as it is built (exact-name matching): longhaul-nightly.jsonl
 * or output-01-of-2.jsonl beside the outputs is the user's.
 */
#ifndef LH_JOBS_OUTNAMES_H
#define LH_JOBS_OUTNAMES_H

#include <stddef.h>

typedef enum lh_outname {
  LH_OUTNAME_OUTPUT,
  LH_OUTNAME_ERRORS,
  LH_OUTNAME_STORE, /* the store a run opens when --db is not given */
  LH_OUTNAME_LOCK,
  LH_OUTNAME_RECORD, /* a shard's only: it has no whole-batch name */
  LH_OUTNAME_COUNT
} lh_outname;

/* The files SQLite keeps beside a store (wherever it is), by the tail added to its path. */
#define LH_OUTNAME_STORE_SIDES 3
extern const char *const lh_outname_store_sides[LH_OUTNAME_STORE_SIDES]; /* "-wal", "-shm", "-journal" */

/* File f's name for shard `index` of `count` (count <= 1: the whole batch, index ignored; the
 * record is named for its shard whatever count is) into buf (64 bytes are always enough). */
void lh_outname_build(lh_outname f, int index, int count, char *buf, size_t n);

/* 1 with *index and *count when name is exactly f's shard form for some integers index and count
 * ("output-2-of-4.jsonl": 2, 4), whether or not they make a shard (0 <= index < count, count >= 2:
 * the caller checks); 0 otherwise. */
int lh_outname_shard(lh_outname f, const char *name, int *index, int *count);

/* Whether rel, a path relative to OUT, is a file a run or merge writes there (and so replaces):
 * one of the names above for the whole batch or a shard (0 <= I < N, N >= 2), a store's side
 * file, or anything under jobs/. */
int lh_outname_owned(const char *rel);

#endif
