/* tokenizer_int.h — private structures shared by the tokenizer/tokenizer*.c files (not installed).
 *
 * The files split the work as HF `tokenizers` does:
 *   tokenizer.c           tokenizer.json loading, added-token tables, encode/decode entry points
 *   tokenizer_unicode.c   UTF-8, the Unicode properties HF's Rust code uses, normalization forms
 *   tokenizer_unidata.c   tables measured from HF tokenizers 0.23.2 (generated, do not edit)
 *   tokenizer_regex.c     Oniguruma-syntax patterns (what HF compiles) translated to PCRE2
 *   tokenizer_bpe.c       the BPE model: vocabulary, merge ranks, merging, per-context cache
 *   tokenizer_pipeline.c  added tokens -> normalizer -> pre-tokenizer -> BPE for one segment
 *   tokenizer_stream.c    the streaming encoder and the multi-threaded encoder
 */
#ifndef LH_TOKENIZER_TOKENIZER_INT_H
#define LH_TOKENIZER_TOKENIZER_INT_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

/* ---------------------------------------------------------------- UTF-8 (tokenizer_unicode.c) */

/* Decode one scalar value from valid UTF-8 at s[*i] and advance *i. */
static inline uint32_t tk_utf8_next(const uint8_t *s, size_t *i) {
  uint32_t c = s[*i];
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  if (c < 0xE0) {
    c = ((c & 0x1F) << 6) | (s[*i + 1] & 0x3F);
    *i += 2;
  } else if (c < 0xF0) {
    c = ((c & 0x0F) << 12) | ((uint32_t)(s[*i + 1] & 0x3F) << 6) | (s[*i + 2] & 0x3F);
    *i += 3;
  } else {
    c = ((c & 0x07) << 18) | ((uint32_t)(s[*i + 1] & 0x3F) << 12) | ((uint32_t)(s[*i + 2] & 0x3F) << 6) |
        (s[*i + 3] & 0x3F);
    *i += 4;
  }
  return c;
}
/* Byte length of the UTF-8 sequence led by b (valid text only). */
static inline size_t tk_utf8_len(uint8_t b) { return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4; }
/* Decode the scalar value that ends at s[end] (exclusive), valid text only; *start gets its offset. */
uint32_t tk_utf8_prev(const uint8_t *s, size_t end, size_t *start);
int tk_utf8_put(uint32_t c, char *out); /* returns 1..4 */

/* Length of the longest prefix of s that is well-formed UTF-8. */
size_t tk_utf8_valid_prefix(const uint8_t *s, size_t n);
/* Length of the ill-formed subsequence at s (n > 0, s not starting a valid sequence) that one
 * U+FFFD replaces ("maximal subpart", what Python's errors="replace" and Rust's
 * from_utf8_lossy do); *incomplete is set when that subpart is a valid prefix cut by the end. */
size_t tk_utf8_bad_len(const uint8_t *s, size_t n, int *incomplete);
/* Append s to out with every maximal ill-formed subsequence replaced by U+FFFD. */
lh_status tk_utf8_sanitize(const uint8_t *s, size_t n, lh_buf *out);

/* Properties as HF's Rust code sees them (Unicode 16 via Rust std / regex crate). */
bool tk_is_white_space(uint32_t c); /* White_Space: char::is_whitespace, regex \s */
bool tk_is_rust_word(uint32_t c);   /* regex crate \w (used for single_word added tokens) */
bool tk_is_rust_numeric(uint32_t c); /* char::is_numeric (Digits pre-tokenizer) */
/* char::to_lowercase: writes 1..3 scalar values, returns the count. */
int tk_lowercase(uint32_t c, uint32_t out[3]);

/* Normalization forms as HF computes them (unicode-normalization-alignments, whose tables are
 * older than utf8proc's: characters newer than those tables pass through untouched). */
typedef enum tk_form { TK_NFC, TK_NFD, TK_NFKC, TK_NFKD } tk_form;
#define TK_NF_BB 1    /* a segment boundary may sit right before this character */
#define TK_NF_INERT 2 /* the character alone normalizes to itself (and TK_NF_BB holds) */
uint8_t tk_norm_flags(tk_form f, uint32_t c);
/* Normalize one segment (valid UTF-8 that starts at a TK_NF_BB character and contains no
 * later TK_NF_BB character except at its end), appending to out. */
