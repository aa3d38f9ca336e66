/* runner.c — the batch runner (see runner.h for the steps).
 *
 * Invariants
 *  1. Every valid request is a job in the store, unique by (batch, custom_id); the batch is named
 *     by the batch file's content digest, so rerunning the same file finds the same jobs and an
 *     edited file is a new batch (whose prefixes still meet the old checkpoints by content). A job
 *     carries its identity (job_identity: the model's id, the parameters that change answers and
 *     its documents by content); a rerun whose identity differs makes it new work (the store
 *     drops the old answer), and a stored answer or error that fails its checksum is recomputed,
 *     never printed.
 *  2. A job's answer exists only once its state is `done` in the store: output.jsonl and the
 *     per-job folders are rebuilt from the store at the end of every run, so a crash at any moment
 *     loses at most the work since the last checkpoint, and rerunning prints the same lines.
 *  3. The shared prefix of a group (its documents, which open every prompt: jobs/chat.h) is computed at
 *     most once per run and checkpointed every `checkpoint_every` chunks at chunk boundaries that
 *     are multiples of `chunk` from position 0, so an interrupted run resumes on the same chunk plan
 *     and gives bitwise the answers an uninterrupted run gives. A job without documents whose own
 *     tokens are a chunk or more is prefilled the same way, as a prefix of its own (own_prefill),
 *     with the cuts a fork's feed would make, so the answer does not depend on which way it went.
 *  4. Nothing here holds more than one group's tokens and states; prompts are token arrays
 *     (4 bytes a token), never activations.
 *  5. An outcome (answer or failure) is recorded under an identity only if it was computed from
 *     the documents that identity names. add_jobs takes every identity before the first group
 *     runs, and a group reads its documents later (hours later, after a long group): so, once
 *     ingest has read them and before anything comes of it, group_check_inputs compares the
 *     documents' stamps taken with each job's identity to their stamps now (jobs/inputs.h: file
 *     identities, ctime included, so a file changed and changed back counts as changed, and so
 *     does one written while ingest read it). A job whose documents changed is released and
 *     re-added under the identity of what is there now (store: running -> queued, then
 *     lh_store_job_add renews it), and the claim loop reads them again; at the third time it
 *     fails, under an identity no run computes again, and the next run tries it anew. Jobs whose
 *     identity names no content (a stream, unreadable documents) are never found done again and
 *     are not checked.
 *
 * Failure isolation: a request that is malformed, over the model's limits or names a missing
 * document fails alone (or with its group, for a document problem); an engine failure fails the
 * group it happened in; only set-up problems (model, store, output folder) stop the run.
 */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */
#include "jobs/runner.h"

#include <archive.h>
#include <limits.h>
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/comm.h"
#include "engine/engine.h"
#include "ingest/ingest.h"
#include "tokenizer/tokenizer.h"
#include "jobs/batch.h"
#include "jobs/chat.h"
#include "jobs/inputs.h"
#include "jobs/outdir.h"
#include "jobs/outnames.h"
#include "jobs/shard.h"
#include "pipeline/pipeline.h"
#include "store/store.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/log.h"
#include "util/testpoint.h"
#include "util/utf8.h"

#ifndef LH_VERSION
#define LH_VERSION "0"
#endif

static volatile sig_atomic_t stop_requested;

void lh_runner_request_stop(void) { stop_requested = 1; }

lh_runner_params lh_runner_default_params(void) {
  lh_runner_params p = {0};
  p.device = "cpu";
  p.chunk = 4096;
  p.checkpoint_every = 1;
  p.max_tokens_default = 256;
  p.shard_count = 1;
  p.max_group = 64;
  p.keep_checkpoints = 4;
  p.progress = LH_PROGRESS_AUTO;
  return p;
}

void lh_runner_request_id(const char *batch_digest, const char *custom_id, int line, char *out, size_t outsz) {
  lh_sha256 s;
  lh_sha256_init(&s);
  lh_sha256_update(&s, batch_digest, strlen(batch_digest) + 1);
  lh_sha256_update(&s, custom_id, strlen(custom_id));
  if (line > 0) { /* a refused line: its own id, even when its custom_id repeats an earlier line's */
    char l[32];
    const int n = snprintf(l, sizeof l, "\nline %d", line);
    lh_sha256_update(&s, l, (size_t)n);
  }
  uint8_t d[32];
  lh_sha256_final(&s, d);
  char hex[65];
  lh_hex(d, 12, hex);
  snprintf(out, outsz, "batch_req_%.24s", hex);
}

void lh_runner_job_dirname(const char *id, char *out, size_t outsz) {
  size_t o = 0, n = strlen(id);
  for (size_t i = 0; i < n && o + 4 < outsz && o < 200; i++) {
    unsigned char c = (unsigned char)id[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
             (c == '.' && i > 0);
    if (ok) out[o++] = (char)c;
    else o += (size_t)snprintf(out + o, outsz - o, "%%%02X", c);
  }
  out[o] = 0;
  if (o >= 200 || strlen(id) * 3 > 200) { /* possibly shortened: make it unique */
    uint8_t d[32];
    lh_sha256_buf(id, n, d);
    char hex[65];
    lh_hex(d, 6, hex);
    if (o > 180) o = 180;
    snprintf(out + o, outsz - o, "~%s", hex);
  }
}

/* ---- per-run context ---- */

typedef struct run {
  const lh_runner_params *p;
  lh_batch batch;
  char batch_digest[65];
  lh_model *model;
  const lh_config *cfg;
  lh_tokenizer *tok;
  lh_chat_format chat;
  lh_store *store;
  lh_store_writer *writer;
  lh_progress *prog;
  int64_t batch_id;
  int64_t *job_ids;   /* [batch.n], 0 for bad lines and other shards */
  struct job_line *by_job; /* [n_by_job] (job id, line index), sorted by job id */
  int n_by_job;
  int todo;           /* requests of this run's shard not already done: the progress's batch */
  lh_plan plan;
  char model_name[256];
  int32_t stop_ids[8];
  int n_stop_ids;
  lh_runner_summary *sum;
  lh_outdir *out;
  lh_status fault;    /* the first failure of the store or the output folder: the run stops */
  int unfinished;     /* write_output: this shard's jobs neither done nor failed, so without a line */
  lh_error fault_err;
  lh_digest_cache doc_cache; /* the store's file digests of documents (kind "doc") */
  char params_digest[65];    /* what every job's identity shares: model and parameters */
  char last_docs_key[65], last_inputs[65]; /* the previous request's documents and their digest */
  lh_inputs_stamp *last_stamps; /* [its n_documents]: the stamps taken with that digest; NULL
                                   when it names no content (a stream, unreadable documents) */
  struct line_check *checks;  /* [batch.n]: what each job's identity was taken from */
} run;

/* What a job's identity was last taken from (add_jobs, or a retry), for group_check_inputs. */
typedef struct line_check {
  lh_inputs_stamp *stamps; /* [n_documents], taken with the documents' digest; NULL when the
                              identity names no content (a stream, unreadable documents): it is
                              this run's alone and never found done again, so nothing to check */
  int tries;               /* reads of its documents that found them changed since */
} line_check;

/* How many times a job's documents may be found changed after they were read before the job
 * fails (its next run tries again). */
#define INPUT_TRIES 3

typedef struct job {
  lh_request *r;
  int64_t id;
  lh_buf after;         /* the rendered messages, which follow the documents */
  lh_i32vec suffix;     /* tokens of `after`: the job's own part of the prompt */
  lh_state *st;         /* its fork of the group's prefix */
  lh_buf text;          /* the answer */
  int cut;              /* text was cut at a stop string */
  int max_tokens;
  int64_t prompt_tokens;
  int64_t own_restored; /* tokens of its suffix restored from a checkpoint (a long suffix: own_prefill) */
  int failed;           /* 1: failed (recorded in the store); -1: not this run's job */
  int recorded;         /* its result is committed to the store */
} job;

static char *render_json_string(cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return s;
}

/* A failure of the store or of the output folder (a full disk, an I/O error, a damaged or locked
 * database) is not the job's: the run stops at once, its unfinished jobs go back to the queue, and
 * a rerun resumes them from their last good checkpoint. The first such failure is kept. */
static void env_fault(run *R, lh_status st, const lh_error *e) {
  if (R->fault != LH_OK) return;
  R->fault = st != LH_OK ? st : LH_EIO;
  R->fault_err = *e;
  R->fault_err.code = R->fault;
}

/* The store keeps a failed job's error as a small JSON object so output.jsonl can be rebuilt with
 * the right status code. */
static lh_status fail_job(run *R, int64_t id, int status, const char *code, const char *msg) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "status_code", status);
  cJSON_AddStringToObject(o, "code", code);
  lh_json_add_text(o, "message", msg);
  char *s = render_json_string(o);
  lh_error e;
  lh_status st = lh_store_job_fail(R->store, id, s ? s : msg, &e);
  free(s);
  if (st == LH_OK) R->sum->failed++;
  else if (st == LH_EBUSY) lh_log_warn("job %lld was taken over by another process: %s", (long long)id, e.msg);
  else env_fault(R, st, &e);
  return st;
}

/* What is never a document, should it lie in a document folder: the output folder and the store
 * with its side files (the rollback journal stays between transactions, its times changing on
 * each). ingest leaves them out of its folder walks (ingest_documents), and so do the digest and
 * the stamps (job_identity, group_check_inputs). */
typedef struct run_skips {
  char side[LH_OUTNAME_STORE_SIDES][4200];
  const char *path[2 + LH_OUTNAME_STORE_SIDES];
} run_skips;

static size_t run_skips_of(const run *R, run_skips *k) {
  k->path[0] = R->p->out_dir;
  k->path[1] = R->sum->db_path;
  for (int t = 0; t < LH_OUTNAME_STORE_SIDES; t++) {
    snprintf(k->side[t], sizeof k->side[t], "%s%s", R->sum->db_path, lh_outname_store_sides[t]);
    k->path[2 + t] = k->side[t];
  }
  return sizeof k->path / sizeof *k->path;
}

/* Jobs with the same model and documents share a prefix (the documents open every prompt). */
static void group_key(run *R, const lh_request *r, char out[65]) {
  char dk[65];
  lh_request_documents_key(r, dk);
  lh_sha256 s;
  lh_sha256_init(&s);
  lh_sha256_update(&s, lh_model_id(R->model), 64);
  lh_sha256_update(&s, dk, 64);
  uint8_t d[32];
  lh_sha256_final(&s, d);
  lh_hex(d, 32, out);
}

static uint64_t str_hash64(const char *s) {
  uint8_t d[32];
  lh_sha256_buf(s, strlen(s), d);
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | d[i];
  return v;
}

/* ---- set-up ---- */

