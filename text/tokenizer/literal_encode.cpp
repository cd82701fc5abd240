// tokenizer::encode with literal ranges: text inside a range never becomes a CONTROL token.
//
// The input is cut into segments, alternately outside and inside the ranges. Special tokens
// are searched for within one segment at a time (the matcher is handed the text truncated at
// the segment's end), so a match never straddles a range boundary: outside a range every
// special token may match, inside one only USER_DEFINED tokens. The plain text between two
// accepted tokens is pre-tokenized as one stretch, exactly as encode(text) would, which keeps
// the split of everything else unchanged.
#include <string>

#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tokenizer_impl.hpp"
#include "utf8.hpp"

namespace tandem {
namespace {

void check_ranges(std::string_view text, std::span<const tokenizer::byte_range> literal) {
  size_t last_end = 0;
  for (size_t i = 0; i < literal.size(); ++i) {
    const tokenizer::byte_range& r = literal[i];
    if (r.begin > r.end || r.end > text.size() || r.begin < last_end) {
      throw error("tokenizer: literal range " + std::to_string(i) + " [" + std::to_string(r.begin) + ", " +
                  std::to_string(r.end) + ") is not sorted, disjoint and inside the " +
                  std::to_string(text.size()) + "-byte text");
    }
    last_end = r.end;
  }
}

}  // namespace

std::vector<int32_t> tokenizer::encode(std::string_view text, std::span<const byte_range> literal) const {
  if (size_t bad = detail::find_invalid_utf8(text); bad != std::string_view::npos) {
    throw error("tokenizer: text is not valid UTF-8 at byte " + std::to_string(bad));
  }
  check_ranges(text, literal);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<std::string_view> pieces;
  size_t plain_from = 0;  // start of the plain stretch not yet encoded
  size_t scan = 0;        // where the search for the next special token resumes
  size_t next = 0;        // the first range that does not end at or before scan
  while (scan < text.size()) {
    // Ranges behind the scan, and empty ones (they hold no text to keep plain), are done.
    while (next < literal.size() && (literal[next].end <= scan || literal[next].begin == literal[next].end)) ++next;
    const bool inside = next < literal.size() && literal[next].begin <= scan;
    const size_t segment_end = inside ? literal[next].end : next < literal.size() ? literal[next].begin : text.size();
    const detail::special_matcher& matcher = inside ? impl_->user_defined : impl_->specials;
    const detail::special_matcher::hit hit = matcher.find(text.substr(0, segment_end), scan);
    if (hit.length == 0) {
      scan = segment_end;
      continue;
    }
    impl_->encode_plain(text.substr(plain_from, hit.pos - plain_from), pieces, out);
    out.push_back(hit.id);
    plain_from = scan = hit.pos + hit.length;
  }
  impl_->encode_plain(text.substr(plain_from), pieces, out);
  return out;
}

std::optional<int32_t> tokenizer::find_control_text(std::string_view text) const {
  const detail::special_matcher::hit hit = impl_->controls.find(text, 0);
  if (hit.length == 0) return std::nullopt;
  return hit.id;
}

}  // namespace tandem
