// quantize_glm_exl3 (quantize_model.hpp): a glm_moe_dsa Hugging Face directory to EXL3 in
// exllamav3's layout. What is quantized follows exllamav3's DeepSeek-V3 / DSV4 modules
// (architecture/deepseek_v3.py, modules/mla_attn.py, block_sparse_mlp.py, dsv4.py):
//   EXL3: q_a_proj, q_b_proj, kv_a_proj_with_mqa, o_proj (MLAttention's Linears), the
//         indexer's wq_b and wk (DSV4 quantizes its indexer query and key projections),
//         dense MLPs, shared experts, and each routed expert's gate/up/down as its own
//         linear under experts.E.{gate,up,down}_proj (fused gate_up_proj / down_proj
//         source tensors are split per expert, as BlockSparseMLP's fkey/fidx do);
//   fp16: kv_b_proj (MLAttention reads it raw for the absorbed up-projection), the router
//         (mlp.gate: qmap None), the indexer's weights_proj (qmap None), every norm, the
//         embedding, and the MTP layers' eh_proj / shared_head.head;
//   f32:  the router's e_score_correction_bias (kept at the checkpoint's precision: routing
//         compares biased scores).
// A tensor outside this list is an error naming it: nothing is dropped or guessed.
//
// Without calibration (no Hessians: H = I, no LDLQ). Calibration needs a glm_moe_dsa
// forward in the quantizer (MLA, the sparse indexer, routed experts); not built yet, so
// --calibration is refused here.
#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "exl3_output.hpp"
#include "glm_moe_dsa/glm_config.hpp"
#include "gguf_source.hpp"
#include "hf_export.hpp"
#include "quantize_model.hpp"
#include "tandem/error.hpp"

