// render_locating_content: finds message content in a rendered prompt by rendering again
// with placeholders and matching the two renderings (tandem/chat_prompt.hpp says why this
// is sound: every byte outside a located span comes from a rendering that never saw the
// located content).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string_view>

#include "builtins.hpp"
#include "tandem/chat_prompt.hpp"

namespace tandem {
namespace {

// Placeholders are ASCII letters, digits and '_': no whitespace for strip() to eat, nothing
// a tokenizer or JSON escaping treats specially. The nonce keeps them out of anything the
// template or the request holds.
struct placeholder_scheme {
  std::string prefix;  // "TANDEMCONTENT<16 hex>_"; a placeholder is prefix + index + "_"

  std::string make(size_t message) const { return prefix + std::to_string(message) + "_"; }
};

bool mentions(const chat_template& tpl, std::span<const chat_message> messages, const chat_render_options& opt,
              std::string_view s) {
  auto has = [s](const std::string& field) { return field.find(s) != std::string::npos; };
  if (has(tpl.source()) || has(opt.tools_json) || has(opt.bos_token) || has(opt.eos_token)) return true;
  for (const auto& [k, v] : opt.extra)
    if (has(v)) return true;
  return std::any_of(messages.begin(), messages.end(), [&](const chat_message& m) {
    return has(m.role) || has(m.content) || has(m.name) || has(m.tool_call_id) || has(m.tool_calls_json);
  });
}

placeholder_scheme pick_scheme(const chat_template& tpl, std::span<const chat_message> messages,
                               const chat_render_options& opt) {
  std::random_device seed;
  std::mt19937_64 rng((static_cast<uint64_t>(seed()) << 32) | seed());
  // A request cannot guess a fresh 64-bit nonce, so the first draw nearly always does.
  for (int attempt = 0; attempt < 16; ++attempt) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
    placeholder_scheme s{std::string("TANDEMCONTENT") + hex + "_"};
    if (!mentions(tpl, messages, opt, s.prefix)) return s;
  }
  throw error("chat prompt: no placeholder for message content is free of the request's text");
}

// A placeholder at `pos` of `shadow` (which starts with the prefix): the message it names
// and its length, or nullopt when it is not one of ours (e.g. a template cut it short).
struct placeholder_hit {
  size_t message, length;
};
std::optional<placeholder_hit> read_placeholder(std::string_view shadow, size_t pos, const placeholder_scheme& s,
                                                std::span<const size_t> which) {
  size_t p = pos + s.prefix.size();
  size_t message = 0, digits = 0;
  while (p < shadow.size() && shadow[p] >= '0' && shadow[p] <= '9' && digits < 9) {
    message = message * 10 + static_cast<size_t>(shadow[p] - '0');
    ++p, ++digits;
  }
  if (digits == 0 || p >= shadow.size() || shadow[p] != '_') return std::nullopt;
  if (std::find(which.begin(), which.end(), message) == which.end()) return std::nullopt;
  return placeholder_hit{message, p + 1 - pos};
}

// What the template may have made of the content at a placeholder: the content itself, or
// with whitespace stripped as Python's strip / lstrip / rstrip (and jinja's trim) do.
std::vector<std::string> candidates(const std::string& content) {
  using chat_detail::str_strip;
  const chat_detail::value no_chars;  // undefined: strip whitespace
  std::vector<std::string> out{content};
  for (std::string c : {str_strip(content, true, true, no_chars), str_strip(content, true, false, no_chars),
                        str_strip(content, false, true, no_chars)})
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(std::move(c));
  return out;
}

}  // namespace

std::optional<located_prompt> render_locating_content(const chat_template& tpl,
                                                      std::span<const chat_message> messages,
                                                      const chat_render_options& opt,
                                                      std::span<const size_t> which) {
  located_prompt out;
  out.text = tpl.render(messages, opt);
  if (which.empty()) return out;

  const placeholder_scheme scheme = pick_scheme(tpl, messages, opt);
  std::vector<chat_message> shadow_messages(messages.begin(), messages.end());
  for (size_t i : which) {
    if (i >= shadow_messages.size()) return std::nullopt;
    shadow_messages[i].content = scheme.make(i);
  }
  std::string shadow;
  try {
    shadow = tpl.render(shadow_messages, opt);
  } catch (const error&) {
    return std::nullopt;  // the template treats the placeholder differently: not verbatim
  }

  const std::string_view real = out.text;
  size_t at = 0;      // position in shadow
  size_t cursor = 0;  // the matching position in real
  // The literal run of shadow from `from` to the next placeholder prefix (or the end).
  auto literal_from = [&](size_t from) {
    const size_t next = shadow.find(scheme.prefix, from);
    return std::string_view(shadow).substr(from, (next == std::string::npos ? shadow.size() : next) - from);
  };
  for (;;) {
    const std::string_view literal = literal_from(at);
    if (real.compare(cursor, literal.size(), literal) != 0) return std::nullopt;
    cursor += literal.size();
    at += literal.size();
    if (at == shadow.size()) break;
    const std::optional<placeholder_hit> hit = read_placeholder(shadow, at, scheme, which);
    if (!hit) return std::nullopt;
    at += hit->length;
    const std::string_view after = literal_from(at);
    const bool after_is_last = at + after.size() == shadow.size();
    bool matched = false;
    for (const std::string& c : candidates(messages[hit->message].content)) {
      if (real.compare(cursor, c.size(), c) != 0) continue;
      const std::string_view rest = real.substr(cursor + c.size());
      if (after_is_last ? rest != after : !rest.starts_with(after)) continue;
      if (!c.empty()) out.content.push_back({hit->message, cursor, cursor + c.size()});
      cursor += c.size();
      matched = true;
      break;
    }
    if (!matched) return std::nullopt;
  }
  if (cursor != real.size()) return std::nullopt;
  return out;
}

}  // namespace tandem
