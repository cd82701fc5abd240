#define BOOST_TEST_MODULE gpu_attention_tc
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// cuda::attention_prefill_tc (f16 tensor-core flash attention) against ref::paged_attention
// on random inputs: batches of sequences of odd lengths, chunked prefill after a cached
// prefix, decode-like one-token chunks, page sizes 7/16/64, page tables drawn from a shuffled
// pool, head dims 64 and 128, GQA groups 1, 3 and 8.
//
// The pool holds NaN everywhere but the slots of each sequence's tokens (a kernel that reads a
// key past the sequence, or an unmasked one, turns NaN), and the output is NaN-poisoned
// before each run (an unwritten row fails). Tolerance: Q*scale, K, V and P are rounded to f16
// (2^-11 relative) with f32 accumulation, so ||gpu - ref|| / ||ref|| < 3e-3 (seen ~3e-4 ..
// 1e-3 expected) and max |gpu - ref| < 1e-2 (outputs are O(1)). The scalar f32 kernel
// (attention_prefill) runs on the same inputs and is printed beside it (< 2e-5).
//
//   build/tests/gpu/test_gpu_attention_tc        (meson test --suite gpu gpu_attention_tc)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

#include "tandem_cuda/kernels.hpp"
#include "gpu_util.hpp"
#include "tandem_ref/attention.hpp"
#include "test_util.hpp"

