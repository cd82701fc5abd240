#pragma once
// Host mirrors of backend.cuda's KV pool element types (kernels/cuda/src/kv_elem.cuh): the
// same CUDA conversion functions, run on the host, so a test can fill a pool, read one
// back, and give the reference exactly the values the kernels store.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tandem/dtype.hpp"

namespace tandem::test {

inline int64_t kv_bytes(dtype t) { return traits(t).block_bytes; }

// x as the pool stores it (round to nearest even; fp8 e4m3 saturates at +-448).
inline std::vector<uint8_t> encode_kv(dtype t, const std::vector<float>& x) {
  std::vector<uint8_t> out(x.size() * kv_bytes(t));
  for (size_t i = 0; i < x.size(); ++i) {
    if (t == dtype::f32) {
      std::memcpy(&out[4 * i], &x[i], 4);
    } else if (t == dtype::bf16) {
      const __nv_bfloat16 b = __float2bfloat16_rn(x[i]);
      std::memcpy(&out[2 * i], &b, 2);
    } else {
      out[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
    }
  }
  return out;
}

inline std::vector<float> decode_kv(dtype t, const std::vector<uint8_t>& b) {
  std::vector<float> out(b.size() / kv_bytes(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == dtype::f32) {
      std::memcpy(&out[i], &b[4 * i], 4);
    } else if (t == dtype::bf16) {
      __nv_bfloat16 h;
      std::memcpy(&h, &b[2 * i], 2);
      out[i] = __bfloat162float(h);
    } else {
      out[i] = __half2float(__half(__nv_cvt_fp8_to_halfraw(b[i], __NV_E4M3)));
    }
  }
  return out;
}

// What reading x back from a pool of type t gives.
inline std::vector<float> round_kv(dtype t, const std::vector<float>& x) { return decode_kv(t, encode_kv(t, x)); }

}  // namespace tandem::test
