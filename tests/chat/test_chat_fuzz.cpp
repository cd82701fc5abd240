#define BOOST_TEST_MODULE chat_template_fuzz
#include <boost/test/unit_test.hpp>

#include <boost/json.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "tandem/chat_template.hpp"

// Mutated real templates (truncations, byte swaps, deletions, splices of template syntax)
// must either render or throw tandem::error: never crash, hang or throw anything else.
BOOST_AUTO_TEST_CASE(mutated_templates_render_or_throw_tandem_error) {
  const char* dir = std::getenv("TANDEM_FIXTURES");
  BOOST_REQUIRE(dir);
  std::ifstream in(std::string(dir) + "/chat/cases.json", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  auto doc = boost::json::parse(ss.str());
  std::vector<std::string> seeds;
  for (const auto& [name, src] : doc.at("templates").as_object()) seeds.emplace_back(src.as_string());
  BOOST_REQUIRE(!seeds.empty());

  const std::vector<std::string> snippets = {
      "{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "{", "}", "'", "\"", "\\", "|", ".", ",",
      "for ", "if ", "endfor", "endif", " in ", "loop.", "range(99999)", "*", "**", "~", "not ", "is ", "\n",
      "\xff", std::string(1, '\0'), "|tojson", "|upper", " * 100000", "messages", "[::-1]", "ns.", " + "};
  std::vector<tandem::chat_message> msgs = {{"system", "sys"}, {"user", "hi\nthere"}, {"assistant", "ok"},
                                            {"tool", "{}", "fn", "id1"}, {"user", "bye"}};
  tandem::chat_render_options opt;
  opt.bos_token = "<s>";
  // TANDEM_FUZZ_SEED / TANDEM_FUZZ_ITERATIONS widen a local run; CI uses the defaults.
  const char* seed_env = std::getenv("TANDEM_FUZZ_SEED");
  const char* iter_env = std::getenv("TANDEM_FUZZ_ITERATIONS");
  std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 20240611);
  auto t0 = std::chrono::steady_clock::now();
  int parsed = 0, rendered = 0, errors = 0;
  const int iterations = iter_env ? std::atoi(iter_env) : 6000;
  for (int it = 0; it < iterations; ++it) {
    std::string s = seeds[rng() % seeds.size()];
    // Mostly small edits, so that many mutants still parse and exercise the interpreter.
    int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits && !s.empty(); ++k) {
      size_t pos = rng() % s.size();
      switch (rng() % 8) {
        case 0: s.resize(pos); break;
        case 1: std::swap(s[pos], s[rng() % s.size()]); break;
        case 2: s[pos] = static_cast<char>(rng() % 256); break;
        case 3: s.erase(pos, 1 + rng() % 8); break;
        case 4: std::swap(s[pos], s[std::min(pos + 1, s.size() - 1)]); break;
        default: s.insert(pos, snippets[rng() % snippets.size()]); break;
      }
    }
    try {
      tandem::chat_template tpl(s);
      ++parsed;
      opt.add_generation_prompt = (it & 1) != 0;
      tpl.render(msgs, opt);
      ++rendered;
    } catch (const tandem::error&) {
      ++errors;
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST_MESSAGE(iterations << " mutants: " << parsed << " parsed, " << rendered << " rendered, " << errors
                                << " errors in " << secs << " s");
  BOOST_TEST(rendered > 0);
  BOOST_TEST(errors > 0);
  if (!iter_env) BOOST_TEST(secs < 20.0);
}
