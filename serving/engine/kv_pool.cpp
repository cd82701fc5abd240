#include "tandem/kv_pool.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem {

kv_pool::kv_pool(int64_t n_pages, int page_size) : page_size_(page_size) {
  if (n_pages <= 0 || n_pages > INT32_MAX) throw error("kv pool: page count out of range");
  if (page_size <= 0) throw error("kv pool: page size must be positive");
  refs_.assign(n_pages, 0);
  prev_.assign(n_pages, -1);
  next_.assign(n_pages, -1);
  where_.assign(n_pages, where::used);
  hashed_.assign(n_pages, 0);
  hash_.resize(n_pages);
  protect_until_.assign(n_pages, 0);
  released_at_.assign(n_pages, 0);
  // Low page ids first: the free list is used as a stack from its tail.
  for (int64_t p = n_pages - 1; p >= 0; --p) link_back(free_, where::free, static_cast<int32_t>(p));
}

kv_pool::list& kv_pool::list_of(where w) {
  switch (w) {
    case where::free: return free_;
    case where::lru:  return lru_;
    case where::prot: return protected_;
    case where::used: break;
  }
  throw error("kv pool: a used page is on no list");
}

void kv_pool::link_back(list& l, where w, int32_t p) {
  prev_[p] = l.tail;
  next_[p] = -1;
  if (l.tail >= 0) next_[l.tail] = p; else l.head = p;
  l.tail = p;
  ++l.size;
  where_[p] = w;
}

// Links p in front of `at` (at the back when `at` is -1).
void kv_pool::link_before(list& l, where w, int32_t p, int32_t at) {
  if (at < 0) return link_back(l, w, p);
  prev_[p] = prev_[at];
  next_[p] = at;
  if (prev_[at] >= 0) next_[prev_[at]] = p; else l.head = p;
  prev_[at] = p;
  ++l.size;
  where_[p] = w;
}

void kv_pool::unlink(int32_t p) {
  list& l = list_of(where_[p]);
  if (prev_[p] >= 0) next_[prev_[p]] = next_[p]; else l.head = next_[p];
  if (next_[p] >= 0) prev_[next_[p]] = prev_[p]; else l.tail = prev_[p];
  prev_[p] = next_[p] = -1;
  --l.size;
  where_[p] = where::used;
}

void kv_pool::evict(int32_t p) {
  index_.erase(hash_[p]);
  hashed_[p] = 0;
  protect_until_[p] = 0;
  ++evicted_;
}

// A page for a new reference: free first (most recently freed), then the least recently
// released cached page, then the oldest protected one.
int32_t kv_pool::take_page() {
  int32_t p = free_.tail;
  if (p < 0) p = lru_.head;
  if (p < 0) p = protected_.head;
  unlink(p);
  if (hashed_[p]) evict(p);
  refs_[p] = 1;
  return p;
}

bool kv_pool::grow(std::vector<int32_t>& table, int64_t tokens) {
  const int64_t need = pages_for(tokens) - static_cast<int64_t>(table.size());
  if (need <= 0) return true;
  if (need > available_pages()) return false;
  for (int64_t i = 0; i < need; ++i) table.push_back(take_page());
  return true;
}

void kv_pool::release(std::vector<int32_t>& table, double protect_until_s) {
  for (int32_t p : table)
    if (p < 0 || p >= n_pages() || refs_[p] <= 0)
      throw error("kv pool: release of page " + std::to_string(p) + " that is not held");
  // Tail first, so the end of a chain sits nearer the eviction end than its head.
  for (auto it = table.rbegin(); it != table.rend(); ++it) {
    const int32_t p = *it;
    if (hashed_[p] && protect_until_s > protect_until_[p]) protect_until_[p] = protect_until_s;
    if (--refs_[p] > 0) continue;
    released_at_[p] = now_;
    if (!hashed_[p]) {
      protect_until_[p] = 0;
      link_back(free_, where::free, p);
    } else if (protect_cap_ > 0 && protect_until_[p] > now_) {
      link_back(protected_, where::prot, p);
    } else {
      link_back(lru_, where::lru, p);
    }
  }
  table.clear();
  demote(protected_.size - protect_cap_);
}

