// See quantize_model.hpp. exl3.md §2 (layout) and §5 (algorithm).
#include "quantize_model.hpp"
#include "tile_coder_cuda.hpp"

#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <cstring>
#include <thread>

#include "calibration.hpp"
#include "exl3_output.hpp"
#include "gguf_source.hpp"
#include "hf_export.hpp"
#include "llama_hparams.hpp"
#include "safetensors_writer.hpp"
#include "tandem/error.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::quantize {
namespace fs = std::filesystem;
namespace json = boost::json;

exl3_report quantize_exl3(const weight_format& wf, const std::string& source, const exl3_request& r) {
  check_request(r);
  const model_metadata& meta = wf.meta();
  const auto arch = meta.get_string("general.architecture");
  if (arch && *arch == "glm_moe_dsa") return quantize_glm_exl3(wf, source, r);
  if (!arch || *arch != "llama")
    throw error(source + ": tandem quantize --to exl3 handles llama (GGUF) and glm_moe_dsa (Hugging Face "
                "directories), not " + (arch ? "'" + *arch + "'" : std::string("a model without general.architecture")));
  const llama_hparams hp = llama_hparams::from_metadata(meta, source);
  const int L = hp.n_layers, d = hp.hidden, nh = hp.n_heads, nkv = hp.n_kv_heads, hd = hp.head_dim;
  const bool tied = wf.find("output.weight") == nullptr;
  const tokenizer tok = tokenizer::from_metadata(meta, source);

  fs::create_directories(r.out_dir);
  const json::object settings = settings_of(r, source);
  run_state st{r, {}, {}, 0, 0};
  exl3_report rep;
  calibration_state cal;
  const int start = resume_progress(r.out_dir, settings, st, &cal);
  rep.layers_skipped = start;
  if (start == 0) {
    const std::vector<float> embd = load_f32(wf, source, "token_embd.weight", {hp.vocab, d});
    cal = calibration_state::from_text(r.calibration, tok, embd, d, r.rows, r.cols);
  }
  rep.calibration_tokens = cal.tokens();

  progress_bar bar(7 * L + 1, r.progress);
  bar.skip(7 * start);
  const int n_shards = L + 1;
  for (int l = start; l < L; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    safetensors_file shard;
    const std::vector<float> attn_norm = load_f32(wf, source, g + "attn_norm.weight", {d});
    const std::vector<float> ffn_norm = load_f32(wf, source, g + "ffn_norm.weight", {d});
    shard.add(h + "input_layernorm.weight", "F16", {d}, to_f16(attn_norm));
    shard.add(h + "post_attention_layernorm.weight", "F16", {d}, to_f16(ffn_norm));
    const uint64_t seed = 4ull * l;
    auto lin = [&](const std::string& gname, int out, int in, int permute_heads) {
      std::vector<float> w = load_f32(wf, source, g + gname + ".weight", {out, in});
      if (permute_heads) w = unpermute_rows(w, permute_heads, hd, in);
      return transpose(w, out, in);  // [in][out]
    };
    auto quant = [&](const std::string& key, const std::vector<float>& w, int in, int out,
                     const exl3::prepared_hessian& H, uint64_t sd, uint64_t stream) {
      auto wh = st.add_linear(shard, h + key, w, in, out, H, sd, stream, r.bits, true);
      bar.tick(h + key);
      return wh;
    };
    // Attention: q, k, v share the input and its Hessian.
    std::vector<float> xn = cal.normed(attn_norm, hp.rms_eps);
    auto H = cal.hessian(xn, d, seed);
    const auto wq = quant("self_attn.q_proj", lin("attn_q", nh * hd, d, nh), d, nh * hd, H, seed, 1);
    const auto wk = quant("self_attn.k_proj", lin("attn_k", nkv * hd, d, nkv), d, nkv * hd, H, seed, 2);
    const auto wv = quant("self_attn.v_proj", lin("attn_v", nkv * hd, d, 0), d, nkv * hd, H, seed, 3);
    std::vector<float> att = cal.attention(xn, wq, wk, wv, hp, r.threads);
    H = cal.hessian(att, nh * hd, seed + 1);
    const auto wo = quant("self_attn.o_proj", lin("attn_output", d, nh * hd, 0), nh * hd, d, H, seed + 1, 1);
    cal.add_linear(att, nh * hd, wo, d, r.threads);
    // MLP: gate and up share the input.
    xn = cal.normed(ffn_norm, hp.rms_eps);
    H = cal.hessian(xn, d, seed + 2);
    const auto wg = quant("mlp.gate_proj", lin("ffn_gate", hp.ffn, d, 0), d, hp.ffn, H, seed + 2, 1);
    const auto wu = quant("mlp.up_proj", lin("ffn_up", hp.ffn, d, 0), d, hp.ffn, H, seed + 2, 2);
    std::vector<float> act = cal.mlp_act(xn, wg, wu, d, hp.ffn, r.threads);
    H = cal.hessian(act, hp.ffn, seed + 3);
    const auto wdn = quant("mlp.down_proj", lin("ffn_down", d, hp.ffn, 0), hp.ffn, d, H, seed + 3, 1);
    cal.add_linear(act, hp.ffn, wdn, d, r.threads);
    shard.write(r.out_dir / shard_name(l + 1, n_shards));
    save_progress(r.out_dir, settings, l + 1, st, &cal);
  }

  // Embeddings, final norm, lm_head.
  safetensors_file last;
  const std::vector<float> embd = load_f32(wf, source, "token_embd.weight", {hp.vocab, d});
  const std::vector<float> onorm = load_f32(wf, source, "output_norm.weight", {d});
  last.add("model.embed_tokens.weight", "F16", {hp.vocab, d}, to_f16(embd));
  last.add("model.norm.weight", "F16", {d}, to_f16(onorm));
  const std::vector<float> head = tied ? embd : load_f32(wf, source, "output.weight", {hp.vocab, d});
  const auto H = r.head_bits == 16 ? exl3::prepared_hessian{} : cal.hessian(cal.normed(onorm, hp.rms_eps), d, 4ull * L);
  rep.head = add_head(st, last, head, hp.vocab, d, tied, H, 4ull * L);
  bar.tick("lm_head");
  last.write(r.out_dir / shard_name(n_shards, n_shards));

  // Tokenizer, index, configs.
  write_json(r.out_dir / "tokenizer.json", tokenizer_json(meta));
  write_json(r.out_dir / "tokenizer_config.json", tokenizer_config(meta, hp.context));
  write_json(r.out_dir / "generation_config.json", generation_config(meta));
  finish_run(r, settings, st, n_shards, llama_config(meta, hp, true), rep);  // §2.2: tie forced true when the key exists
  return rep;
}

}  // namespace tandem::quantize
