#define BOOST_TEST_MODULE gpu_exl3_moe
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// The EXL3 MoE MLP on the GPU (tandem_exl3_cuda/exl3_moe.hpp): the fat path
// (exl3_moe_forward) and the per-expert loop baseline (exl3_moe_loop, cuBLAS for > 16 rows)
// against a CPU reference built from tandem_exl3's linear_ref(rounding::gpu), on random
// trellis words (any bits are a valid trellis), random suh (sign x 0.5..1.5) and svh
// (sign x 0.5..1.5 / sqrt(k), so activations stay O(1) in fp16) and x ~ N(0, 1).
//
// Reference per pair (t, j), e = ids[t][j]: g = linear_ref(gate_e, x_t), u = linear_ref(up_e,
// x_t) (fp16 values), h = g / (1 + exp(-g)) * u in f32, d = linear_ref(down_e, h) (fp16
// values); y[t] = sum_j w * d in j order, f32. The GPU rounds at the same places; only the
// f32 summation order of x̂·Ŵ differs (mma, split k) and expf differs from std::exp by an
// ulp, which can flip an fp16 rounding of g, u or the down input, so y may differ from the
// reference by a few fp16 ulps of d. Tolerance per element: sum_j |w| (2 ulp16(d) + 1e-3
// rms(d)) + 1e-6; ||y - ref|| / ||ref|| < 5e-4. The share of bit-identical outputs is printed.
//
// Routings: E = 8, top-2, skewed (experts 6 and 7 never chosen: zero tokens; expert 0 in
// ~70% of tokens: 3 chunks at 200 tokens), one pair with id -1 (skipped); T = 1, 3, 16
// (decode: k split), 40, 200 (prefill: 16-row blocks, several chunks, no split); and a
// fixed routing with expert 0 in every token at T = 64 (one full chunk) and 65 (64 + 1).
// K = 2, 3, 4, 8 over the three codebooks at hidden 256 / width 128; one shape with two
// gate/up column tiles and a half down tile (hidden 384, width 256, E = 5, top-3).
// Also: the counting sort's counts / offsets against the host, two forwards and a CUDA
// graph replay give bit-identical y (tickets and split counters reset every forward), and
// y is NaN-poisoned before every run.
//
//   build/tests/gpu/test_gpu_exl3_moe        (meson test --suite gpu gpu_exl3_moe)
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_util.hpp"
#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/hadamard.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3_cuda/exl3_moe.hpp"

namespace ex = tandem::exl3;
namespace xc = tandem::exl3::cuda;

namespace {

std::mt19937& rng() {
  static std::mt19937 r(6006);
  return r;
}

void ck(cudaError_t e, const char* what) {
  BOOST_REQUIRE_MESSAGE(e == cudaSuccess, what << ": " << cudaGetErrorString(e));
}

// A blocking stream: it is ordered with the legacy default stream that cudaMemcpy uses.
cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t t = nullptr;
    cudaStreamCreate(&t);
    return t;
  }();
  return s;
}

cublasHandle_t cublas() {
  static cublasHandle_t h = [] {
    cublasHandle_t t = nullptr;
    cublasCreate(&t);
    return t;
  }();
  return h;
}

// A device allocation.
struct dbuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit dbuf(size_t b) : bytes(b) { ck(cudaMalloc(&p, std::max<size_t>(b, 16)), "cudaMalloc"); }
  template <class T>
  dbuf(const std::vector<T>& h) : dbuf(h.size() * sizeof(T)) {
    ck(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice), "upload");
  }
  ~dbuf() { cudaFree(p); }
  dbuf(const dbuf&) = delete;
  dbuf& operator=(const dbuf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
  void poison() { ck(cudaMemsetAsync(p, 0xff, bytes, stream()), "poison"); }  // NaN floats
  template <class T>
  std::vector<T> host() const {
    std::vector<T> h(bytes / sizeof(T));
    ck(cudaStreamSynchronize(stream()), "sync");
    ck(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), "download");
    return h;
  }
};

