// weights.gguf: the weight_format plugin over gguf_file.
#include <iterator>
#include <optional>

#include "gguf_file.hpp"
#include "tandem/error.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::gguf {
namespace {

class gguf_weights final : public weight_format {
 public:
  explicit gguf_weights(load_mode mode) : mode_(mode) {}

  void open(const std::filesystem::path& path) override {
    file_ = gguf_file::open(path, mode_);  // the old file stays open if this throws
  }
  const model_metadata& meta() const override { return checked().metadata(); }
  std::span<const tensor_info> tensors() const override { return checked().tensors(); }
  const tensor_info* find(std::string_view name) const override { return checked().find(name); }

 private:
  const gguf_file& checked() const {
    if (!file_) throw error("weights.gguf: no model file is open (call open() first)");
    return *file_;
  }

  load_mode mode_;
  std::optional<gguf_file> file_;
};

const config_key keys[] = {
    {"mmap", config_type::boolean, "true",
     "map the file read-only (true) or read it into memory (false)"},
};

plugin_object* create(const plugin_context& ctx) {
  const bool use_mmap = ctx.cfg == nullptr || !ctx.cfg->has("mmap") || ctx.cfg->get_bool("mmap");
  return new gguf_weights(use_mmap ? load_mode::mmap : load_mode::read);
}

const plugin_descriptor desc{
    plugin_api_version, "weights.gguf", plugin_interface::weight_format,
    "GGUF v2/v3 model files (F32, F16, BF16, Q4_0, Q4_1, Q8_0 tensors)",
    keys, std::size(keys), nullptr, &create};

}  // namespace
}  // namespace tandem::gguf

TANDEM_PLUGIN(tandem::gguf::desc)
