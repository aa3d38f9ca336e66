/* batch.h — OpenAI Batch API input (JSONL) with longhaul's `documents` extension, and the
 * matching batch output lines.
 *
 * One input line is one request:
 *
 *   {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions",
 *    "body": {"model": "...", "messages": [{"role": "user", "content": "Which file defines X?"}],
 *             "max_tokens": 64, "temperature": 0, "top_p": 1, "seed": 7, "stop": ["\n\n"],
 *             "documents": ["repo.tar.gz",
 *                           {"path": "docs/", "include": ["*.md"], "exclude": ["draft"],
 *                            "frame": "<document path=\"{path}\">\n{content}\n</document>\n"}]}}
 *
 * `url` is /v1/chat/completions (body.messages) or /v1/completions (body.prompt, a string).
 * `max_completion_tokens` is accepted as a synonym of `max_tokens`. `documents` is longhaul's
 * extension: inputs (archive, folder or file paths, relative to the batch file's folder) that are
 * ingested and placed before the messages, at the start of the first user turn (chat) or before
 * the prompt (completions), so requests with the same documents share one prefill.
 *
 * Parsing never stops at a bad line: each line becomes an lh_request whose `error` is set when the
 * line is malformed or asks for something unsupported (n > 1, streaming, tools, logprobs), with a
 * message naming the line and the field. Such requests produce an error object in output.jsonl.
 *
 * Ownership: an lh_batch owns every string in its requests; they live until lh_batch_free.
 */
#ifndef LH_JOBS_BATCH_H
#define LH_JOBS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

#define LH_MAX_STOP 4

typedef enum lh_endpoint { LH_EP_CHAT = 0, LH_EP_COMPLETIONS = 1 } lh_endpoint;

typedef struct lh_message {
  char *role;    /* system | user | assistant */
  char *content; /* text parts joined */
} lh_message;

typedef struct lh_document_input {
  char *path;       /* as written in the batch file */
  char *resolved;   /* resolved against the batch file's folder ("-" stays "-") */
  char **include;   /* globs; NULL-terminated; NULL when none */
  char **exclude;
  char *frame;      /* framing template or NULL for the default */
} lh_document_input;

typedef struct lh_request {
  int line;            /* 1-based line number in the batch file */
  char *custom_id;     /* never NULL: "line-N" when the line has none (then error is set) */
  lh_endpoint endpoint;
  char *model;         /* body.model, may be NULL */
  lh_message *messages;
  int n_messages;
  char *prompt;        /* completions */
  lh_document_input *documents;
  int n_documents;
  int max_tokens;      /* -1 when absent: the runner applies its default */
  double temperature;  /* default 1.0 as in the OpenAI API */
  double top_p;        /* default 1.0 */
  int has_seed;
  uint64_t seed;
  char *stop[LH_MAX_STOP];
  int n_stop;
  lh_error error;      /* code != LH_OK: this request is rejected with error.msg */
} lh_request;

typedef struct lh_batch {
  char path[4096];
  lh_request *req;
  int n;
  int n_bad;           /* requests with error set */
} lh_batch;

/* Read and parse a batch file. Fails (LH_EIO/LH_ENOTFOUND) only when the file cannot be read;
 * malformed lines become requests with error set. Duplicate custom_ids are errors on the later
 * lines. Empty lines are skipped. */
lh_status lh_batch_load(const char *path, lh_batch *out, lh_error *err);
/* Parse one line (exposed for tests and fuzzing). base_dir resolves document paths. */
void lh_request_parse(const char *line, size_t len, int lineno, const char *base_dir, lh_request *r);
void lh_request_free(lh_request *r);
void lh_batch_free(lh_batch *b);

/* A key that is equal for two requests exactly when their documents are the same inputs with the
 * same filters and frames (so they can share one ingest and prefill). 65 bytes with the NUL. */
void lh_request_documents_key(const lh_request *r, char out[65]);

/* ---- output lines (OpenAI batch output format) ------------------------------------------ */

typedef struct lh_completion {
  const char *text;          /* the answer */
  const char *finish_reason; /* "stop" | "length" */
  int64_t prompt_tokens;
  int64_t completion_tokens;
  int64_t created;           /* unix time */
  const char *model;         /* model name to report */
} lh_completion;

/* Append one output.jsonl line (with '\n') for a successful request. request_id names the
 * response ("batch_req_..."), stable across reruns when derived from the job. */
lh_status lh_output_success(lh_buf *out, const lh_request *r, const char *request_id, const lh_completion *c);
/* Append one output.jsonl line for a failed request: status_code 400 for bad requests, 500 for
 * failures while running; code is a short machine-readable string ("invalid_request", ...). */
lh_status lh_output_error(lh_buf *out, const char *custom_id, const char *request_id, int status_code,
                          const char *code, const char *message);

#endif
