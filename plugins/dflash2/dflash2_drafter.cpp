#include "dflash2_drafter.hpp"

#include <algorithm>

#include "tandem/backend.hpp"
#include "tandem/error.hpp"

namespace tandem {

dflash2_settings dflash2_settings::from(const config& cfg) {
  dflash2_settings s;
  s.weights = cfg.get_string("weights");
  s.k = static_cast<int>(cfg.get_int("k"));
  s.disable_above_batch = static_cast<int>(cfg.get_int("disable_above_batch"));
  s.adaptive = cfg.get_bool("adaptive");
  s.weights_type = cfg.get_string("weights_type");
  return s;
}

dflash2_drafter::dflash2_drafter(const dflash2_settings& s) : s_(s) {
  if (s_.weights.empty())
    throw config_error("drafter.weights", "is required: the dflash2 drafter directory (config.json, "
                                          "model.safetensors, MANIFEST.sha256)");
  try {
    weights_ = dflash2_weights::open(s_.weights);
  } catch (const model_error& e) {
    throw config_error("drafter.weights", e.what());
  }
  const int most = weights_->config().block_size - 1;
  if (s_.k > most)
    throw config_error("drafter.k", "is " + std::to_string(s_.k) + ", but a block of " +
                                        std::to_string(most + 1) + " (config.json block_size) drafts at most " +
                                        std::to_string(most));
  k_ = s_.k > 0 ? s_.k : most;
}

dflash2_drafter::~dflash2_drafter() = default;

void dflash2_drafter::bind(const draft_target& t) {
  const dflash2_config& c = weights_->config();
  const std::string cfg_file = (weights_->dir() / "config.json").string();
  const auto refuse = [](const std::string& why) { throw config_error("drafter.plugin", "drafter.dflash2 " + why); };
  if (!t.be || !t.embedding || !t.lm_head) refuse("needs the target's backend, embedding table and head");
  // Any backend: the network runs as its ops (the small ones have host defaults).
  if (t.be->activation_type() != dtype::f32)
    refuse("needs f32 activations from the target's backend (" + t.be->describe() + " has " +
           std::string(name(t.be->activation_type())) + ")");
  const auto mismatch = [&](const std::string& key, const std::string& drafter, const std::string& target) {
    refuse("was trained for a target with " + key + " " + drafter + " (" + cfg_file + "), but the model has " + target);
  };
  if (t.arch != c.target.arch) mismatch("arch", c.target.arch, t.arch);
  if (t.hidden != c.target.hidden_size)
    mismatch("hidden_size", std::to_string(c.target.hidden_size), std::to_string(t.hidden));
  if (t.vocab != c.target.vocab_size) mismatch("vocab_size", std::to_string(c.target.vocab_size), std::to_string(t.vocab));
  if (t.n_layers != c.target.num_layers)
    mismatch("num_layers", std::to_string(c.target.num_layers), std::to_string(t.n_layers));
  for (int l : c.target_layers)
    if (l < 0 || l >= t.n_layers)
      refuse("reads target layer " + std::to_string(l) + ", outside the model's 0.." + std::to_string(t.n_layers - 1));
  for (const linear_weight* w : {t.embedding, t.lm_head})
    if (w->in_features() != c.hidden_size || w->out_features() != c.target.vocab_size)
      refuse("needs the target's embedding and head as {" + std::to_string(c.target.vocab_size) + ", " +
             std::to_string(c.hidden_size) + "}, not {" + std::to_string(w->out_features()) + ", " +
             std::to_string(w->in_features()) + "}");
  for (backend_op op : {backend_op::embed, backend_op::rms_norm, backend_op::linear, backend_op::rope,
                        backend_op::gather_rows, backend_op::attention_full, backend_op::dynamic_conv, backend_op::top_k})
    if (!t.be->supports(op)) refuse("needs op " + std::string(name(op)) + ", which " + t.be->describe() + " lacks");
  seqs_.clear();
  spare_.free.clear();  // buffers of an earlier backend
  pass_.reset();
  model_ = dflash2_model::load(*weights_, *t.be, *t.embedding, *t.lm_head, s_.weights_type == "q8_0");
  pass_ = std::make_unique<dflash2::forward_pass>(*model_, *t.be);
  be_ = t.be;
}

dflash2::sequence_context& dflash2_drafter::sequence(uint64_t seq_id) {
  const dflash2_config& c = weights_->config();
  return seqs_
      .try_emplace(seq_id, *be_, spare_, c.num_layers, c.kv_width(), c.context_window, c.block_size, c.taps(),
                   c.hidden_size, pending_taps)
      .first->second;
}

const dflash2::sequence_context* dflash2_drafter::context(uint64_t seq_id) const {
  auto it = seqs_.find(seq_id);
  return it == seqs_.end() ? nullptr : &it->second;
}

void dflash2_drafter::observe(uint64_t seq_id, int64_t first_pos, std::span<const tensor_view> taps) {
  if (!model_) throw error("drafter.dflash2: observe() before bind()");
  const dflash2_config& c = weights_->config();
  if (static_cast<int>(taps.size()) != c.taps())
    throw error("drafter.dflash2: observe() got " + std::to_string(taps.size()) + " taps, target_layers() lists " +
                std::to_string(c.taps()));
  if (first_pos < 0) throw error("drafter.dflash2: observe() at position " + std::to_string(first_pos));
  const int64_t n = taps.empty() ? 0 : taps[0].shape[0];
  for (const tensor_view& v : taps)
    if (v.ndim != 2 || v.shape[0] != n || v.shape[1] != c.hidden_size)
      throw error("drafter.dflash2: observe() taps must each be [" + std::to_string(n) + ", " +
                  std::to_string(c.hidden_size) + "]");
  if (n == 0) return;

  for (const tensor_view& v : taps)
    if (v.type != dtype::f32)
      throw error("drafter.dflash2: a tap is not [n, hidden] f32 rows (" + std::string(name(v.type)) + ")");
  positions_.resize(static_cast<size_t>(n));  // kept between calls: no allocation a step
  for (int64_t r = 0; r < n; ++r) positions_[static_cast<size_t>(r)] = first_pos + r;
  dflash2::sequence_context& seq = sequence(seq_id);
  seq.crop(first_pos);  // recomputed rows (after a preemption) replace the held ones
  // A prompt chunk is computed at once (one product over its rows); a few decode rows wait
  // as taps until a block needs them, so a sequence that is not drafting pays a copy.
  if (n > seq.pending_capacity()) {
    pass_->flush(seq);
    pass_->context(seq, taps, positions_);
    return;
  }
  if (seq.pending() + n > seq.pending_capacity()) pass_->flush(seq);
  pass_->stage(seq, taps, positions_);
}

dflash2::block_output dflash2_drafter::draft_block(uint64_t seq_id, int32_t anchor, int64_t anchor_pos, int slots,
                                                   bool logits) {
  check_anchor(anchor);
  auto it = seqs_.find(seq_id);
  if (it == seqs_.end()) throw error("drafter.dflash2: sequence " + std::to_string(seq_id) + " has no context");
  // Rows at the anchor or later (a rollback the engine has not re-observed yet) cannot be
  // this block's context; the next observe() brings them back.
  it->second.crop(anchor_pos);
  pass_->flush(it->second);
  return pass_->block(it->second, anchor, anchor_pos, slots, logits);
}

std::vector<int32_t> dflash2_drafter::propose(uint64_t seq_id, const draft_context& ctx) {
  const draft_request r{seq_id, ctx};
  return std::move(propose_batch(std::span<const draft_request>(&r, 1))[0]);
}

std::vector<std::vector<int32_t>> dflash2_drafter::propose_batch(std::span<const draft_request> reqs) {
  std::vector<dflash2::block_output> out = draft_batch(reqs, /*logits=*/false);
  std::vector<std::vector<int32_t>> drafts(out.size());
  for (size_t i = 0; i < out.size(); ++i) drafts[i] = std::move(out[i].draft);
  return drafts;
}

std::vector<dflash2::block_output> dflash2_drafter::draft_batch(std::span<const draft_request> reqs, bool logits) {
  std::vector<dflash2::block_output> outputs(reqs.size());
  // The sequences asked for a draft, their pending taps turned into context rows together.
  std::vector<dflash2::sequence_context*> asked(reqs.size(), nullptr);
  std::vector<dflash2::sequence_context*> to_flush;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const draft_context& ctx = reqs[i].ctx;
    if (std::min({ctx.max_draft, k_, weights_->config().block_size - 1}) <= 0 || ctx.tokens.empty()) continue;
    auto it = seqs_.find(reqs[i].seq_id);
    if (it == seqs_.end()) continue;
    asked[i] = &it->second;
    if (std::find(to_flush.begin(), to_flush.end(), asked[i]) == to_flush.end()) to_flush.push_back(asked[i]);
  }
  if (to_flush.empty()) return outputs;
  pass_->flush(to_flush);

