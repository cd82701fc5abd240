// weights.safetensors on directories written here (tests/exl3/st_writer.hpp): a sharded
// model read back (names, dtypes, shapes, bytes, metadata keys), one broken directory per
// error class, the plugin through plugin_host, and tests/fixtures/glm_moe_dsa/tiny when the
// fixture exists.
#define BOOST_TEST_MODULE safetensors_plugin
#include <boost/test/unit_test.hpp>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <functional>

#include <boost/json.hpp>

#include "../exl3/st_writer.hpp"
#include "hf_model.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_host.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem/weight_format.hpp"

using namespace exl3_test;
using tandem::st_plugin::hf_model;
namespace fs = std::filesystem;

namespace {

const std::string tokenizer_json =
    R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"c":2,"ab":3,"abc":4,"\u0120":5},"merges":["a b",["ab","c"]]},)"
    R"("normalizer":null,"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)"
    R"("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},)"
    R"("behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]},)"
    R"("decoder":{"type":"ByteLevel"},)"
    R"("added_tokens":[{"id":6,"content":"<|endoftext|>","special":true},{"id":7,"content":"<|user|>","special":true},)"
    R"({"id":8,"content":"<|observation|>","special":true}]})";

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 31);
  return b;
}

// A three-shard directory with an index; `tensors[i]` go to shard i.
struct model_dir {
  std::string config = R"({"model_type":"glm_moe_dsa","vocab_size":12,"hidden_size":4,"eos_token_id":6})";
  std::string generation_config = R"({"eos_token_id":[6,7,8],"pad_token_id":6})";
  std::string tokenizer = tokenizer_json;
  std::string tokenizer_config = R"({"eos_token":"<|endoftext|>","chat_template":"{{ messages }}"})";
  std::vector<std::vector<st_tensor>> shards = {
      {{"model.embed_tokens.weight", "BF16", {12, 4}, pattern(96, 1)},
       {"model.layers.0.self_attn.q_a_proj.weight", "F16", {3, 4}, pattern(24, 2)}},
      {{"model.layers.0.mlp.gate.e_score_correction_bias", "F32", {5}, pattern(20, 3)},
       {"model.layers.0.input_layernorm.weight", "BF16", {4}, pattern(8, 4)},
       {"model.layers.0.idx", "I64", {2}, pattern(16, 5)}},
      {{"lm_head.weight", "BF16", {12, 4}, pattern(96, 6)}, {"scalar", "I32", {}, pattern(4, 7)},
       {"mask", "U8", {3}, pattern(3, 8)}},
  };
  bool write_index = true;
  std::function<void(const fs::path&)> after;  // last changes to the written directory

  std::string shard_name(size_t i) const {
    return "model-0000" + std::to_string(i + 1) + "-of-0000" + std::to_string(shards.size()) + ".safetensors";
  }
  fs::path write(const std::string& tag) const {
    const auto dir = temp_dir("st_" + tag);
    write_text(dir / "config.json", config);
    if (!generation_config.empty()) write_text(dir / "generation_config.json", generation_config);
    write_text(dir / "tokenizer.json", tokenizer);
    write_text(dir / "tokenizer_config.json", tokenizer_config);
    std::string index = R"({"metadata":{"total_size":0},"weight_map":{)";
    bool first = true;
    for (size_t i = 0; i < shards.size(); ++i) {
      const auto b = st_bytes(shards[i]);
      write_file(dir / (write_index ? shard_name(i) : "model.safetensors"), b.data(), b.size());
      for (const auto& t : shards[i]) {
        index += (first ? "\"" : ",\"") + t.name + "\":\"" + shard_name(i) + "\"";
        first = false;
      }
    }
    if (write_index) write_text(dir / "model.safetensors.index.json", index + "}}");
    if (after) after(dir);
    return dir;
  }
};