static void collect_stop_ids(run *R) {
  R->n_stop_ids = 0;
  if (R->cfg->eos_token_id >= 0) R->stop_ids[R->n_stop_ids++] = R->cfg->eos_token_id;
  if (R->chat.end_token[0]) {
    int32_t id = lh_tokenizer_token_to_id(R->tok, R->chat.end_token);
    if (id >= 0) R->stop_ids[R->n_stop_ids++] = id;
  }
  /* generation_config.json may list more end ids (int or array). */
  char path[4096];
  lh_path_join(path, sizeof path, lh_model_dir(R->model), "generation_config.json");
  lh_buf b = {0};
  if (lh_file_read_regular(path, 1 << 20, &b, NULL) == LH_OK) {
    cJSON *g = cJSON_ParseWithLength(b.data, b.len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(g, "eos_token_id");
    if (cJSON_IsNumber(e) && R->n_stop_ids < 8) R->stop_ids[R->n_stop_ids++] = (int32_t)e->valuedouble;
    const cJSON *it;
    if (cJSON_IsArray(e))
      cJSON_ArrayForEach(it, e) if (cJSON_IsNumber(it) && R->n_stop_ids < 8) R->stop_ids[R->n_stop_ids++] =
          (int32_t)it->valuedouble;
    cJSON_Delete(g);
  }
  lh_buf_free(&b);
}

/* The max_tokens request r decodes to: its own, else the run's default. */
static int request_max_tokens(const run *R, const lh_request *r) {
  return r->max_tokens > 0 ? r->max_tokens : R->p->max_tokens_default;
}

/* What every job of this run shares in its identity: everything outside the request that changes
 * an answer (answer_settings records the same, readable, for a shard's merge). The model id names
 * every byte of the weights and the config; the tokenizer id every byte of tokenizer.json (it
 * makes the prompt's tokens and the answer's text); the stop ids (the config's, the chat format's
 * end token, generation_config.json's); the version, the chunk plan (where prefill calls are cut),
 * the backend, the CPU attention mode, the chat format and the ranks the model is spread over.
 * The default max_tokens is not in it: it changes only the answers
 * of requests that give none, so job_identity adds each request's effective max_tokens instead.
 * Threads and checkpoint_every are not in it: the answers do not depend on them (docs/design.md,
 * exactness contract). */
static void params_digest(run *R) {
  char buf[1024];
  const lh_comm *world = lh_comm_world();
  int n = snprintf(buf, sizeof buf,
                   "longhaul job identity v3\nmodel %s\ntokenizer %s\nversion %s\nchunk %lld\nbackend %s\n"
                   "cpu_attention %d\nchat %d\nranks %d\nstop",
                   lh_model_id(R->model), lh_tokenizer_id(R->tok), LH_VERSION, (long long)R->plan.chunk,
                   lh_model_backend(R->model), lh_model_cpu_attention(R->model), (int)R->chat.kind,
                   world ? lh_comm_size(world) : 1);
  for (int i = 0; i < R->n_stop_ids; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, " %d", (int)R->stop_ids[i]);
  uint8_t d[32];
  lh_sha256_buf(buf, (size_t)n, d);
  lh_hex(d, 32, R->params_digest);
}

/* What of this run, outside the batch and the model (the record's model_id), changes its answers,
 * each part readable under its own key, for the shard record (jobs/shard.h): `merge` refuses shards
 * whose settings differ. params_digest's parts (keep the two lists alike) and the run's defaults
 * that a job's identity takes for the requests that leave them to it (max_tokens, and
 * --require-documents); NULL when out of memory. */
static cJSON *answer_settings(const run *R) {
  cJSON *o = cJSON_CreateObject();
  const lh_comm *world = lh_comm_world();
  const char *chat = lh_chat_format_name(&R->chat);
  cJSON_AddStringToObject(o, "tokenizer_id", lh_tokenizer_id(R->tok));
  if (chat) cJSON_AddStringToObject(o, "chat_template", chat);
  else cJSON_AddNullToObject(o, "chat_template");
  cJSON *ends = cJSON_AddArrayToObject(o, "end_ids");
  for (int i = 0; i < R->n_stop_ids; i++) cJSON_AddItemToArray(ends, cJSON_CreateNumber(R->stop_ids[i]));
  cJSON_AddStringToObject(o, "version", LH_VERSION);
  cJSON_AddNumberToObject(o, "chunk", (double)R->plan.chunk);
  cJSON_AddStringToObject(o, "device", lh_model_backend(R->model));
  cJSON_AddStringToObject(o, "cpu_attention", lh_cpu_attention_name(lh_model_cpu_attention(R->model)));
  cJSON_AddNumberToObject(o, "ranks", world ? lh_comm_size(world) : 1);
  cJSON_AddNumberToObject(o, "max_tokens", R->p->max_tokens_default);
  cJSON_AddBoolToObject(o, "require_documents", R->p->require_documents);
  return o;
}

/* Inputs named by no content: a digest no run computes twice (this process, this moment, and a
 * count within the process). */
static void unnamed_inputs(const char *why, char out[65]) {
  static unsigned count;
  char nonce[160];
  const int n = snprintf(nonce, sizeof nonce, "%s %ld %ld %u", why, (long)getpid(), (long)time(NULL), count++);
  uint8_t d[32];
  lh_sha256_buf(nonce, (size_t)n, d);
  lh_hex(d, 32, out);
}

/* The identity itself: the run's parameters, the inputs' digest, the effective max_tokens and,
 * for a request with documents under --require-documents, that flag (it turns a document that
 * gives no text from a warning on a 200 into a 400). The flag enters only when it is set, so the
 * identities of runs without it are what they were before it counted. */
static void identity_of_inputs(const run *R, const lh_request *r, const char inputs[65], char out[65]) {
  lh_sha256 s;
  lh_sha256_init(&s);
  lh_sha256_update(&s, R->params_digest, 64);
  lh_sha256_update(&s, inputs, 64);
  char mt[32];
  lh_sha256_update(&s, mt, (size_t)snprintf(mt, sizeof mt, "\nmax_tokens %d\n", request_max_tokens(R, r)));
  static const char require[] = "require_documents\n";
  if (R->p->require_documents && r->n_documents > 0) lh_sha256_update(&s, require, sizeof require - 1);
  uint8_t d[32];
  lh_sha256_final(&s, d);
  lh_hex(d, 32, out);
}

/* A job's identity: the run's parameters, the request's effective max_tokens (its own or the
 * run's default), --require-documents where it applies, and its documents by content (jobs/inputs.h), into out; the documents' stamps
 * taken with their digest into *lc, for group_check_inputs. The rest of the request is pinned
 * by request_json (its line of a batch named by its digest). A missing document is named as
 * missing (jobs/inputs.h): the job fails on it, stays failed while it is missing, and runs once it
 * appears. Documents that cannot be read (an I/O or permission error, a file that kept changing)
 * have no content to name, so, as for a stream, the identity is this run's alone: the job is new
 * work on every run until they can be read, and neither a failure nor an answer stands for
 * inputs nobody could read. Consecutive requests over the same documents share one digest (and
 * its stamps); clear R->last_docs_key to take it anew. LH_ENOMEM is the only error. */
static lh_status job_identity(run *R, const lh_request *r, line_check *lc, char out[65]) {
  char key[65];
  lh_request_documents_key(r, key);
  int stream = 0;
  for (int d = 0; d < r->n_documents; d++) stream |= !strcmp(r->documents[d].resolved, "-");
  const size_t nd = (size_t)(r->n_documents > 0 ? r->n_documents : 1);
  if (stream || !R->last_docs_key[0] || strcmp(key, R->last_docs_key)) {
    free(R->last_stamps);
    R->last_stamps = stream ? NULL : calloc(nd, sizeof *R->last_stamps);
    R->last_docs_key[0] = 0;
    if (!stream && !R->last_stamps) return LH_ENOMEM;
    lh_error e;
    run_skips skip;
    const size_t n_skip = run_skips_of(R, &skip);
    if (lh_inputs_digest_excluding(r, &R->doc_cache, skip.path, n_skip, R->last_inputs, R->last_stamps, &e) !=
        LH_OK) {
      lh_log_warn("line %d ('%s'): %s: the job runs on every run until its documents can be read", r->line,
                  r->custom_id, e.msg);
      unnamed_inputs("unreadable", R->last_inputs);
      free(R->last_stamps);
      R->last_stamps = NULL;
    }
    memcpy(R->last_docs_key, key, sizeof key);
  }
  free(lc->stamps);
  lc->stamps = NULL;
  if (R->last_stamps) {
    if (!(lc->stamps = malloc(nd * sizeof *lc->stamps))) return LH_ENOMEM;
    memcpy(lc->stamps, R->last_stamps, nd * sizeof *lc->stamps);
  }
  identity_of_inputs(R, r, R->last_inputs, out);
  return LH_OK;
}

/* Add (or find) request i's job under identity; *existed as lh_store_job_add's. */
static lh_status put_job(run *R, int i, const char *identity, int *existed, lh_error *err) {
  const lh_request *r = &R->batch.req[i];
  char key[65];
  group_key(R, r, key);
  /* What the store keeps of the request: its line number and custom_id are enough to find it
   * in the batch file again, and the digest pins the file's content. */
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "line", r->line);
  lh_json_add_text(o, "custom_id", r->custom_id);
  cJSON_AddStringToObject(o, "batch_sha256", R->batch_digest);
  char *js = render_json_string(o);
  if (!js) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_store_job_spec spec = {.custom_id = r->custom_id, .request_json = js, .group_key = key,
                            .model_id = lh_model_id(R->model), .identity = identity};
  lh_status st = lh_store_job_add(R->store, R->batch_id, &spec, &R->job_ids[i], existed, err);
  free(js);
  return st;
}

/* Add every valid request of this shard as a job (idempotent), requeueing finished ones on --force,
 * and as new work those whose inputs changed (the store drops their old result) or whose stored
 * result or error fails its checksum. */
static lh_status add_jobs(run *R, lh_error *err) {
  R->job_ids = calloc((size_t)(R->batch.n ? R->batch.n : 1), sizeof *R->job_ids);
  R->checks = calloc((size_t)(R->batch.n ? R->batch.n : 1), sizeof *R->checks);
  if (!R->job_ids || !R->checks) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (int i = 0; i < R->batch.n; i++) {
    lh_request *r = &R->batch.req[i];
    if (r->error.code != LH_OK) continue;
    lh_buf after = {0};
    lh_error e;
    char key[65] = "";
    if (lh_chat_render(&R->chat, r, &after, &e) != LH_OK) {
      r->error = e; /* rendering problems are request errors (reported like malformed lines) */
      lh_error_prefix(&r->error, e.code, "line %d: ", r->line);
      R->batch.n_bad++;
      R->sum->bad_lines++; /* counted and exiting 1 as a malformed line does (it was "0 failed", exit 0) */
      lh_buf_free(&after);
      continue;
    }
    group_key(R, r, key);
    lh_buf_free(&after);
    if (R->p->shard_count > 1 && (int)(str_hash64(key) % (uint64_t)R->p->shard_count) != R->p->shard_index) {
      R->sum->not_in_shard++;
      continue;
    }
    char identity[65];
    if (job_identity(R, r, &R->checks[i], identity) != LH_OK) return lh_error_set(err, LH_ENOMEM, "out of memory");
    int existed = 0;
    lh_status st = put_job(R, i, identity, &existed, err);
    if (st != LH_OK) return st;
    R->sum->requests++;
    if (existed == 2) {
      R->sum->changed++;
    } else if (existed) {
      lh_store_job_info info;
      if (lh_store_job_get(R->store, R->job_ids[i], &info, err) != LH_OK) return err ? err->code : LH_EIO;
      int finished = info.state == LH_JOB_DONE || info.state == LH_JOB_FAILED;
      const int damaged = finished && info.damaged > 0, was_done = info.state == LH_JOB_DONE;
      lh_store_job_info_clear(&info);
      if (damaged) {
        lh_log_warn("line %d ('%s'): its stored %s fails its checksum (the store was damaged): computing it again",
                    r->line, r->custom_id, was_done ? "answer" : "error");
        R->sum->damaged++;
      }
      if (finished && (R->p->force || damaged)) {
        if ((st = lh_store_job_requeue(R->store, R->job_ids[i], err)) != LH_OK) return st;
      } else if (finished) {
        R->sum->skipped_done++;
        if (!was_done) R->sum->skipped_failed++;
      }
    }
  }
  return LH_OK;
}

typedef struct job_line {
  int64_t job;
  int line; /* index in batch.req */
} job_line;

static int cmp_job_line(const void *a, const void *b) {
  const int64_t x = ((const job_line *)a)->job, y = ((const job_line *)b)->job;
  return (x > y) - (x < y);
}

/* The map from job ids to the requests this run added (a lookup per claimed job must not scan
 * the batch: a batch of N lines would cost O(N^2)). */
