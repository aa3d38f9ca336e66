/* cmd_tokenize.c — `longhaul tokenize`: encode or decode with a HF tokenizer.json.
 *
 * Plain mode reads all of stdin as one text and prints its ids separated by spaces (streaming it
 * through the tokenizer in fixed-size reads, so input of any size uses little memory; with
 * --threads the stream encodes on several threads; with --add-special it is read whole). JSONL mode reads one JSON object
 * per line and writes one line per input line, in order. A line that cannot be used produces
 * {"error": ...} in its place and a message naming the line on stderr; the command goes on and
 * exits 1 at the end. Only usage errors and an unloadable tokenizer stop it early (exit 2).
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"
#include "cli/commands.h"
#include "util/json.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul tokenize (--tokenizer FILE | --model DIR) [options]\n"
          "\n"
          "Encodes text into token ids (or decodes ids into text) exactly as HF tokenizers does with the\n"
          "given tokenizer.json.\n"
          "\n"
          "  --tokenizer FILE   a tokenizer.json\n"
          "  --model DIR        a model folder holding tokenizer.json\n"
          "  --jsonl            read JSONL: each line {\"text\": ...} (or {\"ids\": [...]} with --decode);\n"
          "                     write one line per input line, in order: {\"ids\": [...]} or {\"text\": ...}.\n"
          "                     An \"id\" field of the input is copied to the output. Blank lines are skipped.\n"
          "  --decode           decode instead of encode (plain mode reads ids separated by spaces);\n"
          "                     an id the vocabulary lacks is skipped, as HF does; a negative id is refused\n"
          "  --add-special      apply the post-processor (e.g. BOS/EOS of TemplateProcessing), as HF's\n"
          "                     encode(add_special_tokens=True); off by default\n"
          "  --skip-special     when decoding, drop special tokens (HF skip_special_tokens=True)\n"
          "  --threads N        encode each text on up to N threads (default 1); the ids do not change\n"
          "\n"
          "Plain mode: stdin is one text, stdout gets its ids separated by spaces and a newline.\n"
          "Errors: a malformed JSONL line gets {\"error\": \"...\"} as its output line and a message\n"
          "\"line N: ...\" on stderr; the other lines are still processed, and the exit status is 1.\n"
          "Exit status: 0 all done, 1 some input failed, 2 usage error or the tokenizer could not be loaded.\n");
}

static void put_json_string(FILE *out, const char *s, size_t n) {
  fputc('"', out);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      fputc('\\', out);
      fputc(c, out);
    } else if (c == '\n') {
      fputs("\\n", out);
    } else if (c == '\r') {
      fputs("\\r", out);
    } else if (c == '\t') {
      fputs("\\t", out);
    } else if (c < 0x20 || c == 0x7F) {
      fprintf(out, "\\u%04x", c);
    } else {
      fputc(c, out);
    }
  }
  fputc('"', out);
}

/* ids as decimal text, each after sep (the first after nothing when *printed is 0), formatted
 * into a local buffer and written in blocks (one fprintf per id was most of plain mode's time) */