void kv_pool::retain(int32_t page) {
  if (page < 0 || page >= n_pages() || (refs_[page] <= 0 && !hashed_[page]))
    throw error("kv pool: retain of page " + std::to_string(page) + " that is neither held nor cached");
  if (refs_[page] == 0) unlink(page);
  ++refs_[page];
}

int32_t kv_pool::lookup(const block_hash& h) const {
  auto it = index_.find(h);
  return it == index_.end() ? -1 : it->second;
}

bool kv_pool::publish(int32_t page, const block_hash& h) {
  if (page < 0 || page >= n_pages() || refs_[page] <= 0)
    throw error("kv pool: publish of page " + std::to_string(page) + " that is not held");
  if (hashed_[page]) return hash_[page] == h;
  if (!index_.emplace(h, page).second) return false;
  hash_[page] = h;
  hashed_[page] = 1;
  return true;
}

// Moves the `n` oldest protected pages to the LRU list where plain LRU would have them:
// by the time they were released (one merge pass; both lists are in release order).
void kv_pool::demote(int64_t n) {
  int32_t at = lru_.head;
  for (; n > 0 && protected_.head >= 0; --n) {
    const int32_t p = protected_.head;
    unlink(p);
    protect_until_[p] = 0;
    while (at >= 0 && released_at_[at] <= released_at_[p]) at = next_[at];
    link_before(lru_, where::lru, p, at);
  }
}

void kv_pool::advance(double now_s) {
  now_ = now_s;
  // Protections are appended in release order with one retention time, so they expire in
  // list order.
  int64_t expired = 0;
  for (int32_t p = protected_.head; p >= 0 && protect_until_[p] <= now_; p = next_[p]) ++expired;
  demote(expired);
}

void kv_pool::set_protection_cap(int64_t pages) {
  protect_cap_ = pages < 0 ? 0 : pages;
  demote(protected_.size - protect_cap_);
}

int64_t kv_pool::reset_cache() {
  const int64_t dropped = cached_pages();
  for (list* l : {&lru_, &protected_})
    while (l->head >= 0) {
      const int32_t p = l->head;
      unlink(p);
      link_back(free_, where::free, p);
    }
  index_.clear();
  hashed_.assign(hashed_.size(), 0);
  protect_until_.assign(protect_until_.size(), 0);
  return dropped;
}

void kv_pool::check() const {
  auto fail = [](const std::string& what) { throw error("kv pool invariant: " + what); };
  int64_t counts[4] = {0, 0, 0, 0};
  for (int64_t p = 0; p < n_pages(); ++p) {
    if (refs_[p] < 0) fail("negative reference count on page " + std::to_string(p));
    if ((refs_[p] > 0) != (where_[p] == where::used)) fail("page " + std::to_string(p) + " listed while held");
    if (where_[p] != where::free && where_[p] != where::used && !hashed_[p])
      fail("unpublished page " + std::to_string(p) + " on a cache list");
    if (where_[p] == where::free && hashed_[p]) fail("published page " + std::to_string(p) + " on the free list");
    if (hashed_[p] && lookup(hash_[p]) != p) fail("index does not point back at page " + std::to_string(p));
    ++counts[static_cast<int>(where_[p])];
  }
  const list* lists[] = {nullptr, &free_, &lru_, &protected_};
  for (int w = 1; w < 4; ++w) {
    int64_t walked = 0;
    for (int32_t p = lists[w]->head; p >= 0 && walked <= n_pages(); p = next_[p]) ++walked;
    if (walked != lists[w]->size || counts[w] != lists[w]->size) fail("list sizes disagree");
  }
  if (static_cast<int64_t>(index_.size()) > n_pages()) fail("index larger than the pool");
  for (int32_t p = lru_.head; p >= 0 && next_[p] >= 0; p = next_[p])
    if (released_at_[p] > released_at_[next_[p]]) fail("LRU list out of release order");
  // Counted page by page, not derived: free + used + cached must cover the pool exactly.
  if (counts[0] + counts[1] + counts[2] + counts[3] != n_pages() || counts[0] != used_pages())
    fail("free + used + cached != size");
  if (protected_.size > protect_cap_) fail("more protected pages than the protection cap");
}

}  // namespace tandem
