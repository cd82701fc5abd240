#include "pre_tokenizer.hpp"

#include <array>

namespace tandem::detail {
namespace {

// Unicode White_Space, spelled out: Hugging Face's regex engine (Oniguruma) reads \s as
// White_Space, while PCRE2's UCP \s also takes U+180E. Spelling it out keeps them equal.
#define TANDEM_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                  "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// GPT-2's pattern as `tokenizers`' ByteLevel uses it (with a final \s+ alternative).
constexpr const char* gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TANDEM_WS "\\p{L}\\p{N}]+"
    "|[" TANDEM_WS "]+(?![^" TANDEM_WS "])|[" TANDEM_WS "]+";

#undef TANDEM_WS

constexpr std::array<std::string_view, 6> digit_split_names = {
    "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"};
constexpr std::array<std::string_view, 6> gpt2_names = {
    "default", "gpt-2", "gpt2", "mpt", "olmo", "jais"};

template <size_t N>
bool contains(const std::array<std::string_view, N>& names, std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

std::optional<pre_tokenizer> pre_tokenizer::create(std::string_view name) {
  const bool digits = contains(digit_split_names, name);
  if (!digits && !contains(gpt2_names, name)) return std::nullopt;
  auto words = std::make_shared<const pcre2_regex>(gpt2_pattern);
  auto digit = digits ? std::make_shared<const pcre2_regex>("\\p{N}") : nullptr;
  return pre_tokenizer(std::move(digit), std::move(words));
}

std::string pre_tokenizer::known_names() {
  std::string out;
  for (std::string_view n : digit_split_names) out.append(out.empty() ? "" : ", ").append(n);
  for (std::string_view n : gpt2_names) out.append(", ").append(n);
  return out;
}

void pre_tokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (!digits_) {
    split_words(text, out);
    return;
  }
  std::vector<std::pair<size_t, size_t>> digits;
  digits_->find_all(text, digits);
  size_t pos = 0;
  for (auto [begin, end] : digits) {
    // The stretch before a digit ends there: look-aheads must not see past it.
    if (begin > pos) split_words(text.substr(pos, begin - pos), out);
    out.push_back(text.substr(begin, end - begin));
    pos = end;
  }
  if (pos < text.size()) split_words(text.substr(pos), out);
}

void pre_tokenizer::split_words(std::string_view text, std::vector<std::string_view>& out) const {
  std::vector<std::pair<size_t, size_t>> matches;
  words_->find_all(text, matches);
  size_t pos = 0;
  for (auto [begin, end] : matches) {
    if (begin > pos) out.push_back(text.substr(pos, begin - pos));  // unmatched text is kept
    out.push_back(text.substr(begin, end - begin));
    pos = end;
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
}

}  // namespace tandem::detail
