#include "synthetic_vocab.hpp"

#include <algorithm>
#include <stdexcept>

#include "byte_level.hpp"

namespace tandem::test {

synthetic_vocab synthetic_vocab::make(const std::vector<std::string>& merges,
                                      const std::vector<unsigned char>& missing_bytes) {
  synthetic_vocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<x>", "<x>y"};
  v.types = {3, 3, 3, 3, 4};
  const auto& alphabet = detail::byte_alphabet::get();
  for (int b = 0; b < 256; ++b) {
    if (std::count(missing_bytes.begin(), missing_bytes.end(), b)) continue;
    v.tokens.push_back(alphabet.symbol(static_cast<uint8_t>(b)));
    v.types.push_back(1);
  }
  for (const std::string& m : merges) {
    const size_t space = m.find(' ');
    v.tokens.push_back(m.substr(0, space) + m.substr(space + 1));
    v.types.push_back(1);
  }
  v.merges = merges;
  return v;
}

model_metadata synthetic_vocab::metadata(const std::string& pre) const {
  model_metadata meta;
  meta.set("tokenizer.ggml.model", std::string("gpt2"));
  meta.set("tokenizer.ggml.pre", pre);
  meta.set("tokenizer.ggml.tokens", tokens);
  meta.set("tokenizer.ggml.token_type", types);
  meta.set("tokenizer.ggml.merges", merges);
  meta.set("tokenizer.ggml.bos_token_id", uint64_t{1});
  meta.set("tokenizer.ggml.eos_token_id", uint64_t{2});
  meta.set("tokenizer.ggml.add_bos_token", false);
  return meta;
}

int32_t synthetic_vocab::id(const std::string& token) const {
  auto it = std::find(tokens.begin(), tokens.end(), token);
  if (it == tokens.end()) throw std::runtime_error("no token " + token);
  return static_cast<int32_t>(it - tokens.begin());
}

}  // namespace tandem::test
