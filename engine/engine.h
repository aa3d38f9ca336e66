/* engine.h — load a MiniMax-01-style hybrid model and run it: chunked prefill, O(1) decode, forks.
 *
 * The engine is the reference that everything else in longhaul is checked against. Its numbers are
 * HF transformers' `MiniMaxForCausalLM` (models/minimax, transformers 5.17) computed in fp32; the
 * model's math is in docs/design.md and in the header comment of engine/forward.c.
 *
 * Lifecycle
 *
 *     lh_model_params mp = lh_model_default_params();
 *     lh_model *m;   lh_model_open("models/tiny", &mp, &m, &err);      // config + weights (mmap'd)
 *     lh_state *s;   lh_state_new(m, &s, &err);                       // empty sequence, position 0
 *     lh_prefill(s, ids, n, logits, NULL, &err);                      // any n >= 1, any number of times
 *     lh_state *f;   lh_state_fork(s, &f, &err);                      // cheap copy; KV prefix shared
 *     lh_decode_batch(states, k, next_ids, logits_k, &err);           // one token for each of k states
 *     lh_state_free(f); lh_state_free(s); lh_model_close(m);
 *
 * Exactness contract: any chunk plan gives the same logits as one pass, within fp32 rounding; the
 * same inputs with the same chunk plan on the same backend give bitwise identical logits, run to
 * run and across a checkpoint/restore (no atomics or thread-count-dependent reductions on the
 * paths that feed results).
 *
 * Ownership: an lh_model owns its weights; every lh_state made from it must be freed before
 * lh_model_close. Pointers returned by lh_model_config() and friends live until lh_model_close.
 * A state is used by one thread at a time; different states of one model may run concurrently
 * only through lh_decode_batch (the engine parallelises internally).
 */
#ifndef LH_ENGINE_H
#define LH_ENGINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/comm.h"
#include "util/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_model lh_model;
typedef struct lh_state lh_state;

typedef enum lh_dtype { LH_F32 = 0, LH_BF16, LH_F16, LH_DTYPE_COUNT } lh_dtype;
size_t lh_dtype_size(lh_dtype t);
const char *lh_dtype_name(lh_dtype t);

typedef enum lh_layer_kind { LH_LAYER_LIGHTNING = 0, LH_LAYER_SOFTMAX = 1 } lh_layer_kind;

#define LH_MAX_LAYERS 256
#define LH_MAX_HEADS 256
#define LH_MAX_THREADS 1024 /* lh_model_params.threads */
#define LH_MAX_EXPERTS 1024 /* per layer; the CPU backend's limit too */

/* The parsed configuration, normalised from either config form (HF `minimax` or the original
 * `minimax_text_01`). Every field is filled; see engine/config.c for the key mapping. */
typedef struct lh_config {
  char model_type[32];         /* as found in config.json */
  int vocab_size;
  int hidden_size;
  int n_layers;
  int n_heads;                 /* query heads, both attention kinds */
  int n_kv_heads;              /* softmax layers (GQA) */
  int head_dim;
  int intermediate_size;       /* per expert */
  int n_experts;
  int top_k;
  int block_size;              /* lightning block length B */
  int rotary_dim;              /* dims rotated by RoPE, first rotary_dim of each head (== head_dim when full) */
  double rope_theta;
  /* YaRN (rope_scaling, or the HF form's rope_parameters, with rope_type "yarn"; config.c): the
   * inverse frequencies of transformers' _compute_yarn_parameters over the rotary_dim dims, and
   * cos and sin multiplied by rope_attention_factor. rope_yarn_factor 0: plain RoPE (then
   * rope_attention_factor is 1). lh_rope_inv_freq_yarn in kernels/cpu/ops.h has the formula. */
  double rope_yarn_factor;
  int rope_yarn_original_max;  /* original_max_position_embeddings */
  double rope_yarn_beta_fast, rope_yarn_beta_slow;
  int rope_yarn_truncate;
  float rope_attention_factor;
  int attn_length_scale_base;  /* L0 of the length-aware query scaling in softmax layers; 0: off (the plain
                                  model). See lh_length_scale in kernels/cpu/ops.h and docs/design.md */
  double rms_norm_eps;         /* decoder and final norms; the lightning all-heads norm uses 1e-6 as HF does */
  int tie_word_embeddings;
  int postnorm;                /* 1: residual taken after the norm (MiniMax-Text-01, HF); 0: before */
  int max_position_embeddings;
  int bos_token_id, eos_token_id; /* -1 when absent */
  float attn_alpha[2], attn_beta[2]; /* indexed by lh_layer_kind */
  float mlp_alpha, mlp_beta;
  lh_layer_kind layer_kind[LH_MAX_LAYERS];
  int n_lightning, n_softmax;  /* counts of each kind */
} lh_config;

