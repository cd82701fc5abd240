#define BOOST_TEST_MODULE model_registry
#include <boost/test/unit_test.hpp>

// The model seam: the registry finds architectures by name, refuses unknown ones listing
// what it has, and refuses a backend that lacks an op the model needs before loading any
// weight, naming the op. glm_moe_dsa's config.json reader rejects unknown keys and
// inconsistent values, naming the file and the key.
#include <string>

#include <algorithm>

#include "glm_moe_dsa/glm_config.hpp"
#include "glm_moe_dsa/glm_model.hpp"
#include "registry.hpp"
#include "tandem/error.hpp"
#include "../host/plugins/test_objects.hpp"

using namespace tandem;

namespace {

// Metadata only: the registry must decide before any tensor is looked up.
class meta_weights final : public weight_format {
 public:
  explicit meta_weights(model_metadata m) : m_(std::move(m)) {}
  void open(const std::filesystem::path&) override {}
  const model_metadata& meta() const override { return m_; }
  std::span<const tensor_info> tensors() const override { return {}; }
  const tensor_info* find(std::string_view) const override { return nullptr; }

 private:
  model_metadata m_;
};

const char* tiny_config = R"({
  "model_type": "glm_moe_dsa", "architectures": ["GlmMoeDsaForCausalLM"], "vocab_size": 300,
  "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 8,
  "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
  "routed_scaling_factor": 2.5, "norm_topk_prob": true, "index_n_heads": 8, "index_head_dim": 16,
  "index_topk": 8, "max_position_embeddings": 512, "first_k_dense_replace": 1,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "rms_norm_eps": 1e-5,
  "index_topk_pattern": "FSFS"
})";

std::string with(const std::string& key_value) {  // tiny_config with one more key
  std::string s = tiny_config;
  return s.substr(0, s.rfind('}')) + ", " + key_value + "}";
}

template <class E>
void expect_error(const std::string& json, const std::string& needle) {
  try {
    glm::glm_config::parse(json, "dir/config.json");
    BOOST_FAIL("no error; expected one mentioning " + needle);
  } catch (const E& e) {
    const std::string what = e.what();
    BOOST_TEST_INFO(what);
    BOOST_CHECK(what.find(needle) != std::string::npos);
    BOOST_CHECK(what.find("dir/config.json") != std::string::npos);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(registry_lists_both_architectures) {
  BOOST_TEST(find_model("llama") != nullptr);
  BOOST_TEST(find_model("glm_moe_dsa") != nullptr);
  BOOST_TEST(find_model("qwen3") == nullptr);
}

BOOST_AUTO_TEST_CASE(unknown_architecture_names_the_known_ones) {
  model_metadata m;
  m.set("general.architecture", std::string("qwen3"));
  meta_weights w(m);
  tandem_test::test_backend be;
  try {
    create_model(be, w, "m.gguf");
    BOOST_FAIL("an unknown architecture was accepted");
  } catch (const model_error& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("qwen3") != std::string::npos);
    BOOST_TEST(what.find("glm_moe_dsa") != std::string::npos);
    BOOST_TEST(what.find("llama") != std::string::npos);
  }
  meta_weights none{model_metadata{}};
  BOOST_CHECK_THROW(create_model(be, none, "m.gguf"), model_error);
}

BOOST_AUTO_TEST_CASE(backend_without_mla_is_refused_at_load_naming_the_op) {
  model_metadata m;
  m.set("general.architecture", std::string("glm_moe_dsa"));
  m.set("hf.config_json", std::string(tiny_config));
  meta_weights w(m);
  tandem_test::test_backend be;  // dense ops only (supports()' default)
  BOOST_TEST(!be.supports(backend_op::attention_mla));
  try {
    create_model(be, w, "dir");
    BOOST_FAIL("a backend without MLA was accepted");
  } catch (const config_error& e) {
    const std::string what = e.what();
    BOOST_TEST_INFO(what);
    BOOST_CHECK(what.find("attention_mla") != std::string::npos);
    BOOST_CHECK(what.find("test backend") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(glm_config_reads_the_architecture) {
  const auto c = glm::glm_config::parse(tiny_config, "dir/config.json");
  BOOST_TEST(c.n_layers == 4);
  BOOST_TEST(c.qk_head_dims() == 24);
  BOOST_TEST((c.sparse_mlp == std::vector<bool>{false, true, true, true}));
  BOOST_TEST((c.own_indexer == std::vector<bool>{true, false, true, false}));
  BOOST_TEST(c.indexer_layers() == 2);
  BOOST_TEST(c.rope_theta == 10000.0f);
  const auto ops = glm::glm_model::ops_for(c);
  BOOST_TEST((std::find(ops.begin(), ops.end(), backend_op::moe_experts) != ops.end()));
  BOOST_TEST((std::find(ops.begin(), ops.end(), backend_op::attention_gqa) == ops.end()));
}

BOOST_AUTO_TEST_CASE(glm_config_derives_indexer_types_as_transformers_does) {
  // index_topk_freq 2, offset 2: layers 0,1 full, then every other one (i - 1) % 2 == 0.
  std::string s = tiny_config;
  s.replace(s.find("\"index_topk_pattern\": \"FSFS\""), 28, "\"index_topk_freq\": 2");
  const auto c = glm::glm_config::parse(s, "dir/config.json");
  BOOST_TEST((c.own_indexer == std::vector<bool>{true, true, false, true}));
}

BOOST_AUTO_TEST_CASE(glm_config_errors_name_the_key) {
  expect_error<model_error>(with(R"("use_mtp_magic": true)"), "use_mtp_magic");
  expect_error<model_error>(with(R"("scoring_func": "softmax")"), "scoring_func");
  expect_error<model_error>(with(R"("attention_bias": true)"), "attention_bias");
  std::string yarn = tiny_config;
  yarn.replace(yarn.find("\"rope_type\": \"default\""), 22, "\"rope_type\": \"yarn\"");
  expect_error<model_error>(yarn, "rope_type");
  std::string groups = tiny_config;
  groups.replace(groups.find("\"n_group\": 2"), 12, "\"n_group\": 3");
  expect_error<model_error>(groups, "n_group");
  std::string kv = tiny_config;
  kv.replace(kv.find("\"num_key_value_heads\": 4"), 24, "\"num_key_value_heads\": 2");
  expect_error<model_error>(kv, "num_key_value_heads");
  std::string missing = tiny_config;
  missing.replace(missing.find("\"kv_lora_rank\": 32,"), 19, "");
  expect_error<model_error>(missing, "kv_lora_rank");
  std::string pattern = tiny_config;
  pattern.replace(pattern.find("FSFS"), 4, "SFFF");
  expect_error<model_error>(pattern, "indexer_types");
  expect_error<model_error>("{not json", "JSON");
}
