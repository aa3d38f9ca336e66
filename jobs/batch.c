/* batch.c — parse OpenAI Batch API JSONL lines into lh_request and write batch output lines.
 *
 * Invariants: every line yields exactly one request (so every input line gets exactly one output
 * line); a request with error set is never run; strings are copied out of cJSON so the parse tree
 * is freed line by line (a batch of 100,000 requests holds only its requests, not its JSON).
 * Unknown body fields that change the answer (n > 1, stream, tools, logprobs, response_format)
 * are rejected rather than ignored; fields that do not (user, metadata, model) are accepted.
 */
#define _POSIX_C_SOURCE 200809L
#include "jobs/batch.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"

static char *dupstr(const char *s) { return s ? strdup(s) : NULL; }

static void bad(lh_request *r, const char *fmt, const char *a, const char *b) {
  if (r->error.code != LH_OK) return; /* keep the first problem */
  char msg[512];
  snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
  lh_error_set(&r->error, LH_EFORMAT, "line %d: %s", r->line, msg);
}

/* Text of an OpenAI message content: a string, or an array of parts of which only "text" parts
 * are allowed (image/audio parts are rejected: this model reads text). */
static char *content_text(const cJSON *c, lh_request *r, int idx) {
  char where[32];
  snprintf(where, sizeof where, "%d", idx);
  if (cJSON_IsString(c)) return dupstr(c->valuestring);
  if (cJSON_IsNull(c) || !c) return dupstr("");
  if (!cJSON_IsArray(c)) {
    bad(r, "body.messages[%s].content must be a string or an array of text parts", where, NULL);
    return NULL;
  }
  lh_buf b = {0};
  const cJSON *part;
  cJSON_ArrayForEach(part, c) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
      bad(r, "body.messages[%s].content: only {\"type\": \"text\", \"text\": ...} parts are supported", where, NULL);
      lh_buf_free(&b);
      return NULL;
    }
    lh_buf_append_str(&b, text->valuestring);
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
    bad(r, "%s must be a string or an array of strings", field, NULL);
    return NULL;
  }
  int n = cJSON_GetArraySize(a);
  char **v = calloc((size_t)n + 1, sizeof *v);
  if (!v) return NULL;
  int i = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, a) {
    if (!cJSON_IsString(it)) {
      bad(r, "%s must contain only strings", field, NULL);
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

static void parse_documents(const cJSON *docs, const char *base, lh_request *r) {
  if (!docs || cJSON_IsNull(docs)) return;
  if (!cJSON_IsArray(docs)) {
    bad(r, "body.documents must be an array of paths or {\"path\": ...} objects", NULL, NULL);
    return;
  }
  int n = cJSON_GetArraySize(docs);
  r->documents = calloc((size_t)(n ? n : 1), sizeof *r->documents);
  if (!r->documents) return;
  const cJSON *d;
  cJSON_ArrayForEach(d, docs) {
    lh_document_input *di = &r->documents[r->n_documents];
    char where[32];
    snprintf(where, sizeof where, "%d", r->n_documents);
    if (cJSON_IsString(d)) {
      di->path = dupstr(d->valuestring);
    } else if (cJSON_IsObject(d)) {
      const cJSON *p = cJSON_GetObjectItemCaseSensitive(d, "path");
      if (!cJSON_IsString(p)) {
        bad(r, "body.documents[%s].path must be a string", where, NULL);
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
          if (!cJSON_IsString(it)) bad(r, "body.documents[%s].frame must be a string", where, NULL);
          else di->frame = dupstr(it->valuestring);
        } else {
          bad(r, "body.documents[%s]: unknown field '%s' (known: path, include, exclude, frame)", where, it->string);
        }
      }
    } else {
      bad(r, "body.documents[%s] must be a path string or an object", where, NULL);
      return;
    }
    if (!di->path || !di->path[0]) {
      bad(r, "body.documents[%s].path is empty", where, NULL);
      free(di->path);
      di->path = NULL;
      return;
    }
    di->resolved = resolve(base, di->path);
    r->n_documents++;
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

static void parse_body(const cJSON *body, const char *base, lh_request *r) {
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
        bad(r, "body.%s is not supported by longhaul%s", it->string, "");
    for (size_t i = 0; i < sizeof rejected / sizeof *rejected; i++) known |= !strcmp(it->string, rejected[i]);
    for (size_t i = 0; i < sizeof accepted / sizeof *accepted; i++) known |= !strcmp(it->string, accepted[i]);
    if (!known) bad(r, "body.%s is not a known field%s", it->string, "");
  }
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
  if (cJSON_IsString(model)) r->model = dupstr(model->valuestring);
  int n = 1;
  get_int(body, "n", &n, r, 1, 1000);
  if (n != 1) bad(r, "body.n = %s: only one choice per request is supported", "n>1", NULL);
  const cJSON *stream = cJSON_GetObjectItemCaseSensitive(body, "stream");
  if (cJSON_IsTrue(stream)) bad(r, "body.stream is not available in batch mode%s", "", NULL);
  double pen = 0;
  if (get_num(body, "presence_penalty", &pen, r, -2, 2) && pen != 0)
    bad(r, "body.presence_penalty is not supported (only 0)%s", "", NULL);
  if (get_num(body, "frequency_penalty", &pen, r, -2, 2) && pen != 0)
    bad(r, "body.frequency_penalty is not supported (only 0)%s", "", NULL);

  if (r->endpoint == LH_EP_CHAT) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
      bad(r, "body.messages must be a non-empty array for %s", "/v1/chat/completions", NULL);
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
          bad(r, "body.messages[%s].role must be system, developer, user or assistant%s", where, "");
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
    if (cJSON_GetObjectItemCaseSensitive(body, "prompt")) bad(r, "body.prompt belongs to /v1/completions%s", "", NULL);
  } else {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (cJSON_IsString(p)) {
      r->prompt = dupstr(p->valuestring);
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(cJSON_GetArrayItem(p, 0))) {
      r->prompt = dupstr(cJSON_GetArrayItem(p, 0)->valuestring);
    } else {
      bad(r, "body.prompt must be a string (or an array of one string) for %s", "/v1/completions", NULL);
    }
    if (cJSON_GetObjectItemCaseSensitive(body, "messages"))
      bad(r, "body.messages belongs to /v1/chat/completions%s", "", NULL);
  }

  int mt = -1;
  if (get_int(body, "max_tokens", &mt, r, 1, 1 << 30)) r->max_tokens = mt;
  if (get_int(body, "max_completion_tokens", &mt, r, 1, 1 << 30)) r->max_tokens = mt;
  get_num(body, "temperature", &r->temperature, r, 0, 2);
  get_num(body, "top_p", &r->top_p, r, 0, 1);
  if (r->top_p == 0) bad(r, "body.top_p must be greater than 0%s", "", NULL);
  const cJSON *seed = cJSON_GetObjectItemCaseSensitive(body, "seed");
  if (seed && !cJSON_IsNull(seed)) {
    if (!cJSON_IsNumber(seed) || seed->valuedouble != floor(seed->valuedouble) || fabs(seed->valuedouble) > 9.007e15) {
      bad(r, "body.seed must be an integer%s", "", NULL);
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
        bad(r, "body.stop has more than 4 strings%s", "", NULL);
        break;
      }
      if (!**p) {
        bad(r, "body.stop strings must not be empty%s", "", NULL);
        break;
      }
      r->stop[r->n_stop++] = dupstr(*p);
    }
    free_list(v);
  }
  parse_documents(cJSON_GetObjectItemCaseSensitive(body, "documents"), base, r);
}

