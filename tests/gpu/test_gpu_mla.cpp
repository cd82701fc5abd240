#define BOOST_TEST_MODULE gpu_mla
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// backend.cuda's layer_norm, mla_attention and dsa_indexer against backend.cpu (the
// reference, itself checked against naive formulations in tests/cpu/test_cpu_mla.cpp) on
// the same random inputs: small shapes, and GLM-5's (heads 64 / 128, kv_lora_rank 512,
// rope 64, nope 192, v 256; indexer 32 heads of 128, top-k 2048) over paged caches with
// shuffled pages, contexts 4k..16k (and a 128k decode for the indexer), prefill chunks and
// decode rows in one batch. Outputs are NaN-poisoned before each run.
//
// Tolerances:
//  - layer_norm, rms_norm over strided rows, cache rows: fp32 on both sides, summation order
//    and the rotation's float rounding only: 1e-5 relative (norm-wise per row).
//  - mla_attention: fp32 on both sides (cuBLAS SGEMM without TF32 for W_UK / W_UV, fp32
//    online softmax). The scores are dots of rank + rope = 576 terms, the absorbed query a
//    dot of nope terms; each loses ~sqrt(n) * 2^-24 relative to the sum of magnitudes,
//    inputs are scaled so scores have a standard deviation of about 1, and the softmax turns
//    a score error e into a relative weight error e: 1e-4 per row (norm-wise) leaves an
//    order of magnitude of margin over the ~1e-6 expected and still catches a wrong key,
//    head or position (those give O(1) errors).
//  - mla_attention's decode steps at rank 512 + rope 64 (one row per sequence) run the
//    tensor-core kernel: q * scale, the latent rows and the softmax weights are rounded to
//    f16 (11-bit significand, unit roundoff u = 2^-11 = 4.9e-4, RMS ~u / sqrt(3)) once each,
//    with f32 accumulation and softmax. With scores of unit variance a score's error is
//    ~sqrt(2) * 2.8e-4, so each weight is off by that relative amount, and the weighted sum
//    of rounded latents adds ~2.8e-4 more, independently per key: a host emulation of the
//    kernel at these tests' statistics gives 2.1e-4 .. 3.8e-4 per row (norm-wise) at
//    contexts 1 .. 8192, dense and top-k. 3e-3 leaves ~8x of margin and still catches a
//    wrong key, head or position (O(1) errors). The f32 kernel's ~1e-6 shows which ran.
//    Every step runs four times on the GPU: the tensor-core kernel staging the latent tile
//    in f16 over three stages (the default), the same without its L2 prefetch
//    (TANDEM_CUDA_MLA_TC_PREFETCH=0), in f16 over two stages (TANDEM_CUDA_MLA_TC_STAGE=f16s2)
//    and in f32 (TANDEM_CUDA_MLA_TC_STAGE=f32, the earlier kernel): each must be within the
//    tolerance, and all equal bit for bit (the same f16 operands enter the same mma chains in
//    the same order; steps off the tensor cores run the f32 kernel each time).
//  - dsa_indexer: the chosen positions are compared with naive double scores (the CPU
//    test's method): entry j must be a new causal position whose score is within 1e-4
//    (relative to 1 + |score|) of the j-th best, -1 past the context; random scores may be
//    near-tied, so the exact order is checked on exactly tied keys only.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_weights.hpp"
#include "cuda_weights.hpp"
#include "gpu_util.hpp"
#include "tandem_cuda/mla.hpp"
#include "tandem/error.hpp"
#include "test_util.hpp"

using namespace tandem;
using test::dvec;
using test::view;

// The tests' name for their recorded steps (backend::run_recorded).
const uint64_t test_owner = tandem::new_recording_owner();

namespace {

constexpr float theta = 10000.0f;

cuda::cuda_backend& gpu() {
  static cuda::cuda_backend be;
  return be;
}

cpu::cpu_backend& cpu_ref() {
  static cpu::cpu_backend be({static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 0, nullptr});
  return be;
}

std::mt19937& rng() {
  static std::mt19937 r(2024);
  return r;
}

std::vector<float> scaled(std::vector<float> v, float s) {
  for (float& x : v) x *= s;
  return v;
}

// Relative error of each row (norm-wise); the worst one.
double worst_row_err(const std::vector<float>& got, const std::vector<float>& want, int64_t rows) {
  const auto width = static_cast<int64_t>(want.size()) / rows;
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> g(got.begin() + r * width, got.begin() + (r + 1) * width);
    const std::vector<float> w(want.begin() + r * width, want.begin() + (r + 1) * width);
    worst = std::max(worst, test::rel_err(g, w));
  }
  return worst;
}

// Sets an environment variable for its lifetime (the MLA launcher reads
// TANDEM_CUDA_MLA_TC_STAGE and TANDEM_CUDA_MLA_TC_PREFETCH at every call), then restores
// what the environment had.
struct scoped_env {
  const char* name;
  std::string saved;
  bool had = false;
  scoped_env(const char* n, const char* v) : name(n) {
    if (const char* e = std::getenv(name)) saved = e, had = true;
    setenv(name, v, 1);
  }
  ~scoped_env() {
    if (had) setenv(name, saved.c_str(), 1);
    else unsetenv(name);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
};
// The tensor-core kernel's variants: f16 staging with three stages (the default), the same
// without its L2 prefetch, f16 staging with two stages, f32 staging (the earlier kernel).
struct tc_variant {
  const char* name;
  const char* stage;
  const char* prefetch;
};
constexpr tc_variant tc_variants[] = {{"f16 staging", "f16", "1"},
                                      {"f16 staging, no L2 prefetch", "f16", "0"},
                                      {"f16 staging, 2 stages", "f16s2", "1"},
                                      {"f32 staging", "f32", "1"}};
constexpr int n_tc_variants = 4;
struct tc_stage {
  scoped_env stage, prefetch;
  explicit tc_stage(const tc_variant& v)
      : stage("TANDEM_CUDA_MLA_TC_STAGE", v.stage), prefetch("TANDEM_CUDA_MLA_TC_PREFETCH", v.prefetch) {}
};

double max_abs_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double d = x.size() == y.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
    d = std::isnan(e) ? INFINITY : std::max(d, e);
  }
  return d;
}

// A batch on the host (for backend.cpu) and the same index arrays in device memory.
struct both_batches {
  test::batch_builder host;
  dvec<int32_t> qs, sl, pt, sm, pos;
  attention_batch dev;

