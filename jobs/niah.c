/* niah.c — needle-in-a-haystack sweeps (see niah.h for the prompt layout and the scoring).
 *
 * Invariants
 *  1. H (the haystack stream) and every trial's needles are pure functions of the corpus, the
 *     tokenizer, the families file (its SHA-256 is in the sweep's key) and (seed, length, depth,
 *     trial): a rerun rebuilds exactly the same prompts, so finished trials in results.jsonl can
 *     be trusted and skipped.
 *  2. The main state only moves forward along [head][H], in chunks whose boundaries are multiples
 *     of `chunk` from position 0, and is checkpointed at each boundary: a killed sweep restores it
 *     from the store at the last boundary it reached.
 *  3. A trial forks from the main state at the last chunk boundary at or before its first needle,
 *     so the tokens before that boundary are computed once for the whole sweep.
 *  4. results.jsonl is appended one whole line per trial and flushed to disk before the next trial
 *     starts; a torn last line (kill -9 during the write) is ignored and the trial rerun, and cut
 *     off before the next row is appended. One sweep at a time appends (OUT/niah.lock).
 */
#define _POSIX_C_SOURCE 200809L
#include "jobs/niah.h"
#include "jobs/niah_internal.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "ingest/ingest.h"
#include "tokenizer/tokenizer.h"
#include "jobs/chat.h"
#include "jobs/niah_plot.h"
#include "jobs/outdir.h"
#include "store/store.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/log.h"
#include "util/testpoint.h"
#include "util/utf8.h"

#ifndef LH_DATA_DIR
#define LH_DATA_DIR "examples"
#endif

static volatile sig_atomic_t niah_stop;
void lh_niah_request_stop(void) { niah_stop = 1; }

static const char *const VARIANT_NAMES[] = {"single", "multikey", "multivalue", "multiquery", "whichfile"};

const char *lh_niah_variant_name(lh_niah_variant v) {
  return (int)v >= 0 && v < LH_NIAH_VARIANT_COUNT ? VARIANT_NAMES[v] : "unknown";
}

int lh_niah_variant_parse(const char *s) {
  for (int i = 0; i < LH_NIAH_VARIANT_COUNT; i++)
    if (!strcmp(s, VARIANT_NAMES[i])) return i;
  if (!strcmp(s, "multi-key")) return LH_NIAH_MULTIKEY;
  if (!strcmp(s, "multi-value")) return LH_NIAH_MULTIVALUE;
  if (!strcmp(s, "multi-query")) return LH_NIAH_MULTIQUERY;
  if (!strcmp(s, "which-file")) return LH_NIAH_WHICHFILE;
  return -1;
}

lh_niah_params lh_niah_default_params(void) {
  lh_niah_params p = {0};
  p.device = "cpu";
  p.trials = 1;
  p.seed = 20261201;
  p.chunk = 4096;
  p.max_tokens = 128; /* RULER's tokens_to_generate for its NIAH tasks: 32 cut a 4-value answer short */
  p.n_needles = 0;
  p.progress = LH_PROGRESS_AUTO;
  return p;
}

int lh_niah_parse_lengths(const char *s, int64_t *out, int max, lh_error *err) {
  int n = 0;
  const char *p = s;
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || !(v > 0) || !isfinite(v)) { /* nan and inf read as numbers */
      lh_error_set(err, LH_EINVAL, "--lengths %s: expected numbers like 1k,4k,128k,1m", s);
      return -1;
    }
    int64_t mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1024, end++;
    else if (*end == 'm' || *end == 'M') mul = 1048576, end++;
    if (*end && *end != ',') {
      lh_error_set(err, LH_EINVAL, "--lengths %s: unexpected '%c'", s, *end);
      return -1;
    }
    if (n == max) {
      lh_error_set(err, LH_EINVAL, "--lengths: at most %d lengths", max);
      return -1;
    }
    /* past int64, llround's result is unspecified (x86: INT64_MIN, read as a negative length) */
    if (!(v * (double)mul >= 0.5 && v * (double)mul <= LH_NIAH_MAX_LENGTH)) {
      lh_error_set(err, LH_EINVAL, "--lengths %s: %.*s is not a length of 1 to %lld tokens", s, (int)(end - p), p,
                   (long long)LH_NIAH_MAX_LENGTH);
      return -1;
    }
    out[n] = (int64_t)llround(v * (double)mul);
    for (int i = 0; i < n; i++)
      if (out[i] == out[n]) { /* its cells would hold every trial twice */
        lh_error_set(err, LH_EINVAL, "--lengths %s: %.*s is %lld tokens, listed already; give each length once", s,
                     (int)(end - p), p, (long long)out[n]);
        return -1;
      }
    n++;
    p = *end ? end + 1 : end;
  }
  if (!n) lh_error_set(err, LH_EINVAL, "--lengths is empty");
  return n ? n : -1;
}

