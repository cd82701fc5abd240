// backend.cuda's MoE ops: load_experts, moe_route, moe_experts (fused, graph-capturable) and
// moe_experts_loop (the unfused per-expert baseline). Argument checks on the host, then the
// launchers of tandem_cuda/moe.hpp (bf16 / f16 / f32 experts) or tandem_exl3_cuda/exl3_moe.hpp
// (exl3 experts).
//
// moe_experts, f16 experts: moe_forward with the GEMV kernels up to moe_gemv_max_tokens (8)
// tokens (f32 activations: backend.cpu's result up to summation order), the tensor-core
// grouped GEMM above (x and h rounded to f16, f32 accumulation: ~5e-4 relative). EXL3
// experts: exl3_moe_forward (the fat-expert kernel; fp16 roundings as exl3_gemv's); EXL3
// experts the kernel cannot take (padded, biased, permuted, mixed K) are decoded at load and
// run as f16 experts. Ids
// outside [0, n_experts) contribute nothing (they are device data: backend.cpu's error for
// them would need a read back).
#include "cuda_moe.hpp"

#include <algorithm>
#include <deque>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "check.hpp"
#include "cuda_backend.hpp"
#include "cuda_checks.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/descriptor.hpp"
#include "tandem_exl3/tensor.hpp"

