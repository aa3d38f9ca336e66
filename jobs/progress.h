/* progress.h — progress of long work for people and for machines.
 *
 * A run is a batch of items (requests, NIAH trials) worked on as jobs; a job goes through phases
 * (ingest: bytes; prefill and decode: tokens). Three renderings of the same events:
 *
 *   tty    a live area at the bottom of the terminal, redrawn at most 10 times a second: the
 *          current phase's line and, under it, the batch line. A phase that ends leaves one
 *          summary line above the live area; messages (lh_progress_note) go there too.
 *   plain  (a log file, cron, CI) one line every `interval` seconds and at each phase's end,
 *          one per batch event and one per message, each opening with an ISO 8601 UTC time
 *          ("2026-12-05T16:39:40Z longhaul: ...").
 *   json   one object per line: {"ts": "2026-12-05T16:39:40.123Z", "event": ...} where event is
 *          "begin", "progress", "end" (phase events: "job", "requests", "phase", "done",
 *          "total", "unit", "rate", "eta_s" while known, "elapsed_s" and "stopped" at the end),
 *          "batch" ("noun", "done", "failed", "total", "eta_s", "elapsed_s"), "job" ("job",
 *          "requests") or "note" ("message").
 *
 * The tty phase line holds, left to right: LABEL PHASE PCT [BAR] COUNT RATE ETA, e.g.
 *
 *   lighthouse +1 prefill  59% [##########..........] 120.3K/203.7K tok 1050 tok/s ETA 1m20s
 *
 * PCT and BAR only when the total is known. A group of several requests over the same documents
 * (one ingest, one prefill, decoded together) is labelled by its first request and how many more
 * it serves: "lighthouse +1" is lighthouse and one more request. The batch line holds POSITION
 * COUNTS ETA ELAPSED:
 *
 *   request 1-2 of 2: 0 done, 0 failed ETA 3m20s elapsed 1m05s
 *
 * Neither line ever wraps: the terminal's width is read at every redraw (TIOCGWINSZ on the output,
 * else $COLUMNS, else 80; no signal handler is installed) and a line uses at most width - 1
 * columns. When a phase line does not fit, it gives up, in this order until it fits: (1) the bar
 * narrows from 30 cells to 10, (2) the bar, (3) the rate, (4) the total from COUNT, (5) the end of
 * the job's name (cut to 8 columns, marked "~"; the "+K" stays), (6) a stopped phase's reason,
 * (7) the percentage; whatever is still too long is cut at the width. The batch line gives up
 * ELAPSED, then COUNTS, then ETA.
 *
 * A phase's summary line is LABEL PHASE COUNT RATE "in TIME" when it ended (lh_progress_end), and
 * LABEL PHASE "stopped" PCT [BAR] COUNT RATE "after TIME" (REASON) when it ended early
 * (lh_progress_stop); neither has an ETA.
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
/* interval_s: the plain rendering's seconds between lines (<= 0: 10). NULL when out of memory;
 * every other call accepts a NULL lh_progress and does nothing. */
lh_progress *lh_progress_open(lh_progress_mode mode, FILE *out, double interval_s);
/* The clock (seconds, monotonic) that rates, ETAs, elapsed times and redraw gaps read; NULL: lh_now.
 * For tests, which need the same line at every run: a measured rate's width decides which fields
 * fit a narrow terminal. */
void lh_progress_set_clock(lh_progress *p, double (*clock)(void *ctx), void *ctx);
/* Ends an open phase (as lh_progress_end), leaves the batch line on screen; accepts NULL. */
void lh_progress_close(lh_progress *p);

/* The batch: `total` items this run works on (noun: "request", "trial"; shown with an "s" for
 * several), of which `done` finished well and `failed` failed so far. Call once before the first
 * job and again whenever a count changes. The item being worked on is number done + failed + 1
 * (through done + failed + requests for a group). The batch ETA: the average time per finished
 * item times the items left; before any finished, the current job's elapsed time plus its
 * prefill's ETA, per request, times the requests left. */
void lh_progress_batch(lh_progress *p, const char *noun, int64_t done, int64_t failed, int64_t total);

/* The job the next phases belong to: `job` names it and `requests` (>= 1) counts the requests it
 * serves ("JOB +K" with K = requests - 1). A group (requests > 1) is explained by a message the
 * first time its label is shown. */
void lh_progress_job(lh_progress *p, const char *job, int requests);

/* Start a phase: unit "B" shows bytes (B, KB, MB, GB: powers of 1000), "tok" shows tokens. total
 * 0 = unknown (no bar, percentage or ETA). job NULL: the job of lh_progress_job; a name other than
 * that job's starts a job of one request. An open phase is ended first. */
void lh_progress_begin(lh_progress *p, const char *job, const char *phase, int64_t total, const char *unit);
/* The current phase is a prefill from position `from` (the tokens before it came from a
 * checkpoint): they are left out of the rate, and since a token's cost grows with its position
 * (softmax attention reads every key before it), the ETA fits time = a * tokens + b * (sum of
 * their positions) to the phase so far instead of assuming a constant rate. */
void lh_progress_prefill(lh_progress *p, int64_t from);
/* Work done so far in the current phase (absolute, not a delta). */
void lh_progress_update(lh_progress *p, int64_t done);
/* End the current phase: its summary line with the count done, the average rate and the time. */
void lh_progress_end(lh_progress *p);
/* End the current phase early (interrupted, taken over, failed): its summary line shows where
 * it stopped and `why` (may be NULL) instead of a completion. */
void lh_progress_stop(lh_progress *p, const char *why);
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
