#define BOOST_TEST_MODULE gpu_ops
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <cstdlib>
#include <numeric>
#include <boost/test/included/unit_test.hpp>

// Every backend.cuda op against kernels/ref on fresh random inputs (add_rms_norm_keep and
// strided gathers against backend.cpu), outputs NaN-poisoned before each run. Tolerances,
// per path:
//  - fp32 paths (GEMV, norms, RoPE, decode attention) differ from the reference in summation
//    order only: ||gpu - ref|| / ||ref|| < 1e-5 (attention: 2e-5, its softmax is rescaled
//    online); prefill attention runs on f16 tensor cores: < 3e-3;
//  - the f16 tensor-core GEMM rounds x and W to f16 (2^-11 relative each) and accumulates
//    in fp32: relative error < 2e-3;
//  - the q8 GEMV (activations quantized as backend.cpu's quantize_q8, integer block dots)
//    against a host mirror of backend.cpu's scalar q8 path: the integers are identical, only
//    the float sums' order differs: < 1e-5;
//  - copies (embedding, gather, KV write, add) and sampling are exact;
//  - bf16 / fp8 e4m3 KV pools: the KV write stores exactly the host's rounding of k and v
//    (kv_elems.hpp); attention matches the reference run on those stored values to the
//    f32 pool's tolerances (1e-4 for decode with RoPE, where a rotation that differs by an
//    ulp may round the other way), and the reference on the unrounded values to the
//    rounding's own size: bf16 (2^-9 relative per element) < 1e-2, fp8 e4m3 (2^-4) < 0.1.
// `gpu()` runs the f32 GEMV (q8_activations off) so the fp32 tolerances apply; `gpu_q8()`
// is the default configuration.
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "cpu_backend.hpp"
#include "cuda_weights.hpp"
#include "gpu_util.hpp"
#include "kv_elems.hpp"
#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "tandem_ref/attention.hpp"
#include "tandem_ref/ops.hpp"
#include "tandem_ref/sampling.hpp"
#include "test_util.hpp"

using namespace tandem;
using test::dvec;

// The tests' name for their recorded steps (backend::run_recorded).
const uint64_t test_owner = tandem::new_recording_owner();

namespace {

cuda::cuda_backend& gpu() {
  static cuda::cuda_backend be({.q8_activations = false});
  return be;
}

cuda::cuda_backend& gpu_q8() {
  static cuda::cuda_backend be;
  return be;
}

// backend.cpu's scalar q8 linear (plugins/cpu/kernels_scalar.cpp), restated: x quantized
// per 32-block (d = amax / 127, q = rint(x / d) clamped, s = d * sum q), integer dots with
// the weight's quants, d_w d_x dot + m_w s_x per block (Q4_1; Q8_0 has no m term).
std::vector<float> q8_linear_ref(dtype type, const void* w, int64_t out, int64_t in, const std::vector<float>& x,
                                 int64_t n) {
  const int64_t nb = in / 32;
  std::vector<float> y(n * out);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int8_t> q(in);
    std::vector<float> d(nb), s(nb);
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[t * in + b * 32 + j]));
      d[b] = amax / 127.0f;
      const float id = d[b] > 0.0f ? 1.0f / d[b] : 0.0f;
      int sum = 0;
      for (int j = 0; j < 32; ++j) {
        q[b * 32 + j] = static_cast<int8_t>(std::clamp(static_cast<int>(std::nearbyint(x[t * in + b * 32 + j] * id)), -127, 127));
        sum += q[b * 32 + j];
      }
      s[b] = d[b] * static_cast<float>(sum);
    }
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        int dot = 0;
        float dw = 0.0f, mw = 0.0f;
        if (type == dtype::q4_1) {
          const auto& blk = static_cast<const block_q4_1*>(w)[o * nb + b];
          for (int j = 0; j < 16; ++j) dot += (blk.qs[j] & 0x0f) * q[b * 32 + j] + (blk.qs[j] >> 4) * q[b * 32 + j + 16];
          dw = fp16_to_fp32(blk.d), mw = fp16_to_fp32(blk.m);
        } else {
          const auto& blk = static_cast<const block_q8_0*>(w)[o * nb + b];
          for (int j = 0; j < 32; ++j) dot += blk.qs[j] * q[b * 32 + j];
          dw = fp16_to_fp32(blk.d);
        }
        acc += static_cast<double>(dw * d[b] * static_cast<float>(dot) + mw * s[b]);
      }
      y[t * out + o] = static_cast<float>(acc);
    }
  }
  return y;
}

std::mt19937& rng() {
  static std::mt19937 r(12345);
  return r;
}

// Random weights of a linear's parts (one part: a plain linear; more: a linear_group with
// its segment-major output), loaded on `be`. The host bytes stay for the references.
struct shape { dtype t; std::vector<int64_t> outs; int64_t in; };
struct loaded_shape {
  std::vector<test::test_weight> ws;
  std::unique_ptr<linear_weight> lw;
  const cuda::dev_matrix& matrix() const { return dynamic_cast<const cuda::cuda_linear&>(*lw).matrix(); }
};
loaded_shape load_shape(cuda::cuda_backend& be, const shape& sh) {
  loaded_shape r;
  for (int64_t o : sh.outs) r.ws.push_back(test::random_weight(rng(), sh.t, o, sh.in));
  std::vector<const tensor_info*> infos;
  for (const auto& w : r.ws) infos.push_back(&w.info);
  r.lw = infos.size() == 1 ? be.load_linear(*infos[0]) : be.load_linear_group(infos);
  return r;
}

void check_linear(dtype type, int64_t out, int64_t in, int64_t n) {
  auto w = test::random_weight(rng(), type, out, in);
  auto x = test::random_floats(rng(), n * in);
  std::vector<float> ref(n * out);
  ref::linear(type, w.info.data, out, in, x.data(), n, ref.data());
  auto lw = gpu().load_linear(w.info);
  dvec<float> dx(gpu(), x), dy(gpu(), n * out);
  gpu().linear(*lw, dx.view({n, in}), dy.view({n, out}));
  const double tol = n <= 8 ? 1e-5 : 2e-3;
  const double e = test::rel_err(dy.host(), ref);
  BOOST_TEST(e < tol, name(type) << " [" << out << " x " << in << "] n=" << n << ": rel err " << e);
}

}  // namespace

BOOST_AUTO_TEST_CASE(linear_gemv_and_gemm) {
  for (dtype t : {dtype::q4_1, dtype::q8_0, dtype::f32, dtype::f16}) {
    for (int64_t n : {1, 3, 8}) {
      check_linear(t, 576, 576, n);
      check_linear(t, 192, 1536, n);
      check_linear(t, 1000, 96, n);
    }
    for (int64_t n : {9, 33, 128}) check_linear(t, 1536, 576, n);
  }
}

