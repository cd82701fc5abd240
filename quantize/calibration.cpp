// See calibration.hpp.
#include "calibration.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "tandem/error.hpp"
#include "tandem_ref/ops.hpp"

namespace tandem::quantize {

void matmul(const float* x, int64_t T, int k, const float* w, int n, float* y, int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto work = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yr = y + t * n;
      std::fill(yr, yr + n, 0.0f);
      for (int i = 0; i < k; ++i) {
        const float xv = x[t * k + i];
        const float* wr = w + static_cast<int64_t>(i) * n;
        for (int j = 0; j < n; ++j) yr[j] += xv * wr[j];
      }
    }
  };
  std::vector<std::jthread> pool;
  const int64_t chunk = (T + threads - 1) / threads;
  for (int64_t t0 = 0; t0 < T; t0 += chunk) pool.emplace_back(work, t0, std::min(T, t0 + chunk));
}

calibration_state calibration_state::from_text(const std::filesystem::path& file, const tokenizer& tok,
                                               const std::vector<float>& embd, int d, int rows, int cols) {
  calibration_state c;
  c.d_ = d;
  if (file.empty()) return c;
  std::ifstream f(file, std::ios::binary);
  if (!f) throw error("cannot read calibration file " + file.string());
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, false);
  } catch (const error& e) {
    throw error("calibration file " + file.string() + ": " + e.what());
  }
  if (ids.size() < 2) throw error("calibration file " + file.string() + " has fewer than 2 tokens");
  c.row_len_ = std::min<int64_t>(cols, static_cast<int64_t>(ids.size()));
  c.n_rows_ = std::min<int64_t>(rows, static_cast<int64_t>(ids.size()) / c.row_len_);
  c.x_.resize(static_cast<size_t>(c.tokens()) * d);
  const int64_t vocab = static_cast<int64_t>(embd.size()) / d;
  for (int64_t t = 0; t < c.tokens(); ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) throw error("calibration token id out of the embedding's range");
    std::copy_n(embd.begin() + static_cast<int64_t>(ids[t]) * d, d, c.x_.begin() + t * d);
  }
  return c;
}

std::vector<float> calibration_state::normed(const std::vector<float>& w, float eps) const {
  std::vector<float> out(x_.size());
  if (!empty()) ref::rms_norm(x_.data(), w.data(), eps, tokens(), d_, out.data());
  return out;
}

exl3::prepared_hessian calibration_state::hessian(const std::vector<float>& a, int k, uint64_t seed) const {
  if (empty()) return exl3::prepare_hessian(nullptr, k, seed);
  std::vector<double> h(static_cast<size_t>(k) * k, 0.0);
  int64_t count = 0;
  for (int64_t t = 0; t < tokens(); ++t) {
    const float* r = a.data() + t * k;
    if (!std::all_of(r, r + k, [](float v) { return std::isfinite(v); })) continue;
    ++count;
    for (int i = 0; i < k; ++i) {
      const double ri = r[i];
      double* hi = h.data() + static_cast<size_t>(i) * k;
      for (int j = 0; j <= i; ++j) hi[j] += ri * r[j];
    }
  }
  if (count == 0) return exl3::prepare_hessian(nullptr, k, seed);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j <= i; ++j) {
      const double v = h[static_cast<size_t>(i) * k + j] / count;
      h[static_cast<size_t>(i) * k + j] = h[static_cast<size_t>(j) * k + i] = v;
    }
  return exl3::prepare_hessian(h.data(), k, seed);
}

