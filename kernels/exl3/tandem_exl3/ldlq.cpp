// Hessian preparation, block LDL and LDLQ for the EXL3 quantizer. See ldlq.hpp.
#include "tandem_exl3/ldlq.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tandem/error.hpp"

namespace tandem::exl3 {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int64_t pad128(int64_t x) { return (x + 127) / 128 * 128; }

double mean_diag(const std::vector<double>& h, int k) {
  double s = 0;
  for (int i = 0; i < k; ++i) s += h[static_cast<size_t>(i) * k + i];
  return s / k;
}

// x <- x · inv(T) for a row vector x and a lower-triangular block T (row-major, `ld` stride):
// (x·T)_m = sum_{i >= m} x_i T[i][m], solved from the last element up.
void solve_right_lower(double* x, const double* t, int ld, int b) {
  for (int m = b - 1; m >= 0; --m) {
    double s = x[m];
    for (int i = m + 1; i < b; ++i) s -= x[i] * t[static_cast<size_t>(i) * ld + m];
    x[m] = s / t[static_cast<size_t>(m) * ld + m];
  }
}

}  // namespace

float random_sign(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t r = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ i);
  return (r >> 63) ? -1.0f : 1.0f;
}

void hadamard128_f64(double* x, int64_t n) {
  if (n % 128) throw error("hadamard128_f64: length " + std::to_string(n) + " is not a multiple of 128");
  const double scale = 1.0 / std::sqrt(128.0);
  for (int64_t c = 0; c < n; c += 128) {
    double* v = x + c;
    for (int h = 1; h < 128; h <<= 1)
      for (int i = 0; i < 128; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const double a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int i = 0; i < 128; ++i) v[i] *= scale;
  }
}

bool cholesky(std::vector<double>& c, const double* h, int k) {
  c.assign(static_cast<size_t>(k) * k, 0.0);
  for (int j = 0; j < k; ++j) {
    double* cj = c.data() + static_cast<size_t>(j) * k;
    double d = h[static_cast<size_t>(j) * k + j];
    for (int p = 0; p < j; ++p) d -= cj[p] * cj[p];
    if (!(d > 0.0) || !std::isfinite(d)) return false;
    cj[j] = std::sqrt(d);
    for (int i = j + 1; i < k; ++i) {
      double* ci = c.data() + static_cast<size_t>(i) * k;
      double s = h[static_cast<size_t>(i) * k + j];
      for (int p = 0; p < j; ++p) s -= ci[p] * cj[p];
      ci[j] = s / cj[j];
    }
  }
  return true;
}

std::vector<double> block_ldl(std::vector<double> h, int k, double retry_damp, int block,
                              std::vector<double>* d_blocks) {
  if (block <= 0 || k % block) throw error("block_ldl: size " + std::to_string(k) + " is not a multiple of the block");
  std::vector<double> c;
  int attempt = 0;
  while (!cholesky(c, h.data(), k)) {
    if (++attempt > 10) throw error("block_ldl: the Hessian is not positive definite after 10 damping retries");
    for (int i = 0; i < k; ++i) h[static_cast<size_t>(i) * k + i] += retry_damp;
  }
  const int nb = k / block;
  if (d_blocks) d_blocks->assign(static_cast<size_t>(nb) * block * block, 0.0);
  std::vector<double> diag(static_cast<size_t>(block) * block);
  for (int jb = 0; jb < nb; ++jb) {
    const int j0 = jb * block;
    for (int a = 0; a < block; ++a)
      for (int b = 0; b < block; ++b) diag[a * block + b] = c[static_cast<size_t>(j0 + a) * k + j0 + b];
    if (d_blocks)
      for (int a = 0; a < block; ++a)
        for (int b = 0; b < block; ++b) {
          double s = 0;
          for (int p = 0; p < block; ++p) s += diag[a * block + p] * diag[b * block + p];
          (*d_blocks)[(static_cast<size_t>(jb) * block + a) * block + b] = s;
        }
    for (int r = j0; r < k; ++r) {
      double* row = c.data() + static_cast<size_t>(r) * k + j0;
      if (r < j0 + block) std::fill(row, row + block, 0.0);  // the unit diagonal block, dropped
      else solve_right_lower(row, diag.data(), block, block);
    }
  }
  return c;
}

