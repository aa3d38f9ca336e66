/* test_load_safetensors.c — every safetensors and index validation error, on files crafted here,
 * with the status and the file/tensor named in the message; plus the files that must load. */
#include "tests/engine_load/tw.h"

#include "engine/safetensors.h"

static lh_error err;

/* Open dir/model.safetensors after writing it from header + data. */
static lh_status open_raw(const char *name, const char *header, const void *data, size_t n) {
  const char *dir = tw_mkdir(name);
  tw_write_raw(tw_path(dir, "model.safetensors"), header, data, n);
  lh_st_set *s = NULL;
  memset(&err, 0, sizeof err);
  lh_status st = lh_st_open_dir(dir, &s, &err);
  lh_st_close(s);
  return st;
}

#define EXPECT(name, header, n, code, want)                                   \
  do {                                                                        \
    static uint8_t zeros[256];                                                \
    CHECK_EQ(open_raw(name, header, zeros, n), code);                         \
    CHECK_STR_CONTAINS(err.msg, name "/model.safetensors");                   \
    CHECK_STR_CONTAINS(err.msg, want);                                        \
  } while (0)

#define T1 "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}"

static void test_good(void) {
  static uint8_t data[64];
  CHECK_EQ(open_raw("good", T1, data, 8), LH_OK);
  /* header padded with spaces, __metadata__, a scalar, an empty tensor, unordered offsets, extra keys */
  CHECK_EQ(open_raw("good2",
                    "{\"__metadata__\":{\"format\":\"pt\"},\"z\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[8,10]},"
                    "\"e\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
                    "\"a\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8],\"extra\":1}}    ",
                    data, 10),
           LH_OK);
  const char *dir = tw_mkdir("good3");
  tw_write_raw(tw_path(dir, "model.safetensors"),
               "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,1],\"data_offsets\":[4,8]}}",
               data, 8);
  lh_st_set *s;
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_OK);
  CHECK_EQ(s->n, 2);
  CHECK_EQ(s->n_maps, 1);
  CHECK(!strcmp(s->t[0].name, "a")); /* sorted by name */
  lh_st_tensor *a = lh_st_find(s, "a"), *b = lh_st_find(s, "b");
  CHECK(a && b && !lh_st_find(s, "c"));
  CHECK_EQ(a->dtype, LH_BF16);
  CHECK_EQ(a->ndim, 2);
  CHECK_EQ(a->shape[0], 2);
  CHECK_EQ(a->nbytes, 4);
  CHECK((const uint8_t *)a->data == (const uint8_t *)b->data + 4);
  lh_st_close(s);
}

static void test_header_errors(void) {
  const char *dir = tw_mkdir("short");
  tw_write_file(tw_path(dir, "model.safetensors"), "\x01\x02\x03", 3);
  lh_st_set *s = NULL;
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "short/model.safetensors");
  CHECK_STR_CONTAINS(err.msg, "too short");
  /* header length beyond the file */
  dir = tw_mkdir("hlen");
  uint8_t b[20] = {0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, '{', '}'};
  tw_write_file(tw_path(dir, "model.safetensors"), b, 10);
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "hlen/model.safetensors");
  CHECK_STR_CONTAINS(err.msg, "beyond the end of the file");
  /* an absurd length */
  dir = tw_mkdir("hlen2");
  uint8_t c[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
  tw_write_file(tw_path(dir, "model.safetensors"), c, 16);
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "beyond the end of the file");
  EXPECT("notobj", "[1, 2, 3]", 0, LH_EFORMAT, "not a JSON object");
  EXPECT("badjson", "{\"a\": {\"dtype\": \"F32\", ", 0, LH_EFORMAT, "not valid JSON");
  EXPECT("trailing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}xx", 8, LH_EFORMAT,
         "unexpected bytes after the JSON header");
  EXPECT("meta", "{\"__metadata__\":{\"format\":1}}", 0, LH_EFORMAT, "__metadata__");
  EXPECT("meta2", "{\"__metadata__\":[1]}", 0, LH_EFORMAT, "__metadata__");
  /* what cJSON's values hide: the reference library reads shape and data_offsets as integers, and a
   * NUL escape would cut a tensor's name short (cJSON ends the string there) */
  EXPECT("floatshape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, LH_EFORMAT,
         "hold integers");
  CHECK_STR_CONTAINS(err.msg, "2.0 at byte");
  EXPECT("expoffs", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8, LH_EFORMAT,
         "hold integers");
  EXPECT("nulname", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, LH_EFORMAT,
         "\\u0000");
  /* ... but a fraction elsewhere (an extra key), a tensor named "shape", and an escaped backslash before
   * "u0000" are fine */
  static const uint8_t zeros[8];
  CHECK_EQ(open_raw("fracextra",
                    "{\"shape\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[1.5]},"
                    "\"__metadata__\":{\"k\":\"\\\\u0000 2.5\"}}",
                    zeros, 8),
           LH_OK);
}

