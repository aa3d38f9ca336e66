/* progress.c — see progress.h for what is shown and in which order fields give way.
 *
 * Invariants of the tty rendering: the live area is `live` lines (0, 1 or 2: the phase line, then
 * the batch line) at the bottom of the output, the cursor at the end of its last line. Every line
 * of it was cut to fewer columns than the terminal had when it was drawn, so none wrapped, and
 * "\r", `live - 1` lines up and "clear to the end of the screen" erase exactly it. Anything
 * printed for good (a phase's summary, a message) is printed after erasing the live area, which
 * is then drawn again; each such frame goes out in one write, so the terminal never shows half of
 * it. Columns are counted conservatively: a non-ASCII character counts as two (a wide CJK
 * character is), so a line can fall short of the width but never past it.
 *
 * Rates are averages over the phase so far (long phases are steady; a sliding window would only
 * add noise to the ETA). JSON strings are escaped by cJSON. This file never installs a signal
 * handler (a library must not): the width is read again at every redraw instead of on SIGWINCH.
 */
#define _DEFAULT_SOURCE
#include "jobs/progress.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/json.h"

#define LINE_MAX_COLS 400 /* wider terminals get lines of at most this many columns */
#define BAR_CELLS 30
#define BAR_MIN_CELLS 10
#define LABEL_MIN_COLS 8

enum { LIVE, ENDED, STOPPED }; /* what a phase line says at its end */

struct lh_progress {
  lh_progress_mode mode;
  FILE *out;
  double interval;
  /* the job */
  char job[128];
  int requests, job_live;
  double job_t0;
  /* the phase */
  char phase[32], unit[8];
  int64_t total, done;
  double t0, last_draw;
  int active;
  int prefill; /* lh_progress_prefill: rate from eta.from, and the fitted ETA */
  lh_eta eta;
  /* the batch */
  int batch;
  char noun[24];
  int64_t b_done, b_failed, b_total;
  double b_t0, b_changed; /* the first lh_progress_batch; the last change of its counts */
  /* tty */
  int live;
  /* the clock every time here is read from (lh_progress_set_clock) */
  double (*clock)(void *);
  void *clock_ctx;
};

static double now_s(const lh_progress *p) { return p->clock ? p->clock(p->clock_ctx) : lh_now(); }

/* ---- the prefill ETA ---- */

/* Positions are scaled by the total so the normal equations stay well conditioned at 4M tokens. */
void lh_eta_start(lh_eta *e, int64_t from, int64_t total) {
  memset(e, 0, sizeof *e);
  e->from = from, e->total = total;
}

void lh_eta_add(lh_eta *e, int64_t done, double t) {
  if (e->total <= 0 || done <= e->from) return;
  const double N = (double)e->total, x = (double)done / N, x0 = (double)e->from / N;
  const double u = x - x0, v = x * x - x0 * x0;
  e->suu += u * u, e->suv += u * v, e->svv += v * v, e->sut += u * t, e->svt += v * t;
  e->n++;
}

double lh_eta_remaining(const lh_eta *e, int64_t done) {
  if (e->n < 1 || e->total <= 0) return -1;
  if (done >= e->total) return 0;
  double a = 0, b = 0;
  const double det = e->suu * e->svv - e->suv * e->suv;
  const int both = e->n >= 2 && det > 1e-12 * e->suu * e->svv; /* the two terms can be told apart */
  if (both) {
    a = (e->sut * e->svv - e->svt * e->suv) / det;
    b = (e->svt * e->suu - e->sut * e->suv) / det;
  }
  if (!both || a < 0 || b < 0) { /* the best with one term */
    const double ea = e->suu > 0 ? e->sut / e->suu : 0, eb = e->svv > 0 ? e->svt / e->svv : 0;
    /* residual of each one-term fit: sum t^2 is common, so compare what each removes */
    const double ra = e->suu > 0 ? e->sut * e->sut / e->suu : 0, rb = e->svv > 0 ? e->svt * e->svt / e->svv : 0;
    if (ra >= rb) a = ea > 0 ? ea : 0, b = 0;
    else a = 0, b = eb > 0 ? eb : 0;
  }
  const double N = (double)e->total, x = (double)done / N;
  return a * (1 - x) + b * (1 - x * x);
}