/* The first 8 layers of MiniMax-Text-01 at its real widths (7 lightning layers, then softmax at
 * layer 7; hidden 6144, 64 heads x 128, 8 kv heads, rotary 64, 32 experts x 9216 top-2, alphas
 * 3.5565588200778455, betas 1, as its config.json says), with the given vocab, context 2^22 and
 * no bos/eos: the model the GPU benchmark and the random-weight backends run at full scale. */
lh_config lh_config_minimax_text_01_slice(int vocab);

/* How the CPU backend computes softmax attention's two products (Q K^T and P V). */
typedef enum lh_cpu_attention {
  LH_CPU_ATTN_FP32 = 0, /* fp32 throughout (kernels/cpu/attention.c): the reference the tests and
                           the GPU are judged against */
  LH_CPU_ATTN_BF16,     /* bf16 products, fp32 softmax and sums (kernels/cpu/attention_bf16.c), as
                           the GPU computes them: about 3 significant digits instead of 7; on Intel
                           AMX tiles (2.5-3x fp32 on haul-tiny's softmax layers) or else AVX512-BF16
                           (1.8-2x); opening fails on a CPU with neither or where head_dim is not a
                           multiple of 32 up to 256 */
  LH_CPU_ATTN_AUTO,     /* BF16 where it can run, else FP32; lh_model_cpu_attention tells which */
} lh_cpu_attention;
/* "fp32", "bf16", "auto" -> the value; -1 for anything else. */
int lh_cpu_attention_parse(const char *s);
const char *lh_cpu_attention_name(int mode);

/* ---- weight digests ------------------------------------------------------------------------
 *
 * lh_model_open reads every byte of the model's safetensors files once: it computes each file's
 * digest (a tree of SHA-256 over 64 MiB leaves, engine/safetensors.h, hashed on several threads)
 * and, in the same pass, checks that every F32/BF16/F16 element is finite. A digest cache lets
 * the caller (the store) remember both per file, so a file already read is not read again while
 * its identity stays the same.
 */

/* What names one weight file's content without reading it: the key of the digest cache. Taken
 * from fstat of the descriptor the file is mapped through. Any write, truncation, rename or chmod
 * changes ctime_ns (which no user call can set back), so an equal identity means unchanged bytes
 * short of tampering with the clock or the disk. */
typedef struct lh_file_identity {
  char path[4096];       /* realpath() of the file, NUL-terminated */
  uint64_t size;         /* st_size, bytes */
  int64_t mtime_ns;      /* st_mtim, ns since the epoch */
  int64_t ctime_ns;      /* st_ctim, ns since the epoch */
  uint64_t inode;        /* st_ino */
  uint64_t device;       /* st_dev */
} lh_file_identity;

/* What reading one file taught: its digest and the finiteness scan's result. */
typedef struct lh_file_digest {
  uint8_t sha256[32];    /* the file digest (the tree of SHA-256 in engine/safetensors.h) */
  int64_t nonfinite_at;  /* byte offset in the file of the first element (in file order) that is NaN or
                            infinite, -1 when every element of every tensor is finite */
} lh_file_digest;

/* A cache of lh_file_digest by lh_file_identity, supplied by the caller. Both callbacks run on the
 * thread that calls lh_model_open, one file at a time, and never after it returns; key and value
 * point to memory valid for the call only. */
typedef struct lh_digest_cache {
  /* Fill *out and return 1 when the cache holds an entry whose every key field equals *key (path,
   * size, mtime_ns, ctime_ns, inode, device); return 0 otherwise (including on the cache's own
   * errors: a miss only costs a read of the file). */
  int (*get)(void *user, const lh_file_identity *key, lh_file_digest *out);
  /* Remember *value for *key, replacing any entry for the same path. Called after a file was read
   * in full and its identity was unchanged by the end of the read; errors are the cache's own. */
  void (*put)(void *user, const lh_file_identity *key, const lh_file_digest *value);
  void *user;
} lh_digest_cache;

