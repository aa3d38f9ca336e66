/* batch.c — parse OpenAI Batch API JSONL into lh_request and write batch output lines.
 *
 * Invariants: every non-empty line yields exactly one request (so every input line gets exactly
 * one output line); a request with error set is never run; strings are copied out of cJSON so the
 * parse tree is freed line by line (a batch of a million requests holds only its requests and,
 * while it is parsed, its bytes). The batch is read once into memory and parsed from there in one
 * pass: the only per-line state that spans lines is a hash table of custom_ids (keyed by a
 * per-process random key, so a batch written to collide cannot make it quadratic). A line reaches
 * cJSON only after its raw bytes were checked: UTF-8, no NUL, no \u0000 (cJSON would decode it
 * and cut the string), so every string copied out is exactly the string the line holds. A key
 * given twice in one object refuses the line: cJSON would read the first, Python's json the last.
 * Unknown body fields that change the answer (n > 1, stream, tools, logprobs, response_format)
 * are rejected rather than ignored; fields that do not (user, metadata, model) are accepted.
 * Output strings pass through lh_utf8_replace, so output lines are valid UTF-8 whatever they quote.
 */
#define _GNU_SOURCE /* realpath with NULL, getrandom */
#include "jobs/batch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/utf8.h"

/* What a line is parsed against: the folder relative document paths resolve in, and the real
 * path of the documents root (NULL: none). */
typedef struct parse_ctx {
  const char *base;
  const char *root;
  int batch_on_stdin; /* a document "-" would read the stream the batch came from */
} parse_ctx;

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

static void bad(lh_request *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bad(lh_request *r, const char *fmt, ...) {
  if (r->error.code != LH_OK) return; /* keep the first problem */
  char msg[LH_ERROR_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  lh_error_set(&r->error, LH_EFORMAT, "line %d: %s", r->line, msg);
}

/* Text of an OpenAI message content: a string, or a non-empty array of parts of which only
 * "text" parts are allowed (image/audio parts are rejected: this model reads text). A message
 * without content (no key, or null) is refused: run as an empty turn, it would be answered as a
 * question nobody asked. */
static char *content_text(const cJSON *c, lh_request *r, int idx) {
  if (cJSON_IsString(c)) return dupstr(c->valuestring);
  if (!c || cJSON_IsNull(c)) {
    bad(r, "body.messages[%d] has no content (%s): every message needs its text, a string or an array of text "
           "parts", idx, c ? "it is null" : "no \"content\" key");
    return NULL;
  }
  if (!cJSON_IsArray(c)) {
    bad(r, "body.messages[%d].content must be a string or an array of text parts", idx);
    return NULL;
  }
  if (!cJSON_GetArraySize(c)) {
    bad(r, "body.messages[%d].content is an empty array: give at least one {\"type\": \"text\", \"text\": ...} "
           "part, or a string", idx);
    return NULL;
  }
  lh_buf b = {0};
  const cJSON *part;
  int k = 0;
  cJSON_ArrayForEach(part, c) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
      bad(r, "body.messages[%d].content[%d]: only {\"type\": \"text\", \"text\": ...} parts are supported", idx, k);
      lh_buf_free(&b);
      return NULL;
    }
    lh_buf_append_str(&b, text->valuestring);
    k++;
  }
  if (!b.data) lh_buf_append(&b, "", 0);
  return b.data;
}

static char **string_list(const cJSON *a, lh_request *r, const char *field) {
  if (!a || cJSON_IsNull(a)) return NULL;
  if (cJSON_IsString(a)) {
    char **v = calloc(2, sizeof *v);
    if (v) v[0] = dupstr(a->valuestring);
    return v;
  }
  if (!cJSON_IsArray(a)) {
    bad(r, "%s must be a string or an array of strings", field);
    return NULL;
  }
  int n = cJSON_GetArraySize(a);
  char **v = calloc((size_t)n + 1, sizeof *v);
  if (!v) return NULL;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, a) {
    if (!cJSON_IsString(it)) {
      bad(r, "%s must contain only strings", field);
      break;
    }
    v[i++] = dupstr(it->valuestring);
  }
  return v;
}

