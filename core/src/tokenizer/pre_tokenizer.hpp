#pragma once
// Pre-tokenization: cuts text (between special tokens) into the pieces BPE merges within.
// Which rules apply is named by GGUF's tokenizer.ggml.pre, as in llama.cpp:
//   "smollm" (and starcoder, refact, command-r, codeshell, exaone): every \p{N} character
//       is a piece of its own, then the GPT-2 regex runs on each stretch between them --
//       what SmolLM2's tokenizer.json does with Sequence[Digits(individual_digits),
//       ByteLevel(use_regex)];
//   "default" (also gpt-2, gpt2, mpt, olmo, jais, and a missing key): the GPT-2 regex alone.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pcre2_regex.hpp"

namespace tandem::detail {

class pre_tokenizer {
 public:
  // nullopt when `name` is not a known pre-tokenizer.
  static std::optional<pre_tokenizer> create(std::string_view name);
  // The names create() knows, for error messages.
  static std::string known_names();

  // Appends the pieces of `text` (valid UTF-8) in order; together they cover `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  pre_tokenizer(std::shared_ptr<const pcre2_regex> digits, std::shared_ptr<const pcre2_regex> words)
      : digits_(std::move(digits)), words_(std::move(words)) {}
  void split_words(std::string_view text, std::vector<std::string_view>& out) const;

  std::shared_ptr<const pcre2_regex> digits_;  // null: digits are not isolated
  std::shared_ptr<const pcre2_regex> words_;
};

}  // namespace tandem::detail