int lh_niah_parse_depths(const char *s, double *out, int max, lh_error *err) {
  double a, b, step;
  char tail;
  int n = 0;
  if (sscanf(s, "%lf:%lf:%lf%c", &a, &b, &step, &tail) == 3) {
    if (!(step > 0 && a >= 0 && b <= 100 && a <= b)) { /* written so that nan fails too */
      lh_error_set(err, LH_EINVAL, "--depths %s: expected FROM:TO:STEP within 0..100", s);
      return -1;
    }
    const double count = floor((b - a) / step + 1e-9) + 1;
    if (count > max) { /* rather than a sweep of its first depths only */
      lh_error_set(err, LH_EINVAL, "--depths %s: %.0f depths; at most %d (take a larger STEP)", s, count, max);
      return -1;
    }
    for (double d = a; d <= b + 1e-9 && n < max; d += step) out[n++] = d;
    return n;
  }
  const char *p = s;
  while (*p) {
    char *end;
    double v = strtod(p, &end);
    if (end == p || !(v >= 0 && v <= 100) || (*end && *end != ',') || n == max) {
      lh_error_set(err, LH_EINVAL, "--depths %s: expected FROM:TO:STEP or a list of percentages", s);
      return -1;
    }
    for (int i = 0; i < n; i++)
      if (fabs(out[i] - v) < 1e-9) { /* the same depth, as results.jsonl's trials are matched */
        lh_error_set(err, LH_EINVAL, "--depths %s: %.*s is listed already; give each depth once", s, (int)(end - p), p);
        return -1;
      }
    out[n++] = v;
    p = *end ? end + 1 : end;
  }
  if (!n) lh_error_set(err, LH_EINVAL, "--depths is empty");
  return n ? n : -1;
}

/* ---- the built-in corpus ---- */

static const char *builtin_corpus(char *buf, size_t n) {
  char exe[4096];
  ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (l > 0) {
    exe[l] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      if ((size_t)snprintf(buf, n, "%.3900s/../examples/niah/haystack.tar.xz", exe) < n && lh_is_file(buf)) return buf;
      if ((size_t)snprintf(buf, n, "%.3900s/../share/longhaul/niah/haystack.tar.xz", exe) < n && lh_is_file(buf))
        return buf;
    }
  }
  snprintf(buf, n, "%s/niah/haystack.tar.xz", LH_DATA_DIR);
  return lh_is_file(buf) ? buf : NULL;
}

/* One more document start (they come in ascending order). */
static lh_status doc_add(sweep *S, int64_t start, lh_error *err) {
  if ((S->n_docs & (S->n_docs - 1)) == 0) { /* 0, 1, 2, 4, ...: double */
    int64_t *d = realloc(S->doc_start, (size_t)(S->n_docs ? 2 * S->n_docs : 1) * sizeof *d);
    if (!d) return lh_error_set(err, LH_ENOMEM, "out of memory");
    S->doc_start = d;
  }
  S->doc_start[S->n_docs++] = start;
  return LH_OK;
}

