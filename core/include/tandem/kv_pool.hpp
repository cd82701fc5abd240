#pragma once
// kv_pool: bookkeeping of the paged KV cache (the memory itself is a backend kv_storage).
//
// The pool is a fixed number of pages of `page_size` token slots. Each page has a
// reference count so that later prefix caching can share a page between sequences by
// reference; a page returns to the free list when its count drops to zero.
//
//   kv_pool pool(1024, 16);
//   std::vector<int32_t> table;
//   if (!pool.grow(table, 40)) ...   // 3 pages for 40 tokens, or false and no change
//   pool.release(table);             // drops this sequence's references
#include <cstdint>
#include <vector>

#include "tandem/export.hpp"

namespace tandem {

class TANDEM_API kv_pool {
 public:
  kv_pool(int64_t n_pages, int page_size);

  int64_t n_pages() const { return static_cast<int64_t>(refs_.size()); }
  int page_size() const { return page_size_; }
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_pages() const { return n_pages() - free_pages(); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }

  // Extends `table` so it covers `tokens` slots. All or nothing: false leaves it unchanged.
  bool grow(std::vector<int32_t>& table, int64_t tokens);
  // Drops one reference to each page of `table` and clears it.
  void release(std::vector<int32_t>& table);
  // Adds a reference to a page another sequence holds (prefix sharing).
  void retain(int32_t page);
  int32_t ref_count(int32_t page) const { return refs_.at(page); }

 private:
  int page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // stack: most recently freed on top
};

}  // namespace tandem
