// weights.safetensors: Hugging Face model directories (bf16 / fp16 / f32 safetensors) as a
// weight_format, under the checkpoint's own tensor names.
#include <memory>

#include "hf_model.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::st_plugin {
namespace {

class safetensors_weights final : public weight_format {
 public:
  void open(const std::filesystem::path& path) override {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec))
      throw model_error(path.string(), "is not a directory (weights.safetensors opens a Hugging Face model "
                                       "directory with config.json, tokenizer.json and *.safetensors)");
    model_ = std::make_unique<hf_model>(path);  // the old model stays open if this throws
  }
  const model_metadata& meta() const override { return checked().meta(); }
  std::span<const tensor_info> tensors() const override { return checked().tensors(); }
  const tensor_info* find(std::string_view name) const override { return checked().find(name); }

 private:
  const hf_model& checked() const {
    if (!model_) throw error("weights.safetensors: no model is open (call open() first)");
    return *model_;
  }
  std::unique_ptr<hf_model> model_;
};

plugin_object* create(const plugin_context&) { return new safetensors_weights(); }

const plugin_descriptor desc{
    plugin_api_version, "weights.safetensors", plugin_interface::weight_format,
    "Hugging Face model directories (safetensors BF16/F16/F32, sharded or not; HF tensor names)",
    nullptr, 0, nullptr, &create};

}  // namespace
}  // namespace tandem::st_plugin

TANDEM_PLUGIN(tandem::st_plugin::desc)