static lh_status load_haystack(sweep *S, const char *corpus, const char *db, int64_t need, lh_progress *prog,
                               lh_error *err) {
  lh_ingest_params ip = lh_ingest_default_params();
  ip.tokenizer = S->tok;
  /* OUT and the store are never haystack, should they lie in the corpus folder: results.jsonl
   * holds earlier trials' needles, and grows, so a resumed sweep's haystack would be another */
  char journal[4300], wal[4300], shm[4300];
  snprintf(journal, sizeof journal, "%.4200s-journal", db);
  snprintf(wal, sizeof wal, "%.4200s-wal", db);
  snprintf(shm, sizeof shm, "%.4200s-shm", db);
  const char *skip[] = {S->p->out_dir, db, journal, wal, shm};
  ip.exclude_paths = skip;
  ip.n_exclude_paths = sizeof skip / sizeof *skip;
  lh_ingest *ing = NULL;
  lh_status st = lh_ingest_open(&ip, &ing, err);
  if (st == LH_OK) st = lh_ingest_add_path(ing, corpus, err);
  lh_ingest_batch b;
  lh_ingest_stats is;
  lh_buf why = {0}; /* the first entry that gave no text, for a haystack too small to use */
  if (st == LH_OK) lh_ingest_stats_get(ing, &is);
  lh_progress_begin(prog, "haystack", "ingest", st == LH_OK && is.source_total > 0 ? is.source_total : 0, "B");
  while (st == LH_OK && (st = lh_ingest_next(ing, &b, err)) == LH_OK) {
    lh_testpoint("haystack");
    if (niah_stop) { /* a big corpus takes a while: the first ^C stops here too */
      st = lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
      break;
    }
    lh_i32vec_append(&S->H, b.tokens, b.n_tokens);
    for (size_t i = 0; i < b.n_entries && st == LH_OK; i++) {
      const lh_ingest_entry *e = &b.entries[i];
      if (e->token_start >= 0 && e->token_end > e->token_start) st = doc_add(S, e->token_start, err);
      else if (!why.len && e->status == LH_ENTRY_SKIPPED && e->reason != LH_REASON_DIRECTORY)
        lh_buf_printf(&why, "; %.*s was skipped as %s%s%s%s", (int)(e->path_len < 300 ? e->path_len : 300), e->path,
                      lh_entry_reason_name(e->reason), *e->detail ? " (" : "", e->detail, *e->detail ? ")" : "");
    }
    lh_ingest_stats_get(ing, &is);
    lh_progress_update(prog, is.source_bytes);
    if (b.done) break;
  }
  if (ing) {
    lh_ingest_stats_get(ing, &is);
    lh_progress_update(prog, is.source_bytes);
  }
  if (st == LH_OK) lh_progress_end(prog);
  else lh_progress_stop(prog, st == LH_EINTR ? "interrupted" : "failed");
  /* too little text: say why, from what ingest found (binary or not-UTF-8 files, no files) */
  lh_buf notes = {0};
  if (st == LH_OK && S->H.len < 64) {
    lh_ingest_notes(ing, &notes);
    while (notes.len && notes.data[notes.len - 1] == '\n') notes.data[--notes.len] = 0;
    for (size_t i = 0; i < notes.len; i++)
      if (notes.data[i] == '\n') notes.data[i] = ';';
  }
  lh_ingest_close(ing);
  S->corpus_tokens = (int64_t)S->H.len;
  if (st == LH_OK && S->corpus_tokens < 64)
    st = lh_error_set(err, LH_EINVAL, "haystack %s has only %lld tokens, too few for a haystack (64 at least)%s%s%s: "
                      "give %s", corpus, (long long)S->corpus_tokens, notes.len ? ": " : "", notes.len ? notes.data : "",
                      why.len ? why.data : "", notes.len || why.len ? "a corpus of UTF-8 text" : "a longer corpus");
  lh_buf_free(&notes);
  lh_buf_free(&why);
  if (st == LH_EINTR) return st;
  if (st == LH_EINVAL && S->corpus_tokens < 64) return st;
  if (st != LH_OK) return lh_error_prefix(err, st, "haystack %s: ", corpus);
  /* repeat whole copies of the corpus (document boundaries stay boundaries); the room is made
   * first, since appending H to itself would read the block a reallocation just freed */
  const int64_t copies = (need + S->corpus_tokens - 1) / S->corpus_tokens;
  if (copies > 1 && lh_i32vec_reserve(&S->H, (size_t)((copies - 1) * S->corpus_tokens)))
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  while ((int64_t)S->H.len < need) {
    memcpy(S->H.data + S->H.len, S->H.data, (size_t)S->corpus_tokens * sizeof *S->H.data);
    S->H.len += (size_t)S->corpus_tokens;
  }
  S->line_end = malloc(S->H.len);
  if (!S->line_end) return lh_error_set(err, LH_ENOMEM, "out of memory");
  memset(S->line_end, 2, S->H.len);
  return LH_OK;
}

/* ---- the sweep ---- */

static void on_progress(void *user, int64_t pos) { lh_progress_update(user, pos); }

static lh_status sweep_json(const lh_niah_params *p, const char *model_id, const char *corpus,
                            const lh_niah__families *fam, const char *title, char **out) {
  cJSON *o = cJSON_CreateObject();
  lh_json_add_text(o, "title", title);
  cJSON *k = cJSON_AddObjectToObject(o, "key"); /* what the results depend on */
  cJSON_AddStringToObject(k, "model_id", model_id);
  lh_json_add_text(k, "corpus", corpus);
  cJSON_AddStringToObject(k, "variant", lh_niah_variant_name(p->variant));
  cJSON_AddNumberToObject(k, "n_needles", p->n_needles);
  if (fam) { /* the grammar, by content: a file edited in place is another sweep */
    cJSON_AddStringToObject(k, "families", fam->sha256);
  } else {
    /* the templates are UTF-8: lh_niah_run refuses any that is not */
    cJSON_AddStringToObject(k, "needle", p->needle ? p->needle : lh_niah__default_needle());
    cJSON_AddStringToObject(k, "question", p->question ? p->question : lh_niah__default_question(p->variant));
    cJSON_AddStringToObject(k, "answer", p->answer ? p->answer : "{value}");
  }
  cJSON_AddNumberToObject(k, "seed", (double)p->seed);
  cJSON_AddNumberToObject(k, "max_tokens", p->max_tokens);
  cJSON_AddStringToObject(o, "device", p->device ? p->device : "cpu");
  cJSON_AddNumberToObject(o, "chunk", p->chunk);
  if (fam) lh_json_add_text(o, "families_file", p->families);
  *out = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  return *out ? LH_OK : LH_ENOMEM;
}

