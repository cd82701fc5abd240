#include "llama_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/step_inputs.hpp"
#include "tandem/error.hpp"

namespace tandem {

namespace {

// An on/off switch from the environment: unset or empty is `unset`; anything but 0 or 1 is
// an error.
bool env_switch(const char* name, bool unset = false) {
  const char* f = std::getenv(name);
  if (f == nullptr || *f == '\0') return unset;
  const std::string v = f;
  if (v != "0" && v != "1") throw error(std::string(name) + " must be 0 or 1, not '" + v + "'");
  return v == "1";
}

std::string blk(int l, const char* what) { return "blk." + std::to_string(l) + "." + what + ".weight"; }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

}  // namespace

llama_model::llama_model(backend& be, const weight_format& weights, const llama_hparams& hp, const tp_group& tp)
    : be_(be), weights_(weights), hp_full_(hp), tp_(tp), hp_(hp), kv_type_(be.kv_types().front()) {
  // q and k are rotated inside attention (fused with the KV write where the backend can).
  rope_ = {hp_.rope_theta, hp_.rope_dims, false};
  batch_.rope = &rope_;
  info_.arch = hp_.arch;
  info_.n_layers = hp_.n_layers;
  info_.hidden = hp_.hidden;
  info_.vocab = hp_.vocab;
  info_.context = hp_.context;
  info_.detail = "GQA " + std::to_string(hp_.n_heads) + "/" + std::to_string(hp_.n_kv_heads) + " heads of " +
                 std::to_string(hp_.head_dim) + ", FFN " + std::to_string(hp_.ffn);
  if (tp_.split()) load_split_weights();  // narrows hp_ to this rank's share
  else if (tp_.pp.split()) load_stage_weights();  // narrows hp_.n_layers to this stage's
  else load_weights();
  ws_.init(be_, hp_);
  fused_linears_ = env_switch("TANDEM_LLAMA_FUSED_LINEARS");
  separate_swiglu_ = !env_switch("TANDEM_LLAMA_SWIGLU", true);
  norm_epilogue_ = env_switch("TANDEM_LLAMA_NORM_EPILOGUE");
}

llama_model::llama_model(backend& be, const weight_format& weights, const llama_hparams& hp,
                         int64_t kv_pages, int page_size)
    : llama_model(be, weights, hp) {
  allocate_kv(kv_pages, page_size);
}

std::vector<backend_op> llama_model::ops() {
  return {backend_op::embed,    backend_op::rms_norm, backend_op::linear,      backend_op::rope,
          backend_op::silu_mul, backend_op::add,      backend_op::gather_rows, backend_op::sample,
          backend_op::attention_gqa};
}

std::vector<backend_op> llama_model::required_ops() const { return ops(); }

kv_spec llama_model::kv_needs() const {
  return {{{"gqa", hp_.n_layers, hp_.n_kv_heads, hp_.head_dim, true, kv_type_}}};
}

void llama_model::set_kv_type(dtype t) {
  if (kv_) throw error("llama_model: set_kv_type after allocate_kv");
  const std::vector<dtype> can = be_.kv_types();
  if (std::find(can.begin(), can.end(), t) == can.end())
    throw config_error("engine.kv_dtype", "the backend's attention cannot read a KV cache of " + std::string(name(t)));
  kv_type_ = t;
}

void llama_model::allocate_kv(int64_t kv_pages, int page_size) {
  if (kv_) throw error("llama_model: the KV pool is already allocated");
  kv_layout layout;
  layout.n_layers = hp_.n_layers;
  // A backend that records steps gets one extra page: the padding rows of a recorded
  // decode step write their KV there, never into a sequence's pages.
  // Not across ranks: a collective waits on the host, which a recorded step cannot hold.
  records_ = be_.dev().kind != device_kind::cpu && !tp_.split();
  pad_page_ = static_cast<int32_t>(kv_pages);
  layout.n_pages = kv_pages + (records_ ? 1 : 0);
  layout.page_size = page_size;
  layout.n_kv_heads = hp_.n_kv_heads;
  layout.head_dim = hp_.head_dim;
  layout.type = kv_type_;
  kv_ = be_.alloc_kv(layout);
}

const tensor_info& llama_model::tensor(const std::string& name) const {
  const tensor_info* t = weights_.find(name);
  if (!t) throw model_error("model", "tensor " + name + " is missing");
  return *t;
}

std::unique_ptr<linear_weight> llama_model::linear(const std::string& name, int64_t out, int64_t in) {
  const tensor_info& t = tensor(name);
  if (t.shape != std::vector<int64_t>{out, in})
    throw model_error("model", "tensor " + name + " has shape " + shape_str(t.shape) +
                                   ", expected " + shape_str({out, in}));
  return be_.load_linear(t);
}

std::unique_ptr<linear_weight> llama_model::linear_group(
    const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in) {
  std::vector<const tensor_info*> infos;
  for (const auto& [name, out] : parts) {
    const tensor_info& t = tensor(name);
    if (t.shape != std::vector<int64_t>{out, in})
      throw model_error("model", "tensor " + name + " has shape " + shape_str(t.shape) +
                                     ", expected " + shape_str({out, in}));
    infos.push_back(&t);
  }
  return be_.load_linear_group(infos);
}

std::unique_ptr<device_buffer> llama_model::norm(const std::string& name) {
  const tensor_info& t = tensor(name);
  if (t.shape != std::vector<int64_t>{hp_.hidden})
    throw model_error("model", "norm " + name + " has shape " + shape_str(t.shape));
  return be_.load_tensor(t, dtype::f32);
}

void llama_model::load_weights() {
  tok_embd_ = linear("token_embd.weight", hp_.vocab, hp_.hidden);
  if (weights_.find("output.weight")) output_ = linear("output.weight", hp_.vocab, hp_.hidden);
  output_norm_ = norm("output_norm.weight");
  layers_.resize(hp_.n_layers);
  for (int l = 0; l < hp_.n_layers; ++l) load_layer(layers_[l], l);
}

void llama_model::load_layer(layer& L, int l) {
  const int64_t qdim = int64_t(hp_.n_heads) * hp_.head_dim;
  const int64_t kvdim = int64_t(hp_.n_kv_heads) * hp_.head_dim;
  L.attn_norm = norm(blk(l, "attn_norm"));
  L.ffn_norm = norm(blk(l, "ffn_norm"));
  L.wqkv = linear_group({{blk(l, "attn_q"), qdim}, {blk(l, "attn_k"), kvdim}, {blk(l, "attn_v"), kvdim}},
                        hp_.hidden);
  L.wo = linear(blk(l, "attn_output"), hp_.hidden, qdim);
  L.gate_up = linear_group({{blk(l, "ffn_gate"), hp_.ffn}, {blk(l, "ffn_up"), hp_.ffn}}, hp_.hidden);
  L.down = linear(blk(l, "ffn_down"), hp_.hidden, hp_.ffn);
}

tensor_view llama_model::norm_view(const device_buffer& b) const {
  return tensor_view::contiguous(b.data(), dtype::f32, {hp_.hidden}, be_.dev());
}

// A step is recordable when every sequence samples every row it computes: a decode step
// (one token each) is padded to a recorded batch size; a verify step (a token and its
// draft each) of at most verify_max_seqs sequences is recorded at its own shape, so small
// batches keep their CUDA graphs while they speculate. The page table gets a fixed width
// (the context length in pages), and the backend may replay a recorded step.
int64_t llama_model::recorded_seqs(const step_plan& plan, bool all_logits) const {
  if (!records_ || all_logits || plan.seqs.empty()) return 0;
  bool verify = false;
  for (const auto& s : plan.seqs) {
    if (!s.sample || s.logit_rows != static_cast<int32_t>(s.tokens.size())) return 0;
    verify |= s.tokens.size() > 1;
  }
  const auto n = static_cast<int64_t>(plan.seqs.size());
  if (verify) return n <= verify_max_seqs ? n : 0;
  return recorded_batch_size(n);
}

void llama_model::forward(const step_plan& plan, const forward_options& opt) {
  if (!kv_) throw error("llama_model: forward before allocate_kv");
  const bool all_logits = opt.all_logits;
  for (int l : opt.hidden_layers)
    if (l < 0 || l >= hp_full_.n_layers)
      throw error("llama_model: hidden state of layer " + std::to_string(l) + " asked, the model has " +
                  std::to_string(hp_full_.n_layers));
  tp_.pp.require_last_stage(opt.hidden_layers, hp_full_.n_layers);
  if (opt.hidden_layers != taps_) ++record_epoch_;  // recorded steps copy the old taps
  taps_ = opt.hidden_layers;
  const int page = kv_->layout().page_size;
  const int64_t padded = recorded_seqs(plan, all_logits);
  step_inputs in = make_step_inputs(plan, page, hp_.vocab, all_logits,
                                    padded > 0 ? (hp_.context + page - 1) / page : 1, padded);
  auto& [ids, pos, slots, qstart, lens, rows, table, max_pages] = in;
  n_rows_ = static_cast<int64_t>(rows.size());
  n_tokens_ = static_cast<int>(ids.size());
  pad_step_inputs(in, padded, pad_page_, page);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t batch_seqs = static_cast<int64_t>(lens.size());
  n_logits_ = static_cast<int64_t>(rows.size());
  ws_.reserve(n, batch_seqs, max_pages, std::max<int64_t>(n_logits_, 1));

  auto upload = [&](tensor_view dst, const std::vector<int32_t>& src) {
    if (!src.empty()) be_.copy_to_device(dst.data, src.data(), src.size() * 4);
  };
  upload(ws_.ids(n), ids);
  upload(ws_.positions(n), pos);
  upload(ws_.slots(n), slots);
  upload(ws_.query_start(batch_seqs), qstart);
  upload(ws_.seq_lens(batch_seqs), lens);
  upload(ws_.page_table(batch_seqs, max_pages), table);
  upload(ws_.rows(n_logits_), rows);

  batch_.n_seqs = static_cast<int>(batch_seqs);
  batch_.n_tokens = static_cast<int>(n);
  int max_query_len = 0;
  for (size_t i = 0; i + 1 < qstart.size(); ++i) max_query_len = std::max(max_query_len, qstart[i + 1] - qstart[i]);
  batch_.max_query_len = max_query_len;
  batch_.max_pages_per_seq = static_cast<int>(max_pages);
  batch_.query_start = ws_.query_start(batch_seqs);
  batch_.seq_lens = ws_.seq_lens(batch_seqs);
  batch_.page_table = ws_.page_table(batch_seqs, max_pages);
  batch_.slot_mapping = ws_.slots(n);
  batch_.positions = ws_.positions(n);
  const int64_t n_taps = static_cast<int64_t>(taps_.size());
  if (n_taps > 0 && (taps_capacity_ < n || taps_slots_ < n_taps)) {  // grown to the step
    taps_capacity_ = std::max(taps_capacity_, n);
    taps_slots_ = std::max(taps_slots_, n_taps);
    taps_buf_ = be_.alloc(static_cast<size_t>(taps_slots_ * taps_capacity_ * hp_.hidden) *
                          traits(be_.activation_type()).block_bytes);
    ++record_epoch_;  // recorded steps wrote to the old buffer
  }
  // The key names everything the recorded kernels captured: buffer addresses (workspace
  // generation and the taps' epoch, both only ever grow), sequences, token rows, the most
  // rows of one sequence (a backend may pick its attention kernel by it: up to 31 told
  // apart, more as one) and the page-table width. A step whose numbers do not fit the key
  // runs eagerly.
  const uint64_t epoch = ws_.generation() + record_epoch_;
  if (padded == 0 || n >= (1 << 12) || padded >= (1 << 8) || max_pages >= (1 << 20) || epoch >= (1 << 19))
    return run_layers(static_cast<int>(n));
  const uint64_t key = epoch << 45 | static_cast<uint64_t>(max_pages) << 25 | static_cast<uint64_t>(padded) << 17 |
                       static_cast<uint64_t>(std::min(max_query_len, 31)) << 12 | static_cast<uint64_t>(n);
  be_.run_recorded(recording_owner_, key, [this, n] { run_layers(static_cast<int>(n)); });
}

void llama_model::run_layers(int n) {
  if (fused_linears_ && taps_.empty() && !tp_.split()) return run_layers_fused(n);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
  tensor_view x = ws_.x(n), h = ws_.h(n), proj = ws_.proj(n);
  // A later pipeline stage takes the stream where the previous one left it: x and the last
  // layer's output, not yet added (the add is fused into the next norm, as in one process).
  if (tp_.pp.first()) be_.embed(*tok_embd_, ws_.ids(n), x);
  else tp_.pp.receive({x, proj});
  for (int i = 0; i < hp_.n_layers; ++i) {  // this stage's layers (all of them on one rank)
    const layer& L = layers_[i];
    const int l = first_layer_ + i;
    // The previous block's output joins the residual stream inside the fused norm: the
    // previous layer's down projection ran it, but for the first layer of a stage.
    if (l == 0) be_.rms_norm(x, norm_view(*L.attn_norm), hp_.rms_eps, h);
    else if (i == 0) add_norm(l - 1, n, *L.attn_norm);
    be_.linear(*L.wqkv, h, ws_.qkv(n));
    be_.attention(ws_.q(n), ws_.k(n), ws_.v(n), *kv_, i, batch_, scale, ws_.attn(n));
    tensor_view attn_flat = ws_.attn(n);
    attn_flat.ndim = 2;
    attn_flat.shape = {n, int64_t(hp_.n_heads) * hp_.head_dim, 0, 0};
    attn_flat.strides = {attn_flat.shape[1], 1, 0, 0};
    project_add_norm(*L.wo, attn_flat, n, *L.ffn_norm, {});
    if (separate_swiglu_) {
      be_.linear(*L.gate_up, h, ws_.gate_up(n));
      be_.silu_mul(ws_.gate(n), ws_.up(n), ws_.gate(n));
    } else {
      be_.linear_swiglu(*L.gate_up, h, ws_.gate_up(n), ws_.gate(n));
    }
    // The down projection and the next norm: the next layer's, or after this stage's last
    // layer the output norm. A non-last pipeline stage passes x and proj on un-added.
    const bool last = i + 1 == hp_.n_layers;
    if (last && !tp_.pp.last()) {
      be_.linear(*L.down, ws_.gate(n), proj);
      if (tp_.split()) reduce_partial(proj);
    } else {
      project_add_norm(*L.down, ws_.gate(n), n, last ? *output_norm_ : *layers_[i + 1].attn_norm, tap_of(l, n));
    }
  }
  if (!tp_.pp.last()) {
    be_.synchronize();  // x and proj are complete in host memory
    return tp_.pp.pass_on({x, proj});
  }
  if (n_logits_ == 0) return;
  be_.gather_rows(h, ws_.rows(n_logits_), ws_.rows_h(n_logits_));
  if (tp_.split()) return lm_head_split(n_logits_);
  be_.linear(output_ ? *output_ : *tok_embd_, ws_.rows_h(n_logits_), ws_.logits(n_logits_));
}

// x holds the residual stream throughout: the o and down products are added to it by their
// linears, and each norm is the prologue of the linear that reads it.
void llama_model::run_layers_fused(int n) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(hp_.head_dim));
  tensor_view x = ws_.x(n), h = ws_.h(n);
  be_.embed(*tok_embd_, ws_.ids(n), x);
  linear_prologue pre, gated;
  pre.k = linear_prologue::kind::rms_norm;
  pre.eps = hp_.rms_eps;
  gated.k = linear_prologue::kind::silu_mul;
  gated.up = ws_.up(n);
  for (int l = 0; l < hp_.n_layers; ++l) {
    const layer& L = layers_[l];
    pre.norm_weight = norm_view(*L.attn_norm);
    be_.linear_fused(*L.wqkv, x, pre, ws_.qkv(n), false);
    be_.attention(ws_.q(n), ws_.k(n), ws_.v(n), *kv_, l, batch_, scale, ws_.attn(n));
    tensor_view attn_flat = ws_.attn(n);
    attn_flat.ndim = 2;
    attn_flat.shape = {n, int64_t(hp_.n_heads) * hp_.head_dim, 0, 0};
    attn_flat.strides = {attn_flat.shape[1], 1, 0, 0};
    be_.linear_fused(*L.wo, attn_flat, {}, x, true);
    pre.norm_weight = norm_view(*L.ffn_norm);
    be_.linear_fused(*L.gate_up, x, pre, ws_.gate_up(n), false);
    be_.linear_fused(*L.down, ws_.gate(n), gated, x, true);
  }
  be_.rms_norm(x, norm_view(*output_norm_), hp_.rms_eps, h);
  if (n_logits_ == 0) return;
  be_.gather_rows(h, ws_.rows(n_logits_), ws_.rows_h(n_logits_));
  be_.linear(output_ ? *output_ : *tok_embd_, ws_.rows_h(n_logits_), ws_.logits(n_logits_));
}

