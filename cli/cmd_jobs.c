/* cmd_jobs.c — `longhaul run`, `longhaul status` and `longhaul results`: the batch runner's
 * command line. Exit codes: 0 every job done, 1 some jobs failed (or lines were malformed),
 * 2 usage or set-up error, 75 stopped by the machine, not the jobs (a full disk, an I/O error, a
 * damaged store, another run holding --out: fix it and rerun; sysexits' EX_TEMPFAIL),
 * 130 interrupted (SIGINT/SIGTERM; rerun the same command to resume). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ingest/ingest.h"
#include "jobs/outnames.h"
#include "jobs/runner.h"
#include "jobs/shard.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "store/store.h"
#include "util/fs.h"
#include "util/json.h"

static void on_signal(int sig) {
  lh_runner_request_stop();
  /* a second signal ends the process at once */
  signal(sig, SIG_DFL);
}

static void run_usage(FILE *f) {
  fprintf(f,
          "usage: longhaul run BATCH.jsonl|- --model DIR --out DIR [options]   (-: the batch on standard input)\n"
          "\n"
          "Runs every request of an OpenAI Batch API file (/v1/chat/completions or /v1/completions lines;\n"
          "body.documents lists archives, folders or files to read before the messages) and writes\n"
          "OUT/output.jsonl plus OUT/jobs/<custom_id>/{result.json,manifest.jsonl}. Rerunning the same\n"
          "command resumes: finished jobs are skipped, unfinished ones continue from their last checkpoint.\n"
          "\n"
          "options:\n"
          "  --model DIR            HuggingFace model folder (config.json, safetensors, tokenizer.json)\n"
          "  --out DIR              output folder\n"
          "  --db FILE              checkpoint store (default OUT/longhaul.db); not one of the files\n"
          "                         the run writes in OUT (output.jsonl, errors.jsonl, jobs/, ...)\n"
          "  --defaults FILE        JSON with any of: model, out, db, chunk, checkpoint_every, device,\n"
          "                         threads, cpu_attention, max_tokens, chat_template, keep_checkpoints,\n"
          "                         documents_root, require_documents\n"
          "                         (flags override it)\n"
          "  --chunk N              tokens per prefill chunk (default 4096)\n"
          "  --checkpoint-every N   checkpoint after every N chunks (default 1; 0 = never)\n"
          "  --device cpu|cuda      compute backend (default cpu)\n"
          "  --threads N            CPU threads (default: all cores)\n"
          "  --cpu-attention fp32|bf16|auto   the CPU's softmax attention products: fp32 (default,\n"
          "                         the reference), bf16 as a GPU does them (about 2x faster at long\n"
          "                         context, ~3 digits; needs AMX-BF16 or AVX512-BF16), auto: bf16 where\n"
          "                         the CPU has it\n"
          "  --max-tokens N         for requests without max_tokens (default 256)\n"
          "  --chat-template minimax|raw   format chats this way instead of the model's template\n"
          "  --force                rerun jobs that are already done or failed\n"
          "  --wait                 if another run is using --out, wait for it (default: exit 75 naming it)\n"
          "  --documents-root DIR   every document must lie in DIR (after symbolic links): for batch files\n"
          "                         written by others; a document outside it fails its line with a 400\n"
          "  --require-documents    a document that gives no text (every entry skipped, no entry at all)\n"
          "                         fails the requests that name it with a 400 (default: a warning in\n"
          "                         their result.json and output line)\n"
          "  --keep-checkpoints N   at the end, each prefix keeps its final checkpoint and N before it with\n"
          "                         their states (default 4; -1 keeps all); the rest keep only KV rows\n"
          "  --shard I/N            run only shard I of N (0 <= I < N), with its own store and\n"
          "                         OUT/output-I-of-N.jsonl; requests over the same documents stay together.\n"
          "                         Without it, a Slurm array task runs shard (SLURM_ARRAY_TASK_ID - MIN) / STEP\n"
          "                         of SLURM_ARRAY_TASK_COUNT; `longhaul merge OUT` joins the shards\n"
          "  --progress auto|tty|plain|json|none   progress display (default auto)\n"
          "\n"
          "exit status: 0 all jobs done, 1 some failed, 2 usage or set-up error, 75 stopped by a full disk,\n"
          "an I/O error, a damaged store or another run on --out (fix it and rerun: nothing done is lost,\n"
          "unless the store itself was deleted, which the message says),\n"
          "130 interrupted\n");
}

/* A number of a defaults file held to its flag's rule: an integer in [lo, 2^30], or -1 where
 * minus_one says it means something (keep_checkpoints: keep all). */
static int default_int(const char *path, const cJSON *it, int lo, int minus_one, int *out) {
  const double d = it->valuedouble;
  if (d != floor(d) || !((d >= lo && d <= (double)(1 << 30)) || (minus_one && d == -1))) {
    fprintf(stderr, "longhaul run: --defaults %s: key '%s' is %.17g: expected an integer %s%d and at most %d\n",
            path, it->string, d, minus_one ? "-1 or >= " : ">= ", lo, 1 << 30);
    return -1;
  }
  *out = (int)d;
  return 0;
}

/* The keys of a defaults file and the JSON type each takes, for the message about a mistyped one. */
static const char *default_key_type(const char *k) {
  static const char *const keys[][2] = {
      {"model", "a string"},          {"out", "a string"},          {"db", "a string"},
      {"device", "a string"},         {"chat_template", "a string"}, {"documents_root", "a string"},
      {"cpu_attention", "\"fp32\", \"bf16\" or \"auto\""},            {"chunk", "an integer"},
      {"checkpoint_every", "an integer"}, {"threads", "an integer"}, {"max_tokens", "an integer"},
      {"keep_checkpoints", "an integer"}, {"require_documents", "true or false"}};
  for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
    if (!strcmp(k, keys[i][0])) return keys[i][1];
  return NULL;
}

/* Where a defaults file's bytes hold a NUL or a \u0000 inside a string (cJSON would end the
 * string there: "out": "o\u0000/x" would run into o), as a byte offset, or -1 when they hold none. */
static long nul_at(const char *s, size_t n) {
  int in_str = 0;
  for (size_t i = 0; i < n; i++) {
    if (!s[i]) return (long)i;
    if (in_str && s[i] == '\\') {
      if (i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) return (long)i;
      i++;
    } else if (s[i] == '"') {
      in_str = !in_str;
    }
  }
  return -1;
}

