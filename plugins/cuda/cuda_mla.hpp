#pragma once
// backend.cuda's MLA weight: kv_b_proj {heads * (nope + v), rank} as f32 on the device, the
// form both of mla_attention's GEMMs read (cuda_mla.cpp): per head h, W_UK[h] [nope, rank]
// (absorbed into the query) then W_UV[h] [v, rank] (applied to the attended latent).
#include <cstdint>
#include <memory>

#include "tandem/backend.hpp"

namespace tandem::cuda {

class cuda_mla final : public mla_weight {
 public:
  cuda_mla(std::unique_ptr<device_buffer> w, int heads, int nope, int v, int rank);

  int heads() const override { return heads_; }
  int nope_dims() const override { return nope_; }
  int v_dims() const override { return v_; }
  int rank() const override { return rank_; }

  const float* uk() const { return w_; }                                // head 0's W_UK
  const float* uv() const { return w_ + int64_t{nope_} * rank_; }        // head 0's W_UV
  int64_t head_stride() const { return int64_t{nope_ + v_} * rank_; }   // floats between heads

 private:
  std::unique_ptr<device_buffer> buf_;
  const float* w_;
  int heads_, nope_, v_, rank_;
};

}  // namespace tandem::cuda
