/* main.c — the longhaul command line: dispatch to a subcommand (see commands.h).
 *
 * Started as R ranks (`mpirun -np R build/longhaul run ...`, or R processes with LH_WORLD_SIZE,
 * LH_RANK and LH_RENDEZVOUS), every process joins the world of ranks first (engine/comm.h): rank 0
 * runs the command, and every model it opens spans all ranks; ranks 1..R-1 only serve rank 0's
 * engine calls and print nothing of their own. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/comm.h"
#include "cli/args.h"
#include "cli/commands.h"

typedef struct command {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
} command;

static const command commands[] = {
    {"run", lh_cmd_run, "run a batch file of jobs (OpenAI Batch API JSONL with documents)"},
    {"status", lh_cmd_status, "show jobs in a store"},
    {"results", lh_cmd_results, "print a finished job's result"},
    {"merge", lh_cmd_merge, "assemble the output files of `run --shard I/N` runs in batch order"},
    {"niah", lh_cmd_niah, "run a needle-in-a-haystack sweep and draw its heatmap"},
    {"ingest", lh_cmd_ingest, "turn archives, folders and files into tokens and a manifest"},
    {"tokenize", lh_cmd_tokenize, "encode or decode text with a HF tokenizer.json"},
    {"store", lh_cmd_store, "list, verify or garbage-collect a checkpoint store"},
    {"model", lh_cmd_model, "describe a model folder (model info)"},
    {"logits", lh_cmd_logits, "write every position's logits for a list of token ids"},
    {"generate", lh_cmd_generate, "greedy continuation of a list of token ids"},
};

static void usage(FILE *f) {
  fprintf(f, "usage: longhaul COMMAND [ARGS...]\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
  fprintf(f, "\n'longhaul COMMAND --help' describes a command's options.\n");
}

static lh_comm *g_world;

/* Rank 0, however the command ends: release the serving ranks, then leave the world. */
static void leave_world(void) {
  lh_rank_release(g_world);
  lh_comm_finish(g_world);
  g_world = NULL;
}

static int dispatch(int argc, char **argv);

/* The weights are memory-mapped: a model file truncated or replaced in place while a command runs
 * makes the next read of a page past its new end a SIGBUS, which killed the process without a word
 * (generate's output then looked merely short). Say what it means, then die of it as before. */
static void on_sigbus(int sig) {
  static const char msg[] = "\nlonghaul: SIGBUS: a memory-mapped file was cut short while in use (a model file "
                            "truncated or rewritten in place under this run?); nothing more can be read from it: "
                            "put the file back and run again\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Started with standard input, output or error closed (`longhaul run ... 2>&-`), the next file
 * opened would take that number, and the progress log would go into longhaul.lock, a table into
 * whatever file held 1. Each closed one is opened on /dev/null, the wrong way round, so that its
 * number is taken and using it still fails with EBADF ("read error", nothing printed). */
static void hold_closed_std_fds(void) {
  for (int fd = 0; fd <= 2; fd++) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    int got = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (got >= 0 && got != fd) close(got); /* only the lowest free number is wanted */
  }
}

int main(int argc, char **argv) {
  hold_closed_std_fds();
  signal(SIGBUS, on_sigbus);
  /* Reaching a file size limit (ulimit -f) would kill the process by SIGXFSZ in the middle of a
   * store write, without a word; ignored, the write fails with EFBIG and the run stops as on a full
   * disk (exit 75, nothing lost, the limit named). */
  signal(SIGXFSZ, SIG_IGN);
  lh_error err;
  if (lh_comm_init(&argc, &argv, &g_world, &err)) {
    fprintf(stderr, "longhaul: %s\n", err.msg);
    return LH_EXIT_FAILED;
  }
  if (g_world && lh_comm_rank(g_world) > 0) {
    int rc = lh_rank_serve(g_world);
    lh_comm_finish(g_world);
    return rc;
  }
  if (g_world) atexit(leave_world);
  int rc = dispatch(argc, argv);
  /* what a command printed and could not write (a full disk, /dev/full, a closed pipe's EIO) is no
   * success, and is said once here for every command (model info exited 0 into /dev/full) */
  errno = 0;
  if ((fflush(stdout) || ferror(stdout)) && errno != EBADF) { /* EBADF: started with stdout closed */
    fprintf(stderr, "longhaul: writing to standard output failed%s%s\n", errno ? ": " : "", errno ? strerror(errno) : "");
    if (rc == 0) rc = 1;
  }
  return rc;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return LH_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return LH_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("longhaul %s\n", LH_VERSION);
    return LH_EXIT_OK;
  }
  const size_t n = sizeof commands / sizeof *commands;
  const char *names[sizeof commands / sizeof *commands];
  for (size_t i = 0; i < n; i++) {
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    names[i] = commands[i].name;
  }
  const char *near = lh_args_nearest(argv[1][0] == '-' ? "" : argv[1], names, n);
  if (argv[1][0] == '-') fprintf(stderr, "longhaul: unknown option %s before the command\n", argv[1]);
  else if (near) fprintf(stderr, "longhaul: unknown command '%s'; did you mean '%s'?\n", argv[1], near);
  else fprintf(stderr, "longhaul: unknown command '%s'\n", argv[1]);
  fprintf(stderr, "see longhaul --help\n");
  return LH_EXIT_USAGE;
}