/* Values from a defaults file; strings point into the parsed JSON, which lives until exit. The file
 * is held to a batch line's rules: one JSON object and nothing after it, no key given twice (cJSON
 * would read the first, a person the last), no NUL in a string. */
static int apply_defaults(const char *path, lh_runner_params *p) {
  lh_buf b = {0};
  lh_error e;
  if (lh_file_read_regular(path, 1 << 20, &b, &e) != LH_OK) {
    fprintf(stderr, "longhaul run: --defaults: %s\n", e.msg);
    return -1;
  }
  const char *end = NULL;
  const long nul = nul_at(b.data ? b.data : "", b.len);
  cJSON *o = nul < 0 ? cJSON_ParseWithLengthOpts(b.data ? b.data : "", b.len, &end, 0) : NULL;
  size_t tail = o ? (size_t)(end - b.data) : 0;
  while (o && tail < b.len && strchr(" \t\r\n", b.data[tail])) tail++;
  const char *dup = NULL;
  if (o && lh_json_duplicate_key(o, 1, &dup)) dup = "?";
  int bad = 1;
  char deep[128];
  if (nul >= 0)
    fprintf(stderr, "longhaul run: --defaults %s: byte %ld holds a NUL (or \\u0000), which no option can carry\n", path,
            nul + 1);
  else if (!o && lh_json_too_deep(b.data, b.len, deep, sizeof deep))
    fprintf(stderr, "longhaul run: --defaults %s: %s\n", path, deep);
  else if (!cJSON_IsObject(o))
    fprintf(stderr, "longhaul run: --defaults %s: not a JSON object\n", path);
  else if (tail < b.len)
    fprintf(stderr, "longhaul run: --defaults %s: text after the JSON object, at byte %zu\n", path, tail + 1);
  else if (dup)
    fprintf(stderr, "longhaul run: --defaults %s: key '%.64s' is given more than once; give it once\n", path, dup);
  else
    bad = 0;
  lh_buf_free(&b);
  if (bad) {
    cJSON_Delete(o);
    return -1;
  }
  const cJSON *it;
  cJSON_ArrayForEach(it, o) {
    const char *k = it->string;
    if (cJSON_IsString(it) && !strcmp(k, "model")) p->model_dir = it->valuestring;
    else if (cJSON_IsString(it) && !strcmp(k, "out")) p->out_dir = it->valuestring;
    else if (cJSON_IsString(it) && !strcmp(k, "db")) p->db_path = it->valuestring;
    else if (cJSON_IsString(it) && !strcmp(k, "device")) p->device = it->valuestring;
    else if (cJSON_IsString(it) && !strcmp(k, "chat_template")) p->chat_template = it->valuestring;
    else if (cJSON_IsNumber(it) && !strcmp(k, "chunk")) bad = default_int(path, it, 1, 0, &p->chunk);
    else if (cJSON_IsNumber(it) && !strcmp(k, "checkpoint_every")) bad = default_int(path, it, 0, 0, &p->checkpoint_every);
    else if (cJSON_IsNumber(it) && !strcmp(k, "threads")) bad = default_int(path, it, 0, 0, &p->threads);
    else if (cJSON_IsString(it) && !strcmp(k, "cpu_attention") && lh_cpu_attention_parse(it->valuestring) >= 0)
      p->cpu_attention = lh_cpu_attention_parse(it->valuestring);
    else if (cJSON_IsNumber(it) && !strcmp(k, "max_tokens")) bad = default_int(path, it, 1, 0, &p->max_tokens_default);
    else if (cJSON_IsNumber(it) && !strcmp(k, "keep_checkpoints")) bad = default_int(path, it, 0, 1, &p->keep_checkpoints);
    else if (cJSON_IsString(it) && !strcmp(k, "documents_root")) p->documents_root = it->valuestring;
    else if (cJSON_IsBool(it) && !strcmp(k, "require_documents")) p->require_documents = cJSON_IsTrue(it);
    else {
      const char *want = default_key_type(k);
      if (want)
        fprintf(stderr, "longhaul run: --defaults %s: key '%s' takes %s\n", path, k, want);
      else
        fprintf(stderr, "longhaul run: --defaults %s: unknown key '%.64s' (known: model, out, db, device, chunk, "
                "threads, cpu_attention, max_tokens, chat_template, checkpoint_every, keep_checkpoints, "
                "documents_root, require_documents)\n", path, k);
      bad = 1;
    }
    if (bad) { /* the run stops here (exit 2): nothing reads p's strings again */
      cJSON_Delete(o);
      return -1;
    }
  }
  /* o is deliberately kept: p points into it */
  return 0;
}

/* --shard I/N: two decimal integers and nothing else, 0 <= I < N <= 2^20 (sscanf's %d/%d took
 * "1/2x" and wrapped 4294967298 to 2). */
static int parse_shard(const char *v, int *index, int *count) {
  char *end;
  errno = 0;
  const long i = strtol(v, &end, 10);
  if (end == v || *end != '/' || errno) return -1;
  const char *nv = end + 1;
  const long n = strtol(nv, &end, 10);
  if (end == nv || *end || errno || n < 1 || n > 1 << 20 || i < 0 || i >= n || !isdigit((unsigned char)*v) ||
      !isdigit((unsigned char)*nv))
    return -1;
  *index = (int)i, *count = (int)n;
  return 0;
}

static int parse_int(const char *flag, const char *v, int lo, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > 1 << 30) {
    fprintf(stderr, "longhaul run: %s %s: expected an integer >= %d and at most %d\n", flag, v, lo, 1 << 30);
    return -1;
  }
  *out = (int)x;
  return 0;
}

/* s as a table cell for a terminal, into out (n bytes): control characters (C0, DEL and C1, which
 * a hostile custom_id or answer would use to move the cursor, recolour or hide rows) become '?'. */
static const char *table_cell(const char *s, char *out, size_t n) {
  size_t k = 0;
  for (const unsigned char *c = (const unsigned char *)(s ? s : ""); *c && k + 1 < n; c++) {
    if (*c == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F) { /* U+0080..U+009F */
      out[k++] = '?';
      c++;
    } else {
      out[k++] = *c < 0x20 || *c == 0x7F ? '?' : (char)*c;
    }
  }
  out[k] = 0;
  return out;
}

