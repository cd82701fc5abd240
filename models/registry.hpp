#pragma once
// The model registry: architectures keyed by the name a weight source gives them
// (general.architecture in GGUF; config.json's model_type, as weights.safetensors and
// weights.exl3 report it). The runtime makes its model here and never names one.
//
//   std::unique_ptr<model> m = create_model(be, weights, "model.gguf");
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/tp_shard.hpp"
#include "tandem/backend.hpp"
#include "tandem/model.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

struct model_entry {
  std::string_view arch;
  std::string_view description;
  // The backend ops a model of this file would use (read from its metadata, before any
  // weight is loaded, so a backend that lacks one is refused at once).
  std::vector<backend_op> (*ops)(const weight_format& weights, const std::string& file);
  // Loads the weights onto `be` (this rank's share of them when tp splits the model);
  // model_error on a missing, misshapen or inconsistent part, or a split it cannot make.
  std::unique_ptr<model> (*make)(backend& be, const weight_format& weights, const std::string& file,
                                 const tp_group& tp);
};

// Every architecture tandem has, in a fixed order.
std::span<const model_entry> model_registry();
// The entry for `arch`, or nullptr.
const model_entry* find_model(std::string_view arch);
// general.architecture of `weights`; model_error naming `file` when absent.
std::string architecture_of(const weight_format& weights, const std::string& file);
// The model of `weights` on `be`: model_error for an unknown architecture (listing the
// known ones), config_error naming the op when `be` lacks one the model needs. With a tp
// group of size > 1 the model holds this rank's share and runs its collectives on tp.comm.
std::unique_ptr<model> create_model(backend& be, const weight_format& weights, const std::string& file,
                                    const tp_group& tp = {});

}  // namespace tandem
