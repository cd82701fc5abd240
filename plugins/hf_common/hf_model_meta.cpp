#include "hf_model_meta.hpp"

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "hf_tokenizer.hpp"
#include "tandem/error.hpp"

namespace tandem::hf {
namespace fs = std::filesystem;
namespace json = boost::json;

fs::path model_dir(const fs::path& path) {
  std::error_code ec;
  fs::path dir = fs::absolute(path, ec);
  if (ec) dir = path;
  dir = dir.lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  return dir;
}

void read_hf_model_meta(const fs::path& dir, const json::object& c, const std::string& config_text,
                        model_metadata& meta) {
  const fs::path config_path = dir / "config.json";
  const json::value* mt = c.if_contains("model_type");
  if (!mt || !mt->is_string() || mt->as_string().empty())
    throw model_error(config_path.string(), "has no model_type string (the architecture)");
  meta.set("general.architecture", std::string(mt->as_string()));
  meta.set("general.name", dir.filename().string());
  meta.set("hf.config_json", config_text);
  meta.set("hf.config_path", config_path.string());

  // The tokenizer: special ids and end-of-generation ids as transformers' generate() takes
  // them -- generation_config.json when it has eos_token_id, else config.json.
  tokenizer_ids ids;
  if (auto v = json_token_id(c, "vocab_size")) ids.vocab_size = *v;
  std::error_code ec;
  json::value gen = json::object();
  const fs::path gen_path = dir / "generation_config.json";
  if (fs::exists(gen_path, ec)) gen = read_json(gen_path);
  const json::object& g = gen.as_object();
  auto id_of = [&](std::string_view key) -> std::optional<int64_t> {
    for (const auto& [o, file] : {std::pair{&g, &gen_path}, std::pair{&c, &config_path}}) {
      const auto list = json_token_ids(*o, key, file->string());
      if (!list.empty()) return list.front();
    }
    return std::nullopt;
  };
  ids.bos = id_of("bos_token_id");
  ids.eos = id_of("eos_token_id");
  ids.pad = id_of("pad_token_id");
  ids.eog = json_token_ids(g, "eos_token_id", gen_path.string());
  ids.eog_source = gen_path;
  if (ids.eog.empty()) {
    ids.eog = json_token_ids(c, "eos_token_id", config_path.string());
    ids.eog_source = config_path;
  }
  if (!fs::exists(dir / "tokenizer.json", ec))
    throw model_error((dir / "tokenizer.json").string(), "is missing (a Hugging Face fast tokenizer is needed)");
  read_hf_tokenizer(dir, ids, meta);
}

}  // namespace tandem::hf