static lh_status index_jobs(run *R, lh_error *err) {
  R->by_job = malloc((size_t)(R->batch.n ? R->batch.n : 1) * sizeof *R->by_job);
  if (!R->by_job) return lh_error_set(err, LH_ENOMEM, "out of memory");
  R->n_by_job = 0;
  for (int i = 0; i < R->batch.n; i++)
    if (R->job_ids[i]) R->by_job[R->n_by_job++] = (job_line){R->job_ids[i], i};
  qsort(R->by_job, (size_t)R->n_by_job, sizeof *R->by_job, cmp_job_line);
  return LH_OK;
}

static int find_request(const run *R, int64_t job_id) {
  const job_line key = {job_id, 0};
  const job_line *hit = bsearch(&key, R->by_job, (size_t)R->n_by_job, sizeof key, cmp_job_line);
  return hit ? hit->line : -1;
}

/* ---- one group ---- */

typedef struct manifest {
  lh_buf jsonl;
  lh_store_doc *docs;
  char **paths, **shas;
  size_t n, cap;
} manifest;

static void manifest_free(manifest *m) {
  lh_buf_free(&m->jsonl);
  for (size_t i = 0; i < m->n; i++) {
    free(m->paths[i]);
    free(m->shas[i]);
  }
  free(m->docs);
  free(m->paths);
  free(m->shas);
  memset(m, 0, sizeof *m);
}

static lh_status manifest_add(manifest *m, const lh_ingest_entry *e0, int64_t token_offset) {
  lh_ingest_entry e = *e0;
  if (e.token_start >= 0) e.token_start += token_offset, e.token_end += token_offset;
  lh_status st = lh_ingest_entry_json(&e, &m->jsonl);
  if (st) return st;
  if (e.status != LH_ENTRY_OK && e.status != LH_ENTRY_PARTIAL) return LH_OK;
  if (m->n == m->cap) {
    size_t nc = m->cap ? 2 * m->cap : 64;
    lh_store_doc *d = realloc(m->docs, nc * sizeof *d);
    if (d) m->docs = d;
    char **p = realloc(m->paths, nc * sizeof *p);
    if (p) m->paths = p;
    char **h = realloc(m->shas, nc * sizeof *h);
    if (h) m->shas = h;
    if (!d || !p || !h) return LH_ENOMEM;
    m->cap = nc;
  }
  m->paths[m->n] = strndup(e.path, e.path_len);
  m->shas[m->n] = NULL;
  if (e.has_sha256) {
    m->shas[m->n] = malloc(65);
    if (m->shas[m->n]) lh_hex(e.sha256, 32, m->shas[m->n]);
  }
  m->docs[m->n] = (lh_store_doc){.path = m->paths[m->n], .bytes = e.bytes, .sha256_hex = m->shas[m->n],
                                 .tok_start = e.token_start, .tok_end = e.token_end};
  m->n++;
  return LH_OK;
}

/* What a group's documents came to, for its results: each document's ingest summary (entries,
 * documents, skipped and failed entries per reason, notes), and a warning for each document that
 * gave no text (every entry skipped, only empty files, or no entry at all: a gzip of zeros reads
 * as an empty tar). */
typedef struct doc_report {
  cJSON *inputs;   /* [{"path": as written, then lh_ingest_summary_json's fields}] */
  cJSON *warnings; /* ["document PATH: no text: why"] */
  int empty;       /* documents that gave no text */
  int over_context; /* the documents alone passed the model's context; ingest stopped there */
} doc_report;

static void doc_report_free(doc_report *d) {
  cJSON_Delete(d->inputs);
  cJSON_Delete(d->warnings);
  memset(d, 0, sizeof *d);
}

static lh_status doc_report_add(doc_report *d, lh_ingest *ing, const lh_document_input *di) {
  if (!d->inputs && !(d->inputs = cJSON_CreateArray())) return LH_ENOMEM;
  if (!d->warnings && !(d->warnings = cJSON_CreateArray())) return LH_ENOMEM;
  lh_buf sj = {0};
  lh_status st = lh_ingest_summary_json(ing, &sj);
  cJSON *s = st == LH_OK ? cJSON_ParseWithLength(sj.data, sj.len) : NULL;
  lh_buf_free(&sj);
  cJSON *o = s ? cJSON_CreateObject() : NULL;
  if (!o) {
    cJSON_Delete(s);
    return LH_ENOMEM;
  }
  lh_json_add_text(o, "path", di->path);
  for (cJSON *it; (it = s->child);) {
    cJSON_DetachItemViaPointer(s, it);
    cJSON_AddItemToObject(o, it->string, it);
  }
  cJSON_Delete(s);
  cJSON_AddItemToArray(d->inputs, o);
  if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "no_text"))) return LH_OK;
  d->empty++;
  /* the note's reason ("INPUT: no text: WHY"), the document named as the batch wrote it */
  const cJSON *n = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "notes"), 0);
  const char *why = cJSON_GetStringValue(n) ? strstr(cJSON_GetStringValue(n), ": no text: ") : NULL;
  lh_buf line = {0};
  lh_buf_printf(&line, "document %s: no text%s", di->path, why ? why + strlen(": no text") : "");
  cJSON *ws = line.data ? lh_json_text(line.data) : NULL;
  lh_buf_free(&line);
  if (!ws) return LH_ENOMEM;
  cJSON_AddItemToArray(d->warnings, ws);
  return LH_OK;
}

/* Ingest the documents of r (shared by its group), appending tokens to P, entries to man and what
 * each document came to to rep. */
static lh_status ingest_documents(run *R, const lh_request *r, lh_i32vec *P, manifest *man, doc_report *rep,
                                  double *mb, lh_error *err) {
  for (int d = 0; d < r->n_documents; d++) {
    const lh_document_input *di = &r->documents[d];
    lh_ingest_params ip = lh_ingest_default_params();
    ip.tokenizer = R->tok;
    ip.template_text = di->frame;
    size_t ni = 0, ne = 0;
    for (char **g = di->include; g && *g; g++) ni++;
    for (char **g = di->exclude; g && *g; g++) ne++;
    ip.include = (const char *const *)di->include;
    ip.n_include = ni;
    ip.exclude = (const char *const *)di->exclude;
    ip.n_exclude = ne;
    ip.confine_root = R->p->documents_root; /* the batch checked the path; the walk holds to it too */
    run_skips skip;
    ip.n_exclude_paths = run_skips_of(R, &skip);
    ip.exclude_paths = skip.path;
    /* documents that pass the model's context make every request over them fail: refuse them as
     * the tokens come out instead of holding them all first */
    const int64_t limit = R->cfg->max_position_embeddings;
    if (limit > 0) ip.max_tokens = limit > (int64_t)P->len ? limit - (int64_t)P->len : 1;
    lh_ingest *ing = NULL;
    lh_status st = lh_ingest_open(&ip, &ing, err);
    /* opened where it resolves, named as the batch wrote it: the prompt does not depend on how
     * the batch file itself was named */
    if (st == LH_OK) st = lh_ingest_add_path_as(ing, di->resolved, di->path, err);
    if (st != LH_OK) {
      lh_ingest_close(ing);
      return lh_error_prefix(err, st, "document %s: ", di->path);
    }
    int64_t offset = (int64_t)P->len;
    lh_ingest_batch b;
    lh_ingest_stats is;
    lh_ingest_stats_get(ing, &is);
    lh_progress_begin(R->prog, NULL, "ingest", is.source_total > 0 ? is.source_total : 0, "B");
    while ((st = lh_ingest_next(ing, &b, err)) == LH_OK) {
      if (lh_i32vec_append(P, b.tokens, b.n_tokens) != LH_OK) {
        st = lh_error_set(err, LH_ENOMEM, "out of memory holding the prompt's tokens");
        break;
      }
      for (size_t i = 0; i < b.n_entries; i++)
        if ((st = manifest_add(man, &b.entries[i], offset)) != LH_OK) break;
      if (st != LH_OK) break;
      lh_ingest_stats_get(ing, &is);
      lh_testpoint("ingest");
      lh_progress_update(R->prog, is.source_bytes);
      if (b.done) break;
    }
    lh_ingest_stats_get(ing, &is);
    if (st == LH_ELIMIT && ip.max_tokens > 0 && is.tokens > ip.max_tokens) rep->over_context = 1;
    *mb += (double)is.source_bytes / 1e6;
    lh_progress_update(R->prog, is.source_bytes);
    if (st == LH_OK) lh_progress_end(R->prog);
    else lh_progress_stop(R->prog, "failed");
    if (st == LH_OK && doc_report_add(rep, ing, di) != LH_OK)
      st = lh_error_set(err, LH_ENOMEM, "out of memory for the documents' summary");
    lh_ingest_close(ing);
    if (st != LH_OK) return lh_error_prefix(err, st, "document %s: ", di->path);
  }
  return LH_OK;
}

static lh_status tokenize_text(run *R, const lh_buf *b, lh_i32vec *out, lh_error *err) {
  if (!b->len) return LH_OK;
  return lh_tokenizer_encode(R->tok, b->data, b->len, 0, out, err);
}

/* Does text contain a stop string? Returns the cut position or -1. */
static long find_stop(const lh_request *r, const char *text) {
  long cut = -1;
  for (int i = 0; i < r->n_stop; i++) {
    const char *p = strstr(text, r->stop[i]);
    if (p && (cut < 0 || p - text < cut)) cut = p - text;
  }
  return cut;
}

/* OUT/jobs/<name>/{result.json,manifest.jsonl}, each replaced whole (jobs/outdir.h), result.json
 * last: an old result.json that is to change goes first, so whenever result.json is there the
 * manifest beside it is its own, whatever a kill or a full disk cut short. A NULL manifest keeps the
 * file there is (results stored before manifests were kept in the store have none). */
static lh_status put_job_files(run *R, const char *name, const char *result, size_t rlen, const char *manifest,
                               size_t mlen, lh_error *err) {
  char rel[512], path[8400];
  snprintf(rel, sizeof rel, "jobs/%s/result.json", name);
  snprintf(path, sizeof path, "%s/%s", lh_outdir_path(R->out), rel);
  lh_buf old = {0};
  const int same = lh_file_read_regular(path, rlen + 1, &old, NULL) == LH_OK && old.len == rlen &&
                   (!rlen || !memcmp(old.data, result, rlen));
  lh_buf_free(&old);
  lh_status st = same ? LH_OK : lh_outdir_remove(R->out, rel, err);
  snprintf(rel, sizeof rel, "jobs/%s/manifest.jsonl", name);
  snprintf(path, sizeof path, "%s/%s", lh_outdir_path(R->out), rel);
  if (st == LH_OK && (manifest || !lh_is_file(path))) st = lh_outdir_put(R->out, rel, manifest ? manifest : "", mlen, err);
  snprintf(rel, sizeof rel, "jobs/%s/result.json", name);
  if (st == LH_OK && !same) st = lh_outdir_put(R->out, rel, result, rlen, err); /* same: already read, equal */
  return st;
}

static lh_status write_job_files(run *R, const job *J, const char *result_json, const char *manifest, size_t mlen,
                                 lh_error *err) {
  char name[256];
  lh_runner_job_dirname(J->r->custom_id, name, sizeof name);
  return put_job_files(R, name, result_json, strlen(result_json), manifest ? manifest : "", mlen, err);
}

/* libarchive's version string, read once: archive_version_details() rebuilds its static string on
 * every call without freeing the last one (128 bytes lost per job, found by LeakSanitizer on a
 * two-job batch). */
static pthread_once_t g_archive_version_once = PTHREAD_ONCE_INIT;
static char g_archive_version[256];
static void read_archive_version(void) {
  snprintf(g_archive_version, sizeof g_archive_version, "%s", archive_version_details());
}

