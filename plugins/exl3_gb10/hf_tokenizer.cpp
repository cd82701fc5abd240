// tokenizer.json / tokenizer_config.json -> the tokenizer.ggml.* keys llama.cpp writes for
// a byte-level BPE model, so tandem's tokenizer reads an EXL3 directory as it reads GGUF.
#include <fstream>
#include <iterator>
#include <map>

#include <boost/json.hpp>

#include "hf_config.hpp"
#include "tandem/error.hpp"

namespace tandem::exl3_plugin {
namespace json = boost::json;
namespace {

constexpr int64_t type_normal = 1, type_control = 3, type_user_defined = 4, type_unused = 5;

class reader {
 public:
  reader(const std::filesystem::path& dir, const llama_config& cfg, model_metadata& meta)
      : dir_(dir), cfg_(cfg), meta_(meta), file_((dir / "tokenizer.json").string()) {}
  void run();

 private:
  [[noreturn]] void fail(const std::string& what) const { throw model_error(file_, what); }
  void read_vocab(const json::object& model);
  void read_added(const json::object& root);
  void read_merges(const json::object& model);
  std::string read_pre(const json::object& root) const;
  void read_config();
  int64_t id_of_token(const json::value* v) const;

  std::filesystem::path dir_;
  const llama_config& cfg_;
  model_metadata& meta_;
  std::string file_;
  std::vector<std::string> tokens_;
  std::vector<int64_t> types_;
  std::map<std::string, int64_t> ids_;
};

void reader::read_vocab(const json::object& model) {
  const json::value* vocab = model.if_contains("vocab");
  if (!vocab || !vocab->is_object()) fail("model.vocab is not an object");
  int64_t n = cfg_.vocab;
  for (const auto& kv : vocab->as_object()) {
    if (!kv.value().is_int64() || kv.value().get_int64() < 0 || kv.value().get_int64() >= (1 << 24))
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
    if (!id || !id->is_int64() || id->get_int64() < 0 || id->get_int64() >= (1 << 24) || !content ||
        !content->is_string())
      fail("added_tokens entry " + json::serialize(a) + " needs an id and a content");
    const int64_t i = id->get_int64();
    if (i >= static_cast<int64_t>(tokens_.size())) {
      tokens_.resize(i + 1);
      types_.resize(i + 1, type_unused);
    }
    const json::value* special = o->if_contains("special");
    tokens_[i] = std::string(content->as_string());
    types_[i] = special && special->is_bool() && special->get_bool() ? type_control : type_user_defined;
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

// The pre-tokenizer by what it does: byte-level with GPT-2's regex is "gpt2"; preceded by
// a split of every digit (SmolLM2, StarCoder) it is "smollm". Others are not supported.
std::string reader::read_pre(const json::object& root) const {
  const json::value* pre = root.if_contains("pre_tokenizer");
  if (!pre || !pre->is_object()) fail("pre_tokenizer is missing");
  std::vector<const json::object*> steps;
  const json::object& p = pre->as_object();
  const json::value* type = p.if_contains("type");
  if (type && type->is_string() && type->as_string() == "Sequence") {
    const json::value* list = p.if_contains("pretokenizers");
    if (!list || !list->is_array()) fail("pre_tokenizer.pretokenizers is not an array");
    for (const auto& s : list->as_array())
      if (s.is_object()) steps.push_back(&s.as_object());
  } else {
    steps.push_back(&p);
  }
  bool digits = false, byte_level = false;
  for (const json::object* s : steps) {
    const json::value* t = s->if_contains("type");
    const std::string name = t && t->is_string() ? std::string(t->as_string()) : "?";
    const json::value* flag = s->if_contains(name == "Digits" ? "individual_digits" : "use_regex");
    const bool on = !flag || (flag->is_bool() && flag->get_bool());
    if (name == "Digits" && on && !byte_level) digits = true;
    else if (name == "ByteLevel" && on) byte_level = true;
    else fail("pre_tokenizer step " + json::serialize(*s) + " is not supported (supported: "
              "ByteLevel with GPT-2's regex, optionally after Digits(individual_digits))");
  }
  if (!byte_level) fail("pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
  return digits ? "smollm" : "gpt2";
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
  const json::object& c = cfg_.raw.as_object();
  auto set_id = [&](const char* key, const char* tc_key, const char* cfg_key) {
    int64_t id = id_of_token(t.if_contains(tc_key));
    if (id < 0 && cfg_key) {
      const json::value* v = c.if_contains(cfg_key);
      if (v && v->is_int64() && v->get_int64() >= 0 && v->get_int64() < static_cast<int64_t>(tokens_.size()))
        id = v->get_int64();
    }
    if (id >= 0) meta_.set(key, id);
  };
  set_id("tokenizer.ggml.bos_token_id", "bos_token", "bos_token_id");
  set_id("tokenizer.ggml.eos_token_id", "eos_token", "eos_token_id");
  set_id("tokenizer.ggml.unknown_token_id", "unk_token", nullptr);
  set_id("tokenizer.ggml.padding_token_id", "pad_token", "pad_token_id");
  if (const json::value* b = t.if_contains("add_bos_token"); b && b->is_bool())
    meta_.set("tokenizer.ggml.add_bos_token", b->get_bool());
  if (const json::value* b = t.if_contains("add_eos_token"); b && b->is_bool())
    meta_.set("tokenizer.ggml.add_eos_token", b->get_bool());
  // The chat template: chat_template.jinja (newer transformers) wins over the config field.
  const auto jinja = dir_ / "chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) {
    std::ifstream in(jinja, std::ios::binary);
    meta_.set("tokenizer.chat_template",
              std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()));
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
  read_vocab(model->as_object());
  read_added(r);
  read_merges(model->as_object());
  const std::string pre = read_pre(r);
  // Holes in the id space become unused placeholders, as llama.cpp's converter writes them.
  for (size_t i = 0; i < tokens_.size(); ++i)
    if (types_[i] == type_unused && tokens_[i].empty()) tokens_[i] = "[PAD" + std::to_string(i) + "]";
  if (static_cast<int64_t>(tokens_.size()) != cfg_.vocab)
    fail("has " + std::to_string(tokens_.size()) + " token ids but config.json's vocab_size is " +
         std::to_string(cfg_.vocab));
  meta_.set("tokenizer.ggml.model", std::string("gpt2"));
  meta_.set("tokenizer.ggml.pre", pre);
  read_config();
  meta_.set("tokenizer.ggml.tokens", std::move(tokens_));
  meta_.set("tokenizer.ggml.token_type", std::move(types_));
}

}  // namespace

void read_hf_tokenizer(const std::filesystem::path& dir, const llama_config& cfg, model_metadata& meta) {
  reader(dir, cfg, meta).run();
}

}  // namespace tandem::exl3_plugin
