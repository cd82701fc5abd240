#define BOOST_TEST_MODULE http_parse
#include <boost/test/unit_test.hpp>

#include "api_error.hpp"
#include "request.hpp"
#include "sse.hpp"
#include "stop_matcher.hpp"

using namespace tandem::http;

namespace {

chat_request chat(const std::string& body) { return parse_chat_request(parse_json_body(body)); }
completion_request completion(const std::string& body) { return parse_completion_request(parse_json_body(body)); }

const std::string msgs = R"("messages":[{"role":"user","content":"hi"}])";

// Parses `body` expecting a 400 naming `param`.
void expect_400(const std::string& body, const std::string& param, bool is_chat = true) {
  try {
    if (is_chat) chat(body);
    else completion(body);
    BOOST_FAIL("accepted: " + body);
  } catch (const api_error& e) {
    BOOST_TEST(e.status() == 400);
    BOOST_TEST(e.param() == param, body << " -> param '" << e.param() << "': " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(chat_fields_are_typed) {
  auto r = chat("{" + msgs + R"(,"model":"m","temperature":0.5,"top_p":0.9,"top_k":40,"min_p":0.1,"seed":-3,
      "stop":"END","stop_token_ids":[7],"n":2,"stream":true,"stream_options":{"include_usage":true},
      "logprobs":true,"top_logprobs":3,"presence_penalty":1,"frequency_penalty":-1,"ignore_eos":true,
      "user":"u","max_tokens":5,"max_completion_tokens":9})");
  BOOST_TEST(r.messages.size() == 1u);
  BOOST_TEST(r.messages[0].content == "hi");
  BOOST_TEST(r.gen.model == "m");
  BOOST_TEST(r.gen.sampling.temperature == 0.5f);
  BOOST_TEST(r.gen.sampling.top_k == 40);
  BOOST_TEST(r.gen.has_seed);
  BOOST_TEST(r.gen.sampling.seed == static_cast<uint64_t>(-3));
  BOOST_TEST(r.gen.stop == std::vector<std::string>{"END"});
  BOOST_TEST(r.gen.stop_token_ids == std::vector<int32_t>{7});
  BOOST_TEST(r.gen.n == 2);
  BOOST_TEST(r.gen.stream);
  BOOST_TEST(r.gen.include_usage);
  BOOST_TEST(r.gen.logprobs == 3);
  BOOST_TEST(r.gen.ignore_eos);
  BOOST_TEST(*r.gen.max_tokens == 9);  // max_completion_tokens wins
}

BOOST_AUTO_TEST_CASE(chat_content_parts_and_roles) {
  auto r = chat(R"({"messages":[{"role":"developer","content":"sys"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null},{"role":"tool","content":"r","tool_call_id":"c1"}]})");
  BOOST_TEST(r.messages.size() == 4u);
  BOOST_TEST(r.messages[0].role == "system");
  BOOST_TEST(r.messages[1].content == "ab");
  BOOST_TEST(r.messages[2].content == "");
  BOOST_TEST(r.messages[3].tool_call_id == "c1");
}

BOOST_AUTO_TEST_CASE(bad_chat_requests_name_the_field) {
  expect_400(R"({})", "messages");
  expect_400(R"({"messages":[]})", "messages");
  expect_400(R"({"messages":"hi"})", "messages");
  expect_400(R"({"messages":[{"content":"x"}]})", "messages[0].role");
  expect_400(R"({"messages":[{"role":"wizard","content":"x"}]})", "messages[0].role");
  expect_400(R"({"messages":[{"role":"user"}]})", "messages[0].content");
  expect_400(R"({"messages":[{"role":"user","content":5}]})", "messages[0].content");
  expect_400(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type");
  expect_400("{" + msgs + R"(,"temperature":"hot"})", "temperature");
  expect_400("{" + msgs + R"(,"temperature":3})", "temperature");
  expect_400("{" + msgs + R"(,"top_p":0})", "top_p");
  expect_400("{" + msgs + R"(,"top_p":1.5})", "top_p");
  expect_400("{" + msgs + R"(,"min_p":-0.1})", "min_p");
  expect_400("{" + msgs + R"(,"top_k":-2})", "top_k");
  expect_400("{" + msgs + R"(,"n":0})", "n");
  expect_400("{" + msgs + R"(,"n":1.5})", "n");
  expect_400("{" + msgs + R"(,"max_tokens":0})", "max_tokens");
  expect_400("{" + msgs + R"(,"max_tokens":"ten"})", "max_tokens");
  expect_400("{" + msgs + R"(,"max_completion_tokens":-1})", "max_completion_tokens");
  expect_400("{" + msgs + R"(,"stop":5})", "stop");
  expect_400("{" + msgs + R"(,"stop":["a",1]})", "stop");
  expect_400("{" + msgs + R"(,"stop":[""]})", "stop");
  expect_400("{" + msgs + R"(,"stop_token_ids":[-1]})", "stop_token_ids");
  expect_400("{" + msgs + R"(,"stream":"yes"})", "stream");
  expect_400("{" + msgs + R"(,"stream_options":{"include_usage":true}})", "stream_options");
  expect_400("{" + msgs + R"(,"logprobs":1})", "logprobs");
  expect_400("{" + msgs + R"(,"top_logprobs":2})", "top_logprobs");
  expect_400("{" + msgs + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs");
  expect_400("{" + msgs + R"(,"presence_penalty":2.5})", "presence_penalty");
  expect_400("{" + msgs + R"(,"seed":"x"})", "seed");
  expect_400("{" + msgs + R"(,"user":1})", "user");
  expect_400("[1,2]", "");
}

BOOST_AUTO_TEST_CASE(completion_prompt_forms) {
  BOOST_TEST(completion(R"({"prompt":"a"})").prompts.size() == 1u);
  auto two = completion(R"({"prompt":["a","b"]})");
  BOOST_TEST(two.prompts.size() == 2u);
  BOOST_TEST(std::get<std::string>(two.prompts[1]) == "b");
  auto ids = completion(R"({"prompt":[1,2,3]})");
  BOOST_TEST(ids.prompts.size() == 1u);
  BOOST_TEST(std::get<std::vector<int32_t>>(ids.prompts[0]).size() == 3u);
  auto lists = completion(R"({"prompt":[[1],[2,3]],"logprobs":2})");
  BOOST_TEST(lists.prompts.size() == 2u);
  BOOST_TEST(lists.gen.logprobs == 2);
  expect_400(R"({})", "prompt", false);
  expect_400(R"({"prompt":[]})", "prompt", false);
  expect_400(R"({"prompt":5})", "prompt", false);
  expect_400(R"({"prompt":[1,"a"]})", "prompt", false);
  expect_400(R"({"prompt":[[1],[-5]]})", "prompt", false);
  expect_400(R"({"prompt":"a","logprobs":true})", "logprobs", false);
  expect_400(R"({"prompt":"a","logprobs":21})", "logprobs", false);
  expect_400(R"({"prompt":"a","echo":"yes"})", "echo", false);
  expect_400(R"({"prompt":"a","max_tokens":0})", "max_tokens", false);  // 0 only with echo
  auto echo = completion(R"({"prompt":"a","echo":true,"max_tokens":0,"logprobs":1})");
  BOOST_TEST(echo.echo);
  BOOST_TEST(*echo.gen.max_tokens == 0);
  BOOST_TEST(*completion(R"({"prompt":"a"})").gen.max_tokens == completions_default_max_tokens);
  BOOST_TEST(!chat(R"({"messages":[{"role":"user","content":"hi"}]})").gen.max_tokens.has_value());
}

BOOST_AUTO_TEST_CASE(invalid_json_is_400) {
  for (const char* body : {"", "{", "{\"messages\": [}", "nul"}) {
    try {
      parse_json_body(body);
      BOOST_FAIL(std::string("accepted ") + body);
    } catch (const api_error& e) {
      BOOST_TEST(e.status() == 400);
    }
  }
}

BOOST_AUTO_TEST_CASE(error_body_has_openai_shape) {
  auto v = boost::json::parse(bad_request("'n' must be an integer", "n").body());
  const auto& e = v.at("error").as_object();
  BOOST_TEST(e.at("message").as_string() == "'n' must be an integer");
  BOOST_TEST(e.at("type").as_string() == "invalid_request_error");
  BOOST_TEST(e.at("param").as_string() == "n");
  BOOST_TEST(e.at("code").as_int64() == 400);
  auto nf = boost::json::parse(error_body(404, "no such model"));
  BOOST_TEST(nf.at("error").at("param").is_null());
  BOOST_TEST(nf.at("error").at("type").as_string() == "not_found_error");
  BOOST_TEST(boost::json::parse(error_body(429, "busy")).at("error").at("type").as_string() == "rate_limit_error");
}

BOOST_AUTO_TEST_CASE(sse_framing) {
  BOOST_TEST(sse_event(R"({"a":1})") == "data: {\"a\":1}\n\n");
  BOOST_TEST(sse_done() == "data: [DONE]\n\n");
}

// Feeds `pieces` through a matcher; returns the released text and whether it stopped.
std::pair<std::string, bool> run_stops(std::vector<std::string> stops, std::vector<std::string> pieces) {
  stop_matcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  out += m.finish().text;
  return {out, false};
}

BOOST_AUTO_TEST_CASE(stop_strings_hold_back_and_match) {
  BOOST_TEST((run_stops({"END"}, {"abc", "E", "N", "D", "x"}) == std::pair<std::string, bool>{"abc", true}));
  BOOST_TEST((run_stops({"END"}, {"abcEN", "Dx"}) == std::pair<std::string, bool>{"abc", true}));
  BOOST_TEST((run_stops({"END"}, {"abcE", "Nx"}) == std::pair<std::string, bool>{"abcENx", false}));
  BOOST_TEST((run_stops({"\n\n", "zz"}, {"a\n", "b\n", "\nc"}) == std::pair<std::string, bool>{"a\nb", true}));
  BOOST_TEST((run_stops({"bc", "abcd"}, {"xabc"}) == std::pair<std::string, bool>{"xa", true}));
  BOOST_TEST((run_stops({}, {"a", "b"}) == std::pair<std::string, bool>{"ab", false}));
  // A partial stop string is never released while it may still complete.
  stop_matcher m({"STOP"});
  BOOST_TEST(m.push("go ST").text == "go ");
  BOOST_TEST(m.push("O").text == "");
  auto r = m.push("!");
  BOOST_TEST(r.text == "STO!");
  BOOST_TEST(!r.stopped);
  // Earliest match wins, and holdback is the longest possible prefix.
  stop_matcher k({"aab"});
  BOOST_TEST(k.push("xaa").text == "x");
  BOOST_TEST(k.push("a").text == "a");
  BOOST_TEST(k.push("b").stopped);
}

// Every request field of OpenAI's chat and completions APIs: each is read (and so honoured)
// or refused with a 400 naming it, never accepted and ignored.
BOOST_AUTO_TEST_CASE(every_openai_field_is_honoured_or_refused) {
  const std::vector<std::pair<std::string, std::string>> honoured_chat = {
      {"model", R"("m")"}, {"frequency_penalty", "0.5"}, {"logit_bias", R"({"1":1})"}, {"logprobs", "true"},
      {"max_completion_tokens", "4"}, {"max_tokens", "4"}, {"n", "2"}, {"parallel_tool_calls", "true"},
      {"presence_penalty", "0.5"}, {"response_format", R"({"type":"text"})"}, {"response_format", R"({"type":"json_object"})"},
      {"seed", "1"}, {"stop", R"("x")"},
      {"store", "false"}, {"stream", "true"}, {"temperature", "0.5"}, {"top_p", "0.5"}, {"user", R"("u")"},
      {"tools", R"([{"type":"function","function":{"name":"f"}}])"},
  };
  for (const auto& [k, v] : honoured_chat)
    BOOST_CHECK_NO_THROW(chat("{" + msgs + R"(,")" + k + R"(":)" + v + "}"));
  const std::vector<std::pair<std::string, std::string>> refused_chat = {
      {"audio", "{}"}, {"function_call", R"("auto")"}, {"functions", "[]"}, {"metadata", "{}"},
      {"modalities", R"(["text"])"}, {"prediction", "{}"}, {"prompt_cache_key", R"("k")"},
      {"reasoning_effort", R"("low")"}, {"safety_identifier", R"("s")"}, {"service_tier", R"("auto")"},
      {"verbosity", R"("low")"}, {"web_search_options", "{}"}, {"store", "true"},
      {"response_format", R"("json_object")"}, {"echo", "true"}, {"best_of", "2"},
  };
  for (const auto& [k, v] : refused_chat) expect_400("{" + msgs + R"(,")" + k + R"(":)" + v + "}", k == "response_format" ? "response_format" : k);
  const std::vector<std::pair<std::string, std::string>> honoured_completion = {
      {"echo", "true"}, {"frequency_penalty", "0.5"}, {"logit_bias", R"({"1":1})"}, {"logprobs", "2"},
      {"max_tokens", "4"}, {"n", "2"}, {"presence_penalty", "0.5"}, {"seed", "1"}, {"stop", R"(["x"])"},
      {"stream", "true"}, {"temperature", "0.5"}, {"top_p", "0.5"}, {"user", R"("u")"},
  };
  for (const auto& [k, v] : honoured_completion)
    BOOST_CHECK_NO_THROW(completion(R"({"prompt":"a",")" + k + R"(":)" + v + "}"));
  for (const std::string k : {"best_of", "suffix", "tools", "messages", "top_logprobs", "max_completion_tokens"})
    expect_400(R"({"prompt":"a",")" + k + R"(":1})", k, false);
}
