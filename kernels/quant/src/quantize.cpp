// Reference quantizers with ggml's *_ref rounding, so blocks made here match files
// written by llama.cpp's quantize tool for the same input.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem {
namespace {

void check_blocks(const char* fn, int64_t n) {
  if (n < 0 || n % ggml_block_elems != 0) {
    throw error(std::string(fn) + ": " + std::to_string(n) +
                " elements is not a multiple of the block size 32");
  }
}

// Truncation toward zero then clamp, as ggml does with (int8_t)(x + 8.5f).
uint8_t nibble(float v) { return static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v)))); }

}  // namespace

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
  check_blocks("quantize_row_q4_0", n);
  auto* y = static_cast<block_q4_0*>(dst);
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, src += ggml_block_elems) {
    // The scale keeps the sign of the largest-magnitude value so it maps to -8 exactly.
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 16; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(nibble(src[j] * id + 8.5f) |
                                        (nibble(src[j + 16] * id + 8.5f) << 4));
    }
  }
}

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
  check_blocks("quantize_row_q4_1", n);
  auto* y = static_cast<block_q4_1*>(dst);
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, src += ggml_block_elems) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; ++j) {
      min = std::min(min, src[j]);
      max = std::max(max, src[j]);
    }
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(min);
    for (int j = 0; j < 16; ++j) {
      y[b].qs[j] = static_cast<uint8_t>(nibble((src[j] - min) * id + 0.5f) |
                                        (nibble((src[j + 16] - min) * id + 0.5f) << 4));
    }
  }
}

void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  check_blocks("quantize_row_q8_0", n);
  auto* y = static_cast<block_q8_0*>(dst);
  for (int64_t b = 0; b < n / ggml_block_elems; ++b, src += ggml_block_elems) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) y[b].qs[j] = static_cast<int8_t>(std::lround(src[j] * id));
  }
}

}  // namespace tandem
