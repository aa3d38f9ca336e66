/* cmd_store.c — `longhaul store ls|verify|gc --db FILE` (or --out DIR, the folder of a run):
 * look into a store, check it, trim it.
 *
 * ls and verify open the store read-only (verify --repair and gc open it writable). Every command
 * prints human-readable tables, or one JSON object with --json. Exit status: 0 fine, 1 verify found
 * damage (even when --repair removed it), 2 usage or the store could not be opened.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "store/store.h"
#include "util/fs.h"
#include "util/json.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: longhaul store ls     STORE [--jobs | --checkpoints] [--json]\n"
          "       longhaul store verify STORE [--repair] [--json]\n"
          "       longhaul store gc     STORE [--older-than AGE] [--max-size SIZE] [--keep-last N]\n"
          "                             [--dry-run] [--no-vacuum] [--json]\n"
          "\n"
          "  STORE is --db FILE, or --out DIR for the store of `longhaul run --out DIR` (DIR/longhaul.db;\n"
          "  a folder of --shard runs holds one store per shard: name one with --db)\n"
          "\n"
          "  ls       list batches, jobs and checkpoints with their sizes\n"
          "  verify   check every checkpoint page's CRC-32C, every chain's structure, every job result's\n"
          "           and error text's CRC-32C and SQLite's own structure; --repair drops damaged\n"
          "           checkpoints and what depends on them, and requeues jobs whose result or error is\n"
          "           damaged (the next run recomputes them)\n"
          "  gc       remove checkpoints: unused for AGE (30s, 15m, 12h, 7d, 2w), least recently used\n"
          "           until the payload fits SIZE (bytes, or with K, M, G, T: powers of 1024), or all but\n"
          "           the last N of each job (older ones keep only the KV rows their successors need).\n"
          "           The chains of queued and running jobs are never removed. Cached file digests of\n"
          "           files that are gone are dropped too. Freed space goes back to the file system\n"
          "           unless --no-vacuum.\n");
}

/* --older-than and --max-size: v (strtod's, with the unit mul) as whole units in *out, at most max.
 * -1: not a finite number >= 0; -2: over max (a double that large would not convert to int64_t, or
 * would wrap in the store's arithmetic: --older-than 18446744073709552 was 384 ms there). */
static int scaled(double v, double mul, int64_t max, int64_t *out) {
  if (!isfinite(v) || v < 0) return -1;
  const double x = floor(v * mul);
  if (!(x <= 4611686018427387904.0) || (int64_t)x > max) return -2; /* 2^62: exact, and converts */
  *out = (int64_t)x;
  return 0;
}

/* The largest --older-than: 9e15 s (285 million years), under the store's LH_STORE_GC_MAX_AGE_S
 * and exact as a double, so the number the message names is taken as written. */
#define MAX_AGE_S ((int64_t)9000000000000000)

static int parse_age(const char *s, int64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s) return -1;
  double mul = 1;
  if (*end == 's' || !*end) mul = 1;
  else if (*end == 'm') mul = 60;
  else if (*end == 'h') mul = 3600;
  else if (*end == 'd') mul = 86400;
  else if (*end == 'w') mul = 7 * 86400;
  else return -1;
  if (*end && end[1]) return -1;
  return scaled(v, mul, MAX_AGE_S, out);
}

static int parse_size(const char *s, int64_t *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s) return -1;
  double mul = 1;
  switch (*end) {
    case 0: break;
    case 'k': case 'K': mul = 1024.0; break;
    case 'm': case 'M': mul = 1024.0 * 1024; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
    default: return -1;
  }
  if (*end && end[1] && strcmp(end + 1, "B") && strcmp(end + 1, "iB")) return -1;
  return scaled(v, mul, (int64_t)1 << 62, out);
}

static const char *human(int64_t b, char *buf, size_t n) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, i++;
  if (i == 0)
    snprintf(buf, n, "%lld B", (long long)b);
  else
    snprintf(buf, n, "%.1f %s", v, u[i]);
  return buf;
}

