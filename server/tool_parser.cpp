#include "tool_parser.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include "tool_body.hpp"

namespace tandem::http {
namespace {

constexpr std::string_view open_tag = "<tool_call>";
constexpr std::string_view close_tag = "</tool_call>";

// Consecutive pieces of one kind and call are one piece (a stream sends fewer chunks).
void add_piece(tool_call_parser::output& out, tool_piece::kind k, size_t index, std::string_view text) {
  if (text.empty() && k != tool_piece::kind::begin) return;
  if (!out.pieces.empty() && k != tool_piece::kind::begin && out.pieces.back().k == k && out.pieces.back().index == index) {
    out.pieces.back().text += text;
    return;
  }
  out.pieces.push_back({k, index, std::string(text), {}});
}

}  // namespace

std::string_view trim(std::string_view s) {
  const auto ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

std::string compact_json(std::string_view text) {
  std::string out;
  bool in_string = false, escape = false;
  for (char c : text) {
    if (in_string) {
      if (escape) escape = false;
      else if (c == '\\') escape = true;
      else if (c == '"') in_string = false;
    } else if (is_json_space(c)) {
      continue;
    } else if (c == '"') {
      in_string = true;
    }
    out += c;
  }
  return out;
}

size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

void tool_call_writer::content(std::string_view text) { add_piece(*out_, tool_piece::kind::content, 0, text); }

bool tool_call_writer::begin(const std::string& name) {
  fn_ = tools_->find(name);
  if (!fn_) {
    fail(fmt::format("the model called '{}', which is not in 'tools'", name));
    return false;
  }
  if (tools_->choice == tool_choice_kind::named && name != tools_->forced) {
    fail(fmt::format("the model called '{}' although tool_choice asked for '{}'", name, tools_->forced));
    return false;
  }
  name_ = name;
  arguments_.clear();
  add_piece(*out_, tool_piece::kind::begin, calls_, name);
  return true;
}

void tool_call_writer::arguments(std::string_view fragment) {
  arguments_ += fragment;
  add_piece(*out_, tool_piece::kind::arguments, calls_, fragment);
}

bool tool_call_writer::end() {
  boost::system::error_code ec;
  const boost::json::value args = boost::json::parse(arguments_, ec);
  if (ec || !args.is_object()) {
    fail(fmt::format("the arguments of '{}' are not a JSON object", name_));
    return false;
  }
  if (const auto* req = fn_->parameters.if_contains("required"); req && req->is_array())
    for (const auto& k : req->get_array())
      if (k.is_string() && !args.get_object().contains(k.get_string())) {
        fail(fmt::format("the call of '{}' lacks the required argument '{}'", name_, std::string_view(k.get_string())));
        return false;
      }
  out_->pieces.push_back({tool_piece::kind::end, calls_++, {}, {name_, arguments_}});
  fn_ = nullptr;
  return true;
}

void tool_call_writer::fail(std::string why) {
  if (error_.empty()) error_ = std::move(why);
}

std::optional<tool_format> tool_format_named(std::string_view name) {
  if (name == "hermes") return tool_format::hermes;
  if (name == "glm4" || name == "glm45" || name == "glm4_moe") return tool_format::glm4;
  return std::nullopt;
}

tool_format detect_tool_format(std::string_view template_source) {
  return template_source.find("<arg_key>") != std::string_view::npos ? tool_format::glm4 : tool_format::hermes;
}

tool_call_parser::tool_call_parser(tool_format format, const tool_request& tools)
    : format_(format), writer_(std::make_unique<tool_call_writer>(tools)) {}
tool_call_parser::~tool_call_parser() = default;

tool_call_parser::output tool_call_parser::push(std::string_view text) {
  output out;
  if (failed_) return out;
  writer_->to(&out);
  buffer_ += text;
  scan();
  report(out);
  return out;
}

tool_call_parser::output tool_call_parser::finish() {
  output out;
  if (failed_) return out;
  writer_->to(&out);
  if (in_call_) {
    body_ += buffer_;
    writer_->fail("the output ended inside a tool call");
  } else {
    writer_->content(buffer_);
  }
  buffer_.clear();
  report(out);
  return out;
}

void tool_call_parser::scan() {
  while (!writer_->failed()) {
    if (!in_call_) {
      const size_t at = buffer_.find(open_tag);
      if (at == std::string::npos) {
        const size_t keep = partial_tag(buffer_, open_tag);
        writer_->content(std::string_view(buffer_).substr(0, buffer_.size() - keep));
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      writer_->content(std::string_view(buffer_).substr(0, at));
      buffer_.erase(0, at + open_tag.size());
      in_call_ = true;
      body_.clear();
      reader_ = format_ == tool_format::glm4 ? glm4_body_reader(*writer_) : hermes_body_reader(*writer_);
    }
    const size_t end = buffer_.find(close_tag);
    if (end == std::string::npos) {
      feed_body(buffer_.size() - partial_tag(buffer_, close_tag));
      return;
    }
    feed_body(end);
    buffer_.erase(0, close_tag.size());
    body_ += close_tag;
    if (!writer_->failed()) reader_->close();
    in_call_ = false;
  }
}

// Hands the reader the first n bytes of buffer_.
void tool_call_parser::feed_body(size_t n) {
  const std::string piece = buffer_.substr(0, n);
  buffer_.erase(0, n);
  body_ += piece;
  reader_->push(piece);
}

// A failure ends the parse; its message shows the call as far as it was read.
void tool_call_parser::report(output& out) {
  writer_->to(nullptr);
  if (!writer_->failed()) return;
  failed_ = true;
  out.error = fmt::format("{}: {}{}", writer_->error(), open_tag, body_);
}

}  // namespace tandem::http
