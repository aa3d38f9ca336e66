/* cmd_niah.c — `longhaul niah`: a needle-in-a-haystack sweep, `longhaul niah plot OUT` to redraw
 * its figures from results.jsonl (on any machine with cairo), and `longhaul niah compare A B` to set
 * two sweeps side by side with their difference. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "jobs/niah.h"
#include "jobs/niah_plot.h"
#include "cli/commands.h"

/* x floored to `decimals` places, so a printed 1.000 means every trial was right (as the heatmap) */
static double down(double x, int decimals) {
  const double k = pow(10, decimals);
  return floor(x * k + 1e-9) / k;
}

static void on_signal(int sig) {
  lh_niah_request_stop();
  signal(sig, SIG_DFL);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul niah --model DIR --out DIR [options]\n"
          "       longhaul niah plot OUT [--wait]\n"
          "                                   redraw OUT/heatmap.{png,svg}, results.csv, summary.json\n"
          "                                   (a sweep running in OUT is waited for with --wait)\n"
          "       longhaul niah compare A B [--out DIR]\n"
          "                                   two sweeps side by side and B - A per cell, into DIR\n"
          "                                   (default A/compare-with-<B's name>): compare.png, .svg,\n"
          "                                   .json, .csv\n"
          "\n"
          "A needle-in-a-haystack sweep: for every length x depth x trial, a needle (a key and a random\n"
          "7-digit value) is placed in a haystack of real text at that depth and the model is asked for it.\n"
          "The haystack prefix before each needle is computed once for the whole sweep and checkpointed,\n"
          "so a killed sweep resumes where it stopped.\n"
          "\n"
          "options:\n"
          "  --corpus INPUT         haystack: an archive, folder or file (default: the built-in one,\n"
          "                         examples/niah/haystack.tar.xz)\n"
          "  --lengths LIST         e.g. 1k,4k,16k,64k,128k,1m (k = 1024, m = 1048576; default 1k,4k,16k)\n"
          "  --depths SPEC          FROM:TO:STEP or a list, in percent (default 0:100:10)\n"
          "  --trials N             trials per cell, each with its own key and value (default 1)\n"
          "  --variant V            single | multikey | multivalue | multiquery (RULER's; default single)\n"
          "                         | whichfile (with --families: the path of the document that holds\n"
          "                         the fact is asked for)\n"
          "  --needles N            needles per trial for the multi variants (default 4; multiquery 2)\n"
          "                         (a trial's score is RULER's: the share of its expected values the\n"
          "                         answer holds; summary.json's all_values counts answers with all,\n"
          "                         same_set those listing exactly them, in any order, nothing more)\n"
          "  --needle TPL           needle template with {key} and {value}\n"
          "                         (default \"The special magic {key} number is: {value}.\")\n"
          "  --question TPL         question template ({key}; {key2} for multiquery)\n"
          "  --answer TPL           expected answer template (default \"{value}\")\n"
          "  --families FILE        draw every trial's fact from a grammar of facts instead (needle of\n"
          "                         many kinds of text, question, value kind, attribute, key), e.g.\n"
          "                         tools/train_tiny/heldout_families.json (its README has the format);\n"
          "                         with single, multikey, multivalue or whichfile, not with --needle,\n"
          "                         --question or --answer. results.jsonl says each trial's family and\n"
          "                         summary.json gives the accuracy per needle kind and value kind\n"
          "  --save-prompts         write each trial's prompt to OUT/prompts/L<len>-D<depth>-T<trial>.txt\n"
          "  --seed N               (default 20261201)\n"
          "  --chunk N              tokens per prefill chunk and checkpoint (default 4096)\n"
          "  --max-tokens N         answer length cap (default 128, as RULER's NIAH tasks)\n"
          "  --device cpu|cuda      --threads N   --db FILE (default OUT/niah.db)\n"
          "  --cpu-attention fp32|bf16|auto   as in `longhaul run` (default fp32)\n"
          "  --force                discard earlier results and prompts in OUT, start fresh\n"
          "  --extend               grow the sweep in OUT: this run's lengths, depths and trials must\n"
          "                         hold all of its (its finished trials are kept, the new ones run)\n"
          "                         (without either, a sweep into an OUT that holds another sweep, or\n"
          "                         the same one over other lengths, depths or trials, is refused)\n"
          "  --wait                 if another sweep is using --out, wait for it (default: exit 75\n"
          "                         naming it)\n"
          "  --progress auto|tty|plain|json|none\n"
          "\n"
          "exit status: 0 done, 2 usage or set-up error, 75 stopped by the machine, not the sweep (a full\n"
          "disk, an I/O error, a damaged store, another sweep using --out): fix that and rerun, 130\n"
          "interrupted (rerun the same command to resume)\n"
          "\n"
          "writes OUT/results.jsonl, results.csv, summary.json, sweep.json, heatmap.png, heatmap.svg\n");
}

