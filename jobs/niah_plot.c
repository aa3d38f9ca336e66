/* niah_plot.c — see niah_plot.h. One drawing routine renders onto any cairo surface, so the PNG and
 * the SVG are the same picture. Layout (pixels at scale 1): title band, the grid with depth labels
 * on the left and length labels below, the colour bar on the right. The scale colours are those of
 * gkamradt's figure (red #F0496E, yellow #EBB839, green #0CD79F), interpolated linearly. */
#define _POSIX_C_SOURCE 200809L
#include "jobs/niah_plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#ifdef LH_HAVE_CAIRO
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct grid {
  int64_t *len;
  int nl;
  double *dep;
  int nd;
  double *score; /* [nd][nl], NAN = missing */
} grid;

enum { CELL_W = 64, CELL_H = 34, LEFT = 90, TOP = 70, BOTTOM = 70, BAR_W = 22, RIGHT = 110 };

static void plot_size(const grid *g, int *w, int *h) {
  *w = LEFT + g->nl * CELL_W + RIGHT;
  *h = TOP + g->nd * CELL_H + BOTTOM;
}

static void text_at(cairo_t *cr, double x, double y, const char *s, double align_x, double align_y) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s, &e);
  cairo_move_to(cr, x - e.x_bearing - align_x * e.width, y - e.y_bearing - align_y * e.height);
  cairo_show_text(cr, s);
}

static void draw(cairo_t *cr, const grid *g, const char *title) {
  int w, h;
  plot_size(g, &w, &h);
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_BOLD);
  cairo_set_font_size(cr, 15);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text_at(cr, w / 2.0, 22, title, 0.5, 0.5);
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  for (int d = 0; d < g->nd; d++)
    for (int l = 0; l < g->nl; l++) {
      double x = LEFT + l * CELL_W, y = TOP + d * CELL_H, s = g->score[d * g->nl + l];
      double rgb[3] = {0.85, 0.85, 0.85};
      if (!isnan(s)) lh_niah_color(s, rgb);
      cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
      cairo_rectangle(cr, x, y, CELL_W, CELL_H);
      cairo_fill_preserve(cr);
      cairo_set_source_rgb(cr, 1, 1, 1);
      cairo_set_line_width(cr, 1);
      cairo_stroke(cr);
      char lab[16];
      if (isnan(s)) snprintf(lab, sizeof lab, "-");
      else snprintf(lab, sizeof lab, "%.0f", 100 * s);
      cairo_set_font_size(cr, 11);
      cairo_set_source_rgb(cr, 0.12, 0.12, 0.12);
      text_at(cr, x + CELL_W / 2.0, y + CELL_H / 2.0, lab, 0.5, 0.5);
    }
  cairo_set_font_size(cr, 11);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  for (int l = 0; l < g->nl; l++) {
    char lab[16];
    lh_niah_length_label(g->len[l], lab, sizeof lab);
    text_at(cr, LEFT + l * CELL_W + CELL_W / 2.0, TOP + g->nd * CELL_H + 8, lab, 0.5, 0);
  }
  for (int d = 0; d < g->nd; d++) {
    char lab[16];
    snprintf(lab, sizeof lab, "%g%%", g->dep[d]);
    text_at(cr, LEFT - 8, TOP + d * CELL_H + CELL_H / 2.0, lab, 1, 0.5);
  }
  cairo_set_font_size(cr, 13);
  text_at(cr, LEFT + g->nl * CELL_W / 2.0, TOP + g->nd * CELL_H + 36, "Context length (tokens)", 0.5, 0);
  cairo_save(cr);
  cairo_translate(cr, 22, TOP + g->nd * CELL_H / 2.0);
  cairo_rotate(cr, -1.5707963267948966); /* -pi/2 */
  text_at(cr, 0, 0, "Needle depth (% of context)", 0.5, 0.5);
  cairo_restore(cr);
  /* colour bar */
  double bx = LEFT + g->nl * CELL_W + 30, by = TOP, bh = g->nd * CELL_H;
  for (int i = 0; i < 100; i++) {
    double rgb[3];
    lh_niah_color(1.0 - i / 99.0, rgb);
    cairo_set_source_rgb(cr, rgb[0], rgb[1], rgb[2]);
    cairo_rectangle(cr, bx, by + bh * i / 100.0, BAR_W, bh / 100.0 + 0.5);
    cairo_fill(cr);
  }
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  cairo_set_font_size(cr, 11);
  for (int k = 0; k <= 4; k++) {
    char lab[8];
    snprintf(lab, sizeof lab, "%d", 100 - 25 * k);
    text_at(cr, bx + BAR_W + 6, by + bh * k / 4.0, lab, 0, 0.5);
  }
  text_at(cr, bx + BAR_W / 2.0, by - 10, "score %", 0.5, 1);
}
#endif

