/* test_niah_families.c — `longhaul niah --families`: a families file's facts read as
 * tools/train_tiny/grammar.py writes them, are drawn from the seed alone, and run end to end.
 *
 *  1. Rendering: every template and identifier in tests/fixtures/niah/families_render.json
 *     (written by tools/make_niah_families_fixture.py, which runs grammar.py) renders to the same
 *     bytes; grammar.py's drawn values and ours match each pattern, field by field.
 *  2. Loading: tools/train_tiny/heldout_families.json loads whole; broken files are refused with
 *     the field named.
 *  3. Drawing: a trial's facts are a function of its generator's seed (the same seed twice gives
 *     the same trial, other seeds other trials); over many seeds every needle, question and value
 *     kind comes up, an {id} question only with a needle that writes an {id}, multikey's keys
 *     differ and share the attribute, multivalue's values differ and share key and template.
 *  4. End to end on models/haul-tiny (CPU, 1K tokens): results.jsonl has each trial's family,
 *     results.csv its needle kind, templates and value kind, summary.json the accuracy per needle
 *     kind and value kind, sweep.json the file's SHA-256;
 *     the same seed into another folder writes byte-identical prompts (--save-prompts), another
 *     seed other ones; whichfile's expected path is the header of the document its needle is in;
 *     multivalue's expected list is the values in text order; wrong combinations are refused before
 *     OUT is made.
 * `test_niah_families --no-sweep` runs 1-3 only (ctest's test_niah_families_grammar, label unit).
 */
#include <cjson/cJSON.h>

#include "jobs/niah.h"
#include "jobs/niah_internal.h"
#include "tests/test.h"
#include "util/fs.h"
#include "util/hash.h"

#define FAMILIES "tools/train_tiny/heldout_families.json"
#define FIXTURE "tests/fixtures/niah/families_render.json"

static cJSON *read_json(const char *path) {
  lh_buf b = {0};
  lh_error e;
  cJSON *o = NULL;
  if (lh_file_read(path, 64u << 20, &b, &e) == LH_OK) o = cJSON_ParseWithLength(b.data, b.len);
  lh_buf_free(&b);
  return o;
}

static const char *str(const cJSON *o, const char *k) {
  return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
}

/* ---- 1. rendering against grammar.py ---- */

/* A pattern as a list of items: a literal byte, a character class or a value word. */
typedef struct item {
  char kind; /* 0 literal, else the field letter */
  char c;
} item;

static int parse_pattern(const char *p, item *it, int max) {
  int n = 0;
  while (*p && n < max) {
    int len = 0, count = 1;
    if (p[0] == '{' && p[1] && strchr("dDxXaAw", p[1])) {
      int i = 2, c = 0;
      while (p[i] >= '0' && p[i] <= '9') c = c * 10 + (p[i++] - '0');
      if (p[i] == '}') len = i + 1, count = i > 2 ? c : 1;
    }
    if (!len) {
      it[n++] = (item){0, *p++};
      continue;
    }
    for (int k = 0; k < count && n < max; k++) it[n++] = (item){p[1], 0};
    p += len;
  }
  return n;
}

static int in_class(char f, char c) {
  switch (f) {
  case 'd': return c >= '0' && c <= '9';
  case 'D': return c >= '1' && c <= '9';
  case 'x': return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  case 'X': return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
  case 'a': return c >= 'a' && c <= 'z';
  case 'A': return c >= 'A' && c <= 'Z';
  }
  return 0;
}

/* Whether v is a value items[0:n] can give (words tried in turn: backtracking). */
static int match(const item *it, int n, const char *v, const char *const *words, int nw) {
  if (!n) return !*v;
  if (!it->kind) return *v == it->c && match(it + 1, n - 1, v + 1, words, nw);
  if (it->kind != 'w') return *v && in_class(it->kind, *v) && match(it + 1, n - 1, v + 1, words, nw);
  for (int i = 0; i < nw; i++) {
    const size_t l = strlen(words[i]);
    if (!strncmp(v, words[i], l) && match(it + 1, n - 1, v + l, words, nw)) return 1;
  }
  return 0;
}

