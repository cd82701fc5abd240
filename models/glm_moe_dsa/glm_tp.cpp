// glm_moe_dsa across the ranks of a tp_group (Megatron-LM's split for MLA as vLLM's
// DeepseekV2 / GLM-5 models make it; expert parallel the simplest correct way):
//   MLA      heads split: q_b_proj and kv_b_proj keep this rank's heads' rows, o_proj their
//            columns (row-parallel) and an all-reduce sums the partial outputs. q_a / kv_a
//            (the latent, which every head reads) and the DSA indexer stay replicated, so
//            every rank writes the same latent and indexer caches and selects the same top-k;
//   MLPs     the dense MLP and the shared experts column / row split over their FFN;
//   experts  expert_parallel 1: every rank holds a slice of every expert's FFN (its
//            partial output joins the shared experts' in the MLP's one all-reduce);
//            expert_parallel == ranks: a rank holds whole experts, a run of expert ids, and
//            computes the routed output of its experts for every token (the router is
//            replicated, so all ranks route alike); the same all-reduce combines them;
//   LM head  vocabulary-parallel, the logits rows all-gathered (vocab_gather).
// The collectives take host memory, so the split runs on backend.cpu.
#include <cstring>
#include <fmt/format.h>

#include "glm_model.hpp"
#include "tandem/error.hpp"

namespace tandem::glm {

glm_share glm_share::of(const glm_config& c, const tp_group& tp) {
  const part whole_heads{0, c.n_heads}, whole_ffn{0, c.ffn}, whole_shared{0, c.moe_ffn * c.n_shared};
  glm_share s{whole_heads, whole_ffn, whole_shared, {0, c.moe_ffn}, {0, c.n_routed}, {0, c.vocab}};
  if (!tp.split()) return s;
  if (tp.expert_parallel != 1 && tp.expert_parallel != tp.size)
    throw model_error(c.file, fmt::format("expert_parallel {} must be 1 or the group's {} ranks", tp.expert_parallel,
                                          tp.size));
  const bool dense = std::find(c.sparse_mlp.begin(), c.sparse_mlp.end(), false) != c.sparse_mlp.end();
  const bool moe = std::find(c.sparse_mlp.begin(), c.sparse_mlp.end(), true) != c.sparse_mlp.end();
  s.heads = split_evenly(c.n_heads, tp.rank, tp.size, "MLA heads");
  if (dense) s.ffn = split_evenly(c.ffn, tp.rank, tp.size, "dense FFN");
  if (moe && c.n_shared > 0) s.shared_ffn = split_evenly(c.moe_ffn * c.n_shared, tp.rank, tp.size, "shared experts' FFN");
  if (moe && tp.expert_parallel > 1) s.experts = split_evenly(c.n_routed, tp.rank, tp.size, "routed experts");
  else if (moe) s.expert_ffn = split_evenly(c.moe_ffn, tp.rank, tp.size, "experts' FFN");
  s.vocab = split_evenly(c.vocab, tp.rank, tp.size, "vocabulary");
  return s;
}

void glm_model::check_split_runs() const {
  if (!tp_.comm || tp_.comm->world_size() != tp_.size)
    throw error(fmt::format("glm_model: a tensor-parallel group needs its transport (world of {})", tp_.size));
  if (be_.dev().kind != device_kind::cpu || be_.activation_type() != dtype::f32)
    throw model_error(cfg_.file, "glm_moe_dsa splits across ranks on backend.cpu only for now (the collectives "
                                 "take host memory, f32 activations)");
}

const tensor_info& glm_model::out_share(const tensor_info& t, part p, int64_t unit) {
  if (t.shape.size() == 2 && p.begin == 0 && p.count * unit == t.shape[0]) return t;
  return shards_.rows(t, p.begin * unit, p.count * unit);
}

const tensor_info& glm_model::in_share(const tensor_info& t, part p, int64_t unit) {
  if (t.shape.size() == 2 && p.begin == 0 && p.count * unit == t.shape[1]) return t;
  return shards_.cols(t, p.begin * unit, p.count * unit);
}

void glm_model::reduce_partial(tensor_view partial) {
  be_.synchronize();  // the partial sum is complete in host memory
  tp_.comm->all_reduce_sum(partial);
}

void glm_model::local_experts(const glm_layer& L, tensor_view h, tensor_view ids, tensor_view weights,
                              tensor_view out) {
  be_.synchronize();  // the routing is in host memory
  const int64_t n = ids.shape[0], k = ids.shape[1], hidden = cfg_.hidden;
  const int64_t first = share_.experts.begin, last = first + share_.experts.count;
  const auto* id = static_cast<const int32_t*>(ids.data);
  const auto* w = static_cast<const float*>(weights.data);
  // One (token, expert) pair a row, for this rank's experts only: moe_experts with k = 1
  // computes exactly this rank's share, no expert runs for a token not routed to it.
  ep_rows_.clear();
  ep_ids_.clear();
  ep_w_.clear();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = id[i * ids.strides[0] + j];
      if (e < first || e >= last) continue;
      ep_rows_.push_back(static_cast<int32_t>(i));
      ep_ids_.push_back(static_cast<int32_t>(e - first));
      ep_w_.push_back(w[i * weights.strides[0] + j]);
    }
  auto* dst = static_cast<float*>(out.data);
  for (int64_t i = 0; i < n; ++i) std::memset(dst + i * out.strides[0], 0, sizeof(float) * hidden);
  const int64_t pairs = static_cast<int64_t>(ep_rows_.size());
  if (pairs == 0) return;
  tensor_view rows = upload(s_ep_rows_, ep_rows_);
  tensor_view pair_ids = upload(s_ep_ids_, ep_ids_);
  pair_ids.ndim = 2;
  pair_ids.shape = {pairs, 1, 0, 0};
  pair_ids.strides = {1, 1, 0, 0};
  tensor_view pair_w = f32(s_ep_w_, pairs, 1);
  be_.copy_to_device(pair_w.data, ep_w_.data(), ep_w_.size() * sizeof(float));
  tensor_view xs = act(s_ep_x_, pairs, hidden), ys = act(s_ep_y_, pairs, hidden);
  be_.gather_rows(h, rows, xs);
  be_.moe_experts(*L.experts, xs, pair_ids, pair_w, ys);
  be_.synchronize();
  const auto* y = static_cast<const float*>(ys.data);
  for (int64_t p = 0; p < pairs; ++p) {
    float* o = dst + ep_rows_[p] * out.strides[0];
    for (int64_t d = 0; d < hidden; ++d) o[d] += y[p * hidden + d];
  }
}

void glm_model::split_logits(const linear_weight& head, tensor_view rows_h) {
  tensor_view local = f32(s_tp_logits_, n_logit_rows_, share_.vocab.count);
  be_.linear(head, rows_h, local);
  be_.synchronize();
  vocab_.gather(tp_, be_, static_cast<const float*>(local.data), n_logit_rows_, cfg_.vocab,
                static_cast<float*>(f32(s_logits_, n_logit_rows_, cfg_.vocab).data));
}

}  // namespace tandem::glm
