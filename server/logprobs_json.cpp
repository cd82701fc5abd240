#include "logprobs_json.hpp"

#include "completion_source.hpp"

namespace tandem::http {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t utf8_seq(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  if (n == 2 && b < 0xC2) return 0;  // overlong
  return n;
}

boost::json::array byte_list(std::string_view bytes) {
  boost::json::array a;
  for (char c : bytes) a.emplace_back(static_cast<unsigned char>(c));
  return a;
}

boost::json::object chat_token(const completion_source& src, int32_t id, float lp) {
  const std::string raw = src.token_bytes(id);
  boost::json::object o;
  o["token"] = valid_utf8(raw);
  o["logprob"] = lp;
  o["bytes"] = byte_list(raw);
  return o;
}

}  // namespace

std::string valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = utf8_seq(bytes, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(bytes.substr(i, n));
      i += n;
    }
  }
  return out;
}

boost::json::value chat_logprobs(std::span<const logprob_entry> entries, const completion_source& src) {
  boost::json::array content;
  for (const auto& e : entries) {
    boost::json::object o = chat_token(src, e.token, e.logprob);
    boost::json::array tops;
    for (const auto& [id, lp] : e.top) tops.push_back(chat_token(src, id, lp));
    o["top_logprobs"] = std::move(tops);
    content.push_back(std::move(o));
  }
  boost::json::object out;
  out["content"] = std::move(content);
  return out;
}

boost::json::value completion_logprobs(std::span<const logprob_entry> entries, const completion_source& src,
                                       size_t text_offset) {
  boost::json::array tokens, lps, tops, offsets;
  for (const auto& e : entries) {
    const std::string text = valid_utf8(src.token_bytes(e.token));
    tokens.emplace_back(text);
    if (!e.known) {
      lps.emplace_back(nullptr);
      tops.emplace_back(nullptr);
    } else {
      lps.emplace_back(e.logprob);
      boost::json::object alt;
      for (const auto& [id, lp] : e.top) alt[valid_utf8(src.token_bytes(id))] = lp;
      tops.emplace_back(std::move(alt));
    }
    offsets.emplace_back(text_offset);
    text_offset += text.size();
  }
  boost::json::object out;
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(lps);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

}  // namespace tandem::http
