// Reference dequantization of GGML blocks and float rows to f32.
#include <cstring>
#include <string>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem {

void dequantize_row_q4_0(const block_q4_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, dst += ggml_block_elems) {
    const float d = fp16_to_fp32(src[b].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>((src[b].qs[j] & 0x0f) - 8);
      dst[j + 16] = d * static_cast<float>((src[b].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_row_q4_1(const block_q4_1* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, dst += ggml_block_elems) {
    const float d = fp16_to_fp32(src[b].d);
    const float m = fp16_to_fp32(src[b].m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * static_cast<float>(src[b].qs[j] & 0x0f) + m;
      dst[j + 16] = d * static_cast<float>(src[b].qs[j] >> 4) + m;
    }
  }
}

void dequantize_row_q8_0(const block_q8_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, dst += ggml_block_elems) {
    const float d = fp16_to_fp32(src[b].d);
    for (int j = 0; j < 32; ++j) dst[j] = d * static_cast<float>(src[b].qs[j]);
  }
}

namespace {

// Half-precision rows in a file need not be 2-byte aligned for the compiler's
// purposes; memcpy each element instead of casting the pointer.
template <float (*convert)(uint16_t)>
void convert_row16(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const unsigned char*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = convert(h);
  }
}

float f16(uint16_t h) { return fp16_to_fp32(h); }
float bf16(uint16_t h) { return bf16_to_fp32(h); }

}  // namespace

void dequantize_row(dtype t, const void* src, float* dst, int64_t n) {
  if (n < 0 || n % traits(t).block_elems != 0) {
    throw error("dequantize_row: " + std::to_string(n) + " elements is not a whole number of " +
                std::string(name(t)) + " blocks");
  }
  switch (t) {
    case dtype::f32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case dtype::f16: convert_row16<f16>(src, dst, n); return;
    case dtype::bf16: convert_row16<bf16>(src, dst, n); return;
    case dtype::q4_0: dequantize_row_q4_0(static_cast<const block_q4_0*>(src), dst, n); return;
    case dtype::q4_1: dequantize_row_q4_1(static_cast<const block_q4_1*>(src), dst, n); return;
    case dtype::q8_0: dequantize_row_q8_0(static_cast<const block_q8_0*>(src), dst, n); return;
    case dtype::i32:
    case dtype::i64:
    case dtype::u8:
    case dtype::fp8_e4m3:
    case dtype::opaque: break;
  }
  throw error("dequantize_row: " + std::string(name(t)) + " is not a floating-point weight type");
}

}  // namespace tandem
