// One linear layer to EXL3. See quantize_linear.hpp; the steps follow exl3.md §5.
#include "tandem_exl3/quantize_linear.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "tandem/error.hpp"
#include "tandem_exl3/hadamard.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3/trellis.hpp"
#include "tandem_exl3/viterbi.hpp"

namespace tandem::exl3 {
namespace {

constexpr double codebook_scale = 1.24371088;  // the 3INST RMS rows are normalized to

using tile_id = std::pair<int, int>;

// Tile (ti, tj) of W [k][n] in trellis position order.
void gather_tile(const float* w, int n, int ti, int tj, float* out) {
  for (int p = 0; p < 256; ++p) {
    const auto [r, c] = position_to_rc(p);
    out[p] = w[static_cast<size_t>(16 * ti + r) * n + 16 * tj + c];
  }
}

// W ← Hb·W (128-blocks along k): each column through the transform.
void hadamard_rows_side(std::vector<float>& w, int k, int n) {
  std::vector<float> col(k);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < k; ++i) col[i] = w[static_cast<size_t>(i) * n + j];
    hadamard128(col.data(), k, 1.0f / std::sqrt(128.0f));
    for (int i = 0; i < k; ++i) w[static_cast<size_t>(i) * n + j] = col[i];
  }
}

// The tiles the global-scale search codes: a wrapped diagonal three tiles wide (every tile
// row and column), plus the max(8, count/16) tiles of highest and of lowest RMS; evenly
// thinned to at most `cap`.
std::vector<tile_id> scale_sample(const std::vector<float>& w, int k, int n, int cap) {
  const int tk = k / 16, tn = n / 16;
  std::set<tile_id> pick;
  for (int i = 0; i < std::max(tk, tn); ++i)
    for (int d = 0; d < 3; ++d) pick.insert({i % tk, (i + d) % tn});
  std::vector<std::pair<double, tile_id>> by_rms;
  float buf[256];
  for (int i = 0; i < tk; ++i)
    for (int j = 0; j < tn; ++j) {
      gather_tile(w.data(), n, i, j, buf);
      double s = 0;
      for (float x : buf) s += double{x} * x;
      by_rms.push_back({s, {i, j}});
    }
  std::sort(by_rms.begin(), by_rms.end());
  const size_t extremes = std::min(by_rms.size(), std::max<size_t>(8, by_rms.size() / 16));
  for (size_t i = 0; i < extremes; ++i) {
    pick.insert(by_rms[i].second);
    pick.insert(by_rms[by_rms.size() - 1 - i].second);
  }
  std::vector<tile_id> all(pick.begin(), pick.end()), out;
  if (static_cast<int>(all.size()) <= cap) return all;
  for (int i = 0; i < cap; ++i) out.push_back(all[static_cast<size_t>(i) * all.size() / cap]);
  return out;
}

// Squared error of coding the tiles at scale g, measured at scale 1: sum((g·w - q)^2) / g^2.
double scale_error(const tile_coder& coder, const std::vector<float>& tiles, double g,
                   const quant_options& o) {
  const size_t count = tiles.size() / 256;
  std::vector<float> in(tiles.size()), q(tiles.size());
  std::vector<uint16_t> st(tiles.size());
  for (size_t i = 0; i < tiles.size(); ++i) in[i] = static_cast<float>(g * tiles[i]);
  if (o.encoder) o.encoder(coder, in.data(), count, st.data(), q.data());
  else encode_tiles(coder, in.data(), count, st.data(), q.data(), o.threads);
  double e = 0;
  for (size_t i = 0; i < tiles.size(); ++i) e += (double{in[i]} - q[i]) * (double{in[i]} - q[i]);
  return e / (g * g);
}

