/* cmd_merge.c — `longhaul merge OUT`: the shard runs' output files into OUT/output.jsonl and
 * OUT/errors.jsonl (jobs/merge.h). Exit codes: 0 merged, 1 the shards do not add up to the batch
 * (nothing written; the message names the shard, file and line), 2 usage or set-up error, 75 OUT
 * or a shard is in use, or an I/O error (as `run`). */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "jobs/merge.h"


static void merge_usage(FILE *f) {
  fprintf(f,
          "usage: longhaul merge OUT [--batch BATCH.jsonl] [--shards N] [--wait]\n"
          "\n"
          "Assembles OUT/output.jsonl and OUT/errors.jsonl from the shard runs in OUT (`longhaul run BATCH\n"
          "--shard I/N --out OUT` writes OUT/output-I-of-N.jsonl and OUT/errors-I-of-N.jsonl): every request's\n"
          "line once, in batch order, the bytes one run of the whole batch writes (apart from `created`\n"
          "times). Nothing is written, and the message names the shard, file and line, when a shard is\n"
          "missing or has not finished, two shards answer one request, OUT holds shards of several N, a\n"
          "shard ran another batch (every line's id is checked against the batch file's content), or the\n"
          "shards' records (OUT/shard-I-of-N.json) name different models.\n"
          "\n"
          "options:\n"
          "  --batch FILE     the batch file the shards ran (default: the one OUT/shard-I-of-N.json names)\n"
          "  --shards N       merge the shards of N when OUT holds several splits\n"
          "  --out DIR        the output folder, as an option instead of OUT\n"
          "  --wait           if another process is using OUT, wait for it (default: exit 75 naming it)\n"
          "\n"
          "exit status: 0 merged (failed requests are lines of errors.jsonl, as in `run`), 1 the shards do\n"
          "not add up to the batch (nothing written), 2 usage or set-up error, 75 OUT or a shard is in use\n"
          "(a shard still running), or an I/O error\n");
}

int lh_cmd_merge(int argc, char **argv) {
  lh_merge_params p = lh_merge_default_params();
  static const struct option opts[] = {{"batch", required_argument, 0, 'b'}, {"shards", required_argument, 0, 'n'},
                                       {"out", required_argument, 0, 'o'},   {"wait", no_argument, 0, 'W'},
                                       {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'b': p.batch_path = optarg; break;
    case 'o': p.out_dir = optarg; break;
    case 'W': p.wait = 1; break;
    case 'n': {
      char *end;
      long n = strtol(optarg, &end, 10);
      if (!*optarg || *end || n < 2 || n > 100000) {
        fprintf(stderr, "longhaul merge: --shards %s: expected the N of --shard I/N (2 or more)\n", optarg);
        return LH_EXIT_USAGE;
      }
      p.shards = (int)n;
      break;
    }
    case 'h': merge_usage(stdout); return LH_EXIT_OK;
    default: return lh_args_bad_option("merge", argv, opts);
    }
  }
  if (optind < argc && !p.out_dir) p.out_dir = argv[optind++];
  if (!p.out_dir || optind != argc) {
    fprintf(stderr, "longhaul merge: expected one output folder (the --out of the shard runs)\n\n");
    merge_usage(stderr);
    return LH_EXIT_USAGE;
  }
  lh_merge_report rep;
  lh_error err;
  lh_error_clear(&err);
  lh_status st = lh_merge_shards(&p, &rep, &err);
  if (st != LH_OK) {
    fprintf(stderr, "longhaul merge: %s\n", err.msg);
    if (st == LH_ECORRUPT) return LH_EXIT_FAILED;
    if (st == LH_EBUSY || st == LH_EIO || st == LH_EFULL) return LH_EXIT_TEMPFAIL;
    return LH_EXIT_USAGE;
  }
  printf("longhaul merge: %d shards of %s: %d requests, %d answered, %d failed", rep.shards, rep.batch_path, rep.lines,
         rep.lines - rep.failed, rep.failed);
  if (rep.rejected) printf(" (%d of them lines the batch rejects)", rep.rejected);
  printf("\n  output: %s\n  errors: %s\n", rep.output_path, rep.errors_path);
  return LH_EXIT_OK;
}
