// backend.cuda's layer_norm, MLA attention and DSA indexer (tandem/backend.hpp states the
// contracts; backend.cpu, plugins/cpu/mla.cpp, is the reference). Host-side shape checks,
// then the launchers of tandem_cuda/mla.hpp and two cuBLAS fp32 GEMMs:
//  - mla_attention: mla_prepare (row table, the latent cache write with k_rope rotated,
//    q_rope rotated into qcat), the top-k lists cleaned up, the W_UK absorption
//    q_lat[r, h] = W_UK[h]^T q_nope[r, h] as one strided-batched SGEMM over heads (written
//    beside the rotated q_rope in qcat), the attention over the latent cache, then
//    out[r, h] = W_UV[h] o_lat[r, h] as a second strided-batched SGEMM. The GEMMs are fp32
//    (cuBLAS's default math mode: no TF32). The attention: decode steps (one row per
//    sequence) at rank 512 + rope 64 run mla_attend_tc (tensor cores, f16 operands, f32
//    accumulation: ~5e-4 of the output's norm from backend.cpu); everything else mla_attend
//    (fp32: backend.cpu's result up to summation order).
//  - dsa_indexer: dsa_prepare (key cache write, rotated q, scaled head weights), then
//    dsa_select (scores and the top-k).
// Nothing is read back: batch indices are device data that a recorded step replays with new
// contents (bad indices are clamped or skipped by the kernels, never read out of bounds);
// everything the host needs (the plans, the scratch sizes) comes from shapes, and the
// context bound from the page table's width.
#include "cuda_mla.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "check.hpp"
#include "cuda_backend.hpp"
#include "cuda_checks.hpp"
#include "cuda_weights.hpp"
#include "tandem/error.hpp"
#include "tandem_cuda/mla.hpp"

