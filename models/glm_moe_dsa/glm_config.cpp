#include "glm_config.hpp"

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <string_view>

#include "tandem/error.hpp"

namespace tandem::glm {
namespace json = boost::json;
namespace {

// Keys that change the computation; each is read below.
constexpr std::array<std::string_view, 40> computed_keys{
    "vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size", "num_hidden_layers",
    "num_attention_heads", "num_key_value_heads", "n_shared_experts", "n_routed_experts",
    "routed_scaling_factor", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim",
    "qk_nope_head_dim", "n_group", "topk_group", "num_experts_per_tok", "norm_topk_prob", "hidden_act",
    "max_position_embeddings", "rms_norm_eps", "tie_word_embeddings", "rope_parameters", "rope_theta",
    "rope_scaling", "mlp_layer_types", "attention_bias", "index_topk", "index_head_dim", "index_n_heads",
    "first_k_dense_replace", "indexer_types", "index_topk_pattern", "index_topk_freq",
    "index_skip_topk_offset", "num_nextn_predict_layers", "layer_types", "mlp_bias", "scoring_func"};
// Keys that describe the checkpoint or training and do not change inference (dropout is
// checked to be a number; head_dim is recomputed by transformers as qk_rope_head_dim).
constexpr std::array<std::string_view, 19> descriptive_keys{
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "use_cache",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "attention_dropout",
    "output_router_logits", "head_dim", "name_or_path", "_name_or_path", "topk_method", "rope_interleave",
    "moe_layer_freq", "ep_size"};

class reader {
 public:
  reader(const json::object& o, const std::string& file) : o_(o), file_(file) {}
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw model_error(file_, std::string(key) + ": " + what);
  }
  const json::value* get(std::string_view key) const {
    const json::value* v = o_.if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }
  int64_t integer(std::string_view key, std::optional<int64_t> dflt = std::nullopt, int64_t lo = 1) const {
    const json::value* v = get(key);
    if (!v) {
      if (!dflt) fail(key, "is missing");
      return *dflt;
    }
    if (!v->is_int64() && !v->is_uint64()) fail(key, "must be an integer");
    const int64_t x = v->is_int64() ? v->get_int64() : static_cast<int64_t>(v->get_uint64());
    if (x < lo || x > (int64_t{1} << 40)) fail(key, "is " + std::to_string(x) + ", out of range");
    return x;
  }
  double number(std::string_view key, double dflt) const {
    const json::value* v = get(key);
    if (!v) return dflt;
    if (!v->is_number()) fail(key, "must be a number");
    return v->to_number<double>();
  }
  bool boolean(std::string_view key, bool dflt) const {
    const json::value* v = get(key);
    if (!v) return dflt;
    if (!v->is_bool()) fail(key, "must be true or false");
    return v->get_bool();
  }
  std::string string(std::string_view key, const std::string& dflt) const {
    const json::value* v = get(key);
    if (!v) return dflt;
    if (!v->is_string()) fail(key, "must be a string");
    return std::string(v->get_string());
  }
  // A per-layer list of strings, each one of `allowed`; empty when absent.
  std::vector<std::string> layer_list(std::string_view key, int n, std::initializer_list<std::string_view> allowed) const {
    std::vector<std::string> out;
    const json::value* v = get(key);
    if (!v) return out;
    if (!v->is_array() || static_cast<int>(v->get_array().size()) != n)
      fail(key, "must be a list of " + std::to_string(n) + " strings (one per layer)");
    for (const json::value& e : v->get_array()) {
      if (!e.is_string()) fail(key, "must be a list of strings");
      const std::string s(e.get_string());
      if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) fail(key, "has unknown entry '" + s + "'");
      out.push_back(s);
    }
    return out;
  }

 private:
  const json::object& o_;
  const std::string& file_;
};

