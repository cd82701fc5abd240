#pragma once
// Grammar-constrained decoding (structured output): a compiled grammar limits, step by step,
// which tokens a sequence may sample, so its text is always a prefix of the grammar's
// language and ends only where the grammar may end. Built on xgrammar's C++ core
// (subprojects/xgrammar.wrap); nothing of xgrammar shows in this header.
//
//   grammar_compiler gc({.token_bytes = ..., .vocab_size = model_vocab, .stop_ids = eog});
//   auto g = gc.compile(grammar_spec::json_schema(schema_text));   // throws grammar_error
//   grammar_matcher m(*g);
//   m.fill_mask(bits); /* sample among tokens whose bit is set */ m.accept(token);
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/error.hpp"
#include "tandem/export.hpp"

namespace tandem {

// What a request constrains its output to.
struct grammar_spec {
  enum class kind : uint8_t { json_object, json_schema, structural_tag };
  kind k = kind::json_object;
  // json_schema: the JSON Schema text. structural_tag: an xgrammar structural tag
  // ({"type": "structural_tag", "format": {...}}, its documented JSON form): free text and
  // tagged regions such as tool calls, each with its own content grammar.
  std::string text;

  static grammar_spec json_object() { return {kind::json_object, {}}; }
  static grammar_spec json_schema(std::string s) { return {kind::json_schema, std::move(s)}; }
  static grammar_spec structural_tag(std::string s) { return {kind::structural_tag, std::move(s)}; }
};

// The grammar or schema cannot be compiled; what() says why.
class TANDEM_API grammar_error : public error {
 public:
  using error::error;
  ~grammar_error() override;
};

struct grammar_vocabulary {
  // Raw bytes of each tokenizer token; empty for tokens that never appear in text (control
  // tokens), which the grammar then never allows.
  std::vector<std::string> token_bytes;
  int32_t vocab_size = 0;         // the model's logits width (may exceed token_bytes.size())
  std::vector<int32_t> stop_ids;  // the model's end-of-generation ids: allowed where the grammar may end
};

class compiled_grammar;  // immutable, shared by every sequence of the requests that use it

class TANDEM_API grammar_compiler {
 public:
  explicit grammar_compiler(const grammar_vocabulary& vocab);
  ~grammar_compiler();
  grammar_compiler(const grammar_compiler&) = delete;
  grammar_compiler& operator=(const grammar_compiler&) = delete;

  // Thread-safe; repeated specs come from a cache. Throws grammar_error for a bad schema.
  std::shared_ptr<const compiled_grammar> compile(const grammar_spec& spec) const;
  int32_t vocab_size() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// One sequence's position in its grammar. Not thread-safe (the engine thread owns it).
class TANDEM_API grammar_matcher {
 public:
  explicit grammar_matcher(std::shared_ptr<const compiled_grammar> g);
  ~grammar_matcher();
  grammar_matcher(grammar_matcher&&) noexcept;

  // 32-bit words of a mask over vocab_size tokens.
  static size_t mask_words(int32_t vocab_size);
  // Bit t of words[t / 32] set = token t may come next. words.size() >= mask_words(vocab).
  void fill_mask(std::span<uint32_t> words);
  // Advances past `token`; false (state unchanged) when the grammar does not allow it.
  bool accept(int32_t token);
  // A stop token was accepted where the grammar may end.
  bool terminated() const;
  int32_t vocab_size() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem
