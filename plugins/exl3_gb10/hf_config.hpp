#pragma once
// Internal to weights.exl3: the Hugging Face files of a model directory (config.json,
// tokenizer.json, tokenizer_config.json). A llama model becomes the GGUF-style metadata
// tandem's llama engine and tokenizer read (llama.*, general.*, tokenizer.ggml.*,
// tokenizer.chat_template); a glm_moe_dsa model keeps its Hugging Face config for the model
// code to read, as weights.safetensors hands it over.
#include <cstdint>
#include <filesystem>
#include <string>

#include <boost/json/value.hpp>

#include "hf_json.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::exl3_plugin {

// The llama hyperparameters, as config.json states them.
struct llama_config {
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  int64_t context = 0;
  bool tie_embeddings = false;
  boost::json::value raw;  // the whole config.json (bos/eos ids for the tokenizer)
};

using hf::read_json;  // plugins/hf_common

// config.json's model_type, when weights.exl3 reads it ("llama" or "glm_moe_dsa");
// model_error naming the file otherwise.
std::string model_type(const boost::json::value& config, const std::filesystem::path& dir);

// quantization_config (quant_method "exl3" required) -> exl3.bits, exl3.head_bits,
// exl3.version. model_error naming `file` when it is not an EXL3 model.
void read_quantization_config(const boost::json::object& config, const std::string& file, model_metadata& meta);

// A model whose code reads its Hugging Face config (glm_moe_dsa): the quantization_config
// checked as above, then general.architecture, hf.config_json (config.json without
// quantization_config), hf.config_path and the tokenizer as weights.safetensors sets them
// (hf_common/hf_model_meta.hpp).
void read_hf_names_config(const std::filesystem::path& dir, model_metadata& meta);

// A llama config.json (model_type checked by model_type()) -> general.architecture, llama.*
// keys and read_quantization_config's; model_error names the key that is wrong.
llama_config read_llama_config(const std::filesystem::path& dir, model_metadata& meta);

// tokenizer.json + tokenizer_config.json (+ chat_template.jinja) -> tokenizer.ggml.* and
// tokenizer.chat_template (hf::read_hf_tokenizer with config.json's vocab_size and ids).
void read_hf_tokenizer(const std::filesystem::path& dir, const llama_config& cfg, model_metadata& meta);

}  // namespace tandem::exl3_plugin
