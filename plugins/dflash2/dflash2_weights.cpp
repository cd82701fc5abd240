#include "dflash2_weights.hpp"

#include <set>

#include "dflash2_manifest.hpp"
#include "safetensors_file.hpp"
#include "tandem/error.hpp"

namespace tandem {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "{";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "}";
}

}  // namespace

std::map<std::string, std::vector<int64_t>> dflash2_tensor_shapes(const dflash2_config& c) {
  const int64_t d = c.hidden_size, g = c.groups(), f = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> s;
  s["fc.weight"] = {d, c.taps() * d};
  s["hidden_norm.weight"] = {d};
  s["mask_embedding"] = {d};
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    s[p + "input_norm.weight"] = {d};
    s[p + "conv_attn.base"] = {g, 2};
    s[p + "conv_attn.proj.weight"] = {2 * g, d};
    s[p + "q_proj.weight"] = {c.q_width(), d};
    s[p + "k_proj.weight"] = {c.kv_width(), d};
    s[p + "v_proj.weight"] = {c.kv_width(), d};
    s[p + "o_proj.weight"] = {d, c.q_width()};
    s[p + "post_norm.weight"] = {d};
    s[p + "conv_mlp.base"] = {g, 2};
    s[p + "conv_mlp.proj.weight"] = {2 * g, d};
    s[p + "gate_proj.weight"] = {f, d};
    s[p + "up_proj.weight"] = {f, d};
    s[p + "down_proj.weight"] = {d, f};
  }
  s["norm.weight"] = {d};
  s["selector.codebook"] = {c.target.vocab_size, c.selector_rank};
  s["selector.proj.weight"] = {c.selector_rank, d};
  return s;
}

dflash2_weights::~dflash2_weights() = default;

std::unique_ptr<dflash2_weights> dflash2_weights::open(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw model_error(dir.string(), "is not a directory (a dflash2 drafter directory: config.json, "
                                    "model.safetensors, MANIFEST.sha256)");
  std::unique_ptr<dflash2_weights> w(new dflash2_weights());
  w->dir_ = dir;
  // The hashes first: nothing is parsed from a file the manifest does not vouch for.
  const dflash2_manifest manifest = dflash2_manifest::verify(dir);
  manifest.require_listed("config.json");
  w->cfg_ = dflash2_config::read(dir / "config.json");
  if (fs::exists(dir / "model.safetensors.index.json", ec)) manifest.require_listed("model.safetensors.index.json");
  w->files_ = std::make_unique<safetensors::model_files>(dir, safetensors::shard_policy::strict);
  std::set<std::string> shards;
  for (const safetensors::tensor_entry* t : w->files_->tensors()) shards.insert(fs::path(t->file).filename().string());
  for (const std::string& s : shards) manifest.require_listed(s);

  const auto want = dflash2_tensor_shapes(w->cfg_);
  for (const auto& [name, shape] : want) {
    const safetensors::tensor_entry* t = w->files_->find(name);
    if (!t) throw model_error(dir.string(), "has no tensor '" + name + "' (shape " + shape_text(shape) + ")");
    if (t->shape != shape)
      throw model_error(t->file, "tensor '" + name + "' has shape " + shape_text(t->shape) + "; config.json makes it " +
                                     shape_text(shape));
    const auto type = safetensors::tandem_dtype(t->type);
    if (!type || (*type != dtype::f32 && *type != dtype::f16 && *type != dtype::bf16))
      throw model_error(t->file, "tensor '" + name + "' is " + std::string(safetensors::dtype_name(t->type)) +
                                     "; a dflash2 drafter's tensors are F32, F16 or BF16");
    tensor_info info;
    info.name = name;
    info.type = *type;
    info.shape = t->shape;
    info.data = t->data;
    info.nbytes = t->nbytes;
    w->tensors_.emplace(name, std::move(info));
  }
  for (const safetensors::tensor_entry* t : w->files_->tensors())
    if (!want.contains(t->name))
      throw model_error(t->file, "tensor '" + t->name + "' is not part of a dflash2 drafter with this config.json "
                                                        "(num_layers " + std::to_string(w->cfg_.num_layers) + ")");
  return w;
}

const tensor_info& dflash2_weights::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw error("dflash2_weights: no tensor '" + name + "' in " + dir_.string());
  return it->second;
}

}  // namespace tandem
