#pragma once
// The llama architecture built from backend ops: weights loaded onto a backend, a KV
// pool's storage, and a forward pass over one step plan (prefill chunks and decode tokens
// of several sequences flattened into one batch).
//
// Across ranks (tp_group, backend.cpu over transport.gloo; backend.cuda over transport.nccl
// on one rank, the same path with collectives of one): this rank holds its share of the heads
// (by KV head, with their query heads), of the FFN and of the LM head's vocabulary; the
// o_proj and down outputs are all-reduced, the logits rows all-gathered (llama_tp.cpp).
// Across pipeline stages (tp.pp, backend.cpu; llama_pp.cpp): this rank holds a run of the
// layers and their KV; the first stage embeds, the last (rank 0) norms and computes the
// logits, and the residual stream passes from stage to stage.
//
// On a backend that records steps (CUDA graphs), pure decode steps are padded to a fixed
// set of batch sizes with a fixed page-table width and run through run_recorded(), so the
// same recorded step serves every decode step of that size; verify steps of small batches
// (a token and its draft per sequence) are recorded at their own shape, hidden-state taps
// included.
#include <cstdint>
#include <memory>
#include <vector>

#include "common/tp_shard.hpp"
#include "common/tp_vocab.hpp"
#include "llama_hparams.hpp"
#include "step_workspace.hpp"
#include "tandem/backend.hpp"
#include "tandem/model.hpp"
#include "tandem/step_plan.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

class llama_model final : public model {
 public:
  // Loads every weight of `weights` that the architecture needs onto `be`. model_error
  // when a tensor is missing or misshapen. The KV pool comes later (allocate_kv), so its
  // size can be taken from the memory the weights left.
  llama_model(backend& be, const weight_format& weights, const llama_hparams& hp, const tp_group& tp = {});
  // Both steps at once, for callers that know the pool size up front.
  llama_model(backend& be, const weight_format& weights, const llama_hparams& hp,
              int64_t kv_pages, int page_size);
  // batch_ points at rope_: not copyable or movable.
  llama_model(const llama_model&) = delete;
  llama_model& operator=(const llama_model&) = delete;
  // Allocates KV storage of `kv_pages` pages of `page_size` tokens; once, before forward.
  void allocate_kv(int64_t kv_pages, int page_size) override;

  const model_info& info() const override { return info_; }
  std::vector<backend_op> required_ops() const override;
  static std::vector<backend_op> ops();  // what every llama model uses
  kv_spec kv_needs() const override;
  // Any type the backend's attention reads (backend::kv_types); its preferred one until set.
  void set_kv_type(dtype t) override;
  const llama_hparams& hparams() const { return hp_full_; }
  const kv_layout& kv() const { return kv_->layout(); }

  // Computes the plan. Logits are kept for the last token of every sequence with
  // `sample` set, or for every token when opt.all_logits is true.
  void forward(const step_plan& plan, const forward_options& opt = {}) override;
  void forward(const step_plan& plan, bool all_logits) {
    forward_options o;
    o.all_logits = all_logits;
    forward(plan, o);
  }
  // One sampled token per logits row (after forward), in row order.
  std::vector<int32_t> sample(const std::vector<sampling_params>& params) override;
  // The logits rows of the last forward, [rows, vocab], copied to the host.
  std::vector<float> logits_to_host() const override;
  int64_t logit_rows() const override { return n_rows_; }
  // Residual stream of the last forward: after opt.hidden_layers[i], or (i = -1) the final
  // layer's output before the output norm. [n_tokens, hidden].
  tensor_view hidden_states(int i = -1) const override;
  const linear_weight* token_embedding() const override;
  const linear_weight* output_head() const override;

 private:
  struct layer {
    std::unique_ptr<device_buffer> attn_norm, ffn_norm;
    std::unique_ptr<linear_weight> wqkv, wo, gate_up, down;  // q/k/v and gate/up grouped
  };