namespace tandem::cuda {

cuda_experts::cuda_experts(int n_experts, int64_t hidden, int64_t ffn, dtype source, std::unique_ptr<cuda_buffer> w13,
                           std::unique_ptr<cuda_buffer> w2)
    : n_experts_(n_experts), hidden_(hidden), ffn_(ffn), source_(source), w13_(std::move(w13)), w2_(std::move(w2)) {
  dev_ = {static_cast<const __half*>(w13_->data()), static_cast<const __half*>(w2_->data()), n_experts, hidden, ffn};
}

cuda_experts::cuda_experts(int n_experts, int64_t hidden, int64_t ffn,
                           std::vector<std::unique_ptr<cuda_exl3_linear>> linears,
                           const exl3::cuda::exl3_moe_shape& shape, std::unique_ptr<cuda_buffer> table)
    : n_experts_(n_experts),
      hidden_(hidden),
      ffn_(ffn),
      source_(exl3::exl3_tensor::type),
      linears_(std::move(linears)),
      shape_(shape),
      table_(std::move(table)) {}

namespace {

std::string dims_str(const std::vector<int64_t>& shape) {
  std::string s;
  for (int64_t d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

bool given(const tensor_view& v) { return v.ndim > 0 || v.data != nullptr; }

// A 2-D f32 view with rows `ld` floats apart (or any contiguous view, as [rows(), cols()]).
struct rows2 {
  float* p = nullptr;
  int64_t rows = 0, cols = 0, ld = 0;
};

rows2 f32_rows(const tensor_view& v, const char* op, const char* what) {
  if (v.dev.kind != device_kind::cuda) bad(op, std::string(what) + " is not in device memory");
  if (v.type != dtype::f32) bad(op, std::string(what) + " is " + std::string(name(v.type)) + ", expected f32");
  if (v.ndim == 2 && (v.strides[1] == 1 || v.shape[1] == 1) && v.strides[0] >= v.shape[1])
    return {v.ptr<float>(), v.shape[0], v.shape[1], std::max<int64_t>(v.strides[0], 1)};
  if (!v.is_contiguous()) bad(op, std::string(what) + " must be 2-D with unit column stride, or contiguous");
  return {v.ptr<float>(), v.rows(), v.cols(), v.cols()};
}

// Rows a 16-byte vector kernel can read and write.
void check_aligned(const rows2& r, const char* op, const char* what) {
  if (reinterpret_cast<uintptr_t>(r.p) % 16 != 0 || r.ld % 4 != 0)
    bad(op, std::string(what) + " rows must be 16-byte aligned (data and row stride)");
}

template <class T>
T* contiguous(const tensor_view& v, dtype t, int64_t rows, int64_t cols, const char* op, const char* what) {
  if (v.dev.kind != device_kind::cuda) bad(op, std::string(what) + " is not in device memory");
  if (v.type != t) bad(op, std::string(what) + " is " + std::string(name(v.type)) + ", expected " + std::string(name(t)));
  if (!v.is_contiguous()) bad(op, std::string(what) + " is not contiguous");
  if (v.rows() != rows || v.cols() != cols)
    bad(op, std::string(what) + " is [" + std::to_string(v.rows()) + ", " + std::to_string(v.cols()) + "], expected [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  return v.ptr<T>();
}

// The bytes [lo, hi) a view spans, for aliasing checks.
bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0) return false;
  const auto* ac = static_cast<const char*>(a);
  const auto* bc = static_cast<const char*>(b);
  return ac < bc + b_bytes && bc < ac + a_bytes;
}
size_t span_bytes(const rows2& r) { return r.rows == 0 ? 0 : static_cast<size_t>((r.rows - 1) * r.ld + r.cols) * 4; }

// backend.cpu's check_routing, with this backend's prefix.
void check_routing(const moe_routing& r, const char* op) {
  if (r.n_experts <= 0) bad(op, "routing n_experts " + std::to_string(r.n_experts) + " must be positive");
  if (r.n_group <= 0 || r.n_experts % r.n_group != 0)
    bad(op, "routing n_group " + std::to_string(r.n_group) + " must be positive and divide n_experts " +
                std::to_string(r.n_experts));
  if (r.topk_group <= 0 || r.topk_group > r.n_group)
    bad(op, "routing topk_group " + std::to_string(r.topk_group) + " must be in [1, n_group = " +
                std::to_string(r.n_group) + "]");
  const int in_groups = r.topk_group * (r.n_experts / r.n_group);
  if (r.top_k <= 0 || r.top_k > in_groups)
    bad(op, "routing top_k " + std::to_string(r.top_k) + " must be in [1, " + std::to_string(in_groups) +
                "] (the experts of topk_group groups)");
  if (r.top_k > moe_route_max_top_k)
    bad(op, "routing top_k " + std::to_string(r.top_k) + " is above this backend's " +
                std::to_string(moe_route_max_top_k));
  if (!moe_route_fits(r.n_experts, r.n_group))
    bad(op, "routing n_experts " + std::to_string(r.n_experts) + " is too large for one token's shared memory");
}

moe_src src_of(dtype t) {
  return t == dtype::f32 ? moe_src::f32 : t == dtype::f16 ? moe_src::f16 : moe_src::bf16;
}

// Checked arguments of moe_experts / moe_experts_loop.
struct moe_args {
  const cuda_experts* w = nullptr;
  rows2 x, out;
  int64_t n = 0;
  int k = 0;
  const int32_t* ids = nullptr;
  const float* weights = nullptr;
};

moe_args check_moe(const expert_weights& w, const tensor_view& x, const tensor_view& ids, const tensor_view& weights,
                   const tensor_view& out, const char* op) {
  moe_args a;
  a.w = dynamic_cast<const cuda_experts*>(&w);
  if (a.w == nullptr) bad(op, "w was not loaded by backend.cuda load_experts");
  const int64_t hidden = a.w->hidden();
  a.x = f32_rows(x, op, "x");
  a.out = f32_rows(out, op, "out");
  a.n = a.x.rows;
  if (a.x.cols != hidden)
    bad(op, "x is [" + std::to_string(a.x.rows) + ", " + std::to_string(a.x.cols) + "], expected [n, " +
                std::to_string(hidden) + "]");
  if (a.out.rows != a.n || a.out.cols != hidden)
    bad(op, "out is [" + std::to_string(a.out.rows) + ", " + std::to_string(a.out.cols) + "], expected [" +
                std::to_string(a.n) + ", " + std::to_string(hidden) + "]");
  if (ids.ndim != 2 || ids.shape[1] <= 0) bad(op, "ids must be i32 [n, k] with k > 0");
  const int64_t k = ids.shape[1];
  if (k > 1024) bad(op, "ids has " + std::to_string(k) + " slots per token (at most 1024)");
  a.k = static_cast<int>(k);
  a.ids = contiguous<int32_t>(ids, dtype::i32, a.n, k, op, "ids");
  a.weights = contiguous<float>(weights, dtype::f32, a.n, k, op, "weights");
  const size_t out_b = span_bytes(a.out);
  if (overlaps(a.out.p, out_b, a.x.p, span_bytes(a.x)) ||
      overlaps(a.out.p, out_b, a.weights, static_cast<size_t>(a.n * k) * 4) ||
      overlaps(a.out.p, out_b, a.ids, static_cast<size_t>(a.n * k) * 4))
    bad(op, "out must not overlap x, ids or weights");
  if (a.n > 0) {
    check_aligned(a.x, op, "x");
    check_aligned(a.out, op, "out");
  }
  return a;
}

}  // namespace

namespace {

// Whether the fat-expert kernel takes these EXL3 experts as stored: unpadded (in = k, out =
// n), no bias, the identity output order, one K and codebook for all. Shapes and types are
// checked by load_experts itself.
bool fits_exl3_moe(std::span<const tensor_info* const> gate, std::span<const tensor_info* const> up,
                   std::span<const tensor_info* const> down) {
  const exl3::exl3_tensor* first =
      gate[0] ? exl3::exl3_tensor::of(gate[0]->type, gate[0]->data, gate[0]->nbytes) : nullptr;
  for (auto list : {gate, up, down})
    for (const tensor_info* t : list) {
      const exl3::exl3_tensor* d = t ? exl3::exl3_tensor::of(t->type, t->data, t->nbytes) : nullptr;
      if (d == nullptr || first == nullptr) return true;  // load_experts reports it
      if (d->k != d->in_features || d->n != d->out_features || d->bias != nullptr || d->bits != first->bits ||
          d->codebook != first->codebook)
        return false;
      if (d->out_perm != nullptr)
        for (int64_t i = 0; i < d->out_features; ++i)
          if (d->out_perm[i] != i) return false;
    }
  return true;
}

}  // namespace

std::unique_ptr<expert_weights> cuda_backend::load_experts(std::span<const tensor_info* const> gate,
                                                           std::span<const tensor_info* const> up,
                                                           std::span<const tensor_info* const> down) {
  const char* op = "load_experts";
  if (capturing_) bad(op, "called while recording a step");
  if (gate.empty() || gate.size() != up.size() || gate.size() != down.size())
    bad(op, std::to_string(gate.size()) + " gate, " + std::to_string(up.size()) + " up and " +
                std::to_string(down.size()) + " down tensors: expected the same positive count");
  if (gate[0] == nullptr) bad(op, "gate[0] is null");
  if (gate[0]->shape.size() != 2 || gate[0]->shape[0] <= 0 || gate[0]->shape[1] <= 0)
    bad(op, "gate[0] '" + gate[0]->name + "' is not a 2-D {ffn, hidden} weight");
  const int64_t ffn = gate[0]->shape[0], hidden = gate[0]->shape[1];
  const int E = static_cast<int>(gate.size());
  const bool exl3 = gate[0]->type == exl3::exl3_tensor::type;  // the opaque experts it loads
  auto check_shape = [&](const tensor_info* t, const char* what, size_t e, int64_t rows, int64_t cols) {
    const std::string arg = std::string(what) + "[" + std::to_string(e) + "]";
    if (t == nullptr) bad(op, arg + " is null");
    if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols)
      bad(op, arg + " '" + t->name + "' is {" + dims_str(t->shape) + "}, expected {" + std::to_string(rows) + ", " +
                  std::to_string(cols) + "}");
    if (exl3 != (t->type == exl3::exl3_tensor::type))
      bad(op, arg + " '" + t->name + "' is " + t->type_name() + ", but gate[0] is " + gate[0]->type_name() +
                  " (exl3 experts cannot be mixed with others)");
    if (!exl3) {
      if (t->type != dtype::bf16 && t->type != dtype::f16 && t->type != dtype::f32)
        bad(op, arg + " '" + t->name + "' has type " + t->type_name() +
                    " (backend.cuda experts: bf16, f16, f32 or exl3)");
      if (t->nbytes < static_cast<size_t>(rows * cols) * traits(t->type).block_bytes)
        bad(op, arg + " '" + t->name + "' is truncated");
    }
  };
  for (size_t e = 0; e < gate.size(); ++e) {
    check_shape(gate[e], "gate", e, ffn, hidden);
    check_shape(up[e], "up", e, ffn, hidden);
    check_shape(down[e], "down", e, hidden, ffn);
  }

