/* niah_plot.c — see niah_plot.h. One layout routine per figure draws through a small canvas (filled
 * rectangles and aligned text), which renders either onto a cairo surface (the PNG) or as SVG
 * elements (so the SVG's labels are <text>, searchable, with the same strings as the PNG). Text
 * is placed by its ink box as cairo measures it with the PNG's font; in the SVG the horizontal
 * alignment is left to text-anchor, so a viewer's own sans-serif font stays aligned.
 *
 * Layout of the heatmap (pixels at scale 1): title band (title, then the overall numbers), the grid
 * with depth labels on the left and length labels below, the axis titles, the metric under them,
 * the colour bar on the right. The figure widens past the grid when its text needs it, the grid
 * centred. The comparison puts three such panels (A, B, B - A) in a row under one title band.
 * The score colours are those of gkamradt's figure (red #F0496E, yellow #EBB839, green #0CD79F),
 * interpolated linearly; the difference goes from that red through near-white to blue #2F7FD1.
 * No number is rounded up: scores are floored and differences cut toward zero (niah_plot.h).
 */
#define _POSIX_C_SOURCE 200809L
#include "jobs/niah_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/fs.h"

#ifdef LH_HAVE_CAIRO
#include <cairo-svg.h>
#include <cairo.h>
#endif

void lh_niah_color(double s, double rgb[3]) {
  static const double stops[3][3] = {{0xF0 / 255.0, 0x49 / 255.0, 0x6E / 255.0},
                                     {0xEB / 255.0, 0xB8 / 255.0, 0x39 / 255.0},
                                     {0x0C / 255.0, 0xD7 / 255.0, 0x9F / 255.0}};
  if (!(s >= 0)) s = 0;
  if (s > 1) s = 1;
  int k = s < 0.5 ? 0 : 1;
  double t = s < 0.5 ? s / 0.5 : (s - 0.5) / 0.5;
  for (int i = 0; i < 3; i++) rgb[i] = stops[k][i] + t * (stops[k + 1][i] - stops[k][i]);
}

void lh_niah_diff_color(double d, double rgb[3]) {
  static const double neg[3] = {0xF0 / 255.0, 0x49 / 255.0, 0x6E / 255.0}, mid[3] = {0.96, 0.96, 0.96},
                      pos[3] = {0x2F / 255.0, 0x7F / 255.0, 0xD1 / 255.0};
  if (!(d == d)) d = 0;
  d = d < -1 ? -1 : d > 1 ? 1 : d;
  const double *end = d < 0 ? neg : pos, t = fabs(d);
  for (int i = 0; i < 3; i++) rgb[i] = mid[i] + t * (end[i] - mid[i]);
}

/* The epsilons below absorb binary rounding (0.29 * 100 is 28.999...); they are far below what one
 * trial in a cell of millions moves a score, so a floored "100" still needs every trial right. */
void lh_niah_score_label(double s, int decimals, char *out, int outsz) {
  if (isnan(s)) {
    snprintf(out, (size_t)outsz, "-");
    return;
  }
  decimals = decimals < 0 ? 0 : decimals > 3 ? 3 : decimals;
  const double scale = pow(10, decimals);
  s = s < 0 ? 0 : s > 1 ? 1 : s;
  snprintf(out, (size_t)outsz, "%.*f", decimals, floor(s * 100 * scale + 1e-9) / scale);
}

void lh_niah_diff_label(double d, int decimals, char *out, int outsz) {
  if (isnan(d)) {
    snprintf(out, (size_t)outsz, "-");
    return;
  }
  decimals = decimals < 0 ? 0 : decimals > 3 ? 3 : decimals;
  const double scale = pow(10, decimals);
  d = d < -1 ? -1 : d > 1 ? 1 : d;
  if (fabs(d) < 1e-12) {
    snprintf(out, (size_t)outsz, "0");
    return;
  }
  const double v = trunc(d * 100 * scale + (d > 0 ? 1e-9 : -1e-9)) / scale;
  if (v == 0) snprintf(out, (size_t)outsz, "%c<%.*f", d > 0 ? '+' : '-', decimals, 1 / scale);
  else snprintf(out, (size_t)outsz, "%+.*f", decimals, v);
}