static void put_id_list(FILE *out, const int32_t *ids, size_t n, const char *sep, size_t *printed) {
  char buf[1 << 14];
  size_t len = 0, sl = strlen(sep);
  for (size_t i = 0; i < n; i++) {
    if (len + sl + 12 > sizeof buf) {
      fwrite(buf, 1, len, out);
      len = 0;
    }
    if ((*printed)++) memcpy(buf + len, sep, sl), len += sl;
    int64_t v = ids[i];
    if (v < 0) buf[len++] = '-', v = -v;
    char d[12];
    int k = 0;
    do d[k++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (k) buf[len++] = d[--k];
  }
  fwrite(buf, 1, len, out);
}

static void put_ids(FILE *out, const lh_i32vec *v, const char *sep) {
  size_t printed = 0;
  put_id_list(out, v->data, v->len, sep, &printed);
}

/* true when the raw JSON line holds a \u0000 escape, which cJSON cannot carry */
static int has_nul_escape(const char *line) {
  for (const char *p = strstr(line, "\\u0000"); p; p = strstr(p + 1, "\\u0000")) {
    size_t bs = 0;
    for (const char *q = p; q > line && q[-1] == '\\'; q--) bs++;
    if (bs % 2 == 0) return 1;
  }
  return 0;
}

static void line_error(FILE *out, long lineno, const char *id_json, const char *fmt, const char *detail) {
  char msg[1200];
  snprintf(msg, sizeof msg, fmt, detail);
  fprintf(stderr, "longhaul tokenize: line %ld: %s\n", lineno, msg);
  fputc('{', out);
  if (id_json) fprintf(out, "\"id\":%s,", id_json);
  fputs("\"error\":", out);
  put_json_string(out, msg, strlen(msg));
  fputs("}\n", out);
}

static int run_jsonl(const lh_tokenizer *t, int decode, int add_special, int skip_special, int threads) {
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  long lineno = 0;
  int failed = 0;
  lh_i32vec ids = {0};
  lh_buf text = {0};
  FILE *out = stdout;
  while ((errno = 0, n = getline(&line, &cap, stdin)) >= 0) {
    lineno++;
    size_t len = (size_t)n;
    while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
    size_t k = 0;
    while (k < len && (line[k] == ' ' || line[k] == '\t')) k++;
    if (k == len) continue;
    cJSON *o = cJSON_ParseWithLength(line, len);
    char *id_json = NULL;
    if (cJSON_IsObject(o)) {
      const cJSON *idf = cJSON_GetObjectItemCaseSensitive(o, "id");
      if (idf) id_json = cJSON_PrintUnformatted(idf);
    }
    char deep[128];
    if (!o && lh_json_too_deep(line, len, deep, sizeof deep)) {
      line_error(out, lineno, NULL, "%s", deep);
      failed = 1;
    } else if (!cJSON_IsObject(o)) {
      line_error(out, lineno, NULL, "%s", o ? "not a JSON object" : "invalid JSON");
      failed = 1;
    } else if (!decode) {
      const cJSON *tf = cJSON_GetObjectItemCaseSensitive(o, "text");
      lh_error err = {0};
      if (!cJSON_IsString(tf)) {
        line_error(out, lineno, id_json, "%s", "no string field \"text\"");
        failed = 1;
      } else if (has_nul_escape(line)) {
        line_error(out, lineno, id_json, "%s", "\"text\" contains \\u0000, which this reader cannot carry");
        failed = 1;
      } else {
        ids.len = 0;
        size_t tl = strlen(tf->valuestring);
        lh_status st = add_special || threads <= 1
                           ? lh_tokenizer_encode(t, tf->valuestring, tl, add_special, &ids, &err)
                           : lh_tokenizer_encode_parallel(t, tf->valuestring, tl, threads, &ids, &err);
        if (st) {
          line_error(out, lineno, id_json, "encoding failed: %s", err.msg);
          failed = 1;
        } else {
          fputc('{', out);
          if (id_json) fprintf(out, "\"id\":%s,", id_json);
          fputs("\"ids\":[", out);
          put_ids(out, &ids, ",");
          fputs("]}\n", out);
        }
      }
    } else {
      const cJSON *af = cJSON_GetObjectItemCaseSensitive(o, "ids");
      int ok = cJSON_IsArray(af);
      char why[128] = "no array \"ids\" of integers";
      ids.len = 0;
      int k = 0;
      for (const cJSON *e = ok ? af->child : NULL; e && ok; e = e->next, k++) {
        const double d = cJSON_IsNumber(e) ? e->valuedouble : 0.5;
        if (!(d >= INT32_MIN && d <= INT32_MAX) || d != (double)(int32_t)d)
          ok = 0, snprintf(why, sizeof why, "\"ids\"[%d] is not a 32-bit integer", k);
        else if (d < 0) /* HF skips an id it does not know; a negative one is no id at all */
          ok = 0, snprintf(why, sizeof why, "\"ids\"[%d] is %d: a token id is never negative", k, (int32_t)d);
        else if (lh_i32vec_push(&ids, (int32_t)d))
          ok = 0, snprintf(why, sizeof why, "out of memory");
      }
      lh_error err = {0};
      if (!ok) {
        line_error(out, lineno, id_json, "%s", why);
        failed = 1;
      } else {
        lh_buf_clear(&text);
        if (lh_tokenizer_decode(t, ids.data, ids.len, skip_special, &text, &err)) {
          line_error(out, lineno, id_json, "decoding failed: %s", err.msg);
          failed = 1;
        } else {
          fputc('{', out);
          if (id_json) fprintf(out, "\"id\":%s,", id_json);
          fputs("\"text\":", out);
          put_json_string(out, text.data ? text.data : "", text.len);
          fputs("}\n", out);
        }
      }
    }
    free(id_json);
    cJSON_Delete(o);
  }
  if (!feof(stdin)) { /* getline failed (a line too long for memory, a read error): not the end */
    const int e = errno;
    fprintf(stderr, "longhaul tokenize: reading line %ld of the input: %s; it and the lines after it were not read\n",
            lineno + 1, strerror(e ? e : EIO));
    failed = 1;
  }
  free(line);
  lh_i32vec_free(&ids);
  lh_buf_free(&text);
  if (fflush(out) || ferror(out)) {
    fprintf(stderr, "longhaul tokenize: writing output failed: %s\n", strerror(errno));
    return LH_EXIT_FAILED;
  }
  return failed ? LH_EXIT_FAILED : LH_EXIT_OK;
}

static int read_all(FILE *f, lh_buf *b) {
  char chunk[1 << 16];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    if (lh_buf_append(b, chunk, n)) return -1;
  return ferror(f) ? -1 : 0;
}

static int run_plain(const lh_tokenizer *t, int decode, int add_special, int skip_special, int threads) {
  lh_error err = {0};
  lh_i32vec ids = {0};
  int rc = LH_EXIT_OK;
  if (decode) {
    lh_buf in = {0}, text = {0};
    if (read_all(stdin, &in)) {
      fprintf(stderr, "longhaul tokenize: reading stdin failed: %s\n", strerror(errno));
      return LH_EXIT_FAILED;
    }
    const char *p = in.data ? in.data : "";
    long count = 0;
    while (*p) {
      while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
      if (!*p) break;
      char *end;
      errno = 0;
      long v = strtol(p, &end, 10);
      count++;
      if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
        fprintf(stderr, "longhaul tokenize: input id %ld (byte %zu) is not an integer: \"%.16s\"\n", count,
                (size_t)(p - in.data), p);
        lh_buf_free(&in);
        lh_i32vec_free(&ids);
        return LH_EXIT_FAILED;
      }
      if (v < 0) { /* HF skips an id it does not know; a negative one is no id at all */
        fprintf(stderr, "longhaul tokenize: input id %ld (byte %zu) is %ld: a token id is never negative\n", count,
                (size_t)(p - in.data), v);
        lh_buf_free(&in);
        lh_i32vec_free(&ids);
        return LH_EXIT_FAILED;
      }
      lh_i32vec_push(&ids, (int32_t)v);
      p = end;
    }
    if (lh_tokenizer_decode(t, ids.data, ids.len, skip_special, &text, &err)) {
      fprintf(stderr, "longhaul tokenize: %s\n", err.msg);
      rc = LH_EXIT_FAILED;
    } else {
      fwrite(text.data ? text.data : "", 1, text.len, stdout);
    }
    lh_buf_free(&in);
    lh_buf_free(&text);
  } else if (add_special) {
    lh_buf in = {0};
    if (read_all(stdin, &in)) {
      fprintf(stderr, "longhaul tokenize: reading stdin failed: %s\n", strerror(errno));
      return LH_EXIT_FAILED;
    }
    lh_status st = lh_tokenizer_encode(t, in.data ? in.data : "", in.len, 1, &ids, &err);
    if (st) {
      fprintf(stderr, "longhaul tokenize: %s\n", err.msg);
      rc = LH_EXIT_FAILED;
    } else {
      put_ids(stdout, &ids, " ");
      fputc('\n', stdout);
    }
    lh_buf_free(&in);
  } else {
    lh_tok_stream *s = NULL;
    if (lh_tok_stream_open_ids(t, threads, &s, &err)) {
      fprintf(stderr, "longhaul tokenize: %s\n", err.msg);
      return LH_EXIT_FAILED;
    }
    static char chunk[1 << 20];
    size_t n, printed = 0;
    lh_status st = LH_OK;
    while (!st && (n = fread(chunk, 1, sizeof chunk, stdin)) > 0) {
      ids.len = 0;
      st = lh_tok_stream_feed(s, chunk, n, &ids, NULL, NULL, &err);
      put_id_list(stdout, ids.data, ids.len, " ", &printed);
    }
    if (!st) {
      ids.len = 0;
      st = lh_tok_stream_finish(s, &ids, NULL, NULL, &err);
      put_id_list(stdout, ids.data, ids.len, " ", &printed);
    }
    fputc('\n', stdout);
    if (ferror(stdin)) {
      fprintf(stderr, "longhaul tokenize: reading stdin failed: %s\n", strerror(errno));
      rc = LH_EXIT_FAILED;
    }
    if (st) {
      fprintf(stderr, "longhaul tokenize: %s\n", err.msg);
      rc = LH_EXIT_FAILED;
    }
    lh_tok_stream_close(s);
  }
  lh_i32vec_free(&ids);
  if (fflush(stdout) || ferror(stdout)) {
    fprintf(stderr, "longhaul tokenize: writing output failed: %s\n", strerror(errno));
    return LH_EXIT_FAILED;
  }
  return rc;
}