  std::vector<dflash2::block_request> blocks;
  std::vector<size_t> owners;  // blocks[j] drafts for reqs[owners[j]]
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (!asked[i]) continue;
    const draft_context& ctx = reqs[i].ctx;
    const auto anchor_pos = static_cast<int64_t>(ctx.tokens.size()) - 1;
    // Nothing observed in reach (a sequence whose prompt the prefix cache served whole):
    // nothing to condition on.
    if (asked[i]->window(anchor_pos).n == 0) continue;
    check_anchor(ctx.tokens.back());
    // Rows at the anchor or later (a rollback the engine has not re-observed yet) cannot be
    // this block's context; the next observe() brings them back.
    asked[i]->crop(anchor_pos);
    const int slots = std::min({ctx.max_draft, k_, weights_->config().block_size - 1});
    blocks.push_back({.seq = asked[i], .anchor = ctx.tokens.back(), .anchor_pos = anchor_pos, .slots = slots});
    owners.push_back(i);
  }
  if (blocks.empty()) return outputs;
  std::vector<dflash2::block_output> out = pass_->blocks(blocks, logits);
  for (size_t j = 0; j < out.size(); ++j) outputs[owners[j]] = std::move(out[j]);
  return outputs;
}

void dflash2_drafter::check_anchor(int32_t anchor) const {
  if (!model_) throw error("drafter.dflash2: propose() before bind()");
  if (anchor < 0 || anchor >= weights_->config().target.vocab_size)
    throw error("drafter.dflash2: anchor token " + std::to_string(anchor) + " is outside the vocabulary");
}

void dflash2_drafter::release(uint64_t seq_id, std::span<const int32_t>) { seqs_.erase(seq_id); }

}  // namespace tandem
