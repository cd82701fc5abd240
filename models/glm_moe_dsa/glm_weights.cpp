// glm_model's weights under their Hugging Face names, shape-checked against the config.
// Routed experts come per expert (model.layers.L.mlp.experts.E.gate_proj.weight, as GLM-5's
// checkpoints store them) or fused (mlp.experts.gate_up_proj {E, 2F, H} and down_proj
// {E, H, F}, as transformers 5 holds them); a fused tensor is cut into per-expert views.
// Across ranks, each split tensor goes through out_share / in_share (glm_tp.cpp).
// From weights.exl3 (exllamav3's layout): every linear may be an EXL3 tensor stored padded
// to multiples of 128, trimmed here to the shape the config gives; kv_b_proj, norms and the
// router's correction bias must be plain (exllamav3 never quantizes them).
#include <algorithm>
#include <deque>
#include <string>

#include "glm_model.hpp"
#include "tandem/error.hpp"
#include "tandem_exl3/tensor.hpp"

namespace tandem::glm {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

class loader {
 public:
  loader(backend& be, const weight_format& w, const glm_config& c, std::deque<exl3::exl3_tensor>& descriptors)
      : be_(be), w_(w), c_(c), descriptors_(descriptors) {}

  const tensor_info& get(const std::string& name, std::vector<int64_t> shape) {
    const tensor_info* t = w_.find(name);
    if (!t) throw model_error(c_.file, "tensor " + name + " is missing");
    if (t->type == exl3::exl3_tensor::type && t->shape != shape) return trimmed(*t, shape);
    if (t->shape != shape)
      throw model_error(c_.file, "tensor " + name + " has shape " + shape_str(t->shape) + ", expected " +
                                     shape_str(shape));
    return *t;
  }
  // An EXL3 linear stored padded to multiples of 128 (k x n) as the {out, in} linear the
  // model expects: exllamav3 pads the input with zeros and drops the extra outputs.
  const tensor_info& trimmed(const tensor_info& t, const std::vector<int64_t>& shape) {
    const exl3::exl3_tensor* e = exl3::exl3_tensor::of(t.type, t.data, t.nbytes);
    auto padded = [](int64_t v) { return (v + 127) / 128 * 128; };
    if (e == nullptr || shape.size() != 2 || e->in_features != e->k || e->out_features != e->n ||
        padded(shape[1]) != e->k || padded(shape[0]) != e->n)
      throw model_error(c_.file, "EXL3 tensor " + t.name + " has shape " + shape_str(t.shape) + ", expected " +
                                     shape_str(shape) + " (padded to multiples of 128)");
    exl3::exl3_tensor d = *e;
    d.out_features = shape[0];
    d.in_features = shape[1];
    descriptors_.push_back(d);
    tensor_info v = t;
    v.shape = shape;
    v.data = &descriptors_.back();
    slices_.push_back(std::move(v));
    return slices_.back();
  }
  // A plain tensor the model reads as numbers (exllamav3 keeps these unquantized).
  const tensor_info& plain(const std::string& name, std::vector<int64_t> shape) {
    const tensor_info& t = get(name, std::move(shape));
    if (t.type == exl3::exl3_tensor::type)
      throw model_error(c_.file, "tensor " + name + " is " + t.type_name() +
                                     "-quantized; it must be stored unquantized (exllamav3 keeps it fp16)");
    return t;
  }
  std::unique_ptr<linear_weight> linear(const std::string& name, int64_t out, int64_t in) {
    return be_.load_linear(get(name, {out, in}));
  }
  std::unique_ptr<linear_weight> group(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in) {
    std::vector<const tensor_info*> infos;
    for (const auto& [name, out] : parts) infos.push_back(&get(name, {out, in}));
    return be_.load_linear_group(infos);
  }
  std::unique_ptr<device_buffer> vec(const std::string& name, int64_t n) {
    return be_.load_tensor(plain(name, {n}), dtype::f32);
  }
  // Expert e's {rows, cols} matrix at row offset `row0` of a fused {E, R, cols} tensor.
  const tensor_info* slice(const tensor_info& fused, int e, int64_t row0, int64_t rows) {
    const int64_t cols = fused.shape[2];
    const size_t el = static_cast<size_t>(traits(fused.type).block_bytes);
    if (traits(fused.type).block_elems != 1)
      throw model_error(c_.file, "tensor " + fused.name + ": fused experts must be a plain float type");
    tensor_info t;
    t.name = fused.name + "[" + std::to_string(e) + "]";
    t.type = fused.type;
    t.shape = {rows, cols};
    t.nbytes = static_cast<size_t>(rows * cols) * el;
    t.data = static_cast<const char*>(fused.data) + (static_cast<size_t>(e) * fused.shape[1] + row0) * cols * el;
    slices_.push_back(std::move(t));
    return &slices_.back();
  }
  const weight_format& weights() const { return w_; }

