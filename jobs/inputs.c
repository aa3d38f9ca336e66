/* inputs.c — see inputs.h.
 *
 * Invariants
 *  1. The digest is a function of the documents' paths as written and the bytes and names of the
 *     files they reach that their globs keep; it does not depend on the cache (a hit gives the
 *     digest a read would).
 *  1a. What the globs leave out is a subset of what ingest leaves out: lh_globs_decide and ingest's
 *     folder walk match through one function, in the same order (test_inputs checks them against
 *     each other), so no byte ingest reads escapes the digest.
 *  1b. Names of one file. Inside a document folder, ingest reads a file of several names under
 *     the first of them in its walk's order (byte order of the paths) that its globs keep and,
 *     once that name has made a document, frames the later ones as links to it without reading
 *     them (ingest/archive_walk.c, lh_source_folder: one link table per folder document). So after
 *     a document folder's entries, the digest and the stamp name each set of two or more of the
 *     names the walk digests (those the globs keep, reached without a symlink) that share a
 *     device and inode: the first in byte order, then the others (feed_shared). A file whose
 *     other names lie outside the document, or in another document, has one name here as in
 *     ingest's walk; a tree with no shared inode is fed exactly what it was fed before. (A file
 *     that makes no document, binary or too large, is read under every name by ingest and still
 *     named as a set here: a recomputation, never a stale answer.)
 *  2. A cache entry is put only after a complete read during which the file's identity did not
 *     change.
 *  3. Nothing but a regular file is ever opened for reading, and nothing but a folder
 *     (O_DIRECTORY) for listing.
 *  4. A document's stamp is fed what its digest is fed, in the same order, except that a regular
 *     file is named by the identity (identity_of) its digest was taken under instead of its bytes:
 *     a stamp taken with the digest and one taken later (lh_inputs_stamp) are equal exactly when
 *     no file the digest covers was written, replaced, added or removed in between.
 *  5. Inside a document folder every entry is named to the kernel relative to its folder's
 *     descriptor (openat, fstatat, readlinkat, fdopendir), as ingest names it: the only whole
 *     paths handed to the kernel are the document's own and realpath()'s, which is asked only
 *     for paths that fit PATH_MAX (file_path). So a folder's paths may be of any length, and for
 *     a tree whose paths all fit, the walk feeds exactly what a walk by whole paths fed:
 *     test_inputs pins that identity by value, and an identity that moves recomputes every
 *     stored result.
 *  6. A message names a path by the document's path joined with the path inside it, escaped
 *     and cut in its middle past PATH_SHOWN characters (where), so the reason after it is never
 *     lost to the message's size.
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

/* How many characters of a path a message shows: a longer one keeps its start and its end
 * (lh_ingest_display_name), so the reason after it always fits the message. */
#define PATH_SHOWN 320

/* A name, inside the current document, of a regular file that has several links. */
typedef struct shared_name {
  dev_t dev;
  ino_t ino;
  char *rel; /* as w->rel names it ("./a/b") */
} shared_name;

/* One walk over a request's documents: the digest (content, when read), the current document's
 * stamp (stamp) and what both leave out. Inside a document, the walk holds one descriptor per
 * folder on its way down and names entries relative to it: no syscall takes a whole path but
 * the document's own, so a folder's paths may be of any length (PATH_MAX is a limit on one path
 * handed to the kernel, not on how deep a tree is). */
typedef struct walk {
  lh_sha256 content, stamp;
  int read;                    /* 1: files are read (or their digests taken from the cache) */
  const lh_digest_cache *cache;
  skip_set sk;
  const lh_globs *globs; /* the current document's include/exclude globs (NULL: none) */
  const char *doc;       /* the current document's path to open (its resolved path) */
  lh_buf rel;            /* the current entry's path inside the document: "." for the document, "./a/b" */
  lh_buf dir;            /* the real path of the folder being walked (see file_path) */
  int dir_real;          /* 1: dir is a real path; 0: it starts with the document's path as written
                            (the document folder's real path is too long to take) */
  int dir_errno;         /* realpath() of the document folder failed with this (dir is then empty) */
  lh_buf file;           /* file_path's result */
  lh_buf scratch, shown; /* where's working space and result */
  char target[PATH_MAX]; /* the last link's target */
  shared_name *shared;   /* the current document's names of files with several links (invariant 1b) */
  size_t n_shared, cap_shared;
} walk;

