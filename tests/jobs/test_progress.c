/* test_progress.c — jobs/progress.c: the prefill ETA and what each rendering shows.
 *
 * The ETA is fitted to time = a * tokens + b * (sum of positions), so a softmax layer's growing
 * cost per token does not make it optimistic, and tokens restored from a checkpoint do not count
 * as work done in this run. The samples are synthetic (known a and b), so the expected remaining
 * time is exact arithmetic, not our own output.
 *
 * The tty rendering is written to a real pseudo-terminal (openpty) of 20 to 200 columns and read
 * back through a small terminal model (term below: carriage return, newline, cursor up, clear to
 * the end of the line or screen, and the auto-wrap a real terminal does at its last column). It
 * must never wrap; the fields of a line must come in the order progress.h documents and give way
 * in the order it documents as the terminal narrows; a finished phase leaves exactly one line.
 * The plain and json renderings must stamp every line with the UTC time (checked under a time
 * zone five hours off UTC, so a local time would fail). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jobs/progress.h"
#include "tests/test.h"

/* Elapsed seconds to go from token `from` to `done` at a s per token plus b s per token per
 * position (positions in tokens): the integral of a + b * p over [from, done). */
static double cost(double a, double b, double from, double done) {
  return a * (done - from) + b * (done * done - from * from) / 2;
}

/* Feed samples every `step` tokens from `from` to `upto`, with relative noise `noise`, and
 * return the fitted remaining time at `upto` over the true one. */
static double ratio(double a, double b, int64_t from, int64_t upto, int64_t total, int64_t step, double noise,
                    unsigned seed) {
  lh_eta e;
  lh_eta_start(&e, from, total);
  srand(seed);
  for (int64_t d = from + step; d <= upto; d += step) {
    double t = cost(a, b, (double)from, (double)d);
    t *= 1 + noise * (2.0 * rand() / RAND_MAX - 1);
    lh_eta_add(&e, d, t);
  }
  return lh_eta_remaining(&e, upto) / cost(a, b, (double)upto, (double)total);
}

static void eta_tests(void) {
  const int64_t N = 204800;
  lh_eta e;
  lh_eta_start(&e, 0, N);
  CHECK(lh_eta_remaining(&e, 0) < 0); /* nothing to fit yet */
  /* the 200K-token demo on 2 cores: mostly attention; half-way the constant-rate ETA says a
   * third of the true remaining time */
  const double a = 2e-4, b = 3e-8;
  double r = ratio(a, b, 0, N / 2, N, 4096, 0, 1);
  CHECK_MSG(fabs(r - 1) < 1e-6, "quadratic cost, no noise: fitted/true remaining %.6f", r);
  const double naive = (cost(a, b, 0, N / 2) / (N / 2) * (N / 2)) / cost(a, b, N / 2, N);
  CHECK_MSG(naive < 0.6, "the constant-rate ETA would be %.2f of the truth", naive);
  r = ratio(a, b, 0, N / 4, N, 2048, 0.03, 2);
  CHECK_MSG(fabs(r - 1) < 0.1, "3%% noise at a quarter: %.3f", r);
  /* linear cost (a lightning-only model): the fit finds b = 0 */
  r = ratio(1e-3, 0, 0, N / 3, N, 2048, 0, 3);
  CHECK_MSG(fabs(r - 1) < 1e-6, "linear cost: %.6f", r);
  r = ratio(1e-3, 0, 0, N / 3, N, 2048, 0.05, 4);
  CHECK_MSG(fabs(r - 1) < 0.1, "linear cost, 5%% noise: %.3f", r);
  /* resumed at 768K of 1M: the restored tokens are not this run's work */
  const int64_t M = 1048576;
  r = ratio(1e-6, 5e-11, 786432, 851968, M, 65536 / 8, 0, 5);
  CHECK_MSG(fabs(r - 1) < 1e-6, "resumed at 768K: %.6f", r);
  /* one sample: a one-term fit (here exact, the cost being linear) */
  lh_eta_start(&e, 1000, 3000);
  lh_eta_add(&e, 2000, 10.0);
  CHECK_MSG(fabs(lh_eta_remaining(&e, 2000) - 10.0) < 1e-9, "one sample: %.3f", lh_eta_remaining(&e, 2000));
  CHECK(lh_eta_remaining(&e, 3000) == 0);
  /* samples at or before the start add nothing */
  lh_eta_start(&e, 1000, 3000);
  lh_eta_add(&e, 1000, 5.0);
  CHECK(lh_eta_remaining(&e, 1000) < 0);
}