lh_status tk_norm_segment(tk_form f, const uint8_t *s, size_t n, lh_buf *out);
/* Must be called (once, any thread) before tk_norm_flags/tk_norm_segment are used. */
lh_status tk_unicode_init(lh_error *err);

/* ---------------------------------------------------------------- regex (tokenizer_regex.c) */

typedef struct tk_regex {
  pcre2_code *code;  /* exact: Oniguruma's classes */
  bool jit;          /* JIT compiled for complete and hard-partial matching */
  pcre2_code *fast;  /* PCRE2's own classes: the same matches on text without delta code points */
  bool fast_jit;
  uint32_t (*delta)[2]; /* code points whose class membership differs between the two (sorted) */
  size_t ndelta;
  uint32_t delta_min;
  bool can_be_empty; /* the pattern can match the empty string */
  uint32_t lookbehind; /* longest lookbehind in characters (plus one for ^ and \b) */
  int fast_kind;       /* TK_FAST_*: a hand-written matcher (tokenizer_fastsplit.c) replaces PCRE2 */
  char *label;         /* what errors call it: where it is and its pattern (pre_tokenizer Split "...") */
} tk_regex;

/* Compile an Oniguruma (Ruby syntax) pattern the way HF's SysRegex does, or a literal string
 * when literal is set (HF escapes it). Constructs PCRE2 cannot reproduce exactly fail with
 * LH_EUNSUPPORTED naming the construct; what names the field goes in `where`. */
lh_status tk_regex_compile(tk_regex *re, const char *pat, size_t len, bool literal, const char *where,
                           lh_error *err);
void tk_regex_free(tk_regex *re);

/* State of an onig find_iter walk over one subject. */
typedef struct tk_find {
  size_t pos;       /* where the next search starts */
  size_t last_end;  /* end of the previous match, or SIZE_MAX before the first */
  size_t delta_at;  /* first delta code point at or after pos, once known */
  bool delta_known;
} tk_find;

#define TK_FIND_NONE 0    /* no further match */
#define TK_FIND_MATCH 1   /* [*ms, *me) is the next match */
#define TK_FIND_PARTIAL 2 /* more text could make a match start at *ms (partial mode only) */
#define TK_FIND_ERROR 3

/* Hand-written matchers for well-known pre-tokenizer patterns (tokenizer_fastsplit.c). */
#define TK_FAST_GPT2 1   /* GPT-2 ByteLevel */
#define TK_FAST_CL100K 2 /* cl100k (GPT-4, Llama 3) */
#define TK_FAST_QWEN2 3  /* cl100k with single digits (Qwen2) */
#define TK_FAST_O200K 4  /* o200k (GPT-4o, MiniMax) */
/* The TK_FAST_* kind of an Oniguruma pattern, 0 when none (or the tables could not be built). */
int tk_fast_kind(const char *pat, size_t len);
/* The i-th recognized pattern text and its kind (for tests); NULL past the last. */
const char *tk_fast_pattern(size_t i, int *kind);
/* The match starting at pos (these patterns match at every position; TK_FIND_NONE only at the
 * end); TK_FIND_PARTIAL when partial and deciding needed text past len. */
int tk_fast_find(int kind, const uint8_t *s, size_t len, size_t pos, bool partial, size_t *ms, size_t *me);

/* Next match of an onig-style find_iter over subj[0, len) (subj may have context before `lo`,
 * which lookbehinds see but matches never start in). With partial, hitting the end of the
 * subject reports TK_FIND_PARTIAL instead of guessing. */
int tk_regex_find(const tk_regex *re, pcre2_match_data *md, pcre2_match_context *mc, const uint8_t *subj,
                  size_t len, tk_find *f, bool partial, size_t *ms, size_t *me);

/* ---------------------------------------------------------------- BPE (tokenizer_bpe.c) */

/* string -> int32 map over an arena (vocabulary, special-token set). */
typedef struct tk_strmap {
  uint32_t *slots; /* entry index + 1; 0 is empty */
  size_t nslots;   /* power of two */
  struct tk_strent {
    uint64_t hash;
    uint32_t off, len;
    int32_t val;
  } *ents;
  size_t nents, cap;
  lh_buf arena;
} tk_strmap;