namespace tandem::quantize {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace {

enum class action { exl3, f16, f32, fused_gate_up, fused_down };

// What becomes of a tensor of layer L, by its name after "model.layers.L."; nullopt: unknown.
std::optional<action> action_of(const std::string& part) {
  static const std::map<std::string, action, std::less<>> fixed = {
      {"self_attn.q_a_proj.weight", action::exl3},
      {"self_attn.q_b_proj.weight", action::exl3},
      {"self_attn.kv_a_proj_with_mqa.weight", action::exl3},
      {"self_attn.o_proj.weight", action::exl3},
      {"self_attn.indexer.wq_b.weight", action::exl3},
      {"self_attn.indexer.wk.weight", action::exl3},
      {"mlp.gate_proj.weight", action::exl3},
      {"mlp.up_proj.weight", action::exl3},
      {"mlp.down_proj.weight", action::exl3},
      {"mlp.shared_experts.gate_proj.weight", action::exl3},
      {"mlp.shared_experts.up_proj.weight", action::exl3},
      {"mlp.shared_experts.down_proj.weight", action::exl3},
      {"mlp.experts.gate_up_proj", action::fused_gate_up},
      {"mlp.experts.down_proj", action::fused_down},
      {"input_layernorm.weight", action::f16},
      {"post_attention_layernorm.weight", action::f16},
      {"self_attn.q_a_layernorm.weight", action::f16},
      {"self_attn.kv_a_layernorm.weight", action::f16},
      {"self_attn.kv_b_proj.weight", action::f16},
      {"self_attn.indexer.k_norm.weight", action::f16},
      {"self_attn.indexer.k_norm.bias", action::f16},
      {"self_attn.indexer.weights_proj.weight", action::f16},
      {"mlp.gate.weight", action::f16},
      {"mlp.gate.e_score_correction_bias", action::f32},
      {"enorm.weight", action::f16},
      {"hnorm.weight", action::f16},
      {"eh_proj.weight", action::f16},
      {"shared_head.norm.weight", action::f16},
      {"shared_head.head.weight", action::f16}};
  if (auto it = fixed.find(part); it != fixed.end()) return it->second;
  static const std::regex expert(R"(mlp\.experts\.\d+\.(gate|up|down)_proj\.weight)");
  if (std::regex_match(part, expert)) return action::exl3;
  return std::nullopt;
}

struct layer_tensor {
  const tensor_info* t;
  action what;
};

// The source's tensors by layer (index n_layers: the embedding, final norm and head).
std::vector<std::vector<layer_tensor>> plan_layers(const weight_format& wf, const glm::glm_config& c,
                                                    const std::string& source) {
  const int n = c.n_layers + c.nextn_layers;
  std::vector<std::vector<layer_tensor>> plan(static_cast<size_t>(n) + 1);
  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  for (const tensor_info& t : wf.tensors()) {
    std::smatch m;
    if (t.name == "model.embed_tokens.weight" || t.name == "model.norm.weight" || t.name == "lm_head.weight") {
      plan[n].push_back({&t, action::f16});
      continue;
    }
    if (!std::regex_match(t.name, m, layer) || std::stol(m[1].str()) >= n)
      throw model_error(source, "tensor " + t.name + " is not part of glm_moe_dsa as tandem quantize knows it");
    const auto what = action_of(m[2].str());
    if (!what)
      throw model_error(source, "tensor " + t.name + ": tandem quantize does not know this glm_moe_dsa tensor");
    const size_t dims = *what == action::fused_gate_up || *what == action::fused_down ? 3
                        : *what == action::exl3                                       ? 2
                                                                                      : 0;
    if (dims && t.shape.size() != dims)
      throw model_error(source, "tensor " + t.name + " has " + std::to_string(t.shape.size()) + " dimensions, expected " +
                                    std::to_string(dims));
    plan[std::stol(m[1].str())].push_back({&t, *what});
  }
  for (auto& p : plan)
    std::sort(p.begin(), p.end(), [](const layer_tensor& a, const layer_tensor& b) { return a.t->name < b.t->name; });
  return plan;
}

int linears_in(const std::vector<layer_tensor>& layer) {
  int n = 0;
  for (const auto& x : layer)
    n += x.what == action::exl3 ? 1 : x.what == action::fused_gate_up ? 2 * static_cast<int>(x.t->shape[0])
         : x.what == action::fused_down                                ? static_cast<int>(x.t->shape[0])
                                                                       : 0;
  return n;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) { return bytes_of(v); }

// rows [row0, row0 + rows) of matrix e of a [E][R][cols] tensor, as [cols][rows] (inputs first).
std::vector<float> expert_slice(const std::vector<float>& all, int64_t e, int64_t R, int64_t row0, int64_t rows,
                                int64_t cols) {
  std::vector<float> m(all.begin() + (e * R + row0) * cols, all.begin() + (e * R + row0 + rows) * cols);
  return transpose(m, rows, cols);
}

void copy_side_files(const fs::path& from, const fs::path& to) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json", "chat_template.jinja",
                        "special_tokens_map.json"})
    if (fs::exists(from / f)) fs::copy_file(from / f, to / f, fs::copy_options::overwrite_existing);
}

}  // namespace

