/* chat.h — chat formatting: MiniMax-Text-01's template implemented natively, and a raw mode.
 *
 * longhaul does not run Jinja. It recognises the chat template in a model's tokenizer_config.json
 * and renders it in C; a template it does not recognise is an error that names the flag to pick a
 * format explicitly (--chat-template minimax|raw). MiniMax-Text-01's format, per message:
 *
 *     <beginning_of_sentence>system ai_setting=assistant\n{content}<end_of_sentence>\n
 *     <beginning_of_sentence>user name=user\n{content}<end_of_sentence>\n
 *     <beginning_of_sentence>ai name=assistant\n{content}<end_of_sentence>\n
 *
 * followed by the generation prompt `<beginning_of_sentence>ai name=assistant\n`.
 *
 * Documents go at the start of the first user turn, right after its role line, so every request
 * over the same documents (and the same system message) shares the token prefix up to the end of
 * the documents: the rendering is split into the text before the documents and the text after.
 * Completions (/v1/completions) are raw: documents, then the prompt.
 */
#ifndef LH_JOBS_CHAT_H
#define LH_JOBS_CHAT_H

#include "jobs/batch.h"
#include "util/buf.h"
#include "util/err.h"

typedef enum lh_chat_kind { LH_CHAT_MINIMAX = 1, LH_CHAT_RAW = 2 } lh_chat_kind;

typedef struct lh_chat_format {
  lh_chat_kind kind;
  char end_token[64]; /* the token that ends an assistant turn ("<end_of_sentence>"), "" for raw */
} lh_chat_format;

/* Pick the format for a model folder: `override` ("minimax", "raw" or NULL for automatic) wins;
 * otherwise tokenizer_config.json's chat_template decides. A folder without a template gets raw
 * for completions and an error for chat requests (reported by lh_chat_render). */
lh_status lh_chat_format_detect(const char *model_dir, const char *override, lh_chat_format *f, lh_error *err);

/* Render r into the text before its documents and the text after them (both appended). */
lh_status lh_chat_render(const lh_chat_format *f, const lh_request *r, lh_buf *before_docs, lh_buf *after_docs,
                         lh_error *err);

#endif
