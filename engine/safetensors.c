/* safetensors.c — map and validate .safetensors files; resolve sharded folders (see safetensors.h).
 *
 * Layout of a file: an 8-byte little-endian header length N, N bytes of JSON, then the data
 * section. The validation follows the reference library (huggingface/safetensors), which refuses
 * files whose spans overlap, leave holes or leave bytes after the last tensor; longhaul refuses the
 * same files, so anything it loads transformers loads too. Everything is checked against the real
 * file size before any pointer into the mapping is formed, and arithmetic on offsets and shapes is
 * overflow-checked, because the header is untrusted input (fuzz_safetensors runs lh_st_parse on
 * arbitrary bytes).
 *
 * Names are collected in one arena while parsing (offsets, since the arena grows) and turned into
 * pointers by lh_st_finish, which also sorts the tensors by name and rejects duplicates.
 * lh_st_digest reads every mapped byte once, leaf by leaf on a thread pool: each 64 KiB chunk is
 * hashed, then the elements that start in it are tested for NaN/Inf while it is still in the L2
 * cache; an element split by a chunk or leaf boundary belongs to the piece where it starts.
 * This file never copies tensor data and never writes to a mapping (they are PROT_READ).
 */
#define _GNU_SOURCE
#include "engine/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/cpu/ops.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/log.h"

#define JSON_INT_MAX 9007199254740992.0 /* 2^53: larger integers are not exact in a double */

/* Set state carried between parse calls. name offsets are kept in a side array while the arena
 * grows; lh_st_finish converts them. */
typedef struct st_priv {
  size_t *name_off;
  size_t cap_t;
  lh_buf names;
} st_priv;

/* lh_st_set has no private pointer field, so the private part lives in front of it. */
typedef struct st_full {
  lh_st_set pub;
  st_priv priv;
} st_full;

static st_priv *priv(lh_st_set *s) { return &((st_full *)s)->priv; }

lh_st_set *lh_st_new(void) {
  st_full *f = calloc(1, sizeof *f);
  return f ? &f->pub : NULL;
}

static const struct {
  const char *name;
  int size; /* 0: a valid safetensors dtype longhaul cannot load */
  lh_dtype dt;
} dtypes[] = {
    {"F32", 4, LH_F32},     {"BF16", 2, LH_BF16},   {"F16", 2, LH_F16},     {"F64", 0, 0},
    {"I64", 0, 0},          {"I32", 0, 0},          {"I16", 0, 0},          {"I8", 0, 0},
    {"U64", 0, 0},          {"U32", 0, 0},          {"U16", 0, 0},          {"U8", 0, 0},
    {"BOOL", 0, 0},         {"F8_E4M3", 0, 0},      {"F8_E5M2", 0, 0},      {"F8_E8M0", 0, 0},
    {"F6_E2M3", 0, 0},      {"F6_E3M2", 0, 0},      {"F4", 0, 0},           {"C64", 0, 0},
};

lh_status lh_st_dtype(const char *name, lh_dtype *out, const char *path, const char *tensor, lh_error *err) {
  for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) {
    if (strcmp(name, dtypes[i].name)) continue;
    if (!dtypes[i].size)
      return lh_error_set(err, LH_EUNSUPPORTED,
                          "%s: tensor '%s' has dtype %s; longhaul loads F32, BF16 and F16 weights only", path, tensor,
                          name);
    *out = dtypes[i].dt;
    return LH_OK;
  }
  return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' has unknown dtype \"%.40s\"", path, tensor, name);
}

static int json_u64(const cJSON *v, uint64_t *out) {
  if (!cJSON_IsNumber(v)) return 0;
  double d = v->valuedouble;
  if (!(d >= 0) || d > JSON_INT_MAX || d != (double)(uint64_t)d) return 0;
  *out = (uint64_t)d;
  return 1;
}

/* What cJSON's values cannot tell, checked on the header's text (which cJSON has already parsed):
 * the reference library reads "shape" and "data_offsets" as integers, so 214912.0 or 2e3 in them
 * is refused there and here; and a "\u0000" in a string would end the string cJSON gives, so a
 * tensor named "a\u0000b" would load as 'a'. Offsets in messages count from the JSON's first byte. */
