/* cmd_model.c — placeholder until the model loader lands; its owner replaces this file. */
#include <stdio.h>

#include "pipeline/commands.h"

int lh_cmd_model(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}
