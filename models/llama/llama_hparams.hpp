#pragma once
// Hyperparameters of a llama-architecture model, read from GGUF-style metadata.
#include <cstdint>
#include <string>

#include "tandem/weight_format.hpp"

namespace tandem {

struct llama_hparams {
  std::string arch;      // metadata prefix ("llama")
  int n_layers = 0;
  int hidden = 0;
  int ffn = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  int64_t context = 0;   // trained context length
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dims = 0;

  // Throws model_error when a required key is missing, out of its sane bounds (see
  // llama_hparams.cpp) or the shapes are inconsistent; the message names the key.
  static llama_hparams from_metadata(const model_metadata& meta, const std::string& file);
  // from_metadata, then the counts checked against the tensor table (block_count against
  // the blk.N tensors, vocab / embedding_length against token_embd.weight), so that a file
  // that lies in its metadata is refused before anything is allocated for it.
  static llama_hparams from_weights(const weight_format& w, const std::string& file);
};

}  // namespace tandem
