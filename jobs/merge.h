/* merge.h — assemble the outputs of `run --shard I/N` into the one-process run's files.
 *
 * Each shard run writes OUT/output-I-of-N.jsonl and OUT/errors-I-of-N.jsonl: the lines of its own
 * requests, in batch order, plus a line for every request the batch itself rejects (malformed,
 * duplicate custom_id), which every shard reports. lh_merge_shards writes OUT/output.jsonl and
 * OUT/errors.jsonl with every request's line exactly once, in batch order: the bytes a one-process
 * run of the batch writes, apart from what differs between any two runs (the `created` times).
 *
 * It needs the batch file for the order (the output lines carry custom_id, not line numbers): the
 * caller names it, or the shards' records name it (OUT/shard-I-of-N.json, jobs/shard.h). Every
 * output line's id (batch_req_<24 hex>: jobs/runner.h, lh_runner_request_id) is derived from the
 * batch file's digest, so a shard of another batch, or of this file before an edit, is recognised
 * line by line.
 *
 * Refused, with nothing written (LH_ECORRUPT, the message naming the shard, file and line): no
 * shard files, shards of several N in OUT (unless params.shards picks one), a missing shard (or
 * its errors file), a shard or record of another batch, records of different models, a malformed
 * shard line, a shard file that is OUT/output.jsonl or errors.jsonl (a link to it), a request that
 * no shard answered (its shard has not finished: rerun it) or that two shards answered, and shard
 * lines that match no request of the batch. A shard still running (holding its lock) is LH_EBUSY.
 *
 * The shards' files are read whole: memory is about twice their total size.
 */
#ifndef LH_JOBS_MERGE_H
#define LH_JOBS_MERGE_H

#include "util/err.h"

typedef struct lh_merge_params {
  const char *out_dir;
  const char *batch_path; /* NULL: the batch the shards' records (OUT/shard-I-of-N.json) name */
  int shards;             /* N; 0: the N of the OUT/output-I-of-N.jsonl files (there must be one) */
  int wait;               /* another process holds OUT/longhaul.lock: wait (default: LH_EBUSY naming it) */
} lh_merge_params;

lh_merge_params lh_merge_default_params(void);

typedef struct lh_merge_report {
  int shards;              /* N */
  int lines;               /* lines of output.jsonl: one per request of the batch */
  int failed;              /* of which errors (also in errors.jsonl) */
  int rejected;            /* of which the batch's own malformed lines, reported by every shard */
  char batch_path[4096];
  char batch_sha256[65];
  char output_path[4200];
  char errors_path[4200];
} lh_merge_report;

/* Merge the shards in p->out_dir (see above). Takes OUT/longhaul.lock (the lock of a one-process
 * run in OUT) for the time it writes; refused, it leaves no lock file it made, and it never leaves
 * a shard's (made to see whether that shard is running: shards run elsewhere, their files gathered
 * in OUT). Statuses: LH_OK; LH_ECORRUPT the shards do not add up to the
 * batch (nothing written); LH_ENOTFOUND OUT, the batch or every shard file is missing; LH_EINVAL
 * no batch named and no record naming one; LH_EBUSY OUT or a shard is in use; LH_EIO, LH_EFULL,
 * LH_ENOMEM while reading or writing. */
lh_status lh_merge_shards(const lh_merge_params *p, lh_merge_report *rep, lh_error *err);

#endif
