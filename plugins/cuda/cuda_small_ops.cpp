// backend.cuda's small ops (attention_full, dynamic_conv, top_k): the host defaults of
// core/src/base/backend_small_ops.cpp as kernels (tandem_cuda/small_ops.hpp), without their
// round trip through host memory. Host-side checks of the views, then one or two launches
// on the stream; nothing is read back and scratch comes from grown buffers, so the ops can
// be recorded in a step's CUDA graph.
#include <string>

#include "check.hpp"
#include "cuda_backend.hpp"
#include "cuda_checks.hpp"
#include "tandem/error.hpp"
#include "tandem_cuda/small_ops.hpp"

namespace tandem::cuda {
namespace {

std::string shape_str(const tensor_view& v) {
  std::string s = "[";
  for (int d = 0; d < v.ndim; ++d) s += (d ? ", " : "") + std::to_string(v.shape[d]);
  return s + "]";
}

// Whether two contiguous views share a byte.
bool overlaps(const tensor_view& a, const tensor_view& b) {
  const auto* alo = static_cast<const char*>(a.data);
  const auto* blo = static_cast<const char*>(b.data);
  const int64_t an = a.numel() * static_cast<int64_t>(traits(a.type).block_bytes);
  const int64_t bn = b.numel() * static_cast<int64_t>(traits(b.type).block_bytes);
  if (alo == nullptr || blo == nullptr || an == 0 || bn == 0) return false;
  return alo < blo + bn && blo < alo + an;
}

}  // namespace

void cuda_backend::attention_full(tensor_view q, tensor_view k, tensor_view v, float scale, tensor_view out) {
  const char* op = "attention_full";
  op_profiler::scope timed(prof_, op, stream_);
  check_view(q, dtype::f32, op, "q");
  check_view(k, dtype::f32, op, "k");
  check_view(v, dtype::f32, op, "v");
  check_view(out, dtype::f32, op, "out");
  if (q.ndim != 3 || k.ndim != 3 || v.ndim != 3 || out.ndim != 3)
    bad(op, "q, k, v and out must be 3-d, got q " + shape_str(q) + ", k " + shape_str(k) + ", v " + shape_str(v) +
                ", out " + shape_str(out));
  const int64_t n = q.shape[0], heads = q.shape[1], D = q.shape[2], m = k.shape[0], kv_heads = k.shape[1];
  if (k.shape[2] != D || v.shape[0] != m || v.shape[1] != kv_heads || v.shape[2] != D)
    bad(op, "k " + shape_str(k) + " and v " + shape_str(v) + " must both be [m, kv_heads, " + std::to_string(D) + "]");
  if (out.shape[0] != n || out.shape[1] != heads || out.shape[2] != D)
    bad(op, "out is " + shape_str(out) + ", expected q's shape " + shape_str(q));
  if (m < 1 || kv_heads < 1 || heads % kv_heads != 0)
    bad(op, "needs at least one key and heads (" + std::to_string(heads) + ") a multiple of kv_heads (" +
                std::to_string(kv_heads) + ")");
  if (D < 1 || D > attention_full_max_head_dim)
    bad(op, "head_dim " + std::to_string(D) + " is outside this backend's 1.." +
                std::to_string(attention_full_max_head_dim));
  if (const size_t smem = attention_full_smem_bytes(D); smem > prop_.sharedMemPerBlockOptin)
    bad(op, "head_dim " + std::to_string(D) + " needs " + std::to_string(smem) + " bytes of shared memory per block, " +
                "this device has " + std::to_string(prop_.sharedMemPerBlockOptin));
  if (kv_heads > 65535 || m > (int64_t{1} << 31) - 1 || n * (heads / kv_heads) > (int64_t{1} << 36))
    bad(op, std::to_string(kv_heads) + " kv heads, " + std::to_string(m) + " keys, " + std::to_string(n) +
                " rows: beyond the kernel's grid (kv_heads <= 65535, m < 2^31)");
  if (overlaps(out, k) || overlaps(out, v)) bad(op, "out must not overlap k or v");
  if (out.data != q.data && overlaps(out, q)) bad(op, "out must be q itself or not overlap it");
  if (n == 0 || heads == 0) return;
  const attention_full_plan plan = plan_attention_full(n, heads, kv_heads, D, m, prop_.multiProcessorCount);
  void* part = plan.part_bytes > 0 ? grow(attn_full_part_, plan.part_bytes, op) : nullptr;
  cuda::attention_full(plan, q.ptr<float>(), k.ptr<float>(), v.ptr<float>(), scale, out.ptr<float>(), part, stream_);
  check_launch(op);
}

void cuda_backend::dynamic_conv(tensor_view x, tensor_view taps, tensor_view base, tensor_view out) {
  const char* op = "dynamic_conv";
  op_profiler::scope timed(prof_, op, stream_);
  check_view(x, dtype::f32, op, "x");
  check_view(taps, dtype::f32, op, "taps");
  check_view(base, dtype::f32, op, "base");
  check_view(out, dtype::f32, op, "out");
  const int64_t n = x.rows(), d = x.cols(), groups = taps.cols() / 2;
  if (taps.rows() != n || taps.cols() % 2 != 0 || groups < 1 || d % groups != 0)
    bad(op, "taps is " + shape_str(taps) + ", expected [" + std::to_string(n) + ", 2G] with G dividing x's " +
                std::to_string(d) + " columns");
  if (base.numel() != 2 * groups) bad(op, "base is " + shape_str(base) + ", expected [" + std::to_string(groups) + ", 2]");
  if (out.rows() != n || out.cols() != d) bad(op, "out is " + shape_str(out) + ", expected x's shape " + shape_str(x));
  if (overlaps(out, x) || overlaps(out, taps) || overlaps(out, base)) bad(op, "out must not overlap x, taps or base");
  if (n == 0 || d == 0) return;
  cuda::dynamic_conv(x.ptr<float>(), taps.ptr<float>(), base.ptr<float>(), n, d, groups, out.ptr<float>(), stream_);
  check_launch(op);
}

void cuda_backend::top_k(tensor_view x, int k, tensor_view ids, tensor_view values) {
  const char* op = "top_k";
  op_profiler::scope timed(prof_, op, stream_);
  check_view(x, dtype::f32, op, "x");
  check_view(ids, dtype::i32, op, "ids");
  check_view(values, dtype::f32, op, "values");
  const int64_t n = x.rows(), m = x.cols();
  if (k < 1 || k > m) bad(op, "k is " + std::to_string(k) + ", not 1.." + std::to_string(m));
  if (k > top_k_max_k) bad(op, "k is " + std::to_string(k) + ", this backend takes at most " + std::to_string(top_k_max_k));
  if (m > top_k_max_cols)
    bad(op, "rows of " + std::to_string(m) + " columns: this backend takes at most " + std::to_string(top_k_max_cols));
  if (n > (int64_t{1} << 31) - 1) bad(op, std::to_string(n) + " rows: at most 2^31 - 1");
  if (ids.rows() != n || ids.cols() != k || values.rows() != n || values.cols() != k)
    bad(op, "ids " + shape_str(ids) + " and values " + shape_str(values) + " must be [" + std::to_string(n) + ", " +
                std::to_string(k) + "]");
  if (overlaps(ids, x) || overlaps(values, x) || overlaps(ids, values))
    bad(op, "ids, values and x must not overlap");
  if (n == 0) return;
  const top_k_plan plan = plan_top_k(n, m, k);
  void* ws = plan.workspace_bytes > 0 ? grow(topk_ws_, plan.workspace_bytes, op) : nullptr;
  cuda::top_k(plan, x.ptr<float>(), ids.ptr<int32_t>(), values.ptr<float>(), ws, stream_);
  check_launch(op);
}

}  // namespace tandem::cuda
