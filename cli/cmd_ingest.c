/* cmd_ingest.c — `longhaul ingest`: archives, folders and files to a manifest and tokens.
 *
 * A thin shell over ingest/ingest.h: parse options, pull batches, append them to the outputs,
 * print progress and a summary. Outputs are written as NAME.partial while ingest runs and renamed
 * when it succeeds, tokens.u32 / framed.txt first and manifest.jsonl last, so manifest.jsonl
 * exists only when every output beside it is complete: a crash or a failure leaves .partial files
 * (holding everything read up to the failure) and never a manifest that looks finished. An old
 * manifest.jsonl in the folder is removed before anything else is written, for the same reason.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ingest/ingest.h"
#include "cli/commands.h"
#include "util/buf.h"
#include "util/fs.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul ingest (--tokenizer FILE | --model DIR | --no-tokens) --out DIR [options] INPUT...\n"
          "\n"
          "INPUT is an archive (tar, tar.gz/bz2/xz/zst/lz4, zip, 7z, cpio, iso, ar, rar, ...), a compressed\n"
          "file, a plain file, a folder, or - for stdin. Writes DIR/manifest.jsonl (a line per entry) and\n"
          "DIR/tokens.u32 (little-endian uint32), or DIR/framed.txt with --no-tokens, and prints a summary.\n"
          "\n"
          "  --tokenizer FILE        tokenizer.json to encode with      --model DIR  a model folder holding one\n"
          "  --no-tokens             text only: write framed.txt, no tokens\n"
          "  --text                  with a tokenizer, also write framed.txt\n"
          "  --include GLOB          only files matching (repeatable; * ? [..] and ** as a component;\n"
          "                          a pattern without '/' matches the file name at any depth)\n"
          "  --exclude GLOB          skip matching files and whole matching folders (repeatable)\n"
          "  --max-file-size SIZE    per document (default 256M; K M G T are powers of 1024)\n"
          "  --max-total-size SIZE   all documents together (default 4G); the prompt stays a prefix\n"
          "  --max-decompressed SIZE per input (default 64G)\n"
          "  --max-ratio N           decompressed:read per input, past the first 256M (default 200)\n"
          "  --ratio-grace SIZE      decompressed bytes before --max-ratio applies (default 256M)\n"
          "  --sort archive|path     archive order (default) or path order, the same for every format\n"
          "  --sort-memory SIZE      document bytes held in memory for --sort path (default 256M)\n"
          "  --on-error fail|skip    stop at the first damaged entry or input (default), or record it and go on\n"
          "  --template TEXT         document framing; placeholders {path} {path_raw} {input} {index} {text}\n"
          "                          {nl} {bytes} {sha256}, {{ }} for braces; \\n \\t \\\\ escapes\n"
          "                          (default: <document path=\"{path}\">\\n{text}{nl}</document>\\n)\n"
          "  --template-file FILE    the template, read from a file (no escapes)\n"
          "  --threads N             threads that tokenize, beside the reader thread (default: the online\n"
          "                          CPUs, at most 4; 1 to 64); the tokens are the same for every N\n"
          "  --quiet                 no progress line and no summary\n");
}

static int parse_size(const char *s, int64_t *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  double mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i') end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  if (v * mul > 9.0e18) return -1;
  *out = (int64_t)(v * mul);
  return 0;
}

static char *unescape(const char *s) {
  size_t n = strlen(s);
  char *o = malloc(n + 1), *q = o;
  if (!o) return NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n && (s[i + 1] == 'n' || s[i + 1] == 't' || s[i + 1] == '\\')) {
      *q++ = s[i + 1] == 'n' ? '\n' : s[i + 1] == 't' ? '\t' : '\\';
      i++;
    } else
      *q++ = s[i];
  }
  *q = 0;
  return o;
}

typedef struct out_file {
  char final[4096], partial[4096 + 16];
  FILE *f;
} out_file;

static int out_open(out_file *o, const char *dir, const char *name) {
  if (lh_path_join(o->final, sizeof o->final, dir, name) != LH_OK) return -1;
  snprintf(o->partial, sizeof o->partial, "%s.partial", o->final);
  unlink(o->final);
  /* made anew, never opened through a link planted at the name (util/fs.h) */
  lh_error err;
  int fd;
  if (lh_file_create_new(o->partial, &fd, &err) != LH_OK) {
    fprintf(stderr, "longhaul ingest: %s\n", err.msg);
    return -1;
  }
  if (!(o->f = fdopen(fd, "wb"))) {
    fprintf(stderr, "longhaul ingest: %s: %s\n", o->partial, strerror(errno));
    close(fd);
    return -1;
  }
  setvbuf(o->f, NULL, _IOFBF, 1 << 20);
  return 0;
}

