#pragma once
// The target backend's heavy products on host rows: the drafter keeps its activations on
// the host (attention and dynconv are plain C++ there) and ships each product's input to
// the backend and its output back. On backend.cpu the copies are memcpy; on backend.cuda
// each round trip costs two copies and a synchronisation (no drafter kernels of its own
// yet), so products of one input (q/k/v, gate/up, head and selector) share one.
//
//   dflash2::device_rows dev(be);
//   dev.linear(*q_proj, u.data(), rows, q.data());   // q[rows, out] = u[rows, in] W^T
//   dev.linears({{q_proj.get(), q.data()}, {k_proj.get(), k.data()}}, u.data(), rows);  // one round trip
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <utility>

#include "tandem/backend.hpp"

namespace tandem::dflash2 {

class device_rows {
 public:
  explicit device_rows(backend& be) : be_(be) {}

  // y[n, w.out] = x[n, w.in] W^T.
  void linear(const linear_weight& w, const float* x, int64_t n, float* y);
  // Products of one input: y_i[n, w_i.out] = x[n, in] W_i^T for each (w_i, y_i), with one
  // upload of x and one wait for all of them (every w_i has x's width).
  void linears(std::initializer_list<std::pair<const linear_weight*, float*>> parts, const float* x, int64_t n);
  // out[i] = row ids[i] of the (possibly quantized) table, dequantized.  out: [n, table.in]
  void embed(const linear_weight& table, const int32_t* ids, int64_t n, float* out);
  // Copies the f32 rows of a [n, d] view in the backend's memory (rows may be strided) to out.
  void to_host(const tensor_view& v, float* out);

  backend& be() const { return be_; }

 private:
  void* reserve(std::unique_ptr<device_buffer>& b, size_t bytes);

  backend& be_;
  std::unique_ptr<device_buffer> in_, out_, ids_;  // grown to the largest call, reused
};

}  // namespace tandem::dflash2
