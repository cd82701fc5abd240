#include "llama_hparams.hpp"

#include "tandem/error.hpp"

namespace tandem {
namespace {

int64_t required_int(const model_metadata& m, const std::string& key, const std::string& file) {
  auto v = m.get_int(key);
  if (!v) throw model_error(file, "metadata key " + key + " is missing");
  if (*v <= 0 || *v > (1LL << 31)) throw model_error(file, key + " is out of range");
  return *v;
}

}  // namespace

llama_hparams llama_hparams::from_metadata(const model_metadata& meta, const std::string& file) {
  llama_hparams h;
  auto arch = meta.get_string("general.architecture");
  if (!arch) throw model_error(file, "metadata key general.architecture is missing");
  if (*arch != "llama")
    throw model_error(file, "architecture '" + *arch + "' is not supported (supported: llama)");
  h.arch = *arch;
  const std::string p = h.arch + ".";
  h.n_layers = static_cast<int>(required_int(meta, p + "block_count", file));
  h.hidden = static_cast<int>(required_int(meta, p + "embedding_length", file));
  h.ffn = static_cast<int>(required_int(meta, p + "feed_forward_length", file));
  h.n_heads = static_cast<int>(required_int(meta, p + "attention.head_count", file));
  h.n_kv_heads = meta.get_int(p + "attention.head_count_kv").value_or(h.n_heads);
  h.context = required_int(meta, p + "context_length", file);
  if (auto kl = meta.get_int(p + "attention.key_length")) h.head_dim = static_cast<int>(*kl);
  else h.head_dim = h.hidden / h.n_heads;
  h.rope_dims = static_cast<int>(meta.get_int(p + "rope.dimension_count").value_or(h.head_dim));
  h.rms_eps = static_cast<float>(meta.get_number(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  h.rope_theta = static_cast<float>(meta.get_number(p + "rope.freq_base").value_or(10000.0));
  if (auto v = meta.get_int(p + "vocab_size")) h.vocab = static_cast<int>(*v);
  else if (auto* toks = meta.get_strings("tokenizer.ggml.tokens")) h.vocab = static_cast<int>(toks->size());
  else throw model_error(file, "vocabulary size unknown (no vocab_size, no tokenizer.ggml.tokens)");

  if (h.n_kv_heads <= 0 || h.n_heads % h.n_kv_heads != 0)
    throw model_error(file, "head_count must be a multiple of head_count_kv");
  if (h.head_dim <= 0 || h.head_dim % 2 != 0 || h.rope_dims > h.head_dim || h.rope_dims % 2 != 0)
    throw model_error(file, "inconsistent head dimension / rope dimension");
  return h;
}

}  // namespace tandem
