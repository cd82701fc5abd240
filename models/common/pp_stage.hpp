#pragma once
// Pipeline parallel: the run of layers a rank holds, and the hidden states passed between
// the ranks that hold consecutive runs.
//
//   pp_stage pp{.stage = 0, .stages = 2, .comm = &transport};
//   part mine = pp.layers(n_layers);                  // this stage's contiguous layers
//   if (!pp.first()) pp.receive({x, proj});           // the previous stage's residual stream
//   ... this stage's layers ...
//   if (!pp.last()) return pp.pass_on({x, proj});     // the next stage continues
//
// The LAST stage lives on rank 0 (stage s on rank (s + 1) % stages: rank 1 embeds, rank 0
// computes the final layers, the norm and the LM head). Rank 0 samples, so the logits never
// cross the wire (rows x vocab floats a step); only n_tokens x hidden rows do, once per
// stage boundary. The stages run one after another (no micro-batches): pipeline parallel
// here splits the model's memory, it does not overlap the stages' work.
#include <initializer_list>
#include <vector>

#include "part.hpp"
#include "tandem/backend.hpp"
#include "tandem/transport.hpp"

namespace tandem {

struct pp_stage {
  int stage = 0;
  int stages = 1;
  transport* comm = nullptr;  // null when stages == 1

  bool split() const { return stages > 1; }
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  // The stage a rank of a world of `stages` ranks runs, and back.
  static int stage_of_rank(int rank, int stages) { return (rank + stages - 1) % stages; }
  static int rank_of_stage(int stage, int stages) { return (stage + 1) % stages; }
  // This stage's layers of `n_layers`, as evenly as possible (the first stages take one
  // more); model_error when a stage would get none.
  part layers(int n_layers) const;
  // model_error unless the stages can run on `be` (its memory is the host's, where
  // the transport's send / recv take the hidden states) and comm has one rank per stage.
  void require_host(const backend& be, const char* arch) const;
  // error when a layer in `layers` (forward_options::hidden_layers) is not on the last
  // stage: rank 0 holds only the last stage's residual stream. Every stage checks the same
  // plan alike, so all refuse it before any send.
  void require_last_stage(const std::vector<int>& layers, int n_layers) const;
  // Blocking point-to-point over comm, in host memory (the caller synchronizes its backend
  // first): every tensor, in order, to the next stage / from the previous one.
  void pass_on(std::initializer_list<tensor_view> ts) const;
  void receive(std::initializer_list<tensor_view> ts) const;
};

}  // namespace tandem
