// The host defaults of backend's small ops (attention_full, dynamic_conv, top_k): copy the
// inputs to host memory, compute in f32, copy the result back. On backend.cpu the copies
// are memcpy; a device backend pays one wait per op until it overrides them with kernels.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "tandem/backend.hpp"
#include "tandem/error.hpp"

namespace tandem {

namespace {

[[noreturn]] void bad(const backend& be, const char* op, const std::string& why) {
  throw error(be.describe() + ": " + op + ": " + why);
}

// The contiguous f32 (or i32) view's elements in host memory.
template <class T>
std::vector<T> fetch(backend& be, const tensor_view& v, const char* op, const char* what) {
  if (!v.is_contiguous()) bad(be, op, std::string(what) + " must be contiguous");
  std::vector<T> host(static_cast<size_t>(v.numel()));
  be.copy_to_host(host.data(), v.data, host.size() * sizeof(T));
  return host;
}

template <class T>
void store(backend& be, const tensor_view& v, const std::vector<T>& host, const char* op, const char* what) {
  if (!v.is_contiguous()) bad(be, op, std::string(what) + " must be contiguous");
  be.copy_to_device(v.data, host.data(), host.size() * sizeof(T));
}

void expect_type(const backend& be, const tensor_view& v, dtype t, const char* op, const char* what) {
  if (v.type != t)
    bad(be, op, std::string(what) + " must be " + std::string(name(t)) + ", not " + std::string(name(v.type)));
}

// Eight partial sums so the compiler can keep them in one vector register (a single
// running f32 sum cannot be reordered without -ffast-math).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

void backend::attention_full(tensor_view q, tensor_view k, tensor_view v, float scale, tensor_view out) {
  const char* op = "attention_full";
  for (const tensor_view* t : {&q, &k, &v, &out}) expect_type(*this, *t, dtype::f32, op, "every operand");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || out.ndim != 3) bad(*this, op, "q, k, v and out must be 3-d");
  const int64_t n = q.shape[0], heads = q.shape[1], D = q.shape[2], m = k.shape[0], kv_heads = k.shape[1];
  if (k.shape[2] != D || v.shape[0] != m || v.shape[1] != kv_heads || v.shape[2] != D)
    bad(*this, op, "k and v must both be [m, kv_heads, " + std::to_string(D) + "]");
  if (out.shape[0] != n || out.shape[1] != heads || out.shape[2] != D) bad(*this, op, "out must be q's shape");
  if (m < 1 || kv_heads < 1 || heads % kv_heads != 0)
    bad(*this, op, "needs at least one key and heads (" + std::to_string(heads) + ") a multiple of kv_heads (" +
                       std::to_string(kv_heads) + ")");
  const std::vector<float> qh = fetch<float>(*this, q, op, "q"), kh = fetch<float>(*this, k, op, "k"),
                           vh = fetch<float>(*this, v, op, "v");
  synchronize();
  std::vector<float> oh(static_cast<size_t>(out.numel())), p(static_cast<size_t>(m));
  const int64_t per_kv = heads / kv_heads, kv_width = kv_heads * D;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t off = (h / per_kv) * D;
      const float* qr = qh.data() + (r * heads + h) * D;
      float top = -INFINITY;
      for (int64_t j = 0; j < m; ++j) top = std::max(top, p[static_cast<size_t>(j)] = dot(qr, kh.data() + j * kv_width + off, D) * scale);
      float sum = 0;
      for (int64_t j = 0; j < m; ++j) sum += p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - top);
      float* o = oh.data() + (r * heads + h) * D;
      for (int64_t j = 0; j < m; ++j) {
        const float w = p[static_cast<size_t>(j)] / sum;
        const float* vr = vh.data() + j * kv_width + off;
        for (int64_t c = 0; c < D; ++c) o[c] += w * vr[c];
      }
    }
  store(*this, out, oh, op, "out");
  synchronize();  // the host vector dies here
}