typedef struct lh_model_params {
  const char *backend;   /* "cpu" (default) or "cuda" */
  int threads;           /* CPU threads; 0 = all online cores; at most LH_MAX_THREADS (each has its own
                            workspace: 100000 of them took 23 GB) */
  int device;            /* CUDA device ordinal */
  int max_rows;          /* the engine's workspace: the most rows (tokens) one backend call carries
                            through the layers. A longer lh_prefill is cut into pieces of at most
                            max_rows internally (same function, other rounding). Bounds the
                            activation memory. Default 8192. A pipeline plan's chunk is a different
                            idea (where checkpoints may fall): pipeline/pipeline.h couples the two. */
  int verbose;           /* log loading details */
  int tp_ranks;          /* tensor/expert-parallel ranks (issue 10; 0 or 1: none). The CPU backend runs
                            all ranks in this process, one after another, each on its shard of the
                            heads and experts, and sums their partial outputs in rank order where a
                            multi-GPU run all-reduces: it checks the partitioning against one rank.
                            Heads, kv heads and experts must divide by it. Other backends refuse > 1
                            (the CUDA backend splits over processes: comm). */
  int cpu_attention;     /* lh_cpu_attention (default FP32); the CPU backend only, others ignore it */
  lh_comm *comm;         /* the world of ranks (engine/comm.h) this model spans, one share per rank; NULL or
                            a world of one rank: this process alone. Defaults to lh_comm_world(), so a
                            binary started by mpirun spreads every model it opens over its ranks. The
                            backend's open sees it only when the model spans two ranks or more. */
  const lh_digest_cache *digest_cache; /* NULL (default): every byte of every file is read at each open.
                            The ranks other than 0 of a spread model open without one. */
  const volatile sig_atomic_t *stop; /* NULL (default), or a flag a signal handler sets: once it is
                            nonzero, reading the weights for their digest stops within a leaf (64 MiB
                            a thread) and the open fails with LH_EINTR. This process only. */
} lh_model_params;

lh_model_params lh_model_default_params(void);

/* Open a HuggingFace model folder: config.json plus model.safetensors or a sharded
 * model.safetensors.index.json. Validates everything (shapes against the config, byte spans,
 * dtypes, every element finite, token ids of config.json and generation_config.json inside the
 * vocabulary); errors name the file and tensor or key. Unknown tensors are logged as warnings. */
lh_status lh_model_open(const char *dir, const lh_model_params *params, lh_model **out, lh_error *err);
void lh_model_close(lh_model *m); /* accepts NULL */
/* The checks lh_model_open makes before reading anything, for a command to make before it
 * creates files: dir is a folder (LH_ENOTFOUND otherwise; for a path shaped like a Hugging Face
 * repo id, "owner/name", the message says that nothing is downloaded and how to fetch the folder)
 * and backend (NULL: "cpu") is in this build (lh_backend_check's LH_EUNSUPPORTED). */
lh_status lh_model_check(const char *dir, const char *backend, lh_error *err);

const lh_config *lh_model_config(const lh_model *m);
const char *lh_model_dir(const lh_model *m);
const char *lh_model_backend(const lh_model *m);
/* The CPU backend's attention products as opened (LH_CPU_ATTN_FP32 or _BF16; AUTO resolved);
 * LH_CPU_ATTN_FP32 for other backends. */
int lh_model_cpu_attention(const lh_model *m);
/* What computes those products, for a progress line: "AMX tiles", "AVX512-BF16" or "none (fp32)"
 * (a static string). */
const char *lh_model_cpu_attention_unit(const lh_model *m);
/* 64 hex chars: SHA-256 over the normalised config, the weights' roles, dtypes and shapes, and the
 * digests of the weight files' every byte (engine/model.c). Any changed byte of any file changes
 * it; the same files in another folder (shards under other names too) give the same id. */
const char *lh_model_id(const lh_model *m);

typedef struct lh_model_stats {
  int64_t params_total;         /* every weight */
  int64_t params_active;        /* used per token: top_k of n_experts experts */
  int64_t weight_bytes;         /* as stored on disk */
  int64_t lightning_state_bytes;/* per sequence, fp32, constant in length */
  int64_t kv_bytes_per_token;   /* all softmax layers, K and V, in the state's KV dtype */
  double flops_per_token;       /* linear layers (projections + active experts + lm_head) */
  double attn_flops_per_token_per_ctx; /* softmax attention FLOPs per token per context token */
} lh_model_stats;
void lh_model_get_stats(const lh_model *m, lh_model_stats *st);

/* ---- sequences ---------------------------------------------------------------------------- */

lh_status lh_state_new(lh_model *m, lh_state **out, lh_error *err);
void lh_state_free(lh_state *s); /* accepts NULL */
/* A new state equal to src. Lightning states are copied (fixed size); the softmax KV already
 * written is shared read-only (reference-counted pages), so a fork costs O(lightning state). */
lh_status lh_state_fork(const lh_state *src, lh_state **out, lh_error *err);
int64_t lh_state_pos(const lh_state *s);   /* tokens consumed so far */
lh_model *lh_state_model(const lh_state *s);