static lh_status header_text_check(const char *json, size_t n, const char *path, lh_error *err) {
  int depth = 0;     /* containers open at i */
  int int_array = 0; /* depth of the open "shape" / "data_offsets" array of a tensor (0: none) */
  int named = 0;     /* the last string read was "shape" or "data_offsets" */
  int key_int = 0;   /* ... and a ':' made it the key of the value that follows */
  size_t ts = 0, tl = 0; /* the last string read in the top object: the tensor's name (escapes as written) */
  for (size_t i = 0; i < n; i++) {
    const char ch = json[i];
    if (ch == '"') {
      const size_t s = ++i;
      for (; i < n && json[i] != '"'; i++) {
        if (json[i] != '\\') continue;
        if (i + 5 < n && json[i + 1] == 'u' && !memcmp(json + i + 2, "0000", 4))
          return lh_error_set(err, LH_EFORMAT, "%s: the header holds a \\u0000 (NUL) in a string at byte %zu",
                              path, i);
        i++;
      }
      if (depth == 1) ts = s, tl = i - s;
      named = (i - s == 5 && !memcmp(json + s, "shape", 5)) || (i - s == 12 && !memcmp(json + s, "data_offsets", 12));
      key_int = 0;
    } else if (ch == ':') {
      key_int = named;
    } else if (ch == '[' || ch == '{') {
      depth++;
      if (ch == '[' && key_int && depth == 3) int_array = depth;
      key_int = 0;
    } else if (ch == ']' || ch == '}') {
      if (depth == int_array) int_array = 0;
      depth--;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      const size_t s = i;
      int frac = 0;
      for (; i < n && json[i] && strchr("0123456789+-.eE", json[i]); i++)
        frac |= json[i] == '.' || json[i] == 'e' || json[i] == 'E';
      if (frac && int_array)
        return lh_error_set(err, LH_EFORMAT,
                            "%s: tensor '%.*s': %.*s at byte %zu: \"shape\" and \"data_offsets\" hold integers "
                            "(no fraction or exponent)", path, (int)(tl > 200 ? 200 : tl), json + ts,
                            (int)(i - s > 24 ? 24 : i - s), json + s, s);
      i--;
      key_int = 0;
    } else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r' && ch != ',') {
      key_int = 0;
    }
  }
  return LH_OK;
}

static lh_status push_tensor(lh_st_set *s, const lh_st_tensor *t, const char *name, lh_error *err, const char *path) {
  st_priv *p = priv(s);
  if ((size_t)s->n == p->cap_t) {
    size_t cap = p->cap_t ? p->cap_t * 2 : 64;
    lh_st_tensor *nt = realloc(s->t, cap * sizeof *nt);
    if (!nt) return lh_error_set(err, LH_ENOMEM, "%s: out of memory for the tensor index", path);
    s->t = nt;
    size_t *no = realloc(p->name_off, cap * sizeof *no);
    if (!no) return lh_error_set(err, LH_ENOMEM, "%s: out of memory for the tensor index", path);
    p->name_off = no;
    p->cap_t = cap;
  }
  p->name_off[s->n] = p->names.len;
  if (lh_buf_append(&p->names, name, strlen(name) + 1))
    return lh_error_set(err, LH_ENOMEM, "%s: out of memory for tensor names", path);
  s->t[s->n] = *t;
  s->t[s->n].name = NULL;
  s->n++;
  return LH_OK;
}

typedef struct span {
  uint64_t b, e;
  const char *name;
} span;

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  if (x->b != y->b) return x->b < y->b ? -1 : 1;
  if (x->e != y->e) return x->e < y->e ? -1 : 1;
  return 0;
}

static void fmt_shape(char *out, size_t n, const int64_t *shape, int ndim) {
  size_t k = (size_t)snprintf(out, n, "[");
  for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(out + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (k < n) snprintf(out + k, n - k, "]");
}

static lh_status parse_entry(lh_st_set *s, const cJSON *e, const uint8_t *data, uint64_t data_size, int file,
                             const char *path, span *sp, lh_error *err) {
  const char *name = e->string;
  if (!cJSON_IsObject(e))
    return lh_error_set(err, LH_EFORMAT, "%s: header entry '%s' is not an object", path, name);
  const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
  const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
  const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
  if (!cJSON_IsString(jd))
    return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' has no string \"dtype\"", path, name);
  if (!cJSON_IsArray(js))
    return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' has no \"shape\" array", path, name);
  if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2)
    return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' needs \"data_offsets\": [begin, end]", path, name);
  lh_st_tensor t;
  memset(&t, 0, sizeof t);
  lh_status st = lh_st_dtype(jd->valuestring, &t.dtype, path, name, err);
  if (st) return st;
  int nd = cJSON_GetArraySize(js);
  if (nd > LH_ST_MAX_DIMS)
    return lh_error_set(err, LH_EUNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d are supported)", path,
                        name, nd, LH_ST_MAX_DIMS);
  t.ndim = nd;
  uint64_t nelem = 1;
  int i = 0;
  const cJSON *d;
  cJSON_ArrayForEach(d, js) {
    uint64_t v;
    if (!json_u64(d, &v))
      return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, i);
    t.shape[i++] = (int64_t)v;
    if (__builtin_mul_overflow(nelem, v, &nelem))
      return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s': the element count overflows", path, name);
  }
  uint64_t b, en;
  if (!json_u64(jo->child, &b) || !json_u64(jo->child->next, &en))
    return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s': data_offsets must be non-negative integers", path, name);
  if (b > en)
    return lh_error_set(err, LH_EFORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] end before they begin", path,
                        name, (unsigned long long)b, (unsigned long long)en);
  if (en > data_size)
    return lh_error_set(err, LH_EFORMAT,
                        "%s: tensor '%s': data_offsets [%llu, %llu] lie outside the data section (%llu bytes)", path,
                        name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_size);
  uint64_t nbytes;
  if (__builtin_mul_overflow(nelem, (uint64_t)lh_dtype_size(t.dtype), &nbytes) || nbytes != en - b) {
    char sh[256];
    fmt_shape(sh, sizeof sh, t.shape, t.ndim);
    return lh_error_set(err, LH_EFORMAT,
                        "%s: tensor '%s': shape %s x %s needs %llu bytes but data_offsets [%llu, %llu] span %llu", path,
                        name, sh, jd->valuestring, (unsigned long long)(nelem * lh_dtype_size(t.dtype)),
                        (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b));
  }
  t.nbytes = nbytes;
  t.data = nbytes ? data + b : NULL;
  t.file = file;
  sp->b = b;
  sp->e = en;
  sp->name = name;
  return push_tensor(s, &t, name, err, path);
}

