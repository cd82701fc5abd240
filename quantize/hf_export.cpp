// See hf_export.hpp.
#include "hf_export.hpp"

#include <fstream>

#include "tandem/error.hpp"

namespace tandem::quantize {
namespace {

namespace json = boost::json;

std::optional<std::string> token_at(const model_metadata& meta, const char* key) {
  const auto id = meta.get_int(key);
  const auto* toks = meta.get_strings("tokenizer.ggml.tokens");
  if (!id || !toks || *id < 0 || *id >= static_cast<int64_t>(toks->size())) return std::nullopt;
  return (*toks)[static_cast<size_t>(*id)];
}

}  // namespace

json::object llama_config(const model_metadata& meta, const llama_hparams& hp, bool tied) {
  json::object c;
  c["architectures"] = json::array{"LlamaForCausalLM"};
  c["model_type"] = "llama";
  c["hidden_size"] = hp.hidden;
  c["intermediate_size"] = hp.ffn;
  c["num_attention_heads"] = hp.n_heads;
  c["num_key_value_heads"] = hp.n_kv_heads;
  c["num_hidden_layers"] = hp.n_layers;
  c["head_dim"] = hp.head_dim;
  c["vocab_size"] = hp.vocab;
  c["max_position_embeddings"] = hp.context;
  c["rms_norm_eps"] = hp.rms_eps;
  c["rope_theta"] = hp.rope_theta;
  c["hidden_act"] = "silu";
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  c["initializer_range"] = 0.02;
  c["torch_dtype"] = "float16";
  if (auto b = meta.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *b;
  if (auto e = meta.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *e;
  if (auto p = meta.get_int("tokenizer.ggml.padding_token_id")) c["pad_token_id"] = *p;
  c["tie_word_embeddings"] = tied;
  return c;
}

json::object tokenizer_json(const model_metadata& meta) {
  const auto* toks = meta.get_strings("tokenizer.ggml.tokens");
  const auto* merges = meta.get_strings("tokenizer.ggml.merges");
  const auto* types = meta.get_ints("tokenizer.ggml.token_type");
  if (!toks || !merges) throw error("tokenizer.json: the model has no tokenizer.ggml.tokens / merges");
  json::array added;
  json::object vocab;
  for (size_t i = 0; i < toks->size(); ++i) {
    vocab[(*toks)[i]] = static_cast<int64_t>(i);
    const int64_t ty = types && i < types->size() ? (*types)[i] : 1;
    if (ty == 3 || ty == 4)  // CONTROL / USER_DEFINED: added tokens
      added.push_back(json::object{{"id", static_cast<int64_t>(i)}, {"content", (*toks)[i]},
                                   {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                   {"normalized", false}, {"special", ty == 3}});
  }
  json::array m;
  for (const auto& s : *merges) m.push_back(json::string(s));
  const json::object byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false},
                                {"trim_offsets", true}, {"use_regex", true}};
  json::value pre = byte_level;
  if (meta.get_string("tokenizer.ggml.pre").value_or("") == "smollm")  // digits split one by one
    pre = json::object{{"type", "Sequence"},
                       {"pretokenizers", json::array{json::object{{"type", "Digits"}, {"individual_digits", true}},
                                                     byte_level}}};
  json::object t;
  t["version"] = "1.0";
  t["truncation"] = nullptr;
  t["padding"] = nullptr;
  t["added_tokens"] = std::move(added);
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = std::move(pre);
  t["post_processor"] = byte_level;
  t["decoder"] = byte_level;
  t["model"] = json::object{{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                            {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                            {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                            {"vocab", std::move(vocab)}, {"merges", std::move(m)}};
  return t;
}

json::object tokenizer_config(const model_metadata& meta, int64_t max_len) {
  json::object c;
  c["tokenizer_class"] = "GPT2Tokenizer";
  c["model_max_length"] = max_len;
  c["clean_up_tokenization_spaces"] = false;
  c["add_bos_token"] = meta.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  if (auto b = token_at(meta, "tokenizer.ggml.bos_token_id")) c["bos_token"] = *b;
  if (auto e = token_at(meta, "tokenizer.ggml.eos_token_id")) c["eos_token"] = *e;
  if (auto u = token_at(meta, "tokenizer.ggml.unknown_token_id")) c["unk_token"] = *u;
  if (auto p = token_at(meta, "tokenizer.ggml.padding_token_id")) c["pad_token"] = *p;
  if (auto t = meta.get_string("tokenizer.chat_template")) c["chat_template"] = *t;
  return c;
}

json::object generation_config(const model_metadata& meta) {
  json::object c{{"_from_model_config", true}};
  if (auto b = meta.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *b;
  if (auto e = meta.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *e;
  return c;
}

void write_json(const std::filesystem::path& path, const json::value& v) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw error("cannot create " + path.string());
  if (v.is_object()) {
    f << "{\n";
    bool first = true;
    for (const auto& kv : v.as_object()) {
      f << (first ? "" : ",\n") << "  " << json::serialize(json::value(kv.key())) << ": " << json::serialize(kv.value());
      first = false;
    }
    f << "\n}\n";
  } else {
    f << json::serialize(v) << "\n";
  }
  if (!f) throw error("write to " + path.string() + " failed");
}

}  // namespace tandem::quantize