  if (exl3 && !fits_exl3_moe(gate, up, down)) {
    // Padded experts (hidden or ffn not a multiple of 128, as in tiny test models), biases or
    // permuted outputs: the fat-expert kernel cannot take them, so W is decoded on the host
    // (exl3::unpadded_rows_f32, as backend.cpu's reconstruct) and the experts load as f16.
    std::vector<std::vector<float>> decoded;
    std::deque<tensor_info> infos;
    std::vector<const tensor_info*> g, u, d;
    for (size_t e = 0; e < gate.size(); ++e)
      for (auto [t, list] : {std::pair{gate[e], &g}, std::pair{up[e], &u}, std::pair{down[e], &d}}) {
        const exl3::exl3_tensor& x = exl3::checked_descriptor(*t, "backend.cuda load_experts");
        decoded.emplace_back(static_cast<size_t>(x.out_features * x.in_features));
        exl3::unpadded_rows_f32(x, decoded.back().data(), [](int64_t n, const auto& fn) {
          for (int64_t i = 0; i < n; ++i) fn(i);
        });
        infos.push_back({t->name, dtype::f32, t->shape, decoded.back().data(), decoded.back().size() * 4});
        list->push_back(&infos.back());
      }
    return load_experts(g, u, d);
  }
  if (exl3) {
    // The fat-expert kernel (fits_exl3_moe holds).
    if (E > exl3::cuda::exl3_moe_max_experts)
      bad(op, std::to_string(E) + " EXL3 experts (at most " + std::to_string(exl3::cuda::exl3_moe_max_experts) + ")");
    const exl3::exl3_tensor* first = exl3::exl3_tensor::of(gate[0]->type, gate[0]->data, gate[0]->nbytes);
    if (first == nullptr) bad(op, "gate[0] '" + gate[0]->name + "' has no exl3_tensor descriptor");
    auto check_exl3 = [&](const tensor_info* t) {  // the rest: fits_exl3_moe above
      if (exl3::exl3_tensor::of(t->type, t->data, t->nbytes) == nullptr)
        bad(op, "'" + t->name + "' has no exl3_tensor descriptor");
    };
    std::vector<std::unique_ptr<cuda_exl3_linear>> lin;
    std::vector<exl3::cuda::dev_exl3> g, u, d;
    lin.reserve(3 * gate.size());
    for (size_t e = 0; e < gate.size(); ++e) {
      for (const tensor_info* t : {gate[e], up[e], down[e]}) {
        check_exl3(t);
        lin.push_back(std::make_unique<cuda_exl3_linear>(*t, stream_));
      }
      g.push_back(lin[3 * e]->dev());
      u.push_back(lin[3 * e + 1]->dev());
      d.push_back(lin[3 * e + 2]->dev());
    }
    exl3::cuda::exl3_moe_shape s{E, 1, hidden, ffn, first->bits, first->codebook};
    std::vector<exl3::cuda::exl3_moe_expert> table;
    try {
      table = exl3::cuda::exl3_moe_table(s, g.data(), u.data(), d.data());
    } catch (const std::exception& ex) {
      bad(op, ex.what());
    }
    auto tb = std::make_unique<cuda_buffer>(table.size() * sizeof(table[0]));
    check(cudaMemcpyAsync(tb->data(), table.data(), table.size() * sizeof(table[0]), cudaMemcpyHostToDevice, stream_),
          op);
    synchronize();
    return std::make_unique<cuda_experts>(E, hidden, ffn, std::move(lin), s, std::move(tb));
  }