lh_status lh_st_parse(lh_st_set *s, const void *buf, size_t size, int file, const char *path, lh_error *err) {
  const uint8_t *p = buf;
  if (size < 8)
    return lh_error_set(err, LH_EFORMAT, "%s: %zu bytes is too short for a safetensors file (8-byte header length)",
                        path, size);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
  if (hlen > size - 8)
    return lh_error_set(err, LH_EFORMAT, "%s: the header length %llu goes beyond the end of the file (%zu bytes)",
                        path, (unsigned long long)hlen, size);
  if (hlen > LH_ST_MAX_HEADER)
    return lh_error_set(err, LH_EFORMAT, "%s: the header length %llu is over the safetensors limit of %u bytes", path,
                        (unsigned long long)hlen, LH_ST_MAX_HEADER);
  if (hlen < 2 || p[8] != '{')
    return lh_error_set(err, LH_EFORMAT, "%s: the header is not a JSON object", path);
  const char *json = (const char *)p + 8;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &end, 0);
  char deep[128];
  if (!root && lh_json_too_deep(json, (size_t)hlen, deep, sizeof deep))
    return lh_error_set(err, LH_EFORMAT, "%s: the JSON header is %s", path, deep);
  if (!root)
    return lh_error_set(err, LH_EFORMAT, "%s: the header is not valid JSON (error near byte %ld of %llu)", path,
                        end && end >= json ? (long)(end - json) : -1L, (unsigned long long)hlen);
  lh_status st = LH_OK;
  span *spans = NULL;
  if (!end || end < json || end > json + hlen) end = json + hlen;
  for (const char *q = end; q < json + hlen; q++)
    if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
      st = lh_error_set(err, LH_EFORMAT, "%s: unexpected bytes after the JSON header (at byte %ld)", path,
                        (long)(q - json));
      goto out;
    }
  if (!cJSON_IsObject(root)) {
    st = lh_error_set(err, LH_EFORMAT, "%s: the header is not a JSON object", path);
    goto out;
  }
  if ((st = header_text_check(json, (size_t)(end - json), path, err))) goto out;
  const uint8_t *data = p + 8 + hlen;
  uint64_t data_size = size - 8 - hlen;
  int cnt = cJSON_GetArraySize(root);
  spans = calloc((size_t)cnt + 1, sizeof *spans);
  if (!spans) {
    st = lh_error_set(err, LH_ENOMEM, "%s: out of memory", path);
    goto out;
  }
  int ns = 0;
  for (const cJSON *e = root->child; e; e = e->next) {
    if (!e->string) continue;
    if (!strcmp(e->string, "__metadata__")) {
      if (!cJSON_IsObject(e)) {
        st = lh_error_set(err, LH_EFORMAT, "%s: \"__metadata__\" must be an object of strings", path);
        goto out;
      }
      for (const cJSON *m = e->child; m; m = m->next)
        if (!cJSON_IsString(m)) {
          st = lh_error_set(err, LH_EFORMAT, "%s: \"__metadata__\" value '%s' is not a string", path,
                            m->string ? m->string : "?");
          goto out;
        }
      continue;
    }
    if ((st = parse_entry(s, e, data, data_size, file, path, &spans[ns], err))) goto out;
    ns++;
  }
  /* The spans must tile [0, data_size) exactly, as the reference library requires. */
  qsort(spans, (size_t)ns, sizeof *spans, span_cmp);
  uint64_t at = 0;
  for (int i = 0; i < ns; i++) {
    if (spans[i].b < at) {
      st = lh_error_set(err, LH_EFORMAT, "%s: tensors '%s' and '%s' overlap (bytes [%llu, %llu) of the data)", path,
                        spans[i - 1].name, spans[i].name, (unsigned long long)spans[i].b,
                        (unsigned long long)(at < spans[i].e ? at : spans[i].e));
      goto out;
    }
    if (spans[i].b > at) {
      st = lh_error_set(err, LH_EFORMAT, "%s: data bytes [%llu, %llu) before tensor '%s' belong to no tensor", path,
                        (unsigned long long)at, (unsigned long long)spans[i].b, spans[i].name);
      goto out;
    }
    at = spans[i].e;
  }
  if (at != data_size)
    st = lh_error_set(err, LH_EFORMAT,
                      "%s: the data section has %llu bytes but the tensors cover %llu (a truncated or padded file)",
                      path, (unsigned long long)data_size, (unsigned long long)at);
  s->header_bytes += hlen;
out:
  free(spans);
  cJSON_Delete(root);
  return st;
}

