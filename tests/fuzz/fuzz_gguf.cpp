// libFuzzer harness: bytes as a GGUF file. parse() either gives a file whose every tensor
// byte is readable (and whose first rows dequantize) or throws model_error; the metadata of
// a parsed file then goes through the tokenizer and chat-template constructors, which
// either build or throw their documented errors.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "fuzz_support.hpp"
#include "gguf_file.hpp"
#include "tandem/chat_template.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace {

uint64_t touch(const tandem::gguf::gguf_file& f) {
  uint64_t sum = 0;
  std::vector<float> row;
  for (const auto& t : f.tensors()) {
    const auto* p = static_cast<const unsigned char*>(t.data);
    for (size_t i = 0; i < t.nbytes; ++i) sum += p[i];
    const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    if (t.nbytes == 0 || cols > (1 << 16)) continue;
    row.resize(static_cast<size_t>(cols));
    tandem::dequantize_row(t.type, t.data, row.data(), cols);
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const tandem::gguf::gguf_file f = tandem::gguf::gguf_file::parse(bytes, "fuzz.gguf");
    volatile uint64_t sum = touch(f);
    (void)sum;
    try {
      const tandem::tokenizer tok = tandem::tokenizer::from_metadata(f.metadata(), "fuzz.gguf");
      tandem::fuzz::require(tok.vocab_size() > 0, "a tokenizer was built with no tokens");
    } catch (const tandem::model_error&) {
    }
    if (auto src = f.metadata().get_string("tokenizer.chat_template")) {
      try {
        const tandem::chat_template tpl(*src);
      } catch (const tandem::chat_template_error&) {
      }
    }
  } catch (const tandem::model_error&) {
  }
  return 0;
}
