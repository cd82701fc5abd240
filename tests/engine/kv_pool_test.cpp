#define BOOST_TEST_MODULE kv_pool
#include <boost/test/unit_test.hpp>

#include <random>

#include "tandem/error.hpp"
#include "tandem/kv_pool.hpp"

using tandem::kv_pool;

BOOST_AUTO_TEST_CASE(grow_allocates_whole_pages_all_or_nothing) {
  kv_pool pool(4, 16);
  std::vector<int32_t> a, b;
  BOOST_TEST(pool.grow(a, 1));
  BOOST_TEST(a.size() == 1u);
  BOOST_TEST(pool.grow(a, 16));
  BOOST_TEST(a.size() == 1u);
  BOOST_TEST(pool.grow(a, 17));
  BOOST_TEST(a.size() == 2u);
  BOOST_TEST(!pool.grow(b, 3 * 16));  // needs 3, only 2 free
  BOOST_TEST(b.empty());
  BOOST_TEST(pool.free_pages() == 2);
  BOOST_TEST(pool.grow(b, 2 * 16));
  BOOST_TEST(pool.free_pages() == 0);
  pool.release(a);
  BOOST_TEST(a.empty());
  BOOST_TEST(pool.free_pages() == 2);
}

BOOST_AUTO_TEST_CASE(shared_pages_return_when_the_last_holder_releases) {
  kv_pool pool(2, 8);
  std::vector<int32_t> a;
  BOOST_TEST(pool.grow(a, 8));
  pool.retain(a[0]);
  std::vector<int32_t> b{a[0]};
  BOOST_TEST(pool.ref_count(a[0]) == 2);
  pool.release(a);
  BOOST_TEST(pool.free_pages() == 1);
  pool.release(b);
  BOOST_TEST(pool.free_pages() == 2);
}

BOOST_AUTO_TEST_CASE(releasing_a_page_not_held_is_an_error) {
  kv_pool pool(2, 8);
  std::vector<int32_t> bogus{1};
  BOOST_CHECK_THROW(pool.release(bogus), tandem::error);
  std::vector<int32_t> out_of_range{7};
  BOOST_CHECK_THROW(pool.release(out_of_range), tandem::error);
  BOOST_CHECK_THROW(kv_pool(0, 16), tandem::error);
}

BOOST_AUTO_TEST_CASE(random_traffic_never_leaks_pages) {
  kv_pool pool(64, 16);
  std::mt19937 rng(7);
  std::vector<std::vector<int32_t>> seqs(10);
  std::vector<int64_t> lens(10, 0);
  for (int it = 0; it < 20000; ++it) {
    size_t s = rng() % seqs.size();
    if (rng() % 4 == 0) {
      pool.release(seqs[s]);
      lens[s] = 0;
    } else if (pool.grow(seqs[s], lens[s] + 1 + rng() % 40)) {
      lens[s] = static_cast<int64_t>(seqs[s].size()) * 16;
    }
    int64_t held = 0;
    for (auto& t : seqs) held += static_cast<int64_t>(t.size());
    BOOST_REQUIRE(held + pool.free_pages() == pool.n_pages());
  }
}

namespace {

tandem::block_hash key(uint64_t v) {
  tandem::block_hash h;
  h.w[0] = v;
  return h;
}

}  // namespace

BOOST_AUTO_TEST_CASE(published_pages_stay_cached_and_are_shared_by_reference) {
  kv_pool pool(4, 4);
  std::vector<int32_t> a;
  BOOST_TEST(pool.grow(a, 10));  // 3 pages
  BOOST_TEST(pool.publish(a[0], key(1)));
  BOOST_TEST(pool.publish(a[1], key(2)));
  const int32_t first = a[0];
  pool.release(a);
  BOOST_TEST(pool.cached_pages() == 2);
  BOOST_TEST(pool.free_pages() == 2);
  BOOST_TEST(pool.used_pages() == 0);
  BOOST_TEST(pool.lookup(key(1)) == first);
  pool.retain(first);  // a hit: no copy, the same page
  BOOST_TEST(pool.ref_count(first) == 1);
  BOOST_TEST(pool.cached_pages() == 1);
  std::vector<int32_t> b{first};
  pool.release(b);
  pool.check();
}

BOOST_AUTO_TEST_CASE(a_duplicate_block_stays_private) {
  kv_pool pool(4, 4);
  std::vector<int32_t> a, b;
  BOOST_TEST(pool.grow(a, 4));
  BOOST_TEST(pool.grow(b, 4));
  BOOST_TEST(pool.publish(a[0], key(7)));
  BOOST_TEST(!pool.publish(b[0], key(7)));
  pool.release(b);
  BOOST_TEST(pool.free_pages() == 3);  // b's copy was never shareable
  pool.release(a);
  BOOST_TEST(pool.cached_pages() == 1);
  pool.check();
}

