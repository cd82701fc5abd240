#pragma once
// Shared by weights.exl3 and weights.safetensors (plugins/hf_common): a Hugging Face fast
// tokenizer (tokenizer.json + tokenizer_config.json, chat_template.jinja when present) as the
// GGUF-style metadata tandem::tokenizer::from_metadata reads, in the form llama.cpp's
// converter writes for a byte-level BPE model:
//
//   tokenizer.ggml.model          string   "gpt2"
//   tokenizer.ggml.pre            string   "gpt2", "smollm", "glm4" or "hf" (see below)
//   tokenizer.ggml.tokens         string[] id -> token text; holes are "[PAD<id>]"
//   tokenizer.ggml.token_type     int[]    1 normal, 3 control (special added token),
//                                          4 user defined (other added token), 5 unused (hole)
//   tokenizer.ggml.merges         string[] "left right", in rank order
//   tokenizer.ggml.{bos,eos,unknown,padding}_token_id  int (when known)
//   tokenizer.ggml.add_bos_token / add_eos_token       bool (when tokenizer_config.json says)
//   tokenizer.chat_template       string   (chat_template.jinja wins over tokenizer_config.json)
//   tokenizer.hf.pre_regex        string[] only for Split-based pre-tokenizers (below)
//   tokenizer.hf.eog_token_ids    int[]    only when tokenizer_ids::eog is not empty
//
// The pre-tokenizer is mapped by its structure: ByteLevel(use_regex) alone is "gpt2";
// Sequence[Digits(individual_digits), ByteLevel(use_regex)] is "smollm"; any other
// Sequence of Split(Regex or String, behavior Isolated, invert false) and Digits steps
// followed by one ByteLevel becomes tokenizer.hf.pre_regex: one pattern per step, in
// tokenizers' (Oniguruma) syntax, each splitting every piece of the step before (a final
// ByteLevel(use_regex true) adds GPT-2's pattern as the last step). Its name is "glm4" when
// the patterns are GLM-4's, else "hf". Anything else -- a model other than BPE, a
// normalizer, a decoder other than ByteLevel, other pre-tokenizer steps, added tokens that
// strip or match single words, BPE dropout / byte fallback / ignore_merges / subword affixes
// -- is a model_error naming tokenizer.json, never a silent mis-tokenization.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tandem/weight_format.hpp"

namespace tandem::hf {

// What the conversion takes from the model's config files.
struct tokenizer_ids {
  // config.json's vocab_size: the token list is padded to it (an error when the tokenizer
  // has more ids). 0: the tokenizer's own size.
  int64_t vocab_size = 0;
  // Used when tokenizer_config.json names no such token (or one not in the vocab).
  std::optional<int64_t> bos, eos, pad;
  // Every id that ends generation (generation_config.json's eos_token_id list), written as
  // tokenizer.hf.eog_token_ids when not empty; each must lie inside the vocab.
  std::vector<int64_t> eog;
  std::filesystem::path eog_source;  // the file `eog` came from, for messages
};

// Reads `dir`/tokenizer.json (required), tokenizer_config.json and chat_template.jinja
// (optional) into `meta`. Throws model_error naming the file at fault.
void read_hf_tokenizer(const std::filesystem::path& dir, const tokenizer_ids& ids, model_metadata& meta);

// The Split pattern of GLM-4 / GLM-5 tokenizer.json files (llama.cpp's pre-type "glm4").
extern const char* const glm4_pattern;

}  // namespace tandem::hf