static const char *when(int64_t ms, char *buf, size_t n) {
  if (ms <= 0) return "-";
  time_t t = (time_t)(ms / 1000);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, n, "%Y-%m-%d %H:%M:%SZ", &tm);
  return buf;
}

static void print_json(cJSON *o) {
  char *t = cJSON_Print(o);
  if (t) printf("%s\n", t);
  free(t);
  cJSON_Delete(o);
}

static cJSON *stats_json(const lh_store *s, const lh_store_stats *st) {
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "path", lh_store_path(s));
  cJSON_AddNumberToObject(o, "schema", lh_store_schema_version(s));
  cJSON_AddNumberToObject(o, "file_bytes", (double)st->file_bytes);
  cJSON_AddNumberToObject(o, "page_size", (double)st->page_size);
  cJSON_AddNumberToObject(o, "free_bytes", (double)(st->freelist_pages * st->page_size));
  cJSON_AddNumberToObject(o, "checkpoint_bytes", (double)(st->state_bytes + st->kv_bytes));
  cJSON *j = cJSON_AddObjectToObject(o, "jobs_by_state");
  for (int i = 0; i < LH_JOB_STATE_COUNT; i++) cJSON_AddNumberToObject(j, lh_job_state_name((lh_job_state)i), (double)st->jobs[i]);
  return o;
}

static void print_header(const lh_store *s, const lh_store_stats *st) {
  char a[32], b[32], c[32];
  printf("%s: schema %d, %s on disk (%s free), %lld checkpoint(s) holding %s\n", lh_store_path(s),
         lh_store_schema_version(s), human(st->file_bytes, a, sizeof a),
         human(st->freelist_pages * st->page_size, b, sizeof b), (long long)st->checkpoints,
         human(st->state_bytes + st->kv_bytes, c, sizeof c));
  printf("jobs: %lld queued, %lld running, %lld done, %lld failed\n", (long long)st->jobs[LH_JOB_QUEUED],
         (long long)st->jobs[LH_JOB_RUNNING], (long long)st->jobs[LH_JOB_DONE], (long long)st->jobs[LH_JOB_FAILED]);
}

static lh_status ls_jobs(lh_store *s, cJSON *root, lh_error *err) {
  lh_store_job_info *v;
  size_t n;
  lh_status rs = lh_store_job_list(s, 0, &v, &n, err);
  if (rs) return rs;
  if (root) {
    cJSON *a = cJSON_AddArrayToObject(root, "jobs");
    for (size_t i = 0; i < n; i++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "id", (double)v[i].id);
      lh_json_add_text(o, "batch", v[i].batch);
      lh_json_add_text(o, "custom_id", v[i].custom_id);
      cJSON_AddStringToObject(o, "state", lh_job_state_name(v[i].state));
      cJSON_AddNumberToObject(o, "attempts", v[i].attempts);
      cJSON_AddNumberToObject(o, "tokens_done", (double)v[i].tokens_done);
      cJSON_AddNumberToObject(o, "tokens_total", (double)v[i].tokens_total);
      cJSON_AddNumberToObject(o, "ckpt_id", (double)v[i].ckpt_id);
      if (v[i].owner) {
        lh_json_add_text(o, "owner", v[i].owner);
        cJSON_AddBoolToObject(o, "owner_alive", v[i].owner_alive == 1);
      }
      if (v[i].error) lh_json_add_text(o, "error", v[i].error);
      cJSON_AddNumberToObject(o, "created_ms", (double)v[i].created_ms);
      cJSON_AddNumberToObject(o, "finished_ms", (double)v[i].finished_ms);
      cJSON_AddBoolToObject(o, "has_result", v[i].has_result);
      cJSON_AddItemToArray(a, o);
    }
  } else {
    printf("\njobs\n  %6s  %-16s  %-20s  %-8s  %4s  %21s  %-18s  %s\n", "id", "batch", "custom_id", "state", "try",
           "tokens done/total", "owner", "error");
    for (size_t i = 0; i < n; i++) {
      char tot[24];
      if (v[i].tokens_total >= 0)
        snprintf(tot, sizeof tot, "%lld", (long long)v[i].tokens_total);
      else
        snprintf(tot, sizeof tot, "?");
      char prog[48];
      snprintf(prog, sizeof prog, "%lld/%s", (long long)v[i].tokens_done, tot);
      char owner[64] = "-";
      if (v[i].owner) snprintf(owner, sizeof owner, "%s%s", v[i].owner, v[i].owner_alive == 1 ? "" : " (dead)");
      printf("  %6lld  %-16.16s  %-20.20s  %-8s  %4d  %21s  %-18.18s  %.60s\n", (long long)v[i].id, v[i].batch,
             v[i].custom_id, lh_job_state_name(v[i].state), v[i].attempts, prog, owner, v[i].error ? v[i].error : "");
    }
    if (!n) printf("  (none)\n");
  }
  lh_store_job_list_free(v, n);
  return LH_OK;
}

