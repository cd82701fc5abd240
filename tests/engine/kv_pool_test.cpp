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
