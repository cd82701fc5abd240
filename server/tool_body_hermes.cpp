// The hermes call body, {"name": ..., "arguments": {...}} or a list of such objects, read
// one character at a time: a small JSON lexer tracks the nesting, so the call objects' keys
// are known as they close, the name is announced as soon as its string ends, and the
// arguments object streams out as it is written (whitespace outside strings dropped). Each
// call object is checked whole when it closes, the whole body at </tool_call>.
#include <boost/json.hpp>
#include <fmt/format.h>

#include <vector>

#include "tool_body.hpp"

namespace tandem::http {
namespace {

// The calls of a complete body, or why it is not one: {"name", "arguments"} or a list of
// them. "parameters" is accepted for "arguments" (llama.cpp does too); a string holding a
// JSON object is unwrapped.
std::vector<parsed_tool_call> hermes_calls(std::string_view body, std::string& error) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(trim(body), ec);
  if (ec) {
    error = fmt::format("the call is not valid JSON ({})", ec.message());
    return {};
  }
  std::vector<const boost::json::value*> items;
  if (const auto* arr = v.if_array())
    for (const auto& e : *arr) items.push_back(&e);
  else items.push_back(&v);
  std::vector<parsed_tool_call> out;
  for (const auto* item : items) {
    const auto* o = item->if_object();
    const auto* name = o ? o->if_contains("name") : nullptr;
    if (!name || !name->is_string()) {
      error = "the call has no \"name\" string";
      return {};
    }
    const auto* args = o->if_contains("arguments");
    if (!args) args = o->if_contains("parameters");
    if (!args) {
      error = fmt::format("the call of '{}' has no \"arguments\"", std::string_view(name->get_string()));
      return {};
    }
    boost::json::value a = *args;
    if (a.is_string()) {
      boost::json::value inner = boost::json::parse(a.get_string(), ec);
      if (!ec) a = std::move(inner);
    }
    if (!a.is_object()) {
      error = fmt::format("the arguments of '{}' are not a JSON object", std::string_view(name->get_string()));
      return {};
    }
    out.push_back({std::string(name->get_string()), boost::json::serialize(a)});
  }
  return out;
}

// A JSON string literal's value (the literal is complete and well formed by the lexer's
// account; nullopt if the JSON parser disagrees).
std::optional<std::string> string_value(const std::string& literal) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(literal, ec);
  if (ec || !v.is_string()) return std::nullopt;
  return std::string(v.get_string());
}

class hermes_reader final : public tool_body_reader {
 public:
  explicit hermes_reader(tool_call_writer& w) : w_(w) {}

  void push(std::string_view text) override {
    for (char c : text) {
      if (w_.failed()) return;
      feed(c);
    }
  }

  void close() override {
    std::string error;
    const auto calls = hermes_calls(body_, error);
    if (error.empty() && calls.size() != items_)
      error = "the call's JSON could not be followed as it was written";
    if (!error.empty()) w_.fail(error);
  }

 private:
  struct frame {
    bool object;
    bool expect_key;
  };
  enum class reading : uint8_t { nothing, key, name, arguments };
  static constexpr size_t not_calls = static_cast<size_t>(-1);

  bool at_call_level() const { return item_open_ && stack_.size() == call_depth_; }

  void feed(char c) {
    body_ += c;
    if (item_open_) item_ += c;
    if (in_string_) return string_char(c);
    if (is_json_space(c)) return;
    if (call_depth_ == 0) call_depth_ = c == '{' ? 1 : c == '[' ? 2 : not_calls;
    if (call_depth_ == not_calls) return;  // not a call: close() reports it
    // A scalar arguments value ends at the call object's next ',' or '}'.
    if (reading_ == reading::arguments && args_scalar_ && stack_.size() == args_level_ && (c == ',' || c == '}'))
      end_arguments();
    if (value_next_) {
      value_next_ = false;
      start_value(c);
    }
    if (reading_ == reading::arguments) add_arguments(c);
    structure(c);
  }

  void structure(char c) {
    switch (c) {
      case '{':
      case '[':
        stack_.push_back({c == '{', c == '{'});
        if (c == '{' && stack_.size() == call_depth_ && (call_depth_ == 1 || !stack_.front().object)) open_item();
        break;
      case '}':
      case ']': {
        if (stack_.empty()) return;  // unbalanced: close() reports it
        const bool closes_item = at_call_level();
        stack_.pop_back();
        if (reading_ == reading::arguments && !args_scalar_ && stack_.size() == args_level_) end_arguments();
        if (closes_item) close_item();
        break;
      }
      case ':':
        if (!stack_.empty() && stack_.back().object) stack_.back().expect_key = false;
        if (at_call_level()) value_next_ = true;
        break;
      case ',':
        if (!stack_.empty() && stack_.back().object) stack_.back().expect_key = true;
        break;
      case '"':
        in_string_ = true;
        if (at_call_level() && stack_.back().expect_key) reading_ = reading::key;
        if (reading_ == reading::key || reading_ == reading::name) literal_ = "\"";
        break;
      default:
        break;
    }
  }

