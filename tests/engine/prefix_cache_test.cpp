#define BOOST_TEST_MODULE prefix_cache
#include <boost/test/unit_test.hpp>

#include <random>

#include "prefix_cache.hpp"
#include "tandem/error.hpp"

using namespace tandem;

namespace {

// Fingerprint of tokens[0..n): stands for the KV of position n-1, which depends on every
// token before it. A fake model: the next token is a function of the fingerprint.
uint64_t fingerprint(const std::vector<int32_t>& t, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint64_t>(t[i] + 7)) * 1099511628211ull;
  return h;
}

struct fake_seq {
  cache_seq kv;
  std::vector<int32_t> tokens;
  int64_t computed = 0;
  int64_t max_len = 0;
};

// A random workload against one pool: arrivals from a few shared prefixes, chunked compute,
// sampling, completions, cancellations, preemptions, clock and protection. After every
// event the pool's invariants hold, every reference is accounted for by a sequence, and
// every page a sequence attached from the cache holds exactly the KV its tokens imply.
struct simulation {
  kv_pool pool;
  prefix_cache cache;
  std::mt19937 rng;
  std::vector<std::vector<uint64_t>> content;  // [page][slot] fingerprint written there
  std::vector<fake_seq> waiting, running;
  std::vector<std::vector<int32_t>> bases;
  double now = 0;
  int64_t hits = 0, finished = 0;

  simulation(int64_t pages, int page, prefix_cache::options o, uint32_t seed)
      : pool(pages, page), cache(pool, o), rng(seed), content(pages, std::vector<uint64_t>(page, 0)) {
    pool.set_protection_cap(pages / 3);
    for (int b = 0; b < 4; ++b) bases.push_back(random_tokens(3 * page + b));
  }
  int rnd(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); }
  std::vector<int32_t> random_tokens(int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(rnd(20));
    return t;
  }

  void arrive() {
    fake_seq s;
    s.tokens = bases[rnd(static_cast<int>(bases.size()))];
    s.tokens.resize(s.tokens.size() - rnd(5));
    auto tail = random_tokens(1 + rnd(2 * pool.page_size()));
    s.tokens.insert(s.tokens.end(), tail.begin(), tail.end());
    s.max_len = static_cast<int64_t>(s.tokens.size()) + 1 + rnd(3 * pool.page_size());
    s.kv.salt = rnd(8) == 0 ? "tenant-b" : "";
    waiting.push_back(std::move(s));
  }

  void verify_attached(const fake_seq& s) {
    const int page = pool.page_size();
    for (int64_t pos = 0; pos < s.computed; ++pos) {
      const int32_t p = s.kv.pages[pos / page];
      BOOST_REQUIRE(content[p][pos % page] == fingerprint(s.tokens, pos + 1));
    }
  }

  void admit() {
    if (waiting.empty()) return;
    const size_t i = rnd(static_cast<int>(waiting.size()));
    fake_seq& s = waiting[i];
    const int64_t looked = cache.lookup(s.kv, s.tokens);
    s.computed = cache.attach(s.kv, s.tokens);
    BOOST_REQUIRE(s.computed == looked);
    BOOST_REQUIRE(s.computed < static_cast<int64_t>(s.tokens.size()));  // last token recomputed
    hits += s.computed;
    verify_attached(s);
    running.push_back(std::move(s));
    waiting.erase(waiting.begin() + i);
  }

  void compute(fake_seq& s, int64_t n) {
    const int page = pool.page_size();
    for (int64_t pos = s.computed; pos < s.computed + n; ++pos) {
      const int32_t p = s.kv.pages[pos / page];
      BOOST_REQUIRE(pool.ref_count(p) == 1 || pos % page != 0 || !pool.is_published(p));
      content[p][pos % page] = fingerprint(s.tokens, pos + 1);
    }
    s.computed += n;
    cache.publish(s.kv, s.tokens, s.computed);
  }

  void step_one() {
    if (running.empty()) return;
    const size_t i = rnd(static_cast<int>(running.size()));
    fake_seq& s = running[i];
    const int64_t left = static_cast<int64_t>(s.tokens.size()) - s.computed;
    const int64_t n = 1 + rnd(static_cast<int>(left));
    if (!pool.grow(s.kv.pages, s.computed + n)) {
      preempt(running.size() - 1);  // youngest first
      return;
    }
    compute(s, n);
    if (s.computed < static_cast<int64_t>(s.tokens.size())) return;
    s.tokens.push_back(static_cast<int32_t>(fingerprint(s.tokens, s.tokens.size()) % 20));
    if (static_cast<int64_t>(s.tokens.size()) >= s.max_len) retire(i, rnd(2) ? now + 5 : 0);
  }

  void preempt(size_t i) {
    fake_seq s = std::move(running[i]);
    running.erase(running.begin() + i);
    cache.release(s.kv);
    s.computed = 0;
    waiting.insert(waiting.begin(), std::move(s));
  }

  void retire(size_t i, double protect_until) {
    cache.release(running[i].kv, protect_until);
    running.erase(running.begin() + i);
    ++finished;
  }

  void cancel() {
    if (!running.empty() && rnd(2)) return retire(rnd(static_cast<int>(running.size())), 0);
    if (!waiting.empty()) waiting.erase(waiting.begin() + rnd(static_cast<int>(waiting.size())));
  }

  void check() {
    pool.check();
    int64_t refs = 0, held = 0;
    for (int64_t p = 0; p < pool.n_pages(); ++p) {
      BOOST_REQUIRE(pool.ref_count(static_cast<int32_t>(p)) >= 0);
      refs += pool.ref_count(static_cast<int32_t>(p));
    }
    for (const auto& s : running) held += static_cast<int64_t>(s.kv.pages.size());
    for (const auto& s : waiting) held += static_cast<int64_t>(s.kv.pages.size());
    BOOST_REQUIRE(refs == held);
    BOOST_REQUIRE(pool.free_pages() + pool.used_pages() + pool.cached_pages() == pool.n_pages());
  }

  void run(int events) {
    for (int e = 0; e < events; ++e) {
      const int r = rnd(20);
      if (r < 4 && waiting.size() < 12) arrive();
      else if (r < 7) admit();
      else if (r < 8) cancel();
      else if (r < 9 && !running.empty()) preempt(rnd(static_cast<int>(running.size())));
      else if (r < 10) { now += 1; pool.advance(now); }
      else if (r < 11 && rnd(50) == 0) pool.reset_cache();
      else step_one();
      check();
    }
    while (!running.empty()) retire(0, 0);
    waiting.clear();
    check();
    BOOST_REQUIRE(pool.used_pages() == 0);  // no leaks
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(random_workloads_keep_the_pool_consistent_and_hits_correct) {
  for (hash_algo algo : {hash_algo::xxhash, hash_algo::sha256}) {
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      simulation sim(48, 4, {true, algo}, seed);
      sim.run(5000);
      BOOST_TEST(sim.finished > 50);
      BOOST_TEST(sim.hits > 0);  // shared bases must hit
    }
  }
}

