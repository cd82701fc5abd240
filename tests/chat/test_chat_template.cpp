#define BOOST_TEST_MODULE chat_template
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <cstdlib>
#include <fstream>
#include <ctime>
#include <sstream>
#include <thread>
#include <vector>

#include "tandem/chat_template.hpp"

namespace json = boost::json;
using tandem::chat_message;
using tandem::chat_render_options;
using tandem::chat_template;
using tandem::chat_template_error;

namespace {

json::value load_cases() {
  const char* dir = std::getenv("TANDEM_FIXTURES");
  BOOST_REQUIRE_MESSAGE(dir, "TANDEM_FIXTURES is not set");
  std::ifstream in(std::string(dir) + "/chat/cases.json", std::ios::binary);
  BOOST_REQUIRE_MESSAGE(in, "cannot open chat/cases.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

std::string str(const json::object& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? std::string() : std::string(it->value().as_string());
}

std::string render(const std::string& src, std::vector<chat_message> msgs = {{"user", "hi"}},
                   chat_render_options opt = {}) {
  return chat_template(src).render(msgs, opt);
}

// Runs `fn`, expecting a chat_template_error whose what() contains `needle`.
template <typename F>
chat_template_error expect_error(F fn, const std::string& needle) {
  try {
    fn();
  } catch (const chat_template_error& e) {
    BOOST_TEST(std::string(e.what()).find(needle) != std::string::npos, "'" << e.what() << "' lacks '" << needle << "'");
    return e;
  }
  BOOST_FAIL("no error; expected one containing '" << needle << "'");
  throw std::logic_error("unreachable");
}

}  // namespace

BOOST_AUTO_TEST_CASE(fixture_cases_render_byte_identically) {
  json::value doc = load_cases();
  const auto& templates = doc.at("templates").as_object();
  const auto& cases = doc.at("cases").as_array();
  BOOST_TEST(cases.size() >= 60u);
  std::map<std::string, chat_template> compiled;
  for (const auto& [name, src] : templates) compiled.emplace(std::string(name), chat_template(std::string(src.as_string())));
  size_t rendered = 0, raised = 0;
  for (const auto& cv : cases) {
    const auto& c = cv.as_object();
    std::vector<chat_message> msgs;
    for (const auto& mv : c.at("messages").as_array()) {
      const auto& m = mv.as_object();
      msgs.push_back({str(m, "role"), str(m, "content"), str(m, "name"), str(m, "tool_call_id")});
    }
    chat_render_options opt;
    opt.add_generation_prompt = c.at("add_generation_prompt").as_bool();
    opt.bos_token = str(c, "bos_token");
    opt.eos_token = str(c, "eos_token");
    for (const auto& [k, v] : c.at("extra").as_object()) opt.extra[std::string(k)] = std::string(v.as_string());
    std::string label = str(c, "template") + "/" + str(c, "conversation") + (opt.add_generation_prompt ? "/gen" : "/nogen");
    const chat_template& tpl = compiled.at(str(c, "template"));
    if (c.contains("expected")) {
      std::string out;
      try {
        out = tpl.render(msgs, opt);
      } catch (const std::exception& e) {
        BOOST_ERROR(label << ": unexpected error: " << e.what());
        continue;
      }
      BOOST_TEST(out == str(c, "expected"),
                 label << ": rendering differs\n got:      " << json::serialize(json::string(out))
                       << "\n expected: " << json::serialize(json::string(str(c, "expected"))));
      ++rendered;
    } else {
      std::string want = str(c, "error");
      try {
        tpl.render(msgs, opt);
        BOOST_ERROR(label << ": expected error '" << want << "'");
      } catch (const chat_template_error& e) {
        BOOST_TEST(e.message().find(want) != std::string::npos, label << ": '" << e.message() << "' lacks '" << want << "'");
        ++raised;
      }
    }
  }
  BOOST_TEST_MESSAGE(rendered << " renderings and " << raised << " raising cases checked");
  BOOST_TEST(raised > 0u);
}

BOOST_AUTO_TEST_CASE(raise_exception_message_is_verbatim) {
  auto e = expect_error([] { render("line1\n  {{ raise_exception('Roles must alternate!') }}"); }, "Roles must alternate!");
  BOOST_TEST(e.message() == "Roles must alternate!");
  BOOST_TEST(e.raised_by_template());
  BOOST_TEST(e.line() == 2);
  BOOST_TEST(e.column() == 6);
}

BOOST_AUTO_TEST_CASE(syntax_errors_report_line_and_column) {
  auto e = expect_error([] { chat_template("ok\n{% if x %}\n  {{ 1 + }}\n{% endif %}"); }, "chat template:3:10:");
  BOOST_TEST(e.line() == 3);
  BOOST_TEST(e.column() == 10);
  expect_error([] { chat_template("{% for m in messages %}{{ m }}"); }, "chat template:1:31: error: unexpected end of template, expected 'endfor' or 'else'");
  expect_error([] { chat_template("a\nb {% endif %}"); }, "chat template:2:6: error: unknown tag 'endif'");
  expect_error([] { chat_template("{{ 'abc }}"); }, "chat template:1:4: error: unterminated string literal");
  expect_error([] { chat_template("x\n\n   {{ a ! b }}"); }, "chat template:3:9: error: unexpected char '!'");
  expect_error([] { chat_template("{# never closed"); }, "chat template:1:1: error: missing end of comment tag");
  expect_error([] { chat_template("{{ (1 + 2 }}"); }, "unexpected '}'");
  expect_error([] { chat_template("{% break %}"); }, "'break' outside of a loop");
}

BOOST_AUTO_TEST_CASE(unknown_filter_and_test_are_clear_errors) {
  auto e = expect_error([] { chat_template("\n{{ messages | frobnicate }}"); }, "no filter named 'frobnicate'");
  BOOST_TEST(e.line() == 2);
  BOOST_TEST(e.column() == 15);
  expect_error([] { chat_template("{% if x is shiny %}{% endif %}"); }, "no test named 'shiny'");
  // jinja2 checks filter names at compile time, even in branches that never run.
  expect_error([] { chat_template("{% if false %}{{ x | nope }}{% endif %}"); }, "no filter named 'nope'");
}

BOOST_AUTO_TEST_CASE(undefined_follows_jinja2_default_rules) {
  BOOST_TEST(render("[{{ missing }}][{{ messages[0].nothing }}][{{ missing|length }}]") == "[][][0]");
  BOOST_TEST(render("{{ missing is defined }} {{ missing|default('d') }} {% for x in missing %}x{% endfor %}") == "False d ");
  expect_error([] { render("{{ missing.attr }}"); }, "'missing' is undefined");
  expect_error([] { render("{{ messages[0].nothing + 'x' }}"); }, "'dict object' has no attribute 'nothing'");
  expect_error([] { render("{{ messages[3]['role'] }}"); }, "list object has no element 3");
  expect_error([] { render("{{ missing(1) }}"); }, "'missing' is undefined");
}

BOOST_AUTO_TEST_CASE(sandbox_refuses_mutation_and_huge_ranges) {
  expect_error([] { render("{% set l = [] %}{{ l.append(1) }}"); }, "access to attribute 'append' of 'list' object is unsafe.");
  expect_error([] { render("{{ range(200000)|length }}"); }, "Range too big");
  BOOST_TEST(render("{% set ns = namespace(n=0) %}{% for i in range(5) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}") == "10");
  expect_error([] { render("{% set d = {} %}{% set d.x = 1 %}"); }, "cannot assign attribute on non-namespace object");
}

BOOST_AUTO_TEST_CASE(deep_nesting_is_an_error_not_a_crash) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  expect_error([&] { chat_template t(parens); }, "nested too deeply");
  std::string chain = "{{ 1";
  for (int i = 0; i < 50000; ++i) chain += " + 1";
  expect_error([&] { chat_template t(chain + " }}"); }, "nested too deeply");
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 50000; ++i) filters += "|upper";
  expect_error([&] { chat_template t(filters + " }}"); }, "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  expect_error([&] { chat_template t(ifs); }, "nested too deeply");
  std::string nots = "{{ " ;
  for (int i = 0; i < 100000; ++i) nots += "not ";
  expect_error([&] { chat_template t(nots + "1 }}"); }, "nested too deeply");
}

BOOST_AUTO_TEST_CASE(huge_loops_and_recursion_are_bounded) {
  expect_error([] {
    render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  }, "step limit");
  expect_error([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); }, "macro calls nested deeper");
  expect_error([] { render("{% set s = 'xxxxxxxxxxxxxxxx' * 100000000 %}"); }, "too large");
  expect_error([] { render("{{ 10 ** 100 }}"); }, "out of range");
  // Quadratic accumulation is metered by the work it copies, not just by statements.
  expect_error([] {
    render("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}");
  }, "step limit");
  expect_error([] { render("{{ (['x' * 60000000] * 100) | join }}"); }, "larger than");
  expect_error([] { render("{{ ('x' * 60000000).replace('', 'yy') }}"); }, "larger than");
  expect_error([] { render("{{ [0] * 100000000 }}"); }, "too large");
  expect_error([] { render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"); }, "nested too deeply");
  // Within the limits, a long conversation renders.
  std::vector<chat_message> many(5000, chat_message{"user", std::string(200, 'a')});
  std::string out = render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}", many);
  BOOST_TEST(out.size() == 5000u * (6 + 200));
}

BOOST_AUTO_TEST_CASE(whitespace_control_matches_hf_settings) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  BOOST_TEST(render("a\n  {% if true %}\n  b\n  {% endif %}\nc") == "a\n  b\nc");
  BOOST_TEST(render("a  {%- if true -%}  b  {%- endif %}") == "ab");
  BOOST_TEST(render("  {%+ if true %}x{% endif %}") == "  x");
  BOOST_TEST(render("x {{- ' y ' -}} z") == "x y z");
  BOOST_TEST(render("{# c #}\nkeep\n") == "keep");  // and keep_trailing_newline=False
  BOOST_TEST(render("a\r\nb") == "a\nb");
}

