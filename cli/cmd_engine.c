/* cmd_engine.c — `longhaul logits` and `longhaul generate`: the engine from the command line.
 *
 * These two commands are contracts other checks use (parity scripts, the CUDA backend's checks):
 *   logits   --model DIR --ids FILE [--chunk N] --out FILE     raw little-endian fp32 [T x vocab]
 *   generate --model DIR --ids FILE --max-new N [--chunk N]    new ids, space-separated, one line
 * ids are whitespace-separated integers. --chunk N feeds the prompt in calls of N tokens (the
 * chunk plan; default: calls as large as the workspace allows, and for `logits` no larger than a
 * 256 MiB logits buffer), so any plan can be checked against the one-pass reference. The output file is written under a temporary name and renamed when
 * complete: a failed run never leaves a partial file under the requested name.
 * Exit status: 0 done, 1 the computation failed, 2 bad arguments, files or model.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/engine.h"
#include "cli/commands.h"
#include "util/buf.h"
#include "util/fs.h"
#include "util/log.h"

typedef struct engine_args {
  const char *model, *ids, *out, *device;
  int64_t chunk, max_new;
  int threads, verbose, stop_at_eos;
  lh_sampler_params sampler;
} engine_args;

static void usage(FILE *f, const char *cmd) {
  if (!strcmp(cmd, "logits"))
    fprintf(f, "usage: longhaul logits --model DIR --ids FILE --out FILE [--chunk N] [--threads N] [--device cpu|cuda]\n"
               "  Writes the logits of every position as raw little-endian float32 [T x vocab].\n");
  else
    fprintf(f, "usage: longhaul generate --model DIR --ids FILE --max-new N [--chunk N] [--threads N]\n"
               "                         [--device cpu|cuda] [--stop-at-eos]\n"
               "                         [--temperature T [--top-k K] [--top-p P] [--seed S]]\n"
               "  Prints the N new ids (greedy unless --temperature > 0), space-separated, on one line.\n");
  fprintf(f, "  --ids FILE     whitespace-separated token ids\n"
             "  --chunk N      feed the prompt in calls of N tokens (default: as few calls as possible)\n"
             "  --threads N    CPU threads (default: all cores)\n"
             "  --device D     cpu (default) or cuda (also called gpu)\n"
             "  -v             report timings on stderr\n");
}

static int parse_int(const char *cmd, const char *opt, const char *v, int64_t lo, int64_t *out) {
  char *end;
  errno = 0;
  long long x = v ? strtoll(v, &end, 10) : 0;
  if (!v || errno || *end || end == v || x < lo) {
    fprintf(stderr, "longhaul %s: %s needs an integer >= %lld (got '%s')\n", cmd, opt, (long long)lo, v ? v : "");
    return 0;
  }
  *out = x;
  return 1;
}

/* 1 on success; prints its own message and returns 0 on a usage error; -1 for --help. */
static int parse_args(int argc, char **argv, engine_args *a) {
  const char *cmd = argv[0];
  memset(a, 0, sizeof *a);
  a->device = "cpu";
  a->max_new = -1;
  a->sampler.top_p = 1.0f;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int64_t x;
    if (!strcmp(o, "--help") || !strcmp(o, "-h")) return -1;
    if (!strcmp(o, "-v")) {
      a->verbose = 1;
      continue;
    }
    if (!strcmp(o, "--stop-at-eos") && !strcmp(cmd, "generate")) {
      a->stop_at_eos = 1;
      continue;
    }
    if (!v) {
      fprintf(stderr, "longhaul %s: %s needs a value (or is unknown)\n\n", cmd, o);
      usage(stderr, cmd);
      return 0;
    }
    i++;
    if (!strcmp(o, "--model")) a->model = v;
    else if (!strcmp(o, "--ids")) a->ids = v;
    else if (!strcmp(o, "--out") && !strcmp(cmd, "logits")) a->out = v;
    else if (!strcmp(o, "--device")) a->device = v;
    else if (!strcmp(o, "--chunk")) {
      if (!parse_int(cmd, o, v, 1, &a->chunk)) return 0;
    } else if (!strcmp(o, "--threads")) {
      if (!parse_int(cmd, o, v, 0, &x) || x > 4096) return 0;
      a->threads = (int)x;
    } else if (!strcmp(o, "--max-new") && !strcmp(cmd, "generate")) {
      if (!parse_int(cmd, o, v, 0, &a->max_new)) return 0;
    } else if (!strcmp(o, "--top-k") && !strcmp(cmd, "generate")) {
      if (!parse_int(cmd, o, v, 0, &x) || x > 1 << 30) return 0;
      a->sampler.top_k = (int)x;
    } else if (!strcmp(o, "--seed") && !strcmp(cmd, "generate")) {
      if (!parse_int(cmd, o, v, 0, &x)) return 0;
      a->sampler.seed = (uint64_t)x;
    } else if ((!strcmp(o, "--temperature") || !strcmp(o, "--top-p")) && !strcmp(cmd, "generate")) {
      char *end;
      double f = strtod(v, &end);
      if (*end || end == v || f < 0 || (!strcmp(o, "--top-p") && f > 1)) {
        fprintf(stderr, "longhaul %s: %s needs a number%s (got '%s')\n", cmd, o,
                !strcmp(o, "--top-p") ? " in [0, 1]" : " >= 0", v);
        return 0;
      }
      if (!strcmp(o, "--temperature")) a->sampler.temperature = (float)f;
      else a->sampler.top_p = (float)f;
    } else {
      fprintf(stderr, "longhaul %s: unknown option '%s'\n\n", cmd, o);
      usage(stderr, cmd);
      return 0;
    }
  }
  const char *missing = !a->model ? "--model" : !a->ids ? "--ids" : NULL;
  if (!missing && !strcmp(cmd, "logits") && !a->out) missing = "--out";
  if (!missing && !strcmp(cmd, "generate") && a->max_new < 0) missing = "--max-new";
  if (missing) {
    fprintf(stderr, "longhaul %s: %s is required\n\n", cmd, missing);
    usage(stderr, cmd);
    return 0;
  }
  lh_error e;
  if (strcmp(a->device, "cpu") && strcmp(a->device, "cuda") && strcmp(a->device, "gpu")) {
    fprintf(stderr, "longhaul %s: --device must be cpu or cuda (also called gpu); got '%s'\n", cmd, a->device);
    return 0;
  }
  if (lh_backend_check(a->device, &e) != LH_OK) {
    fprintf(stderr, "longhaul %s: --device %s: %s\n", cmd, a->device, e.msg);
    return 0;
  }
  return 1;
}

