/* decode_plan.h — which decode rows can read their keys together: the units of a batch of single
 * query rows over paged K/V (the CUDA backend's decode by units, kernels/cuda/kernels.h).
 *
 * The keys of a sequence with n keys are split in pieces [s LH_DECODE_SPLIT, min(n, (s + 1)
 * LH_DECODE_SPLIT)); each piece is reduced on its own and the pieces are merged in order, so a
 * row's result depends only on its own length. A unit is one split index whose pages (the page
 * pointers covering the piece) and end are the same for every member: forks of one prefix share
 * the units of their common pages, and their K/V is read once for all of them. Plain host C, so
 * that the grouping is tested without a GPU (tests/engine/test_decode_plan.c).
 */
#ifndef LH_KERNELS_CPU_DECODE_PLAN_H
#define LH_KERNELS_CPU_DECODE_PLAN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LH_DECODE_SPLIT 1024 /* keys per split; a multiple of every page size used */

/* Splits of a sequence with n keys (n >= 1). */
static inline int64_t lh_decode_splits(int64_t n) { return (n + LH_DECODE_SPLIT - 1) / LH_DECODE_SPLIT; }

/* The units of nseg rows: row i has keys[i] keys in the pages tables[i] (page_tokens keys a page;
 * tables[i] covers ceil(keys[i] / page_tokens) pages). At most cap members a unit (cap >= 1; 1
 * gives every (row, split) its own unit). Units come in split order, each as three int32 (split,
 * first index into members, member count), members in row order within a unit; units and members
 * need room for the sum of lh_decode_splits(keys[i]). *max_count: the largest member count.
 * Returns the number of units, or -1 when cap < 1 or page_tokens does not divide LH_DECODE_SPLIT. */
int lh_decode_units(const int64_t *keys, void *const *const *tables, int nseg, int page_tokens, int cap,
                    int32_t *units, int32_t *members, int *max_count);

#ifdef __cplusplus
}
#endif

#endif
