#pragma once
// glm_moe_dsa (the GLM-5 family, transformers' GlmMoeDsaForCausalLM) from backend ops:
// MLA attention over a paged latent cache (kv_lora_rank + rope dims per token, the
// up-projection absorbed), DeepSeek sparse attention (a lightning indexer per "full" layer
// with its own paged key cache; "shared" layers reuse the previous full layer's top-k),
// sigmoid-routed experts with a correction bias and grouped top-k plus shared experts, and
// dense MLPs in the first layers.
//
// Per layer:  h = rms(x);  q = q_b(rms(q_a h));  kv_a = [rms(c) | k_rope] = kv_a_proj h;
//   topk = indexer(wq_b(rms(q_a h)), LN(wk h), weights_proj h)       (full layers)
//   x += o_proj(mla_attention(q, kv_a, kv_b, topk));  h = rms(x)
//   x += dense MLP(h)  or  experts(h, route(gate h)) + shared(h)
//
// Across ranks (tp_group of size > 1, backend.cpu; glm_tp.cpp): each rank holds a run of the
// MLA heads (q_b_proj and kv_b_proj rows, o_proj columns), of the dense and shared-expert
// FFN, and of the LM head's vocabulary; the latent projection, the indexer and the router
// are replicated. Routed experts are split by FFN (expert_parallel 1) or by expert id
// (expert_parallel == ranks: each rank runs its experts' share for every token). o_proj and
// the MLP outputs are partial sums that one all-reduce each completes.
// Across pipeline stages (tp.pp, backend.cpu; glm_pp.cpp): each rank holds a run of the
// layers with their caches; the residual stream, and the top-k when the next stage begins
// with a "shared" DSA layer, pass from stage to stage; the last stage (rank 0) computes the
// logits and holds the MTP layers.
#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "common/tp_shard.hpp"
#include "common/tp_vocab.hpp"
#include "glm_config.hpp"
#include "tandem/backend.hpp"
#include "tandem/model.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/tensor.hpp"

namespace tandem::glm {

struct glm_layer {
  std::unique_ptr<device_buffer> attn_norm, ffn_norm, q_a_norm, kv_a_norm;
  std::unique_ptr<linear_weight> a_proj;   // q_a_proj and kv_a_proj_with_mqa, grouped
  std::unique_ptr<linear_weight> q_b, o_proj;
  std::unique_ptr<mla_weight> kv_b;
  // indexer (layers with their own)
  std::unique_ptr<linear_weight> idx_wq_b, idx_wk, idx_weights;
  std::unique_ptr<device_buffer> idx_k_norm_w, idx_k_norm_b;
  int indexer_slot = -1;                   // layer of the indexer key cache, -1: shared
  int kv_layer = 0;                        // layer of the latent cache
  bool sparse = false;                     // routed experts (else a dense MLP)
  // dense MLP, or the shared experts of a MoE layer
  std::unique_ptr<linear_weight> gate_up, down;
  // MoE
  std::unique_ptr<linear_weight> router;   // f32 {experts, hidden}
  std::unique_ptr<device_buffer> router_bias;
  std::unique_ptr<expert_weights> experts;
};

// This rank's run of each dimension the model splits (all of it on one rank).
struct glm_share {
  part heads, ffn, shared_ffn, expert_ffn, experts, vocab;
  static glm_share of(const glm_config& c, const tp_group& tp);  // glm_tp.cpp
};

// A multi-token-prediction layer (DeepSeek-V3's, which GLM-5 checkpoints carry after the
// stack as model.layers.N.*): h = eh_proj [enorm(embed(t_next)) | hnorm(h_prev)], one more
// decoder layer, then shared_head.norm and the head (shared_head.head, else lm_head).
struct glm_mtp {
  std::unique_ptr<device_buffer> enorm, hnorm, head_norm;
  std::unique_ptr<linear_weight> eh_proj, head;  // head null: lm_head
  glm_layer block;
};

class glm_model final : public model {
 public:
  // dsa false: every layer attends to its whole context (dense MLA, no indexer and no
  // indexer cache) -- the same model with DSA switched off, for measurements.
  // tp: this rank's group when the model is split across ranks (see above).
  glm_model(backend& be, const weight_format& weights, glm_config cfg, bool dsa = true, const tp_group& tp = {});
  glm_model(const glm_model&) = delete;
  glm_model& operator=(const glm_model&) = delete;

  static std::vector<backend_op> ops_for(const glm_config& c);
  const glm_config& config() const { return cfg_; }

  const model_info& info() const override { return info_; }
  std::vector<backend_op> required_ops() const override { return ops_for(cfg_); }
  kv_spec kv_needs() const override;
  void allocate_kv(int64_t kv_pages, int page_size) override;
  void forward(const step_plan& plan, const forward_options& opt = {}) override;
  std::vector<int32_t> sample(const std::vector<sampling_params>& params) override;
  std::vector<float> logits_to_host() const override;
  int64_t logit_rows() const override { return n_rows_; }
  tensor_view hidden_states(int i = -1) const override;
  const linear_weight* token_embedding() const override;
  const linear_weight* output_head() const override;
  // The final hidden states of the last forward() after the output norm, [n_tokens, hidden]
  // (what an MTP layer conditions on).
  tensor_view normed_hidden_states() const;
  int mtp_layers() const { return static_cast<int>(mtp_.size()); }
  // Runs MTP layer k over `plan`, whose tokens are each position's NEXT token, conditioned on
  // prev_hidden [plan.n_tokens(), hidden] (the main model's normed_hidden_states() of the same
  // positions, or the previous MTP layer's); its logits replace the last forward's for
  // sample() / logits_to_host(). Uses the pages of `plan` in MTP layer k's own caches.
  void forward_mtp(const step_plan& plan, tensor_view prev_hidden, int k = 0, bool all_logits = false);

