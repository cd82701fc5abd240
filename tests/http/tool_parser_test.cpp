// Tool-call parsing per chat-template family, tool request validation, and the tools prompt
// for templates without tools — fed with recorded model text, no model.
#define BOOST_TEST_MODULE http_tools
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "api_error.hpp"
#include "request.hpp"
#include "tool_parser.hpp"
#include "tool_prompt.hpp"

using namespace tandem::http;

namespace {

const std::string weather_tools = R"([
  {"type":"function","function":{"name":"get_weather","description":"Weather of a city",
   "parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},
                 "required":["city"]}}},
  {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}
])";

chat_request chat_with(const std::string& extra) {
  return parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" +
                                            weather_tools + extra + "}"));
}

// What a parse produced, with the streaming contract checked on the way: a call's pieces
// come begin, arguments..., end, and its fragments concatenate to the arguments its end
// carries.
struct parsed {
  std::string content;
  std::vector<parsed_tool_call> calls;   // complete calls
  std::vector<std::string> streamed;     // per call: its fragments, concatenated
  std::vector<size_t> fragments;         // per call: how many fragments
  std::string error;
};

void take(parsed& all, tool_call_parser::output o) {
  for (auto& p : o.pieces) {
    switch (p.k) {
      case tool_piece::kind::content:
        all.content += p.text;
        break;
      case tool_piece::kind::begin:
        BOOST_TEST(p.index == all.streamed.size());  // calls are numbered in order
        all.streamed.emplace_back();
        all.fragments.push_back(0);
        BOOST_TEST(!p.text.empty());
        break;
      case tool_piece::kind::arguments:
        BOOST_REQUIRE(p.index + 1 == all.streamed.size());
        all.streamed[p.index] += p.text;
        ++all.fragments[p.index];
        break;
      case tool_piece::kind::end:
        BOOST_REQUIRE(p.index + 1 == all.streamed.size());
        BOOST_TEST(p.call.arguments == all.streamed[p.index]);
        all.calls.push_back(std::move(p.call));
        break;
    }
  }
  if (all.error.empty()) all.error = o.error;
}

// Feeds `text` in pieces of `step` bytes (a token stream splits tags anywhere).
parsed run(tool_format f, const tool_request& t, const std::string& text, size_t step) {
  tool_call_parser p(f, t);
  parsed all;
  for (size_t i = 0; i < text.size(); i += step) take(all, p.push(std::string_view(text).substr(i, step)));
  take(all, p.finish());
  return all;
}

// One push's pieces, as (kind, text) pairs (an end's text: its arguments).
void expect_pieces(const tool_call_parser::output& o, const std::vector<std::pair<tool_piece::kind, std::string>>& want) {
  BOOST_REQUIRE(o.pieces.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const tool_piece& p = o.pieces[i];
    BOOST_TEST((p.k == want[i].first), "piece " << i);
    BOOST_TEST((p.k == tool_piece::kind::end ? p.call.arguments : p.text) == want[i].second);
  }
}

boost::json::value args_of(const parsed_tool_call& c) { return boost::json::parse(c.arguments); }