lh_status tk_strmap_put(tk_strmap *m, const char *s, size_t n, int32_t val); /* overwrites */
int32_t tk_strmap_get(const tk_strmap *m, const char *s, size_t n);          /* -1 if absent */
void tk_strmap_free(tk_strmap *m);
/* A wyhash-style hash: short inputs are read with overlapping loads, no byte loops (inline: the
 * BPE hashes every pre-token and every pair it looks up). */
static inline uint64_t tk_load8_(const uint8_t *p) {
  uint64_t w;
  memcpy(&w, p, 8);
  return w;
}
static inline uint32_t tk_load4_(const uint8_t *p) {
  uint32_t w;
  memcpy(&w, p, 4);
  return w;
}
static inline uint64_t tk_mix_(uint64_t a, uint64_t b) {
  __uint128_t r = (__uint128_t)(a ^ 0xA0761D6478BD642Full) * (b ^ 0xE7037ED1A0B428DBull);
  return (uint64_t)r ^ (uint64_t)(r >> 64);
}
static inline uint64_t tk_hash(const void *p, size_t n) {
  const uint8_t *s = p;
  uint64_t a, b;
  if (n <= 16) {
    if (n >= 8) {
      a = tk_load8_(s);
      b = tk_load8_(s + n - 8);
    } else if (n >= 4) {
      a = tk_load4_(s);
      b = tk_load4_(s + n - 4);
    } else if (n) {
      a = ((uint64_t)s[0] << 16) | ((uint64_t)s[n / 2] << 8) | s[n - 1];
      b = 0;
    } else {
      a = b = 0;
    }
  } else {
    uint64_t h = n;
    size_t i = 0;
    for (; i + 16 < n; i += 16) h = tk_mix_(tk_load8_(s + i) ^ h, tk_load8_(s + i + 8) ^ 0x8EBC6AF09C88C6E3ull);
    a = tk_load8_(s + n - 16) ^ h;
    b = tk_load8_(s + n - 8);
  }
  return tk_mix_(a ^ 0x589965CC75374CC3ull ^ n, b ^ 0x1D8E4E27C47D124Full);
}

typedef struct tk_merge {
  uint64_t key; /* (a << 32) | b, UINT64_MAX empty */
  uint32_t rank;
  int32_t id;
} tk_merge;

/* The largest token id supported: the id tables are sized by the largest id, so a vocabulary is
 * refused by its entry past this, before anything is allocated for it. */
#define TK_MAX_ID ((1 << 26) - 1)

typedef struct tk_bpe {
  tk_strmap vocab;
  int32_t max_id; /* largest id in vocab, at most TK_MAX_ID */
  uint32_t *id_off, *id_len; /* id -> token text in vocab.arena (len UINT32_MAX if no token) */
  tk_merge *merges;
  size_t merge_mask;
  int32_t unk_id; /* -1 none */
  char *unk_token;
  bool fuse_unk, byte_fallback, ignore_merges;
  char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix (NULL if none) */
  size_t prefix_len, suffix_len;
  /* byte-level fast path: the id of each byte's ByteLevel character, when every one exists and
   * no prefix/suffix applies (then a raw pre-token's bytes are the BPE symbols). */
  bool byte_fast;
  int32_t byte_id[256];
  int32_t fallback_id[256]; /* "<0xXX>" tokens, -1 if absent */
} tk_bpe;

lh_status tk_bpe_load(tk_bpe *b, const void *json_model, lh_error *err); /* cJSON * */
void tk_bpe_free(tk_bpe *b);

/* Per-context BPE scratch and a bounded cache of pre-token -> ids. */
#define TK_CKEY 16
#define TK_CIDS 5
typedef struct tk_bpe_scratch {
  struct tk_sym {
    int32_t id, prev, next;
    uint32_t len;
  } *syms;
  size_t syms_cap;
  struct tk_heapent {
    uint32_t rank, pos;
    int32_t id;
  } *heap;
  size_t heap_cap;
  /* cache */
  struct tk_cent { /* one cache line: short keys and few ids live inline */
    uint32_t hash;  /* 0: empty slot */
    uint32_t key_len;
    uint32_t nids;
    uint32_t ext;   /* key_len > TK_CKEY or nids > TK_CIDS: offsets into cache_keys/cache_ids */
    union {
      uint8_t key[TK_CKEY];
      struct {
        uint32_t key_off, ids_off;
      } far;
    } u;
    int32_t ids[TK_CIDS];
    uint8_t lens[TK_CIDS]; /* token byte lengths, for offsets */
  } *cache;
  size_t cache_used;
  lh_buf cache_keys;
  lh_i32vec cache_ids;
  /* the pre-token tk_bpe_prefetch saw last, and its cache hash */
  const uint8_t *pf_s;
  size_t pf_n;
  uint32_t pf_h;
} tk_bpe_scratch;

