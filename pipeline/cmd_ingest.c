/* cmd_ingest.c — placeholder until the ingest subsystem lands; its owner replaces this file. */
#include <stdio.h>

#include "pipeline/commands.h"

int lh_cmd_ingest(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}