struct host_lin {
  int K = 4, cb = 2;
  int64_t k = 0, n = 0;
  std::vector<uint16_t> trellis, suh, svh;
  ex::exl3_matrix mat() const {
    return {K, static_cast<ex::codebook>(cb), k, n, trellis.data(), suh.data(), svh.data(), nullptr};
  }
};

std::vector<uint16_t> random_scales(int64_t count, float div) {
  std::uniform_real_distribution<float> mag(0.5f, 1.5f);
  std::vector<uint16_t> v(static_cast<size_t>(count));
  for (auto& h : v) h = ex::f32_to_f16((rng()() & 1 ? mag(rng()) : -mag(rng())) / div);
  return v;
}

host_lin random_lin(int K, int cb, int64_t k, int64_t n) {
  host_lin h;
  h.K = K, h.cb = cb, h.k = k, h.n = n;
  h.trellis.resize(static_cast<size_t>(k / 16 * (n / 16) * 16 * K));
  for (auto& w : h.trellis) w = static_cast<uint16_t>(rng()());
  h.suh = random_scales(k, 1.0f);
  h.svh = random_scales(n, std::sqrt(static_cast<float>(k)));
  return h;
}

// E experts on the host and the device, and the fat path's table.
struct moe_model {
  xc::exl3_moe_shape s;
  std::vector<host_lin> lin[3];  // gate, up, down
  std::vector<std::unique_ptr<dbuf>> bufs;
  std::vector<xc::dev_exl3> dev[3];
  std::unique_ptr<dbuf> table;

  moe_model(int64_t E, int64_t topk, int64_t hidden, int64_t width, int K, int cb) {
    s = {E, topk, hidden, width, K, cb};
    for (int64_t e = 0; e < E; ++e)
      for (int i = 0; i < 3; ++i) {
        lin[i].push_back(i < 2 ? random_lin(K, cb, hidden, width) : random_lin(K, cb, width, hidden));
        const host_lin& h = lin[i].back();
        bufs.push_back(std::make_unique<dbuf>(h.trellis));
        bufs.push_back(std::make_unique<dbuf>(h.suh));
        bufs.push_back(std::make_unique<dbuf>(h.svh));
        const size_t b = bufs.size();
        dev[i].push_back({K, cb, h.k, h.n, bufs[b - 3]->as<const uint16_t>(), bufs[b - 2]->as<const __half>(),
                          bufs[b - 1]->as<const __half>(), nullptr});
      }
    table = std::make_unique<dbuf>(xc::exl3_moe_table(s, dev[0].data(), dev[1].data(), dev[2].data()));
  }
};

struct routing {
  std::vector<int32_t> ids;
  std::vector<float> w;
};

// Top-k distinct experts per token drawn with weights `pref` (0 = never), weights 0.1..1;
// pair (1, 1) gets id -1 when there are at least 3 tokens.
routing skewed(int64_t T, int64_t topk, const std::vector<double>& pref) {
  routing r;
  std::discrete_distribution<int> pick(pref.begin(), pref.end());
  std::uniform_real_distribution<float> wd(0.1f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < topk) {
      const int e = pick(rng());
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int32_t e : chosen) r.ids.push_back(e), r.w.push_back(wd(rng()));
  }
  if (T >= 3 && topk >= 2) r.ids[static_cast<size_t>(topk + 1)] = -1;
  return r;
}

// Expert 0 first in every token, then 1 + t % 3 (top-2).
routing expert0_always(int64_t T) {
  routing r;
  std::uniform_real_distribution<float> wd(0.1f, 1.0f);
  for (int64_t t = 0; t < T; ++t) {
    r.ids.push_back(0), r.w.push_back(wd(rng()));
    r.ids.push_back(static_cast<int32_t>(1 + t % 3)), r.w.push_back(wd(rng()));
  }
  return r;
}

double ulp16(double v) {
  v = std::fabs(v);
  if (v < 6.103515625e-05) return 5.960464477539063e-08;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(v))) - 10);
}

// The CPU reference: y and, per pair, d (the down output) for the tolerances.
struct reference {
  std::vector<float> y;
  std::vector<std::vector<float>> d;  // [pair][hidden], empty for skipped pairs
  double rms_d = 0.0;
};

