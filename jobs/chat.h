/* chat.h — chat formatting: MiniMax-Text-01's template implemented natively, and a raw mode.
 *
 * longhaul does not run Jinja. It recognises the chat template of a model folder (where transformers
 * 5.x looks: chat_template.jinja, then chat_templates/default.jinja, and only when the folder has
 * neither nor a chat_templates/ folder, tokenizer_config.json's chat_template) and renders it in C; a template it does not recognise is an error that names the flag to pick a
 * format explicitly (--chat-template minimax|raw). MiniMax-Text-01's format, per message:
 *
 *     <beginning_of_sentence>system ai_setting=assistant\n{content}<end_of_sentence>\n
 *     <beginning_of_sentence>user name=user\n{content}<end_of_sentence>\n
 *     <beginning_of_sentence>ai name=assistant\n{content}<end_of_sentence>\n
 *
 * followed by the generation prompt `<beginning_of_sentence>ai name=assistant\n`.
 *
 * Documents open the prompt, before the first message: [documents][system turn][user turn]...
 * [generation prompt]. So every request over the same documents shares the token prefix up to
 * their end, whatever its system message or turns, and its own part starts right after them
 * (one prefill for many questions; the fork is at the first token that can differ). The embedded
 * model answers the same in this layout as with the documents inside the first user turn (both
 * demo questions, with and without a system message). Completions (/v1/completions) are the
 * same: documents, then the prompt.
 */
#ifndef LH_JOBS_CHAT_H
#define LH_JOBS_CHAT_H

#include "jobs/batch.h"
#include "tokenizer/tokenizer.h"
#include "util/buf.h"
#include "util/err.h"

typedef enum lh_chat_kind { LH_CHAT_MINIMAX = 1, LH_CHAT_RAW = 2 } lh_chat_kind;

typedef struct lh_chat_format {
  lh_chat_kind kind;
  char end_token[64]; /* the token that ends an assistant turn ("<end_of_sentence>"), "" for raw */
} lh_chat_format;

/* Pick the format for a model folder: `override` ("minimax", "raw" or NULL for automatic) wins;
 * otherwise the folder's chat template decides (chat_template.jinja first, as above). A folder without a template gets raw
 * for completions and an error for chat requests (reported by lh_chat_render). */
lh_status lh_chat_format_detect(const char *model_dir, const char *override, lh_chat_format *f, lh_error *err);

/* "minimax", "raw", or NULL for a folder without a chat template (completions only). */
const char *lh_chat_format_name(const lh_chat_format *f);

/* The format's turn markers must each be one token of t (a special added token), or every prompt
 * would be encoded as text the model never saw and answered wrongly without a word: LH_EFORMAT
 * naming tokenizer_path and the marker otherwise. Nothing to check for raw. */
lh_status lh_chat_check_tokenizer(const lh_chat_format *f, const lh_tokenizer *t, const char *tokenizer_path,
                                  lh_error *err);

/* A model folder's tokenizer and chat format as run, niah and model info take them, each checked:
 * its tokenizer.json (lh_tokenizer_open), the format (lh_chat_format_detect with override), the
 * tokenizer's ids within the model's n_ids (lh_tokenizer_check_ids) and the format's turn markers
 * (lh_chat_check_tokenizer). On success *tok is the caller's to close; on failure it is NULL and
 * err names the file and what is wrong with it. */
lh_status lh_chat_tokenizer_open(const char *model_dir, const char *override, int32_t n_ids, lh_tokenizer **tok,
                                 lh_chat_format *f, lh_error *err);

/* Render r into the text that follows its documents (appended to after_docs; no text precedes
 * the documents). */
lh_status lh_chat_render(const lh_chat_format *f, const lh_request *r, lh_buf *after_docs, lh_error *err);

#endif
