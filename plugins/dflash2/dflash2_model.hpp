#pragma once
// The drafter's weights prepared on the target's backend: the matrices as the backend's
// linear weights, the vectors (norms, conv bases, mask embedding) as f32 buffers there, and
// the selector codebook on the host (the selector scores its few candidates there). Shares
// the target's embedding table and head.
#include <memory>
#include <vector>

#include "dflash2_config.hpp"
#include "tandem/backend.hpp"

namespace tandem {

class dflash2_weights;

struct dflash2_layer {
  std::unique_ptr<device_buffer> input_norm, conv_attn_base, post_norm, conv_mlp_base;  // f32
  std::unique_ptr<linear_weight> conv_attn_proj, q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<linear_weight> conv_mlp_proj, gate_proj, up_proj, down_proj;
};

struct dflash2_model {
  dflash2_config cfg;
  // fc {d, T*d} split by columns into one {d, d} part per tap: fc · concat(taps) is the sum
  // of fc_i · tap_i, so the taps never need copying side by side.
  std::vector<std::unique_ptr<linear_weight>> fc;
  // Host copies the backend's linears may read in place (backend.cpu does): the fc parts,
  // and every matrix when quantized at load.
  std::vector<std::vector<uint8_t>> host_tensors;
  std::unique_ptr<linear_weight> selector_proj;
  std::unique_ptr<device_buffer> hidden_norm, mask_embedding, norm;  // f32 [d]
  std::vector<float> codebook;  // host [vocab, selector_rank]
  std::vector<dflash2_layer> layers;
  const linear_weight* embedding = nullptr;  // the target's {vocab, hidden}
  const linear_weight* lm_head = nullptr;    // the target's {vocab, hidden}

  // `w` must outlive the result (backend.cpu's linears read its mapped tensors in place).
  // q8_0: the matrices (not the target's table and head) as Q8_0 blocks, where their width
  // allows (a multiple of 32), else f32.
  static std::unique_ptr<dflash2_model> load(const dflash2_weights& w, backend& be, const linear_weight& embedding,
                                             const linear_weight& lm_head, bool q8_0 = false);
};

// ARCHITECTURE.md's rope: Hugging Face llama's rotate_half over the whole head.
inline rope_params rope_of(const dflash2_config& c) { return {.theta = c.rope_theta, .rotary_dims = 0, .neox = true}; }

}  // namespace tandem
