// grammar_compiler: the tokenizer's vocabulary handed to xgrammar once (TokenizerInfo sorts
// it into the trie its masks walk), then JSON Schemas and structural tags compiled against it.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "grammar_xgrammar.hpp"

namespace tandem {

grammar_error::~grammar_error() = default;

namespace {

// {"type": "object"}: OpenAI's json_object is "a valid JSON object", not any JSON value.
constexpr const char* any_object_schema = R"({"type": "object"})";

xgrammar::TokenizerInfo tokenizer_info(const grammar_vocabulary& v) {
  if (v.vocab_size < static_cast<int32_t>(v.token_bytes.size()))
    throw grammar_error(fmt::format("the model's vocabulary ({}) is smaller than the tokenizer's ({})", v.vocab_size,
                                    v.token_bytes.size()));
  // RAW: the strings are the tokens' bytes already. Empty strings are xgrammar's special
  // tokens (never allowed inside the grammar); ids past the tokenizer's are too.
  return xgrammar::TokenizerInfo(v.token_bytes, xgrammar::VocabType::RAW, v.vocab_size, v.stop_ids, false);
}

// xgrammar's fatal errors read "[hh:mm:ss] path/file.cc:line: message\n": a client needs the message.
std::string without_source_location(std::string m) {
  if (!m.empty() && m.front() == '[') {
    const size_t close = m.find("] ");
    const size_t colon = close == std::string::npos ? close : m.find(": ", close + 2);
    if (colon != std::string::npos) m.erase(0, colon + 2);
  }
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return m;
}

}  // namespace

struct grammar_compiler::impl {
  int32_t vocab;
  xgrammar::GrammarCompiler xg;
  explicit impl(const grammar_vocabulary& v)
      : vocab(v.vocab_size),
        xg(tokenizer_info(v), static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)),
           /*cache_enabled=*/true) {}
};

grammar_compiler::grammar_compiler(const grammar_vocabulary& vocab) : impl_(std::make_unique<impl>(vocab)) {}
grammar_compiler::~grammar_compiler() = default;
int32_t grammar_compiler::vocab_size() const { return impl_->vocab; }

std::shared_ptr<const compiled_grammar> grammar_compiler::compile(const grammar_spec& spec) const {
  try {
    if (spec.k == grammar_spec::kind::structural_tag)
      return std::make_shared<const compiled_grammar>(impl_->xg.CompileStructuralTag(spec.text), impl_->vocab);
    const std::string& schema = spec.k == grammar_spec::kind::json_object ? std::string(any_object_schema) : spec.text;
    // Compact JSON (no free whitespace): a model that may emit any whitespace can loop on
    // newlines until max_tokens (vLLM and SGLang default to the same for xgrammar).
    // strict_mode: properties not in the schema are refused, as OpenAI's strict json_schema.
    const auto separators = std::make_pair(std::string(","), std::string(":"));
    auto g = impl_->xg.CompileJSONSchema(schema, /*any_whitespace=*/false, std::nullopt, separators, /*strict_mode=*/true);
    return std::make_shared<const compiled_grammar>(std::move(g), impl_->vocab);
  } catch (const std::exception& e) {
    throw grammar_error(without_source_location(e.what()));
  }
}

}  // namespace tandem
