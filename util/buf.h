/* buf.h — growable byte buffers and int32 vectors (after Redis' sds, but plain structs).
 *
 * A zero-initialised struct is an empty, valid buffer. Growth doubles capacity, so appends are
 * amortised O(1). Append functions return LH_OK or LH_ENOMEM and leave the buffer intact on failure.
 * The owner frees with lh_buf_free / lh_i32vec_free (both accept already-freed buffers).
 */
#ifndef LH_UTIL_BUF_H
#define LH_UTIL_BUF_H

#include <stdint.h>
#include <stddef.h>

#include "util/err.h"

typedef struct lh_buf {
  char *data; /* NUL-terminated whenever len < cap, so text can be used as a C string */
  size_t len, cap;
} lh_buf;

typedef struct lh_i32vec {
  int32_t *data;
  size_t len, cap;
} lh_i32vec;

lh_status lh_buf_reserve(lh_buf *b, size_t extra);
lh_status lh_buf_append(lh_buf *b, const void *p, size_t n);
lh_status lh_buf_append_str(lh_buf *b, const char *s);
lh_status lh_buf_printf(lh_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lh_buf_clear(lh_buf *b); /* len = 0, keeps the memory */
void lh_buf_free(lh_buf *b);

lh_status lh_i32vec_reserve(lh_i32vec *v, size_t extra);
lh_status lh_i32vec_push(lh_i32vec *v, int32_t x);
lh_status lh_i32vec_append(lh_i32vec *v, const int32_t *p, size_t n);
void lh_i32vec_free(lh_i32vec *v);

#endif