static void job_free(job *J) {
  lh_buf_free(&J->after);
  lh_i32vec_free(&J->suffix);
  lh_state_free(J->st);
  lh_buf_free(&J->text);
}

/* ---- one group ----
 *
 * A group is the jobs claimed together: they share their documents (the group key), so their prompts share the prefix P. run_group takes it through
 * the pipeline (pipeline/pipeline.h): bind the jobs to their requests, build P (ingest), admit
 * each job (its own suffix, the model's limits), prefill P as a prefix (resume, checkpoints),
 * fork it per job, feed each fork its suffix, decode the forks together, record the results. A
 * job that fails on its own fails alone; a failure of P fails the group; only an interrupt
 * leaves jobs for a rerun.
 */

typedef struct group {
  run *R;
  job *J;
  int n, lead;
  char label[128];
  lh_i32vec P;       /* the shared prefix's tokens */
  manifest man;
  doc_report docs;   /* what the documents came to */
  int64_t docs_tokens, restored, computed;
  double t_ingest, mb, t_prefill;
  int live;          /* jobs admitted */
  lh_fork *forks;    /* [nf]: one per admitted job that forked */
  int *fork_job;     /* [nf]: its index in J */
  int nf;
} group;

static void group_fail(group *g, int status, const char *code, const char *msg) {
  for (int i = 0; i < g->n; i++)
    if (!g->J[i].failed) {
      fail_job(g->R, g->J[i].id, status, code, msg);
      g->J[i].failed = 1;
    }
  g->live = 0;
}

/* Bind each claimed id to its request in this run's batch; ids this run did not add (another
 * shard's, or an edited batch's) are released. Returns the first bound job, or -1. */
static int group_bind(group *g, const int64_t *ids) {
  run *R = g->R;
  int lead = -1;
  for (int i = 0; i < g->n; i++) {
    const int ri = find_request(R, ids[i]);
    g->J[i].id = ids[i];
    if (ri < 0) {
      lh_store_job_release(R->store, ids[i], NULL);
      g->J[i].failed = -1;
      continue;
    }
    g->J[i].r = &R->batch.req[ri];
    lh_chat_render(&R->chat, g->J[i].r, &g->J[i].after, NULL);
    if (lead < 0) lead = i;
  }
  return lead;
}

/* Job J's documents changed after its identity was taken: back to the queue under the identity
 * of what is there now (the claim loop reads them again), or, on its INPUT_TRIES-th time, failed
 * under an identity no run computes again, so that the next run tries it anew (README: a file
 * that kept changing while it was read). J is no longer the group's either way. */
static void job_inputs_changed(group *g, job *J, const char *document) {
  run *R = g->R;
  const int i = (int)(J->r - R->batch.req);
  line_check *lc = &R->checks[i];
  lh_error e;
  char identity[65];
  J->failed = -1;
  lh_status st = lh_store_job_release(R->store, J->id, &e);
  if (st == LH_OK && ++lc->tries < INPUT_TRIES) {
    if (job_identity(R, J->r, lc, identity) != LH_OK) st = lh_error_set(&e, LH_ENOMEM, "out of memory");
    if (st == LH_OK) st = put_job(R, i, identity, NULL, &e);
    if (st == LH_OK)
      lh_progress_note(R->prog, "%s: document %s changed since the job was named by its content: reading it again "
                       "(try %d of %d)",
                       J->r->custom_id, document, lc->tries + 1, INPUT_TRIES);
  } else if (st == LH_OK) {
    char inputs[65], msg[LH_ERROR_MSG_MAX];
    unnamed_inputs("kept changing", inputs);
    identity_of_inputs(R, J->r, inputs, identity);
    free(lc->stamps);
    lc->stamps = NULL;
    snprintf(msg, sizeof msg,
             "document %s kept changing while it was read (%d tries): no answer stands for it; the next run tries "
             "again", document, INPUT_TRIES);
    st = put_job(R, i, identity, NULL, &e);
    if (st == LH_OK) st = lh_store_job_claim(R->store, J->id, &e);
    if (st == LH_OK) {
      lh_progress_note(R->prog, "%s: %s", J->r->custom_id, msg);
      J->failed = 1;
      fail_job(R, J->id, 500, "document_error", msg);
      return;
    }
  }
  if (st == LH_EBUSY) { /* claimed by another process once released: its run reads them */
    lh_progress_note(R->prog, "%s: taken over by another process: %s", J->r->custom_id, e.msg);
    R->sum->taken_over++;
  } else if (st != LH_OK) {
    env_fault(R, st, &e);
  }
}

/* Whether the documents ingest has just read (whatever came of it) are those each job's identity
 * names (invariant 5): the stamps taken with its identity must be the stamps now. A job for which
 * they are not goes back to the queue (job_inputs_changed). Returns whether the group has a job
 * left; g->lead is its first. */
static int group_check_inputs(group *g) {
  run *R = g->R;
  const lh_request *r = g->J[g->lead].r;
  lh_inputs_stamp *now = calloc((size_t)(r->n_documents > 0 ? r->n_documents : 1), sizeof *now);
  lh_error e;
  run_skips skip;
  const size_t n_skip = run_skips_of(R, &skip);
  int known = now && lh_inputs_stamp_now(r, skip.path, n_skip, now, &e) == LH_OK;
  if (!known) lh_log_warn("%s: the documents' files cannot be checked after reading them (%s): taken as changed",
                          g->label, now ? e.msg : "out of memory");
  R->last_docs_key[0] = 0; /* identities taken anew below name the documents as they are now */
  for (int i = 0; i < g->n && !R->fault; i++) {
    job *J = &g->J[i];
    const line_check *lc = J->failed ? NULL : &R->checks[J->r - R->batch.req];
    if (!lc || !lc->stamps) continue;
    int d = 0;
    while (known && d < r->n_documents && !memcmp(&lc->stamps[d], &now[d], sizeof *now)) d++;
    if (known && d == r->n_documents) continue;
    job_inputs_changed(g, J, r->n_documents ? r->documents[d < r->n_documents ? d : 0].path : "?");
  }
  free(now);
  g->lead = -1;
  for (int i = 0; i < g->n && g->lead < 0; i++)
    if (!g->J[i].failed) g->lead = i;
  return g->lead >= 0 && !R->fault;
}

/* P = the documents' tokens. A document problem fails the whole group (400 for the input's
 * fault: missing, unreadable as an archive, over a cap, not a regular file or folder, outside
 * --documents-root; 500 otherwise). A document that gives no text is a warning in the results,
 * or with --require-documents a 400 of the whole group. */
static int group_ingest(group *g) {
  run *R = g->R;
  const job *L = &g->J[g->lead];
  const double t0 = lh_now();
  lh_error e;
  lh_error_clear(&e);
  lh_status st = ingest_documents(R, L->r, &g->P, &g->man, &g->docs, &g->mb, &e);
  g->t_ingest = lh_now() - t0;
  g->docs_tokens = (int64_t)g->P.len;
  if (!group_check_inputs(g)) return 0; /* before any outcome: each stands for what was read */
  if (st == LH_OK) {
    const cJSON *w;
    cJSON_ArrayForEach(w, g->docs.warnings) lh_progress_note(R->prog, "%s: %s", g->label, cJSON_GetStringValue(w));
    if (!g->docs.empty || !R->p->require_documents) return 1;
    /* --require-documents: a document that gave no text fails the jobs that name it */
    lh_buf msg = {0};
    lh_buf_append_str(&msg, "--require-documents: ");
    int k = 0;
    cJSON_ArrayForEach(w, g->docs.warnings) {
      if (k++) lh_buf_append_str(&msg, "; ");
      lh_buf_append_str(&msg, cJSON_GetStringValue(w));
    }
    group_fail(g, 400, "no_document_text", msg.data ? msg.data : "--require-documents: a document gave no text");
    lh_buf_free(&msg);
    return 0;
  }
  if (g->docs.over_context) {
    char msg[LH_ERROR_MSG_MAX + 256];
    snprintf(msg, sizeof msg,
             "request over the model's limits: its documents alone pass the model's context of %lld tokens "
             "(refused while reading them): %s",
             (long long)R->cfg->max_position_embeddings, e.msg);
    group_fail(g, 400, "context_length_exceeded", msg);
    lh_progress_note(R->prog, "%s: %s", g->label, msg);
    return 0;
  }
  const int input =
      st == LH_ENOTFOUND || st == LH_EFORMAT || st == LH_ELIMIT || st == LH_EUNSUPPORTED || st == LH_EINVAL;
  group_fail(g, input ? 400 : 500, "document_error", e.msg);
  lh_progress_note(R->prog, "%s: %s", g->label, e.msg);
  return 0;
}

/* Each job's own suffix and the model's limits; returns how many jobs are admitted. */
static int group_admit(group *g) {
  run *R = g->R;
  const int64_t limit = R->cfg->max_position_embeddings;
  g->live = 0;
  for (int i = 0; i < g->n; i++) {
    job *J = &g->J[i];
    if (J->failed) continue;
    J->max_tokens = request_max_tokens(R, J->r);
    lh_error e;
    if (tokenize_text(R, &J->after, &J->suffix, &e) != LH_OK) {
      fail_job(R, J->id, 500, "tokenizer_error", e.msg);
      J->failed = 1;
      continue;
    }
    J->prompt_tokens = (int64_t)(g->P.len + J->suffix.len);
    if (J->prompt_tokens == 0) {
      fail_job(R, J->id, 400, "invalid_request", "the prompt is empty");
      J->failed = 1;
      continue;
    }
    if (limit > 0 && J->prompt_tokens + J->max_tokens > limit) {
      char msg[512];
      snprintf(msg, sizeof msg,
               "request over the model's limits: %lld prompt tokens (%lld from documents) + max_tokens %d > the "
               "model's context of %lld tokens",
               (long long)J->prompt_tokens, (long long)g->docs_tokens, J->max_tokens, (long long)limit);
      fail_job(R, J->id, 400, "context_length_exceeded", msg);
      lh_progress_note(R->prog, "%s: %s", J->r->custom_id, msg);
      J->failed = 1;
      continue;
    }
    lh_store_job_set_tokens(R->store, J->id, J->prompt_tokens, NULL);
    g->live++;
  }
  return g->live;
}

/* ---- a prefill under a job's claim ----
 *
 * A group's prefix P (group_prefill) and a job's own long prompt (own_prefill) are prefilled the
 * same way, by prefill_tokens: a prefix over the tokens (pipeline/pipeline.h) under one job's id,
 * resumed from the store's longest checkpoint, shown as a prefill phase, checkpointed per the plan
 * and flushed through the writer. After each chunk it checks the claim on that job: a runner that
 * stalled for a whole lease may find its jobs taken over by another process
 * (store/store_jobs.c), and then stops at once rather than compute a prefix whose result the store
 * would refuse. Its callers decide only what the outcome means for their jobs.
 */

typedef struct prefill {
  /* set by the caller */
  const char *label;  /* what progress notes name: the group's label, or the job's custom_id */
  int own;            /* a job's own prompt: shown on a progress line of its own, not the group's */
  int64_t job_id;     /* whose claim is checked after each chunk; the checkpoints' job */
  int64_t counted;    /* leading tokens this run has already counted (the group's P, for own_prefill) */
  /* set by prefill_tokens */
  int64_t restored;   /* tokens past `counted` restored from a checkpoint */
  int64_t computed;   /* tokens computed */
  double seconds;     /* from opening the prefix to the end of its computation */
  run *R;
  volatile sig_atomic_t halt; /* stop the prefill: interrupted, or the claim was lost */
  int lost;           /* another process took the job over (its claim expired) */
} prefill;

