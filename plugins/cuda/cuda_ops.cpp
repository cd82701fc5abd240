// backend.cuda ops: view checks on the host, then one launcher each (tandem_cuda/kernels.hpp).
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "check.hpp"
#include "cuda_backend.hpp"
#include "cuda_checks.hpp"
#include "cuda_weights.hpp"
#include "exl3_weights.hpp"
#include "tandem/error.hpp"
#include "tandem_cuda/kernels.hpp"
#include "tandem_cuda/mla.hpp"
#include "tandem_ref/ops.hpp"

namespace tandem::cuda {
namespace {

float* f32(const tensor_view& v, const char* op, const char* what) {
  check_view(v, dtype::f32, op, what);
  return v.ptr<float>();
}

const int32_t* i32(const tensor_view& v, const char* op, const char* what) {
  check_view(v, dtype::i32, op, what);
  return v.ptr<int32_t>();
}

const cuda_linear& as_cuda(const linear_weight& w, const char* op) {
  const auto* c = dynamic_cast<const cuda_linear*>(&w);
  if (!c) bad(op, "weight was not loaded by backend.cuda");
  return *c;
}

void same_shape(const tensor_view& a, const tensor_view& b, const char* op) {
  if (a.numel() != b.numel() || a.cols() != b.cols()) bad(op, "operand shapes differ");
}

// The distance in floats between rows of an f32 device view that is contiguous or 2-D with
// rows strided apart (a drafter copies several taps' rows at once that way).
int64_t row_stride(const tensor_view& v, const char* op, const char* what) {
  if (v.is_contiguous()) {
    check_view(v, dtype::f32, op, what);
    return v.cols();
  }
  if (v.ndim != 2 || v.strides[1] != 1 || v.strides[0] < v.shape[1])
    bad(op, std::string(what) + " must be contiguous or 2-D rows with unit column stride");
  if (v.type != dtype::f32 || v.dev.kind != device_kind::cuda)
    bad(op, std::string(what) + " must be f32 in device memory");
  return v.strides[0];
}

}  // namespace

void cuda_backend::embed(const linear_weight& table, tensor_view ids, tensor_view out) {
  op_profiler::scope timed(prof_, "embed", stream_);
  const cuda_linear& t = as_cuda(table, "embed");
  const int64_t n = ids.numel();
  if (out.rows() != n || out.cols() != t.in_features()) bad("embed", "out must be [n, embedding width]");
  cuda::embed(t.matrix(), i32(ids, "embed", "ids"), n, f32(out, "embed", "out"), stream_);
  check_launch("embed");
}

void cuda_backend::rms_norm(tensor_view x, tensor_view weight, float eps, tensor_view out) {
  op_profiler::scope timed(prof_, "rms_norm", stream_);
  same_shape(x, out, "rms_norm");
  if (weight.numel() != x.cols()) bad("rms_norm", "weight must have one value per column");
  // Strided 2-D rows (MLA normalises the latent in place inside kv_a): tandem_cuda/mla.hpp.
  auto strided = [](const tensor_view& v) {
    return !v.is_contiguous() && v.ndim == 2 && v.strides[1] == 1 && v.strides[0] >= v.shape[1];
  };
  if (strided(x) || strided(out)) {
    auto ld = [](const tensor_view& v) { return v.is_contiguous() ? v.cols() : v.strides[0]; };
    if (x.ndim != 2 || out.ndim != 2 || !(x.is_contiguous() || strided(x)) || !(out.is_contiguous() || strided(out)))
      bad("rms_norm", "x and out must be contiguous or 2-D with unit column stride");
    check_view(weight, dtype::f32, "rms_norm", "weight");
    if (x.type != dtype::f32 || out.type != dtype::f32 || x.dev.kind != device_kind::cuda ||
        out.dev.kind != device_kind::cuda)
      bad("rms_norm", "x and out must be f32 in device memory");
    cuda::rms_norm_rows(x.ptr<float>(), ld(x), weight.ptr<float>(), eps, x.rows(), x.cols(), out.ptr<float>(),
                        ld(out), stream_);
    check_launch("rms_norm");
    return;
  }
  cuda::rms_norm(f32(x, "rms_norm", "x"), f32(weight, "rms_norm", "weight"), eps, x.rows(), x.cols(),
                 f32(out, "rms_norm", "out"), stream_);
  check_launch("rms_norm");
}

void cuda_backend::add_rms_norm(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                                tensor_view out) {
  op_profiler::scope timed(prof_, "add_rms_norm", stream_);
  add_norm("add_rms_norm", residual, x, weight, eps, out, nullptr);
}

void cuda_backend::add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                                     tensor_view out, tensor_view kept) {
  op_profiler::scope timed(prof_, "add_rms_norm_keep", stream_);
  same_shape(residual, kept, "add_rms_norm_keep");
  float* k = f32(kept, "add_rms_norm_keep", "kept");
  if (k == residual.data || k == x.data || k == out.data) bad("add_rms_norm_keep", "kept must not alias the others");
  add_norm("add_rms_norm_keep", residual, x, weight, eps, out, k);
}