#define TK_CACHE_SLOTS 16384
#define TK_CACHE_MAX_KEY 256
/* The cache hash of a pre-token (never 0). */
static inline uint32_t tk_cache_hash(const uint8_t *s, size_t n, bool mapped) {
  uint32_t h = (uint32_t)(tk_hash(s, n) >> 32) ^ (mapped ? 0x5bd1e995u : 0);
  return h ? h : 1;
}
/* A pre-token tk_bpe_word will soon see (mapped): start loading its cache slot, so the load
 * overlaps the work in between (the slot is most of a cache hit's time otherwise). */
static inline void tk_bpe_prefetch(tk_bpe_scratch *sc, const uint8_t *s, size_t n) {
  if (!sc->cache || n >= TK_CACHE_MAX_KEY) return;
  uint32_t h = tk_cache_hash(s, n, true);
  sc->pf_s = s;
  sc->pf_n = n;
  sc->pf_h = h;
  __builtin_prefetch(&sc->cache[h & (TK_CACHE_SLOTS - 1)]);
}

void tk_bpe_scratch_free(tk_bpe_scratch *s);
/* Where the ids of one pre-token start in the stream, appended to v[0, n) (capacity cap, grown
 * with realloc): an id at byte pos of the pre-token starts at raw + max(0, pos - shift) when
 * linear, else at raw. */
typedef struct tk_offmap {
  int64_t *v;
  size_t n, cap;
  int64_t raw;
  uint32_t shift;
  bool linear;
} tk_offmap;
/* Tokenize one pre-token, appending ids to out (and, when om is not NULL, each id's stream
 * offset to om->v). mapped: s holds raw bytes that the ByteLevel alphabet maps (the fast path);
 * otherwise s is the model's input string itself. */
lh_status tk_bpe_word(const tk_bpe *b, tk_bpe_scratch *sc, const uint8_t *s, size_t n, bool mapped,
                      lh_i32vec *out, tk_offmap *om);

/* The GPT-2 byte <-> character table (ByteLevel). */
extern const uint16_t tk_byte_char[256];
int tk_char_byte(uint32_t c); /* inverse, -1 if c is not in the alphabet */

/* ---------------------------------------------------------------- the tokenizer (tokenizer.c) */

/* An added token and the two matching sets (raw text, normalized text). */
typedef struct tk_added {
  char *content;
  size_t len;
  char *norm; /* normalized content (== content when not normalized or unchanged) */
  size_t norm_len;
  int32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
} tk_added;

typedef struct tk_trie {
  uint32_t *first_edge; /* per node */
  uint16_t *nedges;
  uint8_t *ebyte;
  uint32_t *echild;
  int32_t *term; /* per node: index into tk_tokenizer.added, -1 none */
  size_t nnodes;
  uint8_t first[256]; /* bytes that can start a pattern */
  int first_only;     /* the one byte that can start a pattern (memchr finds it), -1 if several */
  size_t maxlen;
  bool any_lstrip, any_rstrip, any_single_word;
} tk_trie;

typedef enum tk_norm_kind { TK_N_FORM, TK_N_LOWER, TK_N_REPLACE, TK_N_PREPEND } tk_norm_kind;
typedef struct tk_norm {
  tk_norm_kind kind;
  tk_form form;
  tk_regex re; /* Replace */
  char *text;  /* Replace content or Prepend string */
  size_t text_len;
} tk_norm;

#define TK_MAX_STEPS 16 /* pre-tokenizer steps after flattening Sequences */

typedef enum tk_pre_kind { TK_P_BYTELEVEL, TK_P_SPLIT, TK_P_DIGITS } tk_pre_kind;
typedef enum tk_behavior { TK_ISOLATED, TK_REMOVED, TK_MERGED_PREV, TK_MERGED_NEXT, TK_CONTIGUOUS } tk_behavior;
typedef struct tk_pre {
  tk_pre_kind kind;
  bool add_prefix_space, use_regex; /* ByteLevel */
  tk_regex re;                      /* Split, ByteLevel(use_regex) */
  tk_behavior behavior;
  bool invert, individual;
} tk_pre;

