#pragma once
// drafter.dflash2: a block-diffusion drafter conditioned on the target's hidden states
// (DFlash2; the network is ARCHITECTURE.md). Each committed token's taps become a context
// key and value per drafter layer (observe); each step one block [anchor, M, ..., M]
// attends to the sequence's context window and its own block, and the selector turns the
// mask slots' logits into up to block_size - 1 draft tokens (propose).
//
// Runs as ops of the target's backend, its state (each sequence's context keys and values)
// in that backend's memory; only the selector's few candidates come back to the host.
//
//   dflash2_drafter d(dflash2_settings::from(cfg));   // reads and checks the directory
//   d.bind(target);                                   // refuses a mismatched target
//   d.observe(seq, first_pos, taps);                  // the engine, after each forward
//   d.propose(seq, {.tokens = t, .max_draft = 7});
//   d.propose_batch(requests);                        // the engine: all drafting sequences at once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dflash2_context.hpp"
#include "dflash2_forward.hpp"
#include "dflash2_model.hpp"
#include "dflash2_weights.hpp"
#include "tandem/config.hpp"
#include "tandem/drafter.hpp"

namespace tandem {

struct dflash2_settings {
  std::string weights;  // the drafter directory (relative: to the working directory)
  int k = 0;            // most drafts per step; 0 = block_size - 1
  int disable_above_batch = 0;
  bool adaptive = true;
  std::string weights_type = "f32";  // f32 | q8_0 (dflash2_model::load)
  static dflash2_settings from(const config& cfg);
};

class dflash2_drafter final : public drafter {
 public:
  // Opens and checks the drafter directory; config_error naming drafter.weights (with the
  // file and what is wrong) or drafter.k.
  explicit dflash2_drafter(const dflash2_settings& s);
  ~dflash2_drafter() override;

  draft_limits limits() const override { return {k_, s_.disable_above_batch, s_.adaptive, /*batched=*/true}; }
  std::vector<int> target_layers() const override { return weights_->config().target_layers; }
  void bind(const draft_target& target) override;
  void observe(uint64_t seq_id, int64_t first_pos, std::span<const tensor_view> taps) override;
  std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) override;
  // Every sequence's block in one forward pass (forward_pass::blocks).
  std::vector<std::vector<int32_t>> propose_batch(std::span<const draft_request> reqs) override;
  void release(uint64_t seq_id, std::span<const int32_t> output) override;

  // For tests: the block forward behind propose (logits and drafts of `slots` mask slots),
  // and the held state.
  dflash2::block_output draft_block(uint64_t seq_id, int32_t anchor, int64_t anchor_pos, int slots, bool logits = true);
  // propose_batch's drafts (and logits, [slots, vocab] each) per request; a request that
  // drafts nothing gets an empty output.
  std::vector<dflash2::block_output> draft_batch(std::span<const draft_request> reqs, bool logits);
  const dflash2_config& config() const { return weights_->config(); }
  const dflash2::sequence_context* context(uint64_t seq_id) const;
  size_t live_sequences() const { return seqs_.size(); }
  // Decode rows a sequence keeps as taps before their context rows are computed together.
  static constexpr int64_t pending_taps = 64;

 private:
  dflash2::sequence_context& sequence(uint64_t seq_id);
  // error unless bound and `anchor` is a token id of the target.
  void check_anchor(int32_t anchor) const;

  dflash2_settings s_;
  int k_ = 0;
  std::unique_ptr<dflash2_weights> weights_;
  std::unique_ptr<dflash2_model> model_;          // set by bind()
  std::unique_ptr<dflash2::forward_pass> pass_;   // set by bind()
  backend* be_ = nullptr;                         // set by bind()
  dflash2::spare_buffers spare_;                  // before seqs_: they give their buffers back
  std::map<uint64_t, dflash2::sequence_context> seqs_;
  std::vector<int64_t> positions_;                // observe()'s, reused
};

}  // namespace tandem
