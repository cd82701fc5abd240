// backend.cuda's fused decode stack: descriptors and checks on the host, one cooperative
// launch of decode_stack.cu per decode step.
#include "decode_stack.hpp"

#include <string>

#include "check.hpp"
#include "cuda_backend.hpp"
#include "cuda_weights.hpp"
#include "tandem/error.hpp"

namespace tandem::cuda {
namespace {

[[noreturn]] void bad(const std::string& what) { throw error("backend.cuda: decode stack: " + what); }

const cuda_linear* as_cuda(const linear_weight* w) { return dynamic_cast<const cuda_linear*>(w); }

const float* f32_vector(const tensor_view& v, int64_t n) {
  if (v.dev.kind != device_kind::cuda || v.type != dtype::f32 || !v.is_contiguous() || v.numel() != n) return nullptr;
  return v.ptr<float>();
}

}  // namespace

std::unique_ptr<cuda_decode_stack> cuda_decode_stack::make(cuda_backend& be, const llama_stack_desc& d) {
  if (d.layers.empty() || d.head_dim <= 0) return nullptr;
  std::vector<stack_layer> layers;
  for (const llama_stack_layer& l : d.layers) {
    const cuda_linear *qkv = as_cuda(l.wqkv), *o = as_cuda(l.wo), *gu = as_cuda(l.gate_up), *down = as_cuda(l.down);
    if (!qkv || !o || !gu || !down) return nullptr;  // EXL3 or default groups: the per-op path
    stack_layer s;
    s.qkv = qkv->matrix(), s.o = o->matrix(), s.gate_up = gu->matrix(), s.down = down->matrix();
    s.attn_norm = f32_vector(l.attn_norm, s.qkv.in);
    s.ffn_norm = f32_vector(l.ffn_norm, s.qkv.in);
    if (!decode_stack_supported(s, d.n_heads, d.n_kv_heads, d.head_dim)) return nullptr;
    if (!layers.empty() && (s.qkv.in != layers.front().qkv.in || s.down.in != layers.front().down.in)) return nullptr;
    layers.push_back(s);
  }
  const int rot = d.rope.rotary_dims == 0 ? d.head_dim : d.rope.rotary_dims;
  if (rot <= 0 || rot > d.head_dim || rot % 2 != 0) return nullptr;
  const int grid = decode_stack_grid(be.opt_.device);
  check_launch("decode stack (occupancy)");
  if (grid <= 0) return nullptr;
  return std::unique_ptr<cuda_decode_stack>(new cuda_decode_stack(be, d, std::move(layers), grid));
}

cuda_decode_stack::cuda_decode_stack(cuda_backend& be, const llama_stack_desc& d, std::vector<stack_layer> layers,
                                     int grid)
    : be_(be), desc_(d), layers_(std::move(layers)), grid_(grid) {
  d_ = layers_.front().qkv.in;
  ffn_ = layers_.front().down.in;
  layers_dev_ = std::make_unique<cuda_buffer>(layers_.size() * sizeof(stack_layer));
  barrier_ = std::make_unique<cuda_buffer>(decode_stack_barrier_bytes());
  // Zeroed once: every launch leaves the arrival count at zero (grid_barrier.cuh).
  check(cudaMemsetAsync(barrier_->data(), 0, barrier_->size(), be_.stream()), "decode stack");
  stack_params p;
  p.ffn = static_cast<int>(ffn_);
  scratch_.grow(decode_stack_scratch_bytes(p, grid_));
  be_.synchronize();
}

void cuda_decode_stack::run(tensor_view x, tensor_view proj, kv_storage& kv, const attention_batch& batch) {
  op_profiler::scope timed(be_.prof_, "decode stack", be_.stream());
  float* xp = const_cast<float*>(f32_vector(x, d_));
  float* pp = const_cast<float*>(f32_vector(proj, d_));
  if (!xp || !pp) bad("x and proj must be contiguous f32 [1, " + std::to_string(d_) + "] in device memory");
  if (batch.n_seqs != 1 || batch.n_tokens != 1) bad("needs a batch of one sequence decoding one token");
  const auto* ckv = dynamic_cast<const cuda_kv*>(&kv);
  if (!ckv) bad("KV storage was not allocated by backend.cuda");
  const kv_layout& lay = ckv->layout();
  if (lay.n_layers != static_cast<int>(layers_.size()) || lay.n_kv_heads != desc_.n_kv_heads ||
      lay.head_dim != desc_.head_dim || lay.type != dtype::f32)
    bad("the KV pool does not match the stack's layers and heads");
  if (&kv != kv_) {  // the pool's pointers go into the device descriptors once
    if (be_.capturing_) bad("a new KV pool while recording");
    for (size_t l = 0; l < layers_.size(); ++l) {
      const dev_kv pool = ckv->layer(static_cast<int>(l));
      layers_[l].k = pool.k, layers_[l].v = pool.v;
    }
    be_.copy_to_device(layers_dev_->data(), layers_.data(), layers_.size() * sizeof(stack_layer));
    be_.synchronize();
    kv_ = &kv;
  }
  for (const tensor_view* t : {&batch.seq_lens, &batch.page_table, &batch.slot_mapping})
    if (t->dev.kind != device_kind::cuda || t->type != dtype::i32 || !t->is_contiguous()) bad("batch index tensors must be i32 in device memory");

  stack_params p;
  p.layers = static_cast<const stack_layer*>(layers_dev_->data());
  p.n_layers = static_cast<int>(layers_.size());
  p.d = static_cast<int>(d_), p.ffn = static_cast<int>(ffn_);
  p.n_heads = desc_.n_heads, p.n_kv_heads = desc_.n_kv_heads;
  p.eps = desc_.rms_eps, p.scale = desc_.attn_scale;
  p.n_pages = lay.n_pages, p.page_size = lay.page_size, p.max_pages = batch.max_pages_per_seq;
  if (batch.rope != nullptr) {
    const int rot = batch.rope->rotary_dims == 0 ? desc_.head_dim : batch.rope->rotary_dims;
    if (rot <= 0 || rot > desc_.head_dim || rot % 2 != 0) bad("rotary_dims must be even and within head_dim");
    p.rope = {true, batch.rope->theta, batch.rope->rotary_dims, batch.rope->neox};
    be_.attach_rope_table(p.rope, desc_.head_dim, p.max_pages * p.page_size);
  }
  p.seq_lens = batch.seq_lens.ptr<int32_t>();
  p.page_table = batch.page_table.ptr<int32_t>();
  p.slot_mapping = batch.slot_mapping.ptr<int32_t>();
  p.x = xp, p.proj = pp;
  p.scratch = scratch_.data();
  p.barrier = static_cast<unsigned*>(barrier_->data());
  decode_stack(p, grid_, be_.stream());
  check_launch("decode stack");
}

}  // namespace tandem::cuda