  if (E > moe_max_experts) bad(op, std::to_string(E) + " experts (at most " + std::to_string(moe_max_experts) + ")");
  if (hidden % 8 != 0 || ffn % 8 != 0)
    bad(op, "hidden " + std::to_string(hidden) + " and ffn " + std::to_string(ffn) + " must be multiples of 8");
  const size_t mat = static_cast<size_t>(hidden * ffn);
  auto w13 = std::make_unique<cuda_buffer>(static_cast<size_t>(E) * 2 * mat * 2);
  auto w2 = std::make_unique<cuda_buffer>(static_cast<size_t>(E) * mat * 2);
  // One expert's three tensors at a time through a device staging buffer, converted there.
  size_t stage_bytes = 0;
  for (size_t e = 0; e < gate.size(); ++e) {
    size_t b = 0;
    for (const tensor_info* t : {gate[e], up[e], down[e]}) b += mat * traits(t->type).block_bytes;
    stage_bytes = std::max(stage_bytes, b);
  }
  cuda_buffer stage(stage_bytes + 256 * 3), flag(16);
  check(cudaMemsetAsync(flag.data(), 0, 16, stream_), op);
  auto* s8 = static_cast<uint8_t*>(stage.data());
  auto* flag_p = static_cast<unsigned*>(flag.data());
  auto* w13p = static_cast<__half*>(w13->data());
  auto* w2p = static_cast<__half*>(w2->data());
  dtype source = gate[0]->type;
  for (size_t e = 0; e < gate.size(); ++e) {
    const tensor_info* parts[3] = {gate[e], up[e], down[e]};
    size_t off = 0;
    for (int i = 0; i < 3; ++i) {
      const tensor_info* t = parts[i];
      if (t->type != source) source = dtype::f16;  // mixed sources: reported as f16
      const size_t bytes = mat * traits(t->type).block_bytes;
      check(cudaMemcpyAsync(s8 + off, t->data, bytes, cudaMemcpyHostToDevice, stream_), op);
      const int64_t rows = i < 2 ? ffn : hidden, cols = i < 2 ? hidden : ffn;
      __half* dst = i < 2 ? w13p + e * 2 * mat : w2p + e * mat;
      moe_convert_rows(s8 + off, src_of(t->type), rows, cols, dst,
                       i == 0 ? moe_rows::gate : i == 1 ? moe_rows::up : moe_rows::plain, flag_p, stream_);
      check_launch(op);
      off += (bytes + 255) / 256 * 256;
    }
  }
  unsigned over = 0;
  check(cudaMemcpyAsync(&over, flag_p, 4, cudaMemcpyDeviceToHost, stream_), op);
  synchronize();  // the staging buffer dies here
  if (over != 0)
    bad(op, "a weight of these experts (gate[0] '" + gate[0]->name +
                "') is beyond f16's range (|w| > 65504): backend.cuda keeps experts as f16");
  return std::make_unique<cuda_experts>(E, hidden, ffn, source, std::move(w13), std::move(w2));
}

void cuda_backend::moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                             tensor_view weights) {
  op_profiler::scope timed(prof_, "moe_route", stream_);
  const char* op = "moe_route";
  check_routing(r, op);
  const rows2 lv = f32_rows(logits, op, "logits");
  if (lv.cols != r.n_experts)
    bad(op, "logits has " + std::to_string(lv.cols) + " columns, expected n_experts " + std::to_string(r.n_experts));
  const float* b = nullptr;
  if (given(bias)) b = contiguous<float>(bias, dtype::f32, 1, r.n_experts, op, "bias");
  auto* iv = contiguous<int32_t>(ids, dtype::i32, lv.rows, r.top_k, op, "ids");
  auto* wv = contiguous<float>(weights, dtype::f32, lv.rows, r.top_k, op, "weights");
  const size_t kb = static_cast<size_t>(lv.rows * r.top_k) * 4;
  if (overlaps(wv, kb, lv.p, span_bytes(lv)) || overlaps(iv, kb, lv.p, span_bytes(lv)) || overlaps(iv, kb, wv, kb))
    bad(op, "ids, weights and logits must not overlap");
  if (lv.rows == 0) return;
  const dev_moe_routing dr{r.n_experts, r.top_k, r.n_group, r.topk_group, r.norm_topk_prob, r.routed_scaling_factor};
  cuda::moe_route(lv.p, lv.ld, b, lv.rows, dr, iv, wv, stream_);
  check_launch(op);
}