/* After each chunk: progress, and whether to go on. */
static void on_prefill_chunk(void *user, int64_t pos) {
  prefill *pr = user;
  lh_progress_update(pr->R->prog, pos);
  if (lh_store_job_check_claim(pr->R->store, pr->job_id, NULL) == LH_EBUSY) pr->lost = 1;
  pr->halt = stop_requested || pr->lost;
}

/* Prefill toks[0..n) (borrowed until *px is closed) as a prefix into *px, adding to the run's
 * tokens_restored and tokens_prefilled. Returns
 *   LH_OK      *px is at the end of toks, its checkpoints flushed;
 *   LH_EBUSY   the claim was lost (noted): the caller leaves its jobs to the process that took them;
 *   LH_EINTR   stopped, checkpointed where it stood; e says why;
 *   otherwise  either the run's fault was taken (the store failed: R->fault), or the engine failed
 *              (noted; e says why) and the caller fails its jobs.
 * *px is NULL on every return but LH_OK. */
static lh_status prefill_tokens(run *R, const int32_t *toks, int64_t n, prefill *pr, lh_prefix **px, lh_error *e) {
  const double t0 = lh_now();
  pr->R = R;
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan = R->plan;
  pp.store = R->store;
  pp.writer = R->writer;
  pp.job_id = pr->job_id;
  pp.hooks = (lh_pipeline_hooks){.progress = on_prefill_chunk, .user = pr, .stop = &pr->halt};
  *px = NULL;
  lh_status st = lh_prefix_open(R->model, toks, n, &pp, px, e);
  if (st != LH_OK) {
    env_fault(R, st, e); /* resuming reads the store (and makes the state) */
    return st;
  }
  const int64_t restored = lh_prefix_restored(*px);
  pr->restored = restored > pr->counted ? restored - pr->counted : 0;
  R->sum->tokens_restored += pr->restored;
  if (pr->restored)
    lh_progress_note(R->prog, "%s: resumed%s from a checkpoint at token %lld of %lld", pr->label,
                     pr->own ? " its own prompt" : "", (long long)restored, (long long)n);
  if (pr->own) lh_progress_job(R->prog, pr->label, 1);
  lh_progress_begin(R->prog, NULL, "prefill", n, "tok");
  lh_progress_prefill(R->prog, restored);
  st = lh_prefix_advance(*px, n, e);
  if (st == LH_OK) lh_progress_end(R->prog);
  else lh_progress_stop(R->prog, pr->lost ? "taken over" : st == LH_EINTR ? "interrupted" : "failed");
  pr->computed = lh_prefix_computed(*px);
  R->sum->tokens_prefilled += pr->computed;
  pr->seconds = lh_now() - t0;
  lh_fault fault = lh_prefix_fault(*px);
  if (st == LH_OK && R->writer && (st = lh_store_writer_flush(R->writer, e)) != LH_OK) fault = LH_FAULT_STORE;
  if (st == LH_OK) return LH_OK;
  if (st == LH_EINTR && pr->lost) {
    lh_progress_note(R->prog, "%s: taken over by another process after a stall; left to it", pr->label);
    st = LH_EBUSY;
  } else if (st != LH_EINTR && fault == LH_FAULT_STORE) {
    env_fault(R, st, e);
  } else if (st != LH_EINTR) {
    lh_progress_note(R->prog, "%s: %s", pr->label, e->msg);
  }
  lh_prefix_close(*px);
  *px = NULL;
  return st;
}

/* J, whose claim another process took over: left to it, neither failed nor answered here. */
static void leave_job(run *R, job *J) {
  if (J->failed) return;
  J->failed = -1;
  R->sum->taken_over++;
}

/* Prefill P (resuming from the store, checkpointing per the plan) into *px. LH_OK, LH_EINTR, or
 * LH_OK with *px NULL: the group failed, was taken over, or the run's fault was taken. */
static lh_status group_prefill(group *g, lh_prefix **px, lh_error *err) {
  run *R = g->R;
  prefill pr = {.label = g->label, .job_id = g->J[g->lead].id};
  lh_error e;
  const lh_status st = prefill_tokens(R, g->P.data, (int64_t)g->P.len, &pr, px, &e);
  g->restored = pr.restored;
  g->computed = pr.computed;
  g->t_prefill = pr.seconds;
  if (st == LH_EINTR) return lh_error_set(err, LH_EINTR, "%s", e.msg);
  if (st == LH_EBUSY) {
    for (int i = 0; i < g->n; i++) leave_job(R, &g->J[i]);
  } else if (st != LH_OK && !R->fault) {
    group_fail(g, 500, "engine_error", e.msg);
  } else if (st == LH_OK && g->live > 1) {
    R->sum->tokens_shared += (int64_t)g->P.len;
  }
  return LH_OK;
}

/* lh_decode_params.on_token: the answer's text so far, cut at the first stop string. */
static int on_token(void *user, int i, lh_fork *f) {
  group *g = user;
  job *J = &g->J[g->fork_job[i]];
  if (!J->r->n_stop) return 0;
  lh_buf_clear(&J->text);
  lh_tokenizer_decode(g->R->tok, f->tokens.data, f->tokens.len, 1, &J->text, NULL);
  const long cut = find_stop(J->r, J->text.data ? J->text.data : "");
  if (cut < 0) return 0;
  J->text.len = (size_t)cut;
  J->text.data[cut] = 0;
  J->cut = 1;
  return 1;
}

static void on_decoded(void *user, int64_t generated) { lh_progress_update(((group *)user)->R->prog, generated); }

/* A job's own prefill: its prompt as a prefix of its own, for a request without documents whose
 * own tokens are a chunk or more (a long body.prompt or messages): it shows its progress,
 * checkpoints per the plan (a kill loses at most checkpoint_every chunks of it) and resumes from
 * the store, where a fork's feed does none of these. The cuts are the feed's (multiples of chunk
 * from position 0: pipeline.h), so the answer is bitwise the same either way. With documents the
 * suffix is still fed to a fork of P: starting a prefix of its own would restore P's K/V from the
 * store for every job (40 GB per million tokens for MiniMax-Text-01) where a fork is free. The
 * code below holds for a P of any length.
 *
 * J->st at the end of its prompt. LH_OK, also when J's claim was lost on the way (J is then left to
 * the process that took it: failed = -1, no state); LH_EINTR when stopped (checkpointed where it
 * stood); any other status with J failed or the run's fault taken. */
static lh_status own_prefill(group *g, job *J, lh_error *err) {
  run *R = g->R;
  const size_t n = g->P.len + J->suffix.len;
  int32_t *all = malloc(n * sizeof *all);
  if (!all) {
    lh_error_set(err, LH_ENOMEM, "out of memory for a prompt of %zu tokens", n);
    fail_job(R, J->id, 500, "engine_error", err->msg);
    J->failed = 1;
    return LH_ENOMEM;
  }
  if (g->P.len) memcpy(all, g->P.data, g->P.len * sizeof *all);
  memcpy(all + g->P.len, J->suffix.data, J->suffix.len * sizeof *all);
  prefill pr = {.label = J->r->custom_id, .own = 1, .job_id = J->id, .counted = (int64_t)g->P.len};
  lh_prefix *px = NULL;
  lh_error e;
  const lh_status ps = prefill_tokens(R, all, (int64_t)n, &pr, &px, &e);
  J->own_restored = pr.restored;
  const lh_status st = ps == LH_OK ? lh_prefix_fork(px, &J->st, &e) : ps;
  lh_prefix_close(px);
  free(all);
  if (st == LH_EINTR) return lh_error_set(err, LH_EINTR, "%s", e.msg);
  if (ps == LH_EBUSY) {
    leave_job(R, J);
    return LH_OK;
  }
  if (st != LH_OK && !R->fault) {
    fail_job(R, J->id, 500, "engine_error", e.msg);
    J->failed = 1;
  }
  return st;
}

/* Fork P per admitted job, feed each fork its suffix (no documents and a chunk or more: own_prefill),
 * decode them together. LH_OK (jobs that failed have failed alone), LH_EINTR, or LH_ENOMEM. */
static lh_status group_decode(group *g, const lh_prefix *px, lh_error *err) {
  run *R = g->R;
  g->forks = calloc((size_t)g->n, sizeof *g->forks);
  g->fork_job = calloc((size_t)g->n, sizeof *g->fork_job);
  if (!g->forks || !g->fork_job) return lh_error_set(err, LH_ENOMEM, "out of memory for %d forks", g->n);
  lh_pipeline_hooks quiet = {.stop = &stop_requested};
  int own = 0; /* an own_prefill showed a job of its own on the progress display */
  for (int i = 0; i < g->n; i++) {
    job *J = &g->J[i];
    if (J->failed) continue;
    lh_error e;
    if (R->store && !g->P.len && (int64_t)J->suffix.len >= R->plan.chunk) {
      own = 1;
      lh_status st = own_prefill(g, J, &e);
      if (st == LH_EINTR) return lh_error_set(err, LH_EINTR, "%s", e.msg);
      if (R->fault) return LH_OK;
      if (st != LH_OK || J->failed) continue;
    } else {
      lh_status st = lh_prefix_fork(px, &J->st, &e);
      if (st == LH_OK) st = lh_pipeline_feed(J->st, J->suffix.data, (int64_t)J->suffix.len, &R->plan, &quiet, NULL, &e);
      if (st == LH_EINTR) return lh_error_set(err, LH_EINTR, "%s", e.msg);
      R->sum->tokens_prefilled += (int64_t)J->suffix.len;
      if (st != LH_OK) {
        fail_job(R, J->id, 500, "engine_error", e.msg);
        J->failed = 1;
        continue;
      }
    }
    const lh_request *r = J->r;
    g->forks[g->nf] = (lh_fork){
        .state = J->st,
        .max_tokens = J->max_tokens,
        .sampler = {.temperature = (float)r->temperature, .top_p = (float)r->top_p, .top_k = 0,
                    .seed = r->has_seed ? r->seed : str_hash64(r->custom_id)}};
    g->fork_job[g->nf++] = i;
  }
  lh_decode_params dp = {.stop_ids = R->stop_ids, .n_stop_ids = R->n_stop_ids,
                         .context_limit = R->cfg->max_position_embeddings, .on_token = on_token,
                         .progress = on_decoded, .user = g, .stop = &stop_requested};
  if (own) lh_progress_job(R->prog, g->J[g->lead].r->custom_id, g->n); /* the group's again for its decode */
  int64_t most = 0; /* the decode's bound: every fork to its max_tokens */
  for (int f = 0; f < g->nf; f++) most += g->forks[f].max_tokens;
  lh_progress_begin(R->prog, NULL, "decode", most, "tok");
  lh_status st = lh_decode_forks(g->forks, g->nf, &dp, err);
  if (st == LH_OK) lh_progress_end(R->prog);
  else lh_progress_stop(R->prog, st == LH_EINTR ? "interrupted" : "failed");
  for (int f = 0; f < g->nf; f++) {
    const lh_fork *F = &g->forks[f];
    job *J = &g->J[g->fork_job[f]];
    R->sum->tokens_decoded += (int64_t)F->tokens.len;
    if (F->status != LH_OK) {
      fail_job(R, J->id, 500, "engine_error", F->err.msg);
      J->failed = 1;
    } else if (F->finish != LH_FINISH_NONE && !J->cut) {
      lh_tokenizer_decode(R->tok, F->tokens.data, F->tokens.len, 1, &J->text, NULL);
    }
  }
  return st;
}

