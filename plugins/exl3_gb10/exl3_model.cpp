#include "exl3_model.hpp"

#include <cstring>
#include <optional>
#include <regex>
#include <set>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::exl3_plugin {
namespace st = safetensors;
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// The suffixes that belong to a quantized module `{key}.trellis`.
constexpr const char* companions[] = {"suh", "su", "svh", "sv", "mcg", "mul1", "bias"};


// Legacy packed signs: bit i of word j is the sign of channel 16j+i (1 = -1), as fp16 ±1.
std::vector<uint16_t> expand_signs(const st::tensor_entry& t) {
  const auto* w = reinterpret_cast<const uint16_t*>(t.data);
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()) * 16);
  for (size_t i = 0; i < out.size(); ++i) out[i] = (w[i / 16] >> (i % 16)) & 1 ? 0xbc00 : 0x3c00;
  return out;
}

}  // namespace

std::string gguf_name(const std::string& hf_name) {
  std::string n = hf_name;
  if (ends_with(n, ".weight")) n.resize(n.size() - 7);
  if (n == "model.embed_tokens") return "token_embd.weight";
  if (n == "model.norm") return "output_norm.weight";
  if (n == "lm_head") return "output.weight";
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  static const std::map<std::string, std::string> parts = {
      {"input_layernorm", "attn_norm"},     {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},       {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},       {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},        {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  std::smatch m;
  if (!std::regex_match(n, m, layer)) return "";
  auto it = parts.find(m[2].str());
  return it == parts.end() ? "" : "blk." + m[1].str() + "." + it->second + ".weight";
}

exl3_model::exl3_model(const std::filesystem::path& dir) : dir_(dir) {
  hf_names_ = model_type(read_json(dir / "config.json"), dir) != "llama";
  if (hf_names_) {
    read_hf_names_config(dir, meta_);
  } else {
    cfg_ = read_llama_config(dir, meta_);
    read_hf_tokenizer(dir, cfg_, meta_);
  }
  files_.emplace(dir);
  std::set<std::string> quantized;
  for (const st::tensor_entry* t : files_->tensors())
    if (ends_with(t->name, ".trellis")) quantized.insert(t->name.substr(0, t->name.size() - 8));
  auto companion_of = [&](const std::string& name) -> std::optional<std::string> {
    for (const char* c : companions) {
      const std::string suffix = std::string(".") + c;
      if (!ends_with(name, suffix)) continue;
      const std::string key = name.substr(0, name.size() - suffix.size());
      if (quantized.count(key)) return key;
      if (std::string_view(c) != "bias")
        throw model_error(name, "has no " + key + ".trellis (an EXL3 companion without its trellis)");
    }
    return std::nullopt;
  };
  for (const st::tensor_entry* t : files_->tensors()) {
    if (ends_with(t->name, ".trellis")) {
      const std::string key = t->name.substr(0, t->name.size() - 8);
      const std::string g = hf_names_ ? "" : gguf_name(key);
      add_quantized(key, g.empty() ? key + ".weight" : g);
    } else if (!companion_of(t->name)) {
      const std::string g = hf_names_ ? "" : gguf_name(t->name);
      add_plain(*t, g.empty() ? t->name : g);
    }
  }
}

const tensor_info* exl3_model::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// GGUF's row order for q/k: row (head h, 2i + j) is Hugging Face's row (h, j·d/2 + i).
const int32_t* exl3_model::rope_perm(const std::string& out_name) {
  int64_t heads = 0;
  if (ends_with(out_name, ".attn_q.weight")) heads = cfg_.heads;
  else if (ends_with(out_name, ".attn_k.weight")) heads = cfg_.kv_heads;
  if (heads == 0 || out_name.rfind("blk.", 0) != 0) return nullptr;
  const int64_t d = cfg_.head_dim;
  std::vector<int32_t> p(static_cast<size_t>(heads * d));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < d / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) p[h * d + 2 * i + j] = static_cast<int32_t>(h * d + j * d / 2 + i);
  perms_.push_back(std::move(p));
  return perms_.back().data();
}

// (out, in) that config.json gives a GGUF linear name; nullopt for names it does not know.
static std::optional<std::pair<int64_t, int64_t>> expected_linear(const llama_config& c, const std::string& n) {
  const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
  auto is = [&](const char* part) { return ends_with(n, std::string(".") + part + ".weight") && n.rfind("blk.", 0) == 0; };
  if (n == "output.weight" || n == "token_embd.weight") return std::pair{c.vocab, c.hidden};
  if (is("attn_q")) return std::pair{q, c.hidden};
  if (is("attn_k") || is("attn_v")) return std::pair{kv, c.hidden};
  if (is("attn_output")) return std::pair{c.hidden, q};
  if (is("ffn_gate") || is("ffn_up")) return std::pair{c.ffn, c.hidden};
  if (is("ffn_down")) return std::pair{c.hidden, c.ffn};
  return std::nullopt;
}

void exl3_model::add_quantized(const std::string& key, const std::string& out_name) {
  const st::tensor_entry& tr = *files_->find(key + ".trellis");
  auto fail = [&](const std::string& tensor, const std::string& what) -> void {
    throw model_error(tensor, what);
  };
  if (tr.type != st::st_dtype::i16 || tr.shape.size() != 3 || tr.shape[2] % 16 != 0)
    fail(tr.name, "is " + std::string(st::dtype_name(tr.type)) + " " + shape_str(tr.shape) +
                      "; an EXL3 trellis is I16 [k/16, n/16, 16*K]");
  const int64_t K = tr.shape[2] / 16, k = tr.shape[0] * 16, n = tr.shape[1] * 16;
  if (K < 1 || K > 8) fail(tr.name, "has K = " + std::to_string(K) + " bits per weight (shape[-1]/16 must be 1..8)");
  if (k == 0 || n == 0 || k % 128 != 0 || n % 128 != 0)
    fail(tr.name, "covers " + std::to_string(k) + " x " + std::to_string(n) +
                      " weights; both must be positive multiples of 128");
  exl3::exl3_tensor d;
  d.bits = static_cast<int32_t>(K);
  d.k = k;
  d.n = n;
  d.trellis = reinterpret_cast<const uint16_t*>(tr.data);
  // suh / svh, or the legacy packed signs su / sv.
  auto scales = [&](const char* h, const char* legacy, int64_t len) -> const uint16_t* {
    if (const st::tensor_entry* t = files_->find(key + "." + h)) {
      if (t->type != st::st_dtype::f16 || t->shape != std::vector<int64_t>{len})
        fail(t->name, "is " + std::string(st::dtype_name(t->type)) + " " + shape_str(t->shape) +
                          ", expected F16 [" + std::to_string(len) + "] to match " + tr.name);
      return reinterpret_cast<const uint16_t*>(t->data);
    }
    if (const st::tensor_entry* t = files_->find(key + "." + legacy)) {
      if (t->type != st::st_dtype::i16 || t->shape != std::vector<int64_t>{len / 16})
        fail(t->name, "is " + std::string(st::dtype_name(t->type)) + " " + shape_str(t->shape) +
                          ", expected I16 [" + std::to_string(len / 16) + "] packed signs");
      owned16_.push_back(expand_signs(*t));
      return owned16_.back().data();
    }
    fail(tr.name, std::string("has no companion ") + key + "." + h + " (or legacy " + key + "." + legacy + ")");
    return nullptr;
  };
  d.suh = scales("suh", "su", k);
  d.svh = scales("svh", "sv", n);
  // Codebook markers: 0-d I32; their value is never read (spec §2.1).
  const st::tensor_entry* mcg = files_->find(key + ".mcg");
  const st::tensor_entry* mul1 = files_->find(key + ".mul1");
  if (mcg && mul1) fail(tr.name, "has both codebook markers (.mcg and .mul1)");
  if (const st::tensor_entry* m = mcg ? mcg : mul1) {
    if (m->type != st::st_dtype::i32 || !(m->shape.empty() || m->shape == std::vector<int64_t>{1}))
      fail(m->name, "is " + std::string(st::dtype_name(m->type)) + " " + shape_str(m->shape) +
                        "; a codebook marker is a 0-d I32");
  }
  d.codebook = mcg ? 1 : mul1 ? 2 : 0;
  // Unpadded shape: from config.json for the llama linears, else the padded one (the model
  // code of a Hugging Face-named architecture trims it to the shape it expects).
  int64_t out = n, in = k;
  if (auto e = expected_linear(cfg_, out_name)) {
    out = e->first;
    in = e->second;
    if (round_up(in, 128) != k || round_up(out, 128) != n)
      fail(tr.name, "covers " + std::to_string(k) + " x " + std::to_string(n) +
                        " (in x out, padded) but config.json makes " + out_name + " " +
                        std::to_string(in) + " x " + std::to_string(out));
  }
  d.in_features = in;
  d.out_features = out;
  if (const st::tensor_entry* b = files_->find(key + ".bias")) {
    if (!(b->type == st::st_dtype::f16 || b->type == st::st_dtype::f32) || b->shape.size() != 1 ||
        (b->shape[0] != n && b->shape[0] != out))
      fail(b->name, "is " + std::string(st::dtype_name(b->type)) + " " + shape_str(b->shape) +
                        ", expected F16 or F32 [" + std::to_string(n) + "]");
    std::vector<uint16_t> bias(static_cast<size_t>(n), 0);  // fp16, zero-padded
    for (int64_t i = 0; i < b->shape[0]; ++i) {
      if (b->type == st::st_dtype::f16) {
        std::memcpy(&bias[i], b->data + 2 * i, 2);
      } else {
        float f;
        std::memcpy(&f, b->data + 4 * i, 4);
        bias[i] = fp32_to_fp16(f);
      }
    }
    owned16_.push_back(std::move(bias));
    d.bias = owned16_.back().data();
  }
  d.out_perm = rope_perm(out_name);
  descriptors_.push_back(d);
  if (index_.count(out_name)) fail(tr.name, "maps to " + out_name + ", which another tensor already has");
  index_.emplace(out_name, tensors_.size());
  tensors_.push_back({out_name, exl3::exl3_tensor::type, {out, in}, &descriptors_.back(), sizeof(exl3::exl3_tensor)});
}

void exl3_model::add_plain(const st::tensor_entry& t, const std::string& out_name) {
  if (!hf_names_ && ends_with(t.name, "_proj.bias"))
    throw model_error(t.name, "is the bias of an unquantized linear, which the llama engine does not take");
  const auto type = st::tandem_dtype(t.type);
  if (!type) {
    if (out_name == t.name && !hf_names_) return;  // a tensor the llama engine does not use
    throw model_error(t.name, "has dtype " + std::string(st::dtype_name(t.type)) +
                                  " (plain tensors must be F32, F16 or BF16)");
  }
  if (index_.count(out_name)) throw model_error(t.name, "maps to " + out_name + ", which another tensor already has");
  const void* data = t.data;
  const bool rotary = ends_with(out_name, ".attn_q.weight") || ends_with(out_name, ".attn_k.weight");
  const auto e = expected_linear(cfg_, out_name);
  // The shape is checked before the row permutation is built from config.json's heads.
  if (rotary && e && (t.shape.size() != 2 || t.shape[0] != e->first || t.shape[1] != e->second))
    throw model_error(t.name, "has shape " + shape_str(t.shape) + ", expected [" + std::to_string(e->first) +
                                  ", " + std::to_string(e->second) + "]");
  if (const int32_t* perm = rope_perm(out_name)) {
    const size_t row = t.nbytes / static_cast<size_t>(t.shape[0]);
    std::vector<uint16_t> rows((t.nbytes + 1) / 2);
    auto* dst = reinterpret_cast<std::byte*>(rows.data());
    for (int64_t r = 0; r < t.shape[0]; ++r) std::memcpy(dst + r * row, t.data + perm[r] * row, row);
    owned16_.push_back(std::move(rows));
    data = owned16_.back().data();
  }
  index_.emplace(out_name, tensors_.size());
  tensors_.push_back({out_name, *type, t.shape, data, t.nbytes});
}

}  // namespace tandem::exl3_plugin
