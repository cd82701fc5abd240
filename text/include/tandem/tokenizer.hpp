#pragma once
// tokenizer: GPT-2-style byte-level BPE built from a model's metadata (GGUF keys
// tokenizer.ggml.*), matching Hugging Face `tokenizers` on the same vocab and merges.
//
//   auto tok = tandem::tokenizer::from_metadata(wf->meta(), "model.gguf");
//   std::vector<int32_t> ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
//   std::string text = tok.decode(ids);              // == the input (lossless)
//   if (tok.is_end_of_generation(next_id)) ...       // stop generating
//
// Encoding: special tokens (token_type CONTROL / USER_DEFINED) are cut out of the text
// first (leftmost-longest); each stretch between them is pre-tokenized with the regex set
// that tokenizer.ggml.pre names or tokenizer.hf.pre_regex holds (PCRE2, UTF-8 + UCP, JIT
// when available), mapped to GPT-2's byte alphabet and merged by rank. A byte whose symbol
// is not in the vocab is dropped, as `tokenizers` does when the BPE model has no unk token
// (SmolLM2 lacks 21 byte symbols: control bytes such as 0x04 and bytes that never occur in
// valid UTF-8).
//
// Decoding: each token's bytes are concatenated and the result is made valid UTF-8 by
// replacing each maximal invalid subpart with U+FFFD (as Rust's from_utf8_lossy does).
//
// A tokenizer is immutable after construction; copies share the tables and every const
// method may be called from several threads at once.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.hpp"

namespace tandem {

class model_metadata;

// GGUF's token types (llama.cpp's llama_token_type).
enum class token_type : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

class TANDEM_API tokenizer {
 public:
  // Builds from tokenizer.ggml.{model,pre,tokens,token_type,merges,bos_token_id,
  // eos_token_id,unknown_token_id,padding_token_id,eot_token_id,eom_token_id,add_bos_token},
  // plus two keys of tandem's own that Hugging Face directories set (hf_common):
  //   tokenizer.hf.pre_regex (string[]): the pre-tokenizer as a chain of tokenizer.json
  //     Split(Isolated) patterns in tokenizers' (Oniguruma) syntax; when present it replaces
  //     the rules tokenizer.ggml.pre names (which is then only a label);
  //   tokenizer.hf.eog_token_ids (int[]): more end-of-generation ids (generation_config.json's
  //     eos_token_id list).
  // Throws model_error (naming `source` and the key) when keys are missing, inconsistent
  // or out of range, when the model is not "gpt2" BPE, or when the pre-tokenizer is unknown
  // (or a pattern does not compile).
  static tokenizer from_metadata(const model_metadata& meta,
                                 std::string_view source = "model metadata");

  // Token ids of `text` (must be valid UTF-8, else tandem::error with the byte offset).
  // With parse_special false, special-token strings are encoded as plain text. Never adds
  // BOS: callers that honour add_bos() prepend bos() themselves.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // A byte range [begin, end) of an encode() input.
  struct byte_range {
    size_t begin = 0, end = 0;
  };
  // encode(text), except that no CONTROL token is cut out where its text would overlap one of
  // `literal` (sorted, disjoint, inside text; else tandem::error): there the control-token
  // text is encoded as plain text. USER_DEFINED tokens are still cut out inside a range (as
  // Hugging Face's split_special_tokens and llama.cpp's parse_special=false keep them). Text
  // between the tokens cut out is pre-tokenized whole, ranges or not, so a range that holds no
  // special-token text changes nothing. Chat prompts use it to keep message content from
  // forging turn markers (tandem/chat_prompt.hpp).
  std::vector<int32_t> encode(std::string_view text, std::span<const byte_range> literal) const;
  // The first CONTROL token whose text occurs anywhere in `text` (leftmost, then longest), or
  // nullopt: whether text could turn into a control token next to anything.
  std::optional<int32_t> find_control_text(std::string_view text) const;
  // Text of `ids`, always valid UTF-8 (see above). skip_special drops CONTROL tokens.
  // Throws tandem::error for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // Raw bytes of one token: its vocab text mapped back through GPT-2's byte alphabet (a
  // token holding a character outside that alphabet, e.g. a special token, is its UTF-8).
  std::string token_bytes(int32_t id) const;
  // The token as stored in the vocab (byte-level alphabet, e.g. "Ġthe").
  const std::string& token_text(int32_t id) const;
  // Id of the vocab entry whose stored text is exactly `token_text`.
  std::optional<int32_t> find(std::string_view token_text) const;

  int32_t vocab_size() const;
  int32_t bos() const;  // -1 if none
  int32_t eos() const;  // -1 if none
  int32_t unk() const;  // -1 if none (GGUF's id; encoding never emits it, see above)
  int32_t pad() const;  // -1 if none
  bool add_bos() const;  // tokenizer.ggml.add_bos_token, false when absent
  const std::string& pre() const;  // the pre-tokenizer name in use ("smollm", "gpt2", "glm4", "hf", ...)

  token_type type(int32_t id) const;
  bool is_special(int32_t id) const;  // CONTROL or USER_DEFINED
  bool is_control(int32_t id) const;  // CONTROL: what decode(skip_special) drops
  // eos, eot, eom, tokenizer.hf.eog_token_ids, and whichever of <|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|>,
  // <|eom_id|>, <end_of_turn>, <|end|>, <|return|>, </s> are CONTROL tokens of this vocab.
  bool is_end_of_generation(int32_t id) const;
  const std::vector<int32_t>& end_of_generation_ids() const;

  struct impl;

 private:
  explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<const impl> impl_;
};

}  // namespace tandem