static void test_entry_errors(void) {
  EXPECT("entry", "{\"w\":[1,2]}", 0, LH_EFORMAT, "'w'");
  EXPECT("nodtype", "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LH_EFORMAT, "'w'");
  EXPECT("noshape", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, LH_EFORMAT, "\"shape\"");
  EXPECT("nooffsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, LH_EFORMAT, "data_offsets");
  EXPECT("offsets3", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, LH_EFORMAT,
         "data_offsets");
  EXPECT("unknowndt", "{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, LH_EFORMAT,
         "unknown dtype");
  CHECK_STR_CONTAINS(err.msg, "'w'");
  EXPECT("f64", "{\"w\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, LH_EUNSUPPORTED, "F64");
  CHECK_STR_CONTAINS(err.msg, "'w'");
  EXPECT("i64", "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, LH_EUNSUPPORTED, "I64");
  EXPECT("negshape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, LH_EFORMAT, "shape[0]");
  EXPECT("fracshape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, LH_EFORMAT, "'w'");
  EXPECT("strshape", "{\"w\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8, LH_EFORMAT, "'w'");
  EXPECT("ndims", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4,
         LH_EUNSUPPORTED, "dimensions");
  EXPECT("overflow", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4,
         LH_EFORMAT, "overflows");
  EXPECT("negoff", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 4, LH_EFORMAT, "'w'");
  EXPECT("backwards", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, LH_EFORMAT,
         "end before they begin");
}

static void test_span_errors(void) {
  EXPECT("outside", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, LH_EFORMAT,
         "outside the data section");
  CHECK_STR_CONTAINS(err.msg, "'w'");
  EXPECT("mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, LH_EFORMAT,
         "needs 12 bytes");
  CHECK_STR_CONTAINS(err.msg, "'w'");
  CHECK_STR_CONTAINS(err.msg, "[3]");
  EXPECT("bf16size", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16, LH_EFORMAT,
         "needs 8 bytes");
  EXPECT("overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, LH_EFORMAT, "overlap");
  CHECK_STR_CONTAINS(err.msg, "'a'");
  CHECK_STR_CONTAINS(err.msg, "'b'");
  EXPECT("hole",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, LH_EFORMAT, "belong to no tensor");
  CHECK_STR_CONTAINS(err.msg, "'b'");
  EXPECT("tail", T1, 12, LH_EFORMAT, "cover 8");
  EXPECT("truncated", T1, 4, LH_EFORMAT, "outside the data section");
  EXPECT("dupname",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, LH_EFORMAT, "appears twice");
  CHECK_STR_CONTAINS(err.msg, "'a'");
}

static void write_shard(const char *dir, const char *file, const char *tensor) {
  char h[256];
  static uint8_t z[8];
  snprintf(h, sizeof h, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", tensor);
  tw_write_raw(tw_path(dir, file), h, z, 8);
}

static void test_index(void) {
  lh_st_set *s = NULL;
  const char *dir = tw_mkdir("sharded");
  write_shard(dir, "s1.safetensors", "a");
  write_shard(dir, "s2.safetensors", "b");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"metadata\":{\"total_size\":16},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_OK);
  CHECK(s && s->n == 2 && s->n_maps == 2 && s->sharded);
  lh_st_close(s);

  /* several tensors per shard: each shard is mapped once */
  dir = tw_mkdir("sharded2");
  static uint8_t z[16];
  tw_write_raw(tw_path(dir, "x.safetensors"),
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"c\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               z, 16);
  write_shard(dir, "y.safetensors", "b");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"x.safetensors\",\"b\":\"y.safetensors\",\"c\":\"x.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_OK);
  CHECK(s && s->n == 3 && s->n_maps == 2);
  lh_st_close(s);

  /* a tensor the index does not list: loaded, with a warning */
  tw_log_begin();
  dir = tw_mkdir("unlisted");
  tw_write_raw(tw_path(dir, "x.safetensors"),
               "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"extra\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
               z, 16);
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":{\"a\":\"x.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_OK);
  CHECK(s && s->n == 2);
  CHECK_STR_CONTAINS(tw_log, "'extra'");
  CHECK_STR_CONTAINS(tw_log, "not listed in the index");
  lh_st_close(s);
  lh_log_set_sink(NULL, NULL);

  dir = tw_mkdir("missingshard");
  write_shard(dir, "s1.safetensors", "a");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "s2.safetensors");
  CHECK_STR_CONTAINS(err.msg, "model.safetensors.index.json");

  dir = tw_mkdir("wrongshard");
  write_shard(dir, "s1.safetensors", "a");
  write_shard(dir, "s2.safetensors", "b");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "listed in shard");
  CHECK_STR_CONTAINS(err.msg, "model.safetensors.index.json");

  dir = tw_mkdir("absent");
  write_shard(dir, "s1.safetensors", "a");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"s1.safetensors\",\"ghost\":\"s1.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'ghost'");

  dir = tw_mkdir("dupshards");
  write_shard(dir, "s1.safetensors", "a");
  write_shard(dir, "s2.safetensors", "a");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "appears twice");
  CHECK_STR_CONTAINS(err.msg, "s1.safetensors");
  CHECK_STR_CONTAINS(err.msg, "s2.safetensors");

  dir = tw_mkdir("escape");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":{\"a\":\"../other/s1.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "outside the model folder");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":{\"a\":\"/etc/passwd\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "outside the model folder");

  dir = tw_mkdir("badindex");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"metadata\":{}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "weight_map");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":{\"a\":3}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "'a'");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "not valid JSON");

  /* a broken shard is reported with the shard's own name */
  dir = tw_mkdir("badshard");
  write_shard(dir, "s1.safetensors", "a");
  tw_write_raw(tw_path(dir, "s2.safetensors"), "{\"b\":{\"dtype\":\"F32\",\"shape\":[9],\"data_offsets\":[0,8]}}", z, 8);
  tw_write_text(tw_path(dir, "model.safetensors.index.json"),
                "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EFORMAT);
  CHECK_STR_CONTAINS(err.msg, "badshard/s2.safetensors");
  CHECK_STR_CONTAINS(err.msg, "'b'");
}

static void test_folder(void) {
  lh_st_set *s = NULL;
  const char *dir = tw_mkdir("empty");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_ENOTFOUND);
  CHECK_STR_CONTAINS(err.msg, "model.safetensors");
  tw_write_text(tw_path(dir, "pytorch_model.bin"), "PK");
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "pytorch_model.bin");
  /* both: the single file wins, as in transformers, with a warning */
  dir = tw_mkdir("both");
  write_shard(dir, "model.safetensors", "single");
  tw_write_text(tw_path(dir, "model.safetensors.index.json"), "{\"weight_map\":{\"x\":\"nothere.safetensors\"}}");
  tw_log_begin();
  CHECK_EQ(lh_st_open_dir(dir, &s, &err), LH_OK);
  CHECK(s && lh_st_find(s, "single"));
  CHECK_STR_CONTAINS(tw_log, "both model.safetensors and model.safetensors.index.json");
  lh_st_close(s);
  lh_log_set_sink(NULL, NULL);
}

static void test_dtype_names(void) {
  lh_dtype d;
  CHECK_EQ(lh_st_dtype("F32", &d, "f", "t", &err), LH_OK);
  CHECK_EQ(d, LH_F32);
  CHECK_EQ(lh_st_dtype("BF16", &d, "f", "t", &err), LH_OK);
  CHECK_EQ(d, LH_BF16);
  CHECK_EQ(lh_st_dtype("F16", &d, "f", "t", &err), LH_OK);
  CHECK_EQ(d, LH_F16);
  CHECK_EQ(lh_st_dtype("F8_E4M3", &d, "f", "t", &err), LH_EUNSUPPORTED);
  CHECK_EQ(lh_st_dtype("f32", &d, "f", "t", &err), LH_EFORMAT);
  CHECK_EQ(lh_dtype_size(LH_F32), 4);
  CHECK_EQ(lh_dtype_size(LH_BF16), 2);
  CHECK_EQ(lh_dtype_size(LH_F16), 2);
  CHECK(!strcmp(lh_dtype_name(LH_BF16), "BF16"));
}

int main(void) {
  lh_test_begin("test_load_safetensors");
  test_good();
  test_header_errors();
  test_entry_errors();
  test_span_errors();
  test_index();
  test_folder();
  test_dtype_names();
  return lh_test_end();
}