/* p->families read and checked against the variant (whichfile needs one; the templates it
 * replaces are refused beside it). */
static lh_status sweep_families(sweep *S, lh_error *err) {
  const lh_niah_params *p = S->p;
  if (!p->families)
    return p->variant == LH_NIAH_WHICHFILE
               ? lh_error_set(err, LH_EINVAL, "--variant whichfile asks a families file's file_questions; pass "
                              "--families FILE (e.g. tools/train_tiny/heldout_families.json)")
               : LH_OK;
  if (p->needle || p->question || p->answer)
    return lh_error_set(err, LH_EINVAL, "--families draws every trial's needle, question and answer from %s; drop "
                        "--needle, --question and --answer", p->families);
  const lh_status st = lh_niah__families_load(p->families, &S->fam, err);
  return st ? st : lh_niah__families_check(S->fam, p->families, p->variant, lh_niah__needles(p),
                                           lh_niah__builtin_keys(), err);
}

/* The model, its tokenizer and chat format, the stop ids and the haystack stream. The weights'
 * digests come from the sweep's store (kind "model", as `longhaul run` keeps them): a rerun, or
 * the next sweep with the same --db, does not read and hash every byte of the weights again. */
static lh_status sweep_open(sweep *S, lh_store *store, const char *corpus, const char *db, lh_progress *prog,
                            lh_error *err) {
  const lh_niah_params *p = S->p;
  lh_model_params mp = lh_model_default_params();
  mp.backend = p->device ? p->device : "cpu";
  mp.threads = p->threads;
  mp.cpu_attention = p->cpu_attention;
  mp.max_rows = lh_plan_max_rows(&S->plan, mp.max_rows);
  lh_digest_cache weights;
  lh_status st = lh_store_digest_cache(store, "model", &weights, err);
  if (st) return st;
  mp.digest_cache = &weights;
  mp.stop = &niah_stop;
  if ((st = lh_model_open(p->model_dir, &mp, &S->model, err))) return st;
  lh_error de;
  if (lh_store_digest_flush(store, &de) != LH_OK) lh_log_warn("%s (the weights are read again next run)", de.msg);
  S->cfg = lh_model_config(S->model);
  if ((st = lh_chat_tokenizer_open(p->model_dir, NULL, S->cfg->vocab_size, &S->tok, &S->chat, err))) return st;
  if (S->chat.kind == LH_CHAT_MINIMAX) {
    const char *h = "<beginning_of_sentence>user name=user\n";
    lh_tokenizer_encode(S->tok, h, strlen(h), 0, &S->head, NULL);
    S->stop_ids[S->n_stop++] = lh_tokenizer_token_to_id(S->tok, "<end_of_sentence>");
  }
  if (S->cfg->eos_token_id >= 0) S->stop_ids[S->n_stop++] = S->cfg->eos_token_id;
  const char *slash = strrchr(p->model_dir, '/');
  snprintf(S->model_name, sizeof S->model_name, "%s", slash && slash[1] ? slash + 1 : p->model_dir);
  lh_utf8_fit(S->model_name, sizeof S->model_name);
  int64_t maxlen = 0;
  for (int i = 0; i < p->n_lengths; i++) maxlen = p->lengths[i] > maxlen ? p->lengths[i] : maxlen;
  if (S->cfg->max_position_embeddings > 0 && maxlen + p->max_tokens > S->cfg->max_position_embeddings)
    return lh_error_set(err, LH_ELIMIT, "length %lld + %d answer tokens is over the model's context of %d tokens",
                        (long long)maxlen, p->max_tokens, S->cfg->max_position_embeddings);
  return load_haystack(S, corpus, db, maxlen, prog, err);
}

/* sweep.json: a rerun into the same folder must be the same sweep (same key and grid; --force
 * starts over, --extend grows the grid: lh_niah__claim_out). title receives the sweep's title (the
 * first run's date is kept). */
static lh_status sweep_claim_out(sweep *S, const char *corpus, char *title, size_t title_n, lh_error *err) {
  const lh_niah_params *p = S->p;
  char date[32];
  lh_utc_now(date, sizeof date);
  date[10] = 0;
  snprintf(title, title_n, "NIAH %s%s: %s, %s, %s", lh_niah_variant_name(p->variant),
           S->fam ? " (families)" : "", S->model_name, p->device ? p->device : "cpu", date);
  lh_utf8_fit(title, title_n);
  char *sj = NULL;
  if (sweep_json(p, lh_model_id(S->model), corpus, S->fam, title, &sj))
    return lh_error_set(err, LH_ENOMEM, "out of memory");
  const lh_status st = lh_niah__claim_out(p, sj, title, title_n, err);
  free(sj);
  return st;
}

