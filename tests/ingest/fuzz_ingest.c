/* fuzz_ingest.c — arbitrary bytes as an archive through the whole ingest loop, in memory and
 * text-only. The first byte picks options (order, on_error, caps); the rest is the input.
 *
 * Beyond "no crash, no leak, no undefined behaviour", every run checks the invariants a consumer
 * relies on, and aborts when one breaks: batches are contiguous in the framed text; entry spans
 * tile the framed text in order; statuses and reasons are in range and agree (an included
 * document has a non-empty span, a skipped one an empty span); the framed text is valid UTF-8;
 * every manifest line renders. Seeds: tests/fuzz/corpus/fuzz_ingest (tools/ingest_fuzz_seeds.sh).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest.h"
#include "ingest/ingest_internal.h"

#define REQUIRE(c)                                                          \
  do {                                                                      \
    if (!(c)) {                                                             \
      fprintf(stderr, "fuzz_ingest: invariant broken: %s (line %d)\n", #c, __LINE__); \
      abort();                                                              \
    }                                                                       \
  } while (0)

/* Undefined behaviour stops the run like a crash (the fuzz build compiles UBSan recoverable). */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t opt = data[0];
  lh_ingest_params p = lh_ingest_default_params();
  p.max_decompressed_bytes = 32 << 20;
  p.ratio_grace_bytes = 1 << 20;
  p.max_file_bytes = (opt & 4) ? 4096 : (4 << 20);
  p.max_total_bytes = (opt & 8) ? 8192 : (16 << 20);
  p.sniff_bytes = (opt & 16) ? 64 : 4096;
  p.batch_bytes = 4096;
  p.order = (opt & 1) ? LH_INGEST_SORT_PATH : LH_INGEST_SORT_ARCHIVE;
  p.sort_memory = (opt & 32) ? 100 : (1 << 20);
  p.on_error = (opt & 2) ? LH_INGEST_ON_ERROR_SKIP : LH_INGEST_ON_ERROR_FAIL;
  static const char *const exc[] = {"*.o", "skip/**"};
  if (opt & 64) p.exclude = exc, p.n_exclude = 2;
  if (opt & 128) p.template_text = "[{index} {path} {input}]{text}{nl}({bytes} {sha256})\n";
  lh_ingest *ing;
  lh_error err;
  if (lh_ingest_open(&p, &ing, &err)) abort();
  if (lh_ingest_add_memory(ing, "fuzz.bin", data + 1, size - 1, &err)) abort();
  uint64_t text_at = 0, span_at = 0;
  lh_utf8 u = {0};
  int64_t bad = 0;
  lh_buf scratch = {0}, line = {0};
  for (;;) {
    lh_ingest_batch b;
    lh_status st = lh_ingest_next(ing, &b, &err);
    REQUIRE(b.text_base == text_at);
    text_at += b.text_len;
    lh_buf_clear(&scratch);
    lh_utf8_repair(&u, (const uint8_t *)b.text, b.text_len, 0, &scratch, &bad);
    REQUIRE(bad == 0);
    for (size_t i = 0; i < b.n_entries; i++) {
      const lh_ingest_entry *e = &b.entries[i];
      REQUIRE((unsigned)e->type < LH_ENTRY_TYPE_COUNT && (unsigned)e->status < LH_ENTRY_STATUS_COUNT &&
              (unsigned)e->reason < LH_REASON_COUNT);
      REQUIRE(e->text_start == span_at && e->text_end >= e->text_start && e->text_end <= text_at);
      REQUIRE((e->status == LH_ENTRY_OK) == (e->reason == LH_REASON_NONE));
      if (e->status == LH_ENTRY_OK || e->status == LH_ENTRY_PARTIAL) REQUIRE(e->text_end > e->text_start);
      if (e->status == LH_ENTRY_SKIPPED) REQUIRE(e->text_end == e->text_start);
      REQUIRE(e->token_start == -1 && e->token_end == -1);
      REQUIRE(e->path && memchr(e->path, 0, e->path_len) == NULL && e->detail);
      span_at = e->text_end;
      lh_buf_clear(&line);
      REQUIRE(lh_ingest_entry_json(e, &line) == LH_OK && line.len > 0 && line.data[line.len - 1] == '\n');
    }
    if (st != LH_OK) {
      REQUIRE(err.msg[0] != 0);
      REQUIRE(p.on_error == LH_INGEST_ON_ERROR_FAIL || st == LH_ENOMEM);
      break;
    }
    if (b.done) {
      REQUIRE(span_at == text_at);
      break;
    }
  }
  lh_buf_clear(&scratch);
  lh_utf8_repair(&u, NULL, 0, 1, &scratch, &bad);
  REQUIRE(bad == 0);
  lh_buf_free(&scratch);
  lh_buf_free(&line);
  lh_ingest_close(ing);
  return 0;
}
