#pragma once
// The drafter's weights prepared on the target's backend: the big matrices as the backend's
// linear weights, the vectors (norms, conv bases, mask embedding, selector codebook) as f32
// host arrays for the host-side operations. Shares the target's embedding table and head.
#include <memory>
#include <vector>

#include "dflash2_config.hpp"
#include "tandem/backend.hpp"

namespace tandem {

class dflash2_weights;

struct dflash2_layer {
  std::vector<float> input_norm, conv_attn_base, post_norm, conv_mlp_base;
  std::unique_ptr<linear_weight> conv_attn_proj, q_proj, k_proj, v_proj, o_proj;
  std::unique_ptr<linear_weight> conv_mlp_proj, gate_proj, up_proj, down_proj;
};

struct dflash2_model {
  dflash2_config cfg;
  std::unique_ptr<linear_weight> fc, selector_proj;
  std::vector<float> hidden_norm, mask_embedding, norm;
  std::vector<float> codebook;  // [vocab, selector_rank]
  std::vector<dflash2_layer> layers;
  const linear_weight* embedding = nullptr;  // the target's {vocab, hidden}
  const linear_weight* lm_head = nullptr;    // the target's {vocab, hidden}

  // `w` must outlive the result (backend.cpu's linears read its mapped tensors in place).
  static std::unique_ptr<dflash2_model> load(const dflash2_weights& w, backend& be, const linear_weight& embedding,
                                             const linear_weight& lm_head);
};

}  // namespace tandem
