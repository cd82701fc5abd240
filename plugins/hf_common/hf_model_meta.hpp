#pragma once
// Shared by weights.safetensors and weights.exl3 (plugins/hf_common): the architecture-neutral
// metadata of a Hugging Face model directory, for model code that reads its own keys from
// config.json:
//   general.architecture  string   config.json's model_type
//   general.name          string   the directory's name
//   hf.config_json        string   config.json's text (as the caller hands it over)
//   hf.config_path        string   absolute path of config.json
//   tokenizer.*                    as hf_tokenizer.hpp lists them, with
//                                  tokenizer.hf.eog_token_ids from generation_config.json's
//                                  eos_token_id (else config.json's) when either has one
#include <filesystem>
#include <string>

#include <boost/json/object.hpp>

#include "tandem/weight_format.hpp"

namespace tandem::hf {

// `dir` is the model directory (absolute, normalized); `config` is config.json parsed and
// `config_text` the text given to the model as hf.config_json. model_error naming the file
// at fault (no model_type, a missing tokenizer.json, bad token ids).
void read_hf_model_meta(const std::filesystem::path& dir, const boost::json::object& config,
                        const std::string& config_text, model_metadata& meta);

// `path` made absolute and normalized, without a trailing separator ("model/" -> "model").
std::filesystem::path model_dir(const std::filesystem::path& path);

}  // namespace tandem::hf