static int cmp_trial_pos(const void *a, const void *b) {
  const trial *x = *(trial *const *)a, *y = *(trial *const *)b;
  return (x->pos[0] > y->pos[0]) - (x->pos[0] < y->pos[0]);
}

/* Every trial of the sweep, marked done when results.jsonl has it, ordered by first needle. */
static lh_status sweep_trials(sweep *S, const char *results, lh_niah_summary *sum, lh_error *err) {
  const lh_niah_params *p = S->p;
  lh_niah__done *done = NULL;
  int nd = 0;
  lh_status st = lh_niah__read_done(results, &done, &nd, err);
  if (st) return st;
  S->nt = p->n_lengths * p->n_depths * p->trials;
  S->T = calloc((size_t)S->nt, sizeof *S->T);
  S->order = calloc((size_t)S->nt, sizeof *S->order);
  if (!S->T || !S->order) st = lh_error_set(err, LH_ENOMEM, "out of memory");
  int k = 0;
  for (int li = 0; li < p->n_lengths && !st; li++)
    for (int di = 0; di < p->n_depths && !st; di++)
      for (int ti = 0; ti < p->trials && !st; ti++, k++) {
        lh_testpoint("niah-trial");
        if (niah_stop) { /* 65536 trials of long prompts take a while to draw too */
          st = lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
          break;
        }
        trial *t = &S->T[k];
        *t = (trial){.length = p->lengths[li], .depth = p->depths[di], .index = ti};
        st = lh_niah__make_trial(S, t, err);
        t->done = lh_niah__is_done(done, nd, t);
        sum->trials_resumed += t->done;
        S->order[k] = t;
      }
  free(done);
  if (!st) qsort(S->order, (size_t)S->nt, sizeof *S->order, cmp_trial_pos);
  return st;
}

/* --save-prompts: trial t's prompt (toks) as text, in OUT/prompts/L<length>-D<depth>-T<trial>.txt. */
static lh_status save_prompt(sweep *S, const trial *t, const lh_i32vec *toks, lh_error *err) {
  char dir[4200], path[4400];
  snprintf(dir, sizeof dir, "%s/prompts", S->p->out_dir);
  lh_status st = lh_mkdir_p(dir, err);
  if (st) return st;
  snprintf(path, sizeof path, "%s/L%lld-D%g-T%d.txt", dir, (long long)t->length, t->depth, t->index);
  lh_buf b = {0};
  st = lh_tokenizer_decode(S->tok, toks->data, toks->len, 0, &b, err);
  if (st == LH_OK) st = lh_file_write_atomic(path, b.data ? b.data : "", b.len, err);
  lh_buf_free(&b);
  return st;
}

/* One trial: advance the main prefix to the chunk boundary at or before the first needle, fork
 * it, feed the rest of the prompt, decode greedily, record the line. */
