// The ops of backend.cpu: argument checks, then the threaded kernels.
#include <string>

#include "attention.hpp"
#include "cpu_backend.hpp"
#include "exl3_linear.hpp"
#include "cpu_weights.hpp"
#include "tandem/error.hpp"
#include "tandem_ref/sampling.hpp"

namespace tandem::cpu {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw error(std::string("backend.cpu ") + op + ": " + what);
}

const cpu_linear& as_cpu(const linear_weight& w, const char* op) {
  const auto* c = dynamic_cast<const cpu_linear*>(&w);
  if (c == nullptr) fail(op, "the weight was not loaded by backend.cpu");
  return *c;
}

void check_cols(const rows_view& v, int64_t cols, const char* op, const char* arg) {
  if (v.cols != cols) {
    fail(op, std::string(arg) + " has " + std::to_string(v.cols) + " columns, expected " +
                 std::to_string(cols));
  }
}

}  // namespace

void cpu_backend::embed(const linear_weight& table, tensor_view ids, tensor_view out) {
  const cpu_linear& t = as_cpu(table, "embed");
  const rows_view o = f32_rows(out, "embed", "out");
  check_cols(o, t.in_features(), "embed", "out");
  run_embed(pool_, t, i32_vector(ids, o.rows, "embed", "ids"), o);
}

void cpu_backend::rms_norm(tensor_view x, tensor_view weight, float eps, tensor_view out) {
  const rows_view xv = f32_rows(x, "rms_norm", "x"), ov = f32_rows(out, "rms_norm", "out");
  check_same_shape(xv, ov, "rms_norm", "out");
  const float* w = f32_vector(weight, xv.cols, "rms_norm", "weight");
  run_rms_norm(pool_, *kernels_, xv, w, eps, ov);
}

void cpu_backend::add_rms_norm(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                               tensor_view out) {
  add_norm("add_rms_norm", residual, x, weight, eps, out, nullptr);
}

void cpu_backend::add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                                    tensor_view out, tensor_view kept) {
  add_norm("add_rms_norm_keep", residual, x, weight, eps, out, &kept);
}

void cpu_backend::add_norm(const char* op, tensor_view residual, tensor_view x, tensor_view weight, float eps,
                           tensor_view out, const tensor_view* kept) {
  const rows_view rv = f32_rows(residual, op, "residual"), xv = f32_rows(x, op, "x");
  const rows_view ov = f32_rows(out, op, "out");
  check_same_shape(rv, xv, op, "x");
  check_same_shape(rv, ov, op, "out");
  rows_view kv;
  if (kept) {
    kv = f32_rows(*kept, op, "kept");
    check_same_shape(rv, kv, op, "kept");
    if (kv.data == rv.data || kv.data == xv.data || kv.data == ov.data) fail(op, "kept must not alias the others");
  }
  run_add_rms_norm(pool_, *kernels_, rv, xv, f32_vector(weight, rv.cols, op, "weight"), eps, ov, kept ? &kv : nullptr);
}

void cpu_backend::linear(const linear_weight& w, tensor_view x, tensor_view y) {
  if (run_exl3_linear(w, x, y, pool_)) return;
  if (run_group(w, x, y)) return;
  const cpu_linear& lw = as_cpu(w, "linear");
  const rows_view xv = f32_rows(x, "linear", "x"), yv = f32_rows(y, "linear", "y");
  check_cols(xv, lw.in_features(), "linear", "x");
  check_cols(yv, lw.out_features(), "linear", "y");
  if (xv.rows != yv.rows) fail("linear", "x and y have different row counts");
  if (x.data == y.data) fail("linear", "y must not alias x");
  run_linear(lw, xv, yv, *kernels_, pool_, scratch_, float_linear_);
}

void cpu_backend::rope(tensor_view x, tensor_view positions, const rope_params& p) {
  if (x.ndim != 3) fail("rope", "x must be [n, heads, head_dim]");
  const rows_view xv = f32_rows(x, "rope", "x");
  run_rope(pool_, xv, x.shape[1], x.shape[2], i32_vector(positions, xv.rows, "rope", "positions"),
           p, rope_cache_);
}