static void check_rendering(void) {
  cJSON *fx = read_json(FIXTURE);
  CHECK_MSG(fx != NULL, "%s (run tools/make_niah_families_fixture.py)", FIXTURE);
  if (!fx) return;
  int n = 0, bad = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fx, "render")) {
    const char *style = str(c, "id_style");
    lh_buf b = {0};
    const lh_status st = lh_niah__render(&b, str(c, "text"), str(c, "key"), str(c, "attr"), str(c, "value"),
                                         style ? lh_niah__id_style_parse(style) : LH_NIAH__ID_NONE);
    if (st || !b.data || strcmp(b.data, str(c, "out"))) {
      if (bad++ < 5) fprintf(stderr, "render %s: got \"%s\", grammar.py \"%s\"\n", str(c, "text"), b.data, str(c, "out"));
    }
    lh_buf_free(&b);
    n++;
  }
  CHECK_MSG(n >= 250 && !bad, "%d of %d templates render otherwise than grammar.py", bad, n);
  n = bad = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fx, "ids")) {
    lh_buf b = {0};
    const int style = lh_niah__id_style_parse(str(c, "id_style"));
    CHECK(style >= 0 && !strcmp(lh_niah__id_style_name(style), str(c, "id_style")));
    lh_niah__render_id(&b, str(c, "key"), str(c, "attr"), style);
    if (!b.data || strcmp(b.data, str(c, "out")))
      if (bad++ < 5) fprintf(stderr, "id %s: got \"%s\", grammar.py \"%s\"\n", str(c, "id_style"), b.data, str(c, "out"));
    lh_buf_free(&b);
    n++;
  }
  CHECK_MSG(n == 288 && !bad, "%d of %d identifiers differ from grammar.py's", bad, n);
  CHECK(lh_niah__id_style_parse("shouting") < 0 && lh_niah__id_style_name(-1) == NULL);
  lh_buf b = {0};
  CHECK_EQ(lh_niah__render(&b, "{id} = 1", "k", "a b", "", LH_NIAH__ID_NONE), LH_EINVAL);
  lh_buf_free(&b);
  /* values: grammar.py's and ours fit the same pattern, and ours cover what the fields allow */
  const char *words[128];
  int nw = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fx, "words")) if (nw < 128) words[nw++] = c->valuestring;
  int patterns = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(fx, "values")) {
    item it[256];
    const char *pat = str(c, "pattern");
    const int ni = parse_pattern(pat, it, 256);
    const cJSON *v;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(c, "values"))
      CHECK_MSG(match(it, ni, v->valuestring, words, nw), "grammar.py's %s does not fit %s as we read it", v->valuestring, pat);
    uint64_t rng = 7;
    for (int k = 0; k < 64; k++) {
      lh_buf val = {0};
      CHECK_EQ(lh_niah__expand_value(&val, pat, words, nw, &rng), LH_OK);
      CHECK_MSG(val.data && match(it, ni, val.data, words, nw), "our %s does not fit %s", val.data, pat);
      lh_buf_free(&val);
    }
    patterns++;
  }
  CHECK(patterns >= 26);
  /* {D} never gives 0 and {x} gives every hex digit, over enough draws */
  uint64_t rng = 1;
  int seen[256] = {0};
  for (int k = 0; k < 2000; k++) {
    lh_buf val = {0};
    lh_niah__expand_value(&val, "{D}", words, nw, &rng);
    seen[(unsigned char)val.data[0]]++;
    lh_buf_clear(&val);
    lh_niah__expand_value(&val, "{x}", words, nw, &rng);
    seen[(unsigned char)val.data[0]] += 1000000;
    lh_buf_free(&val);
  }
  CHECK(seen['0'] >= 1000000 && seen['0'] % 1000000 == 0 && seen['f'] > 0 && seen['9'] % 1000000 > 0);
  cJSON_Delete(fx);
}

/* ---- 2. loading ---- */

static lh_status load_text(const char *text, lh_niah__families **F, lh_error *e) {
  char path[600];
  snprintf(path, sizeof path, "%s/fam.json", lh_test_tmpdir());
  FILE *f = fopen(path, "w");
  fputs(text, f);
  fclose(f);
  return lh_niah__families_load(path, F, e);
}

static void check_refused(const char *text, const char *says) {
  lh_niah__families *F = NULL;
  lh_error e;
  lh_error_clear(&e);
  const lh_status st = load_text(text, &F, &e);
  CHECK_MSG(st == LH_EFORMAT && !F, "accepted (%d): %s", st, text);
  CHECK_STR_CONTAINS(e.msg, says);
}

#define OK_REST                                                                                     \
  "\"questions\": [{\"text\": \"What is the {attr} of {key}?\", \"needs_id\": false}],"             \
  "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d4}\"]}], \"attributes\": [\"port number\"]"

