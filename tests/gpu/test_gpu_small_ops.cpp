#define BOOST_TEST_MODULE gpu_small_ops
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// backend.cuda's small ops (attention_full, dynamic_conv, top_k: plugins/cuda/
// cuda_small_ops.cpp) against backend.cpu, which runs the host defaults of
// core/src/base/backend_small_ops.cpp (the contract's reference), on the same random
// inputs: DFlash2's drafter shapes (attention 8 rows x 9 heads over 3 KV heads of 64 dims,
// 1..4096 keys; conv 8 x 576 in 36 groups; top-16 of 7 rows of 49152), general shapes
// and edge cases. GPU outputs are NaN-poisoned (ids -1) before each run.
//
// Tolerances:
//  - attention_full: fp32 on both sides, different summation orders: the host sums the m
//    exponentials and the m weighted value rows one after another (8 partial sums for the
//    dots), the GPU folds tiles of 32 keys into an online softmax (a rescale per tile) and
//    merges key ranges. Inputs N(0, 1) with scale 1/sqrt(head_dim) give scores of unit
//    spread; the host's sequential sums lose ~sqrt(m) 2^-24 relative, the GPU's less. A host
//    emulation of both orders measured worst per-row (norm-wise over heads x dims) errors of
//    1e-6 (m = 2056) to 2.6e-6 (m = 10000): 1e-5 per row (scaled by sqrt(m / 4096) above
//    4096 keys) leaves a 4x margin and still catches a wrong key, head or split (O(1)
//    errors). Peaked softmaxes (scores of spread 4) round the scores' larger magnitudes
//    into the weights: 2e-5.
//  - dynamic_conv: the host's roundings exactly (the kernel does not contract into fma): bit
//    for bit where the host compiler cannot contract either (x86-64 without FMA, the
//    default build); elsewhere 1e-6 relative to |w0 x| + |w1 x'| per element.
//  - top_k: exact: ids equal, values equal bit for bit (NaN and -0 included).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu_backend.hpp"
#include "gpu_util.hpp"
#include "tandem/error.hpp"
#include "test_util.hpp"

using namespace tandem;
using test::dvec;
using test::view;

// The tests' name for their recorded steps (backend::run_recorded).
const uint64_t test_owner = tandem::new_recording_owner();

