// llama across pipeline stages (tp.pp): this rank holds a contiguous run of the layers (and
// only their KV), the first stage the token embedding, the last stage the output norm and
// the LM head (the embedding again when tied). run_layers() receives the residual stream
// from the previous stage and passes it on (pp_stage.hpp says why rank 0 is the last stage).
#include <string>

#include "llama_model.hpp"
#include "tandem/error.hpp"

namespace tandem {

void llama_model::load_stage_weights() {
  const pp_stage& pp = tp_.pp;
  pp.require_host(be_, "llama");
  const part mine = pp.layers(hp_full_.n_layers);
  first_layer_ = static_cast<int>(mine.begin);
  hp_.n_layers = static_cast<int>(mine.count);
  const bool tied = weights_.find("output.weight") == nullptr;
  if (pp.first() || (pp.last() && tied)) tok_embd_ = linear("token_embd.weight", hp_.vocab, hp_.hidden);
  if (pp.last()) {
    if (!tied) output_ = linear("output.weight", hp_.vocab, hp_.hidden);
    output_norm_ = norm("output_norm.weight");
  }
  layers_.resize(hp_.n_layers);
  for (int i = 0; i < hp_.n_layers; ++i) load_layer(layers_[i], first_layer_ + i);
  info_.detail += ", pipeline stage " + std::to_string(pp.stage) + " of " + std::to_string(pp.stages) +
                  ": layers " + std::to_string(mine.begin) + "-" + std::to_string(mine.begin + mine.count - 1);
}

}  // namespace tandem
