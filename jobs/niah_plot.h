/* niah_plot.h — the needle-in-a-haystack heatmap (context length x needle depth), as PNG and SVG.
 *
 * The figure people know from gkamradt's LLMTest_NeedleInAHaystack, RULER and the MiniMax-01
 * paper: one column per context length, one row per depth (0% = needle at the start, at the top),
 * each cell coloured from red (score 0) through yellow to green (score 1) with its score printed,
 * labelled axes, a colour bar, and a title with the model and the date. Drawn with cairo; built
 * without cairo, lh_niah_plot returns LH_EUNSUPPORTED and `longhaul niah plot` says so.
 */
#ifndef LH_JOBS_NIAH_PLOT_H
#define LH_JOBS_NIAH_PLOT_H

#include <stdint.h>

#include "util/err.h"

typedef struct lh_niah_cell {
  int64_t length;   /* context length in tokens */
  double depth;     /* needle depth in percent, 0..100 */
  double score;     /* mean score of the cell's trials, 0..1 */
  int trials;
} lh_niah_cell;

/* 1 when this build can draw (it has cairo); without it lh_niah_plot says so and how to draw elsewhere. */
int lh_niah_can_plot(void);

/* Draw cells (any order; lengths and depths are collected from them) to png_path and svg_path
 * (either may be NULL). Cells missing from the grid are drawn grey ("not run"). */
lh_status lh_niah_plot(const lh_niah_cell *cells, int n, const char *title, const char *png_path,
                       const char *svg_path, lh_error *err);

/* Colour of a score on the red-yellow-green scale (components 0..1). */
void lh_niah_color(double score, double rgb[3]);

/* Short length label: 1000 -> "1K", 1048576 -> "1M", 1536 -> "1.5K". out >= 16 bytes. */
void lh_niah_length_label(int64_t length, char *out, int outsz);

#endif
