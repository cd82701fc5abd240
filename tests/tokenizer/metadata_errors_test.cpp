#define BOOST_TEST_MODULE tokenizer_metadata_errors
#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>

#include "synthetic_vocab.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"

using tandem::model_error;
using tandem::model_metadata;
using tandem::tokenizer;
using tandem::test::synthetic_vocab;

namespace {

model_metadata good() { return synthetic_vocab::make({"a b", "h e"}).metadata(); }

// Loading `meta` must throw model_error naming the source and every one of `needles`.
void expect_error(const model_metadata& meta, std::initializer_list<std::string> needles) {
  try {
    tokenizer::from_metadata(meta, "bad.gguf");
    BOOST_ERROR("no model_error thrown");
  } catch (const model_error& e) {
    BOOST_TEST(e.file() == "bad.gguf");
    const std::string what = e.what();
    for (const std::string& n : needles) BOOST_TEST(what.find(n) != std::string::npos, what << " lacks " << n);
  }
}

model_metadata without(std::string_view key) {
  const model_metadata all = good();
  model_metadata out;
  for (const auto& [k, v] : all.values()) {
    if (k != key) out.set(k, v);
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(good_metadata_loads) {
  BOOST_TEST(tokenizer::from_metadata(good()).vocab_size() == 5 + 256 + 2);
}

BOOST_AUTO_TEST_CASE(missing_keys) {
  expect_error(without("tokenizer.ggml.model"), {"tokenizer.ggml.model", "missing"});
  expect_error(without("tokenizer.ggml.tokens"), {"tokenizer.ggml.tokens", "missing"});
  expect_error(without("tokenizer.ggml.merges"), {"tokenizer.ggml.merges", "missing"});
  // token_type and pre may be absent: all tokens normal, the GPT-2 regex.
  BOOST_TEST(tokenizer::from_metadata(without("tokenizer.ggml.token_type")).is_special(0) == false);
  BOOST_TEST(tokenizer::from_metadata(without("tokenizer.ggml.pre")).pre() == "default");
}

BOOST_AUTO_TEST_CASE(unsupported_model_or_pre) {
  auto meta = good();
  meta.set("tokenizer.ggml.model", std::string("llama"));
  expect_error(meta, {"tokenizer.ggml.model", "'llama'", "gpt2"});
  meta = good();
  meta.set("tokenizer.ggml.pre", std::string("klingon"));
  expect_error(meta, {"tokenizer.ggml.pre", "'klingon'", "smollm"});
}

BOOST_AUTO_TEST_CASE(bad_merges) {
  auto meta = good();
  meta.set("tokenizer.ggml.merges", std::vector<std::string>{"a b", "a zz"});
  expect_error(meta, {"tokenizer.ggml.merges", "entry 1", "'zz'", "not in the vocab"});
  meta.set("tokenizer.ggml.merges", std::vector<std::string>{"b a"});  // "ba" is not a token
  expect_error(meta, {"entry 0", "'ba'"});
  for (std::string m : {"ab", " a b", "a b ", "a  b", "a b c"}) {
    meta.set("tokenizer.ggml.merges", std::vector<std::string>{m});
    expect_error(meta, {"tokenizer.ggml.merges", "not 'left right'"});
  }
}

BOOST_AUTO_TEST_CASE(bad_token_types) {
  auto meta = good();
  auto types = *meta.get_ints("tokenizer.ggml.token_type");
  types.pop_back();
  meta.set("tokenizer.ggml.token_type", types);
  expect_error(meta, {"tokenizer.ggml.token_type", "262 entries", "263"});
  types.push_back(9);
  meta.set("tokenizer.ggml.token_type", types);
  expect_error(meta, {"entry 262", "is 9"});
}

BOOST_AUTO_TEST_CASE(bad_ids_and_types) {
  auto meta = good();
  meta.set("tokenizer.ggml.eos_token_id", uint64_t{100000});
  expect_error(meta, {"tokenizer.ggml.eos_token_id", "100000", "outside"});
  meta = good();
  meta.set("tokenizer.ggml.bos_token_id", int64_t{-1});
  expect_error(meta, {"tokenizer.ggml.bos_token_id"});
  meta = good();
  meta.set("tokenizer.ggml.tokens", std::string("not an array"));
  expect_error(meta, {"tokenizer.ggml.tokens", "array of strings"});
  meta = good();
  meta.set("tokenizer.ggml.tokens", std::vector<std::string>{});
  expect_error(meta, {"tokenizer.ggml.tokens", "empty"});
}