static void free_list(char **v) {
  if (!v) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

static char *resolve(const char *base, const char *path) {
  if (!strcmp(path, "-") || path[0] == '/' || !base || !base[0]) return dupstr(path);
  size_t n = strlen(base) + strlen(path) + 2;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s/%s", base, path);
  return s;
}

/* Is real (a real path) root or inside it? root is a real path too. */
static int inside_root(const char *real, const char *root) {
  size_t n = strlen(root);
  if (n == 1 && root[0] == '/') return real[0] == '/';
  return !strncmp(real, root, n) && (real[n] == 0 || real[n] == '/');
}

/* With a documents root: refuse a document that is not in the tree once its symbolic links are
 * resolved, and open the checked real path (not the path as written, whose links could be
 * changed between this check and the read). */
static void confine(const parse_ctx *c, lh_request *r, lh_document_input *di, int idx) {
  if (!strcmp(di->path, "-")) {
    bad(r, "body.documents[%d] is \"-\" (standard input), which is outside the documents root %s", idx, c->root);
    return;
  }
  char *real = realpath(di->resolved, NULL);
  if (!real) {
    bad(r, "body.documents[%d] \"%s\": %s (under the documents root %s, a document must exist)", idx, di->path,
        strerror(errno), c->root);
    return;
  }
  if (!inside_root(real, c->root)) {
    bad(r, "body.documents[%d] \"%s\" is %s, outside the documents root %s", idx, di->path, real, c->root);
    free(real);
    return;
  }
  free(di->resolved);
  di->resolved = real;
}

static void parse_documents(const cJSON *docs, const parse_ctx *c, lh_request *r) {
  if (!docs || cJSON_IsNull(docs)) return;
  if (!cJSON_IsArray(docs)) {
    bad(r, "body.documents must be an array of paths or {\"path\": ...} objects");
    return;
  }
  int n = cJSON_GetArraySize(docs);
  r->documents = calloc((size_t)(n ? n : 1), sizeof *r->documents);
  if (!r->documents) return;
  const cJSON *d;
  cJSON_ArrayForEach(d, docs) {
    int idx = r->n_documents++; /* counted at once, so lh_request_free frees whatever it holds */
    lh_document_input *di = &r->documents[idx];
    char where[32];
    snprintf(where, sizeof where, "%d", idx);
    if (cJSON_IsString(d)) {
      di->path = dupstr(d->valuestring);
    } else if (cJSON_IsObject(d)) {
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "path");
      if (!cJSON_IsString(p)) {
        bad(r, "body.documents[%s].path must be a string", where);
        return;
      }
      di->path = dupstr(p->valuestring);
      const cJSON *it;
      cJSON_ArrayForEach(it, d) {
        if (!strcmp(it->string, "path")) continue;
        if (!strcmp(it->string, "include")) {
          di->include = string_list(it, r, "body.documents[].include");
        } else if (!strcmp(it->string, "exclude")) {
          di->exclude = string_list(it, r, "body.documents[].exclude");
        } else if (!strcmp(it->string, "frame")) {
          if (!cJSON_IsString(it)) bad(r, "body.documents[%s].frame must be a string", where);
          else di->frame = dupstr(it->valuestring);
        } else {
          bad(r, "body.documents[%s]: unknown field '%s' (known: path, include, exclude, frame)", where, it->string);
        }
      }
    } else {
      bad(r, "body.documents[%s] must be a path string or an object", where);
      return;
    }
    if (!di->path || !di->path[0]) {
      bad(r, "body.documents[%s].path is empty", where);
      return;
    }
    if (di->include || di->exclude) { /* a pattern ingest refuses is the line's mistake: a 400 here */
      size_t ni = 0, ne = 0;
      while (di->include && di->include[ni]) ni++;
      while (di->exclude && di->exclude[ne]) ne++;
      lh_globs *g = NULL;
      lh_error e;
      if (lh_globs_open(&g, (const char *const *)di->include, ni, (const char *const *)di->exclude, ne, &e) != LH_OK) {
        bad(r, "body.documents[%s]: %s", where, e.msg);
        return;
      }
      lh_globs_free(g);
    }
    if (c->batch_on_stdin && !strcmp(di->path, "-")) {
      bad(r, "body.documents[%s] is \"-\" (standard input), but the batch itself is read from standard input", where);
      return;
    }
    di->resolved = resolve(c->base, di->path);
    if (!di->resolved) {
      bad(r, "out of memory");
      return;
    }
    if (c->root) confine(c, r, di, idx);
  }
}

static int get_int(const cJSON *body, const char *key, int *out, lh_request *r, int lo, int hi) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi) {
    char range[64];
    snprintf(range, sizeof range, "%d..%d", lo, hi);
    bad(r, "body.%s must be an integer in %s", key, range);
    return 0;
  }
  *out = (int)v->valuedouble;
  return 1;
}

static int get_num(const cJSON *body, const char *key, double *out, lh_request *r, double lo, double hi) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
  if (!v || cJSON_IsNull(v)) return 0;
  if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
    char range[64];
    snprintf(range, sizeof range, "%g..%g", lo, hi);
    bad(r, "body.%s must be a number in %s", key, range);
    return 0;
  }
  *out = v->valuedouble;
  return 1;
}