/* The summary table: one row per line of output.jsonl (this run's and earlier runs' answers). */
static void print_table(const char *output_path) {
  FILE *f = fopen(output_path, "rb");
  if (!f) return;
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  int rows = 0;
  while ((n = getline(&line, &cap, f)) > 0) {
    cJSON *o = cJSON_ParseWithLength(line, (size_t)n);
    if (!o) continue;
    if (!rows++) printf("\n%-24s %-6s %10s %8s  %s\n", "custom_id", "status", "prompt_tok", "out_tok", "answer / error");
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "custom_id"));
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
    const cJSON *body = cJSON_GetObjectItemCaseSensitive(resp, "body");
    int code = (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(resp, "status_code"));
    char text[64] = "";
    double pt = 0, ct = 0;
    if (cJSON_IsObject(body)) {
      const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(body, "choices"), 0);
      const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content"));
      if (!t) t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(ch, "text"));
      const cJSON *u = cJSON_GetObjectItemCaseSensitive(body, "usage");
      pt = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens"));
      ct = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(u, "completion_tokens"));
      snprintf(text, sizeof text, "%s", t ? t : "");
    } else {
      const char *m = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"), "message"));
      snprintf(text, sizeof text, "%s", m ? m : "error");
    }
    for (char *c = text; *c; c++)
      if (*c == '\n' || *c == '\r' || *c == '\t') *c = ' ';
    char idc[128], textc[64];
    printf("%-24.24s %-6d %10.0f %8.0f  %s\n", table_cell(id ? id : "?", idc, sizeof idc), code, pt, ct,
           table_cell(text, textc, sizeof textc));
    cJSON_Delete(o);
  }
  if (rows) printf("\n");
  free(line);
  fclose(f);
}

