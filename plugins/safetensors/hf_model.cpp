#include "hf_model.hpp"

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "hf_tokenizer.hpp"
#include "tandem/error.hpp"

namespace tandem::st_plugin {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace st = safetensors;


hf_model::hf_model(const fs::path& path) {
  std::error_code ec;
  fs::path dir = fs::absolute(path, ec);
  if (ec) dir = path;
  dir = dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "model/" -> "model"
  const fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path, ec))
    throw model_error(config_path.string(), "is missing (a Hugging Face model directory has config.json)");
  const std::string config_text = hf::read_text(config_path);
  json::error_code jec;
  const json::value config = json::parse(config_text, jec);
  if (jec) throw model_error(config_path.string(), "is not valid JSON: " + jec.message());
  if (!config.is_object()) throw model_error(config_path.string(), "is not a JSON object");
  const json::object& c = config.as_object();
  const json::value* mt = c.if_contains("model_type");
  if (!mt || !mt->is_string() || mt->as_string().empty())
    throw model_error(config_path.string(), "has no model_type string (the architecture)");

  meta_.set("general.architecture", std::string(mt->as_string()));
  meta_.set("general.name", dir.filename().string());
  meta_.set("hf.config_json", config_text);
  meta_.set("hf.config_path", config_path.string());

  // The tokenizer: special ids and end-of-generation ids as transformers' generate() takes
  // them -- generation_config.json when it has eos_token_id, else config.json.
  hf::tokenizer_ids ids;
  if (auto v = hf::json_token_id(c, "vocab_size")) ids.vocab_size = *v;
  json::value gen = json::object();
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) gen = hf::read_json(gen_path);
  const json::object& g = gen.as_object();
  auto id_of = [&](std::string_view key) -> std::optional<int64_t> {
    for (const auto& [o, file] : {std::pair{&g, &gen_path}, std::pair{&c, &config_path}}) {
      const auto list = hf::json_token_ids(*o, key, file->string());
      if (!list.empty()) return list.front();
    }
    return std::nullopt;
  };
  ids.bos = id_of("bos_token_id");
  ids.eos = id_of("eos_token_id");
  ids.pad = id_of("pad_token_id");
  ids.eog = hf::json_token_ids(g, "eos_token_id", gen_path.string());
  ids.eog_source = gen_path;
  if (ids.eog.empty()) {
    ids.eog = hf::json_token_ids(c, "eos_token_id", config_path.string());
    ids.eog_source = config_path;
  }
  if (!fs::exists(dir / "tokenizer.json", ec))
    throw model_error((dir / "tokenizer.json").string(),
                      "is missing (weights.safetensors needs a Hugging Face fast tokenizer)");
  hf::read_hf_tokenizer(dir, ids, meta_);

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