reference cpu_reference(const moe_model& m, const std::vector<float>& x, int64_t T, const routing& r) {
  const int64_t E = m.s.experts, topk = m.s.topk, H = m.s.hidden, W = m.s.width;
  reference ref;
  ref.d.resize(static_cast<size_t>(T * topk));
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> pairs;
    for (int64_t p = 0; p < T * topk; ++p)
      if (r.ids[p] == e) pairs.push_back(p);
    const auto n = static_cast<int64_t>(pairs.size());
    if (n == 0) continue;
    std::vector<float> X(static_cast<size_t>(n * H)), G(static_cast<size_t>(n * W)), U(G.size()),
        D(static_cast<size_t>(n * H));
    for (int64_t i = 0; i < n; ++i)
      std::copy_n(x.data() + (pairs[i] / topk) * H, H, X.data() + i * H);
    ex::linear_ref(m.lin[0][e].mat(), X.data(), n, G.data(), ex::rounding::gpu);
    ex::linear_ref(m.lin[1][e].mat(), X.data(), n, U.data(), ex::rounding::gpu);
    for (size_t i = 0; i < G.size(); ++i) G[i] = G[i] / (1.0f + std::exp(-G[i])) * U[i];
    ex::linear_ref(m.lin[2][e].mat(), G.data(), n, D.data(), ex::rounding::gpu);
    for (int64_t i = 0; i < n; ++i) ref.d[static_cast<size_t>(pairs[i])].assign(D.data() + i * H, D.data() + (i + 1) * H);
  }
  double ss = 0.0;
  int64_t cnt = 0;
  ref.y.assign(static_cast<size_t>(T * H), 0.0f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < topk; ++j) {
      const auto& d = ref.d[static_cast<size_t>(t * topk + j)];
      if (d.empty()) continue;
      const float w = r.w[static_cast<size_t>(t * topk + j)];
      for (int64_t c = 0; c < H; ++c) {
        const float prod = w * d[c];
        ref.y[t * H + c] = ref.y[t * H + c] + prod;
        ss += double{d[c]} * d[c];
        ++cnt;
      }
    }
  ref.rms_d = cnt ? std::sqrt(ss / static_cast<double>(cnt)) : 0.0;
  return ref;
}

// Elementwise and relative check of y against the reference; `scale` widens the tolerance.
void check_y(const std::vector<float>& y, const reference& ref, const routing& r, const xc::exl3_moe_shape& s,
             int64_t T, const std::string& what, double scale = 1.0) {
  const int64_t H = s.hidden, topk = s.topk;
  int64_t bad = 0, same = 0;
  double num = 0.0, den = 0.0, worst = 0.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) {
      double tol = 1e-6;
      for (int64_t j = 0; j < topk; ++j) {
        const auto& d = ref.d[static_cast<size_t>(t * topk + j)];
        // 4 ulps of d and 4e-3 of its rms: the down projection's input (silu(g) * u) is
        // rounded to fp16 after the GPU's own gate/up sums, so one flipped ulp of it moves d
        // by about 2^-11 of a row's |W h|; on the H200 4 of 51,200 outputs at T = 200 went
        // past 2 ulps + 1e-3 rms, the same 4 for the fat path and the per-expert loop.
        if (!d.empty()) tol += std::fabs(r.w[static_cast<size_t>(t * topk + j)]) * (4 * ulp16(d[c]) + 4e-3 * ref.rms_d);
      }
      tol *= scale;
      const double got = y[t * H + c], want = ref.y[t * H + c], diff = std::fabs(got - want);
      if (!(diff <= tol)) {
        if (bad < 5)
          std::printf("  %s: y[%lld][%lld] gpu %.8g ref %.8g (tol %.3g)\n", what.c_str(), static_cast<long long>(t),
                      static_cast<long long>(c), got, want, tol);
        ++bad;
      }
      same += got == want;
      worst = std::max(worst, diff / tol);
      num += (got - want) * (got - want);
      den += want * want;
    }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf("  %-44s %6.2f%% bit-identical, worst %.3f of tol, rel err %.2e\n", what.c_str(),
              100.0 * same / static_cast<double>(T * H), worst, rel);
  BOOST_TEST(bad == 0, what << ": " << bad << " of " << T * H << " outputs off the reference");
  BOOST_TEST(rel < 5e-4 * scale, what << ": rel err " << rel);
}

