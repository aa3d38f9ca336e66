/* safetensors.h — the engine's reader for .safetensors files and sharded model folders (internal).
 *
 * Lifecycle
 *
 *     lh_st_set *s;  lh_st_open_dir("models/tiny", &s, &err);   // model.safetensors or the index + shards
 *     const lh_st_tensor *t = lh_st_find(s, "model.norm.weight");  // t->data points into the mmap
 *     lh_st_close(s);                                            // unmaps; every pointer dies here
 *
 * Files are mmap'd read-only and every byte span is validated before any pointer is handed out:
 * the 8-byte header length must fit the file, the header must be a JSON object (trailing spaces
 * allowed, as the safetensors writer pads), every entry needs a known dtype, a shape of
 * non-negative integers and data_offsets [begin, end] inside the data, the span must equal shape x
 * dtype size, and, as the reference library demands, the spans must tile the data exactly (no
 * overlap, no hole, nothing after the last tensor). Duplicate names, within a file or across
 * shards, are errors. F32, BF16 and F16 are loadable; other safetensors dtypes are LH_EUNSUPPORTED
 * and names that are not safetensors dtypes at all are LH_EFORMAT. Messages name the file and the
 * tensor.
 *
 * Digests (lh_st_digest). Every byte of every mapped file is read once, on several threads, to
 * give each file a digest and to check, in the same pass, that every element of every tensor is
 * finite. The digest of a file of S bytes with leaf size L (LH_ST_DIGEST_LEAF = 64 MiB) is
 *
 *     n      = max(1, ceil(S / L))
 *     leaf_i = SHA-256(bytes [i*L, min(S, (i+1)*L)))                       for i in [0, n)
 *     digest = SHA-256("longhaul file digest v1\n" || le64(S) || le64(L) || leaf_0 || ... || leaf_{n-1})
 *
 * (the whole file: length prefix, JSON header and data; le64 is 8 bytes little-endian). In Python:
 *
 *     L = 64 << 20; d = open(f, "rb").read(); n = max(1, -(-len(d) // L))
 *     leaves = b"".join(hashlib.sha256(d[i*L:(i+1)*L]).digest() for i in range(n))
 *     hashlib.sha256(b"longhaul file digest v1\n" + struct.pack("<QQ", len(d), L) + leaves).hexdigest()
 *
 * Leaves are the unit of parallel work, across files and within one, so the digest does not
 * depend on the number of threads. Measured on this machine's AMD EPYC (SHA-NI, 2 cores), a 4 GiB
 * file in the page cache, hash and finiteness scan together: see engine/model.c.
 */
#ifndef LH_ENGINE_SAFETENSORS_H
#define LH_ENGINE_SAFETENSORS_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>

#include "engine/internal.h"

#define LH_ST_MAX_DIMS 8
#define LH_ST_MAX_HEADER (100u * 1000u * 1000u) /* the reference library's limit */

typedef struct lh_st_tensor {
  const char *name;           /* lives as long as the set (or the arena it was handed to) */
  lh_dtype dtype;
  int ndim;
  int64_t shape[LH_ST_MAX_DIMS];
  uint64_t nbytes;
  const void *data;           /* into the file's mapping; NULL only when nbytes == 0 */
  int file;                   /* index into the set's mappings */
  int used;                   /* scratch flag for the weights builder (unknown-tensor warnings) */
} lh_st_tensor;

typedef struct lh_st_set {
  lh_mapping *maps;           /* one per file, each mapped once */
  int n_maps;
  lh_st_tensor *t;            /* sorted by name */
  int n;
  char *names;                /* arena holding every name */
  int sharded;                /* 1 when loaded through model.safetensors.index.json */
  uint64_t header_bytes;      /* sum of the JSON header lengths */
  lh_file_identity *ident;    /* one per mapping (lh_st_add_file): what fstat said when it was mapped */
  lh_file_digest *digest;     /* one per mapping, filled by lh_st_digest */
} lh_st_set;

#define LH_ST_DIGEST_LEAF ((uint64_t)64 << 20)

/* An empty set (for lh_st_parse / lh_st_add_file); NULL when out of memory. */
lh_st_set *lh_st_new(void);

/* Parse and validate one file image (buf, size: the whole file). Appends its tensors to s, with
 * data pointers into buf and file index `file`. path is used in messages only. This is the entry
 * point of the fuzz target: it never reads outside [buf, buf+size). */
lh_status lh_st_parse(lh_st_set *s, const void *buf, size_t size, int file, const char *path, lh_error *err);

/* Map one file and parse it into s. */
lh_status lh_st_add_file(lh_st_set *s, const char *path, lh_error *err);

/* Open a model folder: model.safetensors if it exists (as transformers prefers), else
 * model.safetensors.index.json with its shards. On success the set's tensors are sorted by name. */
lh_status lh_st_open_dir(const char *dir, lh_st_set **out, lh_error *err);

/* Sort by name and reject duplicates (called by lh_st_open_dir; exposed for the fuzz target). */
lh_status lh_st_finish(lh_st_set *s, lh_error *err);

/* Binary search by name (after lh_st_finish); NULL when absent. */
lh_st_tensor *lh_st_find(const lh_st_set *s, const char *name);

/* Fill s->digest[i] for every mapping: from cache (when not NULL) where it holds the file's
 * identity, else by reading the file, in leaves of `leaf` bytes (LH_ST_DIGEST_LEAF for the digest
 * the header comment defines; tests pass small ones) on `threads` threads (0: every online core),
 * then giving the cache what was read. LH_EFORMAT when an element is NaN or infinite: the message
 * names the file, the tensor, the element's flat index and its index per dimension. LH_EIO when a
 * file's identity changed while it was read (it is not given to the cache). stop (may be NULL): once
 * *stop is nonzero no further leaf is read and the call returns LH_EINTR (a 91 GB model takes
 * minutes to read; Ctrl-C should not have to wait for it); nothing is given to the cache. */
lh_status lh_st_digest(lh_st_set *s, int threads, uint64_t leaf, const lh_digest_cache *cache,
                       const volatile sig_atomic_t *stop, lh_error *err);

/* Hand the mappings, the tensor array and the names to the model (m->maps, m->owned), to be
 * released by lh_model_close; frees the set itself. The tensors' pointers stay valid. */
lh_status lh_st_move_to_model(lh_st_set *s, lh_model *m, lh_error *err);

/* Unmap every file and free the set. Accepts NULL. */
void lh_st_close(lh_st_set *s);

/* Parse a dtype name ("F32", "BF16", "F16"). LH_EUNSUPPORTED for other safetensors dtypes,
 * LH_EFORMAT for unknown names (the message names the file and tensor given). */
lh_status lh_st_dtype(const char *name, lh_dtype *out, const char *path, const char *tensor, lh_error *err);

#endif
