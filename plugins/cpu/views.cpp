#include "views.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem::cpu {
namespace {

[[noreturn]] void fail(const char* op, const char* arg, const std::string& what) {
  throw error(std::string("backend.cpu ") + op + ": " + arg + " " + what);
}

void check_host(const tensor_view& v, dtype want, const char* op, const char* arg) {
  if (v.dev != cpu_device) fail(op, arg, "is not in host memory");
  if (v.type != want) {
    fail(op, arg, "is " + std::string(name(v.type)) + ", expected " + std::string(name(want)));
  }
  if (v.ndim < 1 || v.ndim > tensor_view::max_dims) fail(op, arg, "has no shape");
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] < 0) fail(op, arg, "has a negative dimension");
  }
  if (v.data == nullptr && v.numel() > 0) fail(op, arg, "has no data");
}

template <class R, class T>
R collapse_rows(const tensor_view& v, dtype want, const char* op, const char* arg) {
  check_host(v, want, op, arg);
  R r{v.ptr<T>(), v.shape[0], 1, v.strides[0]};
  int64_t expect = 1;
  for (int d = v.ndim - 1; d >= 1; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expect) fail(op, arg, "is not contiguous within a row");
    expect *= v.shape[d];
  }
  r.cols = expect;
  if (r.rows > 1 && r.cols > 0 && r.stride < r.cols) fail(op, arg, "has overlapping rows");
  return r;
}

}  // namespace

rows_view f32_rows(const tensor_view& v, const char* op, const char* arg) {
  return collapse_rows<rows_view, float>(v, dtype::f32, op, arg);
}

i32_rows_view i32_rows(const tensor_view& v, const char* op, const char* arg) {
  return collapse_rows<i32_rows_view, int32_t>(v, dtype::i32, op, arg);
}

const float* f32_vector(const tensor_view& v, int64_t n, const char* op, const char* arg) {
  check_host(v, dtype::f32, op, arg);
  if (v.numel() != n) {
    fail(op, arg, "has " + std::to_string(v.numel()) + " elements, expected " + std::to_string(n));
  }
  if (!v.is_contiguous()) fail(op, arg, "is not contiguous");
  return v.ptr<float>();
}

const int32_t* i32_vector(const tensor_view& v, int64_t n, const char* op, const char* arg) {
  check_host(v, dtype::i32, op, arg);
  if (v.numel() != n) {
    fail(op, arg, "has " + std::to_string(v.numel()) + " elements, expected " + std::to_string(n));
  }
  if (!v.is_contiguous()) fail(op, arg, "is not contiguous");
  return v.ptr<int32_t>();
}

void check_same_shape(const rows_view& a, const rows_view& b, const char* op, const char* arg) {
  if (a.rows != b.rows || a.cols != b.cols) {
    fail(op, arg, "is [" + std::to_string(b.rows) + ", " + std::to_string(b.cols) +
                      "], expected [" + std::to_string(a.rows) + ", " + std::to_string(a.cols) + "]");
  }
}

}  // namespace tandem::cpu
