/* inputs.c — see inputs.h.
 *
 * Invariants
 *  1. The digest is a function of the documents' paths as written and the bytes and names of the
 *     files they reach that their globs keep; it does not depend on the cache (a hit gives the
 *     digest a read would).
 *  1a. What the globs leave out is a subset of what ingest leaves out: lh_globs_decide and ingest's
 *     folder walk match through one function, in the same order (test_inputs checks them against
 *     each other), so no byte ingest reads escapes the digest.
 *  2. A cache entry is put only after a complete read during which the file's identity did not
 *     change.
 *  3. Nothing but a regular file is ever opened for reading.
 *  4. A document's stamp is fed what its digest is fed, in the same order, except that a regular
 *     file is named by the identity (identity_of) its digest was taken under instead of its bytes:
 *     a stamp taken with the digest and one taken later (lh_inputs_stamp) are equal exactly when
 *     no file the digest covers was written, replaced, added or removed in between.
 */
#define _GNU_SOURCE
#include "jobs/inputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "util/hash.h"

static void feed_str(lh_sha256 *h, const char *tag, const char *s) {
  lh_sha256_update(h, tag, strlen(tag) + 1);
  lh_sha256_update(h, s, strlen(s) + 1);
}

/* The excluded paths as devices and inodes (those that exist when the digest starts). */
typedef struct skip_set {
  dev_t dev[8];
  ino_t ino[8];
  int n;
} skip_set;

static int skipped(const skip_set *sk, const struct stat *sb) {
  for (int i = 0; i < sk->n; i++)
    if (sk->dev[i] == sb->st_dev && sk->ino[i] == sb->st_ino) return 1;
  return 0;
}

/* One walk over a request's documents: the digest (content, when read), the current document's
 * stamp (stamp) and what both leave out. */
typedef struct walk {
  lh_sha256 content, stamp;
  int read;                    /* 1: files are read (or their digests taken from the cache) */
  const lh_digest_cache *cache;
  skip_set sk;
  const lh_globs *globs; /* the current document's include/exclude globs (NULL: none) */
} walk;

static void feed(walk *w, const char *tag, const char *s) {
  if (w->read) feed_str(&w->content, tag, s);
  feed_str(&w->stamp, tag, s);
}

static void feed_identity(walk *w, const lh_file_identity *id) {
  const int64_t v[5] = {(int64_t)id->device, (int64_t)id->inode, (int64_t)id->size, id->mtime_ns, id->ctime_ns};
  feed_str(&w->stamp, "at", id->path);
  lh_sha256_update(&w->stamp, v, sizeof v);
}

static void identity_of(const struct stat *sb, const char *real, lh_file_identity *id) {
  memset(id, 0, sizeof *id);
  snprintf(id->path, sizeof id->path, "%s", real);
  id->size = (uint64_t)sb->st_size;
  id->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
  id->ctime_ns = (int64_t)sb->st_ctim.tv_sec * 1000000000 + sb->st_ctim.tv_nsec;
  id->inode = (uint64_t)sb->st_ino;
  id->device = (uint64_t)sb->st_dev;
}

static int same_identity(const lh_file_identity *a, const lh_file_identity *b) {
  return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->inode == b->inode &&
         a->device == b->device && !strcmp(a->path, b->path);
}

/* SHA-256 of the regular file at path, through the cache (invariant 2); *used is the identity the
 * file had all along the read (or the cache hit). */
