#pragma once
// Pre-tokenization: cuts text (between special tokens) into the pieces BPE merges within.
// A pre-tokenizer is a chain of regex steps as Hugging Face's Split(behavior Isolated)
// runs them: each step cuts every piece of the step before into its matches and the
// stretches between them (both kept), the end of the piece being the end for look-aheads.
//
// Named rules, by GGUF's tokenizer.ggml.pre as in llama.cpp:
//   "smollm" (and starcoder, refact, command-r, codeshell, exaone): every \p{N} character
//       is a piece of its own, then the GPT-2 regex runs on each stretch between them --
//       what SmolLM2's tokenizer.json does with Sequence[Digits(individual_digits),
//       ByteLevel(use_regex)];
//   "glm4" (also chatglm-bpe): GLM-4's one regex (hf_common's glm4_pattern), as its
//       tokenizer.json's Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)];
//   "default" (also gpt-2, gpt2, mpt, olmo, jais, and a missing key): the GPT-2 regex alone.
// Or, from tokenizer.hf.pre_regex, the patterns of a tokenizer.json (from_hf_patterns).
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
  // One step per pattern, in order. Patterns are in Hugging Face tokenizers' regex syntax
  // (Oniguruma): \s, \S, \w, \W, \h, \H take Oniguruma's meaning (see to_pcre2). Throws
  // tandem::error naming the pattern when one does not compile. No patterns: the whole
  // text is one piece.
  static pre_tokenizer from_hf_patterns(const std::vector<std::string>& patterns);
  // An Oniguruma pattern as PCRE2 (UTF + UCP) reads it with the same meaning: \s / \S are
  // spelled out as Unicode White_Space (PCRE2's UCP \s differs), \w / \W as Oniguruma's
  // word (letters, marks, decimal digits, connector punctuation), \h / \H as hex digits,
  // \uHHHH as \x{HHHH}.
  static std::string to_pcre2(std::string_view oniguruma_pattern);

  // Appends the pieces of `text` (valid UTF-8) in order; together they cover `text`.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

 private:
  explicit pre_tokenizer(std::vector<std::shared_ptr<const pcre2_regex>> steps) : steps_(std::move(steps)) {}
  static void split_step(const pcre2_regex& re, std::string_view text, std::vector<std::string_view>& out);

  std::vector<std::shared_ptr<const pcre2_regex>> steps_;
};

}  // namespace tandem::detail