void cuda_backend::add_norm(const char* op, tensor_view residual, tensor_view x, tensor_view weight, float eps,
                            tensor_view out, float* kept) {
  same_shape(residual, x, op);
  same_shape(residual, out, op);
  if (weight.numel() != x.cols()) bad(op, "weight must have one value per column");
  cuda::add_rms_norm(f32(residual, op, "residual"), f32(x, op, "x"), f32(weight, op, "weight"), eps, x.rows(),
                     x.cols(), f32(out, op, "out"), kept, stream_);
  check_launch(op);
}

int64_t cuda_backend::gemv_limit(const dev_matrix& m) const {
  return opt_.q8_activations && gemv_q8_supported(m) ? gemv_q8_max_tokens : gemv_max_tokens;
}

int64_t cuda_backend::gemv_preferred(const dev_matrix& m) const {
  return opt_.q8_activations && gemv_q8_supported(m) ? gemv_q8_preferred_max_tokens : gemv_max_tokens;
}

// Which kernel a plain linear of n rows takes. The crossovers depend on the matrix's shape,
// not only on n (bench_cuda_kernels' linear curve, us per call: H100 2026-12-05, H200
// sessions 11 and 13; bench/RESULTS.md):
//  - 1 row: the q8 GEMV;
//  - 2 to gemv_preferred rows: the GEMV, but the int8 tensor-core kernel where the GEMV's
//    per-row cost shows: matrices of at most 1,024 rows and inputs (q/k/v and o of the
//    default model: 2.5-2.8 us against 2.8-3.9) and vocabulary heads (49,152 rows: 20.5-20.9
//    against 27-31);
//  - from there to mma_max_rows: the tensor-core kernel, but the f16 GEMM for matrices
//    reading 1,536 or more inputs (down: 5.7 us against 8.3-8.4 at 8 and 16 rows: the
//    kernel has too few row tiles to fill the GPU);
//  - more: the GEMM.
// Without an f16 copy there is no GEMM; batch_invariant and mma_max_rows keep their meaning.
cuda_backend::linear_path cuda_backend::path_for(const cuda_linear& lw, int64_t n) const {
  const dev_matrix& m = lw.matrix();
  const bool mma_allowed = opt_.q8_activations && !opt_.batch_invariant && gemv_q8_supported(m) &&
                           n <= std::min(opt_.mma_max_rows, gemv_q8_mma_max_tokens);
  const bool gemm_allowed = lw.f16() != nullptr;
  const bool by_shape = opt_.linear_by_shape;
  if (n <= gemv_preferred(m)) {
    const bool small = m.out <= 1024 && m.in <= 1024, head = m.out >= 16384;
    return by_shape && n >= 2 && mma_allowed && (small || head) ? linear_path::mma : linear_path::gemv;
  }
  if (mma_allowed && !(by_shape && gemm_allowed && m.in >= 1536)) return linear_path::mma;
  return gemm_allowed ? linear_path::gemm : linear_path::gemv;
}

void cuda_backend::gemv_rows(const dev_matrix& m, const float* x, int64_t n, float* y, bool accumulate) {
  const bool q8 = opt_.q8_activations && gemv_q8_supported(m);
  const int64_t limit = gemv_limit(m);
  for (int64_t r = 0; r < n; r += limit) {
    const int64_t rows = std::min(limit, n - r);
    if (q8) {
      void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(rows, m.in), 16), "linear");
      gemv_q8_fused(m, x + r * m.in, rows, dev_prologue{}, accumulate, y + r * m.out, ws, stream_);
    } else {
      gemv(m, x + r * m.in, rows, y + r * m.out, accumulate, stream_);
    }
  }
}