/* Flush, fsync and close; rename to the final name when commit. */
static int out_close(out_file *o, int commit) {
  if (!o->f) return 0;
  int bad = fflush(o->f) != 0 || fsync(fileno(o->f)) != 0;
  bad |= fclose(o->f) != 0;
  o->f = NULL;
  if (bad) {
    fprintf(stderr, "longhaul ingest: writing %s: %s\n", o->partial, strerror(errno));
    return -1;
  }
  if (commit && rename(o->partial, o->final) != 0) {
    fprintf(stderr, "longhaul ingest: renaming %s: %s\n", o->partial, strerror(errno));
    return -1;
  }
  lh_error err;
  if (commit && lh_fsync_parent(o->final, &err) != LH_OK) {
    fprintf(stderr, "longhaul ingest: %s\n", err.msg);
    return -1;
  }
  return 0;
}

static void mb(char *out, size_t n, double bytes) { snprintf(out, n, "%.1f MB", bytes / 1e6); }

static void progress_line(lh_ingest *ing, double *last, int final) {
  double now = lh_now();
  if (!final && now - *last < 0.25) return;
  *last = now;
  lh_ingest_stats s;
  lh_ingest_stats_get(ing, &s);
  char a[32], pct[32] = "";
  mb(a, sizeof a, (double)s.source_bytes);
  if (s.source_total > 0)
    snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * (double)s.source_bytes / (double)s.source_total);
  fprintf(stderr, "\r\033[Kingest: %s read%s, %.1f MB/s, %" PRId64 " entries, %" PRId64 " tokens%s", a, pct,
          s.seconds > 0 ? (double)s.content_bytes / 1e6 / s.seconds : 0.0, s.entries, s.tokens, final ? "\n" : "");
}

static void summary(lh_ingest *ing, FILE *f, int tokens) {
  lh_ingest_stats s;
  lh_ingest_stats_get(ing, &s);
  char a[32], b[32], c[32], d[32];
  mb(a, sizeof a, (double)s.source_bytes);
  mb(b, sizeof b, (double)s.content_bytes);
  mb(c, sizeof c, (double)s.document_bytes);
  mb(d, sizeof d, (double)s.text_bytes);
  fprintf(f, "ingest: %" PRId64 " entries from %d input%s: %" PRId64 " documents, %" PRId64 " partial, %" PRId64
             " skipped, %" PRId64 " errors\n",
          s.entries, s.inputs_total, s.inputs_total == 1 ? "" : "s", s.by_status[LH_ENTRY_OK],
          s.by_status[LH_ENTRY_PARTIAL], s.by_status[LH_ENTRY_SKIPPED], s.by_status[LH_ENTRY_ERROR]);
  fprintf(f, "  bytes: %s read, %s of entries, %s in documents, %s framed", a, b, c, d);
  if (tokens) fprintf(f, ", %" PRId64 " tokens", s.tokens);
  fprintf(f, "\n");
  int any = 0;
  for (int r = 1; r < LH_REASON_COUNT; r++) {
    if (!s.by_reason[r]) continue;
    fprintf(f, "%s%s %" PRId64, any ? ", " : "  by reason: ", lh_entry_reason_name((lh_entry_reason)r), s.by_reason[r]);
    any = 1;
  }
  if (any) fprintf(f, "\n");
  if (s.invalid_utf8) fprintf(f, "  invalid UTF-8 sequences replaced by U+FFFD: %" PRId64 "\n", s.invalid_utf8);
  fprintf(f, "  time: %.2f s, %.1f MB/s of entries (read+decompress %.2f s, framing %.2f s", s.seconds,
          s.seconds > 0 ? (double)s.content_bytes / 1e6 / s.seconds : 0.0, s.read_seconds, s.frame_seconds);
  if (tokens)
    fprintf(f, ", tokenize %.2f s on %d thread%s, %.2f CPU-s", s.tokenize_seconds, s.tokenizer_threads,
            s.tokenizer_threads == 1 ? "" : "s", s.tokenize_cpu_seconds);
  fprintf(f, ")\n");
}

