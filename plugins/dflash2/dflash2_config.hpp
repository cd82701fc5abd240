#pragma once
// The drafter directory's config.json (ARCHITECTURE.md, "config.json"): every key required,
// no others. A file that breaks a rule is a model_error naming the file and the key.
//
//   const dflash2_config c = dflash2_config::read(dir / "config.json");
//   c.groups();   // hidden_size / conv_group_size
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem {

struct dflash2_target_config {
  std::string arch;
  int64_t hidden_size = 0;
  int64_t vocab_size = 0;
  int num_layers = 0;
};

struct dflash2_config {
  dflash2_target_config target;
  int64_t hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int64_t intermediate_size = 0;
  float rms_norm_eps = 0;
  float rope_theta = 0;
  std::vector<int> target_layers;
  int block_size = 0;
  int conv_group_size = 0;
  int selector_top_k = 0;
  int selector_rank = 0;
  int64_t context_window = 0;

  int64_t groups() const { return hidden_size / conv_group_size; }
  int taps() const { return static_cast<int>(target_layers.size()); }
  int64_t q_width() const { return static_cast<int64_t>(num_heads) * head_dim; }
  int64_t kv_width() const { return static_cast<int64_t>(num_kv_heads) * head_dim; }

  static dflash2_config read(const std::filesystem::path& file);
  // The same rules over JSON text; `source` names it in errors (tests).
  static dflash2_config parse(const std::string& text, const std::string& source);
};

}  // namespace tandem