  const tensor_info& tensor(const std::string& name) const;
  std::unique_ptr<linear_weight> linear(const std::string& name, int64_t out, int64_t in);
  std::unique_ptr<linear_weight> linear_group(const std::vector<std::pair<std::string, int64_t>>& parts, int64_t in);
  std::unique_ptr<device_buffer> norm(const std::string& name);
  void load_weights();
  void load_layer(layer& L, int l);  // layer l of the file (this rank's hp_) into L
  void load_split_weights();  // llama_tp.cpp
  void load_stage_weights();  // llama_pp.cpp: this pipeline stage's layers, embedding or head
  // llama_tp.cpp: completes a row-parallel output (a partial sum on each rank).
  void reduce_partial(tensor_view partial);
  // llama_tp.cpp: this rank's logits columns -> every rank's, into ws_.logits.
  void lm_head_split(int64_t rows);
  void run_layers(int n_tokens);
  // The same layers through backend::linear_fused (see fused_linears_).
  void run_layers_fused(int n_tokens);
  // x += proj; h = rms_norm(x, weight): the stream after layer `done` is complete, and kept
  // in its tap slot when it is a tap.
  void add_norm(int done, int n_tokens, const device_buffer& weight);
  // proj = in W^T, then add_norm's x += proj; h = rms_norm(x, weight), x also to `kept`
  // when set: one backend::linear_add_rms_norm unless norm_epilogue_ is off or the rank
  // holds a tensor split (proj is all-reduced between the two).
  void project_add_norm(const linear_weight& w, tensor_view in, int n_tokens, const device_buffer& weight,
                        tensor_view kept);
  tensor_view tap_of(int layer, int64_t rows) const;  // its tap slot's rows, or an empty view
  int tap_slot(int layer) const;  // the slot of taps_ that keeps `layer`, -1: none
  tensor_view tap_rows(int slot, int64_t rows) const;  // rows of a slot of taps_buf_
  // Sequences of the recorded step (a decode step padded), 0 = eager.
  int64_t recorded_seqs(const step_plan& plan, bool all_logits) const;
  static constexpr int64_t verify_max_seqs = 8;  // larger verify steps run eagerly
  tensor_view norm_view(const device_buffer& b) const;

  rope_params rope_;  // what attention() rotates q and k by
  backend& be_;
  const weight_format& weights_;
  llama_hparams hp_full_;  // the model's
  tp_group tp_;
  llama_hparams hp_;       // this rank's share: n_heads, n_kv_heads, ffn and n_layers are local
  int first_layer_ = 0;    // the model's index of layers_[0] (pipeline parallel)
  shard_store shards_;     // the weight slices this rank loaded (tensor parallel)
  std::unique_ptr<linear_weight> lm_head_;  // tensor parallel: this rank's vocabulary rows
  part vocab_part_;
  vocab_gather vocab_;                      // the LM head's logits columns -> whole rows
  std::unique_ptr<device_buffer> tp_local_logits_;
  model_info info_;
  std::unique_ptr<linear_weight> tok_embd_, output_;  // output_ null when tied
  std::unique_ptr<device_buffer> output_norm_;
  std::vector<layer> layers_;
  dtype kv_type_;  // element type of the K/V pool
  std::unique_ptr<kv_storage> kv_;
  step_workspace ws_;
  attention_batch batch_;
  std::vector<int> taps_;              // forward_options::hidden_layers of the last forward
  std::unique_ptr<device_buffer> taps_buf_;  // [slots, capacity, hidden]
  int64_t taps_capacity_ = 0, taps_slots_ = 0;
  uint64_t record_epoch_ = 0;  // bumped when the taps or their buffer change (part of the key)
  int n_tokens_ = 0;       // real token rows of the last step
  int64_t n_rows_ = 0;     // logits rows the caller sees (sampled or all)
  int64_t n_logits_ = 0;   // logits rows computed (n_rows_ plus padding rows)
  bool records_ = false;   // the backend may record steps: pad decode batches for it
  // TANDEM_LLAMA_FUSED_LINEARS=1: each pre-norm and the SiLU gate run inside the linear
  // that follows them and the o / down products are added to the residual stream by their
  // linears (backend.cuda's q8 GEMV: 5 launches a layer, not 8). Off by default (session 4
  // measured it slower at batch 1); steps with hidden-state taps or tensor parallelism run
  // the separate ops.
  bool fused_linears_ = false;
  // The gate/up product and its SiLU gate go through backend::linear_swiglu (backend.cuda:
  // one launch where the decode kernels run, the same bits); TANDEM_LLAMA_SWIGLU=0 runs
  // the linear and silu_mul as two ops, for an A/B in one run. (Putting the SiLU gate into
  // the down projection's staging instead was 3-18% slower at 1-4 rows on the H100,
  // session 14: every block then staged all 1,536 inputs itself.)
  bool separate_swiglu_ = false;
  // The o and down projections and the norms after them go through
  // backend::linear_add_rms_norm (backend.cuda: the norm runs in the last block of the q8
  // GEMV or the int8 tensor-core kernel, the same bits; 2 launches a layer fewer in decode);
  // only with TANDEM_LLAMA_NORM_EPILOGUE=1: bit-identical, but slower on an H100 (session
  // 16, bench_cuda_model: 1,110 tok/s against 1,336 at batch 1, 4,924 against 7,261 at 8:
  // the grid's last block normalising alone costs more than the separate norm's launch).
  bool norm_epilogue_ = false;
  const uint64_t recording_owner_ = new_recording_owner();  // this model's recorded steps
  int32_t pad_page_ = 0;   // the extra KV page padding rows write to
};

}  // namespace tandem
