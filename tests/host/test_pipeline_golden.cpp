#define BOOST_TEST_MODULE pipeline_golden
#include <boost/test/unit_test.hpp>

// Golden tests of pipeline validation. Every tests/pipelines/bad/NAME.yaml has NAME.expected
// holding the exact diagnostics, one per line; header comments `# set: k=v` and
// `# env: NAME=value` give the command-line overrides and environment of the run. Paths are
// relative to the source root; the test plugins' directory prints as <test-plugins>.
// TANDEM_REGEN_GOLDEN=1 rewrites the .expected files (review the diff before committing).
// Every file in tests/pipelines/good/ (test plugins) and pipelines/ (real plugins) must
// validate without errors.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "line_diff.hpp"
#include "tandem/pipeline.hpp"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

const fs::path plugins_dir = TANDEM_TEST_PLUGIN_DIR;

struct case_inputs {
  std::vector<std::string> overrides;
  std::map<std::string, std::string> env;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

case_inputs read_header(const fs::path& yaml) {
  case_inputs in;
  std::istringstream lines(read_file(yaml));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# set: ", 0) == 0) in.overrides.push_back(line.substr(7));
    if (line.rfind("# env: ", 0) == 0) {
      std::string kv = line.substr(7);
      size_t eq = kv.find('=');
      in.env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
  }
  return in;
}

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

// Validates `rel` (relative to the source root, the working directory) as the CLI would.
std::string validate(const fs::path& rel) {
  plugin_host host({plugins_dir});
  case_inputs in = read_header(rel);
  auto env = [&](const std::string& k) -> std::optional<std::string> {
    auto it = in.env.find(k);
    return it == in.env.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
  pipeline_result r = load_pipeline(rel, host, in.overrides, env);
  std::string out;
  for (const diagnostic& d : r.errors) out += d.str() + "\n";
  for (const diagnostic& d : r.warnings) out += d.str() + "\n";  // ignored settings
  replace_all(out, plugins_dir.string(), "<test-plugins>");
  BOOST_TEST(r.spec.has_value() == r.errors.empty());
  return out;
}

std::vector<fs::path> files_in(const fs::path& dir, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(fs::relative(e.path(), fs::current_path()));
  std::sort(out.begin(), out.end());
  return out;
}

struct at_source_root {
  at_source_root() {
    const char* root = std::getenv("TANDEM_SOURCE_ROOT");
    BOOST_REQUIRE_MESSAGE(root, "TANDEM_SOURCE_ROOT is not set (run through meson test)");
    fs::current_path(root);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(golden, at_source_root)

BOOST_AUTO_TEST_CASE(bad_pipelines_give_exactly_the_expected_diagnostics) {
  const bool regen = std::getenv("TANDEM_REGEN_GOLDEN") != nullptr;
  std::vector<fs::path> cases = files_in("tests/pipelines/bad", ".yaml");
  BOOST_TEST(cases.size() >= 15u);
  for (const fs::path& yaml : cases) {
    BOOST_TEST_CONTEXT(yaml.string()) {
      fs::path expected_file = fs::path(yaml).replace_extension(".expected");
      std::string actual = validate(yaml);
      BOOST_TEST(!actual.empty(), "a bad pipeline must produce diagnostics");
      if (regen) {
        std::ofstream(expected_file, std::ios::binary) << actual;
        BOOST_TEST_MESSAGE("regenerated " << expected_file.string());
        continue;
      }
      BOOST_REQUIRE_MESSAGE(fs::exists(expected_file), expected_file.string() << " is missing");
      std::string expected = read_file(expected_file);
      BOOST_TEST(actual == expected, "diagnostics differ from " << expected_file.string() << ":\n"
                                                                << line_diff(expected, actual));
    }
  }
}

BOOST_AUTO_TEST_CASE(every_expected_file_has_its_pipeline) {
  for (const fs::path& e : files_in("tests/pipelines/bad", ".expected"))
    BOOST_TEST(fs::exists(fs::path(e).replace_extension(".yaml")), e.string() << " is orphaned");
}

BOOST_AUTO_TEST_CASE(good_pipelines_validate_cleanly) {
  std::vector<fs::path> cases = files_in("tests/pipelines/good", ".yaml");
  BOOST_TEST(cases.size() >= 3u);
  for (const fs::path& yaml : cases) {
    BOOST_TEST_CONTEXT(yaml.string()) { BOOST_TEST(validate(yaml) == ""); }
  }
}

// The pipelines shipped in pipelines/ use the real plugins of the build tree
// ($TANDEM_PLUGIN_PATH and the build tree's plugins/ folder).
BOOST_AUTO_TEST_CASE(shipped_pipelines_validate_cleanly) {
  std::vector<fs::path> cases = files_in("pipelines", ".yaml");
  BOOST_TEST(cases.size() >= 1u);
  for (const fs::path& yaml : cases) {
    BOOST_TEST_CONTEXT(yaml.string()) {
      plugin_host host(plugin_host::default_search_path());
      pipeline_result r = load_pipeline(yaml, host, {}, [](const std::string&) {
        return std::optional<std::string>();
      });
      for (const diagnostic& d : r.errors) BOOST_ERROR(d.str());
      BOOST_TEST(r.spec.has_value());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_diff_shows_what_changed) {
  std::string d = line_diff("a\nb\nc\n", "a\nx\nc\n");
  BOOST_TEST(d == "  a\n- b\n+ x\n  c\n");
}

BOOST_AUTO_TEST_SUITE_END()
