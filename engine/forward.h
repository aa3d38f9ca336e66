/* forward.h — the layer loop (engine/forward.c); private to engine/. */
#ifndef LH_ENGINE_FORWARD_H
#define LH_ENGINE_FORWARD_H

#include "engine/internal.h"

/* Run the batch's rows through every layer of m, updating each segment's lightning states and
 * writing its new K/V rows (the pages for [pos, pos+nrows) must exist and be private to the
 * segment's sequence). tokens[b->n] are the rows' token ids, already validated. Segments must be
 * in row order and contiguous (seg[i].row0 == sum of the earlier nrows). Batches larger than
 * m->max_rows are cut into pieces that each run all layers, splitting a segment if needed.
 *
 * Logits: when all_rows is set, logits receives [b->n x vocab] (every row, in order); otherwise
 * logits receives [nrows x vocab] for rows[0..nrows), which must be ascending batch rows.
 * On failure the states touched may be half-updated: the caller frees them. */
lh_status lh_forward(lh_model *m, const lh_batch *b, const int32_t *tokens, int all_rows, const int64_t *rows,
                     int64_t nrows, float *logits, lh_error *err);

#endif