static char *result_json(const group *g, const job *J, const lh_fork *F) {
  const run *R = g->R;
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "custom_id", J->r->custom_id);
  cJSON_AddStringToObject(o, "status", "done");
  cJSON_AddItemToObject(o, "warnings", g->docs.warnings ? cJSON_Duplicate(g->docs.warnings, 1) : cJSON_CreateArray());
  /* the answer as text is valid UTF-8 whatever bytes the model chose (each invalid sequence one
   * U+FFFD, as HF tokenizers' decode); the ids are there for whoever needs the exact bytes */
  lh_buf answer = {0};
  lh_utf8_replace(&answer, J->text.data ? J->text.data : "", J->text.len, NULL);
  cJSON_AddStringToObject(o, "answer", answer.data ? answer.data : "");
  lh_buf_free(&answer);
  cJSON_AddItemToObject(o, "completion_token_ids", cJSON_CreateIntArray(F->tokens.data, (int)F->tokens.len));
  cJSON_AddStringToObject(o, "finish_reason", lh_finish_name(F->finish));
  cJSON_AddStringToObject(o, "endpoint", J->r->endpoint == LH_EP_CHAT ? "/v1/chat/completions" : "/v1/completions");
  lh_json_add_text(o, "model", R->model_name);
  cJSON_AddNumberToObject(o, "created", (double)time(NULL));
  cJSON *t = cJSON_AddObjectToObject(o, "tokens");
  cJSON_AddNumberToObject(t, "prompt", (double)J->prompt_tokens);
  cJSON_AddNumberToObject(t, "documents", (double)g->docs_tokens);
  cJSON_AddNumberToObject(t, "shared_prefix", (double)g->P.len);
  cJSON_AddNumberToObject(t, "own_suffix", (double)J->suffix.len);
  cJSON_AddNumberToObject(t, "completion", (double)F->tokens.len);
  /* cached: the prompt tokens this request did not compute. The group's prefix is computed once,
   * after what a checkpoint restored; its first request pays for that part, the others reuse it. */
  cJSON_AddNumberToObject(t, "cached", (double)(g->restored + (F == &g->forks[0] ? 0 : g->computed) + J->own_restored));
  /* per document: entries, documents, skipped and failed entries per reason, notes */
  cJSON_AddItemToObject(o, "ingest", g->docs.inputs ? cJSON_Duplicate(g->docs.inputs, 1) : cJSON_CreateArray());
  cJSON *c = cJSON_AddObjectToObject(o, "cache");
  cJSON_AddBoolToObject(c, "hit", g->restored > 0);
  cJSON_AddNumberToObject(c, "tokens_reused", (double)g->restored);
  cJSON_AddNumberToObject(c, "prefix_tokens_computed", (double)g->computed);
  cJSON_AddNumberToObject(c, "requests_sharing_prefix", g->live);
  cJSON *tm = cJSON_AddObjectToObject(o, "timings_s");
  cJSON_AddNumberToObject(tm, "ingest", g->t_ingest);
  cJSON_AddNumberToObject(tm, "prefill", g->t_prefill);
  cJSON_AddNumberToObject(tm, "decode", F->seconds);
  cJSON *rt = cJSON_AddObjectToObject(o, "rates");
  cJSON_AddNumberToObject(rt, "ingest_mb_per_s", g->t_ingest > 0 ? g->mb / g->t_ingest : 0);
  cJSON_AddNumberToObject(rt, "prefill_tokens_per_s", g->t_prefill > 0 ? (double)g->computed / g->t_prefill : 0);
  cJSON_AddNumberToObject(rt, "decode_tokens_per_s", F->seconds > 0 ? (double)F->tokens.len / F->seconds : 0);
  cJSON *s = cJSON_AddObjectToObject(o, "store");
  lh_json_add_text(s, "path", R->sum->db_path);
  cJSON_AddNumberToObject(s, "job_id", (double)J->id);
  cJSON *m = cJSON_AddObjectToObject(o, "engine");
  lh_json_add_text(m, "model_dir", lh_model_dir(R->model));
  cJSON_AddStringToObject(m, "model_id", lh_model_id(R->model));
  cJSON_AddStringToObject(m, "tokenizer_id", lh_tokenizer_id(R->tok));
  cJSON_AddStringToObject(m, "backend", lh_model_backend(R->model));
  cJSON_AddNumberToObject(m, "chunk", (double)R->plan.chunk);
  cJSON *v = cJSON_AddObjectToObject(o, "versions");
  cJSON_AddStringToObject(v, "longhaul", LH_VERSION);
  cJSON_AddStringToObject(v, "sqlite", sqlite3_libversion());
  pthread_once(&g_archive_version_once, read_archive_version);
  cJSON_AddStringToObject(v, "libarchive", g_archive_version);
  return render_json_string(o);
}

/* Record each finished job of the group: every answer in the store first (an answer exists once
 * committed), then the jobs' files. The group's forks were decoded together, so all its answers
 * are computed before the first is recorded: a failure of the output folder (a full disk; the
 * store, through --db, may be on another with room) stops the run only once they are all in the
 * store, and the rerun, which rebuilds every job folder from the store (write_output), computes
 * none of them again. A kill between a commit and the files is mended the same way. */
static void group_record(group *g) {
  run *R = g->R;
  char **rj = calloc((size_t)(g->nf ? g->nf : 1), sizeof *rj); /* [nf]: the recorded jobs' result.json */
  if (!rj) {
    lh_error e;
    lh_error_set(&e, LH_ENOMEM, "out of memory recording the answers of %s", g->label);
    env_fault(R, LH_ENOMEM, &e);
    return;
  }
  for (int f = 0; f < g->nf && !R->fault; f++) {
    const lh_fork *F = &g->forks[f];
    job *J = &g->J[g->fork_job[f]];
    if (J->failed || F->finish == LH_FINISH_NONE) continue;
    lh_error e;
    lh_error_set(&e, LH_ENOMEM, "out of memory");
    char *js = result_json(g, J, F);
    lh_status s = js ? lh_store_job_set_documents(R->store, J->id, g->man.docs, g->man.n, &e) : LH_ENOMEM;
    if (s == LH_OK)
      s = lh_store_job_done(R->store, J->id, js, g->man.jsonl.data ? g->man.jsonl.data : "", g->man.jsonl.len, &e);
    if (s == LH_OK) {
      lh_testpoint("commit");
      J->recorded = 1;
      R->sum->done++;
      rj[f] = js;
      continue;
    }
    free(js);
    if (s == LH_EBUSY) {
      lh_progress_note(R->prog, "%s: taken over by another process; its result is theirs: %s", J->r->custom_id, e.msg);
      R->sum->taken_over++;
    } else {
      env_fault(R, s, &e);
    }
  }
  for (int f = 0; f < g->nf; f++) {
    if (rj[f] && !R->fault) {
      lh_error e;
      const lh_status s = write_job_files(R, &g->J[g->fork_job[f]], rj[f], g->man.jsonl.data, g->man.jsonl.len, &e);
      if (s != LH_OK) env_fault(R, s, &e);
    }
    free(rj[f]);
  }
  free(rj);
}

static void group_free(group *g) {
  for (int i = 0; i < g->n; i++) job_free(&g->J[i]);
  for (int f = 0; f < g->nf; f++) lh_fork_clear(&g->forks[f]);
  free(g->J);
  free(g->forks);
  free(g->fork_job);
  lh_i32vec_free(&g->P);
  manifest_free(&g->man);
  doc_report_free(&g->docs);
}

/* Run one claimed group: ids[0..n) share their documents. */
static lh_status run_group(run *R, const int64_t *ids, int n, lh_error *err) {
  group g = {.R = R, .n = n, .J = calloc((size_t)n, sizeof(job))};
  if (!g.J) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_prefix *px = NULL;
  lh_status st = LH_OK;
  if ((g.lead = group_bind(&g, ids)) < 0) goto out;
  if (n > 1) snprintf(g.label, sizeof g.label, "%s +%d", g.J[g.lead].r->custom_id, n - 1);
  else snprintf(g.label, sizeof g.label, "%s", g.J[g.lead].r->custom_id);
  lh_progress_job(R->prog, g.J[g.lead].r->custom_id, n);
  if (!group_ingest(&g) || R->fault || !group_admit(&g) || R->fault) goto out;
  if ((st = group_prefill(&g, &px, err)) != LH_OK || !px) goto out;
  if ((st = group_decode(&g, px, err)) != LH_OK || R->fault) goto out;
  group_record(&g);
out:
  if (st == LH_OK && R->fault) st = R->fault;
  if (st == LH_EINTR || R->fault) { /* claims go back; the checkpoints are committed; a rerun resumes */
    for (int i = 0; i < n; i++)
      if (!g.J[i].failed && !g.J[i].recorded) lh_store_job_release(R->store, g.J[i].id, NULL);
    if (R->writer) lh_store_writer_flush(R->writer, NULL);
    if (st == LH_EINTR)
      lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume from the last checkpoint");
  }
  lh_prefix_close(px);
  group_free(&g);
  return st;
}

/* ---- the output files, rebuilt from the store ----
 *
 * At the end of every run (interrupted, stopped by a fault, or finished) output.jsonl and
 * errors.jsonl are written anew from the store in batch order, and every done job's folder is
 * made to hold its stored result and manifest: a kill after a commit, a full output disk or a
 * deleted file is mended by the next run. Files that already hold the right bytes are not
 * rewritten.
 */

/* OpenAI's error file line: {"id", "custom_id", "response": null, "error": {"code", "message"}}. */
static lh_status error_line(lh_buf *errs, const char *custom_id, const char *rid, const char *code, const char *msg) {
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "id", rid);
  lh_json_add_text(o, "custom_id", custom_id);
  cJSON_AddNullToObject(o, "response");
  cJSON *e = cJSON_AddObjectToObject(o, "error");
  cJSON_AddStringToObject(e, "code", code);
  lh_json_add_text(e, "message", msg);
  char *line = render_json_string(o);
  lh_status st = line ? lh_buf_append_str(errs, line) : LH_ENOMEM;
  if (st == LH_OK) st = lh_buf_append(errs, "\n", 1);
  free(line);
  return st;
}

/* A done job: its output line, and its folder brought in line with the store. */
static lh_status done_line(run *R, const lh_request *r, int64_t job, const char *rid, lh_buf *out, lh_error *err) {
  lh_buf js = {0}, man = {0};
  lh_status st = lh_store_job_result(R->store, job, &js, &man, err);
  cJSON *o = st == LH_OK ? cJSON_ParseWithLength(js.data, js.len) : NULL;
  if (o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    lh_completion c = {
        .text = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "answer")),
        .finish_reason = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "finish_reason")),
        .prompt_tokens = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "prompt")),
        .completion_tokens = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "completion")),
        .cached_tokens = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(t, "cached")),
        .created = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(o, "created")),
        /* the model that answered, whatever the request named (README, "Outputs") */
        .model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "model"))};
    /* the result's warnings go on the output line too */
    const char *warn[16];
    const cJSON *w;
    cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(o, "warnings")) {
      if (cJSON_IsString(w) && c.n_warnings < (int)(sizeof warn / sizeof *warn)) warn[c.n_warnings++] = w->valuestring;
    }
    c.warnings = warn;
    if (!c.text) c.text = "";
    if (!c.finish_reason) c.finish_reason = "stop";
    st = lh_output_success(out, r, rid, &c);
    cJSON_Delete(o);
    char name[256], rel[512];
    lh_runner_job_dirname(r->custom_id, name, sizeof name);
    if (st == LH_OK) st = put_job_files(R, name, js.data, js.len, man.len ? man.data : NULL, man.len, err);
    snprintf(rel, sizeof rel, "jobs/%s", name);
    if (st == LH_OK) st = lh_outdir_sweep(R->out, rel, NULL, NULL, err);
  } else if (st == LH_OK) {
    st = lh_output_error(out, r->custom_id, rid, 500, "internal_error", "the stored result is not valid JSON");
  }
  lh_buf_free(&js);
  lh_buf_free(&man);
  return st;
}

/* A job that is not done (failed, requeued for new inputs or a damaged answer, still running
 * elsewhere) has no files: the result.json and manifest.jsonl an earlier answer left in its folder
 * answer inputs that are gone, and output.jsonl no longer has that answer. */