static void check_loading(void) {
  lh_niah__families *F = NULL;
  lh_error e;
  lh_error_clear(&e);
  CHECK_EQ(lh_niah__families_load(FAMILIES, &F, &e), LH_OK);
  cJSON *j = read_json(FAMILIES);
  if (F && j) {
    CHECK_EQ(F->n_needles, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "needles")));
    CHECK_EQ(F->n_questions[LH_NIAH__Q_SINGLE], cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "questions")));
    CHECK_EQ(F->n_questions[LH_NIAH__Q_FILE], cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "file_questions")));
    CHECK_EQ(F->n_kinds, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "value_kinds")));
    CHECK_EQ(F->n_keys, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "keys")));
    CHECK_EQ(F->n_words, cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "value_words")));
    lh_buf b = {0};
    lh_file_read(FAMILIES, 16u << 20, &b, &e);
    uint8_t d[32];
    char hex[65];
    lh_sha256_buf(b.data, b.len, d);
    lh_hex(d, 32, hex);
    CHECK(!strcmp(hex, F->sha256));
    lh_buf_free(&b);
  }
  cJSON_Delete(j);
  lh_niah__families_free(F);
  lh_niah__families_free(NULL);
  F = NULL;
  CHECK_EQ(load_text("{\"needles\": [{\"kind\": \"prose\", \"text\": \"{key} {attr} {value}\", \"id_style\": null}], " OK_REST "}",
                     &F, &e), LH_OK);
  CHECK(F && F->n_keys == 0 && F->n_questions[LH_NIAH__Q_MULTI_VALUE] == 0);
  lh_niah__families_free(F);
  check_refused("{\"needles\": [", ":1: not JSON");
  check_refused("[1, 2]", "one JSON object");
  check_refused("{" OK_REST "}", "needles");
  check_refused("{\"needles\": [{\"kind\": \"assign\", \"text\": \"{id} = {value}\", \"id_style\": null}], " OK_REST "}",
                "needles[0].id_style");
  check_refused("{\"needles\": [{\"kind\": \"assign\", \"text\": \"{id} = {value}\", \"id_style\": \"shout\"}], " OK_REST "}",
                "\"shout\" is not");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": \"snake\"}], " OK_REST "}",
                "without {id}");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {attr}\", \"id_style\": null}], " OK_REST "}",
                "needles[0].text");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"Is it {value}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d4}\"]}], \"attributes\": [\"a\"]}",
                "must not contain {value}");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {id}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d4}\"]}], \"attributes\": [\"a\"]}",
                "questions[0].text");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {key}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d200}\"]}], \"attributes\": [\"a\"]}",
                "value_kinds[0].patterns[0]");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {key}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"w\", \"patterns\": [\"{w}-{d}\"]}], \"attributes\": [\"a\"]}",
                "needs value_words");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {key}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d}\"]}], \"attributes\": []}",
                "attributes");
  /* a key given twice: cJSON would read the first, grammar.py (Python's json) the last */
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], " OK_REST ","
                "\"value_kinds\": [{\"name\": \"e\", \"patterns\": [\"{a4}\"]}]}",
                "key \"value_kinds\" appears more than once");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"text\": \"{value}\", \"id_style\": null}], "
                OK_REST "}",
                "key \"text\" appears more than once");
  /* a key listed twice: multikey drew different keys until it had --needles of them, for ever */
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], " OK_REST ","
                "\"keys\": [\"alpha\", \"bravo\", \"alpha\"]}",
                "keys[2]: \"alpha\" is keys[0] again");
  /* a pattern of count-0 fields draws "" (planted as "(null)", and never found) */
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {key}?\", \"needs_id\": false}],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d4}\", \"{d0}{x0}\"]}], \"attributes\": [\"a\"]}",
                "value_kinds[0].patterns[1]: its values are empty");
  /* a string that is not UTF-8, or holds a NUL, refused with its JSON path: cJSON copies the bytes
   * as they are (into results.jsonl, results.csv and the heatmap) and ends a string at a NUL */
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null},\n"
                "{\"kind\": \"p\", \"text\": \"{key} \xff {value}\", \"id_style\": null}], " OK_REST "}",
                "needles[1].text: the string (line 2) holds bytes that are not UTF-8");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\\u0000 and more\", \"id_style\": null}], "
                OK_REST "}",
                "needles[0].text: the string (line 1) holds \\u0000 (NUL)");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], " OK_REST ","
                "\"keys\": [\"alpha\", \"br\xc3\"]}",
                "keys[1]: the string (line 1) holds bytes that are not UTF-8");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], "
                "\"questions\": [{\"text\": \"What is {key}?\", \"needs_id\": false}], \"attributes\": [\"a\"],"
                "\"value_kinds\": [{\"name\": \"d\", \"patterns\": [\"{d4}\", \"\xed\xa0\x80{d}\"]}]}",
                "value_kinds[0].patterns[1]: the string");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], " OK_REST ","
                "\"note\\u0000\": 1}",
                "the top object: a key (line 1) holds \\u0000 (NUL)");
  check_refused("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {value}\", \"id_style\": null}], " OK_REST ","
                "\"value_words\": [\"caf\xc3\xa9\", \"x\"], \"keys\": [\"alpha\", \"bravo\\u0000\"]}",
                "keys[1]: the string (line 1) holds \\u0000");
  CHECK_EQ(load_text("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} \xc3\xa9 \\u00e9 \\\\u0000 {value}\", "
                     "\"id_style\": null}], " OK_REST "}", &F, &e), LH_OK); /* é, and a backslash before u0000 */
  lh_niah__families_free(F);
  F = NULL;
  lh_error_clear(&e);
  CHECK(lh_niah__families_load("/nonexistent/fam.json", &F, &e) != LH_OK && !F);
  CHECK_STR_CONTAINS(e.msg, "--families");
}

