/* test_batch.c — OpenAI batch input parsing, per-line errors, output line shape, and the native
 * MiniMax-Text-01 chat rendering (the expected strings are MiniMax-Text-01's published format). */
#include <cjson/cJSON.h>

#include "jobs/batch.h"
#include "jobs/chat.h"
#include "tests/test.h"
#include "util/fs.h"

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  fputs(text, f);
  fclose(f);
}

int main(void) {
  lh_test_begin("test_batch");
  char path[512];
  lh_path_join(path, sizeof path, lh_test_tmpdir(), "batch.jsonl");
  write_file(path,
             "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\","
             "\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":"
             "\"text\",\"text\":\"Which file?\"}]}],\"max_completion_tokens\":12,\"temperature\":0,\"seed\":7,"
             "\"stop\":[\"\\n\\n\",\"END\"],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":[\"*.md\"],"
             "\"frame\":\"<<{path}>>\"}]}}\n"
             "\n"
             "{\"custom_id\":\"b\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"Once\",\"max_tokens\":5}}\n"
             "{not json\n"
             "{\"custom_id\":\"a\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"dup\"}}\n"
             "{\"custom_id\":\"c\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":2}}\n"
             "{\"custom_id\":\"d\",\"url\":\"/v1/embeddings\",\"body\":{}}\n"
             "{\"custom_id\":\"e\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{}]}}\n"
             "{\"custom_id\":\"f\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":3}}\n"
             "{\"custom_id\":\"g\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[],\"stop\":\"x\"}}\n");
  lh_batch b;
  lh_error err;
  CHECK_EQ(lh_batch_load(path, &b, &err), LH_OK);
  CHECK_EQ(b.n, 9);
  CHECK_EQ(b.n_bad, 7);
  lh_request *a = &b.req[0];
  CHECK_EQ(a->error.code, LH_OK);
  CHECK(!strcmp(a->custom_id, "a"));
  CHECK_EQ(a->endpoint, LH_EP_CHAT);
  CHECK_EQ(a->n_messages, 2);
  CHECK(!strcmp(a->messages[1].content, "Which file?"));
  CHECK_EQ(a->max_tokens, 12);
  CHECK(a->temperature == 0);
  CHECK(a->has_seed && a->seed == 7);
  CHECK_EQ(a->n_stop, 2);
  CHECK(!strcmp(a->stop[0], "\n\n"));
  CHECK_EQ(a->n_documents, 2);
  CHECK(strstr(a->documents[0].resolved, "/repo.tar.gz") != NULL);
  CHECK(!strcmp(a->documents[1].resolved, "/abs/docs"));
  CHECK(!strcmp(a->documents[1].include[0], "*.md") && !a->documents[1].include[1]);
  CHECK(!strcmp(a->documents[1].frame, "<<{path}>>"));
  lh_request *bb = &b.req[1];
  CHECK_EQ(bb->error.code, LH_OK);
  CHECK_EQ(bb->line, 3);
  CHECK_EQ(bb->endpoint, LH_EP_COMPLETIONS);
  CHECK(!strcmp(bb->prompt, "Once"));
  CHECK(bb->temperature == 1.0);
  CHECK_STR_CONTAINS(b.req[2].error.msg, "line 4: not valid JSON");
  CHECK(!strcmp(b.req[2].custom_id, "line-4"));
  CHECK_STR_CONTAINS(b.req[3].error.msg, "already used on line 1");
  CHECK_STR_CONTAINS(b.req[4].error.msg, "only one choice");
  CHECK_STR_CONTAINS(b.req[5].error.msg, "/v1/embeddings");
  CHECK_STR_CONTAINS(b.req[6].error.msg, "body.tools is not supported");
  CHECK_STR_CONTAINS(b.req[7].error.msg, "temperature");
  CHECK_STR_CONTAINS(b.req[8].error.msg, "non-empty");

  /* same documents -> same key; different -> different */
  char k1[65], k2[65], k3[65];
  lh_request_documents_key(&b.req[0], k1);
  lh_request r2;
  lh_request_parse("{\"custom_id\":\"z\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                   "\"content\":\"other\"}],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":\"*.md\","
                   "\"frame\":\"<<{path}>>\"}]}}",
                   190, 1, b.req[0].documents[0].resolved[0] == '/' ? "" : ".", &r2);
  lh_request_documents_key(&r2, k2);
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  *strrchr(dir, '/') = 0;
  lh_request r3;
  const char *l3 = "{\"custom_id\":\"z\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[{\"role\":\"user\","
                   "\"content\":\"other\"}],\"documents\":[\"repo.tar.gz\",{\"path\":\"/abs/docs\",\"include\":\"*.md\","
                   "\"frame\":\"<<{path}>>\"}]}}";
  lh_request_parse(l3, strlen(l3), 1, dir, &r3);
  lh_request_documents_key(&r3, k3);
  CHECK(strcmp(k1, k3) == 0);
  CHECK(strcmp(k1, k2) != 0 || !strcmp(dir, "."));
  lh_request_free(&r2);
  lh_request_free(&r3);

  /* chat rendering */
  lh_chat_format f;
  CHECK_EQ(lh_chat_format_detect(NULL, "minimax", &f, &err), LH_OK);
  lh_buf post = {0};
  CHECK_EQ(lh_chat_render(&f, a, &post, &err), LH_OK); /* the documents open the prompt, then every turn */
  CHECK(!strcmp(post.data, "<beginning_of_sentence>system ai_setting=assistant\nBe brief.<end_of_sentence>\n"
                           "<beginning_of_sentence>user name=user\nWhich file?<end_of_sentence>\n"
                           "<beginning_of_sentence>ai name=assistant\n"));
  lh_buf_free(&post);
  CHECK_EQ(lh_chat_render(&f, bb, &post, &err), LH_OK);
  CHECK(!strcmp(post.data, "Once"));
  lh_buf_free(&post);
  CHECK_EQ(lh_chat_format_detect(NULL, "jinja", &f, &err), LH_EINVAL);

  /* template detection from tokenizer_config.json */
  char mdir[512], cfg[600];
  lh_path_join(mdir, sizeof mdir, lh_test_tmpdir(), "model");
  lh_mkdir_p(mdir, NULL);
  lh_path_join(cfg, sizeof cfg, mdir, "tokenizer_config.json");
  write_file(cfg, "{\"chat_template\": \"{% for m in messages %}{{'<beginning_of_sentence>user name=user\\\\n'}}"
                  "{{'<beginning_of_sentence>ai name=assistant\\\\n'}}{{'<end_of_sentence>'}}{% endfor %}\"}");
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_OK);
  CHECK_EQ(f.kind, LH_CHAT_MINIMAX);
  write_file(cfg, "{\"chat_template\": \"{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}\"}");
  CHECK_EQ(lh_chat_format_detect(mdir, NULL, &f, &err), LH_EUNSUPPORTED);
  CHECK_STR_CONTAINS(err.msg, "--chat-template");

  /* output lines parse back with the fields the OpenAI batch format has */
  lh_buf out = {0};
  lh_completion c = {.text = "src/x.c", .finish_reason = "stop", .prompt_tokens = 10, .completion_tokens = 3,
                     .created = 1700000000, .model = "haul-tiny"};
  CHECK_EQ(lh_output_success(&out, a, "batch_req_1", &c), LH_OK);
  CHECK_EQ(lh_output_error(&out, "line-4", "batch_req_2", 400, "invalid_request", b.req[2].error.msg), LH_OK);
  char *nl = strchr(out.data, '\n');
  CHECK(nl != NULL);
  cJSON *j1 = cJSON_ParseWithLength(out.data, (size_t)(nl - out.data));
  cJSON *j2 = cJSON_Parse(nl + 1);
  CHECK(j1 && j2);
  if (j1 && j2) {
    cJSON *resp = cJSON_GetObjectItem(j1, "response");
    CHECK_EQ(cJSON_GetObjectItem(resp, "status_code")->valuedouble, 200);
    cJSON *body = cJSON_GetObjectItem(resp, "body");
    CHECK(!strcmp(cJSON_GetObjectItem(body, "object")->valuestring, "chat.completion"));
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(body, "choices"), 0);
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(ch, "message"), "content")->valuestring, "src/x.c"));
    CHECK_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(body, "usage"), "total_tokens")->valuedouble, 13);
    CHECK(cJSON_IsNull(cJSON_GetObjectItem(j1, "error")));
    CHECK(!strcmp(cJSON_GetObjectItem(j2, "custom_id")->valuestring, "line-4"));
    CHECK_STR_CONTAINS(cJSON_GetObjectItem(cJSON_GetObjectItem(j2, "error"), "message")->valuestring, "line 4");
  }
  cJSON_Delete(j1);
  cJSON_Delete(j2);
  lh_buf_free(&out);
  lh_batch_free(&b);
  return lh_test_end();
}
