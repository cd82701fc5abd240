#pragma once
// Element types of the K/V pool (dev_kv::type) on the device: storage types, rounding from
// f32 on store, widening to f32 (or f16 for the tensor cores) on load, and the dispatch from
// the run-time kv_elem to a kernel template.
//
// bf16 -> f32 and e4m3 -> f16 / f32 are exact; bf16 -> f16 is exact for |x| in
// [2^-14, 65504], far beyond the O(1) keys and values attention stores, so every kernel
// reads back exactly what kv_store rounded.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda::detail {

template <kv_elem E>
struct kv_traits;
template <>
struct kv_traits<kv_elem::f32> {
  using storage = float;
};
template <>
struct kv_traits<kv_elem::bf16> {
  using storage = __nv_bfloat16;
};
template <>
struct kv_traits<kv_elem::fp8_e4m3> {
  using storage = __nv_fp8_storage_t;  // one byte, OCP E4M3
};
template <kv_elem E>
using kv_t = typename kv_traits<E>::storage;
template <kv_elem E>
inline constexpr int kv_bytes = static_cast<int>(sizeof(kv_t<E>));

template <kv_elem E>
__device__ __forceinline__ kv_t<E> kv_store(float x) {
  if constexpr (E == kv_elem::f32) return x;
  else if constexpr (E == kv_elem::bf16) return __float2bfloat16_rn(x);
  else return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
}

template <kv_elem E>
__device__ __forceinline__ float kv_load(kv_t<E> x) {
  if constexpr (E == kv_elem::f32) return x;
  else if constexpr (E == kv_elem::bf16) return __bfloat162float(x);
  else return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
}

// Two neighbouring elements (p 2-element aligned) as f32.
template <kv_elem E>
__device__ __forceinline__ float2 kv_load2(const kv_t<E>* p) {
  if constexpr (E == kv_elem::f32) return *reinterpret_cast<const float2*>(p);
  else if constexpr (E == kv_elem::bf16) return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
  else {
    const __half2 h(__nv_cvt_fp8x2_to_halfraw2(*reinterpret_cast<const __nv_fp8x2_storage_t*>(p), __NV_E4M3));
    return __half22float2(h);
  }
}

// The 16 / kv_bytes<E> elements packed in u, as f32.
template <kv_elem E>
__device__ __forceinline__ void kv_widen16(uint4 u, float* out) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (E == kv_elem::f32) {
      out[i] = __uint_as_float(w[i]);
    } else if constexpr (E == kv_elem::bf16) {  // bf16 is the high half of an f32
      out[2 * i] = __uint_as_float(w[i] << 16);
      out[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const auto pair = static_cast<__nv_fp8x2_storage_t>((w[i] >> (16 * j)) & 0xffffu);
        const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
        out[4 * i + 2 * j] = f.x, out[4 * i + 2 * j + 1] = f.y;
      }
    }
  }
}

// N consecutive elements (N even; p 16-byte aligned when N elements fill whole 16-byte
// pieces, which are then read as such, else N-element aligned) as f32.
template <kv_elem E, int N>
__device__ __forceinline__ void kv_load_n(const kv_t<E>* p, float* out) {
  static_assert(N % 2 == 0);
  constexpr int per16 = 16 / kv_bytes<E>;
  if constexpr (N % per16 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += per16) kv_widen16<E>(*reinterpret_cast<const uint4*>(p + i), out + i);
  } else {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const float2 v = kv_load2<E>(p + i);
      out[i] = v.x, out[i + 1] = v.y;
    }
  }
}

// Calls f(std::integral_constant<kv_elem, E>{}) for the run-time type e.
template <class F>
void with_kv_elem(kv_elem e, F&& f) {
  switch (e) {
    case kv_elem::f32: f(std::integral_constant<kv_elem, kv_elem::f32>{}); return;
    case kv_elem::bf16: f(std::integral_constant<kv_elem, kv_elem::bf16>{}); return;
    case kv_elem::fp8_e4m3: f(std::integral_constant<kv_elem, kv_elem::fp8_e4m3>{}); return;
  }
}

}  // namespace tandem::cuda::detail
