/* cmd_engine.c — placeholder until the engine subsystem lands; its owner replaces this file. */
#include <stdio.h>

#include "pipeline/commands.h"

int lh_cmd_logits(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}

int lh_cmd_generate(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}
