/* tokenizer.h — HF tokenizer.json, reproduced token for token (byte-level BPE family).
 *
 * Supported (anything else in a tokenizer.json is LH_EUNSUPPORTED naming the feature):
 * model BPE (vocab, merges as "a b" strings or ["a","b"] pairs, ignore_merges, byte_fallback,
 * unk_token); pre-tokenizers ByteLevel, Split, Digits, Sequence; normalizers NFC, NFKC, NFD,
 * Lowercase, Replace, Prepend, Sequence; added_tokens (special, normalized, lstrip, rstrip,
 * single_word); decoder ByteLevel; post-processors ByteLevel and TemplateProcessing.
 * The differential test against HF `tokenizers` is tests/tokenizer/.
 *
 * Threading: an lh_tokenizer is immutable after open; any number of threads may encode and decode
 * with it at once. A stream (lh_tok_stream) belongs to one thread (a threaded stream's workers are
 * its own and never call back).
 *
 * Ownership: strings returned by lh_tokenizer_id_to_token live until lh_tokenizer_close.
 */
#ifndef LH_TOKENIZER_TOKENIZER_H
#define LH_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/err.h"

typedef struct lh_tokenizer lh_tokenizer;

/* Long pre-tokens. HF hands a run with no pre-tokenizer boundary in it (a line of one letter, a
 * genome without line breaks, a megabyte of spaces) to the BPE whole: memory grows with the run
 * (about 47 bytes per byte) and a stream can emit nothing until the run ends. Here the search of
 * the last splitting pre-tokenizer step (the one whose pieces the BPE sees) never looks more than
 * 1 MiB past where it starts: when it
 * finds no match it can decide within that window, the text up to where a match may start (or,
 * when one may start right there or none can, the whole window) becomes an element of its own, a
 * piece boundary follows it, and the search starts afresh after it as at the start of a text
 * (the text before is still seen by lookbehinds). Pieces that a behavior merges
 * (MergedWithPrevious/Next, Contiguous) stop growing at the same length. So the ids are HF's
 * whenever no pre-token is longer than 1 MiB and no search scans 1 MiB without deciding, which
 * holds for ordinary text; beyond that a run of one letter encodes as its 1 MiB parts, each
 * encoded as if it were a text of its own. When that step is also the first splitting one (GPT-2,
 * Llama 3 and MiniMax families) a stream restarts after every cut, so its memory is bounded by
 * the cap whatever the input; with an earlier splitting step (Digits first) the BPE's memory is
 * bounded but a stream holds a run that has no boundary of the first step. Tokenizers with no
 * splitting step at all give each piece to the BPE whole. */

/* path: a tokenizer.json file, or a model folder holding one. A file over 128 MiB is refused,
 * unread, with LH_ELIMIT naming it, its size and the limit (real ones are 10-35 MB; the limit
 * bounds the memory its parse takes). */
lh_status lh_tokenizer_open(const char *path, lh_tokenizer **out, lh_error *err);
void lh_tokenizer_close(lh_tokenizer *t); /* accepts NULL */
/* The SHA-256 (64 hex digits) of the tokenizer.json bytes t was built from: two tokenizers with
 * one id encode and decode alike, so a job's identity names its tokenizer by it. */
const char *lh_tokenizer_id(const lh_tokenizer *t);

/* Encode UTF-8 text (invalid bytes handled as HF does for a Python str made with
 * errors="replace", i.e. each invalid sequence becomes U+FFFD), appending ids to out.
 * add_special: apply the post-processor as HF encode(add_special_tokens=True) does. */
lh_status lh_tokenizer_encode(const lh_tokenizer *t, const char *text, size_t len, int add_special,
                              lh_i32vec *out, lh_error *err);
/* Decode ids to UTF-8 text as HF decode(ids, skip_special_tokens=skip_special) does; appends to out. */
lh_status lh_tokenizer_decode(const lh_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                              lh_buf *out, lh_error *err);