/* One template piece of TemplateProcessing's "single" template. */
typedef struct tk_tpl {
  bool is_seq;
  int32_t *ids;
  size_t nids;
} tk_tpl;

typedef struct tk_ctx tk_ctx;

struct lh_tokenizer {
  char id[65]; /* lh_tokenizer_id */
  tk_bpe bpe;
  tk_added *added;
  size_t nadded;
  tk_trie raw_trie, norm_trie; /* tokens matched before / after normalization */
  tk_trie raw_trie_text, norm_trie_text; /* the same without the special tokens: segments with
                                          * specials_as_text (document text) use these */
  tk_strmap special;           /* content of special tokens */
  tk_strmap added_map;         /* added token content -> id */
  int32_t *added_index;        /* id -> index into added (over [0, max_id]), -1 if none */
  int32_t max_id;              /* largest id of model or added vocabulary */
  int32_t vocab_size;          /* HF get_vocab_size(with_added_tokens=True) */
  tk_norm *norms;
  size_t nnorms;
  char *path;                  /* the file it was read from, for messages */
  tk_pre pres[TK_MAX_STEPS];
  size_t npres;
  tk_tpl *tpl;
  size_t ntpl;
  bool has_template;
  bool decoder_bytelevel, has_decoder;
  /* where the pipeline may restart (see tokenizer_pipeline.c): */
  int split_step;        /* index of the first pre-tokenizer step that splits, -1 if none */
  int cap_step;          /* index of the last one, whose elements are the pre-tokens (the length
                          * cap applies there), -1 if none */
  bool norm_segmentable; /* normalizers are NFx/Lowercase only: segments cut at boundaries */
  int norm_form;         /* the one NFx form in the chain, -1 if none */
  bool lower_first;      /* a Lowercase precedes the NFx form */
  bool lower_after;      /* a Lowercase follows it (or is the only normalizer) */
  bool has_prepend;
  bool pretok_restart;   /* restarts inside a piece are possible at all */
  bool tail_map_only;    /* after the splitting step comes one ByteLevel step that only maps */
  /* per-thread scratch, reused */
  pthread_mutex_t pool_mu;
  tk_ctx *pool;
};

/* ---------------------------------------------------------------- pipeline (tokenizer_pipeline.c) */

/* A restart point: raw offset Q such that encoding the text after Q as a continuation (see
 * tokenizer_pipeline.c) yields exactly the ids the whole text yields after the first n_ids ids. */
typedef struct tk_restart {
  int64_t off;
  size_t n_ids;
  uint8_t level; /* TK_LEVEL_PIECE or TK_LEVEL_PRETOK */
} tk_restart;
#define TK_LEVEL_PIECE 0  /* a fresh piece starts at off (after an added token, or text start) */
#define TK_LEVEL_PRETOK 1 /* off is inside a piece, at a boundary of the first splitting step */

/* One segment to encode: text[ctx_len, len) is encoded; text[0, ctx_len) is context only (the
 * bytes before, which lookbehinds and single_word checks see). */
typedef struct tk_seg {
  const uint8_t *text;
  size_t len, ctx_len;
  int64_t base;   /* stream offset of text[0] */
  uint8_t level;  /* how the segment starts: TK_LEVEL_PIECE or TK_LEVEL_PRETOK */
  bool final;     /* no text follows: everything is final */
  bool want_offs; /* fill c->offv with each id's stream offset */
  bool specials_as_text; /* special added tokens are not matched: their text is ordinary text */
  bool want_restarts;
  int64_t restart_lo, restart_hi; /* record restart points in [lo, hi) (stream offsets) */
} tk_seg;

