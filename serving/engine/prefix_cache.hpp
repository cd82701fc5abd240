#pragma once
// prefix_cache: automatic prefix caching of one sequence's pages on the kv_pool.
//
// A sequence's full pages are keyed as a hash chain (block_hash.hpp). Before a waiting
// sequence computes anything, attach() takes references on the longest cached chain that
// matches its tokens — shared by reference, never copied — so it starts past the cached
// prefix. After every step, publish() offers each page the sequence has completely computed
// (prompt and generated tokens alike), so the next turn of a conversation hits it at once.
// The last token is never taken from the cache: its logits must be computed.
//
//   prefix_cache cache(pool, {.algo = hash_algo::xxhash});
//   cache_seq s;
//   int64_t start = cache.attach(s, tokens);   // tokens whose KV is already there
//   pool.grow(s.pages, start + n); ...compute...
//   cache.publish(s, tokens, start + n);
//   cache.release(s);
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "block_hash.hpp"
#include "tandem/kv_pool.hpp"

namespace tandem {

// The cache's part of one sequence: its page table and the keys of its full pages.
struct cache_seq {
  std::vector<int32_t> pages;
  std::vector<block_hash> hashes;  // keys of the first hashes.size() pages of its tokens
  size_t published = 0;            // pages offered to the pool's index so far
  std::string salt;                // per-tenant salt, mixed into the first page
};

class prefix_cache {
 public:
  struct options {
    bool enabled = true;
    hash_algo algo = hash_algo::xxhash;
  };
  prefix_cache(kv_pool& pool, options o) : pool_(pool), o_(o) {}

  bool enabled() const { return o_.enabled; }
  // Tokens of `tokens` the cache could supply now (whole pages, never the last token).
  int64_t lookup(cache_seq& s, std::span<const int32_t> tokens);
  // Takes references on the cached pages that extend s's table (which must hold only
  // whole, computed pages). Returns the number of tokens s now has computed.
  int64_t attach(cache_seq& s, std::span<const int32_t> tokens);
  // Offers the pages of s that `computed` tokens fill completely.
  void publish(cache_seq& s, std::span<const int32_t> tokens, int64_t computed);
  // Drops s's references (its keys are kept: the tokens do not change on recompute).
  void release(cache_seq& s, double protect_until_s = 0);

 private:
  int64_t max_pages(std::span<const int32_t> tokens) const;
  void ensure_hashes(cache_seq& s, std::span<const int32_t> tokens, size_t n_pages);

  kv_pool& pool_;
  options o_;
};

}  // namespace tandem
