/* log.c — see log.h. The sink and level are process-wide; a mutex keeps lines whole. */
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static int log_level = -1; /* -1: not yet read from LH_LOG */
static lh_log_sink log_sink;
static void *log_user;

static int level_from_env(void) {
  const char *e = getenv("LH_LOG");
  if (!e) return LH_LOG_INFO;
  if (!strcmp(e, "debug")) return LH_LOG_DEBUG;
  if (!strcmp(e, "warn")) return LH_LOG_WARN;
  if (!strcmp(e, "error")) return LH_LOG_ERROR;
  if (!strcmp(e, "quiet")) return LH_LOG_QUIET;
  return LH_LOG_INFO;
}

void lh_log_set_level(lh_log_level level) { log_level = (int)level; }

lh_log_level lh_log_get_level(void) {
  if (log_level < 0) log_level = level_from_env();
  return (lh_log_level)log_level;
}

void lh_log_set_sink(lh_log_sink sink, void *user) {
  pthread_mutex_lock(&log_mu);
  log_sink = sink;
  log_user = user;
  pthread_mutex_unlock(&log_mu);
}

void lh_log(lh_log_level level, const char *fmt, ...) {
  if ((int)level < (int)lh_log_get_level()) return;
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  static const char *const tag[] = {"debug", "info", "warning", "error", ""};
  pthread_mutex_lock(&log_mu);
  if (log_sink)
    log_sink(level, buf, log_user);
  else
    fprintf(stderr, "longhaul: %s%s%s\n", level == LH_LOG_INFO ? "" : tag[level],
            level == LH_LOG_INFO ? "" : ": ", buf);
  pthread_mutex_unlock(&log_mu);
}
