#define BOOST_TEST_MODULE dflash2_errors
#include <boost/test/unit_test.hpp>

#include "dflash2_config.hpp"
#include "dflash2_manifest.hpp"
#include "dflash2_test_util.hpp"
#include "tandem/error.hpp"

// Every bad drafter directory, setting, target or call is a tandem error that names what is
// wrong (the setting, the file, the key or the tensor), never a crash.

using namespace dflash2_test;

namespace {

// The error's message when `f` throws a tandem::error of type E, else a failure.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    BOOST_TEST_MESSAGE("  " << e.what());
    return e.what();
  } catch (const std::exception& e) {
    BOOST_FAIL(std::string("a different exception: ") + e.what());
  }
  BOOST_FAIL("no exception");
  return {};
}

bool has(const std::string& text, const std::string& words) { return text.find(words) != std::string::npos; }

dflash2_config tiny() { return dflash2_config::read(fixture_dir() / "config.json"); }

struct random_target {
  std::vector<float> table, head;
  tensor_info t_info, h_info;
  std::unique_ptr<cpu_target> target;
  explicit random_target(const dflash2_config& c) {
    const auto n = static_cast<size_t>(c.target.vocab_size * c.hidden_size);
    table.resize(n);
    head.resize(n);
    for (size_t i = 0; i < n; ++i) table[i] = std::sin(0.37f * i), head[i] = std::cos(0.11f * i);
    t_info = {"table", dtype::f32, {c.target.vocab_size, c.hidden_size}, table.data(), n * 4};
    h_info = {"head", dtype::f32, {c.target.vocab_size, c.hidden_size}, head.data(), n * 4};
    target = std::make_unique<cpu_target>(c, t_info, h_info);
  }
};

// A backend whose activations are bf16; bind() must refuse it before calling anything else.
class bf16_backend final : public backend {
 public:
  device dev() const override { return {device_kind::cuda, 0}; }
  std::string describe() const override { return "pretend bf16 device"; }
  dtype activation_type() const override { return dtype::bf16; }
  size_t memory_budget() const override { return 0; }
  std::unique_ptr<device_buffer> alloc(size_t) override { fail(); }
  void copy_to_device(void*, const void*, size_t) override { fail(); }
  void copy_to_host(void*, const void*, size_t) override { fail(); }
  void synchronize() override {}
  std::unique_ptr<linear_weight> load_linear(const tensor_info&) override { fail(); }
  std::unique_ptr<device_buffer> load_tensor(const tensor_info&, dtype) override { fail(); }
  std::unique_ptr<kv_storage> alloc_kv(const kv_layout&) override { fail(); }
  void embed(const linear_weight&, tensor_view, tensor_view) override { fail(); }
  void rms_norm(tensor_view, tensor_view, float, tensor_view) override { fail(); }
  void add_rms_norm(tensor_view, tensor_view, tensor_view, float, tensor_view) override { fail(); }
  void linear(const linear_weight&, tensor_view, tensor_view) override { fail(); }
  void rope(tensor_view, tensor_view, const rope_params&) override { fail(); }
  void attention(tensor_view, tensor_view, tensor_view, kv_storage&, int, const attention_batch&, float,
                 tensor_view) override { fail(); }
  void silu_mul(tensor_view, tensor_view, tensor_view) override { fail(); }
  void add(tensor_view, tensor_view, tensor_view) override { fail(); }
  void gather_rows(tensor_view, tensor_view, tensor_view) override { fail(); }
  void sample(tensor_view, std::span<const sampling_params>, tensor_view) override { fail(); }

 private:
  [[noreturn]] static void fail() { throw error("bf16_backend: bind() used the backend it should have refused"); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_corrupt_or_incomplete_directory_names_the_file) {
  const fs::path dir = temp_dir("bad");
  write_drafter(dir, tiny());
  BOOST_REQUIRE_NO_THROW(dflash2_drafter(settings_for(dir)));

  {  // one flipped byte in the weights: the manifest's hash no longer matches
    std::fstream f(dir / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = static_cast<char>(f.get() ^ 0x40);
    f.seekp(-5, std::ios::end);
    f.put(c);
  }
  std::string m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "drafter.weights"));
  BOOST_TEST(has(m, "model.safetensors: sha256 mismatch"));