void cuda_backend::moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                               tensor_view out) {
  op_profiler::scope timed(prof_, "moe_experts", stream_);
  const char* op = "moe_experts";
  const moe_args a = check_moe(w, x, ids, weights, out, op);
  if (a.n == 0) return;
  if (a.w->is_exl3()) {
    if (a.x.ld != a.x.cols || a.out.ld != a.out.cols) bad(op, "EXL3 experts take contiguous x and out");
    exl3::cuda::exl3_moe_shape s = a.w->exl3_shape();
    s.topk = a.k;
    try {
      const size_t bytes = exl3::cuda::exl3_moe_workspace_bytes(s, a.n);
      void* ws = grow(moe_ws_, bytes, op);
      exl3::cuda::exl3_moe_forward(s, a.w->exl3_table(), a.x.p, a.n, a.ids, a.weights, a.out.p, ws, bytes, stream_);
    } catch (const tandem::error&) {
      throw;
    } catch (const std::exception& ex) {
      bad(op, std::string("EXL3 MoE: ") + ex.what());
    }
    check_launch("moe_experts (exl3)");
    return;
  }
  const moe_kernel kern = moe_force_ == 0   ? moe_kernel::gemv
                          : moe_force_ == 1 ? moe_kernel::mma
                                            : moe_pick(a.n);
  const int64_t P = a.n * a.k;
  if (P > (int64_t{1} << 30) || (kern == moe_kernel::mma && P / 128 + a.w->n_experts() + 1 > 65535))
    bad(op, std::to_string(a.n) + " tokens x " + std::to_string(a.k) + " slots is too many for one call");
  const dev_experts& d = a.w->dev();
  void* ws = grow(moe_ws_, moe_workspace_bytes(d, a.n, a.k, kern), op);
  moe_forward(d, a.x.p, a.x.ld, a.n, a.ids, a.weights, a.k, a.out.p, a.out.ld, ws, kern, stream_);
  check_launch(kern == moe_kernel::gemv ? "moe_experts (gemv)" : "moe_experts (mma)");
}

