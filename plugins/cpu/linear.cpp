// Output rows are cut into chunks handed out by the pool; inside a chunk the activation
// rows go by tiles of max_tile, so each weight row is read once per tile and a chunk of
// weight rows stays in L1 across the tiles.
#include "linear.hpp"

#include <algorithm>
#include <vector>

#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cpu {
namespace {

int64_t chunk_rows(int64_t out, int threads) {
  const int64_t per = out / (int64_t{threads} * 8);
  return std::clamp<int64_t>(per, 8, 256);
}

template <class DotTile>
void over_chunks(const cpu_linear& w, const rows_view& y, int64_t n, thread_pool& pool,
                 DotTile dot_tile) {
  const int64_t out = w.out_features();
  const int64_t chunk = chunk_rows(out, pool.size());
  const int64_t n_chunks = (out + chunk - 1) / chunk;
  pool.parallel_for(n_chunks, [&](int64_t c) {
    const int64_t o0 = c * chunk, o1 = std::min(out, o0 + chunk);
    float tmp[max_tile];
    for (int64_t t = 0; t < n; t += max_tile) {
      const int rows = static_cast<int>(std::min<int64_t>(max_tile, n - t));
      for (int64_t o = o0; o < o1; ++o) {
        dot_tile(w.row(o), t, rows, tmp);
        for (int r = 0; r < rows; ++r) y.row(t + r)[o] = tmp[r];
      }
    }
  });
}

void quantized(const cpu_linear& w, const rows_view& x, const rows_view& y,
               const kernel_table& k, thread_pool& pool, linear_scratch& s) {
  const int64_t nb = w.in_features() / 32;
  s.q8.resize(static_cast<size_t>(x.rows * nb));
  q8_block* a = s.q8.data();
  const int64_t per_task = std::max<int64_t>(1, 4096 / w.in_features());
  pool.parallel_for((x.rows + per_task - 1) / per_task, [&](int64_t b) {
    for (int64_t i = b * per_task; i < std::min(x.rows, (b + 1) * per_task); ++i) {
      k.quantize_q8(x.row(i), a + i * nb, w.in_features());
    }
  });
  auto fn = w.storage_type() == dtype::q4_0 ? k.dot_q4_0
            : w.storage_type() == dtype::q4_1 ? k.dot_q4_1 : k.dot_q8_0;
  over_chunks(w, y, x.rows, pool, [&](const uint8_t* wrow, int64_t t, int rows, float* out) {
    fn(wrow, a + t * nb, nb, rows, nb, out);
  });
}

void dequantized(const cpu_linear& w, const rows_view& x, const rows_view& y,
                 const kernel_table& k, thread_pool& pool) {
  const int64_t in = w.in_features();
  over_chunks(w, y, x.rows, pool, [&](const uint8_t* wrow, int64_t t, int rows, float* out) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(in));
    dequantize_row(w.storage_type(), wrow, row.data(), in);
    k.dot_f32(row.data(), x.row(t), x.stride, rows, in, out);
  });
}

}  // namespace

void run_linear(const cpu_linear& w, const rows_view& x, const rows_view& y,
                const kernel_table& k, thread_pool& pool, linear_scratch& scratch,
                bool float_dots) {
  if (x.rows == 0) return;
  const int64_t in = w.in_features();
  switch (w.storage_type()) {
    case dtype::q4_0:
    case dtype::q4_1:
    case dtype::q8_0:
      if (float_dots) return dequantized(w, x, y, k, pool);
      return quantized(w, x, y, k, pool, scratch);
    case dtype::f32:
      return over_chunks(w, y, x.rows, pool, [&](const uint8_t* wrow, int64_t t, int rows, float* out) {
        k.dot_f32(reinterpret_cast<const float*>(wrow), x.row(t), x.stride, rows, in, out);
      });
    case dtype::f16:
      return over_chunks(w, y, x.rows, pool, [&](const uint8_t* wrow, int64_t t, int rows, float* out) {
        k.dot_f16(reinterpret_cast<const uint16_t*>(wrow), x.row(t), x.stride, rows, in, out);
      });
    default:
      break;  // load_linear admits no other type
  }
}

}  // namespace tandem::cpu
