// The ops of backend.cpu beyond the dense family: argument checks, then the kernels of
// pointwise.cpp (layer_norm), mla.cpp (MLA attention, DSA indexer) and moe.cpp (routing);
// moe_experts runs here on cpu_backend::linear.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_weights.hpp"
#include "mla.hpp"
#include "moe.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::cpu {
namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw error(std::string("backend.cpu ") + op + ": " + what);
}

std::string dims_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) {
    if (!s.empty()) s += ", ";
    s += std::to_string(d);
  }
  return s;
}

std::string shape_str(int64_t a, int64_t b) {
  std::string s = "[";
  s += std::to_string(a);
  s += ", ";
  s += std::to_string(b);
  s += "]";
  return s;
}

void check_rows_cols(int64_t rows, int64_t cols, int64_t want_rows, int64_t want_cols, const char* op,
                     const char* arg) {
  if (rows != want_rows || cols != want_cols) {
    fail(op,
         std::string(arg) + " is " + shape_str(rows, cols) + ", expected " + shape_str(want_rows, want_cols));
  }
}

// A 3-D view must split its row as [heads, dims]; a 2-D one is the flattened row.
void check_heads(const tensor_view& v, int64_t heads, int64_t dims, const char* op, const char* arg) {
  if (v.ndim == 3 && (v.shape[1] != heads || v.shape[2] != dims)) {
    fail(op, std::string(arg) + " is [n, " + std::to_string(v.shape[1]) + ", " + std::to_string(v.shape[2]) +
                 "], expected [n, " + std::to_string(heads) + ", " + std::to_string(dims) + "]");
  }
  if (v.ndim != 2 && v.ndim != 3)
    fail(op, std::string(arg) + " must be [n, heads, dims] or [n, heads * dims]");
}

// The bytes a view spans (first to last element), for aliasing checks.
bool overlaps(const tensor_view& a, const tensor_view& b) {
  auto span_of = [](const tensor_view& v, const char*& lo, const char*& hi) {
    if (v.data == nullptr || v.numel() == 0) return false;
    int64_t last = 0;
    for (int d = 0; d < v.ndim; ++d) last += (v.shape[d] - 1) * v.strides[d];
    lo = static_cast<const char*>(v.data);
    hi = lo + (last + 1) * static_cast<int64_t>(traits(v.type).block_bytes);
    return true;
  };
  const char *alo, *ahi, *blo, *bhi;
  if (!span_of(a, alo, ahi) || !span_of(b, blo, bhi)) return false;
  return alo < bhi && blo < ahi;
}

cpu_kv& key_only_cache(kv_storage& kv, const char* op) {
  auto* ckv = dynamic_cast<cpu_kv*>(&kv);
  if (ckv == nullptr) fail(op, "kv was not allocated by backend.cpu");
  if (ckv->layout().values) fail(op, "kv must be a key-only cache (kv_layout::values = false)");
  return *ckv;
}

// ref::check_batch, its message prefixed with the op; contiguous page-table rows.
void check_batch(const attention_batch& batch, const ref::paged_kv& pool, const char* op) {
  try {
    ref::check_batch(batch, pool, 1);
  } catch (const error& e) {
    fail(op, std::string("batch: ") + e.what());
  }
  if (batch.n_seqs > 0 && batch.max_pages_per_seq > 1 && batch.page_table.strides[1] != 1) {
    fail(op, "batch.page_table rows must be contiguous");
  }
}

void check_rope_dims(int rope_dims, int64_t limit, const char* op, const char* arg, const char* within) {
  if (rope_dims < 0 || rope_dims % 2 != 0 || rope_dims > limit) {
    fail(op, std::string(arg) + " " + std::to_string(rope_dims) + " must be even and in [0, " + within +
                 " = " + std::to_string(limit) + "]");
  }
}

}  // namespace

bool cpu_backend::supports(backend_op op) const {
  switch (op) {
    case backend_op::embed:
    case backend_op::rms_norm:
    case backend_op::linear:
    case backend_op::rope:
    case backend_op::silu_mul:
    case backend_op::add:
    case backend_op::gather_rows:
    case backend_op::sample:
    case backend_op::attention_gqa:
    case backend_op::layer_norm:
    case backend_op::attention_mla:
    case backend_op::dsa_indexer:
    case backend_op::moe_route:
    case backend_op::moe_experts:
    case backend_op::attention_full:  // the host defaults (backend_small_ops.cpp)
    case backend_op::dynamic_conv:
    case backend_op::top_k:
      return true;
  }
  return false;
}