/* ---- 3. drawing ---- */

static void trial_free(trial *t) {
  for (int i = 0; i < 16; i++) lh_buf_free(&t->needle_text[i]);
  lh_buf_free(&t->family);
}

/* Whether two draws are the same trial. */
static int same_trial(const trial *a, const trial *b) {
  int same = a->n_needles == b->n_needles && !strcmp(a->question, b->question) && !strcmp(a->expected, b->expected) &&
             a->family.len == b->family.len && !memcmp(a->family.data, b->family.data, a->family.len);
  for (int i = 0; same && i < a->n_needles; i++)
    same = !strcmp(a->keys[i], b->keys[i]) && !strcmp(a->values[i], b->values[i]) &&
           a->fam_needle[i] == b->fam_needle[i] && a->fam_kind[i] == b->fam_kind[i] &&
           !strcmp(a->needle_text[i].data, b->needle_text[i].data);
  return same;
}

static const char *const KEYS[] = {"alpha", "bravo", "charlie", "delta", "echo"};

static void check_drawing(void) {
  lh_niah__families *F = NULL;
  lh_error e;
  lh_error_clear(&e);
  if (lh_niah__families_load(FAMILIES, &F, &e) != LH_OK) {
    CHECK_MSG(0, "%s", e.msg);
    return;
  }
  const lh_niah_variant vs[] = {LH_NIAH_SINGLE, LH_NIAH_MULTIKEY, LH_NIAH_MULTIVALUE, LH_NIAH_WHICHFILE};
  for (int vi = 0; vi < 4; vi++) {
    const lh_niah_variant v = vs[vi];
    const int n = v == LH_NIAH_MULTIKEY || v == LH_NIAH_MULTIVALUE ? 4 : 1;
    const int qs = v == LH_NIAH_MULTIVALUE ? LH_NIAH__Q_MULTI_VALUE : v == LH_NIAH_WHICHFILE ? LH_NIAH__Q_FILE
                                                                                              : LH_NIAH__Q_SINGLE;
    CHECK_EQ(lh_niah__families_check(F, FAMILIES, v, n, 128, &e), LH_OK);
    int needle_seen[64] = {0}, kind_seen[64] = {0}, q_seen[64] = {0}, differ = 0;
    for (uint64_t seed = 1; seed <= 3000; seed++) {
      trial a = {0}, b = {0}, c = {0};
      uint64_t r1 = seed, r2 = seed, r3 = seed + 1000003;
      CHECK_EQ(lh_niah__families_draw(F, v, n, KEYS, 5, &r1, &a, &e), LH_OK);
      CHECK_EQ(lh_niah__families_draw(F, v, n, KEYS, 5, &r2, &b, &e), LH_OK);
      CHECK_EQ(lh_niah__families_draw(F, v, n, KEYS, 5, &r3, &c, &e), LH_OK);
      CHECK_MSG(same_trial(&a, &b) && r1 == r2, "seed %llu drew two different trials", (unsigned long long)seed);
      differ += !same_trial(&a, &c);
      cJSON *fam = cJSON_ParseWithLength(a.family.data, a.family.len);
      const lh_niah__template *N = &F->needles[a.fam_needle[0]];
      CHECK(fam && !strcmp(str(fam, "needle"), N->text) && !strcmp(str(fam, "needle_kind"), N->kind));
      CHECK(fam && !strcmp(str(fam, "value_kind"), F->kinds[a.fam_kind[0]].name) && !strcmp(str(fam, "key"), a.keys[0]));
      int key_listed = 0; /* the file's keys, not the caller's, when it has some */
      for (int k = 0; k < F->n_keys; k++) key_listed |= !strcmp(F->keys[k], a.keys[0]);
      CHECK(key_listed);
      needle_seen[a.fam_needle[0]]++, kind_seen[a.fam_kind[0]]++;
      int qi = -1;
      for (int k = 0; fam && k < F->n_questions[qs]; k++)
        if (!strcmp(F->questions[qs][k].text, str(fam, "question"))) qi = k;
      CHECK(qi >= 0);
      if (qi >= 0) {
        q_seen[qi]++;
        CHECK_MSG(lh_niah__fits(&F->questions[qs][qi], N), "%s asked of %s", F->questions[qs][qi].text, N->text);
        /* the question and needle, rendered again here, are what the trial holds */
        lh_buf q = {0}, line = {0};
        const char *attr = str(fam, "attr");
        lh_niah__render(&q, F->questions[qs][qi].text, a.keys[0], attr, "", N->id_style);
        lh_niah__render(&line, N->text, a.keys[0], attr, a.values[0], N->id_style);
        lh_buf_append_str(&line, "\n");
        CHECK(!strcmp(q.data, a.question) && !strcmp(line.data, a.needle_text[0].data));
        /* an {id} question names the identifier exactly as the needle wrote it */
        if (F->questions[qs][qi].needs_id) {
          lh_buf id = {0};
          lh_niah__render_id(&id, a.keys[0], attr, N->id_style);
          CHECK(strstr(a.question, id.data) && strstr(a.needle_text[0].data, id.data));
          lh_buf_free(&id);
        }
        lh_buf_free(&q), lh_buf_free(&line);
      }
      CHECK_EQ(a.n_needles, n);
      if (v == LH_NIAH_SINGLE || v == LH_NIAH_MULTIKEY) CHECK(!strcmp(a.expected, a.values[0]) && a.n_expected == 1);
      if (v == LH_NIAH_MULTIVALUE) CHECK_EQ(a.n_expected, n);
      for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++) {
          CHECK(strcmp(a.values[i], a.values[j]) != 0);
          if (v == LH_NIAH_MULTIKEY) CHECK(strcmp(a.keys[i], a.keys[j]) != 0);
        }
      for (int i = 1; i < n; i++) {
        if (v == LH_NIAH_MULTIVALUE)
          CHECK(!strcmp(a.keys[i], a.keys[0]) && a.fam_needle[i] == a.fam_needle[0] && a.fam_kind[i] == a.fam_kind[0]);
        if (v == LH_NIAH_MULTIKEY) /* same attribute: the key alone tells the facts apart */
          CHECK(strstr(a.needle_text[i].data, str(fam, "attr")) || F->needles[a.fam_needle[i]].id_style >= 0);
      }
      cJSON_Delete(fam);
      trial_free(&a), trial_free(&b), trial_free(&c);
    }
    CHECK_MSG(differ >= 2990, "%s: only %d of 3000 other seeds drew another trial", lh_niah_variant_name(v), differ);
    for (int k = 0; k < F->n_kinds; k++)
      CHECK_MSG(kind_seen[k] > 3000 / F->n_kinds / 2, "%s: value kind %s drawn %d times of 3000",
                lh_niah_variant_name(v), F->kinds[k].name, kind_seen[k]);
    for (int k = 0; k < F->n_questions[qs]; k++) CHECK_MSG(q_seen[k] > 0, "question %d never asked", k);
    int needles = 0;
    for (int k = 0; k < F->n_needles; k++) needles += needle_seen[k] > 0;
    CHECK_MSG(needles == F->n_needles, "%s: %d of %d needle templates drawn", lh_niah_variant_name(v), needles,
              F->n_needles);
    for (int k = 0; k < F->n_needles; k++)
      CHECK_MSG(needle_seen[k] < 3 * 3000 / F->n_needles, "%s: needle %d drawn %d times of 3000",
                lh_niah_variant_name(v), k, needle_seen[k]);
  }
  /* what the file cannot ask is refused up front */
  CHECK_EQ(lh_niah__families_check(F, FAMILIES, LH_NIAH_MULTIQUERY, 2, 128, &e), LH_EINVAL);
  lh_niah__families *G = NULL;
  CHECK_EQ(load_text("{\"needles\": [{\"kind\": \"p\", \"text\": \"{key} {attr} {value}\", \"id_style\": null}], "
                     "\"file_questions\": [{\"text\": \"Which file sets {id}?\", \"needs_id\": true}], " OK_REST "}",
                     &G, &e), LH_OK);
  if (G) {
    lh_error_clear(&e);
    CHECK_EQ(lh_niah__families_check(G, "g.json", LH_NIAH_WHICHFILE, 1, 128, &e), LH_EINVAL);
    CHECK_STR_CONTAINS(e.msg, "id_style");
    CHECK_EQ(lh_niah__families_check(G, "g.json", LH_NIAH_MULTIVALUE, 4, 128, &e), LH_EINVAL);
    CHECK_STR_CONTAINS(e.msg, "multi_value_questions");
    CHECK_EQ(lh_niah__families_check(G, "g.json", LH_NIAH_MULTIKEY, 4, 3, &e), LH_EINVAL);
    CHECK_EQ(lh_niah__families_check(G, "g.json", LH_NIAH_MULTIKEY, 3, 3, &e), LH_OK);
    /* without keys of its own, the caller's */
    trial t = {0};
    uint64_t r = 5;
    CHECK_EQ(lh_niah__families_draw(G, LH_NIAH_MULTIKEY, 3, KEYS, 3, &r, &t, &e), LH_OK);
    for (int i = 0; i < 3; i++) CHECK(!strcmp(t.keys[i], KEYS[0]) || !strcmp(t.keys[i], KEYS[1]) || !strcmp(t.keys[i], KEYS[2]));
    trial_free(&t);
  }
  lh_niah__families_free(G);
  lh_niah__families_free(F);
}

