/* err.h — status codes and the error struct every longhaul library call reports through.
 *
 * Library code never exits and never prints errors itself: a failing call returns a status and,
 * when the caller passed an lh_error, leaves a message there that names what was wrong, where
 * (file, tensor, entry, line) and, when it helps, what to do next. Only the CLI turns statuses into
 * exit codes. Passing NULL for the lh_error is allowed everywhere and discards the message.
 *
 * Grading (after libarchive): LH_OK is success; every other code is a failure of this call only,
 * and the handle it was made on stays usable unless the function's comment says otherwise.
 */
#ifndef LH_UTIL_ERR_H
#define LH_UTIL_ERR_H

#include <stddef.h>

typedef enum lh_status {
  LH_OK = 0,
  LH_EINVAL,       /* bad argument or option from the caller */
  LH_EIO,          /* an operating-system I/O call failed (errno text in the message) */
  LH_ENOMEM,       /* an allocation failed */
  LH_EFORMAT,      /* input is malformed (bad JSON, bad header, bad archive) */
  LH_EUNSUPPORTED, /* input is valid but uses a feature longhaul does not implement */
  LH_ECORRUPT,     /* stored data failed an integrity check */
  LH_EFULL,        /* out of disk or over a configured size cap */
  LH_EBUSY,        /* a resource is locked or in use by someone else */
  LH_ENOTFOUND,    /* a named file, tensor, job or key does not exist */
  LH_EINTR,        /* interrupted on purpose (SIGINT/SIGTERM): state is resumable */
  LH_ELIMIT,       /* a request is over a limit (context length, decompression ratio) */
  LH_EBACKEND,     /* the compute backend (CUDA, BLAS) reported a failure */
  LH_STATUS_COUNT
} lh_status;

#define LH_ERROR_MSG_MAX 1024

typedef struct lh_error {
  lh_status code;
  char msg[LH_ERROR_MSG_MAX];
} lh_error;

/* Short stable name of a status ("ok", "format", ...). Never NULL. */
const char *lh_status_name(lh_status s);

/* Record a failure in err (which may be NULL) and return code, so callers can write
 * `return lh_error_set(err, LH_EFORMAT, "%s: bad header", path);`. */
lh_status lh_error_set(lh_error *err, lh_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefix the message already in err with more context ("loading model foo: " + old message).
 * Returns err->code (or code if err is NULL). */
lh_status lh_error_prefix(lh_error *err, lh_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clear err to LH_OK with an empty message. err may be NULL. */
void lh_error_clear(lh_error *err);

#endif
