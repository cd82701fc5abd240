#pragma once
// A contiguous part of some count of units (heads, FFN columns, experts, layers) that one
// rank holds, and the even split that gives every rank its part.
#include <cstdint>

namespace tandem {

// A contiguous part [begin, begin + count) of some count of units.
struct part {
  int64_t begin = 0, count = 0;
};

// `n` units over `size` ranks as evenly as possible, the first ranks taking one more
// (9 heads over 2 ranks: 5 and 4). model_error when a rank would get none.
part split_evenly(int64_t n, int rank, int size, const char* what);

}  // namespace tandem