static void parse_body(const cJSON *body, const parse_ctx *c, lh_request *r) {
  static const char *const rejected[] = {"tools", "tool_choice", "functions", "function_call", "logprobs",
                                         "top_logprobs", "response_format", "logit_bias", "echo", "suffix",
                                         "best_of", "stream_options", "audio", "modalities", "prediction"};
  static const char *const accepted[] = {"model",      "messages", "prompt",  "max_tokens", "max_completion_tokens",
                                         "temperature", "top_p",   "seed",    "stop",       "documents",
                                         "n",           "stream",  "user",    "metadata",   "presence_penalty",
                                         "frequency_penalty", "store", "top_k"};
  const cJSON *it;
  cJSON_ArrayForEach(it, body) {
    int known = 0;
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++)
      if (!strcmp(it->string, rejected[i]) && !cJSON_IsNull(it) && !cJSON_IsFalse(it))
        bad(r, "body.%s is not supported by longhaul", it->string);
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++) known |= !strcmp(it->string, rejected[i]);
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) known |= !strcmp(it->string, accepted[i]);
    if (!known) bad(r, "body.%s is not a known field", it->string);
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
  if (cJSON_IsString(model)) r->model = dupstr(model->valuestring);
  int n = 1;
  get_int(body, "n", &n, r, 1, 1000);
  if (n != 1) bad(r, "body.n = %s: only one choice per request is supported", "n>1");
  const cJSON *stream = cJSON_GetObjectItemCaseSensitive(body, "stream");
  if (cJSON_IsTrue(stream)) bad(r, "body.stream is not available in batch mode");
  double pen = 0;
  if (get_num(body, "presence_penalty", &pen, r, -2, 2) && pen != 0)
    bad(r, "body.presence_penalty is not supported (only 0)");
  if (get_num(body, "frequency_penalty", &pen, r, -2, 2) && pen != 0)
    bad(r, "body.frequency_penalty is not supported (only 0)");

  if (r->endpoint == LH_EP_CHAT) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
      bad(r, "body.messages must be a non-empty array for %s", "/v1/chat/completions");
    } else {
      int nm = cJSON_GetArraySize(msgs);
      r->messages = calloc((size_t)nm, sizeof *r->messages);
      const cJSON *m;
      cJSON_ArrayForEach(m, msgs) {
        if (!r->messages) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        char where[16];
        snprintf(where, sizeof where, "%d", r->n_messages);
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
                                      strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer"))) {
          bad(r, "body.messages[%s].role must be system, developer, user or assistant", where);
          break;
        }
        lh_message *mm = &r->messages[r->n_messages];
        /* OpenAI's "developer" role is the newer name of "system". */
        mm->role = dupstr(strcmp(role->valuestring, "developer") ? role->valuestring : "system");
        mm->content = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), r, r->n_messages);
        r->n_messages++;
        if (!mm->content) break;
      }
    }
    if (cJSON_GetObjectItemCaseSensitive(body, "prompt")) bad(r, "body.prompt belongs to /v1/completions");
  } else {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (cJSON_IsString(p)) {
      r->prompt = dupstr(p->valuestring);
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0))) {
      r->prompt = dupstr(cJSON_GetArrayItem(p, 0)->valuestring);
    } else {
      bad(r, "body.prompt must be a string (or an array of one string) for %s", "/v1/completions");
    }
    if (cJSON_GetObjectItemCaseSensitive(body, "messages"))
      bad(r, "body.messages belongs to /v1/chat/completions");
  }

  int mt = -1;
  if (get_int(body, "max_tokens", &mt, r, 1, 1 << 30)) r->max_tokens = mt;
  if (get_int(body, "max_completion_tokens", &mt, r, 1, 1 << 30)) r->max_tokens = mt;
  get_num(body, "temperature", &r->temperature, r, 0, 2);
  get_num(body, "top_p", &r->top_p, r, 0, 1);
  if (r->top_p == 0) bad(r, "body.top_p must be greater than 0");
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(body, "seed");
  if (seed && !cJSON_IsNull(seed)) {
    if (!cJSON_IsNumber(seed) || seed->valuedouble != floor(seed->valuedouble) || fabs(seed->valuedouble) > 9.007e15) {
      bad(r, "body.seed must be an integer");
    } else {
      r->has_seed = 1;
      r->seed = (uint64_t)(int64_t)seed->valuedouble;
    }
  }
  const cJSON *stop = cJSON_GetObjectItemCaseSensitive(body, "stop");
  if (stop && !cJSON_IsNull(stop)) {
    char **v = string_list(stop, r, "body.stop");
    int k = 0;
    for (char **p = v; p && *p; p++, k++) {
      if (k >= LH_MAX_STOP) {
        bad(r, "body.stop has more than 4 strings");
        break;
      }
      if (!**p) {
        bad(r, "body.stop strings must not be empty");
        break;
      }
      r->stop[r->n_stop++] = dupstr(*p);
    }
    free_list(v);
  }
  parse_documents(cJSON_GetObjectItemCaseSensitive(body, "documents"), c, r);
}

/* What the raw-byte check found on a line: the first problem (message without the line prefix),
 * and whether any problem lies in a string after a "custom_id" key (then that id is not echoed). */
