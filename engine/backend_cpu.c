/* backend_cpu.c — placeholder table until the CPU backend lands; its owner replaces this file.
 * An empty table makes lh_model_open report that the CPU backend is missing. */
#include "engine/backend.h"

const lh_backend_ops lh_backend_cpu = {.name = "cpu"};