// §5.5e: g over {0.1, 0.3, ..., 1.9} on a third of the sample, then five points 0.075 apart
// around the best on the whole sample, then the vertex of the parabola through the best
// and its neighbours (kept within them).
double search_scale(const std::vector<float>& w, int k, int n, const tile_coder& coder,
                    const quant_options& o) {
  const std::vector<tile_id> sample = scale_sample(w, k, n, o.max_scale_tiles);
  std::vector<float> all(sample.size() * 256), third;
  for (size_t i = 0; i < sample.size(); ++i) {
    gather_tile(w.data(), n, sample[i].first, sample[i].second, all.data() + 256 * i);
    if (i % 3 == 0) third.insert(third.end(), all.begin() + 256 * i, all.begin() + 256 * (i + 1));
  }
  double best_g = 1.0, best_e = INFINITY;
  for (int i = 0; i < 10; ++i) {
    const double g = 0.1 + 0.2 * i, e = scale_error(coder, third, g, o);
    if (e < best_e) best_e = e, best_g = g;
  }
  double xs[5], es[5];
  int bi = 0;
  for (int i = 0; i < 5; ++i) {
    xs[i] = best_g + 0.075 * (i - 2);
    es[i] = xs[i] > 0 ? scale_error(coder, all, xs[i], o) : INFINITY;
    if (es[i] < es[bi]) bi = i;
  }
  if (bi == 0 || bi == 4) return xs[bi];
  const double curv = es[bi - 1] - 2 * es[bi] + es[bi + 1];
  if (!(curv > 0)) return xs[bi];
  const double x = xs[bi] - 0.075 * (es[bi + 1] - es[bi - 1]) / (2 * curv);
  return std::clamp(x, xs[bi - 1], xs[bi + 1]);
}

// tr(AᵀHA) for A [k][n] (the first k0 x n0 of it), H [k][k] padded.
double quad_trace(const std::vector<double>& h, int k, const std::vector<double>& a, int n) {
  double t = 0;
  std::vector<double> ha(n);
  for (int i = 0; i < k; ++i) {
    std::fill(ha.begin(), ha.end(), 0.0);
    for (int p = 0; p < k; ++p) {
      const double hv = h[static_cast<size_t>(i) * k + p];
      if (hv == 0.0) continue;
      const double* ap = a.data() + static_cast<size_t>(p) * n;
      for (int j = 0; j < n; ++j) ha[j] += hv * ap[j];
    }
    const double* ai = a.data() + static_cast<size_t>(i) * n;
    for (int j = 0; j < n; ++j) t += ai[j] * ha[j];
  }
  return t;
}

}  // namespace

