/* test_niah_plot.c — the heatmap PNG decodes, has the size the layout implies, and its cells carry
 * the colours of their scores; the SVG is written, with its labels as text: the overall score,
 * the all-values share, the trials per cell and the metric; labels read as people expect, and no
 * number is rounded up (a cell at 99.6% reads 99, never 100). The comparison marks the cells of
 * one sweep and prints the differences; two sweeps without a common cell are refused. */
#include "jobs/niah_plot.h"
#include "tests/test.h"
#include "util/fs.h"

#include <math.h>

#ifdef LH_HAVE_CAIRO
#include <cairo.h>
#endif

int main(void) {
  lh_test_begin("test_niah_plot");
  char lab[16];
  lh_niah_length_label(1000, lab, sizeof lab);
  CHECK(!strcmp(lab, "1K"));
  lh_niah_length_label(1048576, lab, sizeof lab);
  CHECK(!strcmp(lab, "1M"));
  lh_niah_length_label(4096, lab, sizeof lab);
  CHECK(!strcmp(lab, "4K"));
  lh_niah_length_label(1536, lab, sizeof lab);
  CHECK(!strcmp(lab, "1.5K"));
  /* scores are floored to the precision shown: only a cell where every trial was right reads 100 */
  lh_niah_score_label(0.996, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "99"), "0.996 -> %s", lab);
  lh_niah_score_label(1.0, 0, lab, sizeof lab);
  CHECK(!strcmp(lab, "100"));
  lh_niah_score_label(0.999999, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "99"), "0.999999 -> %s", lab);
  lh_niah_score_label(0.625, 0, lab, sizeof lab); /* RULER's 5/8 of the values */
  CHECK_MSG(!strcmp(lab, "62"), "0.625 -> %s", lab);
  lh_niah_score_label(0.29, 0, lab, sizeof lab); /* 0.29 * 100 is 28.999... in binary */
  CHECK_MSG(!strcmp(lab, "29"), "0.29 -> %s", lab);
  lh_niah_score_label(0.9996, 1, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "99.9"), "0.9996 -> %s", lab);
  lh_niah_score_label(0.5, 1, lab, sizeof lab);
  CHECK(!strcmp(lab, "50.0"));
  lh_niah_score_label(0, 0, lab, sizeof lab);
  CHECK(!strcmp(lab, "0"));
  lh_niah_score_label(NAN, 0, lab, sizeof lab);
  CHECK(!strcmp(lab, "-"));
  /* differences are cut toward zero, signed, and a difference below one point is not shown as 0 */
  lh_niah_diff_label(0.375, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "+37"), "0.375 -> %s", lab);
  lh_niah_diff_label(-0.996, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "-99"), "-0.996 -> %s", lab);
  lh_niah_diff_label(0.29, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "+29"), "0.29 -> %s", lab);
  lh_niah_diff_label(0, 0, lab, sizeof lab);
  CHECK(!strcmp(lab, "0"));
  lh_niah_diff_label(0.004, 0, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "+<1"), "0.004 -> %s", lab);
  lh_niah_diff_label(-0.0004, 1, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "-<0.1"), "-0.0004 -> %s", lab);
  lh_niah_diff_label(-1, 1, lab, sizeof lab);
  CHECK_MSG(!strcmp(lab, "-100.0"), "-1 -> %s", lab);
  double rgb[3];
  lh_niah_diff_color(-1, rgb);
  CHECK(rgb[0] > 0.9 && rgb[2] < 0.5); /* red */
  lh_niah_diff_color(1, rgb);
  CHECK(rgb[2] > 0.8 && rgb[0] < 0.3); /* blue */
  lh_niah_diff_color(0, rgb);
  CHECK(rgb[0] > 0.9 && rgb[1] > 0.9 && rgb[2] > 0.9); /* near white */
  lh_niah_color(0, rgb);
  CHECK(rgb[0] > 0.9 && rgb[1] < 0.4);
  lh_niah_color(1, rgb);
  CHECK(rgb[1] > 0.8 && rgb[0] < 0.1);
#ifndef LH_HAVE_CAIRO
  LH_TEST_SKIP("built without cairo");
