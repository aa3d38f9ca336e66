/* buf.c — see buf.h. */
#include "util/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lh_status grow(void **data, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return LH_OK;
  size_t nc = *cap ? *cap : 64;
  while (nc < need) {
    if (nc > SIZE_MAX / 2 / elem) return LH_ENOMEM;
    nc *= 2;
  }
  void *p = realloc(*data, nc * elem);
  if (!p) return LH_ENOMEM;
  *data = p;
  *cap = nc;
  return LH_OK;
}

lh_status lh_buf_reserve(lh_buf *b, size_t extra) {
  if (extra > SIZE_MAX - b->len - 1) return LH_ENOMEM;
  return grow((void **)&b->data, &b->cap, b->len + extra + 1, 1);
}

lh_status lh_buf_append(lh_buf *b, const void *p, size_t n) {
  lh_status s = lh_buf_reserve(b, n);
  if (s) return s;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
  return LH_OK;
}

lh_status lh_buf_append_str(lh_buf *b, const char *s) { return lh_buf_append(b, s, strlen(s)); }

lh_status lh_buf_printf(lh_buf *b, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    va_end(ap2);
    return LH_EINVAL;
  }
  lh_status s = lh_buf_reserve(b, (size_t)n);
  if (s) {
    va_end(ap2);
    return s;
  }
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  b->len += (size_t)n;
  return LH_OK;
}

void lh_buf_clear(lh_buf *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

void lh_buf_free(lh_buf *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

lh_status lh_i32vec_reserve(lh_i32vec *v, size_t extra) {
  if (extra > SIZE_MAX / sizeof(int32_t) - v->len) return LH_ENOMEM;
  return grow((void **)&v->data, &v->cap, v->len + extra, sizeof(int32_t));
}

lh_status lh_i32vec_push(lh_i32vec *v, int32_t x) {
  if (v->len < v->cap) { /* the common case, without a call */
    v->data[v->len++] = x;
    return LH_OK;
  }
  lh_status s = lh_i32vec_reserve(v, 1);
  if (s) return s;
  v->data[v->len++] = x;
  return LH_OK;
}

lh_status lh_i32vec_append(lh_i32vec *v, const int32_t *p, size_t n) {
  lh_status s = lh_i32vec_reserve(v, n);
  if (s) return s;
  if (n) memcpy(v->data + v->len, p, n * sizeof *p);
  v->len += n;
  return LH_OK;
}

void lh_i32vec_free(lh_i32vec *v) {
  free(v->data);
  v->data = NULL;
  v->len = v->cap = 0;
}
