#pragma once
// The Hugging Face side files of a converted model, rebuilt from GGUF metadata: config.json
// (LlamaConfig), tokenizer.json (BPE with a ByteLevel pre-tokenizer and decoder),
// tokenizer_config.json and generation_config.json.
#include <boost/json.hpp>
#include <filesystem>

#include "llama_hparams.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::quantize {

boost::json::object llama_config(const model_metadata& meta, const llama_hparams& hp, bool tied);
boost::json::object tokenizer_json(const model_metadata& meta);
boost::json::object tokenizer_config(const model_metadata& meta, int64_t max_len);
boost::json::object generation_config(const model_metadata& meta);

// Writes `v` as pretty-ish JSON (one line per top-level key) to `path`; throws on failure.
void write_json(const std::filesystem::path& path, const boost::json::value& v);

}  // namespace tandem::quantize