void cpu_backend::layer_norm(tensor_view x, tensor_view weight, tensor_view bias, float eps,
                             tensor_view out) {
  const char* op = "layer_norm";
  const rows_view xv = f32_rows(x, op, "x"), ov = f32_rows(out, op, "out");
  check_same_shape(xv, ov, op, "out");
  const float* w = f32_vector(weight, xv.cols, op, "weight");
  const float* b = f32_vector(bias, xv.cols, op, "bias");
  run_layer_norm(pool_, xv, w, b, eps, ov);
}

std::unique_ptr<mla_weight> cpu_backend::load_mla(const tensor_info& kv_b, int heads, int nope, int v) {
  const char* op = "load_mla";
  if (heads <= 0 || nope < 0 || v <= 0) {
    fail(op, "heads " + std::to_string(heads) + ", nope " + std::to_string(nope) + ", v " +
                 std::to_string(v) + ": heads and v must be positive, nope not negative");
  }
  const int64_t rows = int64_t{heads} * (nope + v);
  if (kv_b.shape.size() != 2 || kv_b.shape[0] != rows || kv_b.shape[1] <= 0) {
    fail(op, "kv_b '" + kv_b.name + "' is {" + dims_str(kv_b.shape) +
                 "}, expected {heads * (nope + v) = " + std::to_string(rows) + ", rank}");
  }
  if (kv_b.shape[1] > (int64_t{1} << 30)) fail(op, "kv_b '" + kv_b.name + "' has an implausible rank");
  auto buf = load_tensor(kv_b, dtype::f32);  // any type load_tensor converts: f32, f16, bf16, q*_*
  return std::make_unique<cpu_mla>(std::move(buf), heads, nope, v, static_cast<int>(kv_b.shape[1]));
}

void cpu_backend::mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv,
                                int layer, const attention_batch& batch, const mla_params& p,
                                tensor_view topk, tensor_view out) {
  const char* op = "mla_attention";
  const auto* mw = dynamic_cast<const cpu_mla*>(&w);
  if (mw == nullptr) fail(op, "w was not loaded by backend.cpu load_mla");
  const ref::paged_kv pool = key_only_cache(kv, op).layer(layer, op);
  const int heads = mw->heads(), nope = mw->nope_dims(), vd = mw->v_dims(), rank = mw->rank();
  check_rope_dims(p.rope_dims, pool.head_dim, op, "p.rope_dims", "kv head_dim");
  const int d = rank + p.rope_dims;
  if (pool.n_kv_heads != 1 || pool.head_dim != d) {
    fail(op, "kv has " + std::to_string(pool.n_kv_heads) + " heads of " + std::to_string(pool.head_dim) +
                 " dims, expected 1 head of rank + rope_dims = " + std::to_string(d));
  }
  const int64_t n = batch.n_tokens;
  const rows_view qv = f32_rows(q, op, "q"), av = f32_rows(kv_a, op, "kv_a"), ov = f32_rows(out, op, "out");
  check_heads(q, heads, nope + p.rope_dims, op, "q");
  check_heads(out, heads, vd, op, "out");
  check_rows_cols(qv.rows, qv.cols, n, int64_t{heads} * (nope + p.rope_dims), op, "q");
  check_rows_cols(av.rows, av.cols, n, d, op, "kv_a");
  check_rows_cols(ov.rows, ov.cols, n, int64_t{heads} * vd, op, "out");
  if (overlaps(out, q) || overlaps(out, kv_a)) fail(op, "out must not overlap q or kv_a");
  i32_rows_view tv;
  if (given(topk)) {
    if (topk.ndim != 2) fail(op, "topk must be i32 [n, k]");
    tv = i32_rows(topk, op, "topk");
    if (tv.rows != n)
      fail(op, "topk has " + std::to_string(tv.rows) + " rows, expected " + std::to_string(n));
  }
  check_batch(batch, pool, op);
  const int32_t* pos = i32_vector(batch.positions, n, op, "batch.positions");
  prepare_rotation(mla_rope_cache_, pos, n, p.rope_theta, p.rope_dims, op);
  run_mla_attention(pool_, *kernels_, qv, av, *mw, pool, batch, p.rope_dims, mla_rope_cache_, p.scale,
                    given(topk) ? &tv : nullptr, ov);
}

