#include "tandem/kv_pool.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem {

kv_pool::kv_pool(int64_t n_pages, int page_size) : page_size_(page_size) {
  if (n_pages <= 0 || n_pages > INT32_MAX) throw error("kv pool: page count out of range");
  if (page_size <= 0) throw error("kv pool: page size must be positive");
  refs_.assign(n_pages, 0);
  free_.reserve(n_pages);
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

bool kv_pool::grow(std::vector<int32_t>& table, int64_t tokens) {
  int64_t need = pages_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > free_pages()) return false;
  for (int64_t i = 0; i < need; ++i) {
    int32_t p = free_.back();
    free_.pop_back();
    refs_[p] = 1;
    table.push_back(p);
  }
  return true;
}

void kv_pool::release(std::vector<int32_t>& table) {
  for (int32_t p : table) {
    if (p < 0 || p >= n_pages() || refs_[p] <= 0)
      throw error("kv pool: release of page " + std::to_string(p) + " that is not held");
    if (--refs_[p] == 0) free_.push_back(p);
  }
  table.clear();
}

void kv_pool::retain(int32_t page) {
  if (page < 0 || page >= n_pages() || refs_[page] <= 0)
    throw error("kv pool: retain of page " + std::to_string(page) + " that is not held");
  ++refs_[page];
}

}  // namespace tandem