void lh_niah_length_label(int64_t v, char *out, int outsz) {
  /* Powers of two read as binary units (131072 -> 128K), round numbers as decimal (1000 -> 1K). */
  const char *suf = "";
  double x = (double)v;
  if (v >= 1000000) {
    x = v % (1 << 18) == 0 ? (double)v / 1048576 : (double)v / 1e6;
    suf = "M";
  } else if (v >= 1000) {
    x = v % 256 == 0 ? (double)v / 1024 : (double)v / 1e3;
    suf = "K";
  }
  if (x == floor(x)) snprintf(out, (size_t)outsz, "%.0f%s", x, suf);
  else snprintf(out, (size_t)outsz, "%.1f%s", x, suf);
}

int lh_niah_can_plot(void) {
#ifdef LH_HAVE_CAIRO
  return 1;
#else
  return 0;
#endif
}

#ifdef LH_HAVE_CAIRO
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- the canvas: one drawing, two renderings ---- */

typedef struct canvas {
  cairo_t *cr;  /* drawing the PNG; NULL while writing the SVG */
  lh_buf *svg;  /* writing the SVG; NULL while drawing the PNG */
  cairo_t *m;   /* measures text for the layout, in the PNG's font */
} canvas;

static void set_font(cairo_t *cr, double size, int bold) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

static double text_width(const canvas *c, const char *s, double size, int bold) {
  cairo_text_extents_t e;
  set_font(c->m, size, bold);
  cairo_text_extents(c->m, s, &e);
  return e.x_advance;
}

static void svg_colour(lh_buf *b, const double rgb[3]) {
  lh_buf_printf(b, "#%02x%02x%02x", (int)lround(rgb[0] * 255), (int)lround(rgb[1] * 255), (int)lround(rgb[2] * 255));
}

static void svg_escape(lh_buf *b, const char *s) {
  for (; *s; s++) {
    if (*s == '&') lh_buf_append_str(b, "&amp;");
    else if (*s == '<') lh_buf_append_str(b, "&lt;");
    else if (*s == '>') lh_buf_append_str(b, "&gt;");
    else if (*s == '"') lh_buf_append_str(b, "&quot;");
    else lh_buf_append(b, s, 1);
  }
}