/* ---- 4. end to end ---- */

static lh_niah_params sweep_params(const char *out, lh_niah_variant v, uint64_t seed) {
  lh_niah_params p = lh_niah_default_params();
  p.model_dir = "models/haul-tiny";
  p.out_dir = out;
  p.families = FAMILIES;
  p.variant = v;
  p.seed = seed;
  p.lengths[0] = 1024, p.n_lengths = 1;
  p.depths[0] = 0, p.depths[1] = 100, p.n_depths = 2;
  p.trials = 2;
  p.max_tokens = 12;
  p.save_prompts = 1;
  p.progress = LH_PROGRESS_NONE;
  return p;
}

static int run(const lh_niah_params *p, lh_niah_summary *s) {
  lh_error e;
  lh_error_clear(&e);
  const lh_status st = lh_niah_run(p, s, &e);
  CHECK_MSG(st == LH_OK, "%s: %s", p->out_dir, e.msg);
  return st == LH_OK;
}

/* results.jsonl's rows, by (depth, trial) order of the file */
static cJSON *rows(const char *out) {
  char path[700];
  snprintf(path, sizeof path, "%s/results.jsonl", out);
  lh_buf b = {0};
  lh_error e;
  cJSON *a = cJSON_CreateArray();
  if (lh_file_read(path, 16u << 20, &b, &e) == LH_OK)
    for (char *l = b.data, *nl; l && (nl = memchr(l, '\n', b.len - (size_t)(l - b.data))); l = nl + 1)
      cJSON_AddItemToArray(a, cJSON_ParseWithLength(l, (size_t)(nl - l)));
  lh_buf_free(&b);
  return a;
}

