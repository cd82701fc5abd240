// Tail-biting Viterbi over the bitshift trellis with fp16 costs. See viterbi.hpp for the
// contract and what is mirrored from exllamav3's kernel.
//
// fp16 emulation. Values live in float lanes but always hold exact fp16 values:
//  * d = fp16(cb - w): the float subtraction rounds once to 24 bits, then to 11; rounding
//    twice is harmless here because 24 >= 2*11 + 2 (Figueroa's bound for +, -).
//  * cost = fp16(d*d + c), one rounding as __hfma: see fma_sq_half (TwoSum, round to odd,
//    round to nearest even). Checked against exact integer arithmetic in the tests.
//
// Speed: one trellis step is 65536 cost evaluations and a min over 2^K candidates per edge.
// Three implementations, picked at run time (viterbi_isa_name() says which; the
// environment variable TANDEM_EXL3_VITERBI=avx512|avx2|generic forces one, for tests and
// measurements):
//  * avx512 / avx2: the step written with AVX-512F / AVX2 intrinsics, 16 / 8 lanes; the
//    cost loop broadcasts prev[s >> K] (K >= 4 / 3) instead of gathering it, which is
//    what kept GCC's vectorization of the flat loop slow (AVX-512) or scalar (AVX2);
//  * generic: the flat loops (step_body) for baseline x86-64 / other CPUs.
// All three give bit-identical states and costs (tests/exl3_quant/test_viterbi.cpp).
#include "tandem_exl3/viterbi.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include "tandem/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
[[gnu::always_inline]] inline void step_body(const float* __restrict table, float w,
                                             const float* __restrict prev, float* __restrict cur,
                                             uint8_t* __restrict back, float* __restrict cost,
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

template <int K>
void step_generic(const float* table, float w, const float* prev, float* cur, uint8_t* back,
                  float* cost, int32_t* arg) {
  step_body<K>(table, w, prev, cur, back, cost, arg);
}
constexpr step_fn steps_generic[9] = {nullptr, step_generic<1>, step_generic<2>, step_generic<3>,
                                      step_generic<4>, step_generic<5>, step_generic<6>,
                                      step_generic<7>, step_generic<8>};

#if defined(__x86_64__)
// AVX-512, 16 lanes: rh() and fma_sq_half() operation for operation, as the AVX2 path below.
#define TANDEM_AVX512 [[gnu::target("avx512f"), gnu::always_inline]] inline

TANDEM_AVX512 __m512 rh16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0x80000000u)));
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512 fa = _mm512_castsi512_ps(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 13), _mm512_set1_epi32(1));
  const __m512 rn = _mm512_castsi512_ps(_mm512_and_si512(
      _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0xfff)), odd), _mm512_set1_epi32(~0x1fff)));
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 rs = _mm512_sub_ps(_mm512_add_ps(fa, half), half);
  __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(fa, _mm512_set1_ps(0x1p-14f), _CMP_LT_OQ), rn, rs);
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(rn, _mm512_set1_ps(65504.0f), _CMP_GT_OQ), r, _mm512_set1_ps(f_inf));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), sign));
}

TANDEM_AVX512 __m512 fma_sq_half16(__m512 d, __m512 c) {
  const __m512 b = _mm512_mul_ps(d, d);
  const __m512 s = _mm512_add_ps(c, b);
  const __m512 bb = _mm512_sub_ps(s, c);
  const __m512 err = _mm512_add_ps(_mm512_sub_ps(c, _mm512_sub_ps(s, bb)), _mm512_sub_ps(b, bb));
  __m512i u = _mm512_castps_si512(s);
  const __m512 zero = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i ie = _mm512_maskz_andnot_epi32(_mm512_cmp_ps_mask(err, zero, _CMP_NEQ_UQ), u, one);
  u = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(err, zero, _CMP_GT_OQ), _mm512_sub_epi32(u, ie),
                              _mm512_add_epi32(u, ie));
  const __m512 so = _mm512_castsi512_ps(u);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 13), one);
  const __m512 rn = _mm512_castsi512_ps(_mm512_and_si512(
      _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0xfff)), odd), _mm512_set1_epi32(~0x1fff)));
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512 rs = _mm512_sub_ps(_mm512_add_ps(so, half), half);
  const __m512 inf = _mm512_set1_ps(f_inf);
  __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(so, _mm512_set1_ps(0x1p-14f), _CMP_LT_OQ), rn, rs);
  r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(rn, _mm512_set1_ps(65504.0f), _CMP_GT_OQ), r, inf);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(c, inf, _CMP_EQ_OQ), r, inf);
}