/* A filled rectangle, with a white 1-pixel outline when outline is set. */
static void rect(canvas *c, double x, double y, double w, double h, const double rgb[3], int outline) {
  if (c->cr) {
    cairo_set_source_rgb(c->cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(c->cr, x, y, w, h);
    if (!outline) {
      cairo_fill(c->cr);
      return;
    }
    cairo_fill_preserve(c->cr);
    cairo_set_source_rgb(c->cr, 1, 1, 1);
    cairo_set_line_width(c->cr, 1);
    cairo_stroke(c->cr);
    return;
  }
  lh_buf_printf(c->svg, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"", x, y, w, h);
  svg_colour(c->svg, rgb);
  lh_buf_printf(c->svg, "\"%s/>\n", outline ? " stroke=\"#ffffff\" stroke-width=\"1\"" : "");
}

/* s with its ink box aligned at (x, y): ax and ay are 0 (left, top), 0.5 (centre) or 1 (right,
 * bottom); vertical turns it a quarter left about (x, y). grey is its colour (0 black). */
static void text(canvas *c, double x, double y, const char *s, double size, int bold, double ax, double ay,
                 double grey, int vertical) {
  cairo_text_extents_t e;
  set_font(c->m, size, bold);
  cairo_text_extents(c->m, s, &e);
  const double dy = -e.y_bearing - ay * e.height;
  if (c->cr) {
    cairo_save(c->cr);
    cairo_translate(c->cr, x, y);
    if (vertical) cairo_rotate(c->cr, -1.5707963267948966); /* -pi/2 */
    set_font(c->cr, size, bold);
    cairo_set_source_rgb(c->cr, grey, grey, grey);
    cairo_move_to(c->cr, -e.x_bearing - ax * e.width, dy);
    cairo_show_text(c->cr, s);
    cairo_restore(c->cr);
    return;
  }
  const double rgb[3] = {grey, grey, grey};
  lh_buf_printf(c->svg, "<text transform=\"translate(%.2f %.2f)%s\" y=\"%.2f\" font-size=\"%.1f\"%s text-anchor=\"%s\" fill=\"",
                x, y, vertical ? " rotate(-90)" : "", dy, size, bold ? " font-weight=\"bold\"" : "",
                ax < 0.25 ? "start" : ax > 0.75 ? "end" : "middle");
  svg_colour(c->svg, rgb);
  lh_buf_append_str(c->svg, "\">");
  svg_escape(c->svg, s);
  lh_buf_append_str(c->svg, "</text>\n");
}

/* ---- the grid: lengths x depths of one or more sweeps, and a sweep's values on it ---- */

typedef struct axes {
  int64_t *len;
  int nl;
  double *dep;
  int nd;
} axes;

typedef struct vals {
  double *score, *all; /* [nd * nl], row = depth; score NAN = no cell */
  int *trials;
} vals;

/* What the title band says of one sweep. */
typedef struct stats {
  double score, all;   /* over all trials */
  int trials, tmin, tmax;
  int show_all;        /* some cell's all-values share differs from its score */
} stats;

static void axes_free(axes *x) {
  free(x->len);
  free(x->dep);
}

/* The sorted union of the lengths and depths of a[0..na) and b[0..nb). */
static lh_status axes_make(const lh_niah_cell *a, int na, const lh_niah_cell *b, int nb, axes *x, lh_error *err) {
  const int n = na + nb;
  x->nl = x->nd = 0;
  x->len = malloc((size_t)n * sizeof *x->len);
  x->dep = malloc((size_t)n * sizeof *x->dep);
  if (!x->len || !x->dep) {
    axes_free(x);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) {
    const lh_niah_cell *c = i < na ? &a[i] : &b[i - na];
    x->len[i] = c->length, x->dep[i] = c->depth;
  }
  qsort(x->len, (size_t)n, sizeof *x->len, cmp_i64);
  qsort(x->dep, (size_t)n, sizeof *x->dep, cmp_dbl);
  for (int i = 0; i < n; i++)
    if (i == 0 || x->len[i] != x->len[x->nl - 1]) x->len[x->nl++] = x->len[i];
  for (int i = 0; i < n; i++)
    if (i == 0 || fabs(x->dep[i] - x->dep[x->nd - 1]) > 1e-9) x->dep[x->nd++] = x->dep[i];
  return LH_OK;
}

static int axes_index(const axes *x, const lh_niah_cell *c) {
  int l = 0, d = 0;
  while (x->len[l] != c->length) l++;
  while (fabs(x->dep[d] - c->depth) > 1e-9) d++;
  return d * x->nl + l;
}

static void vals_free(vals *v) {
  free(v->score);
  free(v->all);
  free(v->trials);
}

static lh_status vals_make(const axes *x, const lh_niah_cell *c, int n, vals *v, lh_error *err) {
  const size_t k = (size_t)x->nl * (size_t)x->nd;
  v->score = malloc(k * sizeof *v->score);
  v->all = malloc(k * sizeof *v->all);
  v->trials = calloc(k, sizeof *v->trials);
  if (!v->score || !v->all || !v->trials) {
    vals_free(v);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  for (size_t i = 0; i < k; i++) v->score[i] = v->all[i] = NAN;
  for (int i = 0; i < n; i++) {
    const int j = axes_index(x, &c[i]);
    v->score[j] = c[i].score, v->all[j] = c[i].all_values, v->trials[j] = c[i].trials;
  }
  return LH_OK;
}

static stats cell_stats(const lh_niah_cell *c, int n) {
  stats s = {0};
  double sum = 0, all = 0;
  for (int i = 0; i < n; i++) {
    sum += c[i].score * c[i].trials, all += c[i].all_values * c[i].trials;
    s.trials += c[i].trials;
    if (i == 0 || c[i].trials < s.tmin) s.tmin = c[i].trials;
    if (c[i].trials > s.tmax) s.tmax = c[i].trials;
    if (fabs(c[i].all_values - c[i].score) > 1e-9) s.show_all = 1;
  }
  s.score = s.trials ? sum / s.trials : NAN;
  s.all = s.trials ? all / s.trials : NAN;
  return s;
}

/* "overall score 87.5% · all values 50.0% · 2 trials per cell" */
static void stats_line(const stats *s, char *out, size_t n) {
  char a[16], b[16], t[64];
  lh_niah_score_label(s->score, 1, a, sizeof a);
  lh_niah_score_label(s->all, 1, b, sizeof b);
  if (s->tmin == s->tmax) snprintf(t, sizeof t, "%d trial%s per cell", s->tmin, s->tmin == 1 ? "" : "s");
  else snprintf(t, sizeof t, "%d-%d trials per cell (n in each cell)", s->tmin, s->tmax);
  snprintf(out, n, "overall score %s%% \xc2\xb7 all values %s%% \xc2\xb7 %s", a, b, t);
}

/* A length's accuracy over the sweep's cells (trials weigh), NAN when it has none. */
static double length_accuracy(const axes *x, const vals *v, int l) {
  double sum = 0;
  int t = 0;
  for (int d = 0; d < x->nd; d++) {
    const int j = d * x->nl + l;
    if (!isnan(v->score[j])) sum += v->score[j] * v->trials[j], t += v->trials[j];
  }
  return t ? sum / t : NAN;
}

enum { CELL_W = 64, CELL_H = 34, LEFT = 90, TOP = 70, BOTTOM = 70, BAR_W = 22, RIGHT = 110 };
static const double GREY[3] = {0.85, 0.85, 0.85};

/* The cells of one sweep at (x0, y0) (the top left of the grid). */
static void draw_cells(canvas *c, double x0, double y0, const axes *x, const vals *v, const stats *s) {
  const int show_n = s->tmin != s->tmax;
  for (int d = 0; d < x->nd; d++)
    for (int l = 0; l < x->nl; l++) {
      const int j = d * x->nl + l;
      const double cx = x0 + l * CELL_W, cy = y0 + d * CELL_H, sc = v->score[j];
      double rgb[3] = {GREY[0], GREY[1], GREY[2]};
      if (!isnan(sc)) lh_niah_color(sc, rgb);
      rect(c, cx, cy, CELL_W, CELL_H, rgb, 1);
      char lab[32], all[16];
      lh_niah_score_label(sc, 0, lab, sizeof lab);
      if (isnan(sc) || !s->show_all) {
        text(c, cx + CELL_W / 2.0, cy + CELL_H / 2.0, lab, 11, 0, 0.5, 0.5, 0.12, 0);
      } else {
        text(c, cx + CELL_W / 2.0, cy + CELL_H / 2.0 - 6, lab, 11, 0, 0.5, 0.5, 0.12, 0);
        lh_niah_score_label(v->all[j], 0, all, sizeof all);
        snprintf(lab, sizeof lab, "all %s", all);
        text(c, cx + CELL_W / 2.0, cy + CELL_H / 2.0 + 8, lab, 9, 0, 0.5, 0.5, 0.25, 0);
      }
      if (show_n && !isnan(sc)) {
        snprintf(lab, sizeof lab, "n=%d", v->trials[j]);
        text(c, cx + CELL_W - 3, cy + 3, lab, 8, 0, 1, 0, 0.3, 0);
      }
    }
}

/* Depth labels left of the grid and length labels under it. */
static void draw_ticks(canvas *c, double x0, double y0, const axes *x) {
  for (int l = 0; l < x->nl; l++) {
    char lab[16];
    lh_niah_length_label(x->len[l], lab, sizeof lab);
    text(c, x0 + l * CELL_W + CELL_W / 2.0, y0 + x->nd * CELL_H + 8, lab, 11, 0, 0.5, 0, 0.1, 0);
  }
  for (int d = 0; d < x->nd; d++) {
    char lab[16];
    snprintf(lab, sizeof lab, "%g%%", x->dep[d]);
    text(c, x0 - 8, y0 + d * CELL_H + CELL_H / 2.0, lab, 11, 0, 1, 0.5, 0.1, 0);
  }
}

/* A colour bar of height bh at (bx, by), top = the high end; diff: the B - A scale. */
static void draw_bar(canvas *c, double bx, double by, double bh, int diff) {
  for (int i = 0; i < 100; i++) {
    double rgb[3];
    if (diff) lh_niah_diff_color(1.0 - 2.0 * i / 99.0, rgb);
    else lh_niah_color(1.0 - i / 99.0, rgb);
    rect(c, bx, by + bh * i / 100.0, BAR_W, bh / 100.0 + 0.5, rgb, 0);
  }
  const int ticks = bh < 100 ? 2 : 4;
  for (int k = 0; k <= ticks; k++) {
    char lab[8];
    const int v = diff ? 100 - 200 * k / ticks : 100 - 100 * k / ticks;
    snprintf(lab, sizeof lab, diff && v > 0 ? "+%d" : "%d", v);
    text(c, bx + BAR_W + 6, by + bh * k / ticks, lab, 11, 0, 0, 0.5, 0.1, 0);
  }
  text(c, bx + BAR_W / 2.0, by + bh + 12, diff ? "B - A, points" : "score %", 11, 0, 0.5, 0, 0.1, 0);
}

/* The depth axis' title for a grid of height gh whose depth labels end at x: turned along the grid
 * at (x0, mid-height) where it fits, else level above the depth labels. */
static void draw_depth_title(canvas *c, double x0, double x, double y0, double gh) {
  static const char full[] = "Needle depth (% of context)";
  if (text_width(c, full, 13, 0) <= gh + 20) text(c, x0, y0 + gh / 2.0, full, 13, 0, 0.5, 0.5, 0.1, 1);
  else text(c, x, y0 - 6, "Needle depth", 11, 0, 1, 1, 0.1, 0);
}

/* What the numbers are, under the figure; the second part where cells show their all-values share. */
static void metric_line(int show_all, char *out, size_t n) {
  snprintf(out, n, "score = %s%s", LH_NIAH_SCORE_METRIC,
           show_all ? "; all = share of answers holding every expected value" : "");
}

/* ---- the heatmap ---- */

typedef struct heatmap {
  const axes *x;
  const vals *v;
  stats s;
  const char *title;
  char line[160], metric[160];
  double w, h, ox; /* figure size; ox shifts the grid right when text widens the figure */
} heatmap;

static void heatmap_layout(const canvas *c, heatmap *f) {
  const double base = LEFT + f->x->nl * CELL_W + RIGHT;
  const double widths[3] = {text_width(c, f->title, 15, 1), text_width(c, f->line, 11, 0),
                            text_width(c, f->metric, 10, 0)};
  double need = 0;
  for (int k = 0; k < 3; k++) need = widths[k] + 40 > need ? widths[k] + 40 : need;
  f->w = base > need ? base : ceil(need);
  f->ox = (f->w - base) / 2;
  f->h = TOP + f->x->nd * CELL_H + BOTTOM;
}

static void heatmap_draw(canvas *c, const heatmap *f) {
  const axes *x = f->x;
  const double white[3] = {1, 1, 1}, gx = f->ox + LEFT, gh = x->nd * CELL_H;
  rect(c, 0, 0, f->w, f->h, white, 0);
  text(c, f->w / 2.0, 22, f->title, 15, 1, 0.5, 0.5, 0.1, 0);
  text(c, f->w / 2.0, 46, f->line, 11, 0, 0.5, 0.5, 0.2, 0);
  draw_cells(c, gx, TOP, x, f->v, &f->s);
  draw_ticks(c, gx, TOP, x);
  text(c, gx + x->nl * CELL_W / 2.0, TOP + gh + 30, "Context length (tokens)", 13, 0, 0.5, 0, 0.1, 0);
  text(c, f->w / 2.0, TOP + gh + 54, f->metric, 10, 0, 0.5, 0, 0.35, 0);
  draw_depth_title(c, f->ox + 22, gx - 8, TOP, gh);
  draw_bar(c, gx + x->nl * CELL_W + 30, TOP, gh, 0);
}

/* ---- the comparison: A, B, and B - A ---- */

enum { CTOP = 116, CBOTTOM = 92, GAP = 28, CRIGHT = 230 };

typedef struct compare {
  const axes *x;
  const vals *va, *vb;
  const lh_niah_sweep_view *a, *b;
  stats sa, sb;
  double *diff;        /* [nd * nl] b - a where both have the cell, else NAN */
  char *only;          /* [nd * nl] 'A', 'B' or 0 */
  int common;
  double mean_a, mean_b; /* over the common cells, each counted once */
  char title[512], line[256], metric[160], head[3][3][256];
  double px[3], pw[3], w, h; /* each panel's left edge and the width of its cells' column; figure size */
} compare;

static void compare_layout(const canvas *c, compare *f) {
  const axes *x = f->x;
  char sa[160], sb[160], d[32], ma[16], mb[16];
  stats_line(&f->sa, sa, sizeof sa);
  stats_line(&f->sb, sb, sizeof sb);
  lh_niah_diff_label(f->mean_b - f->mean_a, 1, d, sizeof d);
  lh_niah_score_label(f->mean_a, 1, ma, sizeof ma);
  lh_niah_score_label(f->mean_b, 1, mb, sizeof mb);
  snprintf(f->title, sizeof f->title, "NIAH compare: %s vs %s", f->a->name, f->b->name);
  metric_line(f->sa.show_all || f->sb.show_all, f->metric, sizeof f->metric);
  snprintf(f->line, sizeof f->line, "B - A over the %d cell%s both have: %s points (A %s%%, B %s%%; each cell counted once)",
           f->common, f->common == 1 ? "" : "s", d, ma, mb);
  snprintf(f->head[0][0], sizeof f->head[0][0], "A: %s", f->a->name);
  snprintf(f->head[0][1], sizeof f->head[0][1], "%s", f->a->title);
  snprintf(f->head[0][2], sizeof f->head[0][2], "%s", sa);
  snprintf(f->head[1][0], sizeof f->head[1][0], "B: %s", f->b->name);
  snprintf(f->head[1][1], sizeof f->head[1][1], "%s", f->b->title);
  snprintf(f->head[1][2], sizeof f->head[1][2], "%s", sb);
  snprintf(f->head[2][0], sizeof f->head[2][0], "B - A (points)");
  snprintf(f->head[2][1], sizeof f->head[2][1], "per cell both sweeps have");
  snprintf(f->head[2][2], sizeof f->head[2][2], "\"A only\" / \"B only\": a cell of one sweep");
  double px = 12; /* a margin for the depth axis' title */
  for (int p = 0; p < 3; p++) {
    double wp = x->nl * CELL_W;
    for (int k = 0; k < 3; k++) {
      const double tw = text_width(c, f->head[p][k], k ? 10 : 12, !k);
      if (tw > wp) wp = tw;
    }
    f->px[p] = px, f->pw[p] = wp;
    px += LEFT + wp + GAP;
  }
  f->w = ceil(px + CRIGHT);
  const double widths[3] = {text_width(c, f->title, 15, 1), text_width(c, f->line, 11, 0),
                            text_width(c, f->metric, 10, 0)};
  for (int k = 0; k < 3; k++)
    if (widths[k] + 40 > f->w) f->w = ceil(widths[k] + 40);
  f->h = CTOP + x->nd * CELL_H + CBOTTOM;
}

static void compare_draw(canvas *c, const compare *f) {
  const axes *x = f->x;
  const double white[3] = {1, 1, 1}, gh = x->nd * CELL_H;
  rect(c, 0, 0, f->w, f->h, white, 0);
  text(c, f->w / 2.0, 22, f->title, 15, 1, 0.5, 0.5, 0.1, 0);
  text(c, f->w / 2.0, 44, f->line, 11, 0, 0.5, 0.5, 0.2, 0);
  for (int p = 0; p < 3; p++) {
    const double gx = f->px[p] + LEFT;
    text(c, gx, CTOP - 50, f->head[p][0], 12, 1, 0, 0.5, 0.1, 0);
    text(c, gx, CTOP - 34, f->head[p][1], 10, 0, 0, 0.5, 0.3, 0);
    text(c, gx, CTOP - 19, f->head[p][2], 10, 0, 0, 0.5, 0.2, 0);
    if (p < 2) {
      draw_cells(c, gx, CTOP, x, p ? f->vb : f->va, p ? &f->sb : &f->sa);
    } else {
      for (int d = 0; d < x->nd; d++)
        for (int l = 0; l < x->nl; l++) {
          const int j = d * x->nl + l;
          const double cx = gx + l * CELL_W, cy = CTOP + d * CELL_H;
          double rgb[3] = {GREY[0], GREY[1], GREY[2]};
          char lab[16];
          if (!isnan(f->diff[j])) lh_niah_diff_color(f->diff[j], rgb);
          rect(c, cx, cy, CELL_W, CELL_H, rgb, 1);
          if (f->only[j]) snprintf(lab, sizeof lab, "%c only", f->only[j]);
          else lh_niah_diff_label(f->diff[j], 0, lab, sizeof lab);
          text(c, cx + CELL_W / 2.0, cy + CELL_H / 2.0, lab, f->only[j] ? 9 : 11, 0, 0.5, 0.5, 0.12, 0);
        }
    }
    draw_ticks(c, gx, CTOP, x);
    /* each length's accuracy over all depths (A, B), or its mean difference over the common cells */
    text(c, gx - 8, CTOP + gh + 31, p < 2 ? "all depths" : "mean", 10, 0, 1, 0.5, 0.3, 0);
    for (int l = 0; l < x->nl; l++) {
      char lab[16];
      if (p < 2) {
        lh_niah_score_label(length_accuracy(x, p ? f->vb : f->va, l), 1, lab, sizeof lab);
      } else {
        double s = 0;
        int k = 0;
        for (int d = 0; d < x->nd; d++)
          if (!isnan(f->diff[d * x->nl + l])) s += f->diff[d * x->nl + l], k++;
        lh_niah_diff_label(k ? s / k : NAN, 1, lab, sizeof lab);
      }
      text(c, gx + l * CELL_W + CELL_W / 2.0, CTOP + gh + 31, lab, 10, 0, 0.5, 0.5, 0.3, 0);
    }
    text(c, gx + x->nl * CELL_W / 2.0, CTOP + gh + 46, "Context length (tokens)", 12, 0, 0.5, 0, 0.1, 0);
  }
  text(c, f->w / 2.0, CTOP + gh + 70, f->metric, 10, 0, 0.5, 0, 0.35, 0);
  draw_depth_title(c, f->px[0] + 22, f->px[0] + LEFT - 8, CTOP, gh);
  const double bx = f->px[2] + LEFT + f->pw[2] + 30;
  draw_bar(c, bx, CTOP, gh, 0);
  draw_bar(c, bx + BAR_W + 100, CTOP, gh, 1);
}

/* ---- rendering ---- */

typedef void (*draw_fn)(canvas *c, const void *fig);
static void heatmap_draw_any(canvas *c, const void *f) { heatmap_draw(c, f); }
static void compare_draw_any(canvas *c, const void *f) { compare_draw(c, f); }

/* cairo's PNG writer into an lh_buf */
static cairo_status_t png_append(void *closure, const unsigned char *data, unsigned int n) {
  return lh_buf_append(closure, data, n) == LH_OK ? CAIRO_STATUS_SUCCESS : CAIRO_STATUS_NO_MEMORY;
}

static lh_status render(draw_fn draw, const void *fig, cairo_t *m, double w, double h, const char *title,
                        const char *png_path, const char *svg_path, lh_error *err) {
  if (png_path) {
    /* drawn at 2x for a crisp figure */
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, (int)(2 * w), (int)(2 * h));
    cairo_t *cr = cairo_create(s);
    cairo_scale(cr, 2, 2);
    canvas c = {.cr = cr, .m = m};
    draw(&c, fig);
    cairo_destroy(cr);
    /* encoded in memory and replaced whole, as every report is: a reader or a kill never meets
     * half a PNG */
    lh_buf pb = {0};
    cairo_status_t cs = cairo_surface_write_to_png_stream(s, png_append, &pb);
    cairo_surface_destroy(s);
    lh_status ws = cs == CAIRO_STATUS_SUCCESS
                       ? lh_file_write_atomic(png_path, pb.data, pb.len, err)
                       : lh_error_set(err, LH_EIO, "%s: cannot encode PNG: %s", png_path, cairo_status_to_string(cs));
    lh_buf_free(&pb);
    if (ws != LH_OK) return cs == CAIRO_STATUS_SUCCESS ? lh_error_prefix(err, ws, "cannot write PNG: ") : ws;
  }
  if (svg_path) {
    lh_buf b = {0};
    lh_buf_printf(&b,
                  "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n<title>",
                  w, h, w, h);
    svg_escape(&b, title);
    lh_buf_append_str(&b, "</title>\n<g font-family=\"DejaVu Sans, Verdana, sans-serif\">\n");
    canvas c = {.svg = &b, .m = m};
    draw(&c, fig);
    const lh_status st = lh_buf_append_str(&b, "</g>\n</svg>\n");
    lh_status ws = st == LH_OK ? lh_file_write_atomic(svg_path, b.data, b.len, err)
                               : lh_error_set(err, LH_ENOMEM, "out of memory");
    lh_buf_free(&b);
    if (ws != LH_OK) return lh_error_prefix(err, ws, "cannot write SVG: ");
  }
  return LH_OK;
}

static cairo_t *measure_open(void) {
  cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 1, 1);
  cairo_t *m = cairo_create(s);
  cairo_surface_destroy(s); /* the context holds its own reference */
  return m;
}
#endif

