// The GLM-4.5 / GLM-5 call body, name<arg_key>k</arg_key><arg_value>v</arg_value>... with
// whitespace allowed between the parts, read as it arrives: the call begins at the first
// <arg_key> (or at </tool_call> when it has no arguments), each pair becomes "k":v of the
// arguments object, and a value the schema types as a string streams out while it is
// written. Other values are held to their </arg_value>: they are JSON when they parse as
// JSON, else a string. Keys and values are stripped of surrounding whitespace (as vLLM's
// glm4_moe parser reads them; xgrammar's glm_xml grammar allows it there as layout).
#include <boost/json.hpp>
#include <fmt/format.h>

#include <set>

#include "tool_body.hpp"

namespace tandem::http {
namespace {

constexpr std::string_view key_open = "<arg_key>", key_close = "</arg_key>";
constexpr std::string_view value_open = "<arg_value>", value_close = "</arg_value>";

// A value the schema makes a string: type "string", or a const / enum of strings only (the
// values GLM, and xgrammar's glm_xml style, write as raw text).
bool schema_says_string(const tool_function* fn, std::string_view key) {
  if (!fn) return false;
  const auto* props = fn->parameters.if_contains("properties");
  const auto* p = props && props->is_object() ? props->get_object().if_contains(key) : nullptr;
  const auto* o = p ? p->if_object() : nullptr;
  if (!o) return false;
  if (const auto* t = o->if_contains("type")) return t->is_string() && t->get_string() == "string";
  if (const auto* c = o->if_contains("const")) return c->is_string();
  const auto* e = o->if_contains("enum");
  if (!e || !e->is_array() || e->get_array().empty()) return false;
  for (const auto& v : e->get_array())
    if (!v.is_string()) return false;
  return true;
}

// `text` escaped as the inside of a JSON string.
std::string json_escaped(std::string_view text) {
  const std::string quoted = boost::json::serialize(boost::json::string(text));
  return quoted.substr(1, quoted.size() - 2);
}

// Bytes at the end of `text` that begin a UTF-8 character not yet complete (held back so an
// escaped fragment never splits a character).
size_t incomplete_utf8(std::string_view text) {
  for (size_t back = 1; back <= std::min<size_t>(3, text.size()); ++back) {
    const auto c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? back : 0;
  }
  return 0;
}

class glm4_reader final : public tool_body_reader {
 public:
  explicit glm4_reader(tool_call_writer& w) : w_(w) {}

  void push(std::string_view text) override {
    buf_ += text;
    while (!w_.failed() && step()) {
    }
  }

  void close() override {
    if (at_ == part::name) {
      if (!begin(buf_)) return;
      w_.arguments("{");
    } else if (at_ != part::between || !trim(buf_).empty()) {
      return w_.fail(fmt::format("the arguments of '{}' are not <arg_key>/<arg_value> pairs", name_));
    }
    w_.arguments("}");
    w_.end();
  }

 private:
  enum class part : uint8_t { name, key, before_value, value, between };

  // Consumes what can be decided of buf_; false when it needs more text.
  bool step() {
    switch (at_) {
      case part::name: {
        const size_t at = buf_.find(key_open);
        if (at == std::string::npos) return false;
        if (!begin(buf_.substr(0, at))) return false;
        w_.arguments("{");
        buf_.erase(0, at + key_open.size());
        at_ = part::key;
        return true;
      }
      case part::key: {
        const size_t at = buf_.find(key_close);
        if (at == std::string::npos) return false;
        key_ = std::string(trim(std::string_view(buf_).substr(0, at)));
        if (!keys_.insert(key_).second) {
          w_.fail(fmt::format("the call of '{}' names the argument '{}' twice", name_, key_));
          return false;
        }
        buf_.erase(0, at + key_close.size());
        at_ = part::before_value;
        return true;
      }
      case part::before_value:
        if (!expect(value_open)) return false;
        string_ = schema_says_string(w_.function(), key_);
        started_ = false;
        w_.arguments(fmt::format("{}\"{}\":{}", keys_.size() > 1 ? "," : "", json_escaped(key_), string_ ? "\"" : ""));
        at_ = part::value;
        return true;
      case part::value:
        return value();
      case part::between:
        if (!expect(key_open)) return false;
        at_ = part::key;
        return true;
    }
    return false;
  }

  bool begin(std::string_view text) {
    name_ = std::string(trim(text));
    if (name_.empty()) {
      w_.fail("the call has no function name");
      return false;
    }
    return w_.begin(name_);
  }

  // Whitespace, then `tag`: true once it is consumed; a failure on anything else.
  bool expect(std::string_view tag) {
    const size_t b = buf_.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return false;
    const std::string_view rest = std::string_view(buf_).substr(b);
    if (rest.size() < tag.size() && tag.starts_with(rest)) return false;
    if (!rest.starts_with(tag)) {
      w_.fail(fmt::format("the arguments of '{}' are not <arg_key>/<arg_value> pairs", name_));
      return false;
    }
    buf_.erase(0, b + tag.size());
    return true;
  }

  bool value() {
    if (string_ && !started_) {  // whitespace around a value is layout (vLLM strips it too)
      buf_.erase(0, std::min(buf_.find_first_not_of(" \t\r\n"), buf_.size()));
      if (buf_.empty()) return false;
      started_ = true;
    }
    const size_t at = buf_.find(value_close);
    if (at == std::string::npos) {
      if (!string_) return false;
      // A string value streams, all but what may be the start of </arg_value> or trailing
      // whitespace (held until text follows it).
      std::string_view ready = std::string_view(buf_).substr(0, buf_.size() - partial_tag(buf_, value_close));
      ready = ready.substr(0, std::min(ready.find_last_not_of(" \t\r\n") + 1, ready.size()));
      const size_t n = ready.size() - incomplete_utf8(ready);
      w_.arguments(json_escaped(ready.substr(0, n)));
      buf_.erase(0, n);
      return false;
    }
    const std::string_view raw = trim(std::string_view(buf_).substr(0, at));
    if (string_) {
      w_.arguments(json_escaped(raw) + "\"");
    } else {
      boost::system::error_code ec;
      boost::json::parse(raw, ec);
      w_.arguments(ec ? boost::json::serialize(boost::json::string(raw)) : compact_json(raw));
    }
    buf_.erase(0, at + value_close.size());
    at_ = part::between;
    return true;
  }

  tool_call_writer& w_;
  std::string buf_;  // received, not yet consumed
  part at_ = part::name;
  std::string name_, key_;
  std::set<std::string, std::less<>> keys_;
  bool string_ = false;   // the value being read is a string by the schema
  bool started_ = false;  // ... and its first non-space character has arrived
};

}  // namespace

std::unique_ptr<tool_body_reader> glm4_body_reader(tool_call_writer& w) { return std::make_unique<glm4_reader>(w); }

}  // namespace tandem::http
