#pragma once
// Helpers and tile templates shared by the AVX2 and AVX-512 kernel files. Include only
// after `#pragma GCC target(...)` and <immintrin.h>. Everything is in an unnamed namespace
// on purpose: each kernel file gets its own copy compiled for its own target, so the
// linker can never merge an AVX-512 instantiation into the AVX2 table.
#include <type_traits>

#include "kernels.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cpu::simd {
namespace {

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float half(uint16_t h) { return _cvtsh_ss(h); }

// The 32 4-bit values of a Q4 block in element order: bytes 0-15 are the low nibbles
// (elements 0-15), bytes 16-31 the high nibbles (elements 16-31).
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw),
                          _mm256_set1_epi8(0x0f));
}

inline __m256i load32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 32 floats -> q8 block (d = amax / 127, round to nearest even, as the scalar kernel).
inline void quantize_block(const float* x, q8_block& out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const __m256 id = _mm256_set1_ps(d > 0.0f ? 1.0f / d : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  const __m256i p16 = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                         _mm256_packs_epi32(q[2], q[3]));
  // packs works within 128-bit lanes; this permutation restores element order.
  const __m256i ordered = _mm256_permutevar8x32_epi32(p16, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.qs), ordered);
  out.d = d;
  out.s = d * static_cast<float>(hsum_i32(sum32));
}

void quantize_q8(const float* x, q8_block* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) quantize_block(x + 32 * b, out[b]);
}

// One weight row against R activation rows. IntDot::apply(u8, s8) returns the eight
// 32-bit partial sums of the 32 byte products.
template <class Block, class IntDot, int R>
void dot_q4_tile(const Block* w, const q8_block* a, int64_t as, int64_t nb, float* out) {
  __m256 acc[R];
  float offset[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    offset[r] = 0.0f;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float d = half(w[b].d);
    float m = -8.0f * d;
    if constexpr (std::is_same_v<Block, block_q4_1>) m = half(w[b].m);
    const __m256i wq = unpack_nibbles(w[b].qs);
    for (int r = 0; r < R; ++r) {
      const q8_block& ab = a[r * as + b];
      const __m256i p = IntDot::apply(wq, load32(ab.qs));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[r]);
      offset[r] += m * ab.s;
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) + offset[r];
}

template <class IntDot, int R>
void dot_q8_0_tile(const block_q8_0* w, const q8_block* a, int64_t as, int64_t nb, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const float d = half(w[b].d);
    const __m256i wq = load32(w[b].qs);
    const __m256i wabs = _mm256_sign_epi8(wq, wq);
    for (int r = 0; r < R; ++r) {
      const q8_block& ab = a[r * as + b];
      const __m256i p = IntDot::apply(wabs, _mm256_sign_epi8(load32(ab.qs), wq));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * ab.d), _mm256_cvtepi32_ps(p), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

template <class Block, class IntDot>
void dot_q4(const void* w, const q8_block* a, int64_t as, int rows, int64_t nb, float* out) {
  const auto* wb = static_cast<const Block*>(w);
  switch (rows) {
    case 1: return dot_q4_tile<Block, IntDot, 1>(wb, a, as, nb, out);
    case 2: return dot_q4_tile<Block, IntDot, 2>(wb, a, as, nb, out);
    case 3: return dot_q4_tile<Block, IntDot, 3>(wb, a, as, nb, out);
    default: return dot_q4_tile<Block, IntDot, 4>(wb, a, as, nb, out);
  }
}

template <class IntDot>
void dot_q8_0(const void* w, const q8_block* a, int64_t as, int rows, int64_t nb, float* out) {
  const auto* wb = static_cast<const block_q8_0*>(w);
  switch (rows) {
    case 1: return dot_q8_0_tile<IntDot, 1>(wb, a, as, nb, out);
    case 2: return dot_q8_0_tile<IntDot, 2>(wb, a, as, nb, out);
    case 3: return dot_q8_0_tile<IntDot, 3>(wb, a, as, nb, out);
    default: return dot_q8_0_tile<IntDot, 4>(wb, a, as, nb, out);
  }
}

// Float weight rows (f32 or f16 through F16C) against R activation rows.
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float scalar(float v) { return v; }
inline float scalar(uint16_t v) { return half(v); }

template <class W, int R>
void dot_float_tile(const W* w, const float* x, int64_t xs, int64_t n, float* out) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 wv = load8(w + i);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * xs + i), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum(acc[r]);
    for (int64_t j = i; j < n; ++j) s += scalar(w[j]) * x[r * xs + j];
    out[r] = s;
  }
}

template <class W>
void dot_float(const W* w, const float* x, int64_t xs, int rows, int64_t n, float* out) {
  switch (rows) {
    case 1: return dot_float_tile<W, 1>(w, x, xs, n, out);
    case 2: return dot_float_tile<W, 2>(w, x, xs, n, out);
    case 3: return dot_float_tile<W, 3>(w, x, xs, n, out);
    default: return dot_float_tile<W, 4>(w, x, xs, n, out);
  }
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float* y, float a, const float* x, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

void scale(float* y, float a, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(av, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= a;
}

}  // namespace
}  // namespace tandem::cpu::simd