typedef struct raw_check {
  char msg[512];
  int id_tainted;
} raw_check;

/* Check a line's bytes before cJSON reads them: JSON text is UTF-8, and cJSON would copy a raw
 * NUL or decode \u0000 into a C string that ends there. Problems are placed by column (1-based
 * byte offset) and by the nearest key before them. Returns 1 when the line is clean. */
static int check_raw(const char *line, size_t len, raw_check *rc) {
  const unsigned char *s = (const unsigned char *)line;
  const char *key = NULL; /* the last object key seen, and its length */
  size_t key_len = 0, str_start = 0;
  int in_str = 0, clean = 1;
  rc->msg[0] = 0;
  rc->id_tainted = 0;
  for (size_t i = 0; i < len;) {
    const char *what = NULL;
    size_t step = 1;
    if (s[i] == 0) {
      what = "a NUL byte";
    } else if (s[i] >= 0x80) {
      if (!lh_utf8_next((const uint8_t *)s + i, len - i, &step)) what = "bytes that are not UTF-8", step = 1;
    } else if (in_str && s[i] == '\\') {
      if (i + 5 < len && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) what = "\\u0000 (NUL)";
      step = i + 1 < len ? 2 : 1;
    } else if (s[i] == '"') {
      if (!in_str) {
        str_start = i + 1;
      } else {
        size_t j = i + 1;
        while (j < len && (s[j] == ' ' || s[j] == '\t' || s[j] == '\r' || s[j] == '\n')) j++;
        if (j < len && s[j] == ':') key = line + str_start, key_len = i - str_start;
      }
      in_str = !in_str;
    }
    if (what) {
      int is_id = key && key_len == 9 && !memcmp(key, "custom_id", 9);
      rc->id_tainted |= is_id;
      if (clean) {
        size_t kl = key_len > 64 ? 64 : key_len;
        while (kl && kl < key_len && ((unsigned char)key[kl] & 0xC0) == 0x80) kl--; /* whole characters */
        snprintf(rc->msg, sizeof rc->msg, "column %zu%s%.*s%s holds %s, %s", i + 1, key ? " (after \"" : "",
                 (int)kl, key ? key : "", key ? "\")" : "", what,
                 s[i] >= 0x80 ? "and JSON text must be UTF-8: re-encode the batch as UTF-8"
                              : "which longhaul cannot carry in a string: remove it");
      }
      clean = 0;
    }
    i += step;
  }
  return clean;
}

/* Whether the request object names custom_id more than once. */
static int two_ids(const cJSON *root) {
  int n = 0;
  for (const cJSON *it = root->child; it; it = it->next) n += it->string && !strcmp(it->string, "custom_id");
  return n > 1;
}

