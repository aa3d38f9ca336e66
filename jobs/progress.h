/* progress.h — progress of long work for people and for machines.
 *
 * Three renderings of the same events: on a terminal a live bar per phase (ingest: MB and MB/s;
 * prefill: tokens, tok/s and ETA; decode: tokens and tok/s), redrawn at most 10 times a second;
 * elsewhere (a log file, CI) one plain line every `interval` seconds and at each phase's end; with
 * --progress json one JSON object per line ({"event": ..., "job": ..., "phase": ..., "done": ...,
 * "total": ..., "rate": ..., "eta_s": ...}). Messages (lh_progress_note) never tear a bar.
 *
 * One lh_progress is used by one thread (the runner's); it writes to the FILE it was given.
 */
#ifndef LH_JOBS_PROGRESS_H
#define LH_JOBS_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

typedef enum lh_progress_mode {
  LH_PROGRESS_AUTO = 0, /* TTY when out is a terminal, else PLAIN */
  LH_PROGRESS_TTY,
  LH_PROGRESS_PLAIN,
  LH_PROGRESS_JSON,
  LH_PROGRESS_NONE
} lh_progress_mode;

typedef struct lh_progress lh_progress;

/* Parse "auto" | "tty" | "plain" | "json" | "none"; returns -1 for anything else. */
int lh_progress_mode_parse(const char *s);
lh_progress *lh_progress_open(lh_progress_mode mode, FILE *out, double interval_s);
void lh_progress_close(lh_progress *p); /* accepts NULL; ends an open bar */

/* Start a phase of a job: unit "B" shows bytes as MB, "tok" shows tokens. total 0 = unknown. */
void lh_progress_begin(lh_progress *p, const char *job, const char *phase, int64_t total, const char *unit);
/* The current phase is a prefill from position `from` (the tokens before it came from a
 * checkpoint): they are left out of the rate, and since a token's cost grows with its position
 * (softmax attention reads every key before it), the ETA fits time = a * tokens + b * (sum of
 * their positions) to the phase so far instead of assuming a constant rate. */
void lh_progress_prefill(lh_progress *p, int64_t from);
/* Work done so far in the current phase (absolute, not a delta). */
void lh_progress_update(lh_progress *p, int64_t done);
/* End the current phase (prints its final line with the average rate). */
void lh_progress_end(lh_progress *p);
/* A message line (warnings, per-job results) printed without breaking the display. */
void lh_progress_note(lh_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The ETA model, on its own (for tests): the time from `from` to `done` is fitted as
 * a * (done - from) + b * (done^2 - from^2), a, b >= 0, by least squares over the samples added. */
typedef struct lh_eta {
  int64_t from, total;
  double suu, suv, svv, sut, svt;
  int n;
} lh_eta;
void lh_eta_start(lh_eta *e, int64_t from, int64_t total);
void lh_eta_add(lh_eta *e, int64_t done, double elapsed_s);
/* Seconds left from done to total; -1 before there are samples to fit. */
double lh_eta_remaining(const lh_eta *e, int64_t done);

#endif
