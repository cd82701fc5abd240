#pragma once
// glm_moe_dsa's hyperparameters, read from a Hugging Face config.json as transformers'
// GlmMoeDsaConfig defines them (weights.safetensors hands the file over verbatim as
// hf.config_json). Unknown keys and inconsistent values are model_errors naming the file
// and the key: a setting tandem would not honour is never silently dropped.
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/weight_format.hpp"

namespace tandem::glm {

struct glm_config {
  std::string file;  // config.json, for messages
  int64_t vocab = 0, hidden = 0, ffn = 0, moe_ffn = 0;
  int n_layers = 0, n_heads = 0;
  int q_lora_rank = 0, kv_lora_rank = 0;
  int qk_nope = 0, qk_rope = 0, v_dims = 0;
  int n_routed = 0, n_shared = 0, top_k = 0, n_group = 1, topk_group = 1;
  float routed_scaling = 1.0f;
  bool norm_topk_prob = true;
  int index_heads = 0, index_dims = 0, index_topk = 0;
  int64_t context = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tied_embeddings = false;
  int nextn_layers = 0;              // num_nextn_predict_layers: MTP layers after the stack
  std::vector<bool> sparse_mlp;      // per layer: routed experts (else a dense MLP)
  std::vector<bool> own_indexer;     // per layer: "full" (its own indexer) or "shared"

  int qk_head_dims() const { return qk_nope + qk_rope; }
  int indexer_layers() const;        // layers with their own indexer

  // Parses `json` (the text of `file`). model_error naming file and key on any problem.
  static glm_config parse(const std::string& json, const std::string& file);
  // From weights.safetensors' metadata (hf.config_json); model_error when absent.
  static glm_config from_weights(const weight_format& w, const std::string& file);
};

}  // namespace tandem::glm