lh_status lh_niah_plot(const lh_niah_cell *cells, int n, const char *title, const char *png_path,
                       const char *svg_path, lh_error *err) {
#ifndef LH_HAVE_CAIRO
  (void)cells, (void)n, (void)title, (void)png_path, (void)svg_path;
  return lh_error_set(err, LH_EUNSUPPORTED,
                      "this longhaul was built without cairo, so it cannot draw the heatmap; copy results.jsonl to "
                      "a machine with libcairo2 and run `longhaul niah plot DIR` there");
#else
  if (n <= 0) return lh_error_set(err, LH_EINVAL, "no results to plot");
  axes x = {0};
  vals v = {0};
  lh_status st = axes_make(cells, n, NULL, 0, &x, err);
  if (st == LH_OK && (st = vals_make(&x, cells, n, &v, err)) == LH_OK) {
    heatmap f = {.x = &x, .v = &v, .s = cell_stats(cells, n), .title = title ? title : "NIAH"};
    stats_line(&f.s, f.line, sizeof f.line);
    metric_line(f.s.show_all, f.metric, sizeof f.metric);
    cairo_t *m = measure_open();
    heatmap_layout(&(canvas){.m = m}, &f);
    st = render(heatmap_draw_any, &f, m, f.w, f.h, f.title, png_path, svg_path, err);
    cairo_destroy(m);
    vals_free(&v);
  }
  axes_free(&x);
  return st;
#endif
}

