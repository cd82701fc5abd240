#define BOOST_TEST_MODULE cpu_ops
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_backends.hpp"
#include "tandem/error.hpp"
#include "tandem_ref/ops.hpp"
#include "tandem_ref/sampling.hpp"
#include "test_util.hpp"

// Every backend.cpu op against the kernels/ref op, for each kernel table this CPU has.
//
// Tolerances. Float paths differ from the reference only in summation order: over n
// terms |error| <= gamma_n * sum |terms| with gamma_n = n * 2^-24 (we allow 2^-23).
// Quantized linears also quantize the activations to q8 blocks: each x_j moves by at
// most d_b / 2 = amax_b / 254 (amax_b the largest |x| of its block), so
//   |y_cpu - y_ref| <= sum_b amax_b / 254 * sum_{j in b} |w_j|  (+ the rounding term).
using namespace tandem;
using test::view;

namespace {

using test::backends;

double gamma(int64_t n) { return static_cast<double>(n + 8) * std::ldexp(1.0, -23); }

// The quantization bound above, for row x against dequantized weight row w.
double q8_bound(const float* x, const float* w, int64_t in) {
  double bound = 0.0, mags = 0.0;
  for (int64_t b = 0; b < in; b += 32) {
    double amax = 0.0, wsum = 0.0;
    for (int64_t j = b; j < b + 32; ++j) {
      amax = std::max(amax, std::fabs(double{x[j]}));
      wsum += std::fabs(double{w[j]});
      mags += std::fabs(double{x[j]} * w[j]);
    }
    bound += amax / 254.0 * wsum;
  }
  return bound * (1.0 + 1e-4) + gamma(in) * (mags + bound);
}

void check_linear(cpu::cpu_backend& be, dtype type, int64_t out, int64_t in, int64_t n,
                  std::mt19937& rng) {
  test::test_weight w = test::random_weight(rng, type, out, in);
  std::vector<float> x = test::random_floats(rng, n * in), y(n * out), yr(n * out);
  auto lw = be.load_linear(w.info);
  be.linear(*lw, view(x, {n, in}), view(y, {n, out}));
  ref::linear(type, w.bytes.data(), out, in, x.data(), n, yr.data());
  std::vector<float> wrow(in);
  const int64_t rb = *row_bytes(type, in);
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(type, w.bytes.data() + o * rb, wrow.data(), in);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x.data() + i * in;
      double mags = 0.0;
      for (int64_t j = 0; j < in; ++j) mags += std::fabs(double{xi[j]} * wrow[j]);
      const double tol = is_quantized(type) ? q8_bound(xi, wrow.data(), in) : gamma(in) * mags;
      const double err = std::fabs(double{y[i * out + o]} - yr[i * out + o]);
      if (err > tol) {
        BOOST_ERROR(std::string(be.kernels().name) + " " + std::string(name(type)) + " [" +
                    std::to_string(out) + "x" + std::to_string(in) + "] row " + std::to_string(i) +
                    " col " + std::to_string(o) + ": error " + std::to_string(err) + " > " +
                    std::to_string(tol));
        return;
      }
    }
  }
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, double rel,
                 const std::string& what) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::fabs(double{a[i]} - b[i]) > rel * (1.0 + std::fabs(double{b[i]}))) {
      BOOST_ERROR(what + ": element " + std::to_string(i) + " is " + std::to_string(a[i]) +
                  ", reference " + std::to_string(b[i]));
      return;
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(linear_matches_reference_all_types_and_shapes) {
  std::mt19937 rng(1);
  const int64_t shapes[][3] = {{1, 32, 1},   {7, 64, 3},    {33, 96, 64},  {576, 576, 1},
                               {130, 576, 5}, {96, 1536, 9}, {64, 192, 17}};
  for (auto& be : backends()) {
    for (dtype t : {dtype::q4_0, dtype::q4_1, dtype::q8_0, dtype::f32, dtype::f16, dtype::bf16}) {
      for (const auto& s : shapes) check_linear(*be, t, s[0], s[1], s[2], rng);
    }
    for (dtype t : {dtype::f32, dtype::f16}) check_linear(*be, t, 5, 37, 6, rng);  // odd in
  }
}

BOOST_AUTO_TEST_CASE(linear_rejects_mismatched_shapes) {
  cpu::cpu_backend be({1, 64, nullptr});
  std::mt19937 rng(2);
  auto w = test::random_weight(rng, dtype::q4_1, 8, 64);
  auto lw = be.load_linear(w.info);
  std::vector<float> x(2 * 64), y(2 * 8);
  BOOST_CHECK_THROW(be.linear(*lw, view(x, {2, 64}), view(y, {1, 8})), error);
  BOOST_CHECK_THROW(be.linear(*lw, view(x, {4, 32}), view(y, {2, 8})), error);
  w.info.nbytes -= 1;
  BOOST_CHECK_THROW(be.load_linear(w.info), error);
}

BOOST_AUTO_TEST_CASE(norms_match_reference) {
  std::mt19937 rng(3);
  for (auto& be : backends()) {
    for (int64_t n : {1, 3, 40}) {
      for (int64_t d : {7, 64, 576}) {
        auto x = test::random_floats(rng, n * d), w = test::random_floats(rng, d);
        auto res = test::random_floats(rng, n * d), res_ref = res;
        std::vector<float> out(n * d), ref_out(n * d);
        be->rms_norm(view(x, {n, d}), view(w, {d}), 1e-5f, view(out, {n, d}));
        ref::rms_norm(x.data(), w.data(), 1e-5f, n, d, ref_out.data());
        check_close(out, ref_out, 1e-5, "rms_norm");
        be->add_rms_norm(view(res, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f, view(out, {n, d}));
        ref::add_rms_norm(res_ref.data(), x.data(), w.data(), 1e-5f, n, d, ref_out.data());
        check_close(res, res_ref, 0.0, "add_rms_norm residual");
        check_close(out, ref_out, 1e-5, "add_rms_norm");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(add_rms_norm_keep_keeps_the_sum) {
  // add_rms_norm_keep writes residual + x to `kept` and changes nothing else: the residual
  // and the normalised output are add_rms_norm's, kept is add()'s, bit for bit (kept starts
  // as NaN, which a comparison of bits catches). The backend's default (add, then
  // add_rms_norm) gives the same bits; kept may be rows of a larger buffer (a tap slot).
  std::mt19937 rng(13);
  const auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (auto& be : backends()) {
    for (int64_t n : {1, 3, 40}) {
      for (int64_t d : {7, 576}) {
        auto x = test::random_floats(rng, n * d), w = test::random_floats(rng, d);
        const auto res0 = test::random_floats(rng, n * d);
        std::vector<float> sum(n * d), res_plain = res0, out_plain(n * d);
        ref::add(res0.data(), x.data(), n * d, sum.data());
        be->add_rms_norm(view(res_plain, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f, view(out_plain, {n, d}));
        for (bool by_default : {false, true}) {
          std::vector<float> res = res0, out(n * d, NAN), slot(2 * n * d, NAN);
          const tensor_view kept = tensor_view::contiguous(slot.data() + n * d, dtype::f32, {n, d});
          if (by_default) be->backend::add_rms_norm_keep(view(res, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f,
                                                         view(out, {n, d}), kept);
          else be->add_rms_norm_keep(view(res, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f, view(out, {n, d}), kept);
          BOOST_TEST_CONTEXT("n " << n << ", d " << d << (by_default ? ", the default" : "")) {
            BOOST_TEST(same_bits(std::vector<float>(slot.begin() + n * d, slot.end()), sum));
            BOOST_TEST(std::isnan(slot[0]));  // nothing before kept's rows is written
            BOOST_TEST(same_bits(res, res_plain));
            BOOST_TEST(same_bits(out, out_plain));
          }
        }
        std::vector<float> res = res0, out(n * d);
        BOOST_CHECK_THROW(be->add_rms_norm_keep(view(res, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f,
                                                view(out, {n, d}), view(out, {n, d})),
                          error);  // kept aliasing out
        BOOST_CHECK_THROW(be->add_rms_norm_keep(view(res, {n, d}), view(x, {n, d}), view(w, {d}), 1e-5f,
                                                view(out, {n, d}), view(sum, {n * d, 1})),
                          error);  // misshapen
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_fused_equals_separate_ops) {
  // backend::linear_fused's default (which backend.cpu uses) against the ops it stands for:
  // the same kernels on the same values, so the results must be bit-identical.
  using kind = linear_prologue::kind;
  std::mt19937 rng(11);
  std::vector<std::unique_ptr<cpu::cpu_backend>> bes = backends();
  bes.push_back(std::make_unique<cpu::cpu_backend>(cpu::cpu_options{.threads = 2, .memory_mb = 64, .float_linear = true}));
  for (auto& be : bes) {
    // A plain weight with an odd row count and a q/k/v-shaped group (segment-major output).
    for (int64_t in : {64, 96}) {
      auto wp = test::random_weight(rng, dtype::q8_0, 37, in);
      std::vector<test::test_weight> parts;
      for (int64_t o : {32, 16, 16}) parts.push_back(test::random_weight(rng, dtype::q4_1, o, in));
      const tensor_info* infos[3] = {&parts[0].info, &parts[1].info, &parts[2].info};
      std::unique_ptr<linear_weight> weights[2] = {be->load_linear(wp.info), be->load_linear_group(infos)};
      for (const auto& lw : weights) {
        const int64_t out = lw->out_features();
        for (int64_t n : {1, 3, 20}) {
          auto x = test::random_floats(rng, n * in, 2.0f), up = test::random_floats(rng, n * in);
          auto nw = test::random_floats(rng, in), y0 = test::random_floats(rng, n * out);
          for (kind k : {kind::none, kind::rms_norm, kind::silu_mul}) {
            for (bool acc : {false, true}) {
              linear_prologue pro;
              pro.k = k;
              pro.norm_weight = view(nw, {in});
              pro.eps = 1e-5f;
              pro.up = view(up, {n, in});
              std::vector<float> h(n * in), prod(n * out), want = y0, got = y0;
              tensor_view xin = view(x, {n, in});
              if (k == kind::rms_norm) be->rms_norm(view(x, {n, in}), view(nw, {in}), 1e-5f, xin = view(h, {n, in}));
              if (k == kind::silu_mul) be->silu_mul(view(x, {n, in}), view(up, {n, in}), xin = view(h, {n, in}));
              be->linear(*lw, xin, view(prod, {n, out}));
              if (acc) be->add(view(want, {n, out}), view(prod, {n, out}), view(want, {n, out}));
              else want = prod;
              be->linear_fused(*lw, view(x, {n, in}), pro, view(got, {n, out}), acc);
              BOOST_TEST(std::memcmp(got.data(), want.data(), want.size() * 4) == 0,
                         be->describe() << " out " << out << " in " << in << " n " << n << " prologue "
                                        << static_cast<int>(k) << " accumulate " << acc);
            }
          }
        }
      }
    }
  }
  cpu::cpu_backend be({1, 64, nullptr});
  auto w = test::random_weight(rng, dtype::q4_1, 64, 64);
  auto lw = be.load_linear(w.info);
  std::vector<float> x(64 * 2), y(64 * 2);
  linear_prologue silu;
  silu.k = kind::silu_mul;
  silu.up = view(y, {2, 64});
  BOOST_CHECK_THROW(be.linear_fused(*lw, view(x, {2, 64}), {}, view(x, {2, 64}), true), error);  // y is x
  BOOST_CHECK_THROW(be.linear_fused(*lw, view(x, {2, 64}), silu, view(y, {2, 64}), false), error);  // y is up
  BOOST_CHECK_THROW(be.linear_fused(*lw, view(x, {2, 64}), {}, view(y, {1, 64}), true), error);   // shape
}

BOOST_AUTO_TEST_CASE(linear_swiglu_equals_linear_then_silu_mul) {
  // backend::linear_swiglu's default (backend.cpu's) is linear() into the caller's product,
  // then silu_mul(): bit-identical to the two ops, also with y written over product's gate
  // part (as the llama model calls it).
  std::mt19937 rng(12);
  for (auto& be : backends()) {
    for (auto [ffn, in] : {std::pair<int64_t, int64_t>{48, 64}, {37, 96}}) {
      std::vector<test::test_weight> parts;
      for (int i = 0; i < 2; ++i) parts.push_back(test::random_weight(rng, dtype::q4_1, ffn, in));
      const tensor_info* infos[2] = {&parts[0].info, &parts[1].info};
      auto lw = be->load_linear_group(infos);
      for (int64_t n : {1, 5}) {
        auto x = test::random_floats(rng, n * in, 2.0f);
        std::vector<float> prod(n * 2 * ffn), want(n * ffn), scratch(n * 2 * ffn), got(n * ffn);
        be->linear(*lw, view(x, {n, in}), view(prod, {n, 2 * ffn}));
        std::vector<float> up(prod.begin() + n * ffn, prod.end());
        be->silu_mul(view(prod, {n, ffn}), view(up, {n, ffn}), view(want, {n, ffn}));
        be->linear_swiglu(*lw, view(x, {n, in}), view(scratch, {n, 2 * ffn}), view(got, {n, ffn}));
        BOOST_TEST(std::memcmp(got.data(), want.data(), want.size() * 4) == 0, be->describe() << " ffn " << ffn << " n " << n);
        be->linear_swiglu(*lw, view(x, {n, in}), view(scratch, {n, 2 * ffn}), view(scratch, {n, ffn}));
        BOOST_TEST(std::memcmp(scratch.data(), want.data(), want.size() * 4) == 0, "y over the gate part, n " << n);
      }
      std::vector<float> x(2 * in), scratch(2 * 2 * ffn), y(2 * ffn);
      BOOST_CHECK_THROW(be->linear_swiglu(*lw, view(x, {2, in}), view(scratch, {2, 2 * ffn}), view(y, {1, ffn})), error);
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_add_rms_norm_equals_linear_then_add_rms_norm) {
  // backend::linear_add_rms_norm's default (backend.cpu's) is linear() into the caller's
  // product, then add_rms_norm() (add_rms_norm_keep() when kept is set): the residual, out
  // and kept bit-identical to the two ops, the residual left holding residual + x W^T, and
  // an unset kept never written.
  std::mt19937 rng(13);
  const float eps = 1e-5f;
  for (auto& be : backends()) {
    for (dtype t : {dtype::q4_1, dtype::q8_0, dtype::f32}) {
      for (auto [d, in] : {std::pair<int64_t, int64_t>{64, 96}, {576, 576}}) {
        const test::test_weight w = test::random_weight(rng, t, d, in);
        auto lw = be->load_linear(w.info);
        auto nw = test::random_floats(rng, d);
        for (int64_t n : {1, 3, 7}) {
          for (bool keep : {false, true}) {
            auto x = test::random_floats(rng, n * in, 2.0f);
            const auto r0 = test::random_floats(rng, n * d);
            std::vector<float> prod(n * d), r1 = r0, out1(n * d), kept1(n * d);
            be->linear(*lw, view(x, {n, in}), view(prod, {n, d}));
            if (keep) be->add_rms_norm_keep(view(r1, {n, d}), view(prod, {n, d}), view(nw, {d}), eps, view(out1, {n, d}), view(kept1, {n, d}));
            else be->add_rms_norm(view(r1, {n, d}), view(prod, {n, d}), view(nw, {d}), eps, view(out1, {n, d}));
            std::vector<float> scratch(n * d), r2 = r0, out2(n * d), kept2(n * d, NAN);
            be->linear_add_rms_norm(*lw, view(x, {n, in}), view(scratch, {n, d}), view(r2, {n, d}), view(nw, {d}), eps,
                                    view(out2, {n, d}), keep ? view(kept2, {n, d}) : tensor_view{});
            const std::string what = be->describe() + " " + std::string(name(t)) + " d " + std::to_string(d) + " n " +
                                     std::to_string(n) + (keep ? " kept" : "");
            BOOST_TEST(std::memcmp(r2.data(), r1.data(), r1.size() * 4) == 0, what << ": residual");
            BOOST_TEST(std::memcmp(out2.data(), out1.data(), out1.size() * 4) == 0, what << ": out");
            if (keep) BOOST_TEST(std::memcmp(kept2.data(), kept1.data(), kept1.size() * 4) == 0, what << ": kept");
            else BOOST_TEST(std::all_of(kept2.begin(), kept2.end(), [](float v) { return std::isnan(v); }), what << ": kept unset");
            bool added = true;
            for (size_t i = 0; i < r2.size(); ++i) added = added && r2[i] == r0[i] + prod[i];
            BOOST_TEST(added, what << ": residual += product");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rope_matches_reference) {
  std::mt19937 rng(4);
  for (auto& be : backends()) {
    for (bool neox : {false, true}) {
      for (int rot : {0, 32}) {
        const int64_t n = 37, heads = 9, hd = 64;
        auto x = test::random_floats(rng, n * heads * hd), xr = x;
        std::vector<int32_t> pos(n);
        for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>((i * 977) % 8192);
        const rope_params p{100000.0f, rot, neox};
        be->rope(view(x, {n, heads, hd}), view(pos, {n}), p);
        ref::rope(xr.data(), n, heads, hd, pos.data(), p);
        check_close(x, xr, 1e-6, "rope");
      }
    }
    std::vector<float> x(64);
    std::vector<int32_t> pos{-1};
    BOOST_CHECK_THROW(be->rope(view(x, {1, 1, 64}), view(pos, {1}), {}), error);
  }
}

BOOST_AUTO_TEST_CASE(pointwise_ops_match_reference) {
  std::mt19937 rng(5);
  for (auto& be : backends()) {
    for (int64_t n : {1, 5, 70}) {
      const int64_t d = 1536;
      auto g = test::random_floats(rng, n * d, 3.0f), u = test::random_floats(rng, n * d);
      std::vector<float> out(n * d), ref_out(n * d);
      be->silu_mul(view(g, {n, d}), view(u, {n, d}), view(out, {n, d}));
      ref::silu_mul(g.data(), u.data(), n * d, ref_out.data());
      check_close(out, ref_out, 1e-6, "silu_mul");
      be->add(view(g, {n, d}), view(u, {n, d}), view(out, {n, d}));
      ref::add(g.data(), u.data(), n * d, ref_out.data());
      check_close(out, ref_out, 0.0, "add");
      std::vector<int32_t> rows{static_cast<int32_t>(n - 1), 0, static_cast<int32_t>(n / 2)};
      std::vector<float> gathered(3 * d), ref_gathered(3 * d);
      be->gather_rows(view(g, {n, d}), view(rows, {3}), view(gathered, {3, d}));
      ref::gather_rows(g.data(), n, d, rows.data(), 3, ref_gathered.data());
      check_close(gathered, ref_gathered, 0.0, "gather_rows");
      rows[1] = static_cast<int32_t>(n);
      BOOST_CHECK_THROW(be->gather_rows(view(g, {n, d}), view(rows, {3}), view(gathered, {3, d})), error);
    }
  }
}

BOOST_AUTO_TEST_CASE(gather_rows_takes_strided_rows) {
  // x and out as 2-D views of rows strided apart (a drafter copies every tap's rows of a
  // token run at once that way): out row i is x row rows[i], the floats between rows untouched.
  std::mt19937 rng(14);
  for (auto& be : backends()) {
    const int64_t m = 3, d = 10, ldx = 17, ldo = 12;
    auto x = test::random_floats(rng, 4 * ldx);
    std::vector<float> out(m * ldo, NAN);
    std::vector<int32_t> rows{2, 0, 3};
    tensor_view xv = view(x, {4, d}), ov = view(out, {m, d});
    xv.strides[0] = ldx;
    ov.strides[0] = ldo;
    be->gather_rows(xv, view(rows, {m}), ov);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < ldo; ++j) {
        const float got = out[i * ldo + j];
        if (j < d) BOOST_TEST(got == x[rows[i] * ldx + j]);
        else BOOST_TEST(std::isnan(got));
      }
  }
}

BOOST_AUTO_TEST_CASE(embed_matches_reference) {
  std::mt19937 rng(6);
  for (auto& be : backends()) {
    for (dtype t : {dtype::q4_1, dtype::q8_0, dtype::f16, dtype::f32}) {
      auto table = test::random_weight(rng, t, 100, 64);
      auto lw = be->load_linear(table.info);
      std::vector<int32_t> ids{99, 0, 42, 42, 7};
      std::vector<float> out(5 * 64), ref_out(5 * 64);
      be->embed(*lw, view(ids, {5}), view(out, {5, 64}));
      ref::embed(t, table.bytes.data(), 100, 64, ids.data(), 5, ref_out.data());
      check_close(out, ref_out, 0.0, "embed");
      ids[0] = 100;
      BOOST_CHECK_THROW(be->embed(*lw, view(ids, {5}), view(out, {5, 64})), error);
    }
  }
}

BOOST_AUTO_TEST_CASE(sample_matches_reference_per_row) {
  std::mt19937 rng(7);
  const int64_t m = 6, vocab = 2000;
  auto logits = test::random_floats(rng, m * vocab, 2.0f);
  std::vector<sampling_params> params(m);
  for (int64_t i = 0; i < m; ++i) {
    params[i].temperature = i == 0 ? 0.0f : 0.9f;
    params[i].top_k = i == 2 ? 20 : 0;
    params[i].top_p = i == 3 ? 0.8f : 1.0f;
    params[i].min_p = i == 4 ? 0.1f : 0.0f;
    params[i].seed = 42 + i;
    params[i].step = 3;
  }
  for (auto& be : backends()) {
    std::vector<int32_t> ids(m);
    be->sample(view(logits, {m, vocab}), params, view(ids, {m}));
    for (int64_t i = 0; i < m; ++i) {
      BOOST_TEST(ids[i] == ref::sample_row(logits.data() + i * vocab, vocab, params[i]));
    }
  }
}

BOOST_AUTO_TEST_CASE(load_tensor_converts_and_budget_is_set) {
  cpu::cpu_backend be({1, 64, nullptr});
  BOOST_TEST(be.memory_budget() == size_t{64} << 20);
  BOOST_TEST(cpu::cpu_backend({1, 0, nullptr}).memory_budget() > 0u);
  std::mt19937 rng(8);
  auto w = test::random_weight(rng, dtype::q8_0, 3, 64);
  auto f = be.load_tensor(w.info, dtype::f32);
  std::vector<float> ref_f(3 * 64);
  dequantize_row(dtype::q8_0, w.bytes.data(), ref_f.data(), 3 * 64);
  BOOST_TEST(std::memcmp(f->data(), ref_f.data(), ref_f.size() * 4) == 0);
  auto same = be.load_tensor(w.info, dtype::q8_0);
  BOOST_TEST(std::memcmp(same->data(), w.bytes.data(), w.bytes.size()) == 0);
  auto h = be.load_tensor(w.info, dtype::f16);
  BOOST_TEST(fp16_to_fp32(static_cast<uint16_t*>(h->data())[5]) == ref_f[5], boost::test_tools::tolerance(1e-3f));
  BOOST_CHECK_THROW(be.load_tensor(w.info, dtype::q4_1), error);
}