static void feed(walk *w, const char *tag, const char *s) {
  if (w->read) feed_str(&w->content, tag, s);
  feed_str(&w->stamp, tag, s);
}

/* path names the file (file_path); id->path holds it too when it fits there */
static void feed_identity(walk *w, const char *path, const lh_file_identity *id) {
  const int64_t v[5] = {(int64_t)id->device, (int64_t)id->inode, (int64_t)id->size, id->mtime_ns, id->ctime_ns};
  feed_str(&w->stamp, "at", path);
  lh_sha256_update(&w->stamp, v, sizeof v);
}

/* id from sb, named path (id->path left empty when path does not fit it: such an id is never a
 * cache key) */
static void identity_of(const struct stat *sb, const char *path, lh_file_identity *id) {
  memset(id, 0, sizeof *id);
  if (strlen(path) < sizeof id->path) memcpy(id->path, path, strlen(path) + 1);
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

static void cut(lh_buf *b, size_t len) {
  b->len = len;
  if (b->data) b->data[len] = 0;
}

/* dir, then name, joined with one '/' (none after a trailing one, as after "/"), into out. */
static lh_status join(lh_buf *out, const char *dir, size_t dir_len, const char *name) {
  lh_buf_clear(out);
  if (lh_buf_append(out, dir, dir_len)) return LH_ENOMEM;
  if ((!dir_len || dir[dir_len - 1] != '/') && lh_buf_append(out, "/", 1)) return LH_ENOMEM;
  return lh_buf_append_str(out, name);
}

/* The current entry's path for a message: the document's path and the path inside it joined (as
 * the user would write it), with control bytes and invalid UTF-8 escaped and a path longer than
 * PATH_SHOWN characters cut in its middle. Lives until the next call. */
static const char *where(walk *w) {
  lh_buf_clear(&w->scratch);
  lh_buf_clear(&w->shown);
  if (lh_buf_append_str(&w->scratch, w->doc) || lh_buf_append(&w->scratch, w->rel.data + 1, w->rel.len - 1) ||
      lh_ingest_display_name(w->scratch.data, w->scratch.len, PATH_SHOWN, &w->shown))
    return "(a path; out of memory)";
  return w->shown.data;
}

/* The path that names the regular file `name` in its identity, into w->file; *real says whether it
 * is the file's real path (the cache takes only those as keys: it forgets a key that no longer
 * resolves). It is the path realpath() gives for the file's whole path, taken without that path:
 * the walked folder's real path and the name, or, for a link, realpath() of the folder's real
 * path and the link's target (which resolve as the whole path does: the folder's part has no link
 * left to follow). Where the real path is too long to take (PATH_MAX), the path the file was
 * reached by. depth 0: name is the document's path. */
static lh_status file_path(walk *w, const char *name, int depth, int link, int *real, lh_error *err) {
  char buf[PATH_MAX];
  *real = 1;
  lh_buf_clear(&w->file);
  if (depth == 0) {
    if (realpath(name, buf)) return lh_buf_append_str(&w->file, buf);
    if (errno != ENAMETOOLONG) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(errno));
    *real = 0;
    return lh_buf_append_str(&w->file, name);
  }
  if (w->dir_errno) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(w->dir_errno));
  *real = w->dir_real;
  if (!link) return join(&w->file, w->dir.data, w->dir.len, name);
  if (w->target[0] == '/') {
    if (lh_buf_append_str(&w->file, w->target)) return LH_ENOMEM;
  } else if (join(&w->file, w->dir.data, w->dir.len, w->target)) {
    return LH_ENOMEM;
  }
  errno = ENAMETOOLONG;
  if (w->file.len < sizeof buf && realpath(w->file.data, buf)) {
    lh_buf_clear(&w->file);
    *real = 1;
    return lh_buf_append_str(&w->file, buf);
  }
  if (errno != ENAMETOOLONG) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(errno));
  *real = 0;
  return join(&w->file, w->dir.data, w->dir.len, name);
}