lh_status lh_niah_plot_compare(const lh_niah_sweep_view *a, const lh_niah_sweep_view *b, const char *png_path,
                               const char *svg_path, lh_error *err) {
#ifndef LH_HAVE_CAIRO
  (void)a, (void)b, (void)png_path, (void)svg_path;
  return lh_error_set(err, LH_EUNSUPPORTED,
                      "this longhaul was built without cairo, so it cannot draw the comparison; compare.json and "
                      "compare.csv hold its numbers");
#else
  if (a->n <= 0 || b->n <= 0) return lh_error_set(err, LH_EINVAL, "no results to compare");
  axes x = {0};
  vals va = {0}, vb = {0};
  compare f = {.x = &x, .va = &va, .vb = &vb, .a = a, .b = b, .sa = cell_stats(a->cells, a->n),
               .sb = cell_stats(b->cells, b->n)};
  lh_status st = axes_make(a->cells, a->n, b->cells, b->n, &x, err);
  if (st == LH_OK) st = vals_make(&x, a->cells, a->n, &va, err);
  if (st == LH_OK) st = vals_make(&x, b->cells, b->n, &vb, err);
  const size_t k = (size_t)x.nl * (size_t)x.nd;
  if (st == LH_OK && (!(f.diff = malloc(k * sizeof *f.diff)) || !(f.only = calloc(k, 1))))
    st = lh_error_set(err, LH_ENOMEM, "out of memory");
  for (size_t j = 0; st == LH_OK && j < k; j++) {
    const int ia = !isnan(va.score[j]), ib = !isnan(vb.score[j]);
    f.diff[j] = ia && ib ? vb.score[j] - va.score[j] : NAN;
    f.only[j] = ia && !ib ? 'A' : ib && !ia ? 'B' : 0;
    if (ia && ib) f.common++, f.mean_a += va.score[j], f.mean_b += vb.score[j];
  }
  if (st == LH_OK && !f.common) st = lh_error_set(err, LH_EINVAL, "the two sweeps have no cell in common");
  if (st == LH_OK) {
    f.mean_a /= f.common, f.mean_b /= f.common;
    cairo_t *m = measure_open();
    compare_layout(&(canvas){.m = m}, &f);
    st = render(compare_draw_any, &f, m, f.w, f.h, f.title, png_path, svg_path, err);
    cairo_destroy(m);
  }
  free(f.diff);
  free(f.only);
  vals_free(&va);
  vals_free(&vb);
  axes_free(&x);
  return st;
#endif
}