static void parse_line(const char *line, size_t len, int lineno, const parse_ctx *c, lh_request *r) {
  memset(r, 0, sizeof *r);
  r->line = lineno;
  r->max_tokens = -1;
  r->temperature = 1.0;
  r->top_p = 1.0;
  raw_check rc;
  if (!check_raw(line, len, &rc)) bad(r, "%s", rc.msg);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(line, len, &end, 0);
  const long deep = root ? -1 : lh_json_too_deep_at(line, len); /* why cJSON refused it, if that is why */
  if (deep >= 0) {
    bad(r, "arrays and objects nest more than %d deep (column %ld): longhaul reads no deeper", CJSON_NESTING_LIMIT,
        deep + 1);
  } else if (!root) {
    long col = end && end >= line && end <= line + len ? (long)(end - line) + 1 : 0;
    bad(r, "not valid JSON (near column %ld)", col);
  } else if (!cJSON_IsObject(root)) {
    bad(r, "a request must be a JSON object");
  } else {
    size_t k = (size_t)(end - line);
    while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
    if (k < len) bad(r, "text after the request's JSON object (column %zu): one request per line", k + 1);
    const char *dup = NULL;
    if (lh_json_duplicate_key(root, 1, &dup)) bad(r, "out of memory");
    else if (dup)
      bad(r, "key \"%.64s\" appears more than once in one object; JSON readers disagree on which one counts, "
             "so write it once",
          dup);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    if (cJSON_IsString(id) && id->valuestring[0]) {
      /* An id that is not exactly the line's string is not echoed: its line is refused above. Nor
       * is one of two ids: which one the line meant is unknown. */
      if (!rc.id_tainted && !two_ids(root)) r->custom_id = dupstr(id->valuestring);
    } else {
      bad(r, "custom_id must be a non-empty string");
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    if (method && (!cJSON_IsString(method) || strcmp(method->valuestring, "POST")))
      bad(r, "method must be \"POST\"");
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(root, "url");
    if (!cJSON_IsString(url)) {
      bad(r, "url must be \"/v1/chat/completions\" or \"/v1/completions\"");
    } else if (!strcmp(url->valuestring, "/v1/chat/completions")) {
      r->endpoint = LH_EP_CHAT;
    } else if (!strcmp(url->valuestring, "/v1/completions")) {
      r->endpoint = LH_EP_COMPLETIONS;
    } else {
      bad(r, "url \"%s\" is not supported (use /v1/chat/completions or /v1/completions)", url->valuestring);
    }
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(root, "body");
    if (!cJSON_IsObject(body)) bad(r, "body must be an object");
    else if (r->error.code == LH_OK) parse_body(body, c, r);
  }
  cJSON_Delete(root);
  if (!r->custom_id) {
    char id[32];
    snprintf(id, sizeof id, "line-%d", lineno);
    r->custom_id = dupstr(id);
    r->custom_id_made = 1;
  }
}

void lh_request_parse(const char *line, size_t len, int lineno, const char *base_dir, lh_request *r) {
  parse_ctx c = {.base = base_dir};
  parse_line(line, len, lineno, &c, r);
}

void lh_request_free(lh_request *r) {
  if (!r) return;
  free(r->custom_id);
  free(r->model);
  for (int i = 0; i < r->n_messages; i++) {
    free(r->messages[i].role);
    free(r->messages[i].content);
  }
  free(r->messages);
  free(r->prompt);
  for (int i = 0; i < r->n_documents; i++) {
    free(r->documents[i].path);
    free(r->documents[i].resolved);
    free_list(r->documents[i].include);
    free_list(r->documents[i].exclude);
    free(r->documents[i].frame);
  }
  free(r->documents);
  for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
  memset(r, 0, sizeof *r);
}

void lh_batch_free(lh_batch *b) {
  if (!b) return;
  for (int i = 0; i < b->n; i++) lh_request_free(&b->req[i]);
  free(b->req);
  b->req = NULL;
  b->n = b->n_bad = 0;
}

/* ---- the batch: read once, parse in one pass ---- */

lh_batch_params lh_batch_default_params(void) {
  lh_batch_params p = {0};
  p.max_bytes = LH_BATCH_MAX_BYTES;
  return p;
}

/* SipHash-1-3 (Aumasson and Bernstein), the keyed hash of Rust's HashMap: with a random key per
 * process, custom_ids chosen to collide cannot be found offline. */
#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                       \
  do {                                                                                 \
    v0 += v1, v1 = ROTL(v1, 13), v1 ^= v0, v0 = ROTL(v0, 32);                          \
    v2 += v3, v3 = ROTL(v3, 16), v3 ^= v2;                                             \
    v0 += v3, v3 = ROTL(v3, 21), v3 ^= v0;                                             \
    v2 += v1, v1 = ROTL(v1, 17), v1 ^= v2, v2 = ROTL(v2, 32);                          \
  } while (0)
static uint64_t siphash13(const uint64_t k[2], const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t v0 = 0x736f6d6570736575ull ^ k[0], v1 = 0x646f72616e646f6dull ^ k[1];
  uint64_t v2 = 0x6c7967656e657261ull ^ k[0], v3 = 0x7465646279746573ull ^ k[1];
  uint64_t m, b = (uint64_t)n << 56;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&m, p + i, 8); /* little-endian hosts only, as the rest of longhaul */
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  for (size_t j = 0; i + j < n; j++) b |= (uint64_t)p[i + j] << (8 * j);
  v3 ^= b;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

/* custom_id -> index of the first request that used it; open addressing, at most half full. */
typedef struct id_table {
  int *slot; /* request index + 1; 0 is empty */
  size_t mask;
  uint64_t key[2];
} id_table;

static lh_status id_table_init(id_table *t, size_t expect) {
  size_t cap = 64;
  while (cap < 2 * expect) cap *= 2;
  t->slot = calloc(cap, sizeof *t->slot);
  t->mask = cap - 1;
  if (getrandom(t->key, sizeof t->key, GRND_NONBLOCK) != (ssize_t)sizeof t->key) {
    t->key[0] = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)t; /* no entropy yet: still varies */
    t->key[1] = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ (uint64_t)clock();
  }
  return t->slot ? LH_OK : LH_ENOMEM;
}

/* The index of the request that first used id, or -1 after recording idx as its first user. */
static int id_table_first(id_table *t, const lh_request *req, const char *id, int idx) {
  size_t h = (size_t)siphash13(t->key, id, strlen(id)) & t->mask;
  for (;; h = (h + 1) & t->mask) {
    int s = t->slot[h];
    if (!s) {
      t->slot[h] = idx + 1;
      return -1;
    }
    if (!strcmp(req[s - 1].custom_id, id)) return s - 1;
  }
}

/* The folder of path ("." when it has none). */
static void dir_of(const char *path, char *out, size_t outsz) {
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(out, outsz, ".");
  else if (slash == path) snprintf(out, outsz, "/");
  else snprintf(out, outsz, "%.*s", (int)(slash - path), path);
}

