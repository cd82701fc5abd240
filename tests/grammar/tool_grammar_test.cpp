// The tool-call grammars (tool_grammar.hpp) compiled by xgrammar over a byte vocabulary (one
// token per byte, so any text can be spelled): the calls each format's models write are
// accepted whole, a value of the wrong type or an unknown function is refused at the byte
// where it goes wrong, and what the grammar accepts is what tool_call_parser reads back as a
// valid call.
#define BOOST_TEST_MODULE tool_grammar
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <string>
#include <vector>

#include "request.hpp"
#include "tandem/grammar.hpp"
#include "tool_grammar.hpp"

using namespace tandem;
using namespace tandem::http;

namespace {

constexpr int32_t stop_id = 256;

grammar_compiler& compiler() {
  static grammar_compiler gc([] {
    grammar_vocabulary v;
    for (int b = 0; b < 256; ++b) v.token_bytes.push_back(std::string(1, static_cast<char>(b)));
    v.token_bytes.emplace_back();  // the stop token: a control token, no text
    v.vocab_size = 257;
    v.stop_ids = {stop_id};
    return v;
  }());
  return gc;
}

tool_request tools_of(const std::string& extra) {
  const std::string tools = R"([
    {"type":"function","function":{"name":"add","strict":true,"parameters":{"type":"object",
      "properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}}},
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}}])";
  return parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"tools":)" + tools +
                                            extra + "}")).tools;
}

grammar_matcher matcher(const tool_request& t, tool_format f) {
  const auto spec = tool_call_grammar(t, f);
  BOOST_REQUIRE(spec.has_value());
  return grammar_matcher(compiler().compile(*spec));
}

// How many bytes of `text` the grammar accepts, one token each.
size_t accepted(grammar_matcher& m, const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.accept(static_cast<unsigned char>(text[i]))) return i;
  return text.size();
}

bool may_stop(grammar_matcher& m) {
  std::vector<uint32_t> words(grammar_matcher::mask_words(257));
  m.fill_mask(words);
  return (words[stop_id / 32] >> (stop_id % 32)) & 1u;
}

// The whole text is accepted, the output may end after it, and the parser reads it back as
// `calls` valid calls.
void accepts_calls(const tool_request& t, tool_format f, const std::string& text, size_t calls) {
  grammar_matcher m = matcher(t, f);
  BOOST_TEST(accepted(m, text) == text.size(), text);
  BOOST_TEST(may_stop(m), text);
  tool_call_parser p(f, t);
  auto out = p.push(text);
  auto end = p.finish();
  BOOST_TEST(out.error.empty(), out.error);
  BOOST_TEST(end.error.empty(), end.error);
  size_t complete = 0;
  for (const auto& piece : out.pieces) complete += piece.k == tool_piece::kind::end;
  BOOST_TEST(complete == calls, text);
}

// The grammar refuses `text` at byte `at`.
void refuses_at(const tool_request& t, tool_format f, const std::string& text, size_t at) {
  grammar_matcher m = matcher(t, f);
  BOOST_TEST(accepted(m, text) == at, text);
}

}  // namespace

BOOST_AUTO_TEST_CASE(glm4_forced_calls_follow_the_schema) {
  const tool_request named = tools_of(R"(,"tool_choice":{"type":"function","function":{"name":"add"}})");
  // GLM-5's template writes the pairs back to back; GLM-4.5's a line each.
  accepts_calls(named, tool_format::glm4,
                "<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b</arg_key><arg_value>-2</arg_value>"
                "</tool_call>", 1);
  accepts_calls(named, tool_format::glm4,
                "<tool_call>add\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n<arg_key>b</arg_key>\n"
                "<arg_value>2</arg_value>\n</tool_call><tool_call>add<arg_key>a</arg_key><arg_value>3</arg_value>"
                "<arg_key>b</arg_key><arg_value>4</arg_value></tool_call>", 2);
  const std::string typed = "<tool_call>add<arg_key>a</arg_key><arg_value>";
  refuses_at(named, tool_format::glm4, typed + "x", typed.size());                  // a is an integer
  refuses_at(named, tool_format::glm4, "<tool_call>get_weather", std::string("<tool_call>g").size() - 1);
  refuses_at(named, tool_format::glm4, "Sure: <tool_call>", 0);                     // calls only
  const std::string missing = "<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>";
  refuses_at(named, tool_format::glm4, missing, missing.find("</tool_call>") + 1);  // b is required

  const tool_request required = tools_of(R"(,"tool_choice":"required","parallel_tool_calls":false)");
  // A string's value is raw text, any characters but its closing tag; so is an enum of
  // strings (xgrammar's glm_xml style, and the parser reads it back as a string).
  accepts_calls(required, tool_format::glm4,
                "<tool_call>get_weather<arg_key>city</arg_key><arg_value>New \"York\" <b></arg_value>"
                "<arg_key>unit</arg_key><arg_value>c</arg_value></tool_call>", 1);
  const std::string unit = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value><arg_key>unit"
                           "</arg_key><arg_value>";
  refuses_at(required, tool_format::glm4, unit + "k", unit.size());
  grammar_matcher one = matcher(required, tool_format::glm4);
  const std::string call = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>";
  BOOST_TEST(accepted(one, call + "<") == call.size());  // parallel_tool_calls false: one call
}

BOOST_AUTO_TEST_CASE(hermes_forced_calls_follow_the_schema) {
  const tool_request required = tools_of(R"(,"tool_choice":"required")");
  accepts_calls(required, tool_format::hermes,
                "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 2);
  const std::string typed = "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ";
  refuses_at(required, tool_format::hermes, typed + "\"1\"", typed.size());
  refuses_at(required, tool_format::hermes, "<tool_call>\n{\"name\": \"rm\"", std::string("<tool_call>\n{\"name\": \"").size());
}

BOOST_AUTO_TEST_CASE(auto_with_a_strict_tool_constrains_only_calls) {
  const tool_request t = tools_of("");
  BOOST_TEST(!tool_call_grammar(tools_of(R"(,"tool_choice":"none")"), tool_format::glm4).has_value());
  for (const tool_format f : {tool_format::glm4, tool_format::hermes}) {
    const bool glm = f == tool_format::glm4;
    const std::string open_add = glm ? "<tool_call>add<arg_key>a</arg_key><arg_value>"
                                     : "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": ";
    const std::string add = glm ? open_add + "1</arg_value><arg_key>b</arg_key><arg_value>2</arg_value></tool_call>"
                                : open_add + "1, \"b\": 2}}\n</tool_call>";
    // Free text, a strict call, more text; the free text may end the answer by itself.
    accepts_calls(t, f, "Let me add these. " + add + " Done.", 1);
    accepts_calls(t, f, "No tool needed.", 0);
    // The strict function's arguments are typed; the other function's are free text that
    // the parser still checks.
    refuses_at(t, f, "x " + open_add + "true", 2 + open_add.size());
    const std::string weather = glm ? "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value></tool_call>"
                                    : "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call>";
    accepts_calls(t, f, weather, 1);
  }
}

BOOST_AUTO_TEST_CASE(unfollowable_parameters_are_grammar_errors) {
  tool_request t = tools_of(R"(,"tool_choice":"required")");
  t.functions[0].parameters = boost::json::parse(R"({"type":"object","properties":{"a":{"$ref":"#/nowhere"}}})").as_object();
  BOOST_CHECK_THROW(compiler().compile(*tool_call_grammar(t, tool_format::glm4)), grammar_error);
}