namespace {

cuda::cuda_backend& gpu() {
  static cuda::cuda_backend be;
  return be;
}

cpu::cpu_backend& cpu_ref() {
  static cpu::cpu_backend be({static_cast<int>(std::max(1u, std::thread::hardware_concurrency())), 0, nullptr});
  return be;
}

std::mt19937& rng() {
  static std::mt19937 r(20261205);
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

std::string shape(std::initializer_list<int64_t> dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

// ---- attention_full

struct attn_shape {
  int64_t n, heads, kv_heads, dim, m;
};

double attn_tolerance(int64_t m, float q_scale) {
  const double base = q_scale > 1.0f ? 2e-5 : 1e-5;
  return base * std::max(1.0, std::sqrt(static_cast<double>(m) / 4096.0));
}

// Both backends on the same random q, k, v; the GPU's output, checked against the host's.
std::vector<float> attention_case(const attn_shape& s, float q_scale = 1.0f) {
  const auto [n, H, Hkv, D, m] = s;
  const std::string what = "attention_full n " + std::to_string(n) + " heads " + std::to_string(H) + "/" +
                           std::to_string(Hkv) + " dim " + std::to_string(D) + " m " + std::to_string(m) +
                           (q_scale != 1.0f ? " q x" + std::to_string(q_scale) : "");
  std::vector<float> q = scaled(test::random_floats(rng(), n * H * D), q_scale);
  std::vector<float> k = test::random_floats(rng(), m * Hkv * D), v = test::random_floats(rng(), m * Hkv * D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out_c(static_cast<size_t>(n * H * D));
  cpu_ref().attention_full(view(q, {n, H, D}), view(k, {m, Hkv, D}), view(v, {m, Hkv, D}), scale,
                           view(out_c, {n, H, D}));
  dvec<float> dq(gpu(), q), dk(gpu(), k), dv(gpu(), v), dout(gpu(), n * H * D);
  gpu().attention_full(dq.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale,
                       dout.view({n, H, D}));
  const std::vector<float> out_g = dout.host();
  BOOST_TEST((dq.host() == q), what << ": q was modified");
  BOOST_TEST((dk.host() == k), what << ": k was modified");
  const double e = worst_row_err(out_g, out_c, n), tol = attn_tolerance(m, q_scale);
  BOOST_TEST_MESSAGE(what << ": worst row rel err " << e);
  BOOST_TEST(e < tol, what << ": worst row rel err " << e << " (tolerance " << tol << ")");
  return out_g;
}

// ---- dynamic_conv

constexpr bool host_rounds_separately =
#if defined(__x86_64__) && !defined(__FMA__)
    true;
#else
    false;
#endif

void conv_case(int64_t n, int64_t d, int64_t G) {
  const std::string what = "dynamic_conv " + shape({n, d}) + " in " + std::to_string(G) + " groups";
  std::vector<float> x = test::random_floats(rng(), n * d), taps = test::random_floats(rng(), n * 2 * G, 0.5f),
                     base = test::random_floats(rng(), 2 * G);
  std::vector<float> out_c(static_cast<size_t>(n * d));
  cpu_ref().dynamic_conv(view(x, {n, d}), view(taps, {n, 2 * G}), view(base, {G, 2}), view(out_c, {n, d}));
  dvec<float> dx(gpu(), x), dt(gpu(), taps), db(gpu(), base), dout(gpu(), n * d);
  gpu().dynamic_conv(dx.view({n, d}), dt.view({n, 2 * G}), db.view({G, 2}), dout.view({n, d}));
  const std::vector<float> out_g = dout.host();
  const int64_t size = d / G;
  int64_t inexact = 0;
  double worst = 0.0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d; ++c) {
      const int64_t g = c / size, i = r * d + c;
      const double w0 = double{base[2 * g]} + taps[r * 2 * G + 2 * g];
      const double w1 = double{base[2 * g + 1]} + taps[r * 2 * G + 2 * g + 1];
      const double mag = std::fabs(w0 * x[i]) + (r > 0 ? std::fabs(w1 * x[i - d]) : 0.0);
      if (std::memcmp(&out_g[i], &out_c[i], sizeof(float)) != 0) ++inexact;
      const double e = std::fabs(double{out_g[i]} - out_c[i]) / (mag + 1e-30);
      worst = std::max(worst, std::isnan(e) ? INFINITY : e);
    }
  BOOST_TEST_MESSAGE(what << ": " << inexact << " elements not bit-equal, worst rel err " << worst);
  if (host_rounds_separately) BOOST_TEST(inexact == 0, what << ": " << inexact << " elements differ from the host's");
  BOOST_TEST(worst <= 1e-6, what << ": worst rel err " << worst);
}

// ---- top_k

enum class fill { normal, ties, specials, all_nan, all_neg_inf, nan_neg_inf, zeros, ascending, descending, constant };

const char* fill_name(fill f) {
  switch (f) {
    case fill::normal: return "normal";
    case fill::ties: return "ties";
    case fill::specials: return "NaN/inf/-0 mix";
    case fill::all_nan: return "all NaN";
    case fill::all_neg_inf: return "all -inf";
    case fill::nan_neg_inf: return "NaN and -inf";
    case fill::zeros: return "+0 and -0";
    case fill::ascending: return "ascending";
    case fill::descending: return "descending";
    case fill::constant: return "constant";
  }
  return "?";
}

std::vector<float> make_rows(fill f, int64_t n, int64_t m) {
  std::vector<float> x(static_cast<size_t>(n * m));
  std::normal_distribution<float> N(0.0f, 3.0f);
  auto& r = rng();
  for (int64_t i = 0; i < n * m; ++i) {
    const int64_t c = i % m;
    float& v = x[static_cast<size_t>(i)];
    switch (f) {
      case fill::normal: v = N(r); break;
      case fill::ties: v = static_cast<float>(r() % 7) - 3.0f; break;
      case fill::specials: {
        const unsigned t = r() % 10;
        v = t == 0   ? std::numeric_limits<float>::quiet_NaN()
            : t == 1 ? -INFINITY
            : t == 2 ? -0.0f
            : t == 3 ? 0.0f
            : t == 4 ? INFINITY
                     : N(r);
        break;
      }
      case fill::all_nan: v = std::numeric_limits<float>::quiet_NaN(); break;
      case fill::all_neg_inf: v = -INFINITY; break;
      case fill::nan_neg_inf: v = r() % 2 ? std::numeric_limits<float>::quiet_NaN() : -INFINITY; break;
      case fill::zeros: v = r() % 2 ? 0.0f : -0.0f; break;
      case fill::ascending: v = static_cast<float>(c); break;  // the best in the last segment
      case fill::descending: v = -static_cast<float>(c); break;
      case fill::constant: v = c == m - 1 && m > 3 ? std::numeric_limits<float>::quiet_NaN() : -3.0f; break;
    }
  }
  return x;
}

void top_k_case(const std::vector<float>& x_in, int64_t n, int64_t m, int k, const std::string& what) {
  std::vector<float> x = x_in;
  std::vector<int32_t> ids_c(static_cast<size_t>(n * k));
  std::vector<float> val_c(static_cast<size_t>(n * k));
  cpu_ref().top_k(view(x, {n, m}), k, view(ids_c, {n, k}), view(val_c, {n, k}));
  dvec<float> dx(gpu(), x), dval(gpu(), n * k);
  dvec<int32_t> dids(gpu(), n * k);
  gpu().top_k(dx.view({n, m}), k, dids.view({n, k}), dval.view({n, k}));
  const std::vector<int32_t> ids_g = dids.host();
  const std::vector<float> val_g = dval.host();
  int64_t bad_ids = 0, bad_vals = 0, first = -1;
  for (size_t i = 0; i < ids_c.size(); ++i) {
    const bool id_ok = ids_g[i] == ids_c[i];
    const bool val_ok = std::memcmp(&val_g[i], &val_c[i], sizeof(float)) == 0;
    bad_ids += id_ok ? 0 : 1;
    bad_vals += val_ok ? 0 : 1;
    if ((!id_ok || !val_ok) && first < 0) first = static_cast<int64_t>(i);
  }
  const std::string tag = what + " (" + shape({n, m}) + ", k " + std::to_string(k) + ")";
  if (first >= 0)
    BOOST_ERROR(tag << ": " << bad_ids << " ids and " << bad_vals << " values differ; first at row " << first / k
                    << " rank " << first % k << ": gpu " << ids_g[first] << " = " << val_g[first] << ", host "
                    << ids_c[first] << " = " << val_c[first]);
}

}  // namespace

BOOST_AUTO_TEST_CASE(small_ops_supported) {
  for (backend_op op : {backend_op::attention_full, backend_op::dynamic_conv, backend_op::top_k})
    BOOST_TEST(gpu().supports(op), name(op));
  cuda::cuda_backend inv({.batch_invariant = true});
  for (backend_op op : {backend_op::attention_full, backend_op::dynamic_conv, backend_op::top_k})
    BOOST_TEST(inv.supports(op), name(op) << " (batch_invariant)");
}

BOOST_AUTO_TEST_CASE(attention_full_dflash2_shapes) {
  // One tile, partial tiles, one and several key ranges, the drafter's window sizes.
  for (int64_t m : {1, 2, 16, 31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 257, 500, 1000, 1024, 2048, 2056, 4096})
    attention_case({8, 9, 3, 64, m});
  for (int64_t m : {1, 17, 2056}) attention_case({1, 9, 3, 64, m});  // one query row
  attention_case({8, 9, 3, 64, 2056}, 4.0f);                         // peaked softmax
  attention_case({8, 9, 3, 64, 100}, 4.0f);
}

BOOST_AUTO_TEST_CASE(attention_full_general_shapes) {
  const std::vector<attn_shape> shapes = {
      {1, 1, 1, 64, 77},      // one head
      {4, 8, 8, 64, 300},     // no GQA
      {5, 8, 1, 128, 1500},   // MQA, 128 dims
      {40, 8, 2, 128, 300},   // 160 query vectors per kv head: five query tiles
      {3, 6, 2, 100, 3000},   // head_dim not a multiple of 32
      {5, 4, 4, 3, 50},       // head_dim not a multiple of 4
      {11, 12, 3, 1, 90},     // one dim
      {7, 16, 2, 32, 5},
      {2, 4, 1, 256, 700},    // the largest head_dim
      {3, 8, 2, 256, 33},
      {2, 2, 1, 17, 10000},   // many keys: more keys per range
      {70, 4, 2, 64, 9},      // more rows than a query tile
  };
  for (const attn_shape& s : shapes) attention_case(s);
}

BOOST_AUTO_TEST_CASE(attention_full_in_place_and_errors) {
  const int64_t n = 8, H = 9, Hkv = 3, D = 64, m = 700;
  std::vector<float> q = test::random_floats(rng(), n * H * D), k = test::random_floats(rng(), m * Hkv * D),
                     v = test::random_floats(rng(), m * Hkv * D);
  dvec<float> dq(gpu(), q), dk(gpu(), k), dv(gpu(), v), dout(gpu(), n * H * D);
  const float scale = 0.125f;
  gpu().attention_full(dq.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale, dout.view({n, H, D}));
  const std::vector<float> separate = dout.host();
  gpu().attention_full(dq.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale, dq.view({n, H, D}));
  BOOST_TEST((dq.host() == separate), "out = q gives the same result as a separate out");

  BOOST_CHECK_THROW(gpu().attention_full(dout.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale,
                                         dk.view({n, H, D})),
                    tandem::error);  // out overlaps k
  BOOST_CHECK_THROW(gpu().attention_full(dout.view({n, 8, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale,
                                         dq.view({n, 8, D})),
                    tandem::error);  // 8 heads over 3 kv heads
  dvec<float> big(gpu(), 2 * 3 * 264);
  dvec<float> big_out(gpu(), 2 * 3 * 264);
  BOOST_CHECK_THROW(gpu().attention_full(big.view({1, 3, 264}), big.view({2, 3, 264}), big.view({2, 3, 264}), scale,
                                         big_out.view({1, 3, 264})),
                    tandem::error);  // head_dim above 256
}

BOOST_AUTO_TEST_CASE(dynamic_conv_shapes) {
  conv_case(8, 576, 36);  // the drafter's
  conv_case(1, 576, 36);  // one row: no previous row
  conv_case(2, 576, 36);
  conv_case(5, 30, 3);
  conv_case(3, 64, 1);     // one group
  conv_case(4, 48, 48);    // one channel per group
  conv_case(300, 1000, 8);
  dvec<float> x(gpu(), 8 * 576), taps(gpu(), 8 * 72), base(gpu(), 72);
  BOOST_CHECK_THROW(gpu().dynamic_conv(x.view({8, 576}), taps.view({8, 72}), base.view({36, 2}), x.view({8, 576})),
                    tandem::error);  // out aliases x
  dvec<float> out(gpu(), 8 * 576);
  BOOST_CHECK_THROW(gpu().dynamic_conv(x.view({8, 576}), taps.view({8, 70}), base.view({35, 2}), out.view({8, 576})),
                    tandem::error);  // 35 groups do not divide 576
}

BOOST_AUTO_TEST_CASE(top_k_dflash2_shape) {
  const int64_t n = 7, m = 49152;
  for (fill f : {fill::normal, fill::ties, fill::specials, fill::ascending})
    top_k_case(make_rows(f, n, m), n, m, 16, std::string("drafter ") + fill_name(f));
}

BOOST_AUTO_TEST_CASE(top_k_edges) {
  // One segment (m <= 2048), two with a short last one (2049: fewer columns than k),
  // several; k = 1, 16, 64 and k = m.
  for (int64_t m : {1, 2, 16, 64, 100, 2047, 2048, 2049, 4097, 49152}) {
    for (int k : {1, 16, 64}) {
      if (k > m) continue;
      for (fill f : {fill::normal, fill::ties, fill::specials, fill::all_nan, fill::all_neg_inf, fill::nan_neg_inf,
                     fill::zeros, fill::ascending, fill::descending, fill::constant})
        top_k_case(make_rows(f, 3, m), 3, m, k, fill_name(f));
    }
    if (m <= 64)
      for (fill f : {fill::normal, fill::ties, fill::all_nan})
        top_k_case(make_rows(f, 2, m), 2, m, static_cast<int>(m), std::string("k = m, ") + fill_name(f));
  }
  top_k_case(make_rows(fill::normal, 1, 49152), 1, 49152, 16, "one row");
  top_k_case(make_rows(fill::normal, 33, 3000), 33, 3000, 8, "many rows");
}

BOOST_AUTO_TEST_CASE(top_k_largest_rows) {
  const int64_t m = int64_t{1} << 20;
  for (fill f : {fill::normal, fill::ties, fill::specials}) top_k_case(make_rows(f, 2, m), 2, m, 64, fill_name(f));
  top_k_case(make_rows(fill::ascending, 1, m), 1, m, 5, "ascending");
}

BOOST_AUTO_TEST_CASE(top_k_errors) {
  dvec<float> x(gpu(), 4 * 100), vals(gpu(), 4 * 65);
  dvec<int32_t> ids(gpu(), 4 * 65);
  BOOST_CHECK_THROW(gpu().top_k(x.view({4, 100}), 0, ids.view({4, 0}), vals.view({4, 0})), tandem::error);
  BOOST_CHECK_THROW(gpu().top_k(x.view({4, 10}), 11, ids.view({4, 11}), vals.view({4, 11})), tandem::error);
  BOOST_CHECK_THROW(gpu().top_k(x.view({4, 100}), 65, ids.view({4, 65}), vals.view({4, 65})), tandem::error);
  BOOST_CHECK_THROW(gpu().top_k(x.view({4, 100}), 16, ids.view({4, 15}), vals.view({4, 16})), tandem::error);
  dvec<float> wide(gpu(), (int64_t{1} << 20) + 1);
  BOOST_CHECK_THROW(gpu().top_k(wide.view({1, (int64_t{1} << 20) + 1}), 4, ids.view({1, 4}), vals.view({1, 4})),
                    tandem::error);
}

// The three ops recorded in a CUDA graph (no host wait, no allocation while recording) and
// replayed on new inputs in the same buffers.
BOOST_AUTO_TEST_CASE(small_ops_record_and_replay) {
  const int64_t n = 8, H = 9, Hkv = 3, D = 64, m = 2056, d = 576, G = 36, tn = 7, tm = 49152;
  const int k = 16;
  const float scale = 0.125f;
  dvec<float> dq(gpu(), n * H * D), dk(gpu(), m * Hkv * D), dv(gpu(), m * Hkv * D), dout(gpu(), n * H * D);
  dvec<float> dx(gpu(), n * d), dt(gpu(), n * 2 * G), db(gpu(), 2 * G), dc(gpu(), n * d);
  dvec<float> dl(gpu(), tn * tm), dval(gpu(), tn * k);
  dvec<int32_t> dids(gpu(), tn * k);
  const auto body = [&] {
    gpu().attention_full(dq.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), scale, dout.view({n, H, D}));
    gpu().dynamic_conv(dx.view({n, d}), dt.view({n, 2 * G}), db.view({G, 2}), dc.view({n, d}));
    gpu().top_k(dl.view({tn, tm}), k, dids.view({tn, k}), dval.view({tn, k}));
  };
  for (int round = 0; round < 3; ++round) {  // 0: run and record; 1, 2: replays
    std::vector<float> q = test::random_floats(rng(), n * H * D), kk = test::random_floats(rng(), m * Hkv * D),
                       v = test::random_floats(rng(), m * Hkv * D), x = test::random_floats(rng(), n * d),
                       t = test::random_floats(rng(), n * 2 * G, 0.5f), b = test::random_floats(rng(), 2 * G),
                       l = make_rows(round == 1 ? fill::ties : fill::normal, tn, tm);
    gpu().copy_to_device(dq.buf->data(), q.data(), q.size() * 4);
    gpu().copy_to_device(dk.buf->data(), kk.data(), kk.size() * 4);
    gpu().copy_to_device(dv.buf->data(), v.data(), v.size() * 4);
    gpu().copy_to_device(dx.buf->data(), x.data(), x.size() * 4);
    gpu().copy_to_device(dt.buf->data(), t.data(), t.size() * 4);
    gpu().copy_to_device(db.buf->data(), b.data(), b.size() * 4);
    gpu().copy_to_device(dl.buf->data(), l.data(), l.size() * 4);
    dout.poison();
    dc.poison();
    dval.poison();
    dids.poison();
    gpu().run_recorded(test_owner, 0x5e11a11u, body);

    std::vector<float> out_c(static_cast<size_t>(n * H * D)), conv_c(static_cast<size_t>(n * d)),
        val_c(static_cast<size_t>(tn * k));
    std::vector<int32_t> ids_c(static_cast<size_t>(tn * k));
    cpu_ref().attention_full(view(q, {n, H, D}), view(kk, {m, Hkv, D}), view(v, {m, Hkv, D}), scale,
                             view(out_c, {n, H, D}));
    cpu_ref().dynamic_conv(view(x, {n, d}), view(t, {n, 2 * G}), view(b, {G, 2}), view(conv_c, {n, d}));
    cpu_ref().top_k(view(l, {tn, tm}), k, view(ids_c, {tn, k}), view(val_c, {tn, k}));
    const double e = worst_row_err(dout.host(), out_c, n);
    BOOST_TEST(e < 1e-5, "round " << round << ": attention_full worst row rel err " << e);
    const std::vector<float> conv_g = dc.host();
    double ce = 0.0;
    for (size_t i = 0; i < conv_g.size(); ++i)
      ce = std::max(ce, std::isnan(conv_g[i]) ? INFINITY : std::fabs(double{conv_g[i]} - conv_c[i]));
    BOOST_TEST(ce <= 1e-5, "round " << round << ": dynamic_conv max abs err " << ce);
    BOOST_TEST((dids.host() == ids_c), "round " << round << ": top_k ids");
    const std::vector<float> val_g = dval.host();
    BOOST_TEST(std::memcmp(val_g.data(), val_c.data(), val_c.size() * 4) == 0, "round " << round << ": top_k values");
  }
  BOOST_TEST_MESSAGE("recorded graphs: " << gpu().recorded_graphs());
}

// Not a check: the ops' GPU time at the drafter's shapes (plain launches, averaged), next
// to the host defaults' (backend::*, one round trip each) on the same backend.
BOOST_AUTO_TEST_CASE(small_ops_timing) {
  const int64_t n = 8, H = 9, Hkv = 3, D = 64, d = 576, G = 36, tn = 7, tm = 49152;
  const int k = 16, iters = 200;
  dvec<float> dq(gpu(), test::random_floats(rng(), n * H * D)), dout(gpu(), n * H * D);
  dvec<float> dk(gpu(), test::random_floats(rng(), 4096 * Hkv * D)), dv(gpu(), test::random_floats(rng(), 4096 * Hkv * D));
  dvec<float> dx(gpu(), test::random_floats(rng(), n * d)), dt(gpu(), test::random_floats(rng(), n * 2 * G)),
      db(gpu(), test::random_floats(rng(), 2 * G)), dc(gpu(), n * d);
  dvec<float> dl(gpu(), make_rows(fill::normal, tn, tm)), dval(gpu(), tn * k);
  dvec<int32_t> dids(gpu(), tn * k);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  const auto time_us = [&](const auto& f) {
    f();
    gpu().synchronize();
    cudaEventRecord(a, gpu().stream());
    for (int i = 0; i < iters; ++i) f();
    cudaEventRecord(b, gpu().stream());
    cudaEventSynchronize(b);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1000.0f / iters;
  };
  for (int64_t m : {64, 512, 2056, 4096}) {
    const auto run = [&] {
      gpu().attention_full(dq.view({n, H, D}), dk.view({m, Hkv, D}), dv.view({m, Hkv, D}), 0.125f,
                           dout.view({n, H, D}));
    };
    BOOST_TEST_MESSAGE("attention_full 8x9/3x64, m " << m << ": " << time_us(run) << " us");
  }
  BOOST_TEST_MESSAGE("dynamic_conv 8x576/36: " << time_us([&] {
                       gpu().dynamic_conv(dx.view({n, d}), dt.view({n, 2 * G}), db.view({G, 2}), dc.view({n, d}));
                     }) << " us");
  BOOST_TEST_MESSAGE("top_k 7x49152, k 16: " << time_us([&] {
                       gpu().top_k(dl.view({tn, tm}), k, dids.view({tn, k}), dval.view({tn, k}));
                     }) << " us");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) gpu().backend::top_k(dl.view({tn, tm}), k, dids.view({tn, k}), dval.view({tn, k}));
  const double host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 20;
  BOOST_TEST_MESSAGE("top_k host default on backend.cuda (round trip): " << host_us << " us");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
}

TANDEM_GPU_TEST_MAIN
