/* archive_walk.c — folder inputs: a deterministic walk that never follows a link.
 *
 * Each directory's names are read whole, sorted by bytes with directories keyed as "name/", and
 * visited depth first; that visits paths in the byte order of their full relative paths, the
 * order --sort path gives archives, so a folder and a tarball of it frame identically. Directories
 * are opened relative to their parent (openat with O_NOFOLLOW), so paths of any length work and a
 * symlink can never be entered, whatever it points at: symlink loops cannot happen, and a
 * directory that is its own ancestor (bind mounts) is recorded as a loop instead of walked.
 * Files are opened with O_NOFOLLOW | O_NONBLOCK and checked again with fstat, so a name swapped
 * for a fifo or a link between the listing and the open is never read or waited on. A regular
 * file with several links is read once, under the first name met that is a document; later names
 * are recorded as hardlinks to that one, as tar does. Files and folders in exclude_paths
 * (matched by device and inode) are recorded as excluded and never opened. With confine_root the
 * walked folder, as opened, must lie under the root, and a symlink pointing outside it is recorded
 * with reason OUTSIDE_ROOT (resolved through the file system as far as it exists, lexically past
 * that); symlinks are never followed either way. Compressed files (decompress_members) are read
 * through member.c. Memory: the names of the directories on the current path and their siblings,
 * plus one table entry per multiply-linked file.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ingest/ingest_internal.h"
#include "util/fs.h"

#define MAX_DEPTH 256
#define READ_BLOCK (1 << 20)

typedef struct dent {
  char *key; /* name, plus "/" for directories (the sort key) */
  size_t len; /* of the name alone */
} dent;

typedef struct frame {
  int fd;
  dent *ents;
  size_t n, i;
  size_t plen; /* length of this directory's path prefix (with its trailing '/') */
  dev_t dev;
  ino_t ino;
} frame;

typedef struct link_slot {
  dev_t dev;
  ino_t ino;
  char *path; /* the name it was first met under, or the name it was included under */
  size_t len;
  int included;
} link_slot;

typedef struct links {
  link_slot *s;
  size_t cap, n;
} links;

static size_t link_hash(dev_t d, ino_t i) {
  uint64_t h = (uint64_t)d * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xC2B2AE3D27D4EB4Full;
  return (size_t)(h ^ (h >> 29));
}

static link_slot *links_find(links *L, dev_t d, ino_t i) {
  if (!L->cap) return NULL;
  for (size_t k = link_hash(d, i) & (L->cap - 1);; k = (k + 1) & (L->cap - 1)) {
    if (!L->s[k].path) return NULL;
    if (L->s[k].dev == d && L->s[k].ino == i) return &L->s[k];
  }
}

static int links_add(links *L, dev_t d, ino_t i, const char *path, size_t len) {
  if (2 * (L->n + 1) > L->cap) {
    size_t cap = L->cap ? 2 * L->cap : 64;
    link_slot *ns = calloc(cap, sizeof *ns);
    if (!ns) return -1;
    for (size_t k = 0; k < L->cap; k++) {
      if (!L->s[k].path) continue;
      size_t j = link_hash(L->s[k].dev, L->s[k].ino) & (cap - 1);
      while (ns[j].path) j = (j + 1) & (cap - 1);
      ns[j] = L->s[k];
    }
    free(L->s);
    L->s = ns;
    L->cap = cap;
  }
  size_t j = link_hash(d, i) & (L->cap - 1);
  while (L->s[j].path) j = (j + 1) & (L->cap - 1);
  L->s[j].path = malloc(len + 1);
  if (!L->s[j].path) return -1;
  memcpy(L->s[j].path, path, len);
  L->s[j].path[len] = 0;
  L->s[j].len = len;
  L->s[j].dev = d;
  L->s[j].ino = i;
  L->n++;
  return 0;
}

/* The slot's name becomes path (the name the file was included under). */
static int slot_rename(link_slot *ls, const char *path, size_t len) {
  char *p = malloc(len + 1);
  if (!p) return -1;
  memcpy(p, path, len);
  p[len] = 0;
  free(ls->path);
  ls->path = p;
  ls->len = len;
  return 0;
}

