#pragma once
// Internal to weights.exl3: the Hugging Face files of a model directory (config.json,
// tokenizer.json, tokenizer_config.json) as the GGUF-style metadata tandem's llama engine
// and tokenizer read (llama.*, general.*, tokenizer.ggml.*, tokenizer.chat_template).
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

// config.json -> general.architecture, llama.* keys. Requires a llama model whose
// quantization_config.quant_method is "exl3"; model_error names the key otherwise.
llama_config read_llama_config(const std::filesystem::path& dir, model_metadata& meta);

// tokenizer.json + tokenizer_config.json (+ chat_template.jinja) -> tokenizer.ggml.* and
// tokenizer.chat_template (hf::read_hf_tokenizer with config.json's vocab_size and ids).
void read_hf_tokenizer(const std::filesystem::path& dir, const llama_config& cfg, model_metadata& meta);

}  // namespace tandem::exl3_plugin
