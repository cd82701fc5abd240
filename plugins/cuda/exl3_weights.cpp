#include "exl3_weights.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "tandem/error.hpp"
#include "tandem_exl3/descriptor.hpp"
#include "tandem_exl3/linear.hpp"

namespace tandem::cuda {
namespace {

const exl3::exl3_tensor& descriptor(const tensor_info& w) { return exl3::checked_descriptor(w, "backend.cuda"); }

std::unique_ptr<cuda_buffer> upload(const void* host, size_t bytes, cudaStream_t stream) {
  auto b = std::make_unique<cuda_buffer>(bytes);
  check(cudaMemcpyAsync(b->data(), host, bytes, cudaMemcpyHostToDevice, stream), "load_linear (exl3)");
  return b;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

constexpr int64_t gemm_rows = 4096;  // rows per GEMM chunk above the GEMV's 16

}  // namespace

cuda_exl3_linear::cuda_exl3_linear(const tensor_info& t, cudaStream_t stream) {
  const exl3::exl3_tensor& e = descriptor(t);
  in_ = e.in_features;
  out_ = e.out_features;
  d_.K = e.bits;
  d_.cb = e.codebook;
  d_.k = e.k;
  d_.n = e.n;
  trellis_ = upload(e.trellis, static_cast<size_t>(e.k / 16 * (e.n / 16) * 16 * e.bits) * 2, stream);
  suh_ = upload(e.suh, static_cast<size_t>(e.k) * 2, stream);
  svh_ = upload(e.svh, static_cast<size_t>(e.n) * 2, stream);
  if (e.bias) bias_ = upload(e.bias, static_cast<size_t>(e.n) * 2, stream);
  std::vector<int32_t> cols(static_cast<size_t>(e.n), -1);
  for (int64_t o = 0; o < out_; ++o) cols[e.out_perm ? e.out_perm[o] : o] = static_cast<int32_t>(o);
  cols_ = upload(cols.data(), cols.size() * 4, stream);
  d_.trellis = static_cast<const uint16_t*>(trellis_->data());
  d_.suh = static_cast<const __half*>(suh_->data());
  d_.svh = static_cast<const __half*>(svh_->data());
  d_.bias = bias_ ? static_cast<const __half*>(bias_->data()) : nullptr;
  check(cudaStreamSynchronize(stream), "load_linear (exl3)");  // the host vector dies here
}

size_t exl3_workspace_bytes(const cuda_exl3_linear& w, int64_t rows) {
  const exl3::cuda::dev_exl3& d = w.dev();
  if (rows <= exl3::cuda::exl3_gemv_max_rows) return std::max<size_t>(exl3::cuda::exl3_gemv_scratch_bytes(d, rows), 256);
  const int64_t r = std::min(rows, gemm_rows);
  return align256(static_cast<size_t>(d.k * d.n) * 2) + align256(static_cast<size_t>(r * d.k) * 2) +
         static_cast<size_t>(r * d.n) * 4;
}

void run_exl3_linear(const cuda_exl3_linear& w, const float* x, int64_t rows, float* y, void* workspace,
                     cublasHandle_t cublas, cudaStream_t stream, bool q8_activations) {
  const exl3::cuda::dev_exl3& d = w.dev();
  const int64_t in = w.in_features(), out = w.out_features();
  if (rows <= exl3::cuda::exl3_gemv_max_rows) {
    exl3::cuda::exl3_gemv(d, x, rows, in, w.col_to_out(), out, y, workspace, stream, q8_activations);
    return;
  }
  auto* base = static_cast<uint8_t*>(workspace);
  auto* w_hat = reinterpret_cast<__half*>(base);
  auto* xh = reinterpret_cast<__half*>(base + align256(static_cast<size_t>(d.k * d.n) * 2));
  auto* acc = reinterpret_cast<float*>(base + align256(static_cast<size_t>(d.k * d.n) * 2) +
                                       align256(static_cast<size_t>(std::min(rows, gemm_rows) * d.k) * 2));
  exl3::cuda::exl3_reconstruct(d, w_hat, stream);
  for (int64_t r0 = 0; r0 < rows; r0 += gemm_rows) {
    const int64_t r = std::min(gemm_rows, rows - r0);
    exl3::cuda::exl3_input_transform(d, x + r0 * in, r, in, xh, nullptr, stream);
    // Row-major acc [r, n] = xh [r, k] · Ŵ [k, n] is column-major acc^T = Ŵ^T xh^T, where
    // Ŵ row-major is Ŵ^T column-major with leading dimension n.
    const float alpha = 1.0f, beta = 0.0f;
    check(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(d.n), static_cast<int>(r),
                       static_cast<int>(d.k), &alpha, w_hat, CUDA_R_16F, static_cast<int>(d.n), xh, CUDA_R_16F,
                       static_cast<int>(d.k), &beta, acc, CUDA_R_32F, static_cast<int>(d.n), CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT),
          "linear (exl3 gemm)");
    exl3::cuda::exl3_output_transform(d, acc, r, w.col_to_out(), out, y + r0 * out, stream);
  }
}

}  // namespace tandem::cuda