namespace tandem::cuda {

cuda_mla::cuda_mla(std::unique_ptr<device_buffer> w, int heads, int nope, int v, int rank)
    : buf_(std::move(w)), w_(static_cast<const float*>(buf_->data())), heads_(heads), nope_(nope), v_(v), rank_(rank) {}

namespace {

std::string shape_str(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

bool given(const tensor_view& v) { return v.ndim > 0 || v.data != nullptr; }

void check_device(const tensor_view& v, dtype t, const char* op, const char* what) {
  if (v.dev.kind != device_kind::cuda) bad(op, std::string(what) + " is not in device memory");
  if (v.type != t) bad(op, std::string(what) + " is " + std::string(name(v.type)) + ", expected " + std::string(name(t)));
}

// A matrix of rows `ld` elements apart, each row packed: a 2-D view with unit column stride,
// or a 3-D [n, heads, dims] view whose rows are packed (cols = heads * dims).
template <class T>
struct rows_of {
  T* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
};

template <class T>
rows_of<T> device_rows(const tensor_view& v, const char* op, const char* what) {
  constexpr dtype t = std::is_same_v<std::remove_const_t<T>, float> ? dtype::f32 : dtype::i32;
  check_device(v, t, op, what);
  if (v.ndim == 2 && (v.strides[1] == 1 || v.shape[1] <= 1) && (v.shape[0] <= 1 || v.strides[0] >= v.shape[1]))
    return {v.ptr<T>(), v.shape[0], v.shape[1], std::max<int64_t>({v.strides[0], v.shape[1], 1})};
  if (v.ndim == 3 && (v.strides[2] == 1 || v.shape[2] <= 1) && (v.shape[1] <= 1 || v.strides[1] == v.shape[2]) &&
      (v.shape[0] <= 1 || v.strides[0] >= v.shape[1] * v.shape[2]))
    return {v.ptr<T>(), v.shape[0], v.shape[1] * v.shape[2],
            std::max<int64_t>({v.strides[0], v.shape[1] * v.shape[2], 1})};
  bad(op, std::string(what) + " must be a 2-D view with unit column stride or a 3-D view with packed rows");
}

void check_rows_cols(int64_t rows, int64_t cols, int64_t want_rows, int64_t want_cols, const char* op,
                     const char* what) {
  if (rows != want_rows || cols != want_cols)
    bad(op, std::string(what) + " is " + shape_str(rows, cols) + ", expected " + shape_str(want_rows, want_cols));
}

// A 3-D view must split its row as [heads, dims]; a 2-D one is the flattened row.
void check_heads(const tensor_view& v, int64_t heads, int64_t dims, const char* op, const char* what) {
  if (v.ndim == 3 && (v.shape[1] != heads || v.shape[2] != dims))
    bad(op, std::string(what) + " is [n, " + std::to_string(v.shape[1]) + ", " + std::to_string(v.shape[2]) +
                "], expected [n, " + std::to_string(heads) + ", " + std::to_string(dims) + "]");
  if (v.ndim != 2 && v.ndim != 3) bad(op, std::string(what) + " must be [n, heads, dims] or [n, heads * dims]");
}

// An f32 device vector of exactly n elements (norm weights).
const float* f32_vector(const tensor_view& v, int64_t n, const char* op, const char* what) {
  check_device(v, dtype::f32, op, what);
  if (v.numel() != n || !v.is_contiguous())
    bad(op, std::string(what) + " must be a contiguous vector of " + std::to_string(n) + " floats");
  return v.ptr<float>();
}

void check_rope_dims(int rope_dims, int64_t limit, const char* op, const char* what) {
  if (rope_dims < 0 || rope_dims % 2 != 0 || rope_dims > limit)
    bad(op, std::string(what) + " " + std::to_string(rope_dims) + " must be even and in [0, kv head_dim = " +
                std::to_string(limit) + "]");
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

// The key-only cache layer an op reads: one head of `dims` floats (checked by the caller).
key_cache key_layer(kv_storage& kv, int layer, const char* op) {
  auto* ckv = dynamic_cast<cuda_kv*>(&kv);
  if (ckv == nullptr) bad(op, "kv was not allocated by backend.cuda");
  const kv_layout& l = ckv->layout();
  float* k = ckv->keys(layer, op);
  if (l.n_kv_heads != 1)
    bad(op, "kv has " + std::to_string(l.n_kv_heads) + " heads of " + std::to_string(l.head_dim) +
                " dims, expected 1 head");
  return {k, l.n_pages, l.page_size, l.head_dim};
}

const int32_t* i32_vector(const tensor_view& v, int64_t n, const char* op, const char* what) {
  check_device(v, dtype::i32, op, what);
  if (v.numel() != n || !v.is_contiguous())
    bad(op, std::string("batch.") + what + " must be a contiguous i32 vector of " + std::to_string(n));
  return v.ptr<int32_t>();
}

// The batch's shapes (its contents are device data the kernels guard against).
row_batch device_batch(const attention_batch& batch, const char* op) {
  if (batch.n_seqs < 1 || batch.n_tokens < 0 || batch.max_pages_per_seq < 1)
    bad(op, "batch has " + std::to_string(batch.n_seqs) + " sequences, " + std::to_string(batch.n_tokens) +
                " tokens and " + std::to_string(batch.max_pages_per_seq) +
                " pages per sequence: needs at least one sequence and one page");
  row_batch b;
  b.n_seqs = batch.n_seqs;
  b.n_tokens = batch.n_tokens;
  b.max_pages = batch.max_pages_per_seq;
  b.query_start = i32_vector(batch.query_start, batch.n_seqs + 1, op, "query_start");
  b.seq_lens = i32_vector(batch.seq_lens, batch.n_seqs, op, "seq_lens");
  b.page_table = i32_vector(batch.page_table, int64_t{batch.n_seqs} * batch.max_pages_per_seq, op, "page_table");
  b.slot_mapping = i32_vector(batch.slot_mapping, batch.n_tokens, op, "slot_mapping");
  b.positions = i32_vector(batch.positions, batch.n_tokens, op, "positions");
  return b;
}

// TANDEM_CUDA_MLA_TC=0 keeps decode steps on the f32 kernel (to compare the two).
bool mla_tc_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TANDEM_CUDA_MLA_TC");
    return e == nullptr || std::string(e) != "0";
  }();
  return on;
}

}  // namespace

void cuda_backend::layer_norm(tensor_view x, tensor_view weight, tensor_view bias, float eps, tensor_view out) {
  op_profiler::scope timed(prof_, "layer_norm", stream_);
  const char* op = "layer_norm";
  const auto xv = device_rows<float>(x, op, "x"), ov = device_rows<float>(out, op, "out");
  if (ov.rows != xv.rows || ov.cols != xv.cols)
    bad(op, "out is " + shape_str(ov.rows, ov.cols) + ", expected " + shape_str(xv.rows, xv.cols));
  const float* w = f32_vector(weight, xv.cols, op, "weight");
  const float* b = f32_vector(bias, xv.cols, op, "bias");
  cuda::layer_norm(xv.p, xv.ld, w, b, eps, xv.rows, xv.cols, ov.p, ov.ld, stream_);
  check_launch(op);
}

std::unique_ptr<mla_weight> cuda_backend::load_mla(const tensor_info& kv_b, int heads, int nope, int v) {
  const char* op = "load_mla";
  if (heads <= 0 || nope < 0 || v <= 0)
    bad(op, "heads " + std::to_string(heads) + ", nope " + std::to_string(nope) + ", v " + std::to_string(v) +
                ": heads and v must be positive, nope not negative");
  const int64_t rows = int64_t{heads} * (nope + v);
  if (kv_b.shape.size() != 2 || kv_b.shape[0] != rows || kv_b.shape[1] <= 0) {
    std::string dims;
    for (int64_t d : kv_b.shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    bad(op, "kv_b '" + kv_b.name + "' is {" + dims + "}, expected {heads * (nope + v) = " + std::to_string(rows) +
                ", rank}");
  }
  if (kv_b.shape[1] > (int64_t{1} << 30)) bad(op, "kv_b '" + kv_b.name + "' has an implausible rank");
  auto buf = load_tensor(kv_b, dtype::f32);  // any type load_tensor converts: f32, f16, bf16, q*_*
  return std::make_unique<cuda_mla>(std::move(buf), heads, nope, v, static_cast<int>(kv_b.shape[1]));
}

void cuda_backend::mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv, int layer,
                                 const attention_batch& batch, const mla_params& p, tensor_view topk,
                                 tensor_view out) {
  const char* op = "mla_attention";
  op_profiler::scope timed(prof_, op, stream_);
  const auto* mw = dynamic_cast<const cuda_mla*>(&w);
  if (mw == nullptr) bad(op, "w was not loaded by backend.cuda load_mla");
  const key_cache kc = key_layer(kv, layer, op);
  const int heads = mw->heads(), nope = mw->nope_dims(), vd = mw->v_dims(), rank = mw->rank();
  check_rope_dims(p.rope_dims, kc.dim, op, "p.rope_dims");
  const int D = rank + p.rope_dims;
  if (kc.dim != D)
    bad(op, "kv has 1 head of " + std::to_string(kc.dim) + " dims, expected 1 head of rank + rope_dims = " +
                std::to_string(D));
  if (!mla_shape_supported(rank, p.rope_dims))
    bad(op, "rank " + std::to_string(rank) + " + rope " + std::to_string(p.rope_dims) +
                " does not fit the attention kernel's shared memory");
  const int64_t n = batch.n_tokens;
  const auto qv = device_rows<float>(q, op, "q"), av = device_rows<float>(kv_a, op, "kv_a"),
             ov = device_rows<float>(out, op, "out");
  check_heads(q, heads, nope + p.rope_dims, op, "q");
  check_heads(out, heads, vd, op, "out");
  check_rows_cols(qv.rows, qv.cols, n, int64_t{heads} * (nope + p.rope_dims), op, "q");
  check_rows_cols(av.rows, av.cols, n, D, op, "kv_a");
  check_rows_cols(ov.rows, ov.cols, n, int64_t{heads} * vd, op, "out");
  if (overlaps(out, q) || overlaps(out, kv_a)) bad(op, "out must not overlap q or kv_a");
  rows_of<const int32_t> tv;
  if (given(topk)) {
    if (topk.ndim != 2) bad(op, "topk must be i32 [n, k]");
    tv = device_rows<const int32_t>(topk, op, "topk");
    if (tv.rows != n) bad(op, "topk has " + std::to_string(tv.rows) + " rows, expected " + std::to_string(n));
    if (tv.cols > topk_max)
      bad(op, "topk lists " + std::to_string(tv.cols) + " positions per row, at most " + std::to_string(topk_max));
  }
  const row_batch b = device_batch(batch, op);
  if (n == 0) return;

  const size_t qcat_bytes = static_cast<size_t>(n) * heads * D * sizeof(float);
  auto* qcat = static_cast<float*>(grow(mla_qcat_, qcat_bytes, op));
  auto* rinfo = static_cast<row_info*>(grow(mla_rows_, static_cast<size_t>(n) * sizeof(row_info), op));
  auto* o_lat = static_cast<float*>(grow(mla_lat_, static_cast<size_t>(n) * heads * rank * sizeof(float), op));
  mla_prepare(qv.p, qv.ld, av.p, av.ld, heads, nope, p.rope_dims, rank, p.rope_theta, kc, b, qcat, rinfo, stream_);
  check_launch("mla_attention (prepare)");
  // The top-k lists before the W_UK GEMM: the decode kernel's prologue reads them (and the
  // row table and the new cache rows) before waiting for its predecessor, the GEMM.
  const int32_t* list = nullptr;
  int32_t* count = nullptr;
  if (given(topk)) {
    const int k = static_cast<int>(tv.cols);
    const size_t list_bytes = static_cast<size_t>(n) * (std::max(k, 0) + 1) * sizeof(int32_t);
    auto* lists = static_cast<int32_t*>(grow(mla_list_, list_bytes, op));
    count = lists + n * k;
    list = lists;
    if (k == 0) check(cudaMemsetAsync(count, 0, static_cast<size_t>(n) * sizeof(int32_t), stream_), op);
    else topk_sanitize(tv.p, tv.ld, k, n, rinfo, lists, count, stream_);
    check_launch("mla_attention (topk lists)");
  }
  const float one = 1.0f, zero = 0.0f;
  if (nope > 0) {
    // Column-major: qcat[r, h, 0 .. rank) (rank x n, ld heads * D) = W_UK[h] (rank x nope, ld
    // rank: the row-major [nope, rank] block) times q_nope[r, h] (nope x n, ld q's row).
    check(cublasSgemmStridedBatched(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, rank, static_cast<int>(n), nope, &one,
                                    mw->uk(), rank, mw->head_stride(), qv.p, static_cast<int>(qv.ld),
                                    nope + p.rope_dims, &zero, qcat, heads * D, D, heads),
          "mla_attention (W_UK gemm)");
  }
  const int64_t max_keys = int64_t{b.max_pages} * kc.page_size;
  const bool decode = n == batch.n_seqs && mla_tc_enabled() &&
                      mla_tc_supported(heads, rank, p.rope_dims, prop_.sharedMemPerBlockOptin);
  const int64_t widest = given(topk) ? std::min<int64_t>(tv.cols, max_keys) : max_keys;
  const mla_tc_plan tc_plan = decode ? plan_mla_tc(n, heads, widest, prop_.multiProcessorCount) : mla_tc_plan{};
  if (decode && tc_plan.splits <= mla_tc_max_splits) {
    // Decode (one row per sequence, as the engine's decode steps are): the tensor-core kernel.
    const mla_tc_plan& plan = tc_plan;
    void* part = plan.part_bytes > 0 ? grow(mla_part_, plan.part_bytes, op) : nullptr;
    mla_attend_tc(plan, qcat, heads, kc, b, rinfo, list, count, given(topk) ? tv.cols : 0, p.scale, nope > 0, part,
                  o_lat, stream_);
    check_launch("mla_attention (attend, tensor cores)");
  } else {
    const mla_plan plan = plan_mla(n, heads, rank, p.rope_dims, max_keys, prop_.multiProcessorCount);
    void* part = plan.part_bytes > 0 ? grow(mla_part_, plan.part_bytes, op) : nullptr;
    mla_attend(plan, qcat, heads, rank, p.rope_dims, kc, b, rinfo, list, count, given(topk) ? tv.cols : 0, p.scale,
               part, o_lat, stream_);
    check_launch("mla_attention (attend)");
  }
  // Column-major: out[r, h] (v x n, ld out's row) = W_UV[h] (the row-major [v, rank] block
  // is rank x v with ld rank, hence OP_T) times o_lat[r, h] (rank x n, ld heads * rank).
  check(cublasSgemmStridedBatched(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, vd, static_cast<int>(n), rank, &one, mw->uv(),
                                  rank, mw->head_stride(), o_lat, heads * rank, rank, &zero, ov.p,
                                  static_cast<int>(ov.ld), vd, heads),
        "mla_attention (W_UV gemm)");
}

void cuda_backend::dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer,
                               const attention_batch& batch, int rope_dims, float rope_theta, int top_k,
                               tensor_view topk) {
  const char* op = "dsa_indexer";
  op_profiler::scope timed(prof_, op, stream_);
  const key_cache kc = key_layer(kv, layer, op);
  const int d = kc.dim;
  const int64_t n = batch.n_tokens;
  const auto qv = device_rows<float>(q, op, "q"), kn = device_rows<float>(k, op, "k"),
             wv = device_rows<float>(w, op, "w");
  const int64_t heads = wv.cols;
  if (w.ndim != 2 || heads <= 0) bad(op, "w must be f32 [n, heads] with heads > 0");
  check_rows_cols(wv.rows, wv.cols, n, heads, op, "w");
  check_heads(q, heads, d, op, "q");
  check_rows_cols(qv.rows, qv.cols, n, heads * d, op, "q");
  check_rows_cols(kn.rows, kn.cols, n, d, op, "k");
  check_rope_dims(rope_dims, d, op, "rope_dims");
  if (top_k <= 0) bad(op, "top_k " + std::to_string(top_k) + " must be positive");
  if (top_k > dsa_topk_max)
    bad(op, "top_k " + std::to_string(top_k) + " is above this backend's " + std::to_string(dsa_topk_max));
  if (topk.ndim != 2) bad(op, "topk must be i32 [n, top_k]");
  const auto tv = device_rows<int32_t>(topk, op, "topk");
  check_rows_cols(tv.rows, tv.cols, n, top_k, op, "topk");
  if (heads > 16384 || !dsa_shape_supported(static_cast<int>(heads), d))
    bad(op, std::to_string(heads) + " heads of " + std::to_string(d) +
                " dims: the indexer kernels take dims a multiple of 4 up to 128 and heads * dims <= 16384");
  const row_batch b = device_batch(batch, op);
  if (n == 0) return;

  const int hh = static_cast<int>(heads);
  auto* qrot = static_cast<float*>(grow(dsa_q_, static_cast<size_t>(n) * (heads * d + heads) * sizeof(float), op));
  float* wsc = qrot + n * heads * d;
  auto* rinfo = static_cast<row_info*>(grow(mla_rows_, static_cast<size_t>(n) * sizeof(row_info), op));
  dsa_prepare(qv.p, qv.ld, kn.p, kn.ld, wv.p, wv.ld, hh, d, rope_dims, rope_theta, kc, b, qrot, wsc, rinfo, stream_);
  check_launch("dsa_indexer (prepare)");
  const dsa_plan plan = plan_dsa(n, hh, d, top_k, int64_t{b.max_pages} * kc.page_size);
  void* ws = grow(dsa_ws_, plan.workspace_bytes, op);
  dsa_select(plan, qrot, wsc, kc, b, rinfo, tv.p, tv.ld, ws, stream_);
  check_launch("dsa_indexer (select)");
}

}  // namespace tandem::cuda
