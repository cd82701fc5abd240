#include "registry.hpp"

#include <array>

#include "glm_moe_dsa/glm_model.hpp"
#include "llama/llama_hparams.hpp"
#include "llama/llama_model.hpp"
#include "tandem/error.hpp"

namespace tandem {
namespace {

std::vector<backend_op> llama_ops(const weight_format&, const std::string&) { return llama_model::ops(); }

std::unique_ptr<model> make_llama(backend& be, const weight_format& w, const std::string& file, const tp_group& tp) {
  if (tp.expert_parallel > 1)
    throw model_error(file, "llama has no experts to split: topology.expert_parallel must be 1");
  return std::make_unique<llama_model>(be, w, llama_hparams::from_weights(w, file), tp);
}

std::unique_ptr<model> make_glm(backend& be, const weight_format& w, const std::string& file, const tp_group& tp) {
  return std::make_unique<glm::glm_model>(be, w, glm::glm_config::from_weights(w, file), true, tp);
}

std::vector<backend_op> glm_ops(const weight_format& w, const std::string& file) {
  return glm::glm_model::ops_for(glm::glm_config::from_weights(w, file));
}

const std::array<model_entry, 2> entries{{
    {"llama", "dense llama (GQA, SwiGLU, RMSNorm, RoPE)", llama_ops, make_llama},
    {"glm_moe_dsa", "GLM-5 family: MLA, DSA sparse attention, routed + shared experts", glm_ops, make_glm},
}};

}  // namespace

std::span<const model_entry> model_registry() { return entries; }

const model_entry* find_model(std::string_view arch) {
  for (const model_entry& e : entries)
    if (e.arch == arch) return &e;
  return nullptr;
}

std::string architecture_of(const weight_format& weights, const std::string& file) {
  auto arch = weights.meta().get_string("general.architecture");
  if (!arch) throw model_error(file, "general.architecture is missing: the model's architecture is unknown");
  return *arch;
}

std::unique_ptr<model> create_model(backend& be, const weight_format& weights, const std::string& file,
                                    const tp_group& tp) {
  const std::string arch = architecture_of(weights, file);
  const model_entry* e = find_model(arch);
  if (!e) {
    std::string known;
    for (const model_entry& k : entries) known += (known.empty() ? "" : ", ") + std::string(k.arch);
    throw model_error(file, "architecture '" + arch + "' is not supported (tandem has: " + known + ")");
  }
  for (backend_op op : e->ops(weights, file))
    if (!be.supports(op))
      throw config_error("backend", "backend " + be.describe() + " cannot run " + arch + ": it lacks op " +
                                        std::string(name(op)) + " (" + std::string(family(op)) + " family)");
  return e->make(be, weights, file, tp);
}

}  // namespace tandem
