#include "dflash2_device.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem::dflash2 {

void* device_rows::reserve(std::unique_ptr<device_buffer>& b, size_t bytes) {
  if (!b || b->size() < bytes) b = be_.alloc(bytes);
  return b->data();
}

void device_rows::linear(const linear_weight& w, const float* x, int64_t n, float* y) { linears({{&w, y}}, x, n); }

void device_rows::linears(std::initializer_list<std::pair<const linear_weight*, float*>> parts, const float* x,
                          int64_t n) {
  if (n <= 0 || parts.size() == 0) return;
  const int64_t in = parts.begin()->first->in_features();
  int64_t outs = 0;
  for (const auto& [w, y] : parts) {
    if (w->in_features() != in)
      throw error("drafter.dflash2: products of one input of width " + std::to_string(in) + " got a weight of width " +
                  std::to_string(w->in_features()));
    outs += w->out_features();
  }
  void* xd = reserve(in_, static_cast<size_t>(n * in) * sizeof(float));
  auto* yd = static_cast<float*>(reserve(out_, static_cast<size_t>(n * outs) * sizeof(float)));
  be_.copy_to_device(xd, x, static_cast<size_t>(n * in) * sizeof(float));
  const tensor_view xv = tensor_view::contiguous(xd, dtype::f32, {n, in}, be_.dev());
  float* at = yd;
  for (const auto& [w, y] : parts) {
    const int64_t out = w->out_features();
    be_.linear(*w, xv, tensor_view::contiguous(at, dtype::f32, {n, out}, be_.dev()));
    // The copy is ordered after the product on the backend's stream.
    be_.copy_to_host(y, at, static_cast<size_t>(n * out) * sizeof(float));
    at += n * out;
  }
  be_.synchronize();  // one wait: a device backend's copies may still be in flight
}

void device_rows::embed(const linear_weight& table, const int32_t* ids, int64_t n, float* out) {
  if (n <= 0) return;
  const int64_t d = table.in_features();
  void* id = reserve(ids_, static_cast<size_t>(n) * sizeof(int32_t));
  void* od = reserve(out_, static_cast<size_t>(n * d) * sizeof(float));
  be_.copy_to_device(id, ids, static_cast<size_t>(n) * sizeof(int32_t));
  be_.embed(table, tensor_view::contiguous(id, dtype::i32, {n}, be_.dev()),
            tensor_view::contiguous(od, dtype::f32, {n, d}, be_.dev()));
  be_.copy_to_host(out, od, static_cast<size_t>(n * d) * sizeof(float));
  be_.synchronize();
}

void device_rows::to_host(const tensor_view& v, float* out) {
  if (v.type != dtype::f32 || v.ndim != 2 || v.strides[1] != 1 || v.strides[0] < v.shape[1])
    throw error("drafter.dflash2: a tap is not [n, hidden] f32 rows (" + std::string(name(v.type)) + ", " +
                std::to_string(v.ndim) + " dims)");
  const int64_t n = v.shape[0], d = v.shape[1];
  if (v.strides[0] == d) {
    be_.copy_to_host(out, v.data, static_cast<size_t>(n * d) * sizeof(float));
  } else {
    for (int64_t r = 0; r < n; ++r)
      be_.copy_to_host(out + r * d, static_cast<const float*>(v.data) + r * v.strides[0],
                       static_cast<size_t>(d) * sizeof(float));
  }
  be_.synchronize();
}

}  // namespace tandem::dflash2
