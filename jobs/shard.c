/* shard.c — the shard of a Slurm array task (see shard.h for the variables and the rule), and the
 * record a shard run leaves in OUT naming its batch.
 *
 * Invariants: a returned shard satisfies 0 <= index < count; every variable that is set is
 * checked against the others, so an array Slurm describes inconsistently (or one edited by hand)
 * is refused rather than mapped to a shard that another task may also get. A task whose id is off
 * the array's step is refused too (its siblings still run; `merge` then names the missing shard).
 * It reads the environment only: it never sets or changes it.
 */
#define _DEFAULT_SOURCE /* realpath */
#define _POSIX_C_SOURCE 200809L
#include "jobs/shard.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fs.h"
#include "util/json.h"

static int say(char *why, size_t n, int rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int say(char *why, size_t n, int rc, const char *fmt, ...) {
  if (why && n) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
  }
  return rc;
}

/* 1 and *v when name is set to a decimal integer in [0, INT_MAX]; 0 when unset or empty; -1 when
 * set to anything else. */
static int get(const char *name, long *v) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || *end || x < 0 || x > INT_MAX || *s < '0' || *s > '9') return -1;
  *v = x;
  return 1;
}

int lh_shard_from_env(int *index, int *count, char *why, size_t n) {
  say(why, n, 0, "%s", "");
  static const char *const names[] = {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
                                      "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"};
  long v[5] = {0, 0, 0, 0, 1};
  int has[5];
  for (int i = 0; i < 5; i++) {
    has[i] = get(names[i], &v[i]);
    if (has[i] < 0 && (i == 0 || has[0]))
      return say(why, n, -1, "%s=%s is not a non-negative integer: pass --shard I/N", names[i], getenv(names[i]));
  }
  if (!has[0]) return 0;
  const long id = v[0], min = has[2] ? v[2] : 0, step = v[4];
  long cnt = v[1];
  if (step < 1) return say(why, n, -1, "SLURM_ARRAY_TASK_STEP=%ld: a step must be at least 1: pass --shard I/N", step);
  if (!has[1] && !has[3])
    return say(why, n, -1,
               "SLURM_ARRAY_TASK_ID=%ld is set but neither SLURM_ARRAY_TASK_COUNT nor SLURM_ARRAY_TASK_MAX is: the "
               "number of shards is unknown; pass --shard I/N",
               id);
  if (has[3] && (v[3] < min || (v[3] - min) % step))
    return say(why, n, -1,
               "the Slurm array's index values (min %ld, max %ld, step %ld) do not form a range: submit "
               "--array=0-(N-1) or pass --shard I/N",
               min, v[3], step);
  if (!has[1]) cnt = (v[3] - min) / step + 1;
  if (cnt < 1) return say(why, n, -1, "SLURM_ARRAY_TASK_COUNT=%ld: an array has at least one task", cnt);
  if (has[3] && v[3] != min + step * (cnt - 1))
    return say(why, n, -1,
               "the Slurm array's %ld index values (%ld to %ld, step %ld) are not evenly spaced, so a task's "
               "position among them is unknown: submit --array=0-%ld (or any A-B:S range) or pass --shard I/N",
               cnt, min, v[3], step, cnt - 1);
  if (id < min || (id - min) % step || (id - min) / step >= cnt)
    return say(why, n, -1,
               "SLURM_ARRAY_TASK_ID=%ld is not one of the array's %ld index values (from %ld, step %ld): pass "
               "--shard I/N",
               id, cnt, min, step);
  *index = (int)((id - min) / step);
  *count = (int)cnt;
  const long last = min + step * (cnt - 1);
  if (step > 1)
    return say(why, n, 1, "shard %d/%d from the Slurm array: SLURM_ARRAY_TASK_ID=%ld of %ld-%ld:%ld", *index, *count,
               id, min, last, step);
  return say(why, n, 1, "shard %d/%d from the Slurm array: SLURM_ARRAY_TASK_ID=%ld of %ld-%ld", *index, *count, id,
             min, last);
}

/* ---- the record ---- */

