// Tools and tool calls in the Jinja context: the tiny GLM-5-family fixture's template renders
// the request's tools (tojson, Python separators) and an assistant turn's calls in its own
// <arg_key>/<arg_value> format, which the glm4 parser reads back.
#define BOOST_TEST_MODULE http_chat_tools
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "tandem/chat_template.hpp"

namespace {

std::string glm_template() {
  const char* fixtures = std::getenv("TANDEM_FIXTURES");
  BOOST_REQUIRE(fixtures);
  std::ifstream in(std::string(fixtures) + "/glm_moe_dsa/tiny/tokenizer_config.json");
  const std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return std::string(boost::json::parse(cfg).at("chat_template").as_string());
}

}  // namespace

BOOST_AUTO_TEST_CASE(glm_template_renders_tools_and_calls) {
  const tandem::chat_template tpl(glm_template());
  std::vector<tandem::chat_message> msgs{{"user", "weather?"}, {"assistant", ""}, {"tool", "sunny"}};
  msgs[1].tool_calls_json = R"([{"id":"c1","type":"function","function":{"name":"get_weather","arguments":{"city":"Paris","days":2}}}])";
  msgs[2].tool_call_id = "c1";
  tandem::chat_render_options opt;
  opt.tools_json = R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  const std::string out = tpl.render(msgs, opt);
  BOOST_TEST(out.find(R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}})") !=
                 std::string::npos, out);
  BOOST_TEST(out.find("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                      "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>") != std::string::npos, out);
  BOOST_TEST(out.find("<|observation|><tool_response>sunny</tool_response>") != std::string::npos, out);
  // Without tools the template's tools block is absent.
  tandem::chat_render_options none;
  BOOST_TEST(tpl.render(msgs, none).find("# Tools") == std::string::npos);
  tandem::chat_render_options broken;
  broken.tools_json = "[{";
  BOOST_CHECK_THROW(tpl.render(msgs, broken), tandem::chat_template_error);
}