quantized_linear quantize_linear(const float* w0, int k0, int n0, const prepared_hessian& hp,
                                 uint64_t seed, uint64_t sv_stream, const quant_options& o) {
  if (o.bits < 1 || o.bits > 8) throw error("exl3 quantize: bits must be 1..8, got " + std::to_string(o.bits));
  if (k0 != hp.k0 || n0 <= 0) throw error("exl3 quantize: weight shape does not match the Hessian");
  const int k = hp.k, n = static_cast<int>((n0 + 127) / 128 * 128);
  std::vector<float> w(static_cast<size_t>(k) * n, 0.0f);
  for (int i = 0; i < k0; ++i)
    for (int j = 0; j < n0; ++j) {
      const float v = w0[static_cast<size_t>(i) * n0 + j];
      if (!std::isfinite(v)) throw error("exl3 quantize: the weight holds inf or NaN");
      w[static_cast<size_t>(i) * n + j] = v;
    }
  std::vector<double> su(hp.su.begin(), hp.su.end()), sv(n);
  for (int j = 0; j < n; ++j) sv[j] = random_sign(seed, sv_stream, j);

  // a. Output channel scales.
  std::vector<double> oc(n, 0.0);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < n; ++j) oc[j] += double{w[static_cast<size_t>(i) * n + j]} * w[static_cast<size_t>(i) * n + j];
  double oc_sum = 0;
  int nonzero = 0;
  for (double& v : oc) {
    v = std::sqrt(v / k);
    if (v > 0) oc_sum += v, ++nonzero;
  }
  const bool use_oc = o.scales == out_scales::always ||
                      (o.scales == out_scales::automatic && hp.out_scales_auto);
  for (int j = 0; j < n; ++j) {
    if (use_oc) sv[j] *= oc[j] > 0 ? oc[j] / (oc_sum / std::max(nonzero, 1)) : 0.1;
    for (int i = 0; i < k; ++i) w[static_cast<size_t>(i) * n + j] = static_cast<float>(w[static_cast<size_t>(i) * n + j] / sv[j]);
  }
  for (int j = 0; j < n; ++j)
    if (oc[j] == 0) sv[j] = 0;
  // b. W ← W·Hb.  c. Input channel scales.  d. W ← Hb·W.
  hadamard128(w.data(), static_cast<int64_t>(k) * n, 1.0f / std::sqrt(128.0f));
  for (int i = 0; i < k; ++i) {
    float* row = w.data() + static_cast<size_t>(i) * n;
    double s = 0;
    for (int j = 0; j < n; ++j) s += double{row[j]} * row[j];
    const double ic = s > 0 ? std::sqrt(s / n) : 0.1;
    su[i] = su[i] * ic / -codebook_scale + 1e-10;
    for (int j = 0; j < n; ++j) row[j] = static_cast<float>(row[j] / su[i]);
  }
  hadamard_rows_side(w, k, n);
  // e. Global scale.
  const tile_coder coder(o.cb, o.bits);
  const double g = o.scale_search ? search_scale(w, k, n, coder, o) : 1.0;
  for (float& v : w) v = static_cast<float>(v * g);
  for (double& s : su) s /= g;

  // LDLQ with the tile coder on each 16-row block.
  quantized_linear out;
  out.k = k, out.n = n, out.bits = o.bits, out.cb = o.cb, out.global_scale = static_cast<float>(g);
  const int tn = n / 16;
  std::vector<uint16_t> states(static_cast<size_t>(k / 16) * tn * 256);
  std::vector<float> q(static_cast<size_t>(k) * n), tin(static_cast<size_t>(tn) * 256),
      tq(tin.size());
  const block_quantizer code_block = [&](int row0, const float* target, float* qb) {
    for (int j = 0; j < tn; ++j) gather_tile(target, n, 0, j, tin.data() + 256 * j);
    uint16_t* st = states.data() + static_cast<size_t>(row0 / 16) * tn * 256;
    if (o.encoder) o.encoder(coder, tin.data(), tn, st, tq.data());
    else encode_tiles(coder, tin.data(), tn, st, tq.data(), o.threads);
    for (int j = 0; j < tn; ++j)
      for (int p = 0; p < 256; ++p) {
        const auto [r, c] = position_to_rc(p);
        qb[static_cast<size_t>(r) * n + 16 * j + c] = tq[256 * j + p];
      }
  };
  ldlq(w.data(), k, n, hp.fallback ? nullptr : hp.L.data(), code_block, q.data());

  // Pack and store.
  out.trellis.resize(states.size() / 256 * 16 * o.bits);
  for (size_t t = 0; t < states.size() / 256; ++t)
    pack_tile_states(states.data() + 256 * t, o.bits, out.trellis.data() + t * 16 * o.bits);
  out.suh.resize(k), out.svh.resize(n);
  for (int i = 0; i < k; ++i) out.suh[i] = double_to_half(su[i]);
  for (int j = 0; j < n; ++j) out.svh[j] = double_to_half(sv[j]);

  // Decode what was stored (original basis) and measure the proxy error there.
  std::vector<float> rec(static_cast<size_t>(k) * n);
  const exl3_matrix m{o.bits, o.cb, k, n, out.trellis.data(), out.suh.data(), out.svh.data(), nullptr};
  reconstruct_f32(m, rec.data());
  out.w_hat.resize(static_cast<size_t>(k0) * n0);
  std::vector<double> e(static_cast<size_t>(k) * n, 0.0), wd(e.size(), 0.0);
  for (int i = 0; i < k0; ++i)
    for (int j = 0; j < n0; ++j) {
      const size_t a = static_cast<size_t>(i) * n + j;
      out.w_hat[static_cast<size_t>(i) * n0 + j] = rec[a];
      wd[a] = w0[static_cast<size_t>(i) * n0 + j];
      e[a] = wd[a] - rec[a];
    }
  const double den = quad_trace(hp.h, k, wd, n);
  out.proxy_error = den > 0 ? quad_trace(hp.h, k, e, n) / den : 0.0;
  return out;
}

}  // namespace tandem::exl3
