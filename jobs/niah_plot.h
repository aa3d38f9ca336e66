/* niah_plot.h — the needle-in-a-haystack heatmap (context length x needle depth), as PNG and SVG,
 * and the figure that sets two sweeps side by side with their difference.
 *
 * The figure people know from gkamradt's LLMTest_NeedleInAHaystack, RULER and the MiniMax-01
 * paper: one column per context length, one row per depth (0% = needle at the start, at the top),
 * each cell coloured from red (score 0) through yellow to green (score 1) with its score printed,
 * labelled axes, a colour bar, and a title with the model and the date. Under the title: the
 * overall score, the share of answers holding every expected value, and the trials per cell; under
 * the axes: what the score measures (LH_NIAH_SCORE_METRIC). Where some cell's all-values share
 * differs from its score (the multi-value variants), every cell shows it as a second number; where
 * cells have different trial counts, every cell shows its count.
 *
 * Numbers are floored to the precision shown (lh_niah_score_label), so "100" means every trial
 * of the cell was right. The SVG holds its labels as text (<text> elements), so it can be searched
 * and read by tools; the PNG is drawn by the same layout code. Drawn with cairo; built without
 * cairo, the plot functions return LH_EUNSUPPORTED and `longhaul niah plot` says so.
 */
#ifndef LH_JOBS_NIAH_PLOT_H
#define LH_JOBS_NIAH_PLOT_H

#include <stdint.h>

#include "util/err.h"

/* What a cell's score is, as the figures and summary.json name it. */
#define LH_NIAH_SCORE_METRIC "RULER string_match_all (share of expected values found)"

typedef struct lh_niah_cell {
  int64_t length;   /* context length in tokens */
  double depth;     /* needle depth in percent, 0..100 */
  double score;     /* mean score of the cell's trials, 0..1 */
  int trials;
  double all_values; /* share of the cell's trials whose answer holds every expected value, 0..1 */
} lh_niah_cell;

/* One sweep of a side-by-side figure: its cells, a short name (its folder) and its title. */
typedef struct lh_niah_sweep_view {
  const lh_niah_cell *cells;
  int n;
  const char *name;
  const char *title;
} lh_niah_sweep_view;

/* 1 when this build can draw (it has cairo); without it lh_niah_plot says so and how to draw elsewhere. */
int lh_niah_can_plot(void);

/* Draw cells (any order; lengths and depths are collected from them) to png_path and svg_path
 * (either may be NULL). Cells missing from the grid are drawn grey ("not run"). */
lh_status lh_niah_plot(const lh_niah_cell *cells, int n, const char *title, const char *png_path,
                       const char *svg_path, lh_error *err);

/* Draw a and b side by side and the difference b - a per cell (cells present in both; a cell of
 * only one is marked "A only" / "B only"), on the union of their lengths and depths, each panel
 * with its overall score and its accuracy per length. LH_EINVAL when the two share no cell. */
lh_status lh_niah_plot_compare(const lh_niah_sweep_view *a, const lh_niah_sweep_view *b, const char *png_path,
                               const char *svg_path, lh_error *err);

/* Colour of a score on the red-yellow-green scale (components 0..1). */
void lh_niah_color(double score, double rgb[3]);
/* Colour of a difference in -1..1: red below 0, near-white at 0, blue above. */
void lh_niah_diff_color(double diff, double rgb[3]);

/* A score 0..1 as a percentage floored to `decimals` places: 0.996 -> "99" (never "100" unless
 * score is 1), 0.9996 with 1 decimal -> "99.9"; NaN -> "-". out >= 16 bytes. */
void lh_niah_score_label(double score, int decimals, char *out, int outsz);
/* A difference -1..1 in points, cut toward zero to `decimals` places: 0.25 -> "+25", -0.996 ->
 * "-99", 0 -> "0", and a difference too small to show -> "+<1" or "-<1" ("+<0.1" with one decimal);
 * NaN -> "-". out >= 16 bytes. */
void lh_niah_diff_label(double diff, int decimals, char *out, int outsz);

/* Short length label: 1000 -> "1K", 1048576 -> "1M", 1536 -> "1.5K". out >= 16 bytes. */
void lh_niah_length_label(int64_t length, char *out, int outsz);

#endif