std::vector<float> calibration_state::attention(const std::vector<float>& xn, const std::vector<float>& wq,
                                                const std::vector<float>& wk, const std::vector<float>& wv,
                                                const llama_hparams& hp, int threads) const {
  const int nh = hp.n_heads, nkv = hp.n_kv_heads, hd = hp.head_dim;
  const int64_t T = tokens();
  std::vector<float> out(static_cast<size_t>(T) * nh * hd);
  if (empty()) return out;
  std::vector<float> q(out.size()), k(static_cast<size_t>(T) * nkv * hd), v(k.size());
  matmul(xn.data(), T, d_, wq.data(), nh * hd, q.data(), threads);
  matmul(xn.data(), T, d_, wk.data(), nkv * hd, k.data(), threads);
  matmul(xn.data(), T, d_, wv.data(), nkv * hd, v.data(), threads);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t % row_len_);
  rope_params rp;
  rp.theta = hp.rope_theta;
  rp.rotary_dims = hp.rope_dims;
  rp.neox = true;  // HF row order (q/k un-permuted)
  ref::rope(q.data(), T, nh, hd, pos.data(), rp);
  ref::rope(k.data(), T, nkv, hd, pos.data(), rp);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> s(row_len_);
  for (int64_t r = 0; r < n_rows_; ++r)
    for (int64_t i = 0; i < row_len_; ++i)
      for (int h = 0; h < nh; ++h) {
        const int64_t t = r * row_len_ + i;
        const float* qv = q.data() + (t * nh + h) * hd;
        const int kh = h / (nh / nkv);
        float mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          const float* kv = k.data() + ((r * row_len_ + j) * nkv + kh) * hd;
          float dot = 0;
          for (int e = 0; e < hd; ++e) dot += qv[e] * kv[e];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - mx));
        float* o = out.data() + (t * nh + h) * hd;
        for (int64_t j = 0; j <= i; ++j) {
          const float p = static_cast<float>(s[j] / sum);
          const float* vv = v.data() + ((r * row_len_ + j) * nkv + kh) * hd;
          for (int e = 0; e < hd; ++e) o[e] += p * vv[e];
        }
      }
  return out;
}

std::vector<float> calibration_state::mlp_act(const std::vector<float>& xn, const std::vector<float>& wg,
                                              const std::vector<float>& wu, int d, int ffn, int threads) const {
  const int64_t T = tokens();
  std::vector<float> g(static_cast<size_t>(T) * ffn), u(g.size()), out(g.size());
  if (empty()) return out;
  matmul(xn.data(), T, d, wg.data(), ffn, g.data(), threads);
  matmul(xn.data(), T, d, wu.data(), ffn, u.data(), threads);
  ref::silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), out.data());
  return out;
}

void calibration_state::add_linear(const std::vector<float>& a, int k, const std::vector<float>& w, int n,
                                   int threads) {
  if (empty()) return;
  std::vector<float> y(static_cast<size_t>(tokens()) * n);
  matmul(a.data(), tokens(), k, w.data(), n, y.data(), threads);
  for (size_t i = 0; i < y.size(); ++i) x_[i] += y[i];
}

void calibration_state::save(const std::filesystem::path& p) const {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  const int64_t hdr[3] = {n_rows_, row_len_, d_};
  f.write(reinterpret_cast<const char*>(hdr), sizeof hdr);
  f.write(reinterpret_cast<const char*>(x_.data()), static_cast<std::streamsize>(x_.size() * sizeof(float)));
  if (!f) throw error("cannot write " + p.string());
}

void calibration_state::load(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  int64_t hdr[3] = {0, 0, 0};
  if (!f.read(reinterpret_cast<char*>(hdr), sizeof hdr) || hdr[0] < 0 || hdr[1] < 0 || hdr[2] <= 0)
    throw error("cannot resume: " + p.string() + " is missing or corrupt");
  n_rows_ = hdr[0], row_len_ = hdr[1], d_ = static_cast<int>(hdr[2]);
  x_.resize(static_cast<size_t>(tokens()) * d_);
  if (!f.read(reinterpret_cast<char*>(x_.data()), static_cast<std::streamsize>(x_.size() * sizeof(float))))
    throw error("cannot resume: " + p.string() + " is truncated");
}

}  // namespace tandem::quantize
