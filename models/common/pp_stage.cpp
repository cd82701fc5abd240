#include "pp_stage.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem {

part pp_stage::layers(int n_layers) const {
  if (!split()) return {0, n_layers};
  return split_evenly(n_layers, stage, stages, "layers (pipeline stages)");
}

void pp_stage::require_host(const backend& be, const char* arch) const {
  if (!comm || comm->world_size() != stages)
    throw error("pipeline parallel: " + std::to_string(stages) + " stages need a transport of as many ranks");
  if (be.dev().kind != device_kind::cpu || be.activation_type() != dtype::f32)
    throw model_error("model", std::string(arch) + " runs pipeline stages on backend.cpu only for now (the hidden "
                                                   "states cross in host memory, f32)");
}

void pp_stage::require_last_stage(const std::vector<int>& layers, int n_layers) const {
  if (!split()) return;
  const part last = pp_stage{.stage = stages - 1, .stages = stages}.layers(n_layers);
  for (int l : layers)
    if (l < last.begin || l >= last.begin + last.count)
      throw error("hidden state of layer " + std::to_string(l) + " asked: across pipeline stages only the last "
                  "stage's layers (" + std::to_string(last.begin) + "-" + std::to_string(last.begin + last.count - 1) +
                  ", on rank 0) can be kept");
}

void pp_stage::pass_on(std::initializer_list<tensor_view> ts) const {
  const int to = rank_of_stage(stage + 1, stages);
  for (const tensor_view& t : ts) comm->send(t, to);
}

void pp_stage::receive(std::initializer_list<tensor_view> ts) const {
  const int from = rank_of_stage(stage - 1, stages);
  for (const tensor_view& t : ts) comm->recv(t, from);
}

}  // namespace tandem
