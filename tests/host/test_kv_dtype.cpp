#define BOOST_TEST_MODULE kv_dtype
#include <boost/test/unit_test.hpp>

// engine.kv_dtype applied to a model (serving/runtime/kv_type.cpp): `auto` keeps the
// model's choice, an explicit type must be one the backend's attention reads and one the
// model keeps, every refusal a config_error naming engine.kv_dtype. backend.cuda's own list
// (bf16 first) and its pools are checked by the gpu suite (gpu_ops); the schema's choices by
// tests/pipelines/bad/kv_dtype.yaml.
#include <functional>
#include <string>
#include <vector>

#include "../../serving/runtime/kv_type.hpp"
#include "plugins/test_objects.hpp"
#include "tandem/error.hpp"
#include "tandem/model.hpp"

using namespace tandem;

namespace {

// A backend whose attention reads the given types (the first preferred).
class typed_backend final : public tandem_test::test_backend {
 public:
  explicit typed_backend(std::vector<dtype> types) : types_(std::move(types)) {}
  std::vector<dtype> kv_types() const override { return types_; }

 private:
  std::vector<dtype> types_;
};

// A model with one K/V group of `type` that takes any type it is given when `flexible`,
// else only its own (model::set_kv_type's default).
class typed_model final : public model {
 public:
  typed_model(dtype type, bool flexible) : flexible_(flexible) { spec_.groups.push_back({"gqa", 2, 3, 64, true, type}); }
  const model_info& info() const override { return info_; }
  std::vector<backend_op> required_ops() const override { return {}; }
  kv_spec kv_needs() const override { return spec_; }
  void allocate_kv(int64_t, int) override {}
  void set_kv_type(dtype t) override {
    if (!flexible_) return model::set_kv_type(t);
    spec_.groups[0].type = t;
  }
  void forward(const step_plan&, const forward_options&) override {}
  std::vector<int32_t> sample(const std::vector<sampling_params>&) override { return {}; }
  std::vector<float> logits_to_host() const override { return {}; }
  int64_t logit_rows() const override { return 0; }
  tensor_view hidden_states(int) const override { return {}; }

 private:
  bool flexible_;
  kv_spec spec_;
  model_info info_{"typed", 2, 192, 10, 64, ""};
};

config engine_with(const std::string& kv_dtype) {
  config c;
  c.set("kv_dtype", kv_dtype);
  return c;
}

// The config_error's key path and message of running f, or "" when it does not throw.
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const config_error& e) {
    BOOST_TEST(e.key_path() == "engine.kv_dtype");
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(auto_keeps_the_models_choice) {
  typed_backend be({dtype::bf16, dtype::f32});
  typed_model m(dtype::bf16, true);
  apply_kv_dtype(engine_with("auto"), be, "backend.x", m);
  BOOST_TEST((m.kv_needs().groups[0].type == dtype::bf16));
}

BOOST_AUTO_TEST_CASE(an_explicit_type_the_backend_reads_is_applied) {
  typed_backend be({dtype::bf16, dtype::f32, dtype::fp8_e4m3});
  for (dtype t : {dtype::f32, dtype::bf16, dtype::fp8_e4m3}) {
    typed_model m(dtype::bf16, true);
    apply_kv_dtype(engine_with(std::string(name(t))), be, "backend.x", m);
    BOOST_TEST((m.kv_needs().groups[0].type == t));
    BOOST_TEST(m.kv_needs().bytes_per_token() == 2 * 2 * 3 * 64 * traits(t).block_bytes);
  }
}

BOOST_AUTO_TEST_CASE(a_type_the_backend_cannot_read_is_refused_naming_it) {
  typed_backend be({dtype::f32});
  typed_model m(dtype::f32, true);
  const std::string msg = refusal([&] { apply_kv_dtype(engine_with("bf16"), be, "backend.cpu", m); });
  BOOST_TEST(msg.find("backend.cpu cannot keep the KV cache in bf16 (its attention reads f32)") != std::string::npos,
             msg);
  BOOST_TEST((m.kv_needs().groups[0].type == dtype::f32));  // unchanged
}

BOOST_AUTO_TEST_CASE(a_model_that_keeps_one_type_refuses_others) {
  typed_backend be({dtype::bf16, dtype::f32});
  typed_model m(dtype::f32, false);  // as glm_moe_dsa's f32 latent cache
  apply_kv_dtype(engine_with("f32"), be, "backend.x", m);
  const std::string msg = refusal([&] { apply_kv_dtype(engine_with("bf16"), be, "backend.x", m); });
  BOOST_TEST(msg.find("typed keeps its gqa cache in f32, not bf16 (use auto or f32)") != std::string::npos, msg);
}

BOOST_AUTO_TEST_CASE(describe_names_the_element_type) {
  typed_model m(dtype::bf16, true);
  BOOST_TEST(m.kv_needs().describe() == "gqa: 2 layers x 3 x 64 (K and V, bf16)");
}