std::string open_error(const model_dir& m) {
  const auto dir = m.write("bad");
  std::string err = "(no error)";
  try {
    hf_model model(dir);
  } catch (const tandem::model_error& e) {
    err = e.what();
  }
  fs::remove_all(dir);
  return err;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sharded_directory_reads_back) {
  model_dir m;
  const auto dir = m.write("good");
  hf_model model(dir);
  const auto& meta = model.meta();
  BOOST_TEST(*meta.get_string("general.architecture") == "glm_moe_dsa");
  BOOST_TEST(*meta.get_string("general.name") == dir.filename().string());
  BOOST_TEST(*meta.get_string("hf.config_json") == m.config);
  BOOST_TEST(*meta.get_string("hf.config_path") == (dir / "config.json").string());
  BOOST_TEST(fs::path(*meta.get_string("hf.config_path")).is_absolute());
  BOOST_TEST(*meta.get_string("tokenizer.ggml.model") == "gpt2");
  BOOST_TEST(*meta.get_string("tokenizer.ggml.pre") == "glm4");
  BOOST_TEST(meta.get_strings("tokenizer.hf.pre_regex")->size() == 1u);
  BOOST_TEST(meta.get_strings("tokenizer.ggml.tokens")->size() == 12u);  // padded to vocab_size
  BOOST_TEST(*meta.get_int("tokenizer.ggml.eos_token_id") == 6);
  BOOST_TEST(*meta.get_int("tokenizer.ggml.padding_token_id") == 6);  // generation_config.json
  BOOST_TEST((*meta.get_ints("tokenizer.hf.eog_token_ids") == std::vector<int64_t>{6, 7, 8}));
  BOOST_TEST(*meta.get_string("tokenizer.chat_template") == "{{ messages }}");

  size_t n = 0;
  for (size_t s = 0; s < m.shards.size(); ++s) {
    for (const auto& want : m.shards[s]) {
      const tandem::tensor_info& t = model.tensors()[n++];  // shard by shard, header order
      BOOST_TEST(t.name == want.name);
      BOOST_TEST(model.find(want.name) == &t);
      BOOST_TEST(t.shape == want.shape);
      BOOST_TEST(t.nbytes == want.bytes.size());
      BOOST_TEST(std::memcmp(t.data, want.bytes.data(), t.nbytes) == 0, want.name);
      const std::string dt(tandem::name(t.type));
      std::string lower = want.dtype;
      for (auto& c : lower) c = static_cast<char>(std::tolower(c));
      BOOST_TEST(dt == lower);
    }
  }
  BOOST_TEST(model.tensors().size() == n);
  BOOST_TEST(model.find("nope") == nullptr);

  const auto tok = tandem::tokenizer::from_metadata(meta, dir.string());
  BOOST_TEST(tok.is_end_of_generation(8));
  BOOST_TEST((tok.encode("abc<|user|>") == std::vector<int32_t>{4, 7}));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(single_file_and_config_fallbacks) {
  model_dir m;
  m.shards = {{{"w", "F32", {2}, pattern(8, 9)}}};
  m.write_index = false;
  m.generation_config.clear();  // eos ids from config.json
  m.tokenizer_config = "{}";
  const auto dir = m.write("single");
  hf_model model(fs::path(dir.string() + "/"));  // a trailing slash still names the directory
  BOOST_TEST(model.tensors().size() == 1u);
  BOOST_TEST(*model.meta().get_string("general.name") == dir.filename().string());
  BOOST_TEST(*model.meta().get_int("tokenizer.ggml.eos_token_id") == 6);
  BOOST_TEST((*model.meta().get_ints("tokenizer.hf.eog_token_ids") == std::vector<int64_t>{6}));
  fs::remove_all(dir);
}

// One broken directory per error class; the message names the file (and tensor) at fault.
BOOST_AUTO_TEST_CASE(malformed_directories) {
  const struct {
    const char* what;
    std::function<void(model_dir&)> breakit;
    std::vector<std::string> expect;
  } cases[] = {
      {"missing config.json", [](model_dir& m) { m.after = [](const fs::path& d) { fs::remove(d / "config.json"); }; },
       {"config.json: is missing"}},
      {"bad config JSON", [](model_dir& m) { m.config = "{\"model_type\":"; }, {"config.json: is not valid JSON"}},
      {"no model_type", [](model_dir& m) { m.config = R"({"vocab_size":12})"; }, {"config.json: has no model_type"}},
      {"missing tokenizer.json", [](model_dir& m) { m.after = [](const fs::path& d) { fs::remove(d / "tokenizer.json"); }; },
       {"tokenizer.json: is missing"}},
      {"bad generation_config", [](model_dir& m) { m.generation_config = R"({"eos_token_id":"x"})"; },
       {"generation_config.json: eos_token_id is \"x\""}},
      {"unigram tokenizer", [](model_dir& m) { m.tokenizer.replace(m.tokenizer.find("\"BPE\""), 5, "\"Unigram\""); },
       {"tokenizer.json: model.type is not \"BPE\""}},
      {"missing shard",
       [](model_dir& m) { m.after = [](const fs::path& d) { fs::remove(d / "model-00002-of-00003.safetensors"); }; },
       {"model.safetensors.index.json: names shard 'model-00002-of-00003.safetensors', which is not a file"}},
      {"truncated shard",
       [](model_dir& m) {
         m.after = [](const fs::path& d) { fs::resize_file(d / "model-00003-of-00003.safetensors", fs::file_size(d / "model-00003-of-00003.safetensors") - 5); };
       },
       {"model-00003-of-00003.safetensors: tensor '", "are not inside the"}},
      {"truncated header",
       [](model_dir& m) { m.after = [](const fs::path& d) { fs::resize_file(d / "model-00001-of-00003.safetensors", 20); }; },
       {"model-00001-of-00003.safetensors: header length"}},
      {"header JSON",
       [](model_dir& m) {
         m.after = [](const fs::path& d) {
           auto b = st_bytes({{"x", "F32", {1}, pattern(4, 0)}});
           b[9] = std::byte{'!'};
           write_file(d / "model-00001-of-00003.safetensors", b.data(), b.size());
         };
       },
       {"model-00001-of-00003.safetensors: header is not valid JSON"}},
      {"offsets out of range",
       [](model_dir& m) { m.shards[1][0].shape = {50}; },  // 200 bytes claimed, 20 there
       {"model-00002-of-00003.safetensors: tensor 'model.layers.0.mlp.gate.e_score_correction_bias'"}},
      {"unsupported dtype", [](model_dir& m) { m.shards[0][1].dtype = "F8_E4M3"; m.shards[0][1].bytes.resize(12); },
       {"model-00001-of-00003.safetensors: tensor 'model.layers.0.self_attn.q_a_proj.weight' has dtype F8_E4M3"}},
      {"F64", [](model_dir& m) { m.shards[2][1] = {"scalar", "F64", {}, pattern(8, 1)}; }, {"has dtype F64"}},
      {"duplicate across shards", [](model_dir& m) { m.shards[2].push_back({"model.layers.0.input_layernorm.weight", "BF16", {4}, pattern(8, 4)}); },
       {"model-00003-of-00003.safetensors: tensor 'model.layers.0.input_layernorm.weight' also appears in",
        "model-00002-of-00003.safetensors"}},
      {"index names a tensor the shard lacks",
       [](model_dir& m) {
         m.after = [](const fs::path& d) {
           auto b = st_bytes({{"model.layers.0.mlp.gate.e_score_correction_bias", "F32", {5}, pattern(20, 3)}});
           write_file(d / "model-00002-of-00003.safetensors", b.data(), b.size());
         };
       },
       {"model.safetensors.index.json: names tensor 'model.layers.0.idx' in model-00002-of-00003.safetensors, which lacks it"}},
      {"index disagrees with the shards",
       [](model_dir& m) {
         m.after = [](const fs::path& d) {
           write_text(d / "model.safetensors.index.json",
                      R"({"weight_map":{"lm_head.weight":"model-00001-of-00003.safetensors","scalar":"model-00003-of-00003.safetensors"}})");
         };
       },
       {"names tensor 'lm_head.weight' in model-00001-of-00003.safetensors, but it is in"}},
      {"bad index", [](model_dir& m) { m.after = [](const fs::path& d) { write_text(d / "model.safetensors.index.json", "{\"weight_map\":3}"); }; },
       {"model.safetensors.index.json: has no weight_map object"}},
      {"no safetensors",
       [](model_dir& m) {
         m.write_index = false;
         m.after = [](const fs::path& d) { fs::remove(d / "model.safetensors"); };
       },
       {"has neither model.safetensors.index.json nor model.safetensors"}},
      {"tokenizer too large for vocab_size", [](model_dir& m) { m.config = R"({"model_type":"x","vocab_size":5})"; },
       {"tokenizer.json: has 9 token ids but config.json's vocab_size is 5"}},
  };
  for (const auto& c : cases) {
    model_dir m;
    c.breakit(m);
    const std::string err = open_error(m);
    BOOST_TEST_INFO(c.what);
    for (const auto& e : c.expect) BOOST_TEST(err.find(e) != std::string::npos, c.what << ": got '" << err << "'");
  }
}

BOOST_AUTO_TEST_CASE(through_the_plugin_host) {
  tandem::plugin_host host(tandem::plugin_host::default_search_path());
  const auto& d = host.find("weights.safetensors");
  BOOST_TEST((d.interface == tandem::plugin_interface::weight_format));
  BOOST_TEST(d.schema_size == 0u);
  BOOST_TEST(host.probe("weights.safetensors").score > 0);
  auto w = host.create<tandem::weight_format>("weights.safetensors", tandem::config{});
  BOOST_CHECK_THROW(w->meta(), tandem::error);
  BOOST_CHECK_EXCEPTION(w->open("/nonexistent/dir"), tandem::model_error,
                        [](const auto& e) { return std::string(e.what()).find("is not a directory") != std::string::npos; });
  model_dir m;
  const auto dir = m.write("host");
  w->open(dir);
  BOOST_TEST(w->tensors().size() == 8u);
  BOOST_TEST((w->find("lm_head.weight")->type == tandem::dtype::bf16));
  BOOST_TEST(*w->meta().get_string("general.architecture") == "glm_moe_dsa");
  fs::remove_all(dir);
}

// tests/fixtures/glm_moe_dsa/tiny (a tiny GLM model directory, made elsewhere) when present.
BOOST_AUTO_TEST_CASE(glm_fixture) {
  const char* f = std::getenv("TANDEM_FIXTURES");
  const fs::path dir = fs::path(f ? f : "tests/fixtures") / "glm_moe_dsa/tiny";
  if (!fs::exists(dir / "config.json")) {
    BOOST_TEST_MESSAGE("skipped: " << dir << " does not exist");
    return;
  }
  hf_model model(dir);
  const auto& meta = model.meta();
  const auto config = boost::json::parse(*meta.get_string("hf.config_json")).as_object();
  BOOST_TEST(*meta.get_string("general.architecture") == std::string(config.at("model_type").as_string()));
  BOOST_TEST(model.tensors().size() > 0u);
  size_t n_bf16 = 0;
  for (const auto& t : model.tensors()) {
    BOOST_TEST((t.type == tandem::dtype::bf16 || t.type == tandem::dtype::f16 || t.type == tandem::dtype::f32 ||
                t.type == tandem::dtype::i32 || t.type == tandem::dtype::i64 || t.type == tandem::dtype::u8), t.name);
    n_bf16 += t.type == tandem::dtype::bf16;
  }
  BOOST_TEST_MESSAGE(model.tensors().size() << " tensors, " << n_bf16 << " bf16");
  BOOST_TEST(model.find("model.embed_tokens.weight") != nullptr);
  auto read_json = [](const fs::path& p) {
    std::ifstream in(p);
    return boost::json::parse(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
  };
  if (fs::exists(dir / "model.safetensors.index.json"))
    BOOST_TEST(model.tensors().size() == read_json(dir / "model.safetensors.index.json").at("weight_map").as_object().size());
  if (fs::exists(dir / "generation_config.json")) {
    const auto eos = read_json(dir / "generation_config.json").at("eos_token_id");
    if (eos.is_array()) BOOST_TEST(meta.get_ints("tokenizer.hf.eog_token_ids")->size() == eos.as_array().size());
  }
  const auto tok = tandem::tokenizer::from_metadata(meta, dir.string());
  BOOST_TEST(tok.vocab_size() == static_cast<int32_t>(meta.get_strings("tokenizer.ggml.tokens")->size()));
  const std::string text = "Hello, world! It's 12345 tokens.\n\n日本語 🙂";
  BOOST_TEST(tok.decode(tok.encode(text)) == text);
  // Ids that tokenizers gave for this fixture's tokenizer.json, when the fixture ships them.
  const fs::path cases = dir / "tokenizer_cases.json";
  if (fs::exists(cases)) {
    std::ifstream in(cases);
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const auto& c : boost::json::parse(s).at("cases").as_array()) {
      std::vector<int32_t> want;
      for (const auto& id : c.at("ids").as_array()) want.push_back(static_cast<int32_t>(id.as_int64()));
      BOOST_TEST((tok.encode(c.at("text").as_string()) == want), c.at("text").as_string());
    }
  }
}
