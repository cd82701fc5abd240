#pragma once
// Internal to weights.safetensors: a Hugging Face model directory (config.json,
// tokenizer.json, tokenizer_config.json, generation_config.json, model.safetensors or the
// shards of model.safetensors.index.json) as a weight_format's metadata and tensors.
//
// Architecture-neutral: every tensor keeps its Hugging Face name, dtype and shape, and its
// data points into the mapped shard; the model code reads the architecture's own keys from
// hf.config_json. Metadata set:
//   general.architecture  string   config.json's model_type
//   general.name          string   the directory's name
//   hf.config_json        string   config.json verbatim
//   hf.config_path        string   absolute path of config.json
//   tokenizer.*                    as hf_common/hf_tokenizer.hpp lists them, with
//                                  tokenizer.hf.eog_token_ids from generation_config.json's
//                                  eos_token_id (else config.json's) when either has one
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "safetensors_file.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::st_plugin {

class hf_model {
 public:
  // Throws model_error naming the file (and tensor) that is wrong.
  explicit hf_model(const std::filesystem::path& dir);

  const model_metadata& meta() const { return meta_; }
  std::span<const tensor_info> tensors() const { return tensors_; }
  const tensor_info* find(std::string_view name) const;

 private:
  std::optional<safetensors::model_files> files_;
  model_metadata meta_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace tandem::st_plugin
