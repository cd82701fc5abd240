#pragma once
// Shared helpers of the CPU backend tests: seeded random data, quantized weights, views,
// and a builder for paged attention batches.
#include <cstdint>
#include <random>
#include <vector>

#include "tandem/backend.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::test {

inline std::vector<float> random_floats(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline tensor_view view(std::vector<float>& v, std::initializer_list<int64_t> dims) {
  return tensor_view::contiguous(v.data(), dtype::f32, dims);
}
inline tensor_view view(std::vector<int32_t>& v, std::initializer_list<int64_t> dims) {
  return tensor_view::contiguous(v.data(), dtype::i32, dims);
}

// A weight {out, in} of `type`, made by quantizing random floats; `info` points at bytes.
struct test_weight {
  std::vector<uint8_t> bytes;
  tensor_info info;
};

inline test_weight random_weight(std::mt19937& rng, dtype type, int64_t out, int64_t in) {
  const std::vector<float> f = random_floats(rng, out * in, 0.5f);
  test_weight w;
  w.bytes.resize(static_cast<size_t>(*row_bytes(type, in) * out));
  for (int64_t o = 0; o < out; ++o) {
    void* dst = w.bytes.data() + o * *row_bytes(type, in);
    const float* src = f.data() + o * in;
    switch (type) {
      case dtype::q4_0: quantize_row_q4_0(src, dst, in); break;
      case dtype::q4_1: quantize_row_q4_1(src, dst, in); break;
      case dtype::q8_0: quantize_row_q8_0(src, dst, in); break;
      case dtype::f16:
      case dtype::bf16:
        for (int64_t j = 0; j < in; ++j) {
          static_cast<uint16_t*>(dst)[j] = type == dtype::f16 ? fp32_to_fp16(src[j]) : fp32_to_bf16(src[j]);
        }
        break;
      default:
        std::copy(src, src + in, static_cast<float*>(dst));
    }
  }
  w.info.name = "test.weight";
  w.info.type = type;
  w.info.shape = {out, in};
  w.info.data = w.bytes.data();
  w.info.nbytes = w.bytes.size();
  return w;
}

// A paged batch: each sequence has `cached` tokens in the pool and `n_new` new ones.
struct seq_spec {
  std::vector<int32_t> pages;  // its page table (long enough for cached + n_new)
  int cached = 0;
  int n_new = 0;
};

struct batch_builder {
  std::vector<int32_t> query_start, seq_lens, page_table, slot_mapping, positions;
  attention_batch batch;

  batch_builder(const batch_builder&) = delete;  // the views point into this object
  batch_builder(const std::vector<seq_spec>& seqs, int page_size) {
    int max_pages = 1;
    for (const auto& s : seqs) max_pages = std::max(max_pages, static_cast<int>(s.pages.size()));
    query_start.push_back(0);
    for (const auto& s : seqs) {
      seq_lens.push_back(s.cached + s.n_new);
      for (int i = 0; i < max_pages; ++i) {
        page_table.push_back(i < static_cast<int>(s.pages.size()) ? s.pages[i] : 0);
      }
      for (int t = s.cached; t < s.cached + s.n_new; ++t) {
        positions.push_back(t);
        slot_mapping.push_back(s.pages[t / page_size] * page_size + t % page_size);
      }
      query_start.push_back(static_cast<int32_t>(positions.size()));
    }
    const auto n_seqs = static_cast<int64_t>(seqs.size());
    const auto n_tokens = static_cast<int64_t>(positions.size());
    batch.n_seqs = static_cast<int>(n_seqs);
    batch.n_tokens = static_cast<int>(n_tokens);
    batch.max_pages_per_seq = max_pages;
    batch.query_start = view(query_start, {n_seqs + 1});
    batch.seq_lens = view(seq_lens, {n_seqs});
    batch.page_table = view(page_table, {n_seqs, max_pages});
    batch.slot_mapping = view(slot_mapping, {n_tokens});
    batch.positions = view(positions, {n_tokens});
  }
};

}  // namespace tandem::test
