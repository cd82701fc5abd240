#pragma once
// model: one architecture built from backend ops. The engine and the runtime hold a model&
// and never name an architecture; models/registry.hpp makes one from a weight source.
//
//   std::unique_ptr<model> m = create_model(be, weights, "model.gguf");   // models/registry.hpp
//   runtime sizes the pool from m->kv_needs(), then m->allocate_kv(pages, 16);
//   m->forward(plan);                     // one step: prefill chunks and decode tokens mixed
//   std::vector<int32_t> ids = m->sample(params);
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/backend.hpp"
#include "tandem/export.hpp"
#include "tandem/sampling_params.hpp"
#include "tandem/step_plan.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

// What the start-up summary and the engine need to know of a model.
struct model_info {
  std::string arch;        // the registry key: "llama", "glm_moe_dsa"
  int n_layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  int64_t context = 0;     // trained context length
  std::string detail;      // one line of architecture specifics for the summary
};

// One group of layers that share a cache shape: every token stores, per layer of the group,
// `heads` rows of `dims` values for K (and as many for V when `values`).
struct kv_group {
  std::string what;        // "gqa", "mla latent", "dsa indexer keys"
  int n_layers = 0;
  int heads = 0;
  int dims = 0;
  bool values = true;
  dtype type = dtype::f32;

  int64_t bytes_per_token() const {
    return (values ? 2LL : 1LL) * n_layers * heads * dims * traits(type).block_bytes;
  }
};

// A model's KV needs: the pool is paged once (every group shares the page table), each
// group is its own backend kv_storage.
struct kv_spec {
  std::vector<kv_group> groups;

  int64_t bytes_per_token() const {
    int64_t b = 0;
    for (const kv_group& g : groups) b += g.bytes_per_token();
    return b;
  }
  // "mla latent: 2 layers x 1 x 576 (K only) + dsa indexer keys: ...", for the summary.
  TANDEM_API std::string describe() const;
};

struct forward_options {
  bool all_logits = false;        // logits for every token, not only each sampled last one
  // Layers whose output residual stream (after the layer's FFN) to keep: hidden_states(i)
  // then returns the i-th listed layer's [n_tokens, hidden]. A drafter conditions on these.
  std::vector<int> hidden_layers;
};

class TANDEM_API model {
 public:
  virtual ~model();

  virtual const model_info& info() const = 0;
  // The backend ops forward() will call; the registry checks them against the backend.
  virtual std::vector<backend_op> required_ops() const = 0;
  // The caches one token needs (the pool is sized from it before allocate_kv).
  virtual kv_spec kv_needs() const = 0;
  // Allocates every cache group with `kv_pages` pages of `page_size` tokens; once.
  virtual void allocate_kv(int64_t kv_pages, int page_size) = 0;
  // Keeps the caches in element type `t` (engine.kv_dtype), before kv_needs() sizes the pool
  // and allocate_kv. A model starts with its own choice (the backend's preferred type where
  // it can). Default: accepts only the type every group already has; config_error naming
  // engine.kv_dtype otherwise.
  virtual void set_kv_type(dtype t);

  // Computes one step plan. model_error / request_error on a plan the model cannot run.
  virtual void forward(const step_plan& plan, const forward_options& opt = {}) = 0;
  // One sampled token per logits row of the last forward, in row order.
  virtual std::vector<int32_t> sample(const std::vector<sampling_params>& params) = 0;
  // The logits rows of the last forward, [rows, vocab], on the host.
  virtual std::vector<float> logits_to_host() const = 0;
  virtual int64_t logit_rows() const = 0;
  // The residual stream of the last forward at opt.hidden_layers[i] (device memory,
  // [n_tokens, hidden]); i = -1: the final layer's output before the output norm.
  virtual tensor_view hidden_states(int i = -1) const = 0;
  // The token embedding table and the output head {vocab, hidden} (the table again when
  // tied), for a drafter that shares them; null when this process does not hold them whole
  // (the vocabulary split over ranks).
  virtual const linear_weight* token_embedding() const { return nullptr; }
  virtual const linear_weight* output_head() const { return nullptr; }
};

}  // namespace tandem
