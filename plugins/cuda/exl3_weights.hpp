#pragma once
// backend.cuda's EXL3 linears (opaque tensors tagged EXL3 from weights.exl3): the trellis, suh, svh
// and bias uploaded as stored (padded k x n), and a column map that applies the
// descriptor's out_perm exactly as backend.cpu does (output o of the linear is padded
// column out_perm[o]; padding columns are dropped).
//
// linear(): at most 16 rows -> the fused decode GEMV (input Hadamard, trellis decode +
// mma, output Hadamard; tandem_exl3_cuda/exl3_cuda.hpp); more rows -> Ŵ decoded to fp16
// into the workspace and an f16 cuBLAS GEMM with f32 accumulation between the same two
// Hadamard transforms. Activations stay f32 at the edges.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "device_memory.hpp"
#include "tandem/backend.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/tensor.hpp"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::cuda {

class cuda_exl3_linear final : public linear_weight {
 public:
  // tandem::error when `t` has no valid exl3_tensor descriptor.
  cuda_exl3_linear(const tensor_info& t, cudaStream_t stream);

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  dtype storage_type() const override { return exl3::exl3_tensor::type; }

  const exl3::cuda::dev_exl3& dev() const { return d_; }
  const int32_t* col_to_out() const { return static_cast<const int32_t*>(cols_->data()); }

 private:
  int64_t in_ = 0, out_ = 0;
  exl3::cuda::dev_exl3 d_;
  std::unique_ptr<cuda_buffer> trellis_, suh_, svh_, bias_, cols_;
};

// The EXL3 weight behind `w`, or null when it is some other weight.
inline const cuda_exl3_linear* as_exl3(const linear_weight& w) { return dynamic_cast<const cuda_exl3_linear*>(&w); }

// Workspace bytes run_exl3_linear needs for `rows` rows.
size_t exl3_workspace_bytes(const cuda_exl3_linear& w, int64_t rows);

// y [rows, out] = x [rows, in] W^T (+ bias) on `stream`; `workspace` has
// exl3_workspace_bytes(w, rows) bytes. q8_activations: up to 16 rows of MUL1 weights go
// through the int8-activation GEMV (exl3_cuda.hpp). Launch errors are left for
// cudaGetLastError.
void run_exl3_linear(const cuda_exl3_linear& w, const float* x, int64_t rows, float* y, void* workspace,
                     cublasHandle_t cublas, cudaStream_t stream, bool q8_activations);

}  // namespace tandem::cuda
