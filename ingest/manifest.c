/* manifest.c — how entries are written down: manifest lines, escaping, names for terminals.
 *
 * Names in archives are arbitrary bytes chosen by whoever made the archive. Three renderings,
 * each safe for where it goes: JSON (every line parses with any JSON parser: invalid UTF-8 becomes
 * U+FFFD in "path" and the exact bytes go to "path_hex"), XML attribute text (for templates), and
 * terminal text (no byte can move the cursor, change colours or reorder the line). None of them
 * ever drops information silently: the JSON keeps the hex, the terminal form escapes reversibly.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "ingest/ingest_internal.h"

static const char *const type_names[LH_ENTRY_TYPE_COUNT] = {
    "file", "dir", "symlink", "hardlink", "chardev", "blockdev", "fifo", "socket", "other", "input"};
static const char *const status_names[LH_ENTRY_STATUS_COUNT] = {"ok", "partial", "skipped", "error"};
static const char *const reason_names[LH_REASON_COUNT] = {
    "none",      "directory", "link",     "special",  "excluded",   "not-included",
    "encrypted", "too-large", "total-cap", "binary",  "loop",       "too-deep",
    "unreadable", "corrupt",  "bomb",      "unsupported", "outside-root"};

const char *lh_entry_type_name(lh_entry_type t) {
  return (unsigned)t < LH_ENTRY_TYPE_COUNT ? type_names[t] : "?";
}
const char *lh_entry_status_name(lh_entry_status s) {
  return (unsigned)s < LH_ENTRY_STATUS_COUNT ? status_names[s] : "?";
}
const char *lh_entry_reason_name(lh_entry_reason r) {
  return (unsigned)r < LH_REASON_COUNT ? reason_names[r] : "?";
}

void lh_path_normalize(const char **p, size_t *n) {
  while (*n >= 2 && (*p)[0] == '.' && (*p)[1] == '/') {
    *p += 2, *n -= 2;
    while (*n && (*p)[0] == '/') ++*p, --*n;
  }
}

static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

lh_status lh_json_escape(lh_buf *out, const char *p, size_t n, int *lossy) {
  static const char hex[] = "0123456789abcdef";
  const uint8_t *s = (const uint8_t *)p;
  if (lossy) *lossy = 0;
  size_t i = 0, run = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      i++;
      continue;
    }
    size_t len = 1;
    int valid = c >= 0x80 ? lh_utf8_next(s + i, n - i, &len) : 1;
    if (c >= 0x80 && valid) {
      i += len;
      continue;
    }
    if (lh_buf_append(out, s + run, i - run)) return LH_ENOMEM;
    lh_status st;
    if (c >= 0x80) {
      if (lossy) *lossy = 1;
      st = lh_buf_append(out, FFFD, 3);
    } else if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      st = lh_buf_append(out, e, 2);
    } else if (c == '\n') st = lh_buf_append(out, "\\n", 2);
    else if (c == '\t') st = lh_buf_append(out, "\\t", 2);
    else if (c == '\r') st = lh_buf_append(out, "\\r", 2);
    else {
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      st = lh_buf_append(out, e, 6);
    }
    if (st) return st;
    i += len;
    run = i;
  }
  return lh_buf_append(out, s + run, n - run);
}

lh_status lh_xml_escape(lh_buf *out, const char *p, size_t n) {
  const uint8_t *s = (const uint8_t *)p;
  size_t i = 0, run = 0;
  while (i < n) {
    uint8_t c = s[i];
    const char *rep = NULL;
    char num[8];
    size_t len = 1;
    if (c >= 0x80) {
      if (lh_utf8_next(s + i, n - i, &len)) {
        i += len;
        continue;
      }
      rep = "\xEF\xBF\xBD";
    } else if (c == '&') rep = "&amp;";
    else if (c == '<') rep = "&lt;";
    else if (c == '>') rep = "&gt;";
    else if (c == '"') rep = "&quot;";
    else if (c == '\'') rep = "&apos;";
    else if (c < 0x20 || c == 0x7f) {
      snprintf(num, sizeof num, "&#%u;", c);
      rep = num;
    } else {
      i++;
      continue;
    }
    if (lh_buf_append(out, s + run, i - run) || lh_buf_append_str(out, rep)) return LH_ENOMEM;
    i += len;
    run = i;
  }
  return lh_buf_append(out, s + run, n - run);
}

static lh_status hex_field(lh_buf *out, const char *key, const char *p, size_t n) {
  static const char hex[] = "0123456789abcdef";
  if (lh_buf_printf(out, ",\"%s\":\"", key) || lh_buf_reserve(out, 2 * n + 2)) return LH_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    out->data[out->len++] = hex[(uint8_t)p[i] >> 4];
    out->data[out->len++] = hex[(uint8_t)p[i] & 15];
  }
  out->data[out->len] = 0;
  return lh_buf_append(out, "\"", 1);
}

static lh_status int_or_null(lh_buf *out, const char *key, int64_t v, int is_null) {
  if (is_null) return lh_buf_printf(out, ",\"%s\":null", key);
  return lh_buf_printf(out, ",\"%s\":%" PRId64, key, v);
}

lh_status lh_ingest_entry_json(const lh_ingest_entry *e, lh_buf *out) {
  int lossy = 0, st = 0;
  st |= lh_buf_append_str(out, "{\"path\":\"");
  st |= lh_json_escape(out, e->path, e->path_len, &lossy);
  st |= lh_buf_append(out, "\"", 1);
  if (lossy) st |= hex_field(out, "path_hex", e->path, e->path_len);
  st |= lh_buf_printf(out, ",\"type\":\"%s\"", lh_entry_type_name(e->type));
  st |= int_or_null(out, "bytes", e->bytes, e->bytes < 0);
  if (e->has_sha256) {
    char hex[65];
    lh_hex(e->sha256, 32, hex);
    st |= lh_buf_printf(out, ",\"sha256\":\"%s\"", hex);
  } else
    st |= lh_buf_append_str(out, ",\"sha256\":null");
  st |= lh_buf_printf(out, ",\"status\":\"%s\"", lh_entry_status_name(e->status));
  if (e->reason == LH_REASON_NONE) st |= lh_buf_append_str(out, ",\"reason\":null");
  else st |= lh_buf_printf(out, ",\"reason\":\"%s\"", lh_entry_reason_name(e->reason));
  st |= int_or_null(out, "token_start", e->token_start, e->token_start < 0);
  st |= int_or_null(out, "token_end", e->token_end, e->token_end < 0);
  st |= lh_buf_printf(out, ",\"text_start\":%" PRIu64 ",\"text_end\":%" PRIu64, e->text_start, e->text_end);
  st |= lh_buf_printf(out, ",\"invalid_utf8\":%" PRId64 ",\"input\":%d", e->invalid_utf8, e->input);
  if (e->link) {
    st |= lh_buf_append_str(out, ",\"link\":\"");
    st |= lh_json_escape(out, e->link, e->link_len, &lossy);
    st |= lh_buf_append(out, "\"", 1);
    if (lossy) st |= hex_field(out, "link_hex", e->link, e->link_len);
  }
  if (e->detail && e->detail[0]) {
    st |= lh_buf_append_str(out, ",\"detail\":\"");
    st |= lh_json_escape(out, e->detail, strlen(e->detail), NULL);
    st |= lh_buf_append(out, "\"", 1);
  }
  if (e->error_offset >= 0) st |= lh_buf_printf(out, ",\"error_offset\":%" PRId64, e->error_offset);
  if (e->decompressed) st |= lh_buf_printf(out, ",\"decompressed\":\"%s\"", e->decompressed);
  st |= lh_buf_append(out, "}\n", 2);
  return st ? LH_ENOMEM : LH_OK;
}

static uint32_t code_point(const uint8_t *s, size_t len) {
  if (len == 1) return s[0];
  uint32_t cp = s[0] & (0x7f >> len);
  for (size_t k = 1; k < len; k++) cp = cp << 6 | (s[k] & 0x3f);
  return cp;
}

/* Code points a terminal acts on rather than shows: C1 controls and the bidirectional
 * embeddings, overrides, isolates and marks (a name must not reorder the line it is printed in). */