static void links_free(links *L) {
  for (size_t k = 0; k < L->cap; k++) free(L->s[k].path);
  free(L->s);
}

static int dent_cmp(const void *pa, const void *pb) {
  const dent *a = pa, *b = pb;
  return strcmp(a->key, b->key); /* strcmp compares as unsigned char: byte order */
}

static void frame_free(frame *f) {
  for (size_t i = 0; i < f->n; i++) free(f->ents[i].key);
  free(f->ents);
  if (f->fd >= 0) close(f->fd);
  f->ents = NULL;
  f->fd = -1;
}

/* Read and sort the names of the directory open at f->fd. errno-style result. */
static int frame_load(frame *f) {
  int dfd = dup(f->fd);
  if (dfd < 0) return errno;
  DIR *d = fdopendir(dfd);
  if (!d) {
    int e = errno;
    close(dfd);
    return e;
  }
  size_t cap = 0;
  struct dirent *de;
  errno = 0;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    int is_dir = de->d_type == DT_DIR;
    if (de->d_type == DT_UNKNOWN) {
      struct stat sb;
      is_dir = fstatat(f->fd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode);
    }
    if (f->n == cap) {
      cap = cap ? 2 * cap : 32;
      dent *ne = realloc(f->ents, cap * sizeof *ne);
      if (!ne) {
        closedir(d);
        return ENOMEM;
      }
      f->ents = ne;
    }
    size_t len = strlen(de->d_name);
    char *k = malloc(len + 2);
    if (!k) {
      closedir(d);
      return ENOMEM;
    }
    memcpy(k, de->d_name, len);
    k[len] = is_dir ? '/' : 0;
    k[len + 1] = 0;
    f->ents[f->n].key = k;
    f->ents[f->n].len = len;
    f->n++;
    errno = 0;
  }
  int e = errno;
  closedir(d);
  if (e) return e;
  if (f->n) qsort(f->ents, f->n, sizeof *f->ents, dent_cmp); /* an empty folder has no array */
  for (size_t i = 0; i < f->n; i++) f->ents[i].key[f->ents[i].len] = 0; /* sorted: now just the name */
  return 0;
}

static lh_entry_type type_of_mode(mode_t m) {
  if (S_ISREG(m)) return LH_ENTRY_FILE;
  if (S_ISDIR(m)) return LH_ENTRY_DIR;
  if (S_ISLNK(m)) return LH_ENTRY_SYMLINK;
  if (S_ISCHR(m)) return LH_ENTRY_CHARDEV;
  if (S_ISBLK(m)) return LH_ENTRY_BLOCKDEV;
  if (S_ISFIFO(m)) return LH_ENTRY_FIFO;
  if (S_ISSOCK(m)) return LH_ENTRY_SOCKET;
  return LH_ENTRY_OTHER;
}

/* One of exclude_paths, by device and inode. */
static int excluded_path(const lh_reader *r, const struct stat *sb) {
  for (size_t i = 0; i < r->n_ex; i++)
    if (r->ex_dev[i] == sb->st_dev && r->ex_ino[i] == sb->st_ino) return 1;
  return 0;
}

/* Collapse ".", ".." and repeated '/' of an absolute path in place (no file system access). */
static void lexical_clean(char *p) {
  char *out = p, *in = p;
  while (*in) {
    while (*in == '/') in++;
    char *seg = in;
    while (*in && *in != '/') in++;
    size_t len = (size_t)(in - seg);
    if (!len || (len == 1 && seg[0] == '.')) continue;
    if (len == 2 && seg[0] == '.' && seg[1] == '.') {
      while (out > p && *--out != '/') {}
      continue;
    }
    *out++ = '/';
    memmove(out, seg, len);
    out += len;
  }
  if (out == p) *out++ = '/';
  *out = 0;
}

/* Whether the symlink target, found in the directory open at dfd, points outside the documents
 * root; detail then says where. Resolved through the file system as far as it exists (further
 * links included), lexically past that. */