int32_t lh_tokenizer_vocab_size(const lh_tokenizer *t);                /* including added tokens */
/* Every id t can produce is below n_ids (a model's vocab_size), else LH_EFORMAT naming
 * tokenizer_path, the largest id and its token: such an id would pass every check until a prompt
 * held it, and fail there, request by request. */
lh_status lh_tokenizer_check_ids(const lh_tokenizer *t, int32_t n_ids, const char *tokenizer_path, lh_error *err);
int32_t lh_tokenizer_token_to_id(const lh_tokenizer *t, const char *token); /* -1 if absent */
const char *lh_tokenizer_id_to_token(const lh_tokenizer *t, int32_t id);  /* NULL if out of range */

/* Streaming encoder for documents too large to hold: text arrives in pieces of any size (even
 * splitting a UTF-8 sequence); ids come out once they are final, i.e. once no later text can
 * change them (on one thread as soon as that is so; on several, a batch or so later). The
 * concatenation of all emitted ids equals lh_tokenizer_encode of the concatenated text with
 * add_special = 0, whatever the pieces and the thread count. Memory is O(longest pre-token) on one
 * thread and O(threads x batch) on several (about 2 MB per thread), not O(text).
 * For each id, offsets (when not NULL) receives the byte offset in the whole fed stream where
 * the id's text starts, so callers can map tokens back to documents. After finish, the stream
 * starts again at offset 0 for the next text.
 *
 * lh_tok_stream_open_threads(t, threads, ...) encodes on `threads` threads: threads - 1 worker
 * threads started at open and joined at close, plus the calling thread. The ids and offsets are
 * exactly those of one thread (tokenizer_stream.c says how). threads <= 1, or a tokenizer without
 * restart points inside pieces (a Prepend normalizer, no splitting pre-tokenizer), give one thread. */
typedef struct lh_tok_stream lh_tok_stream;
lh_status lh_tok_stream_open(const lh_tokenizer *t, lh_tok_stream **out, lh_error *err); /* one thread */
lh_status lh_tok_stream_open_threads(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err);
/* The same stream for text that is data, never markup (documents): special added tokens
 * (tokenizer.json's "special": true, such as a chat template's turn markers) are not matched, so
 * their text encodes as the ordinary text it is, as HF's encode_special_tokens = True does
 * (which differs only where a non-special added token overlaps a special one's text: here it
 * is matched as if the special token did not exist). Non-special added tokens match as usual. */
lh_status lh_tok_stream_open_text(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err);
/* The same stream for ids only (no offsets are worked out; feed and finish take offsets NULL). */
lh_status lh_tok_stream_open_ids(const lh_tokenizer *t, int threads, lh_tok_stream **out, lh_error *err);
lh_status lh_tok_stream_feed(lh_tok_stream *s, const char *text, size_t len, lh_i32vec *ids, int64_t **offsets,
                             size_t *offsets_cap, lh_error *err);
lh_status lh_tok_stream_finish(lh_tok_stream *s, lh_i32vec *ids, int64_t **offsets, size_t *offsets_cap,
                               lh_error *err);
void lh_tok_stream_close(lh_tok_stream *s); /* accepts NULL */
/* CPU seconds the stream has spent encoding, on all its threads (jobs not yet emitted excluded). */
double lh_tok_stream_cpu_seconds(const lh_tok_stream *s);

/* Encode one large text on up to `threads` threads, appending exactly the ids of
 * lh_tokenizer_encode(t, text, len, 0, out, err). The text is cut only where HF's pipeline cuts
 * anyway (pre-token boundaries no context can move), into about 8 jobs per thread that the
 * threads take as they come free (per-byte costs differ too much for an even split); texts under
 * 64 KB per thread, or tokenizers without such boundaries, are encoded on the calling thread. */
lh_status lh_tokenizer_encode_parallel(const lh_tokenizer *t, const char *text, size_t len, int threads,
                                       lh_i32vec *out, lh_error *err);

#endif