 private:
  backend& be_;
  const weight_format& w_;
  const glm_config& c_;
  std::deque<tensor_info> slices_;  // stable addresses while the experts load
  std::deque<exl3::exl3_tensor>& descriptors_;  // trimmed EXL3 views, alive as long as the model
};

}  // namespace

void glm_model::load_weights(const weight_format& w, bool dsa) {
  loader ld(be_, w, cfg_, exl3_views_);
  const glm_config& c = cfg_;
  // Across pipeline stages the first holds the embedding, the last the norm and the head.
  const pp_stage& pp = tp_.pp;
  const part mine = stage_layers(dsa);  // every layer on one rank
  const bool head_is_embed = c.tied_embeddings && !tp_.split();
  if (pp.first() || (pp.last() && head_is_embed)) embed_ = ld.linear("model.embed_tokens.weight", c.vocab, c.hidden);
  if (pp.last()) {
    // Split, the head is this rank's vocabulary rows, of the embedding table when tied.
    if (!head_is_embed)
      head_ = be_.load_linear(out_share(ld.get(c.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
                                               {c.vocab, c.hidden}),
                                        share_.vocab, 1));
    out_norm_ = ld.vec("model.norm.weight", c.hidden);
  }
  layers_.resize(mine.count);
  int slot = 0;
  for (int i = 0; i < mine.count; ++i) {
    const int l = static_cast<int>(mine.begin) + i;
    load_layer(w, layers_[i], l, dsa && c.own_indexer[l], c.sparse_mlp[l], slot);
  }
  if (!pp.last()) return;
  // MTP layers follow the stack (on its last stage): a MoE decoder layer (dense when every
  // layer is), with its own indexer when the checkpoint has one (else it attends to the
  // whole context).
  mtp_.resize(c.nextn_layers);
  for (int k = 0; k < c.nextn_layers; ++k) {
    const int l = c.n_layers + k;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    glm_mtp& M = mtp_[k];
    M.enorm = ld.vec(p + "enorm.weight", c.hidden);
    M.hnorm = ld.vec(p + "hnorm.weight", c.hidden);
    M.eh_proj = ld.linear(p + "eh_proj.weight", c.hidden, 2 * c.hidden);
    M.head_norm = ld.vec(p + "shared_head.norm.weight", c.hidden);
    if (w.find(p + "shared_head.head.weight"))
      M.head = be_.load_linear(out_share(ld.get(p + "shared_head.head.weight", {c.vocab, c.hidden}), share_.vocab, 1));
    const bool own = dsa && w.find(p + "self_attn.indexer.wk.weight") != nullptr;
    const bool sparse = std::find(c.sparse_mlp.begin(), c.sparse_mlp.end(), true) != c.sparse_mlp.end();
    load_layer(w, M.block, l, own, sparse, slot);
  }
}

