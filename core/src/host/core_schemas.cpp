// The core's own pipeline sections, declared the way plugins declare theirs.
#include "tandem/pipeline.hpp"

namespace tandem {

config_schema engine_schema() {
  static const config_key keys[] = {
      {"max_model_len", config_type::integer, "0",
       "longest sequence (prompt + output) in tokens; 0 = the model's context length", 0, 10e6},
      {"page_size", config_type::integer, "16", "tokens per KV-cache page", 1, 4096},
      {"kv_tokens", config_type::integer, "0",
       "tokens of KV cache to allocate; 0 = size from the backend's free memory", 0, 100e6},
      {"seed", config_type::integer, "0", "random seed for sampling"},
  };
  return keys;
}

config_schema server_schema() {
  static const config_key keys[] = {
      {"host", config_type::string, "127.0.0.1", "address the HTTP server listens on"},
      {"port", config_type::integer, "8080", "TCP port of the HTTP server", 1, 65535},
  };
  return keys;
}

config_schema topology_schema() {
  static const config_key keys[] = {
      {"ranks", config_type::integer, "1",
       "processes serving the model; = tensor_parallel * pipeline_parallel", 1, 1024},
      {"tensor_parallel", config_type::integer, "1", "ranks that split each layer", 1, 1024},
      {"pipeline_parallel", config_type::integer, "1", "ranks that split the layer stack", 1, 1024},
      {"expert_parallel", config_type::integer, "1",
       "ranks that split the MoE experts; must divide ranks", 1, 1024},
  };
  return keys;
}

}  // namespace tandem