  void string_char(char c) {
    if (reading_ == reading::key || reading_ == reading::name) literal_ += c;
    if (reading_ == reading::arguments) add_arguments(c);
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      string_end();
    }
  }

  void string_end() {
    if (reading_ == reading::key) {
      key_ = string_value(literal_).value_or("");
      reading_ = reading::nothing;
    } else if (reading_ == reading::name) {
      reading_ = reading::nothing;
      if (auto n = string_value(literal_); n && name_.empty() && !begun_) {
        name_ = *n;
        announce();
      }
    } else if (reading_ == reading::arguments && args_string_ && stack_.size() == args_level_) {
      end_arguments();
    }
  }

  // The first character of a value of the call object.
  void start_value(char c) {
    if (key_ == "name" && c == '"') {
      reading_ = reading::name;
    } else if (key_ == "arguments" || key_ == "parameters") {
      if (args_seen_) return w_.fail("the call has more than one \"arguments\"");
      args_seen_ = true;
      reading_ = reading::arguments;
      args_level_ = stack_.size();
      args_string_ = c == '"';
      args_scalar_ = c != '"' && c != '{' && c != '[';
      args_streamed_ = c == '{';
    }
  }

  void add_arguments(char c) {
    args_ += c;
    if (begun_ && args_streamed_) {
      w_.arguments(std::string_view(args_).substr(args_sent_));
      args_sent_ = args_.size();
    }
  }

  void end_arguments() {
    reading_ = reading::nothing;
    args_done_ = true;
    // Stringified arguments ("{\"city\": ...}") are unwrapped when they hold JSON.
    if (args_string_)
      if (auto inner = string_value(args_)) {
        boost::system::error_code ec;
        boost::json::parse(*inner, ec);
        if (!ec) args_ = compact_json(*inner);
      }
    announce();
  }

  // The name is known: the call begins, with whatever of its arguments came first.
  void announce() {
    if (name_.empty()) return;
    if (!begun_) {
      if (!w_.begin(name_)) return;
      begun_ = true;
    }
    if ((args_streamed_ || args_done_) && args_sent_ < args_.size()) {
      w_.arguments(std::string_view(args_).substr(args_sent_));
      args_sent_ = args_.size();
    }
  }

  void open_item() {
    item_open_ = true;
    item_ = "{";
    key_.clear();
    name_.clear();
    args_.clear();
    args_sent_ = 0;
    begun_ = args_seen_ = args_done_ = args_string_ = args_scalar_ = args_streamed_ = false;
  }

  void close_item() {
    item_open_ = false;
    std::string error;
    hermes_calls(item_, error);
    if (!error.empty()) return w_.fail(error);
    if (!begun_ || !args_done_) return w_.fail("the call's JSON could not be followed as it was written");
    if (w_.end()) ++items_;
  }

  tool_call_writer& w_;
  std::string body_;
  // The lexer.
  std::vector<frame> stack_;
  bool in_string_ = false, escape_ = false;
  size_t call_depth_ = 0;  // 1: the body is a call object; 2: a list of them; 0: not yet known
  // The call object being read.
  bool item_open_ = false;
  std::string item_;     // its text, checked whole when it closes
  std::string key_;      // the last key of the call object
  std::string literal_;  // the string literal of a key or of the name, as it arrives
  reading reading_ = reading::nothing;
  bool value_next_ = false;  // a ':' of the call object: a value starts next
  std::string name_;
  bool begun_ = false;
  size_t args_level_ = 0;  // the nesting the arguments value starts at
  std::string args_;       // the arguments, without whitespace outside strings
  size_t args_sent_ = 0;
  bool args_seen_ = false, args_done_ = false;
  bool args_string_ = false;    // a JSON string holding the arguments
  bool args_scalar_ = false;    // neither string, object nor list (an error at the end)
  bool args_streamed_ = false;  // an object: streamed while it is written
  size_t items_ = 0;            // call objects complete and valid
};

}  // namespace

std::unique_ptr<tool_body_reader> hermes_body_reader(tool_call_writer& w) { return std::make_unique<hermes_reader>(w); }

}  // namespace tandem::http
