/* test_niah_plot.c — the heatmap PNG decodes, has the size the layout implies, and its cells carry
 * the colours of their scores; the SVG is written; labels read as people expect. */
#include "jobs/niah_plot.h"
#include "tests/test.h"
#include "util/fs.h"

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
  double rgb[3];
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
    for (int d = 0; d < 2; d++) cells[n++] = (lh_niah_cell){lens[l], deps[d], l == 2 && d == 1 ? 0.0 : 1.0, 3};
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
#endif
  return lh_test_end();
}