void cuda_backend::attach_rope_table(dev_rope& r, int head_dim, int positions) {
  const int rot = r.rotary_dims == 0 ? head_dim : r.rotary_dims, half = rot / 2;
  if (r.theta != rope_theta_ || rot != rope_rot_ || positions > rope_positions_) {
    if (capturing_) bad("attention", "the RoPE table must grow while recording");
    // Grow by doubling (at least 4096 positions): an unrecorded batch whose page table
    // widens by one page every 16 tokens must not rebuild the table each time.
    if (r.theta == rope_theta_ && rot == rope_rot_) positions = std::max(positions, 2 * rope_positions_);
    positions = std::max(positions, 4096);
    std::vector<float2> host(static_cast<size_t>(positions) * half);
    for (int p = 0; p < positions; ++p)
      for (int i = 0; i < half; ++i) ref::rope_angle(r.theta, rot, p, i, &host[p * half + i].x, &host[p * half + i].y);
    if (rope_table_.grow(host.size() * sizeof(float2))) drop_graphs(graph_drop::rope_table);
    copy_to_device(rope_table_.data(), host.data(), host.size() * sizeof(float2));
    synchronize();
    rope_theta_ = r.theta, rope_rot_ = rot, rope_positions_ = positions;
  }
  r.table = static_cast<const float2*>(rope_table_.data());
  r.table_positions = rope_positions_;
}

void cuda_backend::linear(const linear_weight& w, tensor_view x, tensor_view y) {
  // A default group (EXL3 q/k/v and gate/up: trellises are not concatenated) runs part by
  // part, each into its slice of y.
  if (run_group(w, x, y)) return;
  op_profiler::scope timed(prof_, "linear", stream_);
  if (const cuda_exl3_linear* e = as_exl3(w)) {  // EXL3: exl3_weights.cpp
    const int64_t n = x.numel() / e->in_features();
    if (x.numel() != n * e->in_features() || y.numel() != n * e->out_features())
      bad("linear", "x and y do not fit the EXL3 weight [" + std::to_string(e->out_features()) + ", " +
                        std::to_string(e->in_features()) + "]");
    const float* xp = f32(x, "linear", "x");
    float* yp = f32(y, "linear", "y");
    if (n == 0) return;
    run_exl3_linear(*e, xp, n, yp, grow(x16_, exl3_workspace_bytes(*e, n), "linear"), cublas_, stream_,
                    opt_.q8_activations);
    check_launch("linear (exl3)");
    return;
  }
  const cuda_linear& lw = as_cuda(w, "linear");
  const dev_matrix& m = lw.matrix();
  // Views may be [n, in] or [n, heads, head_dim]: only the element counts must agree.
  const int64_t n = m.in > 0 ? x.numel() / m.in : 0;
  if (x.numel() != n * m.in || y.numel() != n * m.out)
    bad("linear", "x [" + std::to_string(n) + ", " + std::to_string(x.cols()) + "] and y do not fit W [" +
                      std::to_string(m.out) + ", " + std::to_string(m.in) + "]");
  const float* xp = f32(x, "linear", "x");
  float* yp = f32(y, "linear", "y");
  dense_linear(lw, xp, n, yp, false);
}