 private:
  // Buffers one step works in, grown (never shrunk) to the largest step seen.
  struct scratch {
    std::unique_ptr<device_buffer> buf;
    size_t bytes = 0;
  };
  tensor_view act(scratch& s, int64_t rows, int64_t cols);
  tensor_view ints(scratch& s, int64_t n, int64_t cols = 1);
  tensor_view upload(scratch& s, const std::vector<int32_t>& v);
  tensor_view f32(scratch& s, int64_t rows, int64_t cols);
  tensor_view norm_view(const device_buffer& b, int64_t n) const;

  void load_weights(const weight_format& w, bool dsa);
  // glm_pp.cpp: this rank's layers (all of them without pipeline stages); sets first_layer_
  // and what crosses a stage boundary besides the residual stream.
  part stage_layers(bool dsa);
  // glm_pp.cpp: a later stage takes x, proj (and the top-k) from the previous one; a stage
  // before the last hands them on.
  void receive_stream(int64_t n, tensor_view& topk);
  void pass_on_stream(int64_t n, tensor_view topk);
  void load_layer(const weight_format& w, glm_layer& L, int l, bool own_indexer, bool sparse, int& slot);
  // The batch a decode step is padded to so the backend may record it (0: run it eagerly).
  int64_t decode_batch(const step_plan& plan, bool all_logits) const;
  // batch_, ids, rows of a plan, and padded - plan sequences padding rows (padded > 0).
  void prepare_step(const step_plan& plan, bool all_logits, int64_t padded);
  void run_stack(int64_t n);  // embed, every layer, the logits rows: one step's kernels
  // One decoder layer; `first`: x is fresh (no previous layer's output to add).
  void run_layer(const glm_layer& L, int64_t n, tensor_view& topk, bool first);
  // `done`: the layer whose output joins the stream there (its tap is kept), -1: none.
  void logits_of(const linear_weight& head, const device_buffer& norm, int64_t n, int done);
  // x += proj; h = rms_norm(x, norm), keeping the stream in layer `done`'s tap slot if it has one.
  void add_norm(const device_buffer& norm, int64_t n, int done);
  tensor_view tap_rows(int64_t slot, int64_t rows) const;  // [rows, hidden] of s_taps_'s slot
  // glm_tp.cpp: the weight slice this rank holds: rows (output features) or columns (input
  // features) p.begin * unit .. + p.count * unit of t; t itself when the part is all of it.
  const tensor_info& out_share(const tensor_info& t, part p, int64_t unit);
  const tensor_info& in_share(const tensor_info& t, part p, int64_t unit);
  void check_split_runs() const;                 // glm_tp.cpp: what a split needs of the backend
  void reduce_partial(tensor_view partial);      // glm_tp.cpp: all-reduce of a row-parallel output
  // glm_tp.cpp, expert parallel: out = this rank's experts' share of the routed output.
  void local_experts(const glm_layer& L, tensor_view h, tensor_view ids, tensor_view weights, tensor_view out);
  // glm_tp.cpp: this rank's vocabulary columns of the logits rows -> whole rows in s_logits_.
  void split_logits(const linear_weight& head, tensor_view rows_h);

  backend& be_;
  glm_config cfg_;
  tp_group tp_;
  glm_share share_;
  shard_store shards_;   // the weight slices this rank loaded
  std::deque<exl3::exl3_tensor> exl3_views_;  // EXL3 linears trimmed to their unpadded shape
  vocab_gather vocab_;
  model_info info_;
  std::unique_ptr<linear_weight> embed_, head_;
  std::unique_ptr<device_buffer> out_norm_;
  std::vector<glm_layer> layers_;
  std::vector<glm_mtp> mtp_;
  tensor_view ids_, rows_;
  std::unique_ptr<kv_storage> latent_kv_, index_kv_;
  attention_batch batch_;
  mla_params mla_;

  scratch s_x_, s_h_, s_proj_, s_tmp_, s_a_, s_qres_, s_q_, s_attn_, s_iq_, s_ik_, s_iw_, s_topk_;
  scratch s_gu_, s_rlog_, s_rid_, s_rw_, s_rows_h_, s_logits_, s_sampled_;
  scratch s_ids_, s_pos_, s_slots_, s_qstart_, s_lens_, s_table_, s_rows_, s_taps_;
  scratch s_tp_logits_, s_ep_rows_, s_ep_ids_, s_ep_w_, s_ep_x_, s_ep_y_;
  std::vector<int32_t> ep_rows_, ep_ids_;
  std::vector<float> ep_w_;
  std::vector<int> taps_;
  int first_layer_ = 0;         // the model's index of layers_[0] (pipeline parallel)
  bool topk_from_prev_ = false;  // this stage begins with a shared DSA layer
  bool topk_to_next_ = false;    // the next stage does
  // The plan's tokens and logits rows; the step's, with padding rows (recorded steps).
  int64_t n_tokens_ = 0, n_rows_ = 0, n_step_tokens_ = 0, n_logit_rows_ = 0, table_width_ = 0;
  bool records_ = false;       // the backend may record steps: pad decode batches for it
  int32_t pad_page_ = 0;       // the extra KV page padding rows write to
  uint64_t generation_ = 0;    // bumped whenever a scratch buffer is reallocated
  std::set<uint64_t> warmed_;  // step keys run once eagerly (buffers at their size)
  const uint64_t recording_owner_ = new_recording_owner();  // this model's recorded steps
};

}  // namespace tandem::glm
