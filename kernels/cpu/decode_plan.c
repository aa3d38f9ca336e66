/* decode_plan.c — the units of a decode batch (decode_plan.h).
 *
 * Split by split, each row joins a unit of that split whose first member ends the piece at the same
 * key and has the same page pointers over it, if that unit has room; else it opens a new one. The
 * split's units sit in a small open-addressing table keyed by (first page pointer, end), so a batch
 * of unrelated rows costs O(rows) a split, not O(rows^2); the members are then placed unit by unit
 * by a counting pass, in row order within each unit.
 */
#include "kernels/cpu/decode_plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/rand.h"

int lh_decode_units(const int64_t *keys, void *const *const *tables, int nseg, int page_tokens, int cap,
                    int32_t *units, int32_t *members, int *max_count) {
  if (cap < 1 || page_tokens < 1 || LH_DECODE_SPLIT % page_tokens || nseg < 0) return -1;
  int64_t nsplit = 0;
  for (int i = 0; i < nseg; i++)
    if (lh_decode_splits(keys[i]) > nsplit) nsplit = lh_decode_splits(keys[i]);
  size_t tsize = 4;
  while (tsize < 2 * (size_t)nseg) tsize *= 2;
  /* per split: the table (unit index or -1), each unit's first row, count and fill position, and
   * each row's unit */
  int *table = malloc(tsize * sizeof *table);
  int *first = malloc((size_t)(nseg + 1) * sizeof *first), *count = malloc((size_t)(nseg + 1) * sizeof *count);
  int *fill = malloc((size_t)(nseg + 1) * sizeof *fill), *slot = malloc((size_t)(nseg + 1) * sizeof *slot);
  int nunits = -1;
  if (!table || !first || !count || !fill || !slot) goto out;
  nunits = 0;
  int nmem = 0;
  *max_count = 0;
  for (int64_t sp = 0; sp < nsplit; sp++) {
    const int64_t k0 = sp * LH_DECODE_SPLIT, p0 = k0 / page_tokens;
    memset(table, 0xff, tsize * sizeof *table);
    int nu = 0;
    for (int i = 0; i < nseg; i++) {
      slot[i] = -1;
      if (k0 >= keys[i]) continue;
      const int64_t k1 = keys[i] < k0 + LH_DECODE_SPLIT ? keys[i] : k0 + LH_DECODE_SPLIT;
      const int64_t np = (k1 + page_tokens - 1) / page_tokens - p0;
      size_t h = lh_mix64((uint64_t)(uintptr_t)tables[i][p0] ^ lh_mix64((uint64_t)k1)) & (tsize - 1);
      for (; table[h] >= 0; h = (h + 1) & (tsize - 1)) {
        const int u = table[h], j = first[u];
        const int64_t j1 = keys[j] < k0 + LH_DECODE_SPLIT ? keys[j] : k0 + LH_DECODE_SPLIT;
        if (count[u] < cap && j1 == k1 && !memcmp(tables[j] + p0, tables[i] + p0, (size_t)np * sizeof(void *))) {
          slot[i] = u, count[u]++;
          break;
        }
      }
      if (slot[i] < 0) table[h] = slot[i] = nu, first[nu] = i, count[nu] = 1, nu++;
    }
    /* units in the order they opened, members in row order */
    for (int u = 0; u < nu; u++) {
      units[3 * (nunits + u)] = (int32_t)sp, units[3 * (nunits + u) + 1] = nmem, units[3 * (nunits + u) + 2] = count[u];
      fill[u] = nmem, nmem += count[u];
      if (count[u] > *max_count) *max_count = count[u];
    }
    for (int i = 0; i < nseg; i++)
      if (slot[i] >= 0) members[fill[slot[i]]++] = i;
    nunits += nu;
  }
out:
  free(table), free(first), free(count), free(fill), free(slot);
  return nunits;
}