static void compare_usage(FILE *f) {
  fprintf(f,
          "usage: longhaul niah compare A B [--out DIR]\n"
          "\n"
          "Two NIAH sweeps (folders written by `longhaul niah`) side by side: A's and B's heatmaps on the\n"
          "union of their cells, the difference B - A for every cell both have (a cell of only one is\n"
          "marked), each sweep's overall score and accuracy per length. Writes compare.png, compare.svg,\n"
          "compare.json and compare.csv into DIR (default A/compare-with-<B's folder name>).\n"
          "Exit status: 0 written; 1 the figure could not be drawn (the JSON and CSV are written);\n"
          "2 a folder holds no sweep, or the two have no cell in common.\n");
}

static int cmd_compare(int argc, char **argv) {
  const char *dirs[2] = {0}, *out = NULL;
  int nd = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      compare_usage(stdout);
      return LH_EXIT_OK;
    } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!strncmp(argv[i], "--out=", 6)) {
      out = argv[i] + 6;
    } else if (argv[i][0] == '-' && argv[i][1]) {
      fprintf(stderr, "longhaul niah compare: unknown option %s\n", argv[i]);
      compare_usage(stderr);
      return LH_EXIT_USAGE;
    } else if (nd < 2) {
      dirs[nd++] = argv[i];
    } else {
      nd++;
    }
  }
  if (nd != 2) {
    compare_usage(stderr);
    return LH_EXIT_USAGE;
  }
  lh_niah_comparison c;
  lh_error e;
  lh_error_clear(&e);
  const lh_status st = lh_niah_compare(dirs[0], dirs[1], out, &c, &e);
  if (st != LH_OK && st != LH_EUNSUPPORTED) {
    fprintf(stderr, "longhaul niah compare: %s\n", e.msg);
    return st == LH_EINVAL || st == LH_ENOTFOUND ? LH_EXIT_USAGE : LH_EXIT_FAILED;
  }
  char a[16], b[16], aa[16], ba[16], d[16];
  lh_niah_score_label(c.score_a, 1, a, sizeof a);
  lh_niah_score_label(c.all_values_a, 1, aa, sizeof aa);
  lh_niah_score_label(c.score_b, 1, b, sizeof b);
  lh_niah_score_label(c.all_values_b, 1, ba, sizeof ba);
  printf("longhaul niah compare: A = %s, B = %s (score = %s)\n", dirs[0], dirs[1], LH_NIAH_SCORE_METRIC);
  printf("  A: score %s%%, every value %s%%, %d trials in %d cells\n", a, aa, c.trials_a, c.cells_a);
  printf("  B: score %s%%, every value %s%%, %d trials in %d cells\n", b, ba, c.trials_b, c.cells_b);
  lh_niah_score_label(c.common_a, 1, a, sizeof a);
  lh_niah_score_label(c.common_b, 1, b, sizeof b);
  lh_niah_diff_label(c.common_b - c.common_a, 1, d, sizeof d);
  printf("  %d cells in common (A only %d, B only %d): A %s%%, B %s%%, B - A %s points\n", c.common,
         c.cells_a - c.common, c.cells_b - c.common, a, b, d);
  printf("  %-8s %8s %8s %8s\n", "length", "A", "B", "B - A");
  for (int i = 0; i < c.n_lengths; i++) {
    const lh_niah_compare_length *L = &c.by_length[i];
    char len[16];
    lh_niah_length_label(L->length, len, sizeof len);
    lh_niah_score_label(L->a, 1, a, sizeof a);
    lh_niah_score_label(L->b, 1, b, sizeof b);
    lh_niah_diff_label(L->diff, 1, d, sizeof d);
    printf("  %-8s %8s %8s %8s\n", len, a, b, d);
  }
  if (st == LH_EUNSUPPORTED) {
    fprintf(stderr, "longhaul niah compare: %s\n", e.msg);
    printf("  wrote %s/compare.json, compare.csv (no figure)\n", c.out_dir);
    return LH_EXIT_FAILED;
  }
  printf("  wrote %s/compare.png, compare.svg, compare.json, compare.csv\n", c.out_dir);
  return LH_EXIT_OK;
}