#else
  lh_niah_cell cells[6];
  int n = 0;
  int64_t lens[3] = {1000, 4000, 16000};
  double deps[2] = {0, 100};
  for (int l = 0; l < 3; l++)
    for (int d = 0; d < 2; d++) cells[n++] = (lh_niah_cell){lens[l], deps[d], l == 2 && d == 1 ? 0.0 : 1.0, 3, l == 2 && d == 1 ? 0.0 : 1.0};
  char png[512], svg[512];
  lh_path_join(png, sizeof png, lh_test_tmpdir(), "heatmap.png");
  lh_path_join(svg, sizeof svg, lh_test_tmpdir(), "heatmap.svg");
  lh_error err;
  CHECK_EQ(lh_niah_plot(cells, n, "NIAH: test model, 2026-12-01", png, svg, &err), LH_OK);
  cairo_surface_t *s = cairo_image_surface_create_from_png(png);
  CHECK_EQ(cairo_surface_status(s), CAIRO_STATUS_SUCCESS);
  int w = cairo_image_surface_get_width(s), h = cairo_image_surface_get_height(s);
  /* layout: LEFT 90 + 3*64 + RIGHT 110 wide, TOP 70 + 2*34 + BOTTOM 70 high, at 2x */
  CHECK_EQ(w, 2 * (90 + 3 * 64 + 110));
  CHECK_EQ(h, 2 * (70 + 2 * 34 + 70));
  unsigned char *px = cairo_image_surface_get_data(s);
  int stride = cairo_image_surface_get_stride(s);
  /* sample near a cell corner, away from its label: green for (1K, 0%), red for (16K, 100%) */
  unsigned char *g = px + (size_t)(2 * (70 + 4)) * (size_t)stride + (size_t)(2 * (90 + 4)) * 4;
  unsigned char *r = px + (size_t)(2 * (70 + 34 + 4)) * (size_t)stride + (size_t)(2 * (90 + 2 * 64 + 4)) * 4;
  /* CAIRO_FORMAT_RGB24 is B, G, R, x in memory on little-endian machines */
  CHECK(g[1] > 180 && g[2] < 40);
  CHECK(r[2] > 200 && r[1] < 100);
  cairo_surface_destroy(s);
  lh_buf b = {0};
  CHECK_EQ(lh_file_read(svg, 1 << 24, &b, NULL), LH_OK);
  CHECK_STR_CONTAINS(b.data, "<svg");
  lh_buf_free(&b);
  CHECK_EQ(lh_niah_plot(cells, 0, "x", png, NULL, &err), LH_EINVAL);

  /* A multi-value sweep with mixed trial counts. By hand: overall score (0.996*250 + 0.625*2 +
   * 0.5*2 + 0*2) / 256 = 0.98144 -> 98.1; all values (249 + 0 + 1 + 0) / 256 = 0.97656 -> 97.6. */
  const lh_niah_cell mv[4] = {{1000, 0, 0.996, 250, 0.996}, {1000, 100, 0.625, 2, 0.0},
                              {4000, 0, 0.5, 2, 0.5}, {4000, 100, 0.0, 2, 0.0}};
  CHECK_EQ(lh_niah_plot(mv, 4, "NIAH multivalue: test & <model>", png, svg, &err), LH_OK);
  CHECK_EQ(lh_file_read(svg, 1 << 24, &b, NULL), LH_OK);
  CHECK_STR_CONTAINS(b.data, ">overall score 98.1% \xc2\xb7 all values 97.6% \xc2\xb7 2-250 trials per cell (n in each cell)</text>");
  CHECK_STR_CONTAINS(b.data, ">score = RULER string_match_all (share of expected values found); all = share of answers "
                             "holding every expected value</text>");
  CHECK_STR_CONTAINS(b.data, ">NIAH multivalue: test &amp; &lt;model&gt;</text>");
  CHECK_STR_CONTAINS(b.data, ">99</text>");    /* the 0.996 cell */
  CHECK_STR_CONTAINS(b.data, ">62</text>");    /* the 0.625 cell, not 63 */
  CHECK_STR_CONTAINS(b.data, ">all 0</text>"); /* its all-values share */
  CHECK_STR_CONTAINS(b.data, ">n=250</text>");
  /* "100" is the colour bar's top tick only: no cell reads 100 */
  int n100 = 0;
  for (const char *q = b.data; (q = strstr(q, ">100</text>")); q++) n100++;
  CHECK_EQ(n100, 1);
  lh_buf_free(&b);

  /* the comparison: B gains 25 points at (1K, 0%); (1K, 100%) is A's only, (4K, 0%) B's only */
  const lh_niah_cell ca[2] = {{1024, 0, 0.5, 2, 0.5}, {1024, 100, 1.0, 2, 1.0}};
  const lh_niah_cell cb[2] = {{1024, 0, 0.75, 4, 0.75}, {4096, 0, 0.0, 4, 0.0}};
  const lh_niah_sweep_view va = {ca, 2, "a", "NIAH single: model a"}, vb = {cb, 2, "b", "NIAH single: model b"};
  CHECK_EQ(lh_niah_plot_compare(&va, &vb, png, svg, &err), LH_OK);
  CHECK_EQ(lh_file_read(svg, 1 << 24, &b, NULL), LH_OK);
  CHECK_STR_CONTAINS(b.data, ">NIAH compare: a vs b</text>");
  CHECK_STR_CONTAINS(b.data, ">+25</text>");
  CHECK_STR_CONTAINS(b.data, ">A only</text>");
  CHECK_STR_CONTAINS(b.data, ">B only</text>");
  CHECK_STR_CONTAINS(b.data, ">B - A over the 1 cell both have: +25.0 points (A 50.0%, B 75.0%; each cell counted once)</text>");
  CHECK_STR_CONTAINS(b.data, ">overall score 75.0% \xc2\xb7 all values 75.0% \xc2\xb7 2 trials per cell</text>"); /* A: (0.5*2 + 1*2) / 4 */
  lh_buf_free(&b);
  const lh_niah_sweep_view vc = {cb + 1, 1, "c", "c"};
  CHECK_EQ(lh_niah_plot_compare(&va, &vc, png, svg, &err), LH_EINVAL);
#endif
  return lh_test_end();
}
