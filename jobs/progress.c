/* progress.c — see progress.h. Rates are averages over the phase so far (long phases are steady;
 * a sliding window would only add noise to the ETA). JSON strings are escaped by cJSON. */
#define _POSIX_C_SOURCE 200809L
#include "jobs/progress.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fs.h"

struct lh_progress {
  lh_progress_mode mode;
  FILE *out;
  double interval;
  char job[128], phase[32], unit[8];
  int64_t total, done;
  double t0, last_draw;
  int active, bar_drawn;
  int prefill; /* lh_progress_prefill: rate from eta.from, and the fitted ETA */
  lh_eta eta;
};

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

int lh_progress_mode_parse(const char *s) {
  static const char *const names[] = {"auto", "tty", "plain", "json", "none"};
  for (int i = 0; i < 5; i++)
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
  return p;
}

static void human(char *buf, size_t n, double v, const char *unit) {
  if (!strcmp(unit, "B")) snprintf(buf, n, "%.1f MB", v / 1e6);
  else if (v >= 1e6) snprintf(buf, n, "%.2fM %s", v / 1e6, unit);
  else if (v >= 1e4) snprintf(buf, n, "%.1fK %s", v / 1e3, unit);
  else snprintf(buf, n, "%.0f %s", v, unit);
}

static void emit_json(lh_progress *p, const char *event, double rate, double eta) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "event", event);
  cJSON_AddStringToObject(o, "job", p->job);
  cJSON_AddStringToObject(o, "phase", p->phase);
  cJSON_AddNumberToObject(o, "done", (double)p->done);
  cJSON_AddNumberToObject(o, "total", (double)p->total);
  cJSON_AddStringToObject(o, "unit", p->unit);
  cJSON_AddNumberToObject(o, "rate", rate);
  if (eta >= 0) cJSON_AddNumberToObject(o, "eta_s", eta);
  char *s = cJSON_PrintUnformatted(o);
  if (s) fprintf(p->out, "%s\n", s);
  free(s);
  cJSON_Delete(o);
}

static void draw(lh_progress *p, int final) {
  double now = lh_now(), el = now - p->t0;
  const int64_t base = p->prefill ? p->eta.from : 0;
  double rate = el > 0 && p->done > base ? (double)(p->done - base) / el : 0;
  double eta = p->total > 0 && rate > 0 && p->done < p->total ? (double)(p->total - p->done) / rate : -1;
  if (p->prefill && eta >= 0) eta = lh_eta_remaining(&p->eta, p->done);
  char d[32], t[32], r[32];
  human(d, sizeof d, (double)p->done, p->unit);
  human(t, sizeof t, (double)p->total, p->unit);
  human(r, sizeof r, rate, p->unit);
  switch (p->mode) {
  case LH_PROGRESS_TTY: {
    int width = 28, fill = p->total > 0 ? (int)((double)width * (double)p->done / (double)p->total) : 0;
    if (fill > width) fill = width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : (p->total > 0 ? '.' : ' ');
    bar[width] = 0;
    fprintf(p->out, "\r\033[K%-16.16s %-7s [%s] %s", p->job, p->phase, bar, d);
    if (p->total > 0) fprintf(p->out, " / %s", t);
    fprintf(p->out, "  %s/s", r);
    if (eta >= 0) fprintf(p->out, "  ETA %.0fs", eta);
    if (final) fprintf(p->out, "  %.1fs\n", el);
    p->bar_drawn = !final;
    break;
  }
  case LH_PROGRESS_PLAIN:
    fprintf(p->out, "longhaul: %s %s %s", p->job, p->phase, final ? "done:" : "");
    fprintf(p->out, " %s", d);
    if (p->total > 0 && !final) fprintf(p->out, " of %s (%.0f%%)", t, 100.0 * (double)p->done / (double)p->total);
    fprintf(p->out, ", %s/s", r);
    if (eta >= 0 && !final) fprintf(p->out, ", ETA %.0fs", eta);
    if (final) fprintf(p->out, " in %.1fs", el);
    fputc('\n', p->out);
    break;
  case LH_PROGRESS_JSON:
    emit_json(p, final ? "end" : "progress", rate, eta);
    break;
  default:
    break;
  }
  fflush(p->out);
  p->last_draw = now;
}

void lh_progress_begin(lh_progress *p, const char *job, const char *phase, int64_t total, const char *unit) {
  if (!p) return;
  if (p->active) lh_progress_end(p);
  snprintf(p->job, sizeof p->job, "%s", job);
  snprintf(p->phase, sizeof p->phase, "%s", phase);
  snprintf(p->unit, sizeof p->unit, "%s", unit);
  p->total = total;
  p->done = 0;
  p->t0 = p->last_draw = lh_now();
  p->active = 1;
  p->prefill = 0;
  if (p->mode == LH_PROGRESS_JSON) emit_json(p, "begin", 0, -1);
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
  if (p->prefill) lh_eta_add(&p->eta, done, lh_now() - p->t0);
  double gap = p->mode == LH_PROGRESS_TTY ? 0.1 : p->mode == LH_PROGRESS_JSON ? 1.0 : p->interval;
  if (lh_now() - p->last_draw >= gap) draw(p, 0);
}

void lh_progress_end(lh_progress *p) {
  if (!p || !p->active) return;
  draw(p, 1);
  p->active = 0;
}

void lh_progress_note(lh_progress *p, const char *fmt, ...) {
  if (!p || p->mode == LH_PROGRESS_NONE) return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->mode == LH_PROGRESS_JSON) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "note");
    cJSON_AddStringToObject(o, "message", msg);
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(p->out, "%s\n", s);
    free(s);
    cJSON_Delete(o);
  } else {
    if (p->bar_drawn) fprintf(p->out, "\r\033[K");
    fprintf(p->out, "%s\n", msg);
    if (p->bar_drawn) draw(p, 0);
  }
  fflush(p->out);
}

void lh_progress_close(lh_progress *p) {
  if (!p) return;
  if (p->active) lh_progress_end(p);
  free(p);
}