static lh_status run_trial(sweep *S, lh_prefix *mainpx, trial *t, FILE *rf, const char *results,
                           lh_progress *prog, lh_niah_summary *sum, lh_error *err) {
  const lh_niah_params *p = S->p;
  const double t0 = lh_now();
  const int64_t fork_at = ((int64_t)S->head.len + t->pos[0]) / S->plan.chunk * S->plan.chunk;
  const int64_t main_before = lh_prefix_computed(mainpx);
  lh_status st = lh_prefix_advance(mainpx, fork_at, err);
  if (st) return st;
  if (lh_prefix_pos(mainpx) != fork_at) /* the prefix never moves back: a fork here would hold other tokens */
    return lh_error_set(err, LH_EINVAL, "niah: the shared prefix stands at token %lld, past the fork point %lld of %s",
                        (long long)lh_prefix_pos(mainpx), (long long)fork_at, t->expected);
  lh_i32vec toks = {0};
  lh_fork f = {.max_tokens = p->max_tokens, .sampler = {.temperature = 0, .top_p = 1}};
  int64_t total = 0;
  char label[96], lab[16];
  lh_niah_length_label(t->length, lab, sizeof lab);
  snprintf(label, sizeof label, "%s @%g%% #%d", lab, t->depth, t->index);
  st = lh_niah__trial_tokens(S, t, &toks, &total, err);
  if (st == LH_OK && p->save_prompts) st = save_prompt(S, t, &toks, err);
  if (st == LH_OK) st = lh_prefix_fork(mainpx, &f.state, err);
  if (st == LH_OK) {
    lh_pipeline_hooks h = {.progress = on_progress, .user = prog, .stop = &niah_stop};
    lh_progress_begin(prog, label, "prefill", total, "tok");
    lh_progress_prefill(prog, fork_at); /* the shared prefix is restored, not prefilled here */
    st = lh_pipeline_feed(f.state, toks.data + fork_at, total - fork_at, &S->plan, &h, NULL, err);
    if (st == LH_OK) lh_progress_end(prog);
    else lh_progress_stop(prog, st == LH_EINTR ? "interrupted" : "failed");
  }
  if (st == LH_OK) {
    lh_decode_params dp = {.stop_ids = S->stop_ids, .n_stop_ids = S->n_stop, .stop = &niah_stop};
    st = lh_decode_forks(&f, 1, &dp, err);
    if (st == LH_OK && f.status != LH_OK) st = lh_error_set(err, f.status, "%s", f.err.msg);
  }
  lh_buf ans = {0};
  if (st == LH_OK) {
    lh_buf raw = {0};
    lh_tokenizer_decode(S->tok, f.tokens.data, f.tokens.len, 1, &raw, NULL);
    lh_utf8_replace(&ans, raw.data ? raw.data : "", raw.len, NULL); /* results files are valid UTF-8 */
    lh_buf_free(&raw);
    const lh_niah__measure m = {
        .tokens = total, .needle_token = (int64_t)S->head.len + t->pos[0], .seconds = lh_now() - t0,
        .tokens_computed = total - fork_at + lh_prefix_computed(mainpx) - main_before + (int64_t)f.tokens.len,
        .answer_ids = f.tokens.data, .n_answer_ids = f.tokens.len};
    int ok = 0;
    char got[512];
    st = lh_niah__record(rf, results, t, p->variant, ans.data, &m, &ok, got, sizeof got, err);
    lh_progress_note(prog, "  %-8s depth %5.1f%%  trial %d: %s  (expected %s, got \"%s\")", lab, t->depth, t->index,
                     ok ? "ok  " : "MISS", t->expected, got);
    sum->trials_run += st == LH_OK;
  }
  lh_buf_free(&ans);
  lh_fork_clear(&f);
  lh_state_free(f.state);
  lh_i32vec_free(&toks);
  if (st == LH_EINTR) lh_error_set(err, LH_EINTR, "interrupted; rerun the same command to resume");
  return st;
}

static void sweep_close(sweep *S) {
  for (int i = 0; S->T && i < S->nt; i++) {
    for (int j = 0; j < 16; j++) lh_buf_free(&S->T[i].needle_text[j]);
    lh_buf_free(&S->T[i].family);
  }
  free(S->T);
  free(S->order);
  lh_i32vec_free(&S->H);
  lh_i32vec_free(&S->head);
  lh_i32vec_free(&S->main);
  free(S->line_end);
  free(S->doc_start);
  lh_niah__families_free(S->fam);
  lh_tokenizer_close(S->tok);
  lh_model_close(S->model);
}

/* A torn last line of results.jsonl (a kill while it was written) is cut off before the next row
 * is appended, or that row would be glued to it and lost with it (invariant 4). */
static lh_status cut_torn_tail(int fd, const char *path, lh_error *err) {
  struct stat sb;
  if (fstat(fd, &sb) != 0) return lh_error_set(err, LH_EIO, "%s: %s", path, strerror(errno));
  char buf[4096];
  off_t keep = sb.st_size;
  while (keep > 0) { /* back to just after the last newline */
    const off_t from = keep > (off_t)sizeof buf ? keep - (off_t)sizeof buf : 0;
    const ssize_t k = pread(fd, buf, (size_t)(keep - from), from);
    if (k != keep - from) return lh_error_set(err, LH_EIO, "%s: %s", path, k < 0 ? strerror(errno) : "short read");
    ssize_t i = k;
    while (i > 0 && buf[i - 1] != '\n') i--;
    if (i > 0) {
      keep = from + i;
      break;
    }
    keep = from;
  }
  if (keep == sb.st_size) return LH_OK;
  if (ftruncate(fd, keep) != 0 || fsync(fd) != 0)
    return lh_error_set(err, errno == ENOSPC ? LH_EFULL : LH_EIO, "%s: cutting its torn last line: %s", path,
                        strerror(errno));
  lh_log_warn("niah: %s: cut its torn last line (%lld bytes, from a sweep stopped while writing it); that trial "
              "runs again", path, (long long)(sb.st_size - keep));
  return LH_OK;
}