lh_status lh_shard_record_render(const char *batch_path, const char *batch_sha256, const char *model_id,
                                 const cJSON *settings, int index, int count, lh_buf *out, lh_error *err) {
  char abs[4096];
  if (!realpath(batch_path, abs))
    return lh_error_set(err, errno == ENOENT ? LH_ENOTFOUND : LH_EIO, "%s: %s", batch_path, strerror(errno));
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "shard", index);
  cJSON_AddNumberToObject(o, "of", count);
  lh_json_add_text(o, "batch", abs);
  cJSON_AddStringToObject(o, "batch_sha256", batch_sha256);
  cJSON_AddStringToObject(o, "model_id", model_id);
  cJSON_AddItemToObject(o, "settings", cJSON_Duplicate(settings, 1));
  char *js = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  lh_status st = js ? lh_buf_append_str(out, js) : LH_ENOMEM;
  if (st == LH_OK) st = lh_buf_append(out, "\n", 1);
  free(js);
  return st == LH_OK ? LH_OK : lh_error_set(err, st, "out of memory");
}

static int is_sha256_hex(const char *s) { return s && strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64; }

/* n is an integer JSON number from 0 to INT_MAX */
static int is_count(const cJSON *n) {
  return cJSON_IsNumber(n) && n->valuedouble >= 0 && n->valuedouble <= INT_MAX && n->valuedouble == floor(n->valuedouble);
}

lh_status lh_shard_record_read(const char *path, lh_shard_record *rec, lh_error *err) {
  memset(rec, 0, sizeof *rec);
  lh_buf b = {0};
  lh_status st = lh_file_read_regular(path, 1 << 20, &b, err);
  if (st != LH_OK) {
    lh_buf_free(&b);
    return st;
  }
  cJSON *o = cJSON_ParseWithLength(b.data, b.len);
  lh_buf_free(&b);
  const cJSON *shard = cJSON_GetObjectItemCaseSensitive(o, "shard"), *of = cJSON_GetObjectItemCaseSensitive(o, "of");
  const char *batch = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "batch"));
  const char *sha = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "batch_sha256"));
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model_id");
  const cJSON *settings = cJSON_GetObjectItemCaseSensitive(o, "settings");
  char *stext = cJSON_IsObject(settings) ? cJSON_PrintUnformatted(settings) : NULL;
  const char *bad = !cJSON_IsObject(o)              ? "the file is not a JSON object"
                    : !is_count(shard)              ? "\"shard\" is not a whole number"
                    : !is_count(of)                 ? "\"of\" is not a whole number"
                    : !batch || !*batch              ? "\"batch\" is not a path"
                    : strlen(batch) >= sizeof rec->batch ? "\"batch\" is too long"
                    : !is_sha256_hex(sha)           ? "\"batch_sha256\" is not 64 lower-case hex digits"
                    : model && !is_sha256_hex(cJSON_GetStringValue(model))
                        ? "\"model_id\" is not 64 lower-case hex digits"
                    : settings && !cJSON_IsObject(settings) ? "\"settings\" is not an object"
                    : settings && (!stext || strlen(stext) >= sizeof rec->settings) ? "\"settings\" is too long"
                                                                                    : NULL;
  if (!bad) {
    rec->index = (int)shard->valuedouble;
    rec->count = (int)of->valuedouble;
    snprintf(rec->batch, sizeof rec->batch, "%s", batch);
    memcpy(rec->batch_sha256, sha, 65);
    if (model) memcpy(rec->model_id, model->valuestring, 65);
    if (settings) snprintf(rec->settings, sizeof rec->settings, "%s", stext);
  }
  free(stext);
  cJSON_Delete(o);
  return bad ? lh_error_set(err, LH_EFORMAT, "%s: not a shard record: %s", path, bad) : LH_OK;
}

/* The value of key in settings as JSON text into v (n bytes), "none" when it is absent. */
static void value_text(const cJSON *settings, const char *key, char *v, size_t n) {
  char *t = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(settings, key));
  snprintf(v, n, "%s", t ? t : "none");
  free(t);
}

int lh_shard_settings_differ(const lh_shard_record *a, const lh_shard_record *b, char *key, char *va, char *vb,
                             size_t n) {
  if (!a->settings[0] || !b->settings[0]) return 0;
  cJSON *sa = cJSON_Parse(a->settings), *sb = cJSON_Parse(b->settings);
  const char *k = NULL;
  for (int side = 0; side < 2 && !k; side++) {
    const cJSON *it, *mine = side ? sb : sa, *theirs = side ? sa : sb;
    cJSON_ArrayForEach(it, mine) {
      if (!cJSON_Compare(it, cJSON_GetObjectItemCaseSensitive(theirs, it->string), 1)) {
        k = it->string;
        break;
      }
    }
  }
  if (k) {
    snprintf(key, n, "%s", k);
    value_text(sa, k, va, n);
    value_text(sb, k, vb, n);
  }
  cJSON_Delete(sa);
  cJSON_Delete(sb);
  return k != NULL;
}