void cuda_backend::dense_linear(const cuda_linear& lw, const float* xp, int64_t n, float* yp, bool accumulate) {
  const dev_matrix& m = lw.matrix();
  // The q8 GEMV reading the blocks, the int8 tensor-core kernel (same arithmetic, the rows'
  // products one mma per weight block) or the f16 GEMM over the dequantized copy, by the
  // matrix's shape and n (path_for). GEMV launches take up to gemv_limit rows each.
  const linear_path path = path_for(lw, n);
  if (path == linear_path::mma) {
    void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(n, m.in), 16), "linear");
    gemv_q8_mma(m, xp, n, dev_prologue{}, accumulate, yp, ws, stream_);
    check_launch("linear (mma)");
    return;
  }
  if (path == linear_path::gemv) {
    if (n <= gemv_limit(m)) {
      gemv_rows(m, xp, n, yp, accumulate);  // one launch, segment-major output for groups
    } else {
      for (int i = 0; i < m.n_segs; ++i) gemv_rows(segment_of(m, i), xp, n, yp + n * m.seg[i], accumulate);
    }
    check_launch("linear (gemv)");
    return;
  }
  auto* x16 = static_cast<__half*>(grow(x16_, static_cast<size_t>(n * m.in) * 2, "linear"));
  f32_to_f16(xp, n * m.in, x16, stream_);
  check_launch("linear (convert)");
  // Row-major y [n, out] = x [n, in] W^T is column-major y^T = W x^T with W^T stored as
  // [in, out]; a group runs one GEMM per segment into its own slice of y. beta = 1 adds
  // the product to y.
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  for (int i = 0; i < m.n_segs; ++i) {
    const int64_t start = m.seg[i], rows = m.seg[i + 1] - start;
    check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(n),
                       static_cast<int>(m.in), &alpha, lw.f16() + start * m.in, CUDA_R_16F,
                       static_cast<int>(m.in), x16, CUDA_R_16F, static_cast<int>(m.in), &beta, yp + n * start,
                       CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "linear (gemm)");
  }
}

void cuda_backend::linear_fused(const linear_weight& w, tensor_view x, const linear_prologue& pro, tensor_view y,
                                bool accumulate) {
  using kind = linear_prologue::kind;
  if (pro.k == kind::none && !accumulate) return linear(w, x, y);
  const char* op = "linear_fused";
  const int64_t in = w.in_features(), out = w.out_features();
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (x.numel() != n * in || y.numel() != n * out)
    bad(op, "x and y do not fit W [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  const float* xp = f32(x, op, "x");
  float* yp = f32(y, op, "y");
  dev_prologue dp;
  if (pro.k == kind::rms_norm) {
    if (pro.norm_weight.numel() != in) bad(op, "norm_weight must have one value per input column");
    dp = {dev_prologue::rms_norm, f32(pro.norm_weight, op, "norm_weight"), pro.eps, nullptr};
  } else if (pro.k == kind::silu_mul) {
    if (pro.up.numel() != n * in) bad(op, "up must have the shape of x");
    dp = {dev_prologue::silu_mul, nullptr, 0.0f, f32(pro.up, op, "up")};
  }
  if (static_cast<const void*>(yp) == xp || (dp.up != nullptr && static_cast<const void*>(yp) == dp.up))
    bad(op, "y must not alias x or up");
  if (n == 0) return;
  const auto* lw = dynamic_cast<const cuda_linear*>(&w);
  // The kernel linear() would take (path_for), so that fused and separate ops agree bit for
  // bit wherever that kernel stages x. Decode with 8-bit activations: the GEMV stages x per
  // block, so the prologue and the add are part of its one launch. (Batch-invariant: up to
  // the GEMV's whole row limit; the staged prologue is the separate kernels' arithmetic bit
  // for bit, so rows past it agree too.)
  const linear_path path = lw == nullptr ? linear_path::gemm : path_for(*lw, n);
  const bool gemv_fits = lw != nullptr && (opt_.batch_invariant ? n <= gemv_limit(lw->matrix())
                                                                 : path == linear_path::gemv && n <= gemv_preferred(lw->matrix()));
  if (gemv_fits && opt_.q8_activations && gemv_q8_supported(lw->matrix()) &&
      (dp.kind == dev_prologue::none || gemv_q8_stageable(lw->matrix(), n))) {
    op_profiler::scope timed(prof_, "linear (fused)", stream_);
    const dev_matrix& m = lw->matrix();
    void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(n, m.in), 16), op);
    gemv_q8_fused(m, xp, n, dp, accumulate, yp, ws, stream_);
    check_launch("linear (fused)");
    return;
  }
  // The int8 tensor-core kernel stages x with the prologue too.
  if (path == linear_path::mma &&
      (dp.kind == dev_prologue::none || gemv_q8_mma_stageable(lw->matrix(), n))) {
    op_profiler::scope timed(prof_, "linear (fused)", stream_);
    const dev_matrix& m = lw->matrix();
    void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(n, m.in), 16), op);
    gemv_q8_mma(m, xp, n, dp, accumulate, yp, ws, stream_);
    check_launch("linear (fused)");
    return;
  }
  // Elsewhere the prologue's own kernel writes scratch (sized by the eager run before a
  // step is recorded, like every scratch here), then the linear reads it.
  tensor_view xin = x;
  if (dp.kind != dev_prologue::none) {
    xin = tensor_view::contiguous(grow(fused_x_, static_cast<size_t>(n * in) * 4, op), dtype::f32, {n, in}, dev());
    const tensor_view x2 = tensor_view::contiguous(x.data, dtype::f32, {n, in}, dev());
    if (dp.kind == dev_prologue::rms_norm) rms_norm(x2, pro.norm_weight, pro.eps, xin);
    else silu_mul(x2, tensor_view::contiguous(pro.up.data, dtype::f32, {n, in}, dev()), xin);
  }
  if (!accumulate) return linear(w, xin, y);
  if (lw != nullptr) {  // the GEMV epilogue or the GEMM's beta adds the product to y
    op_profiler::scope timed(prof_, "linear", stream_);
    dense_linear(*lw, xin.ptr<float>(), n, yp, true);
    return;
  }
  const tensor_view prod = tensor_view::contiguous(grow(fused_y_, static_cast<size_t>(n * out) * 4, op), dtype::f32,
                                                   {n, out}, dev());
  linear(w, xin, prod);  // EXL3
  const tensor_view y2 = tensor_view::contiguous(y.data, dtype::f32, {n, out}, dev());
  add(y2, prod, y2);
}