int lh_cmd_run(int argc, char **argv) {
  lh_runner_params p = lh_runner_default_params();
  /* first pass: --defaults, so that flags override it wherever they are */
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--defaults") && apply_defaults(argv[i + 1], &p)) return LH_EXIT_USAGE;
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},     {"out", required_argument, 0, 'o'},
      {"db", required_argument, 0, 'd'},        {"chunk", required_argument, 0, 'c'},
      {"device", required_argument, 0, 'D'},    {"threads", required_argument, 0, 't'},
      {"cpu-attention", required_argument, 0, 'A'},
      {"max-tokens", required_argument, 0, 'M'}, {"chat-template", required_argument, 0, 'T'},
      {"force", no_argument, 0, 'f'},           {"shard", required_argument, 0, 's'},
      {"progress", required_argument, 0, 'P'},  {"checkpoint-every", required_argument, 0, 'k'},
      {"defaults", required_argument, 0, 'F'},  {"help", no_argument, 0, 'h'},
      {"wait", no_argument, 0, 'W'},            {"keep-checkpoints", required_argument, 0, 'K'},
      {"documents-root", required_argument, 0, 'R'}, {"require-documents", no_argument, 0, 'E'},
      {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c, shard_given = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'm': p.model_dir = optarg; break;
    case 'o': p.out_dir = optarg; break;
    case 'd': p.db_path = optarg; break;
    case 'D': p.device = optarg; break;
    case 'T': p.chat_template = optarg; break;
    case 'f': p.force = 1; break;
    case 'W': p.wait = 1; break;
    case 'R': p.documents_root = optarg; break;
    case 'E': p.require_documents = 1; break;
    case 'K':
      if (parse_int("--keep-checkpoints", optarg, -1, &p.keep_checkpoints)) return LH_EXIT_USAGE; /* -1: all */
      break;
    case 'F': break;
    case 'c': if (parse_int("--chunk", optarg, 1, &p.chunk)) return LH_EXIT_USAGE; break;
    case 't': if (parse_int("--threads", optarg, 0, &p.threads)) return LH_EXIT_USAGE; break;
    case 'A':
      if ((p.cpu_attention = lh_cpu_attention_parse(optarg)) < 0) {
        fprintf(stderr, "longhaul run: --cpu-attention %s: expected fp32, bf16 or auto\n", optarg);
        return LH_EXIT_USAGE;
      }
      break;
    case 'M': if (parse_int("--max-tokens", optarg, 1, &p.max_tokens_default)) return LH_EXIT_USAGE; break;
    case 'k': if (parse_int("--checkpoint-every", optarg, 0, &p.checkpoint_every)) return LH_EXIT_USAGE; break;
    case 's':
      if (parse_shard(optarg, &p.shard_index, &p.shard_count)) {
        fprintf(stderr, "longhaul run: --shard %s: expected I/N, two integers with 0 <= I < N <= %d\n", optarg, 1 << 20);
        return LH_EXIT_USAGE;
      }
      shard_given = 1;
      break;
    case 'P': {
      int m = lh_progress_mode_parse(optarg);
      if (m < 0) {
        fprintf(stderr, "longhaul run: --progress %s: expected auto, tty, plain, json or none\n", optarg);
        return LH_EXIT_USAGE;
      }
      p.progress = (lh_progress_mode)m;
      break;
    }
    case 'h': run_usage(stdout); return LH_EXIT_OK;
    default: return lh_args_bad_option("run", argv, opts);
    }
  }
  if (optind + 1 != argc) {
    fprintf(stderr, "longhaul run: expected exactly one batch file\n\n");
    run_usage(stderr);
    return LH_EXIT_USAGE;
  }
  p.batch_path = argv[optind];
  if (!p.model_dir || !p.out_dir) {
    fprintf(stderr, "longhaul run: --model and --out are required (or a --defaults file naming them)\n");
    return LH_EXIT_USAGE;
  }
  /* a task of a Slurm job array runs its own shard without --shard (jobs/shard.h) */
  char shard_note[256] = "";
  if (!shard_given && lh_shard_from_env(&p.shard_index, &p.shard_count, shard_note, sizeof shard_note) < 0) {
    fprintf(stderr, "longhaul run: %s\n", shard_note);
    return LH_EXIT_USAGE;
  }
  p.shard_note = shard_note;
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  lh_runner_summary sum;
  lh_error err;
  lh_error_clear(&err);
  lh_status st = lh_run_batch(&p, &sum, &err);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  const int tempfail = LH_EXIT_IS_TEMPFAIL(st);
  if (st == LH_EINTR && !sum.output_written) { /* stopped before the run began (reading a batch from a pipe) */
    fprintf(stderr, "longhaul run: %s\n", err.msg);
    return LH_EXIT_INTERRUPTED;
  }
  /* the table and the summary only for a run that wrote its output: a run stopped before (a damaged
   * store, an output folder it cannot write) would show an earlier run's file as its own */
  if (st != LH_OK && st != LH_EINTR && (!tempfail || st == LH_EBUSY || !sum.output_written)) {
    fprintf(stderr, "longhaul run: %s\n", err.msg);
    return tempfail ? LH_EXIT_TEMPFAIL : LH_EXIT_USAGE;
  }
  print_table(sum.output_path);
  printf("longhaul run: %d requests: %d done, %d failed, %d malformed line%s, %d already done%s", sum.requests,
         sum.done, sum.failed, sum.bad_lines, sum.bad_lines == 1 ? "" : "s", sum.skipped_done,
         sum.left > 0 ? "" : "\n");
  if (sum.left > 0) printf(", %d left queued\n", sum.left);
  if (sum.skipped_failed)
    printf("  %d of the already done failed in an earlier run (errors.jsonl says why): --force runs %s again\n",
           sum.skipped_failed, sum.skipped_failed == 1 ? "it" : "them");
  if (sum.taken_over)
    printf("  %d request%s taken over by another process after this run stalled: it answers %s; rerun to "
           "collect the answer%s here\n", sum.taken_over, sum.taken_over == 1 ? " was" : "s were",
           sum.taken_over == 1 ? "it" : "them", sum.taken_over == 1 ? "" : "s");
  const int elsewhere = sum.elsewhere - sum.taken_over; /* the taken over are said above */
  if (elsewhere > 0)
    printf("  %d request%s no line in %s: another process is running %s on the store %s (%s); rerun when it "
           "is done to collect %s\n", elsewhere, elsewhere == 1 ? " has" : "s have", sum.output_path,
           elsewhere == 1 ? "it" : "them", sum.db_path, sum.elsewhere_owner[0] ? sum.elsewhere_owner : "its owner",
           elsewhere == 1 ? "its answer" : "their answers");
  if (sum.not_in_shard) printf("  %d requests belong to other shards\n", sum.not_in_shard);
  if (sum.changed)
    printf("  %d request%s computed again: %s inputs changed (documents, model or parameters)\n", sum.changed,
           sum.changed == 1 ? "" : "s", sum.changed == 1 ? "its" : "their");
  if (sum.damaged)
    printf("  %d request%s computed again: %s stored answer or error was damaged\n", sum.damaged,
           sum.damaged == 1 ? "" : "s", sum.damaged == 1 ? "its" : "their");
  printf("  tokens: %lld prefilled, %lld restored from checkpoints (skipped), %lld shared between requests, "
         "%lld decoded; %.1f s\n",
         (long long)sum.tokens_prefilled, (long long)sum.tokens_restored, (long long)sum.tokens_shared,
         (long long)sum.tokens_decoded, sum.seconds);
  printf("  output: %s\n  errors: %s\n  store:  %s\n", sum.output_path, sum.errors_path, sum.db_path);
  const lh_store_stats *ss = &sum.store;
  if (ss->file_bytes)
    printf("  the store holds %lld checkpoints (%lld with states, %lld thinned to their KV rows%s), %.1f MB: states "
           "%.1f MB, KV %.1f MB\n",
           (long long)ss->checkpoints, (long long)(ss->checkpoints - ss->thin_checkpoints),
           (long long)ss->thin_checkpoints, sum.thinned ? ", some by --keep-checkpoints now" : "",
           (double)ss->file_bytes / 1e6, (double)ss->state_bytes / 1e6, (double)ss->kv_bytes / 1e6);
  if (st == LH_EINTR) {
    fprintf(stderr, "longhaul run: %s\n", err.msg);
    return LH_EXIT_INTERRUPTED;
  }
  if (tempfail) {
    fprintf(stderr, "longhaul run: %s\n", err.msg);
    return LH_EXIT_TEMPFAIL;
  }
  /* a request another process holds (taken over, or run on the same store) is not answered in this
   * run's output: rerun to collect it */
  if (sum.taken_over || sum.elsewhere) return LH_EXIT_TEMPFAIL;
  /* a failed job kept from an earlier run is still an unanswered request: exit 0 means every one answered */
  return sum.failed || sum.skipped_failed || sum.bad_lines ? LH_EXIT_FAILED : LH_EXIT_OK;
}

/* ---- status / results ----
 *
 * Both read the stores named by --out DIR (its longhaul.db and any shard's store) or --db FILE,
 * read-only. A job's progress is shown as its own: a request answered from a group's shared
 * prefix has no checkpoint of its own, so the group's counts for it (see status_usage). */

static void status_usage(FILE *f) {
  fprintf(f,
          "usage: longhaul status [--out DIR | --db FILE] [--json]\n"
          "\n"
          "The jobs of a store, one row per request: its state, tokens, attempts and error. --out DIR\n"
          "reads DIR/longhaul.db and, after runs with --shard I/N, every DIR/longhaul-shard-I-of-N.db;\n"
          "--db FILE reads that store (default ./longhaul.db). When DIR's files were written from another\n"
          "store than those read (a run that kept its store elsewhere with --db, or DIR's own when --db\n"
          "names another), a warning on standard error says so and names the job that shows it; the\n"
          "jobs printed are still those of the stores read, and the exit status is kept.\n"
          "\n"
          "  tokens_done    prompt tokens computed for the job: all of them once it is done; before,\n"
          "                 the position of the last checkpoint of its prefix (which the requests\n"
          "                 over the same documents share)\n"
          "  tokens_total   its prompt tokens (- until a run has read its documents)\n"
          "\n"
          "--json prints one object: {\"stores\": [PATH...], \"counts\": {\"queued\", \"running\", \"done\",\n"
          "\"failed\"}, \"jobs\": [JOB...]} with each JOB {\"store\", \"id\", \"batch\", \"custom_id\", \"state\",\n"
          "\"attempts\", \"tokens_done\", \"tokens_total\" (null: unknown), \"completion_tokens\" (done jobs),\n"
          "\"created\", \"started\", \"finished\" (ISO 8601 UTC, null: not yet), \"owner\", \"owner_alive\"\n"
          "(running jobs), \"error\" (failed jobs: {\"code\", \"message\", \"status_code\"})}.\n");
}