int lh_cmd_tokenize(int argc, char **argv) {
  const char *tok = NULL, *model = NULL;
  int jsonl = 0, decode = 0, add_special = 0, skip_special = 0, threads = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return LH_EXIT_OK;
    } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) {
      tok = argv[++i];
    } else if (!strcmp(a, "--model") && i + 1 < argc) {
      model = argv[++i];
    } else if (!strcmp(a, "--jsonl")) {
      jsonl = 1;
    } else if (!strcmp(a, "--decode")) {
      decode = 1;
    } else if (!strcmp(a, "--add-special")) {
      add_special = 1;
    } else if (!strcmp(a, "--skip-special")) {
      skip_special = 1;
    } else if (!strcmp(a, "--threads") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 64) {
        fprintf(stderr, "longhaul tokenize: --threads wants a number from 1 to 64, not \"%s\"\n", argv[i]);
        return LH_EXIT_USAGE;
      }
      threads = (int)v;
    } else {
      fprintf(stderr, "longhaul tokenize: unknown or incomplete option '%s'\n\n", a);
      usage(stderr);
      return LH_EXIT_USAGE;
    }
  }
  if (!tok == !model) {
    fprintf(stderr, "longhaul tokenize: give exactly one of --tokenizer FILE and --model DIR\n\n");
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  lh_tokenizer *t = NULL;
  lh_error err = {0};
  if (model && lh_model_check(model, "none", &err)) { /* a file or a device is named as such */
    fprintf(stderr, "longhaul tokenize: --model: %s\n", err.msg);
    return LH_EXIT_USAGE;
  }
  if (lh_tokenizer_open(tok ? tok : model, &t, &err)) {
    fprintf(stderr, "longhaul tokenize: %s\n", err.msg);
    return LH_EXIT_USAGE;
  }
  int rc = jsonl ? run_jsonl(t, decode, add_special, skip_special, threads)
                 : run_plain(t, decode, add_special, skip_special, threads);
  lh_tokenizer_close(t);
  return rc;
}