#undef TANDEM_AVX512

template <int K>
[[gnu::target("avx512f")]]
void step_avx512(const float* __restrict table, float w, const float* __restrict prev,
                 float* __restrict cur, uint8_t* __restrict back, float* __restrict cost,
                 int32_t* __restrict arg) {
  constexpr uint32_t n_edges = 1u << (16 - K);  // >= 256, a multiple of 16
  const __m512 wv = _mm512_set1_ps(w);
  // Lane j of the block at s0 reads prev[(s0 + j) >> K]: one value for K >= 4, else the
  // 16 >> K values from prev + (s0 >> K) spread by a permute (a masked load: no overread).
  [[maybe_unused]] const __m512i spread =
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), K);
  [[maybe_unused]] constexpr __mmask16 need = static_cast<__mmask16>((1u << (K < 4 ? 16 >> K : 0)) - 1);
  for (uint32_t s0 = 0; s0 < 65536; s0 += 16) {
    __m512 pv;
    if constexpr (K >= 4) pv = _mm512_set1_ps(prev[s0 >> K]);
    else pv = _mm512_permutexvar_ps(spread, _mm512_maskz_loadu_ps(need, prev + (s0 >> K)));
    const __m512 d = rh16(_mm512_sub_ps(_mm512_loadu_ps(table + s0), wv));
    _mm512_storeu_ps(cost + s0, fma_sq_half16(d, pv));
  }
  for (uint32_t e = 0; e < n_edges; e += 16) {
    _mm512_storeu_ps(cur + e, _mm512_loadu_ps(cost + e));
    _mm512_storeu_si512(arg + e, _mm512_setzero_si512());
  }
  for (int32_t k = 1; k < (1 << K); ++k) {
    const float* ck = cost + (static_cast<uint32_t>(k) << (16 - K));
    const __m512i kv = _mm512_set1_epi32(k);
    for (uint32_t e = 0; e < n_edges; e += 16) {
      const __m512 c = _mm512_loadu_ps(ck + e), old = _mm512_loadu_ps(cur + e);
      const __mmask16 better = _mm512_cmp_ps_mask(c, old, _CMP_LT_OQ);
      _mm512_storeu_ps(cur + e, _mm512_mask_blend_ps(better, old, c));
      _mm512_storeu_si512(arg + e, _mm512_mask_blend_epi32(better, _mm512_loadu_si512(arg + e), kv));
    }
  }
  for (uint32_t e = 0; e < n_edges; ++e) back[e] = static_cast<uint8_t>(arg[e]);
}
constexpr step_fn steps_avx512[9] = {nullptr, step_avx512<1>, step_avx512<2>, step_avx512<3>,
                                     step_avx512<4>, step_avx512<5>, step_avx512<6>,
                                     step_avx512<7>, step_avx512<8>};

// AVX2, 8 lanes: rh() and fma_sq_half() above, operation for operation (same predicates:
// ordered < and >, unordered !=), so the results are bit-identical.
#define TANDEM_AVX2 [[gnu::target("avx2,fma"), gnu::always_inline]] inline

TANDEM_AVX2 __m256 rh8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256 fa = _mm256_castsi256_ps(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 13), _mm256_set1_epi32(1));
  const __m256 rn = _mm256_castsi256_ps(_mm256_and_si256(
      _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0xfff)), odd), _mm256_set1_epi32(~0x1fff)));
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 rs = _mm256_sub_ps(_mm256_add_ps(fa, half), half);
  __m256 r = _mm256_blendv_ps(rn, rs, _mm256_cmp_ps(fa, _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ));
  r = _mm256_blendv_ps(r, _mm256_set1_ps(f_inf), _mm256_cmp_ps(rn, _mm256_set1_ps(65504.0f), _CMP_GT_OQ));
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(r), sign));
}