lh_status lh_niah_run(const lh_niah_params *p, lh_niah_summary *sum, lh_error *err) {
  memset(sum, 0, sizeof *sum);
  niah_stop = 0;
  const double t_start = lh_now();
  sweep S = {.p = p, .plan = {.chunk = p->chunk, .checkpoint_every = 1}};
  lh_store *store = NULL;
  lh_store_writer *writer = NULL;
  lh_prefix *mainpx = NULL;
  lh_outdir *od = NULL; /* OUT, locked: one sweep at a time appends to its results.jsonl */
  FILE *rf = NULL;
  int claimed = 0; /* sweep_claim_out wrote OUT/sweep.json */
  char cbuf[4096], results[4200], db[4200], title[512];
  if (!p->model_dir || !p->out_dir) return lh_error_set(err, LH_EINVAL, "--model and --out are required");
  if (p->n_lengths < 1 || p->n_depths < 1 || p->trials < 1 || p->chunk < 1)
    return lh_error_set(err, LH_EINVAL, "need at least one length, one depth and one trial");
  const int64_t n_trials = (int64_t)p->n_lengths * p->n_depths * p->trials; /* every trial is held at once */
  if (n_trials > LH_NIAH_MAX_TRIALS)
    return lh_error_set(err, LH_EINVAL, "%d lengths x %d depths x %d trials is %lld trials; a sweep has at most %d: "
                        "pass fewer --trials, --lengths or --depths", p->n_lengths, p->n_depths, p->trials,
                        (long long)n_trials, LH_NIAH_MAX_TRIALS);
  if (p->n_needles > 16)
    return lh_error_set(err, LH_EINVAL, "--needles %d: a trial has at most 16 needles", p->n_needles);
  if (p->n_needles > 1 && (p->variant == LH_NIAH_SINGLE || p->variant == LH_NIAH_WHICHFILE))
    return lh_error_set(err, LH_EINVAL, "--needles %d: --variant %s plants one needle per trial; drop --needles, or "
                        "pass --variant multikey, multivalue or multiquery", p->n_needles,
                        lh_niah_variant_name(p->variant));
  if (p->n_needles == 1 && p->variant == LH_NIAH_MULTIQUERY)
    return lh_error_set(err, LH_EINVAL, "--needles 1: --variant multiquery asks for two needles' values; pass "
                        "--needles 2 or more");
  for (int i = 0; i < p->n_lengths; i++)
    for (int j = 0; j < i; j++)
      if (p->lengths[i] == p->lengths[j])
        return lh_error_set(err, LH_EINVAL, "length %lld is in the sweep twice; give each length once",
                            (long long)p->lengths[i]);
  for (int i = 0; i < p->n_depths; i++)
    for (int j = 0; j < i; j++)
      if (fabs(p->depths[i] - p->depths[j]) < 1e-9)
        return lh_error_set(err, LH_EINVAL, "depth %g%% is in the sweep twice; give each depth once", p->depths[i]);
  const char *const tpl[3] = {p->needle, p->question, p->answer}, *const tpl_name[3] = {"needle", "question", "answer"};
  for (int i = 0; i < 3; i++) /* written into results.jsonl, results.csv and sweep.json as they are */
    if (tpl[i] && !lh_utf8_valid((const uint8_t *)tpl[i], strlen(tpl[i])))
      return lh_error_set(err, LH_EINVAL, "--%s is not UTF-8 text (the reports would carry its bytes as they are); "
                          "pass it in UTF-8", tpl_name[i]);
  /* templates that make every score the same: a needle without the value plants nothing to find,
   * an answer without it is one string for every trial ("" is in every answer), a question with it
   * gives the answer away */
  if (p->needle && !strstr(p->needle, "{value}"))
    return lh_error_set(err, LH_EINVAL, "--needle has no {value}: it would plant nothing to retrieve");
  if (p->answer && !strstr(p->answer, "{value}"))
    return lh_error_set(err, LH_EINVAL, "--answer has no {value}: every trial would expect the same text%s",
                        *p->answer ? "" : " (the empty answer is in every reply, so every trial would score 1)");
  if (p->question && strstr(p->question, "{value}"))
    return lh_error_set(err, LH_EINVAL, "--question has {value}: it would give the answer away");
  const char *corpus = p->corpus ? p->corpus : builtin_corpus(cbuf, sizeof cbuf);
  if (!corpus)
    return lh_error_set(err, LH_ENOTFOUND, "the built-in haystack (examples/niah/haystack.tar.xz) was not found; "
                                            "pass --corpus with an archive, folder or file");
  /* before OUT is made: a model folder that is not there, a backend this build lacks or a bad
   * families file leaves no folder */
  lh_status st = lh_model_check(p->model_dir, "none", err);
  if (st) return lh_error_prefix(err, st, "--model: ");
  if ((st = lh_model_check(p->model_dir, p->device, err))) return lh_error_prefix(err, st, "--device: ");
  st = sweep_families(&S, err);
  if (st == LH_OK) st = lh_outdir_open(p->out_dir, "niah.lock", p->wait, &od, err);
  if (st) {
    lh_niah__families_free(S.fam);
    return st;
  }
  lh_progress *prog = lh_progress_open(p->progress, stderr, 10);
  snprintf(results, sizeof results, "%s/results.jsonl", p->out_dir);
  snprintf(db, sizeof db, "%s/niah.db", p->out_dir);
  lh_store_params sp = lh_store_default_params();
  lh_store_writer_params wp = lh_store_writer_default_params();
  const char *dbp = p->db_path ? p->db_path : db;
  sp.no_follow = wp.store.no_follow = !p->db_path; /* OUT's own store; a --db the user names may be a link */
  if ((st = lh_store_open(dbp, &sp, &store, err)) || (st = sweep_open(&S, store, corpus, dbp, prog, err)) ||
      (st = sweep_claim_out(&S, corpus, title, sizeof title, err)))
    goto done;
  claimed = 1; /* sweep.json is written: what follows is the sweep's, kept whatever happens */
  if ((st = sweep_trials(&S, results, sum, err))) goto done;

  /* the main sequence: the head and the haystack up to the last unfinished trial's fork point;
   * restored from the store no further than the first one (a --force rerun, or a --db another
   * sweep filled, holds checkpoints past it, and the main sequence never moves back) */
  int64_t main_end = 0, first_fork = -1;
  for (int i = 0; i < S.nt; i++)
    if (!S.order[i]->done) {
      main_end = (int64_t)S.head.len + S.order[i]->pos[0];
      if (first_fork < 0) first_fork = main_end / p->chunk * p->chunk;
    }
  main_end = main_end / p->chunk * p->chunk;
  lh_i32vec_append(&S.main, S.head.data, S.head.len);
  if (main_end > (int64_t)S.head.len) lh_i32vec_append(&S.main, S.H.data, (size_t)(main_end - (int64_t)S.head.len));
  if ((st = lh_store_model_register(store, S.model, err)) ||
      (st = lh_store_writer_open(dbp, &wp, &writer, err)))
    goto done;
  lh_prefix_params pp = lh_prefix_default_params();
  pp.plan = S.plan;
  pp.store = store;
  pp.writer = writer;
  pp.hooks.stop = &niah_stop;
  pp.restore_upto = first_fork < 0 ? main_end : first_fork;
  if ((st = lh_prefix_open(S.model, S.main.data, (int64_t)S.main.len, &pp, &mainpx, err))) goto done;
  sum->tokens_restored = lh_prefix_restored(mainpx);
  if (sum->tokens_restored)
    lh_progress_note(prog, "niah: resumed the shared haystack prefix from a checkpoint at token %lld",
                     (long long)sum->tokens_restored);
  {
    int fd;
    if ((st = lh_file_open_plain(results, O_RDWR | O_APPEND | O_CREAT, &fd, err))) goto done;
    if ((st = cut_torn_tail(fd, results, err))) {
      close(fd);
      goto done;
    }
    if (!(rf = fdopen(fd, "ab"))) {
      close(fd);
      st = lh_error_set(err, LH_EIO, "%s: %s", results, strerror(errno));
      goto done;
    }
  }
  int todo = 0, ran = 0; /* the sweep counter: trials left to this run */
  for (int i = 0; i < S.nt; i++) todo += !S.order[i]->done;
  lh_progress_batch(prog, "trial", 0, 0, todo);
  for (int i = 0; i < S.nt && st == LH_OK; i++)
    if (!S.order[i]->done) {
      st = run_trial(&S, mainpx, S.order[i], rf, results, prog, sum, err);
      if (st == LH_OK) lh_progress_batch(prog, "trial", ++ran, 0, todo);
    }
  {
    lh_error we;
    const lh_status ws = lh_store_writer_close(writer, &we);
    writer = NULL;
    if (ws != LH_OK && st == LH_OK) { st = ws; if (err) *err = we; }
  }
  fclose(rf), rf = NULL;
  if (st == LH_OK || st == LH_EINTR) {
    lh_error re;
    const lh_status rs = lh_niah__write_reports(p->out_dir, title, sum, &re);
    if (rs != LH_OK && rs != LH_ENOTFOUND && st == LH_OK) { st = rs; if (err) *err = re; }
  }

done:
  sum->seconds = lh_now() - t_start;
  if (rf) fclose(rf);
  lh_prefix_close(mainpx);
  lh_store_writer_close(writer, NULL);
  /* a sweep refused or stopped before it wrote sweep.json (a model that does not load, a corpus,
   * a --db) leaves nothing it made: its store in OUT while nothing is stored in it (the weights'
   * digests do not count), the lock, OUT and the folders above it */
  const int refused = st != LH_OK && !claimed;
  if (refused && !p->db_path) lh_store_discard(store);
  else lh_store_close(store);
  sweep_close(&S);
  lh_progress_close(prog);
  if (refused) lh_outdir_abandon(od);
  else lh_outdir_close(od);
  return st;
}
