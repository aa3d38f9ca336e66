/* cmd_jobs.c — placeholder until the jobs subsystem lands; its owner replaces this file. */
#include <stdio.h>

#include "pipeline/commands.h"

int lh_cmd_run(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}

int lh_cmd_status(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}

int lh_cmd_results(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}