void read_rope(const reader& r, const json::object& o, glm_config& c) {
  const json::value* params = r.get("rope_parameters");
  if (!params) params = r.get("rope_scaling");
  std::string type = "default";
  double theta = r.number("rope_theta", 10000.0);
  if (params) {
    if (!params->is_object()) r.fail("rope_parameters", "must be an object");
    for (const auto& kv : params->get_object()) {
      if (kv.key() == "rope_type" || kv.key() == "type") {
        if (!kv.value().is_string()) r.fail("rope_parameters.rope_type", "must be a string");
        type = std::string(kv.value().get_string());
      } else if (kv.key() == "rope_theta") {
        if (!kv.value().is_number()) r.fail("rope_parameters.rope_theta", "must be a number");
        theta = kv.value().to_number<double>();
      } else if (kv.key() == "partial_rotary_factor") {
        if (!kv.value().is_number() || kv.value().to_number<double>() != 1.0)
          r.fail("rope_parameters.partial_rotary_factor", "only 1.0 is supported (MLA rotates qk_rope_head_dim)");
      } else {
        r.fail("rope_parameters." + std::string(kv.key()), "is not supported (rope_type default only)");
      }
    }
  }
  (void)o;
  if (type != "default")
    r.fail("rope_parameters.rope_type", "'" + type + "' is not supported; tandem runs rope_type 'default'");
  if (!(theta > 0)) r.fail("rope_theta", "must be positive");
  c.rope_theta = static_cast<float>(theta);
}

}  // namespace

int glm_config::indexer_layers() const {
  return static_cast<int>(std::count(own_indexer.begin(), own_indexer.end(), true));
}

