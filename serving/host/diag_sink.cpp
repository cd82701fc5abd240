#include "diag_sink.hpp"

#include <algorithm>
#include <cstdlib>
#include <tuple>

namespace tandem {

std::string diagnostic::str() const {
  std::string s = pos.file;
  if (pos.line > 0) {
    s.append(":").append(std::to_string(pos.line));
    s.append(":").append(std::to_string(pos.col));
  }
  s += warning ? ": warning: " : ": error: ";
  if (!key_path.empty()) s += key_path + ": ";
  s += message;
  if (!hint.empty()) s += " (" + hint + ")";
  return s;
}

std::optional<std::string> getenv_lookup(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

namespace host_detail {
namespace {

int group_of(const source_pos& p) {
  if (p.file == environment_file) return 1;
  if (p.file == command_line_file) return 2;
  return 0;
}

}  // namespace

void diag_sink::add(std::vector<diagnostic>& to, diagnostic d) {
  // Two stages may find the same fault (e.g. a value the environment also sets); say it once.
  for (const diagnostic& x : to)
    if (x.pos.file == d.pos.file && x.pos.line == d.pos.line && x.pos.col == d.pos.col && x.key_path == d.key_path &&
        x.message == d.message)
      return;
  to.push_back(std::move(d));
}

void diag_sink::error(source_pos pos, std::string key_path, std::string message, std::string hint) {
  add(items_, {std::move(pos), std::move(key_path), std::move(message), std::move(hint)});
}

void diag_sink::warning(source_pos pos, std::string key_path, std::string message, std::string hint) {
  add(warnings_, {std::move(pos), std::move(key_path), std::move(message), std::move(hint), true});
}

std::vector<diagnostic> diag_sink::in_reading_order(std::vector<diagnostic> out) {
  std::stable_sort(out.begin(), out.end(), [](const diagnostic& a, const diagnostic& b) {
    int ga = group_of(a.pos), gb = group_of(b.pos);
    if (ga != gb) return ga < gb;
    if (ga == 1) return false;  // environment: in the order reported
    return std::tie(a.pos.line, a.pos.col) < std::tie(b.pos.line, b.pos.col);
  });
  return out;
}

std::vector<diagnostic> diag_sink::sorted() const { return in_reading_order(items_); }
std::vector<diagnostic> diag_sink::sorted_warnings() const { return in_reading_order(warnings_); }

}  // namespace host_detail
}  // namespace tandem
