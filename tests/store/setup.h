/* setup.h — set-up the store tests share: a store that opens or ends the test program, and the
 * log's warnings kept for assertions. Header-only, for store tests. */
#ifndef LH_TESTS_STORE_SETUP_H
#define LH_TESTS_STORE_SETUP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "util/log.h"

/* Open the store at path with sp (NULL: the defaults); when it cannot, print why and exit(1): the
 * tests after it would only fail for the same reason. */
static inline lh_store *setup_store_open(const char *path, const lh_store_params *sp) {
  lh_store *s = NULL;
  lh_error e;
  if (lh_store_open(path, sp, &s, &e)) {
    fprintf(stderr, "open %s: %s\n", path, e.msg);
    exit(1);
  }
  return s;
}

/* With lh_log_set_sink(warnings_sink, NULL), every warning or error logged is appended to
 * warnings, one a line, until it is full; a test empties it with warnings[0] = 0. */
static char warnings[8192] __attribute__((unused));
static inline void warnings_sink(lh_log_level level, const char *msg, void *user) {
  (void)user;
  if (level >= LH_LOG_WARN && strlen(warnings) + strlen(msg) + 2 < sizeof warnings) {
    strcat(warnings, msg);
    strcat(warnings, "\n");
  }
}

#endif
