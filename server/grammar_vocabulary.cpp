#include "grammar_vocabulary.hpp"

namespace tandem {

grammar_vocabulary grammar_vocabulary_of(const tokenizer& tok) {
  grammar_vocabulary v;
  v.vocab_size = tok.vocab_size();
  v.token_bytes.reserve(static_cast<size_t>(v.vocab_size));
  for (int32_t id = 0; id < v.vocab_size; ++id)
    v.token_bytes.push_back(tok.is_special(id) ? std::string() : tok.token_bytes(id));
  v.stop_ids = tok.end_of_generation_ids();
  return v;
}

}  // namespace tandem
