#include "pre_tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace tandem::detail {
namespace {

// Unicode White_Space, spelled out: Hugging Face's regex engine (Oniguruma) reads \s as
// White_Space, while PCRE2's UCP \s also takes U+180E. Spelling it out keeps them equal.
#define TANDEM_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
                  "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr std::string_view white_space = TANDEM_WS;
#undef TANDEM_WS
// Oniguruma's Unicode \w: Letter | Mark | Decimal_Number | Connector_Punctuation.
constexpr std::string_view word_chars = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view hex_chars = "0-9A-Fa-f";

// GPT-2's pattern as `tokenizers`' ByteLevel uses it (with a final \s+ alternative).
constexpr const char* gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// GLM-4's (and GLM-5's) tokenizer.json Split pattern; llama.cpp's pre-type "glm4".
constexpr const char* glm4_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

constexpr std::array<std::string_view, 6> digit_split_names = {
    "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone"};
constexpr std::array<std::string_view, 2> glm4_names = {"glm4", "chatglm-bpe"};
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

std::string pre_tokenizer::to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  int depth = 0;  // character-class nesting (Oniguruma nests [..[..]..])
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 'u' && i + 4 < p.size() &&
          std::all_of(p.begin() + i + 1, p.begin() + i + 5, [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
        out.append("\\x{").append(p.substr(i + 1, 4)).append("}");  // Oniguruma's \uHHHH
        i += 4;
        continue;
      }
      std::string_view set;
      bool negated = false;
      switch (e) {
        case 's': set = white_space; break;
        case 'S': set = white_space; negated = true; break;
        case 'w': set = word_chars; break;
        case 'W': set = word_chars; negated = true; break;
        case 'h': set = hex_chars; break;
        case 'H': set = hex_chars; negated = true; break;
        default: break;
      }
      if (set.empty() || (negated && depth > 0)) {  // other escapes mean the same in PCRE2;
        out += c;                                   // a negated set inside a class stays
        out += e;                                   // (PCRE2's \S, \W; \H is not hex there)
        continue;
      }
      if (depth > 0) out.append(set);
      else out.append(negated ? "[^" : "[").append(set).append("]");
      continue;
    }
    out += c;
    if (c == '[') {
      if (depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
        const size_t end = p.find(":]", i + 2);
        if (end != std::string_view::npos) {
          out.append(p.substr(i + 1, end + 2 - (i + 1)));
          i = end + 1;
          continue;
        }
      }
      ++depth;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
    } else if (c == ']' && depth > 0) {
      --depth;
    }
  }
  return out;
}

std::optional<pre_tokenizer> pre_tokenizer::create(std::string_view name) {
  if (contains(glm4_names, name)) return from_hf_patterns({glm4_pattern});
  if (contains(digit_split_names, name)) return from_hf_patterns({"\\p{N}", gpt2_pattern});
  if (contains(gpt2_names, name)) return from_hf_patterns({gpt2_pattern});
  return std::nullopt;
}

pre_tokenizer pre_tokenizer::from_hf_patterns(const std::vector<std::string>& patterns) {
  std::vector<std::shared_ptr<const pcre2_regex>> steps;
  steps.reserve(patterns.size());
  for (const std::string& p : patterns) steps.push_back(std::make_shared<const pcre2_regex>(to_pcre2(p)));
  return pre_tokenizer(std::move(steps));
}

std::string pre_tokenizer::known_names() {
  std::string out;
  for (std::string_view n : digit_split_names) out.append(out.empty() ? "" : ", ").append(n);
  for (std::string_view n : glm4_names) out.append(", ").append(n);
  for (std::string_view n : gpt2_names) out.append(", ").append(n);
  return out;
}

void pre_tokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (steps_.empty()) {
    if (!text.empty()) out.push_back(text);
    return;
  }
  if (steps_.size() == 1) {
    split_step(*steps_[0], text, out);
    return;
  }
  std::vector<std::string_view> cur{text}, next;
  for (size_t s = 0; s + 1 < steps_.size(); ++s) {
    next.clear();
    for (std::string_view piece : cur) split_step(*steps_[s], piece, next);
    cur.swap(next);
  }
  for (std::string_view piece : cur) split_step(*steps_.back(), piece, out);
}

void pre_tokenizer::split_step(const pcre2_regex& re, std::string_view text, std::vector<std::string_view>& out) {
  std::vector<std::pair<size_t, size_t>> matches;
  re.find_all(text, matches);
  size_t pos = 0;
  for (auto [begin, end] : matches) {
    if (begin > pos) out.push_back(text.substr(pos, begin - pos));  // unmatched text is kept
    out.push_back(text.substr(begin, end - begin));
    pos = end;
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
}

}  // namespace tandem::detail
