#include "exl3_linear.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu_weights.hpp"
#include "host_memory.hpp"
#include "tandem/error.hpp"
#include "tandem_exl3/descriptor.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3/tensor.hpp"
#include "views.hpp"

namespace tandem::cpu {
namespace {

exl3::exl3_matrix to_matrix(const exl3::exl3_tensor& e) { return exl3::matrix_of(e); }

const exl3::exl3_tensor& descriptor(const tensor_info& w) { return exl3::checked_descriptor(w, "backend.cpu"); }

// The trellis kept as is; each call runs linear_ref.
class exl3_exact_linear final : public linear_weight {
 public:
  explicit exl3_exact_linear(const exl3::exl3_tensor& e) : e_(e), m_(to_matrix(e)) {}
  int64_t in_features() const override { return e_.in_features; }
  int64_t out_features() const override { return e_.out_features; }
  dtype storage_type() const override { return exl3::exl3_tensor::type; }

  void run(const rows_view& x, const rows_view& y, thread_pool& pool) const {
    const int64_t rows = x.rows;
    std::vector<float> xp(static_cast<size_t>(rows * m_.k), 0.0f), yp(static_cast<size_t>(rows * m_.n));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < e_.in_features; ++i) xp[r * m_.k + i] = x.row(r)[i];
    // 128-column groups are independent (the output Hadamard works within one).
    pool.parallel_for(m_.n / 128, [&](int64_t g) {
      exl3::linear_ref(m_, xp.data(), rows, yp.data(), exl3::rounding::gpu, g * 128, g * 128 + 128);
    });
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < e_.out_features; ++o)
        y.row(r)[o] = yp[r * m_.n + (e_.out_perm ? e_.out_perm[o] : o)];
  }

 private:
  exl3::exl3_tensor e_;
  exl3::exl3_matrix m_;
};

}  // namespace

std::unique_ptr<linear_weight> load_exl3_linear(const tensor_info& w, exl3_mode mode, thread_pool& pool) {
  const exl3::exl3_tensor& e = descriptor(w);
  if (mode == exl3_mode::exact || e.bias != nullptr) return std::make_unique<exl3_exact_linear>(e);
  const int64_t out = e.out_features, in = e.in_features;
  auto buf = std::make_unique<host_buffer>(static_cast<size_t>(out * in) * sizeof(float));
  auto* wt = static_cast<float*>(buf->data());  // cpu_linear rows: [out][in]
  exl3::unpadded_rows_f32(e, wt, [&](int64_t n, auto fn) { pool.parallel_for(n, std::move(fn)); });
  return std::make_unique<cpu_linear>(dtype::f32, wt, out, in, std::move(buf));
}

bool run_exl3_linear(const linear_weight& w, tensor_view x, tensor_view y, thread_pool& pool) {
  const auto* e = dynamic_cast<const exl3_exact_linear*>(&w);
  if (e == nullptr) return false;
  const rows_view xv = f32_rows(x, "linear", "x"), yv = f32_rows(y, "linear", "y");
  if (xv.cols != e->in_features() || yv.cols != e->out_features() || xv.rows != yv.rows)
    throw error("backend.cpu linear (exl3): x is [" + std::to_string(xv.rows) + ", " + std::to_string(xv.cols) +
                "] and y [" + std::to_string(yv.rows) + ", " + std::to_string(yv.cols) + "] for a " +
                std::to_string(e->out_features()) + " x " + std::to_string(e->in_features()) + " weight");
  if (x.data == y.data) throw error("backend.cpu linear (exl3): y must not alias x");
  e->run(xv, yv, pool);
  return true;
}

}  // namespace tandem::cpu
