// tokenizer.json / tokenizer_config.json -> the tokenizer.ggml.* keys llama.cpp writes for
// a byte-level BPE model, so tandem's tokenizer reads a Hugging Face directory as it reads
// GGUF (see hf_tokenizer.hpp for the keys and the pre-tokenizer mapping).
#include "hf_tokenizer.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include <boost/json.hpp>

#include "hf_json.hpp"
#include "tandem/error.hpp"

namespace tandem::hf {
namespace json = boost::json;

const char* const glm4_pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

namespace {

constexpr int64_t type_normal = 1, type_control = 3, type_user_defined = 4, type_unused = 5;
// Token ids at most: the bound of the llama engine and GGUF reader (2^24); also what keeps a
// config.json vocab_size from sizing the token list absurdly.
constexpr int64_t max_token_ids = int64_t{1} << 24;

// GPT-2's pattern as tokenizers' ByteLevel(use_regex) runs it, in tokenizers' syntax.
constexpr const char* byte_level_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// A literal Split string as a pattern: every character that is not alphanumeric escaped.
std::string quote_literal(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

struct pre_result {
  std::string name;
  std::optional<std::vector<std::string>> patterns;  // set for tokenizer.hf.pre_regex
};

class reader {
 public:
  reader(const std::filesystem::path& dir, const tokenizer_ids& ids, model_metadata& meta)
      : dir_(dir), ids_in_(ids), meta_(meta), file_((dir / "tokenizer.json").string()) {}
  void run();

 private:
  [[noreturn]] void fail(const std::string& what) const { throw model_error(file_, what); }
  void check_model(const json::object& model) const;
  void check_normalizer_decoder(const json::object& root) const;
  void read_vocab(const json::object& model);
  void read_added(const json::object& root);
  void read_merges(const json::object& model);
  pre_result read_pre(const json::object& root) const;
  void read_config();
  int64_t id_of_token(const json::value* v) const;

  std::filesystem::path dir_;
  const tokenizer_ids& ids_in_;
  model_metadata& meta_;
  std::string file_;
  std::vector<std::string> tokens_;
  std::vector<int64_t> types_;
  std::map<std::string, int64_t> ids_;
};

bool is_true(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  return v && v->is_bool() && v->get_bool();
}
bool is_set(const json::object& o, std::string_view key) {  // present, not null, not ""
  const json::value* v = o.if_contains(key);
  return v && !v->is_null() && !(v->is_string() && v->as_string().empty());
}

void reader::check_model(const json::object& model) const {
  if (is_set(model, "dropout") && !(model.at("dropout").is_number() && model.at("dropout").to_number<double>() == 0.0))
    fail("model.dropout is " + json::serialize(model.at("dropout")) + "; BPE dropout is not supported");
  if (is_true(model, "byte_fallback")) fail("model.byte_fallback is true; only byte-level BPE is supported");
  if (is_true(model, "ignore_merges"))
    fail("model.ignore_merges is true; tandem's BPE always merges (not supported)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (is_set(model, k)) fail(std::string("model.") + k + " is set; subword affixes are not supported");
}

void reader::check_normalizer_decoder(const json::object& root) const {
  if (const json::value* n = root.if_contains("normalizer"); n && !n->is_null())
    fail("normalizer " + json::serialize(*n).substr(0, 120) +
         " is not supported (tandem tokenizes the text as given; only a null normalizer)");
  if (const json::value* d = root.if_contains("decoder"); d && !d->is_null()) {
    const json::value* t = d->is_object() ? d->as_object().if_contains("type") : nullptr;
    if (!t || !t->is_string() || t->as_string() != "ByteLevel")
      fail("decoder " + json::serialize(*d).substr(0, 120) + " is not supported (only ByteLevel)");
  }
}

void reader::read_vocab(const json::object& model) {
  const json::value* vocab = model.if_contains("vocab");
  if (!vocab || !vocab->is_object()) fail("model.vocab is not an object");
  int64_t n = ids_in_.vocab_size;
  if (n > max_token_ids)
    throw model_error((dir_ / "config.json").string(), "vocab_size = " + std::to_string(n) + " is more than " +
                                                         std::to_string(max_token_ids) + " token ids");
  for (const auto& kv : vocab->as_object()) {
    if (!kv.value().is_int64() || kv.value().get_int64() < 0 || kv.value().get_int64() >= max_token_ids)
      fail("model.vocab['" + std::string(kv.key()) + "'] is not a token id");
    n = std::max(n, kv.value().get_int64() + 1);
  }
  tokens_.assign(n, std::string());
  types_.assign(n, type_unused);
  for (const auto& kv : vocab->as_object()) {
    const int64_t id = kv.value().get_int64();
    if (types_[id] != type_unused) fail("token id " + std::to_string(id) + " is used twice in model.vocab");
    tokens_[id] = std::string(kv.key());
    types_[id] = type_normal;
    ids_[tokens_[id]] = id;
  }
}

void reader::read_added(const json::object& root) {
  const json::value* added = root.if_contains("added_tokens");
  if (!added || added->is_null()) return;
  if (!added->is_array()) fail("added_tokens is not an array");
  for (const auto& a : added->as_array()) {
    const json::object* o = a.if_object();
    const json::value* id = o ? o->if_contains("id") : nullptr;
    const json::value* content = o ? o->if_contains("content") : nullptr;
    if (!id || !id->is_int64() || id->get_int64() < 0 || id->get_int64() >= max_token_ids || !content ||
        !content->is_string() || content->as_string().empty())
      fail("added_tokens entry " + json::serialize(a) + " needs an id and a content");
    for (const char* k : {"lstrip", "rstrip", "single_word"})
      if (is_true(*o, k))
        fail("added_tokens entry " + json::serialize(a) + " has " + k +
             " true, which tandem's special-token matcher does not do (not supported)");
    const int64_t i = id->get_int64();
    if (i >= static_cast<int64_t>(tokens_.size())) {
      tokens_.resize(i + 1);
      types_.resize(i + 1, type_unused);
    }
    tokens_[i] = std::string(content->as_string());
    types_[i] = is_true(*o, "special") ? type_control : type_user_defined;
    ids_[tokens_[i]] = i;
  }
}

void reader::read_merges(const json::object& model) {
  const json::value* merges = model.if_contains("merges");
  if (!merges || !merges->is_array()) fail("model.merges is not an array");
  std::vector<std::string> out;
  out.reserve(merges->as_array().size());
  for (const auto& m : merges->as_array()) {
    if (m.is_string()) {  // "left right"
      out.emplace_back(m.as_string());
    } else if (m.is_array() && m.as_array().size() == 2 && m.as_array()[0].is_string() &&
               m.as_array()[1].is_string()) {  // ["left", "right"] (tokenizers >= 0.20)
      out.push_back(std::string(m.as_array()[0].as_string()) + " " + std::string(m.as_array()[1].as_string()));
    } else {
      fail("model.merges entry " + json::serialize(m) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  meta_.set("tokenizer.ggml.merges", std::move(out));
}

// The pre-tokenizer by its structure (hf_tokenizer.hpp).
pre_result reader::read_pre(const json::object& root) const {
  const json::value* pre = root.if_contains("pre_tokenizer");
  if (!pre || !pre->is_object()) fail("pre_tokenizer is missing");
  std::vector<const json::object*> steps;
  const json::object& p = pre->as_object();
  const json::value* type = p.if_contains("type");
  if (type && type->is_string() && type->as_string() == "Sequence") {
    const json::value* list = p.if_contains("pretokenizers");
    if (!list || !list->is_array()) fail("pre_tokenizer.pretokenizers is not an array");
    for (const auto& s : list->as_array()) {
      if (!s.is_object()) fail("pre_tokenizer step " + json::serialize(s) + " is not an object");
      steps.push_back(&s.as_object());
    }
  } else {
    steps.push_back(&p);
  }
  const std::string supported =
      " (supported: Split(Regex or String, behavior Isolated, invert false) and "
      "Digits steps, then one ByteLevel)";
  std::vector<std::string> patterns;
  bool individual_digits_only = true;  // every step so far is Digits(individual_digits)
  bool byte_level = false, use_regex = false;
  for (const json::object* s : steps) {
    const json::value* t = s->if_contains("type");
    const std::string name = t && t->is_string() ? std::string(t->as_string()) : "?";
    const std::string text = json::serialize(*s).substr(0, 300);
    if (byte_level) fail("pre_tokenizer step " + text + " comes after ByteLevel" + supported);
    if (name == "ByteLevel") {
      if (is_true(*s, "add_prefix_space"))
        fail("pre_tokenizer step " + text + " has add_prefix_space true (not supported)");
      const json::value* flag = s->if_contains("use_regex");
      use_regex = !flag || (flag->is_bool() && flag->get_bool());
      byte_level = true;
    } else if (name == "Digits") {
      const json::value* flag = s->if_contains("individual_digits");
      const bool individual = !flag || (flag->is_bool() && flag->get_bool());
      individual_digits_only = individual_digits_only && individual;
      patterns.emplace_back(individual ? "\\p{N}" : "\\p{N}+");
    } else if (name == "Split") {
      individual_digits_only = false;
      const json::value* behavior = s->if_contains("behavior");
      if (!behavior || !behavior->is_string() || behavior->as_string() != "Isolated")
        fail("pre_tokenizer step " + text + " has a behavior other than Isolated" + supported);
      if (is_true(*s, "invert")) fail("pre_tokenizer step " + text + " has invert true" + supported);
      const json::value* pat = s->if_contains("pattern");
      const json::object* po = pat ? pat->if_object() : nullptr;
      const json::value* re = po ? po->if_contains("Regex") : nullptr;
      const json::value* str = po ? po->if_contains("String") : nullptr;
      if (re && re->is_string() && !re->as_string().empty()) patterns.emplace_back(re->as_string());
      else if (str && str->is_string() && !str->as_string().empty())
        patterns.push_back(quote_literal(str->as_string()));
      else fail("pre_tokenizer step " + text + " has no Regex or String pattern" + supported);
    } else {
      fail("pre_tokenizer step " + text + " is not supported" + supported);
    }
  }
  if (!byte_level) fail("pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
  if (use_regex && patterns.empty()) return {"gpt2", std::nullopt};
  if (use_regex && patterns.size() == 1 && individual_digits_only) return {"smollm", std::nullopt};
  if (use_regex) patterns.emplace_back(byte_level_pattern);
  const bool glm4 = patterns.size() == 1 && patterns[0] == glm4_pattern;
  return {glm4 ? "glm4" : "hf", std::move(patterns)};
}

int64_t reader::id_of_token(const json::value* v) const {
  if (!v || v->is_null()) return -1;
  const json::value* text = v;
  if (v->is_object()) text = v->as_object().if_contains("content");  // AddedToken form
  if (!text || !text->is_string()) return -1;
  auto it = ids_.find(std::string(text->as_string()));
  return it == ids_.end() ? -1 : it->second;
}

void reader::read_config() {
  std::error_code ec;
  const auto tc_path = dir_ / "tokenizer_config.json";
  json::value tc = std::filesystem::exists(tc_path, ec) ? read_json(tc_path) : json::object();
  const json::object& t = tc.as_object();
  const auto n = static_cast<int64_t>(tokens_.size());
  auto set_id = [&](const char* key, const char* tc_key, std::optional<int64_t> fallback) {
    int64_t id = id_of_token(t.if_contains(tc_key));
    if (id < 0 && fallback && *fallback < n) id = *fallback;
    if (id >= 0) meta_.set(key, id);
  };
  set_id("tokenizer.ggml.bos_token_id", "bos_token", ids_in_.bos);
  set_id("tokenizer.ggml.eos_token_id", "eos_token", ids_in_.eos);
  set_id("tokenizer.ggml.unknown_token_id", "unk_token", std::nullopt);
  set_id("tokenizer.ggml.padding_token_id", "pad_token", ids_in_.pad);
  if (const json::value* b = t.if_contains("add_bos_token"); b && b->is_bool())
    meta_.set("tokenizer.ggml.add_bos_token", b->get_bool());
  if (const json::value* b = t.if_contains("add_eos_token"); b && b->is_bool())
    meta_.set("tokenizer.ggml.add_eos_token", b->get_bool());
  // The chat template: chat_template.jinja (newer transformers) wins over the config field.
  const auto jinja = dir_ / "chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) {
    meta_.set("tokenizer.chat_template", read_text(jinja));
    return;
  }
  const json::value* ct = t.if_contains("chat_template");
  if (ct && ct->is_string()) {
    meta_.set("tokenizer.chat_template", std::string(ct->as_string()));
  } else if (ct && ct->is_array()) {  // [{"name": "default", "template": ...}, ...]
    for (const auto& e : ct->as_array()) {
      const json::object* o = e.if_object();
      const json::value* name = o ? o->if_contains("name") : nullptr;
      const json::value* tmpl = o ? o->if_contains("template") : nullptr;
      if (name && name->is_string() && name->as_string() == "default" && tmpl && tmpl->is_string())
        meta_.set("tokenizer.chat_template", std::string(tmpl->as_string()));
    }
  }
}

void reader::run() {
  const json::value root = read_json(dir_ / "tokenizer.json");
  const json::object& r = root.as_object();
  const json::value* model = r.if_contains("model");
  if (!model || !model->is_object()) fail("model is missing");
  const json::value* type = model->as_object().if_contains("type");
  if (!type || !type->is_string() || type->as_string() != "BPE")
    fail("model.type is not \"BPE\" (only byte-level BPE tokenizers are supported)");
  check_model(model->as_object());
  check_normalizer_decoder(r);
  read_vocab(model->as_object());
  read_added(r);
  read_merges(model->as_object());
  pre_result pre = read_pre(r);
  // Holes in the id space become unused placeholders, as llama.cpp's converter writes them.
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (types_[i] == type_unused && tokens_[i].empty()) tokens_[i] = "[PAD" + std::to_string(i) + "]";
  if (ids_in_.vocab_size > 0 && static_cast<int64_t>(tokens_.size()) != ids_in_.vocab_size)
    fail("has " + std::to_string(tokens_.size()) + " token ids but config.json's vocab_size is " +
         std::to_string(ids_in_.vocab_size));
  for (int64_t id : ids_in_.eog)
    if (id >= static_cast<int64_t>(tokens_.size()))
 throw model_error(ids_in_.eog_source.string(), "eos_token_id " + std::to_string(id) + " is outside the vocab of " +
                            std::to_string(tokens_.size()) + " tokens");
  meta_.set("tokenizer.ggml.model", std::string("gpt2"));
  meta_.set("tokenizer.ggml.pre", pre.name);
  if (pre.patterns) meta_.set("tokenizer.hf.pre_regex", std::move(*pre.patterns));
  if (!ids_in_.eog.empty()) meta_.set("tokenizer.hf.eog_token_ids", ids_in_.eog);
  read_config();
  meta_.set("tokenizer.ggml.tokens", std::move(tokens_));
  meta_.set("tokenizer.ggml.token_type", std::move(types_));
}

}  // namespace

void read_hf_tokenizer(const std::filesystem::path& dir, const tokenizer_ids& ids, model_metadata& meta) {
  reader(dir, ids, meta).run();
}

}  // namespace tandem::hf