static void results_usage(FILE *f) {
  fprintf(f, "usage: longhaul results JOB [--out DIR | --db FILE]\n"
             "  print the result.json of a finished job (JOB: its custom_id or job number), from the\n"
             "  stores of --out DIR (longhaul.db and shard stores) or --db FILE (default ./longhaul.db);\n"
             "  a custom_id in several batches or stores gives the job a run changed last; with --out, an\n"
             "  answer the last run over DIR did not write out (its line refused now, gone from the batch,\n"
             "  or a run that used another store than the one read) is not printed but said so (exit 1):\n"
             "  --db FILE alone prints it\n");
}

/* Open db read-only and list its jobs (lh_store_job_list's order) into *list, *n: 0, or -1 with
 * the error printed for longhaul cmd and nothing left open. The caller frees the list with
 * lh_store_job_list_free and closes *s. */
static int open_store_jobs(const char *cmd, const char *db, lh_store **s, lh_store_job_info **list, size_t *n) {
  lh_store_params sp = lh_store_default_params();
  sp.read_only = 1;
  sp.create = 0;
  lh_error e;
  *s = NULL, *list = NULL, *n = 0;
  if (lh_store_open(db, &sp, s, &e) != LH_OK) {
    fprintf(stderr, "longhaul %s: %s\n", cmd, e.msg);
    return -1;
  }
  if (lh_store_job_list(*s, 0, list, n, &e) != LH_OK) {
    fprintf(stderr, "longhaul %s: %s: %s\n", cmd, db, e.msg);
    lh_store_close(*s);
    *s = NULL;
    return -1;
  }
  return 0;
}

/* --out DIR, --db FILE, and for status --json; the rest stays in argv[optind..). */
static int store_args(const char *cmd, int argc, char **argv, const char **db, const char **out, int *json) {
  static const struct option status_opts[] = {{"db", required_argument, 0, 'd'}, {"out", required_argument, 0, 'o'},
                                              {"json", no_argument, 0, 'j'},     {"help", no_argument, 0, 'h'},
                                              {0, 0, 0, 0}};
  static const struct option results_opts[] = {{"db", required_argument, 0, 'd'}, {"out", required_argument, 0, 'o'},
                                               {"help", no_argument, 0, 'h'},     {0, 0, 0, 0}};
  const struct option *opts = json ? status_opts : results_opts;
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'd': *db = optarg; break;
    case 'o': *out = optarg; break;
    case 'j': *json = 1; break;
    case 'h': json ? status_usage(stdout) : results_usage(stdout); return LH_EXIT_OK;
    default: return lh_args_bad_option(cmd, argv, opts);
    }
  }
  return -1;
}

static int by_group(const void *a, const void *b) {
  const lh_store_job_info *x = *(const lh_store_job_info *const *)a, *y = *(const lh_store_job_info *const *)b;
  if (x->batch_id != y->batch_id) return x->batch_id < y->batch_id ? -1 : 1;
  return strcmp(x->group_key ? x->group_key : "", y->group_key ? y->group_key : "");
}

/* tokens_done as status shows it: a done job's whole prompt; otherwise the furthest checkpoint
 * of its group's prefix (jobs of one batch with one group key share it), within its prompt. */
static int job_progress(const lh_store_job_info *v, size_t n, int64_t *done) {
  const lh_store_job_info **o = malloc((n ? n : 1) * sizeof *o);
  if (!o) return -1;
  for (size_t i = 0; i < n; i++) o[i] = &v[i], done[i] = v[i].tokens_done;
  qsort(o, n, sizeof *o, by_group);
  for (size_t i = 0, j; i < n; i = j) {
    int64_t most = 0;
    for (j = i; j < n && !by_group(&o[i], &o[j]); j++)
      if (o[j]->tokens_done > most) most = o[j]->tokens_done;
    for (size_t k = i; k < j && o[i]->group_key; k++) done[o[k] - v] = most;
  }
  free(o);
  for (size_t i = 0; i < n; i++) {
    if (v[i].state == LH_JOB_DONE && v[i].tokens_total >= 0) done[i] = v[i].tokens_total;
    else if (v[i].tokens_total >= 0 && done[i] > v[i].tokens_total) done[i] = v[i].tokens_total;
  }
  return 0;
}

static void add_time(cJSON *o, const char *key, int64_t ms) {
  if (ms <= 0) {
    cJSON_AddNullToObject(o, key);
    return;
  }
  const time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  char b[40];
  strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  cJSON_AddStringToObject(o, key, b);
}

static cJSON *job_json(lh_store *s, const char *path, const lh_store_job_info *j, int64_t done) {
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "store", path);
  cJSON_AddNumberToObject(o, "id", (double)j->id);
  lh_json_add_text(o, "batch", j->batch);
  lh_json_add_text(o, "custom_id", j->custom_id);
  cJSON_AddStringToObject(o, "state", lh_job_state_name(j->state));
  cJSON_AddNumberToObject(o, "attempts", j->attempts);
  cJSON_AddNumberToObject(o, "tokens_done", (double)done);
  if (j->tokens_total >= 0) cJSON_AddNumberToObject(o, "tokens_total", (double)j->tokens_total);
  else cJSON_AddNullToObject(o, "tokens_total");
  if (j->state == LH_JOB_DONE) {
    lh_buf js = {0};
    cJSON *r = lh_store_job_result(s, j->id, &js, NULL, NULL) == LH_OK ? cJSON_ParseWithLength(js.data, js.len) : NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "tokens"), "completion");
    if (cJSON_IsNumber(c)) cJSON_AddNumberToObject(o, "completion_tokens", c->valuedouble);
    else cJSON_AddNullToObject(o, "completion_tokens");
    cJSON_Delete(r);
    lh_buf_free(&js);
  }
  add_time(o, "created", j->created_ms);
  add_time(o, "started", j->started_ms);
  add_time(o, "finished", j->finished_ms);
  if (j->owner) {
    lh_json_add_text(o, "owner", j->owner);
    cJSON_AddBoolToObject(o, "owner_alive", j->owner_alive == 1);
  }
  if (j->error) {
    cJSON *e = cJSON_Parse(j->error);
    if (!cJSON_IsObject(e)) {
      cJSON_Delete(e);
      e = cJSON_CreateObject();
      lh_json_add_text(e, "message", j->error);
    }
    cJSON_AddItemToObject(o, "error", e);
  }
  return o;
}