struct tk_ctx {
  tk_ctx *next;
  pcre2_match_data *md;
  pcre2_match_context *mc;
  pcre2_jit_stack *jit;
  tk_bpe_scratch bpe;
  lh_buf norm, work, tmp, tmp2;
  struct tk_anchor {
    size_t raw, norm; /* offsets relative to the piece being normalized */
    bool linear;      /* up to the next anchor, offsets advance together */
  } *anc;
  size_t nanc, anc_cap, anc_cursor;
  bool have_norm;
  const char *normp; /* the normalized piece (c->norm, or the raw text when no normalizer) */
  size_t norm_len;
  const uint8_t *s1; /* base of the splitting step's pieces */
  struct tk_span {
    size_t a, b;
    size_t scan; /* where the automaton resumed: the match end, before any rstrip */
    int32_t id;  /* added token id, -1 for text */
  } *spans, *spans2;
  size_t spans_cap, spans2_cap;
  struct piece *lv[TK_MAX_STEPS];
  size_t lvn[TK_MAX_STEPS], lvcap[TK_MAX_STEPS];
  /* outputs of tk_encode_segment */
  const tk_seg *seg;
  lh_i32vec *ids;
  size_t ids_base; /* ids->len when the segment began */
  bool want_offs;
  int64_t *offv; /* stream offset of each id appended by the segment */
  size_t noffv, offv_cap;
  tk_restart *rs;
  size_t nrs, rs_cap;
  int64_t rs_filter_hi, rs_filter_lo; /* when set: keep restart points < hi or >= lo only */
  lh_buf *dump; /* tests: collect pre-tokens instead of encoding them */
};

tk_ctx *tk_ctx_get(const lh_tokenizer *t, lh_error *err);
void tk_ctx_put(const lh_tokenizer *t, tk_ctx *c);
void tk_ctx_free(tk_ctx *c);

/* Encode one segment, appending ids to *c->ids (and offsets to c->id_off when set) and restart
 * points to c->rs. Text must be valid UTF-8. */
lh_status tk_encode_segment(const lh_tokenizer *t, tk_ctx *c, const tk_seg *seg, lh_error *err);

/* Hooks for tests (tests/tokenizer/): open a tokenizer from JSON text; list the pre-tokens of a
 * text as HF's pre_tokenize_str over the normalized pieces would (NUL-separated, ByteLevel
 * mapped), with added tokens as their content; encode on threads with explicit chunk sizes. */
lh_status tk_open_json(const char *json, size_t len, const char *name, lh_tokenizer **out, lh_error *err);
lh_status tk_pretokens(const lh_tokenizer *t, const char *text, size_t len, lh_buf *out, lh_error *err);
extern size_t tk_stream_min_batch; /* the stream encodes once this many bytes are pending */
extern size_t tk_pretoken_max;     /* the pre-token length cap (tokenizer.h), at least 8; tests lower it */
extern size_t tk_stream_par_batch;   /* threaded stream: text per job (read at open) */
extern size_t tk_stream_par_overlap; /* threaded stream: a job's overlap into the next (read at open) */
size_t tk_stream_buffered(const lh_tok_stream *s); /* bytes of text the stream holds */
int tk_stream_threads(const lh_tok_stream *s);     /* threads the stream encodes on (1: no workers) */
/* threaded stream: jobs stitched to the next, and stitches that failed (one thread took over) */
void tk_stream_counts(const lh_tok_stream *s, int64_t *stitched, int64_t *fallbacks);
#define TK_PAR_OVERLAP (8 << 10) /* lh_tokenizer_encode_parallel's overlap between jobs */
typedef struct tk_par_stats {
  int used;                /* threads whose work was kept (1: encoded on one thread) */
  double thread_cpu[64];   /* CPU seconds of each thread: [0] the calling thread (all it did), then
                            * each worker's jobs */
  double stitch_wall;      /* 0: stitching runs on the calling thread, in thread_cpu[0] */
} tk_par_stats;
lh_status tk_encode_parallel_sized(const lh_tokenizer *t, const char *text, size_t len, int threads,
                                   size_t overlap, lh_i32vec *out, int *used_threads, lh_error *err);
lh_status tk_encode_parallel_stats(const lh_tokenizer *t, const char *text, size_t len, int threads, size_t overlap,
                                   lh_i32vec *out, tk_par_stats *stats, lh_error *err);

/* Apply the normalizer chain to one piece; anchors (raw, normalized offset pairs where the two
 * texts are cut at the same place) are recorded when want_anchors. */
lh_status tk_normalize(const lh_tokenizer *t, tk_ctx *c, const uint8_t *s, size_t n, bool piece_start,
                       bool want_anchors, lh_buf *out, lh_error *err);

/* Find the added-token splits of s with trie (HF AddedVocabulary::find_matches); from is where
 * splitting starts (text before it is context). Appends spans to *out. */
lh_status tk_find_added(const lh_tokenizer *t, const tk_trie *trie, const uint8_t *s, size_t from, size_t n,
                        struct tk_span **out, size_t *nout, size_t *cap);

#endif