using namespace tandem;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(4242);
  return r;
}

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct dmem {
  T* p = nullptr;
  size_t n = 0;
  explicit dmem(size_t count) : n(count) { ck(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc"); }
  explicit dmem(const std::vector<T>& h) : dmem(h.size()) {
    ck(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~dmem() { cudaFree(p); }
  dmem(const dmem&) = delete;
  void poison() { ck(cudaMemset(p, 0xff, n * sizeof(T)), "poison"); }  // NaN floats
  std::vector<T> host() const {
    std::vector<T> h(n);
    ck(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

struct seq {
  int cached, n_new;
};

struct tc_case {
  std::string name;
  std::vector<seq> seqs;
  int n_heads, n_kv, hd, page;
  float q_scale = 1.0f;  // > 1: peakier softmax
};

// ref::paged_attention over the batch, split into chunks of <= 64 query rows (a chunk of rows
// [a, b) of a sequence is the sequence with a more cached tokens) on all cores.
void reference(const std::vector<test::seq_spec>& specs, const std::vector<int32_t>& qstart, const float* q,
               int n_heads, const ref::paged_kv& kv, float scale, float* out) {
  struct job {
    int s, a, n;
  };
  std::vector<job> jobs;
  for (int s = 0; s < static_cast<int>(specs.size()); ++s)
    for (int a = 0; a < specs[s].n_new; a += 64) jobs.push_back({s, a, std::min(64, specs[s].n_new - a)});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      const job& j = jobs[i];
      test::batch_builder bb({{specs[j.s].pages, specs[j.s].cached + j.a, j.n}}, kv.page_size);
      const int64_t row = int64_t{qstart[j.s]} + j.a;
      ref::paged_attention(q + row * n_heads * kv.head_dim, n_heads, kv, bb.batch, scale,
                           out + row * n_heads * kv.head_dim);
    }
  };
  const unsigned nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < nt; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
}

void run_case(const tc_case& c) {
  const int hd = c.hd, page = c.page;
  const int64_t ts = int64_t{c.n_kv} * hd;
  // Pages: each sequence takes the next pages of a shuffled pool (a few spare pages stay NaN).
  int used = 0;
  for (const seq& s : c.seqs) used += std::max(1, (s.cached + s.n_new + page - 1) / page);
  const int n_pages = used + 5;
  std::vector<int32_t> perm(n_pages);
  for (int i = 0; i < n_pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng());
  std::vector<test::seq_spec> specs;
  int next_page = 0;
  for (const seq& s : c.seqs) {
    const int np = std::max(1, (s.cached + s.n_new + page - 1) / page);
    specs.push_back({std::vector<int32_t>(perm.begin() + next_page, perm.begin() + next_page + np), s.cached, s.n_new});
    next_page += np;
  }
  test::batch_builder bb(specs, page);
  const int64_t n = bb.batch.n_tokens;

  std::vector<float> kpool(static_cast<size_t>(n_pages * page * ts), NAN), vpool = kpool;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const auto& sp : specs) {
    for (int t = 0; t < sp.cached + sp.n_new; ++t) {
      const int64_t slot = int64_t{sp.pages[t / page]} * page + t % page;
      for (int64_t i = 0; i < ts; ++i) kpool[slot * ts + i] = nd(rng()), vpool[slot * ts + i] = nd(rng());
    }
  }
  auto q = test::random_floats(rng(), n * c.n_heads * hd, c.q_scale);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  ref::paged_kv rkv{kpool.data(), vpool.data(), n_pages, page, c.n_kv, hd};
  ref::check_batch(bb.batch, rkv, c.n_heads);
  std::vector<float> want(static_cast<size_t>(n * c.n_heads * hd));
  reference(specs, bb.query_start, q.data(), c.n_heads, rkv, scale, want.data());

  dmem<float> dk(kpool), dv(vpool), dq(q), out(want.size());
  dmem<int32_t> qs(bb.query_start), sl(bb.seq_lens), pt(bb.page_table), sm(bb.slot_mapping);
  cuda::dev_kv kv{dk.p, dv.p, n_pages, page, c.n_kv, hd};
  cuda::dev_batch b;
  b.n_seqs = bb.batch.n_seqs;
  b.n_tokens = bb.batch.n_tokens;
  b.max_pages = bb.batch.max_pages_per_seq;
  b.query_start = qs.p;
  b.seq_lens = sl.p;
  b.page_table = pt.p;
  b.slot_mapping = sm.p;

  out.poison();
  cuda::attention_prefill_tc(dq.p, c.n_heads, kv, b, scale, out.p, nullptr);
  ck(cudaGetLastError(), "attention_prefill_tc launch");
  ck(cudaDeviceSynchronize(), "attention_prefill_tc run");
  const auto got = out.host();
  const double rel = test::rel_err(got, want), mabs = test::max_abs_err(got, want);
  int64_t first_bad = -1;  // first row (token) with a NaN or an error > 1e-2
  for (size_t i = 0; i < got.size() && first_bad < 0; ++i)
    if (!(std::fabs(double{got[i]} - want[i]) < 1e-2)) first_bad = static_cast<int64_t>(i / (c.n_heads * hd));

  out.poison();
  cuda::attention_prefill(dq.p, c.n_heads, kv, b, scale, out.p, nullptr);
  ck(cudaGetLastError(), "attention_prefill launch");
  ck(cudaDeviceSynchronize(), "attention_prefill run");
  const double rel_old = test::rel_err(out.host(), want);

  std::string shape;
  for (const seq& s : c.seqs) shape += " " + std::to_string(s.cached) + "+" + std::to_string(s.n_new);
  const bool ok = rel < 3e-3 && mabs < 1e-2;
  std::printf("%-4s %-34s heads %2d/%d G%d d%-3d page %-2d tokens %5lld: tc rel %.2e max abs %.2e | scalar rel %.2e%s\n",
              ok ? "ok" : "FAIL", c.name.c_str(), c.n_heads, c.n_kv, c.n_heads / c.n_kv, hd, page,
              static_cast<long long>(n), rel, mabs, rel_old,
              first_bad >= 0 ? (" | first bad token row " + std::to_string(first_bad)).c_str() : "");
  std::printf("     seqs (cached+new):%s\n", shape.size() > 160 ? (shape.substr(0, 160) + " ...").c_str() : shape.c_str());
  std::fflush(stdout);
  BOOST_TEST(rel < 3e-3, c.name << " d" << hd << " heads " << c.n_heads << "/" << c.n_kv << ": rel err " << rel);
  BOOST_TEST(mabs < 1e-2, c.name << " d" << hd << " heads " << c.n_heads << "/" << c.n_kv << ": max abs err " << mabs
                                 << " (first bad token row " << first_bad << ")");
  BOOST_TEST(rel_old < 2e-5, c.name << ": scalar kernel rel err " << rel_old << " (harness check)");
}

struct heads {
  int n_heads, n_kv;
};
constexpr heads head_cfgs[] = {{9, 3}, {4, 4}, {8, 1}, {16, 2}};  // G = 3, 1, 8, 8

}  // namespace

BOOST_AUTO_TEST_CASE(odd_lengths_fresh_prompts) {
  for (int hd : {64, 128}) {
    for (heads h : head_cfgs) {
      run_case({"six prompts 1..3000", {{0, 1}, {0, 15}, {0, 17}, {0, 100}, {0, 1000}, {0, 3000}}, h.n_heads, h.n_kv, hd, 16});
    }
    run_case({"one prompt of 1", {{0, 1}}, 9, 3, hd, 16});
    run_case({"one prompt of 17", {{0, 17}}, 9, 3, hd, 16});
    run_case({"one prompt of 1000", {{0, 1000}}, 9, 3, hd, 16});
  }
}

BOOST_AUTO_TEST_CASE(chunked_prefill_after_cached_prefix) {
  const std::vector<seq> chunks = {{37, 100}, {1000, 17}, {500, 1}, {16, 16}, {2047, 300}, {3, 1}, {64, 129}};
  for (int hd : {64, 128}) {
    for (heads h : head_cfgs) run_case({"chunks after cached prefixes", chunks, h.n_heads, h.n_kv, hd, 16});
  }
}

BOOST_AUTO_TEST_CASE(page_sizes_and_boundaries) {
  for (int hd : {64, 128}) {
    for (int page : {7, 16, 64}) {
      // Lengths on, just before and just after page and tile (32 keys) boundaries.
      run_case({"page/tile boundaries", {{0, 16}, {15, 1}, {16, 17}, {31, 33}, {32, 32}, {63, 65}, {127, 2}, {0, 129}},
                9, 3, hd, page});
    }
  }
}

BOOST_AUTO_TEST_CASE(many_small_sequences_and_peaky_softmax) {
  std::vector<seq> many;
  std::uniform_int_distribution<int> len(1, 90), pre(0, 300);
  for (int i = 0; i < 40; ++i) many.push_back({i % 3 == 0 ? 0 : pre(rng()), len(rng())});
  for (int hd : {64, 128}) {
    run_case({"40 random chunks", many, 9, 3, hd, 16});
    run_case({"40 random chunks", many, 8, 1, hd, 16});
    tc_case peaky{"peaky softmax (q x4)", {{0, 700}, {200, 300}}, 9, 3, hd, 16, 4.0f};
    run_case(peaky);
  }
}

TANDEM_GPU_TEST_MAIN