TANDEM_AVX2 __m256 fma_sq_half8(__m256 d, __m256 c) {
  const __m256 b = _mm256_mul_ps(d, d);
  const __m256 s = _mm256_add_ps(c, b);
  const __m256 bb = _mm256_sub_ps(s, c);
  const __m256 err = _mm256_add_ps(_mm256_sub_ps(c, _mm256_sub_ps(s, bb)), _mm256_sub_ps(b, bb));
  __m256i u = _mm256_castps_si256(s);
  const __m256 zero = _mm256_setzero_ps();
  // inexact_even: 1 where err != 0 and u is even
  const __m256i inexact = _mm256_castps_si256(_mm256_cmp_ps(err, zero, _CMP_NEQ_UQ));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i ie = _mm256_and_si256(_mm256_andnot_si256(u, one), inexact);
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(err, zero, _CMP_GT_OQ));
  u = _mm256_blendv_epi8(_mm256_sub_epi32(u, ie), _mm256_add_epi32(u, ie), up);
  const __m256 so = _mm256_castsi256_ps(u);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 13), one);
  const __m256 rn = _mm256_castsi256_ps(_mm256_and_si256(
      _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0xfff)), odd), _mm256_set1_epi32(~0x1fff)));
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 rs = _mm256_sub_ps(_mm256_add_ps(so, half), half);
  const __m256 inf = _mm256_set1_ps(f_inf);
  __m256 r = _mm256_blendv_ps(rn, rs, _mm256_cmp_ps(so, _mm256_set1_ps(0x1p-14f), _CMP_LT_OQ));
  r = _mm256_blendv_ps(r, inf, _mm256_cmp_ps(rn, _mm256_set1_ps(65504.0f), _CMP_GT_OQ));
  return _mm256_blendv_ps(r, inf, _mm256_cmp_ps(c, inf, _CMP_EQ_OQ));
}

#undef TANDEM_AVX2

template <int K>
[[gnu::target("avx2,fma")]]
void step_avx2(const float* __restrict table, float w, const float* __restrict prev,
               float* __restrict cur, uint8_t* __restrict back, float* __restrict cost,
               int32_t* __restrict arg) {
  constexpr uint32_t n_edges = 1u << (16 - K);  // >= 256, a multiple of 8
  const __m256 wv = _mm256_set1_ps(w);
  // Lane j of the block at s0 reads prev[(s0 + j) >> K]: one value for K >= 3, else a gather.
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (uint32_t s0 = 0; s0 < 65536; s0 += 8) {
    __m256 pv;
    if constexpr (K >= 3) {
      pv = _mm256_broadcast_ss(prev + (s0 >> K));
    } else {
      const __m256i idx = _mm256_srli_epi32(_mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(s0)), lane), K);
      pv = _mm256_i32gather_ps(prev, idx, 4);
    }
    const __m256 d = rh8(_mm256_sub_ps(_mm256_loadu_ps(table + s0), wv));
    _mm256_storeu_ps(cost + s0, fma_sq_half8(d, pv));
  }
  for (uint32_t e = 0; e < n_edges; e += 8) {
    _mm256_storeu_ps(cur + e, _mm256_loadu_ps(cost + e));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(arg + e), _mm256_setzero_si256());
  }
  for (int32_t k = 1; k < (1 << K); ++k) {
    const float* ck = cost + (static_cast<uint32_t>(k) << (16 - K));
    const __m256i kv = _mm256_set1_epi32(k);
    for (uint32_t e = 0; e < n_edges; e += 8) {
      const __m256 c = _mm256_loadu_ps(ck + e), old = _mm256_loadu_ps(cur + e);
      const __m256 better = _mm256_cmp_ps(c, old, _CMP_LT_OQ);
      _mm256_storeu_ps(cur + e, _mm256_blendv_ps(old, c, better));
      auto* ap = reinterpret_cast<__m256i*>(arg + e);
      _mm256_storeu_si256(ap, _mm256_blendv_epi8(_mm256_loadu_si256(ap), kv, _mm256_castps_si256(better)));
    }
  }
  for (uint32_t e = 0; e < n_edges; ++e) back[e] = static_cast<uint8_t>(arg[e]);
}
constexpr step_fn steps_avx2[9] = {nullptr, step_avx2<1>, step_avx2<2>, step_avx2<3>, step_avx2<4>,
                                   step_avx2<5>, step_avx2<6>, step_avx2<7>, step_avx2<8>};