static int check_found(int ok, int W, const char *what) {
  CHECK_MSG(ok, "%d columns: no line with '%s'", W, what);
  return ok;
}
#define CHECK_FOUND(ok, W, what) check_found((ok), (W), (what))

/* ---- a terminal, as far as the display uses one ---- */

#define TROWS 256
#define TCOLS 512
typedef struct term {
  int W;
  int row, col, used; /* cursor; rows touched */
  char cell[TROWS][TCOLS + 1];
  int wraps;          /* characters a real terminal would have wrapped to the next line */
  int unknown;        /* escape sequences the display should not use */
} term;

static void term_init(term *t, int W) {
  memset(t, 0, sizeof *t);
  t->W = W;
  for (int r = 0; r < TROWS; r++) memset(t->cell[r], ' ', TCOLS);
}

static void term_clear_line(term *t, int r, int from) {
  if (r < TROWS && from < TCOLS) memset(t->cell[r] + from, ' ', (size_t)(TCOLS - from));
}

static void term_newline(term *t) {
  t->row++, t->col = 0;
  if (t->row >= TROWS) t->row = TROWS - 1; /* the scenarios stay far below this */
  if (t->row + 1 > t->used) t->used = t->row + 1;
}

static void term_feed(term *t, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const unsigned char c = (unsigned char)s[i];
    if (c == '\r') {
      t->col = 0;
    } else if (c == '\n') {
      term_newline(t);
    } else if (c == 0x1b) {
      size_t j = i + 1;
      int num = 0, has = 0;
      if (j < n && s[j] == '[') j++;
      while (j < n && isdigit((unsigned char)s[j])) num = num * 10 + (s[j] - '0'), j++, has = 1;
      const char cmd = j < n ? s[j] : 0;
      if (cmd == 'K') term_clear_line(t, t->row, t->col);
      else if (cmd == 'J') {
        term_clear_line(t, t->row, t->col);
        for (int r = t->row + 1; r < TROWS; r++) term_clear_line(t, r, 0);
      } else if (cmd == 'A') t->row = t->row - (has ? num : 1) < 0 ? 0 : t->row - (has ? num : 1);
      else t->unknown++;
      i = j;
    } else if ((c & 0xC0) == 0x80) {
      continue; /* a character's continuation byte: the lead byte took its cell */
    } else if (c >= 0x20) {
      if (t->col >= t->W) { /* the terminal wraps: the line scrolls on every redraw */
        t->wraps++;
        term_newline(t);
      }
      if (t->col < TCOLS) t->cell[t->row][t->col] = c < 0x80 ? (char)c : '?';
      t->col++;
      if (t->row + 1 > t->used) t->used = t->row + 1;
    }
  }
}

/* Row r without its trailing blanks. */
static const char *term_line(term *t, int r, char *buf) {
  memcpy(buf, t->cell[r], TCOLS);
  int e = TCOLS;
  while (e > 0 && buf[e - 1] == ' ') e--;
  buf[e] = 0;
  return buf;
}

static int term_count(term *t, const char *needle) {
  char b[TCOLS + 1];
  int n = 0;
  for (int r = 0; r < t->used; r++) n += strstr(term_line(t, r, b), needle) != NULL;
  return n;
}

/* The last row holding needle, copied to out; 0 when none. */
static int term_find_last(term *t, const char *needle, char *out) {
  char b[TCOLS + 1];
  for (int r = t->used - 1; r >= 0; r--)
    if (strstr(term_line(t, r, b), needle)) {
      strcpy(out, b);
      return 1;
    }
  return 0;
}

typedef struct pty {
  int master;
  FILE *out;
} pty;

static int pty_open(pty *w, int cols) {
  struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
  int m, s;
  if (openpty(&m, &s, NULL, NULL, &ws) != 0) return -1;
  fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
  w->master = m;
  w->out = fdopen(s, "w");
  return w->out ? 0 : -1;
}

static void pty_drain(pty *w, term *t) {
  char buf[8192];
  ssize_t k;
  while ((k = read(w->master, buf, sizeof buf)) > 0) term_feed(t, buf, (size_t)k);
}

