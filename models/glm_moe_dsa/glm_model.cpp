#include "glm_model.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "common/step_inputs.hpp"
#include "tandem/error.hpp"

namespace tandem::glm {

glm_model::glm_model(backend& be, const weight_format& weights, glm_config cfg, bool dsa, const tp_group& tp)
    : be_(be), cfg_(std::move(cfg)), tp_(tp), share_(glm_share::of(cfg_, tp)) {
  if (tp_.split()) check_split_runs();
  const glm_config& c = cfg_;
  info_.arch = "glm_moe_dsa";
  info_.n_layers = c.n_layers;
  info_.hidden = c.hidden;
  info_.vocab = c.vocab;
  info_.context = c.context;
  const int moe = static_cast<int>(std::count(c.sparse_mlp.begin(), c.sparse_mlp.end(), true));
  info_.detail = fmt::format("MLA {} heads, latent {}+{}; DSA top-{} ({} indexer layers); {} dense + {} MoE "
                             "layers of {} experts (top-{}, {} shared)",
                             c.n_heads, c.kv_lora_rank, c.qk_rope, c.index_topk, c.indexer_layers(),
                             c.n_layers - moe, moe, c.n_routed, c.top_k, c.n_shared);
  mla_.rope_dims = c.qk_rope;
  mla_.rope_theta = c.rope_theta;
  mla_.scale = 1.0f / std::sqrt(static_cast<float>(c.qk_head_dims()));
  load_weights(weights, dsa);
  if (!dsa) info_.detail += "; DSA off (dense MLA)";
  if (tp_.split())
    info_.detail += fmt::format(", tensor parallel rank {} of {}: {} heads, FFN {}, experts {}", tp_.rank, tp_.size,
                                share_.heads.count, share_.ffn.count,
                                tp_.expert_parallel > 1
                                    ? fmt::format("{}-{}", share_.experts.begin, share_.experts.begin + share_.experts.count - 1)
                                    : fmt::format("all, FFN {}", share_.expert_ffn.count));
}

std::vector<backend_op> glm_model::ops_for(const glm_config& c) {
  std::vector<backend_op> ops{backend_op::embed,       backend_op::rms_norm, backend_op::linear,
                              backend_op::silu_mul,    backend_op::add,      backend_op::gather_rows,
                              backend_op::sample,      backend_op::attention_mla};
  if (c.indexer_layers() > 0) {
    ops.push_back(backend_op::dsa_indexer);
    ops.push_back(backend_op::layer_norm);
  }
  if (std::find(c.sparse_mlp.begin(), c.sparse_mlp.end(), true) != c.sparse_mlp.end()) {
    ops.push_back(backend_op::moe_route);
    ops.push_back(backend_op::moe_experts);
  }
  return ops;
}

kv_spec glm_model::kv_needs() const {
  int indexers = 0;
  for (const glm_layer& L : layers_) indexers += L.indexer_slot >= 0;
  for (const glm_mtp& M : mtp_) indexers += M.block.indexer_slot >= 0;
  kv_spec s;
  s.groups.push_back({"mla latent", static_cast<int>(layers_.size()) + mtp_layers(), 1, cfg_.kv_lora_rank + cfg_.qk_rope, false,
                      be_.activation_type()});
  if (indexers > 0)
    s.groups.push_back({"dsa indexer keys", indexers, 1, cfg_.index_dims, false, be_.activation_type()});
  return s;
}

void glm_model::allocate_kv(int64_t kv_pages, int page_size) {
  if (latent_kv_) throw error("glm_model: the KV pool is already allocated");
  records_ = be_.dev().kind != device_kind::cpu;
  pad_page_ = static_cast<int32_t>(kv_pages);  // private to padding rows of recorded steps
  for (const kv_group& g : kv_needs().groups) {
    kv_layout lay;
    lay.n_layers = g.n_layers;
    lay.n_pages = kv_pages + (records_ ? 1 : 0);
    lay.page_size = page_size;
    lay.n_kv_heads = g.heads;
    lay.head_dim = g.dims;
    lay.type = g.type;
    lay.values = g.values;
    (latent_kv_ ? index_kv_ : latent_kv_) = be_.alloc_kv(lay);
  }
}

tensor_view glm_model::act(scratch& s, int64_t rows, int64_t cols) {
  const dtype t = be_.activation_type();
  const size_t need = static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * traits(t).block_bytes;
  if (s.bytes < need) {
    s.buf = be_.alloc(need);
    s.bytes = need;
    ++generation_;  // recorded steps of older generations name freed buffers
  }
  return tensor_view::contiguous(s.buf->data(), t, {rows, cols}, be_.dev());
}

tensor_view glm_model::f32(scratch& s, int64_t rows, int64_t cols) {
  const size_t need = static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * 4;
  if (s.bytes < need) {
    s.buf = be_.alloc(need);
    s.bytes = need;
    ++generation_;  // recorded steps of older generations name freed buffers
  }
  return tensor_view::contiguous(s.buf->data(), dtype::f32, {rows, cols}, be_.dev());
}

tensor_view glm_model::ints(scratch& s, int64_t n, int64_t cols) {
  const size_t need = static_cast<size_t>(std::max<int64_t>(n * cols, 1)) * 4;
  if (s.bytes < need) {
    s.buf = be_.alloc(need);
    s.bytes = need;
    ++generation_;  // recorded steps of older generations name freed buffers
  }
  if (cols == 1) return tensor_view::contiguous(s.buf->data(), dtype::i32, {n}, be_.dev());
  return tensor_view::contiguous(s.buf->data(), dtype::i32, {n, cols}, be_.dev());
}

tensor_view glm_model::upload(scratch& s, const std::vector<int32_t>& v) {
  tensor_view t = ints(s, static_cast<int64_t>(v.size()));
  if (!v.empty()) be_.copy_to_device(t.data, v.data(), v.size() * 4);
  return t;
}

tensor_view glm_model::norm_view(const device_buffer& b, int64_t n) const {
  return tensor_view::contiguous(b.data(), dtype::f32, {n}, be_.dev());
}

namespace {

// Columns [c0, c0 + cols) of a [rows, width] view (a strided 2-D view).
tensor_view columns(tensor_view v, int64_t c0, int64_t cols) {
  const size_t el = static_cast<size_t>(traits(v.type).block_bytes);
  tensor_view r = v;
  r.data = static_cast<char*>(v.data) + static_cast<size_t>(c0) * el;
  r.shape[1] = cols;
  return r;
}

tensor_view as_heads(tensor_view v, int64_t heads) {  // [n, heads * d] -> [n, heads, d]
  tensor_view r = v;
  const int64_t d = v.shape[1] / heads;
  r.ndim = 3;
  r.shape = {v.shape[0], heads, d, 0};
  r.strides = {v.strides[0], d, 1, 0};
  return r;
}

}  // namespace

namespace {

// The page-table width of a recorded step: the widest sequence's pages rounded up to a
// power of two (at least 16), so a handful of widths cover every context up to 1M tokens
// without a 1M-token table on every step.
int64_t table_width(const step_plan& plan) {
  int64_t w = 16;
  size_t most = 0;
  for (const auto& s : plan.seqs) most = std::max(most, s.pages.size());
  while (w < static_cast<int64_t>(most)) w *= 2;
  return w;
}

}  // namespace

int64_t glm_model::decode_batch(const step_plan& plan, bool all_logits) const {
  if (!records_ || all_logits || !taps_.empty() || plan.seqs.empty()) return 0;
  for (const auto& s : plan.seqs)
    if (s.tokens.size() != 1 || !s.sample || s.logit_rows != 1) return 0;
  return recorded_batch_size(static_cast<int64_t>(plan.seqs.size()));
}

void glm_model::prepare_step(const step_plan& plan, bool all_logits, int64_t padded) {
  if (!latent_kv_) throw error("glm_model: forward before allocate_kv");
  const int page = latent_kv_->layout().page_size;
  step_inputs in = make_step_inputs(plan, page, cfg_.vocab, all_logits, padded > 0 ? table_width(plan) : 1, padded);
  n_tokens_ = static_cast<int64_t>(in.ids.size());
  n_rows_ = static_cast<int64_t>(in.rows.size());
  pad_step_inputs(in, padded, pad_page_, page);
  const int64_t n = static_cast<int64_t>(in.ids.size());
  const int64_t seqs = static_cast<int64_t>(in.lens.size());
  n_step_tokens_ = n;
  n_logit_rows_ = static_cast<int64_t>(in.rows.size());
  table_width_ = in.max_pages;
  batch_.n_seqs = static_cast<int>(seqs);
  batch_.n_tokens = static_cast<int>(n);
  batch_.max_pages_per_seq = static_cast<int>(in.max_pages);
  batch_.query_start = upload(s_qstart_, in.qstart);
  batch_.seq_lens = upload(s_lens_, in.lens);
  batch_.page_table = upload(s_table_, in.table);
  batch_.page_table.ndim = 2;
  batch_.page_table.shape = {seqs, in.max_pages, 0, 0};
  batch_.page_table.strides = {in.max_pages, 1, 0, 0};
  batch_.slot_mapping = upload(s_slots_, in.slots);
  batch_.positions = upload(s_pos_, in.pos);
  batch_.rope = nullptr;
  ids_ = upload(s_ids_, in.ids);
  rows_ = upload(s_rows_, in.rows);
}

void glm_model::forward(const step_plan& plan, const forward_options& opt) {
  for (int l : opt.hidden_layers)
    if (l < 0 || l >= cfg_.n_layers)
      throw error(fmt::format("glm_model: hidden state of layer {} asked, the model has {}", l, cfg_.n_layers));
  tp_.pp.require_last_stage(opt.hidden_layers, cfg_.n_layers);
  taps_ = opt.hidden_layers;
  const int64_t padded = decode_batch(plan, opt.all_logits);
  prepare_step(plan, opt.all_logits, padded);
  const int64_t n = n_step_tokens_;
  auto body = [this, n] { run_stack(n); };
  if (padded == 0) return body();
  // A decode step of a recordable shape. Its first run is eager, so every buffer reaches its
  // size outside a recording; later runs replay what the backend recorded. The key names
  // what the recorded kernels captured: buffer addresses (generation), page-table width and
  // batch size.
  auto key = [&] { return generation_ << 40 | static_cast<uint64_t>(table_width_) << 8 | static_cast<uint64_t>(padded); };
  if (!warmed_.contains(key())) {
    body();
    warmed_.insert(key());
    return;
  }
  be_.run_recorded(recording_owner_, key(), body);
}

void glm_model::run_stack(int64_t n) {
  tensor_view x = act(s_x_, n, cfg_.hidden);
  if (!taps_.empty()) act(s_taps_, static_cast<int64_t>(taps_.size()) * n, cfg_.hidden);
  tensor_view topk;  // the last full layer's selection, reused by shared layers
  if (tp_.pp.first()) be_.embed(*embed_, ids_, x);
  else receive_stream(n, topk);
  for (const glm_layer& L : layers_) run_layer(L, n, topk, tp_.pp.first() && &L == &layers_.front());
  if (!tp_.pp.last()) return pass_on_stream(n, topk);
  logits_of(head_ ? *head_ : *embed_, *out_norm_, n, cfg_.n_layers - 1);
}

// h = norm(x + proj) (the last layer's output joins the stream), then the logits rows.
void glm_model::logits_of(const linear_weight& head, const device_buffer& norm, int64_t n, int done) {
  tensor_view h = act(s_h_, n, cfg_.hidden);
  add_norm(norm, n, done);
  if (n_logit_rows_ == 0) return;
  tensor_view rh = act(s_rows_h_, n_logit_rows_, cfg_.hidden);
  be_.gather_rows(h, rows_, rh);
  if (tp_.split()) return split_logits(head, rh);
  be_.linear(head, rh, f32(s_logits_, n_logit_rows_, cfg_.vocab));
}

tensor_view glm_model::normed_hidden_states() const {
  return tensor_view::contiguous(s_h_.buf->data(), be_.activation_type(), {n_tokens_, cfg_.hidden}, be_.dev());
}

void glm_model::forward_mtp(const step_plan& plan, tensor_view prev_hidden, int k, bool all_logits) {
  if (k < 0 || k >= mtp_layers())
    throw error(fmt::format("glm_model: MTP layer {} asked, the checkpoint has {}", k, mtp_layers()));
  if (tp_.split() || tp_.pp.split())  // the workers run forward() only: rank 0 alone would wait on them
    throw error("glm_model: forward_mtp does not run across ranks yet");
  const glm_mtp& M = mtp_[k];
  if (prev_hidden.ndim != 2 || prev_hidden.shape[0] != plan.n_tokens() || prev_hidden.shape[1] != cfg_.hidden)
    throw error("glm_model: forward_mtp needs prev_hidden [plan tokens, hidden]");
  taps_.clear();
  prepare_step(plan, all_logits, 0);
  const int64_t n = n_tokens_, H = cfg_.hidden;
  // [enorm(embed(t)) | hnorm(h)] side by side in one [n, 2H] buffer, then eh_proj into x.
  // prev_hidden may be normed_hidden_states() itself (s_h_), which nothing here writes
  // before hnorm has read it.
  tensor_view eh = act(s_gu_, n, 2 * H);
  tensor_view e = act(s_tmp_, n, H);
  be_.embed(*embed_, ids_, e);
  tensor_view left = eh, right = eh;
  left.shape[1] = right.shape[1] = H;
  right.data = static_cast<char*>(eh.data) + static_cast<size_t>(H) * traits(eh.type).block_bytes;
  be_.rms_norm(e, norm_view(*M.enorm, H), cfg_.rms_eps, left);
  be_.rms_norm(prev_hidden, norm_view(*M.hnorm, H), cfg_.rms_eps, right);
  tensor_view x = act(s_x_, n, H);
  be_.linear(*M.eh_proj, eh, x);
  tensor_view topk;
  run_layer(M.block, n, topk, true);
  logits_of(M.head ? *M.head : (head_ ? *head_ : *embed_), *M.head_norm, n, -1);
}

void glm_model::run_layer(const glm_layer& L, int64_t n, tensor_view& topk, bool first) {
  const glm_config& c = cfg_;
  const int l = L.kv_layer;
  tensor_view x = act(s_x_, n, c.hidden), h = act(s_h_, n, c.hidden), proj = act(s_proj_, n, c.hidden);
  // The previous layer's output joins the residual stream inside the fused norm.
  if (first) be_.rms_norm(x, norm_view(*L.attn_norm, c.hidden), c.rms_eps, h);
  else add_norm(*L.attn_norm, n, first_layer_ + l - 1);

  // q_a and kv_a in one grouped linear: all of q_a's rows, then kv_a's.
  const int64_t kv_a_cols = c.kv_lora_rank + c.qk_rope;
  tensor_view a = act(s_a_, n, c.q_lora_rank + kv_a_cols);
  be_.linear(*L.a_proj, h, a);
  const size_t el = static_cast<size_t>(traits(a.type).block_bytes);
  tensor_view q_a = tensor_view::contiguous(a.data, a.type, {n, c.q_lora_rank}, be_.dev());
  tensor_view kv_a = tensor_view::contiguous(static_cast<char*>(a.data) + static_cast<size_t>(n * c.q_lora_rank) * el,
                                             a.type, {n, kv_a_cols}, be_.dev());
  tensor_view q_res = act(s_qres_, n, c.q_lora_rank);
  be_.rms_norm(q_a, norm_view(*L.q_a_norm, c.q_lora_rank), c.rms_eps, q_res);
  tensor_view c_lat = columns(kv_a, 0, c.kv_lora_rank);
  be_.rms_norm(c_lat, norm_view(*L.kv_a_norm, c.kv_lora_rank), c.rms_eps, c_lat);
  const int64_t heads = share_.heads.count;  // this rank's
  tensor_view q = act(s_q_, n, heads * c.qk_head_dims());
  be_.linear(*L.q_b, q_res, q);

  if (L.indexer_slot >= 0) {
    tensor_view iq = act(s_iq_, n, int64_t(c.index_heads) * c.index_dims);
    be_.linear(*L.idx_wq_b, q_res, iq);
    tensor_view ik = act(s_ik_, n, c.index_dims);
    be_.linear(*L.idx_wk, h, ik);
    be_.layer_norm(ik, norm_view(*L.idx_k_norm_w, c.index_dims), norm_view(*L.idx_k_norm_b, c.index_dims), 1e-6f, ik);
    tensor_view iw = f32(s_iw_, n, c.index_heads);
    be_.linear(*L.idx_weights, h, iw);
    topk = ints(s_topk_, n, c.index_topk);
    be_.dsa_indexer(as_heads(iq, c.index_heads), ik, iw, *index_kv_, L.indexer_slot, batch_, c.qk_rope, c.rope_theta,
                    c.index_topk, topk);
  }
  tensor_view attn = act(s_attn_, n, heads * c.v_dims);
  be_.mla_attention(as_heads(q, heads), kv_a, *L.kv_b, *latent_kv_, l, batch_, mla_, topk, as_heads(attn, heads));
  be_.linear(*L.o_proj, attn, proj);
  if (tp_.split()) reduce_partial(proj);
  be_.add_rms_norm(x, proj, norm_view(*L.ffn_norm, c.hidden), c.rms_eps, h);

  const int64_t ffn = L.sparse ? share_.shared_ffn.count : share_.ffn.count;
  tensor_view tmp = act(s_tmp_, n, c.hidden);
  if (L.sparse) {
    tensor_view logits = f32(s_rlog_, n, c.n_routed);
    be_.linear(*L.router, h, logits);
    tensor_view rid = ints(s_rid_, n, c.top_k), rw = f32(s_rw_, n, c.top_k);
    moe_routing r{c.n_routed, c.top_k, c.n_group, c.topk_group, c.norm_topk_prob, c.routed_scaling};
    be_.moe_route(logits, norm_view(*L.router_bias, c.n_routed), r, rid, rw);
    if (tp_.expert_parallel > 1) local_experts(L, h, rid, rw, c.n_shared > 0 ? tmp : proj);
    else be_.moe_experts(*L.experts, h, rid, rw, c.n_shared > 0 ? tmp : proj);
  }
  if (L.gate_up) {  // the dense MLP, or the shared experts added to the routed output
    tensor_view gu = act(s_gu_, n, 2 * ffn);
    tensor_view gate = tensor_view::contiguous(gu.data, gu.type, {n, ffn}, be_.dev());
    be_.linear_swiglu(*L.gate_up, h, gu, gate);
    be_.linear(*L.down, gate, proj);
    if (L.sparse) be_.add(tmp, proj, proj);
  }
  if (tp_.split()) reduce_partial(proj);  // routed and shared partials in one all-reduce
}

// x += proj; h = rms_norm(x): the stream after layer `done` (the model's index) is complete,
// and the same op keeps it in that layer's tap slot when it is a tap (no add of its own).
void glm_model::add_norm(const device_buffer& norm, int64_t n, int done) {
  tensor_view x = act(s_x_, n, cfg_.hidden), h = act(s_h_, n, cfg_.hidden), proj = act(s_proj_, n, cfg_.hidden);
  const auto tap = std::find(taps_.begin(), taps_.end(), done);  // a layer listed twice: its first slot
  if (tap == taps_.end()) return be_.add_rms_norm(x, proj, norm_view(norm, cfg_.hidden), cfg_.rms_eps, h);
  be_.add_rms_norm_keep(x, proj, norm_view(norm, cfg_.hidden), cfg_.rms_eps, h, tap_rows(tap - taps_.begin(), n));
}

tensor_view glm_model::tap_rows(int64_t slot, int64_t rows) const {
  const size_t el = static_cast<size_t>(traits(be_.activation_type()).block_bytes);
  char* base = static_cast<char*>(s_taps_.buf->data()) + static_cast<size_t>(slot * rows * cfg_.hidden) * el;
  return tensor_view::contiguous(base, be_.activation_type(), {rows, cfg_.hidden}, be_.dev());
}

// Split over ranks (tensor or pipeline), this process does not hold the whole table or head.
const linear_weight* glm_model::token_embedding() const {
  return tp_.split() || tp_.pp.stages > 1 ? nullptr : embed_.get();
}

const linear_weight* glm_model::output_head() const {
  if (tp_.split() || tp_.pp.stages > 1) return nullptr;
  return head_ ? head_.get() : embed_.get();
}

tensor_view glm_model::hidden_states(int i) const {
  if (i < 0) return tensor_view::contiguous(s_x_.buf->data(), be_.activation_type(), {n_tokens_, cfg_.hidden}, be_.dev());
  if (i >= static_cast<int>(taps_.size()))
    throw error(fmt::format("glm_model: hidden state {} was not asked for in the last forward", i));
  const auto first = std::find(taps_.begin(), taps_.end(), taps_[static_cast<size_t>(i)]);
  return tap_rows(first - taps_.begin(), n_tokens_);
}

std::vector<int32_t> glm_model::sample(const std::vector<sampling_params>& params) {
  if (static_cast<int64_t>(params.size()) != n_rows_)
    throw error(fmt::format("sample: {} parameter sets for {} logits rows", params.size(), n_rows_));
  std::vector<int32_t> out(n_rows_);
  if (n_rows_ == 0) return out;
  tensor_view ids = ints(s_sampled_, n_rows_);
  be_.sample(f32(s_logits_, n_rows_, cfg_.vocab), params, ids);
  be_.copy_to_host(out.data(), ids.data, out.size() * 4);
  be_.synchronize();
  return out;
}

std::vector<float> glm_model::logits_to_host() const {
  std::vector<float> out(static_cast<size_t>(n_rows_ * cfg_.vocab));
  if (out.empty()) return out;
  be_.copy_to_host(out.data(), s_logits_.buf->data(), out.size() * 4);
  be_.synchronize();
  return out;
}

}  // namespace tandem::glm