void lh_request_parse(const char *line, size_t len, int lineno, const char *base_dir, lh_request *r) {
  memset(r, 0, sizeof *r);
  r->line = lineno;
  r->max_tokens = -1;
  r->temperature = 1.0;
  r->top_p = 1.0;
  cJSON *root = cJSON_ParseWithLength(line, len);
  if (!root) {
    const char *at = cJSON_GetErrorPtr();
    long col = at && at >= line && at <= line + len ? (long)(at - line) + 1 : 0;
    char c[32];
    snprintf(c, sizeof c, "%ld", col);
    bad(r, "not valid JSON (near column %s)%s", c, "");
  } else if (!cJSON_IsObject(root)) {
    bad(r, "a request must be a JSON object%s", "", NULL);
  } else {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "custom_id");
    if (cJSON_IsString(id) && id->valuestring[0]) r->custom_id = dupstr(id->valuestring);
    else bad(r, "custom_id must be a non-empty string%s", "", NULL);
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    if (method && (!cJSON_IsString(method) || strcmp(method->valuestring, "POST")))
      bad(r, "method must be \"POST\"%s", "", NULL);
    const cJSON *url = cJSON_GetObjectItemCaseSensitive(root, "url");
    if (!cJSON_IsString(url)) {
      bad(r, "url must be \"/v1/chat/completions\" or \"/v1/completions\"%s", "", NULL);
    } else if (!strcmp(url->valuestring, "/v1/chat/completions")) {
      r->endpoint = LH_EP_CHAT;
    } else if (!strcmp(url->valuestring, "/v1/completions")) {
      r->endpoint = LH_EP_COMPLETIONS;
    } else {
      bad(r, "url \"%s\" is not supported (use /v1/chat/completions or /v1/completions)", url->valuestring, NULL);
    }
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(root, "body");
    if (!cJSON_IsObject(body)) bad(r, "body must be an object%s", "", NULL);
    else if (r->error.code == LH_OK) parse_body(body, base_dir, r);
  }
  cJSON_Delete(root);
  if (!r->custom_id) {
    char id[32];
    snprintf(id, sizeof id, "line-%d", lineno);
    r->custom_id = dupstr(id);
  }
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

