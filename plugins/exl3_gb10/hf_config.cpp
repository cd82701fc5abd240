#include "hf_config.hpp"

#include <boost/json.hpp>

#include "hf_model_meta.hpp"
#include "hf_tokenizer.hpp"
#include "tandem/error.hpp"

namespace tandem::exl3_plugin {
namespace json = boost::json;
namespace {

// Bounds of the llama hyper-parameters, the same as the llama engine checks
// (models/llama/llama_hparams.cpp): far above any released model, far below where a size
// computed from them (heads x head_dim, vocab x hidden) overflows or allocates absurdly --
// which this reader does before the engine sees them (the q/k row permutation, the vocab).
constexpr int64_t max_layers = 4096;
constexpr int64_t max_width = int64_t{1} << 20;  // hidden_size, intermediate_size
constexpr int64_t max_heads = 4096;
constexpr int64_t max_head_dim = 4096;
constexpr int64_t max_vocab = int64_t{1} << 24;
constexpr int64_t max_context = int64_t{1} << 27;

// A positive integer field of config.json no larger than `limit`, or `fallback` when it is
// absent (-1 = required).
int64_t int_field(const json::object& o, std::string_view key, const std::string& file, int64_t limit,
                  int64_t fallback = -1) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) {
    if (fallback < 0) throw model_error(file, std::string(key) + " is missing");
    return fallback;
  }
  int64_t x = 0;
  if (v->is_int64()) x = v->get_int64();
  else if (v->is_uint64() && v->get_uint64() < (1ULL << 62)) x = static_cast<int64_t>(v->get_uint64());
  else throw model_error(file, std::string(key) + " is not an integer");
  if (x <= 0 || x > limit)
    throw model_error(file, std::string(key) + " = " + std::to_string(x) + " is out of range (1.." +
                                std::to_string(limit) + ")");
  return x;
}

double number_field(const json::object& o, std::string_view key, const std::string& file, double fallback) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  throw model_error(file, std::string(key) + " is not a number");
}

}  // namespace

std::string model_type(const boost::json::value& config, const std::filesystem::path& dir) {
  const std::string file = (dir / "config.json").string();
  const json::value* mt = config.as_object().if_contains("model_type");
  if (!mt || !mt->is_string()) throw model_error(file, "has no model_type string (the architecture)");
  const std::string t(mt->as_string());
  if (t != "llama" && t != "glm_moe_dsa")
    throw model_error(file, "model_type is \"" + t + "\"; weights.exl3 reads llama and glm_moe_dsa models");
  return t;
}

void read_quantization_config(const json::object& o, const std::string& file, model_metadata& meta) {
  const json::value* qc = o.if_contains("quantization_config");
  const json::value* qm = qc && qc->is_object() ? qc->as_object().if_contains("quant_method") : nullptr;
  if (!qm || !qm->is_string() || qm->as_string() != "exl3")
    throw model_error(file, "quantization_config.quant_method is not \"exl3\"");
  const json::object& q = qc->as_object();
  meta.set("exl3.bits", number_field(q, "bits", file, 0.0));
  meta.set("exl3.head_bits", number_field(q, "head_bits", file, 0.0));
  if (const json::value* v = q.if_contains("version"); v && v->is_string())
    meta.set("exl3.version", std::string(v->as_string()));
}

void read_hf_names_config(const std::filesystem::path& dir, model_metadata& meta) {
  const std::string file = (dir / "config.json").string();
  json::value config = read_json(dir / "config.json");
  json::object& o = config.as_object();
  read_quantization_config(o, file, meta);
  // The model reads the architecture's keys; quantization_config is weights.exl3's business.
  o.erase("quantization_config");
  hf::read_hf_model_meta(hf::model_dir(dir), o, json::serialize(o), meta);
}

llama_config read_llama_config(const std::filesystem::path& dir, model_metadata& meta) {
  const std::string file = (dir / "config.json").string();
  llama_config c;
  c.raw = read_json(dir / "config.json");
  const json::object& o = c.raw.as_object();
  if (const json::value* rs = o.if_contains("rope_scaling"); rs && !rs->is_null() &&
                                                            !(rs->is_object() && rs->as_object().empty()))
    throw model_error(file, "rope_scaling " + json::serialize(*rs) + " is not supported");
  if (const json::value* ab = o.if_contains("attention_bias"); ab && ab->is_bool() && ab->get_bool())
    throw model_error(file, "attention_bias is not supported by the llama engine");

  c.hidden = int_field(o, "hidden_size", file, max_width);
  c.layers = int_field(o, "num_hidden_layers", file, max_layers);
  c.heads = int_field(o, "num_attention_heads", file, max_heads);
  c.kv_heads = int_field(o, "num_key_value_heads", file, max_heads, c.heads);
  c.head_dim = int_field(o, "head_dim", file, max_head_dim, c.hidden / c.heads);
  c.ffn = int_field(o, "intermediate_size", file, max_width);
  c.vocab = int_field(o, "vocab_size", file, max_vocab);
  c.context = int_field(o, "max_position_embeddings", file, max_context);
  if (c.head_dim < 1 || c.head_dim > max_head_dim)
    throw model_error(file, "head_dim is absent and hidden_size / num_attention_heads = " +
                                std::to_string(c.head_dim) + " is out of range (1.." + std::to_string(max_head_dim) + ")");
  if (const json::value* t = o.if_contains("tie_word_embeddings"); t && t->is_bool()) c.tie_embeddings = t->get_bool();
  if (c.heads % c.kv_heads != 0) throw model_error(file, "num_attention_heads is not a multiple of num_key_value_heads");
  if (c.head_dim % 2 != 0) throw model_error(file, "head_dim is odd");

  meta.set("general.architecture", std::string("llama"));
  if (const json::value* n = o.if_contains("_name_or_path"); n && n->is_string())
    meta.set("general.name", std::string(n->as_string()));
  meta.set("llama.block_count", c.layers);
  meta.set("llama.context_length", c.context);
  meta.set("llama.embedding_length", c.hidden);
  meta.set("llama.feed_forward_length", c.ffn);
  meta.set("llama.attention.head_count", c.heads);
  meta.set("llama.attention.head_count_kv", c.kv_heads);
  meta.set("llama.attention.key_length", c.head_dim);
  meta.set("llama.attention.value_length", c.head_dim);
  meta.set("llama.rope.dimension_count", c.head_dim);
  meta.set("llama.rope.freq_base", number_field(o, "rope_theta", file, 10000.0));
  meta.set("llama.attention.layer_norm_rms_epsilon", number_field(o, "rms_norm_eps", file, 1e-6));
  meta.set("llama.vocab_size", c.vocab);
  read_quantization_config(o, file, meta);
  return c;
}

void read_hf_tokenizer(const std::filesystem::path& dir, const llama_config& cfg, model_metadata& meta) {
  const json::object& c = cfg.raw.as_object();
  hf::tokenizer_ids ids;
  ids.vocab_size = cfg.vocab;
  ids.bos = hf::json_token_id(c, "bos_token_id");
  ids.eos = hf::json_token_id(c, "eos_token_id");
  ids.pad = hf::json_token_id(c, "pad_token_id");
  hf::read_hf_tokenizer(dir, ids, meta);
}

}  // namespace tandem::exl3_plugin