static int outside_root(const lh_reader *r, int dfd, const char *target, char *detail, size_t n) {
  char dir[PATH_MAX], cand[2 * PATH_MAX + 2], res[PATH_MAX];
  if (target[0] == '/') snprintf(cand, sizeof cand, "%s", target);
  else {
    if (!lh_fd_path(dfd, dir, sizeof dir)) return 0;
    snprintf(cand, sizeof cand, "%s/%s", dir, target);
  }
  const char *where = realpath(cand, res);
  if (!where) {
    lexical_clean(cand);
    where = cand;
  }
  if (lh_path_under(where, r->root, r->root_len)) return 0;
  snprintf(detail, n, "points to '%s', outside the documents root '%s'; not followed", where, r->root);
  return 1;
}

static lh_status record_errno(lh_reader *r, lh_meta *m, const char *what, int e) {
  char detail[256];
  snprintf(detail, sizeof detail, "%s: %s", what, strerror(e));
  return lh_reader_record(r, m, LH_ENTRY_ERROR, LH_REASON_UNREADABLE, m->size, -1, LH_EIO, detail);
}

/* The puller of a compressed file in a folder: its descriptor. */
typedef struct fpull {
  lh_reader *r;
  int fd;
  uint8_t *buf;
  int err; /* errno of a failed read */
} fpull;

static long file_pull(void *ctx, const void **out) {
  fpull *p = ctx;
  for (;;) {
    double t0 = lh_now();
    ssize_t n = read(p->fd, p->buf, READ_BLOCK);
    lh_reader_add_read_time(p->r, t0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      p->err = errno;
      return -1;
    }
    *out = p->buf;
    if (n && lh_reader_source_progress(p->r, p->r->st.source_bytes + n)) return -1;
    return (long)n;
  }
}

/* Read the open file fd, a compressed member, as a document. */
static lh_status read_member_file(lh_reader *r, int fd, const lh_meta *m, uint8_t *buf) {
  fpull fp = {r, fd, buf, 0};
  lh_member *mb = NULL;
  const char *filter = NULL;
  char det[512];
  lh_entry_reason why = LH_REASON_CORRUPT;
  lh_status st = lh_member_open(r, file_pull, &fp, &mb, &filter, det, &why);
  if (st == LH_ENOMEM) return lh_error_set(&r->err, st, "out of memory");
  if (lh_reader_cancelled(r)) return lh_error_set(&r->err, LH_EINTR, "ingest cancelled");
  if (st) {
    if (fp.err) snprintf(det, sizeof det, "read error: %s", strerror(fp.err));
    return lh_reader_record(r, m, LH_ENTRY_ERROR, fp.err ? LH_REASON_UNREADABLE : why, m->size, -1,
                            fp.err ? LH_EIO : st, det);
  }
  lh_meta dm = *m;
  if (filter) {
    dm.decompressed = filter;
    dm.size = -1;
  }
  if ((st = lh_doc_begin(r, &dm))) goto out;
  lh_status code = LH_OK;
  for (;;) {
    const void *p;
    size_t n;
    double t0 = lh_now();
    code = lh_member_read(mb, &p, &n, det, &why);
    lh_reader_add_read_time(r, t0);
    if (lh_reader_cancelled(r)) {
      st = lh_error_set(&r->err, LH_EINTR, "ingest cancelled");
      goto out;
    }
    if (code || !n) break;
    int want = 1;
    if ((st = lh_doc_data(r, p, n, &want))) goto out;
    if (!want) break;
  }
  if (code && fp.err) {
    snprintf(det, sizeof det, "read error: %s", strerror(fp.err));
    why = LH_REASON_UNREADABLE;
    code = LH_EIO;
  }
  st = lh_doc_end(r, code, why, code ? lh_member_in(mb) : -1, code ? det : NULL);
out:
  lh_member_close(mb);
  return st;
}

