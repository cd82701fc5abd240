// tokenizer::from_metadata: validates GGUF's tokenizer.ggml.* keys and builds the tables.
#include <array>
#include <limits>
#include <optional>

#include "byte_level.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"
#include "tokenizer_impl.hpp"

namespace tandem {
namespace {

constexpr std::string_view key_model = "tokenizer.ggml.model";
constexpr std::string_view key_pre = "tokenizer.ggml.pre";
constexpr std::string_view key_tokens = "tokenizer.ggml.tokens";
constexpr std::string_view key_types = "tokenizer.ggml.token_type";
constexpr std::string_view key_merges = "tokenizer.ggml.merges";
// tandem's own keys for what GGUF has no key for (set by hf_common's tokenizer.json reader).
constexpr std::string_view key_pre_regex = "tokenizer.hf.pre_regex";
constexpr std::string_view key_eog_ids = "tokenizer.hf.eog_token_ids";

// Strings that end a turn in the chat formats tandem meets, when the vocab has them as
// CONTROL tokens.
constexpr std::array<std::string_view, 9> end_of_turn_texts = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
    "<end_of_turn>", "<|end|>", "<|return|>", "</s>"};

class loader {
 public:
  loader(const model_metadata& meta, std::string_view source) : meta_(meta), source_(source) {}
  std::shared_ptr<tokenizer::impl> load();

 private:
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw model_error(source_, std::string(key) + ": " + what);
  }
  // The metadata getters throw model_error("metadata", ...) for a wrong type; restate
  // those with the source so the user learns which file is bad.
  template <class F>
  auto get(std::string_view key, F&& getter) const {
    try {
      return getter(key);
    } catch (const model_error& e) {
      fail(key, e.what());
    }
  }
  std::vector<token_type> read_types(size_t n) const;
  detail::bpe_merger read_merges(const std::vector<std::string>& texts,
                                 const std::unordered_map<std::string_view, int32_t>& by_text) const;
  int32_t read_id(std::string_view key, int32_t n) const;
  void fill_ids(tokenizer::impl& t) const;
  static void fill_end_of_generation(tokenizer::impl& t, std::initializer_list<int32_t> extra);

  const model_metadata& meta_;
  std::string source_;
};

std::vector<token_type> loader::read_types(size_t n) const {
  const auto* types = get(key_types, [&](auto k) { return meta_.get_ints(k); });
  std::vector<token_type> out(n, token_type::normal);  // absent: every token is normal
  if (!types) return out;
  if (types->size() != n) {
    fail(key_types, "has " + std::to_string(types->size()) + " entries but " +
                        std::string(key_tokens) + " has " + std::to_string(n));
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = (*types)[i];
    if (v < 0 || v > static_cast<int64_t>(token_type::byte)) {
      fail(key_types, "entry " + std::to_string(i) + " is " + std::to_string(v) + ", not 0-6");
    }
    out[i] = static_cast<token_type>(v);
  }
  return out;
}

detail::bpe_merger loader::read_merges(
    const std::vector<std::string>& texts,
    const std::unordered_map<std::string_view, int32_t>& by_text) const {
  const auto* merges = get(key_merges, [&](auto k) { return meta_.get_strings(k); });
  if (!merges) fail(key_merges, "is missing (a gpt2 BPE vocab needs its merges)");
  auto id_of = [&](size_t rank, std::string_view part) {
    auto it = by_text.find(part);
    if (it == by_text.end()) {
      fail(key_merges, "entry " + std::to_string(rank) + " '" + (*merges)[rank] + "' needs '" +
                           std::string(part) + "', which is not in the vocab");
    }
    return it->second;
  };
  std::unordered_map<uint64_t, detail::bpe_merger::merge> table;
  table.reserve(merges->size());
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const std::string& m = (*merges)[rank];
    const size_t space = m.find(' ');
    if (space == 0 || space == std::string::npos || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos) {
      fail(key_merges, "entry " + std::to_string(rank) + " '" + m + "' is not 'left right'");
    }
    const int32_t left = id_of(rank, std::string_view(m).substr(0, space));
    const int32_t right = id_of(rank, std::string_view(m).substr(space + 1));
    const int32_t result = id_of(rank, texts[left] + texts[right]);
    // A repeated pair takes its last rank, as `tokenizers` does.
    table[detail::bpe_merger::pair_key(left, right)] = {static_cast<int32_t>(rank), result};
  }
  std::array<int32_t, 256> byte_ids{};
  const auto& alphabet = detail::byte_alphabet::get();
  for (int b = 0; b < 256; ++b) {
    auto it = by_text.find(alphabet.symbol(static_cast<uint8_t>(b)));
    byte_ids[b] = it == by_text.end() ? -1 : it->second;
  }
  return detail::bpe_merger(byte_ids, std::move(table));
}

int32_t loader::read_id(std::string_view key, int32_t n) const {
  const auto v = get(key, [&](auto k) { return meta_.get_int(k); });
  if (!v) return -1;
  if (*v < 0 || *v >= n) {
    fail(key, "is " + std::to_string(*v) + ", outside the vocab [0, " + std::to_string(n) + ")");
  }
  return static_cast<int32_t>(*v);
}