/* OUT/jobs/<name>/result.json, the file a run over OUT writes for a done job, into path. */
static void job_result_path(const char *out, const lh_store_job_info *info, char *path, size_t n) {
  char name[1024];
  lh_runner_job_dirname(info->custom_id, name, sizeof name);
  snprintf(path, n, "%s/jobs/%s/result.json", out, name);
}

/* Whether the file at path was written after the job last changed in its store (a run writes the
 * store first, then OUT's files: a file older than the job is a run in progress, or its absence). */
static int written_after_job(const char *path, const lh_store_job_info *info) {
  struct stat sb;
  return !stat(path, &sb) && info->updated_ms <= (int64_t)sb.st_mtim.tv_sec * 1000 + sb.st_mtim.tv_nsec / 1000000;
}

/* Whether OUT/jobs/<name>/result.json, written after the job last changed in the store being read,
 * holds another answer than js: the last run over OUT kept its store elsewhere (--db), so what
 * OUT shows is not this store's. Then 1, naming the file in why. 0 when the file is absent, older
 * than the job (a run in progress writes the store first), or the same. */
static int answer_elsewhere(const char *out, const lh_store_job_info *info, const lh_buf *js, char *why, size_t whysz) {
  char path[4200];
  job_result_path(out, info, path, sizeof path);
  if (!written_after_job(path, info)) return 0;
  lh_buf f = {0};
  lh_error e;
  int differs = 0;
  if (lh_file_read_regular(path, (size_t)64 << 20, &f, &e) == LH_OK)
    differs = f.len != js->len || (f.len && memcmp(f.data, js->data, f.len));
  lh_buf_free(&f);
  if (differs) snprintf(why, whysz, "%s, written after it, holds another answer", path);
  return differs;
}

/* How to tell that OUT's files came from another store than the one read (answer_elsewhere), for
 * status's and results' warnings: what the last run over OUT did, and how to read the store it
 * used. Without --db, that run kept its store elsewhere (--db); with --db DB, it used another
 * store than DB: OUT's own (read with no --db) or another --db. */
static void elsewhere_words(const char *out, const char *db, char *did, size_t didn, char *fix, size_t fixn) {
  if (!db) {
    snprintf(did, didn, "kept its store elsewhere (--db)");
    snprintf(fix, fixn, "pass its --db");
    return;
  }
  snprintf(did, didn, "used another store than %s", db);
  snprintf(fix, fixn, "pass its --db instead, or leave --db out if it kept its store in %s", out);
}

/* A job of one of the stores read. Sorted by by_id_newest_last, the jobs of one custom_id come
 * together, the one a run changed last at the end (ties: the later store, the later job in its
 * list, as results picks it). */
typedef struct job_ref {
  const lh_store_job_info *job;
  size_t store, seq;
} job_ref;

static int by_id(const lh_store_job_info *x, const lh_store_job_info *y) {
  return strcmp(x->custom_id ? x->custom_id : "", y->custom_id ? y->custom_id : "");
}

static int by_id_newest_last(const void *a, const void *b) {
  const job_ref *x = a, *y = b;
  const int c = by_id(x->job, y->job);
  if (c) return c;
  if (x->job->updated_ms != y->job->updated_ms) return x->job->updated_ms < y->job->updated_ms ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Whether OUT's files were written from another store than those status read (the last run over
 * OUT kept its store elsewhere: --db). Of each custom_id, the job a run changed last (the one a run
 * over OUT wrote out, as results picks it) is held to OUT/jobs/<name>/result.json when that file
 * was written after the job last changed (answer_elsewhere): a done job whose file holds another
 * answer, or a job not done whose file is there at all (a run removes the files of a job that is
 * not done), says so. Then 1, naming the job and the file in why. Reads the stored answer and the
 * file of each such job up to the first finding; 0 also when out of memory (nothing is said). */
static int out_written_elsewhere(const char *out, char *const *paths, lh_store *const *stores,
                                 lh_store_job_info *const *lists, const size_t *counts, size_t np, char *why,
                                 size_t whysz) {
  size_t total = 0, m = 0;
  for (size_t k = 0; k < np; k++) total += counts[k];
  job_ref *v = malloc((total ? total : 1) * sizeof *v);
  if (!v) return 0;
  for (size_t k = 0; k < np; k++)
    for (size_t i = 0; i < counts[k]; i++, m++) v[m] = (job_ref){&lists[k][i], k, m};
  qsort(v, m, sizeof *v, by_id_newest_last);
  int found = 0;
  for (size_t i = 0; i < m && !found; i++) {
    if (i + 1 < m && !by_id(v[i].job, v[i + 1].job)) continue; /* a newer job of this custom_id follows */
    const lh_store_job_info *j = v[i].job;
    char path[4200], what[4400];
    job_result_path(out, j, path, sizeof path);
    if (j->state != LH_JOB_DONE) {
      if ((found = written_after_job(path, j)))
        snprintf(what, sizeof what, "%s was written after it last changed", path);
    } else {
      lh_buf js = {0};
      found = lh_store_job_result(stores[v[i].store], j->id, &js, NULL, NULL) == LH_OK &&
              answer_elsewhere(out, j, &js, what, sizeof what);
      lh_buf_free(&js);
    }
    char idc[2100];
    if (found)
      snprintf(why, whysz, "job '%s' is %s in %s, and %s", lh_ingest_display_str(j->custom_id, 200, idc, sizeof idc),
               lh_job_state_name(j->state), paths[v[i].store], what);
  }
  free(v);
  return found;
}