bool cpu_has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
bool cpu_has_avx512() { return __builtin_cpu_supports("avx512f"); }
#endif

const step_fn* steps_for(viterbi_isa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case viterbi_isa::avx512: return steps_avx512;
    case viterbi_isa::avx2: return steps_avx2;
#endif
    default: return steps_generic;
  }
}

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

bool viterbi_isa_supported(viterbi_isa isa) {
  switch (isa) {
    case viterbi_isa::generic: return true;
#if defined(__x86_64__)
    case viterbi_isa::avx2: return cpu_has_avx2();
    case viterbi_isa::avx512: return cpu_has_avx512();
#endif
    default: return false;
  }
}

const char* viterbi_isa_name(viterbi_isa isa) {
  switch (isa) {
    case viterbi_isa::avx512: return "avx512";
    case viterbi_isa::avx2: return "avx2";
    default: return "generic";
  }
}

std::optional<viterbi_isa> parse_viterbi_isa(std::string_view s) {
  if (s == "avx512") return viterbi_isa::avx512;
  if (s == "avx2") return viterbi_isa::avx2;
  if (s == "generic") return viterbi_isa::generic;
  return std::nullopt;
}

viterbi_isa default_viterbi_isa() {
  static const viterbi_isa chosen = [] {
    if (const char* env = std::getenv("TANDEM_EXL3_VITERBI"); env && *env) {
      const auto want = parse_viterbi_isa(env);
      if (!want)
        throw error(std::string("TANDEM_EXL3_VITERBI='") + env + "': expected avx512, avx2 or generic");
      if (!viterbi_isa_supported(*want))
        throw error(std::string("TANDEM_EXL3_VITERBI=") + env + ": this CPU does not support it");
      return *want;
    }
    if (viterbi_isa_supported(viterbi_isa::avx512)) return viterbi_isa::avx512;
    if (viterbi_isa_supported(viterbi_isa::avx2)) return viterbi_isa::avx2;
    return viterbi_isa::generic;
  }();
  return chosen;
}

tile_coder::tile_coder(codebook cb, int bits) : tile_coder(cb, bits, default_viterbi_isa()) {}

tile_coder::tile_coder(codebook cb, int bits, viterbi_isa isa)
    : cb_(cb), k_(bits), isa_(isa), table_(nullptr) {
  if (bits < 1 || bits > 8)
    throw error("exl3 tile coder: bits per weight must be 1..8, got " + std::to_string(bits));
  if (!viterbi_isa_supported(isa))
    throw error(std::string("exl3 tile coder: this CPU cannot run the ") + viterbi_isa_name(isa) + " path");
  table_ = codebook_table(cb);
}

float tile_coder::run(const float* w, int len, const float* start_cost, int end_edge,
                      uint16_t* states) const {
  const int n_edges = edges();
  if (len < 1 || len > 256) throw error("exl3 tile coder: run length must be 1..256");
  if (end_edge >= n_edges) throw error("exl3 tile coder: end edge out of range");
  scratch& sc = thread_scratch(n_edges);
  const step_fn step = steps_for(isa_)[k_];
  float* prev = sc.a.data();
  float* cur = sc.b.data();
  if (start_cost) std::copy(start_cost, start_cost + n_edges, prev);
  else std::fill(prev, prev + n_edges, 0.0f);
  for (int t = 0; t < len; ++t) {
    step(table_, w[t], prev, cur, sc.back.data() + static_cast<size_t>(t) * n_edges,
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
