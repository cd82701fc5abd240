#pragma once
// `--model M` of tandem run / serve: shorthand for `--set model=M`. When M is a directory and
// --pipeline was not given, the pipeline follows the directory: an EXL3 model (a
// quantization_config.json, or config.json naming a quantization_config, as `tandem quantize
// --to exl3` and exllamav3 write them) runs pipelines/exl3.yaml (weights.exl3 on backend.cpu),
// any other Hugging Face directory pipelines/safetensors.yaml (weights.safetensors, bf16 /
// fp16 / f32 shards, on backend.cpu), so `tandem run --model DIR --prompt ...` works without
// naming a pipeline.
#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tandem::cli {

inline constexpr const char* exl3_pipeline = "pipelines/exl3.yaml";
inline constexpr const char* safetensors_pipeline = "pipelines/safetensors.yaml";

// True when `dir` holds an EXL3 model rather than plain safetensors weights.
inline bool is_exl3_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "quantization_config.json", ec)) return true;
  std::ifstream in(dir / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.find("\"quantization_config\"") != std::string::npos;
}

// Adds model=M to `sets` (first, so an explicit --set model=... still wins) and switches a
// defaulted pipeline to exl3_pipeline or safetensors_pipeline for a directory.
inline void apply_model_option(const std::string& model, const boost::program_options::variables_map& vm,
                               std::string& pipeline, std::vector<std::string>& sets) {
  if (model.empty()) return;
  sets.insert(sets.begin(), "model=" + model);
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec) && vm["pipeline"].defaulted())
    pipeline = is_exl3_directory(model) ? exl3_pipeline : safetensors_pipeline;
}

}  // namespace tandem::cli