static lh_status file_digest(const char *path, const lh_digest_cache *cache, uint8_t out[32], lh_file_identity *used,
                             lh_error *err) {
  char real[PATH_MAX];
  if (!realpath(path, real)) return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  for (int attempt = 0; attempt < 3; attempt++) {
    const int fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
    struct stat before, after;
    lh_file_identity id, id2;
    if (fstat(fd, &before) != 0 || !S_ISREG(before.st_mode)) { /* invariant 3: swapped under us */
      close(fd);
      return lh_error_set(err, LH_EIO, "%s: not a regular file any more", path);
    }
    identity_of(&before, real, &id);
    lh_file_digest fd_cached;
    if (cache && cache->get && cache->get(cache->user, &id, &fd_cached)) {
      close(fd);
      memcpy(out, fd_cached.sha256, 32);
      *used = id;
      return LH_OK;
    }
    lh_sha256 h;
    lh_sha256_init(&h);
    static __thread char buf[1 << 20];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) lh_sha256_update(&h, buf, (size_t)n);
    const int e = errno;
    const int ok = n == 0 && fstat(fd, &after) == 0;
    close(fd);
    if (n < 0) return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(e));
    if (!ok) continue;
    identity_of(&after, real, &id2);
    if (!same_identity(&id, &id2)) continue; /* written while we read: read again */
    lh_sha256_final(&h, out);
    *used = id;
    if (cache && cache->put) {
      lh_file_digest d = {.nonfinite_at = -1};
      memcpy(d.sha256, out, 32);
      cache->put(cache->user, &id, &d);
    }
    return LH_OK;
  }
  return lh_error_set(err, LH_EIO, "%s: the file kept changing while its digest was taken", path);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* One path (file, folder, link or other) into the walk; rel names it inside its document. */
static lh_status digest_path(walk *w, const char *path, const char *rel, int depth, lh_error *err) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    feed(w, "missing", rel);
    return LH_OK;
  }
  if (skipped(&w->sk, &sb)) { /* named, never read: what is in it changes from run to run */
    feed(w, "excluded", rel);
    return LH_OK;
  }
  /* what the document's globs leave out, ingest never reads: not named either, so adding,
   * changing or removing it is no change (depth 0 is the document itself, which ingest reads
   * whatever its globs say) */
  if (depth > 0 && lh_globs_decide(w->globs, rel, strlen(rel), S_ISREG(sb.st_mode))) return LH_OK;
  if (S_ISLNK(sb.st_mode)) {
    char target[PATH_MAX];
    const ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = 0;
    feed(w, "link", rel);
    feed(w, "target", target);
    /* A link inside a folder is never followed by ingest, so its folder is not walked; the
     * document itself, given as a link to a folder, is read through it, so it is walked. */
    if (stat(path, &sb) != 0 || !(S_ISREG(sb.st_mode) || (S_ISDIR(sb.st_mode) && depth == 0))) return LH_OK;
  }
  if (S_ISREG(sb.st_mode)) {
    lh_file_identity id;
    if (w->read) {
      uint8_t d[32];
      lh_status st = file_digest(path, w->cache, d, &id, err);
      if (st) return st;
      feed_str(&w->content, "file", rel);
      lh_sha256_update(&w->content, d, 32);
    } else { /* the identity file_digest would take: the real path's, as fstat of it gives */
      char real[PATH_MAX];
      struct stat now;
      if (!realpath(path, real) || stat(real, &now) != 0)
        return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
      identity_of(&now, real, &id);
    }
    feed_str(&w->stamp, "file", rel);
    feed_identity(w, &id);
    return LH_OK;
  }
  if (!S_ISDIR(sb.st_mode)) {
    feed(w, S_ISFIFO(sb.st_mode) ? "fifo" : S_ISSOCK(sb.st_mode) ? "socket" : "device", rel);
    return LH_OK;
  }
  /* ingest walks 256 levels of folders and skips what is deeper (ingest/archive_walk.c, MAX_DEPTH);
   * the identity walks at least as deep, so it sees every file ingest reads, and names the rest
   * without reading it. (An error here would give the job a new identity on every run.) */
  if (depth > 256) {
    feed(w, "too-deep", rel);
    return LH_OK;
  }
  feed(w, "dir", rel);
  DIR *dir = opendir(path);
  if (!dir) return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  char **names = NULL;
  size_t n = 0, cap = 0;
  lh_status st = LH_OK;
  for (struct dirent *e; (e = readdir(dir));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) {
        st = lh_error_set(err, LH_ENOMEM, "out of memory");
        break;
      }
      names = nn;
    }
    if (!(names[n] = strdup(e->d_name))) {
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
      break;
    }
    n++;
  }
  closedir(dir);
  if (st == LH_OK && n > 1) qsort(names, n, sizeof *names, cmp_name);  /* names is NULL in an empty folder */
  for (size_t i = 0; i < n && st == LH_OK; i++) {
    char child[PATH_MAX], crel[PATH_MAX];
    if ((size_t)snprintf(child, sizeof child, "%s/%s", path, names[i]) >= sizeof child ||
        (size_t)snprintf(crel, sizeof crel, "%s/%s", rel, names[i]) >= sizeof crel) {
      st = lh_error_set(err, LH_ELIMIT, "%s/%s: path too long", path, names[i]);
      break;
    }
    st = digest_path(w, child, crel, depth + 1, err);
  }
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return st;
}