exl3_report quantize_glm_exl3(const weight_format& wf, const std::string& source, const exl3_request& r) {
  if (!r.calibration.empty())
    throw error("--calibration: calibrating glm_moe_dsa is not supported yet (the quantizer's calibration "
                "forward is llama's); quantize without it (no Hessians)");
  const glm::glm_config c = glm::glm_config::from_weights(wf, source);
  const auto config_path = wf.meta().get_string("hf.config_path");
  const auto config_text = wf.meta().get_string("hf.config_json");
  if (!config_path || !config_text)
    throw error(source + ": a glm_moe_dsa source must be a Hugging Face directory (weights.safetensors)");
  const auto plan = plan_layers(wf, c, source);
  const int n_layers = c.n_layers + c.nextn_layers, n_shards = n_layers + 1;

  fs::create_directories(r.out_dir);
  const json::object settings = settings_of(r, source);
  run_state st{r, {}, {}, 0, 0};
  exl3_report rep;
  const int start = resume_progress(r.out_dir, settings, st, nullptr);
  rep.layers_skipped = start;
  int total = 1;  // the head
  for (int l = start; l < n_layers; ++l) total += linears_in(plan[l]);
  progress_bar bar(total, r.progress);

  for (int l = start; l < n_layers; ++l) {
    safetensors_file shard;
    uint64_t seed = 1000ull * l;  // one per linear: its input signs (H = I) and output signs
    auto quant = [&](const std::string& key, const std::vector<float>& w_in_out, int in, int out) {
      const exl3::prepared_hessian H = exl3::prepare_hessian(nullptr, in, ++seed);
      st.add_linear(shard, key, w_in_out, in, out, H, seed, 1, r.bits, true);
      bar.tick(key);
    };
    for (const layer_tensor& x : plan[l]) {
      const tensor_info& t = *x.t;
      const std::vector<float> w = load_f32(wf, source, t.name, t.shape);
      switch (x.what) {
        case action::f16: shard.add(t.name, "F16", t.shape, to_f16(w)); break;
        case action::f32: shard.add(t.name, "F32", t.shape, f32_bytes(w)); break;
        case action::exl3: {
          const int out = static_cast<int>(t.shape[0]), in = static_cast<int>(t.shape[1]);
          quant(t.name.substr(0, t.name.size() - 7), transpose(w, out, in), in, out);
          break;
        }
        case action::fused_gate_up:
        case action::fused_down: {
          // gate_up_proj {E, 2F, H}: rows [0, F) gate, [F, 2F) up; down_proj {E, H, F}.
          const int64_t E = t.shape[0], R = t.shape[1], cols = t.shape[2];
          const std::string p = t.name.substr(0, t.name.rfind('.') + 1);  // "...mlp.experts."
          if (x.what == action::fused_gate_up && R % 2 != 0)
            throw model_error(source, "tensor " + t.name + " has an odd row count " + std::to_string(R));
          for (int64_t e = 0; e < E; ++e) {
            const std::string k = p + std::to_string(e) + ".";
            if (x.what == action::fused_down) {
              quant(k + "down_proj", expert_slice(w, e, R, 0, R, cols), static_cast<int>(cols), static_cast<int>(R));
            } else {
              quant(k + "gate_proj", expert_slice(w, e, R, 0, R / 2, cols), static_cast<int>(cols), static_cast<int>(R / 2));
              quant(k + "up_proj", expert_slice(w, e, R, R / 2, R / 2, cols), static_cast<int>(cols), static_cast<int>(R / 2));
            }
          }
          break;
        }
      }
    }
    shard.write(r.out_dir / shard_name(l + 1, n_shards));
    save_progress(r.out_dir, settings, l + 1, st, nullptr);
  }

  // Embedding, final norm, head.
  safetensors_file last;
  const int d = static_cast<int>(c.hidden);
  const std::vector<float> embd = load_f32(wf, source, "model.embed_tokens.weight", {c.vocab, c.hidden});
  last.add("model.embed_tokens.weight", "F16", {c.vocab, c.hidden}, to_f16(embd));
  last.add("model.norm.weight", "F16", {c.hidden}, to_f16(load_f32(wf, source, "model.norm.weight", {c.hidden})));
  const bool tied = c.tied_embeddings;
  const std::vector<float> head = tied ? embd : load_f32(wf, source, "lm_head.weight", {c.vocab, c.hidden});
  const auto H = r.head_bits == 16 ? exl3::prepared_hessian{} : exl3::prepare_hessian(nullptr, d, 1000ull * n_layers);
  rep.head = add_head(st, last, head, c.vocab, d, tied, H, 1000ull * n_layers);
  bar.tick("lm_head");
  last.write(r.out_dir / shard_name(n_shards, n_shards));

  copy_side_files(fs::path(*config_path).parent_path(), r.out_dir);
  json::object config = json::parse(*config_text).as_object();
  // A quantized head from a tied embedding is a separate lm_head tensor the model must read.
  if (tied && r.head_bits != 16) config["tie_word_embeddings"] = false;
  finish_run(r, settings, st, n_shards, std::move(config), rep);
  return rep;
}

}  // namespace tandem::quantize
