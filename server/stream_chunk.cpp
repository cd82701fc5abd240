#include "stream_chunk.hpp"

#include <fmt/format.h>

namespace tandem::http {

std::string chunk_head(const boost::json::object& base) {
  std::string head = "data: " + boost::json::serialize(base);
  head.pop_back();  // the object's closing brace: "choices" goes last, as chunk["choices"] = ... puts it
  if (!base.empty()) head += ',';
  head += R"("choices":[{"index":)";
  return head;
}

std::string text_delta_event(std::string_view head, size_t index, bool chat, std::string_view text) {
  constexpr std::string_view tail = R"(,"logprobs":null,"finish_reason":null}]})"
                                    "\n\n";
  const std::string escaped = boost::json::serialize(text);
  std::string out;
  out.reserve(head.size() + escaped.size() + tail.size() + 40);
  out += head;
  fmt::format_to(std::back_inserter(out), "{}", index);
  out += chat ? R"(,"delta":{"content":)" : R"(,"text":)";
  out += escaped;
  if (chat) out += '}';
  out += tail;
  return out;
}

}  // namespace tandem::http