static lh_status clear_job_files(run *R, const lh_request *r, lh_error *err) {
  static const char *const files[] = {"result.json", "manifest.jsonl", ""};
  char name[256], rel[512];
  lh_runner_job_dirname(r->custom_id, name, sizeof name);
  lh_status st = LH_OK;
  for (size_t k = 0; k < sizeof files / sizeof *files && st == LH_OK; k++) {
    snprintf(rel, sizeof rel, "jobs/%s%s%s", name, *files[k] ? "/" : "", files[k]);
    st = lh_outdir_remove(R->out, rel, err); /* "": the folder itself, once empty */
  }
  return st;
}

static int cmp_str_ptr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static lh_status write_output(run *R, lh_error *err) {
  lh_buf out = {0}, errs = {0};
  lh_status st = LH_OK;
  /* the custom_ids of the valid lines (this shard's or another's): their folders are theirs, so a
   * refused line that repeats one leaves it alone */
  const char **valid = malloc((size_t)(R->batch.n ? R->batch.n : 1) * sizeof *valid);
  size_t n_valid = 0;
  if (!valid) return lh_error_set(err, LH_ENOMEM, "out of memory");
  for (int i = 0; i < R->batch.n; i++)
    if (R->batch.req[i].error.code == LH_OK) valid[n_valid++] = R->batch.req[i].custom_id;
  qsort(valid, n_valid, sizeof *valid, cmp_str_ptr);
  for (int i = 0; i < R->batch.n && st == LH_OK; i++) {
    const lh_request *r = &R->batch.req[i];
    char rid[64];
    lh_runner_request_id(R->batch_digest, r->custom_id, r->error.code != LH_OK ? r->line : 0, rid, sizeof rid);
    if (r->error.code != LH_OK) { /* refused: not answered now, so no files (as a failed job) */
      st = lh_output_error(&out, r->custom_id, rid, 400, "invalid_request", r->error.msg);
      if (st == LH_OK) st = error_line(&errs, r->custom_id, rid, "invalid_request", r->error.msg);
      if (st == LH_OK && !r->custom_id_made && !bsearch(&r->custom_id, valid, n_valid, sizeof *valid, cmp_str_ptr))
        st = clear_job_files(R, r, err);
      continue;
    }
    if (!R->job_ids[i]) continue; /* another shard's */
    lh_store_job_info info;
    if ((st = lh_store_job_get(R->store, R->job_ids[i], &info, err)) != LH_OK) break;
    if (info.damaged > 0 && (info.state == LH_JOB_DONE || info.state == LH_JOB_FAILED)) {
      /* damaged since this run began (add_jobs requeues what was damaged before): never printed */
      char msg[512];
      snprintf(msg, sizeof msg, "the stored %s of this request fails its checksum (the store was damaged after it "
               "was written); rerun the same command to compute it again",
               info.state == LH_JOB_DONE ? "answer" : "error");
      lh_log_warn("line %d ('%s'): %s", r->line, r->custom_id, msg);
      st = lh_output_error(&out, r->custom_id, rid, 500, "internal_error", msg);
      if (st == LH_OK) st = error_line(&errs, r->custom_id, rid, "internal_error", msg);
      if (st == LH_OK) st = clear_job_files(R, r, err);
    } else if (info.state == LH_JOB_DONE) {
      st = done_line(R, r, R->job_ids[i], rid, &out, err);
    } else if (info.state == LH_JOB_FAILED) {
      cJSON *o = info.error ? cJSON_Parse(info.error) : NULL;
      const char *code = o ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "code")) : NULL;
      const char *msg = o ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message")) : NULL;
      const cJSON *sc = o ? cJSON_GetObjectItemCaseSensitive(o, "status_code") : NULL;
      if (!code) code = "internal_error";
      if (!msg) msg = info.error ? info.error : "failed";
      st = lh_output_error(&out, r->custom_id, rid, cJSON_IsNumber(sc) ? (int)sc->valuedouble : 500, code, msg);
      if (st == LH_OK) st = error_line(&errs, r->custom_id, rid, code, msg);
      if (st == LH_OK) st = clear_job_files(R, r, err);
      cJSON_Delete(o);
    } else { /* queued or running: released by a stopped run, or another process's claim */
      st = clear_job_files(R, r, err);
      const char *pid = info.owner ? strrchr(info.owner, ' ') : NULL; /* owner: "host pid" */
      if (!R->unfinished++ && pid)
        snprintf(R->sum->elsewhere_owner, sizeof R->sum->elsewhere_owner, "pid %s on %.*s", pid + 1,
                 (int)(pid - info.owner), info.owner);
    }
    lh_store_job_info_clear(&info);
  }
  const char *outname = strrchr(R->sum->output_path, '/') + 1, *errname = strrchr(R->sum->errors_path, '/') + 1;
  if (st == LH_OK) st = lh_outdir_put(R->out, outname, out.data ? out.data : "", out.len, err);
  if (st == LH_OK) R->sum->output_written = 1;
  if (st == LH_OK) st = lh_outdir_put(R->out, errname, errs.data ? errs.data : "", errs.len, err);
  if (st == LH_OK) st = lh_outdir_sweep(R->out, "", outname, NULL, err);
  if (st == LH_OK) st = lh_outdir_sweep(R->out, "", errname, NULL, err);
  if (st == LH_OK && R->p->shard_count > 1 && strcmp(R->p->batch_path, "-")) {
    /* the record that lets `longhaul merge OUT` find and check the batch (a batch read from
     * standard input has no path: merge needs --batch then) */
    char rec[64];
    lh_outname_build(LH_OUTNAME_RECORD, R->p->shard_index, R->p->shard_count, rec, sizeof rec);
    lh_buf_clear(&out);
    cJSON *settings = answer_settings(R);
    st = settings ? lh_shard_record_render(R->p->batch_path, R->batch_digest, lh_model_id(R->model), settings,
                                           R->p->shard_index, R->p->shard_count, &out, err)
                  : lh_error_set(err, LH_ENOMEM, "out of memory");
    cJSON_Delete(settings);
    if (st == LH_OK) st = lh_outdir_put(R->out, rec, out.data, out.len, err);
  }
  lh_buf_free(&out);
  lh_buf_free(&errs);
  free(valid);
  return st;
}

/* ---- the run ---- */

/* Where a run writes: OUT/output.jsonl, errors.jsonl, longhaul.db and its lock, or the shard's own
 * (jobs/outnames.h). */
static void run_paths(const lh_runner_params *p, lh_runner_summary *sum, char *lock, size_t lock_n) {
  const int i = p->shard_index, n = p->shard_count;
  char name[64];
  lh_outname_build(LH_OUTNAME_OUTPUT, i, n, name, sizeof name);
  snprintf(sum->output_path, sizeof sum->output_path, "%s/%s", p->out_dir, name);
  lh_outname_build(LH_OUTNAME_ERRORS, i, n, name, sizeof name);
  snprintf(sum->errors_path, sizeof sum->errors_path, "%s/%s", p->out_dir, name);
  lh_outname_build(LH_OUTNAME_STORE, i, n, name, sizeof name);
  if (p->db_path) snprintf(sum->db_path, sizeof sum->db_path, "%s", p->db_path);
  else snprintf(sum->db_path, sizeof sum->db_path, "%s/%s", p->out_dir, name);
  lh_outname_build(LH_OUTNAME_LOCK, i, n, lock, lock_n);
}

/* A batch file that is one of the files the run writes (OUT/output.jsonl after a copy, say) would be
 * replaced by the run's output and lost: LH_EINVAL naming both, before anything is created. */
static lh_status check_batch_not_output(const lh_runner_params *p, const lh_runner_summary *sum, lh_error *err) {
  if (!strcmp(p->batch_path, "-")) return LH_OK;
  char batch[PATH_MAX], out[PATH_MAX], db[PATH_MAX];
  if (!realpath(p->batch_path, batch)) return LH_OK; /* lh_batch_load names what is wrong with it */
  if (realpath(sum->db_path, db) && !strcmp(batch, db))
    return lh_error_set(err, LH_EINVAL, "the batch file %s is the store %s; pass the batch file", p->batch_path,
                        sum->db_path);
  if (!realpath(p->out_dir, out)) return LH_OK; /* no output folder yet: the batch is not in it */
  const size_t n = strlen(out);
  if (strncmp(batch, out, n) || batch[n] != '/' || !lh_outname_owned(batch + n + 1)) return LH_OK;
  return lh_error_set(err, LH_EINVAL, "the batch file %s is %s/%s, which the run writes over; move the batch out of "
                      "the output folder or give it another name", p->batch_path, p->out_dir, batch + n + 1);
}

/* path resolved (symbolic links, ".", "..") into out, PATH_MAX bytes: realpath when it is there;
 * otherwise, its final component not existing yet, realpath of its folder and that name (a
 * symbolic link to nothing taken as where it points, up to a few hops: a store opened through it
 * is created there). 0 when the folder does not resolve either. */