// The gate and up products and the SiLU gate in one launch where the kernel path_for picks
// for the group is the q8 GEMV or the int8 tensor-core kernel (the same bits as linear()
// then silu_mul(): kernels.hpp); elsewhere (the GEMM, f32 or EXL3 weights) the two ops.
void cuda_backend::linear_swiglu(const linear_weight& gate_up, tensor_view x, tensor_view product, tensor_view y) {
  const auto* lw = dynamic_cast<const cuda_linear*>(&gate_up);
  const int64_t in = gate_up.in_features(), out = gate_up.out_features();
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (lw != nullptr && opt_.q8_activations && swiglu_shaped(lw->matrix()) && gemv_q8_supported(lw->matrix()) &&
      x.numel() == n * in && y.numel() == n * (out / 2) && y.is_contiguous() && n > 0) {
    const dev_matrix& m = lw->matrix();
    const linear_path path = path_for(*lw, n);
    if ((path == linear_path::gemv && n <= gemv_limit(m)) || path == linear_path::mma) {
      op_profiler::scope timed(prof_, "linear (swiglu)", stream_);
      const float* xp = f32(x, "linear_swiglu", "x");
      float* yp = f32(y, "linear_swiglu", "y");
      void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(n, m.in), 16), "linear_swiglu");
      if (path == linear_path::mma) gemv_q8_mma_swiglu(m, xp, n, yp, ws, stream_);
      else gemv_q8_swiglu(m, xp, n, yp, ws, stream_);
      check_launch("linear (swiglu)");
      return;
    }
  }
  backend::linear_swiglu(gate_up, x, product, y);
}