static lh_status parse_all(const char *data, size_t len, const char *name, const char *default_base,
                           int batch_on_stdin, const lh_batch_params *p, lh_batch *out, lh_error *err) {
  lh_batch_params dp = lh_batch_default_params();
  if (!p) p = &dp;
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", name);
  uint8_t dg[32];
  lh_sha256_buf(data, len, dg);
  lh_hex(dg, 32, out->sha256);
  parse_ctx c = {.base = p->base_dir ? p->base_dir : default_base, .batch_on_stdin = batch_on_stdin};
  char *root = NULL;
  if (p->documents_root) {
    struct stat sb;
    root = realpath(p->documents_root, NULL);
    if (!root)
      return lh_error_set(err, errno == ENOENT || errno == ENOTDIR ? LH_ENOTFOUND : LH_EIO, "documents root %s: %s",
                          p->documents_root, strerror(errno));
    if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
      free(root);
      return lh_error_set(err, LH_EINVAL, "documents root %s is not a folder", p->documents_root);
    }
    c.root = root;
  }
  /* Lines are at most the newlines plus one: one allocation, no copying as the batch grows. */
  size_t lines = 1;
  for (const char *q = data; (q = memchr(q, '\n', (size_t)(data + len - q))) != NULL; q++) lines++;
  if (lines > INT_MAX / 2) {
    free(root);
    return lh_error_set(err, LH_ELIMIT, "%s: %zu lines; a batch holds at most %d", name, lines, INT_MAX / 2);
  }
  id_table ids = {0};
  out->req = calloc(lines, sizeof *out->req);
  if (!out->req || id_table_init(&ids, lines) != LH_OK) {
    free(root);
    free(ids.slot);
    lh_batch_free(out);
    return lh_error_set(err, LH_ENOMEM, "%s: out of memory for %zu lines", name, lines);
  }
  int lineno = 0;
  for (size_t at = 0; at < len;) {
    const char *line = data + at;
    const char *nl = memchr(line, '\n', len - at);
    size_t n = nl ? (size_t)(nl - line) : len - at;
    at += n + (nl != NULL);
    lineno++;
    while (n && line[n - 1] == '\r') n--;
    size_t k = 0;
    while (k < n && (line[k] == ' ' || line[k] == '\t')) k++;
    if (k == n) continue;
    lh_request *r = &out->req[out->n];
    parse_line(line, n, lineno, &c, r);
    /* a made-up "line-N" is no line's id: a later line may really be called that */
    const int first = r->custom_id_made ? -1 : id_table_first(&ids, out->req, r->custom_id, out->n);
    if (first >= 0) bad(r, "custom_id \"%s\" was already used on line %d", r->custom_id, out->req[first].line);
    if (r->error.code != LH_OK) out->n_bad++;
    out->n++;
  }
  free(ids.slot);
  free(root);
  return LH_OK;
}

lh_status lh_batch_parse(const char *data, size_t len, const char *name, const lh_batch_params *p, lh_batch *out,
                         lh_error *err) {
  char base[4096];
  dir_of(name, base, sizeof base);
  return parse_all(data, len, name, base, 0, p, out, err);
}

/* Read f to its end into b, refusing more than max bytes. hint: the size to expect, or 0. */
static lh_status read_all(FILE *f, const char *name, size_t max, size_t hint, lh_buf *b, lh_error *err) {
  if (lh_buf_reserve(b, hint ? hint + 1 : 1 << 16)) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", name);
  for (;;) {
    if (b->len > max)
      return lh_error_set(err, LH_ELIMIT, "%s: the batch is over %zu bytes, the most read at once; split it", name,
                          max);
    if (b->cap - b->len < 2 && lh_buf_reserve(b, b->cap))
      return lh_error_set(err, LH_ENOMEM, "%s: out of memory after %zu bytes", name, b->len);
    size_t room = b->cap - b->len - 1;
    if (room > max + 1 - b->len) room = max + 1 - b->len;
    size_t got = fread(b->data + b->len, 1, room, f);
    b->len += got;
    b->data[b->len] = 0;
    if (got < room) break;
  }
  if (ferror(f) && errno == EINTR) /* Ctrl-C while a pipe or terminal had nothing to give */
    return lh_error_set(err, LH_EINTR, "%s: interrupted while reading the batch (%zu bytes read); nothing ran", name,
                        b->len);
  if (ferror(f)) return lh_error_set(err, LH_EIO, "%s: read error after %zu bytes: %s", name, b->len, strerror(errno));
  if (b->len > max)
    return lh_error_set(err, LH_ELIMIT, "%s: the batch is over %zu bytes, the most read at once; split it", name, max);
  return LH_OK;
}