void gemm(const __half* a, const __half* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t st) {
  // Row-major c [m][n] = a [m][k] b [k][n] is column-major c^T = b^T a^T.
  const float alpha = 1.0f, beta = 0.0f;
  cublasSetStream(cublas(), st);
  const cublasStatus_t e = cublasGemmEx(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                        static_cast<int>(k), &alpha, b, CUDA_R_16F, static_cast<int>(n), a, CUDA_R_16F,
                                        static_cast<int>(k), &beta, c, CUDA_R_32F, static_cast<int>(n),
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  BOOST_REQUIRE_MESSAGE(e == CUBLAS_STATUS_SUCCESS, "cublasGemmEx: " << cublasGetStatusString(e));
}

// One routing through both GPU paths, checked against the CPU reference and each other.
void run_case(const moe_model& m, int64_t T, const routing& r, const std::string& name) {
  const xc::exl3_moe_shape& s = m.s;
  const int64_t H = s.hidden, topk = s.topk;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * H));
  for (auto& v : x) v = nd(rng());
  const reference ref = cpu_reference(m, x, T, r);

  char what[160];
  std::snprintf(what, sizeof what, "%s K=%d %s T=%lld", name.c_str(), s.K,
                std::string(ex::name(static_cast<ex::codebook>(s.cb))).c_str(), static_cast<long long>(T));
  dbuf xd(x), ids(r.ids), wts(r.w), y(static_cast<size_t>(T * H) * 4), y2(y.bytes), y3(y.bytes), yl(y.bytes);
  const size_t ws_bytes = xc::exl3_moe_workspace_bytes(s, T);
  dbuf ws(ws_bytes);
  ws.poison();
  auto fat = [&](const dbuf& out) {
    xc::exl3_moe_forward(s, m.table->as<const xc::exl3_moe_expert>(), xd.as<const float>(), T,
                         ids.as<const int32_t>(), wts.as<const float>(), out.as<float>(), ws.p, ws_bytes, stream());
  };
  y.poison();
  fat(y);
  ck(cudaStreamSynchronize(stream()), what);
  ck(cudaGetLastError(), what);
  const std::vector<float> got = y.host<float>();
  const xc::exl3_moe_stats st = xc::exl3_moe_read_stats(s, T, ws.p, stream());
  std::printf("  %s: %d pairs, %d experts, %d chunks (max %d rows), gate+up %d units (k split %d), down %d units "
              "(k split %d), %d / %d CTAs\n",
              what, st.valid_pairs, st.active_experts, st.chunks, st.max_chunk_rows, st.units[0], st.k_splits[0],
              st.units[1], st.k_splits[1], st.ctas[0], st.ctas[1]);
  check_y(got, ref, r, s, T, std::string("fat  ") + what);

  // The counting sort against the host's.
  std::vector<int32_t> cnt(static_cast<size_t>(s.experts), 0);
  for (int64_t p = 0; p < T * topk; ++p)
    if (r.ids[p] >= 0 && r.ids[p] < s.experts) ++cnt[static_cast<size_t>(r.ids[p])];
  std::vector<int32_t> gc(cnt.size()), go(cnt.size() + 1);
  ck(cudaMemcpy(gc.data(), xc::exl3_moe_counts(s, T, ws.p), gc.size() * 4, cudaMemcpyDeviceToHost), "counts");
  ck(cudaMemcpy(go.data(), xc::exl3_moe_offsets(s, T, ws.p), go.size() * 4, cudaMemcpyDeviceToHost), "offsets");
  int32_t acc = 0;
  bool sort_ok = true;
  for (size_t e = 0; e < cnt.size(); ++e) {
    sort_ok = sort_ok && gc[e] == cnt[e] && go[e] == acc;
    acc += cnt[e];
  }
  sort_ok = sort_ok && go[cnt.size()] == acc && st.valid_pairs == acc;
  BOOST_TEST(sort_ok, what << ": counts / offsets differ from the host's");

  // Deterministic: a second forward and a graph replay (twice) give the same bits.
  y2.poison();
  fat(y2);
  BOOST_TEST((y2.host<float>() == got), what << ": a second forward differs");
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ck(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal), "begin capture");
  fat(y3);
  ck(cudaStreamEndCapture(stream(), &g), "end capture");
  ck(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  for (int rep = 0; rep < 2; ++rep) {
    y3.poison();
    ck(cudaGraphLaunch(ge, stream()), "graph launch");
    BOOST_TEST((y3.host<float>() == got), what << ": graph replay " << rep << " differs");
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);

  // The per-expert loop baseline.
  xc::exl3_moe_loop loop(s, m.dev[0].data(), m.dev[1].data(), m.dev[2].data(), r.ids.data(), r.w.data(), T, gemm);
  yl.poison();
  loop.run(xd.as<const float>(), yl.as<float>(), stream());
  ck(cudaStreamSynchronize(stream()), "loop");
  ck(cudaGetLastError(), "loop");
  const std::vector<float> lgot = yl.host<float>();
  check_y(lgot, ref, r, s, T, std::string("loop ") + what);
  // Fat against loop: both within the reference's tolerance, so within twice it of each other.
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double{got[i]} - lgot[i]) * (double{got[i]} - lgot[i]);
    den += double{lgot[i]} * lgot[i];
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  BOOST_TEST(rel < 1e-3, what << ": fat vs loop rel err " << rel);
}

