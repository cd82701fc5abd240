#include "prefix_cache.hpp"

#include "tandem/error.hpp"

namespace tandem {

// Pages that may come from the cache: whole pages before the last token.
int64_t prefix_cache::max_pages(std::span<const int32_t> tokens) const {
  if (tokens.empty()) return 0;
  return (static_cast<int64_t>(tokens.size()) - 1) / pool_.page_size();
}

void prefix_cache::ensure_hashes(cache_seq& s, std::span<const int32_t> tokens, size_t n_pages) {
  const size_t page = static_cast<size_t>(pool_.page_size());
  if (n_pages * page > tokens.size()) throw error("prefix cache: hashing past the end of a sequence");
  while (s.hashes.size() < n_pages) {
    const size_t i = s.hashes.size();
    const block_hash parent = i == 0 ? block_hash{} : s.hashes.back();
    s.hashes.push_back(hash_block(o_.algo, parent, tokens.subspan(i * page, page), i == 0 ? s.salt : ""));
  }
}

int64_t prefix_cache::lookup(cache_seq& s, std::span<const int32_t> tokens) {
  if (!o_.enabled) return 0;
  const int64_t limit = max_pages(tokens);
  ensure_hashes(s, tokens, static_cast<size_t>(limit));
  int64_t n = 0;
  while (n < limit && pool_.lookup(s.hashes[n]) >= 0) ++n;
  return n * pool_.page_size();
}

int64_t prefix_cache::attach(cache_seq& s, std::span<const int32_t> tokens) {
  if (o_.enabled) {
    const int64_t limit = max_pages(tokens);
    ensure_hashes(s, tokens, static_cast<size_t>(limit));
    for (int64_t i = static_cast<int64_t>(s.pages.size()); i < limit; ++i) {
      const int32_t page = pool_.lookup(s.hashes[i]);
      if (page < 0) break;
      pool_.retain(page);
      s.pages.push_back(page);
    }
    s.published = s.pages.size();
  }
  return static_cast<int64_t>(s.pages.size()) * pool_.page_size();
}

void prefix_cache::publish(cache_seq& s, std::span<const int32_t> tokens, int64_t computed) {
  if (!o_.enabled) return;
  const size_t full = std::min(static_cast<size_t>(computed / pool_.page_size()), s.pages.size());
  if (full <= s.published) return;
  ensure_hashes(s, tokens, full);
  for (size_t i = s.published; i < full; ++i) pool_.publish(s.pages[i], s.hashes[i]);
  s.published = full;
}

void prefix_cache::release(cache_seq& s, double protect_until_s) {
  if (!s.pages.empty()) pool_.release(s.pages, protect_until_s);
  s.published = 0;
}

}  // namespace tandem