// The o / down projection and the norm after it in one launch where path_for gives linear()
// the q8 GEMV (1-4 rows) or the int8 tensor-core kernel (up to 16 rows), for a Q4_1 / Q8_0
// matrix of one segment: gemv_q8_add_rms_norm / gemv_q8_mma_add_rms_norm, the same bits as
// linear() then add_rms_norm (kernels.hpp). Elsewhere (the GEMM, f32 or EXL3 weights, groups,
// more rows) the default's two ops.
void cuda_backend::linear_add_rms_norm(const linear_weight& w, tensor_view x, tensor_view product,
                                       tensor_view residual, tensor_view weight, float eps, tensor_view out,
                                       tensor_view kept) {
  const char* op = "linear_add_rms_norm";
  const int64_t in = w.in_features(), d = w.out_features();
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (x.numel() != n * in || product.numel() != n * d)
    bad(op, "x and product do not fit W [" + std::to_string(d) + ", " + std::to_string(in) + "]");
  if (residual.numel() != n * d || residual.cols() != d)
    bad(op, "residual must be [n, " + std::to_string(d) + "], one row per row of x");
  same_shape(residual, out, op);
  if (weight.numel() != d) bad(op, "weight must have one value per column");
  const bool keep = kept.data != nullptr;
  if (keep) same_shape(residual, kept, op);
  // The product is written while x is read and before the norm reads it; kept is a copy.
  if (product.data == x.data || product.data == residual.data || product.data == out.data)
    bad(op, "product must not alias x, residual or out");
  if (keep && (kept.data == x.data || kept.data == product.data || kept.data == residual.data || kept.data == out.data))
    bad(op, "kept must not alias the others");
  const auto* lw = dynamic_cast<const cuda_linear*>(&w);
  const linear_path path = lw != nullptr && n > 0 ? path_for(*lw, n) : linear_path::gemm;
  const bool gemv = path == linear_path::gemv && gemv_q8_add_rms_norm_supported(lw->matrix(), n);
  const bool mma = path == linear_path::mma && gemv_q8_mma_add_rms_norm_supported(lw->matrix(), n);
  if (opt_.q8_activations && (gemv || mma)) {
    op_profiler::scope timed(prof_, "linear (add_rms_norm)", stream_);
    const dev_matrix& m = lw->matrix();
    const float* xp = f32(x, op, "x");
    float* yp = f32(product, op, "product");
    if (norm_ticket_.data() == nullptr) {
      // Allocated and zeroed once, before any recording (never grown: one counter serves
      // every launch, as they run one after another on the stream); each launch leaves it zero.
      if (capturing_) bad(op, "its ticket must be allocated before recording");
      norm_ticket_.grow(sizeof(unsigned int));
      check(cudaMemsetAsync(norm_ticket_.data(), 0, sizeof(unsigned int), stream_), op);
    }
    const dev_add_norm nm{f32(residual, op, "residual"), f32(weight, op, "weight"), eps, f32(out, op, "out"),
                          keep ? f32(kept, op, "kept") : nullptr, static_cast<unsigned int*>(norm_ticket_.data())};
    void* ws = grow(q8_, std::max<size_t>(gemv_q8_scratch_bytes(n, m.in), 16), op);
    if (mma) gemv_q8_mma_add_rms_norm(m, xp, n, yp, nm, ws, stream_);
    else gemv_q8_add_rms_norm(m, xp, n, yp, nm, ws, stream_);
    check_launch("linear (add_rms_norm)");
    return;
  }
  backend::linear_add_rms_norm(w, x, product, residual, weight, eps, out, kept);
}

void cuda_backend::rope(tensor_view x, tensor_view positions, const rope_params& p) {
  op_profiler::scope timed(prof_, "rope", stream_);
  if (x.ndim != 3) bad("rope", "x must be [n, heads, head_dim]");
  if (positions.numel() != x.shape[0]) bad("rope", "one position per token row");
  const int rot = p.rotary_dims == 0 ? static_cast<int>(x.shape[2]) : p.rotary_dims;
  if (rot <= 0 || rot > x.shape[2] || rot % 2 != 0) bad("rope", "rotary_dims must be even and within head_dim");
  cuda::rope(f32(x, "rope", "x"), x.shape[0], x.shape[1], x.shape[2], i32(positions, "rope", "positions"),
             p.theta, rot, p.neox, stream_);
  check_launch("rope");
}

// TANDEM_CUDA_DECODE_VERIFY: unset or empty, 2 (verify steps of up to 16 rows on the decode
// kernel); 1 (any verify of up to 16 rows a sequence); 0 (the prefill path); anything else
// is an error. Read at each call (tests switch it).
int cuda_backend::verify_on_decode() const {
  const char* e = std::getenv("TANDEM_CUDA_DECODE_VERIFY");
  if (e == nullptr || *e == '\0') return 2;
  const std::string v = e;
  if (v != "0" && v != "1")
    bad("attention", "TANDEM_CUDA_DECODE_VERIFY must be 0 or 1 (or unset), not '" + v + "'");
  return v == "1" ? 1 : 0;
}

