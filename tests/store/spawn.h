/* spawn.h — start a helper process with pipes to its stdin and stdout, and run raw SQL on a store
 * file behind the store's back (to plant damage or fake other owners); for store tests only. */
#ifndef LH_TESTS_STORE_SPAWN_H
#define LH_TESTS_STORE_SPAWN_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/hash.h"

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

/* The first column of the first row of sql, run on the file directly; -1 when there is none. */
static inline int64_t raw_int(const char *path, const char *sql) {
  sqlite3 *db;
  int64_t v = -1;
  if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt *q;
  if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK) {
    if (sqlite3_step(q) == SQLITE_ROW) v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
  } else {
    fprintf(stderr, "raw_int: %s: %s\n", sql, sqlite3_errmsg(db));
  }
  sqlite3_close(db);
  return v;
}

/* XOR one byte at offset of a TEXT or BLOB value (table.column of the row with this rowid) with
 * mask, through incremental BLOB I/O: the value's length and type stay, one byte changes. Returns
 * SQLITE_OK or the failing call's code. */
static inline int raw_flip(const char *path, const char *table, const char *column, int64_t rowid, int offset,
                           unsigned char mask) {
  sqlite3 *db;
  if (sqlite3_open(path, &db) != SQLITE_OK) return -1;
  sqlite3_busy_timeout(db, 10000);
  sqlite3_blob *b;
  unsigned char c;
  int rc = sqlite3_blob_open(db, "main", table, column, rowid, 1, &b);
  if (rc == SQLITE_OK) {
    rc = sqlite3_blob_read(b, &c, 1, offset);
    c ^= mask;
    if (rc == SQLITE_OK) rc = sqlite3_blob_write(b, &c, 1, offset);
    int rc2 = sqlite3_blob_close(b);
    if (rc == SQLITE_OK) rc = rc2;
  }
  if (rc != SQLITE_OK)
    fprintf(stderr, "raw_flip %s.%s row %lld: %s\n", table, column, (long long)rowid, sqlite3_errmsg(db));
  sqlite3_close(db);
  return rc;
}

/* The CRC-32C of a result row (job id, json, blob) and of an error text (job id, text) as docs/store.md
 * describes them: the job id as a little-endian int64, then each field as its length (little-endian
 * int64) and its bytes. Built here from that description, so tests pin the format rather than
 * call the store's own function. Fields up to 4000 bytes in all. */
static inline uint32_t crc_expect(int64_t job_id, const void *a, size_t an, const void *b, size_t bn, int fields) {
  unsigned char buf[4096];
  size_t n = 0;
  if (an + bn > 4000) return 0;
  for (int i = 0; i < 8; i++) buf[n++] = (unsigned char)((uint64_t)job_id >> (8 * i));
  for (int f = 0; f < fields; f++) {
    const void *p = f ? b : a;
    size_t len = f ? bn : an;
    for (int i = 0; i < 8; i++) buf[n++] = (unsigned char)((uint64_t)len >> (8 * i));
    if (len) memcpy(buf + n, p, len);
    n += len;
  }
  return lh_crc32c(0, buf, n);
}
static inline uint32_t result_crc_expect(int64_t job_id, const char *json, const void *blob, size_t blob_len) {
  return crc_expect(job_id, json, strlen(json), blob, blob_len, 2);
}
static inline uint32_t error_crc_expect(int64_t job_id, const char *text) {
  return crc_expect(job_id, text, strlen(text), NULL, 0, 1);
}

#endif