/* Feed tokens[0:n] (n >= 1) at positions [pos, pos+n). If logits_last is not NULL it receives the
 * vocab_size logits of the last position; if logits_all is not NULL it receives [n x vocab_size]
 * row-major logits for every position (costly: only for tests and the `logits` command).
 * On failure the state is unchanged if the error is LH_EINVAL (bad token id, over the context
 * limit), otherwise the state must be freed. */
lh_status lh_prefill(lh_state *s, const int32_t *tokens, int64_t n, float *logits_last, float *logits_all,
                     lh_error *err);

/* One decode step for k independent states at once (forks of one prompt, typically): state i gets
 * token tokens[i]; logits[i*vocab .. (i+1)*vocab) receives its next-token logits. Equivalent to k
 * calls of lh_prefill with n = 1, but batches the matrix work across states. */
lh_status lh_decode_batch(lh_state *const *states, int k, const int32_t *tokens, float *logits, lh_error *err);

/* Logits after the last token fed (NULL if nothing was fed or they were not kept). The state keeps
 * the last position's logits so a restored or forked state can start decoding at once. */
const float *lh_state_last_logits(const lh_state *s);

/* ---- checkpoint hooks (the store serialises states through these) ------------------------
 *
 * A state is: pos; one fp32 [n_heads x head_dim x head_dim] matrix per lightning layer; for each
 * softmax layer, KV rows for positions [0, pos), each row being K then V for all kv heads
 * ([2 x n_kv_heads x head_dim] in kv_dtype); and the last logits. Export and import move these
 * pieces between backend memory and host buffers; they never change the computed numbers.
 */
typedef struct lh_state_layout {
  int n_lightning;             /* lightning layers, in layer order */
  size_t lightning_bytes;      /* bytes of one layer's state: n_heads*head_dim*head_dim*4 */
  int n_softmax;               /* softmax layers, in layer order */
  lh_dtype kv_dtype;           /* F32 on the CPU backend, BF16 on CUDA */
  size_t kv_row_bytes;         /* bytes of one position's K+V in one softmax layer */
  int vocab_size;              /* length of the last-logits vector (fp32) */
} lh_state_layout;
void lh_state_get_layout(const lh_model *m, lh_state_layout *lay);

/* Copy lightning layer i's state (i counts lightning layers only) into dst (lightning_bytes). */
lh_status lh_state_export_lightning(const lh_state *s, int i, void *dst, lh_error *err);
/* Copy KV rows [t0, t1) of softmax layer j into dst ((t1-t0) * kv_row_bytes). t1 <= pos. */
lh_status lh_state_export_kv(const lh_state *s, int j, int64_t t0, int64_t t1, void *dst, lh_error *err);

/* Rebuild a state: start from lh_state_new, import every lightning layer, append KV rows for each
 * softmax layer in order (t0 must equal the rows already held for that layer), then
 * lh_state_import_finish sets pos and the last logits. Rows in another kv dtype than the layout's
 * are converted (so a CPU checkpoint can resume on CUDA), which is exact only F32 -> F32. */
lh_status lh_state_import_lightning(lh_state *s, int i, const void *src, lh_error *err);
lh_status lh_state_import_kv(lh_state *s, int j, int64_t t0, int64_t t1, const void *src, lh_dtype src_dtype,
                             lh_error *err);
lh_status lh_state_import_finish(lh_state *s, int64_t pos, const float *last_logits, lh_error *err);

/* Whole state to one byte string and back (a self-describing little-endian format with a
 * checksum; see engine/state.c). *out is malloc'd; the caller frees it. */
lh_status lh_state_serialize(const lh_state *s, void **out, size_t *len, lh_error *err);
lh_status lh_state_deserialize(lh_model *m, const void *buf, size_t len, lh_state **out, lh_error *err);

/* ---- sampling ---------------------------------------------------------------------------- */

typedef struct lh_sampler_params {
  float temperature;  /* 0 = greedy (argmax, lowest id wins ties) */
  float top_p;        /* 1 = off */
  int top_k;          /* 0 = off */
  uint64_t seed;
} lh_sampler_params;

/* Pick the next token from logits[vocab]. rng_state is advanced (seed it with params->seed);
 * the same seed and logits give the same token on every platform. */
int32_t lh_sample(const float *logits, int vocab, const lh_sampler_params *p, uint64_t *rng_state);
/* The index of the first logit that is NaN or infinite, or -1 when all are finite. A model whose
 * weights or config overflow in the computation (finite weights can: a norm's alpha of 1e308) gives
 * such logits, and any token picked from them is noise: callers refuse to answer from them. */
int lh_logits_nonfinite(const float *logits, int vocab);

#ifdef __cplusplus
}
#endif
#endif