void cuda_backend::moe_experts_loop(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                                    tensor_view out) {
  op_profiler::scope timed(prof_, "moe_experts (loop)", stream_);
  const char* op = "moe_experts_loop";
  const moe_args a = check_moe(w, x, ids, weights, out, op);
  if (a.w->is_exl3()) bad(op, "the per-expert loop runs f16 experts only");
  if (capturing_) bad(op, "reads the routing back to the host, so it cannot be recorded");
  if (a.n == 0) return;
  const int E = a.w->n_experts();
  const int64_t H = a.w->hidden(), F = a.w->ffn(), P = a.n * a.k;
  // The routing on the host, grouped by expert (ids outside [0, E) skipped).
  std::vector<int32_t> hid(static_cast<size_t>(P));
  std::vector<float> hw(static_cast<size_t>(P));
  copy_to_host(hid.data(), a.ids, hid.size() * 4);
  copy_to_host(hw.data(), a.weights, hw.size() * 4);
  synchronize();
  std::vector<int64_t> start(static_cast<size_t>(E) + 1, 0);
  for (int32_t e : hid)
    if (e >= 0 && e < E) ++start[e + 1];
  for (int e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int32_t> rows(static_cast<size_t>(P));
  std::vector<float> rw(static_cast<size_t>(P));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < P; ++p) {
    const int32_t e = hid[p];
    if (e < 0 || e >= E) continue;
    rows[fill[e]] = static_cast<int32_t>(p / a.k);
    rw[fill[e]++] = hw[p];
  }
  int64_t most = 0;
  for (int e = 0; e < E; ++e) most = std::max(most, start[e + 1] - start[e]);
  // Scratch: rows, weights, then per expert x (f16), gate|up (f32), h (f16), down (f32).
  auto a256 = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t o_w = a256(P * 4), o_x = o_w + a256(P * 4), o_g = o_x + a256(most * H * 2),
               o_h = o_g + a256(most * 2 * F * 4), o_d = o_h + a256(most * F * 2), total = o_d + a256(most * H * 4);
  auto* base = static_cast<uint8_t*>(grow(moe_loop_ws_, total, op));
  auto* drows = reinterpret_cast<int32_t*>(base);
  auto* dw = reinterpret_cast<float*>(base + o_w);
  auto* xs = reinterpret_cast<__half*>(base + o_x);
  auto* g13 = reinterpret_cast<float*>(base + o_g);
  auto* h = reinterpret_cast<__half*>(base + o_h);
  auto* dn = reinterpret_cast<float*>(base + o_d);
  copy_to_device(drows, rows.data(), rows.size() * 4);
  copy_to_device(dw, rw.data(), rw.size() * 4);
  check(cudaMemset2DAsync(a.out.p, static_cast<size_t>(a.out.ld) * 4, 0, static_cast<size_t>(H) * 4,
                          static_cast<size_t>(a.n), stream_),
        op);
  const dev_experts& d = a.w->dev();
  const float one = 1.0f, zero = 0.0f;
  for (int e = 0; e < E; ++e) {
    const int64_t m = start[e + 1] - start[e];
    if (m == 0) continue;
    moe_gather_f16(a.x.p, a.x.ld, drows + start[e], m, H, xs, stream_);
    // Row-major g13 [m, 2F] = xs [m, H] w13^T: column-major g13^T = w13 xs^T (as dense_linear).
    check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(2 * F), static_cast<int>(m),
                       static_cast<int>(H), &one, d.w13 + static_cast<size_t>(e) * 2 * F * H, CUDA_R_16F,
                       static_cast<int>(H), xs, CUDA_R_16F, static_cast<int>(H), &zero, g13, CUDA_R_32F,
                       static_cast<int>(2 * F), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "moe_experts_loop (gemm)");
    moe_silu_mul_w13(g13, m, F, h, stream_);
    check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(H), static_cast<int>(m),
                       static_cast<int>(F), &one, d.w2 + static_cast<size_t>(e) * H * F, CUDA_R_16F,
                       static_cast<int>(F), h, CUDA_R_16F, static_cast<int>(F), &zero, dn, CUDA_R_32F,
                       static_cast<int>(H), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "moe_experts_loop (gemm)");
    moe_scatter_add(dn, drows + start[e], dw + start[e], m, H, a.out.p, a.out.ld, stream_);
  }
  check_launch(op);
}

}  // namespace tandem::cuda
