/* testpoint.c — see testpoint.h. The environment is read once, on the first passage. */
#define _POSIX_C_SOURCE 200809L
#include "util/testpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;          /* either variable is set */
static char kill_name[64];  /* "" = any */
static long kill_at;        /* 0 = never */
static const char *log_path;
static long passed;         /* passages counted toward kill_at */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void read_env(void) {
  const char *k = getenv("LH_TEST_KILL_AT");
  log_path = getenv("LH_TEST_POINTS");
  if (k) {
    const char *colon = strrchr(k, ':');
    if (colon && colon - k < (long)sizeof kill_name) {
      memcpy(kill_name, k, (size_t)(colon - k));
      kill_name[colon - k] = 0;
      if (!strcmp(kill_name, "any")) kill_name[0] = 0;
      kill_at = strtol(colon + 1, NULL, 10);
    }
  }
  active = kill_at > 0 || (log_path && *log_path);
}

void lh_testpoint(const char *name) {
  pthread_once(&once, read_env);
  if (!active) return;
  pthread_mutex_lock(&mu);
  if (log_path && *log_path) {
    FILE *f = fopen(log_path, "a");
    if (f) {
      fprintf(f, "%s\n", name);
      fclose(f);
    }
  }
  const int counts = kill_at > 0 && (!kill_name[0] || !strcmp(kill_name, name));
  const int die = counts && ++passed == kill_at;
  pthread_mutex_unlock(&mu);
  if (die) raise(SIGKILL);
}