void glm_model::load_layer(const weight_format& w, glm_layer& L, int l, bool own_indexer, bool sparse, int& slot) {
  loader ld(be_, w, cfg_, exl3_views_);
  const glm_config& c = cfg_;
  const int64_t H = c.n_heads;
  // [gate | up] of this rank's FFN part, grouped, and its down.
  auto mlp = [&](const std::string& gate, const std::string& up, const std::string& down, int64_t ffn, part p) {
    const tensor_info* gu[] = {&out_share(ld.get(gate, {ffn, c.hidden}), p, 1),
                               &out_share(ld.get(up, {ffn, c.hidden}), p, 1)};
    L.gate_up = be_.load_linear_group(gu);
    L.down = be_.load_linear(in_share(ld.get(down, {c.hidden, ffn}), p, 1));
  };
  {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    L.kv_layer = l - first_layer_;  // this rank's latent cache holds its stage's layers
    L.sparse = sparse;
    L.attn_norm = ld.vec(p + "input_layernorm.weight", c.hidden);
    L.ffn_norm = ld.vec(p + "post_attention_layernorm.weight", c.hidden);
    L.a_proj = ld.group({{a + "q_a_proj.weight", c.q_lora_rank},
                         {a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope}}, c.hidden);
    L.q_a_norm = ld.vec(a + "q_a_layernorm.weight", c.q_lora_rank);
    L.kv_a_norm = ld.vec(a + "kv_a_layernorm.weight", c.kv_lora_rank);
    const part heads = share_.heads;  // this rank's MLA heads
    L.q_b = be_.load_linear(
        out_share(ld.get(a + "q_b_proj.weight", {H * c.qk_head_dims(), c.q_lora_rank}), heads, c.qk_head_dims()));
    L.kv_b = be_.load_mla(out_share(ld.plain(a + "kv_b_proj.weight", {H * (c.qk_nope + c.v_dims), c.kv_lora_rank}),
                                    heads, c.qk_nope + c.v_dims),
                          static_cast<int>(heads.count), c.qk_nope, c.v_dims);
    L.o_proj = be_.load_linear(in_share(ld.get(a + "o_proj.weight", {c.hidden, H * c.v_dims}), heads, c.v_dims));
    if (own_indexer) {
      const std::string ix = a + "indexer.";
      L.indexer_slot = slot++;
      L.idx_wq_b = ld.linear(ix + "wq_b.weight", int64_t(c.index_heads) * c.index_dims, c.q_lora_rank);
      L.idx_wk = ld.linear(ix + "wk.weight", c.index_dims, c.hidden);
      L.idx_k_norm_w = ld.vec(ix + "k_norm.weight", c.index_dims);
      L.idx_k_norm_b = ld.vec(ix + "k_norm.bias", c.index_dims);
      L.idx_weights = ld.linear(ix + "weights_proj.weight", c.index_heads, c.hidden);
    }
    const std::string m = p + "mlp.";
    if (!sparse) return mlp(m + "gate_proj.weight", m + "up_proj.weight", m + "down_proj.weight", c.ffn, share_.ffn);
    const int64_t F = c.moe_ffn, shared = c.moe_ffn * c.n_shared;
    if (c.n_shared > 0)
      mlp(m + "shared_experts.gate_proj.weight", m + "shared_experts.up_proj.weight",
          m + "shared_experts.down_proj.weight", shared, share_.shared_ffn);
    L.router = ld.linear(m + "gate.weight", c.n_routed, c.hidden);
    L.router_bias = ld.vec(m + "gate.e_score_correction_bias", c.n_routed);
    // This rank's experts (expert parallel) and its part of each one's FFN (tensor parallel).
    std::vector<const tensor_info*> gate, up, down;
    const part ex = share_.experts, ef = share_.expert_ffn;
    auto add = [&](const tensor_info& g, const tensor_info& u, const tensor_info& d) {
      gate.push_back(&out_share(g, ef, 1));
      up.push_back(&out_share(u, ef, 1));
      down.push_back(&in_share(d, ef, 1));
    };
    if (const tensor_info* fused = w.find(m + "experts.gate_up_proj")) {
      const tensor_info& gu = ld.get(fused->name, {c.n_routed, 2 * F, c.hidden});
      const tensor_info& dn = ld.get(m + "experts.down_proj", {c.n_routed, c.hidden, F});
      for (int e = static_cast<int>(ex.begin); e < ex.begin + ex.count; ++e)
        add(*ld.slice(gu, e, 0, F), *ld.slice(gu, e, F, F), *ld.slice(dn, e, 0, c.hidden));
    } else {
      for (int e = static_cast<int>(ex.begin); e < ex.begin + ex.count; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        add(ld.get(x + "gate_proj.weight", {F, c.hidden}), ld.get(x + "up_proj.weight", {F, c.hidden}),
            ld.get(x + "down_proj.weight", {c.hidden, F}));
      }
    }
    L.experts = be_.load_experts(gate, up, down);
  }
}

}  // namespace tandem::glm