void cuda_backend::attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer,
                             const attention_batch& batch, float scale, tensor_view out) {
  // A step of a few new tokens per sequence (decode: one; a speculative verify: a token and
  // its draft) takes the decode kernel, in one launch; longer ones the prefill path. A
  // verify takes it up to 16 rows in all (TANDEM_CUDA_DECODE_VERIFY: unset, that rule; 1,
  // any step of up to 16 rows a sequence; 0, never): on an H100 (bench_cuda_kernels,
  // session 16) one sequence's 2-16 rows ran 1.6-3.0x faster than the prefill path's four
  // launches, 8 sequences x 8 rows 1.04x at 256 keys but 0.75x at 2048 (each row rereads its
  // sequence's keys).
  const int verify = verify_on_decode();
  const bool few_rows = batch.n_tokens == batch.n_seqs ||
                        (verify != 0 && batch.max_query_len >= 1 && batch.max_query_len <= decode_max_rows() &&
                         (verify == 1 || batch.n_tokens <= decode_max_rows()));
  op_profiler::scope timed(prof_, few_rows ? "attention (decode)" : "attention (prefill)", stream_);
  auto* ckv = dynamic_cast<cuda_kv*>(&kv);
  if (!ckv) bad("attention", "KV storage was not allocated by backend.cuda");
  const dev_kv pool = ckv->layer(layer);
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3) bad("attention", "q, k, v must be [n, heads, head_dim]");
  const int n_heads = static_cast<int>(q.shape[1]);
  if (q.shape[2] != pool.head_dim || k.shape[1] != pool.n_kv_heads || k.shape[2] != pool.head_dim ||
      n_heads % pool.n_kv_heads != 0)
    bad("attention", "head shapes do not match the KV pool (GQA needs n_heads a multiple of n_kv_heads)");
  if (q.shape[0] != batch.n_tokens || k.shape[0] != batch.n_tokens || v.numel() != k.numel())
    bad("attention", "q, k, v must have batch.n_tokens rows");
  same_shape(q, out, "attention");
  dev_batch b;
  b.n_seqs = batch.n_seqs;
  b.n_tokens = batch.n_tokens;
  b.max_pages = batch.max_pages_per_seq;
  b.query_start = i32(batch.query_start, "attention", "query_start");
  b.seq_lens = i32(batch.seq_lens, "attention", "seq_lens");
  b.page_table = i32(batch.page_table, "attention", "page_table");
  b.slot_mapping = i32(batch.slot_mapping, "attention", "slot_mapping");
  // Batch-invariant: every row on the prefill kernel, whose key order per query row does
  // not depend on the other rows (the decode kernel splits keys by the batch's size).
  const bool decode = !opt_.batch_invariant && few_rows && n_heads / pool.n_kv_heads <= 8;
  dev_rope dr;
  if (batch.rope != nullptr) {
    dr = {true, batch.rope->theta, batch.rope->rotary_dims, batch.rope->neox};
    const int rot = dr.rotary_dims == 0 ? pool.head_dim : dr.rotary_dims;
    if (rot <= 0 || rot > pool.head_dim || rot % 2 != 0) bad("attention", "rotary_dims must be even and within head_dim");
  }
  if (decode) {
    if (dr.on) attach_rope_table(dr, pool.head_dim, b.max_pages * pool.page_size);
    const decode_plan plan = plan_decode(b.n_seqs, pool.n_kv_heads, b.max_pages, pool.page_size, pool.head_dim,
                                         n_heads, pool.type, b.n_tokens);
    void* part = grow(attn_part_, plan.scratch_bytes, "attention");
    if (attn_tickets_.grow(plan.ticket_bytes)) {
      // Zeroed once; every launch leaves them zeroed again.
      if (capturing_) bad("attention", "needs more scratch while recording");
      check(cudaMemsetAsync(attn_tickets_.data(), 0, plan.ticket_bytes, stream_), "attention");
      drop_graphs(graph_drop::tickets);
    }
    attention_decode(f32(q, "attention", "q"), f32(k, "attention", "k"), f32(v, "attention", "v"), n_heads, pool, b,
                     dr, scale, f32(out, "attention", "out"), plan, part, static_cast<int*>(attn_tickets_.data()),
                     stream_);
    check_launch("attention (decode)");
    return;
  }
  if (dr.on) {
    const int32_t* positions = i32(batch.positions, "attention", "positions");
    cuda::rope(f32(q, "attention", "q"), q.shape[0], q.shape[1], q.shape[2], positions, dr.theta, dr.rotary_dims,
               dr.neox, stream_);
    cuda::rope(f32(k, "attention", "k"), k.shape[0], k.shape[1], k.shape[2], positions, dr.theta, dr.rotary_dims,
               dr.neox, stream_);
    check_launch("attention (rope)");
  }
  kv_write(f32(k, "attention", "k"), f32(v, "attention", "v"), b, pool, stream_);
  check_launch("attention (kv write)");
  attention_prefill_tc(f32(q, "attention", "q"), n_heads, pool, b, scale, f32(out, "attention", "out"), stream_);
  check_launch("attention (prefill)");
}