/* Read the open regular file fd as a document. */
static lh_status read_file(lh_reader *r, int fd, const lh_meta *m, uint8_t *buf) {
  if (m->alt_path) return read_member_file(r, fd, m, buf); /* a compressed member (the caller's decision) */
  lh_status st = lh_doc_begin(r, m);
  if (st) return st;
  int64_t at = 0;
  for (;;) {
    double t0 = lh_now();
    ssize_t n = read(fd, buf, READ_BLOCK);
    lh_reader_add_read_time(r, t0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      char detail[256];
      snprintf(detail, sizeof detail, "read error at byte %" PRId64 ": %s", at, strerror(errno));
      return lh_doc_end(r, LH_EIO, LH_REASON_UNREADABLE, at, detail);
    }
    if (n == 0) break;
    at += n;
    if ((st = lh_reader_source_progress(r, r->st.source_bytes + n))) return st;
    int want = 1;
    if ((st = lh_doc_data(r, buf, (size_t)n, &want))) return st;
    if (!want) break;
  }
  return lh_doc_end(r, LH_OK, LH_REASON_NONE, -1, NULL);
}

lh_status lh_source_folder(lh_reader *r, const lh_input *in) {
  lh_meta im = {.path = in->name, .path_len = strlen(in->name), .type = LH_ENTRY_INPUT, .size = -1};
  frame *stack = calloc(MAX_DEPTH + 1, sizeof *stack);
  uint8_t *buf = malloc(READ_BLOCK);
  lh_buf path = {0}, target = {0};
  links L = {0};
  lh_status st = LH_OK;
  size_t depth = 0;
  if (!stack || !buf) {
    st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    goto out;
  }
  int root = open(lh_input_open_path(in), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  if (root < 0 || fstat(root, &sb) != 0) {
    int e = errno;
    if (root >= 0) close(root);
    st = record_errno(r, &im, "cannot open the folder", e);
    goto out;
  }
  if (r->root) {
    /* the folder as opened, not as named: a symlink swapped in since it was added counts */
    char real[PATH_MAX];
    if (!lh_fd_path(root, real, sizeof real) || !lh_path_under(real, r->root, r->root_len)) {
      char detail[2 * PATH_MAX + 96];
      snprintf(detail, sizeof detail, "the folder resolves to '%s', outside the documents root '%s'", real, r->root);
      close(root);
      st = lh_reader_record(r, &im, LH_ENTRY_ERROR, LH_REASON_OUTSIDE_ROOT, -1, -1, LH_EINVAL, detail);
      goto out;
    }
  }
  if (excluded_path(r, &sb)) {
    close(root);
    st = lh_reader_record(r, &im, LH_ENTRY_SKIPPED, LH_REASON_EXCLUDED, -1, -1, LH_OK,
                          "the folder is one of the paths left out of folder walks (exclude_paths)");
    goto out;
  }
  stack[0] = (frame){.fd = root, .dev = sb.st_dev, .ino = sb.st_ino};
  depth = 1;
  int e = frame_load(&stack[0]);
  if (e) {
    st = record_errno(r, &im, "cannot list the folder", e);
    goto out;
  }
  while (depth > 0 && !st) {
    frame *f = &stack[depth - 1];
    if (f->i == f->n) {
      frame_free(f);
      depth--;
      continue;
    }
    dent *d = &f->ents[f->i++];
    path.len = f->plen;
    if (lh_buf_append(&path, d->key, d->len)) {
      st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
      break;
    }
    lh_meta m = {.path = path.data, .path_len = path.len, .size = -1};
    if (fstatat(f->fd, d->key, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
      m.type = LH_ENTRY_OTHER;
      st = record_errno(r, &m, "cannot stat", errno);
      continue;
    }
    m.type = type_of_mode(sb.st_mode);
    if (m.type == LH_ENTRY_DIR) {
      if (lh_buf_append(&path, "/", 1)) {
        st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
        break;
      }
      m.path = path.data;
      m.path_len = path.len;
    }
    if (excluded_path(r, &sb)) {
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, LH_REASON_EXCLUDED, -1, -1, LH_OK,
                            "one of the paths left out of folder walks (exclude_paths); not read");
      continue;
    }
    if (m.type == LH_ENTRY_DIR) {
      lh_entry_reason why = lh_reader_predecide(r, &m);
      if (why != LH_REASON_DIRECTORY) {
        st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, -1, -1, LH_OK, NULL);
        continue;
      }
      int loop = 0;
      for (size_t k = 0; k < depth; k++) loop |= stack[k].dev == sb.st_dev && stack[k].ino == sb.st_ino;
      if (loop) {
        st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, LH_REASON_LOOP, -1, -1, LH_OK,
                              "this directory is one of its own ancestors");
        continue;
      }
      if (depth >= MAX_DEPTH) {
        st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, LH_REASON_TOO_DEEP, -1, -1, LH_OK,
                              "nested deeper than 256 directories; not walked");
        continue;
      }
      int cfd = openat(f->fd, d->key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (cfd < 0) {
        st = record_errno(r, &m, "cannot open the directory", errno);
        continue;
      }
      frame *c = &stack[depth];
      *c = (frame){.fd = cfd, .plen = path.len, .dev = sb.st_dev, .ino = sb.st_ino};
      if ((e = frame_load(c))) {
        frame_free(c);
        st = record_errno(r, &m, "cannot list the directory", e);
        continue;
      }
      if ((st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, LH_REASON_DIRECTORY, -1, -1, LH_OK, NULL))) {
        frame_free(c);
        break;
      }
      depth++;
      continue;
    }
    if (m.type == LH_ENTRY_SYMLINK) {
      lh_buf_clear(&target);
      if (lh_buf_reserve(&target, (size_t)sb.st_size + 2)) {
        st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
        break;
      }
      ssize_t n = readlinkat(f->fd, d->key, target.data, target.cap - 1);
      if (n >= 0) {
        target.len = (size_t)n;
        target.data[n] = 0;
        m.link = target.data;
        m.link_len = target.len;
      }
      lh_entry_reason why = lh_reader_predecide(r, &m);
      char detail[PATH_MAX + 128];
      if (why == LH_REASON_LINK && n >= 0 && r->root && outside_root(r, f->fd, target.data, detail, sizeof detail)) {
        st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, LH_REASON_OUTSIDE_ROOT, -1, -1, LH_OK, detail);
        continue;
      }
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, -1, -1, LH_OK, NULL);
      continue;
    }
    if (m.type != LH_ENTRY_FILE) {
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, lh_reader_predecide(r, &m), -1, -1, LH_OK, NULL);
      continue;
    }
    m.size = (int64_t)sb.st_size;
    size_t sfx = r->p->decompress_members ? lh_member_suffix(m.path, m.path_len) : 0;
    if (sfx) m.alt_path = m.path, m.alt_len = m.path_len - sfx;
    /* A file of several names is read under the first name met that is a document; the names
     * after that one are recorded as links to it. */
    link_slot *ls = NULL;
    if (sb.st_nlink > 1) {
      ls = links_find(&L, sb.st_dev, sb.st_ino);
      if (ls) {
        m.type = LH_ENTRY_HARDLINK;
        m.link = ls->path;
        m.link_len = ls->len;
        if (ls->included) {
          st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, lh_reader_predecide(r, &m), m.size, -1, LH_OK, NULL);
          continue;
        }
      } else if (links_add(&L, sb.st_dev, sb.st_ino, path.data, path.len) ||
                 !(ls = links_find(&L, sb.st_dev, sb.st_ino))) {
        st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
        break;
      }
    }
    lh_meta fm = m;
    fm.type = LH_ENTRY_FILE; /* a later name of a file not read yet is decided as a file */
    lh_entry_reason why = lh_reader_predecide(r, &fm);
    if (why) {
      st = lh_reader_record(r, &m, LH_ENTRY_SKIPPED, why, m.size, -1, LH_OK, NULL);
      continue;
    }
    int fd = openat(f->fd, d->key, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat fs;
    if (fd < 0 || fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode) || fs.st_ino != sb.st_ino) {
      int err = fd < 0 ? errno : EAGAIN;
      if (fd >= 0) close(fd);
      st = record_errno(r, &m, fd < 0 ? "cannot open" : "changed while it was read", err);
      continue;
    }
    r->last_included = 0;
    st = read_file(r, fd, &m, buf);
    close(fd);
    if (!st && ls && r->last_included) {
      ls->included = 1;
      if (slot_rename(ls, path.data, path.len)) st = lh_error_set(&r->err, LH_ENOMEM, "out of memory");
    }
  }
out:
  for (size_t k = 0; k < depth; k++) frame_free(&stack[k]);
  free(stack);
  free(buf);
  lh_buf_free(&path);
  lh_buf_free(&target);
  links_free(&L);
  return st;
}
