#include "suggest.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace tandem::host_detail {

size_t edit_distance(std::string_view a, std::string_view b) {
  auto lower = [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); };
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between a[0..i) and b[0..j).
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> closest(std::string_view word, std::span<const std::string> candidates) {
  std::optional<std::string> best;
  size_t best_d = 3;  // only distances <= 2 are suggested
  for (const std::string& c : candidates) {
    if (c == word) continue;
    size_t d = edit_distance(word, c);
    if (d < best_d && d < word.size()) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  auto c = closest(word, candidates);
  return c ? "did you mean '" + *c + "'?" : std::string();
}

}  // namespace tandem::host_detail