static char *prompt(const char *out, int64_t length, double depth, int trial) {
  char path[700];
  snprintf(path, sizeof path, "%s/prompts/L%lld-D%g-T%d.txt", out, (long long)length, depth, trial);
  lh_buf b = {0};
  lh_error e;
  if (lh_file_read(path, 16u << 20, &b, &e) != LH_OK) {
    lh_buf_free(&b);
    return NULL;
  }
  lh_buf_append(&b, "", 1);
  return b.data;
}

/* The CSV fields (quoted, quotes doubled) that results.csv ends a families row with: what the trial
 * drew, as results.jsonl's "family" has it. */
static void family_csv_tail(const cJSON *fam, char *out, size_t cap) {
  static const char *const keys[] = {"needle_kind", "needle", "question", "value_kind"};
  size_t k = 0;
  for (size_t i = 0; i < 4 && k + 4 < cap; i++) {
    out[k++] = ',', out[k++] = '"';
    for (const char *c = str(fam, keys[i]); c && *c && k + 4 < cap; c++) {
      if (*c == '"') out[k++] = '"';
      out[k++] = *c;
    }
    out[k++] = '"';
  }
  out[k++] = '\n';
  out[k] = 0;
}

static void check_end_to_end(void) {
  if (!lh_is_file("models/haul-tiny/config.json")) LH_TEST_SKIP("models/haul-tiny is not here (run from the source tree)");
  char a[600], b[600], c[600], d[600], m[600], x[600];
  snprintf(a, sizeof a, "%s/a", lh_test_tmpdir());
  snprintf(b, sizeof b, "%s/b", lh_test_tmpdir());
  snprintf(c, sizeof c, "%s/c", lh_test_tmpdir());
  snprintf(d, sizeof d, "%s/d", lh_test_tmpdir());
  snprintf(m, sizeof m, "%s/m", lh_test_tmpdir());
  snprintf(x, sizeof x, "%s/x", lh_test_tmpdir());
  lh_niah_summary s;
  lh_niah_params p = sweep_params(a, LH_NIAH_SINGLE, 11);
  if (!run(&p, &s)) return;
  CHECK_EQ(s.trials, 4);
  int by_needle = 0, by_value = 0;
  for (int i = 0; i < s.n_needle_kinds; i++) by_needle += s.by_needle_kind[i].trials;
  for (int i = 0; i < s.n_value_kinds; i++) by_value += s.by_value_kind[i].trials;
  CHECK(by_needle == 4 && by_value == 4);
  char path[700];
  snprintf(path, sizeof path, "%s/summary.json", a);
  cJSON *sum = read_json(path);
  CHECK(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(sum, "by_needle_kind")) &&
        cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(sum, "by_value_kind")));
  cJSON_Delete(sum);
  snprintf(path, sizeof path, "%s/sweep.json", a);
  cJSON *sw = read_json(path);
  lh_niah__families *F = NULL;
  lh_error e;
  lh_niah__families_load(FAMILIES, &F, &e);
  const cJSON *key = cJSON_GetObjectItemCaseSensitive(sw, "key");
  CHECK(F && str(key, "families") && !strcmp(str(key, "families"), F->sha256) && !str(key, "needle"));
  lh_niah__families_free(F);
  cJSON_Delete(sw);
  cJSON *ra = rows(a);
  CHECK_EQ(cJSON_GetArraySize(ra), 4);
  snprintf(path, sizeof path, "%s/results.csv", a);
  lh_buf csv = {0};
  CHECK(lh_file_read(path, 16u << 20, &csv, &e) == LH_OK && lh_buf_append(&csv, "", 1) == LH_OK);
  CHECK_STR_CONTAINS(csv.data, ",seconds,same_set,needle_kind,needle_template,question_template,value_kind\n");
  const cJSON *r;
  cJSON_ArrayForEach(r, ra) {
    const cJSON *fam = cJSON_GetObjectItemCaseSensitive(r, "family");
    CHECK(str(fam, "needle_kind") && str(fam, "value_kind") && str(fam, "question") && str(fam, "attr"));
    char tail[4096];
    family_csv_tail(fam, tail, sizeof tail);
    CHECK_MSG(csv.data && strstr(csv.data, tail), "results.csv lacks the family fields %s", tail);
    CHECK(str(r, "needle") && str(r, "expected") && strstr(str(r, "needle"), str(r, "expected")));
    char *pr = prompt(a, 1024, cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "depth")),
                      (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "trial")));
    CHECK(pr && strstr(pr, str(r, "needle")) && strstr(pr, str(r, "question")));
    free(pr);
  }
  /* the same seed elsewhere: the same prompts, byte for byte; another seed: others */
  p = sweep_params(b, LH_NIAH_SINGLE, 11);
  run(&p, &s);
  p = sweep_params(c, LH_NIAH_SINGLE, 12);
  run(&p, &s);
  int same = 0, other = 0;
  for (int di = 0; di < 2; di++)
    for (int t = 0; t < 2; t++) {
      char *pa = prompt(a, 1024, di * 100, t), *pb = prompt(b, 1024, di * 100, t), *pc = prompt(c, 1024, di * 100, t);
      same += pa && pb && !strcmp(pa, pb);
      other += pa && pc && strcmp(pa, pc) != 0;
      free(pa), free(pb), free(pc);
    }
  CHECK_EQ(same, 4);
  CHECK_EQ(other, 4);
  cJSON *rb = rows(b);
  for (int i = 0; i < 4; i++) {
    const cJSON *x1 = cJSON_GetArrayItem(ra, i), *x2 = cJSON_GetArrayItem(rb, i);
    CHECK(x1 && x2 && cJSON_Compare(cJSON_GetObjectItemCaseSensitive(x1, "family"),
                                    cJSON_GetObjectItemCaseSensitive(x2, "family"), 1));
  }
  cJSON_Delete(rb);
  cJSON_Delete(ra);
  lh_buf_free(&csv);
  /* whichfile, over a haystack of many small documents (a needle placed at a document's first
   * token moves inside one): the expected path is the header of the document around the needle */
  char corpus[600];
  snprintf(corpus, sizeof corpus, "%s/corpus", lh_test_tmpdir());
  lh_mkdir_p(corpus, &e);
  for (int i = 0; i < 40; i++) {
    snprintf(path, sizeof path, "%s/notes-%02d.txt", corpus, i);
    FILE *f = fopen(path, "w");
    for (int l = 0; l < 5; l++) fprintf(f, "Line %d of the notes on the %s shelf.\n", l, KEYS[(i + l) % 5]);
    fclose(f);
  }
  p = sweep_params(d, LH_NIAH_WHICHFILE, 11);
  p.corpus = corpus;
  p.trials = 1, p.chunk = 256, p.max_tokens = 4;
  p.n_depths = lh_niah_parse_depths("0:100:5", p.depths, LH_NIAH_MAX_CELLS, &e);
  if (run(&p, &s)) {
    cJSON *rd = rows(d);
    CHECK_EQ(cJSON_GetArraySize(rd), 21);
    int moved_back = 0; /* needles that would have sat on a header: now before a closing tag */
    cJSON_ArrayForEach(r, rd) {
      char *pr = prompt(d, 1024, cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "depth")),
                        (int)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, "trial")));
      const char *nd = pr ? strstr(pr, str(r, "needle")) : NULL;
      CHECK(nd != NULL);
      if (!nd) {
        free(pr);
        continue;
      }
      const char *hdr = NULL;
      for (const char *q = pr; (q = strstr(q, "<document path=\"")) && q < nd; q++) hdr = q;
      const char *close = hdr ? strstr(hdr, "</document>") : NULL;
      char want[600];
      snprintf(want, sizeof want, "<document path=\"%s\">\n", str(r, "expected"));
      CHECK_MSG(hdr && !strncmp(hdr, want, strlen(want)), "the needle's document is not %s", str(r, "expected"));
      CHECK_MSG(!close || close > nd, "the needle is after its document's end"); /* none: the prompt cut it */
      CHECK(nd[-1] == '\n'); /* a whole line */
      moved_back += close == nd + strlen(str(r, "needle")) + 1;
      free(pr);
    }
    CHECK_MSG(moved_back > 0, "no needle of this sweep fell on a document's start; pick other depths");
    cJSON_Delete(rd);
  }
  /* multivalue: the values in text order */
  p = sweep_params(m, LH_NIAH_MULTIVALUE, 11);
  p.n_needles = 3, p.n_depths = 1, p.trials = 1, p.depths[0] = 20;
  if (run(&p, &s)) {
    cJSON *rm = rows(m);
    r = cJSON_GetArrayItem(rm, 0);
    char *pr = prompt(m, 1024, 20, 0);
    char exp[2048];
    snprintf(exp, sizeof exp, "%s", r ? str(r, "expected") : "");
    const char *at = pr, *v = strtok(exp, ",");
    int found = 0;
    for (; v && at; v = strtok(NULL, ",")) {
      while (*v == ' ') v++;
      at = strstr(at, v);
      found += at != NULL;
      if (at) at += strlen(v);
    }
    CHECK_EQ(found, 3);
    free(pr);
    cJSON_Delete(rm);
  }
  /* refused before OUT is made */
  lh_error_clear(&e);
  p = sweep_params(x, LH_NIAH_SINGLE, 11);
  p.needle = "The {key} is {value}.";
  CHECK_EQ(lh_niah_run(&p, &s, &e), LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "--needle");
  p = sweep_params(x, LH_NIAH_MULTIQUERY, 11);
  CHECK_EQ(lh_niah_run(&p, &s, &e), LH_EINVAL);
  p = sweep_params(x, LH_NIAH_WHICHFILE, 11);
  p.families = NULL;
  CHECK_EQ(lh_niah_run(&p, &s, &e), LH_EINVAL);
  CHECK_STR_CONTAINS(e.msg, "--families");
  p = sweep_params(x, LH_NIAH_SINGLE, 11);
  p.families = "/nonexistent/families.json";
  CHECK(lh_niah_run(&p, &s, &e) != LH_OK);
  CHECK(!lh_is_dir(x));
}

/* --no-sweep: parts 1-3 only (what `make test` runs again under the sanitizers) */
int main(int argc, char **argv) {
  lh_test_begin("test_niah_families");
  check_rendering();
  check_loading();
  check_drawing();
  if (!(argc > 1 && !strcmp(argv[1], "--no-sweep"))) check_end_to_end();
  return lh_test_end();
}
