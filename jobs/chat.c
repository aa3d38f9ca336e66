/* chat.c — see chat.h. Recognition is by the role lines the template writes, not by a hash of the
 * template text, so revisions of the MiniMax-Text-01 template that keep its format still match. */
#define _POSIX_C_SOURCE 200809L
#include "jobs/chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "util/fs.h"
#include "util/json.h"

#define BOS_TURN "<beginning_of_sentence>"
#define EOS_TURN "<end_of_sentence>"

lh_status lh_chat_check_tokenizer(const lh_chat_format *f, const lh_tokenizer *t, const char *tokenizer_path,
                                  lh_error *err) {
  if (f->kind != LH_CHAT_MINIMAX) return LH_OK;
  static const char *const markers[] = {BOS_TURN, EOS_TURN};
  for (int k = 0; k < 2; k++) {
    lh_i32vec ids = {0};
    lh_status st = lh_tokenizer_encode(t, markers[k], strlen(markers[k]), 0, &ids, err);
    const size_t n = ids.len;
    const int32_t id = n ? ids.data[0] : -1;
    lh_i32vec_free(&ids);
    if (st) return st;
    if (n != 1 || id != lh_tokenizer_token_to_id(t, markers[k]))
      return lh_error_set(err, LH_EFORMAT,
                          "%s: the MiniMax chat format needs \"%s\" as one token, but this tokenizer encodes it as "
                          "%zu tokens (it is not among added_tokens); fix the tokenizer, or pass --chat-template raw "
                          "for a model without chat turns",
                          tokenizer_path, markers[k], n);
  }
  return LH_OK;
}

const char *lh_chat_format_name(const lh_chat_format *f) {
  return f->kind == LH_CHAT_MINIMAX ? "minimax" : f->kind == LH_CHAT_RAW ? "raw" : NULL;
}

static int is_minimax_template(const char *t) {
  return strstr(t, BOS_TURN) && strstr(t, EOS_TURN) && strstr(t, "user name=user") && strstr(t, "ai name=assistant");
}

static const char *json_type_name(const cJSON *v) {
  return cJSON_IsNumber(v) ? "a number" : cJSON_IsBool(v) ? "true or false" : cJSON_IsString(v) ? "a string"
         : cJSON_IsArray(v) ? "a list" : cJSON_IsObject(v) ? "an object" : "null";
}

/* The template text of tokenizer_config.json's root (path): chat_template as a string, or the
 * "default" one of a list of {"name", "template"} objects, as transformers picks it (it refuses a
 * list without "default" too); NULL when there is none (absent or null). LH_EFORMAT for a file
 * that gives a key twice in an object (Python's json, which transformers reads it with, keeps the
 * last, cJSON the first) or a chat_template of another shape, naming what is wrong. */
static lh_status chat_template_text(const cJSON *root, const char *path, const char **text, lh_error *err) {
  *text = NULL;
  if (!cJSON_IsObject(root)) return lh_error_set(err, LH_EFORMAT, "%s: expected a JSON object", path);
  const char *dup = NULL;
  if (lh_json_duplicate_key(root, 1, &dup)) return lh_error_set(err, LH_ENOMEM, "out of memory");
  if (dup)
    return lh_error_set(err, LH_EFORMAT, "%s: key \"%.64s\" appears more than once in one object; transformers "
                        "reads the last and longhaul would read the first, so write it once", path, dup);
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
  if (!t || cJSON_IsNull(t)) return LH_OK;
  if (cJSON_IsString(t)) {
    *text = t->valuestring;
    return LH_OK;
  }
  if (!cJSON_IsArray(t))
    return lh_error_set(err, LH_EFORMAT, "%s: chat_template is %s; expected a string (a Jinja template) or a list "
                        "of {\"name\": ..., \"template\": ...}", path, json_type_name(t));
  int i = 0;
  for (const cJSON *it = t->child; it; it = it->next, i++) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
    const cJSON *tt = cJSON_GetObjectItemCaseSensitive(it, "template");
    if (!cJSON_IsObject(it) || !cJSON_IsString(name) || !cJSON_IsString(tt))
      return lh_error_set(err, LH_EFORMAT, "%s: chat_template[%d] is not {\"name\": a string, \"template\": a "
                          "string}", path, i);
    if (!strcmp(name->valuestring, "default")) *text = tt->valuestring; /* the last of a name, as a dict keeps it */
  }
  if (!*text && i)
    return lh_error_set(err, LH_EFORMAT, "%s: chat_template lists %d named templates and none is called \"default\", "
                        "so which one formats a chat is not said; pass --chat-template minimax or raw", path, i);
  return LH_OK;
}

/* Pick the format from one template text read from `where` (named in errors); NULL: none. */
static lh_status format_from_text(const char *text, const char *where, lh_chat_format *f, lh_error *err) {
  if (!text) {
    f->kind = 0;
    return LH_OK;
  }
  if (is_minimax_template(text)) {
    f->kind = LH_CHAT_MINIMAX;
    snprintf(f->end_token, sizeof f->end_token, "%s", EOS_TURN);
    return LH_OK;
  }
  return lh_error_set(err, LH_EUNSUPPORTED,
                      "%s: its chat template is not one longhaul renders natively (it knows MiniMax-Text-01's); "
                      "pass --chat-template minimax to use MiniMax-Text-01's format or --chat-template raw "
                      "to send the message texts unformatted",
                      where);
}

/* The template files transformers (5.x) saves beside tokenizer_config.json and prefers to any
 * chat_template in it: chat_template.jinja holds the default template, chat_templates/NAME.jinja
 * named ones. *found is 1 when the folder has any (then tokenizer_config.json's entry is ignored,
 * as transformers ignores it), with the default's text in b and its path in where. */