int lh_cmd_niah(int argc, char **argv) {
  if (argc >= 2 && !strcmp(argv[1], "compare")) return cmd_compare(argc, argv);
  if (argc >= 2 && !strcmp(argv[1], "plot")) {
    const int wait = argc == 4 && !strcmp(argv[3], "--wait");
    if (argc != 3 && !wait) {
      fprintf(stderr, "usage: longhaul niah plot OUT [--wait]\n");
      return LH_EXIT_USAGE;
    }
    lh_error e;
    if (!lh_niah_can_plot()) {
      lh_niah_plot(NULL, 0, NULL, NULL, NULL, &e); /* the error that says why and what to do */
      fprintf(stderr, "longhaul niah plot: %s\n", e.msg);
      return LH_EXIT_FAILED;
    }
    if (lh_niah_plot_dir(argv[2], wait, &e) != LH_OK) {
      fprintf(stderr, "longhaul niah plot: %s\n", e.msg);
      return LH_EXIT_FAILED;
    }
    printf("longhaul niah plot: wrote %s/heatmap.png, heatmap.svg, results.csv, summary.json\n", argv[2]);
    return LH_EXIT_OK;
  }
  lh_niah_params p = lh_niah_default_params();
  lh_error e;
  const char *lengths = "1k,4k,16k", *depths = "0:100:10";
  static const struct option opts[] = {
      {"model", required_argument, 0, 'm'},   {"out", required_argument, 0, 'o'},
      {"corpus", required_argument, 0, 'c'},  {"lengths", required_argument, 0, 'L'},
      {"depths", required_argument, 0, 'D'},  {"trials", required_argument, 0, 't'},
      {"variant", required_argument, 0, 'V'}, {"needles", required_argument, 0, 'n'},
      {"needle", required_argument, 0, 'N'},  {"question", required_argument, 0, 'Q'},
      {"answer", required_argument, 0, 'A'},  {"seed", required_argument, 0, 's'},
      {"chunk", required_argument, 0, 'k'},   {"max-tokens", required_argument, 0, 'M'},
      {"device", required_argument, 0, 'd'},  {"threads", required_argument, 0, 'T'},
      {"cpu-attention", required_argument, 0, 'X'},
      {"db", required_argument, 0, 'b'},      {"force", no_argument, 0, 'f'},
      {"extend", no_argument, 0, 'E'},       {"families", required_argument, 0, 'F'},
      {"save-prompts", no_argument, 0, 'S'},  {"wait", no_argument, 0, 'W'},
      {"progress", required_argument, 0, 'P'}, {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    char *end = NULL;
    switch (c) {
    case 'm': p.model_dir = optarg; break;
    case 'o': p.out_dir = optarg; break;
    case 'c': p.corpus = optarg; break;
    case 'L': lengths = optarg; break;
    case 'D': depths = optarg; break;
    case 'N': p.needle = optarg; break;
    case 'Q': p.question = optarg; break;
    case 'A': p.answer = optarg; break;
    case 'F': p.families = optarg; break;
    case 'S': p.save_prompts = 1; break;
    case 'd': p.device = optarg; break;
    case 'X':
      if ((p.cpu_attention = lh_cpu_attention_parse(optarg)) < 0) {
        fprintf(stderr, "longhaul niah: --cpu-attention %s: expected fp32, bf16 or auto\n", optarg);
        return LH_EXIT_USAGE;
      }
      break;
    case 'b': p.db_path = optarg; break;
    case 'f': p.force = 1; break;
    case 'E': p.extend = 1; break;
    case 'W': p.wait = 1; break;
    case 'V': {
      int v = lh_niah_variant_parse(optarg);
      if (v < 0) {
        fprintf(stderr, "longhaul niah: --variant %s: expected single, multikey, multivalue, multiquery or whichfile\n",
                optarg);
        return LH_EXIT_USAGE;
      }
      p.variant = (lh_niah_variant)v;
      break;
    }
    case 'P': {
      int m = lh_progress_mode_parse(optarg);
      if (m < 0) {
        fprintf(stderr, "longhaul niah: --progress %s: expected auto, tty, plain, json or none\n", optarg);
        return LH_EXIT_USAGE;
      }
      p.progress = (lh_progress_mode)m;
      break;
    }
    case 't': case 'n': case 's': case 'k': case 'M': case 'T': {
      /* an int option past 2^30 would be cut to another number (or a negative one) silently */
      const char *flag = c == 't' ? "--trials" : c == 'n' ? "--needles" : c == 's' ? "--seed" : c == 'k' ? "--chunk"
                         : c == 'M' ? "--max-tokens" : "--threads";
      const long long lo = c == 'T' || c == 's' ? 0 : 1, hi = c == 's' ? LLONG_MAX : 1 << 30;
      errno = 0;
      long long v = strtoll(optarg, &end, 10);
      if (!*optarg || *end || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "longhaul niah: %s %s: expected an integer >= %lld and at most %lld\n", flag, optarg, lo, hi);
        return LH_EXIT_USAGE;
      }
      if (c == 't') p.trials = (int)v;
      else if (c == 'n') p.n_needles = (int)v;
      else if (c == 's') p.seed = (uint64_t)v;
      else if (c == 'k') p.chunk = (int)v;
      else if (c == 'M') p.max_tokens = (int)v;
      else p.threads = (int)v;
      break;
    }
    case 'h': usage(stdout); return LH_EXIT_OK;
    default: usage(stderr); return LH_EXIT_USAGE;
    }
  }
  if (optind != argc || !p.model_dir || !p.out_dir) {
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  if (p.force && p.extend) {
    fprintf(stderr, "longhaul niah: --force starts OUT afresh and --extend adds to it: pass one of them\n");
    return LH_EXIT_USAGE;
  }
  if ((p.n_lengths = lh_niah_parse_lengths(lengths, p.lengths, LH_NIAH_MAX_CELLS, &e)) < 0 ||
      (p.n_depths = lh_niah_parse_depths(depths, p.depths, LH_NIAH_MAX_CELLS, &e)) < 0) {
    fprintf(stderr, "longhaul niah: %s\n", e.msg);
    return LH_EXIT_USAGE;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  lh_niah_summary s;
  lh_error_clear(&e);
  lh_status st = lh_niah_run(&p, &s, &e);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  if (st != LH_OK && st != LH_EINTR) {
    fprintf(stderr, "longhaul niah: %s\n", e.msg);
    const int tempfail = LH_EXIT_IS_TEMPFAIL(st);
    return tempfail ? LH_EXIT_TEMPFAIL : LH_EXIT_USAGE;
  }
  /* the summary only for a sweep that wrote its reports: one stopped before (waiting for OUT's
   * lock, loading the model, reading the corpus, drawing the trials) has no results to show */
  if (st == LH_EINTR && !s.trials) {
    fprintf(stderr, "longhaul niah: %s\n", e.msg);
    return LH_EXIT_INTERRUPTED;
  }
  printf("longhaul niah: %d trials (%d run now, %d from earlier runs): accuracy %.3f, exact %.3f", s.trials,
         s.trials_run, s.trials_resumed, down(s.accuracy, 3), down(s.exact, 3));
  if (fabs(s.all_values - s.accuracy) > 1e-9 || fabs(s.same_set - s.all_values) > 1e-9)
    printf(", every value %.3f, exactly those values %.3f", down(s.all_values, 3), down(s.same_set, 3));
  printf("\n");
  for (int i = 0; i < s.n_lengths; i++) {
    const lh_niah_length *L = &s.by_length[i];
    char len[32];
    if (L->length % 1048576 == 0) snprintf(len, sizeof len, "%lldM", (long long)(L->length / 1048576));
    else if (L->length % 1024 == 0) snprintf(len, sizeof len, "%lldK", (long long)(L->length / 1024));
    else snprintf(len, sizeof len, "%lld", (long long)L->length);
    printf("  %-6s %5d trials: accuracy %.3f; worst depth %g%%: %.2f over %d trial%s\n", len, L->trials,
           down(L->accuracy, 3), L->worst_depth, down(L->worst_score, 2), L->worst_trials,
           L->worst_trials == 1 ? "" : "s");
  }
  for (int g = 0; g < 2; g++) { /* with --families: by the needle's kind of text, by the value's kind */
    const lh_niah_group *G = g ? s.by_value_kind : s.by_needle_kind;
    const int n = g ? s.n_value_kinds : s.n_needle_kinds;
    if (n) printf("  by %s:", g ? "value kind" : "needle kind");
    for (int i = 0; i < n; i++) printf(" %s %.2f (%d)%s", G[i].name, down(G[i].accuracy, 2), G[i].trials, i + 1 < n ? "," : "\n");
  }
  printf("  tokens computed %lld of a naive %lld (%.1f%%); %lld restored from checkpoints in this run; %.1f s\n",
         (long long)s.tokens_computed, (long long)s.tokens_naive,
         s.tokens_naive ? 100.0 * (double)s.tokens_computed / (double)s.tokens_naive : 0.0,
         (long long)s.tokens_restored, s.seconds);
  printf("  results: %s/results.jsonl, results.csv, summary.json%s\n", p.out_dir,
         lh_niah_can_plot() ? ", heatmap.png, heatmap.svg" : " (no heatmap: built without cairo)");
  if (st == LH_EINTR) {
    fprintf(stderr, "longhaul niah: %s\n", e.msg);
    return LH_EXIT_INTERRUPTED;
  }
  return LH_EXIT_OK;
}
