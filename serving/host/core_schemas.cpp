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
      {"kv_dtype", config_type::string, "auto",
       "element type of the K/V cache: auto (the backend's preferred: bf16 on backend.cuda, f32 on "
       "backend.cpu), f32, bf16 or fp8_e4m3 (scale 1.0); a backend or model that cannot keep it refuses "
       "it at load", 0, 0, "auto|f32|bf16|fp8_e4m3"},
      {"seed", config_type::integer, "0", "random seed for sampling"},
      {"prefix_caching", config_type::boolean, "true",
       "reuse the KV pages of cached prompt prefixes by reference (automatic prefix caching)"},
      {"prefix_hash", config_type::string, "xxhash",
       "hash of a cached page's chain: xxhash (fast) or sha256 (for untrusted tenants)", 0, 0, "xxhash|sha256",
       nullptr, "prefix_caching=true"},
      {"retention", config_type::string, "lru",
       "eviction of cached pages: lru, or session (a session's chain is kept retention_s after "
       "its last request, within retention_share of the pool)", 0, 0, "lru|session", nullptr,
       "prefix_caching=true"},
      {"retention_s", config_type::number, "300", "seconds a session's chain stays protected", 0, 1e7,
       nullptr, nullptr, "prefix_caching=true,retention=session"},
      {"retention_share", config_type::number, "0.5", "most of the KV pool session retention may hold", 0, 1,
       nullptr, nullptr, "prefix_caching=true,retention=session"},
      {"warm_tokens", config_type::integer, "3584",
       "metrics: a request whose uncached remainder at admission is at most this counts as warm "
       "(unless the scheduler classifies it)", 0, 100e6},
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

config_schema chat_schema() {
  static const config_key keys[] = {
      {"parse_special_in_content", config_type::boolean, "false",
       "let control-token text in chat message content (e.g. <|im_end|>) become control tokens; "
       "false keeps it plain text so a message cannot forge a turn (tandem/chat_prompt.hpp)"},
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
      {"heartbeat_s", config_type::number, "5",
       "rank 0 tells idle workers it is alive this often (keep it well below the transport's timeout)",
       0.05, 3600, nullptr, nullptr, "ranks!=1"},
  };
  return keys;
}

}  // namespace tandem
