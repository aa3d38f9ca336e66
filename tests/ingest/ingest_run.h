/* ingest_run.h — run one whole ingest over paths or memory and keep everything it produced, for
 * the ingest tests that work with real files (FIFOs, hard links, truncated archives, folders). */
#ifndef LH_TESTS_INGEST_INGEST_RUN_H
#define LH_TESTS_INGEST_INGEST_RUN_H

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingest/ingest.h"
#include "tests/test.h"
#include "util/fs.h"
#include "util/hash.h"

typedef struct run_entry {
  char *path, *detail, *link;
  lh_ingest_entry e;
} run_entry;

typedef struct run_out {
  lh_status add_st, st; /* the first failed lh_ingest_add_*, and how the ingest ended */
  char msg[LH_ERROR_MSG_MAX];
  lh_buf text;
  lh_i32vec tokens;
  run_entry *ents;
  size_t n, cap;
  lh_ingest_stats stats;
  lh_buf notes, summary;
} run_out;

static inline char *run_dup(const char *s, size_t n) {
  char *d = malloc(n + 1);
  if (n) memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* One input: a path, or (data != NULL) memory named name. A path with as != NULL is added by
 * lh_ingest_add_path_as under that name. */
typedef struct run_input {
  const char *name;
  const void *data;
  size_t len;
  const char *as;
} run_input;

/* 0: count the tokens and text but do not keep them (memory tests). */
static int run_keep_output = 1;

static inline void run_ingest_inputs(const lh_ingest_params *p, const run_input *ins, size_t n_in, run_out *o) {
  memset(o, 0, sizeof *o);
  lh_error err = {0};
  lh_ingest *ing = NULL;
  if ((o->st = lh_ingest_open(p, &ing, &err))) {
    snprintf(o->msg, sizeof o->msg, "%s", err.msg);
    return;
  }
  for (size_t i = 0; i < n_in; i++) {
    lh_status st = ins[i].data ? lh_ingest_add_memory(ing, ins[i].name, ins[i].data, ins[i].len, &err)
                   : ins[i].as ? lh_ingest_add_path_as(ing, ins[i].name, ins[i].as, &err)
                               : lh_ingest_add_path(ing, ins[i].name, &err);
    if (st) {
      o->add_st = o->st = st;
      snprintf(o->msg, sizeof o->msg, "%s", err.msg);
      lh_ingest_close(ing);
      return;
    }
  }
  for (;;) {
    lh_ingest_batch b;
    lh_status st = lh_ingest_next(ing, &b, &err);
    if (run_keep_output) {
      lh_buf_append(&o->text, b.text, b.text_len);
      lh_i32vec_append(&o->tokens, b.tokens, b.n_tokens);
    } else {
      o->tokens.len += b.n_tokens;
      o->text.len += b.text_len;
    }
    for (size_t i = 0; i < b.n_entries; i++) {
      if (o->n == o->cap) { /* doubling: tens of thousands of entries stay linear (ASan's realloc copies) */
        o->cap = o->cap ? 2 * o->cap : 64;
        o->ents = realloc(o->ents, o->cap * sizeof *o->ents);
      }
      run_entry *x = &o->ents[o->n++];
      x->e = b.entries[i];
      x->path = run_dup(b.entries[i].path, b.entries[i].path_len);
      x->detail = run_dup(b.entries[i].detail, strlen(b.entries[i].detail));
      x->link = b.entries[i].link ? run_dup(b.entries[i].link, b.entries[i].link_len) : NULL;
      x->e.path = x->path;
      x->e.detail = x->detail;
      x->e.link = x->link;
    }
    if (st) {
      o->st = st;
      snprintf(o->msg, sizeof o->msg, "%s", err.msg);
      break;
    }
    if (b.done) break;
  }
  lh_ingest_stats_get(ing, &o->stats);
  lh_ingest_notes(ing, &o->notes);
  lh_ingest_summary_json(ing, &o->summary);
  lh_ingest_close(ing);
}

static inline void run_ingest_paths(const lh_ingest_params *p, const char *const *paths, size_t n, run_out *o) {
  run_input ins[16];
  for (size_t i = 0; i < n && i < 16; i++) ins[i] = (run_input){paths[i], NULL, 0, NULL};
  run_ingest_inputs(p, ins, n < 16 ? n : 16, o);
}

static inline void run_free(run_out *o) {
  for (size_t i = 0; i < o->n; i++) free(o->ents[i].path), free(o->ents[i].detail), free(o->ents[i].link);
  free(o->ents);
  lh_buf_free(&o->text);
  lh_i32vec_free(&o->tokens);
  lh_buf_free(&o->notes);
  lh_buf_free(&o->summary);
  memset(o, 0, sizeof *o);
}

static inline const run_entry *run_find(const run_out *o, const char *path) {
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->ents[i].path, path)) return &o->ents[i];
  return NULL;
}

static inline int run_sha_is(const run_entry *x, const void *p, size_t n) {
  if (!x || !x->e.has_sha256) return 0;
  uint8_t d[32];
  lh_sha256_buf(p, n, d);
  return !memcmp(d, x->e.sha256, 32);
}

/* A shell command in the test's folder; 0 when it exited 0. */
static inline int run_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int run_sh(const char *fmt, ...) {
  char cmd[8192], full[8192 + 600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  snprintf(full, sizeof full, "cd '%s' && { %s ; }", lh_test_tmpdir(), cmd);
  int rc = system(full);
  if (rc) fprintf(stderr, "command failed (%d): %s\n", rc, cmd);
  return rc;
}

/* A path in the test's folder (a static buffer per call site cycle of 8). */
static inline const char *tpath(const char *name) {
  static char bufs[8][1024];
  static int k;
  char *b = bufs[k++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", lh_test_tmpdir(), name);
  return b;
}

static inline void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) {
    perror(path);
    exit(1);
  }
  if (n) fwrite(data, 1, n, f);
  fclose(f);
}

/* A test that hangs is a failure: a watchdog ends it loudly. */
static inline void run_on_alarm(int sig) {
  (void)sig;
  static const char m[] = "FAILED: the test hung (watchdog)\n";
  if (write(2, m, sizeof m - 1)) {}
  _exit(1);
}
static inline void run_watchdog(unsigned seconds) {
  signal(SIGALRM, run_on_alarm);
  alarm(seconds);
}

#endif
