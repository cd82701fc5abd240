#pragma once
// A non-owning view of a tensor: how tensors cross plugin seams.
//
// Shapes are row-major, outermost dimension first (numpy order): a linear weight of
// `out` rows of `in` elements is {out, in}. Strides are in elements (in blocks for
// quantized types, which are only ever contiguous along the last dimension).
//
//   float buf[6];
//   auto v = tensor_view::contiguous(buf, dtype::f32, {2, 3});  // v.at<float>(1, 2)
#include <array>
#include <cassert>
#include <cstdint>
#include <initializer_list>

#include "tandem/device.hpp"
#include "tandem/dtype.hpp"

namespace tandem {

struct tensor_view {
  static constexpr int max_dims = 4;

  void* data = nullptr;
  device dev = cpu_device;
  dtype type = dtype::f32;
  int ndim = 0;
  std::array<int64_t, max_dims> shape{};
  std::array<int64_t, max_dims> strides{};

  static tensor_view contiguous(void* data, dtype type, std::initializer_list<int64_t> dims,
                                device dev = cpu_device) {
    tensor_view v;
    v.data = data;
    v.dev = dev;
    v.type = type;
    v.ndim = static_cast<int>(dims.size());
    assert(v.ndim <= max_dims);
    int i = 0;
    for (int64_t d : dims) v.shape[i++] = d;
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
      v.strides[d] = stride;
      stride *= d == v.ndim - 1 ? v.shape[d] / traits(type).block_elems : v.shape[d];
    }
    return v;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= shape[d];
    return n;
  }
  int64_t rows() const { return ndim == 0 ? 1 : numel() / shape[ndim - 1]; }
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }

  bool is_contiguous() const {
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && strides[d] != stride) return false;
      stride *= d == ndim - 1 ? shape[d] / traits(type).block_elems : shape[d];
    }
    return true;
  }

  template <class T> T* ptr() const { return static_cast<T*>(data); }

  template <class T> T& at(int64_t i0) const { return ptr<T>()[i0 * strides[0]]; }
  template <class T> T& at(int64_t i0, int64_t i1) const {
    return ptr<T>()[i0 * strides[0] + i1 * strides[1]];
  }
  template <class T> T& at(int64_t i0, int64_t i1, int64_t i2) const {
    return ptr<T>()[i0 * strides[0] + i1 * strides[1] + i2 * strides[2]];
  }
};

}  // namespace tandem