BOOST_AUTO_TEST_CASE(with_caching_off_nothing_is_shared) {
  simulation sim(48, 4, {false, hash_algo::xxhash}, 3);
  sim.run(3000);
  BOOST_TEST(sim.hits == 0);
  BOOST_TEST(sim.pool.cached_pages() == 0);
}

BOOST_AUTO_TEST_CASE(the_chain_depends_on_everything_before_and_on_the_salt) {
  kv_pool pool(16, 2);
  prefix_cache cache(pool, {true, hash_algo::xxhash});
  cache_seq a;
  std::vector<int32_t> ta{1, 2, 3, 4, 5};
  BOOST_TEST(cache.attach(a, ta) == 0);
  BOOST_TEST(pool.grow(a.pages, 5));
  cache.publish(a, ta, 5);
  cache.release(a);
  BOOST_TEST(pool.cached_pages() == 2);

  cache_seq same, other_first, salted;
  std::vector<int32_t> same_tokens{1, 2, 3, 4, 9, 9};
  BOOST_TEST(cache.lookup(same, same_tokens) == 4);
  std::vector<int32_t> differs_early{7, 2, 3, 4, 5};
  BOOST_TEST(cache.lookup(other_first, differs_early) == 0);  // page 2 matches, its parent not
  salted.salt = "tenant";
  BOOST_TEST(cache.lookup(salted, ta) == 0);
  cache_seq whole;
  std::vector<int32_t> exact{1, 2, 3, 4};
  BOOST_TEST(cache.lookup(whole, exact) == 2);  // never the last token
  BOOST_CHECK_THROW(parse_hash_algo("md5"), config_error);
}
