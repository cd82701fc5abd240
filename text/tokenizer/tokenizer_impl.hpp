#pragma once
// The tables behind tandem::tokenizer, built once by vocab_loader.cpp and then read-only.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpe.hpp"
#include "pre_tokenizer.hpp"
#include "special_matcher.hpp"
#include "tandem/tokenizer.hpp"

namespace tandem {

struct tokenizer::impl {
  impl(std::vector<std::string> texts, std::vector<token_type> types, detail::bpe_merger bpe,
       detail::pre_tokenizer pre)
      : texts(std::move(texts)), types(std::move(types)), bpe(std::move(bpe)), pre(std::move(pre)) {}
  impl(const impl&) = delete;  // by_text and specials view into texts
  impl& operator=(const impl&) = delete;

  std::vector<std::string> texts;   // as stored in the vocab
  std::vector<std::string> bytes;   // raw bytes of each token
  std::vector<token_type> types;
  std::unordered_map<std::string_view, int32_t> by_text;
  detail::bpe_merger bpe;
  detail::pre_tokenizer pre;
  detail::special_matcher specials;      // CONTROL and USER_DEFINED: what encode() cuts out
  detail::special_matcher controls;      // CONTROL only
  detail::special_matcher user_defined;  // USER_DEFINED only: still cut out of literal ranges
  std::string pre_name;
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  bool add_bos = false;
  std::vector<int32_t> end_of_generation;
  std::vector<bool> is_end_of_generation;

  void check_id(int32_t id) const;  // throws tandem::error when out of range
  // Pre-tokenizes and merges `text`, which holds no special token, appending to `out`
  // (`pieces` is scratch space).
  void encode_plain(std::string_view text, std::vector<std::string_view>& pieces, std::vector<int32_t>& out) const;
};

}  // namespace tandem
