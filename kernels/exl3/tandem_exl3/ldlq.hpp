#pragma once
// EXL3 quantization math on a calibration Hessian (exl3.md §5 steps 1-4 and 6): damping,
// random input signs, the Hadamard rotation of H, block LDL with 16-row blocks, and LDLQ —
// bottom-to-top error feedback over 16-row blocks around a block quantizer.
//
//   auto hp = tandem::exl3::prepare_hessian(h.data(), k0, seed);   // shared by q/k/v
//   tandem::exl3::ldlq(w.data(), hp.k, n, hp.L.data(), quantize_block, q.data());
//
// Matrices are dense row-major. W is (k x n): rows are input features, y = x·W.
#include <cstdint>
#include <functional>
#include <vector>

namespace tandem::exl3 {

inline constexpr double sigma_reg = 0.025;  // damping: diag += 0.025 * mean(diag)

// ±1 from a deterministic stream: bit 63 of splitmix64 over (seed, stream, i). Stands in
// for torch's sign(randn(...)) after manual_seed(module index), which C++ cannot replay.
float random_sign(uint64_t seed, uint64_t stream, uint64_t i);

// In-place 128-point Sylvester Hadamard (normalized) over every contiguous 128-chunk, in
// double; n a multiple of 128.
void hadamard128_f64(double* x, int64_t n);

// Cholesky H = C·Cᵀ (C lower, returned row-major, upper part zero). Returns false if H is
// not positive definite.
bool cholesky(std::vector<double>& c, const double* h, int k);

// Block LDL with blocks of `block` rows: H = (L + I)·D·(L + I)ᵀ with D block diagonal and
// L strictly block-lower (its diagonal blocks are zero). On a failed Cholesky, retries up to
// 10 times adding `retry_damp` to the diagonal each time; throws tandem::error after that.
// Optionally returns D's blocks as [k/block][block][block].
std::vector<double> block_ldl(std::vector<double> h, int k, double retry_damp, int block = 16,
                              std::vector<double>* d_blocks = nullptr);

// The Hessian side of one qmap, shared by every linear that reads the same input.
struct prepared_hessian {
  int k0 = 0, k = 0;              // true and padded (multiple of 128) input size
  bool fallback = false;          // no calibration: H = I, no error feedback
  std::vector<double> h;          // [k][k] undamped H, zero-padded (for the proxy error)
  std::vector<float> su;          // [k] random input signs
  std::vector<double> L;          // [k][k] strictly block-lower LDL factor of the rotated H
  bool out_scales_auto = true;    // the "auto" out-scales rule: top 2% of sqrt(diag H)
                                  // carries < 15% of its sum
};

// h: [k0][k0] (H = XᵀX / count), or nullptr for the fallback. Damps, draws su from
// (seed, stream 0), rotates H ← Hb·diag(su)·H·diag(su)·Hb and factors it.
prepared_hessian prepare_hessian(const double* h, int k0, uint64_t seed);

// Quantizes one 16-row block: target [16][n] -> q [16][n]. `row0` is the block's first row.
using block_quantizer = std::function<void(int row0, const float* target, float* q)>;

// LDLQ: for each 16-row block B from the last to the first,
//   target_B = W_B + L[b+16:, B]ᵀ · E[b+16:, :],  Q_B = quantize(target_B),  E_B = W_B - Q_B.
// w, q: [k][n]; L: [k][k] strictly block-lower (nullptr = no feedback).
void ldlq(const float* w, int k, int n, const double* L, const block_quantizer& quantize,
          float* q);

}  // namespace tandem::exl3