static int name_cmp(const void *a, const void *b) {
  return strcmp(((const lh_st_tensor *)a)->name, ((const lh_st_tensor *)b)->name);
}

lh_status lh_st_finish(lh_st_set *s, lh_error *err) {
  st_priv *p = priv(s);
  s->names = p->names.data;
  for (int i = 0; i < s->n; i++) s->t[i].name = s->names + p->name_off[i];
  if (s->n) qsort(s->t, (size_t)s->n, sizeof *s->t, name_cmp);
  for (int i = 1; i < s->n; i++)
    if (!strcmp(s->t[i - 1].name, s->t[i].name)) {
      const char *f1 = s->n_maps ? s->maps[s->t[i - 1].file].path : "the header";
      const char *f2 = s->n_maps ? s->maps[s->t[i].file].path : "the header";
      return lh_error_set(err, LH_EFORMAT, "tensor '%s' appears twice (in %s and in %s)", s->t[i].name, f1, f2);
    }
  return LH_OK;
}

lh_st_tensor *lh_st_find(const lh_st_set *s, const char *name) {
  int lo = 0, hi = s->n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(s->t[mid].name, name);
    if (!c) return &s->t[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return NULL;
}

static void identity_of(const struct stat *sb, lh_file_identity *id) {
  id->size = (uint64_t)sb->st_size;
  id->mtime_ns = (int64_t)sb->st_mtim.tv_sec * 1000000000 + sb->st_mtim.tv_nsec;
  id->ctime_ns = (int64_t)sb->st_ctim.tv_sec * 1000000000 + sb->st_ctim.tv_nsec;
  id->inode = (uint64_t)sb->st_ino;
  id->device = (uint64_t)sb->st_dev;
}

lh_status lh_st_add_file(lh_st_set *s, const char *path, lh_error *err) {
  lh_mapping *nm = realloc(s->maps, (size_t)(s->n_maps + 1) * sizeof *nm);
  if (!nm) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", path);
  s->maps = nm;
  lh_file_identity *ni = realloc(s->ident, (size_t)(s->n_maps + 1) * sizeof *ni);
  if (!ni) return lh_error_set(err, LH_ENOMEM, "%s: out of memory", path);
  s->ident = ni;
  lh_file_identity *id = &s->ident[s->n_maps];
  memset(id, 0, sizeof *id);
  lh_mapping *m = &s->maps[s->n_maps];
  memset(m, 0, sizeof *m);
  if (snprintf(m->path, sizeof m->path, "%s", path) >= (int)sizeof m->path)
    return lh_error_set(err, LH_ELIMIT, "%s: path too long", path);
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block the open */
  if (fd < 0) return lh_error_set(err, errno == ENOENT ? LH_ENOTFOUND : LH_EIO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return lh_error_set(err, LH_EFORMAT, "%s: not a regular file", path);
  }
  if (sb.st_size < 8) {
    close(fd);
    return lh_error_set(err, LH_EFORMAT, "%s: %lld bytes is too short for a safetensors file", path,
                        (long long)sb.st_size);
  }
  char real[PATH_MAX];
  if (!realpath(path, real) || snprintf(id->path, sizeof id->path, "%s", real) >= (int)sizeof id->path) {
    int e = errno;
    close(fd);
    return lh_error_set(err, LH_EIO, "%s: cannot resolve its real path: %s", path, strerror(e));
  }
  identity_of(&sb, id);
  void *base = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (base == MAP_FAILED) return lh_error_set(err, LH_EIO, "%s: mmap: %s", path, strerror(e));
  m->base = base;
  m->size = (size_t)sb.st_size;
  s->n_maps++;
  return lh_st_parse(s, base, m->size, s->n_maps - 1, path, err);
}

/* A shard name from the index must stay inside the model folder. */
static int safe_shard_name(const char *n) {
  if (!n[0] || n[0] == '/') return 0;
  for (const char *p = n; *p;) {
    const char *q = strchr(p, '/');
    size_t len = q ? (size_t)(q - p) : strlen(p);
    if ((len == 2 && !strncmp(p, "..", 2)) || len == 0) return 0;
    if (!q) break;
    p = q + 1;
  }
  return 1;
}

static lh_status open_index(lh_st_set *s, const char *dir, const char *ipath, lh_error *err) {
  lh_buf b = {0};
  lh_status st = lh_file_read_regular(ipath, 256u << 20, &b, err);
  if (st) return st;
  cJSON *root = cJSON_ParseWithLength(b.data, b.len);
  char deep[128];
  const int too_deep = !root && lh_json_too_deep(b.data, b.len, deep, sizeof deep);
  lh_buf_free(&b);
  if (too_deep) return lh_error_set(err, LH_EFORMAT, "%s: %s", ipath, deep);
  if (!root) return lh_error_set(err, LH_EFORMAT, "%s: not valid JSON", ipath);
  const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
  const char **shards = NULL;
  int n_shards = 0;
  if (!cJSON_IsObject(root) || !cJSON_IsObject(wm)) {
    st = lh_error_set(err, LH_EFORMAT, "%s: needs a \"weight_map\" object (tensor name -> shard file)", ipath);
    goto out;
  }
  int cnt = cJSON_GetArraySize(wm);
  if (cnt == 0) {
    st = lh_error_set(err, LH_EFORMAT, "%s: \"weight_map\" is empty", ipath);
    goto out;
  }
  shards = calloc((size_t)cnt, sizeof *shards);
  if (!shards) {
    st = lh_error_set(err, LH_ENOMEM, "%s: out of memory", ipath);
    goto out;
  }
  for (const cJSON *e = wm->child; e; e = e->next) {
    if (!cJSON_IsString(e) || !e->string) {
      st = lh_error_set(err, LH_EFORMAT, "%s: weight_map entry '%s' is not a file name", ipath,
                        e->string ? e->string : "?");
      goto out;
    }
    if (!safe_shard_name(e->valuestring)) {
      st = lh_error_set(err, LH_EFORMAT, "%s: weight_map entry '%s' names '%s', which is outside the model folder",
                        ipath, e->string, e->valuestring);
      goto out;
    }
    int seen = 0;
    for (int i = 0; i < n_shards && !seen; i++) seen = !strcmp(shards[i], e->valuestring);
    if (!seen) shards[n_shards++] = e->valuestring;
  }
  for (int i = 0; i < n_shards; i++) {
    char path[4096];
    if ((st = lh_path_join(path, sizeof path, dir, shards[i]))) goto out;
    if ((st = lh_st_add_file(s, path, err))) {
      if (st == LH_ENOTFOUND) lh_error_prefix(err, st, "%s names a shard that is missing: ", ipath);
      goto out;
    }
  }
  if ((st = lh_st_finish(s, err))) goto out;
  /* Cross-check: every indexed tensor is in the shard the index names. Tensors the index does not
   * list are still loaded (transformers reads every key of each shard), with a warning. */
  for (const cJSON *e = wm->child; e; e = e->next) {
    lh_st_tensor *t = lh_st_find(s, e->string);
    const char *want = e->valuestring;
    if (!t) {
      st = lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' is listed in shard '%s' but no shard holds it", ipath,
                        e->string, want);
      goto out;
    }
    const char *have = s->maps[t->file].path;
    size_t hl = strlen(have), wl = strlen(want);
    if (hl < wl || strcmp(have + hl - wl, want) || (hl > wl && have[hl - wl - 1] != '/')) {
      st = lh_error_set(err, LH_EFORMAT, "%s: tensor '%s' is listed in shard '%s' but it is in %s", ipath, e->string,
                        want, have);
      goto out;
    }
    t->used = 1;
  }
  int unlisted = 0;
  for (int i = 0; i < s->n; i++) {
    if (!s->t[i].used && unlisted++ < 5)
      lh_log_warn("%s: tensor '%s' in %s is not listed in the index; loading it anyway", ipath, s->t[i].name,
                  s->maps[s->t[i].file].path);
    s->t[i].used = 0;
  }
  if (unlisted > 5) lh_log_warn("%s: %d tensors in all are not listed in the index", ipath, unlisted);
  s->sharded = 1;
out:
  free(shards);
  cJSON_Delete(root);
  return st;
}

