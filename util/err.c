/* err.c — status names and message formatting for lh_error (see err.h). */
#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_names[LH_STATUS_COUNT] = {
    [LH_OK] = "ok",
    [LH_EINVAL] = "invalid argument",
    [LH_EIO] = "i/o error",
    [LH_ENOMEM] = "out of memory",
    [LH_EFORMAT] = "malformed input",
    [LH_EUNSUPPORTED] = "unsupported",
    [LH_ECORRUPT] = "corrupt data",
    [LH_EFULL] = "no space",
    [LH_EBUSY] = "busy",
    [LH_ENOTFOUND] = "not found",
    [LH_EINTR] = "interrupted",
    [LH_ELIMIT] = "over limit",
    [LH_EBACKEND] = "backend error",
};

const char *lh_status_name(lh_status s) {
  if ((int)s < 0 || s >= LH_STATUS_COUNT || !status_names[s]) return "unknown status";
  return status_names[s];
}

lh_status lh_error_set(lh_error *err, lh_status code, const char *fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

lh_status lh_error_prefix(lh_error *err, lh_status code, const char *fmt, ...) {
  if (!err) return code;
  char old[LH_ERROR_MSG_MAX];
  memcpy(old, err->msg, sizeof old);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof err->msg)
    snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%s", old);
  if (err->code == LH_OK) err->code = code;
  return err->code;
}

void lh_error_clear(lh_error *err) {
  if (!err) return;
  err->code = LH_OK;
  err->msg[0] = 0;
}