int lh_cmd_status(int argc, char **argv) {
  const char *db = NULL, *out = NULL;
  int json = 0;
  int rc = store_args("status", argc, argv, &db, &out, &json);
  if (rc >= 0) return rc;
  if (optind < argc) {
    fprintf(stderr, "longhaul status: unexpected argument '%s'\nsee longhaul status --help\n", argv[optind]);
    return LH_EXIT_USAGE;
  }
  char **paths;
  size_t np;
  if (lh_args_stores("status", db, out, "longhaul.db", &paths, &np)) return LH_EXIT_USAGE;
  rc = LH_EXIT_OK;
  int counts[LH_JOB_STATE_COUNT] = {0};
  size_t total = 0;
  cJSON *root = json ? cJSON_CreateObject() : NULL, *jobs = NULL, *stores = NULL;
  if (root) stores = cJSON_AddArrayToObject(root, "stores"), jobs = cJSON_CreateArray();
  /* every store and its jobs stay open to the end, for out_written_elsewhere */
  lh_store **held = calloc(np, sizeof *held);
  lh_store_job_info **lists = calloc(np, sizeof *lists);
  size_t *ns = calloc(np, sizeof *ns);
  if (!held || !lists || !ns) {
    fprintf(stderr, "longhaul status: out of memory\n");
    rc = LH_EXIT_USAGE;
  }
  for (size_t k = 0; k < np && rc == LH_EXIT_OK; k++) {
    lh_store *s;
    lh_store_job_info *list;
    size_t n;
    if (open_store_jobs("status", paths[k], &s, &list, &n)) {
      rc = LH_EXIT_USAGE;
      break;
    }
    int64_t *done = NULL;
    if (!(done = malloc((n ? n : 1) * sizeof *done)) || job_progress(list, n, done)) {
      fprintf(stderr, "longhaul status: %s: out of memory\n", paths[k]);
      rc = LH_EXIT_USAGE;
    }
    if (root) cJSON_AddItemToArray(stores, lh_json_text(paths[k]));
    if (!root && rc == LH_EXIT_OK) {
      if (np > 1) printf("%s%s\n", k ? "\n" : "", paths[k]);
      printf("%-6s %-24s %-8s %12s %12s %4s  %s\n", "job", "custom_id", "state", "tokens_done", "tokens_total",
             "try", "error");
    }
    for (size_t i = 0; rc == LH_EXIT_OK && i < n; i++) {
      const lh_store_job_info *j = &list[i];
      counts[j->state]++;
      total++;
      if (root) {
        cJSON_AddItemToArray(jobs, job_json(s, paths[k], j, done[i]));
        continue;
      }
      char err1[90] = "", tot[24] = "-";
      if (j->error) {
        cJSON *o = cJSON_Parse(j->error);
        const char *m = o ? cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "message")) : j->error;
        snprintf(err1, sizeof err1, "%s", m ? m : j->error);
        cJSON_Delete(o);
      }
      if (j->tokens_total >= 0) snprintf(tot, sizeof tot, "%lld", (long long)j->tokens_total);
      char idc[128], errc[90];
      printf("%-6lld %-24.24s %-8s %12lld %12s %4d  %s\n", (long long)j->id, table_cell(j->custom_id, idc, sizeof idc),
             lh_job_state_name(j->state), (long long)done[i], tot, j->attempts, table_cell(err1, errc, sizeof errc));
    }
    free(done);
    held[k] = s, lists[k] = list, ns[k] = n;
  }
  if (rc == LH_EXIT_OK && root) {
    cJSON *c = cJSON_AddObjectToObject(root, "counts");
    for (int i = 0; i < LH_JOB_STATE_COUNT; i++) cJSON_AddNumberToObject(c, lh_job_state_name((lh_job_state)i), counts[i]);
    cJSON_AddItemToObject(root, "jobs", jobs);
    jobs = NULL;
    char *t = cJSON_Print(root);
    if (t) printf("%s\n", t);
    free(t);
  } else if (rc == LH_EXIT_OK) {
    printf("\n%zu jobs: %d queued, %d running, %d done, %d failed\n", total, counts[LH_JOB_QUEUED],
           counts[LH_JOB_RUNNING], counts[LH_JOB_DONE], counts[LH_JOB_FAILED]);
  }
  char why[9200], did[4200], fix[4300];
  if (rc == LH_EXIT_OK && out && out_written_elsewhere(out, paths, held, lists, ns, np, why, sizeof why)) {
    elsewhere_words(out, db, did, sizeof did, fix, sizeof fix);
    fprintf(stderr, "longhaul status: warning: %s: the last run over %s %s, so these are not the jobs it wrote out "
            "there; to see them, %s\n", why, out, did, fix);
  }
  for (size_t k = 0; held && lists && ns && k < np; k++) {
    lh_store_job_list_free(lists[k], ns[k]);
    lh_store_close(held[k]);
  }
  free(held);
  free(lists);
  free(ns);
  cJSON_Delete(jobs);
  cJSON_Delete(root);
  lh_args_stores_free(paths, np);
  return rc;
}

/* Whether the answer a done job holds in the store at `where` (a store of an output folder) is not
 * what the last run over that folder wrote out: the store's output file (output.jsonl beside
 * longhaul.db, a shard's beside its store) was written after the job last changed and has no line
 * with the job's request id, because the last run refused that line or its batch no longer had
 * it. Then 1, with what that file says of want in why. 0 when it is current, or when there is
 * nothing to tell by (no output file, a run that changed the job since, a batch not named by
 * its digest). */
static int answer_not_current(const char *where, const char *want, const lh_store_job_info *info, char *why,
                              size_t whysz) {
  const char *slash = strrchr(where, '/'), *base = slash ? slash + 1 : where;
  char name[64], path[4200], rid[64];
  int i, k;
  lh_outname_build(LH_OUTNAME_STORE, 0, 1, name, sizeof name);
  if (!strcmp(base, name)) lh_outname_build(LH_OUTNAME_OUTPUT, 0, 1, name, sizeof name);
  else if (lh_outname_shard(LH_OUTNAME_STORE, base, &i, &k) && k >= 2 && i >= 0 && i < k)
    lh_outname_build(LH_OUTNAME_OUTPUT, i, k, name, sizeof name);
  else return 0;
  snprintf(path, sizeof path, "%.*s%s", (int)(base - where), where, name);
  if (!info->batch || strncmp(info->batch, "sha256:", 7) || !written_after_job(path, info)) return 0;
  lh_runner_request_id(info->batch + 7, info->custom_id, 0, rid, sizeof rid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char *line = NULL;
  size_t cap = 0;
  int current = 0;
  snprintf(why, whysz, "%s has no line for it: the last run's batch does not have it", path);
  while (!current && getline(&line, &cap, f) > 0) {
    cJSON *o = cJSON_Parse(line);
    const char *cid = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "custom_id"));
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "id"));
    if (cid && !strcmp(cid, want)) {
      current = id && !strcmp(id, rid);
      const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
      const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "message"));
      char shown[10300]; /* it may quote a custom_id or a path of the batch */
      snprintf(why, whysz, "its line in %s is %s%s", path, msg ? "an error: " : "another batch's answer",
               msg ? lh_ingest_display_str(msg, 1024, shown, sizeof shown) : "");
    }
    cJSON_Delete(o);
  }
  free(line);
  fclose(f);
  return !current;
}

