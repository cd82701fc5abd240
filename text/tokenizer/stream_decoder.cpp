#include "tandem/stream_decoder.hpp"

#include "utf8.hpp"

namespace tandem {

stream_decoder::stream_decoder(const tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string stream_decoder::push(int32_t id) {
  std::string bytes = tok_.token_bytes(id);  // validates the id even when it is skipped
  if (skip_special_ && tok_.is_control(id)) return {};
  pending_ += bytes;
  std::string out;
  // Bytes that can never become valid turn into U+FFFD now, exactly as decode() would;
  // only a sequence that the next token may still complete waits.
  const size_t used = detail::append_utf8_lossy(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string stream_decoder::flush() {
  std::string out;
  detail::append_utf8_lossy(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace tandem
