// glm_moe_dsa across pipeline stages (tp.pp): this rank holds a contiguous run of the layers
// and only their latent and indexer caches. The residual stream crosses each stage boundary
// as (x, proj), the last layer's output not yet added, so the next stage's fused add + norm
// computes what one process computes. A "shared" DSA layer reuses the previous full layer's
// top-k: when a stage begins with one, that top-k crosses too.
#include <fmt/format.h>

#include "glm_model.hpp"

namespace tandem::glm {

part glm_model::stage_layers(bool dsa) {
  const pp_stage& pp = tp_.pp;
  const part mine = pp.layers(cfg_.n_layers);
  first_layer_ = static_cast<int>(mine.begin);
  if (!pp.split()) return mine;
  pp.require_host(be_, "glm_moe_dsa");
  const bool sparse_attention = dsa && cfg_.indexer_layers() > 0;
  const int64_t end = mine.begin + mine.count;
  topk_from_prev_ = sparse_attention && !pp.first() && !cfg_.own_indexer[mine.begin];
  topk_to_next_ = sparse_attention && !pp.last() && !cfg_.own_indexer[end];
  info_.detail += fmt::format(", pipeline stage {} of {}: layers {}-{}", pp.stage, pp.stages, mine.begin, end - 1);
  return mine;
}

void glm_model::receive_stream(int64_t n, tensor_view& topk) {
  tp_.pp.receive({act(s_x_, n, cfg_.hidden), act(s_proj_, n, cfg_.hidden)});
  if (!topk_from_prev_) return;
  topk = ints(s_topk_, n, cfg_.index_topk);
  tp_.pp.receive({topk});
}

void glm_model::pass_on_stream(int64_t n, tensor_view topk) {
  be_.synchronize();  // the stream is complete in host memory
  tp_.pp.pass_on({act(s_x_, n, cfg_.hidden), act(s_proj_, n, cfg_.hidden)});
  if (topk_to_next_) tp_.pp.pass_on({topk});
}

}  // namespace tandem::glm
