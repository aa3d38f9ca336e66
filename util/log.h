/* log.h — leveled diagnostics to stderr (or a sink a test or the progress display installs).
 *
 * Warnings that are part of a contract (an unknown tensor, a config field that is ignored) go
 * through lh_log_warn so tests can capture and assert them with lh_log_set_sink. The level comes
 * from the LH_LOG environment variable (debug, info, warn, error, quiet) unless set by the CLI.
 */
#ifndef LH_UTIL_LOG_H
#define LH_UTIL_LOG_H

typedef enum lh_log_level { LH_LOG_DEBUG, LH_LOG_INFO, LH_LOG_WARN, LH_LOG_ERROR, LH_LOG_QUIET } lh_log_level;

typedef void (*lh_log_sink)(lh_log_level level, const char *msg, void *user);

void lh_log_set_level(lh_log_level level);
lh_log_level lh_log_get_level(void);
/* Install a sink (NULL restores stderr). The sink sees messages at or above the level. */
void lh_log_set_sink(lh_log_sink sink, void *user);

void lh_log(lh_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define lh_log_debug(...) lh_log(LH_LOG_DEBUG, __VA_ARGS__)
#define lh_log_info(...) lh_log(LH_LOG_INFO, __VA_ARGS__)
#define lh_log_warn(...) lh_log(LH_LOG_WARN, __VA_ARGS__)
#define lh_log_error(...) lh_log(LH_LOG_ERROR, __VA_ARGS__)

#endif