BOOST_AUTO_TEST_CASE(linear_q8_activations_match_cpu_q8) {
  // The rows linear() gives the q8 kernels (up to gemv_q8_preferred_max_tokens: the GEMV, or
  // the int8 mma for 576 x 576 from 2 rows; both q8 arithmetic): in = 576 and 1536 quantize
  // x in shared memory at 1 row and in global scratch above; 8192 always goes through global
  // scratch. gemv_q8_stagings_agree runs the kernel itself at 1-32 rows.
  static_assert(cuda::gemv_q8_preferred_max_tokens == 4, "the row counts below assume 4");
  for (dtype t : {dtype::q4_1, dtype::q8_0}) {
    for (auto [out, in] : {std::pair<int64_t, int64_t>{576, 576}, {1000, 1536}, {64, 8192}}) {
      for (int64_t n : {1, 2, 3, 4}) {
        auto w = test::random_weight(rng(), t, out, in);
        auto x = test::random_floats(rng(), n * in);
        x[5] = 0.0f;  // a block with a zero does not matter; an all-zero block must give d = 0
        for (int j = 0; j < 32; ++j) x[32 + j] = 0.0f;
        const auto ref = q8_linear_ref(t, w.info.data, out, in, x, n);
        auto lw = gpu_q8().load_linear(w.info);
        dvec<float> dx(gpu_q8(), x), dy(gpu_q8(), n * out);
        dy.poison();
        gpu_q8().linear(*lw, dx.view({n, in}), dy.view({n, out}));
        const double e = test::rel_err(dy.host(), ref);
        BOOST_TEST(e < 1e-5, "q8 " << name(t) << " [" << out << " x " << in << "] n=" << n << ": rel err " << e);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(gemv_q8_stagings_agree) {
  // Both places x can be quantized (every block's shared memory, or global scratch by a
  // quantize kernel first) at every row count the GEMV takes: the quantization is the
  // same arithmetic (8-lane groups in the block, one warp per 32 values in the kernel), so
  // the outputs must be bit-identical, and both within 1e-5 of backend.cpu's q8 mirror.
  // Also a grouped matrix (segment-major output at a run-time row count) and the tall
  // LM-head shape; in = 1536 at 32 rows needs the shared-memory opt-in (65 KB).
  cuda::cuda_backend& be = gpu_q8();
  const std::vector<shape> shapes = {{dtype::q4_1, {576}, 576},
                                     {dtype::q8_0, {1000}, 1536},
                                     {dtype::q4_1, {576, 192, 192}, 576},
                                     {dtype::q8_0, {16411}, 576}};
  for (const shape& sh : shapes) {
    const loaded_shape ls = load_shape(be, sh);
    const std::vector<test::test_weight>& ws = ls.ws;
    const cuda::dev_matrix& m = ls.matrix();
    const int64_t out = m.out, in = sh.in;
    for (int64_t n : {1, 2, 5, 8, 9, 13, 16, 17, 31, 32}) {
      auto x = test::random_floats(rng(), n * in, 3.0f);
      for (int j = 0; j < 32; ++j) x[(n - 1) * in + j] = 0.0f;  // an all-zero block: d = 0
      dvec<float> dx(be, x), scratch(be, static_cast<int64_t>(cuda::gemv_q8_scratch_bytes(n, in) / 4 + 1));
      std::vector<std::vector<float>> got;
      for (cuda::q8_staging st : {cuda::q8_staging::in_block, cuda::q8_staging::global}) {
        if (st == cuda::q8_staging::in_block && !cuda::gemv_q8_stageable(m, n)) continue;
        dvec<float> dy(be, n * out);
        cuda::gemv_q8_fused(m, static_cast<const float*>(dx.buf->data()), n, {}, false,
                            static_cast<float*>(dy.buf->data()), scratch.buf->data(), be.stream(), st);
        BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
        got.push_back(dy.host());
      }
      BOOST_REQUIRE(!got.empty());
      std::ostringstream what;
      what << name(sh.t) << " [" << out << " x " << in << "] parts " << sh.outs.size() << " n=" << n;
      // Segment-major reference: all rows of part 0, then of part 1, ...
      std::vector<float> ref;
      for (size_t i = 0; i < ws.size(); ++i) {
        const auto part = q8_linear_ref(sh.t, ws[i].info.data, sh.outs[i], in, x, n);
        ref.insert(ref.end(), part.begin(), part.end());
      }
      for (const auto& g : got) {
        const double e = test::rel_err(g, ref);
        BOOST_TEST(e < 1e-5, what.str() << ": rel err " << e);
      }
      if (got.size() == 2)
        BOOST_TEST(test::max_abs_err(got[0], got[1]) == 0.0,
                   what.str() << ": in-block vs global staging max |diff| " << test::max_abs_err(got[0], got[1]));
    }
  }
  // What cannot run is refused, not run wrong.
  auto big = be.load_linear(test::random_weight(rng(), dtype::q4_1, 64, 8192).info);
  const cuda::dev_matrix& bm = dynamic_cast<const cuda::cuda_linear&>(*big).matrix();
  BOOST_TEST(!cuda::gemv_q8_stageable(bm, 1));
  dvec<float> bx(be, 33 * 8192), by(be, 33 * 64);
  auto run = [&](int64_t n, cuda::q8_staging st, cuda::dev_prologue pro) {
    cuda::gemv_q8_fused(bm, static_cast<const float*>(bx.buf->data()), n, pro, false,
                        static_cast<float*>(by.buf->data()), nullptr, be.stream(), st);
  };
  BOOST_CHECK_THROW(run(1, cuda::q8_staging::in_block, {}), std::invalid_argument);  // in > 4096
  BOOST_CHECK_THROW(run(33, cuda::q8_staging::global, {}), std::invalid_argument);   // rows > 32
  BOOST_CHECK_THROW(run(1, cuda::q8_staging::global, {}), std::invalid_argument);    // no scratch
  cuda::dev_prologue norm;
  norm.kind = cuda::dev_prologue::silu_mul;
  norm.up = static_cast<const float*>(bx.buf->data());
  BOOST_CHECK_THROW(run(1, cuda::q8_staging::automatic, norm), std::invalid_argument);  // prologue, not stageable
}

BOOST_AUTO_TEST_CASE(gemv_q8_mma_matches_q8_mirror_and_is_row_invariant) {
  // The int8 tensor-core kernel at 1..64 rows: within 1e-5 of backend.cpu's q8 mirror (the
  // integer block dots are exact; only the float sums' order differs), every row bit-identical
  // (memcmp) to the same row run alone (a row's block order depends on the matrix only),
  // accumulate = y0 + the product as add() rounds it, and a grouped matrix's output
  // segment-major. Shapes: the default model's (q/k/v group, down), a row count that is no
  // multiple of 16, the tall LM-head shape, a wide in.
  cuda::cuda_backend& be = gpu_q8();
  const std::vector<shape> shapes = {{dtype::q4_1, {576, 192, 192}, 576},
                                     {dtype::q4_1, {576}, 1536},
                                     {dtype::q8_0, {1001}, 1536},
                                     {dtype::q8_0, {16411}, 576},
                                     {dtype::q4_1, {40}, 8192}};
  for (const shape& sh : shapes) {
    const loaded_shape ls = load_shape(be, sh);
    const std::vector<test::test_weight>& ws = ls.ws;
    const cuda::dev_matrix& m = ls.matrix();
    const int64_t out = m.out, in = sh.in;
    for (int64_t n : {1, 2, 5, 8, 9, 16, 17, 31, 32, 33, 48, 64}) {
      auto x = test::random_floats(rng(), n * in, 3.0f);
      for (int j = 0; j < 32; ++j) x[(n - 1) * in + j] = 0.0f;  // an all-zero block: d = 0
      dvec<float> dx(be, x), dy(be, n * out);
      dvec<float> scratch(be, static_cast<int64_t>(cuda::gemv_q8_scratch_bytes(n, in) / 4 + 1));
      dy.poison();
      cuda::gemv_q8_mma(m, static_cast<const float*>(dx.buf->data()), n, {}, false, static_cast<float*>(dy.buf->data()),
                        scratch.buf->data(), be.stream());
      BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
      const std::vector<float> got = dy.host();
      std::ostringstream what;
      what << "mma " << name(sh.t) << " [" << out << " x " << in << "] parts " << sh.outs.size() << " n=" << n
           << (cuda::gemv_q8_mma_stageable(m, n) ? " (x staged in-block)" : " (x quantized globally)");
      // The other staging, where both exist: the same bytes of x, so the same bits.
      if (cuda::gemv_q8_mma_stageable(m, n)) {
        dvec<float> dg(be, n * out);
        cuda::gemv_q8_mma(m, static_cast<const float*>(dx.buf->data()), n, {}, false,
                          static_cast<float*>(dg.buf->data()), scratch.buf->data(), be.stream(),
                          cuda::q8_staging::global);
        BOOST_TEST(test::max_abs_err(dg.host(), got) == 0.0,
                   what.str() << ": global vs in-block staging max |diff| " << test::max_abs_err(dg.host(), got));
      }
      std::vector<float> ref;
      for (size_t i = 0; i < ws.size(); ++i) {
        const auto part = q8_linear_ref(sh.t, ws[i].info.data, sh.outs[i], in, x, n);
        ref.insert(ref.end(), part.begin(), part.end());
      }
      const double e = test::rel_err(got, ref);
      BOOST_TEST(e < 1e-5, what.str() << ": vs q8 mirror rel err " << e);
      // Each row alone (segment-major: part i's row t sits at n * seg[i] + t * rows_i).
      int differ = 0;
      for (int64_t t = 0; t < n; t += (n > 16 ? 7 : 1)) {
        dvec<float> x1(be, std::vector<float>(x.begin() + t * in, x.begin() + (t + 1) * in)), y1(be, out);
        y1.poison();
        cuda::gemv_q8_mma(m, static_cast<const float*>(x1.buf->data()), 1, {}, false,
                          static_cast<float*>(y1.buf->data()), scratch.buf->data(), be.stream());
        const std::vector<float> alone = y1.host();
        for (int i = 0; i < m.n_segs; ++i) {
          const int64_t start = m.seg[i], rows = m.seg[i + 1] - start;
          if (std::memcmp(got.data() + n * start + t * rows, alone.data() + start, rows * sizeof(float)) != 0) ++differ;
        }
      }
      BOOST_TEST(differ == 0, what.str() << ": " << differ << " (row, part) pairs differ from the row run alone");
      // accumulate: y0 + product, as add() rounds it.
      const auto y0 = test::random_floats(rng(), n * out, 10.0f);
      dvec<float> acc(be, y0);
      cuda::gemv_q8_mma(m, static_cast<const float*>(dx.buf->data()), n, {}, true, static_cast<float*>(acc.buf->data()),
                        scratch.buf->data(), be.stream());
      const std::vector<float> summed = acc.host();
      double worst = 0.0;
      for (size_t i = 0; i < summed.size(); ++i) worst = std::max(worst, std::fabs(double(summed[i]) - double(y0[i] + got[i])));
      BOOST_TEST(worst == 0.0, what.str() << ": accumulate vs y0 + product max |diff| " << worst);
    }
  }
  // What cannot run is refused, not run wrong.
  auto w = be.load_linear(test::random_weight(rng(), dtype::q4_1, 64, 576).info);
  const cuda::dev_matrix& m = dynamic_cast<const cuda::cuda_linear&>(*w).matrix();
  dvec<float> bx(be, 65 * 576), by(be, 65 * 64), scratch(be, static_cast<int64_t>(cuda::gemv_q8_scratch_bytes(65, 576) / 4 + 1));
  auto run = [&](int64_t n, void* ws, cuda::q8_staging st, cuda::dev_prologue pro) {
    cuda::gemv_q8_mma(m, static_cast<const float*>(bx.buf->data()), n, pro, false, static_cast<float*>(by.buf->data()),
                      ws, be.stream(), st);
  };
  cuda::dev_prologue gated;
  gated.kind = cuda::dev_prologue::silu_mul;
  gated.up = static_cast<const float*>(bx.buf->data());
  BOOST_CHECK_THROW(run(65, scratch.buf->data(), cuda::q8_staging::automatic, {}), std::invalid_argument);  // rows > 64
  BOOST_CHECK_THROW(run(40, nullptr, cuda::q8_staging::automatic, {}), std::invalid_argument);  // global, no scratch
  BOOST_CHECK_THROW(run(33, scratch.buf->data(), cuda::q8_staging::in_block, {}), std::invalid_argument);  // > 32 staged
  BOOST_CHECK_THROW(run(8, scratch.buf->data(), cuda::q8_staging::global, gated), std::invalid_argument);  // prologue
  auto wf = gpu().load_linear(test::random_weight(rng(), dtype::f32, 64, 576).info);
  BOOST_CHECK_THROW(cuda::gemv_q8_mma(dynamic_cast<const cuda::cuda_linear&>(*wf).matrix(),
                                      static_cast<const float*>(bx.buf->data()), 8, {}, false,
                                      static_cast<float*>(by.buf->data()), scratch.buf->data(), be.stream()),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(gemv_q8_mma_prologue_equals_separate_ops) {
  // The staged prologue is pointwise.cu's arithmetic op for op (q8_stage.cuh), so the mma
  // kernel on pro(x) staged in-block must equal the prologue kernel followed by the kernel
  // on its output quantized globally, bit for bit; at 5..32 rows, a group and down's shape.
  cuda::cuda_backend& be = gpu_q8();
  for (auto [out, in] : {std::pair<int64_t, int64_t>{960, 576}, {576, 1536}}) {
    auto lw = be.load_linear(test::random_weight(rng(), dtype::q4_1, out, in).info);
    const cuda::dev_matrix& m = dynamic_cast<const cuda::cuda_linear&>(*lw).matrix();
    for (int64_t n : {5, 8, 13, 16, 32}) {
      auto x = test::random_floats(rng(), n * in, 2.0f), up = test::random_floats(rng(), n * in);
      auto nw = test::random_floats(rng(), in);
      dvec<float> dx(be, x), dup(be, up), dnw(be, nw), h(be, n * in), fused(be, n * out), sep(be, n * out);
      dvec<float> scratch(be, static_cast<int64_t>(cuda::gemv_q8_scratch_bytes(n, in) / 4 + 1));
      for (int k = 1; k <= 2; ++k) {
        cuda::dev_prologue pro;
        pro.kind = static_cast<cuda::dev_prologue::kind_t>(k);
        pro.norm_weight = static_cast<const float*>(dnw.buf->data());
        pro.eps = 1e-5f;
        pro.up = static_cast<const float*>(dup.buf->data());
        BOOST_REQUIRE(cuda::gemv_q8_mma_stageable(m, n));
        cuda::gemv_q8_mma(m, static_cast<const float*>(dx.buf->data()), n, pro, false,
                          static_cast<float*>(fused.buf->data()), scratch.buf->data(), be.stream());
        if (k == 1) be.rms_norm(dx.view({n, in}), dnw.view({in}), 1e-5f, h.view({n, in}));
        else be.silu_mul(dx.view({n, in}), dup.view({n, in}), h.view({n, in}));
        cuda::gemv_q8_mma(m, static_cast<const float*>(h.buf->data()), n, {}, false,
                          static_cast<float*>(sep.buf->data()), scratch.buf->data(), be.stream(),
                          cuda::q8_staging::global);
        const double d = test::max_abs_err(fused.host(), sep.host());
        BOOST_TEST(d == 0.0, "[" << out << " x " << in << "] n=" << n << " prologue " << k << ": max |diff| " << d);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(grouped_linear_is_segment_major) {
  // q/k/v-shaped parts; up to the GEMV's rows (8 for f32, 4 for q8) one fused GEMV, on q8
  // up to mma_max_rows the int8 tensor-core kernel (q8 arithmetic), more rows one GEMM per
  // segment.
  const int64_t in = 576, outs[3] = {576, 192, 192};
  for (cuda::cuda_backend* be : {&gpu(), &gpu_q8()}) {
    const int64_t limit = be == &gpu() ? cuda::gemv_max_tokens : cuda::cuda_options{}.mma_max_rows;
    for (int64_t n : {1, 4, 5, 8, 20, 32, 33}) {
      std::vector<test::test_weight> ws;
      for (int64_t o : outs) ws.push_back(test::random_weight(rng(), dtype::q4_1, o, in));
      const tensor_info* parts[3] = {&ws[0].info, &ws[1].info, &ws[2].info};
      auto g = be->load_linear_group(parts);
      BOOST_TEST(g->out_features() == 960);
      auto x = test::random_floats(rng(), n * in);
      dvec<float> dx(*be, x), dy(*be, n * 960);
      dy.poison();
      be->linear(*g, dx.view({n, in}), dy.view({n, 960}));
      const auto got = dy.host();
      int64_t off = 0;
      for (int i = 0; i < 3; ++i) {
        std::vector<float> ref(n * outs[i]);
        if (be == &gpu() || n > limit) ref::linear(dtype::q4_1, ws[i].info.data, outs[i], in, x.data(), n, ref.data());
        else ref = q8_linear_ref(dtype::q4_1, ws[i].info.data, outs[i], in, x, n);
        const std::vector<float> part(got.begin() + off, got.begin() + off + n * outs[i]);
        const double e = test::rel_err(part, ref);
        BOOST_TEST(e < (n <= limit ? 1e-5 : 2e-3), "group part " << i << " n=" << n << " q8=" << (be == &gpu_q8()) << ": rel err " << e);
        off += n * outs[i];
      }
    }
  }
}

namespace {

using kind = linear_prologue::kind;

// Weights in a vector by moves (a copied test_weight's info would point at the original's bytes).
std::vector<test::test_weight> weights(std::initializer_list<std::pair<dtype, std::pair<int64_t, int64_t>>> specs) {
  std::vector<test::test_weight> v;
  for (const auto& [t, shape] : specs) v.push_back(test::random_weight(rng(), t, shape.first, shape.second));
  return v;
}

// One linear_fused case on `be`: the fused op against the same backend's separate ops
// (prologue op, linear, add), and against the reference.
//  - Separate ops: the fused GEMV computes the prologue with the prologue kernels' own
//    arithmetic (same sum order, same fused multiply-adds) and runs the same GEMV, and
//    its add is add()'s; so the results must be bit-identical on every path where the
//    product is the same kernel (all of them but the GEMM, whose beta = 1 epilogue may
//    round the sum differently from add(): relative 1e-5 there).
//  - Reference: f32 GEMV against kernels/ref's prologue and linear, < 1e-5 (sum order);
//    q8 against the host mirror of backend.cpu's q8 linear on the prologue values the GPU
//    computed (the integers are the same: < 1e-5), and against the mirror on kernels/ref's
//    prologue values, which differ in the last bit and may round a few activations to the
//    next integer: < 3e-3 (1-ulp perturbations of x moved an in = 1536 q8 product by at
//    most 4.3e-4 in a simulation); GEMM (path_for: n > 8 on f32; on q8 above mma_max_rows,
//    and from 5 rows for matrices reading 1,536 or more inputs; the int8 tensor-core
//    kernel's rows are q8 arithmetic): 2e-3 as linear_gemv_and_gemm.
void check_fused(cuda::cuda_backend& be, const std::vector<test::test_weight>& parts, int64_t n, kind k, bool acc) {
  const int64_t in = parts[0].info.shape[1];
  int64_t out = 0;
  for (const auto& p : parts) out += p.info.shape[0];
  std::unique_ptr<linear_weight> lw;
  if (parts.size() == 1) {
    lw = be.load_linear(parts[0].info);
  } else {
    std::vector<const tensor_info*> infos;
    for (const auto& p : parts) infos.push_back(&p.info);
    lw = be.load_linear_group(infos);
  }
  const bool q8 = &be == &gpu_q8();
  const dtype type = parts[0].info.type;
  auto x = test::random_floats(rng(), n * in, 2.0f), up = test::random_floats(rng(), n * in);
  auto nw = test::random_floats(rng(), in), y0 = test::random_floats(rng(), n * out, 10.0f);
  dvec<float> dx(be, x), dup(be, up), dnw(be, nw);
  linear_prologue pro;
  pro.k = k;
  pro.norm_weight = dnw.view({in});
  pro.eps = 1e-5f;
  pro.up = dup.view({n, in});
  // Fused.
  dvec<float> fused(be, n * out);
  if (acc) be.copy_to_device(fused.buf->data(), y0.data(), y0.size() * 4);
  else fused.poison();
  be.linear_fused(*lw, dx.view({n, in}), pro, fused.view({n, out}), acc);
  // Separate ops.
  dvec<float> h(be, n * in), prod(be, n * out), sep(be, n * out);
  tensor_view xin = dx.view({n, in});
  if (k == kind::rms_norm) be.rms_norm(dx.view({n, in}), dnw.view({in}), 1e-5f, xin = h.view({n, in}));
  if (k == kind::silu_mul) be.silu_mul(dx.view({n, in}), dup.view({n, in}), xin = h.view({n, in}));
  be.linear(*lw, xin, prod.view({n, out}));
  if (acc) {
    be.copy_to_device(sep.buf->data(), y0.data(), y0.size() * 4);
    be.add(sep.view({n, out}), prod.view({n, out}), sep.view({n, out}));
  }
  const std::vector<float> got = fused.host(), want = acc ? sep.host() : prod.host();
  std::ostringstream what;
  what << (q8 ? "q8 " : "f32 ") << name(type) << " [" << out << " x " << in << "] parts " << parts.size() << " n=" << n
       << " prologue " << static_cast<int>(k) << " accumulate " << acc;
  // The GEMM by the backend's own choice (path_for: by n and the matrix's shape).
  const auto* cl = dynamic_cast<const cuda::cuda_linear*>(lw.get());
  BOOST_REQUIRE(cl != nullptr);
  const bool gemm = be.path_for(*cl, n) == cuda::cuda_backend::linear_path::gemm;
  if (gemm) {
    const double e = test::rel_err(got, want);
    BOOST_TEST(e < 1e-5, what.str() << ": fused vs separate ops rel err " << e);
  } else {
    BOOST_TEST(test::max_abs_err(got, want) == 0.0, what.str() << ": fused vs separate ops max |diff| "
                                                                 << test::max_abs_err(got, want));
  }
  // References: the prologue's values (GPU's and kernels/ref's), the product, the add.
  std::vector<float> hx_ref = x, hx_gpu = x;
  if (k == kind::rms_norm) ref::rms_norm(x.data(), nw.data(), 1e-5f, n, in, hx_ref.data());
  if (k == kind::silu_mul) ref::silu_mul(x.data(), up.data(), n * in, hx_ref.data());
  if (k != kind::none) hx_gpu = h.host();
  auto product = [&](const std::vector<float>& xs, bool mirror_q8) {
    std::vector<float> y(n * out);
    int64_t off = 0;
    for (const auto& p : parts) {
      const int64_t o = p.info.shape[0];
      std::vector<float> part(n * o);
      if (mirror_q8) part = q8_linear_ref(type, p.info.data, o, in, xs, n);
      else ref::linear(type, p.info.data, o, in, xs.data(), n, part.data());
      std::copy(part.begin(), part.end(), y.begin() + off);  // segment-major, as the group writes
      off += n * o;
    }
    if (acc)
      for (int64_t i = 0; i < n * out; ++i) y[i] += y0[i];
    return y;
  };
  const bool q8_path = q8 && !gemm;
  if (q8_path) {
    const double e1 = test::rel_err(got, product(hx_gpu, true)), e2 = test::rel_err(got, product(hx_ref, true));
    BOOST_TEST(e1 < 1e-5, what.str() << ": vs q8 mirror on the GPU prologue, rel err " << e1);
    BOOST_TEST(e2 < 3e-3, what.str() << ": vs q8 mirror on the reference prologue, rel err " << e2);
  } else {
    const double e = test::rel_err(got, product(hx_ref, false));
    BOOST_TEST(e < (gemm ? 2e-3 : 1e-5), what.str() << ": vs reference rel err " << e);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(linear_fused_matches_separate_ops_and_reference) {
  // Decode shapes of the default model (in = 576 for q/k/v, gate/up and the LM head, 1536
  // for down) with odd row counts, on the q8 path (prologue inside the GEMV) and the f32
  // path (prologue kernel, add in the GEMV epilogue).
  for (cuda::cuda_backend* be : {&gpu_q8(), &gpu()}) {
    for (dtype t : {dtype::q4_1, dtype::q8_0}) {
      for (auto [out, in] : {std::pair<int64_t, int64_t>{577, 576}, {193, 1536}, {1001, 1536}}) {
        const auto w = weights({{t, {out, in}}});
        for (int64_t n : {1, 3, 4, 8})
          for (kind k : {kind::none, kind::rms_norm, kind::silu_mul})
            for (bool acc : {false, true}) check_fused(*be, w, n, k, acc);
      }
    }
    // A q/k/v-shaped group (segment-major output) with the pre-norm.
    const auto g = weights({{dtype::q4_1, {576, 576}}, {dtype::q4_1, {192, 576}}, {dtype::q4_1, {192, 576}}});
    for (int64_t n : {1, 4, 5, 8}) check_fused(*be, g, n, kind::rms_norm, false);
    // The LM head's shape (tall: 8 warps of 4 rows per block), with the output norm.
    const auto head = weights({{dtype::q8_0, {16411, 576}}});
    for (int64_t n : {1, 2, 4, 8}) check_fused(*be, head, n, kind::rms_norm, false);
    // in > 4096 (q8: x quantized once into global scratch, so the prologue runs on its own),
    // and steps of 20-33 rows: the GEMM (beta = 1 for the add).
    const auto wide = weights({{dtype::q4_1, {64, 8192}}});
    for (kind k : {kind::rms_norm, kind::silu_mul}) check_fused(*be, wide, 3, k, true);
    const auto mid = weights({{dtype::q4_1, {576, 1536}}});
    for (int64_t n : {20, 32, 33})
      for (kind k : {kind::none, kind::rms_norm, kind::silu_mul})
        for (bool acc : {false, true}) check_fused(*be, mid, n, k, acc);
  }
}

BOOST_AUTO_TEST_CASE(linear_swiglu_matches_linear_then_silu_mul) {
  // linear_swiglu (one launch on the q8 GEMV and the int8 tensor-core kernel, the two ops
  // elsewhere) against linear() then silu_mul() on the same backend: bit-identical on every
  // path (each output's gate and up rows are summed as the plain kernel sums them). Shapes:
  // the default model's gate/up (2 x 1536 by 576), an odd half, and a tall group (2 x 9000:
  // the plain GEMV takes its wide shape at one row and the tensor-core kernel its one-warp
  // tiles, the SwiGLU kernels their usual ones); rows across the GEMV, the tensor-core kernel
  // and the GEMM.
  // mma_max_rows = 32: the tensor-core kernel's four token tiles (17-32 rows) too.
  static cuda::cuda_backend mma32({.mma_max_rows = 32});
  for (cuda::cuda_backend* be : {&gpu_q8(), &gpu(), &mma32}) {
    for (dtype t : {dtype::q4_1, dtype::q8_0}) {
      for (int64_t half : {int64_t{1536}, int64_t{577}, int64_t{9000}}) {
        const int64_t in = 576, out = 2 * half;
        const auto parts = weights({{t, {half, in}}, {t, {half, in}}});
        const tensor_info* infos[2] = {&parts[0].info, &parts[1].info};
        const auto lw = be->load_linear_group(infos);
        const auto* cl = dynamic_cast<const cuda::cuda_linear*>(lw.get());
        BOOST_REQUIRE(cl != nullptr);
        for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65}) {
          const auto x = test::random_floats(rng(), n * in, 2.0f);
          dvec<float> dx(*be, x), prod(*be, n * out), sep(*be, n * half), scratch(*be, n * out), got(*be, n * half);
          be->linear(*lw, dx.view({n, in}), prod.view({n, out}));
          const tensor_view gate = prod.view({n, half});
          const tensor_view up = tensor_view::contiguous(static_cast<float*>(prod.buf->data()) + n * half, dtype::f32, {n, half}, be->dev());
          sep.poison();
          be->silu_mul(gate, up, sep.view({n, half}));
          got.poison();
          scratch.poison();
          be->linear_swiglu(*lw, dx.view({n, in}), scratch.view({n, out}), got.view({n, half}));
          const std::vector<float> want = sep.host(), g1 = got.host();
          std::ostringstream what;
          what << (be == &gpu() ? "f32 " : be == &mma32 ? "q8 mma32 " : "q8 ") << name(t) << " half " << half << " n=" << n << " path "
               << static_cast<int>(be->path_for(*cl, n));
          BOOST_TEST(test::max_abs_err(g1, want) == 0.0, what.str() << ": max |diff| " << test::max_abs_err(g1, want));
          // y over product's gate part, as the llama model passes it.
          be->linear_swiglu(*lw, dx.view({n, in}), scratch.view({n, out}), scratch.view({n, half}));
          const std::vector<float> g2 = scratch.host();
          BOOST_TEST(std::memcmp(g2.data(), want.data(), want.size() * 4) == 0, what.str() << ": y over the gate part");
        }
      }
    }
  }
}

namespace {

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(linear_add_rms_norm_matches_linear_then_add_rms_norm) {
  // linear_add_rms_norm (one launch where linear() takes the q8 GEMV, 1-4 rows, or the int8
  // tensor-core kernel, up to 16: the grid's last block runs the norm; the default's two ops
  // elsewhere) against linear() then add_rms_norm / add_rms_norm_keep on the same backend:
  // residual, out and kept bit for bit. Hidden 576 (the norm's 576 threads played by the
  // GEMV block's 128 or the tensor-core block's 256), 2048 (1024 threads, two values each)
  // and 16384 (16 each; the GEMV's non-staged shape at one row, the tensor-core kernel's
  // tall tiles); in = 5632 (> 4096) quantizes x into global scratch at one row too. 576 x 576
  // is on the tensor-core kernel from 2 rows, the other matrices from 5 (16384 x 576) or on
  // the GEMM; 17 rows are on the GEMM or beyond the tensor-core epilogue (the default's ops).
  // The op profiler tells which path ran: the one launch exactly where expected. Each case
  // runs twice in a row: the second launch must find the ticket the first left zero (else
  // no block is last and nothing is normalised).
  const float eps = 1e-5f;
  using path = cuda::cuda_backend::linear_path;
  for (cuda::cuda_backend* be : {&gpu_q8(), &gpu()}) {
    for (dtype t : {dtype::q4_1, dtype::q8_0}) {
      for (auto [d, in] :
           {std::pair<int64_t, int64_t>{576, 576}, {576, 1536}, {2048, 2048}, {2048, 5632}, {16384, 576}}) {
        const auto w = weights({{t, {d, in}}});
        const auto lw = be->load_linear(w[0].info);
        const auto* cl = dynamic_cast<const cuda::cuda_linear*>(lw.get());
        BOOST_REQUIRE(cl != nullptr);
        dvec<float> nw(*be, test::random_floats(rng(), d));
        for (int64_t n : {1, 2, 3, 4, 8, 16, 17}) {
          for (bool keep : {false, true}) {
            const auto x = test::random_floats(rng(), n * in, 2.0f), r0 = test::random_floats(rng(), n * d);
            dvec<float> dx(*be, x), prod(*be, n * d), r1(*be, r0), out1(*be, n * d), kept1(*be, n * d);
            dvec<float> scratch(*be, n * d), r2(*be, r0), out2(*be, n * d), kept2(*be, n * d);
            const path p = be->path_for(*cl, n);
            const bool fused = be == &gpu_q8() && ((p == path::gemv && n <= 4) || (p == path::mma && n <= 16));
            std::ostringstream what;
            what << (be == &gpu() ? "f32 " : "q8 ") << name(t) << " [" << d << " x " << in << "] n=" << n
                 << (keep ? " kept" : "") << " path " << static_cast<int>(p);
            be->linear(*lw, dx.view({n, in}), prod.view({n, d}));
            for (int round = 0; round < 2; ++round) {
              if (keep) {
                be->add_rms_norm_keep(r1.view({n, d}), prod.view({n, d}), nw.view({d}), eps, out1.view({n, d}),
                                      kept1.view({n, d}));
              } else {
                be->add_rms_norm(r1.view({n, d}), prod.view({n, d}), nw.view({d}), eps, out1.view({n, d}));
              }
              out2.poison();
              be->profiler().reset();
              be->profiler().enable(true);
              be->linear_add_rms_norm(*lw, dx.view({n, in}), scratch.view({n, d}), r2.view({n, d}), nw.view({d}), eps,
                                      out2.view({n, d}), keep ? kept2.view({n, d}) : tensor_view{});
              be->profiler().enable(false);
              const bool one_launch = be->profiler().report().find("linear (add_rms_norm)") != std::string::npos;
              be->profiler().reset();
              const std::string w2 = what.str() + (round ? " (again)" : "");
              BOOST_TEST(one_launch == fused, w2 << ": one launch " << one_launch << ", expected " << fused);
              BOOST_TEST(same_bits(r2.host(), r1.host()), w2 << ": residual, max |diff| "
                                                              << test::max_abs_err(r2.host(), r1.host()));
              BOOST_TEST(same_bits(out2.host(), out1.host()), w2 << ": out, max |diff| "
                                                                 << test::max_abs_err(out2.host(), out1.host()));
              if (keep) {
                BOOST_TEST(same_bits(kept2.host(), kept1.host()), w2 << ": kept");
              } else {
                const auto k = kept2.host();
                BOOST_TEST(std::all_of(k.begin(), k.end(), [](float v) { return std::isnan(v); }), w2 << ": kept unset");
              }
              BOOST_TEST(same_bits(scratch.host(), prod.host()), w2 << ": product");
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_add_rms_norm_recorded_replays_and_refusals) {
  // Recorded once and replayed with new inputs: each replay finds the ticket zeroed by the
  // one before and gives the eager run's bits (a kept copy at 3 rows, none at 1).
  cuda::cuda_backend& be = gpu_q8();
  const int64_t d = 2048, in = 2048;
  const auto w = weights({{dtype::q4_1, {d, in}}});
  const auto lw = be.load_linear(w[0].info);
  dvec<float> nw(be, test::random_floats(rng(), d));
  for (int64_t n : {1, 3}) {
    dvec<float> x(be, n * in), prod(be, n * d), r(be, n * d), out(be, n * d), kept(be, n * d);
    const tensor_view kv = n == 3 ? kept.view({n, d}) : tensor_view{};
    auto body = [&] {
      be.linear_add_rms_norm(*lw, x.view({n, in}), prod.view({n, d}), r.view({n, d}), nw.view({d}), 1e-5f,
                             out.view({n, d}), kv);
    };
    for (int round = 0; round < 3; ++round) {
      const auto xh = test::random_floats(rng(), n * in), rh = test::random_floats(rng(), n * d);
      be.copy_to_device(x.buf->data(), xh.data(), xh.size() * 4);
      be.copy_to_device(r.buf->data(), rh.data(), rh.size() * 4);
      body();  // eager
      const auto want_r = r.host(), want_out = out.host(), want_kept = kept.host();
      be.copy_to_device(r.buf->data(), rh.data(), rh.size() * 4);
      out.poison();
      kept.poison();
      be.run_recorded(test_owner, 4300 + n, body);  // recorded on round 0, replayed after
      BOOST_TEST(same_bits(r.host(), want_r), "n=" << n << " round " << round << ": residual");
      BOOST_TEST(same_bits(out.host(), want_out), "n=" << n << " round " << round << ": out");
      if (n == 3) BOOST_TEST(same_bits(kept.host(), want_kept), "n=" << n << " round " << round << ": kept");
    }
  }
  // Refusals, on the fused path's shapes (2 rows) and the default's (f32 GEMV).
  for (cuda::cuda_backend* b : {&gpu_q8(), &gpu()}) {
    const auto lw2 = b->load_linear(w[0].info);
    const int64_t n = 2;
    dvec<float> x(*b, test::random_floats(rng(), n * in)), prod(*b, n * d), r(*b, n * d), out(*b, n * d),
        kept(*b, n * d), nw2(*b, test::random_floats(rng(), d));
    auto call = [&](tensor_view xv, tensor_view pv, tensor_view rv, tensor_view wv, tensor_view ov, tensor_view kv) {
      b->linear_add_rms_norm(*lw2, xv, pv, rv, wv, 1e-5f, ov, kv);
    };
    const tensor_view X = x.view({n, in}), P = prod.view({n, d}), R = r.view({n, d}), W = nw2.view({d}),
                      O = out.view({n, d}), K = kept.view({n, d});
    BOOST_CHECK_NO_THROW(call(X, P, R, W, O, K));
    BOOST_CHECK_THROW(call(X, R, R, W, O, {}), error);                          // product is residual
    BOOST_CHECK_THROW(call(X, O, R, W, O, {}), error);                          // product is out
    BOOST_CHECK_THROW(call(X, P, R, W, O, O), error);                           // kept is out
    BOOST_CHECK_THROW(call(X, P, R, W, O, R), error);                           // kept is residual
    BOOST_CHECK_THROW(call(X, P, R, W, O, P), error);                           // kept is product
    BOOST_CHECK_THROW(call(X, P, r.view({1, d}), W, O, {}), error);             // residual rows
    BOOST_CHECK_THROW(call(X, P, R, nw2.view({d - 1}), O, {}), error);          // weight size
    BOOST_CHECK_THROW(call(X, prod.view({n, d - 32}), R, W, O, {}), error);     // product shape
    BOOST_CHECK_THROW(call(X, P, R, W, out.view({1, d}), {}), error);           // out shape
    BOOST_CHECK_THROW(call(x.view({n, in - 32}), P, R, W, O, {}), error);       // x does not fit
  }
}

BOOST_AUTO_TEST_CASE(linear_fused_recorded_replays_with_new_inputs) {
  // A decode-shaped layer tail (o-proj into the residual, pre-normed gate/up, gated down
  // into the residual) recorded once and replayed; on the f32 path the prologues use
  // scratch sized by the eager run.
  for (cuda::cuda_backend* be : {&gpu_q8(), &gpu()}) {
    const int64_t n = 2, d = 576, f = 1536;
    auto wo = be->load_linear(test::random_weight(rng(), dtype::q4_1, d, d).info);
    auto down = be->load_linear(test::random_weight(rng(), dtype::q4_1, d, f).info);
    const auto gu_parts = weights({{dtype::q4_1, {f, d}}, {dtype::q4_1, {f, d}}});
    const tensor_info* gu_infos[2] = {&gu_parts[0].info, &gu_parts[1].info};
    auto gate_up = be->load_linear_group(gu_infos);
    dvec<float> x(*be, n * d), attn(*be, n * d), gu(*be, n * 2 * f), nw(*be, test::random_floats(rng(), d));
    auto gate = tensor_view::contiguous(gu.buf->data(), dtype::f32, {n, f}, be->dev());
    auto upv = tensor_view::contiguous(static_cast<float*>(gu.buf->data()) + n * f, dtype::f32, {n, f}, be->dev());
    linear_prologue norm, gated;
    norm.k = kind::rms_norm, norm.norm_weight = nw.view({d}), norm.eps = 1e-5f;
    gated.k = kind::silu_mul, gated.up = upv;
    auto body = [&] {
      be->linear_fused(*wo, attn.view({n, d}), {}, x.view({n, d}), true);
      be->linear_fused(*gate_up, x.view({n, d}), norm, gu.view({n, 2 * f}), false);
      be->linear_fused(*down, gate, gated, x.view({n, d}), true);
    };
    for (int round = 0; round < 3; ++round) {
      auto xh = test::random_floats(rng(), n * d), ah = test::random_floats(rng(), n * d);
      be->copy_to_device(attn.buf->data(), ah.data(), ah.size() * 4);
      be->copy_to_device(x.buf->data(), xh.data(), xh.size() * 4);
      body();  // eager
      const auto want = x.host();
      be->copy_to_device(x.buf->data(), xh.data(), xh.size() * 4);
      be->run_recorded(test_owner, 4242 + (be == &gpu() ? 1 : 0), body);  // recorded on round 0, replayed after
      BOOST_TEST(test::max_abs_err(x.host(), want) == 0.0, "round " << round << " q8=" << (be == &gpu_q8()));
    }
  }
}

BOOST_AUTO_TEST_CASE(embed_is_exact) {
  for (dtype t : {dtype::q8_0, dtype::q4_1, dtype::f32}) {
    auto w = test::random_weight(rng(), t, 1000, 576);
    std::vector<int32_t> ids = {0, 999, 17, 17, 500, 3, 998};
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> ref(n * 576);
    ref::embed(t, w.info.data, 1000, 576, ids.data(), n, ref.data());
    auto lw = gpu().load_linear(w.info);
    dvec<int32_t> di(gpu(), ids);
    dvec<float> out(gpu(), n * 576);
    gpu().embed(*lw, di.view({n}), out.view({n, 576}));
    BOOST_TEST(test::max_abs_err(out.host(), ref) == 0.0, name(t));
  }
}

BOOST_AUTO_TEST_CASE(norms) {
  for (int64_t d : {576, 64, 1000}) {
    const int64_t n = 7;
    auto x = test::random_floats(rng(), n * d, 3.0f), r = test::random_floats(rng(), n * d);
    auto w = test::random_floats(rng(), d);
    std::vector<float> ref(n * d), res_ref = r, ref2(n * d);
    ref::rms_norm(x.data(), w.data(), 1e-5f, n, d, ref.data());
    ref::add_rms_norm(res_ref.data(), x.data(), w.data(), 1e-5f, n, d, ref2.data());
    dvec<float> dx(gpu(), x), dr(gpu(), r), dw(gpu(), w), out(gpu(), n * d);
    gpu().rms_norm(dx.view({n, d}), dw.view({d}), 1e-5f, out.view({n, d}));
    BOOST_TEST(test::rel_err(out.host(), ref) < 1e-5, "rms_norm d=" << d);
    out.poison();
    gpu().add_rms_norm(dr.view({n, d}), dx.view({n, d}), dw.view({d}), 1e-5f, out.view({n, d}));
    BOOST_TEST(test::max_abs_err(dr.host(), res_ref) == 0.0, "residual d=" << d);
    BOOST_TEST(test::rel_err(out.host(), ref2) < 1e-5, "add_rms_norm d=" << d);
  }
}

BOOST_AUTO_TEST_CASE(add_rms_norm_keep_against_backend_cpu) {
  // The sum add_rms_norm_keep keeps (into rows of a larger buffer, as a model's tap slot)
  // and the residual it leaves equal backend.cpu's bit for bit (one f32 add each); its
  // output equals backend.cuda's add_rms_norm bit for bit (the same kernel, one more store)
  // and backend.cpu's within the norms' fp32 tolerance.
  cpu::cpu_backend host({.threads = 1});
  for (int64_t d : {576, 64, 1000}) {
    for (int64_t n : {1, 7}) {
      auto x = test::random_floats(rng(), n * d, 3.0f), r = test::random_floats(rng(), n * d);
      auto w = test::random_floats(rng(), d);
      std::vector<float> cr = r, cout(n * d), ckept(n * d);
      host.add_rms_norm_keep(test::view(cr, {n, d}), test::view(x, {n, d}), test::view(w, {d}), 1e-5f,
                             test::view(cout, {n, d}), test::view(ckept, {n, d}));
      dvec<float> dx(gpu(), x), dw(gpu(), w), plain_r(gpu(), r), plain_out(gpu(), n * d);
      gpu().add_rms_norm(plain_r.view({n, d}), dx.view({n, d}), dw.view({d}), 1e-5f, plain_out.view({n, d}));
      dvec<float> dr(gpu(), r), out(gpu(), n * d), slot(gpu(), 2 * n * d);
      const tensor_view kept =
          tensor_view::contiguous(static_cast<float*>(slot.buf->data()) + n * d, dtype::f32, {n, d}, gpu().dev());
      gpu().add_rms_norm_keep(dr.view({n, d}), dx.view({n, d}), dw.view({d}), 1e-5f, out.view({n, d}), kept);
      const std::vector<float> sh = slot.host();
      BOOST_TEST(test::max_abs_err(std::vector<float>(sh.begin() + n * d, sh.end()), ckept) == 0.0, "kept d=" << d);
      BOOST_TEST(std::isnan(sh[0]), "rows before kept untouched, d=" << d);
      BOOST_TEST(test::max_abs_err(dr.host(), cr) == 0.0, "residual d=" << d);
      BOOST_TEST(test::max_abs_err(out.host(), plain_out.host()) == 0.0, "out as add_rms_norm's, d=" << d);
      BOOST_TEST(test::rel_err(out.host(), cout) < 1e-5, "out as backend.cpu's, d=" << d);
      BOOST_CHECK_THROW(gpu().add_rms_norm_keep(dr.view({n, d}), dx.view({n, d}), dw.view({d}), 1e-5f, out.view({n, d}),
                                                out.view({n, d})),
                        error);  // kept aliasing out
    }
  }
}

BOOST_AUTO_TEST_CASE(gather_strided_rows_against_backend_cpu) {
  // gather_rows over 2-D views of rows strided apart, as drafter.dflash2 copies every tap's
  // rows of a token run at once ([taps, n * d], rows capacity * d apart, into its pending
  // buffer's rows): the bytes backend.cpu writes, the floats between out's rows untouched.
  cpu::cpu_backend host({.threads = 1});
  const int64_t taps = 5, run = 3 * 576, ldx = run + 100, ldo = run + 37;
  auto x = test::random_floats(rng(), taps * ldx);
  for (const std::vector<int32_t>& rows : {std::vector<int32_t>{0, 1, 2, 3, 4}, std::vector<int32_t>{4, 1, 1, 0}}) {
    const auto m = static_cast<int64_t>(rows.size());
    auto strided = [&](tensor_view v, int64_t ld) {
      v.strides[0] = ld;
      return v;
    };
    std::vector<float> cx = x, cout(m * ldo);
    std::vector<int32_t> crows = rows;
    std::memset(cout.data(), 0xff, cout.size() * sizeof(float));  // dvec's poison
    host.gather_rows(strided(test::view(cx, {taps, run}), ldx), test::view(crows, {m}),
                     strided(test::view(cout, {m, run}), ldo));
    dvec<float> dx(gpu(), x), out(gpu(), m * ldo);
    dvec<int32_t> dr(gpu(), rows);
    gpu().gather_rows(strided(dx.view({taps, run}), ldx), dr.view({m}), strided(out.view({m, run}), ldo));
    const std::vector<float> got = out.host();
    BOOST_TEST(std::memcmp(got.data(), cout.data(), got.size() * sizeof(float)) == 0, "rows " << m);
  }
  dvec<float> dx(gpu(), x), out(gpu(), 2 * run);
  dvec<int32_t> dr(gpu(), std::vector<int32_t>{0, 1});
  tensor_view overlapping = dx.view({2, run});
  overlapping.strides[0] = run - 1;
  BOOST_CHECK_THROW(gpu().gather_rows(overlapping, dr.view({2}), out.view({2, run})), error);
}

BOOST_AUTO_TEST_CASE(rope_pointwise_gather) {
  for (bool neox : {false, true}) {
    for (int rot : {0, 32}) {
      const int64_t n = 13, heads = 9, hd = 64;
      auto x = test::random_floats(rng(), n * heads * hd);
      std::vector<int32_t> pos = {0, 1, 2, 15, 16, 17, 100, 1023, 4095, 4096, 8000, 8191, 7};
      rope_params p{100000.0f, rot, neox};
      std::vector<float> ref = x;
      ref::rope(ref.data(), n, heads, hd, pos.data(), p);
      dvec<float> dx(gpu(), x);
      dvec<int32_t> dp(gpu(), pos);
      gpu().rope(dx.view({n, heads, hd}), dp.view({n}), p);
      BOOST_TEST(test::rel_err(dx.host(), ref) < 1e-5, "rope neox=" << neox << " rot=" << rot);
    }
  }
  const int64_t count = 3 * 1537;
  auto a = test::random_floats(rng(), count, 4.0f), b = test::random_floats(rng(), count);
  std::vector<float> sref(count), aref(count);
  ref::silu_mul(a.data(), b.data(), count, sref.data());
  ref::add(a.data(), b.data(), count, aref.data());
  dvec<float> da(gpu(), a), db(gpu(), b), out(gpu(), count);
  gpu().silu_mul(da.view({3, 1537}), db.view({3, 1537}), out.view({3, 1537}));
  BOOST_TEST(test::rel_err(out.host(), sref) < 1e-6);
  out.poison();
  gpu().add(da.view({3, 1537}), db.view({3, 1537}), out.view({3, 1537}));
  BOOST_TEST(test::max_abs_err(out.host(), aref) == 0.0);
  std::vector<int32_t> rows = {2, 0, 2};
  std::vector<float> gref(3 * 1537);
  ref::gather_rows(a.data(), 3, 1537, rows.data(), 3, gref.data());
  dvec<int32_t> dr(gpu(), rows);
  dvec<float> g(gpu(), 3 * 1537);
  gpu().gather_rows(da.view({3, 1537}), dr.view({3}), g.view({3, 1537}));
  BOOST_TEST(test::max_abs_err(g.host(), gref) == 0.0);
}

namespace {

// Attention of q over the pool (kpool, vpool) after writing k, v, with batch.rope = rope,
// on the host; kvt: the pool's element type (k and v rounded to it after the rotation, as
// the backend stores them). Returns the output; kpool holds the pool afterwards.
std::vector<float> reference_attention(test::batch_builder& bb, int n_heads, int n_kv, int hd, int page,
                                       int64_t n_pages, const rope_params* rope, dtype kvt, std::vector<float> q,
                                       std::vector<float> k, const std::vector<float>& v, std::vector<float>& kpool,
                                       std::vector<float> vpool) {
  const int64_t n = bb.batch.n_tokens;
  if (rope != nullptr) {
    ref::rope(q.data(), n, n_heads, hd, bb.positions.data(), *rope);
    ref::rope(k.data(), n, n_kv, hd, bb.positions.data(), *rope);
  }
  k = test::round_kv(kvt, k);
  const std::vector<float> vr = test::round_kv(kvt, v);
  std::vector<float> out(n * n_heads * hd);
  ref::paged_kv rkv{kpool.data(), vpool.data(), n_pages, page, n_kv, hd};
  ref::attention(q.data(), k.data(), vr.data(), n_heads, rkv, bb.batch, 1.0f / std::sqrt(static_cast<float>(hd)),
                 out.data());
  return out;
}

std::string fmt_case(int64_t ns, int64_t n, int n_heads, int n_kv, int hd, bool rope, int repeats, dtype kvt) {
  std::ostringstream s;
  s << "attention " << ns << " seqs, " << n << " tokens, heads " << n_heads << "/" << n_kv << " d" << hd
    << (rope ? " rope" : "") << " x" << repeats << " " << name(kvt) << " KV";
  return s.str();
}

// One attention case: pool pre-filled with random K/V (the cached tokens), then the batch,
// on a pool of element type kvt.
// rows_hint: tell attention() the most new tokens of a sequence (attention_batch::
// max_query_len), as the engine does, and turn on TANDEM_CUDA_DECODE_VERIFY, so steps of up
// to 16 a sequence take the decode kernel.
void check_attention(const std::vector<test::seq_spec>& seqs, int n_heads, int n_kv, int hd, int page,
                     int64_t n_pages, const rope_params* rope = nullptr, int repeats = 1, dtype kvt = dtype::f32,
                     bool rows_hint = false) {
  test::batch_builder bb(seqs, page);
  int max_new = 0;
  for (const auto& sp : seqs) max_new = std::max(max_new, sp.n_new);
  const int64_t n = bb.batch.n_tokens, slots = n_pages * page, ts = int64_t{n_kv} * hd;
  const auto kpool_f32 = test::random_floats(rng(), slots * ts), vpool_f32 = test::random_floats(rng(), slots * ts);
  auto q = test::random_floats(rng(), n * n_heads * hd), k = test::random_floats(rng(), n * ts),
       v = test::random_floats(rng(), n * ts);
  // The cached tokens as the pool holds them; the reference on those (what the kernels must
  // match closely) and on the unrounded values (what the element type costs).
  const std::vector<float> kpool = test::round_kv(kvt, kpool_f32), vpool = test::round_kv(kvt, vpool_f32);
  std::vector<float> kref = kpool, kref_f32 = kpool_f32;
  const std::vector<float> ref = reference_attention(bb, n_heads, n_kv, hd, page, n_pages, rope, kvt, q, k, v, kref, vpool);
  const std::vector<float> ref_f32 =
      reference_attention(bb, n_heads, n_kv, hd, page, n_pages, rope, dtype::f32, q, k, v, kref_f32, vpool_f32);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  kv_layout lay{1, n_pages, page, n_kv, hd, kvt};
  auto kv = gpu().alloc_kv(lay);
  const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
  const std::vector<uint8_t> kbytes = test::encode_kv(kvt, kpool), vbytes = test::encode_kv(kvt, vpool);
  gpu().copy_to_device(pool.k, kbytes.data(), kbytes.size());
  gpu().copy_to_device(pool.v, vbytes.data(), vbytes.size());
  dvec<int32_t> qs(gpu(), bb.query_start), sl(gpu(), bb.seq_lens), pt(gpu(), bb.page_table),
      sm(gpu(), bb.slot_mapping), ps(gpu(), bb.positions);
  attention_batch b = bb.batch;
  const int64_t ns = b.n_seqs;
  b.query_start = qs.view({ns + 1});
  b.seq_lens = sl.view({ns});
  b.page_table = pt.view({ns, b.max_pages_per_seq});
  b.slot_mapping = sm.view({n});
  b.positions = ps.view({n});
  b.rope = rope;
  if (rows_hint) b.max_query_len = max_new;
  const bool on_decode = n == ns || (rows_hint && max_new <= cuda::decode_max_rows());
  dvec<float> dq(gpu(), q), dk(gpu(), k), dv(gpu(), v), out(gpu(), n * n_heads * hd);
  // Repeats run the same step again on fresh q/k copies (decode tickets must reset).
  if (rows_hint) setenv("TANDEM_CUDA_DECODE_VERIFY", "1", 1);
  for (int r = 0; r < repeats; ++r) {
    gpu().copy_to_device(dq.buf->data(), q.data(), q.size() * 4);
    gpu().copy_to_device(dk.buf->data(), k.data(), k.size() * 4);
    out.poison();
    gpu().attention(dq.view({n, n_heads, hd}), dk.view({n, n_kv, hd}), dv.view({n, n_kv, hd}), *kv, 0, b,
                    scale, out.view({n, n_heads, hd}));
  }
  unsetenv("TANDEM_CUDA_DECODE_VERIFY");
  std::vector<uint8_t> kgpu_bytes(kbytes.size());
  gpu().copy_to_host(kgpu_bytes.data(), pool.k, kgpu_bytes.size());
  gpu().synchronize();
  const std::vector<float> kgpu = test::decode_kv(kvt, kgpu_bytes);
  const bool rounded = kvt != dtype::f32;
  // The KV write copies (rounding as the host does); with RoPE the rotation rounds as the
  // reference does up to a float, which may tip a rounding to the neighbouring value.
  if (rope == nullptr) BOOST_TEST(test::max_abs_err(kgpu, kref) == 0.0, "KV write");
  else BOOST_TEST(test::rel_err(kgpu, kref) < (rounded ? 1e-4 : 1e-6), "KV write (rotated)");
  // Decode steps stay fp32; prefill runs the f16 tensor-core kernel (q, K, V rounded to
  // f16, P to f16, fp32 accumulation): 3e-3, as its own test states.
  const double tol = on_decode ? (rounded && rope ? 1e-4 : 2e-5) : 3e-3;
  const std::vector<float> got = out.host();
  const double e = test::rel_err(got, ref);
  const std::string what =
      fmt_case(ns, n, n_heads, n_kv, hd, rope != nullptr, repeats, kvt) + (on_decode && n != ns ? " (verify rows)" : "");
  BOOST_TEST(e < tol, what << ": rel err " << e);
  if (rounded) {
    const double bound = kvt == dtype::bf16 ? 1e-2 : 0.1, e32 = test::rel_err(got, ref_f32);
    BOOST_TEST_MESSAGE(what << ": rel err " << e << " on the stored values, " << e32 << " against the f32 pool");
    BOOST_TEST(e32 < bound, what << ": rel err against the unrounded f32 reference " << e32);
  }
}

// `count` distinct pages first .. first + count - 1, not in order (a stride prime to count:
// a sequence never holds one page twice — the engine never does that, and a decode kernel
// may read a page before the new token's write to it lands).
std::vector<int32_t> pages_from(int first, int count) {
  int stride = 7;
  while (std::gcd(stride, count) != 1) ++stride;
  std::vector<int32_t> p(count);
  for (int i = 0; i < count; ++i) p[i] = first + (i * stride) % count;
  return p;
}

}  // namespace

// The decode kernel's ring depth changes which tiles are in flight before the kernel waits
// for its predecessor and when the newest key's stale slot lands, and its chunk how many
// tiles each warp streams and how many splits merge: every case runs under several
// (plan_decode's own chunk for these small batches is 64), forced through
// TANDEM_CUDA_DECODE_STAGES and TANDEM_CUDA_DECODE_CHUNK.
BOOST_AUTO_TEST_CASE(attention_prefill_mixed_decode) {
  for (auto [stages, chunk] : {std::pair{"2", ""}, std::pair{"2", "1024"}, std::pair{"4", "256"}, std::pair{"3", "1024"}})
  for (auto [h, kvh, hd] : {std::tuple{9, 3, 64}, std::tuple{8, 2, 128}, std::tuple{4, 4, 64}}) {
    BOOST_TEST_MESSAGE("decode ring stages " << stages << ", chunk " << (*chunk ? chunk : "planned"));
    setenv("TANDEM_CUDA_DECODE_STAGES", stages, 1);
    if (*chunk) setenv("TANDEM_CUDA_DECODE_CHUNK", chunk, 1);
    else unsetenv("TANDEM_CUDA_DECODE_CHUNK");
    // One prefill crossing page boundaries (odd length).
    check_attention({{pages_from(0, 3), 0, 37}}, h, kvh, hd, 16, 64);
    // Mixed: a chunk after a cached prefix, a decode token, a fresh one-token prompt, a long chunk.
    check_attention({{pages_from(0, 3), 20, 13}, {pages_from(3, 7), 100, 1}, {pages_from(10, 1), 0, 1},
                     {pages_from(11, 12), 60, 129}},
                    h, kvh, hd, 16, 64);
    // Pure decode: contexts of 1 token to past 4k, uneven split ends.
    check_attention({{pages_from(0, 1), 0, 1}, {pages_from(1, 2), 16, 1}, {pages_from(3, 19), 299, 1},
                     {pages_from(22, 63), 999, 1}, {pages_from(85, 257), 4099, 1}},
                    h, kvh, hd, 16, 400);
    // RoPE inside attention (the engine's path), decode fused and prefill unfused; the
    // decode step run three times to check the split-merge tickets reset.
    for (bool neox : {false, true}) {
      const rope_params rp{100000.0f, 0, neox};
      check_attention({{pages_from(0, 3), 20, 13}, {pages_from(3, 7), 100, 1}}, h, kvh, hd, 16, 64, &rp);
      check_attention({{pages_from(0, 1), 0, 1}, {pages_from(1, 19), 299, 1}, {pages_from(20, 257), 4099, 1}},
                      h, kvh, hd, 16, 400, &rp, 3);
    }
    // Verify steps (a token and its draft per sequence) on the decode kernel: new tokens
    // crossing pages and 64-key splits, a fresh prompt of 3, the 16-row limit, a decode
    // token beside them; with RoPE and repeats (tickets). 17 rows fall back to prefill.
    const std::vector<test::seq_spec> verify = {
        {pages_from(0, 3), 20, 5}, {pages_from(3, 7), 100, 8}, {pages_from(10, 1), 0, 3},
        {pages_from(11, 12), 57, 16}, {pages_from(23, 40), 620, 1}};
    check_attention(verify, h, kvh, hd, 16, 64, nullptr, 1, dtype::f32, true);
    const rope_params rp{100000.0f, 0, false};
    check_attention(verify, h, kvh, hd, 16, 64, &rp, 3, dtype::f32, true);
    check_attention({{pages_from(0, 3), 20, 17}, {pages_from(3, 7), 100, 2}}, h, kvh, hd, 16, 64, &rp, 1, dtype::f32,
                    true);
  }
  unsetenv("TANDEM_CUDA_DECODE_STAGES");
  unsetenv("TANDEM_CUDA_DECODE_CHUNK");
}

// A verify step's row is the decode of its token: the same keys in the same split order,
// its sequence's earlier new keys patched in as the pool would hold them after decoding
// them one at a time. So one verify step of k tokens per sequence must give the bits of k
// decode steps, output and pool alike.
BOOST_AUTO_TEST_CASE(attention_verify_rows_equal_decode_steps) {
  setenv("TANDEM_CUDA_DECODE_VERIFY", "1", 1);
  for (dtype kvt : {dtype::f32, dtype::bf16, dtype::fp8_e4m3})
  for (auto shape : {std::tuple{9, 3, 64}, std::tuple{8, 2, 128}}) {
    const int h = std::get<0>(shape), kvh = std::get<1>(shape), hd = std::get<2>(shape);  // captured below
    const int page = 16, n_pages = 64, k_new = 6;
    const rope_params rp{100000.0f, 0, false};
    // Cached lengths put the new tokens across a page boundary and a 64-key split.
    const std::vector<std::pair<std::vector<int32_t>, int>> seqs = {
        {pages_from(0, 8), 61}, {pages_from(8, 3), 7}, {pages_from(11, 30), 300}};
    const int ns = static_cast<int>(seqs.size()), n = ns * k_new, ts = kvh * hd;
    const int64_t slots = int64_t{n_pages} * page;
    const std::vector<float> kpool = test::round_kv(kvt, test::random_floats(rng(), slots * ts)),
                             vpool = test::round_kv(kvt, test::random_floats(rng(), slots * ts));
    const auto q = test::random_floats(rng(), int64_t{n} * h * hd), k = test::random_floats(rng(), int64_t{n} * ts),
               v = test::random_floats(rng(), int64_t{n} * ts);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    kv_layout lay{1, n_pages, page, kvh, hd, kvt};
    // Runs steps of `per` new tokens per sequence until all k_new are in; returns the
    // outputs in token order (sequence-major) and the K and V pools.
    auto run = [&](int per) {
      auto kv = gpu().alloc_kv(lay);
      const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
      const std::vector<uint8_t> kb = test::encode_kv(kvt, kpool), vb = test::encode_kv(kvt, vpool);
      gpu().copy_to_device(pool.k, kb.data(), kb.size());
      gpu().copy_to_device(pool.v, vb.data(), vb.size());
      std::vector<float> outs(q.size());
      for (int done = 0; done < k_new; done += per) {
        std::vector<test::seq_spec> spec;
        for (const auto& [pages, cached] : seqs) spec.push_back({pages, cached + done, per});
        test::batch_builder bb(spec, page);
        const int64_t m = bb.batch.n_tokens;
        std::vector<float> qs, ks, vs;  // this step's rows of each sequence
        for (int si = 0; si < ns; ++si)
          for (int t = done; t < done + per; ++t) {
            const int64_t r = int64_t{si} * k_new + t;
            qs.insert(qs.end(), q.begin() + r * h * hd, q.begin() + (r + 1) * h * hd);
            ks.insert(ks.end(), k.begin() + r * ts, k.begin() + (r + 1) * ts);
            vs.insert(vs.end(), v.begin() + r * ts, v.begin() + (r + 1) * ts);
          }
        dvec<int32_t> qsd(gpu(), bb.query_start), sl(gpu(), bb.seq_lens), pt(gpu(), bb.page_table),
            sm(gpu(), bb.slot_mapping), ps(gpu(), bb.positions);
        attention_batch b = bb.batch;
        b.query_start = qsd.view({ns + 1});
        b.seq_lens = sl.view({ns});
        b.page_table = pt.view({ns, b.max_pages_per_seq});
        b.slot_mapping = sm.view({m});
        b.positions = ps.view({m});
        b.rope = &rp;
        b.max_query_len = per;
        dvec<float> dq(gpu(), qs), dk(gpu(), ks), dv(gpu(), vs), out(gpu(), m * h * hd);
        gpu().attention(dq.view({m, h, hd}), dk.view({m, kvh, hd}), dv.view({m, kvh, hd}), *kv, 0, b, scale,
                        out.view({m, h, hd}));
        const std::vector<float> got = out.host();
        for (int si = 0; si < ns; ++si)
          for (int t = 0; t < per; ++t)
            std::copy_n(got.begin() + (int64_t{si} * per + t) * h * hd, h * hd,
                        outs.begin() + (int64_t{si} * k_new + done + t) * h * hd);
      }
      std::vector<uint8_t> kb2(kb.size()), vb2(vb.size());
      gpu().copy_to_host(kb2.data(), pool.k, kb2.size());
      gpu().copy_to_host(vb2.data(), pool.v, vb2.size());
      gpu().synchronize();
      return std::tuple{outs, kb2, vb2};
    };
    const auto [o1, k1, v1] = run(1);
    const auto [ok, kk, vk] = run(k_new);
    const std::string what = std::string(name(kvt)) + " heads " + std::to_string(h) + "/" + std::to_string(kvh) +
                             " d" + std::to_string(hd);
    BOOST_TEST(std::memcmp(o1.data(), ok.data(), o1.size() * 4) == 0, what << ": verify rows differ from decode steps");
    BOOST_TEST((k1 == kk && v1 == vk), what << ": the pools differ");
  }
  setenv("TANDEM_CUDA_DECODE_VERIFY", "2", 1);  // only 0 and 1 mean something
  {
    test::batch_builder bb({{pages_from(0, 2), 3, 2}}, 16);
    kv_layout lay{1, 4, 16, 1, 64, dtype::f32};
    auto kv = gpu().alloc_kv(lay);
    dvec<float> q(gpu(), std::vector<float>(2 * 64)), k(gpu(), std::vector<float>(2 * 64)), out(gpu(), 2 * 64);
    attention_batch b = bb.batch;
    b.max_query_len = 2;
    BOOST_CHECK_THROW(gpu().attention(q.view({2, 1, 64}), k.view({2, 1, 64}), k.view({2, 1, 64}), *kv, 0, b, 0.125f,
                                      out.view({2, 1, 64})),
                      tandem::error);
  }
  unsetenv("TANDEM_CUDA_DECODE_VERIFY");
}

// The same cases on bf16 and fp8 e4m3 pools (kv_write, the tensor-core prefill and the
// decode kernel read and write the narrow types), at each type's planned ring depth, the
// shallowest, the deepest, and with long chunks (many tiles per warp).
BOOST_AUTO_TEST_CASE(attention_bf16_and_fp8_pools) {
  for (dtype kvt : {dtype::bf16, dtype::fp8_e4m3})
  for (auto [stages, chunk] : {std::pair{"", ""}, std::pair{"2", "1024"}, std::pair{"8", "256"}, std::pair{"5", "1024"}})
  for (auto [h, kvh, hd] : {std::tuple{9, 3, 64}, std::tuple{8, 2, 128}, std::tuple{4, 4, 64}}) {
    BOOST_TEST_MESSAGE(name(kvt) << " pool, decode ring stages " << (*stages ? stages : "planned") << ", chunk "
                                 << (*chunk ? chunk : "planned"));
    if (*stages) setenv("TANDEM_CUDA_DECODE_STAGES", stages, 1);
    else unsetenv("TANDEM_CUDA_DECODE_STAGES");
    if (*chunk) setenv("TANDEM_CUDA_DECODE_CHUNK", chunk, 1);
    else unsetenv("TANDEM_CUDA_DECODE_CHUNK");
    check_attention({{pages_from(0, 3), 0, 37}}, h, kvh, hd, 16, 64, nullptr, 1, kvt);
    check_attention({{pages_from(0, 3), 20, 13}, {pages_from(3, 7), 100, 1}, {pages_from(10, 1), 0, 1},
                     {pages_from(11, 12), 60, 129}},
                    h, kvh, hd, 16, 64, nullptr, 1, kvt);
    check_attention({{pages_from(0, 1), 0, 1}, {pages_from(1, 2), 16, 1}, {pages_from(3, 19), 299, 1},
                     {pages_from(22, 63), 999, 1}, {pages_from(85, 257), 4099, 1}},
                    h, kvh, hd, 16, 400, nullptr, 1, kvt);
    const rope_params rp{100000.0f, 0, false};
    check_attention({{pages_from(0, 3), 20, 13}, {pages_from(3, 7), 100, 1}}, h, kvh, hd, 16, 64, &rp, 1, kvt);
    check_attention({{pages_from(0, 1), 0, 1}, {pages_from(1, 19), 299, 1}, {pages_from(20, 257), 4099, 1}}, h,
                    kvh, hd, 16, 400, &rp, 3, kvt);
  }
  unsetenv("TANDEM_CUDA_DECODE_STAGES");
  unsetenv("TANDEM_CUDA_DECODE_CHUNK");
}

BOOST_AUTO_TEST_CASE(kv_pool_types_and_refusals) {
  // Key-only (MLA / DSA) caches stay f32; other element types are refused at alloc_kv.
  kv_layout latent{1, 4, 16, 1, 576, dtype::bf16, false};
  BOOST_CHECK_THROW(gpu().alloc_kv(latent), tandem::error);
  kv_layout f16_pool{1, 4, 16, 2, 64, dtype::f16};
  BOOST_CHECK_THROW(gpu().alloc_kv(f16_pool), tandem::error);
  const std::vector<dtype> types = gpu().kv_types();
  BOOST_TEST((types.front() == dtype::bf16));  // engine.kv_dtype auto
  for (dtype t : types) {
    kv_layout lay{2, 4, 16, 2, 64, t};
    auto kv = gpu().alloc_kv(lay);
    BOOST_TEST(static_cast<int>(dynamic_cast<cuda::cuda_kv&>(*kv).layer(1).type) ==
               static_cast<int>(t == dtype::f32 ? cuda::kv_elem::f32
                                : t == dtype::bf16 ? cuda::kv_elem::bf16 : cuda::kv_elem::fp8_e4m3));
  }
}

BOOST_AUTO_TEST_CASE(sampling_matches_reference) {
  for (int vocab : {49152, 1000, 7}) {
    const int64_t m = 24;
    auto logits = test::random_floats(rng(), m * vocab, 3.0f);
    logits[5] = NAN;
    logits[vocab + 3] = logits[vocab + 4] = 100.0f;  // a tie: lowest id wins
    std::vector<sampling_params> ps(m);
    for (int64_t i = 0; i < m; ++i) {
      sampling_params& p = ps[i];
      p.seed = 1000 + i;
      p.step = static_cast<uint64_t>(i * 3);
      if (i % 4 == 0) continue;  // greedy
      p.temperature = 0.5f + 0.1f * static_cast<float>(i % 7);
      p.top_k = i % 3 == 0 ? 0 : static_cast<int>(i * 5);
      p.top_p = i % 2 == 0 ? 1.0f : 0.9f;
      p.min_p = i % 5 == 0 ? 0.05f : 0.0f;
    }
    dvec<float> dl(gpu(), logits);
    dvec<int32_t> ids(gpu(), m);
    gpu().sample(dl.view({m, vocab}), ps, ids.view({m}));
    auto got = ids.host();
    for (int64_t i = 0; i < m; ++i) {
      const int32_t want = ref::sample_row(logits.data() + i * vocab, vocab, ps[i]);
      BOOST_TEST(got[i] == want, "vocab " << vocab << " row " << i << " greedy " << ps[i].greedy());
    }
  }
  std::vector<float> bad(2 * 16, NAN);
  dvec<float> db(gpu(), bad);
  dvec<int32_t> ids(gpu(), 2);
  std::vector<sampling_params> ps(2);
  BOOST_CHECK_THROW(gpu().sample(db.view({2, 16}), ps, ids.view({2})), error);
}

BOOST_AUTO_TEST_CASE(argmax_spread_over_blocks) {
  // Greedy rows go through the multi-block argmax: ties between blocks (lowest id), NaN
  // (skipped), +inf (the lowest +inf), a row of -inf but one; row counts change from call
  // to call (the workspace is laid out afresh) and repeat (tickets are left at zero).
  for (int vocab : {49152, 100003, 2048, 7}) {
    for (int64_t m : {1, 5, 3, 5}) {
      auto logits = test::random_floats(rng(), m * vocab, 3.0f);
      auto at = [&](int64_t r, int i) -> float& { return logits[r * vocab + i]; };
      at(0, vocab - 2) = at(0, vocab / 3 + 1) = 50.0f;
      if (m > 1) {
        at(1, 0) = at(1, vocab / 2) = at(1, vocab - 1) = NAN;
        at(1, vocab / 4 + 1) = at(1, 3 * vocab / 4) = INFINITY;
      }
      if (m > 2) {
        for (int i = 0; i < vocab; ++i) at(2, i) = -INFINITY;
        at(2, vocab - 1) = -1e30f;
      }
      std::vector<sampling_params> ps(m);  // greedy
      dvec<float> dl(gpu(), logits);
      dvec<int32_t> ids(gpu(), m);
      gpu().sample(dl.view({m, vocab}), ps, ids.view({m}));
      const auto got = ids.host();
      for (int64_t r = 0; r < m; ++r)
        BOOST_TEST(got[r] == ref::sample_row(logits.data() + r * vocab, vocab, ps[r]),
                   "vocab " << vocab << " m " << m << " row " << r);
    }
  }
  // The launcher recorded into a graph and replayed on new logits.
  const int64_t m = 3;
  const int vocab = 49152;
  const size_t bytes = cuda::argmax_workspace_bytes(m, vocab);
  auto ws = gpu().alloc(bytes);
  cudaStream_t s = gpu().stream();
  BOOST_REQUIRE(cudaMemsetAsync(ws->data(), 0, bytes, s) == cudaSuccess);
  dvec<float> dl(gpu(), m * vocab);
  dvec<int32_t> ids(gpu(), m);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  BOOST_REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  cuda::argmax_rows(static_cast<const float*>(dl.buf->data()), m, vocab, static_cast<int32_t*>(ids.buf->data()),
                    ws->data(), s);
  BOOST_REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  BOOST_REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    auto logits = test::random_floats(rng(), m * vocab, 3.0f);
    logits[round * 10000 + 17] = 99.0f;
    gpu().copy_to_device(dl.buf->data(), logits.data(), logits.size() * 4);
    ids.poison();
    BOOST_REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    const auto got = ids.host();
    sampling_params greedy;
    for (int64_t r = 0; r < m; ++r)
      BOOST_TEST(got[r] == ref::sample_row(logits.data() + r * vocab, vocab, greedy), "replay " << round << " row " << r);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

BOOST_AUTO_TEST_CASE(recorded_steps_replay_with_new_inputs) {
  const int64_t n = 4, d = 576;
  dvec<float> x(gpu(), n * d), w(gpu(), test::random_floats(rng(), d)), out(gpu(), n * d);
  std::vector<float> ref(n * d);
  for (int round = 0; round < 3; ++round) {
    auto xh = test::random_floats(rng(), n * d);
    gpu().copy_to_device(x.buf->data(), xh.data(), xh.size() * 4);
    out.poison();
    gpu().run_recorded(test_owner, 42, [&] { gpu().rms_norm(x.view({n, d}), w.view({d}), 1e-5f, out.view({n, d})); });
    auto wh = w.host();
    ref::rms_norm(xh.data(), wh.data(), 1e-5f, n, d, ref.data());
    BOOST_TEST(test::rel_err(out.host(), ref) < 1e-5, "round " << round);
  }
  BOOST_TEST(gpu().recorded_graphs() >= 1u);
  // Another owner's step of the same key is its own: it must not replay the one above
  // (which would write `out`, not `other`).
  dvec<float> other(gpu(), n * d);
  const uint64_t second = new_recording_owner();
  for (int round = 0; round < 2; ++round) {
    other.poison();
    gpu().run_recorded(second, 42, [&] { gpu().rms_norm(x.view({n, d}), w.view({d}), 1e-5f, other.view({n, d})); });
    BOOST_TEST(test::rel_err(other.host(), out.host()) < 1e-6, "second owner, round " << round);
  }
}

BOOST_AUTO_TEST_CASE(bad_views_throw) {
  std::vector<float> h(16);
  auto lw = gpu().load_linear(test::random_weight(rng(), dtype::q4_1, 4, 32).info);
  dvec<float> x(gpu(), 32), y(gpu(), 4);
  BOOST_CHECK_THROW(gpu().linear(*lw, test::view(h, {1, 16}), y.view({1, 4})), error);  // host memory
  BOOST_CHECK_THROW(gpu().linear(*lw, x.view({1, 16}), y.view({1, 4})), error);        // shape
  BOOST_CHECK_THROW(gpu().linear(*lw, x.view({1, 32}), y.view({1, 2})), error);
}

TANDEM_GPU_TEST_MAIN
