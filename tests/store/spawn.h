/* spawn.h — start a helper process with pipes to its stdin and stdout, and run raw SQL on a store
 * file behind the store's back (to plant damage or fake other owners); for store tests only. */
#ifndef LH_TESTS_STORE_SPAWN_H
#define LH_TESTS_STORE_SPAWN_H

#include <sqlite3.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

/* fork + exec argv; *to writes its stdin, *from reads its stdout (either may be NULL: closed). */
static inline pid_t spawn(char *const argv[], FILE **to, FILE **from) {
  int in[2], out[2];
  if (pipe(in) || pipe(out)) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[1]);
    close(out[0]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  if (to) *to = fdopen(in[1], "w");
  else close(in[1]);
  if (from) *from = fdopen(out[0], "r");
  else close(out[0]);
  return pid;
}

/* Exit status of pid (128 + signal when killed). */
static inline int wait_status(pid_t pid) {
  int st = 0;
  if (waitpid(pid, &st, 0) < 0) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Run sql on the file directly; returns sqlite3_exec's code. It waits up to 10 s for a lock, as
 * the store's own connections do: without that, a heartbeat thread's write at the same moment
 * made it fail with "database is locked" (seen in a CI run of test_store_jobs). */
static inline int raw_sql(const char *path, const char *sql) {
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
  sqlite3_busy_timeout(db, 10000);
  char *msg = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  if (rc != SQLITE_OK) fprintf(stderr, "raw_sql: %s: %s\n", sql, msg ? msg : "");
  sqlite3_free(msg);
  sqlite3_close(db);
  return rc;
}

#endif
