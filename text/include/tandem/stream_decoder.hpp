#pragma once
// stream_decoder: turns generated token ids into text as they arrive, one id at a time.
//
//   tandem::stream_decoder dec(tok);
//   for (int32_t id : generated) send(dec.push(id));   // only complete UTF-8
//   send(dec.flush());                                   // at the end of the stream
//
// Byte-level BPE often splits one character over several tokens (most emoji take 2-4).
// push() returns only complete, valid UTF-8 and holds back a trailing sequence that may
// still be completed by later tokens; bytes that can never become valid are emitted as
// U+FFFD at once. The concatenation of every push() and the final flush() equals
// tokenizer::decode() of the same ids with the same skip_special.
#include <cstdint>
#include <string>

#include "tandem/export.hpp"
#include "tandem/tokenizer.hpp"

namespace tandem {

class TANDEM_API stream_decoder {
 public:
  // Keeps its own (cheap, shared) copy of `tok`.
  explicit stream_decoder(const tokenizer& tok, bool skip_special = false);

  // New complete text after `id` (may be empty). Throws tandem::error for a bad id.
  std::string push(int32_t id);
  // Whatever is held back, an incomplete sequence becoming U+FFFD; resets the decoder.
  std::string flush();
  // Bytes held back now (0-3).
  size_t pending() const { return pending_.size(); }

 private:
  tokenizer tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace tandem