/* SHA-256 of the regular file `name` in the folder open at dfd (follow: through a link), named
 * path in its identity, through the cache when cached (invariant 2); *used is the identity the
 * file had all along the read (or the cache hit). */
static lh_status file_digest(walk *w, int dfd, const char *name, int follow, const char *path, int cached,
                             uint8_t out[32], lh_file_identity *used, lh_error *err) {
  const lh_digest_cache *cache = cached ? w->cache : NULL;
  for (int attempt = 0; attempt < 3; attempt++) {
    /* O_NOFOLLOW: a file swapped for a link since fstatat is not read through it */
    const int fd = openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW));
    if (fd < 0 && errno == ELOOP && !follow)
      return lh_error_set(err, LH_EIO, "%s: not a regular file any more", where(w));
    if (fd < 0) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(errno));
    struct stat before, after;
    lh_file_identity id, id2;
    if (fstat(fd, &before) != 0 || !S_ISREG(before.st_mode)) { /* invariant 3: swapped under us */
      close(fd);
      return lh_error_set(err, LH_EIO, "%s: not a regular file any more", where(w));
    }
    identity_of(&before, path, &id);
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
    if (n < 0) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(e));
    if (!ok) continue;
    identity_of(&after, path, &id2);
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
  return lh_error_set(err, LH_EIO, "%s: the file kept changing while its digest was taken", where(w));
}

/* The regular file `name` in the folder open at dfd into the walk: its bytes' digest (content) and
 * its identity (stamp). */
static lh_status digest_file(walk *w, int dfd, const char *name, int depth, int link, lh_error *err) {
  int real;
  lh_status st = file_path(w, name, depth, link, &real, err);
  if (st) return st == LH_ENOMEM ? lh_error_set(err, st, "out of memory") : st;
  const char *rel = w->rel.data, *path = w->file.data;
  lh_file_identity id;
  if (w->read) {
    uint8_t d[32];
    if ((st = file_digest(w, dfd, name, link, path, real && w->file.len < sizeof id.path, d, &id, err))) return st;
    feed_str(&w->content, "file", rel);
    lh_sha256_update(&w->content, d, 32);
  } else { /* the identity file_digest would take, as fstat of the file it opens gives it */
    struct stat now;
    if (fstatat(dfd, name, &now, link ? 0 : AT_SYMLINK_NOFOLLOW) != 0)
      return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(errno));
    identity_of(&now, path, &id);
  }
  feed_str(&w->stamp, "file", rel);
  feed_identity(w, path, &id);
  return LH_OK;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* w->rel, a name of the file sb describes, into the current document's shared names. */
static lh_status note_shared(walk *w, const struct stat *sb) {
  if (w->n_shared == w->cap_shared) {
    const size_t cap = w->cap_shared ? 2 * w->cap_shared : 16;
    shared_name *ns = realloc(w->shared, cap * sizeof *ns);
    if (!ns) return LH_ENOMEM;
    w->shared = ns;
    w->cap_shared = cap;
  }
  char *rel = strdup(w->rel.data);
  if (!rel) return LH_ENOMEM;
  w->shared[w->n_shared++] = (shared_name){.dev = sb->st_dev, .ino = sb->st_ino, .rel = rel};
  return LH_OK;
}

static void shared_clear(walk *w) {
  for (size_t i = 0; i < w->n_shared; i++) free(w->shared[i].rel);
  w->n_shared = 0;
}

/* by file, then by name */
static int cmp_shared(const void *pa, const void *pb) {
  const shared_name *a = pa, *b = pb;
  if (a->dev != b->dev) return a->dev < b->dev ? -1 : 1;
  if (a->ino != b->ino) return a->ino < b->ino ? -1 : 1;
  return strcmp(a->rel, b->rel);
}

