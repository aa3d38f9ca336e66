/* cmd_tokenize.c — placeholder until the tokenizer lands; its owner replaces this file. */
#include <stdio.h>

#include "pipeline/commands.h"

int lh_cmd_tokenize(int argc, char **argv) {
  (void)argc;
  fprintf(stderr, "longhaul: '%s' is not in this build yet\n", argv[0]);
  return LH_EXIT_USAGE;
}