void backend::dynamic_conv(tensor_view x, tensor_view taps, tensor_view base, tensor_view out) {
  const char* op = "dynamic_conv";
  for (const tensor_view* t : {&x, &taps, &base, &out}) expect_type(*this, *t, dtype::f32, op, "every operand");
  const int64_t n = x.rows(), d = x.cols(), groups = taps.cols() / 2;
  if (taps.rows() != n || taps.cols() % 2 != 0 || groups < 1 || d % groups != 0)
    bad(*this, op, "taps must be [n, 2G] with G dividing x's " + std::to_string(d) + " columns");
  if (base.numel() != 2 * groups) bad(*this, op, "base must be [" + std::to_string(groups) + ", 2]");
  if (out.rows() != n || out.cols() != d) bad(*this, op, "out must be x's shape");
  if (out.data == x.data) bad(*this, op, "out must not alias x");
  const std::vector<float> xh = fetch<float>(*this, x, op, "x"), th = fetch<float>(*this, taps, op, "taps"),
                           bh = fetch<float>(*this, base, op, "base");
  synchronize();
  std::vector<float> oh(static_cast<size_t>(n * d));
  const int64_t size = d / groups;
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = xh.data() + r * d;
    const float* prev = r > 0 ? xr - d : nullptr;  // x[-1] = 0
    const float* tr = th.data() + r * 2 * groups;
    float* o = oh.data() + r * d;
    for (int64_t g = 0; g < groups; ++g) {
      const float w0 = bh[static_cast<size_t>(2 * g)] + tr[2 * g], w1 = bh[static_cast<size_t>(2 * g + 1)] + tr[2 * g + 1];
      for (int64_t c = g * size; c < (g + 1) * size; ++c) o[c] = w0 * xr[c] + (prev ? w1 * prev[c] : 0.0f);
    }
  }
  store(*this, out, oh, op, "out");
  synchronize();
}

void backend::top_k(tensor_view x, int k, tensor_view ids, tensor_view values) {
  const char* op = "top_k";
  expect_type(*this, x, dtype::f32, op, "x");
  expect_type(*this, ids, dtype::i32, op, "ids");
  expect_type(*this, values, dtype::f32, op, "values");
  const int64_t n = x.rows(), m = x.cols();
  if (k < 1 || k > m) bad(*this, op, "k is " + std::to_string(k) + ", not 1.." + std::to_string(m));
  if (ids.rows() != n || ids.cols() != k || values.rows() != n || values.cols() != k)
    bad(*this, op, "ids and values must be [" + std::to_string(n) + ", " + std::to_string(k) + "]");
  const std::vector<float> xh = fetch<float>(*this, x, op, "x");
  synchronize();
  std::vector<int32_t> ih(static_cast<size_t>(n * k));
  std::vector<float> vh(static_cast<size_t>(n * k));
  std::vector<int32_t> order(static_cast<size_t>(m));
  for (int64_t r = 0; r < n; ++r) {
    const float* row = xh.data() + r * m;
    // NaN breaks a strict weak order (and with it std::nth_element): it counts as -inf.
    const auto key = [&](int32_t c) { return std::isnan(row[c]) ? -std::numeric_limits<float>::infinity() : row[c]; };
    const auto before = [&](int32_t a, int32_t b) {
      const float ka = key(a), kb = key(b);
      return ka > kb || (ka == kb && a < b);
    };
    std::iota(order.begin(), order.end(), 0);
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), before);
    std::sort(order.begin(), order.begin() + k, before);
    for (int j = 0; j < k; ++j) {
      ih[static_cast<size_t>(r * k + j)] = order[static_cast<size_t>(j)];
      vh[static_cast<size_t>(r * k + j)] = row[order[static_cast<size_t>(j)]];
    }
  }
  store(*this, ids, ih, op, "ids");
  store(*this, values, vh, op, "values");
  synchronize();
}

}  // namespace tandem