void cpu_backend::dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer,
                              const attention_batch& batch, int rope_dims, float rope_theta, int top_k,
                              tensor_view topk) {
  const char* op = "dsa_indexer";
  const ref::paged_kv pool = key_only_cache(kv, op).layer(layer, op);
  if (pool.n_kv_heads != 1) {
    fail(op, "kv has " + std::to_string(pool.n_kv_heads) + " heads, expected 1 (the indexer's key)");
  }
  const int d = pool.head_dim;
  const int64_t n = batch.n_tokens;
  const rows_view qv = f32_rows(q, op, "q"), kn = f32_rows(k, op, "k"), wv = f32_rows(w, op, "w");
  const int64_t heads = wv.cols;
  if (w.ndim != 2 || heads <= 0) fail(op, "w must be f32 [n, heads] with heads > 0");
  check_rows_cols(wv.rows, wv.cols, n, heads, op, "w");
  check_heads(q, heads, d, op, "q");
  check_rows_cols(qv.rows, qv.cols, n, heads * d, op, "q");
  check_rows_cols(kn.rows, kn.cols, n, d, op, "k");
  check_rope_dims(rope_dims, d, op, "rope_dims", "kv head_dim");
  if (top_k <= 0) fail(op, "top_k " + std::to_string(top_k) + " must be positive");
  if (topk.ndim != 2) fail(op, "topk must be i32 [n, top_k]");
  const i32_rows_view tv = i32_rows(topk, op, "topk");
  check_rows_cols(tv.rows, tv.cols, n, top_k, op, "topk");
  check_batch(batch, pool, op);
  const int32_t* pos = i32_vector(batch.positions, n, op, "batch.positions");
  prepare_rotation(dsa_rope_cache_, pos, n, rope_theta, rope_dims, op);
  run_dsa_indexer(pool_, *kernels_, qv, kn, wv, pool, batch, rope_dims, dsa_rope_cache_, tv);
}

std::unique_ptr<expert_weights> cpu_backend::load_experts(std::span<const tensor_info* const> gate,
                                                          std::span<const tensor_info* const> up,
                                                          std::span<const tensor_info* const> down) {
  const char* op = "load_experts";
  if (gate.empty() || gate.size() != up.size() || gate.size() != down.size()) {
    fail(op, std::to_string(gate.size()) + " gate, " + std::to_string(up.size()) + " up and " +
                 std::to_string(down.size()) + " down tensors: expected the same positive count");
  }
  int64_t ffn = 0, hidden = 0;
  auto check = [&](const tensor_info* t, const char* what, size_t e, int64_t rows, int64_t cols) {
    const std::string arg = std::string(what) + "[" + std::to_string(e) + "]";
    if (t == nullptr) fail(op, arg + " is null");
    if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols) {
      fail(op, arg + " '" + t->name + "' is {" + dims_str(t->shape) + "}, expected {" + std::to_string(rows) +
                   ", " + std::to_string(cols) + "}");
    }
  };
  if (gate[0] == nullptr) fail(op, "gate[0] is null");
  if (gate[0]->shape.size() != 2 || gate[0]->shape[0] <= 0 || gate[0]->shape[1] <= 0) {
    fail(op, "gate[0] '" + gate[0]->name + "' is not a 2-D {ffn, hidden} weight");
  }
  ffn = gate[0]->shape[0];
  hidden = gate[0]->shape[1];
  std::vector<cpu_experts::expert> experts;
  experts.reserve(gate.size());
  for (size_t e = 0; e < gate.size(); ++e) {
    check(gate[e], "gate", e, ffn, hidden);
    check(up[e], "up", e, ffn, hidden);
    check(down[e], "down", e, hidden, ffn);
    experts.push_back({load_linear(*gate[e]), load_linear(*up[e]), load_linear(*down[e])});
  }
  return std::make_unique<cpu_experts>(std::move(experts), hidden, ffn);
}