  both_batches(const std::vector<test::seq_spec>& seqs, int page_size)
      : host(seqs, page_size),
        qs(gpu(), host.query_start),
        sl(gpu(), host.seq_lens),
        pt(gpu(), host.page_table),
        sm(gpu(), host.slot_mapping),
        pos(gpu(), host.positions) {
    dev = host.batch;
    const int64_t s = host.batch.n_seqs, n = host.batch.n_tokens;
    dev.query_start = qs.view({s + 1});
    dev.seq_lens = sl.view({s});
    dev.page_table = pt.view({s, host.batch.max_pages_per_seq});
    dev.slot_mapping = sm.view({n});
    dev.positions = pos.view({n});
  }
};

// Sequences of the given (cached, new) token counts over pages drawn at random from the pool
// (shuffled: no sequence's pages are in order).
std::vector<test::seq_spec> shuffled_seqs(const std::vector<std::pair<int, int>>& lens, int page_size,
                                          int64_t n_pages, int min_pages = 0) {
  std::vector<int32_t> free(static_cast<size_t>(n_pages));
  std::iota(free.begin(), free.end(), 0);
  std::shuffle(free.begin(), free.end(), rng());
  std::vector<test::seq_spec> seqs;
  size_t next = 0;
  for (auto [cached, fresh] : lens) {
    test::seq_spec s;
    s.cached = cached;
    s.n_new = fresh;
    const int pages = std::max(min_pages, (cached + fresh + page_size - 1) / page_size);  // a wider table: unused pages
    BOOST_REQUIRE(next + pages <= free.size());
    s.pages.assign(free.begin() + next, free.begin() + next + pages);
    next += pages;
    seqs.push_back(s);
  }
  return seqs;
}

// One key-only cache on each backend, with the same contents.
struct cache_pair {
  kv_layout layout;
  std::unique_ptr<kv_storage> c, g;

  cache_pair(int64_t n_pages, int page_size, int dims) {
    layout = {1, n_pages, page_size, 1, dims, dtype::f32};
    layout.values = false;
    c = cpu_ref().alloc_kv(layout);
    g = gpu().alloc_kv(layout);
  }
  int64_t floats() const { return layout.n_pages * layout.page_size * layout.head_dim; }
  float* cpu_keys() const { return dynamic_cast<cpu::cpu_kv&>(*c).layer(0).k; }
  float* gpu_keys() const { return dynamic_cast<cuda::cuda_kv&>(*g).keys(0, "test"); }
  void fill_random(float scale) {  // what earlier steps would have written
    const std::vector<float> v = test::random_floats(rng(), floats(), scale);
    std::copy(v.begin(), v.end(), cpu_keys());
    gpu().copy_to_device(gpu_keys(), v.data(), v.size() * sizeof(float));
    gpu().synchronize();
  }
  // The step's new slots on both sides agree (each row copied on its own: pools are large).
  void check_written(const both_batches& b, const std::string& what) const {
    const int d = layout.head_dim;
    const float* c_k = cpu_keys();
    std::vector<float> gr(static_cast<size_t>(d));
    for (size_t r = 0; r < b.host.slot_mapping.size(); ++r) {
      const int64_t at = int64_t{b.host.slot_mapping[r]} * d;
      gpu().copy_to_host(gr.data(), gpu_keys() + at, gr.size() * sizeof(float));
      gpu().synchronize();
      const std::vector<float> cr(c_k + at, c_k + at + d);
      const double e = test::rel_err(gr, cr);
      if (e > 1e-5) BOOST_ERROR(what << ": cache row " << r << " differs (rel err " << e << ")");
    }
  }
  std::vector<float> gpu_copy() const {
    std::vector<float> g(static_cast<size_t>(floats()));
    gpu().copy_to_host(g.data(), gpu_keys(), g.size() * sizeof(float));
    gpu().synchronize();
    return g;
  }
};

// ---- MLA

struct mla_shape {
  int heads = 4, nope = 16, rope = 8, v = 12, rank = 32;
  int page_size = 4;
  int64_t n_pages = 64;
  dtype wtype = dtype::f32;
  float q_scale = 0.5f;  // keeps scores near unit variance (see the tolerance note)
};

struct mla_pair {
  mla_shape c;
  test::test_weight kvb;
  std::unique_ptr<mla_weight> wc, wg;
  cache_pair kv;

  explicit mla_pair(const mla_shape& s)
      : c(s), kv(s.n_pages, s.page_size, s.rank + s.rope) {
    kvb = test::random_weight(rng(), c.wtype, int64_t{c.heads} * (c.nope + c.v), c.rank);
    wc = cpu_ref().load_mla(kvb.info, c.heads, c.nope, c.v);
    wg = gpu().load_mla(kvb.info, c.heads, c.nope, c.v);
  }

  mla_params params() const {
    mla_params p;
    p.rope_dims = c.rope;
    p.rope_theta = theta;
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.nope + c.rope));
    return p;
  }

  // Both backends on the same random q / kv_a (and top-k lists when k > 0); returns the
  // worst per-row relative error of the GPU's output, which must be below tol.
  double step(const std::vector<test::seq_spec>& seqs, const std::vector<int32_t>& sel, int k,
              const std::string& what, double tol = 1e-4) {
    both_batches b(seqs, c.page_size);
    const int64_t n = b.host.batch.n_tokens;
    const int qd = c.nope + c.rope, ad = c.rank + c.rope;
    std::vector<float> q = scaled(test::random_floats(rng(), n * c.heads * qd), c.q_scale);
    std::vector<float> a = test::random_floats(rng(), n * ad);
    std::vector<float> out_c(static_cast<size_t>(n * c.heads * c.v));
    std::vector<int32_t> sel_c = sel;
    const mla_params p = params();
    cpu_ref().mla_attention(view(q, {n, c.heads, qd}), view(a, {n, ad}), *wc, *kv.c, 0, b.host.batch, p,
                        k > 0 ? view(sel_c, {n, k}) : tensor_view{}, view(out_c, {n, c.heads, c.v}));
    dvec<float> dq(gpu(), q), da(gpu(), a), dout(gpu(), n * c.heads * c.v);
    dvec<int32_t> dsel(gpu(), sel);
    // Every variant of the tensor-core kernel on the same inputs (later runs write the same
    // cache rows again); the first one's error is returned. Before each later variant a step
    // on other queries overwrites the backend's scratch (o_lat, the splits' partials), so a
    // variant that failed to write them would not pass on its predecessor's.
    std::vector<float> outs[n_tc_variants];
    double errs[n_tc_variants] = {};
    dvec<float> dq_other(gpu(), scaled(test::random_floats(rng(), n * c.heads * qd), c.q_scale)),
        dout_other(gpu(), n * c.heads * c.v);
    for (int si = 0; si < n_tc_variants; ++si) {
      const tc_stage stage(tc_variants[si]);
      if (si > 0)
        gpu().mla_attention(dq_other.view({n, c.heads, qd}), da.view({n, ad}), *wg, *kv.g, 0, b.dev, p,
                            k > 0 ? dsel.view({n, k}) : tensor_view{}, dout_other.view({n, c.heads, c.v}));
      dout.poison();
      gpu().mla_attention(dq.view({n, c.heads, qd}), da.view({n, ad}), *wg, *kv.g, 0, b.dev, p,
                          k > 0 ? dsel.view({n, k}) : tensor_view{}, dout.view({n, c.heads, c.v}));
      outs[si] = dout.host();
      const std::string tag = what + " (" + tc_variants[si].name + ")";
      BOOST_TEST((dq.host() == q), tag << ": q was modified");
      BOOST_TEST((da.host() == a), tag << ": kv_a was modified");
      kv.check_written(b, tag);
      errs[si] = worst_row_err(outs[si], out_c, n);
      BOOST_TEST_MESSAGE(tag << ": worst row rel err " << errs[si]);
      BOOST_TEST(errs[si] < tol, tag << " (heads " << c.heads << ", rank " << c.rank << ", " << name(c.wtype)
                                     << "): worst row rel err " << errs[si]);
    }
    for (int si = 1; si < n_tc_variants; ++si) {
      const double d = max_abs_diff(outs[0], outs[si]);
      BOOST_TEST(d == 0.0, what << ": " << tc_variants[0].name << " and " << tc_variants[si].name << " differ by up to "
                                << d << " (rel err " << errs[0] << " / " << errs[si] << ")");
    }
    return errs[0];
  }
};

