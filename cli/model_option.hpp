#pragma once
// `--model M` of tandem run / serve: shorthand for `--set model=M`. When M is a directory (an
// EXL3 model directory, e.g. written by `tandem quantize --to exl3`) and --pipeline was not
// given, the pipeline becomes pipelines/exl3.yaml (weights.exl3 on backend.cpu), so
// `tandem run --model DIR --prompt ...` works without naming a pipeline.
#include <boost/program_options.hpp>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::cli {

inline constexpr const char* exl3_pipeline = "pipelines/exl3.yaml";

// Adds model=M to `sets` (first, so an explicit --set model=... still wins) and switches a
// defaulted pipeline to exl3_pipeline for a directory.
inline void apply_model_option(const std::string& model, const boost::program_options::variables_map& vm,
                               std::string& pipeline, std::vector<std::string>& sets) {
  if (model.empty()) return;
  sets.insert(sets.begin(), "model=" + model);
  std::error_code ec;
  if (std::filesystem::is_directory(model, ec) && vm["pipeline"].defaulted()) pipeline = exl3_pipeline;
}

}  // namespace tandem::cli