static lh_status template_files(const char *model_dir, lh_buf *b, char *where, size_t wn, int *found,
                                lh_error *err) {
  *found = 0;
  static const char *const names[] = {"chat_template.jinja", "chat_templates/default.jinja"};
  for (int i = 0; i < 2; i++) {
    lh_path_join(where, wn, model_dir, names[i]);
    lh_error e;
    const lh_status st = lh_file_read_regular(where, 64u << 20, b, &e);
    if (st == LH_ENOTFOUND) continue;
    if (st) return lh_error_set(err, e.code, "%s", e.msg);
    if (b->len && memchr(b->data, 0, b->len))
      return lh_error_set(err, LH_EFORMAT, "%s: holds a NUL byte; a chat template is text", where);
    *found = 1;
    return LH_OK;
  }
  lh_path_join(where, wn, model_dir, "chat_templates");
  struct stat sb;
  if (stat(where, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    *found = 1;
    return lh_error_set(err, LH_EFORMAT, "%s: holds named chat templates but the folder has no chat_template.jinja "
                        "and this has no default.jinja, so which one formats a chat is not said; pass "
                        "--chat-template minimax or raw", where);
  }
  return LH_OK;
}

lh_status lh_chat_format_detect(const char *model_dir, const char *override, lh_chat_format *f, lh_error *err) {
  memset(f, 0, sizeof *f);
  if (override) {
    if (!strcmp(override, "minimax")) {
      f->kind = LH_CHAT_MINIMAX;
      snprintf(f->end_token, sizeof f->end_token, "%s", EOS_TURN);
      return LH_OK;
    }
    if (!strcmp(override, "raw")) {
      f->kind = LH_CHAT_RAW;
      return LH_OK;
    }
    return lh_error_set(err, LH_EINVAL, "--chat-template %s: unknown format (known: minimax, raw)", override);
  }
  char path[4096];
  lh_buf b = {0};
  int found = 0;
  lh_status st = template_files(model_dir, &b, path, sizeof path, &found, err);
  if (st || found) {
    if (!st) st = format_from_text(b.len ? b.data : NULL, path, f, err); /* an empty file: no template */
    lh_buf_free(&b);
    return st;
  }
  lh_path_join(path, sizeof path, model_dir, "tokenizer_config.json");
  lh_error e;
  if (lh_file_read_regular(path, 64u << 20, &b, &e) != LH_OK) {
    lh_buf_free(&b);
    if (e.code == LH_ENOTFOUND) {
      f->kind = 0; /* no template: raw completions only */
      return LH_OK;
    }
    return lh_error_set(err, e.code, "%s", e.msg);
  }
  cJSON *root = cJSON_ParseWithLength(b.data, b.len);
  char deep[128];
  const int too_deep = !root && lh_json_too_deep(b.data, b.len, deep, sizeof deep);
  lh_buf_free(&b);
  if (too_deep) return lh_error_set(err, LH_EFORMAT, "%s: %s", path, deep);
  if (!root) return lh_error_set(err, LH_EFORMAT, "%s: not valid JSON", path);
  const char *text = NULL;
  st = chat_template_text(root, path, &text, err);
  if (!st) st = format_from_text(text, path, f, err);
  cJSON_Delete(root);
  return st;
}

lh_status lh_chat_tokenizer_open(const char *model_dir, const char *override, int32_t n_ids, lh_tokenizer **tok,
                                 lh_chat_format *f, lh_error *err) {
  *tok = NULL;
  char tpath[4096];
  lh_path_join(tpath, sizeof tpath, model_dir, "tokenizer.json");
  lh_tokenizer *t;
  lh_status st = lh_tokenizer_open(model_dir, &t, err);
  if (st) return st;
  if (!(st = lh_chat_format_detect(model_dir, override, f, err)) &&
      !(st = lh_tokenizer_check_ids(t, n_ids, tpath, err)) && !(st = lh_chat_check_tokenizer(f, t, tpath, err)))
    *tok = t;
  else
    lh_tokenizer_close(t);
  return st;
}

lh_status lh_chat_render(const lh_chat_format *f, const lh_request *r, lh_buf *after, lh_error *err) {
  if (r->endpoint == LH_EP_COMPLETIONS) return lh_buf_append_str(after, r->prompt ? r->prompt : "");
  if (f->kind == 0)
    return lh_error_set(err, LH_EUNSUPPORTED,
                        "the model has no chat template (no chat_template.jinja or an empty one, and no "
                        "chat_template in tokenizer_config.json); pass --chat-template minimax or --chat-template raw, or use "
                        "/v1/completions");
  for (int i = 0; i < r->n_messages; i++) {
    const lh_message *m = &r->messages[i];
    if (f->kind == LH_CHAT_RAW) {
      lh_buf_append_str(after, m->content);
      if (i + 1 < r->n_messages) lh_buf_append_str(after, "\n");
      continue;
    }
    const char *head = !strcmp(m->role, "system") ? BOS_TURN "system ai_setting=assistant\n"
                       : !strcmp(m->role, "user") ? BOS_TURN "user name=user\n"
                                                  : BOS_TURN "ai name=assistant\n";
    lh_buf_append_str(after, head);
    lh_buf_append_str(after, m->content);
    lh_buf_append_str(after, EOS_TURN "\n");
  }
  if (f->kind == LH_CHAT_MINIMAX) lh_buf_append_str(after, BOS_TURN "ai name=assistant\n");
  return LH_OK;
}