glm_config glm_config::parse(const std::string& text, const std::string& file) {
  json::value root;
  try {
    root = json::parse(text);
  } catch (const std::exception& e) {
    throw model_error(file, std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object()) throw model_error(file, "is not a JSON object");
  const json::object& o = root.get_object();
  for (const auto& kv : o) {
    const std::string_view k = kv.key();
    if (std::find(computed_keys.begin(), computed_keys.end(), k) == computed_keys.end() &&
        std::find(descriptive_keys.begin(), descriptive_keys.end(), k) == descriptive_keys.end())
      throw model_error(file, std::string(k) + ": unknown glm_moe_dsa config key (tandem would not honour it)");
  }
  const reader r(o, file);
  glm_config c;
  c.file = file;
  if (r.string("model_type", "") != "glm_moe_dsa") r.fail("model_type", "must be 'glm_moe_dsa'");
  c.vocab = r.integer("vocab_size");
  c.hidden = r.integer("hidden_size");
  c.ffn = r.integer("intermediate_size");
  c.moe_ffn = r.integer("moe_intermediate_size");
  c.n_layers = static_cast<int>(r.integer("num_hidden_layers"));
  c.n_heads = static_cast<int>(r.integer("num_attention_heads"));
  if (r.integer("num_key_value_heads", c.n_heads) != c.n_heads)
    r.fail("num_key_value_heads", "must equal num_attention_heads (MLA expands the latent to every head)");
  c.q_lora_rank = static_cast<int>(r.integer("q_lora_rank"));
  c.kv_lora_rank = static_cast<int>(r.integer("kv_lora_rank"));
  c.qk_nope = static_cast<int>(r.integer("qk_nope_head_dim"));
  c.qk_rope = static_cast<int>(r.integer("qk_rope_head_dim"));
  c.v_dims = static_cast<int>(r.integer("v_head_dim"));
  if (c.qk_rope % 2) r.fail("qk_rope_head_dim", "must be even (RoPE rotates pairs)");
  c.n_routed = static_cast<int>(r.integer("n_routed_experts"));
  c.n_shared = static_cast<int>(r.integer("n_shared_experts", 1, 0));
  c.top_k = static_cast<int>(r.integer("num_experts_per_tok"));
  c.n_group = static_cast<int>(r.integer("n_group", 1));
  c.topk_group = static_cast<int>(r.integer("topk_group", 1));
  if (c.n_routed % c.n_group) r.fail("n_group", "must divide n_routed_experts");
  if (c.topk_group > c.n_group) r.fail("topk_group", "must be at most n_group");
  if (c.top_k > c.topk_group * (c.n_routed / c.n_group))
    r.fail("num_experts_per_tok", "is more than the experts of topk_group groups");
  c.routed_scaling = static_cast<float>(r.number("routed_scaling_factor", 1.0));
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  if (r.string("hidden_act", "silu") != "silu") r.fail("hidden_act", "only silu is supported");
  if (r.string("scoring_func", "sigmoid") != "sigmoid") r.fail("scoring_func", "only sigmoid routing is defined");
  if (r.boolean("attention_bias", false)) r.fail("attention_bias", "biased attention projections are not supported");
  if (r.boolean("mlp_bias", false)) r.fail("mlp_bias", "biased MLP projections are not supported");
  c.index_heads = static_cast<int>(r.integer("index_n_heads"));
  c.index_dims = static_cast<int>(r.integer("index_head_dim"));
  c.index_topk = static_cast<int>(r.integer("index_topk"));
  if (c.index_dims < c.qk_rope) r.fail("index_head_dim", "must be at least qk_rope_head_dim");
  c.context = r.integer("max_position_embeddings");
  c.rms_eps = static_cast<float>(r.number("rms_norm_eps", 1e-5));
  c.tied_embeddings = r.boolean("tie_word_embeddings", false);
  c.nextn_layers = static_cast<int>(r.integer("num_nextn_predict_layers", 0, 0));
  read_rope(r, o, c);
  const int first_dense = static_cast<int>(r.integer("first_k_dense_replace", 3, 0));
  for (const std::string& t : r.layer_list("layer_types", c.n_layers, {"indexed_attention"})) (void)t;

  std::vector<std::string> mlp = r.layer_list("mlp_layer_types", c.n_layers, {"dense", "sparse"});
  c.sparse_mlp.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) c.sparse_mlp[i] = mlp.empty() ? i >= first_dense : mlp[i] == "sparse";

  // indexer_types, else index_topk_pattern ("F"/"S" per layer), else index_topk_freq with
  // index_skip_topk_offset, as GlmMoeDsaConfig.__post_init__ derives them.
  std::vector<std::string> idx = r.layer_list("indexer_types", c.n_layers, {"full", "shared"});
  if (idx.empty()) {
    if (const json::value* pat = r.get("index_topk_pattern")) {
      if (!pat->is_string() || static_cast<int>(pat->get_string().size()) != c.n_layers)
        r.fail("index_topk_pattern", "must be a string of one F or S per layer");
      for (char ch : pat->get_string()) {
        if (ch != 'F' && ch != 'S') r.fail("index_topk_pattern", "may hold only F and S");
        idx.push_back(ch == 'F' ? "full" : "shared");
      }
    } else {
      const int64_t freq = std::max<int64_t>(r.integer("index_topk_freq", 1), 1);
      const int64_t offset = r.integer("index_skip_topk_offset", 2, 0);
      for (int i = 0; i < c.n_layers; ++i)
        idx.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? "full" : "shared");
    }
  }
  c.own_indexer.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) c.own_indexer[i] = idx[i] == "full";
  if (!c.own_indexer[0]) r.fail("indexer_types", "layer 0 must be 'full' (a shared layer reuses an earlier top-k)");
  if (r.number("attention_dropout", 0.0) < 0) r.fail("attention_dropout", "must not be negative");
  return c;
}

glm_config glm_config::from_weights(const weight_format& w, const std::string& file) {
  auto text = w.meta().get_string("hf.config_json");
  if (!text)
    throw model_error(file, "glm_moe_dsa needs its Hugging Face config.json (hf.config_json): open the "
                            "directory with weights.safetensors");
  auto path = w.meta().get_string("hf.config_path");
  return parse(*text, path ? *path : file);
}

}  // namespace tandem::glm
