#pragma once
// Log-probabilities in the two OpenAI shapes: chat ({"content": [{token, logprob, bytes,
// top_logprobs}]}) and legacy completions ({tokens, token_logprobs, top_logprobs,
// text_offset}).
#include <boost/json.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {
class completion_source;
}

namespace tandem::http {

struct logprob_entry {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // best first
  bool known = true;  // false: no logprob (a prompt's first token), written as null
};

boost::json::value chat_logprobs(std::span<const logprob_entry> entries, const completion_source& src);
// text_offset: where the first entry's text starts in the choice's text.
boost::json::value completion_logprobs(std::span<const logprob_entry> entries, const completion_source& src,
                                       size_t text_offset);

// `bytes` as valid UTF-8: each invalid sequence becomes U+FFFD (a token may hold half a
// character, and JSON strings must be valid UTF-8).
std::string valid_utf8(std::string_view bytes);

}  // namespace tandem::http