lh_status lh_st_open_dir(const char *dir, lh_st_set **out, lh_error *err) {
  *out = NULL;
  lh_st_set *s = lh_st_new();
  if (!s) return lh_error_set(err, LH_ENOMEM, "out of memory");
  char single[4096], index[4096];
  lh_status st;
  if ((st = lh_path_join(single, sizeof single, dir, "model.safetensors")) ||
      (st = lh_path_join(index, sizeof index, dir, "model.safetensors.index.json"))) {
    lh_st_close(s);
    return lh_error_set(err, st, "%s: path too long", dir);
  }
  if (lh_is_file(single)) {
    if (lh_is_file(index))
      lh_log_warn("%s: both model.safetensors and model.safetensors.index.json exist; using model.safetensors, "
                  "as transformers does",
                  dir);
    st = lh_st_add_file(s, single, err);
    if (!st) st = lh_st_finish(s, err);
  } else if (lh_is_file(index)) {
    st = open_index(s, dir, index, err);
  } else {
    char bin[4096];
    lh_path_join(bin, sizeof bin, dir, "pytorch_model.bin");
    if (lh_is_file(bin))
      st = lh_error_set(err, LH_EUNSUPPORTED,
                        "%s: only pytorch_model.bin was found; longhaul reads safetensors only (convert with "
                        "transformers' save_pretrained(safe_serialization=True))",
                        dir);
    else if ((st = lh_file_check_regular(single, err)) == LH_ENOTFOUND &&
             (st = lh_file_check_regular(index, err)) == LH_ENOTFOUND)
      st = lh_error_set(err, LH_ENOTFOUND, "%s: no model.safetensors or model.safetensors.index.json", dir);
  }
  if (st) {
    lh_st_close(s);
    return st;
  }
  *out = s;
  return LH_OK;
}

void lh_st_close(lh_st_set *s) {
  if (!s) return;
  for (int i = 0; i < s->n_maps; i++)
    if (s->maps[i].base) munmap(s->maps[i].base, s->maps[i].size);
  free(s->maps);
  free(s->ident);
  free(s->digest);
  free(s->t);
  st_priv *p = priv(s);
  free(p->name_off);
  lh_buf_free(&p->names);
  free(s);
}

