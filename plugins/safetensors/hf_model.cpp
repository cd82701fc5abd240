#include "hf_model.hpp"

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "hf_model_meta.hpp"
#include "tandem/error.hpp"

namespace tandem::st_plugin {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace st = safetensors;


hf_model::hf_model(const fs::path& path) {
  const fs::path dir = hf::model_dir(path);
  const fs::path config_path = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(config_path, ec))
    throw model_error(config_path.string(), "is missing (a Hugging Face model directory has config.json)");
  const std::string config_text = hf::read_text(config_path);
  json::error_code jec;
  const json::value config = json::parse(config_text, jec);
  if (jec) throw model_error(config_path.string(), "is not valid JSON: " + jec.message());
  if (!config.is_object()) throw model_error(config_path.string(), "is not a JSON object");
  hf::read_hf_model_meta(dir, config.as_object(), config_text, meta_);

  files_.emplace(dir, st::shard_policy::strict);
  tensors_.reserve(files_->tensors().size());
  for (const st::tensor_entry* t : files_->tensors()) {
    const auto type = st::tandem_dtype(t->type);
    if (!type)
      throw model_error(t->file, "tensor '" + t->name + "' has dtype " + std::string(st::dtype_name(t->type)) +
                                     ", which weights.safetensors does not read (BF16, F16, F32, I32, I64, U8)");
    index_.emplace(t->name, tensors_.size());
    tensors_.push_back({t->name, *type, t->shape, t->data, t->nbytes});
  }
}

const tensor_info* hf_model::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace tandem::st_plugin