lh_status lh_batch_load(const char *path, lh_batch *out, lh_error *err) {
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", path);
  FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) return lh_error_set(err, errno == ENOENT ? LH_ENOTFOUND : LH_EIO, "%s: %s", path, strerror(errno));
  char base[4096] = ".";
  const char *slash = strrchr(path, '/');
  if (slash && strcmp(path, "-")) snprintf(base, sizeof base, "%.*s", (int)(slash - path), path);
  if (slash == path) snprintf(base, sizeof base, "/");
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int lineno = 0, cap_req = 0;
  lh_status st = LH_OK;
  while ((n = getline(&line, &cap, f)) >= 0) {
    lineno++;
    size_t len = (size_t)n;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
    if (k == len) continue;
    if (out->n == cap_req) {
      int nc = cap_req ? cap_req * 2 : 64;
      lh_request *p = realloc(out->req, (size_t)nc * sizeof *p);
      if (!p) {
        st = lh_error_set(err, LH_ENOMEM, "%s: out of memory at line %d", path, lineno);
        break;
      }
      out->req = p;
      cap_req = nc;
    }
    lh_request *r = &out->req[out->n];
    lh_request_parse(line, len, lineno, base, r);
    for (int i = 0; i < out->n && r->error.code == LH_OK; i++)
      if (!strcmp(out->req[i].custom_id, r->custom_id)) {
        char prev[32];
        snprintf(prev, sizeof prev, "%d", out->req[i].line);
        bad(r, "custom_id \"%s\" was already used on line %s", r->custom_id, prev);
      }
    if (r->error.code != LH_OK) out->n_bad++;
    out->n++;
  }
  int rerr = ferror(f);
  free(line);
  if (f != stdin) fclose(f);
  if (st == LH_OK && rerr) st = lh_error_set(err, LH_EIO, "%s: read error after line %d", path, lineno);
  if (st != LH_OK) lh_batch_free(out);
  return st;
}

void lh_request_documents_key(const lh_request *r, char out[65]) {
  lh_sha256 s;
  lh_sha256_init(&s);
  for (int i = 0; i < r->n_documents; i++) {
    const lh_document_input *d = &r->documents[i];
    /* Field tags and NUL separators keep ("a","b") and ("ab","") apart. */
    lh_sha256_update(&s, "P", 1);
    lh_sha256_update(&s, d->resolved, strlen(d->resolved) + 1);
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
  cJSON_AddStringToObject(root, "id", request_id);
  cJSON_AddStringToObject(root, "custom_id", r->custom_id);
  cJSON *resp = cJSON_AddObjectToObject(root, "response");
  cJSON_AddNumberToObject(resp, "status_code", 200);
  cJSON_AddStringToObject(resp, "request_id", request_id);
  cJSON *body = cJSON_AddObjectToObject(resp, "body");
  char cid[128];
  snprintf(cid, sizeof cid, "%s-%s", r->endpoint == LH_EP_CHAT ? "chatcmpl" : "cmpl", request_id);
  cJSON_AddStringToObject(body, "id", cid);
  cJSON_AddStringToObject(body, "object", r->endpoint == LH_EP_CHAT ? "chat.completion" : "text_completion");
  cJSON_AddNumberToObject(body, "created", (double)c->created);
  cJSON_AddStringToObject(body, "model", c->model ? c->model : "");
  cJSON *choices = cJSON_AddArrayToObject(body, "choices");
  cJSON *ch = cJSON_CreateObject();
  cJSON_AddNumberToObject(ch, "index", 0);
  if (r->endpoint == LH_EP_CHAT) {
    cJSON *msg = cJSON_AddObjectToObject(ch, "message");
    cJSON_AddStringToObject(msg, "role", "assistant");
    cJSON_AddStringToObject(msg, "content", c->text);
  } else {
    cJSON_AddStringToObject(ch, "text", c->text);
    cJSON_AddNullToObject(ch, "logprobs");
  }
  cJSON_AddStringToObject(ch, "finish_reason", c->finish_reason);
  cJSON_AddItemToArray(choices, ch);
  cJSON *usage = cJSON_AddObjectToObject(body, "usage");
  cJSON_AddNumberToObject(usage, "prompt_tokens", (double)c->prompt_tokens);
  cJSON_AddNumberToObject(usage, "completion_tokens", (double)c->completion_tokens);
  cJSON_AddNumberToObject(usage, "total_tokens", (double)(c->prompt_tokens + c->completion_tokens));
  cJSON_AddNullToObject(root, "error");
  return emit(out, root);
}

lh_status lh_output_error(lh_buf *out, const char *custom_id, const char *request_id, int status_code,
                          const char *code, const char *message) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "id", request_id);
  cJSON_AddStringToObject(root, "custom_id", custom_id);
  cJSON *resp = cJSON_AddObjectToObject(root, "response");
  cJSON_AddNumberToObject(resp, "status_code", status_code);
  cJSON_AddStringToObject(resp, "request_id", request_id);
  cJSON_AddNullToObject(resp, "body");
  cJSON *e = cJSON_AddObjectToObject(root, "error");
  cJSON_AddStringToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", message);
  return emit(out, root);
}