void cpu_backend::moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                            tensor_view weights) {
  const char* op = "moe_route";
  check_routing(r);
  const rows_view lv = f32_rows(logits, op, "logits");
  if (lv.cols != r.n_experts) {
    fail(op, "logits has " + std::to_string(lv.cols) + " columns, expected n_experts " +
                 std::to_string(r.n_experts));
  }
  const float* b = given(bias) ? f32_vector(bias, r.n_experts, op, "bias") : nullptr;
  const i32_rows_view iv = i32_rows(ids, op, "ids");
  const rows_view wv = f32_rows(weights, op, "weights");
  check_rows_cols(iv.rows, iv.cols, lv.rows, r.top_k, op, "ids");
  check_rows_cols(wv.rows, wv.cols, lv.rows, r.top_k, op, "weights");
  if (overlaps(weights, logits)) fail(op, "weights must not overlap logits");
  run_moe_route(pool_, lv, b, r, iv, wv);
}

void cpu_backend::moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                              tensor_view out) {
  const char* op = "moe_experts";
  const auto* ew = dynamic_cast<const cpu_experts*>(&w);
  if (ew == nullptr) fail(op, "w was not loaded by backend.cpu load_experts");
  const int64_t hidden = ew->hidden(), ffn = ew->ffn();
  const rows_view xv = f32_rows(x, op, "x"), ov = f32_rows(out, op, "out");
  const int64_t n = xv.rows;
  check_rows_cols(xv.rows, xv.cols, n, hidden, op, "x");
  check_rows_cols(ov.rows, ov.cols, n, hidden, op, "out");
  const i32_rows_view iv = i32_rows(ids, op, "ids");
  const rows_view wv = f32_rows(weights, op, "weights");
  const int64_t k = iv.cols;
  check_rows_cols(iv.rows, iv.cols, n, k, op, "ids");
  check_rows_cols(wv.rows, wv.cols, n, k, op, "weights");
  if (overlaps(out, x) || overlaps(out, weights)) fail(op, "out must not overlap x or weights");
  const int n_experts = ew->n_experts();
  // Rows by expert (a counting sort), each with its routing weight.
  std::vector<int64_t> start(static_cast<size_t>(n_experts) + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = iv.row(i)[j];
      if (e < 0 || e >= n_experts) {
        fail(op, "ids[" + std::to_string(i) + ", " + std::to_string(j) + "] = " + std::to_string(e) +
                     " is outside [0, " + std::to_string(n_experts) + ")");
      }
      ++start[e + 1];
    }
  }
  for (int e = 0; e < n_experts; ++e) start[e + 1] += start[e];
  moe_rows_.resize(static_cast<size_t>(n * k));
  moe_weights_.resize(static_cast<size_t>(n * k));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = fill[iv.row(i)[j]]++;
      moe_rows_[at] = static_cast<int32_t>(i);
      moe_weights_[at] = wv.row(i)[j];
    }
  }
  for (int64_t i = 0; i < n; ++i) std::memset(ov.row(i), 0, sizeof(float) * hidden);
  int64_t most = 0;
  for (int e = 0; e < n_experts; ++e) most = std::max(most, start[e + 1] - start[e]);
  // Per expert: gathered rows [m, hidden], gate and up [m, ffn], down [m, hidden].
  moe_scratch_.resize(static_cast<size_t>(most * (2 * hidden + 2 * ffn)));
  for (int e = 0; e < n_experts; ++e) {
    const int64_t m = start[e + 1] - start[e];
    if (m == 0) continue;
    float* xs = moe_scratch_.data();
    float* g = xs + m * hidden;
    float* u = g + m * ffn;
    float* dn = u + m * ffn;
    const rows_view xs_v{xs, m, hidden, hidden}, g_v{g, m, ffn, ffn}, u_v{u, m, ffn, ffn};
    run_gather(pool_, xv, moe_rows_.data() + start[e], xs_v);
    const auto& ex = ew->at(e);
    linear(*ex.gate, tensor_view::contiguous(xs, dtype::f32, {m, hidden}),
           tensor_view::contiguous(g, dtype::f32, {m, ffn}));
    linear(*ex.up, tensor_view::contiguous(xs, dtype::f32, {m, hidden}),
           tensor_view::contiguous(u, dtype::f32, {m, ffn}));
    run_silu_mul(pool_, g_v, u_v, g_v);
    linear(*ex.down, tensor_view::contiguous(g, dtype::f32, {m, ffn}),
           tensor_view::contiguous(dn, dtype::f32, {m, hidden}));
    for (int64_t i = 0; i < m; ++i) {  // serial: a token may list an expert twice
      kernels_->axpy(ov.row(moe_rows_[start[e] + i]), moe_weights_[start[e] + i], dn + i * hidden, hidden);
    }
  }
}

}  // namespace tandem::cpu
