#pragma once
// backend.cpu's EXL3 linears (opaque tensors tagged EXL3 from weights.exl3; the descriptor
// is tandem_exl3/tensor.hpp).
//
// reconstruct (default): W is decoded once at load into the original basis as f32
//   (tandem::exl3::reconstruct_f32) and runs as an f32 cpu_linear: fast, f32-exact W.
// exact: the weight stays a trellis and every call runs the rotated-space reference
//   (tandem::exl3::linear_ref with GPU rounding: fp16 activations, fp16 Hadamard
//   outputs, f32 accumulation), i.e. what exllamav3's fp16 kernels compute.
// A tensor with a bias always takes the exact path (cpu_linear has no bias).
#include <memory>

#include "tandem/backend.hpp"
#include "tandem/weight_format.hpp"
#include "thread_pool.hpp"

namespace tandem::cpu {

enum class exl3_mode : uint8_t { reconstruct, exact };

// The weight for an exl3 tensor_info; tandem::error when its descriptor is invalid.
std::unique_ptr<linear_weight> load_exl3_linear(const tensor_info& w, exl3_mode mode, thread_pool& pool);

// y = x W^T for an exact-mode EXL3 weight; false (nothing done) for any other weight.
bool run_exl3_linear(const linear_weight& w, tensor_view x, tensor_view y, thread_pool& pool);

}  // namespace tandem::cpu