/* by the first name of each file (device and inode differ from copy to copy: only names order) */
static int cmp_first(const void *a, const void *b) {
  return strcmp((*(shared_name *const *)a)->rel, (*(shared_name *const *)b)->rel);
}

/* The current document's files of two or more names into the walk (invariant 1b): for each, in
 * the byte order of its first name, that name (the one ingest reads) and then the others (those
 * it frames as links to it). Clears the names. */
static lh_status feed_shared(walk *w) {
  lh_status st = LH_OK;
  if (w->n_shared > 1) qsort(w->shared, w->n_shared, sizeof *w->shared, cmp_shared);
  shared_name **first = NULL;
  size_t n_first = 0;
  for (size_t i = 0; i + 1 < w->n_shared; i++) {
    const shared_name *a = &w->shared[i], *b = &w->shared[i + 1];
    if (a->dev != b->dev || a->ino != b->ino || (i && a->dev == a[-1].dev && a->ino == a[-1].ino)) continue;
    if (!first && !(first = malloc(w->n_shared / 2 * sizeof *first))) {
      st = LH_ENOMEM;
      break;
    }
    first[n_first++] = &w->shared[i];
  }
  if (n_first > 1) qsort(first, n_first, sizeof *first, cmp_first);
  for (size_t g = 0; g < n_first; g++) {
    const shared_name *f = first[g], *end = w->shared + w->n_shared;
    feed(w, "hardlinks", f->rel);
    for (const shared_name *o = f + 1; o < end && o->dev == f->dev && o->ino == f->ino; o++)
      feed(w, "hardlink", o->rel);
  }
  free(first);
  shared_clear(w);
  return st;
}

/* The names in the folder open at fd (without "." and ".."), sorted by bytes, into *names[0..*n)
 * (the caller frees each and the array). errno-style result. */
static int list_names(int fd, char ***names, size_t *n) {
  *names = NULL;
  *n = 0;
  const int lfd = dup(fd); /* closedir closes the descriptor fdopendir took */
  DIR *dir = lfd < 0 ? NULL : fdopendir(lfd);
  if (!dir) {
    const int e = errno;
    if (lfd >= 0) close(lfd);
    return e;
  }
  size_t cap = 0;
  int e = 0;
  errno = 0;
  for (struct dirent *de; (de = readdir(dir)); errno = 0) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    if (*n == cap) {
      cap = cap ? 2 * cap : 64;
      char **nn = realloc(*names, cap * sizeof *nn);
      if (!nn) {
        e = ENOMEM;
        break;
      }
      *names = nn;
    }
    if (!((*names)[*n] = strdup(de->d_name))) {
      e = ENOMEM;
      break;
    }
    ++*n;
  }
  if (!e) e = errno; /* readdir's own failure */
  closedir(dir);
  if (!e && *n > 1) qsort(*names, *n, sizeof **names, cmp_name);
  return e;
}

/* One entry (file, folder, link or other) into the walk: `name` in the folder open at dfd, w->rel
 * naming it inside its document; depth 0: the document itself, name its path, dfd AT_FDCWD. */
