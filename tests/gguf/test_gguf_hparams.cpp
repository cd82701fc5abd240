#define BOOST_TEST_MODULE gguf_hparams
#include <boost/test/unit_test.hpp>

// A GGUF file whose llama hyper-parameters lie: each is refused by llama_hparams before
// anything is allocated for it, with a message that names the key. The files are crafted
// with gguf_writer: a valid two-block llama, then one key changed.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <unistd.h>

#include "gguf_file.hpp"
#include "gguf_sample.hpp"
#include "llama/llama_hparams.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"

using namespace tandem;
using namespace tandem::test;
using tandem::gguf::gguf_file;

namespace {

constexpr int vocab = 8, hidden = 8, ffn = 16;

// The weight_format seam over a parsed file (the plugin's class lives inside the plugin).
class file_weights final : public weight_format {
 public:
  explicit file_weights(gguf_file f) : f_(std::move(f)) {}
  void open(const std::filesystem::path&) override {}
  const model_metadata& meta() const override { return f_.metadata(); }
  std::span<const tensor_info> tensors() const override { return f_.tensors(); }
  const tensor_info* find(std::string_view name) const override { return f_.find(name); }

 private:
  gguf_file f_;
};

struct overrides {
  int64_t block_count = 2, embedding_length = hidden, head_count = 2, head_count_kv = 1, context = 128;
  int64_t key_length = 0;  // 0 = absent
  int tensor_blocks = 2;
};

std::vector<std::byte> f32_zeros(size_t n) { return std::vector<std::byte>(n * 4); }

std::filesystem::path write_llama(const overrides& o) {
  using vt = gguf_writer::vt;
  gguf_writer w;
  w.kv_string("general.architecture", "llama");
  w.kv("llama.block_count", vt::u64, static_cast<uint64_t>(o.block_count));
  w.kv("llama.embedding_length", vt::u64, static_cast<uint64_t>(o.embedding_length));
  w.kv("llama.feed_forward_length", vt::u32, uint32_t{ffn});
  w.kv("llama.attention.head_count", vt::u64, static_cast<uint64_t>(o.head_count));
  w.kv("llama.attention.head_count_kv", vt::u64, static_cast<uint64_t>(o.head_count_kv));
  w.kv("llama.context_length", vt::u64, static_cast<uint64_t>(o.context));
  if (o.key_length) w.kv("llama.attention.key_length", vt::u64, static_cast<uint64_t>(o.key_length));
  w.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c", "d", "e", "f", "g", "h"});
  w.tensor("token_embd.weight", F32, {hidden, vocab}, f32_zeros(hidden * vocab));
  w.tensor("output_norm.weight", F32, {hidden}, f32_zeros(hidden));
  for (int l = 0; l < o.tensor_blocks; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    w.tensor(b + "attn_norm.weight", F32, {hidden}, f32_zeros(hidden));
    w.tensor(b + "attn_q.weight", F32, {hidden, hidden}, f32_zeros(hidden * hidden));
  }
  const auto bytes = w.build();
  static int serial = 0;
  auto path = std::filesystem::temp_directory_path() /
              ("tandem_hparams_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) + ".gguf");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

llama_hparams read(const overrides& o) {
  const auto path = write_llama(o);
  file_weights w(gguf_file::open(path));
  std::filesystem::remove(path);
  return llama_hparams::from_weights(w, "crafted.gguf");
}

// Refused quickly, naming the key (and the file).
void expect_refused(const overrides& o, const std::string& key) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    read(o);
    BOOST_FAIL("accepted; expected an error naming " + key);
  } catch (const model_error& e) {
    const std::string what = e.what();
    BOOST_TEST_INFO(what);
    BOOST_CHECK(what.find(key) != std::string::npos);
    BOOST_CHECK(what.find("crafted.gguf") != std::string::npos);
  }
  BOOST_CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_valid_file_is_accepted) {
  const llama_hparams h = read({});
  BOOST_TEST(h.n_layers == 2);
  BOOST_TEST(h.hidden == hidden);
  BOOST_TEST(h.vocab == vocab);
  BOOST_TEST(h.head_dim == hidden / 2);
}

BOOST_AUTO_TEST_CASE(block_count_against_the_tensor_table) {
  expect_refused({.block_count = 100000000}, "llama.block_count");  // 10^8: 4.8 GB allocated before
  expect_refused({.block_count = int64_t{1} << 31}, "llama.block_count");  // 2^31: was vector::_M_default_append
  expect_refused({.block_count = int64_t{1} << 40}, "llama.block_count");
  expect_refused({.block_count = 3}, "llama.block_count");  // in bounds, but only two blocks of tensors
  expect_refused({.block_count = 1}, "llama.block_count");
  expect_refused({.tensor_blocks = 3}, "llama.block_count");
}

BOOST_AUTO_TEST_CASE(dimensions_and_heads_in_bounds) {
  expect_refused({.embedding_length = int64_t{1} << 31}, "llama.embedding_length");
  expect_refused({.embedding_length = 16}, "llama.embedding_length");  // token_embd.weight is [8, 8]
  expect_refused({.head_count = 100000}, "llama.attention.head_count");
  expect_refused({.head_count = 16}, "llama.attention.head_count");  // more heads than embedding dims
  expect_refused({.head_count_kv = 0}, "llama.attention.head_count_kv");
  expect_refused({.head_count_kv = 3}, "llama.attention.head_count_kv");
  expect_refused({.context = int64_t{1} << 40}, "llama.context_length");
  expect_refused({.context = 0}, "llama.context_length");
  expect_refused({.key_length = int64_t{1} << 33}, "llama.attention.key_length");
}