static lh_status load(FILE *f, const char *name, const char *base, int on_stdin, const lh_batch_params *p,
                      lh_batch *out, lh_error *err) {
  size_t max = p && p->max_bytes ? p->max_bytes : LH_BATCH_MAX_BYTES;
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode))
    return lh_error_set(err, LH_EINVAL, "%s is a folder; a batch is a JSONL file, one request per line", name);
  size_t hint = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 ? (size_t)sb.st_size : 0;
  if (hint > max)
    return lh_error_set(err, LH_ELIMIT, "%s: the batch is %zu bytes, over the %zu read at once; split it", name, hint,
                        max);
  lh_buf b = {0};
  lh_status st = read_all(f, name, max, hint, &b, err);
  if (st == LH_OK) st = parse_all(b.data ? b.data : "", b.len, name, base, on_stdin, p, out, err);
  lh_buf_free(&b);
  return st;
}

lh_status lh_batch_load_stream(FILE *f, const char *name, const lh_batch_params *p, lh_batch *out, lh_error *err) {
  memset(out, 0, sizeof *out);
  return load(f, name ? name : "-", ".", f == stdin, p, out, err);
}

lh_status lh_batch_load_params(const char *path, const lh_batch_params *p, lh_batch *out, lh_error *err) {
  memset(out, 0, sizeof *out);
  if (!strcmp(path, "-")) return lh_batch_load_stream(stdin, "-", p, out, err);
  /* a FIFO, a device or a socket is refused, never read (it could hang or never end); a stream
   * comes through "-" */
  struct stat sb;
  const int fd = lh_file_open_regular(path, &sb);
  if (fd < 0 && errno) { /* a name the caller may not open is theirs to fix (LH_EINVAL); a failing disk is LH_EIO */
    const int e = errno;
    const int named = e == EACCES || e == EPERM || e == ENOTDIR || e == ELOOP || e == ENAMETOOLONG;
    return lh_error_set(err, e == ENOENT ? LH_ENOTFOUND : named ? LH_EINVAL : LH_EIO, "%s: %s", path, strerror(e));
  }
  if (fd < 0 && S_ISDIR(sb.st_mode))
    return lh_error_set(err, LH_EINVAL, "%s is a folder; a batch is a JSONL file, one request per line", path);
  if (fd < 0)
    return lh_error_set(err, LH_EINVAL, "%s: is %s, not a regular file; a batch is a JSONL file (to stream one, "
                        "pipe it to `longhaul run -`)", path, lh_file_kind(sb.st_mode));
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    const int e = errno;
    close(fd);
    return lh_error_set(err, LH_ENOMEM, "%s: %s", path, strerror(e));
  }
  char base[4096];
  dir_of(path, base, sizeof base);
  lh_status st = load(f, path, base, 0, p, out, err);
  fclose(f);
  return st;
}

lh_status lh_batch_load(const char *path, lh_batch *out, lh_error *err) {
  return lh_batch_load_params(path, NULL, out, err);
}

/* Append to out the components of tail[0..n) that are not empty or ".", each after a '/'. */
static void append_clean(lh_buf *out, const char *tail, size_t n) {
  for (size_t i = 0; i < n;) {
    while (i < n && tail[i] == '/') i++;
    size_t j = i;
    while (j < n && tail[j] != '/') j++;
    if (j > i && !(j - i == 1 && tail[i] == '.')) {
      if (!out->len || out->data[out->len - 1] != '/') lh_buf_append(out, "/", 1);
      lh_buf_append(out, tail + i, j - i);
    }
    i = j;
  }
}

/* Which file an input is, whatever the spelling of its path: its real path; for a path that does
 * not exist, the real path of its deepest existing folder and then the rest as written (less
 * empty and "." components), so "x/./gone.tar" and "/abs/x/gone.tar" are one input too. */
static void identity(const char *path, lh_buf *out) {
  if (!strcmp(path, "-")) {
    lh_buf_append_str(out, "-");
    return;
  }
  char *real = realpath(path, NULL);
  if (real) {
    lh_buf_append_str(out, real);
    free(real);
    return;
  }
  size_t cut = strlen(path);
  for (;;) {
    while (cut > 0 && path[cut - 1] != '/') cut--; /* path[0..cut) is a folder prefix with its '/' */
    char *head = cut ? strndup(path, cut) : strdup(".");
    real = head ? realpath(head, NULL) : NULL;
    free(head);
    if (real || cut == 0) break;
    while (cut > 0 && path[cut - 1] == '/') cut--;
  }
  lh_buf_append_str(out, real ? real : ".");
  free(real);
  append_clean(out, path + cut, strlen(path + cut));
}

