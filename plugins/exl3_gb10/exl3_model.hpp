#pragma once
// Internal to weights.exl3: an exllamav3 (EXL3) model directory. Each quantized linear
// (`{key}.trellis` with its companions) is one tensor_info `{key}.weight` of dtype::opaque
// whose data is an exl3::exl3_tensor descriptor (tandem_exl3/tensor.hpp, tagged "EXL3");
// other tensors keep their stored dtype.
//
// glm_moe_dsa: every tensor keeps its Hugging Face name (routed experts per expert,
// model.layers.L.mlp.experts.E.{gate,up,down}_proj, as exllamav3 writes them) and the
// metadata is weights.safetensors' (hf_config.hpp). A quantized linear's shape is its
// padded one {n, k}; the model trims it to the shape it expects.
//
// llama: as tandem sees a GGUF llama model, the same metadata keys and tensor names:
// Names: model.embed_tokens.weight -> token_embd.weight, model.norm.weight ->
// output_norm.weight, lm_head -> output.weight, model.layers.N.{input_layernorm,
// post_attention_layernorm}.weight -> blk.N.{attn_norm,ffn_norm}.weight,
// model.layers.N.self_attn.{q,k,v,o}_proj -> blk.N.attn_{q,k,v,output}.weight,
// model.layers.N.mlp.{gate,up,down}_proj -> blk.N.ffn_{gate,up,down}.weight; other
// tensors keep their Hugging Face names.
//
// RoPE: tandem's llama engine rotates adjacent pairs, which needs q/k output rows in the
// order llama.cpp's converter permutes them into; Hugging Face checkpoints keep rotate-half
// order. Plain q/k tensors are copied permuted; quantized ones carry the permutation as the
// descriptor's out_perm (applied to the linear's outputs).
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hf_config.hpp"
#include "safetensors_file.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/tensor.hpp"

namespace tandem::exl3_plugin {

class exl3_model {
 public:
  // Throws model_error naming the file or tensor that is wrong.
  explicit exl3_model(const std::filesystem::path& dir);

  const model_metadata& meta() const { return meta_; }
  std::span<const tensor_info> tensors() const { return tensors_; }
  const tensor_info* find(std::string_view name) const;

 private:
  void add_quantized(const std::string& key, const std::string& out_name);
  void add_plain(const safetensors::tensor_entry& t, const std::string& out_name);
  const int32_t* rope_perm(const std::string& out_name);

  std::filesystem::path dir_;
  std::optional<safetensors::model_files> files_;  // opened after config.json and the tokenizer
  bool hf_names_ = false;  // Hugging Face names and metadata (not llama's GGUF ones)
  llama_config cfg_;
  model_metadata meta_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
  std::deque<exl3::exl3_tensor> descriptors_;
  std::deque<std::vector<uint16_t>> owned16_;   // converted suh/svh/bias, permuted rows
  std::deque<std::vector<int32_t>> perms_;
};

// The GGUF name of a Hugging Face tensor or module key ("" when it has none).
std::string gguf_name(const std::string& hf_name);

}  // namespace tandem::exl3_plugin