static void pty_close(pty *w, term *t) {
  fflush(w->out);
  pty_drain(w, t);
  fclose(w->out);
  close(w->master);
}

/* ---- a run of three requests on a terminal of `cols` columns ---- */

static void scenario(int cols, term *t) {
  pty w;
  term_init(t, cols);
  if (pty_open(&w, cols)) LH_TEST_SKIP("openpty failed: no pseudo-terminals here");
  lh_progress *p = lh_progress_open(LH_PROGRESS_TTY, w.out, 10);
  lh_progress_batch(p, "request", 0, 0, 3);
  lh_progress_job(p, "lighthouse", 2);
  pty_drain(&w, t);
  lh_progress_begin(p, NULL, "ingest", 164488, "B");
  lh_progress_update(p, 82244);
  lh_progress_note(p, "half of the archive read");
  pty_drain(&w, t);
  lh_progress_update(p, 164488);
  lh_progress_end(p);
  lh_progress_begin(p, NULL, "prefill", 203754, "tok");
  lh_progress_prefill(p, 0);
  for (int64_t d = 20000; d <= 100000; d += 20000) lh_progress_update(p, d);
  usleep(120000);
  lh_progress_update(p, 110000); /* redrawn: 0.1 s since the last frame */
  pty_drain(&w, t);
  usleep(120000);
  lh_progress_update(p, 150000);
  pty_drain(&w, t);
  lh_progress_update(p, 203754);
  lh_progress_end(p);
  lh_progress_begin(p, NULL, "decode", 2 * 32, "tok");
  lh_progress_update(p, 11);
  lh_progress_end(p);
  lh_progress_batch(p, "request", 2, 0, 3);
  pty_drain(&w, t);
  lh_progress_job(p, "a-rather-long-custom-id-that-goes-on-and-on-0001", 1);
  lh_progress_begin(p, NULL, "prefill", 4000000, "tok");
  lh_progress_prefill(p, 1000000);
  lh_progress_update(p, 1500000);
  lh_progress_update(p, 2000000);
  lh_progress_note(p, "interrupt");
  lh_progress_stop(p, "interrupted");
  lh_progress_batch(p, "request", 2, 1, 3);
  lh_progress_close(p);
  pty_close(&w, t);
}

static void tty_tests(void) {
  static const int widths[] = {40, 60, 80, 120, 200};
  for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
    const int W = widths[k];
    static term t;
    char L[TCOLS + 1];
    scenario(W, &t);
    CHECK_MSG(t.wraps == 0, "%d columns: %d characters past the last column (the line wrapped)", W, t.wraps);
    CHECK_MSG(t.unknown == 0, "%d columns: %d unexpected escape sequences", W, t.unknown);
    /* one line per finished phase: the redraws left nothing behind */
    CHECK_MSG(term_count(&t, " ingest ") == 1, "%d columns: %d ingest lines", W, term_count(&t, " ingest "));
    CHECK_MSG(term_count(&t, " decode ") == 1, "%d columns: %d decode lines", W, term_count(&t, " decode "));
    CHECK_MSG(term_count(&t, " prefill ") == 2, "%d columns: %d prefill lines", W, term_count(&t, " prefill "));
    /* the group's label, explained */
    CHECK_MSG(term_find_last(&t, "lighthouse +1 ingest", L), "%d columns: no 'lighthouse +1 ingest' line", W);
    CHECK_MSG(term_find_last(&t, "lighthouse +1: lighthouse and 1 more", L), "%d columns: '+1' unexplained", W);
    /* sizes in bytes, not "0.0 MB"; a finished phase: count, rate, time, never an ETA */
    if (term_find_last(&t, " ingest ", L)) {
      CHECK_STR_CONTAINS(L, "164.5 KB");
      CHECK_MSG(strstr(L, " in ") && !strstr(L, "ETA"), "%d columns: ingest summary '%s'", W, L);
    }
    if (term_find_last(&t, "lighthouse +1 prefill", L)) CHECK_MSG(!strstr(L, "ETA"), "%d: '%s'", W, L);
    /* a phase stopped early says so and where, with no ETA */
    if (CHECK_FOUND(term_find_last(&t, " prefill stopped ", L), W, " prefill stopped ")) {
      CHECK_MSG(!strstr(L, "ETA"), "%d columns: '%s'", W, L);
      CHECK_MSG(strstr(L, "%") || W < 60, "%d columns: the stopped line lacks its percentage: '%s'", W, L);
      if (W >= 60) CHECK_STR_CONTAINS(L, " after ");
      if (W >= 80) CHECK_STR_CONTAINS(L, "(interrupted)");
    }
    /* the batch line's final state */
    CHECK_FOUND(term_find_last(&t, "3 of 3 requests finished", L), W, "3 of 3 requests finished");
    if (W >= 80) CHECK_STR_CONTAINS(L, "2 done, 1 failed");
  }
}