lh_status lh_st_move_to_model(lh_st_set *s, lh_model *m, lh_error *err) {
  st_priv *p = priv(s);
  void **owned = realloc(m->owned, (size_t)(m->n_owned + 2) * sizeof *owned);
  if (!owned) return lh_error_set(err, LH_ENOMEM, "out of memory");
  m->owned = owned;
  m->owned[m->n_owned++] = s->t;
  m->owned[m->n_owned++] = p->names.data;
  m->maps = s->maps;
  m->n_maps = s->n_maps;
  free(s->ident);
  free(s->digest);
  free(p->name_off);
  free(s);
  return LH_OK;
}

/* ---- digests and the finiteness scan (see safetensors.h) ------------------------------------ */

#define DIGEST_CHUNK ((uint64_t)64 << 10) /* hashed, then scanned while it is still in the L2 cache */
#define SCAN_BLOCK 4096                    /* elements tested together before the first bad one is sought */

/* Non-finite (NaN or an infinity) means every exponent bit set. */
static uint32_t exp_bits(lh_dtype dt) { return dt == LH_F32 ? 0x7f800000u : dt == LH_BF16 ? 0x7f80u : 0x7c00u; }

static int64_t first_bad_plain(const uint8_t *p, int64_t n, lh_dtype dt) {
  uint32_t m = exp_bits(dt);
  if (dt == LH_F32) {
    for (int64_t i = 0; i < n; i++) {
      uint32_t x;
      memcpy(&x, p + 4 * i, 4);
      if ((x & m) == m) return i;
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      uint16_t x;
      memcpy(&x, p + 2 * i, 2);
      if ((x & m) == m) return i;
    }
  }
  return -1;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* 1 when any of the n elements at p (any alignment) is not finite. */
__attribute__((target("avx2"))) static int any_bad_avx2(const uint8_t *p, int64_t n, lh_dtype dt) {
  int64_t bytes = n * (int64_t)lh_dtype_size(dt), i = 0;
  __m256i acc = _mm256_setzero_si256();
  if (dt == LH_F32) {
    const __m256i m = _mm256_set1_epi32((int)exp_bits(dt));
    for (; i + 32 <= bytes; i += 32) {
      __m256i x = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), m);
      acc = _mm256_or_si256(acc, _mm256_cmpeq_epi32(x, m));
    }
  } else {
    const __m256i m = _mm256_set1_epi16((short)exp_bits(dt));
    for (; i + 32 <= bytes; i += 32) {
      __m256i x = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(p + i)), m);
      acc = _mm256_or_si256(acc, _mm256_cmpeq_epi16(x, m));
    }
  }
  if (!_mm256_testz_si256(acc, acc)) return 1;
  int64_t es = (int64_t)lh_dtype_size(dt);
  return first_bad_plain(p + i, (bytes - i) / es, dt) >= 0;
}
#endif

/* Index of the first of n elements at p that is not finite, -1 when all are. */
static int64_t first_bad(const uint8_t *p, int64_t n, lh_dtype dt) {
  int64_t es = (int64_t)lh_dtype_size(dt);
  for (int64_t i0 = 0; i0 < n; i0 += SCAN_BLOCK) {
    int64_t k = n - i0 < SCAN_BLOCK ? n - i0 : SCAN_BLOCK;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && !any_bad_avx2(p + i0 * es, k, dt)) continue;
#endif
    int64_t j = first_bad_plain(p + i0 * es, k, dt);
    if (j >= 0) return i0 + j;
  }
  return -1;
}

typedef struct dg_seg {
  uint64_t b, e; /* a tensor's bytes in its file */
  lh_dtype dt;
} dg_seg;

typedef struct dg_file {
  const uint8_t *base;
  uint64_t size;
  dg_seg *seg; /* sorted by b */
  int nseg;
  int64_t first_task, n_leaves;
} dg_file;

typedef struct dg_job {
  dg_file *f;
  uint64_t leaf;
  int *task_file;
  uint8_t (*dig)[32]; /* per task (leaf) */
  int64_t *bad;       /* per task: file offset of the first non-finite element starting in the leaf, or -1 */
  const volatile sig_atomic_t *stop; /* lh_st_digest's */
  volatile int stopped;              /* a leaf was left unread because of it */
} dg_job;

static int seg_cmp(const void *a, const void *b) {
  const dg_seg *x = a, *y = b;
  return x->b < y->b ? -1 : x->b > y->b;
}