void expect_400(const std::string& extra, const std::string& param) {
  try {
    chat_with(extra);
    BOOST_FAIL("accepted: " << extra);
  } catch (const api_error& e) {
    BOOST_TEST(e.status() == 400);
    BOOST_TEST(e.param() == param, extra << " -> '" << e.param() << "': " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(hermes_object_and_smollm2_list_in_any_split) {
  const tool_request t = chat_with("").tools;
  const std::string text =
      "Let me look. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa ris \\\"x\\\"\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>[{\"name\": \"get_time\", \"arguments\": {}}, "
      "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}]</tool_call>"
      "<tool_call>{\"arguments\": {\"zone\": \"UTC\"}, \"name\": \"get_time\"}</tool_call> done";
  for (size_t step : {1u, 2u, 3u, 7u, 1000u}) {
    auto out = run(tool_format::hermes, t, text, step);
    BOOST_TEST(out.error.empty(), out.error);
    BOOST_TEST(out.content == "Let me look. \n done");
    BOOST_REQUIRE(out.calls.size() == 4u);
    BOOST_TEST(out.calls[0].name == "get_weather");
    BOOST_TEST(out.calls[0].arguments == R"({"city":"Pa ris \"x\"","days":2})");  // whitespace outside strings dropped
    BOOST_TEST(out.calls[1].name == "get_time");
    BOOST_TEST(out.calls[1].arguments == "{}");
    BOOST_TEST(out.calls[2].arguments == R"({"city":"Rome"})");  // stringified arguments unwrapped
    BOOST_TEST(out.calls[3].arguments == R"({"zone":"UTC"})");
    if (step == 1) {
      BOOST_TEST(out.fragments[0] == out.calls[0].arguments.size());  // one character a token
      BOOST_TEST(out.fragments[2] == 1u);  // a string: unwrapped when it ends
      BOOST_TEST(out.fragments[3] == 1u);  // written before the name: sent when the name is known
    }
  }
}

BOOST_AUTO_TEST_CASE(text_that_only_looks_like_a_tag_is_content) {
  const tool_request t = chat_with("").tools;
  auto out = run(tool_format::hermes, t, "a <tool_ is not <tool_c", 2);
  BOOST_TEST(out.error.empty());
  BOOST_TEST(out.content == "a <tool_ is not <tool_c");
  BOOST_TEST(out.calls.empty());
}

BOOST_AUTO_TEST_CASE(malformed_calls_are_errors_never_content) {
  const tool_request t = chat_with("").tools;
  const std::pair<std::string, std::string> cases[] = {
      {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": </tool_call>", "not valid JSON"},
      {"<tool_call>{\"name\": \"delete_all\", \"arguments\": {}}</tool_call>", "not in 'tools'"},
      {"<tool_call>{\"name\": \"get_weather\", \"arguments\": [1]}</tool_call>", "not a JSON object"},
      {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"days\": 1}}</tool_call>", "required argument 'city'"},
      {"<tool_call>{\"arguments\": {}}</tool_call>", "no \"name\""},
      {"<tool_call>{\"name\": \"get_time\", \"arguments\": {}}", "ended inside a tool call"},
  };
  for (const auto& [text, why] : cases) {
    auto out = run(tool_format::hermes, t, text, 5);
    BOOST_TEST(out.error.find(why) != std::string::npos, text << " -> " << out.error);
    // A call object complete before its closing tag went missing was a call already.
    if (why != "ended inside a tool call") BOOST_TEST(out.calls.empty());
    BOOST_TEST(out.content.find("tool_call") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(named_choice_rejects_another_function) {
  const tool_request t = chat_with(R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})").tools;
  BOOST_TEST((t.choice == tool_choice_kind::named && t.forced == "get_time"));
  auto out = run(tool_format::hermes, t, "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"x\"}}</tool_call>", 4);
  BOOST_TEST(out.error.find("asked for 'get_time'") != std::string::npos, out.error);
}

BOOST_AUTO_TEST_CASE(glm4_pairs_typed_by_the_schema) {
  const tool_request t = chat_with("").tools;
  // GLM-4.5 / GLM-5 output, with and without newlines between pairs.
  const std::string text =
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>2024</arg_value>\n"
      "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
      "<tool_call>get_time<arg_key>zone</arg_key><arg_value>UTC+1</arg_value></tool_call>";
  for (size_t step : {1u, 4u, 1000u}) {
    auto out = run(tool_format::glm4, t, text, step);
    BOOST_TEST(out.error.empty(), out.error);
    BOOST_REQUIRE(out.calls.size() == 2u);
    BOOST_TEST(out.calls[0].name == "get_weather");
    BOOST_TEST(args_of(out.calls[0]).at("city").as_string() == "2024");  // schema: string, kept as text
    BOOST_TEST(args_of(out.calls[0]).at("days").as_int64() == 3);        // schema: integer, read as JSON
    BOOST_TEST(args_of(out.calls[1]).at("zone").as_string() == "UTC+1");
  }
  auto bad = run(tool_format::glm4, t, "<tool_call>get_weather<arg_key>city</arg_key>oops</tool_call>", 3);
  BOOST_TEST(bad.error.find("<arg_key>/<arg_value>") != std::string::npos, bad.error);
}

// Each call's name goes out as soon as it is known and its arguments as they are written,
// however the markers are split; the fragments add up to the arguments of the complete call
// (checked in take(), for every test here).
BOOST_AUTO_TEST_CASE(hermes_arguments_stream_while_they_are_written) {
  const tool_request t = chat_with("").tools;
  tool_call_parser p(tool_format::hermes, t);
  using k = tool_piece::kind;
  expect_pieces(p.push("Sure. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"),
                {{k::content, "Sure. "}, {k::begin, "get_weather"}, {k::arguments, R"({"city":"Par)"}});
  expect_pieces(p.push("is\", \"days\": 2}}\n</tool_c"),
                {{k::arguments, R"(is","days":2})"}, {k::end, R"({"city":"Paris","days":2})"}});
}

BOOST_AUTO_TEST_CASE(glm4_arguments_stream_while_they_are_written) {
  const tool_request t = chat_with("").tools;
  tool_call_parser p(tool_format::glm4, t);
  using k = tool_piece::kind;
  // The start of </arg_value> is held back; an integer waits for its end.
  expect_pieces(p.push("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Par</arg_v"),
                {{k::begin, "get_weather"}, {k::arguments, R"({"city":"Par)"}});
  expect_pieces(p.push("alue>\n<arg_key>days</arg_key>\n<arg_value>"), {{k::arguments, R"(","days":)"}});
  expect_pieces(p.push("3</arg_value></tool_call>"), {{k::arguments, "3}"}, {k::end, R"({"city":"Par","days":3})"}});

  const std::string text =
      "Hi <tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value> Z\xc3\xbcrich \"<b>\"\n</arg_value>\n"
      "<arg_key>days</arg_key><arg_value>[1, 2]</arg_value>\n</tool_call><tool_call>get_time</tool_call>";
  for (size_t step : {1u, 3u, 1000u}) {
    auto out = run(tool_format::glm4, t, text, step);
    BOOST_TEST(out.error.empty(), out.error);
    BOOST_TEST(out.content == "Hi ");
    BOOST_REQUIRE(out.calls.size() == 2u);
    BOOST_TEST(out.calls[0].arguments == "{\"city\":\"Z\xc3\xbcrich \\\"<b>\\\"\",\"days\":[1,2]}");
    BOOST_TEST(args_of(out.calls[0]).at("city").as_string() == "Z\xc3\xbcrich \"<b>\"");  // stripped
    BOOST_TEST(out.calls[1].arguments == "{}");
    if (step == 1) BOOST_TEST(out.fragments[0] > 10u);
  }
  auto twice = run(tool_format::glm4, t, "<tool_call>get_time<arg_key>zone</arg_key><arg_value>a</arg_value>"
                                         "<arg_key>zone</arg_key><arg_value>b</arg_value></tool_call>", 2);
  BOOST_TEST(twice.error.find("twice") != std::string::npos, twice.error);
}

BOOST_AUTO_TEST_CASE(format_detected_from_the_template) {
  // The tiny GLM-5-family fixture's template teaches <arg_key>; SmolLM2's teaches nothing.
  const char* fixtures = std::getenv("TANDEM_FIXTURES");
  BOOST_REQUIRE(fixtures);
  std::ifstream in(std::string(fixtures) + "/glm_moe_dsa/tiny/tokenizer_config.json");
  const std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto tmpl = boost::json::parse(cfg).at("chat_template").as_string();
  BOOST_TEST((detect_tool_format(tmpl) == tool_format::glm4));
  BOOST_TEST((detect_tool_format("{% for m in messages %}{{ m.content }}{% endfor %}") == tool_format::hermes));
  BOOST_TEST((tool_format_named("glm4") == tool_format::glm4));
  BOOST_TEST(!tool_format_named("bogus").has_value());
}

BOOST_AUTO_TEST_CASE(tool_requests_are_validated) {
  auto r = chat_with(R"(,"tool_choice":"required","parallel_tool_calls":false)");
  BOOST_TEST(r.tools.functions.size() == 2u);
  BOOST_TEST((r.tools.choice == tool_choice_kind::required));
  BOOST_TEST(!r.tools.parallel);
  BOOST_TEST(boost::json::parse(r.tools.tools_json).as_array().size() == 2u);
  expect_400(R"(,"tool_choice":"bogus")", "tool_choice");
  expect_400(R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})", "tool_choice.function.name");
  expect_400(R"(,"tool_choice":{"type":"function"})", "tool_choice.function");
  expect_400(R"(,"parallel_tool_calls":"yes")", "parallel_tool_calls");
  auto bad_tools = [](const std::string& tools, const std::string& param) {
    try {
      parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools + "}"));
      BOOST_FAIL("accepted: " << tools);
    } catch (const api_error& e) {
      BOOST_TEST(e.param() == param, tools << " -> '" << e.param() << "': " << e.what());
    }
  };
  bad_tools(R"({"type":"function"})", "tools");
  bad_tools(R"([{"type":"retrieval","function":{"name":"f"}}])", "tools[0].type");
  bad_tools(R"([{"type":"function","function":{"name":"has space"}}])", "tools[0].function.name");
  bad_tools(R"([{"type":"function","function":{"name":"f","parameters":{"type":"array"}}}])", "tools[0].function.parameters");
  bad_tools(R"([{"type":"function","function":{"name":"f","parameters":{"properties":[]}}}])", "tools[0].function.parameters");
  bad_tools(R"([{"type":"function","function":{"name":"f","parameters":{"required":"x"}}}])", "tools[0].function.parameters");
  bad_tools(R"([{"type":"function","function":{"name":"f","strict":1}}])", "tools[0].function.strict");
  bad_tools(R"([{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}])", "tools");
  // tool_choice without tools.
  try {
    parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"})"));
    BOOST_FAIL("tool_choice without tools accepted");
  } catch (const api_error& e) {
    BOOST_TEST(e.param() == "tool_choice");
  }
}

BOOST_AUTO_TEST_CASE(history_tool_calls_reach_the_template_as_objects) {
  auto r = parse_chat_request(parse_json_body(R"({"messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}]})"));
  BOOST_REQUIRE(r.messages.size() == 3u);
  const auto calls = boost::json::parse(r.messages[1].tool_calls_json);
  BOOST_TEST(calls.at(0).at("function").at("arguments").at("city").as_string() == "Paris");
  BOOST_TEST(r.messages[2].tool_call_id == "call_1");
  for (const char* bad : {
           R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"[1]"}}]}]})",
           R"({"messages":[{"role":"user","content":"x","tool_calls":[]}]})",
           R"({"messages":[{"role":"tool","content":"x"}]})"}) {
    BOOST_CHECK_THROW(parse_chat_request(parse_json_body(bad)), api_error);
  }
}