int lh_cmd_ingest(int argc, char **argv) {
  lh_ingest_params p = lh_ingest_default_params();
  const char *out_dir = NULL, *tok_path = NULL, *template_file = NULL;
  int tok_is_model = 0; /* tok_path came as --model DIR */
  char *template_text = NULL;
  int no_tokens = 0, want_text = 0, quiet = 0, rc = LH_EXIT_USAGE;
  const char **inc = calloc((size_t)argc, sizeof *inc), **exc = calloc((size_t)argc, sizeof *exc);
  const char **inputs = calloc((size_t)argc, sizeof *inputs);
  size_t n_inputs = 0;
  lh_ingest *ing = NULL;
  lh_tokenizer *tokenizer = NULL;
  lh_buf line = {0}, tbuf = {0}, le = {0};
  out_file man = {0}, tok = {0}, txt = {0};
  if (!inc || !exc || !inputs) goto done;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE                                                          \
  do {                                                                      \
    if (!v) {                                                               \
      fprintf(stderr, "longhaul ingest: %s needs a value\n", a);            \
      goto done;                                                            \
    }                                                                       \
    i++;                                                                    \
  } while (0)
#define SIZE_VALUE(field)                                                           \
  do {                                                                              \
    NEED_VALUE;                                                                     \
    if (parse_size(v, &p.field)) {                                                  \
      fprintf(stderr, "longhaul ingest: %s: '%s' is not a size (like 512K, 64M, 2G)\n", a, v); \
      goto done;                                                                    \
    }                                                                               \
  } while (0)
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      rc = LH_EXIT_OK;
      goto done;
    } else if (!strcmp(a, "--out")) { NEED_VALUE; out_dir = v; }
    else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--model")) { NEED_VALUE; tok_path = v; tok_is_model = a[2] == 'm'; }
    else if (!strcmp(a, "--no-tokens")) no_tokens = 1;
    else if (!strcmp(a, "--text")) want_text = 1;
    else if (!strcmp(a, "--quiet")) quiet = 1;
    else if (!strcmp(a, "--include")) { NEED_VALUE; inc[p.n_include++] = v; }
    else if (!strcmp(a, "--exclude")) { NEED_VALUE; exc[p.n_exclude++] = v; }
    else if (!strcmp(a, "--max-file-size")) SIZE_VALUE(max_file_bytes);
    else if (!strcmp(a, "--max-total-size")) SIZE_VALUE(max_total_bytes);
    else if (!strcmp(a, "--max-decompressed")) SIZE_VALUE(max_decompressed_bytes);
    else if (!strcmp(a, "--sort-memory")) SIZE_VALUE(sort_memory);
    else if (!strcmp(a, "--ratio-grace")) SIZE_VALUE(ratio_grace_bytes);
    else if (!strcmp(a, "--max-ratio")) {
      NEED_VALUE;
      char *end;
      p.max_ratio = strtod(v, &end);
      if (*end || !(p.max_ratio >= 1)) {
        fprintf(stderr, "longhaul ingest: --max-ratio: '%s' is not a number >= 1\n", v);
        goto done;
      }
    } else if (!strcmp(a, "--sort")) {
      NEED_VALUE;
      if (!strcmp(v, "archive")) p.order = LH_INGEST_SORT_ARCHIVE;
      else if (!strcmp(v, "path")) p.order = LH_INGEST_SORT_PATH;
      else {
        fprintf(stderr, "longhaul ingest: --sort takes 'archive' or 'path', not '%s'\n", v);
        goto done;
      }
    } else if (!strcmp(a, "--on-error")) {
      NEED_VALUE;
      if (!strcmp(v, "fail")) p.on_error = LH_INGEST_ON_ERROR_FAIL;
      else if (!strcmp(v, "skip")) p.on_error = LH_INGEST_ON_ERROR_SKIP;
      else {
        fprintf(stderr, "longhaul ingest: --on-error takes 'fail' or 'skip', not '%s'\n", v);
        goto done;
      }
    } else if (!strcmp(a, "--threads")) {
      NEED_VALUE;
      char *end;
      long n = strtol(v, &end, 10);
      if (*end || end == v || n < 1 || n > 64) {
        fprintf(stderr, "longhaul ingest: --threads takes a number from 1 to 64, not '%s'\n", v);
        goto done;
      }
      p.tokenizer_threads = (int)n;
    } else if (!strcmp(a, "--template")) {
      NEED_VALUE;
      free(template_text);
      template_text = unescape(v);
    } else if (!strcmp(a, "--template-file")) { NEED_VALUE; template_file = v; }
    else if (!strcmp(a, "-") || a[0] != '-') inputs[n_inputs++] = a;
    else if (!strcmp(a, "--")) {
      while (++i < argc) inputs[n_inputs++] = argv[i];
    } else {
      fprintf(stderr, "longhaul ingest: unknown option '%s'\n\n", a);
      usage(stderr);
      goto done;
    }
  }
  if (!out_dir || !n_inputs || (!!tok_path + no_tokens) != 1) {
    if (!out_dir) fprintf(stderr, "longhaul ingest: --out DIR is required\n");
    if (!n_inputs) fprintf(stderr, "longhaul ingest: no INPUT given\n");
    if ((!!tok_path + no_tokens) != 1)
      fprintf(stderr, "longhaul ingest: give exactly one of --tokenizer FILE, --model DIR, --no-tokens\n");
    fprintf(stderr, "(longhaul ingest --help describes the options)\n");
    goto done;
  }
  lh_error err = {0};
  if (template_file) {
    if (lh_file_read_regular(template_file, 1 << 20, &tbuf, &err)) {
      fprintf(stderr, "longhaul ingest: --template-file: %s\n", err.msg);
      goto done;
    }
    p.template_text = tbuf.data;
  } else if (template_text)
    p.template_text = template_text;
  if (tok_path) {
    if (tok_is_model && lh_model_check(tok_path, "none", &err)) {
      fprintf(stderr, "longhaul ingest: --model: %s\n", err.msg);
      goto done;
    }
    if (lh_tokenizer_open(tok_path, &tokenizer, &err)) {
      fprintf(stderr, "longhaul ingest: %s\n", err.msg);
      goto done;
    }
    p.tokenizer = tokenizer;
  }
  p.include = inc;
  p.exclude = exc;
  /* --out is written while the inputs are read: a folder input that holds it must not read our own
   * .partial files back (matched by device and inode when the walk starts, after the lh_mkdir_p
   * below, so any spelling of the path matches) */
  const char *skip_out[] = {out_dir};
  p.exclude_paths = skip_out;
  p.n_exclude_paths = 1;
  if (lh_ingest_open(&p, &ing, &err)) {
    fprintf(stderr, "longhaul ingest: %s\n", err.msg);
    goto done;
  }
  for (size_t i = 0; i < n_inputs; i++)
    if (lh_ingest_add_path(ing, inputs[i], &err)) {
      fprintf(stderr, "longhaul ingest: %s\n", err.msg);
      goto done;
    }
  if (lh_mkdir_p(out_dir, &err)) {
    fprintf(stderr, "longhaul ingest: %s\n", err.msg);
    goto done;
  }
  /* The completeness signal goes first, then the rest. */
  rc = LH_EXIT_FAILED;
  if (out_open(&man, out_dir, "manifest.jsonl")) goto done;
  char sum_path[4096];
  lh_path_join(sum_path, sizeof sum_path, out_dir, "summary.json");
  unlink(sum_path);
  /* an earlier ingest into DIR may have left the output this one does not write (framed.txt beside
   * new tokens, or tokens beside new text): it goes, so every output there is this ingest's */
  char stale[4096];
  if (no_tokens && !lh_path_join(stale, sizeof stale, out_dir, "tokens.u32")) unlink(stale);
  if (!(no_tokens || want_text) && !lh_path_join(stale, sizeof stale, out_dir, "framed.txt")) unlink(stale);
  if (!no_tokens && out_open(&tok, out_dir, "tokens.u32")) goto done;
  if ((no_tokens || want_text) && out_open(&txt, out_dir, "framed.txt")) goto done;
  int show_progress = !quiet && isatty(2);
  double last = 0;
  lh_status st;
  lh_ingest_batch b;
  for (;;) {
    st = lh_ingest_next(ing, &b, &err);
    int bad = 0;
    if (txt.f && b.text_len) bad |= fwrite(b.text, 1, b.text_len, txt.f) != b.text_len;
    if (tok.f && b.n_tokens) { /* little-endian uint32, one fwrite per batch */
      lh_buf_clear(&le);
      if (lh_buf_reserve(&le, b.n_tokens * 4)) bad = 1;
      for (size_t i = 0; !bad && i < b.n_tokens; i++) {
        uint32_t v = (uint32_t)b.tokens[i];
        uint8_t *q = (uint8_t *)le.data + 4 * i;
        q[0] = (uint8_t)v, q[1] = (uint8_t)(v >> 8), q[2] = (uint8_t)(v >> 16), q[3] = (uint8_t)(v >> 24);
      }
      if (!bad) bad |= fwrite(le.data, 1, b.n_tokens * 4, tok.f) != b.n_tokens * 4;
    }
    lh_buf_clear(&line);
    for (size_t i = 0; i < b.n_entries; i++) {
      const lh_ingest_entry *e = &b.entries[i];
      lh_ingest_entry_json(e, &line);
      if (e->status == LH_ENTRY_ERROR && p.on_error == LH_INGEST_ON_ERROR_SKIP && !quiet) {
        lh_buf name = {0}, in = {0}, det = {0};
        lh_ingest_display_name(e->path, e->path_len, 200, &name);
        lh_ingest_display_name(inputs[e->input], strlen(inputs[e->input]), 200, &in);
        lh_ingest_display_name(e->detail, strlen(e->detail), 400, &det);
        fprintf(stderr, "%slonghaul ingest: %s: %s: %s (an error, recorded in the manifest; --on-error skip goes "
                "on, and what was read of the entry before it stays in the output)\n", show_progress ? "\r\033[K" : "",
                in.data, name.data, det.data);
        lh_buf_free(&name);
        lh_buf_free(&in);
        lh_buf_free(&det);
      }
    }
    if (line.len) bad |= fwrite(line.data, 1, line.len, man.f) != line.len;
    if (bad) {
      fprintf(stderr, "longhaul ingest: writing to %s: %s\n", out_dir, strerror(errno));
      goto done;
    }
    if (show_progress) progress_line(ing, &last, 0);
    if (st != LH_OK || b.done) break;
  }
  if (show_progress) progress_line(ing, &last, 1);
  if (st != LH_OK) {
    out_close(&tok, 0);
    out_close(&txt, 0);
    out_close(&man, 0);
    fprintf(stderr, "longhaul ingest: %s\n", err.msg);
    fprintf(stderr, "longhaul ingest: what was read up to there is in %s/*.partial; --on-error skip records "
                    "damaged entries and goes on\n", out_dir);
    if (!quiet) summary(ing, stderr, !no_tokens);
    goto done;
  }
  if (out_close(&tok, 1) || out_close(&txt, 1)) goto done;
  {
    lh_ingest_stats s;
    lh_ingest_stats_get(ing, &s);
    lh_buf js = {0};
    lh_buf_printf(&js,
                  "{\"entries\":%" PRId64 ",\"documents\":%" PRId64 ",\"partial\":%" PRId64 ",\"skipped\":%" PRId64
                  ",\"errors\":%" PRId64 ",\"source_bytes\":%" PRId64 ",\"content_bytes\":%" PRId64
                  ",\"document_bytes\":%" PRId64 ",\"text_bytes\":%" PRId64,
                  s.entries, s.by_status[LH_ENTRY_OK], s.by_status[LH_ENTRY_PARTIAL], s.by_status[LH_ENTRY_SKIPPED],
                  s.by_status[LH_ENTRY_ERROR], s.source_bytes, s.content_bytes, s.document_bytes, s.text_bytes);
    if (no_tokens) lh_buf_append_str(&js, ",\"tokens\":null");
    else lh_buf_printf(&js, ",\"tokens\":%" PRId64, s.tokens);
    lh_buf_printf(&js, ",\"invalid_utf8\":%" PRId64 ",\"seconds\":%.3f,\"by_reason\":{", s.invalid_utf8, s.seconds);
    int first = 1;
    for (int r = 1; r < LH_REASON_COUNT; r++)
      if (s.by_reason[r]) {
        lh_buf_printf(&js, "%s\"%s\":%" PRId64, first ? "" : ",", lh_entry_reason_name((lh_entry_reason)r), s.by_reason[r]);
        first = 0;
      }
    lh_buf_append_str(&js, "}}\n");
    st = lh_file_write_atomic(sum_path, js.data, js.len, &err);
    lh_buf_free(&js);
    if (st) {
      fprintf(stderr, "longhaul ingest: %s\n", err.msg);
      goto done;
    }
  }
  if (out_close(&man, 1)) goto done;
  if (!quiet) summary(ing, stdout, !no_tokens);
  { /* an input that gave no text is said whatever --quiet says: an empty result is no success */
    lh_buf notes = {0};
    if (lh_ingest_notes(ing, &notes) && notes.data) {
      for (char *line = strtok(notes.data, "\n"); line; line = strtok(NULL, "\n"))
        fprintf(stderr, "longhaul ingest: warning: %s\n", line);
    }
    lh_buf_free(&notes);
  }
  rc = LH_EXIT_OK;
done:
  if (man.f) out_close(&man, 0);
  if (tok.f) out_close(&tok, 0);
  if (txt.f) out_close(&txt, 0);
  lh_ingest_close(ing);
  lh_tokenizer_close(tokenizer);
  lh_buf_free(&line);
  lh_buf_free(&le);
  lh_buf_free(&tbuf);
  free(template_text);
  free(inc);
  free(exc);
  free(inputs);
  return rc;
}