static double fixed_clock(void *ctx) { return *(const double *)ctx; }

/* The live phase and batch lines at `cols` columns, mid-prefill of a group of two. */
static void live_lines(int cols, char *phase, char *batch, term *t) {
  pty w;
  term_init(t, cols);
  if (pty_open(&w, cols)) LH_TEST_SKIP("openpty failed: no pseudo-terminals here");
  lh_progress *p = lh_progress_open(LH_PROGRESS_TTY, w.out, 10);
  /* A set clock, so every width sees the same rate and ETA: measured, their width changed from run
   * to run and with it which fields fit (CI once saw "46.33M tok/s" fit where "146.33M" had not). */
  double clock_s = 1000;
  lh_progress_set_clock(p, fixed_clock, &clock_s);
  lh_progress_batch(p, "request", 0, 0, 5);
  lh_progress_job(p, "lighthouse", 2);
  lh_progress_begin(p, NULL, "prefill", 203754, "tok");
  lh_progress_prefill(p, 0);
  clock_s += 2;
  lh_progress_update(p, 50000);
  clock_s += 2;
  lh_progress_update(p, 100000);
  lh_progress_note(p, "m"); /* draws the live area again */
  pty_drain(&w, t);
  char b[TCOLS + 1];
  int last = t->used - 1;
  while (last > 0 && !*term_line(t, last, b)) last--;
  strcpy(batch, term_line(t, last, b));
  strcpy(phase, last > 0 ? term_line(t, last - 1, b) : "");
  lh_progress_close(p);
  pty_close(&w, t);
}

/* Positions of the fields in a phase line, -1 when absent. */
typedef struct fields {
  int label_full, label_cut, phase, pct, bar, bar_cells, count, total, rate, eta;
} fields;

static int at(const char *L, const char *s) {
  const char *f = strstr(L, s);
  return f ? (int)(f - L) : -1;
}

static fields parse_fields(const char *L) {
  fields f;
  f.label_full = strncmp(L, "lighthouse +1 ", 14) ? -1 : 0;
  f.label_cut = at(L, "~ +1");
  f.phase = at(L, "prefill");
  f.pct = at(L, "%");
  f.bar = at(L, "[");
  f.bar_cells = 0;
  for (const char *c = f.bar >= 0 ? L + f.bar + 1 : ""; *c == '#' || *c == '.'; c++) f.bar_cells++;
  f.count = at(L, "100.0K");
  f.total = at(L, "/203.8K");
  f.rate = at(L, "tok/s");
  f.eta = at(L, "ETA ");
  return f;
}