/* ---- text ---- */

/* Columns a string takes: ASCII 1, any other character 2 (see the opening comment). */
static int cols(const char *s) {
  int n = 0;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    n += *c < 0x80 ? 1 : (*c & 0xC0) == 0xC0 ? 2 : 0;
  return n;
}

/* Cut s to at most `max` columns, at a character boundary. */
static void cut_cols(char *s, int max) {
  int n = 0;
  for (unsigned char *c = (unsigned char *)s; *c; c++) {
    if ((*c & 0xC0) == 0x80) continue;
    const int w = *c < 0x80 ? 1 : 2;
    if (n + w > max) {
      *c = 0;
      return;
    }
    n += w;
  }
}

/* A job name made printable: control bytes become '?'. */
static void printable(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
  for (unsigned char *c = (unsigned char *)dst; *c; c++)
    if (*c < 0x20 || *c == 0x7f) *c = '?';
}

static void fmt_amount(char *b, size_t n, double v, const char *unit) {
  if (!strcmp(unit, "B")) {
    if (v < 1e3) snprintf(b, n, "%.0f B", v);
    else if (v < 1e6) snprintf(b, n, "%.1f KB", v / 1e3);
    else if (v < 1e9) snprintf(b, n, "%.1f MB", v / 1e6);
    else snprintf(b, n, "%.2f GB", v / 1e9);
  } else {
    if (v >= 1e6) snprintf(b, n, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(b, n, "%.1fK", v / 1e3);
    else snprintf(b, n, "%.0f", v);
  }
}

/* "120.3K/203.7K tok", "120.3K tok", "82.1 KB/164.5 KB", "82.1 KB". */
static void fmt_count(char *b, size_t n, int64_t done, int64_t total, const char *unit) {
  char d[32], t[32];
  fmt_amount(d, sizeof d, (double)done, unit);
  const int bytes = !strcmp(unit, "B");
  if (total > 0) {
    fmt_amount(t, sizeof t, (double)total, unit);
    snprintf(b, n, "%s/%s%s%s", d, t, bytes ? "" : " ", bytes ? "" : unit);
  } else {
    snprintf(b, n, "%s%s%s", d, bytes ? "" : " ", bytes ? "" : unit);
  }
}

static void fmt_rate(char *b, size_t n, double r, const char *unit) {
  char a[32];
  fmt_amount(a, sizeof a, r, unit);
  snprintf(b, n, "%s%s%s/s", a, strcmp(unit, "B") ? " " : "", strcmp(unit, "B") ? unit : "");
}

/* 8.2s, 42s, 3m20s, 1h02m. */
static void fmt_dur(char *b, size_t n, double s) {
  if (s < 0) s = 0;
  if (s < 9.95) snprintf(b, n, "%.1fs", s);
  else if (s < 59.5) snprintf(b, n, "%.0fs", s);
  else if (s < 3599.5) {
    const long t = lround(s);
    snprintf(b, n, "%ldm%02lds", t / 60, t % 60);
  } else {
    const long m = lround(s / 60);
    snprintf(b, n, "%ldh%02ldm", m / 60, m % 60);
  }
}

/* ISO 8601 UTC: "2026-12-05T16:39:40Z", or with milliseconds "2026-12-05T16:39:40.123Z". */
static void fmt_now(char *b, size_t n, int millis) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  char s[32];
  strftime(s, sizeof s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (millis) snprintf(b, n, "%.19s.%03dZ", s, (int)(ts.tv_nsec / 1000000) % 1000);
  else snprintf(b, n, "%.19sZ", s);
}

/* The terminal's width: TIOCGWINSZ on the output, else $COLUMNS, else 80. */
static int term_width(const lh_progress *p) {
  struct winsize ws;
  if (ioctl(fileno(p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char *c = getenv("COLUMNS");
  const int v = c ? atoi(c) : 0;
  return v > 0 ? v : 80;
}

/* ---- what is shown ---- */

static double phase_rate(const lh_progress *p, double now) {
  const double el = now - p->t0;
  const int64_t base = p->prefill ? p->eta.from : 0;
  return el > 0 && p->done > base ? (double)(p->done - base) / el : 0;
}

static double phase_eta(const lh_progress *p, double now) {
  if (!p->active || p->total <= 0 || p->done >= p->total) return -1;
  if (p->prefill) return lh_eta_remaining(&p->eta, p->done);
  const double r = phase_rate(p, now);
  return r > 0 ? (double)(p->total - p->done) / r : -1;
}

static double batch_eta(const lh_progress *p, double now) {
  const int64_t fin = p->b_done + p->b_failed, left = p->b_total - fin;
  if (left <= 0) return 0;
  const double cur = p->active && p->prefill ? phase_eta(p, now) : -1;
  if (fin > 0) {
    const double per = (p->b_changed - p->b_t0) / (double)fin;
    const double e = per * (double)left - (now - p->b_changed);
    return e > cur ? e : cur > 0 ? cur : 0;
  }
  if (cur < 0 || !p->job_live) return -1;
  const int r = p->requests > 0 ? p->requests : 1;
  const double per = (now - p->job_t0 + cur) / r;
  return cur + per * (double)(left > r ? left - r : 0);
}

static void label_of(const lh_progress *p, char *b, size_t n, int max_cols) {
  char more[24] = "";
  if (p->requests > 1) snprintf(more, sizeof more, " +%d", p->requests - 1);
  snprintf(b, n, "%s%s", p->job, more);
  if (cols(b) <= max_cols) return;
  int keep = max_cols - cols(more) - 1;
  if (keep < 1) keep = 1;
  char name[128];
  snprintf(name, sizeof name, "%s", p->job);
  cut_cols(name, keep);
  snprintf(b, n, "%s~%s", name, more);
}

/* The phase line in at most W columns (see progress.h for the order in which fields go). */
static void phase_line(const lh_progress *p, double now, int kind, const char *why, int W, char *out, size_t n) {
  const int known = p->total > 0, full = kind == LIVE || kind == STOPPED;
  char count_all[80], count_done[80], rate[48], tail[160] = "", pct[8] = "", d[32];
  fmt_count(count_all, sizeof count_all, p->done, full ? p->total : 0, p->unit);
  fmt_count(count_done, sizeof count_done, p->done, 0, p->unit);
  fmt_rate(rate, sizeof rate, phase_rate(p, now), p->unit);
  if (known && full) {
    const double f = p->done >= p->total ? 1 : (double)p->done / (double)p->total;
    snprintf(pct, sizeof pct, "%3d%%", (int)(100 * f));
  }
  if (kind == LIVE) {
    const double eta = phase_eta(p, now);
    if (eta >= 0) fmt_dur(d, sizeof d, eta), snprintf(tail, sizeof tail, "ETA %s", d);
  } else {
    fmt_dur(d, sizeof d, now - p->t0);
    snprintf(tail, sizeof tail, "%s %s", kind == ENDED ? "in" : "after", d);
  }
  char reason[112] = "", phase[48];
  if (kind == STOPPED && why && *why) snprintf(reason, sizeof reason, "(%.100s)", why);
  snprintf(phase, sizeof phase, "%-7s%s", p->phase, kind == STOPPED ? " stopped" : "");
  int bar = known && full ? BAR_CELLS : 0, show_rate = 1, show_total = 1, label_max = 1 << 20, show_pct = 1;
  int label_cut = 0, show_reason = 1;
  for (;;) {
    char label[192], bars[BAR_CELLS + 3] = "";
    label_of(p, label, sizeof label, label_max);
    if (bar) {
      const double f = p->done >= p->total ? 1 : (double)p->done / (double)p->total;
      const int fill = (int)(f * bar);
      bars[0] = '[';
      for (int i = 0; i < bar; i++) bars[1 + i] = i < fill ? '#' : '.';
      bars[bar + 1] = ']';
      bars[bar + 2] = 0;
    }
    snprintf(out, n, "%s %s", label, phase);
    size_t len = strlen(out);
#define ADD(s)                                                                                               \
  do {                                                                                                       \
    if (*(s) && len < n) len += (size_t)snprintf(out + len, n - len, " %s", (s));                           \
  } while (0)
    if (show_pct) ADD(pct);
    ADD(bars);
    ADD(show_total ? count_all : count_done);
    if (show_rate) ADD(rate);
    ADD(tail);
    if (show_reason) ADD(reason);
#undef ADD
    const int over = cols(out) - W;
    if (over <= 0) return;
    if (bar > BAR_MIN_CELLS) bar = bar - over > BAR_MIN_CELLS ? bar - over : BAR_MIN_CELLS;
    else if (bar) bar = 0;
    else if (show_rate) show_rate = 0;
    else if (show_total && strcmp(count_all, count_done)) show_total = 0;
    else if (!label_cut && cols(label) > LABEL_MIN_COLS)
      label_cut = 1, label_max = cols(label) - over > LABEL_MIN_COLS ? cols(label) - over : LABEL_MIN_COLS;
    else if (show_reason && *reason) show_reason = 0;
    else if (show_pct && *pct) show_pct = 0;
    else {
      cut_cols(out, W);
      return;
    }
  }
}

/* "request 3 of 5", "requests 1-2 of 2", "2 of 2 requests finished". */
static void position(const lh_progress *p, char *b, size_t n) {
  const long long fin = (long long)(p->b_done + p->b_failed), tot = (long long)p->b_total;
  const int r = p->job_live && p->requests > 1 ? p->requests : 1;
  if (fin >= tot) snprintf(b, n, "%lld of %lld %s%s finished", fin, tot, p->noun, tot == 1 ? "" : "s");
  else if (r > 1) snprintf(b, n, "%ss %lld-%lld of %lld", p->noun, fin + 1, fin + r < tot ? fin + r : tot, tot);
  else snprintf(b, n, "%s %lld of %lld", p->noun, fin + 1, tot);
}

static void batch_line(const lh_progress *p, double now, int W, char *out, size_t n) {
  char pos[96], counts[80], eta[48] = "", el[48], d[32];
  position(p, pos, sizeof pos);
  snprintf(counts, sizeof counts, "%lld done, %lld failed", (long long)p->b_done, (long long)p->b_failed);
  const double e = batch_eta(p, now);
  if (e >= 0 && p->b_done + p->b_failed < p->b_total) fmt_dur(d, sizeof d, e), snprintf(eta, sizeof eta, "ETA %s", d);
  fmt_dur(d, sizeof d, now - p->b_t0);
  snprintf(el, sizeof el, "elapsed %s", d);
  for (int drop = 0;; drop++) { /* 1: ELAPSED, 2: and COUNTS, 3: and ETA */
    size_t len = (size_t)snprintf(out, n, "%s", pos);
    if (drop < 2 && len < n) len += (size_t)snprintf(out + len, n - len, ": %s", counts);
    if (drop < 3 && *eta && len < n) len += (size_t)snprintf(out + len, n - len, "  %s", eta);
    if (drop < 1 && len < n) snprintf(out + len, n - len, "  %s", el);
    if (cols(out) <= W) return;
    if (drop == 3) {
      cut_cols(out, W);
      return;
    }
  }
}

/* ---- the tty rendering ---- */

typedef struct frame {
  char buf[8192];
  size_t len;
} frame;

static void put(frame *f, const char *s) {
  const size_t k = strlen(s);
  if (f->len + k < sizeof f->buf) memcpy(f->buf + f->len, s, k + 1), f->len += k;
}

/* A message for good, broken at spaces (or inside a word longer than a line) into lines of at
 * most W columns, so that messages never wrap either. */
static void put_wrapped(frame *f, const char *msg, int W) {
  const char *s = msg;
  for (;;) {
    const char *nl = strchr(s, '\n');
    const size_t len = nl ? (size_t)(nl - s) : strlen(s);
    size_t i = 0;
    if (!len) put(f, "\n");
    while (i < len) {
      size_t end = i, last_space = 0;
      int c = 0;
      while (end < len) {
        const unsigned char ch = (unsigned char)s[end];
        const int w = ch < 0x80 ? 1 : (ch & 0xC0) == 0xC0 ? 2 : 0;
        if (c + w > W) break;
        c += w;
        if (ch == ' ') last_space = end;
        end++;
      }
      while (end < len && ((unsigned char)s[end] & 0xC0) == 0x80) end--; /* not inside a character */
      if (end < len && last_space > i) end = last_space;
      if (end == i) end = i + 1;
      char piece[LINE_MAX_COLS * 4 + 8];
      snprintf(piece, sizeof piece, "%.*s\n", (int)(end - i), s + i);
      put(f, piece);
      i = end;
      while (i < len && s[i] == ' ') i++;
    }
    if (!nl) return;
    s = nl + 1;
  }
}

static void tty_erase(lh_progress *p, frame *f) {
  if (!p->live) return;
  put(f, "\r");
  if (p->live > 1) {
    char up[16];
    snprintf(up, sizeof up, "\033[%dA", p->live - 1);
    put(f, up);
  }
  put(f, "\033[J");
  p->live = 0;
}

/* Erase the live area, print `above` (NULL: nothing) for good, draw the live area again. */
static void tty_frame(lh_progress *p, const char *above) {
  const double now = now_s(p);
  int W = term_width(p) - 1;
  if (W > LINE_MAX_COLS) W = LINE_MAX_COLS;
  if (W < 1) W = 1;
  frame f = {.len = 0};
  f.buf[0] = 0;
  tty_erase(p, &f);
  if (above) put_wrapped(&f, above, W);
  char line[LINE_MAX_COLS * 4 + 64];
  if (p->active) {
    phase_line(p, now, LIVE, NULL, W, line, sizeof line);
    put(&f, line);
    p->live++;
  }
  if (p->batch && p->b_total > 0) {
    batch_line(p, now, W, line, sizeof line);
    if (p->live) put(&f, "\n");
    put(&f, line);
    p->live++;
  }
  fwrite(f.buf, 1, f.len, p->out);
  fflush(p->out);
  p->last_draw = now;
}

/* ---- plain and json ---- */

static void plain_line(lh_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void plain_line(lh_progress *p, const char *fmt, ...) {
  char ts[40], msg[2048];
  fmt_now(ts, sizeof ts, 0);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(p->out, "%s longhaul: %s\n", ts, msg);
  fflush(p->out);
}

static cJSON *json_event(const char *event) {
  char ts[40];
  fmt_now(ts, sizeof ts, 1);
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "ts", ts);
  cJSON_AddStringToObject(o, "event", event);
  return o;
}

static void json_emit(lh_progress *p, cJSON *o) {
  char *s = cJSON_PrintUnformatted(o);
  if (s) fprintf(p->out, "%s\n", s);
  free(s);
  cJSON_Delete(o);
  fflush(p->out);
}

static void json_phase(lh_progress *p, const char *event, double now, int kind, const char *why) {
  cJSON *o = json_event(event);
  lh_json_add_text(o, "job", p->job);
  cJSON_AddNumberToObject(o, "requests", p->requests > 0 ? p->requests : 1);
  lh_json_add_text(o, "phase", p->phase);
  cJSON_AddNumberToObject(o, "done", (double)p->done);
  cJSON_AddNumberToObject(o, "total", (double)p->total);
  lh_json_add_text(o, "unit", p->unit);
  cJSON_AddNumberToObject(o, "rate", phase_rate(p, now));
  const double eta = kind == LIVE ? phase_eta(p, now) : -1;
  if (eta >= 0) cJSON_AddNumberToObject(o, "eta_s", eta);
  if (kind != LIVE) {
    cJSON_AddNumberToObject(o, "elapsed_s", now - p->t0);
    cJSON_AddBoolToObject(o, "stopped", kind == STOPPED);
    if (kind == STOPPED && why) lh_json_add_text(o, "why", why);
  }
  json_emit(p, o);
}

/* The plain phase line: "lighthouse +1 prefill 120.3K/203.7K tok (59%), 1050 tok/s, ETA 1m20s". */
static void plain_phase(lh_progress *p, double now, int kind, const char *why) {
  char label[192], count[80], rate[48], d[32], tail[160] = "", pct[16] = "";
  label_of(p, label, sizeof label, 1 << 20);
  fmt_count(count, sizeof count, p->done, kind == ENDED ? 0 : p->total, p->unit);
  fmt_rate(rate, sizeof rate, phase_rate(p, now), p->unit);
  if (p->total > 0 && kind != ENDED)
    snprintf(pct, sizeof pct, " (%d%%)", (int)(100 * (p->done >= p->total ? 1 : (double)p->done / (double)p->total)));
  if (kind == LIVE) {
    const double eta = phase_eta(p, now);
    if (eta >= 0) fmt_dur(d, sizeof d, eta), snprintf(tail, sizeof tail, ", ETA %s", d);
  } else {
    fmt_dur(d, sizeof d, now - p->t0);
    snprintf(tail, sizeof tail, ", %s %s%s%.100s%s", kind == ENDED ? "in" : "after", d, why ? " (" : "", why ? why : "",
             why ? ")" : "");
  }
  plain_line(p, "%s %s%s %s%s, %s%s", label, p->phase, kind == ENDED ? " done:" : kind == STOPPED ? " stopped:" : "",
             count, pct, rate, tail);
}

static void draw(lh_progress *p) {
  const double now = now_s(p);
  if (p->mode == LH_PROGRESS_TTY) tty_frame(p, NULL);
  else if (p->mode == LH_PROGRESS_PLAIN) plain_phase(p, now, LIVE, NULL);
  else if (p->mode == LH_PROGRESS_JSON) json_phase(p, "progress", now, LIVE, NULL);
  p->last_draw = now;
}

/* ---- the API ---- */

int lh_progress_mode_parse(const char *s) {
  static const char *const names[] = {"auto", "tty", "plain", "json", "none"};
  for (int i = 0; s && i < 5; i++)
    if (!strcmp(s, names[i])) return i;
  return -1;
}

lh_progress *lh_progress_open(lh_progress_mode mode, FILE *out, double interval_s) {
  lh_progress *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  if (mode == LH_PROGRESS_AUTO) mode = isatty(fileno(out)) ? LH_PROGRESS_TTY : LH_PROGRESS_PLAIN;
  p->mode = mode;
  p->out = out;
  p->interval = interval_s > 0 ? interval_s : 10;
  p->requests = 1;
  return p;
}

void lh_progress_set_clock(lh_progress *p, double (*clock)(void *ctx), void *ctx) {
  if (!p) return;
  p->clock = clock, p->clock_ctx = ctx;
}

void lh_progress_batch(lh_progress *p, const char *noun, int64_t done, int64_t failed, int64_t total) {
  if (!p || p->mode == LH_PROGRESS_NONE) return;
  const double now = now_s(p);
  if (!p->batch) p->batch = 1, p->b_t0 = p->b_changed = now;
  if (done + failed != p->b_done + p->b_failed) p->b_changed = now, p->job_live = 0;
  printable(p->noun, sizeof p->noun, noun && *noun ? noun : "request");
  p->b_done = done, p->b_failed = failed, p->b_total = total;
  if (p->mode == LH_PROGRESS_TTY) {
    tty_frame(p, NULL);
  } else if (p->mode == LH_PROGRESS_PLAIN) {
    char line[512];
    batch_line(p, now, (int)sizeof line, line, sizeof line);
    plain_line(p, "%s", line);
  } else if (p->mode == LH_PROGRESS_JSON) {
    cJSON *o = json_event("batch");
    lh_json_add_text(o, "noun", p->noun);
    cJSON_AddNumberToObject(o, "done", (double)done);
    cJSON_AddNumberToObject(o, "failed", (double)failed);
    cJSON_AddNumberToObject(o, "total", (double)total);
    const double e = batch_eta(p, now);
    if (e >= 0 && done + failed < total) cJSON_AddNumberToObject(o, "eta_s", e);
    cJSON_AddNumberToObject(o, "elapsed_s", now - p->b_t0);
    json_emit(p, o);
  }
}

void lh_progress_job(lh_progress *p, const char *job, int requests) {
  if (!p) return;
  if (p->active) lh_progress_end(p);
  printable(p->job, sizeof p->job, job);
  p->requests = requests > 1 ? requests : 1;
  p->job_live = 1;
  p->job_t0 = now_s(p);
  if (p->mode == LH_PROGRESS_JSON) {
    cJSON *o = json_event("job");
    lh_json_add_text(o, "job", p->job);
    cJSON_AddNumberToObject(o, "requests", p->requests);
    json_emit(p, o);
  } else if (p->requests > 1) {
    lh_progress_note(p, "%s +%d: %s and %d more request%s over the same documents (one prefill, decoded together)",
                     p->job, p->requests - 1, p->job, p->requests - 1, p->requests == 2 ? "" : "s");
  }
}

void lh_progress_begin(lh_progress *p, const char *job, const char *phase, int64_t total, const char *unit) {
  if (!p) return;
  if (p->active) lh_progress_end(p);
  if (job) {
    char name[sizeof p->job];
    printable(name, sizeof name, job);
    if (strcmp(name, p->job) || !p->job_live) {
      snprintf(p->job, sizeof p->job, "%s", name);
      p->requests = 1;
      p->job_live = 1;
      p->job_t0 = now_s(p);
    }
  }
  snprintf(p->phase, sizeof p->phase, "%s", phase);
  snprintf(p->unit, sizeof p->unit, "%s", unit);
  p->total = total > 0 ? total : 0;
  p->done = 0;
  p->t0 = p->last_draw = now_s(p);
  p->active = 1;
  p->prefill = 0;
  if (p->mode == LH_PROGRESS_JSON) json_phase(p, "begin", p->t0, LIVE, NULL);
  else if (p->mode == LH_PROGRESS_TTY) tty_frame(p, NULL);
}

void lh_progress_prefill(lh_progress *p, int64_t from) {
  if (!p || !p->active) return;
  p->prefill = 1;
  p->done = from;
  lh_eta_start(&p->eta, from, p->total);
}

void lh_progress_update(lh_progress *p, int64_t done) {
  if (!p || !p->active) return;
  p->done = done;
  const double now = now_s(p);
  if (p->prefill) lh_eta_add(&p->eta, done, now - p->t0);
  const double gap = p->mode == LH_PROGRESS_TTY ? 0.1 : p->mode == LH_PROGRESS_JSON ? 1.0 : p->interval;
  if (now - p->last_draw >= gap) draw(p);
}

static void finish(lh_progress *p, int kind, const char *why) {
  if (!p || !p->active) return;
  const double now = now_s(p);
  if (p->mode == LH_PROGRESS_TTY) {
    int W = term_width(p) - 1;
    if (W > LINE_MAX_COLS) W = LINE_MAX_COLS;
    if (W < 1) W = 1;
    char line[LINE_MAX_COLS * 4 + 64];
    phase_line(p, now, kind, why, W, line, sizeof line);
    p->active = 0;
    tty_frame(p, line);
  } else {
    if (p->mode == LH_PROGRESS_PLAIN) plain_phase(p, now, kind, why);
    else if (p->mode == LH_PROGRESS_JSON) json_phase(p, "end", now, kind, why);
    p->active = 0;
  }
}

void lh_progress_end(lh_progress *p) { finish(p, ENDED, NULL); }

void lh_progress_stop(lh_progress *p, const char *why) { finish(p, STOPPED, why); }

void lh_progress_note(lh_progress *p, const char *fmt, ...) {
  if (!p || p->mode == LH_PROGRESS_NONE) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->mode == LH_PROGRESS_JSON) {
    cJSON *o = json_event("note");
    lh_json_add_text(o, "message", msg);
    json_emit(p, o);
  } else if (p->mode == LH_PROGRESS_PLAIN) {
    plain_line(p, "%s", msg);
  } else {
    tty_frame(p, msg);
  }
}

void lh_progress_close(lh_progress *p) {
  if (!p) return;
  if (p->active) lh_progress_end(p);
  if (p->mode == LH_PROGRESS_TTY && p->live) { /* the batch line stays, as its final state */
    if (p->batch) tty_frame(p, NULL);
    fputc('\n', p->out);
    fflush(p->out);
  }
  free(p);
}
