#pragma once
// The network of ARCHITECTURE.md on host activations, its products on the target's backend:
// the context rows of newly committed tokens (once each), and one block forward with the
// candidate selector (each propose).
//
//   context_rows rows = compute_context(model, dev, taps, positions);
//   block_output out = forward_block(model, dev, seq.window(P), anchor, P, m);
//   out.draft;    // d_1 .. d_m
//   out.logits;   // [m, vocab], logits_1 .. logits_m (tests compare them with the reference)
#include <cstdint>
#include <span>
#include <vector>

#include "dflash2_context.hpp"
#include "dflash2_device.hpp"
#include "dflash2_model.hpp"

namespace tandem::dflash2 {

struct context_rows {
  std::vector<std::vector<float>> k, v;  // per layer: [n, kv_heads * head_dim], k roped at its position
};

// t: [n, taps * hidden], the concatenated taps of n committed tokens at `positions`.
context_rows compute_context(const dflash2_model& m, device_rows& dev, const float* t, std::span<const int64_t> positions);

struct block_output {
  std::vector<float> logits;   // [slots, vocab]
  std::vector<int32_t> draft;  // [slots]
};

// The block [anchor, M, ..., M] at anchor_pos .. anchor_pos + block_size - 1 over `context`;
// logits and drafts of the first `slots` mask slots (1 <= slots <= block_size - 1).
block_output forward_block(const dflash2_model& m, device_rows& dev, const sequence_context::view& context,
                           int32_t anchor, int64_t anchor_pos, int slots);

}  // namespace tandem::dflash2