/* Read whitespace-separated ids. Prints a message naming the file and the offending token. */
static int read_ids(const char *cmd, const char *path, lh_i32vec *ids) {
  lh_buf b = {0};
  lh_error err;
  if (lh_file_read_regular(path, (size_t)1 << 32, &b, &err)) {
    fprintf(stderr, "longhaul %s: --ids: %s\n", cmd, err.msg);
    lh_buf_free(&b);
    return 0;
  }
  const char *p = b.data, *end = b.data + b.len;
  int ok = 1;
  while (ok && p < end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    if (p == end) break;
    const char *t = p;
    while (p < end && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    char tok[32];
    size_t n = (size_t)(p - t);
    char *e = NULL;
    long long v = -1;
    if (n < sizeof tok) {
      memcpy(tok, t, n);
      tok[n] = 0;
      errno = 0;
      v = strtoll(tok, &e, 10);
    }
    if (n >= sizeof tok || errno || e != tok + n || v < 0 || v > INT32_MAX) { /* a NUL inside ends no id */
      fprintf(stderr, "longhaul %s: %s: byte %zu: '%.*s' is not a token id (a non-negative integer)\n", cmd, path,
              (size_t)(t - b.data), (int)(n > 40 ? 40 : n), t);
      ok = 0;
    } else if (lh_i32vec_push(ids, (int32_t)v)) {
      fprintf(stderr, "longhaul %s: out of memory reading %s\n", cmd, path);
      ok = 0;
    }
  }
  lh_buf_free(&b);
  if (ok && ids->len == 0) {
    fprintf(stderr, "longhaul %s: %s holds no token ids\n", cmd, path);
    ok = 0;
  }
  return ok;
}

/* Open the model and check the ids against its vocabulary. */
static int setup(const char *cmd, const engine_args *a, lh_i32vec *ids, lh_model **m) {
  if (!read_ids(cmd, a->ids, ids)) return 0;
  lh_model_params mp = lh_model_default_params();
  mp.backend = a->device;
  mp.threads = a->threads;
  mp.verbose = a->verbose;
  if (a->chunk > 0 && a->chunk < mp.max_rows) mp.max_rows = (int)a->chunk;
  lh_error err;
  if (lh_model_open(a->model, &mp, m, &err)) {
    fprintf(stderr, "longhaul %s: %s\n", cmd, err.msg);
    return 0;
  }
  const lh_config *c = lh_model_config(*m);
  for (size_t i = 0; i < ids->len; i++)
    if (ids->data[i] >= c->vocab_size) {
      fprintf(stderr, "longhaul %s: %s: id %d (position %zu) is outside the model's vocabulary (0..%d)\n", cmd, a->ids,
              ids->data[i], i, c->vocab_size - 1);
      lh_model_close(*m);
      *m = NULL;
      return 0;
    }
  if (c->max_position_embeddings > 0 && (int64_t)ids->len + (a->max_new > 0 ? a->max_new : 0) > c->max_position_embeddings) {
    fprintf(stderr, "longhaul %s: %zu ids%s pass the model's max_position_embeddings (%d)\n", cmd, ids->len,
            a->max_new > 0 ? " plus --max-new" : "", c->max_position_embeddings);
    lh_model_close(*m);
    *m = NULL;
    return 0;
  }
  return 1;
}

/* Ctrl-C or SIGTERM during logits: stop after the current call, remove the temporary file (it was
 * left behind, hundreds of MB, without a word) and exit 130. */
static volatile sig_atomic_t logits_stop;
static void on_logits_signal(int sig) {
  (void)sig;
  logits_stop = 1;
}

int lh_cmd_logits(int argc, char **argv) {
  engine_args a;
  int r = parse_args(argc, argv, &a);
  if (r < 0) {
    usage(stdout, "logits");
    return LH_EXIT_OK;
  }
  if (!r) return LH_EXIT_USAGE;
  /* The logits go to a new file renamed over --out, which would replace whatever is there: a
   * device (/dev/null, as root), a FIFO, a symbolic link (not its target). Only a plain file, or
   * nothing, may be at the name. */
  struct stat sb;
  if (a.out && lstat(a.out, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    fprintf(stderr, "longhaul logits: --out %s is %s, not a file: the logits are written to a new file renamed "
            "over that name, which would replace it; pass the path of a file\n", a.out,
            S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ? "a folder" : S_ISFIFO(sb.st_mode) ? "a FIFO"
            : S_ISSOCK(sb.st_mode) ? "a socket" : "a device");
    return LH_EXIT_USAGE;
  }
  lh_i32vec ids = {0};
  lh_model *m = NULL;
  if (!setup("logits", &a, &ids, &m)) {
    lh_i32vec_free(&ids);
    return LH_EXIT_USAGE;
  }
  int64_t T = (int64_t)ids.len, V = lh_model_config(m)->vocab_size;
  /* default plan: calls of max_rows tokens, fewer when the vocabulary is large, so that the
   * logits buffer stays under 256 MiB (a 200K vocabulary would need 6.5 GB at 8192 rows) */
  int64_t step = a.chunk > 0 ? a.chunk : lh_model_default_params().max_rows;
  if (a.chunk <= 0 && step * V > ((int64_t)64 << 20)) step = ((int64_t)64 << 20) / V > 0 ? ((int64_t)64 << 20) / V : 1;
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", a.out, (long)getpid());
  lh_error err;
  int fd = -1;
  FILE *f = NULL;
  /* made anew, never opened through a link planted at the name (util/fs.h) */
  if (lh_file_create_new(tmp, &fd, &err) == LH_OK && !(f = fdopen(fd, "wb"))) {
    lh_error_set(&err, LH_EIO, "%s: %s", tmp, strerror(errno));
    close(fd);
  }
  float *buf = malloc((size_t)(step < T ? step : T) * (size_t)V * sizeof(float));
  lh_state *s = NULL;
  int rc = LH_EXIT_OK;
  if (!f) {
    fprintf(stderr, "longhaul logits: %s\n", err.msg);
    rc = LH_EXIT_USAGE;
  } else if (!buf) {
    fprintf(stderr, "longhaul logits: out of memory for %lld x %lld logits\n", (long long)step, (long long)V);
    rc = LH_EXIT_FAILED;
  } else if (lh_state_new(m, &s, &err)) {
    fprintf(stderr, "longhaul logits: %s\n", err.msg);
    rc = LH_EXIT_FAILED;
  }
  double t0 = lh_now();
  logits_stop = 0;
  signal(SIGINT, on_logits_signal);
  signal(SIGTERM, on_logits_signal);
  for (int64_t p = 0; rc == LH_EXIT_OK && p < T; p += step) {
    if (logits_stop) {
      fprintf(stderr, "longhaul logits: interrupted at position %lld of %lld; nothing was written to %s\n",
              (long long)p, (long long)T, a.out);
      rc = LH_EXIT_INTERRUPTED;
      break;
    }
    int64_t n = T - p < step ? T - p : step;
    if (lh_prefill(s, ids.data + p, n, NULL, buf, &err)) {
      fprintf(stderr, "longhaul logits: at position %lld: %s\n", (long long)p, err.msg);
      rc = LH_EXIT_FAILED;
    } else if (fwrite(buf, sizeof(float), (size_t)(n * V), f) != (size_t)(n * V)) {
      fprintf(stderr, "longhaul logits: writing %s: %s\n", tmp, strerror(errno));
      rc = LH_EXIT_FAILED;
    }
  }
  if (f) {
    if (rc == LH_EXIT_OK && (fflush(f) || fsync(fileno(f)))) {
      fprintf(stderr, "longhaul logits: writing %s: %s\n", tmp, strerror(errno));
      rc = LH_EXIT_FAILED;
    }
    if (fclose(f) && rc == LH_EXIT_OK) {
      fprintf(stderr, "longhaul logits: closing %s: %s\n", tmp, strerror(errno));
      rc = LH_EXIT_FAILED;
    }
    if (rc == LH_EXIT_OK && rename(tmp, a.out)) {
      fprintf(stderr, "longhaul logits: %s: %s\n", a.out, strerror(errno));
      rc = LH_EXIT_FAILED;
    }
    if (rc != LH_EXIT_OK) unlink(tmp);
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (a.verbose && rc == LH_EXIT_OK)
    fprintf(stderr, "logits: %lld tokens in %.3f s (%.0f tokens/s)\n", (long long)T, lh_now() - t0,
            T / (lh_now() - t0));
  lh_state_free(s);
  lh_model_close(m);
  free(buf);
  lh_i32vec_free(&ids);
  return rc;
}

int lh_cmd_generate(int argc, char **argv) {
  engine_args a;
  int r = parse_args(argc, argv, &a);
  if (r < 0) {
    usage(stdout, "generate");
    return LH_EXIT_OK;
  }
  if (!r) return LH_EXIT_USAGE;
  lh_i32vec ids = {0};
  lh_model *m = NULL;
  if (!setup("generate", &a, &ids, &m)) {
    lh_i32vec_free(&ids);
    return LH_EXIT_USAGE;
  }
  const lh_config *c = lh_model_config(m);
  int64_t T = (int64_t)ids.len, step = a.chunk > 0 ? a.chunk : T;
  lh_state *s = NULL;
  lh_error err;
  int rc = LH_EXIT_OK;
  float *logits = malloc((size_t)c->vocab_size * sizeof(float));
  if (!logits || lh_state_new(m, &s, &err)) {
    fprintf(stderr, "longhaul generate: %s\n", logits ? err.msg : "out of memory");
    rc = LH_EXIT_FAILED;
  }
  double t0 = lh_now(), t1 = t0;
  for (int64_t p = 0; rc == LH_EXIT_OK && p < T; p += step) {
    int64_t n = T - p < step ? T - p : step;
    if (lh_prefill(s, ids.data + p, n, logits, NULL, &err)) {
      fprintf(stderr, "longhaul generate: at position %lld: %s\n", (long long)p, err.msg);
      rc = LH_EXIT_FAILED;
    }
  }
  t1 = lh_now();
  uint64_t rng = a.sampler.seed;
  int64_t made = 0;
  for (; rc == LH_EXIT_OK && made < a.max_new; made++) {
    const int bad = lh_logits_nonfinite(logits, c->vocab_size);
    if (bad >= 0) {
      fprintf(stderr, "longhaul generate: after %lld new tokens the logits are not finite (logit %d is %g): the "
              "model's weights or config overflow in the computation\n", (long long)made, bad, (double)logits[bad]);
      rc = LH_EXIT_FAILED;
      break;
    }
    int32_t next = lh_sample(logits, c->vocab_size, &a.sampler, &rng);
    printf("%s%d", made ? " " : "", next);
    if (a.stop_at_eos && next == c->eos_token_id) {
      made++;
      break;
    }
    if (made + 1 < a.max_new && lh_decode_batch(&s, 1, &next, logits, &err)) {
      fprintf(stderr, "longhaul generate: after %lld new tokens: %s\n", (long long)made + 1, err.msg);
      rc = LH_EXIT_FAILED;
    }
  }
  printf("\n");
  if (fflush(stdout)) rc = LH_EXIT_FAILED;
  if (a.verbose && rc == LH_EXIT_OK)
    fprintf(stderr, "generate: prefill %lld tokens in %.3f s, %lld new tokens in %.3f s\n", (long long)T, t1 - t0,
            (long long)made, lh_now() - t1);
  lh_state_free(s);
  lh_model_close(m);
  free(logits);
  lh_i32vec_free(&ids);
  return rc;
}