void cpu_backend::attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer,
                            const attention_batch& batch, float scale, tensor_view out) {
  const char* op = "attention";
  if (batch.rope != nullptr) {  // no fusion here: the same rotation rope() does
    rope(q, batch.positions, *batch.rope);
    rope(k, batch.positions, *batch.rope);
  }
  auto* ckv = dynamic_cast<cpu_kv*>(&kv);
  if (ckv == nullptr) fail(op, "the KV pool was not allocated by backend.cpu");
  const ref::paged_kv pool = ckv->layer(layer);
  if (pool.v == nullptr) fail(op, "kv is a key-only cache (kv_layout::values = false); GQA attention needs K and V");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || out.ndim != 3) {
    fail(op, "q, k, v and out must be [n, heads, head_dim]");
  }
  const int n_heads = static_cast<int>(q.shape[1]);
  const rows_view qv = f32_rows(q, op, "q"), kn = f32_rows(k, op, "k"), vn = f32_rows(v, op, "v");
  const rows_view ov = f32_rows(out, op, "out");
  if (q.shape[2] != pool.head_dim || k.shape[1] != pool.n_kv_heads || k.shape[2] != pool.head_dim) {
    fail(op, "head shapes of q / k do not match the KV pool");
  }
  check_same_shape(kn, vn, op, "v");
  check_same_shape(qv, ov, op, "out");
  if (qv.rows != batch.n_tokens || kn.rows != batch.n_tokens) fail(op, "rows != batch.n_tokens");
  ref::check_batch(batch, pool, n_heads);
  if (batch.n_seqs > 0 && batch.max_pages_per_seq > 1 && batch.page_table.strides[1] != 1) {
    fail(op, "page_table rows must be contiguous");
  }
  run_attention(pool_, *kernels_, qv, kn, vn, pool, batch, n_heads, scale, ov);
}

void cpu_backend::silu_mul(tensor_view gate, tensor_view up, tensor_view out) {
  const rows_view g = f32_rows(gate, "silu_mul", "gate"), u = f32_rows(up, "silu_mul", "up");
  const rows_view o = f32_rows(out, "silu_mul", "out");
  check_same_shape(g, u, "silu_mul", "up");
  check_same_shape(g, o, "silu_mul", "out");
  run_silu_mul(pool_, g, u, o);
}

void cpu_backend::add(tensor_view a, tensor_view b, tensor_view out) {
  const rows_view av = f32_rows(a, "add", "a"), bv = f32_rows(b, "add", "b");
  const rows_view ov = f32_rows(out, "add", "out");
  check_same_shape(av, bv, "add", "b");
  check_same_shape(av, ov, "add", "out");
  run_add(pool_, av, bv, ov);
}

void cpu_backend::gather_rows(tensor_view x, tensor_view rows, tensor_view out) {
  const rows_view xv = f32_rows(x, "gather_rows", "x"), ov = f32_rows(out, "gather_rows", "out");
  check_cols(ov, xv.cols, "gather_rows", "out");
  run_gather(pool_, xv, i32_vector(rows, ov.rows, "gather_rows", "rows"), ov);
}

void cpu_backend::sample(tensor_view logits, std::span<const sampling_params> params,
                         tensor_view ids) {
  const rows_view lv = f32_rows(logits, "sample", "logits");
  if (static_cast<int64_t>(params.size()) != lv.rows) {
    fail("sample", std::to_string(params.size()) + " sampling params for " +
                       std::to_string(lv.rows) + " rows of logits");
  }
  auto* out = const_cast<int32_t*>(i32_vector(ids, lv.rows, "sample", "ids"));
  pool_.parallel_for(lv.rows, [&](int64_t r) {
    out[r] = ref::sample_row(lv.row(r), static_cast<int>(lv.cols), params[r]);
  });
}

}  // namespace tandem::cpu
