#pragma once
// Server-sent events framing as OpenAI clients parse it: "data: <json>\n\n" per event,
// "data: [DONE]\n\n" at the end.
#include <string>
#include <string_view>

namespace tandem::http {

inline std::string sse_event(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out += "data: ";
  out += json;  // serialized JSON never holds a raw newline, so one data: line suffices
  out += "\n\n";
  return out;
}

inline std::string sse_done() { return "data: [DONE]\n\n"; }

}  // namespace tandem::http
