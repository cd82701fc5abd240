#include "part.hpp"

#include <algorithm>
#include <string>

#include "tandem/error.hpp"

namespace tandem {

part split_evenly(int64_t n, int rank, int size, const char* what) {
  if (size < 1 || rank < 0 || rank >= size) throw error("split_evenly: rank outside the group");
  if (n < size)
    throw model_error("model", std::string(what) + ": " + std::to_string(n) + " cannot be split over " +
                                   std::to_string(size) + " ranks (each needs at least one)");
  const int64_t base = n / size, extra = n % size;
  return {rank * base + std::min<int64_t>(rank, extra), base + (rank < extra ? 1 : 0)};
}

}  // namespace tandem
