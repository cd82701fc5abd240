// weights.exl3: exllamav3 (EXL3) llama model directories as a weight_format.
#include <iterator>
#include <memory>

#include "exl3_model.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::exl3_plugin {
namespace {

class exl3_weights final : public weight_format {
 public:
  void open(const std::filesystem::path& path) override {
    std::error_code ec;
    if (!std::filesystem::is_directory(path, ec))
      throw model_error(path.string(), "is not a directory (weights.exl3 opens a model directory "
                                       "with config.json, tokenizer.json and *.safetensors)");
    model_ = std::make_unique<exl3_model>(path);  // the old model stays open if this throws
  }
  const model_metadata& meta() const override { return checked().meta(); }
  std::span<const tensor_info> tensors() const override { return checked().tensors(); }
  const tensor_info* find(std::string_view name) const override { return checked().find(name); }

 private:
  const exl3_model& checked() const {
    if (!model_) throw error("weights.exl3: no model is open (call open() first)");
    return *model_;
  }
  std::unique_ptr<exl3_model> model_;
};

plugin_object* create(const plugin_context&) { return new exl3_weights(); }

const plugin_descriptor desc{
    plugin_api_version, "weights.exl3", plugin_interface::weight_format,
    "exllamav3 EXL3 llama directories (safetensors; trellis linears as opaque EXL3 tensors)",
    nullptr, 0, nullptr, &create};

}  // namespace
}  // namespace tandem::exl3_plugin

TANDEM_PLUGIN(tandem::exl3_plugin::desc)