static void field_tests(void) {
  static term t;
  char L[TCOLS + 1], B[TCOLS + 1];
  int prev_level = -1, prev_cells = 0, prev_blevel = -1;
  for (int W = 200; W >= 20; W--) {
    live_lines(W, L, B, &t);
    CHECK_MSG(t.wraps == 0, "%d columns: the live area wrapped", W);
    CHECK_MSG((int)strlen(L) <= W - 1 && (int)strlen(B) <= W - 1, "%d columns: lines of %zu and %zu", W, strlen(L),
              strlen(B));
    const fields f = parse_fields(L);
    /* the fields present come in the documented order */
    const int order[] = {f.label_full >= 0 ? 0 : f.label_cut, f.phase, f.pct, f.bar, f.count, f.rate, f.eta};
    for (int i = 1, last = -1; i < 7; i++)
      if (order[i] >= 0) {
        CHECK_MSG(order[i] > last, "%d columns: field %d out of order in '%s'", W, i, L);
        last = order[i];
      }
    /* they give way in the documented order: bar, rate, total, the label's end, percentage */
    const int gone[5] = {f.bar < 0, f.rate < 0, f.total < 0, f.label_full < 0, f.pct < 0};
    int level = 0;
    while (level < 5 && gone[level]) level++;
    for (int i = level; i < 5; i++) CHECK_MSG(!gone[i], "%d columns: field %d gone before field %d: '%s'", W, i, level, L);
    CHECK_MSG(level >= prev_level, "%d columns: a narrower line kept more (%d < %d): '%s'", W, level, prev_level, L);
    if (f.bar >= 0) {
      CHECK_MSG(f.bar_cells >= 10 && f.bar_cells <= 30, "%d columns: a bar of %d cells", W, f.bar_cells);
      /* the clock is set, so the rest of the line is the same at every width: the bar never grows */
      CHECK_MSG(prev_cells == 0 || f.bar_cells <= prev_cells, "%d columns: the bar grew (%d -> %d cells)", W, prev_cells,
                f.bar_cells);
      if (f.rate < 0) CHECK_MSG(0, "%d columns: the rate went before the bar", W);
      prev_cells = f.bar_cells;
    }
    prev_level = level;
    if (W == 200) {
      CHECK_MSG(level == 0 && f.bar_cells == 30 && f.eta > 0, "200 columns: not every field: '%s'", L);
      /* 100000 tokens in the 4 s the clock moved */
      CHECK_STR_CONTAINS(L, "25.0K tok/s");
    }
    if (W >= 40) CHECK_MSG(f.eta > 0 && f.phase > 0, "%d columns: no ETA or phase: '%s'", W, L);
    /* the batch line: position, counts, ETA, elapsed; elapsed goes first, then counts, then ETA */
    const int pos = at(B, "requests 1-2 of 5"), counts = at(B, "0 done, 0 failed"), eta = at(B, "ETA "),
              el = at(B, "elapsed ");
    if (W >= 40) CHECK_MSG(pos == 0, "%d columns: batch line '%s'", W, B);
    const int bgone[3] = {el < 0, counts < 0, eta < 0};
    int bl = 0;
    while (bl < 3 && bgone[bl]) bl++;
    for (int i = bl; i < 3; i++) CHECK_MSG(!bgone[i], "%d columns: batch field %d gone before %d: '%s'", W, i, bl, B);
    CHECK_MSG(bl >= prev_blevel, "%d columns: the batch line kept more when narrower", W);
    if (counts >= 0 && eta >= 0) CHECK(counts < eta);
    if (eta >= 0 && el >= 0) CHECK(eta < el);
    prev_blevel = bl;
    if (W == 200) CHECK_MSG(bl == 0, "200 columns: batch line '%s'", B);
  }
  CHECK_MSG(prev_level >= 4, "20 columns kept too much to fit: level %d", prev_level);
}

/* ---- TTY without a terminal: $COLUMNS, else 80 ---- */

static int longest_line(const char *path, int W, int *wraps) {
  static term t;
  term_init(&t, W);
  FILE *f = fopen(path, "rb");
  char buf[8192];
  size_t k;
  while (f && (k = fread(buf, 1, sizeof buf, f)) > 0) term_feed(&t, buf, k);
  if (f) fclose(f);
  *wraps = t.wraps;
  int m = 0;
  char b[TCOLS + 1];
  for (int r = 0; r < t.used; r++) m = (int)strlen(term_line(&t, r, b)) > m ? (int)strlen(b) : m;
  return m;
}

static void columns_tests(void) {
  const char *dir = lh_test_tmpdir();
  char path[600];
  for (int pass = 0; pass < 2; pass++) {
    snprintf(path, sizeof path, "%s/tty-%d.txt", dir, pass);
    if (pass == 0) setenv("COLUMNS", "50", 1);
    else unsetenv("COLUMNS");
    FILE *f = fopen(path, "wb");
    lh_progress *p = lh_progress_open(LH_PROGRESS_TTY, f, 10);
    lh_progress_batch(p, "request", 0, 0, 5);
    lh_progress_job(p, "a-long-enough-custom-id-to-fill-any-line-there-is", 1);
    lh_progress_begin(p, NULL, "prefill", 203754, "tok");
    lh_progress_prefill(p, 0);
    lh_progress_update(p, 50000);
    lh_progress_update(p, 100000);
    lh_progress_note(p, "m");
    lh_progress_close(p);
    fclose(f);
    int wraps;
    const int W = pass == 0 ? 50 : 80, m = longest_line(path, W, &wraps);
    CHECK_MSG(wraps == 0 && m <= W - 1 && m >= W - 12, "COLUMNS %s: longest line %d, %d wraps",
              pass == 0 ? "50" : "unset (80)", m, wraps);
  }
}

