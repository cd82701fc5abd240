#pragma once
// stream_chunk: the SSE event of one streamed text delta, written without a JSON DOM.
//
// Why: a text delta (no logprobs, no finish reason, chat's role already sent) is almost
// every event a streaming server writes, one per token per stream; building each as
// boost::json objects (chunk_base + choice_json: a dozen keys and strings) and serializing
// them was most of the I/O threads' time per token outside the kernel. These functions
// write the same bytes: the chunk's head (id, object, created, model, system_fingerprint,
// usage) is serialized once per request by the DOM itself, and the text is escaped by the
// same serializer (boost::json::serialize(string_view)). Key order is the DOM's: index,
// text | delta.content, logprobs, finish_reason. tests/http/stream_chunk_test.cpp compares
// the two byte for byte.
#include <boost/json.hpp>
#include <string>
#include <string_view>

namespace tandem::http {

// `data: {<base's members>,"choices":[{"index":` — what every text delta event opens with.
std::string chunk_head(const boost::json::object& base);

// The whole SSE event ("data: {...}\n\n") of a text delta for choice `index`: completions
// carry it as "text", chat as "delta":{"content":...}.
std::string text_delta_event(std::string_view head, size_t index, bool chat, std::string_view text);

}  // namespace tandem::http