  write_drafter(dir, tiny(), {.bf16 = false, .shards = 1, .drop_tensor = "layers.1.conv_mlp.base", .seed = 1});  // re-hashed, but a tensor short
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "has no tensor 'layers.1.conv_mlp.base'"));

  write_drafter(dir, tiny());
  fs::remove(dir / "model.safetensors");
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "model.safetensors: is listed in MANIFEST.sha256 but missing"));

  write_drafter(dir, tiny());
  fs::remove(dir / "MANIFEST.sha256");
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "MANIFEST.sha256: is missing"));

  // A weight file the manifest does not list is not trusted.
  write_drafter(dir, tiny(), {.bf16 = false, .shards = 2, .drop_tensor = {}, .seed = 1});
  BOOST_REQUIRE_NO_THROW(dflash2_drafter(settings_for(dir)));
  {
    std::ifstream in(dir / "MANIFEST.sha256");
    std::string all, line;
    while (std::getline(in, line))
      if (!has(line, "model-00002-of-00002")) all += line + "\n";
    std::ofstream(dir / "MANIFEST.sha256") << all;
  }
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "does not list 'model-00002-of-00002.safetensors'"));

  // A truncated weight file (re-hashed): the safetensors reader's bounds checks.
  write_drafter(dir, tiny());
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
  write_manifest(dir);
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir)); });
  BOOST_TEST(has(m, "model.safetensors"));

  m = message_of<config_error>([&] { dflash2_drafter d(settings_for(dir / "nowhere")); });
  BOOST_TEST((has(m, "drafter.weights") && has(m, "is not a directory")));
  m = message_of<config_error>([&] { dflash2_drafter d(settings_for("")); });
  BOOST_TEST(has(m, "drafter.weights: is required"));
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(config_json_keys_are_exact) {
  const std::string good = config_json(tiny());
  BOOST_REQUIRE_NO_THROW(dflash2_config::parse(good, "config.json"));
  const auto bad = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    BOOST_REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    return message_of<model_error>([&] { dflash2_config::parse(text, "dir/config.json"); });
  };
  BOOST_TEST(has(bad("\"block_size\": 6,", "\"block_size\": 6, \"block_sizes\": 6,"), "dir/config.json: key 'block_sizes' is not a dflash2 config key"));
  BOOST_TEST(has(bad("\"block_size\": 6,", ""), "key 'block_size' is missing"));
  BOOST_TEST(has(bad("\"num_layers\": 3}", "\"num_layers\": 3, \"tied\": true}"), "key 'target.tied' is not"));
  BOOST_TEST(has(bad("\"hidden_size\": 64, \"num_layers\": 2", "\"hidden_size\": 32, \"num_layers\": 2"),
                 "key 'hidden_size' is 32 but target.hidden_size is 64"));
  BOOST_TEST(has(bad("\"num_kv_heads\": 2", "\"num_kv_heads\": 3"), "key 'num_heads' (4) is not a multiple"));
  BOOST_TEST(has(bad("\"conv_group_size\": 16", "\"conv_group_size\": 24"), "key 'conv_group_size' (24) does not divide"));
  BOOST_TEST(has(bad("\"target_layers\": [0, 1, 2]", "\"target_layers\": [0, 3]"), "key 'target_layers' holds 3"));
  BOOST_TEST(has(bad("\"block_size\": 6", "\"block_size\": 6.5"), "key 'block_size' must be an integer"));
  BOOST_TEST(has(bad("\"architecture\": \"dflash2\"", "\"architecture\": \"eagle3\""), "this plugin reads 'dflash2'"));
  BOOST_TEST(has(bad("\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": -1"), "key 'rms_norm_eps' must be a positive number"));
  BOOST_TEST(has(message_of<model_error>([] { dflash2_config::parse("{\"architecture\": ", "c.json"); }), "c.json: is not valid JSON"));

  // Manifest lines.
  BOOST_TEST(has(message_of<model_error>([] { dflash2_manifest::parse("abc  config.json\n", "M"); }), "M: line 1"));
  BOOST_TEST(has(message_of<model_error>([] { dflash2_manifest::parse(std::string(64, 'a') + "  ../etc/passwd\n", "M"); }),
                 "not a file of the directory"));
}

BOOST_AUTO_TEST_CASE(settings_that_cannot_work_are_refused) {
  std::string m = message_of<config_error>([] { dflash2_drafter d(settings_for(fixture_dir(), 6)); });
  BOOST_TEST(has(m, "drafter.k: is 6, but a block of 6 (config.json block_size) drafts at most 5"));
  dflash2_drafter d(settings_for(fixture_dir()));
  BOOST_TEST(d.limits().max_draft == 5);  // k = 0: block_size - 1
  BOOST_TEST(dflash2_drafter(settings_for(fixture_dir(), 3)).limits().max_draft == 3);
  BOOST_TEST(d.target_layers() == std::vector<int>({0, 1, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bind_refuses_a_target_it_was_not_trained_for) {
  const dflash2_config c = tiny();
  random_target rt(c);
  const auto refused = [&](draft_target t) {
    dflash2_drafter d(settings_for(fixture_dir()));
    const std::string m = message_of<config_error>([&] { d.bind(t); });
    BOOST_TEST(has(m, "drafter.plugin: drafter.dflash2"));
    return m;
  };
  draft_target t = rt.target->target;
  t.hidden = 128;
  BOOST_TEST(has(refused(t), "hidden_size 64"));
  t = rt.target->target;
  t.vocab = 301;
  BOOST_TEST(has(refused(t), "vocab_size 300"));
  t = rt.target->target;
  t.arch = "qwen3";
  BOOST_TEST(has(refused(t), "arch llama"));
  t = rt.target->target;
  t.n_layers = 2;
  BOOST_TEST(has(refused(t), "num_layers 3"));
  bf16_backend narrow;
  t = rt.target->target;
  t.be = &narrow;
  BOOST_TEST(has(refused(t), "needs f32 activations from the target's backend (pretend bf16 device has bf16)"));
  // A head of the wrong shape (the target's table is {vocab, hidden}).
  random_target other(dflash2_config::parse(
      [&] { std::string s = config_json(c); s.replace(s.find("\"vocab_size\": 300"), 17, "\"vocab_size\": 200"); return s; }(),
      "c"));
  t = rt.target->target;
  t.lm_head = other.target->head.get();
  BOOST_TEST(has(refused(t), "{200, 64}"));

  dflash2_drafter ok(settings_for(fixture_dir()));
  BOOST_REQUIRE_NO_THROW(ok.bind(rt.target->target));
}

BOOST_AUTO_TEST_CASE(bad_calls_are_errors) {
  const dflash2_config c = tiny();
  random_target rt(c);
  dflash2_drafter d(settings_for(fixture_dir()));
  std::vector<float> rows(4 * 64, 0.5f), narrow(4 * 32, 0.5f);
  const tensor_view tap = tensor_view::contiguous(rows.data(), dtype::f32, {4, 64});
  const std::vector<tensor_view> three(3, tap), two(2, tap);
  BOOST_TEST(has(message_of<error>([&] { d.observe(1, 0, three); }), "before bind"));
  d.bind(rt.target->target);
  BOOST_TEST(has(message_of<error>([&] { d.observe(1, 0, two); }), "got 2 taps"));
  const std::vector<tensor_view> wrong(3, tensor_view::contiguous(narrow.data(), dtype::f32, {4, 32}));
  BOOST_TEST(has(message_of<error>([&] { d.observe(1, 0, wrong); }), "must each be [4, 64]"));
  BOOST_TEST(has(message_of<error>([&] { d.observe(1, -1, three); }), "at position -1"));
  const std::vector<tensor_view> bf16(3, tensor_view::contiguous(rows.data(), dtype::bf16, {4, 64}));
  BOOST_TEST(has(message_of<error>([&] { d.observe(1, 0, bf16); }), "not [n, hidden] f32"));
  d.observe(1, 0, three);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 299};
  BOOST_TEST(d.propose(1, {.tokens = tokens, .prompt_len = 4, .max_draft = 5}).size() == 5u);
  const std::vector<int32_t> outside = {1, 2, 3, 4, 300};
  BOOST_TEST(has(message_of<error>([&] { d.propose(1, {.tokens = outside, .prompt_len = 4, .max_draft = 5}); }),
                 "outside the vocabulary"));
  BOOST_TEST(d.propose(1, {.tokens = tokens, .prompt_len = 4, .max_draft = 0}).empty());
  BOOST_TEST(d.propose(2, {.tokens = tokens, .prompt_len = 4, .max_draft = 5}).empty());  // no context
}
