#pragma once
// kv_pool: bookkeeping of the paged KV cache (the memory itself is a backend kv_storage),
// with the prefix cache's index of full pages.
//
// Every page is in exactly one of three states:
//   used    — referenced by at least one sequence (ref_count > 0);
//   cached  — unreferenced, but holds a full page of a hashed prefix that a later request
//             may reuse by reference (evictable);
//   free    — unreferenced and holding nothing worth keeping.
// free_pages() + used_pages() + cached_pages() == n_pages() always.
//
// Eviction takes cached pages only when no free page is left: least recently released
// first, and within one released table the tail before the head (a longer prefix is less
// shareable). Pages released under protection (session retention) are evicted only after
// every unprotected cached page, until their protection expires (advance()) or the
// protected share is exceeded (the oldest protection is dropped first).
//
//   kv_pool pool(1024, 16);
//   std::vector<int32_t> table;
//   if (!pool.grow(table, 40)) ...   // 3 pages for 40 tokens, or false and no change
//   pool.publish(table[0], h0);      // page 0 is full and computed: cache it as h0
//   pool.release(table);             // page 0 stays cached, pages 1-2 become free
//   int32_t p = pool.lookup(h0);     // later: the cached page, or -1
//   pool.retain(p);                  // share it by reference
#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tandem/export.hpp"

namespace tandem {

// Key of one full page in the prefix cache (xxHash-128 fills two words, SHA-256 all four).
struct block_hash {
  std::array<uint64_t, 4> w{};
  bool operator==(const block_hash&) const = default;
};

struct block_hash_hasher {
  size_t operator()(const block_hash& h) const { return static_cast<size_t>(h.w[0] ^ (h.w[1] * 0x9e3779b97f4a7c15ull)); }
};

class TANDEM_API kv_pool {
 public:
  kv_pool(int64_t n_pages, int page_size);

  int64_t n_pages() const { return static_cast<int64_t>(refs_.size()); }
  int page_size() const { return page_size_; }
  int64_t free_pages() const { return free_.size; }
  int64_t cached_pages() const { return lru_.size + protected_.size; }
  int64_t protected_pages() const { return protected_.size; }
  int64_t used_pages() const { return n_pages() - free_pages() - cached_pages(); }
  // Pages grow() can hand out now: free ones plus evictable cached ones.
  int64_t available_pages() const { return free_pages() + cached_pages(); }
  int64_t pages_for(int64_t tokens) const { return (tokens + page_size_ - 1) / page_size_; }
  uint64_t evicted_pages() const { return evicted_; }

  // Extends `table` so it covers `tokens` slots, evicting cached pages when no free page is
  // left. All or nothing: false leaves the pool and the table unchanged.
  bool grow(std::vector<int32_t>& table, int64_t tokens);
  // Drops one reference to each page of `table` and clears it. Pages that reach zero stay
  // cached when published, else become free. Pages published here are protected from
  // eviction until `protect_until_s` (engine clock) when it is later than now.
  void release(std::vector<int32_t>& table, double protect_until_s = 0);
  // Adds a reference to a page that is used or cached (prefix sharing); throws otherwise.
  void retain(int32_t page);
  int32_t ref_count(int32_t page) const { return refs_.at(page); }

  // The cached or used page published under `h`, or -1.
  int32_t lookup(const block_hash& h) const;
  // Records that used page `page` holds the full block `h`. False (and nothing changes)
  // when another page already holds `h`: the duplicate stays private and is freed normally.
  bool publish(int32_t page, const block_hash& h);
  bool is_published(int32_t page) const { return hashed_.at(page) != 0; }

  // Moves the engine clock: expired protections become plain LRU entries.
  void advance(double now_s);
  // Most pages protection may keep at once (a share of the pool); 0 disables protection.
  void set_protection_cap(int64_t pages);
  // Forgets every cached prefix: cached pages become free, used pages stop being shareable.
  // Returns the number of pages that were cached.
  int64_t reset_cache();
  // Throws tandem::error when an internal invariant is broken (for tests).
  void check() const;

 private:
  enum class where : uint8_t { used, free, lru, prot };
  struct list {
    int32_t head = -1, tail = -1;
    int64_t size = 0;
  };
  void link_back(list& l, where w, int32_t p);
  void link_before(list& l, where w, int32_t p, int32_t at);
  void unlink(int32_t p);
  list& list_of(where w);
  void evict(int32_t p);
  int32_t take_page();
  void demote(int64_t n);

  int page_size_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> prev_, next_;
  std::vector<where> where_;
  std::vector<uint8_t> hashed_;
  std::vector<block_hash> hash_;
  std::vector<double> protect_until_;
  std::vector<double> released_at_;  // engine clock of the last release (LRU order)
  std::unordered_map<block_hash, int32_t, block_hash_hasher> index_;
  list free_, lru_, protected_;
  int64_t protect_cap_ = 0;
  double now_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace tandem