int lh_niah_can_plot(void) {
#ifdef LH_HAVE_CAIRO
  return 1;
#else
  return 0;
#endif
}

lh_status lh_niah_plot(const lh_niah_cell *cells, int n, const char *title, const char *png_path,
                       const char *svg_path, lh_error *err) {
#ifndef LH_HAVE_CAIRO
  (void)cells, (void)n, (void)title, (void)png_path, (void)svg_path;
  return lh_error_set(err, LH_EUNSUPPORTED,
                      "this longhaul was built without cairo, so it cannot draw the heatmap; copy results.jsonl to "
                      "a machine with libcairo2 and run `longhaul niah plot DIR` there");
#else
  if (n <= 0) return lh_error_set(err, LH_EINVAL, "no results to plot");
  grid g = {0};
  g.len = malloc((size_t)n * sizeof *g.len);
  g.dep = malloc((size_t)n * sizeof *g.dep);
  if (!g.len || !g.dep) {
    free(g.len);
    free(g.dep);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  for (int i = 0; i < n; i++) g.len[i] = cells[i].length, g.dep[i] = cells[i].depth;
  qsort(g.len, (size_t)n, sizeof *g.len, cmp_i64);
  qsort(g.dep, (size_t)n, sizeof *g.dep, cmp_dbl);
  for (int i = 0; i < n; i++)
    if (i == 0 || g.len[i] != g.len[g.nl - 1]) g.len[g.nl++] = g.len[i];
  for (int i = 0; i < n; i++)
    if (i == 0 || g.dep[i] != g.dep[g.nd - 1]) g.dep[g.nd++] = g.dep[i];
  g.score = malloc((size_t)g.nl * (size_t)g.nd * sizeof *g.score);
  if (!g.score) {
    free(g.len);
    free(g.dep);
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  }
  for (int i = 0; i < g.nl * g.nd; i++) g.score[i] = NAN;
  for (int i = 0; i < n; i++) {
    int l = 0, d = 0;
    while (g.len[l] != cells[i].length) l++;
    while (g.dep[d] != cells[i].depth) d++;
    g.score[d * g.nl + l] = cells[i].score;
  }
  int w, h;
  plot_size(&g, &w, &h);
  lh_status st = LH_OK;
  if (png_path) {
    /* drawn at 2x for a crisp figure */
    cairo_surface_t *s = cairo_image_surface_create(CAIRO_FORMAT_RGB24, 2 * w, 2 * h);
    cairo_t *cr = cairo_create(s);
    cairo_scale(cr, 2, 2);
    draw(cr, &g, title);
    cairo_destroy(cr);
    cairo_status_t cs = cairo_surface_write_to_png(s, png_path);
    cairo_surface_destroy(s);
    if (cs != CAIRO_STATUS_SUCCESS)
      st = lh_error_set(err, LH_EIO, "%s: cannot write PNG: %s", png_path, cairo_status_to_string(cs));
  }
  if (st == LH_OK && svg_path) {
    cairo_surface_t *s = cairo_svg_surface_create(svg_path, w, h);
    cairo_t *cr = cairo_create(s);
    draw(cr, &g, title);
    cairo_destroy(cr);
    cairo_surface_finish(s);
    cairo_status_t cs = cairo_surface_status(s);
    cairo_surface_destroy(s);
    if (cs != CAIRO_STATUS_SUCCESS)
      st = lh_error_set(err, LH_EIO, "%s: cannot write SVG: %s", svg_path, cairo_status_to_string(cs));
  }
  free(g.len);
  free(g.dep);
  free(g.score);
  return st;
#endif
}