prepared_hessian prepare_hessian(const double* h0, int k0, uint64_t seed) {
  if (k0 <= 0) throw error("prepare_hessian: empty input dimension");
  prepared_hessian p;
  p.k0 = k0;
  p.k = static_cast<int>(pad128(k0));
  const int k = p.k;
  p.su.resize(k);
  for (int i = 0; i < k; ++i) p.su[i] = random_sign(seed, 0, i);
  p.h.assign(static_cast<size_t>(k) * k, 0.0);
  p.fallback = h0 == nullptr;
  if (p.fallback) {
    for (int i = 0; i < k; ++i) p.h[static_cast<size_t>(i) * k + i] = 1.0;
  } else {
    for (int i = 0; i < k0; ++i)
      std::copy(h0 + static_cast<size_t>(i) * k0, h0 + static_cast<size_t>(i + 1) * k0,
                p.h.begin() + static_cast<size_t>(i) * k);
  }
  for (double v : p.h)
    if (!std::isfinite(v)) throw error("prepare_hessian: the Hessian holds inf or NaN");
  // The "auto" out-scales rule looks at the spread of sqrt(diag H).
  std::vector<double> sd(k0);
  for (int i = 0; i < k0; ++i) sd[i] = std::sqrt(std::max(0.0, p.h[static_cast<size_t>(i) * k + i]));
  std::sort(sd.begin(), sd.end(), std::greater<>());
  const double total = std::accumulate(sd.begin(), sd.end(), 0.0);
  const size_t top = std::max<size_t>(1, sd.size() / 50);
  p.out_scales_auto = total <= 0 || std::accumulate(sd.begin(), sd.begin() + top, 0.0) < 0.15 * total;
  if (p.fallback) return p;  // L = 0: no feedback

  std::vector<double> hr = p.h;
  const double damp = sigma_reg * mean_diag(hr, k);
  for (int i = 0; i < k; ++i) hr[static_cast<size_t>(i) * k + i] += damp;
  // Hb·diag(su)·H·diag(su)·Hb: signs, then rows, then (by symmetry) columns via a transpose.
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) hr[static_cast<size_t>(i) * k + j] *= p.su[i] * p.su[j];
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < k; ++i) hadamard128_f64(hr.data() + static_cast<size_t>(i) * k, k);
    for (int i = 0; i < k; ++i)
      for (int j = i + 1; j < k; ++j) std::swap(hr[static_cast<size_t>(i) * k + j], hr[static_cast<size_t>(j) * k + i]);
  }
  p.L = block_ldl(std::move(hr), k, 2 * damp);
  return p;
}

void ldlq(const float* w, int k, int n, const double* L, const block_quantizer& quantize,
          float* q) {
  if (k % 16 || n % 16) throw error("ldlq: dimensions must be multiples of 16");
  std::vector<float> err(static_cast<size_t>(k) * n, 0.0f), target(16 * static_cast<size_t>(n));
  std::vector<double> acc(n);
  for (int b = k - 16; b >= 0; b -= 16) {
    for (int r = 0; r < 16; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      if (L)
        for (int i = b + 16; i < k; ++i) {
          const double l = L[static_cast<size_t>(i) * k + b + r];
          if (l == 0.0) continue;
          const float* e = err.data() + static_cast<size_t>(i) * n;
          for (int j = 0; j < n; ++j) acc[j] += l * e[j];
        }
      const float* wr = w + static_cast<size_t>(b + r) * n;
      for (int j = 0; j < n; ++j) target[static_cast<size_t>(r) * n + j] = static_cast<float>(wr[j] + acc[j]);
    }
    float* qb = q + static_cast<size_t>(b) * n;
    quantize(b, target.data(), qb);
    for (size_t i = 0; i < 16 * static_cast<size_t>(n); ++i)
      err[static_cast<size_t>(b) * n + i] = w[static_cast<size_t>(b) * n + i] - qb[i];
  }
}

}  // namespace tandem::exl3