// The residual stream after layer `done` is x + proj: the norm that adds them (the next
// layer's, or the output norm after the last) also writes it to the layer's tap slot when it
// has one, padding rows too, so a tap costs no kernel of its own.
void llama_model::add_norm(int done, int n, const device_buffer& weight) {
  const tensor_view kept = tap_of(done, n);
  if (kept.data == nullptr) return be_.add_rms_norm(ws_.x(n), ws_.proj(n), norm_view(weight), hp_.rms_eps, ws_.h(n));
  be_.add_rms_norm_keep(ws_.x(n), ws_.proj(n), norm_view(weight), hp_.rms_eps, ws_.h(n), kept);
}

// proj = in W^T joins x, and h = rms_norm(x, weight), x kept in `kept` when set: one
// linear_add_rms_norm (backend.cuda: the linear kernel's last block runs the norm, the
// same bits) with TANDEM_LLAMA_NORM_EPILOGUE=1; otherwise, and under a tensor split (proj
// is all-reduced between the two), linear() and add_norm's ops.
void llama_model::project_add_norm(const linear_weight& w, tensor_view in, int n, const device_buffer& weight,
                                   tensor_view kept) {
  const tensor_view x = ws_.x(n), proj = ws_.proj(n), h = ws_.h(n);
  if (norm_epilogue_ && !tp_.split())
    return be_.linear_add_rms_norm(w, in, proj, x, norm_view(weight), hp_.rms_eps, h, kept);
  be_.linear(w, in, proj);
  if (tp_.split()) reduce_partial(proj);
  if (kept.data == nullptr) return be_.add_rms_norm(x, proj, norm_view(weight), hp_.rms_eps, h);
  be_.add_rms_norm_keep(x, proj, norm_view(weight), hp_.rms_eps, h, kept);
}