static lh_status ls_ckpts(lh_store *s, cJSON *root, lh_error *err) {
  lh_store_ckpt_info *v;
  size_t n;
  lh_status rs = lh_store_ckpt_list(s, &v, &n, err);
  if (rs) return rs;
  if (root) {
    cJSON *a = cJSON_AddArrayToObject(root, "checkpoints");
    for (size_t i = 0; i < n; i++) {
      char hx[65];
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "id", (double)v[i].id);
      cJSON_AddStringToObject(o, "model_id", v[i].model_id);
      lh_hex(v[i].prefix_hash, 32, hx);
      cJSON_AddStringToObject(o, "prefix_hash", hx);
      cJSON_AddNumberToObject(o, "pos", (double)v[i].pos);
      cJSON_AddNumberToObject(o, "parent_id", (double)v[i].parent_id);
      cJSON_AddNumberToObject(o, "parent_pos", (double)v[i].parent_pos);
      cJSON_AddNumberToObject(o, "job_id", (double)v[i].job_id);
      cJSON_AddBoolToObject(o, "has_state", v[i].has_state);
      cJSON_AddNumberToObject(o, "state_bytes", (double)v[i].state_bytes);
      cJSON_AddNumberToObject(o, "kv_bytes", (double)v[i].kv_bytes);
      cJSON_AddNumberToObject(o, "pages", (double)v[i].n_pages);
      cJSON_AddNumberToObject(o, "children", v[i].n_children);
      cJSON_AddNumberToObject(o, "created_ms", (double)v[i].created_ms);
      cJSON_AddNumberToObject(o, "last_used_ms", (double)v[i].last_used_ms);
      cJSON_AddItemToArray(a, o);
    }
  } else {
    printf("\ncheckpoints\n  %6s  %-12s  %10s  %6s  %8s  %-5s  %10s  %10s  %6s  %s\n", "id", "model", "pos", "parent",
           "kv rows", "state", "state size", "kv size", "job", "last used");
    for (size_t i = 0; i < n; i++) {
      char a1[32], a2[32], t[32];
      printf("  %6lld  %-12.12s  %10lld  %6lld  %8lld  %-5s  %10s  %10s  %6lld  %s\n", (long long)v[i].id, v[i].model_id,
             (long long)v[i].pos, (long long)v[i].parent_id, (long long)(v[i].pos - v[i].parent_pos),
             v[i].has_state ? "yes" : "thin", human(v[i].state_bytes, a1, sizeof a1), human(v[i].kv_bytes, a2, sizeof a2),
             (long long)v[i].job_id, when(v[i].last_used_ms, t, sizeof t));
    }
    if (!n) printf("  (none)\n");
  }
  free(v);
  return LH_OK;
}

/* An argument `store SUB` cannot use: an option of another subcommand says whose it is; a known
 * option here lacks its value; anything else gets the nearest of SUB's options. */
