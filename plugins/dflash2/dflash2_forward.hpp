#pragma once
// The network of ARCHITECTURE.md as ops of the target's backend, on activations that stay
// in its memory: the context rows of newly committed tokens (once each, into the
// sequence's buffers) and the block forward (each propose; several sequences' blocks
// together for propose_batch). Only the blocks' top candidates and selector projections come
// back to the host, where the candidate selector picks the drafts: one wait per pass on a
// device backend (plus the small ops' own while they have host defaults).
//
//   forward_pass f(model, be);
//   f.context(seq, taps, positions);                // taps: the target's [n, d] rows, T of them
//   block_output out = f.block(seq, anchor, P, m, /*logits=*/false);
//   out.draft;    // d_1 .. d_m
//   out.logits;   // [m, vocab] when asked for (tests compare them with the reference)
//   auto outs = f.blocks(requests, false);   // several sequences' blocks in one pass
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

// Taps that lie one after another at one stride in one buffer (as llama_model keeps them:
// [tap][capacity][hidden]), each n contiguous f32 rows, as one [T, n * d] view whose row i
// is tap i's rows (stage() copies them all with one gather); an empty view (no data) when
// they do not.
tensor_view stacked_taps(std::span<const tensor_view> taps);

// One sequence's block in a blocks() pass.
struct block_request {
  sequence_context* seq = nullptr;
  int32_t anchor = 0;
  int64_t anchor_pos = 0;
  int slots = 0;
};

class forward_pass {
 public:
  forward_pass(const dflash2_model& m, backend& be);

  // Computes Kc / Vc of n committed tokens at `positions` (ascending, past the held ones)
  // from their taps (each [n, hidden] in the backend's memory) and appends them to `seq`.
  void context(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions);
  // Keeps n rows of each tap in the sequence's pending buffer instead (one copy for all the
  // taps when they lie at one stride in one buffer, else one each; n at most the room left
  // there), for flush() to turn into context rows together.
  void stage(sequence_context& seq, std::span<const tensor_view> taps, std::span<const int64_t> positions);
  // context() of every pending row, in one pass.
  void flush(sequence_context& seq);
  // flush() of several sequences (each at most once) in one pass: each product over all their
  // pending rows together (the weights read once), the results copied to each sequence.
  void flush(std::span<sequence_context* const> seqs);

  // The block [anchor, M, ..., M] at anchor_pos .. anchor_pos + block_size - 1 over the
  // sequence's window; drafts (and, when `logits`, the logits) of the first `slots` mask
  // slots (1 <= slots <= block_size - 1). Every held position must be below anchor_pos.
  block_output block(sequence_context& seq, int32_t anchor, int64_t anchor_pos, int slots, bool logits);
  // block() of several sequences (each at most once) in one pass: every product over all
  // their block rows together (the weights read once), attention and dynconv per sequence
  // (each over its own rows), one wait for all the candidates. Each output is what block()
  // alone computes (dflash2_block.cpp).
  std::vector<block_output> blocks(std::span<const block_request> reqs, bool logits);

 private:
  // The scratch buffers' slots.
  enum slot : size_t {
    s_h, s_x, s_u, s_taps, s_q, s_kb, s_vb, s_attn, s_gate, s_up, s_emb, s_head, s_z, s_logits, s_g, s_top, s_ids,
    s_ctx, s_pos, s_ctx_taps, s_ctx_k, s_ctx_v, s_count
  };
  // A scratch buffer of the backend, grown to the largest request.
  float* scratch(size_t i, int64_t floats);
  tensor_view rows(float* p, int64_t n, int64_t cols) const;
  tensor_view rows(float* p, int64_t n, int64_t cols, int64_t stride) const;  // rows `stride` floats apart
  // The index of the first of these ascending positions still within context_window of the last.
  size_t first_in_reach(std::span<const int64_t> positions) const;
  // The positions as i32 in device memory (scratch slot s_pos).
  tensor_view positions_on_device(std::span<const int64_t> positions);
  // rms_norm(sum_i fc_i · taps_i) of n rows (scratch slot s_ctx): the context vectors.
  tensor_view fuse_taps(std::span<const tensor_view> taps, int64_t n);
  // One layer's context keys (RoPE'd at pv) and values of the context vectors, into k and v.
  void project_kv(int layer, const tensor_view& ctx, const tensor_view& pv, float* k, float* v);
  // i32 0 .. n-1 (gathers rows in order: a copy), kept for at least `at_least`.
  tensor_view in_order(int64_t n, int64_t at_least);

  const dflash2_model& m_;
  backend& be_;
  std::vector<std::unique_ptr<device_buffer>> scratch_;
  std::unique_ptr<device_buffer> zeros_;  // i32 [1] = 0: gathers the mask embedding
  std::unique_ptr<device_buffer> iota_;   // i32 0, 1, ...: gathers rows in order (in_order)
  int64_t iota_n_ = 0;
};

}  // namespace tandem::dflash2