void cuda_backend::silu_mul(tensor_view gate, tensor_view up, tensor_view out) {
  op_profiler::scope timed(prof_, "silu_mul", stream_);
  same_shape(gate, up, "silu_mul");
  same_shape(gate, out, "silu_mul");
  cuda::silu_mul(f32(gate, "silu_mul", "gate"), f32(up, "silu_mul", "up"), gate.numel(),
                 f32(out, "silu_mul", "out"), stream_);
  check_launch("silu_mul");
}

void cuda_backend::add(tensor_view a, tensor_view b, tensor_view out) {
  op_profiler::scope timed(prof_, "add", stream_);
  same_shape(a, b, "add");
  same_shape(a, out, "add");
  cuda::add(f32(a, "add", "a"), f32(b, "add", "b"), a.numel(), f32(out, "add", "out"), stream_);
  check_launch("add");
}

void cuda_backend::gather_rows(tensor_view x, tensor_view rows, tensor_view out) {
  op_profiler::scope timed(prof_, "gather_rows", stream_);
  if (out.rows() != rows.numel() || out.cols() != x.cols()) bad("gather_rows", "out must be [m, d]");
  const int64_t ldx = row_stride(x, "gather_rows", "x"), ldo = row_stride(out, "gather_rows", "out");
  cuda::gather_rows(x.ptr<float>(), x.rows(), x.cols(), ldx, i32(rows, "gather_rows", "rows"), rows.numel(),
                    out.ptr<float>(), ldo, stream_);
  check_launch("gather_rows");
}

void cuda_backend::sample(tensor_view logits, std::span<const sampling_params> params, tensor_view ids) {
  op_profiler::scope timed(prof_, "sample", stream_);
  const int64_t m = logits.rows();
  const int vocab = static_cast<int>(logits.cols());
  if (static_cast<int64_t>(params.size()) != m || ids.numel() != m) bad("sample", "one parameter set and id per row");
  if (vocab <= 0) throw error("sample: empty vocabulary");
  if (m == 0) return;
  if (capturing_) bad("sample", "sampling cannot be recorded (it returns ids to the host)");
  const float* lp = f32(logits, "sample", "logits");
  auto* out = const_cast<int32_t*>(i32(ids, "sample", "ids"));
  bool all_greedy = true;
  std::vector<dev_sampling> dp(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const sampling_params& p = params[i];
    dp[i] = {p.temperature, p.top_p, p.min_p, p.top_k, p.seed, p.step, p.greedy() ? 1 : 0};
    all_greedy = all_greedy && p.greedy();
  }
  if (all_greedy) {
    // Tickets start zero and every launch leaves them so; a new row count lays the
    // workspace out afresh, so it is zeroed again (this op is never recorded).
    const size_t bytes = argmax_workspace_bytes(m, vocab);
    if (argmax_ws_.grow(bytes) || m != argmax_rows_) {
      check(cudaMemsetAsync(argmax_ws_.data(), 0, bytes, stream_), "sample");
      argmax_rows_ = m;
    }
    argmax_rows(lp, m, vocab, out, argmax_ws_.data(), stream_);
  } else {
    void* pp = grow(sampler_params_, dp.size() * sizeof(dev_sampling), "sample");
    void* ws = grow(sampler_ws_, sampler_workspace_bytes(m, vocab), "sample");
    copy_to_device(pp, dp.data(), dp.size() * sizeof(dev_sampling));
    sample_rows(lp, m, vocab, static_cast<const dev_sampling*>(pp), ws, out, stream_);
  }
  check_launch("sample");
  // Same contract as the reference: a row with no finite logit is an error, not a token.
  std::vector<int32_t> host(static_cast<size_t>(m));
  copy_to_host(host.data(), out, host.size() * 4);
  synchronize();
  for (int64_t i = 0; i < m; ++i)
    if (host[i] < 0) throw error("sample: logits row " + std::to_string(i) + " has no finite value");
}

}  // namespace tandem::cuda
