#pragma once
// The network of ARCHITECTURE.md as ops of the target's backend, on activations that stay
// in its memory: the context rows of newly committed tokens (once each, into the
// sequence's buffers) and one block forward (each propose). Only the block's top
// candidates and selector projection come back to the host, where the candidate selector
// picks the draft: one wait per block on a device backend.
//
//   forward_pass f(model, be);
//   f.context(seq, taps, positions);                // taps: the target's [n, d] rows, T of them
//   block_output out = f.block(seq, anchor, P, m, /*logits=*/false);
//   out.draft;    // d_1 .. d_m
//   out.logits;   // [m, vocab] when asked for (tests compare them with the reference)
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "dflash2_context.hpp"
#include "dflash2_model.hpp"

namespace tandem::dflash2 {

struct block_output {
  std::vector<float> logits;   // [slots, vocab], when asked for
  std::vector<int32_t> draft;  // [slots]
};

class forward_pass {
 public:
  forward_pass(const dflash2_model& m, backend& be);

  // Computes Kc / Vc of n committed tokens at `positions` (ascending, past the held ones)
  // from their taps (each [n, hidden] in the backend's memory) and appends them to `seq`.
  void context(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions);
  // Keeps n rows of each tap in the sequence's pending buffer instead (a copy each; n at most
  // the room left there), for flush() to turn into context rows together.
  void stage(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions);
  // context() of every pending row, in one pass.
  void flush(sequence_context& seq);

  // The block [anchor, M, ..., M] at anchor_pos .. anchor_pos + block_size - 1 over the
  // sequence's window; drafts (and, when `logits`, the logits) of the first `slots` mask
  // slots (1 <= slots <= block_size - 1). Every held position must be below anchor_pos.
  block_output block(sequence_context& seq, int32_t anchor, int64_t anchor_pos, int slots, bool logits);

 private:
  // A scratch buffer of the backend, grown to the largest request.
  float* scratch(size_t i, int64_t floats);
  tensor_view rows(float* p, int64_t n, int64_t cols) const;

  const dflash2_model& m_;
  backend& be_;
  std::vector<std::unique_ptr<device_buffer>> scratch_;
  std::unique_ptr<device_buffer> ids_;    // i32: the anchor, then the block's positions
  std::unique_ptr<device_buffer> zeros_;  // i32 [block_size]: gathers the mask embedding
  std::unique_ptr<device_buffer> iota_;   // i32 0, 1, ...: gathers rows in order (stage)
  int64_t iota_n_ = 0;
};

}  // namespace tandem::dflash2
