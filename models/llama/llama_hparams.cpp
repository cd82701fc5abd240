#include "llama_hparams.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string_view>

#include "tandem/error.hpp"

namespace tandem {
namespace {

// Sane bounds, far above any released model and far below where a count would overflow an
// int or a size computed from it (layers x hidden, heads x head_dim, vocab x hidden).
constexpr int64_t max_layers = 4096;
constexpr int64_t max_width = int64_t{1} << 20;     // embedding and feed-forward lengths
constexpr int64_t max_heads = 4096;
constexpr int64_t max_head_dim = 4096;
constexpr int64_t max_vocab = int64_t{1} << 24;
constexpr int64_t max_context = int64_t{1} << 27;   // 128 Mi tokens

int64_t bounded(const std::string& key, int64_t v, int64_t hi, const std::string& file) {
  if (v <= 0 || v > hi)
    throw model_error(file, fmt::format("{} = {} is out of range (1..{})", key, v, hi));
  return v;
}

int64_t required_int(const model_metadata& m, const std::string& key, int64_t hi, const std::string& file) {
  auto v = m.get_int(key);
  if (!v) throw model_error(file, "metadata key " + key + " is missing");
  return bounded(key, *v, hi, file);
}

int64_t optional_int(const model_metadata& m, const std::string& key, int64_t fallback, int64_t hi,
                     const std::string& file) {
  auto v = m.get_int(key);
  return v ? bounded(key, *v, hi, file) : fallback;
}

// N of a tensor named "blk.N.<rest>", or -1.
int64_t block_index(std::string_view name) {
  if (!name.starts_with("blk.")) return -1;
  name.remove_prefix(4);
  int64_t n = 0;
  size_t i = 0;
  for (; i < name.size() && i < 10 && name[i] >= '0' && name[i] <= '9'; ++i) n = n * 10 + (name[i] - '0');
  return i > 0 && i < name.size() && name[i] == '.' ? n : -1;
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
  h.n_layers = static_cast<int>(required_int(meta, p + "block_count", max_layers, file));
  h.hidden = static_cast<int>(required_int(meta, p + "embedding_length", max_width, file));
  h.ffn = static_cast<int>(required_int(meta, p + "feed_forward_length", max_width, file));
  h.n_heads = static_cast<int>(required_int(meta, p + "attention.head_count", max_heads, file));
  h.n_kv_heads = static_cast<int>(optional_int(meta, p + "attention.head_count_kv", h.n_heads, max_heads, file));
  h.context = required_int(meta, p + "context_length", max_context, file);
  h.head_dim = static_cast<int>(optional_int(meta, p + "attention.key_length", h.hidden / h.n_heads, max_head_dim, file));
  h.rope_dims = static_cast<int>(optional_int(meta, p + "rope.dimension_count", h.head_dim, max_head_dim, file));
  h.rms_eps = static_cast<float>(meta.get_number(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  h.rope_theta = static_cast<float>(meta.get_number(p + "rope.freq_base").value_or(10000.0));
  if (auto v = meta.get_int(p + "vocab_size")) h.vocab = static_cast<int>(bounded(p + "vocab_size", *v, max_vocab, file));
  else if (auto* toks = meta.get_strings("tokenizer.ggml.tokens"))
    h.vocab = static_cast<int>(bounded("tokenizer.ggml.tokens (count)", static_cast<int64_t>(toks->size()), max_vocab, file));
  else throw model_error(file, "vocabulary size unknown (no vocab_size, no tokenizer.ggml.tokens)");
  if (h.head_dim <= 0)
    throw model_error(file, fmt::format("{}attention.head_count ({}) exceeds {}embedding_length ({})", p, h.n_heads, p, h.hidden));
  if (!(h.rms_eps > 0) || !(h.rope_theta > 0))
    throw model_error(file, p + "attention.layer_norm_rms_epsilon and " + p + "rope.freq_base must be positive");

  if (h.n_heads % h.n_kv_heads != 0)
    throw model_error(file, fmt::format("{0}attention.head_count ({1}) must be a multiple of {0}attention.head_count_kv ({2})",
                                        p, h.n_heads, h.n_kv_heads));
  if (h.head_dim % 2 != 0 || h.rope_dims > h.head_dim || h.rope_dims % 2 != 0)
    throw model_error(file, fmt::format("inconsistent head dimension ({}) / {}rope.dimension_count ({})", h.head_dim, p,
                                        h.rope_dims));
  return h;
}

llama_hparams llama_hparams::from_weights(const weight_format& w, const std::string& file) {
  llama_hparams h = from_metadata(w.meta(), file);
  const std::string p = h.arch + ".";
  int64_t blocks = 0;
  for (const tensor_info& t : w.tensors()) blocks = std::max(blocks, block_index(t.name) + 1);
  if (blocks != h.n_layers)
    throw model_error(file, fmt::format("{}block_count = {} but the tensor table has {} blocks (blk.0 .. blk.{})", p,
                                        h.n_layers, blocks, blocks - 1));
  const tensor_info* embd = w.find("token_embd.weight");
  if (!embd) throw model_error(file, "tensor token_embd.weight is missing");
  const std::vector<int64_t> want{h.vocab, h.hidden};
  if (embd->shape != want)
    throw model_error(file, fmt::format("token_embd.weight is [{}] but {}embedding_length = {} and the vocabulary has "
                                        "{} tokens", fmt::join(embd->shape, ", "), p, h.hidden, h.vocab));
  return h;
}

}  // namespace tandem