BOOST_AUTO_TEST_CASE(eviction_is_lru_and_takes_the_tail_of_a_chain_before_its_head) {
  kv_pool pool(6, 1);
  std::vector<int32_t> old_chain, new_chain;
  BOOST_TEST(pool.grow(old_chain, 3));
  BOOST_TEST(pool.grow(new_chain, 3));
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(pool.publish(old_chain[i], key(10 + i)));
    BOOST_TEST(pool.publish(new_chain[i], key(20 + i)));
  }
  pool.release(old_chain);  // released first: least recently used
  pool.release(new_chain);
  std::vector<int32_t> t;
  BOOST_TEST(pool.grow(t, 1));
  BOOST_TEST(pool.lookup(key(12)) == -1);  // the old chain's tail went first
  BOOST_TEST(pool.lookup(key(10)) >= 0);
  BOOST_TEST(pool.grow(t, 3));
  BOOST_TEST(pool.lookup(key(10)) == -1);
  BOOST_TEST(pool.lookup(key(20)) >= 0);
  BOOST_TEST(pool.evicted_pages() == 3u);
  BOOST_TEST(!pool.grow(t, 7));
  pool.check();
}

BOOST_AUTO_TEST_CASE(protected_pages_outlive_plain_lru_until_they_expire) {
  kv_pool pool(4, 1);
  pool.set_protection_cap(2);
  pool.advance(10);
  std::vector<int32_t> session, other;
  BOOST_TEST(pool.grow(session, 2));
  BOOST_TEST(pool.publish(session[0], key(1)));
  BOOST_TEST(pool.publish(session[1], key(2)));
  pool.release(session, /*protect_until_s=*/20);
  BOOST_TEST(pool.grow(other, 2));
  BOOST_TEST(pool.publish(other[0], key(3)));
  BOOST_TEST(pool.publish(other[1], key(4)));
  pool.release(other);  // younger, but not protected
  BOOST_TEST(pool.protected_pages() == 2);
  std::vector<int32_t> t;
  BOOST_TEST(pool.grow(t, 2));
  BOOST_TEST(pool.lookup(key(1)) >= 0);
  BOOST_TEST(pool.lookup(key(3)) == -1);
  pool.release(t);
  pool.advance(21);  // expired: plain LRU entries again, the oldest
  BOOST_TEST(pool.protected_pages() == 0);
  BOOST_TEST(pool.grow(t, 3));  // two free pages, then the session's tail
  BOOST_TEST(pool.lookup(key(2)) == -1);
  BOOST_TEST(pool.lookup(key(1)) >= 0);
  pool.check();
}

BOOST_AUTO_TEST_CASE(protection_is_bounded_by_its_share_of_the_pool) {
  kv_pool pool(8, 1);
  pool.set_protection_cap(3);
  std::vector<int32_t> a;
  BOOST_TEST(pool.grow(a, 5));
  for (int i = 0; i < 5; ++i) BOOST_TEST(pool.publish(a[i], key(100 + i)));
  pool.release(a, 1e9);
  BOOST_TEST(pool.protected_pages() == 3);
  BOOST_TEST(pool.cached_pages() == 5);
  pool.check();
}

BOOST_AUTO_TEST_CASE(reset_forgets_cached_pages_but_not_held_ones) {
  kv_pool pool(4, 2);
  std::vector<int32_t> a, b;
  BOOST_TEST(pool.grow(a, 4));
  BOOST_TEST(pool.grow(b, 2));
  BOOST_TEST(pool.publish(a[0], key(1)));
  BOOST_TEST(pool.publish(a[1], key(2)));
  BOOST_TEST(pool.publish(b[0], key(3)));
  pool.release(a);
  BOOST_TEST(pool.reset_cache() == 2);
  BOOST_TEST(pool.cached_pages() == 0);
  BOOST_TEST(pool.lookup(key(3)) == -1);
  BOOST_TEST(pool.used_pages() == 1);
  pool.release(b);
  BOOST_TEST(pool.free_pages() == 4);
  pool.check();
}

BOOST_AUTO_TEST_CASE(retain_of_a_free_page_and_double_release_are_errors) {
  kv_pool pool(2, 2);
  BOOST_CHECK_THROW(pool.retain(0), tandem::error);
  std::vector<int32_t> a;
  BOOST_TEST(pool.grow(a, 2));
  std::vector<int32_t> copy = a;
  pool.release(a);
  BOOST_CHECK_THROW(pool.release(copy), tandem::error);
  pool.check();
}

BOOST_AUTO_TEST_CASE(an_expired_protection_takes_its_plain_lru_place) {
  kv_pool pool(3, 1);
  pool.set_protection_cap(3);
  std::vector<int32_t> b, a, c;
  auto cached_page = [&](std::vector<int32_t>& t, uint64_t k) {
    BOOST_TEST(pool.grow(t, 1));
    BOOST_TEST(pool.publish(t[0], key(k)));
  };
  cached_page(b, 1), cached_page(a, 2), cached_page(c, 3);
  pool.advance(1);
  pool.release(b);
  pool.advance(2);
  pool.release(a, /*protect_until_s=*/4);
  pool.advance(3);
  pool.release(c);
  pool.advance(5);  // a expires: released between b and c, so evicted between them
  pool.check();
  std::vector<int32_t> t;
  BOOST_TEST(pool.grow(t, 1));
  BOOST_TEST(pool.lookup(key(1)) == -1);
  BOOST_TEST(pool.grow(t, 2));
  BOOST_TEST(pool.lookup(key(2)) == -1);
  BOOST_TEST(pool.lookup(key(3)) >= 0);
  pool.check();
}