std::vector<double> skew8() { return {8, 4, 2, 1, 1, 0.5, 0, 0}; }

}  // namespace

BOOST_AUTO_TEST_CASE(fat_path_every_branch_k4_mul1) {
  const moe_model m(8, 2, 256, 128, 4, 2);
  for (int64_t T : {1, 3, 16, 40, 200}) run_case(m, T, skewed(T, 2, skew8()), "skewed");
  for (int64_t T : {64, 65}) run_case(m, T, expert0_always(T), "expert0");
}

BOOST_AUTO_TEST_CASE(fat_path_other_k_and_codebooks) {
  for (auto [K, cb] : {std::pair{2, 2}, {3, 1}, {8, 0}, {2, 0}, {8, 2}}) {
    const moe_model m(8, 2, 256, 128, K, cb);
    for (int64_t T : {1, 3, 16, 40, 200}) run_case(m, T, skewed(T, 2, skew8()), "skewed");
  }
}

BOOST_AUTO_TEST_CASE(fat_path_two_column_tiles_and_half_down_tile) {
  // hidden 384: down tiles of 256 + 128 columns; width 256: two gate/up tiles, down k split.
  const moe_model m(5, 3, 384, 256, 4, 2);
  for (int64_t T : {1, 2, 9, 70}) run_case(m, T, skewed(T, 3, {3, 2, 1, 1, 0.5}), "wide");
}

BOOST_AUTO_TEST_CASE(rejects_bad_shapes) {
  const xc::exl3_moe_shape bad{8, 2, 200, 128, 4, 2};  // hidden not a multiple of 128
  BOOST_CHECK_THROW(xc::exl3_moe_workspace_bytes(bad, 4), std::invalid_argument);
  const xc::exl3_moe_shape many{2000, 2, 256, 128, 4, 2};
  BOOST_CHECK_THROW(xc::exl3_moe_workspace_bytes(many, 4), std::invalid_argument);
  const moe_model m(2, 1, 256, 128, 4, 2);
  std::vector<xc::dev_exl3> down = m.dev[2];
  down[1].K = 3;
  BOOST_CHECK_THROW(xc::exl3_moe_table(m.s, m.dev[0].data(), m.dev[1].data(), down.data()), std::invalid_argument);
}

TANDEM_GPU_TEST_MAIN
