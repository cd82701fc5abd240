#pragma once
// backend.cuda's routed experts (load_experts), for moe_experts (cuda_moe.cpp):
//  - bf16, f16 or f32 experts: converted to f16 on the device at load (bf16's 8 mantissa
//    bits fit f16's 11 exactly, so bf16 weights in f16's range lose nothing; a finite value
//    beyond +-65504 is a load error, values below f16's normal range 6.1e-5 keep an absolute
//    error <= 3e-8): gate and up of expert e as one interleaved w13[e], down as w2[e] (see
//    tandem_cuda/moe.hpp: dev_experts). 3 * hidden * ffn * 2 bytes per expert.
//  - exl3 experts (opaque tensors: tandem_exl3/tensor.hpp descriptors): each linear uploaded
//    as cuda_exl3_linear, and the device table the EXL3 fat-expert kernel reads
//    (tandem_exl3_cuda/exl3_moe.hpp).
#include <memory>
#include <vector>

#include "device_memory.hpp"
#include "exl3_weights.hpp"
#include "tandem/backend.hpp"
#include "tandem_cuda/moe.hpp"
#include "tandem_exl3/tensor.hpp"
#include "tandem_exl3_cuda/exl3_moe.hpp"

namespace tandem::cuda {

class cuda_experts final : public expert_weights {
 public:
  // f16 experts (w13: [E][2 ffn][hidden], w2: [E][hidden][ffn]) converted from `source`.
  cuda_experts(int n_experts, int64_t hidden, int64_t ffn, dtype source, std::unique_ptr<cuda_buffer> w13,
               std::unique_ptr<cuda_buffer> w2);
  // EXL3 experts: gate, up, down linears of every expert (3 E), their shape and device table.
  cuda_experts(int n_experts, int64_t hidden, int64_t ffn, std::vector<std::unique_ptr<cuda_exl3_linear>> linears,
               const exl3::cuda::exl3_moe_shape& shape, std::unique_ptr<cuda_buffer> table);

  int n_experts() const override { return n_experts_; }
  int64_t hidden() const override { return hidden_; }
  int64_t ffn() const override { return ffn_; }

  dtype source_type() const { return source_; }  // bf16 / f16 / f32 (stored as f16), or opaque (exl3)
  bool is_exl3() const { return source_ == exl3::exl3_tensor::type; }
  const dev_experts& dev() const { return dev_; }  // f16 experts
  const exl3::cuda::exl3_moe_shape& exl3_shape() const { return shape_; }
  const exl3::cuda::exl3_moe_expert* exl3_table() const {
    return static_cast<const exl3::cuda::exl3_moe_expert*>(table_->data());
  }

 private:
  int n_experts_ = 0;
  int64_t hidden_ = 0, ffn_ = 0;
  dtype source_ = dtype::f16;
  std::unique_ptr<cuda_buffer> w13_, w2_;
  dev_experts dev_;
  std::vector<std::unique_ptr<cuda_exl3_linear>> linears_;
  exl3::cuda::exl3_moe_shape shape_;
  std::unique_ptr<cuda_buffer> table_;
};

}  // namespace tandem::cuda
