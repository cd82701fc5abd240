#include "special_matcher.hpp"

#include <algorithm>

namespace tandem::detail {

void special_matcher::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  auto& bucket = by_first_byte_[static_cast<uint8_t>(text[0])];
  for (const entry& e : bucket) {
    if (e.text == text) return;  // a duplicate vocab entry: the first id wins
  }
  bucket.push_back({text, id});
  std::stable_sort(bucket.begin(), bucket.end(),
                   [](const entry& a, const entry& b) { return a.text.size() > b.text.size(); });
  ++count_;
}

special_matcher::hit special_matcher::find(std::string_view text, size_t from) const {
  if (count_ == 0) return {text.size(), 0, -1};
  for (size_t pos = from; pos < text.size(); ++pos) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    for (const entry& e : bucket) {
      if (text.compare(pos, e.text.size(), e.text) == 0) return {pos, e.text.size(), e.id};
    }
  }
  return {text.size(), 0, -1};
}

}  // namespace tandem::detail