/* One leaf: hash its bytes chunk by chunk and scan the elements that start in each chunk. */
static void digest_task(void *ctx, int64_t task, int worker) {
  (void)worker;
  dg_job *j = ctx;
  if (j->stop && *j->stop) { /* the remaining leaves are skipped, each at the cost of this test */
    j->stopped = 1;
    return;
  }
  const dg_file *f = &j->f[j->task_file[task]];
  uint64_t a = (uint64_t)(task - f->first_task) * j->leaf, b = f->size - a < j->leaf ? f->size : a + j->leaf;
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)(f->base + a)) & ~(uintptr_t)(page > 0 ? page - 1 : 4095);
  madvise((void *)lo, (size_t)((uintptr_t)(f->base + b) - lo), MADV_WILLNEED); /* a hint: failure is harmless */
  lh_sha256 h;
  lh_sha256_init(&h);
  int64_t bad = -1;
  int lo_seg = 0, hi_seg = f->nseg; /* the first segment ending after a */
  while (lo_seg < hi_seg) {
    int mid = lo_seg + (hi_seg - lo_seg) / 2;
    if (f->seg[mid].e <= a)
      lo_seg = mid + 1;
    else
      hi_seg = mid;
  }
  int si = lo_seg;
  for (uint64_t c0 = a; c0 < b;) {
    uint64_t c1 = b - c0 < DIGEST_CHUNK ? b : c0 + DIGEST_CHUNK;
    lh_sha256_update(&h, f->base + c0, (size_t)(c1 - c0));
    while (si < f->nseg && f->seg[si].e <= c0) si++;
    for (int k = si; bad < 0 && k < f->nseg && f->seg[k].b < c1; k++) {
      const dg_seg *g = &f->seg[k];
      uint64_t es = lh_dtype_size(g->dt), s0 = c0 > g->b ? c0 : g->b, s1 = c1 < g->e ? c1 : g->e;
      uint64_t i0 = (s0 - g->b + es - 1) / es, i1 = (s1 - g->b + es - 1) / es; /* elements starting in [s0, s1) */
      if (i1 <= i0) continue;
      int64_t r = first_bad(f->base + g->b + i0 * es, (int64_t)(i1 - i0), g->dt);
      if (r >= 0) bad = (int64_t)(g->b + (i0 + (uint64_t)r) * es);
    }
    c0 = c1;
  }
  lh_sha256_final(&h, j->dig[task]);
  j->bad[task] = bad;
}

static int same_identity(const lh_file_identity *a, const lh_file_identity *b) {
  return a->size == b->size && a->mtime_ns == b->mtime_ns && a->ctime_ns == b->ctime_ns && a->inode == b->inode &&
         a->device == b->device;
}

/* The error for the non-finite element at byte off of file i. */
static lh_status nonfinite_error(const lh_st_set *s, int i, int64_t off, lh_error *err) {
  const char *path = s->maps[i].path;
  const uint8_t *base = s->maps[i].base;
  for (int k = 0; k < s->n; k++) {
    const lh_st_tensor *t = &s->t[k];
    if (t->file != i || !t->data) continue;
    int64_t b = (const uint8_t *)t->data - base;
    if (off < b || off >= b + (int64_t)t->nbytes) continue;
    int64_t es = (int64_t)lh_dtype_size(t->dtype), e = (off - b) / es;
    uint32_t m = exp_bits(t->dtype), x = 0, mant = 0, neg = 0;
    if (t->dtype == LH_F32) {
      memcpy(&x, (const uint8_t *)t->data + e * es, 4);
      mant = x & 0x7fffffu, neg = x >> 31;
    } else {
      uint16_t y;
      memcpy(&y, (const uint8_t *)t->data + e * es, 2);
      x = y, mant = y & ~m & 0x7fffu, neg = y >> 15;
    }
    const char *what = (x & m) != m ? "a value that is not finite (the file changed since it was read)"
                       : mant       ? "NaN"
                       : neg        ? "-infinity"
                                    : "+infinity";
    char idx[256];
    int64_t rest = e, stride = 1;
    for (int d = 0; d < t->ndim; d++) stride *= t->shape[d];
    size_t n = (size_t)snprintf(idx, sizeof idx, "[");
    for (int d = 0; d < t->ndim && n < sizeof idx; d++) {
      stride = t->shape[d] ? stride / t->shape[d] : 1;
      int64_t v = stride ? rest / stride : 0;
      rest -= v * stride;
      n += (size_t)snprintf(idx + n, sizeof idx - n, "%s%lld", d ? ", " : "", (long long)v);
    }
    if (n < sizeof idx) snprintf(idx + n, sizeof idx - n, "]");
    return lh_error_set(err, LH_EFORMAT,
                        "%s: tensor '%s' (%s) holds %s at element %lld, index %s: weights must be finite; the "
                        "checkpoint is damaged or diverged (download or convert it again)",
                        path, t->name, lh_dtype_name(t->dtype), what, (long long)e, idx);
  }
  return lh_error_set(err, LH_EFORMAT,
                      "%s: a non-finite value is recorded at byte %lld, which belongs to no tensor (a wrong digest "
                      "cache entry?)",
                      path, (long long)off);
}

