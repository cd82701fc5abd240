// Tail-biting Viterbi over the bitshift trellis with fp16 costs. See viterbi.hpp for the
// contract and what is mirrored from exllamav3's kernel.
//
// fp16 emulation. Values live in float lanes but always hold exact fp16 values:
//  * d = fp16(cb - w): the float subtraction rounds once to 24 bits, then to 11; rounding
//    twice is harmless here because 24 >= 2*11 + 2 (Figueroa's bound for +, -).
//  * cost = fp16(d*d + c), one rounding as __hfma: see fma_sq_half (TwoSum, round to odd,
//    round to nearest even). Checked against exact integer arithmetic in the tests.
//
// Speed: the per-step loops are flat so GCC vectorizes them (AVX-512 clone; AVX2 and the
// default clone stay scalar for the cost loop); about 55 ms per tile per core at 65536
// states x 256 positions x 2 passes.
#include "tandem_exl3/viterbi.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "tandem/error.hpp"

namespace tandem::exl3 {
namespace {

constexpr float f_inf = std::numeric_limits<float>::infinity();

// Signed float -> fp16 precision, nearest even, branch-free so loops vectorize.
[[gnu::always_inline]] inline float rh(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u, a = u & 0x7fffffffu;
  const float fa = std::bit_cast<float>(a);
  const float rn = std::bit_cast<float>((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu);
  const float rs = (fa + 0.5f) - 0.5f;  // below 2^-14 the grid is 2^-24 = ulp(0.5f)
  float r = fa < 0x1p-14f ? rs : rn;
  r = rn > 65504.0f ? f_inf : r;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(r) | sign);
}

// fp16(d*d + c) for fp16 d and c >= 0 (c may be +inf), in float lanes only: the sum is
// formed exactly as s + err (Knuth's TwoSum), rounded to odd at float precision (sticky
// bit from err), then to nearest even at fp16 precision. Rounding to odd with 24 >= 11 + 2
// bits first makes the second rounding correct (Boldo & Melquiond).
[[gnu::always_inline]] inline float fma_sq_half(float d, float c) {
  const float b = d * d;  // exact: 22 significant bits
  const float s = c + b;
  const float bb = s - c;
  const float err = (c - (s - bb)) + (b - bb);
  uint32_t u = std::bit_cast<uint32_t>(s);
  const uint32_t dir = err > 0.0f ? 1u : 0xffffffffu;
  const uint32_t inexact_even = static_cast<uint32_t>(err != 0.0f) & ~u & 1u;
  u += inexact_even * dir;
  const float so = std::bit_cast<float>(u);
  const float rn = std::bit_cast<float>((u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu);
  const float rs = (so + 0.5f) - 0.5f;
  float r = so < 0x1p-14f ? rs : rn;
  r = rn > 65504.0f ? f_inf : r;
  return c == f_inf ? f_inf : r;
}

// One trellis step: cur[e] = min_k fp16(fp16(cb(s) - w)^2 + prev[s >> K]) with
// s = (k << (16-K)) | e; back[e] = the winning k (strict <: ties keep the lower k).
// `cost` (65536) and `arg` (2^(16-K)) are scratch. Three flat loops so each vectorizes.
template <int K>
[[gnu::target_clones("avx512f", "avx2", "default")]]
void step(const float* __restrict table, float w, const float* __restrict prev,
          float* __restrict cur, uint8_t* __restrict back, float* __restrict cost,
          int32_t* __restrict arg) {
  constexpr uint32_t n_edges = 1u << (16 - K);
  for (uint32_t s = 0; s < 65536; ++s) cost[s] = fma_sq_half(rh(table[s] - w), prev[s >> K]);
  for (uint32_t e = 0; e < n_edges; ++e) cur[e] = cost[e], arg[e] = 0;
  for (int32_t k = 1; k < (1 << K); ++k) {
    const float* ck = cost + (static_cast<uint32_t>(k) << (16 - K));
    for (uint32_t e = 0; e < n_edges; ++e) {
      const bool better = ck[e] < cur[e];
      cur[e] = better ? ck[e] : cur[e];
      arg[e] = better ? k : arg[e];
    }
  }
  for (uint32_t e = 0; e < n_edges; ++e) back[e] = static_cast<uint8_t>(arg[e]);
}

using step_fn = void (*)(const float*, float, const float*, float*, uint8_t*, float*, int32_t*);
constexpr step_fn steps[9] = {nullptr, step<1>, step<2>, step<3>, step<4>,
                              step<5>, step<6>, step<7>, step<8>};

// The codebook's 65536 values, built once per codebook.
const float* codebook_table(codebook cb) {
  static std::array<std::unique_ptr<float[]>, 3> tables;
  static std::once_flag once[3];
  const auto i = static_cast<size_t>(cb);
  std::call_once(once[i], [&] {
    tables[i] = std::make_unique<float[]>(65536);
    for (uint32_t s = 0; s < 65536; ++s) tables[i][s] = decode(cb, s);
  });
  return tables[i].get();
}

struct scratch {
  std::vector<uint8_t> back;
  std::vector<float> a, b, cost;
  std::vector<int32_t> arg;
};

scratch& thread_scratch(int edges) {
  thread_local scratch s;
  if (s.a.size() < static_cast<size_t>(edges)) {
    s.a.resize(edges);
    s.b.resize(edges);
    s.arg.resize(edges);
  }
  if (s.cost.empty()) s.cost.resize(65536);
  if (s.back.size() < 256u * edges) s.back.resize(256u * edges);
  return s;
}

}  // namespace

float round_to_half(float x) { return rh(x); }
float half_fma_sq(float d, float c) { return fma_sq_half(d, c); }

tile_coder::tile_coder(codebook cb, int bits) : cb_(cb), k_(bits), table_(nullptr) {
  if (bits < 1 || bits > 8)
    throw error("exl3 tile coder: bits per weight must be 1..8, got " + std::to_string(bits));
  table_ = codebook_table(cb);
}

float tile_coder::run(const float* w, int len, const float* start_cost, int end_edge,
                      uint16_t* states) const {
  const int n_edges = edges();
  if (len < 1 || len > 256) throw error("exl3 tile coder: run length must be 1..256");
  if (end_edge >= n_edges) throw error("exl3 tile coder: end edge out of range");
  scratch& sc = thread_scratch(n_edges);
  float* prev = sc.a.data();
  float* cur = sc.b.data();
  if (start_cost) std::copy(start_cost, start_cost + n_edges, prev);
  else std::fill(prev, prev + n_edges, 0.0f);
  for (int t = 0; t < len; ++t) {
    steps[k_](table_, w[t], prev, cur, sc.back.data() + static_cast<size_t>(t) * n_edges,
              sc.cost.data(), sc.arg.data());
    std::swap(prev, cur);
  }
  int e = end_edge;
  if (e < 0) e = static_cast<int>(std::min_element(prev, prev + n_edges) - prev);
  const float cost = prev[e];
  const int shift = 16 - k_;
  for (int t = len - 1; t >= 0; --t) {
    const uint32_t s = (uint32_t{sc.back[static_cast<size_t>(t) * n_edges + e]} << shift) |
                       static_cast<uint32_t>(e);
    states[t] = static_cast<uint16_t>(s);
    e = static_cast<int>(s >> k_);
  }
  return cost;
}

float tile_coder::encode(const float* in, uint16_t* states, float* out) const {
  std::array<float, 256> w{}, rot{};
  for (int i = 0; i < 256; ++i) w[i] = rh(in[i]);
  for (int i = 0; i < 256; ++i) rot[i] = w[(i + 128) & 255];
  // Pass 1: free start over the rotated sequence. Position 0 of the tile is rotated index
  // 128, so the edge entering it is the predecessor edge of rotated state 128.
  std::array<uint16_t, 256> tmp{};
  run(rot.data(), 256, nullptr, -1, tmp.data());
  const int e_star = tmp[128] >> k_;
  // Pass 2: the first predecessor forced to E*, the path closed on E*.
  std::vector<float> start(edges(), f_inf);
  start[e_star] = 0.0f;
  const float cost = run(w.data(), 256, start.data(), e_star, states);
  for (int i = 0; i < 256; ++i) out[i] = table_[states[i]];
  return cost;
}

void encode_tiles(const tile_coder& coder, const float* in, size_t count, uint16_t* states,
                  float* out, int threads, float* cost) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(threads, std::max<size_t>(count, 1)));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      const float c = coder.encode(in + i * 256, states + i * 256, out + i * 256);
      if (cost) cost[i] = c;
    }
  };
  if (threads == 1) return work();
  std::vector<std::jthread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(work);
}

}  // namespace tandem::exl3