static lh_status digest_path(walk *w, int dfd, const char *name, int depth, lh_error *err) {
  const char *rel = w->rel.data;
  struct stat sb;
  if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
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
  if (depth > 0 && lh_globs_decide(w->globs, rel, w->rel.len, S_ISREG(sb.st_mode))) return LH_OK;
  int link = 0;
  if (S_ISLNK(sb.st_mode)) {
    const ssize_t n = readlinkat(dfd, name, w->target, sizeof w->target - 1);
    w->target[n > 0 ? n : 0] = 0;
    feed(w, "link", rel);
    feed(w, "target", w->target);
    /* A link inside a folder is never followed by ingest, so its folder is not walked; the
     * document itself, given as a link to a folder, is read through it, so it is walked. */
    if (fstatat(dfd, name, &sb, 0) != 0 || !(S_ISREG(sb.st_mode) || (S_ISDIR(sb.st_mode) && depth == 0)))
      return LH_OK;
    link = 1;
  }
  if (S_ISREG(sb.st_mode)) {
    /* a name ingest meets in its walk, of a file it may meet under another (invariant 1b) */
    if (depth > 0 && !link && sb.st_nlink > 1 && note_shared(w, &sb))
      return lh_error_set(err, LH_ENOMEM, "out of memory");
    return digest_file(w, dfd, name, depth, link, err);
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
  /* O_DIRECTORY: nothing else is opened (invariant 3); O_NOFOLLOW: a folder swapped for a link
   * since fstatat is not walked through it (only the document itself is read through a link) */
  const int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC | (depth ? O_NOFOLLOW : 0));
  if (fd < 0) return lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(errno));
  const size_t rel_len = w->rel.len;
  size_t dir_len = w->dir.len;
  lh_status st = LH_OK;
  if (depth == 0) { /* the real path its files are named by: realpath() of the document folder */
    char real[PATH_MAX];
    w->dir_errno = 0;
    w->dir_real = realpath(name, real) != NULL;
    cut(&w->dir, dir_len = 0);
    if (w->dir_real) st = lh_buf_append_str(&w->dir, real);
    else if (errno == ENAMETOOLONG) st = lh_buf_append_str(&w->dir, name);
    else w->dir_errno = errno;
  } else if (!w->dir_errno) {
    if (dir_len && w->dir.data[dir_len - 1] != '/') st = lh_buf_append(&w->dir, "/", 1);
    if (!st) st = lh_buf_append_str(&w->dir, name);
  }
  char **names = NULL;
  size_t n = 0;
  int e = st ? ENOMEM : list_names(fd, &names, &n);
  if (e == ENOMEM) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  else if (e) st = lh_error_set(err, LH_EIO, "%s: %s", where(w), strerror(e));
  for (size_t i = 0; i < n && st == LH_OK; i++) {
    cut(&w->rel, rel_len);
    if (lh_buf_append(&w->rel, "/", 1) || lh_buf_append_str(&w->rel, names[i])) {
      st = lh_error_set(err, LH_ENOMEM, "out of memory");
      break;
    }
    st = digest_path(w, fd, names[i], depth + 1, err);
  }
  cut(&w->rel, rel_len);
  cut(&w->dir, dir_len);
  close(fd);
  for (size_t i = 0; i < n; i++) free(names[i]);
  free(names);
  return st;
}

static void walk_free(walk *w) {
  lh_buf_free(&w->rel);
  lh_buf_free(&w->dir);
  lh_buf_free(&w->file);
  lh_buf_free(&w->scratch);
  lh_buf_free(&w->shown);
  shared_clear(w);
  free(w->shared);
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
      w->doc = di->resolved;
      lh_buf_clear(&w->rel);
      if (!st && lh_buf_append(&w->rel, ".", 1)) st = lh_error_set(err, LH_ENOMEM, "out of memory");
      shared_clear(w);
      if (!st) st = digest_path(w, AT_FDCWD, di->resolved, 0, err);
      if (!st && feed_shared(w)) st = lh_error_set(err, LH_ENOMEM, "out of memory");
      w->globs = NULL;
      lh_globs_free(g);
      if (st) {
        lh_buf_clear(&w->shown);
        if (lh_ingest_display_name(di->path, strlen(di->path), PATH_SHOWN, &w->shown))
          return lh_error_prefix(err, st, "a document: ");
        return lh_error_prefix(err, st, "document %s: ", w->shown.data);
      }
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
  const lh_status st = walk_request(&w, r, exclude, n_exclude, out, stamps, err);
  walk_free(&w);
  return st;
}

lh_status lh_inputs_stamp_now(const lh_request *r, const char *const *exclude, size_t n_exclude,
                              lh_inputs_stamp *stamps, lh_error *err) {
  walk w = {.read = 0};
  const lh_status st = walk_request(&w, r, exclude, n_exclude, NULL, stamps, err);
  walk_free(&w);
  return st;
}