lh_status lh_st_digest(lh_st_set *s, int threads, uint64_t leaf, const lh_digest_cache *cache,
                       const volatile sig_atomic_t *stop, lh_error *err) {
  if (!leaf) leaf = LH_ST_DIGEST_LEAF;
  int nf = s->n_maps;
  lh_status st = LH_OK;
  free(s->digest);
  s->digest = calloc((size_t)(nf ? nf : 1), sizeof *s->digest);
  dg_file *f = calloc((size_t)(nf ? nf : 1), sizeof *f);
  dg_seg *segs = calloc((size_t)(s->n ? s->n : 1), sizeof *segs);
  char *hit = calloc((size_t)(nf ? nf : 1), 1);
  int *task_file = NULL;
  uint8_t(*dig)[32] = NULL;
  int64_t *bad = NULL;
  lh_pool *pool = NULL;
  if (!s->digest || !f || !segs || !hit) {
    st = lh_error_set(err, LH_ENOMEM, "out of memory digesting the weight files");
    goto out;
  }
  for (int i = 0; i < nf; i++)
    if (cache && cache->get && cache->get(cache->user, &s->ident[i], &s->digest[i])) hit[i] = 1;

  /* each file's tensors, in file order */
  int *count = calloc((size_t)(nf ? nf : 1), sizeof *count);
  if (!count) {
    st = lh_error_set(err, LH_ENOMEM, "out of memory digesting the weight files");
    goto out;
  }
  for (int k = 0; k < s->n; k++)
    if (s->t[k].data) count[s->t[k].file]++;
  for (int i = 0, at = 0; i < nf; i++) {
    f[i].base = s->maps[i].base;
    f[i].size = s->maps[i].size;
    f[i].seg = segs + at;
    at += count[i];
  }
  free(count);
  for (int k = 0; k < s->n; k++) {
    const lh_st_tensor *t = &s->t[k];
    if (!t->data) continue;
    dg_file *g = &f[t->file];
    uint64_t b = (uint64_t)((const uint8_t *)t->data - g->base);
    g->seg[g->nseg++] = (dg_seg){b, b + t->nbytes, t->dtype};
  }
  int64_t ntasks = 0;
  for (int i = 0; i < nf; i++) {
    qsort(f[i].seg, (size_t)f[i].nseg, sizeof *f[i].seg, seg_cmp);
    if (hit[i]) continue;
    f[i].first_task = ntasks;
    f[i].n_leaves = f[i].size ? (int64_t)((f[i].size + leaf - 1) / leaf) : 1;
    ntasks += f[i].n_leaves;
  }
  if (ntasks) {
    task_file = malloc((size_t)ntasks * sizeof *task_file);
    dig = malloc((size_t)ntasks * sizeof *dig);
    bad = malloc((size_t)ntasks * sizeof *bad);
    if (!task_file || !dig || !bad) {
      st = lh_error_set(err, LH_ENOMEM, "out of memory digesting the weight files");
      goto out;
    }
    for (int i = 0; i < nf; i++)
      for (int64_t l = 0; !hit[i] && l < f[i].n_leaves; l++) task_file[f[i].first_task + l] = i;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t nt = threads > 0 ? threads : cores > 0 ? cores : 1;
    if (nt > ntasks) nt = ntasks;
    if (nt > 1) pool = lh_pool_new((int)nt); /* NULL: one thread does it all */
    dg_job j = {.f = f, .leaf = leaf, .task_file = task_file, .dig = dig, .bad = bad, .stop = stop};
    lh_pool_run(pool, ntasks, digest_task, &j);
    if (j.stopped) {
      st = lh_error_set(err, LH_EINTR, "interrupted while reading the weights for their digest (every byte is read "
                        "once per model file; the digest is cached where the caller keeps one)");
      goto out;
    }
  }
  for (int i = 0; i < nf; i++) {
    if (hit[i]) continue;
    lh_sha256 h;
    lh_sha256_init(&h);
    static const char tag[] = "longhaul file digest v1\n";
    lh_sha256_update(&h, tag, sizeof tag - 1);
    uint8_t le[16];
    for (int b = 0; b < 8; b++) le[b] = (uint8_t)(f[i].size >> (8 * b)), le[8 + b] = (uint8_t)(leaf >> (8 * b));
    lh_sha256_update(&h, le, 16);
    s->digest[i].nonfinite_at = -1;
    for (int64_t l = 0; l < f[i].n_leaves; l++) {
      lh_sha256_update(&h, dig[f[i].first_task + l], 32);
      if (s->digest[i].nonfinite_at < 0) s->digest[i].nonfinite_at = bad[f[i].first_task + l];
    }
    lh_sha256_final(&h, s->digest[i].sha256);
    /* What was read is the file the identity names only if nothing changed it meanwhile. */
    struct stat sb;
    lh_file_identity now = s->ident[i];
    if (stat(s->maps[i].path, &sb) == 0) identity_of(&sb, &now);
    else
      now.inode = ~s->ident[i].inode;
    if (!same_identity(&now, &s->ident[i])) {
      st = lh_error_set(err, LH_EIO,
                        "%s: the file changed (or was replaced) while longhaul read it; open the model again once "
                        "nothing writes to it",
                        s->maps[i].path);
      goto out;
    }
    if (cache && cache->put) cache->put(cache->user, &s->ident[i], &s->digest[i]);
  }
  for (int i = 0; i < nf; i++)
    if (s->digest[i].nonfinite_at >= 0) {
      st = nonfinite_error(s, i, s->digest[i].nonfinite_at, err);
      goto out;
    }
out:
  lh_pool_free(pool);
  free(task_file);
  free(dig);
  free(bad);
  free(hit);
  free(segs);
  free(f);
  return st;
}
