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
 *                            "frame": "<document path=\"{path}\">\n{text}\n</document>\n"}]}}
 *
 * `url` is /v1/chat/completions (body.messages) or /v1/completions (body.prompt, a string).
 * `max_completion_tokens` is accepted as a synonym of `max_tokens`. `documents` is longhaul's
 * extension: inputs (archive, folder or file paths) that are ingested and placed before the
 * messages (jobs/chat.h) or the prompt, so requests with the same documents share one prefill. A relative document path resolves against
 * the batch file's folder; for a batch read from a stream (standard input, `run -`), against the
 * current directory; lh_batch_params.base_dir overrides both.
 *
 * Reading. A batch is read whole into memory once (at most lh_batch_params.max_bytes), its SHA-256
 * is taken over those bytes (the runner names a batch by it), and the lines are parsed from that
 * memory in one pass: parsing is linear in the batch's size (duplicate custom_ids are found with a
 * hash table), so a batch of a million lines parses in seconds.
 *
 * Parsing never stops at a bad line: each line becomes an lh_request whose `error` is set when the
 * line is malformed or asks for something unsupported (n > 1, streaming, tools, logprobs), with a
 * message naming the line and the field. Such requests produce an error object in output.jsonl.
 * A line must be UTF-8 (as JSON text must be) and no string in it may hold NUL (raw or as
 * \u0000: a C string would silently cut it there), so every custom_id and model name is echoed
 * byte for byte or the line is refused; one JSON object per line, nothing after it, and no key twice
 * in one object (cJSON reads the first, Python's json the last; a line with two custom_ids echoes
 * neither). A custom_id
 * already used on an earlier line is refused on the later line, naming both lines; the earlier one
 * runs.
 *
 * Documents root. With lh_batch_params.documents_root set, every document path (after the
 * symbolic links in it are resolved) must lie in that tree: absolute paths and `..` that leave it,
 * symbolic links that point out of it, paths that do not exist and "-" are refused on their line,
 * naming the document and the root, and `resolved` is the checked real path. Without it, paths are
 * used as written (resolved against the base folder), as they always were.
 *
 * Output. Every string the output functions write is valid UTF-8: text that is not (a byte-level
 * model's answer, a file name in a message) has each maximal invalid subpart replaced by U+FFFD,
 * as HF tokenizers' decode does (util/utf8.h).
 *
 * Ownership: an lh_batch owns every string in its requests; they live until lh_batch_free.
 */
#ifndef LH_JOBS_BATCH_H
#define LH_JOBS_BATCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/buf.h"
#include "util/err.h"

#define LH_MAX_STOP 4

typedef enum lh_endpoint { LH_EP_CHAT = 0, LH_EP_COMPLETIONS = 1 } lh_endpoint;

typedef struct lh_message {
  char *role;    /* system | user | assistant */
  char *content; /* text parts joined */
} lh_message;

typedef struct lh_document_input {
  char *path;       /* as written in the batch file: the name to show (it does not depend on how
                       the batch file itself was named) */
  char *resolved;   /* the path to open: path resolved against the base folder ("-" stays "-");
                       with a documents root, the real path that was checked */
  char **include;   /* globs; NULL-terminated; NULL when none */
  char **exclude;
  char *frame;      /* framing template or NULL for the default */
} lh_document_input;

typedef struct lh_request {
  int line;            /* 1-based line number in the batch file */
  char *custom_id;     /* never NULL: "line-N" when the line has none (then error is set) */
  int custom_id_made;  /* 1 when custom_id is that made-up "line-N": it counts for no duplicate */
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
  char path[4096];     /* the name it was loaded by ("-" for standard input) */
  char sha256[65];     /* lower-case hex SHA-256 of the batch's bytes, as read */
  lh_request *req;
  int n;
  int n_bad;           /* requests with error set */
} lh_batch;

#define LH_BATCH_MAX_BYTES ((size_t)4 << 30) /* the default max_bytes: 4 GiB */

typedef struct lh_batch_params {
  /* Folder that relative document paths resolve against. NULL (the default): the batch file's
   * folder, or the current directory for a batch read from a stream. Read only while loading. */
  const char *base_dir;
  /* NULL (the default): document paths are not confined. Else an existing folder that every
   * document must lie in once symbolic links are resolved (see "Documents root" above). */
  const char *documents_root;
  size_t max_bytes;    /* the largest batch read; a larger one is LH_ELIMIT (0 or default: 4 GiB) */
} lh_batch_params;

lh_batch_params lh_batch_default_params(void);

/* Read and parse the batch file at path ("-": standard input) with the default params. Fails
 * (LH_ENOTFOUND; LH_EINVAL for a folder or a file this user may not open; LH_EIO, LH_ELIMIT,
 * LH_ENOMEM) only when the batch cannot be read or held;
 * malformed lines become requests with error set. Empty lines are skipped. */
lh_status lh_batch_load(const char *path, lh_batch *out, lh_error *err);
/* The same with params (NULL: the defaults). Also fails with LH_ENOTFOUND/LH_EINVAL when
 * p->documents_root is not an existing folder. */
lh_status lh_batch_load_params(const char *path, const lh_batch_params *p, lh_batch *out, lh_error *err);
/* Read the whole batch from f (to its end; f is not closed) and parse it. name is what messages
 * and out->path call it ("-" for standard input); relative document paths resolve against
 * p->base_dir or else the current directory. When f is stdin, a document "-" (standard input)
 * is refused on its line: the batch has already read that stream to its end. */
lh_status lh_batch_load_stream(FILE *f, const char *name, const lh_batch_params *p, lh_batch *out,
                               lh_error *err);
/* Parse a batch held in memory (data[0..len), borrowed for the call only). name's folder is the
 * base folder unless p->base_dir is set. */
lh_status lh_batch_parse(const char *data, size_t len, const char *name, const lh_batch_params *p,
                         lh_batch *out, lh_error *err);
/* Parse one line (exposed for tests and fuzzing). base_dir resolves document paths; no documents
 * root and no duplicate check (those are the batch's). */
void lh_request_parse(const char *line, size_t len, int lineno, const char *base_dir, lh_request *r);
void lh_request_free(lh_request *r);
void lh_batch_free(lh_batch *b);

/* A key that is equal for two requests exactly when their documents are the same inputs with the
 * same filters and frames (so they can share one ingest and prefill). An input is its path as
 * written (which a frame may show) together with the file it names: its real path, or for a path
 * that does not exist, the real path of its deepest existing folder and the rest as written. So
 * the key does not depend on how the batch file was named (relative, absolute, "./", symbolic
 * links), and the same spelling under another folder is another key. 65 bytes with the NUL. */
void lh_request_documents_key(const lh_request *r, char out[65]);

/* ---- output lines (OpenAI batch output format) ------------------------------------------ */

typedef struct lh_completion {
  const char *text;          /* the answer */
  const char *finish_reason; /* "stop" | "length" */
  int64_t prompt_tokens;
  int64_t completion_tokens;
  int64_t cached_tokens;     /* prompt tokens not computed for this request: restored from a
                                checkpoint, or a prefix another request of the same group computed
                                (usage.prompt_tokens_details.cached_tokens, as OpenAI and vLLM) */
  int64_t created;           /* unix time */
  const char *model;         /* model name to report */
  const char *const *warnings; /* [n_warnings] what the user should know (a document that gave no
                                  text, and why); written as the body's "warnings" when any */
  int n_warnings;
} lh_completion;

/* Append one output.jsonl line (with '\n') for a successful request. request_id names the
 * response ("batch_req_..."), stable across reruns when derived from the job. Strings that are
 * not valid UTF-8 (c->text above all) are written with U+FFFD for each invalid subpart. */
lh_status lh_output_success(lh_buf *out, const lh_request *r, const char *request_id, const lh_completion *c);
/* Append one output.jsonl line for a failed request: status_code 400 for bad requests, 500 for
 * failures while running; code is a short machine-readable string ("invalid_request", ...).
 * Strings that are not valid UTF-8 are written with U+FFFD as above. */
lh_status lh_output_error(lh_buf *out, const char *custom_id, const char *request_id, int status_code,
                          const char *code, const char *message);

#endif