/* ---- plain and json: ISO 8601 UTC on every line ---- */

/* Seconds between the time at the start of s ("YYYY-MM-DDTHH:MM:SS[.mmm]Z") and now; 1e9 when s
 * does not start with such a time. */
static double stamp_age(const char *s, int millis) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  const char *e = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (!e || e - s != 19) return 1e9;
  if (millis) {
    if (e[0] != '.' || !isdigit((unsigned char)e[1]) || !isdigit((unsigned char)e[2]) || !isdigit((unsigned char)e[3]))
      return 1e9;
    e += 4;
  }
  if (*e != 'Z') return 1e9;
  return fabs(difftime(time(NULL), timegm(&tm)));
}

static void stamp_tests(void) {
  setenv("TZ", "America/New_York", 1); /* a local time would be 4 or 5 hours off */
  tzset();
  const char *dir = lh_test_tmpdir();
  for (int json = 0; json < 2; json++) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.txt", dir, json ? "json" : "plain");
    FILE *f = fopen(path, "wb");
    lh_progress *p = lh_progress_open(json ? LH_PROGRESS_JSON : LH_PROGRESS_PLAIN, f, 0.01);
    lh_progress_batch(p, "request", 0, 0, 2);
    lh_progress_job(p, "lighthouse", 2);
    lh_progress_begin(p, NULL, "prefill", 1000, "tok");
    lh_progress_prefill(p, 0);
    lh_progress_update(p, 100);
    usleep(20000);
    lh_progress_update(p, 500);
    usleep(1100000 * json); /* json lines come at most once a second */
    lh_progress_update(p, 600);
    lh_progress_stop(p, "interrupted");
    lh_progress_note(p, "a note");
    lh_progress_batch(p, "request", 1, 0, 2);
    lh_progress_close(p);
    fclose(f);
    f = fopen(path, "rb");
    char line[4096];
    int n = 0, progress = 0, stopped = 0;
    while (f && fgets(line, sizeof line, f)) {
      n++;
      if (!json) {
        CHECK_MSG(stamp_age(line, 0) < 5, "plain line without a UTC time: %s", line);
        CHECK_MSG(!strncmp(line + 20, " longhaul: ", 11), "plain line: %s", line);
        progress += strstr(line, "(60%)") || strstr(line, "(50%)");
        if (strstr(line, "stopped:")) {
          stopped++;
          CHECK_MSG(!strstr(line, "ETA") && strstr(line, "after") && strstr(line, "(interrupted)"), "%s", line);
        }
      } else {
        cJSON *o = cJSON_Parse(line);
        const char *ts = cJSON_GetStringValue(cJSON_GetObjectItem(o, "ts"));
        CHECK_MSG(ts && stamp_age(ts, 1) < 5, "json line without a UTC time: %s", line);
        const char *ev = cJSON_GetStringValue(cJSON_GetObjectItem(o, "event"));
        progress += ev && !strcmp(ev, "progress");
        if (ev && !strcmp(ev, "end")) {
          stopped += cJSON_IsTrue(cJSON_GetObjectItem(o, "stopped"));
          CHECK(!cJSON_GetObjectItem(o, "eta_s") && cJSON_GetObjectItem(o, "elapsed_s"));
        }
        if (ev && !strcmp(ev, "batch")) CHECK_EQ(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "total")), 2);
        cJSON_Delete(o);
      }
    }
    if (f) fclose(f);
    CHECK_MSG(n >= 6, "%s: %d lines", json ? "json" : "plain", n);
    CHECK_MSG(progress >= 1 && stopped == 1, "%s: %d progress lines, %d stopped", json ? "json" : "plain", progress,
              stopped);
  }
}

int main(void) {
  lh_test_begin("test_progress");
  eta_tests();
  tty_tests();
  field_tests();
  columns_tests();
  stamp_tests();
  return lh_test_end();
}