BOOST_AUTO_TEST_CASE(values_print_like_python) {
  BOOST_TEST(render("{{ [1, 'a', none, 1.5, true] }} {{ {'k': 'v'} }} {{ 1e20 }} {{ 1/3 }} {{ 0.0001 }} {{ 1e-5 }}") ==
             "[1, 'a', None, 1.5, True] {'k': 'v'} 1e+20 0.3333333333333333 0.0001 1e-05");
  BOOST_TEST(render("{{ \"it's\" }} {{ [\"it's\"] }} {{ 'tab\\there' }} {{ '\\u00e9' }}") == "it's [\"it's\"] tab\there é");
  BOOST_TEST(render("{{ {'a': [1, 2.0, none], 'b': 'é\"\\n'} | tojson }}") == "{\"a\": [1, 2.0, null], \"b\": \"é\\\"\\n\"}");
  BOOST_TEST(render("{{ 'héllo'|length }} {{ 'héllo'[1] }} {{ 'héllo'[::-1] }}") == "5 é olléh");
  BOOST_TEST(render("{{ 'héllo wörld 1st'|title }} {{ 'ÉCOLE'|lower }} {{ 'straße'.upper() }} {{ 'éA'|capitalize }}") ==
             "Héllo Wörld 1St école STRAßE Éa");
}