tensor_view llama_model::tap_of(int layer, int64_t rows) const {
  const int slot = tap_slot(layer);
  return slot < 0 ? tensor_view{} : tap_rows(slot, rows);
}

// A layer listed twice is kept once, in the slot of its first listing.
int llama_model::tap_slot(int layer) const {
  const auto it = std::find(taps_.begin(), taps_.end(), layer);
  return it == taps_.end() ? -1 : static_cast<int>(it - taps_.begin());
}

tensor_view llama_model::tap_rows(int slot, int64_t rows) const {
  const size_t el = traits(be_.activation_type()).block_bytes;
  char* base = static_cast<char*>(taps_buf_->data()) + static_cast<size_t>(slot) * taps_capacity_ * hp_.hidden * el;
  return tensor_view::contiguous(base, be_.activation_type(), {rows, hp_.hidden}, be_.dev());
}

tensor_view llama_model::hidden_states(int i) const {
  if (i < 0) return ws_.x(n_tokens_);
  if (i >= static_cast<int>(taps_.size()))
    throw error("llama_model: hidden state " + std::to_string(i) + " was not asked for in the last forward");
  return tap_rows(tap_slot(taps_[static_cast<size_t>(i)]), n_tokens_);
}

// Under a tensor split the head holds this rank's slice of the vocabulary, and under a
// pipeline split rank 0 holds only the head: neither is the whole table a drafter needs.
const linear_weight* llama_model::token_embedding() const {
  return tp_.split() || tp_.pp.stages > 1 ? nullptr : tok_embd_.get();
}

const linear_weight* llama_model::output_head() const {
  if (tp_.split() || tp_.pp.stages > 1) return nullptr;
  return output_ ? output_.get() : tok_embd_.get();
}

std::vector<int32_t> llama_model::sample(const std::vector<sampling_params>& params) {
  if (static_cast<int64_t>(params.size()) != n_rows_)
    throw error("sample: " + std::to_string(params.size()) + " parameter sets for " +
                std::to_string(n_rows_) + " logits rows");
  std::vector<int32_t> out(n_rows_);
  if (n_rows_ == 0) return out;
  be_.sample(ws_.logits(n_rows_), params, ws_.sampled(n_rows_));
  be_.copy_to_host(out.data(), ws_.sampled(n_rows_).data, out.size() * 4);
  be_.synchronize();
  return out;
}

std::vector<float> llama_model::logits_to_host() const {
  std::vector<float> out(n_rows_ * hp_.vocab);
  if (out.empty()) return out;
  be_.copy_to_host(out.data(), ws_.logits(n_rows_).data, out.size() * 4);
  be_.synchronize();
  return out;
}

}  // namespace tandem