// Random top-k lists: -1s, duplicates, positions past the row's own.
std::vector<int32_t> random_lists(const test::batch_builder& b, int k) {
  std::vector<int32_t> sel;
  for (int32_t p : b.positions) {
    std::uniform_int_distribution<int> pick(-1, p + 2);
    for (int j = 0; j < k; ++j) sel.push_back(pick(rng()));
  }
  return sel;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mla_small_shapes_mixed_batches) {
  for (dtype t : {dtype::f32, dtype::bf16, dtype::q8_0}) {
    for (int heads : {4, 10}) {  // 10: a partial group of 8 heads
      for (int k : {0, 5}) {
        mla_shape s;
        s.heads = heads;
        s.wtype = t;
        mla_pair fx(s);
        const std::string tag = std::string(k > 0 ? "topk " : "dense ") + std::string(name(t));
        auto run = [&](const std::vector<test::seq_spec>& seqs, const std::string& what) {
          test::batch_builder b(seqs, s.page_size);
          fx.step(seqs, k > 0 ? random_lists(b, k) : std::vector<int32_t>{}, k, tag + " " + what);
        };
        run({{{5, 2}, 0, 7}, {{9}, 0, 3}}, "prefill");
        run({{{5, 2}, 7, 1}, {{9, 0, 11}, 3, 6}, {{17}, 0, 1}}, "mixed");
        run({{{5, 2, 3}, 8, 1}, {{9, 0, 11}, 9, 1}, {{17}, 1, 1}}, "decode");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mla_no_nope_and_long_split_decode) {
  mla_shape s;
  s.nope = 0;  // q is all rope: the absorbed part is zero
  mla_pair fx(s);
  fx.step({{{3, 1}, 0, 6}}, {}, 0, "nope 0 prefill");
  // A long context over many pages: the decode is split across blocks and merged.
  mla_shape l;
  l.page_size = 16;
  l.n_pages = 400;
  mla_pair lx(l);
  lx.kv.fill_random(1.0f);
  const auto seqs = shuffled_seqs({{5000, 1}, {37, 1}, {1200, 9}}, l.page_size, l.n_pages);
  lx.step(seqs, {}, 0, "long dense");
  test::batch_builder b(seqs, l.page_size);
  lx.step(seqs, random_lists(b, 300), 300, "long topk");
}

BOOST_AUTO_TEST_CASE(mla_glm5_shapes) {
  for (int heads : {64, 128}) {
    mla_shape s;
    s.heads = heads;
    s.nope = 192;
    s.rope = 64;
    s.v = 256;
    s.rank = 512;
    s.page_size = 64;
    s.wtype = dtype::bf16;
    s.q_scale = 0.1f;  // q_lat = W_UK^T q_nope sums 192 terms of 0.5-scale weights
    s.n_pages = (4096 + 8192 + 16384) / 64 + 64;
    mla_pair fx(s);
    fx.kv.fill_random(1.0f);
    // A prefill chunk of 24 at the end of a 4k context, decodes at 8k and 16k.
    const auto seqs = shuffled_seqs({{4096 - 24, 24}, {8191, 1}, {16383, 1}}, s.page_size, s.n_pages);
    const std::string tag = "glm5 heads " + std::to_string(heads);
    fx.step(seqs, {}, 0, tag + " dense");
    // Top-k lists as the indexer writes them: 2048 distinct positions, -1 past the context.
    test::batch_builder b(seqs, s.page_size);
    std::vector<int32_t> sel;
    for (int32_t p : b.positions) {
      std::vector<int32_t> all(static_cast<size_t>(p) + 1);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng());
      all.resize(std::min<size_t>(all.size(), 2048));
      all.resize(2048, -1);
      sel.insert(sel.end(), all.begin(), all.end());
    }
    fx.step(seqs, sel, 2048, tag + " top-2048");
  }
}

// ---- MLA decode on tensor cores (mla_attend_tc: one row per sequence, rank 512 + rope 64)

namespace {

constexpr double tc_tol = 3e-3;  // f16 operands: see the tolerance note at the top

// Whether this device runs decode steps on the tensor-core kernel (H100 / H200; not GB10,
// whose blocks get too little shared memory; not with TANDEM_CUDA_MLA_TC=0).
bool tc_path() {
  if (const char* e = std::getenv("TANDEM_CUDA_MLA_TC"); e != nullptr && std::string(e) == "0") return false;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return false;
  return cuda::mla_tc_supported(64, 512, 64, p.sharedMemPerBlockOptin);
}

mla_shape glm5_decode_shape(int64_t n_pages, int page_size) {
  mla_shape s;
  s.heads = 64;
  s.nope = 192;
  s.rope = 64;
  s.v = 256;
  s.rank = 512;
  s.page_size = page_size;
  s.n_pages = n_pages;
  s.wtype = dtype::bf16;
  s.q_scale = 0.1f;  // scores of about unit variance, as mla_glm5_shapes
  return s;
}

// Top-k lists as the indexer writes them: k distinct positions of each row's causal context
// in random order (all of them when the context is shorter than k), then -1; with
// `minus_share`, about that share of the k entries is -1 among the positions.
std::vector<int32_t> distinct_lists(const test::batch_builder& b, int k, double minus_share = 0.0) {
  std::vector<int32_t> sel;
  std::bernoulli_distribution minus(minus_share);
  for (int32_t p : b.positions) {
    std::vector<int32_t> all(static_cast<size_t>(p) + 1);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng());
    all.resize(std::min<size_t>(all.size(), static_cast<size_t>(k)));
    for (int32_t& x : all)
      if (minus(rng())) x = -1;
    all.resize(static_cast<size_t>(k), -1);
    sel.insert(sel.end(), all.begin(), all.end());
  }
  return sel;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mla_decode_tensor_cores) {
  // GLM-5's attention shapes over 16-token pages drawn at random from the pool: 1, 8 and 32
  // sequences at contexts 1, 15, 16, 17 (page boundaries), 1000 and 8192, dense and with
  // DSA's top-2048 lists; every step against backend.cpu.
  const int page_size = 16;
  mla_pair fx(glm5_decode_shape(32 * (8192 / page_size) + 64, page_size));
  fx.kv.fill_random(1.0f);
  double long_err = 0.0;
  for (int n : {1, 8, 32}) {
    for (int ctx : {1, 15, 16, 17, 1000, 8192}) {
      const std::vector<std::pair<int, int>> lens(static_cast<size_t>(n), {ctx - 1, 1});
      const auto seqs = shuffled_seqs(lens, page_size, fx.c.n_pages);
      test::batch_builder b(seqs, page_size);
      const std::string tag = "decode " + std::to_string(n) + " x " + std::to_string(ctx);
      const double e = fx.step(seqs, {}, 0, tag + " dense", tc_tol);
      if (n == 32 && ctx == 8192) long_err = e;
      fx.step(seqs, distinct_lists(b, 2048), 2048, tag + " top-2048", tc_tol);
    }
  }
  // The f32 kernel matches backend.cpu to ~1e-6; f16 operands leave ~3e-4: the tensor-core
  // kernel is the one that ran.
  if (tc_path()) BOOST_TEST(long_err > 2e-5, "32 x 8192 dense: rel err " << long_err << ", expected f16's ~3e-4");

  // Mixed contexts in one batch under a page table as wide as 8192 keys: the split count is
  // set by the table's width, so the short rows leave most splits empty; some sequences
  // share no page order with another. Top-k lists shorter than the context with -1s among
  // the positions, and longer than it (all positions, then -1s).
  const std::vector<int> ctxs{1, 15, 16, 17, 1000, 8192, 33, 4097};
  std::vector<std::pair<int, int>> lens;
  for (int c : ctxs) lens.push_back({c - 1, 1});
  const auto seqs = shuffled_seqs(lens, page_size, fx.c.n_pages, 8192 / page_size);
  test::batch_builder b(seqs, page_size);
  fx.step(seqs, {}, 0, "mixed contexts, wide table, dense", tc_tol);
  fx.step(seqs, distinct_lists(b, 64, 0.25), 64, "mixed contexts, top-64 with -1s", tc_tol);
  fx.step(seqs, distinct_lists(b, 2048, 0.1), 2048, "mixed contexts, top-2048 with -1s", tc_tol);
  // No listed position at all for some rows (every entry -1): zeros, as backend.cpu.
  std::vector<int32_t> none = distinct_lists(b, 16);
  std::fill(none.begin(), none.begin() + 3 * 16, -1);
  fx.step(seqs, none, 16, "rows without listed positions", tc_tol);
  // More heads than a block's 64 (two head groups) and fewer (a padded group).
  for (int heads : {128, 40}) {
    mla_shape hs = glm5_decode_shape(4 * (1024 / page_size) + 16, page_size);
    hs.heads = heads;
    mla_pair hx(hs);
    hx.kv.fill_random(1.0f);
    const auto hseqs = shuffled_seqs({{999, 1}, {16, 1}, {0, 1}, {520, 1}}, page_size, hs.n_pages);
    test::batch_builder hb(hseqs, page_size);
    hx.step(hseqs, {}, 0, "heads " + std::to_string(heads) + " dense", tc_tol);
    hx.step(hseqs, distinct_lists(hb, 256, 0.2), 256, "heads " + std::to_string(heads) + " top-256", tc_tol);
  }
  // GLM-5's 64-token pages (the bench's), one long sequence.
  mla_pair px(glm5_decode_shape(8192 / 64 + 8, 64));
  px.kv.fill_random(1.0f);
  const auto pseqs = shuffled_seqs({{8192, 1}}, 64, px.c.n_pages);
  test::batch_builder pb(pseqs, 64);
  px.step(pseqs, {}, 0, "page 64, 1 x 8193 dense", tc_tol);
  px.step(pseqs, distinct_lists(pb, 2048), 2048, "page 64, 1 x 8193 top-2048", tc_tol);
}

BOOST_AUTO_TEST_CASE(mla_decode_tensor_cores_recorded) {
  // Dense and top-k decode steps recorded once as a CUDA graph and replayed with other
  // contexts, slots, page tables and lists (same shapes: 4 sequences, 64 pages of 16 each).
  const int page_size = 16, n = 4, width = 64, k = 128;
  const mla_shape s = glm5_decode_shape(n * width + 16, page_size);
  mla_pair fx(s);
  fx.kv.fill_random(1.0f);
  const int qd = s.nope + s.rope, ad = s.rank + s.rope;
  dvec<float> q(gpu(), n * s.heads * qd), a(gpu(), n * ad), out_d(gpu(), n * s.heads * s.v),
      out_k(gpu(), n * s.heads * s.v);
  dvec<int32_t> tk(gpu(), n * k), qs(gpu(), n + 1), sl(gpu(), n), pt(gpu(), n * width), sm(gpu(), n), pos(gpu(), n);
  attention_batch db;
  db.n_seqs = n, db.n_tokens = n, db.max_pages_per_seq = width;
  db.query_start = qs.view({n + 1}), db.seq_lens = sl.view({n}), db.page_table = pt.view({n, width});
  db.slot_mapping = sm.view({n}), db.positions = pos.view({n});
  const mla_params p = fx.params();
  auto body = [&] {
    gpu().mla_attention(q.view({n, s.heads, qd}), a.view({n, ad}), *fx.wg, *fx.kv.g, 0, db, p, tensor_view{},
                        out_d.view({n, s.heads, s.v}));
    gpu().mla_attention(q.view({n, s.heads, qd}), a.view({n, ad}), *fx.wg, *fx.kv.g, 0, db, p, tk.view({n, k}),
                        out_k.view({n, s.heads, s.v}));
  };
  const std::vector<std::vector<int>> rounds{{1, 300, 17, 1024}, {1024, 16, 2, 700}, {33, 1, 1000, 15}, {512, 513, 64, 1}};
  for (size_t round = 0; round < rounds.size(); ++round) {
    std::vector<std::pair<int, int>> lens;
    for (int c : rounds[round]) lens.push_back({c - 1, 1});
    const auto seqs = shuffled_seqs(lens, page_size, s.n_pages, width);
    both_batches b(seqs, page_size);
    BOOST_REQUIRE(b.host.batch.max_pages_per_seq == width);
    gpu().copy_to_device(qs.buf->data(), b.host.query_start.data(), (n + 1) * 4);
    gpu().copy_to_device(sl.buf->data(), b.host.seq_lens.data(), n * 4);
    gpu().copy_to_device(pt.buf->data(), b.host.page_table.data(), n * width * 4);
    gpu().copy_to_device(sm.buf->data(), b.host.slot_mapping.data(), n * 4);
    gpu().copy_to_device(pos.buf->data(), b.host.positions.data(), n * 4);
    std::vector<int32_t> lists = distinct_lists(b.host, k, 0.2);
    std::vector<float> hq = scaled(test::random_floats(rng(), n * s.heads * qd), s.q_scale),
                       ha = test::random_floats(rng(), n * ad);
    gpu().copy_to_device(q.buf->data(), hq.data(), hq.size() * 4);
    gpu().copy_to_device(a.buf->data(), ha.data(), ha.size() * 4);
    gpu().copy_to_device(tk.buf->data(), lists.data(), lists.size() * 4);
    std::vector<float> od(static_cast<size_t>(n * s.heads * s.v)), ok(od.size());
    cpu_ref().mla_attention(view(hq, {n, s.heads, qd}), view(ha, {n, ad}), *fx.wc, *fx.kv.c, 0, b.host.batch, p,
                            tensor_view{}, view(od, {n, s.heads, s.v}));
    cpu_ref().mla_attention(view(hq, {n, s.heads, qd}), view(ha, {n, ad}), *fx.wc, *fx.kv.c, 0, b.host.batch, p,
                            view(lists, {n, k}), view(ok, {n, s.heads, s.v}));
    // Each staging of the kernel as a graph of its own (the launcher picks the kernel when
    // the graph is recorded).
    std::vector<float> gd[n_tc_variants], gk[n_tc_variants];
    for (int si = 0; si < n_tc_variants; ++si) {
      const tc_stage stage(tc_variants[si]);
      if (si > 0) {  // other queries through the scratch first (as in mla_pair::step)
        std::vector<float> other = scaled(test::random_floats(rng(), n * s.heads * qd), s.q_scale);
        gpu().copy_to_device(q.buf->data(), other.data(), other.size() * 4);
        body();
        gpu().copy_to_device(q.buf->data(), hq.data(), hq.size() * 4);
      }
      out_d.poison(), out_k.poison();
      gpu().run_recorded(test_owner, 0x6d6c6174 + static_cast<uint64_t>(si) * 0x100000000ull, body);
      const size_t graphs = gpu().recorded_graphs();
      gd[si] = out_d.host(), gk[si] = out_k.host();
      const double ed = worst_row_err(gd[si], od, n), ek = worst_row_err(gk[si], ok, n);
      const char* vn = tc_variants[si].name;
      BOOST_TEST_MESSAGE("recorded round " << round << " (" << vn << "): dense " << ed << ", top-" << k << " " << ek);
      BOOST_TEST(ed < tc_tol, "round " << round << " (" << vn << "): dense rel err " << ed << " (graphs " << graphs
                                       << ")");
      BOOST_TEST(ek < tc_tol, "round " << round << " (" << vn << "): top-k rel err " << ek << " (graphs " << graphs
                                       << ")");
      fx.kv.check_written(b, "recorded decode round " + std::to_string(round) + " (" + vn + ")");
    }
    for (int si = 1; si < n_tc_variants; ++si) {
      BOOST_TEST(max_abs_diff(gd[0], gd[si]) == 0.0,
                 "round " << round << ": dense, " << tc_variants[si].name << " differs from " << tc_variants[0].name);
      BOOST_TEST(max_abs_diff(gk[0], gk[si]) == 0.0,
                 "round " << round << ": top-k, " << tc_variants[si].name << " differs from " << tc_variants[0].name);
    }
  }
}

// ---- DSA indexer

namespace {

void rotate(float* v, int dims, int64_t pos) {  // pairs (2i, 2i+1), as the CPU test
  for (int i = 0; i < dims / 2; ++i) {
    const double a = static_cast<double>(pos) * std::pow(static_cast<double>(theta), -2.0 * i / dims);
    const auto c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

struct dsa_pair {
  int heads, d, rope, page_size;
  cache_pair kv;

  dsa_pair(int h, int dims, int rope_dims, int ps, int64_t n_pages)
      : heads(h), d(dims), rope(rope_dims), page_size(ps), kv(n_pages, ps, dims) {}

  // Runs both backends; checks the cache rows, the GPU's list against naive double scores
  // (exact order when `exact`) and returns the GPU's lists.
  std::vector<int32_t> step(const std::vector<test::seq_spec>& seqs, std::vector<float> q, std::vector<float> k,
                            std::vector<float> w, int top_k, bool exact, const std::string& what) {
    both_batches b(seqs, page_size);
    const int64_t n = b.host.batch.n_tokens;
    std::vector<int32_t> tc(static_cast<size_t>(n * top_k));
    cpu_ref().dsa_indexer(view(q, {n, heads, d}), view(k, {n, d}), view(w, {n, heads}), *kv.c, 0, b.host.batch, rope,
                      theta, top_k, view(tc, {n, top_k}));
    dvec<float> dq(gpu(), q), dk(gpu(), k), dw(gpu(), w);
    dvec<int32_t> dt(gpu(), n * top_k);
    gpu().dsa_indexer(dq.view({n, heads, d}), dk.view({n, d}), dw.view({n, heads}), *kv.g, 0, b.dev, rope, theta,
                      top_k, dt.view({n, top_k}));
    const std::vector<int32_t> tg = dt.host();
    BOOST_TEST((dq.host() == q && dk.host() == k && dw.host() == w), what << ": an input was modified");
    kv.check_written(b, what);
    const std::vector<float> keys = kv.gpu_copy();
    int64_t same = 0;
    for (int64_t r = 0; r < n; ++r) {
      const int pos = b.host.positions[r];
      const int s_of = static_cast<int>(std::upper_bound(b.host.query_start.begin(), b.host.query_start.end(), r) -
                                        b.host.query_start.begin()) - 1;
      const int32_t* pages = b.host.page_table.data() + int64_t{s_of} * b.host.batch.max_pages_per_seq;
      std::vector<float> qr(q.begin() + r * heads * d, q.begin() + (r + 1) * heads * d);
      for (int h = 0; h < heads; ++h) rotate(qr.data() + h * d, rope, pos);
      std::vector<double> s(static_cast<size_t>(pos) + 1);
      for (int t = 0; t <= pos; ++t) {
        const float* kt = keys.data() + (int64_t{pages[t / page_size]} * page_size + t % page_size) * d;
        double acc = 0.0;
        for (int h = 0; h < heads; ++h) {
          double dot = 0.0;
          for (int j = 0; j < d; ++j) dot += double{qr[h * d + j]} * kt[j];
          acc += w[r * heads + h] / std::sqrt(double(heads)) * std::max(0.0, dot / std::sqrt(double(d)));
        }
        s[t] = acc;
      }
      std::vector<int> order(s.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return s[a] > s[c]; });
      const int m = std::min(top_k, pos + 1);
      const int32_t* got = tg.data() + r * top_k;
      std::set<int> seen;
      int errors = 0;
      for (int j = 0; j < top_k && errors < 5; ++j) {
        same += got[j] == tc[r * top_k + j];
        const std::string where = what + ": row " + std::to_string(r) + " (pos " + std::to_string(pos) +
                                  ") entry " + std::to_string(j) + " = " + std::to_string(got[j]);
        if (j >= m) {
          if (got[j] != -1) {
            BOOST_ERROR(where << ", expected -1 past the context");
            ++errors;
          }
          continue;
        }
        if (got[j] < 0 || got[j] > pos || !seen.insert(got[j]).second) {
          BOOST_ERROR(where << ": not a new causal position");
          ++errors;
          continue;
        }
        const bool ok = exact ? got[j] == order[j]
                              : std::fabs(s[got[j]] - s[order[j]]) <= 1e-4 * (1.0 + std::fabs(s[order[j]]));
        if (!ok) {
          BOOST_ERROR(where << " (score " << s[got[j]] << "), expected " << order[j] << " (score " << s[order[j]]
                            << ")");
          ++errors;
        }
      }
    }
    BOOST_TEST_MESSAGE(what << ": " << same << " of " << n * top_k << " entries equal backend.cpu's");
    return tg;
  }

  std::vector<int32_t> random_step(const std::vector<test::seq_spec>& seqs, int top_k, const std::string& what) {
    int64_t n = 0;
    for (const auto& s : seqs) n += s.n_new;
    return step(seqs, test::random_floats(rng(), n * heads * d), test::random_floats(rng(), n * d),
                test::random_floats(rng(), n * heads), top_k, false, what);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(dsa_small_shapes_mixed_batches) {
  for (int top_k : {3, 8, 40}) {
    dsa_pair fx(4, 32, 8, 4, 32);
    const std::string tag = "top-" + std::to_string(top_k);
    fx.random_step({{{5, 2}, 0, 7}, {{9}, 0, 3}}, top_k, tag + " prefill");
    fx.random_step({{{5, 2}, 7, 1}, {{9, 0, 11}, 3, 6}, {{17}, 0, 1}}, top_k, tag + " mixed");
    fx.random_step({{{5, 2, 3}, 8, 1}, {{9, 0, 11}, 9, 1}, {{17}, 1, 1}}, top_k, tag + " decode");
  }
  dsa_pair fx(3, 16, 4, 16, 64);
  std::vector<int32_t> pages(32);
  for (int i = 0; i < 32; ++i) pages[i] = (i * 7) % 32;
  fx.random_step({{pages, 0, 300}}, 16, "prefill 300");
  fx.random_step({{pages, 300, 1}, {{40}, 0, 1}}, 16, "decode + new");
}

BOOST_AUTO_TEST_CASE(dsa_ties_by_position_and_minus_one) {
  const int heads = 3, d = 16, rope = 4, n = 9;
  dsa_pair fx(heads, d, rope, 4, 16);
  // Keys depend on pos % 3 only, with their rotated dims zero: exact score ties.
  std::vector<std::vector<float>> base;
  for (int i = 0; i < 3; ++i) base.push_back(test::random_floats(rng(), d));
  std::vector<float> k;
  for (int t = 0; t < n; ++t) {
    std::vector<float> row = base[t % 3];
    std::fill(row.begin(), row.begin() + rope, 0.0f);
    k.insert(k.end(), row.begin(), row.end());
  }
  auto w = test::random_floats(rng(), n * heads);
  for (float& x : w) x = std::fabs(x) + 0.1f;
  fx.step({{{3, 0, 6}, 0, n}}, test::random_floats(rng(), n * heads * d), k, w, 5, true, "ties");
  // Identical keys everywhere: positions in order, then -1.
  dsa_pair same(2, 8, 0, 4, 4);
  std::vector<float> k1(5 * 8, 0.5f), q1(5 * 2 * 8, 1.0f), w1(5 * 2, 1.0f);
  const auto got = same.step({{{0, 1}, 0, 5}}, q1, k1, w1, 4, true, "identical keys");
  const std::vector<int32_t> want{0, -1, -1, -1, 0, 1, -1, -1, 0, 1, 2, -1, 0, 1, 2, 3, 0, 1, 2, 3};
  BOOST_TEST(got == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dsa_and_mla_glm5_shapes) {
  // GLM-5's indexer: 32 heads of 128, rope 64, top-2048; a chunk of 32 at the end of 4k, a
  // short prompt (fewer keys than top_k: -1s), decodes at 8k, 16k and 128k + 5.
  const int page_size = 64;
  const std::vector<std::pair<int, int>> lens{{4096 - 32, 32}, {0, 40}, {8191, 1}, {16383, 1}, {131072 + 4, 1}};
  int64_t pages = 16;
  for (auto [c, f] : lens) pages += (c + f + page_size - 1) / page_size;
  dsa_pair fx(32, 128, 64, page_size, pages);
  fx.kv.fill_random(1.0f);
  const auto seqs = shuffled_seqs(lens, page_size, pages);
  const std::vector<int32_t> topk = fx.random_step(seqs, 2048, "glm5 indexer");
  // The GPU's lists drive MLA on both backends (the sparse path as the model runs it).
  mla_shape s;
  s.heads = 64;
  s.nope = 192;
  s.rope = 64;
  s.v = 256;
  s.rank = 512;
  s.page_size = page_size;
  s.n_pages = pages;
  s.wtype = dtype::bf16;
  s.q_scale = 0.1f;
  mla_pair mx(s);
  mx.kv.fill_random(1.0f);
  mx.step(seqs, topk, 2048, "glm5 sparse MLA");
}

// ---- norms

BOOST_AUTO_TEST_CASE(layer_norm_and_strided_rms_norm_match_cpu) {
  for (auto [n, d, stride] : {std::tuple<int64_t, int64_t, int64_t>{1, 128, 128}, {37, 128, 160}, {5, 7000, 7000}}) {
    std::vector<float> x = test::random_floats(rng(), n * stride, 3.0f);
    for (float& v : x) v += 2.0f;  // a mean away from zero: the centred variance matters
    const auto w = test::random_floats(rng(), d), b = test::random_floats(rng(), d);
    auto strided = [&](void* p, dtype t, backend& be) {
      tensor_view v = tensor_view::contiguous(p, t, {n, d}, be.dev());
      v.strides[0] = stride;
      return v;
    };
    std::vector<float> xc = x, wc = w, bc = b;
    cpu_ref().layer_norm(strided(xc.data(), dtype::f32, cpu_ref()), view(wc, {d}), view(bc, {d}), 1e-6f,
                     strided(xc.data(), dtype::f32, cpu_ref()));
    dvec<float> dx(gpu(), x), dw(gpu(), w), db(gpu(), b);
    gpu().layer_norm(strided(dx.buf->data(), dtype::f32, gpu()), dw.view({d}), db.view({d}), 1e-6f,
                     strided(dx.buf->data(), dtype::f32, gpu()));
    const std::vector<float> got = dx.host();
    BOOST_TEST(worst_row_err(got, xc, n) < 1e-5, "layer_norm n " << n << " d " << d << " stride " << stride);
    // In place and strided, as the model normalises the latent inside kv_a.
    std::vector<float> xr = x;
    cpu_ref().rms_norm(strided(xr.data(), dtype::f32, cpu_ref()), view(wc, {d}), 1e-6f, strided(xr.data(), dtype::f32, cpu_ref()));
    dvec<float> dr(gpu(), x);
    gpu().rms_norm(strided(dr.buf->data(), dtype::f32, gpu()), dw.view({d}), 1e-6f,
                   strided(dr.buf->data(), dtype::f32, gpu()));
    BOOST_TEST(worst_row_err(dr.host(), xr, n) < 1e-5, "rms_norm n " << n << " d " << d << " stride " << stride);
  }
}

// ---- recorded steps, support and bad arguments

BOOST_AUTO_TEST_CASE(recorded_step_replays_with_new_batch_contents) {
  // dsa_indexer then mla_attention on fixed buffers, recorded once and replayed with other
  // positions, slots and page tables (same shapes): the ops read no device data on the host.
  const int page_size = 16, heads = 8, rank = 64, rope = 16, nope = 16, vd = 16, ih = 4, idim = 32, top_k = 24;
  const int64_t n_pages = 64, n = 3;
  mla_shape s;
  s.heads = heads, s.rank = rank, s.rope = rope, s.nope = nope, s.v = vd, s.page_size = page_size, s.n_pages = n_pages;
  mla_pair mx(s);
  dsa_pair ix(ih, idim, rope, page_size, n_pages);
  mx.kv.fill_random(1.0f);
  ix.kv.fill_random(1.0f);
  const int qd = nope + rope, ad = rank + rope;
  dvec<float> q(gpu(), n * heads * qd), a(gpu(), n * ad), iq(gpu(), n * ih * idim), ik(gpu(), n * idim),
      iw(gpu(), n * ih), out(gpu(), n * heads * vd);
  dvec<int32_t> tk(gpu(), n * top_k), qs(gpu(), n + 1), sl(gpu(), n), pt(gpu(), n * 8), sm(gpu(), n), pos(gpu(), n);
  attention_batch db;
  db.n_seqs = static_cast<int>(n), db.n_tokens = static_cast<int>(n), db.max_pages_per_seq = 8;
  db.query_start = qs.view({n + 1}), db.seq_lens = sl.view({n}), db.page_table = pt.view({n, 8});
  db.slot_mapping = sm.view({n}), db.positions = pos.view({n});
  const mla_params p = mx.params();
  auto body = [&] {
    gpu().dsa_indexer(iq.view({n, ih, idim}), ik.view({n, idim}), iw.view({n, ih}), *ix.kv.g, 0, db, rope, theta, top_k,
                      tk.view({n, top_k}));
    gpu().mla_attention(q.view({n, heads, qd}), a.view({n, ad}), *mx.wg, *mx.kv.g, 0, db, p, tk.view({n, top_k}),
                        out.view({n, heads, vd}));
  };
  for (int round = 0; round < 3; ++round) {
    const auto seqs = shuffled_seqs({{30 + 17 * round, 1}, {100 - 9 * round, 1}, {3 + round, 1}}, page_size, n_pages);
    both_batches b(seqs, page_size);
    // Pad the page tables to the recorded width of 8.
    std::vector<int32_t> table(static_cast<size_t>(n * 8), 0);
    for (int64_t r = 0; r < n; ++r)
      for (size_t j = 0; j < seqs[r].pages.size(); ++j) table[r * 8 + j] = seqs[r].pages[j];
    gpu().copy_to_device(qs.buf->data(), b.host.query_start.data(), (n + 1) * 4);
    gpu().copy_to_device(sl.buf->data(), b.host.seq_lens.data(), n * 4);
    gpu().copy_to_device(pt.buf->data(), table.data(), table.size() * 4);
    gpu().copy_to_device(sm.buf->data(), b.host.slot_mapping.data(), n * 4);
    gpu().copy_to_device(pos.buf->data(), b.host.positions.data(), n * 4);
    std::vector<float> hq = scaled(test::random_floats(rng(), n * heads * qd), 0.5f), ha = test::random_floats(rng(), n * ad),
                       hiq = test::random_floats(rng(), n * ih * idim), hik = test::random_floats(rng(), n * idim),
                       hiw = test::random_floats(rng(), n * ih);
    gpu().copy_to_device(q.buf->data(), hq.data(), hq.size() * 4);
    gpu().copy_to_device(a.buf->data(), ha.data(), ha.size() * 4);
    gpu().copy_to_device(iq.buf->data(), hiq.data(), hiq.size() * 4);
    gpu().copy_to_device(ik.buf->data(), hik.data(), hik.size() * 4);
    gpu().copy_to_device(iw.buf->data(), hiw.data(), hiw.size() * 4);
    gpu().run_recorded(test_owner, 0x6d6c61, body);
    const size_t graphs = gpu().recorded_graphs();
    // backend.cpu on the same inputs, with the GPU's lists (checked by the DSA tests).
    std::vector<int32_t> tcpu(static_cast<size_t>(n * top_k));
    cpu_ref().dsa_indexer(view(hiq, {n, ih, idim}), view(hik, {n, idim}), view(hiw, {n, ih}), *ix.kv.c, 0, b.host.batch,
                      rope, theta, top_k, view(tcpu, {n, top_k}));
    std::vector<int32_t> tg = tk.host();
    std::vector<float> oc(static_cast<size_t>(n * heads * vd));
    cpu_ref().mla_attention(view(hq, {n, heads, qd}), view(ha, {n, ad}), *mx.wc, *mx.kv.c, 0, b.host.batch, p,
                        view(tg, {n, top_k}), view(oc, {n, heads, vd}));
    const double e = worst_row_err(out.host(), oc, n);
    BOOST_TEST(e < 1e-4, "round " << round << ": rel err " << e << " (graphs " << graphs << ")");
    int same = 0;
    for (size_t i = 0; i < tg.size(); ++i) same += tg[i] == tcpu[i];
    BOOST_TEST(same >= static_cast<int>(tg.size()) - 4, "round " << round << ": " << same << " of " << tg.size()
                                                                    << " top-k entries equal backend.cpu's");
    mx.kv.check_written(b, "recorded round " + std::to_string(round));
  }
}

BOOST_AUTO_TEST_CASE(supports_and_rejects_bad_arguments) {
  BOOST_TEST(gpu().supports(backend_op::attention_mla));
  BOOST_TEST(gpu().supports(backend_op::dsa_indexer));
  BOOST_TEST(gpu().supports(backend_op::layer_norm));
  mla_shape s;
  mla_pair fx(s);
  both_batches b({{{1}, 0, 2}}, s.page_size);
  const int qd = s.nope + s.rope, ad = s.rank + s.rope;
  dvec<float> q(gpu(), 2 * s.heads * qd), a(gpu(), 2 * ad), out(gpu(), 2 * s.heads * s.v);
  const mla_params p = fx.params();
  auto msg_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const error& e) {
      return e.what();
    }
    return "";
  };
  auto call = [&](kv_storage& kv, int layer, const mla_params& pp, tensor_view qv, tensor_view ov, tensor_view tk) {
    gpu().mla_attention(qv, a.view({2, ad}), *fx.wg, kv, layer, b.dev, pp, tk, ov);
  };
  const tensor_view qv = q.view({2, s.heads, qd}), ov = out.view({2, s.heads, s.v});
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, qv, ov, {}); }) == "");
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 1, p, qv, ov, {}); }).find("mla_attention: KV layer 1") != std::string::npos);
  kv_layout with_values = fx.kv.layout;
  with_values.values = true;
  with_values.head_dim = 64;
  auto gqa = gpu().alloc_kv(with_values);
  BOOST_TEST(msg_of([&] { call(*gqa, 0, p, qv, ov, {}); }).find("key-only") != std::string::npos);
  BOOST_TEST(msg_of([&] { call(*fx.kv.c, 0, p, qv, ov, {}); }).find("not allocated by backend.cuda") !=
             std::string::npos);
  mla_params odd = p;
  odd.rope_dims = 7;
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, odd, qv, ov, {}); }).find("mla_attention: p.rope_dims") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, q.view({2, s.heads * qd - 4}), ov, {}); }).find("mla_attention: q") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, qv, out.view({1, s.heads, s.v}), {}); }).find("mla_attention: out") !=
             std::string::npos);
  dvec<int32_t> sel(gpu(), 6);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, qv, ov, sel.view({3, 2})); }).find("mla_attention: topk") !=
             std::string::npos);
  std::vector<float> host_q(2 * s.heads * qd);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, view(host_q, {2, s.heads, qd}), ov, {}); }).find("device memory") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, qv, q.view({2, s.heads, s.v}), {}); }).find("must not overlap") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] { gpu().load_mla(fx.kvb.info, s.heads + 1, s.nope, s.v); }).find("load_mla: kv_b") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] { call(*fx.kv.g, 0, p, qv, ov, {}); }) == "");
  // A GQA attention() call on a key-only cache is an error, not a null V.
  BOOST_TEST(msg_of([&] { dynamic_cast<cuda::cuda_kv&>(*fx.kv.g).layer(0); }).find("key-only") != std::string::npos);

  dsa_pair ix(2, 8, 2, 4, 4);
  both_batches ib({{{0}, 0, 2}}, 4);
  dvec<float> iq(gpu(), 2 * 2 * 8), ik(gpu(), 2 * 8), iw(gpu(), 2 * 2);
  dvec<int32_t> tk(gpu(), 2 * 4);
  auto dsa = [&](int rope, int top_k, tensor_view kv_k, tensor_view t) {
    return msg_of([&] {
      gpu().dsa_indexer(iq.view({2, 2, 8}), kv_k, iw.view({2, 2}), *ix.kv.g, 0, ib.dev, rope, theta, top_k, t);
    });
  };
  BOOST_TEST(dsa(2, 4, ik.view({2, 8}), tk.view({2, 4})) == "");
  BOOST_TEST(dsa(3, 4, ik.view({2, 8}), tk.view({2, 4})).find("dsa_indexer: rope_dims") != std::string::npos);
  BOOST_TEST(dsa(2, 0, ik.view({2, 8}), tk.view({2, 4})).find("dsa_indexer: top_k") != std::string::npos);
  BOOST_TEST(dsa(2, 4, ik.view({2, 8}), tk.view({2, 2, 2})).find("dsa_indexer: topk") != std::string::npos);
  BOOST_TEST(dsa(2, 2, ik.view({2, 8}), tk.view({2, 4})).find("dsa_indexer: topk") != std::string::npos);
  BOOST_TEST(dsa(2, 4, ik.view({1, 16}), tk.view({2, 4})).find("dsa_indexer: k") != std::string::npos);
  BOOST_TEST(dsa(2, 9000, ik.view({2, 8}), tk.view({2, 4})).find("dsa_indexer: top_k 9000") != std::string::npos);
  dsa_pair odd_dims(2, 6, 2, 4, 4);  // 6 dims: not a multiple of 4
  dvec<float> oq(gpu(), 2 * 2 * 6), ok(gpu(), 2 * 6);
  BOOST_TEST(msg_of([&] {
               gpu().dsa_indexer(oq.view({2, 2, 6}), ok.view({2, 6}), iw.view({2, 2}), *odd_dims.kv.g, 0, ib.dev, 2,
                                 theta, 4, tk.view({2, 4}));
             }).find("multiple of 4") != std::string::npos);
}

TANDEM_GPU_TEST_MAIN
