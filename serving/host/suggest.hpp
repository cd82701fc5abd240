#pragma once
// "Did you mean ...": the closest valid name to a misspelt one (internal to the host).
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::host_detail {

// Optimal-string-alignment Damerau-Levenshtein distance (adjacent swaps cost 1),
// case-insensitive.
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is close enough to be a plausible typo
// (distance <= 2, and less than the word's length); ties go to the earliest candidate.
std::optional<std::string> closest(std::string_view word, std::span<const std::string> candidates);

// "did you mean 'x'?" or "" when nothing is close.
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);

}  // namespace tandem::host_detail