void loader::fill_ids(tokenizer::impl& t) const {
  const auto n = static_cast<int32_t>(t.texts.size());
  t.bos = read_id("tokenizer.ggml.bos_token_id", n);
  t.eos = read_id("tokenizer.ggml.eos_token_id", n);
  t.unk = read_id("tokenizer.ggml.unknown_token_id", n);
  t.pad = read_id("tokenizer.ggml.padding_token_id", n);
  const int32_t eot = read_id("tokenizer.ggml.eot_token_id", n);
  const int32_t eom = read_id("tokenizer.ggml.eom_token_id", n);
  t.add_bos = get("tokenizer.ggml.add_bos_token",
                  [&](auto k) { return meta_.get_bool(k); }).value_or(false);
  fill_end_of_generation(t, {t.eos, eot, eom});
  if (const auto* eog = get(key_eog_ids, [&](auto k) { return meta_.get_ints(k); })) {
    for (size_t i = 0; i < eog->size(); ++i) {
      const int64_t id = (*eog)[i];
      if (id < 0 || id >= n) {
        fail(key_eog_ids, "entry " + std::to_string(i) + " is " + std::to_string(id) +
                              ", outside the vocab [0, " + std::to_string(n) + ")");
      }
      if (!t.is_end_of_generation[id]) {
        t.is_end_of_generation[id] = true;
        t.end_of_generation.push_back(static_cast<int32_t>(id));
      }
    }
  }
}

void loader::fill_end_of_generation(tokenizer::impl& t, std::initializer_list<int32_t> extra) {
  t.is_end_of_generation.assign(t.texts.size(), false);
  auto add = [&](int32_t id) {
    if (id < 0 || t.is_end_of_generation[id]) return;
    t.is_end_of_generation[id] = true;
    t.end_of_generation.push_back(id);
  };
  for (int32_t id : extra) add(id);
  for (std::string_view text : end_of_turn_texts) {
    auto it = t.by_text.find(text);
    if (it != t.by_text.end() && t.types[it->second] == token_type::control) add(it->second);
  }
}

std::shared_ptr<tokenizer::impl> loader::load() {
  const auto model = get(key_model, [&](auto k) { return meta_.get_string(k); });
  if (!model) fail(key_model, "is missing");
  if (*model != "gpt2") fail(key_model, "is '" + *model + "'; only 'gpt2' (byte-level BPE) is supported");
  std::optional<detail::pre_tokenizer> pre;
  std::string pre_name;
  if (const auto* patterns = get(key_pre_regex, [&](auto k) { return meta_.get_strings(k); })) {
    // A tokenizer.json's own Split patterns (weights.safetensors / weights.exl3); the name
    // is only a label then.
    pre_name = get(key_pre, [&](auto k) { return meta_.get_string(k); }).value_or("hf");
    try {
      pre = detail::pre_tokenizer::from_hf_patterns(*patterns);
    } catch (const model_error&) {
      throw;
    } catch (const error& e) {
      fail(key_pre_regex, e.what());
    }
  } else {
    pre_name = get(key_pre, [&](auto k) { return meta_.get_string(k); }).value_or("default");
    pre = detail::pre_tokenizer::create(pre_name);
    if (!pre) fail(key_pre, "'" + pre_name + "' is unknown (known: " + detail::pre_tokenizer::known_names() + ")");
  }

  const auto* tokens = get(key_tokens, [&](auto k) { return meta_.get_strings(k); });
  if (!tokens || tokens->empty()) fail(key_tokens, "is missing or empty");
  if (tokens->size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) fail(key_tokens, "is too large");
  std::vector<token_type> types = read_types(tokens->size());
  std::unordered_map<std::string_view, int32_t> by_text;
  by_text.reserve(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i) by_text.emplace((*tokens)[i], static_cast<int32_t>(i));
  detail::bpe_merger bpe = read_merges(*tokens, by_text);

  auto t = std::make_shared<tokenizer::impl>(*tokens, std::move(types), std::move(bpe), std::move(*pre));
  t->pre_name = pre_name;
  t->by_text.reserve(t->texts.size());
  const auto& alphabet = detail::byte_alphabet::get();
  for (size_t i = 0; i < t->texts.size(); ++i) {
    const std::string& text = t->texts[i];
    t->by_text.emplace(text, static_cast<int32_t>(i));  // emplace: the first duplicate wins
    t->bytes.push_back(alphabet.decode(text).value_or(text));
    if (t->types[i] == token_type::control || t->types[i] == token_type::user_defined) {
      t->specials.add(text, static_cast<int32_t>(i));
      (t->types[i] == token_type::control ? t->controls : t->user_defined).add(text, static_cast<int32_t>(i));
    }
  }
  fill_ids(*t);
  return t;
}

}  // namespace

tokenizer tokenizer::from_metadata(const model_metadata& meta, std::string_view source) {
  return tokenizer(loader(meta, source).load());
}

}  // namespace tandem
