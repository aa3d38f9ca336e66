/* shard.h — which part of a batch this process runs when Slurm started it as one task of a job
 * array (`sbatch --array=...`), so that `longhaul run` needs no --shard there.
 *
 * Slurm sets, in every array task's environment (sbatch(1), "OUTPUT ENVIRONMENT VARIABLES"):
 *   SLURM_ARRAY_TASK_ID     this task's index value (the number in --array, not a position)
 *   SLURM_ARRAY_TASK_COUNT  how many tasks the array has
 *   SLURM_ARRAY_TASK_MIN    the lowest index value, SLURM_ARRAY_TASK_MAX the highest
 *   SLURM_ARRAY_TASK_STEP   the step between index values (1 unless --array=A-B:S)
 * The shard is the task's position among the index values: I = (ID - MIN) / STEP, N = COUNT, so
 * --array=0-3, --array=1-4 and --array=10-16:2 all make shards 0/4 .. 3/4. Index values that are
 * not evenly spaced (--array=1,2,9) have no such position: refused, with what to do instead.
 */
#ifndef LH_JOBS_SHARD_H
#define LH_JOBS_SHARD_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "util/buf.h"
#include "util/err.h"

/* Read the shard from the SLURM_ARRAY_* variables of this process's environment.
 * Returns 1 and sets *index (0 <= *index < *count) and *count, with `why` saying where they came
 * from ("shard 1/4 from the Slurm array: SLURM_ARRAY_TASK_ID=2 of 1-4"), for the run's first
 * progress line; 0 when SLURM_ARRAY_TASK_ID is unset or empty (not an array task: index and count
 * are left alone, why is ""); -1 when the variables are malformed or describe an array whose index
 * values are not evenly spaced, with `why` saying which and to pass --shard I/N instead.
 * A count of 1 (an array of one task) is returned as 0/1: the whole batch. why may be NULL. */
int lh_shard_from_env(int *index, int *count, char *why, size_t n);

/* ---- OUT/shard-I-of-N.json: which batch a shard ran, with which model and settings ------------
 *
 *   {"shard": 2, "of": 4, "batch": "/abs/path/batch.jsonl", "batch_sha256": "<64 hex>",
 *    "model_id": "<64 hex>", "settings": {"tokenizer_id": "<64 hex>", "chat_template": "minimax",
 *    "chunk": 4096, ...}}
 *
 * `run --shard I/N` writes it beside its output-I-of-N.jsonl so that `longhaul merge OUT` finds the
 * batch without --batch; merge also refuses shards whose records name different batches, different
 * models (model_id is lh_model_id's, which `longhaul model info` prints; it covers the weights and
 * config.json, not the tokenizer) or different settings: what else of the run changes its answers
 * (the runner says which: jobs/runner.c, answer_settings), each under its own key so that merge
 * can name the one that differs. Records of older runs lack model_id or settings: they are read,
 * and compared on what they have. Its name is LH_OUTNAME_RECORD's (jobs/outnames.h). */
typedef struct lh_shard_record {
  int index, count;
  char batch[4096];        /* absolute path when written by lh_shard_record_render */
  char batch_sha256[65];   /* lower-case hex of the batch file's content */
  char model_id[65];       /* lower-case hex; "" when the record has no model_id */
  char settings[2048];     /* the settings object as JSON text; "" when the record has none */
} lh_shard_record;

/* Render a record (one JSON line) into out (appended). batch_path is made absolute (realpath);
 * LH_ENOTFOUND when it does not exist. model_id: the model the shard ran (64 hex digits);
 * settings: a JSON object of what else changes the run's answers (copied; not taken). */
lh_status lh_shard_record_render(const char *batch_path, const char *batch_sha256, const char *model_id,
                                 const cJSON *settings, int index, int count, lh_buf *out, lh_error *err);
/* Read a record; LH_ENOTFOUND when the file does not exist, LH_EFORMAT (naming the file and the
 * field) when it is not a record: shard and of must be integers, batch_sha256 and model_id (which
 * may be absent) 64 lower-case hex digits, settings (which may be absent) an object. */
lh_status lh_shard_record_read(const char *path, lh_shard_record *rec, lh_error *err);
/* Whether a and b record different settings: 1 with the first key (in a's order, then b's) whose
 * values differ in key and the two values as JSON text in va and vb ("none" where a record lacks
 * the key); 0 when they agree or either record has no settings. Each buffer n bytes. */
int lh_shard_settings_differ(const lh_shard_record *a, const lh_shard_record *b, char *key, char *va, char *vb,
                             size_t n);

#endif
