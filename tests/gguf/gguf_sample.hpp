#pragma once
// Test helper: a small valid GGUF file that uses every metadata type and every
// supported tensor type, with values the parse tests check one by one.
#include <cstdint>
#include <vector>

#include "gguf_writer.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::test {

// GGML type ids.
enum ggml_id : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 8, BF16 = 30 };

inline std::vector<float> ramp(int n, float scale) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i - n / 2);
  return v;
}

template <class Block>
std::vector<std::byte> quantized(const std::vector<float>& x,
                                 void (*quantize)(const float*, void*, int64_t)) {
  std::vector<Block> blocks(x.size() / 32);
  quantize(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  return as_bytes(blocks);
}

inline void add_sample_metadata(gguf_writer& w) {
  using vt = gguf_writer::vt;
  w.kv_string("general.architecture", "llama");
  w.kv("t.u8", vt::u8, uint8_t{200});
  w.kv("t.i8", vt::i8, int8_t{-100});
  w.kv("t.u16", vt::u16, uint16_t{60000});
  w.kv("t.i16", vt::i16, int16_t{-30000});
  w.kv("t.u32", vt::u32, uint32_t{4000000000u});
  w.kv("t.i32", vt::i32, int32_t{-2000000000});
  w.kv("t.f32", vt::f32, 0.25f);
  w.kv("t.bool", vt::boolean, uint8_t{1});
  w.kv("t.u64", vt::u64, uint64_t{18000000000000000000ull});
  w.kv("t.i64", vt::i64, int64_t{-9000000000000000000ll});
  w.kv("t.f64", vt::f64, 1e300);
  w.kv_strings("t.strings", {"a", "bc", "", "\xff\xfe not utf-8"});
  w.kv_array("t.i32s", vt::i32, std::vector<int32_t>{1, -2, 3});
  w.kv_array("t.f32s", vt::f32, std::vector<float>{0.5f, -1.25f});
  w.kv_array("t.bools", vt::boolean, std::vector<uint8_t>{1, 0, 1});
  w.kv_array("t.u64s", vt::u64, std::vector<uint64_t>{7, 1ull << 40});
  w.kv_array("t.empty", vt::u8, std::vector<uint8_t>{});
}

inline void add_sample_tensors(gguf_writer& w) {
  w.tensor("f32", F32, {4, 3}, as_bytes(ramp(12, 0.5f)));
  std::vector<uint16_t> h, b;
  for (float v : ramp(8, 0.25f)) h.push_back(fp32_to_fp16(v));
  for (float v : ramp(8, 1.5f)) b.push_back(fp32_to_bf16(v));
  w.tensor("f16", F16, {8}, as_bytes(h));
  w.tensor("bf16", BF16, {2, 2, 2}, as_bytes(b));
  w.tensor("q4_0", Q4_0, {32, 2}, quantized<block_q4_0>(ramp(64, 0.1f), quantize_row_q4_0));
  w.tensor("q4_1", Q4_1, {64, 1, 2}, quantized<block_q4_1>(ramp(128, 0.01f), quantize_row_q4_1));
  w.tensor("q8_0", Q8_0, {32, 3}, quantized<block_q8_0>(ramp(96, 0.02f), quantize_row_q8_0));
  w.tensor("blk.0.four_d", F32, {1, 2, 1, 2}, as_bytes(ramp(4, 1.0f)));
}

// The whole sample file.
inline std::vector<std::byte> sample_file(gguf_writer& w) {
  add_sample_metadata(w);
  add_sample_tensors(w);
  return w.build();
}

}  // namespace tandem::test