static int bad_argument(const char *cmd, const char *a, const char *const names[][9], const size_t *n_names, int which) {
  static const char *const subs[] = {"ls", "verify", "gc"};
  if (!strncmp(a, "--", 2))
    for (int s = 0; s < 3; s++)
      for (size_t i = 0; i < n_names[s]; i++)
        if (!strcmp(a + 2, names[s][i])) {
          if (s == which || i < 4) fprintf(stderr, "longhaul %s: option %s needs a value\n", cmd, a);
          else fprintf(stderr, "longhaul %s: option %s belongs to `longhaul store %s`\n", cmd, a, subs[s]);
          fprintf(stderr, "see longhaul store --help\n");
          return LH_EXIT_USAGE;
        }
  lh_args_unknown_option(cmd, a, names[which], n_names[which]);
  return LH_EXIT_USAGE;
}

int lh_cmd_store(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? LH_EXIT_USAGE : LH_EXIT_OK;
  }
  const char *sub = argv[1], *db = NULL, *out = NULL;
  static const char *const subs[] = {"ls", "verify", "gc"};
  static const char *const names[][9] = {{"db", "out", "json", "help", "jobs", "checkpoints"},
                                         {"db", "out", "json", "help", "repair"},
                                         {"db", "out", "json", "help", "older-than", "max-size", "keep-last", "dry-run",
                                          "no-vacuum"}};
  static const size_t n_names[] = {6, 5, 9};
  int which = -1;
  for (int i = 0; i < 3; i++)
    if (!strcmp(sub, subs[i])) which = i;
  if (which < 0) {
    const char *near = lh_args_nearest(sub, subs, 3);
    if (near) fprintf(stderr, "longhaul store: unknown subcommand '%s'; did you mean '%s'?\n", sub, near);
    else fprintf(stderr, "longhaul store: unknown subcommand '%s' (ls, verify or gc)\n", sub);
    fprintf(stderr, "see longhaul store --help\n");
    return LH_EXIT_USAGE;
  }
  char cmd[32];
  snprintf(cmd, sizeof cmd, "store %s", sub);
  int json = 0, repair = 0, only_jobs = 0, only_ckpts = 0;
  lh_store_gc_params gp = lh_store_gc_default_params();
  int policies = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--db") && val) db = argv[++i];
    else if (!strcmp(a, "--out") && val) out = argv[++i];
    else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return LH_EXIT_OK;
    } else if (!strcmp(a, "--json")) json = 1;
    else if (!strcmp(a, "--repair") && !strcmp(sub, "verify")) repair = 1;
    else if (!strcmp(a, "--jobs") && !strcmp(sub, "ls")) only_jobs = 1;
    else if (!strcmp(a, "--checkpoints") && !strcmp(sub, "ls")) only_ckpts = 1;
    else if (!strcmp(a, "--dry-run") && !strcmp(sub, "gc")) gp.dry_run = 1;
    else if (!strcmp(a, "--no-vacuum") && !strcmp(sub, "gc")) gp.vacuum = 0;
    else if (!strcmp(a, "--older-than") && val && !strcmp(sub, "gc")) {
      const int bad = parse_age(argv[++i], &gp.older_than_s);
      if (bad == -2) {
        fprintf(stderr, "longhaul store gc: --older-than '%s': out of range: at most 9e15 s (285 million years)\n",
                argv[i]);
        return LH_EXIT_USAGE;
      }
      if (bad) {
        fprintf(stderr, "longhaul store gc: --older-than '%s': expected a number with s, m, h, d or w\n", argv[i]);
        return LH_EXIT_USAGE;
      }
      policies++;
    } else if (!strcmp(a, "--max-size") && val && !strcmp(sub, "gc")) {
      const int bad = parse_size(argv[++i], &gp.max_bytes);
      if (bad == -2) {
        fprintf(stderr, "longhaul store gc: --max-size '%s': out of range: at most 4194304T (2^62 bytes)\n", argv[i]);
        return LH_EXIT_USAGE;
      }
      if (bad) {
        fprintf(stderr, "longhaul store gc: --max-size '%s': expected bytes, or a number with K, M, G or T\n", argv[i]);
        return LH_EXIT_USAGE;
      }
      policies++;
    } else if (!strcmp(a, "--keep-last") && val && !strcmp(sub, "gc")) {
      char *end;
      long k = strtol(argv[++i], &end, 10);
      if (*end || k < 0 || k > 1000000) {
        fprintf(stderr, "longhaul store gc: --keep-last '%s': expected a count >= 0\n", argv[i]);
        return LH_EXIT_USAGE;
      }
      gp.keep_last = (int)k;
      policies++;
    } else {
      return bad_argument(cmd, a, names, n_names, which);
    }
  }
  if (!db && !out) {
    fprintf(stderr, "longhaul store %s: --db FILE is required (or --out DIR: the folder of `longhaul run --out DIR`)\n",
            sub);
    return LH_EXIT_USAGE;
  }
  char **paths = NULL, dbbuf[4200];
  size_t np = 0;
  if (!db) {
    if (lh_args_stores(cmd, NULL, out, NULL, &paths, &np)) return LH_EXIT_USAGE;
    if (np > 1) {
      fprintf(stderr, "longhaul store %s: --out %s holds %zu stores (one per shard):", sub, out, np);
      for (size_t i = 0; i < np; i++) fprintf(stderr, " %s", paths[i]);
      fprintf(stderr, "; name one with --db FILE\n");
      lh_args_stores_free(paths, np);
      return LH_EXIT_USAGE;
    }
    snprintf(dbbuf, sizeof dbbuf, "%s", paths[0]);
    lh_args_stores_free(paths, np);
    db = dbbuf;
  }
  if (!strcmp(sub, "gc") && !policies) {
    fprintf(stderr, "longhaul store gc: give at least one of --older-than, --max-size, --keep-last\n");
    return LH_EXIT_USAGE;
  }
  lh_store_params sp = lh_store_default_params();
  sp.read_only = !strcmp(sub, "ls") || (!strcmp(sub, "verify") && !repair);
  sp.create = 0;
  sp.heartbeat = 0;
  lh_store *s;
  lh_error err;
  lh_error_clear(&err);
  if (lh_store_open(db, &sp, &s, &err)) {
    fprintf(stderr, "longhaul store %s: %s\n", sub, err.msg);
    return LH_EXIT_USAGE;
  }
  int rc = LH_EXIT_OK;
  lh_store_stats st;
  if (!strcmp(sub, "ls")) {
    if (lh_store_get_stats(s, &st, &err)) goto fail;
    cJSON *root = json ? stats_json(s, &st) : NULL;
    if (!json) print_header(s, &st);
    if (!only_ckpts && ls_jobs(s, root, &err)) {
      cJSON_Delete(root);
      goto fail;
    }
    if (!only_jobs && ls_ckpts(s, root, &err)) {
      cJSON_Delete(root);
      goto fail;
    }
    if (root) print_json(root);
  } else if (!strcmp(sub, "verify")) {
    lh_store_verify_report r;
    double t0 = lh_now();
    if (lh_store_verify(s, repair, &r, &err)) {
      lh_buf_free(&r.problems);
      goto fail;
    }
    double dt = lh_now() - t0;
    int bad = r.damaged > 0 || r.damaged_jobs > 0 || !r.db_ok;
    if (json) {
      cJSON *o = cJSON_CreateObject();
      lh_json_add_text(o, "path", lh_store_path(s));
      cJSON_AddBoolToObject(o, "ok", !bad);
      cJSON_AddBoolToObject(o, "sqlite_ok", r.db_ok);
      cJSON_AddNumberToObject(o, "checkpoints", (double)r.checkpoints);
      cJSON_AddNumberToObject(o, "pages", (double)r.pages);
      cJSON_AddNumberToObject(o, "bytes", (double)r.bytes);
      cJSON_AddNumberToObject(o, "damaged", (double)r.damaged);
      cJSON_AddNumberToObject(o, "dropped", (double)r.dropped);
      cJSON_AddNumberToObject(o, "results", (double)r.results);
      cJSON_AddNumberToObject(o, "errors", (double)r.errors);
      cJSON_AddNumberToObject(o, "damaged_jobs", (double)r.damaged_jobs);
      cJSON_AddNumberToObject(o, "requeued", (double)r.requeued);
      cJSON *a = cJSON_AddArrayToObject(o, "problems");
      for (char *line = r.problems.data; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        cJSON_AddItemToArray(a, lh_json_text(line));
        line = nl ? nl + 1 : line + strlen(line);
      }
      print_json(o);
    } else {
      char a[32];
      if (r.problems.len) fputs(r.problems.data, stdout);
      printf("%s: %lld checkpoint(s), %lld page(s), %s, %lld result(s), %lld error text(s) checked in %.2f s: %s\n",
             lh_store_path(s), (long long)r.checkpoints, (long long)r.pages, human(r.bytes, a, sizeof a),
             (long long)r.results, (long long)r.errors, dt,
             bad ? (r.db_ok ? "DAMAGED" : "DAMAGED (SQLite structure)") : "ok");
      if (!r.db_ok) {
        printf("SQLite's own structure is damaged, which --repair cannot fix (it changes nothing in such a store): "
               "move the store aside with its -journal file (the next run starts a new store and computes every "
               "job again), salvage what it holds with `sqlite3 %s .recover`, or restore it from a backup\n",
               lh_store_path(s));
      } else {
        if (r.damaged && repair)
          printf("repair: dropped %lld checkpoint(s) (the damaged ones and their descendants); rerunning their jobs "
                 "recomputes them\n", (long long)r.dropped);
        else if (r.damaged)
          printf("run with --repair to drop the damaged checkpoints; their jobs then recompute them\n");
        if (r.damaged_jobs && repair)
          printf("repair: requeued %lld of %lld damaged job(s) (their result or error dropped); the next run "
                 "recomputes them\n", (long long)r.requeued, (long long)r.damaged_jobs);
        else if (r.damaged_jobs)
          printf("%lld job(s) have a damaged result or error: run with --repair to requeue them; the next run then "
                 "recomputes them\n", (long long)r.damaged_jobs);
      }
    }
    lh_buf_free(&r.problems);
    if (bad) rc = LH_EXIT_FAILED;
  } else {
    lh_store_gc_report r;
    double t0 = lh_now();
    if (lh_store_gc(s, &gp, &r, &err)) goto fail;
    double dt = lh_now() - t0;
    if (json) {
      cJSON *o = cJSON_CreateObject();
      lh_json_add_text(o, "path", lh_store_path(s));
      cJSON_AddBoolToObject(o, "dry_run", gp.dry_run);
      cJSON_AddNumberToObject(o, "deleted", (double)r.deleted);
      cJSON_AddNumberToObject(o, "thinned", (double)r.thinned);
      cJSON_AddNumberToObject(o, "protected", (double)r.protected_ckpts);
      cJSON_AddNumberToObject(o, "bytes_freed", (double)r.bytes_freed);
      cJSON_AddNumberToObject(o, "file_before", (double)r.file_before);
      cJSON_AddNumberToObject(o, "file_after", (double)r.file_after);
      cJSON_AddNumberToObject(o, "digests_dropped", (double)r.digests_dropped);
      cJSON_AddNumberToObject(o, "seconds", dt);
      print_json(o);
    } else {
      char a[32], b[32], c[32];
      printf("%s%s: deleted %lld checkpoint(s), thinned %lld (kept their KV rows), %lld protected by queued or "
             "running jobs; %s of checkpoint data %s; file %s -> %s (%.2f s)\n",
             gp.dry_run ? "dry run: " : "", lh_store_path(s), (long long)r.deleted, (long long)r.thinned,
             (long long)r.protected_ckpts, human(r.bytes_freed, a, sizeof a), gp.dry_run ? "would be freed" : "freed",
             human(r.file_before, b, sizeof b), human(r.file_after, c, sizeof c), dt);
      if (r.digests_dropped)
        printf("%s %lld cached file digest(s) of files that are gone\n", gp.dry_run ? "would drop" : "dropped",
               (long long)r.digests_dropped);
    }
  }
  lh_store_close(s);
  return rc;
fail:
  fprintf(stderr, "longhaul store %s: %s\n", sub, err.msg);
  lh_store_close(s);
  return LH_EXIT_FAILED;
}
