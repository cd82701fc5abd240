#pragma once
// Shared by the two decode-attention kernels (attention_decode.cu: tiled through shared
// memory; attention_decode_split.cu: registers): one split's partial result, and the
// register variant's launcher. Internal to kernels/cuda.
#include <cuda_runtime.h>

#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {

template <int HD>
struct decode_partial {  // one split's unnormalised result for one query head
  float acc[HD];
  float m, l;
};

void attention_decode_split(const float* q, const float* k, const float* v, int n_heads, const dev_kv& kv,
                            const dev_batch& b, const dev_rope& rope, float scale, float* out,
                            const decode_plan& plan, void* scratch, int* tickets, cudaStream_t stream);

}  // namespace tandem::cuda
