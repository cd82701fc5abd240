#pragma once
// backend.cuda's fused decode stack (tandem::fused_decode_stack): the host side of
// kernels/cuda/src/decode_stack.cu. Built once per model by prepare_decode_stack: the
// per-layer descriptors (weights, norms; the KV pool's pointers once run() sees the pool)
// live in device memory, with the grid barrier and the scratch. run() checks the batch on
// the host and enqueues one cooperative launch on the backend's stream, so it works both
// eagerly and inside run_recorded()'s graph capture.
//
//   auto stack = be.prepare_decode_stack(desc);   // nullptr: use the per-op loop
//   if (stack) stack->run(x, proj, kv, batch);    // batch: one sequence, one new token
#include <memory>
#include <vector>

#include "device_memory.hpp"
#include "tandem/backend.hpp"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {

class cuda_backend;

class cuda_decode_stack final : public fused_decode_stack {
 public:
  // nullptr when the shapes or weights are outside what the kernel supports.
  static std::unique_ptr<cuda_decode_stack> make(cuda_backend& be, const llama_stack_desc& d);

  void run(tensor_view x, tensor_view proj, kv_storage& kv, const attention_batch& batch) override;

 private:
  cuda_decode_stack(cuda_backend& be, const llama_stack_desc& d, std::vector<stack_layer> layers, int grid);

  cuda_backend& be_;
  llama_stack_desc desc_;
  std::vector<stack_layer> layers_;  // host copy; k / v filled in for the pool last seen
  int grid_ = 0;
  int64_t d_ = 0, ffn_ = 0;
  std::unique_ptr<cuda_buffer> layers_dev_, barrier_;
  scratch scratch_;
  const kv_storage* kv_ = nullptr;  // the pool whose pointers layers_dev_ holds
};

}  // namespace tandem::cuda