int lh_cmd_results(int argc, char **argv) {
  const char *db = NULL, *out = NULL;
  int rc = store_args("results", argc, argv, &db, &out, NULL);
  if (rc >= 0) return rc;
  if (optind + 1 != argc) {
    fprintf(stderr, "longhaul results: expected one JOB (its custom_id or job number)\nsee longhaul results --help\n");
    return LH_EXIT_USAGE;
  }
  /* JOB as typed is what is looked for; messages show it with its control bytes escaped (want) */
  const char *job = argv[optind];
  char want[2100];
  lh_ingest_display_str(job, 200, want, sizeof want);
  char **paths;
  size_t np;
  if (lh_args_stores("results", db, out, "longhaul.db", &paths, &np)) return LH_EXIT_USAGE;
  /* JOB is a custom_id first: a job number counts only when no job is called JOB (batches often
   * number their custom_ids, and job numbers are the store's, not the batch's). When a custom_id
   * was used in several batches, or by several runs into one OUT (shards and a whole run side by
   * side), the job changed last wins, whichever store holds it: it is the one the last run over it
   * wrote out (ties: the later batch, the later store). */
  struct pick {
    lh_store *store;
    const char *where;
    int64_t id, newest;
    int matches;
  } by[2] = {{NULL, NULL, 0, INT64_MIN, 0}, {NULL, NULL, 0, INT64_MIN, 0}}; /* [0] custom_id, [1] number */
  rc = LH_EXIT_FAILED;
  for (size_t k = 0; k < np; k++) {
    lh_store *s;
    lh_store_job_info *list;
    size_t n;
    if (open_store_jobs("results", paths[k], &s, &list, &n)) {
      rc = LH_EXIT_USAGE;
      break;
    }
    int here[2] = {0, 0};
    for (size_t i = 0; i < n; i++) {
      char num[32];
      snprintf(num, sizeof num, "%lld", (long long)list[i].id);
      for (int w = 0; w < 2; w++) {
        if (strcmp(w == 0 ? list[i].custom_id : num, job)) continue;
        by[w].matches++;
        if (list[i].updated_ms >= by[w].newest) {
          by[w].newest = list[i].updated_ms;
          by[w].id = list[i].id;
          here[w] = 1;
        }
      }
    }
    lh_store_job_list_free(list, n);
    int kept = 0;
    for (int w = 0; w < 2; w++) {
      if (!here[w]) continue;
      if (by[w].store != by[1 - w].store) lh_store_close(by[w].store);
      by[w].store = s, by[w].where = paths[k];
      kept = 1;
    }
    if (!kept) lh_store_close(s);
  }
  const int w = by[0].matches ? 0 : 1;
  lh_store *found = by[w].store;
  if (by[1 - w].store != found) lh_store_close(by[1 - w].store);
  const char *where = by[w].where;
  const int64_t id = by[w].id;
  const int matches = by[w].matches;
  if (rc != LH_EXIT_USAGE && !found) {
    fprintf(stderr, "longhaul results: no job '%s' in %s%s\n", want, paths[0], np > 1 ? " or the shard stores beside it" : "");
  } else if (found) {
    lh_buf js = {0};
    lh_store_job_info info;
    lh_error e;
    char why[LH_ERROR_MSG_MAX + 4400];
    lh_status st_res = LH_EIO;
    memset(&info, 0, sizeof info);
    if (lh_store_job_get(found, id, &info, &e) == LH_OK && info.state == LH_JOB_FAILED && info.damaged > 0) {
      fprintf(stderr, "longhaul results: job '%s' is failed, and its stored error fails its checksum (the store was "
              "damaged); rerun the batch to compute it again\n", want);
    } else if (info.state != LH_JOB_DONE && info.batch) {
      char shown[10300]; /* the error may quote a custom_id or a path of the batch */
      fprintf(stderr, "longhaul results: job '%s' is %s%s%s\n", want, lh_job_state_name(info.state),
              info.error ? ": " : "", info.error ? lh_ingest_display_str(info.error, 1024, shown, sizeof shown) : "");
    } else if (out && w == 0 && answer_not_current(where, job, &info, why, sizeof why)) {
      fprintf(stderr, "longhaul results: '%s' has no answer from the last run over %s (%s); the one in the store "
              "was written for an earlier batch (%s): --db %s prints it\n", want, out, why, info.batch, where);
    } else if ((st_res = lh_store_job_result(found, id, &js, NULL, &e)) == LH_OK && out && w == 0 &&
               answer_elsewhere(out, &info, &js, why, sizeof why)) {
      char did[4200], fix[4300];
      elsewhere_words(out, db, did, sizeof did, fix, sizeof fix);
      fprintf(stderr, "longhaul results: '%s': the answer in %s is not the one the last run over %s wrote out (%s); "
              "that run %s: %s\n", want, where, out, why, did, fix);
    } else if (st_res == LH_OK) {
      cJSON *o = cJSON_ParseWithLength(js.data, js.len);
      char *pretty = o ? cJSON_Print(o) : NULL;
      printf("%s\n", pretty ? pretty : js.data);
      free(pretty);
      cJSON_Delete(o);
      if (matches > 1)
        fprintf(stderr, "longhaul results: %d jobs %s '%s'; this is the one a run changed last, in %s\n", matches,
                w == 0 ? "are called" : "have the number", want, where);
      rc = LH_EXIT_OK;
    } else {
      fprintf(stderr, "longhaul results: %s\n", e.msg);
    }
    lh_store_job_info_clear(&info);
    lh_buf_free(&js);
  }
  lh_store_close(found);
  lh_args_stores_free(paths, np);
  return rc;
}
