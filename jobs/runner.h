/* runner.h — the batch runner: OpenAI Batch API JSONL in, output.jsonl, errors.jsonl and per-job
 * results out, through ingest -> the pipeline (prefill with checkpoints, forks, decode), resumable
 * at any point.
 *
 * What one run does (jobs/runner.c has the details and the invariants):
 *
 *   1. Lock and check the output folder (jobs/outdir.h): one run per output at a time, and a
 *      folder that cannot be written is refused before any work.
 *   2. Parse the batch (jobs/batch.h). Malformed lines become error lines; the rest become jobs in
 *      the store (idempotent: rerunning the same batch finds them). A job's identity covers the
 *      model (every byte), the parameters that change answers and its documents' contents
 *      (jobs/inputs.h): when it differs from the stored job's, the job is computed again, reusing
 *      checkpoints only where the token prefix still matches. The weights' and documents' digests
 *      are cached in the store by file identity, so an unchanged rerun reads neither again.
 *   3. Claim jobs a group at a time: requests with the same documents (and model) form a group
 *      that shares one ingest and one prefill.
 *   4. Ingest the group's documents once into tokens (ingest/ingest.h); each request's prompt is
 *      [documents][its messages, rendered by jobs/chat.h].
 *   5. Prefill the documents as a prefix (pipeline/pipeline.h) in chunks of `chunk` tokens,
 *      resuming from the longest checkpoint in the store and checkpointing every
 *      `checkpoint_every` chunks through the asynchronous writer (store/store.h).
 *   6. Fork the prefix once per request, feed each its own tokens, decode all forks together
 *      (greedy or seeded sampling, stop strings, max tokens), commit results to the store.
 *   7. Thin old checkpoints (--keep-checkpoints) and rebuild OUT/output.jsonl, OUT/errors.jsonl
 *      (in batch order) and OUT/jobs/<custom_id>/{result.json, manifest.jsonl} from the store.
 *
 * SIGINT/SIGTERM: the current chunk finishes, its checkpoint is committed, claims are released,
 * the outputs are written for what is done, and lh_run_batch returns LH_EINTR. A full disk or an
 * I/O error of the store or the output folder stops the run the same way (the jobs are queued
 * again, never marked failed). Running the same command again resumes.
 */
#ifndef LH_JOBS_RUNNER_H
#define LH_JOBS_RUNNER_H

#include <stdint.h>

#include "jobs/progress.h"
#include "store/store.h"
#include "util/err.h"

typedef struct lh_runner_params {
  const char *batch_path;    /* the batch JSONL file; "-": standard input */
  const char *documents_root; /* NULL, or the folder every document must lie in (jobs/batch.h) */
  const char *model_dir;
  const char *out_dir;
  const char *db_path;       /* NULL: OUT/longhaul.db (OUT/longhaul-shard-I-of-N.db with a shard) */
  const char *device;        /* "cpu" (default) or "cuda" */
  const char *chat_template; /* NULL (from tokenizer_config.json), "minimax" or "raw" */
  int threads;               /* 0 = all cores */
  int cpu_attention;         /* lh_cpu_attention: the CPU backend's attention products (default fp32) */
  int chunk;                 /* tokens per prefill chunk (default 4096) */
  int checkpoint_every;      /* checkpoint after every N chunks (default 1; 0 = never) */
  int max_tokens_default;    /* when a request gives no max_tokens (default 256) */
  int force;                 /* rerun jobs that are already done or failed */
  int require_documents;     /* a document that gives no text (every entry skipped, empty files, no
                                entry at all) fails the jobs that name it with a 400, instead of a
                                warning in their results */
  int wait;                  /* another run holds OUT: wait for it (default: fail with LH_EBUSY naming it) */
  int shard_index, shard_count; /* run only shard i of n (0/1 = everything) */
  const char *shard_note;    /* NULL, or where the shard came from (jobs/shard.h), for the first progress line */
  int max_group;             /* most requests decoded together (default 64) */
  int keep_checkpoints;      /* retention at the end of a run: each prefix keeps its final checkpoint and
                                at most this many before it with their states (older ones keep only the KV
                                rows their descendants need); default 4; < 0 keeps everything */
  lh_progress_mode progress;
} lh_runner_params;

lh_runner_params lh_runner_default_params(void);

typedef struct lh_runner_summary {
  int requests, bad_lines, done, failed, skipped_done, not_in_shard;
  int left;           /* of a stopped run (interrupted, or a fault): its jobs neither done nor failed in the
                         store at its end, queued for a rerun; -1 when the store could not be read */
  int skipped_failed; /* of skipped_done: jobs that failed in an earlier run (kept until --force or new inputs) */
  int taken_over;     /* requests whose job another process took over after this one stalled: theirs to answer */
  int elsewhere;      /* of a run that ran to its end: requests left without a line in output.jsonl because
                         another process holds their job (a run on the same store, or a takeover) */
  char elsewhere_owner[160]; /* "pid P on HOST": one such holder, or "" */
  int changed;               /* jobs queued again because their inputs changed (documents, model, parameters) */
  int damaged;               /* finished jobs queued again because their stored answer or error failed its checksum */
  int64_t tokens_prefilled;  /* computed in this run */
  int64_t tokens_restored;   /* restored from checkpoints in this run */
  int64_t tokens_shared;     /* prefix tokens computed once and used by several requests */
  int64_t tokens_decoded;
  double seconds;
  int output_written;        /* this run wrote output_path: its lines are this run's view of the batch (a
                                run stopped before, by a damaged store say, leaves an earlier run's file) */
  lh_store_stats store;      /* what the store holds at the end of the run */
  int64_t thinned;           /* checkpoints that gave up their state to the retention policy */
  char output_path[4096];
  char errors_path[4096];    /* OpenAI's error file: one line per failed request */
  char db_path[4096];
} lh_runner_summary;

/* Run a batch. Returns LH_OK when every job of the shard ended (done or failed: see summary),
 * LH_EINTR when interrupted (resumable), LH_EBUSY when another run holds the output folder, a
 * fault of the store or the output folder (LH_EFULL, LH_EIO, LH_ECORRUPT: the run stopped early,
 * its jobs are queued again, and a rerun resumes), or the set-up error (model, batch). */
lh_status lh_run_batch(const lh_runner_params *p, lh_runner_summary *sum, lh_error *err);

/* Ask a running lh_run_batch to stop at the next chunk boundary (async-signal-safe). */
void lh_runner_request_stop(void);

/* A deterministic request id for output lines: "batch_req_" + 24 hex chars of
 * SHA-256(batch digest, custom_id), and the line number for a refused line (line > 0; 0 for a
 * request that ran), so a refused duplicate never shares its id with the line that ran.
 * out >= 40 bytes. */
void lh_runner_request_id(const char *batch_digest, const char *custom_id, int line, char *out, size_t outsz);

/* custom_id made safe as a single file-name component (bytes outside [A-Za-z0-9._-] as %XX; a
 * leading '.' escaped; over 200 bytes shortened with a hash suffix). out >= 256 bytes. */
void lh_runner_job_dirname(const char *custom_id, char *out, size_t outsz);

#endif