void lh_request_documents_key(const lh_request *r, char out[65]) {
  lh_sha256 s;
  lh_sha256_init(&s);
  lh_buf id = {0};
  for (int i = 0; i < r->n_documents; i++) {
    const lh_document_input *d = &r->documents[i];
    /* Field tags and NUL separators keep ("a","b") and ("ab","") apart. The path as written is
     * part of the key because it may be shown in the prompt; the file's identity because the
     * same spelling means another file under another base folder. */
    lh_sha256_update(&s, "P", 1);
    lh_sha256_update(&s, d->path ? d->path : "", strlen(d->path ? d->path : "") + 1);
    lh_buf_clear(&id);
    identity(d->resolved ? d->resolved : "", &id);
    lh_sha256_update(&s, "R", 1);
    lh_sha256_update(&s, id.data ? id.data : "", id.len + 1);
    for (char **p = d->include; p && *p; p++) {
      lh_sha256_update(&s, "I", 1);
      lh_sha256_update(&s, *p, strlen(*p) + 1);
    }
    for (char **p = d->exclude; p && *p; p++) {
      lh_sha256_update(&s, "E", 1);
      lh_sha256_update(&s, *p, strlen(*p) + 1);
    }
    if (d->frame) {
      lh_sha256_update(&s, "F", 1);
      lh_sha256_update(&s, d->frame, strlen(d->frame) + 1);
    }
    lh_sha256_update(&s, "\n", 1);
  }
  lh_buf_free(&id);
  uint8_t dg[32];
  lh_sha256_final(&s, dg);
  lh_hex(dg, 32, out);
}

/* ---- output ---- */

static lh_status emit(lh_buf *out, cJSON *root) {
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!s) return LH_ENOMEM;
  lh_status st = lh_buf_append_str(out, s);
  if (!st) st = lh_buf_append(out, "\n", 1);
  free(s);
  return st;
}

lh_status lh_output_success(lh_buf *out, const lh_request *r, const char *request_id, const lh_completion *c) {
  cJSON *root = cJSON_CreateObject();
  lh_json_add_text(root, "id", request_id);
  lh_json_add_text(root, "custom_id", r->custom_id);
  cJSON *resp = cJSON_AddObjectToObject(root, "response");
  cJSON_AddNumberToObject(resp, "status_code", 200);
  lh_json_add_text(resp, "request_id", request_id);
  cJSON *body = cJSON_AddObjectToObject(resp, "body");
  char cid[128];
  snprintf(cid, sizeof cid, "%s-%s", r->endpoint == LH_EP_CHAT ? "chatcmpl" : "cmpl", request_id);
  lh_json_add_text(body, "id", cid);
  cJSON_AddStringToObject(body, "object", r->endpoint == LH_EP_CHAT ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(body, "created", (double)c->created);
  lh_json_add_text(body, "model", c->model);
  cJSON *choices = cJSON_AddArrayToObject(body, "choices");
  cJSON *ch = cJSON_CreateObject();
  cJSON_AddNumberToObject(ch, "index", 0);
  if (r->endpoint == LH_EP_CHAT) {
    cJSON *msg = cJSON_AddObjectToObject(ch, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    lh_json_add_text(msg, "content", c->text);
  } else {
    lh_json_add_text(ch, "text", c->text);
    cJSON_AddNullToObject(ch, "logprobs");
  }
  lh_json_add_text(ch, "finish_reason", c->finish_reason);
  cJSON_AddItemToArray(choices, ch);
  cJSON *usage = cJSON_AddObjectToObject(body, "usage");
  cJSON_AddNumberToObject(usage, "prompt_tokens", (double)c->prompt_tokens);
  cJSON_AddNumberToObject(usage, "completion_tokens", (double)c->completion_tokens);
  cJSON_AddNumberToObject(usage, "total_tokens", (double)(c->prompt_tokens + c->completion_tokens));
  cJSON *details = cJSON_AddObjectToObject(usage, "prompt_tokens_details");
  cJSON_AddNumberToObject(details, "cached_tokens", (double)c->cached_tokens);
  if (c->n_warnings > 0) {
    cJSON *w = cJSON_AddArrayToObject(body, "warnings");
    for (int i = 0; i < c->n_warnings; i++) {
      cJSON *s = lh_json_text(c->warnings[i]);
      if (s) cJSON_AddItemToArray(w, s);
    }
  }
  cJSON_AddNullToObject(root, "error");
  return emit(out, root);
}

lh_status lh_output_error(lh_buf *out, const char *custom_id, const char *request_id, int status_code,
                          const char *code, const char *message) {
  cJSON *root = cJSON_CreateObject();
  lh_json_add_text(root, "id", request_id);
  lh_json_add_text(root, "custom_id", custom_id);
  cJSON *resp = cJSON_AddObjectToObject(root, "response");
  cJSON_AddNumberToObject(resp, "status_code", status_code);
  lh_json_add_text(resp, "request_id", request_id);
  cJSON_AddNullToObject(resp, "body");
  cJSON *e = cJSON_AddObjectToObject(root, "error");
  lh_json_add_text(e, "code", code);
  lh_json_add_text(e, "message", message);
  return emit(out, root);
}