static int unsafe_cp(uint32_t cp) {
  return (cp >= 0x80 && cp < 0xa0) || cp == 0x61c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0xfeff;
}

/* One display unit starting at s: its escaped or plain form into piece; returns bytes consumed. */
static size_t display_unit(const uint8_t *s, size_t n, char piece[16], size_t *plen) {
  uint8_t c = s[0];
  size_t len = 1;
  if (c < 0x20 || c == 0x7f) {
    *plen = (size_t)snprintf(piece, 16, "\\x%02x", c);
  } else if (c == '\\') {
    memcpy(piece, "\\\\", 2), *plen = 2;
  } else if (c < 0x80) {
    piece[0] = (char)c, *plen = 1;
  } else if (!lh_utf8_next(s, n, &len)) {
    len = 1;
    *plen = (size_t)snprintf(piece, 16, "\\x%02x", c);
  } else {
    uint32_t cp = code_point(s, len);
    if (unsafe_cp(cp)) *plen = (size_t)snprintf(piece, 16, "\\u{%04x}", (unsigned)cp);
    else memcpy(piece, s, len), *plen = len;
  }
  return len;
}

lh_status lh_ingest_display_name(const char *name, size_t len, size_t max_chars, lh_buf *out) {
  const uint8_t *s = (const uint8_t *)name;
  size_t units = 0;
  for (size_t i = 0; i < len; units++) {
    char piece[16];
    size_t pl;
    i += display_unit(s + i, len - i, piece, &pl);
  }
  /* Keep the head and the tail (where the file name is) of an over-long name. */
  size_t keep_head = units, skip_to = units;
  if (max_chars >= 8 && units > max_chars) {
    keep_head = (max_chars - 3) * 2 / 5;
    skip_to = units - (max_chars - 3 - keep_head);
  }
  size_t u = 0;
  for (size_t i = 0; i < len; u++) {
    char piece[16];
    size_t pl;
    i += display_unit(s + i, len - i, piece, &pl);
    if (u < keep_head || u >= skip_to) {
      if (lh_buf_append(out, piece, pl)) return LH_ENOMEM;
    } else if (u == keep_head) {
      if (lh_buf_append(out, "...", 3)) return LH_ENOMEM;
    }
  }
  if (!out->data) return lh_buf_append(out, "", 0);
  return LH_OK;
}

const char *lh_ingest_display_str(const char *s, size_t max_chars, char *out, size_t n) {
  lh_buf b = {0};
  const lh_status st = lh_ingest_display_name(s ? s : "", s ? strlen(s) : 0, max_chars, &b);
  snprintf(out, n, "%s", st == LH_OK ? b.data : "(out of memory)");
  lh_buf_free(&b);
  return out;
}