static int resolve_may_not_exist(const char *path, char *out) {
  char cur[PATH_MAX], link[PATH_MAX];
  snprintf(cur, sizeof cur, "%s", path);
  for (int hop = 0; hop < 8; hop++) {
    if (realpath(cur, out)) return 1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", cur);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : cur;
    if (slash == dir) dir[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    if (!*base || !realpath(dir, out)) return 0;
    const ssize_t n = readlink(cur, link, sizeof link - 1);
    if (n <= 0) {
      const size_t k = strlen(out);
      return snprintf(out + k, PATH_MAX - k, "%s%s", k > 1 ? "/" : "", base) < (int)(PATH_MAX - k);
    }
    link[n] = 0;
    if (link[0] == '/') snprintf(cur, sizeof cur, "%s", link);
    else if (snprintf(cur, sizeof cur, "%s/%s", out, link) >= (int)sizeof cur) return 0;
  }
  return 0;
}

/* A --db that is, or lies under, a path the run writes in OUT (its output or errors file, a
 * shard's, the lock, a job's folder: jobs/outnames.h) would be written over or renamed over at the
 * end of the run, destroying the store: LH_EINVAL naming it, before the store is opened. Both
 * paths are resolved, so OUT/./errors.jsonl, a symbolically linked OUT or a link to such a file
 * are caught. The stores' own names there (OUT/longhaul.db, the default, and the shards') are
 * fine. OUT must exist (lh_outdir_open made it): only then do both resolve, however deep the
 * folders OUT names that were not there (a refused run removes those it made: lh_outdir_abandon). */
static lh_status check_db_not_output(const lh_runner_params *p, lh_error *err) {
  char db[PATH_MAX], out[PATH_MAX];
  if (!p->db_path || !resolve_may_not_exist(p->db_path, db) || !realpath(p->out_dir, out)) return LH_OK;
  const size_t n = strlen(out);
  const char *rel = db + n + (n > 1);
  if (strncmp(db, out, n) || (n > 1 && db[n] != '/') || !*rel) return LH_OK;
  char store[64];
  int i, k;
  lh_outname_build(LH_OUTNAME_STORE, 0, 1, store, sizeof store);
  if (!strcmp(rel, store) || (lh_outname_shard(LH_OUTNAME_STORE, rel, &i, &k) && k >= 2 && i >= 0 && i < k))
    return LH_OK;
  if (strcmp(rel, "jobs") && !lh_outname_owned(rel)) return LH_OK;
  return lh_error_set(err, LH_EINVAL, "--db %s is %s in the output folder %s, which the run writes over: the "
                      "store would be destroyed. Put the store elsewhere, or leave --db out to keep it in %s/%s",
                      p->db_path, rel, p->out_dir, p->out_dir, store);
}

/* The model, its tokenizer, chat format and stop ids. */
static lh_status open_model(run *R, lh_error *err) {
  const lh_runner_params *p = R->p;
  lh_model_params mp = lh_model_default_params();
  mp.backend = p->device ? p->device : "cpu";
  mp.threads = p->threads;
  mp.cpu_attention = p->cpu_attention;
  mp.max_rows = lh_plan_max_rows(&R->plan, mp.max_rows);
  lh_digest_cache weights; /* every byte of the weights is read once, then known by file identity */
  lh_status st = lh_store_digest_cache(R->store, "model", &weights, err);
  if (st != LH_OK) return st;
  mp.digest_cache = &weights;
  mp.stop = &stop_requested;
  st = lh_model_open(p->model_dir, &mp, &R->model, err);
  if (st != LH_OK) return lh_error_prefix(err, st, "loading the model %s: ", p->model_dir);
  R->cfg = lh_model_config(R->model);
  if (!strcmp(lh_model_backend(R->model), "cpu")) {
    const int bf16 = lh_model_cpu_attention(R->model) == LH_CPU_ATTN_BF16;
    lh_progress_note(R->prog, "%s: softmax attention in %s on the CPU%s%s%s", p->model_dir,
                     lh_cpu_attention_name(lh_model_cpu_attention(R->model)), bf16 ? " (bf16 products on " : "",
                     bf16 ? lh_model_cpu_attention_unit(R->model) : "", bf16 ? ")" : "");
  }
  if (mp.comm && lh_comm_size(mp.comm) > 1)
    lh_progress_note(R->prog, "%s: over %d ranks, one process each (each computes 1/%d of the heads and experts)",
                     p->model_dir, lh_comm_size(mp.comm), lh_comm_size(mp.comm));
  const char *slash = strrchr(p->model_dir, '/');
  snprintf(R->model_name, sizeof R->model_name, "%s", slash && slash[1] ? slash + 1 : p->model_dir);
  st = lh_chat_tokenizer_open(p->model_dir, p->chat_template, R->cfg->vocab_size, &R->tok, &R->chat, err);
  if (st != LH_OK)
    return lh_error_prefix(err, st, "loading the tokenizer of %s: ", p->model_dir);
  collect_stop_ids(R);
  return LH_OK;
}

/* This run's jobs neither done nor failed in the store: what a stopped run (interrupted, or a
 * fault) leaves to a rerun, the groups it never claimed as well as the one the stop cut short.
 * Read from the store, so the summary says what the store holds. -1 when the store cannot say. */
static int count_left(run *R) {
  lh_store_job_info *list;
  size_t n;
  lh_error e;
  if (lh_store_job_list(R->store, R->batch_id, &list, &n, &e) != LH_OK) {
    lh_log_warn("cannot count the jobs left: %s", e.msg);
    return -1;
  }
  int left = 0;
  for (size_t k = 0; k < n; k++)
    if ((list[k].state == LH_JOB_QUEUED || list[k].state == LH_JOB_RUNNING) && find_request(R, list[k].id) >= 0) left++;
  lh_store_job_list_free(list, n);
  return left;
}

/* Claim groups of jobs and run them until none is left, an interrupt, or a fault. */
static lh_status run_jobs(run *R, lh_error *err) {
  int64_t *ids = calloc((size_t)R->p->max_group, sizeof *ids);
  if (!ids) return lh_error_set(err, LH_ENOMEM, "out of memory");
  lh_status st = LH_OK;
  while (st == LH_OK) {
    int nids = 0;
    if (stop_requested) st = lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
    else if ((st = lh_store_job_claim_next(R->store, R->batch_id, R->p->max_group, ids, &nids, err)) == LH_OK) {
      st = run_group(R, ids, nids, err);
      lh_progress_batch(R->prog, "request", R->sum->done, R->sum->failed, R->todo);
    } else if (st == LH_ENOTFOUND) break;
    else env_fault(R, st, err);
  }
  free(ids);
  return st == LH_ENOTFOUND ? LH_OK : st;
}

lh_status lh_run_batch(const lh_runner_params *p, lh_runner_summary *sum, lh_error *err) {
  run R = {.p = p, .sum = sum, .plan = {.chunk = p->chunk, .checkpoint_every = p->checkpoint_every}};
  memset(sum, 0, sizeof *sum);
  const double t0 = lh_now();
  stop_requested = 0;
  if (!p->batch_path || !p->model_dir || !p->out_dir)
    return lh_error_set(err, LH_EINVAL, "a batch file, --model and --out are required");
  if (p->chunk < 1) return lh_error_set(err, LH_EINVAL, "--chunk must be at least 1 (got %d)", p->chunk);
  if (p->shard_count < 1 || p->shard_index < 0 || p->shard_index >= p->shard_count)
    return lh_error_set(err, LH_EINVAL, "--shard %d/%d: need 0 <= i < n", p->shard_index, p->shard_count);
  char lock[128];
  run_paths(p, sum, lock, sizeof lock);
  /* everything that can be checked without the model first: the batch, the output folder (one
   * run at a time, writable), the store */
  /* a model folder that is not there, a backend this build lacks, or a batch that cannot be read
   * creates nothing */
  lh_status st = check_batch_not_output(p, sum, err);
  if (st != LH_OK) return st;
  st = lh_model_check(p->model_dir, "none", err);
  if (st != LH_OK) return lh_error_prefix(err, st, "--model: ");
  if ((st = lh_model_check(p->model_dir, p->device, err)) != LH_OK) return lh_error_prefix(err, st, "--device: ");
  /* one read of the batch ("-": standard input) gives its lines and the digest that names it */
  lh_batch_params bp = lh_batch_default_params();
  bp.documents_root = p->documents_root;
  if ((st = lh_batch_load_params(p->batch_path, &bp, &R.batch, err)) != LH_OK) goto done;
  if ((st = lh_outdir_open(p->out_dir, lock, p->wait, &R.out, err)) != LH_OK) goto done;
  if ((st = check_db_not_output(p, err)) != LH_OK) goto done;
  snprintf(R.batch_digest, sizeof R.batch_digest, "%s", R.batch.sha256);
  sum->bad_lines = R.batch.n_bad;
  lh_store_params sp = lh_store_default_params();
  sp.no_follow = !p->db_path; /* OUT's own store; a --db the user names may be a link */
  if ((st = lh_store_open(sum->db_path, &sp, &R.store, err)) != LH_OK) goto done;
  R.prog = lh_progress_open(p->progress, stderr, 10);
  if (p->shard_note && *p->shard_note) lh_progress_note(R.prog, "%s", p->shard_note);
  if ((st = open_model(&R, err)) != LH_OK) goto done;
  if ((st = lh_store_model_register(R.store, R.model, err)) != LH_OK) goto done;
  char bname[4200];
  snprintf(bname, sizeof bname, "sha256:%s", R.batch_digest);
  if ((st = lh_store_batch_put(R.store, bname, &R.batch_id, err)) != LH_OK) goto done;
  params_digest(&R);
  if ((st = lh_store_digest_cache(R.store, "doc", &R.doc_cache, err)) != LH_OK) goto done;
  if ((st = add_jobs(&R, err)) != LH_OK || (st = index_jobs(&R, err)) != LH_OK) goto done;
  lh_error de;
  if (lh_store_digest_flush(R.store, &de) != LH_OK) lh_log_warn("%s (the documents are read again next run)", de.msg);
  R.todo = sum->requests - sum->skipped_done;
  lh_progress_batch(R.prog, "request", 0, 0, R.todo);
  if (p->checkpoint_every > 0) {
    lh_store_writer_params wp = lh_store_writer_default_params();
    wp.store.no_follow = sp.no_follow;
    if ((st = lh_store_writer_open(sum->db_path, &wp, &R.writer, err)) != LH_OK) goto done;
  }
  st = run_jobs(&R, err);
  if (R.writer) {
    lh_error we;
    const lh_status ws = lh_store_writer_close(R.writer, &we);
    R.writer = NULL;
    if (ws != LH_OK) env_fault(&R, ws, &we);
  }
  if (!R.fault && p->keep_checkpoints >= 0) { /* retention: thin what no resume or reuse needs */
    lh_store_gc_params gp = lh_store_gc_default_params();
    gp.keep_last = p->keep_checkpoints + 1;
    lh_store_gc_report gr;
    lh_error ge;
    const lh_status gs = lh_store_gc(R.store, &gp, &gr, &ge);
    if (gs == LH_OK) sum->thinned = gr.thinned + gr.deleted;
    else env_fault(&R, gs, &ge);
  }
  lh_store_get_stats(R.store, &sum->store, NULL);
  /* a store whose file was deleted or moved away under the run (its output folder removed, say)
   * stands behind nothing: no output is rebuilt from it, which would also bring back a folder the
   * user removed, and the run does not claim that nothing is lost */
  const int store_gone = lh_store_file_moved(R.store);
  if (store_gone) {
    lh_error ge;
    lh_error_set(&ge, LH_EIO, "%s: the store's file was deleted or moved away while this run had it open",
                 sum->db_path);
    env_fault(&R, LH_EIO, &ge);
  } else {
    lh_error oe;
    const lh_status os = write_output(&R, &oe);
    if (os != LH_OK) env_fault(&R, os, &oe);
  }
  /* a run that went to its end and still has unfinished jobs: another process holds them (two runs
   * on one store through --db, or a takeover); their lines come with a rerun once it is done */
  if (st == LH_OK && !R.fault) sum->elsewhere = R.unfinished;
  if ((st == LH_EINTR || R.fault) && !store_gone) sum->left = count_left(&R);
  if (R.fault && store_gone) {
    st = R.fault;
    lh_error_set(err, st, "stopped: %s. %s is gone (deleted or moved away while this run had it open), so this run "
                 "wrote no output. If it was deleted, the answers and checkpoints it held are lost: rerunning the "
                 "same command starts a new store and computes every request again. If it was moved, put it back "
                 "(or pass --db with its new path) and rerun, which resumes", R.fault_err.msg, sum->db_path);
  } else if (R.fault) {
    st = R.fault;
    if (sum->left == 0)
      lh_error_set(err, st, "stopped: %s. Every answer and error is recorded in the store %s and nothing is lost: "
                   "fix the cause (free disk space, make the folder writable) and rerun the same command, which "
                   "writes the output files from the store", R.fault_err.msg, sum->db_path);
    else if (sum->left > 0)
      lh_error_set(err, st, "stopped: %s. %d job%s left queued and nothing already done is lost: fix the cause (free "
                   "disk space, make the folder writable) and rerun the same command, which resumes from the last "
                   "good checkpoint", R.fault_err.msg, sum->left, sum->left == 1 ? " is" : "s are");
    else
      lh_error_set(err, st, "stopped: %s. The jobs not done are left queued and nothing already done is lost: fix "
                   "the cause (free disk space, make the folder writable) and rerun the same command, which resumes "
                   "from the last good checkpoint", R.fault_err.msg);
  }

done:
  sum->seconds = lh_now() - t0;
  /* a run refused or stopped before it wrote anything in OUT (a --db it cannot open, a --db among
   * OUT's files, a model that does not load) leaves nothing it made there: the store it made in
   * OUT while nothing is stored in it, the lock, OUT and the folders above it */
  const int refused = st != LH_OK && !sum->output_written;
  lh_store_writer_close(R.writer, NULL);
  if (refused && !p->db_path) lh_store_discard(R.store);
  else lh_store_close(R.store);
  lh_tokenizer_close(R.tok);
  lh_model_close(R.model);
  lh_progress_close(R.prog);
  if (refused) lh_outdir_abandon(R.out);
  else lh_outdir_close(R.out);
  free(R.job_ids);
  for (int i = 0; R.checks && i < R.batch.n; i++) free(R.checks[i].stamps);
  free(R.checks);
  free(R.last_stamps);
  free(R.by_job);
  lh_batch_free(&R.batch);
  return st;
}
