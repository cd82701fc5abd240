// The agent-facing API through a live server over the scripted fake_source: tool calls
// (non-streaming, streaming deltas, required, parallel_tool_calls false), echo with prompt
// logprobs, completions' default max_tokens, logit_bias, system_fingerprint, API keys, CORS,
// and the fields that are refused rather than ignored.
#define BOOST_TEST_MODULE http_api
#include "live_server.hpp"

using namespace tandem::test;

namespace {

const std::string tools = R"("tools":[{"type":"function","function":{"name":"get_weather",
  "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";
const std::string two_calls =
    "Checking. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>"
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}</tool_call>";
constexpr auto tick = std::chrono::milliseconds(1);

std::string chat_body(const std::string& extra) { return "{" + chat_hi + "," + tools + extra + "}"; }

}  // namespace

BOOST_AUTO_TEST_CASE(tool_calls_non_streaming) {
  live_server s({}, tick, two_calls, 4096);
  auto v = json(s.post("/v1/chat/completions", chat_body("")));
  const auto& c = v.at("choices").at(0);
  BOOST_TEST(c.at("finish_reason").as_string() == "tool_calls");
  BOOST_TEST(c.at("message").at("content").as_string() == "Checking. ");
  const auto& calls = c.at("message").at("tool_calls").as_array();
  BOOST_REQUIRE(calls.size() == 2u);
  BOOST_TEST(calls[0].at("type").as_string() == "function");
  BOOST_TEST(calls[0].at("id").as_string().starts_with("call_"));
  BOOST_TEST(calls[0].at("id") != calls[1].at("id"));
  BOOST_TEST(calls[0].at("function").at("name").as_string() == "get_weather");
  BOOST_TEST(boost::json::parse(calls[1].at("function").at("arguments").as_string()).at("city").as_string() == "Rome");
  BOOST_TEST(v.at("system_fingerprint").as_string().starts_with("fp_"));
  // The template got the tools (the fake one renders them first).
  const auto sent = s.src->last_submitted();
  const std::string prompt(sent.prompt.begin(), sent.prompt.end());
  BOOST_TEST(prompt.find("get_weather") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tool_calls_streaming_deltas) {
  live_server s({}, tick, two_calls, 4096);
  auto r = s.post("/v1/chat/completions", chat_body(R"(,"stream":true)"));
  auto [evs, done] = events(r.body);
  BOOST_TEST(done);
  std::string content;
  std::map<int64_t, std::string> names, args, ids;
  std::map<int64_t, int> fragments;
  std::string finish;
  for (const auto& e : evs) {
    BOOST_TEST(e.at("system_fingerprint").as_string().starts_with("fp_"));
    const auto& ch = e.at("choices").at(0);
    const auto& d = ch.at("delta").as_object();
    if (d.contains("content")) content += d.at("content").as_string();
    if (d.contains("tool_calls"))
      for (const auto& tc : d.at("tool_calls").as_array()) {
        const int64_t k = tc.at("index").as_int64();
        if (tc.as_object().contains("id")) {
          BOOST_TEST(!ids.count(k));  // id, type and name only on the first fragment
          ids[k] = tc.at("id").as_string();
          names[k] = tc.at("function").at("name").as_string();
          BOOST_TEST(tc.at("type").as_string() == "function");
          BOOST_TEST(tc.at("function").at("arguments").as_string().empty());
        } else {
          BOOST_TEST(!tc.at("function").as_object().contains("name"));
          ++fragments[k];
        }
        args[k] += tc.at("function").at("arguments").as_string();
      }
    if (!ch.at("finish_reason").is_null()) finish = ch.at("finish_reason").as_string();
  }
  BOOST_TEST(content == "Checking. ");
  BOOST_TEST(finish == "tool_calls");
  BOOST_REQUIRE(names.size() == 2u);
  BOOST_TEST(names[1] == "get_weather");
  // The fake source writes a byte a token: the arguments stream as they are written, and
  // add up to what the non-streamed answer carries.
  BOOST_TEST(args[0] == R"({"city":"Paris"})");
  BOOST_TEST(args[1] == R"({"city":"Rome"})");
  BOOST_TEST(fragments[0] > 10);
}

// max_tokens cuts the second call: the answer is "length" with the complete call only (a
// stream has sent the cut call's start), not an error.
BOOST_AUTO_TEST_CASE(max_tokens_inside_a_call_is_length) {
  live_server s({}, tick, two_calls, 4096);
  const std::string cut = ",\"max_tokens\":" + std::to_string(two_calls.size() - 16);  // in "Rome"
  auto v = json(s.post("/v1/chat/completions", chat_body(cut)));
  BOOST_TEST(v.at("choices").at(0).at("finish_reason").as_string() == "length");
  BOOST_TEST(v.at("choices").at(0).at("message").at("tool_calls").as_array().size() == 1u);
  auto [evs, done] = events(s.post("/v1/chat/completions", chat_body(cut + R"(,"stream":true)")).body);
  BOOST_TEST(done);
  BOOST_TEST(evs.back().at("choices").at(0).at("finish_reason").as_string() == "length");
}

BOOST_AUTO_TEST_CASE(parallel_false_ends_at_the_first_call) {
  live_server s({}, tick, two_calls, 4096);
  auto v = json(s.post("/v1/chat/completions", chat_body(R"(,"parallel_tool_calls":false)")));
  BOOST_TEST(v.at("choices").at(0).at("message").at("tool_calls").as_array().size() == 1u);
  BOOST_TEST(v.at("choices").at(0).at("finish_reason").as_string() == "tool_calls");
}

BOOST_AUTO_TEST_CASE(none_leaves_text_and_required_without_a_call_is_an_error) {
  live_server s({}, tick, two_calls, 4096);
  auto none = json(s.post("/v1/chat/completions", chat_body(R"(,"tool_choice":"none")")));
  BOOST_TEST(none.at("choices").at(0).at("message").at("content").as_string() == two_calls);
  BOOST_TEST(!none.at("choices").at(0).at("message").as_object().contains("tool_calls"));
  live_server prose({}, tick, "It is sunny.", 4096);
  auto r = prose.post("/v1/chat/completions", chat_body(R"(,"tool_choice":"required")"));
  expect_error(r, 500);
  BOOST_TEST(json(r).at("error").at("message").as_string().find("without a tool call") != std::string::npos);
  auto stream = prose.post("/v1/chat/completions", chat_body(R"(,"tool_choice":"required","stream":true)"));
  auto [evs, done] = events(stream.body);
  BOOST_TEST(done);
  BOOST_TEST(evs.back().as_object().contains("error"));
  auto plain = json(prose.post("/v1/chat/completions", chat_body("")));  // auto: prose is an answer
  BOOST_TEST(plain.at("choices").at(0).at("message").at("content").as_string() == "It is sunny.");
  BOOST_TEST(plain.at("choices").at(0).at("finish_reason").as_string() == "stop");
}

BOOST_AUTO_TEST_CASE(malformed_call_is_reported) {
  live_server s({}, tick, "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", 4096);
  auto r = s.post("/v1/chat/completions", chat_body(""));
  expect_error(r, 500);
  BOOST_TEST(json(r).at("error").at("message").as_string().find("malformed tool call") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(template_without_tools_gets_the_tools_prompt) {
  live_server s({}, tick, two_calls, 4096);
  s.src->renders_tools_ = false;
  json(s.post("/v1/chat/completions", chat_body("")));
  const auto sent = s.src->last_submitted();
  const std::string prompt(sent.prompt.begin(), sent.prompt.end());
  BOOST_TEST(prompt.find("<tools>") != std::string::npos);
  BOOST_TEST(prompt.find("<tool_call>[") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(echo_with_prompt_logprobs_and_max_tokens_0) {
  live_server s;
  auto v = json(s.post("/v1/completions", R"({"prompt":"abc","echo":true,"logprobs":1,"max_tokens":0})"));
  const auto& c = v.at("choices").at(0);
  BOOST_TEST(c.at("text").as_string() == "abc");
  const auto& lp = c.at("logprobs");
  BOOST_REQUIRE(lp.at("tokens").as_array().size() == 3u);
  BOOST_TEST(lp.at("token_logprobs").at(0).is_null());
  BOOST_TEST(lp.at("top_logprobs").at(0).is_null());
  BOOST_TEST(lp.at("token_logprobs").at(2).as_double() == -0.5);  // the fake's -i/4
  BOOST_TEST(lp.at("text_offset").at(2).as_int64() == 2);
  BOOST_TEST(v.at("usage").at("completion_tokens").as_int64() == 0);
  BOOST_TEST(s.src->last_submitted().prompt_logprobs == 1);
  // echo with generation: prompt, then the answer, logprobs for both.
  auto g = json(s.post("/v1/completions", R"({"prompt":"ab","echo":true,"logprobs":0,"max_tokens":2})"));
  BOOST_TEST(g.at("choices").at(0).at("text").as_string() == "abHe");
  BOOST_TEST(g.at("choices").at(0).at("logprobs").at("tokens").as_array().size() == 4u);
  expect_error(s.post("/v1/completions", R"({"prompt":"ab","max_tokens":0})"), 400);
  expect_error(s.post("/v1/completions", R"({"prompt":"ab","echo":true,"max_tokens":0,"stream":true})"), 400);
}

BOOST_AUTO_TEST_CASE(completions_default_to_16_tokens) {
  live_server s({}, tick, std::string(40, 'x'));
  auto v = json(s.post("/v1/completions", R"({"prompt":"a"})"));
  BOOST_TEST(v.at("usage").at("completion_tokens").as_int64() == 16);
  BOOST_TEST(v.at("choices").at(0).at("finish_reason").as_string() == "length");
  auto chat = json(s.post("/v1/chat/completions", "{" + chat_hi + "}"));  // chat: up to the context
  BOOST_TEST(chat.at("usage").at("completion_tokens").as_int64() == 41);
}

BOOST_AUTO_TEST_CASE(logit_bias_reaches_the_engine_or_is_refused) {
  live_server s;
  json(s.post("/v1/completions", R"({"prompt":"a","max_tokens":1,"logit_bias":{"65":100,"66":-100}})"));
  const auto sent = s.src->last_submitted();
  BOOST_REQUIRE(sent.logit_bias.size() == 2u);
  BOOST_TEST(sent.logit_bias[0].token == 65);
  BOOST_TEST(sent.logit_bias[1].bias == -100.0f);
  for (const char* bad : {R"({"prompt":"a","logit_bias":{"65":101}})", R"({"prompt":"a","logit_bias":{"x":1}})",
                          R"({"prompt":"a","logit_bias":{"-1":1}})", R"({"prompt":"a","logit_bias":{"999":1}})",
                          R"({"prompt":"a","logit_bias":{"65":"1"}})", R"({"prompt":"a","logit_bias":[1]})"}) {
    auto r = s.post("/v1/completions", bad);
    expect_error(r, 400);
    BOOST_TEST(json(r).at("error").at("param").as_string() == "logit_bias", bad);
  }
}

BOOST_AUTO_TEST_CASE(unsupported_fields_are_refused_by_name) {
  live_server s;
  const std::pair<std::string, std::string> cases[] = {
      {R"(,"response_format":{"type":"json_object"})", "response_format"},
      {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}})", "response_format"},
      {R"(,"response_format":{"type":"sound"})", "response_format.type"},
      {R"(,"functions":[])", "functions"},
      {R"(,"some_unknown_field":1)", "some_unknown_field"},
      {R"(,"store":true)", "store"},
  };
  for (const auto& [extra, param] : cases) {
    auto r = s.post("/v1/chat/completions", "{" + chat_hi + extra + "}");
    expect_error(r, 400);
    BOOST_TEST(json(r).at("error").at("param").as_string() == param, extra);
  }
  BOOST_TEST(s.post("/v1/chat/completions", "{" + chat_hi + R"(,"response_format":{"type":"text"})" + "}").status == 200);
  expect_error(s.post("/v1/completions", R"({"prompt":"a","suffix":"b"})"), 400);
  expect_error(s.post("/v1/completions", R"({"prompt":"a","tools":[]})"), 400);
  // Context errors name what the client sent.
  auto long_prompt = s.post("/v1/completions", R"({"prompt":")" + std::string(70, 'x') + R"("})");
  BOOST_TEST(json(long_prompt).at("error").at("param").as_string() == "prompt");
  auto long_chat = s.post("/v1/chat/completions", R"({"messages":[{"role":"user","content":")" + std::string(70, 'x') + R"("}]})");
  BOOST_TEST(json(long_chat).at("error").at("param").as_string() == "messages");
  BOOST_TEST(s.src->submitted_ == 1);
}

BOOST_AUTO_TEST_CASE(api_key_guards_v1) {
  tandem::server_options opt;
  opt.api_key = "sk-test";
  live_server s(opt);
  auto none = s.post("/v1/completions", R"({"prompt":"a","max_tokens":1})");
  expect_error(none, 401);
  BOOST_TEST(json(none).at("error").at("type").as_string() == "authentication_error");
  BOOST_TEST(none.headers["WWW-Authenticate"] == "Bearer");
  expect_error(s.call(bhttp::verb::post, "/v1/completions", R"({"prompt":"a"})", {{"Authorization", "Bearer sk-tesx"}}), 401);
  expect_error(s.call(bhttp::verb::get, "/v1/models", {}, {{"Authorization", "sk-test"}}), 401);
  BOOST_TEST(s.call(bhttp::verb::get, "/v1/models", {}, {{"Authorization", "Bearer sk-test"}}).status == 200);
  BOOST_TEST(s.call(bhttp::verb::post, "/v1/completions", R"({"prompt":"a","max_tokens":1})",
                    {{"Authorization", "bearer sk-test"}}).status == 200);
  BOOST_TEST(s.get("/health").status == 200);   // open by default
  BOOST_TEST(s.get("/metrics").status == 200);
  BOOST_TEST(s.src->submitted_ == 1);
  opt.auth_all = true;
  live_server all(opt);
  expect_error(all.get("/health"), 401);
  expect_error(all.get("/metrics"), 401);
  BOOST_TEST(all.call(bhttp::verb::get, "/health", {}, {{"Authorization", "Bearer sk-test"}}).status == 200);
}

BOOST_AUTO_TEST_CASE(cors_is_opt_in) {
  live_server plain;
  auto r = plain.call(bhttp::verb::get, "/v1/models", {}, {{"Origin", "http://app.example"}});
  BOOST_TEST(!r.headers.count("Access-Control-Allow-Origin"));
  BOOST_TEST(plain.call(bhttp::verb::options, "/v1/models", {}, {{"Origin", "http://app.example"}}).status == 405);
  tandem::server_options opt;
  opt.cors_origins = {"http://app.example"};
  opt.api_key = "k";
  live_server s(opt);
  auto pre = s.call(bhttp::verb::options, "/v1/chat/completions", {},
                    {{"Origin", "http://app.example"}, {"Access-Control-Request-Method", "POST"}});
  BOOST_TEST(pre.status == 204);  // no key needed: browsers send none on a preflight
  BOOST_TEST(pre.headers["Access-Control-Allow-Origin"] == "http://app.example");
  BOOST_TEST(pre.headers["Access-Control-Allow-Headers"].find("Authorization") != std::string::npos);
  auto ok = s.call(bhttp::verb::post, "/v1/chat/completions", "{" + chat_hi + R"(,"stream":true})",
                   {{"Origin", "http://app.example"}, {"Authorization", "Bearer k"}});
  BOOST_TEST(ok.status == 200);
  BOOST_TEST(ok.headers["Access-Control-Allow-Origin"] == "http://app.example");
  auto denied = s.call(bhttp::verb::get, "/v1/models", {}, {{"Origin", "http://app.example"}});
  BOOST_TEST(denied.status == 401);
  BOOST_TEST(denied.headers["Access-Control-Allow-Origin"] == "http://app.example");  // readable by the page
  auto other = s.call(bhttp::verb::get, "/health", {}, {{"Origin", "http://evil.example"}});
  BOOST_TEST(!other.headers.count("Access-Control-Allow-Origin"));
}
