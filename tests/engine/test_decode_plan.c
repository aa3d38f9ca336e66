/* test_decode_plan.c — the units of a decode batch (kernels/cpu/decode_plan.h): which single-row
 * decodes read a split of keys together. Forks of one prefix share every split their pages share
 * and nothing else; rows of different lengths share a split only where both end it at the same key;
 * a unit never exceeds its cap; every (row, split) lands in exactly one unit, in split order. The
 * GPU side (the kernel over these units, bit-equal to each row alone) is tests/gpu/gpu_parity.c.
 */
#include "tests/test.h"

#include <stdint.h>

#include "kernels/cpu/decode_plan.h"

#define PT 256 /* keys a page */
#define MAXR 40
#define MAXP 64

static char page_mem[(MAXR + 1) * MAXP]; /* distinct addresses to stand for pages */
static void *pages[MAXR][MAXP];
static void *const *tabs[MAXR];
static int32_t units[3 * MAXR * 16], members[MAXR * 16];

/* row r's pages: the shared prefix's pages up to page `shared`, then pages of its own */
static void make_rows(int n, int shared) {
  for (int r = 0; r < n; r++) {
    for (int p = 0; p < MAXP; p++) pages[r][p] = p < shared ? &page_mem[p] : &page_mem[MAXP + r * MAXP + p];
    tabs[r] = pages[r];
  }
}

/* the plan's invariants: every (row, split) once, split order, members of a unit agree on end and pages */
static void check_plan(const int64_t *keys, int n, int cap, int nu, int maxc) {
  int64_t want = 0;
  for (int i = 0; i < n; i++) want += lh_decode_splits(keys[i]);
  int64_t seen = 0, last_sp = -1;
  int got_max = 0, next_first = 0;
  static char hit[MAXR][16];
  memset(hit, 0, sizeof hit);
  for (int u = 0; u < nu; u++) {
    const int sp = units[3 * u], f = units[3 * u + 1], c = units[3 * u + 2];
    CHECK(sp >= last_sp);
    last_sp = sp;
    CHECK_EQ(f, next_first);
    next_first = f + c;
    CHECK(c >= 1 && c <= cap);
    got_max = c > got_max ? c : got_max;
    const int j = members[f];
    const int64_t k0 = (int64_t)sp * LH_DECODE_SPLIT;
    const int64_t end = keys[j] < k0 + LH_DECODE_SPLIT ? keys[j] : k0 + LH_DECODE_SPLIT;
    for (int m = 0; m < c; m++) {
      const int i = members[f + m];
      CHECK(i >= 0 && i < n && k0 < keys[i]);
      if (m) CHECK(members[f + m - 1] < i); /* row order within a unit */
      CHECK((keys[i] < k0 + LH_DECODE_SPLIT ? keys[i] : k0 + LH_DECODE_SPLIT) == end);
      for (int64_t p = k0 / PT; p < (end + PT - 1) / PT; p++) CHECK(tabs[i][p] == tabs[j][p]);
      CHECK(!hit[i][sp]);
      hit[i][sp] = 1;
      seen++;
    }
  }
  CHECK_EQ(seen, want);
  CHECK_EQ(maxc, got_max);
}

static int plan(const int64_t *keys, int n, int cap, int *maxc) {
  int nu = lh_decode_units(keys, tabs, n, PT, cap, units, members, maxc);
  CHECK(nu >= 0);
  if (nu >= 0) check_plan(keys, n, cap, nu, *maxc);
  return nu;
}

int main(void) {
  lh_test_begin("test_decode_plan");
  int64_t keys[MAXR];
  int maxc;

  /* 16 forks at one position over the same pages: one unit of 16 a split */
  make_rows(16, MAXP);
  for (int i = 0; i < 16; i++) keys[i] = 3001;
  CHECK_EQ(plan(keys, 16, 16, &maxc), 3);
  CHECK_EQ(maxc, 16);
  /* the cap splits them: 5 + 5 + 5 + 1 a split; cap 1, every row alone */
  CHECK_EQ(plan(keys, 16, 5, &maxc), 12);
  CHECK_EQ(maxc, 5);
  CHECK_EQ(plan(keys, 16, 1, &maxc), 48);
  CHECK_EQ(maxc, 1);

  /* forks of a prefix of 6 pages (1536 keys) with pages of their own after it: split 0 (pages 0-3)
   * is shared; split 1 (pages 4-7) is not, since pages 6 and 7 differ */
  make_rows(8, 6);
  for (int i = 0; i < 8; i++) keys[i] = 2048;
  CHECK_EQ(plan(keys, 8, 16, &maxc), 1 + 8);
  CHECK_EQ(units[2], 8);
  /* a prefix of 8 pages: both splits shared, then a third split of each fork's own tail */
  make_rows(8, 8);
  for (int i = 0; i < 8; i++) keys[i] = 2048 + 10 + i;
  CHECK_EQ(plan(keys, 8, 16, &maxc), 2 + 8);

  /* the same pages, different lengths: 3001, 1024, 2048 share split 0 (all end it at 1024), two of
   * them split 1 (both end at 2048); 1500 and 2000 do not share split 1 (ends differ) */
  make_rows(5, MAXP);
  int64_t k3[5] = {3001, 1024, 2048, 1500, 2000};
  CHECK_EQ(plan(k3, 5, 16, &maxc), 1 + 3 + 1);
  CHECK_EQ(units[2], 5);
  CHECK_EQ(maxc, 5);

  /* unrelated rows (no page in common): one unit a (row, split) */
  make_rows(MAXR, 0);
  for (int i = 0; i < MAXR; i++) keys[i] = 1 + 97 * i;
  int64_t want = 0;
  for (int i = 0; i < MAXR; i++) want += lh_decode_splits(keys[i]);
  CHECK_EQ(plan(keys, MAXR, 16, &maxc), want);
  CHECK_EQ(maxc, 1);

  /* a batch mixing two families of forks and a loner, rows interleaved */
  make_rows(MAXR, 0);
  for (int i = 0; i < 21; i++) {
    void **fam = pages[i % 2]; /* rows 0, 2, 4 ... follow row 0's pages; 1, 3, 5 ... row 1's */
    for (int p = 0; p < MAXP; p++) pages[i][p] = fam[p];
    keys[i] = i == 20 ? 1 : 4096;
  }
  CHECK_EQ(plan(keys, 21, 16, &maxc), 4 + 4 + 1); /* 10 rows in each family a split; row 20 alone */
  CHECK_EQ(maxc, 10);

  /* bad arguments */
  CHECK_EQ(lh_decode_units(keys, tabs, 1, PT, 0, units, members, &maxc), -1);
  CHECK_EQ(lh_decode_units(keys, tabs, 1, 300, 4, units, members, &maxc), -1);
  return lh_test_end();
}