/* The walk over every document of r: the digest into out when w->read, each document's stamp
 * into stamps[d] when stamps is not NULL. */
static lh_status walk_request(walk *w, const lh_request *r, const char *const *exclude, size_t n_exclude,
                              char out[65], lh_inputs_stamp *stamps, lh_error *err) {
  skip_set *sk = &w->sk;
  sk->n = 0;
  for (size_t i = 0; i < n_exclude && sk->n < 8; i++) {
    struct stat sb;
    if (exclude[i] && stat(exclude[i], &sb) == 0) {
      sk->dev[sk->n] = sb.st_dev;
      sk->ino[sk->n++] = sb.st_ino;
    }
  }
  if (w->read) {
    lh_sha256_init(&w->content);
    feed_str(&w->content, "longhaul inputs", "v1");
  }
  for (int d = 0; d < r->n_documents; d++) {
    const lh_document_input *di = &r->documents[d];
    lh_sha256_init(&w->stamp);
    feed(w, "document", di->path);
    if (!strcmp(di->resolved, "-")) { /* a stream cannot be named by its content: a new job every run */
      if (w->read) {
        char nonce[64];
        snprintf(nonce, sizeof nonce, "%ld %ld", (long)getpid(), (long)time(NULL));
        feed_str(&w->content, "stream", nonce);
      }
      feed_str(&w->stamp, "stream", "");
    } else {
      lh_globs *g = NULL;
      size_t n_inc = 0, n_exc = 0;
      while (di->include && di->include[n_inc]) n_inc++;
      while (di->exclude && di->exclude[n_exc]) n_exc++;
      lh_status st = n_inc + n_exc ? lh_globs_open(&g, (const char *const *)di->include, n_inc,
                                                   (const char *const *)di->exclude, n_exc, err)
                                   : LH_OK;
      w->globs = g;
      if (!st) st = digest_path(w, di->resolved, ".", 0, err);
      w->globs = NULL;
      lh_globs_free(g);
      if (st) return lh_error_prefix(err, st, "document %s: ", di->path);
    }
    if (stamps) lh_sha256_final(&w->stamp, stamps[d].sha256);
  }
  if (w->read) {
    uint8_t dg[32];
    lh_sha256_final(&w->content, dg);
    lh_hex(dg, 32, out);
  }
  return LH_OK;
}

lh_status lh_inputs_digest(const lh_request *r, const lh_digest_cache *cache, char out[65], lh_error *err) {
  return lh_inputs_digest_excluding(r, cache, NULL, 0, out, NULL, err);
}

lh_status lh_inputs_digest_excluding(const lh_request *r, const lh_digest_cache *cache, const char *const *exclude,
                                     size_t n_exclude, char out[65], lh_inputs_stamp *stamps, lh_error *err) {
  walk w = {.read = 1, .cache = cache};
  return walk_request(&w, r, exclude, n_exclude, out, stamps, err);
}

lh_status lh_inputs_stamp_now(const lh_request *r, const char *const *exclude, size_t n_exclude,
                              lh_inputs_stamp *stamps, lh_error *err) {
  walk w = {.read = 0};
  return walk_request(&w, r, exclude, n_exclude, NULL, stamps, err);
}