BOOST_AUTO_TEST_CASE(tools_prompt_for_templates_without_tools) {
  auto r = parse_chat_request(parse_json_body(R"({"messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":"weather?"},
      {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"sunny"}],"tools":)" + weather_tools + "}"));
  const auto msgs = with_tools_in_prompt(r.messages, r.tools.tools_json);
  BOOST_REQUIRE(msgs.size() == 4u);
  BOOST_TEST(msgs[0].role == "system");
  BOOST_TEST(msgs[0].content.find("<tools>") != std::string::npos);
  BOOST_TEST(msgs[0].content.find("\"get_weather\"") != std::string::npos);
  BOOST_TEST(msgs[0].content.find("Be brief.") != std::string::npos);
  // The rewritten history is exactly what the hermes parser reads back.
  BOOST_TEST(msgs[2].tool_calls_json.empty());
  auto back = run(tool_format::hermes, r.tools, msgs[2].content, 1000);
  BOOST_TEST(back.error.empty(), back.error);
  BOOST_REQUIRE(back.calls.size() == 1u);
  BOOST_TEST(args_of(back.calls[0]).at("city").as_string() == "Paris");
  BOOST_TEST(msgs[3].role == "user");
  BOOST_TEST(msgs[3].content == "<tool_response>\nsunny\n</tool_response>");
}