BOOST_AUTO_TEST_CASE(hf_extensions_and_variables) {
  // {% generation %} (HF's assistant-mask marker) renders its body unchanged.
  BOOST_TEST(render("a{% generation %}{{ messages[0].content }}{% endgeneration %}b") == "ahib");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string year = render("{{ strftime_now('%Y') }}");
  BOOST_TEST((year == std::to_string(1900 + tm.tm_year) || year == std::to_string(1901 + tm.tm_year)));
  chat_render_options opt;
  opt.bos_token = "<s>";
  opt.eos_token = "</s>";
  opt.add_generation_prompt = false;
  opt.extra["date_string"] = "26 Jul 2024";
  opt.extra["messages"] = "ignored: the conversation wins";
  BOOST_TEST(render("{{ bos_token }}{{ date_string }}{{ eos_token }}{{ add_generation_prompt }}{{ tools }}{{ messages|length }}",
                    {{"user", "x"}}, opt) == "<s>26 Jul 2024</s>FalseNone1");
  // name and tool_call_id are keys only when set.
  BOOST_TEST(render("{% for m in messages %}{{ m|tojson }}{% endfor %}",
                    {{"tool", "r", "fn", "id9"}, {"user", "u"}}) ==
             "{\"role\": \"tool\", \"content\": \"r\", \"name\": \"fn\", \"tool_call_id\": \"id9\"}"
             "{\"role\": \"user\", \"content\": \"u\"}");
}

BOOST_AUTO_TEST_CASE(one_template_renders_concurrently) {
  chat_template tpl(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}"
      "{{ loop.index }}:{{ m.content }};{% endfor %}{{ ns.n }}");
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<chat_message> msgs{{"user", std::string(static_cast<size_t>(t + 1), 'x')}, {"assistant", "yy"}};
      std::string want = "1:" + msgs[0].content + ";2:yy;" + std::to_string(t + 3);
      for (int i = 0; i < 500; ++i) ok[static_cast<size_t>(t)] += tpl.render(msgs, {}) == want;
    });
  }
  for (auto& th : threads) th.join();
  for (int n : ok) BOOST_TEST(n == 500);
  chat_template copy = tpl;  // copies share the parsed program
  BOOST_TEST(copy.source() == tpl.source());
}
