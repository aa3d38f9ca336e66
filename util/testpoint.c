/* testpoint.c — see testpoint.h. The environment is read once, on the first passage. */
#define _POSIX_C_SOURCE 200809L
#include "util/testpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* One NAME:N[+] variable: the point's name ("" = any) and the passage that triggers (0 = never). */
typedef struct trigger {
  char name[64];
  long at;
  int on;      /* NAME:N+: every passage from the N-th on triggers */
  long passed; /* passages counted toward at */
} trigger;

static int active; /* any variable is set */
static trigger kill_t, stop_t;
static const char *log_path;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void read_trigger(const char *var, trigger *t) {
  const char *k = getenv(var);
  const char *colon = k ? strrchr(k, ':') : NULL;
  if (!colon || colon - k >= (long)sizeof t->name) return;
  memcpy(t->name, k, (size_t)(colon - k));
  t->name[colon - k] = 0;
  if (!strcmp(t->name, "any")) t->name[0] = 0;
  char *end;
  t->at = strtol(colon + 1, &end, 10);
  t->on = *end == '+';
}

static void read_env(void) {
  read_trigger("LH_TEST_KILL_AT", &kill_t);
  read_trigger("LH_TEST_STOP_AT", &stop_t);
  log_path = getenv("LH_TEST_POINTS");
  active = kill_t.at > 0 || stop_t.at > 0 || (log_path && *log_path);
}

/* Whether this passage through name is t's (mu held). */
static int fires(trigger *t, const char *name) {
  if (t->at <= 0 || (t->name[0] && strcmp(t->name, name))) return 0;
  ++t->passed;
  return t->passed == t->at || (t->on && t->passed > t->at);
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
  const int die = fires(&kill_t, name), stop = fires(&stop_t, name);
  pthread_mutex_unlock(&mu);
  if (die) raise(SIGKILL);
  if (stop) raise(SIGSTOP);
}
