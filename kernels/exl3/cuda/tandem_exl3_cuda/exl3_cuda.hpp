#pragma once
// EXL3 (exllamav3) linears on the GPU: the trellis decode fused into a tensor-core GEMV for
// 1-16 rows, the decode of Ŵ to fp16 for prefill through cuBLAS, and the 128-point Hadamard
// transforms around both. Bit-for-bit the CPU reference's decode (tandem_exl3/trellis.hpp)
// and its GPU-rounding linear (tandem_exl3/linear.hpp, rounding::gpu) up to the fp32
// summation order. Spec: shared/research/exl3.md §3-4, §6.
//
// Every pointer is device memory; launches go on `stream` (programmatic dependent launch
// when TANDEM_CUDA_PDL is not 0) and report errors through cudaGetLastError.
//
//   tandem::exl3::cuda::dev_exl3 w{4, 2, k, n, trellis, suh, svh, nullptr};
//   void* ws = ...;  // exl3_gemv_scratch_bytes(w, rows) bytes
//   exl3_gemv(w, x, rows, in_features, nullptr, out_features, y, ws, stream);  // y = x·W + bias
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::exl3::cuda {

// One quantized linear on the device (padded k x n, multiples of 128; y = x·W + bias with
// W = diag(suh) Hb_k Ŵ Hb_n diag(svh)).
struct dev_exl3 {
  int K = 0;   // bits per weight, 1..8
  int cb = 2;  // codebook: 0 = 3inst, 1 = mcg, 2 = mul1
  int64_t k = 0, n = 0;
  const uint16_t* trellis = nullptr;  // int16 [k/16][n/16][16K], as stored
  const __half* suh = nullptr;        // [k]
  const __half* svh = nullptr;        // [n]
  const __half* bias = nullptr;       // [n] or null
};

// Rows the fused GEMV takes in one launch; more rows go through reconstruct + GEMM.
inline constexpr int64_t exl3_gemv_max_rows = 16;

// Ŵ as fp16, row-major [k][n] (rows = input index): tile (tk, tn) of the trellis decoded
// into Ŵ[16tk.., 16tn..], bit-exact with tandem::exl3::decode_rotated.
void exl3_reconstruct(const dev_exl3& w, __half* w_hat, cudaStream_t stream);

// xh [rows][k] = fp16(Hadamard128(fp16(x) ⊙ suh)) exactly as hadamard128_input_gpu rounds;
// x is f32 [rows][in] (in <= k; columns in..k-1 are taken as 0). When `zero_acc` is not
// null, also sets zero_acc[0 .. rows*n) to 0 (the GEMV accumulates into it).
void exl3_input_transform(const dev_exl3& w, const float* x, int64_t rows, int64_t in, __half* xh,
                          float* zero_acc, cudaStream_t stream);

// acc [rows][n] += xh [rows][k] · Ŵ, rows <= 16, fp32 accumulation (split-K across the
// grid, partial sums added with atomics: the summation order varies between runs).
void exl3_gemv_rotated(const dev_exl3& w, const __half* xh, int64_t rows, float* acc, cudaStream_t stream);

// y = fp16(fp16(Hadamard128(acc) · 1/sqrt(128)) · svh (+ bias)) as f32, as
// hadamard128_output_gpu rounds. Column c of the padded output goes to y[row][col_to_out[c]]
// (skipped when negative); col_to_out null = identity for c < out. y is [rows][out].
void exl3_output_transform(const dev_exl3& w, const float* acc, int64_t rows, const int32_t* col_to_out,
                           int64_t out, float* y, cudaStream_t stream);

// int8 activations ("q8", gemv_q8.cu), MUL1 weights only: the rotated activations x̂ (as
// exl3_input_transform makes them) quantized to int8 per row and 128-block (round to
// nearest, scale max|x̂|/127), against the weights' unrounded MUL1 values; the tensor core
// then does the MUL1 byte sums. Not bit-exact with linear_ref: the error is the activations'
// 8-bit rounding (relative ~0.5% per output on Gaussian inputs).
bool exl3_gemv_q8_supported(const dev_exl3& w);
// xq: one 32-byte record per row and 16 columns (rows * k * 2 bytes, the size of xh): the
// 16 int8 values, then fp32 {s·k_inv, s·c0·Σq, 0, 0}. zero_acc as exl3_input_transform.
void exl3_input_transform_q8(const dev_exl3& w, const float* x, int64_t rows, int64_t in, void* xq,
                             float* zero_acc, cudaStream_t stream);
// acc [rows][n] += x̂q · Ŵ (the records of exl3_input_transform_q8), rows <= 16.
void exl3_gemv_rotated_q8(const dev_exl3& w, const void* xq, int64_t rows, float* acc, cudaStream_t stream);

// Scratch of exl3_gemv for `rows` rows (xh or xq, and the accumulators).
size_t exl3_gemv_scratch_bytes(const dev_exl3& w, int64_t rows);
// The whole decode linear: input transform, fused GEMV, output transform (16 rows per pass;
// `scratch` sized for min(rows, 16) rows suffices). q8_activations: the int8 path above
// where exl3_gemv_q8_supported(w), else the fp16 one.
void exl3_gemv(const dev_exl3& w, const float* x, int64_t rows, int64_t in, const int32_t* col_to_out,
               int64_t out, float* y, void* scratch, cudaStream_t stream, bool q8_activations = false);

}  // namespace tandem::exl3::cuda
