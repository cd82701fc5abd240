// A GLM-4-style Hugging Face tokenizer directory (hf_glm/, written by hf_tokenizers_ref.py
// with `tokenizers`) through plugins/hf_common's reader and tandem::tokenizer: the metadata
// keys, the ids `tokenizers` gave for hf_glm/cases.json, decode round trips, the "glm4" GGUF
// name giving the same pieces, and each unsupported tokenizer.json feature as an error.
#define BOOST_TEST_MODULE tokenizer_hf_glm
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "hf_tokenizer.hpp"
#include "pre_tokenizer.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"

namespace fs = std::filesystem;
namespace json = boost::json;
using tandem::tokenizer;

namespace {

fs::path fixture_dir() {
  if (const char* root = std::getenv("TANDEM_SOURCE_ROOT")) return fs::path(root) / "tests/tokenizer/hf_glm";
  return fs::path(__FILE__).parent_path() / "hf_glm";
}

tandem::hf::tokenizer_ids ids_of(const fs::path& dir) {
  const json::value cfg = tandem::hf::read_json(dir / "config.json");
  tandem::hf::tokenizer_ids ids;
  ids.vocab_size = *tandem::hf::json_token_id(cfg.as_object(), "vocab_size");
  ids.eog = tandem::hf::json_token_ids(cfg.as_object(), "eos_token_id", "config.json");
  ids.eog_source = dir / "config.json";
  return ids;
}

tandem::model_metadata read(const fs::path& dir) {
  tandem::model_metadata meta;
  tandem::hf::read_hf_tokenizer(dir, ids_of(dir), meta);
  return meta;
}

// A copy of the fixture in a fresh temp dir, tokenizer.json changed by `change`.
fs::path mutated(const std::function<void(json::object&)>& change) {
  const fs::path dir = fs::temp_directory_path() / ("tandem_hf_glm_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  for (const char* f : {"tokenizer_config.json", "config.json"}) fs::copy_file(fixture_dir() / f, dir / f);
  json::value tj = tandem::hf::read_json(fixture_dir() / "tokenizer.json");
  change(tj.as_object());
  std::ofstream(dir / "tokenizer.json") << json::serialize(tj);
  return dir;
}

}  // namespace

BOOST_AUTO_TEST_CASE(metadata_keys) {
  const auto meta = read(fixture_dir());
  BOOST_TEST(*meta.get_string("tokenizer.ggml.model") == "gpt2");
  BOOST_TEST(*meta.get_string("tokenizer.ggml.pre") == "glm4");
  const auto* pre = meta.get_strings("tokenizer.hf.pre_regex");
  BOOST_TEST_REQUIRE(pre != nullptr);
  BOOST_TEST(pre->size() == 1u);
  BOOST_TEST((*pre)[0] == tandem::hf::glm4_pattern);
  const auto ids = ids_of(fixture_dir());
  const auto* tokens = meta.get_strings("tokenizer.ggml.tokens");
  BOOST_TEST(static_cast<int64_t>(tokens->size()) == ids.vocab_size);  // padded to config.json
  BOOST_TEST(tokens->back() == "[PAD" + std::to_string(ids.vocab_size - 1) + "]");
  BOOST_TEST(meta.get_ints("tokenizer.ggml.token_type")->back() == 5);
  BOOST_TEST((*tokens)[0] == "<|endoftext|>");
  BOOST_TEST((*meta.get_ints("tokenizer.ggml.token_type"))[0] == 3);
  BOOST_TEST(*meta.get_int("tokenizer.ggml.eos_token_id") == 0);
  BOOST_TEST(*meta.get_int("tokenizer.ggml.padding_token_id") == 0);
  BOOST_TEST(!meta.get_int("tokenizer.ggml.bos_token_id").has_value());
  BOOST_TEST(*meta.get_bool("tokenizer.ggml.add_bos_token") == false);
  BOOST_TEST(meta.get_string("tokenizer.chat_template")->find("[gMASK]<sop>") == 0u);
  BOOST_TEST(*meta.get_ints("tokenizer.hf.eog_token_ids") == ids.eog);

  const auto tok = tokenizer::from_metadata(meta, "hf_glm");
  BOOST_TEST(tok.pre() == "glm4");
  for (const char* t : {"<|endoftext|>", "<|user|>", "<|observation|>"})
    BOOST_TEST(tok.is_end_of_generation(*tok.find(t)), t);
  BOOST_TEST(!tok.is_end_of_generation(*tok.find("<|assistant|>")));
  BOOST_TEST((tok.type(*tok.find("<think>")) == tandem::token_type::user_defined));
}

BOOST_AUTO_TEST_CASE(ids_match_tokenizers) {
  const auto tok = tokenizer::from_metadata(read(fixture_dir()), "hf_glm");
  // The same vocab named only by tokenizer.ggml.pre (as a GGUF would) tokenizes alike.
  auto meta = read(fixture_dir());
  tandem::model_metadata by_name;
  for (const auto& [k, v] : meta.values())
    if (k != "tokenizer.hf.pre_regex") by_name.set(k, v);
  const auto tok_named = tokenizer::from_metadata(by_name, "hf_glm (by name)");
  const json::value cases = tandem::hf::read_json(fixture_dir() / "cases.json");
  size_t n = 0, tokens = 0;
  for (const auto& c : cases.at("cases").as_array()) {
    const std::string text(c.at("text").as_string());
    std::vector<int32_t> want;
    for (const auto& id : c.at("ids").as_array()) want.push_back(static_cast<int32_t>(id.as_int64()));
    const auto got = tok.encode(text);
    BOOST_TEST((got == want), "'" << text << "'");
    BOOST_TEST((tok_named.encode(text) == want), "by name: '" << text << "'");
    BOOST_TEST(tok.decode(got) == text);
    ++n;
    tokens += want.size();
  }
  BOOST_TEST_MESSAGE(n << " strings, " << tokens << " tokens");
  BOOST_TEST(n >= 400u);
}

BOOST_AUTO_TEST_CASE(oniguruma_escapes) {
  using tandem::detail::pre_tokenizer;
  const std::string ws = "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
                         "\\x{202F}\\x{205F}\\x{3000}";
  BOOST_TEST(pre_tokenizer::to_pcre2("\\s+(?!\\S)") == "[" + ws + "]+(?![^" + ws + "])");
  BOOST_TEST(pre_tokenizer::to_pcre2("[^\\s\\p{L}]") == "[^" + ws + "\\p{L}]");
  BOOST_TEST(pre_tokenizer::to_pcre2("\\\\s[\\]\\s]") == "\\\\s[\\]" + ws + "]");
  BOOST_TEST(pre_tokenizer::to_pcre2("[]s]\\w") == "[]s][\\p{L}\\p{M}\\p{Nd}\\p{Pc}]");
  BOOST_TEST(pre_tokenizer::to_pcre2("\\h[[:alpha:]\\s]") == "[0-9A-Fa-f][[:alpha:]" + ws + "]");
  BOOST_TEST(pre_tokenizer::to_pcre2("[\\u3040-\\u309F]\\u12") == "[\\x{3040}-\\x{309F}]\\u12");
  // Chained steps: each splits the pieces of the one before; no patterns = one piece.
  const auto p = pre_tokenizer::from_hf_patterns({"\\p{N}{1,3}", "[a-z]+"});
  std::vector<std::string_view> pieces;
  p.split("ab12345cd e", pieces);
  BOOST_TEST((std::vector<std::string>(pieces.begin(), pieces.end()) ==
              std::vector<std::string>{"ab", "123", "45", "cd", " ", "e"}));
  pieces.clear();
  pre_tokenizer::from_hf_patterns({}).split("a b", pieces);
  BOOST_TEST(pieces.size() == 1u);
  BOOST_CHECK_THROW(pre_tokenizer::from_hf_patterns({"(unclosed"}), tandem::error);
}

BOOST_AUTO_TEST_CASE(bad_pattern_names_the_key) {
  auto meta = read(fixture_dir());
  meta.set("tokenizer.hf.pre_regex", std::vector<std::string>{"(unclosed"});
  BOOST_CHECK_EXCEPTION(tokenizer::from_metadata(meta, "dir/tokenizer.json"), tandem::model_error, [](const auto& e) {
    const std::string w = e.what();
    return w.find("dir/tokenizer.json") != std::string::npos && w.find("tokenizer.hf.pre_regex") != std::string::npos;
  });
  meta = read(fixture_dir());
  meta.set("tokenizer.hf.eog_token_ids", std::vector<int64_t>{0, 100000});
  BOOST_CHECK_EXCEPTION(tokenizer::from_metadata(meta, "m"), tandem::model_error, [](const auto& e) {
    return std::string(e.what()).find("tokenizer.hf.eog_token_ids: entry 1 is 100000") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(unsupported_features_are_errors) {
  auto pre = [](json::value p) { return [p](json::object& j) { j["pre_tokenizer"] = p; }; };
  auto model = [](const char* k, json::value v) { return [k, v](json::object& j) { j["model"].as_object()[k] = v; }; };
  const json::value glm_split = {{"type", "Split"}, {"pattern", {{"Regex", tandem::hf::glm4_pattern}}},
                                 {"behavior", "Isolated"}, {"invert", false}};
  const json::value bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
  auto with = [](json::value v, const char* k, json::value x) { v.as_object()[k] = x; return v; };
  const struct {
    const char* what;
    std::function<void(json::object&)> change;
    std::string expect;
  } cases[] = {
      {"unigram", [](json::object& j) { j["model"] = {{"type", "Unigram"}, {"vocab", json::array{}}}; }, "model.type is not \"BPE\""},
      {"wordpiece", [](json::object& j) { j["model"].as_object()["type"] = "WordPiece"; }, "model.type is not \"BPE\""},
      {"nfc", [](json::object& j) { j["normalizer"] = {{"type", "NFC"}}; }, "normalizer {\"type\":\"NFC\"} is not supported"},
      {"removed", pre(json::object{{"type", "Sequence"}, {"pretokenizers", {with(glm_split, "behavior", "Removed"), bl}}}), "behavior other than Isolated"},
      {"invert", pre(json::object{{"type", "Sequence"}, {"pretokenizers", {with(glm_split, "invert", true), bl}}}), "invert true"},
      {"metaspace", pre(json::object{{"type", "Metaspace"}, {"replacement", "_"}}), "is not supported"},
      {"no byte level", pre(json::object{{"type", "Sequence"}, {"pretokenizers", {glm_split}}}), "no ByteLevel step"},
      {"after byte level", pre(json::object{{"type", "Sequence"}, {"pretokenizers", {bl, glm_split}}}), "comes after ByteLevel"},
      {"prefix space", pre(with(bl, "add_prefix_space", true)), "add_prefix_space true"},
      {"ignore merges", model("ignore_merges", true), "ignore_merges"},
      {"byte fallback", model("byte_fallback", true), "byte_fallback"},
      {"dropout", model("dropout", 0.1), "dropout"},
      {"prefix", model("continuing_subword_prefix", "##"), "continuing_subword_prefix"},
      {"lstrip", [](json::object& j) { j["added_tokens"].as_array()[0].as_object()["rstrip"] = true; }, "rstrip true"},
      {"decoder", [](json::object& j) { j["decoder"] = {{"type", "Metaspace"}}; }, "decoder"},
  };
  for (const auto& c : cases) {
    const fs::path dir = mutated(c.change);
    std::string err = "(no error)";
    try {
      read(dir);
    } catch (const tandem::model_error& e) {
      err = e.what();
    }
    BOOST_TEST_INFO(c.what);
    BOOST_TEST((err.find(c.expect) != std::string::npos && err.find("tokenizer.json") != std::string::npos),
               c.what << ": got '" << err << "'");
    fs::remove_all(dir);
  }
}

BOOST_AUTO_TEST_CASE(eog_outside_the_vocab) {
  tandem::model_metadata meta;
  auto ids = ids_of(fixture_dir());
  ids.eog.push_back(ids.vocab_size);
  BOOST_CHECK_EXCEPTION(tandem::hf::read_hf_tokenizer(fixture_dir(), ids, meta), tandem::model_error,
                        [](const auto& e) { return std::string(e.what()).find("config.json: eos_token_id") != std::string::npos; });
}
